/*
 * Dirty page logging: the log's checks, mapping and bitmap arithmetic.
 *
 * Theory of operation
 * -------------------
 * A VhostLog is one mapping of the log a front-end sent with SET_LOG_BASE,
 * shared by the server and every ring that logs into it, and unmapped
 * when the last of them lets go: the front-end may send a bigger log
 * while rings run (after memory hotplug), and the server switches every
 * ring to it in the ring's home thread before dropping the old one.
 *
 * Arithmetic.  The bit of guest physical address a is bit (p % 8) of byte
 * p / 8, with p = a / VHOST_LOG_PAGE.  A range [gpa, gpa + len) touches
 * pages first = gpa / PAGE to last = (gpa + len - 1) / PAGE, whatever its
 * alignment; vhost_log_mark() sets their bits a byte at a time, with one
 * atomic OR per byte of the bitmap (a partial mask in the first and last
 * byte, 0xff in between).  A log covers addresses below 8 * size pages;
 * bits past it are dropped, never written.
 *
 * Checks.  The front-end is not trusted: the range it names must lie in
 * its file (an access past the end of a file raises SIGBUS, which would
 * take the whole daemon down) and must not wrap; the log must be big
 * enough for the highest page of the memory table, so that every address
 * a descriptor may name has its bit.  QEMU seals its log memfd against
 * shrinking; a seal is not required here (guest memory itself is not
 * sealed either), so a front-end that shrinks the file after sending it
 * can still fault us, as it can with its memory.
 *
 * Threads: any (see the header).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>
#include <glib.h>

#include "hw/virtio/vhost-log.h"

struct VhostLog {
    _Atomic int refcnt;
    void *addr;                  /* what mmap() returned */
    size_t len;
    _Atomic uint8_t *bits;       /* addr + the offset's slack */
    uint64_t size;               /* bytes of bitmap */
};

/* ------------------------------------------------------------------------ */
/* Sizes                                                                     */

uint64_t vhost_log_bytes_for(uint64_t end)
{
    uint64_t pages = end / VHOST_LOG_PAGE + (end % VHOST_LOG_PAGE != 0);

    return pages / 8 + (pages % 8 != 0);
}

uint64_t vhost_log_bytes_for_memory(const GuestMemory *mem)
{
    uint64_t end = 0;

    /* Regions never wrap (guest_memory_add() checks gpa + size). */
    for (unsigned i = 0; mem && i < mem->nregions; i++) {
        end = MAX(end, mem->regions[i].gpa + mem->regions[i].size);
    }
    return vhost_log_bytes_for(end);
}

bool vhost_log_covers(const VhostLog *log, const GuestMemory *mem,
                      const char *what, Error **errp)
{
    uint64_t need = vhost_log_bytes_for_memory(mem);

    if (log->size < need) {
        error_setg(errp, "%s: a dirty log of %" PRIu64 " bytes covers "
                   "guest memory up to 0x%" PRIx64 ", the memory table "
                   "needs %" PRIu64 " bytes", what, log->size,
                   log->size * 8 * VHOST_LOG_PAGE, need);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Mapping                                                                   */

VhostLog *vhost_log_map(int fd, uint64_t mmap_size, uint64_t mmap_offset,
                        const GuestMemory *mem, Error **errp)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t slack = mmap_offset % page;
    VhostLog log = { .size = mmap_size }, *r;
    void *addr;

    if (mmap_size == 0) {
        error_setg(errp, "SET_LOG_BASE with an empty log");
        return NULL;
    }
    if (!vhost_log_covers(&log, mem, "SET_LOG_BASE", errp) ||
        !guest_memory_fd_holds(fd, mmap_offset, mmap_size,
                               "SET_LOG_BASE: a dirty log", errp)) {
        return NULL;
    }
    /* Inside a file, so no overflow: offset + size <= st_size. */
    if (mmap_size + slack > SIZE_MAX) {
        error_setg(errp, "SET_LOG_BASE: a log of %" PRIu64 " bytes is too "
                   "large to map", mmap_size);
        return NULL;
    }
    addr = mmap(NULL, (size_t)(mmap_size + slack), PROT_READ | PROT_WRITE,
                MAP_SHARED, fd, (off_t)(mmap_offset - slack));
    if (addr == MAP_FAILED) {
        error_setg_errno(errp, errno, "SET_LOG_BASE: cannot map %" PRIu64
                         " bytes at offset %" PRIu64, mmap_size,
                         mmap_offset);
        return NULL;
    }
    r = g_new0(VhostLog, 1);
    atomic_init(&r->refcnt, 1);
    r->addr = addr;
    r->len = (size_t)(mmap_size + slack);
    r->bits = (_Atomic uint8_t *)((uint8_t *)addr + slack);
    r->size = mmap_size;
    return r;
}

VhostLog *vhost_log_ref(VhostLog *log)
{
    if (log) {
        atomic_fetch_add_explicit(&log->refcnt, 1, memory_order_relaxed);
    }
    return log;
}

void vhost_log_unref(VhostLog *log)
{
    /* acq_rel: every marker's ORs happen before the munmap(). */
    if (log && atomic_fetch_sub_explicit(&log->refcnt, 1,
                                         memory_order_acq_rel) == 1) {
        munmap(log->addr, log->len);
        g_free(log);
    }
}

uint64_t vhost_log_size(const VhostLog *log)
{
    return log->size;
}

const uint8_t *vhost_log_bitmap(const VhostLog *log)
{
    return (const uint8_t *)log->bits;
}

/* ------------------------------------------------------------------------ */
/* Marking                                                                   */

/* The bits of pages [first, last] that fall in byte b of the bitmap. */
static uint8_t vhost_log_byte_mask(uint64_t b, uint64_t first, uint64_t last)
{
    unsigned lo = b == first / 8 ? first % 8 : 0;
    unsigned hi = b == last / 8 ? last % 8 : 7;

    return (uint8_t)((0xffu >> (7 - hi)) & (0xffu << lo));
}

void vhost_log_mark(VhostLog *log, uint64_t gpa, uint64_t len)
{
    uint64_t first, last, end;

    if (len == 0) {
        return;
    }
    first = gpa / VHOST_LOG_PAGE;
    /* A range that wraps ends at the top of the address space. */
    end = gpa + len - 1 < gpa ? UINT64_MAX : gpa + len - 1;
    last = MIN(end / VHOST_LOG_PAGE, log->size * 8 - 1);
    for (uint64_t b = first / 8; b <= last / 8 && first <= last; b++) {
        /* Relaxed: the bit only; the used index's release store orders
         * it before the driver can see the request done. */
        atomic_fetch_or_explicit(&log->bits[b],
                                 vhost_log_byte_mask(b, first, last),
                                 memory_order_relaxed);
    }
}

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
    SharedMapping map;           /* first: the reference count */
    _Atomic uint8_t *bits;       /* the byte at the log's offset */
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
    VhostLog log = { .size = mmap_size }, *r;
    uint8_t *bits;

    if (mmap_size == 0) {
        error_setg(errp, "SET_LOG_BASE with an empty log");
        return NULL;
    }
    if (!vhost_log_covers(&log, mem, "SET_LOG_BASE", errp) ||
        !guest_memory_fd_holds(fd, mmap_offset, mmap_size,
                               "SET_LOG_BASE: a dirty log", errp)) {
        return NULL;
    }
    r = g_new0(VhostLog, 1);
    bits = shared_mapping_map(&r->map, fd, mmap_offset, mmap_size,
                              "SET_LOG_BASE", errp);
    if (!bits) {
        g_free(r);
        return NULL;
    }
    r->bits = (_Atomic uint8_t *)bits;
    r->size = mmap_size;
    return r;
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

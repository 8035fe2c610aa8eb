/*
 * Guest memory table: the regions a vhost-user front-end shares with us.
 *
 * Theory of operation.  Each region the front-end describes (GPA, size,
 * front-end virtual address, offset in an fd) is mapped once with
 * mmap(MAP_SHARED).  mmap() wants a page-aligned file offset, so we map from
 * the aligned offset below mmap_offset and remember the slack: the region's
 * first byte is at mapping + slack.  A GuestMemMapping owns one mmap and is
 * reference counted by every table that contains its region.
 *
 * A GuestMemory table is immutable.  guest_memory_add() and
 * guest_memory_remove() build a new table that shares the mappings of the
 * regions it keeps (taking a reference on each), so a table change never
 * remaps a region that survives it, and a queue still using the old table
 * keeps every old mapping alive until it drops its reference.  The table is
 * itself reference counted; the last unref drops the mappings, and the last
 * reference to a mapping unmaps it.
 *
 * Regions are kept sorted by GPA and never overlap, so a GPA is found by
 * binary search (descriptor translation is the hot path).  Front-end
 * addresses (QVA) are translated only when a queue starts, by a linear
 * scan.  Every check is written so that no addition can wrap: guest input
 * is untrusted.
 *
 * Threads: tables are built in the main thread; translation and reference
 * counting may happen in any thread that holds a reference.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib.h>

#include "hw/virtio/guest-memory.h"

struct GuestMemMapping {
    _Atomic int refcnt;
    void *addr;              /* what mmap() returned */
    size_t len;              /* what was mapped */
};

/* ------------------------------------------------------------------------ */
/* Mappings                                                                 */

static GuestMemMapping *guest_mem_mapping_ref(GuestMemMapping *m)
{
    atomic_fetch_add_explicit(&m->refcnt, 1, memory_order_relaxed);
    return m;
}

static void guest_mem_mapping_unref(GuestMemMapping *m)
{
    /* acq_rel: every user's accesses happen before the munmap(). */
    if (atomic_fetch_sub_explicit(&m->refcnt, 1, memory_order_acq_rel) == 1) {
        munmap(m->addr, m->len);
        g_free(m);
    }
}

/*
 * The alignment mmap() needs for the file offset of fd: the page size, or
 * the file's block size if that is a larger power of two (hugetlbfs reports
 * its huge page size there and refuses offsets that are not multiples).
 */
static uint64_t guest_mem_map_alignment(int fd)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    struct stat st;

    if (fstat(fd, &st) == 0 && st.st_blksize > 0 &&
        (uint64_t)st.st_blksize > page &&
        ((uint64_t)st.st_blksize & ((uint64_t)st.st_blksize - 1)) == 0 &&
        (uint64_t)st.st_blksize <= (1ULL << 30)) {
        return (uint64_t)st.st_blksize;
    }
    return page;
}

/*
 * Shared memory must lie within its file: mmap() maps past the end
 * without complaint, and the first access there raises SIGBUS, which
 * would take the whole daemon down (found by tests/fuzz/fuzz-vhost-user).
 * Regular files, memfds and hugetlbfs files have a size to check; other
 * fds (a device) are left to mmap().  A front-end that shrinks the file
 * after sending it could still cause SIGBUS; QEMU's memfd backends are
 * sealed against shrinking (seal=on, the default).
 */
bool guest_memory_fd_holds(int fd, uint64_t offset, uint64_t size,
                           const char *what, Error **errp)
{
    struct stat st;
    uint64_t end;

    if (fstat(fd, &st) < 0) {
        error_setg_errno(errp, errno, "%s: cannot stat the fd", what);
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        return true;
    }
    if (__builtin_add_overflow(offset, size, &end) ||
        end > (uint64_t)st.st_size) {
        error_setg(errp, "%s of %" G_GUINT64_FORMAT " bytes at fd offset "
                   "0x%" G_GINT64_MODIFIER "x runs past the end of its file "
                   "(%" G_GINT64_MODIFIER "d bytes)", what, size, offset,
                   (gint64)st.st_size);
        return false;
    }
    return true;
}

uint8_t *shared_mapping_map(SharedMapping *m, int fd, uint64_t offset,
                            uint64_t size, const char *what, Error **errp)
{
    uint64_t slack = offset % (uint64_t)sysconf(_SC_PAGESIZE);
    void *addr;

    if (size > SIZE_MAX - slack) {
        error_setg(errp, "%s: %" G_GUINT64_FORMAT " bytes are too many to "
                   "map", what, size);
        return NULL;
    }
    addr = mmap(NULL, (size_t)(size + slack), PROT_READ | PROT_WRITE,
                MAP_SHARED, fd, (off_t)(offset - slack));
    if (addr == MAP_FAILED) {
        error_setg_errno(errp, errno, "%s: cannot map %" G_GUINT64_FORMAT
                         " bytes at fd offset 0x%" G_GINT64_MODIFIER "x",
                         what, size, offset);
        return NULL;
    }
    atomic_init(&m->refcnt, 1);
    m->addr = addr;
    m->len = (size_t)(size + slack);
    return (uint8_t *)addr + slack;
}

void *shared_mapping_ref(void *obj)
{
    SharedMapping *m = obj;

    if (m) {
        atomic_fetch_add_explicit(&m->refcnt, 1, memory_order_relaxed);
    }
    return obj;
}

void shared_mapping_unref(void *obj)
{
    SharedMapping *m = obj;

    /* acq_rel: every user's stores happen before the munmap(). */
    if (m && atomic_fetch_sub_explicit(&m->refcnt, 1,
                                       memory_order_acq_rel) == 1) {
        munmap(m->addr, m->len);
        g_free(obj);
    }
}

/*
 * Map [mmap_offset, mmap_offset + size) of fd.  On success *host is where
 * the byte at mmap_offset landed.
 */
static GuestMemMapping *guest_mem_mapping_new(int fd, uint64_t mmap_offset,
                                              uint64_t size, uint8_t **host,
                                              Error **errp)
{
    uint64_t align = guest_mem_map_alignment(fd);
    uint64_t map_offset = mmap_offset & ~(align - 1);
    uint64_t slack = mmap_offset - map_offset;
    uint64_t len;
    GuestMemMapping *m;
    void *addr;

    /* size + slack, rounded up to whole units of align (hugetlbfs maps
     * whole huge pages only). */
    if (__builtin_add_overflow(size, slack + align - 1, &len) ||
        (len & ~(align - 1)) > SIZE_MAX) {
        error_setg(errp, "guest memory region of %" G_GUINT64_FORMAT
                   " bytes is too large to map", size);
        return NULL;
    }
    len &= ~(align - 1);
    if (!guest_memory_fd_holds(fd, mmap_offset, size, "guest memory region",
                               errp)) {
        return NULL;
    }
    addr = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_NORESERVE, fd, (off_t)map_offset);
    if (addr == MAP_FAILED) {
        error_setg_errno(errp, errno, "cannot map guest memory region "
                         "(%" G_GUINT64_FORMAT " bytes at fd offset 0x%"
                         G_GINT64_MODIFIER "x)", size, mmap_offset);
        return NULL;
    }
    m = g_new0(GuestMemMapping, 1);
    atomic_init(&m->refcnt, 1);
    m->addr = addr;
    m->len = (size_t)len;
    *host = (uint8_t *)addr + slack;
    return m;
}

/* ------------------------------------------------------------------------ */
/* Tables                                                                   */

static GuestMemory *guest_memory_alloc(unsigned nregions)
{
    GuestMemory *mem = g_malloc0(sizeof(*mem) +
                                 nregions * sizeof(mem->regions[0]));

    atomic_init(&mem->refcnt, 1);
    mem->nregions = nregions;
    return mem;
}

GuestMemory *guest_memory_new_empty(void)
{
    return guest_memory_alloc(0);
}

GuestMemory *guest_memory_ref(GuestMemory *mem)
{
    atomic_fetch_add_explicit(&mem->refcnt, 1, memory_order_relaxed);
    return mem;
}

void guest_memory_unref(GuestMemory *mem)
{
    if (!mem) {
        return;
    }
    /* acq_rel: every user's accesses happen before the mappings go. */
    if (atomic_fetch_sub_explicit(&mem->refcnt, 1, memory_order_acq_rel) != 1) {
        return;
    }
    for (unsigned i = 0; i < mem->nregions; i++) {
        guest_mem_mapping_unref(mem->regions[i].mapping);
    }
    g_free(mem);
}

/* Copy region r into slot dst, sharing its mapping. */
static void guest_memory_copy_region(GuestMemRegion *dst,
                                     const GuestMemRegion *r)
{
    *dst = *r;
    guest_mem_mapping_ref(dst->mapping);
}

/* Validate desc on its own: size, and no address range that wraps. */
static bool guest_memory_check_desc(const GuestMemRegionDesc *desc,
                                    Error **errp)
{
    uint64_t end;

    if (desc->size == 0) {
        error_setg(errp, "guest memory region at GPA 0x%" G_GINT64_MODIFIER
                   "x has size 0", desc->gpa);
        return false;
    }
    if (__builtin_add_overflow(desc->gpa, desc->size, &end)) {
        error_setg(errp, "guest memory region at GPA 0x%" G_GINT64_MODIFIER
                   "x with size 0x%" G_GINT64_MODIFIER "x wraps around",
                   desc->gpa, desc->size);
        return false;
    }
    if (__builtin_add_overflow(desc->qva, desc->size, &end)) {
        error_setg(errp, "guest memory region at front-end address 0x%"
                   G_GINT64_MODIFIER "x with size 0x%" G_GINT64_MODIFIER
                   "x wraps around", desc->qva, desc->size);
        return false;
    }
    if (__builtin_add_overflow(desc->mmap_offset, desc->size, &end) ||
        end > (uint64_t)INT64_MAX) {
        error_setg(errp, "guest memory region at fd offset 0x%"
                   G_GINT64_MODIFIER "x with size 0x%" G_GINT64_MODIFIER
                   "x is beyond the largest file offset",
                   desc->mmap_offset, desc->size);
        return false;
    }
    return true;
}

/* Index at which a region starting at gpa goes to keep the table sorted. */
static unsigned guest_memory_insert_pos(const GuestMemory *mem, uint64_t gpa)
{
    unsigned lo = 0, hi = mem ? mem->nregions : 0;

    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;

        if (mem->regions[mid].gpa < gpa) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* A region of mem that [gpa, gpa + size) intersects, or NULL. */
static const GuestMemRegion *guest_memory_find_overlap(const GuestMemory *mem,
                                                       uint64_t gpa,
                                                       uint64_t size)
{
    for (unsigned i = 0; mem && i < mem->nregions; i++) {
        const GuestMemRegion *r = &mem->regions[i];

        /* Both ranges are known not to wrap (checked when added). */
        if (gpa < r->gpa + r->size && r->gpa < gpa + size) {
            return r;
        }
    }
    return NULL;
}

GuestMemory *guest_memory_add(const GuestMemory *old,
                              const GuestMemRegionDesc *desc, int fd,
                              Error **errp)
{
    unsigned n = old ? old->nregions : 0;
    const GuestMemRegion *clash;
    GuestMemMapping *mapping;
    GuestMemory *mem;
    uint8_t *host;
    unsigned pos;

    if (!guest_memory_check_desc(desc, errp)) {
        return NULL;
    }
    if (n >= GUEST_MEMORY_MAX_SLOTS) {
        error_setg(errp, "too many guest memory regions (at most %d)",
                   GUEST_MEMORY_MAX_SLOTS);
        return NULL;
    }
    clash = guest_memory_find_overlap(old, desc->gpa, desc->size);
    if (clash) {
        error_setg(errp, "guest memory region [0x%" G_GINT64_MODIFIER "x, +0x%"
                   G_GINT64_MODIFIER "x) overlaps region [0x%"
                   G_GINT64_MODIFIER "x, +0x%" G_GINT64_MODIFIER "x)",
                   desc->gpa, desc->size, clash->gpa, clash->size);
        return NULL;
    }
    if (fd < 0) {
        error_setg(errp, "guest memory region at GPA 0x%" G_GINT64_MODIFIER
                   "x came without a file descriptor", desc->gpa);
        return NULL;
    }
    mapping = guest_mem_mapping_new(fd, desc->mmap_offset, desc->size, &host,
                                    errp);
    if (!mapping) {
        return NULL;
    }

    mem = guest_memory_alloc(n + 1);
    pos = guest_memory_insert_pos(old, desc->gpa);
    for (unsigned i = 0; i < pos; i++) {
        guest_memory_copy_region(&mem->regions[i], &old->regions[i]);
    }
    mem->regions[pos] = (GuestMemRegion) {
        .gpa = desc->gpa,
        .size = desc->size,
        .qva = desc->qva,
        .mmap_offset = desc->mmap_offset,
        .host = host,
        .mapping = mapping,
    };
    for (unsigned i = pos; i < n; i++) {
        guest_memory_copy_region(&mem->regions[i + 1], &old->regions[i]);
    }
    return mem;
}

GuestMemory *guest_memory_remove(const GuestMemory *old,
                                 const GuestMemRegionDesc *desc, Error **errp)
{
    unsigned n = old ? old->nregions : 0;
    unsigned victim = n;
    GuestMemory *mem;

    for (unsigned i = 0; i < n; i++) {
        const GuestMemRegion *r = &old->regions[i];

        if (r->gpa == desc->gpa && r->size == desc->size &&
            r->qva == desc->qva) {
            victim = i;
            break;
        }
    }
    if (victim == n) {
        error_setg(errp, "no guest memory region at GPA 0x%" G_GINT64_MODIFIER
                   "x with size 0x%" G_GINT64_MODIFIER "x and front-end "
                   "address 0x%" G_GINT64_MODIFIER "x to remove",
                   desc->gpa, desc->size, desc->qva);
        return NULL;
    }

    mem = guest_memory_alloc(n - 1);
    for (unsigned i = 0, j = 0; i < n; i++) {
        if (i != victim) {
            guest_memory_copy_region(&mem->regions[j++], &old->regions[i]);
        }
    }
    return mem;
}

/* ------------------------------------------------------------------------ */
/* Translation                                                              */

/* The region containing gpa, or NULL.  Binary search: the hot path. */
static const GuestMemRegion *guest_memory_find(const GuestMemory *mem,
                                               uint64_t gpa)
{
    const GuestMemRegion *r;
    unsigned lo = 0, hi = mem->nregions;

    /* Find the first region starting above gpa; the one before may hold it. */
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;

        if (mem->regions[mid].gpa <= gpa) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo == 0) {
        return NULL;
    }
    r = &mem->regions[lo - 1];
    return gpa - r->gpa < r->size ? r : NULL;
}

void *guest_memory_gpa_to_host(const GuestMemory *mem, uint64_t gpa,
                               uint64_t len)
{
    const GuestMemRegion *r;
    uint64_t off;

    if (!mem) {
        return NULL;
    }
    r = guest_memory_find(mem, gpa);
    if (!r) {
        return NULL;
    }
    off = gpa - r->gpa;
    if (len > r->size - off) {     /* off < size: no wrap on either side */
        return NULL;
    }
    return r->host + off;
}

void *guest_memory_qva_to_host(const GuestMemory *mem, uint64_t qva,
                               uint64_t len)
{
    for (unsigned i = 0; mem && i < mem->nregions; i++) {
        const GuestMemRegion *r = &mem->regions[i];
        uint64_t off = qva - r->qva;

        /* qva < r->qva wraps off to a huge value that fails the test. */
        if (qva >= r->qva && off < r->size && len <= r->size - off) {
            return r->host + off;
        }
    }
    return NULL;
}

int guest_memory_map_iov(const GuestMemory *mem, uint64_t gpa, uint64_t len,
                         struct iovec *iov, unsigned *niov, unsigned max)
{
    uint64_t end;
    unsigned n = *niov;

    /* Work on a copy of *niov: a failed call appends nothing. */
    if (!mem || __builtin_add_overflow(gpa, len, &end)) {
        return -EFAULT;
    }
    while (len > 0) {
        const GuestMemRegion *r = guest_memory_find(mem, gpa);
        uint64_t off, chunk;

        if (!r) {
            return -EFAULT;
        }
        if (n >= max) {
            return -ENOBUFS;
        }
        off = gpa - r->gpa;
        chunk = MIN(len, r->size - off);
        iov[n].iov_base = r->host + off;
        iov[n].iov_len = (size_t)chunk;
        n++;
        gpa += chunk;
        len -= chunk;
    }
    *niov = n;
    return 0;
}

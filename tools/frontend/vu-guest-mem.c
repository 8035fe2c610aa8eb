/*
 * vu-guest-mem: the guest memory of a vu-frontend and its allocator.
 *
 * Theory of operation
 * -------------------
 * vuf_new() creates the "guest memory" here: a memfd of opts.mem_size
 * bytes mapped shared in this process.  It is one vhost-user memory region
 * with guest physical address 0 and user address = our mapping, so a guest
 * address is an offset into the mapping (vuf_gpa(), vuf_hva()) and a
 * ring's "user address" (what SET_VRING_ADDR carries) is simply its host
 * pointer.  The session shares the memfd with the back-end
 * (vu-session.c); the queues' rings are carved out of it right away
 * (vu-virtqueue.c), and requests take their headers and data buffers from
 * it (vu-blk.c, vu-scsi.c).
 *
 * The allocator is a small first-fit one: a sorted array of free extents,
 * coalesced with its neighbours on free, and a hash of the allocated
 * blocks (start -> length), so that vuf_mem_free() needs only the pointer.
 * One mutex guards both, so any thread may allocate and free.  The memory
 * outlives sessions: a reconnect keeps every buffer.
 */

#include <errno.h>
#include <inttypes.h>
#include <sys/mman.h>
#include <unistd.h>

#include <glib.h>

#include "vu-frontend-int.h"

void *vuf_mem_base(const VuFrontend *fe)
{
    return fe->mem;
}

uint64_t vuf_mem_size(const VuFrontend *fe)
{
    return fe->mem_size;
}

uint64_t vuf_gpa(const VuFrontend *fe, const void *hva)
{
    const uint8_t *p = hva;

    g_assert(p >= fe->mem && p <= fe->mem + fe->mem_size);
    return p - fe->mem;
}

void *vuf_hva(const VuFrontend *fe, uint64_t gpa, uint64_t len)
{
    if (gpa > fe->mem_size || len > fe->mem_size - gpa) {
        return NULL;
    }
    return fe->mem + gpa;
}

void *vuf_mem_alloc(VuFrontend *fe, size_t size, size_t align, uint64_t *gpa)
{
    void *ret = NULL;
    guint i;

    if (align == 0) {
        align = 64;
    }
    g_assert(vuf_is_power_of_2(align));
    if (size == 0) {
        size = 1;
    }
    g_mutex_lock(&fe->mem_lock);
    for (i = 0; i < fe->free_extents->len; i++) {
        VufExtent *e = &g_array_index(fe->free_extents, VufExtent, i);
        uint64_t start = (e->start + align - 1) & ~((uint64_t)align - 1);
        uint64_t end = e->start + e->len;
        VufExtent after;

        if (start > end || end - start < size) {
            continue;
        }
        after = (VufExtent) { start + size, end - (start + size) };
        if (start > e->start) {
            /* Keep the part before the aligned start free. */
            e->len = start - e->start;
            if (after.len) {
                g_array_insert_val(fe->free_extents, i + 1, after);
            }
        } else if (after.len) {
            *e = after;
        } else {
            g_array_remove_index(fe->free_extents, i);
        }
        g_hash_table_insert(fe->allocs, GSIZE_TO_POINTER((gsize)start),
                            GSIZE_TO_POINTER((gsize)size));
        fe->mem_free -= size;
        if (gpa) {
            *gpa = start;
        }
        ret = fe->mem + start;
        break;
    }
    g_mutex_unlock(&fe->mem_lock);
    return ret;
}

void vuf_mem_free(VuFrontend *fe, void *ptr)
{
    uint64_t start, len;
    gpointer value;
    guint i;

    if (!ptr) {
        return;
    }
    start = vuf_gpa(fe, ptr);
    g_mutex_lock(&fe->mem_lock);
    if (!g_hash_table_lookup_extended(fe->allocs,
                                      GSIZE_TO_POINTER((gsize)start),
                                      NULL, &value)) {
        g_error("vuf_mem_free: %p was not allocated by vuf_mem_alloc", ptr);
    }
    g_hash_table_remove(fe->allocs, GSIZE_TO_POINTER((gsize)start));
    len = GPOINTER_TO_SIZE(value);
    fe->mem_free += len;

    /* Insert in order, then merge with the neighbours. */
    for (i = 0; i < fe->free_extents->len; i++) {
        if (g_array_index(fe->free_extents, VufExtent, i).start > start) {
            break;
        }
    }
    g_array_insert_val(fe->free_extents, i, ((VufExtent) { start, len }));
    if (i + 1 < fe->free_extents->len) {
        VufExtent *e = &g_array_index(fe->free_extents, VufExtent, i);
        VufExtent *n = e + 1;

        if (e->start + e->len == n->start) {
            e->len += n->len;
            g_array_remove_index(fe->free_extents, i + 1);
        }
    }
    if (i > 0) {
        VufExtent *p = &g_array_index(fe->free_extents, VufExtent, i - 1);
        VufExtent *e = p + 1;

        if (p->start + p->len == e->start) {
            p->len += e->len;
            g_array_remove_index(fe->free_extents, i);
        }
    }
    g_mutex_unlock(&fe->mem_lock);
}

uint64_t vuf_mem_available(VuFrontend *fe)
{
    uint64_t n;

    g_mutex_lock(&fe->mem_lock);
    n = fe->mem_free;
    g_mutex_unlock(&fe->mem_lock);
    return n;
}

uint8_t *vuf_req_mem_alloc(VuFrontend *fe, size_t small_len,
                           size_t small_align, uint64_t *small_gpa,
                           size_t data_cap, uint8_t **data,
                           uint64_t *data_gpa, const char *what,
                           Error **errp)
{
    uint8_t *small = vuf_mem_alloc(fe, small_len, small_align, small_gpa);

    *data = NULL;
    if (small && data_cap) {
        *data = vuf_mem_alloc(fe, data_cap, 4096, data_gpa);
    }
    if (!small || (data_cap && !*data)) {
        error_setg(errp, "guest memory exhausted: cannot allocate %s with "
                   "%zu data bytes (%" G_GUINT64_FORMAT " bytes left of %"
                   G_GUINT64_FORMAT "); raise the memory size", what,
                   data_cap, vuf_mem_available(fe), vuf_mem_size(fe));
        vuf_req_mem_free(fe, small, *data);
        *data = NULL;
        return NULL;
    }
    return small;
}

void vuf_req_mem_free(VuFrontend *fe, void *small, void *data)
{
    vuf_mem_free(fe, small);
    vuf_mem_free(fe, data);
}

bool vuf_guest_mem_create(VuFrontend *fe, Error **errp)
{
    VufExtent all = { 0, fe->mem_size };

    fe->memfd = -1;
    g_mutex_init(&fe->mem_lock);
    fe->free_extents = g_array_new(FALSE, FALSE, sizeof(VufExtent));
    fe->allocs = g_hash_table_new(g_direct_hash, g_direct_equal);
    fe->memfd = memfd_create("spindle-vu-frontend", MFD_CLOEXEC);
    if (fe->memfd < 0) {
        error_setg_errno(errp, errno, "cannot create the guest memory memfd");
        return false;
    }
    if (ftruncate(fe->memfd, fe->mem_size) < 0) {
        error_setg_errno(errp, errno, "cannot size the guest memory to %"
                         PRIu64 " bytes", fe->mem_size);
        return false;
    }
    fe->mem = mmap(NULL, fe->mem_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                   fe->memfd, 0);
    if (fe->mem == MAP_FAILED) {
        fe->mem = NULL;
        error_setg_errno(errp, errno, "cannot map %" PRIu64
                         " bytes of guest memory", fe->mem_size);
        return false;
    }
    g_array_append_val(fe->free_extents, all);
    fe->mem_free = fe->mem_size;
    return true;
}

void vuf_guest_mem_destroy(VuFrontend *fe)
{
    if (fe->mem) {
        munmap(fe->mem, fe->mem_size);
    }
    vuf_close_fd(&fe->memfd);
    g_array_free(fe->free_extents, TRUE);
    g_hash_table_destroy(fe->allocs);
    g_mutex_clear(&fe->mem_lock);
}

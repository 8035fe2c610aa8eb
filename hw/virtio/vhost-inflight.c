/*
 * Inflight I/O tracking: the region, its checks, and resuming a queue.
 *
 * Theory of operation
 * -------------------
 * The region is created here (vhost_inflight_memfd_new(), for
 * GET_INFLIGHT_FD) as a sealed memfd and is never mapped by the creator:
 * the front-end keeps it and hands it back with SET_INFLIGHT_FD before
 * each start of the device, and only that copy is used
 * (vhost_inflight_map()).  A VhostInflight is one mapping of it, shared by
 * the server and every queue that tracks into it, and unmapped when the
 * last of them lets go (a queue may still be draining when the front-end
 * replaces or drops the region).
 *
 * While a queue runs, the hot path writes its part of the region with the
 * inline functions of the header.  For each request, in program order:
 *
 *   pop:   desc[h].counter = n++;  desc[h].inflight = 1
 *   push:  desc[h].next = last;  hdr.last_batch_head = h;
 *          (used element; used->idx = u + 1)
 *          desc[h].inflight = 0;  hdr.used_idx = u + 1
 *
 * A crash may stop that sequence between any two stores, and
 * vhost_inflight_resume() sorts out each cut at the next start by
 * comparing the header's used_idx with the ring's used->idx (U):
 *   - equal: every request whose used element was published has its
 *     flag cleared; the marked entries are exactly the requests taken
 *     and not answered;
 *   - U ahead by k: the last k pushes published their used elements and
 *     stopped before updating the header; they are the last k entries of
 *     the list that starts at last_batch_head and follows next, and
 *     clearing their flags brings us back to the first case.
 * The next avail index is then U plus the number still marked: requests
 * are taken from the avail ring in order and every one taken is either
 * answered (counted in U) or marked, so that is where the dead process
 * had got to (a request taken but not yet marked is taken again).
 *
 * Everything read from the region is read once into a local and checked
 * before use; a walk is bounded by the batch length, itself bounded by
 * desc_num.
 *
 * Threads: creating and mapping anywhere; resuming in the thread that
 * owns the queue (its home thread, before the queue runs).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <glib.h>

#include "hw/virtio/guest-memory.h"
#include "hw/virtio/vhost-inflight.h"

struct VhostInflight {
    SharedMapping map;           /* first: the reference count */
    uint8_t *base;               /* queue 0's part */
    unsigned num_queues;
    unsigned queue_size;
    uint64_t queue_bytes;        /* one queue's part */
};

/* ------------------------------------------------------------------------ */
/* Sizes                                                                     */

uint64_t vhost_inflight_queue_bytes(unsigned queue_size)
{
    uint64_t bytes = sizeof(VhostInflightHeader) +
                     (uint64_t)queue_size * sizeof(VhostInflightDesc);

    return (bytes + VHOST_INFLIGHT_ALIGN - 1) &
           ~(uint64_t)(VHOST_INFLIGHT_ALIGN - 1);
}

uint64_t vhost_inflight_region_bytes(unsigned num_queues, unsigned queue_size)
{
    return (uint64_t)num_queues * vhost_inflight_queue_bytes(queue_size);
}

bool vhost_inflight_check_shape(const char *what, unsigned num_queues,
                                unsigned queue_size, unsigned max_queues,
                                Error **errp)
{
    if (num_queues < 1 || num_queues > max_queues) {
        error_setg(errp, "%s for %u queues: the device has 1 to %u", what,
                   num_queues, max_queues);
        return false;
    }
    if (queue_size < 1 || queue_size > VHOST_INFLIGHT_MAX_QUEUE_SIZE ||
        (queue_size & (queue_size - 1))) {
        error_setg(errp, "%s with a queue size of %u: not a power of two "
                   "from 1 to %u", what, queue_size,
                   VHOST_INFLIGHT_MAX_QUEUE_SIZE);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Creating and mapping                                                      */

int vhost_inflight_memfd_new(uint64_t size, Error **errp)
{
    int fd = memfd_create("spindle-inflight", MFD_CLOEXEC | MFD_ALLOW_SEALING);

    if (fd < 0) {
        error_setg_errno(errp, errno, "cannot create the inflight region");
        return -1;
    }
    /* A memfd reads as zeroes: every queue's version is 0 (unused). */
    if (ftruncate(fd, (off_t)size) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        error_setg_errno(errp, errno, "cannot size and seal the inflight "
                         "region (%" PRIu64 " bytes)", size);
        close(fd);
        return -1;
    }
    return fd;
}

/* fd must be sealed against shrinking and hold [offset, offset + len). */
static bool vhost_inflight_check_fd(int fd, uint64_t offset, uint64_t len,
                                    Error **errp)
{
    int seals = fcntl(fd, F_GET_SEALS);

    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        error_setg(errp, "SET_INFLIGHT_FD with a file that is not sealed "
                   "against shrinking (F_SEAL_SHRINK): pass back the memfd "
                   "GET_INFLIGHT_FD gave");
        return false;
    }
    return guest_memory_fd_holds(fd, offset, len,
                                 "SET_INFLIGHT_FD: an inflight region", errp);
}

VhostInflight *vhost_inflight_map(int fd, uint64_t mmap_size,
                                  uint64_t mmap_offset, unsigned num_queues,
                                  unsigned queue_size, unsigned max_queues,
                                  Error **errp)
{
    uint64_t need;
    VhostInflight *r;

    if (!vhost_inflight_check_shape("SET_INFLIGHT_FD", num_queues,
                                    queue_size, max_queues, errp)) {
        return NULL;
    }
    need = vhost_inflight_region_bytes(num_queues, queue_size);
    if (mmap_size < need) {
        error_setg(errp, "SET_INFLIGHT_FD with a region of %" PRIu64
                   " bytes: %u queues of %u entries need %" PRIu64,
                   mmap_size, num_queues, queue_size, need);
        return NULL;
    }
    if (mmap_offset % (uint64_t)sysconf(_SC_PAGESIZE)) {
        error_setg(errp, "SET_INFLIGHT_FD at offset %" PRIu64 ": not a "
                   "multiple of the page size", mmap_offset);
        return NULL;
    }
    /* Only the part the queues use is mapped; all of it must be there. */
    if (!vhost_inflight_check_fd(fd, mmap_offset, mmap_size, errp)) {
        return NULL;
    }
    r = g_new0(VhostInflight, 1);
    r->base = shared_mapping_map(&r->map, fd, mmap_offset, need,
                                 "SET_INFLIGHT_FD", errp);
    if (!r->base) {
        g_free(r);
        return NULL;
    }
    r->num_queues = num_queues;
    r->queue_size = queue_size;
    r->queue_bytes = vhost_inflight_queue_bytes(queue_size);
    return r;
}

unsigned vhost_inflight_num_queues(const VhostInflight *r)
{
    return r->num_queues;
}

unsigned vhost_inflight_queue_size(const VhostInflight *r)
{
    return r->queue_size;
}

VhostInflightQueue *vhost_inflight_get_queue(VhostInflight *r, unsigned i)
{
    g_assert(i < r->num_queues);
    return (VhostInflightQueue *)(r->base + i * r->queue_bytes);
}

/* ------------------------------------------------------------------------ */
/* Resuming                                                                  */

/* A fresh queue part: zero entries, then the header, the version last so
 * that a crash half-way leaves it fresh. */
static void vhost_inflight_init_queue(VhostInflightQueue *q,
                                      unsigned capacity, uint16_t used_idx)
{
    memset(q->desc, 0, (size_t)capacity * sizeof(q->desc[0]));
    q->hdr.features = 0;
    q->hdr.desc_num = (uint16_t)MIN(capacity, UINT16_MAX);
    q->hdr.last_batch_head = 0;
    q->hdr.used_idx = used_idx;
    atomic_signal_fence(memory_order_seq_cst);
    q->hdr.version = VHOST_INFLIGHT_VERSION;
}

/*
 * The used index moved batch entries past the header's: clear the flags
 * of the last batch pushes, walking back from head.  -EINVAL if the walk
 * leaves the table.
 */
static int vhost_inflight_finish_batch(VhostInflightQueue *q,
                                       unsigned desc_num, uint16_t head,
                                       unsigned batch, char *why,
                                       size_t why_len)
{
    for (unsigned n = 0; n < batch; n++) {
        if (head >= desc_num) {
            g_snprintf(why, why_len, "inflight region: entry %u of the last "
                       "used-ring update is descriptor %u of %u", n, head,
                       desc_num);
            return -EINVAL;
        }
        q->desc[head].inflight = 0;
        head = q->desc[head].next;
    }
    return 0;
}

typedef struct VhostInflightPending {
    uint64_t counter;
    uint16_t head;
} VhostInflightPending;

static int vhost_inflight_pending_cmp(const void *a, const void *b)
{
    const VhostInflightPending *x = a, *y = b;

    if (x->counter != y->counter) {
        return x->counter < y->counter ? -1 : 1;
    }
    return x->head < y->head ? -1 : x->head > y->head;
}

/* List the marked entries below num in r->heads, oldest first. */
static void vhost_inflight_collect(VhostInflightQueue *q,
                                   VhostInflightResume *r)
{
    /* 10 bytes a head on the stack would be 320 KiB at most: heap. */
    g_autofree VhostInflightPending *p = g_new(VhostInflightPending, r->num);
    unsigned n = 0;

    for (unsigned i = 0; i < r->num; i++) {
        if (q->desc[i].inflight == 1) {
            p[n].counter = q->desc[i].counter;
            p[n].head = i;
            n++;
        }
    }
    qsort(p, n, sizeof(p[0]), vhost_inflight_pending_cmp);
    r->next_counter = 1;
    for (unsigned i = 0; i < n; i++) {
        r->heads[i] = p[i].head;
        r->next_counter = MAX(r->next_counter, p[i].counter + 1);
    }
    r->nheads = n;
}

int vhost_inflight_resume(VhostInflightQueue *q, unsigned capacity,
                          VhostInflightResume *r, char *why, size_t why_len)
{
    uint16_t version = q->hdr.version;
    unsigned desc_num = q->hdr.desc_num;
    uint16_t log_used = q->hdr.used_idx;
    uint16_t head = q->hdr.last_batch_head;
    unsigned batch = (uint16_t)(r->used_idx - log_used);

    r->nheads = 0;
    r->next_counter = 1;
    r->fresh = false;
    r->batch = 0;
    r->last_batch_head = 0;
    if (r->num > capacity) {
        g_snprintf(why, why_len, "inflight region for rings of %u "
                   "descriptors: the ring has %u", capacity, r->num);
        return -EINVAL;
    }
    if (version == 0) {
        vhost_inflight_init_queue(q, capacity, r->used_idx);
        r->fresh = true;
        return 0;
    }
    if (version != VHOST_INFLIGHT_VERSION) {
        g_snprintf(why, why_len, "inflight region of version %u, expected "
                   "%u", version, VHOST_INFLIGHT_VERSION);
        return -EINVAL;
    }
    if (desc_num > capacity || desc_num < r->num) {
        g_snprintf(why, why_len, "inflight region for %u descriptors: the "
                   "ring has %u and the region room for %u", desc_num,
                   r->num, capacity);
        return -EINVAL;
    }
    if (batch > desc_num) {
        g_snprintf(why, why_len, "inflight region at used index %u, the "
                   "ring at %u: more than %u apart", log_used, r->used_idx,
                   desc_num);
        return -EINVAL;
    }
    if (vhost_inflight_finish_batch(q, desc_num, head, batch, why,
                                    why_len) < 0) {
        return -EINVAL;
    }
    q->hdr.used_idx = r->used_idx;
    r->batch = batch;
    r->last_batch_head = head;
    vhost_inflight_collect(q, r);
    return 0;
}

/*
 * Split virtqueues: dirty logging for live migration.
 *
 * Theory of operation
 * -------------------
 * While a front-end migrates the guest, every byte the back-end writes
 * into guest memory must have its page marked in the dirty log
 * (hw/virtio/vhost-log.h), or the destination gets the page as it was
 * before.  A queue writes guest memory in two places:
 *   - the in buffers of each element, by its device: push reports how
 *     much was written (virtqueue_push(): the first len bytes;
 *     virtqueue_push_status_last(): the first len - 1 and the very last
 *     byte, virtio-blk's status);
 *   - the used ring: the element, used->idx, used->flags and avail_event.
 *     The ring's used area is marked whole (a few pages at most: one or
 *     two atomic ORs) at every push, when logging starts and when the
 *     queue stops, so the flag and event writes in between, which a
 *     push or the stop always follows, are covered too.  Only when the
 *     front-end asked for it (VHOST_VRING_F_LOG), at the guest address it
 *     gave (log_gpa), as QEMU does.
 *
 * Guest addresses.  The log is by guest physical address, the element's
 * iovecs point into our mapping.  While a log is attached, pop records
 * the guest address of each in iovec as it walks the chain
 * (virtqueue_record_in_gpa()), at the cost of one store per iovec; with
 * no log it only stores in_gpa_valid = false.  An element popped before
 * logging began (a virtio-scsi event buffer waits for days) has none:
 * its host addresses are translated back through the table it was popped
 * with, the current one or a retired one, which the element keeps alive.
 *
 * Order.  All of an element's marks are atomic ORs made before
 * virtqueue_fill_used() publishes used->idx with a release store, so a
 * front-end that sees the request done and then reads the log finds its
 * pages marked.
 *
 * Threads: everything here runs in the queue's home thread, or in the
 * main thread while the queue is stopped with nothing in flight.
 */
#include <glib.h>

#include "hw/virtio/vhost-log.h"
#include "hw/virtio/virtqueue.h"
#include "virtqueue-int.h"

/* The guest address of host in one table, if it maps it. */
static bool virtqueue_table_gpa(const GuestMemory *mem, uintptr_t host,
                                uint64_t *gpa)
{
    for (unsigned i = 0; mem && i < mem->nregions; i++) {
        const GuestMemRegion *r = &mem->regions[i];
        uintptr_t start = (uintptr_t)r->host;

        if (host >= start && host - start < r->size) {
            *gpa = r->gpa + (host - start);
            return true;
        }
    }
    return false;
}

/* The guest address of in iovec i of elem. */
static bool virtqueue_in_gpa(const VirtQueue *vq,
                             const VirtQueueElement *elem, unsigned i,
                             uint64_t *gpa)
{
    uintptr_t host = (uintptr_t)elem->in_sg[i].iov_base;

    if (elem->in_gpa_valid) {
        *gpa = elem->in_gpa[i];
        return true;
    }
    if (virtqueue_table_gpa(vq->mem, host, gpa)) {
        return true;
    }
    for (unsigned t = 0; vq->retired && t < vq->retired->len; t++) {
        if (virtqueue_table_gpa(g_ptr_array_index(vq->retired, t), host,
                                gpa)) {
            return true;
        }
    }
    /* The element keeps its table alive: not reached. */
    return false;
}

/* Mark bytes [offset, offset + len) of elem's in buffers. */
static void virtqueue_log_in(VirtQueue *vq, const VirtQueueElement *elem,
                             uint64_t offset, uint64_t len)
{
    for (unsigned i = 0; i < elem->in_num && len > 0; i++) {
        uint64_t n = elem->in_sg[i].iov_len;
        uint64_t gpa;

        if (offset >= n) {
            offset -= n;
            continue;
        }
        n = MIN(n - offset, len);
        if (virtqueue_in_gpa(vq, elem, i, &gpa)) {
            vhost_log_mark(vq->log, gpa + offset, n);
        }
        len -= n;
        offset = 0;
    }
}

void virtqueue_log_used(VirtQueue *vq)
{
    if (vq->addrs.flags & VHOST_VRING_F_LOG) {
        vhost_log_mark(vq->log, vq->addrs.log_gpa, vring_used_size(vq->num));
    }
}

void virtqueue_log_push(VirtQueue *vq, const VirtQueueElement *elem,
                        uint32_t len, bool status_last)
{
    if (status_last && len > 0) {
        virtqueue_log_in(vq, elem, 0, len - 1);
        virtqueue_log_in(vq, elem, elem->in_bytes - 1, 1);
    } else {
        virtqueue_log_in(vq, elem, 0, len);
    }
    virtqueue_log_used(vq);
}

/* The threads virtqueue_set_log() and virtqueue_set_log_used() allow. */
static void virtqueue_assert_log_owner(const VirtQueue *vq)
{
    if (vq->started) {
        virtqueue_assert_home(vq);
    } else {
        g_assert(virtqueue_inflight(vq) == 0);
    }
}

void virtqueue_set_log(VirtQueue *vq, VhostLog *log)
{
    virtqueue_assert_log_owner(vq);
    shared_mapping_ref(log);
    shared_mapping_unref(vq->log);
    vq->log = log;
    if (log && vq->used) {
        /* What was written there before logging began. */
        virtqueue_log_used(vq);
    }
}

void virtqueue_set_log_used(VirtQueue *vq, uint32_t flags, uint64_t log_gpa)
{
    virtqueue_assert_log_owner(vq);
    vq->addrs.flags = flags;
    vq->addrs.log_gpa = log_gpa;
    if (vq->log && vq->used) {
        virtqueue_log_used(vq);
    }
}

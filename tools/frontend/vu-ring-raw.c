/*
 * vu-ring-raw: lower-level access to a VuFrontend's queues, for tests of a
 * device (see vu-ring-raw.h).  Everything here is built on the driver of
 * vu-virtqueue.c; nothing bypasses its bookkeeping except what the caller
 * writes into the rings itself.
 */

#include <errno.h>

#include "vu-frontend-int.h"
#include "vu-ring-raw.h"

int vuf_mem_fd(const VuFrontend *fe)
{
    return fe->memfd;
}

bool vuf_start_local(VuFrontend *fe, uint64_t features, Error **errp)
{
    unsigned i;

    vuf_assert_control_thread(fe);
    if (vuf_is_connected(fe)) {
        error_setg(errp, "a local session needs a front-end that is not "
                   "connected to a back-end");
        return false;
    }
    fe->features = features;
    for (i = 0; i < fe->num_queues; i++) {
        if (!vufq_session_start(fe->queues[i],
                                vuf_has_feature(fe, VIRTIO_RING_F_EVENT_IDX),
                                vuf_has_feature(fe,
                                                VIRTIO_RING_F_INDIRECT_DESC),
                                errp)) {
            vuf_disconnect(fe);
            return false;
        }
    }
    return true;
}

void vufq_ring_gpas(const VufQueue *q, uint64_t *desc, uint64_t *avail,
                    uint64_t *used)
{
    if (desc) {
        *desc = q->desc_gpa;
    }
    if (avail) {
        *avail = q->avail_gpa;
    }
    if (used) {
        *used = q->used_gpa;
    }
}

int vufq_kick_fd(const VufQueue *q)
{
    return q->ready ? q->kick_fd : -1;
}

int vufq_set_base(VufQueue *q, uint16_t base)
{
    if (!q->ready) {
        return -ENOTCONN;
    }
    if (q->in_flight) {
        return -EBUSY;
    }
    q->avail_idx = q->kicked_idx = q->last_used = base;
    atomic_store_explicit(&q->avail->idx, base, memory_order_relaxed);
    atomic_store_explicit(&q->used->idx, base, memory_order_relaxed);
    /* Moves used_event along with last_used and fences, so that the
     * device sees the new indexes with the suppression state that goes
     * with them. */
    vufq_set_completion(q, q->mode);
    return 0;
}

int vufq_add_unpublished(VufQueue *q, const VufSeg *segs, unsigned n,
                         unsigned flags, void *token)
{
    return vufq_build_chain(q, segs, n, flags, token);
}

void vufq_publish_head(VufQueue *q, uint16_t head)
{
    vufq_publish(q, head);
}

int vufq_kick_always(VufQueue *q)
{
    if (!q->ready) {
        return -ENOTCONN;
    }
    return vufq_kick_force(q);
}

int vufq_get_used_head(VufQueue *q, uint16_t *head, void **token,
                       uint32_t *len)
{
    uint16_t id = 0;
    int r;

    if (q->ready && !q->broken &&
        atomic_load_explicit(&q->used->idx, memory_order_acquire) !=
        q->last_used) {
        /* The element vufq_get_used() is about to take (same thread). */
        id = q->used->ring[q->last_used % q->num].id;
    }
    r = vufq_get_used(q, token, len);
    if (r == 1 && head) {
        *head = id;
    }
    return r;
}

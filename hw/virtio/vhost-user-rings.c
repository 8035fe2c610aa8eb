/*
 * vhost-user back-end: ring lifecycle.
 *
 * Theory of operation
 * -------------------
 * Each of the server's num_queues rings is a VuQueue: the VirtQueue and
 * what the server knows about it (running or not, enabled, its base while
 * stopped, the statistics of the rings it replaced).  The request handlers
 * (vhost-user-handlers.c) set a ring up; this file decides when it runs.
 *
 * A ring runs when SET_FEATURES was received, the guest memory table is
 * not empty, it has a size, addresses and a kick fd (virtqueue_is_ready())
 * and it is enabled (always, unless VHOST_USER_F_PROTOCOL_FEATURES was
 * negotiated: then from SET_VRING_ENABLE 1 on).  A disabled ring is
 * stopped, not processed.  After every request that may change one of
 * those conditions the handlers call vu_queues_update(), which starts the
 * rings that became startable.  A ring that failed to start (it does not
 * lie in guest memory) is not tried again until its set-up changes.
 *
 * Starting, stopping and memory table swaps happen in the ring's home
 * thread (ctxs[i % nctx]) through aio_run_sync(); the main thread waits,
 * so the VirtQueue is never touched by two threads at once.  Stopping is
 * virtqueue_stop() followed by the device's queue_drain(), after which the
 * avail index is remembered as the ring's base (reported by
 * GET_VRING_BASE, restored on restart).
 *
 * Guest memory: a new table is handed to each running ring in its home
 * thread (virtqueue_set_memory) and only then is the old one dropped, so
 * rings keep running across a table change.
 *
 * Inflight tracking: the region of SET_INFLIGHT_FD (vu_set_inflight(),
 * while every ring is stopped) is handed to each ring as it starts, ring
 * i getting queue part i; the ring then resumes from it (virtqueue.c).
 * A part the front-end says was used before (a restart after a crash or
 * an upgrade) makes that start report how many requests it resubmits.
 *
 * Dirty logging: while VHOST_F_LOG_ALL is negotiated, every ring logs
 * into the server's log (SET_LOG_BASE), handed over as it starts, or in
 * its home thread while it runs when the log or LOG_ALL changes
 * (vu_set_log()); a stopped ring gets it from the main thread, which owns
 * it then.  The used ring's logging (SET_VRING_ADDR's VHOST_VRING_F_LOG)
 * changes the same way (vu_queue_set_log_used()).
 *
 * Running or not: the server's owner (an export) hears when the device
 * starts running, just before its first ring starts, and may refuse (the
 * image is someone else's now: another export's, another daemon's); and
 * when it stops, after its last running ring stopped and drained, with
 * whether VHOST_F_LOG_ALL was on (a live migration's end: the owner hands
 * the image over before GET_VRING_BASE is answered).
 */
#include <errno.h>
#include <stdio.h>
#include <glib.h>

#include "hw/virtio/vhost-user-server-int.h"
#include "util/trace.h"

typedef struct VuQueueOp {
    VuServer *s;
    VuQueue *q;
    GuestMemory *mem;
    VhostLog *log;
    const VirtQueueAddrs *addrs;
    int ret;
    uint16_t base;
    unsigned inflight;
} VuQueueOp;

void vu_queue_init(VuServer *s, unsigned i, AioContext *ctx)
{
    s->queues[i].vq = virtqueue_new(i);
    virtqueue_set_owner(s->queues[i].vq, s->name);
    s->queues[i].ctx = ctx;
}

static void vu_queue_start_bh(void *opaque)
{
    VuQueueOp *op = opaque;
    VuServer *s = op->s;
    VirtQueue *vq = op->q->vq;

    g_assert(aio_context_in_home_thread(op->q->ctx));
    op->ret = virtqueue_start(vq, op->mem, s->ops->handle_queue, s->dev);
    if (op->ret == 0 && s->ops->queue_started) {
        s->ops->queue_started(s->dev, vq);
    }
}

static void vu_queue_stop_bh(void *opaque)
{
    VuQueueOp *op = opaque;
    VuServer *s = op->s;
    VirtQueue *vq = op->q->vq;

    g_assert(aio_context_in_home_thread(op->q->ctx));
    op->base = virtqueue_stop(vq);
    if (s->ops->queue_drain) {
        s->ops->queue_drain(s->dev, vq);
    }
    op->inflight = virtqueue_inflight(vq);
}

static void vu_queue_set_memory_bh(void *opaque)
{
    VuQueueOp *op = opaque;

    g_assert(aio_context_in_home_thread(op->q->ctx));
    op->ret = virtqueue_set_memory(op->q->vq, op->mem);
}

bool vu_queue_enabled(VuServer *s, const VuQueue *q)
{
    /* Without protocol features a ring is enabled from the start. */
    if (!(s->features & (1ull << VHOST_USER_F_PROTOCOL_FEATURES))) {
        return true;
    }
    return q->enabled;
}

static bool vu_queue_can_start(VuServer *s, const VuQueue *q)
{
    return !q->started && !q->start_failed && s->features_set &&
           s->mem && s->mem->nregions > 0 && virtqueue_is_ready(q->vq) &&
           vu_queue_enabled(s, q);
}

/* Ring index's part of the inflight region, if it has one. */
static void vu_queue_attach_inflight(VuServer *s, VuQueue *q, unsigned index)
{
    bool tracked = s->inflight &&
                   index < vhost_inflight_num_queues(s->inflight);

    virtqueue_set_inflight(q->vq, tracked ? s->inflight : NULL, index);
}

/* After a start that resumed from a region used before. */
static void vu_queue_report_resumed(VuServer *s, VuQueue *q, unsigned index)
{
    unsigned n = virtqueue_resubmitted(q->vq);

    q->resuming = false;
    vu_log(s, "ring %u resumed from the inflight region: %u requests "
           "resubmitted", index, n);
    vu_event(s, VU_EVENT_RESUBMITTED, index, n);
}

/* The log the rings write into now: s->log while LOG_ALL is on. */
static VhostLog *vu_active_log(VuServer *s)
{
    return s->features & (1ull << VHOST_F_LOG_ALL) ? s->log : NULL;
}

/* Tell the owner that the device stopped running (rings_running). */
static void vu_rings_stopped(VuServer *s)
{
    bool migrating = s->features & (1ull << VHOST_F_LOG_ALL);

    if (s->rings_running) {
        s->rings_running(s->rings_opaque, false, migrating, NULL);
    }
}

static void vu_queue_start(VuServer *s, VuQueue *q)
{
    VuQueueOp op = { .s = s, .q = q, .mem = s->mem };
    unsigned index = virtqueue_index(q->vq);

    virtqueue_set_aio_context(q->vq, q->ctx);
    virtqueue_set_base(q->vq, q->base);
    vu_queue_attach_inflight(s, q, index);
    virtqueue_set_log(q->vq, vu_active_log(s));
    virtqueue_set_enabled(q->vq, true);
    aio_run_sync(q->ctx, vu_queue_start_bh, &op);
    if (op.ret < 0) {
        q->start_failed = true;
        virtqueue_set_enabled(q->vq, false);
        if (op.ret == -EPROTO) {
            vu_log(s, "ring %u does not fit the inflight region: ring not "
                   "started", index);
        } else {
            vu_log(s, "ring %u does not lie in guest memory: ring not "
                   "started", index);
        }
        return;
    }
    q->started = true;
    if (q->resuming) {
        vu_queue_report_resumed(s, q, index);
    }
    SPINDLE_TRACE2(vu_queue_start, index, q->base);
}

void vu_queue_stop(VuServer *s, VuQueue *q)
{
    VuQueueOp op = { .s = s, .q = q };
    unsigned index = virtqueue_index(q->vq);

    if (!q->started) {
        return;
    }
    aio_run_sync(q->ctx, vu_queue_stop_bh, &op);
    q->started = false;
    q->base = op.base;
    virtqueue_set_enabled(q->vq, false);
    if (op.inflight) {
        /* The device broke its queue_drain() promise: our invariant. */
        vu_log(s, "ring %u: %u requests still in flight after draining",
               index, op.inflight);
        g_assert_not_reached();
    }
    SPINDLE_TRACE2(vu_queue_stop, index, q->base);
    if (!vu_any_queue_started(s)) {
        vu_rings_stopped(s);
    }
}

bool vu_any_queue_started(VuServer *s)
{
    for (unsigned i = 0; i < s->num_queues; i++) {
        if (s->queues[i].started) {
            return true;
        }
    }
    return false;
}

/*
 * Before the first ring starts: ask the owner.  On refusal every ring
 * that could start is marked failed, so that it is not asked again
 * before the set-up changes.
 */
static bool vu_rings_may_start(VuServer *s)
{
    Error *err = NULL;

    if (!s->rings_running || vu_any_queue_started(s) ||
        s->rings_running(s->rings_opaque, true, false, &err)) {
        return true;
    }
    for (unsigned i = 0; i < s->num_queues; i++) {
        if (vu_queue_can_start(s, &s->queues[i])) {
            s->queues[i].start_failed = true;
        }
    }
    snprintf(s->why, sizeof(s->why), "rings not started: %s",
             error_get_pretty(err));
    error_free(err);
    return false;
}

bool vu_queues_update(VuServer *s)
{
    bool was_running = vu_any_queue_started(s);
    bool asked = false;

    for (unsigned i = 0; i < s->num_queues; i++) {
        if (!vu_queue_can_start(s, &s->queues[i])) {
            continue;
        }
        if (!asked && !vu_rings_may_start(s)) {
            return false;
        }
        asked = true;
        vu_queue_start(s, &s->queues[i]);
    }
    if (asked && !was_running && !vu_any_queue_started(s)) {
        /* Every start failed (rings outside guest memory): not running
         * after all. */
        vu_rings_stopped(s);
    }
    return true;
}

static void vu_stats_add(VirtQueueStats *acc, const VirtQueue *vq)
{
    VirtQueueStats st;

    virtqueue_get_stats(vq, &st);
    acc->kicks += st.kicks;
    acc->polled += st.polled;
    acc->interrupts += st.interrupts;
    acc->interrupts_suppressed += st.interrupts_suppressed;
    acc->requests += st.requests;
}

void vu_queue_get_stats(VuServer *s, unsigned i, VirtQueueStats *out)
{
    *out = s->queues[i].past;
    vu_stats_add(out, s->queues[i].vq);
}

void vu_queues_reset(VuServer *s)
{
    for (unsigned i = 0; i < s->num_queues; i++) {
        VuQueue *q = &s->queues[i];

        vu_queue_stop(s, q);
        /* Keep the statistics of q->vq before it is replaced. */
        vu_stats_add(&q->past, q->vq);
        virtqueue_free(q->vq);
        vu_queue_init(s, i, q->ctx);
        q->enabled = false;
        q->start_failed = false;
        q->base = 0;
    }
    vu_set_inflight(s, NULL);
}

void vu_set_inflight(VuServer *s, VhostInflight *region)
{
    g_assert(!vu_any_queue_started(s));
    shared_mapping_unref(s->inflight);
    s->inflight = region;
    for (unsigned i = 0; i < s->num_queues; i++) {
        VuQueue *q = &s->queues[i];

        q->start_failed = false;
        q->resuming = region && i < vhost_inflight_num_queues(region) &&
                      vhost_inflight_get_queue(region, i)->hdr.version != 0;
    }
}

void vu_set_memory(VuServer *s, GuestMemory *mem)
{
    GuestMemory *old = s->mem;

    for (unsigned i = 0; i < s->num_queues; i++) {
        VuQueue *q = &s->queues[i];
        VuQueueOp op = { .s = s, .q = q, .mem = mem };

        q->start_failed = false;
        if (!q->started) {
            continue;
        }
        aio_run_sync(q->ctx, vu_queue_set_memory_bh, &op);
        if (op.ret < 0) {
            vu_log(s, "ring %u does not lie in the new guest memory table: "
                   "ring broken", i);
        }
    }
    s->mem = mem;
    if (old) {
        guest_memory_unref(old);
    }
    if (!vu_queues_update(s)) {
        vu_log(s, "%s", s->why);
    }
}

static void vu_queue_set_log_bh(void *opaque)
{
    VuQueueOp *op = opaque;

    g_assert(aio_context_in_home_thread(op->q->ctx));
    virtqueue_set_log(op->q->vq, op->log);
}

void vu_set_log(VuServer *s, VhostLog *log)
{
    VhostLog *old = s->log;

    s->log = log;
    for (unsigned i = 0; i < s->num_queues; i++) {
        VuQueue *q = &s->queues[i];
        VuQueueOp op = { .s = s, .q = q, .log = vu_active_log(s) };

        if (q->started) {
            aio_run_sync(q->ctx, vu_queue_set_log_bh, &op);
        } else {
            virtqueue_set_log(q->vq, op.log);
        }
    }
    if (old != log) {
        shared_mapping_unref(old);
    }
}

static void vu_queue_set_log_used_bh(void *opaque)
{
    VuQueueOp *op = opaque;

    g_assert(aio_context_in_home_thread(op->q->ctx));
    virtqueue_set_log_used(op->q->vq, op->addrs->flags, op->addrs->log_gpa);
}

void vu_queue_set_log_used(VuQueue *q, const VirtQueueAddrs *addrs)
{
    VuQueueOp op = { .q = q, .addrs = addrs };

    aio_run_sync(q->ctx, vu_queue_set_log_used_bh, &op);
}

typedef struct VuSetFdOp {
    VuQueue *q;
    VuSetFd *set_fd;
    int fd;
} VuSetFdOp;

static void vu_queue_set_fd_bh(void *opaque)
{
    VuSetFdOp *op = opaque;

    g_assert(aio_context_in_home_thread(op->q->ctx));
    op->set_fd(op->q->vq, op->fd);
}

void vu_queue_set_fd_running(VuQueue *q, VuSetFd *set_fd, int fd)
{
    VuSetFdOp op = { .q = q, .set_fd = set_fd, .fd = fd };

    aio_run_sync(q->ctx, vu_queue_set_fd_bh, &op);
}

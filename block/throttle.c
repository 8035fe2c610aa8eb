/*
 * throttle: a filter that holds requests to the limits of a throttle group.
 *
 * Theory of operation.  A throttle node sits on a child (option `file`:
 * an inline node or a node-name) and shows it unchanged; option
 * `throttle-group` names the group (util/throttle-group.h) whose limits
 * it obeys.  Every node of a group draws from the group's buckets, from
 * whatever IOThreads their queues run in.
 *
 * Requests.  Reads count as reads; writes, write-zeroes and discards as
 * writes, with their bytes (as QEMU counts them); flushes pass unthrottled.
 * A request goes straight down when its direction is not limited (one
 * relaxed load: a group without limits costs nothing more), or when
 * nobody waits in its direction and the buckets have room; the buckets
 * are read and charged under the group's lock.  Otherwise it waits in
 * its queue's FIFO for that direction (ThrottleQueue, the per-context
 * state: q->opaque) and the queue joins the group's ring for that
 * direction if it is not in it yet.
 *
 * Fairness: round-robin between queues.  The first queue of a ring is
 * the only one that looks at the buckets: when they have room it sends
 * its first waiting request down, then goes to the back of the ring (if
 * it still has requests) and the new first queue takes over.  When the
 * buckets are full, the first queue arms its AioTimer (in its own
 * IOThread) for when they will have room; when the turn passes to a
 * queue in another IOThread, its wake BH is scheduled there.  So each
 * queue of a group gets one request through in turn, whatever its
 * queue depth, and nothing spins: a waiting request costs a timer in
 * the thread that submitted it, and the loop sleeps until then.
 *
 * Invariant (under the group's lock): a queue is in a ring exactly when
 * its FIFO of that direction is not empty, and the first queue of a
 * non-empty ring has its timer armed or its wake BH scheduled.  A change
 * of limits (qom-set) keeps it: the group schedules the first queue's
 * BH, which looks at the new buckets at once.
 *
 * The FIFOs are only touched by their queue's home thread (submit, the
 * timer and the BH all run there), so they need no lock; the rings do.
 * A waiting request counts as in flight, so a drain waits for it.
 */
#include <errno.h>
#include <inttypes.h>
#include "block/block-int.h"
#include "util/clock.h"
#include "util/throttle-group.h"
#include "util/trace.h"

typedef struct ThrottleNodeState {
    ThrottleGroup *tg;
} ThrottleNodeState;

/* Per BlockQueue (per context): its home thread, but for member. */
typedef struct ThrottleQueue {
    ThrottleGroupMember member;  /* what the group's rings link */
    BlockNode *bs;
    ThrottleGroup *tg;
    BlockReqFifo waiting[2];     /* [is_write] */
    AioTimer timer[2];
} ThrottleQueue;

static bool throttle_open(BlockNode *bs, Opts *opts, Error **errp)
{
    ThrottleNodeState *s = bs->opaque;
    const char *group;
    BlockNode *child;

    if (!opts_get_str(opts, "throttle-group", NULL, &group, errp)) {
        return false;
    }
    if (!group) {
        error_setg(errp, "Parameter 'throttle-group' is missing (the id of "
                   "an object of type " THROTTLE_GROUP_TYPE ")");
        return false;
    }
    s->tg = throttle_group_lookup(group);
    if (!s->tg) {
        error_setg(errp, "Parameter 'throttle-group': no " THROTTLE_GROUP_TYPE
                   " '%s' (create it first with --object or object-add)",
                   group);
        return false;
    }
    child = block_node_open_child(bs, opts, "file", errp);
    if (!child) {
        return false;
    }
    bs->limits = child->limits;
    throttle_group_add_user(s->tg);
    return true;
}

static void throttle_close(BlockNode *bs)
{
    ThrottleNodeState *s = bs->opaque;

    throttle_group_remove_user(s->tg);
}

static int64_t throttle_getlength(BlockNode *bs)
{
    return block_node_get_length(bs->child);
}

/* Resizing goes to the child; the length follows (getlength). */
static bool throttle_truncate(BlockNode *bs, int64_t size, Error **errp)
{
    return block_driver_truncate(bs->child, size, errp);
}

static uint64_t throttle_req_bytes(const BlockRequest *req)
{
    return req->bytes > 0 ? (uint64_t)req->bytes : 0;
}

/*
 * The first queue of the is_write ring (tq, in its home thread) takes
 * its turns: while the buckets have room, one request per turn, passing
 * the turn on after each.  Returns the requests to send down (after the
 * lock is dropped), in order.
 */
static void throttle_take_turns(ThrottleQueue *tq, bool is_write,
                                BlockReqFifo *go)
{
    ThrottleGroup *tg = tq->tg;
    int64_t now = clock_now_ns();

    while (tg->ring[is_write] == &tq->member) {
        int64_t wait = throttle_wait_ns(&tg->ts, is_write, now);
        BlockRequest *req;

        if (wait > 0) {
            SPINDLE_TRACE3(throttle_wait, tq->bs, is_write, wait);
            aio_timer_mod(&tq->timer[is_write], now + wait);
            return;
        }
        req = block_req_fifo_pop(&tq->waiting[is_write]);
        throttle_account(&tg->ts, is_write, throttle_req_bytes(req));
        block_req_fifo_push(go, req);
        throttle_group_ring_pop(tg, is_write);
        if (tq->waiting[is_write].head) {
            throttle_group_ring_append(tg, &tq->member, is_write);
        }
        if (tg->ring[is_write] && tg->ring[is_write] != &tq->member) {
            /* The next queue's turn, in its own thread. */
            aio_bh_schedule(tg->ring[is_write]->wake_bh);
        }
    }
    /* No longer first: a timer armed while it was would only be a stale
     * wake-up, and would keep submit from looking at the buckets when tq
     * is first again. */
    aio_timer_del(&tq->timer[is_write]);
}

/* Send what took its turn down to the child, in order. */
static void throttle_send(ThrottleQueue *tq, BlockReqFifo *go)
{
    BlockRequest *req;

    while ((req = block_req_fifo_pop(go))) {
        SPINDLE_TRACE2(throttle_go, tq->bs, req);
        block_driver_submit(tq->bs->child, req);
    }
}

/* tq's timer or wake BH: look at the buckets for one direction. */
static void throttle_run(ThrottleQueue *tq, bool is_write)
{
    BlockReqFifo go = { 0 };

    g_mutex_lock(&tq->tg->lock);
    throttle_take_turns(tq, is_write, &go);
    g_mutex_unlock(&tq->tg->lock);
    throttle_send(tq, &go);
}

static void throttle_read_timer_cb(void *opaque)
{
    throttle_run(opaque, false);
}

static void throttle_write_timer_cb(void *opaque)
{
    throttle_run(opaque, true);
}

/* The group woke tq (its turn, or new limits): both directions. */
static void throttle_wake_bh(void *opaque)
{
    throttle_run(opaque, false);
    throttle_run(opaque, true);
}

static void throttle_submit(BlockNode *bs, BlockRequest *req)
{
    ThrottleNodeState *s = bs->opaque;
    ThrottleGroup *tg = s->tg;
    ThrottleQueue *tq;
    bool is_write = req->op != BLOCK_OP_READ;
    BlockReqFifo go = { 0 };

    if (req->op == BLOCK_OP_FLUSH) {
        block_driver_submit(bs->child, req);
        return;
    }
    tq = block_req_queue(bs, req)->opaque;
    /* Nobody of this queue waits (order), and no limit (the fast path). */
    if (!tq->waiting[is_write].head &&
        !atomic_load_explicit(&tg->limited[is_write], memory_order_relaxed)) {
        block_driver_submit(bs->child, req);
        return;
    }
    block_req_fifo_push(&tq->waiting[is_write], req);
    g_mutex_lock(&tg->lock);
    if (!tq->member.queued[is_write]) {
        throttle_group_ring_append(tg, &tq->member, is_write);
    }
    if (tg->ring[is_write] == &tq->member) {
        /* First in line: go now if the buckets allow, else arm the timer
         * (once: a second request behind the first changes nothing; an
         * armed timer is always the first queue's, take_turns()). */
        if (!aio_timer_pending(&tq->timer[is_write])) {
            throttle_take_turns(tq, is_write, &go);
        }
    }
    g_mutex_unlock(&tg->lock);
    throttle_send(tq, &go);
}

/* Set up the queue's FIFOs, timers and wake BH.  q->ctx's home thread. */
static void throttle_attach_queue(BlockQueue *q)
{
    ThrottleNodeState *s = q->bs->opaque;
    ThrottleQueue *tq = g_new0(ThrottleQueue, 1);

    tq->bs = q->bs;
    tq->tg = s->tg;
    tq->member.wake_bh = aio_bh_new(q->ctx, throttle_wake_bh, tq);
    aio_timer_init(q->ctx, &tq->timer[0], throttle_read_timer_cb, tq);
    aio_timer_init(q->ctx, &tq->timer[1], throttle_write_timer_cb, tq);
    q->opaque = tq;
}

/*
 * q->ctx's home thread, q drained: nothing waits, so tq is in no ring
 * and nobody schedules its BH any more (only the first queue of a ring
 * is woken, under the lock).
 */
static void throttle_detach_queue(BlockQueue *q)
{
    ThrottleQueue *tq = q->opaque;

    for (int w = 0; w < 2; w++) {
        g_assert(!tq->waiting[w].head);
        g_assert(!tq->member.queued[w]);
        aio_timer_del(&tq->timer[w]);
    }
    aio_bh_delete(tq->member.wake_bh);
    g_free(tq);
    q->opaque = NULL;
}

const BlockDriver block_driver_throttle = {
    .instance_size = sizeof(ThrottleNodeState),
    .open = throttle_open,
    .close = throttle_close,
    .getlength = throttle_getlength,
    .truncate = throttle_truncate,
    .submit = throttle_submit,
    .attach_queue = throttle_attach_queue,
    .detach_queue = throttle_detach_queue,
};

/*
 * null-co and null-aio: block drivers with no storage behind them.
 *
 * Theory of operation.  A null node has a length (option `size`) and
 * nothing else: writes, flushes, discards and write-zeroes succeed and are
 * forgotten; reads succeed and either leave the caller's buffer as it was
 * (the default, so that a benchmark measures the block layer rather than
 * memset) or fill it with zeroes (`read-zeroes=on`).  Its purpose is to
 * measure and test everything above the storage: the generic block layer,
 * the devices, the event loop and its poll window.
 *
 * block_node_resize() changes the length (truncate, main thread); the
 * generic layer checks bounds against the length it publishes, so the
 * requests here never read NullState.length.
 *
 * A request never completes inside submit (the block layer's contract), so
 * every request goes onto a queue: a singly linked FIFO threaded through
 * block_req_int(req)->next (BlockReqFifo), one per BlockQueue (NullQueue,
 * in q->opaque), owned by that queue's home thread, so queues in several
 * IOThreads share nothing but the node's fixed options.  What drains the
 * queue depends on `latency-ns`:
 *
 *   - 0: one bottom half per queue.  Submitting schedules it (scheduling a
 *     pending BH is free), so all the requests submitted in one loop turn
 *     complete together in the BH's next run.
 *   - > 0: one AioTimer per queue.  Every request is due latency-ns after
 *     it reached the driver; the deadline is kept in the request itself
 *     (block_req_int(req)->submit_ns, which the generic layer leaves to
 *     the driver).  The latency is the same for every request, so FIFO
 *     order is deadline order: the timer is armed at the deadline of the
 *     queue's head, and when it fires it completes every request that is
 *     due and re-arms for the new head.
 *
 * Both callbacks complete at most what was due when they started: a
 * completion callback that submits again gets a later run, so a closed
 * loop cannot keep us in one callback.  A completion callback may also run
 * a nested event loop (block_node_drain(), for instance): before calling
 * out, the BH or timer is already set up for the requests still queued, so
 * the nested loop can complete them.
 *
 * Per-context state (the NullQueue with its BH and timer) is made by
 * attach_queue and destroyed by detach_queue, both in the queue's home
 * thread; the queue is drained then, so nothing is queued.  open only reads options; close has nothing to free.
 *
 * null-aio is the same implementation under another name.  (In QEMU the
 * two differ in how they complete: null-co in a coroutine, null-aio
 * through a BH; Spindle has no coroutines, so both complete through the BH
 * or the timer described above.)
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include "block/block-int.h"
#include "util/clock.h"
#include "util/cutils.h"
#include "util/iov.h"

#define NULL_DEFAULT_SIZE (1ULL << 30)

typedef struct NullState {
    int64_t length;
    bool read_zeroes;
    int64_t latency_ns;
} NullState;

/* Per BlockQueue (per context): its home thread only. */
typedef struct NullQueue {
    const NullState *ns;

    BlockReqFifo queue;          /* the submitted requests */

    QEMUBH *bh;                  /* latency_ns == 0 */
    AioTimer timer;              /* latency_ns > 0 */
} NullQueue;

/* The deadline stored by null_submit() (latency > 0 only). */
static int64_t null_deadline(BlockRequest *req)
{
    return block_req_int(req)->submit_ns;
}

static void null_complete(NullQueue *s, BlockRequest *req)
{
    if (req->op == BLOCK_OP_READ && s->ns->read_zeroes) {
        iov_zero_from(req->iov, req->niov, 0);
    }
    block_request_complete(req, 0);
}

/* Latency 0: complete everything queued when the BH started. */
static void null_bh_cb(void *opaque)
{
    NullQueue *s = opaque;
    unsigned n = s->queue.len;
    bool rescheduled = n > 1;
    BlockRequest *req;

    if (rescheduled) {
        /* Pending while the callbacks run, in case one of them runs a
         * nested event loop that waits for the rest; cancelled below if we
         * complete them all ourselves. */
        aio_bh_schedule(s->bh);
    }
    /* A nested loop may complete some of ours: pop, don't walk a list. */
    block_acct_batch_begin();
    while (n-- > 0 && (req = block_req_fifo_pop(&s->queue)) != NULL) {
        null_complete(s, req);
    }
    block_acct_batch_end();
    if (rescheduled && !s->queue.head) {
        aio_bh_cancel(s->bh);
    }
}

/* Arm the timer for the queue's head, or disarm it if the queue is empty. */
static void null_timer_update(NullQueue *s)
{
    if (s->queue.head) {
        aio_timer_mod(&s->timer, null_deadline(s->queue.head));
    } else {
        aio_timer_del(&s->timer);
    }
}

/* Latency > 0: complete every request that is due. */
static void null_timer_cb(void *opaque)
{
    NullQueue *s = opaque;
    int64_t now = clock_now_ns();

    /* Armed for the rest before calling out (see the top of the file). */
    null_timer_update(s);
    block_acct_batch_begin_at(now);
    while (s->queue.head && null_deadline(s->queue.head) <= now) {
        null_complete(s, block_req_fifo_pop(&s->queue));
    }
    block_acct_batch_end();
    null_timer_update(s);
}

static void null_submit(BlockNode *bs, BlockRequest *req)
{
    NullQueue *s = block_req_queue(bs, req)->opaque;

    if (s->ns->latency_ns > 0) {
        block_req_int(req)->submit_ns = add_sat_int64(clock_now_ns(),
                                                      s->ns->latency_ns);
    }
    block_req_fifo_push(&s->queue, req);
    if (s->ns->latency_ns == 0) {
        aio_bh_schedule(s->bh);
    } else if (!aio_timer_pending(&s->timer)) {
        /* Not armed: the queue was empty, or we are inside the timer
         * callback, which re-arms when it is done; arming now is right in
         * both cases. */
        null_timer_update(s);
    }
}

/* Set up the BH (latency 0) and the timer in q->ctx.  Its home thread. */
static void null_attach_queue(BlockQueue *q)
{
    NullQueue *s = g_new0(NullQueue, 1);

    s->ns = q->bs->opaque;
    /* Initialised even when unused: the pending checks read it. */
    aio_timer_init(q->ctx, &s->timer, null_timer_cb, s);
    if (s->ns->latency_ns == 0) {
        s->bh = aio_bh_new(q->ctx, null_bh_cb, s);
    }
    q->opaque = s;
}

/* q->ctx's home thread, q drained. */
static void null_detach_queue(BlockQueue *q)
{
    NullQueue *s = q->opaque;

    /* Drained: nothing queued, so the BH is not scheduled and the timer is
     * not armed. */
    g_assert(!s->queue.head);
    g_assert(!aio_timer_pending(&s->timer));
    aio_bh_delete(s->bh);
    g_free(s);
    q->opaque = NULL;
}

static bool null_open(BlockNode *bs, Opts *opts, Error **errp)
{
    NullState *s = bs->opaque;
    uint64_t size;

    if (!opts_get_size(opts, "size", NULL_DEFAULT_SIZE, &size, errp) ||
        !opts_get_bool(opts, "read-zeroes", false, &s->read_zeroes, errp) ||
        !opts_get_int(opts, "latency-ns", 0, INT64_MAX, 0, &s->latency_ns,
                      errp)) {
        return false;
    }
    if (size > INT64_MAX) {
        error_setg(errp, "Parameter 'size' must be at most %" PRId64
                   " bytes", INT64_MAX);
        return false;
    }
    s->length = size;

    bs->limits = (BlockLimits) {
        .request_alignment = 1,
        .mem_alignment = 1,
    };
    return true;
}

static void null_close(BlockNode *bs)
{
    /* Nothing: the BHs and timers went with detach_queue. */
}

/* Main thread, like every reader of s->length (getlength). */
static int64_t null_getlength(BlockNode *bs)
{
    NullState *s = bs->opaque;

    return s->length;
}

/* Nothing stored: the new size is all there is to change.  Main thread. */
static bool null_truncate(BlockNode *bs, int64_t size, Error **errp)
{
    NullState *s = bs->opaque;

    s->length = size;
    return true;
}

/* Registered as null-co and as null-aio (see the top of the file). */
const BlockDriver block_driver_null = {
    .instance_size = sizeof(NullState),
    .open = null_open,
    .close = null_close,
    .getlength = null_getlength,
    .truncate = null_truncate,
    .submit = null_submit,
    .attach_queue = null_attach_queue,
    .detach_queue = null_detach_queue,
};

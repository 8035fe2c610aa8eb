/*
 * Requests: checks, bounce buffers, serialisation, completion, drain, plug
 * (step 5 of docs/devel/architecture.md, The life of a request).
 *
 * Theory of operation.  block_node_submit() counts the request in flight and
 * checks it against the node (operation, bounds, read-only, iovec length).
 * A request that fails the checks, or has nothing to do (zero length, a
 * discard on a discard=ignore node, a flush on a cache.no-flush node),
 * completes from its queue's BH, never from inside submit.
 *
 * Alignment.  A node whose driver needs aligned offsets, lengths or buffers
 * (O_DIRECT) still accepts any request: a misaligned READ reads the aligned
 * range around it into a bounce buffer and copies the requested part out;
 * a misaligned WRITE reads the aligned range, patches it and writes it back
 * (read-modify-write).  An RMW must not interleave with another write to
 * the same blocks, or one of the two would be lost, so on such nodes every
 * write-like request (WRITE, DISCARD, WRITE_ZEROES) is counted, an RMW
 * waits until no write is in flight, and writes arriving while an RMW
 * waits or runs wait until it is done.  Guests issue aligned I/O, so this
 * slow path is rare; nodes without alignment needs skip all of it.
 *
 * Several queues, in several threads, may write to one node, and the
 * common case must not share a lock or a written cache line between
 * them.  So an aligned write counts itself in its own queue (fast_writes)
 * and, after a full fence, reads the node's gate: if the gate is down it
 * goes, taking no lock.  An RMW, under the node's rmw_lock, raises the
 * gate, fences, and sums the queues' counts: it starts only at zero.  The
 * two fences make sure that at least one side sees the other (an aligned
 * write either sees the gate and takes the slow path, or the RMW sees its
 * count and waits).  An aligned write that finishes while the gate is up
 * takes the lock to let a waiting RMW go.  Everything on the slow path
 * (writes counted under the lock, the queue of waiting requests) is under
 * rmw_lock, never held across a submission or a callback.  A waiting
 * request that may go is started in its own queue's thread: at once if
 * that is the thread that let it go, else from a one-shot BH there.
 *
 * Queues.  Every request goes through a BlockQueue (block_node_submit()
 * uses the node's default one): its in-flight count, the deferred BH and
 * the completion are those of the queue's context.
 *
 * Completion.  Drivers and engines call block_request_complete(), which
 * advances a bounced request to its next phase or undoes the bounce, ends
 * serialisation, drops the in-flight count, counts the request if its
 * queue has a BlockAcct (accounting.c: stamped at submission, counted
 * once, here) and calls the owner.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "block/block-int.h"
#include "util/iov.h"

typedef enum BlockBouncePhase {
    BOUNCE_NONE,
    BOUNCE_READ,          /* misaligned read: aligned read into the bounce */
    BOUNCE_RMW_READ,      /* misaligned write, step 1: read the aligned range */
    BOUNCE_RMW_WRITE,     /* step 2: write the patched aligned range */
} BlockBouncePhase;

/* ------------------------------------------------------------------------ */
/* Completing later                                                          */

/*
 * Requests finished at submission (errors, nothing to do) complete from
 * their queue's BH, in order: one BH per queue, no allocation or lookup
 * per request.
 */
static void block_deferred_bh(void *opaque)
{
    BlockQueue *q = opaque;
    BlockRequest *req;

    block_acct_batch_begin();
    while ((req = block_req_fifo_pop(&q->deferred))) {
        block_request_complete(req, block_req_int(req)->ret);
    }
    block_acct_batch_end();
}

void block_queue_deferred_init(BlockQueue *q)
{
    q->deferred_bh = aio_bh_new(q->ctx, block_deferred_bh, q);
}

void block_queue_deferred_fini(BlockQueue *q)
{
    g_assert(!q->deferred.head);     /* drained: nothing can be pending */
    aio_bh_delete(q->deferred_bh);
    q->deferred_bh = NULL;
}

void block_request_complete_later(BlockRequest *req, int ret)
{
    BlockRequestInt *ri = block_req_int(req);
    BlockQueue *q = ri->queue;

    ri->ret = ret;
    block_req_fifo_push(&q->deferred, req);
    aio_bh_schedule(q->deferred_bh);
}

/* ------------------------------------------------------------------------ */
/* Checks                                                                    */

static bool block_op_writes(BlockOp op)
{
    return op == BLOCK_OP_WRITE || op == BLOCK_OP_DISCARD ||
           op == BLOCK_OP_WRITE_ZEROES;
}

static bool block_range_valid(const BlockNode *bs, int64_t offset, int64_t bytes)
{
    int64_t length = block_node_length(bs);

    return offset >= 0 && bytes >= 0 && offset <= length &&
           bytes <= length - offset;
}

static int64_t block_iov_size(const struct iovec *iov, int niov)
{
    int64_t total = 0;

    for (int i = 0; i < niov; i++) {
        if (iov[i].iov_len > (size_t)(INT64_MAX - total)) {
            return -1;
        }
        total += iov[i].iov_len;
    }
    return total;
}

/*
 * 1: go ahead; 0: nothing to do, complete with success; -errno: fail.
 */
static int block_request_check(BlockNode *bs, BlockRequest *req)
{
    if (req->op != BLOCK_OP_READ &&
        atomic_load_explicit(&bs->inactive, memory_order_relaxed)) {
        /* Another process may own the image now (block.h). */
        return -EPERM;
    }
    switch (req->op) {
    case BLOCK_OP_READ:
    case BLOCK_OP_WRITE:
        if (req->niov < 0 || req->niov > IOV_MAX || (req->niov && !req->iov) ||
            block_iov_size(req->iov, req->niov) != req->bytes) {
            return -EINVAL;
        }
        break;
    case BLOCK_OP_FLUSH:
        return bs->no_flush ? 0 : 1;
    case BLOCK_OP_DISCARD:
    case BLOCK_OP_WRITE_ZEROES:
        break;
    default:
        return -EINVAL;
    }
    if (block_op_writes(req->op) && bs->read_only) {
        return -EPERM;
    }
    if (!block_range_valid(bs, req->offset, req->bytes)) {
        return -EINVAL;
    }
    if (req->bytes == 0 || (req->op == BLOCK_OP_DISCARD && !bs->discard_unmap)) {
        return 0;
    }
    return 1;
}

static bool block_node_needs_alignment(const BlockNode *bs)
{
    return bs->limits.request_alignment > 1 || bs->limits.mem_alignment > 1;
}

static bool block_request_misaligned(const BlockNode *bs, const BlockRequest *req)
{
    uint64_t ra = bs->limits.request_alignment;
    uint64_t ma = bs->limits.mem_alignment;

    if (req->op != BLOCK_OP_READ && req->op != BLOCK_OP_WRITE) {
        return false;
    }
    if ((req->offset | req->bytes) & (ra - 1)) {
        return true;
    }
    for (int i = 0; i < req->niov; i++) {
        if (((uintptr_t)req->iov[i].iov_base | req->iov[i].iov_len) & (ma - 1)) {
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------------------ */
/* Bounce buffers                                                            */

/*
 * Point req at an aligned bounce buffer covering its range; the first phase
 * is always a read.  Returns -ENOMEM if the buffer cannot be allocated.
 */
static int block_bounce_start(BlockNode *bs, BlockRequest *req)
{
    BlockRequestInt *ri = block_req_int(req);
    uint64_t ra = bs->limits.request_alignment;
    size_t align = MAX(MAX(bs->limits.mem_alignment, ra), sizeof(void *));
    int64_t lo = req->offset & ~(int64_t)(ra - 1);
    int64_t hi = (req->offset + req->bytes + ra - 1) & ~(int64_t)(ra - 1);

    if (posix_memalign(&ri->bounce, align, hi - lo)) {
        ri->bounce = NULL;
        return -ENOMEM;
    }
    ri->orig_iov = req->iov;
    ri->orig_niov = req->niov;
    ri->orig_offset = req->offset;
    ri->orig_bytes = req->bytes;
    ri->bounce_iov = (struct iovec) { .iov_base = ri->bounce, .iov_len = hi - lo };
    ri->bounce_phase = req->op == BLOCK_OP_READ ? BOUNCE_READ : BOUNCE_RMW_READ;
    req->op = BLOCK_OP_READ;
    req->iov = &ri->bounce_iov;
    req->niov = 1;
    req->offset = lo;
    req->bytes = hi - lo;
    return 0;
}

/* Give the caller its request back as it submitted it. */
static void block_bounce_end(BlockRequest *req)
{
    BlockRequestInt *ri = block_req_int(req);

    if (ri->bounce_phase != BOUNCE_READ) {
        req->op = BLOCK_OP_WRITE;
    }
    req->iov = ri->orig_iov;
    req->niov = ri->orig_niov;
    req->offset = ri->orig_offset;
    req->bytes = ri->orig_bytes;
    free(ri->bounce);
    ri->bounce = NULL;
    ri->bounce_phase = BOUNCE_NONE;
}

/*
 * A bounced request's phase finished with ret.  Returns true if the request
 * continues (the RMW write was submitted), false if it is done.
 */
static bool block_bounce_advance(BlockRequest *req, int ret)
{
    BlockRequestInt *ri = block_req_int(req);
    char *buf = ri->bounce;
    /* From the original offset: a filter below may have moved req->offset. */
    int64_t ra = ri->node->limits.request_alignment;
    int64_t lo = ri->orig_offset & ~(ra - 1);
    int64_t skip = ri->orig_offset - lo;

    switch (ri->bounce_phase) {
    case BOUNCE_READ:
        if (ret == 0) {
            iov_from_buf(ri->orig_iov, ri->orig_niov, 0, buf + skip,
                         ri->orig_bytes);
        }
        break;
    case BOUNCE_RMW_READ:
        if (ret == 0) {
            iov_to_buf(ri->orig_iov, ri->orig_niov, 0, buf + skip,
                       ri->orig_bytes);
            ri->bounce_phase = BOUNCE_RMW_WRITE;
            req->op = BLOCK_OP_WRITE;
            req->offset = lo;        /* undo what filters did on the way down */
            req->iov = &ri->bounce_iov;
            req->niov = 1;
            block_driver_submit(ri->node, req);
            return true;
        }
        break;
    default:
        break;
    }
    block_bounce_end(req);
    return false;
}

/* ------------------------------------------------------------------------ */
/* Serialisation of read-modify-write                                        */

/* Aligned writes in flight on the lock-free path, all queues.  rmw_lock
 * held, and the gate raised before (so the sum can only go down). */
static unsigned block_fast_writes(BlockNode *bs)
{
    unsigned n = 0;

    for (BlockQueue *q = bs->queues; q; q = q->node_next) {
        n += atomic_load_explicit(&q->fast_writes, memory_order_relaxed);
    }
    return n;
}

/*
 * Raise the gate: from now on aligned writes take the lock.  The fence
 * pairs with the one in block_fast_write_begin(): either that writer sees
 * the gate, or we see its count.  rmw_lock held.
 */
static void block_gate_raise(BlockNode *bs)
{
    if (!atomic_load_explicit(&bs->rmw_gate, memory_order_relaxed)) {
        atomic_store_explicit(&bs->rmw_gate, true, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
    }
}

/* Lower the gate once no RMW runs or waits.  rmw_lock held. */
static void block_gate_settle(BlockNode *bs)
{
    if (!bs->rmw_active && !bs->wait.head) {
        atomic_store_explicit(&bs->rmw_gate, false, memory_order_release);
    }
}

/* Whether a write-like request (rmw: a misaligned write) may start now.
 * rmw_lock held; for an RMW, the gate raised. */
static bool block_write_may_start(BlockNode *bs, bool rmw)
{
    if (bs->rmw_active || bs->wait.head) {
        return false;            /* keep the order of waiting requests */
    }
    return !rmw || (bs->writes_in_flight == 0 && block_fast_writes(bs) == 0);
}

/* Count a write-like request that may start now.  rmw_lock held. */
static void block_write_count(BlockNode *bs, BlockRequest *req, bool rmw)
{
    BlockRequestInt *ri = block_req_int(req);

    ri->serialized = true;
    bs->writes_in_flight++;
    if (rmw) {
        ri->holds_rmw = true;
        bs->rmw_active = true;
    }
}

/* Start a counted write-like request.  Its queue's home thread. */
static void block_write_go(BlockNode *bs, BlockRequest *req)
{
    BlockRequestInt *ri = block_req_int(req);
    int r;

    if (ri->holds_rmw) {
        r = block_bounce_start(bs, req);
        if (r < 0) {
            /* Still counted; the completion uncounts it. */
            block_request_complete_later(req, r);
            return;
        }
    }
    bs->drv->submit(bs, req);
}

static void block_write_resume_bh(void *opaque)
{
    BlockRequest *req = opaque;

    block_write_go(block_req_int(req)->node, req);
}

/*
 * Take the waiting requests that may go now, in order, counted, onto
 * *tail (a list linked by next).  rmw_lock held.
 */
static BlockRequest **block_wait_release(BlockNode *bs, BlockRequest **tail)
{
    /* Only write-like requests wait; the gate is up while any does. */
    while (bs->wait.head && !bs->rmw_active) {
        bool rmw = block_request_misaligned(bs, bs->wait.head);
        BlockRequest *w;

        if (rmw && (bs->writes_in_flight > 0 || block_fast_writes(bs) > 0)) {
            break;
        }
        w = block_req_fifo_pop(&bs->wait);          /* next: NULL */
        block_write_count(bs, w, rmw);
        *tail = w;
        tail = &block_req_int(w)->next;
    }
    return tail;
}

/*
 * Start the requests that block_wait_release() let go: those submitted in
 * another context there, from a one-shot BH; ours here and now.
 */
static void block_write_start_list(BlockNode *bs, BlockRequest *start)
{
    while (start) {
        BlockRequest *w = start;
        BlockRequestInt *wi = block_req_int(w);

        start = wi->next;
        wi->next = NULL;
        if (aio_context_in_home_thread(wi->queue->ctx)) {
            block_write_go(bs, w);
        } else {
            /* Another thread's request: a one-shot BH (thread-safe to
             * schedule) starts it there.  The rare slow path. */
            aio_bh_schedule_oneshot(wi->queue->ctx, block_write_resume_bh, w);
        }
    }
}

/* Let waiting requests go after a write left the count. */
static void block_write_wake(BlockNode *bs)
{
    BlockRequest *start = NULL;

    g_mutex_lock(&bs->rmw_lock);
    block_wait_release(bs, &start);
    block_gate_settle(bs);
    g_mutex_unlock(&bs->rmw_lock);
    block_write_start_list(bs, start);
}

/*
 * The lock-free path of an aligned write: count it in its queue, then
 * look at the gate.  Returns false (uncounted) if an RMW waits or runs.
 */
static bool block_fast_write_begin(BlockNode *bs, BlockQueue *q)
{
    unsigned n = atomic_load_explicit(&q->fast_writes, memory_order_relaxed);

    atomic_store_explicit(&q->fast_writes, n + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    if (!atomic_load_explicit(&bs->rmw_gate, memory_order_relaxed)) {
        return true;
    }
    atomic_store_explicit(&q->fast_writes, n, memory_order_relaxed);
    return false;
}

/*
 * An aligned write left the lock-free count (it finished, or found the
 * gate up).  If an RMW may be waiting for the count to reach zero, see
 * whether it can go: the fence pairs with the one in block_gate_raise().
 */
static void block_fast_write_end(BlockNode *bs, BlockQueue *q)
{
    unsigned n = atomic_load_explicit(&q->fast_writes, memory_order_relaxed);

    atomic_store_explicit(&q->fast_writes, n - 1, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&bs->rmw_gate, memory_order_relaxed)) {
        block_write_wake(bs);
    }
}

/* A write counted under the lock finished: uncount it, let waiters go. */
static void block_write_done(BlockNode *bs, BlockRequest *req)
{
    BlockRequestInt *ri = block_req_int(req);
    BlockRequest *start = NULL;

    g_mutex_lock(&bs->rmw_lock);
    ri->serialized = false;
    bs->writes_in_flight--;
    if (ri->holds_rmw) {
        ri->holds_rmw = false;
        bs->rmw_active = false;
    }
    block_wait_release(bs, &start);
    block_gate_settle(bs);
    g_mutex_unlock(&bs->rmw_lock);
    block_write_start_list(bs, start);
}

/*
 * A write-like request on a node that needs alignment.  Aligned ones take
 * the lock-free path unless the gate is up; the others (and aligned ones
 * while an RMW waits or runs) are counted or queued under the lock.
 */
static void block_write_submit(BlockNode *bs, BlockRequest *req, bool rmw)
{
    BlockRequestInt *ri = block_req_int(req);
    BlockRequest *start = NULL, **tail = &start;
    bool go;

    if (!rmw && block_fast_write_begin(bs, ri->queue)) {
        ri->fast_write = true;
        bs->drv->submit(bs, req);
        return;
    }
    g_mutex_lock(&bs->rmw_lock);
    bs->locked_writes++;
    if (rmw) {
        bs->rmw_writes++;
        block_gate_raise(bs);
    }
    /* An RMW may have waited for the count this write just dropped. */
    tail = block_wait_release(bs, tail);
    go = block_write_may_start(bs, rmw);
    if (go) {
        block_write_count(bs, req, rmw);
    } else {
        /* The gate is up: wait.head set. */
        block_req_fifo_push(&bs->wait, req);
    }
    block_gate_settle(bs);
    g_mutex_unlock(&bs->rmw_lock);
    block_write_start_list(bs, start);
    if (go) {
        block_write_go(bs, req);
    }
}

void block_node_get_write_stats(BlockNode *bs, BlockWriteStats *out)
{
    g_mutex_lock(&bs->rmw_lock);
    *out = (BlockWriteStats) {
        .locked_writes = bs->locked_writes,
        .rmw_writes = bs->rmw_writes,
    };
    g_mutex_unlock(&bs->rmw_lock);
}

/* ------------------------------------------------------------------------ */
/* Submission and completion                                                 */

/* Route a checked request: serialise and bounce as the node needs. */
static void block_dispatch(BlockNode *bs, BlockRequest *req)
{
    bool misaligned;

    if (!block_node_needs_alignment(bs)) {
        bs->drv->submit(bs, req);
        return;
    }
    misaligned = block_request_misaligned(bs, req);
    if (block_op_writes(req->op)) {
        block_write_submit(bs, req, misaligned);
        return;
    }
    if (misaligned) {
        int r = block_bounce_start(bs, req);

        if (r < 0) {
            block_request_complete_later(req, r);
            return;
        }
    }
    bs->drv->submit(bs, req);
}

void block_queue_submit(BlockQueue *q, BlockRequest *req)
{
    BlockRequestInt *ri = block_req_int(req);
    BlockNode *bs = q->bs;
    int r;

    g_assert(aio_context_in_home_thread(q->ctx));
    memset(ri, 0, offsetof(BlockRequestInt, engine));
    ri->node = bs;
    ri->queue = q;
    if (q->acct) {
        ri->acct_start_ns = block_queue_acct_now(q);  /* see accounting.c */
    }
    q->in_flight++;

    r = block_request_check(bs, req);
    if (r <= 0) {
        block_request_complete_later(req, r);
        return;
    }
    block_dispatch(bs, req);
}

void block_node_submit(BlockNode *bs, BlockRequest *req)
{
    block_queue_submit(bs->default_q, req);
}

void block_request_complete(BlockRequest *req, int ret)
{
    BlockRequestInt *ri = block_req_int(req);
    BlockNode *bs = ri->node;
    BlockQueue *q = ri->queue;

    g_assert(aio_context_in_home_thread(q->ctx));
    if (ri->bounce_phase != BOUNCE_NONE && block_bounce_advance(req, ret)) {
        return;                  /* the RMW write is under way */
    }
    if (ri->fast_write) {
        ri->fast_write = false;
        block_fast_write_end(bs, q);
    } else if (ri->serialized) {
        block_write_done(bs, req);
    }
    q->in_flight--;
    if (ri->acct_start_ns && q->acct) {
        block_acct_done(q->acct, req, ret, ri->acct_start_ns);
    }
    req->cb(req, ret);
}

void block_driver_submit(BlockNode *bs, BlockRequest *req)
{
    bs->drv->submit(bs, req);
}

unsigned block_queue_in_flight(const BlockQueue *q)
{
    return q->in_flight;
}

unsigned block_node_in_flight(const BlockNode *bs)
{
    return bs->default_q->in_flight;
}

void block_queue_drain(BlockQueue *q)
{
    g_assert(aio_context_in_home_thread(q->ctx));
    while (q->in_flight > 0) {
        aio_poll(q->ctx, true);
    }
}

void block_node_drain(BlockNode *bs)
{
    block_queue_drain(bs->default_q);
}

void block_queue_io_plug(BlockQueue *q)
{
    g_assert(aio_context_in_home_thread(q->ctx));
    if (q->plugged++ > 0) {
        return;
    }
    q->acct_plug_ns = 0;             /* a new batch of submissions */
    if (q->bs->drv->io_plug) {
        q->bs->drv->io_plug(q);
    } else if (q->child) {
        block_queue_io_plug(q->child);
    }
}

void block_queue_io_unplug(BlockQueue *q)
{
    g_assert(aio_context_in_home_thread(q->ctx));
    g_assert(q->plugged > 0);
    if (--q->plugged > 0) {
        return;
    }
    q->acct_plug_ns = 0;
    if (q->bs->drv->io_unplug) {
        q->bs->drv->io_unplug(q);
    } else if (q->child) {
        block_queue_io_unplug(q->child);
    }
}

void block_node_io_plug(BlockNode *bs)
{
    block_queue_io_plug(bs->default_q);
}

void block_node_io_unplug(BlockNode *bs)
{
    block_queue_io_unplug(bs->default_q);
}

/*
 * The "io_uring" I/O engine: one ring per AioContext, completions reaped
 * from the CQ in user space.
 *
 * Theory of operation.
 *
 * One UringEngine per AioContext (kept in the context's data under
 * &block_engine_io_uring and destroyed with it): a ring, an eventfd
 * registered with io_uring_register_eventfd(), a queue of requests not yet
 * in the SQ, a submit bottom half and a retry timer.  No SQPOLL (a kernel
 * thread per ring spinning for us).
 *
 * The ring is made with SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG
 * ("deferred") where the kernel has them (6.1 on), else with no flags.
 * Without flags, the device's completion reaches the CQ through task work
 * that the kernel runs in our thread: it interrupts the thread (an IPI, if
 * it is running) or wakes it from epoll_wait() with EINTR, the task work
 * posts the CQE and signals the eventfd, and the loop goes round once more
 * to see it.  Deferred, the interrupt handler only queues the work, sets
 * IORING_SQ_TASKRUN in the SQ ring's flags and signals the eventfd (when
 * the queue goes from empty to non-empty); the CQEs are posted when we ask
 * (io_uring_get_events(), or any io_uring_enter() with GETEVENTS, which
 * io_uring_submit() adds while the flag is set).  So a spinning thread is
 * not interrupted, and the poll callback watches the flag as well as the
 * CQ tail.  No completion is lost: the kernel sets the flag before it
 * signals the eventfd and clears it only when it posts the queued CQEs,
 * the eventfd is cleared before the flag is read, and if asking fails
 * with the flag still set, we set the eventfd ourselves.  The engine is
 * created in the context's home thread and only that thread submits and
 * reaps, as SINGLE_ISSUER requires.
 *
 * Submission works exactly like the native engine's (the part they share
 * is KernelEngine, aio-engine-int.h): submit() queues the request; the queue becomes SQEs and one io_uring_submit() at the end of
 * the loop turn (the submit BH, scheduled by the first queued request), at
 * once when aio-max-batch requests are queued (0: 2), or at the last
 * unplug; the BH does nothing while plugged.  A full SQ is submitted and
 * filled again.  We never have more requests in the kernel than the CQ has
 * entries, so the CQ cannot overflow (an overflowed CQE would only be
 * visible after a system call, not to the poll callback); the rest waits in
 * the queue for completions.  If io_uring_submit() fails (-EAGAIN, -EBUSY:
 * the kernel is short of resources) or consumes nothing, the SQEs stay in
 * the SQ and the engine is "blocked" until a completion arrives (or, with
 * nothing in the kernel, until the retry timer fires).  An SQE the kernel
 * rejects gets an error CQE like any failed request.
 *
 * Completions.  The poll callback is io_uring_cq_ready(): an acquire load
 * of the CQ tail and a load of our own head, and (deferred) a load of the
 * SQ ring's flags, no system call.  The reap path first has the kernel
 * post the queued CQEs if the flag is set (one system call for all of
 * them), then takes one CQE at a time (io_uring_peek_cqe(), copy, then
 * io_uring_cqe_seen(), which publishes the new head with a release store)
 * before it completes the request, so a callback that runs a nested
 * aio_poll() cannot see the same CQE twice.  CQEs reaped from io_poll_ready
 * count in completions_polled, those from io_read (eventfd) do not.  The
 * polled path leaves the eventfd set, which costs one spurious wakeup later
 * instead of a system call now.
 *
 * Per request (user_data = the request): res < 0 completes with that
 * -errno, except -EAGAIN (and -EINTR), which resubmits the same request (at
 * most ENGINE_MAX_EAGAIN_RETRIES times in a row).  A short transfer
 * resubmits the rest (engine.uring.done counts the bytes transferred so
 * far; the rest is described without allocating, engine_chunk_at()); a
 * read that returns 0 hit the end of the file and zero-fills the rest.
 * FLUSH is IORING_OP_FSYNC with IORING_FSYNC_DATASYNC.  A FUA write
 * carries RWF_DSYNC.
 *
 * Threads: everything runs in the context's home thread; the counters are
 * single-writer atomics that any thread may read.
 */
#include "config-host.h"
#include <errno.h>
#include <stddef.h>
#include <liburing.h>
#include "aio-engine-int.h"
#include "util/clock.h"
#include "util/event-notifier.h"
#include "util/trace.h"

/* SQ entries; the CQ gets twice as many. */
#define URING_ENTRIES 256

/* io_uring_prep_read() takes a 32-bit length: cap one chunk (the rest goes
 * as a short transfer would). */
#define URING_MAX_CHUNK (1u << 30)

/* k.queue: requests not yet in the SQ; k.in_flight: SQEs prepared, CQEs
 * not yet reaped; k.blocked: submission refused, wait for a CQE. */
typedef struct UringEngine {
    KernelEngine k;              /* first: a BlockEngine * is a UringEngine * */
    struct io_uring ring;
    unsigned max_in_flight;      /* CQ entries */
    bool deferred;               /* DEFER_TASKRUN: CQEs posted when asked */
} UringEngine;

/*
 * Per-request state, in the request's private area: bytes done so far and
 * the fd, to resubmit a short transfer or an -EAGAIN long after submit()
 * returned.
 */
typedef __typeof__(((BlockRequestInt *)0)->engine.uring) UringReqState;

static UringEngine *uring_engine(BlockEngine *be)
{
    return (UringEngine *)be;
}

static UringEngine *uring_of(KernelEngine *k)
{
    return container_of(k, UringEngine, k);
}

static UringReqState *uring_req(BlockRequest *req)
{
    return (UringReqState *)&block_req_int(req)->engine.uring;
}

/* ------------------------------------------------------------------------ */
/* Preparing SQEs                                                            */

static void uring_prep_rw(struct io_uring_sqe *sqe, BlockRequest *req)
{
    UringReqState *s = uring_req(req);
    bool is_write = req->op == BLOCK_OP_WRITE;
    uint64_t offset = req->offset + s->done;
    EngineChunk chunk;

    engine_chunk_at(req, s->done, &chunk);
    if (chunk.niov && is_write) {
        io_uring_prep_writev(sqe, s->fd, chunk.iov, chunk.niov, offset);
    } else if (chunk.niov) {
        io_uring_prep_readv(sqe, s->fd, chunk.iov, chunk.niov, offset);
    } else if (is_write) {
        io_uring_prep_write(sqe, s->fd, chunk.buf,
                            MIN(chunk.len, URING_MAX_CHUNK), offset);
    } else {
        io_uring_prep_read(sqe, s->fd, chunk.buf,
                           MIN(chunk.len, URING_MAX_CHUNK), offset);
    }
    if (engine_write_fua(req)) {
        sqe->rw_flags = RWF_DSYNC;
    }
}

static void uring_prep(struct io_uring_sqe *sqe, BlockRequest *req)
{
    if (req->op == BLOCK_OP_FLUSH) {
        io_uring_prep_fsync(sqe, uring_req(req)->fd, IORING_FSYNC_DATASYNC);
    } else {
        uring_prep_rw(sqe, req);
    }
    io_uring_sqe_set_data(sqe, req);
}

/* ------------------------------------------------------------------------ */
/* Finishing requests                                                        */

static void uring_finish(UringEngine *e, BlockRequest *req, int ret,
                         bool polled)
{
    engine_stat_add(&e->k.stats.completions, 1);
    if (polled) {
        engine_stat_add(&e->k.stats.completions_polled, 1);
    }
    SPINDLE_TRACE2(uring_complete, req, ret);
    block_request_complete(req, ret);
}

/* A request that ends before reaching the kernel: complete it from a BH,
 * since we are inside submit(). */
static void uring_complete_later(UringEngine *e, BlockRequest *req, int ret)
{
    engine_stat_add(&e->k.stats.completions, 1);
    SPINDLE_TRACE2(uring_complete, req, ret);
    block_request_complete_later(req, ret);
}

/* ------------------------------------------------------------------------ */
/* Submission                                                                */

/* Requests the kernel holds (prepared SQEs it has consumed). */
static unsigned uring_in_kernel(UringEngine *e)
{
    return e->k.in_flight - io_uring_sq_ready(&e->ring);
}

/* Turn up to max queued requests into SQEs, as far as the SQ and the CQ
 * have room. */
static void uring_fill_sq(UringEngine *e, unsigned max)
{
    for (unsigned n = 0; n < max && e->k.queue.len > 0 &&
                         e->k.in_flight < e->max_in_flight; n++) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);

        if (!sqe) {
            return;                     /* SQ full: submit first */
        }
        uring_prep(sqe, block_req_fifo_pop(&e->k.queue));
        e->k.in_flight++;
    }
}

/* One io_uring_submit() of the prepared SQEs. */
static void uring_submit_sq(UringEngine *e)
{
    unsigned n = io_uring_sq_ready(&e->ring);
    int r;

    do {
        r = io_uring_submit(&e->ring);
        engine_stat_add(&e->k.stats.submissions, 1);
    } while (r == -EINTR);
    SPINDLE_TRACE3(uring_submit, e, n, r);
    if (r > 0) {
        engine_stat_add(&e->k.stats.requests, r);
    } else {
        kernel_engine_refused(&e->k, n, uring_in_kernel(e));
    }
}

/* Submit the whole queue, as far as the kernel and the CQ allow. */
static void uring_submit_queue(UringEngine *e)
{
    unsigned max = engine_max_batch(e->k.ctx);

    while (!e->k.blocked) {
        uring_fill_sq(e, max);
        if (io_uring_sq_ready(&e->ring) == 0) {
            return;     /* all submitted, or the CQ is full: wait for CQEs */
        }
        uring_submit_sq(e);
    }
}

static void uring_submit_queue_k(KernelEngine *k)
{
    uring_submit_queue(uring_of(k));
}

/* ------------------------------------------------------------------------ */
/* Completion                                                                */

/* The kernel asked us to try req again. */
static void uring_retry(UringEngine *e, BlockRequest *req, int res,
                        bool polled)
{
    if (++block_req_int(req)->retries > ENGINE_MAX_EAGAIN_RETRIES) {
        uring_finish(e, req, res, polled);
        return;
    }
    engine_stat_add(&e->k.stats.resubmits, 1);
    kernel_engine_enqueue(&e->k, req);
}

/* A READ/WRITE transferred res >= 0 more bytes. */
static void uring_rw_progress(UringEngine *e, BlockRequest *req, int res,
                              bool polled)
{
    UringReqState *s = uring_req(req);

    s->done += res;
    if (s->done >= req->bytes) {
        uring_finish(e, req, 0, polled);
    } else if (res == 0 && req->op == BLOCK_OP_READ) {
        iov_zero_from(req->iov, req->niov, s->done);          /* end of file */
        uring_finish(e, req, 0, polled);
    } else if (res == 0) {
        uring_finish(e, req, -EIO, polled);      /* a write that stalled */
    } else {
        block_req_int(req)->retries = 0;         /* progress was made */
        engine_stat_add(&e->k.stats.resubmits, 1); /* short: do the rest */
        kernel_engine_enqueue(&e->k, req);
    }
}

static void uring_complete_cqe(UringEngine *e, BlockRequest *req, int res,
                               bool polled)
{
    e->k.in_flight--;
    if (res == -EAGAIN || res == -EINTR) {
        uring_retry(e, req, res, polled);
    } else if (req->op == BLOCK_OP_FLUSH || res < 0) {
        uring_finish(e, req, MIN(res, 0), polled);
    } else {
        uring_rw_progress(e, req, res, polled);
    }
}

/* Reap every CQE in the ring.  Returns how many. */
static unsigned uring_reap(UringEngine *e, bool polled)
{
    struct io_uring_cqe *cqe;
    unsigned n = 0;

    /* io_uring_cq_ready(): acquire load of the CQ tail, pairing with the
     * kernel's release store of the tail after it wrote the CQE; so the
     * peek below reads the CQE in memory, without a system call. */
    while (io_uring_cq_ready(&e->ring) > 0 &&
           io_uring_peek_cqe(&e->ring, &cqe) == 0) {
        BlockRequest *req = io_uring_cqe_get_data(cqe);
        int res = cqe->res;

        /* Release store of the new CQ head (in liburing): our reads of the
         * CQE happen before the kernel may reuse the slot. */
        io_uring_cqe_seen(&e->ring, cqe);
        uring_complete_cqe(e, req, res, polled);
        n++;
    }
    return n;
}

/* Deferred: completions the kernel holds for us to post. */
static bool uring_work_queued(UringEngine *e)
{
    return e->deferred &&
           (IO_URING_READ_ONCE(*e->ring.sq.kflags) & IORING_SQ_TASKRUN);
}

static void uring_process_completions(UringEngine *e, bool polled)
{
    unsigned reaped;

    if (uring_work_queued(e)) {
        /* Post them into the CQ. */
        int r = io_uring_get_events(&e->ring);

        engine_stat_add(&e->k.stats.reap_calls, 1);
        SPINDLE_TRACE2(uring_get_events, e, r);
        if (r < 0 && uring_work_queued(e)) {
            /* Not posted (a signal, say).  The kernel signals the eventfd
             * only when its queue was empty: set it ourselves, so that a
             * loop that does not poll comes back for them. */
            event_notifier_set(&e->k.notifier);
        }
    }
    block_acct_batch_begin();          /* one clock read for the lot */
    reaped = uring_reap(e, polled);
    block_acct_batch_end();
    if (reaped == 0) {
        return;
    }
    if (e->k.blocked) {
        e->k.blocked = false;
        aio_timer_del(&e->k.retry_timer);
    }
    /* Room in the CQ again: submit what waited, at the end of the turn
     * together with whatever the callbacks just submitted. */
    if ((e->k.queue.len || io_uring_sq_ready(&e->ring)) && !e->k.plugged) {
        aio_bh_schedule(e->k.submit_bh);
    }
}

/* The eventfd woke the loop (kernel_engine_read_cb()). */
static void uring_process_completions_k(KernelEngine *k, bool polled)
{
    uring_process_completions(uring_of(k), polled);
}

/* io_poll: memory reads of the CQ tail and the SQ flags, no system call. */
static bool uring_poll_cb(EventNotifier *n)
{
    UringEngine *e = container_of(n, UringEngine, k.notifier);

    return io_uring_cq_ready(&e->ring) > 0 || uring_work_queued(e);
}

/* io_poll_ready: uring_poll_cb() saw CQEs while the window was open. */
static void uring_poll_ready_cb(EventNotifier *n)
{
    UringEngine *e = container_of(n, UringEngine, k.notifier);

    g_assert(aio_context_in_home_thread(e->k.ctx));
    uring_process_completions(e, true);
}

/* ------------------------------------------------------------------------ */
/* BlockEngineOps                                                            */

static void uring_submit(BlockEngine *be, int fd, BlockRequest *req)
{
    UringEngine *e = uring_engine(be);
    UringReqState *s = uring_req(req);

    g_assert(aio_context_in_home_thread(e->k.ctx));
    if (req->op != BLOCK_OP_READ && req->op != BLOCK_OP_WRITE &&
        req->op != BLOCK_OP_FLUSH) {
        uring_complete_later(e, req, -ENOTSUP);
        return;
    }
    if (req->op != BLOCK_OP_FLUSH && req->bytes == 0) {
        uring_complete_later(e, req, 0);   /* nothing to transfer */
        return;
    }
    s->done = 0;
    s->fd = fd;
    block_req_int(req)->retries = 0;
    SPINDLE_TRACE2(uring_queue, req, fd);
    kernel_engine_enqueue(&e->k, req);
}


/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */

static const char *uring_init_hint(int err)
{
    switch (err) {
    case EPERM:
        return " (disabled by the sysctl kernel.io_uring_disabled or by a "
               "seccomp policy)";
    case ENOSYS:
        return " (this kernel was built without io_uring)";
    case ENOMEM:
        return " (not enough lockable memory: raise RLIMIT_MEMLOCK)";
    default:
        return "";
    }
}

/* Rings made with no setup flags, for tests (block_engine_io_uring_plain()). */
static _Atomic bool uring_force_plain;

void block_engine_io_uring_plain(bool plain)
{
    atomic_store_explicit(&uring_force_plain, plain, memory_order_relaxed);
}

bool block_engine_io_uring_deferred(AioContext *ctx)
{
    UringEngine *e = aio_context_get_data(ctx, &block_engine_io_uring);

    return e && e->deferred;
}

/* Setup flags of a deferred ring; kernels before 6.1 refuse them. */
#define URING_DEFERRED_FLAGS (IORING_SETUP_SINGLE_ISSUER | \
                              IORING_SETUP_DEFER_TASKRUN | \
                              IORING_SETUP_TASKRUN_FLAG)

static bool uring_setup_ring(UringEngine *e, Error **errp)
{
    bool plain = atomic_load_explicit(&uring_force_plain, memory_order_relaxed);
    int r = plain ? -EINVAL :
            io_uring_queue_init(URING_ENTRIES, &e->ring, URING_DEFERRED_FLAGS);

    e->deferred = r == 0;
    if (r == -EINVAL) {             /* asked for, or a kernel before 6.1 */
        r = io_uring_queue_init(URING_ENTRIES, &e->ring, 0);
    }
    if (r < 0) {
        error_setg(errp, "io_uring is unavailable: io_uring_queue_init "
                   "failed: %s%s; use aio=native or aio=threads",
                   g_strerror(-r), uring_init_hint(-r));
        return false;
    }
    r = io_uring_register_eventfd(&e->ring,
                                  event_notifier_get_fd(&e->k.notifier));
    if (r < 0) {
        io_uring_queue_exit(&e->ring);
        error_setg_errno(errp, -r, "io_uring is unavailable: cannot "
                         "register the completion eventfd");
        return false;
    }
    e->max_in_flight = e->ring.cq.ring_entries;
    return true;
}

static bool uring_setup(KernelEngine *k, Error **errp)
{
    return uring_setup_ring(uring_of(k), errp);
}

static void uring_teardown(KernelEngine *k)
{
    io_uring_queue_exit(&uring_of(k)->ring);
}

static const KernelEngineOps uring_kernel_ops = {
    .handler_name = "io_uring",
    .label = "io_uring",
    .setup = uring_setup,
    .teardown = uring_teardown,
    .submit_queue = uring_submit_queue_k,
    .process_completions = uring_process_completions_k,
    .poll = uring_poll_cb,
    .poll_ready = uring_poll_ready_cb,
};

static BlockEngine *uring_create(AioContext *ctx, Error **errp)
{
    return kernel_engine_create(&uring_kernel_ops, sizeof(UringEngine), ctx,
                                errp);
}

const BlockEngineOps block_engine_io_uring = {
    .name = "io_uring",
    .create = uring_create,
    .destroy = kernel_engine_destroy,
    .submit = uring_submit,
    .plug = kernel_engine_plug,
    .unplug = kernel_engine_unplug,
    .get_stats = kernel_engine_get_stats,
};

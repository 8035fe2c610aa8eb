/*
 * The "native" I/O engine: Linux AIO (io_submit), with completions reaped
 * from the kernel's ring in user space.
 *
 * Theory of operation.
 *
 * One LaioEngine per AioContext (kept in the context's data under
 * &block_engine_native and destroyed with it): an AIO context made by
 * io_setup(), an eventfd that the kernel signals on every completion
 * (io_set_eventfd() on each iocb), a queue of prepared iocbs, a bottom half
 * that submits the queue and a retry timer.
 *
 * Submission.  submit() prepares the iocb in the request's private area
 * (block_req_int(req)->engine.iocb, iocb->data = req) and queues it.  The
 * queue goes to the kernel in one io_submit():
 *   - at the end of the loop turn, from the submit BH scheduled by the first
 *     queued request (what is left of the turn's requests);
 *   - at once when it holds aio-max-batch requests (0: 2), plugged or not;
 *   - at the last unplug (plug/unplug nest; the BH does nothing while
 *     plugged).
 * io_submit() takes at most max-batch iocbs from the head of the queue.
 * When it accepts fewer than offered, we call it again for the rest; when
 * it refuses (-EAGAIN: the ring is full) the rest stays queued and the
 * engine is "blocked" until a completion frees a slot (or, if none of our
 * iocbs is in the kernel, until the retry timer fires): never dropped,
 * never retried in a loop.  An error it reports for the first iocb (-EBADF,
 * -EINVAL, ...) belongs to that request, which completes with it from a BH
 * (block_request_complete_later()); the rest are submitted.
 *
 * Completions.  io_setup() returns the address of the completion ring the
 * kernel shares with us: a header {id, nr, head, tail, magic (0xa10a10a1),
 * compat_features, incompat_features, header_length} followed by nr
 * io_events.  The kernel writes events at tail and advances it; we consume
 * from head and advance it, which also gives the slots back to io_submit.
 * So the poll callback is two loads (head, tail) and no system call, and
 * the reap path copies events out of the ring one at a time (a completion
 * callback may run a nested aio_poll() that reaps too: taking one event at
 * a time keeps every event consumed exactly once).  If the header is not
 * what we know (wrong magic, incompatible features), we reap with
 * io_getevents() instead and the poll callback reports nothing, so those
 * completions are seen through the eventfd only.
 *
 * Completions reaped by io_poll_ready (found while the poll window was
 * open) count in completions_polled; those reaped by io_read (the eventfd
 * woke the loop) do not.  The polled path leaves the eventfd set: clearing
 * it would cost a system call, and the next blocking turn just finds it
 * readable, clears it, and finds the ring empty.
 *
 * Per request: res < 0 completes with that -errno; a short transfer is
 * resubmitted for the rest (the iocb's offset says how far we got; the
 * rest is a tail of the caller's iovec or the rest of one element, so no
 * allocation, see engine_chunk_at()); a read that returns 0 hit the end of
 * the file and zero-fills the rest.  A FUA write carries RWF_DSYNC.  FLUSH is IOCB_CMD_FDSYNC; if the
 * kernel or file system rejects it with -EINVAL, the instance remembers
 * that and sends every FLUSH to the thread pool's fdatasync (the threads
 * engine of the same context) from then on.
 *
 * Threads: everything runs in the context's home thread; the counters are
 * single-writer atomics that any thread may read.
 */
#include "config-host.h"
#include <errno.h>
#include <libaio.h>
#include <stddef.h>
#include "aio-engine-int.h"
#include "util/clock.h"
#include "util/event-notifier.h"
#include "util/trace.h"

/* Requests the kernel may hold per context; halved (down to the minimum)
 * while io_setup() says fs.aio-max-nr is used up. */
#define LAIO_DEPTH 1024
#define LAIO_MIN_DEPTH 64

#define LAIO_RING_MAGIC 0xa10a10a1

/* io_getevents() batch when the ring header is unknown. */
#define LAIO_FALLBACK_EVENTS 64

/*
 * The kernel's completion ring, mapped at the address io_setup() returns
 * as the io_context_t.  head and tail are indices into io_events[] (0..nr-1).
 */
typedef struct LaioRing {
    unsigned id;
    unsigned nr;
    _Atomic unsigned head;       /* next event to consume: we write it */
    _Atomic unsigned tail;       /* next free slot: the kernel writes it */
    unsigned magic;
    unsigned compat_features;
    unsigned incompat_features;
    unsigned header_length;      /* sizeof(LaioRing) */
    struct io_event io_events[];
} LaioRing;

G_STATIC_ASSERT(sizeof(_Atomic unsigned) == sizeof(unsigned));
G_STATIC_ASSERT(offsetof(LaioRing, io_events) == 32);
G_STATIC_ASSERT(sizeof(struct io_event) == 32);

/* k.queue: prepared, not yet accepted by the kernel; k.in_flight:
 * accepted by io_submit(), not reaped; k.blocked: the kernel refused, wait
 * for a completion. */
typedef struct LaioEngine {
    KernelEngine k;              /* first: a BlockEngine * is a LaioEngine * */
    io_context_t io_ctx;
    LaioRing *ring;              /* NULL: reap with io_getevents() */
    unsigned depth;              /* what io_setup() was asked for */
    struct iocb **iocbs;         /* io_submit() argument */
    unsigned max_submit;         /* entries in iocbs */
    bool no_fdsync;              /* IOCB_CMD_FDSYNC rejected: use threads */
} LaioEngine;

static LaioEngine *laio_engine(BlockEngine *be)
{
    return (LaioEngine *)be;
}

static LaioEngine *laio_of(KernelEngine *k)
{
    return container_of(k, LaioEngine, k);
}

/* ------------------------------------------------------------------------ */
/* Preparing iocbs                                                           */

static struct iocb *laio_iocb(BlockRequest *req)
{
    return &block_req_int(req)->engine.iocb;
}

/* Bytes of a READ/WRITE already transferred: how far its iocb has moved. */
static int64_t laio_done(BlockRequest *req)
{
    return laio_iocb(req)->u.c.offset - req->offset;
}

/* Prepare the transfer of req after its first `done` bytes. */
static void laio_prep_rw(int fd, BlockRequest *req, int64_t done)
{
    struct iocb *iocb = laio_iocb(req);
    bool is_write = req->op == BLOCK_OP_WRITE;
    long long offset = req->offset + done;
    EngineChunk chunk;

    engine_chunk_at(req, done, &chunk);
    if (chunk.niov && is_write) {
        io_prep_pwritev(iocb, fd, chunk.iov, chunk.niov, offset);
    } else if (chunk.niov) {
        io_prep_preadv(iocb, fd, chunk.iov, chunk.niov, offset);
    } else if (is_write) {
        io_prep_pwrite(iocb, fd, chunk.buf, chunk.len, offset);
    } else {
        io_prep_pread(iocb, fd, chunk.buf, chunk.len, offset);
    }
    if (engine_write_fua(req)) {
        iocb->aio_rw_flags = RWF_DSYNC;
    }
}

static void laio_prep(LaioEngine *e, int fd, BlockRequest *req, int64_t done)
{
    struct iocb *iocb = laio_iocb(req);

    if (req->op == BLOCK_OP_FLUSH) {
        io_prep_fdsync(iocb, fd);
    } else {
        laio_prep_rw(fd, req, done);
    }
    iocb->data = req;
    io_set_eventfd(iocb, event_notifier_get_fd(&e->k.notifier));
}

/* ------------------------------------------------------------------------ */
/* Finishing requests                                                        */

static void laio_finish(LaioEngine *e, BlockRequest *req, int ret, bool polled)
{
    engine_stat_add(&e->k.stats.completions, 1);
    if (polled) {
        engine_stat_add(&e->k.stats.completions_polled, 1);
    }
    SPINDLE_TRACE2(laio_complete, req, ret);
    block_request_complete(req, ret);
}

/* A request that ends before reaching the kernel: complete it from a BH,
 * since we may be inside submit(). */
static void laio_complete_later(LaioEngine *e, BlockRequest *req, int ret)
{
    engine_stat_add(&e->k.stats.completions, 1);
    SPINDLE_TRACE2(laio_complete, req, ret);
    block_request_complete_later(req, ret);
}

/* FDSYNC is not supported here: from now on flush with fdatasync in the
 * thread pool, which completes req later from its BH. */
static void laio_flush_with_threads(LaioEngine *e, int fd, BlockRequest *req)
{
    BlockEngine *threads = block_engine_get(&block_engine_threads, e->k.ctx,
                                             NULL);

    e->no_fdsync = true;
    block_engine_threads.submit(threads, fd, req);
}

/* ------------------------------------------------------------------------ */
/* Submission                                                                */

/* The first r queued iocbs are in the kernel. */
static void laio_accepted(LaioEngine *e, int r)
{
    for (int i = 0; i < r; i++) {
        block_req_fifo_pop(&e->k.queue);
    }
    e->k.in_flight += r;
    engine_stat_add(&e->k.stats.requests, r);
}

/* io_submit() failed the first queued iocb with r. */
static void laio_failed_head(LaioEngine *e, int r)
{
    BlockRequest *req = block_req_fifo_pop(&e->k.queue);

    if (req->op == BLOCK_OP_FLUSH && r == -EINVAL) {
        laio_flush_with_threads(e, laio_iocb(req)->aio_fildes, req);
    } else {
        laio_complete_later(e, req, r);
    }
}

/* One io_submit() of the requests at the head of the queue. */
static void laio_submit_some(LaioEngine *e)
{
    unsigned n = MIN(e->k.queue.len, MIN(engine_max_batch(e->k.ctx),
                                       e->max_submit));
    BlockRequest *req = e->k.queue.head;
    int r;

    for (unsigned i = 0; i < n; i++) {
        e->iocbs[i] = laio_iocb(req);
        req = block_req_int(req)->next;
    }
    r = io_submit(e->io_ctx, n, e->iocbs);
    engine_stat_add(&e->k.stats.submissions, 1);
    SPINDLE_TRACE3(laio_submit, e, n, r);
    if (r > 0) {
        laio_accepted(e, r);
    } else if (r == 0 || r == -EAGAIN || r == -ENOMEM) {
        /* No room: keep the queue until a completion makes some. */
        kernel_engine_refused(&e->k, n, e->k.in_flight);
    } else {
        laio_failed_head(e, r);
    }
}

/* Submit the whole queue unless the kernel has no room. */
static void laio_submit_queue(LaioEngine *e)
{
    while (e->k.queue.len > 0 && !e->k.blocked) {
        laio_submit_some(e);
    }
}

static void laio_submit_queue_k(KernelEngine *k)
{
    laio_submit_queue(laio_of(k));
}

/* ------------------------------------------------------------------------ */
/* Completion                                                                */

/* A READ/WRITE transferred res >= 0 more bytes. */
static void laio_rw_progress(LaioEngine *e, BlockRequest *req, long res,
                             bool polled)
{
    int64_t done = laio_done(req) + res;

    if (done >= req->bytes) {
        laio_finish(e, req, 0, polled);
    } else if (res == 0 && req->op == BLOCK_OP_READ) {
        iov_zero_from(req->iov, req->niov, done);             /* end of file */
        laio_finish(e, req, 0, polled);
    } else if (res == 0) {
        laio_finish(e, req, -EIO, polled);       /* a write that stalled */
    } else {
        engine_stat_add(&e->k.stats.resubmits, 1); /* short: do the rest */
        laio_prep(e, laio_iocb(req)->aio_fildes, req, done);
        kernel_engine_enqueue(&e->k, req);
    }
}

static void laio_complete_event(LaioEngine *e, const struct io_event *ev,
                                bool polled)
{
    BlockRequest *req = ev->data;
    long res = (long)ev->res;

    e->k.in_flight--;
    if (req->op == BLOCK_OP_FLUSH && res == -EINVAL) {
        laio_flush_with_threads(e, laio_iocb(req)->aio_fildes, req);
    } else if (req->op == BLOCK_OP_FLUSH || res < 0) {
        laio_finish(e, req, res < 0 ? (int)res : 0, polled);
    } else {
        laio_rw_progress(e, req, res, polled);
    }
}

/* True if the kernel has published events we have not consumed. */
static bool laio_ring_pending(LaioRing *ring)
{
    /* Only we write head. */
    unsigned head = atomic_load_explicit(&ring->head, memory_order_relaxed);
    /* Acquire: pairs with the kernel's write barrier between filling an
     * io_event and publishing the new tail (aio_complete()). */
    unsigned tail = atomic_load_explicit(&ring->tail, memory_order_acquire);

    return head % ring->nr != tail % ring->nr;
}

/* Copy the oldest unconsumed event out of the ring and give its slot back.
 * False if there is none. */
static bool laio_ring_take(LaioRing *ring, struct io_event *ev)
{
    unsigned nr = ring->nr;
    /* Only we write head. */
    unsigned head = atomic_load_explicit(&ring->head,
                                         memory_order_relaxed) % nr;
    /* Acquire: pairs with the kernel's write barrier between filling an
     * io_event and publishing the new tail (aio_complete()), so the event
     * read below is complete. */
    unsigned tail = atomic_load_explicit(&ring->tail,
                                         memory_order_acquire) % nr;

    if (head == tail) {
        return false;
    }
    *ev = ring->io_events[head];
    /* Release: our copy of the slot above is done before the kernel sees
     * the slot free (it reads head when it refills the submission slots,
     * then may write a new event there). */
    atomic_store_explicit(&ring->head, (head + 1) % nr, memory_order_release);
    return true;
}

/* Reap with io_getevents() (ring header unknown).  Returns events reaped. */
static unsigned laio_reap_syscall(LaioEngine *e, bool polled)
{
    struct io_event evs[LAIO_FALLBACK_EVENTS];
    struct timespec zero = { 0, 0 };
    unsigned total = 0;
    int n;

    do {
        n = io_getevents(e->io_ctx, 0, LAIO_FALLBACK_EVENTS, evs, &zero);
        for (int i = 0; i < n; i++) {
            laio_complete_event(e, &evs[i], polled);
        }
        total += MAX(n, 0);
    } while (n == LAIO_FALLBACK_EVENTS || n == -EINTR);
    return total;
}

static unsigned laio_reap_ring(LaioEngine *e, bool polled)
{
    struct io_event ev;
    unsigned total = 0;

    while (laio_ring_take(e->ring, &ev)) {
        laio_complete_event(e, &ev, polled);
        total++;
    }
    return total;
}

static void laio_process_completions(LaioEngine *e, bool polled)
{
    unsigned reaped;

    block_acct_batch_begin();          /* one clock read for the lot */
    reaped = e->ring ? laio_reap_ring(e, polled) : laio_reap_syscall(e, polled);
    block_acct_batch_end();
    if (reaped && e->k.blocked) {
        /* Slots are free again: submit what was refused, at the end of the
         * turn together with whatever the callbacks just submitted. */
        e->k.blocked = false;
        aio_timer_del(&e->k.retry_timer);
        if (e->k.queue.len && !e->k.plugged) {
            aio_bh_schedule(e->k.submit_bh);
        }
    }
}

/* The eventfd woke the loop (kernel_engine_read_cb()). */
static void laio_process_completions_k(KernelEngine *k, bool polled)
{
    laio_process_completions(laio_of(k), polled);
}

/* io_poll: two loads, no system call. */
static bool laio_poll_cb(EventNotifier *n)
{
    LaioEngine *e = container_of(n, LaioEngine, k.notifier);

    return e->ring && laio_ring_pending(e->ring);
}

/* io_poll_ready: laio_poll_cb() saw events while the window was open. */
static void laio_poll_ready_cb(EventNotifier *n)
{
    LaioEngine *e = container_of(n, LaioEngine, k.notifier);

    g_assert(aio_context_in_home_thread(e->k.ctx));
    laio_process_completions(e, true);
}

/* ------------------------------------------------------------------------ */
/* BlockEngineOps                                                            */

static void laio_submit(BlockEngine *be, int fd, BlockRequest *req)
{
    LaioEngine *e = laio_engine(be);

    g_assert(aio_context_in_home_thread(e->k.ctx));
    if (req->op == BLOCK_OP_FLUSH && e->no_fdsync) {
        laio_flush_with_threads(e, fd, req);
        return;
    }
    if (req->op != BLOCK_OP_READ && req->op != BLOCK_OP_WRITE &&
        req->op != BLOCK_OP_FLUSH) {
        laio_complete_later(e, req, -ENOTSUP);
        return;
    }
    if (req->op != BLOCK_OP_FLUSH && req->bytes == 0) {
        laio_complete_later(e, req, 0);    /* nothing to transfer */
        return;
    }
    laio_prep(e, fd, req, 0);
    SPINDLE_TRACE2(laio_queue, req, fd);
    kernel_engine_enqueue(&e->k, req);
}


/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */

/* The ring at the address io_setup() returned, if we know its layout. */
static LaioRing *laio_ring_of(io_context_t io_ctx)
{
    LaioRing *ring = (LaioRing *)io_ctx;

    if (ring->magic != LAIO_RING_MAGIC || ring->incompat_features != 0 ||
        ring->header_length != sizeof(LaioRing) || ring->nr == 0) {
        return NULL;
    }
    return ring;
}

static bool laio_setup_context(LaioEngine *e, Error **errp)
{
    unsigned depth = LAIO_DEPTH;
    int r;

    for (;;) {
        e->io_ctx = 0;
        r = io_setup(depth, &e->io_ctx);
        if (r == 0) {
            e->depth = depth;
            return true;
        }
        if (r != -EAGAIN || depth <= LAIO_MIN_DEPTH) {
            break;
        }
        depth /= 2;         /* fs.aio-max-nr nearly used up: ask for less */
    }
    if (r == -EAGAIN) {
        error_setg(errp, "Linux AIO: no AIO context slots left for %u "
                   "requests (raise the sysctl fs.aio-max-nr, or use "
                   "aio=io_uring or aio=threads)", depth);
    } else if (r == -ENOSYS) {
        error_setg(errp, "Linux AIO is not available in this kernel (use "
                   "aio=io_uring or aio=threads)");
    } else {
        error_setg_errno(errp, -r, "Linux AIO: io_setup failed");
    }
    return false;
}

/* The AIO context, its ring and the io_submit() argument. */
static bool laio_setup(KernelEngine *k, Error **errp)
{
    LaioEngine *e = laio_of(k);

    if (!laio_setup_context(e, errp)) {
        return false;
    }
    e->ring = laio_ring_of(e->io_ctx);
    e->max_submit = e->ring ? e->ring->nr : e->depth;
    e->iocbs = g_new(struct iocb *, e->max_submit);
    return true;
}

static void laio_teardown(KernelEngine *k)
{
    LaioEngine *e = laio_of(k);

    io_destroy(e->io_ctx);
    g_free(e->iocbs);
}

static const KernelEngineOps laio_kernel_ops = {
    .handler_name = "linux-aio",
    .label = "Linux AIO",
    .setup = laio_setup,
    .teardown = laio_teardown,
    .submit_queue = laio_submit_queue_k,
    .process_completions = laio_process_completions_k,
    .poll = laio_poll_cb,
    .poll_ready = laio_poll_ready_cb,
};

static BlockEngine *laio_create(AioContext *ctx, Error **errp)
{
    return kernel_engine_create(&laio_kernel_ops, sizeof(LaioEngine), ctx,
                                errp);
}

const BlockEngineOps block_engine_native = {
    .name = "native",
    .create = laio_create,
    .destroy = kernel_engine_destroy,
    .submit = laio_submit,
    .plug = kernel_engine_plug,
    .unplug = kernel_engine_unplug,
    .get_stats = kernel_engine_get_stats,
};

/*
 * The "threads" I/O engine: blocking preadv/pwritev/fdatasync in the
 * thread pool.
 *
 * Theory of operation.  submit() hands each request to the process-wide
 * thread pool (util/thread-pool.h) as one ThreadsWork item: the request,
 * the fd and the engine.  A worker thread transfers the whole request,
 * looping over short transfers and EINTR (a read that reaches the end of
 * the file zero-fills the rest of the buffers and succeeds; a FUA write
 * uses RWF_DSYNC), and returns 0 or -errno.  The thread pool then runs threads_work_done() in the
 * submitting context's home thread, from a bottom half, which completes the
 * request with block_request_complete().  So a completion is never
 * delivered from inside submit(), and the engine's state (its counters) is
 * only ever touched by the home thread.
 *
 * There is nothing to batch: every request is its own "submission", and
 * plug/unplug do nothing.  The instance exists to hold the counters.
 *
 * The worker reads the request's public fields; the thread pool's handoff
 * (a queue push before the worker runs, a release/acquire pair on the way
 * back) orders those accesses with the home thread's.
 *
 * The engine, fd and flags of a request live in its private area
 * (engine.threads), so the only allocation is the thread pool's own.
 */
#include <errno.h>
#include <unistd.h>
#include "aio-engine-int.h"
#include "util/thread-pool.h"
#include "util/trace.h"

typedef struct ThreadsEngine {
    AioContext *ctx;
    EngineCounters stats;
} ThreadsEngine;

/* A request's engine state (block_req_int(req)->engine.threads). */
typedef __typeof__(((BlockRequestInt *)0)->engine.threads) ThreadsWork;

static ThreadsWork *threads_work(BlockRequest *req)
{
    return &block_req_int(req)->engine.threads;
}

/* ------------------------------------------------------------------------ */
/* Worker side                                                               */

/* One preadv2/pwritev2 of the part of w's request after `done`: bytes or
 * -errno. */
static ssize_t threads_rw_once(BlockRequest *req, int64_t done)
{
    ThreadsWork *w = threads_work(req);
    bool is_write = req->op == BLOCK_OP_WRITE;
    EngineChunk chunk;
    struct iovec one;
    const struct iovec *iov;
    int niov;
    ssize_t n;

    engine_chunk_at(req, done, &chunk);
    if (chunk.niov) {
        iov = chunk.iov;
        niov = chunk.niov;
    } else {
        one = (struct iovec) { .iov_base = chunk.buf, .iov_len = chunk.len };
        iov = &one;
        niov = 1;
    }
    if (is_write) {
        n = pwritev2(w->fd, iov, niov, req->offset + done, w->rw_flags);
    } else {
        n = preadv2(w->fd, iov, niov, req->offset + done, 0);
    }
    return n < 0 ? -errno : n;
}

/* Transfer all of w's request, looping over short transfers.  0 or
 * -errno. */
static int threads_rw(BlockRequest *req)
{
    int64_t done = 0;

    while (done < req->bytes) {
        ssize_t n = threads_rw_once(req, done);

        if (n == -EINTR) {
            continue;
        }
        if (n < 0) {
            return n;
        }
        if (n == 0) {
            if (req->op == BLOCK_OP_WRITE) {
                return -EIO;          /* no progress and no reason given */
            }
            iov_zero_from(req->iov, req->niov, done);     /* end of file */
            return 0;
        }
        done += n;
    }
    return 0;
}

static int threads_flush(int fd)
{
    while (fdatasync(fd) < 0) {
        if (errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

/* ThreadPoolFunc: runs in a worker. */
static int threads_work_run(void *arg)
{
    BlockRequest *req = arg;

    switch (req->op) {
    case BLOCK_OP_READ:
    case BLOCK_OP_WRITE:
        return threads_rw(req);
    case BLOCK_OP_FLUSH:
        return threads_flush(threads_work(req)->fd);
    default:
        return -ENOTSUP;
    }
}

/* ------------------------------------------------------------------------ */
/* Home thread side                                                          */

/* ThreadPoolDoneFunc: runs in the home thread, from the pool's BH. */
static void threads_work_done(void *opaque, int ret)
{
    BlockRequest *req = opaque;
    ThreadsEngine *e = threads_work(req)->engine;

    g_assert(aio_context_in_home_thread(e->ctx));
    engine_stat_add(&e->stats.completions, 1);
    SPINDLE_TRACE2(threads_complete, req, ret);
    block_acct_batch_begin();          /* a batch of one: see block-int.h */
    block_request_complete(req, ret);
    block_acct_batch_end();
}

static void threads_submit(BlockEngine *be, int fd, BlockRequest *req)
{
    ThreadsEngine *e = (ThreadsEngine *)be;
    ThreadsWork *w = threads_work(req);

    g_assert(aio_context_in_home_thread(e->ctx));
    *w = (ThreadsWork) {
        .engine = e,
        .fd = fd,
        .rw_flags = engine_write_fua(req) ? RWF_DSYNC : 0,
    };
    engine_stat_add(&e->stats.submissions, 1);
    engine_stat_add(&e->stats.requests, 1);
    SPINDLE_TRACE2(threads_submit, req, fd);
    thread_pool_submit(e->ctx, threads_work_run, req, threads_work_done, req);
}

static void threads_plug(BlockEngine *be)
{
    g_assert(aio_context_in_home_thread(((ThreadsEngine *)be)->ctx));
}

static void threads_unplug(BlockEngine *be)
{
    g_assert(aio_context_in_home_thread(((ThreadsEngine *)be)->ctx));
}

static void threads_get_stats(BlockEngine *be, BlockEngineStats *out)
{
    engine_counters_read(&((ThreadsEngine *)be)->stats, out);
}

/* Context data destructor.  The context's owner has drained its requests
 * (aio_context_unref() checks the thread pool). */
static void threads_destroy(void *opaque)
{
    g_free(opaque);
}

static BlockEngine *threads_create(AioContext *ctx, Error **errp)
{
    ThreadsEngine *e = g_new0(ThreadsEngine, 1);

    e->ctx = ctx;
    return (BlockEngine *)e;
}

const BlockEngineOps block_engine_threads = {
    .name = "threads",
    .create = threads_create,
    .destroy = threads_destroy,
    .submit = threads_submit,
    .plug = threads_plug,
    .unplug = threads_unplug,
    .get_stats = threads_get_stats,
};

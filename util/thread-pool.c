/*
 * Thread pool: blocking work on GLib worker threads, completions back in
 * the submitting AioContext.
 *
 * The workers are one process-wide GThreadPool.  Each AioContext that
 * submits work gets a ThreadPool (created on first use) holding a BH and a
 * lock-free list of finished requests.  A worker runs the function, pushes
 * the request onto its context's list (CAS on the head) and schedules the
 * BH; the BH takes the whole list with one exchange and runs the completion
 * callbacks in the order the requests finished.  The submitter's thread
 * never takes a lock: in_flight is touched only by the home thread.
 *
 * Lifetime.  A completion can be delivered (by a BH that another worker
 * scheduled) while its own worker is still inside aio_bh_schedule().  So
 * "in_flight == 0" does not mean the workers are done with the pool: each
 * worker also holds `busy` until its very last access, and thread_pool_free()
 * waits for it to drop to zero before it frees anything.
 */
#include <sched.h>
#include "aio-internal.h"
#include "util/thread-pool.h"

#define THREAD_POOL_MAX_WORKERS 64

typedef struct ThreadPoolRequest ThreadPoolRequest;

struct ThreadPool {
    AioContext *ctx;
    QEMUBH *completion_bh;
    ThreadPoolRequest *_Atomic done;   /* LIFO of finished requests */
    _Atomic unsigned busy;             /* workers that may still touch us */
    unsigned in_flight;                /* home thread only */
};

struct ThreadPoolRequest {
    ThreadPool *pool;
    ThreadPoolFunc *func;
    void *arg;
    ThreadPoolDoneFunc *done;
    void *opaque;
    int ret;
    ThreadPoolRequest *next;
};

static void thread_pool_worker(gpointer data, gpointer user_data)
{
    ThreadPoolRequest *req = data;
    ThreadPool *pool = req->pool;
    ThreadPoolRequest *head;

    req->ret = req->func(req->arg);
    head = atomic_load_explicit(&pool->done, memory_order_relaxed);
    do {
        req->next = head;
        /* Release: req->ret and req->next are visible to the acquire
         * exchange in thread_pool_completion_bh(). */
    } while (!atomic_compare_exchange_weak_explicit(&pool->done, &head, req,
                                                    memory_order_release,
                                                    memory_order_relaxed));
    aio_bh_schedule(pool->completion_bh);
    /* Release, last access to the pool: pairs with the acquire load in
     * thread_pool_free(). */
    atomic_fetch_sub_explicit(&pool->busy, 1, memory_order_release);
}

static GThreadPool *thread_pool_shared_workers(void)
{
    static gsize once;
    static GThreadPool *workers;

    if (g_once_init_enter(&once)) {
        GError *err = NULL;

        workers = g_thread_pool_new(thread_pool_worker, NULL,
                                    THREAD_POOL_MAX_WORKERS, FALSE, &err);
        if (!workers) {
            g_error("cannot create the worker thread pool: %s", err->message);
        }
        g_once_init_leave(&once, 1);
    }
    return workers;
}

static void thread_pool_completion_bh(void *opaque)
{
    ThreadPool *pool = opaque;
    /* Acquire: pairs with the release CAS in thread_pool_worker(). */
    ThreadPoolRequest *req = atomic_exchange_explicit(&pool->done, NULL,
                                                      memory_order_acquire);
    ThreadPoolRequest *fifo = NULL;

    while (req) {
        ThreadPoolRequest *next = req->next;

        req->next = fifo;
        fifo = req;
        req = next;
    }
    while (fifo) {
        ThreadPoolRequest *next = fifo->next;

        pool->in_flight--;
        fifo->done(fifo->opaque, fifo->ret);
        g_free(fifo);
        fifo = next;
    }
}

static ThreadPool *thread_pool_get(AioContext *ctx)
{
    if (!ctx->thread_pool) {
        ThreadPool *pool = g_new0(ThreadPool, 1);

        pool->ctx = ctx;
        pool->completion_bh = aio_bh_new(ctx, thread_pool_completion_bh, pool);
        ctx->thread_pool = pool;
    }
    return ctx->thread_pool;
}

void thread_pool_submit(AioContext *ctx, ThreadPoolFunc *func, void *arg,
                        ThreadPoolDoneFunc *done, void *opaque)
{
    ThreadPool *pool;
    ThreadPoolRequest *req;

    g_assert(aio_context_in_home_thread(ctx));
    pool = thread_pool_get(ctx);
    req = g_new(ThreadPoolRequest, 1);
    *req = (ThreadPoolRequest) {
        .pool = pool,
        .func = func,
        .arg = arg,
        .done = done,
        .opaque = opaque,
    };
    pool->in_flight++;
    atomic_fetch_add_explicit(&pool->busy, 1, memory_order_relaxed);
    g_thread_pool_push(thread_pool_shared_workers(), req, NULL);
}

unsigned thread_pool_in_flight(AioContext *ctx)
{
    g_assert(aio_context_in_home_thread(ctx));
    return ctx->thread_pool ? ctx->thread_pool->in_flight : 0;
}

void thread_pool_free(ThreadPool *pool)
{
    /* The owner drains its requests before destroying the context. */
    g_assert(pool->in_flight == 0);
    /* Their workers are at most a few instructions from done (unless the
     * host preempts one there: then we yield until it is scheduled). */
    while (atomic_load_explicit(&pool->busy, memory_order_acquire)) {
        sched_yield();
    }
    aio_bh_delete(pool->completion_bh);
    g_free(pool);
}

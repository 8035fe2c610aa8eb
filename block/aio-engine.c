/*
 * I/O engines: lookup, statistics, and the helpers the engines share.
 *
 * Theory of operation.  The file driver picks an engine by name
 * (block_engine_find()) and asks for the instance of its AioContext
 * (block_engine_get(), which has the engine create it on first use).  The
 * instance is kept in the context under the address of the engine's ops
 * table, which is how block_engine_get_stats() finds the instance of any
 * engine.
 *
 * The helpers below are the parts of a request's life that do not depend
 * on the engine: the batch limit, the kernel engines' queue, plugging,
 * retry timer and eventfd handler (KernelEngine), and locating the part of a READ/WRITE that is still to transfer
 * after a short transfer, so that every engine resubmits the remainder the
 * same way and without allocating.  (Requests waiting to be submitted
 * wait in a BlockReqFifo, block-int.h.)
 */
#include "config-host.h"
#include <limits.h>
#include <string.h>
#include "aio-engine-int.h"
#include "util/clock.h"

/* ------------------------------------------------------------------------ */
/* Lookup and statistics                                                     */

static const BlockEngineOps *const block_engines[] = {
#ifdef CONFIG_LIBAIO
    &block_engine_native,
#endif
#ifdef CONFIG_LIBURING
    &block_engine_io_uring,
#endif
    &block_engine_threads,
};

const BlockEngineOps *block_engine_find(const char *name)
{
    for (size_t i = 0; i < G_N_ELEMENTS(block_engines); i++) {
        if (!strcmp(block_engines[i]->name, name)) {
            return block_engines[i];
        }
    }
    return NULL;
}

BlockEngine *block_engine_get(const BlockEngineOps *ops, AioContext *ctx,
                              Error **errp)
{
    BlockEngine *e;

    g_assert(aio_context_in_home_thread(ctx));
    e = aio_context_get_data(ctx, ops);
    if (!e) {
        e = ops->create(ctx, errp);
        if (!e) {
            return NULL;
        }
        aio_context_set_data(ctx, ops, e, ops->destroy);
    }
    return e;
}

bool block_engine_get_stats(const BlockEngineOps *ops, AioContext *ctx,
                            BlockEngineStats *out)
{
    BlockEngine *e;

    g_assert(aio_context_in_home_thread(ctx));
    e = aio_context_get_data(ctx, ops);
    if (!e) {
        return false;
    }
    ops->get_stats(e, out);
    return true;
}

void engine_counters_read(const EngineCounters *c, BlockEngineStats *out)
{
    *out = (BlockEngineStats) {
        .submissions = atomic_load_explicit(&c->submissions,
                                            memory_order_relaxed),
        .requests = atomic_load_explicit(&c->requests, memory_order_relaxed),
        .completions = atomic_load_explicit(&c->completions,
                                            memory_order_relaxed),
        .completions_polled = atomic_load_explicit(&c->completions_polled,
                                                   memory_order_relaxed),
        .resubmits = atomic_load_explicit(&c->resubmits, memory_order_relaxed),
        .reap_calls = atomic_load_explicit(&c->reap_calls, memory_order_relaxed),
    };
}

unsigned engine_max_batch(AioContext *ctx)
{
    int64_t max = aio_context_get_aio_max_batch(ctx);

    if (max <= 0) {
        return ENGINE_DEFAULT_MAX_BATCH;
    }
    return max > UINT_MAX ? UINT_MAX : (unsigned)max;
}

/* ------------------------------------------------------------------------ */
/* The kernel engines' common part                                           */

static KernelEngine *kernel_engine(BlockEngine *be)
{
    return (KernelEngine *)be;
}

static void kernel_engine_submit_bh(void *opaque)
{
    KernelEngine *k = opaque;

    if (!k->plugged) {
        k->ops->submit_queue(k);
    }
}

static void kernel_engine_retry_timer_cb(void *opaque)
{
    KernelEngine *k = opaque;

    k->blocked = false;
    kernel_engine_submit_bh(k);
}

/* io_read: the eventfd woke the loop. */
static void kernel_engine_read_cb(EventNotifier *n)
{
    KernelEngine *k = container_of(n, KernelEngine, notifier);

    g_assert(aio_context_in_home_thread(k->ctx));
    /* Clear before reaping: a completion that lands after this sets it
     * again. */
    event_notifier_test_and_clear(n);
    k->ops->process_completions(k, false);
}

/* For the poll policy: completions can come only while requests are in
 * the kernel; and the completions so far. */
static void kernel_engine_counts_cb(EventNotifier *n, AioPollCounts *c)
{
    KernelEngine *k = container_of(n, KernelEngine, notifier);

    c->pending = k->in_flight;
    c->done = atomic_load_explicit(&k->stats.completions, memory_order_relaxed);
}

BlockEngine *kernel_engine_create(const KernelEngineOps *ops, size_t size,
                                  AioContext *ctx, Error **errp)
{
    KernelEngine *k = g_malloc0(size);
    int r;

    k->ops = ops;
    k->ctx = ctx;
    r = event_notifier_init(&k->notifier, false);
    if (r < 0) {
        error_setg_errno(errp, -r, "%s: cannot create an eventfd",
                         ops->label);
        g_free(k);
        return NULL;
    }
    if (!ops->setup(k, errp)) {
        event_notifier_cleanup(&k->notifier);
        g_free(k);
        return NULL;
    }
    k->submit_bh = aio_bh_new(ctx, kernel_engine_submit_bh, k);
    aio_timer_init(ctx, &k->retry_timer, kernel_engine_retry_timer_cb, k);
    aio_set_event_notifier(ctx, &k->notifier, kernel_engine_read_cb,
                           ops->poll, ops->poll_ready);
    /* Nothing to suppress while polling: the kernel signals the eventfd
     * anyway, and the poll callback finds the completions first. */
    aio_set_event_notifier_poll(ctx, &k->notifier, NULL, NULL);
    aio_set_event_notifier_counts(ctx, &k->notifier, kernel_engine_counts_cb);
    aio_set_fd_handler_name(ctx, event_notifier_get_fd(&k->notifier),
                            ops->handler_name);
    return (BlockEngine *)k;
}

/* Context data destructor (the context is being destroyed).  Its owners
 * have drained their requests. */
void kernel_engine_destroy(void *engine)
{
    KernelEngine *k = engine;

    g_assert(aio_context_in_home_thread(k->ctx));
    g_assert(k->queue.len == 0 && k->in_flight == 0);
    aio_set_event_notifier(k->ctx, &k->notifier, NULL, NULL, NULL);
    aio_timer_del(&k->retry_timer);
    aio_bh_delete(k->submit_bh);
    k->ops->teardown(k);
    event_notifier_cleanup(&k->notifier);
    g_free(k);
}

void kernel_engine_refused(KernelEngine *k, unsigned n, unsigned in_kernel)
{
    k->blocked = true;
    engine_stat_add(&k->stats.resubmits, n);
    if (in_kernel == 0) {
        /* No completion will come to unblock us: try again a bit later. */
        aio_timer_mod(&k->retry_timer,
                      clock_now_ns() + ENGINE_RETRY_DELAY_NS);
    }
}

void kernel_engine_plug(BlockEngine *be)
{
    KernelEngine *k = kernel_engine(be);

    g_assert(aio_context_in_home_thread(k->ctx));
    k->plugged++;
}

void kernel_engine_unplug(BlockEngine *be)
{
    KernelEngine *k = kernel_engine(be);

    g_assert(aio_context_in_home_thread(k->ctx));
    g_assert(k->plugged > 0);
    if (--k->plugged == 0) {
        k->ops->submit_queue(k);
    }
}

void kernel_engine_get_stats(BlockEngine *be, BlockEngineStats *out)
{
    engine_counters_read(&kernel_engine(be)->stats, out);
}

/* ------------------------------------------------------------------------ */
/* The rest of a READ or WRITE                                               */

void engine_chunk_at(const BlockRequest *req, int64_t done, EngineChunk *out)
{
    int i = 0;
    size_t skip = done;

    g_assert(done >= 0 && done < req->bytes);
    /* Skip whole elements (and empty ones) before byte `done`. */
    while (i < req->niov && skip >= req->iov[i].iov_len) {
        skip -= req->iov[i].iov_len;
        i++;
    }
    g_assert(i < req->niov);   /* bytes is the iovec's total length */
    if (skip == 0) {
        *out = (EngineChunk) {
            .iov = &req->iov[i],
            .niov = MIN(req->niov - i, IOV_MAX),
        };
    } else {
        *out = (EngineChunk) {
            .buf = (char *)req->iov[i].iov_base + skip,
            .len = req->iov[i].iov_len - skip,
        };
    }
}

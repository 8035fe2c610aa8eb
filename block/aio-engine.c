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
 * on the engine: the batch limit, and locating the part of a READ/WRITE that is still to transfer
 * after a short transfer, so that every engine resubmits the remainder the
 * same way and without allocating.  (Requests waiting to be submitted
 * wait in a BlockReqFifo, block-int.h.)
 */
#include "config-host.h"
#include <limits.h>
#include <string.h>
#include "aio-engine-int.h"

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

void engine_zero_from(const BlockRequest *req, int64_t from)
{
    size_t skip = from;

    for (int i = 0; i < req->niov; i++) {
        size_t len = req->iov[i].iov_len;

        if (skip >= len) {
            skip -= len;
            continue;
        }
        memset((char *)req->iov[i].iov_base + skip, 0, len - skip);
        skip = 0;
    }
}

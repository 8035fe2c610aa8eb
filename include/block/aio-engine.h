/*
 * I/O engines of the file driver: Linux AIO ("native"), io_uring and the
 * thread pool ("threads").  One engine instance per AioContext, created on
 * first use and shared by every file node in that context.
 *
 * The native and io_uring engines register their completion eventfd in the
 * context with a poll callback that reads the kernel's completion ring in
 * memory (aio_ring head/tail; io_uring CQ head/tail), so an open poll
 * window sees completions without a system call.
 *
 * All functions run in the context's home thread.
 */
#ifndef SPINDLE_BLOCK_AIO_ENGINE_H
#define SPINDLE_BLOCK_AIO_ENGINE_H

#include "block/block-int.h"

typedef struct BlockEngine BlockEngine;

/* Counters of one engine instance (home thread writes, anyone reads). */
typedef struct BlockEngineStats {
    uint64_t submissions;        /* io_submit / io_uring_enter calls */
    uint64_t requests;           /* requests submitted */
    uint64_t completions;        /* requests completed */
    uint64_t completions_polled; /* of those, reaped by the poll callback */
    uint64_t resubmits;          /* -EAGAIN, short transfers */
    uint64_t reap_calls;         /* io_uring_enter calls that only had the
                                  * kernel post completions (io_uring) */
} BlockEngineStats;

typedef struct BlockEngineOps {
    const char *name;            /* "native", "io_uring", "threads" */
    /* A new instance for ctx (block_engine_get() makes it on first use);
     * NULL + errp if the host cannot provide it (no io_uring, no AIO
     * slots). */
    BlockEngine *(*create)(AioContext *ctx, Error **errp);
    /* Free an instance: the context's data destructor, called when the
     * context is destroyed, after its owners drained their requests. */
    void (*destroy)(void *engine);
    /* Start a READ, WRITE or FLUSH of fd; complete with
     * block_request_complete(). */
    void (*submit)(BlockEngine *e, int fd, BlockRequest *req);
    void (*plug)(BlockEngine *e);
    void (*unplug)(BlockEngine *e);
    void (*get_stats)(BlockEngine *e, BlockEngineStats *out);
} BlockEngineOps;

extern const BlockEngineOps block_engine_native;
extern const BlockEngineOps block_engine_io_uring;
extern const BlockEngineOps block_engine_threads;

/* The engine called name ("native", "io_uring", "threads"), or NULL if
 * unknown or not built in. */
const BlockEngineOps *block_engine_find(const char *name);

/* ctx's instance of engine ops, created on first use; NULL + errp if
 * ops->create() fails. */
BlockEngine *block_engine_get(const BlockEngineOps *ops, AioContext *ctx,
                              Error **errp);

/* Tests: io_uring rings made from now on use no setup flags (as on
 * kernels before 6.1) if plain, else the deferred ones where the kernel
 * has them (the default; see block/io_uring.c). */
void block_engine_io_uring_plain(bool plain);

/* Whether ctx's io_uring instance exists and has a deferred ring. */
bool block_engine_io_uring_deferred(AioContext *ctx);

/* Statistics of ctx's instance of engine ops; false if there is none. */
bool block_engine_get_stats(const BlockEngineOps *ops, AioContext *ctx,
                            BlockEngineStats *out);

#endif

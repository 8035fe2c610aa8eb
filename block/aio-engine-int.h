/*
 * What the I/O engines (aio-threads.c, linux-aio.c, io_uring.c) share:
 * their counters, the batch limit, how to find the part of a request still
 * to transfer, and the part of the two kernel engines (linux-aio.c,
 * io_uring.c) that does not depend on the kernel interface (KernelEngine).
 * Private to block/: only the engines and aio-engine.c include it.
 *
 * Each engine has one instance per AioContext, kept by block_engine_get()
 * under the key aio_context_set_data(ctx, ops, ...), where ops is the
 * engine's own BlockEngineOps table, so block_engine_get_stats() can find
 * any engine's instance without knowing its type.
 *
 * All functions run in the home thread of the engine's context, except
 * engine_counters_read() (any thread) and the iovec helpers (any thread,
 * on a request that thread owns for the moment).
 */
#ifndef SPINDLE_BLOCK_AIO_ENGINE_INT_H
#define SPINDLE_BLOCK_AIO_ENGINE_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <sys/uio.h>
#include "block/aio-engine.h"
#include "util/event-notifier.h"
#include "util/iov.h"

/*
 * Batch limit when the context's aio-max-batch is 0: two requests per
 * system call.  A batch saves system calls, but everything that arrives
 * in one loop turn goes to the disk at once, and a deep closed loop then
 * moves in convoys: the turn that reaps a burst of completions collects
 * the guest's answers to them and submits them as one burst again.  On the
 * development VM's virtio disk (QD32, 4 KiB random reads, 3 runs each),
 * batches of 32 kept 29 requests at the disk for 58-62k IOPS, batches of
 * 2 kept 23 there for 70-79k, at 6.0 against 5.1 µs of CPU per request;
 * batches of 1 gave no more IOPS for 7 µs (docs/performance.md).
 */
#define ENGINE_DEFAULT_MAX_BATCH 2

/* How often one request may come back with -EAGAIN before it fails. */
#define ENGINE_MAX_EAGAIN_RETRIES 1000

/* How long to wait before retrying a submission the kernel refused while
 * none of our requests was in flight (no completion would wake us). */
#define ENGINE_RETRY_DELAY_NS 1000000

#ifndef container_of
#define container_of(ptr, type, member) \
    ((type *)((char *)(ptr) - offsetof(type, member)))
#endif

/* ------------------------------------------------------------------------ */
/* Counters                                                                  */

/*
 * The instance's statistics: written only by the home thread, each with a
 * relaxed load and store (no locked instruction), read by anyone.
 */
typedef struct EngineCounters {
    _Atomic uint64_t submissions;
    _Atomic uint64_t requests;
    _Atomic uint64_t completions;
    _Atomic uint64_t completions_polled;
    _Atomic uint64_t resubmits;
    _Atomic uint64_t reap_calls;
} EngineCounters;

/* Single-writer counter update.  Home thread. */
static inline void engine_stat_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

/* Copy the counters (each field read atomically).  Any thread. */
void engine_counters_read(const EngineCounters *c, BlockEngineStats *out);

/* The batch limit of ctx: aio-max-batch, or ENGINE_DEFAULT_MAX_BATCH. */
unsigned engine_max_batch(AioContext *ctx);

/* ------------------------------------------------------------------------ */
/* The kernel engines' common part                                           */

typedef struct KernelEngine KernelEngine;

/* What a kernel engine tells the common part; a const table per engine. */
typedef struct KernelEngineOps {
    const char *handler_name;    /* the AioContext handler: "io_uring" */
    const char *label;           /* for messages: "io_uring", "Linux AIO" */
    /* Set the kernel side up (the eventfd exists); false + errp if the
     * host cannot provide it.  Undone by teardown(). */
    bool (*setup)(KernelEngine *k, Error **errp);
    void (*teardown)(KernelEngine *k);
    /* Submit the whole queue, as far as the kernel takes it (the submit
     * BH, the retry timer, the last unplug, a full batch). */
    void (*submit_queue)(KernelEngine *k);
    /* Reap and complete what the kernel finished (the eventfd woke us). */
    void (*process_completions)(KernelEngine *k, bool polled);
    /* The handler's poll callbacks, registered as they are: the poll loop
     * calls them directly. */
    EventNotifierPollFn *poll;
    EventNotifierHandler *poll_ready;
} KernelEngineOps;

/*
 * First in LaioEngine and UringEngine (so a BlockEngine * is also a
 * KernelEngine *): the eventfd the kernel signals per completion, the
 * requests the kernel has not accepted yet, plugging, and the retry timer.
 *
 * Requests go onto queue (kernel_engine_enqueue()); the engine's
 * submit_queue() hands them to the kernel at the end of the loop turn (the
 * submit BH, scheduled by the first queued request), at once when
 * aio-max-batch are queued, or at the last unplug; the BH does nothing
 * while plugged.  When the kernel takes nothing, the engine is blocked
 * until a completion arrives or, with nothing of ours in the kernel, until
 * the retry timer fires (kernel_engine_refused()).
 */
struct KernelEngine {
    const KernelEngineOps *ops;
    AioContext *ctx;
    EventNotifier notifier;      /* signalled by the kernel per completion */
    QEMUBH *submit_bh;
    AioTimer retry_timer;
    BlockReqFifo queue;          /* not yet accepted by the kernel */
    unsigned plugged;
    unsigned in_flight;          /* given to the kernel, not yet reaped */
    bool blocked;                /* the kernel refused: wait for a completion */
    EngineCounters stats;
};

/*
 * A new instance of the engine ops describes, for ctx (BlockEngineOps
 * create), of size bytes (the engine's type, KernelEngine first): its
 * eventfd, ops->setup(), then the submit BH, the retry timer and the
 * eventfd's handler in the context (with the engine's poll callbacks and
 * the pending count for the poll policy).  NULL + errp if there is no
 * eventfd or setup() fails.
 */
BlockEngine *kernel_engine_create(const KernelEngineOps *ops, size_t size,
                                  AioContext *ctx, Error **errp);

/* BlockEngineOps destroy of both kernel engines: nothing may be queued or
 * in flight. */
void kernel_engine_destroy(void *engine);

/* Queue req (again) and make sure the queue will be submitted.  Inline:
 * every request goes through it. */
static inline void kernel_engine_enqueue(KernelEngine *k, BlockRequest *req)
{
    block_req_fifo_push(&k->queue, req);
    if (k->queue.len >= engine_max_batch(k->ctx)) {
        k->ops->submit_queue(k);        /* full batch: plugged or not */
    } else if (!k->plugged) {
        aio_bh_schedule(k->submit_bh);  /* end of this turn */
    }
}

/* The kernel took none of n requests: wait for a completion; with none of
 * ours in the kernel (in_kernel == 0) none will come, so arm the timer. */
void kernel_engine_refused(KernelEngine *k, unsigned n, unsigned in_kernel);

/* BlockEngineOps plug, unplug and get_stats of both kernel engines. */
void kernel_engine_plug(BlockEngine *be);
void kernel_engine_unplug(BlockEngine *be);
void kernel_engine_get_stats(BlockEngine *be, BlockEngineStats *out);

/* ------------------------------------------------------------------------ */
/* The rest of a READ or WRITE                                               */

/*
 * The part of req that follows its first `done` bytes, in the form one
 * system call takes: either a tail of req->iov starting at an element
 * boundary (niov > 0, at most IOV_MAX elements, pointing into req->iov) or,
 * when `done` falls inside an element, the rest of that element (niov == 0,
 * buf/len).  Either way it needs no allocation and nothing in it must
 * outlive the request.  A chunk may be shorter than bytes - done (IOV_MAX);
 * the engines treat that like any short transfer.
 */
typedef struct EngineChunk {
    const struct iovec *iov;
    int niov;
    void *buf;
    size_t len;
} EngineChunk;

/* Requires 0 <= done < req->bytes. */
void engine_chunk_at(const BlockRequest *req, int64_t done, EngineChunk *out);


/*
 * Whether req is a WRITE that must be on stable storage when it completes
 * (BLOCK_REQ_FUA): the engines then ask the kernel for RWF_DSYNC.  A node
 * with cache.no-flush=on never asks, like its flushes.
 */
static inline bool engine_write_fua(BlockRequest *req)
{
    BlockNode *bs = block_req_int(req)->node;

    return req->op == BLOCK_OP_WRITE && (req->flags & BLOCK_REQ_FUA) &&
           !(bs && bs->no_flush);
}

#endif

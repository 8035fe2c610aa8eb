/*
 * Block layer internals: the driver interface and the private part of a
 * request.  Included only by the files in block/.
 */
#ifndef SPINDLE_BLOCK_BLOCK_INT_H
#define SPINDLE_BLOCK_BLOCK_INT_H

#include "config-host.h"
#include <stdatomic.h>
#ifdef CONFIG_LIBAIO
#include <libaio.h>
#endif
#include "block/block.h"

typedef struct BlockDriver BlockDriver;

/*
 * What the block layer keeps in each request (BlockRequest.priv).  The
 * engines' per-request state is a union: a request is in at most one engine
 * at a time.
 */
typedef struct BlockRequestInt {
    BlockNode *node;             /* the node it was submitted to */
    BlockQueue *queue;           /* ... through this queue (its context) */
    BlockRequest *next;          /* an engine's or driver's queue */
    int64_t submit_ns;           /* free for the driver (null: deadline) */
    int retries;                 /* -EAGAIN resubmissions */
    int ret;                     /* block_request_complete_later() */
    uint8_t bounce_phase;        /* io.c: BlockBouncePhase */
    bool serialized;             /* io.c: counted in the node's writes_in_flight */
    bool fast_write;             /* io.c: counted in its queue's fast_writes */
    bool holds_rmw;              /* io.c: this request set rmw_active */
    /* accounting.c: the submission time (clock_now_ns(), read once per
     * plugged batch), 0 if its queue had no BlockAcct then (the request
     * is not counted). */
    int64_t acct_start_ns;

    /* Bounce buffer for unaligned requests on O_DIRECT nodes. */
    void *bounce;
    struct iovec bounce_iov;
    struct iovec *orig_iov;
    int orig_niov;
    int64_t orig_offset;
    int64_t orig_bytes;

    union {
#ifdef CONFIG_LIBAIO
        struct iocb iocb;        /* Linux AIO */
#endif
        struct {
            int64_t done;        /* io_uring: bytes transferred so far */
            int fd;              /* to resubmit after a short transfer */
        } uring;
        struct {
            void *engine;        /* threads: the engine instance */
            int fd;
            int rw_flags;        /* RWF_DSYNC for a FUA write */
        } threads;
        struct {
            void *conn;          /* nbd: the connection it went to */
            unsigned parts;      /* nbd: commands not yet answered */
            int ret;             /* nbd: the first error */
            bool lost;           /* nbd: a command died with the connection */
            bool then_flush;     /* nbd: FUA by a flush after the write */
        } nbd;
        struct {
            void *ctx;           /* rbd: the RbdCtx it was submitted in */
            int ret;             /* rbd: librbd's answer */
            bool then_flush;     /* rbd: FUA by a flush after the write */
        } rbd;
    } engine;
} BlockRequestInt;

G_STATIC_ASSERT(sizeof(BlockRequestInt) <= sizeof(BlockRequestPriv));

static inline BlockRequestInt *block_req_int(BlockRequest *req)
{
    return (BlockRequestInt *)req->priv.space;
}

/*
 * A FIFO of requests linked through block_req_int(req)->next: an engine's
 * requests waiting to be submitted, a null queue's requests waiting to
 * complete, a queue's deferred completions, a node's writes waiting for an
 * RMW.  A request is on at most one at a time.  The owner's thread (or
 * lock) only; inline, as the drivers push and pop on every request.
 */
typedef struct BlockReqFifo {
    BlockRequest *head;
    BlockRequest *tail;
    unsigned len;
} BlockReqFifo;

static inline void block_req_fifo_push(BlockReqFifo *q, BlockRequest *req)
{
    block_req_int(req)->next = NULL;
    if (q->tail) {
        block_req_int(q->tail)->next = req;
    } else {
        q->head = req;
    }
    q->tail = req;
    q->len++;
}

/* Take the first request off q; NULL if q is empty. */
static inline BlockRequest *block_req_fifo_pop(BlockReqFifo *q)
{
    BlockRequest *req = q->head;

    if (!req) {
        return NULL;
    }
    q->head = block_req_int(req)->next;
    if (!q->head) {
        q->tail = NULL;
    }
    block_req_int(req)->next = NULL;
    q->len--;
    return req;
}

struct BlockNode {
    char *node_name;
    const BlockDriver *drv;
    const char *driver_name;     /* the name drv was asked for (static) */
    void *opaque;                /* driver state, drv->instance_size bytes */
    int refcnt;
    AioContext *ctx;
    bool read_only;
    bool cache_direct;
    bool no_flush;
    bool discard_unmap;          /* discard=unmap (else ignore) */
    bool auto_name;
    /*
     * Inactive (block_node_set_active()): set and cleared in the main
     * thread while the node's users are stopped, read by every request's
     * check in the home threads.  Relaxed: whoever starts a user again
     * (aio_run_sync() into its thread) orders the change before it.
     */
    atomic_bool inactive;
    BlockLimits limits;
    BlockNode *child;            /* filters and formats: the node below */
    /*
     * The size in bytes: read at open, raised by block_node_resize() in the
     * main thread while requests may run in any thread.  Read it with
     * block_node_length(): the release store in block.c pairs with its
     * acquire load, so a request that sees the new length also sees the
     * storage grown (the driver grew it before the store).
     */
    _Atomic int64_t length;

    /*
     * The queue of the single-context API (block_node_submit() & co.) in
     * bs->ctx; made on attach, freed on detach.
     */
    BlockQueue *default_q;
    /*
     * Serialisation of read-modify-write (misaligned writes on a node with
     * alignment), io.c.  Aligned writes take no lock: each counts itself
     * in its queue's fast_writes and then checks rmw_gate, which is raised
     * while an RMW waits or runs.  Everything else is under rmw_lock: the
     * queues of this node (to sum their fast_writes), the writes counted
     * under the lock, whether an RMW is running, the write-like requests
     * waiting for their turn, and the statistics.
     */
    atomic_bool rmw_gate;
    GMutex rmw_lock;
    BlockQueue *queues;          /* linked by node_next */
    unsigned writes_in_flight;
    bool rmw_active;
    BlockReqFifo wait;           /* write-like requests waiting for their turn */
    uint64_t locked_writes;      /* write-like requests that took rmw_lock */
    uint64_t rmw_writes;         /* ... of which misaligned writes (RMW) */
};

/*
 * Per-context state of a node: one per BlockQueue and per node of its
 * chain (q->child is the queue of bs->child, in the same context).  Every
 * field is touched only in ctx's home thread, but for the two marked
 * otherwise (read or written by other threads under bs->rmw_lock, on the
 * rare slow path only).
 */
struct BlockQueue {
    BlockNode *bs;
    AioContext *ctx;
    BlockQueue *child;
    void *opaque;                /* the driver's per-queue state */
    unsigned in_flight;          /* submitted through this queue (top only) */
    unsigned plugged;
    /*
     * Aligned writes in flight that took the lock-free path (io.c).
     * Written only by the home thread; read by others under bs->rmw_lock.
     */
    atomic_uint fast_writes;
    BlockQueue *node_next;       /* bs->queues, under bs->rmw_lock */
    /* Requests finished at submission, completed from one BH (io.c). */
    QEMUBH *deferred_bh;
    BlockReqFifo deferred;
    /* accounting.c: the slot this (top) queue counts into, or NULL. */
    BlockAcctStats *acct;
    BlockAcct *acct_owner;
    /* accounting.c: the submission time of this plugged batch, 0 if not
     * read yet (reset at the outermost plug and unplug). */
    int64_t acct_plug_ns;
};

/*
 * Accounting's clock.  A clock read costs about as much as the rest of a
 * null request's trip through the block layer, so accounting reads it once
 * per batch rather than once per request:
 *   - submission: once per plugged section of a queue (a device submits
 *     what it found in its ring between plug and unplug), else per request;
 *   - completion: once per completion batch, which every place that calls
 *     block_request_complete() opens with block_acct_batch_begin() and
 *     closes with block_acct_batch_end() around what it completes in one
 *     go (a batch of one where requests come one at a time); a completion
 *     outside any batch reads the clock itself.
 * The clock is read lazily, on the first counted request of a batch, and
 * every begin (nested ones too, e.g. from a nested event loop inside a
 * completion callback) starts a new reading.  So a request's time runs
 * from its batch's first submission to its batch's first completion: the
 * time the device saw it and the time the host said it was done, without
 * the few hundred nanoseconds the layers spend on its neighbours.  A
 * plugged section should not run a nested event loop that submits to its
 * own queue: those requests would count from the section's start.  Per
 * thread.
 */
typedef struct BlockAcctBatch {
    int64_t now_ns;              /* 0: not read yet in this batch */
    unsigned depth;
} BlockAcctBatch;

extern __thread BlockAcctBatch block_acct_batch;

static inline void block_acct_batch_begin(void)
{
    block_acct_batch.depth++;
    block_acct_batch.now_ns = 0;
}

/* Begin a batch whose time is already known (now: clock_now_ns()). */
static inline void block_acct_batch_begin_at(int64_t now)
{
    block_acct_batch.depth++;
    block_acct_batch.now_ns = now;
}

static inline void block_acct_batch_end(void)
{
    if (--block_acct_batch.depth == 0) {
        block_acct_batch.now_ns = 0;
    }
}

/* The submission time for a request of q (which has a BlockAcct). */
int64_t block_queue_acct_now(BlockQueue *q);

/*
 * Count req, which completed with ret, in stats: start_ns is its
 * acct_start_ns.  The home thread of the queue stats belongs to.
 */
void block_acct_done(BlockAcctStats *stats, const BlockRequest *req,
                     int ret, int64_t start_ns);

/* Detach q from its BlockAcct, if any (q being freed).  Home thread. */
void block_queue_acct_detach(BlockQueue *q);

/*
 * bs's length (see BlockNode.length).  Any thread: the acquire pairs with
 * the release store of block_node_publish_length() (block.c).
 */
static inline int64_t block_node_length(const BlockNode *bs)
{
    return atomic_load_explicit(&((BlockNode *)bs)->length,
                                memory_order_acquire);
}

/* Set up / tear down a queue's deferred completions.  Its home thread. */
void block_queue_deferred_init(BlockQueue *q);
void block_queue_deferred_fini(BlockQueue *q);

/* The queue of bs (a node of req's chain) that req was submitted through. */
static inline BlockQueue *block_req_queue(BlockNode *bs, BlockRequest *req)
{
    BlockQueue *q = block_req_int(req)->queue;

    while (q->bs != bs) {
        q = q->child;
    }
    return q;
}

/*
 * Per-context state of a driver (the nbd driver's connections, the rbd
 * driver's completion watchers): one entry per AioContext a node is used
 * from, shared by the queues of that context (attach_queue takes a
 * reference, detach_queue drops it).  The driver embeds a BlockCtxEntry
 * as the first member of its own struct and keeps the list under a lock
 * of its own, held around these calls.
 */
typedef struct BlockCtxEntry BlockCtxEntry;
struct BlockCtxEntry {
    AioContext *ctx;
    BlockCtxEntry *next;
    unsigned refcnt;             /* the queues of ctx that use it */
};

/* ctx's entry in list, with one more reference; NULL if it has none. */
static inline BlockCtxEntry *block_ctx_entry_ref(BlockCtxEntry *list,
                                                 AioContext *ctx)
{
    for (; list; list = list->next) {
        if (list->ctx == ctx) {
            list->refcnt++;
            return list;
        }
    }
    return NULL;
}

/* Put e, new, at the head of *list as ctx's entry, with one reference. */
static inline void block_ctx_entry_add(BlockCtxEntry **list, BlockCtxEntry *e,
                                       AioContext *ctx)
{
    *e = (BlockCtxEntry) { .ctx = ctx, .next = *list, .refcnt = 1 };
    *list = e;
}

/* Drop a reference to e; the last one unlinks e and returns true. */
static inline bool block_ctx_entry_unref(BlockCtxEntry **list,
                                         BlockCtxEntry *e)
{
    if (--e->refcnt > 0) {
        return false;
    }
    for (BlockCtxEntry **p = list; *p; p = &(*p)->next) {
        if (*p == e) {
            *p = e->next;
            break;
        }
    }
    return true;
}

/*
 * A driver.
 *
 * Lifecycle of a node, as the generic layer (block/block.c) drives it:
 *   1. open()                    main thread; bs->ctx is already set, but
 *                                do not register handlers/BHs/timers here;
 *   2. attach_queue(q)           for the node's default queue (bs->ctx)
 *                                and for every BlockQueue made over it or
 *                                over a parent (block_queue_new), in
 *                                q->ctx's home thread (through
 *                                aio_run_sync): set up per-context state
 *                                (engine instance, BH, timer) in
 *                                q->opaque;
 *   ... submit(), io_plug(), io_unplug() in the home thread of the
 *       request's queue (block_req_queue()); getlength() ...
 *   on a move: detach_queue() of the default queue in the old home
 *              thread, then attach_queue() of a new one (node idle);
 *   3. detach_queue(q)           in q->ctx's home thread, q drained;
 *   4. close()                   main thread: free what open() made.
 * getlength() is also called from the main thread between 1 and 2, while
 * the node is idle, and after any node was resized (block_node_resize()),
 * when requests may be in flight: it must then be safe against them.
 * truncate() runs in the main thread, requests possibly in flight.
 */
struct BlockDriver {
    size_t instance_size;

    /*
     * Open: read driver options from opts (the generic ones are already
     * consumed), fill bs->limits; filters and formats open their child with
     * block_node_open_child().  Main thread, bs->ctx already set.
     */
    bool (*open)(BlockNode *bs, Opts *opts, Error **errp);
    void (*close)(BlockNode *bs);
    int64_t (*getlength)(BlockNode *bs);

    /*
     * Grow what is below bs to size bytes (block_node_resize()).  The
     * generic layer has checked size (positive, aligned, not smaller than
     * bs's length) and that bs is writable; after success it re-reads the
     * lengths with getlength(), so the driver only changes its storage
     * (or its own notion of size).  Requests may be in flight.  Main
     * thread.  NULL: the driver cannot be resized.
     */
    bool (*truncate)(BlockNode *bs, int64_t size, Error **errp);

    /*
     * Start req.  Complete it with block_request_complete(), later (from a
     * BH, a completion handler or a timer), never from inside submit.  The
     * generic layer has already checked bounds, read-only and alignment at
     * the node the request was submitted to; filters forward to their
     * child with block_driver_submit(), which applies none of the child's
     * generic handling (its cache.no-flush, discard= or in-flight count:
     * the top node's settings are the ones that count).  Filters may change
     * req->offset, req->iov and req->niov in place on the way down.
     */
    void (*submit)(BlockNode *bs, BlockRequest *req);

    /*
     * Per-context state: set q->opaque up (attach) and tear it down
     * (detach), in q->ctx's home thread.  Several queues, in one context
     * or in several, may be attached at once; submit() runs in the home
     * thread of the request's queue and must use only that queue's
     * state and the node's fixed state.
     */
    void (*attach_queue)(BlockQueue *q);
    void (*detach_queue)(BlockQueue *q);

    void (*io_plug)(BlockQueue *q);
    void (*io_unplug)(BlockQueue *q);

    /*
     * bs is becoming active (take what an active node holds: file's
     * lock) or inactive (flush what was written, drop the lock).  bs is
     * idle when it goes inactive.  Already reflected in bs->inactive
     * only after success.  At open, open() reads block_node_is_active()
     * instead.  Main thread.  NULL: nothing to do (null, raw, blkdebug,
     * throttle: the generic layer walks down to the child).
     */
    bool (*set_active)(BlockNode *bs, bool active, Error **errp);
};

/*
 * The driver called name (the registry in block.c names them; null-co is
 * also null-aio), or NULL.
 */
const BlockDriver *block_driver_find(const char *name);

/*
 * Open the child of parent from option key: an inline object (opened in
 * parent's context) or a string naming an existing node (which must be in
 * the same context).  Sets parent->child (holding a reference) and
 * returns it.  A writable parent needs a writable child: a read-only one
 * is an error (parent->child is still set; the generic layer drops it
 * when the open fails).  Main thread.
 */
BlockNode *block_node_open_child(BlockNode *parent, Opts *opts,
                                 const char *key, Error **errp);

/*
 * Finish req with ret (0 or -errno): undo bouncing, drop the in-flight
 * count, count it in its queue's BlockAcct (if any), call the owner's
 * callback.  Home thread; callers open an accounting batch around what
 * they complete in one go (block_acct_batch_begin()).
 */
void block_request_complete(BlockRequest *req, int ret);

/* Finish req with ret from a BH: for errors detected at submission. */
void block_request_complete_later(BlockRequest *req, int ret);

/*
 * Call bs's driver's truncate() (a filter forwarding to its child), or fail
 * if it has none.  Main thread.
 */
bool block_driver_truncate(BlockNode *bs, int64_t size, Error **errp);

/*
 * Raise bs's length to at least len (never lowers it): a format driver
 * (qcow2) is about to write its file past the end, and the file's
 * requests there must pass the bounds check and grow the file (a write
 * past the length is otherwise cut back, see file-posix.c).  The release
 * store pairs with block_node_length()'s acquire.  Any thread.
 */
void block_node_grow_length(BlockNode *bs, int64_t len);

/* Pass req to bs's driver (a filter forwarding to its child). */
void block_driver_submit(BlockNode *bs, BlockRequest *req);

/* The filename a file node was opened with (borrowed, fixed after open).
 * bs must be a node of the file driver.  Any thread. */
const char *block_file_get_filename(const BlockNode *bs);

extern const BlockDriver block_driver_file;
extern const BlockDriver block_driver_null;
extern const BlockDriver block_driver_raw;
extern const BlockDriver block_driver_blkdebug;
extern const BlockDriver block_driver_qcow2;
extern const BlockDriver block_driver_throttle;
#ifdef CONFIG_LIBNBD
extern const BlockDriver block_driver_nbd;
#endif
#ifdef CONFIG_LIBRBD
extern const BlockDriver block_driver_rbd;
#endif

#endif

/*
 * Block layer: nodes and requests.
 *
 * A block node is a named, reference-counted block device made by a driver
 * (file, null-co, raw, blkdebug, throttle, ...) from options.  A node has a
 * home AioContext (block_node_submit() and friends use it), and may also be
 * used from other contexts through BlockQueues (block_queue_new()), one per
 * context: every request is submitted and completed in the home thread of
 * the context it was submitted in.  Filters (raw, blkdebug, throttle) sit on
 * top of a child node and live in the same context(s) as their child.
 *
 * Requests.  The caller owns the BlockRequest (typically embedded in its
 * own per-request structure, so a request costs one allocation in total),
 * fills the public fields and calls block_node_submit().  The completion
 * callback runs later, in the node's home thread, never from inside
 * block_node_submit().  Between submission and completion the block layer
 * owns the request and may change its public fields.  Data buffers are
 * read and written in place (zero copy) unless the node needs aligned
 * buffers (O_DIRECT) and the caller's are not: then a bounce buffer is used.
 *
 * Errors come back as -errno in the completion: -EINVAL for a request past
 * the end or malformed, -EPERM for a write to a read-only node (or any
 * request but a read to an inactive one), -EIO, -ENOSPC, ... from the host.
 *
 * Active and inactive (QEMU's names).  A node is active unless it was
 * opened with active=off (a child opened inline under an inactive node
 * inherits it) or made inactive since (block_node_set_active()).  An
 * inactive node lets another process write the image: it holds no lock
 * (file: no OFD lock at all), has flushed what it wrote, and refuses every
 * request but READ with -EPERM: writes, write-zeroes, discards and
 * flushes, as QEMU does for an inactive node.  Reads are allowed (they
 * see the image as the writer left it on storage).  This is how two
 * daemons, or two exports of one daemon, hand one image over during a
 * live migration.
 *
 * Threads: open/close/lookup and context changes are main-thread functions;
 * submit, drain and plug run in the node's home thread.
 */
#ifndef SPINDLE_BLOCK_BLOCK_H
#define SPINDLE_BLOCK_BLOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>
#include "util/aio.h"
#include "util/error.h"
#include "util/opts.h"

typedef struct BlockNode BlockNode;
typedef struct BlockRequest BlockRequest;
typedef struct BlockQueue BlockQueue;

typedef enum BlockOp {
    BLOCK_OP_READ,
    BLOCK_OP_WRITE,
    BLOCK_OP_FLUSH,
    BLOCK_OP_DISCARD,
    BLOCK_OP_WRITE_ZEROES,
} BlockOp;

/* Request flags. */
enum {
    BLOCK_REQ_FUA        = 1 << 0,  /* write: on stable storage at completion */
    BLOCK_REQ_MAY_UNMAP  = 1 << 1,  /* write-zeroes: may deallocate */
};

typedef void BlockCompletionFunc(BlockRequest *req, int ret);

/* Internal state of a request; see block/block-int.h.  Do not touch. */
typedef struct BlockRequestPriv {
    _Alignas(16) unsigned char space[176];
} BlockRequestPriv;

struct BlockRequest {
    /* Filled by the caller. */
    BlockOp op;
    unsigned flags;
    int64_t offset;              /* bytes */
    int64_t bytes;               /* READ/WRITE: the iovec's total length */
    struct iovec *iov;           /* READ/WRITE only */
    int niov;
    BlockCompletionFunc *cb;
    void *opaque;

    BlockRequestPriv priv;
};

/* Alignment and size limits of a node (byte counts; 0: no limit). */
typedef struct BlockLimits {
    uint32_t request_alignment;  /* offset and length multiple (>= 1) */
    uint32_t mem_alignment;      /* buffer address and length multiple (>= 1) */
    uint64_t max_transfer;       /* largest READ/WRITE to advertise to guests
                                  * (advisory: larger requests still work) */
    uint32_t discard_alignment;  /* preferred discard granularity */
    uint64_t max_discard;
    uint64_t max_write_zeroes;
} BlockLimits;

/* ------------------------------------------------------------------------ */
/* Nodes (main thread)                                                       */

/*
 * Create a node from options (driver=, node-name=, read-only=,
 * cache.direct=, cache.no-flush=, discard=ignore|unmap, active=, plus the
 * driver's own) in ctx.  Child nodes given inline are created too (active=
 * defaulting to the parent's); a child given as a string is looked up by
 * node-name.  The new node is registered under its node-name (generated
 * as "#blockN" if absent) and returned with one reference.
 */
BlockNode *block_node_open(Opts *opts, AioContext *ctx, Error **errp);

/* Convenience: parse str (key=value or JSON) and open it. */
BlockNode *block_node_open_str(const char *str, AioContext *ctx, Error **errp);

/* The registered node called node_name (borrowed), or NULL. */
BlockNode *block_node_find(const char *node_name);

void block_node_ref(BlockNode *bs);
/* Drop a reference; the last one drains and closes the node. */
void block_node_unref(BlockNode *bs);

const char *block_node_get_name(const BlockNode *bs);
const char *block_node_get_driver_name(const BlockNode *bs);
bool block_node_is_read_only(const BlockNode *bs);
/* Whether discards deallocate (discard=unmap); with discard=ignore they
 * succeed and do nothing.  Any thread (fixed at open). */
bool block_node_discard_enabled(const BlockNode *bs);
/* The size in bytes: read at open, changed by block_node_resize().  Any
 * thread (an atomic load). */
int64_t block_node_get_length(BlockNode *bs);
void block_node_get_limits(const BlockNode *bs, BlockLimits *out);
AioContext *block_node_get_aio_context(const BlockNode *bs);

/*
 * Whether bs is active (see the top of this file).  Any thread (a relaxed
 * load: it changes only while the node's users are stopped).
 */
bool block_node_is_active(const BlockNode *bs);

/*
 * Make bs, and the nodes below it, active or inactive (QMP
 * blockdev-set-active; exports handing an image over).  Already so:
 * nothing to do, true.
 *   Activating goes bottom-up: each node below bs first, then bs.  The
 *   file driver takes its lock (waiting up to a second for a busy one,
 *   like an open); if another process holds it, the error names the
 *   image and says so, and every node keeps its state.
 *   Inactivating goes top-down: bs must have no active parent (an active
 *   node may not sit on an inactive one; the error names the parent).
 *   bs is drained (its own requests: the caller stops every other user
 *   first), then bs and each node below it that no other active node
 *   uses flushes what it wrote to stable storage and drops its lock
 *   (file).  A failed flush leaves that node, and those below it, active.
 * Main thread.
 */
bool block_node_set_active(BlockNode *bs, bool active, Error **errp);

/* Whether the node was opened with cache.direct=on / cache.no-flush=on. */
bool block_node_get_cache_direct(const BlockNode *bs);
bool block_node_get_cache_no_flush(const BlockNode *bs);

/* The image file at the bottom of bs's chain (the file driver's
 * filename), or NULL (null-co, ...).  Borrowed. */
const char *block_node_get_filename(const BlockNode *bs);

/* The node below a filter or format (raw, blkdebug, throttle), or NULL.
 * Borrowed. */
BlockNode *block_node_get_child(const BlockNode *bs);

/* The backing node of a qcow2 node (borrowed), and the backing file name
 * its header gives; NULL for other drivers or without one.  Main
 * thread (fixed after open). */
BlockNode *block_qcow2_get_backing(const BlockNode *bs);
const char *block_qcow2_get_backing_file(const BlockNode *bs);
/* How many allocating writes of a qcow2 node its IOThreads ran without a
 * worker thread since it was opened; 0 for other drivers.  Any thread. */
uint64_t block_qcow2_get_iothread_allocs(const BlockNode *bs);

/* A registered node whose child is bs, or NULL.  Borrowed. */
BlockNode *block_node_find_parent(const BlockNode *bs);

/* Every registered node, oldest first (a new array of borrowed nodes;
 * free it with g_ptr_array_unref). */
GPtrArray *block_node_list(void);

/*
 * Grow bs to size bytes (QMP block_resize).  size must be a positive
 * multiple of 512 and of the node's request alignment, and not smaller
 * than the current size (shrinking would drop data a guest wrote: an
 * error).  The driver grows what is below: file: ftruncate of a regular
 * file (a block device or other file cannot be resized, but a size equal
 * to its current one is accepted, to pick up a device grown outside);
 * null: the new size; raw and blkdebug: their child (raw with offset= or
 * size= cannot be resized).  Afterwards every registered node's length is
 * read again (a filter over bs grows with it), published with release
 * stores: requests submitted later may use the new space.  Requests may
 * be in flight meanwhile.  An inactive node cannot be resized.  Errors
 * leave the size as it was.  Main thread.
 */
bool block_node_resize(BlockNode *bs, int64_t size, Error **errp);

/*
 * Move the node (and its children) to new_ctx.  Main thread; the node must
 * be idle (no requests in flight and none submitted until this returns):
 * the caller stops its producers first.
 */
bool block_node_set_aio_context(BlockNode *bs, AioContext *new_ctx,
                                Error **errp);

/* ------------------------------------------------------------------------ */
/* Requests (home thread)                                                    */

/*
 * Submit req.  The completion callback runs later in this thread with 0
 * or -errno.  Never fails synchronously.
 */
void block_node_submit(BlockNode *bs, BlockRequest *req);

/* Requests submitted to bs with block_node_submit() and not yet completed
 * (not those of BlockQueues). */
unsigned block_node_in_flight(const BlockNode *bs);

/* Run the event loop (nested) until bs has no requests in flight. */
void block_node_drain(BlockNode *bs);

/*
 * Batching: between plug and unplug, requests are queued and go to the
 * kernel in one submission at unplug (or when aio-max-batch are queued).
 * Without plug, requests submitted in one loop turn are batched anyway:
 * they are submitted together at the end of the turn.  Nests.
 */
void block_node_io_plug(BlockNode *bs);
void block_node_io_unplug(BlockNode *bs);

/*
 * How many write-like requests (WRITE, DISCARD, WRITE_ZEROES) on a node
 * that needs alignment took the node's lock, and how many of those were
 * misaligned writes (read-modify-write).  Any thread.
 */
typedef struct BlockWriteStats {
    uint64_t locked_writes;
    uint64_t rmw_writes;
} BlockWriteStats;

void block_node_get_write_stats(BlockNode *bs, BlockWriteStats *out);

/* ------------------------------------------------------------------------ */
/* Accounting (query-blockstats)                                             */

#define BLOCK_OP__MAX (BLOCK_OP_WRITE_ZEROES + 1)

/* One operation's counters, as QEMU's BlockDeviceStats counts them. */
typedef struct BlockAcctOpStats {
    uint64_t ops;                /* requests that succeeded */
    uint64_t bytes;              /* ... their bytes (0 for FLUSH) */
    uint64_t failed;             /* requests that completed with an error */
    uint64_t total_time_ns;      /* submit-to-completion time, summed over
                                  * succeeded and failed requests */
} BlockAcctOpStats;

typedef struct BlockAcctStats {
    BlockAcctOpStats op[BLOCK_OP__MAX];   /* indexed by BlockOp */
} BlockAcctStats;

/*
 * A set of counters one consumer (a device's use of a node) keeps across
 * its BlockQueues: one slot per queue, each written only by the home thread
 * of the queue it is attached to, on its own cache line; read (summed) by
 * any thread.  Outlives the BlockQueues attached to it, so the counts
 * survive a front-end reconnecting.
 */
typedef struct BlockAcct BlockAcct;

/* nslots >= 1.  Main thread (or any: plain allocation). */
BlockAcct *block_acct_new(unsigned nslots);
/* No queue may still be attached.  NULL is a no-op. */
void block_acct_free(BlockAcct *acct);

/*
 * Count q's requests in acct's slot slot from now on (NULL: stop
 * counting).  A request is counted when it completes, with the time since
 * block_queue_submit().  q's home thread; q idle or not.
 */
void block_queue_set_acct(BlockQueue *q, BlockAcct *acct, unsigned slot);

/* The sum over every slot.  Any thread (relaxed loads: each counter is
 * exact, counters taken together are a near-instant snapshot). */
void block_acct_get(const BlockAcct *acct, BlockAcctStats *out);

/* out += in, counter by counter. */
void block_acct_stats_add(BlockAcctStats *out, const BlockAcctStats *in);

/* ------------------------------------------------------------------------ */
/* Queues: one node used from several contexts                               */

/*
 * A BlockQueue lets ctx's home thread submit requests to bs, whatever
 * bs's own context: the requests complete in ctx's home thread, and the
 * queue has its own in-flight count and per-context driver state (engine
 * instance, BH), so queues in different IOThreads share no lock on the
 * data path.  (On a node that needs alignment, a misaligned write is a
 * read-modify-write that must not overlap other writes: it, and the writes
 * that arrive while it waits or runs, take a per-node mutex.  Aligned
 * writes at other times do not.)
 *
 * block_queue_new() and block_queue_free() run in any thread from which
 * ctx's home thread can be reached with aio_run_sync() (the main thread,
 * or ctx's home thread itself).  The caller holds a reference to bs for
 * the queue's whole life, does not move bs to another context meanwhile,
 * and frees the queue drained.  Never fails today (errp is for the
 * future).  The rest runs in ctx's home thread.
 */
BlockQueue *block_queue_new(BlockNode *bs, AioContext *ctx, Error **errp);
void block_queue_free(BlockQueue *q);

AioContext *block_queue_get_aio_context(const BlockQueue *q);
void block_queue_submit(BlockQueue *q, BlockRequest *req);
unsigned block_queue_in_flight(const BlockQueue *q);
void block_queue_drain(BlockQueue *q);
void block_queue_io_plug(BlockQueue *q);
void block_queue_io_unplug(BlockQueue *q);

#endif

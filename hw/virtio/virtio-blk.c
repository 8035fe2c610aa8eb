/*
 * virtio-blk device over a block node (virtio 1.x, section 5.2).
 *
 * Theory of operation
 * -------------------
 * A VirtioBlk turns the requests a driver places in its virtqueues into
 * block layer requests on one node.  The VuServer owns the queues and the
 * vhost-user protocol; this file only sees the VuDevOps callbacks.
 *
 * Each popped request is one allocation, a VirtioBlkReq, which holds the
 * VirtQueueElement (the descriptor chain mapped to iovecs in guest memory),
 * the BlockRequest handed to the node and an iovec array describing the
 * data part of the request.  The request's layout is
 *
 *     out: le32 type, le32 reserved, le64 sector   (16 bytes, may be split)
 *          [OUT: data] [DISCARD/WRITE_ZEROES: 16-byte segments]
 *     in:  [IN, GET_ID: data] u8 status             (the very last in byte)
 *
 * The header is copied out of guest memory once and only the copy is used,
 * so a driver that changes it while we look cannot make us act on two
 * different values.  Everything is checked before any I/O starts: status
 * byte present (a request whose last device-writable descriptor is
 * missing or empty leaves nowhere to report anything: it breaks the
 * queue, virtqueue_fail_element()), header present, directions (no
 * device-writable data for a write, no device-readable data for a read),
 * length a multiple of 512, sector range within the capacity, writes on a
 * read-only device; those failures are answered in the status.  Reads
 * and writes go to the node with iovecs pointing into guest memory (zero
 * copy).  The completion callback stores the status byte, pushes the
 * element and frees the request.
 *
 * Discard and write-zeroes requests carry up to VIRTIO_BLK_MAX_DWZ_SEGS
 * segments; they are copied into the request (the same bytes that hold the
 * data iovecs of a read or write), validated together, and then submitted
 * one after the other with the request's single BlockRequest.
 *
 * Write caching: writes are sent with BLOCK_REQ_FUA when the spec says they
 * must be stable at completion -- the driver negotiated neither FLUSH nor
 * CONFIG_WCE, or it negotiated CONFIG_WCE and set `writeback` to 0.  The
 * export's writethrough option makes 0 the initial value of `writeback`.
 *
 * Threads: virtio_blk_new/free and the feature/config callbacks run in the
 * main thread; handle_queue, queue_started and queue_drain run in the
 * queue's home thread, which may differ from the node's: each queue submits
 * through a BlockQueue of its own context (made when the queue starts,
 * freed when it is drained), so the requests complete in the queue's
 * thread and queues in different IOThreads share no lock.  Per-queue state
 * (in-flight count, the free requests, the BlockQueue) is touched only by
 * that thread.  A request is a few KiB (room for the longest chain): the
 * queue keeps the ones it used, up to VIRTIO_BLK_FREE_MAX, instead of
 * returning them to malloc, which at QD32 cost a third of the IOThread's
 * time.
 * The `writeback` flag is written by the main thread (config writes) and
 * read by the queues: one writer, relaxed atomics.
 *
 * Capacity: the size the config space shows and the bounds every request
 * is checked against are one value, read from the node's length at
 * creation and again by virtio_blk_refresh_capacity() after the node was
 * resized (main thread; the export then tells the front-end).  The queues
 * read it with acquire loads that pair with the release store of the
 * refresh, which itself comes after block_node_resize() published the new
 * length: a request checked against the new capacity reaches a node that
 * has the space.
 *
 * Accounting: one BlockAcct for the device, one slot per queue; a queue's
 * BlockQueue counts into its slot (block_queue_set_acct()) from the moment
 * it is made, and the BlockAcct outlives the BlockQueues, so the counts
 * survive reconnects.
 *
 * Error policies (rerror for reads, werror for everything else; block/
 * error-policy.h): a failed request costs the completion path one
 * branch, taken only on error.  `report` answers IOERR as always;
 * `ignore` answers OK (a discard / write-zeroes goes on with its next
 * segment).  `stop` holds the request on its queue's held list, sorted by
 * the sequence number every request gets when it is popped, pauses the
 * virtqueue (virtqueue_set_paused(): pop finds nothing, so no new
 * request is taken, not even by the pop loop that is running; the ones
 * already submitted complete as usual, and those that fail join the list)
 * and tells the main thread, once per stop (conf->io_error: the QMP
 * BLOCK_IO_ERROR).  virtio_blk_stops() (main thread) runs each stopped
 * queue's resume in its home thread: the held requests are submitted
 * again in sequence order (a discard / write-zeroes from the segment that
 * failed), then the virtqueue is unpaused, unless one of them failed at
 * once and stopped it again.  Nothing is answered while held, so the
 * guest sees no error and no request is lost.  A queue that is drained
 * (the front-end stops the ring or goes away) while stopped tries its
 * held requests once more and reports what fails then: the front-end
 * needs every popped element back before it may go.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <glib.h>

#include "block/block.h"
#include "hw/virtio/virtio-blk.h"
#include "hw/virtio/virtio-blk-wire.h"
#include "hw/virtio/virtio-io-error.h"
#include "virtio-req-pool.h"
#include "hw/virtio/virtqueue.h"
#include "util/error.h"
#include "util/iov.h"
#include "util/trace.h"
#include "util/main-thread.h"

/* Most segments in one discard or write-zeroes request (max_*_seg). */
#define VIRTIO_BLK_MAX_DWZ_SEGS     32

/* Largest discard / write-zeroes per segment when the node sets no limit:
 * 1 GiB, in sectors (a le32 field; it must also fit the guest's own
 * 32-bit sector counts). */
#define VIRTIO_BLK_DWZ_DEFAULT_SECTORS  (UINT32_C(1) << 21)

/*
 * Largest segment (size_max), unless the node's transfer limit is smaller.
 * Guests rarely build larger segments (they are pages), and firmware does
 * arithmetic on size_max * seg_max / 512 in 16 bits: SeaBIOS 1.16 computes
 * a chunk of 0 sectors from 16 MiB * 126 and then reads 0 bytes forever.
 */
#define VIRTIO_BLK_SIZE_MAX_DEFAULT (UINT32_C(64) << 10)

#define VIRTIO_BLK_MAX_QUEUES       64

#define CACHELINE_SIZE              64

/* Free requests a queue keeps for reuse (about 6 KiB each). */
#define VIRTIO_BLK_FREE_MAX         128

/* Per-queue state, home thread only, one cache line each. */
typedef struct VirtioBlkReq VirtioBlkReq;

typedef struct VirtioBlkQueue {
    _Alignas(CACHELINE_SIZE) unsigned in_flight;
    VirtioStop stop;             /* the requests an error policy holds */
    VirtioReqPool pool;          /* requests kept for reuse */
    BlockQueue *bq;              /* the node, from this queue's context */
    uint64_t next_seq;           /* the next popped request's sequence */
    VirtQueue *vq;               /* since queue_started */
} VirtioBlkQueue;

struct VirtioBlkReq {
    VirtioReqLink link;          /* VirtioBlkQueue.pool: first member */
    VirtioBlk *vb;
    VirtQueue *vq;
    VirtioBlkQueue *q;
    VirtioHeld held;             /* .seq: pop order on its queue */
    uint8_t *status;             /* the status byte, in guest memory */
    uint32_t in_len;             /* bytes reported written at push */
    uint32_t type;
    uint16_t nseg;               /* DISCARD / WRITE_ZEROES */
    uint16_t next_seg;
    BlockRequest breq;
    union {
        struct iovec iov[VIRTQUEUE_MAX_SEGS];        /* IN, OUT data */
        /* DISCARD, WRITE_ZEROES: the segments, in host byte order */
        VirtioBlkSeg segs[VIRTIO_BLK_MAX_DWZ_SEGS];
    } u;
    VirtQueueElement elem;
};

G_STATIC_ASSERT(offsetof(VirtioBlkReq, link) == 0);
G_STATIC_ASSERT(VIRTIO_BLK_MAX_DWZ_SEGS * sizeof(VirtioBlkSeg) <=
                VIRTQUEUE_MAX_SEGS * sizeof(struct iovec));

struct VirtioBlk {
    BlockNode *bs;               /* a reference */
    unsigned num_queues;
    uint32_t blk_size;           /* logical block size */
    bool writable;
    bool writethrough;           /* initial writeback = 0 */
    uint8_t serial[VIRTIO_BLK_ID_BYTES];   /* NUL-padded */
    /* 512-byte sectors, whole logical blocks.  Written by the main thread
     * (virtio_blk_refresh_capacity), read by the queues. */
    _Atomic uint64_t capacity;
    BlockAcct *acct;             /* one slot per queue */
    BlockLimits limits;
    uint32_t max_discard_sectors;
    uint32_t max_write_zeroes_sectors;

    /* Written in the main thread while the queues are stopped. */
    uint64_t features;           /* accepted by the driver */
    /* The config space `writeback` field; one writer (main thread). */
    _Atomic bool writeback;
    /* Set once a malformed request has been logged (any queue thread). */
    atomic_flag logged_bad_request;
    /* Set once an ignored error has been logged (any queue thread). */
    atomic_flag logged_ignored;

    /* Error policies and where a stop is told (fixed at creation). */
    BlockErrorPolicy rerror;
    BlockErrorPolicy werror;
    char *export_id;
    AioContext *main_ctx;
    VirtioIoErrorFn *io_error;

    VirtioBlkQueue *queues;      /* num_queues entries */
};

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */

static bool virtio_blk_has_feature(const VirtioBlk *vb, unsigned bit)
{
    return vb->features & (UINT64_C(1) << bit);
}

/*
 * Log a malformed request once per device: a driver that sends one will
 * usually send many, and the log must not become a way to flood the host.
 */
static void virtio_blk_log_bad_request(VirtioBlk *vb, VirtQueue *vq,
                                       const char *why)
{
    if (!atomic_flag_test_and_set_explicit(&vb->logged_bad_request,
                                           memory_order_relaxed)) {
        error_report("virtio-blk node '%s' queue %u: malformed request: %s "
                     "(further ones are not logged)",
                     block_node_get_name(vb->bs), virtqueue_index(vq), why);
    }
}

/* Whether writes must be on stable storage when they complete (5.2.6.4). */
static bool virtio_blk_writes_need_fua(VirtioBlk *vb)
{
    return !atomic_load_explicit(&vb->writeback, memory_order_relaxed);
}

/* ------------------------------------------------------------------------ */
/* Request allocation                                                        */

static VirtioBlkReq *virtio_blk_req_alloc(VirtioBlkQueue *q)
{
    return virtio_req_pool_get(&q->pool, sizeof(VirtioBlkReq));
}

/* Keep req for the next request of q, or free it if q has enough. */
static void virtio_blk_req_release(VirtioBlkQueue *q, VirtioBlkReq *req)
{
    virtio_req_pool_put(&q->pool, req, VIRTIO_BLK_FREE_MAX);
}

/* ------------------------------------------------------------------------ */
/* Completion                                                                */

static void virtio_blk_req_finish(VirtioBlkReq *req, uint8_t status)
{
    VirtioBlkQueue *q = req->q;

    *req->status = status;
    virtqueue_push_status_last(req->vq, &req->elem, req->in_len);
    SPINDLE_TRACE3(virtio_blk_complete, virtqueue_index(req->vq), req->type,
                   status);
    q->in_flight--;
    virtio_blk_req_release(q, req);
}

static uint8_t virtio_blk_status_from_errno(int ret)
{
    if (ret == 0) {
        return VIRTIO_BLK_S_OK;
    }
    if (ret == -ENOTSUP || ret == -EOPNOTSUPP) {
        return VIRTIO_BLK_S_UNSUPP;
    }
    return VIRTIO_BLK_S_IOERR;
}

/* ------------------------------------------------------------------------ */
/* Error policies                                                            */

/* What req's policy says about its failure with ret (< 0). */
static BlockErrorAction virtio_blk_error_action(VirtioBlkReq *req, int ret)
{
    VirtioBlk *vb = req->vb;
    BlockErrorPolicy p = req->type == VIRTIO_BLK_T_IN ? vb->rerror
                                                       : vb->werror;
    BlockErrorAction a = block_error_action(p, ret);

    if (a == BLOCK_ERROR_ACTION_STOP && req->q->stop.draining) {
        /* The front-end is taking the ring back: it must have an answer. */
        return BLOCK_ERROR_ACTION_REPORT;
    }
    if (a == BLOCK_ERROR_ACTION_IGNORE &&
        !atomic_flag_test_and_set_explicit(&vb->logged_ignored,
                                           memory_order_relaxed)) {
        error_report("virtio-blk node '%s': ignoring an I/O error (%s) as "
                     "%s=ignore says; further ones are not logged",
                     block_node_get_name(vb->bs), g_strerror(-ret),
                     req->type == VIRTIO_BLK_T_IN ? "rerror" : "werror");
    }
    return a;
}

/*
 * Hold req, which failed with ret: keep it on its queue's held list, in
 * sequence order, until a resume.  The first one stops the
 * queue (its virtqueue pops nothing more) and tells the main thread.
 */
static void virtio_blk_req_hold(VirtioBlkReq *req, int ret)
{
    if (req->breq.op == BLOCK_OP_DISCARD ||
        req->breq.op == BLOCK_OP_WRITE_ZEROES) {
        req->next_seg--;         /* the retry starts with the failed one */
    }
    virtio_stop_hold(&req->q->stop, &req->held, req->vq, req->vb->main_ctx,
                     req->vb->io_error, &(VirtioIoError) {
                               .export_id = req->vb->export_id,
                               .node_name = block_node_get_name(req->vb->bs),
                               .queue = virtqueue_index(req->vq),
                               .lun = -1,
                               .write = req->type != VIRTIO_BLK_T_IN,
                               .error = -ret,
                     });
}

static void virtio_blk_dwz_next(VirtioBlkReq *req);

/*
 * VirtioStop.retry: submit the held requests of queue (a VirtioBlkQueue)
 * again, in sequence order, and (with restart) unpause its virtqueue
 * unless one of them stopped it again at once.  Returns how many were
 * submitted.  Home thread.
 */
static unsigned virtio_blk_queue_retry_held(void *queue, bool restart)
{
    VirtioBlkQueue *q = queue;
    VirtioHeld *h = virtio_stop_take(&q->stop);
    unsigned n = 0;

    if (!h) {
        return 0;
    }
    block_queue_io_plug(q->bq);
    for (; h; n++) {
        VirtioBlkReq *req = (VirtioBlkReq *)((char *)h -
                                             offsetof(VirtioBlkReq, held));

        h = h->next;             /* before a retry may hold req again */
        if (req->breq.op == BLOCK_OP_DISCARD ||
            req->breq.op == BLOCK_OP_WRITE_ZEROES) {
            virtio_blk_dwz_next(req);
        } else {
            block_queue_submit(q->bq, &req->breq);
        }
    }
    block_queue_io_unplug(q->bq);
    if (restart) {
        virtio_stop_restart(&q->stop, q->vq);
    }
    return n;
}

static void virtio_blk_rw_complete(BlockRequest *breq, int ret)
{
    VirtioBlkReq *req = breq->opaque;

    if (G_UNLIKELY(ret < 0)) {
        switch (virtio_blk_error_action(req, ret)) {
        case BLOCK_ERROR_ACTION_STOP:
            virtio_blk_req_hold(req, ret);
            return;
        case BLOCK_ERROR_ACTION_IGNORE:
            ret = 0;
            break;
        default:
            break;
        }
    }
    virtio_blk_req_finish(req, virtio_blk_status_from_errno(ret));
}

/* ------------------------------------------------------------------------ */
/* Validation                                                                */

/* The capacity in sectors.  Any thread. */
static uint64_t virtio_blk_capacity(VirtioBlk *vb)
{
    /* Pairs with the release store in virtio_blk_refresh_capacity(). */
    return atomic_load_explicit(&vb->capacity, memory_order_acquire);
}

/* Whether [sector, sector + nsectors) lies within the capacity. */
static bool virtio_blk_range_ok(VirtioBlk *vb, uint64_t sector,
                                uint64_t nsectors)
{
    uint64_t capacity = virtio_blk_capacity(vb);

    return sector <= capacity && nsectors <= capacity - sector;
}

/*
 * Find the status byte (the last in byte) and make req->u.iov the in
 * buffers without it.  Returns false if the chain's last device-writable
 * descriptor, the one the driver reads its status from, holds no byte:
 * there is none, or it is empty (an empty descriptor adds no iovec, so
 * without this check the status would land in the data before it, where
 * the driver does not look).
 */
static bool virtio_blk_split_in(VirtioBlkReq *req, unsigned *niov)
{
    const VirtQueueElement *elem = &req->elem;
    int last = (int)elem->in_num - 1;

    if (elem->in_last_len == 0) {
        return false;
    }
    g_assert(last >= 0 && elem->in_sg[last].iov_len > 0);
    memcpy(req->u.iov, elem->in_sg, (last + 1) * sizeof(struct iovec));
    req->u.iov[last].iov_len--;
    req->status = (uint8_t *)elem->in_sg[last].iov_base +
                  elem->in_sg[last].iov_len - 1;
    *niov = req->u.iov[last].iov_len ? last + 1 : last;
    return true;
}

/*
 * Make req->u.iov the out buffers after the 16-byte header.  Returns the
 * number of iovecs.
 */
static unsigned virtio_blk_out_data(VirtioBlkReq *req)
{
    const VirtQueueElement *elem = &req->elem;
    size_t skip = VIRTIO_BLK_HDR_SIZE;
    unsigned n = 0;

    for (unsigned i = 0; i < elem->out_num; i++) {
        const struct iovec *v = &elem->out_sg[i];

        if (skip >= v->iov_len) {
            skip -= v->iov_len;
            continue;
        }
        req->u.iov[n].iov_base = (uint8_t *)v->iov_base + skip;
        req->u.iov[n].iov_len = v->iov_len - skip;
        skip = 0;
        n++;
    }
    return n;
}

/* ------------------------------------------------------------------------ */
/* Request types                                                             */

static void virtio_blk_submit_rw(VirtioBlkReq *req, BlockOp op,
                                 uint64_t sector, unsigned niov,
                                 uint64_t bytes, unsigned flags)
{
    BlockRequest *breq = &req->breq;

    breq->op = op;
    breq->flags = flags;
    breq->offset = (int64_t)(sector << VIRTIO_BLK_SECTOR_BITS);
    breq->bytes = (int64_t)bytes;
    breq->iov = niov ? req->u.iov : NULL;
    breq->niov = niov;
    breq->cb = virtio_blk_rw_complete;
    breq->opaque = req;
    SPINDLE_TRACE3(virtio_blk_submit, virtqueue_index(req->vq), req->type,
                   sector);
    block_queue_submit(req->q->bq, breq);
}

static void virtio_blk_handle_read(VirtioBlkReq *req, uint64_t sector,
                                   unsigned in_niov, uint64_t out_extra)
{
    VirtioBlk *vb = req->vb;
    uint64_t bytes = iov_size(req->u.iov, in_niov);

    req->in_len = (uint32_t)bytes + 1;
    if (out_extra) {
        virtio_blk_log_bad_request(vb, req->vq, "read with device-readable "
                                   "data after the header");
        virtio_blk_req_finish(req, VIRTIO_BLK_S_IOERR);
        return;
    }
    if (bytes % VIRTIO_BLK_SECTOR_SIZE ||
        !virtio_blk_range_ok(vb, sector, bytes >> VIRTIO_BLK_SECTOR_BITS)) {
        virtio_blk_req_finish(req, VIRTIO_BLK_S_IOERR);
        return;
    }
    virtio_blk_submit_rw(req, BLOCK_OP_READ, sector, in_niov, bytes, 0);
}

/*
 * Whether a request that changes the node may go on: it has no
 * device-writable data before the status byte (else it is malformed:
 * logged as bad_data says) and the node is writable.  False when req was
 * finished with IOERR.
 */
static bool virtio_blk_may_write(VirtioBlkReq *req, unsigned in_niov,
                                 const char *bad_data)
{
    if (in_niov) {
        virtio_blk_log_bad_request(req->vb, req->vq, bad_data);
        virtio_blk_req_finish(req, VIRTIO_BLK_S_IOERR);
        return false;
    }
    if (!req->vb->writable) {
        virtio_blk_req_finish(req, VIRTIO_BLK_S_IOERR);
        return false;
    }
    return true;
}

static void virtio_blk_handle_write(VirtioBlkReq *req, uint64_t sector,
                                    unsigned in_niov)
{
    VirtioBlk *vb = req->vb;
    unsigned niov;
    uint64_t bytes;

    req->in_len = 1;
    if (!virtio_blk_may_write(req, in_niov, "write with device-writable "
                              "data before the status byte")) {
        return;
    }
    niov = virtio_blk_out_data(req);
    bytes = iov_size(req->u.iov, niov);
    if (bytes % VIRTIO_BLK_SECTOR_SIZE ||
        !virtio_blk_range_ok(vb, sector, bytes >> VIRTIO_BLK_SECTOR_BITS)) {
        virtio_blk_req_finish(req, VIRTIO_BLK_S_IOERR);
        return;
    }
    virtio_blk_submit_rw(req, BLOCK_OP_WRITE, sector, niov, bytes,
                         virtio_blk_writes_need_fua(vb) ? BLOCK_REQ_FUA : 0);
}

static void virtio_blk_handle_flush(VirtioBlkReq *req)
{
    req->in_len = 1;
    virtio_blk_submit_rw(req, BLOCK_OP_FLUSH, 0, 0, 0, 0);
}

static void virtio_blk_handle_get_id(VirtioBlkReq *req, unsigned in_niov)
{
    size_t n = iov_from_buf(req->u.iov, in_niov, 0, req->vb->serial,
                            VIRTIO_BLK_ID_BYTES);

    req->in_len = (uint32_t)n + 1;
    virtio_blk_req_finish(req, VIRTIO_BLK_S_OK);
}

static void virtio_blk_dwz_complete(BlockRequest *breq, int ret)
{
    VirtioBlkReq *req = breq->opaque;

    if (ret < 0) {
        switch (virtio_blk_error_action(req, ret)) {
        case BLOCK_ERROR_ACTION_STOP:
            virtio_blk_req_hold(req, ret);
            return;
        case BLOCK_ERROR_ACTION_IGNORE:
            break;               /* on with the next segment */
        default:
            virtio_blk_req_finish(req, virtio_blk_status_from_errno(ret));
            return;
        }
    }
    virtio_blk_dwz_next(req);
}

/* Submit the next segment of a discard / write-zeroes request, or finish. */
static void virtio_blk_dwz_next(VirtioBlkReq *req)
{
    BlockRequest *breq = &req->breq;
    const VirtioBlkSeg *seg;

    if (req->next_seg == req->nseg) {
        virtio_blk_req_finish(req, VIRTIO_BLK_S_OK);
        return;
    }
    seg = &req->u.segs[req->next_seg++];
    if (req->type == VIRTIO_BLK_T_DISCARD) {
        breq->op = BLOCK_OP_DISCARD;
        breq->flags = 0;
    } else {
        breq->op = BLOCK_OP_WRITE_ZEROES;
        breq->flags = seg->flags & VIRTIO_BLK_DWZ_F_UNMAP ?
                      BLOCK_REQ_MAY_UNMAP : 0;
        if (virtio_blk_writes_need_fua(req->vb)) {
            breq->flags |= BLOCK_REQ_FUA;
        }
    }
    breq->offset = (int64_t)(seg->sector << VIRTIO_BLK_SECTOR_BITS);
    breq->bytes = (int64_t)seg->num_sectors << VIRTIO_BLK_SECTOR_BITS;
    breq->iov = NULL;
    breq->niov = 0;
    breq->cb = virtio_blk_dwz_complete;
    breq->opaque = req;
    SPINDLE_TRACE3(virtio_blk_submit, virtqueue_index(req->vq), req->type,
                   seg->sector);
    block_queue_submit(req->q->bq, breq);
}

/*
 * Copy and check the segments.  Returns the status to fail the request
 * with, or VIRTIO_BLK_S_OK if all of them are good.  An unknown flag in any
 * segment makes it UNSUPP (5.2.6.2), even after a segment out of range.
 */
static uint8_t virtio_blk_dwz_parse(VirtioBlkReq *req, uint64_t data_bytes)
{
    VirtioBlk *vb = req->vb;
    bool discard = req->type == VIRTIO_BLK_T_DISCARD;
    uint32_t max_sectors = discard ? vb->max_discard_sectors
                                   : vb->max_write_zeroes_sectors;
    uint8_t status = VIRTIO_BLK_S_OK;
    uint64_t n;

    if (data_bytes == 0 || data_bytes % VIRTIO_BLK_SEG_SIZE) {
        return VIRTIO_BLK_S_IOERR;
    }
    n = data_bytes / VIRTIO_BLK_SEG_SIZE;
    if (n > VIRTIO_BLK_MAX_DWZ_SEGS) {
        return VIRTIO_BLK_S_IOERR;
    }
    for (unsigned i = 0; i < n; i++) {
        VirtioBlkSeg *seg = &req->u.segs[i];
        VirtioBlkSeg raw;

        iov_to_buf(req->elem.out_sg, req->elem.out_num,
                   VIRTIO_BLK_HDR_SIZE + i * VIRTIO_BLK_SEG_SIZE, &raw,
                   sizeof(raw));
        seg->sector = GUINT64_FROM_LE(raw.sector);
        seg->num_sectors = GUINT32_FROM_LE(raw.num_sectors);
        seg->flags = GUINT32_FROM_LE(raw.flags);

        if (seg->flags & ~VIRTIO_BLK_DWZ_F_UNMAP ||
            (discard && seg->flags & VIRTIO_BLK_DWZ_F_UNMAP)) {
            return VIRTIO_BLK_S_UNSUPP;
        }
        if (seg->num_sectors > max_sectors ||
            !virtio_blk_range_ok(vb, seg->sector, seg->num_sectors)) {
            status = VIRTIO_BLK_S_IOERR;
        }
    }
    if (status != VIRTIO_BLK_S_OK) {
        return status;
    }
    req->nseg = (uint16_t)n;
    req->next_seg = 0;
    return VIRTIO_BLK_S_OK;
}

static void virtio_blk_handle_dwz(VirtioBlkReq *req, unsigned in_niov)
{
    VirtioBlk *vb = req->vb;
    unsigned feature = req->type == VIRTIO_BLK_T_DISCARD ?
                       VIRTIO_BLK_F_DISCARD : VIRTIO_BLK_F_WRITE_ZEROES;
    uint64_t out_bytes = iov_size(req->elem.out_sg, req->elem.out_num);
    uint8_t status;

    req->in_len = 1;
    if (!virtio_blk_has_feature(vb, feature)) {
        virtio_blk_req_finish(req, VIRTIO_BLK_S_UNSUPP);
        return;
    }
    if (!virtio_blk_may_write(req, in_niov, "discard or write-zeroes with "
                              "device-writable data")) {
        return;
    }
    status = virtio_blk_dwz_parse(req, out_bytes - VIRTIO_BLK_HDR_SIZE);
    if (status != VIRTIO_BLK_S_OK) {
        virtio_blk_req_finish(req, status);
        return;
    }
    virtio_blk_dwz_next(req);
}

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                  */

static void virtio_blk_handle_request(VirtioBlkReq *req)
{
    VirtioBlk *vb = req->vb;
    const VirtQueueElement *elem = &req->elem;
    VirtioBlkOutHdr hdr;
    uint64_t out_bytes, sector;
    uint32_t type;
    unsigned in_niov;

    if (!virtio_blk_split_in(req, &in_niov)) {
        /*
         * Nowhere to put the status (5.2.6: the device writes it as the
         * last byte of the request): no answer would be honest, and
         * pushing the buffers back with nothing in them would tell the
         * driver its request completed.  Break the queue, as for a
         * malformed chain: the front-end learns of it from the error
         * eventfd.
         */
        virtqueue_fail_element(req->vq, &req->elem, "virtio-blk request "
                               "at head %u has no device-writable byte for "
                               "its status (no device-writable descriptor, "
                               "or the last one is empty)", req->elem.head);
        req->q->in_flight--;
        virtio_blk_req_release(req->q, req);
        return;
    }
    req->in_len = 1;
    req->type = UINT32_MAX;
    out_bytes = iov_size(elem->out_sg, elem->out_num);
    if (out_bytes < VIRTIO_BLK_HDR_SIZE) {
        virtio_blk_log_bad_request(vb, req->vq, "header shorter than 16 "
                                   "bytes");
        virtio_blk_req_finish(req, VIRTIO_BLK_S_IOERR);
        return;
    }
    iov_to_buf(elem->out_sg, elem->out_num, 0, &hdr, sizeof(hdr));
    type = GUINT32_FROM_LE(hdr.type);
    sector = GUINT64_FROM_LE(hdr.sector);
    req->type = type;

    switch (type) {
    case VIRTIO_BLK_T_IN:
        virtio_blk_handle_read(req, sector, in_niov,
                               out_bytes - VIRTIO_BLK_HDR_SIZE);
        break;
    case VIRTIO_BLK_T_OUT:
        virtio_blk_handle_write(req, sector, in_niov);
        break;
    case VIRTIO_BLK_T_FLUSH:
        virtio_blk_handle_flush(req);
        break;
    case VIRTIO_BLK_T_GET_ID:
        virtio_blk_handle_get_id(req, in_niov);
        break;
    case VIRTIO_BLK_T_DISCARD:
    case VIRTIO_BLK_T_WRITE_ZEROES:
        virtio_blk_handle_dwz(req, in_niov);
        break;
    default:
        virtio_blk_req_finish(req, VIRTIO_BLK_S_UNSUPP);
        break;
    }
}

/* vq's queue state; only vq's home thread uses it (asserted). */
static VirtioBlkQueue *virtio_blk_queue(VirtioBlk *vb, VirtQueue *vq)
{
    unsigned index = virtqueue_index(vq);

    g_assert(aio_context_in_home_thread(virtqueue_get_aio_context(vq)));
    /* The server never creates more queues than we asked for. */
    g_assert(index < vb->num_queues);
    return &vb->queues[index];
}

static void virtio_blk_handle_queue(VirtQueue *vq, void *opaque)
{
    VirtioBlk *vb = opaque;
    VirtioBlkQueue *q = virtio_blk_queue(vb, vq);

    block_queue_io_plug(q->bq);
    for (;;) {
        VirtioBlkReq *req = virtio_blk_req_alloc(q);
        int r = virtqueue_pop(vq, &req->elem);

        if (r <= 0) {
            /* Empty, paused (a request failed at once and stopped the
             * queue), or broken (the queue has logged why). */
            virtio_blk_req_release(q, req);
            break;
        }
        req->vb = vb;
        req->vq = vq;
        req->q = q;
        req->held.seq = q->next_seq++;
        q->in_flight++;
        virtio_blk_handle_request(req);
    }
    block_queue_io_unplug(q->bq);
}

/* ------------------------------------------------------------------------ */
/* VuDevOps                                                                  */

static uint64_t virtio_blk_get_features(void *dev)
{
    VirtioBlk *vb = dev;
    uint64_t f = (UINT64_C(1) << VIRTIO_BLK_F_SIZE_MAX) |
                 (UINT64_C(1) << VIRTIO_BLK_F_SEG_MAX) |
                 (UINT64_C(1) << VIRTIO_BLK_F_BLK_SIZE) |
                 (UINT64_C(1) << VIRTIO_BLK_F_FLUSH) |
                 (UINT64_C(1) << VIRTIO_BLK_F_TOPOLOGY) |
                 (UINT64_C(1) << VIRTIO_BLK_F_CONFIG_WCE);

    if (vb->num_queues > 1) {
        f |= UINT64_C(1) << VIRTIO_BLK_F_MQ;
    }
    if (vb->writable) {
        f |= (UINT64_C(1) << VIRTIO_BLK_F_DISCARD) |
             (UINT64_C(1) << VIRTIO_BLK_F_WRITE_ZEROES);
    } else {
        f |= UINT64_C(1) << VIRTIO_BLK_F_RO;
    }
    return f;
}

static void virtio_blk_set_features(void *dev, uint64_t features)
{
    VirtioBlk *vb = dev;
    bool flush = features & (UINT64_C(1) << VIRTIO_BLK_F_FLUSH);
    bool wce = features & (UINT64_C(1) << VIRTIO_BLK_F_CONFIG_WCE);
    bool writeback;

    vb->features = features;
    /*
     * 5.2.5 and 5.2.6.4: without FLUSH the driver cannot make writes
     * stable, so they must be stable at completion (writeback 0); with
     * CONFIG_WCE the driver may change it later.
     */
    if (!flush) {
        writeback = false;
    } else if (wce) {
        writeback = !vb->writethrough;
    } else {
        writeback = true;
    }
    atomic_store_explicit(&vb->writeback, writeback, memory_order_relaxed);
}

/* log2(x) for a power of two. */
static unsigned virtio_blk_log2(uint64_t x)
{
    return (unsigned)__builtin_ctzll(x);
}

static void virtio_blk_fill_config(VirtioBlk *vb, VirtioBlkConfig *cfg)
{
    const BlockLimits *l = &vb->limits;
    uint32_t lbs_sectors = vb->blk_size >> VIRTIO_BLK_SECTOR_BITS;
    uint64_t size_max = VIRTIO_BLK_SIZE_MAX_DEFAULT;
    uint32_t phys = MAX(l->request_alignment, vb->blk_size);
    uint32_t discard_align;

    if (l->max_transfer) {
        size_max = MIN(size_max, l->max_transfer);
    }
    size_max = MAX(size_max, (uint64_t)vb->blk_size);
    /* A physical block larger than 64 KiB is not worth telling about. */
    phys = MIN(phys, 65536u);
    discard_align = MAX(l->discard_alignment, vb->blk_size);

    memset(cfg, 0, sizeof(*cfg));
    cfg->capacity = GUINT64_TO_LE(virtio_blk_capacity(vb));
    cfg->size_max = GUINT32_TO_LE((uint32_t)size_max);
    cfg->seg_max = GUINT32_TO_LE(VIRTQUEUE_MAX_SEGS - 2);
    cfg->blk_size = GUINT32_TO_LE(vb->blk_size);
    cfg->physical_block_exp = (uint8_t)virtio_blk_log2(phys / vb->blk_size);
    cfg->alignment_offset = 0;
    cfg->min_io_size = GUINT16_TO_LE((uint16_t)(phys / vb->blk_size));
    cfg->opt_io_size = GUINT32_TO_LE(0);
    cfg->writeback = atomic_load_explicit(&vb->writeback,
                                          memory_order_relaxed);
    cfg->num_queues = GUINT16_TO_LE((uint16_t)vb->num_queues);
    cfg->max_discard_sectors = GUINT32_TO_LE(vb->max_discard_sectors);
    cfg->max_discard_seg = GUINT32_TO_LE(VIRTIO_BLK_MAX_DWZ_SEGS);
    cfg->discard_sector_alignment =
        GUINT32_TO_LE(MAX(discard_align >> VIRTIO_BLK_SECTOR_BITS,
                          lbs_sectors));
    cfg->max_write_zeroes_sectors =
        GUINT32_TO_LE(vb->max_write_zeroes_sectors);
    cfg->max_write_zeroes_seg = GUINT32_TO_LE(VIRTIO_BLK_MAX_DWZ_SEGS);
    /*
     * The guest may always ask; the node deallocates only with
     * discard=unmap and zeroes the range otherwise.
     */
    cfg->write_zeroes_may_unmap = 1;
}

static uint32_t virtio_blk_get_config(void *dev, uint8_t *buf, uint32_t len)
{
    VirtioBlk *vb = dev;
    VirtioBlkConfig cfg;
    uint32_t n = MIN(len, (uint32_t)sizeof(cfg));

    virtio_blk_fill_config(vb, &cfg);
    memcpy(buf, &cfg, n);
    return n;
}

static int virtio_blk_set_config(void *dev, const uint8_t *buf,
                                 uint32_t offset, uint32_t len)
{
    VirtioBlk *vb = dev;

    /* Only `writeback` is writable, and only with CONFIG_WCE. */
    if (offset != offsetof(VirtioBlkConfig, writeback) || len != 1 ||
        !virtio_blk_has_feature(vb, VIRTIO_BLK_F_CONFIG_WCE) || buf[0] > 1) {
        return -EINVAL;
    }
    atomic_store_explicit(&vb->writeback, buf[0] == 1, memory_order_relaxed);
    return 0;
}

static void virtio_blk_queue_started(void *dev, VirtQueue *vq)
{
    VirtioBlk *vb = dev;
    VirtioBlkQueue *q = virtio_blk_queue(vb, vq);
    AioContext *ctx = virtqueue_get_aio_context(vq);

    /* The node's requests complete where the queue runs: through a
     * BlockQueue of this context, made here and freed by queue_drain. */
    if (!q->bq) {
        q->bq = block_queue_new(vb->bs, ctx, NULL);   /* never fails */
        block_queue_set_acct(q->bq, vb->acct, virtqueue_index(vq));
    }
    g_assert(block_queue_get_aio_context(q->bq) == ctx);
    g_assert(!q->stop.stopped);
    q->vq = vq;
    q->stop.draining = false;
    virtio_stop_set_context(&q->stop, ctx);
}

static void virtio_blk_queue_drain(void *dev, VirtQueue *vq)
{
    VirtioBlk *vb = dev;
    VirtioBlkQueue *q = virtio_blk_queue(vb, vq);
    AioContext *ctx = virtqueue_get_aio_context(vq);

    /* Errors from now on are reported; held requests get one more try. */
    q->stop.draining = true;
    virtio_blk_queue_retry_held(q, false);
    while (q->in_flight > 0) {
        aio_poll(ctx, true);
    }
    q->vq = NULL;
    if (q->bq) {
        g_assert(block_queue_in_flight(q->bq) == 0);
        block_queue_free(q->bq);
        q->bq = NULL;
    }
    virtio_req_pool_drain(&q->pool);
}

const VuDevOps virtio_blk_vu_ops = {
    .get_features = virtio_blk_get_features,
    .set_features = virtio_blk_set_features,
    .get_config = virtio_blk_get_config,
    .set_config = virtio_blk_set_config,
    .queue_started = virtio_blk_queue_started,
    .queue_drain = virtio_blk_queue_drain,
    .handle_queue = virtio_blk_handle_queue,
};

/* ------------------------------------------------------------------------ */
/* Creation                                                                  */

static bool virtio_blk_conf_valid(const VirtioBlkConf *conf, BlockNode *bs,
                                  Error **errp)
{
    uint32_t lbs = conf->logical_block_size;

    if (conf->num_queues < 1 || conf->num_queues > VIRTIO_BLK_MAX_QUEUES) {
        error_setg(errp, "Parameter 'num-queues' expects a number from 1 to "
                   "%u, got %u", VIRTIO_BLK_MAX_QUEUES, conf->num_queues);
        return false;
    }
    if (conf->queue_size > VIRTQUEUE_MAX_SIZE ||
        (conf->queue_size & (conf->queue_size - 1))) {
        error_setg(errp, "Parameter 'queue-size' expects a power of two up "
                   "to %u, got %u", VIRTQUEUE_MAX_SIZE, conf->queue_size);
        return false;
    }
    if (lbs < 512 || lbs > 65536 || (lbs & (lbs - 1))) {
        error_setg(errp, "Parameter 'logical-block-size' expects a power of "
                   "two from 512 to 65536, got %u", lbs);
        return false;
    }
    if (conf->serial && strlen(conf->serial) > VIRTIO_BLK_ID_BYTES) {
        error_setg(errp, "Parameter 'serial' is %zu bytes long; at most %u "
                   "are allowed", strlen(conf->serial), VIRTIO_BLK_ID_BYTES);
        return false;
    }
    if (conf->writable && block_node_is_read_only(bs)) {
        error_setg(errp, "writable=on, but node '%s' is read-only",
                   block_node_get_name(bs));
        return false;
    }
    if (block_node_get_length(bs) < lbs) {
        error_setg(errp, "node '%s' is smaller than one logical block (%u "
                   "bytes)", block_node_get_name(bs), lbs);
        return false;
    }
    return true;
}

/* The capacity in sectors for a node of length bytes: whole logical
 * blocks. */
static uint64_t virtio_blk_capacity_of(const VirtioBlk *vb, int64_t length)
{
    if (length < 0) {
        length = 0;
    }
    return (uint64_t)(length - length % vb->blk_size) >>
           VIRTIO_BLK_SECTOR_BITS;
}

/* A per-segment limit in sectors: the node's (bytes), else the default. */
static uint32_t virtio_blk_dwz_limit(uint64_t node_max, uint32_t blk_size)
{
    uint64_t sectors = node_max ? node_max >> VIRTIO_BLK_SECTOR_BITS
                                : VIRTIO_BLK_DWZ_DEFAULT_SECTORS;
    uint32_t lbs_sectors = blk_size >> VIRTIO_BLK_SECTOR_BITS;

    sectors = MIN(sectors, (uint64_t)VIRTIO_BLK_DWZ_DEFAULT_SECTORS);
    sectors -= sectors % lbs_sectors;
    return (uint32_t)MAX(sectors, (uint64_t)lbs_sectors);
}

VirtioBlk *virtio_blk_new(const VirtioBlkConf *conf, BlockNode *bs,
                          Error **errp)
{
    VirtioBlk *vb;
    int64_t length;
    void *queues;

    if (!virtio_blk_conf_valid(conf, bs, errp)) {
        return NULL;
    }
    vb = g_new0(VirtioBlk, 1);
    vb->bs = bs;
    block_node_ref(bs);
    vb->num_queues = conf->num_queues;
    vb->blk_size = conf->logical_block_size;
    vb->writable = conf->writable;
    vb->writethrough = conf->writethrough;
    if (conf->serial) {
        memcpy(vb->serial, conf->serial, strlen(conf->serial));
    }
    length = block_node_get_length(bs);
    atomic_init(&vb->capacity, virtio_blk_capacity_of(vb, length));
    vb->acct = block_acct_new(vb->num_queues);
    block_node_get_limits(bs, &vb->limits);
    vb->max_discard_sectors = virtio_blk_dwz_limit(vb->limits.max_discard,
                                                   vb->blk_size);
    vb->max_write_zeroes_sectors =
        virtio_blk_dwz_limit(vb->limits.max_write_zeroes, vb->blk_size);
    atomic_init(&vb->writeback, !vb->writethrough);
    atomic_flag_clear(&vb->logged_bad_request);
    atomic_flag_clear(&vb->logged_ignored);
    vb->rerror = conf->rerror;
    vb->werror = conf->werror;
    vb->export_id = g_strdup(conf->export_id);
    vb->main_ctx = conf->main_ctx;
    vb->io_error = conf->io_error;

    if (posix_memalign(&queues, CACHELINE_SIZE,
                       vb->num_queues * sizeof(VirtioBlkQueue))) {
        g_error("virtio-blk: out of memory");
    }
    memset(queues, 0, vb->num_queues * sizeof(VirtioBlkQueue));
    vb->queues = queues;
    for (unsigned i = 0; i < vb->num_queues; i++) {
        virtio_stop_init(&vb->queues[i].stop, virtio_blk_queue_retry_held,
                         &vb->queues[i]);
    }
    return vb;
}

void virtio_blk_free(VirtioBlk *vb)
{
    if (!vb) {
        return;
    }
    for (unsigned i = 0; i < vb->num_queues; i++) {
        /* Queues are stopped and drained: nothing is in flight. */
        g_assert(vb->queues[i].in_flight == 0);
        block_queue_free(vb->queues[i].bq);
        virtio_req_pool_drain(&vb->queues[i].pool);
    }
    free(vb->queues);
    block_acct_free(vb->acct);
    block_node_unref(vb->bs);
    g_free(vb->export_id);
    g_free(vb);
}

bool virtio_blk_refresh_capacity(VirtioBlk *vb)
{
    uint64_t capacity = virtio_blk_capacity_of(vb,
                                               block_node_get_length(vb->bs));

    assert_main_thread();
    if (capacity == virtio_blk_capacity(vb)) {
        return false;
    }
    /* Pairs with the acquire load in virtio_blk_capacity(): the node's new
     * length was published before (block_node_resize()). */
    atomic_store_explicit(&vb->capacity, capacity, memory_order_release);
    return true;
}

uint64_t virtio_blk_get_capacity(VirtioBlk *vb)
{
    return virtio_blk_capacity(vb);
}

void virtio_blk_get_acct_stats(VirtioBlk *vb, BlockAcctStats *out)
{
    block_acct_get(vb->acct, out);
}

unsigned virtio_blk_stops(VirtioBlk *vb, bool resume)
{
    return virtio_stop_all(&vb->queues[0].stop, sizeof(VirtioBlkQueue),
                           vb->num_queues, resume);
}

/*
 * virtio-scsi LUN tables and LUN hot-plug (add and remove while the device
 * runs, with VIRTIO_SCSI_F_HOTPLUG transport reset events).
 *
 * Theory of operation
 * -------------------
 * Every command looks its LUN up, so the lookup must cost no lock and no
 * atomic.  Each thread that looks LUNs up therefore has its own table (a
 * VirtioScsiLun array sorted by LUN number) that only it touches:
 *
 *   - the device-wide table, vs->luns, belongs to the main thread.  It
 *     owns the disks and is what a queue copies when it starts (the
 *     VuServer starts queues with aio_run_sync(), so the main thread is
 *     waiting while a queue's thread reads it);
 *   - each started request queue has q->luns, with the queue's own
 *     BlockQueue per LUN in its context, made in queue_started and freed
 *     in queue_drain;
 *   - the started control queue has vs->ctrl.luns (no BlockQueues) for
 *     the TMFs' LUN lookups and resets.
 *
 * virtio_scsi_add_lun() and virtio_scsi_remove_lun() run in the main
 * thread.  They change vs->luns first (so a queue that starts later
 * copies the new set), then change each started queue's table in that
 * queue's thread with aio_run_sync() into its context: a queue that never
 * started (ctx NULL) is skipped, and one that was stopped (no table) does
 * nothing and copies vs->luns at its next start.  The main thread waits
 * for one IOThread at a time, and IOThreads never wait for the main
 * thread, so this cannot deadlock.
 *
 * Add: the control queue first, then every request queue, which makes a
 * BlockQueue for the LUN in its own context and inserts it; from then on
 * the queue's commands reach the LUN and its REPORT LUNS lists it.  Then,
 * with VIRTIO_SCSI_F_HOTPLUG negotiated, a TRANSPORT_RESET / RESCAN event
 * (virtio_scsi_event_send(): the EVENTS_MISSED logic of every event).
 *
 * Remove: every request queue first: the LUN leaves the queue's table at
 * once (new commands get the answers for a LUN that does not exist), then
 * the queue runs nested aio_poll() in its own thread until its commands
 * at that LUN are done, and frees its BlockQueue.  Then the control
 * queue's table (TMFs keep the LUN number and look it up again when they
 * complete, so a reset of a removed LUN touches nothing), then the
 * TRANSPORT_RESET / REMOVED event.  Only then is the disk handed back to
 * the caller and the LUN's accounting freed: no queue refers to them any
 * more.
 *
 * Accounting: each LUN has a BlockAcct with a slot per virtqueue, made
 * when the LUN is added and owned by the device-wide table; every
 * BlockQueue a request queue makes for the LUN counts into the slot of
 * that queue's virtqueue index, so a queue's thread writes only its own
 * slot.  It outlives the queues' BlockQueues (reconnects keep the
 * counts) and goes with the LUN.
 *
 * The control queue's table is thus always a superset of every request
 * queue's: a TMF never answers INCORRECT_LUN for a LUN a queue still has
 * commands at.  During a change, queues in different threads may briefly
 * disagree about the set; each switches at one point between two of its
 * own commands.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <glib.h>

#include "block/block.h"
#include "hw/scsi/scsi-disk.h"
#include "hw/virtio/virtio-scsi.h"
#include "hw/virtio/virtio-scsi-wire.h"
#include "util/aio.h"
#include "util/error.h"
#include "virtio-scsi-int.h"
#include "util/main-thread.h"

/* ------------------------------------------------------------------------ */
/* Tables                                                                    */

int virtio_scsi_lun_find(const VirtioScsiLun *luns, unsigned n,
                         unsigned lun)
{
    unsigned lo = 0, hi = n;

    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;

        if (luns[mid].lun == lun) {
            return (int)mid;
        }
        if (luns[mid].lun < lun) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return -1;
}

/* Insert e (whose LUN is not in the table) in order. */
static void virtio_scsi_lun_insert(VirtioScsiLun **luns, unsigned *n,
                                   const VirtioScsiLun *e)
{
    unsigned pos = 0;

    while (pos < *n && (*luns)[pos].lun < e->lun) {
        pos++;
    }
    *luns = g_renew(VirtioScsiLun, *luns, *n + 1);
    memmove(&(*luns)[pos + 1], &(*luns)[pos],
            (*n - pos) * sizeof(VirtioScsiLun));
    (*luns)[pos] = *e;
    (*n)++;
}

/* Take entry slot out (the allocation stays, and is never empty). */
static void virtio_scsi_lun_delete(VirtioScsiLun *luns, unsigned *n,
                                   unsigned slot)
{
    memmove(&luns[slot], &luns[slot + 1],
            (*n - slot - 1) * sizeof(VirtioScsiLun));
    (*n)--;
}

/* A copy of vs->luns, never NULL (a started queue always has a table). */
static VirtioScsiLun *virtio_scsi_lun_copy(const VirtioScsi *vs)
{
    VirtioScsiLun *luns = g_new(VirtioScsiLun, MAX(vs->nluns, 1u));

    if (vs->nluns) {
        memcpy(luns, vs->luns, vs->nluns * sizeof(VirtioScsiLun));
    }
    return luns;
}

/* The virtqueue index of request queue q (2.. : after control, event). */
static unsigned virtio_scsi_queue_vq_index(const VirtioScsi *vs,
                                           const VirtioScsiQueue *q)
{
    return (unsigned)(q - vs->queues) + VIRTIO_SCSI_VQ_REQUEST0;
}

/* Give e (in q's table) its BlockQueue in ctx, counting into its slot of
 * the LUN's accounting.  Home thread of q. */
static void virtio_scsi_lun_open_bq(VirtioScsi *vs, VirtioScsiQueue *q,
                                    VirtioScsiLun *e, AioContext *ctx)
{
    e->bq = block_queue_new(scsi_disk_get_node(e->disk), ctx,
                            NULL);   /* never fails */
    block_queue_set_acct(e->bq, e->acct, virtio_scsi_queue_vq_index(vs, q));
}

void virtio_scsi_queue_luns_start(VirtioScsi *vs, VirtioScsiQueue *q,
                                  AioContext *ctx)
{
    g_assert(aio_context_in_home_thread(ctx));
    if (q->luns) {
        return;                  /* started again without a drain */
    }
    q->luns = virtio_scsi_lun_copy(vs);
    q->nluns = vs->nluns;
    for (unsigned i = 0; i < q->nluns; i++) {
        virtio_scsi_lun_open_bq(vs, q, &q->luns[i], ctx);
    }
}

void virtio_scsi_queue_luns_stop(VirtioScsiQueue *q)
{
    for (unsigned i = 0; i < q->nluns; i++) {
        g_assert(block_queue_in_flight(q->luns[i].bq) == 0);
        block_queue_free(q->luns[i].bq);
    }
    g_free(q->luns);
    q->luns = NULL;
    q->nluns = 0;
}

void virtio_scsi_ctrl_luns_start(VirtioScsi *vs)
{
    if (!vs->ctrl.luns) {
        vs->ctrl.luns = virtio_scsi_lun_copy(vs);
        vs->ctrl.nluns = vs->nluns;
    }
}

void virtio_scsi_ctrl_luns_stop(VirtioScsi *vs)
{
    g_free(vs->ctrl.luns);
    vs->ctrl.luns = NULL;
    vs->ctrl.nluns = 0;
}

/* ------------------------------------------------------------------------ */
/* Changing the queues' tables                                               */

/* One table change, run in the thread that owns the table. */
typedef struct VirtioScsiLunOp {
    VirtioScsi *vs;
    VirtioScsiQueue *q;          /* the request queue (NULL: control) */
    unsigned lun;
    ScsiDisk *disk;              /* add: the new LUN's; remove: NULL */
    BlockAcct *acct;             /* add: the new LUN's */
} VirtioScsiLunOp;

static void virtio_scsi_queue_add_bh(void *opaque)
{
    VirtioScsiLunOp *op = opaque;
    VirtioScsiQueue *q = op->q;
    AioContext *ctx = atomic_load_explicit(&q->ctx, memory_order_relaxed);
    VirtioScsiLun e = { .lun = op->lun, .disk = op->disk,
                        .acct = op->acct };

    g_assert(aio_context_in_home_thread(ctx));
    if (!q->luns) {
        return;                  /* stopped: copies vs->luns at its start */
    }
    virtio_scsi_lun_open_bq(op->vs, q, &e, ctx);
    virtio_scsi_lun_insert(&q->luns, &q->nluns, &e);
}

static void virtio_scsi_queue_remove_bh(void *opaque)
{
    VirtioScsiLunOp *op = opaque;
    VirtioScsiQueue *q = op->q;
    AioContext *ctx = atomic_load_explicit(&q->ctx, memory_order_relaxed);
    BlockQueue *bq;
    int slot;

    g_assert(aio_context_in_home_thread(ctx));
    if (!q->luns) {
        return;
    }
    slot = virtio_scsi_lun_find(q->luns, q->nluns, op->lun);
    g_assert(slot >= 0);         /* every table follows vs->luns */
    bq = q->luns[slot].bq;
    virtio_scsi_lun_delete(q->luns, &q->nluns, (unsigned)slot);
    /* New commands no longer find the LUN; finish the ones that did
     * (held ones get one more try, and their errors are reported). */
    q->stop.draining = true;
    virtio_scsi_queue_retry_held(q, true);
    while (virtio_scsi_queue_has_cmds(q, op->lun) ||
           block_queue_in_flight(bq) > 0) {
        aio_poll(ctx, true);
    }
    q->stop.draining = false;
    block_queue_free(bq);
}

static void virtio_scsi_ctrl_change_bh(void *opaque)
{
    VirtioScsiLunOp *op = opaque;
    VirtioScsiCtrl *ctrl = &op->vs->ctrl;
    int slot;

    g_assert(aio_context_in_home_thread(atomic_load_explicit(
                 &ctrl->ctx, memory_order_relaxed)));
    if (!ctrl->luns) {
        return;
    }
    if (op->disk) {
        VirtioScsiLun e = { .lun = op->lun, .disk = op->disk,
                            .acct = op->acct };

        virtio_scsi_lun_insert(&ctrl->luns, &ctrl->nluns, &e);
        return;
    }
    slot = virtio_scsi_lun_find(ctrl->luns, ctrl->nluns, op->lun);
    g_assert(slot >= 0);
    virtio_scsi_lun_delete(ctrl->luns, &ctrl->nluns, (unsigned)slot);
}

static void virtio_scsi_ctrl_change(VirtioScsiLunOp *op)
{
    /* Acquire: pairs with the release in virtio_scsi_ctrl_started(). */
    AioContext *ctx = atomic_load_explicit(&op->vs->ctrl.ctx,
                                           memory_order_acquire);

    if (ctx) {
        op->q = NULL;
        aio_run_sync(ctx, virtio_scsi_ctrl_change_bh, op);
    }
}

static void virtio_scsi_queues_change(VirtioScsiLunOp *op)
{
    VirtioScsi *vs = op->vs;

    for (unsigned i = 0; i < vs->num_queues; i++) {
        /* Acquire: pairs with the release in the queue's queue_started. */
        AioContext *ctx = atomic_load_explicit(&vs->queues[i].ctx,
                                               memory_order_acquire);

        if (ctx) {
            op->q = &vs->queues[i];
            aio_run_sync(ctx, op->disk ? virtio_scsi_queue_add_bh
                                       : virtio_scsi_queue_remove_bh, op);
        }
    }
}

static void virtio_scsi_hotplug_event(VirtioScsi *vs, unsigned lun,
                                      uint32_t reason)
{
    if (vs->features & (UINT64_C(1) << VIRTIO_SCSI_F_HOTPLUG)) {
        virtio_scsi_event_send(vs, VIRTIO_SCSI_T_TRANSPORT_RESET, lun,
                               reason);
    }
}

/* ------------------------------------------------------------------------ */
/* API                                                                       */

bool virtio_scsi_add_lun(VirtioScsi *vs, unsigned lun, ScsiDisk *d,
                         Error **errp)
{
    VirtioScsiLunOp op = { .vs = vs, .lun = lun, .disk = d };
    VirtioScsiLun e = { .lun = lun, .disk = d };

    assert_main_thread();
    g_assert(d);
    if (lun > VIRTIO_SCSI_MAX_LUN) {
        error_setg(errp, "LUN %u is out of range: LUNs go from 0 to %u", lun,
                   VIRTIO_SCSI_MAX_LUN);
        return false;
    }
    if (virtio_scsi_lun_find(vs->luns, vs->nluns, lun) >= 0) {
        error_setg(errp, "LUN %u is already in use", lun);
        return false;
    }
    e.acct = op.acct = block_acct_new(virtio_scsi_num_virtqueues(vs));
    virtio_scsi_lun_insert(&vs->luns, &vs->nluns, &e);
    virtio_scsi_ctrl_change(&op);
    virtio_scsi_queues_change(&op);
    virtio_scsi_hotplug_event(vs, lun, VIRTIO_SCSI_EVT_RESET_RESCAN);
    return true;
}

ScsiDisk *virtio_scsi_remove_lun(VirtioScsi *vs, unsigned lun)
{
    VirtioScsiLunOp op = { .vs = vs, .lun = lun, .disk = NULL };
    int slot = virtio_scsi_lun_find(vs->luns, vs->nluns, lun);
    BlockAcct *acct;
    ScsiDisk *d;

    if (slot < 0) {
        return NULL;
    }
    d = vs->luns[slot].disk;
    acct = vs->luns[slot].acct;
    virtio_scsi_lun_delete(vs->luns, &vs->nluns, (unsigned)slot);
    virtio_scsi_queues_change(&op);
    virtio_scsi_ctrl_change(&op);
    /* Every BlockQueue that counted into it is freed. */
    block_acct_free(acct);
    virtio_scsi_hotplug_event(vs, lun, VIRTIO_SCSI_EVT_RESET_REMOVED);
    return d;
}

bool virtio_scsi_get_lun_stats(VirtioScsi *vs, unsigned lun,
                               BlockAcctStats *out)
{
    int slot = virtio_scsi_lun_find(vs->luns, vs->nluns, lun);

    assert_main_thread();
    if (slot < 0) {
        return false;
    }
    block_acct_get(vs->luns[slot].acct, out);
    return true;
}

ScsiDisk *virtio_scsi_get_lun(VirtioScsi *vs, unsigned lun)
{
    int slot = virtio_scsi_lun_find(vs->luns, vs->nluns, lun);

    return slot < 0 ? NULL : vs->luns[slot].disk;
}

/*
 * virtio-scsi control queue (task management, asynchronous notification)
 * and event queue (virtio 1.x, 5.6.6.2 and 5.6.6.3).
 *
 * Theory of operation
 * -------------------
 * Control queue.  Every popped element becomes a VirtioScsiTmf (one
 * allocation: the element, the request's fields and one VirtioScsiTmfWait
 * per request queue), answered and freed when done; ctrl.tmfs counts the
 * ones not answered yet so that queue_drain can wait for them.  AN_QUERY
 * and AN_SUBSCRIBE are answered at once: no asynchronous events are
 * supported (event_actual 0).  A TMF or AN request whose device-writable
 * part cannot hold its response leaves no way to answer: it breaks the
 * control queue (virtqueue_fail_element()), as a malformed chain does.
 * Other malformed requests are logged (once per device) and answered with
 * VIRTIO_SCSI_S_FAILURE; one without a type, or of an unknown type, is
 * handed back with len 0 (the response's place depends on the type).
 *
 * Task management runs across threads without locks: the control queue
 * may live in one IOThread and the request queues in others, and the
 * commands a TMF concerns belong to those threads.  A TMF is a small
 * fan-out / fan-in:
 *
 *   1. The control queue's thread fills one VirtioScsiTmfWait per request
 *      queue with what to look for (a LUN or all of them, maybe a tag) and
 *      what to do (count the matches for QUERY TASK / TASK SET, or cancel
 *      them with VIRTIO_SCSI_S_ABORTED for the ABORTs and CLEAR TASK SET,
 *      VIRTIO_SCSI_S_RESET for the resets), sets tmf->pending to the
 *      number of request queues plus one (its own share, so the TMF cannot
 *      complete while it is still handing out waits), and gives each wait
 *      to its queue's thread: a direct call when the queue runs in the
 *      same thread (the common single-IOThread case is thus synchronous),
 *      a one-shot BH in the queue's context otherwise, nothing for a queue
 *      that never started (it has no commands).
 *   2. In the request queue's thread, virtio_scsi_queue_tmf_scan() pops
 *      what the driver had queued (commands sent before the TMF are in the
 *      ring by then: the driver published them first, and our acquire of
 *      the control ring and the BH hand-off order that before this pop),
 *      then marks the matching commands.  A cancelling wait with matches
 *      stays on the queue, and each matching command's completion, after
 *      pushing the command (with the cancel response instead of its
 *      result: block requests cannot be recalled, so "abort" means "wait,
 *      then answer ABORTED"), counts it down.
 *   3. A share is done when its queue had no match, or when its last
 *      match was pushed: it decrements tmf->pending (acq_rel, so the last
 *      decrement sees every share's writes -- found, and the commands'
 *      pushes).  The last one completes the TMF in the control queue's
 *      thread (directly if it is that thread, else through a one-shot BH):
 *      the resets then raise the LUNs' reset unit attention
 *      (scsi_disk_reset()), and the response is pushed.  So the driver
 *      sees the TMF complete only after every command it affected.
 *
 * Lifetime: a TMF stays allocated until its completion, which needs every
 * share; the control queue's queue_drain runs the loop until ctrl.tmfs is
 * 0, and the request queues keep running meanwhile (or drain their own
 * commands, which completes their shares), so nothing refers to a TMF
 * after it is freed.
 *
 * Event queue.  The driver's buffers are popped and held (FIFO) until an
 * event needs one; queue_drain hands them back with len 0.  A buffer too
 * small for an event breaks the queue (5.6.6.3.1 says it MUST fit one,
 * and any buffer handed back would be read as an event).  An event that
 * finds no buffer sets `missed`, and the next buffer the driver gives is
 * used at once for VIRTIO_SCSI_T_NO_EVENT | VIRTIO_SCSI_T_EVENTS_MISSED
 * (any event delivered before that carries the flag instead), so the
 * driver learns promptly that it should rescan.  Events start in the main
 * thread (virtio_scsi_capacity_changed(), and LUN add/remove in
 * virtio-scsi-luns.c for the TRANSPORT_RESET events), which runs the
 * delivery in the event queue's thread with aio_run_sync()
 * (virtio_scsi_event_send()): the device cannot be freed while a delivery
 * is pending, and the main thread waits only for that IOThread, which
 * never waits for the main thread.
 *
 * The control queue keeps its own copy of the LUN table (vs->ctrl.luns,
 * no BlockQueues) for the TMFs' LUN lookups and resets; LUN add/remove
 * update it in this thread.  A TMF keeps the LUN's number, not a table
 * index, so a LOGICAL UNIT RESET whose LUN was removed while it waited
 * finds nothing to reset.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <glib.h>

#include "hw/scsi/scsi-disk.h"
#include "hw/virtio/virtio-scsi.h"
#include "hw/virtio/virtio-scsi-wire.h"
#include "hw/virtio/virtqueue.h"
#include "util/aio.h"
#include "util/iov.h"
#include "util/trace.h"
#include "virtio-scsi-int.h"
#include "util/main-thread.h"

/* PARAM_CHANGE reason for a resize: CAPACITY DATA HAS CHANGED. */
#define VIRTIO_SCSI_REASON_CAPACITY_CHANGED  (0x2a | 0x09 << 8)

struct VirtioScsiTmf {
    VirtioScsi *vs;
    VirtQueue *vq;               /* the control queue */
    AioContext *ctx;             /* its home context */
    uint32_t subtype;
    int lun;                     /* the LUN it names; -1: all */
    /* Shares not done yet: one per request queue, plus the dispatcher. */
    _Atomic unsigned pending;
    /* QUERY: a matching command was in flight (any share). */
    _Atomic bool found;
    VirtQueueElement elem;
    VirtioScsiTmfWait waits[];   /* vs->num_queues */
};

struct VirtioScsiEventBuf {
    VirtioScsiEventBuf *next;
    VirtQueueElement elem;
};

/* ------------------------------------------------------------------------ */
/* Control queue: answers                                                    */

static void virtio_scsi_ctrl_push(VirtioScsiTmf *tmf, uint32_t len)
{
    VirtioScsi *vs = tmf->vs;

    virtqueue_push(tmf->vq, &tmf->elem, len);
    vs->ctrl.tmfs--;
    g_free(tmf);
}

/* How a TMF or AN request's sizes fit (virtio_scsi_ctrl_fit()). */
typedef enum VirtioScsiCtrlFit {
    VIRTIO_SCSI_CTRL_FITS,       /* request and response both fit */
    VIRTIO_SCSI_CTRL_SHORT,      /* the request is short: answer FAILURE */
    VIRTIO_SCSI_CTRL_GONE,       /* no room for the response: tmf is gone */
} VirtioScsiCtrlFit;

/*
 * Check a `what` request of req_size bytes whose response is resp_size
 * bytes.  A device-writable part too small for the response leaves no
 * honest answer: 5.6.6.2 puts the outcome in `response`, a field of the
 * device-writable part (the last byte of a TMF's or AN's response), and a
 * buffer handed back with nothing written would read as whatever was
 * there.  Then tmf is given up and the control queue broken, as for a
 * malformed chain (the front-end learns of it from the error eventfd).
 * A short request with room for the response is logged, and answered
 * FAILURE by the caller.
 */
static VirtioScsiCtrlFit virtio_scsi_ctrl_fit(VirtioScsiTmf *tmf,
                                              uint64_t out_bytes,
                                              size_t req_size,
                                              size_t resp_size,
                                              const char *what)
{
    VirtioScsi *vs = tmf->vs;

    if (tmf->elem.in_bytes < resp_size) {
        virtqueue_fail_element(tmf->vq, &tmf->elem, "virtio-scsi %s request "
                               "at head %u has %" PRIu32 " device-writable "
                               "bytes, no room for the %zu-byte response",
                               what, tmf->elem.head, tmf->elem.in_bytes,
                               resp_size);
        vs->ctrl.tmfs--;
        g_free(tmf);
        return VIRTIO_SCSI_CTRL_GONE;
    }
    if (out_bytes < req_size) {
        g_autofree char *why = g_strdup_printf("%s request too short", what);

        virtio_scsi_log_bad_request(vs, tmf->vq, why);
        return VIRTIO_SCSI_CTRL_SHORT;
    }
    return VIRTIO_SCSI_CTRL_FITS;
}

/* Write the one-byte TMF response and push. */
static void virtio_scsi_tmf_answer(VirtioScsiTmf *tmf, uint8_t response)
{
    VirtioScsiCtrlTmfResp resp = { .response = response };
    size_t n = iov_from_buf(tmf->elem.in_sg, tmf->elem.in_num, 0,
                            &resp, sizeof(resp));

    SPINDLE_TRACE2(virtio_scsi_tmf_done, tmf->subtype, response);
    virtio_scsi_ctrl_push(tmf, (uint32_t)n);
}

/* ------------------------------------------------------------------------ */
/* Task management across threads                                            */

/* The TMF's commands are all done: apply it and answer.  Control thread. */
static void virtio_scsi_tmf_complete(VirtioScsiTmf *tmf)
{
    VirtioScsi *vs = tmf->vs;
    uint8_t response = VIRTIO_SCSI_S_FUNCTION_COMPLETE;

    g_assert(aio_context_in_home_thread(tmf->ctx));
    switch (tmf->subtype) {
    case VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET: {
        /* Looked up again: the LUN may have been removed meanwhile (its
         * disk with it), and then there is nothing to reset. */
        int slot = virtio_scsi_lun_find(vs->ctrl.luns, vs->ctrl.nluns,
                                        (unsigned)tmf->lun);

        if (slot >= 0) {
            scsi_disk_reset(vs->ctrl.luns[slot].disk);
        }
        break;
    }
    case VIRTIO_SCSI_T_TMF_I_T_NEXUS_RESET:
        for (unsigned i = 0; i < vs->ctrl.nluns; i++) {
            scsi_disk_reset(vs->ctrl.luns[i].disk);
        }
        break;
    case VIRTIO_SCSI_T_TMF_QUERY_TASK:
    case VIRTIO_SCSI_T_TMF_QUERY_TASK_SET:
        /* Relaxed: the acq_rel fetch_sub chain in
         * virtio_scsi_tmf_share_done() ordered the shares' stores (and
         * the BH hand-off, if any) before this load. */
        if (atomic_load_explicit(&tmf->found, memory_order_relaxed)) {
            response = VIRTIO_SCSI_S_FUNCTION_SUCCEEDED;
        }
        break;
    default:
        break;
    }
    virtio_scsi_tmf_answer(tmf, response);
}

static void virtio_scsi_tmf_complete_bh(void *opaque)
{
    virtio_scsi_tmf_complete(opaque);
}

/* One share of tmf is done; the last one completes it.  Any thread. */
static void virtio_scsi_tmf_share_done(VirtioScsiTmf *tmf)
{
    /*
     * acq_rel: release publishes this share's work (found, the pushes of
     * its commands); acquire in the last decrement sees every share's.
     * Pairs with the same fetch_sub in the other threads.
     */
    if (atomic_fetch_sub_explicit(&tmf->pending, 1,
                                  memory_order_acq_rel) != 1) {
        return;
    }
    if (aio_context_in_home_thread(tmf->ctx)) {
        virtio_scsi_tmf_complete(tmf);
    } else {
        aio_bh_schedule_oneshot(tmf->ctx, virtio_scsi_tmf_complete_bh, tmf);
    }
}

void virtio_scsi_tmf_wait_done(VirtioScsiTmfWait *w)
{
    virtio_scsi_tmf_share_done(w->tmf);
}

/* A request queue's share: in that queue's home thread. */
static void virtio_scsi_tmf_scan_bh(void *opaque)
{
    VirtioScsiTmfWait *w = opaque;
    VirtioScsiTmf *tmf = w->tmf;
    unsigned n = virtio_scsi_queue_tmf_scan(tmf->vs, w->q, w);

    if (w->cancel == VIRTIO_SCSI_S_OK) {
        if (n) {
            atomic_store_explicit(&tmf->found, true, memory_order_relaxed);
        }
        virtio_scsi_tmf_share_done(tmf);
    } else if (n == 0) {
        virtio_scsi_tmf_share_done(tmf);
    }
    /* else: the last matching command's completion reports the share. */
}

/*
 * Hand tmf to every request queue: the commands of LUN lun (-1: all), with
 * tag tag if match_tag, are counted (cancel VIRTIO_SCSI_S_OK) or
 * cancelled with response cancel.  Control thread.
 */
static void virtio_scsi_tmf_dispatch(VirtioScsiTmf *tmf, int lun,
                                     bool match_tag, uint64_t tag,
                                     uint8_t cancel)
{
    VirtioScsi *vs = tmf->vs;

    atomic_init(&tmf->pending, vs->num_queues + 1);
    atomic_init(&tmf->found, false);
    for (unsigned i = 0; i < vs->num_queues; i++) {
        VirtioScsiTmfWait *w = &tmf->waits[i];
        AioContext *ctx;

        memset(w, 0, sizeof(*w));
        w->tmf = tmf;
        w->q = &vs->queues[i];
        w->lun = lun;
        w->match_tag = match_tag;
        w->tag = tag;
        w->cancel = cancel;
        /* Acquire: pairs with the release in the queue's queue_started. */
        ctx = atomic_load_explicit(&w->q->ctx, memory_order_acquire);
        if (!ctx) {
            virtio_scsi_tmf_share_done(tmf);     /* never ran: no commands */
        } else if (aio_context_in_home_thread(ctx)) {
            virtio_scsi_tmf_scan_bh(w);
        } else {
            aio_bh_schedule_oneshot(ctx, virtio_scsi_tmf_scan_bh, w);
        }
    }
    virtio_scsi_tmf_share_done(tmf);
}

/* ------------------------------------------------------------------------ */
/* Control queue: requests                                                   */

static void virtio_scsi_handle_tmf(VirtioScsi *vs, VirtioScsiTmf *tmf,
                                   uint64_t out_bytes)
{
    VirtioScsiCtrlTmfReq req;
    VirtioScsiAddr addr;
    unsigned lun = 0;
    uint64_t tag;
    int slot = -1;

    switch (virtio_scsi_ctrl_fit(tmf, out_bytes, sizeof(req),
                                 sizeof(VirtioScsiCtrlTmfResp),
                                 "task management")) {
    case VIRTIO_SCSI_CTRL_GONE:
        return;
    case VIRTIO_SCSI_CTRL_SHORT:
        virtio_scsi_tmf_answer(tmf, VIRTIO_SCSI_S_FAILURE);
        return;
    case VIRTIO_SCSI_CTRL_FITS:
        break;
    }
    iov_to_buf(tmf->elem.out_sg, tmf->elem.out_num, 0, &req, sizeof(req));
    tmf->subtype = GUINT32_FROM_LE(req.subtype);
    tag = GUINT64_FROM_LE(req.tag);
    addr = virtio_scsi_decode_lun(req.lun, &lun);
    if (addr == VIRTIO_SCSI_ADDR_BAD_TARGET) {
        virtio_scsi_tmf_answer(tmf, VIRTIO_SCSI_S_BAD_TARGET);
        return;
    }
    /* The control queue's own LUN table: LUN add/remove update it in this
     * thread (virtio-scsi-luns.c). */
    if (addr == VIRTIO_SCSI_ADDR_LUN) {
        slot = virtio_scsi_lun_find(vs->ctrl.luns, vs->ctrl.nluns, lun);
    }
    tmf->lun = slot < 0 ? -1 : (int)lun;
    SPINDLE_TRACE3(virtio_scsi_tmf, tmf->subtype, lun, tag);

    switch (tmf->subtype) {
    case VIRTIO_SCSI_T_TMF_I_T_NEXUS_RESET:
        /* The whole target, whatever LUN the request names. */
        tmf->lun = -1;
        virtio_scsi_tmf_dispatch(tmf, -1, false, 0, VIRTIO_SCSI_S_RESET);
        return;
    case VIRTIO_SCSI_T_TMF_CLEAR_ACA:
        /* No ACA is ever established (NACA is not supported). */
        virtio_scsi_tmf_answer(tmf, VIRTIO_SCSI_S_FUNCTION_REJECTED);
        return;
    case VIRTIO_SCSI_T_TMF_ABORT_TASK:
    case VIRTIO_SCSI_T_TMF_ABORT_TASK_SET:
    case VIRTIO_SCSI_T_TMF_CLEAR_TASK_SET:
    case VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET:
    case VIRTIO_SCSI_T_TMF_QUERY_TASK:
    case VIRTIO_SCSI_T_TMF_QUERY_TASK_SET:
        break;
    default:
        virtio_scsi_tmf_answer(tmf, VIRTIO_SCSI_S_FUNCTION_REJECTED);
        return;
    }
    if (slot < 0) {
        virtio_scsi_tmf_answer(tmf, VIRTIO_SCSI_S_INCORRECT_LUN);
        return;
    }
    switch (tmf->subtype) {
    case VIRTIO_SCSI_T_TMF_ABORT_TASK:
        virtio_scsi_tmf_dispatch(tmf, (int)lun, true, tag,
                                 VIRTIO_SCSI_S_ABORTED);
        break;
    case VIRTIO_SCSI_T_TMF_ABORT_TASK_SET:
    case VIRTIO_SCSI_T_TMF_CLEAR_TASK_SET:
        virtio_scsi_tmf_dispatch(tmf, (int)lun, false, 0,
                                 VIRTIO_SCSI_S_ABORTED);
        break;
    case VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET:
        virtio_scsi_tmf_dispatch(tmf, (int)lun, false, 0,
                                 VIRTIO_SCSI_S_RESET);
        break;
    case VIRTIO_SCSI_T_TMF_QUERY_TASK:
        virtio_scsi_tmf_dispatch(tmf, (int)lun, true, tag, VIRTIO_SCSI_S_OK);
        break;
    case VIRTIO_SCSI_T_TMF_QUERY_TASK_SET:
        virtio_scsi_tmf_dispatch(tmf, (int)lun, false, 0, VIRTIO_SCSI_S_OK);
        break;
    }
}

/* AN_QUERY / AN_SUBSCRIBE: no asynchronous notification is supported. */
static void virtio_scsi_handle_an(VirtioScsi *vs, VirtioScsiTmf *tmf,
                                  uint64_t out_bytes)
{
    VirtioScsiCtrlAnReq req;
    VirtioScsiCtrlAnResp resp = { 0 };
    VirtioScsiCtrlFit fit;
    unsigned lun;
    size_t n;

    fit = virtio_scsi_ctrl_fit(tmf, out_bytes, sizeof(req), sizeof(resp),
                               "asynchronous notification");
    if (fit == VIRTIO_SCSI_CTRL_GONE) {
        return;
    }
    if (fit == VIRTIO_SCSI_CTRL_SHORT) {
        resp.response = VIRTIO_SCSI_S_FAILURE;
    } else {
        iov_to_buf(tmf->elem.out_sg, tmf->elem.out_num, 0, &req,
                   sizeof(req));
        resp.response = virtio_scsi_decode_lun(req.lun, &lun) ==
                        VIRTIO_SCSI_ADDR_BAD_TARGET ? VIRTIO_SCSI_S_BAD_TARGET
                                                    : VIRTIO_SCSI_S_OK;
    }
    resp.event_actual = GUINT32_TO_LE(0);
    n = iov_from_buf(tmf->elem.in_sg, tmf->elem.in_num, 0, &resp,
                     sizeof(resp));
    virtio_scsi_ctrl_push(tmf, (uint32_t)n);
}

static void virtio_scsi_ctrl_request(VirtioScsi *vs, VirtioScsiTmf *tmf)
{
    uint64_t out_bytes = iov_size(tmf->elem.out_sg, tmf->elem.out_num);
    uint32_t type;

    if (out_bytes < sizeof(type)) {
        virtio_scsi_log_bad_request(vs, tmf->vq, "control request without "
                                    "a type");
        virtio_scsi_ctrl_push(tmf, 0);
        return;
    }
    iov_to_buf(tmf->elem.out_sg, tmf->elem.out_num, 0, &type, sizeof(type));
    switch (GUINT32_FROM_LE(type)) {
    case VIRTIO_SCSI_T_TMF:
        virtio_scsi_handle_tmf(vs, tmf, out_bytes);
        break;
    case VIRTIO_SCSI_T_AN_QUERY:
    case VIRTIO_SCSI_T_AN_SUBSCRIBE:
        virtio_scsi_handle_an(vs, tmf, out_bytes);
        break;
    default:
        /* The response's layout depends on the type: nothing fits. */
        virtio_scsi_log_bad_request(vs, tmf->vq, "unknown control request "
                                    "type");
        virtio_scsi_ctrl_push(tmf, 0);
        break;
    }
}

void virtio_scsi_handle_ctrl(VirtioScsi *vs, VirtQueue *vq)
{
    size_t size = offsetof(VirtioScsiTmf, waits) +
                  vs->num_queues * sizeof(VirtioScsiTmfWait);

    g_assert(aio_context_in_home_thread(virtqueue_get_aio_context(vq)));
    for (;;) {
        VirtioScsiTmf *tmf = g_malloc(size);
        int r = virtqueue_pop(vq, &tmf->elem);

        if (r <= 0) {
            /* Empty, or broken (the queue has logged why). */
            g_free(tmf);
            break;
        }
        tmf->vs = vs;
        tmf->vq = vq;
        tmf->ctx = virtqueue_get_aio_context(vq);
        tmf->subtype = UINT32_MAX;
        tmf->lun = -1;
        vs->ctrl.tmfs++;
        virtio_scsi_ctrl_request(vs, tmf);
    }
}

void virtio_scsi_ctrl_started(VirtioScsi *vs, VirtQueue *vq)
{
    AioContext *ctx = virtqueue_get_aio_context(vq);

    g_assert(aio_context_in_home_thread(ctx));
    g_assert(vs->ctrl.tmfs == 0);
    vs->ctrl.vq = vq;
    virtio_scsi_ctrl_luns_start(vs);
    /* Release: pairs with the acquire in virtio_scsi_ctrl_change(). */
    atomic_store_explicit(&vs->ctrl.ctx, ctx, memory_order_release);
}

void virtio_scsi_ctrl_drain(VirtioScsi *vs, VirtQueue *vq)
{
    AioContext *ctx = virtqueue_get_aio_context(vq);

    g_assert(aio_context_in_home_thread(ctx));
    /* TMFs wait for commands of the request queues, which keep running
     * (or drain) in their own threads. */
    while (vs->ctrl.tmfs > 0) {
        aio_poll(ctx, true);
    }
    virtio_scsi_ctrl_luns_stop(vs);
    vs->ctrl.vq = NULL;
}

/* ------------------------------------------------------------------------ */
/* Event queue                                                               */

/*
 * Fill the oldest held buffer with event and push it, or remember that an
 * event was missed.  Event thread.
 */
static void virtio_scsi_event_push(VirtioScsi *vs, uint32_t event,
                                   const uint8_t *lun, uint32_t reason)
{
    VirtioScsiEvents *ev = &vs->events;
    VirtioScsiEventBuf *buf = ev->held;
    VirtioScsiEvent e;

    if (!buf) {
        atomic_store_explicit(&ev->missed, true, memory_order_relaxed);
        SPINDLE_TRACE1(virtio_scsi_event_missed, event);
        return;
    }
    ev->held = buf->next;
    if (!ev->held) {
        ev->held_tail = &ev->held;
    }
    ev->nheld--;
    if (atomic_exchange_explicit(&ev->missed, false, memory_order_relaxed)) {
        event |= VIRTIO_SCSI_T_EVENTS_MISSED;
    }
    memset(&e, 0, sizeof(e));
    e.event = GUINT32_TO_LE(event);
    if (lun) {
        memcpy(e.lun, lun, sizeof(e.lun));
    }
    e.reason = GUINT32_TO_LE(reason);
    iov_from_buf(buf->elem.in_sg, buf->elem.in_num, 0, &e, sizeof(e));
    SPINDLE_TRACE2(virtio_scsi_event, event, reason);
    virtqueue_push(ev->vq, &buf->elem, sizeof(e));
    g_free(buf);
}

void virtio_scsi_handle_event(VirtioScsi *vs, VirtQueue *vq)
{
    VirtioScsiEvents *ev = &vs->events;

    g_assert(aio_context_in_home_thread(virtqueue_get_aio_context(vq)));
    for (;;) {
        VirtioScsiEventBuf *buf = g_new(VirtioScsiEventBuf, 1);
        int r = virtqueue_pop(vq, &buf->elem);

        if (r <= 0) {
            g_free(buf);
            break;
        }
        if (buf->elem.in_bytes < sizeof(VirtioScsiEvent)) {
            /*
             * 5.6.6.3.1: event buffers MUST be at least the size of
             * struct virtio_scsi_event (SHOULD be event_info_size, the
             * same here).  Every used buffer of this queue is an event, so
             * handing it back, even empty, would be read as one: break
             * the queue instead (the error eventfd tells the front-end).
             */
            virtqueue_fail_element(vq, &buf->elem, "virtio-scsi event "
                                   "buffer at head %u has %" PRIu32
                                   " device-writable bytes, less than an "
                                   "event (%zu)", buf->elem.head,
                                   buf->elem.in_bytes,
                                   sizeof(VirtioScsiEvent));
            g_free(buf);
            break;
        }
        buf->next = NULL;
        *ev->held_tail = buf;
        ev->held_tail = &buf->next;
        ev->nheld++;
    }
    if (ev->held && atomic_load_explicit(&ev->missed, memory_order_relaxed)) {
        /* Tell the driver now rather than at the next real event. */
        virtio_scsi_event_push(vs, VIRTIO_SCSI_T_NO_EVENT, NULL, 0);
    }
}

void virtio_scsi_event_started(VirtioScsi *vs, VirtQueue *vq)
{
    AioContext *ctx = virtqueue_get_aio_context(vq);

    g_assert(aio_context_in_home_thread(ctx));
    g_assert(vs->events.held == NULL);
    vs->events.vq = vq;
    /* Release: pairs with the acquire in virtio_scsi_event_send(). */
    atomic_store_explicit(&vs->events.ctx, ctx, memory_order_release);
}

void virtio_scsi_event_drain(VirtioScsi *vs, VirtQueue *vq)
{
    VirtioScsiEvents *ev = &vs->events;

    g_assert(aio_context_in_home_thread(virtqueue_get_aio_context(vq)));
    while (ev->held) {
        VirtioScsiEventBuf *buf = ev->held;

        ev->held = buf->next;
        virtqueue_push(vq, &buf->elem, 0);
        g_free(buf);
    }
    ev->held_tail = &ev->held;
    ev->nheld = 0;
    ev->vq = NULL;
}

typedef struct VirtioScsiEventOp {
    VirtioScsi *vs;
    uint32_t event;
    unsigned lun;
    uint32_t reason;
} VirtioScsiEventOp;

static void virtio_scsi_event_send_bh(void *opaque)
{
    VirtioScsiEventOp *op = opaque;
    uint8_t lun[VIRTIO_SCSI_LUN_BYTES];

    g_assert(aio_context_in_home_thread(atomic_load_explicit(
                 &op->vs->events.ctx, memory_order_relaxed)));
    virtio_scsi_encode_lun(op->lun, lun);
    virtio_scsi_event_push(op->vs, op->event, lun, op->reason);
}

void virtio_scsi_event_send(VirtioScsi *vs, uint32_t event, unsigned lun,
                            uint32_t reason)
{
    VirtioScsiEventOp op = {
        .vs = vs, .event = event, .lun = lun, .reason = reason,
    };
    /* Acquire: pairs with the release in virtio_scsi_event_started(). */
    AioContext *ctx = atomic_load_explicit(&vs->events.ctx,
                                           memory_order_acquire);

    assert_main_thread();
    if (!ctx) {
        /* The event queue never ran: no buffer to put it in. */
        atomic_store_explicit(&vs->events.missed, true, memory_order_relaxed);
        return;
    }
    aio_run_sync(ctx, virtio_scsi_event_send_bh, &op);
}

void virtio_scsi_capacity_changed(VirtioScsi *vs, unsigned lun)
{
    int slot = virtio_scsi_lun_find(vs->luns, vs->nluns, lun);

    assert_main_thread();
    if (slot < 0) {
        return;
    }
    scsi_disk_capacity_changed(vs->luns[slot].disk);
    if (vs->features & (UINT64_C(1) << VIRTIO_SCSI_F_CHANGE)) {
        virtio_scsi_event_send(vs, VIRTIO_SCSI_T_PARAM_CHANGE, lun,
                               VIRTIO_SCSI_REASON_CAPACITY_CHANGED);
    }
}

/*
 * virtio-scsi internals shared by hw/virtio/virtio-scsi.c (device, request
 * queues), hw/virtio/virtio-scsi-ctrl.c (control and event queues) and
 * hw/virtio/virtio-scsi-luns.c (LUN tables, hot-plug).  Private to those
 * files; the theory of operation is at the top of virtio-scsi.c (and of
 * the other two for their parts).
 */
#ifndef SPINDLE_HW_VIRTIO_VIRTIO_SCSI_INT_H
#define SPINDLE_HW_VIRTIO_VIRTIO_SCSI_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "block/block.h"
#include "hw/scsi/scsi-disk.h"
#include "virtio-req-pool.h"
#include "hw/virtio/virtio-scsi.h"
#include "hw/virtio/virtio-scsi-wire.h"
#include "hw/virtio/virtqueue.h"
#include "hw/virtio/virtio-io-error.h"
#include "util/aio.h"

#define VIRTIO_SCSI_MAX_QUEUES      64
#define VIRTIO_SCSI_CACHELINE       64

/* Largest cdb_size and sense_size a driver may set (set_config). */
#define VIRTIO_SCSI_CDB_MAX         256
#define VIRTIO_SCSI_SENSE_MAX       256
/* Smallest cdb_size: the shortest CDB (group 0) is 6 bytes. */
#define VIRTIO_SCSI_CDB_MIN         6

#define VIRTIO_SCSI_REQ_HDR_SIZE    sizeof(VirtioScsiCmdReqHdr)
#define VIRTIO_SCSI_RESP_HDR_SIZE   sizeof(VirtioScsiCmdRespHdr)

typedef struct VirtioScsiReq VirtioScsiReq;
typedef struct VirtioScsiTmf VirtioScsiTmf;
typedef struct VirtioScsiTmfWait VirtioScsiTmfWait;
typedef struct VirtioScsiEventBuf VirtioScsiEventBuf;

/*
 * A LUN in one of the LUN tables, each sorted by number: the device-wide
 * one (VirtioScsi.luns, main thread, which owns the disks and the
 * accounting) and the copies each started request queue and the control
 * queue keep for their own thread (virtio-scsi-luns.c).  The disk and
 * acct are shared; bq is a request queue's own BlockQueue for it (NULL in
 * the other tables), counting into acct's slot of that virtqueue.
 */
typedef struct VirtioScsiLun {
    unsigned lun;
    ScsiDisk *disk;
    BlockAcct *acct;             /* one slot per virtqueue */
    BlockQueue *bq;
} VirtioScsiLun;

/*
 * How a request's 8-byte LUN field decodes (5.6.6.1): a LUN number of
 * target 0 (which may or may not be configured), the REPORT LUNS
 * well-known LUN, a LUN of target 0 in a format we never give out, or
 * another target.
 */
typedef enum VirtioScsiAddr {
    VIRTIO_SCSI_ADDR_LUN,
    VIRTIO_SCSI_ADDR_WLUN_REPORT_LUNS,
    VIRTIO_SCSI_ADDR_NO_LUN,
    VIRTIO_SCSI_ADDR_BAD_TARGET,
} VirtioScsiAddr;

/* Per request queue; its home thread only, except `ctx` (see below). */
typedef struct VirtioScsiQueue {
    _Alignas(VIRTIO_SCSI_CACHELINE) unsigned in_flight;  /* popped, not
                                                            * pushed */
    VirtioReqPool pool;          /* requests kept for reuse */
    VirtioScsiReq *cmds;         /* commands at a LUN, doubly linked */
    uint64_t next_seq;           /* numbers commands, for TMF waits */
    VirtioScsiTmfWait *waits;    /* TMFs waiting for commands of ours */
    /* This queue's LUN table, with its BlockQueues: made when the queue
     * starts, changed by LUN add/remove (virtio-scsi-luns.c), freed when
     * it is drained. */
    VirtioScsiLun *luns;
    unsigned nluns;
    VirtQueue *vq;               /* while started (and draining) */
    /* Error policies (virtio-scsi.c): commands held by a LUN's stop;
     * while draining (or removing a LUN) errors are reported. */
    VirtioStop stop;
    /*
     * The home context, set when the queue first starts (a VuServer puts
     * a queue index in the same context every time).  Written once in
     * the home thread with release, read with acquire by the control
     * queue's thread to send it TMF work and by the main thread to change
     * its LUN table (virtio-scsi-luns.c).
     */
    _Atomic(AioContext *) ctx;
} VirtioScsiQueue;

/* The control queue's state: its home thread only.  (Each TMF keeps the
 * queue and context it came from.) */
typedef struct VirtioScsiCtrl {
    /* Requests popped and not answered yet. */
    _Alignas(VIRTIO_SCSI_CACHELINE) unsigned tmfs;
    VirtQueue *vq;               /* while started (and draining) */
    /* The control queue's LUN table (no BlockQueues), for TMF lookups and
     * resets: made when it starts, freed when it is drained. */
    VirtioScsiLun *luns;
    unsigned nluns;
    /* Set when the queue first starts, like VirtioScsiQueue.ctx (release
     * there, acquire by the main thread for LUN changes). */
    _Atomic(AioContext *) ctx;
} VirtioScsiCtrl;

/* The event queue's state: its home thread only (but `ctx`, `missed`). */
typedef struct VirtioScsiEvents {
    _Alignas(VIRTIO_SCSI_CACHELINE) VirtQueue *vq;
    VirtioScsiEventBuf *held;    /* the driver's buffers, FIFO */
    VirtioScsiEventBuf **held_tail;
    unsigned nheld;
    _Atomic(AioContext *) ctx;
    /* An event found no buffer: flag the next one EVENTS_MISSED.  Set by
     * the event thread (or the main thread before the queue ever ran),
     * taken with an exchange by the event thread. */
    _Atomic bool missed;
} VirtioScsiEvents;

struct VirtioScsi {
    unsigned num_queues;         /* request queues */
    unsigned queue_size;
    /* The device-wide LUN table (owns the disks): main thread, also read
     * by a queue's queue_started, which runs while the main thread waits
     * for it (the VuServer starts queues with aio_run_sync()). */
    VirtioScsiLun *luns;         /* sorted by lun */
    unsigned nluns;

    /* Main thread, written while the queues are stopped. */
    uint64_t features;
    /* Driver-writable config fields: written by the main thread
     * (set_config), read once per request by the queues: relaxed. */
    _Atomic uint32_t sense_size;
    _Atomic uint32_t cdb_size;
    /* Set once a malformed request has been logged (any queue thread). */
    atomic_flag logged_bad_request;

    /* Where a stop is told (fixed at creation; export_id is a copy). */
    char *export_id;
    AioContext *main_ctx;
    VirtioIoErrorFn *io_error;

    VirtioScsiQueue *queues;     /* num_queues, cache-line aligned */
    VirtioScsiCtrl ctrl;
    VirtioScsiEvents events;
};

/* ------------------------------------------------------------------------ */
/* virtio-scsi.c, for the control and event queues                           */

/* Log the first malformed request of the device (later ones are not). */
void virtio_scsi_log_bad_request(VirtioScsi *vs, VirtQueue *vq,
                                 const char *why);

/* Decode a LUN field; *lun is set for VIRTIO_SCSI_ADDR_LUN. */
VirtioScsiAddr virtio_scsi_decode_lun(const uint8_t *lun, unsigned *lun_out);

/* Encode LUN number lun of target 0 as REPORT LUNS gives it out. */
void virtio_scsi_encode_lun(unsigned lun, uint8_t *out);

/* ------------------------------------------------------------------------ */
/* virtio-scsi-luns.c                                                        */

/* The index of LUN lun in luns[0..n) (sorted), or -1.  Any table, in the
 * thread that owns it. */
int virtio_scsi_lun_find(const VirtioScsiLun *luns, unsigned n,
                         unsigned lun);

/* Request queue q starts in ctx: its LUN table from vs->luns, with a
 * BlockQueue per LUN in ctx.  Home thread of q (the main thread waits). */
void virtio_scsi_queue_luns_start(VirtioScsi *vs, VirtioScsiQueue *q,
                                  AioContext *ctx);
/* q is drained: free its LUN table and BlockQueues.  Home thread of q. */
void virtio_scsi_queue_luns_stop(VirtioScsiQueue *q);

/* The control queue starts / is drained: its LUN table from vs->luns, or
 * freed.  The control queue's home thread. */
void virtio_scsi_ctrl_luns_start(VirtioScsi *vs);
void virtio_scsi_ctrl_luns_stop(VirtioScsi *vs);


/*
 * The part of a TMF that one request queue handles (one per request
 * queue, inside the TMF).  Made by the control queue's thread, then used
 * only by q's home thread until virtio_scsi_tmf_wait_done().
 */
struct VirtioScsiTmfWait {
    VirtioScsiTmfWait *next;     /* VirtioScsiQueue.waits */
    VirtioScsiTmf *tmf;
    VirtioScsiQueue *q;
    int lun;                     /* the commands of this LUN; -1: all */
    bool match_tag;              /* ... with this tag only */
    uint64_t tag;
    uint8_t cancel;              /* their response: VIRTIO_SCSI_S_ABORTED or
                                  * _RESET; VIRTIO_SCSI_S_OK: count them */
    uint64_t seq_limit;          /* commands numbered below it are ours */
    unsigned remaining;          /* ours still running */
};

/*
 * Start what the driver has queued on q (so that commands it sent before
 * the TMF are seen), then find q's commands that match w: when w cancels,
 * give them w's response and, if there are any, put w on q's list to be
 * completed (virtio_scsi_tmf_wait_done()) when the last of them is.
 * Returns how many matched.  Home thread of q.
 */
unsigned virtio_scsi_queue_tmf_scan(VirtioScsi *vs, VirtioScsiQueue *q,
                                    VirtioScsiTmfWait *w);

/*
 * VirtioStop.retry: submit again the commands an error policy holds on
 * queue (a VirtioScsiQueue), in the order they were numbered, and (with
 * restart) let it take new ones unless one of them stopped it again at
 * once.  Returns how many.  Home thread of the queue.
 */
unsigned virtio_scsi_queue_retry_held(void *queue, bool restart);

/* Whether a command of q at LUN lun is running.  Home thread of q. */
bool virtio_scsi_queue_has_cmds(const VirtioScsiQueue *q, unsigned lun);

/* ------------------------------------------------------------------------ */
/* virtio-scsi-ctrl.c                                                        */

/* The commands w waited for are all done and w is off q's list: report
 * to the TMF.  Home thread of w->q. */
void virtio_scsi_tmf_wait_done(VirtioScsiTmfWait *w);

/* The control queue's handler, queue_started and queue_drain (this one
 * returns when every TMF is answered).  The queue's home thread. */
void virtio_scsi_handle_ctrl(VirtioScsi *vs, VirtQueue *vq);
void virtio_scsi_ctrl_started(VirtioScsi *vs, VirtQueue *vq);
void virtio_scsi_ctrl_drain(VirtioScsi *vs, VirtQueue *vq);

/* The event queue's handler (holds the buffers), queue_started and
 * queue_drain (hands them back with len 0).  The queue's home thread. */
void virtio_scsi_handle_event(VirtioScsi *vs, VirtQueue *vq);
void virtio_scsi_event_started(VirtioScsi *vs, VirtQueue *vq);
void virtio_scsi_event_drain(VirtioScsi *vs, VirtQueue *vq);

/*
 * Deliver an event (VIRTIO_SCSI_T_*, the LUN it concerns, reason) in the
 * event queue's thread, waiting for it (aio_run_sync()); when the event
 * queue never ran, only remember that an event was missed.  Main thread.
 */
void virtio_scsi_event_send(VirtioScsi *vs, uint32_t event, unsigned lun,
                            uint32_t reason);

#endif

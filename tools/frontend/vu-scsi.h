/*
 * vu-scsi: virtio-scsi commands, control requests and event buffers on
 * vu-frontend queues (vu-scsi.c).
 */
#ifndef SPINDLE_TOOLS_VU_SCSI_H
#define SPINDLE_TOOLS_VU_SCSI_H

#include "vu-types.h"

/* ------------------------------------------------------------------------ */
/* virtio-scsi requests (vu-scsi.c)                                          */

/*
 * Queues of a VUF_DEVICE_SCSI front-end (virtio 5.6.2): 0 is the control
 * queue (task management, asynchronous notification), 1 the event queue,
 * 2 + i the request queue i.
 */
#define VUFSCSI_VQ_CONTROL      VIRTIO_SCSI_VQ_CONTROL
#define VUFSCSI_VQ_EVENT        VIRTIO_SCSI_VQ_EVENT
#define VUFSCSI_VQ_REQUEST(i)   (VIRTIO_SCSI_VQ_REQUEST0 + (i))

/* Which way a command moves data. */
typedef enum VufScsiDir {
    VUFSCSI_DIR_NONE,           /* no data */
    VUFSCSI_DIR_TO_DEV,         /* data-out: WRITE, UNMAP's list, ... */
    VUFSCSI_DIR_FROM_DEV,       /* data-in: READ, INQUIRY, ... */
} VufScsiDir;

/* What vufscsi_prep() puts in fields the device must overwrite. */
#define VUFSCSI_RESPONSE_NONE   0xff
#define VUFSCSI_STATUS_NONE     0xff

/*
 * A command whose request (header + CDB), response (header + sense) and
 * data buffer live in guest memory.  The chain is laid out as a guest
 * driver does (5.6.6.1): request (readable), data-out (readable),
 * response (writable), data-in (writable).  The CDB and sense areas have
 * the sizes the device's config gave when the request was allocated (32
 * and 96 by default).
 */
typedef struct VufScsiReq {
    VirtioScsiCmdReqHdr *hdr;   /* guest memory; the CDB follows */
    uint8_t *cdb;               /* cdb_size bytes right after hdr */
    VirtioScsiCmdRespHdr *resp; /* guest memory; the sense follows */
    uint8_t *sense;             /* sense_size bytes right after resp */
    uint8_t *data;              /* guest memory, data_cap bytes */
    uint64_t hdr_gpa, resp_gpa, data_gpa;
    size_t data_cap;
    unsigned cdb_size, sense_size;
    /* Set by vufscsi_prep(): */
    size_t data_len;            /* bytes of data in this request */
    VufScsiDir dir;
    /* Set on completion (vufscsi_complete()): */
    uint32_t used_len;          /* bytes the device said it wrote */
    /* Set by the caller: */
    unsigned data_segs;         /* split data into this many descriptors
                                 * (>= 1; default 1) */
    void *opaque;               /* anything */
} VufScsiReq;

/*
 * Allocate a command with data_cap bytes of data buffer (4096-aligned) in
 * fe's guest memory, its CDB and sense areas sized after fe's virtio-scsi
 * config (defaults when there is none).  NULL (errp set) when the memory
 * is exhausted.  Thread-safe.  Free with vufscsi_req_free().
 */
VufScsiReq *vufscsi_req_new(VuFrontend *fe, size_t data_cap, Error **errp);
void vufscsi_req_free(VuFrontend *fe, VufScsiReq *req);

/*
 * Write the 8-byte virtio-scsi LUN address of target 0, LUN lun
 * (0..16383) as Linux does: 1, 0, 0x40 | lun >> 8, lun & 0xff, 0, 0, 0, 0.
 */
void vufscsi_lun_bytes(uint8_t out[VIRTIO_SCSI_LUN_BYTES], unsigned lun);

/*
 * Fill the command: LUN lun of target 0, tag, task attribute SIMPLE, the
 * CDB (cdb_len <= cdb_size bytes, the rest zeroed), data_len bytes of data
 * in direction dir (the data itself is the caller's, in req->data).  The
 * response is set to VUFSCSI_RESPONSE_NONE / VUFSCSI_STATUS_NONE and the
 * lengths to all ones, so that a device that does not write them shows.
 * Returns 0, or -EINVAL if cdb_len or data_len do not fit.
 */
int vufscsi_prep(VufScsiReq *req, unsigned lun, uint64_t tag,
                 const uint8_t *cdb, unsigned cdb_len, size_t data_len,
                 VufScsiDir dir);

/*
 * Add the command's chain to q (a request queue) with vufq_add() flags;
 * the token is req.  Data is cut into req->data_segs descriptors; more
 * data descriptors than the config's seg_max is -E2BIG.  Does not kick.
 * Returns 0 or vufq_add()'s -errno.
 */
int vufscsi_submit(VufQueue *q, VufScsiReq *req, unsigned flags);

/* Harvest one completed command: 1 and *req (used_len set), 0 if none,
 * -EIO as vufq_get_used(). */
int vufscsi_complete(VufQueue *q, VufScsiReq **req);

/*
 * Submit req, kick, wait for it (timeout_ns < 0: forever).  Nothing else
 * may be in flight on q.  Returns the response (VIRTIO_SCSI_S_*, or
 * VUFSCSI_RESPONSE_NONE if the device did not write it); the SAM status
 * is req->resp->status.  Or -errno as vufscsi_submit() / vufq_wait().
 */
int vufscsi_do(VufQueue *q, VufScsiReq *req, unsigned flags,
               int64_t timeout_ns);

/*
 * How many bytes of data-in the device put in req->data after it
 * completed: data_len less the residual it reported, 0 if the residual is
 * larger (a device that wrote none, or a bogus one).
 */
size_t vufscsi_data_in(const VufScsiReq *req);

/*
 * The sense key, ASC and ASCQ of the sense data in req (fixed format 0x70
 * and 0x71, or descriptor format 0x72 and 0x73).  False if there is no
 * sense data (sense_len 0) or it is not in either format.
 */
bool vufscsi_sense(const VufScsiReq *req, uint8_t *key, uint8_t *asc,
                   uint8_t *ascq);

/* Names, for reports ("OK", "BAD_TARGET"..., "GOOD", "CHECK_CONDITION"...,
 * "ILLEGAL_REQUEST"...); "none" for the NONE values, else "unknown".
 * Any thread. */
const char *vufscsi_response_name(int response);
const char *vufscsi_status_name(int status);
const char *vufscsi_sense_key_name(int key);

/*
 * A control queue request (5.6.6.2): task management or asynchronous
 * notification query / subscribe, and its response, in guest memory.
 */
typedef struct VufScsiCtrl {
    union {
        VirtioScsiCtrlTmfReq *tmf;
        VirtioScsiCtrlAnReq *an;
        void *raw;
    } req;
    union {
        VirtioScsiCtrlTmfResp *tmf;
        VirtioScsiCtrlAnResp *an;
        void *raw;
    } resp;
    uint64_t req_gpa, resp_gpa;
    size_t req_len, resp_len;   /* set by the prep functions */
    uint32_t used_len;          /* set on completion */
    void *opaque;
} VufScsiCtrl;

/* Allocate / free a control request in fe's guest memory (thread-safe). */
VufScsiCtrl *vufscsi_ctrl_new(VuFrontend *fe, Error **errp);
void vufscsi_ctrl_free(VuFrontend *fe, VufScsiCtrl *ctrl);

/* Task management function subtype (VIRTIO_SCSI_T_TMF_*) on LUN lun, for
 * the task tag (ABORT TASK, QUERY TASK).  The response byte is set to
 * VUFSCSI_RESPONSE_NONE. */
void vufscsi_prep_tmf(VufScsiCtrl *ctrl, uint32_t subtype, unsigned lun,
                      uint64_t tag);
/* VIRTIO_SCSI_T_AN_QUERY or _SUBSCRIBE for the event classes in mask. */
void vufscsi_prep_an(VufScsiCtrl *ctrl, uint32_t type, unsigned lun,
                     uint32_t event_mask);

/*
 * Submit on q (the control queue), kick, wait.  Nothing else may be in
 * flight on q.  Returns the response byte (VIRTIO_SCSI_S_*, or
 * VUFSCSI_RESPONSE_NONE), or -errno.
 */
int vufscsi_ctrl_do(VufQueue *q, VufScsiCtrl *ctrl, unsigned flags,
                    int64_t timeout_ns);

/* Name of a TMF subtype ("abort-task", "logical-unit-reset", ...) and the
 * reverse (-1 if unknown).  Any thread. */
const char *vufscsi_tmf_name(uint32_t subtype);
int vufscsi_tmf_by_name(const char *name);

/*
 * Event buffers (5.6.6.3): the driver keeps device-writable buffers of
 * event_info_size bytes in the event queue; the device fills one per event.
 */
typedef struct VufScsiEventBuf {
    VirtioScsiEvent *ev;        /* guest memory */
    uint64_t gpa;
    size_t len;
    uint32_t used_len;          /* set on completion */
} VufScsiEventBuf;

VufScsiEventBuf *vufscsi_event_new(VuFrontend *fe, Error **errp);
void vufscsi_event_free(VuFrontend *fe, VufScsiEventBuf *buf);
/* Put buf in q (the event queue) and kick if the device wants it.
 * 0 or -errno. */
int vufscsi_event_post(VufQueue *q, VufScsiEventBuf *buf, unsigned flags);
/* Harvest one filled event buffer without waiting: 1 and *buf, 0 if none,
 * -EIO. */
int vufscsi_event_complete(VufQueue *q, VufScsiEventBuf **buf);

#endif

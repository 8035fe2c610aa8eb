/*
 * vu-scsi: virtio-scsi commands, control requests and event buffers on top
 * of the vu-frontend virtqueue driver.
 *
 * Theory of operation
 * -------------------
 * A VufScsiReq owns two pieces of guest memory: a small block holding the
 * request header with the CDB right behind it (19 + cdb_size bytes) and,
 * 16-aligned after it, the response header with the sense area behind it
 * (12 + sense_size bytes); and a 4096-aligned data buffer.  cdb_size and
 * sense_size come from the device's config at allocation (32 and 96 when
 * there is none), since the device cuts the chain at those sizes.
 * vufscsi_prep() fills the header and CDB and poisons the response
 * (response and status 0xff, lengths all ones), values no device leaves
 * after a completion, so that one that does not write them shows.
 *
 * vufscsi_submit() lays out the chain as a guest driver does (virtio 1.x,
 * 5.6.6.1): request + CDB (device-readable), data-out (readable), response
 * + sense (writable), data-in (writable).  The data is cut into
 * req->data_segs pieces (whole 512-byte units where possible); more data
 * descriptors than seg_max is refused with -E2BIG, as a driver would never
 * send them.
 *
 * Control requests (task management, asynchronous notification) are one
 * 64-byte block: the request at 0, the response at 32.  Event buffers are
 * event_info_size (16) bytes, device-writable, posted on the event queue.
 *
 * Data path functions belong to the queue's thread; the _new/_free
 * functions use the thread-safe guest memory allocator.
 */

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include <glib.h>

#include "vu-frontend-int.h"

/* Most descriptors one command may use (stack array in vufscsi_submit). */
#define SCSI_SEGS_MAX       512
#define CTRL_BLOCK_BYTES    64
#define CTRL_RESP_OFFSET    32

G_STATIC_ASSERT(sizeof(VirtioScsiCtrlTmfReq) <= CTRL_RESP_OFFSET);
G_STATIC_ASSERT(sizeof(VirtioScsiCtrlAnReq) <= CTRL_RESP_OFFSET);
G_STATIC_ASSERT(sizeof(VirtioScsiCtrlAnResp) <=
                CTRL_BLOCK_BYTES - CTRL_RESP_OFFSET);

/* ------------------------------------------------------------------------ */
/* Commands                                                                  */

static void scsi_sizes(VuFrontend *fe, unsigned *cdb_size,
                       unsigned *sense_size)
{
    const VirtioScsiConfig *cfg = vuf_scsi_config(fe);

    *cdb_size = cfg ? cfg->cdb_size : VIRTIO_SCSI_CDB_DEFAULT_SIZE;
    *sense_size = cfg ? cfg->sense_size : VIRTIO_SCSI_SENSE_DEFAULT_SIZE;
}

VufScsiReq *vufscsi_req_new(VuFrontend *fe, size_t data_cap, Error **errp)
{
    unsigned cdb_size, sense_size;
    size_t resp_off, small_len;
    uint64_t small_gpa, data_gpa = 0;
    uint8_t *data, *small;
    VufScsiReq *req;

    scsi_sizes(fe, &cdb_size, &sense_size);
    resp_off = (sizeof(VirtioScsiCmdReqHdr) + cdb_size + 15) & ~(size_t)15;
    small_len = resp_off + sizeof(VirtioScsiCmdRespHdr) + sense_size;
    small = vuf_req_mem_alloc(fe, small_len, 64, &small_gpa, data_cap, &data,
                              &data_gpa, "a SCSI command", errp);
    if (!small) {
        return NULL;
    }
    req = g_new(VufScsiReq, 1);
    *req = (VufScsiReq) {
        .hdr = (VirtioScsiCmdReqHdr *)small, .hdr_gpa = small_gpa,
        .cdb = small + sizeof(VirtioScsiCmdReqHdr),
        .resp = (VirtioScsiCmdRespHdr *)(small + resp_off),
        .resp_gpa = small_gpa + resp_off,
        .sense = small + resp_off + sizeof(VirtioScsiCmdRespHdr),
        .data = data, .data_gpa = data_gpa, .data_cap = data_cap,
        .cdb_size = cdb_size, .sense_size = sense_size, .data_segs = 1,
    };
    return req;
}

void vufscsi_req_free(VuFrontend *fe, VufScsiReq *req)
{
    if (req) {
        vuf_req_mem_free(fe, req->hdr, req->data);
        g_free(req);
    }
}

void vufscsi_lun_bytes(uint8_t out[VIRTIO_SCSI_LUN_BYTES], unsigned lun)
{
    memset(out, 0, VIRTIO_SCSI_LUN_BYTES);
    out[0] = 1;
    out[1] = 0;                         /* target */
    out[2] = 0x40 | ((lun >> 8) & 0x3f);
    out[3] = lun & 0xff;
}

int vufscsi_prep(VufScsiReq *req, unsigned lun, uint64_t tag,
                 const uint8_t *cdb, unsigned cdb_len, size_t data_len,
                 VufScsiDir dir)
{
    if (cdb_len > req->cdb_size || data_len > req->data_cap ||
        (dir == VUFSCSI_DIR_NONE && data_len)) {
        return -EINVAL;
    }
    vufscsi_lun_bytes(req->hdr->lun, lun);
    req->hdr->tag = tag;
    req->hdr->task_attr = VIRTIO_SCSI_S_SIMPLE;
    req->hdr->prio = 0;
    req->hdr->crn = 0;
    memset(req->cdb, 0, req->cdb_size);
    memcpy(req->cdb, cdb, cdb_len);
    req->resp->sense_len = UINT32_MAX;
    req->resp->resid = UINT32_MAX;
    req->resp->status_qualifier = UINT16_MAX;
    req->resp->status = VUFSCSI_STATUS_NONE;
    req->resp->response = VUFSCSI_RESPONSE_NONE;
    req->data_len = data_len;
    req->dir = data_len ? dir : VUFSCSI_DIR_NONE;
    req->used_len = 0;
    return 0;
}

/* Append req's data to segs[*n], cut in data_segs pieces. */
static int add_data_segs(VufQueue *q, const VufScsiReq *req, VufSeg *segs,
                         unsigned *n)
{
    const VirtioScsiConfig *cfg = vuf_scsi_config(vufq_frontend(q));
    unsigned first = *n;
    int r;

    r = vufq_add_data_segs(segs, n, SCSI_SEGS_MAX, req->data_gpa,
                           req->data_len, req->data_segs, UINT32_MAX,
                           req->dir == VUFSCSI_DIR_FROM_DEV);
    if (r < 0) {
        return r;
    }
    if (cfg && cfg->seg_max && *n - first > cfg->seg_max) {
        return -E2BIG;
    }
    return 0;
}

int vufscsi_submit(VufQueue *q, VufScsiReq *req, unsigned flags)
{
    VufSeg segs[SCSI_SEGS_MAX];
    unsigned n = 0;
    int r = 0;

    segs[n++] = (VufSeg) { req->hdr_gpa,
                           sizeof(VirtioScsiCmdReqHdr) + req->cdb_size,
                           false };
    if (req->dir == VUFSCSI_DIR_TO_DEV) {
        r = add_data_segs(q, req, segs, &n);
    }
    /* add_data_segs() always leaves room for this one. */
    segs[n++] = (VufSeg) { req->resp_gpa,
                           sizeof(VirtioScsiCmdRespHdr) + req->sense_size,
                           true };
    if (r == 0 && req->dir == VUFSCSI_DIR_FROM_DEV) {
        r = add_data_segs(q, req, segs, &n);
    }
    if (r == 0) {
        r = vufq_add(q, segs, n, flags, req);
    }
    return r < 0 ? r : 0;
}

/*
 * vufq_get_used() for the tokens of this file, which keep the length the
 * device wrote in a uint32_t member at len_offset: the token (with that
 * length stored), or NULL with *r 0 or -EIO.
 */
static void *complete_with_len(VufQueue *q, size_t len_offset, int *r)
{
    void *token = NULL;
    uint32_t len = 0;

    *r = vufq_get_used(q, &token, &len);
    if (*r != 1) {
        return NULL;
    }
    memcpy((uint8_t *)token + len_offset, &len, sizeof(len));
    return token;
}

int vufscsi_complete(VufQueue *q, VufScsiReq **req)
{
    int r;
    VufScsiReq *done = complete_with_len(q, offsetof(VufScsiReq, used_len),
                                         &r);

    if (done) {
        *req = done;
    }
    return r;
}

int vufscsi_do(VufQueue *q, VufScsiReq *req, unsigned flags,
               int64_t timeout_ns)
{
    int r = vufq_do_one(q, vufscsi_submit(q, req, flags), req, timeout_ns,
                        &req->used_len);

    return r < 0 ? r : req->resp->response;
}

size_t vufscsi_data_in(const VufScsiReq *req)
{
    uint32_t resid = req->resp->resid;

    return resid <= req->data_len ? req->data_len - resid : 0;
}

bool vufscsi_sense(const VufScsiReq *req, uint8_t *key, uint8_t *asc,
                   uint8_t *ascq)
{
    uint32_t len = MIN(req->resp->sense_len, req->sense_size);
    const uint8_t *s = req->sense;

    if (req->resp->sense_len == UINT32_MAX || len < 4) {
        return false;
    }
    switch (s[0] & 0x7f) {
    case 0x70:
    case 0x71:
        if (len < 14) {
            return false;
        }
        *key = s[2] & 0x0f;
        *asc = s[12];
        *ascq = s[13];
        return true;
    case 0x72:
    case 0x73:
        *key = s[1] & 0x0f;
        *asc = s[2];
        *ascq = s[3];
        return true;
    default:
        return false;
    }
}

const char *vufscsi_response_name(int response)
{
    static const char *const names[] = {
        [VIRTIO_SCSI_S_OK] = "OK",
        [VIRTIO_SCSI_S_OVERRUN] = "OVERRUN",
        [VIRTIO_SCSI_S_ABORTED] = "ABORTED",
        [VIRTIO_SCSI_S_BAD_TARGET] = "BAD_TARGET",
        [VIRTIO_SCSI_S_RESET] = "RESET",
        [VIRTIO_SCSI_S_BUSY] = "BUSY",
        [VIRTIO_SCSI_S_TRANSPORT_FAILURE] = "TRANSPORT_FAILURE",
        [VIRTIO_SCSI_S_TARGET_FAILURE] = "TARGET_FAILURE",
        [VIRTIO_SCSI_S_NEXUS_FAILURE] = "NEXUS_FAILURE",
        [VIRTIO_SCSI_S_FAILURE] = "FAILURE",
        [VIRTIO_SCSI_S_FUNCTION_SUCCEEDED] = "FUNCTION_SUCCEEDED",
        [VIRTIO_SCSI_S_FUNCTION_REJECTED] = "FUNCTION_REJECTED",
        [VIRTIO_SCSI_S_INCORRECT_LUN] = "INCORRECT_LUN",
    };

    return response == VUFSCSI_RESPONSE_NONE ? "none"
           : vuf_table_name(names, G_N_ELEMENTS(names), response, "unknown");
}

const char *vufscsi_status_name(int status)
{
    /* SAM-5 status codes. */
    static const char *const names[] = {
        [0x00] = "GOOD",
        [0x02] = "CHECK_CONDITION",
        [0x04] = "CONDITION_MET",
        [0x08] = "BUSY",
        [0x18] = "RESERVATION_CONFLICT",
        [0x28] = "TASK_SET_FULL",
        [0x30] = "ACA_ACTIVE",
        [0x40] = "TASK_ABORTED",
    };

    return status == VUFSCSI_STATUS_NONE ? "none"
           : vuf_table_name(names, G_N_ELEMENTS(names), status, "unknown");
}

const char *vufscsi_sense_key_name(int key)
{
    static const char *const names[] = {
        "NO_SENSE", "RECOVERED_ERROR", "NOT_READY", "MEDIUM_ERROR",
        "HARDWARE_ERROR", "ILLEGAL_REQUEST", "UNIT_ATTENTION",
        "DATA_PROTECT", "BLANK_CHECK", "VENDOR_SPECIFIC", "COPY_ABORTED",
        "ABORTED_COMMAND", "RESERVED_C", "VOLUME_OVERFLOW", "MISCOMPARE",
        "COMPLETED",
    };

    return vuf_table_name(names, G_N_ELEMENTS(names), key, "unknown");
}

/* ------------------------------------------------------------------------ */
/* Control queue                                                             */

VufScsiCtrl *vufscsi_ctrl_new(VuFrontend *fe, Error **errp)
{
    VufScsiCtrl *ctrl = g_new0(VufScsiCtrl, 1);
    uint64_t gpa;
    uint8_t *block = vuf_mem_alloc(fe, CTRL_BLOCK_BYTES, CTRL_BLOCK_BYTES,
                                   &gpa);

    if (!block) {
        error_setg(errp, "guest memory exhausted: cannot allocate a control "
                   "request; raise the memory size");
        g_free(ctrl);
        return NULL;
    }
    memset(block, 0, CTRL_BLOCK_BYTES);
    ctrl->req.raw = block;
    ctrl->req_gpa = gpa;
    ctrl->resp.raw = block + CTRL_RESP_OFFSET;
    ctrl->resp_gpa = gpa + CTRL_RESP_OFFSET;
    return ctrl;
}

void vufscsi_ctrl_free(VuFrontend *fe, VufScsiCtrl *ctrl)
{
    if (ctrl) {
        vuf_req_mem_free(fe, ctrl->req.raw, NULL);
        g_free(ctrl);
    }
}

void vufscsi_prep_tmf(VufScsiCtrl *ctrl, uint32_t subtype, unsigned lun,
                      uint64_t tag)
{
    VirtioScsiCtrlTmfReq *r = ctrl->req.tmf;

    r->type = VIRTIO_SCSI_T_TMF;
    r->subtype = subtype;
    vufscsi_lun_bytes(r->lun, lun);
    r->tag = tag;
    ctrl->resp.tmf->response = VUFSCSI_RESPONSE_NONE;
    ctrl->req_len = sizeof(VirtioScsiCtrlTmfReq);
    ctrl->resp_len = sizeof(VirtioScsiCtrlTmfResp);
}

void vufscsi_prep_an(VufScsiCtrl *ctrl, uint32_t type, unsigned lun,
                     uint32_t event_mask)
{
    VirtioScsiCtrlAnReq *r = ctrl->req.an;

    r->type = type;
    vufscsi_lun_bytes(r->lun, lun);
    r->event_requested = event_mask;
    ctrl->resp.an->event_actual = UINT32_MAX;
    ctrl->resp.an->response = VUFSCSI_RESPONSE_NONE;
    ctrl->req_len = sizeof(VirtioScsiCtrlAnReq);
    ctrl->resp_len = sizeof(VirtioScsiCtrlAnResp);
}

int vufscsi_ctrl_do(VufQueue *q, VufScsiCtrl *ctrl, unsigned flags,
                    int64_t timeout_ns)
{
    VufSeg segs[2] = {
        { ctrl->req_gpa, ctrl->req_len, false },
        { ctrl->resp_gpa, ctrl->resp_len, true },
    };
    int r = vufq_do_one(q, vufq_add(q, segs, 2, flags, ctrl), ctrl,
                        timeout_ns, &ctrl->used_len);

    if (r < 0) {
        return r;
    }
    /* The TMF response is the byte alone; the AN one has it last.  Told
     * apart by what we prepared, not by memory the device can see. */
    return ctrl->resp_len == sizeof(VirtioScsiCtrlTmfResp)
           ? ctrl->resp.tmf->response : ctrl->resp.an->response;
}

static const char *const tmf_names[] = {
    [VIRTIO_SCSI_T_TMF_ABORT_TASK] = "abort-task",
    [VIRTIO_SCSI_T_TMF_ABORT_TASK_SET] = "abort-task-set",
    [VIRTIO_SCSI_T_TMF_CLEAR_ACA] = "clear-aca",
    [VIRTIO_SCSI_T_TMF_CLEAR_TASK_SET] = "clear-task-set",
    [VIRTIO_SCSI_T_TMF_I_T_NEXUS_RESET] = "i-t-nexus-reset",
    [VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET] = "logical-unit-reset",
    [VIRTIO_SCSI_T_TMF_QUERY_TASK] = "query-task",
    [VIRTIO_SCSI_T_TMF_QUERY_TASK_SET] = "query-task-set",
};

const char *vufscsi_tmf_name(uint32_t subtype)
{
    return vuf_table_name(tmf_names, G_N_ELEMENTS(tmf_names), subtype, NULL);
}

int vufscsi_tmf_by_name(const char *name)
{
    for (size_t i = 0; i < G_N_ELEMENTS(tmf_names); i++) {
        if (!g_ascii_strcasecmp(tmf_names[i], name)) {
            return i;
        }
    }
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Events                                                                    */

VufScsiEventBuf *vufscsi_event_new(VuFrontend *fe, Error **errp)
{
    VufScsiEventBuf *buf = g_new0(VufScsiEventBuf, 1);

    buf->len = sizeof(VirtioScsiEvent);
    buf->ev = vuf_mem_alloc(fe, buf->len, 16, &buf->gpa);
    if (!buf->ev) {
        error_setg(errp, "guest memory exhausted: cannot allocate an event "
                   "buffer; raise the memory size");
        g_free(buf);
        return NULL;
    }
    return buf;
}

void vufscsi_event_free(VuFrontend *fe, VufScsiEventBuf *buf)
{
    if (buf) {
        vuf_req_mem_free(fe, buf->ev, NULL);
        g_free(buf);
    }
}

int vufscsi_event_post(VufQueue *q, VufScsiEventBuf *buf, unsigned flags)
{
    VufSeg seg = { buf->gpa, buf->len, true };
    int r;

    memset(buf->ev, 0xff, buf->len);
    buf->used_len = 0;
    r = vufq_add(q, &seg, 1, flags, buf);
    if (r < 0) {
        return r;
    }
    r = vufq_kick(q);
    return r < 0 ? r : 0;
}

int vufscsi_event_complete(VufQueue *q, VufScsiEventBuf **buf)
{
    int r;
    VufScsiEventBuf *done =
        complete_with_len(q, offsetof(VufScsiEventBuf, used_len), &r);

    if (done) {
        *buf = done;
    }
    return r;
}

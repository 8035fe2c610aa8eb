/*
 * virtio-scsi device (virtio 1.x, section 5.6): one target with LUNs
 * backed by ScsiDisks.
 *
 * Theory of operation
 * -------------------
 * A VirtioScsi turns the commands a driver places in its request queues
 * into ScsiDisk requests.  The VuServer owns the virtqueues and the
 * vhost-user protocol; the device sees only the VuDevOps callbacks.
 * Queue 0 is the control queue and queue 1 the event queue (both in
 * virtio-scsi-ctrl.c); queues 2.. carry commands (this file).
 *
 * Commands.  Each popped command is one allocation, a VirtioScsiReq,
 * holding the VirtQueueElement, the ScsiRequest given to the disk, a copy
 * of the CDB and an iovec array for the data.  The chain's layout is
 *
 *   device-readable:  VirtioScsiCmdReqHdr (19 bytes), CDB (cdb_size),
 *                     data-out
 *   device-writable:  VirtioScsiCmdRespHdr (12 bytes), sense (sense_size),
 *                     data-in
 *
 * where the parts may be split across descriptors anywhere.  The header
 * and the CDB are copied out of guest memory once and only the copies are
 * used.  The data parts are iovecs pointing into guest memory (zero
 * copy).  cdb_size and sense_size are the config space's values, which
 * the driver may change (set_config, 6..256 and 0..256 bytes): each
 * command reads them once and keeps them to the end, and they stay in
 * force until the driver writes them again (there is no "device reset"
 * callback in VuDevOps to put the defaults back; Linux writes both at
 * probe anyway).
 *
 * Before anything runs the chain is checked: room for the response header
 * (else no answer can be given: the queue is broken, as for a malformed
 * chain, with virtqueue_fail_element()), request header and CDB present,
 * response header and sense area present, data in at most one direction
 * (VIRTIO_SCSI_F_INOUT is not offered); those violations are answered
 * VIRTIO_SCSI_S_FAILURE (the header fits, with as much of the sense area
 * as does) and the first one of the device is logged.  Then
 * the LUN field decides (5.6.6.1: lun[0] = 1, lun[1] = target, lun[2..3]
 * single-level LUN, lun[4..7] = 0):
 *   - another target (or lun[0] != 1): VIRTIO_SCSI_S_BAD_TARGET;
 *   - REPORT LUNS to any LUN of target 0: answered here from the LUN list
 *     (scsi_build_report_luns()), as is the REPORT LUNS well-known LUN
 *     (c101h: REPORT LUNS, INQUIRY, REQUEST SENSE, TEST UNIT READY);
 *   - a LUN that does not exist: INQUIRY answers peripheral qualifier 3,
 *     type 1Fh (the guest's scan skips it), REQUEST SENSE returns LOGICAL
 *     UNIT NOT SUPPORTED sense data, anything else gets CHECK CONDITION,
 *     ILLEGAL REQUEST, LOGICAL UNIT NOT SUPPORTED;
 *   - a configured LUN: scsi_disk_submit() through the BlockQueue of that
 *     LUN for this queue's context.
 * "Configured" means in the queue's own LUN table (below), which is also
 * what REPORT LUNS lists.
 * The completion writes the response header and the whole sense area
 * (sense, truncated to sense_size, then zeroes) and pushes the element
 * with len = 12 + sense_size + the data-in bytes written.  The residual
 * is the data-in not written; for data-out it is 0 on success and all of
 * it otherwise (the disk does not say how much of a failed write landed).
 * A command the disk refused to run because the buffers do not fit it
 * (ScsiXferError) is answered VIRTIO_SCSI_S_OVERRUN when a buffer is too
 * small for the transfer (5.6.6.1.1) and VIRTIO_SCSI_S_FAILURE when the
 * data goes in the direction the command does not use: that is a driver
 * error, like the spec's own example of data in both directions.
 *
 * Per request queue (VirtioScsiQueue, its home thread only): the in-flight
 * count, the requests kept for reuse (up to VIRTIO_SCSI_FREE_MAX; a
 * request is about 7 KiB), its own LUN table (LUN, disk, and the queue's
 * BlockQueue for it) made when the queue starts and freed when it is
 * drained, and the list of commands running at a LUN, each with a
 * sequence number, for task management.  LUNs added or removed while the
 * queue runs change its table in its own thread (virtio-scsi-luns.c has
 * the hot-plug design), so the lookup of every command takes no lock.
 * No plug/unplug around the pop loop: the block layer batches what one
 * loop turn submits, and plugging every LUN's queue would cost more than
 * it saves.
 *
 * Task management (virtio-scsi-ctrl.c has the details): the control
 * queue's thread hands each request queue a VirtioScsiTmfWait (directly
 * when the queue runs in the same thread, else through a one-shot BH in
 * the queue's context).  virtio_scsi_queue_tmf_scan() runs in the request
 * queue's thread: it first pops what the driver queued (so commands sent
 * before the TMF are seen), then marks the matching commands with the
 * response they will get (ABORTED or RESET) and hangs the wait on the
 * queue; each command's completion, after its push, counts down the waits
 * it belongs to (those created after it was numbered), and the last one
 * reports back to the TMF.
 *
 * Error policies: a LUN's ScsiDisk applies its rerror / werror; `stop`
 * hands the failed command to virtio_scsi_cmd_hold(), which keeps it on
 * its queue's held list (by seq, still linked in the command list, so
 * TMFs count it), pauses the virtqueue (virtqueue_set_paused()) and tells
 * the main thread once per stop; virtio_scsi_stops() runs
 * virtio_scsi_queue_retry_held() in each stopped queue's thread (a
 * paused virtqueue pops nothing, so the pop loop ends at once even when a
 * command fails before submit returns).  Draining, and removing a LUN, retry what is held with
 * `draining` set: errors are then reported, so the wait ends.
 *
 * Threads: creation, LUN add/remove, features and config in the main
 * thread; queue_started, queue_drain and the handlers in the queue's home
 * thread.
 * A LUN's ScsiDisk is shared by every queue (its small shared state is
 * atomic); its node is used through one BlockQueue per request queue.
 * The only other cross-thread data are the driver-writable config fields
 * (one writer, relaxed atomics), and the contexts the control queue and
 * the main thread read to reach the queues (see the virtio-scsi-int.h
 * comments).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <glib.h>

#include "hw/scsi/scsi-defs.h"
#include "hw/scsi/scsi-disk.h"
#include "hw/virtio/virtio-scsi.h"
#include "hw/virtio/virtio-scsi-wire.h"
#include "hw/virtio/virtqueue.h"
#include "util/error.h"
#include "util/iov.h"
#include "util/trace.h"
#include "virtio-scsi-int.h"
#include "util/main-thread.h"

/* Free requests a queue keeps for reuse. */
#define VIRTIO_SCSI_FREE_MAX        128

/* Data segments of one command: the chain's iovecs minus the request and
 * response headers (as virtio-blk). */
#define VIRTIO_SCSI_SEG_MAX         (VIRTQUEUE_MAX_SEGS - 2)

/* Largest transfer hint, in 512-byte sectors (Linux's default).  Each
 * LUN's own limit is in its Block Limits VPD page. */
#define VIRTIO_SCSI_MAX_SECTORS     0xffff

#define VIRTIO_SCSI_QUEUE_SIZE_DEFAULT 256

/* The REPORT LUNS well-known logical unit (SPC-4 8.2), extended address
 * format: bytes 0..1 of an 8-byte LUN. */
#define VIRTIO_SCSI_WLUN_REPORT_LUNS_0  0xc1
#define VIRTIO_SCSI_WLUN_REPORT_LUNS_1  0x01
#define VIRTIO_SCSI_LUN_EXTENDED        0xc0  /* address method 11b */
#define VIRTIO_SCSI_LUN_METHOD_MASK     0xc0

/* Peripheral device type of a well-known logical unit. */
#define VIRTIO_SCSI_PDT_WLUN            0x1e

/* REPORT LUNS SELECT REPORT (byte 2). */
#define VIRTIO_SCSI_REPORT_ALL          0x00
#define VIRTIO_SCSI_REPORT_WELL_KNOWN   0x01
#define VIRTIO_SCSI_REPORT_ALL_AND_WK   0x02

/* INQUIRY identification of the LUNs the device itself answers for. */
#define VIRTIO_SCSI_INQ_VENDOR          "SPINDLE"

struct VirtioScsiReq {
    VirtioReqLink link;          /* VirtioScsiQueue.pool: first member */
    VirtioScsiReq *prev, *next;  /* VirtioScsiQueue.cmds */
    VirtioScsi *vs;
    VirtioScsiQueue *q;
    VirtQueue *vq;
    uint64_t seq;                /* numbered when sent to the disk */
    VirtioHeld held;             /* VirtioScsiQueue.stop; .seq = seq */
    uint64_t tag;
    unsigned lun;
    uint8_t cancel;              /* VIRTIO_SCSI_S_OK, or what a TMF says */
    bool data_in;                /* iov is data-in (else data-out) */
    uint32_t sense_size;         /* config values for this command */
    uint32_t cdb_size;
    uint64_t data_len;           /* bytes of iov */
    unsigned data_niov;
    ScsiRequest sreq;
    uint8_t cdb[VIRTIO_SCSI_CDB_MAX];
    struct iovec iov[VIRTQUEUE_MAX_SEGS];
    VirtQueueElement elem;
};

G_STATIC_ASSERT(offsetof(VirtioScsiReq, link) == 0);

/* ------------------------------------------------------------------------ */
/* Helpers shared with virtio-scsi-ctrl.c                                    */

/*
 * Log a malformed request once per device: a driver that sends one will
 * usually send many, and the log must not become a way to flood the host.
 */
void virtio_scsi_log_bad_request(VirtioScsi *vs, VirtQueue *vq,
                                 const char *why)
{
    if (!atomic_flag_test_and_set_explicit(&vs->logged_bad_request,
                                           memory_order_relaxed)) {
        error_report("virtio-scsi queue %u: malformed request: %s (further "
                     "ones are not logged)", virtqueue_index(vq), why);
    }
}

VirtioScsiAddr virtio_scsi_decode_lun(const uint8_t *lun, unsigned *lun_out)
{
    if (lun[0] != 1 || lun[1] != 0) {
        return VIRTIO_SCSI_ADDR_BAD_TARGET;
    }
    if (lun[4] | lun[5] | lun[6] | lun[7]) {
        return VIRTIO_SCSI_ADDR_NO_LUN;
    }
    switch (lun[2] & VIRTIO_SCSI_LUN_METHOD_MASK) {
    case 0:
        /* Peripheral device addressing: bus 0 only. */
        if (lun[2] != 0) {
            return VIRTIO_SCSI_ADDR_NO_LUN;
        }
        *lun_out = lun[3];
        return VIRTIO_SCSI_ADDR_LUN;
    case SCSI_LUN_FLAT_SPACE:
        *lun_out = (unsigned)(lun[2] & ~VIRTIO_SCSI_LUN_METHOD_MASK) << 8 |
                   lun[3];
        return VIRTIO_SCSI_ADDR_LUN;
    case VIRTIO_SCSI_LUN_EXTENDED:
        if (lun[2] == VIRTIO_SCSI_WLUN_REPORT_LUNS_0 &&
            lun[3] == VIRTIO_SCSI_WLUN_REPORT_LUNS_1) {
            return VIRTIO_SCSI_ADDR_WLUN_REPORT_LUNS;
        }
        return VIRTIO_SCSI_ADDR_NO_LUN;
    default:
        return VIRTIO_SCSI_ADDR_NO_LUN;
    }
}

/*
 * Peripheral addressing below 256, flat space above, as single-level LUNs
 * are reported (Linux looks devices up by that encoding).
 */
void virtio_scsi_encode_lun(unsigned lun, uint8_t *out)
{
    memset(out, 0, VIRTIO_SCSI_LUN_BYTES);
    out[0] = 1;
    out[1] = 0;
    if (lun >= 256) {
        out[2] = SCSI_LUN_FLAT_SPACE | (uint8_t)(lun >> 8);
    }
    out[3] = (uint8_t)lun;
}

/* ------------------------------------------------------------------------ */
/* Request allocation                                                        */

static VirtioScsiReq *virtio_scsi_req_alloc(VirtioScsiQueue *q)
{
    return virtio_req_pool_get(&q->pool, sizeof(VirtioScsiReq));
}

/* Keep req for the next command of q, or free it if q has enough. */
static void virtio_scsi_req_release(VirtioScsiQueue *q, VirtioScsiReq *req)
{
    virtio_req_pool_put(&q->pool, req, VIRTIO_SCSI_FREE_MAX);
}

/* ------------------------------------------------------------------------ */
/* Answers                                                                   */

static void virtio_scsi_req_push(VirtioScsiReq *req, uint32_t len)
{
    VirtioScsiQueue *q = req->q;

    virtqueue_push(req->vq, &req->elem, len);
    q->in_flight--;
    virtio_scsi_req_release(q, req);
}

/*
 * Write the response header and the sense area (sense_len bytes of sense,
 * then zeroes up to sense_size), as much of it as the device-writable part
 * holds.  Returns the bytes written.
 */
static uint32_t virtio_scsi_write_resp(VirtioScsiReq *req, uint8_t response,
                                       uint8_t status, const uint8_t *sense,
                                       unsigned sense_len, uint64_t resid)
{
    uint8_t buf[VIRTIO_SCSI_RESP_HDR_SIZE + VIRTIO_SCSI_SENSE_MAX];
    size_t room = MIN((size_t)VIRTIO_SCSI_RESP_HDR_SIZE + req->sense_size,
                      (size_t)req->elem.in_bytes);
    VirtioScsiCmdRespHdr hdr;

    sense_len = MIN(sense_len, (unsigned)(room - VIRTIO_SCSI_RESP_HDR_SIZE));
    hdr.sense_len = GUINT32_TO_LE(sense_len);
    hdr.resid = GUINT32_TO_LE((uint32_t)MIN(resid, (uint64_t)UINT32_MAX));
    hdr.status_qualifier = 0;
    hdr.status = status;
    hdr.response = response;
    memcpy(buf, &hdr, sizeof(hdr));
    if (sense_len) {
        memcpy(buf + sizeof(hdr), sense, sense_len);
    }
    memset(buf + sizeof(hdr) + sense_len, 0,
           room - sizeof(hdr) - sense_len);
    return (uint32_t)iov_from_buf(req->elem.in_sg, req->elem.in_num,
                                  0, buf, room);
}

/*
 * Answer req and push it: in_done bytes of data-in were written, resid
 * goes into the header.
 */
static void virtio_scsi_req_answer(VirtioScsiReq *req, uint8_t response,
                                   uint8_t status, const uint8_t *sense,
                                   unsigned sense_len, uint64_t in_done,
                                   uint64_t resid)
{
    uint32_t len = virtio_scsi_write_resp(req, response, status, sense,
                                          sense_len, resid);

    SPINDLE_TRACE3(virtio_scsi_complete, virtqueue_index(req->vq), response,
                   status);
    virtio_scsi_req_push(req, len + (uint32_t)in_done);
}

/* The residual when nothing of the data was transferred. */
static uint64_t virtio_scsi_resid_none(const VirtioScsiReq *req)
{
    return req->data_len;
}

/* A transport-level answer (no SCSI status): BAD_TARGET, FAILURE... */
static void virtio_scsi_req_fail(VirtioScsiReq *req, uint8_t response)
{
    virtio_scsi_req_answer(req, response, SCSI_STATUS_GOOD, NULL, 0, 0,
                           virtio_scsi_resid_none(req));
}

/* A malformed chain: log it and answer FAILURE with what fits. */
static void virtio_scsi_req_malformed(VirtioScsiReq *req, const char *why)
{
    virtio_scsi_log_bad_request(req->vs, req->vq, why);
    virtio_scsi_req_fail(req, VIRTIO_SCSI_S_FAILURE);
}

/* CHECK CONDITION with fixed-format sense key/asc/ascq. */
static void virtio_scsi_req_check(VirtioScsiReq *req, uint8_t key,
                                  uint8_t asc, uint8_t ascq)
{
    uint8_t sense[SCSI_SENSE_BUF_SIZE];
    unsigned n = scsi_build_sense(sense, false, key, asc, ascq);

    virtio_scsi_req_answer(req, VIRTIO_SCSI_S_OK,
                           SCSI_STATUS_CHECK_CONDITION, sense, n, 0,
                           virtio_scsi_resid_none(req));
}

/* GOOD status with len bytes of data-in from data (truncated to fit). */
static void virtio_scsi_req_data(VirtioScsiReq *req, const void *data,
                                 size_t len)
{
    uint64_t done = 0;

    if (req->data_in) {
        done = iov_from_buf(req->iov, req->data_niov, 0, data,
                            MIN((uint64_t)len, req->data_len));
        virtio_scsi_req_answer(req, VIRTIO_SCSI_S_OK, SCSI_STATUS_GOOD, NULL,
                               0, done, req->data_len - done);
        return;
    }
    /* Data-out or none: the driver gave nowhere to put the data. */
    virtio_scsi_req_answer(req, VIRTIO_SCSI_S_OK, SCSI_STATUS_GOOD, NULL, 0,
                           0, 0);
}

/* ------------------------------------------------------------------------ */
/* Commands the device answers itself                                        */

static uint32_t virtio_scsi_be16(const uint8_t *p)
{
    return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t virtio_scsi_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
           (uint32_t)p[2] << 8 | p[3];
}

/* REPORT LUNS, to any LUN of the target: the LUNs in the queue's table. */
static void virtio_scsi_report_luns(VirtioScsi *vs, VirtioScsiReq *req)
{
    const VirtioScsiQueue *q = req->q;
    const uint8_t *cdb = req->cdb;
    uint32_t alloc = virtio_scsi_be32(cdb + 6);
    unsigned n;
    uint16_t *luns;
    uint8_t *buf;
    size_t size, len;

    switch (cdb[2]) {
    case VIRTIO_SCSI_REPORT_ALL:
    case VIRTIO_SCSI_REPORT_ALL_AND_WK:
        /* The REPORT LUNS well-known LUN is not listed: SPC allows it. */
        n = q->nluns;
        break;
    case VIRTIO_SCSI_REPORT_WELL_KNOWN:
        n = 0;
        break;
    default:
        virtio_scsi_req_check(req, SCSI_SENSE_ILLEGAL_REQUEST,
                              SCSI_ASC_INVALID_FIELD_IN_CDB,
                              SCSI_ASCQ_INVALID_FIELD_IN_CDB);
        return;
    }
    luns = g_new(uint16_t, MAX(n, 1u));
    for (unsigned i = 0; i < n; i++) {
        luns[i] = (uint16_t)q->luns[i].lun;
    }
    size = SCSI_REPORT_LUNS_HDR_LEN + (size_t)n * SCSI_REPORT_LUNS_ENTRY_LEN;
    buf = g_malloc0(size);
    len = scsi_build_report_luns(luns, n, buf, size);
    virtio_scsi_req_data(req, buf, MIN(len, (size_t)alloc));
    g_free(buf);
    g_free(luns);
}

/*
 * INQUIRY to a LUN with no disk: pdt is SCSI_INQUIRY_NO_LUN (qualifier 3,
 * type 1Fh) for a LUN that does not exist, the well-known type for the
 * REPORT LUNS well-known LUN.
 */
static void virtio_scsi_inquiry_no_disk(VirtioScsiReq *req, uint8_t pdt)
{
    const uint8_t *cdb = req->cdb;
    uint32_t alloc = virtio_scsi_be16(cdb + 3);
    uint8_t buf[SCSI_INQUIRY_STD_LEN];
    size_t len;

    memset(buf, 0, sizeof(buf));
    buf[0] = pdt;
    if (cdb[1] & SCSI_INQUIRY_EVPD) {
        /* A VPD page header with no content (SPC-4 6.6.2: the qualifier
         * says there is no device). */
        buf[1] = cdb[2];
        len = SCSI_VPD_HDR_LEN;
    } else if (cdb[2] != 0 || (cdb[1] & SCSI_INQUIRY_CMDDT)) {
        virtio_scsi_req_check(req, SCSI_SENSE_ILLEGAL_REQUEST,
                              SCSI_ASC_INVALID_FIELD_IN_CDB,
                              SCSI_ASCQ_INVALID_FIELD_IN_CDB);
        return;
    } else {
        /* The version matters: Linux takes the target's SCSI level from
         * LUN 0's answer, and uses REPORT LUNS only from SPC-2 on. */
        buf[2] = SCSI_INQUIRY_VERSION_SPC4;
        buf[3] = SCSI_INQUIRY_RDF;
        buf[4] = SCSI_INQUIRY_STD_LEN - 5;
        memset(buf + SCSI_INQUIRY_VENDOR_OFF, ' ',
               SCSI_INQUIRY_STD_LEN - SCSI_INQUIRY_VENDOR_OFF);
        memcpy(buf + SCSI_INQUIRY_VENDOR_OFF, VIRTIO_SCSI_INQ_VENDOR,
               strlen(VIRTIO_SCSI_INQ_VENDOR));
        len = SCSI_INQUIRY_STD_LEN;
    }
    virtio_scsi_req_data(req, buf, MIN(len, (size_t)alloc));
}

/* REQUEST SENSE to a LUN with no disk: sense data with key/asc/ascq. */
static void virtio_scsi_request_sense_no_disk(VirtioScsiReq *req,
                                              uint8_t key, uint8_t asc,
                                              uint8_t ascq)
{
    const uint8_t *cdb = req->cdb;
    uint8_t sense[SCSI_SENSE_BUF_SIZE];
    unsigned n = scsi_build_sense(sense, cdb[1] & SCSI_REQUEST_SENSE_DESC,
                                  key, asc, ascq);

    virtio_scsi_req_data(req, sense, MIN(n, (unsigned)cdb[4]));
}

/*
 * How an address of target 0 without a disk behind it answers: INQUIRY
 * (with its peripheral type), REPORT LUNS, REQUEST SENSE (with its sense
 * data), TEST UNIT READY if it is ready, and every other command with
 * ILLEGAL REQUEST and its own additional sense.
 */
typedef struct VirtioScsiNoDisk {
    uint8_t pdt;                /* INQUIRY peripheral byte */
    bool ready;                 /* TEST UNIT READY is GOOD */
    uint8_t sense[3];           /* REQUEST SENSE: key, asc, ascq */
    uint8_t other[2];           /* the other commands: asc, ascq */
} VirtioScsiNoDisk;

/* A LUN of target 0 that does not exist. */
static const VirtioScsiNoDisk virtio_scsi_no_lun = {
    .pdt = SCSI_INQUIRY_NO_LUN,
    .sense = { SCSI_SENSE_ILLEGAL_REQUEST, SCSI_ASC_LUN_NOT_SUPPORTED,
               SCSI_ASCQ_LUN_NOT_SUPPORTED },
    .other = { SCSI_ASC_LUN_NOT_SUPPORTED, SCSI_ASCQ_LUN_NOT_SUPPORTED },
};

/* The REPORT LUNS well-known LUN (SPC-4 8.2). */
static const VirtioScsiNoDisk virtio_scsi_wlun = {
    .pdt = VIRTIO_SCSI_PDT_WLUN,
    .ready = true,
    .sense = { SCSI_SENSE_NO_SENSE, SCSI_ASC_NO_ADDITIONAL_SENSE,
               SCSI_ASCQ_NO_ADDITIONAL_SENSE },
    .other = { SCSI_ASC_INVALID_OPCODE, SCSI_ASCQ_INVALID_OPCODE },
};

static void virtio_scsi_cmd_no_disk(VirtioScsi *vs, VirtioScsiReq *req,
                                    const VirtioScsiNoDisk *nd)
{
    switch (req->cdb[0]) {
    case SCSI_OP_INQUIRY:
        virtio_scsi_inquiry_no_disk(req, nd->pdt);
        return;
    case SCSI_OP_REPORT_LUNS:
        virtio_scsi_report_luns(vs, req);
        return;
    case SCSI_OP_REQUEST_SENSE:
        virtio_scsi_request_sense_no_disk(req, nd->sense[0], nd->sense[1],
                                          nd->sense[2]);
        return;
    case SCSI_OP_TEST_UNIT_READY:
        if (nd->ready) {
            virtio_scsi_req_data(req, NULL, 0);
            return;
        }
        break;
    }
    virtio_scsi_req_check(req, SCSI_SENSE_ILLEGAL_REQUEST, nd->other[0],
                          nd->other[1]);
}

/* ------------------------------------------------------------------------ */
/* Commands to a disk                                                        */

static void virtio_scsi_cmd_link(VirtioScsiQueue *q, VirtioScsiReq *req)
{
    req->prev = NULL;
    req->next = q->cmds;
    if (q->cmds) {
        q->cmds->prev = req;
    }
    q->cmds = req;
}

static void virtio_scsi_cmd_unlink(VirtioScsiQueue *q, VirtioScsiReq *req)
{
    if (req->prev) {
        req->prev->next = req->next;
    } else {
        q->cmds = req->next;
    }
    if (req->next) {
        req->next->prev = req->prev;
    }
}

static bool virtio_scsi_wait_matches(const VirtioScsiTmfWait *w,
                                     unsigned lun, uint64_t tag)
{
    return (w->lun < 0 || (unsigned)w->lun == lun) &&
           (!w->match_tag || w->tag == tag);
}

/*
 * Command (lun, tag, seq) of q was pushed: count it off the TMF waits it
 * belongs to, and report those that it was the last of.
 */
static void virtio_scsi_queue_cmd_done(VirtioScsiQueue *q, unsigned lun,
                                       uint64_t tag, uint64_t seq)
{
    VirtioScsiTmfWait **pw = &q->waits;

    while (*pw) {
        VirtioScsiTmfWait *w = *pw;

        if (seq < w->seq_limit && virtio_scsi_wait_matches(w, lun, tag) &&
            --w->remaining == 0) {
            *pw = w->next;
            /* May answer and free the TMF: w is not touched after this. */
            virtio_scsi_tmf_wait_done(w);
            continue;
        }
        pw = &w->next;
    }
}

static void virtio_scsi_cmd_complete(ScsiRequest *sreq)
{
    VirtioScsiReq *req = sreq->opaque;
    VirtioScsiQueue *q = req->q;
    unsigned lun = req->lun;
    uint64_t tag = req->tag, seq = req->seq;
    uint64_t in_done = req->data_in ? MIN(sreq->in_done, req->data_len) : 0;

    virtio_scsi_cmd_unlink(q, req);
    if (req->cancel != VIRTIO_SCSI_S_OK) {
        /* A TMF took it: its result does not count (5.6.6.2). */
        virtio_scsi_req_answer(req, req->cancel, SCSI_STATUS_GOOD, NULL, 0,
                               in_done, virtio_scsi_resid_none(req));
    } else if (sreq->xfer_error == SCSI_XFER_OVERRUN) {
        virtio_scsi_req_fail(req, VIRTIO_SCSI_S_OVERRUN);
    } else if (sreq->xfer_error != SCSI_XFER_OK) {
        virtio_scsi_req_fail(req, VIRTIO_SCSI_S_FAILURE);
    } else {
        bool good = sreq->status == SCSI_STATUS_GOOD;
        uint64_t resid = req->data_in ? req->data_len - in_done :
                         good ? 0 : req->data_len;

        virtio_scsi_req_answer(req, VIRTIO_SCSI_S_OK, sreq->status,
                               sreq->sense,
                               MIN(sreq->sense_len,
                                   (unsigned)SCSI_SENSE_BUF_SIZE),
                               in_done, resid);
    }
    /* req is gone.  The TMFs are told after the push (5.6.6.2: when a TMF
     * completes, the commands it affected have). */
    if (q->waits) {
        virtio_scsi_queue_cmd_done(q, lun, tag, seq);
    }
}

/*
 * ScsiRequest.hold: keep a failed command (ret) until a resume;
 * the first one stops the queue and tells the main thread.  False (report
 * it) while draining, or when a TMF already took the command.
 */
static bool virtio_scsi_cmd_hold(ScsiRequest *sreq, int ret, bool write)
{
    VirtioScsiReq *req = sreq->opaque;
    VirtioScsiQueue *q = req->q;
    int slot = virtio_scsi_lun_find(q->luns, q->nluns, req->lun);

    if (q->stop.draining || req->cancel != VIRTIO_SCSI_S_OK) {
        return false;
    }
    req->held.seq = req->seq;
    virtio_stop_hold(&q->stop, &req->held, req->vq, req->vs->main_ctx,
                     req->vs->io_error, &(VirtioIoError) {
                         .export_id = req->vs->export_id,
                         .node_name = slot < 0 ? NULL : block_node_get_name(
                             scsi_disk_get_node(q->luns[slot].disk)),
                         .queue = virtqueue_index(req->vq),
                         .lun = (int)req->lun,
                         .write = write,
                         .error = -ret,
                     });
    return true;
}

unsigned virtio_scsi_queue_retry_held(void *queue, bool restart)
{
    VirtioScsiQueue *q = queue;
    VirtioHeld *h = virtio_stop_take(&q->stop);
    unsigned n = 0;

    for (; h; n++) {
        VirtioScsiReq *req = (VirtioScsiReq *)((char *)h -
                                               offsetof(VirtioScsiReq, held));

        h = h->next;             /* before a retry may hold req again */
        scsi_req_retry(&req->sreq);
    }
    if (restart && q->vq) {
        virtio_stop_restart(&q->stop, q->vq);
    }
    return n;
}

static void virtio_scsi_cmd_submit(VirtioScsi *vs, VirtioScsiReq *req,
                                   unsigned slot, uint64_t tag)
{
    VirtioScsiQueue *q = req->q;
    ScsiRequest *sreq = &req->sreq;

    sreq->cdb = req->cdb;
    sreq->cdb_len = req->cdb_size;
    sreq->out_iov = NULL;
    sreq->out_niov = 0;
    sreq->out_len = 0;
    sreq->in_iov = NULL;
    sreq->in_niov = 0;
    sreq->in_len = 0;
    if (req->data_in) {
        sreq->in_iov = req->iov;
        sreq->in_niov = (int)req->data_niov;
        sreq->in_len = req->data_len;
    } else if (req->data_len) {
        sreq->out_iov = req->iov;
        sreq->out_niov = (int)req->data_niov;
        sreq->out_len = req->data_len;
    }
    sreq->cb = virtio_scsi_cmd_complete;
    sreq->hold = virtio_scsi_cmd_hold;
    sreq->opaque = req;
    sreq->status = SCSI_STATUS_GOOD;
    sreq->xfer_error = SCSI_XFER_OK;
    sreq->sense_len = 0;
    sreq->in_done = 0;

    req->lun = q->luns[slot].lun;
    req->tag = tag;
    req->seq = q->next_seq++;
    virtio_scsi_cmd_link(q, req);
    SPINDLE_TRACE3(virtio_scsi_submit, virtqueue_index(req->vq), req->lun,
                   req->cdb[0]);
    /* The completion may run before this returns. */
    scsi_disk_submit(q->luns[slot].disk, q->luns[slot].bq, sreq);
}

/* ------------------------------------------------------------------------ */
/* Parsing                                                                   */

/*
 * Make req->iov the part of iov[0..niov) after skip bytes.  The caller
 * knows that there is such a part.
 */
static void virtio_scsi_set_data(VirtioScsiReq *req, const struct iovec *iov,
                                 unsigned niov, size_t skip, uint64_t len,
                                 bool data_in)
{
    unsigned n = 0;

    for (unsigned i = 0; i < niov; i++) {
        if (skip >= iov[i].iov_len) {
            skip -= iov[i].iov_len;
            continue;
        }
        req->iov[n].iov_base = (uint8_t *)iov[i].iov_base + skip;
        req->iov[n].iov_len = iov[i].iov_len - skip;
        skip = 0;
        n++;
    }
    req->data_niov = n;
    req->data_len = len;
    req->data_in = data_in;
}

static void virtio_scsi_handle_cmd(VirtioScsi *vs, VirtioScsiReq *req)
{
    const VirtQueueElement *elem = &req->elem;
    uint64_t out_bytes = iov_size(elem->out_sg, elem->out_num);
    uint64_t in_bytes = elem->in_bytes;
    uint64_t req_len, resp_len, out_data, in_data;
    VirtioScsiCmdReqHdr hdr;
    unsigned lun;
    int slot;

    /* Read once: the driver may change them meanwhile (one writer). */
    req->sense_size = atomic_load_explicit(&vs->sense_size,
                                           memory_order_relaxed);
    req->cdb_size = atomic_load_explicit(&vs->cdb_size,
                                         memory_order_relaxed);
    req->cancel = VIRTIO_SCSI_S_OK;
    req->data_in = false;
    req->data_len = 0;
    req->data_niov = 0;
    req_len = VIRTIO_SCSI_REQ_HDR_SIZE + req->cdb_size;
    resp_len = VIRTIO_SCSI_RESP_HDR_SIZE + req->sense_size;

    if (in_bytes < VIRTIO_SCSI_RESP_HDR_SIZE) {
        /*
         * 5.6.6.1: the response byte closes the 12-byte header that opens
         * the device-writable part; without room for it no answer is
         * honest (FAILURE included), and a buffer pushed back with
         * nothing written would read as whatever was there.  Break the
         * queue: the front-end learns of it from the error eventfd.
         */
        virtqueue_fail_element(req->vq, &req->elem, "virtio-scsi command "
                               "at head %u has %" PRIu64 " device-writable "
                               "bytes, no room for the %zu-byte response "
                               "header", req->elem.head, in_bytes,
                               VIRTIO_SCSI_RESP_HDR_SIZE);
        req->q->in_flight--;
        virtio_scsi_req_release(req->q, req);
        return;
    }
    if (out_bytes < req_len) {
        virtio_scsi_req_malformed(req, "device-readable part shorter than "
                                  "the request header and CDB");
        return;
    }
    if (in_bytes < resp_len) {
        virtio_scsi_req_malformed(req, "device-writable part shorter than "
                                  "the response header and sense");
        return;
    }
    out_data = out_bytes - req_len;
    in_data = in_bytes - resp_len;
    if (out_data && in_data) {
        virtio_scsi_req_malformed(req, "data in both directions "
                                  "(VIRTIO_SCSI_F_INOUT is not offered)");
        return;
    }
    if (in_data) {
        virtio_scsi_set_data(req, elem->in_sg, elem->in_num, resp_len,
                             in_data, true);
    } else if (out_data) {
        virtio_scsi_set_data(req, elem->out_sg, elem->out_num, req_len,
                             out_data, false);
    }

    /* The only copies of the header and CDB we look at. */
    iov_to_buf(elem->out_sg, elem->out_num, 0, &hdr, sizeof(hdr));
    if (req->cdb_size < 16) {
        /* Short CDB sizes: fields past the end read as zero. */
        memset(req->cdb, 0, 16);
    }
    iov_to_buf(elem->out_sg, elem->out_num, sizeof(hdr),
               req->cdb, req->cdb_size);

    switch (virtio_scsi_decode_lun(hdr.lun, &lun)) {
    case VIRTIO_SCSI_ADDR_BAD_TARGET:
        virtio_scsi_req_fail(req, VIRTIO_SCSI_S_BAD_TARGET);
        return;
    case VIRTIO_SCSI_ADDR_WLUN_REPORT_LUNS:
        virtio_scsi_cmd_no_disk(vs, req, &virtio_scsi_wlun);
        return;
    case VIRTIO_SCSI_ADDR_NO_LUN:
        virtio_scsi_cmd_no_disk(vs, req, &virtio_scsi_no_lun);
        return;
    case VIRTIO_SCSI_ADDR_LUN:
        break;
    }
    slot = virtio_scsi_lun_find(req->q->luns, req->q->nluns, lun);
    if (slot < 0) {
        virtio_scsi_cmd_no_disk(vs, req, &virtio_scsi_no_lun);
    } else if (req->cdb[0] == SCSI_OP_REPORT_LUNS) {
        virtio_scsi_report_luns(vs, req);
    } else {
        virtio_scsi_cmd_submit(vs, req, (unsigned)slot,
                               GUINT64_FROM_LE(hdr.tag));
    }
}

static VirtioScsiQueue *virtio_scsi_queue(VirtioScsi *vs, VirtQueue *vq)
{
    unsigned index = virtqueue_index(vq);

    /* The server never creates more queues than we asked for. */
    g_assert(index >= VIRTIO_SCSI_VQ_REQUEST0 &&
             index - VIRTIO_SCSI_VQ_REQUEST0 < vs->num_queues);
    return &vs->queues[index - VIRTIO_SCSI_VQ_REQUEST0];
}

static void virtio_scsi_handle_cmd_queue(VirtioScsi *vs, VirtioScsiQueue *q,
                                         VirtQueue *vq)
{
    for (;;) {
        VirtioScsiReq *req = virtio_scsi_req_alloc(q);
        int r = virtqueue_pop(vq, &req->elem);

        if (r <= 0) {
            /* Empty, paused (a command failed at once and stopped the
             * queue), or broken (the queue has logged why). */
            virtio_scsi_req_release(q, req);
            break;
        }
        req->vs = vs;
        req->vq = vq;
        req->q = q;
        q->in_flight++;
        virtio_scsi_handle_cmd(vs, req);
    }
}

static void virtio_scsi_handle_cmd_vq(VirtioScsi *vs, VirtQueue *vq)
{
    virtio_scsi_handle_cmd_queue(vs, virtio_scsi_queue(vs, vq), vq);
}

unsigned virtio_scsi_queue_tmf_scan(VirtioScsi *vs, VirtioScsiQueue *q,
                                    VirtioScsiTmfWait *w)
{
    unsigned n = 0;

    g_assert(aio_context_in_home_thread(atomic_load_explicit(
                 &q->ctx, memory_order_relaxed)));
    if (q->vq) {
        /* Commands the driver queued before the TMF are in the ring. */
        virtio_scsi_handle_cmd_queue(vs, q, q->vq);
    }
    w->seq_limit = q->next_seq;
    for (VirtioScsiReq *req = q->cmds; req; req = req->next) {
        if (!virtio_scsi_wait_matches(w, req->lun, req->tag)) {
            continue;
        }
        n++;
        if (w->cancel != VIRTIO_SCSI_S_OK &&
            req->cancel == VIRTIO_SCSI_S_OK) {
            req->cancel = w->cancel;
        }
    }
    if (n && w->cancel != VIRTIO_SCSI_S_OK) {
        w->remaining = n;
        w->next = q->waits;
        q->waits = w;
    }
    return n;
}

bool virtio_scsi_queue_has_cmds(const VirtioScsiQueue *q, unsigned lun)
{
    for (const VirtioScsiReq *req = q->cmds; req; req = req->next) {
        if (req->lun == lun) {
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------------------ */
/* VuDevOps                                                                  */

static uint64_t virtio_scsi_get_features(void *dev)
{
    /* The server adds VERSION_1, INDIRECT_DESC and EVENT_IDX.  Not INOUT
     * (bidirectional commands) nor T10_PI. */
    return (UINT64_C(1) << VIRTIO_SCSI_F_HOTPLUG) |
           (UINT64_C(1) << VIRTIO_SCSI_F_CHANGE);
}

static void virtio_scsi_set_features(void *dev, uint64_t features)
{
    VirtioScsi *vs = dev;

    vs->features = features;
}

static void virtio_scsi_fill_config(VirtioScsi *vs, VirtioScsiConfig *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->num_queues = GUINT32_TO_LE(vs->num_queues);
    cfg->seg_max = GUINT32_TO_LE(VIRTIO_SCSI_SEG_MAX);
    cfg->max_sectors = GUINT32_TO_LE(VIRTIO_SCSI_MAX_SECTORS);
    /* A hint; Linux takes the smaller of it and the ring size. */
    cfg->cmd_per_lun = GUINT32_TO_LE(vs->queue_size);
    cfg->event_info_size = GUINT32_TO_LE(sizeof(VirtioScsiEvent));
    cfg->sense_size = GUINT32_TO_LE(atomic_load_explicit(
        &vs->sense_size, memory_order_relaxed));
    cfg->cdb_size = GUINT32_TO_LE(atomic_load_explicit(
        &vs->cdb_size, memory_order_relaxed));
    /* One target, 0: Linux scans targets 0..max_target. */
    cfg->max_channel = 0;
    cfg->max_target = 0;
    cfg->max_lun = GUINT32_TO_LE(VIRTIO_SCSI_MAX_LUN);
}

static uint32_t virtio_scsi_get_config(void *dev, uint8_t *buf, uint32_t len)
{
    VirtioScsi *vs = dev;
    VirtioScsiConfig cfg;
    uint32_t n = MIN(len, (uint32_t)sizeof(cfg));

    virtio_scsi_fill_config(vs, &cfg);
    memcpy(buf, &cfg, n);
    return n;
}

/*
 * Only sense_size and cdb_size are driver-writable (5.6.4), whole fields
 * at a time; values are checked before either is changed.
 */
static int virtio_scsi_set_config(void *dev, const uint8_t *buf,
                                  uint32_t offset, uint32_t len)
{
    VirtioScsi *vs = dev;
    const uint32_t first = offsetof(VirtioScsiConfig, sense_size);
    const uint32_t end = offsetof(VirtioScsiConfig, cdb_size) +
                         sizeof(uint32_t);
    uint32_t vals[2];

    if (offset < first || offset > end || len == 0 || len > end - offset ||
        (offset - first) % sizeof(uint32_t) || len % sizeof(uint32_t)) {
        return -EINVAL;
    }
    for (uint32_t i = 0; i < len / sizeof(uint32_t); i++) {
        uint32_t off = offset + i * sizeof(uint32_t);
        uint32_t v;

        memcpy(&v, buf + i * sizeof(uint32_t), sizeof(v));
        v = GUINT32_FROM_LE(v);
        if (off == first ? (v > VIRTIO_SCSI_SENSE_MAX)
                         : (v < VIRTIO_SCSI_CDB_MIN ||
                            v > VIRTIO_SCSI_CDB_MAX)) {
            return -EINVAL;
        }
        vals[i] = v;
    }
    for (uint32_t i = 0; i < len / sizeof(uint32_t); i++) {
        uint32_t off = offset + i * sizeof(uint32_t);

        atomic_store_explicit(off == first ? &vs->sense_size : &vs->cdb_size,
                              vals[i], memory_order_relaxed);
    }
    return 0;
}

static void virtio_scsi_cmd_queue_started(VirtioScsi *vs, VirtQueue *vq)
{
    AioContext *ctx = virtqueue_get_aio_context(vq);
    VirtioScsiQueue *q = virtio_scsi_queue(vs, vq);

    q->vq = vq;
    q->stop.draining = false;
    virtio_stop_set_context(&q->stop, ctx);
    /* The LUNs' requests complete where the queue runs: the queue's own
     * LUN table, one BlockQueue per LUN in this context, freed by
     * queue_drain. */
    virtio_scsi_queue_luns_start(vs, q, ctx);
    /* Release: pairs with the acquires in virtio_scsi_tmf_dispatch() and
     * virtio_scsi_queues_change(). */
    atomic_store_explicit(&q->ctx, ctx, memory_order_release);
}

static void virtio_scsi_cmd_queue_drain(VirtioScsi *vs, VirtQueue *vq)
{
    AioContext *ctx = virtqueue_get_aio_context(vq);
    VirtioScsiQueue *q = virtio_scsi_queue(vs, vq);

    /* Errors from now on are reported; held commands get one more try. */
    q->stop.draining = true;
    virtio_scsi_queue_retry_held(q, false);
    while (q->in_flight > 0) {
        aio_poll(ctx, true);
    }
    /* Every wait counts commands still in flight. */
    g_assert(!q->cmds && !q->waits);
    virtio_scsi_queue_luns_stop(q);
    virtio_req_pool_drain(&q->pool);
    q->vq = NULL;
}

/* What each kind of virtqueue does: control, event, request queues. */
typedef struct VirtioScsiVqOps {
    void (*handle)(VirtioScsi *vs, VirtQueue *vq);
    void (*started)(VirtioScsi *vs, VirtQueue *vq);
    void (*drain)(VirtioScsi *vs, VirtQueue *vq);
} VirtioScsiVqOps;

static const VirtioScsiVqOps virtio_scsi_ctrl_vq_ops = {
    .handle = virtio_scsi_handle_ctrl,
    .started = virtio_scsi_ctrl_started,
    .drain = virtio_scsi_ctrl_drain,
};

static const VirtioScsiVqOps virtio_scsi_event_vq_ops = {
    .handle = virtio_scsi_handle_event,
    .started = virtio_scsi_event_started,
    .drain = virtio_scsi_event_drain,
};

static const VirtioScsiVqOps virtio_scsi_cmd_vq_ops = {
    .handle = virtio_scsi_handle_cmd_vq,
    .started = virtio_scsi_cmd_queue_started,
    .drain = virtio_scsi_cmd_queue_drain,
};

static const VirtioScsiVqOps *virtio_scsi_vq_ops(VirtQueue *vq)
{
    switch (virtqueue_index(vq)) {
    case VIRTIO_SCSI_VQ_CONTROL:
        return &virtio_scsi_ctrl_vq_ops;
    case VIRTIO_SCSI_VQ_EVENT:
        return &virtio_scsi_event_vq_ops;
    default:
        return &virtio_scsi_cmd_vq_ops;
    }
}

static void virtio_scsi_handle_queue(VirtQueue *vq, void *opaque)
{
    g_assert(aio_context_in_home_thread(virtqueue_get_aio_context(vq)));
    virtio_scsi_vq_ops(vq)->handle(opaque, vq);
}

static void virtio_scsi_queue_started(void *dev, VirtQueue *vq)
{
    VirtioScsi *vs = dev;

    g_assert(aio_context_in_home_thread(virtqueue_get_aio_context(vq)));
    virtio_scsi_vq_ops(vq)->started(vs, vq);
}

static void virtio_scsi_queue_drain(void *dev, VirtQueue *vq)
{
    g_assert(aio_context_in_home_thread(virtqueue_get_aio_context(vq)));
    virtio_scsi_vq_ops(vq)->drain(dev, vq);
}

const VuDevOps virtio_scsi_vu_ops = {
    .get_features = virtio_scsi_get_features,
    .set_features = virtio_scsi_set_features,
    .get_config = virtio_scsi_get_config,
    .set_config = virtio_scsi_set_config,
    .queue_started = virtio_scsi_queue_started,
    .queue_drain = virtio_scsi_queue_drain,
    .handle_queue = virtio_scsi_handle_queue,
};

/* ------------------------------------------------------------------------ */
/* Creation (LUNs: virtio-scsi-luns.c)                                      */

VirtioScsi *virtio_scsi_new(const VirtioScsiConf *conf, Error **errp)
{
    unsigned queue_size = conf->queue_size ? conf->queue_size
                                           : VIRTIO_SCSI_QUEUE_SIZE_DEFAULT;
    VirtioScsi *vs;
    void *queues;

    assert_main_thread();
    if (conf->num_queues < 1 || conf->num_queues > VIRTIO_SCSI_MAX_QUEUES) {
        error_setg(errp, "Parameter 'num-queues' expects a number from 1 to "
                   "%u, got %u", VIRTIO_SCSI_MAX_QUEUES, conf->num_queues);
        return NULL;
    }
    if (queue_size > VIRTQUEUE_MAX_SIZE || (queue_size & (queue_size - 1))) {
        error_setg(errp, "Parameter 'queue-size' expects a power of two up "
                   "to %u, got %u", VIRTQUEUE_MAX_SIZE, conf->queue_size);
        return NULL;
    }
    vs = g_new0(VirtioScsi, 1);
    vs->num_queues = conf->num_queues;
    vs->queue_size = queue_size;
    vs->export_id = g_strdup(conf->export_id);
    vs->main_ctx = conf->main_ctx;
    vs->io_error = conf->io_error;
    atomic_init(&vs->sense_size, VIRTIO_SCSI_SENSE_DEFAULT_SIZE);
    atomic_init(&vs->cdb_size, VIRTIO_SCSI_CDB_DEFAULT_SIZE);
    atomic_init(&vs->ctrl.ctx, NULL);
    atomic_flag_clear(&vs->logged_bad_request);
    atomic_init(&vs->events.ctx, NULL);
    atomic_init(&vs->events.missed, false);
    vs->events.held_tail = &vs->events.held;

    if (posix_memalign(&queues, VIRTIO_SCSI_CACHELINE,
                       vs->num_queues * sizeof(VirtioScsiQueue))) {
        g_error("virtio-scsi: out of memory");
    }
    memset(queues, 0, vs->num_queues * sizeof(VirtioScsiQueue));
    vs->queues = queues;
    for (unsigned i = 0; i < vs->num_queues; i++) {
        atomic_init(&vs->queues[i].ctx, NULL);
        virtio_stop_init(&vs->queues[i].stop, virtio_scsi_queue_retry_held,
                         &vs->queues[i]);
    }
    return vs;
}

void virtio_scsi_free(VirtioScsi *vs)
{
    assert_main_thread();
    if (!vs) {
        return;
    }
    /* Queues are stopped and drained: nothing is in flight or held. */
    g_assert(vs->ctrl.tmfs == 0 && vs->events.nheld == 0 &&
             vs->ctrl.luns == NULL);
    for (unsigned i = 0; i < vs->num_queues; i++) {
        VirtioScsiQueue *q = &vs->queues[i];

        g_assert(q->in_flight == 0 && q->luns == NULL);
        virtio_req_pool_drain(&q->pool);
    }
    free(vs->queues);
    for (unsigned i = 0; i < vs->nluns; i++) {
        scsi_disk_free(vs->luns[i].disk);
        block_acct_free(vs->luns[i].acct);
    }
    g_free(vs->luns);
    g_free(vs->export_id);
    g_free(vs);
}

unsigned virtio_scsi_stops(VirtioScsi *vs, bool resume)
{
    return virtio_stop_all(&vs->queues[0].stop, sizeof(VirtioScsiQueue),
                           vs->num_queues, resume);
}

unsigned virtio_scsi_num_virtqueues(const VirtioScsi *vs)
{
    return vs->num_queues + VIRTIO_SCSI_VQ_REQUEST0;
}

/*
 * spindle-bench: the virtio-scsi device (--device=scsi).
 *
 * Theory of operation
 * -------------------
 * The session has the control queue (0), the event queue (1) and one
 * request queue per bench queue: bench queue i drives virtqueue 2 + i.
 * The control and event queues are set up, as a driver does, but never
 * used: the bench sends no task management and posts no event buffers.
 *
 * Setup, on request queue 0 before the queue threads start: INQUIRY tells
 * whether the target has the LUN (peripheral qualifier 0) and that it is
 * a disk; READ CAPACITY (16) gives its size and logical block size.  A
 * guest's first command after a reset or a capacity change gets a UNIT
 * ATTENTION (INQUIRY never does); like a guest, we send READ CAPACITY
 * again then, a few times.  The config space adds max_sectors (the
 * largest transfer: --bs must fit) and cmd_per_lun (the most commands a
 * driver keeps in flight on one LUN, over all queues).
 *
 * The run: every request is READ (10) or WRITE (10) of --bs bytes, READ
 * (16) / WRITE (16) when the LBA or the block count does not fit in the
 * 10-byte CDB, on LUN --lun of target 0, task attribute SIMPLE, with a tag
 * unique over the queues (queue << 32 | slot).  It succeeded when the
 * response is OK, the status GOOD and the residual 0; anything else is an
 * I/O error, described by the response or status name and, for CHECK
 * CONDITION, the sense key, ASC and ASCQ.  A unit attention during the
 * run is such an error too: the command did not run, and a bench that
 * resent it would hide the event.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include <glib.h>

#include "bench-int.h"
#include "util/bswap.h"

/* Operation codes (SPC-4, SBC-3). */
#define OP_INQUIRY              0x12
#define OP_READ_10              0x28
#define OP_WRITE_10             0x2a
#define OP_READ_16              0x88
#define OP_WRITE_16             0x8a
#define OP_SERVICE_ACTION_IN_16 0x9e
#define SAI_READ_CAPACITY_16    0x10

#define STATUS_GOOD             0x00
#define STATUS_CHECK_CONDITION  0x02
#define SK_ILLEGAL_REQUEST      0x5
#define SK_UNIT_ATTENTION       0x6
#define ASC_LU_NOT_SUPPORTED    0x25

#define INQUIRY_LEN             96
#define READ_CAPACITY_16_LEN    32
/* Unit attentions a setup command may meet in a row (one per event: a
 * reset, a capacity change...) before we give up. */
#define UA_RETRIES              8
#define PROBE_TIMEOUT_NS        (10 * NS_PER_S)
#define PROBE_TAG               0xffffffffffffffffull

/* ------------------------------------------------------------------------ */
/* CDBs                                                                      */

/* READ/WRITE (10), or (16) when lba or nblocks do not fit; returns the
 * CDB's length. */
static unsigned scsi_cdb_rw(uint8_t cdb[16], bool write, uint64_t lba,
                            uint64_t nblocks)
{
    if (lba <= UINT32_MAX && nblocks <= UINT16_MAX) {
        memset(cdb, 0, 10);
        cdb[0] = write ? OP_WRITE_10 : OP_READ_10;
        st_be32(cdb + 2, lba);
        st_be16(cdb + 7, nblocks);
        return 10;
    }
    memset(cdb, 0, 16);
    cdb[0] = write ? OP_WRITE_16 : OP_READ_16;
    st_be64(cdb + 2, lba);
    st_be32(cdb + 10, nblocks);
    return 16;
}

/* ------------------------------------------------------------------------ */
/* Setup                                                                     */

static uint64_t scsi_queue_count(VuFrontend *fe)
{
    const VirtioScsiConfig *cfg = vuf_scsi_config(fe);
    uint64_t n = vuf_queue_num_max(fe);

    if (cfg) {
        return cfg->num_queues;
    }
    return n > VIRTIO_SCSI_VQ_REQUEST0 ? n - VIRTIO_SCSI_VQ_REQUEST0 : 0;
}

static bool scsi_is_ua(const VufScsiReq *req)
{
    uint8_t key, asc, ascq;

    return req->resp->response == VIRTIO_SCSI_S_OK &&
           req->resp->status == STATUS_CHECK_CONDITION &&
           vufscsi_sense(req, &key, &asc, &ascq) &&
           key == SK_UNIT_ATTENTION;
}

/* Does the answer in req say that the LUN does not exist? */
static bool scsi_no_such_lun(const VufScsiReq *req)
{
    uint8_t key, asc, ascq;

    switch (req->resp->response) {
    case VIRTIO_SCSI_S_BAD_TARGET:
    case VIRTIO_SCSI_S_INCORRECT_LUN:
        return true;
    case VIRTIO_SCSI_S_OK:
        return req->resp->status == STATUS_CHECK_CONDITION &&
               vufscsi_sense(req, &key, &asc, &ascq) &&
               key == SK_ILLEGAL_REQUEST && asc == ASC_LU_NOT_SUPPORTED;
    default:
        return false;
    }
}

static void error_no_lun(unsigned lun, Error **errp)
{
    error_setg(errp, "--lun %u: the target has no LUN %u", lun, lun);
}

/*
 * Run one setup command (data-in of data_len bytes) on q and wait for it,
 * resending it after a unit attention.  True when it ended with response
 * OK and status GOOD; otherwise false with errp saying what went wrong,
 * in the user's terms when the LUN does not exist.
 */
static bool scsi_setup_cmd(VufQueue *q, VufScsiReq *req, unsigned lun,
                           const uint8_t *cdb, unsigned cdb_len,
                           size_t data_len, const char *what, Error **errp)
{
    uint8_t key = 0, asc = 0, ascq = 0;
    unsigned tries = 0;
    int r;

    do {
        r = vufscsi_prep(req, lun, PROBE_TAG, cdb, cdb_len, data_len,
                         VUFSCSI_DIR_FROM_DEV);
        if (r == 0) {
            r = vufscsi_do(q, req, 0, PROBE_TIMEOUT_NS);
        }
        if (r < 0) {
            error_setg(errp, "%s of LUN %u: %s", what, lun,
                       r == -ETIMEDOUT ? "no answer within 10 s"
                                       : g_strerror(-r));
            return false;
        }
    } while (scsi_is_ua(req) && ++tries <= UA_RETRIES);

    if (scsi_no_such_lun(req)) {
        error_no_lun(lun, errp);
        return false;
    }
    if (r != VIRTIO_SCSI_S_OK) {
        error_setg(errp, "%s of LUN %u: the device answered response %s",
                   what, lun, vufscsi_response_name(r));
        return false;
    }
    if (req->resp->status == STATUS_CHECK_CONDITION &&
        vufscsi_sense(req, &key, &asc, &ascq)) {
        error_setg(errp, "%s of LUN %u: CHECK CONDITION, sense %s, ASC "
                   "0x%02x, ASCQ 0x%02x", what, lun,
                   vufscsi_sense_key_name(key), asc, ascq);
        return false;
    }
    if (req->resp->status != STATUS_GOOD) {
        error_setg(errp, "%s of LUN %u: status %s (0x%02x)", what, lun,
                   vufscsi_status_name(req->resp->status),
                   req->resp->status);
        return false;
    }
    return true;
}

/* INQUIRY: is there a disk at the LUN? */
static bool scsi_inquiry(VufQueue *q, VufScsiReq *req, unsigned lun,
                         Error **errp)
{
    uint8_t cdb[6] = { OP_INQUIRY };

    st_be16(cdb + 3, INQUIRY_LEN);
    if (!scsi_setup_cmd(q, req, lun, cdb, sizeof(cdb), INQUIRY_LEN,
                        "INQUIRY", errp)) {
        return false;
    }
    if (vufscsi_data_in(req) < 1) {
        error_setg(errp, "INQUIRY of LUN %u: no data", lun);
        return false;
    }
    if (req->data[0] >> 5) {
        /* Qualifier 3: no logical unit there (1: not connected). */
        error_no_lun(lun, errp);
        return false;
    }
    if (req->data[0] & 0x1f) {
        error_setg(errp, "--lun %u: LUN %u is not a disk (peripheral device "
                   "type 0x%02x)", lun, lun, req->data[0] & 0x1f);
        return false;
    }
    return true;
}

/* READ CAPACITY (16): the size and the logical block size. */
static bool scsi_read_capacity(VufQueue *q, VufScsiReq *req, unsigned lun,
                               BenchDisk *d, Error **errp)
{
    uint8_t cdb[16] = { OP_SERVICE_ACTION_IN_16, SAI_READ_CAPACITY_16 };
    uint64_t nblocks;
    uint32_t block_size;

    st_be32(cdb + 10, READ_CAPACITY_16_LEN);
    if (!scsi_setup_cmd(q, req, lun, cdb, sizeof(cdb), READ_CAPACITY_16_LEN,
                        "READ CAPACITY (16)", errp)) {
        return false;
    }
    if (vufscsi_data_in(req) < 12) {
        error_setg(errp, "READ CAPACITY (16) of LUN %u: %zu bytes of data, "
                   "expected 32", lun, vufscsi_data_in(req));
        return false;
    }
    nblocks = ld_be64(req->data) + 1;
    block_size = ld_be32(req->data + 8);
    if (block_size == 0 || block_size % SECTOR || nblocks == 0 ||
        nblocks > UINT64_MAX / block_size) {
        error_setg(errp, "READ CAPACITY (16) of LUN %u: %" PRIu64 " blocks "
                   "of %" PRIu32 " bytes is not a disk this tool can drive "
                   "(blocks must be multiples of 512 bytes)", lun, nblocks,
                   block_size);
        return false;
    }
    d->have_capacity = true;
    d->capacity = nblocks * block_size;
    d->block_size = block_size;
    return true;
}

static bool scsi_probe(Bench *b, const BenchOpts *o, BenchDisk *d,
                       Error **errp)
{
    const VirtioScsiConfig *cfg = vuf_scsi_config(b->fe);
    VufQueue *q = vuf_queue(b->fe, VUFSCSI_VQ_REQUEST(0));
    VufScsiReq *req;
    bool ok;

    if (cfg && cfg->max_sectors && o->bs > (uint64_t)cfg->max_sectors *
                                           SECTOR) {
        error_setg(errp, "--bs %" PRIu64 " does not fit in one command: the "
                   "device takes at most %" PRIu64 " bytes (max_sectors %u)",
                   o->bs, (uint64_t)cfg->max_sectors * SECTOR,
                   cfg->max_sectors);
        return false;
    }
    req = vufscsi_req_new(b->fe, MAX(INQUIRY_LEN, READ_CAPACITY_16_LEN),
                          errp);
    if (!req) {
        return false;
    }
    ok = scsi_inquiry(q, req, o->lun, errp) &&
         scsi_read_capacity(q, req, o->lun, d, errp);
    vufscsi_req_free(b->fe, req);
    /* One data descriptor (vu-scsi.c): within any seg_max. */
    d->data_segs = 1;
    d->inflight_max = cfg ? cfg->cmd_per_lun : 0;
    return ok;
}

static void *scsi_req_new(Bench *b, void *opaque, uint8_t **data,
                          Error **errp)
{
    VufScsiReq *req = vufscsi_req_new(b->fe, b->o->bs, errp);

    if (!req) {
        return NULL;
    }
    req->opaque = opaque;
    *data = req->data;
    return req;
}

static void scsi_req_free(Bench *b, void *req)
{
    vufscsi_req_free(b->fe, req);
}

/* ------------------------------------------------------------------------ */
/* Data path                                                                 */

static int scsi_submit(BenchQueue *bq, void *opaque, uint64_t tag,
                       bool write, uint64_t off)
{
    const Bench *b = bq->b;
    VufScsiReq *req = opaque;
    uint64_t bs = b->o->bs, block = b->disk.block_size;
    uint8_t cdb[16];
    unsigned len = scsi_cdb_rw(cdb, write, off / block, bs / block);
    int r = vufscsi_prep(req, b->o->lun, tag, cdb, len, bs,
                         write ? VUFSCSI_DIR_TO_DEV : VUFSCSI_DIR_FROM_DEV);

    return r < 0 ? r : vufscsi_submit(bq->q, req, b->add_flags);
}

static int scsi_complete(VufQueue *q, void **opaque)
{
    VufScsiReq *req;
    int r = vufscsi_complete(q, &req);

    if (r == 1) {
        *opaque = req->opaque;
    }
    return r;
}

static bool scsi_check(const void *opaque, BenchIoError *e)
{
    const VufScsiReq *req = opaque;
    /* Each read once: the device wrote them, a local is what we judge. */
    uint8_t response = req->resp->response;
    uint8_t status = req->resp->status;
    uint32_t resid = req->resp->resid;

    if (response == VIRTIO_SCSI_S_OK && status == STATUS_GOOD && !resid) {
        return true;
    }
    *e = (BenchIoError) { 0 };
    if (response != VIRTIO_SCSI_S_OK) {
        e->status = vufscsi_response_name(response);
    } else if (status == STATUS_GOOD) {
        e->status = "GOOD_WITH_RESIDUAL";   /* part of the data moved */
    } else {
        e->status = vufscsi_status_name(status);
        e->have_sense = status == STATUS_CHECK_CONDITION &&
                        vufscsi_sense(req, &e->sense_key, &e->asc,
                                      &e->ascq);
    }
    return false;
}

const BenchDevOps bench_dev_scsi = {
    .name = "virtio-scsi",
    .type = VUF_DEVICE_SCSI,
    .first_vq = VUFSCSI_VQ_REQUEST(0),
    .queue_noun = "request queues",
    .queue_count = scsi_queue_count,
    .probe = scsi_probe,
    .req_new = scsi_req_new,
    .req_free = scsi_req_free,
    .submit = scsi_submit,
    .complete = scsi_complete,
    .check = scsi_check,
};

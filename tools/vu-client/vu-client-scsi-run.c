/*
 * spindle-vu-client: scsi-verify-run and scsi-bad-request.
 *
 * Theory of operation
 * -------------------
 * scsi-verify-run is verify-run over virtio-scsi (the engine is
 * vu-client-verify.c): it splits [offset, offset+size) of one LUN into a
 * slice per request queue and starts a thread per queue, which writes its
 * blocks with WRITE (10 or 16) in a shuffled order, then reads every block
 * written and checks it.  A command that gets UNIT ATTENTION is sent
 * again, as a guest would.  Each thread tags its commands in its own
 * range, (queue + 1) << 40 upwards, so tags stay unique across queues.
 *
 * scsi-bad-request puts one hand-built virtio-scsi request in a queue (a
 * request queue, or the control queue for the ctrl-* and tmf-* kinds),
 * kicks, waits up to 0.5 s, and reports what the device did: reaction
 * (completed, no-completion, closed), used_len, and where the framing
 * puts it the response, status and sense; whether the device signalled
 * the queue's error eventfd (error_signalled: it broke the queue); then
 * whether the connection still answers.  Its buffers live in one scratch
 * area of guest memory.
 * It judges nothing; tests do.
 */

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include <glib.h>

#include "util/error.h"
#include "vu-client-result.h"
#include "vu-client-scsi.h"
#include "vu-client-scsi-run.h"
#include "vu-client-session.h"
#include "vu-client-verify.h"

#define SK_UNIT_ATTENTION       0x6
#define STATUS_GOOD             0x00
#define UA_RETRIES              3

/* ------------------------------------------------------------------------ */
/* scsi-verify-run                                                           */

static unsigned scsi_verify_vq_index(unsigned qi)
{
    return VUFSCSI_VQ_REQUEST(qi);
}

static void scsi_verify_prepare(VerifyQueue *vq, VerifySlot *s, bool writing)
{
    const VerifyRun *run = vq->run;
    uint64_t bs = run->cmd->bs, off = vq->base + s->block * bs;
    uint8_t cdb[16];
    unsigned len;

    len = scsi_cdb_rw(cdb, writing, off / run->lbs, bs / run->lbs,
                      run->cmd->cdb_bits, false);
    vufscsi_prep(s->req, run->cmd->lun, vq->tag++, cdb, len, bs,
                 writing ? VUFSCSI_DIR_TO_DEV : VUFSCSI_DIR_FROM_DEV);
}

static int scsi_verify_submit(VerifyQueue *vq, VerifySlot *s)
{
    return vufscsi_submit(vq->q, s->req, vq->run->c->add_flags);
}

/* Is this completion a unit attention to resend? */
static bool scsi_verify_is_ua(const VufScsiReq *req)
{
    uint8_t key, asc, ascq;

    return req->resp->response == VIRTIO_SCSI_S_OK &&
           req->resp->status == 0x02 &&
           vufscsi_sense(req, &key, &asc, &ascq) && key == SK_UNIT_ATTENTION;
}

/* A command that got UNIT ATTENTION is sent again (a new tag), as a guest
 * would, up to UA_RETRIES times; else it must have status GOOD. */
static VerifyAnswer scsi_verify_answer(VerifyQueue *vq, VerifySlot *s,
                                       bool writing)
{
    VufScsiReq *req = s->req;
    uint64_t off = vq->base + s->block * vq->run->cmd->bs;
    uint8_t key = 0, asc = 0, ascq = 0;
    int r;

    if (scsi_verify_is_ua(req) && s->resent < UA_RETRIES) {
        s->resent++;
        vq->resent++;
        req->hdr->tag = vq->tag++;
        req->resp->response = VUFSCSI_RESPONSE_NONE;
        req->resp->status = VUFSCSI_STATUS_NONE;
        r = vufscsi_submit(vq->q, req, vq->run->c->add_flags);
        if (r < 0) {
            verify_fail(vq, "resubmit", -r);
            return VERIFY_ANSWER_FAILED;
        }
        return VERIFY_ANSWER_RESENT;
    }
    if (req->resp->response != VIRTIO_SCSI_S_OK ||
        req->resp->status != STATUS_GOOD) {
        vufscsi_sense(req, &key, &asc, &ascq);
        vq->error = g_strdup_printf("request queue %u: %s of block %" PRIu64
                                    " (offset %" PRIu64 "): response %s, "
                                    "status %s, sense %s ASC 0x%02x ASCQ "
                                    "0x%02x", vq->qi,
                                    writing ? "WRITE" : "READ", s->block, off,
                                    vufscsi_response_name(
                                        req->resp->response),
                                    vufscsi_status_name(req->resp->status),
                                    vufscsi_sense_key_name(key), asc, ascq);
        return VERIFY_ANSWER_FAILED;
    }
    return VERIFY_ANSWER_DONE;
}

/* A READ must move all its data (resid 0). */
static bool scsi_verify_read_whole(VerifyQueue *vq, VerifySlot *s)
{
    const VufScsiReq *req = s->req;

    if (req->resp->resid != 0) {
        vq->error = g_strdup_printf("request queue %u: READ of block %"
                                    PRIu64 ": resid %u", vq->qi, s->block,
                                    req->resp->resid);
        return false;
    }
    return true;
}

/* What a virtio-scsi run adds: the LUN, the CDB, the unit attentions. */
static void scsi_verify_result(const VerifyRun *run, Result *r)
{
    uint64_t ua = 0;

    for (unsigned i = 0; i < run->nq; i++) {
        ua += run->queues[i].resent;
    }
    res_int(r, "lun", run->cmd->lun);
    res_int(r, "cdb", run->cmd->cdb_bits);
    res_int(r, "unit_attentions", ua);
}

static const VerifyOps scsi_verify_ops = {
    .queue_name = "request queue",
    .vq_index = scsi_verify_vq_index,
    .prepare = scsi_verify_prepare,
    .submit = scsi_verify_submit,
    .answer = scsi_verify_answer,
    .read_whole = scsi_verify_read_whole,
    .result = scsi_verify_result,
};

/* The LUN's block size (run->lbs), the range checked against it, and
 * run->slice. */
static bool scsi_verify_geometry(VerifyRun *run, Error **errp)
{
    const Command *cmd = run->cmd;
    uint32_t lbs;
    uint64_t nblocks;

    if (!scsi_lun_geometry(run->c, 0, cmd->lun, &lbs, &nblocks, errp)) {
        return false;
    }
    run->lbs = lbs;
    if (cmd->bs % lbs || cmd->offset % lbs) {
        error_setg(errp, "--bs %" PRIu64 " and --offset %" PRIu64 " must be "
                   "multiples of LUN %u's block size %u", cmd->bs,
                   cmd->offset, cmd->lun, lbs);
        return false;
    }
    if (!verify_run_slice(run, errp)) {
        return false;
    }
    if (cmd->offset > nblocks * lbs ||
        cmd->size > nblocks * lbs - cmd->offset) {
        error_setg(errp, "--offset %" PRIu64 " + --size %" PRIu64 " is "
                   "beyond LUN %u's %" PRIu64 " bytes", cmd->offset,
                   cmd->size, cmd->lun, nblocks * lbs);
        return false;
    }
    if (cmd->cdb_bits == 10 &&
        ((cmd->offset + cmd->size) / lbs > UINT32_MAX ||
         cmd->bs / lbs > UINT16_MAX)) {
        error_setg(errp, "the range or --bs is beyond what a 10-byte CDB "
                   "can address; use --cdb 16");
        return false;
    }
    return true;
}

bool cmd_scsi_verify_run(Client *c, const Command *cmd, Result *r, Error **errp)
{
    g_autofree char *target = g_strdup_printf("LUN %u", cmd->lun);
    VerifyRun run = {
        .ops = &scsi_verify_ops,
        .c = c,
        .cmd = cmd,
        .nq = cmd->run_queues ? cmd->run_queues : client_io_queues(c),
        .target = target,
    };

    if (!scsi_verify_geometry(&run, errp)) {
        return false;
    }
    return verify_run(&run, r, errp);
}

/* ------------------------------------------------------------------------ */
/* scsi-bad-request                                                          */

#define SBR_SCRATCH_BYTES   (64u << 10)
#define SBR_OFF_REQ         0u          /* request header + CDB */
#define SBR_OFF_CDB         512u        /* a CDB in its own descriptor */
#define SBR_OFF_RESP        1024u       /* response header + sense */
#define SBR_OFF_DATA        8192u       /* data, up to 32 KiB */
#define SBR_DATA_MAX        (32u << 10)
#define SBR_WAIT_MS         500
#define SBR_SEGS_MAX        8

typedef struct SbrBuild {
    Client *c;
    uint8_t *mem;               /* the scratch area */
    uint64_t gpa;
    unsigned cdb_size, sense_size;
    uint32_t lbs;               /* the LUN's block size */
    unsigned lun;
    VufSeg segs[SBR_SEGS_MAX];
    unsigned n;
    bool control;               /* on the control queue */
    bool has_resp;              /* a response header at SBR_OFF_RESP */
} SbrBuild;

/* The token of the request in the ring (it may outlive the command). */
static char sbr_token;

typedef struct SbrKind {
    const char *name;
    void (*build)(SbrBuild *b);
} SbrKind;

static void sbr_seg(SbrBuild *b, unsigned off, uint32_t len, bool writes)
{
    g_assert(b->n < SBR_SEGS_MAX);
    b->segs[b->n++] = (VufSeg) { b->gpa + off, len, writes };
}

/* A command header for LUN lun of target 0 with cdb at SBR_OFF_REQ. */
static void sbr_cmd(SbrBuild *b, const uint8_t *cdb, unsigned len)
{
    VirtioScsiCmdReqHdr *h = (VirtioScsiCmdReqHdr *)(b->mem + SBR_OFF_REQ);

    memset(h, 0, sizeof(*h) + b->cdb_size);
    vufscsi_lun_bytes(h->lun, b->lun);
    h->tag = scsi_next_tag(b->c);
    h->task_attr = VIRTIO_SCSI_S_SIMPLE;
    memcpy(b->mem + SBR_OFF_REQ + sizeof(*h), cdb, len);
}

static uint32_t sbr_req_len(const SbrBuild *b)
{
    return sizeof(VirtioScsiCmdReqHdr) + b->cdb_size;
}

static uint32_t sbr_resp_len(const SbrBuild *b)
{
    return sizeof(VirtioScsiCmdRespHdr) + b->sense_size;
}

/* The usual chain: request, data-out, response, data-in. */
static void sbr_chain(SbrBuild *b, uint32_t data_out, uint32_t data_in)
{
    sbr_seg(b, SBR_OFF_REQ, sbr_req_len(b), false);
    if (data_out) {
        sbr_seg(b, SBR_OFF_DATA, data_out, false);
    }
    sbr_seg(b, SBR_OFF_RESP, sbr_resp_len(b), true);
    b->has_resp = true;
    if (data_in) {
        sbr_seg(b, SBR_OFF_DATA, data_in, true);
    }
}

static void sbr_rw(SbrBuild *b, bool write, uint64_t lba, uint32_t nblocks,
                   unsigned bits)
{
    uint8_t cdb[16];
    unsigned len = scsi_cdb_rw(cdb, write, lba, nblocks, bits, false);

    sbr_cmd(b, cdb, len);
}

static void build_good_read(SbrBuild *b)
{
    sbr_rw(b, false, 0, 1, 16);
    sbr_chain(b, 0, b->lbs);
}

static void build_split_request(SbrBuild *b)
{
    /* Legal: the header and the CDB in two descriptors. */
    sbr_rw(b, false, 0, 1, 16);
    memmove(b->mem + SBR_OFF_CDB,
            b->mem + SBR_OFF_REQ + sizeof(VirtioScsiCmdReqHdr), b->cdb_size);
    sbr_seg(b, SBR_OFF_REQ, sizeof(VirtioScsiCmdReqHdr), false);
    sbr_seg(b, SBR_OFF_CDB, b->cdb_size, false);
    sbr_seg(b, SBR_OFF_RESP, sbr_resp_len(b), true);
    b->has_resp = true;
    sbr_seg(b, SBR_OFF_DATA, b->lbs, true);
}

static void build_short_request(SbrBuild *b)
{
    sbr_rw(b, false, 0, 1, 16);
    sbr_seg(b, SBR_OFF_REQ, 8, false);
    sbr_seg(b, SBR_OFF_RESP, sbr_resp_len(b), true);
    b->has_resp = true;
}

static void build_short_cdb(SbrBuild *b)
{
    /* The header and 6 of the cdb_size CDB bytes. */
    uint8_t cdb[6] = { 0x00 };

    sbr_cmd(b, cdb, sizeof(cdb));
    sbr_seg(b, SBR_OFF_REQ, sizeof(VirtioScsiCmdReqHdr) + 6, false);
    sbr_seg(b, SBR_OFF_RESP, sbr_resp_len(b), true);
    b->has_resp = true;
}

static void build_no_response(SbrBuild *b)
{
    sbr_rw(b, false, 0, 1, 16);
    sbr_seg(b, SBR_OFF_REQ, sbr_req_len(b), false);
}

static void build_short_response(SbrBuild *b)
{
    uint8_t cdb[6] = { 0x00 };

    sbr_cmd(b, cdb, sizeof(cdb));
    sbr_seg(b, SBR_OFF_REQ, sbr_req_len(b), false);
    sbr_seg(b, SBR_OFF_RESP, 8, true);
}

static void build_response_readable(SbrBuild *b)
{
    uint8_t cdb[6] = { 0x00 };

    sbr_cmd(b, cdb, sizeof(cdb));
    sbr_seg(b, SBR_OFF_REQ, sbr_req_len(b), false);
    sbr_seg(b, SBR_OFF_RESP, sbr_resp_len(b), false);
}

static void build_read_overrun(SbrBuild *b)
{
    sbr_rw(b, false, 0, 8, 10);
    sbr_chain(b, 0, b->lbs);
}

static void build_write_overrun(SbrBuild *b)
{
    sbr_rw(b, true, 0, 8, 10);
    memset(b->mem + SBR_OFF_DATA, 0x5a, b->lbs);
    sbr_chain(b, b->lbs, 0);
}

static void build_read_wrong_direction(SbrBuild *b)
{
    sbr_rw(b, false, 0, 1, 16);
    sbr_chain(b, b->lbs, 0);
}

static void build_write_wrong_direction(SbrBuild *b)
{
    sbr_rw(b, true, 0, 1, 16);
    sbr_chain(b, 0, b->lbs);
}

static void build_huge_transfer(SbrBuild *b)
{
    sbr_rw(b, false, 0, UINT32_MAX, 16);
    sbr_chain(b, 0, b->lbs);
}

static void build_lba_out_of_range(SbrBuild *b)
{
    sbr_rw(b, false, 1ull << 63, 1, 16);
    sbr_chain(b, 0, b->lbs);
}

static void build_lba_wrap(SbrBuild *b)
{
    /* LBA 2^64 - 1, two blocks: the end wraps around. */
    sbr_rw(b, false, UINT64_MAX, 2, 16);
    sbr_chain(b, 0, 2 * b->lbs);
}

static void build_bad_target(SbrBuild *b)
{
    uint8_t cdb[6] = { 0x00 };

    sbr_cmd(b, cdb, sizeof(cdb));
    b->mem[SBR_OFF_REQ + 1] = 7;             /* target 7 */
    sbr_chain(b, 0, 0);
}

static void build_bad_lun_format(SbrBuild *b)
{
    uint8_t cdb[6] = { 0x00 };

    sbr_cmd(b, cdb, sizeof(cdb));
    b->mem[SBR_OFF_REQ] = 2;                 /* lun[0] must be 1 */
    sbr_chain(b, 0, 0);
}

static void build_missing_lun(SbrBuild *b)
{
    uint8_t cdb[6] = { 0x00 };

    b->lun = 300;
    sbr_cmd(b, cdb, sizeof(cdb));
    sbr_chain(b, 0, 0);
}

static void build_unknown_opcode(SbrBuild *b)
{
    uint8_t cdb[6] = { 0xff };

    sbr_cmd(b, cdb, sizeof(cdb));
    sbr_chain(b, 0, 0);
}

static void build_inquiry_huge_alloc(SbrBuild *b)
{
    /* Allocation length 65535 with a 512-byte buffer: truncated, fine. */
    uint8_t cdb[6] = { 0x12, 0, 0, 0xff, 0xff, 0 };

    sbr_cmd(b, cdb, sizeof(cdb));
    sbr_chain(b, 0, 512);
}

/* Control queue kinds: a TMF request at SBR_OFF_REQ, response at RESP. */
static void sbr_tmf(SbrBuild *b, uint32_t type, uint32_t subtype)
{
    VirtioScsiCtrlTmfReq *t = (VirtioScsiCtrlTmfReq *)(b->mem + SBR_OFF_REQ);

    b->control = true;
    memset(t, 0, sizeof(*t));
    t->type = type;
    t->subtype = subtype;
    vufscsi_lun_bytes(t->lun, b->lun);
}

static void build_ctrl_short(SbrBuild *b)
{
    sbr_tmf(b, VIRTIO_SCSI_T_TMF, VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET);
    sbr_seg(b, SBR_OFF_REQ, 2, false);
    sbr_seg(b, SBR_OFF_RESP, 1, true);
}

static void build_ctrl_unknown_type(SbrBuild *b)
{
    sbr_tmf(b, 99, 0);
    sbr_seg(b, SBR_OFF_REQ, sizeof(VirtioScsiCtrlTmfReq), false);
    sbr_seg(b, SBR_OFF_RESP, sizeof(VirtioScsiCtrlTmfResp), true);
}

static void build_ctrl_no_response(SbrBuild *b)
{
    sbr_tmf(b, VIRTIO_SCSI_T_TMF, VIRTIO_SCSI_T_TMF_QUERY_TASK_SET);
    sbr_seg(b, SBR_OFF_REQ, sizeof(VirtioScsiCtrlTmfReq), false);
}

static void build_tmf_bad_subtype(SbrBuild *b)
{
    sbr_tmf(b, VIRTIO_SCSI_T_TMF, 99);
    sbr_seg(b, SBR_OFF_REQ, sizeof(VirtioScsiCtrlTmfReq), false);
    sbr_seg(b, SBR_OFF_RESP, sizeof(VirtioScsiCtrlTmfResp), true);
}

static void build_tmf_bad_target(SbrBuild *b)
{
    sbr_tmf(b, VIRTIO_SCSI_T_TMF, VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET);
    b->mem[SBR_OFF_REQ + 8 + 1] = 9;         /* lun[1]: target 9 */
    sbr_seg(b, SBR_OFF_REQ, sizeof(VirtioScsiCtrlTmfReq), false);
    sbr_seg(b, SBR_OFF_RESP, sizeof(VirtioScsiCtrlTmfResp), true);
}

static const SbrKind sbr_kinds[] = {
    { "good-read", build_good_read },
    { "split-request", build_split_request },
    { "short-request", build_short_request },
    { "short-cdb", build_short_cdb },
    { "no-response", build_no_response },
    { "short-response", build_short_response },
    { "response-readable", build_response_readable },
    { "read-overrun", build_read_overrun },
    { "write-overrun", build_write_overrun },
    { "read-wrong-direction", build_read_wrong_direction },
    { "write-wrong-direction", build_write_wrong_direction },
    { "huge-transfer", build_huge_transfer },
    { "lba-out-of-range", build_lba_out_of_range },
    { "lba-wrap", build_lba_wrap },
    { "bad-target", build_bad_target },
    { "bad-lun-format", build_bad_lun_format },
    { "missing-lun", build_missing_lun },
    { "unknown-opcode", build_unknown_opcode },
    { "inquiry-huge-alloc", build_inquiry_huge_alloc },
    { "ctrl-short", build_ctrl_short },
    { "ctrl-unknown-type", build_ctrl_unknown_type },
    { "ctrl-no-response", build_ctrl_no_response },
    { "tmf-bad-subtype", build_tmf_bad_subtype },
    { "tmf-bad-target", build_tmf_bad_target },
};

static const SbrKind *sbr_find(const char *name)
{
    return kind_find(sbr_kinds, G_N_ELEMENTS(sbr_kinds),
                     sizeof(sbr_kinds[0]), name);
}

bool scsi_bad_request_kind_valid(const char *name)
{
    return sbr_find(name) != NULL;
}

char *scsi_bad_request_kinds(void)
{
    GString *s = g_string_new(NULL);
    unsigned n = 0;

    kind_names(s, sbr_kinds, G_N_ELEMENTS(sbr_kinds), sizeof(sbr_kinds[0]),
               0, &n);
    return g_string_free(s, FALSE);
}

/* What the response area says, when the chain had one. */
static void sbr_report_response(SbrBuild *b, uint32_t used_len, Result *r)
{
    VirtioScsiCmdRespHdr *h = (VirtioScsiCmdRespHdr *)(b->mem + SBR_OFF_RESP);
    const uint8_t *sense = b->mem + SBR_OFF_RESP + sizeof(*h);

    if (b->control) {
        json_object_set_string_member(r->obj, "response",
            vufscsi_response_name(b->mem[SBR_OFF_RESP]));
        json_object_set_int_member(r->obj, "response_code",
                                   b->mem[SBR_OFF_RESP]);
        return;
    }
    if (!b->has_resp) {
        json_object_set_null_member(r->obj, "response");
        return;
    }
    json_object_set_string_member(r->obj, "response",
                                  vufscsi_response_name(h->response));
    json_object_set_string_member(r->obj, "status",
                                  vufscsi_status_name(h->status));
    json_object_set_int_member(r->obj, "resid", h->resid);
    if (h->response == VIRTIO_SCSI_S_OK && h->sense_len >= 14 &&
        h->sense_len <= b->sense_size && (sense[0] & 0x7f) == 0x70) {
        json_object_set_string_member(r->obj, "sense_key",
            vufscsi_sense_key_name(sense[2] & 0x0f));
        json_object_set_int_member(r->obj, "asc", sense[12]);
        json_object_set_int_member(r->obj, "ascq", sense[13]);
    } else if (h->response == VIRTIO_SCSI_S_OK && h->sense_len >= 4 &&
               h->sense_len <= b->sense_size &&
               (sense[0] & 0x7f) == 0x72) {
        json_object_set_string_member(r->obj, "sense_key",
            vufscsi_sense_key_name(sense[1] & 0x0f));
        json_object_set_int_member(r->obj, "asc", sense[2]);
        json_object_set_int_member(r->obj, "ascq", sense[3]);
    }
}

bool cmd_scsi_bad_request(Client *c, const Command *cmd, Result *r,
                          Error **errp)
{
    const SbrKind *kind = sbr_find(cmd->what);
    VufScsiReq *any = c->sreqs[cmd->queue];
    SbrBuild b = { .c = c, .lun = cmd->lun, .cdb_size = any->cdb_size,
                   .sense_size = any->sense_size };
    const char *reaction;
    uint64_t nblocks;
    uint32_t used_len = 0;
    bool closed;
    VufQueue *q;
    int ret;

    g_assert(kind);
    json_object_set_string_member(r->obj, "kind", kind->name);
    if (!scsi_lun_geometry(c, cmd->queue, cmd->lun, &b.lbs, &nblocks,
                           errp)) {
        return false;
    }
    b.lbs = MIN(b.lbs, SBR_DATA_MAX / 2);
    b.mem = vuf_mem_alloc(c->fe, SBR_SCRATCH_BYTES, 4096, &b.gpa);
    if (!b.mem) {
        error_setg(errp, "guest memory exhausted: no room for the request");
        return false;
    }
    memset(b.mem, 0, SBR_SCRATCH_BYTES);
    memset(b.mem + SBR_OFF_RESP, 0xff, 2 * sizeof(VirtioScsiCmdRespHdr));
    kind->build(&b);
    q = vuf_queue(c->fe, b.control ? VUFSCSI_VQ_CONTROL
                                   : VUFSCSI_VQ_REQUEST(cmd->queue));
    json_object_set_string_member(r->obj, "queue_kind",
                                  b.control ? "control" : "request");
    ret = vufq_add(q, b.segs, b.n, c->add_flags, &sbr_token);
    if (ret >= 0) {
        ret = vufq_kick(q);
    }
    if (ret < 0) {
        error_setg(errp, "cannot queue the request: %s",
                   client_strerror(-ret));
        vuf_mem_free(c->fe, b.mem);
        return false;
    }
    reaction = client_reaction(q, &sbr_token, SBR_WAIT_MS, kind->name,
                               &used_len, &closed, errp);
    if (!reaction) {
        vuf_mem_free(c->fe, b.mem);
        return false;
    }
    json_object_set_string_member(r->obj, "reaction", reaction);
    json_object_set_int_member(r->obj, "used_len", used_len);
    if (!strcmp(reaction, "completed")) {
        sbr_report_response(&b, used_len, r);
    }
    res_queue_alive(r, c->fe, q, closed);
    /* A request never completed stays in flight and so does its memory:
     * the device may still write it. */
    if (!strcmp(reaction, "completed")) {
        vuf_mem_free(c->fe, b.mem);
    }
    return true;
}

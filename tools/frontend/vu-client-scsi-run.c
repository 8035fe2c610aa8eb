/*
 * spindle-vu-client: scsi-verify-run and scsi-bad-request.
 *
 * Theory of operation
 * -------------------
 * scsi-verify-run is verify-run (vu-client-run.c) over virtio-scsi: it
 * splits [offset, offset+size) of one LUN into a slice per request queue
 * and starts a thread per queue.  Each thread keeps up to --iodepth
 * WRITE (10 or 16) commands in flight on its own queue, --count of them
 * to the blocks of its slice in a shuffled order (a block written again
 * gets a new generation, whose data is the client's pattern with a seed
 * mixed from --seed and the generation), then reads every block written
 * and checks it against its last generation.  Commands in flight always
 * target different blocks, so the completion order cannot change what is
 * expected.  A command that gets UNIT ATTENTION is sent again, as a guest
 * would.  Each thread tags its commands in its own range, (queue + 1) <<
 * 40 upwards, so tags stay unique across queues.
 *
 * scsi-bad-request puts one hand-built virtio-scsi request in a queue (a
 * request queue, or the control queue for the ctrl-* and tmf-* kinds),
 * kicks, waits up to 0.5 s, and reports what the device did: reaction
 * (completed, no-completion, closed), used_len, and where the framing
 * puts it the response, status and sense; then whether the connection
 * still answers.  Its buffers live in one scratch area of guest memory.
 * It judges nothing; tests do.
 */

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include <glib.h>

#include "vu-client.h"

#define SK_UNIT_ATTENTION       0x6
#define STATUS_GOOD             0x00
#define UA_RETRIES              3

/* ------------------------------------------------------------------------ */
/* scsi-verify-run                                                           */

typedef struct SRunSlot {
    VufScsiReq *req;
    uint64_t block;
    uint32_t gen;
    unsigned ua;                /* unit attentions of this command */
} SRunSlot;

typedef struct SRunQueue {
    Client *c;
    const Command *cmd;
    VufQueue *q;
    unsigned qi;
    uint32_t lbs;               /* the LUN's block size */
    uint64_t base;              /* first byte of this queue's slice */
    uint64_t nblocks;           /* --bs blocks in the slice */
    uint64_t *order;
    uint32_t *gen;
    SRunSlot *slots;
    unsigned *free_slots;
    unsigned nfree;
    unsigned depth;
    uint64_t tag;
    pthread_t thread;
    /* Results. */
    uint64_t writes, reads, unit_attentions;
    char *error;
    bool mismatch;
    uint64_t bad_off, want, got, bad_block;
    uint32_t bad_gen;
    VufQueueStats stats;
} SRunQueue;

static uint64_t srun_seed(uint64_t seed, uint32_t gen)
{
    return seed ^ (gen * 0xD6E8FEB86659FD93ull);
}

static double srun_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static bool srun_fail(SRunQueue *rq, const char *what, int err)
{
    rq->error = g_strdup_printf("request queue %u: %s: %s", rq->qi, what,
                                client_strerror(err));
    return false;
}

static void srun_prepare(SRunQueue *rq, SRunSlot *s, uint64_t i,
                         bool writing, const uint64_t *blocks)
{
    uint64_t bs = rq->cmd->bs, off;
    uint8_t cdb[16];
    unsigned len;

    if (writing) {
        s->block = rq->order[i % rq->nblocks];
        s->gen = ++rq->gen[s->block];
    } else {
        s->block = blocks[i];
        s->gen = rq->gen[s->block];
    }
    off = rq->base + s->block * bs;
    len = scsi_cdb_rw(cdb, writing, off / rq->lbs, bs / rq->lbs,
                      rq->cmd->cdb_bits, false);
    if (writing) {
        pattern_fill(s->req->data, off, bs,
                     srun_seed(rq->cmd->seed, s->gen));
    } else {
        memset(s->req->data, 0, bs);
    }
    vufscsi_prep(s->req, rq->cmd->lun, rq->tag++, cdb, len, bs,
                 writing ? VUFSCSI_DIR_TO_DEV : VUFSCSI_DIR_FROM_DEV);
    s->ua = 0;
}

/* Is this completion a unit attention to resend? */
static bool srun_is_ua(const VufScsiReq *req)
{
    uint8_t key, asc, ascq;

    return req->resp->response == VIRTIO_SCSI_S_OK &&
           req->resp->status == 0x02 &&
           vufscsi_sense(req, &key, &asc, &ascq) && key == SK_UNIT_ATTENTION;
}

static bool srun_check(SRunQueue *rq, SRunSlot *s, bool writing)
{
    const VufScsiReq *req = s->req;
    uint64_t bs = rq->cmd->bs, off = rq->base + s->block * bs;
    uint8_t key = 0, asc = 0, ascq = 0;

    if (req->resp->response != VIRTIO_SCSI_S_OK ||
        req->resp->status != STATUS_GOOD) {
        vufscsi_sense(req, &key, &asc, &ascq);
        rq->error = g_strdup_printf("request queue %u: %s of block %" PRIu64
                                    " (offset %" PRIu64 "): response %s, "
                                    "status %s, sense %s ASC 0x%02x ASCQ "
                                    "0x%02x", rq->qi,
                                    writing ? "WRITE" : "READ", s->block, off,
                                    vufscsi_response_name(
                                        req->resp->response),
                                    vufscsi_status_name(req->resp->status),
                                    vufscsi_sense_key_name(key), asc, ascq);
        return false;
    }
    if (writing) {
        rq->writes++;
        return true;
    }
    rq->reads++;
    if (req->resp->resid != 0) {
        rq->error = g_strdup_printf("request queue %u: READ of block %"
                                    PRIu64 ": resid %u", rq->qi, s->block,
                                    req->resp->resid);
        return false;
    }
    if (!pattern_check(req->data, off, bs, srun_seed(rq->cmd->seed, s->gen),
                       &rq->bad_off, &rq->want, &rq->got)) {
        rq->mismatch = true;
        rq->bad_block = s->block;
        rq->bad_gen = s->gen;
        rq->error = g_strdup_printf("request queue %u: data mismatch at LUN "
                                    "%u offset %" PRIu64 " (block %" PRIu64
                                    ", write generation %u): expected word "
                                    "0x%016" PRIx64 ", found 0x%016" PRIx64,
                                    rq->qi, rq->cmd->lun, rq->bad_off,
                                    s->block, s->gen, rq->want, rq->got);
        return false;
    }
    return true;
}

static bool srun_phase(SRunQueue *rq, uint64_t total, bool writing,
                       const uint64_t *blocks)
{
    unsigned flags = rq->c->add_flags;
    uint64_t next = 0, done = 0;
    int r;

    while (done < total) {
        while (next < total && rq->nfree) {
            SRunSlot *s = &rq->slots[rq->free_slots[rq->nfree - 1]];

            srun_prepare(rq, s, next, writing, blocks);
            r = vufscsi_submit(rq->q, s->req, flags);
            if (r == -ENOSPC && vufq_in_flight(rq->q)) {
                if (writing) {
                    rq->gen[s->block]--;    /* not written after all */
                }
                break;                      /* ring full: harvest first */
            }
            if (r < 0) {
                return srun_fail(rq, "submit", -r);
            }
            rq->nfree--;
            next++;
        }
        r = vufq_kick(rq->q);
        if (r < 0) {
            return srun_fail(rq, "kick", -r);
        }
        r = vufq_wait(rq->q, rq->c->timeout_ns);
        if (r < 0) {
            return srun_fail(rq, "waiting for completions", -r);
        }
        for (;;) {
            VufScsiReq *req;
            SRunSlot *s;

            r = vufscsi_complete(rq->q, &req);
            if (r < 0) {
                return srun_fail(rq, "harvesting completions", -r);
            }
            if (r == 0) {
                break;
            }
            s = req->opaque;
            if (srun_is_ua(req) && s->ua < UA_RETRIES) {
                s->ua++;
                rq->unit_attentions++;
                req->hdr->tag = rq->tag++;
                req->resp->response = VUFSCSI_RESPONSE_NONE;
                req->resp->status = VUFSCSI_STATUS_NONE;
                r = vufscsi_submit(rq->q, req, flags);
                if (r < 0) {
                    return srun_fail(rq, "resubmit", -r);
                }
                continue;
            }
            if (!srun_check(rq, s, writing)) {
                return false;
            }
            rq->free_slots[rq->nfree++] = s - rq->slots;
            done++;
        }
    }
    return true;
}

static void *srun_thread(void *opaque)
{
    SRunQueue *rq = opaque;
    g_autofree uint64_t *written = g_new(uint64_t, rq->nblocks);
    uint64_t n = 0;

    vufq_reset_stats(rq->q);
    if (srun_phase(rq, rq->cmd->count, true, NULL)) {
        for (uint64_t i = 0; i < rq->nblocks; i++) {
            if (rq->gen[rq->order[i]]) {
                written[n++] = rq->order[i];
            }
        }
        srun_phase(rq, n, false, written);
    }
    vufq_collect_interrupts(rq->q);
    vufq_get_stats(rq->q, &rq->stats);
    return NULL;
}

static bool srun_init(SRunQueue *rq, Client *c, const Command *cmd,
                      unsigned qi, uint32_t lbs, uint64_t slice,
                      Error **errp)
{
    g_autoptr(GRand) rand = g_rand_new_with_seed(cmd->seed * 31 + qi);

    rq->c = c;
    rq->cmd = cmd;
    rq->qi = qi;
    rq->lbs = lbs;
    rq->q = vuf_queue(c->fe, VUFSCSI_VQ_REQUEST(qi));
    rq->base = cmd->offset + qi * slice;
    rq->nblocks = slice / cmd->bs;
    rq->depth = MIN(cmd->iodepth, rq->nblocks);
    rq->tag = (uint64_t)(qi + 1) << 40;
    rq->order = g_new(uint64_t, rq->nblocks);
    rq->gen = g_new0(uint32_t, rq->nblocks);
    for (uint64_t i = 0; i < rq->nblocks; i++) {
        rq->order[i] = i;
    }
    for (uint64_t i = rq->nblocks; i > 1; i--) {     /* Fisher-Yates */
        uint64_t j = ((uint64_t)g_rand_int(rand) << 32 | g_rand_int(rand)) %
                     i;
        uint64_t t = rq->order[i - 1];

        rq->order[i - 1] = rq->order[j];
        rq->order[j] = t;
    }
    rq->slots = g_new0(SRunSlot, rq->depth);
    rq->free_slots = g_new(unsigned, rq->depth);
    for (unsigned i = 0; i < rq->depth; i++) {
        rq->slots[i].req = vufscsi_req_new(c->fe, cmd->bs, errp);
        if (!rq->slots[i].req) {
            error_prepend(errp, "scsi-verify-run (%u requests of %" PRIu64
                          " bytes per queue): ", rq->depth, cmd->bs);
            return false;
        }
        rq->slots[i].req->opaque = &rq->slots[i];
        rq->slots[i].req->data_segs = c->opts->segments;
        rq->free_slots[i] = i;
    }
    rq->nfree = rq->depth;
    return true;
}

static void srun_fini(Client *c, SRunQueue *rq)
{
    for (unsigned i = 0; rq->slots && i < rq->depth; i++) {
        vufscsi_req_free(c->fe, rq->slots[i].req);
    }
    g_free(rq->slots);
    g_free(rq->free_slots);
    g_free(rq->order);
    g_free(rq->gen);
    g_free(rq->error);
}

static bool srun_geometry(Client *c, const Command *cmd, unsigned nq,
                          uint32_t *lbs, uint64_t *slice, Error **errp)
{
    uint64_t nblocks;

    if (!scsi_lun_geometry(c, 0, cmd->lun, lbs, &nblocks, errp)) {
        return false;
    }
    if (cmd->bs % *lbs || cmd->offset % *lbs) {
        error_setg(errp, "--bs %" PRIu64 " and --offset %" PRIu64 " must be "
                   "multiples of LUN %u's block size %u", cmd->bs,
                   cmd->offset, cmd->lun, *lbs);
        return false;
    }
    *slice = cmd->size / nq / cmd->bs * cmd->bs;
    if (*slice == 0) {
        error_setg(errp, "--size %" PRIu64 " is too small: each of the %u "
                   "request queues needs at least one --bs block of %"
                   PRIu64 " bytes", cmd->size, nq, cmd->bs);
        return false;
    }
    if (cmd->offset > nblocks * *lbs ||
        cmd->size > nblocks * *lbs - cmd->offset) {
        error_setg(errp, "--offset %" PRIu64 " + --size %" PRIu64 " is "
                   "beyond LUN %u's %" PRIu64 " bytes", cmd->offset,
                   cmd->size, cmd->lun, nblocks * *lbs);
        return false;
    }
    if (cmd->cdb_bits == 10 &&
        ((cmd->offset + cmd->size) / *lbs > UINT32_MAX ||
         cmd->bs / *lbs > UINT16_MAX)) {
        error_setg(errp, "the range or --bs is beyond what a 10-byte CDB "
                   "can address; use --cdb 16");
        return false;
    }
    return true;
}

static void srun_result(Result *r, const Command *cmd, SRunQueue *rqs,
                        unsigned nq, double elapsed)
{
    JsonArray *per_queue = json_array_new();
    uint64_t writes = 0, reads = 0, ua = 0, kicks = 0, interrupts = 0;

    for (unsigned i = 0; i < nq; i++) {
        JsonObject *o = json_object_new();

        json_object_set_int_member(o, "queue", rqs[i].qi);
        json_object_set_int_member(o, "writes", rqs[i].writes);
        json_object_set_int_member(o, "reads", rqs[i].reads);
        json_object_set_int_member(o, "kicks", rqs[i].stats.kicks);
        json_object_set_int_member(o, "interrupts", rqs[i].stats.interrupts);
        json_array_add_object_element(per_queue, o);
        writes += rqs[i].writes;
        reads += rqs[i].reads;
        ua += rqs[i].unit_attentions;
        kicks += rqs[i].stats.kicks;
        interrupts += rqs[i].stats.interrupts;
    }
    json_object_set_int_member(r->obj, "lun", cmd->lun);
    json_object_set_int_member(r->obj, "queues", nq);
    json_object_set_int_member(r->obj, "offset", cmd->offset);
    json_object_set_int_member(r->obj, "size", cmd->size);
    json_object_set_int_member(r->obj, "bs", cmd->bs);
    json_object_set_int_member(r->obj, "iodepth", cmd->iodepth);
    json_object_set_int_member(r->obj, "cdb", cmd->cdb_bits);
    json_object_set_int_member(r->obj, "seed", cmd->seed);
    json_object_set_int_member(r->obj, "writes", writes);
    json_object_set_int_member(r->obj, "reads", reads);
    json_object_set_int_member(r->obj, "bytes_verified", reads * cmd->bs);
    json_object_set_int_member(r->obj, "unit_attentions", ua);
    json_object_set_double_member(r->obj, "elapsed_s", elapsed);
    json_object_set_int_member(r->obj, "kicks", kicks);
    json_object_set_int_member(r->obj, "interrupts", interrupts);
    json_object_set_array_member(r->obj, "per_queue", per_queue);
}

bool cmd_scsi_verify_run(Client *c, const Command *cmd, Result *r,
                         Error **errp)
{
    unsigned nq = cmd->run_queues ? cmd->run_queues : client_io_queues(c);
    g_autofree SRunQueue *rqs = g_new0(SRunQueue, nq);
    unsigned started = 0;
    uint64_t slice;
    uint32_t lbs;
    double start;
    bool ok = true;

    if (!srun_geometry(c, cmd, nq, &lbs, &slice, errp)) {
        return false;
    }
    for (unsigned i = 0; i < nq && ok; i++) {
        ok = srun_init(&rqs[i], c, cmd, i, lbs, slice, errp);
    }
    start = srun_now();
    for (unsigned i = 0; i < nq && ok; i++) {
        int err = pthread_create(&rqs[i].thread, NULL, srun_thread, &rqs[i]);

        if (err) {
            error_setg_errno(errp, err, "cannot start the thread of request "
                             "queue %u", i);
            ok = false;
        } else {
            started++;
        }
    }
    for (unsigned i = 0; i < started; i++) {
        pthread_join(rqs[i].thread, NULL);
    }
    if (ok) {
        srun_result(r, cmd, rqs, nq, srun_now() - start);
        for (unsigned i = 0; i < nq; i++) {
            if (rqs[i].mismatch) {
                JsonObject *m = json_object_new();
                g_autofree char *w = g_strdup_printf("0x%016" PRIx64,
                                                     rqs[i].want);
                g_autofree char *g = g_strdup_printf("0x%016" PRIx64,
                                                     rqs[i].got);

                json_object_set_int_member(m, "queue", i);
                json_object_set_int_member(m, "offset", rqs[i].bad_off);
                json_object_set_int_member(m, "block", rqs[i].bad_block);
                json_object_set_int_member(m, "generation", rqs[i].bad_gen);
                json_object_set_string_member(m, "expected", w);
                json_object_set_string_member(m, "found", g);
                json_object_set_object_member(r->obj, "mismatch", m);
            }
            if (rqs[i].error && ok) {
                error_setg(errp, "%s", rqs[i].error);
                ok = false;
            }
        }
    }
    for (unsigned i = 0; i < nq; i++) {
        srun_fini(c, &rqs[i]);
    }
    return ok;
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
#define SBR_ALIVE_WAIT_MS   2000
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
    for (size_t i = 0; i < G_N_ELEMENTS(sbr_kinds); i++) {
        if (!strcmp(sbr_kinds[i].name, name)) {
            return &sbr_kinds[i];
        }
    }
    return NULL;
}

bool scsi_bad_request_kind_valid(const char *name)
{
    return sbr_find(name) != NULL;
}

char *scsi_bad_request_kinds(void)
{
    GString *s = g_string_new(NULL);

    for (size_t i = 0; i < G_N_ELEMENTS(sbr_kinds); i++) {
        g_string_append_printf(s, "%s%s", i ? ", " : "", sbr_kinds[i].name);
    }
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
    bool closed = false;
    VufQueue *q;
    void *token;
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
    ret = vufq_wait(q, SBR_WAIT_MS * 1000000ll);
    if (ret == 0) {
        ret = vufq_get_used(q, &token, &used_len);
        reaction = ret == 1 && token == &sbr_token ? "completed"
                                                    : "bad-used-entry";
    } else if (ret == -ECONNRESET) {
        reaction = "closed";
        closed = true;
    } else if (ret == -ETIMEDOUT) {
        reaction = "no-completion";
    } else {
        error_setg(errp, "waiting after %s: %s", kind->name,
                   client_strerror(-ret));
        vuf_mem_free(c->fe, b.mem);
        return false;
    }
    json_object_set_string_member(r->obj, "reaction", reaction);
    json_object_set_int_member(r->obj, "used_len", used_len);
    if (!strcmp(reaction, "completed")) {
        sbr_report_response(&b, used_len, r);
    }
    json_object_set_boolean_member(r->obj, "queue_broken", vufq_broken(q));
    json_object_set_boolean_member(r->obj, "alive",
                                   !closed && vuf_check_alive(
                                       c->fe, SBR_ALIVE_WAIT_MS));
    /* A request never completed stays in flight and so does its memory:
     * the device may still write it. */
    if (!strcmp(reaction, "completed")) {
        vuf_mem_free(c->fe, b.mem);
    }
    return true;
}

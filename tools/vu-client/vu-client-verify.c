/*
 * spindle-vu-client: the verify-run engine (verify-run, scsi-verify-run).
 *
 * Theory of operation
 * -------------------
 * The range [offset, offset+size) is split into one slice per queue and
 * each queue gets a thread (the model spindle-bench follows).  Each thread
 * keeps up to --iodepth requests in flight on its own queue: first --count
 * writes of --bs bytes to the blocks of its slice in a shuffled order (a
 * block written again gets a new generation, and the data of a block is
 * the client's pattern with a seed mixed from --seed and the generation,
 * so stale data shows), then one read of every block written, checked
 * against its last generation.  Requests in flight always target
 * different blocks (a window of at most one pass over the shuffled order),
 * so completion order cannot change the expected contents.  The first
 * error or mismatch stops that thread; the first queue's is reported, a
 * mismatch with its disk offset, block and generation.
 *
 * The slots' requests are the library's VufBlkReq or VufScsiReq, after
 * the session's device; the engine reaches their data buffer, data_segs
 * and opaque (which points back at the slot) through a layout table.  The
 * device-specific parts (how a request is prepared and sent, and what its
 * answer means) are a VerifyOps: see vu-client-verify.h.
 */

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include <glib.h>

#include "util/error.h"
#include "vu-client-pattern.h"
#include "vu-client-result.h"
#include "vu-client-session.h"
#include "vu-client-verify.h"

/* The pattern seed of generation gen of a block. */
static uint64_t verify_seed(uint64_t seed, uint32_t gen)
{
    return seed ^ (gen * 0xD6E8FEB86659FD93ull);
}

static double verify_now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

bool verify_fail(VerifyQueue *vq, const char *what, int err)
{
    vq->error = g_strdup_printf("%s %u: %s: %s", vq->run->ops->queue_name,
                                vq->qi, what, client_strerror(err));
    return false;
}

/* Make slot s request i of the phase: the write or read of its block. */
static void verify_prepare(VerifyQueue *vq, VerifySlot *s, uint64_t i,
                           bool writing, const uint64_t *blocks)
{
    const Command *cmd = vq->run->cmd;

    if (writing) {
        s->block = vq->order[i % vq->nblocks];
        s->gen = ++vq->gen[s->block];
        pattern_fill(s->data, vq->base + s->block * cmd->bs, cmd->bs,
                     verify_seed(cmd->seed, s->gen));
    } else {
        s->block = blocks[i];
        s->gen = vq->gen[s->block];
        memset(s->data, 0, cmd->bs);
    }
    s->resent = 0;
    vq->run->ops->prepare(vq, s, writing);
}

/* Count a request the device completed and check a read's data; false
 * (vq->error set) on a mismatch. */
static bool verify_check(VerifyQueue *vq, VerifySlot *s, bool writing)
{
    const VerifyRun *run = vq->run;
    uint64_t bs = run->cmd->bs, off = vq->base + s->block * bs;

    if (writing) {
        vq->writes++;
        return true;
    }
    vq->reads++;
    if (run->ops->read_whole && !run->ops->read_whole(vq, s)) {
        return false;
    }
    if (!pattern_check(s->data, off, bs, verify_seed(run->cmd->seed, s->gen),
                       &vq->bad_off, &vq->want, &vq->got)) {
        vq->mismatch = true;
        vq->bad_block = s->block;
        vq->bad_gen = s->gen;
        vq->error = g_strdup_printf("%s %u: data mismatch at %s offset %"
                                    PRIu64 " (block %" PRIu64 ", write "
                                    "generation %u): expected word 0x%016"
                                    PRIx64 ", found 0x%016" PRIx64,
                                    run->ops->queue_name, vq->qi,
                                    run->target, vq->bad_off, s->block,
                                    s->gen, vq->want, vq->got);
        return false;
    }
    return true;
}

/* Where the library's request types keep what the engine sets and reads:
 * the data buffer, data_segs and opaque. */
typedef struct VerifyReqLayout {
    size_t data, segs, opaque;
} VerifyReqLayout;

static const VerifyReqLayout blk_layout = {
    offsetof(VufBlkReq, data), offsetof(VufBlkReq, data_segs),
    offsetof(VufBlkReq, opaque),
};
static const VerifyReqLayout scsi_layout = {
    offsetof(VufScsiReq, data), offsetof(VufScsiReq, data_segs),
    offsetof(VufScsiReq, opaque),
};

static bool verify_scsi(const VerifyRun *run)
{
    return run->c->opts->device == VUF_DEVICE_SCSI;
}

static const VerifyReqLayout *verify_layout(const VerifyRun *run)
{
    return verify_scsi(run) ? &scsi_layout : &blk_layout;
}

/* The slot of a request the device completed (its opaque). */
static VerifySlot *verify_slot_of(const VerifyRun *run, void *req)
{
    VerifySlot *s;

    memcpy(&s, (uint8_t *)req + verify_layout(run)->opaque, sizeof(s));
    return s;
}

/* Run total requests of one phase, at most depth in flight. */
static bool verify_phase(VerifyQueue *vq, uint64_t total, bool writing,
                         const uint64_t *blocks)
{
    const VerifyOps *ops = vq->run->ops;
    uint64_t next = 0, done = 0;
    int r;

    while (done < total) {
        while (next < total && vq->nfree) {
            VerifySlot *s = &vq->slots[vq->free_slots[vq->nfree - 1]];

            verify_prepare(vq, s, next, writing, blocks);
            r = ops->submit(vq, s);
            if (r == -ENOSPC && vufq_in_flight(vq->q)) {
                if (writing) {
                    vq->gen[s->block]--;    /* not written after all */
                }
                break;                      /* ring full: harvest first */
            }
            if (r < 0) {
                return verify_fail(vq, "submit", -r);
            }
            vq->nfree--;
            next++;
        }
        r = vufq_kick(vq->q);
        if (r < 0) {
            return verify_fail(vq, "kick", -r);
        }
        r = vufq_wait(vq->q, vq->run->c->timeout_ns);
        if (r < 0) {
            return verify_fail(vq, "waiting for completions", -r);
        }
        for (;;) {
            VerifySlot *s;
            void *req;

            r = vufq_get_used(vq->q, &req, NULL);
            if (r < 0) {
                return verify_fail(vq, "harvesting completions", -r);
            }
            if (r == 0) {
                break;
            }
            s = verify_slot_of(vq->run, req);
            switch (ops->answer(vq, s, writing)) {
            case VERIFY_ANSWER_RESENT:
                continue;
            case VERIFY_ANSWER_FAILED:
                return false;
            case VERIFY_ANSWER_DONE:
                break;
            }
            if (!verify_check(vq, s, writing)) {
                return false;
            }
            vq->free_slots[vq->nfree++] = s - vq->slots;
            done++;
        }
    }
    return true;
}

static void *verify_queue_thread(void *opaque)
{
    VerifyQueue *vq = opaque;
    g_autofree uint64_t *written = g_new(uint64_t, vq->nblocks);
    uint64_t n = 0;

    vufq_reset_stats(vq->q);
    if (verify_phase(vq, vq->run->cmd->count, true, NULL)) {
        for (uint64_t i = 0; i < vq->nblocks; i++) {
            if (vq->gen[vq->order[i]]) {
                written[n++] = vq->order[i];
            }
        }
        verify_phase(vq, n, false, written);
    }
    vufq_collect_interrupts(vq->q);
    vufq_get_stats(vq->q, &vq->stats);
    return NULL;
}

/* A request for slot s, its data buffer and its data_segs. */
static bool verify_slot_init(VerifyQueue *vq, VerifySlot *s, Error **errp)
{
    const VerifyRun *run = vq->run;
    const VerifyReqLayout *l = verify_layout(run);
    VuFrontend *fe = run->c->fe;
    unsigned segs = run->c->opts->segments;
    uint8_t *req = verify_scsi(run)
                   ? (void *)vufscsi_req_new(fe, run->cmd->bs, errp)
                   : (void *)vufblk_req_new(fe, run->cmd->bs, errp);

    if (!req) {
        error_prepend(errp, "%s (%u %ss x %u requests of %" PRIu64
                      " bytes): ", run->cmd->name, run->nq,
                      run->ops->queue_name, vq->depth, run->cmd->bs);
        return false;
    }
    s->req = req;
    memcpy(req + l->opaque, &s, sizeof(s));
    memcpy(req + l->segs, &segs, sizeof(segs));
    memcpy(&s->data, req + l->data, sizeof(s->data));
    return true;
}

static void verify_slot_fini(const VerifyRun *run, VerifySlot *s)
{
    if (verify_scsi(run)) {
        vufscsi_req_free(run->c->fe, s->req);
    } else {
        vufblk_req_free(run->c->fe, s->req);
    }
}

static bool verify_queue_init(VerifyRun *run, VerifyQueue *vq, unsigned qi,
                              Error **errp)
{
    const Command *cmd = run->cmd;
    g_autoptr(GRand) rand = g_rand_new_with_seed(cmd->seed * 31 + qi);

    vq->run = run;
    vq->qi = qi;
    vq->q = vuf_queue(run->c->fe, run->ops->vq_index(qi));
    vq->base = cmd->offset + qi * run->slice;
    vq->nblocks = run->slice / cmd->bs;
    vq->depth = MIN(cmd->iodepth, vq->nblocks);
    vq->tag = (uint64_t)(qi + 1) << 40;
    vq->order = g_new(uint64_t, vq->nblocks);
    vq->gen = g_new0(uint32_t, vq->nblocks);
    for (uint64_t i = 0; i < vq->nblocks; i++) {
        vq->order[i] = i;
    }
    for (uint64_t i = vq->nblocks; i > 1; i--) {     /* Fisher-Yates */
        uint64_t j = ((uint64_t)g_rand_int(rand) << 32 | g_rand_int(rand)) %
                     i;
        uint64_t t = vq->order[i - 1];

        vq->order[i - 1] = vq->order[j];
        vq->order[j] = t;
    }
    vq->slots = g_new0(VerifySlot, vq->depth);
    vq->free_slots = g_new(unsigned, vq->depth);
    for (unsigned i = 0; i < vq->depth; i++) {
        if (!verify_slot_init(vq, &vq->slots[i], errp)) {
            return false;
        }
        vq->free_slots[i] = i;
    }
    vq->nfree = vq->depth;
    return true;
}

static void verify_queue_fini(VerifyQueue *vq)
{
    for (unsigned i = 0; vq->slots && i < vq->depth; i++) {
        verify_slot_fini(vq->run, &vq->slots[i]);
    }
    g_free(vq->slots);
    g_free(vq->free_slots);
    g_free(vq->order);
    g_free(vq->gen);
    g_free(vq->error);
}

bool verify_run_slice(VerifyRun *run, Error **errp)
{
    const Command *cmd = run->cmd;

    run->slice = cmd->size / run->nq / cmd->bs * cmd->bs;
    if (run->slice == 0) {
        error_setg(errp, "--size %" PRIu64 " is too small: each of the %u "
                   "%ss needs at least one --bs block of %" PRIu64 " bytes",
                   cmd->size, run->nq, run->ops->queue_name, cmd->bs);
        return false;
    }
    return true;
}

/* What a queue, or the whole run, did. */
typedef struct VerifyCounts {
    uint64_t writes, reads;
    VufQueueStats stats;
} VerifyCounts;

static void verify_counts_add(VerifyCounts *sum, const VerifyQueue *vq)
{
    sum->writes += vq->writes;
    sum->reads += vq->reads;
    sum->stats.kicks += vq->stats.kicks;
    sum->stats.kicks_avoided += vq->stats.kicks_avoided;
    sum->stats.interrupts += vq->stats.interrupts;
    sum->stats.wakeups += vq->stats.wakeups;
}

static void verify_res_counts(JsonObject *o, const VerifyCounts *n)
{
    json_object_set_int_member(o, "writes", n->writes);
    json_object_set_int_member(o, "reads", n->reads);
    res_queue_stats(o, &n->stats);
}

/* The run's result: the queues' counters and elapsed, for any device. */
static void verify_result(const VerifyRun *run, Result *r, double elapsed)
{
    const Command *cmd = run->cmd;
    JsonArray *per_queue = json_array_new();
    VerifyCounts total = { 0 };

    for (unsigned i = 0; i < run->nq; i++) {
        VerifyCounts one = { 0 };

        verify_counts_add(&one, &run->queues[i]);
        verify_counts_add(&total, &run->queues[i]);
        verify_res_counts(res_queue_entry(per_queue, run->queues[i].qi),
                          &one);
    }
    res_int(r, "queues", run->nq);
    res_int(r, "offset", cmd->offset);
    res_int(r, "size", cmd->size);
    res_int(r, "bs", cmd->bs);
    res_int(r, "iodepth", cmd->iodepth);
    res_int(r, "seed", cmd->seed);
    verify_res_counts(r->obj, &total);
    res_int(r, "bytes_verified", total.reads * cmd->bs);
    json_object_set_double_member(r->obj, "elapsed_s", elapsed);
    json_object_set_array_member(r->obj, "per_queue", per_queue);
    if (run->ops->result) {
        run->ops->result(run, r);
    }
}

/* The JSON "mismatch" member of queue vq's mismatch. */
static void verify_res_mismatch(Result *r, const VerifyQueue *vq)
{
    JsonObject *m = json_object_new();
    g_autofree char *w = g_strdup_printf("0x%016" PRIx64, vq->want);
    g_autofree char *g = g_strdup_printf("0x%016" PRIx64, vq->got);

    json_object_set_int_member(m, "queue", vq->qi);
    json_object_set_int_member(m, "offset", vq->bad_off);
    json_object_set_int_member(m, "block", vq->bad_block);
    json_object_set_int_member(m, "generation", vq->bad_gen);
    json_object_set_string_member(m, "expected", w);
    json_object_set_string_member(m, "found", g);
    json_object_set_object_member(r->obj, "mismatch", m);
}

bool verify_run(VerifyRun *run, Result *r, Error **errp)
{
    unsigned nq = run->nq, started = 0;
    VerifyQueue *vqs = g_new0(VerifyQueue, nq);
    double start;
    bool ok = true;

    run->queues = vqs;
    for (unsigned i = 0; i < nq && ok; i++) {
        ok = verify_queue_init(run, &vqs[i], i, errp);
    }
    start = verify_now_s();
    for (unsigned i = 0; i < nq && ok; i++) {
        int err = pthread_create(&vqs[i].thread, NULL, verify_queue_thread,
                                 &vqs[i]);

        if (err) {
            error_setg_errno(errp, err, "cannot start the thread of %s %u",
                             run->ops->queue_name, i);
            ok = false;
        } else {
            started++;
        }
    }
    for (unsigned i = 0; i < started; i++) {
        pthread_join(vqs[i].thread, NULL);
    }
    if (ok) {
        verify_result(run, r, verify_now_s() - start);
        for (unsigned i = 0; i < nq; i++) {
            if (vqs[i].mismatch) {
                verify_res_mismatch(r, &vqs[i]);
            }
            if (vqs[i].error && ok) {
                error_setg(errp, "%s", vqs[i].error);
                ok = false;
            }
        }
    }
    for (unsigned i = 0; i < nq; i++) {
        /* run is set on the queues verify_queue_init() reached */
        if (vqs[i].run) {
            verify_queue_fini(&vqs[i]);
        }
    }
    g_free(vqs);
    run->queues = NULL;
    return ok;
}

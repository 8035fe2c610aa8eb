/*
 * spindle-vu-client: the verify-run and malformed commands.
 *
 * Theory of operation
 * -------------------
 * verify-run splits [offset, offset+size) into one slice per queue and
 * starts one thread per queue (the model spindle-bench follows).  Each
 * thread keeps up to --iodepth requests in flight on its own queue: first
 * --count writes of --bs bytes to the blocks of its slice in a shuffled
 * order (a block written twice gets a new generation, and the data of a
 * block is the client's pattern with a seed mixed from --seed and the
 * generation, so stale data shows), then one read of every block written,
 * checked against its last generation.  Requests in flight always target
 * different blocks (a window of at most one pass over the shuffled order),
 * so completion order cannot change the expected contents.  The first
 * mismatch stops that thread and is reported with its disk offset.
 *
 * malformed sends one bad message, or puts one bad chain in a ring, and
 * reports what the back-end did: replied (with an error or an ack), closed
 * the connection, ignored it, stopped the queue, or completed the request
 * (and with which status); then whether the connection still answers a
 * GET_FEATURES.  It judges nothing: tests decide which reactions are fine.
 */

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include <glib.h>

#include "vu-client.h"

#define SECTOR                  VIRTIO_BLK_SECTOR_SIZE
#define MALFORMED_WAIT_MS       1000
#define ALIVE_WAIT_MS           2000

/* ------------------------------------------------------------------------ */
/* verify-run                                                                */

typedef struct RunSlot {
    VufBlkReq *req;
    uint64_t block;
    uint32_t gen;
} RunSlot;

typedef struct RunQueue {
    Client *c;
    const Command *cmd;
    VufQueue *q;
    unsigned qi;
    uint64_t base;              /* first byte of this queue's slice */
    uint64_t nblocks;
    uint64_t *order;            /* shuffled block numbers */
    uint32_t *gen;              /* generation last written, per block */
    RunSlot *slots;
    unsigned *free_slots;
    unsigned nfree;
    unsigned depth;
    pthread_t thread;
    /* Results. */
    uint64_t writes;
    uint64_t reads;
    char *error;                /* NULL on success */
    bool mismatch;
    uint64_t bad_off, want, got, bad_block;
    uint32_t bad_gen;
    VufQueueStats stats;
} RunQueue;

static uint64_t gen_seed(uint64_t seed, uint32_t gen)
{
    return seed ^ (gen * 0xD6E8FEB86659FD93ull);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static bool run_fail(RunQueue *rq, const char *what, int err)
{
    rq->error = g_strdup_printf("queue %u: %s: %s", rq->qi, what,
                                client_strerror(err));
    return false;
}

/* Prepare request i of the phase in slot s. */
static void run_prepare(RunQueue *rq, RunSlot *s, uint64_t i, bool writing,
                        const uint64_t *blocks)
{
    uint64_t bs = rq->cmd->bs;

    if (writing) {
        s->block = rq->order[i % rq->nblocks];
        s->gen = ++rq->gen[s->block];
        pattern_fill(s->req->data, rq->base + s->block * bs, bs,
                     gen_seed(rq->cmd->seed, s->gen));
        vufblk_prep_write(s->req, (rq->base + s->block * bs) / SECTOR, bs);
    } else {
        s->block = blocks[i];
        s->gen = rq->gen[s->block];
        memset(s->req->data, 0, bs);
        vufblk_prep_read(s->req, (rq->base + s->block * bs) / SECTOR, bs);
    }
}

/* Check a completed request; false (rq->error set) on any problem. */
static bool run_check(RunQueue *rq, RunSlot *s, bool writing)
{
    uint64_t bs = rq->cmd->bs, off = rq->base + s->block * bs;
    int status = *s->req->status;

    if (status != VIRTIO_BLK_S_OK) {
        rq->error = g_strdup_printf("queue %u: %s of block %" PRIu64
                                    " (offset %" PRIu64 "): the device "
                                    "answered %s", rq->qi,
                                    writing ? "write" : "read", s->block,
                                    off, vufblk_status_name(status));
        return false;
    }
    if (writing) {
        rq->writes++;
        return true;
    }
    rq->reads++;
    if (!pattern_check(s->req->data, off, bs,
                       gen_seed(rq->cmd->seed, s->gen), &rq->bad_off,
                       &rq->want, &rq->got)) {
        rq->mismatch = true;
        rq->bad_block = s->block;
        rq->bad_gen = s->gen;
        rq->error = g_strdup_printf("queue %u: data mismatch at disk offset "
                                    "%" PRIu64 " (block %" PRIu64 ", write "
                                    "generation %u): expected word 0x%016"
                                    PRIx64 ", found 0x%016" PRIx64, rq->qi,
                                    rq->bad_off, s->block, s->gen, rq->want,
                                    rq->got);
        return false;
    }
    return true;
}

/* Run total requests of one phase, at most depth in flight. */
static bool run_phase(RunQueue *rq, uint64_t total, bool writing,
                      const uint64_t *blocks)
{
    unsigned flags = rq->c->add_flags;
    uint64_t next = 0, done = 0;
    int r;

    while (done < total) {
        while (next < total && rq->nfree) {
            RunSlot *s = &rq->slots[rq->free_slots[rq->nfree - 1]];

            run_prepare(rq, s, next, writing, blocks);
            r = vufblk_submit(rq->q, s->req, flags);
            if (r == -ENOSPC && vufq_in_flight(rq->q)) {
                if (writing) {
                    rq->gen[s->block]--;    /* not written after all */
                }
                break;                      /* ring full: harvest first */
            }
            if (r < 0) {
                return run_fail(rq, "submit", -r);
            }
            rq->nfree--;
            next++;
        }
        r = vufq_kick(rq->q);
        if (r < 0) {
            return run_fail(rq, "kick", -r);
        }
        r = vufq_wait(rq->q, rq->c->timeout_ns);
        if (r < 0) {
            return run_fail(rq, "waiting for completions", -r);
        }
        for (;;) {
            VufBlkReq *req;
            RunSlot *s;

            r = vufblk_complete(rq->q, &req);
            if (r < 0) {
                return run_fail(rq, "harvesting completions", -r);
            }
            if (r == 0) {
                break;
            }
            s = req->opaque;
            if (!run_check(rq, s, writing)) {
                return false;
            }
            rq->free_slots[rq->nfree++] = s - rq->slots;
            done++;
        }
    }
    return true;
}

static void *run_queue_thread(void *opaque)
{
    RunQueue *rq = opaque;
    g_autofree uint64_t *written = g_new(uint64_t, rq->nblocks);
    uint64_t i, n = 0;

    vufq_reset_stats(rq->q);
    if (run_phase(rq, rq->cmd->count, true, NULL)) {
        for (i = 0; i < rq->nblocks; i++) {
            if (rq->gen[rq->order[i]]) {
                written[n++] = rq->order[i];
            }
        }
        run_phase(rq, n, false, written);
    }
    vufq_collect_interrupts(rq->q);
    vufq_get_stats(rq->q, &rq->stats);
    return NULL;
}

static bool run_queue_init(RunQueue *rq, Client *c, const Command *cmd,
                           unsigned qi, unsigned nq, uint64_t slice,
                           Error **errp)
{
    g_autoptr(GRand) rand = g_rand_new_with_seed(cmd->seed * 31 + qi);
    uint64_t i;

    rq->c = c;
    rq->cmd = cmd;
    rq->qi = qi;
    rq->q = vuf_queue(c->fe, qi);
    rq->base = cmd->offset + qi * slice;
    rq->nblocks = slice / cmd->bs;
    rq->depth = MIN(cmd->iodepth, rq->nblocks);
    rq->order = g_new(uint64_t, rq->nblocks);
    rq->gen = g_new0(uint32_t, rq->nblocks);
    for (i = 0; i < rq->nblocks; i++) {
        rq->order[i] = i;
    }
    for (i = rq->nblocks; i > 1; i--) {     /* Fisher-Yates */
        uint64_t j = ((uint64_t)g_rand_int(rand) << 32 | g_rand_int(rand)) %
                     i;
        uint64_t t = rq->order[i - 1];

        rq->order[i - 1] = rq->order[j];
        rq->order[j] = t;
    }
    rq->slots = g_new0(RunSlot, rq->depth);
    rq->free_slots = g_new(unsigned, rq->depth);
    for (i = 0; i < rq->depth; i++) {
        rq->slots[i].req = vufblk_req_new(c->fe, cmd->bs, errp);
        if (!rq->slots[i].req) {
            error_prepend(errp, "verify-run (%u queues x %u requests of %"
                          PRIu64 " bytes): ", nq, rq->depth,
                          cmd->bs);
            return false;
        }
        rq->slots[i].req->opaque = &rq->slots[i];
        rq->slots[i].req->data_segs = c->opts->segments;
        rq->free_slots[i] = i;
    }
    rq->nfree = rq->depth;
    return true;
}

static void run_queue_fini(Client *c, RunQueue *rq)
{
    unsigned i;

    for (i = 0; rq->slots && i < rq->depth; i++) {
        vufblk_req_free(c->fe, rq->slots[i].req);
    }
    g_free(rq->slots);
    g_free(rq->free_slots);
    g_free(rq->order);
    g_free(rq->gen);
    g_free(rq->error);
}

static bool check_run_geometry(Client *c, const Command *cmd, unsigned nq,
                               uint64_t *slice, Error **errp)
{
    const VirtioBlkConfig *cfg = vuf_blk_config(c->fe);

    *slice = cmd->size / nq / cmd->bs * cmd->bs;
    if (*slice == 0) {
        error_setg(errp, "--size %" PRIu64 " is too small: each of the %u "
                   "queues needs at least one --bs block of %" PRIu64
                   " bytes", cmd->size, nq, cmd->bs);
        return false;
    }
    if (cfg && (cmd->offset > cfg->capacity * SECTOR ||
                cmd->size > cfg->capacity * SECTOR - cmd->offset)) {
        error_setg(errp, "--offset %" PRIu64 " + --size %" PRIu64 " is "
                   "beyond the disk's %" PRIu64 " bytes", cmd->offset,
                   cmd->size, cfg->capacity * SECTOR);
        return false;
    }
    return true;
}

static void run_result(Result *r, const Command *cmd, RunQueue *rqs,
                       unsigned nq, double elapsed)
{
    JsonArray *per_queue = json_array_new();
    VufQueueStats total = { 0 };
    uint64_t writes = 0, reads = 0;
    unsigned i;

    for (i = 0; i < nq; i++) {
        RunQueue *rq = &rqs[i];
        JsonObject *o = json_object_new();

        json_object_set_int_member(o, "queue", rq->qi);
        json_object_set_int_member(o, "writes", rq->writes);
        json_object_set_int_member(o, "reads", rq->reads);
        json_object_set_int_member(o, "kicks", rq->stats.kicks);
        json_object_set_int_member(o, "kicks_avoided",
                                   rq->stats.kicks_avoided);
        json_object_set_int_member(o, "interrupts", rq->stats.interrupts);
        json_array_add_object_element(per_queue, o);
        writes += rq->writes;
        reads += rq->reads;
        total.kicks += rq->stats.kicks;
        total.kicks_avoided += rq->stats.kicks_avoided;
        total.interrupts += rq->stats.interrupts;
        total.wakeups += rq->stats.wakeups;
    }
    json_object_set_int_member(r->obj, "queues", nq);
    json_object_set_int_member(r->obj, "offset", cmd->offset);
    json_object_set_int_member(r->obj, "size", cmd->size);
    json_object_set_int_member(r->obj, "bs", cmd->bs);
    json_object_set_int_member(r->obj, "iodepth", cmd->iodepth);
    json_object_set_int_member(r->obj, "seed", cmd->seed);
    json_object_set_int_member(r->obj, "writes", writes);
    json_object_set_int_member(r->obj, "reads", reads);
    json_object_set_int_member(r->obj, "bytes_verified", reads * cmd->bs);
    json_object_set_double_member(r->obj, "elapsed_s", elapsed);
    json_object_set_int_member(r->obj, "kicks", total.kicks);
    json_object_set_int_member(r->obj, "kicks_avoided", total.kicks_avoided);
    json_object_set_int_member(r->obj, "interrupts", total.interrupts);
    json_object_set_int_member(r->obj, "wakeups", total.wakeups);
    json_object_set_array_member(r->obj, "per_queue", per_queue);
}

bool cmd_verify_run(Client *c, const Command *cmd, Result *r, Error **errp)
{
    unsigned nq = cmd->run_queues ? cmd->run_queues : vuf_num_queues(c->fe);
    g_autofree RunQueue *rqs = g_new0(RunQueue, nq);
    uint64_t slice;
    double start;
    bool ok = true;
    unsigned i, started = 0;

    if (!check_run_geometry(c, cmd, nq, &slice, errp)) {
        return false;
    }
    extents_forget(c, cmd->offset, cmd->size);
    for (i = 0; i < nq && ok; i++) {
        ok = run_queue_init(&rqs[i], c, cmd, i, nq, slice, errp);
    }
    start = now_s();
    for (i = 0; i < nq && ok; i++) {
        int err = pthread_create(&rqs[i].thread, NULL, run_queue_thread,
                                 &rqs[i]);

        if (err) {
            error_setg_errno(errp, err, "cannot start the thread of queue %u",
                             i);
            ok = false;
        } else {
            started++;
        }
    }
    for (i = 0; i < started; i++) {
        pthread_join(rqs[i].thread, NULL);
    }
    if (ok) {
        run_result(r, cmd, rqs, nq, now_s() - start);
        for (i = 0; i < nq; i++) {
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
    for (i = 0; i < nq; i++) {
        run_queue_fini(c, &rqs[i]);
    }
    return ok;
}

/* ------------------------------------------------------------------------ */
/* malformed                                                                 */

typedef struct MalformedMsg {
    const char *name;
    void (*build)(Client *c, VhostUserHeader *hdr, uint8_t *payload,
                  size_t *len, int *fds, size_t *nfds);
} MalformedMsg;

/* Header flags of a well-behaved request: NEED_REPLY with REPLY_ACK. */
static uint32_t request_flags(Client *c)
{
    bool ack = vuf_protocol_features(c->fe) &
               VUF_BIT(VHOST_USER_PROTOCOL_F_REPLY_ACK);

    return VHOST_USER_VERSION | (ack ? VHOST_USER_NEED_REPLY_MASK : 0);
}

/* Fill in the header and a payload of size bytes copied from body. */
static void build_msg(VhostUserHeader *hdr, uint8_t *payload, size_t *len,
                      uint32_t request, uint32_t flags, const void *body,
                      size_t size)
{
    hdr->request = request;
    hdr->flags = flags;
    if (size) {
        memcpy(payload, body, size);
    }
    *len = hdr->size = size;
}

static void build_unknown_request(Client *c, VhostUserHeader *hdr,
                                  uint8_t *payload, size_t *len, int *fds,
                                  size_t *nfds)
{
    uint64_t zero = 0;

    build_msg(hdr, payload, len, 999,
              VHOST_USER_VERSION | VHOST_USER_NEED_REPLY_MASK, &zero,
              sizeof(zero));
}

static void build_short_payload(Client *c, VhostUserHeader *hdr,
                                uint8_t *payload, size_t *len, int *fds,
                                size_t *nfds)
{
    uint32_t index = 0;

    /* SET_VRING_NUM wants a vring state (8 bytes); send only the index. */
    build_msg(hdr, payload, len, VHOST_USER_SET_VRING_NUM, request_flags(c),
              &index, sizeof(index));
}

static void build_oversized_payload(Client *c, VhostUserHeader *hdr,
                                    uint8_t *payload, size_t *len, int *fds,
                                    size_t *nfds)
{
    VhostUserVringState s = { 0, vufq_size(vuf_queue(c->fe, 0)) };

    /* A harmless SET_VRING_NUM (same size again) padded to 64 KiB. */
    build_msg(hdr, payload, len, VHOST_USER_SET_VRING_NUM, request_flags(c),
              &s, sizeof(s));
    *len = hdr->size = 64 * 1024;
}

static void build_bad_version(Client *c, VhostUserHeader *hdr,
                              uint8_t *payload, size_t *len, int *fds,
                              size_t *nfds)
{
    build_msg(hdr, payload, len, VHOST_USER_GET_FEATURES, 0x2, NULL, 0);
}

static void build_bad_queue_index(Client *c, VhostUserHeader *hdr,
                                  uint8_t *payload, size_t *len, int *fds,
                                  size_t *nfds)
{
    VhostUserVringState s = { 255, vufq_size(vuf_queue(c->fe, 0)) };

    build_msg(hdr, payload, len, VHOST_USER_SET_VRING_NUM, request_flags(c),
              &s, sizeof(s));
}

static void build_bad_vring_addr(Client *c, VhostUserHeader *hdr,
                                 uint8_t *payload, size_t *len, int *fds,
                                 size_t *nfds)
{
    /* Ring addresses in no memory region (just past ours). */
    uint64_t outside = (uintptr_t)vuf_mem_base(c->fe) + vuf_mem_size(c->fe) +
                       (1u << 20);
    VhostUserVringAddr a = {
        .index = 0,
        .desc_user_addr = outside,
        .used_user_addr = outside + 0x10000,
        .avail_user_addr = outside + 0x20000,
    };

    build_msg(hdr, payload, len, VHOST_USER_SET_VRING_ADDR, request_flags(c),
              &a, sizeof(a));
}

static void build_mem_table_no_fd(Client *c, VhostUserHeader *hdr,
                                  uint8_t *payload, size_t *len, int *fds,
                                  size_t *nfds)
{
    VhostUserMemory t = { .nregions = 1 };

    t.regions[0] = (VhostUserMemRegion) {
        .guest_phys_addr = 0,
        .memory_size = vuf_mem_size(c->fe),
        .userspace_addr = (uintptr_t)vuf_mem_base(c->fe),
    };
    build_msg(hdr, payload, len, VHOST_USER_SET_MEM_TABLE, request_flags(c),
              &t, offsetof(VhostUserMemory, regions[1]));
}

static void build_mem_table_too_many(Client *c, VhostUserHeader *hdr,
                                     uint8_t *payload, size_t *len, int *fds,
                                     size_t *nfds)
{
    VhostUserMemory t = { .nregions = 1000 };

    build_msg(hdr, payload, len, VHOST_USER_SET_MEM_TABLE, request_flags(c),
              &t, sizeof(t));
}

static void build_kick_no_fd(Client *c, VhostUserHeader *hdr,
                             uint8_t *payload, size_t *len, int *fds,
                             size_t *nfds)
{
    uint64_t index = 0;     /* no NOFD flag, and yet no fd */

    build_msg(hdr, payload, len, VHOST_USER_SET_VRING_KICK, request_flags(c),
              &index, sizeof(index));
}

static const MalformedMsg malformed_msgs[] = {
    { "unknown-request", build_unknown_request },
    { "short-payload", build_short_payload },
    { "oversized-payload", build_oversized_payload },
    { "bad-version", build_bad_version },
    { "bad-queue-index", build_bad_queue_index },
    { "bad-vring-addr", build_bad_vring_addr },
    { "mem-table-no-fd", build_mem_table_no_fd },
    { "mem-table-too-many", build_mem_table_too_many },
    { "kick-no-fd", build_kick_no_fd },
};

bool malformed_kind_valid(const char *name)
{
    size_t i;

    for (i = 0; i < G_N_ELEMENTS(malformed_msgs); i++) {
        if (!strcmp(malformed_msgs[i].name, name)) {
            return true;
        }
    }
    return vuf_ring_fault_by_name(name) >= 0;
}

char *malformed_kinds(void)
{
    GString *s = g_string_new(NULL);
    size_t i;
    int f;

    unsigned n = 0;

    for (i = 0; i < G_N_ELEMENTS(malformed_msgs); i++, n++) {
        g_string_append_printf(s, "%s%s", n == 0 ? "" : n % 4 ? ", " : ",\n  ",
                               malformed_msgs[i].name);
    }
    for (f = 0; f < VUF_FAULT_COUNT; f++, n++) {
        g_string_append_printf(s, "%s%s", n % 4 ? ", " : ",\n  ",
                               vuf_ring_fault_name(f));
    }
    return g_string_free(s, FALSE);
}

/* Requests answered with a payload of their own (not a REPLY_ACK). */
static bool request_has_reply(uint32_t request)
{
    switch (request) {
    case VHOST_USER_GET_FEATURES:
    case VHOST_USER_GET_PROTOCOL_FEATURES:
    case VHOST_USER_GET_VRING_BASE:
    case VHOST_USER_GET_QUEUE_NUM:
    case VHOST_USER_GET_CONFIG:
    case VHOST_USER_GET_MAX_MEM_SLOTS:
        return true;
    default:
        return false;
    }
}

static bool malformed_message(Client *c, const MalformedMsg *m, Result *r,
                              Error **errp)
{
    g_autofree uint8_t *payload = g_malloc0(64 * 1024);
    VhostUserHeader hdr = { 0 }, reply;
    uint8_t reply_buf[VHOST_USER_MAX_PAYLOAD];
    VufRecvResult res;
    int fds[VHOST_USER_MAX_FDS];
    size_t len = 0, nfds = 0, got;
    const char *reaction;

    m->build(c, &hdr, payload, &len, fds, &nfds);
    json_object_set_string_member(r->obj, "type", "message");
    json_object_set_int_member(r->obj, "request", hdr.request);
    if (!vuf_send_raw_header(c->fe, hdr.request, hdr.flags, hdr.size,
                             payload, len, fds, nfds, NULL)) {
        /* Sending on a connected socket fails when the peer has gone. */
        res = VUF_RECV_CLOSED;
    } else if (!vuf_recv_raw(c->fe, MALFORMED_WAIT_MS, &reply, reply_buf,
                             sizeof(reply_buf), &got, &res, errp)) {
        return false;
    }
    if (res == VUF_RECV_CLOSED) {
        reaction = "closed";
    } else if (res == VUF_RECV_TIMEOUT) {
        reaction = "no-reply";
    } else if (reply.request != hdr.request ||
               request_has_reply(hdr.request)) {
        reaction = "reply";     /* processed as if well-formed */
        json_object_set_int_member(r->obj, "reply_request", reply.request);
        json_object_set_int_member(r->obj, "reply_size", reply.size);
    } else if (reply.size == sizeof(uint64_t) && got == sizeof(uint64_t)) {
        uint64_t v;

        memcpy(&v, reply_buf, sizeof(v));
        reaction = v ? "error-reply" : "ack";
        json_object_set_int_member(r->obj, "reply_value", v);
    } else {
        reaction = "reply";
        json_object_set_int_member(r->obj, "reply_size", reply.size);
    }
    json_object_set_string_member(r->obj, "reaction", reaction);
    json_object_set_boolean_member(r->obj, "alive",
                                   res != VUF_RECV_CLOSED &&
                                   vuf_check_alive(c->fe, ALIVE_WAIT_MS));
    return true;
}

static bool malformed_ring(Client *c, const Command *cmd, VufRingFault f,
                           Result *r, Error **errp)
{
    /* SCSI: --queue counts request queues, after control and event. */
    unsigned vq = c->opts->device == VUF_DEVICE_SCSI
                  ? VUFSCSI_VQ_REQUEST(cmd->queue) : cmd->queue;
    VufQueue *q = vuf_queue(c->fe, vq);
    const char *reaction;
    bool closed = false;
    void *token;
    int ret;

    json_object_set_string_member(r->obj, "type", "ring");
    json_object_set_int_member(r->obj, "queue", cmd->queue);
    ret = vufq_inject_fault(q, f);
    if (ret < 0) {
        error_setg(errp, "cannot inject %s on queue %u: %s",
                   vuf_ring_fault_name(f), vq, client_strerror(-ret));
        return false;
    }
    ret = vufq_wait(q, MALFORMED_WAIT_MS * 1000000ll);
    if (ret == 0) {
        ret = vufq_get_used(q, &token, NULL);
        if (ret == 1) {
            reaction = "completed";
            json_object_set_string_member(r->obj, "status",
                vufblk_status_name(vufq_fault_status(q)));
        } else {
            reaction = "bad-used-entry";
        }
    } else if (ret == -ECONNRESET) {
        reaction = "closed";
        closed = true;
    } else if (ret == -ETIMEDOUT) {
        reaction = "no-completion";
    } else {
        error_setg(errp, "waiting after %s: %s", vuf_ring_fault_name(f),
                   client_strerror(-ret));
        return false;
    }
    json_object_set_string_member(r->obj, "reaction", reaction);
    json_object_set_boolean_member(r->obj, "alive",
                                   !closed && vuf_check_alive(c->fe,
                                                              ALIVE_WAIT_MS));
    return true;
}

bool cmd_malformed(Client *c, const Command *cmd, Result *r, Error **errp)
{
    int f = vuf_ring_fault_by_name(cmd->what);
    size_t i;

    json_object_set_string_member(r->obj, "kind", cmd->what);
    if (f >= 0) {
        return malformed_ring(c, cmd, f, r, errp);
    }
    for (i = 0; i < G_N_ELEMENTS(malformed_msgs); i++) {
        if (!strcmp(malformed_msgs[i].name, cmd->what)) {
            return malformed_message(c, &malformed_msgs[i], r, errp);
        }
    }
    {
        g_autofree char *kinds = malformed_kinds();

        error_setg(errp, "unknown kind '%s'; expected one of: %s", cmd->what,
                   kinds);
    }
    return false;
}

/*
 * spindle-vu-client: the verify-run and malformed commands.
 *
 * Theory of operation
 * -------------------
 * verify-run is the engine of vu-client-verify.c over virtio-blk: one
 * thread per queue, each writing the blocks of its slice of [offset,
 * offset+size) in a shuffled order, then reading back and checking every
 * block written; the first mismatch is reported with its disk offset.
 * This file supplies the virtio-blk requests and the result.
 *
 * malformed sends one bad message, or puts one bad chain in a ring, and
 * reports what the back-end did: replied (with an error or an ack), closed
 * the connection, ignored it, stopped the queue, or completed the request
 * (and with which status); then whether the connection still answers a
 * GET_FEATURES.  It judges nothing: tests decide which reactions are fine.
 */

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include <glib.h>

#include "util/error.h"
#include "vu-client-result.h"
#include "vu-client-run.h"
#include "vu-client-session.h"
#include "vu-client-verify.h"

#define SECTOR                  VIRTIO_BLK_SECTOR_SIZE
#define MALFORMED_WAIT_MS       1000
#define MALFORMED_PAYLOAD_MAX   (64 * 1024)

/* ------------------------------------------------------------------------ */
/* verify-run                                                                */

static unsigned blk_verify_vq_index(unsigned qi)
{
    return qi;
}

static void blk_verify_prepare(VerifyQueue *vq, VerifySlot *s, bool writing)
{
    uint64_t bs = vq->run->cmd->bs;
    uint64_t sector = (vq->base + s->block * bs) / vq->run->lbs;

    if (writing) {
        vufblk_prep_write(s->req, sector, bs);
    } else {
        vufblk_prep_read(s->req, sector, bs);
    }
}

static int blk_verify_submit(VerifyQueue *vq, VerifySlot *s)
{
    return vufblk_submit(vq->q, s->req, vq->run->c->add_flags);
}

static VerifyAnswer blk_verify_answer(VerifyQueue *vq, VerifySlot *s,
                                      bool writing)
{
    const VufBlkReq *req = s->req;
    int status = *req->status;

    if (status != VIRTIO_BLK_S_OK) {
        vq->error = g_strdup_printf("queue %u: %s of block %" PRIu64
                                    " (offset %" PRIu64 "): the device "
                                    "answered %s", vq->qi,
                                    writing ? "write" : "read", s->block,
                                    vq->base + s->block * vq->run->cmd->bs,
                                    vufblk_status_name(status));
        return VERIFY_ANSWER_FAILED;
    }
    return VERIFY_ANSWER_DONE;
}

static const VerifyOps blk_verify_ops = {
    .queue_name = "queue",
    .vq_index = blk_verify_vq_index,
    .prepare = blk_verify_prepare,
    .submit = blk_verify_submit,
    .answer = blk_verify_answer,
};

/* The range of cmd fits the disk; run->slice. */
static bool check_run_geometry(VerifyRun *run, Error **errp)
{
    const VirtioBlkConfig *cfg = vuf_blk_config(run->c->fe);
    const Command *cmd = run->cmd;

    if (!verify_run_slice(run, errp)) {
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

bool cmd_verify_run(Client *c, const Command *cmd, Result *r, Error **errp)
{
    VerifyRun run = {
        .ops = &blk_verify_ops,
        .c = c,
        .cmd = cmd,
        .nq = cmd->run_queues ? cmd->run_queues : vuf_num_queues(c->fe),
        .lbs = SECTOR,
        .target = "disk",
    };

    if (!check_run_geometry(&run, errp)) {
        return false;
    }
    extents_forget(c, cmd->offset, cmd->size);
    return verify_run(&run, r, errp);
}

/* ------------------------------------------------------------------------ */
/* malformed                                                                 */

/* The message a malformed kind builds. */
typedef struct MalformedBuf {
    Client *c;
    VhostUserHeader hdr;
    uint8_t *payload;           /* MALFORMED_PAYLOAD_MAX bytes */
    size_t len;                 /* payload bytes to send */
} MalformedBuf;

typedef struct MalformedMsg {
    const char *name;
    void (*build)(MalformedBuf *b);
} MalformedMsg;

/* Header flags of a well-behaved request: NEED_REPLY with REPLY_ACK. */
static uint32_t request_flags(Client *c)
{
    bool ack = vuf_protocol_features(c->fe) &
               VUF_BIT(VHOST_USER_PROTOCOL_F_REPLY_ACK);

    return VHOST_USER_VERSION | (ack ? VHOST_USER_NEED_REPLY_MASK : 0);
}

/* Fill in the header and a payload of size bytes copied from body. */
static void build_msg(MalformedBuf *b, uint32_t request, uint32_t flags,
                      const void *body, size_t size)
{
    b->hdr.request = request;
    b->hdr.flags = flags;
    if (size) {
        memcpy(b->payload, body, size);
    }
    b->len = b->hdr.size = size;
}

static void build_unknown_request(MalformedBuf *b)
{
    uint64_t zero = 0;

    build_msg(b, 999,
              VHOST_USER_VERSION | VHOST_USER_NEED_REPLY_MASK, &zero,
              sizeof(zero));
}

static void build_short_payload(MalformedBuf *b)
{
    uint32_t index = 0;

    /* SET_VRING_NUM wants a vring state (8 bytes); send only the index. */
    build_msg(b, VHOST_USER_SET_VRING_NUM, request_flags(b->c),
              &index, sizeof(index));
}

static void build_oversized_payload(MalformedBuf *b)
{
    VhostUserVringState s = { 0, vufq_size(vuf_queue(b->c->fe, 0)) };

    /* A harmless SET_VRING_NUM (same size again) padded to 64 KiB. */
    build_msg(b, VHOST_USER_SET_VRING_NUM, request_flags(b->c),
              &s, sizeof(s));
    b->len = b->hdr.size = MALFORMED_PAYLOAD_MAX;
}

static void build_bad_version(MalformedBuf *b)
{
    build_msg(b, VHOST_USER_GET_FEATURES, 0x2, NULL, 0);
}

static void build_bad_queue_index(MalformedBuf *b)
{
    VhostUserVringState s = { 255, vufq_size(vuf_queue(b->c->fe, 0)) };

    build_msg(b, VHOST_USER_SET_VRING_NUM, request_flags(b->c),
              &s, sizeof(s));
}

static void build_bad_vring_addr(MalformedBuf *b)
{
    /* Ring addresses in no memory region (just past ours). */
    uint64_t outside = (uintptr_t)vuf_mem_base(b->c->fe) +
                       vuf_mem_size(b->c->fe) +
                       (1u << 20);
    VhostUserVringAddr a = {
        .index = 0,
        .desc_user_addr = outside,
        .used_user_addr = outside + 0x10000,
        .avail_user_addr = outside + 0x20000,
    };

    build_msg(b, VHOST_USER_SET_VRING_ADDR, request_flags(b->c),
              &a, sizeof(a));
}

static void build_mem_table_no_fd(MalformedBuf *b)
{
    VhostUserMemory t = { .nregions = 1 };

    t.regions[0] = (VhostUserMemRegion) {
        .guest_phys_addr = 0,
        .memory_size = vuf_mem_size(b->c->fe),
        .userspace_addr = (uintptr_t)vuf_mem_base(b->c->fe),
    };
    build_msg(b, VHOST_USER_SET_MEM_TABLE, request_flags(b->c),
              &t, offsetof(VhostUserMemory, regions[1]));
}

static void build_mem_table_too_many(MalformedBuf *b)
{
    VhostUserMemory t = { .nregions = 1000 };

    build_msg(b, VHOST_USER_SET_MEM_TABLE, request_flags(b->c),
              &t, sizeof(t));
}

static void build_kick_no_fd(MalformedBuf *b)
{
    uint64_t index = 0;     /* no NOFD flag, and yet no fd */

    build_msg(b, VHOST_USER_SET_VRING_KICK, request_flags(b->c),
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

static const MalformedMsg *malformed_find(const char *name)
{
    return kind_find(malformed_msgs, G_N_ELEMENTS(malformed_msgs),
                     sizeof(malformed_msgs[0]), name);
}

bool malformed_kind_valid(const char *name)
{
    return malformed_find(name) || vuf_ring_fault_by_name(name) >= 0;
}

char *malformed_kinds(void)
{
    GString *s = g_string_new(NULL);
    unsigned n = 0;

    kind_names(s, malformed_msgs, G_N_ELEMENTS(malformed_msgs),
               sizeof(malformed_msgs[0]), 4, &n);
    for (int f = 0; f < VUF_FAULT_COUNT; f++, n++) {
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
    g_autofree uint8_t *payload = g_malloc0(MALFORMED_PAYLOAD_MAX);
    MalformedBuf b = { .c = c, .payload = payload };
    const VhostUserHeader *hdr = &b.hdr;
    VhostUserHeader reply;
    uint8_t reply_buf[VHOST_USER_MAX_PAYLOAD];
    VufRecvResult res;
    size_t got;
    const char *reaction;

    m->build(&b);
    json_object_set_string_member(r->obj, "type", "message");
    json_object_set_int_member(r->obj, "request", hdr->request);
    if (!vuf_send_raw_header(c->fe, hdr->request, hdr->flags, hdr->size,
                             payload, b.len, NULL, 0, NULL)) {
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
    } else if (reply.request != hdr->request ||
               request_has_reply(hdr->request)) {
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
    res_alive(r, c->fe, res == VUF_RECV_CLOSED);
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
    bool closed;
    int ret;

    json_object_set_string_member(r->obj, "type", "ring");
    json_object_set_int_member(r->obj, "queue", cmd->queue);
    ret = vufq_inject_fault(q, f);
    if (ret < 0) {
        error_setg(errp, "cannot inject %s on queue %u: %s",
                   vuf_ring_fault_name(f), vq, client_strerror(-ret));
        return false;
    }
    reaction = client_reaction(q, NULL, MALFORMED_WAIT_MS,
                               vuf_ring_fault_name(f), NULL, &closed, errp);
    if (!reaction) {
        return false;
    }
    if (!strcmp(reaction, "completed")) {
        json_object_set_string_member(r->obj, "status",
            vufblk_status_name(vufq_fault_status(q)));
    }
    json_object_set_string_member(r->obj, "reaction", reaction);
    res_queue_alive(r, c->fe, q, closed);
    return true;
}

bool cmd_malformed(Client *c, const Command *cmd, Result *r, Error **errp)
{
    int f = vuf_ring_fault_by_name(cmd->what);
    const MalformedMsg *m = malformed_find(cmd->what);

    json_object_set_string_member(r->obj, "kind", cmd->what);
    if (f >= 0) {
        return malformed_ring(c, cmd, f, r, errp);
    }
    g_assert(m);                /* the parser checked the kind */
    return malformed_message(c, m, r, errp);
}

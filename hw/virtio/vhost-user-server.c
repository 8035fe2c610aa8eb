/*
 * vhost-user back-end server.
 *
 * Theory of operation
 * -------------------
 * A VuServer owns one listening UNIX socket (a path it created, or a
 * duplicate of an inherited listening fd), at most one client connection,
 * the guest memory table the client sent, and num_queues VirtQueues.  All
 * of that is main-thread state: the socket handlers run in main_ctx.
 *
 * One client at a time: while a client is connected the listening socket
 * is not watched, so a second front-end that connects waits in the
 * kernel's listen backlog (its connect() succeeds, its messages are not
 * read) until the first one disconnects; then it is accepted.  This is
 * what QEMU's reconnect needs: when the old connection goes away every
 * queue is stopped and drained, the guest memory is unmapped and all
 * per-connection state is reset before the next accept.
 *
 * Reading messages: the client socket is blocking, but it is read only
 * when the loop reports it readable, and a message (12-byte header, at
 * most VHOST_USER_MAX_PAYLOAD bytes of payload, at most VHOST_USER_MAX_FDS
 * fds) is read whole before it is handled.  A front-end that sends part of
 * a message and stops could block the main loop, so the whole message must
 * arrive within VU_MSG_TIMEOUT_MS of its first byte (poll() with the time
 * left before each further read, and SO_RCVTIMEO as a backstop); otherwise
 * the connection is closed.  Replies are sent with SO_SNDTIMEO for the same
 * reason.  So a misbehaving front-end can stall the main loop for about a
 * second, once, and then it is gone.
 *
 * Handling messages: each request has a handler that validates the payload
 * size, the fd count, the ring index and the values, and either succeeds,
 * fills a reply, or fails with a reason.  A failure is logged (one line
 * naming the export) and answered with a non-zero REPLY_ACK status when
 * the front-end asked for one; otherwise, and for framing errors or
 * failures of requests that carry their own reply, the connection is
 * closed.  Only the server's own invariants are asserted.  Every fd that
 * arrives is either handed to its new owner or closed.
 *
 * Rings: a ring runs when SET_FEATURES was received, the guest memory
 * table is not empty, it has a size, addresses and a kick fd
 * (virtqueue_is_ready()) and it is enabled (always, unless
 * VHOST_USER_F_PROTOCOL_FEATURES was negotiated: then from
 * SET_VRING_ENABLE 1 on).  A disabled ring is stopped, not processed.
 * After every request that may change one of those conditions the server
 * starts the rings that became startable.  Starting, stopping and memory
 * table swaps happen in the ring's home thread (ctxs[i % nctx]) through
 * aio_run_sync(); the main thread waits, so the VirtQueue is never touched
 * by two threads at once.  Stopping is virtqueue_stop() followed by the
 * device's queue_drain(), after which the avail index is remembered as the
 * ring's base (reported by GET_VRING_BASE, restored on restart).
 * GET_VRING_BASE also drops the kick fd: the ring starts again only after
 * a new SET_VRING_KICK, as the protocol says.  A new kick fd for a running
 * ring stops it, swaps the fd and starts it again; the call and err fds
 * are swapped in the ring's home thread without stopping it.
 *
 * Guest memory: SET_MEM_TABLE, ADD_MEM_REG and REM_MEM_REG build a new
 * immutable GuestMemory, hand it to each running ring in its home thread
 * (virtqueue_set_memory) and only then drop the old one, so rings keep
 * running across a table change.
 *
 * The back-end channel: with VHOST_USER_PROTOCOL_F_SLAVE_REQ the front-end
 * gives one end of a socket pair (SET_SLAVE_REQ_FD) on which the back-end
 * sends requests of its own.  The only one sent is the config-change
 * notice (vu_server_config_changed(), after a resize), header only and
 * without asking for a reply, so nothing is ever read from the channel.
 * It is sent without blocking: the main loop must not wait for a
 * front-end, so a channel whose buffer is full loses the notice (logged;
 * the front-end still sees the new config at its next GET_CONFIG), and a
 * channel that takes only part of a message is closed, as the stream
 * would be out of step.  The channel belongs to the connection: a new fd
 * replaces (closes) the old one, and disconnecting or RESET_OWNER closes
 * it; RESET_DEVICE keeps it, as it keeps the memory table, since QEMU sets
 * the channel up once per connection.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib.h>

#include "hw/virtio/vhost-user-server.h"
#include "hw/virtio/vhost-user-protocol.h"
#include "util/trace.h"
#include "util/unix-socket.h"

/* A message must arrive whole within this time of its first byte. */
#define VU_MSG_TIMEOUT_MS 1000

#define VU_MAX_QUEUES 64

/* Transport features the server offers on top of the device's. */
#define VU_TRANSPORT_FEATURES                       \
    ((1ull << VIRTIO_F_VERSION_1) |                 \
     (1ull << VIRTIO_RING_F_INDIRECT_DESC) |        \
     (1ull << VIRTIO_RING_F_EVENT_IDX) |            \
     (1ull << VHOST_USER_F_PROTOCOL_FEATURES))

/* Protocol features offered (CONFIG only when the device has a config). */
#define VU_PROTOCOL_FEATURES                                \
    ((1ull << VHOST_USER_PROTOCOL_F_MQ) |                   \
     (1ull << VHOST_USER_PROTOCOL_F_REPLY_ACK) |            \
     (1ull << VHOST_USER_PROTOCOL_F_SLAVE_REQ) |            \
     (1ull << VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS) |  \
     (1ull << VHOST_USER_PROTOCOL_F_RESET_DEVICE))

typedef struct VuQueue {
    VirtQueue *vq;
    AioContext *ctx;          /* home context: ctxs[index % nctx] */
    bool started;             /* virtqueue_start() succeeded, not stopped */
    bool enabled;             /* SET_VRING_ENABLE */
    bool start_failed;        /* don't retry until the set-up changes */
    uint16_t base;            /* next avail index while stopped */
    VirtQueueStats past;      /* of the rings before vq (reset, reconnect) */
} VuQueue;

/* What a request handler did. */
typedef enum VuResult {
    VU_DONE,        /* success without a reply payload */
    VU_REPLY,       /* the reply is filled in */
    VU_FAILED,      /* refused (s->why): error ack, or close without one */
    VU_IGNORED,     /* unsupported and harmless (s->why): error ack if asked */
} VuResult;

struct VuServer {
    char *name;
    AioContext *main_ctx;
    const VuDevOps *ops;
    void *dev;
    unsigned num_queues;
    unsigned max_queue_size;

    int listen_fd;            /* ours: created, or a dup of the given fd */
    bool accepting;           /* listen_fd handler registered */
    char *path;               /* socket file we created, or NULL */
    dev_t path_dev;           /* its identity, to unlink only our file */
    ino_t path_ino;

    /* The connection and its state (reset on disconnect). */
    int client_fd;
    bool dispatching;         /* a request is being handled */
    uint64_t features;        /* SET_FEATURES */
    bool features_set;
    uint64_t protocol_features;
    GuestMemory *mem;         /* NULL until the first table */
    int slave_fd;             /* the back-end channel (SET_SLAVE_REQ_FD), or
                               * -1; ours to close */

    char why[256];            /* reason of the last failure */
    VuQueue queues[];
};

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

static void G_GNUC_PRINTF(2, 3) vu_log(VuServer *s, const char *fmt, ...)
{
    va_list ap;
    char *msg;

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    error_report("vhost-user export '%s': %s", s->name, msg);
    g_free(msg);
}

/* Record why a request failed; returns VU_FAILED for `return vu_fail()`. */
static VuResult G_GNUC_PRINTF(2, 3) vu_fail(VuServer *s, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    g_vsnprintf(s->why, sizeof(s->why), fmt, ap);
    va_end(ap);
    return VU_FAILED;
}

static const char *vu_request_name(uint32_t req)
{
    switch (req) {
    case VHOST_USER_GET_FEATURES: return "GET_FEATURES";
    case VHOST_USER_SET_FEATURES: return "SET_FEATURES";
    case VHOST_USER_SET_OWNER: return "SET_OWNER";
    case VHOST_USER_RESET_OWNER: return "RESET_OWNER";
    case VHOST_USER_SET_MEM_TABLE: return "SET_MEM_TABLE";
    case VHOST_USER_SET_LOG_BASE: return "SET_LOG_BASE";
    case VHOST_USER_SET_LOG_FD: return "SET_LOG_FD";
    case VHOST_USER_SET_VRING_NUM: return "SET_VRING_NUM";
    case VHOST_USER_SET_VRING_ADDR: return "SET_VRING_ADDR";
    case VHOST_USER_SET_VRING_BASE: return "SET_VRING_BASE";
    case VHOST_USER_GET_VRING_BASE: return "GET_VRING_BASE";
    case VHOST_USER_SET_VRING_KICK: return "SET_VRING_KICK";
    case VHOST_USER_SET_VRING_CALL: return "SET_VRING_CALL";
    case VHOST_USER_SET_VRING_ERR: return "SET_VRING_ERR";
    case VHOST_USER_GET_PROTOCOL_FEATURES: return "GET_PROTOCOL_FEATURES";
    case VHOST_USER_SET_PROTOCOL_FEATURES: return "SET_PROTOCOL_FEATURES";
    case VHOST_USER_GET_QUEUE_NUM: return "GET_QUEUE_NUM";
    case VHOST_USER_SET_VRING_ENABLE: return "SET_VRING_ENABLE";
    case VHOST_USER_GET_CONFIG: return "GET_CONFIG";
    case VHOST_USER_SET_CONFIG: return "SET_CONFIG";
    case VHOST_USER_RESET_DEVICE: return "RESET_DEVICE";
    case VHOST_USER_GET_MAX_MEM_SLOTS: return "GET_MAX_MEM_SLOTS";
    case VHOST_USER_ADD_MEM_REG: return "ADD_MEM_REG";
    case VHOST_USER_REM_MEM_REG: return "REM_MEM_REG";
    case VHOST_USER_SET_SLAVE_REQ_FD: return "SET_SLAVE_REQ_FD";
    default: return NULL;
    }
}

/* Requests whose reply is their own payload (REPLY_ACK changes nothing). */
static bool vu_request_has_reply(uint32_t req)
{
    switch (req) {
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

/* Take fd i out of msg: the caller owns it now. */
static int vu_msg_take_fd(VuMsg *msg, unsigned i)
{
    int fd = msg->fds[i];

    msg->fds[i] = -1;
    return fd;
}

static bool vu_check_size(VuServer *s, const VuMsg *msg, uint32_t size)
{
    if (msg->hdr.size != size) {
        vu_fail(s, "%s with a payload of %" PRIu32 " bytes, expected %" PRIu32,
                vu_request_name(msg->hdr.request), msg->hdr.size, size);
        return false;
    }
    return true;
}

static bool vu_check_nfds(VuServer *s, const VuMsg *msg, unsigned nfds)
{
    if (msg->nfds != nfds) {
        vu_fail(s, "%s with %u file descriptors, expected %u",
                vu_request_name(msg->hdr.request), msg->nfds, nfds);
        return false;
    }
    return true;
}

static bool vu_check_plain(VuServer *s, const VuMsg *msg, uint32_t size)
{
    return vu_check_size(s, msg, size) && vu_check_nfds(s, msg, 0);
}

static VuQueue *vu_queue_at(VuServer *s, const VuMsg *msg, uint32_t index)
{
    if (index >= s->num_queues) {
        vu_fail(s, "%s for ring %" PRIu32 ", but there are only %u",
                vu_request_name(msg->hdr.request), index, s->num_queues);
        return NULL;
    }
    return &s->queues[index];
}

static void vu_reply_u64(const VuMsg *msg, VuMsg *reply, uint64_t val)
{
    reply->hdr.size = sizeof(uint64_t);
    reply->payload.u64 = val;
}

static uint64_t vu_offered_features(VuServer *s)
{
    return s->ops->get_features(s->dev) | VU_TRANSPORT_FEATURES;
}

static uint64_t vu_offered_protocol_features(VuServer *s)
{
    uint64_t f = VU_PROTOCOL_FEATURES;

    if (s->ops->get_config) {
        f |= 1ull << VHOST_USER_PROTOCOL_F_CONFIG;
    }
    return f;
}

static bool vu_has_protocol_feature(VuServer *s, unsigned bit)
{
    return s->protocol_features & (1ull << bit);
}

/* ------------------------------------------------------------------------ */
/* Rings: start, stop, memory (each step in the ring's home thread)          */

typedef struct VuQueueOp {
    VuServer *s;
    VuQueue *q;
    GuestMemory *mem;
    int ret;
    uint16_t base;
    unsigned inflight;
} VuQueueOp;

static void vu_queue_start_bh(void *opaque)
{
    VuQueueOp *op = opaque;
    VuServer *s = op->s;
    VirtQueue *vq = op->q->vq;

    g_assert(aio_context_in_home_thread(op->q->ctx));
    op->ret = virtqueue_start(vq, op->mem, s->ops->handle_queue, s->dev);
    if (op->ret == 0 && s->ops->queue_started) {
        s->ops->queue_started(s->dev, vq);
    }
}

static void vu_queue_stop_bh(void *opaque)
{
    VuQueueOp *op = opaque;
    VuServer *s = op->s;
    VirtQueue *vq = op->q->vq;

    g_assert(aio_context_in_home_thread(op->q->ctx));
    op->base = virtqueue_stop(vq);
    if (s->ops->queue_drain) {
        s->ops->queue_drain(s->dev, vq);
    }
    op->inflight = virtqueue_inflight(vq);
}

static void vu_queue_set_memory_bh(void *opaque)
{
    VuQueueOp *op = opaque;

    g_assert(aio_context_in_home_thread(op->q->ctx));
    op->ret = virtqueue_set_memory(op->q->vq, op->mem);
}

static bool vu_queue_enabled(VuServer *s, const VuQueue *q)
{
    /* Without protocol features a ring is enabled from the start. */
    if (!(s->features & (1ull << VHOST_USER_F_PROTOCOL_FEATURES))) {
        return true;
    }
    return q->enabled;
}

static bool vu_queue_can_start(VuServer *s, const VuQueue *q)
{
    return !q->started && !q->start_failed && s->features_set &&
           s->mem && s->mem->nregions > 0 && virtqueue_is_ready(q->vq) &&
           vu_queue_enabled(s, q);
}

static void vu_queue_start(VuServer *s, VuQueue *q)
{
    VuQueueOp op = { .s = s, .q = q, .mem = s->mem };
    unsigned index = virtqueue_index(q->vq);

    virtqueue_set_aio_context(q->vq, q->ctx);
    virtqueue_set_base(q->vq, q->base);
    virtqueue_set_enabled(q->vq, true);
    aio_run_sync(q->ctx, vu_queue_start_bh, &op);
    if (op.ret < 0) {
        q->start_failed = true;
        virtqueue_set_enabled(q->vq, false);
        vu_log(s, "ring %u does not lie in guest memory: ring not started",
               index);
        return;
    }
    q->started = true;
    SPINDLE_TRACE2(vu_queue_start, index, q->base);
}

/* Stop a running ring and finish its requests; remembers its base. */
static void vu_queue_stop(VuServer *s, VuQueue *q)
{
    VuQueueOp op = { .s = s, .q = q };
    unsigned index = virtqueue_index(q->vq);

    if (!q->started) {
        return;
    }
    aio_run_sync(q->ctx, vu_queue_stop_bh, &op);
    q->started = false;
    q->base = op.base;
    virtqueue_set_enabled(q->vq, false);
    if (op.inflight) {
        /* The device broke its queue_drain() promise: our invariant. */
        vu_log(s, "ring %u: %u requests still in flight after draining",
               index, op.inflight);
        g_assert_not_reached();
    }
    SPINDLE_TRACE2(vu_queue_stop, index, q->base);
}

static void vu_queues_update(VuServer *s)
{
    for (unsigned i = 0; i < s->num_queues; i++) {
        if (vu_queue_can_start(s, &s->queues[i])) {
            vu_queue_start(s, &s->queues[i]);
        }
    }
}

static void vu_stats_add(VirtQueueStats *acc, const VirtQueue *vq)
{
    VirtQueueStats st;

    virtqueue_get_stats(vq, &st);
    acc->kicks += st.kicks;
    acc->polled += st.polled;
    acc->interrupts += st.interrupts;
    acc->interrupts_suppressed += st.interrupts_suppressed;
    acc->requests += st.requests;
}

/* Keep the statistics of q->vq before it is replaced. */
static void vu_queue_add_stats(VuQueue *q)
{
    vu_stats_add(&q->past, q->vq);
}

/* Stop every ring, then forget all ring state (fds, sizes, bases). */
static void vu_queues_reset(VuServer *s)
{
    for (unsigned i = 0; i < s->num_queues; i++) {
        VuQueue *q = &s->queues[i];

        vu_queue_stop(s, q);
        vu_queue_add_stats(q);
        virtqueue_free(q->vq);
        q->vq = virtqueue_new(i);
        virtqueue_set_owner(q->vq, s->name);
        q->enabled = false;
        q->start_failed = false;
        q->base = 0;
    }
}

/* Install a new memory table (takes the reference), rings keep running. */
static void vu_set_memory(VuServer *s, GuestMemory *mem)
{
    GuestMemory *old = s->mem;

    for (unsigned i = 0; i < s->num_queues; i++) {
        VuQueue *q = &s->queues[i];
        VuQueueOp op = { .s = s, .q = q, .mem = mem };

        q->start_failed = false;
        if (!q->started) {
            continue;
        }
        aio_run_sync(q->ctx, vu_queue_set_memory_bh, &op);
        if (op.ret < 0) {
            vu_log(s, "ring %u does not lie in the new guest memory table: "
                   "ring broken", i);
        }
    }
    s->mem = mem;
    if (old) {
        guest_memory_unref(old);
    }
    vu_queues_update(s);
}

/* ------------------------------------------------------------------------ */
/* Request handlers                                                          */

static VuResult vu_get_features(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    if (!vu_check_plain(s, msg, 0)) {
        return VU_FAILED;
    }
    vu_reply_u64(msg, reply, vu_offered_features(s));
    return VU_REPLY;
}

static bool vu_any_queue_started(VuServer *s)
{
    for (unsigned i = 0; i < s->num_queues; i++) {
        if (s->queues[i].started) {
            return true;
        }
    }
    return false;
}

static VuResult vu_set_features(VuServer *s, VuMsg *msg)
{
    uint64_t features, unknown;

    if (!vu_check_plain(s, msg, sizeof(uint64_t))) {
        return VU_FAILED;
    }
    features = msg->payload.u64;
    unknown = features & ~vu_offered_features(s);
    if (unknown) {
        return vu_fail(s, "SET_FEATURES with feature bits 0x%" PRIx64
                       " that were not offered", unknown);
    }
    if (vu_any_queue_started(s)) {
        if (s->features_set && features == s->features) {
            return VU_DONE;
        }
        return vu_fail(s, "SET_FEATURES changes the features while rings "
                       "are running");
    }
    s->features = features;
    s->features_set = true;
    s->ops->set_features(s->dev,
                         features & ~(1ull << VHOST_USER_F_PROTOCOL_FEATURES));
    for (unsigned i = 0; i < s->num_queues; i++) {
        virtqueue_set_features(s->queues[i].vq, features);
    }
    vu_queues_update(s);
    return VU_DONE;
}

static VuResult vu_get_protocol_features(VuServer *s, VuMsg *msg,
                                         VuMsg *reply)
{
    if (!vu_check_plain(s, msg, 0)) {
        return VU_FAILED;
    }
    vu_reply_u64(msg, reply, vu_offered_protocol_features(s));
    return VU_REPLY;
}

static VuResult vu_set_protocol_features(VuServer *s, VuMsg *msg)
{
    uint64_t unknown;

    if (!vu_check_plain(s, msg, sizeof(uint64_t))) {
        return VU_FAILED;
    }
    unknown = msg->payload.u64 & ~vu_offered_protocol_features(s);
    if (unknown) {
        return vu_fail(s, "SET_PROTOCOL_FEATURES with bits 0x%" PRIx64
                       " that were not offered", unknown);
    }
    s->protocol_features = msg->payload.u64;
    return VU_DONE;
}

/* Forget the back-end channel (if any). */
static void vu_close_slave_channel(VuServer *s)
{
    if (s->slave_fd >= 0) {
        close(s->slave_fd);
        s->slave_fd = -1;
    }
}

/* SET_SLAVE_REQ_FD: no payload, one fd, the back-end channel. */
static VuResult vu_set_slave_req_fd(VuServer *s, VuMsg *msg)
{
    if (!vu_check_size(s, msg, 0) || !vu_check_nfds(s, msg, 1)) {
        return VU_FAILED;
    }
    if (!vu_has_protocol_feature(s, VHOST_USER_PROTOCOL_F_SLAVE_REQ)) {
        return vu_fail(s, "SET_SLAVE_REQ_FD without the SLAVE_REQ protocol "
                       "feature");
    }
    /* A second channel replaces the first. */
    vu_close_slave_channel(s);
    s->slave_fd = vu_msg_take_fd(msg, 0);
    return VU_DONE;
}

static VuResult vu_set_owner(VuServer *s, VuMsg *msg)
{
    return vu_check_plain(s, msg, 0) ? VU_DONE : VU_FAILED;
}

/* RESET_OWNER (deprecated): disable all rings, as the protocol suggests. */
static VuResult vu_reset_owner(VuServer *s, VuMsg *msg)
{
    if (!vu_check_plain(s, msg, 0)) {
        return VU_FAILED;
    }
    for (unsigned i = 0; i < s->num_queues; i++) {
        VuQueue *q = &s->queues[i];

        vu_queue_stop(s, q);
        virtqueue_set_kick_fd(q->vq, -1);
        q->enabled = false;
        q->start_failed = false;
    }
    vu_close_slave_channel(s);
    return VU_DONE;
}

/* RESET_DEVICE: stop every ring and forget the device state. */
static VuResult vu_reset_device(VuServer *s, VuMsg *msg)
{
    if (!vu_check_plain(s, msg, 0)) {
        return VU_FAILED;
    }
    /*
     * The memory table and protocol features belong to the connection: the
     * front-end does not send them again after a reset (with
     * CONFIGURE_MEM_SLOTS it sends only the regions it thinks we lack).
     */
    vu_queues_reset(s);
    s->features = 0;
    s->features_set = false;
    return VU_DONE;
}

static void vu_region_desc(const VhostUserMemRegion *r, GuestMemRegionDesc *d)
{
    d->gpa = r->guest_phys_addr;
    d->size = r->memory_size;
    d->qva = r->userspace_addr;
    d->mmap_offset = r->mmap_offset;
}

static VuResult vu_memory_error(VuServer *s, const VuMsg *msg, Error *err)
{
    vu_fail(s, "%s: %s", vu_request_name(msg->hdr.request),
            error_get_pretty(err));
    error_free(err);
    return VU_FAILED;
}

static VuResult vu_set_mem_table(VuServer *s, VuMsg *msg)
{
    const VhostUserMemory *table = &msg->payload.memory;
    const uint32_t hdr_size = offsetof(VhostUserMemory, regions);
    GuestMemory *mem = NULL;
    uint32_t n;

    if (msg->hdr.size < hdr_size) {
        return vu_fail(s, "SET_MEM_TABLE with a payload of %" PRIu32
                       " bytes, too short", msg->hdr.size);
    }
    n = table->nregions;
    if (n == 0 || n > VHOST_USER_MEM_TABLE_MAX_REGIONS) {
        return vu_fail(s, "SET_MEM_TABLE with %" PRIu32 " regions, expected "
                       "1 to %u", n, VHOST_USER_MEM_TABLE_MAX_REGIONS);
    }
    /*
     * QEMU sends the regions it fills; other front-ends send the whole
     * fixed-size table with unused slots.  Both are fine.
     */
    if (msg->hdr.size != hdr_size + n * sizeof(VhostUserMemRegion) &&
        msg->hdr.size != hdr_size + VHOST_USER_MEM_TABLE_MAX_REGIONS *
                                    sizeof(VhostUserMemRegion)) {
        return vu_fail(s, "SET_MEM_TABLE with %" PRIu32 " regions and a "
                       "payload of %" PRIu32 " bytes", n, msg->hdr.size);
    }
    if (!vu_check_nfds(s, msg, n)) {
        return VU_FAILED;
    }
    for (uint32_t i = 0; i < n; i++) {
        GuestMemRegionDesc desc;
        Error *err = NULL;
        GuestMemory *next;

        vu_region_desc(&table->regions[i], &desc);
        next = guest_memory_add(mem, &desc, msg->fds[i], &err);
        if (mem) {
            guest_memory_unref(mem);
        }
        if (!next) {
            return vu_memory_error(s, msg, err);
        }
        mem = next;
    }
    vu_set_memory(s, mem);
    return VU_DONE;
}

static VuResult vu_get_max_mem_slots(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    if (!vu_check_plain(s, msg, 0)) {
        return VU_FAILED;
    }
    vu_reply_u64(msg, reply, GUEST_MEMORY_MAX_SLOTS);
    return VU_REPLY;
}

static VuResult vu_add_mem_reg(VuServer *s, VuMsg *msg)
{
    GuestMemRegionDesc desc;
    Error *err = NULL;
    GuestMemory *mem;

    if (!vu_check_size(s, msg, sizeof(VhostUserMemRegMsg)) ||
        !vu_check_nfds(s, msg, 1)) {
        return VU_FAILED;
    }
    vu_region_desc(&msg->payload.memreg.region, &desc);
    mem = guest_memory_add(s->mem, &desc, msg->fds[0], &err);
    if (!mem) {
        return vu_memory_error(s, msg, err);
    }
    vu_set_memory(s, mem);
    return VU_DONE;
}

static VuResult vu_rem_mem_reg(VuServer *s, VuMsg *msg)
{
    GuestMemRegionDesc desc;
    Error *err = NULL;
    GuestMemory *mem;

    if (!vu_check_size(s, msg, sizeof(VhostUserMemRegMsg))) {
        return VU_FAILED;
    }
    /* One fd is tolerated for old front-ends; it is closed unused. */
    if (msg->nfds > 1) {
        return vu_fail(s, "REM_MEM_REG with %u file descriptors", msg->nfds);
    }
    if (!s->mem) {
        return vu_fail(s, "REM_MEM_REG without a memory table");
    }
    vu_region_desc(&msg->payload.memreg.region, &desc);
    mem = guest_memory_remove(s->mem, &desc, &err);
    if (!mem) {
        return vu_memory_error(s, msg, err);
    }
    vu_set_memory(s, mem);
    return VU_DONE;
}

/* Ring set-up that is only valid while the ring is stopped. */
static VuQueue *vu_stopped_queue(VuServer *s, VuMsg *msg, uint32_t size,
                                 uint32_t index)
{
    VuQueue *q;

    if (!vu_check_plain(s, msg, size)) {
        return NULL;
    }
    q = vu_queue_at(s, msg, index);
    if (q && q->started) {
        vu_fail(s, "%s for ring %" PRIu32 " while it is running",
                vu_request_name(msg->hdr.request), index);
        return NULL;
    }
    return q;
}

static VuResult vu_set_vring_num(VuServer *s, VuMsg *msg)
{
    const VhostUserVringState *st = &msg->payload.state;
    VuQueue *q = vu_stopped_queue(s, msg, sizeof(*st), st->index);
    uint32_t num;

    if (!q) {
        return VU_FAILED;
    }
    num = st->num;
    if (num == 0 || (num & (num - 1)) || num > s->max_queue_size ||
        virtqueue_set_num(q->vq, num) < 0) {
        return vu_fail(s, "SET_VRING_NUM %" PRIu32 " for ring %" PRIu32
                       ": not a power of two from 1 to %u",
                       num, st->index, s->max_queue_size);
    }
    q->start_failed = false;
    return VU_DONE;
}

static VuResult vu_set_vring_addr(VuServer *s, VuMsg *msg)
{
    const VhostUserVringAddr *a = &msg->payload.addr;
    VuQueue *q = vu_stopped_queue(s, msg, sizeof(*a), a->index);
    VirtQueueAddrs addrs;

    if (!q) {
        return VU_FAILED;
    }
    /* Checked against guest memory when the ring starts. */
    addrs = (VirtQueueAddrs) {
        .desc_qva = a->desc_user_addr,
        .avail_qva = a->avail_user_addr,
        .used_qva = a->used_user_addr,
        .log_gpa = a->log_guest_addr,
        .flags = a->flags,
    };
    virtqueue_set_addrs(q->vq, &addrs);
    q->start_failed = false;
    vu_queues_update(s);
    return VU_DONE;
}

static VuResult vu_set_vring_base(VuServer *s, VuMsg *msg)
{
    const VhostUserVringState *st = &msg->payload.state;
    VuQueue *q = vu_stopped_queue(s, msg, sizeof(*st), st->index);

    if (!q) {
        return VU_FAILED;
    }
    if (st->num > UINT16_MAX) {
        return vu_fail(s, "SET_VRING_BASE %" PRIu32 " for ring %" PRIu32
                       ": more than 16 bits", st->num, st->index);
    }
    q->base = st->num;
    virtqueue_set_base(q->vq, q->base);
    return VU_DONE;
}

static VuResult vu_get_vring_base(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    const VhostUserVringState *st = &msg->payload.state;
    VuQueue *q;

    if (!vu_check_plain(s, msg, sizeof(*st))) {
        return VU_FAILED;
    }
    q = vu_queue_at(s, msg, st->index);
    if (!q) {
        return VU_FAILED;
    }
    vu_queue_stop(s, q);
    /* Stopped for good: only a new SET_VRING_KICK starts it again. */
    virtqueue_set_kick_fd(q->vq, -1);
    q->start_failed = false;
    reply->hdr.size = sizeof(VhostUserVringState);
    reply->payload.state.index = st->index;
    reply->payload.state.num = q->base;
    return VU_REPLY;
}

typedef void VuSetFd(VirtQueue *vq, int fd);

typedef struct VuSetFdOp {
    VuQueue *q;
    VuSetFd *set_fd;
    int fd;
} VuSetFdOp;

static void vu_queue_set_fd_bh(void *opaque)
{
    VuSetFdOp *op = opaque;

    g_assert(aio_context_in_home_thread(op->q->ctx));
    op->set_fd(op->q->vq, op->fd);
}

/* SET_VRING_KICK / CALL / ERR: u64 with the index and the "no fd" flag. */
static VuResult vu_set_vring_fd(VuServer *s, VuMsg *msg, VuSetFd *set_fd)
{
    uint64_t val;
    bool nofd;
    VuQueue *q;
    int fd = -1;

    if (!vu_check_size(s, msg, sizeof(uint64_t))) {
        return VU_FAILED;
    }
    val = msg->payload.u64;
    if (val & ~(uint64_t)(VHOST_USER_VRING_INDEX_MASK |
                          VHOST_USER_VRING_NOFD_MASK)) {
        return vu_fail(s, "%s with unknown bits in 0x%" PRIx64,
                       vu_request_name(msg->hdr.request), val);
    }
    nofd = val & VHOST_USER_VRING_NOFD_MASK;
    if (!vu_check_nfds(s, msg, nofd ? 0 : 1)) {
        return VU_FAILED;
    }
    q = vu_queue_at(s, msg, val & VHOST_USER_VRING_INDEX_MASK);
    if (!q) {
        return VU_FAILED;
    }
    if (!nofd) {
        fd = vu_msg_take_fd(msg, 0);
    }
    if (q->started && set_fd != virtqueue_set_kick_fd) {
        /* Front-ends swap the call fd of running rings (masking). */
        VuSetFdOp op = { .q = q, .set_fd = set_fd, .fd = fd };

        aio_run_sync(q->ctx, vu_queue_set_fd_bh, &op);
        return VU_DONE;
    }
    /* A new kick fd restarts the ring (stopped and drained first). */
    vu_queue_stop(s, q);
    set_fd(q->vq, fd);
    q->start_failed = false;
    vu_queues_update(s);
    return VU_DONE;
}

static VuResult vu_get_queue_num(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    if (!vu_check_plain(s, msg, 0)) {
        return VU_FAILED;
    }
    vu_reply_u64(msg, reply, s->num_queues);
    return VU_REPLY;
}

static VuResult vu_set_vring_enable(VuServer *s, VuMsg *msg)
{
    const VhostUserVringState *st = &msg->payload.state;
    VuQueue *q;

    if (!vu_check_plain(s, msg, sizeof(*st))) {
        return VU_FAILED;
    }
    q = vu_queue_at(s, msg, st->index);
    if (!q) {
        return VU_FAILED;
    }
    if (st->num > 1) {
        return vu_fail(s, "SET_VRING_ENABLE %" PRIu32 " for ring %" PRIu32
                       ": expected 0 or 1", st->num, st->index);
    }
    q->enabled = st->num;
    if (!vu_queue_enabled(s, q)) {
        vu_queue_stop(s, q);
    }
    vu_queues_update(s);
    return VU_DONE;
}

/* Validate a GET_CONFIG/SET_CONFIG payload; false with s->why set. */
static bool vu_check_config(VuServer *s, const VuMsg *msg)
{
    const VhostUserConfig *c = &msg->payload.config;

    if (msg->hdr.size < VHOST_USER_CONFIG_HDR_SIZE) {
        vu_fail(s, "%s with a payload of %" PRIu32 " bytes, too short",
                vu_request_name(msg->hdr.request), msg->hdr.size);
        return false;
    }
    if (c->size > VHOST_USER_MAX_CONFIG_SIZE) {
        vu_fail(s, "%s of %" PRIu32 " bytes, at most %u",
                vu_request_name(msg->hdr.request), c->size,
                VHOST_USER_MAX_CONFIG_SIZE);
        return false;
    }
    return vu_check_size(s, msg, VHOST_USER_CONFIG_HDR_SIZE + c->size) &&
           vu_check_nfds(s, msg, 0);
}

static bool vu_config_in_range(const VhostUserConfig *c)
{
    return c->offset <= VHOST_USER_MAX_CONFIG_SIZE &&
           c->size <= VHOST_USER_MAX_CONFIG_SIZE - c->offset;
}

static VuResult vu_get_config(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    const VhostUserConfig *c = &msg->payload.config;
    uint8_t space[VHOST_USER_MAX_CONFIG_SIZE] = { 0 };

    if (!vu_check_config(s, msg)) {
        return VU_FAILED;
    }
    if (!s->ops->get_config || !vu_config_in_range(c)) {
        /* An empty reply tells the front-end that the read failed. */
        vu_log(s, "GET_CONFIG of %" PRIu32 " bytes at offset %" PRIu32
               " refused", c->size, c->offset);
        reply->hdr.size = 0;
        return VU_REPLY;
    }
    /* Bytes past the device's config space read as zero. */
    s->ops->get_config(s->dev, space, sizeof(space));
    reply->hdr.size = VHOST_USER_CONFIG_HDR_SIZE + c->size;
    reply->payload.config.offset = c->offset;
    reply->payload.config.size = c->size;
    reply->payload.config.flags = c->flags;
    memcpy(reply->payload.config.region, space + c->offset, c->size);
    return VU_REPLY;
}

static VuResult vu_set_config(VuServer *s, VuMsg *msg)
{
    const VhostUserConfig *c = &msg->payload.config;
    int r;

    if (!vu_check_config(s, msg)) {
        return VU_FAILED;
    }
    if (!vu_config_in_range(c)) {
        return vu_fail(s, "SET_CONFIG of %" PRIu32 " bytes at offset %"
                       PRIu32 ": outside the config space", c->size,
                       c->offset);
    }
    if (!s->ops->set_config) {
        return vu_fail(s, "SET_CONFIG: the config space is read-only");
    }
    r = s->ops->set_config(s->dev, c->region, c->offset, c->size);
    if (r < 0) {
        return vu_fail(s, "SET_CONFIG of %" PRIu32 " bytes at offset %"
                       PRIu32 " refused by the device: %s", c->size,
                       c->offset, g_strerror(-r));
    }
    return VU_DONE;
}

/* Dirty logging is not offered (QEMU then blocks migration). */
static VuResult vu_set_log(VuServer *s, VuMsg *msg)
{
    vu_fail(s, "%s: dirty page logging is not supported",
            vu_request_name(msg->hdr.request));
    return VU_IGNORED;
}

static VuResult vu_dispatch(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    switch (msg->hdr.request) {
    case VHOST_USER_GET_FEATURES:
        return vu_get_features(s, msg, reply);
    case VHOST_USER_SET_FEATURES:
        return vu_set_features(s, msg);
    case VHOST_USER_GET_PROTOCOL_FEATURES:
        return vu_get_protocol_features(s, msg, reply);
    case VHOST_USER_SET_PROTOCOL_FEATURES:
        return vu_set_protocol_features(s, msg);
    case VHOST_USER_SET_OWNER:
        return vu_set_owner(s, msg);
    case VHOST_USER_RESET_OWNER:
        return vu_reset_owner(s, msg);
    case VHOST_USER_RESET_DEVICE:
        return vu_reset_device(s, msg);
    case VHOST_USER_SET_MEM_TABLE:
        return vu_set_mem_table(s, msg);
    case VHOST_USER_GET_MAX_MEM_SLOTS:
        return vu_get_max_mem_slots(s, msg, reply);
    case VHOST_USER_ADD_MEM_REG:
        return vu_add_mem_reg(s, msg);
    case VHOST_USER_REM_MEM_REG:
        return vu_rem_mem_reg(s, msg);
    case VHOST_USER_SET_VRING_NUM:
        return vu_set_vring_num(s, msg);
    case VHOST_USER_SET_VRING_ADDR:
        return vu_set_vring_addr(s, msg);
    case VHOST_USER_SET_VRING_BASE:
        return vu_set_vring_base(s, msg);
    case VHOST_USER_GET_VRING_BASE:
        return vu_get_vring_base(s, msg, reply);
    case VHOST_USER_SET_VRING_KICK:
        return vu_set_vring_fd(s, msg, virtqueue_set_kick_fd);
    case VHOST_USER_SET_VRING_CALL:
        return vu_set_vring_fd(s, msg, virtqueue_set_call_fd);
    case VHOST_USER_SET_VRING_ERR:
        return vu_set_vring_fd(s, msg, virtqueue_set_err_fd);
    case VHOST_USER_GET_QUEUE_NUM:
        return vu_get_queue_num(s, msg, reply);
    case VHOST_USER_SET_VRING_ENABLE:
        return vu_set_vring_enable(s, msg);
    case VHOST_USER_GET_CONFIG:
        return vu_get_config(s, msg, reply);
    case VHOST_USER_SET_CONFIG:
        return vu_set_config(s, msg);
    case VHOST_USER_SET_LOG_BASE:
    case VHOST_USER_SET_LOG_FD:
        return vu_set_log(s, msg);
    case VHOST_USER_SET_SLAVE_REQ_FD:
        return vu_set_slave_req_fd(s, msg);
    default:
        return vu_fail(s, "unsupported request %" PRIu32, msg->hdr.request);
    }
}

/* ------------------------------------------------------------------------ */
/* Connection                                                                */

static bool vu_send_reply(VuServer *s, const VuMsg *msg, VuMsg *reply)
{
    reply->hdr.request = msg->hdr.request;
    reply->hdr.flags = VHOST_USER_VERSION | VHOST_USER_REPLY_MASK;
    return vu_msg_send(s->client_fd, reply, s->why, sizeof(s->why));
}

static bool vu_send_ack(VuServer *s, const VuMsg *msg, VuMsg *reply,
                        uint64_t status)
{
    vu_reply_u64(msg, reply, status);
    return vu_send_reply(s, msg, reply);
}

static void vu_accept(void *opaque);
static void vu_client_read(void *opaque);

static void vu_set_accepting(VuServer *s, bool on)
{
    if (s->accepting != on) {
        aio_set_fd_handler(s->main_ctx, s->listen_fd, on ? vu_accept : NULL,
                           NULL, NULL, NULL, s);
        s->accepting = on;
    }
}

/* Drop the client: stop and drain the rings, unmap memory, reset state. */
static void vu_client_disconnect(VuServer *s)
{
    g_assert(s->client_fd >= 0);
    vu_queues_reset(s);
    if (s->mem) {
        guest_memory_unref(s->mem);
        s->mem = NULL;
    }
    s->features = 0;
    s->features_set = false;
    s->protocol_features = 0;
    vu_close_slave_channel(s);
    aio_set_fd_handler(s->main_ctx, s->client_fd, NULL, NULL, NULL, NULL,
                       NULL);
    close(s->client_fd);
    s->client_fd = -1;
    SPINDLE_TRACE0(vu_disconnect);
    /* The next front-end (maybe already waiting in the backlog). */
    vu_set_accepting(s, true);
}

/* Answer one handled request; false if the connection must be closed. */
static bool vu_finish_request(VuServer *s, VuMsg *msg, VuMsg *reply,
                              VuResult res)
{
    bool need_reply = (msg->hdr.flags & VHOST_USER_NEED_REPLY_MASK) &&
                      vu_has_protocol_feature(s,
                                              VHOST_USER_PROTOCOL_F_REPLY_ACK);
    bool has_reply = vu_request_has_reply(msg->hdr.request);

    switch (res) {
    case VU_REPLY:
        return vu_send_reply(s, msg, reply);
    case VU_DONE:
        return !need_reply || vu_send_ack(s, msg, reply, 0);
    case VU_IGNORED:
        vu_log(s, "%s", s->why);
        return !need_reply || vu_send_ack(s, msg, reply, 1);
    case VU_FAILED:
        if (need_reply && !has_reply) {
            vu_log(s, "%s", s->why);
            return vu_send_ack(s, msg, reply, 1);
        }
        return false;
    }
    g_assert_not_reached();
}

static void vu_client_read(void *opaque)
{
    VuServer *s = opaque;
    VuMsg msg, reply;
    VuResult res;
    int r;

    g_assert(aio_context_in_home_thread(s->main_ctx));
    if (s->dispatching) {
        /* A nested aio_poll() (a ring drained in main_ctx): later. */
        return;
    }
    r = vu_msg_recv(s->client_fd, &msg, VU_MSG_TIMEOUT_MS, s->why,
                    sizeof(s->why));
    if (r <= 0) {
        if (r < 0) {
            vu_log(s, "%s; closing the connection", s->why);
        }
        vu_client_disconnect(s);
        return;
    }
    SPINDLE_TRACE2(vu_request, msg.hdr.request, msg.hdr.size);
    memset(&reply.hdr, 0, sizeof(reply.hdr));
    s->dispatching = true;
    if (msg.fds_dropped) {
        res = vu_fail(s, "%s with more than %u file descriptors",
                      vu_request_name(msg.hdr.request) ?: "request",
                      VHOST_USER_MAX_FDS);
    } else {
        res = vu_dispatch(s, &msg, &reply);
    }
    vu_msg_close_fds(&msg);
    s->dispatching = false;
    if (!vu_finish_request(s, &msg, &reply, res)) {
        vu_log(s, "%s; closing the connection", s->why);
        vu_client_disconnect(s);
    }
}

static void vu_accept(void *opaque)
{
    VuServer *s = opaque;
    int fd;

    g_assert(aio_context_in_home_thread(s->main_ctx));
    g_assert(s->client_fd < 0);
    fd = vu_socket_accept(s->listen_fd, VU_MSG_TIMEOUT_MS);
    if (fd < 0) {
        if (fd != -EAGAIN && fd != -EINTR && fd != -ECONNABORTED) {
            vu_log(s, "cannot accept a connection: %s", g_strerror(-fd));
        }
        return;
    }
    s->client_fd = fd;
    /* One client at a time: the next waits in the backlog. */
    vu_set_accepting(s, false);
    aio_set_fd_handler(s->main_ctx, fd, vu_client_read, NULL, NULL, NULL, s);
    SPINDLE_TRACE1(vu_connect, fd);
}

/* ------------------------------------------------------------------------ */
/* Public API                                                                */

static bool vu_check_config_struct(const VuServerConfig *cfg, Error **errp)
{
    const char *name = cfg->name ? cfg->name : "?";

    if (cfg->num_queues < 1 || cfg->num_queues > VU_MAX_QUEUES) {
        error_setg(errp, "Export '%s': num-queues must be 1 to %u, not %u",
                   name, VU_MAX_QUEUES, cfg->num_queues);
        return false;
    }
    if (cfg->max_queue_size < 1 || cfg->max_queue_size > VIRTQUEUE_MAX_SIZE) {
        error_setg(errp, "Export '%s': queue size must be 1 to %u, not %u",
                   name, VIRTQUEUE_MAX_SIZE, cfg->max_queue_size);
        return false;
    }
    /* path wins: a zero-initialised config has listen_fd 0. */
    if (!cfg->path && cfg->listen_fd < 0) {
        error_setg(errp, "Export '%s': give a socket path or a listening "
                   "file descriptor", name);
        return false;
    }
    g_assert(cfg->nctx >= 1 && cfg->ctxs);
    g_assert(cfg->ops && cfg->ops->get_features && cfg->ops->set_features &&
             cfg->ops->handle_queue);
    return true;
}

VuServer *vu_server_new(const VuServerConfig *cfg, AioContext *main_ctx,
                        Error **errp)
{
    VuServer *s;
    struct stat st;
    int fd;

    g_assert(aio_context_in_home_thread(main_ctx));
    if (!vu_check_config_struct(cfg, errp)) {
        return NULL;
    }
    s = g_malloc0(sizeof(*s) + cfg->num_queues * sizeof(VuQueue));
    s->name = g_strdup(cfg->name ? cfg->name : "");
    s->main_ctx = main_ctx;
    s->ops = cfg->ops;
    s->dev = cfg->dev;
    s->num_queues = cfg->num_queues;
    s->max_queue_size = cfg->max_queue_size;
    s->client_fd = -1;
    s->slave_fd = -1;
    /* An inherited fd stays the caller's: the server listens on a copy. */
    fd = cfg->path ? unix_socket_listen_path(cfg->path, "vhost-user", &st,
                                             errp)
                   : unix_socket_adopt_listen_fd(cfg->listen_fd, true, errp);
    if (fd < 0) {
        g_free(s->name);
        g_free(s);
        return NULL;
    }
    s->listen_fd = fd;
    if (cfg->path) {
        s->path = g_strdup(cfg->path);
        s->path_dev = st.st_dev;
        s->path_ino = st.st_ino;
    }
    for (unsigned i = 0; i < s->num_queues; i++) {
        s->queues[i].vq = virtqueue_new(i);
        virtqueue_set_owner(s->queues[i].vq, s->name);
        s->queues[i].ctx = cfg->ctxs[i % cfg->nctx];
    }
    vu_set_accepting(s, true);
    return s;
}

void vu_server_free(VuServer *s)
{
    if (!s) {
        return;
    }
    g_assert(aio_context_in_home_thread(s->main_ctx));
    g_assert(!s->dispatching);
    if (s->client_fd >= 0) {
        vu_client_disconnect(s);
    }
    vu_set_accepting(s, false);
    close(s->listen_fd);
    /* Remove the socket file only if it is still the one we created. */
    unix_socket_unlink_if_same(s->path, s->path_dev, s->path_ino);
    for (unsigned i = 0; i < s->num_queues; i++) {
        virtqueue_free(s->queues[i].vq);
    }
    g_free(s->path);
    g_free(s->name);
    g_free(s);
}

bool vu_server_has_client(const VuServer *s)
{
    g_assert(aio_context_in_home_thread(s->main_ctx));
    return s->client_fd >= 0;
}

VirtQueue *vu_server_get_queue(VuServer *s, unsigned i)
{
    g_assert(aio_context_in_home_thread(s->main_ctx));
    return i < s->num_queues ? s->queues[i].vq : NULL;
}

bool vu_server_get_queue_stats(VuServer *s, unsigned i, VirtQueueStats *out)
{
    g_assert(aio_context_in_home_thread(s->main_ctx));
    if (i >= s->num_queues) {
        return false;
    }
    *out = s->queues[i].past;
    vu_stats_add(out, s->queues[i].vq);
    return true;
}

bool vu_server_config_changed(VuServer *s)
{
    VhostUserHeader hdr = {
        .request = VHOST_USER_SLAVE_CONFIG_CHANGE_MSG,
        .flags = VHOST_USER_VERSION,
        .size = 0,
    };
    ssize_t n;

    g_assert(aio_context_in_home_thread(s->main_ctx));
    if (s->client_fd < 0 || s->slave_fd < 0) {
        return false;
    }
    do {
        /* Never block the main loop on a front-end that does not read. */
        n = send(s->slave_fd, &hdr, sizeof(hdr), MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n == sizeof(hdr)) {
        SPINDLE_TRACE0(vu_config_changed);
        return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        vu_log(s, "back-end channel full: config-change notice dropped (the "
               "front-end sees the new config at its next GET_CONFIG)");
        return false;
    }
    if (n < 0) {
        vu_log(s, "cannot send a config-change notice on the back-end "
               "channel: %s; channel closed", g_strerror(errno));
    } else {
        vu_log(s, "back-end channel took %zd of %zu bytes of a message; "
               "channel closed", n, sizeof(hdr));
    }
    vu_close_slave_channel(s);
    return false;
}

/*
 * vhost-user back-end: the request handlers.
 *
 * Theory of operation
 * -------------------
 * vu_server_handle_msg() is the whole protocol side of the server: it
 * takes one request as read off the socket (a VuMsg with its fds), and
 * returns what to answer.  The connection (vhost-user-server.c) only
 * reads, sends and closes, so this file can be driven without a socket:
 * by the unit test, and by fuzz harnesses that feed it messages.
 *
 * A request goes through three steps:
 *   1. vu_msg_validate() (vhost-user-msg.c) checks that it is known, and
 *      its payload size and fd count;
 *   2. its handler (vu_handlers[], by request code) checks the values
 *      that depend on the server (features offered, sizes, the memory
 *      table) and acts, with one of four results (VuResult): done, a
 *      reply filled in, refused (s->why), or ignored as unsupported but
 *      harmless (s->why).  A request about one ring (SET_VRING_*,
 *      GET_VRING_BASE) reaches its handler with the ring its payload
 *      names, once that ring is known to exist and, for the set-up that
 *      is only valid on a stopped ring (size, base), to be stopped (the
 *      addresses' handler checks that itself: their logging flag may
 *      change on a running ring);
 *      A request after which rings may start (features, addresses, fds,
 *      enable, the inflight region) is answered as ignored when the
 *      server's owner refused to let them run (vu_queues_update());
 *   3. vu_answer() turns the result into the answer.  A refusal is
 *      logged (one line naming the export) and answered with a non-zero
 *      REPLY_ACK status when the front-end asked for one; otherwise, and
 *      for requests that carry their own reply, the connection is closed.
 * Every fd that arrives is either handed to its new owner (a ring, the
 * back-end channel) or closed when the request is done.  Only the
 * server's own invariants are asserted.
 *
 * The handlers change the state of the connection (features, memory
 * table, ring set-up) and call into vhost-user-rings.c, which starts,
 * stops and retargets the rings in their home threads.  GET_VRING_BASE
 * stops a ring and drops its kick fd: the ring starts again only after a
 * new SET_VRING_KICK, as the protocol says.  A new kick fd for a running
 * ring stops it, swaps the fd and starts it again; the call and err fds
 * are swapped in the ring's home thread without stopping it.  A new call
 * fd is signalled once as soon as it is set, running ring or not
 * (virtqueue_set_call_fd(): QEMU's vhost-user-blk test, like some
 * drivers, waits for an interrupt right after DRIVER_OK); on a stopped
 * ring that happens here in the main thread, which owns it then.
 *
 * SET_MEM_TABLE, ADD_MEM_REG and REM_MEM_REG build a new immutable
 * GuestMemory and hand it to vu_set_memory(), so rings keep running
 * across a table change.
 *
 * The back-end channel: with VHOST_USER_PROTOCOL_F_SLAVE_REQ the
 * front-end gives one end of a socket pair (SET_SLAVE_REQ_FD) on which
 * the back-end sends requests of its own (vu_server_config_changed(), in
 * vhost-user-server.c).  The channel belongs to the connection: a new fd
 * replaces (closes) the old one, and disconnecting or RESET_OWNER closes
 * it; RESET_DEVICE keeps it, as it keeps the memory table, since QEMU sets
 * the channel up once per connection.
 *
 * Inflight tracking (VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD, offered when
 * the export has inflight tracking on): GET_INFLIGHT_FD creates a region
 * (a sealed memfd, hw/virtio/vhost-inflight.c) for the queues the
 * front-end names and sends it back without keeping it; the front-end
 * keeps it across our restarts and hands it back with SET_INFLIGHT_FD
 * before it starts the rings, which is when it is checked and mapped.
 * Each ring then tracks into and resumes from its part as it starts
 * (vhost-user-rings.c).  A region is set only while every ring is
 * stopped, and belongs to the device state: a reset or a disconnect
 * drops it.
 *
 * Dirty logging (live migration; VHOST_F_LOG_ALL and
 * VHOST_USER_PROTOCOL_F_LOG_SHMFD, offered for every device): the
 * front-end sends a log with SET_LOG_BASE (mapped and checked against the
 * memory table: hw/virtio/vhost-log.c; answered with a u64 0 once every
 * ring uses it), switches logging on and off with SET_FEATURES (only
 * LOG_ALL may change while rings run) and the used ring's logging with
 * SET_VRING_ADDR (only VHOST_VRING_F_LOG and the log address may change
 * while the ring runs).  While LOG_ALL is on, every ring logs what it
 * writes (virtqueue-log.c), and a memory table the log does not cover is
 * refused.  The log belongs to the connection, like the memory table:
 * RESET_DEVICE keeps it, a disconnect drops it.
 *
 * All of it runs in the main thread (the server's main_ctx).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>
#include <glib.h>

#include "util/main-thread.h"
#include "hw/virtio/vhost-user-server-int.h"

/* Transport features the server offers on top of the device's. */
#define VU_TRANSPORT_FEATURES                       \
    ((1ull << VIRTIO_F_VERSION_1) |                 \
     (1ull << VIRTIO_RING_F_INDIRECT_DESC) |        \
     (1ull << VIRTIO_RING_F_EVENT_IDX) |            \
     (1ull << VHOST_F_LOG_ALL) |                    \
     (1ull << VHOST_USER_F_PROTOCOL_FEATURES))

/* Transport features the device does not see. */
#define VU_SERVER_FEATURES \
    ((1ull << VHOST_F_LOG_ALL) | (1ull << VHOST_USER_F_PROTOCOL_FEATURES))

/* Protocol features offered (CONFIG only when the device has a config). */
#define VU_PROTOCOL_FEATURES                                \
    ((1ull << VHOST_USER_PROTOCOL_F_MQ) |                   \
     (1ull << VHOST_USER_PROTOCOL_F_LOG_SHMFD) |            \
     (1ull << VHOST_USER_PROTOCOL_F_REPLY_ACK) |            \
     (1ull << VHOST_USER_PROTOCOL_F_SLAVE_REQ) |            \
     (1ull << VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS) |  \
     (1ull << VHOST_USER_PROTOCOL_F_RESET_DEVICE))

/* What a request handler did. */
typedef enum VuResult {
    VU_DONE,        /* success without a reply payload */
    VU_REPLY,       /* the reply is filled in */
    VU_FAILED,      /* refused (s->why): error ack, or close without one */
    VU_IGNORED,     /* unsupported and harmless (s->why): error ack if asked */
} VuResult;

/*
 * A request's handler: msg passed vu_msg_validate(), so its payload has
 * the size and its fds the count the request needs.  It may take fds out
 * of msg (vu_msg_take_fd()); the others are closed after it returns.
 */
typedef VuResult VuHandler(VuServer *s, VuMsg *msg, VuMsg *reply);

/* The handler of a request about one ring: q is the ring its payload
 * names (vu_msg_ring_index()), checked to exist. */
typedef VuResult VuRingHandler(VuServer *s, VuQueue *q, VuMsg *msg,
                               VuMsg *reply);

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

/* Record why a request failed; returns VU_FAILED for `return vu_fail()`. */
static VuResult G_GNUC_PRINTF(2, 3) vu_fail(VuServer *s, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    g_vsnprintf(s->why, sizeof(s->why), fmt, ap);
    va_end(ap);
    return VU_FAILED;
}

/* Refuse the request with err's message (err is freed). */
static VuResult vu_error(VuServer *s, Error *err)
{
    vu_fail(s, "%s", error_get_pretty(err));
    error_free(err);
    return VU_FAILED;
}

/* Take fd i out of msg: the caller owns it now. */
static int vu_msg_take_fd(VuMsg *msg, unsigned i)
{
    int fd = msg->fds[i];

    msg->fds[i] = -1;
    return fd;
}

static VuResult vu_reply_u64(VuMsg *reply, uint64_t val)
{
    reply->hdr.size = sizeof(uint64_t);
    reply->payload.u64 = val;
    return VU_REPLY;
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
    if (s->inflight_tracking) {
        f |= 1ull << VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD;
    }
    return f;
}

static bool vu_has_protocol_feature(VuServer *s, unsigned bit)
{
    return s->protocol_features & (1ull << bit);
}

/* ------------------------------------------------------------------------ */
/* Features and ownership                                                    */

static VuResult vu_get_features(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    return vu_reply_u64(reply, vu_offered_features(s));
}

/* SET_FEATURES on running rings: only VHOST_F_LOG_ALL may change. */
static void vu_set_log_all(VuServer *s, uint64_t features)
{
    bool on = features & (1ull << VHOST_F_LOG_ALL);

    if (features == s->features) {
        return;
    }
    s->features = features;
    vu_set_log(s, s->log);
    vu_log(s, "dirty logging %s%s", on ? "on" : "off",
           on && !s->log ? " (no log yet: SET_LOG_BASE)" : "");
}

static VuResult vu_set_features(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    uint64_t features = msg->payload.u64;
    uint64_t unknown = features & ~vu_offered_features(s);

    if (unknown) {
        return vu_fail(s, "SET_FEATURES with feature bits 0x%" PRIx64
                       " that were not offered", unknown);
    }
    if (vu_any_queue_started(s)) {
        /* Front-ends start and end dirty logging on running rings. */
        if (s->features_set &&
            !((features ^ s->features) & ~(1ull << VHOST_F_LOG_ALL))) {
            vu_set_log_all(s, features);
            return VU_DONE;
        }
        return vu_fail(s, "SET_FEATURES changes the features while rings "
                       "are running");
    }
    s->features = features;
    s->features_set = true;
    s->ops->set_features(s->dev, features & ~VU_SERVER_FEATURES);
    for (unsigned i = 0; i < s->num_queues; i++) {
        virtqueue_set_features(s->queues[i].vq, features);
    }
    return vu_queues_update(s) ? VU_DONE : VU_IGNORED;
}

static VuResult vu_get_protocol_features(VuServer *s, VuMsg *msg,
                                         VuMsg *reply)
{
    return vu_reply_u64(reply, vu_offered_protocol_features(s));
}

static VuResult vu_set_protocol_features(VuServer *s, VuMsg *msg,
                                         VuMsg *reply)
{
    uint64_t unknown = msg->payload.u64 & ~vu_offered_protocol_features(s);

    if (unknown) {
        return vu_fail(s, "SET_PROTOCOL_FEATURES with bits 0x%" PRIx64
                       " that were not offered", unknown);
    }
    s->protocol_features = msg->payload.u64;
    return VU_DONE;
}

void vu_close_slave_channel(VuServer *s)
{
    if (s->slave_fd >= 0) {
        close(s->slave_fd);
        s->slave_fd = -1;
    }
}

/* SET_SLAVE_REQ_FD: no payload, one fd, the back-end channel. */
static VuResult vu_set_slave_req_fd(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    if (!vu_has_protocol_feature(s, VHOST_USER_PROTOCOL_F_SLAVE_REQ)) {
        return vu_fail(s, "SET_SLAVE_REQ_FD without the SLAVE_REQ protocol "
                       "feature");
    }
    /* A second channel replaces the first. */
    vu_close_slave_channel(s);
    s->slave_fd = vu_msg_take_fd(msg, 0);
    return VU_DONE;
}

static VuResult vu_set_owner(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    return VU_DONE;
}

/* RESET_OWNER (deprecated): disable all rings, as the protocol suggests. */
static VuResult vu_reset_owner(VuServer *s, VuMsg *msg, VuMsg *reply)
{
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
static VuResult vu_reset_device(VuServer *s, VuMsg *msg, VuMsg *reply)
{
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

/* Drop the dirty log and SET_LOG_FD's fd (every ring stopped). */
static void vu_forget_log(VuServer *s)
{
    vu_set_log(s, NULL);
    if (s->log_fd >= 0) {
        close(s->log_fd);
        s->log_fd = -1;
    }
}

void vu_server_forget_client(VuServer *s)
{
    vu_queues_reset(s);
    vu_forget_log(s);
    if (s->mem) {
        guest_memory_unref(s->mem);
        s->mem = NULL;
    }
    s->features = 0;
    s->features_set = false;
    s->protocol_features = 0;
    vu_close_slave_channel(s);
}

/* ------------------------------------------------------------------------ */
/* Guest memory                                                              */

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

/*
 * Install mem (the caller's reference), unless dirty logging is on and
 * its log does not cover mem: a front-end sends a bigger log before it
 * adds memory.
 */
static VuResult vu_install_memory(VuServer *s, const VuMsg *msg,
                                  GuestMemory *mem)
{
    Error *err = NULL;

    if (s->log && (s->features & (1ull << VHOST_F_LOG_ALL)) &&
        !vhost_log_covers(s->log, mem, vu_request_name(msg->hdr.request),
                          &err)) {
        guest_memory_unref(mem);
        return vu_error(s, err);
    }
    vu_set_memory(s, mem);
    return VU_DONE;
}

static VuResult vu_set_mem_table(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    const VhostUserMemory *table = &msg->payload.memory;
    GuestMemory *mem = NULL;

    for (uint32_t i = 0; i < table->nregions; i++) {
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
    return vu_install_memory(s, msg, mem);
}

static VuResult vu_get_max_mem_slots(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    return vu_reply_u64(reply, GUEST_MEMORY_MAX_SLOTS);
}

static VuResult vu_add_mem_reg(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    GuestMemRegionDesc desc;
    Error *err = NULL;
    GuestMemory *mem;

    vu_region_desc(&msg->payload.memreg.region, &desc);
    mem = guest_memory_add(s->mem, &desc, msg->fds[0], &err);
    if (!mem) {
        return vu_memory_error(s, msg, err);
    }
    return vu_install_memory(s, msg, mem);
}

/* One fd is tolerated for old front-ends: it is closed unused. */
static VuResult vu_rem_mem_reg(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    GuestMemRegionDesc desc;
    Error *err = NULL;
    GuestMemory *mem;

    if (!s->mem) {
        return vu_fail(s, "REM_MEM_REG without a memory table");
    }
    vu_region_desc(&msg->payload.memreg.region, &desc);
    mem = guest_memory_remove(s->mem, &desc, &err);
    if (!mem) {
        return vu_memory_error(s, msg, err);
    }
    return vu_install_memory(s, msg, mem);
}

/* ------------------------------------------------------------------------ */
/* Rings                                                                     */

static VuResult vu_set_vring_num(VuServer *s, VuQueue *q, VuMsg *msg,
                                 VuMsg *reply)
{
    const VhostUserVringState *st = &msg->payload.state;
    uint32_t num = st->num;

    if (num == 0 || (num & (num - 1)) || num > s->max_queue_size ||
        virtqueue_set_num(q->vq, num) < 0) {
        return vu_fail(s, "SET_VRING_NUM %" PRIu32 " for ring %" PRIu32
                       ": not a power of two from 1 to %u",
                       num, st->index, s->max_queue_size);
    }
    q->start_failed = false;
    return VU_DONE;
}

static VuResult vu_set_vring_addr(VuServer *s, VuQueue *q, VuMsg *msg,
                                  VuMsg *reply)
{
    const VhostUserVringAddr *a = &msg->payload.addr;
    /* Checked against guest memory when the ring starts. */
    VirtQueueAddrs addrs = {
        .desc_qva = a->desc_user_addr,
        .avail_qva = a->avail_user_addr,
        .used_qva = a->used_user_addr,
        .log_gpa = a->log_guest_addr,
        .flags = a->flags,
    };

    if (q->started) {
        /* Front-ends switch the used ring's logging on running rings,
         * with the same addresses; nothing else may change there. */
        if (addrs.desc_qva != q->addrs.desc_qva ||
            addrs.avail_qva != q->addrs.avail_qva ||
            addrs.used_qva != q->addrs.used_qva) {
            return vu_fail(s, "SET_VRING_ADDR for ring %" PRIu32 " while "
                           "it is running", a->index);
        }
        q->addrs = addrs;
        vu_queue_set_log_used(q, &addrs);
        return VU_DONE;
    }
    q->addrs = addrs;
    virtqueue_set_addrs(q->vq, &addrs);
    q->start_failed = false;
    return vu_queues_update(s) ? VU_DONE : VU_IGNORED;
}

static VuResult vu_set_vring_base(VuServer *s, VuQueue *q, VuMsg *msg,
                                  VuMsg *reply)
{
    const VhostUserVringState *st = &msg->payload.state;

    if (st->num > UINT16_MAX) {
        return vu_fail(s, "SET_VRING_BASE %" PRIu32 " for ring %" PRIu32
                       ": more than 16 bits", st->num, st->index);
    }
    q->base = st->num;
    virtqueue_set_base(q->vq, q->base);
    return VU_DONE;
}

static VuResult vu_get_vring_base(VuServer *s, VuQueue *q, VuMsg *msg,
                                  VuMsg *reply)
{
    const VhostUserVringState *st = &msg->payload.state;

    vu_queue_stop(s, q);
    /* Stopped for good: only a new SET_VRING_KICK starts it again. */
    virtqueue_set_kick_fd(q->vq, -1);
    q->start_failed = false;
    reply->hdr.size = sizeof(VhostUserVringState);
    reply->payload.state.index = st->index;
    reply->payload.state.num = q->base;
    return VU_REPLY;
}

/* SET_VRING_KICK / CALL / ERR: u64 with the index and the "no fd" flag. */
static VuResult vu_set_vring_fd(VuServer *s, VuQueue *q, VuMsg *msg,
                                VuSetFd *set_fd)
{
    int fd = -1;

    if (!vu_msg_vring_nofd(msg)) {
        fd = vu_msg_take_fd(msg, 0);
    }
    if (q->started && set_fd != virtqueue_set_kick_fd) {
        /* Front-ends swap the call fd of running rings (masking). */
        vu_queue_set_fd_running(q, set_fd, fd);
        return VU_DONE;
    }
    /* A new kick fd restarts the ring (stopped and drained first). */
    vu_queue_stop(s, q);
    set_fd(q->vq, fd);
    q->start_failed = false;
    return vu_queues_update(s) ? VU_DONE : VU_IGNORED;
}

static VuResult vu_set_vring_kick(VuServer *s, VuQueue *q, VuMsg *msg,
                                  VuMsg *reply)
{
    return vu_set_vring_fd(s, q, msg, virtqueue_set_kick_fd);
}

static VuResult vu_set_vring_call(VuServer *s, VuQueue *q, VuMsg *msg,
                                  VuMsg *reply)
{
    return vu_set_vring_fd(s, q, msg, virtqueue_set_call_fd);
}

static VuResult vu_set_vring_err(VuServer *s, VuQueue *q, VuMsg *msg,
                                  VuMsg *reply)
{
    return vu_set_vring_fd(s, q, msg, virtqueue_set_err_fd);
}

static VuResult vu_get_queue_num(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    return vu_reply_u64(reply, s->num_queues);
}

static VuResult vu_set_vring_enable(VuServer *s, VuQueue *q, VuMsg *msg,
                                    VuMsg *reply)
{
    const VhostUserVringState *st = &msg->payload.state;

    if (st->num > 1) {
        return vu_fail(s, "SET_VRING_ENABLE %" PRIu32 " for ring %" PRIu32
                       ": expected 0 or 1", st->num, st->index);
    }
    q->enabled = st->num;
    if (!vu_queue_enabled(s, q)) {
        vu_queue_stop(s, q);
    }
    return vu_queues_update(s) ? VU_DONE : VU_IGNORED;
}

/* ------------------------------------------------------------------------ */
/* Inflight tracking                                                         */

/* GET_INFLIGHT_FD: a new region for the queues the front-end names. */
static VuResult vu_get_inflight_fd(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    const VhostUserInflight *in = &msg->payload.inflight;
    Error *err = NULL;
    uint64_t size;
    int fd;

    if (!vu_has_protocol_feature(s, VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD)) {
        return vu_fail(s, "GET_INFLIGHT_FD without the INFLIGHT_SHMFD "
                       "protocol feature");
    }
    if (!vhost_inflight_check_shape("GET_INFLIGHT_FD", in->num_queues,
                                    in->queue_size, s->num_queues, &err)) {
        return vu_error(s, err);
    }
    size = vhost_inflight_region_bytes(in->num_queues, in->queue_size);
    fd = vhost_inflight_memfd_new(size, &err);
    if (fd < 0) {
        return vu_error(s, err);
    }
    vu_log(s, "GET_INFLIGHT_FD: new inflight region for %u queues of %u "
           "entries (%" PRIu64 " bytes)", in->num_queues, in->queue_size,
           size);
    reply->hdr.size = sizeof(VhostUserInflight);
    reply->payload.inflight = (VhostUserInflight) {
        .mmap_size = size,
        .mmap_offset = 0,
        .num_queues = in->num_queues,
        .queue_size = in->queue_size,
    };
    reply->fds[0] = fd;
    reply->nfds = 1;
    return VU_REPLY;
}

/* SET_INFLIGHT_FD: the region the rings track into from their next
 * start. */
static VuResult vu_set_inflight_fd(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    const VhostUserInflight *in = &msg->payload.inflight;
    Error *err = NULL;
    VhostInflight *region;
    bool resumed = false;

    if (!vu_has_protocol_feature(s, VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD)) {
        return vu_fail(s, "SET_INFLIGHT_FD without the INFLIGHT_SHMFD "
                       "protocol feature");
    }
    if (vu_any_queue_started(s)) {
        return vu_fail(s, "SET_INFLIGHT_FD while rings are running");
    }
    region = vhost_inflight_map(msg->fds[0], in->mmap_size, in->mmap_offset,
                                in->num_queues, in->queue_size,
                                s->num_queues, &err);
    if (!region) {
        return vu_error(s, err);
    }
    vu_set_inflight(s, region);
    for (unsigned i = 0; i < s->num_queues; i++) {
        resumed |= s->queues[i].resuming;
    }
    vu_log(s, "SET_INFLIGHT_FD: %s inflight region for %u queues of %u "
           "entries", resumed ? "resumed with an" : "new", in->num_queues,
           in->queue_size);
    return vu_queues_update(s) ? VU_DONE : VU_IGNORED;
}

/* ------------------------------------------------------------------------ */
/* Config space                                                              */

static bool vu_config_in_range(const VhostUserConfig *c)
{
    return c->offset <= VHOST_USER_MAX_CONFIG_SIZE &&
           c->size <= VHOST_USER_MAX_CONFIG_SIZE - c->offset;
}

static VuResult vu_get_config(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    const VhostUserConfig *c = &msg->payload.config;
    uint8_t space[VHOST_USER_MAX_CONFIG_SIZE] = { 0 };

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

static VuResult vu_set_config(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    const VhostUserConfig *c = &msg->payload.config;
    int r;

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

/* ------------------------------------------------------------------------ */
/* Dirty logging                                                             */

/*
 * SET_LOG_BASE: a log description and the log's fd.  Mapped and checked
 * against the memory table (hw/virtio/vhost-log.c), handed to every ring
 * (those that run switch in their home threads), and only then is the
 * old log dropped and the front-end told (a u64 0: the reply LOG_SHMFD
 * asks for).
 */
static VuResult vu_set_log_base(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    const VhostUserLog *l = &msg->payload.log;
    Error *err = NULL;
    VhostLog *log;

    if (!vu_has_protocol_feature(s, VHOST_USER_PROTOCOL_F_LOG_SHMFD)) {
        return vu_fail(s, "SET_LOG_BASE without the LOG_SHMFD protocol "
                       "feature");
    }
    log = vhost_log_map(msg->fds[0], l->mmap_size, l->mmap_offset, s->mem,
                        &err);
    if (!log) {
        return vu_error(s, err);
    }
    vu_set_log(s, log);
    vu_log(s, "SET_LOG_BASE: dirty log of %" PRIu64 " bytes", l->mmap_size);
    return vu_reply_u64(reply, 0);
}

/*
 * SET_LOG_FD: an eventfd the back-end may signal after it wrote the log.
 * Kept (until the next one or the disconnect) and never signalled:
 * front-ends read the bitmap when they synchronise, and QEMU does not
 * wait for it.
 */
static VuResult vu_set_log_fd(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    if (!vu_has_protocol_feature(s, VHOST_USER_PROTOCOL_F_LOG_SHMFD)) {
        return vu_fail(s, "SET_LOG_FD without the LOG_SHMFD protocol "
                       "feature");
    }
    if (s->log_fd >= 0) {
        close(s->log_fd);
    }
    s->log_fd = vu_msg_take_fd(msg, 0);
    return VU_DONE;
}

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                  */

/* A request's handler, and for one about a ring, what the ring must be. */
typedef struct VuHandlerInfo {
    VuHandler *fn;              /* a request about the connection ... */
    VuRingHandler *ring_fn;     /* ... or about the ring it names */
    bool stopped;               /* ring_fn: only while the ring is stopped */
} VuHandlerInfo;

/* One handler for every request vhost-user-msg.c knows. */
static const VuHandlerInfo vu_handlers[] = {
    [VHOST_USER_GET_FEATURES] = { .fn = vu_get_features },
    [VHOST_USER_SET_FEATURES] = { .fn = vu_set_features },
    [VHOST_USER_GET_PROTOCOL_FEATURES] = { .fn = vu_get_protocol_features },
    [VHOST_USER_SET_PROTOCOL_FEATURES] = { .fn = vu_set_protocol_features },
    [VHOST_USER_SET_OWNER] = { .fn = vu_set_owner },
    [VHOST_USER_RESET_OWNER] = { .fn = vu_reset_owner },
    [VHOST_USER_RESET_DEVICE] = { .fn = vu_reset_device },
    [VHOST_USER_SET_MEM_TABLE] = { .fn = vu_set_mem_table },
    [VHOST_USER_GET_MAX_MEM_SLOTS] = { .fn = vu_get_max_mem_slots },
    [VHOST_USER_ADD_MEM_REG] = { .fn = vu_add_mem_reg },
    [VHOST_USER_REM_MEM_REG] = { .fn = vu_rem_mem_reg },
    [VHOST_USER_SET_VRING_NUM] = { .ring_fn = vu_set_vring_num,
                                   .stopped = true },
    [VHOST_USER_SET_VRING_ADDR] = { .ring_fn = vu_set_vring_addr },
    [VHOST_USER_SET_VRING_BASE] = { .ring_fn = vu_set_vring_base,
                                    .stopped = true },
    [VHOST_USER_GET_VRING_BASE] = { .ring_fn = vu_get_vring_base },
    [VHOST_USER_SET_VRING_KICK] = { .ring_fn = vu_set_vring_kick },
    [VHOST_USER_SET_VRING_CALL] = { .ring_fn = vu_set_vring_call },
    [VHOST_USER_SET_VRING_ERR] = { .ring_fn = vu_set_vring_err },
    [VHOST_USER_GET_QUEUE_NUM] = { .fn = vu_get_queue_num },
    [VHOST_USER_SET_VRING_ENABLE] = { .ring_fn = vu_set_vring_enable },
    [VHOST_USER_GET_CONFIG] = { .fn = vu_get_config },
    [VHOST_USER_SET_CONFIG] = { .fn = vu_set_config },
    [VHOST_USER_SET_LOG_BASE] = { .fn = vu_set_log_base },
    [VHOST_USER_SET_LOG_FD] = { .fn = vu_set_log_fd },
    [VHOST_USER_SET_SLAVE_REQ_FD] = { .fn = vu_set_slave_req_fd },
    [VHOST_USER_GET_INFLIGHT_FD] = { .fn = vu_get_inflight_fd },
    [VHOST_USER_SET_INFLIGHT_FD] = { .fn = vu_set_inflight_fd },
};

/* The ring a request names, if it exists (and is stopped if it must be). */
static VuQueue *vu_request_ring(VuServer *s, const VuMsg *msg, bool stopped)
{
    uint32_t index = vu_msg_ring_index(msg);
    const char *name = vu_request_name(msg->hdr.request);

    if (index >= s->num_queues) {
        vu_fail(s, "%s for ring %" PRIu32 ", but there are only %u",
                name, index, s->num_queues);
        return NULL;
    }
    if (stopped && s->queues[index].started) {
        vu_fail(s, "%s for ring %" PRIu32 " while it is running", name,
                index);
        return NULL;
    }
    return &s->queues[index];
}

static VuResult vu_dispatch(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    uint32_t req = msg->hdr.request;
    const VuHandlerInfo *h;
    VuQueue *q;

    if (!vu_msg_validate(msg, s->why, sizeof(s->why))) {
        return VU_FAILED;
    }
    /* A request the decoder knows has a handler: our invariant. */
    g_assert(req < G_N_ELEMENTS(vu_handlers));
    h = &vu_handlers[req];
    if (h->fn) {
        return h->fn(s, msg, reply);
    }
    g_assert(h->ring_fn);
    q = vu_request_ring(s, msg, h->stopped);
    return q ? h->ring_fn(s, q, msg, reply) : VU_FAILED;
}

/* Fill in reply's header as the answer to msg. */
static VuAnswer vu_answer_reply(const VuMsg *msg, VuMsg *reply)
{
    reply->hdr.request = msg->hdr.request;
    reply->hdr.flags = VHOST_USER_VERSION | VHOST_USER_REPLY_MASK;
    return VU_ANSWER_REPLY;
}

static VuAnswer vu_answer_ack(const VuMsg *msg, VuMsg *reply,
                              uint64_t status)
{
    vu_reply_u64(reply, status);
    return vu_answer_reply(msg, reply);
}

/* What to send for a handled request, or whether to close. */
static VuAnswer vu_answer(VuServer *s, const VuMsg *msg, VuMsg *reply,
                          VuResult res)
{
    bool need_reply = (msg->hdr.flags & VHOST_USER_NEED_REPLY_MASK) &&
                      vu_has_protocol_feature(s,
                                              VHOST_USER_PROTOCOL_F_REPLY_ACK);
    bool has_reply = vu_request_has_reply(msg->hdr.request);

    switch (res) {
    case VU_REPLY:
        return vu_answer_reply(msg, reply);
    case VU_DONE:
        return need_reply ? vu_answer_ack(msg, reply, 0) : VU_ANSWER_NONE;
    case VU_IGNORED:
        vu_log(s, "%s", s->why);
        return need_reply ? vu_answer_ack(msg, reply, 1) : VU_ANSWER_NONE;
    case VU_FAILED:
        if (need_reply && !has_reply) {
            vu_log(s, "%s", s->why);
            return vu_answer_ack(msg, reply, 1);
        }
        return VU_ANSWER_CLOSE;
    }
    g_assert_not_reached();
}

VuAnswer vu_server_handle_msg(VuServer *s, VuMsg *msg, VuMsg *reply)
{
    VuResult res;

    assert_main_thread();
    memset(&reply->hdr, 0, sizeof(reply->hdr));
    reply->nfds = 0;
    reply->fds_dropped = false;
    res = vu_dispatch(s, msg, reply);
    vu_msg_close_fds(msg);
    return vu_answer(s, msg, reply, res);
}

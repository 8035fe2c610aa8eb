/*
 * vu-session: the session of a guest-less vhost-user front-end.
 *
 * Theory of operation
 * -------------------
 * vuf_new() checks the options, creates the guest memory (vu-guest-mem.c)
 * and carves every queue's rings out of it (vu-virtqueue.c).  Nothing
 * talks to the back-end until vuf_connect().
 *
 * A session (vuf_connect) is a UNIX socket and the usual QEMU sequence:
 *   GET_FEATURES -> [GET/SET_PROTOCOL_FEATURES -> GET_QUEUE_NUM ->
 *   GET_MAX_MEM_SLOTS] -> SET_OWNER -> [GET_CONFIG] ->
 *   [GET_INFLIGHT_FD -> SET_INFLIGHT_FD] -> SET_FEATURES ->
 *   SET_MEM_TABLE or ADD_MEM_REG -> per queue SET_VRING_NUM, _BASE, _ADDR,
 *   _CALL, _KICK, [_ENABLE].
 * The inflight region (vu-inflight.c) is asked for once and handed back
 * in every session on the same rings; vuf_resume() starts a session on
 * the rings as they are, SET_VRING_BASE being each used index.
 * With SLAVE_REQ negotiated, the front-end makes a socket pair right after
 * the protocol features and hands one end over with SET_SLAVE_REQ_FD (the
 * back-end channel); it is read only when a caller asks
 * (vuf_poll_backend_channel(), vuf_wait_config_change()), so the
 * back-end's messages wait in the socket until then.
 * With REPLY_ACK every message without a reply of its own carries
 * NEED_REPLY and its acknowledgement is checked; without it a final
 * GET_FEATURES round trip makes sure the back-end has processed everything
 * before the caller starts queueing requests.
 *
 * The messages themselves (transport, request/reply, the raw API) are
 * vu-msg.c's; the back-end channel is vu-backend-chan.c's; feature names
 * for the error messages come from vu-features.c.
 *
 * Everything here runs in the control thread; see vu-frontend.h.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <glib.h>

#include "vu-frontend-int.h"

#define RECONNECT_STEP_MS   20

/* ------------------------------------------------------------------------ */
/* Options and accessors                                                     */

const char *const vuf_completion_names[VUF_COMPLETION_NAMES] = {
    [VUF_COMPLETION_POLL] = "poll",
    [VUF_COMPLETION_INTERRUPT] = "interrupt",
};

const char *const vuf_device_names[VUF_DEVICE_NAMES] = {
    [VUF_DEVICE_BLK] = "blk",
    [VUF_DEVICE_SCSI] = "scsi",
};

void vuf_options_init(VufOptions *opts)
{
    *opts = (VufOptions) {
        .device = VUF_DEVICE_BLK,
        .mem_size = VUF_MEM_SIZE_DEFAULT,
        .num_queues = 1,
        .queue_size = VUF_QUEUE_SIZE_DEFAULT,
        .indirect_max = VUF_INDIRECT_MAX_DEFAULT,
        .features_wanted = VUF_FEATURES_DEFAULT,
        .features_required = VUF_FEATURES_REQUIRED_DEFAULT,
        .protocol_features_wanted = VUF_PROTOCOL_FEATURES_DEFAULT,
        .mem_method = VUF_MEM_SET_MEM_TABLE,
        .completion = VUF_COMPLETION_POLL,
        .reply_timeout_ms = 5000,
        .connect_timeout_ms = 0,
    };
}

void vuf_options_init_device(VufOptions *opts, VufDeviceType dev)
{
    vuf_options_init(opts);
    opts->device = dev;
    if (dev == VUF_DEVICE_SCSI) {
        opts->features_wanted = VUF_SCSI_FEATURES_DEFAULT;
        opts->num_queues = VIRTIO_SCSI_VQ_REQUEST0 + 1;
    }
}

uint64_t vuf_features_offered(const VuFrontend *fe)
{
    return fe->features_offered;
}

uint64_t vuf_features(const VuFrontend *fe)
{
    return fe->features;
}

bool vuf_has_feature(const VuFrontend *fe, unsigned bit)
{
    return bit < 64 && (fe->features & VUF_BIT(bit));
}

uint64_t vuf_protocol_features_offered(const VuFrontend *fe)
{
    return fe->protocol_features_offered;
}

uint64_t vuf_protocol_features(const VuFrontend *fe)
{
    return fe->protocol_features;
}

uint64_t vuf_queue_num_max(const VuFrontend *fe)
{
    return fe->queue_num_max;
}

uint64_t vuf_max_mem_slots(const VuFrontend *fe)
{
    return fe->max_mem_slots;
}

const VirtioBlkConfig *vuf_blk_config(const VuFrontend *fe)
{
    return fe->have_blk_config ? &fe->blk_config : NULL;
}

const VirtioScsiConfig *vuf_scsi_config(const VuFrontend *fe)
{
    return fe->have_scsi_config ? &fe->scsi_config : NULL;
}

unsigned vuf_num_queues(const VuFrontend *fe)
{
    return fe->num_queues;
}

VufQueue *vuf_queue(VuFrontend *fe, unsigned i)
{
    g_assert(i < fe->num_queues);
    return fe->queues[i];
}

const VufOptions *vuf_options(const VuFrontend *fe)
{
    return &fe->opts;
}

bool vuf_is_connected(const VuFrontend *fe)
{
    return fe->sock >= 0;
}

int vuf_socket_fd(const VuFrontend *fe)
{
    return fe->sock;
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */

static bool check_options(const VufOptions *o, Error **errp)
{
    if (!o->socket_path || !*o->socket_path) {
        error_setg(errp, "no vhost-user socket path given");
        return false;
    }
    if (strlen(o->socket_path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        error_setg(errp, "socket path '%s' is too long for a UNIX socket "
                   "(at most %zu bytes)", o->socket_path,
                   sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
        return false;
    }
    if (o->num_queues < 1 || o->num_queues > VUF_QUEUES_MAX) {
        error_setg(errp, "number of queues must be 1 to %d, got %u",
                   VUF_QUEUES_MAX, o->num_queues);
        return false;
    }
    if (!vuf_is_power_of_2(o->queue_size) ||
        o->queue_size > VUF_QUEUE_SIZE_MAX) {
        error_setg(errp, "queue size must be a power of 2 up to %d, got %u",
                   VUF_QUEUE_SIZE_MAX, o->queue_size);
        return false;
    }
    if (o->indirect_max < 1 || o->indirect_max > 1024) {
        error_setg(errp, "indirect table size must be 1 to 1024, got %u",
                   o->indirect_max);
        return false;
    }
    if (o->mem_size < (1u << 20) || o->mem_size % 4096) {
        error_setg(errp, "guest memory size must be a multiple of 4096 and "
                   "at least 1 MiB, got %" PRIu64, o->mem_size);
        return false;
    }
    return true;
}

VuFrontend *vuf_new(const VufOptions *opts, Error **errp)
{
    VuFrontend *fe;
    unsigned i;

    if (!check_options(opts, errp)) {
        return NULL;
    }
    fe = g_new0(VuFrontend, 1);
    fe->control_thread = pthread_self();
    fe->opts = *opts;
    fe->sock = -1;
    fe->backend_fd = -1;
    fe->inflight_fd = -1;
    fe->log_fd = -1;
    fe->mem_size = opts->mem_size;
    if (!vuf_guest_mem_create(fe, errp)) {
        vuf_free(fe);
        return NULL;
    }
    fe->num_queues = opts->num_queues;
    fe->queues = g_new0(VufQueue *, fe->num_queues);
    for (i = 0; i < fe->num_queues; i++) {
        fe->queues[i] = vufq_create(fe, i, errp);
        if (!fe->queues[i]) {
            vuf_free(fe);
            return NULL;
        }
    }
    return fe;
}

void vuf_free(VuFrontend *fe)
{
    unsigned i;

    if (!fe) {
        return;
    }
    vuf_assert_control_thread(fe);
    vuf_disconnect(fe);
    for (i = 0; fe->queues && i < fe->num_queues; i++) {
        if (fe->queues[i]) {
            vufq_destroy(fe->queues[i]);
        }
    }
    g_free(fe->queues);
    vuf_inflight_free(fe);
    vuf_log_free(fe);
    vuf_guest_mem_destroy(fe);
    g_free(fe);
}

/* ------------------------------------------------------------------------ */
/* Device config                                                             */

bool vuf_get_config(VuFrontend *fe, uint32_t offset, void *buf,
                    uint32_t size, Error **errp)
{
    VhostUserConfig msg = { .offset = offset, .size = size, .flags = 0 };
    size_t hdr_bytes = offsetof(VhostUserConfig, region);
    size_t got;

    vuf_assert_control_thread(fe);
    if (!vuf_has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_CONFIG)) {
        error_setg(errp, "the back-end does not offer the CONFIG protocol "
                   "feature: its device configuration cannot be read");
        return false;
    }
    if (size == 0 || size > sizeof(msg.region)) {
        error_setg(errp, "config reads are 1 to %zu bytes, got %u",
                   sizeof(msg.region), size);
        return false;
    }
    if (!vuf_send_raw(fe, VHOST_USER_GET_CONFIG, VHOST_USER_VERSION, &msg,
                      hdr_bytes + size, NULL, 0, errp) ||
        !vuf_read_reply(fe, VHOST_USER_GET_CONFIG, &msg, sizeof(msg), &got,
                        errp)) {
        return false;
    }
    if (got == hdr_bytes || got == 0) {
        error_setg(errp, "the back-end refused GET_CONFIG (empty reply)");
        return false;
    }
    if (got != hdr_bytes + size || msg.size != size) {
        error_setg(errp, "GET_CONFIG reply has %zu bytes (size field %u), "
                   "expected %zu", got, msg.size, hdr_bytes + size);
        return false;
    }
    memcpy(buf, msg.region, size);
    return true;
}

/* ------------------------------------------------------------------------ */
/* Session                                                                   */

bool vuf_connect_socket(VuFrontend *fe, Error **errp)
{
    return vuf_connect_socket_until(fe, vuf_now_ms() +
                                    fe->opts.connect_timeout_ms, errp);
}

bool vuf_connect_socket_until(VuFrontend *fe, int64_t deadline,
                              Error **errp)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    int fd;

    vuf_assert_control_thread(fe);
    g_assert(fe->sock < 0);
    g_strlcpy(addr.sun_path, fe->opts.socket_path, sizeof(addr.sun_path));
    for (;;) {
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            error_setg_errno(errp, errno, "cannot create a UNIX socket");
            return false;
        }
        if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0) {
            break;
        }
        close(fd);
        if ((errno == ENOENT || errno == ECONNREFUSED || errno == EAGAIN) &&
            vuf_now_ms() < deadline) {
            g_usleep(RECONNECT_STEP_MS * 1000);
            continue;
        }
        error_setg_errno(errp, errno, "cannot connect to vhost-user socket "
                         "'%s'", fe->opts.socket_path);
        return false;
    }
    fe->sock = fd;
    fe->features_offered = fe->features = 0;
    fe->protocol_features_offered = fe->protocol_features = 0;
    fe->queue_num_max = fe->max_mem_slots = 0;
    fe->have_blk_config = false;
    fe->have_scsi_config = false;
    fe->config_changes = fe->config_changes_taken = 0;
    return true;
}

static bool negotiate_protocol_features(VuFrontend *fe, Error **errp)
{
    uint64_t pf;

    if (!vuf_request_u64(fe, VHOST_USER_GET_PROTOCOL_FEATURES,
                         &fe->protocol_features_offered, errp)) {
        return false;
    }
    pf = fe->protocol_features_offered & fe->opts.protocol_features_wanted;
    /* Sent without NEED_REPLY: REPLY_ACK is not in force before this. */
    if (!vuf_send_raw(fe, VHOST_USER_SET_PROTOCOL_FEATURES, VHOST_USER_VERSION,
                      &pf, sizeof(pf), NULL, 0, errp)) {
        return false;
    }
    fe->protocol_features = pf;
    if (vuf_has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_MQ) &&
        !vuf_request_u64(fe, VHOST_USER_GET_QUEUE_NUM, &fe->queue_num_max,
                         errp)) {
        return false;
    }
    if (vuf_has_protocol_feature(fe,
                                 VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS) &&
        !vuf_request_u64(fe, VHOST_USER_GET_MAX_MEM_SLOTS, &fe->max_mem_slots,
                         errp)) {
        return false;
    }
    if (vuf_has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_SLAVE_REQ) &&
        !vuf_backend_channel_open(fe, errp)) {
        return false;
    }
    return true;
}

/*
 * The virtio-scsi config: the driver may write sense_size and cdb_size,
 * but QEMU's vhost-user-scsi keeps the device's (it refuses to change
 * them), and so do we.  They must be large enough for a 16-byte CDB and
 * fixed-format sense, and there must be a request queue.
 */
static bool check_scsi_config(const VirtioScsiConfig *c, Error **errp)
{
    if (c->num_queues < 1) {
        error_setg(errp, "the virtio-scsi configuration has num_queues 0: "
                   "no request queue");
        return false;
    }
    if (c->cdb_size < 16 || c->cdb_size > VUFSCSI_CDB_MAX) {
        error_setg(errp, "the virtio-scsi configuration has cdb_size %u; "
                   "this front-end needs 16 to %u", c->cdb_size,
                   VUFSCSI_CDB_MAX);
        return false;
    }
    if (c->sense_size < 18 || c->sense_size > VUFSCSI_SENSE_MAX) {
        error_setg(errp, "the virtio-scsi configuration has sense_size %u; "
                   "this front-end needs 18 to %u", c->sense_size,
                   VUFSCSI_SENSE_MAX);
        return false;
    }
    return true;
}

/*
 * Read the device's config (virtio-blk or virtio-scsi, as opts.device
 * says) when the back-end has the CONFIG protocol feature.  The config
 * space is little-endian, as is every host vu-frontend builds on
 * (vu-frontend-int.h), so it is kept as read.
 */
static bool read_config(VuFrontend *fe, Error **errp)
{
    bool scsi = fe->opts.device == VUF_DEVICE_SCSI;
    void *buf = scsi ? (void *)&fe->scsi_config : (void *)&fe->blk_config;
    size_t len = scsi ? sizeof(fe->scsi_config) : sizeof(fe->blk_config);

    if (fe->opts.device == VUF_DEVICE_GENERIC ||
        !vuf_has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_CONFIG)) {
        return true;
    }
    if (!vuf_get_config(fe, 0, buf, len, errp)) {
        error_prepend(errp, "reading the virtio-%s configuration: ",
                      vuf_device_names[fe->opts.device]);
        return false;
    }
    if (scsi && !check_scsi_config(&fe->scsi_config, errp)) {
        return false;
    }
    fe->have_scsi_config = scsi;
    fe->have_blk_config = !scsi;
    return true;
}

static bool check_features(VuFrontend *fe, Error **errp)
{
    uint64_t missing = fe->opts.features_required & ~fe->features_offered;

    if (missing) {
        g_autofree char *want = vuf_feature_list(fe->opts.device, missing,
                                                 false);
        g_autofree char *offered =
            vuf_feature_list(fe->opts.device, fe->features_offered, false);

        error_setg(errp, "the back-end lacks required feature(s) %s "
                   "(it offers: %s)", want, offered);
        return false;
    }
    if (fe->opts.mem_method == VUF_MEM_ADD_MEM_REG &&
        !vuf_has_protocol_feature(fe,
                                  VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS)) {
        error_setg(errp, "ADD_MEM_REG was asked for, but the back-end does "
                   "not offer the CONFIGURE_MEM_SLOTS protocol feature");
        return false;
    }
    return true;
}

static bool check_queue_count(VuFrontend *fe, Error **errp)
{
    unsigned n = fe->num_queues;

    if (fe->queue_num_max && n > fe->queue_num_max) {
        error_setg(errp, "%u queues asked for, but the back-end supports "
                   "%" PRIu64 " (GET_QUEUE_NUM)", n, fe->queue_num_max);
        return false;
    }
    if (fe->opts.device == VUF_DEVICE_SCSI) {
        if (n < VIRTIO_SCSI_VQ_REQUEST0 + 1) {
            error_setg(errp, "a virtio-scsi device needs at least %u queues "
                       "(control, event, a request queue); %u asked for",
                       VIRTIO_SCSI_VQ_REQUEST0 + 1, n);
            return false;
        }
        if (fe->have_scsi_config &&
            n > fe->scsi_config.num_queues + VIRTIO_SCSI_VQ_REQUEST0) {
            error_setg(errp, "%u request queues asked for, but the device "
                       "has %u (num_queues in its config)",
                       n - VIRTIO_SCSI_VQ_REQUEST0,
                       fe->scsi_config.num_queues);
            return false;
        }
        return true;
    }
    if (fe->opts.device != VUF_DEVICE_BLK || n == 1) {
        return true;
    }
    if (!(fe->features & VUF_BIT(VIRTIO_BLK_F_MQ))) {
        error_setg(errp, "%u queues asked for, but the back-end does not "
                   "offer VIRTIO_BLK_F_MQ: it has 1 queue", n);
        return false;
    }
    if (fe->have_blk_config && n > fe->blk_config.num_queues) {
        error_setg(errp, "%u queues asked for, but the device has %u "
                   "(num_queues in its config)", n,
                   fe->blk_config.num_queues);
        return false;
    }
    return true;
}

static VhostUserMemRegion guest_memory_region(VuFrontend *fe)
{
    return (VhostUserMemRegion) {
        .guest_phys_addr = 0,
        .memory_size = fe->mem_size,
        .userspace_addr = (uintptr_t)fe->mem,
        .mmap_offset = 0,
    };
}

static bool share_memory(VuFrontend *fe, Error **errp)
{
    if (fe->opts.mem_method == VUF_MEM_ADD_MEM_REG) {
        VhostUserMemRegMsg reg = {
            .padding = 0,
            .region = guest_memory_region(fe),
        };

        return vuf_request_set(fe, VHOST_USER_ADD_MEM_REG, &reg, sizeof(reg),
                               &fe->memfd, 1, errp);
    } else {
        VhostUserMemory table = { .nregions = 1 };

        /* Sized for the regions sent, as QEMU does. */
        table.regions[0] = guest_memory_region(fe);
        return vuf_request_set(fe, VHOST_USER_SET_MEM_TABLE, &table,
                               offsetof(VhostUserMemory, regions[1]),
                               &fe->memfd, 1, errp);
    }
}

bool vuf_reread_config(VuFrontend *fe, Error **errp)
{
    vuf_assert_control_thread(fe);
    return read_config(fe, errp);
}

bool vuf_negotiate(VuFrontend *fe, Error **errp)
{
    uint64_t features;

    vuf_assert_control_thread(fe);
    if (!vuf_request_u64(fe, VHOST_USER_GET_FEATURES, &fe->features_offered,
                         errp)) {
        return false;
    }
    if ((fe->features_offered & VUF_BIT(VHOST_USER_F_PROTOCOL_FEATURES)) &&
        !negotiate_protocol_features(fe, errp)) {
        return false;
    }
    if (!check_features(fe, errp) ||
        !vuf_request_set(fe, VHOST_USER_SET_OWNER, NULL, 0, NULL, 0, errp) ||
        !read_config(fe, errp)) {
        return false;
    }
    features = fe->features_offered &
               (fe->opts.features_wanted | fe->opts.features_required |
                VUF_BIT(VHOST_USER_F_PROTOCOL_FEATURES));
    fe->features = features;
    if (!check_queue_count(fe, errp) ||
        !vuf_inflight_negotiate(fe, errp) ||
        !vuf_request_u64_set(fe, VHOST_USER_SET_FEATURES, features, NULL, 0,
                             errp)) {
        return false;
    }
    return share_memory(fe, errp);
}

bool vuf_set_vring_addr(VuFrontend *fe, VufQueue *q, bool log, Error **errp)
{
    VhostUserVringAddr addr = {
        .index = q->index,
        .flags = log ? VHOST_VRING_F_LOG : 0,
        .desc_user_addr = (uintptr_t)q->desc,
        .used_user_addr = (uintptr_t)q->used,
        .avail_user_addr = (uintptr_t)q->avail,
        .log_guest_addr = log ? q->used_gpa : 0,
    };

    return vuf_request_set(fe, VHOST_USER_SET_VRING_ADDR, &addr, sizeof(addr),
                           NULL, 0, errp);
}

/*
 * Hand queue q's rings to the back-end: reset (base 0), or as they are
 * with base = the used index (resume).
 */
static bool setup_queue(VuFrontend *fe, VufQueue *q, bool resume,
                        Error **errp)
{
    uint64_t index = q->index;
    bool started = resume ? vufq_session_resume(q, errp)
                   : vufq_session_start(q,
                         vuf_has_feature(fe, VIRTIO_RING_F_EVENT_IDX),
                         vuf_has_feature(fe, VIRTIO_RING_F_INDIRECT_DESC),
                         errp);

    if (!started) {
        return false;
    }
    if (!vuf_request_vring_state(fe, VHOST_USER_SET_VRING_NUM, q->index, q->num,
                                 errp) ||
        !vuf_request_vring_state(fe, VHOST_USER_SET_VRING_BASE, q->index,
                                 resume ? vufq_used_idx(q) : 0, errp) ||
        !vuf_set_vring_addr(fe, q, false, errp) ||
        !vuf_request_u64_set(fe, VHOST_USER_SET_VRING_CALL, index,
                             &q->call_fd, 1, errp) ||
        !vuf_request_u64_set(fe, VHOST_USER_SET_VRING_ERR, index,
                             &q->err_fd, 1, errp) ||
        !vuf_request_u64_set(fe, VHOST_USER_SET_VRING_KICK, index,
                             &q->kick_fd, 1, errp)) {
        error_prepend(errp, "setting up queue %u: ", q->index);
        vufq_session_end(q);
        return false;
    }
    if (vuf_has_feature(fe, VHOST_USER_F_PROTOCOL_FEATURES) &&
        !vuf_enable_queue(fe, q->index, true, errp)) {
        vufq_session_end(q);
        return false;
    }
    return true;
}

bool vuf_setup_queues(VuFrontend *fe, Error **errp)
{
    return vuf_setup_queues_as(fe, false, errp);
}

bool vuf_setup_queues_as(VuFrontend *fe, bool resume, Error **errp)
{
    uint64_t features;
    unsigned i;

    vuf_assert_control_thread(fe);
    for (i = 0; i < fe->num_queues; i++) {
        if (!setup_queue(fe, fe->queues[i], resume, errp)) {
            return false;
        }
    }
    /* Without acknowledgements, a round trip proves that the back-end has
     * processed all of the above before any request is queued. */
    if (!vuf_has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_REPLY_ACK) &&
        !vuf_request_u64(fe, VHOST_USER_GET_FEATURES, &features, errp)) {
        return false;
    }
    return true;
}

bool vuf_connect(VuFrontend *fe, Error **errp)
{
    vuf_assert_control_thread(fe);

    if (!vuf_connect_socket(fe, errp)) {
        return false;
    }
    if (!vuf_negotiate(fe, errp) || !vuf_setup_queues(fe, errp)) {
        vuf_disconnect(fe);
        return false;
    }
    return true;
}

bool vuf_enable_queue(VuFrontend *fe, unsigned i, bool enable, Error **errp)
{
    vuf_assert_control_thread(fe);

    if (i >= fe->num_queues) {
        error_setg(errp, "no queue %u (there are %u)", i, fe->num_queues);
        return false;
    }
    if (!vuf_request_vring_state(fe, VHOST_USER_SET_VRING_ENABLE, i, enable,
                                 errp)) {
        error_prepend(errp, "%s queue %u: ", enable ? "enabling" : "disabling",
                      i);
        return false;
    }
    return true;
}

bool vuf_stop_queue(VuFrontend *fe, unsigned i, uint32_t *last_avail,
                    Error **errp)
{
    VhostUserVringState s = { i, 0 };

    vuf_assert_control_thread(fe);
    if (i >= fe->num_queues) {
        error_setg(errp, "no queue %u (there are %u)", i, fe->num_queues);
        return false;
    }
    if (!vuf_send_raw(fe, VHOST_USER_GET_VRING_BASE, VHOST_USER_VERSION, &s,
                      sizeof(s), NULL, 0, errp) ||
        !vuf_read_reply(fe, VHOST_USER_GET_VRING_BASE, &s, sizeof(s), NULL,
                        errp)) {
        error_prepend(errp, "stopping queue %u: ", i);
        return false;
    }
    if (s.index != i) {
        error_setg(errp, "GET_VRING_BASE for queue %u answered for queue %u",
                   i, s.index);
        return false;
    }
    fe->queues[i]->ready = false;
    if (last_avail) {
        *last_avail = s.num;
    }
    return true;
}

void vuf_disconnect(VuFrontend *fe)
{
    unsigned i;

    vuf_assert_control_thread(fe);
    vuf_close_fd(&fe->sock);
    vuf_backend_channel_close(fe);
    vuf_log_session_end(fe);
    for (i = 0; fe->queues && i < fe->num_queues; i++) {
        if (fe->queues[i]) {
            vufq_session_end(fe->queues[i]);
        }
    }
}

bool vuf_reconnect(VuFrontend *fe, Error **errp)
{
    unsigned i;

    vuf_assert_control_thread(fe);
    /* Stop the queues politely; give up at the first failure (the
     * back-end is gone or confused, and each try could cost a timeout). */
    for (i = 0; fe->sock >= 0 && i < fe->num_queues; i++) {
        if (fe->queues[i]->ready && !vuf_stop_queue(fe, i, NULL, NULL)) {
            break;
        }
    }
    vuf_disconnect(fe);
    return vuf_connect(fe, errp);
}

/*
 * vu-frontend: the control side of a guest-less vhost-user front-end.
 *
 * Theory of operation
 * -------------------
 * vuf_new() creates the "guest memory": a memfd of opts.mem_size bytes
 * mapped shared in this process.  It is one vhost-user memory region with
 * guest physical address 0 and user address = our mapping, so a guest
 * address is an offset into the mapping and a ring's "user address" (what
 * SET_VRING_ADDR carries) is simply its host pointer.  The queues' rings
 * are carved out of the memory right away (vu-virtqueue.c); the rest is
 * managed by a small first-fit allocator (a sorted array of free extents,
 * coalesced on free, and a hash of allocated blocks) behind a mutex.
 *
 * A session (vuf_connect) is a UNIX socket and the usual QEMU sequence:
 *   GET_FEATURES -> [GET/SET_PROTOCOL_FEATURES -> GET_QUEUE_NUM ->
 *   GET_MAX_MEM_SLOTS] -> SET_OWNER -> [GET_CONFIG] -> SET_FEATURES ->
 *   SET_MEM_TABLE or ADD_MEM_REG -> per queue SET_VRING_NUM, _BASE, _ADDR,
 *   _CALL, _KICK, [_ENABLE].
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
 * Messages are sent with sendmsg() (fds in SCM_RIGHTS, MSG_NOSIGNAL so a
 * dead back-end gives EPIPE rather than SIGPIPE) and replies read with a
 * poll() timeout, so a silent or vanished back-end turns into an Error
 * instead of a hang.  The raw API sends anything at all, for tests of a
 * back-end's robustness.
 *
 * Everything here runs in the control thread; see vu-frontend.h.
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>

#include "vu-frontend-int.h"

#define RECONNECT_STEP_MS   20

/* ------------------------------------------------------------------------ */
/* Names                                                                     */

typedef struct BitName {
    unsigned bit;
    const char *name;
} BitName;

static const BitName feature_names[] = {
    { VIRTIO_BLK_F_SIZE_MAX, "BLK_SIZE_MAX" },
    { VIRTIO_BLK_F_SEG_MAX, "BLK_SEG_MAX" },
    { VIRTIO_BLK_F_GEOMETRY, "BLK_GEOMETRY" },
    { VIRTIO_BLK_F_RO, "BLK_RO" },
    { VIRTIO_BLK_F_BLK_SIZE, "BLK_BLK_SIZE" },
    { VIRTIO_BLK_F_FLUSH, "BLK_FLUSH" },
    { VIRTIO_BLK_F_TOPOLOGY, "BLK_TOPOLOGY" },
    { VIRTIO_BLK_F_CONFIG_WCE, "BLK_CONFIG_WCE" },
    { VIRTIO_BLK_F_MQ, "BLK_MQ" },
    { VIRTIO_BLK_F_DISCARD, "BLK_DISCARD" },
    { VIRTIO_BLK_F_WRITE_ZEROES, "BLK_WRITE_ZEROES" },
    { 24, "NOTIFY_ON_EMPTY" },
    { 26, "LOG_ALL" },
    { 27, "ANY_LAYOUT" },
    { VIRTIO_RING_F_INDIRECT_DESC, "RING_INDIRECT_DESC" },
    { VIRTIO_RING_F_EVENT_IDX, "RING_EVENT_IDX" },
    { VHOST_USER_F_PROTOCOL_FEATURES, "PROTOCOL_FEATURES" },
    { VIRTIO_F_VERSION_1, "VERSION_1" },
    { 33, "ACCESS_PLATFORM" },
    { 34, "RING_PACKED" },
    { 35, "IN_ORDER" },
    { 36, "ORDER_PLATFORM" },
    { 37, "SR_IOV" },
    { 38, "NOTIFICATION_DATA" },
    { 40, "RING_RESET" },
};

/* virtio-scsi's device bits (5.6.3). */
static const BitName scsi_feature_names[] = {
    { VIRTIO_SCSI_F_INOUT, "SCSI_INOUT" },
    { VIRTIO_SCSI_F_HOTPLUG, "SCSI_HOTPLUG" },
    { VIRTIO_SCSI_F_CHANGE, "SCSI_CHANGE" },
    { VIRTIO_SCSI_F_T10_PI, "SCSI_T10_PI" },
};

/* Bits below this are the device type's own; the rest the transport's. */
#define DEVICE_FEATURE_BITS 24

static const BitName protocol_feature_names[] = {
    { VHOST_USER_PROTOCOL_F_MQ, "MQ" },
    { VHOST_USER_PROTOCOL_F_LOG_SHMFD, "LOG_SHMFD" },
    { 2, "RARP" },
    { VHOST_USER_PROTOCOL_F_REPLY_ACK, "REPLY_ACK" },
    { 4, "NET_MTU" },
    { VHOST_USER_PROTOCOL_F_SLAVE_REQ, "BACKEND_REQ" },
    { 6, "CROSS_ENDIAN" },
    { 7, "CRYPTO_SESSION" },
    { 8, "PAGEFAULT" },
    { VHOST_USER_PROTOCOL_F_CONFIG, "CONFIG" },
    { 10, "BACKEND_SEND_FD" },
    { 11, "HOST_NOTIFIER" },
    { VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD, "INFLIGHT_SHMFD" },
    { VHOST_USER_PROTOCOL_F_RESET_DEVICE, "RESET_DEVICE" },
    { 14, "INBAND_NOTIFICATIONS" },
    { VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS, "CONFIGURE_MEM_SLOTS" },
    { 16, "STATUS" },
    { 17, "XEN_MMAP" },
    { 18, "SHARED_OBJECT" },
    { 19, "DEVICE_STATE" },
};

static const char *bit_name(const BitName *table, size_t n, unsigned bit)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (table[i].bit == bit) {
            return table[i].name;
        }
    }
    return NULL;
}

const char *vuf_feature_name(unsigned bit)
{
    return bit_name(feature_names, G_N_ELEMENTS(feature_names), bit);
}

const char *vuf_protocol_feature_name(unsigned bit)
{
    return bit_name(protocol_feature_names,
                    G_N_ELEMENTS(protocol_feature_names), bit);
}

int vuf_feature_by_name(const char *name)
{
    size_t i;

    for (i = 0; i < G_N_ELEMENTS(feature_names); i++) {
        if (!g_ascii_strcasecmp(feature_names[i].name, name)) {
            return feature_names[i].bit;
        }
    }
    return -1;
}

const char *vuf_device_feature_name(VufDeviceType dev, unsigned bit)
{
    if (dev == VUF_DEVICE_SCSI && bit < DEVICE_FEATURE_BITS) {
        return bit_name(scsi_feature_names, G_N_ELEMENTS(scsi_feature_names),
                        bit);
    }
    return vuf_feature_name(bit);
}

int vuf_device_feature_by_name(VufDeviceType dev, const char *name)
{
    size_t i;
    int bit;

    if (dev != VUF_DEVICE_SCSI) {
        return vuf_feature_by_name(name);
    }
    for (i = 0; i < G_N_ELEMENTS(scsi_feature_names); i++) {
        if (!g_ascii_strcasecmp(scsi_feature_names[i].name, name)) {
            return scsi_feature_names[i].bit;
        }
    }
    bit = vuf_feature_by_name(name);
    return bit >= DEVICE_FEATURE_BITS ? bit : -1;
}

/* "VERSION_1, RING_EVENT_IDX, bit 50" for the bits of mask.  Caller frees. */
static char *feature_list(VufDeviceType dev, uint64_t mask, bool protocol)
{
    GString *s = g_string_new(NULL);
    unsigned bit;

    for (bit = 0; bit < 64; bit++) {
        const char *name;

        if (!(mask & VUF_BIT(bit))) {
            continue;
        }
        name = protocol ? vuf_protocol_feature_name(bit)
                        : vuf_device_feature_name(dev, bit);
        if (s->len) {
            g_string_append(s, ", ");
        }
        if (name) {
            g_string_append(s, name);
        } else {
            g_string_append_printf(s, "bit %u", bit);
        }
    }
    if (!s->len) {
        g_string_append(s, "none");
    }
    return g_string_free(s, FALSE);
}

static const char *request_name(uint32_t request)
{
    static const char *const names[] = {
        [VHOST_USER_GET_FEATURES] = "GET_FEATURES",
        [VHOST_USER_SET_FEATURES] = "SET_FEATURES",
        [VHOST_USER_SET_OWNER] = "SET_OWNER",
        [VHOST_USER_RESET_OWNER] = "RESET_OWNER",
        [VHOST_USER_SET_MEM_TABLE] = "SET_MEM_TABLE",
        [VHOST_USER_SET_LOG_BASE] = "SET_LOG_BASE",
        [VHOST_USER_SET_LOG_FD] = "SET_LOG_FD",
        [VHOST_USER_SET_VRING_NUM] = "SET_VRING_NUM",
        [VHOST_USER_SET_VRING_ADDR] = "SET_VRING_ADDR",
        [VHOST_USER_SET_VRING_BASE] = "SET_VRING_BASE",
        [VHOST_USER_GET_VRING_BASE] = "GET_VRING_BASE",
        [VHOST_USER_SET_VRING_KICK] = "SET_VRING_KICK",
        [VHOST_USER_SET_VRING_CALL] = "SET_VRING_CALL",
        [VHOST_USER_SET_VRING_ERR] = "SET_VRING_ERR",
        [VHOST_USER_GET_PROTOCOL_FEATURES] = "GET_PROTOCOL_FEATURES",
        [VHOST_USER_SET_PROTOCOL_FEATURES] = "SET_PROTOCOL_FEATURES",
        [VHOST_USER_GET_QUEUE_NUM] = "GET_QUEUE_NUM",
        [VHOST_USER_SET_VRING_ENABLE] = "SET_VRING_ENABLE",
        [VHOST_USER_GET_CONFIG] = "GET_CONFIG",
        [VHOST_USER_SET_CONFIG] = "SET_CONFIG",
        [VHOST_USER_RESET_DEVICE] = "RESET_DEVICE",
        [VHOST_USER_GET_MAX_MEM_SLOTS] = "GET_MAX_MEM_SLOTS",
        [VHOST_USER_ADD_MEM_REG] = "ADD_MEM_REG",
        [VHOST_USER_REM_MEM_REG] = "REM_MEM_REG",
        [VHOST_USER_SET_SLAVE_REQ_FD] = "SET_SLAVE_REQ_FD",
    };

    if (request < G_N_ELEMENTS(names) && names[request]) {
        return names[request];
    }
    return "unknown request";
}

/* ------------------------------------------------------------------------ */
/* Options and accessors                                                     */

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

static bool has_protocol_feature(const VuFrontend *fe, unsigned bit)
{
    return fe->protocol_features & VUF_BIT(bit);
}

/* ------------------------------------------------------------------------ */
/* Guest memory and its allocator                                            */

void *vuf_mem_base(const VuFrontend *fe)
{
    return fe->mem;
}

uint64_t vuf_mem_size(const VuFrontend *fe)
{
    return fe->mem_size;
}

uint64_t vuf_gpa(const VuFrontend *fe, const void *hva)
{
    const uint8_t *p = hva;

    g_assert(p >= fe->mem && p <= fe->mem + fe->mem_size);
    return p - fe->mem;
}

void *vuf_hva(const VuFrontend *fe, uint64_t gpa, uint64_t len)
{
    if (gpa > fe->mem_size || len > fe->mem_size - gpa) {
        return NULL;
    }
    return fe->mem + gpa;
}

static bool is_power_of_2(uint64_t x)
{
    return x && !(x & (x - 1));
}

void *vuf_mem_alloc(VuFrontend *fe, size_t size, size_t align, uint64_t *gpa)
{
    void *ret = NULL;
    guint i;

    if (align == 0) {
        align = 64;
    }
    g_assert(is_power_of_2(align));
    if (size == 0) {
        size = 1;
    }
    g_mutex_lock(&fe->mem_lock);
    for (i = 0; i < fe->free_extents->len; i++) {
        VufExtent *e = &g_array_index(fe->free_extents, VufExtent, i);
        uint64_t start = (e->start + align - 1) & ~((uint64_t)align - 1);
        uint64_t end = e->start + e->len;
        VufExtent after;

        if (start > end || end - start < size) {
            continue;
        }
        after = (VufExtent) { start + size, end - (start + size) };
        if (start > e->start) {
            /* Keep the part before the aligned start free. */
            e->len = start - e->start;
            if (after.len) {
                g_array_insert_val(fe->free_extents, i + 1, after);
            }
        } else if (after.len) {
            *e = after;
        } else {
            g_array_remove_index(fe->free_extents, i);
        }
        g_hash_table_insert(fe->allocs, GSIZE_TO_POINTER((gsize)start),
                            GSIZE_TO_POINTER((gsize)size));
        fe->mem_free -= size;
        if (gpa) {
            *gpa = start;
        }
        ret = fe->mem + start;
        break;
    }
    g_mutex_unlock(&fe->mem_lock);
    return ret;
}

void vuf_mem_free(VuFrontend *fe, void *ptr)
{
    uint64_t start, len;
    gpointer value;
    guint i;

    if (!ptr) {
        return;
    }
    start = vuf_gpa(fe, ptr);
    g_mutex_lock(&fe->mem_lock);
    if (!g_hash_table_lookup_extended(fe->allocs,
                                      GSIZE_TO_POINTER((gsize)start),
                                      NULL, &value)) {
        g_error("vuf_mem_free: %p was not allocated by vuf_mem_alloc", ptr);
    }
    g_hash_table_remove(fe->allocs, GSIZE_TO_POINTER((gsize)start));
    len = GPOINTER_TO_SIZE(value);
    fe->mem_free += len;

    /* Insert in order, then merge with the neighbours. */
    for (i = 0; i < fe->free_extents->len; i++) {
        if (g_array_index(fe->free_extents, VufExtent, i).start > start) {
            break;
        }
    }
    g_array_insert_val(fe->free_extents, i, ((VufExtent) { start, len }));
    if (i + 1 < fe->free_extents->len) {
        VufExtent *e = &g_array_index(fe->free_extents, VufExtent, i);
        VufExtent *n = e + 1;

        if (e->start + e->len == n->start) {
            e->len += n->len;
            g_array_remove_index(fe->free_extents, i + 1);
        }
    }
    if (i > 0) {
        VufExtent *p = &g_array_index(fe->free_extents, VufExtent, i - 1);
        VufExtent *e = p + 1;

        if (p->start + p->len == e->start) {
            p->len += e->len;
            g_array_remove_index(fe->free_extents, i);
        }
    }
    g_mutex_unlock(&fe->mem_lock);
}

uint64_t vuf_mem_available(VuFrontend *fe)
{
    uint64_t n;

    g_mutex_lock(&fe->mem_lock);
    n = fe->mem_free;
    g_mutex_unlock(&fe->mem_lock);
    return n;
}

uint8_t *vuf_req_mem_alloc(VuFrontend *fe, size_t small_len,
                           size_t small_align, uint64_t *small_gpa,
                           size_t data_cap, uint8_t **data,
                           uint64_t *data_gpa, const char *what,
                           Error **errp)
{
    uint8_t *small = vuf_mem_alloc(fe, small_len, small_align, small_gpa);

    *data = NULL;
    if (small && data_cap) {
        *data = vuf_mem_alloc(fe, data_cap, 4096, data_gpa);
    }
    if (!small || (data_cap && !*data)) {
        error_setg(errp, "guest memory exhausted: cannot allocate %s with "
                   "%zu data bytes (%" G_GUINT64_FORMAT " bytes left of %"
                   G_GUINT64_FORMAT "); raise the memory size", what,
                   data_cap, vuf_mem_available(fe), vuf_mem_size(fe));
        vuf_mem_free(fe, small);
        vuf_mem_free(fe, *data);
        *data = NULL;
        return NULL;
    }
    return small;
}

static bool create_guest_memory(VuFrontend *fe, Error **errp)
{
    VufExtent all = { 0, fe->mem_size };

    fe->memfd = memfd_create("spindle-vu-frontend", MFD_CLOEXEC);
    if (fe->memfd < 0) {
        error_setg_errno(errp, errno, "cannot create the guest memory memfd");
        return false;
    }
    if (ftruncate(fe->memfd, fe->mem_size) < 0) {
        error_setg_errno(errp, errno, "cannot size the guest memory to %"
                         PRIu64 " bytes", fe->mem_size);
        return false;
    }
    fe->mem = mmap(NULL, fe->mem_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                   fe->memfd, 0);
    if (fe->mem == MAP_FAILED) {
        fe->mem = NULL;
        error_setg_errno(errp, errno, "cannot map %" PRIu64
                         " bytes of guest memory", fe->mem_size);
        return false;
    }
    g_array_append_val(fe->free_extents, all);
    fe->mem_free = fe->mem_size;
    return true;
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
    if (!is_power_of_2(o->queue_size) || o->queue_size > VUF_QUEUE_SIZE_MAX) {
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
    fe->memfd = -1;
    fe->sock = -1;
    fe->backend_fd = -1;
    fe->mem_size = opts->mem_size;
    g_mutex_init(&fe->mem_lock);
    fe->free_extents = g_array_new(FALSE, FALSE, sizeof(VufExtent));
    fe->allocs = g_hash_table_new(g_direct_hash, g_direct_equal);
    if (!create_guest_memory(fe, errp)) {
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
    if (fe->mem) {
        munmap(fe->mem, fe->mem_size);
    }
    if (fe->memfd >= 0) {
        close(fe->memfd);
    }
    g_array_free(fe->free_extents, TRUE);
    g_hash_table_destroy(fe->allocs);
    g_mutex_clear(&fe->mem_lock);
    g_free(fe);
}

/* ------------------------------------------------------------------------ */
/* Socket I/O                                                                */

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool send_all(VuFrontend *fe, const VhostUserHeader *hdr,
                     const void *payload, size_t len, const int *fds,
                     size_t nfds, Error **errp)
{
    struct iovec iov[2] = {
        { .iov_base = (void *)hdr, .iov_len = sizeof(*hdr) },
        { .iov_base = (void *)payload, .iov_len = len },
    };
    union {
        char buf[CMSG_SPACE(sizeof(int) * VHOST_USER_MAX_FDS)];
        struct cmsghdr align;
    } control;
    struct msghdr msg = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };
    size_t total = sizeof(*hdr) + len, sent = 0;

    if (fe->sock < 0) {
        error_setg(errp, "not connected to the back-end");
        return false;
    }
    g_assert(nfds <= VHOST_USER_MAX_FDS);
    if (nfds) {
        struct cmsghdr *cmsg;

        memset(&control, 0, sizeof(control));
        msg.msg_control = control.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * nfds);
    }
    while (sent < total) {
        ssize_t n = sendmsg(fe->sock, &msg, MSG_NOSIGNAL);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            error_setg_errno(errp, errno, "cannot send %s to the back-end",
                             request_name(hdr->request));
            return false;
        }
        sent += n;
        /* The fds went with the first byte; move past what was sent. */
        msg.msg_control = NULL;
        msg.msg_controllen = 0;
        while (n > 0 && msg.msg_iovlen) {
            if ((size_t)n >= msg.msg_iov->iov_len) {
                n -= msg.msg_iov->iov_len;
                msg.msg_iov++;
                msg.msg_iovlen--;
            } else {
                msg.msg_iov->iov_base = (char *)msg.msg_iov->iov_base + n;
                msg.msg_iov->iov_len -= n;
                n = 0;
            }
        }
    }
    return true;
}

/*
 * Wait until the socket is readable or deadline_ms passes.  Returns 1 if
 * readable (or hung up: the read will tell), 0 on timeout, -errno.
 */
static int wait_readable(int fd, int64_t deadline_ms)
{
    for (;;) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        int64_t left = deadline_ms - now_ms();
        int r;

        if (left < 0) {
            left = 0;
        }
        r = poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (r > 0) {
            return 1;
        }
        if (r == 0) {
            return 0;
        }
        if (errno != EINTR) {
            return -errno;
        }
    }
}

static void close_received_fds(struct msghdr *msg)
{
    struct cmsghdr *cmsg;

    for (cmsg = CMSG_FIRSTHDR(msg); cmsg; cmsg = CMSG_NXTHDR(msg, cmsg)) {
        if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS) {
            size_t n = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            int fds[VHOST_USER_MAX_FDS * 2];
            size_t i;

            n = MIN(n, G_N_ELEMENTS(fds));
            memcpy(fds, CMSG_DATA(cmsg), n * sizeof(int));
            for (i = 0; i < n; i++) {
                close(fds[i]);
            }
        }
    }
}

/*
 * Read exactly len bytes before deadline_ms.  Returns 1 when done, 0 if the
 * peer closed before the first byte (only reported when allow_eof), -errno
 * otherwise (-ETIMEDOUT, -ECONNRESET for a close in the middle).
 */
static int read_exact(int fd, void *buf, size_t len, int64_t deadline_ms,
                      bool allow_eof)
{
    size_t got = 0;

    while (got < len) {
        union {
            char buf[CMSG_SPACE(sizeof(int) * VHOST_USER_MAX_FDS)];
            struct cmsghdr align;
        } control;
        struct iovec iov = { (char *)buf + got, len - got };
        struct msghdr msg = {
            .msg_iov = &iov, .msg_iovlen = 1,
            .msg_control = control.buf, .msg_controllen = sizeof(control.buf),
        };
        ssize_t n;
        int r = wait_readable(fd, deadline_ms);

        if (r < 0) {
            return r;
        }
        if (r == 0) {
            return -ETIMEDOUT;
        }
        n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) {
                continue;
            }
            if (errno == ECONNRESET && got == 0 && allow_eof) {
                return 0;
            }
            return -errno;
        }
        close_received_fds(&msg);
        if (n == 0) {
            return got == 0 && allow_eof ? 0 : -ECONNRESET;
        }
        got += n;
    }
    return 1;
}

bool vuf_send_raw_header(VuFrontend *fe, uint32_t request, uint32_t flags,
                         uint32_t size_field, const void *payload,
                         size_t len, const int *fds, size_t nfds,
                         Error **errp)
{
    VhostUserHeader hdr = { request, flags, size_field };

    vuf_assert_control_thread(fe);
    if (nfds > VHOST_USER_MAX_FDS) {
        error_setg(errp, "at most %d fds per message, got %zu",
                   VHOST_USER_MAX_FDS, nfds);
        return false;
    }
    return send_all(fe, &hdr, payload, len, fds, nfds, errp);
}

bool vuf_send_raw(VuFrontend *fe, uint32_t request, uint32_t flags,
                  const void *payload, size_t size, const int *fds,
                  size_t nfds, Error **errp)
{
    if (size > UINT32_MAX) {
        error_setg(errp, "payload of %zu bytes does not fit a header", size);
        return false;
    }
    return vuf_send_raw_header(fe, request, flags, size, payload, size, fds,
                               nfds, errp);
}

bool vuf_recv_raw(VuFrontend *fe, int timeout_ms, VhostUserHeader *hdr,
                  void *payload, size_t max, size_t *len,
                  VufRecvResult *result, Error **errp)
{
    int64_t deadline = now_ms() + timeout_ms;
    uint8_t discard[256];
    size_t left, stored;
    int r;

    vuf_assert_control_thread(fe);
    *len = 0;
    if (fe->sock < 0) {
        error_setg(errp, "not connected to the back-end");
        return false;
    }
    r = wait_readable(fe->sock, deadline);
    if (r == 0) {
        *result = VUF_RECV_TIMEOUT;
        return true;
    }
    r = read_exact(fe->sock, hdr, sizeof(*hdr), deadline, true);
    if (r == 0 || r == -ECONNRESET) {
        *result = VUF_RECV_CLOSED;
        return true;
    }
    if (r < 0) {
        error_setg_errno(errp, -r, "cannot read a message header from the "
                         "back-end");
        return false;
    }
    stored = MIN(hdr->size, max);
    r = read_exact(fe->sock, payload, stored, deadline, false);
    for (left = hdr->size - stored; r > 0 && left; ) {
        size_t chunk = MIN(left, sizeof(discard));

        r = read_exact(fe->sock, discard, chunk, deadline, false);
        left -= chunk;
    }
    if (r < 0) {
        error_setg_errno(errp, -r, "%s reply: only part of its %u-byte "
                         "payload arrived", request_name(hdr->request),
                         hdr->size);
        return false;
    }
    *len = stored;
    *result = VUF_RECV_MESSAGE;
    return true;
}

/* ------------------------------------------------------------------------ */
/* Requests with replies                                                     */

/*
 * Read the reply to request into buf: exactly want bytes, or any size up to
 * want if *got is not NULL.  Errors name the request.
 */
static bool read_reply(VuFrontend *fe, uint32_t request, void *buf,
                       size_t want, size_t *got, Error **errp)
{
    VhostUserHeader hdr;
    VufRecvResult res;
    size_t len;

    if (!vuf_recv_raw(fe, fe->opts.reply_timeout_ms, &hdr, buf, want, &len,
                      &res, errp)) {
        return false;
    }
    if (res == VUF_RECV_TIMEOUT) {
        error_setg(errp, "the back-end did not answer %s within %d ms",
                   request_name(request), fe->opts.reply_timeout_ms);
        return false;
    }
    if (res == VUF_RECV_CLOSED) {
        error_setg(errp, "the back-end closed the connection instead of "
                   "answering %s", request_name(request));
        return false;
    }
    if (hdr.request != request) {
        error_setg(errp, "expected a reply to %s, got message %u (%s)",
                   request_name(request), hdr.request,
                   request_name(hdr.request));
        return false;
    }
    if (!(hdr.flags & VHOST_USER_REPLY_MASK) ||
        (hdr.flags & VHOST_USER_VERSION_MASK) != VHOST_USER_VERSION) {
        error_setg(errp, "reply to %s has bad flags 0x%x (want version 1 "
                   "and the reply bit)", request_name(request), hdr.flags);
        return false;
    }
    if (got) {
        if (hdr.size > want) {
            error_setg(errp, "reply to %s is %u bytes, expected at most %zu",
                       request_name(request), hdr.size, want);
            return false;
        }
        *got = len;
    } else if (hdr.size != want) {
        error_setg(errp, "short reply to %s: %u bytes, expected %zu",
                   request_name(request), hdr.size, want);
        return false;
    }
    return true;
}

/* A request answered with a u64 (GET_FEATURES and friends). */
static bool request_u64(VuFrontend *fe, uint32_t request, uint64_t *value,
                        Error **errp)
{
    return vuf_send_raw(fe, request, VHOST_USER_VERSION, NULL, 0, NULL, 0,
                        errp) &&
           read_reply(fe, request, value, sizeof(*value), NULL, errp);
}

/*
 * A request without a reply of its own.  With REPLY_ACK, ask for the
 * acknowledgement and fail if it is not zero.
 */
static bool request_set(VuFrontend *fe, uint32_t request, const void *payload,
                        size_t size, const int *fds, size_t nfds,
                        Error **errp)
{
    bool ack = has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_REPLY_ACK);
    uint32_t flags = VHOST_USER_VERSION |
                     (ack ? VHOST_USER_NEED_REPLY_MASK : 0);
    uint64_t status;

    if (!vuf_send_raw(fe, request, flags, payload, size, fds, nfds, errp)) {
        return false;
    }
    if (!ack) {
        return true;
    }
    if (!read_reply(fe, request, &status, sizeof(status), NULL, errp)) {
        return false;
    }
    if (status != 0) {
        error_setg(errp, "the back-end rejected %s (reply-ack status %"
                   PRIu64 ")", request_name(request), status);
        return false;
    }
    return true;
}

static bool request_u64_set(VuFrontend *fe, uint32_t request, uint64_t value,
                            const int *fds, size_t nfds, Error **errp)
{
    return request_set(fe, request, &value, sizeof(value), fds, nfds, errp);
}

static bool request_vring_state(VuFrontend *fe, uint32_t request,
                                unsigned index, unsigned num, Error **errp)
{
    VhostUserVringState s = { index, num };

    return request_set(fe, request, &s, sizeof(s), NULL, 0, errp);
}

bool vuf_check_alive(VuFrontend *fe, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    uint64_t features;

    vuf_assert_control_thread(fe);
    if (!vuf_send_raw(fe, VHOST_USER_GET_FEATURES, VHOST_USER_VERSION, NULL, 0,
                      NULL, 0, NULL)) {
        return false;
    }
    for (;;) {
        VhostUserHeader hdr;
        VufRecvResult res;
        size_t len;
        int64_t left = deadline - now_ms();

        if (left < 0 ||
            !vuf_recv_raw(fe, left, &hdr, &features, sizeof(features), &len,
                          &res, NULL) ||
            res != VUF_RECV_MESSAGE) {
            return false;
        }
        if (hdr.request == VHOST_USER_GET_FEATURES &&
            (hdr.flags & VHOST_USER_REPLY_MASK) &&
            hdr.size == sizeof(features)) {
            return true;
        }
        /* A stray reply to something sent before: skip it. */
    }
}

bool vuf_get_config(VuFrontend *fe, uint32_t offset, void *buf,
                    uint32_t size, Error **errp)
{
    VhostUserConfig msg = { .offset = offset, .size = size, .flags = 0 };
    size_t hdr_bytes = offsetof(VhostUserConfig, region);
    size_t got;

    vuf_assert_control_thread(fe);
    if (!has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_CONFIG)) {
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
        !read_reply(fe, VHOST_USER_GET_CONFIG, &msg, sizeof(msg), &got, errp)) {
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
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    int64_t deadline = now_ms() + fe->opts.connect_timeout_ms;
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
            now_ms() < deadline) {
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

/* ------------------------------------------------------------------------ */
/* The back-end channel                                                      */

/* A socket pair: ours stays, the other end goes with SET_SLAVE_REQ_FD. */
static bool setup_backend_channel(VuFrontend *fe, Error **errp)
{
    int sv[2];
    bool ok;

    g_assert(fe->backend_fd < 0);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        error_setg_errno(errp, errno, "cannot create the back-end channel");
        return false;
    }
    ok = request_set(fe, VHOST_USER_SET_SLAVE_REQ_FD, NULL, 0, &sv[1], 1,
                     errp);
    close(sv[1]);
    if (!ok) {
        close(sv[0]);
        return false;
    }
    fe->backend_fd = sv[0];
    return true;
}

int vuf_backend_channel_fd(const VuFrontend *fe)
{
    return fe->backend_fd;
}

uint64_t vuf_config_changes(const VuFrontend *fe)
{
    return fe->config_changes;
}

/* Answer a back-end request that asked for a reply. */
static bool backend_channel_ack(VuFrontend *fe, uint32_t request,
                                uint64_t status, Error **errp)
{
    struct {
        VhostUserHeader hdr;
        uint64_t status;
    } __attribute__((packed)) reply = {
        { request, VHOST_USER_VERSION | VHOST_USER_REPLY_MASK,
          sizeof(uint64_t) },
        status,
    };
    ssize_t n;

    do {
        n = send(fe->backend_fd, &reply, sizeof(reply), MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(reply)) {
        error_setg_errno(errp, n < 0 ? errno : EIO, "cannot answer the "
                         "back-end's request %u", request);
        return false;
    }
    return true;
}

/*
 * Read and handle one message from the back-end channel, waiting until
 * deadline_ms for it.  Returns 1 (handled), 0 (none came) or -1 (errp
 * set; the channel is closed on anything but a local error).
 */
static int backend_channel_read_one(VuFrontend *fe, int64_t deadline_ms,
                                    Error **errp)
{
    uint8_t payload[VHOST_USER_MAX_PAYLOAD];
    VhostUserHeader hdr;
    int r = wait_readable(fe->backend_fd, deadline_ms);

    if (r == 0) {
        return 0;
    }
    /* Once a message starts, the rest of it gets a second. */
    deadline_ms = MAX(deadline_ms, now_ms() + 1000);
    if (r > 0) {
        r = read_exact(fe->backend_fd, &hdr, sizeof(hdr), deadline_ms, true);
    }
    if (r == 0) {
        error_setg(errp, "the back-end closed its back-end channel");
        goto close;
    }
    if (r > 0 && hdr.size > sizeof(payload)) {
        error_setg(errp, "back-end request %u with a payload of %u bytes",
                   hdr.request, hdr.size);
        goto close;
    }
    if (r > 0 && hdr.size) {
        r = read_exact(fe->backend_fd, payload, hdr.size, deadline_ms, false);
    }
    if (r < 0) {
        error_setg_errno(errp, -r, "cannot read from the back-end channel");
        goto close;
    }
    if ((hdr.flags & VHOST_USER_VERSION_MASK) != VHOST_USER_VERSION ||
        (hdr.flags & VHOST_USER_REPLY_MASK)) {
        error_setg(errp, "back-end request %u with flags 0x%x", hdr.request,
                   hdr.flags);
        goto close;
    }
    if (hdr.request == VHOST_USER_SLAVE_CONFIG_CHANGE_MSG) {
        fe->config_changes++;
    }
    if ((hdr.flags & VHOST_USER_NEED_REPLY_MASK) &&
        !backend_channel_ack(fe, hdr.request,
                             hdr.request == VHOST_USER_SLAVE_CONFIG_CHANGE_MSG
                             ? 0 : 1, errp)) {
        goto close;
    }
    return 1;

close:
    close(fe->backend_fd);
    fe->backend_fd = -1;
    return -1;
}

/* True if the back-end channel is open; false with errp set if not. */
static bool vuf_check_backend_channel(VuFrontend *fe, Error **errp)
{
    if (fe->backend_fd < 0) {
        error_setg(errp, "there is no back-end channel (the back-end does "
                   "not offer the BACKEND_REQ protocol feature, or it was "
                   "not accepted)");
        return false;
    }
    return true;
}

bool vuf_poll_backend_channel(VuFrontend *fe, int timeout_ms, Error **errp)
{
    int64_t deadline = now_ms() + MAX(timeout_ms, 0);
    int r;

    vuf_assert_control_thread(fe);
    if (!vuf_check_backend_channel(fe, errp)) {
        return false;
    }
    /* The first message may take until the deadline; then take what is
     * there. */
    for (r = backend_channel_read_one(fe, deadline, errp); r > 0;
         r = backend_channel_read_one(fe, 0, errp)) {
    }
    return r == 0;
}

bool vuf_wait_config_change(VuFrontend *fe, int timeout_ms, Error **errp)
{
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : now_ms() + timeout_ms;

    vuf_assert_control_thread(fe);
    if (!vuf_check_backend_channel(fe, errp)) {
        return false;
    }
    while (fe->config_changes == fe->config_changes_taken) {
        int r = backend_channel_read_one(fe, deadline, errp);

        if (r < 0) {
            return false;
        }
        if (r == 0) {
            error_setg(errp, "no config-change message from the back-end "
                       "within %.1f s", timeout_ms / 1000.0);
            return false;
        }
    }
    fe->config_changes_taken++;
    return true;
}

static bool negotiate_protocol_features(VuFrontend *fe, Error **errp)
{
    uint64_t pf;

    if (!request_u64(fe, VHOST_USER_GET_PROTOCOL_FEATURES,
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
    if (has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_MQ) &&
        !request_u64(fe, VHOST_USER_GET_QUEUE_NUM, &fe->queue_num_max, errp)) {
        return false;
    }
    if (has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS) &&
        !request_u64(fe, VHOST_USER_GET_MAX_MEM_SLOTS, &fe->max_mem_slots,
                     errp)) {
        return false;
    }
    if (has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_SLAVE_REQ) &&
        !setup_backend_channel(fe, errp)) {
        return false;
    }
    return true;
}

/*
 * The config space is little-endian, as is every host vu-frontend builds
 * on (vu-frontend-int.h), so it is kept as read.
 */
static bool read_blk_config(VuFrontend *fe, Error **errp)
{
    if (fe->opts.device != VUF_DEVICE_BLK ||
        !has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_CONFIG)) {
        return true;
    }
    if (!vuf_get_config(fe, 0, &fe->blk_config, sizeof(fe->blk_config),
                        errp)) {
        error_prepend(errp, "reading the virtio-blk configuration: ");
        return false;
    }
    fe->have_blk_config = true;
    return true;
}

/*
 * The virtio-scsi config: the driver may write sense_size and cdb_size,
 * but QEMU's vhost-user-scsi keeps the device's (it refuses to change
 * them), and so do we.  They must be large enough for a 16-byte CDB and
 * fixed-format sense, and there must be a request queue.
 */
static bool read_scsi_config(VuFrontend *fe, Error **errp)
{
    const VirtioScsiConfig *c = &fe->scsi_config;

    if (fe->opts.device != VUF_DEVICE_SCSI ||
        !has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_CONFIG)) {
        return true;
    }
    if (!vuf_get_config(fe, 0, &fe->scsi_config, sizeof(fe->scsi_config),
                        errp)) {
        error_prepend(errp, "reading the virtio-scsi configuration: ");
        return false;
    }
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
    fe->have_scsi_config = true;
    return true;
}

static bool check_features(VuFrontend *fe, Error **errp)
{
    uint64_t missing = fe->opts.features_required & ~fe->features_offered;

    if (missing) {
        g_autofree char *want = feature_list(fe->opts.device, missing, false);
        g_autofree char *offered = feature_list(fe->opts.device,
                                                fe->features_offered, false);

        error_setg(errp, "the back-end lacks required feature(s) %s "
                   "(it offers: %s)", want, offered);
        return false;
    }
    if (fe->opts.mem_method == VUF_MEM_ADD_MEM_REG &&
        !has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS)) {
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

        return request_set(fe, VHOST_USER_ADD_MEM_REG, &reg, sizeof(reg),
                           &fe->memfd, 1, errp);
    } else {
        VhostUserMemory table = { .nregions = 1 };

        /* Sized for the regions sent, as QEMU does. */
        table.regions[0] = guest_memory_region(fe);
        return request_set(fe, VHOST_USER_SET_MEM_TABLE, &table,
                           offsetof(VhostUserMemory, regions[1]), &fe->memfd, 1,
                           errp);
    }
}

bool vuf_reread_config(VuFrontend *fe, Error **errp)
{
    vuf_assert_control_thread(fe);
    return read_blk_config(fe, errp) && read_scsi_config(fe, errp);
}

bool vuf_negotiate(VuFrontend *fe, Error **errp)
{
    uint64_t features;

    vuf_assert_control_thread(fe);
    if (!request_u64(fe, VHOST_USER_GET_FEATURES, &fe->features_offered,
                     errp)) {
        return false;
    }
    if ((fe->features_offered & VUF_BIT(VHOST_USER_F_PROTOCOL_FEATURES)) &&
        !negotiate_protocol_features(fe, errp)) {
        return false;
    }
    if (!check_features(fe, errp) ||
        !request_set(fe, VHOST_USER_SET_OWNER, NULL, 0, NULL, 0, errp) ||
        !read_blk_config(fe, errp) || !read_scsi_config(fe, errp)) {
        return false;
    }
    features = fe->features_offered &
               (fe->opts.features_wanted | fe->opts.features_required |
                VUF_BIT(VHOST_USER_F_PROTOCOL_FEATURES));
    fe->features = features;
    if (!check_queue_count(fe, errp) ||
        !request_u64_set(fe, VHOST_USER_SET_FEATURES, features, NULL, 0,
                         errp)) {
        return false;
    }
    return share_memory(fe, errp);
}

static bool setup_queue(VuFrontend *fe, VufQueue *q, Error **errp)
{
    uint64_t index = q->index;
    VhostUserVringAddr addr = {
        .index = q->index,
        .flags = 0,
        .desc_user_addr = (uintptr_t)q->desc,
        .used_user_addr = (uintptr_t)q->used,
        .avail_user_addr = (uintptr_t)q->avail,
        .log_guest_addr = 0,
    };

    if (!vufq_session_start(q, vuf_has_feature(fe, VIRTIO_RING_F_EVENT_IDX),
                            vuf_has_feature(fe, VIRTIO_RING_F_INDIRECT_DESC),
                            errp)) {
        return false;
    }
    if (!request_vring_state(fe, VHOST_USER_SET_VRING_NUM, q->index, q->num,
                             errp) ||
        !request_vring_state(fe, VHOST_USER_SET_VRING_BASE, q->index, 0,
                             errp) ||
        !request_set(fe, VHOST_USER_SET_VRING_ADDR, &addr, sizeof(addr), NULL,
                     0, errp) ||
        !request_u64_set(fe, VHOST_USER_SET_VRING_CALL, index, &q->call_fd, 1,
                         errp) ||
        !request_u64_set(fe, VHOST_USER_SET_VRING_KICK, index, &q->kick_fd, 1,
                         errp)) {
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
    uint64_t features;
    unsigned i;

    vuf_assert_control_thread(fe);
    for (i = 0; i < fe->num_queues; i++) {
        if (!setup_queue(fe, fe->queues[i], errp)) {
            return false;
        }
    }
    /* Without acknowledgements, a round trip proves that the back-end has
     * processed all of the above before any request is queued. */
    if (!has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_REPLY_ACK) &&
        !request_u64(fe, VHOST_USER_GET_FEATURES, &features, errp)) {
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
    if (!request_vring_state(fe, VHOST_USER_SET_VRING_ENABLE, i, enable,
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
        !read_reply(fe, VHOST_USER_GET_VRING_BASE, &s, sizeof(s), NULL, errp)) {
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
    if (fe->sock >= 0) {
        close(fe->sock);
        fe->sock = -1;
    }
    if (fe->backend_fd >= 0) {
        close(fe->backend_fd);
        fe->backend_fd = -1;
    }
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

/*
 * vu-features: the names of virtio and vhost-user feature bits.
 *
 * Theory of operation
 * -------------------
 * Three tables map bits to the names `spindle-vu-client info` prints and
 * the command lines of spindle-vu-client and spindle-bench accept: the
 * transport's and virtio-blk's feature bits, virtio-scsi's own device
 * bits (below bit 24 a bit means something else per device type), and the
 * vhost-user protocol feature bits.  Lookups by name are case-insensitive.
 * The session (vu-session.c) uses them for its error messages.
 *
 * Pure functions of constant tables: any thread.
 */

#include <stdint.h>

#include <glib.h>

#include "vu-frontend-int.h"

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

/* The bit table names as name (case-insensitive), or -1. */
static int bit_by_name(const BitName *table, size_t n, const char *name)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (!g_ascii_strcasecmp(table[i].name, name)) {
            return table[i].bit;
        }
    }
    return -1;
}

int vuf_feature_by_name(const char *name)
{
    return bit_by_name(feature_names, G_N_ELEMENTS(feature_names), name);
}

int vuf_protocol_feature_by_name(const char *name)
{
    return bit_by_name(protocol_feature_names,
                       G_N_ELEMENTS(protocol_feature_names), name);
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
    int bit;

    if (dev != VUF_DEVICE_SCSI) {
        return vuf_feature_by_name(name);
    }
    bit = bit_by_name(scsi_feature_names, G_N_ELEMENTS(scsi_feature_names),
                      name);
    if (bit >= 0) {
        return bit;
    }
    bit = vuf_feature_by_name(name);
    return bit >= DEVICE_FEATURE_BITS ? bit : -1;
}

char **vuf_feature_names(VufDeviceType dev, uint64_t mask, bool protocol)
{
    GPtrArray *names = g_ptr_array_new();
    unsigned bit;

    for (bit = 0; bit < 64; bit++) {
        const char *name;

        if (!(mask & VUF_BIT(bit))) {
            continue;
        }
        name = protocol ? vuf_protocol_feature_name(bit)
                        : vuf_device_feature_name(dev, bit);
        g_ptr_array_add(names, name ? g_strdup(name)
                                    : g_strdup_printf("bit%u", bit));
    }
    g_ptr_array_add(names, NULL);
    return (char **)g_ptr_array_free(names, FALSE);
}

char *vuf_feature_list(VufDeviceType dev, uint64_t mask, bool protocol)
{
    g_auto(GStrv) names = vuf_feature_names(dev, mask, protocol);

    return names[0] ? g_strjoinv(", ", names) : g_strdup("none");
}

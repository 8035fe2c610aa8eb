/*
 * vu-features: the feature bits a vu-frontend accepts by default, and the
 * names of virtio and vhost-user feature bits (vu-features.c).
 */
#ifndef SPINDLE_TOOLS_VU_FEATURES_H
#define SPINDLE_TOOLS_VU_FEATURES_H

#include "vu-types.h"


#define VUF_BIT(n)                  (1ull << (n))

/* Features accepted by default when the back-end offers them. */
#define VUF_FEATURES_DEFAULT \
    (VUF_BIT(VIRTIO_F_VERSION_1) | VUF_BIT(VIRTIO_RING_F_INDIRECT_DESC) | \
     VUF_BIT(VIRTIO_RING_F_EVENT_IDX) | VUF_BIT(VIRTIO_BLK_F_SIZE_MAX) | \
     VUF_BIT(VIRTIO_BLK_F_SEG_MAX) | VUF_BIT(VIRTIO_BLK_F_GEOMETRY) | \
     VUF_BIT(VIRTIO_BLK_F_RO) | VUF_BIT(VIRTIO_BLK_F_BLK_SIZE) | \
     VUF_BIT(VIRTIO_BLK_F_FLUSH) | VUF_BIT(VIRTIO_BLK_F_TOPOLOGY) | \
     VUF_BIT(VIRTIO_BLK_F_CONFIG_WCE) | VUF_BIT(VIRTIO_BLK_F_MQ) | \
     VUF_BIT(VIRTIO_BLK_F_DISCARD) | VUF_BIT(VIRTIO_BLK_F_WRITE_ZEROES))
/* The same for a virtio-scsi device (VUF_DEVICE_SCSI): the transport's and
 * hot-plug and parameter change events; not INOUT or T10_PI. */
#define VUF_SCSI_FEATURES_DEFAULT \
    (VUF_BIT(VIRTIO_F_VERSION_1) | VUF_BIT(VIRTIO_RING_F_INDIRECT_DESC) | \
     VUF_BIT(VIRTIO_RING_F_EVENT_IDX) | VUF_BIT(VIRTIO_SCSI_F_HOTPLUG) | \
     VUF_BIT(VIRTIO_SCSI_F_CHANGE))
/* Features without which we refuse to go on, by default. */
#define VUF_FEATURES_REQUIRED_DEFAULT   VUF_BIT(VIRTIO_F_VERSION_1)
/* Protocol features accepted by default when offered. */
#define VUF_PROTOCOL_FEATURES_DEFAULT \
    (VUF_BIT(VHOST_USER_PROTOCOL_F_MQ) | \
     VUF_BIT(VHOST_USER_PROTOCOL_F_REPLY_ACK) | \
     VUF_BIT(VHOST_USER_PROTOCOL_F_SLAVE_REQ) | \
     VUF_BIT(VHOST_USER_PROTOCOL_F_CONFIG) | \
     VUF_BIT(VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD) | \
     VUF_BIT(VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS))



/*
 * Name of a feature bit ("VERSION_1", "BLK_FLUSH", ...), or NULL if unknown;
 * of a protocol feature bit ("REPLY_ACK", ...) likewise.  Any thread.
 */
const char *vuf_feature_name(unsigned bit);
const char *vuf_protocol_feature_name(unsigned bit);
/* Look up a feature bit by name (as vuf_feature_name() spells it, case
 * insensitive); -1 if unknown. */
int vuf_feature_by_name(const char *name);
/*
 * The same for device dev's bits: the device-specific bits (below 24) have
 * their own names per device ("SCSI_HOTPLUG" is bit 1 for VUF_DEVICE_SCSI,
 * where vuf_feature_name() says "BLK_SIZE_MAX"); the transport's are
 * shared.  Any thread.
 */
const char *vuf_device_feature_name(VufDeviceType dev, unsigned bit);

/* The same for a protocol feature bit; -1 if unknown. */
int vuf_protocol_feature_by_name(const char *name);

/*
 * The names of the bits set in mask, lowest first, as
 * vuf_device_feature_name(dev, bit) or (protocol) vuf_protocol_feature_name()
 * spell them, "bitN" for a bit without a name.  A NULL-terminated array;
 * free it with g_strfreev().  Any thread.
 */
char **vuf_feature_names(VufDeviceType dev, uint64_t mask, bool protocol);

#endif

/*
 * vhost-user wire format: header flags, request codes, feature and
 * protocol-feature bits, and the payload layouts of the messages Spindle
 * sends or accepts.
 *
 * Specification: QEMU's docs/interop/vhost-user.rst ("Vhost-user
 * Protocol", section "Message Specification").  Every message is a 12-byte
 * header followed by `size` bytes of payload, in the host's byte order;
 * file descriptors travel as SCM_RIGHTS ancillary data with the message.
 *
 * Shared by the back-end (hw/virtio/vhost-user-*.c, through
 * hw/virtio/vhost-user-protocol.h) and the guest-less front-end
 * (tools/frontend/), so both sides agree on one layout.  Plain data
 * definitions only.
 */
#ifndef SPINDLE_HW_VIRTIO_VHOST_USER_WIRE_H
#define SPINDLE_HW_VIRTIO_VHOST_USER_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <glib.h>

/* Header flags */
#define VHOST_USER_VERSION          0x1u
#define VHOST_USER_VERSION_MASK     0x3u
#define VHOST_USER_REPLY_MASK       (1u << 2)
#define VHOST_USER_NEED_REPLY_MASK  (1u << 3)

/* Virtio feature bit 30, reused to announce protocol feature negotiation. */
#define VHOST_USER_F_PROTOCOL_FEATURES 30

/* Virtio feature bit 26: the back-end logs what it writes into guest
 * memory (dirty logging for live migration; SET_LOG_BASE). */
#define VHOST_F_LOG_ALL 26

/* SET_VRING_ADDR flags: log the used ring's writes at log_guest_addr. */
#define VHOST_VRING_F_LOG 0x1u

/* Protocol feature bits */
#define VHOST_USER_PROTOCOL_F_MQ                   0
#define VHOST_USER_PROTOCOL_F_LOG_SHMFD            1
#define VHOST_USER_PROTOCOL_F_REPLY_ACK            3
#define VHOST_USER_PROTOCOL_F_SLAVE_REQ            5
#define VHOST_USER_PROTOCOL_F_CONFIG               9
#define VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD       12
#define VHOST_USER_PROTOCOL_F_RESET_DEVICE         13
#define VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS  15
#define VHOST_USER_PROTOCOL_F_STATUS               16

/* Front-end request codes */
typedef enum VhostUserRequest {
    VHOST_USER_GET_FEATURES = 1,
    VHOST_USER_SET_FEATURES = 2,
    VHOST_USER_SET_OWNER = 3,
    VHOST_USER_RESET_OWNER = 4,
    VHOST_USER_SET_MEM_TABLE = 5,
    VHOST_USER_SET_LOG_BASE = 6,
    VHOST_USER_SET_LOG_FD = 7,
    VHOST_USER_SET_VRING_NUM = 8,
    VHOST_USER_SET_VRING_ADDR = 9,
    VHOST_USER_SET_VRING_BASE = 10,
    VHOST_USER_GET_VRING_BASE = 11,
    VHOST_USER_SET_VRING_KICK = 12,
    VHOST_USER_SET_VRING_CALL = 13,
    VHOST_USER_SET_VRING_ERR = 14,
    VHOST_USER_GET_PROTOCOL_FEATURES = 15,
    VHOST_USER_SET_PROTOCOL_FEATURES = 16,
    VHOST_USER_GET_QUEUE_NUM = 17,
    VHOST_USER_SET_VRING_ENABLE = 18,
    VHOST_USER_SEND_RARP = 19,
    VHOST_USER_NET_SET_MTU = 20,
    VHOST_USER_SET_SLAVE_REQ_FD = 21,
    VHOST_USER_IOTLB_MSG = 22,
    VHOST_USER_SET_VRING_ENDIAN = 23,
    VHOST_USER_GET_CONFIG = 24,
    VHOST_USER_SET_CONFIG = 25,
    VHOST_USER_GET_INFLIGHT_FD = 31,
    VHOST_USER_SET_INFLIGHT_FD = 32,
    VHOST_USER_RESET_DEVICE = 34,
    VHOST_USER_VRING_KICK = 35,
    VHOST_USER_GET_MAX_MEM_SLOTS = 36,
    VHOST_USER_ADD_MEM_REG = 37,
    VHOST_USER_REM_MEM_REG = 38,
    VHOST_USER_SET_STATUS = 39,
    VHOST_USER_GET_STATUS = 40,
} VhostUserRequest;

/* Back-end request codes (on the channel of SET_SLAVE_REQ_FD) */
typedef enum VhostUserSlaveRequest {
    VHOST_USER_SLAVE_IOTLB_MSG = 1,
    VHOST_USER_SLAVE_CONFIG_CHANGE_MSG = 2,
} VhostUserSlaveRequest;

/* SET_VRING_KICK/CALL/ERR payload: ring index and the "no fd" flag. */
#define VHOST_USER_VRING_INDEX_MASK 0xffu
#define VHOST_USER_VRING_NOFD_MASK  (1u << 8)

/* Regions in one SET_MEM_TABLE message. */
#define VHOST_USER_MEM_TABLE_MAX_REGIONS 8

/* Largest config space access (GET_CONFIG / SET_CONFIG). */
#define VHOST_USER_MAX_CONFIG_SIZE 256

/*
 * Spindle's own limits, not the spec's: the most fds either side sends or
 * accepts with one message, and the largest payload.  The largest legal
 * request (SET_CONFIG with 256 bytes, SET_MEM_TABLE with 8 regions) is far
 * below.
 */
#define VHOST_USER_MAX_FDS 8
#define VHOST_USER_MAX_PAYLOAD 4096

typedef struct VhostUserHeader {
    uint32_t request;
    uint32_t flags;
    uint32_t size;               /* payload bytes that follow */
} __attribute__((packed)) VhostUserHeader;

/* SET_VRING_NUM, SET_VRING_BASE, GET_VRING_BASE, SET_VRING_ENABLE */
typedef struct VhostUserVringState {
    uint32_t index;
    uint32_t num;
} VhostUserVringState;

/* SET_VRING_ADDR (front-end virtual addresses) */
typedef struct VhostUserVringAddr {
    uint32_t index;
    uint32_t flags;
    uint64_t desc_user_addr;
    uint64_t used_user_addr;
    uint64_t avail_user_addr;
    uint64_t log_guest_addr;
} VhostUserVringAddr;

typedef struct VhostUserMemRegion {
    uint64_t guest_phys_addr;
    uint64_t memory_size;
    uint64_t userspace_addr;
    uint64_t mmap_offset;
} VhostUserMemRegion;

/* SET_MEM_TABLE: nregions entries follow; one fd per region, in order. */
typedef struct VhostUserMemory {
    uint32_t nregions;
    uint32_t padding;
    VhostUserMemRegion regions[VHOST_USER_MEM_TABLE_MAX_REGIONS];
} VhostUserMemory;

/* ADD_MEM_REG, REM_MEM_REG */
typedef struct VhostUserMemRegMsg {
    uint64_t padding;
    VhostUserMemRegion region;
} VhostUserMemRegMsg;

/* GET_CONFIG, SET_CONFIG: `size` bytes of config space follow. */
typedef struct VhostUserConfig {
    uint32_t offset;
    uint32_t size;
    uint32_t flags;
    uint8_t region[VHOST_USER_MAX_CONFIG_SIZE];
} VhostUserConfig;

#define VHOST_USER_CONFIG_HDR_SIZE 12u

/*
 * GET_INFLIGHT_FD and SET_INFLIGHT_FD ("inflight description"): the
 * front-end asks for num_queues rings of queue_size entries (mmap_* 0);
 * the back-end answers with the region's size and offset in the fd it
 * sends (mmap_size 0 and no fd: no region), which the front-end hands
 * back with SET_INFLIGHT_FD.  The region's layout is in
 * hw/virtio/vhost-inflight.h.
 */
typedef struct VhostUserInflight {
    uint64_t mmap_size;
    uint64_t mmap_offset;
    uint16_t num_queues;
    uint16_t queue_size;
} VhostUserInflight;

/*
 * SET_LOG_BASE ("log description"), with the log's fd: the dirty bitmap
 * is mmap_size bytes at mmap_offset of the fd (hw/virtio/vhost-log.h).
 */
typedef struct VhostUserLog {
    uint64_t mmap_size;
    uint64_t mmap_offset;
} VhostUserLog;

G_STATIC_ASSERT(sizeof(VhostUserHeader) == 12);
G_STATIC_ASSERT(sizeof(VhostUserLog) == 16);
G_STATIC_ASSERT(sizeof(VhostUserVringState) == 8);
G_STATIC_ASSERT(sizeof(VhostUserVringAddr) == 40);
G_STATIC_ASSERT(offsetof(VhostUserVringAddr, desc_user_addr) == 8);
G_STATIC_ASSERT(sizeof(VhostUserMemRegion) == 32);
G_STATIC_ASSERT(offsetof(VhostUserMemory, regions) == 8);
G_STATIC_ASSERT(sizeof(VhostUserMemory) ==
                8 + 32 * VHOST_USER_MEM_TABLE_MAX_REGIONS);
G_STATIC_ASSERT(sizeof(VhostUserMemRegMsg) == 40);
G_STATIC_ASSERT(offsetof(VhostUserConfig, region) ==
                VHOST_USER_CONFIG_HDR_SIZE);
G_STATIC_ASSERT(sizeof(VhostUserInflight) == 24);
G_STATIC_ASSERT(sizeof(VhostUserConfig) ==
                VHOST_USER_CONFIG_HDR_SIZE + VHOST_USER_MAX_CONFIG_SIZE);

#endif

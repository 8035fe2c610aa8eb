/*
 * vhost-user wire format: request codes, flags, feature bits and payload
 * layouts (QEMU's docs/interop/vhost-user.rst, "Message Specification").
 * Private to hw/virtio: the server and its unit test use it.
 *
 * Every message is a 12-byte header followed by `size` bytes of payload, in
 * the host's byte order; file descriptors travel as SCM_RIGHTS ancillary
 * data with the message.  The second half declares the socket transport
 * (listening, accepting, whole-message reads and writes) that the server
 * builds on.
 */
#ifndef SPINDLE_HW_VIRTIO_VHOST_USER_PROTOCOL_H
#define SPINDLE_HW_VIRTIO_VHOST_USER_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include "util/error.h"

/* Header flags */
#define VHOST_USER_VERSION          0x1u
#define VHOST_USER_VERSION_MASK     0x3u
#define VHOST_USER_REPLY_MASK       (1u << 2)
#define VHOST_USER_NEED_REPLY_MASK  (1u << 3)

/* Virtio feature bit 30, reused to announce protocol feature negotiation. */
#define VHOST_USER_F_PROTOCOL_FEATURES 30

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

/* SET_VRING_KICK/CALL/ERR payload: ring index and the "no fd" flag. */
#define VHOST_USER_VRING_INDEX_MASK 0xffu
#define VHOST_USER_VRING_NOFD_MASK  (1u << 8)

/* Regions in one SET_MEM_TABLE message. */
#define VHOST_USER_MEM_TABLE_MAX_REGIONS 8

/* Largest config space access (GET_CONFIG / SET_CONFIG). */
#define VHOST_USER_MAX_CONFIG_SIZE 256

/* Most fds accepted with one message. */
#define VHOST_USER_MAX_FDS 8

/*
 * Largest payload this back-end accepts.  The largest legal request
 * (SET_CONFIG with 256 bytes, SET_MEM_TABLE with 8 regions) is far below.
 */
#define VHOST_USER_MAX_PAYLOAD 4096

typedef struct VhostUserHeader {
    uint32_t request;
    uint32_t flags;
    uint32_t size;
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

_Static_assert(sizeof(VhostUserHeader) == 12, "vhost-user header layout");
_Static_assert(sizeof(VhostUserVringState) == 8, "vring state layout");
_Static_assert(sizeof(VhostUserVringAddr) == 40, "vring addr layout");
_Static_assert(sizeof(VhostUserMemRegion) == 32, "memory region layout");
_Static_assert(sizeof(VhostUserMemRegMsg) == 40, "single region layout");
_Static_assert(sizeof(VhostUserConfig) ==
               VHOST_USER_CONFIG_HDR_SIZE + VHOST_USER_MAX_CONFIG_SIZE,
               "config layout");

/* ------------------------------------------------------------------------ */
/* Message transport (hw/virtio/vhost-user-socket.c)                         */

/* One message as read from or written to the socket. */
typedef struct VuMsg {
    VhostUserHeader hdr;
    union {
        uint64_t u64;
        VhostUserVringState state;
        VhostUserVringAddr addr;
        VhostUserMemory memory;
        VhostUserMemRegMsg memreg;
        VhostUserConfig config;
        uint8_t bytes[VHOST_USER_MAX_PAYLOAD];
    } payload;
    int fds[VHOST_USER_MAX_FDS];  /* received fds, owned by the message */
    unsigned nfds;
    bool fds_dropped;             /* more fds came than fit: extras closed */
} VuMsg;

/*
 * Create a listening socket at path, mode 0600.  A socket file that
 * nobody listens on is replaced; anything else at path is an error.
 * Returns the non-blocking, close-on-exec fd and the file's identity in
 * *st (to unlink only our own file later), or -1 with errp set.  Any thread.
 */
int vu_socket_listen_path(const char *path, struct stat *st, Error **errp);

/*
 * Check that fd is a listening UNIX stream socket and return a
 * non-blocking, close-on-exec duplicate (the caller keeps fd), or -1 with
 * errp set.  Any thread.
 */
int vu_socket_adopt_listen_fd(int fd, Error **errp);

/*
 * Accept a connection: a blocking, close-on-exec fd whose reads and writes
 * time out after timeout_ms.  Returns the fd, -EAGAIN if nobody was
 * waiting, or another -errno.  Any thread.
 */
int vu_socket_accept(int listen_fd, int timeout_ms);

/*
 * Read one whole message with its fds from a blocking socket that is
 * readable.  The message must be complete within timeout_ms of the call.
 * Returns 1 (msg filled; the caller owns msg->fds: vu_msg_close_fds()),
 * 0 (end of file before a message started) or -1 (bad framing, time-out,
 * error: why says what, msg holds no fds).  The payload is checked
 * against VHOST_USER_MAX_PAYLOAD, the version and the reply flag, nothing
 * else.  Any thread.
 */
int vu_msg_recv(int fd, VuMsg *msg, int timeout_ms, char *why,
                size_t why_len);

/*
 * Send msg's header and hdr.size bytes of payload (no fds).  false, with
 * why set, if the peer is gone or does not read within the socket's send
 * time-out.  Any thread.
 */
bool vu_msg_send(int fd, const VuMsg *msg, char *why, size_t why_len);

/* Close the fds msg still owns (an fd taken out is set to -1). */
void vu_msg_close_fds(VuMsg *msg);

#endif

/*
 * vhost-user messages of the back-end: the transport (accepting, and
 * whole-message reads and writes: hw/virtio/vhost-user-socket.c) that the
 * server builds on, and what each request must carry
 * (hw/virtio/vhost-user-msg.c).  Private to hw/virtio: the server, its
 * unit tests and the fuzz harnesses use it.
 *
 * The wire format itself (request codes, flags, feature bits, payload
 * layouts) is in hw/virtio/vhost-user-wire.h, shared with the front-end.
 */
#ifndef SPINDLE_HW_VIRTIO_VHOST_USER_PROTOCOL_H
#define SPINDLE_HW_VIRTIO_VHOST_USER_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "hw/virtio/vhost-user-wire.h"
#include "util/error.h"

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
        VhostUserInflight inflight;
        VhostUserLog log;
        uint8_t bytes[VHOST_USER_MAX_PAYLOAD];
    } payload;
    int fds[VHOST_USER_MAX_FDS];  /* received or to send; owned by the
                                   * message */
    unsigned nfds;
    bool fds_dropped;             /* more fds came than fit: extras closed */
} VuMsg;

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
 * Send msg's header and hdr.size bytes of payload, with msg's nfds fds
 * (they stay msg's: close them with vu_msg_close_fds()).  false, with why
 * set, if the peer is gone or does not read within the socket's send
 * time-out.  Any thread.
 */
bool vu_msg_send(int fd, const VuMsg *msg, char *why, size_t why_len);

/* Close the fds msg still owns (an fd taken out is set to -1). */
void vu_msg_close_fds(VuMsg *msg);

/*
 * Decoding (hw/virtio/vhost-user-msg.c).  Plain functions of the message:
 * no state, no fd is touched.  Any thread.
 */

/* The request's name ("SET_MEM_TABLE"), or NULL for one the server does
 * not support. */
const char *vu_request_name(uint32_t req);

/* Whether req's reply is its own payload (GET_FEATURES, GET_CONFIG, ...),
 * so that REPLY_ACK does not apply to it. */
bool vu_request_has_reply(uint32_t req);

/*
 * Check what msg carries against what its request must carry: fds lost
 * on receipt, a supported request, its payload size (and for
 * SET_MEM_TABLE, GET_CONFIG, SET_CONFIG and SET_VRING_KICK/CALL/ERR the
 * payload fields that size and fd count depend on) and its fd count.
 * Returns true if the request's handler may read the payload and the fds
 * it needs; false with why set (one line, for the log) otherwise.  Values
 * that depend on the server (ring indexes, features) are the handlers'.
 */
bool vu_msg_validate(const VuMsg *msg, char *why, size_t why_len);

/*
 * The ring a valid request about one ring names (SET_VRING_*,
 * GET_VRING_BASE): its index, not checked against the server's rings.
 */
uint32_t vu_msg_ring_index(const VuMsg *msg);

/* SET_VRING_KICK/CALL/ERR: whether the front-end sent no fd (polling). */
bool vu_msg_vring_nofd(const VuMsg *msg);

#endif

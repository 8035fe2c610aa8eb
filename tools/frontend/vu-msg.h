/*
 * vu-msg: raw vhost-user messages, for tests of a back-end (vu-msg.c).
 */
#ifndef SPINDLE_TOOLS_VU_MSG_H
#define SPINDLE_TOOLS_VU_MSG_H

#include "vu-types.h"

/* ------------------------------------------------------------------------ */
/* Raw messages, for tests of the back-end (control thread)                  */

typedef enum VufRecvResult {
    VUF_RECV_MESSAGE,           /* a message arrived */
    VUF_RECV_TIMEOUT,           /* nothing within the timeout */
    VUF_RECV_CLOSED,            /* the back-end closed the connection */
} VufRecvResult;

/*
 * Send one message exactly as given: header {request, flags, size}, then
 * size payload bytes, with nfds (<= VHOST_USER_MAX_FDS) descriptors attached
 * (the fds stay ours).  Nothing is checked, so this can send what the
 * protocol forbids.  Returns false with errp set if the send fails.
 */
bool vuf_send_raw(VuFrontend *fe, uint32_t request, uint32_t flags,
                  const void *payload, size_t size, const int *fds,
                  size_t nfds, Error **errp);

/* Like vuf_send_raw(), but the header's size field says size_field while
 * len bytes follow: a lying header. */
bool vuf_send_raw_header(VuFrontend *fe, uint32_t request, uint32_t flags,
                         uint32_t size_field, const void *payload,
                         size_t len, const int *fds, size_t nfds,
                         Error **errp);

/*
 * Wait up to timeout_ms for one message from the back-end.  On
 * VUF_RECV_MESSAGE, *hdr gets its header and payload (of capacity max) its
 * first min(size, max) bytes; *len the bytes stored.  Any fds that came
 * with it are closed.  Returns false with errp set only on a local error or
 * a truncated message.
 */
bool vuf_recv_raw(VuFrontend *fe, int timeout_ms, VhostUserHeader *hdr,
                  void *payload, size_t max, size_t *len,
                  VufRecvResult *result, Error **errp);

/*
 * Is the back-end still talking to us?  Sends GET_FEATURES and waits up to
 * timeout_ms for its reply, skipping any stray replies.  No Error: false
 * means closed, silent or nonsensical.
 */
bool vuf_check_alive(VuFrontend *fe, int timeout_ms);

/* The socket, or -1 when disconnected (e.g. to poll for hang-up). */
int vuf_socket_fd(const VuFrontend *fe);

#endif

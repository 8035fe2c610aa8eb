/*
 * vu-msg: vhost-user messages between the front-end and its back-end.
 *
 * Theory of operation
 * -------------------
 * A message is a 12-byte header (request, flags, payload size) and its
 * payload, with up to VHOST_USER_MAX_FDS descriptors riding along in
 * SCM_RIGHTS.  Messages are sent with sendmsg() (MSG_NOSIGNAL, so a dead
 * back-end gives EPIPE rather than SIGPIPE; a short send is resumed, the
 * fds going only with the first byte) and read with recvmsg() under a
 * poll() deadline, so that a silent or vanished back-end turns into an
 * Error instead of a hang.  Descriptors a back-end sends us are closed,
 * but for the one reply that carries one (GET_INFLIGHT_FD, read with
 * vuf_read_reply_fd()).
 *
 * Three levels sit on that transport:
 * - the raw API (vuf_send_raw(), vuf_send_raw_header(), vuf_recv_raw()),
 *   which sends anything at all, for tests of a back-end's robustness;
 * - request/reply helpers for the session (vu-session.c): a request
 *   answered with a u64, and one "without a reply of its own", which with
 *   REPLY_ACK carries NEED_REPLY and has its acknowledgement checked;
 *   every reply is checked for its request, flags and size, and errors
 *   name the request;
 * - vuf_check_alive(), a GET_FEATURES round trip that skips stray replies.
 *
 * The back-end channel (vu-backend-chan.c) reads its socket with the same
 * vuf_wait_readable() and vuf_read_exact().
 *
 * Everything here runs in the control thread; see vu-frontend.h.
 */

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>

#include "vu-frontend-int.h"

/* ------------------------------------------------------------------------ */
/* Names and time                                                            */

const char *vuf_request_name(uint32_t request)
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
        [VHOST_USER_GET_INFLIGHT_FD] = "GET_INFLIGHT_FD",
        [VHOST_USER_SET_INFLIGHT_FD] = "SET_INFLIGHT_FD",
    };

    return vuf_table_name(names, G_N_ELEMENTS(names), request,
                          "unknown request");
}


int64_t vuf_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------------ */
/* Transport                                                                 */

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
                             vuf_request_name(hdr->request));
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

int vuf_wait_readable(int fd, int64_t deadline_ms)
{
    for (;;) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        int64_t left = deadline_ms - vuf_now_ms();
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

/*
 * Received fds: with an fd in *kept (not NULL, -1 on entry), the first
 * one is stored there; every other one is closed.
 */
static void take_received_fds(struct msghdr *msg, int *kept)
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
                if (kept && *kept < 0) {
                    *kept = fds[i];
                } else {
                    close(fds[i]);
                }
            }
        }
    }
}

/* vuf_read_exact(), keeping the first fd that comes along in *kept. */
static int read_exact_fd(int fd, void *buf, size_t len, int64_t deadline_ms,
                         bool allow_eof, int *kept)
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
        int r = vuf_wait_readable(fd, deadline_ms);

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
        take_received_fds(&msg, kept);
        if (n == 0) {
            return got == 0 && allow_eof ? 0 : -ECONNRESET;
        }
        got += n;
    }
    return 1;
}

int vuf_read_exact(int fd, void *buf, size_t len, int64_t deadline_ms,
                   bool allow_eof)
{
    return read_exact_fd(fd, buf, len, deadline_ms, allow_eof, NULL);
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

/* vuf_recv_raw(), keeping the first fd that comes along in *kept. */
static bool recv_msg(VuFrontend *fe, int timeout_ms, VhostUserHeader *hdr,
                     void *payload, size_t max, size_t *len,
                     VufRecvResult *result, int *kept, Error **errp)
{
    int64_t deadline = vuf_now_ms() + timeout_ms;
    uint8_t discard[256];
    size_t left, stored;
    int r;

    vuf_assert_control_thread(fe);
    *len = 0;
    if (fe->sock < 0) {
        error_setg(errp, "not connected to the back-end");
        return false;
    }
    r = vuf_wait_readable(fe->sock, deadline);
    if (r == 0) {
        *result = VUF_RECV_TIMEOUT;
        return true;
    }
    r = read_exact_fd(fe->sock, hdr, sizeof(*hdr), deadline, true, kept);
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
    r = read_exact_fd(fe->sock, payload, stored, deadline, false, kept);
    for (left = hdr->size - stored; r > 0 && left; ) {
        size_t chunk = MIN(left, sizeof(discard));

        r = vuf_read_exact(fe->sock, discard, chunk, deadline, false);
        left -= chunk;
    }
    if (r < 0) {
        error_setg_errno(errp, -r, "%s reply: only part of its %u-byte "
                         "payload arrived", vuf_request_name(hdr->request),
                         hdr->size);
        return false;
    }
    *len = stored;
    *result = VUF_RECV_MESSAGE;
    return true;
}

bool vuf_recv_raw(VuFrontend *fe, int timeout_ms, VhostUserHeader *hdr,
                  void *payload, size_t max, size_t *len,
                  VufRecvResult *result, Error **errp)
{
    return recv_msg(fe, timeout_ms, hdr, payload, max, len, result, NULL,
                    errp);
}

/* ------------------------------------------------------------------------ */
/* Requests and their replies                                                */

/* vuf_read_reply(), keeping the first fd that comes along in *kept. */
static bool read_reply(VuFrontend *fe, uint32_t request, void *buf,
                       size_t want, size_t *got, int *kept, Error **errp)
{
    VhostUserHeader hdr;
    VufRecvResult res;
    size_t len;

    if (!recv_msg(fe, fe->opts.reply_timeout_ms, &hdr, buf, want, &len,
                  &res, kept, errp)) {
        return false;
    }
    if (res == VUF_RECV_TIMEOUT) {
        error_setg(errp, "the back-end did not answer %s within %d ms",
                   vuf_request_name(request), fe->opts.reply_timeout_ms);
        return false;
    }
    if (res == VUF_RECV_CLOSED) {
        error_setg(errp, "the back-end closed the connection instead of "
                   "answering %s", vuf_request_name(request));
        return false;
    }
    if (hdr.request != request) {
        error_setg(errp, "expected a reply to %s, got message %u (%s)",
                   vuf_request_name(request), hdr.request,
                   vuf_request_name(hdr.request));
        return false;
    }
    if (!(hdr.flags & VHOST_USER_REPLY_MASK) ||
        (hdr.flags & VHOST_USER_VERSION_MASK) != VHOST_USER_VERSION) {
        error_setg(errp, "reply to %s has bad flags 0x%x (want version 1 "
                   "and the reply bit)", vuf_request_name(request), hdr.flags);
        return false;
    }
    if (got) {
        if (hdr.size > want) {
            error_setg(errp, "reply to %s is %u bytes, expected at most %zu",
                       vuf_request_name(request), hdr.size, want);
            return false;
        }
        *got = len;
    } else if (hdr.size != want) {
        error_setg(errp, "short reply to %s: %u bytes, expected %zu",
                   vuf_request_name(request), hdr.size, want);
        return false;
    }
    return true;
}

bool vuf_read_reply(VuFrontend *fe, uint32_t request, void *buf,
                    size_t want, size_t *got, Error **errp)
{
    return read_reply(fe, request, buf, want, got, NULL, errp);
}

bool vuf_read_reply_fd(VuFrontend *fe, uint32_t request, void *buf,
                       size_t want, int *fd, Error **errp)
{
    *fd = -1;
    if (!read_reply(fe, request, buf, want, NULL, fd, errp)) {
        vuf_close_fd(fd);
        return false;
    }
    return true;
}

bool vuf_request_u64(VuFrontend *fe, uint32_t request, uint64_t *value,
                     Error **errp)
{
    return vuf_send_raw(fe, request, VHOST_USER_VERSION, NULL, 0, NULL, 0,
                        errp) &&
           vuf_read_reply(fe, request, value, sizeof(*value), NULL, errp);
}

bool vuf_request_set(VuFrontend *fe, uint32_t request, const void *payload,
                     size_t size, const int *fds, size_t nfds,
                     Error **errp)
{
    bool ack = vuf_has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_REPLY_ACK);
    uint32_t flags = VHOST_USER_VERSION |
                     (ack ? VHOST_USER_NEED_REPLY_MASK : 0);
    uint64_t status;

    if (!vuf_send_raw(fe, request, flags, payload, size, fds, nfds, errp)) {
        return false;
    }
    if (!ack) {
        return true;
    }
    if (!vuf_read_reply(fe, request, &status, sizeof(status), NULL, errp)) {
        return false;
    }
    if (status != 0) {
        error_setg(errp, "the back-end rejected %s (reply-ack status %"
                   PRIu64 ")", vuf_request_name(request), status);
        return false;
    }
    return true;
}

bool vuf_request_u64_set(VuFrontend *fe, uint32_t request, uint64_t value,
                         const int *fds, size_t nfds, Error **errp)
{
    return vuf_request_set(fe, request, &value, sizeof(value), fds, nfds, errp);
}

bool vuf_request_vring_state(VuFrontend *fe, uint32_t request,
                             unsigned index, unsigned num, Error **errp)
{
    VhostUserVringState s = { index, num };

    return vuf_request_set(fe, request, &s, sizeof(s), NULL, 0, errp);
}

bool vuf_check_alive(VuFrontend *fe, int timeout_ms)
{
    int64_t deadline = vuf_now_ms() + timeout_ms;
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
        int64_t left = deadline - vuf_now_ms();

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

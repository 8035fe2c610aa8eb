/*
 * vhost-user message transport over UNIX stream sockets.
 *
 * Theory of operation: the server's socket handlers run in the main loop,
 * which must not hang on a front-end.  The listening socket is non-blocking.
 * A client socket is blocking but is read only when the loop says it is
 * readable; vu_msg_recv() then reads one whole message (header, payload,
 * SCM_RIGHTS fds) and gives up when it is not complete within a time-out:
 * before each read after the first it poll()s for the time left, and
 * SO_RCVTIMEO bounds each read as a backstop.  Writes are bounded by
 * SO_SNDTIMEO.  Received fds are close-on-exec (MSG_CMSG_CLOEXEC); at most
 * VHOST_USER_MAX_FDS are kept, any others are closed and reported.
 *
 * The listening socket itself comes from util/unix-socket.c, as the QMP
 * monitor's does.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <glib.h>

#include "hw/virtio/vhost-user-protocol.h"
#include "util/clock.h"

/* ------------------------------------------------------------------------ */
/* Accepting                                                                 */

int vu_socket_accept(int listen_fd, int timeout_ms)
{
    struct timeval tv = {
        .tv_sec = timeout_ms / 1000,
        .tv_usec = (timeout_ms % 1000) * 1000,
    };
    int fd, err;

    /* The new fd is blocking: accept4() does not inherit O_NONBLOCK. */
    fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) {
        err = errno;
        close(fd);
        return -err;
    }
    return fd;
}

/* ------------------------------------------------------------------------ */
/* Messages                                                                  */

void vu_msg_close_fds(VuMsg *msg)
{
    for (unsigned i = 0; i < msg->nfds; i++) {
        if (msg->fds[i] >= 0) {
            close(msg->fds[i]);
        }
    }
    msg->nfds = 0;
}

/* Collect the SCM_RIGHTS fds of one recvmsg() into msg. */
static void vu_msg_collect_fds(VuMsg *msg, struct msghdr *mh)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
        size_t n;

        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
            continue;
        }
        n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;

            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (msg->nfds < VHOST_USER_MAX_FDS) {
                msg->fds[msg->nfds++] = fd;
            } else {
                close(fd);
                msg->fds_dropped = true;
            }
        }
    }
    if (mh->msg_flags & MSG_CTRUNC) {
        /* The kernel closed the fds that did not fit. */
        msg->fds_dropped = true;
    }
}

/*
 * Read exactly len bytes (and any fds sent with them) before deadline_ns.
 * Returns 1 when done, 0 on end of file before the first byte, -1 on an
 * error or time-out (why set).
 */
static int vu_msg_read(int fd, VuMsg *msg, void *buf, size_t len,
                       int64_t deadline_ns, char *why, size_t why_len)
{
    union {
        char buf[CMSG_SPACE(VHOST_USER_MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    size_t got = 0;

    while (got < len) {
        struct iovec iov = { (char *)buf + got, len - got };
        struct msghdr mh = {
            .msg_iov = &iov,
            .msg_iovlen = 1,
            .msg_control = ctl.buf,
            .msg_controllen = sizeof(ctl.buf),
        };
        int64_t left_ms = (deadline_ns - clock_now_ns()) / 1000000;
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        ssize_t n;

        /* Never wait past the deadline for the rest of a message. */
        if (left_ms <= 0 || poll(&pfd, 1, left_ms) == 0) {
            g_snprintf(why, why_len, "incomplete message (%zu of %zu bytes) "
                       "at the time-out", got, len);
            return -1;
        }
        n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            g_snprintf(why, why_len, "incomplete message (%zu of %zu bytes) "
                       "at the time-out", got, len);
            return -1;
        }
        if (n < 0) {
            g_snprintf(why, why_len, "cannot read from the socket: %s",
                       g_strerror(errno));
            return -1;
        }
        vu_msg_collect_fds(msg, &mh);
        if (n == 0) {
            if (got == 0 && buf == (void *)&msg->hdr) {
                return 0;
            }
            g_snprintf(why, why_len, "connection closed in the middle of a "
                       "message");
            return -1;
        }
        got += n;
    }
    return 1;
}

static int vu_msg_check_header(const VuMsg *msg, char *why, size_t why_len)
{
    const VhostUserHeader *h = &msg->hdr;

    if ((h->flags & VHOST_USER_VERSION_MASK) != VHOST_USER_VERSION) {
        g_snprintf(why, why_len, "request %" PRIu32 " with protocol version "
                   "%u, expected %u", h->request,
                   h->flags & VHOST_USER_VERSION_MASK, VHOST_USER_VERSION);
        return -1;
    }
    if (h->flags & VHOST_USER_REPLY_MASK) {
        g_snprintf(why, why_len, "request %" PRIu32 " has the reply flag "
                   "set", h->request);
        return -1;
    }
    if (h->size > VHOST_USER_MAX_PAYLOAD) {
        g_snprintf(why, why_len, "request %" PRIu32 " with a payload of %"
                   PRIu32 " bytes, more than %u", h->request, h->size,
                   VHOST_USER_MAX_PAYLOAD);
        return -1;
    }
    return 0;
}

int vu_msg_recv(int fd, VuMsg *msg, int timeout_ms, char *why,
                size_t why_len)
{
    int64_t deadline = clock_now_ns() + timeout_ms * (int64_t)1000000;
    int r;

    msg->nfds = 0;
    msg->fds_dropped = false;
    r = vu_msg_read(fd, msg, &msg->hdr, sizeof(msg->hdr), deadline,
                    why, why_len);
    if (r == 1 && vu_msg_check_header(msg, why, why_len) < 0) {
        r = -1;
    }
    if (r == 1 && msg->hdr.size) {
        r = vu_msg_read(fd, msg, &msg->payload, msg->hdr.size, deadline,
                        why, why_len);
        r = r == 0 ? -1 : r;
    }
    if (r != 1) {
        vu_msg_close_fds(msg);
    }
    return r;
}

bool vu_msg_send(int fd, const VuMsg *msg, char *why, size_t why_len)
{
    const char *hdr = (const char *)&msg->hdr;
    const char *payload = (const char *)&msg->payload;
    size_t hdr_len = sizeof(msg->hdr);
    size_t len = hdr_len + msg->hdr.size;
    size_t sent = 0;
    union {
        char buf[CMSG_SPACE(VHOST_USER_MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } ctl;

    g_assert(msg->hdr.size <= VHOST_USER_MAX_PAYLOAD);
    g_assert(msg->nfds <= VHOST_USER_MAX_FDS);
    /* Header and payload go out in one sendmsg() when they fit. */
    while (sent < len) {
        struct iovec iov[2];
        struct msghdr mh = { .msg_iov = iov };
        ssize_t n;

        if (sent == 0 && msg->nfds) {
            /* The fds travel with the first byte of the message. */
            struct cmsghdr *c;

            memset(&ctl, 0, sizeof(ctl));
            mh.msg_control = ctl.buf;
            mh.msg_controllen = CMSG_SPACE(msg->nfds * sizeof(int));
            c = CMSG_FIRSTHDR(&mh);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(msg->nfds * sizeof(int));
            memcpy(CMSG_DATA(c), msg->fds, msg->nfds * sizeof(int));
        }

        if (sent < hdr_len) {
            iov[0] = (struct iovec) { (void *)(hdr + sent), hdr_len - sent };
            iov[1] = (struct iovec) { (void *)payload, msg->hdr.size };
            mh.msg_iovlen = 2;
        } else {
            iov[0] = (struct iovec) { (void *)(payload + sent - hdr_len),
                                      len - sent };
            mh.msg_iovlen = 1;
        }
        n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            g_snprintf(why, why_len, "cannot send a reply: %s",
                       n < 0 ? g_strerror(errno) : "nothing written");
            return false;
        }
        sent += n;
    }
    return true;
}

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
 * The listening socket at a path is created with mode 0600 (the socket
 * inode's mode is set before bind() creates the file).  A socket file left
 * behind by a dead server (connect() is refused) is replaced; a live one,
 * or anything that is not a socket, is an error.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <glib.h>

#include "hw/virtio/vhost-user-protocol.h"
#include "util/clock.h"

#define VU_LISTEN_BACKLOG 16

/* ------------------------------------------------------------------------ */
/* Listening                                                                 */

static bool vu_socket_fill_addr(struct sockaddr_un *sun, const char *path,
                                Error **errp)
{
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    if (!*path || strlen(path) >= sizeof(sun->sun_path)) {
        error_setg(errp, "vhost-user socket path '%s' is empty or longer "
                   "than %zu bytes", path, sizeof(sun->sun_path) - 1);
        return false;
    }
    strcpy(sun->sun_path, path);
    return true;
}

/* A socket file at path that nobody listens on may be replaced. */
static bool vu_socket_remove_stale(const char *path,
                                   const struct sockaddr_un *sun, Error **errp)
{
    struct stat st;
    int fd, r, err;

    if (lstat(path, &st) < 0) {
        if (errno == ENOENT) {
            return true;
        }
        error_setg_errno(errp, errno, "Cannot check vhost-user socket path "
                         "'%s'", path);
        return false;
    }
    if (!S_ISSOCK(st.st_mode)) {
        error_setg(errp, "vhost-user socket path '%s' exists and is not a "
                   "socket", path);
        return false;
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        error_setg_errno(errp, errno, "Cannot create a UNIX socket");
        return false;
    }
    r = connect(fd, (const struct sockaddr *)sun, sizeof(*sun));
    err = errno;
    close(fd);
    if (r == 0) {
        error_setg(errp, "vhost-user socket path '%s' is in use by another "
                   "server", path);
        return false;
    }
    if (err != ECONNREFUSED) {
        error_setg_errno(errp, err, "Cannot check whether vhost-user socket "
                         "'%s' is in use", path);
        return false;
    }
    if (unlink(path) < 0 && errno != ENOENT) {
        error_setg_errno(errp, errno, "Cannot remove the stale vhost-user "
                         "socket '%s'", path);
        return false;
    }
    return true;
}

int vu_socket_listen_path(const char *path, struct stat *st, Error **errp)
{
    struct sockaddr_un sun;
    int fd;

    if (!vu_socket_fill_addr(&sun, path, errp) ||
        !vu_socket_remove_stale(path, &sun, errp)) {
        return -1;
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        error_setg_errno(errp, errno, "Cannot create a UNIX socket");
        return -1;
    }
    /*
     * bind() creates the file with the socket inode's mode minus the umask:
     * setting the mode first means others can never connect, not even
     * between bind() and chmod().
     */
    if (fchmod(fd, S_IRUSR | S_IWUSR) < 0 ||
        bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
        error_setg_errno(errp, errno, "Cannot bind vhost-user socket '%s'",
                         path);
        close(fd);
        return -1;
    }
    if (chmod(path, S_IRUSR | S_IWUSR) < 0 || stat(path, st) < 0 ||
        listen(fd, VU_LISTEN_BACKLOG) < 0) {
        error_setg_errno(errp, errno, "Cannot listen on vhost-user socket "
                         "'%s'", path);
        unlink(path);
        close(fd);
        return -1;
    }
    return fd;
}

static bool vu_socket_opt_is(int fd, int opt, int want)
{
    int val = -1;
    socklen_t len = sizeof(val);

    return getsockopt(fd, SOL_SOCKET, opt, &val, &len) == 0 && val == want;
}

int vu_socket_adopt_listen_fd(int fd, Error **errp)
{
    int dup_fd, flags;

    if (!vu_socket_opt_is(fd, SO_DOMAIN, AF_UNIX) ||
        !vu_socket_opt_is(fd, SO_TYPE, SOCK_STREAM) ||
        !vu_socket_opt_is(fd, SO_ACCEPTCONN, 1)) {
        error_setg(errp, "File descriptor %d is not a listening UNIX stream "
                   "socket", fd);
        return -1;
    }
    dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (dup_fd < 0) {
        error_setg_errno(errp, errno, "Cannot duplicate file descriptor %d",
                         fd);
        return -1;
    }
    /* accept() must not block if another process took the connection. */
    flags = fcntl(dup_fd, F_GETFL);
    if (flags < 0 || fcntl(dup_fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        error_setg_errno(errp, errno, "Cannot make file descriptor %d "
                         "non-blocking", fd);
        close(dup_fd);
        return -1;
    }
    return dup_fd;
}

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

    g_assert(msg->hdr.size <= VHOST_USER_MAX_PAYLOAD);
    /* Header and payload go out in one sendmsg() when they fit. */
    while (sent < len) {
        struct iovec iov[2];
        struct msghdr mh = { .msg_iov = iov };
        ssize_t n;

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

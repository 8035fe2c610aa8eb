/*
 * Listening UNIX stream sockets: create one at a path, or adopt an
 * inherited one.
 *
 * Theory of operation: a server's listening socket is non-blocking (its
 * accept handler runs in the main loop, and another process may take a
 * pending connection first) and close-on-exec.
 *
 * At a path, the socket must be private to our user from the start: the
 * socket inode's mode is set to 0600 before bind() creates the file (bind
 * applies the inode's mode minus the umask), then the file is chmod()ed
 * once more in case the file system did otherwise.  listen() comes right
 * after bind(), so that a client that sees the file appear can connect.
 * A file already at the path is replaced only if it is a socket whose
 * server is gone: connect() is refused (ECONNREFUSED).  A live server's
 * socket (connect() succeeds) or any other file is an error: never take
 * over or delete something that is not ours.  The file's device and inode
 * are returned so that tear-down removes the file only while it is still
 * ours.
 *
 * An inherited fd is checked with getsockopt() (domain, type, listening)
 * rather than trusted: the parent may have passed the wrong number.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/unix-socket.h"

static bool unix_socket_fill_addr(struct sockaddr_un *sun, const char *path,
                                  const char *what, Error **errp)
{
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    if (!*path || strlen(path) >= sizeof(sun->sun_path)) {
        error_setg(errp, "%s socket path '%s' is empty or longer than %zu "
                   "bytes", what, path, sizeof(sun->sun_path) - 1);
        return false;
    }
    memcpy(sun->sun_path, path, strlen(path) + 1);
    return true;
}

/* A socket file at path that nobody listens on may be replaced. */
static bool unix_socket_remove_stale(const char *path,
                                     const struct sockaddr_un *sun,
                                     const char *what, Error **errp)
{
    struct stat st;
    int fd, r, err;

    if (lstat(path, &st) < 0) {
        if (errno == ENOENT) {
            return true;
        }
        error_setg_errno(errp, errno, "Cannot check %s socket path '%s'",
                         what, path);
        return false;
    }
    if (!S_ISSOCK(st.st_mode)) {
        error_setg(errp, "%s socket path '%s' exists and is not a socket",
                   what, path);
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
        error_setg(errp, "%s socket path '%s' is in use by another server",
                   what, path);
        return false;
    }
    if (err != ECONNREFUSED) {
        error_setg_errno(errp, err, "Cannot check whether %s socket '%s' is "
                         "in use", what, path);
        return false;
    }
    if (unlink(path) < 0 && errno != ENOENT) {
        error_setg_errno(errp, errno, "Cannot remove the stale %s socket "
                         "'%s'", what, path);
        return false;
    }
    return true;
}

int unix_socket_listen_path(const char *path, const char *what,
                            struct stat *st, Error **errp)
{
    struct sockaddr_un sun;
    int fd;

    if (!unix_socket_fill_addr(&sun, path, what, errp) ||
        !unix_socket_remove_stale(path, &sun, what, errp)) {
        return -1;
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        error_setg_errno(errp, errno, "Cannot create a UNIX socket");
        return -1;
    }
    /*
     * The inode's mode before bind(): others can never connect, not even
     * between bind() and chmod().
     */
    if (fchmod(fd, S_IRUSR | S_IWUSR) < 0 ||
        bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
        error_setg_errno(errp, errno, "Cannot bind %s socket '%s'", what,
                         path);
        close(fd);
        return -1;
    }
    /* listen() first: a client that saw the file appear may connect. */
    if (listen(fd, UNIX_SOCKET_LISTEN_BACKLOG) < 0 ||
        chmod(path, S_IRUSR | S_IWUSR) < 0 || stat(path, st) < 0) {
        error_setg_errno(errp, errno, "Cannot listen on %s socket '%s'",
                         what, path);
        unlink(path);
        close(fd);
        return -1;
    }
    return fd;
}

static bool unix_socket_opt_is(int fd, int opt, int want)
{
    int val = -1;
    socklen_t len = sizeof(val);

    return getsockopt(fd, SOL_SOCKET, opt, &val, &len) == 0 && val == want;
}

int unix_socket_adopt_listen_fd(int fd, bool duplicate, Error **errp)
{
    int new_fd, flags;

    if (!unix_socket_opt_is(fd, SO_DOMAIN, AF_UNIX) ||
        !unix_socket_opt_is(fd, SO_TYPE, SOCK_STREAM) ||
        !unix_socket_opt_is(fd, SO_ACCEPTCONN, 1)) {
        error_setg(errp, "File descriptor %d is not a listening UNIX stream "
                   "socket", fd);
        return -1;
    }
    if (duplicate) {
        /* Above 2: never stdin, stdout or stderr, even if one is closed. */
        new_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (new_fd < 0) {
            error_setg_errno(errp, errno, "Cannot duplicate file descriptor "
                             "%d", fd);
            return -1;
        }
    } else {
        new_fd = fd;
    }
    /* accept() must not block if another process took the connection. */
    flags = fcntl(new_fd, F_GETFL);
    if (flags < 0 || fcntl(new_fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
        (!duplicate && fcntl(new_fd, F_SETFD, FD_CLOEXEC) < 0)) {
        error_setg_errno(errp, errno, "Cannot make file descriptor %d "
                         "non-blocking", fd);
        if (duplicate) {
            close(new_fd);
        }
        return -1;
    }
    return new_fd;
}

void unix_socket_unlink_if_same(const char *path, dev_t dev, ino_t ino)
{
    struct stat st;

    if (path && stat(path, &st) == 0 && st.st_dev == dev &&
        st.st_ino == ino) {
        unlink(path);
    }
}

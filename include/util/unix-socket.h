/*
 * Listening UNIX stream sockets, for the servers of the main loop (the
 * vhost-user servers and the QMP monitor).
 *
 * A server either creates its socket at a path or takes one inherited
 * from its parent as an fd.  Either way it gets a non-blocking,
 * close-on-exec listening fd; a socket created at a path is remembered by
 * its file's identity so that only that file is removed when the server
 * goes away (a newer server may have replaced it meanwhile).
 *
 * The functions touch only the file system and the fds they are given:
 * any thread.  Messages name the socket with the caller's label ("QMP",
 * "vhost-user"), so that a user knows which of several sockets failed.
 */
#ifndef SPINDLE_UTIL_UNIX_SOCKET_H
#define SPINDLE_UTIL_UNIX_SOCKET_H

#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>
#include "util/error.h"

/* The listen() backlog of the sockets created here. */
#define UNIX_SOCKET_LISTEN_BACKLOG 16

/*
 * Create a UNIX stream socket listening at path, with mode 0600 (from
 * before bind(): nobody else can connect at any time).  A socket file at
 * path that nobody listens on (connect() is refused) is replaced; a live
 * socket, anything that is not a socket, an empty path or one longer than
 * sockaddr_un allows is an error.  what names the socket in the messages,
 * e.g. "QMP" gives "QMP socket path '/x' exists and is not a socket".
 *
 * Returns the non-blocking, close-on-exec fd (the caller owns it) and
 * stores the file's identity in *st (for unix_socket_unlink_if_same()),
 * or returns -1 with errp set and nothing left behind.  Any thread.
 */
int unix_socket_listen_path(const char *path, const char *what,
                            struct stat *st, Error **errp);

/*
 * Check that fd (inherited from the parent) is a listening UNIX stream
 * socket and make it usable by a server of the loop: non-blocking and
 * close-on-exec.  With duplicate, the result is a new fd above 2 (the
 * caller keeps fd and owns both; O_NONBLOCK is shared with fd, as the
 * two share one open file); without, fd itself is returned, changed (the
 * caller hands it over).  Returns the fd to listen on, or -1 with errp
 * set (the caller still owns fd; no new fd is left open).  Does not check
 * that fd is open first: a closed fd is "not a listening UNIX stream
 * socket".  Any thread.
 */
int unix_socket_adopt_listen_fd(int fd, bool duplicate, Error **errp);

/*
 * Remove the socket file at path if it is still the one created by
 * unix_socket_listen_path() (the same device and inode as dev and ino
 * from its *st): a file someone put there since is left alone.  Errors
 * are ignored (this runs at tear-down).  Any thread.
 */
void unix_socket_unlink_if_same(const char *path, dev_t dev, ino_t ino);

#endif

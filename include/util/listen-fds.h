/*
 * Listening sockets passed by a service manager (systemd's LISTEN_FDS
 * protocol: sd_listen_fds(3)), found by the name its unit gave them
 * (FileDescriptorName=, passed in LISTEN_FDNAMES).
 *
 * Options that take an inherited socket (an export's addr.str, a
 * chardev's fd) accept a number, as before, or such a name.  The table of
 * passed sockets is filled once at start-up and keeps its fds open for the
 * life of the process: a user duplicates the one it looks up, so that an
 * export deleted and added again (QMP) finds the same socket under the
 * same name.
 *
 * Built without libsystemd the table stays empty and a name is refused
 * with a message saying so.
 *
 * Threads: main thread only.
 */
#ifndef SPINDLE_UTIL_LISTEN_FDS_H
#define SPINDLE_UTIL_LISTEN_FDS_H

#include <stdbool.h>
#include "util/error.h"

/*
 * Take the sockets passed to this process (LISTEN_FDS, LISTEN_FDNAMES and
 * LISTEN_PID naming this process; the variables are then removed from
 * the environment, so that children do not take them too).  Call once,
 * before anything else opens an fd.  Returns false with errp set if the
 * variables are malformed; with none set, or built without libsystemd, it
 * takes nothing and returns true.
 */
bool listen_fds_init(Error **errp);

/*
 * The fd that str names for parameter param ("addr.str", "fd"): a decimal
 * number is the fd of that number (as ever: the caller's to check); any
 * other string is the name of a passed socket.  *borrowed tells which:
 * true for a passed socket, whose fd stays the table's (duplicate it,
 * never close it); the socket is then marked used.  An unknown name, or
 * any name without libsystemd, returns -1 with errp set, listing the names
 * that were passed.
 */
int listen_fds_lookup(const char *param, const char *str, bool *borrowed,
                      Error **errp);

/*
 * The passed sockets no lookup has used, as "NAME (fd N), ..."; NULL if
 * every one was used (or none was passed).  Caller frees.
 */
char *listen_fds_describe_unused(void);

/* Close the passed sockets and empty the table (at exit). */
void listen_fds_cleanup(void);

#endif

/*
 * spindle-stat: a small blocking QMP client over a UNIX socket.
 *
 * Only what spindle-stat needs: connect, check the greeting, negotiate,
 * run a command without arguments and return its "return" member.  Events
 * that arrive between replies are skipped.  The greeting is awaited for
 * at most STAT_QMP_GREETING_TIMEOUT_S (a monitor greets at once: a socket
 * that stays silent is something else), each reply for at most
 * STAT_QMP_TIMEOUT_S.
 *
 * One thread (the tool's only one).
 */
#ifndef SPINDLE_STAT_QMP_H
#define SPINDLE_STAT_QMP_H

#include <stdbool.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "util/error.h"

#define STAT_QMP_GREETING_TIMEOUT_S 3
#define STAT_QMP_TIMEOUT_S 10

typedef struct StatQmp StatQmp;

/*
 * Connect to the QMP monitor listening on path, read its greeting and
 * send qmp_capabilities.  Returns the connection (free with
 * stat_qmp_close()), or NULL with errp set: the socket is not there or
 * refuses, or what answers is not a QMP monitor.
 */
StatQmp *stat_qmp_connect(const char *path, Error **errp);

/*
 * Run command (no arguments) and return its "return" member, which the
 * caller owns (json_node_unref()).  NULL with errp set when the monitor
 * went away, answered with an error or did not answer in time.
 */
JsonNode *stat_qmp_execute(StatQmp *q, const char *command, Error **errp);

/* Close the connection and free q (NULL is fine). */
void stat_qmp_close(StatQmp *q);

#endif

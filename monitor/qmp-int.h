/*
 * What the monitor/ files share among themselves (not part of the QMP
 * contract in include/monitor/qmp.h).  Main thread.
 */
#ifndef SPINDLE_MONITOR_QMP_INT_H
#define SPINDLE_MONITOR_QMP_INT_H

#include <stdbool.h>
#include "monitor/qmp.h"

/*
 * Spindle's version as QEMU's VersionInfo, for query-version and the
 * greeting: {"qemu": {"major": M, "minor": m, "micro": u},
 * "package": "spindle X.Y.Z"}.  A new node.
 */
JsonNode *qmp_version_info(void);

/*
 * A handler's "return" value from obj / arr, whose reference the new node
 * takes over (the caller must not unref it).  qmp_return_empty() is {}.
 * The caller owns the new node; qmp_dispatch() passes it to the server.
 */
JsonNode *qmp_return_object(JsonObject *obj);
JsonNode *qmp_return_array(JsonArray *arr);
JsonNode *qmp_return_empty(void);

/*
 * For a command whose one member is the optional boolean key: read it
 * into *out (untouched if absent) and reject any other member, as
 * qmp_arg_bool() and qmp_args_check() do.
 */
bool qmp_args_only_bool(JsonObject *args, const char *key, bool *out,
                        Error **errp);

/* The same for a command whose one member is the required string key
 * (borrowed from args into *out). */
bool qmp_args_only_str(JsonObject *args, const char *key, const char **out,
                       Error **errp);

/* The "class" of an error reply for err: "GenericError", ... (static). */
const char *qmp_error_class_name(const Error *err);

/*
 * Ask the daemon to stop, as "quit" does: the quit handler runs from a
 * bottom half in the main context (so that the reply to "quit" is sent
 * first), or at once if there is no main context.  False with errp set
 * if there is no quit handler.
 */
bool qmp_request_quit(Error **errp);

#endif

/*
 * QMP: the JSON monitor protocol of QEMU, served on UNIX sockets.
 *
 * A QmpServer listens on one socket (--chardev socket,...) and serves
 * every client that connects, each with its own state (several at once).
 * Protocol, as QEMU's (docs/qmp.md):
 *   1. on connect the server sends the greeting
 *        {"QMP": {"version": {"qemu": {...}, "package": "spindle X"},
 *                 "capabilities": []}}
 *   2. the client must first run {"execute": "qmp_capabilities"}; any other
 *      command before that gets a CommandNotFound error;
 *   3. then {"execute": NAME, "arguments": {...}, "id": ANY} gets
 *      {"return": VALUE, "id": ANY} or
 *      {"error": {"class": CLASS, "desc": TEXT}, "id": ANY};
 *   4. events {"event": NAME, "data": {...}, "timestamp": {"seconds": S,
 *      "microseconds": US}} go to every client past step 2.
 * Input is a stream of JSON objects (no separator needed); each is parsed
 * with json-glib.  Malformed JSON, a message over QMP_MAX_MESSAGE bytes or
 * nested deeper than QMP_MAX_NESTING, a non-object, unknown or ill-typed
 * members get an error reply; the connection stays open.  Replies and
 * events are one line each (pretty=on: indented, for people).
 *
 * Threads: everything here runs in the main thread (the main loop's
 * AioContext runs the sockets).  Command handlers run in the main thread
 * and may run nested event loops (aio_run_sync and friends).
 */
#ifndef SPINDLE_MONITOR_QMP_H
#define SPINDLE_MONITOR_QMP_H

#include <stdbool.h>
#include <stdint.h>
#include <json-glib/json-glib.h>
#include "util/aio.h"
#include "util/error.h"

/* Limits on one input message. */
#define QMP_MAX_MESSAGE  (1u << 20)     /* bytes */
#define QMP_MAX_NESTING  64             /* depth of objects and arrays */

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

/*
 * The error class a reply carries.  A handler's Error in the QMP_ERROR
 * domain with one of these codes gets that class; any other Error
 * (error_setg(): SPINDLE_ERROR) is a GenericError.
 */
#define QMP_ERROR (qmp_error_quark())
GQuark qmp_error_quark(void);

typedef enum QmpErrorClass {
    QMP_ERROR_CLASS_GENERIC,            /* "GenericError" */
    QMP_ERROR_CLASS_COMMAND_NOT_FOUND,  /* "CommandNotFound" */
    QMP_ERROR_CLASS_DEVICE_NOT_FOUND,   /* "DeviceNotFound" */
} QmpErrorClass;

/* error_setg() with a class. */
void qmp_error_set(Error **errp, QmpErrorClass cls, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);

/* ------------------------------------------------------------------------ */
/* Commands                                                                  */

/*
 * A command handler.  args is the "arguments" object (an empty object if
 * the client sent none; borrowed).  Returns the value of "return" (a new
 * JsonNode the caller frees: an empty object for commands that return
 * nothing, as QEMU's do), or NULL with errp set.  Main thread.
 */
typedef JsonNode *QmpCommandFunc(JsonObject *args, Error **errp);

/*
 * Register a command under name (a static string).  Registering a name
 * twice is a programming error (abort).  Main thread, before or after
 * servers exist.  The handlers' modules register theirs in
 * qmp_register_all_commands().
 */
void qmp_register_command(const char *name, QmpCommandFunc *fn);

/* Every registered command name, sorted (a new array of borrowed strings). */
GPtrArray *qmp_command_names(void);

/* Run command name with args (NULL: none) as a client would, without a
 * connection: for tests and internal use.  As QmpCommandFunc. */
JsonNode *qmp_dispatch(const char *name, JsonObject *args, Error **errp);

/*
 * The command tables of the monitor/ modules (each registers its own in
 * its qmp_register_*_commands()), all of them at once.  Idempotent.
 */
void qmp_register_all_commands(void);
void qmp_register_core_commands(void);      /* qmp-core-cmds.c */
void qmp_register_iothread_commands(void);  /* qmp-cmds-iothread.c */
void qmp_register_block_commands(void);     /* qmp-cmds-block.c */
void qmp_register_export_commands(void);    /* qmp-cmds-export.c */

/*
 * What "quit" does: set by the daemon (main.c) to stop its main loop the
 * way SIGTERM does.  The reply to "quit" is sent before the daemon shuts
 * down.  Without a hook, quit fails with a GenericError.
 */
void qmp_set_quit_handler(void (*fn)(void *opaque), void *opaque);

/* ------------------------------------------------------------------------ */
/* Arguments: QEMU's messages for missing, mistyped and unexpected members   */

/*
 * Each getter reads member key of args.  Missing and required: false with
 * "Parameter 'KEY' is missing".  Missing and optional: true, *out
 * untouched (set the default first; json_object_has_member() tells
 * whether it was given).
 * Wrong JSON type: false with "Invalid parameter type for 'KEY',
 * expected: string|integer|boolean|object|array".  Strings are borrowed
 * from args.  qmp_arg_int also checks min <= value <= max ("Parameter
 * 'KEY' expects a value between MIN and MAX").
 */
bool qmp_arg_str(JsonObject *args, const char *key, bool required,
                 const char **out, Error **errp);
bool qmp_arg_int(JsonObject *args, const char *key, bool required,
                 int64_t min, int64_t max, int64_t *out, Error **errp);
bool qmp_arg_bool(JsonObject *args, const char *key, bool required,
                  bool *out, Error **errp);
bool qmp_arg_object(JsonObject *args, const char *key, bool required,
                    JsonObject **out, Error **errp);

/*
 * Fail with "Parameter 'KEY' is unexpected" for the first member of args
 * not in the NULL-terminated list allowed.  Every handler calls it (or
 * checks members itself), so a typo is an error, not ignored.
 */
bool qmp_args_check(JsonObject *args, const char *const *allowed,
                    Error **errp);

/* ------------------------------------------------------------------------ */
/* Events                                                                    */

/*
 * Send event name with data (NULL: no "data" member; borrowed) to every
 * client of every server that has finished capabilities negotiation,
 * stamped with the wall-clock time.  Main thread.
 */
void qmp_event_emit(const char *name, JsonObject *data);

/* ------------------------------------------------------------------------ */
/* Servers                                                                   */

typedef struct QmpServer QmpServer;

typedef struct QmpServerConfig {
    const char *path;            /* UNIX socket to create (mode 0600), a
                                  * stale socket file is replaced ... */
    int listen_fd;               /* ... or, path NULL, an inherited
                                  * listening socket (the server takes it
                                  * if it succeeds, and closes it at free) */
    bool pretty;                 /* pretty=on: indented replies */
    const char *name;            /* the chardev id, for messages */
} QmpServerConfig;

/*
 * Listen and serve in ctx (the main loop's).  Errors: cannot bind, the
 * path exists and is not a socket, fd is not a listening UNIX socket.
 */
QmpServer *qmp_server_new(const QmpServerConfig *cfg, AioContext *ctx,
                          Error **errp);

/* Close every client, stop listening, remove the socket file the server
 * created, free.  Main thread. */
void qmp_server_free(QmpServer *s);

/* Clients connected right now (for tests and statistics). */
unsigned qmp_server_num_clients(const QmpServer *s);

/* Clients accepted since the server started, including those gone since
 * (wait=on: "a client has connected").  Main thread. */
uint64_t qmp_server_num_accepted(const QmpServer *s);

#endif

/*
 * QMP commands for exports: block-export-add, block-export-del,
 * query-block-exports, block-export-lun-add, block-export-lun-del and
 * block-export-resume; the BLOCK_IO_ERROR event.
 *
 * Theory of operation
 * -------------------
 * block-export-add takes QEMU's BlockExportOptions, which are what
 * --export takes in JSON form:
 *   {"type": "vhost-user-blk", "id": ID, "node-name": N,
 *    "addr": {"type": "unix", "path": P} (or {"type": "fd", "str": "N"}),
 *    "writable": B, "writethrough": B, "iothread": ID (or [IDS]),
 *    "fixed-iothread": B, "num-queues": N, "logical-block-size": N,
 *    "serial": S}
 *   {"type": "vhost-user-scsi", "id": ID, "addr": ..., "num-queues": N,
 *    "iothread": ..., "lun": [{"node-name": N, "writable": B, ...} or N]}
 * The arguments go through export_opts_parse() as JSON text, so a command
 * and the --export it mirrors are read by the same code (including the
 * list form of "iothread"), and export_create() checks every member:
 * unknown ones are errors naming them.  The export's socket runs in the
 * main loop (main_loop_get_context()).
 *
 * block-export-del is QEMU's: "mode": "safe" (the default) refuses while a
 * front-end is connected, "hard" disconnects it.  Deleting is synchronous
 * here (export_delete() drains, disconnects and removes the socket), so
 * BLOCK_EXPORT_DELETED is emitted before the command returns.
 *
 * query-block-exports gives QEMU's BlockExportInfo (the first node as
 * "node-name"; "shutting-down" is always false since deletion does not
 * outlive the command) plus Spindle's extras: every node served, the LUN
 * numbers (vhost-user-scsi), whether a front-end is connected, the
 * hand-over state (allow-inactive=on, whether the front-end runs and so
 * holds the nodes, and why its last start was refused, while it has not
 * run since), and each queue's counters.
 *
 * block-export-lun-add / -del are Spindle's (QEMU has no vhost-user-scsi
 * export): hot-plug a LUN into a running vhost-user-scsi export with the
 * members of a --export lun entry, or remove one (export_add_lun(),
 * export_del_lun(); the guest is told with a virtio-scsi event).
 *
 * block-export-resume is Spindle's: an export whose rerror / werror policy
 * stopped a queue (BLOCK_IO_ERROR with "action": "stop") retries the held
 * requests and goes on (export_resume()).  QEMU's "cont" resumes QEMU's
 * own devices and never reaches the daemon.  BLOCK_IO_ERROR has QEMU's
 * members ("device" is the export id, "node-name", "operation",
 * "action", "nospace", "reason") plus "id" (the export's, as in the
 * BLOCK_EXPORT_* events), "spindle-queue" (the virtqueue) and, for
 * vhost-user-scsi, "spindle-lun"; query-block-exports shows
 * "spindle-io-status": "stopped" while a queue is stopped.
 *
 * Threads: main thread only.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <glib.h>
#include <json-glib/json-glib.h>

#include "export/export.h"
#include "util/main-thread.h"
#include "qmp-int.h"
#include "monitor/qmp.h"
#include "util/opts.h"

/* The largest LUN number a command may name (SAM's flat space is 14
 * bits); export_add_lun() applies the device's own limit. */
#define QMP_LUN_MAX 16383

/* The export with "id" id, or NULL with QEMU's message. */
static Export *find_export(const char *id, Error **errp)
{
    Export *exp = export_find(id);

    if (!exp) {
        error_setg(errp, "Export '%s' is not found", id);
    }
    return exp;
}

/* ------------------------------------------------------------------------ */
/* block-export-add / block-export-del                                       */

static JsonNode *qmp_block_export_add(JsonObject *args, Error **errp)
{
    g_autoptr(JsonNode) root = NULL;
    g_autoptr(Opts) opts = NULL;
    g_autofree char *text = NULL;
    const char *type, *id;

    assert_main_thread();
    /* The QMP way for the two members every export has; export_create()
     * checks the rest (unknown members included). */
    if (!qmp_arg_str(args, "type", true, &type, errp) ||
        !qmp_arg_str(args, "id", true, &id, errp)) {
        return NULL;
    }
    root = json_node_init_object(json_node_alloc(), args);
    text = json_to_string(root, false);
    opts = export_opts_parse(text, errp);
    if (!opts || !export_create(opts, main_loop_get_context(), errp)) {
        return NULL;
    }
    return qmp_return_empty();
}

static JsonNode *qmp_block_export_del(JsonObject *args, Error **errp)
{
    static const char *const allowed[] = { "id", "mode", NULL };
    g_autoptr(JsonObject) data = NULL;
    const char *id, *mode = "safe";
    Export *exp;

    assert_main_thread();
    if (!qmp_arg_str(args, "id", true, &id, errp) ||
        !qmp_arg_str(args, "mode", false, &mode, errp) ||
        !qmp_args_check(args, allowed, errp)) {
        return NULL;
    }
    if (strcmp(mode, "safe") && strcmp(mode, "hard")) {
        error_setg(errp, "Parameter 'mode' does not accept value '%s' "
                   "(expected: safe, hard)", mode);
        return NULL;
    }
    exp = find_export(id, errp);
    if (!exp) {
        return NULL;
    }
    if (!strcmp(mode, "safe") && export_has_client(exp)) {
        error_setg(errp, "export '%s' still in use (use mode=hard to "
                   "disconnect the front-end)", id);
        return NULL;
    }
    data = json_object_new();
    json_object_set_string_member(data, "id", id);   /* id dies with exp */
    export_delete(exp);
    qmp_event_emit("BLOCK_EXPORT_DELETED", data);
    return qmp_return_empty();
}

/* ------------------------------------------------------------------------ */
/* query-block-exports                                                       */

static JsonArray *export_queue_info(Export *exp)
{
    JsonArray *arr = json_array_new();
    ExportQueueStats st;

    for (unsigned i = 0; export_get_queue_stats(exp, i, &st); i++) {
        JsonObject *q = json_object_new();

        if (st.iothread) {
            json_object_set_string_member(q, "iothread", st.iothread);
        } else {
            json_object_set_null_member(q, "iothread");
        }
        json_object_set_int_member(q, "requests", st.requests);
        json_object_set_int_member(q, "kicks", st.kicks);
        json_object_set_int_member(q, "polled", st.polled);
        json_object_set_int_member(q, "interrupts", st.interrupts);
        json_object_set_int_member(q, "interrupts-suppressed",
                                   st.interrupts_suppressed);
        json_array_add_object_element(arr, q);
    }
    return arr;
}

static void export_info(Export *exp, void *opaque)
{
    JsonArray *list = opaque;
    JsonObject *o = json_object_new();
    JsonArray *nodes = json_array_new();
    JsonArray *luns = json_array_new();
    unsigned n = export_get_num_nodes(exp);
    bool scsi = !strcmp(export_get_type(exp), "vhost-user-scsi");

    for (unsigned i = 0; i < n; i++) {
        int lun = export_get_nth_lun(exp, i);

        json_array_add_string_element(
            nodes, block_node_get_name(export_get_nth_node(exp, i)));
        if (lun >= 0) {
            json_array_add_int_element(luns, lun);
        }
    }

    json_object_set_string_member(o, "type", export_get_type(exp));
    json_object_set_string_member(o, "id", export_get_id(exp));
    /* QEMU's member is required; a SCSI export may be down to no LUN. */
    json_object_set_string_member(
        o, "node-name",
        n ? block_node_get_name(export_get_nth_node(exp, 0)) : "");
    json_object_set_boolean_member(o, "shutting-down", false);
    json_object_set_array_member(o, "spindle-nodes", nodes);
    if (scsi) {
        json_object_set_array_member(o, "spindle-luns", luns);
    } else {
        json_array_unref(luns);
    }
    json_object_set_boolean_member(o, "spindle-client-connected",
                                   export_has_client(exp));
    json_object_set_boolean_member(o, "spindle-allow-inactive",
                                   export_get_allow_inactive(exp));
    json_object_set_boolean_member(o, "spindle-running",
                                   export_is_running(exp));
    if (export_is_io_stopped(exp)) {
        json_object_set_string_member(o, "spindle-io-status", "stopped");
    }
    if (export_get_start_error(exp)) {
        json_object_set_string_member(o, "spindle-start-error",
                                      export_get_start_error(exp));
    }
    json_object_set_array_member(o, "spindle-queues", export_queue_info(exp));
    json_array_add_object_element(list, o);
}

static JsonNode *qmp_query_block_exports(JsonObject *args, Error **errp)
{
    static const char *const allowed[] = { NULL };
    JsonArray *arr;

    assert_main_thread();
    if (!qmp_args_check(args, allowed, errp)) {
        return NULL;
    }
    arr = json_array_new();
    export_foreach(export_info, arr);
    return qmp_return_array(arr);
}

/* ------------------------------------------------------------------------ */
/* block-export-lun-add / block-export-lun-del                               */

static JsonNode *qmp_block_export_lun_add(JsonObject *args, Error **errp)
{
    static const char *const allowed[] = {
        "id", "lun", "node-name", "writable", "serial", "wwn", "vendor",
        "product", "logical-block-size", "rerror", "werror", NULL,
    };
    g_autoptr(JsonObject) lun_obj = NULL;
    g_autoptr(Opts) opts = NULL;
    g_autoptr(GList) members = NULL;
    const char *id, *node_name;
    int64_t lun;
    Export *exp;

    assert_main_thread();
    if (!qmp_arg_str(args, "id", true, &id, errp) ||
        !qmp_arg_int(args, "lun", true, 0, QMP_LUN_MAX, &lun, errp) ||
        !qmp_arg_str(args, "node-name", true, &node_name, errp) ||
        !qmp_args_check(args, allowed, errp)) {
        return NULL;
    }
    exp = find_export(id, errp);
    if (!exp) {
        return NULL;
    }
    /* The LUN's own members, as a --export lun entry has them; their
     * types and values are checked there. */
    lun_obj = json_object_new();
    members = json_object_get_members(args);
    for (GList *m = members; m; m = m->next) {
        if (strcmp(m->data, "id")) {
            json_object_set_member(lun_obj, m->data,
                                   json_object_dup_member(args, m->data));
        }
    }
    opts = opts_new_from_object(lun_obj);
    if (!export_add_lun(exp, opts, errp)) {
        return NULL;
    }
    return qmp_return_empty();
}

static JsonNode *qmp_block_export_lun_del(JsonObject *args, Error **errp)
{
    static const char *const allowed[] = { "id", "lun", NULL };
    const char *id;
    int64_t lun;
    Export *exp;

    assert_main_thread();
    if (!qmp_arg_str(args, "id", true, &id, errp) ||
        !qmp_arg_int(args, "lun", true, 0, QMP_LUN_MAX, &lun, errp) ||
        !qmp_args_check(args, allowed, errp)) {
        return NULL;
    }
    exp = find_export(id, errp);
    if (!exp || !export_del_lun(exp, (unsigned)lun, errp)) {
        return NULL;
    }
    return qmp_return_empty();
}

/* ------------------------------------------------------------------------ */
/* block-export-resume and BLOCK_IO_ERROR                                    */

static JsonNode *qmp_block_export_resume(JsonObject *args, Error **errp)
{
    const char *id;
    Export *exp;

    assert_main_thread();
    if (!qmp_args_only_str(args, "id", &id, errp)) {
        return NULL;
    }
    exp = find_export(id, errp);
    if (!exp || !export_resume(exp, NULL, errp)) {
        return NULL;
    }
    return qmp_return_empty();
}

/* An export's queue stopped on an error (export_set_io_error_sink()). */
static void qmp_export_io_error(const VirtioIoError *e)
{
    g_autoptr(JsonObject) data = json_object_new();

    json_object_set_string_member(data, "device", e->export_id);
    json_object_set_string_member(data, "node-name", e->node_name);
    json_object_set_string_member(data, "operation",
                                  e->write ? "write" : "read");
    json_object_set_string_member(data, "action", "stop");
    json_object_set_boolean_member(data, "nospace", e->error == ENOSPC);
    json_object_set_string_member(data, "reason", g_strerror(e->error));
    json_object_set_string_member(data, "id", e->export_id);
    json_object_set_int_member(data, "spindle-queue", e->queue);
    if (e->lun >= 0) {
        json_object_set_int_member(data, "spindle-lun", e->lun);
    }
    qmp_event_emit("BLOCK_IO_ERROR", data);
}

/* ------------------------------------------------------------------------ */

/* The exports' connection events (export_set_event_sink()). */
static void qmp_export_event(const char *event, const char *id, int queue,
                             int requests)
{
    g_autoptr(JsonObject) data = json_object_new();

    json_object_set_string_member(data, "id", id);
    if (queue >= 0) {
        json_object_set_int_member(data, "queue", queue);
        json_object_set_int_member(data, "requests", requests);
    }
    qmp_event_emit(event, data);
}

void qmp_register_export_commands(void)
{
    export_set_event_sink(qmp_export_event);
    export_set_io_error_sink(qmp_export_io_error);
    qmp_register_command("block-export-add", qmp_block_export_add);
    qmp_register_command("block-export-del", qmp_block_export_del);
    qmp_register_command("query-block-exports", qmp_query_block_exports);
    qmp_register_command("block-export-lun-add", qmp_block_export_lun_add);
    qmp_register_command("block-export-lun-del", qmp_block_export_lun_del);
    qmp_register_command("block-export-resume", qmp_block_export_resume);
}

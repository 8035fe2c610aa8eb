/*
 * QMP dispatch: the command table, reply and error helpers, argument
 * helpers and the daemon's hooks (quit, main context).
 *
 * Theory of operation
 * -------------------
 * Commands live in one table, name -> handler, filled by the monitor/
 * modules at start-up (qmp_register_all_commands()).  qmp_dispatch() looks
 * a name up and calls its handler with the "arguments" object; the server
 * (qmp-server.c) turns the result into a reply and the Error, if any, into
 * an error reply whose class comes from the Error's domain and code
 * (QMP_ERROR codes; everything else is a GenericError).
 *
 * Handlers read their arguments with the qmp_arg_*() getters, which give
 * QEMU's messages for a missing or mistyped member, and qmp_args_check(),
 * which rejects members nobody reads.  Arguments come from clients: every
 * type is checked, nothing is trusted.
 *
 * Threads: everything here runs in the main thread (asserted when the
 * daemon has set the main context).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>
#include <glib.h>

#include "util/main-thread.h"
#include "qmp-int.h"

G_DEFINE_QUARK(spindle-qmp-error-quark, qmp_error)

static GHashTable *qmp_commands;     /* name (static) -> QmpCommandFunc * */

static void (*qmp_quit_fn)(void *opaque);
static void *qmp_quit_opaque;

/* ------------------------------------------------------------------------ */
/* Replies                                                                   */

JsonNode *qmp_return_object(JsonObject *obj)
{
    JsonNode *node = json_node_init_object(json_node_alloc(), obj);

    json_object_unref(obj);         /* the node holds its own reference */
    return node;
}

JsonNode *qmp_return_array(JsonArray *arr)
{
    JsonNode *node = json_node_init_array(json_node_alloc(), arr);

    json_array_unref(arr);
    return node;
}

JsonNode *qmp_return_empty(void)
{
    return qmp_return_object(json_object_new());
}

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

void qmp_error_set(Error **errp, QmpErrorClass cls, const char *fmt, ...)
{
    g_autofree char *msg = NULL;
    va_list ap;

    if (!errp) {
        return;
    }
    g_assert(*errp == NULL);
    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    *errp = g_error_new_literal(QMP_ERROR, cls, msg);
}

const char *qmp_error_class_name(const Error *err)
{
    if (err->domain == QMP_ERROR) {
        switch ((QmpErrorClass)err->code) {
        case QMP_ERROR_CLASS_GENERIC:
            return "GenericError";
        case QMP_ERROR_CLASS_COMMAND_NOT_FOUND:
            return "CommandNotFound";
        case QMP_ERROR_CLASS_DEVICE_NOT_FOUND:
            return "DeviceNotFound";
        }
    }
    return "GenericError";
}

/* ------------------------------------------------------------------------ */
/* The command table                                                         */

void qmp_register_command(const char *name, QmpCommandFunc *fn)
{
    assert_main_thread();
    g_assert(name && fn);
    if (!qmp_commands) {
        qmp_commands = g_hash_table_new(g_str_hash, g_str_equal);
    }
    if (g_hash_table_contains(qmp_commands, name)) {
        g_error("QMP command '%s' registered twice", name);
    }
    g_hash_table_insert(qmp_commands, (gpointer)name, (gpointer)fn);
}

static gint qmp_compare_names(gconstpointer a, gconstpointer b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

GPtrArray *qmp_command_names(void)
{
    GPtrArray *names = g_ptr_array_new();
    GHashTableIter iter;
    gpointer key;

    assert_main_thread();
    if (qmp_commands) {
        g_hash_table_iter_init(&iter, qmp_commands);
        while (g_hash_table_iter_next(&iter, &key, NULL)) {
            g_ptr_array_add(names, key);
        }
    }
    g_ptr_array_sort(names, qmp_compare_names);
    return names;
}

JsonNode *qmp_dispatch(const char *name, JsonObject *args, Error **errp)
{
    g_autoptr(JsonObject) empty = NULL;
    QmpCommandFunc *fn;
    Error *err = NULL;
    JsonNode *ret;

    assert_main_thread();
    fn = qmp_commands ? g_hash_table_lookup(qmp_commands, name) : NULL;
    if (!fn) {
        qmp_error_set(errp, QMP_ERROR_CLASS_COMMAND_NOT_FOUND,
                      "The command %s has not been found", name);
        return NULL;
    }
    if (!args) {
        empty = json_object_new();
        args = empty;
    }
    ret = fn(args, &err);
    if (!ret && !err) {
        /* A handler bug; the client still deserves an answer. */
        error_setg(&err, "Command %s failed without saying why", name);
    }
    if (err) {
        if (ret) {
            json_node_unref(ret);
        }
        error_propagate(errp, err);
        return NULL;
    }
    return ret;
}

/* ------------------------------------------------------------------------ */
/* The daemon's hooks                                                        */

void qmp_set_quit_handler(void (*fn)(void *opaque), void *opaque)
{
    assert_main_thread();
    qmp_quit_fn = fn;
    qmp_quit_opaque = opaque;
}

static void qmp_quit_bh(void *opaque)
{
    if (qmp_quit_fn) {
        qmp_quit_fn(qmp_quit_opaque);
    }
}

bool qmp_request_quit(Error **errp)
{
    assert_main_thread();
    if (!qmp_quit_fn) {
        error_setg(errp, "The quit command is not available: nothing here "
                   "can be stopped");
        return false;
    }
    if (main_loop_get_context()) {
        aio_bh_schedule_oneshot(main_loop_get_context(), qmp_quit_bh, NULL);
    } else {
        qmp_quit_fn(qmp_quit_opaque);
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Arguments                                                                 */

/*
 * The member key of args in *node, checked to be of type (a JSON value's
 * GType, or JSON_TYPE_OBJECT for an object; type_name for the message).
 * Missing: *node = NULL, and an error if required.
 */
static bool qmp_arg_typed(JsonObject *args, const char *key, bool required,
                          GType type, const char *type_name, JsonNode **node,
                          Error **errp)
{
    *node = args ? json_object_get_member(args, key) : NULL;
    if (!*node) {
        if (required) {
            error_setg(errp, "Parameter '%s' is missing", key);
            return false;
        }
        return true;
    }
    if (type == JSON_TYPE_OBJECT ? !JSON_NODE_HOLDS_OBJECT(*node) :
        (!JSON_NODE_HOLDS_VALUE(*node) ||
         json_node_get_value_type(*node) != type)) {
        error_setg(errp, "Invalid parameter type for '%s', expected: %s", key,
                   type_name);
        return false;
    }
    return true;
}

bool qmp_arg_str(JsonObject *args, const char *key, bool required,
                 const char **out, Error **errp)
{
    JsonNode *node;

    if (!qmp_arg_typed(args, key, required, G_TYPE_STRING, "string", &node,
                       errp)) {
        return false;
    }
    if (node) {
        *out = json_node_get_string(node);
    }
    return true;
}

bool qmp_arg_int(JsonObject *args, const char *key, bool required,
                 int64_t min, int64_t max, int64_t *out, Error **errp)
{
    JsonNode *node;
    int64_t val;

    /* json-glib keeps integers as G_TYPE_INT64 and 1.0 as a double. */
    if (!qmp_arg_typed(args, key, required, G_TYPE_INT64, "integer", &node,
                       errp)) {
        return false;
    }
    if (!node) {
        return true;
    }
    val = json_node_get_int(node);
    if (val < min || val > max) {
        error_setg(errp, "Parameter '%s' expects a value between %" PRId64
                   " and %" PRId64, key, min, max);
        return false;
    }
    *out = val;
    return true;
}

bool qmp_arg_bool(JsonObject *args, const char *key, bool required,
                  bool *out, Error **errp)
{
    JsonNode *node;

    if (!qmp_arg_typed(args, key, required, G_TYPE_BOOLEAN, "boolean", &node,
                       errp)) {
        return false;
    }
    if (node) {
        *out = json_node_get_boolean(node);
    }
    return true;
}

bool qmp_arg_object(JsonObject *args, const char *key, bool required,
                    JsonObject **out, Error **errp)
{
    JsonNode *node;

    if (!qmp_arg_typed(args, key, required, JSON_TYPE_OBJECT, "object",
                       &node, errp)) {
        return false;
    }
    if (node) {
        *out = json_node_get_object(node);
    }
    return true;
}

bool qmp_args_only_bool(JsonObject *args, const char *key, bool *out,
                        Error **errp)
{
    const char *const allowed[] = { key, NULL };

    return qmp_arg_bool(args, key, false, out, errp) &&
           qmp_args_check(args, allowed, errp);
}

bool qmp_args_only_str(JsonObject *args, const char *key, const char **out,
                       Error **errp)
{
    const char *const allowed[] = { key, NULL };

    return qmp_arg_str(args, key, true, out, errp) &&
           qmp_args_check(args, allowed, errp);
}

bool qmp_args_check(JsonObject *args, const char *const *allowed,
                    Error **errp)
{
    JsonObjectIter iter;
    const char *name;
    JsonNode *node;

    if (!args) {
        return true;
    }
    json_object_iter_init_ordered(&iter, args);
    while (json_object_iter_next_ordered(&iter, &name, &node)) {
        bool known = false;

        for (unsigned i = 0; allowed && allowed[i]; i++) {
            if (!strcmp(name, allowed[i])) {
                known = true;
                break;
            }
        }
        if (!known) {
            error_setg(errp, "Parameter '%s' is unexpected", name);
            return false;
        }
    }
    return true;
}

/*
 * The core QMP commands: qmp_capabilities, query-version, query-commands,
 * quit.
 *
 * Theory of operation: qmp_capabilities changes the state of the client
 * that sent it, which only the server knows; the server (qmp-server.c)
 * decides whether it may run and marks the client negotiated when it
 * succeeds.  The handler here only checks the arguments, and being in the
 * table makes query-commands list it.  quit replies {} and asks the
 * daemon to stop from a bottom half, so the reply goes out first.
 *
 * Threads: main thread.
 */
#include "config-host.h"

#include <stdio.h>
#include <glib.h>

#include "util/main-thread.h"
#include "qmp-int.h"

/* Spindle's version as QEMU's VersionInfo "qemu" member. */
static JsonNode *qmp_version_triple(void)
{
    int major = 0, minor = 0, micro = 0;
    g_autoptr(JsonBuilder) b = json_builder_new();

    if (sscanf(SPINDLE_VERSION, "%d.%d.%d", &major, &minor, &micro) < 1) {
        major = minor = micro = 0;
    }
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "major");
    json_builder_add_int_value(b, major);
    json_builder_set_member_name(b, "minor");
    json_builder_add_int_value(b, minor);
    json_builder_set_member_name(b, "micro");
    json_builder_add_int_value(b, micro);
    json_builder_end_object(b);
    return json_builder_get_root(b);
}

JsonNode *qmp_version_info(void)
{
    JsonObject *o = json_object_new();

    json_object_set_member(o, "qemu", qmp_version_triple());
    json_object_set_string_member(o, "package", "spindle " SPINDLE_VERSION);
    return qmp_return_object(o);
}

/*
 * qmp_capabilities [enable: [str]]: the server offers no capability, so
 * any entry is an error.
 */
static JsonNode *qmp_cmd_capabilities(JsonObject *args, Error **errp)
{
    static const char *const allowed[] = { "enable", NULL };
    JsonNode *enable;
    JsonArray *list;

    assert_main_thread();
    if (!qmp_args_check(args, allowed, errp)) {
        return NULL;
    }
    enable = json_object_get_member(args, "enable");
    if (enable) {
        if (!JSON_NODE_HOLDS_ARRAY(enable)) {
            error_setg(errp, "Invalid parameter type for 'enable', "
                       "expected: array");
            return NULL;
        }
        list = json_node_get_array(enable);
        for (guint i = 0; i < json_array_get_length(list); i++) {
            JsonNode *cap = json_array_get_element(list, i);

            if (!JSON_NODE_HOLDS_VALUE(cap) ||
                json_node_get_value_type(cap) != G_TYPE_STRING) {
                error_setg(errp, "Invalid parameter type for 'enable[%u]', "
                           "expected: string", i);
                return NULL;
            }
            error_setg(errp, "Capability '%s' not available",
                       json_node_get_string(cap));
            return NULL;
        }
    }
    return qmp_return_empty();
}

static JsonNode *qmp_cmd_query_version(JsonObject *args, Error **errp)
{
    assert_main_thread();
    if (!qmp_args_check(args, NULL, errp)) {
        return NULL;
    }
    return qmp_version_info();
}

/* [{"name": "block_resize"}, ...], sorted by name. */
static JsonNode *qmp_cmd_query_commands(JsonObject *args, Error **errp)
{
    g_autoptr(GPtrArray) names = NULL;
    JsonArray *list;

    assert_main_thread();
    if (!qmp_args_check(args, NULL, errp)) {
        return NULL;
    }
    names = qmp_command_names();
    list = json_array_sized_new(names->len);
    for (guint i = 0; i < names->len; i++) {
        JsonObject *o = json_object_new();

        json_object_set_string_member(o, "name",
                                      g_ptr_array_index(names, i));
        json_array_add_object_element(list, o);
    }
    return qmp_return_array(list);
}

static JsonNode *qmp_cmd_quit(JsonObject *args, Error **errp)
{
    assert_main_thread();
    if (!qmp_args_check(args, NULL, errp) || !qmp_request_quit(errp)) {
        return NULL;
    }
    return qmp_return_empty();
}

void qmp_register_core_commands(void)
{
    static bool done;

    assert_main_thread();
    if (done) {
        return;
    }
    done = true;
    qmp_register_command("qmp_capabilities", qmp_cmd_capabilities);
    qmp_register_command("query-version", qmp_cmd_query_version);
    qmp_register_command("query-commands", qmp_cmd_query_commands);
    qmp_register_command("quit", qmp_cmd_quit);
}

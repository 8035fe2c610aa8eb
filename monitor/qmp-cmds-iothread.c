/*
 * QMP commands for IOThreads: object-add, object-del, qom-set, qom-get and
 * query-iothreads.
 *
 * Theory of operation
 * -------------------
 * QEMU manages IOThreads as QOM objects under /objects; tools know those
 * command names and shapes, so Spindle answers them for the one object
 * type it has.  Each command is a thin layer over util/iothread.h:
 *
 *   object-add       {"qom-type": "iothread", "id": ID, PROP: VALUE...}
 *                    -> iothread_create() with the properties as --object
 *                    takes them (integers are JSON integers here, strings
 *                    JSON strings, as QEMU's QMP types them);
 *   object-del       {"id": ID} -> iothread_destroy(), refused while an
 *                    export or a block node still runs in the thread;
 *   qom-set/qom-get  {"path": "/objects/ID" or "ID", "property": NAME
 *                    [, "value": V]} -> iothread_set_property_int() /
 *                    iothread_set_property() / iothread_get_property_int()
 *                    / iothread_get_property().
 *                    The running thread picks a change up at its next loop
 *                    turn (iothread.c);
 *   query-iothreads  QEMU's IOThreadInfo members, plus "spindle-poll": the
 *                    context's poll statistics (aio_context_get_stats()),
 *                    the thread's CPU time and its poll policy.
 *
 * The properties, their types (JSON integer or string) and which are
 * read-only come from util/iothread.c's table, iothread_properties[].
 *
 * Throttle groups (util/throttle-group.h) are the other object type:
 * object-add hands their members to util/object.c, object-del, qom-set
 * and qom-get to the group's own functions, which read and write the
 * "limits" object and the x- properties.  Ids are unique across the two
 * types.
 * Every handler rejects members it does not know (qmp_args_check()).
 *
 * Threads: main thread only (QMP handlers run there).
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <glib.h>
#include <json-glib/json-glib.h>

#include "block/block.h"
#include "export/export.h"
#include "util/main-thread.h"
#include "qmp-int.h"
#include "monitor/qmp.h"
#include "util/iothread.h"
#include "util/keyval.h"
#include "util/object.h"
#include "util/throttle-group.h"

/* Where QEMU puts user-created objects in the QOM tree. */
#define QOM_OBJECTS_PREFIX "/objects/"

/* ------------------------------------------------------------------------ */
/* object-add / object-del                                                   */

/*
 * The properties of an object-add as the key=value list iothread_create()
 * takes, type-checked the QMP way (util/iothread.c's table gives each
 * property's type).  NULL with errp set on a bad member.
 */
static GPtrArray *object_add_props(JsonObject *args, Error **errp)
{
    g_autoptr(GPtrArray) props = g_ptr_array_new_with_free_func(
        keyval_pair_free);

    for (const IOThreadProperty *p = iothread_properties; p->name; p++) {
        int64_t i;
        const char *str;

        if (!p->set || !json_object_has_member(args, p->name)) {
            continue;
        }
        if (p->type == IOTHREAD_PROP_INT) {
            if (!qmp_arg_int(args, p->name, false, 0, INT64_MAX, &i, errp)) {
                return NULL;
            }
            keyval_append(props, p->name, g_strdup_printf("%" PRId64, i));
        } else {
            if (!qmp_arg_str(args, p->name, false, &str, errp)) {
                return NULL;
            }
            keyval_append(props, p->name, g_strdup(str));
        }
    }
    return g_steal_pointer(&props);
}

static JsonNode *qmp_object_add(JsonObject *args, Error **errp)
{
    g_autoptr(GPtrArray) props = NULL;
    g_autoptr(GPtrArray) allowed = g_ptr_array_new();
    const char *type, *id;

    assert_main_thread();
    if (qmp_arg_str(args, "qom-type", true, &type, NULL) &&
        !strcmp(type, THROTTLE_GROUP_TYPE)) {
        /* Its members are its own (util/throttle-group.c). */
        return object_add_json(args, errp) ? qmp_return_empty() : NULL;
    }
    g_ptr_array_add(allowed, (gpointer)"qom-type");
    g_ptr_array_add(allowed, (gpointer)"id");
    for (const IOThreadProperty *p = iothread_properties; p->name; p++) {
        if (p->set) {
            g_ptr_array_add(allowed, (gpointer)p->name);
        }
    }
    g_ptr_array_add(allowed, NULL);
    if (!qmp_arg_str(args, "qom-type", true, &type, errp) ||
        !iothread_check_type(type, errp) ||
        !qmp_arg_str(args, "id", true, &id, errp) ||
        !qmp_args_check(args, (const char *const *)allowed->pdata, errp)) {
        return NULL;
    }
    if (throttle_group_lookup(id)) {
        error_setg(errp, "iothread: id '%s' is already the id of a "
                   THROTTLE_GROUP_TYPE, id);
        return NULL;
    }
    props = object_add_props(args, errp);
    if (!props || !iothread_create(id, props, errp)) {
        return NULL;
    }
    return qmp_return_empty();
}

/*
 * Why iot cannot go away now, or NULL if it can: an export runs queues or
 * nodes in it, or (a safety net: exports move their nodes back when they
 * go) a block node still lives in its context.
 */
static char *iothread_busy_reason(IOThread *iot)
{
    AioContext *ctx = iothread_get_aio_context(iot);
    Export *exp = export_find_by_iothread(iot);
    g_autoptr(GPtrArray) nodes = NULL;

    if (exp) {
        return g_strdup_printf("IOThread '%s' is in use by export '%s'",
                               iothread_get_id(iot), export_get_id(exp));
    }
    nodes = block_node_list();
    for (guint i = 0; i < nodes->len; i++) {
        BlockNode *bs = g_ptr_array_index(nodes, i);

        if (block_node_get_aio_context(bs) == ctx) {
            return g_strdup_printf("IOThread '%s' is in use by block node "
                                   "'%s'", iothread_get_id(iot),
                                   block_node_get_name(bs));
        }
    }
    return NULL;
}

static JsonNode *qmp_object_del(JsonObject *args, Error **errp)
{
    g_autofree char *busy = NULL;
    const char *id;
    IOThread *iot;

    assert_main_thread();
    if (!qmp_args_only_str(args, "id", &id, errp)) {
        return NULL;
    }
    iot = iothread_lookup(id);
    if (!iot && throttle_group_lookup(id)) {
        return throttle_group_destroy(throttle_group_lookup(id), errp) ?
               qmp_return_empty() : NULL;
    }
    if (!iot) {
        error_setg(errp, "object '%s' not found", id);
        return NULL;
    }
    busy = iothread_busy_reason(iot);
    if (busy) {
        error_setg(errp, "%s", busy);
        return NULL;
    }
    iothread_destroy(iot);
    return qmp_return_empty();
}

/* ------------------------------------------------------------------------ */
/* qom-set / qom-get                                                         */

/*
 * The IOThread a QOM path names: "/objects/ID", or "ID" alone (QEMU
 * resolves a partial path when it matches one object only; every object
 * here is an IOThread under /objects).  DeviceNotFound otherwise.
 */
static IOThread *qom_resolve(const char *path, Error **errp)
{
    const char *id = path;
    IOThread *iot = NULL;

    if (g_str_has_prefix(path, QOM_OBJECTS_PREFIX)) {
        id = path + strlen(QOM_OBJECTS_PREFIX);
    }
    if (*id && !strchr(id, '/')) {
        iot = iothread_lookup(id);
    }
    if (!iot) {
        qmp_error_set(errp, QMP_ERROR_CLASS_DEVICE_NOT_FOUND,
                      "Device '%s' not found", path);
    }
    return iot;
}

/*
 * The throttle group that args' path names ("/objects/ID" or "ID"), or
 * NULL (then the path is resolved as an IOThread's, with its messages).
 */
static ThrottleGroup *qom_throttle_group(JsonObject *args)
{
    const char *path;

    if (!qmp_arg_str(args, "path", true, &path, NULL)) {
        return NULL;
    }
    if (g_str_has_prefix(path, QOM_OBJECTS_PREFIX)) {
        path += strlen(QOM_OBJECTS_PREFIX);
    }
    return throttle_group_lookup(path);
}

/* qom-set (set) or qom-get of a throttle group's property. */
static JsonNode *qom_throttle_group_prop(ThrottleGroup *tg, JsonObject *args,
                                         const char *const *allowed, bool set,
                                         Error **errp)
{
    const char *name;

    if (!qmp_arg_str(args, "property", true, &name, errp) ||
        !qmp_args_check(args, allowed, errp)) {
        return NULL;
    }
    if (!set) {
        return throttle_group_get(tg, name, errp);
    }
    if (!json_object_has_member(args, "value")) {
        error_setg(errp, "Parameter 'value' is missing");
        return NULL;
    }
    return throttle_group_set(tg, name, json_object_get_member(args, "value"),
                              errp) ? qmp_return_empty() : NULL;
}

/* The path and property of qom-get / qom-set. */
static IOThread *qom_args(JsonObject *args, const char *const *allowed,
                          const IOThreadProperty **prop, Error **errp)
{
    const char *path, *name;
    IOThread *iot;

    if (!qmp_arg_str(args, "path", true, &path, errp) ||
        !qmp_arg_str(args, "property", true, &name, errp) ||
        !qmp_args_check(args, allowed, errp)) {
        return NULL;
    }
    iot = qom_resolve(path, errp);
    *prop = iothread_property_find(name);
    if (iot && !*prop) {
        error_setg(errp, "Property 'iothread.%s' not found", name);
        return NULL;
    }
    return iot;
}

static JsonNode *qmp_qom_set(JsonObject *args, Error **errp)
{
    static const char *const allowed[] = {
        "path", "property", "value", NULL,
    };
    const IOThreadProperty *prop;
    IOThread *iot;
    bool ok;

    assert_main_thread();
    if (qom_throttle_group(args)) {
        return qom_throttle_group_prop(qom_throttle_group(args), args,
                                       allowed, true, errp);
    }
    iot = qom_args(args, allowed, &prop, errp);
    if (!iot) {
        return NULL;
    }
    if (!json_object_has_member(args, "value")) {
        error_setg(errp, "Parameter 'value' is missing");
        return NULL;
    }
    if (!prop->set) {
        error_setg(errp, "Property 'iothread.%s' is read-only", prop->name);
        return NULL;
    }
    if (prop->type == IOTHREAD_PROP_INT) {
        int64_t v;

        if (!qmp_arg_int(args, "value", true, 0, INT64_MAX, &v, errp)) {
            error_prepend(errp, "Property 'iothread.%s': ", prop->name);
            return NULL;
        }
        ok = iothread_set_property_int(iot, prop->name, v, errp);
    } else {
        const char *v;

        ok = qmp_arg_str(args, "value", true, &v, errp) &&
             iothread_set_property(iot, prop->name, v, errp);
    }
    return ok ? qmp_return_empty() : NULL;
}

static JsonNode *qmp_qom_get(JsonObject *args, Error **errp)
{
    static const char *const allowed[] = { "path", "property", NULL };
    const IOThreadProperty *prop;
    g_autofree char *str = NULL;
    IOThread *iot;
    int64_t v;

    assert_main_thread();
    if (qom_throttle_group(args)) {
        return qom_throttle_group_prop(qom_throttle_group(args), args,
                                       allowed, false, errp);
    }
    iot = qom_args(args, allowed, &prop, errp);
    if (!iot) {
        return NULL;
    }
    if (prop->type == IOTHREAD_PROP_INT) {
        return iothread_get_property_int(iot, prop->name, &v, errp) ?
               json_node_init_int(json_node_alloc(), v) : NULL;
    }
    str = iothread_get_property(iot, prop->name, errp);
    return str ? json_node_init_string(json_node_alloc(), str) : NULL;
}

/* ------------------------------------------------------------------------ */
/* query-iothreads                                                           */

/* One entry per pollable handler of the thread: its window and counters. */
static JsonArray *iothread_handlers_info(AioContext *ctx)
{
    g_autofree AioHandlerWindow *w = NULL;
    JsonArray *arr = json_array_new();
    int n = aio_context_get_handler_windows(ctx, NULL, 0);

    /* Handlers may come and go between the two calls: ask until it fits. */
    for (;;) {
        int got;

        w = g_renew(AioHandlerWindow, w, MAX(n, 1));
        got = aio_context_get_handler_windows(ctx, w, n);
        if (got <= n) {
            n = got;
            break;
        }
        n = got;
    }
    for (int i = 0; i < n; i++) {
        JsonObject *h = json_object_new();

        json_object_set_string_member(h, "name", w[i].name);
        json_object_set_int_member(h, "window-ns", w[i].poll_ns);
        json_object_set_int_member(h, "events", w[i].events);
        json_object_set_int_member(h, "poll-hits", w[i].poll_hits);
        json_object_set_int_member(h, "poll-misses", w[i].poll_misses);
        json_object_set_int_member(h, "window-changes", w[i].window_changes);
        json_object_set_int_member(h, "last-change-event",
                                   w[i].last_change_event);
        json_object_set_int_member(h, "last-change-ns", w[i].last_change_ns);
        json_object_set_boolean_member(h, "active", w[i].active);
        json_object_set_boolean_member(h, "pending", w[i].phase != 0);
        json_array_add_object_element(arr, h);
    }
    return arr;
}

/* A counter of AioPollStats as a member of "spindle-poll". */
typedef struct PollStatMember {
    const char *name;
    size_t offset;               /* of an int64_t or uint64_t */
} PollStatMember;

/* The counters before "cpu-ns" and "policy" in "spindle-poll" ... */
static const PollStatMember poll_stats_head[] = {
    { "window-ns", offsetof(AioPollStats, poll_ns) },
    { "turns", offsetof(AioPollStats, turns) },
    { "poll-hits", offsetof(AioPollStats, poll_hits) },
    { "poll-misses", offsetof(AioPollStats, poll_misses) },
    { "wakeups", offsetof(AioPollStats, wakeups) },
    { "poll-time-ns", offsetof(AioPollStats, poll_time_ns) },
    { "block-time-ns", offsetof(AioPollStats, block_time_ns) },
    { "grows", offsetof(AioPollStats, grows) },
    { "shrinks", offsetof(AioPollStats, shrinks) },
    { "dispatches", offsetof(AioPollStats, dispatches) },
    { "bhs", offsetof(AioPollStats, bhs) },
    { "timers", offsetof(AioPollStats, timers) },
    { "naps", offsetof(AioPollStats, naps) },
};

/* ... and after them (the member order is part of the output). */
static const PollStatMember poll_stats_tail[] = {
    { "block-cpu-ns", offsetof(AioPollStats, block_cpu_ns) },
    { "wake-late-ns", offsetof(AioPollStats, wake_late_ns) },
    { "budget-ns", offsetof(AioPollStats, budget_ns) },
};

static void poll_stats_add(JsonObject *o, const AioPollStats *st,
                           const PollStatMember *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        /* int64_t may read a uint64_t: its signed counterpart. */
        const int64_t *v = (const int64_t *)((const char *)st + m[i].offset);

        json_object_set_int_member(o, m[i].name, *v);
    }
}

static JsonObject *iothread_poll_info(IOThread *iot, Error **errp)
{
    g_autofree char *policy = iothread_get_property(iot, "poll-policy", errp);
    AioContext *ctx = iothread_get_aio_context(iot);
    JsonObject *o;
    AioPollStats st;

    if (!policy) {
        return NULL;
    }
    aio_context_get_stats(ctx, &st);
    o = json_object_new();
    poll_stats_add(o, &st, poll_stats_head, G_N_ELEMENTS(poll_stats_head));
    json_object_set_int_member(o, "cpu-ns", iothread_get_cpu_ns(iot));
    json_object_set_string_member(o, "policy", policy);
    poll_stats_add(o, &st, poll_stats_tail, G_N_ELEMENTS(poll_stats_tail));
    json_object_set_array_member(o, "handlers", iothread_handlers_info(ctx));
    return o;
}

static JsonObject *iothread_info(IOThread *iot, Error **errp)
{
    g_autoptr(JsonObject) o = json_object_new();
    JsonObject *poll;

    json_object_set_string_member(o, "id", iothread_get_id(iot));
    /* thread-id, then the integer properties (QEMU's IOThreadInfo). */
    for (const IOThreadProperty *p = iothread_properties; p->name; p++) {
        int64_t v;

        if (p->type != IOTHREAD_PROP_INT) {
            continue;
        }
        if (!iothread_get_property_int(iot, p->name, &v, errp)) {
            return NULL;
        }
        json_object_set_int_member(o, p->name, v);
    }
    poll = iothread_poll_info(iot, errp);
    if (!poll) {
        return NULL;
    }
    json_object_set_object_member(o, "spindle-poll", poll);
    return g_steal_pointer(&o);
}

static JsonNode *qmp_query_iothreads(JsonObject *args, Error **errp)
{
    static const char *const allowed[] = { NULL };
    g_autoptr(GPtrArray) list = NULL;
    JsonArray *arr;

    assert_main_thread();
    if (!qmp_args_check(args, allowed, errp)) {
        return NULL;
    }
    list = iothread_list();
    arr = json_array_new();
    for (guint i = 0; i < list->len; i++) {
        JsonObject *o = iothread_info(g_ptr_array_index(list, i), errp);

        if (!o) {
            json_array_unref(arr);
            return NULL;
        }
        json_array_add_object_element(arr, o);
    }
    return qmp_return_array(arr);
}

/* ------------------------------------------------------------------------ */

void qmp_register_iothread_commands(void)
{
    qmp_register_command("object-add", qmp_object_add);
    qmp_register_command("object-del", qmp_object_del);
    qmp_register_command("qom-set", qmp_qom_set);
    qmp_register_command("qom-get", qmp_qom_get);
    qmp_register_command("query-iothreads", qmp_query_iothreads);
}

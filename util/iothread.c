/*
 * IOThread: a thread that runs one AioContext.
 *
 * The thread owns its context: it makes itself the home thread, then calls
 * aio_poll(ctx, true) until iothread_destroy() sets `stopping` and wakes it
 * with aio_notify().  Before it exits it runs, once, the BHs pending at that
 * moment, so a request handed to it just before the stop is not dropped
 * (and a BH that keeps rescheduling itself cannot keep the thread alive).
 *
 * The properties are described once, in the table iothread_properties[]:
 * name, type, help text and three hooks, set (validate a string and store
 * it in the configuration), get, and apply (push the stored value into the
 * running thread).  The command line (--object, its help), the QMP
 * commands (object-add, qom-set, qom-get, query-iothreads) and the
 * functions below all go by the table.
 *
 * Properties are owned by the main thread, which validates them and pushes
 * them into the running thread without sharing a writable field:
 *  - poll-max-ns, poll-grow, poll-shrink, poll-weight, aio-max-batch:
 *    atomic stores into the context, read by the loop once per turn;
 *  - cpu-affinity: pthread_setaffinity_np() on the running thread (or the
 *    creation attribute, so the thread never runs on a wrong CPU);
 *  - poll-policy: switched inside the thread through aio_run_sync().
 * A failed set or apply restores the previous configuration.
 *
 * --object (iothread_create_from_option()) takes key=value or JSON text,
 * turns either into one key=value list and creates from that.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <glib.h>
#include <json-glib/json-glib.h>

#include "util/cutils.h"
#include "util/iothread.h"
#include "util/main-thread.h"
#include "util/keyval.h"
#include "util/object.h"
#include "util/opts.h"

/* The one object type --object and object-add know. */
#define IOTHREAD_TYPE "iothread"

typedef struct IOThreadConfig {
    AioPollParams poll;
    int64_t aio_max_batch;
    char *cpu_affinity;                 /* NULL: inherited */
    cpu_set_t cpus;                     /* valid if cpu_affinity */
    const AioPollPolicyOps *policy;
} IOThreadConfig;

struct IOThread {
    char *id;
    AioContext *ctx;
    pthread_t thread;
    pid_t tid;
    _Atomic bool stopping;
    IOThreadConfig cfg;                 /* main thread only */

    GMutex start_lock;
    GCond start_cond;
    bool started;
};

/* Every IOThread by creation order; main thread only. */
static GPtrArray *iothreads;

IOThread *iothread_lookup(const char *id)
{
    assert_main_thread();
    for (guint i = 0; iothreads && i < iothreads->len; i++) {
        IOThread *iot = g_ptr_array_index(iothreads, i);

        if (!strcmp(iot->id, id)) {
            return iot;
        }
    }
    return NULL;
}

IOThread *iothread_find_by_context(AioContext *ctx)
{
    assert_main_thread();
    for (guint i = 0; iothreads && i < iothreads->len; i++) {
        IOThread *iot = g_ptr_array_index(iothreads, i);

        if (iot->ctx == ctx) {
            return iot;
        }
    }
    return NULL;
}

GPtrArray *iothread_list(void)
{
    GPtrArray *list = g_ptr_array_new();

    assert_main_thread();
    for (guint i = 0; iothreads && i < iothreads->len; i++) {
        g_ptr_array_add(list, g_ptr_array_index(iothreads, i));
    }
    return list;
}

/* ------------------------------------------------------------------------ */
/* CPU lists                                                                 */

static void cpulist_error(Error **errp, const char *list, const char *why,
                          long ncpus)
{
    error_setg(errp, "Parameter 'cpu-affinity' expects a CPU list such as "
               "'0-1:3' with CPUs from 0 to %ld; '%s' is not valid: %s",
               ncpus - 1, list, why);
}

/* One CPU number of a list: digits only, below ncpus. */
static bool cpulist_parse_cpu(const char *s, long ncpus, long *out)
{
    char *end;
    unsigned long v;

    if (!g_ascii_isdigit(*s)) {
        return false;
    }
    errno = 0;
    v = strtoul(s, &end, 10);
    if (*end || errno == ERANGE || v >= (unsigned long)ncpus) {
        return false;
    }
    *out = (long)v;
    return true;
}

/* Parse "0-3:8" or "0-3,8" into set.  "" means every CPU of the machine. */
static bool cpulist_parse(const char *list, cpu_set_t *set, Error **errp)
{
    long ncpus = MIN(sysconf(_SC_NPROCESSORS_CONF), CPU_SETSIZE);
    g_auto(GStrv) items = g_strsplit_set(list, ",:", -1);

    CPU_ZERO(set);
    if (!*list) {
        for (long c = 0; c < ncpus; c++) {
            CPU_SET(c, set);
        }
        return true;
    }
    for (int i = 0; items[i]; i++) {
        g_auto(GStrv) range = g_strsplit(items[i], "-", 2);
        g_autofree char *why = NULL;
        long lo, hi;

        if (!*items[i]) {
            cpulist_error(errp, list, "empty element", ncpus);
            return false;
        }
        if (!cpulist_parse_cpu(range[0], ncpus, &lo) ||
            (range[1] && !cpulist_parse_cpu(range[1], ncpus, &hi))) {
            why = g_strdup_printf("element '%s' is not a CPU number or range",
                                  items[i]);
            cpulist_error(errp, list, why, ncpus);
            return false;
        }
        if (!range[1]) {
            hi = lo;
        } else if (hi < lo) {
            why = g_strdup_printf("range '%s' ends before it starts", items[i]);
            cpulist_error(errp, list, why, ncpus);
            return false;
        }
        for (long c = lo; c <= hi; c++) {
            CPU_SET(c, set);
        }
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Properties                                                                */

/* An integer property's field in cfg. */
static int64_t *iothread_int_field(IOThreadConfig *cfg,
                                   const IOThreadProperty *prop)
{
    return (int64_t *)((char *)cfg + prop->offset);
}

static bool iothread_set_int(IOThread *iot, const IOThreadProperty *prop,
                             const char *value, Error **errp)
{
    int64_t v;

    if (!parse_int64_in_range(prop->name, value, 0, prop->max, &v, errp)) {
        return false;
    }
    *iothread_int_field(&iot->cfg, prop) = v;
    return true;
}

static int64_t iothread_get_int(const IOThread *iot,
                                const IOThreadProperty *prop)
{
    return *(const int64_t *)((const char *)&iot->cfg + prop->offset);
}

static bool iothread_apply_poll_params(IOThread *iot, Error **errp)
{
    aio_context_set_poll_params(iot->ctx, &iot->cfg.poll);
    return true;
}

static bool iothread_apply_aio_max_batch(IOThread *iot, Error **errp)
{
    aio_context_set_aio_max_batch(iot->ctx, iot->cfg.aio_max_batch);
    return true;
}

static bool iothread_set_cpu_affinity(IOThread *iot,
                                      const IOThreadProperty *prop,
                                      const char *value, Error **errp)
{
    cpu_set_t set;

    if (!cpulist_parse(value, &set, errp)) {
        return false;
    }
    iot->cfg.cpus = set;
    g_free(iot->cfg.cpu_affinity);
    iot->cfg.cpu_affinity = g_strdup(value);
    return true;
}

static char *iothread_get_cpu_affinity(const IOThread *iot,
                                       const IOThreadProperty *prop)
{
    return g_strdup(iot->cfg.cpu_affinity ? iot->cfg.cpu_affinity : "");
}

static bool iothread_apply_cpu_affinity(IOThread *iot, Error **errp)
{
    int r = pthread_setaffinity_np(iot->thread, sizeof(iot->cfg.cpus),
                                   &iot->cfg.cpus);

    if (r) {
        error_setg_errno(errp, r, "Parameter 'cpu-affinity': cannot run "
                         "on CPUs '%s'", iot->cfg.cpu_affinity);
        return false;
    }
    return true;
}

static bool iothread_set_poll_policy(IOThread *iot,
                                     const IOThreadProperty *prop,
                                     const char *value, Error **errp)
{
    const AioPollPolicyOps *ops = aio_poll_policy_find(value);

    if (!ops) {
        error_setg(errp, "Parameter 'poll-policy': unknown policy '%s' "
                   "(available: %s)", value, aio_poll_policy_names());
        return false;
    }
    iot->cfg.policy = ops;
    return true;
}

static char *iothread_get_poll_policy(const IOThread *iot,
                                      const IOThreadProperty *prop)
{
    return g_strdup(iot->cfg.policy->name);
}

static void iothread_set_policy_bh(void *opaque)
{
    IOThread *iot = opaque;

    aio_context_set_poll_policy(iot->ctx, iot->cfg.policy);
}

static bool iothread_apply_poll_policy(IOThread *iot, Error **errp)
{
    aio_run_sync(iot->ctx, iothread_set_policy_bh, iot);
    return true;
}

static int64_t iothread_get_tid(const IOThread *iot,
                                const IOThreadProperty *prop)
{
    return iot->tid;
}

/*
 * The one description of the properties: the command line (--object and
 * its help), object-add, qom-set/qom-get and query-iothreads all go by it.
 * The order is that of query-iothreads' members and of the help.  An
 * integer property is a field of IOThreadConfig (offset) from 0 to max.
 */
const IOThreadProperty iothread_properties[] = {
    {
        .name = "thread-id", .type = IOTHREAD_PROP_INT,
        .doc = "the kernel's id of the thread (read-only)",
        .get_int = iothread_get_tid,
    }, {
        .name = "poll-max-ns", .type = IOTHREAD_PROP_INT, .arg = "<int>",
        .doc = "longest busy-poll window, ns (default 32768; 0: off)",
        .set = iothread_set_int, .get_int = iothread_get_int,
        .apply = iothread_apply_poll_params,
        .offset = offsetof(IOThreadConfig, poll.max_ns), .max = INT64_MAX,
    }, {
        .name = "poll-grow", .type = IOTHREAD_PROP_INT, .arg = "<int>",
        .doc = "qemu-*: window growth factor (default 0: double)",
        .set = iothread_set_int, .get_int = iothread_get_int,
        .apply = iothread_apply_poll_params,
        .offset = offsetof(IOThreadConfig, poll.grow), .max = INT64_MAX,
    }, {
        .name = "poll-shrink", .type = IOTHREAD_PROP_INT, .arg = "<int>",
        .doc = "qemu-*: shrink divisor (default 0: qemu-classic\n"
               "drops to 0, qemu-weighted halves)",
        .set = iothread_set_int, .get_int = iothread_get_int,
        .apply = iothread_apply_poll_params,
        .offset = offsetof(IOThreadConfig, poll.shrink), .max = INT64_MAX,
    }, {
        /* A shift: QEMU's range, 0 meaning the default. */
        .name = "poll-weight", .type = IOTHREAD_PROP_INT, .arg = "<int>",
        .doc = "qemu-weighted: averaging shift 0-63 (0: 3)",
        .set = iothread_set_int, .get_int = iothread_get_int,
        .apply = iothread_apply_poll_params,
        .offset = offsetof(IOThreadConfig, poll.weight),
        .max = AIO_POLL_WEIGHT_MAX,
    }, {
        .name = "aio-max-batch", .type = IOTHREAD_PROP_INT, .arg = "<int>",
        .doc = "requests submitted at once (default 0: engine's)",
        .set = iothread_set_int, .get_int = iothread_get_int,
        .apply = iothread_apply_aio_max_batch,
        .offset = offsetof(IOThreadConfig, aio_max_batch), .max = INT64_MAX,
    }, {
        .name = "cpu-affinity", .type = IOTHREAD_PROP_STR, .arg = "<cpus>",
        .doc = "CPUs the thread may run on, e.g. 2-3:6",
        .set = iothread_set_cpu_affinity,
        .get_str = iothread_get_cpu_affinity,
        .apply = iothread_apply_cpu_affinity,
    }, {
        .name = "poll-policy", .type = IOTHREAD_PROP_STR, .arg = "<name>",
        .doc = "predictive (default), fixed (spin poll-max-ns\n"
               "every turn), qemu-classic (\"adaptive\"),\n"
               "qemu-weighted (docs/iothreads.md)",
        .set = iothread_set_poll_policy,
        .get_str = iothread_get_poll_policy,
        .apply = iothread_apply_poll_policy,
    },
    { .name = NULL },
};

const IOThreadProperty *iothread_property_find(const char *name)
{
    for (const IOThreadProperty *p = iothread_properties; p->name; p++) {
        if (!strcmp(p->name, name)) {
            return p;
        }
    }
    return NULL;
}

static void iothread_unknown_property(Error **errp, const char *name)
{
    g_autoptr(GString) valid = g_string_new(NULL);

    for (const IOThreadProperty *p = iothread_properties; p->name; p++) {
        if (p->set) {
            g_string_append_printf(valid, "%s%s", valid->len ? ", " : "",
                                   p->name);
        }
    }
    error_setg(errp, "Property '%s' not found (iothread properties: %s)",
               name, valid->str);
}

/* The property name that may be set, or NULL with errp set. */
static const IOThreadProperty *iothread_settable(const char *name,
                                                 Error **errp)
{
    const IOThreadProperty *prop = iothread_property_find(name);

    if (!prop || !prop->set) {
        iothread_unknown_property(errp, name);
        return NULL;
    }
    return prop;
}

bool iothread_set_property(IOThread *iot, const char *name, const char *value,
                           Error **errp)
{
    const IOThreadProperty *prop = iothread_settable(name, errp);
    IOThreadConfig old = iot->cfg;
    char *old_affinity = g_strdup(old.cpu_affinity);

    assert_main_thread();
    if (!prop || !prop->set(iot, prop, value, errp) ||
        !prop->apply(iot, errp)) {
        g_free(iot->cfg.cpu_affinity);
        iot->cfg = old;
        iot->cfg.cpu_affinity = old_affinity;
        error_prepend(errp, "iothread '%s': ", iot->id);
        return false;
    }
    g_free(old_affinity);
    return true;
}

bool iothread_set_property_int(IOThread *iot, const char *name, int64_t value,
                               Error **errp)
{
    const IOThreadProperty *prop = iothread_settable(name, errp);
    g_autofree char *str = g_strdup_printf("%" PRId64, value);

    assert_main_thread();
    if (prop && prop->type != IOTHREAD_PROP_INT) {
        error_setg(errp, "Parameter '%s' is not an integer property", name);
    }
    if (!prop || prop->type != IOTHREAD_PROP_INT) {
        error_prepend(errp, "iothread '%s': ", iot->id);
        return false;
    }
    return iothread_set_property(iot, name, str, errp);
}

/* The property name, or NULL with errp set (naming iot). */
static const IOThreadProperty *iothread_readable(IOThread *iot,
                                                 const char *name,
                                                 Error **errp)
{
    const IOThreadProperty *prop = iothread_property_find(name);

    if (!prop) {
        iothread_unknown_property(errp, name);
        error_prepend(errp, "iothread '%s': ", iot->id);
    }
    return prop;
}

char *iothread_get_property(IOThread *iot, const char *name, Error **errp)
{
    const IOThreadProperty *prop = iothread_readable(iot, name, errp);

    assert_main_thread();
    if (!prop) {
        return NULL;
    }
    if (prop->type == IOTHREAD_PROP_INT) {
        return g_strdup_printf("%" PRId64, prop->get_int(iot, prop));
    }
    return prop->get_str(iot, prop);
}

bool iothread_get_property_int(IOThread *iot, const char *name, int64_t *out,
                               Error **errp)
{
    const IOThreadProperty *prop = iothread_readable(iot, name, errp);

    assert_main_thread();
    if (prop && prop->type != IOTHREAD_PROP_INT) {
        error_setg(errp, "iothread '%s': Parameter '%s' is not an integer "
                   "property", iot->id, name);
        return false;
    }
    if (!prop) {
        return false;
    }
    *out = prop->get_int(iot, prop);
    return true;
}

/* ------------------------------------------------------------------------ */
/* The thread                                                                */

static void *iothread_run(void *opaque)
{
    IOThread *iot = opaque;
    g_autofree char *name = g_strdup_printf("iot-%s", iot->id);

    name[MIN(strlen(name), 15)] = '\0';     /* the kernel's limit */
    pthread_setname_np(pthread_self(), name);
    aio_context_set_home_thread(iot->ctx);
    aio_context_set_poll_policy(iot->ctx, iot->cfg.policy);

    g_mutex_lock(&iot->start_lock);
    iot->tid = (pid_t)syscall(SYS_gettid);
    iot->started = true;
    g_cond_signal(&iot->start_cond);
    g_mutex_unlock(&iot->start_lock);

    /* Acquire: pairs with the release store in iothread_destroy(). */
    while (!atomic_load_explicit(&iot->stopping, memory_order_acquire)) {
        aio_poll(iot->ctx, true);
    }
    aio_bh_run_pending(iot->ctx);
    return NULL;
}

static bool iothread_valid_id(const char *id, Error **errp)
{
    if (!id || !*id) {
        error_setg(errp, "iothread: Parameter 'id' is missing");
        return false;
    }
    if (!id_chars_valid(id)) {
        error_setg(errp, "iothread: Parameter 'id' expects an identifier "
                   "(letters, digits, '-', '.', '_'), got '%s'", id);
        return false;
    }
    return true;
}

static bool iothread_start(IOThread *iot, Error **errp)
{
    pthread_attr_t attr;
    int r;

    pthread_attr_init(&attr);
    if (iot->cfg.cpu_affinity) {
        pthread_attr_setaffinity_np(&attr, sizeof(iot->cfg.cpus), &iot->cfg.cpus);
    }
    r = pthread_create(&iot->thread, &attr, iothread_run, iot);
    pthread_attr_destroy(&attr);
    if (r) {
        error_setg_errno(errp, r, "iothread '%s': cannot start the thread%s",
                         iot->id, iot->cfg.cpu_affinity ?
                         " (check cpu-affinity)" : "");
        return false;
    }
    g_mutex_lock(&iot->start_lock);
    while (!iot->started) {
        g_cond_wait(&iot->start_cond, &iot->start_lock);
    }
    g_mutex_unlock(&iot->start_lock);
    return true;
}

static void iothread_free(IOThread *iot)
{
    aio_context_unref(iot->ctx);
    g_mutex_clear(&iot->start_lock);
    g_cond_clear(&iot->start_cond);
    g_free(iot->cfg.cpu_affinity);
    g_free(iot->id);
    g_free(iot);
}

IOThread *iothread_create(const char *id, GPtrArray *props, Error **errp)
{
    IOThread *iot;

    assert_main_thread();
    if (!iothread_valid_id(id, errp)) {
        return NULL;
    }
    if (iothread_lookup(id)) {
        error_setg(errp, "iothread: an IOThread with id '%s' already exists",
                   id);
        return NULL;
    }
    iot = g_new0(IOThread, 1);
    iot->id = g_strdup(id);
    iot->cfg.poll.max_ns = AIO_POLL_MAX_NS_DEFAULT;
    iot->cfg.policy = &aio_poll_policy_default;
    g_mutex_init(&iot->start_lock);
    g_cond_init(&iot->start_cond);
    iot->ctx = aio_context_new(errp);
    if (!iot->ctx) {
        iothread_free(iot);
        return NULL;
    }
    for (guint i = 0; props && i < props->len; i++) {
        KeyvalPair *kv = g_ptr_array_index(props, i);
        const IOThreadProperty *prop = iothread_settable(kv->key, errp);

        if (!prop || !prop->set(iot, prop, kv->value, errp)) {
            error_prepend(errp, "iothread '%s': ", id);
            iothread_free(iot);
            return NULL;
        }
    }
    aio_context_set_poll_params(iot->ctx, &iot->cfg.poll);
    aio_context_set_aio_max_batch(iot->ctx, iot->cfg.aio_max_batch);
    if (!iothread_start(iot, errp)) {
        iothread_free(iot);
        return NULL;
    }
    if (!iothreads) {
        iothreads = g_ptr_array_new();
    }
    g_ptr_array_add(iothreads, iot);
    return iot;
}

/* ------------------------------------------------------------------------ */
/* --object                                                                  */

bool iothread_check_type(const char *type, Error **errp)
{
    if (strcmp(type, IOTHREAD_TYPE)) {
        error_setg(errp, "Object type '%s' is not supported (Spindle has: "
                   OBJECT_TYPE_NAMES ")", type);
        return false;
    }
    return true;
}

char *iothread_option_help(const char *arg)
{
    GString *out;

    if (!strcmp(arg, "help")) {
        return g_strdup("Available object types:\n  " IOTHREAD_TYPE "\n");
    }
    if (strcmp(arg, IOTHREAD_TYPE ",help") &&
        strcmp(arg, "qom-type=" IOTHREAD_TYPE ",help")) {
        return NULL;
    }
    out = g_string_new(IOTHREAD_TYPE " options:\n"
                       "  id=<identifier>        required\n");
    for (const IOThreadProperty *p = iothread_properties; p->name; p++) {
        g_autofree char *key = g_strdup_printf("%s=%s", p->name, p->arg);
        g_auto(GStrv) lines = g_strsplit(p->doc, "\n", -1);

        if (!p->set) {
            continue;
        }
        /* The text in a column of its own, from the 26th character. */
        g_string_append_printf(out, "  %-23s%s\n", key, lines[0]);
        for (int i = 1; lines[i]; i++) {
            g_string_append_printf(out, "%25s%s\n", "", lines[i]);
        }
    }
    return g_string_free(out, FALSE);
}

/* A JSON member's value as the string a key=value option would give. */
static char *iothread_json_scalar(const char *name, JsonNode *node,
                                  Error **errp)
{
    if (JSON_NODE_HOLDS_VALUE(node)) {
        GType t = json_node_get_value_type(node);

        if (t == G_TYPE_STRING) {
            return g_strdup(json_node_get_string(node));
        }
        if (t == G_TYPE_INT64) {
            return g_strdup_printf("%" PRId64, json_node_get_int(node));
        }
        if (t == G_TYPE_BOOLEAN) {
            return g_strdup(json_node_get_boolean(node) ? "on" : "off");
        }
    }
    error_setg(errp, "Parameter '%s' expects a string, an integer or a "
               "boolean", name);
    return NULL;
}

/*
 * The members of a JSON object, {"qom-type": "iothread", "id": "iot0",
 * ...}, as the key=value list the other form gives, in order.
 */
static GPtrArray *iothread_json_to_keyval(const char *json, Error **errp)
{
    /* The common parser, for its messages about malformed text. */
    g_autoptr(Opts) check = opts_parse_json(json, errp);
    g_autoptr(JsonParser) parser = NULL;
    g_autoptr(GPtrArray) pairs = NULL;
    JsonObjectIter iter;
    const char *name;
    JsonNode *node;

    if (!check) {
        return NULL;
    }
    parser = json_parser_new();
    if (!json_parser_load_from_data(parser, json, -1, NULL)) {
        error_setg(errp, "Invalid JSON");
        return NULL;
    }
    pairs = g_ptr_array_new_with_free_func(keyval_pair_free);
    json_object_iter_init_ordered(&iter,
                                  json_node_get_object(
                                      json_parser_get_root(parser)));
    while (json_object_iter_next_ordered(&iter, &name, &node)) {
        char *value = iothread_json_scalar(name, node, errp);

        if (!value) {
            return NULL;
        }
        keyval_append(pairs, name, value);
    }
    return g_steal_pointer(&pairs);
}

static bool iothread_text_is_json(const char *text)
{
    while (g_ascii_isspace(*text)) {
        text++;
    }
    return *text == '{';
}

/* From key=value or JSON text; the type may be left out unless required. */
static IOThread *iothread_create_from_text(const char *text,
                                           bool type_required, Error **errp)
{
    bool json = iothread_text_is_json(text);
    g_autoptr(GPtrArray) pairs = json ? iothread_json_to_keyval(text, errp)
                                      : keyval_parse(text, "qom-type", errp);
    g_autoptr(GPtrArray) props = g_ptr_array_new();
    const char *type;

    if (!pairs) {
        return NULL;
    }
    type = keyval_lookup(pairs, "qom-type");
    if (!type && type_required) {
        error_setg(errp, "%s", json ?
                   "Parameter 'qom-type' is missing (the object type: "
                   IOTHREAD_TYPE ")" :
                   "Parameter 'qom-type' is missing: the option starts "
                   "with the object type (" IOTHREAD_TYPE ",id=...)");
        return NULL;
    }
    if (type && !iothread_check_type(type, errp)) {
        return NULL;
    }
    for (guint i = 0; i < pairs->len; i++) {
        KeyvalPair *kv = g_ptr_array_index(pairs, i);

        if (strcmp(kv->key, "qom-type") && strcmp(kv->key, "id")) {
            g_ptr_array_add(props, kv);     /* borrowed from pairs */
        }
    }
    return iothread_create(keyval_lookup(pairs, "id"), props, errp);
}

IOThread *iothread_create_from_option(const char *arg, Error **errp)
{
    assert_main_thread();
    return iothread_create_from_text(arg, true, errp);
}

IOThread *iothread_create_from_string(const char *optstr, Error **errp)
{
    assert_main_thread();
    return iothread_create_from_text(optstr, false, errp);
}

void iothread_destroy(IOThread *iot)
{
    assert_main_thread();
    if (!iot) {
        return;
    }
    /* Release: pairs with the acquire load in iothread_run(). */
    atomic_store_explicit(&iot->stopping, true, memory_order_release);
    aio_notify(iot->ctx);
    pthread_join(iot->thread, NULL);
    aio_context_set_home_thread(iot->ctx);
    g_ptr_array_remove(iothreads, iot);
    iothread_free(iot);
}

const char *iothread_get_id(const IOThread *iot)
{
    return iot->id;
}

AioContext *iothread_get_aio_context(IOThread *iot)
{
    return iot->ctx;
}

pid_t iothread_get_thread_id(const IOThread *iot)
{
    return iot->tid;
}

int64_t iothread_get_cpu_ns(const IOThread *iot)
{
    clockid_t cid;
    struct timespec ts;

    if (pthread_getcpuclockid(iot->thread, &cid) ||
        clock_gettime(cid, &ts)) {
        return -1;
    }
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

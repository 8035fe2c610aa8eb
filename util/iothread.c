/*
 * IOThread: a thread that runs one AioContext.
 *
 * The thread owns its context: it makes itself the home thread, then calls
 * aio_poll(ctx, true) until iothread_destroy() sets `stopping` and wakes it
 * with aio_notify().  Before it exits it runs, once, the BHs pending at that
 * moment, so a request handed to it just before the stop is not dropped
 * (and a BH that keeps rescheduling itself cannot keep the thread alive).
 *
 * Properties are owned by the main thread, which validates them and pushes
 * them into the running thread without sharing a writable field:
 *  - poll-max-ns, poll-grow, poll-shrink, poll-weight, aio-max-batch:
 *    atomic stores into
 *    the context, read by the loop once per turn;
 *  - cpu-affinity: pthread_setaffinity_np() on the running thread (or the
 *    creation attribute, so the thread never runs on a wrong CPU);
 *  - poll-policy: switched inside the thread through aio_run_sync().
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "util/cutils.h"
#include "util/iothread.h"
#include "util/keyval.h"

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

    for (guint i = 0; iothreads && i < iothreads->len; i++) {
        g_ptr_array_add(list, g_ptr_array_index(iothreads, i));
    }
    return list;
}

const char *const iothread_int_property_names[] = {
    "poll-max-ns", "poll-grow", "poll-shrink", "poll-weight", "aio-max-batch",
    NULL,
};
const char *const iothread_str_property_names[] = {
    "cpu-affinity", "poll-policy", NULL,
};
static const char *const iothread_property_names[] = {
    "poll-max-ns", "poll-grow", "poll-shrink", "poll-weight", "aio-max-batch",
    "cpu-affinity", "poll-policy", NULL,
};

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

static int64_t *iothread_config_int(IOThreadConfig *cfg, const char *name)
{
    if (!strcmp(name, "poll-max-ns")) {
        return &cfg->poll.max_ns;
    } else if (!strcmp(name, "poll-grow")) {
        return &cfg->poll.grow;
    } else if (!strcmp(name, "poll-shrink")) {
        return &cfg->poll.shrink;
    } else if (!strcmp(name, "poll-weight")) {
        return &cfg->poll.weight;
    } else if (!strcmp(name, "aio-max-batch")) {
        return &cfg->aio_max_batch;
    }
    return NULL;
}

static void iothread_unknown_property(Error **errp, const char *name)
{
    g_autofree char *valid = g_strjoinv(", ", (char **)iothread_property_names);

    error_setg(errp, "Property '%s' not found (iothread properties: %s)",
               name, valid);
}

/* Validate name=value and store it in cfg.  cfg is untouched on error. */
static bool iothread_config_set(IOThreadConfig *cfg, const char *name,
                                const char *value, Error **errp)
{
    int64_t *field = iothread_config_int(cfg, name);

    if (field) {
        /* poll-weight is a shift: QEMU's range, 0 meaning the default. */
        int64_t max = field == &cfg->poll.weight ? AIO_POLL_WEIGHT_MAX
                                                 : INT64_MAX;

        return parse_int64_in_range(name, value, 0, max, field, errp);
    }
    if (!strcmp(name, "cpu-affinity")) {
        cpu_set_t set;

        if (!cpulist_parse(value, &set, errp)) {
            return false;
        }
        cfg->cpus = set;
        g_free(cfg->cpu_affinity);
        cfg->cpu_affinity = g_strdup(value);
        return true;
    }
    if (!strcmp(name, "poll-policy")) {
        const AioPollPolicyOps *ops = aio_poll_policy_find(value);

        if (!ops) {
            error_setg(errp, "Parameter 'poll-policy': unknown policy '%s' "
                       "(available: %s)", value, aio_poll_policy_names());
            return false;
        }
        cfg->policy = ops;
        return true;
    }
    iothread_unknown_property(errp, name);
    return false;
}

static void iothread_set_policy_bh(void *opaque)
{
    IOThread *iot = opaque;

    aio_context_set_poll_policy(iot->ctx, iot->cfg.policy);
}

/* Push the property name of iot->cfg into the running thread. */
static bool iothread_apply(IOThread *iot, const char *name, Error **errp)
{
    if (g_str_has_prefix(name, "poll-") && strcmp(name, "poll-policy")) {
        aio_context_set_poll_params(iot->ctx, &iot->cfg.poll);
    } else if (!strcmp(name, "aio-max-batch")) {
        aio_context_set_aio_max_batch(iot->ctx, iot->cfg.aio_max_batch);
    } else if (!strcmp(name, "poll-policy")) {
        aio_run_sync(iot->ctx, iothread_set_policy_bh, iot);
    } else if (!strcmp(name, "cpu-affinity")) {
        int r = pthread_setaffinity_np(iot->thread, sizeof(iot->cfg.cpus),
                                       &iot->cfg.cpus);
        if (r) {
            error_setg_errno(errp, r, "Parameter 'cpu-affinity': cannot run "
                             "on CPUs '%s'", iot->cfg.cpu_affinity);
            return false;
        }
    }
    return true;
}

bool iothread_set_property(IOThread *iot, const char *name, const char *value,
                           Error **errp)
{
    IOThreadConfig old = iot->cfg;
    char *old_affinity = g_strdup(old.cpu_affinity);

    if (!iothread_config_set(&iot->cfg, name, value, errp) ||
        !iothread_apply(iot, name, errp)) {
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
    g_autofree char *str = g_strdup_printf("%" PRId64, value);

    if (!iothread_config_int(&iot->cfg, name)) {
        if (!g_strv_contains(iothread_property_names, name)) {
            iothread_unknown_property(errp, name);
        } else {
            error_setg(errp, "Parameter '%s' is not an integer property", name);
        }
        error_prepend(errp, "iothread '%s': ", iot->id);
        return false;
    }
    return iothread_set_property(iot, name, str, errp);
}

char *iothread_get_property(IOThread *iot, const char *name, Error **errp)
{
    int64_t *field = iothread_config_int(&iot->cfg, name);

    if (field) {
        return g_strdup_printf("%" PRId64, *field);
    }
    if (!strcmp(name, "cpu-affinity")) {
        return g_strdup(iot->cfg.cpu_affinity ? iot->cfg.cpu_affinity : "");
    }
    if (!strcmp(name, "poll-policy")) {
        return g_strdup(iot->cfg.policy->name);
    }
    iothread_unknown_property(errp, name);
    error_prepend(errp, "iothread '%s': ", iot->id);
    return NULL;
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
    for (const char *p = id; *p; p++) {
        if (!g_ascii_isalnum(*p) && !strchr("-._", *p)) {
            error_setg(errp, "iothread: Parameter 'id' expects an identifier "
                       "(letters, digits, '-', '.', '_'), got '%s'", id);
            return false;
        }
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

        if (!iothread_config_set(&iot->cfg, kv->key, kv->value, errp)) {
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

IOThread *iothread_create_from_string(const char *optstr, Error **errp)
{
    g_autoptr(GPtrArray) opts = keyval_parse(optstr, "qom-type", errp);
    g_autoptr(GPtrArray) props = NULL;
    const char *type, *id;

    if (!opts) {
        return NULL;
    }
    type = keyval_lookup(opts, "qom-type");
    if (type && strcmp(type, "iothread")) {
        error_setg(errp, "Object type '%s' is not an iothread", type);
        return NULL;
    }
    id = keyval_lookup(opts, "id");
    if (!iothread_valid_id(id, errp)) {
        return NULL;
    }
    props = g_ptr_array_new();
    for (guint i = 0; i < opts->len; i++) {
        KeyvalPair *kv = g_ptr_array_index(opts, i);

        if (strcmp(kv->key, "qom-type") && strcmp(kv->key, "id")) {
            g_ptr_array_add(props, kv);     /* borrowed from opts */
        }
    }
    return iothread_create(id, props, errp);
}

void iothread_destroy(IOThread *iot)
{
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

/*
 * Unit tests for IOThread (util/iothread.h).
 *
 * Theory of operation: IOThreads are real threads, so the tests look at them
 * from the outside the way an operator would: the thread's name and CPU
 * affinity through /proc and sched_getaffinity(), its CPU time through
 * /proc/self/task/TID/stat, its properties through the property API.  Work
 * is sent into the thread with BHs and aio_run_sync(), and a virtqueue-like
 * pollable handler ("Vq", test-helpers.h) is registered inside it to make
 * its poll window grow.  Every wait for the other thread is a condition
 * loop with a long timeout; a watchdog aborts a test that hangs.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <sys/sysinfo.h>
#include <sys/syscall.h>
#include <glib.h>

#include "util/aio.h"
#include "util/clock.h"
#include "util/event-notifier.h"
#include "util/iothread.h"
#include "util/keyval.h"
#include "test-helpers.h"

static pid_t my_gettid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

static char *get_prop(IOThread *iot, const char *name)
{
    Error *err = NULL;
    char *v = iothread_get_property(iot, name, &err);

    g_assert_no_error(err);
    g_assert_nonnull(v);
    return v;
}

static void assert_prop(IOThread *iot, const char *name, const char *expect)
{
    char *v = get_prop(iot, name);

    g_assert_cmpstr(v, ==, expect);
    g_free(v);
}

static void set_prop_ok(IOThread *iot, const char *name, const char *value)
{
    Error *err = NULL;

    if (!iothread_set_property(iot, name, value, &err)) {
        g_test_message("setting %s=%s failed: %s", name, value,
                       err ? error_get_pretty(err) : "(no error)");
        g_assert_not_reached();
    }
    g_assert_no_error(err);
}

/* Expect exactly one error from setting name=value, naming mention. */
static void set_prop_bad(IOThread *iot, const char *name, const char *value,
                         const char *mention)
{
    Error *err = NULL;

    if (iothread_set_property(iot, name, value, &err)) {
        g_test_message("setting %s=\"%s\" was accepted", name, value);
        g_assert_not_reached();
    }
    g_assert_nonnull(err);
    if (mention && !strstr(error_get_pretty(err), mention)) {
        g_test_message("error for %s=\"%s\" does not name \"%s\": %s",
                       name, value, mention, error_get_pretty(err));
        g_assert_not_reached();
    }
    g_test_message("%s=\"%s\": %s", name, value, error_get_pretty(err));
    error_free(err);
    /* NULL errp: still refused. */
    g_assert_false(iothread_set_property(iot, name, value, NULL));
}

static char *read_proc_file(const char *fmt, pid_t tid)
{
    char *path = g_strdup_printf(fmt, tid);
    gchar *contents = NULL;
    gboolean ok = g_file_get_contents(path, &contents, NULL, NULL);

    g_free(path);
    return ok ? contents : NULL;
}

static char *thread_comm(pid_t tid)
{
    char *c = read_proc_file("/proc/self/task/%d/comm", tid);

    if (c) {
        g_strchomp(c);
    }
    return c;
}

/* utime + stime of a thread of ours, in clock ticks. */
static uint64_t thread_cpu_ticks(pid_t tid)
{
    char *text = read_proc_file("/proc/self/task/%d/stat", tid);
    const char *p;
    char **f;
    uint64_t ticks;

    g_assert_nonnull(text);
    /* The comm field may contain spaces: fields start after the last ')'. */
    p = strrchr(text, ')');
    g_assert_nonnull(p);
    f = g_strsplit(p + 2, " ", 0);
    /* f[0] is field 3 (state); utime is field 14, stime field 15. */
    g_assert_cmpuint(g_strv_length(f), >, 13);
    ticks = g_ascii_strtoull(f[11], NULL, 10) + g_ascii_strtoull(f[12], NULL, 10);
    g_strfreev(f);
    g_free(text);
    return ticks;
}

static int count_threads(void)
{
    return count_dir_entries("/proc/self/task");
}

/* ------------------------------------------------------------------------ */
/* Running things inside the IOThread                                        */

typedef struct InThread {
    AioContext *ctx;
    pid_t tid;
    pthread_t self;
    bool in_home;
    _Atomic int runs;
} InThread;

static void in_thread_cb(void *opaque)
{
    InThread *it = opaque;

    it->tid = my_gettid();
    it->self = pthread_self();
    it->in_home = aio_context_in_home_thread(it->ctx);
    atomic_fetch_add(&it->runs, 1);
}

static bool wait_for_int(_Atomic int *v, int want, int64_t timeout_ns)
{
    int64_t end = clock_now_ns() + timeout_ns;

    while (atomic_load(v) < want) {
        if (clock_now_ns() > end) {
            return false;
        }
        g_usleep(1000);
    }
    return true;
}

/*
 * The PollSrc (test-helpers.h) lives in the IOThread: it is set up and torn
 * down there, and this thread is its producer.
 */
static void psrc_start_cb(void *opaque)
{
    PollSrc *psrc = opaque;
    AioContext *ctx = psrc->ctx;     /* psrc_init() zeroes *psrc */

    psrc_init(psrc, ctx, true);
    aio_set_fd_handler_name(ctx, psrc->kick.fd, "test-vq");
}

static void psrc_stop_cb(void *opaque)
{
    psrc_cleanup(opaque);
}

static void psrc_start(PollSrc *psrc, AioContext *ctx)
{
    psrc->ctx = ctx;
    aio_run_sync(ctx, psrc_start_cb, psrc);
}

static void psrc_stop(PollSrc *psrc)
{
    aio_run_sync(psrc->ctx, psrc_stop_cb, psrc);
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */

static void test_create_destroy(void)
{
    int threads_before = count_threads();
    IOThread *iot = iot_new("t1", NULL);
    pid_t tid = iothread_get_thread_id(iot);
    char *path;

    g_assert_cmpstr(iothread_get_id(iot), ==, "t1");
    g_assert_nonnull(iothread_get_aio_context(iot));
    g_assert_cmpint(tid, >, 0);
    g_assert_cmpint(tid, !=, my_gettid());
    path = g_strdup_printf("/proc/self/task/%d", tid);
    g_assert_true(g_file_test(path, G_FILE_TEST_IS_DIR));
    g_assert_false(aio_context_in_home_thread(iothread_get_aio_context(iot)));
    g_assert_cmpint(count_threads(), ==, threads_before + 1);

    iothread_destroy(iot);
    /* The thread has been joined. */
    g_assert_false(g_file_test(path, G_FILE_TEST_IS_DIR));
    g_free(path);

    /* Several at once, destroyed in another order. */
    {
        IOThread *a = iot_new("a", NULL);
        IOThread *b = iot_new("b", "poll-max-ns=0");
        IOThread *c = iot_new("c", "poll-grow=4,poll-shrink=2");

        g_assert_true(iothread_get_aio_context(a) !=
                      iothread_get_aio_context(b));
        iothread_destroy(b);
        iothread_destroy(a);
        iothread_destroy(c);
    }
    g_assert_cmpint(count_threads(), ==, threads_before);
}

static void test_create_from_string(void)
{
    Error *err = NULL;
    IOThread *iot;

    iot = iothread_create_from_string("iothread,id=x,poll-max-ns=0", &err);
    g_assert_no_error(err);
    g_assert_nonnull(iot);
    g_assert_cmpstr(iothread_get_id(iot), ==, "x");
    assert_prop(iot, "poll-max-ns", "0");
    assert_prop(iot, "poll-grow", "0");
    iothread_destroy(iot);

    /* The implied type may be omitted; a cpu list uses ",," for ','. */
    iot = iothread_create_from_string("id=y,poll-grow=3,poll-shrink=2,"
                                      "aio-max-batch=16", &err);
    g_assert_no_error(err);
    g_assert_nonnull(iot);
    g_assert_cmpstr(iothread_get_id(iot), ==, "y");
    assert_prop(iot, "poll-grow", "3");
    assert_prop(iot, "poll-shrink", "2");
    assert_prop(iot, "aio-max-batch", "16");
    assert_prop(iot, "poll-max-ns", "32768");
    iothread_destroy(iot);
}

static void expect_create_error(const char *optstr, const char *mention)
{
    int threads_before = count_threads();
    Error *err = NULL;
    IOThread *iot = iothread_create_from_string(optstr, &err);

    if (iot) {
        g_test_message("\"%s\" was accepted", optstr);
        g_assert_not_reached();
    }
    g_assert_nonnull(err);
    g_test_message("\"%s\": %s", optstr, error_get_pretty(err));
    if (mention && !strstr(error_get_pretty(err), mention)) {
        g_test_message("error does not mention \"%s\"", mention);
        g_assert_not_reached();
    }
    error_free(err);
    /* Nothing was started. */
    g_assert_cmpint(count_threads(), ==, threads_before);
}

static void test_create_errors(void)
{
    Error *err = NULL;
    GPtrArray *props;

    expect_create_error("iothread", "id");
    expect_create_error("iothread,poll-max-ns=0", "id");
    expect_create_error("iothread,id=x,bogus=1", "bogus");
    expect_create_error("iothread,id=x,poll-max-ns=-1", "poll-max-ns");
    expect_create_error("iothread,id=x,poll-grow=abc", "poll-grow");
    expect_create_error("iothread,id=x,poll-shrink=99999999999999999999",
                        "poll-shrink");
    expect_create_error("iothread,id=x,aio-max-batch=", "aio-max-batch");
    expect_create_error("iothread,id=x,poll-policy=nope", "poll-policy");
    expect_create_error("iothread,id=x,cpu-affinity=x", "cpu-affinity");
    expect_create_error("iothread,id=x,id=y", NULL);
    expect_create_error("notaniothread,id=x", NULL);
    expect_create_error("iothread,id=x,=3", NULL);

    /* iothread_create() with a bad property list: it names the property. */
    static const char *const bad[][2] = {
        { "poll-max-ns=10,poll-grow=-2", "poll-grow" },
        { "no-such-prop=1", "no-such-prop" },
    };
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        props = keyval_parse(bad[i][0], NULL, &err);
        g_assert_no_error(err);
        g_assert_null(iothread_create("bad", props, &err));
        g_assert_nonnull(err);
        g_assert_nonnull(strstr(error_get_pretty(err), bad[i][1]));
        g_clear_error(&err);
        g_ptr_array_unref(props);
    }

    /* An empty list is fine. */
    props = keyval_parse("", NULL, &err);
    if (props) {
        IOThread *iot = iothread_create("empty", props, &err);

        g_assert_no_error(err);
        g_assert_nonnull(iot);
        iothread_destroy(iot);
        g_ptr_array_unref(props);
    }
    g_clear_error(&err);
}

static bool comm_is(pid_t tid, const char *expect)
{
    char *c = thread_comm(tid);
    bool ok = c && strcmp(c, expect) == 0;

    g_free(c);
    return ok;
}

static void check_thread_name(const char *id, const char *expect)
{
    IOThread *iot = iot_new(id, NULL);
    pid_t tid = iothread_get_thread_id(iot);
    int64_t end = clock_now_ns() + 5 * NS_PER_SEC;
    char *c;

    while (!comm_is(tid, expect) && clock_now_ns() < end) {
        g_usleep(1000);
    }
    c = thread_comm(tid);
    g_assert_cmpstr(c, ==, expect);
    g_free(c);
    iothread_destroy(iot);
}

static void test_thread_name(void)
{
    check_thread_name("nm", "iot-nm");
    check_thread_name("iot0", "iot-iot0");
    /* 15 characters at most. */
    check_thread_name("abcdefghijklmnopq", "iot-abcdefghijk");
}

/*
 * An IOThread's timers fire on time: its timer slack is 1 ns, not the
 * 50 us it would inherit from a creator with the default slack.
 */
static void test_timer_slack(void)
{
    IOThread *iot;
    g_autofree char *path = NULL;
    g_autofree char *text = NULL;

    g_assert_cmpint(prctl(PR_SET_TIMERSLACK, 50000, 0, 0, 0), ==, 0);
    iot = iot_new("slack", NULL);
    path = g_strdup_printf("/proc/%d/timerslack_ns",
                           (int)iothread_get_thread_id(iot));
    if (!g_file_get_contents(path, &text, NULL, NULL)) {
        g_test_skip("no /proc/TID/timerslack_ns (Linux < 4.6)");
    } else {
        g_assert_cmpstr(g_strstrip(text), ==, "1");
    }
    iothread_destroy(iot);
    prctl(PR_SET_TIMERSLACK, 0, 0, 0, 0);    /* back to the default */
}

static void test_bh_runs_in_iothread(void)
{
    IOThread *iot = iot_new("bh", NULL);
    AioContext *ctx = iothread_get_aio_context(iot);
    pid_t tid = iothread_get_thread_id(iot);
    InThread it = { .ctx = ctx };
    QEMUBH *bh;

    /* Oneshot BH. */
    aio_bh_schedule_oneshot(ctx, in_thread_cb, &it);
    g_assert_true(wait_for_int(&it.runs, 1, 10 * NS_PER_SEC));
    g_assert_cmpint(it.tid, ==, tid);
    g_assert_true(it.in_home);

    /* A BH created here and scheduled from here. */
    memset(&it, 0, sizeof(it));
    it.ctx = ctx;
    bh = aio_bh_new(ctx, in_thread_cb, &it);
    aio_bh_schedule(bh);
    g_assert_true(wait_for_int(&it.runs, 1, 10 * NS_PER_SEC));
    g_assert_cmpint(it.tid, ==, tid);
    g_assert_true(it.in_home);
    /* Delete it: not pending any more, so any thread may. */
    aio_bh_delete(bh);

    /* aio_run_sync: runs there, returns after it ran. */
    for (int i = 0; i < 50; i++) {
        memset(&it, 0, sizeof(it));
        it.ctx = ctx;
        aio_run_sync(ctx, in_thread_cb, &it);
        g_assert_cmpint(atomic_load(&it.runs), ==, 1);
        g_assert_cmpint(it.tid, ==, tid);
        g_assert_true(it.in_home);
    }
    g_assert_false(aio_context_in_home_thread(ctx));
    iothread_destroy(iot);
}

static void count_cb(void *opaque)
{
    atomic_fetch_add((_Atomic int *)opaque, 1);
}

static void test_destroy_runs_pending_bhs(void)
{
    _Atomic int count = 0;

    for (int round = 0; round < 5; round++) {
        IOThread *iot = iot_new("drain", NULL);
        AioContext *ctx = iothread_get_aio_context(iot);

        atomic_store(&count, 0);
        for (int i = 0; i < 1000; i++) {
            aio_bh_schedule_oneshot(ctx, count_cb, &count);
        }
        iothread_destroy(iot);
        g_assert_cmpint(atomic_load(&count), ==, 1000);
    }
}

/* ------------------------------------------------------------------------ */
/* Properties                                                                */

static void test_properties_defaults(void)
{
    IOThread *iot = iot_new("props", NULL);
    AioContext *ctx = iothread_get_aio_context(iot);
    AioPollParams p;
    Error *err = NULL;

    assert_prop(iot, "poll-max-ns", "32768");
    assert_prop(iot, "poll-grow", "0");
    assert_prop(iot, "poll-shrink", "0");
    assert_prop(iot, "poll-weight", "0");
    assert_prop(iot, "aio-max-batch", "0");
    assert_prop(iot, "poll-policy", "predictive");

    set_prop_ok(iot, "poll-max-ns", "100000");
    set_prop_ok(iot, "poll-grow", "4");
    set_prop_ok(iot, "poll-shrink", "3");
    set_prop_ok(iot, "poll-weight", "63");
    set_prop_ok(iot, "aio-max-batch", "32");
    assert_prop(iot, "poll-max-ns", "100000");
    assert_prop(iot, "poll-grow", "4");
    assert_prop(iot, "poll-shrink", "3");
    assert_prop(iot, "poll-weight", "63");
    assert_prop(iot, "aio-max-batch", "32");
    set_prop_ok(iot, "poll-weight", "5");

    /* Every policy, by name; "adaptive" is qemu-classic's old name. */
    set_prop_ok(iot, "poll-policy", "fixed");
    assert_prop(iot, "poll-policy", "fixed");
    set_prop_ok(iot, "poll-policy", "qemu-weighted");
    assert_prop(iot, "poll-policy", "qemu-weighted");
    set_prop_ok(iot, "poll-policy", "adaptive");
    assert_prop(iot, "poll-policy", "qemu-classic");
    set_prop_ok(iot, "poll-policy", "predictive");
    assert_prop(iot, "poll-policy", "predictive");

    /* Hex is accepted and read back in decimal. */
    set_prop_ok(iot, "poll-max-ns", "0x100");
    assert_prop(iot, "poll-max-ns", "256");

    g_assert_true(iothread_set_property_int(iot, "poll-grow", 7, &err));
    g_assert_no_error(err);
    assert_prop(iot, "poll-grow", "7");
    g_assert_false(iothread_set_property_int(iot, "poll-grow", -7, &err));
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(error_get_pretty(err), "poll-grow"));
    g_clear_error(&err);
    assert_prop(iot, "poll-grow", "7");

    /* The context sees them (at its next turn). */
    {
        int64_t end = clock_now_ns() + 5 * NS_PER_SEC;

        do {
            aio_context_get_poll_params(ctx, &p);
            if (p.max_ns == 256 && p.grow == 7 && p.shrink == 3 &&
                p.weight == 5 && aio_context_get_aio_max_batch(ctx) == 32) {
                break;
            }
            g_usleep(1000);
        } while (clock_now_ns() < end);
        g_assert_cmpint(p.max_ns, ==, 256);
        g_assert_cmpint(p.grow, ==, 7);
        g_assert_cmpint(p.shrink, ==, 3);
        g_assert_cmpint(p.weight, ==, 5);
        g_assert_cmpint(aio_context_get_aio_max_batch(ctx), ==, 32);
    }

    /* Unknown property on get. */
    g_assert_null(iothread_get_property(iot, "no-such-prop", &err));
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(error_get_pretty(err), "no-such-prop"));
    g_clear_error(&err);

    iothread_destroy(iot);
}

static void test_properties_bad_values(void)
{
    static const char *const int_props[] = {
        "poll-max-ns", "poll-grow", "poll-shrink", "poll-weight",
        "aio-max-batch",
    };
    static const char *const bad[] = {
        "-1", "abc", "99999999999999999999", "", "12abc", "1.5", "-0x10",
    };
    IOThread *iot = iot_new("bad", NULL);

    for (size_t i = 0; i < G_N_ELEMENTS(int_props); i++) {
        char *before = get_prop(iot, int_props[i]);

        for (size_t j = 0; j < G_N_ELEMENTS(bad); j++) {
            set_prop_bad(iot, int_props[i], bad[j], int_props[i]);
        }
        /* Unchanged by the failures. */
        assert_prop(iot, int_props[i], before);
        g_free(before);
    }
    /* poll-weight is a shift of 0..63, as QEMU's. */
    set_prop_bad(iot, "poll-weight", "64", "poll-weight");
    set_prop_bad(iot, "poll-weight", "1000", "poll-weight");
    assert_prop(iot, "poll-weight", "0");
    set_prop_bad(iot, "poll-policy", "nope", "poll-policy");
    set_prop_bad(iot, "poll-policy", "", "poll-policy");
    set_prop_bad(iot, "poll-policy", "Predictive", "poll-policy");
    set_prop_bad(iot, "poll-max-nss", "10", "poll-max-nss");
    set_prop_bad(iot, "no-such-prop", "1", "no-such-prop");
    set_prop_bad(iot, "", "1", NULL);
    assert_prop(iot, "poll-policy", "predictive");
    iothread_destroy(iot);
}

/* Load for the live property test: ping-pong on a PollSrc plus BHs. */
typedef struct Load {
    IOThread *iot;
    AioContext *ctx;
    PollSrc psrc;
    _Atomic bool stop;
    _Atomic int bh_runs;
    int msgs;
    int bhs;
    bool lost;
} Load;

static gpointer load_fn(gpointer opaque)
{
    Load *l = opaque;
    GRand *r = g_rand_new_with_seed(g_test_rand_int());

    while (!atomic_load(&l->stop)) {
        spin_ns(g_rand_int_range(r, 0, 60000));
        psrc_publish(&l->psrc);
        l->msgs++;
        if (!psrc_wait_acked(&l->psrc, l->msgs, 5 * NS_PER_SEC)) {
            l->lost = true;
            break;
        }
        if (g_rand_int_range(r, 0, 4) == 0) {
            aio_bh_schedule_oneshot(l->ctx, count_cb, &l->bh_runs);
            l->bhs++;
        }
    }
    g_rand_free(r);
    return NULL;
}

static void test_properties_live(void)
{
    Load l = { 0 };
    GRand *r = g_rand_new_with_seed(g_test_rand_int());
    int64_t last_max = -1, last_grow = -1, last_shrink = -1, last_batch = -1;
    int64_t last_weight = -1;
    AioPollParams p;
    GThread *t;

    l.iot = iot_new("live", NULL);
    l.ctx = iothread_get_aio_context(l.iot);
    psrc_start(&l.psrc, l.ctx);
    t = g_thread_new("load", load_fn, &l);

    for (int i = 0; i < 2000; i++) {
        static const char *const names[] = {
            "poll-max-ns", "poll-grow", "poll-shrink", "aio-max-batch",
            "poll-weight", "poll-policy",
        };
        static const char *const policies[] = {
            "fixed", "qemu-classic", "qemu-weighted", "predictive",
        };
        int which = g_rand_int_range(r, 0, 6);
        int64_t v;
        char *str;

        if (which == 5) {
            /* Switch policies under load (the thread switches at a turn). */
            const char *name = policies[g_rand_int_range(r, 0, 4)];

            set_prop_ok(l.iot, "poll-policy", name);
            assert_prop(l.iot, "poll-policy", name);
            continue;
        }
        switch (which) {
        case 4:
            v = g_rand_int_range(r, 0, AIO_POLL_WEIGHT_MAX + 1);
            last_weight = v;
            break;
        case 0:
            /* Include 0 (polling off) and large windows. */
            v = g_rand_int_range(r, 0, 4) == 0 ? 0
                : g_rand_int_range(r, 1, 500000);
            last_max = v;
            break;
        case 1:
            v = g_rand_int_range(r, 0, 9);
            last_grow = v;
            break;
        case 2:
            v = g_rand_int_range(r, 0, 9);
            last_shrink = v;
            break;
        default:
            v = g_rand_int_range(r, 0, 129);
            last_batch = v;
            break;
        }
        str = g_strdup_printf("%" PRId64, v);
        if (i % 2) {
            set_prop_ok(l.iot, names[which], str);
        } else {
            Error *err = NULL;

            g_assert_true(iothread_set_property_int(l.iot, names[which], v,
                                                    &err));
            g_assert_no_error(err);
        }
        assert_prop(l.iot, names[which], str);
        g_free(str);
        if (i % 100 == 0) {
            g_usleep(1000);        /* let a few turns see the values */
        }
    }
    atomic_store(&l.stop, true);
    g_thread_join(t);
    g_rand_free(r);

    g_test_message("load: %d messages, %d BHs", l.msgs, l.bhs);
    g_assert_false(l.lost);
    g_assert_cmpint(l.msgs, >, 0);
    g_assert_true(wait_for_int(&l.bh_runs, l.bhs, 10 * NS_PER_SEC));

    /* The context ends up with the last values. */
    {
        int64_t end = clock_now_ns() + 5 * NS_PER_SEC;
        bool match;

        do {
            aio_context_get_poll_params(l.ctx, &p);
            match = (last_max < 0 || p.max_ns == last_max) &&
                    (last_grow < 0 || p.grow == last_grow) &&
                    (last_shrink < 0 || p.shrink == last_shrink) &&
                    (last_weight < 0 || p.weight == last_weight) &&
                    (last_batch < 0 ||
                     aio_context_get_aio_max_batch(l.ctx) == last_batch);
            if (!match) {
                aio_notify(l.ctx);
                g_usleep(1000);
            }
        } while (!match && clock_now_ns() < end);
        g_assert_true(match);
    }

    psrc_stop(&l.psrc);
    iothread_destroy(l.iot);
}

/* ------------------------------------------------------------------------ */
/* CPU affinity                                                              */

static bool affinity_is(pid_t tid, const cpu_set_t *want)
{
    cpu_set_t got;

    CPU_ZERO(&got);
    g_assert_cmpint(sched_getaffinity(tid, sizeof(got), &got), ==, 0);
    return CPU_EQUAL(&got, want);
}

static void wait_affinity(pid_t tid, const cpu_set_t *want)
{
    int64_t end = clock_now_ns() + 5 * NS_PER_SEC;

    while (!affinity_is(tid, want) && clock_now_ns() < end) {
        g_usleep(1000);
    }
    g_assert_true(affinity_is(tid, want));
}

static void test_cpu_affinity(void)
{
    cpu_set_t allowed, want;
    IOThread *iot;
    pid_t tid;

    g_assert_cmpint(sched_getaffinity(0, sizeof(allowed), &allowed), ==, 0);
    if (!CPU_ISSET(0, &allowed)) {
        g_test_skip("CPU 0 is not available to this process");
        return;
    }

    iot = iot_new("aff", NULL);
    tid = iothread_get_thread_id(iot);

    set_prop_ok(iot, "cpu-affinity", "0");
    CPU_ZERO(&want);
    CPU_SET(0, &want);
    wait_affinity(tid, &want);

    if (CPU_ISSET(1, &allowed)) {
        set_prop_ok(iot, "cpu-affinity", "1");
        CPU_ZERO(&want);
        CPU_SET(1, &want);
        wait_affinity(tid, &want);

        set_prop_ok(iot, "cpu-affinity", "0-1");
        CPU_SET(0, &want);
        wait_affinity(tid, &want);

        set_prop_ok(iot, "cpu-affinity", "1");
        set_prop_ok(iot, "cpu-affinity", "0:1");
        wait_affinity(tid, &want);
    }

    /* Work still runs there. */
    {
        InThread it = { .ctx = iothread_get_aio_context(iot) };

        aio_run_sync(it.ctx, in_thread_cb, &it);
        g_assert_cmpint(it.tid, ==, tid);
    }

    /* "" means all CPUs: at least every CPU this process may use. */
    set_prop_ok(iot, "cpu-affinity", "0");
    CPU_ZERO(&want);
    CPU_SET(0, &want);
    wait_affinity(tid, &want);
    set_prop_ok(iot, "cpu-affinity", "");
    {
        int64_t end = clock_now_ns() + 5 * NS_PER_SEC;
        cpu_set_t got, both;

        do {
            CPU_ZERO(&got);
            g_assert_cmpint(sched_getaffinity(tid, sizeof(got), &got), ==, 0);
            CPU_AND(&both, &got, &allowed);
            if (CPU_EQUAL(&both, &allowed)) {
                break;
            }
            g_usleep(1000);
        } while (clock_now_ns() < end);
        g_assert_true(CPU_EQUAL(&both, &allowed));
    }
    iothread_destroy(iot);

    /* At creation. */
    iot = iot_new("aff2", "cpu-affinity=0");
    CPU_ZERO(&want);
    CPU_SET(0, &want);
    wait_affinity(iothread_get_thread_id(iot), &want);
    iothread_destroy(iot);
}

static void test_cpu_affinity_bad(void)
{
    IOThread *iot = iot_new("affbad", NULL);
    pid_t tid = iothread_get_thread_id(iot);
    char *beyond = g_strdup_printf("%d", get_nprocs_conf());
    char *beyond_range = g_strdup_printf("0-%d", get_nprocs_conf());
    cpu_set_t before;

    g_assert_cmpint(sched_getaffinity(tid, sizeof(before), &before), ==, 0);
    set_prop_bad(iot, "cpu-affinity", "x", "cpu-affinity");
    set_prop_bad(iot, "cpu-affinity", "5-2", "cpu-affinity");
    set_prop_bad(iot, "cpu-affinity", beyond, "cpu-affinity");
    set_prop_bad(iot, "cpu-affinity", beyond_range, "cpu-affinity");
    set_prop_bad(iot, "cpu-affinity", "100000", "cpu-affinity");
    set_prop_bad(iot, "cpu-affinity", "-1", "cpu-affinity");
    set_prop_bad(iot, "cpu-affinity", "0-", "cpu-affinity");
    set_prop_bad(iot, "cpu-affinity", "0,x", "cpu-affinity");
    /* Unchanged. */
    g_assert_true(affinity_is(tid, &before));
    g_free(beyond);
    g_free(beyond_range);
    iothread_destroy(iot);
}

/* ------------------------------------------------------------------------ */
/* Idle CPU                                                                  */

/* Burn 300 ms of this thread's CPU time. */
static void spin_in_thread_cb(void *opaque)
{
    int64_t end = clock_thread_cpu_ns() + 300 * NS_PER_MS;

    while (clock_thread_cpu_ns() < end) {
        cpu_relax();
    }
}

static void test_idle_cpu(void)
{
    IOThread *iot = iot_new("idle", "poll-max-ns=32768");
    AioContext *ctx = iothread_get_aio_context(iot);
    pid_t tid = iothread_get_thread_id(iot);
    long tck = sysconf(_SC_CLK_TCK);
    AioPollStats s, s_idle0, s_idle1;
    bool saw_window = false;
    uint64_t ticks0, ticks1;
    int64_t cpu0, cpu1, wall0, wall1;
    int64_t idle_ns = 5 * NS_PER_SEC;
    int n = 0;
    PollSrc psrc;

    /* Busy phase: ping-pong until the window has grown. */
    psrc_start(&psrc, ctx);
    while (n < 20000) {
        n++;
        psrc_publish(&psrc);
        g_assert_true(psrc_wait_acked(&psrc, n, 5 * NS_PER_SEC));
        aio_context_get_stats(ctx, &s);
        if (s.poll_ns > 0) {
            saw_window = true;
            if (n >= 2000) {
                break;
            }
        }
    }
    g_test_message("%d messages: poll_ns=%" PRId64 " grows=%" PRIu64
                   " shrinks=%" PRIu64 " hits=%" PRIu64 " wakeups=%" PRIu64,
                   n, s.poll_ns, s.grows, s.shrinks, s.poll_hits, s.wakeups);
    g_assert_true(saw_window);
    g_assert_cmpint(s.poll_ns, >, 0);

    /* Idle phase. */
    g_usleep(10000);           /* let the last turn end its window */
    aio_context_get_stats(ctx, &s_idle0);
    ticks0 = thread_cpu_ticks(tid);
    cpu0 = iothread_get_cpu_ns(iot);
    wall0 = clock_now_ns();
    sleep_ns(idle_ns);
    wall1 = clock_now_ns();
    ticks1 = thread_cpu_ticks(tid);
    cpu1 = iothread_get_cpu_ns(iot);
    aio_context_get_stats(ctx, &s_idle1);

    g_test_message("idle %" PRId64 " ms: %" PRIu64 " ticks (%ld/s), "
                   "iothread_get_cpu_ns %" PRId64 " us, turns %" PRIu64
                   ", poll_time %" PRIu64 " us",
                   (wall1 - wall0) / NS_PER_MS, ticks1 - ticks0, tck,
                   (cpu1 - cpu0) / 1000, s_idle1.turns - s_idle0.turns,
                   (s_idle1.poll_time_ns - s_idle0.poll_time_ns) / 1000);
    g_assert_cmpint(cpu1, >=, cpu0);
    /* Under 1% of the idle time, by both measures. */
    g_assert_cmpuint((ticks1 - ticks0) * (NS_PER_SEC / tck), <,
                     (wall1 - wall0) / 100);
    g_assert_cmpint(cpu1 - cpu0, <, (wall1 - wall0) / 100);
    g_assert_cmpuint(s_idle1.turns - s_idle0.turns, <=, 100);

    /*
     * The meters work: 300 ms of spinning inside the IOThread shows up in
     * both (at least 150 ms: the VM may steal time from the spinner).
     */
    ticks0 = thread_cpu_ticks(tid);
    cpu0 = iothread_get_cpu_ns(iot);
    aio_run_sync(ctx, spin_in_thread_cb, NULL);
    ticks1 = thread_cpu_ticks(tid);
    cpu1 = iothread_get_cpu_ns(iot);
    g_test_message("300 ms of CPU-time spinning: %" PRIu64 " ticks, "
                   "iothread_get_cpu_ns %" PRId64 " us", ticks1 - ticks0,
                   (cpu1 - cpu0) / 1000);
    g_assert_cmpint(cpu1 - cpu0, >=, 150 * NS_PER_MS);
    g_assert_cmpuint((ticks1 - ticks0) * (NS_PER_SEC / tck), >=,
                     150 * NS_PER_MS);

    psrc_stop(&psrc);
    iothread_destroy(iot);
}

/* ------------------------------------------------------------------------ */
/* Destroy while the loop always has work                                    */

/*
 * iothread_destroy() must return even if the IOThread's loop never runs
 * out of work: a BH that schedules itself again every time it runs, or a
 * poll handler that always reports work.  At the stop the thread runs the
 * BHs pending at that moment, once, and exits.  So that a regression fails
 * (in about 4 s) instead of hanging until the watchdog, the endless work
 * has a safety valve: it stops 4 s after the test began destroying.  The
 * test wants destroy to return well before that.
 */
#define ENDLESS_VALVE_NS (4 * NS_PER_SEC)
#define ENDLESS_DESTROY_MAX_NS (2 * NS_PER_SEC)

typedef struct Endless {
    EventNotifier e;                    /* first: callbacks get &en->e */
    AioContext *ctx;
    _Atomic int64_t destroy_start;      /* 0 until the test destroys */
    _Atomic uint64_t runs;
    _Atomic uint64_t runs_after_destroy;
    bool removed;                       /* the handler removed itself */
} Endless;

static bool endless_valve(Endless *en)
{
    int64_t t = atomic_load(&en->destroy_start);

    return t && clock_now_ns() - t > ENDLESS_VALVE_NS;
}

static void endless_count(Endless *en)
{
    atomic_fetch_add(&en->runs, 1);
    if (atomic_load(&en->destroy_start)) {
        atomic_fetch_add(&en->runs_after_destroy, 1);
    }
}

static void endless_bh(void *opaque)
{
    Endless *en = opaque;

    endless_count(en);
    if (!endless_valve(en)) {
        aio_bh_schedule_oneshot(en->ctx, endless_bh, en);
    }
}

static bool endless_wait_runs(Endless *en, uint64_t n)
{
    int64_t end = clock_now_ns() + 10 * NS_PER_SEC;

    while (atomic_load(&en->runs) < n) {
        if (clock_now_ns() > end) {
            return false;
        }
        g_usleep(1000);
    }
    return true;
}

/* Destroy iot, and return how long it took. */
static int64_t endless_destroy(IOThread *iot, Endless *en)
{
    int64_t t0 = clock_now_ns();

    atomic_store(&en->destroy_start, t0);
    iothread_destroy(iot);
    return clock_now_ns() - t0;
}

static void test_destroy_with_self_rescheduling_bh(void)
{
    IOThread *iot = iot_new("endless-bh", NULL);
    Endless en = { .ctx = iothread_get_aio_context(iot) };
    int64_t took;

    /* A chain of oneshot BHs: any still pending at the end are freed with
     * the context (a BH object that reschedules itself would be left to
     * its owner to delete, after the context is gone). */
    aio_bh_schedule_oneshot(en.ctx, endless_bh, &en);
    g_assert_true(endless_wait_runs(&en, 1000));
    took = endless_destroy(iot, &en);
    g_test_message("destroy took %" PRId64 " ms; the BH ran %" PRIu64
                   " times, %" PRIu64 " after destroy began",
                   took / NS_PER_MS, atomic_load(&en.runs),
                   atomic_load(&en.runs_after_destroy));
    g_assert_cmpint(took, <, ENDLESS_DESTROY_MAX_NS);
}

static void endless_read(EventNotifier *e)
{
    Endless *en = (Endless *)e;

    event_notifier_test_and_clear(e);
    endless_count(en);
}

static bool endless_poll(EventNotifier *e)
{
    return true;
}

static void endless_poll_ready(EventNotifier *e)
{
    Endless *en = (Endless *)e;

    endless_count(en);
    if (endless_valve(en) && !en->removed) {
        en->removed = true;
        aio_set_event_notifier(en->ctx, e, NULL, NULL, NULL);
    }
}

static void endless_register_cb(void *opaque)
{
    Endless *en = opaque;

    aio_set_event_notifier(en->ctx, &en->e, endless_read, endless_poll,
                           endless_poll_ready);
    /* One kick: the loop sees the fd, its window opens, and from then on
     * polling finds "work" every turn. */
    event_notifier_set(&en->e);
}

/*
 * The "fd still registered" critical that destroying a context with a live
 * handler logs: counted and turned into a test message instead of
 * aborting (criticals are fatal in tests) or reaching GLib's default
 * handler (which reports it on the TAP stream as "Bail out!").
 */
static int endless_criticals;

static bool endless_is_expected(const gchar *message)
{
    return message && strstr(message, "still registered");
}

static void endless_log_handler(const gchar *domain, GLogLevelFlags level,
                                const gchar *message, gpointer opaque)
{
    if (endless_is_expected(message)) {
        endless_criticals++;
        g_test_message("expected critical: %s", message);
        return;
    }
    g_log_default_handler(domain, level, message, opaque);
}

static gboolean endless_log_fatal(const gchar *domain, GLogLevelFlags level,
                                  const gchar *message, gpointer opaque)
{
    return !endless_is_expected(message);
}

static void test_destroy_with_always_busy_handler(void)
{
    /* A large poll-max-ns: a preempted turn never shrinks the handler's
     * window to 0, which would stop polling from finding its "work".
     * qemu-classic opens the window on the first event. */
    IOThread *iot = iot_new("endless-fd", "poll-max-ns=1000000000,"
                            "poll-policy=qemu-classic");
    Endless en = { .ctx = iothread_get_aio_context(iot) };
    guint log_id;
    int64_t took;

    g_assert_cmpint(event_notifier_init(&en.e, false), ==, 0);
    aio_run_sync(en.ctx, endless_register_cb, &en);
    g_assert_true(endless_wait_runs(&en, 1000));

    /*
     * The handler is still registered when the context is destroyed (it
     * cannot be removed from here, and with a correct IOThread it is not
     * dispatched again after the stop): the context logs a critical
     * about it, which is expected here.  The rest of the program's
     * criticals stay fatal.
     */
    g_test_log_set_fatal_handler(endless_log_fatal, NULL);
    log_id = g_log_set_handler(NULL, G_LOG_LEVEL_CRITICAL | G_LOG_FLAG_FATAL |
                               G_LOG_FLAG_RECURSION, endless_log_handler, NULL);
    took = endless_destroy(iot, &en);
    g_log_remove_handler(NULL, log_id);
    g_test_log_set_fatal_handler(NULL, NULL);
    g_test_message("destroy took %" PRId64 " ms; the handler ran %" PRIu64
                   " times, %" PRIu64 " after destroy began; %d critical(s)",
                   took / NS_PER_MS, atomic_load(&en.runs),
                   atomic_load(&en.runs_after_destroy), endless_criticals);
    event_notifier_cleanup(&en.e);
    g_assert_cmpint(took, <, ENDLESS_DESTROY_MAX_NS);
}

/* ------------------------------------------------------------------------ */
/* CPU lists with empty elements                                             */

/* One bad cpu-affinity value: refused, named, no "(null)", nothing changed. */
static void check_cpulist_refused(IOThread *iot, const char *value)
{
    char *before = get_prop(iot, "cpu-affinity");
    Error *err = NULL;
    const char *msg;

    if (iothread_set_property(iot, "cpu-affinity", value, &err)) {
        g_test_message("cpu-affinity=\"%s\" was accepted", value);
        g_assert_not_reached();
    }
    g_assert_nonnull(err);
    msg = error_get_pretty(err);
    g_test_message("cpu-affinity=\"%s\": %s", value, msg);
    g_assert_nonnull(strstr(msg, "cpu-affinity"));
    g_assert_null(strstr(msg, "(null)"));
    error_free(err);
    assert_prop(iot, "cpu-affinity", before);
    g_free(before);
}

static void test_cpu_affinity_empty_elements(void)
{
    static const char *const bad[] = {
        "0:", ":", "0::0", "0,,", ",0", ",", "0,", ":0", "0-:1", " 0", "0 ",
    };
    /* The same through an option string (',' is written ",,"). */
    static const char *const bad_opts[] = {
        "iothread,id=ae,cpu-affinity=0:",
        "iothread,id=ae,cpu-affinity=:",
        "iothread,id=ae,cpu-affinity=0::0",
        "iothread,id=ae,cpu-affinity=0,,",
        "iothread,id=ae,cpu-affinity=,,0",
    };
    IOThread *iot = iot_new("affempty", NULL);
    pid_t tid = iothread_get_thread_id(iot);
    cpu_set_t before;

    g_assert_cmpint(sched_getaffinity(tid, sizeof(before), &before), ==, 0);
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        check_cpulist_refused(iot, bad[i]);
    }
    g_assert_true(affinity_is(tid, &before));
    iothread_destroy(iot);

    for (size_t i = 0; i < G_N_ELEMENTS(bad_opts); i++) {
        Error *err = NULL;

        iot = iothread_create_from_string(bad_opts[i], &err);
        if (iot) {
            g_test_message("\"%s\" was accepted", bad_opts[i]);
            g_assert_not_reached();
        }
        g_assert_nonnull(err);
        g_test_message("\"%s\": %s", bad_opts[i], error_get_pretty(err));
        g_assert_nonnull(strstr(error_get_pretty(err), "cpu-affinity"));
        g_assert_null(strstr(error_get_pretty(err), "(null)"));
        error_free(err);
    }
}

static void test_registry(void)
{
    IOThread *a = iot_new("reg-a", NULL);
    IOThread *b = iot_new("reg-b", NULL);
    AioContext *other;
    Error *err = NULL;
    GPtrArray *list;

    g_assert_true(iothread_lookup("reg-a") == a);
    g_assert_true(iothread_lookup("reg-b") == b);
    g_assert_null(iothread_lookup("reg-c"));

    /* By context: each IOThread's own; any other context is nobody's. */
    g_assert_true(iothread_find_by_context(iothread_get_aio_context(a)) == a);
    g_assert_true(iothread_find_by_context(iothread_get_aio_context(b)) == b);
    other = ctx_new();
    g_assert_null(iothread_find_by_context(other));
    aio_context_unref(other);

    /* Ids are unique. */
    g_assert_null(iothread_create("reg-a", NULL, &err));
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err->message, "reg-a"));
    g_clear_error(&err);

    list = iothread_list();
    g_assert_cmpuint(list->len, ==, 2);
    g_assert_true(g_ptr_array_index(list, 0) == a);
    g_assert_true(g_ptr_array_index(list, 1) == b);
    g_ptr_array_unref(list);

    iothread_destroy(a);
    g_assert_null(iothread_lookup("reg-a"));
    g_assert_true(iothread_lookup("reg-b") == b);
    g_assert_true(iothread_find_by_context(iothread_get_aio_context(b)) == b);
    iothread_destroy(b);
    list = iothread_list();
    g_assert_cmpuint(list->len, ==, 0);
    g_ptr_array_unref(list);
}

/* --object's argument: key=value or JSON, the type required; its help. */
static void test_create_from_option(void)
{
    static const char *const refused[][2] = {
        { "id=x", "qom-type" },
        { "{\"id\": \"x\"}", "qom-type" },
        { "memory-backend-ram,id=x", "not supported" },
        { "{\"qom-type\": \"iothread\", \"id\": [1]}", "'id'" },
        { "{\"qom-type\": \"iothread\", \"id\": \"x\", \"poll-grow\": -1}",
          "poll-grow" },
        { "iothread,id=x,thread-id=7", "thread-id" },
    };
    g_autofree char *help = NULL;
    Error *err = NULL;
    IOThread *iot;

    iot = iothread_create_from_option(
        " {\"qom-type\": \"iothread\", \"id\": \"j\", \"poll-max-ns\": 0, "
        "\"poll-policy\": \"fixed\"}", &err);
    g_assert_no_error(err);
    g_assert_cmpstr(iothread_get_id(iot), ==, "j");
    assert_prop(iot, "poll-max-ns", "0");
    assert_prop(iot, "poll-policy", "fixed");
    iothread_destroy(iot);

    iot = iothread_create_from_option("iothread,id=k,aio-max-batch=4", &err);
    g_assert_no_error(err);
    assert_prop(iot, "aio-max-batch", "4");
    iothread_destroy(iot);

    for (size_t i = 0; i < G_N_ELEMENTS(refused); i++) {
        g_assert_null(iothread_create_from_option(refused[i][0], &err));
        g_assert_nonnull(err);
        g_test_message("%s: %s", refused[i][0], error_get_pretty(err));
        g_assert_nonnull(strstr(error_get_pretty(err), refused[i][1]));
        g_clear_error(&err);
    }

    g_assert_null(iothread_option_help("iothread,id=x"));
    help = iothread_option_help("help");
    g_assert_nonnull(strstr(help, "iothread"));
    g_free(help);
    help = iothread_option_help("iothread,help");
    /* Every property that may be set, and nothing read-only. */
    for (const IOThreadProperty *p = iothread_properties; p->name; p++) {
        g_autofree char *key = g_strdup_printf("  %s=", p->name);

        g_assert_true((strstr(help, key) != NULL) == (p->set != NULL));
    }
}

/* The property table: every entry reads back; thread-id is read-only. */
static void test_properties_table(void)
{
    IOThread *iot = iot_new("table", NULL);
    Error *err = NULL;
    int64_t v;

    for (const IOThreadProperty *p = iothread_properties; p->name; p++) {
        g_autofree char *str = get_prop(iot, p->name);

        g_assert_true(iothread_property_find(p->name) == p);
        if (p->type == IOTHREAD_PROP_INT) {
            g_autofree char *again = NULL;

            g_assert_true(iothread_get_property_int(iot, p->name, &v,
                                                    &err));
            g_assert_no_error(err);
            again = g_strdup_printf("%" PRId64, v);
            g_assert_cmpstr(str, ==, again);
        } else {
            g_assert_false(iothread_get_property_int(iot, p->name, &v,
                                                     &err));
            g_assert_nonnull(err);
            g_clear_error(&err);
        }
    }
    g_assert_null(iothread_property_find("no-such-prop"));
    g_assert_false(iothread_get_property_int(iot, "no-such-prop", &v, &err));
    g_assert_nonnull(strstr(error_get_pretty(err), "no-such-prop"));
    g_clear_error(&err);

    g_assert_true(iothread_get_property_int(iot, "thread-id", &v, &err));
    g_assert_cmpint(v, ==, iothread_get_thread_id(iot));
    g_assert_null(iothread_property_find("thread-id")->set);
    set_prop_bad(iot, "thread-id", "1", "not found");
    g_assert_false(iothread_set_property_int(iot, "thread-id", 1, NULL));
    iothread_destroy(iot);
}

static const TestCase tests[] = {
    { "/iothread/create-destroy", test_create_destroy },
    { "/iothread/create-from-string", test_create_from_string },
    { "/iothread/create-from-option", test_create_from_option },
    { "/iothread/create-errors", test_create_errors },
    { "/iothread/thread-name", test_thread_name },
    { "/iothread/timer-slack", test_timer_slack },
    { "/iothread/bh-runs-in-iothread", test_bh_runs_in_iothread },
    { "/iothread/destroy-runs-pending-bhs", test_destroy_runs_pending_bhs },
    { "/iothread/properties/defaults-and-readback", test_properties_defaults },
    { "/iothread/properties/bad-values", test_properties_bad_values },
    { "/iothread/properties/table", test_properties_table },
    { "/iothread/properties/change-under-load", test_properties_live },
    { "/iothread/cpu-affinity/set", test_cpu_affinity },
    { "/iothread/cpu-affinity/bad-lists", test_cpu_affinity_bad },
    { "/iothread/idle-cpu", test_idle_cpu },
    { "/iothread/destroy/self-rescheduling-bh",
      test_destroy_with_self_rescheduling_bh },
    { "/iothread/destroy/always-busy-poll-handler",
      test_destroy_with_always_busy_handler },
    { "/iothread/cpu-affinity/empty-elements",
      test_cpu_affinity_empty_elements },
    { "/iothread/registry", test_registry },
};

/* Below the 120 s meson timeout, so that the watchdog reports first. */
TEST_MAIN(tests, 90)

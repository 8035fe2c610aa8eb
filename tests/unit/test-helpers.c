/*
 * Helpers shared by the unit test programs (see test-helpers.h).
 *
 * Theory of operation: the watchdog keeps one static message buffer,
 * formatted (with the program name and the test's path) in the main
 * thread before each test arms alarm(), so that the SIGALRM handler only
 * has to write() it and abort(): both async-signal-safe.  PollSrc's handlers
 * run in the loop (its context's home thread); psrc_publish() and
 * psrc_wait_acked() are the producer's side and run in other threads; the
 * two sides meet only through the atomics in PollSrc (see test-helpers.h for
 * the model, and psrc_publish() for the fence that pairs with the loop's).
 */
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <glib.h>

#include "util/clock.h"
#include "util/keyval.h"
#include "test-helpers.h"

/* ------------------------------------------------------------------------ */
/* Tests, the watchdog, table-driven tests and main()                        */

static unsigned watchdog_seconds;
static char watchdog_msg[512];
static size_t watchdog_msg_len;

static void watchdog_fired(int sig)
{
    ssize_t r = write(STDERR_FILENO, watchdog_msg, watchdog_msg_len);

    (void)r;
    abort();
}

static void run_with_watchdog(gconstpointer data)
{
    const TestCase *tc = data;
    const char *prg = g_get_prgname();
    char *name = g_path_get_basename(prg ? prg : "test");
    int len;

    len = g_snprintf(watchdog_msg, sizeof(watchdog_msg),
                     "%s: watchdog: %s did not finish in %u s\n",
                     name, tc->path, watchdog_seconds);
    watchdog_msg_len = MIN((size_t)len, sizeof(watchdog_msg) - 1);
    g_free(name);

    signal(SIGALRM, watchdog_fired);
    alarm(watchdog_seconds);
    if (tc->fn) {
        tc->fn();
    } else {
        tc->fn_data(tc->data);
    }
    alarm(0);
}

void test_add_with_watchdog(const TestCase *tests, size_t n,
                            unsigned watchdog_s)
{
    g_assert_cmpuint(watchdog_s, >, 0);
    watchdog_seconds = watchdog_s;
    for (size_t i = 0; i < n; i++) {
        g_assert_true(!tests[i].fn != !tests[i].fn_data);
        g_test_add_data_func(tests[i].path, &tests[i], run_with_watchdog);
    }
}

void test_add_variants(const char *const *variants, size_t n_variants,
                       const VariantCheck *checks, size_t n_checks,
                       unsigned watchdog_s)
{
    /* Registered tests keep pointers into these: never freed. */
    static GPtrArray *keep;
    TestCase *tests = g_new0(TestCase, n_variants * n_checks);
    TestVariant *vars = g_new0(TestVariant, n_variants * n_checks);
    size_t k = 0;

    if (!keep) {
        keep = g_ptr_array_new();
    }
    g_ptr_array_add(keep, tests);
    g_ptr_array_add(keep, vars);
    for (size_t i = 0; i < n_variants; i++) {
        for (size_t j = 0; j < n_checks; j++, k++) {
            vars[k] = (TestVariant) { variants[i], checks[j].data };
            tests[k] = (TestCase) {
                .path = g_strdup_printf(checks[j].path, variants[i]),
                .fn_data = checks[j].fn,
                .data = &vars[k],
            };
            g_ptr_array_add(keep, (char *)tests[k].path);
        }
    }
    test_add_with_watchdog(tests, k, watchdog_s);
}

void test_add_rows(const void *rows, size_t n, size_t row_size,
                   void (*fn)(const void *), unsigned watchdog_s)
{
    /* Registered tests keep pointers into it: never freed. */
    TestCase *t = g_new0(TestCase, n);

    for (size_t i = 0; i < n; i++) {
        const void *row = (const char *)rows + i * row_size;

        t[i] = (TestCase) { .path = *(const char *const *)row,
                            .fn_data = fn, .data = row };
    }
    test_add_with_watchdog(t, n, watchdog_s);
}

int test_main(int argc, char **argv, const TestProgram *prog)
{
    int r;

    g_test_init(&argc, &argv, NULL);
    if (prog->setup) {
        prog->setup();
    }
    test_add_with_watchdog(prog->tests, prog->n_tests, prog->watchdog_s);
    r = g_test_run();
    if (prog->teardown) {
        prog->teardown();
    }
    return r;
}

/* ------------------------------------------------------------------------ */
/* Engine variants                                                           */

const bool o_direct = true;
const char *const all_engines[3] = { "threads", "native", "io_uring" };
const char *const kernel_engines[2] = { "native", "io_uring" };

EngineVariant engine_variant(const void *arg)
{
    const TestVariant *v = arg;

    return (EngineVariant) { v->variant, v->data == &o_direct };
}

/* ------------------------------------------------------------------------ */
/* Time                                                                      */

void sleep_ns(int64_t ns)
{
    g_usleep(ns / 1000);
}

void spin_ns(int64_t ns)
{
    int64_t end = clock_now_ns() + ns;

    while (clock_now_ns() < end) {
        cpu_relax();
    }
}

/* ------------------------------------------------------------------------ */
/* Constructors                                                              */

AioContext *ctx_new(void)
{
    Error *err = NULL;
    AioContext *ctx = aio_context_new(&err);

    g_assert_no_error(err);
    g_assert_nonnull(ctx);
    return ctx;
}

IOThread *iot_new(const char *id, const char *props)
{
    Error *err = NULL;
    GPtrArray *opts = NULL;
    IOThread *iot;

    if (props) {
        opts = keyval_parse(props, NULL, &err);
        g_assert_no_error(err);
        g_assert_nonnull(opts);
    }
    iot = iothread_create(id, opts, &err);
    g_assert_no_error(err);
    g_assert_nonnull(iot);
    if (opts) {
        g_ptr_array_unref(opts);
    }
    return iot;
}

/* ------------------------------------------------------------------------ */
/* Threads                                                                   */

void gate_init(Gate *g, bool open)
{
    g_mutex_init(&g->lock);
    g_cond_init(&g->cond);
    g->open = open;
}

void gate_open(Gate *g)
{
    g_mutex_lock(&g->lock);
    g->open = true;
    g_cond_broadcast(&g->cond);
    g_mutex_unlock(&g->lock);
}

void gate_pass(Gate *g)
{
    g_mutex_lock(&g->lock);
    while (!g->open) {
        g_cond_wait(&g->cond, &g->lock);
    }
    g_mutex_unlock(&g->lock);
}

void gate_destroy(Gate *g)
{
    g_mutex_clear(&g->lock);
    g_cond_clear(&g->cond);
}

static gpointer delayed_call_thread(gpointer opaque)
{
    DelayedCall *dc = opaque;

    sleep_ns(dc->delay_ns);
    dc->fn(dc->opaque);
    return NULL;
}

void delayed_call_start(DelayedCall *dc, int64_t delay_ns,
                        void (*fn)(void *opaque), void *opaque)
{
    *dc = (DelayedCall) { .delay_ns = delay_ns, .fn = fn, .opaque = opaque };
    dc->thread = g_thread_new("delayed-call", delayed_call_thread, dc);
}

void delayed_call_join(DelayedCall *dc)
{
    g_thread_join(dc->thread);
}

int count_dir_entries(const char *path)
{
    GDir *d = g_dir_open(path, 0, NULL);
    int n = 0;

    g_assert_nonnull(d);
    while (g_dir_read_name(d)) {
        n++;
    }
    g_dir_close(d);
    return n;
}

/* ------------------------------------------------------------------------ */
/* Data buffers                                                              */

void *test_aligned_buf(size_t align, size_t size)
{
    void *p = NULL;

    g_assert_cmpint(posix_memalign(&p, align, MAX(size, 1)), ==, 0);
    return p;
}

void fill_random(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = g_test_rand_int();
    }
}

void assert_same(const uint8_t *got, const uint8_t *want, size_t n,
                 int64_t offset, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            g_error("%s: byte at %" PRId64 " is 0x%02x, expected 0x%02x",
                    what, offset + (int64_t)i, got[i], want[i]);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* PollSrc                                                                   */

static PollSrc *psrc_of(EventNotifier *e)
{
    return (PollSrc *)e;
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static void psrc_consume(PollSrc *psrc)
{
    uint64_t a = atomic_load(&psrc->avail);

    if (a != psrc->seen) {
        psrc->seen = a;
        atomic_store(&psrc->acked, a);
    }
}

static bool psrc_io_poll(EventNotifier *e)
{
    PollSrc *psrc = psrc_of(e);

    /*
     * Only the home thread counts: a plain increment, no locked
     * instruction that would act as a full barrier and hide a missing one
     * in the loop.
     */
    atomic_store_explicit(&psrc->polls,
                          atomic_load_explicit(&psrc->polls,
                                               memory_order_relaxed) + 1,
                          memory_order_relaxed);
    if (psrc->lie_after_end && psrc->just_ended) {
        psrc->just_ended = false;
        return false;
    }
    return atomic_load(&psrc->avail) != psrc->seen;
}

static void psrc_io_poll_ready(EventNotifier *e)
{
    PollSrc *psrc = psrc_of(e);

    atomic_fetch_add(&psrc->poll_ready, 1);
    if (psrc->ended) {
        /* No io_poll_begin since io_poll_end: found by the re-check. */
        atomic_fetch_add(&psrc->recheck_hits, 1);
        psrc->ended = false;
    }
    psrc_consume(psrc);
}

static void psrc_io_read(EventNotifier *e)
{
    PollSrc *psrc = psrc_of(e);
    uint64_t before = psrc->seen;

    event_notifier_test_and_clear(&psrc->kick);
    psrc->ended = false;
    atomic_fetch_add(&psrc->reads, 1);
    psrc_consume(psrc);
    if (psrc->seen != before) {
        atomic_fetch_add(&psrc->reads_work, 1);
    }
}

static void psrc_io_poll_begin(EventNotifier *e)
{
    PollSrc *psrc = psrc_of(e);

    atomic_fetch_add(&psrc->begins, 1);
    psrc->ended = false;
    if (atomic_exchange(&psrc->begun, true)) {
        atomic_fetch_add(&psrc->alternation_errors, 1);
    }
    atomic_store(&psrc->no_notify, true);
}

/* io_poll_end side of the rendezvous: wait (bounded) for the producer. */
static bool psrc_wait_flag(_Atomic bool *flag)
{
    int64_t end = clock_now_ns() + 50000;

    while (!atomic_load(flag)) {
        if (clock_now_ns() > end) {
            return false;
        }
        cpu_relax();
    }
    return true;
}

static void psrc_io_poll_end(EventNotifier *e)
{
    PollSrc *psrc = psrc_of(e);
    uint64_t r = xorshift(&psrc->rng);
    int mode = atomic_load(&psrc->hs_want) ? (int)(r % 3) : -1;

    atomic_store(&psrc->end_started, true);
    atomic_fetch_add(&psrc->ends, 1);
    if (!atomic_exchange(&psrc->begun, false)) {
        atomic_fetch_add(&psrc->alternation_errors, 1);
    }
    psrc->ended = true;
    psrc->just_ended = psrc->lie_after_end;
    if (mode == 0 && psrc_wait_flag(&psrc->hs_published)) {
        /* Published while kicks were off: only the re-check can see it. */
        atomic_fetch_add(&psrc->hs_before_store, 1);
    }
    if (mode == 2) {
        /*
         * Store as soon as the producer is about to publish, so that our
         * store and its publish race within nanoseconds (the store-buffer
         * window that the loop's full fence closes).
         */
        if (psrc_wait_flag(&psrc->hs_go)) {
            atomic_fetch_add(&psrc->hs_simultaneous, 1);
        }
    } else {
        if (psrc->linger_before_ns) {
            spin_ns(psrc->linger_before_ns);
        }
        /* A third of the time linger a few hundred ns before the store. */
        if (psrc->linger && (r >> 2) % 3 == 1) {
            spin_ns(100 + (r >> 8) % 400);
        }
    }
    /*
     * A plain (release) store, as a virtqueue's flag write in guest memory
     * would be: ordering it before the re-check is the loop's job.
     */
    atomic_store_explicit(&psrc->no_notify, false, memory_order_release);
    if (mode == 2) {
        return;
    }
    /* A third of the time linger after it. */
    if (psrc->linger && (r >> 2) % 3 == 2) {
        spin_ns(100 + (r >> 8) % 400);
    }
    if (mode == 1 && psrc_wait_flag(&psrc->hs_published)) {
        /* The kick races with the loop's re-check. */
        atomic_fetch_add(&psrc->hs_after_store, 1);
    }
}

void psrc_init(PollSrc *psrc, AioContext *ctx, bool with_hooks)
{
    g_assert(aio_context_in_home_thread(ctx));
    memset(psrc, 0, sizeof(*psrc));
    psrc->ctx = ctx;
    psrc->rng = 0x9e3779b97f4a7c15ULL;
    g_assert_cmpint(event_notifier_init(&psrc->kick, false), ==, 0);
    aio_set_event_notifier(ctx, &psrc->kick, psrc_io_read, psrc_io_poll,
                           psrc_io_poll_ready);
    if (with_hooks) {
        aio_set_event_notifier_poll(ctx, &psrc->kick, psrc_io_poll_begin,
                                    psrc_io_poll_end);
    }
}

void psrc_cleanup(PollSrc *psrc)
{
    g_assert(aio_context_in_home_thread(psrc->ctx));
    aio_set_event_notifier(psrc->ctx, &psrc->kick, NULL, NULL, NULL);
    event_notifier_cleanup(&psrc->kick);
}

void psrc_publish(PollSrc *psrc)
{
    atomic_fetch_add(&psrc->avail, 1);
    /*
     * Full fence: the store to avail must be visible before we read
     * no_notify.  Pairs with the loop's full barrier between io_poll_end
     * (which clears no_notify) and the final io_poll (which reads avail).
     */
    atomic_thread_fence(memory_order_seq_cst);
    if (!atomic_load(&psrc->no_notify)) {
        atomic_fetch_add(&psrc->kicks, 1);
        g_assert_cmpint(event_notifier_set(&psrc->kick), ==, 0);
    }
}

bool psrc_wait_acked(PollSrc *psrc, uint64_t n, int64_t timeout_ns)
{
    int64_t start = clock_now_ns();
    int64_t now = start;

    while (atomic_load(&psrc->acked) < n) {
        now = clock_now_ns();
        if (now - start > timeout_ns) {
            return atomic_load(&psrc->acked) >= n;
        }
        if (now - start < 100000) {
            cpu_relax();
        } else {
            sched_yield();
        }
    }
    return true;
}

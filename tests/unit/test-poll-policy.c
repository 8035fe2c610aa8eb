/*
 * Unit tests for the qemu-classic poll policy (poll-policy.h), fed with
 * synthetic wait times: no event loop, no clock, fully deterministic.
 *
 * Rules under test, for adjust(params, win, wait_ns, had_event):
 *   max_ns == 0                      -> window 0
 *   window > max_ns                  -> clamped to max_ns first
 *   had_event, wait <= window        -> KEPT
 *   had_event, wait > max_ns         -> SHRANK (÷shrink, or 0; KEPT if 0)
 *   had_event, window < wait <= max  -> GREW (0 -> 4000, else ×grow or ×2,
 *                                       clamped to max, saturating)
 *   no event,  wait > max_ns         -> SHRANK as above
 *   no event,  wait <= max_ns        -> KEPT
 * spin_ns(params, largest) = min(largest, max_ns).
 */
#include <stdint.h>
#include <string.h>
#include <glib.h>

#include "util/aio.h"
#include "test-helpers.h"

static const AioPollPolicyOps *policy(void)
{
    return &aio_poll_policy_qemu_classic;
}

/* What the loop hands qemu-classic after a turn: the turn waited wait_ns
 * (until dispatch), with or without an event for this source. */
static AioPollAdjustment adjust(int64_t max_ns, int64_t grow, int64_t shrink,
                                AioPollSource *win, int64_t wait_ns,
                                bool had_event)
{
    AioPollState st = {
        .params = { .max_ns = max_ns, .grow = grow, .shrink = shrink },
    };
    AioPollTurn turn = { .start_ns = 0, .waited_ns = wait_ns };

    win->ev = had_event;
    win->ev_exact = false;
    return policy()->learn(&st, win, &turn);
}

/* One event with wait_ns; check the result and the new window. */
static void step(int64_t max_ns, int64_t grow, int64_t shrink,
                 AioPollSource *win, int64_t wait_ns, bool had_event,
                 AioPollAdjustment expect_adj, int64_t expect_ns)
{
    int64_t before = win->window_ns;
    AioPollAdjustment adj = adjust(max_ns, grow, shrink, win, wait_ns,
                                   had_event);

    if (adj != expect_adj || win->window_ns != expect_ns) {
        g_test_message("adjust(max=%" G_GINT64_FORMAT ", grow=%" G_GINT64_FORMAT
                       ", shrink=%" G_GINT64_FORMAT ", ns=%" G_GINT64_FORMAT
                       ", wait=%" G_GINT64_FORMAT ", event=%d) gave %d/%"
                       G_GINT64_FORMAT ", expected %d/%" G_GINT64_FORMAT,
                       max_ns, grow, shrink, before, wait_ns, had_event,
                       adj, win->window_ns, expect_adj, expect_ns);
    }
    g_assert_cmpint(adj, ==, expect_adj);
    g_assert_cmpint(win->window_ns, ==, expect_ns);
}

/*
 * The step sequences: each starts from a window and runs its steps, each
 * one event (or turn without one) whose result and new window must be as
 * given.  A step's from, unless KEEP, sets the window first.  The table
 * assumes the defaults below.
 */
G_STATIC_ASSERT(AIO_POLL_MAX_NS_DEFAULT == 32768);
G_STATIC_ASSERT(AIO_POLL_START_NS == 4000);

/* A step's from when it starts from the window the last one left. */
enum { KEEP = -1 };

typedef struct Step {
    int64_t from;
    int64_t max_ns, grow, shrink;
    int64_t wait_ns;
    bool event;
    AioPollAdjustment adj;
    int64_t ns;
} Step;

typedef struct StepTest {
    const char *name;
    int64_t window_ns;
    unsigned n;
    Step steps[16];
} StepTest;

static const StepTest step_tests[] = {
    /* The default max (32768). */
    { "default-grow-sequence", 0, 7, {
        { KEEP, 32768, 0, 0, 1000, true, AIO_POLL_GREW, 4000 },
        { KEEP, 32768, 0, 0, 5000, true, AIO_POLL_GREW, 8000 },
        { KEEP, 32768, 0, 0, 9000, true, AIO_POLL_GREW, 16000 },
        { KEEP, 32768, 0, 0, 17000, true, AIO_POLL_GREW, 32000 },
        { KEEP, 32768, 0, 0, 32500, true, AIO_POLL_GREW, 32768 },
        /* At the top: any wait <= max is within the window. */
        { KEEP, 32768, 0, 0, 32768, true, AIO_POLL_KEPT, 32768 },
        { KEEP, 32768, 0, 0, 1, true, AIO_POLL_KEPT, 32768 },
    } },
    { "grow-needs-longer-wait", 0, 5, {
        /* wait == window: kept, at every size. */
        { KEEP, 32768, 0, 0, 0, true, AIO_POLL_KEPT, 0 },
        { 4000, 32768, 0, 0, 4000, true, AIO_POLL_KEPT, 4000 },
        { KEEP, 32768, 0, 0, 3999, true, AIO_POLL_KEPT, 4000 },
        { KEEP, 32768, 0, 0, 4001, true, AIO_POLL_GREW, 8000 },
        /* Growth is by a factor, not to the wait: one step per event. */
        { 4000, 1000000, 0, 0, 900000, true, AIO_POLL_GREW, 8000 },
    } },
    { "shrink-to-zero", 16000, 4, {
        /* wait > max with shrink == 0: reset. */
        { KEEP, 32768, 0, 0, 40000, true, AIO_POLL_SHRANK, 0 },
        /* Already 0: nothing left to shrink. */
        { KEEP, 32768, 0, 0, 40000, true, AIO_POLL_KEPT, 0 },
        { KEEP, 32768, 0, 0, 40000, false, AIO_POLL_KEPT, 0 },
        { 32768, 32768, 0, 0, 32769, true, AIO_POLL_SHRANK, 0 },
    } },
    { "custom-grow-shrink", 0, 13, {
        /* grow=4: 0 -> 4000 -> 16000 -> 64000 -> 100000 (clamped). */
        { KEEP, 100000, 4, 2, 1, true, AIO_POLL_GREW, 4000 },
        { KEEP, 100000, 4, 2, 5000, true, AIO_POLL_GREW, 16000 },
        { KEEP, 100000, 4, 2, 20000, true, AIO_POLL_GREW, 64000 },
        { KEEP, 100000, 4, 2, 70000, true, AIO_POLL_GREW, 100000 },
        /* shrink=2: halves on a wait beyond max, with or without an event. */
        { KEEP, 100000, 4, 2, 100001, true, AIO_POLL_SHRANK, 50000 },
        { KEEP, 100000, 4, 2, 5000000, false, AIO_POLL_SHRANK, 25000 },
        { KEEP, 100000, 4, 2, 200000, true, AIO_POLL_SHRANK, 12500 },
        /* shrink=3: integer division. */
        { 10000, 100000, 4, 3, 200000, true, AIO_POLL_SHRANK, 3333 },
        { KEEP, 100000, 4, 3, 200000, true, AIO_POLL_SHRANK, 1111 },
        /* Shrinking to 0 by division is a shrink; from 0 it is not. */
        { 1, 100000, 4, 2, 200000, true, AIO_POLL_SHRANK, 0 },
        { KEEP, 100000, 4, 2, 200000, true, AIO_POLL_KEPT, 0 },
        /* grow=3 from a non-power-of-two window. */
        { 5000, 100000, 3, 0, 6000, true, AIO_POLL_GREW, 15000 },
        /* The first step is always 4000, whatever the factor. */
        { 0, 100000, 10, 0, 100, true, AIO_POLL_GREW, 4000 },
    } },
    { "shrink-by-one-keeps", 16000, 6, {
        /*
         * poll-shrink=1 divides by 1: a wait beyond max changes nothing, so it
         * is not a shrink (it must not count in the statistics as one).
         */
        { KEEP, 32768, 0, 1, 40000, true, AIO_POLL_KEPT, 16000 },
        { KEEP, 32768, 0, 1, 1000000000, true, AIO_POLL_KEPT, 16000 },
        { KEEP, 32768, 0, 1, 40000, false, AIO_POLL_KEPT, 16000 },
        { 32768, 32768, 0, 1, INT64_MAX, true, AIO_POLL_KEPT, 32768 },
        /* Growing still works. */
        { 4000, 32768, 0, 1, 5000, true, AIO_POLL_GREW, 8000 },
        /* And any other factor still shrinks. */
        { KEEP, 32768, 0, 2, 40000, true, AIO_POLL_SHRANK, 4000 },
    } },
    { "max-below-start", 0, 5, {
        { KEEP, 1000, 0, 0, 500, true, AIO_POLL_GREW, 1000 },
        { KEEP, 1000, 0, 0, 800, true, AIO_POLL_KEPT, 1000 },
        { KEEP, 1000, 0, 0, 1000, true, AIO_POLL_KEPT, 1000 },
        { KEEP, 1000, 0, 0, 1001, true, AIO_POLL_SHRANK, 0 },
        /* max = 1 ns. */
        { 0, 1, 0, 0, 1, true, AIO_POLL_GREW, 1 },
    } },
    { "lower-max-clamps", 32000, 4, {
        /* max lowered to 10000: clamp, then wait 5000 <= 10000 is kept. */
        { KEEP, 10000, 0, 0, 5000, true, AIO_POLL_KEPT, 10000 },
        /* Clamp also applies on a turn without an event. */
        { 32000, 10000, 0, 0, 5000, false, AIO_POLL_KEPT, 10000 },
        /* Clamped to exactly max: a wait of max is within the window. */
        { 32000, 20000, 0, 0, 20000, true, AIO_POLL_KEPT, 20000 },
        /* Clamp then shrink (halving the clamped value, not the old one). */
        { 32000, 10000, 0, 2, 20000, true, AIO_POLL_SHRANK, 5000 },
    } },
    { "no-event", 16000, 6, {
        /* Waited without an event, within max: nothing learned, kept. */
        { KEEP, 32768, 0, 0, 100, false, AIO_POLL_KEPT, 16000 },
        { KEEP, 32768, 0, 0, 20000, false, AIO_POLL_KEPT, 16000 },
        { KEEP, 32768, 0, 0, 32768, false, AIO_POLL_KEPT, 16000 },
        /* No event never grows, even from 0. */
        { 0, 32768, 0, 0, 20000, false, AIO_POLL_KEPT, 0 },
        /* Waited longer than max without an event: idle, shrink. */
        { 16000, 32768, 0, 0, 32769, false, AIO_POLL_SHRANK, 0 },
        { 16000, 32768, 0, 4, 1000000000, false, AIO_POLL_SHRANK, 4000 },
    } },
    { "saturating-growth", 4000, 6, {
        /* Huge factor and max: the product saturates, no overflow (UBSan). */
        { KEEP, INT64_MAX, INT64_MAX, 0, 5000,
          true, AIO_POLL_GREW, INT64_MAX },
        { KEEP, INT64_MAX, INT64_MAX, 0, INT64_MAX,
          true, AIO_POLL_KEPT, INT64_MAX },
        /* Huge factor, ordinary max. */
        { 4000, 1000000000, INT64_MAX, 0, 5000,
          true, AIO_POLL_GREW, 1000000000 },
        /* A factor that overflows only on the second step. */
        { 4000, INT64_MAX, INT64_MAX / 8000, 0, 5000,
          true, AIO_POLL_GREW, 4000 * (INT64_MAX / 8000) },
        { KEEP, INT64_MAX, INT64_MAX / 8000, 0, INT64_MAX - 1,
          true, AIO_POLL_GREW, INT64_MAX },
        /* Doubling near the top of the range. */
        { INT64_MAX / 2 + 1, INT64_MAX, 0, 0, INT64_MAX,
          true, AIO_POLL_GREW, INT64_MAX },
    } },
};

static void test_steps(const void *arg)
{
    const TestVariant *v = arg;

    for (size_t i = 0; i < G_N_ELEMENTS(step_tests); i++) {
        const StepTest *t = &step_tests[i];
        AioPollSource w = { .window_ns = t->window_ns };

        if (strcmp(t->name, v->variant)) {
            continue;
        }
        for (unsigned j = 0; j < t->n; j++) {
            const Step *st = &t->steps[j];

            if (st->from != KEEP) {
                w.window_ns = st->from;
            }
            step(st->max_ns, st->grow, st->shrink, &w, st->wait_ns, st->event,
                 st->adj, st->ns);
        }
        return;
    }
    g_assert_not_reached();
}

static void test_max_zero_resets(void)
{
    AioPollSource w = { .window_ns = 16000 };
    AioPollAdjustment adj;

    adjust(0, 0, 0, &w, 100, true);
    g_assert_cmpint(w.window_ns, ==, 0);

    w.window_ns = 32768;
    adjust(0, 2, 2, &w, 100000, false);
    g_assert_cmpint(w.window_ns, ==, 0);

    /* A disabled window never grows. */
    w.window_ns = 0;
    adj = adjust(0, 0, 0, &w, 100, true);
    g_assert_cmpint(w.window_ns, ==, 0);
    g_assert_cmpint(adj, !=, AIO_POLL_GREW);
}

static void test_kept_when_within_window(void)
{
    AioPollSource w = { .window_ns = 16000 };

    for (int64_t wait = 0; wait <= 16000; wait += 1000) {
        step(32768, 0, 0, &w, wait, true, AIO_POLL_KEPT, 16000);
    }
}

static int64_t plan(int64_t max_ns, int64_t window)
{
    AioPollState st = { .params = { .max_ns = max_ns } };
    AioPollSource src = { .window_ns = window }, other = { .window_ns = 1000 };
    AioPollSource *srcs[] = { &src, &other };
    AioPollTurn turn = { .timer_ns = -1 };

    return policy()->plan(&st, srcs, 2, &turn);
}

/* A turn spins for the largest handler window, at most poll-max-ns. */
static void test_spin_ns(void)
{
    g_assert_cmpint(plan(32768, 0), ==, 1000);
    g_assert_cmpint(plan(32768, 4000), ==, 4000);
    g_assert_cmpint(plan(32768, 32768), ==, 32768);
    g_assert_cmpint(plan(32768, 100000), ==, 32768);
    g_assert_cmpint(plan(32768, INT64_MAX), ==, 32768);
    g_assert_cmpint(plan(0, 16000), ==, 0);
    g_assert_cmpint(plan(INT64_MAX, 123456), ==, 123456);
}

static void test_find(void)
{
    static const char *const names[] = {
        "fixed", "qemu-classic", "qemu-weighted", "predictive",
    };

    for (size_t i = 0; i < G_N_ELEMENTS(names); i++) {
        const AioPollPolicyOps *ops = aio_poll_policy_find(names[i]);

        g_assert_nonnull(ops);
        g_assert_cmpstr(ops->name, ==, names[i]);
        g_assert_nonnull(ops->plan);
        g_assert_nonnull(ops->learn);
        g_assert_nonnull(strstr(aio_poll_policy_names(), names[i]));
    }
    /* The old name of qemu-classic still works. */
    g_assert_true(aio_poll_policy_find("adaptive") ==
                  &aio_poll_policy_qemu_classic);
    g_assert_true(&aio_poll_policy_default == &aio_poll_policy_predictive);
    g_assert_null(aio_poll_policy_find("no-such-policy"));
    g_assert_null(aio_poll_policy_find(""));
    g_assert_null(aio_poll_policy_find("Predictive"));
    g_assert_null(aio_poll_policy_find("fixed2"));
}

static const char *const step_test_names[] = {
    "default-grow-sequence",
    "grow-needs-longer-wait",
    "shrink-to-zero",
    "custom-grow-shrink",
    "shrink-by-one-keeps",
    "max-below-start",
    "lower-max-clamps",
    "no-event",
    "saturating-growth",
};

static const VariantCheck step_checks[] = {
    { "/poll-policy/qemu-classic/%s", test_steps },
};

static const TestCase tests[] = {
    { "/poll-policy/qemu-classic/max-zero-resets", test_max_zero_resets },
    { "/poll-policy/qemu-classic/kept-within-window",
      test_kept_when_within_window },
    { "/poll-policy/qemu-classic/spin-ns", test_spin_ns },
    { "/poll-policy/find", test_find },
};

static void add_step_tests(void)
{
    test_add_variants(step_test_names, G_N_ELEMENTS(step_test_names),
                      step_checks, G_N_ELEMENTS(step_checks), 25);
}

/* Below the 30 s meson timeout, so that the watchdog reports first. */
TEST_MAIN_SETUP(tests, 25, add_step_tests, NULL)

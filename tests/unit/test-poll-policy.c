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

static void test_default_grow_sequence(void)
{
    AioPollSource w = { .window_ns = 0 };
    const int64_t max = AIO_POLL_MAX_NS_DEFAULT;

    g_assert_cmpint(AIO_POLL_MAX_NS_DEFAULT, ==, 32768);
    g_assert_cmpint(AIO_POLL_START_NS, ==, 4000);

    step(max, 0, 0, &w, 1000, true, AIO_POLL_GREW, 4000);
    step(max, 0, 0, &w, 5000, true, AIO_POLL_GREW, 8000);
    step(max, 0, 0, &w, 9000, true, AIO_POLL_GREW, 16000);
    step(max, 0, 0, &w, 17000, true, AIO_POLL_GREW, 32000);
    step(max, 0, 0, &w, 32500, true, AIO_POLL_GREW, 32768);
    /* At the top: any wait <= max is within the window. */
    step(max, 0, 0, &w, 32768, true, AIO_POLL_KEPT, 32768);
    step(max, 0, 0, &w, 1, true, AIO_POLL_KEPT, 32768);
}

static void test_grow_needs_longer_wait(void)
{
    AioPollSource w = { .window_ns = 0 };

    /* wait == window: kept, at every size. */
    step(32768, 0, 0, &w, 0, true, AIO_POLL_KEPT, 0);
    w.window_ns = 4000;
    step(32768, 0, 0, &w, 4000, true, AIO_POLL_KEPT, 4000);
    step(32768, 0, 0, &w, 3999, true, AIO_POLL_KEPT, 4000);
    step(32768, 0, 0, &w, 4001, true, AIO_POLL_GREW, 8000);
    /* Growth is by a factor, not to the wait: one step per event. */
    w.window_ns = 4000;
    step(1000000, 0, 0, &w, 900000, true, AIO_POLL_GREW, 8000);
}

static void test_shrink_to_zero(void)
{
    AioPollSource w = { .window_ns = 16000 };

    /* wait > max with shrink == 0: reset. */
    step(32768, 0, 0, &w, 40000, true, AIO_POLL_SHRANK, 0);
    /* Already 0: nothing left to shrink. */
    step(32768, 0, 0, &w, 40000, true, AIO_POLL_KEPT, 0);
    step(32768, 0, 0, &w, 40000, false, AIO_POLL_KEPT, 0);

    w.window_ns = 32768;
    step(32768, 0, 0, &w, 32769, true, AIO_POLL_SHRANK, 0);
}

static void test_custom_factors(void)
{
    AioPollSource w = { .window_ns = 0 };
    const int64_t max = 100000;

    /* grow=4: 0 -> 4000 -> 16000 -> 64000 -> 100000 (clamped). */
    step(max, 4, 2, &w, 1, true, AIO_POLL_GREW, 4000);
    step(max, 4, 2, &w, 5000, true, AIO_POLL_GREW, 16000);
    step(max, 4, 2, &w, 20000, true, AIO_POLL_GREW, 64000);
    step(max, 4, 2, &w, 70000, true, AIO_POLL_GREW, 100000);
    /* shrink=2: halves on a wait beyond max, with or without an event. */
    step(max, 4, 2, &w, 100001, true, AIO_POLL_SHRANK, 50000);
    step(max, 4, 2, &w, 5000000, false, AIO_POLL_SHRANK, 25000);
    step(max, 4, 2, &w, 200000, true, AIO_POLL_SHRANK, 12500);

    /* shrink=3: integer division. */
    w.window_ns = 10000;
    step(max, 4, 3, &w, 200000, true, AIO_POLL_SHRANK, 3333);
    step(max, 4, 3, &w, 200000, true, AIO_POLL_SHRANK, 1111);

    /* Shrinking to 0 by division is a shrink; from 0 it is not. */
    w.window_ns = 1;
    step(max, 4, 2, &w, 200000, true, AIO_POLL_SHRANK, 0);
    step(max, 4, 2, &w, 200000, true, AIO_POLL_KEPT, 0);

    /* grow=3 from a non-power-of-two window. */
    w.window_ns = 5000;
    step(max, 3, 0, &w, 6000, true, AIO_POLL_GREW, 15000);

    /* The first step is always 4000, whatever the factor. */
    w.window_ns = 0;
    step(max, 10, 0, &w, 100, true, AIO_POLL_GREW, 4000);
}

static void test_shrink_by_one_keeps(void)
{
    AioPollSource w = { .window_ns = 16000 };

    /*
     * poll-shrink=1 divides by 1: a wait beyond max changes nothing, so it
     * is not a shrink (it must not count in the statistics as one).
     */
    step(32768, 0, 1, &w, 40000, true, AIO_POLL_KEPT, 16000);
    step(32768, 0, 1, &w, 1000000000, true, AIO_POLL_KEPT, 16000);
    step(32768, 0, 1, &w, 40000, false, AIO_POLL_KEPT, 16000);
    w.window_ns = 32768;
    step(32768, 0, 1, &w, INT64_MAX, true, AIO_POLL_KEPT, 32768);
    /* Growing still works. */
    w.window_ns = 4000;
    step(32768, 0, 1, &w, 5000, true, AIO_POLL_GREW, 8000);
    /* And any other factor still shrinks. */
    step(32768, 0, 2, &w, 40000, true, AIO_POLL_SHRANK, 4000);
}

static void test_max_below_start(void)
{
    AioPollSource w = { .window_ns = 0 };

    step(1000, 0, 0, &w, 500, true, AIO_POLL_GREW, 1000);
    step(1000, 0, 0, &w, 800, true, AIO_POLL_KEPT, 1000);
    step(1000, 0, 0, &w, 1000, true, AIO_POLL_KEPT, 1000);
    step(1000, 0, 0, &w, 1001, true, AIO_POLL_SHRANK, 0);

    /* max = 1 ns. */
    w.window_ns = 0;
    step(1, 0, 0, &w, 1, true, AIO_POLL_GREW, 1);
}

static void test_lower_max_clamps(void)
{
    AioPollSource w = { .window_ns = 32000 };

    /* max lowered to 10000: clamp, then wait 5000 <= 10000 is kept. */
    step(10000, 0, 0, &w, 5000, true, AIO_POLL_KEPT, 10000);

    /* Clamp also applies on a turn without an event. */
    w.window_ns = 32000;
    step(10000, 0, 0, &w, 5000, false, AIO_POLL_KEPT, 10000);

    /* Clamped to exactly max: a wait of max is within the window. */
    w.window_ns = 32000;
    step(20000, 0, 0, &w, 20000, true, AIO_POLL_KEPT, 20000);

    /* Clamp then shrink (halving the clamped value, not the old one). */
    w.window_ns = 32000;
    step(10000, 0, 2, &w, 20000, true, AIO_POLL_SHRANK, 5000);
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

static void test_no_event(void)
{
    AioPollSource w = { .window_ns = 16000 };

    /* Waited without an event, within max: nothing learned, kept. */
    step(32768, 0, 0, &w, 100, false, AIO_POLL_KEPT, 16000);
    step(32768, 0, 0, &w, 20000, false, AIO_POLL_KEPT, 16000);
    step(32768, 0, 0, &w, 32768, false, AIO_POLL_KEPT, 16000);
    /* No event never grows, even from 0. */
    w.window_ns = 0;
    step(32768, 0, 0, &w, 20000, false, AIO_POLL_KEPT, 0);
    /* Waited longer than max without an event: idle, shrink. */
    w.window_ns = 16000;
    step(32768, 0, 0, &w, 32769, false, AIO_POLL_SHRANK, 0);
    w.window_ns = 16000;
    step(32768, 0, 4, &w, 1000000000, false, AIO_POLL_SHRANK, 4000);
}

static void test_saturating_growth(void)
{
    AioPollSource w = { .window_ns = 4000 };

    /* Huge factor and max: the product saturates, no overflow (UBSan). */
    step(INT64_MAX, INT64_MAX, 0, &w, 5000, true, AIO_POLL_GREW, INT64_MAX);
    step(INT64_MAX, INT64_MAX, 0, &w, INT64_MAX, true, AIO_POLL_KEPT,
         INT64_MAX);

    /* Huge factor, ordinary max. */
    w.window_ns = 4000;
    step(1000000000, INT64_MAX, 0, &w, 5000, true, AIO_POLL_GREW, 1000000000);

    /* A factor that overflows only on the second step. */
    w.window_ns = 4000;
    step(INT64_MAX, INT64_MAX / 8000, 0, &w, 5000, true, AIO_POLL_GREW,
         4000 * (INT64_MAX / 8000));
    step(INT64_MAX, INT64_MAX / 8000, 0, &w, INT64_MAX - 1, true,
         AIO_POLL_GREW, INT64_MAX);

    /* Doubling near the top of the range. */
    w.window_ns = INT64_MAX / 2 + 1;
    step(INT64_MAX, 0, 0, &w, INT64_MAX, true, AIO_POLL_GREW, INT64_MAX);
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

static const TestCase tests[] = {
    { "/poll-policy/qemu-classic/default-grow-sequence",
      test_default_grow_sequence },
    { "/poll-policy/qemu-classic/grow-needs-longer-wait",
      test_grow_needs_longer_wait },
    { "/poll-policy/qemu-classic/shrink-to-zero", test_shrink_to_zero },
    { "/poll-policy/qemu-classic/custom-grow-shrink", test_custom_factors },
    { "/poll-policy/qemu-classic/shrink-by-one-keeps",
      test_shrink_by_one_keeps },
    { "/poll-policy/qemu-classic/max-below-start", test_max_below_start },
    { "/poll-policy/qemu-classic/lower-max-clamps", test_lower_max_clamps },
    { "/poll-policy/qemu-classic/max-zero-resets", test_max_zero_resets },
    { "/poll-policy/qemu-classic/kept-within-window",
      test_kept_when_within_window },
    { "/poll-policy/qemu-classic/no-event", test_no_event },
    { "/poll-policy/qemu-classic/saturating-growth", test_saturating_growth },
    { "/poll-policy/qemu-classic/spin-ns", test_spin_ns },
    { "/poll-policy/find", test_find },
};

/* Below the 30 s meson timeout, so that the watchdog reports first. */
TEST_MAIN(tests, 25)

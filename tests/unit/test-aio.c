/*
 * Unit tests for the AioContext event loop (util/aio.h).
 *
 * Theory of operation
 * -------------------
 * Each test creates its own AioContext; the test's main thread is its home
 * thread and runs aio_poll().  Other threads play the roles the loop has in
 * real life: a guest driver publishing virtqueue work, a thread scheduling
 * bottom halves, a timer expiring.
 *
 * Most polling tests use PollSrc (test-helpers.h), a pollable source with a
 * ring's notification protocol but no ring:
 * another thread publishes messages on it and the loop consumes them,
 * polling or woken by the eventfd kick.  The producer waits for each
 * message to be acknowledged, with a timeout: a message that is never
 * consumed is a lost wakeup, which the producer reports and then breaks
 * the loop out of epoll with aio_notify().
 *
 * Windows are grown on purpose with a large poll-max-ns and a huge
 * poll-grow, so that a few events 1 ms apart open a window of up to 1 s;
 * tests then check that BHs, aio_notify() and timers cut such a window
 * short.  Time bounds are generous (tens to hundreds of ms) because the
 * tests run on a noisy shared 2-CPU VM, and every wait for another thread
 * is a wait-for-condition loop with a long timeout.  A lost wake-up never
 * hangs a test: producers that time out break the loop out with
 * aio_notify(), blocking turns that wait for a BH or aio_notify() carry a
 * 5 s "rescue" timer, and a watchdog (alarm) aborts anything else.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <glib.h>

#include "util/aio.h"
#include "util/clock.h"
#include "util/event-notifier.h"
#include "test-helpers.h"

/* The data of the tests that run one body both ways (a bool argument). */
static const bool yes = true;
static const bool no = false;

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */

static void set_poll(AioContext *ctx, int64_t max_ns, int64_t grow,
                     int64_t shrink)
{
    AioPollParams p = { .max_ns = max_ns, .grow = grow, .shrink = shrink };

    aio_context_set_poll_params(ctx, &p);
}

static AioPollStats get_stats(AioContext *ctx)
{
    AioPollStats s;

    memset(&s, 0xa5, sizeof(s));
    aio_context_get_stats(ctx, &s);
    return s;
}

static void log_stats(const char *what, const AioPollStats *s)
{
    g_test_message("%s: turns=%" PRIu64 " poll_ns=%" PRId64 " hits=%" PRIu64
                   " misses=%" PRIu64 " wakeups=%" PRIu64 " poll_time=%" PRIu64
                   " block_time=%" PRIu64 " grows=%" PRIu64 " shrinks=%" PRIu64
                   " dispatches=%" PRIu64 " bhs=%" PRIu64 " timers=%" PRIu64,
                   what, s->turns, s->poll_ns, s->poll_hits, s->poll_misses,
                   s->wakeups, s->poll_time_ns, s->block_time_ns, s->grows,
                   s->shrinks, s->dispatches, s->bhs, s->timers);
}

static void make_pipe(int fds[2])
{
    g_assert_cmpint(pipe2(fds, O_NONBLOCK | O_CLOEXEC), ==, 0);
}

static void write_byte(int fd)
{
    g_assert_cmpint(write(fd, "x", 1), ==, 1);
}

static size_t drain_fd(int fd)
{
    char buf[4096];
    size_t total = 0;
    ssize_t n;

    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        total += n;
    }
    return total;
}

/* Delayed calls (DelayedCall) of write_byte() and drain_fd() on *fd. */
static void write_byte_to(void *fd)
{
    write_byte(*(int *)fd);
}

static void drain_fd_of(void *fd)
{
    drain_fd(*(int *)fd);
}

/* ------------------------------------------------------------------------ */
/* PollSrc (test-helpers.h): checked cleanup and delayed producers           */

/* psrc_cleanup(), and check that io_poll_begin and io_poll_end alternated. */
static void psrc_cleanup_checked(PollSrc *psrc)
{
    psrc_cleanup(psrc);
    g_assert_cmpuint(atomic_load(&psrc->alternation_errors), ==, 0);
}

/*
 * Called in a thread after a delay (DelayedCall): publish one message, then
 * wait (with a timeout) for it to be consumed.  On timeout, record the loss
 * and wake the loop with aio_notify() so that the test fails instead of
 * hanging.
 */
typedef struct DelayedPub {
    PollSrc *psrc;
    int64_t timeout_ns;
    uint64_t target;
    int64_t t_pub;
    _Atomic bool finished;
    _Atomic bool timed_out;
} DelayedPub;

static void delayed_pub(void *opaque)
{
    DelayedPub *dp = opaque;

    dp->t_pub = clock_now_ns();
    psrc_publish(dp->psrc);
    if (!psrc_wait_acked(dp->psrc, dp->target, dp->timeout_ns)) {
        atomic_store(&dp->timed_out, true);
        aio_notify(dp->psrc->ctx);        /* break the loop out of its wait */
    }
    atomic_store(&dp->finished, true);
}

/* Publish after delay_ns; run the loop until consumed.  False if lost. */
static bool psrc_publish_after_and_run(PollSrc *psrc, int64_t delay_ns)
{
    DelayedPub dp = {
        .psrc = psrc,
        .timeout_ns = 5 * NS_PER_SEC,
        .target = atomic_load(&psrc->avail) + 1,
    };
    DelayedCall dc;
    bool ok;

    delayed_call_start(&dc, delay_ns, delayed_pub, &dp);
    while (psrc->seen < dp.target && !atomic_load(&dp.timed_out)) {
        aio_poll(psrc->ctx, true);
    }
    delayed_call_join(&dc);
    ok = !atomic_load(&dp.timed_out);
    if (!ok) {
        g_test_message("message %" PRIu64 " published %" PRId64
                       " ns into the wait was never consumed "
                       "(no_notify=%d begins=%" PRIu64 " ends=%" PRIu64 ")",
                       dp.target, delay_ns, atomic_load(&psrc->no_notify),
                       atomic_load(&psrc->begins), atomic_load(&psrc->ends));
    }
    return ok;
}

/*
 * Grow the context's window to at least target_ns with qemu-classic's
 * rule.  The caller has set a large max and a huge grow factor.  Events
 * arrive 1 ms into each turn.
 */
static void grow_window(AioContext *ctx, PollSrc *psrc, int64_t target_ns)
{
    AioPollStats s;

    aio_context_set_poll_policy(ctx, &aio_poll_policy_qemu_classic);

    for (int i = 0; i < 40; i++) {
        g_assert_true(psrc_publish_after_and_run(psrc, NS_PER_MS));
        s = get_stats(ctx);
        if (s.poll_ns >= target_ns) {
            return;
        }
    }
    s = get_stats(ctx);
    log_stats("grow_window failed", &s);
    g_assert_cmpint(s.poll_ns, >=, target_ns);
}

/* ------------------------------------------------------------------------ */
/* Test timers                                                               */

typedef struct TimerLog {
    int order[16];
    int n;
    int64_t fired_at[16];
} TimerLog;

typedef struct TestTimer {
    AioTimer t;
    TimerLog *log;
    int id;
    int64_t expire;            /* what the test armed */
    int64_t fired_at;
    int fired;
    struct TestTimer *victim;  /* deleted by this timer's callback */
    int64_t period_ns;         /* re-arm (periodic) */
    int max_fires;
} TestTimer;

static int rescue_fired(const TestTimer *rescue)
{
    return rescue->fired;
}

static void timer_cb(void *opaque)
{
    TestTimer *tt = opaque;
    int64_t now = clock_now_ns();

    g_assert_cmpint(now, >=, tt->expire);     /* never early */
    g_assert_false(aio_timer_pending(&tt->t));
    tt->fired++;
    tt->fired_at = now;
    if (tt->log) {
        g_assert_cmpint(tt->log->n, <, 16);
        tt->log->fired_at[tt->log->n] = now;
        tt->log->order[tt->log->n++] = tt->id;
    }
    if (tt->victim) {
        aio_timer_del(&tt->victim->t);
    }
    if (tt->period_ns && tt->fired < tt->max_fires) {
        tt->expire = now + tt->period_ns;
        aio_timer_mod(&tt->t, tt->expire);
    }
}

static void test_timer_init(AioContext *ctx, TestTimer *tt, TimerLog *log,
                            int id)
{
    memset(tt, 0, sizeof(*tt));
    tt->log = log;
    tt->id = id;
    aio_timer_init(ctx, &tt->t, timer_cb, tt);
    g_assert_false(aio_timer_pending(&tt->t));
}

static void test_timer_arm(TestTimer *tt, int64_t expire)
{
    tt->expire = expire;
    aio_timer_mod(&tt->t, expire);
    g_assert_true(aio_timer_pending(&tt->t));
}

/*
 * A rescue timer 5 s out: if a wake-up that should end a blocking turn is
 * lost, the turn ends at this timer instead of hanging, and the test fails
 * on its own assertions (time bounds, rescue.fired).
 */
static void rescue_arm(AioContext *ctx, TestTimer *rescue)
{
    test_timer_init(ctx, rescue, NULL, -1);
    test_timer_arm(rescue, clock_now_ns() + 5 * NS_PER_SEC);
}

static void rescue_disarm(TestTimer *rescue)
{
    aio_timer_del(&rescue->t);
}

/* ------------------------------------------------------------------------ */
/* fd handlers                                                               */

typedef struct FdState {
    AioContext *ctx;
    int fd;
    int reads;
    int writes;
    size_t bytes;
} FdState;

static void fd_read_cb(void *opaque)
{
    FdState *st = opaque;

    st->reads++;
    st->bytes += drain_fd(st->fd);
}

static void fd_write_cb(void *opaque)
{
    FdState *st = opaque;

    st->writes++;
}

static void test_fd_read(void)
{
    AioContext *ctx = ctx_new();
    FdState st = { .ctx = ctx };
    DelayedCall dw;
    AioPollStats s;
    int fds[2];

    make_pipe(fds);
    st.fd = fds[0];
    aio_set_fd_handler(ctx, fds[0], fd_read_cb, NULL, NULL, NULL, &st);

    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(st.reads, ==, 0);

    write_byte(fds[1]);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(st.reads, ==, 1);
    g_assert_cmpuint(st.bytes, ==, 1);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(st.reads, ==, 1);

    /* Blocking: a thread writes while the loop waits. */
    delayed_call_start(&dw, 20 * NS_PER_MS, write_byte_to, &fds[1]);
    while (st.reads < 2) {
        aio_poll(ctx, true);
    }
    delayed_call_join(&dw);
    g_assert_cmpint(st.reads, ==, 2);
    g_assert_cmpuint(st.bytes, ==, 2);

    s = get_stats(ctx);
    g_assert_cmpuint(s.dispatches, ==, 2);
    g_assert_cmpuint(s.wakeups, >=, 1);
    g_assert_cmpuint(s.poll_hits, ==, 0);

    /* Removed: no more callbacks even if readable. */
    aio_set_fd_handler(ctx, fds[0], NULL, NULL, NULL, NULL, NULL);
    write_byte(fds[1]);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(st.reads, ==, 2);

    close(fds[0]);
    close(fds[1]);
    aio_context_unref(ctx);
}

static void fill_pipe(int wfd)
{
    char buf[4096] = { 0 };

    while (write(wfd, buf, sizeof(buf)) > 0) {
        /* until EAGAIN */
    }
    while (write(wfd, buf, 1) > 0) {
        /* the last bytes */
    }
    g_assert_cmpint(errno, ==, EAGAIN);
}

static void test_fd_write(void)
{
    AioContext *ctx = ctx_new();
    FdState st = { .ctx = ctx };
    DelayedCall dd;
    int fds[2];

    make_pipe(fds);
    fill_pipe(fds[1]);
    st.fd = fds[1];
    aio_set_fd_handler(ctx, fds[1], NULL, fd_write_cb, NULL, NULL, &st);

    /* Full pipe: not writable. */
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(st.writes, ==, 0);

    /* Room again: writable. */
    drain_fd(fds[0]);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(st.writes, ==, 1);

    /* Blocking: full again, a thread makes room while the loop waits. */
    fill_pipe(fds[1]);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(st.writes, ==, 1);
    delayed_call_start(&dd, 20 * NS_PER_MS, drain_fd_of, &fds[0]);
    while (st.writes < 2) {
        aio_poll(ctx, true);
    }
    delayed_call_join(&dd);

    aio_set_fd_handler(ctx, fds[1], NULL, NULL, NULL, NULL, NULL);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(st.writes, ==, 2);

    close(fds[0]);
    close(fds[1]);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* Event notifiers                                                           */

typedef struct EnState {
    EventNotifier e;           /* first */
    int reads;
    int cleared;
    _Atomic bool flag;         /* polled "work" */
    int polls;
} EnState;

static void en_read(EventNotifier *e)
{
    EnState *st = (EnState *)e;

    st->reads++;
    if (event_notifier_test_and_clear(e)) {
        st->cleared++;
    }
    atomic_store(&st->flag, false);
}

static bool en_poll(EventNotifier *e)
{
    EnState *st = (EnState *)e;

    st->polls++;
    return atomic_load(&st->flag);
}

/* ---- aio_dispatch_time_ns(): the loop's reading, first callback only -- */

typedef struct DispatchTimes {
    int64_t seen[4];             /* what each callback saw, in call order */
    int n;
    EventNotifier a, b;
} DispatchTimes;

static void dispatch_time_record(DispatchTimes *dt)
{
    g_assert_cmpint(dt->n, <, (int)G_N_ELEMENTS(dt->seen));
    dt->seen[dt->n++] = aio_dispatch_time_ns();
}

static void dispatch_time_read_a(EventNotifier *e)
{
    DispatchTimes *dt = (DispatchTimes *)((char *)e -
                                          offsetof(DispatchTimes, a));

    g_assert_true(event_notifier_test_and_clear(e));
    dispatch_time_record(dt);
}

static void dispatch_time_read_b(EventNotifier *e)
{
    DispatchTimes *dt = (DispatchTimes *)((char *)e -
                                          offsetof(DispatchTimes, b));

    g_assert_true(event_notifier_test_and_clear(e));
    dispatch_time_record(dt);
}

static void dispatch_time_bh(void *opaque)
{
    dispatch_time_record(opaque);
}

static void test_dispatch_time(void)
{
    AioContext *ctx = ctx_new();
    DispatchTimes dt = { 0 };
    int64_t before, after;

    g_assert_cmpint(event_notifier_init(&dt.a, false), ==, 0);
    g_assert_cmpint(event_notifier_init(&dt.b, false), ==, 0);
    aio_set_event_notifier(ctx, &dt.a, dispatch_time_read_a, NULL, NULL);
    aio_set_event_notifier(ctx, &dt.b, dispatch_time_read_b, NULL, NULL);
    g_assert_cmpint(aio_dispatch_time_ns(), ==, 0);   /* outside a turn */

    /* Two handlers and a BH in one turn: only the first sees the reading,
     * and it lies within the turn. */
    g_assert_cmpint(event_notifier_set(&dt.a), ==, 0);
    g_assert_cmpint(event_notifier_set(&dt.b), ==, 0);
    aio_bh_schedule_oneshot(ctx, dispatch_time_bh, &dt);
    before = clock_now_ns();
    g_assert_true(aio_poll(ctx, true));
    after = clock_now_ns();
    g_assert_cmpint(dt.n, ==, 3);
    g_assert_cmpint(dt.seen[0], >=, before);
    g_assert_cmpint(dt.seen[0], <=, after);
    g_assert_cmpint(dt.seen[1], ==, 0);
    g_assert_cmpint(dt.seen[2], ==, 0);
    g_assert_cmpint(aio_dispatch_time_ns(), ==, 0);   /* cleared after */

    /* A BH that is the turn's only callback gets it too. */
    dt.n = 0;
    aio_bh_schedule_oneshot(ctx, dispatch_time_bh, &dt);
    before = clock_now_ns();
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(dt.n, ==, 1);
    g_assert_cmpint(dt.seen[0], >=, before);
    g_assert_cmpint(aio_dispatch_time_ns(), ==, 0);

    aio_set_event_notifier(ctx, &dt.a, NULL, NULL, NULL);
    aio_set_event_notifier(ctx, &dt.b, NULL, NULL, NULL);
    event_notifier_cleanup(&dt.a);
    event_notifier_cleanup(&dt.b);
    aio_context_unref(ctx);
}

/* A delayed call (DelayedCall) of event_notifier_set() on e. */
static void notifier_set(void *e)
{
    g_assert_cmpint(event_notifier_set(e), ==, 0);
}

static void test_event_notifier(void)
{
    AioContext *ctx = ctx_new();
    EnState st = { 0 };
    DelayedCall ds;

    g_assert_cmpint(event_notifier_init(&st.e, false), ==, 0);
    aio_set_event_notifier(ctx, &st.e, en_read, NULL, NULL);

    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(event_notifier_set(&st.e), ==, 0);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(st.reads, ==, 1);
    g_assert_cmpint(st.cleared, ==, 1);
    g_assert_false(aio_poll(ctx, false));

    /* Set from another thread while the loop blocks. */
    delayed_call_start(&ds, 20 * NS_PER_MS, notifier_set, &st.e);
    while (st.reads < 2) {
        aio_poll(ctx, true);
    }
    delayed_call_join(&ds);
    g_assert_cmpint(st.cleared, ==, 2);

    /*
     * With a poll callback and no io_poll_ready, work found by polling is
     * dispatched through io_read.  A non-blocking turn calls io_poll once.
     */
    aio_set_event_notifier(ctx, &st.e, en_read, en_poll, NULL);
    st.polls = 0;
    atomic_store(&st.flag, true);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(st.polls, ==, 1);
    g_assert_cmpint(st.reads, ==, 3);
    g_assert_cmpint(st.cleared, ==, 2);     /* eventfd was never written */
    g_assert_false(atomic_load(&st.flag));
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(st.reads, ==, 3);

    aio_set_event_notifier(ctx, &st.e, NULL, NULL, NULL);
    g_assert_cmpint(event_notifier_set(&st.e), ==, 0);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(st.reads, ==, 3);

    event_notifier_cleanup(&st.e);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* Bottom halves                                                             */

typedef struct BhState {
    AioContext *ctx;
    _Atomic int runs;
    _Atomic uint64_t value_seen;
    _Atomic uint64_t value;
    QEMUBH *bh;
    pthread_t ran_in;
    int reschedule;            /* times to reschedule itself */
    bool delete_self;
} BhState;

static void bh_cb(void *opaque)
{
    BhState *st = opaque;

    st->ran_in = pthread_self();
    atomic_store(&st->value_seen, atomic_load(&st->value));
    atomic_fetch_add(&st->runs, 1);
    if (st->reschedule > 0) {
        st->reschedule--;
        aio_bh_schedule(st->bh);
    }
    if (st->delete_self) {
        aio_bh_delete(st->bh);
        st->bh = NULL;
    }
}

static void test_bh_schedule(void)
{
    AioContext *ctx = ctx_new();
    BhState st = { .ctx = ctx };
    AioPollStats s;

    st.bh = aio_bh_new(ctx, bh_cb, &st);
    g_assert_nonnull(st.bh);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(st.runs, ==, 0);

    aio_bh_schedule(st.bh);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(st.runs, ==, 1);
    g_assert_true(pthread_equal(st.ran_in, pthread_self()));
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(st.runs, ==, 1);

    /* Again, with a blocking turn: a pending BH means no wait. */
    aio_bh_schedule(st.bh);
    g_assert_true(aio_poll(ctx, true));
    g_assert_cmpint(st.runs, ==, 2);

    /* A BH that reschedules itself runs again on later turns (no livelock). */
    st.reschedule = 3;
    aio_bh_schedule(st.bh);
    for (int i = 0; i < 100 && st.runs < 6; i++) {
        aio_poll(ctx, false);
    }
    g_assert_cmpint(st.runs, ==, 6);
    g_assert_false(aio_poll(ctx, false));

    s = get_stats(ctx);
    g_assert_cmpuint(s.bhs, ==, 6);
    g_assert_cmpuint(s.dispatches, ==, 0);

    aio_bh_delete(st.bh);
    aio_context_unref(ctx);
}

/* A timer callback that schedules a BH, as a completion schedules its
 * virtqueue's notification. */
static void timer_schedules_bh(void *opaque)
{
    BhState *st = opaque;

    aio_bh_schedule(st->bh);
}

/*
 * What a turn's BHs and timers schedule runs in the same turn, once: a
 * completion's notification BH goes out before the turn's bookkeeping
 * and the next turn, and a BH that keeps scheduling itself still cannot
 * hold the loop (two runs per turn at most).
 */
static void test_bh_scheduled_by_bh(void)
{
    AioContext *ctx = ctx_new();
    BhState first = { .ctx = ctx }, second = { .ctx = ctx };
    AioTimer t;
    AioPollStats s0, s1;

    first.bh = aio_bh_new(ctx, bh_cb, &first);
    second.bh = aio_bh_new(ctx, bh_cb, &second);

    /* A BH that reschedules itself: twice in one turn, then once more in
     * the next (it had one reschedule left after the first turn). */
    first.reschedule = 2;
    aio_bh_schedule(first.bh);
    s0 = get_stats(ctx);
    g_assert_true(aio_poll(ctx, false));
    s1 = get_stats(ctx);
    g_assert_cmpint(first.runs, ==, 2);
    g_assert_cmpuint(s1.turns - s0.turns, ==, 1);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(first.runs, ==, 3);
    g_assert_false(aio_poll(ctx, false));

    /* A timer that schedules a BH: the BH runs in the timer's turn. */
    aio_timer_init(ctx, &t, timer_schedules_bh, &second);
    aio_timer_mod(&t, clock_now_ns());
    s0 = get_stats(ctx);
    g_assert_true(aio_poll(ctx, true));
    s1 = get_stats(ctx);
    g_assert_cmpint(second.runs, ==, 1);
    g_assert_cmpuint(s1.turns - s0.turns, ==, 1);
    g_assert_cmpuint(s1.timers - s0.timers, ==, 1);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(second.runs, ==, 1);

    aio_bh_delete(first.bh);
    aio_bh_delete(second.bh);
    aio_context_unref(ctx);
}

static void test_bh_coalesce(void)
{
    AioContext *ctx = ctx_new();
    BhState st = { .ctx = ctx };

    st.bh = aio_bh_new(ctx, bh_cb, &st);
    for (int i = 0; i < 1000; i++) {
        aio_bh_schedule(st.bh);
    }
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(st.runs, ==, 1);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(st.runs, ==, 1);

    /* Scheduling after it ran: runs again, once. */
    aio_bh_schedule(st.bh);
    aio_bh_schedule(st.bh);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(st.runs, ==, 2);
    g_assert_false(aio_poll(ctx, false));

    aio_bh_delete(st.bh);
    aio_context_unref(ctx);
}

typedef struct ScheduleMany {
    QEMUBH *bh;
    int n;
} ScheduleMany;

static gpointer schedule_many_fn(gpointer opaque)
{
    ScheduleMany *sm = opaque;

    for (int i = 0; i < sm->n; i++) {
        aio_bh_schedule(sm->bh);
    }
    return NULL;
}

static void test_bh_coalesce_threads(void)
{
    AioContext *ctx = ctx_new();
    BhState st = { .ctx = ctx };
    ScheduleMany sm;
    GThread *t[2];

    st.bh = aio_bh_new(ctx, bh_cb, &st);
    sm.bh = st.bh;
    sm.n = 20000;
    /* Two threads hammer the same BH while the loop is not running. */
    t[0] = g_thread_new("sched0", schedule_many_fn, &sm);
    t[1] = g_thread_new("sched1", schedule_many_fn, &sm);
    g_thread_join(t[0]);
    g_thread_join(t[1]);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(st.runs, ==, 1);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(st.runs, ==, 1);

    aio_bh_delete(st.bh);
    aio_context_unref(ctx);
}

/*
 * Cross-thread: the producer sets value = i, schedules the BH and waits
 * until the BH has seen i.  Every schedule must eventually run the BH after
 * it (none lost to coalescing).
 */
typedef struct BhStress {
    BhState st;
    int n;
    _Atomic bool done;
    _Atomic bool lost;
    int64_t max_latency_ns;
} BhStress;

static gpointer bh_stress_fn(gpointer opaque)
{
    BhStress *bs = opaque;

    for (int i = 1; i <= bs->n; i++) {
        int64_t t0 = clock_now_ns();

        atomic_store(&bs->st.value, i);
        aio_bh_schedule(bs->st.bh);
        while (atomic_load(&bs->st.value_seen) < (uint64_t)i) {
            int64_t dt = clock_now_ns() - t0;

            if (dt > 2 * NS_PER_SEC) {
                atomic_store(&bs->lost, true);
                goto out;
            }
            if (dt > 50000) {
                sched_yield();
            }
        }
        bs->max_latency_ns = MAX(bs->max_latency_ns, clock_now_ns() - t0);
    }
out:
    atomic_store(&bs->done, true);
    aio_notify(bs->st.ctx);
    return NULL;
}

static void run_bh_stress(int64_t poll_max_ns)
{
    AioContext *ctx = ctx_new();
    BhStress bs = { .st.ctx = ctx, .n = 5000 };
    EnState idle = { 0 };
    GThread *t;

    /* A pollable handler (that never has work) so that the loop may spin. */
    set_poll(ctx, poll_max_ns, 0, 0);
    g_assert_cmpint(event_notifier_init(&idle.e, false), ==, 0);
    aio_set_event_notifier(ctx, &idle.e, en_read, en_poll, NULL);

    bs.st.bh = aio_bh_new(ctx, bh_cb, &bs.st);
    t = g_thread_new("bh-stress", bh_stress_fn, &bs);
    while (!atomic_load(&bs.done)) {
        aio_poll(ctx, true);
    }
    g_thread_join(t);
    g_test_message("poll-max-ns=%" PRId64 ": %d BHs, %d runs, max latency %"
                   PRId64 " us", poll_max_ns, bs.n, atomic_load(&bs.st.runs),
                   bs.max_latency_ns / 1000);
    g_assert_false(atomic_load(&bs.lost));
    g_assert_cmpint(atomic_load(&bs.st.runs), <=, bs.n);
    g_assert_cmpint(atomic_load(&bs.st.value_seen), ==, bs.n);

    aio_set_event_notifier(ctx, &idle.e, NULL, NULL, NULL);
    event_notifier_cleanup(&idle.e);
    aio_bh_delete(bs.st.bh);
    aio_context_unref(ctx);
}

static void test_bh_cross_thread_stress(void)
{
    run_bh_stress(0);
    run_bh_stress(AIO_POLL_MAX_NS_DEFAULT);
}

/* A BH scheduled from another thread while the loop is blocked. */
typedef struct LateBh {
    QEMUBH *bh;
    AioContext *ctx;
    int64_t delay_ns;
    int64_t t_sched;
    bool notify_instead;
    /* Optional: wait until the loop is busy polling psrc before acting. */
    PollSrc *psrc;
    uint64_t polls_before;
    bool saw_polling;
    GThread *thread;
} LateBh;

static gpointer late_bh_fn(gpointer opaque)
{
    LateBh *lb = opaque;

    if (lb->psrc) {
        int64_t t0 = clock_now_ns();

        /* The turn is spinning once io_poll is being called. */
        while (atomic_load(&lb->psrc->polls) < lb->polls_before + 2 &&
               clock_now_ns() - t0 < 2 * NS_PER_SEC) {
            g_usleep(100);
        }
        lb->saw_polling = atomic_load(&lb->psrc->polls) >= lb->polls_before + 2;
    }
    sleep_ns(lb->delay_ns);
    lb->t_sched = clock_now_ns();
    if (lb->notify_instead) {
        aio_notify(lb->ctx);
    } else {
        aio_bh_schedule(lb->bh);
    }
    return NULL;
}

static void test_bh_from_thread_blocking(void)
{
    AioContext *ctx = ctx_new();
    BhState st = { .ctx = ctx };
    LateBh lb = { .ctx = ctx, .delay_ns = 30 * NS_PER_MS };
    AioPollStats s0, s1;
    TestTimer rescue;
    int64_t t0, t1;

    st.bh = aio_bh_new(ctx, bh_cb, &st);
    lb.bh = st.bh;
    rescue_arm(ctx, &rescue);
    s0 = get_stats(ctx);
    t0 = clock_now_ns();
    lb.thread = g_thread_new("late-bh", late_bh_fn, &lb);
    while (st.runs == 0 && !rescue_fired(&rescue)) {
        aio_poll(ctx, true);
    }
    t1 = clock_now_ns();
    g_thread_join(lb.thread);
    s1 = get_stats(ctx);
    rescue_disarm(&rescue);
    g_assert_false(rescue_fired(&rescue));      /* the BH woke the loop */

    g_assert_true(pthread_equal(st.ran_in, pthread_self()));
    g_assert_cmpint(t1 - t0, >=, 25 * NS_PER_MS);   /* it really waited */
    g_assert_cmpint(t1 - lb.t_sched, <, 1 * NS_PER_SEC);
    g_assert_cmpuint(s1.bhs - s0.bhs, ==, 1);
    g_test_message("BH ran %" PRId64 " us after it was scheduled",
                   (t1 - lb.t_sched) / 1000);

    aio_bh_delete(st.bh);
    aio_context_unref(ctx);
}

/*
 * A 1 s poll window is open; lb's thread waits until the loop is polling,
 * then 2 ms later schedules its BH or calls aio_notify(): that must end
 * the turn well before the window would have.  Runs that one turn, checks
 * that it was cut short and returns what aio_poll() returned.  what names
 * the thread's action in the log.
 */
static bool run_turn_cut_short(AioContext *ctx, LateBh *lb, const char *what)
{
    AioPollStats s0, s1;
    TestTimer rescue;
    int64_t t0, t1;
    PollSrc psrc;
    bool ret;

    /* A 1 s window, grown with events. */
    set_poll(ctx, NS_PER_SEC, 1000000, 0);
    psrc_init(&psrc, ctx, true);
    grow_window(ctx, &psrc, NS_PER_SEC);
    rescue_arm(ctx, &rescue);

    lb->psrc = &psrc;
    lb->polls_before = atomic_load(&psrc.polls);
    s0 = get_stats(ctx);
    lb->thread = g_thread_new("late-bh", late_bh_fn, lb);
    t0 = clock_now_ns();
    ret = aio_poll(ctx, true);
    t1 = clock_now_ns();
    g_thread_join(lb->thread);
    s1 = get_stats(ctx);
    log_stats("after", &s1);
    g_test_message("turn took %" PRId64 " us, returned %" PRId64
                   " us after %s", (t1 - t0) / 1000,
                   (t1 - lb->t_sched) / 1000, what);

    rescue_disarm(&rescue);
    g_assert_false(rescue_fired(&rescue));
    g_assert_true(lb->saw_polling);
    g_assert_cmpuint(s1.poll_time_ns, >, s0.poll_time_ns);
    /* Cut short: well before the 1 s window would have ended. */
    g_assert_cmpint(t1 - lb->t_sched, <, 100 * NS_PER_MS);
    g_assert_cmpint(t1 - t0, <, 500 * NS_PER_MS);

    psrc_cleanup_checked(&psrc);
    return ret;
}

static void test_bh_from_thread_polling(void)
{
    AioContext *ctx = ctx_new();
    BhState st = { .ctx = ctx };
    LateBh lb = { .ctx = ctx, .delay_ns = 2 * NS_PER_MS };

    st.bh = aio_bh_new(ctx, bh_cb, &st);
    lb.bh = st.bh;
    g_assert_true(run_turn_cut_short(ctx, &lb, "the BH was scheduled"));
    g_assert_cmpint(st.runs, ==, 1);

    aio_bh_delete(st.bh);
    aio_context_unref(ctx);
}

static void oneshot_cb(void *opaque)
{
    _Atomic int *count = opaque;

    atomic_fetch_add(count, 1);
}

typedef struct OneshotFromThread {
    AioContext *ctx;
    _Atomic int *count;
    int n;
} OneshotFromThread;

static gpointer oneshot_thread_fn(gpointer opaque)
{
    OneshotFromThread *o = opaque;

    for (int i = 0; i < o->n; i++) {
        aio_bh_schedule_oneshot(o->ctx, oneshot_cb, o->count);
    }
    return NULL;
}

static void test_bh_oneshot(void)
{
    AioContext *ctx = ctx_new();
    _Atomic int count = 0;
    OneshotFromThread o = { .ctx = ctx, .count = &count, .n = 1000 };
    GThread *t;

    aio_bh_schedule_oneshot(ctx, oneshot_cb, &count);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(count, ==, 1);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(count, ==, 1);

    /* Each oneshot is its own BH: three schedules, three runs. */
    for (int i = 0; i < 3; i++) {
        aio_bh_schedule_oneshot(ctx, oneshot_cb, &count);
    }
    for (int i = 0; i < 10; i++) {
        aio_poll(ctx, false);
    }
    g_assert_cmpint(count, ==, 4);

    /* From another thread while the loop runs. */
    t = g_thread_new("oneshot", oneshot_thread_fn, &o);
    while (atomic_load(&count) < 4 + o.n) {
        aio_poll(ctx, true);
    }
    g_thread_join(t);
    for (int i = 0; i < 10; i++) {
        aio_poll(ctx, false);
    }
    g_assert_cmpint(count, ==, 4 + o.n);

    /* Pending at unref: freed without running (leak-checked by ASan). */
    aio_bh_schedule_oneshot(ctx, oneshot_cb, &count);
    aio_context_unref(ctx);
    g_assert_cmpint(count, ==, 4 + o.n);
}

static void test_bh_cancel_delete(void)
{
    AioContext *ctx = ctx_new();
    BhState st = { .ctx = ctx };
    BhState st2 = { .ctx = ctx };
    QEMUBH *pending;

    st.bh = aio_bh_new(ctx, bh_cb, &st);

    /* Cancel an unscheduled BH: no-op. */
    aio_bh_cancel(st.bh);
    g_assert_false(aio_poll(ctx, false));

    aio_bh_schedule(st.bh);
    aio_bh_cancel(st.bh);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(st.runs, ==, 0);

    /* Still usable after cancel. */
    aio_bh_schedule(st.bh);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(st.runs, ==, 1);

    /* Delete a pending BH: it does not run. */
    aio_bh_schedule(st.bh);
    aio_bh_delete(st.bh);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(st.runs, ==, 1);

    /* Delete from its own callback. */
    st2.bh = aio_bh_new(ctx, bh_cb, &st2);
    st2.delete_self = true;
    aio_bh_schedule(st2.bh);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(st2.runs, ==, 1);
    g_assert_null(st2.bh);
    g_assert_false(aio_poll(ctx, false));

    /*
     * Deleted while still queued, then the context goes away before a turn
     * takes it off the queue: it does not run and is freed with the
     * context (leak-checked by ASan).  (Whether a pending BH that its owner
     * never deleted is freed by aio_context_unref() is left open by the
     * header; owners delete their BHs.)
     */
    pending = aio_bh_new(ctx, bh_cb, &st);
    aio_bh_schedule(pending);
    aio_bh_delete(pending);
    aio_context_unref(ctx);
    g_assert_cmpint(st.runs, ==, 1);
}

/* ------------------------------------------------------------------------ */
/* aio_run_sync and the home thread                                          */

typedef struct LoopThread {
    AioContext *ctx;
    _Atomic bool stop;
    _Atomic bool running;
    pthread_t tid;
    GThread *thread;
} LoopThread;

static gpointer loop_thread_fn(gpointer opaque)
{
    LoopThread *lt = opaque;

    aio_context_set_home_thread(lt->ctx);
    lt->tid = pthread_self();
    atomic_store(&lt->running, true);
    while (!atomic_load(&lt->stop)) {
        aio_poll(lt->ctx, true);
    }
    return NULL;
}

static void loop_thread_start(LoopThread *lt, AioContext *ctx)
{
    lt->ctx = ctx;
    atomic_store(&lt->stop, false);
    atomic_store(&lt->running, false);
    lt->thread = g_thread_new("loop", loop_thread_fn, lt);
    while (!atomic_load(&lt->running)) {
        g_usleep(100);
    }
}

static void loop_thread_stop(LoopThread *lt)
{
    atomic_store(&lt->stop, true);
    aio_notify(lt->ctx);
    g_thread_join(lt->thread);
    aio_context_set_home_thread(lt->ctx);
}

typedef struct SyncCall {
    AioContext *ctx;
    pthread_t ran_in;
    bool in_home;
    _Atomic int done;
} SyncCall;

static void sync_cb(void *opaque)
{
    SyncCall *sc = opaque;

    sc->ran_in = pthread_self();
    sc->in_home = aio_context_in_home_thread(sc->ctx);
    g_usleep(10000);            /* the caller must really wait for this */
    atomic_store(&sc->done, 1);
}

static void test_run_sync(void)
{
    AioContext *ctx = ctx_new();
    SyncCall sc = { .ctx = ctx };
    LoopThread lt;

    /* From the home thread: runs directly. */
    aio_run_sync(ctx, sync_cb, &sc);
    g_assert_cmpint(sc.done, ==, 1);
    g_assert_true(pthread_equal(sc.ran_in, pthread_self()));
    g_assert_true(sc.in_home);

    /* From another thread than the one running the loop. */
    loop_thread_start(&lt, ctx);
    g_assert_false(aio_context_in_home_thread(ctx));
    for (int i = 0; i < 20; i++) {
        memset(&sc, 0, sizeof(sc));
        sc.ctx = ctx;
        aio_run_sync(ctx, sync_cb, &sc);
        g_assert_cmpint(atomic_load(&sc.done), ==, 1);
        g_assert_true(pthread_equal(sc.ran_in, lt.tid));
        g_assert_true(sc.in_home);
    }
    loop_thread_stop(&lt);
    g_assert_true(aio_context_in_home_thread(ctx));
    aio_context_unref(ctx);
}

typedef struct HomeProbe {
    AioContext *ctx;
    bool before;
    bool after;
} HomeProbe;

static gpointer home_probe_fn(gpointer opaque)
{
    HomeProbe *hp = opaque;

    hp->before = aio_context_in_home_thread(hp->ctx);
    aio_context_set_home_thread(hp->ctx);
    hp->after = aio_context_in_home_thread(hp->ctx);
    return NULL;
}

static void test_home_thread(void)
{
    AioContext *ctx = ctx_new();
    HomeProbe hp = { .ctx = ctx };

    g_assert_true(aio_context_in_home_thread(ctx));
    g_thread_join(g_thread_new("probe", home_probe_fn, &hp));
    g_assert_false(hp.before);
    g_assert_true(hp.after);
    g_assert_false(aio_context_in_home_thread(ctx));
    aio_context_set_home_thread(ctx);
    g_assert_true(aio_context_in_home_thread(ctx));
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* aio_notify                                                                */

static void test_notify_blocking(void)
{
    AioContext *ctx = ctx_new();
    LateBh lb = { .ctx = ctx, .delay_ns = 30 * NS_PER_MS,
                  .notify_instead = true };
    AioPollStats s0, s1;
    TestTimer rescue;
    int64_t t0, t1;
    bool ret;

    /* Nothing registered: a blocking turn waits until notified. */
    rescue_arm(ctx, &rescue);
    s0 = get_stats(ctx);
    t0 = clock_now_ns();
    lb.thread = g_thread_new("notify", late_bh_fn, &lb);
    ret = aio_poll(ctx, true);
    t1 = clock_now_ns();
    g_thread_join(lb.thread);
    s1 = get_stats(ctx);

    g_assert_false(rescue_fired(&rescue));
    g_assert_false(ret);                       /* only the notifier ran */
    g_assert_cmpint(t1 - t0, >=, 25 * NS_PER_MS);
    g_assert_cmpint(t1 - lb.t_sched, <, 1 * NS_PER_SEC);
    g_assert_cmpuint(s1.turns - s0.turns, ==, 1);
    g_assert_cmpuint(s1.wakeups - s0.wakeups, ==, 1);
    g_assert_cmpuint(s1.block_time_ns - s0.block_time_ns, >=, 20 * NS_PER_MS);

    /* A notify before the turn: the turn does not block. */
    aio_notify(ctx);
    t0 = clock_now_ns();
    aio_poll(ctx, true);
    g_assert_cmpint(clock_now_ns() - t0, <, 1 * NS_PER_SEC);
    g_assert_false(rescue_fired(&rescue));

    rescue_disarm(&rescue);
    aio_context_unref(ctx);
}

static void test_notify_polling(void)
{
    AioContext *ctx = ctx_new();
    LateBh lb = { .ctx = ctx, .delay_ns = 2 * NS_PER_MS,
                  .notify_instead = true };

    /* False: only the context's own notifier ran. */
    g_assert_false(run_turn_cut_short(ctx, &lb, "aio_notify()"));
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* Timers                                                                    */

static void test_timer_order(void)
{
    AioContext *ctx = ctx_new();
    TimerLog log = { .n = 0 };
    TestTimer t[6];
    int64_t now = clock_now_ns();
    AioPollStats s;

    for (int i = 0; i < 6; i++) {
        test_timer_init(ctx, &t[i], &log, i);
    }
    test_timer_arm(&t[0], now + 30 * NS_PER_MS);
    test_timer_arm(&t[1], now + 10 * NS_PER_MS);
    test_timer_arm(&t[2], now + 20 * NS_PER_MS);
    test_timer_arm(&t[3], now + 15 * NS_PER_MS);   /* deleted below */
    test_timer_arm(&t[4], now + 5 * NS_PER_MS);    /* moved to +25 ms */
    aio_timer_del(&t[3].t);
    g_assert_false(aio_timer_pending(&t[3].t));
    test_timer_arm(&t[4], now + 25 * NS_PER_MS);

    while (log.n < 4) {
        aio_poll(ctx, true);
    }
    g_assert_cmpint(log.order[0], ==, 1);
    g_assert_cmpint(log.order[1], ==, 2);
    g_assert_cmpint(log.order[2], ==, 4);
    g_assert_cmpint(log.order[3], ==, 0);
    for (int i = 0; i < 4; i++) {
        int64_t late = log.fired_at[i] - t[log.order[i]].expire;

        g_test_message("timer %d fired %" PRId64 " us late", log.order[i],
                       late / 1000);
        g_assert_cmpint(late, <, 1 * NS_PER_SEC);
    }
    /* Nothing else fires. */
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(t[3].fired, ==, 0);
    g_assert_cmpint(t[5].fired, ==, 0);

    /* Expired before the turn: fires in a non-blocking turn. */
    test_timer_arm(&t[5], clock_now_ns() - 1);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(t[5].fired, ==, 1);

    /* Two due timers, each deleting the other: only the first runs. */
    log.n = 0;
    t[0].victim = &t[1];
    t[1].victim = &t[0];
    now = clock_now_ns();
    test_timer_arm(&t[0], now - 2);
    test_timer_arm(&t[1], now - 1);
    g_assert_true(aio_poll(ctx, false));
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(log.n, ==, 1);
    g_assert_cmpint(log.order[0], ==, 0);
    g_assert_false(aio_timer_pending(&t[1].t));

    s = get_stats(ctx);
    g_assert_cmpuint(s.timers, ==, 6);

    for (int i = 0; i < 6; i++) {
        aio_timer_del(&t[i].t);
    }
    aio_context_unref(ctx);
}

/* Fire a timer short_ns ahead n times; return the worst lateness. */
static int64_t measure_timer_lateness(AioContext *ctx, int64_t ahead_ns,
                                      int n, uint64_t *turns)
{
    TestTimer tt;
    int64_t worst = 0;
    AioPollStats s0 = get_stats(ctx), s1;

    test_timer_init(ctx, &tt, NULL, 0);
    for (int i = 0; i < n; i++) {
        int fired = tt.fired;

        test_timer_arm(&tt, clock_now_ns() + ahead_ns);
        while (tt.fired == fired) {
            aio_poll(ctx, true);
        }
        worst = MAX(worst, tt.fired_at - tt.expire);
    }
    s1 = get_stats(ctx);
    *turns = s1.turns - s0.turns;
    aio_timer_del(&tt.t);
    return worst;
}

static void test_timer_precise_blocking(void)
{
    AioContext *ctx = ctx_new();
    uint64_t turns;
    int64_t worst;

    set_poll(ctx, 0, 0, 0);
    worst = measure_timer_lateness(ctx, 5000, 20, &turns);
    g_test_message("5 us timer, no polling: worst lateness %" PRId64
                   " us, %" PRIu64 " turns for 20 timers", worst / 1000, turns);
    g_assert_cmpint(worst, <, 20 * NS_PER_MS);

    /*
     * A 2 ms timer: the wait must be one precise sleep, not a busy loop
     * of zero timeouts (sub-ms rounding) nor an early wake-up.
     */
    worst = measure_timer_lateness(ctx, 2 * NS_PER_MS, 5, &turns);
    g_test_message("2 ms timer: worst lateness %" PRId64 " us, %" PRIu64
                   " turns for 5 timers", worst / 1000, turns);
    g_assert_cmpint(worst, <, 20 * NS_PER_MS);
    g_assert_cmpuint(turns, <=, 5 * 4);

    aio_context_unref(ctx);
}

static void test_timer_not_delayed_by_window(void)
{
    AioContext *ctx = ctx_new();
    AioPollStats s0, s1;
    uint64_t turns;
    int64_t worst;
    PollSrc psrc;

    /* Grow a 1 s window; a 5 µs timer must still fire on time. */
    set_poll(ctx, NS_PER_SEC, 1000000, 0);
    psrc_init(&psrc, ctx, true);
    grow_window(ctx, &psrc, NS_PER_SEC);

    s0 = get_stats(ctx);
    worst = measure_timer_lateness(ctx, 5000, 20, &turns);
    s1 = get_stats(ctx);
    log_stats("after timers", &s1);
    g_test_message("5 us timer, 1 s window: worst lateness %" PRId64
                   " us, %" PRIu64 " turns", worst / 1000, turns);
    g_assert_cmpint(worst, <, 20 * NS_PER_MS);
    /* The window is still open (the turns did poll, the timers cut it). */
    g_assert_cmpint(s1.poll_ns, ==, NS_PER_SEC);
    g_assert_cmpuint(s1.poll_time_ns, >, s0.poll_time_ns);

    /* A longer timer: the spin ends at its deadline, not at the window. */
    worst = measure_timer_lateness(ctx, 3 * NS_PER_MS, 5, &turns);
    g_test_message("3 ms timer, 1 s window: worst lateness %" PRId64 " us",
                   worst / 1000);
    g_assert_cmpint(worst, <, 20 * NS_PER_MS);

    psrc_cleanup_checked(&psrc);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* Polling on/off                                                            */

static void test_non_pollable_disables_polling(void)
{
    AioContext *ctx = ctx_new();
    FdState ctl = { .ctx = ctx };
    AioPollStats s0, s1;
    uint64_t polls;
    int fds[2];
    PollSrc psrc;

    set_poll(ctx, NS_PER_SEC, 1000000, 0);
    psrc_init(&psrc, ctx, true);

    /* A control fd without a poll callback. */
    make_pipe(fds);
    ctl.fd = fds[0];
    aio_set_fd_handler(ctx, fds[0], fd_read_cb, NULL, NULL, NULL, &ctl);

    s0 = get_stats(ctx);
    /* Events that would grow a window; nothing may spin or poll. */
    for (int i = 0; i < 5; i++) {
        g_assert_true(psrc_publish_after_and_run(&psrc, NS_PER_MS));
    }
    atomic_fetch_add(&psrc.avail, 1);        /* work visible only to io_poll */
    aio_poll(ctx, false);
    write_byte(fds[1]);
    while (ctl.reads == 0) {
        aio_poll(ctx, true);
    }
    s1 = get_stats(ctx);
    log_stats("with a non-pollable handler", &s1);
    g_assert_cmpuint(atomic_load(&psrc.polls), ==, 0);
    g_assert_cmpuint(atomic_load(&psrc.begins), ==, 0);
    g_assert_cmpuint(atomic_load(&psrc.ends), ==, 0);
    g_assert_cmpuint(atomic_load(&psrc.poll_ready), ==, 0);
    g_assert_cmpuint(atomic_load(&psrc.reads_work), ==, 5);
    g_assert_cmpuint(s1.poll_time_ns, ==, s0.poll_time_ns);
    g_assert_cmpuint(s1.poll_hits, ==, 0);
    g_assert_cmpuint(s1.poll_misses, ==, 0);

    /* Remove it: polling comes back. */
    aio_set_fd_handler(ctx, fds[0], NULL, NULL, NULL, NULL, NULL);
    polls = atomic_load(&psrc.polls);
    g_assert_true(aio_poll(ctx, false));   /* io_poll finds the hidden one */
    g_assert_cmpuint(atomic_load(&psrc.polls), ==, polls + 1);
    g_assert_cmpuint(atomic_load(&psrc.poll_ready), ==, 1);

    grow_window(ctx, &psrc, NS_PER_SEC);
    g_assert_true(psrc_publish_after_and_run(&psrc, 2 * NS_PER_MS));
    s1 = get_stats(ctx);
    log_stats("after removal", &s1);
    g_assert_cmpuint(s1.poll_time_ns, >, s0.poll_time_ns);
    g_assert_cmpuint(atomic_load(&psrc.begins), >=, 1);
    g_assert_cmpuint(s1.poll_hits, >=, 1);

    psrc_cleanup_checked(&psrc);
    close(fds[0]);
    close(fds[1]);
    aio_context_unref(ctx);
}

/*
 * While a poll window is "begun" (producer told not to kick), turning
 * polling off must end it (io_poll_end) before blocking; else the next
 * message is never kicked and never seen.
 */
static void run_window_closed_when_polling_stops(const void *arg)
{
    const bool by_handler = *(const bool *)arg;
    AioContext *ctx = ctx_new();
    FdState ctl = { .ctx = ctx };
    int fds[2];
    PollSrc psrc;

    set_poll(ctx, NS_PER_SEC, 1000000, 0);
    psrc_init(&psrc, ctx, true);
    grow_window(ctx, &psrc, NS_PER_SEC);
    /* A message found by polling leaves the window begun. */
    g_assert_true(psrc_publish_after_and_run(&psrc, 2 * NS_PER_MS));
    g_assert_true(atomic_load(&psrc.begun));
    g_assert_true(atomic_load(&psrc.no_notify));

    make_pipe(fds);
    if (by_handler) {
        ctl.fd = fds[0];
        aio_set_fd_handler(ctx, fds[0], fd_read_cb, NULL, NULL, NULL, &ctl);
    } else {
        set_poll(ctx, 0, 0, 0);
    }
    g_assert_true(psrc_publish_after_and_run(&psrc, 20 * NS_PER_MS));
    g_assert_false(atomic_load(&psrc.begun));
    g_assert_cmpuint(atomic_load(&psrc.reads_work), >=, 1);

    if (by_handler) {
        aio_set_fd_handler(ctx, fds[0], NULL, NULL, NULL, NULL, NULL);
    }
    psrc_cleanup_checked(&psrc);
    close(fds[0]);
    close(fds[1]);
    aio_context_unref(ctx);
}

static void test_poll_hooks_stay_begun(void)
{
    AioContext *ctx = ctx_new();
    uint64_t begins, ends, ready, reads, kicks;
    PollSrc psrc;

    set_poll(ctx, NS_PER_SEC, 1000000, 0);
    psrc_init(&psrc, ctx, true);
    grow_window(ctx, &psrc, NS_PER_SEC);

    begins = atomic_load(&psrc.begins);
    ends = atomic_load(&psrc.ends);
    ready = atomic_load(&psrc.poll_ready);
    reads = atomic_load(&psrc.reads);
    kicks = atomic_load(&psrc.kicks);
    for (int i = 0; i < 5; i++) {
        g_assert_true(psrc_publish_after_and_run(&psrc, 2 * NS_PER_MS));
    }
    /* Five messages found by polling, one window begun, none ended. */
    g_assert_cmpuint(atomic_load(&psrc.poll_ready) - ready, ==, 5);
    g_assert_cmpuint(atomic_load(&psrc.reads) - reads, ==, 0);
    g_assert_cmpuint(atomic_load(&psrc.begins) - begins, <=, 1);
    g_assert_cmpuint(atomic_load(&psrc.ends) - ends, ==, 0);
    g_assert_cmpuint(atomic_load(&psrc.kicks) - kicks, ==, 0);  /* suppressed */

    psrc_cleanup_checked(&psrc);
    aio_context_unref(ctx);
}

static void test_nonblocking_never_waits(void)
{
    AioContext *ctx = ctx_new();
    TestTimer tt;
    uint64_t polls;
    int64_t t0, dt;
    PollSrc psrc;

    set_poll(ctx, NS_PER_SEC, 1000000, 0);
    psrc_init(&psrc, ctx, true);
    grow_window(ctx, &psrc, NS_PER_SEC);
    test_timer_init(ctx, &tt, NULL, 0);
    test_timer_arm(&tt, clock_now_ns() + NS_PER_SEC);

    polls = atomic_load(&psrc.polls);
    t0 = clock_now_ns();
    for (int i = 0; i < 10; i++) {
        g_assert_false(aio_poll(ctx, false));
    }
    dt = clock_now_ns() - t0;
    g_test_message("10 non-blocking turns with a 1 s window: %" PRId64 " us",
                   dt / 1000);
    g_assert_cmpint(dt, <, 100 * NS_PER_MS);
    g_assert_cmpuint(atomic_load(&psrc.polls) - polls, ==, 10);
    g_assert_cmpint(tt.fired, ==, 0);

    aio_timer_del(&tt.t);
    psrc_cleanup_checked(&psrc);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* Idle windows fall to 0                                                    */

typedef struct PingPong {
    PollSrc *psrc;
    AioContext *ctx;
    int min_msgs;
    int max_msgs;
    int sent;
    _Atomic bool done;
    bool lost;
    bool saw_window;
    AioPollStats at_peak;
} PingPong;

static gpointer ping_pong_fn(gpointer opaque)
{
    PingPong *pp = opaque;

    for (int i = 1; i <= pp->max_msgs; i++) {
        AioPollStats s;

        if (i == pp->max_msgs) {
            atomic_store(&pp->done, true);   /* seen after this message */
        }
        psrc_publish(pp->psrc);
        pp->sent = i;
        if (!psrc_wait_acked(pp->psrc, i, 5 * NS_PER_SEC)) {
            pp->lost = true;
            break;
        }
        s = get_stats(pp->ctx);
        if (s.poll_ns > 0 && !pp->saw_window) {
            pp->saw_window = true;
            pp->at_peak = s;
        }
        if (pp->saw_window && i >= pp->min_msgs) {
            break;
        }
    }
    if (!atomic_load(&pp->done)) {
        atomic_store(&pp->done, true);
        aio_notify(pp->ctx);
    }
    return NULL;
}

/*
 * A busy phase opens the window; then only a 2 ms timer wakes the loop.
 * qemu-classic closes the window (the waits exceed poll-max-ns); the
 * predictive policy keeps what it learned (its window is what it would
 * spin at the start of an interval), but conditioned on how long the
 * queue has been quiet it spins for nothing.  Either way idle turns do
 * not spin.
 */
static void idle_after_busy(const AioPollPolicyOps *ops)
{
    AioContext *ctx = ctx_new();
    PingPong pp = { .ctx = ctx, .min_msgs = 500, .max_msgs = 20000 };
    AioHandlerWindow w[4];
    AioPollStats s10, s20;
    TestTimer tt;
    GThread *t;
    PollSrc psrc;

    set_poll(ctx, AIO_POLL_MAX_NS_DEFAULT, 0, 0);
    aio_context_set_poll_policy(ctx, ops);
    psrc_init(&psrc, ctx, true);

    /* Busy phase: ping-pong until the window is open. */
    pp.psrc = &psrc;
    t = g_thread_new("ping-pong", ping_pong_fn, &pp);
    while (!atomic_load(&pp.done)) {
        aio_poll(ctx, true);
    }
    g_thread_join(t);
    log_stats("at peak", &pp.at_peak);
    g_test_message("%d messages", pp.sent);
    g_assert_false(pp.lost);
    g_assert_true(pp.saw_window);
    g_assert_cmpuint(pp.at_peak.grows, >=, 1);

    /* Idle phase: only a 2 ms periodic timer (period > poll-max-ns). */
    test_timer_init(ctx, &tt, NULL, 0);
    tt.period_ns = 2 * NS_PER_MS;
    tt.max_fires = 20;
    test_timer_arm(&tt, clock_now_ns() + tt.period_ns);
    while (tt.fired < 10) {
        aio_poll(ctx, true);
    }
    s10 = get_stats(ctx);
    while (tt.fired < 20) {
        aio_poll(ctx, true);
    }
    s20 = get_stats(ctx);
    log_stats("idle", &s20);

    g_assert_cmpint(aio_context_get_handler_windows(ctx, w, 4), ==, 1);
    if (ops == &aio_poll_policy_qemu_classic) {
        g_assert_cmpint(s20.poll_ns, ==, 0);
        g_assert_cmpuint(s20.shrinks, >, pp.at_peak.shrinks);
        g_assert_cmpint(w[0].poll_ns, ==, 0);
    }
    /* Idle turns do not spin at all. */
    g_assert_cmpuint(s20.poll_time_ns, ==, s10.poll_time_ns);
    g_assert_cmpuint(s20.poll_hits, ==, s10.poll_hits);

    aio_timer_del(&tt.t);
    psrc_cleanup_checked(&psrc);
    aio_context_unref(ctx);
}

static void test_idle_window_falls_to_zero(void)
{
    idle_after_busy(&aio_poll_policy_qemu_classic);
}

static void test_idle_predictive_stops_spinning(void)
{
    idle_after_busy(&aio_poll_policy_predictive);
}

/* ------------------------------------------------------------------------ */
/* Handler removal from callbacks                                            */

typedef struct RemoveBoth {
    AioContext *ctx;
    int fd[2];
    EventNotifier *en[2];
    int calls;
} RemoveBoth;

static void remove_both_fd_cb(void *opaque)
{
    RemoveBoth *rb = opaque;

    rb->calls++;
    aio_set_fd_handler(rb->ctx, rb->fd[0], NULL, NULL, NULL, NULL, NULL);
    aio_set_fd_handler(rb->ctx, rb->fd[1], NULL, NULL, NULL, NULL, NULL);
}

static void remove_self_fd_cb(void *opaque)
{
    RemoveBoth *rb = opaque;

    rb->calls++;
    aio_set_fd_handler(rb->ctx, rb->fd[0], NULL, NULL, NULL, NULL, NULL);
}

static RemoveBoth *remove_both_en_state;

static void remove_both_en_cb(EventNotifier *e)
{
    RemoveBoth *rb = remove_both_en_state;

    rb->calls++;
    aio_set_event_notifier(rb->ctx, rb->en[0], NULL, NULL, NULL);
    aio_set_event_notifier(rb->ctx, rb->en[1], NULL, NULL, NULL);
}

static bool always_ready(EventNotifier *e)
{
    return true;
}

static void test_remove_in_callback(void)
{
    AioContext *ctx = ctx_new();
    RemoveBoth rb = { .ctx = ctx };
    EventNotifier en[2];
    int p0[2], p1[2];

    /* epoll path: two readable fds, the first callback removes both. */
    make_pipe(p0);
    make_pipe(p1);
    rb.fd[0] = p0[0];
    rb.fd[1] = p1[0];
    aio_set_fd_handler(ctx, p0[0], remove_both_fd_cb, NULL, NULL, NULL, &rb);
    aio_set_fd_handler(ctx, p1[0], remove_both_fd_cb, NULL, NULL, NULL, &rb);
    write_byte(p0[1]);
    write_byte(p1[1]);
    g_assert_true(aio_poll(ctx, false));
    for (int i = 0; i < 5; i++) {
        aio_poll(ctx, false);           /* fds still readable, not drained */
    }
    g_assert_cmpint(rb.calls, ==, 1);

    /* A handler removing itself while its fd stays readable. */
    rb.calls = 0;
    aio_set_fd_handler(ctx, p0[0], remove_self_fd_cb, NULL, NULL, NULL, &rb);
    g_assert_true(aio_poll(ctx, false));
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(rb.calls, ==, 1);

    /* Poll path: both report work, the first io_poll_ready removes both. */
    rb.calls = 0;
    remove_both_en_state = &rb;
    for (int i = 0; i < 2; i++) {
        g_assert_cmpint(event_notifier_init(&en[i], false), ==, 0);
        rb.en[i] = &en[i];
        aio_set_event_notifier(ctx, &en[i], remove_both_en_cb, always_ready,
                               remove_both_en_cb);
    }
    g_assert_true(aio_poll(ctx, false));
    for (int i = 0; i < 5; i++) {
        aio_poll(ctx, false);
    }
    g_assert_cmpint(rb.calls, ==, 1);

    /* A blocking turn (both also signalled), then the same. */
    rb.calls = 0;
    set_poll(ctx, 100000, 0, 0);
    for (int i = 0; i < 2; i++) {
        aio_set_event_notifier(ctx, &en[i], remove_both_en_cb, always_ready,
                               remove_both_en_cb);
        g_assert_cmpint(event_notifier_set(&en[i]), ==, 0);
    }
    g_assert_true(aio_poll(ctx, true));
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(rb.calls, ==, 1);

    for (int i = 0; i < 2; i++) {
        event_notifier_cleanup(&en[i]);
    }
    close(p0[0]);
    close(p0[1]);
    close(p1[0]);
    close(p1[1]);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* Lost-wakeup stress                                                        */

typedef struct Stress {
    PollSrc psrc;
    AioContext *ctx;
    int n_msgs;
    int64_t poll_max_ns;
    int64_t timeout_ns;
    int handshake_pct;
    int64_t think_scale_ns;    /* think times are spread around this */
    int64_t think_max_ns;
    bool linger;               /* io_poll_end lingers at random */
    bool lie_after_end;        /* self-test: broken consumer */
    int64_t linger_before_ns;
    uint32_t seed;
    _Atomic bool done;
    _Atomic bool lost;
    int lost_at;
    int sent;
    int handshakes;            /* kicks published right at io_poll_end */
    int handshake_misses;
    int64_t max_latency_ns;
    /*
     * After n_msgs, keep going (up to budget_ns in all) until every path of
     * interest has been exercised; a loaded machine may need longer.
     */
    bool want_coverage;
    bool until_lost;           /* self-test: run until a loss (or budget) */
    int64_t budget_ns;
} Stress;

static bool stress_covered(Stress *st)
{
    return atomic_load(&st->psrc.poll_ready) > 0 &&
           atomic_load(&st->psrc.reads_work) > 0 &&
           atomic_load(&st->psrc.hs_before_store) > 0 &&
           atomic_load(&st->psrc.recheck_hits) > 0;
}

static gpointer stress_producer_fn(gpointer opaque)
{
    Stress *st = opaque;
    PollSrc *psrc = &st->psrc;
    GRand *r = g_rand_new_with_seed(st->seed);
    int64_t start = clock_now_ns();

    for (int i = 1; ; i++) {
        int kind = g_rand_int_range(r, 0, 100);
        bool published = false;
        int64_t t0;

        if (kind < st->handshake_pct && atomic_load(&psrc->begun)) {
            /*
             * The loop is polling: publish exactly when it leaves its poll
             * window (io_poll_end waits for us, briefly).
             */
            atomic_store(&psrc->end_started, false);
            atomic_store(&psrc->hs_published, false);
            atomic_store(&psrc->hs_go, false);
            atomic_store(&psrc->hs_want, true);
            t0 = clock_now_ns();
            while (!atomic_load(&psrc->end_started) &&
                   clock_now_ns() - t0 < 2 * NS_PER_MS) {
                (void)atomic_load_explicit(&psrc->no_notify,
                                           memory_order_relaxed);
                cpu_relax();
            }
            if (atomic_load(&psrc->end_started)) {
                st->handshakes++;
            } else {
                st->handshake_misses++;
            }
            t0 = clock_now_ns();
            atomic_store_explicit(&psrc->hs_go, true, memory_order_relaxed);
            psrc_publish(psrc);
            published = true;
            atomic_store(&psrc->hs_published, true);
            atomic_store(&psrc->hs_want, false);
        } else {
            /* Think times spread around the window. */
            int64_t think;

            kind = g_rand_int_range(r, 0, 100);
            if (kind < 20) {
                think = 0;
            } else if (kind < 70) {
                think = g_rand_int_range(r, 0, 2 * st->think_scale_ns);
            } else if (kind < 95) {
                think = g_rand_int_range(r, st->think_scale_ns,
                                         4 * st->think_scale_ns);
            } else {
                think = g_rand_int_range(r, 0, st->think_max_ns);
            }
            spin_ns(think);
        }
        if (!published) {
            t0 = clock_now_ns();
            psrc_publish(psrc);
        }
        st->sent = i;
        if (!psrc_wait_acked(psrc, i, st->timeout_ns)) {
            st->lost_at = i;
            atomic_store(&st->lost, true);
            break;
        }
        st->max_latency_ns = MAX(st->max_latency_ns, clock_now_ns() - t0);
        if (st->until_lost) {
            if (clock_now_ns() - start > st->budget_ns) {
                break;
            }
        } else if (i >= st->n_msgs &&
                   (!st->want_coverage || stress_covered(st) ||
                    clock_now_ns() - start > st->budget_ns)) {
            break;
        }
    }
    g_rand_free(r);
    atomic_store(&st->done, true);
    aio_notify(st->ctx);       /* also breaks a lost-wakeup hang */
    return NULL;
}

static void run_stress(Stress *st)
{
    AioPollStats s;
    GThread *t;

    st->ctx = ctx_new();
    set_poll(st->ctx, st->poll_max_ns, 0, 0);
    psrc_init(&st->psrc, st->ctx, true);
    st->psrc.linger = st->linger;
    st->psrc.rng ^= st->seed;
    st->psrc.lie_after_end = st->lie_after_end;
    st->psrc.linger_before_ns = st->linger_before_ns;
    aio_set_fd_handler_name(st->ctx, st->psrc.kick.fd, "stress-vq");

    t = g_thread_new("producer", stress_producer_fn, st);
    while (!atomic_load(&st->done)) {
        aio_poll(st->ctx, true);
    }
    g_thread_join(t);

    s = get_stats(st->ctx);
    log_stats("stress", &s);
    g_test_message("seed %u: sent %d, lost=%d (at %d), handshakes %d "
                   "(missed %d), kicks %" PRIu64 ", polled %" PRIu64
                   " (by the re-check %" PRIu64 "), via eventfd %" PRIu64
                   " (spurious reads %" PRIu64 "), begins %" PRIu64
                   ", ends %" PRIu64 ", rendezvous before/after/racing the "
                   "store %" PRIu64 "/%" PRIu64 "/%" PRIu64
                   ", max latency %" PRId64 " us",
                   st->seed, st->sent, atomic_load(&st->lost), st->lost_at,
                   st->handshakes, st->handshake_misses,
                   atomic_load(&st->psrc.kicks),
                   atomic_load(&st->psrc.poll_ready),
                   atomic_load(&st->psrc.recheck_hits),
                   atomic_load(&st->psrc.reads_work),
                   atomic_load(&st->psrc.reads) -
                   atomic_load(&st->psrc.reads_work),
                   atomic_load(&st->psrc.begins), atomic_load(&st->psrc.ends),
                   atomic_load(&st->psrc.hs_before_store),
                   atomic_load(&st->psrc.hs_after_store),
                   atomic_load(&st->psrc.hs_simultaneous),
                   st->max_latency_ns / 1000);
}

static void stress_cleanup(Stress *st)
{
    psrc_cleanup_checked(&st->psrc);
    aio_context_unref(st->ctx);
}

static void test_lost_wakeup_stress(void)
{
    Stress st = {
        .n_msgs = 20000,
        .poll_max_ns = 16000,
        .timeout_ns = 2 * NS_PER_SEC,
        .handshake_pct = 25,
        .think_scale_ns = 16000,
        .think_max_ns = 200000,
        .linger = true,
        .want_coverage = true,
        .budget_ns = 20 * NS_PER_SEC,
    };
    AioPollStats s;

    st.seed = g_test_rand_int();
    run_stress(&st);
    s = get_stats(st.ctx);

    /* No message was lost... */
    g_assert_false(atomic_load(&st.lost));
    g_assert_cmpint(st.sent, >=, st.n_msgs);
    g_assert_cmpuint(atomic_load(&st.psrc.acked), ==, st.sent);
    g_assert_cmpuint(s.wakeups, >, 0);
    g_assert_cmpuint(atomic_load(&st.psrc.reads_work), >, 0);
    /*
     * ...and the interesting paths were taken: polled messages, messages
     * published while kicks were still off and found by the re-check
     * after io_poll_end.  A machine so busy that the two threads never ran
     * at the same time cannot exercise them within the budget: that is
     * reported as a skip, not as a pass or a failure.
     */
    if (!stress_covered(&st)) {
        g_test_skip("machine too busy: polled/re-check paths not exercised");
    } else {
        g_assert_cmpuint(s.poll_hits, >, 0);
        g_assert_cmpint(st.handshakes, >, 0);
        g_assert_cmpuint(atomic_load(&st.psrc.ends), >, 0);
    }
    stress_cleanup(&st);
}

/*
 * The same harness against a deliberately broken consumer: io_poll lies
 * (reports no work) the first time it is called after io_poll_end, which
 * is exactly what a loop without the "barrier + poll again" step would
 * see, and io_poll_end lingers 20 us before re-enabling kicks so that
 * handshake publishes land while kicks are still suppressed.  The harness
 * must detect the resulting lost wakeup (and stops at the first one).
 */
static void test_lost_wakeup_selftest(void)
{
    Stress st = {
        .until_lost = true,
        .budget_ns = 20 * NS_PER_SEC,
        .poll_max_ns = 1000000,
        .timeout_ns = 200 * NS_PER_MS,
        .handshake_pct = 50,
        .think_scale_ns = 2000,
        .think_max_ns = 1000,
        .lie_after_end = true,
        .linger_before_ns = 20000,
    };

    st.seed = g_test_rand_int();
    run_stress(&st);
    if (!atomic_load(&st.lost) && !atomic_load(&st.psrc.hs_before_store)) {
        /* Never got the two threads to meet at io_poll_end. */
        g_test_skip("machine too busy: no rendezvous at io_poll_end");
    } else {
        g_assert_true(atomic_load(&st.lost));
    }
    stress_cleanup(&st);
}

/* ------------------------------------------------------------------------ */
/* Statistics                                                                */

static void test_stats(void)
{
    AioContext *ctx = ctx_new();
    BhState bst = { .ctx = ctx };
    FdState fst = { .ctx = ctx };
    AioPollStats s0, s1;
    TestTimer tt;
    int fds[2];
    PollSrc psrc;

    /* Empty turns. */
    for (int i = 0; i < 3; i++) {
        g_assert_false(aio_poll(ctx, false));
    }
    s1 = get_stats(ctx);
    g_assert_cmpuint(s1.turns, ==, 3);
    g_assert_cmpint(s1.poll_ns, ==, 0);
    g_assert_cmpuint(s1.poll_hits, ==, 0);
    g_assert_cmpuint(s1.poll_misses, ==, 0);
    g_assert_cmpuint(s1.wakeups, ==, 0);
    g_assert_cmpuint(s1.poll_time_ns, ==, 0);
    g_assert_cmpuint(s1.grows, ==, 0);
    g_assert_cmpuint(s1.shrinks, ==, 0);
    g_assert_cmpuint(s1.dispatches, ==, 0);
    g_assert_cmpuint(s1.bhs, ==, 0);
    g_assert_cmpuint(s1.timers, ==, 0);

    /* One BH, one timer, one fd dispatch. */
    bst.bh = aio_bh_new(ctx, bh_cb, &bst);
    aio_bh_schedule(bst.bh);
    test_timer_init(ctx, &tt, NULL, 0);
    test_timer_arm(&tt, clock_now_ns() - 1);
    make_pipe(fds);
    fst.fd = fds[0];
    aio_set_fd_handler(ctx, fds[0], fd_read_cb, NULL, NULL, NULL, &fst);
    write_byte(fds[1]);
    g_assert_true(aio_poll(ctx, false));
    s1 = get_stats(ctx);
    g_assert_cmpuint(s1.turns, ==, 4);
    g_assert_cmpuint(s1.bhs, ==, 1);
    g_assert_cmpuint(s1.timers, ==, 1);
    g_assert_cmpuint(s1.dispatches, ==, 1);
    aio_set_fd_handler(ctx, fds[0], NULL, NULL, NULL, NULL, NULL);
    close(fds[0]);
    close(fds[1]);
    aio_bh_delete(bst.bh);

    /* Wakeup without polling: an eventfd event ends a blocking wait. */
    set_poll(ctx, 0, 0, 0);
    psrc_init(&psrc, ctx, true);
    s0 = get_stats(ctx);
    g_assert_true(psrc_publish_after_and_run(&psrc, 20 * NS_PER_MS));
    s1 = get_stats(ctx);
    log_stats("eventfd wakeup", &s1);
    g_assert_cmpuint(s1.wakeups - s0.wakeups, >=, 1);
    g_assert_cmpuint(s1.dispatches - s0.dispatches, ==, 1);
    g_assert_cmpuint(s1.poll_hits - s0.poll_hits, ==, 0);
    g_assert_cmpuint(s1.poll_misses - s0.poll_misses, ==, 0);
    g_assert_cmpuint(s1.poll_time_ns - s0.poll_time_ns, ==, 0);
    g_assert_cmpuint(s1.block_time_ns - s0.block_time_ns, >=, 10 * NS_PER_MS);
    g_assert_cmpuint(atomic_load(&psrc.polls), ==, 0);

    /* Grow a 1 s window: the events arrive by eventfd, windows grow. */
    set_poll(ctx, NS_PER_SEC, 1000000, 0);
    s0 = get_stats(ctx);
    grow_window(ctx, &psrc, NS_PER_SEC);
    s1 = get_stats(ctx);
    g_assert_cmpuint(s1.grows - s0.grows, >=, 2);
    g_assert_cmpint(s1.poll_ns, ==, NS_PER_SEC);

    /* Poll hit: found by polling 5 ms into the window, no wakeup. */
    s0 = get_stats(ctx);
    g_assert_true(psrc_publish_after_and_run(&psrc, 5 * NS_PER_MS));
    s1 = get_stats(ctx);
    log_stats("poll hit", &s1);
    g_assert_cmpuint(s1.poll_hits - s0.poll_hits, ==, 1);
    g_assert_cmpuint(s1.wakeups - s0.wakeups, ==, 0);
    g_assert_cmpuint(s1.poll_misses - s0.poll_misses, ==, 0);
    g_assert_cmpuint(s1.dispatches - s0.dispatches, ==, 1);
    g_assert_cmpuint(s1.poll_time_ns - s0.poll_time_ns, >=, 2 * NS_PER_MS);
    g_assert_cmpuint(s1.shrinks - s0.shrinks, ==, 0);

    /*
     * Poll miss: max lowered to 10 ms, the event comes after 60 ms by
     * eventfd: one window that found nothing, one wakeup, the window
     * shrinks to 0 (wait > max).
     */
    set_poll(ctx, 10 * NS_PER_MS, 1000000, 0);
    s0 = get_stats(ctx);
    g_assert_true(psrc_publish_after_and_run(&psrc, 60 * NS_PER_MS));
    s1 = get_stats(ctx);
    log_stats("poll miss", &s1);
    g_assert_cmpuint(s1.poll_misses - s0.poll_misses, ==, 1);
    g_assert_cmpuint(s1.wakeups - s0.wakeups, >=, 1);
    g_assert_cmpuint(s1.poll_hits - s0.poll_hits, ==, 0);
    g_assert_cmpuint(s1.dispatches - s0.dispatches, ==, 1);
    g_assert_cmpuint(s1.poll_time_ns - s0.poll_time_ns, >=, 5 * NS_PER_MS);
    g_assert_cmpuint(s1.block_time_ns - s0.block_time_ns, >=, 20 * NS_PER_MS);
    g_assert_cmpuint(s1.shrinks - s0.shrinks, ==, 1);
    g_assert_cmpint(s1.poll_ns, ==, 0);

    aio_timer_del(&tt.t);
    psrc_cleanup_checked(&psrc);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* Windows, names, parameters, policy plug-in                                */

static void test_handler_windows(void)
{
    AioContext *ctx = ctx_new();
    AioHandlerWindow w[4];
    FdState fst = { .ctx = ctx };
    int fds[2];
    PollSrc psrc, psrc2;

    g_assert_cmpint(aio_context_get_handler_windows(ctx, w, 4), ==, 0);

    psrc_init(&psrc, ctx, true);
    aio_set_fd_handler_name(ctx, psrc.kick.fd, "vq0");
    make_pipe(fds);
    fst.fd = fds[0];
    aio_set_fd_handler(ctx, fds[0], fd_read_cb, NULL, NULL, NULL, &fst);
    aio_set_fd_handler_name(ctx, fds[0], "control");

    memset(w, 0, sizeof(w));
    g_assert_cmpint(aio_context_get_handler_windows(ctx, w, 4), ==, 1);
    g_assert_cmpint(w[0].fd, ==, psrc.kick.fd);
    g_assert_cmpstr(w[0].name, ==, "vq0");
    g_assert_cmpint(w[0].poll_ns, ==, 0);

    psrc_init(&psrc2, ctx, false);
    aio_set_fd_handler_name(ctx, psrc2.kick.fd,
                            "an-export-with-a-very-long-id-0123456789abcdef/"
                            "vq12");
    memset(w, 0, sizeof(w));
    g_assert_cmpint(aio_context_get_handler_windows(ctx, w, 4), ==, 2);
    for (int i = 0; i < 2; i++) {
        if (w[i].fd == psrc2.kick.fd) {
            g_assert_cmpuint(strlen(w[i].name), ==, AIO_HANDLER_NAME_SIZE - 1);
            g_assert_true(strncmp(w[i].name, "an-export-with-a-very-long-id-"
                                  "0123456789abcdef/",
                                  AIO_HANDLER_NAME_SIZE - 1) == 0);
        } else {
            g_assert_cmpint(w[i].fd, ==, psrc.kick.fd);
        }
    }
    /* max smaller than the count: fills max, returns the count. */
    memset(w, 0x5a, sizeof(w));
    g_assert_cmpint(aio_context_get_handler_windows(ctx, w, 1), ==, 2);
    g_assert_true(w[0].fd == psrc.kick.fd || w[0].fd == psrc2.kick.fd);
    g_assert_cmpint(w[1].fd, ==, 0x5a5a5a5a);

    aio_set_fd_handler(ctx, fds[0], NULL, NULL, NULL, NULL, NULL);
    psrc_cleanup_checked(&psrc2);
    psrc_cleanup_checked(&psrc);
    g_assert_cmpint(aio_context_get_handler_windows(ctx, w, 4), ==, 0);
    close(fds[0]);
    close(fds[1]);
    aio_context_unref(ctx);
}

static void test_params(void)
{
    AioContext *ctx = ctx_new();
    AioPollParams p;

    aio_context_get_poll_params(ctx, &p);
    g_assert_cmpint(p.max_ns, ==, AIO_POLL_MAX_NS_DEFAULT);
    g_assert_cmpint(p.grow, ==, 0);
    g_assert_cmpint(p.shrink, ==, 0);

    set_poll(ctx, 1234, 3, 5);
    memset(&p, 0, sizeof(p));
    aio_context_get_poll_params(ctx, &p);
    g_assert_cmpint(p.max_ns, ==, 1234);
    g_assert_cmpint(p.grow, ==, 3);
    g_assert_cmpint(p.shrink, ==, 5);

    g_assert_cmpint(aio_context_get_aio_max_batch(ctx), ==, 0);
    aio_context_set_aio_max_batch(ctx, 17);
    g_assert_cmpint(aio_context_get_aio_max_batch(ctx), ==, 17);

    aio_context_unref(ctx);
}

/* A policy that records what the loop tells it. */
static struct {
    int calls;
    int64_t last_wait;
    bool last_event;
} rec_policy;

static AioPollAdjustment rec_learn(AioPollState *st, AioPollSource *src,
                                   const AioPollTurn *turn)
{
    rec_policy.calls++;
    rec_policy.last_wait = src->ev && src->ev_exact ?
                           src->ev_ns - turn->start_ns : turn->waited_ns;
    rec_policy.last_event = src->ev;
    src->window_ns = 0;
    return AIO_POLL_KEPT;
}

static int64_t rec_plan(AioPollState *st, AioPollSource *const *srcs,
                        unsigned n, const AioPollTurn *turn)
{
    return 0;
}

static const AioPollPolicyOps rec_policy_ops = {
    .name = "recording",
    .plan = rec_plan,
    .learn = rec_learn,
};

/*
 * The loop told the policy about a turn that waited at least 20 ms and at
 * most max_wait_ns, ended by an event or not.
 */
static void rec_policy_check(int64_t max_wait_ns, bool event)
{
    g_test_message("adjust calls %d, wait %" PRId64 " us, event %d",
                   rec_policy.calls, rec_policy.last_wait / 1000,
                   rec_policy.last_event);
    g_assert_cmpint(rec_policy.calls, >=, 1);
    g_assert_cmpint(rec_policy.last_event, ==, event);
    g_assert_cmpint(rec_policy.last_wait, >=, 20 * NS_PER_MS);
    g_assert_cmpint(rec_policy.last_wait, <=, max_wait_ns);
}

static void test_custom_policy(void)
{
    AioContext *ctx = ctx_new();
    TestTimer tt;
    int64_t t0, t1;
    PollSrc psrc;

    set_poll(ctx, NS_PER_SEC, 0, 0);
    aio_context_set_poll_policy(ctx, &rec_policy_ops);
    psrc_init(&psrc, ctx, true);
    memset(&rec_policy, 0, sizeof(rec_policy));

    /* An event 30 ms into a blocking turn. */
    t0 = clock_now_ns();
    g_assert_true(psrc_publish_after_and_run(&psrc, 30 * NS_PER_MS));
    t1 = clock_now_ns();
    rec_policy_check(t1 - t0, true);

    /* A timer 30 ms out and no event. */
    memset(&rec_policy, 0, sizeof(rec_policy));
    test_timer_init(ctx, &tt, NULL, 0);
    t0 = clock_now_ns();
    test_timer_arm(&tt, t0 + 30 * NS_PER_MS);
    while (!tt.fired) {
        aio_poll(ctx, true);
    }
    t1 = clock_now_ns();
    rec_policy_check(t1 - t0, false);

    aio_timer_del(&tt.t);
    psrc_cleanup_checked(&psrc);
    aio_context_unref(ctx);
}

/* A policy that never spins but asks for a nap of nap_policy.nap_ns. */
static struct {
    int64_t nap_ns;
    int plans;
    int64_t last_timer_ns;
} nap_policy;

static int64_t nap_plan(AioPollState *st, AioPollSource *const *srcs,
                        unsigned n, const AioPollTurn *turn)
{
    nap_policy.plans++;
    nap_policy.last_timer_ns = turn->timer_ns;
    st->nap_ns = nap_policy.nap_ns;
    return 0;
}

static const AioPollPolicyOps nap_policy_ops = {
    .name = "napping",
    .plan = nap_plan,
};

/*
 * A nap bounds a blocking turn's wait (so that the next turn may spin for
 * what it expects), with or without a timer; a nap past the first timer
 * does not delay it.
 */
static void test_policy_nap(void)
{
    AioContext *ctx = ctx_new();
    TestTimer tt;
    int64_t t0, t1;

    set_poll(ctx, NS_PER_SEC, 0, 0);
    aio_context_set_poll_policy(ctx, &nap_policy_ops);
    memset(&nap_policy, 0, sizeof(nap_policy));
    test_timer_init(ctx, &tt, NULL, 0);

    /* A timer 300 ms out, a nap of 20 ms: the turn ends after the nap,
     * and the next one plans with the timer 280 ms out or less. */
    nap_policy.nap_ns = 20 * NS_PER_MS;
    test_timer_arm(&tt, clock_now_ns() + 300 * NS_PER_MS);
    aio_poll(ctx, false);                 /* the arming's notification */
    t0 = clock_now_ns();
    aio_poll(ctx, true);
    t1 = clock_now_ns();
    g_test_message("napped %" PRId64 " us", (t1 - t0) / 1000);
    g_assert_false(tt.fired);
    g_assert_cmpint(t1 - t0, >=, 20 * NS_PER_MS);
    g_assert_cmpint(t1 - t0, <, 250 * NS_PER_MS);
    nap_policy.plans = 0;
    aio_poll(ctx, false);
    g_assert_cmpint(nap_policy.plans, ==, 0);   /* no plan without a wait */
    nap_policy.nap_ns = 0;
    while (!tt.fired) {
        aio_poll(ctx, true);
    }
    g_assert_cmpint(nap_policy.plans, >=, 1);
    g_assert_cmpint(nap_policy.last_timer_ns, <=, 280 * NS_PER_MS);

    /* A nap longer than the way to the timer does not delay it. */
    nap_policy.nap_ns = 10 * NS_PER_SEC;
    tt.fired = false;
    t0 = clock_now_ns();
    test_timer_arm(&tt, t0 + 30 * NS_PER_MS);
    while (!tt.fired) {
        aio_poll(ctx, true);
    }
    t1 = clock_now_ns();
    g_assert_cmpint(t1 - t0, <, 2 * NS_PER_SEC);

    /* No timer: the nap alone ends the wait. */
    nap_policy.nap_ns = 20 * NS_PER_MS;
    aio_poll(ctx, false);
    t0 = clock_now_ns();
    aio_poll(ctx, true);
    t1 = clock_now_ns();
    g_assert_cmpint(t1 - t0, >=, 20 * NS_PER_MS);
    g_assert_cmpint(t1 - t0, <, 5 * NS_PER_SEC);

    aio_timer_del(&tt.t);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */

/*
 * A per-source policy the test steers: it spins steer.spin_ns for the
 * sources in steer.spin_for.  It tells the Vqs' sources apart by a tag it
 * keeps in their est_ns: learn() writes steer.tag_next into every source
 * that had an event in the turn, and the setup below gives each PollSrc a turn
 * of its own.
 */
static struct {
    int64_t spin_ns;
    int fds[4];                   /* the Vqs' kick fds: the tags */
    bool spin_for[4];
    int nfds;
    int tag_next;                 /* -1: learn() tags nothing */
} steer;

static int64_t steer_plan(AioPollState *st, AioPollSource *const *srcs,
                          unsigned n, const AioPollTurn *turn)
{
    bool any = false;

    for (unsigned i = 0; i < n; i++) {
        srcs[i]->spin = false;
        for (int j = 0; j < steer.nfds; j++) {
            if (srcs[i]->est_ns == steer.fds[j] && steer.spin_for[j]) {
                srcs[i]->spin = true;
                any = true;
            }
        }
    }
    return any ? steer.spin_ns : 0;
}

static AioPollAdjustment steer_learn(AioPollState *st, AioPollSource *src,
                                     const AioPollTurn *turn)
{
    if (src->ev && steer.tag_next >= 0) {
        src->est_ns = steer.tag_next;
    }
    return AIO_POLL_KEPT;
}

static const AioPollPolicyOps steer_policy_ops = {
    .name = "steered",
    .per_source = true,
    .plan = steer_plan,
    .learn = steer_learn,
};

/* Set up Vqs under the steered policy: each has had one event (a kick) in
 * a turn of its own, so the loop counts it as an active source and the
 * policy has tagged it. */
static AioContext *steer_setup(PollSrc *psrcs, int n)
{
    AioContext *ctx = ctx_new();
    AioHandlerWindow w[4];

    g_assert_cmpint(n, <=, 4);
    set_poll(ctx, NS_PER_SEC, 0, 0);
    aio_context_set_poll_policy(ctx, &steer_policy_ops);
    memset(&steer, 0, sizeof(steer));
    steer.spin_ns = 50 * NS_PER_MS;
    steer.nfds = n;
    for (int i = 0; i < n; i++) {
        psrc_init(&psrcs[i], ctx, true);
        steer.fds[i] = psrcs[i].kick.fd;
    }
    for (int i = 0; i < n; i++) {
        steer.tag_next = steer.fds[i];
        psrc_publish(&psrcs[i]);
        while (atomic_load(&psrcs[i].acked) < 1) {
            aio_poll(ctx, true);
        }
    }
    steer.tag_next = -1;
    g_assert_cmpint(aio_context_get_handler_windows(ctx, w, 4), ==, n);
    for (int i = 0; i < n; i++) {
        g_assert_true(w[i].active);
    }
    return ctx;
}

/*
 * A source the plan stops spinning for gets its notifications back in
 * that turn, even when another source keeps the loop from sleeping; and
 * work its producer published while it was suppressed is found then.
 */
static void test_dropped_source_gets_kicks_back(void)
{
    PollSrc psrcs[2];
    AioContext *ctx = steer_setup(psrcs, 2);

    steer.spin_for[0] = steer.spin_for[1] = true;
    psrc_publish(&psrcs[0]);
    aio_poll(ctx, true);                 /* spins on both, finds psrcs[0] */
    g_assert_true(atomic_load(&psrcs[1].no_notify));
    g_assert_cmpuint(atomic_load(&psrcs[0].acked), ==, 2);

    /* psrcs[1]'s producer publishes while it is suppressed: no kick. */
    psrc_publish(&psrcs[1]);
    g_assert_cmpuint(atomic_load(&psrcs[1].kicks), ==, 1);

    /* Now the plan spins only for psrcs[0], which has work again: the loop
     * does not sleep, but psrcs[1] must not stay suppressed (and its work
     * must not wait for a round-robin pass or a later turn). */
    steer.spin_for[1] = false;
    psrc_publish(&psrcs[0]);
    aio_poll(ctx, true);
    g_assert_false(atomic_load(&psrcs[1].no_notify));
    g_assert_cmpuint(atomic_load(&psrcs[1].acked), ==, 2);
    g_assert_cmpuint(atomic_load(&psrcs[1].alternation_errors), ==, 0);

    psrc_cleanup_checked(&psrcs[0]);
    psrc_cleanup_checked(&psrcs[1]);
    aio_context_unref(ctx);
}

static void steer_add_handler_cb(void *opaque)
{
    PollSrc *extra = opaque;

    psrc_init(extra, extra[-1].ctx, false);   /* any registration: a rebuild */
}

static void steer_noop_bh(void *opaque)
{
    (*(int *)opaque)++;
}

/*
 * The source sets are rebuilt when handlers come and go.  A source the
 * plan spins for (its notifications off) must still be polled by turns
 * that do not plan (a bottom half is pending), or its work would wait.
 */
static void test_spin_set_survives_rebuild(void)
{
    PollSrc psrcs[2];
    AioContext *ctx = steer_setup(psrcs, 1);
    QEMUBH *bh;
    int bh_runs = 0;
    uint64_t kicks;

    steer.spin_for[0] = true;
    psrc_publish(&psrcs[0]);
    aio_poll(ctx, true);
    g_assert_true(atomic_load(&psrcs[0].no_notify));
    g_assert_cmpuint(atomic_load(&psrcs[0].acked), ==, 2);

    /* A handler is added (the sets will be rebuilt); then, with a BH
     * pending so that the turn does not plan, psrcs[0]'s producer publishes
     * (no kick: it is suppressed) and the turn must still find it. */
    aio_bh_schedule_oneshot(ctx, steer_add_handler_cb, &psrcs[1]);
    aio_poll(ctx, false);
    bh = aio_bh_new(ctx, steer_noop_bh, &bh_runs);
    kicks = atomic_load(&psrcs[0].kicks);
    psrc_publish(&psrcs[0]);
    g_assert_cmpuint(atomic_load(&psrcs[0].kicks), ==, kicks);
    aio_bh_schedule(bh);
    aio_poll(ctx, false);
    g_assert_cmpint(bh_runs, ==, 1);
    g_assert_cmpuint(atomic_load(&psrcs[0].acked), ==, 3);

    aio_bh_delete(bh);
    psrc_cleanup_checked(&psrcs[1]);
    psrc_cleanup_checked(&psrcs[0]);
    aio_context_unref(ctx);
}

/*
 * A spin polls only its own sources in its first microsecond: another
 * handler's ring is not read while the event the spin waits for is about
 * to come.  After that it looks at one other handler per pass, and finds
 * one that became busy long before the spin would end.
 */
static void test_spin_looks_around_after_1us(void)
{
    PollSrc psrcs[2];
    AioContext *ctx = steer_setup(psrcs, 2);
    uint64_t polls;
    int64_t t0 = 0, t1 = 0;

    steer.spin_for[0] = true;
    /* Turns whose spin finds psrcs[0] in its first pass: psrcs[1] (work
     * published, its kick in the fd monitor) is not polled.  Two turns: a
     * look-around would pick each of the two handlers once. */
    psrc_publish(&psrcs[1]);
    polls = atomic_load(&psrcs[1].polls);
    for (int i = 0; i < 2; i++) {
        psrc_publish(&psrcs[0]);
        aio_poll(ctx, true);
        g_assert_cmpuint(atomic_load(&psrcs[0].acked), ==, 2 + i);
    }
    g_assert_cmpuint(atomic_load(&psrcs[1].polls), ==, polls);

    /* A spin that waits: psrcs[1]'s work is found by looking around, in a
     * 50 ms spin, long before it ends. */
    while (atomic_load(&psrcs[1].acked) < 2) {
        t0 = clock_now_ns();
        aio_poll(ctx, true);
        t1 = clock_now_ns();
    }
    g_assert_cmpuint(atomic_load(&psrcs[1].polls), >, polls);
    g_assert_cmpint(t1 - t0, <, 25 * NS_PER_MS);

    psrc_cleanup_checked(&psrcs[0]);
    psrc_cleanup_checked(&psrcs[1]);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* Nested aio_poll()                                                         */

/*
 * A callback may wait for something with a nested aio_poll(ctx, true)
 * loop (the way QEMU's AIO_WAIT_WHILE does).  What it waits for may be a
 * handler or BH that the outer turn has already found ready but not yet
 * dispatched: the nested turns must dispatch it, and the outer turn must
 * not dispatch it a second time when the callback returns.  Every wait
 * also gives up at a 5 s rescue timer, so that a regression fails instead
 * of hanging.
 */

typedef struct NestSrc {
    EventNotifier e;              /* first: callbacks get &src->e */
    AioContext *ctx;
    struct NestSrc *other;
    TestTimer *rescue;
    _Atomic bool pending;         /* what io_poll sees (poll variant) */
    bool done;
    int runs;
} NestSrc;

static void nest_src_cb(EventNotifier *e)
{
    NestSrc *s = (NestSrc *)e;

    event_notifier_test_and_clear(e);
    atomic_store(&s->pending, false);
    s->runs++;
    s->done = true;
    /* Whichever runs first waits for the other. */
    while (!s->other->done && !rescue_fired(s->rescue)) {
        aio_poll(s->ctx, true);
    }
}

static bool nest_src_poll(EventNotifier *e)
{
    return atomic_load(&((NestSrc *)e)->pending);
}

/*
 * Two handlers ready in the same turn; the first one dispatched waits in
 * a nested aio_poll() for the other.  by_polling: both have io_poll (no
 * io_poll_ready: dispatched through io_read) and are found by a
 * non-blocking turn's poll pass; otherwise they have no io_poll and are
 * found by the fd monitor.
 */
static void run_nested_handlers(const void *arg)
{
    const bool by_polling = *(const bool *)arg;
    AioContext *ctx = ctx_new();
    NestSrc a = { 0 }, b = { 0 };
    TestTimer rescue;
    AioPollStats s0, s1;

    rescue_arm(ctx, &rescue);
    a.ctx = b.ctx = ctx;
    a.other = &b;
    b.other = &a;
    a.rescue = b.rescue = &rescue;
    g_assert_cmpint(event_notifier_init(&a.e, false), ==, 0);
    g_assert_cmpint(event_notifier_init(&b.e, false), ==, 0);
    aio_set_event_notifier(ctx, &a.e, nest_src_cb,
                           by_polling ? nest_src_poll : NULL, NULL);
    aio_set_event_notifier(ctx, &b.e, nest_src_cb,
                           by_polling ? nest_src_poll : NULL, NULL);

    atomic_store(&a.pending, true);
    atomic_store(&b.pending, true);
    event_notifier_set(&a.e);
    event_notifier_set(&b.e);
    s0 = get_stats(ctx);
    aio_poll(ctx, !by_polling);
    s1 = get_stats(ctx);

    g_assert_false(rescue_fired(&rescue));
    g_assert_true(a.done && b.done);
    g_assert_cmpint(a.runs, ==, 1);
    g_assert_cmpint(b.runs, ==, 1);
    log_stats("after the nested turns", &s1);
    g_assert_cmpuint(s1.dispatches - s0.dispatches, ==, 2);

    /* One readiness, one dispatch: nothing left over for later turns. */
    for (int i = 0; i < 5; i++) {
        aio_poll(ctx, false);
    }
    g_assert_cmpint(a.runs, ==, 1);
    g_assert_cmpint(b.runs, ==, 1);

    rescue_disarm(&rescue);
    aio_set_event_notifier(ctx, &a.e, NULL, NULL, NULL);
    aio_set_event_notifier(ctx, &b.e, NULL, NULL, NULL);
    event_notifier_cleanup(&a.e);
    event_notifier_cleanup(&b.e);
    aio_context_unref(ctx);
}

typedef struct NestBhs {
    AioContext *ctx;
    TestTimer *rescue;
    QEMUBH *bh[3];
    int runs[3];
    int ran;                      /* distinct BHs that have run */
    int waits;                    /* BHs that waited */
} NestBhs;

static gpointer schedule_three_bhs_fn(gpointer opaque)
{
    QEMUBH **bh = opaque;

    for (int i = 0; i < 3; i++) {
        aio_bh_schedule(bh[i]);
    }
    return NULL;
}

typedef struct NestBh {
    NestBhs *all;
    int id;
} NestBh;

static void nest_bh_cb(void *opaque)
{
    NestBh *nb = opaque;
    NestBhs *all = nb->all;

    if (all->runs[nb->id]++ == 0) {
        all->ran++;
    }
    /* The first to run waits for all the others (scheduled with it). */
    if (all->ran == 1) {
        all->waits++;
        while (all->ran < (int)G_N_ELEMENTS(all->bh) &&
               !rescue_fired(all->rescue)) {
            aio_poll(all->ctx, true);
        }
    }
}

/*
 * Three BHs scheduled together are taken by one turn; the first one run
 * waits in a nested aio_poll() for the other two.
 */
static void test_nested_bh_waits_for_batch(void)
{
    AioContext *ctx = ctx_new();
    TestTimer rescue;
    NestBhs all = { .ctx = ctx, .rescue = &rescue };
    NestBh nb[3];

    rescue_arm(ctx, &rescue);
    for (int i = 0; i < 3; i++) {
        nb[i] = (NestBh){ .all = &all, .id = i };
        all.bh[i] = aio_bh_new(ctx, nest_bh_cb, &nb[i]);
    }
    for (int i = 0; i < 3; i++) {
        aio_bh_schedule(all.bh[i]);
    }
    aio_poll(ctx, false);

    g_assert_false(rescue_fired(&rescue));
    g_assert_cmpint(all.waits, ==, 1);
    g_assert_cmpint(all.ran, ==, 3);
    for (int i = 0; i < 3; i++) {
        g_assert_cmpint(all.runs[i], ==, 1);
    }
    /* Each scheduled once, each ran once. */
    for (int i = 0; i < 5; i++) {
        aio_poll(ctx, false);
    }
    for (int i = 0; i < 3; i++) {
        g_assert_cmpint(all.runs[i], ==, 1);
    }

    /* Again, with the BHs scheduled by another thread. */
    memset(all.runs, 0, sizeof(all.runs));
    all.ran = all.waits = 0;
    {
        GThread *t = g_thread_new("sched3", schedule_three_bhs_fn, all.bh);

        g_thread_join(t);
    }
    aio_poll(ctx, false);
    g_assert_false(rescue_fired(&rescue));
    g_assert_cmpint(all.waits, ==, 1);
    for (int i = 0; i < 3; i++) {
        g_assert_cmpint(all.runs[i], ==, 1);
    }

    rescue_disarm(&rescue);
    for (int i = 0; i < 3; i++) {
        aio_bh_delete(all.bh[i]);
    }
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* notify_me: set only while the loop may block                              */

/*
 * aio_notify() writes the context's eventfd only when the home thread may
 * be about to block (notify_me).  notify_me must be back to false whenever
 * aio_poll() returns, whatever path the turn took: in particular when the
 * last look before blocking found a BH that another thread had just
 * scheduled.  If it stays set, a later aio_notify() writes the eventfd
 * although nobody waits; polling consumes the notification (no system
 * call), the eventfd stays readable, and the next blocking turn is woken
 * by it at once: a spurious wakeup.
 *
 * The observable: the home thread, between turns (so certainly not about to
 * block), calls aio_notify() (here through aio_context_set_poll_params(),
 * which notifies, and which also turns polling on); a turn consumes the
 * notification by polling; then a blocking turn that only a timer can end
 * must not count a wakeup.  With a correct loop this is deterministic: no
 * other thread touches the context while it is checked, and the eventfd
 * was drained by fd-monitor turns with polling off just before.  Catching
 * the bug needs another thread to schedule a BH in the few nanoseconds
 * between the loop's last look at the BH list and its pre-block re-check,
 * so each round first runs blocking turns against a thread that schedules
 * BHs continuously, with varying gaps.  Statistical: with the bug, on an
 * otherwise idle 2-CPU VM, about one round in ten (hundreds per run) saw
 * the spurious wakeup; with other programs competing for the CPUs it can
 * drop to a few per run, or none.
 */
typedef struct BhHammer {
    QEMUBH *bh;
    _Atomic bool quit;
    _Atomic bool pause;
    _Atomic bool paused;
    _Atomic uint64_t scheduled;
    GThread *thread;
} BhHammer;

static void nop_cb(void *opaque)
{
}

static gpointer bh_hammer_fn(gpointer opaque)
{
    BhHammer *h = opaque;
    uint64_t rng = 0x2545f4914f6cdd1dULL;

    while (!atomic_load(&h->quit)) {
        if (atomic_load(&h->pause)) {
            atomic_store(&h->paused, true);
            while (atomic_load(&h->pause) && !atomic_load(&h->quit)) {
                sched_yield();
            }
            atomic_store(&h->paused, false);
            continue;
        }
        aio_bh_schedule(h->bh);
        atomic_fetch_add(&h->scheduled, 1);
        /* A varying gap, so that some schedules land mid-turn. */
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        for (volatile unsigned i = 0; i < (rng & 255); i++) {
            /* spin */
        }
    }
    return NULL;
}

static void bh_hammer_pause(BhHammer *h)
{
    atomic_store(&h->pause, true);
    while (!atomic_load(&h->paused)) {
        sched_yield();
    }
}

static void bh_hammer_resume(BhHammer *h)
{
    atomic_store(&h->pause, false);
}

static void test_notify_me_cleared(void)
{
    AioContext *ctx = ctx_new();
    BhHammer h = { .pause = true };
    TestTimer tt;
    uint64_t spurious = 0;
    int rounds = 0;
    int64_t start = clock_now_ns();

    h.bh = aio_bh_new(ctx, nop_cb, NULL);
    h.thread = g_thread_new("bh-hammer", bh_hammer_fn, &h);
    bh_hammer_pause(&h);
    test_timer_init(ctx, &tt, NULL, 0);

    while (rounds < 4000 && clock_now_ns() - start < NS_PER_SEC) {
        AioPollStats s0, s1;

        rounds++;
        /* Blocking turns against a concurrent scheduler, polling off. */
        set_poll(ctx, 0, 0, 0);
        bh_hammer_resume(&h);
        for (int i = 0; i < 8; i++) {
            aio_poll(ctx, true);
        }
        bh_hammer_pause(&h);

        /*
         * Quiet now.  Polling is off, so these turns ask the fd monitor:
         * they run the last BH, accept the notification and drain the
         * eventfd.
         */
        aio_poll(ctx, false);
        aio_poll(ctx, false);

        /* Home thread, between turns: notify (and turn polling on). */
        s0 = get_stats(ctx);
        set_poll(ctx, AIO_POLL_MAX_NS_DEFAULT, 0, 0);
        aio_notify(ctx);
        aio_poll(ctx, true);        /* not blocking: notified */
        test_timer_arm(&tt, clock_now_ns() + 50000);
        while (!tt.fired) {
            aio_poll(ctx, true);    /* only the timer may end this */
        }
        tt.fired = 0;
        s1 = get_stats(ctx);
        if (s1.wakeups != s0.wakeups) {
            spurious++;
            log_stats("spurious wakeup, before", &s0);
            log_stats("spurious wakeup, after", &s1);
        }
    }
    g_test_message("%d rounds, %" PRIu64 " BHs scheduled, %" PRIu64
                   " spurious wakeups", rounds, atomic_load(&h.scheduled),
                   spurious);

    atomic_store(&h.quit, true);
    g_thread_join(h.thread);
    aio_poll(ctx, false);
    aio_bh_delete(h.bh);
    aio_context_unref(ctx);
    g_assert_cmpuint(spurious, ==, 0);
}

/* ------------------------------------------------------------------------ */
/* Re-registering a handler that is ready in this turn                       */

typedef struct SwitchSrc {
    EventNotifier e;
    AioContext *ctx;
    struct SwitchSrc *other;
    bool switched;                /* made write-only by the other's callback */
    int reads;
    int writes;
} SwitchSrc;

static void switch_write_cb(void *opaque)
{
    ((SwitchSrc *)opaque)->writes++;
}

static bool switch_poll_cb(void *opaque)
{
    return true;                  /* always has work */
}

static void switch_read_cb(void *opaque)
{
    SwitchSrc *s = opaque;
    SwitchSrc *o = s->other;

    s->reads++;
    event_notifier_test_and_clear(&s->e);
    if (!o->reads && !o->switched) {
        /* The other handler is ready too: make it write-only. */
        o->switched = true;
        aio_set_fd_handler(s->ctx, event_notifier_get_fd(&o->e), NULL,
                           switch_write_cb, NULL, NULL, o);
    }
}

/*
 * Two handlers found ready in the same turn; the first one dispatched
 * re-registers the other as write-only (no io_read, no io_poll).  The
 * other's readiness is stale: it must be dropped, not dispatched through
 * a callback that no longer exists.  by_polling: ready by io_poll (no
 * io_poll_ready), else by the fd monitor.
 */
static void run_switch_to_write_only(const void *arg)
{
    const bool by_polling = *(const bool *)arg;
    AioContext *ctx = ctx_new();
    SwitchSrc a = { .ctx = ctx }, b = { .ctx = ctx };
    SwitchSrc *sw, *rd;

    a.other = &b;
    b.other = &a;
    g_assert_cmpint(event_notifier_init(&a.e, false), ==, 0);
    g_assert_cmpint(event_notifier_init(&b.e, false), ==, 0);
    aio_set_fd_handler(ctx, event_notifier_get_fd(&a.e), switch_read_cb,
                       NULL, by_polling ? switch_poll_cb : NULL, NULL, &a);
    aio_set_fd_handler(ctx, event_notifier_get_fd(&b.e), switch_read_cb,
                       NULL, by_polling ? switch_poll_cb : NULL, NULL, &b);
    event_notifier_set(&a.e);
    event_notifier_set(&b.e);

    aio_poll(ctx, !by_polling);
    g_assert_true(a.switched != b.switched);
    sw = a.switched ? &a : &b;
    rd = a.switched ? &b : &a;
    g_assert_cmpint(rd->reads, ==, 1);
    g_assert_cmpint(sw->reads, ==, 0);
    /* Its readiness was for reading: no write callback in this turn. */
    g_assert_cmpint(sw->writes, ==, 0);

    /* The new registration works: an eventfd is always writable. */
    for (int i = 0; i < 100 && !sw->writes; i++) {
        aio_poll(ctx, false);
    }
    g_assert_cmpint(sw->writes, >=, 1);
    g_assert_cmpint(sw->reads, ==, 0);

    aio_set_fd_handler(ctx, event_notifier_get_fd(&a.e), NULL, NULL, NULL,
                       NULL, NULL);
    aio_set_fd_handler(ctx, event_notifier_get_fd(&b.e), NULL, NULL, NULL,
                       NULL, NULL);
    event_notifier_cleanup(&a.e);
    event_notifier_cleanup(&b.e);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* io_poll_begin/io_poll_end pairing                                         */

/*
 * A handler whose io_poll keeps finding work for busy_turns turns keeps
 * the context polling (io_poll_begin called, io_poll_end not yet) across
 * turns.  Handlers registered meanwhile, from its callback, must get
 * io_poll_begin (their producers' notifications are suppressed like
 * everybody else's), and io_poll_end only after an io_poll_begin: begins
 * and ends alternate per handler (PollSrc counts alternation_errors).
 */
typedef struct BusySrc {
    EventNotifier e;              /* first: callbacks get &src->e */
    AioContext *ctx;
    int busy_turns;
    int begins, ends;
    bool begun;
    int alternation_errors;
    int reads;
    PollSrc *late_kept;                /* added while polling, kept */
    PollSrc *late_removed;   /* added while polling, removed while polling */
    int added_at, removed_at;     /* reads count at which that happened */
    int late_not_begun;           /* callbacks (polling) that found a late
                                   * PollSrc's notifications still on */
    int late_checks;
} BusySrc;

static void busy_begin(EventNotifier *e)
{
    BusySrc *b = (BusySrc *)e;

    b->begins++;
    b->alternation_errors += b->begun;
    b->begun = true;
}

static void busy_end(EventNotifier *e)
{
    BusySrc *b = (BusySrc *)e;

    b->ends++;
    b->alternation_errors += !b->begun;
    b->begun = false;
}

static bool busy_poll(EventNotifier *e)
{
    return ((BusySrc *)e)->busy_turns > 0;
}

static void busy_check_late(BusySrc *b, PollSrc *psrc)
{
    uint64_t begins = atomic_load(&psrc->begins);
    uint64_t ends = atomic_load(&psrc->ends);

    g_assert_cmpuint(ends, <=, begins);
    g_assert_cmpuint(begins - ends, <=, 1);
    g_assert_cmpuint(atomic_load(&psrc->alternation_errors), ==, 0);
    b->late_checks++;
    if (!atomic_load(&psrc->no_notify)) {
        b->late_not_begun++;
    }
}

static void busy_read(EventNotifier *e)
{
    BusySrc *b = (BusySrc *)e;

    event_notifier_test_and_clear(e);
    b->reads++;
    if (b->busy_turns > 0) {
        b->busy_turns--;
    }
    if (b->busy_turns > 0) {
        /* Readable too while busy: the loop never blocks on us. */
        event_notifier_set(e);
    }
    if (!b->begun) {
        return;                   /* not polling (yet, or any more) */
    }
    /* Polling is on (our io_poll_begin ran, io_poll_end did not). */
    if (!b->added_at) {
        b->added_at = b->reads;
        psrc_init(b->late_kept, b->ctx, true);
        psrc_init(b->late_removed, b->ctx, true);
        return;
    }
    if (b->late_kept) {
        busy_check_late(b, b->late_kept);
    }
    if (b->late_removed && !b->removed_at) {
        busy_check_late(b, b->late_removed);
        if (b->reads >= b->added_at + 5) {
            b->removed_at = b->reads;
            psrc_cleanup(b->late_removed);
            /* Removed while polling: its io_poll_end closed the pair. */
            g_assert_cmpuint(atomic_load(&b->late_removed->ends), ==,
                             atomic_load(&b->late_removed->begins));
            g_assert_cmpuint(atomic_load(&b->late_removed->alternation_errors),
                             ==, 0);
        }
    }
}

static void test_poll_hooks_paired_for_late_handlers(void)
{
    AioContext *ctx = ctx_new();
    BusySrc b = { .ctx = ctx, .busy_turns = 30 };
    PollSrc kept, removed;
    TestTimer tt;
    int turns = 0;

    /* A large poll-max-ns: a preempted turn never shrinks the window to
     * 0 (which would stop polling, and with it the test).  qemu-classic
     * begins every handler while polling; the predictive policy only
     * those it spins for (the rest keep their notifications on). */
    set_poll(ctx, NS_PER_SEC, 0, 0);
    aio_context_set_poll_policy(ctx, &aio_poll_policy_qemu_classic);
    aio_poll(ctx, false);           /* accept set_poll's notification */
    b.late_kept = &kept;
    b.late_removed = &removed;
    g_assert_cmpint(event_notifier_init(&b.e, false), ==, 0);
    aio_set_event_notifier(ctx, &b.e, busy_read, busy_poll, NULL);
    aio_set_event_notifier_poll(ctx, &b.e, busy_begin, busy_end);

    /* First turn: the fd is ready, the window grows; then polling finds
     * work turn after turn. */
    event_notifier_set(&b.e);
    while (b.busy_turns > 0 && turns < 1000) {
        aio_poll(ctx, true);
        turns++;
    }
    g_test_message("%d turns, %d reads; added at read %d, removed at %d; "
                   "busy: begins=%d ends=%d; kept: begins=%" PRIu64
                   " ends=%" PRIu64 "; removed: begins=%" PRIu64
                   " ends=%" PRIu64, turns, b.reads, b.added_at,
                   b.removed_at, b.begins, b.ends, atomic_load(&kept.begins),
                   atomic_load(&kept.ends), atomic_load(&removed.begins),
                   atomic_load(&removed.ends));
    g_assert_cmpint(b.busy_turns, ==, 0);
    g_assert_cmpint(b.added_at, >, 0);           /* polling did start */
    g_assert_cmpint(b.removed_at, >, 0);
    g_assert_cmpint(b.late_checks, >, 0);
    /* The late handlers' notifications were suppressed while polling. */
    g_assert_cmpint(b.late_not_begun, ==, 0);
    g_assert_cmpuint(atomic_load(&kept.begins), >=, 1);
    g_assert_cmpuint(atomic_load(&removed.begins), ==, 1);
    g_assert_cmpuint(atomic_load(&removed.ends), ==, 1);

    /* Idle: the window ends (io_poll_end for all) and the loop blocks. */
    test_timer_init(ctx, &tt, NULL, 0);
    test_timer_arm(&tt, clock_now_ns() + 2 * NS_PER_MS);
    while (!tt.fired) {
        aio_poll(ctx, true);
    }
    g_assert_cmpint(b.alternation_errors, ==, 0);
    g_assert_cmpint(b.begins, ==, b.ends);
    g_assert_cmpuint(atomic_load(&kept.alternation_errors), ==, 0);
    g_assert_cmpuint(atomic_load(&kept.ends), ==, atomic_load(&kept.begins));
    g_assert_false(atomic_load(&kept.no_notify));

    psrc_cleanup_checked(&kept);
    g_assert_cmpuint(atomic_load(&removed.alternation_errors), ==, 0);
    aio_set_event_notifier(ctx, &b.e, NULL, NULL, NULL);
    event_notifier_cleanup(&b.e);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* A huge poll window                                                        */

/*
 * poll-max-ns = INT64_MAX with a huge poll-grow: after two events the
 * window is INT64_MAX ns, i.e. "poll until something happens".  The turn
 * must then spin until the message published 5 ms later by another thread
 * (found by polling: the PollSrc's kicks are suppressed while polling), not
 * skip the spin because a deadline computed as start + window overflowed
 * (which is also undefined behaviour: UBSan fails the sanitizer build).
 * A 2 s timer bounds the spin in case the message is never seen.
 */
static void test_huge_window_spins(void)
{
    AioContext *ctx = ctx_new();
    AioPollStats s0, s1;
    TestTimer bound;
    PollSrc psrc;

    set_poll(ctx, INT64_MAX, INT64_MAX, 0);
    psrc_init(&psrc, ctx, true);
    grow_window(ctx, &psrc, INT64_MAX);

    test_timer_init(ctx, &bound, NULL, 0);
    test_timer_arm(&bound, clock_now_ns() + 2 * NS_PER_SEC);
    s0 = get_stats(ctx);
    g_assert_true(psrc_publish_after_and_run(&psrc, 5 * NS_PER_MS));
    s1 = get_stats(ctx);
    log_stats("huge window, before", &s0);
    log_stats("huge window, after", &s1);

    g_assert_false(bound.fired);
    g_assert_cmpint(s1.poll_ns, ==, INT64_MAX);
    /*
     * Spun (about 5 ms) until polling found the message.  At least 1 ms,
     * in case this thread was preempted between starting the producer and
     * starting the spin; a turn that skips the spin spins for microseconds.
     */
    g_assert_cmpuint(s1.poll_time_ns - s0.poll_time_ns, >=,
                     (uint64_t)NS_PER_MS);
    g_assert_cmpuint(s1.poll_hits - s0.poll_hits, >=, 1);
    g_assert_cmpuint(s1.wakeups - s0.wakeups, ==, 0);

    aio_timer_del(&bound.t);
    psrc_cleanup_checked(&psrc);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* Statistics readers vs. handler changes                                    */

typedef struct WinReader {
    AioContext *ctx;
    _Atomic bool quit;
    _Atomic uint64_t reads;
    GThread *thread;
} WinReader;

static gpointer win_reader_fn(gpointer opaque)
{
    WinReader *r = opaque;

    while (!atomic_load(&r->quit)) {
        AioHandlerWindow w[3];
        AioPollStats s;
        int n = aio_context_get_handler_windows(r->ctx, w, 3);

        g_assert_cmpint(n, >=, 0);
        g_assert_cmpint(n, <=, 8);
        for (int i = 0; i < MIN(n, 3); i++) {
            g_assert_cmpint(w[i].fd, >=, 0);
            g_assert_cmpint(w[i].poll_ns, >=, 0);
            g_assert_nonnull(memchr(w[i].name, '\0', sizeof(w[i].name)));
        }
        aio_context_get_stats(r->ctx, &s);
        atomic_fetch_add(&r->reads, 1);
    }
    return NULL;
}

static void stress_read_cb(EventNotifier *e)
{
    event_notifier_test_and_clear(e);
}

static bool stress_poll_cb(EventNotifier *e)
{
    return false;
}

/*
 * Another thread reads the handler windows and the counters in a loop while
 * the home thread adds, renames, re-registers and removes handlers.  A
 * smoke test for the sanitizer build (no ThreadSanitizer here): the reader
 * must never see a freed or half-made handler.
 */
static void test_windows_reader_vs_handler_changes(void)
{
    enum { N = 8 };
    AioContext *ctx = ctx_new();
    WinReader r = { .ctx = ctx };
    EventNotifier e[N];
    int64_t start = clock_now_ns();
    int iters = 0;

    for (int i = 0; i < N; i++) {
        g_assert_cmpint(event_notifier_init(&e[i], false), ==, 0);
    }
    r.thread = g_thread_new("win-reader", win_reader_fn, &r);
    while (iters < 20000 && clock_now_ns() - start < NS_PER_SEC / 2) {
        int i = iters % N;
        char name[32];

        iters++;
        aio_set_event_notifier(ctx, &e[i], stress_read_cb, stress_poll_cb,
                               NULL);
        g_snprintf(name, sizeof(name), "stress-%d-%d", i, iters);
        aio_set_fd_handler_name(ctx, event_notifier_get_fd(&e[i]), name);
        if (iters % 3 == 0) {
            /* Re-register without io_poll, then with it again. */
            aio_set_event_notifier(ctx, &e[i], stress_read_cb, NULL, NULL);
            aio_set_event_notifier(ctx, &e[i], stress_read_cb,
                                   stress_poll_cb, NULL);
        }
        if (iters % 2 == 0) {
            int j = (i + N / 2) % N;

            aio_set_event_notifier(ctx, &e[j], NULL, NULL, NULL);
        }
        aio_poll(ctx, false);       /* frees removed handlers */
    }
    atomic_store(&r.quit, true);
    g_thread_join(r.thread);
    g_test_message("%d changes, %" PRIu64 " reads", iters,
                   atomic_load(&r.reads));
    g_assert_cmpuint(atomic_load(&r.reads), >, 0);

    for (int i = 0; i < N; i++) {
        aio_set_event_notifier(ctx, &e[i], NULL, NULL, NULL);
        event_notifier_cleanup(&e[i]);
    }
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* Per-context data                                                          */

static int data_destroyed[3];

static void data_destroy(gpointer p)
{
    data_destroyed[GPOINTER_TO_INT(p) - 1]++;
}

static void test_context_data(void)
{
    AioContext *ctx = ctx_new();
    static const char key_a, key_b;

    memset(data_destroyed, 0, sizeof(data_destroyed));
    g_assert_null(aio_context_get_data(ctx, &key_a));

    aio_context_set_data(ctx, &key_a, GINT_TO_POINTER(1), data_destroy);
    aio_context_set_data(ctx, &key_b, GINT_TO_POINTER(3), data_destroy);
    g_assert_true(aio_context_get_data(ctx, &key_a) == GINT_TO_POINTER(1));
    g_assert_true(aio_context_get_data(ctx, &key_b) == GINT_TO_POINTER(3));

    /* Replacing destroys the old data. */
    aio_context_set_data(ctx, &key_a, GINT_TO_POINTER(2), data_destroy);
    g_assert_cmpint(data_destroyed[0], ==, 1);
    g_assert_true(aio_context_get_data(ctx, &key_a) == GINT_TO_POINTER(2));

    /* Setting NULL removes without destroying. */
    aio_context_set_data(ctx, &key_a, NULL, NULL);
    g_assert_null(aio_context_get_data(ctx, &key_a));
    g_assert_cmpint(data_destroyed[1], ==, 0);

    /* What is left is destroyed with the context. */
    aio_context_unref(ctx);
    g_assert_cmpint(data_destroyed[0], ==, 1);
    g_assert_cmpint(data_destroyed[1], ==, 0);
    g_assert_cmpint(data_destroyed[2], ==, 1);
}

static const TestCase tests[] = {
    { "/aio/fd/read-dispatch", test_fd_read },
    { "/aio/fd/write-dispatch", test_fd_write },
    { "/aio/event-notifier", test_event_notifier },
    { "/aio/dispatch-time", test_dispatch_time },
    { "/aio/bh/schedule", test_bh_schedule },
    { "/aio/bh/scheduled-by-bh", test_bh_scheduled_by_bh },
    { "/aio/bh/coalesce", test_bh_coalesce },
    { "/aio/bh/coalesce-threads", test_bh_coalesce_threads },
    { "/aio/bh/cross-thread-stress", test_bh_cross_thread_stress },
    { "/aio/bh/from-thread-while-blocking", test_bh_from_thread_blocking },
    { "/aio/bh/from-thread-while-polling", test_bh_from_thread_polling },
    { "/aio/bh/oneshot", test_bh_oneshot },
    { "/aio/bh/cancel-delete", test_bh_cancel_delete },
    { "/aio/run-sync", test_run_sync },
    { "/aio/home-thread", test_home_thread },
    { "/aio/notify/wakes-blocking-poll", test_notify_blocking },
    { "/aio/notify/ends-poll-window", test_notify_polling },
    { "/aio/timer/order", test_timer_order },
    { "/aio/timer/precise-without-polling", test_timer_precise_blocking },
    { "/aio/timer/not-delayed-by-poll-window",
      test_timer_not_delayed_by_window },
    { "/aio/poll/non-pollable-handler-disables-polling",
      test_non_pollable_disables_polling },
    { "/aio/poll/window-ended-when-non-pollable-added",
      NULL, run_window_closed_when_polling_stops, &yes },
    { "/aio/poll/window-ended-when-max-set-to-0",
      NULL, run_window_closed_when_polling_stops, &no },
    { "/aio/poll/hooks-stay-begun-while-polling-finds-work",
      test_poll_hooks_stay_begun },
    { "/aio/poll/non-blocking-never-waits", test_nonblocking_never_waits },
    { "/aio/poll/idle-window-falls-to-zero", test_idle_window_falls_to_zero },
    { "/aio/poll/idle-predictive-stops-spinning",
      test_idle_predictive_stops_spinning },
    { "/aio/poll/lost-wakeup-stress", test_lost_wakeup_stress },
    { "/aio/poll/lost-wakeup-detector-selftest", test_lost_wakeup_selftest },
    { "/aio/handler/remove-in-callback", test_remove_in_callback },
    { "/aio/handler/windows-and-names", test_handler_windows },
    { "/aio/params", test_params },
    { "/aio/context-data", test_context_data },
    { "/aio/policy/custom-policy-sees-waits", test_custom_policy },
    { "/aio/policy/nap", test_policy_nap },
    { "/aio/policy/dropped-source-gets-kicks-back",
      test_dropped_source_gets_kicks_back },
    { "/aio/policy/spin-looks-around-after-1us",
      test_spin_looks_around_after_1us },
    { "/aio/policy/spin-set-survives-rebuild",
      test_spin_set_survives_rebuild },
    { "/aio/stats", test_stats },
    { "/aio/nested/handlers-ready-together-fdmon",
      NULL, run_nested_handlers, &no },
    { "/aio/nested/handlers-ready-together-polled",
      NULL, run_nested_handlers, &yes },
    { "/aio/nested/bh-waits-for-bhs-of-same-batch",
      test_nested_bh_waits_for_batch },
    { "/aio/notify/notify-me-cleared-after-turn", test_notify_me_cleared },
    { "/aio/handler/switch-to-write-only-while-ready-polled",
      NULL, run_switch_to_write_only, &yes },
    { "/aio/handler/switch-to-write-only-while-ready-fdmon",
      NULL, run_switch_to_write_only, &no },
    { "/aio/poll/hooks-paired-for-handlers-added-while-polling",
      test_poll_hooks_paired_for_late_handlers },
    { "/aio/poll/huge-window-spins", test_huge_window_spins },
    { "/aio/handler/windows-reader-vs-handler-changes",
      test_windows_reader_vs_handler_changes },
};

/* Below the 120 s meson timeout, so that the watchdog reports first. */
TEST_MAIN(tests, 90)

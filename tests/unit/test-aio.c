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
 * Most polling tests use "Vq", a model of a virtqueue:
 *   - the producer (another thread) publishes a message by incrementing
 *     vq->avail, issues a full fence, then kicks the eventfd only if the
 *     consumer's no_notify flag is clear;
 *   - the consumer (the loop) polls vq->avail in io_poll, sets no_notify in
 *     io_poll_begin and clears it in io_poll_end;
 *   - the consumer acknowledges what it has consumed in vq->acked, so the
 *     producer can wait for it (with a timeout: a message that is never
 *     consumed is a lost wakeup, which the producer reports and then breaks
 *     the loop out of epoll with aio_notify()).
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
 *
 * The consumer's hooks deliberately use plain (release) stores and its
 * io_poll no locked instructions, so that the loop's own full barrier
 * after io_poll_end is the only thing ordering "kicks back on" before "look
 * at the ring again", as it is for a real virtqueue.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <glib.h>

#include "util/aio.h"
#include "util/clock.h"
#include "util/event-notifier.h"

#define NS_PER_MS  ((int64_t)1000000)
#define NS_PER_SEC ((int64_t)1000000000)

/* ------------------------------------------------------------------------ */
/* Watchdog                                                                  */

#define WATCHDOG_SECONDS 90

static void watchdog_fired(int sig)
{
    static const char msg[] =
        "test-aio: watchdog: a test did not finish in time (hung loop?)\n";
    ssize_t r = write(STDERR_FILENO, msg, sizeof(msg) - 1);

    (void)r;
    abort();
}

typedef struct TestCase {
    const char *path;
    void (*fn)(void);
} TestCase;

static void run_with_watchdog(gconstpointer data)
{
    const TestCase *tc = data;

    signal(SIGALRM, watchdog_fired);
    alarm(WATCHDOG_SECONDS);
    tc->fn();
    alarm(0);
}

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */

static void sleep_ns(int64_t ns)
{
    g_usleep(ns / 1000);
}

/* Busy-wait (the caller wants to stay on the CPU: µs-scale delays). */
static void spin_ns(int64_t ns)
{
    int64_t end = clock_now_ns() + ns;

    while (clock_now_ns() < end) {
        cpu_relax();
    }
}

static AioContext *ctx_new(void)
{
    Error *err = NULL;
    AioContext *ctx = aio_context_new(&err);

    g_assert_no_error(err);
    g_assert_nonnull(ctx);
    return ctx;
}

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

/* A thread that writes one byte to fd after a delay. */
typedef struct DelayedWrite {
    int fd;
    int64_t delay_ns;
    GThread *thread;
} DelayedWrite;

static gpointer delayed_write_fn(gpointer opaque)
{
    DelayedWrite *dw = opaque;

    sleep_ns(dw->delay_ns);
    g_assert_cmpint(write(dw->fd, "x", 1), ==, 1);
    return NULL;
}

static void delayed_write_start(DelayedWrite *dw, int fd, int64_t delay_ns)
{
    dw->fd = fd;
    dw->delay_ns = delay_ns;
    dw->thread = g_thread_new("delayed-write", delayed_write_fn, dw);
}

/* ------------------------------------------------------------------------ */
/* Vq: a virtqueue-like pollable source                                      */

typedef struct Vq {
    EventNotifier kick;            /* first: callbacks get &vq->kick */
    AioContext *ctx;

    _Atomic uint64_t avail;        /* producer: messages published */
    _Atomic uint64_t acked;        /* consumer: messages consumed */
    _Atomic bool no_notify;        /* consumer: "don't kick, I'm polling" */
    _Atomic bool end_started;      /* set on entry to io_poll_end */
    uint64_t seen;                 /* consumer's copy of avail */

    /* Counters (home thread writes, any thread reads). */
    _Atomic uint64_t polls;        /* io_poll calls */
    _Atomic uint64_t poll_ready;   /* io_poll_ready calls */
    _Atomic uint64_t reads;        /* io_read calls */
    _Atomic uint64_t reads_work;   /* io_read calls that found a message */
    _Atomic uint64_t begins;
    _Atomic uint64_t ends;
    _Atomic uint64_t kicks;        /* producer: eventfd writes */
    _Atomic uint64_t alternation_errors; /* begin twice / end without begin */
    _Atomic bool begun;

    /* io_poll_end lingering (stress test) */
    bool linger;
    uint64_t rng;                  /* xorshift state, home thread */
    int64_t linger_before_ns;      /* fixed linger (self-test) */

    /*
     * Rendezvous at the poll->block transition.  The producer sets
     * hs_want; io_poll_end then announces itself (end_started) and waits,
     * briefly, until the producer has published (hs_published), either
     * before or after it re-enables kicks.  "Before" forces the message to
     * be found only by the loop's final io_poll after the barrier;
     * "after" makes the kick race with that final io_poll.
     */
    _Atomic bool hs_want;
    _Atomic bool hs_published;
    _Atomic bool hs_go;            /* producer is publishing right now */
    _Atomic uint64_t hs_simultaneous;  /* rendezvous completed, racing */
    _Atomic uint64_t hs_before_store;  /* rendezvous completed, before */
    _Atomic uint64_t hs_after_store;   /* rendezvous completed, after */
    bool ended;                    /* io_poll_end ran, no poll/read since */
    _Atomic uint64_t recheck_hits; /* found by the io_poll after io_poll_end */

    /* Self-test: model a loop that forgets the re-check after io_poll_end. */
    bool lie_after_end;
    bool just_ended;
} Vq;

static Vq *vq_of(EventNotifier *e)
{
    return (Vq *)e;
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

static void vq_consume(Vq *vq)
{
    uint64_t a = atomic_load(&vq->avail);

    if (a != vq->seen) {
        vq->seen = a;
        atomic_store(&vq->acked, a);
    }
}

static bool vq_io_poll(EventNotifier *e)
{
    Vq *vq = vq_of(e);

    /*
     * Only the home thread counts: a plain increment, no locked
     * instruction that would act as a full barrier and hide a missing one
     * in the loop.
     */
    atomic_store_explicit(&vq->polls,
                          atomic_load_explicit(&vq->polls,
                                               memory_order_relaxed) + 1,
                          memory_order_relaxed);
    if (vq->lie_after_end && vq->just_ended) {
        vq->just_ended = false;
        return false;
    }
    return atomic_load(&vq->avail) != vq->seen;
}

static void vq_io_poll_ready(EventNotifier *e)
{
    Vq *vq = vq_of(e);

    atomic_fetch_add(&vq->poll_ready, 1);
    if (vq->ended) {
        /* No io_poll_begin since io_poll_end: found by the re-check. */
        atomic_fetch_add(&vq->recheck_hits, 1);
        vq->ended = false;
    }
    vq_consume(vq);
}

static void vq_io_read(EventNotifier *e)
{
    Vq *vq = vq_of(e);
    uint64_t before = vq->seen;

    event_notifier_test_and_clear(&vq->kick);
    vq->ended = false;
    atomic_fetch_add(&vq->reads, 1);
    vq_consume(vq);
    if (vq->seen != before) {
        atomic_fetch_add(&vq->reads_work, 1);
    }
}

static void vq_io_poll_begin(EventNotifier *e)
{
    Vq *vq = vq_of(e);

    atomic_fetch_add(&vq->begins, 1);
    vq->ended = false;
    if (atomic_exchange(&vq->begun, true)) {
        atomic_fetch_add(&vq->alternation_errors, 1);
    }
    atomic_store(&vq->no_notify, true);
}

/* io_poll_end side of the rendezvous: wait (bounded) for the producer. */
static bool vq_wait_flag(_Atomic bool *flag)
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

static void vq_io_poll_end(EventNotifier *e)
{
    Vq *vq = vq_of(e);
    uint64_t r = xorshift(&vq->rng);
    int mode = atomic_load(&vq->hs_want) ? (int)(r % 3) : -1;

    atomic_store(&vq->end_started, true);
    atomic_fetch_add(&vq->ends, 1);
    if (!atomic_exchange(&vq->begun, false)) {
        atomic_fetch_add(&vq->alternation_errors, 1);
    }
    vq->ended = true;
    vq->just_ended = vq->lie_after_end;
    if (mode == 0 && vq_wait_flag(&vq->hs_published)) {
        /* Published while kicks were off: only the re-check can see it. */
        atomic_fetch_add(&vq->hs_before_store, 1);
    }
    if (mode == 2) {
        /*
         * Store as soon as the producer is about to publish, so that our
         * store and its publish race within nanoseconds (the store-buffer
         * window that the loop's full fence closes).
         */
        if (vq_wait_flag(&vq->hs_go)) {
            atomic_fetch_add(&vq->hs_simultaneous, 1);
        }
    } else {
        if (vq->linger_before_ns) {
            spin_ns(vq->linger_before_ns);
        }
        /* A third of the time linger a few hundred ns before the store. */
        if (vq->linger && (r >> 2) % 3 == 1) {
            spin_ns(100 + (r >> 8) % 400);
        }
    }
    /*
     * A plain (release) store, as a virtqueue's flag write in guest memory
     * would be: ordering it before the re-check is the loop's job.
     */
    atomic_store_explicit(&vq->no_notify, false, memory_order_release);
    if (mode == 2) {
        return;
    }
    /* A third of the time linger after it. */
    if (vq->linger && (r >> 2) % 3 == 2) {
        spin_ns(100 + (r >> 8) % 400);
    }
    if (mode == 1 && vq_wait_flag(&vq->hs_published)) {
        /* The kick races with the loop's re-check. */
        atomic_fetch_add(&vq->hs_after_store, 1);
    }
}

static void vq_init(Vq *vq, AioContext *ctx, bool with_hooks)
{
    memset(vq, 0, sizeof(*vq));
    vq->ctx = ctx;
    vq->rng = 0x9e3779b97f4a7c15ULL;
    g_assert_cmpint(event_notifier_init(&vq->kick, false), ==, 0);
    aio_set_event_notifier(ctx, &vq->kick, vq_io_read, vq_io_poll,
                           vq_io_poll_ready);
    if (with_hooks) {
        aio_set_event_notifier_poll(ctx, &vq->kick, vq_io_poll_begin,
                                    vq_io_poll_end);
    }
}

static void vq_cleanup(Vq *vq)
{
    aio_set_event_notifier(vq->ctx, &vq->kick, NULL, NULL, NULL);
    event_notifier_cleanup(&vq->kick);
    g_assert_cmpuint(atomic_load(&vq->alternation_errors), ==, 0);
}

/* Producer side: publish one message; kick unless the consumer polls. */
static void vq_publish(Vq *vq)
{
    atomic_fetch_add(&vq->avail, 1);
    /*
     * Full fence: the store to avail must be visible before we read
     * no_notify.  Pairs with the loop's full barrier between io_poll_end
     * (which clears no_notify) and the final io_poll (which reads avail).
     */
    atomic_thread_fence(memory_order_seq_cst);
    if (!atomic_load(&vq->no_notify)) {
        atomic_fetch_add(&vq->kicks, 1);
        g_assert_cmpint(event_notifier_set(&vq->kick), ==, 0);
    }
}

/* Producer side: wait until the consumer has acked n; false on timeout. */
static bool vq_wait_acked(Vq *vq, uint64_t n, int64_t timeout_ns)
{
    int64_t start = clock_now_ns();
    int64_t now = start;

    while (atomic_load(&vq->acked) < n) {
        now = clock_now_ns();
        if (now - start > timeout_ns) {
            return atomic_load(&vq->acked) >= n;
        }
        if (now - start < 100000) {
            cpu_relax();
        } else {
            sched_yield();
        }
    }
    return true;
}

/*
 * A thread that publishes one message after a delay, then waits (with a
 * timeout) for it to be consumed.  On timeout it records the loss and wakes
 * the loop with aio_notify() so that the test fails instead of hanging.
 */
typedef struct DelayedPub {
    Vq *vq;
    int64_t delay_ns;
    int64_t timeout_ns;
    uint64_t target;
    int64_t t_pub;
    _Atomic bool finished;
    _Atomic bool timed_out;
    GThread *thread;
} DelayedPub;

static gpointer delayed_pub_fn(gpointer opaque)
{
    DelayedPub *dp = opaque;

    sleep_ns(dp->delay_ns);
    dp->t_pub = clock_now_ns();
    vq_publish(dp->vq);
    if (!vq_wait_acked(dp->vq, dp->target, dp->timeout_ns)) {
        atomic_store(&dp->timed_out, true);
        aio_notify(dp->vq->ctx);        /* break the loop out of its wait */
    }
    atomic_store(&dp->finished, true);
    return NULL;
}

/* Publish after delay_ns; run the loop until consumed.  False if lost. */
static bool vq_publish_after_and_run(Vq *vq, int64_t delay_ns)
{
    DelayedPub dp = {
        .vq = vq,
        .delay_ns = delay_ns,
        .timeout_ns = 5 * NS_PER_SEC,
        .target = atomic_load(&vq->avail) + 1,
    };
    bool ok;

    dp.thread = g_thread_new("delayed-pub", delayed_pub_fn, &dp);
    while (vq->seen < dp.target && !atomic_load(&dp.timed_out)) {
        aio_poll(vq->ctx, true);
    }
    g_thread_join(dp.thread);
    ok = !atomic_load(&dp.timed_out);
    if (!ok) {
        g_test_message("message %" PRIu64 " published %" PRId64
                       " ns into the wait was never consumed "
                       "(no_notify=%d begins=%" PRIu64 " ends=%" PRIu64 ")",
                       dp.target, delay_ns, atomic_load(&vq->no_notify),
                       atomic_load(&vq->begins), atomic_load(&vq->ends));
    }
    return ok;
}

/*
 * Grow the context's window to at least target_ns.  The caller has set a
 * large max and a huge grow factor.  Events arrive 1 ms into each turn.
 */
static void grow_window(AioContext *ctx, Vq *vq, int64_t target_ns)
{
    AioPollStats s;

    for (int i = 0; i < 40; i++) {
        g_assert_true(vq_publish_after_and_run(vq, NS_PER_MS));
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
    DelayedWrite dw;
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
    delayed_write_start(&dw, fds[1], 20 * NS_PER_MS);
    while (st.reads < 2) {
        aio_poll(ctx, true);
    }
    g_thread_join(dw.thread);
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

typedef struct DelayedDrain {
    int fd;
    GThread *thread;
} DelayedDrain;

static gpointer delayed_drain_fn(gpointer opaque)
{
    DelayedDrain *dd = opaque;

    sleep_ns(20 * NS_PER_MS);
    drain_fd(dd->fd);
    return NULL;
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
    DelayedDrain dd;
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
    dd.fd = fds[0];
    dd.thread = g_thread_new("drain", delayed_drain_fn, &dd);
    while (st.writes < 2) {
        aio_poll(ctx, true);
    }
    g_thread_join(dd.thread);

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

typedef struct DelayedSet {
    EventNotifier *e;
    GThread *thread;
} DelayedSet;

static gpointer delayed_set_fn(gpointer opaque)
{
    DelayedSet *ds = opaque;

    sleep_ns(20 * NS_PER_MS);
    g_assert_cmpint(event_notifier_set(ds->e), ==, 0);
    return NULL;
}

static void test_event_notifier(void)
{
    AioContext *ctx = ctx_new();
    EnState st = { 0 };
    DelayedSet ds;

    g_assert_cmpint(event_notifier_init(&st.e, false), ==, 0);
    aio_set_event_notifier(ctx, &st.e, en_read, NULL, NULL);

    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(event_notifier_set(&st.e), ==, 0);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(st.reads, ==, 1);
    g_assert_cmpint(st.cleared, ==, 1);
    g_assert_false(aio_poll(ctx, false));

    /* Set from another thread while the loop blocks. */
    ds.e = &st.e;
    ds.thread = g_thread_new("set", delayed_set_fn, &ds);
    while (st.reads < 2) {
        aio_poll(ctx, true);
    }
    g_thread_join(ds.thread);
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
    /* Optional: wait until the loop is busy polling vq before acting. */
    Vq *vq;
    uint64_t polls_before;
    bool saw_polling;
    GThread *thread;
} LateBh;

static gpointer late_bh_fn(gpointer opaque)
{
    LateBh *lb = opaque;

    if (lb->vq) {
        int64_t t0 = clock_now_ns();

        /* The turn is spinning once io_poll is being called. */
        while (atomic_load(&lb->vq->polls) < lb->polls_before + 2 &&
               clock_now_ns() - t0 < 2 * NS_PER_SEC) {
            g_usleep(100);
        }
        lb->saw_polling = atomic_load(&lb->vq->polls) >= lb->polls_before + 2;
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

static void test_bh_from_thread_polling(void)
{
    AioContext *ctx = ctx_new();
    BhState st = { .ctx = ctx };
    LateBh lb = { .ctx = ctx, .delay_ns = 2 * NS_PER_MS };
    AioPollStats s0, s1;
    TestTimer rescue;
    int64_t t0, t1;
    Vq vq;
    bool ret;

    /* A 1 s window, grown with events. */
    set_poll(ctx, NS_PER_SEC, 1000000, 0);
    vq_init(&vq, ctx, true);
    grow_window(ctx, &vq, NS_PER_SEC);
    rescue_arm(ctx, &rescue);

    st.bh = aio_bh_new(ctx, bh_cb, &st);
    lb.bh = st.bh;
    lb.vq = &vq;
    lb.polls_before = atomic_load(&vq.polls);
    s0 = get_stats(ctx);
    lb.thread = g_thread_new("late-bh", late_bh_fn, &lb);
    t0 = clock_now_ns();
    ret = aio_poll(ctx, true);
    t1 = clock_now_ns();
    g_thread_join(lb.thread);
    s1 = get_stats(ctx);
    log_stats("after", &s1);
    g_test_message("turn took %" PRId64 " us, returned %" PRId64
                   " us after the BH was scheduled",
                   (t1 - t0) / 1000, (t1 - lb.t_sched) / 1000);

    rescue_disarm(&rescue);
    g_assert_false(rescue_fired(&rescue));
    g_assert_true(lb.saw_polling);
    g_assert_true(ret);
    g_assert_cmpint(st.runs, ==, 1);
    g_assert_cmpuint(s1.poll_time_ns, >, s0.poll_time_ns);
    /* Cut short: well before the 1 s window would have ended. */
    g_assert_cmpint(t1 - lb.t_sched, <, 100 * NS_PER_MS);
    g_assert_cmpint(t1 - t0, <, 500 * NS_PER_MS);

    vq_cleanup(&vq);
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
    AioPollStats s0, s1;
    TestTimer rescue;
    int64_t t0, t1;
    bool ret;
    Vq vq;

    set_poll(ctx, NS_PER_SEC, 1000000, 0);
    vq_init(&vq, ctx, true);
    grow_window(ctx, &vq, NS_PER_SEC);
    rescue_arm(ctx, &rescue);

    lb.vq = &vq;
    lb.polls_before = atomic_load(&vq.polls);
    s0 = get_stats(ctx);
    lb.thread = g_thread_new("notify", late_bh_fn, &lb);
    t0 = clock_now_ns();
    ret = aio_poll(ctx, true);
    t1 = clock_now_ns();
    g_thread_join(lb.thread);
    s1 = get_stats(ctx);
    g_test_message("turn took %" PRId64 " us, returned %" PRId64
                   " us after aio_notify()", (t1 - t0) / 1000,
                   (t1 - lb.t_sched) / 1000);

    rescue_disarm(&rescue);
    g_assert_false(rescue_fired(&rescue));
    g_assert_true(lb.saw_polling);
    g_assert_false(ret);
    g_assert_cmpuint(s1.poll_time_ns, >, s0.poll_time_ns);
    g_assert_cmpint(t1 - lb.t_sched, <, 100 * NS_PER_MS);
    g_assert_cmpint(t1 - t0, <, 500 * NS_PER_MS);

    vq_cleanup(&vq);
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
    Vq vq;

    /* Grow a 1 s window; a 5 µs timer must still fire on time. */
    set_poll(ctx, NS_PER_SEC, 1000000, 0);
    vq_init(&vq, ctx, true);
    grow_window(ctx, &vq, NS_PER_SEC);

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

    vq_cleanup(&vq);
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
    Vq vq;

    set_poll(ctx, NS_PER_SEC, 1000000, 0);
    vq_init(&vq, ctx, true);

    /* A control fd without a poll callback. */
    make_pipe(fds);
    ctl.fd = fds[0];
    aio_set_fd_handler(ctx, fds[0], fd_read_cb, NULL, NULL, NULL, &ctl);

    s0 = get_stats(ctx);
    /* Events that would grow a window; nothing may spin or poll. */
    for (int i = 0; i < 5; i++) {
        g_assert_true(vq_publish_after_and_run(&vq, NS_PER_MS));
    }
    atomic_fetch_add(&vq.avail, 1);        /* work visible only to io_poll */
    aio_poll(ctx, false);
    write_byte(fds[1]);
    while (ctl.reads == 0) {
        aio_poll(ctx, true);
    }
    s1 = get_stats(ctx);
    log_stats("with a non-pollable handler", &s1);
    g_assert_cmpuint(atomic_load(&vq.polls), ==, 0);
    g_assert_cmpuint(atomic_load(&vq.begins), ==, 0);
    g_assert_cmpuint(atomic_load(&vq.ends), ==, 0);
    g_assert_cmpuint(atomic_load(&vq.poll_ready), ==, 0);
    g_assert_cmpuint(atomic_load(&vq.reads_work), ==, 5);
    g_assert_cmpuint(s1.poll_time_ns, ==, s0.poll_time_ns);
    g_assert_cmpuint(s1.poll_hits, ==, 0);
    g_assert_cmpuint(s1.poll_misses, ==, 0);

    /* Remove it: polling comes back. */
    aio_set_fd_handler(ctx, fds[0], NULL, NULL, NULL, NULL, NULL);
    polls = atomic_load(&vq.polls);
    g_assert_true(aio_poll(ctx, false));   /* io_poll finds the hidden one */
    g_assert_cmpuint(atomic_load(&vq.polls), ==, polls + 1);
    g_assert_cmpuint(atomic_load(&vq.poll_ready), ==, 1);

    grow_window(ctx, &vq, NS_PER_SEC);
    g_assert_true(vq_publish_after_and_run(&vq, 2 * NS_PER_MS));
    s1 = get_stats(ctx);
    log_stats("after removal", &s1);
    g_assert_cmpuint(s1.poll_time_ns, >, s0.poll_time_ns);
    g_assert_cmpuint(atomic_load(&vq.begins), >=, 1);
    g_assert_cmpuint(s1.poll_hits, >=, 1);

    vq_cleanup(&vq);
    close(fds[0]);
    close(fds[1]);
    aio_context_unref(ctx);
}

/*
 * While a poll window is "begun" (producer told not to kick), turning
 * polling off must end it (io_poll_end) before blocking; else the next
 * message is never kicked and never seen.
 */
static void run_window_closed_when_polling_stops(bool by_handler)
{
    AioContext *ctx = ctx_new();
    FdState ctl = { .ctx = ctx };
    int fds[2];
    Vq vq;

    set_poll(ctx, NS_PER_SEC, 1000000, 0);
    vq_init(&vq, ctx, true);
    grow_window(ctx, &vq, NS_PER_SEC);
    /* A message found by polling leaves the window begun. */
    g_assert_true(vq_publish_after_and_run(&vq, 2 * NS_PER_MS));
    g_assert_true(atomic_load(&vq.begun));
    g_assert_true(atomic_load(&vq.no_notify));

    make_pipe(fds);
    if (by_handler) {
        ctl.fd = fds[0];
        aio_set_fd_handler(ctx, fds[0], fd_read_cb, NULL, NULL, NULL, &ctl);
    } else {
        set_poll(ctx, 0, 0, 0);
    }
    g_assert_true(vq_publish_after_and_run(&vq, 20 * NS_PER_MS));
    g_assert_false(atomic_load(&vq.begun));
    g_assert_cmpuint(atomic_load(&vq.reads_work), >=, 1);

    if (by_handler) {
        aio_set_fd_handler(ctx, fds[0], NULL, NULL, NULL, NULL, NULL);
    }
    vq_cleanup(&vq);
    close(fds[0]);
    close(fds[1]);
    aio_context_unref(ctx);
}

static void test_window_closed_by_non_pollable(void)
{
    run_window_closed_when_polling_stops(true);
}

static void test_window_closed_by_max_zero(void)
{
    run_window_closed_when_polling_stops(false);
}

static void test_poll_hooks_stay_begun(void)
{
    AioContext *ctx = ctx_new();
    uint64_t begins, ends, ready, reads, kicks;
    Vq vq;

    set_poll(ctx, NS_PER_SEC, 1000000, 0);
    vq_init(&vq, ctx, true);
    grow_window(ctx, &vq, NS_PER_SEC);

    begins = atomic_load(&vq.begins);
    ends = atomic_load(&vq.ends);
    ready = atomic_load(&vq.poll_ready);
    reads = atomic_load(&vq.reads);
    kicks = atomic_load(&vq.kicks);
    for (int i = 0; i < 5; i++) {
        g_assert_true(vq_publish_after_and_run(&vq, 2 * NS_PER_MS));
    }
    /* Five messages found by polling, one window begun, none ended. */
    g_assert_cmpuint(atomic_load(&vq.poll_ready) - ready, ==, 5);
    g_assert_cmpuint(atomic_load(&vq.reads) - reads, ==, 0);
    g_assert_cmpuint(atomic_load(&vq.begins) - begins, <=, 1);
    g_assert_cmpuint(atomic_load(&vq.ends) - ends, ==, 0);
    g_assert_cmpuint(atomic_load(&vq.kicks) - kicks, ==, 0);  /* suppressed */

    vq_cleanup(&vq);
    aio_context_unref(ctx);
}

static void test_nonblocking_never_waits(void)
{
    AioContext *ctx = ctx_new();
    TestTimer tt;
    uint64_t polls;
    int64_t t0, dt;
    Vq vq;

    set_poll(ctx, NS_PER_SEC, 1000000, 0);
    vq_init(&vq, ctx, true);
    grow_window(ctx, &vq, NS_PER_SEC);
    test_timer_init(ctx, &tt, NULL, 0);
    test_timer_arm(&tt, clock_now_ns() + NS_PER_SEC);

    polls = atomic_load(&vq.polls);
    t0 = clock_now_ns();
    for (int i = 0; i < 10; i++) {
        g_assert_false(aio_poll(ctx, false));
    }
    dt = clock_now_ns() - t0;
    g_test_message("10 non-blocking turns with a 1 s window: %" PRId64 " us",
                   dt / 1000);
    g_assert_cmpint(dt, <, 100 * NS_PER_MS);
    g_assert_cmpuint(atomic_load(&vq.polls) - polls, ==, 10);
    g_assert_cmpint(tt.fired, ==, 0);

    aio_timer_del(&tt.t);
    vq_cleanup(&vq);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* Idle windows fall to 0                                                    */

typedef struct PingPong {
    Vq *vq;
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
        vq_publish(pp->vq);
        pp->sent = i;
        if (!vq_wait_acked(pp->vq, i, 5 * NS_PER_SEC)) {
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

static void test_idle_window_falls_to_zero(void)
{
    AioContext *ctx = ctx_new();
    PingPong pp = { .ctx = ctx, .min_msgs = 500, .max_msgs = 20000 };
    AioHandlerWindow w[4];
    AioPollStats s10, s20;
    TestTimer tt;
    GThread *t;
    Vq vq;

    set_poll(ctx, AIO_POLL_MAX_NS_DEFAULT, 0, 0);
    vq_init(&vq, ctx, true);

    /* Busy phase: ping-pong until the window is open. */
    pp.vq = &vq;
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

    g_assert_cmpint(s20.poll_ns, ==, 0);
    g_assert_cmpuint(s20.shrinks, >, pp.at_peak.shrinks);
    g_assert_cmpint(aio_context_get_handler_windows(ctx, w, 4), ==, 1);
    g_assert_cmpint(w[0].poll_ns, ==, 0);
    /* Once closed, idle turns do not spin at all. */
    g_assert_cmpuint(s20.poll_time_ns, ==, s10.poll_time_ns);
    g_assert_cmpuint(s20.poll_hits, ==, s10.poll_hits);

    aio_timer_del(&tt.t);
    vq_cleanup(&vq);
    aio_context_unref(ctx);
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
    Vq vq;
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
    return atomic_load(&st->vq.poll_ready) > 0 &&
           atomic_load(&st->vq.reads_work) > 0 &&
           atomic_load(&st->vq.hs_before_store) > 0 &&
           atomic_load(&st->vq.recheck_hits) > 0;
}

static gpointer stress_producer_fn(gpointer opaque)
{
    Stress *st = opaque;
    Vq *vq = &st->vq;
    GRand *r = g_rand_new_with_seed(st->seed);
    int64_t start = clock_now_ns();

    for (int i = 1; ; i++) {
        int kind = g_rand_int_range(r, 0, 100);
        bool published = false;
        int64_t t0;

        if (kind < st->handshake_pct && atomic_load(&vq->begun)) {
            /*
             * The loop is polling: publish exactly when it leaves its poll
             * window (io_poll_end waits for us, briefly).
             */
            atomic_store(&vq->end_started, false);
            atomic_store(&vq->hs_published, false);
            atomic_store(&vq->hs_go, false);
            atomic_store(&vq->hs_want, true);
            t0 = clock_now_ns();
            while (!atomic_load(&vq->end_started) &&
                   clock_now_ns() - t0 < 2 * NS_PER_MS) {
                (void)atomic_load_explicit(&vq->no_notify,
                                           memory_order_relaxed);
                cpu_relax();
            }
            if (atomic_load(&vq->end_started)) {
                st->handshakes++;
            } else {
                st->handshake_misses++;
            }
            t0 = clock_now_ns();
            atomic_store_explicit(&vq->hs_go, true, memory_order_relaxed);
            vq_publish(vq);
            published = true;
            atomic_store(&vq->hs_published, true);
            atomic_store(&vq->hs_want, false);
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
            vq_publish(vq);
        }
        st->sent = i;
        if (!vq_wait_acked(vq, i, st->timeout_ns)) {
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
    vq_init(&st->vq, st->ctx, true);
    st->vq.linger = st->linger;
    st->vq.rng ^= st->seed;
    st->vq.lie_after_end = st->lie_after_end;
    st->vq.linger_before_ns = st->linger_before_ns;
    aio_set_fd_handler_name(st->ctx, st->vq.kick.fd, "stress-vq");

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
                   atomic_load(&st->vq.kicks), atomic_load(&st->vq.poll_ready),
                   atomic_load(&st->vq.recheck_hits),
                   atomic_load(&st->vq.reads_work),
                   atomic_load(&st->vq.reads) - atomic_load(&st->vq.reads_work),
                   atomic_load(&st->vq.begins), atomic_load(&st->vq.ends),
                   atomic_load(&st->vq.hs_before_store),
                   atomic_load(&st->vq.hs_after_store),
                   atomic_load(&st->vq.hs_simultaneous),
                   st->max_latency_ns / 1000);
}

static void stress_cleanup(Stress *st)
{
    vq_cleanup(&st->vq);
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
    g_assert_cmpuint(atomic_load(&st.vq.acked), ==, st.sent);
    g_assert_cmpuint(s.wakeups, >, 0);
    g_assert_cmpuint(atomic_load(&st.vq.reads_work), >, 0);
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
        g_assert_cmpuint(atomic_load(&st.vq.ends), >, 0);
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
    if (!atomic_load(&st.lost) && !atomic_load(&st.vq.hs_before_store)) {
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
    Vq vq;

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
    vq_init(&vq, ctx, true);
    s0 = get_stats(ctx);
    g_assert_true(vq_publish_after_and_run(&vq, 20 * NS_PER_MS));
    s1 = get_stats(ctx);
    log_stats("eventfd wakeup", &s1);
    g_assert_cmpuint(s1.wakeups - s0.wakeups, >=, 1);
    g_assert_cmpuint(s1.dispatches - s0.dispatches, ==, 1);
    g_assert_cmpuint(s1.poll_hits - s0.poll_hits, ==, 0);
    g_assert_cmpuint(s1.poll_misses - s0.poll_misses, ==, 0);
    g_assert_cmpuint(s1.poll_time_ns - s0.poll_time_ns, ==, 0);
    g_assert_cmpuint(s1.block_time_ns - s0.block_time_ns, >=, 10 * NS_PER_MS);
    g_assert_cmpuint(atomic_load(&vq.polls), ==, 0);

    /* Grow a 1 s window: the events arrive by eventfd, windows grow. */
    set_poll(ctx, NS_PER_SEC, 1000000, 0);
    s0 = get_stats(ctx);
    grow_window(ctx, &vq, NS_PER_SEC);
    s1 = get_stats(ctx);
    g_assert_cmpuint(s1.grows - s0.grows, >=, 2);
    g_assert_cmpint(s1.poll_ns, ==, NS_PER_SEC);

    /* Poll hit: found by polling 5 ms into the window, no wakeup. */
    s0 = get_stats(ctx);
    g_assert_true(vq_publish_after_and_run(&vq, 5 * NS_PER_MS));
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
    g_assert_true(vq_publish_after_and_run(&vq, 60 * NS_PER_MS));
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
    vq_cleanup(&vq);
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
    Vq vq, vq2;

    g_assert_cmpint(aio_context_get_handler_windows(ctx, w, 4), ==, 0);

    vq_init(&vq, ctx, true);
    aio_set_fd_handler_name(ctx, vq.kick.fd, "vq0");
    make_pipe(fds);
    fst.fd = fds[0];
    aio_set_fd_handler(ctx, fds[0], fd_read_cb, NULL, NULL, NULL, &fst);
    aio_set_fd_handler_name(ctx, fds[0], "control");

    memset(w, 0, sizeof(w));
    g_assert_cmpint(aio_context_get_handler_windows(ctx, w, 4), ==, 1);
    g_assert_cmpint(w[0].fd, ==, vq.kick.fd);
    g_assert_cmpstr(w[0].name, ==, "vq0");
    g_assert_cmpint(w[0].poll_ns, ==, 0);

    vq_init(&vq2, ctx, false);
    aio_set_fd_handler_name(ctx, vq2.kick.fd,
                            "a-very-long-handler-name-0123456789abcdef");
    memset(w, 0, sizeof(w));
    g_assert_cmpint(aio_context_get_handler_windows(ctx, w, 4), ==, 2);
    for (int i = 0; i < 2; i++) {
        if (w[i].fd == vq2.kick.fd) {
            g_assert_cmpuint(strlen(w[i].name), ==, 31);
            g_assert_true(strncmp(w[i].name, "a-very-long-handler-name-0123456",
                                  31) == 0);
        } else {
            g_assert_cmpint(w[i].fd, ==, vq.kick.fd);
        }
    }
    /* max smaller than the count: fills max, returns the count. */
    memset(w, 0x5a, sizeof(w));
    g_assert_cmpint(aio_context_get_handler_windows(ctx, w, 1), ==, 2);
    g_assert_true(w[0].fd == vq.kick.fd || w[0].fd == vq2.kick.fd);
    g_assert_cmpint(w[1].fd, ==, 0x5a5a5a5a);

    aio_set_fd_handler(ctx, fds[0], NULL, NULL, NULL, NULL, NULL);
    vq_cleanup(&vq2);
    vq_cleanup(&vq);
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

static AioPollAdjustment rec_adjust(const AioPollParams *params,
                                    AioPollWindow *win, int64_t wait_ns,
                                    bool had_event)
{
    rec_policy.calls++;
    rec_policy.last_wait = wait_ns;
    rec_policy.last_event = had_event;
    win->ns = 0;
    return AIO_POLL_KEPT;
}

static int64_t rec_spin_ns(const AioPollParams *params, int64_t largest)
{
    return MIN(largest, params->max_ns);
}

static const AioPollPolicyOps rec_policy_ops = {
    .name = "recording",
    .adjust = rec_adjust,
    .spin_ns = rec_spin_ns,
};

static void test_custom_policy(void)
{
    AioContext *ctx = ctx_new();
    TestTimer tt;
    int64_t t0, t1;
    Vq vq;

    set_poll(ctx, NS_PER_SEC, 0, 0);
    aio_context_set_poll_policy(ctx, &rec_policy_ops);
    vq_init(&vq, ctx, true);
    memset(&rec_policy, 0, sizeof(rec_policy));

    /* An event 30 ms into a blocking turn. */
    t0 = clock_now_ns();
    g_assert_true(vq_publish_after_and_run(&vq, 30 * NS_PER_MS));
    t1 = clock_now_ns();
    g_test_message("adjust calls %d, wait %" PRId64 " us, event %d",
                   rec_policy.calls, rec_policy.last_wait / 1000,
                   rec_policy.last_event);
    g_assert_cmpint(rec_policy.calls, >=, 1);
    g_assert_true(rec_policy.last_event);
    g_assert_cmpint(rec_policy.last_wait, >=, 20 * NS_PER_MS);
    g_assert_cmpint(rec_policy.last_wait, <=, t1 - t0);

    /* A timer 30 ms out and no event. */
    memset(&rec_policy, 0, sizeof(rec_policy));
    test_timer_init(ctx, &tt, NULL, 0);
    t0 = clock_now_ns();
    test_timer_arm(&tt, t0 + 30 * NS_PER_MS);
    while (!tt.fired) {
        aio_poll(ctx, true);
    }
    t1 = clock_now_ns();
    g_test_message("adjust calls %d, wait %" PRId64 " us, event %d",
                   rec_policy.calls, rec_policy.last_wait / 1000,
                   rec_policy.last_event);
    g_assert_cmpint(rec_policy.calls, >=, 1);
    g_assert_false(rec_policy.last_event);
    g_assert_cmpint(rec_policy.last_wait, >=, 20 * NS_PER_MS);
    g_assert_cmpint(rec_policy.last_wait, <=, t1 - t0);

    aio_timer_del(&tt.t);
    vq_cleanup(&vq);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */

static const TestCase tests[] = {
    { "/aio/fd/read-dispatch", test_fd_read },
    { "/aio/fd/write-dispatch", test_fd_write },
    { "/aio/event-notifier", test_event_notifier },
    { "/aio/bh/schedule", test_bh_schedule },
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
      test_window_closed_by_non_pollable },
    { "/aio/poll/window-ended-when-max-set-to-0",
      test_window_closed_by_max_zero },
    { "/aio/poll/hooks-stay-begun-while-polling-finds-work",
      test_poll_hooks_stay_begun },
    { "/aio/poll/non-blocking-never-waits", test_nonblocking_never_waits },
    { "/aio/poll/idle-window-falls-to-zero", test_idle_window_falls_to_zero },
    { "/aio/poll/lost-wakeup-stress", test_lost_wakeup_stress },
    { "/aio/poll/lost-wakeup-detector-selftest", test_lost_wakeup_selftest },
    { "/aio/handler/remove-in-callback", test_remove_in_callback },
    { "/aio/handler/windows-and-names", test_handler_windows },
    { "/aio/params", test_params },
    { "/aio/policy/custom-policy-sees-waits", test_custom_policy },
    { "/aio/stats", test_stats },
};

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    for (size_t i = 0; i < G_N_ELEMENTS(tests); i++) {
        g_test_add_data_func(tests[i].path, &tests[i], run_with_watchdog);
    }
    return g_test_run();
}

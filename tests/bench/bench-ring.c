/*
 * The virtqueue-like kick channel shared by bench-aio and bench-block.
 *
 * Theory of operation: the client stores its new index (release), issues a
 * full fence and loads no_notify; the IOThread's io_poll_begin hook sets
 * no_notify, io_poll_end clears it, and the loop then issues a full barrier
 * and calls io_poll once more.  That is a Dekker pair: either the client
 * sees 0 and kicks, or the loop's last poll sees the new index, so no kick
 * is lost.  The handler knows nothing of the ring's layout but its two
 * indexes: io_poll compares the client's published index with how far the
 * server has taken it, and the benchmark's BenchKickOps takes the work
 * (after a kick, or when io_poll said yes).
 *
 * The sampling helpers read a server thread's CPU clock, its voluntary
 * context switches (from /proc: how often it really went to sleep) and its
 * loop's AioPollStats; nothing here keeps state.
 */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

#include "bench-ring.h"

void *bench_alloc_aligned(size_t align, size_t size)
{
    void *p;

    if (posix_memalign(&p, align, size) != 0) {
        g_error("out of memory");
    }
    memset(p, 0, size);
    return p;
}

/* ------------------------------------------------------------------------ */
/* The IOThread side                                                         */

static BenchKick *kick_from_notifier(EventNotifier *e)
{
    return (BenchKick *)((char *)e - offsetof(BenchKick, notifier));
}

/* Is there published work not taken yet?  No side effects. */
static bool kick_io_poll(EventNotifier *e)
{
    BenchKick *k = kick_from_notifier(e);

    /* Pairs with the client's release store of its index. */
    return atomic_load_explicit(k->published, memory_order_acquire) !=
           *k->taken;
}

static void kick_io_read(EventNotifier *e)
{
    BenchKick *k = kick_from_notifier(e);

    event_notifier_test_and_clear(e);
    k->ops->process(k->opaque);
}

static void kick_io_poll_ready(EventNotifier *e)
{
    BenchKick *k = kick_from_notifier(e);

    k->ops->process(k->opaque);
}

static void kick_poll_begin(EventNotifier *e)
{
    BenchKick *k = kick_from_notifier(e);

    /*
     * Relaxed: suppressing kicks is an optimisation; a client that still
     * sees 0 just kicks once more.
     */
    atomic_store_explicit(&k->no_notify, 1, memory_order_relaxed);
}

static void kick_poll_end(EventNotifier *e)
{
    BenchKick *k = kick_from_notifier(e);

    /*
     * The loop issues a full barrier after io_poll_end and polls once more;
     * that barrier pairs with the fence in bench_kick_notify() between the
     * client's store of its index and its load of no_notify.
     */
    atomic_store_explicit(&k->no_notify, 0, memory_order_relaxed);
}

/* Register the kick handler.  Runs in the IOThread via aio_run_sync(). */
static void kick_attach_in_iothread(void *opaque)
{
    BenchKick *k = opaque;

    g_assert(aio_context_in_home_thread(k->ctx));
    aio_set_event_notifier(k->ctx, &k->notifier, kick_io_read, kick_io_poll,
                           kick_io_poll_ready);
    aio_set_event_notifier_poll(k->ctx, &k->notifier, kick_poll_begin,
                                kick_poll_end);
    aio_set_fd_handler_name(k->ctx, event_notifier_get_fd(&k->notifier),
                            "bench-kick");
}

/* Remove the kick handler.  Runs in the IOThread via aio_run_sync(). */
static void kick_detach_in_iothread(void *opaque)
{
    BenchKick *k = opaque;

    g_assert(aio_context_in_home_thread(k->ctx));
    aio_set_event_notifier(k->ctx, &k->notifier, NULL, NULL, NULL);
}

bool bench_kick_init(BenchKick *k, const _Atomic uint32_t *published,
                     const uint32_t *taken, const BenchKickOps *ops,
                     void *opaque, Error **errp)
{
    int ret;

    atomic_init(&k->no_notify, 0);
    k->ctx = NULL;
    k->published = published;
    k->taken = taken;
    k->ops = ops;
    k->opaque = opaque;
    ret = event_notifier_init(&k->notifier, false);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "cannot create the kick eventfd");
        return false;
    }
    return true;
}

void bench_kick_cleanup(BenchKick *k)
{
    g_assert(!k->ctx);
    event_notifier_cleanup(&k->notifier);
}

void bench_kick_attach(BenchKick *k, AioContext *ctx)
{
    k->ctx = ctx;
    aio_run_sync(ctx, kick_attach_in_iothread, k);
}

void bench_kick_detach(BenchKick *k)
{
    aio_run_sync(k->ctx, kick_detach_in_iothread, k);
    k->ctx = NULL;
}

/* ------------------------------------------------------------------------ */
/* The client side                                                           */

bool bench_kick_notify(BenchKick *k)
{
    /*
     * Full fence between the caller's store of its index and the load of
     * no_notify; pairs with the loop's full barrier after io_poll_end
     * (before its last poll).
     */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&k->no_notify, memory_order_relaxed)) {
        return false;
    }
    event_notifier_set(&k->notifier);
    return true;
}

int64_t bench_kick_handler_window(BenchKick *k)
{
    AioHandlerWindow wins[16];
    int fd = event_notifier_get_fd(&k->notifier);
    int n, i;

    n = aio_context_get_handler_windows(k->ctx, wins, G_N_ELEMENTS(wins));
    for (i = 0; i < n && i < (int)G_N_ELEMENTS(wins); i++) {
        if (wins[i].fd == fd) {
            return wins[i].poll_ns;
        }
    }
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Sampling the server side                                                  */

int64_t bench_probe_cpu_ns(const BenchServerProbe *p)
{
    struct timespec ts;

    if (p->iot) {
        return iothread_get_cpu_ns(p->iot);
    }
    if (clock_gettime(p->cpu_clock, &ts) != 0) {
        return 0;
    }
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t bench_probe_sleeps(const BenchServerProbe *p)
{
    return bench_thread_sleeps(p->tid);
}

void bench_probe_loop_stats(const BenchServerProbe *p, AioPollStats *out)
{
    memset(out, 0, sizeof(*out));
    if (p->iot) {
        aio_context_get_stats(iothread_get_aio_context(p->iot), out);
    }
}

double bench_sleeps_per(const BenchServerSample *a,
                        const BenchServerSample *b, double n)
{
    if (a->sleeps < 0 || b->sleeps < 0) {
        return -1;
    }
    return (b->sleeps - a->sleeps) / n;
}

void bench_loop_stats_store(const AioPollStats *a, const AioPollStats *b,
                            double *v)
{
    v[STAT_POLL_HITS] = b->poll_hits - a->poll_hits;
    v[STAT_POLL_MISSES] = b->poll_misses - a->poll_misses;
    v[STAT_WAKEUPS] = b->wakeups - a->wakeups;
    v[STAT_DISPATCHES] = b->dispatches - a->dispatches;
    v[STAT_POLL_TIME] = b->poll_time_ns - a->poll_time_ns;
    v[STAT_BLOCK_TIME] = b->block_time_ns - a->block_time_ns;
    v[STAT_POLL_NS] = b->poll_ns;
}

char *bench_loop_stats_string(const AioPollStats *st)
{
    return g_strdup_printf("turns=%" PRIu64 " wakeups=%" PRIu64
                           " poll_hits=%" PRIu64 " poll_misses=%" PRIu64
                           " dispatches=%" PRIu64 " poll_ns=%" PRId64,
                           st->turns, st->wakeups, st->poll_hits,
                           st->poll_misses, st->dispatches, st->poll_ns);
}

/* ------------------------------------------------------------------------ */
/* Latency statistics                                                        */

void bench_latency_stats(uint64_t *samples, size_t n, double *v)
{
    bench_sort_u64(samples, n);
    v[STAT_P50] = bench_percentile_sorted(samples, n, 500);
    v[STAT_P99] = bench_percentile_sorted(samples, n, 990);
    v[STAT_P999] = bench_percentile_sorted(samples, n, 999);
    v[STAT_MEAN] = bench_mean_u64(samples, n);
    v[STAT_MIN] = samples[0];
    v[STAT_MAX] = samples[n - 1];
}

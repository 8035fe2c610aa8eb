/*
 * aio_poll(): the adaptive busy-poll event loop.
 *
 * Theory of operation.  One turn of aio_poll(ctx, blocking=true):
 *
 *  1. Decide how long the turn may wait: not at all if a BH is pending or
 *     the context was notified, until the first timer, or forever.
 *  2. Poll.  Busy polling is allowed when poll-max-ns > 0 and every handler
 *     has a poll callback (a handler without one could only be seen by
 *     epoll, which we do not call while spinning).  Each pollable handler
 *     has its own window; the turn spins for the largest of them (as the
 *     policy says), bounded by the first timer.  Before spinning, the
 *     io_poll_begin hooks suppress the producers' notifications (a virtqueue
 *     sets VRING_USED_F_NO_NOTIFY), and they stay suppressed across turns
 *     while polling keeps finding work.  The spin calls every io_poll in
 *     turn, including the context's own notifier, whose poll callback reads
 *     ctx->notified, so a BH or aio_notify() ends the spin at once.
 *  3. About to block: io_poll_end re-enables notifications, a full fence
 *     orders that store before the next loads, and every io_poll runs once
 *     more.  A producer that published work just before it saw
 *     notifications come back on did not kick; this last look finds its
 *     work.  Only then do we set notify_me and block in the fd monitor.
 *  4. Dispatch ready handlers, then bottom halves, then expired timers,
 *     then once more the bottom halves those scheduled (a completion's
 *     notification goes out in the turn that completed it); then the
 *     policy learns from the turn (poll-policy.c).
 *
 * Nesting.  A callback may call aio_poll() again.  The ready list and the
 * BH batch belong to the context and are consumed one entry at a time, so
 * the nested turn dispatches what the outer turn had collected; only the
 * outermost turn adjusts the windows.
 *
 * The handlers themselves (registration, the context's own notifier, the
 * statistics other threads read) are in aio-handlers.c.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include "aio-internal.h"
#include "util/clock.h"
#include "util/cutils.h"
#include "util/trace.h"

/* ------------------------------------------------------------------------ */
/* Polling                                                                  */

static bool aio_poll_allowed(AioContext *ctx, const AioPollParams *params)
{
    return params->max_ns > 0 && ctx->n_unpollable == 0;
}

static void aio_source_set_add(AioSourceSet *set, AioHandler *h)
{
    if (set->n == set->cap) {
        set->cap = MAX(8, set->cap * 2);
        set->h = g_renew(AioHandler *, set->h, set->cap);
        set->s = g_renew(AioPollSource *, set->s, set->cap);
    }
    set->h[set->n] = h;
    set->s[set->n] = &h->src;
    set->n++;
}

static bool aio_poll_handler(AioContext *ctx, AioHandler *h, int64_t turn_start,
                             int64_t *now);
static void aio_poll_set_stopped(AioContext *ctx);

static void aio_handler_set_active(AioHandler *h, bool active)
{
    h->active = active;
    atomic_store_explicit(&h->active_pub, active, memory_order_relaxed);
    if (!active) {
        h->src.spin = false;
    }
}

void aio_context_reset_poll_state(AioContext *ctx)
{
    AioPollCosts costs = ctx->pstate.costs;
    int64_t now = 0;

    /*
     * Notifications back on for every handler first (the new policy
     * begins the ones it spins for), with the usual fence and last look;
     * work found now is dispatched by the next turn.
     */
    if (ctx->poll_started) {
        aio_poll_set_stopped(ctx);
        atomic_thread_fence(memory_order_seq_cst);
        for (AioHandler *h = ctx->handlers; h; h = h->next) {
            if (h->recheck) {
                h->recheck = false;
                aio_poll_handler(ctx, h, ctx->turn_start_ns, &now);
            }
        }
    }
    for (AioHandler *h = ctx->handlers; h; h = h->next) {
        aio_poll_source_reset(&h->src);
        aio_handler_set_active(h, false);
        atomic_store_explicit(&h->window_ns_pub, 0, memory_order_relaxed);
        atomic_store_explicit(&h->phase_pub, 0, memory_order_relaxed);
    }
    memset(&ctx->pstate, 0, sizeof(ctx->pstate));
    ctx->pstate.costs = costs;
    atomic_store_explicit(&ctx->stats.poll_ns, 0, memory_order_relaxed);
    ctx->sources_dirty = true;
}

void aio_source_sets_free(AioContext *ctx)
{
    AioSourceSet *sets[] = { &ctx->all, &ctx->active, &ctx->spin,
                             &ctx->observed };

    for (size_t i = 0; i < G_N_ELEMENTS(sets); i++) {
        g_free(sets[i]->h);
        g_free(sets[i]->s);
        memset(sets[i], 0, sizeof(*sets[i]));
    }
}

/* Rebuild the source sets after handlers were added, changed or removed. */
static void aio_sources_rebuild(AioContext *ctx)
{
    ctx->all.n = ctx->active.n = ctx->spin.n = ctx->observed.n = 0;
    for (AioHandler *h = ctx->handlers; h; h = h->next) {
        h->src.ev = false;      /* an observation the rebuild dropped */
        if (h->deleted || h->internal || !aio_handler_is_pollable(h)) {
            continue;
        }
        aio_source_set_add(&ctx->all, h);
        if (h->active) {
            aio_source_set_add(&ctx->active, h);
            /* The spin set is the active sources the last plan marked:
             * they may have had io_poll_begin, and must stay polled. */
            if (h->src.spin) {
                aio_source_set_add(&ctx->spin, h);
            }
        }
    }
    ctx->rr = 0;
    ctx->sources_dirty = false;
}

/* A source had an event: per-source policies consider it from now on. */
static void aio_source_activate(AioContext *ctx, AioHandler *h)
{
    if (!h->active) {
        aio_handler_set_active(h, true);
        aio_source_set_add(&ctx->active, h);
        /* Its interval and its count of pending requests start now: what
         * happened while it was not watched is not a wait. */
        h->src.fresh = true;
        h->src.pending_stamp_ns = 0;
    }
}

/* Sources idle for this long leave the active set (QEMU waits 7 s). */
#define AIO_SOURCE_IDLE_NS (1000 * 1000 * 1000LL)
#define AIO_SOURCE_SWEEP_NS (100 * 1000 * 1000LL)

static void aio_sources_sweep(AioContext *ctx, int64_t now)
{
    unsigned j = 0;

    ctx->last_sweep_ns = now;
    for (unsigned i = 0; i < ctx->active.n; i++) {
        AioHandler *h = ctx->active.h[i];

        if (now - h->last_event_ns > AIO_SOURCE_IDLE_NS) {
            aio_handler_set_active(h, false);
            continue;
        }
        ctx->active.h[j] = h;
        ctx->active.s[j] = &h->src;
        j++;
    }
    ctx->active.n = j;
}

static void aio_source_publish(AioContext *ctx, AioHandler *h,
                               AioPollAdjustment adj, int64_t old, int64_t now)
{
    switch (adj) {
    case AIO_POLL_GREW:
        stat_add(&ctx->stats.grows, 1);
        SPINDLE_TRACE3(poll_grow, ctx, old, h->src.window_ns);
        break;
    case AIO_POLL_SHRANK:
        stat_add(&ctx->stats.shrinks, 1);
        SPINDLE_TRACE3(poll_shrink, ctx, old, h->src.window_ns);
        break;
    case AIO_POLL_KEPT:
        break;
    }
    if (h->src.window_ns != old) {
        atomic_store_explicit(&h->window_ns_pub, h->src.window_ns,
                              memory_order_relaxed);
        stat_add(&h->counters.window_changes, 1);
        atomic_store_explicit(&h->counters.last_change_event,
                              atomic_load_explicit(&h->counters.events,
                                                   memory_order_relaxed),
                              memory_order_relaxed);
        atomic_store_explicit(&h->counters.last_change_ns, now,
                              memory_order_relaxed);
    }
}

/* The phase of each active source; a change ends its interval. */
static void aio_sources_refresh_phases(AioContext *ctx, int64_t now)
{
    for (unsigned i = 0; i < ctx->active.n; i++) {
        AioHandler *h = ctx->active.h[i];
        AioPollCounts c = { 0 };
        unsigned phase, pending;

        if (!h->io_poll_counts.fd) {
            continue;
        }
        if (h->is_event_notifier) {
            h->io_poll_counts.en(h->opaque, &c);
        } else {
            h->io_poll_counts.fd(h->opaque, &c);
        }
        pending = c.pending;
        h->src.done = c.done;
        phase = pending > 0;
        /* The requests owed since the last turn (a step function sampled
         * at turn starts: a request taken and completed in one turn owes
         * nothing). */
        if (h->src.pending_stamp_ns) {
            h->src.pending_area += (uint64_t)h->src.pending_last *
                                   (uint64_t)MAX(now - h->src.pending_stamp_ns, 0);
        }
        h->src.pending_stamp_ns = now;
        h->src.pending_last = pending;
        if (phase != h->src.phase) {
            if (ctx->policy->phase_end) {
                int64_t old = h->src.window_ns;

                aio_source_publish(ctx, h, ctx->policy->phase_end(
                                       &ctx->pstate, &h->src, now), old, now);
            }
            h->src.phase = phase;
            h->src.ref_ns = now;
            atomic_store_explicit(&h->phase_pub, phase, memory_order_relaxed);
        }
    }
}

/* The sources the policy considers this turn. */
static AioSourceSet *aio_policy_sources(AioContext *ctx)
{
    return ctx->policy->per_source ? &ctx->active : &ctx->all;
}

/*
 * After plan(): the sources to poll on every pass.  A source the plan no
 * longer spins for gets its notifications back at once (io_poll_end, full
 * fence, one more look: the same race as before blocking), so that a busy
 * queue that keeps the loop spinning cannot leave another one suppressed
 * and seen only one pass in all.n.  True if that last look found work.
 */
static bool aio_spin_set_update(AioContext *ctx, int64_t turn_start,
                                int64_t *now)
{
    AioSourceSet *set = &ctx->spin;
    bool ended = false, found = false;
    uint64_t hits = 0;

    for (unsigned i = 0; i < set->n; i++) {
        AioHandler *h = set->h[i];

        if (!h->deleted && h->poll_begun && !(h->active && h->src.spin)) {
            aio_handler_poll_end(h);
            h->recheck = true;
            ended = true;
        }
    }
    if (ended) {
        /* Full fence: as in aio_poll() step 2. */
        atomic_thread_fence(memory_order_seq_cst);
        for (unsigned i = 0; i < set->n; i++) {
            AioHandler *h = set->h[i];

            if (h->recheck) {
                h->recheck = false;
                if (aio_poll_handler(ctx, h, turn_start, now)) {
                    found = true;
                    hits++;
                }
            }
        }
        stat_add(&ctx->stats.poll_hits, hits);
    }
    set->n = 0;
    for (unsigned i = 0; i < ctx->active.n; i++) {
        if (ctx->active.h[i]->src.spin) {
            aio_source_set_add(set, ctx->active.h[i]);
        }
    }
    return found;
}

static AioSourceSet *aio_spin_sources(AioContext *ctx)
{
    return ctx->policy->per_source ? &ctx->spin : &ctx->all;
}

/*
 * io_poll_begin for the handlers the spin polls on every pass (all of
 * them, for policies that are not per source).  Pairs with
 * aio_poll_set_stopped(), which ends every handler that was begun.
 */
static void aio_poll_set_begun(AioContext *ctx)
{
    AioSourceSet *set = aio_spin_sources(ctx);

    if (!ctx->poll_started) {
        ctx->poll_started = true;
        SPINDLE_TRACE2(poll_started, ctx, true);
    }
    for (unsigned i = 0; i < set->n; i++) {
        if (!set->h[i]->deleted) {
            aio_handler_poll_begin(set->h[i]);
        }
    }
}

/* io_poll_end for every handler that had io_poll_begin; they are marked
 * for the re-check (h->recheck). */
static void aio_poll_set_stopped(AioContext *ctx)
{
    if (!ctx->poll_started) {
        return;
    }
    ctx->poll_started = false;
    for (AioHandler *h = ctx->handlers; h; h = h->next) {
        if (!h->deleted && h->poll_begun) {
            aio_handler_poll_end(h);
            h->recheck = true;
        }
    }
    SPINDLE_TRACE2(poll_started, ctx, false);
}

/* Poll one handler; queue it if ready.  *now: read when the first is found. */
static bool aio_poll_handler(AioContext *ctx, AioHandler *h, int64_t turn_start,
                             int64_t *now)
{
    if (h->deleted || h->on_ready_list || !aio_handler_is_pollable(h) ||
        !aio_handler_call_poll(h)) {
        return false;
    }
    if (!*now) {
        *now = clock_now_ns();
    }
    h->poll_ready = true;
    h->poll_ready_ns = *now - turn_start;
    aio_handler_mark_ready(ctx, h);
    return true;
}

/*
 * How long a spin polls only its own sources before it also looks at one
 * other handler per pass.  The other handlers have their notifications on,
 * so a kick of theirs reaches the fd monitor, which the loop asks when a
 * spin ends without work and at least every AIO_FDMON_CHECK_INTERVAL turns;
 * looking at them finds one that became busy sooner.  But each look reads
 * another queue's ring, a line no other pass touched, and in the first
 * microsecond the event the spin waits for is usually about to come: with
 * 63 idle queues beside a QD1 one, looking in every pass made each request
 * 40-60 ns (13%) slower on a 2-vCPU VM whose cache line crosses in 45 ns.
 */
#define AIO_SPIN_LOOK_AROUND_NS 1000

/*
 * One pass: the context's notifier, the spin set, and, with look_around,
 * one more handler in turn (every handler, for policies that are not per
 * source).  True if any was ready; then *now_out is the clock reading taken
 * when the first was found (the turn reuses it rather than reading the
 * clock again).
 */
static bool aio_poll_pass(AioContext *ctx, int64_t turn_start, int64_t *now_out,
                          bool look_around)
{
    AioSourceSet *set = aio_spin_sources(ctx);
    uint64_t hits = 0;
    bool found = false;
    int64_t now = 0;

    if (ctx->notifier_handler) {
        found = aio_poll_handler(ctx, ctx->notifier_handler, turn_start, &now);
    }
    for (unsigned i = 0; i < set->n; i++) {
        if (aio_poll_handler(ctx, set->h[i], turn_start, &now)) {
            found = true;
            hits++;
        }
    }
    if (look_around && set != &ctx->all && ctx->all.n > 0) {
        AioHandler *h = ctx->all.h[ctx->rr++ % ctx->all.n];

        if (!h->src.spin && aio_poll_handler(ctx, h, turn_start, &now)) {
            found = true;
            hits++;
        }
    }
    if (hits) {
        stat_add(&ctx->stats.poll_hits, hits);
    }
    if (found) {
        *now_out = now;
    }
    return found;
}

/*
 * The last look before blocking.  Policies that are not per source look
 * at every handler, as QEMU does.  Per-source ones look at the handlers
 * whose notifications were just turned back on (h->recheck) and the
 * context's notifier: a handler whose notifications stayed on has its
 * producer's kick in the fd monitor, and polling 63 idle queues' rings
 * before every sleep would cost more than the sleep.
 */
static bool aio_poll_recheck(AioContext *ctx, int64_t turn_start,
                             int64_t *now_out)
{
    bool every = !ctx->policy->per_source;
    uint64_t hits = 0;
    bool found = false;
    int64_t now = 0;

    for (AioHandler *h = ctx->handlers; h; h = h->next) {
        bool look = every || h->recheck || h->internal;

        h->recheck = false;
        if (look && aio_poll_handler(ctx, h, turn_start, &now)) {
            found = true;
            hits += !h->internal;
        }
    }
    if (hits) {
        stat_add(&ctx->stats.poll_hits, hits);
    }
    if (found) {
        *now_out = now;
    }
    return found;
}

/*
 * Spin until a poll callback reports work or deadline passes; *now is the
 * last clock reading (when work was found, or past the deadline).  No
 * system calls in here: clock_gettime is a vDSO read, and it is read once
 * per pass, not again for the statistics (each read shows in QD1 latency).
 */
static bool aio_poll_spin(AioContext *ctx, int64_t turn_start, int64_t deadline,
                          int64_t *now)
{
    bool found;

    aio_poll_set_begun(ctx);
    *now = turn_start;
    do {
        found = aio_poll_pass(ctx, turn_start, now,
                              *now - turn_start >= AIO_SPIN_LOOK_AROUND_NS);
        if (found) {
            break;
        }
        cpu_relax();
        *now = clock_now_ns();
    } while (*now < deadline);
    stat_add(&ctx->stats.poll_time_ns, *now - turn_start);
    return found;
}

/* ------------------------------------------------------------------------ */
/* What blocking costs                                                      */

/* Samples of the CPU cost of a blocking wait: the first few, then 1 in 32
 * (reading the thread's CPU clock is a system call, two per sample). */
#define AIO_COST_FIRST_SAMPLES 8
#define AIO_COST_CPU_EVERY 32
/* Lateness samples: a timer's, or a calibration wait of this length taken
 * at most once a second while the thread is busy. */
#define AIO_COST_CAL_WAIT_NS 1000
#define AIO_COST_CAL_PERIOD_NS (1000 * 1000 * 1000LL)
#define AIO_COST_CAL_BLOCKS 64
/*
 * Only short sleeps are learned from: a thread that sleeps a millisecond
 * goes into deeper idle states and wakes up later than one that sleeps a
 * few microseconds, and the policy weighs spinning against short sleeps
 * (it spins only for events expected soon).
 */
#define AIO_COST_SHORT_SLEEP_NS (100 * 1000)
#define AIO_COST_FIRST_LATE_SAMPLES 4

/*
 * Exponentially weighted average, a new sample weighing 2^-shift; 0 means
 * "no sample yet".  The costs drift (this machine's wake-ups change with
 * what the host does), but one sample is noisy: a wait may return at once
 * or sleep, so the CPU cost is averaged over ~32 samples, the lateness
 * over ~16.
 */
#define AIO_COST_CPU_SHIFT 5
#define AIO_COST_LATE_SHIFT 4

static void aio_cost_update(int64_t *avg, int64_t sample, int shift)
{
    if (!*avg) {
        *avg = MAX(sample, 1);
        return;
    }
    /* Divide (not shift) so that the step rounds toward zero both ways,
     * and never reach 0, which means "no sample yet". */
    *avg = MAX(*avg + (sample - *avg) / (1 << shift), 1);
}

/*
 * A sleep cannot cost more than all the CPU the thread spent, less its
 * spinning, divided by its sleeps: an upper bound on the sampled cost,
 * taken over AIO_COST_BOUND_BLOCKS sleeps.  It holds the work of every
 * turn too, so it binds only where the thread sleeps often -- where
 * the policy weighs spinning against sleeping.  (On this VM the samples
 * read up to 3 times what a sleep costs, in its slow phases: sleeping
 * then looked expensive enough to spin for a Poisson stream, and the
 * spinning cost more than the sleeps it saved.)
 */
#define AIO_COST_BOUND_BLOCKS 256

static void aio_cost_bound(AioContext *ctx, int64_t cpu_now)
{
    AioCostMeter *m = &ctx->costs;
    int64_t spin = atomic_load_explicit(&ctx->stats.poll_time_ns,
                                        memory_order_relaxed);
    unsigned n = m->blocks - m->mark_blocks;

    if (m->mark_blocks && n >= AIO_COST_BOUND_BLOCKS) {
        m->cpu_bound_ns = MAX((cpu_now - m->mark_cpu_ns -
                               (spin - m->mark_spin_ns)) / n, 1);
    }
    if (!m->mark_blocks || n >= AIO_COST_BOUND_BLOCKS) {
        m->mark_blocks = m->blocks;
        m->mark_cpu_ns = cpu_now;
        m->mark_spin_ns = spin;
    }
}

static void aio_cost_late_sample(AioContext *ctx, int64_t late, int64_t now)
{
    aio_cost_update(&ctx->pstate.costs.wake_late_ns, MAX(late, 0),
                    AIO_COST_LATE_SHIFT);
    atomic_store_explicit(&ctx->stats.wake_late_ns,
                          ctx->pstate.costs.wake_late_ns, memory_order_relaxed);
    ctx->costs.last_late_ns = now;
    ctx->costs.blocks_since_late = 0;
    ctx->costs.late_samples = MIN(ctx->costs.late_samples + 1, UINT_MAX - 1);
}

/* Whether this long wait should first take a short calibration wait. */
static bool aio_cost_want_calibration(AioContext *ctx, int64_t now)
{
    const AioCostMeter *m = &ctx->costs;

    /* The first few waits of a polling context calibrate at once, so the
     * policy knows the cost before its first plans; then a busy thread
     * checks once a second. */
    if (m->late_samples < AIO_COST_FIRST_LATE_SAMPLES) {
        return true;
    }
    return m->blocks_since_late >= AIO_COST_CAL_BLOCKS &&
           now - m->last_late_ns > AIO_COST_CAL_PERIOD_NS;
}

/*
 * Wait in the fd monitor, measuring what it costs: its CPU time (sampled),
 * and how late it wakes after a deadline.  A long wait of a busy thread
 * that has no timer to learn from starts, now and then, with a 1 µs wait
 * whose lateness is the wake-up latency.  measure: the context polls, so
 * the policy can use the numbers.
 */
static int aio_fdmon_wait_measured(AioContext *ctx, int64_t timeout,
                                   int64_t block_start, bool measure)
{
    AioCostMeter *m = &ctx->costs;
    bool cpu_sample = false, late_ok;
    int64_t cpu0 = 0, end;
    int n;

    if (!measure) {
        return ctx->fdmon->wait(ctx, timeout);
    }
    /* Lateness means something only if short timeouts are kept. */
    late_ok = ctx->fdmon->fine_timeouts && ctx->fdmon->fine_timeouts(ctx);
    m->blocks = MIN(m->blocks + 1, UINT_MAX - 1);
    m->blocks_since_late = MIN(m->blocks_since_late + 1, UINT_MAX - 1);
    if (m->blocks <= AIO_COST_FIRST_SAMPLES || --m->until_cpu_sample == 0) {
        m->until_cpu_sample = AIO_COST_CPU_EVERY;
        cpu_sample = true;
        cpu0 = clock_thread_cpu_ns();
    }
    if (late_ok && (timeout < 0 || timeout > 100 * AIO_COST_CAL_WAIT_NS) &&
        aio_cost_want_calibration(ctx, block_start)) {
        n = ctx->fdmon->wait(ctx, AIO_COST_CAL_WAIT_NS);
        end = clock_now_ns();
        if (n == 0) {
            aio_cost_late_sample(ctx, end - block_start - AIO_COST_CAL_WAIT_NS,
                                 end);
            n = ctx->fdmon->wait(ctx, timeout < 0 ? -1 :
                                 MAX(timeout - (end - block_start), 0));
        }
    } else {
        n = ctx->fdmon->wait(ctx, timeout);
        if (late_ok && n == 0 && timeout > 0 &&
            timeout <= AIO_COST_SHORT_SLEEP_NS) {
            end = clock_now_ns();
            aio_cost_late_sample(ctx, end - block_start - timeout, end);
        }
    }
    if (cpu_sample) {
        int64_t cpu1 = clock_thread_cpu_ns();

        aio_cost_update(&m->cpu_avg_ns, cpu1 - cpu0, AIO_COST_CPU_SHIFT);
        aio_cost_bound(ctx, cpu1);
        ctx->pstate.costs.block_cpu_ns = m->cpu_bound_ns ?
            MIN(m->cpu_avg_ns, m->cpu_bound_ns) : m->cpu_avg_ns;
        atomic_store_explicit(&ctx->stats.block_cpu_ns,
                              ctx->pstate.costs.block_cpu_ns,
                              memory_order_relaxed);
    }
    return n;
}

/* ------------------------------------------------------------------------ */
/* Learning                                                                 */

/*
 * Before dispatch (which clears the readiness flags): each ready source's
 * observation, for learn() after dispatch.
 */
static void aio_sources_observe(AioContext *ctx, int64_t turn_start,
                                int64_t dispatch_start, bool per_source)
{
    for (AioHandler *h = ctx->ready_list; h; h = h->ready_next) {
        if (h->internal || h->deleted || !aio_handler_is_pollable(h)) {
            continue;
        }
        /*
         * A readable fd whose poll callback sees nothing is a stale
         * notification: the producer kicked after polling had already
         * found its work.  It is still dispatched (that clears the fd),
         * but it is not an event of the source.  (QEMU's rules count
         * it, and so does qemu-classic here.)
         */
        if (per_source && !h->poll_ready && !aio_handler_call_poll(h)) {
            continue;
        }
        aio_source_set_add(&ctx->observed, h);
        h->src.ev = true;
        h->src.ev_exact = h->poll_ready;
        h->src.ev_ns = h->poll_ready ? turn_start + h->poll_ready_ns
                                     : dispatch_start;
        h->last_event_ns = dispatch_start;
        stat_add(&h->counters.events, 1);
        if (h->poll_ready) {
            stat_add(&h->counters.poll_hits, 1);
        }
        if (per_source) {
            aio_source_activate(ctx, h);
        }
    }
}

/* A spin that ended in blocking missed every source it polled. */
static void aio_sources_count_misses(AioContext *ctx)
{
    AioSourceSet *set = aio_spin_sources(ctx);

    for (unsigned i = 0; i < set->n; i++) {
        stat_add(&set->h[i]->counters.poll_misses, 1);
    }
}

/*
 * After dispatch: tell the policy what each source saw, then start the
 * sources that had an event on a new interval.  `learn` is false for a
 * turn the policy does not learn from (it only restarts the intervals).
 */
static void aio_sources_learn(AioContext *ctx, const AioPollTurn *turn,
                              bool learn, int64_t dispatch_start)
{
    AioSourceSet *set = aio_policy_sources(ctx);
    const AioPollPolicyOps *ops = ctx->policy;
    int64_t largest = 0;

    for (unsigned i = 0; learn && i < set->n; i++) {
        AioHandler *h = set->h[i];
        int64_t old = h->src.window_ns;

        if (h->deleted) {
            continue;
        }
        aio_source_publish(ctx, h, ops->learn(&ctx->pstate, &h->src, turn),
                           old, dispatch_start);
        largest = MAX(largest, h->src.window_ns);
    }
    if (learn) {
        if (ops->end_turn) {
            AioPollAdjustment adj = ops->end_turn(&ctx->pstate, set->s, set->n,
                                                  turn);
            if (adj == AIO_POLL_GREW) {
                stat_add(&ctx->stats.grows, 1);
            } else if (adj == AIO_POLL_SHRANK) {
                stat_add(&ctx->stats.shrinks, 1);
            }
            largest = ctx->pstate.window_ns;
        }
        atomic_store_explicit(&ctx->stats.poll_ns, largest,
                              memory_order_relaxed);
        atomic_store_explicit(&ctx->stats.budget_ns, ctx->pstate.budget_ns,
                              memory_order_relaxed);
    }
    /* Every source with an event starts a new interval, learned or not. */
    for (unsigned i = 0; i < ctx->observed.n; i++) {
        AioHandler *h = ctx->observed.h[i];

        h->src.ev = false;
        h->src.fresh = false;
        h->src.ref_ns = dispatch_start;
    }
    ctx->observed.n = 0;
}

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                 */

__thread int64_t aio_dispatch_now_ns;

/* Call the callback that h's readiness asks for; false if there is none. */
static bool aio_dispatch_handler(AioHandler *h, bool poll_ready, uint32_t revents)
{
    bool ran = false;

    if (poll_ready) {
        AioHandlerCB cb = h->io_poll_ready.fd ? h->io_poll_ready : h->io_read;

        if (cb.fd) {
            aio_handler_call(h, cb);
            ran = true;
        }
        return ran;
    }
    if ((revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) && h->io_read.fd) {
        aio_handler_call(h, h->io_read);
        ran = true;
    }
    /* The read callback may have removed or re-registered the handler. */
    if ((revents & (EPOLLOUT | EPOLLHUP | EPOLLERR)) && !h->deleted &&
        h->io_write) {
        h->io_write(h->opaque);
        ran = true;
    }
    return ran;
}

/*
 * Dispatch the ready handlers.  They are taken one at a time off the
 * context's list, so a callback that runs a nested aio_poll() lets the
 * nested turn dispatch the rest (and nothing is dispatched twice).
 */
static bool aio_dispatch_ready(AioContext *ctx)
{
    uint64_t dispatched = 0;
    AioHandler *h;

    while ((h = ctx->ready_list)) {
        bool poll_ready = h->poll_ready;
        uint32_t revents = h->revents;

        ctx->ready_list = h->ready_next;
        h->on_ready_list = false;
        h->poll_ready = false;
        h->revents = 0;
        if (!h->deleted && aio_dispatch_handler(h, poll_ready, revents) &&
            !h->internal) {
            dispatched++;
        }
        aio_dispatch_now_ns = 0;      /* only the first callback may use it */
    }
    if (dispatched) {
        stat_add(&ctx->stats.dispatches, dispatched);
    }
    return dispatched > 0;
}

/* ------------------------------------------------------------------------ */
/* One turn                                                                 */

/* How long this turn may wait: 0 if work is pending, -1 forever. */
static int64_t aio_compute_timeout(AioContext *ctx, int64_t now)
{
    if (ctx->ready_list || aio_bh_pending(ctx) ||
        atomic_load_explicit(&ctx->notified, memory_order_relaxed)) {
        return 0;
    }
    return aio_timers_next_deadline_ns(ctx, now);
}

/* start + spin_ns, but no later than start + timeout_ns (-1: no limit). */
static int64_t aio_spin_deadline(int64_t start, int64_t spin_ns,
                                 int64_t timeout_ns)
{
    int64_t limit = timeout_ns < 0 ? spin_ns : MIN(spin_ns, timeout_ns);

    return add_sat_int64(start, limit);
}

/*
 * Whether this turn must ask the fd monitor.  When polling found work, every
 * handler has a poll callback that sees its own work, so the system call
 * can be skipped, except for write handlers (writability is not polled) and
 * once every AIO_FDMON_CHECK_INTERVAL turns.
 */
static bool aio_fdmon_needed(AioContext *ctx, bool polling_found_work)
{
    if (!polling_found_work || ctx->n_writers > 0 ||
        ++ctx->turns_without_fdmon >= AIO_FDMON_CHECK_INTERVAL) {
        ctx->turns_without_fdmon = 0;
        return true;
    }
    return false;
}

/*
 * Get the sources ready for this turn's plan (outermost turns keep the
 * per-source bookkeeping: sweep, phases).
 */
static void aio_sources_prepare(AioContext *ctx, int64_t start)
{
    if (ctx->sources_dirty) {
        aio_sources_rebuild(ctx);
    }
    if (!ctx->policy->per_source || ctx->poll_depth != 1) {
        return;
    }
    if (start - ctx->last_sweep_ns > AIO_SOURCE_SWEEP_NS) {
        aio_sources_sweep(ctx, start);
    }
    aio_sources_refresh_phases(ctx, start);
}

bool aio_poll(AioContext *ctx, bool blocking)
{
    const AioPollPolicyOps *ops;
    AioPollTurn turn = { 0 };
    int64_t start, now, timeout, block_start, dispatch_start, nap = 0;
    bool napping = false;
    bool polling, found = false, waited = false, notify_me = false, progress;
    bool fdmon_called, outermost;
    int n;

    g_assert(aio_context_in_home_thread(ctx));
    ctx->poll_depth++;
    outermost = ctx->poll_depth == 1;
    ops = ctx->policy;
    aio_context_get_poll_params(ctx, &ctx->pstate.params);
    /* now: the latest clock reading of this turn, reused where a slightly
     * older one does as well as a new read. */
    start = now = clock_now_ns();
    ctx->turn_start_ns = start;
    stat_add(&ctx->stats.turns, 1);

    timeout = blocking ? aio_compute_timeout(ctx, start) : 0;
    polling = aio_poll_allowed(ctx, &ctx->pstate.params);
    turn.start_ns = start;
    turn.timer_ns = timeout;
    if (polling) {
        aio_sources_prepare(ctx, start);
    }

    /* 1. Busy-poll as long as the policy says (bounded by timers). */
    if (polling && timeout != 0) {
        AioSourceSet *set = aio_policy_sources(ctx);
        int64_t spin;

        ctx->pstate.nap_ns = 0;
        spin = ops->plan(&ctx->pstate, set->s, set->n, &turn);
        nap = ctx->pstate.nap_ns;

        if (ops->per_source && aio_spin_set_update(ctx, start, &now)) {
            found = true;      /* a source no longer spun for had work */
            spin = 0;
        }
        spin = MIN(spin, ctx->pstate.params.max_ns);
        if (spin > 0) {
            int64_t deadline = aio_spin_deadline(start, spin, timeout);

            found = aio_poll_spin(ctx, start, deadline, &now);
            waited = true;
            turn.spun_ns = now - start;
            turn.spin_found = found;
            turn.spin_reached_timer = !found && timeout > 0 &&
                                      now - start >= timeout;
        }
    } else if (polling) {
        found = aio_poll_pass(ctx, start, &now, true);
    }
    if (found) {
        timeout = 0;
    } else if (timeout != 0) {
        /* The spin (if any) ran to its deadline, read as now: recompute
         * what is left. */
        timeout = aio_compute_timeout(ctx, now);
        if (nap > 0 && timeout != 0) {
            /* A nap: wake up early enough to spin for what comes next. */
            int64_t left = start + nap - now;

            if (left > 0 && (timeout < 0 || left < timeout)) {
                timeout = left;
                napping = true;
            }
        }
    }

    /* 2. About to block (or no longer allowed to poll): notifications back
     * on, barrier, one more look. */
    if (ctx->poll_started && (timeout != 0 || !polling)) {
        aio_poll_set_stopped(ctx);
        /* Full fence: orders the io_poll_end stores (e.g. clearing
         * VRING_USED_F_NO_NOTIFY) before the loads of the re-check; pairs
         * with the producer's fence between publishing work and reading
         * that flag. */
        atomic_thread_fence(memory_order_seq_cst);
        if (aio_poll_recheck(ctx, start, &now)) {
            timeout = 0;
        } else if (turn.spun_ns > 0) {
            stat_add(&ctx->stats.poll_misses, 1);
            aio_sources_count_misses(ctx);
        }
    }

    /* 3. Block (or just collect ready fds). */
    if (timeout != 0) {
        notify_me = true;
        atomic_store_explicit(&ctx->notify_me, true, memory_order_relaxed);
        /* Full fence: pairs with the fence in aio_notify(). */
        atomic_thread_fence(memory_order_seq_cst);
        if (aio_bh_pending(ctx) ||
            atomic_load_explicit(&ctx->notified, memory_order_relaxed)) {
            timeout = 0;
        }
    }
    /* Read only when it will be used: a turn that found work by polling
     * does not block, and every clock read shows in QD1 latency. */
    block_start = timeout != 0 ? clock_now_ns() : 0;
    fdmon_called = aio_fdmon_needed(ctx, polling && found);
    if (fdmon_called && timeout != 0) {
        n = aio_fdmon_wait_measured(ctx, timeout, block_start, polling);
    } else if (fdmon_called) {
        n = ctx->fdmon->wait(ctx, 0);
    } else {
        n = 0;
    }
    if (notify_me) {
        /* Cleared even when the re-check above cancelled the wait. */
        atomic_store_explicit(&ctx->notify_me, false, memory_order_relaxed);
    }
    if (timeout != 0) {
        int64_t block_end = now = clock_now_ns();

        stat_add(&ctx->stats.block_time_ns, block_end - block_start);
        if (n > 0) {
            stat_add(&ctx->stats.wakeups, 1);
        }
        if (napping) {
            stat_add(&ctx->stats.naps, 1);
        }
        waited = true;
        turn.blocked = true;
        turn.block_start_ns = block_start;
        turn.wake_ns = block_end;
    }
    /* After blocking, now is the wake-up; after polling found work, when
     * it was found.  A non-blocking fd monitor call takes a system call's
     * time: read the clock again then. */
    if (fdmon_called && timeout == 0) {
        now = clock_now_ns();
    }
    dispatch_start = now;
    turn.waited_ns = dispatch_start - start;

    /* Accept the notification before running BHs: a later aio_notify()
     * sets the flag again and is seen by the next turn.  seq_cst exchange:
     * ordered before the BH list exchange in aio_bh_poll(). */
    atomic_exchange(&ctx->notified, false);

    /* 4. Note what each source saw (the outermost turn: a nested turn would
     * see the outer turn's readiness again), dispatch, then learn.  The
     * policy learns after the callbacks so that its arithmetic is not
     * between an event and its handling. */
    if (outermost && polling) {
        aio_sources_observe(ctx, start, dispatch_start, ops->per_source);
    }
    aio_dispatch_now_ns = dispatch_start;     /* for the first callback */
    progress = aio_dispatch_ready(ctx);
    progress |= aio_bh_poll(ctx);
    progress |= aio_timers_run_expired(ctx);
    /* What the callbacks, BHs and timers completed usually scheduled a BH
     * to tell its producer (a virtqueue's notification): run it in this
     * turn, not after another turn's bookkeeping.  Once: a BH that keeps
     * scheduling itself waits for the next turn as before. */
    if (aio_bh_pending(ctx)) {
        progress |= aio_bh_poll(ctx);
    }
    aio_dispatch_now_ns = 0;
    if (outermost && polling && ctx->policy == ops) {
        /* A per-source policy learns from every turn; QEMU's rules only
         * from turns that waited. */
        aio_sources_learn(ctx, &turn,
                          ops->per_source || (blocking && waited),
                          dispatch_start);
    }

    if (--ctx->poll_depth == 0 && ctx->handlers_deleted) {
        aio_handler_free_deleted(ctx);
    }
    return progress;
}

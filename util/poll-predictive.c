/*
 * The predictive poll policy: Spindle's default.
 *
 * Theory of operation.  Spinning for W costs W of CPU at most; blocking
 * costs a wake-up: CPU time to go to sleep and come back (C) and latency
 * (L: the event is seen that much after it happened).  Both are measured
 * by the loop (AioPollCosts).  If T is the time until a source's next
 * event, spinning for W and then blocking costs, in expectation,
 *
 *     J(W) = E[min(T, W)] + P(T > W) * K,     K = C + w * L
 *
 * This is the classic spin-then-block problem; given the distribution of
 * T the best W minimises J, and W = 0 whenever the events are not likely
 * enough to come soon enough for the spinning to pay.  A Poisson stream
 * with a mean gap longer than K is never worth spinning for; a closed-loop
 * guest that resubmits 0.5 µs after each completion always is.
 *
 * The weight w of latency against CPU is the exchange rate users set when
 * they ask for polling -- halving a request's latency is worth doubling
 * its CPU, so w = 2 -- while the wake-up is a tenth or more of the
 * requests' own latency; below that it falls in proportion (a 6 µs
 * wake-up is nothing next to a 1 ms request).  The requests' latency comes
 * from Little's law on what the loop measures: the time integral of the
 * requests a source is owed, over its events.
 *
 * What is learned, per source and phase.  T is measured per source (each
 * virtqueue, each completion ring), from the start of the source's current
 * interval: the end of its last event, or the moment its phase changed.
 * The phase is 1 while the source's producer owes us events for work we
 * handed out (requests in flight on a completion ring; requests popped
 * from a virtqueue and not yet completed), else 0.  A completion ring with
 * nothing in flight never has an event, so its phase-0 histogram stays
 * empty and it is never spun for; a closed-loop guest queue does not send
 * while its request is in flight, so while the device works the policy
 * does not spin for the queue, and right after the completion it does.
 * Other wake-ups (timers, bottom halves, another source) end no interval:
 * they are not this source's events.
 *
 * The distribution is a histogram of half-octave buckets from 256 ns to
 * 1 ms (aio_pred_bucket()) with exponential forgetting (the last ~64
 * samples or 16 ms dominate, whichever is more), and a change detector that forgets faster when the
 * workload changes (pred_detect_change()).  Intervals cut short by a phase
 * change are censored observations: they count as survival through the
 * buckets they covered.  Each bucket's hazard (the chance that the event
 * comes in it, given that it has not come before) gives the survival S at
 * each bucket edge and I, the integral of S, so that for a spin from
 * elapsed time a until edge e
 *
 *     S(a) * J_a(e) = I(e) - I(a) + K * S(e)
 *
 * and the best end for each starting bucket is the edge e in
 * [a, a + poll-max-ns] with the smallest G(e) = I(e) + K * S(e).  The
 * table is recomputed every 8 to 64 samples (more often while it changes,
 * and when K or poll-max-ns moves), after dispatch, so a turn's plan is a
 * table look-up.  A spin must beat blocking by K/16 to be chosen, a longer
 * one must be worth K/16 more, and a window that costs about the same as
 * the old one is kept: noise in a histogram does not make the window
 * twitch.
 *
 * Events seen after blocking are late by the wake-up: the sample is taken
 * as max(when the loop last looked, seen - L/2), so a window at 0 still
 * learns about what it would catch if it spun (QEMU's rule cannot: once
 * the window is 0 every wait it measures includes the wake-up).  Where
 * that leaves the call close, a trial measures now and then what
 * spinning the whole window really costs and gains, against the plan,
 * and adopts it for producers that answer faster while they are polled
 * (see "Trials" below).
 *
 * The turn.  The spin lasts the longest of the active sources' plans
 * (each source's plan conditioned on how long its interval has run), and
 * the loop polls only the sources that asked for it on every pass.  A
 * timer due within K (and poll-max-ns) is spun for too: blocking for it
 * would cost K, spinning costs less.  The timer's K weighs latency as the
 * most latency-sensitive active source does: a timer that completes a 1 ms
 * request is not worth a spin to be a few µs earlier.
 *
 * Naps.  A timer due later than that is slept for, and the sleep wakes up
 * L after its deadline.  Where the timer's latency weighs at least as much
 * as CPU (requests are owed to a source whose latency weighs so: not
 * while the queues are quiet), the turn naps instead: it sleeps
 * (AioPollState.nap_ns) until the timer is due in L (at most poll-max-ns
 * and K), and the next turn spins for it.  The wake-up is paid either way; the nap adds a spin of what it
 * woke up early, and the timer fires on time rather than L late.  (A
 * null-co node with a 50 µs service time: 52 µs p50 at QD1 on this VM, for
 * the CPU of not polling, against 73 µs for a fixed 32 µs window at twice
 * the CPU.)  Naps end with the ledger, as spins do: the spin after one
 * would not come.
 *
 * The ledger.  Every spin is charged to a per-context budget; every spin
 * that found its event (or reached its timer) is credited K, the cost it
 * saved; and every event refills it by a quarter of C.  If the model is right
 * the ledger grows (that is what J says); if it is wrong for long -- an
 * idle device, a workload the histogram has not caught up with -- the
 * ledger empties and the context stops spinning until it refills:
 * unproductive spinning is bounded by what spinning saved plus a quarter
 * of a sleep's CPU per event, a fraction of what each event costs when
 * the thread never polls, however slow the events come.  (A refill from wall
 * time would not be: 1.6% of a core is 16 µs per request at 1000 requests
 * a second.)  An idle thread gets nothing and spins nothing.
 */
#include <string.h>
#include <glib.h>
#include "util/poll-policy.h"
#include "util/clock.h"
#include "util/cutils.h"

#define B AIO_PRED_BUCKETS
#define PRED_DECAY 64                /* forgetting: 1 - 1/64 per sample ... */
#define PRED_MEMORY_NS (16 * 1000 * 1000LL)  /* ... or per 16 ms if slower */
#define PRED_SHIFT_DEV 0.5f          /* change detector: alarm threshold */
#define PRED_SHIFT_SPAN 32           /* ... on the average of ~32 events */
#define PRED_SHIFT_KEEP 0.0625f      /* ... and what is kept of the past, */
#define PRED_KEEP_SAMPLES 2.0f       /* ... as much as 2 samples at most */
#define PRED_SHIFT_QUIET 64          /* events before it may fire again */
#define PRED_FOLD 8                  /* samples between plan updates ... */
#define PRED_FOLD_MAX 64             /* ... up to this while nothing changes */
#define PRED_MIN_SAMPLES 4.0f        /* weighted samples before any plan */
#define PRED_STICKY_SAMPLES 32.0f    /* ... and before the plan is kept */
#define PRED_RESCALE 4096.0f         /* renormalise weights above this */
#define PRED_BUDGET_MAX_NS 1000000   /* the ledger's cap: 1 ms */
#define PRED_BUDGET_EVENT_SHIFT 2    /* refill: C/4 per event */
#define PRED_TRIAL_EVENTS 64         /* events measured in each arm, */
#define PRED_TRIAL_MIN_NS (4 * 1000 * 1000LL)       /* over 4 ms at least */
#define PRED_TRIAL_SAMPLES 32        /* a trial needs this many samples */
#define PRED_TRIAL_SETTLE_EVENTS 8   /* events let pass before the other arm */
#define PRED_TRIAL_MAX_LEN_NS (1000 * 1000 * 1000LL) /* a trial's deadline */
#define PRED_TRIAL_GAIN 0.7          /* spinning must cost 30% less ... */
#define PRED_TRIAL_RATE 1.3          /* ... and bring events 1.3x as fast */
#define PRED_TRIAL_KEEP_RATE 1.25    /* kept while it brings events 1.25x as
                                      * fast as not spinning, for less */
#define PRED_MAX_SPIN_NS (1LL << 30) /* plans never spin longer than this */
#define PRED_NAP_WEIGHT 1.0          /* naps for timers whose latency weighs
                                      * at least as much as CPU */
#define PRED_TRIAL_FIRST_NS (100 * 1000 * 1000LL)    /* then waits 0.1 s */
#define PRED_TRIAL_MAX_NS (16 * 1000 * 1000 * 1000LL) /* ... doubling to 16 s */

typedef enum PredTrialStep {
    PRED_TRIAL_NONE,
    PRED_TRIAL_BASE,                 /* measuring the current mode */
    PRED_TRIAL_SETTLE,               /* the other mode, not measured yet */
    PRED_TRIAL_OTHER,                /* measuring the other mode */
} PredTrialStep;

typedef struct PredPhase {
    float ev[B];                     /* events that came in bucket b */
    float cens[B];                   /* intervals cut short in bucket b */
    float total;
    float weight;                    /* of the next sample */
    uint8_t best_end[B];             /* plan: from bucket a, spin to the
                                      * start of bucket best_end[a] (a: no) */
    bool close;                      /* not spinning, but nearly worth it */
    bool partial;                    /* spinning, but missing some */
    float plan_n;                    /* samples the plan was made from */
    int64_t mean_ns;                 /* the mean wait (up to 1 ms) */
    /* Change detector: waits shorter than short_ns, seen minus expected. */
    int64_t short_ns;
    float q_short;                   /* expected share of them (the model) */
    float dev;                       /* average of seen - expected */
    unsigned since_shift;            /* events since it last fired */
    bool shift_longer;               /* ... on fewer short waits */
    /* Reactive producers: spin_mode spins the whole window from the
     * interval start, adopted (and kept) by trials; see pred_trial_*(). */
    bool spin_mode;
    uint8_t trial;                   /* PredTrialStep */
    unsigned trial_left;             /* events left in the settling step */
    unsigned trial_n;                /* events measured in this arm */
    unsigned trial_late;             /* of them, seen after blocking */
    float trial_dev;                 /* the change detector's difference
                                      * over the spinning arm (its waits
                                      * stay out of dev) */
    int64_t trial_t0_ns, trial_cpu0_ns;   /* this step's start (0: at the
                                           * next event) */
    double trial_cost, trial_rate;   /* the first arm's cost per event
                                      * and events per second */
    int64_t trial_end_ns;            /* the trial gives up then */
    int64_t trial_next_ns;           /* no trial before this */
    int64_t trial_vote_ns;           /* when the last trial voted to adopt
                                      * spin mode (0: it did not) */
    int64_t trial_backoff_ns;
    int64_t last_ns;                 /* when the last sample was taken */
} PredPhase;

typedef struct PredSource {
    PredPhase ph[2];
    unsigned since_fold;
    unsigned fold_every;             /* PRED_FOLD .. PRED_FOLD_MAX */
    /* The source's request latency (Little's law on pending_area). */
    uint64_t area_mark, done_mark;
    unsigned area_events;
    int64_t latency_ns;              /* 0: not known */
    int64_t k_ns;                    /* K and poll-max-ns of the plans */
    int64_t max_ns;
} PredSource;

/* ------------------------------------------------------------------------ */
/* Buckets                                                                   */

unsigned aio_pred_bucket(int64_t ns)
{
    int k;

    if (ns < 256) {
        return 0;
    }
    if (ns >= (1 << 20)) {
        return B - 1;
    }
    k = 63 - __builtin_clzll((unsigned long long)ns);    /* 8 .. 19 */
    return 1 + 2 * (k - 8) + ((ns >> (k - 1)) & 1);
}

int64_t aio_pred_bucket_start(unsigned b)
{
    unsigned k;

    if (b == 0) {
        return 0;
    }
    if (b >= B - 1) {
        return 1 << 20;
    }
    k = 8 + (b - 1) / 2;
    return ((int64_t)1 << k) + ((b - 1) & 1) * ((int64_t)1 << (k - 1));
}

/* ------------------------------------------------------------------------ */
/* The model                                                                 */

static PredSource *pred_source(AioPollSource *src)
{
    if (!src->priv) {
        PredSource *ps = g_new0(PredSource, 1);

        for (unsigned p = 0; p < 2; p++) {
            ps->ph[p].weight = 1.0f;
            ps->ph[p].since_shift = PRED_SHIFT_QUIET;
        }
        ps->fold_every = PRED_FOLD;
        src->priv = ps;
    }
    return src->priv;
}

/* Forget most of the past (the workload changed). */
static void pred_forget(PredPhase *ph, float keep)
{
    for (unsigned i = 0; i < B; i++) {
        ph->ev[i] *= keep;
        ph->cens[i] *= keep;
    }
    ph->total *= keep;
}

/*
 * Forget all but `keep` of the past, and all but what PRED_KEEP_SAMPLES
 * samples weigh: a fast source's histogram holds thousands.
 */
static void pred_forget_to(PredPhase *ph, float keep)
{
    pred_forget(ph, MIN(keep, PRED_KEEP_SAMPLES * ph->weight /
                              MAX(ph->total, ph->weight)));
}

/* The workload changed (to longer waits if `longer`): forget the past. */
static void pred_shift(PredPhase *ph, bool longer)
{
    ph->shift_longer = longer;
    pred_forget_to(ph, PRED_SHIFT_KEEP);
    ph->dev = 0;
    ph->since_shift = 0;
}

/*
 * The change detector.  The histogram remembers ~64 samples, which keeps
 * the plan steady, but a new workload would take that long to show.  So
 * each event is also compared with what the model expects: the share of
 * waits shorter than K/2 (the ones worth spinning for).  When the running
 * difference (1/32 per event) passes PRED_SHIFT_DEV, most of the old
 * samples are forgotten and the plan is redone: a step from QD1 to a
 * 10k/s Poisson stream, or back, is seen within two dozen events, while a
 * steady stream's noise, the bursts of a dozen late events when the host
 * runs the guest slowly for a moment, and shifts among waits that are all
 * worth spinning for (or all not) stay below it.  (Averaged over 16
 * events, those bursts made a steady QD1 stream's window change every
 * second or two.)  After firing it stays quiet for
 * PRED_SHIFT_QUIET events: a producer whose waits straddle K/2 and follow
 * what the policy does (it answers faster while we spin) must not make
 * the plan swing at the detector's pace.  True if it fired.
 */
/* One wait into a running difference (seen - expected short waits);
 * false while no plan says what to expect. */
static bool pred_dev_add(const PredPhase *ph, float *dev, int64_t t)
{
    float seen = t < ph->short_ns ? 1.0f : 0.0f;

    if (ph->short_ns <= 0) {
        return false;
    }
    *dev += (seen - ph->q_short - *dev) / PRED_SHIFT_SPAN;
    return true;
}

static bool pred_detect_change(PredPhase *ph, int64_t t)
{
    if (!pred_dev_add(ph, &ph->dev, t)) {
        return false;
    }
    if (ph->since_shift < PRED_SHIFT_QUIET) {
        ph->since_shift++;
        return false;
    }
    if (ph->dev > PRED_SHIFT_DEV || ph->dev < -PRED_SHIFT_DEV) {
        pred_shift(ph, ph->dev < 0);
        return true;
    }
    return false;
}

/*
 * Add one observation ending in bucket b (an event, or a censored one) at
 * now.  The past fades by 1/PRED_DECAY per sample, or by the time since
 * the last sample over PRED_MEMORY_NS if that is less: the histogram
 * remembers the last ~64 samples or the last PRED_MEMORY_NS, whichever is
 * more.  A fast source (a million events a second) would otherwise see
 * its whole history in the last 64 µs, and every burst of late events a
 * preempted producer makes would move its plan back and forth.  True if
 * the change detector fired (the plan must be redone).
 */
static bool pred_record(PredPhase *ph, int64_t t, bool event, int64_t now)
{
    unsigned b = aio_pred_bucket(t);
    bool changed = event && pred_detect_change(ph, t);
    int64_t gap = ph->last_ns ? MAX(now - ph->last_ns, 0) : PRED_MEMORY_NS;
    float fade = MIN(1.0f / PRED_DECAY, (float)gap / PRED_MEMORY_NS);

    ph->last_ns = now;
    if (event) {
        ph->ev[b] += ph->weight;
    } else {
        ph->cens[b] += ph->weight;
    }
    ph->total += ph->weight;
    ph->weight /= 1.0f - fade;
    if (ph->weight > PRED_RESCALE) {
        pred_forget(ph, 1.0f / ph->weight);
        ph->weight = 1.0f;
    }
    return changed;
}

/*
 * Recompute ph->best_end from the histogram for cost k and cap max_ns;
 * late is the wake-up lateness (half of it is left in the waits seen after
 * a wake-up).
 */
static void pred_plan_phase(PredPhase *ph, int64_t k, int64_t max_ns,
                            int64_t late)
{
    /* Nothing is planned past the last bucket: keep the sums in range
     * whatever poll-max-ns says. */
    max_ns = MIN(max_ns, PRED_MAX_SPIN_NS);
    double atrisk[B + 1], S[B], I[B], G[B];
    double margin = k / 16.0;
    uint8_t old_end[B];
    /* A plan made from a few samples is a first guess: the next one does
     * not stick to it (a handful of early outliers would otherwise hold
     * a long window until the tail rule below drops it, much later). */
    bool sticky = ph->plan_n >= PRED_STICKY_SAMPLES;

    memcpy(old_end, ph->best_end, sizeof(old_end));
    for (unsigned a = 0; a < B; a++) {
        ph->best_end[a] = a;
    }
    /* total/weight is the number of recent samples. */
    ph->short_ns = 0;
    ph->plan_n = ph->total / ph->weight;
    if (ph->total < PRED_MIN_SAMPLES * ph->weight || k <= 0 || max_ns <= 0) {
        return;
    }
    atrisk[B] = 0;
    for (int b = B - 1; b >= 0; b--) {
        atrisk[b] = atrisk[b + 1] + ph->ev[b] + ph->cens[b];
    }
    S[0] = 1.0;
    I[0] = 0.0;
    for (unsigned b = 0; b + 1 < B; b++) {
        double n = atrisk[b] - ph->cens[b] / 2;
        double h = n > 1e-9 ? ph->ev[b] / n : 0.0;
        double width = aio_pred_bucket_start(b + 1) - aio_pred_bucket_start(b);

        h = MIN(h, 1.0);
        I[b + 1] = I[b] + width * S[b] * (1.0 - h / 2);
        S[b + 1] = S[b] * (1.0 - h);
    }
    for (unsigned e = 0; e < B; e++) {
        G[e] = I[e] + k * S[e];
    }
    ph->mean_ns = (int64_t)I[B - 1];
    {
        unsigned e = aio_pred_bucket(k / 2);

        ph->short_ns = aio_pred_bucket_start(e);
        ph->q_short = (float)(1.0 - S[e]);
    }
    for (unsigned a = 0; a + 1 < B; a++) {
        int64_t limit = aio_pred_bucket_start(a) + max_ns;
        unsigned old = old_end[a], best_e = a, core;
        double best = G[a] - margin * S[a];

        if (S[a] * ph->total < MAX(2 * ph->weight, ph->total / 256)) {
            continue;           /* under 2 recent intervals (or 1 in 256)
                                 * lasted this long: too few to plan from */
        }
        for (unsigned e = a + 1; e < B && aio_pred_bucket_start(e) <= limit;
             e++) {
            /* A longer spin must also be worth something (K/16): a few
             * late outliers must not stretch the window to them. */
            if (G[e] < best - (best_e == a ? 0 : margin * S[a])) {
                best = G[e];
                best_e = e;
            }
        }
        /* Then the longest window up to 4 times as long that costs about
         * the same, K/64 more at most (it differs only for the rare event
         * that comes late):
         * waits that drift a little -- a guest whose answer takes 1.5 µs
         * instead of 1 -- then keep the same plan. */
        core = best_e;
        for (unsigned e = core + 1; core != a && e < B &&
             aio_pred_bucket_start(e) <= limit &&
             aio_pred_bucket_start(e) <= 4 * aio_pred_bucket_start(core);
             e++) {
            if (G[e] <= best + k / 64.0 * S[a]) {
                best_e = e;
            }
        }
        /* Spins end on powers of two (odd buckets): fewer places for a
         * plan to move between when the waits drift. */
        if (best_e != a && !(best_e & 1) && best_e + 1 < B &&
            aio_pred_bucket_start(best_e + 1) <= limit) {
            best_e++;
        }
        /* Keep the old end while it is nearly as good: windows that cost
         * about the same should not make the plan flap between them.
         * Nearly: K/16 more, or an eighth of what an interval costs with
         * the best end if that is less -- for a source whose events come
         * every microsecond, K/16 is more than an interval costs, and a
         * long window from its first samples would stay on and spin for
         * nothing.  And not one over 16 times longer than the best when
         * that already catches 99%: beyond that the spin would only wait
         * for what (almost) never comes. */
        if (sticky && best_e != a && old > a &&
            aio_pred_bucket_start(old) <= limit &&
            G[old] <= best + MIN(margin * S[a], (best - I[a]) / 8) &&
            !(old > best_e && S[core] < 0.01 * S[a] &&
              aio_pred_bucket_start(old) >
              16 * aio_pred_bucket_start(core))) {
            best_e = old;
        }
        ph->best_end[a] = best_e;
    }
    /*
     * Close: a longer spin from the start of an interval than the plan's
     * (or a spin at all) would catch at least half of the events the plan
     * misses (2% of them or more) for at most K/2 more per missed event --
     * allowing for the half of the lateness left in waits seen after
     * wake-ups, which a spin would not pay.  The model may be wrong there
     * in a way only spinning shows (the waits were shorter than they
     * looked, or the producer answers faster when we spin), so such a
     * phase is given a trial now and then.
     */
    ph->close = false;
    {
        unsigned e0 = ph->best_end[0], emax = aio_pred_bucket(max_ns);

        /* Partial: the plan spins but misses 1% or more of the events,
         * some of which a whole window would catch: where a producer may
         * answer faster while spun for, the trials find out. */
        ph->partial = e0 > 0 && S[e0] >= 0.01 && emax > e0 &&
                      S[emax] < S[e0];

        for (unsigned e = e0 + 1; S[e0] >= 0.02 && e < B &&
             aio_pred_bucket_start(e - 1) <= max_ns + late / 2; e++) {
            if (S[e] <= S[e0] / 2 &&
                G[e] <= G[e0] + (k / 2.0 + late / 2.0) * S[e0]) {
                ph->close = true;
                break;
            }
        }
    }
}

/* The spin this phase's plan asks for after `elapsed` of its interval. */
static int64_t pred_phase_window(const PredPhase *ph, int64_t elapsed)
{
    unsigned a = aio_pred_bucket(MAX(elapsed, 0));
    unsigned e = ph->best_end[a];

    return e > a ? aio_pred_bucket_start(e) - MAX(elapsed, 0) : 0;
}


/*
 * K for one source: the CPU a sleep costs, plus its latency weighted by
 * how much it matters to the source's requests.  The exchange rate is the
 * one users set when they ask for polling: halving a request's latency is
 * worth doubling the CPU it takes, so a nanosecond of latency weighs two
 * of CPU -- while the wake-up is a tenth or more of the requests' own
 * latency (latency + L).  Below that the gain is worth nothing (no user
 * turns polling on for a few percent), so the weight goes from full at
 * 15% to 0 at 10%: a 6 µs wake-up is half of a fast request and nothing
 * next to a 1 ms one.
 */
#define PRED_LATENCY_WEIGHT 2

/* K at full weight (timers, the ledger). */
static int64_t pred_k(const AioPollState *st)
{
    return st->costs.block_cpu_ns + PRED_LATENCY_WEIGHT * st->costs.wake_late_ns;
}

static double pred_weight(const AioPollState *st, const PredSource *ps)
{
    int64_t late = st->costs.wake_late_ns;
    double share;

    if (ps->latency_ns <= 0 || late <= 0) {
        return PRED_LATENCY_WEIGHT;
    }
    share = late / (double)(ps->latency_ns + late);
    return PRED_LATENCY_WEIGHT * MIN(MAX((share - 0.10) / 0.05, 0.0), 1.0);
}

static int64_t pred_k_src(const AioPollState *st, const PredSource *ps)
{
    return st->costs.block_cpu_ns +
           (int64_t)(pred_weight(st, ps) * st->costs.wake_late_ns);
}

/*
 * Every 16 events: the requests' mean latency, the area they owed over the
 * requests completed meanwhile (an event may bring a batch of them).
 */
static void pred_track_latency(AioPollSource *src, PredSource *ps)
{
    uint64_t done;

    if (ps->area_events == 0 && ps->area_mark == 0 && ps->done_mark == 0) {
        ps->area_mark = src->pending_area;
        ps->done_mark = src->done;
    }
    if (++ps->area_events < 16) {
        return;
    }
    done = src->done - ps->done_mark;
    if (done > 0) {
        int64_t sample = (int64_t)((src->pending_area - ps->area_mark) / done);

        ps->latency_ns = ps->latency_ns ?
                         ps->latency_ns + (sample - ps->latency_ns) / 4 :
                         MAX(sample, 1);
    }
    ps->area_mark = src->pending_area;
    ps->done_mark = src->done;
    ps->area_events = 0;
}

/* Recompute both phases' plans; return how the source's window moved. */
static AioPollAdjustment pred_replan(AioPollState *st, AioPollSource *src,
                                     PredSource *ps)
{
    int64_t old = src->window_ns, k = pred_k_src(st, ps);
    bool same = true;

    ps->k_ns = k;
    ps->max_ns = st->params.max_ns;
    ps->since_fold = 0;
    src->window_ns = 0;
    for (unsigned p = 0; p < 2; p++) {
        PredPhase *ph = &ps->ph[p];
        uint8_t before[B];
        bool close = ph->close;

        memcpy(before, ph->best_end, sizeof(before));
        pred_plan_phase(ph, k, st->params.max_ns, st->costs.wake_late_ns);
        same &= !memcmp(before, ph->best_end, sizeof(before)) &&
                close == ph->close;
        src->window_ns = MAX(src->window_ns, ph->spin_mode ?
                             st->params.max_ns : pred_phase_window(ph, 0));
    }
    /* A plan that came out the same is redone less and less often (the
     * change detector still reacts to each sample), but often while a
     * change is fresh. */
    same &= ps->ph[0].since_shift >= PRED_SHIFT_QUIET &&
            ps->ph[1].since_shift >= PRED_SHIFT_QUIET;
    ps->fold_every = same ? MIN(MAX(ps->fold_every, PRED_FOLD) * 2,
                                PRED_FOLD_MAX)
                          : PRED_FOLD;
    src->window_ns = MIN(src->window_ns, st->params.max_ns);
    if (src->window_ns > old) {
        return AIO_POLL_GREW;
    }
    return src->window_ns < old ? AIO_POLL_SHRANK : AIO_POLL_KEPT;
}

/* K moved by more than a quarter, or poll-max-ns changed, since the plan. */
static bool pred_plan_stale(const AioPollState *st, const PredSource *ps)
{
    int64_t k = pred_k_src(st, ps), d = k - ps->k_ns;

    return ps->max_ns != st->params.max_ns || (d < 0 ? -d : d) > ps->k_ns / 4;
}

/* ------------------------------------------------------------------------ */
/* Trials                                                                    */

/*
 * A producer may answer faster while the loop spins than while it sleeps:
 * a guest whose vCPU the host lets sleep deeper when its requests take
 * longer, a closed loop whose next request waits for the previous
 * completion's wake-up.  The histogram cannot see that: it holds the waits
 * of the mode the policy is in.  So where the call is close (or spinning
 * was adopted), a trial now and then measures both modes in turn, each
 * over PRED_TRIAL_EVENTS of the phase's events: the current one, then
 * (after PRED_TRIAL_SETTLE events for the producer to adapt) the other --
 * spinning the whole window from each interval's start, or planning from
 * the histogram.  Each arm's cost per event is what the thread really
 * spent (its CPU clock) plus the latency, weighed as in K: the time
 * between events (for a closed loop, the requests' round trip) and L for
 * each event seen after a wake-up.  Spinning is adopted only where it
 * costs 30% less and brings events 1.3 times as fast, in two trials in a
 * row: a producer that does not react sends at the same rate whatever the
 * loop does, and its histogram already says what spinning gains.  It is
 * kept while it costs less than not spinning at all and brings events
 * 1.25 times as fast.  Trials back off from 0.1 s to 16 s while their
 * outcome stays the same.  A workload that goes away under a trial ends
 * it: the change detector watches the spinning arm's waits too.
 */

/* Whether a trial runs the phase in the mode it is not in. */
static bool pred_trial_other(const PredPhase *ph)
{
    return ph->trial == PRED_TRIAL_SETTLE || ph->trial == PRED_TRIAL_OTHER;
}

/* Whether this phase's turns spin the whole window from the interval
 * start: in spin mode, or while a trial measures it. */
static bool pred_spins_all(const PredPhase *ph)
{
    return ph->spin_mode != pred_trial_other(ph);
}

static int64_t pred_cpu_now(const AioPollState *st)
{
    return st->thread_cpu_ns ? st->thread_cpu_ns() : clock_thread_cpu_ns();
}

/*
 * Whether spinning could bring the events much faster: only if this
 * phase's waits and wake-ups are a third of the cycle or more.  A queue in
 * front of a 1 ms device waits for its next request for microseconds: no
 * trial, whose spinning would cost more than all it could show.
 */
static bool pred_trial_may_pay(const AioPollState *st, const PredSource *ps,
                               const PredPhase *ph)
{
    return ph->spin_mode || ps->latency_ns <= 0 ||
           2 * (ph->mean_ns + st->costs.wake_late_ns) >= ps->latency_ns;
}

static void pred_trial_step(PredPhase *ph, PredTrialStep step, unsigned events)
{
    ph->trial = step;
    ph->trial_left = events;
    ph->trial_n = 0;
    ph->trial_late = 0;
    ph->trial_t0_ns = 0;
    if (step == PRED_TRIAL_SETTLE) {
        ph->trial_dev = ph->dev;
    }
}

/*
 * A wait of the arm that spins the whole window for a phase not in spin
 * mode.  It stays out of the histogram (it is the other mode's), but a
 * workload that went away must not wait for the trial's end to be seen:
 * the change detector's running difference goes on over the arm, and
 * fires on longer waits only.  Spinning can make waits look shorter than
 * the model expects (a reactive producer, waits no longer seen after a
 * wake-up), never longer.  True if it fired.  (In a load step on this
 * VM, a trial that began at the end of a QD1 phase and spun on into the
 * next phase's 10k IOPS kept the detector blind for its ~70 events: the
 * window settled 104 events in.)
 */
static bool pred_trial_saw_longer(PredPhase *ph, int64_t t)
{
    return pred_dev_add(ph, &ph->trial_dev, t) &&
           ph->trial_dev < -PRED_SHIFT_DEV;
}

static void pred_trial_start(PredPhase *ph, int64_t now)
{
    if (now - ph->trial_vote_ns > PRED_TRIAL_FIRST_NS) {
        ph->trial_vote_ns = 0;       /* too old to confirm */
    }
    pred_trial_step(ph, PRED_TRIAL_BASE, 0);
    ph->trial_end_ns = now + PRED_TRIAL_MAX_LEN_NS;
}

/*
 * The trial is over: spin mode is now `spin`.  The next one comes soon
 * after a change (of mode, or of the histogram that made the call close)
 * and after a vote to adopt that this trial did not confirm: the two
 * disagreed, so it is measured again soon.  (Backing off there -- trials
 * 0.1, 0.2, 0.4, 0.8 s apart -- can let a 1.5 s run end before two in a
 * row agree.)  Later and later while the outcome stays the same.
 */
static void pred_trial_end(PredPhase *ph, bool spin, int64_t now)
{
    if (spin != ph->spin_mode || (!spin && !ph->close && !ph->partial) ||
        !ph->trial_backoff_ns || ph->trial_vote_ns) {
        ph->trial_backoff_ns = PRED_TRIAL_FIRST_NS;
    } else {
        ph->trial_backoff_ns = MIN(ph->trial_backoff_ns * 2,
                                   PRED_TRIAL_MAX_NS);
    }
    if (spin != ph->spin_mode) {
        /* The waits of the old mode say little about the new one. */
        pred_forget_to(ph, 1.0f);
        ph->dev = 0;
        ph->since_shift = 0;
        ph->shift_longer = false;
    }
    ph->spin_mode = spin;
    ph->trial_vote_ns = 0;
    ph->trial = PRED_TRIAL_NONE;
    ph->trial_next_ns = now + ph->trial_backoff_ns;
}

/*
 * One of the phase's events, during a trial.  True when the trial ended
 * (the plan is redone).
 */
static bool pred_trial_event(AioPollState *st, PredSource *ps, PredPhase *ph,
                             const AioPollSource *src, const AioPollTurn *turn)
{
    int64_t now = src->ev_ns, cpu, span;
    double w, cost, rate;

    if (!ph->trial) {
        return false;
    }
    if (ph->trial == PRED_TRIAL_SETTLE) {
        if (--ph->trial_left == 0) {
            pred_trial_step(ph, PRED_TRIAL_OTHER, 0);
        }
        return false;
    }
    if (ph->trial_t0_ns == 0) {          /* the arm starts with this event */
        ph->trial_t0_ns = MAX(now, 1);
        ph->trial_cpu0_ns = pred_cpu_now(st);
        return false;
    }
    ph->trial_late += !src->ev_exact && turn->blocked;
    span = MAX(now - ph->trial_t0_ns, 1);
    /* A fast source's arm lasts 4 ms: one preempted microsecond-scale
     * arm would decide it. */
    if (++ph->trial_n < PRED_TRIAL_EVENTS || span < PRED_TRIAL_MIN_NS) {
        return false;
    }
    cpu = pred_cpu_now(st) - ph->trial_cpu0_ns;
    w = pred_weight(st, ps);
    cost = ((double)cpu + w * (double)span +
            w * (double)st->costs.wake_late_ns * ph->trial_late) /
           ph->trial_n;
    rate = ph->trial_n * 1e9 / (double)span;
    if (ph->trial == PRED_TRIAL_BASE) {
        ph->trial_cost = cost;
        ph->trial_rate = rate;
        pred_trial_step(ph, PRED_TRIAL_SETTLE, PRED_TRIAL_SETTLE_EVENTS);
        return false;
    } else {
        double spin_cost = ph->spin_mode ? ph->trial_cost : cost;
        double spin_rate = ph->spin_mode ? ph->trial_rate : rate;
        double plan_cost = ph->spin_mode ? cost : ph->trial_cost;
        double plan_rate = ph->spin_mode ? rate : ph->trial_rate;
        bool spin;

        /* Adopted where spinning is far better than the plan; kept while
         * the producer still answers faster than without spinning at
         * all, for less.  (The audit measures not spinning: against the
         * plan, which spins a little, a producer that was kept fast stays
         * fast for a while, and the audit flapped.) */
        spin = ph->spin_mode ?
               spin_cost < plan_cost &&
               spin_rate > PRED_TRIAL_KEEP_RATE * plan_rate :
               spin_cost < PRED_TRIAL_GAIN * plan_cost &&
               spin_rate > PRED_TRIAL_RATE * plan_rate;
        if (spin && !ph->spin_mode && !ph->trial_vote_ns) {
            /* Adopting takes two trials in a row: a host that switches
             * between a fast and a slow phase under one trial makes one
             * arm look far faster than the other.  The second one starts
             * now; a vote older than 0.1 s is not counted. */
            ph->trial_vote_ns = MAX(now, 1);
            ph->trial = PRED_TRIAL_NONE;
            ph->trial_next_ns = now;
            return false;
        }
        pred_trial_end(ph, spin, now);
        return true;
    }
}

/* ------------------------------------------------------------------------ */
/* The ops                                                                   */

static int64_t pred_plan(AioPollState *st, AioPollSource *const *srcs,
                         unsigned n, const AioPollTurn *turn)
{
    int64_t now = turn->start_ns, w = 0, k_timer;
    double w_timer = -1;          /* no source known: full weight */
    double w_owed = -1;           /* ... of the sources owed requests */

    st->nap_ns = 0;
    if (st->budget_stamp_ns == 0) {
        st->budget_ns = PRED_BUDGET_MAX_NS / 2;
    }
    st->budget_stamp_ns = now;

    for (unsigned i = 0; i < n; i++) {
        AioPollSource *src = srcs[i];
        int64_t ws = 0;

        if (src->priv) {
            PredSource *ps = src->priv;
            PredPhase *ph = &ps->ph[src->phase & 1];
            int64_t elapsed = now - src->ref_ns;
            double weight = pred_weight(st, ps);

            w_timer = MAX(w_timer, weight);
            if (src->phase) {
                w_owed = MAX(w_owed, weight);
            }

            ws = pred_phase_window(ph, elapsed);
            if (!ph->trial && (ph->close || ph->partial || ph->spin_mode) &&
                now >= ph->trial_next_ns && st->budget_ns > 0 &&
                ph->since_shift >= PRED_SHIFT_QUIET &&
                ph->total >= PRED_TRIAL_SAMPLES * ph->weight &&
                pred_trial_may_pay(st, ps, ph)) {
                pred_trial_start(ph, now);
            }
            if (ph->trial && now > ph->trial_end_ns) {
                /* Its events stopped coming: give up, try later. */
                pred_trial_end(ph, ph->spin_mode, now);
            }
            if (ph->spin_mode && pred_trial_other(ph)) {
                ws = 0;         /* the audit of spin mode: no spinning */
            } else if (pred_spins_all(ph)) {
                ws = MAX(ws, st->params.max_ns - elapsed);
            }
        }
        src->spin = ws > 0 && st->budget_ns > 0;
        w = MAX(w, ws);
    }
    if (st->budget_ns <= 0) {
        return 0;
    }
    /* A timer due soon: spinning until it costs less than sleeping (and
     * only if the spin may last that long: spinning most of the way and
     * then sleeping would pay both). */
    k_timer = w_timer < 0 ? pred_k(st) :
              st->costs.block_cpu_ns +
              (int64_t)(w_timer * st->costs.wake_late_ns);
    if (turn->timer_ns > w &&
        turn->timer_ns <= MIN(k_timer, st->params.max_ns)) {
        w = turn->timer_ns;
    } else if (turn->timer_ns > w && st->costs.wake_late_ns > 0 &&
               w_owed >= PRED_NAP_WEIGHT) {
        /* Later than that: nap until it is due in what a sleep wakes up
         * late, then spin for it (the next turn's plan: it is due within
         * K then).  A wake-up is paid either way; the nap's costs a spin
         * of what it wakes up early.  Only while requests whose latency
         * matters are owed (a source in phase 1), which the timer may
         * complete: not for the housekeeping timers of a thread whose
         * queues are quiet. */
        int64_t lead = MIN(MIN(st->costs.wake_late_ns, k_timer),
                           st->params.max_ns);

        if (turn->timer_ns - lead > w) {
            st->nap_ns = turn->timer_ns - lead;
        }
    }
    return MIN(w, st->params.max_ns);
}

static AioPollAdjustment pred_learn(AioPollState *st, AioPollSource *src,
                                    const AioPollTurn *turn)
{
    AioPollAdjustment adj = AIO_POLL_KEPT;
    PredSource *ps;
    PredPhase *ph;
    int64_t seen, t;
    bool shifted = false, trial_ended, fold_due, stale;

    if (!src->ev) {
        return AIO_POLL_KEPT;
    }
    ps = pred_source(src);
    pred_track_latency(src, ps);
    if (src->fresh) {
        return AIO_POLL_KEPT;      /* the first event since it was idle */
    }
    seen = src->ev_ns;
    if (!src->ev_exact && turn->blocked) {
        /*
         * Seen after a wake-up: it came up to L earlier, but not before the
         * loop's last look (the re-check before blocking).  Only half of L
         * is taken off: the lateness measured on timers is often more than
         * a kick's wake-up takes, and taking off too much would invent
         * short waits and make the policy spin for nothing.  Too little
         * only delays spinning: K, which the waits are weighed against,
         * holds all of L, and trials settle the close calls.
         */
        seen = MAX(turn->block_start_ns, seen - st->costs.wake_late_ns / 2);
    }
    ph = &ps->ph[src->phase & 1];
    t = MAX(seen - src->ref_ns, 0);
    /* The histogram holds the waits of the mode the phase is in, not of
     * the one a trial measures. */
    if (!pred_trial_other(ph)) {
        shifted = pred_record(ph, t, true, src->ev_ns);
    } else if (!ph->spin_mode && pred_trial_saw_longer(ph, t)) {
        /* The workload changed under the trial's spinning arm: end the
         * trial and start the new workload's histogram from this wait. */
        pred_shift(ph, true);
        ph->trial = PRED_TRIAL_NONE;
        ph->trial_next_ns = src->ev_ns + PRED_TRIAL_FIRST_NS;
        pred_record(ph, t, true, src->ev_ns);
        shifted = true;
    }
    trial_ended = pred_trial_event(st, ps, ph, src, turn);
    if (shifted) {
        ph->trial_vote_ns = 0;
    }
    if (shifted && ph->trial) {
        /* The workload changed under the trial's first arm: let the plan
         * catch up, then try again. */
        ph->trial = PRED_TRIAL_NONE;
        ph->trial_next_ns = src->ev_ns + PRED_TRIAL_FIRST_NS;
    } else if (shifted && ph->shift_longer && ph->spin_mode) {
        /* The waits grew longer: is spinning still worth it?  A trial
         * soon will say (a guest preempted for a while makes the waits
         * longer too, and spin mode must not end on that). */
        ph->trial_backoff_ns = 0;
        ph->trial_next_ns = src->ev_ns;
    }
    /* Both evaluated on every event: since_fold counts every one. */
    fold_due = ++ps->since_fold >= ps->fold_every;
    stale = pred_plan_stale(st, ps);
    if (shifted || fold_due || stale || trial_ended) {
        int64_t old = src->window_ns;

        pred_replan(st, src, ps);
        if (ph->spin_mode && !ph->trial && ph->shift_longer &&
            ph->since_shift < PRED_SHIFT_QUIET &&
            ph->best_end[0] == 0 && !ph->close) {
            /* The waits grew longer, so long that the plan made from them
             * since (in spin mode, so they are exact) would not spin at
             * all: the producer that spin mode was adopted for is gone,
             * end it now rather than at the audit (a trial may adopt it
             * again). */
            pred_trial_end(ph, false, src->ev_ns);
            pred_replan(st, src, ps);
        }
        adj = src->window_ns > old ? AIO_POLL_GREW :
              src->window_ns < old ? AIO_POLL_SHRANK : AIO_POLL_KEPT;
    }
    return adj;
}

static AioPollAdjustment pred_phase_end(AioPollState *st, AioPollSource *src,
                                        int64_t now)
{
    PredSource *ps = pred_source(src);
    PredPhase *ph = &ps->ph[src->phase & 1];

    if (!pred_trial_other(ph)) {
        pred_record(ph, MAX(now - src->ref_ns, 0), false, now);
    }
    if (++ps->since_fold >= ps->fold_every) {
        return pred_replan(st, src, ps);
    }
    return AIO_POLL_KEPT;
}

static AioPollAdjustment pred_end_turn(AioPollState *st,
                                       AioPollSource *const *srcs, unsigned n,
                                       const AioPollTurn *turn)
{
    int64_t largest = 0;

    if (turn->spun_ns > 0) {
        /* At most the planned spin: a spin the host preempted took longer
         * in wall time, not in our CPU. */
        st->budget_ns -= MIN(turn->spun_ns, st->params.max_ns);
        if (turn->spin_found || turn->spin_reached_timer) {
            st->budget_ns = MIN(st->budget_ns + pred_k(st), PRED_BUDGET_MAX_NS);
        }
    }
    for (unsigned i = 0; i < n; i++) {
        largest = MAX(largest, srcs[i]->window_ns);
        if (srcs[i]->ev) {
            st->budget_ns = MIN(st->budget_ns + (st->costs.block_cpu_ns >>
                                                 PRED_BUDGET_EVENT_SHIFT),
                                PRED_BUDGET_MAX_NS);
        }
    }
    st->window_ns = largest;
    return AIO_POLL_KEPT;
}

const AioPollPolicyOps aio_poll_policy_predictive = {
    .name = "predictive",
    .per_source = true,
    .plan = pred_plan,
    .learn = pred_learn,
    .end_turn = pred_end_turn,
    .phase_end = pred_phase_end,
};

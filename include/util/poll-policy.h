/*
 * Poll policies: how long an AioContext turn busy-polls before it blocks,
 * and on which event sources.
 *
 * The loop (util/aio-posix.c) owns the mechanics: it calls the policy at
 * the start of a turn (plan), spins as long as the plan says on the sources
 * the plan marked, re-enables notifications and blocks, and after the turn
 * tells the policy what each source saw (learn, end_turn).  A policy owns
 * only numbers: per source an AioPollSource, per context an AioPollState.
 *
 * Everything here runs in the context's home thread; nothing is shared.
 * docs/devel/polling.md describes the four policies.
 */
#ifndef SPINDLE_UTIL_POLL_POLICY_H
#define SPINDLE_UTIL_POLL_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Defaults, the same as QEMU's IOThread. */
#define AIO_POLL_MAX_NS_DEFAULT 32768
#define AIO_POLL_START_NS 4000
/* poll-weight: QEMU's range; 0 selects the default shift of 3 (1/8). */
#define AIO_POLL_WEIGHT_MAX 63
#define AIO_POLL_WEIGHT_DEFAULT 3

/*
 * The tunables.  A snapshot is taken at the start of each aio_poll() turn,
 * so a change takes effect at the next turn.
 */
typedef struct AioPollParams {
    int64_t max_ns;    /* 0 disables busy polling */
    int64_t grow;      /* 0 means "double" */
    int64_t shrink;    /* 0 means the policy's default */
    int64_t weight;    /* qemu-weighted's shift; 0 means 3 */
} AioPollParams;

typedef enum {
    AIO_POLL_KEPT,
    AIO_POLL_GREW,
    AIO_POLL_SHRANK,
} AioPollAdjustment;

/*
 * One event source (a pollable fd handler: a virtqueue's kick, a completion
 * ring's eventfd).  The loop fills the "loop" part; the policy the rest.
 */
typedef struct AioPollSource {
    /* --- kept by the loop -------------------------------------------- */
    /*
     * The phase: 1 while the source's producer owes us events for work we
     * handed out (io_poll_counts() pending > 0: requests in flight on a
     * completion ring, or popped and not yet completed on a virtqueue),
     * else 0.  Sources without io_poll_counts are always in phase 0.
     */
    unsigned phase;
    /* Start of the current interval (clock_now_ns()): the end of the
     * source's last event's dispatch, or the turn in which its phase
     * changed, whichever is later. */
    int64_t ref_ns;
    /*
     * The integral over time of the pending requests (ns x requests),
     * sampled at the start of each turn.  Its growth divided by the growth
     * of done is the mean time a request is owed (Little's law): a
     * virtqueue's request latency in the daemon, a ring's service time.
     */
    uint64_t pending_area;
    int64_t pending_stamp_ns;
    unsigned pending_last;
    uint64_t done;          /* requests completed so far, at the turn start */
    bool fresh;             /* (re)activated: its interval started now, the
                             * event that woke it is not a wait sample */
    /* This turn's observation, valid in learn(): */
    bool ev;               /* the source had an event */
    bool ev_exact;         /* found by its poll callback: ev_ns is exact;
                            * else the fd monitor reported it */
    int64_t ev_ns;         /* when it was seen (clock_now_ns()) */

    /* --- kept by the policy ------------------------------------------ */
    int64_t window_ns;     /* what the policy would spin for this source now
                            * (statistics; the loop publishes it) */
    bool spin;             /* plan(): poll this source on every spin pass */
    int64_t est_ns;        /* qemu-weighted: estimate of its block time */
    void *priv;            /* policy-private state; freed with g_free() */
} AioPollSource;

/* One turn of the loop, as the policy sees it.  Times: clock_now_ns(). */
typedef struct AioPollTurn {
    int64_t start_ns;      /* the turn began */
    int64_t timer_ns;      /* time from start until the first timer, -1 none */
    /* Known after the turn (learn, end_turn): */
    int64_t waited_ns;     /* from start until dispatch began */
    int64_t spun_ns;       /* time spent spinning (0: no spin) */
    bool spin_found;       /* the spin ended because a source had work */
    bool spin_reached_timer;  /* the spin ran until the first timer was due */
    bool blocked;          /* the loop waited in the fd monitor */
    int64_t block_start_ns;   /* when it began to wait (if blocked) */
    int64_t wake_ns;          /* when the wait returned (if blocked) */
} AioPollTurn;

/*
 * What going to sleep costs this thread, measured by the loop (0 until
 * measured): the CPU time of a wait in the fd monitor (system calls,
 * context switches, and in a VM the halt and wake-up of the vCPU), and
 * how late a wait wakes up after the moment it should (timer deadlines,
 * and short calibration waits while the thread is busy).
 */
typedef struct AioPollCosts {
    int64_t block_cpu_ns;
    int64_t wake_late_ns;
} AioPollCosts;

/* Per context: the parameters of the turn, the costs, policy state. */
typedef struct AioPollState {
    AioPollParams params;
    AioPollCosts costs;
    int64_t window_ns;     /* the context's window (qemu-weighted), or the
                            * largest source window (statistics) */
    /* predictive: the ledger of spinning against what it saved */
    int64_t budget_ns;
    int64_t budget_stamp_ns;
    /*
     * Set by plan() (0: none): if the turn blocks, it wakes up at the
     * latest this long after its start, so that the next turn may spin
     * for an event expected soon after (a timer: waking up on time takes
     * a spin, a sleep until the timer wakes up late).
     */
    int64_t nap_ns;
    /* The calling thread's CPU time; NULL: clock_thread_cpu_ns() (tests
     * set a simulated one). */
    int64_t (*thread_cpu_ns)(void);
} AioPollState;

typedef struct AioPollPolicyOps {
    const char *name;
    /*
     * True: plan() and learn() see only the context's active sources (those
     * that had an event in the last second), the loop polls only the
     * sources plan() marked with spin on every pass (the others in turn,
     * one per pass once the spin is 1 µs old), and it keeps phase and
     * ref_ns.  False: every pollable source, every pass, as QEMU does.
     */
    bool per_source;
    /*
     * Start of a turn that may spin: return how long to spin (the loop
     * also stops at the first timer and at any event), and set spin on
     * the sources to poll on every pass (per_source policies).
     */
    int64_t (*plan)(AioPollState *st, AioPollSource *const *srcs, unsigned n,
                    const AioPollTurn *turn);
    /* After a turn that waited, for each source (with its observation). */
    AioPollAdjustment (*learn)(AioPollState *st, AioPollSource *src,
                               const AioPollTurn *turn);
    /*
     * After learn() on every source; may be NULL.  Returns the change of
     * the context-wide window (qemu-weighted), or KEPT.
     */
    AioPollAdjustment (*end_turn)(AioPollState *st, AioPollSource *const *srcs,
                                  unsigned n, const AioPollTurn *turn);
    /* A source's phase is about to change at now: its interval ends
     * without an event.  May be NULL.  Returns how its window moved. */
    AioPollAdjustment (*phase_end)(AioPollState *st, AioPollSource *src,
                                   int64_t now);
} AioPollPolicyOps;

/*
 * The policies.  fixed: spin poll-max-ns every turn.  qemu-classic:
 * QEMU's halt-poll style rule per handler.  qemu-weighted: QEMU 11.1's
 * weighted average of block times.  predictive: Spindle's default.
 */
extern const AioPollPolicyOps aio_poll_policy_fixed;
extern const AioPollPolicyOps aio_poll_policy_qemu_classic;
extern const AioPollPolicyOps aio_poll_policy_qemu_weighted;
extern const AioPollPolicyOps aio_poll_policy_predictive;
#define aio_poll_policy_default aio_poll_policy_predictive

/* Look up a policy by name ("adaptive" is the old name of qemu-classic);
 * NULL if unknown. */
const AioPollPolicyOps *aio_poll_policy_find(const char *name);

/* "fixed, qemu-classic, qemu-weighted, predictive", for messages. */
const char *aio_poll_policy_names(void);

/* Reset a source's policy state (switching policies, re-registering). */
void aio_poll_source_reset(AioPollSource *src);

/* ------------------------------------------------------------------------ */
/* The predictive policy's model, exposed for unit tests and statistics.    */

/*
 * Waits are kept in buckets: [0, 256 ns), then half-octaves from 256 ns
 * ([256, 384), [384, 512), [512, 768), ...) up to 2^20 ns, then one
 * bucket for everything longer.
 */
#define AIO_PRED_BUCKETS 26

unsigned aio_pred_bucket(int64_t ns);
int64_t aio_pred_bucket_start(unsigned b);

#endif

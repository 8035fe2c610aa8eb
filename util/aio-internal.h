/*
 * The inside of an AioContext, shared by the files of util/ that implement
 * it (async.c, aio-posix.c, aio-handlers.c, timer.c, fdmon-epoll.c,
 * thread-pool.c).  Nothing
 * outside util/ includes this.
 *
 * Memory layout: fields written by other threads (bh_list, notified,
 * notify_me) sit on their own cache line; the statistics, written only by
 * the home thread, on another; the rest is private to the home thread.
 */
#ifndef SPINDLE_UTIL_AIO_INTERNAL_H
#define SPINDLE_UTIL_AIO_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include "util/aio.h"

#define CACHELINE 64

#ifndef container_of
#define container_of(ptr, type, member) \
    ((type *)((char *)(ptr) - offsetof(type, member)))
#endif

/*
 * When polling keeps finding work the loop skips the fd monitor; it still
 * looks at it every this many turns, so a ready fd whose poll callback cannot
 * see its work (an HUP, a stray kick) is served within bounded time.
 */
#define AIO_FDMON_CHECK_INTERVAL 64

typedef struct ThreadPool ThreadPool;

/* A callback of an fd handler or of an event notifier (is_event_notifier). */
typedef union AioHandlerCB {
    IOHandler *fd;
    EventNotifierHandler *en;
} AioHandlerCB;

typedef union AioHandlerPollCB {
    AioPollFn *fd;
    EventNotifierPollFn *en;
} AioHandlerPollCB;

typedef union AioHandlerCountsCB {
    AioPollCountsFn *fd;
    EventNotifierCountsFn *en;
} AioHandlerCountsCB;

/* Per-handler counters: written by the home thread, read by anyone. */
typedef struct AioHandlerCounters {
    _Atomic uint64_t events, poll_hits, poll_misses, window_changes,
        last_change_event;
    _Atomic int64_t last_change_ns;   /* clock_now_ns() of that change */
} AioHandlerCounters;

struct AioHandler {
    int fd;
    AioHandlerCB io_read;
    IOHandler *io_write;
    AioHandlerPollCB io_poll;
    AioHandlerCB io_poll_ready;
    AioHandlerCB io_poll_begin;
    AioHandlerCB io_poll_end;
    void *opaque;             /* the EventNotifier if is_event_notifier */
    bool deleted;             /* removed; freed at the end of the turn */
    bool internal;            /* the context's own notifier: no window, no stats */
    bool is_event_notifier;   /* callbacks take the EventNotifier */
    uint32_t epoll_events;    /* what the fd monitor watches */

    /* Per-turn state, home thread only. */
    bool on_ready_list;       /* queued on ctx->ready_list */
    bool poll_begun;          /* io_poll_begin called, io_poll_end not yet */
    bool recheck;             /* io_poll_end just called: look once more */
    bool poll_ready;          /* io_poll returned true this turn */
    int64_t poll_ready_ns;    /* when (relative to the turn start) */
    uint32_t revents;         /* fd monitor result this turn */

    AioHandlerCountsCB io_poll_counts;  /* NULL: always phase 0 */

    /* The poll policy's view (poll-policy.h), home thread only. */
    AioPollSource src;
    bool active;              /* in ctx->active (per-source policies) */
    int64_t last_event_ns;
    /* For readers in other threads. */
    _Atomic int64_t window_ns_pub;   /* src.window_ns */
    _Atomic bool active_pub;
    _Atomic unsigned phase_pub;
    AioHandlerCounters counters;
    char name[AIO_HANDLER_NAME_SIZE];

    AioHandler *next;         /* ctx->handlers */
    AioHandler *ready_next;   /* this turn's ready list */
};

/* Operations of an fd monitor (pluggable parts are ops tables: style.md). */
typedef struct FDMonOps {
    /* Start, change (events != 0) or stop (events == 0) watching h->fd. */
    int (*update)(AioContext *ctx, AioHandler *h, uint32_t events);
    /*
     * Wait up to timeout_ns (-1 forever, 0 not at all); mark ready handlers
     * (h->revents) and return how many, or -errno.
     */
    int (*wait)(AioContext *ctx, int64_t timeout_ns);
    /* Whether a timeout of a few microseconds is kept (a monitor that rounds
     * it up to a millisecond would make wake-up lateness meaningless). */
    bool (*fine_timeouts)(AioContext *ctx);
} FDMonOps;

extern const FDMonOps fdmon_epoll_ops;

/* Single-writer statistics: plain loads and stores, no locked instructions. */
typedef struct AioStatsCounters {
    _Atomic uint64_t turns, poll_hits, poll_misses, wakeups, poll_time_ns,
        block_time_ns, grows, shrinks, dispatches, bhs, timers, naps;
    _Atomic int64_t poll_ns, block_cpu_ns, wake_late_ns, budget_ns;
} AioStatsCounters;

/* A set of pollable handlers, with their AioPollSource views for the policy. */
typedef struct AioSourceSet {
    AioHandler **h;
    AioPollSource **s;
    unsigned n, cap;
} AioSourceSet;

/* How the loop measures what blocking costs (AioPollCosts). */
typedef struct AioCostMeter {
    unsigned blocks;                /* blocking waits so far (saturating) */
    unsigned until_cpu_sample;      /* blocking waits until the next CPU sample */
    unsigned blocks_since_late;     /* blocking waits since the last lateness sample */
    unsigned late_samples;          /* lateness samples so far (saturating) */
    int64_t last_late_ns;           /* when it was taken */
    int64_t cpu_avg_ns;             /* average of the CPU samples */
    int64_t cpu_bound_ns;           /* the bound on it (0: none yet) */
    unsigned mark_blocks;           /* the bound's last mark: blocks, */
    int64_t mark_cpu_ns;            /* the thread's CPU time */
    int64_t mark_spin_ns;           /* and its time spinning */
} AioCostMeter;

struct AioContext {
    /* --- written by any thread ------------------------------------- */
    _Alignas(CACHELINE) QEMUBH *_Atomic bh_list;  /* LIFO of scheduled BHs */
    _Atomic bool notified;          /* aio_notify() since the last accept */
    _Atomic bool notify_me;         /* home thread may block: kick the fd */

    /* --- parameters: written by the control thread, read each turn ---- */
    _Alignas(CACHELINE) _Atomic int64_t poll_max_ns;
    _Atomic int64_t poll_grow;
    _Atomic int64_t poll_shrink;
    _Atomic int64_t poll_weight;
    _Atomic int64_t aio_max_batch;

    /* --- statistics: written by the home thread only ------------------ */
    _Alignas(CACHELINE) AioStatsCounters stats;

    /* --- home thread only --------------------------------------------- */
    _Alignas(CACHELINE) pthread_t home;
    const AioPollPolicyOps *policy;
    AioPollState pstate;            /* the policy's per-context numbers */
    const FDMonOps *fdmon;
    int epollfd;
    EventNotifier notifier;         /* aio_notify() writes it when notify_me */
    AioHandler *notifier_handler;   /* its handler, polled on every pass */
    AioHandler *handlers;           /* all handlers, incl. deleted ones */
    /* Pollable handlers other than the notifier, rebuilt when sources_dirty;
     * active: those considered by per-source policies; spin: those polled
     * on every pass of the current spin (the others one per pass, from rr). */
    AioSourceSet all, active, spin;
    AioSourceSet observed;          /* sources with an event this turn */
    bool sources_dirty;
    unsigned rr;
    int64_t last_sweep_ns;
    AioCostMeter costs;
    unsigned n_unpollable;          /* live handlers without io_poll */
    unsigned n_writers;             /* live handlers with io_write */
    unsigned turns_without_fdmon;   /* see AIO_FDMON_CHECK_INTERVAL */
    bool poll_started;              /* io_poll_begin called, io_poll_end not yet */
    bool handlers_deleted;          /* some handler awaits freeing */
    unsigned poll_depth;            /* aio_poll() nesting */
    int64_t turn_start_ns;
    AioHandler *ready_list;         /* handlers to dispatch; nested turns
                                     * continue the outer turn's list */
    QEMUBH *bh_batch;               /* BHs taken off bh_list, not yet run;
                                     * nested turns continue this batch */
    QEMUBH *bh_batch_tail;
    AioTimer *timers;               /* sorted by expire_ns */
    ThreadPool *thread_pool;        /* created on first use */
    GHashTable *data;               /* aio_context_set_data(); key -> AioContextData */
    GMutex handlers_lock;           /* taken only to change the list, and by
                                     * readers in other threads */
};

/* async.c */
bool aio_bh_poll(AioContext *ctx);
bool aio_bh_pending(AioContext *ctx);
void aio_bh_list_destroy(AioContext *ctx);

/* timer.c */
/* Nanoseconds until the first timer is due: -1 none, 0 already due. */
int64_t aio_timers_next_deadline_ns(AioContext *ctx, int64_t now);
bool aio_timers_run_expired(AioContext *ctx);

/* aio-handlers.c */
void aio_context_setup_notifier(AioContext *ctx);
void aio_context_free_handlers(AioContext *ctx);
/* Free the handlers marked deleted, once no aio_poll() is running. */
void aio_handler_free_deleted(AioContext *ctx);

/* aio-posix.c */
void aio_source_sets_free(AioContext *ctx);
/* Forget every handler's policy state and the context's (home thread). */
void aio_context_reset_poll_state(AioContext *ctx);

/* thread-pool.c */
void thread_pool_free(ThreadPool *pool);

/*
 * Calling a handler's callbacks (aio-handlers.c and aio-posix.c).  Inline:
 * aio_poll() calls them on every pass of a spin.
 */
static inline void aio_handler_call(AioHandler *h, AioHandlerCB cb)
{
    if (h->is_event_notifier) {
        cb.en(h->opaque);
    } else {
        cb.fd(h->opaque);
    }
}

static inline bool aio_handler_call_poll(AioHandler *h)
{
    if (h->is_event_notifier) {
        return h->io_poll.en(h->opaque);
    }
    return h->io_poll.fd(h->opaque);
}

static inline bool aio_handler_is_pollable(const AioHandler *h)
{
    return h->io_poll.fd != NULL;
}

/* io_poll_begin for one handler, if it has the hook and has not had it. */
static inline void aio_handler_poll_begin(AioHandler *h)
{
    if (h->io_poll_begin.fd && !h->poll_begun) {
        h->poll_begun = true;
        aio_handler_call(h, h->io_poll_begin);
    }
}

/* io_poll_end for one handler, only if it had io_poll_begin. */
static inline void aio_handler_poll_end(AioHandler *h)
{
    if (h->poll_begun) {
        h->poll_begun = false;
        if (h->io_poll_end.fd) {
            aio_handler_call(h, h->io_poll_end);
        }
    }
}

/* Queue h for dispatch in this turn (once). */
static inline void aio_handler_mark_ready(AioContext *ctx, AioHandler *h)
{
    if (!h->on_ready_list) {
        h->on_ready_list = true;
        h->ready_next = ctx->ready_list;
        ctx->ready_list = h;
    }
}

/* Single-writer counter update: no lock prefix, still race-free for readers. */
static inline void stat_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

#endif

/*
 * AioContext: Spindle's event loop.
 *
 * An AioContext is run by exactly one thread at a time, its *home thread*
 * (an IOThread, or the main loop).  It multiplexes:
 *
 *   - fd handlers: read/write callbacks on file descriptors, optionally with a
 *     poll callback that can find work by reading memory instead of waiting
 *     for the fd (virtqueue avail index, AIO completion ring, ...);
 *   - event notifiers: fd handlers on an eventfd;
 *   - bottom halves (BHs): callbacks that any thread may schedule;
 *   - timers on the monotonic clock, with nanosecond deadlines.
 *
 * aio_poll() runs one turn of the loop.  When every handler in the context
 * has a poll callback and polling is enabled, a turn first busy-polls for a
 * self-tuning window (docs/devel/polling.md) with guest notifications
 * suppressed, and only then blocks in the fd monitor (epoll).
 *
 * Threads: functions marked "home thread" must be called from the thread
 * that runs aio_poll() on the context (or, before any thread runs it, from
 * the creator).  aio_notify(), aio_bh_schedule(), aio_bh_schedule_oneshot()
 * and the statistics/parameter accessors may be called from any thread.
 */
#ifndef SPINDLE_UTIL_AIO_H
#define SPINDLE_UTIL_AIO_H

#include <stdbool.h>
#include <stdint.h>
#include "util/error.h"
#include "util/event-notifier.h"
#include "util/poll-policy.h"

typedef struct AioContext AioContext;
typedef struct AioHandler AioHandler;
typedef struct QEMUBH QEMUBH;
typedef struct AioTimer AioTimer;

typedef void IOHandler(void *opaque);
/* Poll callback: return true if there is work (do not do the work here). */
typedef bool AioPollFn(void *opaque);
typedef void EventNotifierHandler(EventNotifier *e);
typedef bool EventNotifierPollFn(EventNotifier *e);
typedef void QEMUBHFunc(void *opaque);
typedef void AioTimerCB(void *opaque);

/* ------------------------------------------------------------------------ */
/* Polling parameters and statistics                                         */

#define AIO_HANDLER_NAME_SIZE 48

/*
 * Counters of one context, written only by its home thread and readable from
 * any thread (aio_context_get_stats()).  Times are in nanoseconds.
 */
typedef struct AioPollStats {
    uint64_t turns;           /* aio_poll() calls */
    int64_t poll_ns;          /* current window: the largest handler window */
    uint64_t poll_hits;       /* handlers found ready by the poll callbacks */
    uint64_t poll_misses;     /* poll windows that found nothing and blocked */
    uint64_t wakeups;         /* blocking waits ended by an fd event */
    uint64_t poll_time_ns;    /* time spent spinning */
    uint64_t block_time_ns;   /* time spent blocked in the fd monitor */
    uint64_t grows;           /* handler windows grown */
    uint64_t shrinks;         /* handler windows shrunk */
    uint64_t dispatches;      /* fd handler callbacks run (read/write/poll_ready) */
    uint64_t bhs;             /* bottom halves run */
    uint64_t timers;          /* timer callbacks run */
    uint64_t naps;            /* sleeps the policy cut short, to spin next */
    int64_t block_cpu_ns;     /* measured CPU cost of a blocking wait (0: not yet) */
    int64_t wake_late_ns;     /* measured lateness of a wake-up (0: not yet) */
    int64_t budget_ns;        /* predictive: spin ledger (saved minus spent) */
} AioPollStats;

/* One handler as reported by aio_context_get_handler_windows(). */
typedef struct AioHandlerWindow {
    int fd;
    char name[AIO_HANDLER_NAME_SIZE];  /* aio_set_fd_handler_name(), or "" */
    int64_t poll_ns;         /* the policy's window for this handler */
    uint64_t events;         /* times it was ready (each turn counts once) */
    uint64_t poll_hits;      /* ... found by its poll callback */
    uint64_t poll_misses;    /* spins that polled it and ended in blocking */
    uint64_t window_changes; /* times its window changed */
    uint64_t last_change_event;  /* events at its last window change */
    int64_t last_change_ns;  /* clock_now_ns() then (CLOCK_MONOTONIC), 0 never */
    bool active;             /* per-source policies: considered this second */
    unsigned phase;          /* 1 while it has requests pending (see
                              * aio_set_fd_poll_counts()), else 0 */
} AioHandlerWindow;

/* ------------------------------------------------------------------------ */
/* Context lifecycle                                                         */

/*
 * Create a context whose home thread is the caller until another thread
 * calls aio_context_set_home_thread().  Returns NULL and sets errp if the
 * eventfd or epoll instance cannot be created.
 */
AioContext *aio_context_new(Error **errp);

/*
 * Destroy a context.  Home thread, with no aio_poll() running.  Owners must
 * first remove their fd handlers, delete their BHs (aio_bh_delete) and
 * timers, and wait for their thread-pool requests.  Oneshot BHs still
 * pending are freed without running.
 */
void aio_context_unref(AioContext *ctx);

/* Make the calling thread the home thread (done by the thread that runs it). */
void aio_context_set_home_thread(AioContext *ctx);

/* True if the caller is the context's home thread. */
bool aio_context_in_home_thread(AioContext *ctx);

/* ------------------------------------------------------------------------ */
/* The loop                                                                  */

/*
 * Run one turn: poll (if enabled and useful), wait for events (only if
 * blocking and nothing is pending), then dispatch ready fd handlers, bottom
 * halves and expired timers.  Returns true if any callback other than the
 * context's own notifier ran.  Home thread.
 */
bool aio_poll(AioContext *ctx, bool blocking);

/*
 * Wake the context's home thread: a blocking aio_poll() returns, a poll
 * window in progress ends.  Any thread.
 */
void aio_notify(AioContext *ctx);

/* ------------------------------------------------------------------------ */
/* fd handlers                                                               */

/*
 * Register, change or (all callbacks NULL) remove the handler for fd.
 * io_read/io_write are called when the fd is readable/writable.  io_poll, if
 * given, is called while busy polling; when it returns true the handler is
 * dispatched through io_poll_ready (or io_read if io_poll_ready is NULL).
 * A handler without io_poll disables busy polling in the whole context for
 * as long as it is registered.  Home thread.  The caller keeps the fd open
 * until the handler is removed.
 */
void aio_set_fd_handler(AioContext *ctx, int fd, IOHandler *io_read,
                        IOHandler *io_write, AioPollFn *io_poll,
                        IOHandler *io_poll_ready, void *opaque);

/*
 * Hooks called when a poll window starts (io_poll_begin: suppress the
 * producer's notifications) and ends (io_poll_end: re-enable them).  After
 * io_poll_end the loop issues a full barrier and calls io_poll once more, so
 * work published just before notifications came back on is not lost.
 * Home thread; the handler for fd must exist.
 */
void aio_set_fd_poll(AioContext *ctx, int fd, IOHandler *io_poll_begin,
                     IOHandler *io_poll_end);

/* Label a handler for statistics (copied, truncated to
 * AIO_HANDLER_NAME_SIZE - 1 bytes). */
void aio_set_fd_handler_name(AioContext *ctx, int fd, const char *name);

/*
 * What the handler's producer owes us for work we handed out: requests
 * submitted and not completed (a completion ring), or popped and not yet
 * completed (a virtqueue); and how many requests it has completed so far.
 * Per-source poll policies use them to tell the phases of a source apart
 * (a completion ring with nothing in flight cannot have an event, and a
 * closed-loop guest queue sends its next request only after a completion)
 * and, by Little's law, to know how long its requests take.  Called by the
 * home thread at the start of a turn; must be cheap and side-effect free.
 */
typedef struct AioPollCounts {
    unsigned pending;        /* requests owed now */
    uint64_t done;           /* requests completed so far (monotonic) */
} AioPollCounts;
typedef void AioPollCountsFn(void *opaque, AioPollCounts *c);
typedef void EventNotifierCountsFn(EventNotifier *e, AioPollCounts *c);

/* Set (or clear, with NULL) io_poll_counts for fd's handler.  Home thread;
 * the handler must exist. */
void aio_set_fd_poll_counts(AioContext *ctx, int fd, AioPollCountsFn *fn);
void aio_set_event_notifier_counts(AioContext *ctx, EventNotifier *e,
                                   EventNotifierCountsFn *fn);

/* Event-notifier wrappers of the two functions above.  Home thread. */
void aio_set_event_notifier(AioContext *ctx, EventNotifier *e,
                            EventNotifierHandler *io_read,
                            EventNotifierPollFn *io_poll,
                            EventNotifierHandler *io_poll_ready);
void aio_set_event_notifier_poll(AioContext *ctx, EventNotifier *e,
                                 EventNotifierHandler *io_poll_begin,
                                 EventNotifierHandler *io_poll_end);

/* ------------------------------------------------------------------------ */
/* Bottom halves                                                             */

/*
 * Create a BH that runs cb(opaque) in ctx's home thread each time it is
 * scheduled.  Any thread.  Scheduling a BH that is already pending does
 * nothing (it runs once).
 */
QEMUBH *aio_bh_new(AioContext *ctx, QEMUBHFunc *cb, void *opaque);

/* Schedule bh; lock-free.  Any thread. */
void aio_bh_schedule(QEMUBH *bh);

/* Unschedule bh if pending.  Home thread. */
void aio_bh_cancel(QEMUBH *bh);

/*
 * Delete bh.  A pending BH does not run after this.  The owner must make
 * sure that no thread can schedule bh any more (nor be in the middle of
 * aio_bh_schedule()) when it deletes it.  Home thread; another thread may
 * delete a BH only if it cannot be pending (it was never scheduled, or it
 * has run and nobody schedules it again), or after the home thread has
 * stopped running the context.
 */
void aio_bh_delete(QEMUBH *bh);

/*
 * Run the BHs scheduled so far, once, without polling or waiting (for a
 * loop that is shutting down).  Returns true if any ran.  Home thread.
 */
bool aio_bh_run_pending(AioContext *ctx);

/* Run cb(opaque) once in ctx's home thread.  Any thread. */
void aio_bh_schedule_oneshot(AioContext *ctx, QEMUBHFunc *cb, void *opaque);

/*
 * Run cb(opaque) in ctx's home thread and wait until it has returned.  From
 * the home thread itself cb runs directly.  Another thread must be running
 * aio_poll() on ctx (or the call would wait forever).  Any thread.
 */
void aio_run_sync(AioContext *ctx, QEMUBHFunc *cb, void *opaque);

/* ------------------------------------------------------------------------ */
/* Timers                                                                    */

struct AioTimer {
    AioContext *ctx;
    AioTimerCB *cb;
    void *opaque;
    int64_t expire_ns;        /* CLOCK_MONOTONIC; -1 when not pending */
    AioTimer *next;           /* the context's list, sorted by expire_ns */
};

/* Initialise a timer (caller-owned storage).  Home thread. */
void aio_timer_init(AioContext *ctx, AioTimer *t, AioTimerCB *cb, void *opaque);

/* Arm (or re-arm) t to fire at expire_ns (clock_now_ns() time base).  Home thread. */
void aio_timer_mod(AioTimer *t, int64_t expire_ns);

/* Disarm t if pending.  Home thread. */
void aio_timer_del(AioTimer *t);

static inline bool aio_timer_pending(const AioTimer *t)
{
    return t->expire_ns >= 0;
}

/* ------------------------------------------------------------------------ */
/* Per-context data                                                          */

/*
 * Attach data to the context under key (any unique address, e.g. of a
 * static variable of the subsystem).  destroy(data) runs when the context
 * is destroyed, in its home thread, before its handlers are checked, so it
 * may remove handlers it registered.  Replacing data destroys the old
 * data; setting NULL removes the entry without calling destroy.  Home
 * thread.
 */
void aio_context_set_data(AioContext *ctx, const void *key, void *data,
                          GDestroyNotify destroy);
/* The data attached under key, or NULL.  Home thread. */
void *aio_context_get_data(AioContext *ctx, const void *key);

/* ------------------------------------------------------------------------ */
/* Polling parameters, statistics                                            */

/*
 * Set the poll window tunables.  Any thread; takes effect at the next turn
 * (the home thread is woken).  Values must be >= 0 (the IOThread layer
 * validates user input and reports errors).
 */
void aio_context_set_poll_params(AioContext *ctx, const AioPollParams *p);
void aio_context_get_poll_params(AioContext *ctx, AioPollParams *p);

/*
 * Replace the poll policy; every handler's policy state starts afresh.
 * Home thread, or before the context runs.
 */
void aio_context_set_poll_policy(AioContext *ctx, const AioPollPolicyOps *ops);
const AioPollPolicyOps *aio_context_get_poll_policy(AioContext *ctx);

/* Batch limit for submissions from this context (0: engine default).  Any thread. */
void aio_context_set_aio_max_batch(AioContext *ctx, int64_t max_batch);
int64_t aio_context_get_aio_max_batch(AioContext *ctx);

/* Copy the counters.  Any thread; each field is read atomically. */
void aio_context_get_stats(AioContext *ctx, AioPollStats *out);

/*
 * A clock reading for the callback running now: the time (clock_now_ns())
 * at which this thread's aio_poll() began dispatching, if the running
 * callback is the first of its turn to run (handler, bottom half or
 * timer), else 0.  The loop reads the clock right after polling or waiting
 * anyway, so a callback that wants "now" (I/O accounting) can use that
 * reading instead of paying for its own; it is older than the truth only
 * by the loop's bookkeeping between the two.  The value is cleared after
 * every callback.  Home thread of the running context.
 */
extern __thread int64_t aio_dispatch_now_ns;

static inline int64_t aio_dispatch_time_ns(void)
{
    return aio_dispatch_now_ns;
}

/*
 * Fill up to max entries with the pollable handlers' windows; returns the
 * number of pollable handlers (which may exceed max).  Any thread.
 */
int aio_context_get_handler_windows(AioContext *ctx, AioHandlerWindow *out,
                                    int max);

#endif

/*
 * aio_poll() and fd handlers: the adaptive busy-poll event loop.
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
 *  4. Adjust each handler's window with the time it waited (poll-policy.c),
 *     dispatch ready handlers, then bottom halves, then expired timers.
 *
 * Handlers are added and removed only by the home thread.  A removed
 * handler stays on the list, marked deleted, until no aio_poll() is running
 * (callbacks may remove handlers, including their own).  The list and the
 * fields other threads read for statistics are changed under handlers_lock;
 * the home thread itself walks the list without the lock.
 *
 * Nesting.  A callback may call aio_poll() again.  The ready list and the
 * BH batch belong to the context and are consumed one entry at a time, so
 * the nested turn dispatches what the outer turn had collected; only the
 * outermost turn adjusts the windows.
 */
#include <errno.h>
#include <string.h>
#include "aio-internal.h"
#include "util/clock.h"
#include "util/cutils.h"
#include "trace.h"

/* ------------------------------------------------------------------------ */
/* Calling a handler's callbacks                                            */

static void aio_handler_call(AioHandler *h, AioHandlerCB cb)
{
    if (h->is_event_notifier) {
        cb.en(h->opaque);
    } else {
        cb.fd(h->opaque);
    }
}

static bool aio_handler_call_poll(AioHandler *h)
{
    if (h->is_event_notifier) {
        return h->io_poll.en(h->opaque);
    }
    return h->io_poll.fd(h->opaque);
}

static bool aio_handler_is_pollable(const AioHandler *h)
{
    return h->io_poll.fd != NULL;
}

/* ------------------------------------------------------------------------ */
/* Handler registration                                                     */

static AioHandler *aio_find_handler(AioContext *ctx, int fd)
{
    for (AioHandler *h = ctx->handlers; h; h = h->next) {
        if (h->fd == fd && !h->deleted) {
            return h;
        }
    }
    return NULL;
}

/* Keep the counts that decide whether the context may busy-poll. */
static void aio_handler_account(AioContext *ctx, const AioHandler *h, int sign)
{
    if (h->io_write) {
        ctx->n_writers += sign;
    }
    if (!h->internal && !aio_handler_is_pollable(h)) {
        ctx->n_unpollable += sign;
    }
}

/* io_poll_begin for one handler, if it has the hook and has not had it. */
static void aio_handler_poll_begin(AioHandler *h)
{
    if (h->io_poll_begin.fd && !h->poll_begun) {
        h->poll_begun = true;
        aio_handler_call(h, h->io_poll_begin);
    }
}

/* io_poll_end for one handler, only if it had io_poll_begin. */
static void aio_handler_poll_end(AioHandler *h)
{
    if (h->poll_begun) {
        h->poll_begun = false;
        if (h->io_poll_end.fd) {
            aio_handler_call(h, h->io_poll_end);
        }
    }
}

static void aio_handler_remove(AioContext *ctx, AioHandler *h)
{
    /* Do not leave the producer with notifications suppressed. */
    aio_handler_poll_end(h);
    ctx->fdmon->update(ctx, h, 0);
    aio_handler_account(ctx, h, -1);
    g_mutex_lock(&ctx->handlers_lock);     /* statistics readers look at it */
    h->deleted = true;
    g_mutex_unlock(&ctx->handlers_lock);
    ctx->handlers_deleted = true;
}

static void aio_handler_free_deleted(AioContext *ctx)
{
    AioHandler **pp = &ctx->handlers;

    g_mutex_lock(&ctx->handlers_lock);
    while (*pp) {
        AioHandler *h = *pp;

        if (h->deleted) {
            *pp = h->next;
            g_free(h);
        } else {
            pp = &h->next;
        }
    }
    g_mutex_unlock(&ctx->handlers_lock);
    ctx->handlers_deleted = false;
}

static void aio_set_handler(AioContext *ctx, int fd, bool is_event_notifier,
                            AioHandlerCB io_read, IOHandler *io_write,
                            AioHandlerPollCB io_poll, AioHandlerCB io_poll_ready,
                            void *opaque)
{
    AioHandler *h;
    uint32_t events = (io_read.fd ? EPOLLIN : 0) | (io_write ? EPOLLOUT : 0);
    int r;

    g_assert(aio_context_in_home_thread(ctx));
    /* Work found by polling must also be able to wake a blocked loop. */
    g_assert(!io_poll.fd || io_read.fd);

    h = aio_find_handler(ctx, fd);
    if (!events) {
        if (h) {
            aio_handler_remove(ctx, h);
        }
        return;
    }
    if (!h) {
        h = g_new0(AioHandler, 1);
        h->fd = fd;
        r = ctx->fdmon->update(ctx, h, events);
        if (r < 0) {
            /* Only fds that epoll supports may be registered: a bug. */
            g_critical("aio: cannot watch fd %d: %s", fd, g_strerror(-r));
            g_free(h);
            return;
        }
        g_mutex_lock(&ctx->handlers_lock);
        h->next = ctx->handlers;
        ctx->handlers = h;
        g_mutex_unlock(&ctx->handlers_lock);
    } else {
        aio_handler_account(ctx, h, -1);
        r = ctx->fdmon->update(ctx, h, events);
        g_assert(r == 0);
    }
    g_mutex_lock(&ctx->handlers_lock);     /* statistics readers look at it */
    h->is_event_notifier = is_event_notifier;
    h->io_read = io_read;
    h->io_write = io_write;
    h->io_poll = io_poll;
    h->io_poll_ready = io_poll_ready;
    h->opaque = opaque;
    g_mutex_unlock(&ctx->handlers_lock);
    if (!io_poll.fd) {
        h->poll_ready = false;             /* nothing left to dispatch it to */
    }
    aio_handler_account(ctx, h, +1);
}

void aio_set_fd_handler(AioContext *ctx, int fd, IOHandler *io_read,
                        IOHandler *io_write, AioPollFn *io_poll,
                        IOHandler *io_poll_ready, void *opaque)
{
    aio_set_handler(ctx, fd, false, (AioHandlerCB){ .fd = io_read }, io_write,
                    (AioHandlerPollCB){ .fd = io_poll },
                    (AioHandlerCB){ .fd = io_poll_ready }, opaque);
}

void aio_set_event_notifier(AioContext *ctx, EventNotifier *e,
                            EventNotifierHandler *io_read,
                            EventNotifierPollFn *io_poll,
                            EventNotifierHandler *io_poll_ready)
{
    aio_set_handler(ctx, event_notifier_get_fd(e), true,
                    (AioHandlerCB){ .en = io_read }, NULL,
                    (AioHandlerPollCB){ .en = io_poll },
                    (AioHandlerCB){ .en = io_poll_ready }, e);
}

static void aio_set_poll_hooks(AioContext *ctx, int fd, AioHandlerCB begin,
                               AioHandlerCB end)
{
    AioHandler *h;

    g_assert(aio_context_in_home_thread(ctx));
    h = aio_find_handler(ctx, fd);
    g_assert(h);
    aio_handler_poll_end(h);               /* with the old hooks */
    h->io_poll_begin = begin;
    h->io_poll_end = end;
    if (ctx->poll_started) {
        /* Polling is under way: suppress this producer's notifications too. */
        aio_handler_poll_begin(h);
    }
}

void aio_set_fd_poll(AioContext *ctx, int fd, IOHandler *io_poll_begin,
                     IOHandler *io_poll_end)
{
    aio_set_poll_hooks(ctx, fd, (AioHandlerCB){ .fd = io_poll_begin },
                       (AioHandlerCB){ .fd = io_poll_end });
}

void aio_set_event_notifier_poll(AioContext *ctx, EventNotifier *e,
                                 EventNotifierHandler *io_poll_begin,
                                 EventNotifierHandler *io_poll_end)
{
    aio_set_poll_hooks(ctx, event_notifier_get_fd(e),
                       (AioHandlerCB){ .en = io_poll_begin },
                       (AioHandlerCB){ .en = io_poll_end });
}

void aio_set_fd_handler_name(AioContext *ctx, int fd, const char *name)
{
    AioHandler *h;

    g_assert(aio_context_in_home_thread(ctx));
    h = aio_find_handler(ctx, fd);
    g_assert(h);
    g_mutex_lock(&ctx->handlers_lock);
    g_strlcpy(h->name, name, sizeof(h->name));
    g_mutex_unlock(&ctx->handlers_lock);
}

int aio_context_get_handler_windows(AioContext *ctx, AioHandlerWindow *out,
                                    int max)
{
    int n = 0;

    g_mutex_lock(&ctx->handlers_lock);
    for (AioHandler *h = ctx->handlers; h; h = h->next) {
        if (h->deleted || h->internal || !aio_handler_is_pollable(h)) {
            continue;
        }
        if (n < max) {
            out[n].fd = h->fd;
            memcpy(out[n].name, h->name, sizeof(out[n].name));
            out[n].poll_ns = atomic_load_explicit(&h->window_ns_pub,
                                                  memory_order_relaxed);
        }
        n++;
    }
    g_mutex_unlock(&ctx->handlers_lock);
    return n;
}

/* ------------------------------------------------------------------------ */
/* The context's own notifier                                               */

static void aio_context_notifier_read(EventNotifier *e)
{
    event_notifier_test_and_clear(e);
}

static bool aio_context_notifier_poll(EventNotifier *e)
{
    AioContext *ctx = container_of(e, AioContext, notifier);

    /* Acquire: pairs with the release store in aio_notify(). */
    return atomic_load_explicit(&ctx->notified, memory_order_acquire);
}

static void aio_context_notifier_poll_ready(EventNotifier *e)
{
    /* Nothing to do: aio_poll() accepts the notification itself. */
}

void aio_context_setup_notifier(AioContext *ctx)
{
    AioHandler *h;

    aio_set_event_notifier(ctx, &ctx->notifier, aio_context_notifier_read,
                           aio_context_notifier_poll,
                           aio_context_notifier_poll_ready);
    h = aio_find_handler(ctx, event_notifier_get_fd(&ctx->notifier));
    h->internal = true;
}

void aio_context_free_handlers(AioContext *ctx)
{
    for (AioHandler *h = ctx->handlers; h; h = h->next) {
        if (!h->deleted && !h->internal) {
            g_critical("aio: context destroyed with fd %d still registered",
                       h->fd);
        }
        if (!h->deleted) {
            aio_handler_remove(ctx, h);
        }
    }
    aio_handler_free_deleted(ctx);
}

/* ------------------------------------------------------------------------ */
/* Polling                                                                  */

static bool aio_poll_allowed(AioContext *ctx, const AioPollParams *params)
{
    return params->max_ns > 0 && ctx->n_unpollable == 0;
}

static int64_t aio_largest_window(AioContext *ctx)
{
    int64_t largest = 0;

    for (AioHandler *h = ctx->handlers; h; h = h->next) {
        if (!h->deleted && !h->internal && aio_handler_is_pollable(h)) {
            largest = MAX(largest, h->window.ns);
        }
    }
    return largest;
}

/*
 * Call the io_poll_begin (started) or io_poll_end (!started) hooks.  Each
 * handler's hooks are paired: a handler registered while polling is started
 * gets io_poll_begin when its hooks are set (aio_set_poll_hooks()).
 */
static void aio_poll_set_started(AioContext *ctx, bool started)
{
    if (ctx->poll_started == started) {
        return;
    }
    ctx->poll_started = started;
    for (AioHandler *h = ctx->handlers; h; h = h->next) {
        if (h->deleted) {
            continue;
        }
        if (started) {
            aio_handler_poll_begin(h);
        } else {
            aio_handler_poll_end(h);
        }
    }
    SPINDLE_TRACE2(poll_started, ctx, started);
}

/*
 * Call every poll callback once; queue the ready handlers.  True if any;
 * then *now is the clock reading taken when the first was found (the
 * turn reuses it rather than reading the clock again).
 */
static bool aio_poll_handlers_once(AioContext *ctx, int64_t turn_start,
                                   int64_t *now_out)
{
    uint64_t hits = 0;
    bool found = false;
    int64_t now = 0;

    for (AioHandler *h = ctx->handlers; h; h = h->next) {
        if (h->deleted || h->on_ready_list || !aio_handler_is_pollable(h)) {
            continue;       /* already queued: it will be dispatched */
        }
        if (aio_handler_call_poll(h)) {
            if (!now) {
                now = clock_now_ns();
            }
            h->poll_ready = true;
            h->poll_ready_ns = now - turn_start;
            aio_handler_mark_ready(ctx, h);
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

    aio_poll_set_started(ctx, true);
    *now = turn_start;
    do {
        found = aio_poll_handlers_once(ctx, turn_start, now);
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
/* Window adjustment                                                        */

static void aio_poll_adjust_windows(AioContext *ctx, const AioPollParams *params,
                                    int64_t waited_ns)
{
    uint64_t grows = 0, shrinks = 0;
    int64_t largest = 0;

    for (AioHandler *h = ctx->handlers; h; h = h->next) {
        bool had_event;
        int64_t wait_ns;
        int64_t old;

        if (h->deleted || h->internal || !aio_handler_is_pollable(h)) {
            continue;
        }
        had_event = h->poll_ready || h->revents;
        wait_ns = h->poll_ready ? h->poll_ready_ns : waited_ns;
        old = h->window.ns;
        switch (ctx->policy->adjust(params, &h->window, wait_ns, had_event)) {
        case AIO_POLL_GREW:
            grows++;
            SPINDLE_TRACE3(poll_grow, ctx, old, h->window.ns);
            break;
        case AIO_POLL_SHRANK:
            shrinks++;
            SPINDLE_TRACE3(poll_shrink, ctx, old, h->window.ns);
            break;
        case AIO_POLL_KEPT:
            break;
        }
        if (h->window.ns != old) {
            atomic_store_explicit(&h->window_ns_pub, h->window.ns,
                                  memory_order_relaxed);
        }
        largest = MAX(largest, h->window.ns);
    }
    stat_add(&ctx->stats.grows, grows);
    stat_add(&ctx->stats.shrinks, shrinks);
    atomic_store_explicit(&ctx->stats.poll_ns, largest, memory_order_relaxed);
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

bool aio_poll(AioContext *ctx, bool blocking)
{
    AioPollParams params;
    int64_t start, now, timeout, block_start, dispatch_start, waited_ns;
    bool polling, found = false, waited = false, notify_me = false, progress;
    bool fdmon_called;
    int n;

    g_assert(aio_context_in_home_thread(ctx));
    ctx->poll_depth++;
    aio_context_get_poll_params(ctx, &params);
    /* now: the latest clock reading of this turn, reused where a slightly
     * older one does as well as a new read. */
    start = now = clock_now_ns();
    ctx->turn_start_ns = start;
    stat_add(&ctx->stats.turns, 1);

    timeout = blocking ? aio_compute_timeout(ctx, start) : 0;
    polling = aio_poll_allowed(ctx, &params);

    /* 1. Busy-poll for the largest handler window (bounded by timers). */
    if (polling && timeout != 0) {
        int64_t spin = ctx->policy->spin_ns(&params, aio_largest_window(ctx));

        if (spin > 0) {
            found = aio_poll_spin(ctx, start,
                                  aio_spin_deadline(start, spin, timeout),
                                  &now);
            waited = true;
        }
    } else if (polling) {
        found = aio_poll_handlers_once(ctx, start, &now);
    }
    if (found) {
        timeout = 0;
    } else if (timeout != 0) {
        /* The spin (if any) ran to its deadline, read as now: recompute
         * what is left. */
        timeout = aio_compute_timeout(ctx, now);
    }

    /* 2. About to block (or no longer allowed to poll): notifications back
     * on, barrier, one more look. */
    if (ctx->poll_started && (timeout != 0 || !polling)) {
        aio_poll_set_started(ctx, false);
        /* Full fence: orders the io_poll_end stores (e.g. clearing
         * VRING_USED_F_NO_NOTIFY) before the loads of the re-check; pairs
         * with the producer's fence between publishing work and reading
         * that flag. */
        atomic_thread_fence(memory_order_seq_cst);
        if (aio_poll_handlers_once(ctx, start, &now)) {
            timeout = 0;
        } else if (waited) {
            stat_add(&ctx->stats.poll_misses, 1);
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
    if (fdmon_called) {
        n = ctx->fdmon->wait(ctx, timeout);
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
        waited = true;
    }
    /* After blocking, now is the wake-up; after polling found work, when
     * it was found.  A non-blocking fd monitor call takes a system call's
     * time: read the clock again then. */
    if (fdmon_called && timeout == 0) {
        now = clock_now_ns();
    }
    dispatch_start = now;
    waited_ns = dispatch_start - start;

    /* Accept the notification before running BHs: a later aio_notify()
     * sets the flag again and is seen by the next turn.  seq_cst exchange:
     * ordered before the BH list exchange in aio_bh_poll(). */
    atomic_exchange(&ctx->notified, false);

    /* 4. Learn from this turn (the outermost one: a nested turn would see
     * the outer turn's readiness again), then dispatch. */
    if (blocking && waited && ctx->poll_depth == 1) {
        aio_poll_adjust_windows(ctx, &params, waited_ns);
    }
    aio_dispatch_now_ns = dispatch_start;     /* for the first callback */
    progress = aio_dispatch_ready(ctx);
    progress |= aio_bh_poll(ctx);
    progress |= aio_timers_run_expired(ctx);
    aio_dispatch_now_ns = 0;

    if (--ctx->poll_depth == 0 && ctx->handlers_deleted) {
        aio_handler_free_deleted(ctx);
    }
    return progress;
}

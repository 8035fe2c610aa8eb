/*
 * AioContext fd handlers and event notifiers: registration and statistics.
 *
 * Theory of operation.  Each registered fd is one AioHandler on
 * ctx->handlers, with its callbacks (read, write, poll, poll-ready, the
 * io_poll_begin/end hooks that suppress a producer's notifications, and the
 * pending-counts callback of per-source policies) and the poll policy's view
 * of it as a source.  An event notifier is an fd handler whose callbacks
 * take the EventNotifier.  Registering keeps the fd monitor and the counts
 * that decide whether the context may busy-poll (n_unpollable, n_writers)
 * up to date, and marks the source sets for a rebuild; aio_poll() (in
 * aio-posix.c) does the rest.  The context's own notifier is a handler too,
 * marked internal: it has no window and no statistics.
 *
 * Handlers are added and removed only by the home thread.  A removed
 * handler stays on the list, marked deleted, until no aio_poll() is running
 * (callbacks may remove handlers, including their own).  The list and the
 * fields other threads read for statistics are changed under handlers_lock;
 * the home thread itself walks the list without the lock.
 */
#include <string.h>
#include "aio-internal.h"
#include "util/cutils.h"

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
    ctx->sources_dirty = true;
}

void aio_handler_free_deleted(AioContext *ctx)
{
    AioHandler **pp = &ctx->handlers;

    g_mutex_lock(&ctx->handlers_lock);
    while (*pp) {
        AioHandler *h = *pp;

        if (h->deleted) {
            *pp = h->next;
            aio_poll_source_reset(&h->src);
            g_free(h);
        } else {
            pp = &h->next;
        }
    }
    g_mutex_unlock(&ctx->handlers_lock);
    ctx->handlers_deleted = false;
    /* The source sets may point at what was just freed. */
    ctx->all.n = ctx->active.n = ctx->spin.n = ctx->observed.n = 0;
    ctx->sources_dirty = true;
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
    ctx->sources_dirty = true;
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
    if (ctx->poll_started &&
        (!ctx->policy->per_source || (h->active && h->src.spin))) {
        /* Polling is under way: suppress this producer's notifications too
         * (with a per-source policy, only if the spin polls it). */
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

static void aio_set_counts(AioContext *ctx, int fd, AioHandlerCountsCB fn)
{
    AioHandler *h;

    g_assert(aio_context_in_home_thread(ctx));
    h = aio_find_handler(ctx, fd);
    g_assert(h);
    h->io_poll_counts = fn;
    if (!fn.fd) {
        h->src.phase = 0;
        atomic_store_explicit(&h->phase_pub, 0, memory_order_relaxed);
    }
}

void aio_set_fd_poll_counts(AioContext *ctx, int fd, AioPollCountsFn *fn)
{
    aio_set_counts(ctx, fd, (AioHandlerCountsCB){ .fd = fn });
}

void aio_set_event_notifier_counts(AioContext *ctx, EventNotifier *e,
                                   EventNotifierCountsFn *fn)
{
    aio_set_counts(ctx, event_notifier_get_fd(e),
                   (AioHandlerCountsCB){ .en = fn });
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
            const AioHandlerCounters *c = &h->counters;

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)
            out[n] = (AioHandlerWindow) {
                .fd = h->fd,
                .poll_ns = LOAD(h->window_ns_pub),
                .events = LOAD(c->events),
                .poll_hits = LOAD(c->poll_hits),
                .poll_misses = LOAD(c->poll_misses),
                .window_changes = LOAD(c->window_changes),
                .last_change_event = LOAD(c->last_change_event),
                .last_change_ns = LOAD(c->last_change_ns),
                .active = LOAD(h->active_pub),
                .phase = LOAD(h->phase_pub),
            };
#undef LOAD
            memcpy(out[n].name, h->name, sizeof(out[n].name));
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
    ctx->notifier_handler = h;
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

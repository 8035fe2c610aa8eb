/*
 * Timers of an AioContext: a list sorted by deadline, owned by the home
 * thread.  aio_poll() bounds both its poll window and its blocking wait by
 * the first deadline, and runs expired timers after the other callbacks.
 * Contexts hold few timers (request timeouts, statistics), so a sorted list
 * is the simplest structure that is fast enough.
 */
#include "aio-internal.h"
#include "util/clock.h"

void aio_timer_init(AioContext *ctx, AioTimer *t, AioTimerCB *cb, void *opaque)
{
    *t = (AioTimer) {
        .ctx = ctx,
        .cb = cb,
        .opaque = opaque,
        .expire_ns = -1,
    };
}

static void aio_timer_unlink(AioTimer *t)
{
    AioTimer **pp = &t->ctx->timers;

    while (*pp && *pp != t) {
        pp = &(*pp)->next;
    }
    if (*pp) {
        *pp = t->next;
    }
    t->next = NULL;
    t->expire_ns = -1;
}

void aio_timer_del(AioTimer *t)
{
    g_assert(aio_context_in_home_thread(t->ctx));
    if (aio_timer_pending(t)) {
        aio_timer_unlink(t);
    }
}

void aio_timer_mod(AioTimer *t, int64_t expire_ns)
{
    AioTimer **pp;

    g_assert(aio_context_in_home_thread(t->ctx));
    g_assert(expire_ns >= 0);
    aio_timer_del(t);
    pp = &t->ctx->timers;
    while (*pp && (*pp)->expire_ns <= expire_ns) {
        pp = &(*pp)->next;
    }
    t->expire_ns = expire_ns;
    t->next = *pp;
    *pp = t;
}

int64_t aio_timers_next_deadline_ns(AioContext *ctx, int64_t now)
{
    if (!ctx->timers) {
        return -1;
    }
    return MAX(ctx->timers->expire_ns - now, 0);
}

bool aio_timers_run_expired(AioContext *ctx)
{
    int64_t now;
    uint64_t ran = 0;

    if (!ctx->timers) {
        return false;
    }
    now = clock_now_ns();
    while (ctx->timers && ctx->timers->expire_ns <= now) {
        AioTimer *t = ctx->timers;

        aio_timer_unlink(t);
        ran++;
        t->cb(t->opaque);       /* may re-arm or delete any timer */
        aio_dispatch_now_ns = 0;  /* see aio_dispatch_time_ns() */
    }
    if (ran) {
        stat_add(&ctx->stats.timers, ran);
    }
    return ran > 0;
}

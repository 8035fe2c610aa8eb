/*
 * AioContext lifecycle, bottom halves, aio_notify(), parameters, statistics.
 *
 * Bottom halves.  Scheduling must work from any thread without a lock and
 * without waking the home thread more than needed.  A BH carries flags
 * (PENDING: it is on the context's list; SCHEDULED: it should run).  The
 * scheduler sets both with one atomic OR; only the thread that turned
 * PENDING on pushes the BH onto the context's list (a lock-free LIFO: a CAS
 * on the head) and calls aio_notify().  Scheduling an already pending BH is
 * therefore just the OR: the BH runs once (coalescing).  The home thread
 * takes the whole list with one atomic exchange, appends it in FIFO order
 * to the context's current batch and, for each BH, clears the flags with an
 * atomic AND *after* reading its next pointer: from that moment another
 * thread may push it again, which puts it on the context's (now fresh) list
 * and runs it in a later turn.
 *
 * Wakeups.  aio_notify() sets ctx->notified, then issues a full fence and
 * kicks the eventfd only if ctx->notify_me says the home thread may be about
 * to block.  The home thread sets notify_me, issues a full fence, then looks
 * for BHs and notifications before blocking.  One of the two always sees the
 * other's store, so a notification is never lost, and while the home thread
 * is busy polling no system call is made at all: the poll loop sees
 * ctx->notified directly.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
#include "aio-internal.h"
#include "util/clock.h"
#include "util/trace.h"

enum {
    BH_PENDING   = 1 << 0,   /* on ctx->bh_list */
    BH_SCHEDULED = 1 << 1,   /* run it when it is taken off the list */
    BH_ONESHOT   = 1 << 2,   /* free after running */
    BH_DELETED   = 1 << 3,   /* free when taken off the list, do not run */
};

struct QEMUBH {
    AioContext *ctx;
    QEMUBHFunc *cb;
    void *opaque;
    _Atomic unsigned flags;
    QEMUBH *next;            /* written only by the pusher while PENDING */
};

/* ------------------------------------------------------------------------ */
/* Notification                                                              */

void aio_notify(AioContext *ctx)
{
    /* Release: work published before aio_notify() is visible to a poller
     * that sees notified == true (its acquire load in the notifier poll). */
    atomic_store_explicit(&ctx->notified, true, memory_order_release);
    /* Full fence: pairs with the fence in aio_poll() between setting
     * notify_me and checking for pending work (Dekker-style). */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&ctx->notify_me, memory_order_relaxed)) {
        event_notifier_set(&ctx->notifier);
    }
    SPINDLE_TRACE1(aio_notify, ctx);
}

/* ------------------------------------------------------------------------ */
/* Bottom halves                                                             */

QEMUBH *aio_bh_new(AioContext *ctx, QEMUBHFunc *cb, void *opaque)
{
    QEMUBH *bh = g_new0(QEMUBH, 1);

    bh->ctx = ctx;
    bh->cb = cb;
    bh->opaque = opaque;
    return bh;
}

static void aio_bh_enqueue(QEMUBH *bh, unsigned new_flags)
{
    AioContext *ctx = bh->ctx;
    unsigned old;
    QEMUBH *head;

    /* acq_rel: orders the caller's writes before the BH can be seen, and
     * pairs with the AND in aio_bh_poll() that clears PENDING. */
    old = atomic_fetch_or_explicit(&bh->flags, BH_PENDING | new_flags,
                                   memory_order_acq_rel);
    if (old & BH_PENDING) {
        return;     /* already queued; whoever queued it notified */
    }
    head = atomic_load_explicit(&ctx->bh_list, memory_order_relaxed);
    do {
        bh->next = head;
        /* Release: bh->next and the BH's fields are visible to the home
         * thread's acquire exchange in aio_bh_poll(). */
    } while (!atomic_compare_exchange_weak_explicit(&ctx->bh_list, &head, bh,
                                                    memory_order_release,
                                                    memory_order_relaxed));
    aio_notify(ctx);
}

void aio_bh_schedule(QEMUBH *bh)
{
    aio_bh_enqueue(bh, BH_SCHEDULED);
}

void aio_bh_schedule_oneshot(AioContext *ctx, QEMUBHFunc *cb, void *opaque)
{
    QEMUBH *bh = aio_bh_new(ctx, cb, opaque);

    aio_bh_enqueue(bh, BH_SCHEDULED | BH_ONESHOT);
}

void aio_bh_cancel(QEMUBH *bh)
{
    atomic_fetch_and_explicit(&bh->flags, ~(unsigned)BH_SCHEDULED,
                              memory_order_relaxed);
}

void aio_bh_delete(QEMUBH *bh)
{
    unsigned old;

    if (!bh) {
        return;
    }
    old = atomic_fetch_or_explicit(&bh->flags, BH_DELETED, memory_order_acq_rel);
    if (!(old & BH_PENDING)) {
        g_free(bh);       /* not on any list */
    }
    /* else aio_bh_poll() frees it when it takes it off the list */
}

bool aio_bh_pending(AioContext *ctx)
{
    return ctx->bh_batch ||
           atomic_load_explicit(&ctx->bh_list, memory_order_acquire) != NULL;
}

/* Move the scheduled BHs, oldest first, to the end of the current batch. */
static void aio_bh_take_list(AioContext *ctx)
{
    /* Acquire: pairs with the release CAS in aio_bh_enqueue(). */
    QEMUBH *bh = atomic_exchange_explicit(&ctx->bh_list, NULL,
                                          memory_order_acquire);
    QEMUBH *fifo = NULL, *tail = bh;

    while (bh) {
        QEMUBH *next = bh->next;

        bh->next = fifo;
        fifo = bh;
        bh = next;
    }
    if (!fifo) {
        return;
    }
    if (ctx->bh_batch) {
        ctx->bh_batch_tail->next = fifo;
    } else {
        ctx->bh_batch = fifo;
    }
    ctx->bh_batch_tail = tail;
}

/* Take the oldest BH of the batch off it and clear its PENDING flag. */
static QEMUBH *aio_bh_pop(AioContext *ctx, unsigned *old_flags)
{
    QEMUBH *bh = ctx->bh_batch;

    ctx->bh_batch = bh->next;   /* read before PENDING is cleared */
    /* acq_rel: pairs with the OR in aio_bh_enqueue(); from here on another
     * thread may push the BH again (onto bh_list, for a later batch). */
    *old_flags = atomic_fetch_and_explicit(&bh->flags,
                                           ~(unsigned)(BH_PENDING | BH_SCHEDULED),
                                           memory_order_acq_rel);
    return bh;
}

/*
 * Run the BHs scheduled so far.  The batch lives in the context, so a
 * callback that runs a nested aio_poll() continues the same batch instead
 * of stranding the BHs behind it (they are still PENDING, so scheduling
 * them again would not queue them again).  BHs scheduled during the batch
 * go to bh_list and run in a later turn (or in a nested turn, which
 * appends them to the batch), so a BH that reschedules itself runs once
 * per turn, not forever.
 */
bool aio_bh_poll(AioContext *ctx)
{
    uint64_t ran = 0;

    aio_bh_take_list(ctx);
    while (ctx->bh_batch) {
        unsigned old;
        QEMUBH *bh = aio_bh_pop(ctx, &old);

        if ((old & BH_SCHEDULED) && !(old & BH_DELETED)) {
            ran++;
            bh->cb(bh->opaque);
            aio_dispatch_now_ns = 0;  /* see aio_dispatch_time_ns() */
        }
        if (old & (BH_DELETED | BH_ONESHOT)) {
            g_free(bh);
        }
    }
    if (ran) {
        stat_add(&ctx->stats.bhs, ran);
    }
    return ran > 0;
}

bool aio_bh_run_pending(AioContext *ctx)
{
    g_assert(aio_context_in_home_thread(ctx));
    return aio_bh_poll(ctx);
}

void aio_bh_list_destroy(AioContext *ctx)
{
    aio_bh_take_list(ctx);
    while (ctx->bh_batch) {
        unsigned old;
        QEMUBH *bh = aio_bh_pop(ctx, &old);

        if (old & (BH_DELETED | BH_ONESHOT)) {
            g_free(bh);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Synchronous calls into the home thread                                    */

typedef struct AioRunSync {
    QEMUBHFunc *cb;
    void *opaque;
    GMutex lock;
    GCond cond;
    bool done;
} AioRunSync;

static void aio_run_sync_bh(void *opaque)
{
    AioRunSync *rs = opaque;

    rs->cb(rs->opaque);
    g_mutex_lock(&rs->lock);
    rs->done = true;
    g_cond_signal(&rs->cond);
    g_mutex_unlock(&rs->lock);
}

void aio_run_sync(AioContext *ctx, QEMUBHFunc *cb, void *opaque)
{
    AioRunSync rs = { .cb = cb, .opaque = opaque };

    if (aio_context_in_home_thread(ctx)) {
        cb(opaque);
        return;
    }
    g_mutex_init(&rs.lock);
    g_cond_init(&rs.cond);
    aio_bh_schedule_oneshot(ctx, aio_run_sync_bh, &rs);
    g_mutex_lock(&rs.lock);
    while (!rs.done) {
        g_cond_wait(&rs.cond, &rs.lock);
    }
    g_mutex_unlock(&rs.lock);
    g_mutex_clear(&rs.lock);
    g_cond_clear(&rs.cond);
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */

AioContext *aio_context_new(Error **errp)
{
    AioContext *ctx;
    int r;

    /* The context has cache-line aligned members. */
    if (posix_memalign((void **)&ctx, CACHELINE, sizeof(*ctx))) {
        error_setg(errp, "Out of memory for an AioContext");
        return NULL;
    }
    memset(ctx, 0, sizeof(*ctx));
    ctx->epollfd = epoll_create1(EPOLL_CLOEXEC);
    if (ctx->epollfd < 0) {
        error_setg_errno(errp, errno, "Cannot create an epoll instance");
        free(ctx);
        return NULL;
    }
    r = event_notifier_init(&ctx->notifier, false);
    if (r < 0) {
        error_setg_errno(errp, -r, "Cannot create an eventfd");
        close(ctx->epollfd);
        free(ctx);
        return NULL;
    }
    g_mutex_init(&ctx->handlers_lock);
    aio_context_set_home_thread(ctx);
    ctx->policy = &aio_poll_policy_default;
    ctx->fdmon = &fdmon_epoll_ops;
    atomic_init(&ctx->poll_max_ns, AIO_POLL_MAX_NS_DEFAULT);
    aio_context_setup_notifier(ctx);
    return ctx;
}

/* ------------------------------------------------------------------------ */
/* Per-context data                                                          */

typedef struct AioContextData {
    void *data;
    GDestroyNotify destroy;
} AioContextData;

static void aio_context_data_free(gpointer p)
{
    AioContextData *d = p;

    if (d->destroy) {
        d->destroy(d->data);
    }
    g_free(d);
}

void aio_context_set_data(AioContext *ctx, const void *key, void *data,
                          GDestroyNotify destroy)
{
    g_assert(aio_context_in_home_thread(ctx));
    if (!ctx->data) {
        ctx->data = g_hash_table_new_full(NULL, NULL, NULL,
                                          aio_context_data_free);
    }
    if (!data) {
        AioContextData *old = g_hash_table_lookup(ctx->data, key);

        if (old) {
            old->destroy = NULL;        /* removed, not destroyed */
            g_hash_table_remove(ctx->data, key);
        }
        return;
    }
    AioContextData *d = g_new(AioContextData, 1);

    d->data = data;
    d->destroy = destroy;
    g_hash_table_replace(ctx->data, (gpointer)key, d);
}

void *aio_context_get_data(AioContext *ctx, const void *key)
{
    AioContextData *d;

    g_assert(aio_context_in_home_thread(ctx));
    d = ctx->data ? g_hash_table_lookup(ctx->data, key) : NULL;
    return d ? d->data : NULL;
}

void aio_context_unref(AioContext *ctx)
{
    if (!ctx) {
        return;
    }
    g_assert(aio_context_in_home_thread(ctx));
    if (ctx->data) {
        g_hash_table_destroy(ctx->data);    /* may remove handlers, BHs */
        ctx->data = NULL;
    }
    if (ctx->thread_pool) {
        thread_pool_free(ctx->thread_pool);
    }
    aio_bh_list_destroy(ctx);
    g_assert(ctx->timers == NULL);
    aio_context_free_handlers(ctx);
    aio_source_sets_free(ctx);
    event_notifier_cleanup(&ctx->notifier);
    close(ctx->epollfd);
    g_mutex_clear(&ctx->handlers_lock);
    free(ctx);
}

/*
 * An event loop thread wants its timers to fire on time: Linux's default
 * timer slack (50 us) would let every timed wait (a timer, the end of a
 * poll window's sleep) run up to 50 us late, which at storage speeds is
 * the whole request.  The slack is per thread, and threads this one
 * creates inherit it.
 */
static void aio_thread_set_timer_slack(void)
{
    prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
}

void aio_context_set_home_thread(AioContext *ctx)
{
    ctx->home = pthread_self();
    aio_thread_set_timer_slack();
}

bool aio_context_in_home_thread(AioContext *ctx)
{
    return pthread_equal(ctx->home, pthread_self());
}

/* ------------------------------------------------------------------------ */
/* Parameters and statistics                                                 */

void aio_context_set_poll_params(AioContext *ctx, const AioPollParams *p)
{
    g_assert(p->max_ns >= 0 && p->grow >= 0 && p->shrink >= 0 &&
             p->weight >= 0 && p->weight <= AIO_POLL_WEIGHT_MAX);
    atomic_store_explicit(&ctx->poll_max_ns, p->max_ns, memory_order_relaxed);
    atomic_store_explicit(&ctx->poll_grow, p->grow, memory_order_relaxed);
    atomic_store_explicit(&ctx->poll_shrink, p->shrink, memory_order_relaxed);
    atomic_store_explicit(&ctx->poll_weight, p->weight, memory_order_relaxed);
    aio_notify(ctx);   /* a blocked or spinning loop picks them up now */
}

/*
 * The three loads are independent: a turn that races with a change may see
 * a new max_ns with an old grow.  Each value is valid on its own, and the
 * next turn sees the whole change.
 */
void aio_context_get_poll_params(AioContext *ctx, AioPollParams *p)
{
    p->max_ns = atomic_load_explicit(&ctx->poll_max_ns, memory_order_relaxed);
    p->grow = atomic_load_explicit(&ctx->poll_grow, memory_order_relaxed);
    p->shrink = atomic_load_explicit(&ctx->poll_shrink, memory_order_relaxed);
    p->weight = atomic_load_explicit(&ctx->poll_weight, memory_order_relaxed);
}

void aio_context_set_poll_policy(AioContext *ctx, const AioPollPolicyOps *ops)
{
    g_assert(aio_context_in_home_thread(ctx));
    if (ctx->policy == ops) {
        return;
    }
    /* The new policy starts from nothing: no windows, no histograms.  The
     * measured costs stay (they belong to the thread, not the policy). */
    aio_context_reset_poll_state(ctx);
    ctx->policy = ops;
}

const AioPollPolicyOps *aio_context_get_poll_policy(AioContext *ctx)
{
    return ctx->policy;
}

void aio_context_set_aio_max_batch(AioContext *ctx, int64_t max_batch)
{
    g_assert(max_batch >= 0);
    atomic_store_explicit(&ctx->aio_max_batch, max_batch, memory_order_relaxed);
}

int64_t aio_context_get_aio_max_batch(AioContext *ctx)
{
    return atomic_load_explicit(&ctx->aio_max_batch, memory_order_relaxed);
}

void aio_context_get_stats(AioContext *ctx, AioPollStats *out)
{
    const AioStatsCounters *s = &ctx->stats;

#define LOAD(f) atomic_load_explicit(&s->f, memory_order_relaxed)
    *out = (AioPollStats) {
        .turns = LOAD(turns),
        .poll_ns = LOAD(poll_ns),
        .poll_hits = LOAD(poll_hits),
        .poll_misses = LOAD(poll_misses),
        .wakeups = LOAD(wakeups),
        .poll_time_ns = LOAD(poll_time_ns),
        .block_time_ns = LOAD(block_time_ns),
        .grows = LOAD(grows),
        .shrinks = LOAD(shrinks),
        .dispatches = LOAD(dispatches),
        .bhs = LOAD(bhs),
        .timers = LOAD(timers),
        .naps = LOAD(naps),
        .block_cpu_ns = LOAD(block_cpu_ns),
        .wake_late_ns = LOAD(wake_late_ns),
        .budget_ns = LOAD(budget_ns),
    };
#undef LOAD
}

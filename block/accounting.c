/*
 * Block accounting: per-device request counters for query-blockstats.
 *
 * Theory of operation.  A device that wants its I/O counted makes one
 * BlockAcct with a slot per BlockQueue it uses (typically one per
 * virtqueue) and attaches each queue to its slot with
 * block_queue_set_acct().  The top BlockQueue then remembers the slot's
 * BlockAcctStats (q->acct); block_queue_submit() stamps each request with
 * the time (BlockRequestInt.acct_start_ns) only if the queue has a slot,
 * and block_request_complete() (io.c) adds the request to the slot, once,
 * when it is done: ops and bytes if it succeeded, failed if not, and the
 * time since submission either way.  Requests that fail the checks at
 * submission (out of bounds, a write to a read-only node) complete through
 * the same path from a BH, so they count as failed.  Only the queue the
 * request was submitted to counts it: the queues of the nodes below (a
 * filter's child) never have a slot.
 *
 * The clock is read once per batch of submissions (a plugged section of
 * the queue) and once per batch of completions (what an engine reaps in
 * one go), not per request: see block_acct_batch_begin() in block-int.h;
 * and not at all when the batch runs in the first callback of an event
 * loop turn, which gets the loop's own reading (block_acct_clock()).
 *
 * Threads and memory.  A slot is written only by the home thread of the
 * queue attached to it (one writer), so a counter is updated with a plain
 * read of its own last value and a relaxed atomic store of the sum: no
 * locked instruction on the data path.  Readers in any thread sum the
 * slots with relaxed atomic loads; each counter is exact (never torn),
 * but counters taken together may be a few requests apart.  Each slot
 * has its own cache line(s) (BLOCK_ACCT_ALIGN), so queues in different
 * IOThreads never write a shared line.  The BlockAcct outlives its
 * queues (the counts survive a front-end reconnecting); attached counts
 * the queues still pointing at it, so that freeing it too early is caught.
 * The counters are plain uint64_t in the public header, so they are
 * accessed with the GCC __atomic builtins rather than C11 _Atomic types.
 */
#include <stdlib.h>
#include <string.h>
#include "block/block-int.h"
#include "util/clock.h"

/* A cache line on the machines we run on (x86-64, arm64). */
#define BLOCK_ACCT_ALIGN 64

typedef struct BlockAcctSlot {
    _Alignas(BLOCK_ACCT_ALIGN) BlockAcctStats stats;
} BlockAcctSlot;

struct BlockAcct {
    unsigned nslots;
    atomic_uint attached;        /* queues with a slot of ours (set_acct) */
    _Alignas(BLOCK_ACCT_ALIGN) BlockAcctSlot slots[];
};

G_STATIC_ASSERT(sizeof(BlockAcctSlot) % BLOCK_ACCT_ALIGN == 0);

BlockAcct *block_acct_new(unsigned nslots)
{
    size_t size;
    BlockAcct *acct;

    g_assert(nslots >= 1);
    size = sizeof(BlockAcct) + (size_t)nslots * sizeof(BlockAcctSlot);
    /* aligned_alloc wants a multiple of the alignment. */
    size = (size + BLOCK_ACCT_ALIGN - 1) & ~(size_t)(BLOCK_ACCT_ALIGN - 1);
    acct = aligned_alloc(BLOCK_ACCT_ALIGN, size);
    if (!acct) {
        g_error("cannot allocate %zu bytes for block accounting", size);
    }
    memset(acct, 0, size);
    acct->nslots = nslots;
    return acct;
}

void block_acct_free(BlockAcct *acct)
{
    if (!acct) {
        return;
    }
    /* Our invariant: a queue still attached would write freed memory. */
    g_assert(atomic_load(&acct->attached) == 0);
    free(acct);
}

/*
 * Attach q (the top queue of a chain) to a slot, or detach it.  attached
 * only checks our own invariant in block_acct_free(); the caller orders
 * the detach before the free (block_queue_free() returns after
 * aio_run_sync(), or the caller runs both in one thread).
 */
void block_queue_set_acct(BlockQueue *q, BlockAcct *acct, unsigned slot)
{
    g_assert(aio_context_in_home_thread(q->ctx));
    if (q->acct_owner) {
        atomic_fetch_sub(&q->acct_owner->attached, 1);
    }
    if (acct) {
        g_assert(slot < acct->nslots);
        atomic_fetch_add(&acct->attached, 1);
        q->acct = &acct->slots[slot].stats;
    } else {
        q->acct = NULL;
    }
    q->acct_owner = acct;
}

void block_queue_acct_detach(BlockQueue *q)
{
    if (q->acct_owner) {
        block_queue_set_acct(q, NULL, 0);
    }
}

__thread BlockAcctBatch block_acct_batch;

/*
 * "Now" for accounting: the event loop's reading when the running callback
 * is the first of its turn (aio_dispatch_time_ns(): free), else the clock.
 * With polling at queue depth 1, the request is found and submitted by the
 * first callback of one turn and its completion reaped by the first of a
 * later one, so neither end costs a clock read of its own.
 */
static inline int64_t block_acct_clock(void)
{
    int64_t t = aio_dispatch_time_ns();

    return t ? t : clock_now_ns();
}

/* The time for a completion: the batch's, or the clock's outside one. */
static int64_t block_acct_completion_now(void)
{
    if (block_acct_batch.depth == 0) {
        return block_acct_clock();
    }
    if (block_acct_batch.now_ns == 0) {
        block_acct_batch.now_ns = block_acct_clock();
    }
    return block_acct_batch.now_ns;
}

int64_t block_queue_acct_now(BlockQueue *q)
{
    if (q->plugged == 0) {
        return block_acct_clock();
    }
    if (q->acct_plug_ns == 0) {
        q->acct_plug_ns = block_acct_clock();
    }
    return q->acct_plug_ns;
}

/* The writer's update: one thread only, so no read-modify-write atomic. */
static inline void block_acct_bump(uint64_t *counter, uint64_t n)
{
    __atomic_store_n(counter, *counter + n, __ATOMIC_RELAXED);
}

void block_acct_done(BlockAcctStats *stats, const BlockRequest *req,
                     int ret, int64_t start_ns)
{
    BlockAcctOpStats *s;
    int64_t elapsed;

    if ((unsigned)req->op >= BLOCK_OP__MAX) {
        return;                  /* refused at submission, not an op */
    }
    s = &stats->op[req->op];
    if (ret == 0) {
        block_acct_bump(&s->ops, 1);
        if (req->op != BLOCK_OP_FLUSH) {
            block_acct_bump(&s->bytes, req->bytes);
        }
    } else {
        block_acct_bump(&s->failed, 1);
    }
    elapsed = block_acct_completion_now() - start_ns;
    block_acct_bump(&s->total_time_ns, elapsed > 0 ? elapsed : 0);
}

void block_acct_get(const BlockAcct *acct, BlockAcctStats *out)
{
    memset(out, 0, sizeof(*out));
    for (unsigned i = 0; i < acct->nslots; i++) {
        const BlockAcctStats *in = &acct->slots[i].stats;

        for (unsigned op = 0; op < BLOCK_OP__MAX; op++) {
            const BlockAcctOpStats *a = &in->op[op];
            BlockAcctOpStats *b = &out->op[op];

            /* Relaxed: pairs with the writer's relaxed stores; each
             * counter is read whole, nothing else is ordered by it. */
            b->ops += __atomic_load_n(&a->ops, __ATOMIC_RELAXED);
            b->bytes += __atomic_load_n(&a->bytes, __ATOMIC_RELAXED);
            b->failed += __atomic_load_n(&a->failed, __ATOMIC_RELAXED);
            b->total_time_ns += __atomic_load_n(&a->total_time_ns,
                                                __ATOMIC_RELAXED);
        }
    }
}

void block_acct_stats_add(BlockAcctStats *out, const BlockAcctStats *in)
{
    for (unsigned op = 0; op < BLOCK_OP__MAX; op++) {
        out->op[op].ops += in->op[op].ops;
        out->op[op].bytes += in->op[op].bytes;
        out->op[op].failed += in->op[op].failed;
        out->op[op].total_time_ns += in->op[op].total_time_ns;
    }
}

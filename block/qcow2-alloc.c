/*
 * qcow2: allocating writes that the request's IOThread runs itself.
 *
 * Theory of operation.  The common allocating write, a guest write into
 * clusters that have no host cluster yet and read as zeros around the
 * guest's bytes, needs no copy-on-write, and when the tables it touches
 * are cached no metadata I/O either: the guest's data must reach the new
 * clusters before the L2 entries point at them, and that is all.
 * qcow2_alloc_start() runs such a write in the request's IOThread as a
 * state machine of two steps, with no worker thread and no wait for the
 * lock:
 *   1. at submission, with s->lock tried (never waited for): the write's
 *      guest clusters all lie in one L2 table that is cached and
 *      writable (COPIED), none is busy, none has a host cluster, and
 *      those the write covers only in part read as zeros (so nothing
 *      needs copying: a new cluster reads as zeros, qcow2_reserve());
 *      the refcount blocks for the new clusters are cached.  Then the
 *      guest clusters are marked busy (s->allocating), contiguous new
 *      host clusters at the end of the image are counted in the cached
 *      refcount blocks (dirty), and the guest's buffers go to the file
 *      node at the new clusters, through the request's own context;
 *   2. on that write's completion, in the same IOThread, with the lock
 *      tried again and the L2 table still cached: the entries point at
 *      the new clusters (dirty in the cache), the clusters are not busy
 *      any more, and the request completes.
 * Where step 2 cannot take the lock or the table has left the cache, the
 * finisher (s->finisher, a pool of one thread) does it, waiting for the
 * lock and loading the table.  It is not the worker pool: every worker
 * may be waiting on s->alloc_cond for the very clusters step 2 frees.
 * Everything else (a table or refcount block not cached, copy-on-write,
 * an old cluster to replace, a busy cluster, a FUA write) goes to the
 * workers as before (qcow2-cluster.c).
 *
 * Why this keeps the image and the guest's view right:
 *   - until step 2 the entries are unchanged, so a read of the clusters
 *     meanwhile sees what they showed before (zeros, or backing data
 *     under a cluster the write covers whole);
 *   - another write, a write-zeroes or a discard of a busy cluster goes
 *     to a worker (step 1 finds it busy, or the worker path does), which
 *     waits on s->alloc_cond until step 2 is done and then finds the
 *     cluster allocated: one allocation per cluster;
 *   - the refcounts are dirty in the cache before the L2 entries that
 *     use them, and a dirty L2 table is written back only after a
 *     barrier that writes the dirty refcount blocks (qcow2-cache.c): the
 *     order on storage is that of the worker path;
 *   - a failed data write leaves the entries as they were; the counted
 *     clusters leak (qemu-img check -r leaks tidies them);
 *   - a FLUSH covers the writes completed before it was submitted, which
 *     set their entries (dirty) before completing, so it finds the cache
 *     dirty and writes it back (qcow2.c);
 *   - close and inactivation follow a drain, which waits for the guest's
 *     request and therefore for step 2, in the IOThread or the finisher;
 *   - several IOThreads on one node: all of the above is under s->lock,
 *     and each request's data goes through the queues of its own context.
 */
#include <errno.h>
#include <stdatomic.h>
#include "qcow2.h"
#include "util/bswap.h"

/* An allocating write between its two steps. */
typedef struct Qcow2Alloc {
    BlockRequest sub;            /* the guest's data to the new clusters */
    BlockRequest *req;
    Qcow2State *s;
    AioContext *ctx;             /* the request's: its completion goes there */
    Qcow2Io io;                  /* the finisher's I/O, in that context */
    uint64_t start;              /* the guest offset of the first cluster */
    uint64_t host;               /* the host offset of its new cluster */
    uint64_t n;                  /* clusters, contiguous on both sides */
    int ret;
} Qcow2Alloc;

/* The cached L2 table of guest offset off if it may be changed in place
 * (COPIED), else NULL; *l2off is where it is.  No I/O. */
static uint8_t *qcow2_alloc_table(Qcow2State *s, uint64_t off,
                                  uint64_t *l2off)
{
    uint64_t l1i = qcow2_l1_index(s, off);
    uint64_t e;

    if (l1i >= s->l1_size) {
        return NULL;
    }
    e = s->l1[l1i];
    *l2off = e & QCOW2_OFFSET_MASK;
    if (!(e & QCOW2_COPIED) || !qcow2_host_offset_valid(s, *l2off)) {
        return NULL;
    }
    return qcow2_cache_peek(&s->l2_cache, *l2off);
}

/* Whether req, over the n guest clusters from start, may take step 1. */
static bool qcow2_alloc_fits(Qcow2State *s, BlockRequest *req,
                             uint64_t start, uint64_t n)
{
    uint64_t cs = s->cluster_size, end = req->offset + req->bytes;
    uint64_t l2i = qcow2_l2_index(s, start), l2off;
    uint8_t *table;

    if (n * cs > QCOW2_MAX_RUN_BYTES || l2i + n > (1ull << s->l2_bits)) {
        return false;
    }
    table = qcow2_alloc_table(s, start, &l2off);
    if (!table) {
        return false;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint64_t off = start + i * cs, e = ld_be64(table + 8 * (l2i + i));
        bool whole = off >= (uint64_t)req->offset && off + cs <= end;

        /* No old cluster to give up, nothing to copy into the new one. */
        if ((e & (QCOW2_COMPRESSED | QCOW2_OFFSET_MASK)) ||
            qcow2_is_allocating(s, off >> s->cluster_bits) ||
            (!whole && !qcow2_entry_reads_zero(s, e))) {
            return false;
        }
    }
    return true;
}

/*
 * Step 2 from the cache: point the entries at the new clusters (unless
 * the data write failed) and end the clusters' busy state.  false, with
 * nothing changed, if the L2 table is not cached any more.  s->lock held.
 */
static bool qcow2_alloc_map_cached(Qcow2Alloc *a)
{
    Qcow2State *s = a->s;
    uint64_t cs = s->cluster_size, l2i, l2off;
    uint8_t *table = NULL;

    if (a->ret == 0) {
        table = qcow2_alloc_table(s, a->start, &l2off);
        if (!table) {
            return false;
        }
        l2i = qcow2_l2_index(s, a->start);
        for (uint64_t i = 0; i < a->n; i++) {
            st_be64(table + 8 * (l2i + i), (a->host + i * cs) | QCOW2_COPIED);
        }
        qcow2_cache_mark_dirty(&s->l2_cache, l2off);
    }
    for (uint64_t i = 0; i < a->n; i++) {
        qcow2_cluster_unbusy(s, a->start + i * cs);
    }
    return true;
}

/* The request completes (a BH of its queue), a is done with. */
static void qcow2_alloc_done(void *opaque)
{
    Qcow2Alloc *a = opaque;

    block_request_complete_later(a->req, a->ret);
    g_free(a);
}

void qcow2_alloc_finish(gpointer data, gpointer user_data)
{
    Qcow2Alloc *a = data;
    Qcow2State *s = a->s;
    uint64_t cs = s->cluster_size;

    g_mutex_lock(&s->lock);
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->ret == 0) {
            /* On an error half way, the clusters not mapped leak. */
            a->ret = qcow2_set_entry(s, &a->io, a->start + i * cs,
                                     (a->host + i * cs) | QCOW2_COPIED);
        }
        qcow2_cluster_unbusy(s, a->start + i * cs);
    }
    g_mutex_unlock(&s->lock);
    aio_bh_schedule_oneshot(a->ctx, qcow2_alloc_done, a);
}

/* Step 2: the data write's completion, in the request's IOThread. */
static void qcow2_alloc_written(BlockRequest *sub, int ret)
{
    Qcow2Alloc *a = sub->opaque;
    Qcow2State *s = a->s;

    a->ret = ret;
    if (g_mutex_trylock(&s->lock)) {
        bool done = qcow2_alloc_map_cached(a);

        g_mutex_unlock(&s->lock);
        if (done) {
            qcow2_alloc_done(a);
            return;
        }
    }
    g_thread_pool_push(s->finisher, a, NULL);
}

bool qcow2_alloc_start(Qcow2State *s, BlockQueue *q, BlockQueue *backing,
                       BlockRequest *req)
{
    uint64_t cs = s->cluster_size, start = req->offset & ~(cs - 1);
    uint64_t n = (req->offset + req->bytes - start + cs - 1) / cs;
    uint64_t host;
    Qcow2Alloc *a;

    /* A FUA write's new entries must reach storage before it completes:
     * a worker's job (qcow2_co_rw()); an empty write allocates nothing. */
    if (req->op != BLOCK_OP_WRITE || (req->flags & BLOCK_REQ_FUA) ||
        req->bytes == 0 || !g_mutex_trylock(&s->lock)) {
        return false;
    }
    if (!qcow2_alloc_fits(s, req, start, n) ||
        qcow2_rc_alloc_cached(s, n, &host) < 0) {
        g_mutex_unlock(&s->lock);
        return false;
    }
    for (uint64_t i = 0; i < n; i++) {
        qcow2_cluster_mark_busy(s, start + i * cs);
    }
    /* Written under s->lock only: a plain store, no locked add (readers
     * in other threads load it relaxed). */
    atomic_store_explicit(&s->iothread_allocs,
                          atomic_load_explicit(&s->iothread_allocs,
                                               memory_order_relaxed) + 1,
                          memory_order_relaxed);
    g_mutex_unlock(&s->lock);

    a = g_new(Qcow2Alloc, 1);
    *a = (Qcow2Alloc) {
        .sub = {
            .op = BLOCK_OP_WRITE, .offset = host + (req->offset - start),
            .bytes = req->bytes, .iov = req->iov, .niov = req->niov,
            .cb = qcow2_alloc_written,
        },
        .req = req, .s = s, .ctx = q->ctx,
        .io = { .file = q->child, .backing = backing },
        .start = start, .host = host, .n = n,
    };
    a->sub.opaque = a;
    block_queue_submit(q->child, &a->sub);
    return true;
}

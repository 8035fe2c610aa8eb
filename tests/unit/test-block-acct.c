/*
 * Unit tests for block accounting (BlockAcct, block_queue_set_acct()).
 *
 * Theory of operation: requests go through BlockQueues made in the test's
 * own AioContext (its home thread is the test's thread) or, for the
 * two-thread test, in IOThreads.  Each test knows exactly which requests
 * it sent, and how they end (null-co succeeds, blkdebug fails chosen ones,
 * the generic checks fail others at submission), so it compares
 * block_acct_get() with the expected counts field by field.  Times are
 * checked against a null-aio latency: a request cannot have taken less
 * than that.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <glib.h>

#include "block/block.h"
#include "util/aio.h"
#include "util/clock.h"
#include "util/iothread.h"
#include "block-test-helpers.h"
#include "test-helpers.h"

/* One request through q, drained; its result. */
static int run_q(BlockQueue *q, BlockOp op, int64_t offset, void *buf,
                 int64_t bytes)
{
    TReq r;

    treq_init(&r, op, offset, buf, bytes);
    block_queue_submit(q, &r.req);
    block_queue_drain(q);
    g_assert_true(r.done);
    return r.ret;
}

static void assert_op(const BlockAcctStats *st, BlockOp op, uint64_t ops,
                      uint64_t bytes, uint64_t failed)
{
    const BlockAcctOpStats *s = &st->op[op];

    if (s->ops != ops || s->bytes != bytes || s->failed != failed) {
        g_error("op %d: ops %" PRIu64 " bytes %" PRIu64 " failed %" PRIu64
                ", expected %" PRIu64 " / %" PRIu64 " / %" PRIu64, op,
                s->ops, s->bytes, s->failed, ops, bytes, failed);
    }
}

static void assert_all_zero(const BlockAcct *acct)
{
    BlockAcctStats st, zero;

    memset(&zero, 0, sizeof(zero));
    block_acct_get(acct, &st);
    g_assert_true(memcmp(&st, &zero, sizeof(st)) == 0);
}

/*
 * What most tests count on: a context, a node opened from opts in it and
 * a BlockAcct of slots slots.  acct_env_close() frees all three.
 */
typedef struct AcctEnv {
    AioContext *ctx;
    BlockNode *bs;
    BlockAcct *acct;
} AcctEnv;

static AcctEnv acct_env_open(const char *opts, unsigned slots)
{
    AcctEnv e = { .ctx = ctx_new() };

    e.bs = open_ok(opts, e.ctx);
    e.acct = block_acct_new(slots);
    return e;
}

static void acct_env_close(AcctEnv *e)
{
    block_acct_free(e->acct);
    block_node_unref(e->bs);
    aio_context_unref(e->ctx);
}

/* ------------------------------------------------------------------------ */
/* Counting                                                                  */

/*
 * Every op, through three queues on three slots (several requests each), on
 * a null-aio node with a latency: ops and bytes summed over the slots,
 * FLUSH without bytes, the time at least the latency per request.
 */
#define LAT_NS (200 * 1000)

static void test_ops_and_time(void)
{
    AcctEnv e = acct_env_open("driver=null-aio,size=64M,discard=unmap,"
                              "latency-ns=200000", 3);
    BlockQueue *q[3];
    g_autofree char *buf = g_malloc0(64 * KiB);
    BlockAcctStats st;
    uint64_t n_total = 0;

    for (int i = 0; i < 3; i++) {
        q[i] = block_queue_new(e.bs, e.ctx, NULL);
        block_queue_set_acct(q[i], e.acct, i);
    }
    assert_all_zero(e.acct);
    /* Queue i sends i + 1 of each op; sizes differ per queue. */
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k <= i; k++) {
            int64_t len = (i + 1) * 4 * KiB;

            g_assert_cmpint(run_q(q[i], BLOCK_OP_READ, 0, buf, len), ==, 0);
            g_assert_cmpint(run_q(q[i], BLOCK_OP_WRITE, MiB, buf, len), ==, 0);
            g_assert_cmpint(run_q(q[i], BLOCK_OP_FLUSH, 0, NULL, 0), ==, 0);
            g_assert_cmpint(run_q(q[i], BLOCK_OP_DISCARD, 2 * MiB, NULL,
                                  len), ==, 0);
            g_assert_cmpint(run_q(q[i], BLOCK_OP_WRITE_ZEROES, 3 * MiB,
                                  NULL, len), ==, 0);
            n_total++;
        }
    }
    block_acct_get(e.acct, &st);
    /* ops: 1 + 2 + 3 = 6; bytes: 4k*1*1 + 4k*2*2 + 4k*3*3 = 56k */
    g_assert_cmpuint(n_total, ==, 6);
    assert_op(&st, BLOCK_OP_READ, 6, 56 * KiB, 0);
    assert_op(&st, BLOCK_OP_WRITE, 6, 56 * KiB, 0);
    assert_op(&st, BLOCK_OP_FLUSH, 6, 0, 0);
    assert_op(&st, BLOCK_OP_DISCARD, 6, 56 * KiB, 0);
    assert_op(&st, BLOCK_OP_WRITE_ZEROES, 6, 56 * KiB, 0);
    for (int op = 0; op < BLOCK_OP__MAX; op++) {
        g_assert_cmpuint(st.op[op].total_time_ns, >=, 6 * (uint64_t)LAT_NS);
        /* And not absurdly more (a loose bound: 6 requests, 10 s). */
        g_assert_cmpuint(st.op[op].total_time_ns, <, 10 * NS_PER_SEC);
    }

    for (int i = 0; i < 3; i++) {
        block_queue_free(q[i]);
    }
    /* The counts outlive the queues. */
    block_acct_get(e.acct, &st);
    assert_op(&st, BLOCK_OP_READ, 6, 56 * KiB, 0);
    acct_env_close(&e);
}

/*
 * Failures: from the device (blkdebug), and at submission (past the end,
 * a write to a read-only node, a malformed iovec).  Each counts as failed,
 * with its time, and not in ops or bytes.
 */
static void test_failed(void)
{
    AcctEnv e = acct_env_open("driver=blkdebug,image.driver=null-co,"
                              "image.size=1M,inject-error.0.op=write,"
                              "inject-error.0.sector=0,"
                              "inject-error.0.errno=28", 2);
    BlockNode *ro = open_ok("driver=null-co,size=1M,read-only=on", e.ctx);
    BlockQueue *q = block_queue_new(e.bs, e.ctx, NULL);
    BlockQueue *qro = block_queue_new(ro, e.ctx, NULL);
    g_autofree char *buf = g_malloc0(8 * KiB);
    BlockAcctStats st;
    TReq bad;

    block_queue_set_acct(q, e.acct, 0);
    block_queue_set_acct(qro, e.acct, 1);

    g_assert_cmpint(run_q(q, BLOCK_OP_WRITE, 0, buf, 4 * KiB), ==, -ENOSPC);
    g_assert_cmpint(run_q(q, BLOCK_OP_WRITE, 8 * KiB, buf, 4 * KiB), ==, 0);
    g_assert_cmpint(run_q(q, BLOCK_OP_READ, MiB - 4 * KiB, buf, 8 * KiB), ==,
                    -EINVAL);                             /* past the end */
    g_assert_cmpint(run_q(q, BLOCK_OP_READ, 0, buf, 8 * KiB), ==, 0);
    g_assert_cmpint(run_q(qro, BLOCK_OP_WRITE, 0, buf, 4 * KiB), ==, -EPERM);
    g_assert_cmpint(run_q(qro, BLOCK_OP_DISCARD, 0, NULL, 4 * KiB), ==,
                    -EPERM);
    /* bytes that do not match the iovec */
    treq_init(&bad, BLOCK_OP_READ, 0, buf, 4 * KiB);
    bad.req.bytes = 8 * KiB;
    block_queue_submit(q, &bad.req);
    block_queue_drain(q);
    g_assert_cmpint(bad.ret, ==, -EINVAL);

    block_acct_get(e.acct, &st);
    assert_op(&st, BLOCK_OP_WRITE, 1, 4 * KiB, 2);
    assert_op(&st, BLOCK_OP_READ, 1, 8 * KiB, 2);
    assert_op(&st, BLOCK_OP_DISCARD, 0, 0, 1);
    assert_op(&st, BLOCK_OP_FLUSH, 0, 0, 0);
    g_assert_cmpuint(st.op[BLOCK_OP_WRITE].total_time_ns, >, 0);

    block_queue_free(q);
    block_queue_free(qro);
    block_node_unref(ro);
    acct_env_close(&e);
}

/*
 * What is not counted: a queue without a BlockAcct, the node's own
 * (default) queue, a queue after set_acct(NULL), and a request submitted
 * before its queue got one.  A request through a filter counts once, and a
 * misaligned write (read, then write, below) once, with its own bytes.
 */
static void test_not_counted(void)
{
    AcctEnv e = acct_env_open("driver=blkdebug,align=4096,image.driver=raw,"
                              "image.file.driver=null-co,"
                              "image.file.size=1M", 1);
    BlockQueue *counted = block_queue_new(e.bs, e.ctx, NULL);
    BlockQueue *plain = block_queue_new(e.bs, e.ctx, NULL);
    g_autofree char *buf = g_malloc0(8 * KiB);
    BlockAcctStats st;
    TReq early;

    /* Submitted before the queue counts: not counted when it completes. */
    treq_init(&early, BLOCK_OP_READ, 0, buf, 4 * KiB);
    block_queue_submit(counted, &early.req);
    block_queue_set_acct(counted, e.acct, 0);
    block_queue_drain(counted);
    g_assert_true(early.done);
    assert_all_zero(e.acct);

    g_assert_cmpint(run_q(plain, BLOCK_OP_READ, 0, buf, 4 * KiB), ==, 0);
    g_assert_cmpint(run_q(plain, BLOCK_OP_WRITE, 0, buf, 4 * KiB), ==, 0);
    assert_all_zero(e.acct);

    /* Through two filters and a misaligned write: once each. */
    g_assert_cmpint(run_q(counted, BLOCK_OP_READ, 0, buf, 4 * KiB), ==, 0);
    g_assert_cmpint(run_q(counted, BLOCK_OP_WRITE, 512, buf, 1000), ==, 0);
    block_acct_get(e.acct, &st);
    assert_op(&st, BLOCK_OP_READ, 1, 4 * KiB, 0);
    assert_op(&st, BLOCK_OP_WRITE, 1, 1000, 0);

    /* Stop counting. */
    block_queue_set_acct(counted, NULL, 0);
    g_assert_cmpint(run_q(counted, BLOCK_OP_READ, 0, buf, 4 * KiB), ==, 0);
    block_acct_get(e.acct, &st);
    assert_op(&st, BLOCK_OP_READ, 1, 4 * KiB, 0);

    /* A zero-length read succeeds at submission and counts, 0 bytes. */
    block_queue_set_acct(counted, e.acct, 0);
    g_assert_cmpint(run_q(counted, BLOCK_OP_READ, 0, buf, 0), ==, 0);
    block_acct_get(e.acct, &st);
    assert_op(&st, BLOCK_OP_READ, 2, 4 * KiB, 0);

    block_queue_free(counted);     /* detaches it: the free below is legal */
    block_queue_free(plain);
    block_acct_free(NULL);
    acct_env_close(&e);
}

/*
 * The clock is read once per batch (a plugged section, a completion
 * batch): a batch must never reuse an older batch's time, and a nested
 * event loop inside a completion gets its own.
 */
#define GAP_NS (30 * NS_PER_MS)

static void test_batch_clock_fresh(void)
{
    AcctEnv e = acct_env_open("driver=null-co,size=1M", 1);
    BlockQueue *q = block_queue_new(e.bs, e.ctx, NULL);
    g_autofree char *buf = g_malloc0(4 * KiB);
    BlockAcctStats st;

    block_queue_set_acct(q, e.acct, 0);
    for (int i = 0; i < 3; i++) {
        /* Plugged like a device's batch; the completion comes from the
         * driver's BH batch.  A gap between the rounds: if a batch reused
         * an older time, a request would seem to take GAP_NS. */
        block_queue_io_plug(q);
        for (int k = 0; k < 4; k++) {
            TReq r;

            treq_init(&r, BLOCK_OP_READ, k * 4 * KiB, buf, 4 * KiB);
            block_queue_submit(q, &r.req);
            if (k == 3) {
                block_queue_io_unplug(q);
            }
            block_queue_drain(q);
            g_assert_cmpint(r.ret, ==, 0);
            if (k < 3) {
                sleep_ns(GAP_NS / 30);
            }
        }
        sleep_ns(GAP_NS);
    }
    block_acct_get(e.acct, &st);
    assert_op(&st, BLOCK_OP_READ, 12, 48 * KiB, 0);
    /* Within a plugged section the first submission's time counts: the
     * k-th request of a round is counted from it, k short sleeps ago (in
     * all, 3 rounds x (0 + 1 + 2 + 3) of them); had a round reused the
     * previous round's time, each of its 4 requests would count more
     * than GAP_NS. */
    g_assert_cmpuint(st.op[BLOCK_OP_READ].total_time_ns, >=,
                     3 * (uint64_t)(GAP_NS / 30) * (1 + 2 + 3));
    g_assert_cmpuint(st.op[BLOCK_OP_READ].total_time_ns, <,
                     3 * (uint64_t)GAP_NS);

    block_queue_free(q);
    acct_env_close(&e);
}

typedef struct NestReq {
    TReq outer;                  /* a READ */
    TReq inner;                  /* a WRITE */
    BlockQueue *q;
    char *buf;
    int64_t pause_ns;
} NestReq;

/* The outer request's callback, inside the driver's completion batch:
 * pause, submit another request and wait for it in a nested event loop. */
static void nest_outer_cb(BlockRequest *req, int ret)
{
    NestReq *n = (NestReq *)((char *)req - offsetof(NestReq, outer.req));

    treq_cb(req, ret);
    sleep_ns(n->pause_ns);
    treq_init(&n->inner, BLOCK_OP_WRITE, 0, n->buf, 512);
    block_queue_submit(n->q, &n->inner.req);
    block_queue_drain(n->q);
    g_assert_true(n->inner.done);
}

static void nest_run(const char *opts, int64_t pause_ns, BlockAcctStats *st)
{
    AcctEnv e = acct_env_open(opts, 1);
    g_autofree char *buf = g_malloc0(512);
    NestReq n = {
        .q = block_queue_new(e.bs, e.ctx, NULL), .buf = buf,
        .pause_ns = pause_ns,
    };

    block_queue_set_acct(n.q, e.acct, 0);
    treq_init(&n.outer, BLOCK_OP_READ, 0, buf, 512);
    n.outer.req.cb = nest_outer_cb;
    block_queue_submit(n.q, &n.outer.req);
    block_queue_drain(n.q);
    g_assert_true(n.outer.done && n.inner.done);
    block_acct_get(e.acct, st);
    assert_op(st, BLOCK_OP_READ, 1, 512, 0);
    assert_op(st, BLOCK_OP_WRITE, 1, 512, 0);

    block_queue_free(n.q);
    acct_env_close(&e);
}

#define NEST_LAT_NS (20 * NS_PER_MS)

static void test_batch_clock_nested(void)
{
    BlockAcctStats st;

    /*
     * Completions from a BH batch: the outer batch read the clock for the
     * outer request, then the callback paused; the inner request, stamped
     * after the pause, must get a time of its own from the nested batch
     * (with the outer batch's, it would end before it began: 0).
     */
    nest_run("driver=null-co,size=1M", 5 * NS_PER_MS, &st);
    g_assert_cmpuint(st.op[BLOCK_OP_WRITE].total_time_ns, >, 0);
    g_assert_cmpuint(st.op[BLOCK_OP_WRITE].total_time_ns, <,
                     5 * NS_PER_MS);

    /* From timer batches: each request took the latency. */
    nest_run("driver=null-aio,size=1M,latency-ns=20000000", 0, &st);
    g_assert_cmpuint(st.op[BLOCK_OP_READ].total_time_ns, >=, NEST_LAT_NS);
    g_assert_cmpuint(st.op[BLOCK_OP_WRITE].total_time_ns, >=, NEST_LAT_NS);
}

static void test_stats_add(void)
{
    BlockAcctStats a, b;

    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    for (int op = 0; op < BLOCK_OP__MAX; op++) {
        a.op[op] = (BlockAcctOpStats) { 1 + op, 100 + op, 7, 1000 };
        b.op[op] = (BlockAcctOpStats) { 10, 20, 30 + op, 40 };
    }
    block_acct_stats_add(&a, &b);
    for (int op = 0; op < BLOCK_OP__MAX; op++) {
        g_assert_cmpuint(a.op[op].ops, ==, 11 + op);
        g_assert_cmpuint(a.op[op].bytes, ==, 120 + op);
        g_assert_cmpuint(a.op[op].failed, ==, 37 + op);
        g_assert_cmpuint(a.op[op].total_time_ns, ==, 1040);
        g_assert_cmpuint(b.op[op].ops, ==, 10);
    }
}

/* ------------------------------------------------------------------------ */
/* Two IOThreads                                                             */

#define MT_ROUNDS 2000
#define MT_QD     16

typedef struct MtWorker {
    BlockNode *bs;
    BlockAcct *acct;
    AioContext *ctx;
    unsigned slot;
    unsigned completed;
} MtWorker;

static void mt_work(void *opaque)
{
    MtWorker *w = opaque;
    BlockQueue *q = block_queue_new(w->bs, w->ctx, NULL);
    TReq reqs[MT_QD];
    char buf[512];

    block_queue_set_acct(q, w->acct, w->slot);
    for (int round = 0; round < MT_ROUNDS; round++) {
        for (int i = 0; i < MT_QD; i++) {
            /* slot 0 reads, slot 1 writes; one in 8 goes past the end */
            BlockOp op = w->slot ? BLOCK_OP_WRITE : BLOCK_OP_READ;
            int64_t off = (i % 8 == 7) ? MiB : i * 512;

            treq_init(&reqs[i], op, off, buf, 512);
            block_queue_submit(q, &reqs[i].req);
        }
        block_queue_drain(q);
        for (int i = 0; i < MT_QD; i++) {
            g_assert_true(reqs[i].done);
            w->completed++;
        }
    }
    block_queue_free(q);
}

static void test_two_iothreads(void)
{
    IOThread *iot[2] = { iot_new("acct-a", NULL), iot_new("acct-b", NULL) };
    BlockNode *bs = open_ok("driver=null-co,size=1M",
                            iothread_get_aio_context(iot[0]));
    BlockAcct *acct = block_acct_new(2);
    MtWorker w[2];
    GThread *t[2];
    BlockAcctStats st, prev;
    const uint64_t per = (uint64_t)MT_ROUNDS * MT_QD;

    memset(&prev, 0, sizeof(prev));
    for (unsigned i = 0; i < 2; i++) {
        w[i] = (MtWorker) {
            .bs = bs, .acct = acct, .slot = i,
            .ctx = iothread_get_aio_context(iot[i]),
        };
        t[i] = ctx_job_start(w[i].ctx, mt_work, &w[i]);
    }
    /* Meanwhile: readers see every counter only grow. */
    for (int k = 0; k < 2000; k++) {
        block_acct_get(acct, &st);
        for (int op = 0; op < BLOCK_OP__MAX; op++) {
            g_assert_cmpuint(st.op[op].ops, >=, prev.op[op].ops);
            g_assert_cmpuint(st.op[op].bytes, >=, prev.op[op].bytes);
            g_assert_cmpuint(st.op[op].failed, >=, prev.op[op].failed);
            g_assert_cmpuint(st.op[op].total_time_ns, >=,
                             prev.op[op].total_time_ns);
        }
        prev = st;
    }
    for (unsigned i = 0; i < 2; i++) {
        g_thread_join(t[i]);
        g_assert_cmpuint(w[i].completed, ==, per);
    }
    block_acct_get(acct, &st);
    assert_op(&st, BLOCK_OP_READ, per - per / 8, (per - per / 8) * 512,
              per / 8);
    assert_op(&st, BLOCK_OP_WRITE, per - per / 8, (per - per / 8) * 512,
              per / 8);
    block_acct_free(acct);
    block_node_unref(bs);
    iothread_destroy(iot[0]);
    iothread_destroy(iot[1]);
}

static const TestCase tests[] = {
    { "/block-acct/ops-and-time", test_ops_and_time },
    { "/block-acct/failed", test_failed },
    { "/block-acct/not-counted", test_not_counted },
    { "/block-acct/batch-clock-fresh", test_batch_clock_fresh },
    { "/block-acct/batch-clock-nested", test_batch_clock_nested },
    { "/block-acct/stats-add", test_stats_add },
    { "/block-acct/two-iothreads", test_two_iothreads },
};

/* Below the 60 s meson timeout, so that the watchdog reports first. */
TEST_MAIN(tests, 50)

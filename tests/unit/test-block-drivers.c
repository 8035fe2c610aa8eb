/*
 * Unit tests for the null-co/null-aio, raw and blkdebug block drivers.
 *
 * Theory of operation: everything goes through the public block API
 * (block_node_open_str, block_node_submit, block_node_drain,
 * block_node_unref).  Each test owns an AioContext whose home thread is
 * the test's thread, so submitting, draining and the drivers' per-context
 * hooks all run here; one test moves a node into an IOThread and submits
 * there through aio_run_sync().  A TReq wraps a BlockRequest and records
 * when and in which order it completed, so the tests can check that
 * completion never happens inside submit, that latency is honoured and
 * that order is kept.  Option errors are checked by the option name the
 * message must contain.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "block/block.h"
#include "util/aio.h"
#include "util/clock.h"
#include "util/iothread.h"
#include "block-test-helpers.h"
#include "test-helpers.h"

#define container_of(ptr, type, member) \
    ((type *)((char *)(ptr) - offsetof(type, member)))

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */

/* A read or write of a scratch buffer; for the ops without data, no buffer. */
static int run_op_scratch(BlockNode *bs, BlockOp op, int64_t offset,
                          int64_t bytes)
{
    g_autofree char *buf = NULL;

    if (op == BLOCK_OP_READ || op == BLOCK_OP_WRITE) {
        buf = g_malloc0(bytes);
    }
    if (op == BLOCK_OP_FLUSH) {
        offset = bytes = 0;
    }
    return run_op(bs, op, offset, buf, bytes);
}

/* ------------------------------------------------------------------------ */
/* null-co / null-aio                                                        */

static const char *const null_drivers[] = { "null-co", "null-aio" };

static void test_null_async(void)
{
    static const BlockOp ops[] = {
        BLOCK_OP_READ, BLOCK_OP_WRITE, BLOCK_OP_FLUSH, BLOCK_OP_DISCARD,
        BLOCK_OP_WRITE_ZEROES,
    };
    AioContext *ctx = ctx_new();

    for (size_t d = 0; d < G_N_ELEMENTS(null_drivers); d++) {
        for (int latency = 0; latency <= 1; latency++) {
            g_autofree char *str = g_strdup_printf(
                "driver=%s,discard=unmap,latency-ns=%d", null_drivers[d],
                latency ? 1000000 : 0);
            BlockNode *bs = open_ok(str, ctx);

            g_assert_cmpstr(block_node_get_driver_name(bs), ==,
                            null_drivers[d]);
            for (size_t i = 0; i < G_N_ELEMENTS(ops); i++) {
                g_assert_cmpint(run_op_scratch(bs, ops[i], 4 * KiB, 4 * KiB),
                                ==, 0);
            }
            block_node_unref(bs);
        }
    }
    aio_context_unref(ctx);
}

static void test_null_read_zeroes(void)
{
    AioContext *ctx = ctx_new();

    for (size_t d = 0; d < G_N_ELEMENTS(null_drivers); d++) {
        for (int zeroes = 0; zeroes <= 1; zeroes++) {
            g_autofree char *str = g_strdup_printf(
                "driver=%s,read-zeroes=%s", null_drivers[d],
                zeroes ? "on" : "off");
            BlockNode *bs = open_ok(str, ctx);
            char a[4096], b[512];
            struct iovec iov[2] = {
                { .iov_base = a, .iov_len = sizeof(a) },
                { .iov_base = b, .iov_len = sizeof(b) },
            };
            TReq r;

            memset(a, 0xa5, sizeof(a));
            memset(b, 0x5a, sizeof(b));
            treq_init(&r, BLOCK_OP_READ, 0, NULL, 0);
            r.req.iov = iov;
            r.req.niov = 2;
            r.req.bytes = sizeof(a) + sizeof(b);
            g_assert_cmpint(treq_run(bs, &r), ==, 0);
            for (size_t i = 0; i < sizeof(a); i++) {
                g_assert_cmpint((unsigned char)a[i], ==, zeroes ? 0 : 0xa5);
            }
            for (size_t i = 0; i < sizeof(b); i++) {
                g_assert_cmpint((unsigned char)b[i], ==, zeroes ? 0 : 0x5a);
            }
            block_node_unref(bs);
        }
    }
    aio_context_unref(ctx);
}

/* Requests submitted together complete in submission order. */
static void test_null_order(void)
{
    enum { N = 16 };
    AioContext *ctx = ctx_new();

    for (int latency = 0; latency <= 1; latency++) {
        BlockNode *bs = open_ok(latency ? "driver=null-co,latency-ns=100000"
                                        : "driver=null-co", ctx);
        TReq r[N];
        char buf[N][512];
        unsigned first;

        for (int i = 0; i < N; i++) {
            if (i % 2) {
                treq_init(&r[i], BLOCK_OP_READ, i * 512, buf[i], 512);
            } else {
                treq_init(&r[i], BLOCK_OP_FLUSH, 0, NULL, 0);
            }
            treq_submit(bs, &r[i]);
        }
        g_assert_cmpuint(block_node_in_flight(bs), ==, N);
        block_node_drain(bs);
        first = r[0].seq;
        for (int i = 0; i < N; i++) {
            g_assert_true(r[i].done);
            g_assert_cmpint(r[i].ret, ==, 0);
            g_assert_cmpuint(r[i].seq, ==, first + i);
        }
        block_node_unref(bs);
    }
    aio_context_unref(ctx);
}

static void test_null_latency(void)
{
    const int64_t latency = 20 * NS_PER_MS;
    AioContext *ctx = ctx_new();
    BlockNode *bs = open_ok("driver=null-co,latency-ns=20000000", ctx);
    TReq r[4];
    char buf[512];

    /* Two at once, then two more 5 ms later: each waits its own latency. */
    for (int i = 0; i < 4; i++) {
        treq_init(&r[i], BLOCK_OP_READ, 0, buf, sizeof(buf));
        if (i == 2) {
            sleep_ns(5 * NS_PER_MS);
        }
        treq_submit(bs, &r[i]);
    }
    /* A turn of the loop right away completes nothing. */
    aio_poll(ctx, false);
    for (int i = 0; i < 4; i++) {
        g_assert_false(r[i].done);
    }
    block_node_drain(bs);
    for (int i = 0; i < 4; i++) {
        int64_t took = r[i].done_ns - r[i].submit_ns;

        g_assert_true(r[i].done);
        g_assert_cmpint(r[i].ret, ==, 0);
        g_assert_cmpint(took, >=, latency);
        g_assert_cmpint(took, <, latency + 5 * NS_PER_SEC);
        if (i > 0) {
            g_assert_cmpuint(r[i].seq, ==, r[i - 1].seq + 1);
        }
    }
    block_node_unref(bs);
    aio_context_unref(ctx);
}

/*
 * A callback that submits again is not served in a loop inside one turn: a
 * turn runs the BHs scheduled before it twice at most (aio_poll() runs
 * once more what its BHs and timers scheduled), so a chain of resubmits
 * completes at most two per turn.
 */
typedef struct Chain {
    TReq r;
    BlockNode *bs;
    int left;
    int completions;
} Chain;

static void chain_cb(BlockRequest *req, int ret)
{
    Chain *c = container_of(req, Chain, r.req);

    g_assert_cmpint(ret, ==, 0);
    c->completions++;
    if (c->left > 0) {
        c->left--;
        block_node_submit(c->bs, req);
    }
}

static void test_null_resubmit_from_callback(void)
{
    enum { N = 10 };
    AioContext *ctx = ctx_new();
    BlockNode *bs = open_ok("driver=null-co", ctx);
    Chain c = { .bs = bs, .left = N };
    int turns = 0;

    treq_init(&c.r, BLOCK_OP_FLUSH, 0, NULL, 0);
    c.r.req.cb = chain_cb;
    block_node_submit(bs, &c.r.req);
    g_assert_cmpint(c.completions, ==, 0);
    while (block_node_in_flight(bs) > 0) {
        int before = c.completions;

        aio_poll(ctx, true);
        g_assert_cmpint(c.completions - before, <=, 2);
        turns++;
    }
    g_assert_cmpint(c.completions, ==, N + 1);
    g_assert_cmpint(turns, >=, (N + 1) / 2);
    block_node_unref(bs);
    aio_context_unref(ctx);
}

/* A callback that drains (a nested loop) sees the rest complete. */
static void test_null_drain_in_callback(void)
{
    AioContext *ctx = ctx_new();

    for (int latency = 0; latency <= 1; latency++) {
        BlockNode *bs = open_ok(latency ? "driver=null-co,latency-ns=1000000"
                                        : "driver=null-co", ctx);
        TReq r[3];

        /* Flushes: they reach the driver without a buffer. */
        for (int i = 0; i < 3; i++) {
            treq_init(&r[i], BLOCK_OP_FLUSH, 0, NULL, 0);
            treq_submit(bs, &r[i]);
        }
        r[0].drain_in_cb = bs;
        block_node_drain(bs);
        for (int i = 0; i < 3; i++) {
            g_assert_true(r[i].done);
            g_assert_cmpint(r[i].ret, ==, 0);
        }
        g_assert_cmpuint(r[1].seq, ==, r[0].seq + 1);
        g_assert_cmpuint(r[2].seq, ==, r[1].seq + 1);
        block_node_unref(bs);
    }
    aio_context_unref(ctx);
}

static void test_null_size(void)
{
    AioContext *ctx = ctx_new();
    BlockNode *bs = open_ok("driver=null-co", ctx);

    g_assert_cmpint(block_node_get_length(bs), ==, 1024 * MiB);
    block_node_unref(bs);

    bs = open_ok("driver=null-aio,size=1M", ctx);
    g_assert_cmpint(block_node_get_length(bs), ==, MiB);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, MiB - 512, 512), ==, 0);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, MiB, 512), ==, -EINVAL);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, MiB - 512, 1024), ==,
                    -EINVAL);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE, MiB, 1), ==, -EINVAL);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE_ZEROES, MiB - 1, 2), ==,
                    -EINVAL);
    block_node_unref(bs);

    bs = open_ok("{\"driver\": \"null-co\", \"size\": 4096}", ctx);
    g_assert_cmpint(block_node_get_length(bs), ==, 4096);
    block_node_unref(bs);

    bs = open_ok("driver=null-co,size=0", ctx);
    g_assert_cmpint(block_node_get_length(bs), ==, 0);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 0, 1), ==, -EINVAL);
    block_node_unref(bs);
    aio_context_unref(ctx);
}

static void test_null_bad_options(void)
{
    AioContext *ctx = ctx_new();

    open_fails("driver=null-co,size=abc", ctx, "'size'");
    open_fails("driver=null-co,size=-1", ctx, "'size'");
    open_fails("driver=null-co,read-zeroes=maybe", ctx, "'read-zeroes'");
    open_fails("driver=null-co,latency-ns=-1", ctx, "'latency-ns'");
    open_fails("driver=null-aio,latency-ns=soon", ctx, "'latency-ns'");
    open_fails("{\"driver\": \"null-co\", \"latency-ns\": true}", ctx,
               "'latency-ns'");
    open_fails("driver=null-co,bogus=1", ctx, "'bogus'");
    open_fails("driver=null-aio,read-zeroes=on,sizee=1M", ctx, "'sizee'");
    aio_context_unref(ctx);
}

/* Move a node between two contexts of this thread, then into an IOThread. */
typedef struct IotBatch {
    BlockNode *bs;
    int ret[4];
    bool done_before_drain;
} IotBatch;

static void iot_batch_cb(void *opaque)
{
    IotBatch *b = opaque;
    TReq r[4];

    for (int i = 0; i < 4; i++) {
        treq_init(&r[i], BLOCK_OP_FLUSH, 0, NULL, 0);
        treq_submit(b->bs, &r[i]);
    }
    block_node_drain(b->bs);
    for (int i = 0; i < 4; i++) {
        g_assert_true(r[i].done);
        b->ret[i] = r[i].ret;
    }
}

static void test_null_move_context(void)
{
    AioContext *ctx1 = ctx_new(), *ctx2 = ctx_new();
    IOThread *iot = iot_new("block-drivers-iot", NULL);
    AioContext *ictx = iothread_get_aio_context(iot);

    for (int latency = 0; latency <= 1; latency++) {
        BlockNode *bs = open_ok(latency ? "driver=null-co,latency-ns=100000"
                                        : "driver=null-co", ctx1);
        Error *err = NULL;
        IotBatch b = { .bs = bs };

        g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_FLUSH, 0, 0), ==, 0);
        g_assert_true(block_node_set_aio_context(bs, ctx2, &err));
        g_assert_true(block_node_get_aio_context(bs) == ctx2);
        g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE, 0, 512), ==, 0);

        g_assert_true(block_node_set_aio_context(bs, ictx, &err));
        aio_run_sync(ictx, iot_batch_cb, &b);
        for (int i = 0; i < 4; i++) {
            g_assert_cmpint(b.ret[i], ==, 0);
        }
        g_assert_true(block_node_set_aio_context(bs, ctx1, &err));
        g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 0, 512), ==, 0);
        block_node_unref(bs);
    }

    /* Opened straight into the IOThread and closed from there. */
    {
        BlockNode *bs = open_ok("driver=null-aio,latency-ns=10000", ictx);
        IotBatch b = { .bs = bs };

        aio_run_sync(ictx, iot_batch_cb, &b);
        for (int i = 0; i < 4; i++) {
            g_assert_cmpint(b.ret[i], ==, 0);
        }
        block_node_unref(bs);
    }

    iothread_destroy(iot);
    aio_context_unref(ctx1);
    aio_context_unref(ctx2);
}

/* ------------------------------------------------------------------------ */
/* raw                                                                       */

static void test_raw_window(void)
{
    AioContext *ctx = ctx_new();
    BlockNode *bs;
    BlockLimits lim;

    bs = open_ok("driver=raw,file.driver=null-co,file.size=1M,"
                 "offset=64k,size=128k", ctx);
    g_assert_cmpstr(block_node_get_driver_name(bs), ==, "raw");
    g_assert_cmpint(block_node_get_length(bs), ==, 128 * KiB);
    block_node_get_limits(bs, &lim);
    g_assert_cmpuint(lim.request_alignment, ==, 1);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 128 * KiB - 512, 512),
                    ==, 0);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 128 * KiB, 512), ==,
                    -EINVAL);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE, 128 * KiB - 1, 2), ==,
                    -EINVAL);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_FLUSH, 0, 0), ==, 0);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE_ZEROES, 0, 128 * KiB),
                    ==, 0);
    block_node_unref(bs);

    /* Default size: the rest of the child. */
    bs = open_ok("driver=raw,file.driver=null-co,file.size=1M,offset=64k",
                 ctx);
    g_assert_cmpint(block_node_get_length(bs), ==, MiB - 64 * KiB);
    block_node_unref(bs);

    /* Neither: the whole child; offset at the very end: an empty window. */
    bs = open_ok("driver=raw,file.driver=null-co,file.size=1M", ctx);
    g_assert_cmpint(block_node_get_length(bs), ==, MiB);
    block_node_unref(bs);
    bs = open_ok("driver=raw,file.driver=null-co,file.size=1M,offset=1M",
                 ctx);
    g_assert_cmpint(block_node_get_length(bs), ==, 0);
    block_node_unref(bs);

    /* JSON, child by node-name. */
    {
        BlockNode *child = open_ok("driver=null-co,node-name=rawchild,size=1M",
                                   ctx);

        bs = open_ok("{\"driver\": \"raw\", \"file\": \"rawchild\", "
                     "\"offset\": 4096, \"size\": \"8k\"}", ctx);
        g_assert_cmpint(block_node_get_length(bs), ==, 8 * KiB);
        g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 0, 8 * KiB), ==, 0);
        block_node_unref(child);        /* raw still holds it */
        g_assert_nonnull(block_node_find("rawchild"));
        g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE, 0, 512), ==, 0);
        block_node_unref(bs);
        g_assert_null(block_node_find("rawchild"));
    }
    aio_context_unref(ctx);
}

/*
 * Offset translation without storage: blkdebug under raw fails requests
 * that reach sector 8 (bytes 4096..4607) of the child, so with offset=4k
 * they are those at raw offset 0..511.
 */
static void test_raw_offset_translation(void)
{
    AioContext *ctx = ctx_new();
    BlockNode *bs = open_ok(
        "driver=raw,offset=4k,file.driver=blkdebug,file.image.driver=null-co,"
        "file.image.size=1M,file.inject-error.0.sector=8,"
        "file.inject-error.0.errno=28", ctx);

    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 0, 512), ==, -ENOSPC);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE, 511, 1), ==, -ENOSPC);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE_ZEROES, 0, 4096), ==,
                    -ENOSPC);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 512, 512), ==, 0);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 4096, 512), ==, 0);
    /* A flush has no range: the sector rule does not apply. */
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_FLUSH, 0, 0), ==, 0);
    block_node_unref(bs);
    aio_context_unref(ctx);
}

/* Write through raw, read the file node and the file itself at offset+X. */
/*
 * Through raw (a window at off of the file behind fd): a write of
 * wbuf[0..len) at x lands at off + x in the file, reads back the same
 * through raw, and leaves the file at x itself untouched (zeroes).
 */
static void check_raw_window(BlockNode *raw, int fd, int64_t off, int64_t x,
                             char *wbuf, int64_t len)
{
    g_autofree char *rbuf = g_malloc0(len);

    g_assert_cmpint(run_op(raw, BLOCK_OP_WRITE, x, wbuf, len), ==, 0);
    g_assert_cmpint(pread(fd, rbuf, len, off + x), ==, len);
    g_assert_true(memcmp(rbuf, wbuf, len) == 0);
    memset(rbuf, 0, len);
    g_assert_cmpint(run_op(raw, BLOCK_OP_READ, x, rbuf, len), ==, 0);
    g_assert_true(memcmp(rbuf, wbuf, len) == 0);
    /* Nothing landed at x itself (outside the window's translation). */
    g_assert_cmpint(pread(fd, rbuf, len, x), ==, len);
    for (int64_t i = 0; i < len; i++) {
        g_assert_cmpint(rbuf[i], ==, 0);
    }
}

/* The nodes and the temporary file of a raw test; the context too. */
static void raw_test_end(AioContext *ctx, BlockNode *raw, BlockNode *file,
                         int fd, const char *path)
{
    if (raw) {
        block_node_unref(raw);
    }
    if (file) {
        block_node_unref(file);
    }
    close(fd);
    g_unlink(path);
    aio_context_unref(ctx);
}

/* Write through raw, read the file node and the file itself at offset+X. */
static void test_raw_over_file(void)
{
    const int64_t off = 64 * KiB, x = 12 * KiB, len = 8 * KiB;
    AioContext *ctx = ctx_new();
    g_autofree char *path = NULL;
    g_autofree char *fstr = NULL;
    g_autofree char *wbuf = g_malloc(len);
    g_autofree char *rbuf = g_malloc0(len);
    BlockNode *file, *raw;
    int fd = tmp_image_open(MiB, &path);

    fstr = g_strdup_printf("driver=file,node-name=rawfile,filename=%s", path);
    file = open_ok(fstr, ctx);
    raw = open_ok("driver=raw,file=rawfile,offset=64k,size=256k", ctx);

    for (int64_t i = 0; i < len; i++) {
        wbuf[i] = (char)(i * 7 + 3);
    }
    check_raw_window(raw, fd, off, x, wbuf, len);
    g_assert_cmpint(run_op_scratch(raw, BLOCK_OP_FLUSH, 0, 0), ==, 0);
    g_assert_cmpint(run_op(file, BLOCK_OP_READ, off + x, rbuf, len), ==, 0);
    g_assert_true(memcmp(rbuf, wbuf, len) == 0);
    raw_test_end(ctx, raw, file, fd, path);
}

/*
 * A MiB temporary file (*fd, *path: the caller closes and unlinks them) and
 * an O_DIRECT file node named node_name over it; NULL, with the test
 * skipped, if the file system of $TMPDIR refuses O_DIRECT.
 */
static BlockNode *open_direct_tmp_file(AioContext *ctx, const char *node_name,
                                       int *fd, char **path)
{
    g_autofree char *fstr = NULL;
    Error *err = NULL;
    BlockNode *file;

    *fd = tmp_image_open(MiB, path);
    fstr = g_strdup_printf("driver=file,node-name=%s,cache.direct=on,"
                           "filename=%s", node_name, *path);
    file = block_node_open_str(fstr, ctx, &err);
    if (!file) {
        g_autofree char *why = g_strdup_printf(
            "no O_DIRECT file node in $TMPDIR: %s", err->message);

        error_free(err);
        g_test_skip(why);
    }
    return file;
}

/* An offset that is not a multiple of the child's request alignment. */
static void test_raw_offset_alignment(void)
{
    AioContext *ctx = ctx_new();
    g_autofree char *path = NULL;
    g_autofree char *fstr = NULL;
    BlockNode *file, *raw;
    BlockLimits lim;
    int fd;

    file = open_direct_tmp_file(ctx, "alignfile", &fd, &path);
    if (!file) {
        raw_test_end(ctx, NULL, NULL, fd, path);
        return;
    }
    block_node_get_limits(file, &lim);
    if (lim.request_alignment <= 1) {
        g_test_skip("the O_DIRECT file node reports no request alignment");
        raw_test_end(ctx, NULL, file, fd, path);
        return;
    }

    fstr = g_strdup_printf("driver=raw,file=alignfile,offset=%u",
                           lim.request_alignment / 2);
    open_fails(fstr, ctx, "'offset'");
    g_free(fstr);
    fstr = g_strdup_printf("driver=raw,file=alignfile,offset=%u",
                           lim.request_alignment);
    raw = open_ok(fstr, ctx);
    block_node_get_limits(raw, &lim);
    g_assert_cmpuint(lim.request_alignment, >, 1);   /* copied */
    g_assert_cmpint(block_node_get_length(raw), ==,
                    MiB - lim.request_alignment);
    raw_test_end(ctx, raw, file, fd, path);
}

/*
 * Misaligned requests on a raw node over an O_DIRECT file: the generic
 * layer bounces them on the raw node (raw copies the file's alignment),
 * then raw translates the aligned request.  The data must land at
 * offset + x in the file and read back the same through raw.
 */
static void test_raw_unaligned_over_direct_file(void)
{
    AioContext *ctx = ctx_new();
    g_autofree char *path = NULL;
    g_autofree char *fstr = NULL;
    BlockNode *file, *raw;
    BlockLimits lim;
    char wbuf[300];
    const int64_t x = 100, len = sizeof(wbuf);
    int64_t off;
    int fd;

    file = open_direct_tmp_file(ctx, "unalignedfile", &fd, &path);
    if (!file) {
        raw_test_end(ctx, NULL, NULL, fd, path);
        return;
    }
    block_node_get_limits(file, &lim);
    off = MAX(lim.request_alignment, 4096);
    fstr = g_strdup_printf("driver=raw,file=unalignedfile,offset=%" PRId64,
                           off);
    raw = open_ok(fstr, ctx);

    for (int i = 0; i < len; i++) {
        wbuf[i] = (char)(i + 1);
    }
    check_raw_window(raw, fd, off, x, wbuf, len);
    raw_test_end(ctx, raw, file, fd, path);
}

static void test_raw_errors(void)
{
    AioContext *ctx = ctx_new();
    BlockNode *bs;

    open_fails("driver=raw,file.driver=null-co,file.size=1M,offset=2M", ctx,
               "'offset'");
    open_fails("driver=raw,file.driver=null-co,file.size=1M,offset=1048577",
               ctx, "'offset'");
    open_fails("driver=raw,file.driver=null-co,file.size=1M,offset=512k,"
               "size=768k", ctx, "'size'");
    open_fails("driver=raw,file.driver=null-co,file.size=1M,size=2M", ctx,
               "'size'");
    open_fails("driver=raw,file.driver=null-co,offset=abc", ctx, "'offset'");
    open_fails("driver=raw,file.driver=null-co,size=-5", ctx, "'size'");
    open_fails("driver=raw", ctx, "'file'");
    open_fails("driver=raw,file=nosuchnode", ctx, "nosuchnode");
    open_fails("driver=raw,file.driver=null-co,bogus=1", ctx, "'bogus'");
    open_fails("driver=raw,file.driver=null-co,file.bogus=1", ctx,
               "'file.bogus'");
    /* A failed open leaves no node behind, the inline child included. */
    open_fails("driver=raw,file.driver=null-co,file.node-name=leak,"
               "offset=2G", ctx, "'offset'");
    g_assert_null(block_node_find("leak"));

    /* Writable over a read-only child: refused; read-only over it: fine. */
    open_fails("driver=raw,file.driver=null-co,file.read-only=on", ctx,
               "read-only");
    bs = open_ok("driver=raw,read-only=on,file.driver=null-co,"
                 "file.read-only=on", ctx);
    g_assert_true(block_node_is_read_only(bs));
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 0, 512), ==, 0);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE, 0, 512), ==, -EPERM);
    block_node_unref(bs);

    /* Read-only over a writable child is fine too. */
    bs = open_ok("driver=raw,read-only=on,file.driver=null-co", ctx);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE_ZEROES, 0, 512), ==,
                    -EPERM);
    block_node_unref(bs);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* blkdebug                                                                  */

#define BLKDEBUG_NULL "driver=blkdebug,discard=unmap,image.driver=null-co," \
                      "image.size=1M"

static void test_blkdebug_range(void)
{
    AioContext *ctx = ctx_new();
    BlockNode *bs = open_ok(BLKDEBUG_NULL ",inject-error.0.op=read,"
                            "inject-error.0.errno=28,inject-error.0.sector=8,"
                            "inject-error.0.sectors=2", ctx);

    g_assert_cmpstr(block_node_get_driver_name(bs), ==, "blkdebug");
    g_assert_cmpint(block_node_get_length(bs), ==, MiB);
    /* [4096, 5120) fails, every time. */
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 4096, 512), ==, -ENOSPC);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 4096, 512), ==, -ENOSPC);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 4608, 512), ==, -ENOSPC);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 5119, 1), ==, -ENOSPC);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 3584, 1024), ==,
                    -ENOSPC);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 0, 64 * KiB), ==,
                    -ENOSPC);
    /* Outside the range. */
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 5120, 512), ==, 0);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 3584, 512), ==, 0);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 4095, 1), ==, 0);
    /* Other operations on the range. */
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE, 4096, 512), ==, 0);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE_ZEROES, 4096, 512), ==,
                    0);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_DISCARD, 4096, 512), ==, 0);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_FLUSH, 0, 0), ==, 0);
    block_node_unref(bs);
    aio_context_unref(ctx);
}

static void test_blkdebug_once(void)
{
    AioContext *ctx = ctx_new();
    BlockNode *bs;

    /* once=on: the first matching request only; default errno EIO. */
    bs = open_ok(BLKDEBUG_NULL ",inject-error.0.op=write,"
                 "inject-error.0.once=on", ctx);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 0, 512), ==, 0);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE, 8192, 512), ==, -EIO);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE, 8192, 512), ==, 0);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE, 0, 512), ==, 0);
    block_node_unref(bs);

    /* once=off (the default): every time. */
    bs = open_ok(BLKDEBUG_NULL ",inject-error.0.op=write", ctx);
    for (int i = 0; i < 3; i++) {
        g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE, i * 512, 512), ==,
                        -EIO);
    }
    block_node_unref(bs);

    /* Submitted together: only the first of them fails. */
    bs = open_ok(BLKDEBUG_NULL ",inject-error.0.op=read,inject-error.0.once=on,"
                 "inject-error.0.errno=61", ctx);
    {
        TReq r[3];
        char buf[3][512];

        for (int i = 0; i < 3; i++) {
            treq_init(&r[i], BLOCK_OP_READ, 0, buf[i], 512);
            treq_submit(bs, &r[i]);
        }
        block_node_drain(bs);
        g_assert_cmpint(r[0].ret, ==, -ENODATA);
        g_assert_cmpint(r[1].ret, ==, 0);
        g_assert_cmpint(r[2].ret, ==, 0);
    }
    block_node_unref(bs);
    aio_context_unref(ctx);
}

static void test_blkdebug_ops(void)
{
    static const struct {
        const char *name;
        BlockOp op;
    } ops[] = {
        { "read", BLOCK_OP_READ },
        { "write", BLOCK_OP_WRITE },
        { "flush", BLOCK_OP_FLUSH },
        { "discard", BLOCK_OP_DISCARD },
        { "write-zeroes", BLOCK_OP_WRITE_ZEROES },
    };
    AioContext *ctx = ctx_new();

    for (size_t i = 0; i < G_N_ELEMENTS(ops); i++) {
        g_autofree char *str = g_strdup_printf(
            BLKDEBUG_NULL ",inject-error.0.op=%s,inject-error.0.errno=%zu",
            ops[i].name, 100 + i);
        BlockNode *bs = open_ok(str, ctx);

        for (size_t j = 0; j < G_N_ELEMENTS(ops); j++) {
            int expect = i == j ? -(int)(100 + i) : 0;

            g_assert_cmpint(run_op_scratch(bs, ops[j].op, 4096, 4096), ==,
                            expect);
        }
        block_node_unref(bs);
    }

    /* op=any (the default) without a range: everything fails. */
    {
        BlockNode *bs = open_ok(BLKDEBUG_NULL ",inject-error.0.errno=7", ctx);

        for (size_t j = 0; j < G_N_ELEMENTS(ops); j++) {
            g_assert_cmpint(run_op_scratch(bs, ops[j].op, 0, 512), ==, -7);
        }
        block_node_unref(bs);
    }

    /* The first matching rule wins; a fired once rule lets the next one. */
    {
        BlockNode *bs = open_ok(BLKDEBUG_NULL ",inject-error.0.sector=0,"
                                "inject-error.0.errno=28,"
                                "inject-error.0.once=on,"
                                "inject-error.1.op=read,"
                                "inject-error.1.errno=5", ctx);

        g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 0, 512), ==,
                        -ENOSPC);
        g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 0, 512), ==, -EIO);
        g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 8192, 512), ==,
                        -EIO);
        g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE, 0, 512), ==, 0);
        block_node_unref(bs);
    }
    aio_context_unref(ctx);
}

static void test_blkdebug_json(void)
{
    AioContext *ctx = ctx_new();
    BlockNode *bs = open_ok(
        "{\"driver\": \"blkdebug\", "
        " \"image\": {\"driver\": \"null-co\", \"size\": 1048576}, "
        " \"inject-error\": ["
        "   {\"op\": \"write\", \"errno\": 28, \"sector\": 8, \"once\": true},"
        "   {\"op\": \"read\", \"errno\": \"61\", \"sector\": 16, "
        "    \"sectors\": 8}"
        " ]}", ctx);

    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE, 4096, 512), ==,
                    -ENOSPC);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE, 4096, 512), ==, 0);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 4096, 512), ==, 0);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 8192, 512), ==,
                    -ENODATA);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 12287, 1), ==,
                    -ENODATA);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 12288, 512), ==, 0);
    block_node_unref(bs);

    /* An empty list: no rules. */
    bs = open_ok("{\"driver\": \"blkdebug\", \"image\": {\"driver\": "
                 "\"null-co\"}, \"inject-error\": []}", ctx);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE, 0, 512), ==, 0);
    block_node_unref(bs);
    aio_context_unref(ctx);
}

/*
 * An injected error never reaches the child.  The child is itself a
 * blkdebug node with a once rule, a tripwire: it fires on the first read
 * that gets through, so the second read (the first to pass the outer
 * once rule) must be the one to see it.
 */
static void test_blkdebug_not_forwarded(void)
{
    AioContext *ctx = ctx_new();
    BlockNode *bs = open_ok(
        "driver=blkdebug,inject-error.0.op=read,inject-error.0.errno=28,"
        "inject-error.0.once=on,image.driver=blkdebug,"
        "image.inject-error.0.op=read,image.inject-error.0.errno=61,"
        "image.inject-error.0.once=on,image.image.driver=null-co", ctx);

    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 0, 512), ==, -ENOSPC);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 0, 512), ==, -ENODATA);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 0, 512), ==, 0);
    block_node_unref(bs);
    aio_context_unref(ctx);
}

static void test_blkdebug_errors(void)
{
    AioContext *ctx = ctx_new();

    open_fails(BLKDEBUG_NULL ",inject-error.0.errno=0", ctx,
               "'inject-error.0.errno'");
    open_fails(BLKDEBUG_NULL ",inject-error.0.errno=4096", ctx,
               "'inject-error.0.errno'");
    open_fails(BLKDEBUG_NULL ",inject-error.0.errno=eio", ctx,
               "'inject-error.0.errno'");
    open_fails(BLKDEBUG_NULL ",inject-error.0.op=readd", ctx,
               "'inject-error.0.op'");
    open_fails(BLKDEBUG_NULL ",inject-error.0.sector=-1", ctx,
               "'inject-error.0.sector'");
    open_fails(BLKDEBUG_NULL ",inject-error.0.sector=1,"
               "inject-error.0.sectors=0", ctx, "'inject-error.0.sectors'");
    open_fails(BLKDEBUG_NULL ",inject-error.0.sectors=4", ctx,
               "'inject-error.0.sectors'");
    open_fails(BLKDEBUG_NULL ",inject-error.0.once=maybe", ctx,
               "'inject-error.0.once'");
    open_fails(BLKDEBUG_NULL ",inject-error.0.errno=5,inject-error.0.bogus=1",
               ctx, "'inject-error.0.bogus'");
    open_fails(BLKDEBUG_NULL ",inject-error.0.errno=5,"
               "inject-error.1.errno=5,inject-error.1.sectr=3",
               ctx, "'inject-error.1.sectr'");
    open_fails(BLKDEBUG_NULL ",inject-error.1.errno=5", ctx,
               "'inject-error'");
    open_fails(BLKDEBUG_NULL ",inject-error=5", ctx, "'inject-error'");
    open_fails(BLKDEBUG_NULL ",bogus=1", ctx, "'bogus'");
    open_fails("driver=blkdebug", ctx, "'image'");
    open_fails("driver=blkdebug,image.driver=null-co,image.read-only=on", ctx,
               "read-only");
    open_fails("{\"driver\": \"blkdebug\", \"image\": {\"driver\": "
               "\"null-co\"}, \"inject-error\": [{\"errno\": \"x\"}]}", ctx,
               "'inject-error.0.errno'");
    open_fails("{\"driver\": \"blkdebug\", \"image\": {\"driver\": "
               "\"null-co\"}, \"inject-error\": [{\"op\": \"read\"}, 5]}",
               ctx, "inject-error.1");
    aio_context_unref(ctx);
}

/*
 * inject-delay: a delayed write over a file waits its delay while later
 * requests complete, then reaches the file unchanged; two rules with
 * different delays complete in deadline order, not submission order.
 */
static void test_blkdebug_delay_order(void)
{
    const int64_t slow = 40 * NS_PER_MS;
    AioContext *ctx = ctx_new();
    g_autofree char *path = tmp_image(MiB);
    g_autofree char *str = g_strdup_printf(
        "driver=blkdebug,image.driver=file,image.filename=%s,"
        "inject-delay.0.op=write,inject-delay.0.sector=8,"
        "inject-delay.0.sectors=8,inject-delay.0.delay-ns=%" PRId64 ","
        "inject-delay.1.op=read,inject-delay.1.sector=64,"
        "inject-delay.1.delay-ns=%" PRId64, path, slow, slow / 4);
    BlockNode *bs = open_ok(str, ctx);
    char a[4096], b[512], c[512], back[4096];
    TReq r[4];

    memset(a, 0xa1, sizeof(a));
    memset(b, 0xb2, sizeof(b));
    /* A: slow write of sectors 8..15; B: write outside; C: slower read
     * of sector 64; D: a read that matches no rule. */
    treq_init(&r[0], BLOCK_OP_WRITE, 4096, a, sizeof(a));
    treq_init(&r[1], BLOCK_OP_WRITE, 0, b, sizeof(b));
    treq_init(&r[2], BLOCK_OP_READ, 64 * 512, c, sizeof(c));
    treq_init(&r[3], BLOCK_OP_READ, 0, c, sizeof(c));
    for (int i = 0; i < 4; i++) {
        treq_submit(bs, &r[i]);
    }
    g_assert_cmpuint(block_node_in_flight(bs), ==, 4);
    /* Nothing sleeps: a turn of the loop right away finds A waiting. */
    aio_poll(ctx, false);
    g_assert_false(r[0].done);
    block_node_drain(bs);
    for (int i = 0; i < 4; i++) {
        g_assert_true(r[i].done);
        g_assert_cmpint(r[i].ret, ==, 0);
    }
    g_assert_cmpint(r[0].done_ns - r[0].submit_ns, >=, slow);
    g_assert_cmpint(r[2].done_ns - r[2].submit_ns, >=, slow / 4);
    g_assert_cmpuint(r[1].seq, <, r[2].seq);
    g_assert_cmpuint(r[3].seq, <, r[2].seq);
    g_assert_cmpuint(r[2].seq, <, r[0].seq);

    /* A reached the file as it was. */
    g_assert_cmpint(run_op(bs, BLOCK_OP_READ, 4096, back, sizeof(back)), ==,
                    0);
    g_assert_cmpint(memcmp(back, a, sizeof(a)), ==, 0);
    block_node_unref(bs);
    g_unlink(path);
    aio_context_unref(ctx);
}

/*
 * Matching is inject-error's: once=on delays only the first match; an
 * error rule wins over a delay rule for the same request; flushes match
 * only rules without a range; requests due together keep their order.
 */
static void test_blkdebug_delay_rules(void)
{
    const int64_t delay = 20 * NS_PER_MS;
    AioContext *ctx = ctx_new();
    BlockNode *bs;
    char buf[4][512];
    TReq r[4];

    bs = open_ok(BLKDEBUG_NULL ",inject-delay.0.op=read,"
                 "inject-delay.0.once=on,inject-delay.0.delay-ns=20000000",
                 ctx);
    treq_init(&r[0], BLOCK_OP_READ, 0, buf[0], 512);
    treq_init(&r[1], BLOCK_OP_READ, 512, buf[1], 512);
    treq_init(&r[2], BLOCK_OP_FLUSH, 0, NULL, 0);
    for (int i = 0; i < 3; i++) {
        treq_submit(bs, &r[i]);
    }
    block_node_drain(bs);
    g_assert_cmpint(r[0].done_ns - r[0].submit_ns, >=, delay);
    g_assert_cmpuint(r[1].seq, <, r[0].seq);
    g_assert_cmpuint(r[2].seq, <, r[0].seq);
    block_node_unref(bs);

    bs = open_ok(BLKDEBUG_NULL ",inject-error.0.op=write,"
                 "inject-error.0.sector=0,inject-error.0.errno=28,"
                 "inject-delay.0.sector=0,inject-delay.0.sectors=4,"
                 "inject-delay.0.delay-ns=20000000", ctx);
    treq_init(&r[0], BLOCK_OP_WRITE, 0, buf[0], 512);
    treq_init(&r[1], BLOCK_OP_READ, 0, buf[1], 512);
    treq_init(&r[2], BLOCK_OP_FLUSH, 0, NULL, 0);
    treq_init(&r[3], BLOCK_OP_READ, 1024, buf[3], 512);
    for (int i = 0; i < 4; i++) {
        treq_submit(bs, &r[i]);
    }
    block_node_drain(bs);
    g_assert_cmpint(r[0].ret, ==, -ENOSPC);
    g_assert_cmpint(r[0].done_ns - r[0].submit_ns, <, delay);
    g_assert_cmpuint(r[0].seq, <, r[1].seq);
    g_assert_cmpuint(r[2].seq, <, r[1].seq);
    g_assert_cmpint(r[1].done_ns - r[1].submit_ns, >=, delay);
    /* r[1] and r[3] have the same delay: submission order. */
    g_assert_cmpuint(r[1].seq + 1, ==, r[3].seq);
    for (int i = 1; i < 4; i++) {
        g_assert_cmpint(r[i].ret, ==, 0);
    }
    block_node_unref(bs);
    aio_context_unref(ctx);
}

/* Delayed requests wait in the thread that submitted them: an IOThread. */
typedef struct DelayIot {
    BlockNode *bs;
    TReq r[2];
    char buf[2][512];
} DelayIot;

static void delay_iot_cb(void *opaque)
{
    DelayIot *d = opaque;

    treq_init(&d->r[0], BLOCK_OP_WRITE, 0, d->buf[0], 512);
    treq_init(&d->r[1], BLOCK_OP_WRITE, 4096, d->buf[1], 512);
    treq_submit(d->bs, &d->r[0]);
    treq_submit(d->bs, &d->r[1]);
    block_node_drain(d->bs);
}

static void test_blkdebug_delay_iothread(void)
{
    IOThread *iot = iot_new("blkdebug-delay-iot", NULL);
    AioContext *ictx = iothread_get_aio_context(iot);
    DelayIot d = {
        .bs = open_ok(BLKDEBUG_NULL ",inject-delay.0.sector=0,"
                      "inject-delay.0.delay-ns=10000000", ictx),
    };

    aio_run_sync(ictx, delay_iot_cb, &d);
    g_assert_cmpint(d.r[0].ret, ==, 0);
    g_assert_cmpint(d.r[1].ret, ==, 0);
    g_assert_cmpuint(d.r[1].seq, <, d.r[0].seq);
    g_assert_cmpint(d.r[0].done_ns - d.r[0].submit_ns, >=, 10 * NS_PER_MS);
    block_node_unref(d.bs);
    iothread_destroy(iot);
}

static void test_blkdebug_delay_errors(void)
{
    AioContext *ctx = ctx_new();

    open_fails(BLKDEBUG_NULL ",inject-delay.0.op=read", ctx,
               "'inject-delay.0.delay-ns' is missing");
    open_fails(BLKDEBUG_NULL ",inject-delay.0.delay-ns=0", ctx,
               "'inject-delay.0.delay-ns'");
    open_fails(BLKDEBUG_NULL ",inject-delay.0.delay-ns=-5", ctx,
               "'inject-delay.0.delay-ns'");
    open_fails(BLKDEBUG_NULL ",inject-delay.0.delay-ns=soon", ctx,
               "'inject-delay.0.delay-ns'");
    open_fails(BLKDEBUG_NULL ",inject-delay.0.delay-ns=1,"
               "inject-delay.0.sectors=4", ctx,
               "'inject-delay.0.sectors' needs 'inject-delay.0.sector'");
    open_fails(BLKDEBUG_NULL ",inject-delay.0.delay-ns=1,"
               "inject-delay.0.errno=5", ctx, "'inject-delay.0.errno'");
    open_fails(BLKDEBUG_NULL ",inject-delay.0.delay-ns=1,"
               "inject-delay.0.op=sync", ctx, "'inject-delay.0.op'");
    open_fails(BLKDEBUG_NULL ",inject-error.0.delay-ns=1", ctx,
               "'inject-error.0.delay-ns'");
    open_fails(BLKDEBUG_NULL ",inject-delay.1.delay-ns=5", ctx,
               "'inject-delay'");
    aio_context_unref(ctx);
}

/* A read-only blkdebug node over a read-only image: writes refused. */
static void test_blkdebug_read_only(void)
{
    AioContext *ctx = ctx_new();
    BlockNode *bs = open_ok("driver=blkdebug,read-only=on,"
                            "image.driver=null-co,image.read-only=on", ctx);

    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_READ, 0, 512), ==, 0);
    g_assert_cmpint(run_op_scratch(bs, BLOCK_OP_WRITE, 0, 512), ==, -EPERM);
    block_node_unref(bs);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* Read-modify-write serialisation (blkdebug align= over a file)             */

#define RMW_DISK (64 * KiB)
#define RMW_WRITES 24

/*
 * Overlapping misaligned and aligned writes submitted together on a node
 * with 4 KiB alignment, over a file served by the thread pool (so requests
 * really run concurrently).  Each misaligned write is a read-modify-write of
 * whole blocks; if two of them, or one and a plain write, interleaved, one
 * would write back blocks read before the other's data landed and undo it.
 * The result must equal the writes applied one after another in submission
 * order.
 */
static void test_rmw_serialised(void)
{
    AioContext *ctx = ctx_new();
    g_autofree char *path = NULL;
    g_autofree char *opts = NULL;
    g_autofree char *model = g_malloc0(RMW_DISK);
    g_autofree char *readback = g_malloc(RMW_DISK);
    GRand *rand = g_rand_new_with_seed(20261121);
    TReq reqs[RMW_WRITES];
    char *bufs[RMW_WRITES];
    BlockNode *bs;

    path = tmp_image(RMW_DISK);
    opts = g_strdup_printf("driver=blkdebug,align=4096,image.driver=file,"
                           "image.filename=%s,image.aio=threads", path);
    bs = open_ok(opts, ctx);

    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < RMW_WRITES; i++) {
            /* Every third write is aligned, the others straddle blocks. */
            bool aligned = i % 3 == 0;
            int64_t len = aligned ? 4 * KiB * g_rand_int_range(rand, 1, 3)
                                  : g_rand_int_range(rand, 1, 9000);
            int64_t off = aligned ?
                4 * KiB * g_rand_int_range(rand, 0, RMW_DISK / (4 * KiB) - 2) :
                g_rand_int_range(rand, 0, RMW_DISK - len);

            bufs[i] = g_malloc(len);
            memset(bufs[i], 'A' + (round * RMW_WRITES + i) % 26, len);
            memcpy(model + off, bufs[i], len);
            treq_init(&reqs[i], BLOCK_OP_WRITE, off, bufs[i], len);
            treq_submit(bs, &reqs[i]);
        }
        block_node_drain(bs);
        for (int i = 0; i < RMW_WRITES; i++) {
            g_assert_true(reqs[i].done);
            g_assert_cmpint(reqs[i].ret, ==, 0);
            g_free(bufs[i]);
        }
        g_assert_cmpint(run_op(bs, BLOCK_OP_READ, 0, readback, RMW_DISK), ==, 0);
        for (int64_t b = 0; b < RMW_DISK; b++) {
            if (readback[b] != model[b]) {
                g_error("round %d: byte %" PRId64 " is '%c', expected '%c'",
                        round, b, readback[b], model[b]);
            }
        }
    }
    block_node_unref(bs);
    g_rand_free(rand);
    g_unlink(path);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* BlockQueue: one node used from several IOThreads                          */

#define MQ_THREADS   2
#define MQ_REQS      64          /* in flight at once, per thread */
#define MQ_ROUNDS    20
#define MQ_CHUNK     4096

typedef struct MqReq {
    BlockRequest req;
    struct iovec iov;
    struct MqWorker *w;
    int ret;
    bool done;
} MqReq;

typedef struct MqWorker {
    BlockNode *bs;
    AioContext *ctx;
    unsigned index;              /* which thread: its bytes in each chunk */
    bool check_data;
    bool misaligned;             /* write 100 bytes in the middle of chunks */
    unsigned completions;
    unsigned max_in_flight;
    int errors;
} MqWorker;

static void mq_cb(BlockRequest *req, int ret)
{
    MqReq *r = container_of(req, MqReq, req);

    g_assert_false(r->done);
    /* Completions come back in the submitting thread. */
    g_assert_true(aio_context_in_home_thread(r->w->ctx));
    r->done = true;
    r->ret = ret;
    r->w->completions++;
    if (ret) {
        r->w->errors++;
    }
}

/* Where worker w writes in chunk i, and how much. */
static void mq_range(MqWorker *w, int i, int64_t *off, int64_t *len)
{
    if (w->misaligned) {
        /* Both threads in the same 4 KiB block: exercises the RMW lock. */
        *off = (int64_t)i * MQ_CHUNK + 300 + w->index * 1000;
        *len = 700;
    } else {
        *off = ((int64_t)i * MQ_THREADS + w->index) * MQ_CHUNK;
        *len = MQ_CHUNK;
    }
}

static void mq_submit_all(BlockQueue *q, MqWorker *w, MqReq *reqs,
                          char **bufs, BlockOp op)
{
    for (int i = 0; i < MQ_REQS; i++) {
        int64_t off, len;

        mq_range(w, i, &off, &len);
        memset(&reqs[i], 0, sizeof(reqs[i]));
        reqs[i].w = w;
        reqs[i].iov = (struct iovec) { .iov_base = bufs[i], .iov_len = len };
        reqs[i].req = (BlockRequest) {
            .op = op, .offset = off, .bytes = len, .iov = &reqs[i].iov,
            .niov = 1, .cb = mq_cb,
        };
        block_queue_submit(q, &reqs[i].req);
    }
    w->max_in_flight = MAX(w->max_in_flight, block_queue_in_flight(q));
    block_queue_drain(q);
    g_assert_cmpuint(block_queue_in_flight(q), ==, 0);
    for (int i = 0; i < MQ_REQS; i++) {
        g_assert_true(reqs[i].done);
    }
}

/* In the worker's IOThread: its own queue over the shared node. */
static void mq_work(void *opaque)
{
    MqWorker *w = opaque;
    BlockQueue *q = block_queue_new(w->bs, w->ctx, NULL);
    MqReq *reqs = g_new(MqReq, MQ_REQS);
    char *bufs[MQ_REQS];

    g_assert_true(block_queue_get_aio_context(q) == w->ctx);
    for (int i = 0; i < MQ_REQS; i++) {
        /* Aligned as O_DIRECT wants, or every write would be an RMW. */
        bufs[i] = g_aligned_alloc(1, MQ_CHUNK, MQ_CHUNK);
    }
    for (int round = 0; round < MQ_ROUNDS; round++) {
        char pat = 'a' + (round * MQ_THREADS + w->index) % 26;

        for (int i = 0; i < MQ_REQS; i++) {
            memset(bufs[i], pat, MQ_CHUNK);
        }
        block_queue_io_plug(q);
        mq_submit_all(q, w, reqs, bufs, BLOCK_OP_WRITE);
        block_queue_io_unplug(q);
        if (!w->check_data) {
            continue;
        }
        for (int i = 0; i < MQ_REQS; i++) {
            memset(bufs[i], 0, MQ_CHUNK);
        }
        mq_submit_all(q, w, reqs, bufs, BLOCK_OP_READ);
        for (int i = 0; i < MQ_REQS; i++) {
            int64_t off, len;

            mq_range(w, i, &off, &len);
            for (int64_t b = 0; b < len; b++) {
                if (bufs[i][b] != pat) {
                    g_error("thread %u round %d chunk %d byte %" PRId64
                            ": '%c', expected '%c'", w->index, round, i, b,
                            bufs[i][b], pat);
                }
            }
        }
    }
    for (int i = 0; i < MQ_REQS; i++) {
        g_aligned_free(bufs[i]);
    }
    g_free(reqs);
    block_queue_free(q);
}

static void mq_run(const char *opts, bool check_data, bool misaligned,
                   BlockWriteStats *stats)
{
    IOThread *iots[MQ_THREADS];
    MqWorker w[MQ_THREADS];
    GThread *threads[MQ_THREADS];
    BlockNode *bs;

    for (unsigned i = 0; i < MQ_THREADS; i++) {
        g_autofree char *id = g_strdup_printf("mq-iot%u", i);

        iots[i] = iot_new(id, NULL);
    }
    /* The node's home is the first IOThread; the main loop uses it too. */
    bs = open_ok(opts, iothread_get_aio_context(iots[0]));
    for (unsigned i = 0; i < MQ_THREADS; i++) {
        w[i] = (MqWorker) {
            .bs = bs, .ctx = iothread_get_aio_context(iots[i]), .index = i,
            .check_data = check_data, .misaligned = misaligned,
        };
    }
    for (unsigned i = 0; i < MQ_THREADS; i++) {
        threads[i] = ctx_job_start(w[i].ctx, mq_work, &w[i]);
    }
    for (unsigned i = 0; i < MQ_THREADS; i++) {
        g_thread_join(threads[i]);
        g_assert_cmpint(w[i].errors, ==, 0);
        g_assert_cmpuint(w[i].completions, ==,
                         MQ_ROUNDS * MQ_REQS * (check_data ? 2 : 1));
        g_assert_cmpuint(w[i].max_in_flight, >, 0);
    }
    /* The default queue saw none of it. */
    g_assert_cmpuint(block_node_in_flight(bs), ==, 0);
    if (stats) {
        block_node_get_write_stats(bs, stats);
    }
    block_node_unref(bs);
    for (unsigned i = 0; i < MQ_THREADS; i++) {
        iothread_destroy(iots[i]);
    }
}

static void test_queue_null(void)
{
    mq_run("driver=null-co,read-zeroes=off", false, false, NULL);
    mq_run("driver=null-aio,latency-ns=20000", false, false, NULL);
    mq_run("driver=raw,file.driver=null-co", false, false, NULL);
}

static void test_queue_file(void)
{
    const char *engines[] = { "threads", "native", "io_uring" };
    g_autofree char *path = tmp_image(MQ_REQS * MQ_THREADS * MQ_CHUNK);

    for (size_t e = 0; e < G_N_ELEMENTS(engines); e++) {
        g_autofree char *opts = NULL;
        g_autofree char *probe = g_strdup_printf(
            "driver=file,filename=%s,aio=%s,locking=off", path, engines[e]);
        Error *err = NULL;
        AioContext *ctx = ctx_new();
        BlockNode *bs = block_node_open_str(probe, ctx, &err);

        if (!bs) {               /* not built, or no kernel support */
            error_free(err);
            aio_context_unref(ctx);
            continue;
        }
        block_node_unref(bs);
        aio_context_unref(ctx);
        opts = g_strdup_printf("driver=file,filename=%s,aio=%s", path,
                               engines[e]);
        mq_run(opts, true, false, NULL);
    }
    g_unlink(path);
}

/* A node that needs 4 KiB alignment over a file served by the thread pool. */
static char *aligned_node_opts(const char *path)
{
    return g_strdup_printf("driver=blkdebug,align=4096,image.driver=file,"
                           "image.filename=%s,image.aio=threads", path);
}

/* Misaligned writes from two threads into the same blocks: RMW in both. */
static void test_queue_rmw(void)
{
    g_autofree char *path = tmp_image(MQ_REQS * MQ_CHUNK);
    g_autofree char *opts = aligned_node_opts(path);
    BlockWriteStats st;

    mq_run(opts, true, true, &st);
    /* Every write was an RMW, and every one took the lock. */
    g_assert_cmpuint(st.rmw_writes, ==, MQ_THREADS * MQ_ROUNDS * MQ_REQS);
    g_assert_cmpuint(st.locked_writes, ==, st.rmw_writes);
    g_unlink(path);
}

/*
 * Aligned writes from two threads on a node that needs alignment (the
 * production case: cache.direct=on) take no lock at all.
 */
static void test_queue_aligned_lock_free(void)
{
    g_autofree char *path = tmp_image(MQ_REQS * MQ_THREADS * MQ_CHUNK);
    g_autofree char *opts = aligned_node_opts(path);
    BlockWriteStats st;

    mq_run(opts, true, false, &st);
    g_assert_cmpuint(st.locked_writes, ==, 0);
    g_assert_cmpuint(st.rmw_writes, ==, 0);
    g_unlink(path);
}

/*
 * One thread writes four whole 4 KiB blocks at once (lock-free path), over
 * and over, with a new byte each pass, while another patches 700 bytes in
 * the middle of the same blocks, one at a time with random pauses
 * (read-modify-write), over a file served by the thread pool.  After each
 * pass the aligned thread reads its blocks back: outside the patch they
 * must hold this pass's byte, since an RMW either finished before the pass
 * began or read the pass's data.  An RMW that read a block before an
 * aligned write landed and wrote it back after would leave an older byte.
 */
#define MIX_BLOCKS  4
#define MIX_RMWS    64           /* per round */
#define MIX_ROUNDS  10
#define MIX_PATCH_OFF 300
#define MIX_PATCH_LEN 700

typedef struct MixWorker {
    BlockNode *bs;
    AioContext *ctx;
    bool aligned;
    pthread_barrier_t *barrier;
    atomic_bool *rmw_done;       /* the RMW thread finished this round */
    unsigned passes;             /* aligned: passes over the blocks */
    int errors;
} MixWorker;

static void mix_submit(BlockQueue *q, MqReq *r, MqWorker *mw, BlockOp op,
                       int64_t off, char *buf, int64_t len)
{
    *r = (MqReq) { .w = mw };
    r->iov = (struct iovec) { buf, len };
    r->req = (BlockRequest) {
        .op = op, .offset = off, .bytes = len, .iov = &r->iov, .niov = 1,
        .cb = mq_cb,
    };
    block_queue_submit(q, &r->req);
}

/* Read the blocks back: pat outside the patch; pat or patch inside. */
static void mix_check(BlockQueue *q, MqReq *reqs, MqWorker *mw, char **bufs,
                      unsigned pass, char pat, char patch)
{
    for (int i = 0; i < MIX_BLOCKS; i++) {
        memset(bufs[i], 0, MQ_CHUNK);
        mix_submit(q, &reqs[i], mw, BLOCK_OP_READ, (int64_t)i * MQ_CHUNK,
                   bufs[i], MQ_CHUNK);
    }
    block_queue_drain(q);
    for (int i = 0; i < MIX_BLOCKS; i++) {
        g_assert_cmpint(reqs[i].ret, ==, 0);
        for (int b = 0; b < MQ_CHUNK; b++) {
            bool in_patch = b >= MIX_PATCH_OFF &&
                            b < MIX_PATCH_OFF + MIX_PATCH_LEN;
            char c = bufs[i][b];

            if (c != pat && !(in_patch && c == patch)) {
                g_error("pass %u block %d byte %d: '%c', expected '%c'%s",
                        pass, i, b, c, pat,
                        in_patch ? " or the patch" : " (lost update)");
            }
        }
    }
}

static void mix_work(void *opaque)
{
    MixWorker *w = opaque;
    BlockQueue *q = block_queue_new(w->bs, w->ctx, NULL);
    MqReq reqs[MIX_BLOCKS];
    MqWorker mw = { .ctx = w->ctx };
    GRand *rand = g_rand_new_with_seed(20261121);
    char *bufs[MIX_BLOCKS];

    for (int i = 0; i < MIX_BLOCKS; i++) {
        /* Aligned as O_DIRECT wants, or every write would be an RMW. */
        bufs[i] = g_aligned_alloc(1, MQ_CHUNK, MQ_CHUNK);
    }
    for (int round = 0; round < MIX_ROUNDS; round++) {
        char patch = 'A' + round % 26;

        pthread_barrier_wait(w->barrier);          /* start together */
        if (w->aligned) {
            do {
                char pat = 'a' + w->passes % 26;

                for (int i = 0; i < MIX_BLOCKS; i++) {
                    memset(bufs[i], pat, MQ_CHUNK);
                    mix_submit(q, &reqs[i], &mw, BLOCK_OP_WRITE,
                               (int64_t)i * MQ_CHUNK, bufs[i], MQ_CHUNK);
                }
                block_queue_drain(q);
                mix_check(q, reqs, &mw, bufs, w->passes, pat, patch);
                w->passes++;
            } while (!atomic_load(w->rmw_done));
        } else {
            for (int i = 0; i < MIX_RMWS; i++) {
                memset(bufs[0], patch, MIX_PATCH_LEN);
                mix_submit(q, &reqs[0], &mw, BLOCK_OP_WRITE,
                           (int64_t)(i % MIX_BLOCKS) * MQ_CHUNK +
                           MIX_PATCH_OFF, bufs[0], MIX_PATCH_LEN);
                block_queue_drain(q);
                g_assert_cmpint(reqs[0].ret, ==, 0);
                g_usleep(g_rand_int_range(rand, 0, 60));
            }
            atomic_store(w->rmw_done, true);
        }
        pthread_barrier_wait(w->barrier);          /* both done */
        if (w->aligned) {
            atomic_store(w->rmw_done, false);
        }
    }
    w->errors = mw.errors;
    for (int i = 0; i < MIX_BLOCKS; i++) {
        g_aligned_free(bufs[i]);
    }
    g_rand_free(rand);
    block_queue_free(q);
}

static void test_queue_rmw_vs_aligned(void)
{
    g_autofree char *path = tmp_image(MIX_BLOCKS * MQ_CHUNK);
    g_autofree char *opts = aligned_node_opts(path);
    pthread_barrier_t barrier;
    atomic_bool rmw_done = false;
    IOThread *iots[2];
    MixWorker w[2];
    GThread *threads[2];
    BlockWriteStats st;
    BlockNode *bs;

    pthread_barrier_init(&barrier, NULL, 2);
    iots[0] = iot_new("mix-aligned", NULL);
    iots[1] = iot_new("mix-rmw", NULL);
    bs = open_ok(opts, iothread_get_aio_context(iots[0]));
    for (int i = 0; i < 2; i++) {
        w[i] = (MixWorker) {
            .bs = bs, .ctx = iothread_get_aio_context(iots[i]),
            .aligned = i == 0, .barrier = &barrier,
            .rmw_done = &rmw_done,
        };
    }
    for (int i = 0; i < 2; i++) {
        threads[i] = ctx_job_start(w[i].ctx, mix_work, &w[i]);
    }
    for (int i = 0; i < 2; i++) {
        g_thread_join(threads[i]);
        g_assert_cmpint(w[i].errors, ==, 0);
    }
    block_node_get_write_stats(bs, &st);
    g_assert_cmpuint(st.rmw_writes, ==, MIX_ROUNDS * MIX_RMWS);
    /*
     * Aligned writes took the lock only while an RMW waited or ran: some
     * must have gone lock-free, or the race this test is about never ran.
     */
    g_assert_cmpuint(st.locked_writes, >=, st.rmw_writes);
    g_assert_cmpuint(st.locked_writes - st.rmw_writes, <,
                     (uint64_t)w[0].passes * MIX_BLOCKS);
    g_test_message("%u passes; aligned writes that took the lock: %" PRIu64
                   " of %u", w[0].passes, st.locked_writes - st.rmw_writes,
                   w[0].passes * MIX_BLOCKS);
    block_node_unref(bs);
    for (int i = 0; i < 2; i++) {
        iothread_destroy(iots[i]);
    }
    pthread_barrier_destroy(&barrier);
    g_unlink(path);
}

static const TestCase tests[] = {
    { "/block-drivers/queue/null", test_queue_null },
    { "/block-drivers/queue/file", test_queue_file },
    { "/block-drivers/queue/rmw", test_queue_rmw },
    { "/block-drivers/queue/aligned-lock-free", test_queue_aligned_lock_free },
    { "/block-drivers/queue/rmw-vs-aligned", test_queue_rmw_vs_aligned },
    { "/block-drivers/null/async", test_null_async },
    { "/block-drivers/null/read-zeroes", test_null_read_zeroes },
    { "/block-drivers/null/order", test_null_order },
    { "/block-drivers/null/latency", test_null_latency },
    { "/block-drivers/null/resubmit-from-callback",
      test_null_resubmit_from_callback },
    { "/block-drivers/null/drain-in-callback", test_null_drain_in_callback },
    { "/block-drivers/null/size", test_null_size },
    { "/block-drivers/null/bad-options", test_null_bad_options },
    { "/block-drivers/null/move-context", test_null_move_context },
    { "/block-drivers/raw/window", test_raw_window },
    { "/block-drivers/raw/offset-translation", test_raw_offset_translation },
    { "/block-drivers/raw/over-file", test_raw_over_file },
    { "/block-drivers/raw/offset-alignment", test_raw_offset_alignment },
    { "/block-drivers/raw/unaligned-over-direct-file",
      test_raw_unaligned_over_direct_file },
    { "/block-drivers/raw/errors", test_raw_errors },
    { "/block-drivers/blkdebug/range", test_blkdebug_range },
    { "/block-drivers/blkdebug/once", test_blkdebug_once },
    { "/block-drivers/blkdebug/ops", test_blkdebug_ops },
    { "/block-drivers/blkdebug/json", test_blkdebug_json },
    { "/block-drivers/blkdebug/not-forwarded", test_blkdebug_not_forwarded },
    { "/block-drivers/blkdebug/errors", test_blkdebug_errors },
    { "/block-drivers/blkdebug/read-only", test_blkdebug_read_only },
    { "/block-drivers/blkdebug/delay-order", test_blkdebug_delay_order },
    { "/block-drivers/blkdebug/delay-rules", test_blkdebug_delay_rules },
    { "/block-drivers/blkdebug/delay-iothread",
      test_blkdebug_delay_iothread },
    { "/block-drivers/blkdebug/delay-errors", test_blkdebug_delay_errors },
    { "/block-drivers/blkdebug/rmw-serialised", test_rmw_serialised },
};

/* Below the 60 s meson timeout, so that the watchdog reports first. */
TEST_MAIN(tests, 50)

/*
 * Unit tests for the block layer's node queries (cache flags, filename,
 * child, parent, the registry's order) and for block_node_resize().
 *
 * Theory of operation: everything goes through the public block API.  Each
 * test owns an AioContext whose home thread is the test's thread, so
 * submitting and draining run here; the concurrent test runs requests in
 * an IOThread while the main thread resizes.  Images are temporary files
 * (a loop device over one for the block device case, skipped when loop
 * devices are not available); each test closes every node it opened, so
 * the registry is empty between tests and block_node_list() can be
 * checked exactly.  Errors are checked by words the message must contain.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/loop.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "block/block.h"
#include "util/aio.h"
#include "util/iothread.h"
#include "block-test-helpers.h"
#include "test-helpers.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

static int64_t file_size(const char *path)
{
    struct stat st;

    g_assert_cmpint(stat(path, &st), ==, 0);
    return st.st_size;
}

static void resize_ok(BlockNode *bs, int64_t size)
{
    Error *err = NULL;

    if (!block_node_resize(bs, size, &err)) {
        g_error("resizing '%s' to %" PRId64 " failed: %s",
                block_node_get_name(bs), size, err->message);
    }
}

/* Resizing must fail, mention each of the needles, and change nothing. */
static void resize_fails(BlockNode *bs, int64_t size, const char *needle1,
                         const char *needle2)
{
    int64_t before = block_node_get_length(bs);
    Error *err = NULL;

    if (block_node_resize(bs, size, &err)) {
        g_error("resizing '%s' to %" PRId64 " succeeded, expected an error "
                "about %s", block_node_get_name(bs), size, needle1);
    }
    g_assert_nonnull(err);
    g_test_message("resize %" PRId64 " -> %s", size, err->message);
    if (!strstr(err->message, needle1) ||
        (needle2 && !strstr(err->message, needle2))) {
        g_error("error '%s' does not mention '%s' and '%s'", err->message,
                needle1, needle2 ? needle2 : "");
    }
    error_free(err);
    g_assert_cmpint(block_node_get_length(bs), ==, before);
}

/* The registry holds no node: every test leaves it empty. */
static void assert_registry_empty(void)
{
    GPtrArray *all = block_node_list();

    g_assert_cmpuint(all->len, ==, 0);
    g_ptr_array_unref(all);
}

/* ------------------------------------------------------------------------ */
/* An image and the file node on it                                          */

/*
 * A new image file of size bytes, a context and a file node on it, opened
 * from "driver=file,filename=PATH" and extra options (NULL: none).
 * img_close() drops the node, deletes the image and drops the context.
 */
typedef struct Img {
    AioContext *ctx;
    char *path;
    BlockNode *bs;
} Img;

static Img img_open(int64_t size, const char *extra)
{
    Img img = { .ctx = ctx_new(), .path = tmp_image(size) };
    g_autofree char *opts = g_strdup_printf("driver=file,filename=%s%s%s",
                                            img.path, extra ? "," : "",
                                            extra ? extra : "");

    img.bs = open_ok(opts, img.ctx);
    return img;
}

static void img_close(Img *img)
{
    block_node_unref(img->bs);
    g_unlink(img->path);
    g_free(img->path);
    aio_context_unref(img->ctx);
}

/* ------------------------------------------------------------------------ */
/* Queries                                                                   */

static void test_cache_flags(void)
{
    AioContext *ctx = ctx_new();
    BlockNode *a = open_ok("driver=null-co", ctx);
    BlockNode *b = open_ok("driver=null-co,cache.direct=on", ctx);
    BlockNode *c = open_ok("driver=null-co,cache.no-flush=on", ctx);

    g_assert_false(block_node_get_cache_direct(a));
    g_assert_false(block_node_get_cache_no_flush(a));
    g_assert_true(block_node_get_cache_direct(b));
    g_assert_false(block_node_get_cache_no_flush(b));
    g_assert_false(block_node_get_cache_direct(c));
    g_assert_true(block_node_get_cache_no_flush(c));
    block_node_unref(a);
    block_node_unref(b);
    block_node_unref(c);
    assert_registry_empty();
    aio_context_unref(ctx);
}

static void test_filename_child_parent(void)
{
    AioContext *ctx = ctx_new();
    g_autofree char *path = tmp_image(MiB);
    g_autofree char *fstr = g_strdup_printf(
        "driver=file,node-name=f0,filename=%s", path);
    BlockNode *file = open_ok(fstr, ctx);
    BlockNode *raw = open_ok("driver=raw,node-name=r0,file=f0", ctx);
    BlockNode *dbg = open_ok("driver=blkdebug,node-name=d0,image=r0", ctx);
    BlockNode *null = open_ok("driver=null-co,node-name=n0", ctx);

    g_assert_cmpstr(block_node_get_filename(file), ==, path);
    g_assert_cmpstr(block_node_get_filename(raw), ==, path);
    g_assert_cmpstr(block_node_get_filename(dbg), ==, path);
    g_assert_null(block_node_get_filename(null));

    g_assert_true(block_node_get_child(dbg) == raw);
    g_assert_true(block_node_get_child(raw) == file);
    g_assert_null(block_node_get_child(file));
    g_assert_null(block_node_get_child(null));

    g_assert_true(block_node_find_parent(file) == raw);
    g_assert_true(block_node_find_parent(raw) == dbg);
    g_assert_null(block_node_find_parent(dbg));
    g_assert_null(block_node_find_parent(null));

    /* The parent goes: the child has none any more. */
    block_node_unref(dbg);
    g_assert_null(block_node_find_parent(raw));
    block_node_unref(raw);
    block_node_unref(file);
    block_node_unref(null);
    assert_registry_empty();
    g_unlink(path);
    aio_context_unref(ctx);
}

static void assert_list(const char *const *want, guint n)
{
    GPtrArray *all = block_node_list();

    g_assert_cmpuint(all->len, ==, n);
    for (guint i = 0; i < n; i++) {
        g_assert_cmpstr(block_node_get_name(g_ptr_array_index(all, i)), ==,
                        want[i]);
    }
    g_ptr_array_unref(all);
}

/* Oldest first, names that would sort otherwise; an inline child before
 * its parent; a removal keeps the others' order. */
static void test_list_order(void)
{
    static const char *const all[] = { "zeta", "alpha", "mid", "kid", "top" };
    static const char *const after[] = { "zeta", "kid", "top" };
    AioContext *ctx = ctx_new();
    BlockNode *z = open_ok("driver=null-co,node-name=zeta", ctx);
    BlockNode *a = open_ok("driver=null-co,node-name=alpha", ctx);
    BlockNode *m = open_ok("driver=null-co,node-name=mid", ctx);
    BlockNode *t = open_ok("driver=raw,node-name=top,file.driver=null-co,"
                           "file.node-name=kid", ctx);

    assert_list(all, G_N_ELEMENTS(all));
    block_node_unref(a);
    block_node_unref(m);
    assert_list(after, G_N_ELEMENTS(after));
    block_node_unref(z);
    block_node_unref(t);
    assert_registry_empty();
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* Resize                                                                    */

/* A file grows: the file, the node, new sectors readable and writable, a
 * request past the old end that failed before now succeeds. */
static void test_resize_file(void)
{
    Img img = img_open(MiB, NULL);
    g_autofree uint8_t *wbuf = g_malloc(8 * KiB);
    g_autofree uint8_t *rbuf = g_malloc(8 * KiB);

    fill_random(wbuf, 8 * KiB);
    g_assert_cmpint(block_node_get_length(img.bs), ==, MiB);
    /* Past the old end (and straddling it): refused before. */
    g_assert_cmpint(run_op(img.bs, BLOCK_OP_WRITE, MiB, wbuf, 8 * KiB), ==,
                    -EINVAL);
    g_assert_cmpint(run_op(img.bs, BLOCK_OP_READ, MiB - 4 * KiB, rbuf,
                           8 * KiB), ==, -EINVAL);

    resize_ok(img.bs, 2 * MiB);
    g_assert_cmpint(block_node_get_length(img.bs), ==, 2 * MiB);
    g_assert_cmpint(file_size(img.path), ==, 2 * MiB);

    /* The new part reads as zeroes, and takes data. */
    memset(rbuf, 0xaa, 8 * KiB);
    g_assert_cmpint(run_op(img.bs, BLOCK_OP_READ, 2 * MiB - 8 * KiB, rbuf,
                           8 * KiB), ==, 0);
    for (int i = 0; i < 8 * KiB; i++) {
        g_assert_cmpint(rbuf[i], ==, 0);
    }
    g_assert_cmpint(run_op(img.bs, BLOCK_OP_WRITE, MiB, wbuf, 8 * KiB), ==, 0);
    g_assert_cmpint(run_op(img.bs, BLOCK_OP_WRITE_ZEROES, 2 * MiB - 4 * KiB,
                           NULL, 4 * KiB), ==, 0);
    memset(rbuf, 0, 8 * KiB);
    g_assert_cmpint(run_op(img.bs, BLOCK_OP_READ, MiB, rbuf, 8 * KiB), ==, 0);
    assert_same(rbuf, wbuf, 8 * KiB, MiB, "the grown part");
    /* Still bounded: the new end is the end. */
    g_assert_cmpint(run_op(img.bs, BLOCK_OP_READ, 2 * MiB, rbuf, 512), ==,
                    -EINVAL);

    /* The same size again is fine and changes nothing. */
    resize_ok(img.bs, 2 * MiB);
    g_assert_cmpint(file_size(img.path), ==, 2 * MiB);

    img_close(&img);
}

static void test_resize_errors(void)
{
    Img img = img_open(MiB, "node-name=f1");
    g_autofree char *rostr = g_strdup_printf(
        "driver=file,node-name=ro,filename=%s,read-only=on,locking=off",
        img.path);
    BlockNode *ro;
    BlockNode *dbg;

    resize_fails(img.bs, MiB / 2, "Shrinking", "1048576");
    g_assert_cmpint(file_size(img.path), ==, MiB);
    resize_fails(img.bs, MiB + 100, "multiple of 512", NULL);
    resize_fails(img.bs, 0, "positive", NULL);
    resize_fails(img.bs, -512, "positive", NULL);

    /* blkdebug's alignment is the node's request alignment. */
    dbg = open_ok("driver=blkdebug,image=f1,align=4096", img.ctx);
    resize_fails(dbg, MiB + 512, "multiple of 4096", NULL);
    resize_ok(dbg, MiB + 4096);
    g_assert_cmpint(block_node_get_length(dbg), ==, MiB + 4096);
    g_assert_cmpint(block_node_get_length(img.bs), ==, MiB + 4096);
    g_assert_cmpint(file_size(img.path), ==, MiB + 4096);
    block_node_unref(dbg);

    ro = open_ok(rostr, img.ctx);
    resize_fails(ro, 2 * MiB, "Node 'ro' is read-only", NULL);
    g_assert_cmpint(file_size(img.path), ==, MiB + 4096);
    block_node_unref(ro);

    img_close(&img);
}

/* A file grown outside Spindle: never cut back to a smaller size. */
static void test_resize_file_grown_outside(void)
{
    Img img = img_open(MiB, NULL);

    g_assert_cmpint(truncate(img.path, 4 * MiB), ==, 0);
    resize_fails(img.bs, 2 * MiB, "already", "4194304");
    g_assert_cmpint(file_size(img.path), ==, 4 * MiB);
    resize_ok(img.bs, 4 * MiB);          /* picks it up */
    g_assert_cmpint(block_node_get_length(img.bs), ==, 4 * MiB);
    img_close(&img);
}

/* raw without options follows its file, whichever of the two is resized;
 * raw with offset= or size= refuses. */
static void test_resize_raw(void)
{
    Img img = img_open(MiB, "node-name=f2");
    g_autofree uint8_t *buf = g_malloc(4 * KiB);
    BlockNode *raw = open_ok("driver=raw,file=f2", img.ctx);
    BlockNode *sized = open_ok("driver=raw,file=f2,size=512k", img.ctx);
    BlockNode *moved = open_ok("driver=raw,file=f2,offset=64k", img.ctx);

    fill_random(buf, 4 * KiB);
    g_assert_cmpint(run_op(raw, BLOCK_OP_WRITE, MiB, buf, 4 * KiB), ==,
                    -EINVAL);
    resize_ok(raw, 2 * MiB);
    g_assert_cmpint(file_size(img.path), ==, 2 * MiB);
    g_assert_cmpint(block_node_get_length(img.bs), ==, 2 * MiB);
    g_assert_cmpint(block_node_get_length(raw), ==, 2 * MiB);
    /* A window with only offset= runs to the child's end: it grows. */
    g_assert_cmpint(block_node_get_length(moved), ==, 2 * MiB - 64 * KiB);
    /* A window with size= does not. */
    g_assert_cmpint(block_node_get_length(sized), ==, 512 * KiB);
    g_assert_cmpint(run_op(raw, BLOCK_OP_WRITE, MiB, buf, 4 * KiB), ==, 0);

    /* Resizing the file grows the raw node over it. */
    resize_ok(img.bs, 3 * MiB);
    g_assert_cmpint(block_node_get_length(raw), ==, 3 * MiB);
    g_assert_cmpint(run_op(raw, BLOCK_OP_READ, 3 * MiB - 4 * KiB, buf,
                           4 * KiB), ==, 0);

    resize_fails(sized, 4 * MiB, "'size'", NULL);
    resize_fails(moved, 4 * MiB, "'offset'", NULL);
    g_assert_cmpint(file_size(img.path), ==, 3 * MiB);

    block_node_unref(moved);
    block_node_unref(sized);
    block_node_unref(raw);
    img_close(&img);
}

static void test_resize_null(void)
{
    AioContext *ctx = ctx_new();
    BlockNode *bs = open_ok("driver=null-co,node-name=nl,size=1M", ctx);
    BlockNode *dbg = open_ok("driver=blkdebug,image=nl", ctx);
    BlockNode *aio = open_ok("driver=null-aio,size=1M", ctx);
    g_autofree char *buf = g_malloc0(4 * KiB);

    g_assert_cmpint(run_op(bs, BLOCK_OP_READ, MiB, buf, 4 * KiB), ==,
                    -EINVAL);
    resize_ok(bs, 8 * MiB);
    g_assert_cmpint(block_node_get_length(bs), ==, 8 * MiB);
    g_assert_cmpint(block_node_get_length(dbg), ==, 8 * MiB);
    g_assert_cmpint(run_op(bs, BLOCK_OP_READ, MiB, buf, 4 * KiB), ==, 0);
    g_assert_cmpint(run_op(dbg, BLOCK_OP_READ, 8 * MiB - 4 * KiB, buf,
                           4 * KiB), ==, 0);
    /* Through the filter. */
    resize_ok(dbg, 16 * MiB);
    g_assert_cmpint(block_node_get_length(bs), ==, 16 * MiB);
    g_assert_cmpint(block_node_get_length(dbg), ==, 16 * MiB);
    resize_fails(dbg, 8 * MiB, "Shrinking", "16777216");

    resize_ok(aio, 2 * MiB);
    g_assert_cmpint(block_node_get_length(aio), ==, 2 * MiB);
    /* Not the others. */
    g_assert_cmpint(block_node_get_length(bs), ==, 16 * MiB);

    block_node_unref(aio);
    block_node_unref(dbg);
    block_node_unref(bs);
    aio_context_unref(ctx);
}

/*
 * O_DIRECT, on a file whose size is not a multiple of the alignment: the
 * last, partial block is written by the write-past-the-end path (which
 * cuts the file back), then the node grows and the new blocks work.
 */
#define DIRECT_OLD_SIZE (MiB + 100)

static void test_resize_direct(void)
{
    AioContext *ctx = ctx_new();
    g_autofree char *path = tmp_image(DIRECT_OLD_SIZE);
    g_autofree char *fstr = g_strdup_printf(
        "driver=file,filename=%s,cache.direct=on", path);
    Error *err = NULL;
    BlockNode *bs = block_node_open_str(fstr, ctx, &err);
    BlockLimits limits;
    uint8_t *wbuf, *rbuf;
    int64_t align, new_size;

    if (!bs) {
        g_autofree char *why = g_strdup_printf("no O_DIRECT: %s",
                                               err->message);

        error_free(err);
        g_test_skip(why);
        g_unlink(path);
        aio_context_unref(ctx);
        return;
    }
    block_node_get_limits(bs, &limits);
    align = MAX(limits.request_alignment, 512);
    wbuf = test_aligned_buf(4096, 64 * KiB);
    rbuf = test_aligned_buf(4096, 64 * KiB);
    fill_random(wbuf, 64 * KiB);

    /* The last 50 bytes of the file: a misaligned write whose aligned
     * block reaches past the end; the file must not grow. */
    g_test_message("request alignment %" PRId64, align);
    g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, MiB + 50, wbuf, 50), ==, 0);
    g_assert_cmpint(file_size(path), ==, DIRECT_OLD_SIZE);

    new_size = MiB + 64 * KiB;
    resize_ok(bs, new_size);
    g_assert_cmpint(file_size(path), ==, new_size);
    g_assert_cmpint(block_node_get_length(bs), ==, new_size);

    /* The old tail kept its data, the new blocks take and return data. */
    g_assert_cmpint(run_op(bs, BLOCK_OP_READ, MiB, rbuf, 4 * KiB), ==, 0);
    assert_same(rbuf + 50, wbuf, 50, MiB + 50, "the old tail");
    for (int i = 100; i < 4 * KiB; i++) {
        g_assert_cmpint(rbuf[i], ==, 0);    /* past the old end: zeroes */
    }
    g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, MiB + 32 * KiB, wbuf,
                           32 * KiB), ==, 0);
    memset(rbuf, 0, 32 * KiB);
    g_assert_cmpint(run_op(bs, BLOCK_OP_READ, MiB + 32 * KiB, rbuf,
                           32 * KiB), ==, 0);
    assert_same(rbuf, wbuf, 32 * KiB, MiB + 32 * KiB, "the grown part");

    free(wbuf);
    free(rbuf);
    block_node_unref(bs);
    g_unlink(path);
    aio_context_unref(ctx);
}

/* A block device keeps its size; a device grown outside is picked up. */
static void test_resize_blkdev(void)
{
    AioContext *ctx = ctx_new();
    g_autofree char *path = tmp_image(MiB);
    g_autofree char *dev = NULL;
    g_autofree char *fstr = NULL;
    g_autofree char *buf = g_malloc0(4 * KiB);
    BlockNode *bs;
    int lfd = loop_attach(path, &dev);

    if (lfd < 0) {
        g_autofree char *why = g_strdup_printf("no loop device: %s",
                                               g_strerror(-lfd));

        g_test_skip(why);
        g_unlink(path);
        aio_context_unref(ctx);
        return;
    }
    fstr = g_strdup_printf("driver=file,filename=%s", dev);
    bs = open_ok(fstr, ctx);
    g_assert_cmpint(block_node_get_length(bs), ==, MiB);

    resize_fails(bs, 2 * MiB, "block device", "1048576");
    resize_ok(bs, MiB);
    g_assert_cmpint(block_node_get_length(bs), ==, MiB);

    /* Grow the device behind the node's back, then tell it. */
    g_assert_cmpint(truncate(path, 2 * MiB), ==, 0);
    g_assert_cmpint(ioctl(lfd, LOOP_SET_CAPACITY, 0), ==, 0);
    g_assert_cmpint(block_node_get_length(bs), ==, MiB);
    g_assert_cmpint(run_op(bs, BLOCK_OP_READ, MiB, buf, 4 * KiB), ==,
                    -EINVAL);
    resize_fails(bs, 4 * MiB, "block device", "2097152");
    resize_ok(bs, 2 * MiB);
    g_assert_cmpint(block_node_get_length(bs), ==, 2 * MiB);
    g_assert_cmpint(run_op(bs, BLOCK_OP_READ, MiB, buf, 4 * KiB), ==, 0);

    block_node_unref(bs);
    close(lfd);
    g_unlink(path);
    aio_context_unref(ctx);
}

/*
 * An IOThread keeps reading at the old end (failing with -EINVAL) and
 * reading and writing inside the old size while the main thread grows the
 * file: once a request past the old end succeeds, every later one must
 * (the length is published after the file grew), and the ones inside
 * never fail.
 */
#define CONC_OLD_SIZE  (MiB)
#define CONC_AFTER     2000          /* requests past the old end, after */

typedef struct ConcWorker {
    BlockNode *bs;
    AioContext *ctx;
    _Atomic bool saw_new;            /* a request past the old end worked */
    _Atomic unsigned before_fail;    /* -EINVAL past the old end, before */
    unsigned after_ok;
    unsigned errors;                 /* anything else */
} ConcWorker;

static void conc_work(void *opaque)
{
    ConcWorker *w = opaque;
    BlockQueue *q = block_queue_new(w->bs, w->ctx, NULL);
    uint8_t *buf = test_aligned_buf(4096, 8 * KiB);
    int64_t deadline = g_get_monotonic_time() + 20 * G_USEC_PER_SEC;

    memset(buf, 0x5a, 8 * KiB);
    while (w->after_ok < CONC_AFTER) {
        TReq in = {
            .req = { .op = BLOCK_OP_WRITE, .offset = 64 * KiB, .bytes = 4 * KiB,
                     .cb = treq_cb, .niov = 1 },
            .iov = { .iov_base = buf, .iov_len = 4 * KiB },
        };
        TReq past = {
            .req = { .op = BLOCK_OP_READ, .offset = CONC_OLD_SIZE,
                     .bytes = 4 * KiB, .cb = treq_cb, .niov = 1 },
            .iov = { .iov_base = buf + 4 * KiB, .iov_len = 4 * KiB },
        };

        in.req.iov = &in.iov;
        past.req.iov = &past.iov;
        block_queue_submit(q, &in.req);
        block_queue_submit(q, &past.req);
        block_queue_drain(q);
        if (in.ret != 0) {
            w->errors++;
        }
        if (past.ret == 0) {
            atomic_store(&w->saw_new, true);
            w->after_ok++;
        } else if (past.ret == -EINVAL && !atomic_load(&w->saw_new)) {
            atomic_fetch_add(&w->before_fail, 1);
        } else {
            w->errors++;
            break;
        }
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
    }
    free(buf);
    block_queue_free(q);
}

static void test_resize_concurrent(void)
{
    static const char *const aios[] = { "threads", "io_uring", "native" };

    for (size_t e = 0; e < G_N_ELEMENTS(aios); e++) {
        g_autofree char *path = tmp_image(CONC_OLD_SIZE);
        g_autofree char *fstr = g_strdup_printf(
            "driver=file,filename=%s,aio=%s", path, aios[e]);
        IOThread *iot = iot_new("resize-iot", NULL);
        AioContext *ctx = iothread_get_aio_context(iot);
        Error *err = NULL;
        BlockNode *bs = block_node_open_str(fstr, ctx, &err);
        ConcWorker w = { .ctx = ctx };
        GThread *t;

        if (!bs) {
            g_test_message("aio=%s: %s", aios[e], err->message);
            error_free(err);
            iothread_destroy(iot);
            g_unlink(path);
            continue;
        }
        w.bs = bs;
        t = ctx_job_start(w.ctx, conc_work, &w);
        while (atomic_load(&w.before_fail) < 100) {   /* watchdog bounds it */
            sleep_ns(NS_PER_MS);
        }
        resize_ok(bs, 4 * MiB);
        g_thread_join(t);
        g_test_message("aio=%s: %u failed before, %u worked after",
                       aios[e], atomic_load(&w.before_fail), w.after_ok);
        g_assert_cmpuint(w.errors, ==, 0);
        g_assert_cmpuint(w.after_ok, ==, CONC_AFTER);
        block_node_unref(bs);
        iothread_destroy(iot);
        g_unlink(path);
    }
}

static const TestCase tests[] = {
    { "/block-nodes/query/cache-flags", test_cache_flags },
    { "/block-nodes/query/filename-child-parent", test_filename_child_parent },
    { "/block-nodes/query/list-order", test_list_order },
    { "/block-nodes/resize/file", test_resize_file },
    { "/block-nodes/resize/errors", test_resize_errors },
    { "/block-nodes/resize/file-grown-outside", test_resize_file_grown_outside },
    { "/block-nodes/resize/raw", test_resize_raw },
    { "/block-nodes/resize/null", test_resize_null },
    { "/block-nodes/resize/direct", test_resize_direct },
    { "/block-nodes/resize/blkdev", test_resize_blkdev },
    { "/block-nodes/resize/concurrent", test_resize_concurrent },
};

/* Below the 60 s meson timeout, so that the watchdog reports first. */
TEST_MAIN(tests, 50)

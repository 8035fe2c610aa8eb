/*
 * Helpers shared by the block layer test programs: see
 * block-test-helpers.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <linux/loop.h>
#include <glib.h>

#include "util/clock.h"
#include "block-test-helpers.h"

static unsigned treq_completion_seq;

void treq_cb(BlockRequest *req, int ret)
{
    TReq *r = (TReq *)((char *)req - offsetof(TReq, req));

    g_assert_false(r->done);
    r->done = true;
    r->ret = ret;
    r->done_ns = clock_now_ns();
    r->seq = treq_completion_seq++;
    if (r->drain_in_cb) {
        block_node_drain(r->drain_in_cb);
    }
}

void treq_init(TReq *r, BlockOp op, int64_t offset, void *buf,
               int64_t bytes)
{
    memset(r, 0, sizeof(*r));
    r->req = (BlockRequest) {
        .op = op, .offset = offset, .bytes = bytes, .cb = treq_cb,
    };
    if (op == BLOCK_OP_READ || op == BLOCK_OP_WRITE) {
        r->iov = (struct iovec) { .iov_base = buf, .iov_len = bytes };
        r->req.iov = &r->iov;
        r->req.niov = 1;
    }
}

void treq_submit(BlockNode *bs, TReq *r)
{
    r->submit_ns = clock_now_ns();
    block_node_submit(bs, &r->req);
    g_assert_false(r->done);
}

int treq_run(BlockNode *bs, TReq *r)
{
    treq_submit(bs, r);
    g_assert_cmpuint(block_node_in_flight(bs), >=, 1);
    block_node_drain(bs);
    g_assert_true(r->done);
    g_assert_cmpuint(block_node_in_flight(bs), ==, 0);
    return r->ret;
}

int run_op(BlockNode *bs, BlockOp op, int64_t offset, void *buf,
           int64_t bytes)
{
    TReq r;

    treq_init(&r, op, offset, buf, bytes);
    return treq_run(bs, &r);
}

BlockNode *open_ok(const char *str, AioContext *ctx)
{
    Error *err = NULL;
    BlockNode *bs = block_node_open_str(str, ctx, &err);

    if (!bs) {
        g_error("opening '%s' failed: %s", str, err->message);
    }
    return bs;
}

void open_fails(const char *str, AioContext *ctx, const char *needle)
{
    Error *err = NULL;
    BlockNode *bs = block_node_open_str(str, ctx, &err);

    if (bs) {
        g_error("opening '%s' succeeded, expected an error about %s", str,
                needle);
    }
    g_assert_nonnull(err);
    if (!strstr(err->message, needle)) {
        g_error("opening '%s': error '%s' does not mention %s", str,
                err->message, needle);
    }
    g_test_message("%s -> %s", str, err->message);
    error_free(err);
}

int tmp_image_open(int64_t size, char **path)
{
    g_autoptr(GError) gerr = NULL;
    int fd = g_file_open_tmp("spindle-test-XXXXXX", path, &gerr);

    g_assert_no_error(gerr);
    g_assert_cmpint(ftruncate(fd, size), ==, 0);
    return fd;
}

char *tmp_image(int64_t size)
{
    char *path;

    close(tmp_image_open(size, &path));
    return path;
}

int loop_attach(const char *backing, char **dev)
{
    for (int attempt = 0; attempt < 10; attempt++) {
        struct loop_config cfg;
        int ctl, n, lfd, bfd, ret;

        ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
        if (ctl < 0) {
            return -errno;
        }
        n = ioctl(ctl, LOOP_CTL_GET_FREE);
        ret = -errno;
        close(ctl);
        if (n < 0) {
            return ret;
        }
        *dev = g_strdup_printf("/dev/loop%d", n);
        lfd = open(*dev, O_RDWR | O_CLOEXEC);
        if (lfd < 0) {
            ret = -errno;
            g_clear_pointer(dev, g_free);
            return ret;
        }
        bfd = open(backing, O_RDWR | O_CLOEXEC);
        g_assert_cmpint(bfd, >=, 0);
        memset(&cfg, 0, sizeof(cfg));
        cfg.fd = bfd;
        cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        ret = ioctl(lfd, LOOP_CONFIGURE, &cfg) < 0 ? -errno : 0;
        close(bfd);
        if (ret == 0) {
            return lfd;
        }
        close(lfd);
        g_clear_pointer(dev, g_free);
        if (ret != -EBUSY) {
            return ret;
        }
        /* Someone else took it between GET_FREE and CONFIGURE. */
    }
    return -EBUSY;
}

typedef struct CtxJob {
    AioContext *ctx;
    void (*fn)(void *opaque);
    void *opaque;
} CtxJob;

static gpointer ctx_job_thread(gpointer opaque)
{
    CtxJob *job = opaque;

    aio_run_sync(job->ctx, job->fn, job->opaque);
    g_free(job);
    return NULL;
}

GThread *ctx_job_start(AioContext *ctx, void (*fn)(void *opaque),
                       void *opaque)
{
    CtxJob *job = g_new(CtxJob, 1);

    *job = (CtxJob) { .ctx = ctx, .fn = fn, .opaque = opaque };
    return g_thread_new("ctx-job", ctx_job_thread, job);
}

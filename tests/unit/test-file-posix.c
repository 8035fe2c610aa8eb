/*
 * Unit tests for the `file` block driver (block/file-posix.c, and its
 * image locks, block/file-lock.c).
 *
 * Theory of operation: every test goes through the public block API
 * (block_node_open_str(), block_node_submit(), block_node_drain()) on a
 * context whose home thread is the test's main thread, and checks what it
 * reads against a model: an in-memory copy of what the image must contain.
 * The image is a temporary file (or a loop device over one); after the I/O
 * the file is also read with plain pread() and, after closing and
 * reopening the node, through the node again, so that the model, the
 * kernel's view and a fresh node all agree.
 *
 * The I/O matrix runs for each engine (aio=threads, native, io_uring) with
 * cache.direct=off and on.  A combination the machine cannot do is skipped
 * with the reason: an engine not built or not allowed (io_uring disabled),
 * a file system without O_DIRECT, no loop devices.
 */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/falloc.h>
#include <glib.h>

#include "block/aio-engine.h"
#include "block/block.h"
#include "util/iothread.h"
#include "block-test-helpers.h"
#include "test-helpers.h"

#define IMAGE_SIZE      (8 * 1024 * 1024)
#define SLOTS           8
#define ROUNDS          24
#define MAX_IO          (256 * 1024)
#define BUF_ALIGN       4096

/* The documented lock byte (docs/block.md). */
#define LOCK_BYTE       0x5350494eLL

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */

typedef struct Io {
    BlockRequest req;            /* first: the callback gets &io->req */
    struct iovec iov[3];
    int ret;
    bool done;
} Io;

static void io_done(BlockRequest *req, int ret)
{
    Io *io = (Io *)req;

    g_assert_false(io->done);
    io->ret = ret;
    io->done = true;
}

/* Fill io for op over buf[0..bytes), cut into niov (1..3) iovecs. */
static void io_prepare(Io *io, BlockOp op, int64_t offset, void *buf,
                       int64_t bytes, int niov, unsigned flags)
{
    int64_t cut1, cut2;

    memset(io, 0, sizeof(*io));
    io->req = (BlockRequest) {
        .op = op,
        .flags = flags,
        .offset = offset,
        .bytes = bytes,
        .cb = io_done,
    };
    if (op != BLOCK_OP_READ && op != BLOCK_OP_WRITE) {
        return;
    }
    if (bytes < 3) {
        niov = 1;
    }
    cut1 = niov > 1 ? g_test_rand_int_range(1, bytes - 1) : bytes;
    cut2 = niov > 2 ? g_test_rand_int_range(cut1, bytes) : bytes;
    io->iov[0] = (struct iovec) { buf, cut1 };
    io->iov[1] = (struct iovec) { (char *)buf + cut1, cut2 - cut1 };
    io->iov[2] = (struct iovec) { (char *)buf + cut2, bytes - cut2 };
    io->req.iov = io->iov;
    io->req.niov = niov;
}

static void io_start(BlockNode *bs, Io *io)
{
    block_node_submit(bs, &io->req);
    /* Completions never come from inside submit. */
    g_assert_false(io->done);
}

/* Submit one request, wait for it, return its result. */
static int node_io(BlockNode *bs, BlockOp op, int64_t offset, void *buf,
                   int64_t bytes, unsigned flags)
{
    Io io;

    io_prepare(&io, op, offset, buf, bytes, 1, flags);
    io_start(bs, &io);
    block_node_drain(bs);
    g_assert_true(io.done);
    g_assert_cmpuint(block_node_in_flight(bs), ==, 0);
    return io.ret;
}

static void *aligned_buf(size_t size)
{
    return test_aligned_buf(BUF_ALIGN, size);
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i]) {
            return false;
        }
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Files and directories                                                     */

static char *temp_file_in(const char *dir)
{
    char *path = g_build_filename(dir, "spindle-test-file-XXXXXX", NULL);
    int fd = mkstemp(path);

    if (fd < 0) {
        g_free(path);
        return NULL;
    }
    close(fd);
    return path;
}

/* Create path with size bytes of random data; copy them into model. */
static void write_image(const char *path, uint8_t *model, int64_t size)
{
    int fd = open(path, O_WRONLY | O_TRUNC | O_CREAT | O_CLOEXEC, 0600);

    g_assert_cmpint(fd, >=, 0);
    fill_random(model, size);
    g_assert_cmpint(pwrite(fd, model, size, 0), ==, size);
    g_assert_cmpint(close(fd), ==, 0);
}

/* Read the file (or device) with plain pread and compare with model. */
static void check_with_pread(const char *path, const uint8_t *model,
                             int64_t size)
{
    g_autofree uint8_t *buf = g_malloc(size);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int64_t done = 0;

    g_assert_cmpint(fd, >=, 0);
    while (done < size) {
        ssize_t n = pread(fd, buf + done, size - done, done);

        g_assert_cmpint(n, >, 0);
        done += n;
    }
    close(fd);
    assert_same(buf, model, size, 0, "plain pread of the image");
}

/* Whether O_DIRECT reads and writes of 4 KiB work in dir. */
static bool dir_supports_direct(const char *dir)
{
    g_autofree char *path = temp_file_in(dir);
    g_autofree void *buf = NULL;
    bool ok;
    int fd;

    if (!path) {
        return false;
    }
    buf = aligned_buf(BUF_ALIGN);
    memset(buf, 0, BUF_ALIGN);
    fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
    ok = fd >= 0 && pwrite(fd, buf, BUF_ALIGN, 0) == BUF_ALIGN &&
         pread(fd, buf, BUF_ALIGN, 0) == BUF_ALIGN;
    if (fd >= 0) {
        close(fd);
    }
    unlink(path);
    return ok;
}

static const char *build_dir(void)
{
    static char *dir;

    if (!dir) {
        g_autofree char *exe = g_file_read_link("/proc/self/exe", NULL);

        dir = exe ? g_path_get_dirname(exe) : g_get_current_dir();
    }
    return dir;
}

/* A directory whose file system does O_DIRECT, or NULL. */
static const char *direct_dir(void)
{
    const char *candidates[] = {
        g_getenv("TMPDIR"), "/tmp", "/var/tmp", build_dir(),
    };

    for (size_t i = 0; i < G_N_ELEMENTS(candidates); i++) {
        if (candidates[i] && dir_supports_direct(candidates[i])) {
            return candidates[i];
        }
    }
    return NULL;
}

typedef struct FsHoles {
    bool punch;                  /* PUNCH_HOLE works: discard reads zeroes */
    bool seek_hole;              /* and SEEK_HOLE reports the hole */
} FsHoles;

static FsHoles fs_holes(const char *dir)
{
    g_autofree char *path = temp_file_in(dir);
    g_autofree uint8_t *buf = g_malloc(65536);
    FsHoles h = { false, false };
    int fd;

    g_assert_nonnull(path);
    fd = open(path, O_RDWR | O_CLOEXEC);
    g_assert_cmpint(fd, >=, 0);
    memset(buf, 0xaa, 65536);
    g_assert_cmpint(pwrite(fd, buf, 65536, 0), ==, 65536);
    g_assert_cmpint(fsync(fd), ==, 0);
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  16384, 16384) == 0) {
        h.punch = pread(fd, buf, 16384, 16384) == 16384 &&
                  all_zero(buf, 16384);
        h.seek_hole = lseek(fd, 16384, SEEK_HOLE) == 16384;
    }
    close(fd);
    unlink(path);
    return h;
}

/* ------------------------------------------------------------------------ */
/* Opening                                                                   */

static bool engine_built(const char *aio)
{
    return block_engine_find(aio) != NULL;
}

/* Open or skip: returns NULL after g_test_skip() if the engine is absent. */
static BlockNode *open_or_skip(const char *opts, const char *aio,
                               AioContext *ctx)
{
    Error *err = NULL;
    BlockNode *bs;

    if (aio && !engine_built(aio)) {
        g_autofree char *msg = g_strdup_printf("aio=%s is not built in", aio);

        g_test_skip(msg);
        return NULL;
    }
    bs = block_node_open_str(opts, ctx, &err);
    if (!bs && aio && strstr(error_get_pretty(err), "aio=")) {
        g_autofree char *msg = g_strdup_printf("aio=%s unavailable here: %s",
                                               aio, error_get_pretty(err));

        g_test_skip(msg);
        error_free(err);
        return NULL;
    }
    if (!bs) {
        g_error("open '%s': %s", opts, error_get_pretty(err));
    }
    return bs;
}

/*
 * A small image file: SMALL_SIZE random bytes (model) in a temporary file,
 * a context to open it in and an aligned buffer of the same size.
 */
#define SMALL_SIZE 65536

typedef struct SmallImage {
    AioContext *ctx;
    char *path;
    uint8_t *model;
    uint8_t *buf;
} SmallImage;

static void small_image_init(SmallImage *im, const char *dir)
{
    im->ctx = ctx_new();
    im->path = temp_file_in(dir);
    g_assert_nonnull(im->path);
    im->model = g_malloc(SMALL_SIZE);
    im->buf = aligned_buf(SMALL_SIZE);
    write_image(im->path, im->model, SMALL_SIZE);
}

/*
 * A file node on the image, with extra options besides driver and filename;
 * with aio, open_or_skip() for that engine (NULL if skipped), else open_ok().
 */
static BlockNode *small_image_open(SmallImage *im, const char *extra,
                                   const char *aio)
{
    g_autofree char *opts = g_strdup_printf("driver=file,filename=%s,%s",
                                            im->path, extra);

    return aio ? open_or_skip(opts, aio, im->ctx) : open_ok(opts, im->ctx);
}

/* Delete the file (with check, after checking that it holds model). */
static void small_image_cleanup(SmallImage *im, bool check)
{
    if (check) {
        check_with_pread(im->path, im->model, SMALL_SIZE);
    }
    unlink(im->path);
    aio_context_unref(im->ctx);
    g_free(im->path);
    g_free(im->model);
    free(im->buf);
}

/* ------------------------------------------------------------------------ */
/* The I/O matrix                                                            */

typedef struct Image {
    char *path;                  /* what filename= names */
    char *backing;               /* the regular file (== path, or a loop's) */
    int64_t size;
    uint8_t *model;
    bool blkdev;
    FsHoles holes;
    int loop_fd;                 /* holds an auto-clearing loop device */
} Image;

/* Update the model for a discard of [off, off+len) that succeeded. */
static void model_discard(Image *img, int64_t off, int64_t len)
{
    int64_t end = off + len;

    if (!img->holes.punch) {
        return;                  /* a hint the file system ignores */
    }
    if (img->blkdev) {
        /* Only whole logical blocks (512 bytes on our loop devices). */
        off = (off + 511) & ~(int64_t)511;
        end &= ~(int64_t)511;
    }
    if (end > off) {
        memset(img->model + off, 0, end - off);
    }
}

/*
 * One round: a request in each slot (disjoint ranges), all in flight
 * together.  Mostly reads and writes, aligned or not, in one to three
 * iovecs; some write-zeroes and discards, which the driver runs in the
 * thread pool, so their completions interleave with the engine's.
 * Write-zeroes and discard ranges follow the node's request alignment
 * (guests send them in whole blocks).
 */
static void io_round(BlockNode *bs, Image *img, uint32_t req_align)
{
    int64_t slot = img->size / SLOTS;
    Io io[SLOTS];
    uint8_t *bufs[SLOTS];
    void *allocs[SLOTS];

    for (int i = 0; i < SLOTS; i++) {
        bool aligned = g_test_rand_bit();
        int kind = g_test_rand_int_range(0, 10);
        BlockOp op = kind < 4 ? BLOCK_OP_READ :
                     kind < 8 ? BLOCK_OP_WRITE :
                     kind < 9 ? BLOCK_OP_WRITE_ZEROES : BLOCK_OP_DISCARD;
        unsigned flags = 0;
        int64_t len, off;

        if (aligned) {
            len = BUF_ALIGN * g_test_rand_int_range(1, MAX_IO / BUF_ALIGN);
            off = i * slot + BUF_ALIGN *
                  g_test_rand_int_range(0, (slot - len) / BUF_ALIGN + 1);
        } else {
            len = g_test_rand_int_range(1, MAX_IO);
            off = i * slot + g_test_rand_int_range(0, slot - len + 1);
        }
        allocs[i] = aligned_buf(len + 8);
        bufs[i] = (uint8_t *)allocs[i] + (aligned ? 0 :
                                          g_test_rand_int_range(1, 8));
        switch (op) {
        case BLOCK_OP_READ:
            memset(bufs[i], 0x5a, len);
            break;
        case BLOCK_OP_WRITE:
            fill_random(bufs[i], len);
            memcpy(img->model + off, bufs[i], len);
            break;
        default:
            off = off / req_align * req_align;
            len = MAX(len / req_align, 1) * req_align;
            if (op == BLOCK_OP_WRITE_ZEROES) {
                flags = g_test_rand_bit() ? BLOCK_REQ_MAY_UNMAP : 0;
                memset(img->model + off, 0, len);
            } else {
                model_discard(img, off, len);
            }
            break;
        }
        io_prepare(&io[i], op, off, bufs[i], len,
                   aligned ? 1 : g_test_rand_int_range(1, 4), flags);
    }
    block_node_io_plug(bs);
    for (int i = 0; i < SLOTS; i++) {
        io_start(bs, &io[i]);
    }
    block_node_io_unplug(bs);
    block_node_drain(bs);
    for (int i = 0; i < SLOTS; i++) {
        g_assert_true(io[i].done);
        g_assert_cmpint(io[i].ret, ==, 0);
        if (io[i].req.op == BLOCK_OP_READ) {
            assert_same(bufs[i], img->model + io[i].req.offset,
                        io[i].req.bytes, io[i].req.offset, "read back");
        }
        free(allocs[i]);
    }
}

/* Read [offset, offset+bytes) through the node and compare with model. */
static void check_range(BlockNode *bs, Image *img, int64_t offset,
                        int64_t bytes, const char *what)
{
    g_autofree uint8_t *buf = aligned_buf(bytes);

    g_assert_cmpint(node_io(bs, BLOCK_OP_READ, offset, buf, bytes, 0), ==, 0);
    assert_same(buf, img->model + offset, bytes, offset, what);
}

static void check_whole_image(BlockNode *bs, Image *img, const char *what)
{
    for (int64_t off = 0; off < img->size; off += 1024 * 1024) {
        check_range(bs, img, off, MIN(1024 * 1024, img->size - off), what);
    }
}

static void check_eof(BlockNode *bs, Image *img)
{
    g_autofree uint8_t *buf = aligned_buf(8192);

    /* Past the end, and straddling it. */
    g_assert_cmpint(node_io(bs, BLOCK_OP_READ, img->size, buf, 4096, 0), ==,
                    -EINVAL);
    g_assert_cmpint(node_io(bs, BLOCK_OP_READ, img->size - 4096, buf, 8192,
                            0), ==, -EINVAL);
    g_assert_cmpint(node_io(bs, BLOCK_OP_WRITE, img->size - 512, buf, 4096,
                            0), ==, -EINVAL);
    g_assert_cmpint(node_io(bs, BLOCK_OP_WRITE_ZEROES, img->size, NULL, 4096,
                            0), ==, -EINVAL);
    /* The last block is fine. */
    check_range(bs, img, img->size - 4096, 4096, "last block");
}

/* Write-zeroes of [offset, +bytes); with may_unmap also check for a hole. */
static void check_write_zeroes(BlockNode *bs, Image *img, int64_t offset,
                               int64_t bytes, unsigned flags, bool want_hole)
{
    g_assert_cmpint(node_io(bs, BLOCK_OP_WRITE_ZEROES, offset, NULL, bytes,
                            flags), ==, 0);
    memset(img->model + offset, 0, bytes);
    check_range(bs, img, offset, bytes, "write-zeroes");
    if (want_hole) {
        int fd = open(img->backing, O_RDONLY | O_CLOEXEC);

        g_assert_cmpint(fd, >=, 0);
        g_assert_cmpint(lseek(fd, offset, SEEK_HOLE), ==, offset);
        close(fd);
    }
}

static void check_discard(BlockNode *bs, Image *img, int64_t offset,
                          int64_t bytes)
{
    g_assert_cmpint(node_io(bs, BLOCK_OP_DISCARD, offset, NULL, bytes, 0),
                    ==, 0);
    /* Punched holes (and a loop device's discard, which punches one in
     * its backing file) read back as zeroes. */
    model_discard(img, offset, bytes);
    check_range(bs, img, offset, bytes, "discard");
}

static void run_matrix(Image *img, const char *aio, bool direct)
{
    AioContext *ctx = ctx_new();
    g_autofree char *opts = g_strdup_printf(
        "driver=file,filename=%s,aio=%s,cache.direct=%s,discard=unmap",
        img->path, aio, direct ? "on" : "off");
    g_autofree uint8_t *buf = aligned_buf(65536);
    BlockLimits lim;
    BlockNode *bs;

    bs = open_or_skip(opts, aio, ctx);
    if (!bs) {
        aio_context_unref(ctx);
        return;
    }
    g_assert_cmpint(block_node_get_length(bs), ==, img->size);
    block_node_get_limits(bs, &lim);
    g_test_message("%s: request_alignment %u, mem_alignment %u, "
                   "discard_alignment %u", img->path, lim.request_alignment,
                   lim.mem_alignment, lim.discard_alignment);
    if (direct) {
        g_assert_cmpuint(lim.request_alignment, >=, 1);
        g_assert_cmpuint(lim.request_alignment, <=, 65536);
        g_assert_cmpuint(lim.mem_alignment, >=, lim.request_alignment);
        if (img->blkdev) {
            g_assert_cmpuint(lim.request_alignment, >=, 512);
        }
    } else {
        g_assert_cmpuint(lim.request_alignment, ==, 1);
        g_assert_cmpuint(lim.mem_alignment, ==, 1);
    }
    g_assert_cmpuint(lim.max_transfer, >=, MAX_IO);
    g_assert_cmpuint(lim.discard_alignment, >=, 512);

    for (int r = 0; r < ROUNDS; r++) {
        io_round(bs, img, lim.request_alignment);
    }
    g_assert_cmpint(node_io(bs, BLOCK_OP_FLUSH, 0, NULL, 0, 0), ==, 0);
    g_assert_cmpint(node_io(bs, BLOCK_OP_FLUSH, 0, NULL, 0,
                            BLOCK_REQ_FUA), ==, 0);
    check_eof(bs, img);

    /* FUA write. */
    fill_random(buf, 65536);
    memcpy(img->model + 65536, buf, 65536);
    g_assert_cmpint(node_io(bs, BLOCK_OP_WRITE, 65536, buf, 65536,
                            BLOCK_REQ_FUA), ==, 0);

    /* Write-zeroes: aligned, unaligned (files: fallocate works on bytes;
     * buffered block devices: written zeroes), may-unmap. */
    check_write_zeroes(bs, img, 1024 * 1024, 128 * 1024, 0, false);
    if (!direct || !img->blkdev) {
        check_write_zeroes(bs, img, 2 * 1024 * 1024 + 100, 70000, 0, false);
        check_write_zeroes(bs, img, 2 * 1024 * 1024 + 300000, 100, 0, false);
    }
    check_write_zeroes(bs, img, 3 * 1024 * 1024, 256 * 1024,
                       BLOCK_REQ_MAY_UNMAP,
                       img->holes.seek_hole && !img->blkdev);
    check_write_zeroes(bs, img, 3 * 1024 * 1024 + 512 * 1024, 8192,
                       BLOCK_REQ_MAY_UNMAP | BLOCK_REQ_FUA, false);

    /* Discard: aligned; unaligned edges stay (block devices) or are
     * zeroed (files) — check only the aligned part's effect here. */
    check_discard(bs, img, 4 * 1024 * 1024, 512 * 1024);

    g_assert_cmpint(node_io(bs, BLOCK_OP_FLUSH, 0, NULL, 0, 0), ==, 0);
    check_with_pread(img->path, img->model, img->size);
    block_node_unref(bs);

    /* A fresh node sees the same bytes. */
    bs = open_ok(opts, ctx);
    check_whole_image(bs, img, "after reopen");
    block_node_unref(bs);
    aio_context_unref(ctx);
}

static void image_init_file(Image *img, const char *dir)
{
    memset(img, 0, sizeof(*img));
    img->size = IMAGE_SIZE;
    img->model = g_malloc(img->size);
    img->path = temp_file_in(dir);
    g_assert_nonnull(img->path);
    img->backing = g_strdup(img->path);
    img->holes = fs_holes(dir);
    img->loop_fd = -1;
    write_image(img->path, img->model, img->size);
}

static void image_cleanup(Image *img)
{
    if (img->loop_fd >= 0) {
        close(img->loop_fd);       /* auto-clear detaches the device */
    }
    unlink(img->backing);
    g_free(img->path);
    g_free(img->backing);
    g_free(img->model);
}

/* The matrix on an image file in dir; skipped, saying why_not, without. */
static void run_file_matrix(const char *dir, const char *why_not,
                            const char *aio, bool direct)
{
    Image img;

    if (!dir) {
        g_test_skip(why_not);
        return;
    }
    image_init_file(&img, dir);
    run_matrix(&img, aio, direct);
    image_cleanup(&img);
}

static void test_file_matrix(const void *arg)
{
    EngineVariant c = engine_variant(arg);

    run_file_matrix(c.direct ? direct_dir() : g_get_tmp_dir(),
                    "no directory tried ($TMPDIR, /tmp, /var/tmp, the build "
                    "directory) is on a file system with O_DIRECT",
                    c.engine, c.direct);
}

/* A directory with O_DIRECT where statx does not tell the alignment (the
 * driver probes it), or NULL. */
static const char *probed_direct_dir(void)
{
    const char *candidates[] = { "/dev/shm", "/run", g_getenv("TMPDIR"),
                                 "/tmp" };

    for (size_t i = 0; i < G_N_ELEMENTS(candidates); i++) {
        struct statx stx;

        if (!candidates[i] || !dir_supports_direct(candidates[i])) {
            continue;
        }
        if (statx(AT_FDCWD, candidates[i], 0, STATX_DIOALIGN, &stx) < 0 ||
            !(stx.stx_mask & STATX_DIOALIGN)) {
            return candidates[i];
        }
    }
    return NULL;
}

static void test_probed_direct(void)
{
    run_file_matrix(probed_direct_dir(),
                    "no file system here does O_DIRECT without telling its "
                    "alignment through statx", "threads", true);
}

/* ------------------------------------------------------------------------ */
/* Block devices (loop)                                                      */

static void test_blkdev_matrix(const void *arg)
{
    EngineVariant c = engine_variant(arg);
    Image img;
    char *dev = NULL;
    int lfd;

    image_init_file(&img, g_get_tmp_dir());
    lfd = loop_attach(img.backing, &dev);
    if (lfd < 0) {
        g_autofree char *msg = g_strdup_printf("no loop device: %s",
                                               g_strerror(-lfd));

        g_test_skip(msg);
        image_cleanup(&img);
        return;
    }
    img.loop_fd = lfd;
    g_free(img.path);
    img.path = dev;
    img.blkdev = true;
    run_matrix(&img, c.engine, c.direct);
    image_cleanup(&img);
}

/* ------------------------------------------------------------------------ */
/* Options and errors                                                        */

static void test_missing_file(void)
{
    AioContext *ctx = ctx_new();
    g_autofree char *dir = g_dir_make_tmp("spindle-test-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "nope.img", NULL);
    g_autofree char *opts = g_strdup_printf("driver=file,filename=%s", path);
    g_autofree char *want = g_strdup_printf("Could not open '%s': No such "
                                            "file or directory", path);

    open_fails(opts, ctx, want);
    open_fails("driver=file", ctx, "'filename'");
    open_fails("driver=file,filename=", ctx, "'filename'");
    rmdir(dir);
    aio_context_unref(ctx);
}

static void test_bad_options(void)
{
    /* Options besides driver and filename, and what the error names. */
    static const char *const bad[][2] = {
        { "aio=fast", "'aio'" },
        { "locking=maybe", "'locking'" },
        { "locking=on,sparkle=1", "sparkle" },
    };
    AioContext *ctx = ctx_new();
    g_autofree char *path = temp_file_in(g_get_tmp_dir());
    g_autofree char *good = g_strdup_printf("driver=file,filename=%s,"
                                            "drop-cache=off,locking=on,"
                                            "aio=threads", path);
    BlockNode *bs;

    g_assert_cmpint(truncate(path, 65536), ==, 0);
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_autofree char *opts = g_strdup_printf("driver=file,filename=%s,%s",
                                                path, bad[i][0]);

        open_fails(opts, ctx, bad[i][1]);
    }
    bs = open_ok(good, ctx);
    block_node_unref(bs);
    unlink(path);
    aio_context_unref(ctx);
}

static void test_not_a_file(void)
{
    AioContext *ctx = ctx_new();
    g_autofree char *dir = g_dir_make_tmp("spindle-test-XXXXXX", NULL);
    g_autofree char *o1 = g_strdup_printf("driver=file,filename=%s", dir);
    g_autofree char *o2 = g_strdup_printf("driver=file,filename=%s,"
                                          "read-only=on", dir);

    open_fails(o1, ctx, "Is a directory");
    open_fails(o2, ctx, "is not a regular file or a block device");
    open_fails("driver=file,filename=/dev/null", ctx,
               "is not a regular file or a block device");
    rmdir(dir);
    aio_context_unref(ctx);
}

static void test_relative_path(void)
{
    AioContext *ctx = ctx_new();
    g_autofree char *cwd = g_get_current_dir();
    g_autofree char *path = temp_file_in(g_get_tmp_dir());
    g_autofree char *base = g_path_get_basename(path);
    g_autofree char *dir = g_path_get_dirname(path);
    g_autofree char *opts = g_strdup_printf("driver=file,filename=%s", base);
    g_autofree uint8_t *buf = g_malloc(4096);
    BlockNode *bs;

    g_assert_cmpint(truncate(path, 65536), ==, 0);
    g_assert_cmpint(chdir(dir), ==, 0);
    bs = open_ok(opts, ctx);
    g_assert_cmpint(chdir(cwd), ==, 0);
    g_assert_cmpint(block_node_get_length(bs), ==, 65536);
    memset(buf, 0x11, 4096);
    g_assert_cmpint(node_io(bs, BLOCK_OP_WRITE, 0, buf, 4096, 0), ==, 0);
    block_node_unref(bs);
    unlink(path);
    aio_context_unref(ctx);
}

static void test_direct_refused(void)
{
    const char *candidates[] = { "/dev/shm", "/run", "/tmp",
                                 g_getenv("TMPDIR") };
    AioContext *ctx;

    for (size_t i = 0; i < G_N_ELEMENTS(candidates); i++) {
        g_autofree char *path = NULL;
        g_autofree char *opts = NULL;
        g_autofree char *want = NULL;
        int fd;

        if (!candidates[i] || !(path = temp_file_in(candidates[i]))) {
            continue;
        }
        fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
        if (fd >= 0 || errno != EINVAL) {
            if (fd >= 0) {
                close(fd);
            }
            unlink(path);
            continue;
        }
        ctx = ctx_new();
        opts = g_strdup_printf("driver=file,filename=%s,cache.direct=on",
                               path);
        want = g_strdup_printf("cache.direct=on is not supported by the file "
                               "system of '%s'", path);
        open_fails(opts, ctx, want);
        unlink(path);
        aio_context_unref(ctx);
        return;
    }
    g_test_skip("every file system tried (/dev/shm, /run, /tmp, $TMPDIR) "
                "accepts O_DIRECT (tmpfs does since Linux 6.6)");
}

/* ------------------------------------------------------------------------ */
/* Read-only, discard=ignore, no-flush                                       */

static void test_read_only(void)
{
    SmallImage im;
    BlockNode *bs;

    small_image_init(&im, g_get_tmp_dir());
    g_assert_cmpint(chmod(im.path, 0400), ==, 0);
    bs = small_image_open(&im, "read-only=on,discard=unmap", NULL);
    g_assert_true(block_node_is_read_only(bs));
    g_assert_cmpint(node_io(bs, BLOCK_OP_READ, 0, im.buf, SMALL_SIZE, 0), ==,
                    0);
    assert_same(im.buf, im.model, SMALL_SIZE, 0, "read-only read");
    g_assert_cmpint(node_io(bs, BLOCK_OP_WRITE, 0, im.buf, 4096, 0), ==,
                    -EPERM);
    g_assert_cmpint(node_io(bs, BLOCK_OP_WRITE_ZEROES, 0, NULL, 4096, 0), ==,
                    -EPERM);
    g_assert_cmpint(node_io(bs, BLOCK_OP_DISCARD, 0, NULL, 4096, 0), ==,
                    -EPERM);
    g_assert_cmpint(node_io(bs, BLOCK_OP_FLUSH, 0, NULL, 0, 0), ==, 0);
    block_node_unref(bs);
    small_image_cleanup(&im, true);
}

static void test_discard_ignore_no_flush(void)
{
    SmallImage im;
    BlockNode *bs;

    small_image_init(&im, g_get_tmp_dir());
    bs = small_image_open(&im, "discard=ignore,cache.no-flush=on", NULL);
    g_assert_cmpint(node_io(bs, BLOCK_OP_DISCARD, 0, NULL, SMALL_SIZE, 0), ==,
                    0);
    g_assert_cmpint(node_io(bs, BLOCK_OP_FLUSH, 0, NULL, 0, 0), ==, 0);
    g_assert_cmpint(node_io(bs, BLOCK_OP_READ, 0, im.buf, SMALL_SIZE, 0), ==,
                    0);
    assert_same(im.buf, im.model, SMALL_SIZE, 0,
                "discard=ignore keeps the data");
    /* Write-zeroes with may-unmap still zeroes (without deallocating). */
    g_assert_cmpint(node_io(bs, BLOCK_OP_WRITE_ZEROES, 4096, NULL, 8192,
                            BLOCK_REQ_MAY_UNMAP), ==, 0);
    memset(im.model + 4096, 0, 8192);
    block_node_unref(bs);
    small_image_cleanup(&im, true);
}

/* ------------------------------------------------------------------------ */
/* Locking                                                                   */

/* In a child process: try an OFD lock of type on byte; 0 if it was
 * granted, 1 if it conflicted, 2 on any other error. */
static int lock_probe_byte_in_child(const char *path, short type, off_t byte)
{
    pid_t pid = fork();
    int status;

    g_assert_cmpint(pid, >=, 0);
    if (pid == 0) {
        struct flock fl = {
            .l_type = type, .l_whence = SEEK_SET, .l_start = byte,
            .l_len = 1,
        };
        int fd = open(path, type == F_WRLCK ? O_RDWR : O_RDONLY);

        if (fd < 0) {
            _exit(2);
        }
        if (fcntl(fd, F_OFD_SETLK, &fl) == 0) {
            _exit(0);
        }
        _exit(errno == EAGAIN || errno == EACCES ? 1 : 2);
    }
    g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
    g_assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* The same on Spindle's own byte. */
static int lock_probe_in_child(const char *path, short type)
{
    return lock_probe_byte_in_child(path, type, LOCK_BYTE);
}

static void test_locking(void)
{
    AioContext *ctx = ctx_new();
    g_autofree char *path = temp_file_in(g_get_tmp_dir());
    g_autofree char *rw = g_strdup_printf("driver=file,filename=%s", path);
    g_autofree char *rw_off = g_strdup_printf("driver=file,filename=%s,"
                                              "locking=off", path);
    g_autofree char *ro = g_strdup_printf("driver=file,filename=%s,"
                                          "read-only=on", path);
    g_autofree char *ro_on = g_strdup_printf("driver=file,filename=%s,"
                                             "read-only=on,locking=on", path);
    g_autofree char *wmsg = g_strdup_printf("Failed to get write lock on '%s':"
                                            " is another process using the "
                                            "image?", path);
    g_autofree char *rmsg = g_strdup_printf("Failed to get shared lock on "
                                            "'%s'", path);
    BlockNode *a, *b, *c;

    g_assert_cmpint(truncate(path, 65536), ==, 0);

    /* One writer excludes other writers and readers... */
    a = open_ok(rw, ctx);
    open_fails(rw, ctx, wmsg);
    open_fails(ro, ctx, rmsg);
    g_assert_cmpint(lock_probe_in_child(path, F_WRLCK), ==, 1);
    g_assert_cmpint(lock_probe_in_child(path, F_RDLCK), ==, 1);
    /* ...unless they opt out. */
    b = open_ok(rw_off, ctx);
    block_node_unref(b);
    block_node_unref(a);

    /* The lock goes with the node. */
    a = open_ok(rw, ctx);
    block_node_unref(a);
    g_assert_cmpint(lock_probe_in_child(path, F_WRLCK), ==, 0);

    /* Readers coexist, and keep writers out. */
    a = open_ok(ro, ctx);
    b = open_ok(ro_on, ctx);
    g_assert_cmpint(lock_probe_in_child(path, F_RDLCK), ==, 0);
    g_assert_cmpint(lock_probe_in_child(path, F_WRLCK), ==, 1);
    open_fails(rw, ctx, wmsg);
    c = open_ok(rw_off, ctx);
    block_node_unref(c);
    block_node_unref(b);
    block_node_unref(a);

    /* locking=off takes nothing. */
    a = open_ok(rw_off, ctx);
    g_assert_cmpint(lock_probe_in_child(path, F_WRLCK), ==, 0);
    block_node_unref(a);

    unlink(path);
    aio_context_unref(ctx);
}

/*
 * A holder that lets go shortly after the open began (a killed daemon
 * whose io_uring teardown still holds the image): the open waits for it
 * instead of calling the image busy.
 */
static void test_locking_waits_for_a_dying_holder(void)
{
    AioContext *ctx = ctx_new();
    g_autofree char *path = temp_file_in(g_get_tmp_dir());
    g_autofree char *rw = g_strdup_printf("driver=file,filename=%s", path);
    int ready[2], status;
    gint64 start;
    BlockNode *a;
    char byte;
    pid_t pid;

    g_assert_cmpint(truncate(path, 65536), ==, 0);
    g_assert_cmpint(pipe(ready), ==, 0);
    pid = fork();
    g_assert_cmpint(pid, >=, 0);
    if (pid == 0) {
        struct flock fl = {
            .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = LOCK_BYTE,
            .l_len = 1,
        };
        int fd = open(path, O_RDWR);

        if (fd < 0 || fcntl(fd, F_OFD_SETLK, &fl) < 0 ||
            write(ready[1], "x", 1) != 1) {
            _exit(2);
        }
        g_usleep(200 * 1000);
        _exit(0);               /* the lock goes with the process */
    }
    close(ready[1]);
    g_assert_cmpint(read(ready[0], &byte, 1), ==, 1);
    close(ready[0]);
    start = g_get_monotonic_time();
    a = open_ok(rw, ctx);
    /* It cannot have got the lock before the holder was gone. */
    g_assert_cmpint(g_get_monotonic_time() - start, >=, 100 * 1000);
    g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
    g_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    block_node_unref(a);
    unlink(path);
    aio_context_unref(ctx);
}

/* A 64 KiB image in the temporary directory and a context to open it in. */
typedef struct LockImage {
    AioContext *ctx;
    char *path;
} LockImage;

static void lock_image_init(LockImage *im)
{
    im->ctx = ctx_new();
    im->path = temp_file_in(g_get_tmp_dir());
    g_assert_cmpint(truncate(im->path, 65536), ==, 0);
}

static void lock_image_cleanup(LockImage *im)
{
    unlink(im->path);
    g_free(im->path);
    aio_context_unref(im->ctx);
}

/*
 * QEMU's lock bytes (docs/block.md): 100 + n while a process holds QEMU's
 * permission n, 200 + n while it does not share it; n is 0 consistent
 * read, 1 write, 2 write unchanged, 3 resize.
 */
#define QEMU_PERM_BYTE(n)       (100 + (n))
#define QEMU_SHARED_BYTE(n)     (200 + (n))
#define QEMU_PERMS              4

/* Which of QEMU's bytes another process finds locked: bit n for 100 + n,
 * bit 4 + n for 200 + n. */
static unsigned qemu_bytes_held(const char *path)
{
    unsigned held = 0;

    for (int n = 0; n < QEMU_PERMS; n++) {
        if (lock_probe_byte_in_child(path, F_WRLCK, QEMU_PERM_BYTE(n))) {
            held |= 1u << n;
        }
        if (lock_probe_byte_in_child(path, F_WRLCK, QEMU_SHARED_BYTE(n))) {
            held |= 1u << (QEMU_PERMS + n);
        }
    }
    return held;
}

/* The bytes each kind of node holds, in qemu_bytes_held()'s bits. */
#define HELD_PERM(n)            (1u << (n))
#define HELD_UNSHARED(n)        (1u << (QEMU_PERMS + (n)))
#define READER_BYTES            (HELD_PERM(0) | HELD_UNSHARED(1) | \
                                 HELD_UNSHARED(3))
#define WRITER_BYTES            (READER_BYTES | HELD_PERM(1) | HELD_PERM(3))

/*
 * A writable node holds consistent read, write and resize and shares
 * neither write nor resize; a read-only node holds consistent read only.
 * Both let go of everything when closed.
 */
static void test_locking_qemu_bytes(void)
{
    LockImage im;
    g_autofree char *rw = NULL, *ro = NULL, *off = NULL;
    BlockNode *a;

    lock_image_init(&im);
    rw = g_strdup_printf("driver=file,filename=%s", im.path);
    ro = g_strdup_printf("driver=file,filename=%s,read-only=on", im.path);
    off = g_strdup_printf("driver=file,filename=%s,locking=off", im.path);

    a = open_ok(rw, im.ctx);
    g_assert_cmphex(qemu_bytes_held(im.path), ==, WRITER_BYTES);
    block_node_unref(a);
    g_assert_cmphex(qemu_bytes_held(im.path), ==, 0);

    a = open_ok(ro, im.ctx);
    g_assert_cmphex(qemu_bytes_held(im.path), ==, READER_BYTES);
    block_node_unref(a);

    a = open_ok(off, im.ctx);
    g_assert_cmphex(qemu_bytes_held(im.path), ==, 0);
    block_node_unref(a);
    lock_image_cleanup(&im);
}

/* Another process holding a read lock on one byte, as QEMU locks, until
 * holder_stop(). */
typedef struct Holder {
    pid_t pid;
    int release;                 /* closing it lets the holder exit */
} Holder;

static Holder holder_start(const char *path, off_t byte)
{
    int ready[2], release[2];
    Holder h;
    char c;

    g_assert_cmpint(pipe(ready), ==, 0);
    g_assert_cmpint(pipe(release), ==, 0);
    h.pid = fork();
    g_assert_cmpint(h.pid, >=, 0);
    if (h.pid == 0) {
        struct flock fl = {
            .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = byte,
            .l_len = 1,
        };
        int fd = open(path, O_RDONLY);

        close(release[1]);
        if (fd < 0 || fcntl(fd, F_OFD_SETLK, &fl) < 0 ||
            write(ready[1], "x", 1) != 1) {
            _exit(2);
        }
        _exit(read(release[0], &c, 1) == 0 ? 0 : 2);
    }
    close(ready[1]);
    close(release[0]);
    g_assert_cmpint(read(ready[0], &c, 1), ==, 1);
    close(ready[0]);
    h.release = release[1];
    return h;
}

static void holder_stop(Holder *h)
{
    int status;

    close(h->release);
    g_assert_cmpint(waitpid(h->pid, &status, 0), ==, h->pid);
    g_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* One of QEMU's users, by the byte it holds, and what each kind of node
 * makes of it: NULL if it opens, else a part of its error. */
typedef struct QemuUserCase {
    off_t byte;
    const char *writable;
    const char *read_only;
} QemuUserCase;

static const QemuUserCase qemu_writer = {
    /* qemu-io, qemu-img resize, a writable qemu-storage-daemon export */
    QEMU_PERM_BYTE(1),
    "write lock on '%s': is another process using the image? (another "
    "process holds QEMU's \"write\" permission: lock byte 101)",
    "shared lock on '%s': is another process writing to the image? "
    "(another process holds QEMU's \"write\" permission: lock byte 101)",
};
static const QemuUserCase qemu_guest_disk = {
    /* a QEMU guest's disk, even a read-only one, does not share write */
    QEMU_SHARED_BYTE(1),
    "(another process does not share QEMU's \"write\" permission: lock "
    "byte 201)",
    NULL,
};
static const QemuUserCase qemu_sharing_reader = {
    /* qemu-io -r, a read-only qemu-storage-daemon export */
    QEMU_PERM_BYTE(0), NULL, NULL,
};
static const QemuUserCase qemu_resizer = {
    QEMU_PERM_BYTE(3),
    "(another process holds QEMU's \"resize\" permission: lock byte 103)",
    "(another process holds QEMU's \"resize\" permission: lock byte 103)",
};
static const QemuUserCase qemu_no_readers = {
    QEMU_SHARED_BYTE(0),
    "(another process does not share QEMU's \"consistent read\" "
    "permission: lock byte 200)",
    "(another process does not share QEMU's \"consistent read\" "
    "permission: lock byte 200)",
};

static void check_open_beside(const char *opts, const char *path,
                              AioContext *ctx, const char *error)
{
    g_autofree char *needle = g_strdup_printf(error ? error : "", path);
    BlockNode *bs;

    if (!error) {
        bs = open_ok(opts, ctx);
        block_node_unref(bs);
        return;
    }
    open_fails(opts, ctx, needle);
}

/*
 * A node beside one of QEMU's users: it opens where QEMU's rules let it,
 * and where not its error names QEMU's permission; a refused open keeps
 * none of the bytes it took before it saw the conflict.
 */
static void test_locking_beside_qemu(const void *data)
{
    const QemuUserCase *c = data;
    LockImage im;
    g_autofree char *rw = NULL, *ro = NULL;
    Holder h;

    lock_image_init(&im);
    rw = g_strdup_printf("driver=file,filename=%s", im.path);
    ro = g_strdup_printf("driver=file,filename=%s,read-only=on", im.path);
    h = holder_start(im.path, c->byte);
    check_open_beside(rw, im.path, im.ctx, c->writable);
    check_open_beside(ro, im.path, im.ctx, c->read_only);
    g_assert_cmpint(lock_probe_in_child(im.path, F_WRLCK), ==, 0);
    g_assert_cmphex(qemu_bytes_held(im.path) &
                    ~(c->byte < QEMU_SHARED_BYTE(0) ?
                      HELD_PERM(c->byte - QEMU_PERM_BYTE(0)) :
                      HELD_UNSHARED(c->byte - QEMU_SHARED_BYTE(0))), ==, 0);
    holder_stop(&h);
    lock_image_cleanup(&im);
}

static void set_active_ok(BlockNode *bs, bool active)
{
    Error *err = NULL;

    if (!block_node_set_active(bs, active, &err)) {
        g_error("%s", error_get_pretty(err));
    }
}

/* Every request but a read fails with -EPERM on an inactive node. */
static void check_inactive_refuses(BlockNode *bs)
{
    g_autofree uint8_t *buf = aligned_buf(4096);

    g_assert_false(block_node_is_active(bs));
    g_assert_cmpint(node_io(bs, BLOCK_OP_READ, 0, buf, 4096, 0), ==, 0);
    g_assert_cmpint(node_io(bs, BLOCK_OP_WRITE, 0, buf, 4096, 0), ==, -EPERM);
    g_assert_cmpint(node_io(bs, BLOCK_OP_WRITE_ZEROES, 0, NULL, 4096, 0), ==,
                    -EPERM);
    g_assert_cmpint(node_io(bs, BLOCK_OP_DISCARD, 0, NULL, 4096, 0), ==,
                    -EPERM);
    g_assert_cmpint(node_io(bs, BLOCK_OP_FLUSH, 0, NULL, 0, 0), ==, -EPERM);
}

/*
 * active=off and block_node_set_active(): an inactive node holds no lock
 * and writes nothing; activating takes the lock or fails clearly while
 * someone else holds it; inactivating flushes and lets go.
 */
static void test_inactive(void)
{
    LockImage im;
    g_autofree char *rw = NULL, *off = NULL, *busy = NULL;
    g_autofree uint8_t *buf = aligned_buf(4096);
    Error *err = NULL;
    BlockNode *a, *b;

    lock_image_init(&im);
    rw = g_strdup_printf("driver=file,filename=%s", im.path);
    off = g_strdup_printf("driver=file,node-name=a,filename=%s,active=off",
                          im.path);
    busy = g_strdup_printf("Cannot activate node 'a': Failed to get write "
                           "lock on '%s': is another process using the "
                           "image?", im.path);
    a = open_ok(off, im.ctx);
    check_inactive_refuses(a);
    /* No lock: another process, or another node here, may write. */
    g_assert_cmpint(lock_probe_in_child(im.path, F_WRLCK), ==, 0);
    b = open_ok(rw, im.ctx);

    g_assert_false(block_node_set_active(a, true, &err));
    g_assert_cmpstr(error_get_pretty(err), ==, busy);
    g_clear_pointer(&err, error_free);
    check_inactive_refuses(a);

    block_node_unref(b);
    set_active_ok(a, true);
    g_assert_true(block_node_is_active(a));
    g_assert_cmpint(lock_probe_in_child(im.path, F_WRLCK), ==, 1);
    memset(buf, 0x5a, 4096);
    g_assert_cmpint(node_io(a, BLOCK_OP_WRITE, 4096, buf, 4096, 0), ==, 0);

    /* Going inactive: flushed, unlocked, and writes stop. */
    set_active_ok(a, false);
    set_active_ok(a, false);
    g_assert_cmpint(lock_probe_in_child(im.path, F_WRLCK), ==, 0);
    check_inactive_refuses(a);
    g_assert_false(block_node_resize(a, 131072, &err));
    g_assert_cmpstr(error_get_pretty(err), ==, "Node 'a' is inactive");
    g_clear_pointer(&err, error_free);
    g_assert_cmpint(node_io(a, BLOCK_OP_READ, 4096, buf, 4096, 0), ==, 0);
    g_assert_cmpint(buf[0], ==, 0x5a);
    b = open_ok(rw, im.ctx);
    block_node_unref(b);
    block_node_unref(a);
    lock_image_cleanup(&im);
}

/* A filter over an inactive file: the state goes down the chain. */
static void test_inactive_chain(void)
{
    LockImage im;
    g_autofree char *inline_off = NULL, *file_off = NULL;
    Error *err = NULL;
    BlockNode *r, *f, *g;

    lock_image_init(&im);
    inline_off = g_strdup_printf(
        "{\"driver\": \"raw\", \"node-name\": \"r\", \"active\": false, "
        "\"file\": {\"driver\": \"file\", \"node-name\": \"f\", "
        "\"filename\": \"%s\"}}", im.path);
    file_off = g_strdup_printf(
        "driver=file,node-name=g,filename=%s,active=off", im.path);
    /* An inline child inherits active=off: no lock is taken at all. */
    r = open_ok(inline_off, im.ctx);
    f = block_node_get_child(r);
    g_assert_false(block_node_is_active(r));
    g_assert_false(block_node_is_active(f));
    g_assert_cmpint(lock_probe_in_child(im.path, F_WRLCK), ==, 0);
    check_inactive_refuses(r);

    /* Activating the filter activates the file below it. */
    set_active_ok(r, true);
    g_assert_true(block_node_is_active(f));
    g_assert_cmpint(lock_probe_in_child(im.path, F_WRLCK), ==, 1);
    g_assert_false(block_node_set_active(f, false, &err));
    g_assert_cmpstr(error_get_pretty(err), ==, "Cannot inactivate node 'f': "
                    "node 'r' above it is active (inactivate that one)");
    g_clear_pointer(&err, error_free);
    set_active_ok(r, false);
    g_assert_false(block_node_is_active(f));
    g_assert_cmpint(lock_probe_in_child(im.path, F_WRLCK), ==, 0);
    block_node_unref(r);

    /* An active node cannot be opened over an inactive one. */
    g = open_ok(file_off, im.ctx);
    open_fails("driver=raw,node-name=r2,file=g", im.ctx,
               "Parameter 'file': node 'g' is inactive");
    block_node_unref(g);
    lock_image_cleanup(&im);
}

/* ------------------------------------------------------------------------ */
/* Engines: the default, and moving between contexts                         */

static uint64_t engine_requests(const char *aio, AioContext *ctx)
{
    const BlockEngineOps *ops = block_engine_find(aio);
    BlockEngineStats st;

    if (!ops || !block_engine_get_stats(ops, ctx, &st)) {
        return 0;
    }
    return st.requests;
}

/* Whether aio=name can be opened on path in ctx. */
static bool engine_works(const char *aio, const char *path, bool direct,
                         AioContext *ctx)
{
    g_autofree char *opts = g_strdup_printf("driver=file,filename=%s,aio=%s,"
                                            "cache.direct=%s", path, aio,
                                            direct ? "on" : "off");
    BlockNode *bs;

    if (!engine_built(aio)) {
        return false;
    }
    bs = block_node_open_str(opts, ctx, NULL);
    if (bs) {
        block_node_unref(bs);
    }
    return bs != NULL;
}

/* Read once through a node opened without aio=; which engine counted it? */
static void check_default_engine(const char *path, bool direct)
{
    AioContext *ctx = ctx_new();
    g_autofree char *opts = g_strdup_printf("driver=file,filename=%s,"
                                            "cache.direct=%s", path,
                                            direct ? "on" : "off");
    g_autofree uint8_t *buf = aligned_buf(4096);
    const char *want;
    uint64_t before_uring, before_native;
    BlockNode *bs;

    if (engine_works("io_uring", path, direct, ctx)) {
        want = "io_uring";
    } else if (direct && engine_works("native", path, direct, ctx)) {
        want = "native";
    } else {
        want = "threads";
    }
    before_uring = engine_requests("io_uring", ctx);
    before_native = engine_requests("native", ctx);
    bs = open_ok(opts, ctx);
    g_assert_cmpint(node_io(bs, BLOCK_OP_READ, 0, buf, 4096, 0), ==, 0);
    block_node_unref(bs);
    if (!strcmp(want, "io_uring")) {
        g_assert_cmpuint(engine_requests("io_uring", ctx), >, before_uring);
    } else if (!strcmp(want, "native")) {
        g_assert_cmpuint(engine_requests("native", ctx), >, before_native);
    } else {
        g_assert_cmpuint(engine_requests("io_uring", ctx), ==, before_uring);
        g_assert_cmpuint(engine_requests("native", ctx), ==, before_native);
    }
    g_test_message("default engine (cache.direct=%s): %s",
                   direct ? "on" : "off", want);
    aio_context_unref(ctx);
}

static void test_default_engine(void)
{
    const char *ddir = direct_dir();
    g_autofree char *path = temp_file_in(g_get_tmp_dir());
    g_autofree char *dpath = ddir ? temp_file_in(ddir) : NULL;

    g_assert_cmpint(truncate(path, 65536), ==, 0);
    check_default_engine(path, false);
    if (dpath) {
        g_assert_cmpint(truncate(dpath, 65536), ==, 0);
        check_default_engine(dpath, true);
        unlink(dpath);
    }
    unlink(path);
}

typedef struct MoveJob {
    BlockNode *bs;
    const char *aio;
    uint8_t *model;
    int64_t size;
    uint64_t requests;           /* by the IOThread context's engine */
} MoveJob;

/* In the IOThread: write a pattern, read everything back. */
static void move_job_in_iothread(void *opaque)
{
    MoveJob *job = opaque;
    g_autofree uint8_t *buf = aligned_buf(job->size);

    fill_random(job->model + 8192, 16384);
    g_assert_cmpint(node_io(job->bs, BLOCK_OP_WRITE, 8192,
                            job->model + 8192, 16384, 0), ==, 0);
    g_assert_cmpint(node_io(job->bs, BLOCK_OP_READ, 0, buf, job->size, 0),
                    ==, 0);
    assert_same(buf, job->model, job->size, 0, "read in the IOThread");
    job->requests = engine_requests(job->aio,
                                    block_node_get_aio_context(job->bs));
}

static void check_move(const char *aio, const char *dir, bool direct)
{
    SmallImage im;
    g_autofree char *extra = g_strdup_printf("aio=%s,cache.direct=%s", aio,
                                             direct ? "on" : "off");
    MoveJob job = { .aio = aio, .size = SMALL_SIZE };
    IOThread *iot;
    AioContext *iot_ctx;
    BlockNode *bs;
    Error *err = NULL;

    small_image_init(&im, dir);
    job.model = im.model;
    bs = small_image_open(&im, extra, aio);
    if (!bs) {
        small_image_cleanup(&im, false);
        return;
    }
    iot = iot_new("iot-move", NULL);
    iot_ctx = iothread_get_aio_context(iot);
    g_assert_true(block_node_set_aio_context(bs, iot_ctx, &err));
    g_assert_true(block_node_get_aio_context(bs) == iot_ctx);
    job.bs = bs;
    aio_run_sync(iot_ctx, move_job_in_iothread, &job);
    if (strcmp(aio, "threads")) {
        /* The engine instance of the IOThread's context did the work. */
        g_assert_cmpuint(job.requests, >=, 2);
    }
    g_assert_true(block_node_set_aio_context(bs, im.ctx, &err));
    g_assert_cmpint(node_io(bs, BLOCK_OP_READ, 0, im.buf, SMALL_SIZE, 0), ==,
                    0);
    assert_same(im.buf, im.model, SMALL_SIZE, 0, "read after moving back");
    block_node_unref(bs);
    iothread_destroy(iot);
    small_image_cleanup(&im, true);
}

/* native with O_DIRECT where some directory allows it (the engine is only
 * asynchronous with it); the others buffered. */
static void test_move(const void *arg)
{
    EngineVariant c = engine_variant(arg);
    const char *dir = !strcmp(c.engine, "native") ? direct_dir() : NULL;

    check_move(c.engine, dir ? dir : g_get_tmp_dir(), dir != NULL);
}

/* ------------------------------------------------------------------------ */
/* O_DIRECT on a file whose size is not a multiple of the alignment          */

static void check_unaligned_tail(const void *arg)
{
    EngineVariant c = engine_variant(arg);
    const char *dir = direct_dir();
    const int64_t size = 65536 + 1000;
    g_autofree char *path = NULL;
    g_autofree char *opts = NULL;
    g_autofree uint8_t *model = g_malloc(size);
    g_autofree uint8_t *buf = g_malloc(size);
    AioContext *ctx;
    BlockNode *bs;
    struct stat st;

    if (!dir) {
        g_test_skip("no file system with O_DIRECT");
        return;
    }
    ctx = ctx_new();
    path = temp_file_in(dir);
    opts = g_strdup_printf("driver=file,filename=%s,aio=%s,cache.direct=on",
                           path, c.engine);
    write_image(path, model, size);
    bs = open_or_skip(opts, c.engine, ctx);
    if (bs) {
        g_assert_cmpint(node_io(bs, BLOCK_OP_READ, 0, buf, size, 0), ==, 0);
        assert_same(buf, model, size, 0, "read up to an unaligned end");
        g_assert_cmpint(node_io(bs, BLOCK_OP_READ, size - 10, buf, 10, 0),
                        ==, 0);
        assert_same(buf, model + size - 10, 10, size - 10, "last bytes");
        fill_random(model + size - 300, 300);
        g_assert_cmpint(node_io(bs, BLOCK_OP_WRITE, size - 300,
                                model + size - 300, 300, 0), ==, 0);
        block_node_unref(bs);
        g_assert_cmpint(stat(path, &st), ==, 0);
        g_assert_cmpint(st.st_size, ==, size);
        check_with_pread(path, model, size);
    }
    unlink(path);
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */

/* Each engine runs these. */
static const VariantCheck engine_tests[] = {
    { "/file-posix/%s/buffered", test_file_matrix },
    { "/file-posix/%s/direct", test_file_matrix, &o_direct },
    { "/file-posix/blkdev/%s/buffered", test_blkdev_matrix },
    { "/file-posix/blkdev/%s/direct", test_blkdev_matrix, &o_direct },
    { "/file-posix/move/%s", test_move },
    { "/file-posix/unaligned-tail/%s", check_unaligned_tail },
};

static const TestCase tests[] = {
    { "/file-posix/threads/direct-probed", test_probed_direct },
    { "/file-posix/options/missing-file", test_missing_file },
    { "/file-posix/options/bad", test_bad_options },
    { "/file-posix/options/not-a-file", test_not_a_file },
    { "/file-posix/options/relative-path", test_relative_path },
    { "/file-posix/options/direct-refused", test_direct_refused },
    { "/file-posix/read-only", test_read_only },
    { "/file-posix/discard-ignore-no-flush",
      test_discard_ignore_no_flush },
    { "/file-posix/locking", test_locking },
    { "/file-posix/locking-waits-for-a-dying-holder",
      test_locking_waits_for_a_dying_holder },
    { "/file-posix/locking/qemu-bytes", test_locking_qemu_bytes },
    { "/file-posix/locking/beside-qemu/writer", NULL,
      test_locking_beside_qemu, &qemu_writer },
    { "/file-posix/locking/beside-qemu/guest-disk", NULL,
      test_locking_beside_qemu, &qemu_guest_disk },
    { "/file-posix/locking/beside-qemu/sharing-reader", NULL,
      test_locking_beside_qemu, &qemu_sharing_reader },
    { "/file-posix/locking/beside-qemu/resizer", NULL,
      test_locking_beside_qemu, &qemu_resizer },
    { "/file-posix/locking/beside-qemu/no-readers", NULL,
      test_locking_beside_qemu, &qemu_no_readers },
    { "/file-posix/inactive", test_inactive },
    { "/file-posix/inactive-chain", test_inactive_chain },
    { "/file-posix/default-engine", test_default_engine },
};

static void add_engine_tests(void)
{
    test_add_variants(all_engines, G_N_ELEMENTS(all_engines), engine_tests,
                      G_N_ELEMENTS(engine_tests), 50);
}

/* Below the 60 s meson timeout, so that the watchdog reports first. */
TEST_MAIN_SETUP(tests, 50, add_engine_tests, NULL)

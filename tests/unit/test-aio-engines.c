/*
 * Unit tests for the I/O engines (block/aio-engine.h): "native" (Linux
 * AIO), "io_uring" and "threads", driven directly, without the file driver.
 *
 * Theory of operation: each test makes an AioContext whose home thread is
 * the test's main thread, gets the engine's instance for it, opens a
 * temporary file (buffered, or O_DIRECT where the file system allows it)
 * and fills BlockRequests by hand.  The engines complete requests with
 * block_request_complete(), which accounts them to the node in the
 * request's private area; so each request is attributed to a null-co node
 * (the "owner"), exactly as block_node_submit() would do, and its callback
 * records the result.  What was written is kept in an in-memory model and
 * every read is compared with it; the engine's counters
 * (BlockEngineStats) show how requests were batched and how completions
 * were found (by the poll callback or through the eventfd).
 *
 * A combination the machine cannot do is skipped with the reason: an
 * engine not built or not available (io_uring disabled), a file system
 * without O_DIRECT (tmpfs).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <glib.h>

#include "block/aio-engine.h"
#include "block/block-int.h"
#include "test-helpers.h"

#define FILE_SIZE       (4 * 1024 * 1024)
#define ALIGN           4096            /* O_DIRECT offsets, lengths, buffers */
#define SLOTS           8               /* disjoint regions written at once */
#define ROUNDS          16
#define MAX_IO          (128 * 1024)
#define MAX_IOV         8

/* ------------------------------------------------------------------------ */
/* Environment: context, owner node, engine, file                            */

typedef struct Env {
    const BlockEngineOps *ops;
    AioContext *ctx;
    BlockNode *owner;            /* what block_request_complete() accounts */
    BlockEngine *e;
    char *path;
    int fd;
    bool direct;
    unsigned pending;            /* requests submitted, not completed */
} Env;

typedef struct Io {
    BlockRequest req;            /* first: the callback gets &io->req */
    Env *env;
    struct iovec iov[MAX_IOV];
    int ret;
    bool done;
} Io;

static int open_file(const char *path, int flags, bool direct)
{
    return open(path, flags | O_CLOEXEC | (direct ? O_DIRECT : 0));
}

/* Set up env for engine; false (the test skipped) if the host cannot. */
static bool env_open(Env *env, const char *engine, bool direct)
{
    Error *err = NULL;
    int fd;

    memset(env, 0, sizeof(*env));
    env->ops = block_engine_find(engine);
    if (!env->ops) {
        g_test_skip("this engine was not built (library missing)");
        return false;
    }
    env->ctx = ctx_new();
    env->owner = block_node_open_str("driver=null-co,size=1M", env->ctx,
                                     &err);
    g_assert_no_error(err);
    env->e = block_engine_get(env->ops, env->ctx, &err);
    if (!env->e) {
        g_autofree char *why = g_strdup_printf("engine %s unavailable: %s",
                                               engine, err->message);

        g_test_skip(why);
        error_free(err);
        block_node_unref(env->owner);
        aio_context_unref(env->ctx);
        return false;
    }
    g_assert_no_error(err);

    env->path = g_build_filename(g_get_tmp_dir(),
                                 "spindle-aio-engines-XXXXXX", NULL);
    fd = g_mkstemp(env->path);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, FILE_SIZE), ==, 0);
    close(fd);
    env->direct = direct;
    env->fd = open_file(env->path, O_RDWR, direct);
    if (env->fd < 0 && direct && errno == EINVAL) {
        g_test_skip("the temporary directory's file system refuses O_DIRECT "
                    "(tmpfs?); set TMPDIR to a disk file system");
        unlink(env->path);
        g_free(env->path);
        block_node_unref(env->owner);
        aio_context_unref(env->ctx);
        return false;
    }
    g_assert_cmpint(env->fd, >=, 0);
    return true;
}

static void env_close(Env *env)
{
    g_assert_cmpuint(env->pending, ==, 0);
    g_assert_cmpuint(block_node_in_flight(env->owner), ==, 0);
    if (env->fd >= 0) {
        close(env->fd);
    }
    unlink(env->path);
    g_free(env->path);
    block_node_unref(env->owner);
    aio_context_unref(env->ctx);    /* destroys the engine instance */
}

static void env_stats(Env *env, BlockEngineStats *out)
{
    g_assert_true(block_engine_get_stats(env->ops, env->ctx, out));
}

static bool env_is(Env *env, const char *name)
{
    return !strcmp(env->ops->name, name);
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */

static void io_done(BlockRequest *req, int ret)
{
    Io *io = (Io *)req;

    g_assert_true(aio_context_in_home_thread(io->env->ctx));
    g_assert_false(io->done);
    io->ret = ret;
    io->done = true;
    io->env->pending--;
}

/* Cut buf[0..bytes) (a multiple of unit) into 1..MAX_IOV pieces at
 * multiples of unit; some pieces may be empty. */
static int split_iov(struct iovec *iov, void *buf, int64_t bytes,
                     unsigned unit)
{
    int64_t cuts[MAX_IOV + 1];
    int64_t units = bytes / unit;
    int n = g_test_rand_int_range(1, MAX_IOV + 1);

    cuts[0] = 0;
    cuts[n] = bytes;
    for (int i = 1; i < n; i++) {
        cuts[i] = (int64_t)unit * g_test_rand_int_range(0, units + 1);
    }
    /* Sort the inner cuts (insertion sort, n is small). */
    for (int i = 2; i < n; i++) {
        for (int j = i; j > 1 && cuts[j - 1] > cuts[j]; j--) {
            int64_t t = cuts[j];

            cuts[j] = cuts[j - 1];
            cuts[j - 1] = t;
        }
    }
    for (int i = 0; i < n; i++) {
        iov[i] = (struct iovec) {
            .iov_base = (char *)buf + cuts[i],
            .iov_len = cuts[i + 1] - cuts[i],
        };
    }
    return n;
}

/* Fill io for op over buf[0..bytes), cut into random pieces. */
static void io_prepare(Io *io, Env *env, BlockOp op, int64_t offset,
                       void *buf, int64_t bytes, unsigned flags)
{
    memset(io, 0, sizeof(*io));
    io->env = env;
    io->req = (BlockRequest) {
        .op = op,
        .flags = flags,
        .offset = offset,
        .bytes = bytes,
        .cb = io_done,
    };
    if (op == BLOCK_OP_READ || op == BLOCK_OP_WRITE) {
        io->req.iov = io->iov;
        io->req.niov = split_iov(io->iov, buf, bytes, env->direct ? ALIGN : 1);
    }
}

/* Hand io to the engine on fd, as block_node_submit() would. */
static void io_start_fd(Io *io, int fd)
{
    Env *env = io->env;
    BlockRequestInt *ri = block_req_int(&io->req);

    memset(&io->req.priv, 0, sizeof(io->req.priv));
    ri->node = env->owner;
    ri->queue = env->owner->default_q;
    env->owner->default_q->in_flight++;
    env->pending++;
    env->ops->submit(env->e, fd, &io->req);
    /* Completions never come from inside submit. */
    g_assert_false(io->done);
}

static void io_start(Io *io)
{
    io_start_fd(io, io->env->fd);
}

static void env_wait(Env *env)
{
    while (env->pending > 0) {
        aio_poll(env->ctx, true);
    }
}

/* One request, waited for; its result. */
static int env_io(Env *env, BlockOp op, int64_t offset, void *buf,
                  int64_t bytes, unsigned flags)
{
    Io io;

    io_prepare(&io, env, op, offset, buf, bytes, flags);
    io_start(&io);
    env_wait(env);
    g_assert_true(io.done);
    return io.ret;
}

static void *aligned_buf(size_t size)
{
    return test_aligned_buf(ALIGN, size);
}

/* A random range inside slot `slot`, aligned to `unit`. */
static void random_range(unsigned slot, unsigned unit, int64_t *offset,
                         int64_t *bytes)
{
    int64_t slot_size = FILE_SIZE / SLOTS;
    int64_t max = MIN(MAX_IO, slot_size) / unit;
    int64_t len = unit * g_test_rand_int_range(1, max + 1);
    int64_t start = unit * g_test_rand_int_range(0, (slot_size - len) / unit
                                                 + 1);

    *offset = slot * slot_size + start;
    *bytes = len;
}

/* Write the whole file with random data through plain pwrite. */
static void fill_file(Env *env, uint8_t *model)
{
    int fd = open(env->path, O_WRONLY | O_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    fill_random(model, FILE_SIZE);
    g_assert_cmpint(pwrite(fd, model, FILE_SIZE, 0), ==, FILE_SIZE);
    close(fd);
}

/* ------------------------------------------------------------------------ */
/* Round trips                                                               */

/* SLOTS random writes in one loop turn, then SLOTS random reads. */
static void roundtrip_round(Env *env, uint8_t *model, uint8_t **bufs)
{
    unsigned unit = env->direct ? ALIGN : 1;
    Io io[SLOTS];
    int64_t off[SLOTS], len[SLOTS];

    for (unsigned i = 0; i < SLOTS; i++) {
        unsigned flags = g_test_rand_bit() ? BLOCK_REQ_FUA : 0;

        random_range(i, unit, &off[i], &len[i]);
        fill_random(bufs[i], len[i]);
        io_prepare(&io[i], env, BLOCK_OP_WRITE, off[i], bufs[i], len[i],
                   flags);
        io_start(&io[i]);
    }
    env_wait(env);
    for (unsigned i = 0; i < SLOTS; i++) {
        g_assert_cmpint(io[i].ret, ==, 0);
        memcpy(model + off[i], bufs[i], len[i]);
    }

    for (unsigned i = 0; i < SLOTS; i++) {
        random_range(i, unit, &off[i], &len[i]);
        memset(bufs[i], 0x5a, len[i]);
        io_prepare(&io[i], env, BLOCK_OP_READ, off[i], bufs[i], len[i], 0);
        io_start(&io[i]);
    }
    env_wait(env);
    for (unsigned i = 0; i < SLOTS; i++) {
        g_assert_cmpint(io[i].ret, ==, 0);
        assert_same(bufs[i], model + off[i], len[i], off[i], "read back");
    }
}

static void check_roundtrip(const void *arg)
{
    EngineVariant c = engine_variant(arg);
    Env env;
    g_autofree uint8_t *model = NULL;
    uint8_t *bufs[SLOTS];
    BlockEngineStats st;

    if (!env_open(&env, c.engine, c.direct)) {
        return;
    }
    model = g_malloc0(FILE_SIZE);
    for (unsigned i = 0; i < SLOTS; i++) {
        bufs[i] = aligned_buf(MAX_IO);
    }
    for (unsigned r = 0; r < ROUNDS; r++) {
        roundtrip_round(&env, model, bufs);
    }
    g_assert_cmpint(env_io(&env, BLOCK_OP_FLUSH, 0, NULL, 0, 0), ==, 0);
    env_stats(&env, &st);
    g_assert_cmpuint(st.completions, ==, ROUNDS * SLOTS * 2 + 1);
    g_assert_cmpuint(st.completions_polled, <=, st.completions);
    g_assert_cmpuint(st.requests, >=, st.completions - st.resubmits);
    for (unsigned i = 0; i < SLOTS; i++) {
        free(bufs[i]);
    }
    env_close(&env);
}

/* ------------------------------------------------------------------------ */
/* Data on disk: write, flush, close, reopen, read back                      */

static void check_persist(const void *arg)
{
    EngineVariant c = engine_variant(arg);
    Env env;
    g_autofree uint8_t *model = NULL;
    g_autofree uint8_t *plain = NULL;
    uint8_t *buf;
    int64_t off, len;

    if (!env_open(&env, c.engine, c.direct)) {
        return;
    }
    model = g_malloc0(FILE_SIZE);
    buf = aligned_buf(MAX_IO);
    for (unsigned i = 0; i < SLOTS; i++) {
        random_range(i, c.direct ? ALIGN : 1, &off, &len);
        fill_random(buf, len);
        g_assert_cmpint(env_io(&env, BLOCK_OP_WRITE, off, buf, len, 0), ==, 0);
        memcpy(model + off, buf, len);
    }
    g_assert_cmpint(env_io(&env, BLOCK_OP_FLUSH, 0, NULL, 0, 0), ==, 0);
    g_assert_cmpint(close(env.fd), ==, 0);

    /* What a fresh open of the file sees, without the engine... */
    plain = g_malloc(FILE_SIZE);
    env.fd = open_file(env.path, O_RDONLY, false);
    g_assert_cmpint(env.fd, >=, 0);
    g_assert_cmpint(pread(env.fd, plain, FILE_SIZE, 0), ==, FILE_SIZE);
    assert_same(plain, model, FILE_SIZE, 0, "pread after reopen");
    close(env.fd);

    /* ...and through it, on a new file descriptor. */
    env.fd = open_file(env.path, O_RDONLY, c.direct);
    g_assert_cmpint(env.fd, >=, 0);
    for (int64_t pos = 0; pos < FILE_SIZE; pos += MAX_IO) {
        g_assert_cmpint(env_io(&env, BLOCK_OP_READ, pos, buf, MAX_IO, 0),
                        ==, 0);
        assert_same(buf, model + pos, MAX_IO, pos, "engine read after reopen");
    }
    free(buf);
    env_close(&env);
}

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

/* Good and bad requests mixed in one batch: each gets its own result. */
static void check_ebadf(const void *arg)
{
    EngineVariant c = engine_variant(arg);
    Env env;
    uint8_t bufs[5][4096];
    Io io[5];
    int wronly, rdonly;

    if (!env_open(&env, c.engine, false)) {
        return;
    }
    wronly = open_file(env.path, O_WRONLY, false);
    rdonly = open_file(env.path, O_RDONLY, false);
    g_assert_cmpint(wronly, >=, 0);
    g_assert_cmpint(rdonly, >=, 0);

    io_prepare(&io[0], &env, BLOCK_OP_READ, 0, bufs[0], 4096, 0);
    io_prepare(&io[1], &env, BLOCK_OP_READ, 4096, bufs[1], 4096, 0);
    io_prepare(&io[2], &env, BLOCK_OP_WRITE, 8192, bufs[2], 4096, 0);
    io_prepare(&io[3], &env, BLOCK_OP_WRITE, 12288, bufs[3], 4096, 0);
    io_prepare(&io[4], &env, BLOCK_OP_READ, 16384, bufs[4], 4096, 0);
    memset(bufs, 0, sizeof(bufs));
    io_start(&io[0]);
    io_start_fd(&io[1], wronly);        /* read from a write-only fd */
    io_start(&io[2]);
    io_start_fd(&io[3], rdonly);        /* write to a read-only fd */
    io_start(&io[4]);
    env_wait(&env);

    g_assert_cmpint(io[0].ret, ==, 0);
    g_assert_cmpint(io[1].ret, ==, -EBADF);
    g_assert_cmpint(io[2].ret, ==, 0);
    g_assert_cmpint(io[3].ret, ==, -EBADF);
    g_assert_cmpint(io[4].ret, ==, 0);
    close(wronly);
    close(rdonly);
    env_close(&env);
}

/* A read across the end of the file: the rest is zeroes, and it succeeds. */
static void check_eof(const void *arg)
{
    EngineVariant c = engine_variant(arg);
    Env env;
    g_autofree uint8_t *model = g_malloc(4096 + 100);
    g_autofree uint8_t *buf = g_malloc(8192);
    BlockEngineStats st;
    Io io;
    int fd;

    if (!env_open(&env, c.engine, false)) {
        return;
    }
    fd = open(env.path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    g_assert_cmpint(fd, >=, 0);
    fill_random(model, 4096 + 100);
    g_assert_cmpint(pwrite(fd, model, 4096 + 100, 0), ==, 4096 + 100);
    close(fd);

    /* Three pieces, so the end of the file falls inside the second. */
    memset(buf, 0xaa, 8192);
    io_prepare(&io, &env, BLOCK_OP_READ, 0, buf, 8192, 0);
    io.iov[0] = (struct iovec) { buf, 3000 };
    io.iov[1] = (struct iovec) { buf + 3000, 3000 };
    io.iov[2] = (struct iovec) { buf + 6000, 2192 };
    io.req.niov = 3;
    io_start(&io);
    env_wait(&env);
    g_assert_cmpint(io.ret, ==, 0);
    assert_same(buf, model, 4096 + 100, 0, "data before EOF");
    for (int i = 4096 + 100; i < 8192; i++) {
        g_assert_cmpint(buf[i], ==, 0);
    }

    /* Entirely past the end. */
    memset(buf, 0xaa, 8192);
    g_assert_cmpint(env_io(&env, BLOCK_OP_READ, 65536, buf, 8192, 0), ==, 0);
    for (int i = 0; i < 8192; i++) {
        g_assert_cmpint(buf[i], ==, 0);
    }
    env_stats(&env, &st);
    if (!env_is(&env, "threads")) {
        /* The short read was resubmitted for the rest. */
        g_assert_cmpuint(st.resubmits, >=, 1);
    }
    env_close(&env);
}

/*
 * A write that crosses RLIMIT_FSIZE is cut short by the kernel; the engine
 * resubmits the rest, which fails with -EFBIG.
 */
static void check_short_write(const void *arg)
{
    EngineVariant c = engine_variant(arg);
    const rlim_t limit = 65536 + 1000;
    struct rlimit old, lim;
    g_autofree uint8_t *buf = g_malloc(8192);
    BlockEngineStats before, after;
    void (*old_handler)(int);
    Env env;
    Io io;

    if (!env_open(&env, c.engine, false)) {
        return;
    }
    old_handler = signal(SIGXFSZ, SIG_IGN);
    g_assert_cmpint(getrlimit(RLIMIT_FSIZE, &old), ==, 0);
    if (old.rlim_max != RLIM_INFINITY && old.rlim_max < limit) {
        g_test_skip("RLIMIT_FSIZE is already lower than this test needs");
        signal(SIGXFSZ, old_handler);
        env_close(&env);
        return;
    }
    env_stats(&env, &before);
    lim = (struct rlimit) { .rlim_cur = limit, .rlim_max = old.rlim_max };
    g_assert_cmpint(setrlimit(RLIMIT_FSIZE, &lim), ==, 0);

    fill_random(buf, 8192);
    io_prepare(&io, &env, BLOCK_OP_WRITE, 61440, buf, 8192, 0);
    io.iov[0] = (struct iovec) { buf, 4096 };
    io.iov[1] = (struct iovec) { buf + 4096, 4096 };
    io.req.niov = 2;
    io_start(&io);
    env_wait(&env);

    g_assert_cmpint(setrlimit(RLIMIT_FSIZE, &old), ==, 0);
    signal(SIGXFSZ, old_handler);
    g_assert_cmpint(io.ret, ==, -EFBIG);
    env_stats(&env, &after);
    if (!env_is(&env, "threads")) {
        g_assert_cmpuint(after.resubmits, >, before.resubmits);
    }
    /* The part below the limit was written. */
    memset(buf + 4096, 0, 4096);
    g_assert_cmpint(env_io(&env, BLOCK_OP_READ, 61440, buf + 4096, 4096, 0),
                    ==, 0);
    assert_same(buf + 4096, buf, 4096, 61440, "short write's first part");
    env_close(&env);
}

/* ------------------------------------------------------------------------ */
/* Many requests in one batch: more than the kernel's ring takes at once     */

static void check_many(const void *arg)
{
    EngineVariant c = engine_variant(arg);
    /* The Linux AIO ring holds about 2 * max(1024, 4 * CPUs) events. */
    unsigned n = 8 * MAX(1024, 4 * g_get_num_processors());
    g_autofree uint8_t *model = g_malloc(FILE_SIZE);
    g_autofree uint8_t *buf = g_malloc((size_t)n * 512);
    g_autofree Io *io = g_new(Io, n);
    BlockEngineStats st;
    Env env;

    if (!env_open(&env, c.engine, false)) {
        return;
    }
    fill_file(&env, model);
    aio_context_set_aio_max_batch(env.ctx, n);
    env.ops->plug(env.e);
    for (unsigned i = 0; i < n; i++) {
        int64_t off = (int64_t)i * 512 % FILE_SIZE;

        io_prepare(&io[i], &env, BLOCK_OP_READ, off, buf + (size_t)i * 512,
                   512, 0);
        io_start(&io[i]);
    }
    env.ops->unplug(env.e);
    env_wait(&env);
    for (unsigned i = 0; i < n; i++) {
        g_assert_cmpint(io[i].ret, ==, 0);
        assert_same(buf + (size_t)i * 512, model + (int64_t)i * 512 % FILE_SIZE,
                    512, (int64_t)i * 512 % FILE_SIZE, "many");
    }
    env_stats(&env, &st);
    g_test_message("%s: %u requests: %" PRIu64 " submissions, %" PRIu64
                   " requests, %" PRIu64 " resubmits", c.engine, n,
                   st.submissions, st.requests, st.resubmits);
    g_assert_cmpuint(st.completions, ==, n);
    if (env_is(&env, "native")) {
        /* The ring filled up: -EAGAIN, kept queued, submitted later. */
        g_assert_cmpuint(st.resubmits, >, 0);
        g_assert_cmpuint(st.submissions, >, 1);
    } else if (env_is(&env, "io_uring")) {
        /* More than the SQ holds: submitted in several calls. */
        g_assert_cmpuint(st.submissions, >, 1);
        g_assert_cmpuint(st.requests, ==, n);
    }
    env_close(&env);
}

/* ------------------------------------------------------------------------ */
/* An iovec longer than one system call takes (IOV_MAX elements)             */

static void check_long_iovec(const void *arg)
{
    EngineVariant c = engine_variant(arg);
    enum { NIOV = IOV_MAX + IOV_MAX / 2, PIECE = 512 };
    g_autofree uint8_t *data = g_malloc(NIOV * PIECE);
    g_autofree uint8_t *back = g_malloc0(NIOV * PIECE);
    g_autofree struct iovec *iov = g_new(struct iovec, NIOV);
    BlockEngineStats st;
    Env env;
    Io io;

    if (!env_open(&env, c.engine, false)) {
        return;
    }
    fill_random(data, NIOV * PIECE);
    for (int dir = 0; dir < 2; dir++) {
        uint8_t *buf = dir == 0 ? data : back;

        for (int i = 0; i < NIOV; i++) {
            iov[i] = (struct iovec) { buf + i * PIECE, PIECE };
        }
        io_prepare(&io, &env, dir == 0 ? BLOCK_OP_WRITE : BLOCK_OP_READ,
                   8192, buf, NIOV * PIECE, 0);
        io.req.iov = iov;
        io.req.niov = NIOV;
        io_start(&io);
        env_wait(&env);
        g_assert_cmpint(io.ret, ==, 0);
    }
    assert_same(back, data, NIOV * PIECE, 8192, "long iovec read back");
    env_stats(&env, &st);
    if (!env_is(&env, "threads")) {
        /* Each direction went in two parts. */
        g_assert_cmpuint(st.resubmits, >=, 2);
    }
    env_close(&env);
}

/* The file system has no fsync for this fd (a pipe): IOCB_CMD_FDSYNC is
 * refused, and from then on the engine flushes through the thread pool. */
static void check_flush_fallback(void)
{
    BlockEngineStats native0, native1, threads;
    int pipefd[2];
    Env env;
    Io io;

    if (!env_open(&env, "native", false)) {
        return;
    }
    g_assert_cmpint(pipe2(pipefd, O_CLOEXEC), ==, 0);
    g_assert_false(block_engine_get_stats(&block_engine_threads, env.ctx,
                                          &threads));
    env_stats(&env, &native0);

    io_prepare(&io, &env, BLOCK_OP_FLUSH, 0, NULL, 0, 0);
    io_start_fd(&io, pipefd[1]);
    env_wait(&env);
    /* fdatasync() of a pipe fails too: the caller sees why. */
    g_assert_cmpint(io.ret, ==, -EINVAL);
    g_assert_true(block_engine_get_stats(&block_engine_threads, env.ctx,
                                         &threads));
    g_assert_cmpuint(threads.completions, ==, 1);

    /* The regular file's flush now goes to the thread pool as well. */
    g_assert_cmpint(env_io(&env, BLOCK_OP_FLUSH, 0, NULL, 0, 0), ==, 0);
    g_assert_true(block_engine_get_stats(&block_engine_threads, env.ctx,
                                         &threads));
    g_assert_cmpuint(threads.completions, ==, 2);
    env_stats(&env, &native1);
    g_assert_cmpuint(native1.requests, ==, native0.requests);
    close(pipefd[0]);
    close(pipefd[1]);
    env_close(&env);
}

/* ------------------------------------------------------------------------ */
/* Batching                                                                  */

/*
 * n requests started in one loop turn with aio-max-batch=max_batch: every
 * full batch goes to the kernel at once, while the requests are queued
 * (mid_subs submissions by the time the last one is started), the rest at
 * the end of the turn (total_subs in all); every request completes.
 */
static void check_turn_batches(const char *engine, unsigned max_batch,
                               BlockOp op, unsigned n, unsigned mid_subs,
                               unsigned total_subs)
{
    /* 0 means the engines' default, ENGINE_DEFAULT_MAX_BATCH. */
    unsigned per_batch = max_batch ? max_batch : 2;
    g_autofree uint8_t *buf = g_malloc(n * 4096);
    g_autofree Io *io = g_new0(Io, n);
    BlockEngineStats before, mid, after;
    Env env;

    if (!env_open(&env, engine, false)) {
        return;
    }
    g_assert_cmpint(aio_context_get_aio_max_batch(env.ctx), ==, 0);
    aio_context_set_aio_max_batch(env.ctx, max_batch);
    env_stats(&env, &before);
    for (unsigned i = 0; i < n; i++) {
        io_prepare(&io[i], &env, op, i * 4096, buf + i * 4096, 4096, 0);
        io_start(&io[i]);
    }
    env_stats(&env, &mid);
    g_assert_cmpuint(mid.submissions - before.submissions, ==, mid_subs);
    g_assert_cmpuint(mid.requests - before.requests, ==, mid_subs * per_batch);
    env_wait(&env);
    env_stats(&env, &after);
    g_assert_cmpuint(after.submissions - before.submissions, ==, total_subs);
    g_assert_cmpuint(after.requests - before.requests, ==, n);
    g_assert_cmpuint(after.completions - before.completions, ==, n);
    for (unsigned i = 0; i < n; i++) {
        g_assert_cmpint(io[i].ret, ==, 0);
    }
    env_close(&env);
}

/* With aio-max-batch=32, 16 requests in one loop turn go to the kernel in
 * one submission, at the end of the turn. */
static void check_batching(const void *arg)
{
    EngineVariant c = engine_variant(arg);

    check_turn_batches(c.engine, 32, BLOCK_OP_READ, 16, 0, 1);
}

/* By default (aio-max-batch=0) requests go to the kernel two at a time, as
 * they are queued: a deep queue must not reach the disk in bursts.  An odd
 * one waits for the end of the turn. */
static void check_default_batch(const void *arg)
{
    EngineVariant c = engine_variant(arg);

    check_turn_batches(c.engine, 0, BLOCK_OP_READ, 9, 4, 5);
}

/* aio-max-batch queued requests are submitted at once, without waiting
 * for the end of the turn. */
static void check_batch_limit(const void *arg)
{
    EngineVariant c = engine_variant(arg);

    check_turn_batches(c.engine, 4, BLOCK_OP_WRITE, 10, 2, 3);
}

/* While plugged (nested), nothing under aio-max-batch is submitted, not
 * even at the end of the turn; the last unplug submits everything in one
 * call. */
static void check_plug(const void *arg)
{
    EngineVariant c = engine_variant(arg);
    enum { N = 5 };
    g_autofree uint8_t *buf = g_malloc(N * 4096);
    BlockEngineStats before, st;
    Io io[N];
    Env env;

    if (!env_open(&env, c.engine, false)) {
        return;
    }
    aio_context_set_aio_max_batch(env.ctx, 32);
    env_stats(&env, &before);
    env.ops->plug(env.e);
    env.ops->plug(env.e);
    for (unsigned i = 0; i < N; i++) {
        io_prepare(&io[i], &env, BLOCK_OP_READ, i * 4096, buf + i * 4096,
                   4096, 0);
        io_start(&io[i]);
    }
    for (int i = 0; i < 3; i++) {
        aio_poll(env.ctx, false);
    }
    env.ops->unplug(env.e);
    aio_poll(env.ctx, false);
    env_stats(&env, &st);
    g_assert_cmpuint(st.submissions, ==, before.submissions);
    g_assert_cmpuint(env.pending, ==, N);

    env.ops->unplug(env.e);
    env_stats(&env, &st);
    g_assert_cmpuint(st.submissions - before.submissions, ==, 1);
    g_assert_cmpuint(st.requests - before.requests, ==, N);
    env_wait(&env);
    for (unsigned i = 0; i < N; i++) {
        g_assert_cmpint(io[i].ret, ==, 0);
    }
    env_close(&env);
}

/* ------------------------------------------------------------------------ */
/* Polling                                                                   */

/* QD1 reads; how many completions did the poll callback find? */
static void run_qd1(Env *env, unsigned n, BlockEngineStats *st)
{
    uint8_t *buf = aligned_buf(4096);

    for (unsigned i = 0; i < n; i++) {
        int64_t off = (int64_t)ALIGN * g_test_rand_int_range(0, FILE_SIZE /
                                                             ALIGN);

        g_assert_cmpint(env_io(env, BLOCK_OP_READ, off, buf, 4096, 0), ==, 0);
    }
    free(buf);
    env_stats(env, st);
}

static void check_handler_name(Env *env)
{
    const char *want = env_is(env, "native") ? "linux-aio" : "io_uring";
    AioHandlerWindow w[8];
    int n = aio_context_get_handler_windows(env->ctx, w, G_N_ELEMENTS(w));
    bool found = false;

    for (int i = 0; i < MIN(n, (int)G_N_ELEMENTS(w)); i++) {
        found |= !strcmp(w[i].name, want);
    }
    g_assert_true(found);
}

static void check_polled(const void *arg)
{
    EngineVariant c = engine_variant(arg);
    enum { N = 500 };
    AioPollParams params = { .max_ns = 50 * NS_PER_MS };
    g_autofree uint8_t *model = g_malloc(FILE_SIZE);
    BlockEngineStats st;
    Env env;

    if (!env_open(&env, c.engine, c.direct)) {
        return;
    }
    check_handler_name(&env);
    fill_file(&env, model);         /* so that direct reads go to the disk */
    aio_context_set_poll_params(env.ctx, &params);
    /* Spin up to 50 ms every turn: the completions are found in the ring.
     * (The predictive policy would not spin for a disk slower than what
     * blocking costs.) */
    aio_context_set_poll_policy(env.ctx, &aio_poll_policy_fixed);
    run_qd1(&env, N, &st);
    g_test_message("%s %s: %" PRIu64 " of %" PRIu64 " completions polled",
                   c.engine, c.direct ? "direct" : "buffered",
                   st.completions_polled, st.completions);
    g_assert_cmpuint(st.completions, ==, N);
    g_assert_cmpuint(st.completions_polled, >, 0);
    env_close(&env);
}

/* With polling off, every completion comes through the eventfd. */
static void check_unpolled(const void *arg)
{
    EngineVariant c = engine_variant(arg);
    enum { N = 100 };
    AioPollParams params = { .max_ns = 0 };
    BlockEngineStats st;
    Env env;

    if (!env_open(&env, c.engine, false)) {
        return;
    }
    aio_context_set_poll_params(env.ctx, &params);
    run_qd1(&env, N, &st);
    g_assert_cmpuint(st.completions, ==, N);
    g_assert_cmpuint(st.completions_polled, ==, 0);
    env_close(&env);
}

/* ------------------------------------------------------------------------ */
/* Lookup and instances                                                      */

static void test_find(void)
{
    AioContext *ctx = ctx_new();
    const BlockEngineOps *threads = block_engine_find("threads");
    BlockEngineStats st;
    BlockEngine *e;

    g_assert_true(threads == &block_engine_threads);
#ifdef CONFIG_LIBAIO
    g_assert_true(block_engine_find("native") == &block_engine_native);
#else
    g_assert_null(block_engine_find("native"));
#endif
#ifdef CONFIG_LIBURING
    g_assert_true(block_engine_find("io_uring") == &block_engine_io_uring);
#else
    g_assert_null(block_engine_find("io_uring"));
#endif
    g_assert_null(block_engine_find("posix"));
    g_assert_null(block_engine_find(""));

    g_assert_false(block_engine_get_stats(threads, ctx, &st));
    e = block_engine_get(threads, ctx, NULL);
    g_assert_nonnull(e);
    g_assert_true(block_engine_get(threads, ctx, NULL) == e);     /* one per context */
    g_assert_true(block_engine_get_stats(threads, ctx, &st));
    g_assert_cmpuint(st.submissions, ==, 0);
    aio_context_unref(ctx);
}

#ifdef CONFIG_LIBURING
/*
 * io_uring's two kinds of ring (block/io_uring.c): deferred (the default,
 * where the kernel has DEFER_TASKRUN) and plain.  Each does N reads at QD1
 * twice: with polling off every completion comes through the eventfd, and
 * with a 50 ms fixed window the poll callback finds them.  A deferred ring
 * only gets its CQEs posted when we ask (reap_calls); if a completion were
 * left queued, a read would never finish and the watchdog would fail the
 * test.  A plain ring never needs to ask.
 */
static void uring_ring_kind(bool plain)
{
    enum { N = 200 };
    AioPollParams off = { .max_ns = 0 }, spin = { .max_ns = 50 * NS_PER_MS };
    g_autofree uint8_t *model = g_malloc(FILE_SIZE);
    BlockEngineStats st, mid;
    bool deferred;
    Env env;

    block_engine_io_uring_plain(plain);
    if (!env_open(&env, "io_uring", true)) {
        block_engine_io_uring_plain(false);
        return;
    }
    block_engine_io_uring_plain(false);     /* only this test's ring */
    deferred = block_engine_io_uring_deferred(env.ctx);
    if (!plain && !deferred) {
        g_test_skip("this kernel has no IORING_SETUP_DEFER_TASKRUN (6.1 on)");
        env_close(&env);
        return;
    }
    g_assert_true(deferred == !plain);
    fill_file(&env, model);
    aio_context_set_poll_params(env.ctx, &off);
    env_stats(&env, &st);
    run_qd1(&env, N, &mid);
    g_assert_cmpuint(mid.completions - st.completions, ==, N);
    g_assert_cmpuint(mid.completions_polled, ==, st.completions_polled);
    if (deferred) {
        /* At least one system call per wake-up that found completions. */
        g_assert_cmpuint(mid.reap_calls - st.reap_calls, >=, N / 2);
    } else {
        g_assert_cmpuint(mid.reap_calls, ==, 0);
    }

    aio_context_set_poll_params(env.ctx, &spin);
    aio_context_set_poll_policy(env.ctx, &aio_poll_policy_fixed);
    run_qd1(&env, N, &st);
    g_test_message("io_uring %s ring: %" PRIu64 " of %d completions polled, "
                   "%" PRIu64 " reap calls in all", deferred ? "deferred" :
                   "plain", st.completions_polled - mid.completions_polled,
                   N, st.reap_calls);
    g_assert_cmpuint(st.completions - mid.completions, ==, N);
    g_assert_cmpuint(st.completions_polled - mid.completions_polled, >, 0);
    if (!deferred) {
        g_assert_cmpuint(st.reap_calls, ==, 0);
    }
    env_close(&env);
}

static void check_uring_deferred(void)
{
    uring_ring_kind(false);
}

static void check_uring_plain(void)
{
    uring_ring_kind(true);
}
#endif

/* ------------------------------------------------------------------------ */
/* The tests: each check for each engine that has it                        */

/* Every engine runs these checks... */
static const VariantCheck every_engine_checks[] = {
    { "/aio-engines/%s/roundtrip", check_roundtrip },
    { "/aio-engines/%s/roundtrip-direct", check_roundtrip, &o_direct },
    { "/aio-engines/%s/persist", check_persist },
    { "/aio-engines/%s/persist-direct", check_persist, &o_direct },
    { "/aio-engines/%s/ebadf", check_ebadf },
    { "/aio-engines/%s/eof", check_eof },
    { "/aio-engines/%s/short-write", check_short_write },
    { "/aio-engines/%s/many", check_many },
    { "/aio-engines/%s/long-iovec", check_long_iovec },
};

/* ...and the kernel engines these too. */
static const VariantCheck kernel_engine_checks[] = {
    { "/aio-engines/%s/batching", check_batching },
    { "/aio-engines/%s/batch-limit", check_batch_limit },
    { "/aio-engines/%s/default-batch", check_default_batch },
    { "/aio-engines/%s/plug", check_plug },
    { "/aio-engines/%s/polled", check_polled },
    { "/aio-engines/%s/polled-direct", check_polled, &o_direct },
    { "/aio-engines/%s/unpolled", check_unpolled },
};

static const TestCase tests[] = {
    { "/aio-engines/find", test_find },
    { "/aio-engines/native/flush-fallback", check_flush_fallback },
#ifdef CONFIG_LIBURING
    { "/aio-engines/io_uring/deferred-ring", check_uring_deferred },
    { "/aio-engines/io_uring/plain-ring", check_uring_plain },
#endif
};

static void add_engine_checks(void)
{
    test_add_variants(all_engines, G_N_ELEMENTS(all_engines),
                      every_engine_checks, G_N_ELEMENTS(every_engine_checks),
                      50);
    test_add_variants(kernel_engines, G_N_ELEMENTS(kernel_engines),
                      kernel_engine_checks,
                      G_N_ELEMENTS(kernel_engine_checks), 50);
}

/* Below the 60 s meson timeout, so that the watchdog reports first. */
TEST_MAIN_SETUP(tests, 50, add_engine_checks, NULL)

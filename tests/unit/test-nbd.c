/*
 * Unit tests of the nbd block driver (block/nbd.c).
 *
 * Built without libnbd, only one: driver=nbd is refused, saying so.
 * With it, options first, with no server: every bad option is an error naming it,
 * found before any connection is tried, and a server that is not there
 * is a clear error at open.  Then against nbdkit (skipped, saying so,
 * where it is not installed), started per test on a UNIX socket in a
 * temporary directory with --exit-with-parent, killed by PID: data
 * written reads back (one request over several buffers too), what the
 * server offers is used and what it does not is emulated (its log
 * filter shows which commands went out), a read-only export refuses a
 * writable node, a wrong export name fails at open, resize is refused,
 * and a server that goes away fails requests with EIO, or (with
 * reconnect-delay) holds them until it is back.
 */
#include "config-host.h"
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "block/block.h"
#include "util/aio.h"
#include "util/clock.h"
#include "block-test-helpers.h"
#include "test-helpers.h"

#ifndef CONFIG_LIBNBD

static void test_not_built(void)
{
    AioContext *ctx = ctx_new();

    open_fails("driver=nbd,server.type=unix,server.path=/x", ctx,
               "Driver 'nbd': spindle was built without libnbd");
    aio_context_unref(ctx);
}

static const TestCase tests[] = {
    { "/nbd/not-built", test_not_built },
};

#else

/* ------------------------------------------------------------------------ */
/* Options                                                                   */

typedef struct BadOpt {
    const char *opts;            /* after driver=nbd, */
    const char *needle;          /* in the error */
} BadOpt;

/* A row of the test table: the case's path and its BadOpt. */
#define BAD(name, opts, needle) \
    { "/nbd/options/bad/" name, NULL, test_bad_option, \
      &(const BadOpt){ opts, needle } }

static void test_bad_option(const void *data)
{
    const BadOpt *b = data;
    AioContext *ctx = ctx_new();
    g_autofree char *str = g_strdup_printf("driver=nbd,node-name=n,%s",
                                           b->opts);

    open_fails(str, ctx, b->needle);
    g_assert_null(block_node_find("n"));
    aio_context_unref(ctx);
}

/* The path names its limit; JSON spells the server as an object. */
static void test_long_path_and_json(void)
{
    AioContext *ctx = ctx_new();
    g_autofree char *path = g_strnfill(108, 'p');
    g_autofree char *str = g_strdup_printf(
        "driver=nbd,server.type=unix,server.path=%s", path);

    open_fails(str, ctx, "1 to 107 bytes");
    open_fails("{\"driver\": \"nbd\", \"server\": {\"type\": \"unix\", "
               "\"path\": \"/nonexistent/j.sock\"}, \"reconnect-delay\": 3}",
               ctx, "unix:/nonexistent/j.sock");
    open_fails("{\"driver\": \"nbd\", \"server\": {\"type\": \"inet\", "
               "\"host\": \"127.0.0.1\", \"port\": 99999}}", ctx,
               "server.port");
    /* QEMU's QAPI spells the port as a string. */
    open_fails("{\"driver\": \"nbd\", \"server\": {\"type\": \"inet\", "
               "\"host\": \"127.0.0.1\", \"port\": \"1\"}}", ctx,
               "at inet:127.0.0.1:1 (export '')");
    aio_context_unref(ctx);
}

/* ------------------------------------------------------------------------ */
/* nbdkit                                                                    */

typedef struct Nbdkit {
    char *dir;                   /* temporary: the socket, pid file, log */
    char *sock;
    char *pidfile;
    char *log;
    GPid pid;                    /* 0: not running */
    GStrv args;                  /* to start it again */
} Nbdkit;

/* Wait up to 10 s for k's pid file, as long as k runs. */
static bool nbdkit_wait_ready(Nbdkit *k)
{
    int64_t deadline = clock_now_ns() + 10 * NS_PER_SEC;

    while (!g_file_test(k->pidfile, G_FILE_TEST_EXISTS)) {
        if (clock_now_ns() > deadline ||
            waitpid(k->pid, NULL, WNOHANG) == k->pid) {
            return false;
        }
        g_usleep(10000);
    }
    return true;
}

/* (Re)start k's server; the pid file says it listens. */
static void nbdkit_run(Nbdkit *k)
{
    g_autoptr(GPtrArray) argv = g_ptr_array_new();
    g_autoptr(GError) err = NULL;

    g_unlink(k->sock);
    g_unlink(k->pidfile);
    for (const char *const *a = (const char *const *)
             (const char *[]){ "nbdkit", "--exit-with-parent", "-U", k->sock,
                               "-P", k->pidfile, NULL }; *a; a++) {
        g_ptr_array_add(argv, (char *)*a);
    }
    for (char **a = k->args; *a; a++) {
        g_ptr_array_add(argv, *a);
    }
    g_ptr_array_add(argv, NULL);
    if (!g_spawn_async(NULL, (char **)argv->pdata, NULL,
                       G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD,
                       NULL, NULL, &k->pid, &err)) {
        g_error("cannot start nbdkit: %s", err->message);
    }
    if (!nbdkit_wait_ready(k)) {
        g_error("nbdkit did not start listening on %s (its error above)",
                k->sock);
    }
}

/*
 * Start nbdkit with args (space-separated: filters, plugin, its
 * arguments; "LOG" stands for the log file's path).  False (the test
 * skipped) without nbdkit.
 */
static bool nbdkit_start(Nbdkit *k, const char *args)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *prog = g_find_program_in_path("nbdkit");
    g_auto(GStrv) words = NULL;

    memset(k, 0, sizeof(*k));
    if (!prog) {
        g_test_skip("nbdkit is not installed (apt-get install nbdkit)");
        return false;
    }
    k->dir = g_dir_make_tmp("spindle-nbd-XXXXXX", &err);
    g_assert_no_error(err);
    k->sock = g_build_filename(k->dir, "nbd.sock", NULL);
    k->pidfile = g_build_filename(k->dir, "nbdkit.pid", NULL);
    k->log = g_build_filename(k->dir, "nbdkit.log", NULL);
    words = g_strsplit(args, " ", -1);
    k->args = g_new0(char *, g_strv_length(words) + 1);
    for (guint i = 0; words[i]; i++) {
        k->args[i] = g_str_has_suffix(words[i], "=LOG") ?
            g_strdup_printf("%.*s=%s", (int)strlen(words[i]) - 4, words[i],
                            k->log) : g_strdup(words[i]);
    }
    nbdkit_run(k);
    return true;
}

static void nbdkit_kill(Nbdkit *k)
{
    if (k->pid) {
        kill(k->pid, SIGKILL);
        waitpid(k->pid, NULL, 0);
        g_spawn_close_pid(k->pid);
        k->pid = 0;
    }
}

static void nbdkit_stop(Nbdkit *k)
{
    nbdkit_kill(k);
    g_unlink(k->sock);
    g_unlink(k->pidfile);
    g_unlink(k->log);
    g_rmdir(k->dir);
    g_free(k->dir);
    g_free(k->sock);
    g_free(k->pidfile);
    g_free(k->log);
    g_strfreev(k->args);
}

/* "driver=nbd,server.type=unix,server.path=SOCK" and extra (may be ""). */
static char *nbd_opts(const Nbdkit *k, const char *extra)
{
    return g_strdup_printf("driver=nbd,server.type=unix,server.path=%s%s%s",
                           k->sock, *extra ? "," : "", extra);
}

/* How many lines of k's log hold word. */
static unsigned log_count(const Nbdkit *k, const char *word)
{
    g_autofree char *text = NULL;
    unsigned n = 0;

    if (!g_file_get_contents(k->log, &text, NULL, NULL)) {
        return 0;
    }
    for (const char *p = text; (p = strstr(p, word)); p += strlen(word)) {
        n++;
    }
    return n;
}

/* Kill k's server and start it again with other arguments. */
static void nbdkit_restart(Nbdkit *k, const char *args)
{
    nbdkit_kill(k);
    g_strfreev(k->args);
    k->args = g_strsplit(args, " ", -1);
    nbdkit_run(k);
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */

/* One test's server and node: a context, nbdkit, a node over it, and a
 * request and a buffer for the test to use. */
typedef struct NbdTest {
    AioContext *ctx;
    Nbdkit k;
    BlockNode *bs;
    TReq r;
    char buf[1024];
} NbdTest;

/* Start nbdkit with args and open a node over it with extra options.
 * False (the test skipped, nothing to end) without nbdkit. */
static bool nbd_test_start(NbdTest *t, const char *args, const char *extra)
{
    g_autofree char *str = NULL;

    if (!nbdkit_start(&t->k, args)) {
        return false;
    }
    t->ctx = ctx_new();
    str = nbd_opts(&t->k, extra);
    t->bs = open_ok(str, t->ctx);
    return true;
}

static void nbd_test_end(NbdTest *t)
{
    block_node_unref(t->bs);
    nbdkit_stop(&t->k);
    aio_context_unref(t->ctx);
}

/* Write a pattern over two buffers (one request), read it back in one. */
static void check_roundtrip(BlockNode *bs, int64_t offset, unsigned flags)
{
    g_autofree char *a = g_malloc(4 * KiB), *b = g_malloc(8 * KiB);
    g_autofree char *back = g_malloc(12 * KiB);
    struct iovec iov[2] = { { a, 4 * KiB }, { b, 8 * KiB } };
    TReq r;

    memset(a, 0x5a, 4 * KiB);
    memset(b, 0xc3, 8 * KiB);
    treq_init(&r, BLOCK_OP_WRITE, offset, NULL, 0);
    r.req.iov = iov;
    r.req.niov = 2;
    r.req.bytes = 12 * KiB;
    r.req.flags = flags;
    g_assert_cmpint(treq_run(bs, &r), ==, 0);
    g_assert_cmpint(run_op(bs, BLOCK_OP_READ, offset, back, 12 * KiB), ==, 0);
    g_assert_cmpmem(back, 4 * KiB, a, 4 * KiB);
    g_assert_cmpmem(back + 4 * KiB, 8 * KiB, b, 8 * KiB);
}

/* bytes at offset read back as zeroes. */
static void check_zeroes(BlockNode *bs, int64_t offset, int64_t bytes)
{
    g_autofree char *buf = g_malloc(bytes);

    memset(buf, 0xff, bytes);
    g_assert_cmpint(run_op(bs, BLOCK_OP_READ, offset, buf, bytes), ==, 0);
    for (int64_t i = 0; i < bytes; i++) {
        g_assert_cmpint(buf[i], ==, 0);
    }
}

/* Every operation, the server's own way (memory offers them all). */
static void test_io_offered(void)
{
    NbdTest t;

    if (!nbd_test_start(&t, "--filter=log memory 64M logfile=LOG",
                        "discard=unmap")) {
        return;
    }
    g_assert_cmpint(block_node_get_length(t.bs), ==, 64 * MiB);
    check_roundtrip(t.bs, 1 * MiB, 0);
    check_roundtrip(t.bs, 2 * MiB, BLOCK_REQ_FUA);
    g_assert_cmpint(run_op(t.bs, BLOCK_OP_FLUSH, 0, NULL, 0), ==, 0);
    g_assert_cmpint(run_op(t.bs, BLOCK_OP_WRITE_ZEROES, 1 * MiB, NULL,
                           8 * KiB), ==, 0);
    check_zeroes(t.bs, 1 * MiB, 8 * KiB);
    g_assert_cmpint(run_op(t.bs, BLOCK_OP_DISCARD, 2 * MiB, NULL, 12 * KiB),
                    ==, 0);
    nbdkit_kill(&t.k);           /* the log is complete */
    g_assert_cmpuint(log_count(&t.k, " Write id="), ==, 4);
    g_assert_cmpuint(log_count(&t.k, " fua=1"), >=, 2);
    g_assert_cmpuint(log_count(&t.k, " Flush id="), ==, 1);
    g_assert_cmpuint(log_count(&t.k, " Zero id="), ==, 1);
    g_assert_cmpuint(log_count(&t.k, " Trim id="), ==, 1);
    nbd_test_end(&t);
}

/* A server without WRITE_ZEROES: write-zeroes writes zeroes. */
static void test_io_emulated(void)
{
    g_autofree char *pattern = g_malloc(8 * KiB);
    NbdTest t;

    if (!nbd_test_start(&t, "--filter=log --filter=nozero memory 64M "
                        "logfile=LOG zeromode=none", "")) {
        return;
    }
    memset(pattern, 0x77, 8 * KiB);
    g_assert_cmpint(run_op(t.bs, BLOCK_OP_WRITE, 3 * MiB, pattern, 8 * KiB),
                    ==, 0);
    g_assert_cmpint(run_op(t.bs, BLOCK_OP_WRITE_ZEROES, 3 * MiB, NULL,
                           8 * KiB), ==, 0);
    check_zeroes(t.bs, 3 * MiB, 8 * KiB);
    nbdkit_kill(&t.k);
    /* The 8 KiB, then the zeroes. */
    g_assert_cmpuint(log_count(&t.k, " Write id="), ==, 2);
    g_assert_cmpuint(log_count(&t.k, " Zero id="), ==, 0);
    nbd_test_end(&t);
}

/* nbdkit's sh plugin serving a 1 MiB file of dir through a script that
 * offers FLUSH but not FUA (nbdkit 1.32's filters cannot hide FUA). */
static const char fua_less_script[] =
    "#!/bin/sh\n"
    "img=\"$(dirname \"$0\")/disk.img\"\n"
    "case \"$1\" in\n"
    "get_size) echo 1048576 ;;\n"
    "pread) dd if=\"$img\" iflag=skip_bytes,count_bytes skip=$4 count=$3 "
    "status=none ;;\n"
    "pwrite) dd of=\"$img\" oflag=seek_bytes conv=notrunc seek=$4 "
    "status=none ;;\n"
    "can_write|can_flush|flush) exit 0 ;;\n"
    "can_fua) echo none ;;\n"
    "*) exit 2 ;;\n"
    "esac\n";

/* A FUA write on a server without FUA: the write, then a FLUSH. */
static void test_io_fua_by_flush(void)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *dir = g_dir_make_tmp("spindle-nbd-sh-XXXXXX", &err);
    g_autofree char *script = g_build_filename(dir, "disk.sh", NULL);
    g_autofree char *image = g_build_filename(dir, "disk.img", NULL);
    g_autofree char *args = g_strdup_printf("--filter=log sh %s logfile=LOG",
                                            script);
    NbdTest t;

    g_assert_no_error(err);
    g_assert_true(g_file_set_contents(script, fua_less_script, -1, NULL));
    g_assert_cmpint(g_chmod(script, 0755), ==, 0);
    g_assert_true(g_file_set_contents(image, "", 0, NULL));
    g_assert_cmpint(truncate(image, 1 * MiB), ==, 0);
    if (nbd_test_start(&t, args, "")) {
        check_roundtrip(t.bs, 64 * KiB, BLOCK_REQ_FUA);
        nbdkit_kill(&t.k);
        g_assert_cmpuint(log_count(&t.k, " Write id="), ==, 2);
        g_assert_cmpuint(log_count(&t.k, " fua=1"), ==, 0);
        g_assert_cmpuint(log_count(&t.k, " Flush id="), ==, 1);
        nbd_test_end(&t);
    }
    g_unlink(script);
    g_unlink(image);
    g_rmdir(dir);
}

/* A read-only export: a writable node is refused, a read-only one works;
 * a wrong export name fails at open. */
static void test_open_checks(void)
{
    AioContext *ctx = ctx_new();
    g_autofree char *rw = NULL, *ro = NULL, *bad = NULL;
    char buf[512];
    BlockNode *bs;
    Nbdkit k;

    if (!nbdkit_start(&k, "-r --filter=exportname memory 1M "
                      "exportname-strict=true exportname=disk")) {
        aio_context_unref(ctx);
        return;
    }
    rw = nbd_opts(&k, "export=disk");
    ro = nbd_opts(&k, "export=disk,read-only=on");
    bad = nbd_opts(&k, "export=nodisk,read-only=on");
    open_fails(rw, ctx, "serves export 'disk' read-only: open the node "
               "with read-only=on");
    open_fails(bad, ctx, "(export 'nodisk')");
    bs = open_ok(ro, ctx);
    g_assert_cmpint(run_op(bs, BLOCK_OP_READ, 0, buf, sizeof(buf)), ==, 0);
    block_node_unref(bs);
    nbdkit_stop(&k);
    aio_context_unref(ctx);
}

/* block_resize is refused: NBD has no resize. */
static void test_resize_refused(void)
{
    Error *err = NULL;
    NbdTest t;

    if (!nbd_test_start(&t, "memory 1M", "node-name=n0")) {
        return;
    }
    g_assert_false(block_node_resize(t.bs, 2 * MiB, &err));
    g_assert_nonnull(strstr(error_get_pretty(err), "cannot be resized"));
    error_free(err);
    g_assert_cmpint(block_node_get_length(t.bs), ==, 1 * MiB);
    nbd_test_end(&t);
}

/* Run ctx's loop for ns without blocking for longer. */
static void poll_for(AioContext *ctx, int64_t ns)
{
    int64_t end = clock_now_ns() + ns;

    while (clock_now_ns() < end) {
        aio_poll(ctx, false);
        g_usleep(1000);
    }
}

/* Read until it works again (the reconnection), at most 10 s. */
static void wait_until_reads_work(AioContext *ctx, BlockNode *bs)
{
    int64_t deadline = clock_now_ns() + 10 * NS_PER_SEC;
    char buf[512];

    while (run_op(bs, BLOCK_OP_READ, 0, buf, sizeof(buf)) != 0) {
        g_assert_cmpint(clock_now_ns(), <, deadline);
        poll_for(ctx, 50 * NS_PER_MS);
    }
}

/* reconnect-delay=0: a request in flight when the server dies fails with
 * EIO, so do new ones; once the server is back, requests work again. */
static void test_server_gone(void)
{
    NbdTest t;

    if (!nbd_test_start(&t, "--filter=delay memory 1M delay-read=3", "")) {
        return;
    }
    treq_init(&t.r, BLOCK_OP_READ, 0, t.buf, sizeof(t.buf));
    treq_submit(t.bs, &t.r);
    poll_for(t.ctx, 50 * NS_PER_MS);
    g_assert_false(t.r.done);
    nbdkit_kill(&t.k);
    block_node_drain(t.bs);
    g_assert_cmpint(t.r.ret, ==, -EIO);
    g_assert_cmpint(run_op(t.bs, BLOCK_OP_WRITE, 0, t.buf, 512), ==, -EIO);
    nbdkit_restart(&t.k, "memory 1M");
    wait_until_reads_work(t.ctx, t.bs);
    g_assert_cmpint(run_op(t.bs, BLOCK_OP_WRITE, 0, t.buf, 512), ==, 0);
    nbd_test_end(&t);
}

/* Kill t's server, let the node see it, and submit t->r: op at 0 on
 * t->buf. */
static void submit_with_server_gone(NbdTest *t, BlockOp op)
{
    nbdkit_kill(&t->k);
    poll_for(t->ctx, 100 * NS_PER_MS);
    treq_init(&t->r, op, 0, t->buf, sizeof(t->buf));
    treq_submit(t->bs, &t->r);
}

/* reconnect-delay: requests wait while the server is away and go on when
 * it is back; past the delay they fail. */
static void test_reconnect_delay(void)
{
    NbdTest t;

    if (!nbd_test_start(&t, "memory 1M", "reconnect-delay=2")) {
        return;
    }
    memset(t.buf, 0x42, sizeof(t.buf));
    submit_with_server_gone(&t, BLOCK_OP_WRITE);
    poll_for(t.ctx, 300 * NS_PER_MS);
    g_assert_false(t.r.done);                /* waiting */
    nbdkit_run(&t.k);
    block_node_drain(t.bs);
    g_assert_cmpint(t.r.ret, ==, 0);
    memset(t.buf, 0, sizeof(t.buf));
    g_assert_cmpint(run_op(t.bs, BLOCK_OP_READ, 0, t.buf, 512), ==, 0);
    g_assert_cmpint(t.buf[0], ==, 0x42);

    /* Away for longer than the delay: the request fails after it. */
    submit_with_server_gone(&t, BLOCK_OP_READ);
    block_node_drain(t.bs);
    g_assert_cmpint(t.r.ret, ==, -EIO);
    g_assert_cmpint(t.r.done_ns - t.r.submit_ns, <, 5 * NS_PER_SEC);
    nbd_test_end(&t);
}

/* An export whose size is no multiple of 512 (nbdkit memory 1000): its
 * bytes are served, a request past its end fails; a server back with
 * another size is refused, and requests fail until the right one is. */
static void test_short_export_and_size_change(void)
{
    NbdTest t;

    if (!nbd_test_start(&t, "memory 1000", "")) {
        return;
    }
    g_assert_cmpint(block_node_get_length(t.bs), ==, 1000);
    memset(t.buf, 0x11, sizeof(t.buf));
    g_assert_cmpint(run_op(t.bs, BLOCK_OP_WRITE, 0, t.buf, 1000), ==, 0);
    g_assert_cmpint(run_op(t.bs, BLOCK_OP_READ, 0, t.buf, 1000), ==, 0);
    g_assert_cmpint(run_op(t.bs, BLOCK_OP_READ, 512, t.buf, 512), ==,
                    -EINVAL);
    nbdkit_restart(&t.k, "memory 2000");
    poll_for(t.ctx, 1500 * NS_PER_MS);       /* a reconnection was tried */
    g_assert_cmpint(run_op(t.bs, BLOCK_OP_READ, 0, t.buf, 512), ==, -EIO);
    nbdkit_restart(&t.k, "memory 1000");
    wait_until_reads_work(t.ctx, t.bs);
    nbd_test_end(&t);
}

/* Most cases start with a UNIX socket (nothing listens on /x) or with
 * the inet address 127.0.0.1. */
#define UNIX_X "server.type=unix,server.path=/x,"
#define INET_LO "server.type=inet,server.host=127.0.0.1,"

static const TestCase tests[] = {
    BAD("server-type-missing", "export=x", "'server.type' is missing"),
    BAD("server-type-bad", "server.type=tcp,server.path=/x", "server.type"),
    BAD("unix-path-missing", "server.type=unix", "'server.path' is missing"),
    BAD("unix-path-empty", "server.type=unix,server.path=",
        "'server.path': a UNIX socket path"),
    BAD("inet-host-missing", "server.type=inet", "'server.host' is missing"),
    BAD("inet-port-zero", INET_LO "server.port=0", "server.port"),
    BAD("inet-port-big", INET_LO "server.port=65536", "server.port"),
    BAD("inet-port-name", INET_LO "server.port=nbd", "server.port"),
    BAD("unix-with-host", UNIX_X "server.host=h",
        "'server.host' is for server.type=inet"),
    BAD("unix-with-port", UNIX_X "server.port=1",
        "'server.port' is for server.type=inet"),
    BAD("inet-with-path", INET_LO "server.path=/x",
        "'server.path' is for server.type=unix"),
    BAD("delay-negative", UNIX_X "reconnect-delay=-1", "reconnect-delay"),
    BAD("delay-word", UNIX_X "reconnect-delay=soon", "reconnect-delay"),
    /* Unknown keys are found before connecting. */
    BAD("unknown-key", UNIX_X "tls-creds=t", "'tls-creds'"),
    BAD("unknown-server-key", UNIX_X "server.numeric=on",
        "'server.numeric'"),
    /* No server: a clear error at open. */
    BAD("no-unix-server", "server.type=unix,server.path=/nonexistent/n.sock",
        "Cannot connect to the NBD server at unix:/nonexistent/n.sock "
        "(export '')"),
    BAD("no-inet-server", INET_LO "server.port=1,export=e",
        "Cannot connect to the NBD server at inet:127.0.0.1:1 (export 'e')"),
    { "/nbd/options/long-path-and-json", test_long_path_and_json },
    { "/nbd/io/offered", test_io_offered },
    { "/nbd/io/emulated", test_io_emulated },
    { "/nbd/io/fua-by-flush", test_io_fua_by_flush },
    { "/nbd/open/checks", test_open_checks },
    { "/nbd/open/resize-refused", test_resize_refused },
    { "/nbd/fault/server-gone", test_server_gone },
    { "/nbd/fault/reconnect-delay", test_reconnect_delay },
    { "/nbd/fault/short-export-and-size-change",
      test_short_export_and_size_change },
};

#endif

TEST_MAIN(tests, 50)

/*
 * Unit tests of the rbd block driver (block/rbd.c), without a cluster.
 *
 * Built without librbd, only one: driver=rbd is refused, saying so.  With
 * it: every bad option is an error naming it, found before the cluster
 * is reached (a configuration file that cannot be read included); and a
 * cluster that is not there (a monitor address where nothing listens)
 * fails the open with a clear error within the configuration's
 * client_mount_timeout, never hanging.  I/O, resize, snapshots and
 * faults need a cluster: tests/functional/test_rbd.py starts one.
 */
#include "config-host.h"
#include <string.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "block/block.h"
#include "util/aio.h"
#include "util/clock.h"
#include "block-test-helpers.h"
#include "test-helpers.h"

#ifndef CONFIG_LIBRBD

static void test_not_built(void)
{
    AioContext *ctx = ctx_new();

    open_fails("driver=rbd,pool=p,image=i", ctx,
               "Driver 'rbd': spindle was built without librbd");
    aio_context_unref(ctx);
}

static const TestCase tests[] = {
    { "/rbd/not-built", test_not_built },
};

#else

/* Options after "driver=rbd,node-name=n," and what the error says. */
static const struct {
    const char *opts;
    const char *needle;
} bad_options[] = {
    { "image=i", "Parameter 'pool' is missing" },
    { "pool=p", "Parameter 'image' is missing" },
    { "pool=,image=i", "Parameter 'pool' must be a non-empty name" },
    { "pool=p,image=a/b", "Parameter 'image' must be a non-empty name "
                          "without '/' or '@'" },
    { "pool=p,image=a@s", "Parameter 'image' must be" },
    { "pool=p,image=i,namespace=", "Parameter 'namespace' must be" },
    { "pool=p,image=i,snapshot=a/b", "Parameter 'snapshot' must be" },
    { "pool=p,image=i,snapshot=s", "Parameter 'snapshot': a snapshot is "
                                   "read-only: open the node with "
                                   "read-only=on" },
    { "pool=p,image=i,conf=", "Parameter 'conf' must name a file" },
    { "pool=p,image=i,user=", "Parameter 'user' must not be empty" },
    /* Unknown keys are found before connecting. */
    { "pool=p,image=i,key-secret=k", "'key-secret'" },
    { "pool=p,image=i,server.0.host=h", "'server" },
    /* Read before connecting; no file is an error only when named. */
    { "pool=p,image=i,conf=/nonexistent/ceph.conf",
      "Parameter 'conf': cannot read the Ceph configuration "
      "'/nonexistent/ceph.conf'" },
};

static void test_bad_options(void)
{
    AioContext *ctx = ctx_new();

    for (size_t i = 0; i < G_N_ELEMENTS(bad_options); i++) {
        g_autofree char *str = g_strdup_printf("driver=rbd,node-name=n,%s",
                                               bad_options[i].opts);

        open_fails(str, ctx, bad_options[i].needle);
        g_assert_null(block_node_find("n"));
    }
    aio_context_unref(ctx);
}

/* A read-only snapshot passes the option checks: it fails only when the
 * (missing) cluster is reached.  JSON spells the same options. */
static void test_snapshot_read_only_and_json(void)
{
    AioContext *ctx = ctx_new();

    open_fails("driver=rbd,pool=p,image=i,snapshot=s,read-only=on,"
               "conf=/nonexistent/c.conf", ctx,
               "cannot read the Ceph configuration");
    open_fails("{\"driver\": \"rbd\", \"pool\": \"p\", \"image\": \"i\", "
               "\"snapshot\": \"s\"}", ctx, "a snapshot is read-only");
    open_fails("{\"driver\": \"rbd\", \"pool\": \"p\", \"image\": 3}", ctx,
               "image");
    aio_context_unref(ctx);
}

/* A monitor address where nothing listens, a bound of 2 s: the open
 * fails, saying so, within a few seconds. */
static void test_no_cluster(void)
{
    AioContext *ctx = ctx_new();
    g_autoptr(GError) err = NULL;
    g_autofree char *dir = g_dir_make_tmp("test-rbd-XXXXXX", &err);
    g_autofree char *conf = NULL;
    g_autofree char *str = NULL;
    int64_t start;

    g_assert_no_error(err);
    conf = g_build_filename(dir, "ceph.conf", NULL);
    g_assert_true(g_file_set_contents(conf,
        "[global]\n"
        "fsid = 6b9b1e4a-8f0b-4b5e-9a55-2f1f5a8c0e11\n"
        "mon host = v2:127.0.0.1:1\n"
        "auth cluster required = none\n"
        "auth service required = none\n"
        "auth client required = none\n"
        "client mount timeout = 2\n"
        "log to stderr = false\n"
        "err to stderr = false\n", -1, &err));
    g_assert_no_error(err);
    str = g_strdup_printf("driver=rbd,node-name=n,pool=p,image=i,conf=%s",
                          conf);
    start = clock_now_ns();
    open_fails(str, ctx, "Cannot connect to the Ceph cluster of ");
    g_assert_cmpint(clock_now_ns() - start, <, 20 * NS_PER_SEC);
    g_assert_null(block_node_find("n"));
    g_unlink(conf);
    g_rmdir(dir);
    aio_context_unref(ctx);
}

static const TestCase tests[] = {
    { "/rbd/options/bad", test_bad_options },
    { "/rbd/options/snapshot-read-only-and-json",
      test_snapshot_read_only_and_json },
    { "/rbd/open/no-cluster", test_no_cluster },
};

#endif

TEST_MAIN(tests, 60)

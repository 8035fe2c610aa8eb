/*
 * Unit tests of what the vhost-user export types add to their server
 * (export/vhost-user-export.c): the inflight-tracking option and the
 * connection events the monitor turns into QMP events.
 *
 * Theory of operation: the test's thread is the main thread (its
 * AioContext is the main loop's), the exports serve a null-co node on a
 * socket in a temporary directory, and the test is a raw front-end on a
 * plain UNIX socket: it sends one request at a time and runs the main
 * loop until the answer arrives.  The events go to a sink that records
 * them (export_set_event_sink()), as the monitor's would.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <glib.h>

#include "export/blockdev.h"
#include "export/export.h"
#include "hw/virtio/vhost-user-wire.h"
#include "util/main-thread.h"
#include "test-helpers.h"

static AioContext *ctx;

typedef struct Recorded {
    char *event;
    char *id;
    int queue;
    int requests;
} Recorded;

static GPtrArray *recorded;

static void record_free(gpointer p)
{
    Recorded *r = p;

    g_free(r->event);
    g_free(r->id);
    g_free(r);
}

static void record_event(const char *event, const char *id, int queue,
                         int requests)
{
    Recorded *r = g_new0(Recorded, 1);

    r->event = g_strdup(event);
    r->id = g_strdup(id);
    r->queue = queue;
    r->requests = requests;
    g_ptr_array_add(recorded, r);
}

/* Run the main loop until fd is readable (the server answered). */
static void wait_readable(int fd)
{
    for (int i = 0; i < 5000; i++) {
        struct pollfd p = { .fd = fd, .events = POLLIN };

        aio_poll(ctx, false);
        if (poll(&p, 1, 1) == 1) {
            return;
        }
    }
    g_error("no answer from the server");
}

/* Run the main loop until n events were recorded. */
static void wait_events(guint n)
{
    for (int i = 0; i < 5000 && recorded->len < n; i++) {
        aio_poll(ctx, false);
        g_usleep(1000);
    }
    g_assert_cmpuint(recorded->len, ==, n);
}

static int fe_connect(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    g_assert_cmpint(fd, >=, 0);
    g_strlcpy(sa.sun_path, path, sizeof(sa.sun_path));
    g_assert_cmpint(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), ==, 0);
    return fd;
}

/* GET_PROTOCOL_FEATURES over fd. */
static uint64_t fe_get_protocol_features(int fd)
{
    VhostUserHeader h = { VHOST_USER_GET_PROTOCOL_FEATURES,
                          VHOST_USER_VERSION, 0 };
    struct {
        VhostUserHeader h;
        uint64_t val;
    } __attribute__((packed)) reply;

    g_assert_cmpint(write(fd, &h, sizeof(h)), ==, sizeof(h));
    wait_readable(fd);
    g_assert_cmpint(read(fd, &reply, sizeof(reply)), ==, sizeof(reply));
    g_assert_cmpuint(reply.h.request, ==, VHOST_USER_GET_PROTOCOL_FEATURES);
    g_assert_cmpuint(reply.h.size, ==, 8);
    return reply.val;
}

static Export *export_new(const char *spec)
{
    Error *err = NULL;
    Opts *opts = export_opts_parse(spec, &err);
    Export *exp;

    g_assert_no_error(err);
    exp = export_create(opts, ctx, &err);
    g_assert_no_error(err);
    opts_free(opts);
    return exp;
}

typedef struct OptionCase {
    const char *path;
    const char *type;            /* and its node option */
    const char *extra;
    bool offered;
} OptionCase;

static const OptionCase option_cases[] = {
    { "/vhost-user-export/inflight/blk-default",
      "vhost-user-blk,node-name=n0", "", true },
    { "/vhost-user-export/inflight/blk-on",
      "vhost-user-blk,node-name=n0", ",inflight-tracking=on", true },
    { "/vhost-user-export/inflight/blk-off",
      "vhost-user-blk,node-name=n0", ",inflight-tracking=off", false },
    { "/vhost-user-export/inflight/scsi-default",
      "vhost-user-scsi,lun.0=n0", "", true },
    { "/vhost-user-export/inflight/scsi-off",
      "vhost-user-scsi,lun.0=n0", ",inflight-tracking=off", false },
};

/*
 * The feature is offered as the option says; connecting and
 * disconnecting are reported as the export's events.
 */
static void test_option_and_events(const void *data)
{
    const OptionCase *c = data;
    g_autofree char *dir = g_dir_make_tmp("vu-export-XXXXXX", NULL);
    g_autofree char *sock = g_build_filename(dir, "s", NULL);
    g_autofree char *spec = g_strdup_printf(
        "type=%s,id=e0,addr.type=unix,addr.path=%s%s", c->type, sock,
        c->extra);
    uint64_t bit = 1ull << VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD;
    Error *err = NULL;
    Recorded *r;
    Export *exp;
    int fd;

    recorded = g_ptr_array_new_with_free_func(record_free);
    export_set_event_sink(record_event);
    g_assert_nonnull(blockdev_add_str("driver=null-co,node-name=n0,"
                                      "size=1048576", ctx, &err));
    g_assert_no_error(err);
    exp = export_new(spec);

    fd = fe_connect(sock);
    g_assert_cmpuint(fe_get_protocol_features(fd) & bit, ==,
                     c->offered ? bit : 0);
    wait_events(1);
    r = g_ptr_array_index(recorded, 0);
    g_assert_cmpstr(r->event, ==, "BLOCK_EXPORT_CONNECTED");
    g_assert_cmpstr(r->id, ==, "e0");
    g_assert_cmpint(r->queue, ==, -1);
    close(fd);
    wait_events(2);
    r = g_ptr_array_index(recorded, 1);
    g_assert_cmpstr(r->event, ==, "BLOCK_EXPORT_DISCONNECTED");
    g_assert_cmpstr(r->id, ==, "e0");

    export_delete(exp);
    blockdev_del_all();
    export_set_event_sink(NULL);
    g_ptr_array_unref(recorded);
    g_assert_cmpint(rmdir(dir), ==, 0);
}

/* The option takes on and off only, and names itself in the error. */
static void test_option_bad(void)
{
    Error *err = NULL;
    Opts *opts = export_opts_parse("type=vhost-user-blk,id=e0,node-name=n0,"
                                   "addr.type=unix,addr.path=/nonexistent/s,"
                                   "inflight-tracking=maybe", &err);
    Export *exp;

    g_assert_no_error(err);
    g_assert_nonnull(blockdev_add_str("driver=null-co,node-name=n0", ctx,
                                      &err));
    exp = export_create(opts, ctx, &err);
    g_assert_null(exp);
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(error_get_pretty(err), "inflight-tracking"));
    error_free(err);
    opts_free(opts);
    blockdev_del_all();
}

static const TestCase tests[] = {
    { "/vhost-user-export/inflight/bad-value", test_option_bad },
};

static void setup(void)
{
    static TestCase rows[G_N_ELEMENTS(option_cases)];

    ctx = ctx_new();
    main_loop_set_context(ctx);
    for (size_t i = 0; i < G_N_ELEMENTS(option_cases); i++) {
        rows[i] = (TestCase) { .path = option_cases[i].path,
                               .fn_data = test_option_and_events,
                               .data = &option_cases[i] };
    }
    test_add_with_watchdog(rows, G_N_ELEMENTS(rows), 25);
}

static void teardown(void)
{
    aio_context_unref(ctx);
}

TEST_MAIN_SETUP(tests, 25, setup, teardown)

/*
 * Unit tests for the vhost-user server (hw/virtio/vhost-user-server.c).
 *
 * Set-up: the server runs in an IOThread of its own ("vu-main"), which plays
 * the daemon's main loop: every server function is called there through
 * aio_run_sync().  The rings run in two more IOThreads.  The test thread is
 * the front-end, using the front-end library (tools/frontend): it talks to
 * the server over a real UNIX socket one raw message at a time, so that it
 * sees every reply and can send what a front-end must not, and drives the
 * rings with the library's split-ring driver on the library's guest memory
 * (a memfd it shares with the server) once it has set them up by hand.
 *
 * The device is a dummy whose ops count their calls and whose queue handler
 * echoes each request: it copies the driver's out buffers into the in
 * buffers and pushes the element back with the number of bytes copied.
 *
 * Since server and test share the process, a leaked fd shows up in
 * /proc/self/fd: the tests that feed bad messages compare the count before
 * and after.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <glib.h>

#include "hw/virtio/vhost-user-protocol.h"
#include "hw/virtio/vhost-user-server.h"
#include "util/clock.h"
#include "util/iov.h"
#include "util/main-thread.h"
#include "test-helpers.h"
#include "vu-dummy-device.h"
#include "vu-frontend.h"
#include "vu-raw.h"

#define NUM_QUEUES 2
#define MAX_QUEUE_SIZE 256
#define RING_NUM 8
#define MEM_SIZE (2 << 20)
#define GPA_BASE 0x100000000ull
#define CALL_WAIT_MS 5000
#define RECV_TIMEOUT_S 5


#define REPLY_FLAGS (VHOST_USER_VERSION | VHOST_USER_REPLY_MASK)
#define NEED_REPLY (VHOST_USER_VERSION | VHOST_USER_NEED_REPLY_MASK)

static const uint64_t transport_features =
    (1ull << VIRTIO_F_VERSION_1) | (1ull << VIRTIO_RING_F_INDIRECT_DESC) |
    (1ull << VIRTIO_RING_F_EVENT_IDX) | (1ull << VHOST_F_LOG_ALL) |
    (1ull << VHOST_USER_F_PROTOCOL_FEATURES);

static const uint64_t expected_protocol_features =
    (1ull << VHOST_USER_PROTOCOL_F_MQ) |
    (1ull << VHOST_USER_PROTOCOL_F_LOG_SHMFD) |
    (1ull << VHOST_USER_PROTOCOL_F_REPLY_ACK) |
    (1ull << VHOST_USER_PROTOCOL_F_SLAVE_REQ) |
    (1ull << VHOST_USER_PROTOCOL_F_CONFIG) |
    (1ull << VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS) |
    (1ull << VHOST_USER_PROTOCOL_F_RESET_DEVICE);

static IOThread *srv_iot;          /* the server's "main loop" */
static AioContext *srv_ctx;
static IOThread *queue_iots[2];
static AioContext *queue_ctxs[2];
static pthread_t test_thread;
static char *tmp_dir;
static _Atomic int broken_warnings;

/* ------------------------------------------------------------------------ */
/* The server, driven in its own thread                                      */

static void become_main_thread(void *opaque)
{
    main_loop_set_context(opaque);
}

typedef struct ServerCall {
    VuServerConfig cfg;
    VuServer *server;
    Error *err;
    unsigned index;
    bool result;
    VirtQueue *vq;
} ServerCall;

static void do_server_new(void *opaque)
{
    ServerCall *c = opaque;

    c->server = vu_server_new(&c->cfg, srv_ctx, &c->err);
}

static void do_server_free(void *opaque)
{
    vu_server_free(((ServerCall *)opaque)->server);
}

static void do_has_client(void *opaque)
{
    ServerCall *c = opaque;

    c->result = vu_server_has_client(c->server);
}

static void do_config_changed(void *opaque)
{
    ServerCall *c = opaque;

    c->result = vu_server_config_changed(c->server);
}

static void do_get_queue(void *opaque)
{
    ServerCall *c = opaque;

    c->vq = vu_server_get_queue(c->server, c->index);
}

/* A server on path (or listen_fd if path is NULL); NULL and *errp on error. */
static VuServer *server_try_new(const char *path, int listen_fd, Dummy *d,
                                Error **errp)
{
    ServerCall c = {
        .cfg = {
            .path = path,
            .listen_fd = listen_fd,
            .num_queues = NUM_QUEUES,
            .max_queue_size = MAX_QUEUE_SIZE,
            .ctxs = queue_ctxs,
            .nctx = G_N_ELEMENTS(queue_ctxs),
            .ops = &dummy_ops,
            .dev = d,
            .name = "test-export",
        },
    };

    aio_run_sync(srv_ctx, do_server_new, &c);
    if (c.err) {
        g_propagate_error(errp, c.err);
    }
    return c.server;
}

static VuServer *server_new(const char *path, Dummy *d)
{
    Error *err = NULL;
    VuServer *s = server_try_new(path, -1, d, &err);

    g_assert_no_error(err);
    g_assert_nonnull(s);
    return s;
}

static void server_free(VuServer *s)
{
    ServerCall c = { .server = s };

    aio_run_sync(srv_ctx, do_server_free, &c);
}

static bool server_has_client(VuServer *s)
{
    ServerCall c = { .server = s };

    aio_run_sync(srv_ctx, do_has_client, &c);
    return c.result;
}

static bool server_config_changed(VuServer *s)
{
    ServerCall c = { .server = s };

    aio_run_sync(srv_ctx, do_config_changed, &c);
    return c.result;
}

static VirtQueue *server_queue(VuServer *s, unsigned i)
{
    ServerCall c = { .server = s, .index = i };

    aio_run_sync(srv_ctx, do_get_queue, &c);
    return c.vq;
}

/* Wait until the server has noticed that its client went away. */
static void server_wait_no_client(VuServer *s)
{
    int64_t end = clock_now_ns() + 5 * NS_PER_SEC;

    while (server_has_client(s)) {
        g_assert_cmpint(clock_now_ns(), <, end);
        sleep_ns(NS_PER_MS);
    }
}

static char *sock_path(const char *name)
{
    return g_build_filename(tmp_dir, name, NULL);
}

/* What most tests start with: a server on socket name (in tmp_dir) with
 * its own dummy device. */
typedef struct Export {
    char *path;
    Dummy *d;
    VuServer *s;
} Export;

static Export export_new(const char *name)
{
    Export e = {
        .path = sock_path(name),
        .d = dummy_new(srv_ctx, test_thread),
    };

    e.s = server_new(e.path, e.d);
    return e;
}

/* Once its client is gone: free the server, its device and path. */
static void export_free(Export *e)
{
    server_wait_no_client(e->s);
    server_free(e->s);
    dummy_free(e->d);
    g_free(e->path);
}

static int count_fds(void)
{
    return count_dir_entries("/proc/self/fd");
}

/* Mappings of the file behind fd (by inode: the fifth field). */
static int count_maps(int fd)
{
    struct stat st;
    char *maps = NULL;
    char **lines;
    int n = 0;

    g_assert_cmpint(fstat(fd, &st), ==, 0);
    g_assert_true(g_file_get_contents("/proc/self/maps", &maps, NULL, NULL));
    lines = g_strsplit(maps, "\n", -1);
    for (char **l = lines; *l; l++) {
        unsigned long long ino;

        n += sscanf(*l, "%*s %*s %*s %*s %llu", &ino) == 1 &&
             ino == (unsigned long long)st.st_ino;
    }
    g_strfreev(lines);
    g_free(maps);
    return n;
}

/* ------------------------------------------------------------------------ */
/* The front-end side                                                        */

/*
 * The front-end is the library's (tools/frontend), connected with
 * vuf_connect_socket() alone: the test speaks the protocol message by
 * message (vuf_send_raw(), vuf_recv_raw()), so that it checks every reply
 * and can send what a front-end must not.  Its guest memory, a memfd of
 * MEM_SIZE bytes at guest address 0, and the rings of its NUM_QUEUES
 * queues are the library's too; once the test has set a ring up by hand
 * (fe_setup_ring()), the library's split-ring driver drives it.
 */
static VuFrontend *fe_new(const char *path)
{
    VufOptions opts;
    Error *err = NULL;
    VuFrontend *fe;

    vuf_options_init_device(&opts, VUF_DEVICE_GENERIC);
    opts.socket_path = path;
    opts.mem_size = MEM_SIZE;
    opts.num_queues = NUM_QUEUES;
    opts.queue_size = RING_NUM;
    opts.features_wanted = 0;          /* no indirect tables */
    opts.completion = VUF_COMPLETION_INTERRUPT;
    fe = vuf_new(&opts, &err);
    g_assert_no_error(err);
    return fe;
}

/* (Re)connect fe's socket; nothing is sent. */
static void fe_open(VuFrontend *fe)
{
    Error *err = NULL;

    vuf_connect_socket(fe, &err);
    g_assert_no_error(err);
}

static VuFrontend *fe_connect(const char *path)
{
    VuFrontend *fe = fe_new(path);

    fe_open(fe);
    return fe;
}

/* Send one message (header + payload in one sendmsg, fds attached). */
static void fe_send(VuFrontend *fe, uint32_t req, uint32_t flags,
                    const void *payload, uint32_t size, const int *fds,
                    unsigned nfds)
{
    VhostUserHeader h = { .request = req, .flags = flags, .size = size };
    g_autofree uint8_t *buf = NULL;
    Error *err = NULL;

    if (nfds <= VHOST_USER_MAX_FDS) {
        vuf_send_raw(fe, req, flags, payload, size, fds, nfds, &err);
    } else {
        /* More fds than a message may carry: the bytes as they are. */
        buf = g_malloc(sizeof(h) + size);
        memcpy(buf, &h, sizeof(h));
        memcpy(buf + sizeof(h), payload, size);
        vuf_send_bytes(fe, buf, sizeof(h) + size, fds, nfds, &err);
    }
    g_assert_no_error(err);
}

/* Send a header whose size says size_field, then len payload bytes. */
static void fe_send_header(VuFrontend *fe, uint32_t req, uint32_t size_field,
                           const void *payload, size_t len)
{
    Error *err = NULL;

    vuf_send_raw_header(fe, req, VHOST_USER_VERSION, size_field, payload,
                        len, NULL, 0, &err);
    g_assert_no_error(err);
}

/* Wait for the next message (or the end of the connection). */
static VufRecvResult fe_recv_any(VuFrontend *fe, int timeout_ms,
                                 VhostUserHeader *h, void *payload,
                                 size_t cap)
{
    VufRecvResult res = VUF_RECV_TIMEOUT;
    Error *err = NULL;
    size_t len;

    vuf_recv_raw(fe, timeout_ms, h, payload, cap, &len, &res, &err);
    g_assert_no_error(err);
    return res;
}

/* Receive a reply to req; returns its payload size. */
static uint32_t fe_recv(VuFrontend *fe, uint32_t req, void *payload,
                        size_t cap)
{
    VhostUserHeader h;

    g_assert_cmpint(fe_recv_any(fe, RECV_TIMEOUT_S * 1000, &h, payload, cap),
                    ==, VUF_RECV_MESSAGE);
    g_assert_cmpuint(h.request, ==, req);
    g_assert_cmpuint(h.flags, ==, REPLY_FLAGS);
    g_assert_cmpuint(h.size, <=, cap);
    return h.size;
}

static uint64_t fe_get_u64(VuFrontend *fe, uint32_t req)
{
    uint64_t v = 0;

    fe_send(fe, req, VHOST_USER_VERSION, NULL, 0, NULL, 0);
    g_assert_cmpuint(fe_recv(fe, req, &v, sizeof(v)), ==, sizeof(v));
    return v;
}

/* Send with need_reply and return the REPLY_ACK status. */
static uint64_t fe_call(VuFrontend *fe, uint32_t req, const void *payload,
                        uint32_t size, const int *fds, unsigned nfds)
{
    uint64_t status = 0xdead;

    fe_send(fe, req, NEED_REPLY, payload, size, fds, nfds);
    g_assert_cmpuint(fe_recv(fe, req, &status, sizeof(status)), ==,
                     sizeof(status));
    return status;
}

static void fe_ok(VuFrontend *fe, uint32_t req, const void *payload,
                  uint32_t size, const int *fds, unsigned nfds)
{
    g_assert_cmpuint(fe_call(fe, req, payload, size, fds, nfds), ==, 0);
}

static void fe_fails(VuFrontend *fe, uint32_t req, const void *payload,
                     uint32_t size, const int *fds, unsigned nfds)
{
    g_assert_cmpuint(fe_call(fe, req, payload, size, fds, nfds), !=, 0);
}

static void fe_ok_u64(VuFrontend *fe, uint32_t req, uint64_t val)
{
    fe_ok(fe, req, &val, sizeof(val), NULL, 0);
}

static void fe_ok_state(VuFrontend *fe, uint32_t req, uint32_t index,
                        uint32_t num)
{
    VhostUserVringState st = { .index = index, .num = num };

    fe_ok(fe, req, &st, sizeof(st), NULL, 0);
}

/* The server closes the connection: EOF (or a reset) within the time-out. */
static void fe_expect_closed(VuFrontend *fe)
{
    VhostUserHeader h;
    uint8_t payload[64];

    g_assert_cmpint(fe_recv_any(fe, RECV_TIMEOUT_S * 1000, &h, payload,
                                sizeof(payload)), ==, VUF_RECV_CLOSED);
}

/* Features and protocol features, REPLY_ACK on, SET_OWNER; then the
 * library's queues start (their rings are set up by hand later). */
static void fe_negotiate(VuFrontend *fe)
{
    const uint64_t features = (1ull << VIRTIO_F_VERSION_1) |
                              (1ull << VHOST_USER_F_PROTOCOL_FEATURES) |
                              (1ull << DUMMY_FEATURE_BIT);
    uint64_t f = fe_get_u64(fe, VHOST_USER_GET_FEATURES);
    Error *err = NULL;
    uint64_t pf;

    g_assert_cmphex(f, ==, transport_features | (1ull << DUMMY_FEATURE_BIT));
    pf = fe_get_u64(fe, VHOST_USER_GET_PROTOCOL_FEATURES);
    g_assert_cmphex(pf, ==, expected_protocol_features);
    fe_send(fe, VHOST_USER_SET_PROTOCOL_FEATURES, VHOST_USER_VERSION, &pf,
            sizeof(pf), NULL, 0);
    fe_ok(fe, VHOST_USER_SET_OWNER, NULL, 0, NULL, 0);
    fe_ok_u64(fe, VHOST_USER_SET_FEATURES, features);
    vuf_start_local(fe, features, &err);
    g_assert_no_error(err);
}

/* ------------------------------------------------------------------------ */
/* Guest memory and the driver side of split rings                           */

static uint64_t guest_qva(VuFrontend *fe, uint64_t off)
{
    return (uint64_t)(uintptr_t)vuf_mem_base(fe) + off;
}

/* size bytes of the memfd from off, at guest address gpa. */
static VhostUserMemRegion guest_region(VuFrontend *fe, uint64_t gpa,
                                       uint64_t off, uint64_t size)
{
    return (VhostUserMemRegion) {
        .guest_phys_addr = gpa,
        .memory_size = size,
        .userspace_addr = guest_qva(fe, off),
        .mmap_offset = off,
    };
}

/* SET_MEM_TABLE with the whole memfd as one region, as the library lays
 * it out (guest address 0). */
static void fe_set_mem_table(VuFrontend *fe)
{
    VhostUserMemory m = { .nregions = 1 };
    int memfd = vuf_mem_fd(fe);

    m.regions[0] = guest_region(fe, 0, 0, MEM_SIZE);
    fe_ok(fe, VHOST_USER_SET_MEM_TABLE, &m,
          offsetof(VhostUserMemory, regions) + sizeof(m.regions[0]),
          &memfd, 1);
}

/* One ring: the library's queue index, and the buffers of its requests. */
typedef struct Ring {
    VuFrontend *fe;
    VufQueue *q;
    unsigned index;
    uint64_t out_gpa, in_gpa;
    uint16_t head;           /* of the last request posted */
} Ring;

#define RING_OUT_LEN 256
#define RING_IN_LEN  256

static void ring_init(Ring *r, VuFrontend *fe, unsigned index)
{
    *r = (Ring) { .fe = fe, .q = vuf_queue(fe, index), .index = index };
    g_assert_nonnull(vuf_mem_alloc(fe, RING_OUT_LEN, 0, &r->out_gpa));
    g_assert_nonnull(vuf_mem_alloc(fe, RING_IN_LEN, 0, &r->in_gpa));
}

static VhostUserVringAddr ring_addr(const Ring *r)
{
    uint64_t desc, avail, used;

    vufq_ring_gpas(r->q, &desc, &avail, &used);
    return (VhostUserVringAddr) {
        .index = r->index,
        .desc_user_addr = guest_qva(r->fe, desc),
        .avail_user_addr = guest_qva(r->fe, avail),
        .used_user_addr = guest_qva(r->fe, used),
    };
}

static void fe_set_vring_fd(VuFrontend *fe, uint32_t req, unsigned index,
                            int efd)
{
    uint64_t v = index;

    fe_ok(fe, req, &v, sizeof(v), &efd, 1);
}

/* Size, base, addresses, call and kick fds, then enable: the ring runs. */
static void fe_setup_ring(VuFrontend *fe, Ring *r, uint16_t base)
{
    VhostUserVringAddr a = ring_addr(r);

    g_assert_cmpint(vufq_set_base(r->q, base), ==, 0);
    fe_ok_state(fe, VHOST_USER_SET_VRING_NUM, r->index, RING_NUM);
    fe_ok_state(fe, VHOST_USER_SET_VRING_BASE, r->index, base);
    fe_ok(fe, VHOST_USER_SET_VRING_ADDR, &a, sizeof(a), NULL, 0);
    fe_set_vring_fd(fe, VHOST_USER_SET_VRING_CALL, r->index,
                    vufq_call_fd(r->q));
    fe_set_vring_fd(fe, VHOST_USER_SET_VRING_KICK, r->index,
                    vufq_kick_fd(r->q));
    fe_ok_state(fe, VHOST_USER_SET_VRING_ENABLE, r->index, 1);
}

/* The used index the server last published. */
static uint16_t ring_used_idx(Ring *r)
{
    return atomic_load_explicit(&vufq_used(r->q)->idx, memory_order_acquire);
}

/*
 * Make a two-descriptor request available (text out, RING_IN_LEN in) and
 * kick: text is copied to the ring's out buffer, but the descriptor says
 * out_gpa (a test may point it elsewhere).
 */
static void drv_post(Ring *r, const char *text, uint64_t out_gpa)
{
    VufSeg segs[2] = {
        { out_gpa, strlen(text) + 1, false },
        { r->in_gpa, RING_IN_LEN, true },
    };
    int head;

    strcpy(vuf_hva(r->fe, r->out_gpa, RING_OUT_LEN), text);
    memset(vuf_hva(r->fe, r->in_gpa, RING_IN_LEN), 0, RING_IN_LEN);
    head = vufq_add(r->q, segs, 2, 0, r);
    g_assert_cmpint(head, >=, 0);
    r->head = head;
    g_assert_cmpint(vufq_kick_always(r->q), ==, 1);
}

/*
 * Wait for the interrupt and the used entry of the last request.  An
 * interrupt may come early (the device signals a new call eventfd once as
 * soon as it is set): as a driver does, look at the used ring after each
 * one and wait again if it has not moved.
 */
static void drv_complete(Ring *r, const char *text)
{
    struct pollfd pfd = { .fd = vufq_call_fd(r->q), .events = POLLIN };
    uint16_t head;
    uint32_t len;
    void *token;
    int got;

    do {
        g_assert_cmpint(poll(&pfd, 1, CALL_WAIT_MS), ==, 1);
        g_assert_cmpuint(vufq_collect_interrupts(r->q), >, 0);
        got = vufq_get_used_head(r->q, &head, &token, &len);
        g_assert_cmpint(got, >=, 0);
    } while (!got);
    g_assert_true(token == r);
    g_assert_cmpuint(head, ==, r->head);
    g_assert_cmpuint(len, ==, strlen(text) + 1);
    g_assert_cmpstr(vuf_hva(r->fe, r->in_gpa, RING_IN_LEN), ==, text);
}

/* One request processed end to end by the echo device. */
static void drv_echo(Ring *r, const char *text)
{
    drv_post(r, text, r->out_gpa);
    drv_complete(r, text);
}

static uint32_t fe_get_vring_base(VuFrontend *fe, unsigned index)
{
    VhostUserVringState st = { .index = index };

    fe_send(fe, VHOST_USER_GET_VRING_BASE, VHOST_USER_VERSION, &st,
            sizeof(st), NULL, 0);
    g_assert_cmpuint(fe_recv(fe, VHOST_USER_GET_VRING_BASE, &st, sizeof(st)),
                     ==, sizeof(st));
    g_assert_cmpuint(st.index, ==, index);
    return st.num;
}

/* A new connection to path works: features read back. */
static void check_server_alive(const char *path)
{
    VuFrontend *fe = fe_connect(path);

    g_assert_cmphex(fe_get_u64(fe, VHOST_USER_GET_FEATURES), ==,
                    transport_features | (1ull << DUMMY_FEATURE_BIT));
    vuf_free(fe);
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                     */

static void test_negotiate(void)
{
    char *path = sock_path("negotiate.sock");
    Dummy *d = dummy_new(srv_ctx, test_thread);
    VuServer *s = server_new(path, d);
    VhostUserConfig cfg = { 0 };
    uint8_t payload[VHOST_USER_CONFIG_HDR_SIZE + 8];
    uint32_t n;
    VuFrontend *fe = fe_connect(path);

    fe_negotiate(fe);
    g_assert_cmpint(atomic_load(&d->set_features_calls), ==, 1);
    /* The vhost-user bit is not a device feature. */
    g_assert_cmphex(atomic_load(&d->features), ==,
                    (1ull << VIRTIO_F_VERSION_1) |
                    (1ull << DUMMY_FEATURE_BIT));
    g_assert_cmpuint(fe_get_u64(fe, VHOST_USER_GET_QUEUE_NUM), ==,
                     NUM_QUEUES);
    g_assert_cmpuint(fe_get_u64(fe, VHOST_USER_GET_MAX_MEM_SLOTS), ==,
                     GUEST_MEMORY_MAX_SLOTS);
    g_assert_true(server_has_client(s));

    /* The whole config space, then a slice. */
    cfg.size = DUMMY_CONFIG_LEN;
    fe_send(fe, VHOST_USER_GET_CONFIG, VHOST_USER_VERSION, &cfg,
            VHOST_USER_CONFIG_HDR_SIZE + cfg.size, NULL, 0);
    n = fe_recv(fe, VHOST_USER_GET_CONFIG, &cfg, sizeof(cfg));
    g_assert_cmpuint(n, ==, VHOST_USER_CONFIG_HDR_SIZE + DUMMY_CONFIG_LEN);
    g_assert_cmpmem(cfg.region, DUMMY_CONFIG_LEN, "spindle-dummy-01",
                    DUMMY_CONFIG_LEN);
    cfg = (VhostUserConfig) { .offset = 8, .size = 4 };
    fe_send(fe, VHOST_USER_GET_CONFIG, VHOST_USER_VERSION, &cfg,
            VHOST_USER_CONFIG_HDR_SIZE + cfg.size, NULL, 0);
    n = fe_recv(fe, VHOST_USER_GET_CONFIG, &cfg, sizeof(cfg));
    g_assert_cmpuint(n, ==, VHOST_USER_CONFIG_HDR_SIZE + 4);
    g_assert_cmpuint(cfg.offset, ==, 8);
    g_assert_cmpmem(cfg.region, 4, "dumm", 4);

    /* Past the device's config space: zeros. */
    memset(&cfg, 0xff, sizeof(cfg));
    cfg.offset = 0;
    cfg.size = 40;
    fe_send(fe, VHOST_USER_GET_CONFIG, VHOST_USER_VERSION, &cfg,
            VHOST_USER_CONFIG_HDR_SIZE + cfg.size, NULL, 0);
    n = fe_recv(fe, VHOST_USER_GET_CONFIG, &cfg, sizeof(cfg));
    g_assert_cmpuint(n, ==, VHOST_USER_CONFIG_HDR_SIZE + 40);
    for (unsigned i = DUMMY_CONFIG_LEN; i < 40; i++) {
        g_assert_cmpuint(cfg.region[i], ==, 0);
    }

    /* Beyond 256 bytes: an empty reply says "failed". */
    cfg = (VhostUserConfig) { .offset = 250, .size = 10 };
    fe_send(fe, VHOST_USER_GET_CONFIG, VHOST_USER_VERSION, &cfg,
            VHOST_USER_CONFIG_HDR_SIZE + cfg.size, NULL, 0);
    g_assert_cmpuint(fe_recv(fe, VHOST_USER_GET_CONFIG, &cfg, sizeof(cfg)),
                     ==, 0);

    /* A config write the device accepts, one it refuses. */
    memcpy(payload, &(VhostUserConfig) { .offset = 0, .size = 4 },
           VHOST_USER_CONFIG_HDR_SIZE);
    memcpy(payload + VHOST_USER_CONFIG_HDR_SIZE, "SPIN", 4);
    fe_ok(fe, VHOST_USER_SET_CONFIG, payload, VHOST_USER_CONFIG_HDR_SIZE + 4,
          NULL, 0);
    g_assert_cmpint(atomic_load(&d->set_config_calls), ==, 1);
    memcpy(payload, &(VhostUserConfig) { .offset = 6, .size = 8 },
           VHOST_USER_CONFIG_HDR_SIZE);
    fe_fails(fe, VHOST_USER_SET_CONFIG, payload,
             VHOST_USER_CONFIG_HDR_SIZE + 8, NULL, 0);
    cfg = (VhostUserConfig) { .offset = 0, .size = 8 };
    fe_send(fe, VHOST_USER_GET_CONFIG, VHOST_USER_VERSION, &cfg,
            VHOST_USER_CONFIG_HDR_SIZE + cfg.size, NULL, 0);
    fe_recv(fe, VHOST_USER_GET_CONFIG, &cfg, sizeof(cfg));
    g_assert_cmpmem(cfg.region, 8, "SPINdle-", 8);

    /* Features that were not offered are refused. */
    fe_fails(fe, VHOST_USER_SET_FEATURES, &(uint64_t) { 1ull << 40 }, 8,
             NULL, 0);
    fe_fails(fe, VHOST_USER_SET_PROTOCOL_FEATURES,
             &(uint64_t) { 1ull << VHOST_USER_PROTOCOL_F_STATUS }, 8,
             NULL, 0);
    /* RESET_DEVICE forgets the features, keeps the connection. */
    fe_ok(fe, VHOST_USER_RESET_DEVICE, NULL, 0, NULL, 0);
    g_assert_cmpint(atomic_load(&d->set_features_calls), ==, 1);
    g_assert_cmpuint(fe_get_u64(fe, VHOST_USER_GET_QUEUE_NUM), ==,
                     NUM_QUEUES);

    vuf_free(fe);
    server_wait_no_client(s);
    server_free(s);
    g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));
    dummy_free(d);
    g_free(path);
}

/* need_reply means nothing until REPLY_ACK is negotiated. */
static void test_reply_ack(void)
{
    Export e = export_new("reply-ack.sock");
    VuFrontend *fe = fe_connect(e.path);
    uint64_t pf = 1ull << VHOST_USER_PROTOCOL_F_REPLY_ACK;
    int efd;

    fe_send(fe, VHOST_USER_SET_OWNER, NEED_REPLY, NULL, 0, NULL, 0);
    /* The next reply is GET_FEATURES', not an ack. */
    g_assert_cmphex(fe_get_u64(fe, VHOST_USER_GET_FEATURES), ==,
                    transport_features | (1ull << DUMMY_FEATURE_BIT));
    fe_send(fe, VHOST_USER_SET_PROTOCOL_FEATURES, VHOST_USER_VERSION, &pf,
            sizeof(pf), NULL, 0);
    /* Success and failure statuses. */
    fe_ok(fe, VHOST_USER_SET_OWNER, NULL, 0, NULL, 0);
    fe_fails(fe, VHOST_USER_SET_VRING_NUM,
             &(VhostUserVringState) { .index = 0, .num = 3 }, 8, NULL, 0);
    fe_ok_state(fe, VHOST_USER_SET_VRING_NUM, 0, 16);
    /* Dirty logging was not negotiated: refused, connection kept. */
    efd = eventfd(0, EFD_CLOEXEC);
    fe_fails(fe, VHOST_USER_SET_LOG_FD, NULL, 0, &efd, 1);
    close(efd);
    /* A request with its own reply answers with it, not with an ack. */
    fe_send(fe, VHOST_USER_GET_QUEUE_NUM, NEED_REPLY, NULL, 0, NULL, 0);
    g_assert_cmpuint(fe_recv(fe, VHOST_USER_GET_QUEUE_NUM, &pf, sizeof(pf)),
                     ==, sizeof(pf));
    g_assert_cmpuint(pf, ==, NUM_QUEUES);

    vuf_free(fe);
    export_free(&e);
}

static void test_mem_table(void)
{
    Export e = export_new("mem-table.sock");
    int fds0 = count_fds();
    VuFrontend *fe = fe_connect(e.path);
    VhostUserMemory m = { .nregions = 2 };
    VhostUserMemRegMsg reg = { 0 };
    const uint32_t two = offsetof(VhostUserMemory, regions) +
                         2 * sizeof(VhostUserMemRegion);
    int memfd = vuf_mem_fd(fe);
    int fds[2] = { memfd, memfd };

    fe_negotiate(fe);
    /* Guest addresses from GPA_BASE, so that they differ from the file
     * offsets. */
    m.regions[0] = guest_region(fe, GPA_BASE, 0, MEM_SIZE / 4);
    m.regions[1] = guest_region(fe, GPA_BASE + MEM_SIZE / 2, MEM_SIZE / 2,
                                MEM_SIZE / 4);
    fe_ok(fe, VHOST_USER_SET_MEM_TABLE, &m, two, fds, 2);

    /* Hot-add the quarter in between, remove it again. */
    reg.region = guest_region(fe, GPA_BASE + MEM_SIZE / 4, MEM_SIZE / 4,
                              MEM_SIZE / 4);
    fe_ok(fe, VHOST_USER_ADD_MEM_REG, &reg, sizeof(reg), &memfd, 1);
    /* Overlapping an existing region. */
    fe_fails(fe, VHOST_USER_ADD_MEM_REG, &reg, sizeof(reg), &memfd, 1);
    fe_ok(fe, VHOST_USER_REM_MEM_REG, &reg, sizeof(reg), NULL, 0);
    fe_fails(fe, VHOST_USER_REM_MEM_REG, &reg, sizeof(reg), NULL, 0);
    /* An fd with REM_MEM_REG is tolerated (and closed). */
    fe_ok(fe, VHOST_USER_ADD_MEM_REG, &reg, sizeof(reg), &memfd, 1);
    fe_ok(fe, VHOST_USER_REM_MEM_REG, &reg, sizeof(reg), &memfd, 1);

    /* Wrong fd counts, region counts and sizes: refused, nothing kept. */
    fe_fails(fe, VHOST_USER_SET_MEM_TABLE, &m, two, fds, 1);
    fe_fails(fe, VHOST_USER_SET_MEM_TABLE, &m, two, NULL, 0);
    fe_fails(fe, VHOST_USER_SET_MEM_TABLE, &m, two - 8, fds, 2);
    fe_fails(fe, VHOST_USER_ADD_MEM_REG, &reg, sizeof(reg), NULL, 0);
    fe_fails(fe, VHOST_USER_ADD_MEM_REG, &reg, sizeof(reg), fds, 2);
    m.nregions = 9;
    fe_fails(fe, VHOST_USER_SET_MEM_TABLE, &m, two, fds, 2);
    m.nregions = 0;
    fe_fails(fe, VHOST_USER_SET_MEM_TABLE, &m, 8, NULL, 0);
    /* A region of size 0. */
    m.nregions = 1;
    m.regions[0].memory_size = 0;
    fe_fails(fe, VHOST_USER_SET_MEM_TABLE, &m,
             offsetof(VhostUserMemory, regions) + sizeof(m.regions[0]),
             fds, 1);

    /* The mappings and received fds are gone after the client. */
    g_assert_cmpint(count_maps(memfd), >, 1);
    vuf_disconnect(fe);
    server_wait_no_client(e.s);
    g_assert_cmpint(count_maps(memfd), ==, 1);
    vuf_free(fe);
    g_assert_cmpint(count_fds(), ==, fds0);
    export_free(&e);
}

static void test_ring_io(void)
{
    char *path = sock_path("ring-io.sock");
    Dummy *d = dummy_new(srv_ctx, test_thread);
    VuServer *s = server_new(path, d);
    VuFrontend *fe = fe_connect(path);
    VhostUserMemRegMsg reg = { 0 };
    VirtQueueStats st;
    Ring r0, r1;

    ring_init(&r0, fe, 0);
    ring_init(&r1, fe, 1);
    fe_negotiate(fe);
    fe_set_mem_table(fe);
    fe_setup_ring(fe, &r0, 0);
    fe_setup_ring(fe, &r1, 0);
    g_assert_cmpint(atomic_load(&d->started), ==, 2);
    g_assert_true(virtqueue_get_aio_context(server_queue(s, 0)) ==
                  queue_ctxs[0]);
    g_assert_true(virtqueue_get_aio_context(server_queue(s, 1)) ==
                  queue_ctxs[1]);

    for (int i = 0; i < 5; i++) {
        char text[32];

        snprintf(text, sizeof(text), "ring 0 request %d", i);
        drv_echo(&r0, text);
    }
    for (int i = 0; i < 3; i++) {
        drv_echo(&r1, "ring 1 says hi");
    }
    g_assert_cmpint(atomic_load(&d->handled), ==, 8);
    virtqueue_get_stats(server_queue(s, 0), &st);
    g_assert_cmpuint(st.requests, ==, 5);

    /* New memory tables reach running rings without stopping them. */
    fe_set_mem_table(fe);
    drv_echo(&r0, "after SET_MEM_TABLE");
    reg.region = guest_region(fe, GPA_BASE + 2 * MEM_SIZE, 0, MEM_SIZE);
    reg.region.userspace_addr = 0x1000000000ull;
    fe_ok(fe, VHOST_USER_ADD_MEM_REG, &reg, sizeof(reg),
          &(int) { vuf_mem_fd(fe) }, 1);
    drv_echo(&r1, "after ADD_MEM_REG");
    fe_ok(fe, VHOST_USER_REM_MEM_REG, &reg, sizeof(reg), NULL, 0);
    drv_echo(&r0, "after REM_MEM_REG");
    g_assert_cmpint(atomic_load(&d->started), ==, 2);
    g_assert_cmpint(atomic_load(&d->drained), ==, 0);

    /* A new call fd on a running ring takes effect at once. */
    fe_set_vring_fd(fe, VHOST_USER_SET_VRING_CALL, 1,
                    vufq_renew_call_fd(r1.q));
    drv_echo(&r1, "after the call fd changed");
    g_assert_cmpint(atomic_load(&d->drained), ==, 0);

    /* Stop: the index of the next request to process. */
    g_assert_cmpuint(fe_get_vring_base(fe, 0), ==, 7);
    g_assert_cmpuint(fe_get_vring_base(fe, 1), ==, 5);
    g_assert_cmpint(atomic_load(&d->drained), ==, 2);
    g_assert_false(virtqueue_is_started(server_queue(s, 0)));

    /* A stopped ring does not process; it restarts with a new kick fd. */
    drv_post(&r0, "while stopped", r0.out_gpa);
    sleep_ns(50 * NS_PER_MS);
    g_assert_cmpuint(ring_used_idx(&r0), ==, 7);
    fe_ok_state(fe, VHOST_USER_SET_VRING_ENABLE, 0, 1);
    g_assert_false(virtqueue_is_started(server_queue(s, 0)));
    fe_ok_state(fe, VHOST_USER_SET_VRING_BASE, 0, 7);
    fe_set_vring_fd(fe, VHOST_USER_SET_VRING_KICK, 0,
                    vufq_renew_kick_fd(r0.q));
    /* The request posted while stopped is found at start. */
    drv_complete(&r0, "while stopped");
    drv_echo(&r0, "after restart");
    g_assert_cmpuint(fe_get_vring_base(fe, 0), ==, 9);

    /* SET_VRING_ENABLE 0 stops a running ring, 1 restarts it. */
    fe_ok_state(fe, VHOST_USER_SET_VRING_BASE, 1, 5);
    fe_set_vring_fd(fe, VHOST_USER_SET_VRING_KICK, 1,
                    vufq_renew_kick_fd(r1.q));
    drv_echo(&r1, "ring 1 again");
    fe_ok_state(fe, VHOST_USER_SET_VRING_ENABLE, 1, 0);
    g_assert_false(virtqueue_is_started(server_queue(s, 1)));
    fe_ok_state(fe, VHOST_USER_SET_VRING_ENABLE, 1, 1);
    g_assert_true(virtqueue_is_started(server_queue(s, 1)));
    drv_echo(&r1, "re-enabled");

    /* Ring set-up on a running ring is refused. */
    fe_fails(fe, VHOST_USER_SET_VRING_NUM,
             &(VhostUserVringState) { .index = 1, .num = 16 }, 8, NULL, 0);
    fe_fails(fe, VHOST_USER_SET_VRING_BASE,
             &(VhostUserVringState) { .index = 1, .num = 0 }, 8, NULL, 0);

    g_assert_cmpint(atomic_load(&d->pop_errors), ==, 0);
    vuf_disconnect(fe);
    server_wait_no_client(s);
    /* The disconnect stopped and drained the running ring. */
    g_assert_cmpint(atomic_load(&d->drained), ==, 5);
    server_free(s);
    vuf_free(fe);
    dummy_free(d);
    g_free(path);
}

/*
 * Over the socket too, a new call eventfd is signalled once as soon as
 * SET_VRING_CALL is handled (its REPLY_ACK comes after): long before the
 * ring runs, and on a running ring (swapped in its IOThread).  The ring
 * then works as usual: the driver takes the early interrupt as a look at
 * an unchanged used ring.
 */
static void test_call_fd_signalled(void)
{
    Export e = export_new("call-fd.sock");
    VuFrontend *fe = fe_connect(e.path);
    Ring r0;

    ring_init(&r0, fe, 0);
    fe_negotiate(fe);
    fe_set_vring_fd(fe, VHOST_USER_SET_VRING_CALL, 0, vufq_call_fd(r0.q));
    g_assert_cmpuint(vufq_collect_interrupts(r0.q), ==, 1);
    g_assert_cmpuint(vufq_collect_interrupts(r0.q), ==, 0);

    fe_set_mem_table(fe);
    fe_setup_ring(fe, &r0, 0);       /* SET_VRING_CALL again: one more */
    g_assert_true(virtqueue_is_started(server_queue(e.s, 0)));
    g_assert_cmpuint(vufq_collect_interrupts(r0.q), ==, 1);
    drv_echo(&r0, "after the early interrupts");

    fe_set_vring_fd(fe, VHOST_USER_SET_VRING_CALL, 0,
                    vufq_renew_call_fd(r0.q));
    g_assert_cmpuint(vufq_collect_interrupts(r0.q), ==, 1);
    drv_echo(&r0, "after the call fd changed");
    g_assert_cmpint(atomic_load(&e.d->pop_errors), ==, 0);

    vuf_disconnect(fe);
    export_free(&e);
    vuf_free(fe);
}

/* The front-end goes away with rings running; the next one starts over. */
static void test_reconnect(void)
{
    Export e = export_new("reconnect.sock");
    int fds0 = count_fds();
    VuFrontend *fe = fe_connect(e.path);
    uint16_t base;
    Ring r0;

    ring_init(&r0, fe, 0);
    fe_negotiate(fe);
    fe_set_mem_table(fe);
    fe_setup_ring(fe, &r0, 0);
    drv_echo(&r0, "first connection 1");
    drv_echo(&r0, "first connection 2");
    drv_echo(&r0, "first connection 3");
    vuf_disconnect(fe);
    server_wait_no_client(e.s);
    g_assert_cmpint(atomic_load(&e.d->drained), ==, 1);
    g_assert_cmpint(count_maps(vuf_mem_fd(fe)), ==, 1);

    /* Like QEMU: the base is the used index found in guest memory (read
     * before the new session resets the rings; new eventfds too). */
    base = ring_used_idx(&r0);
    fe_open(fe);
    fe_negotiate(fe);
    fe_set_mem_table(fe);
    fe_setup_ring(fe, &r0, base);
    drv_echo(&r0, "second connection");
    g_assert_cmpuint(fe_get_vring_base(fe, 0), ==, 4);
    g_assert_cmpint(atomic_load(&e.d->started), ==, 2);
    vuf_disconnect(fe);
    server_wait_no_client(e.s);

    vuf_free(fe);
    /* Every fd the server received is closed, every region unmapped. */
    g_assert_cmpint(count_fds(), ==, fds0);
    export_free(&e);
}

/* A second front-end waits until the first one is gone. */
static void test_second_client_waits(void)
{
    Export e = export_new("second.sock");
    VuFrontend *fe1 = fe_connect(e.path);
    VuFrontend *fe2;
    VhostUserHeader h;
    uint64_t v;

    fe_negotiate(fe1);
    fe2 = fe_connect(e.path);
    fe_send(fe2, VHOST_USER_GET_QUEUE_NUM, VHOST_USER_VERSION, NULL, 0,
            NULL, 0);
    g_assert_cmpint(fe_recv_any(fe2, 200, &h, &v, sizeof(v)), ==,
                    VUF_RECV_TIMEOUT);
    /* The first client is still served. */
    g_assert_cmpuint(fe_get_u64(fe1, VHOST_USER_GET_QUEUE_NUM), ==,
                     NUM_QUEUES);
    vuf_free(fe1);
    /* Now the second is accepted and its request answered. */
    g_assert_cmpuint(fe_recv(fe2, VHOST_USER_GET_QUEUE_NUM,
                             &(uint64_t) { 0 }, 8), ==, 8);
    fe_negotiate(fe2);
    vuf_free(fe2);
    export_free(&e);
}

/* Bad requests the front-end asked an ack for: refused, connection kept. */
static void check_refused_with_ack(VuFrontend *fe, int efd)
{
    VhostUserVringState st = { .index = 0, .num = 100 };
    uint8_t zeros[16] = { 0 };
    uint64_t v = 0;
    int nine[9];

    /* Unknown request, wrong payload sizes. */
    fe_fails(fe, 99, NULL, 0, NULL, 0);
    fe_fails(fe, VHOST_USER_SET_FEATURES, zeros, 4, NULL, 0);
    fe_fails(fe, VHOST_USER_SET_VRING_NUM, zeros, 12, NULL, 0);
    /* Ring sizes: not a power of two, zero, above the maximum. */
    fe_fails(fe, VHOST_USER_SET_VRING_NUM, &st, sizeof(st), NULL, 0);
    st.num = 0;
    fe_fails(fe, VHOST_USER_SET_VRING_NUM, &st, sizeof(st), NULL, 0);
    st.num = 2 * MAX_QUEUE_SIZE;
    fe_fails(fe, VHOST_USER_SET_VRING_NUM, &st, sizeof(st), NULL, 0);
    /* Ring index out of range. */
    st = (VhostUserVringState) { .index = NUM_QUEUES, .num = 8 };
    fe_fails(fe, VHOST_USER_SET_VRING_NUM, &st, sizeof(st), NULL, 0);
    fe_fails(fe, VHOST_USER_SET_VRING_ENABLE, &st, sizeof(st), NULL, 0);
    v = NUM_QUEUES;
    fe_fails(fe, VHOST_USER_SET_VRING_KICK, &v, sizeof(v), &efd, 1);
    /* Base beyond 16 bits, enable not 0/1. */
    st = (VhostUserVringState) { .index = 0, .num = 0x10000 };
    fe_fails(fe, VHOST_USER_SET_VRING_BASE, &st, sizeof(st), NULL, 0);
    st.num = 2;
    fe_fails(fe, VHOST_USER_SET_VRING_ENABLE, &st, sizeof(st), NULL, 0);
    /* Missing fd; fd with the no-fd flag; unknown bits. */
    v = 0;
    fe_fails(fe, VHOST_USER_SET_VRING_KICK, &v, sizeof(v), NULL, 0);
    fe_fails(fe, VHOST_USER_SET_VRING_CALL, &v, sizeof(v), NULL, 0);
    v = VHOST_USER_VRING_NOFD_MASK;
    fe_fails(fe, VHOST_USER_SET_VRING_CALL, &v, sizeof(v), &efd, 1);
    v = 1ull << 9;
    fe_fails(fe, VHOST_USER_SET_VRING_CALL, &v, sizeof(v), &efd, 1);
    /* An fd with a request that takes none. */
    fe_fails(fe, VHOST_USER_SET_OWNER, NULL, 0, &efd, 1);
    /* Too many fds: the kernel drops the ninth, the server the others. */
    for (int i = 0; i < 9; i++) {
        nine[i] = efd;
    }
    v = 0;
    fe_fails(fe, VHOST_USER_SET_VRING_CALL, &v, sizeof(v), nine, 9);
    /* Config accesses with inconsistent sizes. */
    fe_fails(fe, VHOST_USER_SET_CONFIG,
             &(VhostUserConfig) { .offset = 0, .size = 8 },
             VHOST_USER_CONFIG_HDR_SIZE + 4, NULL, 0);
    fe_fails(fe, VHOST_USER_SET_CONFIG,
             &(VhostUserConfig) { .offset = 0, .size = 300 },
             VHOST_USER_CONFIG_HDR_SIZE, NULL, 0);
    /* Still fine. */
    fe_ok(fe, VHOST_USER_SET_OWNER, NULL, 0, NULL, 0);
}

/* Open a connection, negotiate, send one bad message: it must be closed. */
static void check_closes(const char *path, uint32_t req, uint32_t flags,
                         const void *payload, uint32_t size, const int *fds,
                         unsigned nfds)
{
    VuFrontend *fe = fe_connect(path);

    fe_negotiate(fe);
    fe_send(fe, req, flags, payload, size, fds, nfds);
    fe_expect_closed(fe);
    vuf_free(fe);
}

static void test_malformed(void)
{
    Export e = export_new("malformed.sock");
    int fds0 = count_fds();
    int efd = eventfd(0, EFD_CLOEXEC);
    VhostUserVringState st = { .index = NUM_QUEUES };
    uint8_t big[VHOST_USER_MAX_PAYLOAD + 8] = { 0 };
    VuFrontend *fe;

    fe = fe_connect(e.path);
    fe_negotiate(fe);
    check_refused_with_ack(fe, efd);
    vuf_free(fe);
    server_wait_no_client(e.s);

    /* Without need_reply a bad request closes the connection. */
    check_closes(e.path, 99, VHOST_USER_VERSION, NULL, 0, NULL, 0);
    check_closes(e.path, VHOST_USER_SET_VRING_NUM, VHOST_USER_VERSION,
                 &(VhostUserVringState) { .index = 0, .num = 3 }, 8,
                 NULL, 0);
    check_closes(e.path, VHOST_USER_SET_VRING_KICK, VHOST_USER_VERSION,
                 &(uint64_t) { 0 }, 8, NULL, 0);
    /* Requests with their own reply cannot carry an error ack. */
    check_closes(e.path, VHOST_USER_GET_VRING_BASE, NEED_REPLY, &st,
                 sizeof(st), NULL, 0);
    check_closes(e.path, VHOST_USER_GET_FEATURES, NEED_REPLY, big, 8, NULL, 0);
    /* Framing: version, reply flag, oversized payload. */
    check_closes(e.path, VHOST_USER_SET_OWNER, 0x2, NULL, 0, NULL, 0);
    check_closes(e.path, VHOST_USER_SET_OWNER,
                 VHOST_USER_VERSION | VHOST_USER_REPLY_MASK, NULL, 0,
                 NULL, 0);
    check_closes(e.path, VHOST_USER_SET_CONFIG, VHOST_USER_VERSION, big,
                 sizeof(big), &efd, 1);
    /* A header announcing more than the server accepts, then silence. */
    fe = fe_connect(e.path);
    fe_send_header(fe, VHOST_USER_SET_OWNER, 0x7fffffff, NULL, 0);
    fe_expect_closed(fe);
    vuf_free(fe);
    server_wait_no_client(e.s);

    close(efd);
    /* Every fd that came with a bad message was closed. */
    g_assert_cmpint(count_fds(), ==, fds0);
    check_server_alive(e.path);
    g_assert_cmpint(atomic_load(&e.d->started), ==, 0);
    export_free(&e);
}

/*
 * A ring marked broken logs a warning: expected where the tests break one,
 * so it is counted and not fatal.  Every other warning stays fatal.
 */
static bool is_broken_ring_warning(GLogLevelFlags level, const gchar *message)
{
    return (level & G_LOG_LEVEL_WARNING) && strstr(message, "is broken");
}

static gboolean fatal_log_filter(const gchar *domain, GLogLevelFlags level,
                                 const gchar *message, gpointer data)
{
    return !is_broken_ring_warning(level, message);
}

static void warning_handler(const gchar *domain, GLogLevelFlags level,
                            const gchar *message, gpointer data)
{
    if (is_broken_ring_warning(level, message)) {
        atomic_fetch_add(&broken_warnings, 1);
        fprintf(stderr, "expected warning: %s\n", message);
        return;
    }
    g_log_default_handler(domain, level, message, data);
}

static void wait_broken(VirtQueue *vq)
{
    int64_t end = clock_now_ns() + 5 * NS_PER_SEC;

    while (!virtqueue_is_broken(vq)) {
        g_assert_cmpint(clock_now_ns(), <, end);
        sleep_ns(NS_PER_MS);
    }
}

/* Rings outside guest memory break that ring only. */
static void test_ring_outside_memory(void)
{
    Export e1 = export_new("outside-1.sock");
    Export e2 = export_new("outside-2.sock");
    VuFrontend *fe1 = fe_connect(e1.path);
    VuFrontend *fe2 = fe_connect(e2.path);
    int warnings = atomic_load(&broken_warnings);
    VhostUserVringAddr a;
    Ring r0, r1, q0;

    /* GLib resets this for every test case. */
    g_test_log_set_fatal_handler(fatal_log_filter, NULL);
    ring_init(&r0, fe1, 0);
    ring_init(&r1, fe1, 1);
    ring_init(&q0, fe2, 0);
    fe_negotiate(fe1);
    fe_negotiate(fe2);
    fe_set_mem_table(fe1);
    fe_set_mem_table(fe2);

    /* Ring 0's used ring lies past the end of guest memory. */
    a = ring_addr(&r0);
    a.used_user_addr = guest_qva(fe1, MEM_SIZE - 16);
    fe_ok_state(fe1, VHOST_USER_SET_VRING_NUM, 0, RING_NUM);
    fe_ok(fe1, VHOST_USER_SET_VRING_ADDR, &a, sizeof(a), NULL, 0);
    fe_set_vring_fd(fe1, VHOST_USER_SET_VRING_KICK, 0, vufq_kick_fd(r0.q));
    fe_ok_state(fe1, VHOST_USER_SET_VRING_ENABLE, 0, 1);
    g_assert_false(virtqueue_is_started(server_queue(e1.s, 0)));
    g_assert_true(virtqueue_is_broken(server_queue(e1.s, 0)));
    g_assert_cmpint(atomic_load(&broken_warnings), ==, warnings + 1);

    /* Ring 1 of the same export and the other export work. */
    fe_setup_ring(fe1, &r1, 0);
    fe_setup_ring(fe2, &q0, 0);
    drv_echo(&r1, "ring 1 is fine");
    drv_echo(&q0, "the other export is fine");

    /* A descriptor outside guest memory breaks a running ring. */
    drv_post(&r1, "bad buffer", MEM_SIZE);
    wait_broken(server_queue(e1.s, 1));
    /* The handler sees -EIO once the queue is marked and the warning out. */
    while (atomic_load(&e1.d->pop_errors) == 0) {
        sleep_ns(NS_PER_MS);
    }
    g_assert_true(poll(&(struct pollfd) { .fd = vufq_call_fd(r1.q),
                                          .events = POLLIN }, 1, 0) == 0);
    g_assert_cmpint(atomic_load(&e1.d->pop_errors), ==, 1);
    g_assert_cmpint(atomic_load(&broken_warnings), ==, warnings + 2);
    drv_echo(&q0, "the other export is still fine");
    /* The broken ring can still be stopped; the connection works. */
    g_assert_cmpuint(fe_get_vring_base(fe1, 1), ==, 1);
    g_assert_cmpuint(fe_get_u64(fe1, VHOST_USER_GET_QUEUE_NUM), ==,
                     NUM_QUEUES);

    vuf_free(fe1);
    vuf_free(fe2);
    export_free(&e1);
    export_free(&e2);
}

/* A front-end that stops in the middle of a message is dropped. */
static void test_half_message(void)
{
    Export e1 = export_new("half-1.sock");
    Export e2 = export_new("half-2.sock");
    VhostUserHeader h = { VHOST_USER_SET_FEATURES, VHOST_USER_VERSION, 8 };
    uint8_t half[4] = { 0 };
    VuFrontend *fe = fe_connect(e1.path);
    Error *err = NULL;
    int64_t t0;

    fe_negotiate(fe);
    /* Header and half of the payload. */
    t0 = clock_now_ns();
    fe_send_header(fe, h.request, h.size, half, sizeof(half));
    fe_expect_closed(fe);
    g_assert_cmpint(clock_now_ns() - t0, <, 3 * NS_PER_SEC);
    vuf_free(fe);
    server_wait_no_client(e1.s);

    /* Half of a header. */
    fe = fe_connect(e1.path);
    vuf_send_bytes(fe, &h, 6, NULL, 0, &err);
    g_assert_no_error(err);
    fe_expect_closed(fe);
    vuf_free(fe);
    server_wait_no_client(e1.s);

    /* Both servers still serve. */
    check_server_alive(e1.path);
    check_server_alive(e2.path);
    export_free(&e1);
    export_free(&e2);
}

static void test_socket_path(void)
{
    char *path = sock_path("stale.sock");
    char *file = sock_path("regular-file");
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    Dummy *d = dummy_new(srv_ctx, test_thread);
    Error *err = NULL;
    struct stat st;
    VuServer *s, *s2;
    char *longpath;
    int fd;

    /* A socket file nobody listens on (its server died): replaced. */
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    g_strlcpy(sun.sun_path, path, sizeof(sun.sun_path));
    g_assert_cmpint(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), ==, 0);
    close(fd);
    g_assert_cmpint(stat(path, &st), ==, 0);
    g_assert_true(S_ISSOCK(st.st_mode));
    s = server_new(path, d);
    g_assert_cmpint(stat(path, &st), ==, 0);
    g_assert_true(S_ISSOCK(st.st_mode));
    g_assert_cmpint(st.st_mode & 0777, ==, 0600);
    check_server_alive(path);

    /* A live server at the path: refused, and its socket left alone. */
    s2 = server_try_new(path, -1, d, &err);
    g_assert_null(s2);
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err->message, "in use"));
    g_clear_error(&err);
    check_server_alive(path);
    server_wait_no_client(s);
    server_free(s);
    g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));

    /* A regular file: refused and kept. */
    g_assert_true(g_file_set_contents(file, "data", -1, NULL));
    s = server_try_new(file, -1, d, &err);
    g_assert_null(s);
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err->message, "not a socket"));
    g_clear_error(&err);
    g_assert_true(g_file_test(file, G_FILE_TEST_IS_REGULAR));
    unlink(file);

    /* A path longer than sun_path. */
    longpath = g_strnfill(200, 'x');
    s = server_try_new(longpath, -1, d, &err);
    g_assert_null(s);
    g_assert_nonnull(err);
    g_clear_error(&err);

    dummy_free(d);
    g_free(longpath);
    g_free(file);
    g_free(path);
}

static void test_listen_fd(void)
{
    char *path = sock_path("inherited.sock");
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    Dummy *d = dummy_new(srv_ctx, test_thread);
    Error *err = NULL;
    VuServer *s;
    int lfd, plain, pipefd[2];

    lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    g_strlcpy(sun.sun_path, path, sizeof(sun.sun_path));
    g_assert_cmpint(bind(lfd, (struct sockaddr *)&sun, sizeof(sun)), ==, 0);
    g_assert_cmpint(listen(lfd, 4), ==, 0);
    s = server_try_new(NULL, lfd, d, &err);
    g_assert_no_error(err);
    g_assert_nonnull(s);
    check_server_alive(path);
    check_server_alive(path);
    server_wait_no_client(s);
    server_free(s);
    /* The caller's fd is still its own; the file is not ours to remove. */
    g_assert_cmpint(fcntl(lfd, F_GETFD), >=, 0);
    g_assert_true(g_file_test(path, G_FILE_TEST_EXISTS));
    close(lfd);
    unlink(path);

    /* Not listening, not a socket. */
    plain = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    g_assert_null(server_try_new(NULL, plain, d, &err));
    g_assert_nonnull(err);
    g_clear_error(&err);
    close(plain);
    g_assert_cmpint(pipe(pipefd), ==, 0);
    g_assert_null(server_try_new(NULL, pipefd[0], d, &err));
    g_assert_nonnull(err);
    g_clear_error(&err);
    close(pipefd[0]);
    close(pipefd[1]);
    g_assert_null(server_try_new(NULL, -1, d, &err));
    g_assert_nonnull(err);
    g_clear_error(&err);

    dummy_free(d);
    g_free(path);
}

/* ------------------------------------------------------------------------ */
/* The back-end channel                                                      */

/* A socket pair for SET_SLAVE_REQ_FD: sv[0] stays ours, sv[1] is sent. */
static void channel_pair(int sv[2])
{
    g_assert_cmpint(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
                    ==, 0);
}

/* The next message on our end must be a header-only CONFIG_CHANGE_MSG
 * that asks for no reply, and nothing may follow it. */
static void expect_config_change_msg(int fd)
{
    VhostUserHeader h;
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    char extra;

    g_assert_cmpint(poll(&pfd, 1, RECV_TIMEOUT_S * 1000), ==, 1);
    g_assert_cmpint(recv(fd, &h, sizeof(h), MSG_WAITALL), ==, sizeof(h));
    g_assert_cmpuint(h.request, ==, VHOST_USER_SLAVE_CONFIG_CHANGE_MSG);
    g_assert_cmpuint(h.request, ==, 2);
    g_assert_cmphex(h.flags, ==, VHOST_USER_VERSION);
    g_assert_cmpuint(h.size, ==, 0);
    g_assert_cmpint(recv(fd, &extra, 1, MSG_DONTWAIT), ==, -1);
    g_assert_cmpint(errno, ==, EAGAIN);
}

/* The server closed its end of the channel: we read end-of-file. */
static void expect_channel_closed(int fd)
{
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    char c;

    g_assert_cmpint(poll(&pfd, 1, RECV_TIMEOUT_S * 1000), ==, 1);
    g_assert_cmpint(recv(fd, &c, 1, MSG_DONTWAIT), ==, 0);
}

static void test_backend_channel(void)
{
    Export e = export_new("channel.sock");
    int fds0 = count_fds();
    VuFrontend *fe;
    int sv1[2], sv2[2];
    uint64_t junk = 0;

    /* No front-end, then one without a channel: nothing is sent. */
    g_assert_false(server_config_changed(e.s));
    fe = fe_connect(e.path);
    fe_negotiate(fe);
    g_assert_false(server_config_changed(e.s));

    /* Malformed SET_SLAVE_REQ_FD: no fd, or a payload.  Refused. */
    channel_pair(sv1);
    fe_fails(fe, VHOST_USER_SET_SLAVE_REQ_FD, NULL, 0, NULL, 0);
    fe_fails(fe, VHOST_USER_SET_SLAVE_REQ_FD, &junk, sizeof(junk), &sv1[1],
             1);
    g_assert_false(server_config_changed(e.s));

    /* The channel: one header-only message per change. */
    fe_ok(fe, VHOST_USER_SET_SLAVE_REQ_FD, NULL, 0, &sv1[1], 1);
    close(sv1[1]);
    g_assert_true(server_config_changed(e.s));
    expect_config_change_msg(sv1[0]);
    g_assert_true(server_config_changed(e.s));
    expect_config_change_msg(sv1[0]);

    /* A second channel replaces the first, whose fd the server closes. */
    channel_pair(sv2);
    fe_ok(fe, VHOST_USER_SET_SLAVE_REQ_FD, NULL, 0, &sv2[1], 1);
    close(sv2[1]);
    expect_channel_closed(sv1[0]);
    close(sv1[0]);
    g_assert_true(server_config_changed(e.s));
    expect_config_change_msg(sv2[0]);

    /* RESET_DEVICE keeps it (QEMU sets it up once per connection);
     * RESET_OWNER drops it. */
    fe_ok(fe, VHOST_USER_RESET_DEVICE, NULL, 0, NULL, 0);
    g_assert_true(server_config_changed(e.s));
    expect_config_change_msg(sv2[0]);
    fe_ok(fe, VHOST_USER_RESET_OWNER, NULL, 0, NULL, 0);
    expect_channel_closed(sv2[0]);
    g_assert_false(server_config_changed(e.s));
    close(sv2[0]);

    /* The connection still works. */
    g_assert_cmphex(fe_get_u64(fe, VHOST_USER_GET_FEATURES), ==,
                    transport_features | (1ull << DUMMY_FEATURE_BIT));

    /* Disconnecting closes the channel too. */
    channel_pair(sv1);
    fe_ok(fe, VHOST_USER_SET_SLAVE_REQ_FD, NULL, 0, &sv1[1], 1);
    close(sv1[1]);
    vuf_free(fe);
    server_wait_no_client(e.s);
    expect_channel_closed(sv1[0]);
    close(sv1[0]);
    g_assert_false(server_config_changed(e.s));

    /* Every fd the server received is closed. */
    g_assert_cmpint(count_fds(), ==, fds0);
    export_free(&e);
}

/* A front-end that does not read its channel never blocks the server. */
static void test_backend_channel_full(void)
{
    Export e = export_new("channel-full.sock");
    VuFrontend *fe = fe_connect(e.path);
    int sv[2], small = 1, sent = 0;
    VhostUserHeader h;

    fe_negotiate(fe);
    channel_pair(sv);
    /* The smallest buffers the kernel allows, on the socket the server
     * gets a duplicate of. */
    g_assert_cmpint(setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &small,
                               sizeof(small)), ==, 0);
    g_assert_cmpint(setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &small,
                               sizeof(small)), ==, 0);
    fe_ok(fe, VHOST_USER_SET_SLAVE_REQ_FD, NULL, 0, &sv[1], 1);
    close(sv[1]);
    while (server_config_changed(e.s)) {
        sent++;
        g_assert_cmpint(sent, <, 100000);
    }
    g_assert_cmpint(sent, >, 0);
    /* The server is responsive and the channel still in step: every
     * message that was sent arrives whole, and once read, more fit. */
    g_assert_cmphex(fe_get_u64(fe, VHOST_USER_GET_FEATURES), ==,
                    transport_features | (1ull << DUMMY_FEATURE_BIT));
    for (int i = 0; i < sent; i++) {
        g_assert_cmpint(recv(sv[0], &h, sizeof(h), MSG_WAITALL), ==,
                        sizeof(h));
        g_assert_cmpuint(h.request, ==, VHOST_USER_SLAVE_CONFIG_CHANGE_MSG);
        g_assert_cmpuint(h.size, ==, 0);
    }
    g_assert_true(server_config_changed(e.s));
    expect_config_change_msg(sv[0]);

    close(sv[0]);
    vuf_free(fe);
    export_free(&e);
}

/* ------------------------------------------------------------------------ */

static const TestCase tests[] = {
    { "/vhost-user-server/negotiate", test_negotiate },
    { "/vhost-user-server/reply-ack", test_reply_ack },
    { "/vhost-user-server/mem-table", test_mem_table },
    { "/vhost-user-server/ring-io", test_ring_io },
    { "/vhost-user-server/call-fd-signalled", test_call_fd_signalled },
    { "/vhost-user-server/reconnect", test_reconnect },
    { "/vhost-user-server/second-client-waits", test_second_client_waits },
    { "/vhost-user-server/malformed", test_malformed },
    { "/vhost-user-server/ring-outside-memory", test_ring_outside_memory },
    { "/vhost-user-server/half-message", test_half_message },
    { "/vhost-user-server/socket-path", test_socket_path },
    { "/vhost-user-server/listen-fd", test_listen_fd },
    { "/vhost-user-server/backend-channel", test_backend_channel },
    { "/vhost-user-server/backend-channel-full", test_backend_channel_full },
};

static void setup(void)
{
    g_log_set_handler(NULL, G_LOG_LEVEL_WARNING | G_LOG_FLAG_FATAL |
                      G_LOG_FLAG_RECURSION, warning_handler, NULL);
    test_thread = pthread_self();
    tmp_dir = g_dir_make_tmp("test-vhost-user-XXXXXX", NULL);
    g_assert_nonnull(tmp_dir);
    srv_iot = iot_new("vu-main", NULL);
    srv_ctx = iothread_get_aio_context(srv_iot);
    queue_iots[0] = iot_new("vu-q0", NULL);
    queue_iots[1] = iot_new("vu-q1", NULL);
    queue_ctxs[0] = iothread_get_aio_context(queue_iots[0]);
    queue_ctxs[1] = iothread_get_aio_context(queue_iots[1]);
    /* The server's thread plays the daemon's main thread. */
    aio_run_sync(srv_ctx, become_main_thread, srv_ctx);
}

static void teardown(void)
{
    main_loop_set_context(NULL);
    iothread_destroy(queue_iots[1]);
    iothread_destroy(queue_iots[0]);
    iothread_destroy(srv_iot);
    rmdir(tmp_dir);
    g_free(tmp_dir);
}

/* Below the 60 s meson timeout, so that the watchdog reports first. */
TEST_MAIN_SETUP(tests, 50, setup, teardown)

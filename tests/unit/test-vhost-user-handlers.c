/*
 * Unit tests of the vhost-user back-end's protocol side without a socket:
 * the request decoder (vu_msg_validate()) and the handlers
 * (vu_server_handle_msg()) of a server made by vu_server_new_socketless().
 *
 * Each test builds VuMsg structures as the socket layer would deliver them
 * (header, payload, received fds) and checks the answer the connection
 * would send: nothing, a reply (with its header), or closing, with the
 * reason it would log.  Malformed requests must get the answers the
 * socket path gives (tests/unit/test-vhost-user-server.c checks those on
 * a real connection): an error ack when the front-end asked for one, or
 * the connection closed.
 *
 * The server's main context and its rings' home context are one
 * AioContext whose home thread is the test's, so ring starts and stops
 * run directly (aio_run_sync() from the home thread).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>   /* memfd_create() */
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib.h>

#include "hw/virtio/vhost-user-server-int.h"
#include "test-helpers.h"
#include "vu-dummy-device.h"

#define NUM_QUEUES 2
#define MAX_QUEUE_SIZE 256
#define RING_NUM 8
#define MEM_SIZE (1 << 20)
#define GPA_BASE 0x100000000ull
#define QVA_BASE 0x7f0000000000ull

#define NEED_REPLY (VHOST_USER_VERSION | VHOST_USER_NEED_REPLY_MASK)

static AioContext *ctx;

/* The server's events, as the export would turn them into QMP events. */
typedef struct EventLog {
    unsigned n;
    VuServerEvent ev[8];
    unsigned queue[8];
    unsigned count[8];
} EventLog;

static void event_record(void *opaque, VuServerEvent ev, unsigned queue,
                         unsigned count)
{
    EventLog *log = opaque;

    g_assert_cmpuint(log->n, <, G_N_ELEMENTS(log->ev));
    log->ev[log->n] = ev;
    log->queue[log->n] = queue;
    log->count[log->n] = count;
    log->n++;
}

/* A server offering inflight tracking (or not) and logging its events. */
static VuServer *server_new_inflight(Dummy *d, bool inflight, EventLog *log)
{
    VuServerConfig cfg = {
        .listen_fd = -1,
        .num_queues = NUM_QUEUES,
        .max_queue_size = MAX_QUEUE_SIZE,
        .ctxs = &ctx,
        .nctx = 1,
        .ops = &dummy_ops,
        .dev = d,
        .name = "test-handlers",
        .inflight_tracking = inflight,
        .event = log ? event_record : NULL,
        .event_opaque = log,
    };
    Error *err = NULL;
    VuServer *s;

    dummy_init(d);
    s = vu_server_new_socketless(&cfg, ctx, &err);
    g_assert_no_error(err);
    g_assert_nonnull(s);
    g_assert_false(vu_server_has_client(s));
    return s;
}

static VuServer *server_new(Dummy *d)
{
    return server_new_inflight(d, false, NULL);
}

/* ------------------------------------------------------------------------ */
/* Messages                                                                  */

/* A request as the socket layer delivers it: header, payload, fds. */
static void msg_init(VuMsg *m, uint32_t request, uint32_t flags,
                     const void *payload, uint32_t size)
{
    g_assert_cmpuint(size, <=, VHOST_USER_MAX_PAYLOAD);
    memset(m, 0, sizeof(*m));
    m->hdr = (VhostUserHeader) { request, flags, size };
    if (payload) {
        memcpy(&m->payload, payload, size);
    }
}

static void msg_add_fd(VuMsg *m, int fd)
{
    g_assert_cmpuint(m->nfds, <, VHOST_USER_MAX_FDS);
    m->fds[m->nfds++] = fd;
}

static bool fd_is_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

static int new_eventfd(void)
{
    int fd = eventfd(0, EFD_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    return fd;
}

static VuAnswer handle(VuServer *s, VuMsg *m, VuMsg *reply)
{
    VuAnswer a = vu_server_handle_msg(s, m, reply);

    /* Every fd is consumed, whatever the answer. */
    g_assert_cmpuint(m->nfds, ==, 0);
    return a;
}

/* The request succeeds and, not asking for an ack, gets no answer. */
static void send_ok(VuServer *s, uint32_t request, const void *payload,
                    uint32_t size, const int *fds, unsigned nfds)
{
    VuMsg m, reply;

    msg_init(&m, request, VHOST_USER_VERSION, payload, size);
    for (unsigned i = 0; i < nfds; i++) {
        msg_add_fd(&m, fds[i]);
    }
    g_assert_cmpint(handle(s, &m, &reply), ==, VU_ANSWER_NONE);
}

static void send_u64(VuServer *s, uint32_t request, uint64_t val)
{
    send_ok(s, request, &val, sizeof(val), NULL, 0);
}

/* The reply of a request that has one: its header, then its payload. */
static void get_reply(VuServer *s, uint32_t request, const void *payload,
                      uint32_t size, VuMsg *reply)
{
    VuMsg m;

    msg_init(&m, request, VHOST_USER_VERSION, payload, size);
    g_assert_cmpint(handle(s, &m, reply), ==, VU_ANSWER_REPLY);
    g_assert_cmpuint(reply->hdr.request, ==, request);
    g_assert_cmpuint(reply->hdr.flags, ==,
                     VHOST_USER_VERSION | VHOST_USER_REPLY_MASK);
}

static uint64_t get_u64(VuServer *s, uint32_t request)
{
    VuMsg reply;

    get_reply(s, request, NULL, 0, &reply);
    g_assert_cmpuint(reply.hdr.size, ==, sizeof(uint64_t));
    return reply.payload.u64;
}

static void check_ack(const VuMsg *reply, uint32_t request, uint64_t status)
{
    g_assert_cmpuint(reply->hdr.request, ==, request);
    g_assert_cmpuint(reply->hdr.flags, ==,
                     VHOST_USER_VERSION | VHOST_USER_REPLY_MASK);
    g_assert_cmpuint(reply->hdr.size, ==, sizeof(uint64_t));
    g_assert_cmpuint(reply->payload.u64, ==, status);
}

/* Features, protocol features with REPLY_ACK and SLAVE_REQ, as QEMU. */
static void negotiate(VuServer *s)
{
    uint64_t pf = get_u64(s, VHOST_USER_GET_PROTOCOL_FEATURES);

    send_u64(s, VHOST_USER_SET_PROTOCOL_FEATURES, pf);
    send_u64(s, VHOST_USER_SET_FEATURES,
             get_u64(s, VHOST_USER_GET_FEATURES));
}

/* ------------------------------------------------------------------------ */
/* Guest memory and rings                                                    */

/* The guest's RAM: a memfd the server maps; the test never touches it. */
static int guest_ram_new(void)
{
    int fd = memfd_create("handlers-ram", MFD_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, MEM_SIZE), ==, 0);
    return fd;
}

static VhostUserMemRegion guest_region(void)
{
    return (VhostUserMemRegion) {
        .guest_phys_addr = GPA_BASE,
        .memory_size = MEM_SIZE,
        .userspace_addr = QVA_BASE,
        .mmap_offset = 0,
    };
}

/* SET_MEM_TABLE with the whole memfd as one region (the fd is dup'ed:
 * the server closes what it receives). */
static void set_mem_table(VuServer *s, int ram)
{
    VhostUserMemory table = { .nregions = 1 };
    int fd = dup(ram);

    table.regions[0] = guest_region();
    send_ok(s, VHOST_USER_SET_MEM_TABLE, &table,
            offsetof(VhostUserMemory, regions) + sizeof(table.regions[0]),
            &fd, 1);
    g_assert_false(fd_is_open(fd));
}

/* Size and addresses of ring index, laid out at 64 KiB * (index + 1). */
static void setup_ring(VuServer *s, unsigned index)
{
    uint64_t qva = QVA_BASE + 0x10000 * (index + 1);
    VhostUserVringState num = { .index = index, .num = RING_NUM };
    VhostUserVringAddr addr = {
        .index = index,
        .desc_user_addr = qva,
        .avail_user_addr = qva + 0x1000,
        .used_user_addr = qva + 0x2000,
    };

    send_ok(s, VHOST_USER_SET_VRING_NUM, &num, sizeof(num), NULL, 0);
    send_ok(s, VHOST_USER_SET_VRING_ADDR, &addr, sizeof(addr), NULL, 0);
}

/* SET_VRING_KICK/CALL with a new eventfd; returns it (the ring owns it:
 * the caller only checks whether it is still open). */
static int set_vring_fd(VuServer *s, uint32_t request, unsigned index)
{
    uint64_t val = index;
    int fd = new_eventfd();

    send_ok(s, request, &val, sizeof(val), &fd, 1);
    g_assert_true(fd_is_open(fd));
    return fd;
}

/*
 * SET_VRING_CALL for ring index with a new (non-blocking) eventfd; returns
 * a dup of it that stays the caller's, to read the signals it gets.
 */
static int set_vring_call_kept(VuServer *s, unsigned index)
{
    uint64_t val = index;
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int kept;

    g_assert_cmpint(fd, >=, 0);
    kept = dup(fd);
    send_ok(s, VHOST_USER_SET_VRING_CALL, &val, sizeof(val), &fd, 1);
    return kept;
}

/* The eventfd's counter, read (and so cleared); 0 if it was not set. */
static uint64_t eventfd_take(int fd)
{
    uint64_t v;

    return read(fd, &v, sizeof(v)) == sizeof(v) ? v : 0;
}

static bool ring_started(VuServer *s, unsigned index)
{
    return virtqueue_is_started(vu_server_get_queue(s, index));
}

/* ------------------------------------------------------------------------ */
/* Tests: valid requests                                                     */

static void test_negotiate(void)
{
    Dummy d;
    VuServer *s = server_new(&d);
    uint64_t features = get_u64(s, VHOST_USER_GET_FEATURES);
    uint64_t pf = get_u64(s, VHOST_USER_GET_PROTOCOL_FEATURES);
    VuMsg m, reply;

    g_assert_cmpuint(features, ==,
                     (1ull << DUMMY_FEATURE_BIT) |
                     (1ull << VIRTIO_F_VERSION_1) |
                     (1ull << VIRTIO_RING_F_INDIRECT_DESC) |
                     (1ull << VIRTIO_RING_F_EVENT_IDX) |
                     (1ull << VHOST_F_LOG_ALL) |
                     (1ull << VHOST_USER_F_PROTOCOL_FEATURES));
    g_assert_cmpuint(pf, ==,
                     (1ull << VHOST_USER_PROTOCOL_F_MQ) |
                     (1ull << VHOST_USER_PROTOCOL_F_LOG_SHMFD) |
                     (1ull << VHOST_USER_PROTOCOL_F_REPLY_ACK) |
                     (1ull << VHOST_USER_PROTOCOL_F_SLAVE_REQ) |
                     (1ull << VHOST_USER_PROTOCOL_F_CONFIG) |
                     (1ull << VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS) |
                     (1ull << VHOST_USER_PROTOCOL_F_RESET_DEVICE));
    g_assert_cmpuint(get_u64(s, VHOST_USER_GET_QUEUE_NUM), ==, NUM_QUEUES);
    g_assert_cmpuint(get_u64(s, VHOST_USER_GET_MAX_MEM_SLOTS), ==,
                     GUEST_MEMORY_MAX_SLOTS);
    send_ok(s, VHOST_USER_SET_OWNER, NULL, 0, NULL, 0);

    /* Before REPLY_ACK is negotiated, need_reply changes nothing. */
    msg_init(&m, VHOST_USER_SET_OWNER, NEED_REPLY, NULL, 0);
    g_assert_cmpint(handle(s, &m, &reply), ==, VU_ANSWER_NONE);

    send_u64(s, VHOST_USER_SET_PROTOCOL_FEATURES, pf);
    /* With it, a success is acked with status 0. */
    msg_init(&m, VHOST_USER_SET_FEATURES, NEED_REPLY, &features,
             sizeof(features));
    g_assert_cmpint(handle(s, &m, &reply), ==, VU_ANSWER_REPLY);
    check_ack(&reply, VHOST_USER_SET_FEATURES, 0);
    g_assert_cmpint(d.set_features_calls, ==, 1);
    /* The device does not see the vhost-user bits. */
    g_assert_cmpuint(d.features, ==,
                     features & ~(1ull << VHOST_USER_F_PROTOCOL_FEATURES) &
                     ~(1ull << VHOST_F_LOG_ALL));

    /* Requests with their own reply answer with it, ack or not. */
    msg_init(&m, VHOST_USER_GET_QUEUE_NUM, NEED_REPLY, NULL, 0);
    g_assert_cmpint(handle(s, &m, &reply), ==, VU_ANSWER_REPLY);
    g_assert_cmpuint(reply.payload.u64, ==, NUM_QUEUES);
    vu_server_free(s);
}

static void test_rings(void)
{
    Dummy d;
    VuServer *s = server_new(&d);
    VhostUserVringState st = { .index = 0 };
    VirtQueueStats stats;
    int ram = guest_ram_new();
    int kick, call, call2;
    VuMsg reply;

    negotiate(s);
    set_mem_table(s, ram);
    setup_ring(s, 0);
    g_assert_false(ring_started(s, 0));
    call = set_vring_fd(s, VHOST_USER_SET_VRING_CALL, 0);
    kick = set_vring_fd(s, VHOST_USER_SET_VRING_KICK, 0);
    /* Protocol features negotiated: the ring waits to be enabled. */
    g_assert_false(ring_started(s, 0));
    st.num = 1;
    send_ok(s, VHOST_USER_SET_VRING_ENABLE, &st, sizeof(st), NULL, 0);
    g_assert_true(ring_started(s, 0));
    g_assert_false(ring_started(s, 1));
    g_assert_cmpint(d.started, ==, 1);

    /* A new call fd for a running ring: swapped, the ring keeps running. */
    call2 = set_vring_fd(s, VHOST_USER_SET_VRING_CALL, 0);
    g_assert_false(fd_is_open(call));
    g_assert_true(ring_started(s, 0));
    g_assert_cmpint(d.drained, ==, 0);

    /* A running ring cannot be resized. */
    st.num = RING_NUM * 2;
    {
        VuMsg m;

        msg_init(&m, VHOST_USER_SET_VRING_NUM, VHOST_USER_VERSION, &st,
                 sizeof(st));
        g_assert_cmpint(handle(s, &m, &reply), ==, VU_ANSWER_CLOSE);
        g_assert_cmpstr(s->why, ==,
                        "SET_VRING_NUM for ring 0 while it is running");
    }

    /* GET_VRING_BASE stops the ring (drained) and reports its base. */
    st = (VhostUserVringState) { .index = 0 };
    get_reply(s, VHOST_USER_GET_VRING_BASE, &st, sizeof(st), &reply);
    g_assert_cmpuint(reply.hdr.size, ==, sizeof(VhostUserVringState));
    g_assert_cmpuint(reply.payload.state.index, ==, 0);
    g_assert_cmpuint(reply.payload.state.num, ==, 0);
    g_assert_false(ring_started(s, 0));
    g_assert_false(fd_is_open(kick));
    g_assert_cmpint(d.drained, ==, 1);

    /* It starts again only with a new kick fd, at the base it was given. */
    st = (VhostUserVringState) { .index = 0, .num = 5 };
    send_ok(s, VHOST_USER_SET_VRING_BASE, &st, sizeof(st), NULL, 0);
    g_assert_false(ring_started(s, 0));
    kick = set_vring_fd(s, VHOST_USER_SET_VRING_KICK, 0);
    g_assert_true(ring_started(s, 0));
    g_assert_cmpint(d.started, ==, 2);

    /* RESET_DEVICE stops every ring and forgets its set-up. */
    send_ok(s, VHOST_USER_RESET_DEVICE, NULL, 0, NULL, 0);
    g_assert_false(ring_started(s, 0));
    g_assert_cmpint(d.drained, ==, 2);
    g_assert_true(vu_server_get_queue_stats(s, 0, &stats));
    g_assert_false(vu_server_get_queue_stats(s, NUM_QUEUES, &stats));

    /* The reset rings closed their fds. */
    g_assert_false(fd_is_open(kick));
    g_assert_false(fd_is_open(call2));
    vu_server_free(s);
    close(ram);
}

/*
 * A newly set call eventfd is signalled once, right away: before the ring
 * runs (QEMU's vhost-user-blk qtest waits for an interrupt right after
 * DRIVER_OK, and libvhost-user back-ends signal at once), and when a
 * running ring's fd is swapped (in the ring's home thread).  "No fd" sets
 * nothing and signals nothing, and starting the ring adds no signal.
 */
/*
 * A hostile front-end's call fd is a blocking pipe that nobody reads, full
 * to the brim: the signal SET_VRING_CALL sends must not block the thread
 * (here the test's: a stuck write() would trip the watchdog).  The server
 * makes the fd non-blocking and the signal is dropped.
 */
static void test_call_fd_full_pipe(void)
{
    Dummy d;
    VuServer *s = server_new(&d);
    uint64_t val = 0;
    char junk[4096] = { 0 };
    int p[2];

    g_assert_cmpint(pipe2(p, O_CLOEXEC | O_NONBLOCK), ==, 0);
    while (write(p[1], junk, sizeof(junk)) > 0) {
        /* fill it */
    }
    g_assert_cmpint(errno, ==, EAGAIN);
    g_assert_cmpint(fcntl(p[1], F_SETFL, 0), ==, 0);    /* blocking again */
    int kept = dup(p[1]);

    send_ok(s, VHOST_USER_SET_VRING_CALL, &val, sizeof(val), &p[1], 1);
    g_assert_true(fcntl(kept, F_GETFL) & O_NONBLOCK);
    vu_server_free(s);
    close(kept);
    close(p[0]);
}

static void test_call_fd_signalled(void)
{
    Dummy d;
    VuServer *s = server_new(&d);
    VhostUserVringState st = { .index = 0, .num = 1 };
    uint64_t nofd = VHOST_USER_VRING_NOFD_MASK;
    int ram = guest_ram_new();
    int call, call2, call3;

    /* Nothing negotiated yet, the ring far from running. */
    call = set_vring_call_kept(s, 0);
    g_assert_cmpuint(eventfd_take(call), ==, 1);
    g_assert_cmpuint(eventfd_take(call), ==, 0);
    send_ok(s, VHOST_USER_SET_VRING_CALL, &nofd, sizeof(nofd), NULL, 0);
    g_assert_cmpuint(eventfd_take(call), ==, 0);

    negotiate(s);
    set_mem_table(s, ram);
    setup_ring(s, 0);
    call2 = set_vring_call_kept(s, 0);
    g_assert_cmpuint(eventfd_take(call2), ==, 1);
    set_vring_fd(s, VHOST_USER_SET_VRING_KICK, 0);    /* the ring's now */
    send_ok(s, VHOST_USER_SET_VRING_ENABLE, &st, sizeof(st), NULL, 0);
    g_assert_true(ring_started(s, 0));
    while (aio_poll(ctx, false)) {
        /* the ring's start-up BHs */
    }
    g_assert_cmpuint(eventfd_take(call2), ==, 0);

    /* Running: swapped in the home thread and signalled once. */
    call3 = set_vring_call_kept(s, 0);
    g_assert_cmpuint(eventfd_take(call3), ==, 1);
    while (aio_poll(ctx, false)) {
        /* nothing more may come */
    }
    g_assert_cmpuint(eventfd_take(call3), ==, 0);
    g_assert_cmpuint(eventfd_take(call2), ==, 0);
    g_assert_true(ring_started(s, 0));

    /* The replaced fds got nothing more. */
    g_assert_cmpuint(eventfd_take(call), ==, 0);
    vu_server_free(s);
    close(call);
    close(call2);
    close(call3);
    close(ram);
}

static void test_mem_regions(void)
{
    Dummy d;
    VuServer *s = server_new(&d);
    VhostUserMemRegMsg reg = { .region = guest_region() };
    int fd;
    int ram = guest_ram_new();

    negotiate(s);
    fd = dup(ram);
    send_ok(s, VHOST_USER_ADD_MEM_REG, &reg, sizeof(reg), &fd, 1);
    g_assert_false(fd_is_open(fd));
    g_assert_nonnull(s->mem);
    g_assert_cmpuint(s->mem->nregions, ==, 1);
    /* Old front-ends send an fd with REM_MEM_REG: closed unused. */
    fd = dup(ram);
    send_ok(s, VHOST_USER_REM_MEM_REG, &reg, sizeof(reg), &fd, 1);
    g_assert_false(fd_is_open(fd));
    g_assert_cmpuint(s->mem->nregions, ==, 0);
    vu_server_free(s);
    close(ram);
}

static void test_config(void)
{
    Dummy d;
    VuServer *s = server_new(&d);
    VhostUserConfig c = { .offset = 8, .size = 8 };
    VuMsg reply;

    get_reply(s, VHOST_USER_GET_CONFIG, &c, VHOST_USER_CONFIG_HDR_SIZE + 8,
              &reply);
    g_assert_cmpuint(reply.hdr.size, ==, VHOST_USER_CONFIG_HDR_SIZE + 8);
    g_assert_cmpuint(reply.payload.config.offset, ==, 8);
    g_assert_cmpmem(reply.payload.config.region, 8, "dummy-01", 8);

    /* Out of range: an empty reply says the read failed. */
    c = (VhostUserConfig) { .offset = VHOST_USER_MAX_CONFIG_SIZE, .size = 1 };
    get_reply(s, VHOST_USER_GET_CONFIG, &c, VHOST_USER_CONFIG_HDR_SIZE + 1,
              &reply);
    g_assert_cmpuint(reply.hdr.size, ==, 0);

    c = (VhostUserConfig) { .offset = 0, .size = 4 };
    memcpy(c.region, "SPIN", 4);
    send_ok(s, VHOST_USER_SET_CONFIG, &c, VHOST_USER_CONFIG_HDR_SIZE + 4,
            NULL, 0);
    g_assert_cmpmem(d.config, 8, "SPINdle-", 8);
    vu_server_free(s);
}

static void test_backend_channel(void)
{
    Dummy d;
    VuServer *s = server_new(&d);
    int sv[2], sv2[2];
    char c;

    g_assert_cmpint(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
                    ==, 0);
    g_assert_cmpint(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv2),
                    ==, 0);
    negotiate(s);
    send_ok(s, VHOST_USER_SET_SLAVE_REQ_FD, NULL, 0, &sv[1], 1);
    g_assert_true(fd_is_open(sv[1]));
    /* A second channel replaces the first, which is closed. */
    send_ok(s, VHOST_USER_SET_SLAVE_REQ_FD, NULL, 0, &sv2[1], 1);
    g_assert_false(fd_is_open(sv[1]));
    g_assert_cmpint(read(sv[0], &c, 1), ==, 0);
    /* No client on the socket: no notice is sent. */
    g_assert_false(vu_server_config_changed(s));
    /* Freeing the server closes the channel. */
    vu_server_free(s);
    g_assert_false(fd_is_open(sv2[1]));
    g_assert_cmpint(read(sv2[0], &c, 1), ==, 0);
    close(sv[0]);
    close(sv2[0]);
}

/* Every request the decoder knows reaches a handler. */
static void test_request_table(void)
{
    Dummy d;
    VuServer *s = server_new(&d);
    unsigned known = 0;

    for (uint32_t req = 0; req < 64; req++) {
        const char *name = vu_request_name(req);
        VuMsg m, reply;
        VuAnswer a;

        msg_init(&m, req, VHOST_USER_VERSION, NULL, 0);
        a = handle(s, &m, &reply);
        if (!name) {
            g_assert_cmpint(a, ==, VU_ANSWER_CLOSE);
            g_assert_false(vu_request_has_reply(req));
            continue;
        }
        known++;
        /* SET_LOG_BASE is answered once the log is in use. */
        g_assert_true((g_str_has_prefix(name, "GET_") ||
                       req == VHOST_USER_SET_LOG_BASE) ==
                      vu_request_has_reply(req));
        if (a == VU_ANSWER_CLOSE) {
            g_assert_true(g_str_has_prefix(s->why, name));
        }
    }
    g_assert_cmpuint(known, ==, 27);
    g_assert_cmpstr(vu_request_name(VHOST_USER_SET_MEM_TABLE), ==,
                    "SET_MEM_TABLE");
    g_assert_null(vu_request_name(VHOST_USER_SEND_RARP));
    g_assert_null(vu_request_name(UINT32_MAX));
    vu_server_free(s);
}

/* ------------------------------------------------------------------------ */
/* Tests: malformed requests                                                 */

typedef struct BadCase {
    uint32_t request;
    const void *payload;
    uint32_t size;
    unsigned nfds;               /* eventfds sent with it */
    const char *why;             /* the reason logged */
} BadCase;

static const VhostUserVringState ring_99 = { .index = 99, .num = 8 };
static const VhostUserVringState ring_0_num_3 = { .index = 0, .num = 3 };
static const VhostUserVringState ring_0_enable_2 = { .index = 0, .num = 2 };
static const VhostUserVringState ring_0_base_big = { .index = 0,
                                                     .num = 0x10000 };
static const uint64_t vring_unknown_bits = 0x10000;
static const uint64_t vring_index_2 = 2;
static const uint64_t vring_index_0 = 0;
static const uint64_t vring_nofd = VHOST_USER_VRING_NOFD_MASK;
static const uint64_t feature_bit_40 = 1ull << 40;
static const VhostUserMemory table_0 = { .nregions = 0 };
static const VhostUserMemory table_9 = { .nregions = 9 };
static const VhostUserMemory table_2 = { .nregions = 2 };
static const VhostUserConfig config_big = { .size = 300 };
static const VhostUserConfig config_4 = { .size = 4 };
static const VhostUserConfig config_beyond = {
    .offset = VHOST_USER_MAX_CONFIG_SIZE - 2, .size = 4,
};
static const VhostUserMemRegMsg reg_zero;
static const VhostUserLog log_desc = { .mmap_size = 4096 };

static const BadCase bad_cases[] = {
    /* Unknown requests */
    { 99, NULL, 0, 0, "unsupported request 99" },
    { VHOST_USER_SEND_RARP, NULL, 0, 0, "unsupported request 19" },
    /* Payload sizes */
    { VHOST_USER_SET_FEATURES, &feature_bit_40, 4, 0,
      "SET_FEATURES with a payload of 4 bytes, expected 8" },
    { VHOST_USER_GET_FEATURES, &feature_bit_40, 8, 0,
      "GET_FEATURES with a payload of 8 bytes, expected 0" },
    { VHOST_USER_SET_VRING_ADDR, &ring_99, 8, 0,
      "SET_VRING_ADDR with a payload of 8 bytes, expected 40" },
    { VHOST_USER_SET_MEM_TABLE, &table_2, 4, 0,
      "SET_MEM_TABLE with a payload of 4 bytes, too short" },
    { VHOST_USER_SET_MEM_TABLE, &table_0, 8, 0,
      "SET_MEM_TABLE with 0 regions, expected 1 to 8" },
    { VHOST_USER_SET_MEM_TABLE, &table_9, 8, 0,
      "SET_MEM_TABLE with 9 regions, expected 1 to 8" },
    { VHOST_USER_SET_MEM_TABLE, &table_2, 40, 2,
      "SET_MEM_TABLE with 2 regions and a payload of 40 bytes" },
    { VHOST_USER_GET_CONFIG, &config_4, 8, 0,
      "GET_CONFIG with a payload of 8 bytes, too short" },
    { VHOST_USER_SET_CONFIG, &config_big, 12, 0,
      "SET_CONFIG of 300 bytes, at most 256" },
    { VHOST_USER_SET_CONFIG, &config_4, 20, 0,
      "SET_CONFIG with a payload of 20 bytes, expected 16" },
    /* fd counts */
    { VHOST_USER_SET_OWNER, NULL, 0, 1,
      "SET_OWNER with 1 file descriptors, expected 0" },
    { VHOST_USER_SET_MEM_TABLE, &table_2, 72, 1,
      "SET_MEM_TABLE with 1 file descriptors, expected 2" },
    { VHOST_USER_SET_VRING_KICK, &vring_index_0, 8, 0,
      "SET_VRING_KICK with 0 file descriptors, expected 1" },
    { VHOST_USER_SET_VRING_CALL, &vring_nofd, 8, 1,
      "SET_VRING_CALL with 1 file descriptors, expected 0" },
    { VHOST_USER_SET_VRING_ERR, &vring_unknown_bits, 8, 1,
      "SET_VRING_ERR with unknown bits in 0x10000" },
    { VHOST_USER_ADD_MEM_REG, &reg_zero, 40, 0,
      "ADD_MEM_REG with 0 file descriptors, expected 1" },
    { VHOST_USER_REM_MEM_REG, &reg_zero, 40, 2,
      "REM_MEM_REG with 2 file descriptors" },
    { VHOST_USER_SET_SLAVE_REQ_FD, NULL, 0, 0,
      "SET_SLAVE_REQ_FD with 0 file descriptors, expected 1" },
    { VHOST_USER_SET_LOG_BASE, &log_desc, 8, 1,
      "SET_LOG_BASE with a payload of 8 bytes, expected 16" },
    { VHOST_USER_SET_LOG_BASE, &log_desc, 16, 0,
      "SET_LOG_BASE with 0 file descriptors, expected 1" },
    { VHOST_USER_SET_LOG_FD, NULL, 0, 2,
      "SET_LOG_FD with 2 file descriptors, expected 1" },
    /* Dirty logging needs its protocol feature. */
    { VHOST_USER_SET_LOG_BASE, &log_desc, 16, 1,
      "SET_LOG_BASE without the LOG_SHMFD protocol feature" },
    { VHOST_USER_SET_LOG_FD, NULL, 0, 1,
      "SET_LOG_FD without the LOG_SHMFD protocol feature" },
    /* Ring indexes and values */
    { VHOST_USER_SET_VRING_NUM, &ring_99, 8, 0,
      "SET_VRING_NUM for ring 99, but there are only 2" },
    { VHOST_USER_SET_VRING_ENABLE, &ring_99, 8, 0,
      "SET_VRING_ENABLE for ring 99, but there are only 2" },
    { VHOST_USER_SET_VRING_KICK, &vring_index_2, 8, 1,
      "SET_VRING_KICK for ring 2, but there are only 2" },
    { VHOST_USER_SET_VRING_NUM, &ring_0_num_3, 8, 0,
      "SET_VRING_NUM 3 for ring 0: not a power of two from 1 to 256" },
    { VHOST_USER_SET_VRING_BASE, &ring_0_base_big, 8, 0,
      "SET_VRING_BASE 65536 for ring 0: more than 16 bits" },
    { VHOST_USER_SET_VRING_ENABLE, &ring_0_enable_2, 8, 0,
      "SET_VRING_ENABLE 2 for ring 0: expected 0 or 1" },
    { VHOST_USER_SET_FEATURES, &feature_bit_40, 8, 0,
      "SET_FEATURES with feature bits 0x10000000000 that were not "
      "offered" },
    { VHOST_USER_SET_PROTOCOL_FEATURES, &feature_bit_40, 8, 0,
      "SET_PROTOCOL_FEATURES with bits 0x10000000000 that were not "
      "offered" },
    { VHOST_USER_REM_MEM_REG, &reg_zero, 40, 0,
      "REM_MEM_REG without a memory table" },
    { VHOST_USER_SET_CONFIG, &config_beyond, 16, 0,
      "SET_CONFIG of 4 bytes at offset 254: outside the config space" },
};

/* Send c with flags; the fds it carries must be closed afterwards. */
static VuAnswer send_bad(VuServer *s, const BadCase *c, uint32_t flags,
                         VuMsg *reply)
{
    int fds[VHOST_USER_MAX_FDS];
    VuMsg m;
    VuAnswer a;

    msg_init(&m, c->request, flags, c->payload, c->size);
    for (unsigned i = 0; i < c->nfds; i++) {
        fds[i] = new_eventfd();
        msg_add_fd(&m, fds[i]);
    }
    a = handle(s, &m, reply);
    for (unsigned i = 0; i < c->nfds; i++) {
        g_assert_false(fd_is_open(fds[i]));
    }
    g_assert_cmpstr(s->why, ==, c->why);
    return a;
}

static void test_malformed(void)
{
    Dummy d;
    VuServer *s = server_new(&d);
    VuMsg reply;

    /* Protocol features without REPLY_ACK: a refusal closes. */
    send_u64(s, VHOST_USER_SET_PROTOCOL_FEATURES,
             1ull << VHOST_USER_PROTOCOL_F_SLAVE_REQ);
    for (size_t i = 0; i < G_N_ELEMENTS(bad_cases); i++) {
        const BadCase *c = &bad_cases[i];

        g_test_message("%s", c->why);
        g_assert_cmpint(send_bad(s, c, NEED_REPLY, &reply), ==,
                        VU_ANSWER_CLOSE);
    }
    /* With REPLY_ACK, asking for an ack gets status 1 instead... */
    send_u64(s, VHOST_USER_SET_PROTOCOL_FEATURES,
             1ull << VHOST_USER_PROTOCOL_F_REPLY_ACK);
    for (size_t i = 0; i < G_N_ELEMENTS(bad_cases); i++) {
        const BadCase *c = &bad_cases[i];
        VuAnswer a = send_bad(s, c, NEED_REPLY, &reply);

        g_test_message("%s", c->why);
        /* ... unless the request's reply is its own payload. */
        if (vu_request_has_reply(c->request)) {
            g_assert_cmpint(a, ==, VU_ANSWER_CLOSE);
            continue;
        }
        g_assert_cmpint(a, ==, VU_ANSWER_REPLY);
        check_ack(&reply, c->request, 1);
        /* Not asking for one still closes. */
        g_assert_cmpint(send_bad(s, c, VHOST_USER_VERSION, &reply), ==,
                        VU_ANSWER_CLOSE);
    }
    g_assert_cmpint(d.set_features_calls, ==, 0);
    vu_server_free(s);
}

static void test_malformed_special(void)
{
    Dummy d;
    VuServer *s = server_new(&d);
    VhostUserVringState st = { .index = 0, .num = 0 };
    int fds[VHOST_USER_MAX_FDS];
    VuMsg m, reply;

    send_u64(s, VHOST_USER_SET_PROTOCOL_FEATURES,
             1ull << VHOST_USER_PROTOCOL_F_REPLY_ACK);

    /* More fds came than fit: the extras were closed on receipt. */
    msg_init(&m, VHOST_USER_SET_OWNER, NEED_REPLY, NULL, 0);
    for (unsigned i = 0; i < VHOST_USER_MAX_FDS; i++) {
        fds[i] = new_eventfd();
        msg_add_fd(&m, fds[i]);
    }
    m.fds_dropped = true;
    g_assert_cmpint(handle(s, &m, &reply), ==, VU_ANSWER_REPLY);
    check_ack(&reply, VHOST_USER_SET_OWNER, 1);
    g_assert_cmpstr(s->why, ==,
                    "SET_OWNER with more than 8 file descriptors");
    for (unsigned i = 0; i < VHOST_USER_MAX_FDS; i++) {
        g_assert_false(fd_is_open(fds[i]));
    }
    msg_init(&m, 77, VHOST_USER_VERSION, NULL, 0);
    m.fds_dropped = true;
    g_assert_cmpint(handle(s, &m, &reply), ==, VU_ANSWER_CLOSE);
    g_assert_cmpstr(s->why, ==, "request with more than 8 file descriptors");

    /* A request with its own reply and a bad index closes. */
    st.index = NUM_QUEUES;
    msg_init(&m, VHOST_USER_GET_VRING_BASE, NEED_REPLY, &st, sizeof(st));
    g_assert_cmpint(handle(s, &m, &reply), ==, VU_ANSWER_CLOSE);
    g_assert_cmpstr(s->why, ==,
                    "GET_VRING_BASE for ring 2, but there are only 2");

    /* SET_LOG_BASE has a reply of its own: a refusal closes, even when
     * an ack was asked for. */
    msg_init(&m, VHOST_USER_SET_LOG_BASE, NEED_REPLY, NULL, 0);
    g_assert_cmpint(handle(s, &m, &reply), ==, VU_ANSWER_CLOSE);
    g_assert_cmpstr(s->why, ==,
                    "SET_LOG_BASE with a payload of 0 bytes, expected 16");

    /* The back-end channel needs its protocol feature. */
    msg_init(&m, VHOST_USER_SET_SLAVE_REQ_FD, NEED_REPLY, NULL, 0);
    msg_add_fd(&m, fds[0] = new_eventfd());
    g_assert_cmpint(handle(s, &m, &reply), ==, VU_ANSWER_REPLY);
    check_ack(&reply, VHOST_USER_SET_SLAVE_REQ_FD, 1);
    g_assert_false(fd_is_open(fds[0]));
    g_assert_cmpstr(s->why, ==, "SET_SLAVE_REQ_FD without the SLAVE_REQ "
                    "protocol feature");
    vu_server_free(s);
}

/* A ring outside guest memory does not start; the connection stays. */
static void test_ring_outside_memory(void)
{
    Dummy d;
    VuServer *s = server_new(&d);
    VhostUserVringAddr addr = {
        .index = 1,
        .desc_user_addr = QVA_BASE + MEM_SIZE,
        .avail_user_addr = QVA_BASE + MEM_SIZE + 0x1000,
        .used_user_addr = QVA_BASE + MEM_SIZE + 0x2000,
    };
    VhostUserVringState st = { .index = 1, .num = RING_NUM };
    uint64_t features = 1ull << VIRTIO_F_VERSION_1;
    int ram = guest_ram_new();

    send_u64(s, VHOST_USER_SET_FEATURES, features);
    set_mem_table(s, ram);
    send_ok(s, VHOST_USER_SET_VRING_NUM, &st, sizeof(st), NULL, 0);
    send_ok(s, VHOST_USER_SET_VRING_ADDR, &addr, sizeof(addr), NULL, 0);
    g_test_expect_message(NULL, G_LOG_LEVEL_WARNING,
                          "virtqueue 1 is broken*not inside guest memory*");
    set_vring_fd(s, VHOST_USER_SET_VRING_KICK, 1);
    g_test_assert_expected_messages();
    g_assert_false(ring_started(s, 1));
    g_assert_cmpint(d.started, ==, 0);
    /* It is not tried again until its own set-up changes... */
    send_u64(s, VHOST_USER_SET_FEATURES, features);
    g_assert_false(ring_started(s, 1));
    /* ... and then it starts. */
    setup_ring(s, 1);
    g_assert_true(ring_started(s, 1));
    g_assert_cmpint(d.started, ==, 1);
    vu_server_free(s);
    close(ram);
}

/* ------------------------------------------------------------------------ */
/* Tests: inflight tracking                                                  */

static const VhostUserInflight inflight_2x8 = { .num_queues = 2,
                                                .queue_size = 8 };

/* GET_INFLIGHT_FD for 2 queues of 8; returns the region's fd (ours). */
static int get_inflight_fd(VuServer *s, VhostUserInflight *desc)
{
    VuMsg reply;
    int fd;

    get_reply(s, VHOST_USER_GET_INFLIGHT_FD, &inflight_2x8,
              sizeof(inflight_2x8), &reply);
    g_assert_cmpuint(reply.hdr.size, ==, sizeof(VhostUserInflight));
    g_assert_cmpuint(reply.nfds, ==, 1);
    *desc = reply.payload.inflight;
    fd = reply.fds[0];
    g_assert_cmpint(fd, >=, 0);
    return fd;
}

/* SET_INFLIGHT_FD with desc and a dup of fd; the server closes its copy. */
static VuAnswer set_inflight_fd(VuServer *s, uint32_t flags,
                                const VhostUserInflight *desc, int fd,
                                VuMsg *reply)
{
    VuMsg m;
    int copy = dup(fd);
    VuAnswer a;

    msg_init(&m, VHOST_USER_SET_INFLIGHT_FD, flags, desc, sizeof(*desc));
    msg_add_fd(&m, copy);
    a = handle(s, &m, reply);
    g_assert_false(fd_is_open(copy));
    return a;
}

static int inflight_bad_fd(int kind);

/* A reply's fds travel with it over the socket (GET_INFLIGHT_FD's). */
static void test_reply_carries_fd(void)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    VuMsg reply = { .hdr = { VHOST_USER_GET_INFLIGHT_FD,
                             VHOST_USER_VERSION | VHOST_USER_REPLY_MASK,
                             sizeof(VhostUserInflight) } };
    uint8_t buf[64];
    struct iovec iov = { buf, sizeof(buf) };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = ctl.buf,
                         .msg_controllen = sizeof(ctl.buf) };
    struct stat a, b;
    char why[128];
    int sv[2], got;

    g_assert_cmpint(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
                    ==, 0);
    reply.fds[0] = inflight_bad_fd(1);
    reply.nfds = 1;
    g_assert_true(vu_msg_send(sv[0], &reply, why, sizeof(why)));
    g_assert_cmpint(recvmsg(sv[1], &mh, 0), ==, 12 + 24);
    g_assert_nonnull(CMSG_FIRSTHDR(&mh));
    g_assert_cmpint(CMSG_FIRSTHDR(&mh)->cmsg_type, ==, SCM_RIGHTS);
    memcpy(&got, CMSG_DATA(CMSG_FIRSTHDR(&mh)), sizeof(got));
    g_assert_cmpint(fstat(got, &a), ==, 0);
    g_assert_cmpint(fstat(reply.fds[0], &b), ==, 0);
    g_assert_cmpuint(a.st_ino, ==, b.st_ino);
    vu_msg_close_fds(&reply);
    g_assert_cmpuint(reply.nfds, ==, 0);
    close(got);
    close(sv[0]);
    close(sv[1]);
}

/* The feature is offered only when the export says so. */
static void test_inflight_offered(void)
{
    Dummy d;
    VuServer *s = server_new_inflight(&d, true, NULL);
    uint64_t bit = 1ull << VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD;
    VuMsg m, reply;
    int fd;

    g_assert_cmpuint(get_u64(s, VHOST_USER_GET_PROTOCOL_FEATURES) & bit, ==,
                     bit);
    /* Offered but not negotiated yet. */
    fd = inflight_bad_fd(1);
    g_assert_cmpint(set_inflight_fd(s, VHOST_USER_VERSION, &inflight_2x8,
                                    fd, &reply), ==, VU_ANSWER_CLOSE);
    g_assert_cmpstr(s->why, ==, "SET_INFLIGHT_FD without the INFLIGHT_SHMFD "
                    "protocol feature");
    close(fd);
    vu_server_free(s);
    s = server_new(&d);
    g_assert_cmpuint(get_u64(s, VHOST_USER_GET_PROTOCOL_FEATURES) & bit, ==,
                     0);
    /* Not offered, not negotiable, and both requests refused. */
    msg_init(&m, VHOST_USER_SET_PROTOCOL_FEATURES, VHOST_USER_VERSION, &bit,
             sizeof(bit));
    g_assert_cmpint(handle(s, &m, &reply), ==, VU_ANSWER_CLOSE);
    msg_init(&m, VHOST_USER_GET_INFLIGHT_FD, VHOST_USER_VERSION,
             &inflight_2x8, sizeof(inflight_2x8));
    g_assert_cmpint(handle(s, &m, &reply), ==, VU_ANSWER_CLOSE);
    g_assert_cmpuint(reply.nfds, ==, 0);
    g_assert_cmpstr(s->why, ==, "GET_INFLIGHT_FD without the INFLIGHT_SHMFD "
                    "protocol feature");
    vu_server_free(s);
}

/*
 * GET_INFLIGHT_FD answers with a sealed region; SET_INFLIGHT_FD hands it
 * back; a ring that starts tracks into its part; SET while a ring runs is
 * refused; after a "crash" (requests left marked in the region) the next
 * start resubmits them and says so.
 */
static void test_inflight_get_set(void)
{
    Dummy d;
    EventLog log = { 0 };
    VuServer *s = server_new_inflight(&d, true, &log);
    VhostUserVringState st = { .index = 0, .num = 1 };
    VhostInflightQueue *q0;
    VhostUserInflight desc;
    int ram = guest_ram_new();
    uint8_t *view;
    VuMsg reply;
    int fd;

    negotiate(s);
    fd = get_inflight_fd(s, &desc);
    g_assert_cmpuint(desc.mmap_size, ==, vhost_inflight_region_bytes(2, 8));
    g_assert_cmpuint(desc.mmap_offset, ==, 0);
    g_assert_cmpuint(desc.num_queues, ==, 2);
    g_assert_cmpuint(desc.queue_size, ==, 8);
    g_assert_cmpint(fcntl(fd, F_GET_SEALS) & F_SEAL_SHRINK, !=, 0);
    g_assert_cmpint(lseek(fd, 0, SEEK_END), ==, desc.mmap_size);
    view = mmap(NULL, desc.mmap_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                fd, 0);
    g_assert(view != MAP_FAILED);
    q0 = (VhostInflightQueue *)view;

    g_assert_cmpint(set_inflight_fd(s, VHOST_USER_VERSION, &desc, fd,
                                    &reply), ==, VU_ANSWER_NONE);
    g_assert_nonnull(s->inflight);
    set_mem_table(s, ram);
    setup_ring(s, 0);
    set_vring_fd(s, VHOST_USER_SET_VRING_KICK, 0);
    send_ok(s, VHOST_USER_SET_VRING_ENABLE, &st, sizeof(st), NULL, 0);
    g_assert_true(ring_started(s, 0));
    /* A fresh region: initialised at start, nothing resubmitted. */
    g_assert_cmpuint(q0->hdr.version, ==, 1);
    g_assert_cmpuint(q0->hdr.desc_num, ==, 8);
    g_assert_cmpuint(log.n, ==, 0);

    /* Not while a ring runs. */
    g_assert_cmpint(set_inflight_fd(s, VHOST_USER_VERSION, &desc, fd,
                                    &reply), ==, VU_ANSWER_CLOSE);
    g_assert_cmpstr(s->why, ==, "SET_INFLIGHT_FD while rings are running");

    /* A dead process left requests 5 then 2 marked; the front-end
     * reconnects, stops nothing, sets the region and starts again. */
    get_reply(s, VHOST_USER_GET_VRING_BASE, &st, sizeof(st), &reply);
    q0->desc[2] = (VhostInflightDesc) { .inflight = 1, .counter = 20 };
    q0->desc[5] = (VhostInflightDesc) { .inflight = 1, .counter = 10 };
    g_assert_cmpint(set_inflight_fd(s, VHOST_USER_VERSION, &desc, fd,
                                    &reply), ==, VU_ANSWER_NONE);
    g_assert_true(s->queues[0].resuming);
    g_assert_false(s->queues[1].resuming);
    set_vring_fd(s, VHOST_USER_SET_VRING_KICK, 0);
    g_assert_true(ring_started(s, 0));
    g_assert_cmpuint(virtqueue_resubmitted(vu_server_get_queue(s, 0)), ==,
                     2);
    g_assert_cmpuint(log.n, ==, 1);
    g_assert_cmpint(log.ev[0], ==, VU_EVENT_RESUBMITTED);
    g_assert_cmpuint(log.queue[0], ==, 0);
    g_assert_cmpuint(log.count[0], ==, 2);
    g_assert_false(s->queues[0].resuming);

    /* A reset drops the region. */
    send_ok(s, VHOST_USER_RESET_DEVICE, NULL, 0, NULL, 0);
    g_assert_null(s->inflight);
    vu_server_free(s);
    munmap(view, desc.mmap_size);
    close(fd);
    close(ram);
}

/* A ring larger than the region's queues does not start, with a reason;
 * the other rings and the connection carry on. */
static void test_inflight_ring_too_big(void)
{
    Dummy d;
    VuServer *s = server_new_inflight(&d, true, NULL);
    VhostUserVringState num = { .index = 1, .num = 16 };
    VhostUserVringState st = { .index = 1, .num = 1 };
    VhostUserInflight desc;
    int ram = guest_ram_new();
    VuMsg reply;
    int fd;

    negotiate(s);
    fd = get_inflight_fd(s, &desc);
    set_inflight_fd(s, VHOST_USER_VERSION, &desc, fd, &reply);
    set_mem_table(s, ram);
    setup_ring(s, 1);
    send_ok(s, VHOST_USER_SET_VRING_NUM, &num, sizeof(num), NULL, 0);
    send_ok(s, VHOST_USER_SET_VRING_ENABLE, &st, sizeof(st), NULL, 0);
    g_test_expect_message(NULL, G_LOG_LEVEL_WARNING,
                          "virtqueue 1 is broken*inflight region for rings "
                          "of 8 descriptors: the ring has 16*");
    set_vring_fd(s, VHOST_USER_SET_VRING_KICK, 1);
    g_test_assert_expected_messages();
    g_assert_false(ring_started(s, 1));
    vu_server_free(s);
    close(fd);
    close(ram);
}

typedef struct InflightBadCase {
    const char *why;
    uint32_t request;
    VhostUserInflight desc;
    int fd_kind;                 /* 0 none, 1 sealed region, 2 unsealed,
                                  * 3 sealed but small */
} InflightBadCase;

static const InflightBadCase inflight_bad_cases[] = {
    { "GET_INFLIGHT_FD for 0 queues: the device has 1 to 2",
      VHOST_USER_GET_INFLIGHT_FD, { .num_queues = 0, .queue_size = 8 } },
    { "GET_INFLIGHT_FD for 3 queues: the device has 1 to 2",
      VHOST_USER_GET_INFLIGHT_FD, { .num_queues = 3, .queue_size = 8 } },
    { "GET_INFLIGHT_FD with a queue size of 12: not a power of two from 1 "
      "to 32768", VHOST_USER_GET_INFLIGHT_FD,
      { .num_queues = 1, .queue_size = 12 } },
    { "GET_INFLIGHT_FD with a queue size of 0: not a power of two from 1 "
      "to 32768", VHOST_USER_GET_INFLIGHT_FD,
      { .num_queues = 1, .queue_size = 0 } },
    { "SET_INFLIGHT_FD with 0 file descriptors, expected 1",
      VHOST_USER_SET_INFLIGHT_FD,
      { .mmap_size = 1024, .num_queues = 2, .queue_size = 8 } },
    { "SET_INFLIGHT_FD with a file that is not sealed against shrinking "
      "(F_SEAL_SHRINK): pass back the memfd GET_INFLIGHT_FD gave",
      VHOST_USER_SET_INFLIGHT_FD,
      { .mmap_size = 1024, .num_queues = 2, .queue_size = 8 }, 2 },
    { "SET_INFLIGHT_FD: an inflight region of 1024 bytes at fd offset 0x0 "
      "runs past the end of its file (256 bytes)", VHOST_USER_SET_INFLIGHT_FD,
      { .mmap_size = 1024, .num_queues = 2, .queue_size = 8 }, 3 },
    { "SET_INFLIGHT_FD with a region of 64 bytes: 2 queues of 8 entries "
      "need 384", VHOST_USER_SET_INFLIGHT_FD,
      { .mmap_size = 64, .num_queues = 2, .queue_size = 8 }, 1 },
    { "SET_INFLIGHT_FD for 3 queues: the device has 1 to 2",
      VHOST_USER_SET_INFLIGHT_FD,
      { .mmap_size = 4096, .num_queues = 3, .queue_size = 8 }, 1 },
    { "SET_INFLIGHT_FD at offset 100: not a multiple of the page size",
      VHOST_USER_SET_INFLIGHT_FD, { .mmap_size = 384, .mmap_offset = 100,
                                    .num_queues = 2, .queue_size = 8 }, 1 },
};

/* An fd of the kind a bad case sends. */
static int inflight_bad_fd(int kind)
{
    Error *err = NULL;
    int fd;

    switch (kind) {
    case 2:
        fd = memfd_create("unsealed", MFD_CLOEXEC);
        g_assert_cmpint(ftruncate(fd, 4096), ==, 0);
        return fd;
    default:
        fd = vhost_inflight_memfd_new(kind == 3 ? 256 : 4096, &err);
        g_assert_no_error(err);
        return fd;
    }
}

/* Bad shapes, sizes, fds: an error ack when asked for (GET has its own
 * reply: it closes), nothing mapped, no fd leaked. */
static void test_inflight_bad(void)
{
    Dummy d;
    VuServer *s = server_new_inflight(&d, true, NULL);
    VuMsg m, reply;

    negotiate(s);
    for (size_t i = 0; i < G_N_ELEMENTS(inflight_bad_cases); i++) {
        const InflightBadCase *c = &inflight_bad_cases[i];
        int fd = c->fd_kind ? inflight_bad_fd(c->fd_kind) : -1;
        VuAnswer a;

        g_test_message("%s", c->why);
        msg_init(&m, c->request, NEED_REPLY, &c->desc, sizeof(c->desc));
        if (fd >= 0) {
            msg_add_fd(&m, fd);
        }
        a = handle(s, &m, &reply);
        g_assert_cmpstr(s->why, ==, c->why);
        g_assert_cmpuint(reply.nfds, ==, 0);
        if (fd >= 0) {
            g_assert_false(fd_is_open(fd));
        }
        if (c->request == VHOST_USER_GET_INFLIGHT_FD) {
            g_assert_cmpint(a, ==, VU_ANSWER_CLOSE);
        } else {
            g_assert_cmpint(a, ==, VU_ANSWER_REPLY);
            check_ack(&reply, c->request, 1);
        }
        g_assert_null(s->inflight);
    }
    /* A payload of the wrong size. */
    msg_init(&m, VHOST_USER_GET_INFLIGHT_FD, VHOST_USER_VERSION,
             &inflight_2x8, 16);
    g_assert_cmpint(handle(s, &m, &reply), ==, VU_ANSWER_CLOSE);
    g_assert_cmpstr(s->why, ==, "GET_INFLIGHT_FD with a payload of 16 "
                    "bytes, expected 24");
    vu_server_free(s);
}

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* Tests: dirty logging                                                      */

/* Guest page of ring 0's used ring (setup_ring()). */
#define RING0_USED_GPA (GPA_BASE + 0x12000)

/* A dirty log memfd of size bytes. */
static int log_memfd_new(uint64_t size)
{
    int fd = memfd_create("handlers-log", MFD_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, (off_t)size), ==, 0);
    return fd;
}

/* Whether the log in fd marks the page of gpa. */
static bool log_marked(int fd, uint64_t gpa)
{
    uint64_t page = gpa / VHOST_LOG_PAGE;
    uint8_t b;

    g_assert_cmpint(pread(fd, &b, 1, (off_t)(page / 8)), ==, 1);
    return b & (1u << (page % 8));
}

static void log_clear(int fd, uint64_t size)
{
    g_autofree uint8_t *zero = g_malloc0(size);

    g_assert_cmpint(pwrite(fd, zero, size, 0), ==, (ssize_t)size);
}

/* SET_LOG_BASE with a dup of fd: the answer, and the reply if any. */
static VuAnswer set_log_base(VuServer *s, int fd, uint64_t size,
                             VuMsg *reply)
{
    VhostUserLog desc = { .mmap_size = size };
    VuMsg m;
    VuAnswer a;

    msg_init(&m, VHOST_USER_SET_LOG_BASE, VHOST_USER_VERSION, &desc,
             sizeof(desc));
    msg_add_fd(&m, dup(fd));
    a = handle(s, &m, reply);
    if (a == VU_ANSWER_REPLY) {
        /* The reply LOG_SHMFD asks for: the same request, a u64 0. */
        check_ack(reply, VHOST_USER_SET_LOG_BASE, 0);
    }
    return a;
}

/* SET_VRING_ADDR for ring 0 as setup_ring() laid it out, with flags. */
static VuAnswer set_ring0_addr(VuServer *s, uint32_t flags, uint64_t desc)
{
    VhostUserVringAddr addr = {
        .index = 0,
        .flags = flags,
        .desc_user_addr = desc,
        .avail_user_addr = QVA_BASE + 0x11000,
        .used_user_addr = QVA_BASE + 0x12000,
        .log_guest_addr = RING0_USED_GPA,
    };
    VuMsg m, reply;

    msg_init(&m, VHOST_USER_SET_VRING_ADDR, VHOST_USER_VERSION, &addr,
             sizeof(addr));
    return handle(s, &m, &reply);
}

/*
 * A migration as QEMU drives it, on a running ring: the log (answered),
 * the used ring's logging, LOG_ALL on (the ring starts logging: its used
 * ring is marked at once), a bigger log while it runs, GET_VRING_BASE
 * (marked again at the stop), LOG_ALL off.  Only the logging may change
 * on the running ring.
 */
static void test_log_migration(void)
{
    Dummy d;
    VuServer *s = server_new(&d);
    uint64_t features = get_u64(s, VHOST_USER_GET_FEATURES);
    uint64_t log_all = 1ull << VHOST_F_LOG_ALL;
    uint64_t size = vhost_log_bytes_for(GPA_BASE + MEM_SIZE);
    uint64_t bigger = size + 4096;
    VhostUserVringState st = { .index = 0, .num = 1 };
    int ram = guest_ram_new();
    int log1 = log_memfd_new(size), log2 = log_memfd_new(bigger);
    int efd[2];
    VuMsg reply;

    g_assert_true(features & log_all);
    send_u64(s, VHOST_USER_SET_PROTOCOL_FEATURES,
             get_u64(s, VHOST_USER_GET_PROTOCOL_FEATURES));
    send_u64(s, VHOST_USER_SET_FEATURES, features & ~log_all);
    set_mem_table(s, ram);
    setup_ring(s, 0);
    set_vring_fd(s, VHOST_USER_SET_VRING_CALL, 0);
    set_vring_fd(s, VHOST_USER_SET_VRING_KICK, 0);
    send_ok(s, VHOST_USER_SET_VRING_ENABLE, &st, sizeof(st), NULL, 0);
    g_assert_true(ring_started(s, 0));

    /* The log and the used ring's flag: nothing logged before LOG_ALL. */
    g_assert_cmpint(set_log_base(s, log1, size, &reply), ==,
                    VU_ANSWER_REPLY);
    g_assert_cmpint(set_ring0_addr(s, VHOST_VRING_F_LOG, QVA_BASE + 0x10000),
                    ==, VU_ANSWER_NONE);
    g_assert_true(ring_started(s, 0));
    g_assert_false(log_marked(log1, RING0_USED_GPA));
    send_u64(s, VHOST_USER_SET_FEATURES, features);
    g_assert_true(ring_started(s, 0));
    g_assert_true(log_marked(log1, RING0_USED_GPA));
    g_assert_cmpint(d.set_features_calls, ==, 1);

    /* A bigger log while the ring runs: the ring logs into it. */
    g_assert_cmpint(set_log_base(s, log2, bigger, &reply), ==,
                    VU_ANSWER_REPLY);
    g_assert_true(log_marked(log2, RING0_USED_GPA));
    log_clear(log1, size);
    log_clear(log2, bigger);

    /* SET_LOG_FD: kept, a second one replaces it. */
    for (unsigned i = 0; i < 2; i++) {
        efd[i] = new_eventfd();
        send_ok(s, VHOST_USER_SET_LOG_FD, NULL, 0, &efd[i], 1);
        g_assert_true(fd_is_open(efd[i]));
    }
    g_assert_false(fd_is_open(efd[0]));

    /* Other addresses or other features on a running ring: refused. */
    g_assert_cmpint(set_ring0_addr(s, VHOST_VRING_F_LOG, QVA_BASE + 0x30000),
                    ==, VU_ANSWER_CLOSE);
    g_assert_cmpstr(s->why, ==,
                    "SET_VRING_ADDR for ring 0 while it is running");
    {
        VuMsg m;
        uint64_t f = features & ~(1ull << VIRTIO_RING_F_EVENT_IDX);

        msg_init(&m, VHOST_USER_SET_FEATURES, VHOST_USER_VERSION, &f,
                 sizeof(f));
        g_assert_cmpint(handle(s, &m, &reply), ==, VU_ANSWER_CLOSE);
    }
    g_assert_false(log_marked(log2, RING0_USED_GPA));

    /* Stopping marks the used ring once more, in the log in use. */
    st = (VhostUserVringState) { .index = 0 };
    get_reply(s, VHOST_USER_GET_VRING_BASE, &st, sizeof(st), &reply);
    g_assert_true(log_marked(log2, RING0_USED_GPA));
    g_assert_false(log_marked(log1, RING0_USED_GPA));

    /* LOG_ALL off: a restarted ring logs nothing. */
    send_u64(s, VHOST_USER_SET_FEATURES, features & ~log_all);
    log_clear(log2, bigger);
    set_vring_fd(s, VHOST_USER_SET_VRING_KICK, 0);
    g_assert_true(ring_started(s, 0));
    g_assert_cmpint(set_ring0_addr(s, VHOST_VRING_F_LOG, QVA_BASE + 0x10000),
                    ==, VU_ANSWER_NONE);
    get_reply(s, VHOST_USER_GET_VRING_BASE, &st, sizeof(st), &reply);
    g_assert_false(log_marked(log2, RING0_USED_GPA));

    vu_server_free(s);
    g_assert_false(fd_is_open(efd[1]));
    close(log1);
    close(log2);
    close(ram);
}

/*
 * A log too small for the memory table is refused and the connection
 * closed; so is memory added past the log while logging.
 */
static void test_log_too_small(void)
{
    Dummy d;
    VuServer *s = server_new(&d);
    uint64_t size = vhost_log_bytes_for(GPA_BASE + MEM_SIZE);
    int ram = guest_ram_new();
    int log = log_memfd_new(size);
    VhostUserMemRegMsg reg = { .region = guest_region() };
    int fd = dup(ram);
    VuMsg m, reply;

    negotiate(s);
    set_mem_table(s, ram);
    g_assert_cmpint(set_log_base(s, log, size - 1, &reply), ==,
                    VU_ANSWER_CLOSE);
    g_assert_nonnull(strstr(s->why, "SET_LOG_BASE: a dirty log of"));
    g_assert_nonnull(strstr(s->why, "needs"));
    /* A file shorter than the log it describes. */
    g_assert_cmpint(set_log_base(s, log, size + 1, &reply), ==,
                    VU_ANSWER_CLOSE);
    g_assert_nonnull(strstr(s->why, "past the end of its file"));

    /* negotiate() took every feature, LOG_ALL too: logging is on. */
    g_assert_cmpint(set_log_base(s, log, size, &reply), ==, VU_ANSWER_REPLY);
    reg.region.guest_phys_addr = GPA_BASE + MEM_SIZE;
    msg_init(&m, VHOST_USER_ADD_MEM_REG, VHOST_USER_VERSION, &reg,
             sizeof(reg));
    msg_add_fd(&m, fd);
    g_assert_cmpint(handle(s, &m, &reply), ==, VU_ANSWER_CLOSE);
    g_assert_nonnull(strstr(s->why, "ADD_MEM_REG: a dirty log of"));
    vu_server_free(s);
    close(log);
    close(ram);
}

/* ------------------------------------------------------------------------ */
/* Running or not: the owner's hook (an export's hand-over)                  */

typedef struct RunLog {
    bool refuse;                 /* the next start is refused */
    unsigned starts, stops;
    bool migrating;              /* of the last stop */
} RunLog;

static bool run_record(void *opaque, bool running, bool migrating,
                       Error **errp)
{
    RunLog *log = opaque;

    if (!running) {
        g_assert_null(errp);
        log->stops++;
        log->migrating = migrating;
        return true;
    }
    log->starts++;
    if (log->refuse) {
        error_setg(errp, "the image is busy");
        return false;
    }
    return true;
}

static VuAnswer enable_ring(VuServer *s, unsigned index, VuMsg *reply)
{
    VhostUserVringState st = { .index = index, .num = 1 };
    VuMsg m;

    msg_init(&m, VHOST_USER_SET_VRING_ENABLE, NEED_REPLY, &st, sizeof(st));
    return handle(s, &m, reply);
}

static void stop_ring(VuServer *s, unsigned index)
{
    VhostUserVringState st = { .index = index };
    VuMsg reply;

    get_reply(s, VHOST_USER_GET_VRING_BASE, &st, sizeof(st), &reply);
}

/*
 * The owner hears of the first ring starting (and may refuse: no ring
 * starts, an error ack) and of the last one stopping, with LOG_ALL.
 */
static void test_rings_running(void)
{
    Dummy d;
    RunLog log = { .refuse = true };
    VuServerConfig cfg = {
        .listen_fd = -1, .num_queues = NUM_QUEUES,
        .max_queue_size = MAX_QUEUE_SIZE, .ctxs = &ctx, .nctx = 1,
        .ops = &dummy_ops, .dev = &d, .name = "test-handlers",
        .rings_running = run_record, .rings_opaque = &log,
    };
    uint64_t log_all = 1ull << VHOST_F_LOG_ALL;
    uint64_t features;
    int ram = guest_ram_new();
    VuServer *s;
    VuMsg reply;

    dummy_init(&d);
    s = vu_server_new_socketless(&cfg, ctx, NULL);
    g_assert_nonnull(s);
    features = get_u64(s, VHOST_USER_GET_FEATURES);
    send_u64(s, VHOST_USER_SET_PROTOCOL_FEATURES,
             get_u64(s, VHOST_USER_GET_PROTOCOL_FEATURES));
    send_u64(s, VHOST_USER_SET_FEATURES, features & ~log_all);
    set_mem_table(s, ram);
    for (unsigned i = 0; i < NUM_QUEUES; i++) {
        setup_ring(s, i);
        set_vring_fd(s, VHOST_USER_SET_VRING_CALL, i);
        set_vring_fd(s, VHOST_USER_SET_VRING_KICK, i);
    }

    /* Refused: an error ack, no ring runs, and no second question for
     * the same set-up. */
    g_assert_cmpint(enable_ring(s, 0, &reply), ==, VU_ANSWER_REPLY);
    check_ack(&reply, VHOST_USER_SET_VRING_ENABLE, 1);
    g_assert_cmpstr(s->why, ==, "rings not started: the image is busy");
    g_assert_false(ring_started(s, 0));
    g_assert_cmpint(enable_ring(s, 0, &reply), ==, VU_ANSWER_REPLY);
    g_assert_cmpuint(log.starts, ==, 1);

    /* A new kick fd tries again; the second ring asks nothing. */
    log.refuse = false;
    set_vring_fd(s, VHOST_USER_SET_VRING_KICK, 0);
    g_assert_true(ring_started(s, 0));
    g_assert_cmpint(enable_ring(s, 1, &reply), ==, VU_ANSWER_REPLY);
    check_ack(&reply, VHOST_USER_SET_VRING_ENABLE, 0);
    g_assert_true(ring_started(s, 1));
    g_assert_cmpuint(log.starts, ==, 2);

    /* Stopped when the last ring stops; without LOG_ALL, no migration. */
    stop_ring(s, 0);
    g_assert_cmpuint(log.stops, ==, 0);
    stop_ring(s, 1);
    g_assert_cmpuint(log.stops, ==, 1);
    g_assert_false(log.migrating);

    /* With LOG_ALL switched on while running: the end of a migration. */
    set_vring_fd(s, VHOST_USER_SET_VRING_KICK, 0);
    g_assert_cmpuint(log.starts, ==, 3);
    send_u64(s, VHOST_USER_SET_FEATURES, features);
    stop_ring(s, 0);
    g_assert_cmpuint(log.stops, ==, 2);
    g_assert_true(log.migrating);

    vu_server_free(s);
    g_assert_cmpuint(log.stops, ==, 2);
    close(ram);
}

static const TestCase tests[] = {
    { "/vhost-user-handlers/negotiate", test_negotiate },
    { "/vhost-user-handlers/rings", test_rings },
    { "/vhost-user-handlers/call-fd-signalled", test_call_fd_signalled },
    { "/vhost-user-handlers/call-fd-full-pipe", test_call_fd_full_pipe },
    { "/vhost-user-handlers/mem-regions", test_mem_regions },
    { "/vhost-user-handlers/config", test_config },
    { "/vhost-user-handlers/backend-channel", test_backend_channel },
    { "/vhost-user-handlers/request-table", test_request_table },
    { "/vhost-user-handlers/malformed", test_malformed },
    { "/vhost-user-handlers/malformed-special", test_malformed_special },
    { "/vhost-user-handlers/ring-outside-memory", test_ring_outside_memory },
    { "/vhost-user-handlers/log/migration", test_log_migration },
    { "/vhost-user-handlers/log/too-small", test_log_too_small },
    { "/vhost-user-handlers/rings-running", test_rings_running },
    { "/vhost-user-handlers/inflight/offered", test_inflight_offered },
    { "/vhost-user-handlers/inflight/get-set", test_inflight_get_set },
    { "/vhost-user-handlers/inflight/ring-too-big",
      test_inflight_ring_too_big },
    { "/vhost-user-handlers/inflight/bad", test_inflight_bad },
    { "/vhost-user-handlers/inflight/reply-carries-fd",
      test_reply_carries_fd },
};

static void setup(void)
{
    ctx = ctx_new();
}

static void teardown(void)
{
    aio_context_unref(ctx);
}

/* Below the 30 s meson timeout, so that the watchdog reports first. */
TEST_MAIN_SETUP(tests, 25, setup, teardown)

/*
 * Unit tests for the virtio-blk device (hw/virtio/virtio-blk.c): its
 * capacity after a resize and its accounting.  The request paths are
 * covered end to end by tests/functional/test_virtio_blk_requests.py.
 *
 * Theory of operation: a TBlk is a small virtio-blk driver plus the device
 * under test, driven through its VuDevOps callbacks (no vhost-user
 * socket).  The driver owns a memfd of "guest memory"; the VirtQueues are
 * real ones over a GuestMemory made from it, their rings at fixed guest
 * addresses.  A request is three descriptors: the 16-byte header, the
 * data (if any) and the status byte.  Queue 0 runs in the test thread's
 * AioContext, queue 1 in an IOThread, and the node (null-co, which keeps
 * nothing but whose length can change) lives in the test thread's
 * context, which plays the main loop.
 */
#include <endian.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <glib.h>

#include "block/block.h"
#include "hw/virtio/guest-memory.h"
#include "hw/virtio/virtio-blk.h"
#include "hw/virtio/virtio-blk-wire.h"
#include "hw/virtio/virtqueue.h"
#include "util/aio.h"
#include "util/clock.h"
#include "util/event-notifier.h"
#include "util/iothread.h"
#include "test-helpers.h"

#define MEM_SIZE        (1u << 20)
#define QVA_BASE        0x7f2000000000ull
#define RING_NUM        64
#define RINGS_GPA       0x10000
#define RING_STRIDE     0x1000
#define DATA_GPA        0x40000
#define NUM_QUEUES      2
#define WAIT_NS         (10 * NS_PER_SEC)

#define F_NEXT          1
#define F_WRITE         2

#define NODE_1M         "driver=null-co,size=1M,read-zeroes=on"

typedef struct TBlk TBlk;

typedef struct TQueue {
    TBlk *t;
    VirtQueue *vq;
    AioContext *ctx;
    EventNotifier kick, call;
    uint64_t gpa;                /* desc at +0, avail +0x400, used +0x800 */
    uint16_t avail_idx;
    uint16_t last_used;
    unsigned next_desc;
    bool started;
} TQueue;

struct TBlk {
    int memfd;
    uint8_t *map;
    GuestMemory *mem;
    AioContext *ctx;             /* the test thread's: the main loop */
    IOThread *iot;
    BlockNode *bs;
    VirtioBlk *vb;
    TQueue q[NUM_QUEUES];
    uint64_t data_next;
};

static void *gptr(TBlk *t, uint64_t gpa)
{
    g_assert_cmpuint(gpa, <, MEM_SIZE);
    return t->map + gpa;
}

/* len bytes of guest memory (recycled: requests here run one at a time). */
static uint64_t galloc(TBlk *t, size_t len)
{
    uint64_t gpa;

    if (t->data_next + len > MEM_SIZE) {
        t->data_next = DATA_GPA;
    }
    gpa = t->data_next;
    t->data_next = (t->data_next + len + 63) & ~63ull;
    return gpa;
}

static _Atomic uint16_t *ring16(TQueue *q, uint64_t off)
{
    return gptr(q->t, q->gpa + off);
}

static void tq_start_bh(void *opaque)
{
    TQueue *q = opaque;

    g_assert_cmpint(virtqueue_start(q->vq, q->t->mem,
                                    virtio_blk_vu_ops.handle_queue,
                                    q->t->vb), ==, 0);
    virtio_blk_vu_ops.queue_started(q->t->vb, q->vq);
}

static void tq_stop_bh(void *opaque)
{
    TQueue *q = opaque;

    virtqueue_stop(q->vq);
    virtio_blk_vu_ops.queue_drain(q->t->vb, q->vq);
    g_assert_cmpuint(virtqueue_inflight(q->vq), ==, 0);
}

static void tq_start(TQueue *q)
{
    aio_run_sync(q->ctx, tq_start_bh, q);
    q->started = true;
}

static void tq_stop(TQueue *q)
{
    if (q->started) {
        aio_run_sync(q->ctx, tq_stop_bh, q);
        q->started = false;
    }
}

static void tq_init(TBlk *t, unsigned index, AioContext *ctx,
                    uint64_t features)
{
    TQueue *q = &t->q[index];
    VirtQueueAddrs addrs = { 0 };

    memset(q, 0, sizeof(*q));
    q->t = t;
    q->ctx = ctx;
    q->gpa = RINGS_GPA + (uint64_t)index * RING_STRIDE;
    g_assert_cmpint(event_notifier_init(&q->kick, false), ==, 0);
    g_assert_cmpint(event_notifier_init(&q->call, false), ==, 0);
    addrs.desc_qva = QVA_BASE + q->gpa;
    addrs.avail_qva = QVA_BASE + q->gpa + 0x400;
    addrs.used_qva = QVA_BASE + q->gpa + 0x800;
    q->vq = virtqueue_new(index);
    g_assert_cmpint(virtqueue_set_num(q->vq, RING_NUM), ==, 0);
    virtqueue_set_addrs(q->vq, &addrs);
    virtqueue_set_kick_fd(q->vq, dup(q->kick.fd));
    virtqueue_set_call_fd(q->vq, dup(q->call.fd));
    virtqueue_set_features(q->vq, features);
    virtqueue_set_aio_context(q->vq, ctx);
    virtqueue_set_enabled(q->vq, true);
}

/* A device of logical block size lbs over a fresh NODE_1M, started. */
static void tblk_new(TBlk *t, uint32_t lbs)
{
    GuestMemRegionDesc r = { 0, MEM_SIZE, QVA_BASE, 0 };
    VirtioBlkConf conf = {
        .num_queues = NUM_QUEUES, .queue_size = 0,
        .logical_block_size = lbs, .writable = true,
    };
    AioPollParams no_polling = { .max_ns = 0 };
    GuestMemory *empty = guest_memory_new_empty();
    Error *err = NULL;
    uint64_t features;

    memset(t, 0, sizeof(*t));
    t->memfd = memfd_create("test-virtio-blk", MFD_CLOEXEC);
    g_assert_cmpint(t->memfd, >=, 0);
    g_assert_cmpint(ftruncate(t->memfd, MEM_SIZE), ==, 0);
    t->map = mmap(NULL, MEM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
                  t->memfd, 0);
    g_assert(t->map != MAP_FAILED);
    t->mem = guest_memory_add(empty, &r, t->memfd, &err);
    g_assert_no_error(err);
    guest_memory_unref(empty);
    t->data_next = DATA_GPA;

    t->ctx = ctx_new();
    aio_context_set_poll_params(t->ctx, &no_polling);
    t->iot = iot_new("vblk-iot", "poll-max-ns=0");
    t->bs = block_node_open_str(NODE_1M, t->ctx, &err);
    g_assert_no_error(err);
    t->vb = virtio_blk_new(&conf, t->bs, &err);
    g_assert_no_error(err);

    features = virtio_blk_vu_ops.get_features(t->vb) |
               (1ull << VIRTIO_F_VERSION_1);
    virtio_blk_vu_ops.set_features(t->vb, features);
    tq_init(t, 0, t->ctx, features);
    tq_init(t, 1, iothread_get_aio_context(t->iot), features);
    tq_start(&t->q[0]);
    tq_start(&t->q[1]);
}

static void tblk_cleanup(TBlk *t)
{
    for (unsigned i = 0; i < NUM_QUEUES; i++) {
        tq_stop(&t->q[i]);
    }
    virtio_blk_free(t->vb);
    block_node_unref(t->bs);
    for (unsigned i = 0; i < NUM_QUEUES; i++) {
        virtqueue_free(t->q[i].vq);
        event_notifier_cleanup(&t->q[i].kick);
        event_notifier_cleanup(&t->q[i].call);
    }
    iothread_destroy(t->iot);
    while (aio_poll(t->ctx, false)) {
        /* leftover BHs */
    }
    aio_context_unref(t->ctx);
    guest_memory_unref(t->mem);
    munmap(t->map, MEM_SIZE);
    close(t->memfd);
}

/* The capacity the config space shows, in sectors. */
static uint64_t config_capacity(TBlk *t)
{
    VirtioBlkConfig cfg;

    g_assert_cmpuint(virtio_blk_vu_ops.get_config(t->vb, (uint8_t *)&cfg,
                                                  sizeof(cfg)), ==,
                     sizeof(cfg));
    return le64toh(cfg.capacity);
}

/*
 * One request on queue qi: type at sector, with len data bytes (device-
 * writable for IN and GET_ID); for DISCARD and WRITE_ZEROES, one segment
 * of len bytes instead.  Waits for it and returns the status byte.
 */
static uint8_t blk_req(TBlk *t, unsigned qi, uint32_t type, uint64_t sector,
                       uint32_t len)
{
    TQueue *q = &t->q[qi];
    VirtioBlkOutHdr hdr = { htole32(type), 0, htole64(sector) };
    uint64_t hdr_gpa = galloc(t, sizeof(hdr));
    uint64_t status_gpa = galloc(t, 1);
    uint64_t data_gpa = 0;
    bool data_in = type == VIRTIO_BLK_T_IN || type == VIRTIO_BLK_T_GET_ID;
    bool dwz = type == VIRTIO_BLK_T_DISCARD ||
               type == VIRTIO_BLK_T_WRITE_ZEROES;
    struct { uint64_t gpa; uint32_t len; bool write; } b[3];
    int64_t deadline = clock_now_ns() + WAIT_NS;
    unsigned n = 0;
    uint16_t head = q->next_desc % RING_NUM;

    memcpy(gptr(t, hdr_gpa), &hdr, sizeof(hdr));
    b[n++] = (typeof(b[0])) { hdr_gpa, sizeof(hdr), false };
    if (dwz) {
        VirtioBlkSeg seg = { htole64(sector), htole32(len / 512), 0 };

        data_gpa = galloc(t, sizeof(seg));
        memcpy(gptr(t, data_gpa), &seg, sizeof(seg));
        b[n++] = (typeof(b[0])) { data_gpa, sizeof(seg), false };
    } else if (len) {
        data_gpa = galloc(t, len);
        memset(gptr(t, data_gpa), 0x5a, len);
        b[n++] = (typeof(b[0])) { data_gpa, len, data_in };
    }
    *(uint8_t *)gptr(t, status_gpa) = 0xff;
    b[n++] = (typeof(b[0])) { status_gpa, 1, true };

    for (unsigned i = 0; i < n; i++) {
        unsigned idx = (q->next_desc + i) % RING_NUM;
        uint8_t *d = gptr(t, q->gpa + 16 * idx);
        uint64_t addr = htole64(b[i].gpa);
        uint32_t l = htole32(b[i].len);
        uint16_t flags = htole16((b[i].write ? F_WRITE : 0) |
                                 (i + 1 < n ? F_NEXT : 0));
        uint16_t next = htole16((idx + 1) % RING_NUM);

        memcpy(d, &addr, 8);
        memcpy(d + 8, &l, 4);
        memcpy(d + 12, &flags, 2);
        memcpy(d + 14, &next, 2);
    }
    q->next_desc += n;
    atomic_store_explicit(ring16(q, 0x400 + 4 + 2 * (q->avail_idx % RING_NUM)),
                          htole16(head), memory_order_relaxed);
    q->avail_idx++;
    /* Release: the chain before the index (pairs with the device's acquire
     * load of avail->idx). */
    atomic_store_explicit(ring16(q, 0x400 + 2), htole16(q->avail_idx),
                          memory_order_release);
    event_notifier_set(&q->kick);

    /* Acquire: pairs with the device's release store of used->idx. */
    while (le16toh(atomic_load_explicit(ring16(q, 0x800 + 2),
                                        memory_order_acquire)) ==
           q->last_used) {
        g_assert_cmpint(clock_now_ns(), <, deadline);
        aio_poll(t->ctx, false);
        g_usleep(50);
    }
    q->last_used++;
    return *(uint8_t *)gptr(t, status_gpa);
}

/* ------------------------------------------------------------------------ */
/* Capacity                                                                  */

/*
 * After a resize the device keeps showing (and enforcing) the old
 * capacity until virtio_blk_refresh_capacity(), which reports the change
 * once; then the config space and the range checks both use the new one.
 */
static void test_refresh_capacity(void)
{
    Error *err = NULL;
    TBlk t;

    tblk_new(&t, 512);
    g_assert_cmpuint(config_capacity(&t), ==, 2048);
    g_assert_cmpuint(virtio_blk_get_capacity(t.vb), ==, 2048);
    g_assert_false(virtio_blk_refresh_capacity(t.vb));
    g_assert_cmpuint(blk_req(&t, 0, VIRTIO_BLK_T_IN, 2047, 512), ==,
                     VIRTIO_BLK_S_OK);
    g_assert_cmpuint(blk_req(&t, 1, VIRTIO_BLK_T_IN, 2048, 512), ==,
                     VIRTIO_BLK_S_IOERR);

    g_assert_true(block_node_resize(t.bs, 2 << 20, &err));
    g_assert_no_error(err);
    /* Not refreshed yet: config and checks agree on the old size. */
    g_assert_cmpuint(config_capacity(&t), ==, 2048);
    g_assert_cmpuint(blk_req(&t, 1, VIRTIO_BLK_T_IN, 2048, 512), ==,
                     VIRTIO_BLK_S_IOERR);

    g_assert_true(virtio_blk_refresh_capacity(t.vb));
    g_assert_false(virtio_blk_refresh_capacity(t.vb));
    g_assert_cmpuint(config_capacity(&t), ==, 4096);
    g_assert_cmpuint(virtio_blk_get_capacity(t.vb), ==, 4096);
    for (unsigned qi = 0; qi < NUM_QUEUES; qi++) {
        g_assert_cmpuint(blk_req(&t, qi, VIRTIO_BLK_T_IN, 4095, 512), ==,
                         VIRTIO_BLK_S_OK);
        g_assert_cmpuint(blk_req(&t, qi, VIRTIO_BLK_T_OUT, 2048, 4096), ==,
                         VIRTIO_BLK_S_OK);
        g_assert_cmpuint(blk_req(&t, qi, VIRTIO_BLK_T_WRITE_ZEROES, 4088,
                                 4096), ==, VIRTIO_BLK_S_OK);
        g_assert_cmpuint(blk_req(&t, qi, VIRTIO_BLK_T_IN, 4096, 512), ==,
                         VIRTIO_BLK_S_IOERR);
        g_assert_cmpuint(blk_req(&t, qi, VIRTIO_BLK_T_DISCARD, 4090, 4096),
                         ==, VIRTIO_BLK_S_IOERR);
    }
    tblk_cleanup(&t);
}

/* The capacity is whole logical blocks: a node that grows by less than a
 * block shows no change. */
static void test_refresh_capacity_block_size(void)
{
    Error *err = NULL;
    TBlk t;

    tblk_new(&t, 4096);
    g_assert_cmpuint(config_capacity(&t), ==, 2048);
    g_assert_true(block_node_resize(t.bs, (1 << 20) + 2048, &err));
    g_assert_no_error(err);
    g_assert_false(virtio_blk_refresh_capacity(t.vb));
    g_assert_cmpuint(config_capacity(&t), ==, 2048);
    g_assert_true(block_node_resize(t.bs, (1 << 20) + 4096 + 512, &err));
    g_assert_no_error(err);
    g_assert_true(virtio_blk_refresh_capacity(t.vb));
    g_assert_cmpuint(config_capacity(&t), ==, 2048 + 8);
    tblk_cleanup(&t);
}

/* ------------------------------------------------------------------------ */
/* Accounting                                                                */

static BlockAcctOpStats op_stats(TBlk *t, BlockOp op)
{
    BlockAcctStats st;

    virtio_blk_get_acct_stats(t->vb, &st);
    return st.op[op];
}

static void assert_op(TBlk *t, BlockOp op, uint64_t ops, uint64_t bytes)
{
    BlockAcctOpStats s = op_stats(t, op);

    g_assert_cmpuint(s.ops, ==, ops);
    g_assert_cmpuint(s.bytes, ==, bytes);
    g_assert_cmpuint(s.failed, ==, 0);
}

/*
 * Every queue's requests are counted, whichever thread runs it; requests
 * the device refuses itself (out of range, GET_ID) are not; the counts
 * survive a queue's stop and restart (its BlockQueue is remade).
 */
static void test_acct(void)
{
    TBlk t;

    tblk_new(&t, 512);
    assert_op(&t, BLOCK_OP_READ, 0, 0);
    g_assert_cmpuint(blk_req(&t, 0, VIRTIO_BLK_T_IN, 0, 4096), ==,
                     VIRTIO_BLK_S_OK);
    g_assert_cmpuint(blk_req(&t, 1, VIRTIO_BLK_T_IN, 8, 1024), ==,
                     VIRTIO_BLK_S_OK);
    g_assert_cmpuint(blk_req(&t, 1, VIRTIO_BLK_T_OUT, 16, 2048), ==,
                     VIRTIO_BLK_S_OK);
    g_assert_cmpuint(blk_req(&t, 0, VIRTIO_BLK_T_FLUSH, 0, 0), ==,
                     VIRTIO_BLK_S_OK);
    g_assert_cmpuint(blk_req(&t, 1, VIRTIO_BLK_T_DISCARD, 64, 8192), ==,
                     VIRTIO_BLK_S_OK);
    g_assert_cmpuint(blk_req(&t, 0, VIRTIO_BLK_T_WRITE_ZEROES, 128, 512), ==,
                     VIRTIO_BLK_S_OK);
    /* Refused by the device: never reach the node. */
    g_assert_cmpuint(blk_req(&t, 0, VIRTIO_BLK_T_IN, 4096, 512), ==,
                     VIRTIO_BLK_S_IOERR);
    g_assert_cmpuint(blk_req(&t, 1, VIRTIO_BLK_T_GET_ID, 0, 20), ==,
                     VIRTIO_BLK_S_OK);

    assert_op(&t, BLOCK_OP_READ, 2, 5120);
    assert_op(&t, BLOCK_OP_WRITE, 1, 2048);
    assert_op(&t, BLOCK_OP_FLUSH, 1, 0);
    assert_op(&t, BLOCK_OP_DISCARD, 1, 8192);
    assert_op(&t, BLOCK_OP_WRITE_ZEROES, 1, 512);
    g_assert_cmpuint(op_stats(&t, BLOCK_OP_READ).total_time_ns, >, 0);

    tq_stop(&t.q[1]);
    tq_start(&t.q[1]);
    g_assert_cmpuint(blk_req(&t, 1, VIRTIO_BLK_T_IN, 0, 512), ==,
                     VIRTIO_BLK_S_OK);
    assert_op(&t, BLOCK_OP_READ, 3, 5632);
    tblk_cleanup(&t);
}

int main(int argc, char **argv)
{
    static const TestCase tests[] = {
        { "/virtio-blk/refresh-capacity", test_refresh_capacity },
        { "/virtio-blk/refresh-capacity-block-size",
          test_refresh_capacity_block_size },
        { "/virtio-blk/acct", test_acct },
    };

    g_test_init(&argc, &argv, NULL);
    test_add_with_watchdog(tests, G_N_ELEMENTS(tests), 50);
    return g_test_run();
}

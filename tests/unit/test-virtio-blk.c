/*
 * Unit tests for the virtio-blk device (hw/virtio/virtio-blk.c): its
 * capacity after a resize, its accounting, the requests that leave no
 * place for a status (they break the queue), and the error policies
 * (rerror / werror: report, ignore, enospc, stop and resume) over a
 * blkdebug node that fails chosen requests.  The other request paths
 * are covered end to end by tests/functional/test_virtio_blk_requests.py.
 *
 * Theory of operation: a TBlk is a small virtio-blk driver plus the device
 * under test, driven through its VuDevOps callbacks (no vhost-user
 * socket).  The driver is the front-end library's, in-process
 * (local-virtio.h): the VirtQueues are real ones over the library's guest
 * memory and rings.  A request is three descriptors: the 16-byte header,
 * the data (if any) and the status byte.  Queue 0 runs in the test
 * thread's AioContext, queue 1 in an IOThread, and the node (null-co,
 * which keeps nothing but whose length can change) lives in the test
 * thread's context, which plays the main loop.
 */
#include <endian.h>
#include <stdint.h>
#include <string.h>
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
#include "local-virtio.h"

#define MEM_SIZE        (1u << 20)
#define QVA_BASE        0x7f2000000000ull
#define DATA_SIZE       (512u << 10)
#define NUM_QUEUES      2
#define WAIT_NS         (10 * NS_PER_SEC)

#define NODE_1M         "driver=null-co,size=1M,read-zeroes=on"

typedef struct TBlk {
    LocalMem m;
    AioContext *ctx;             /* the test thread's: the main loop */
    IOThread *iot;
    BlockNode *bs;
    VirtioBlk *vb;
    LocalQueue q[NUM_QUEUES];
    uint64_t data_gpa;           /* DATA_SIZE bytes for requests */
    uint64_t data_next;
} TBlk;

static void *gptr(TBlk *t, uint64_t gpa)
{
    return lmem_ptr(&t->m, gpa);
}

/* len bytes of guest memory (recycled: requests here run one at a time). */
static uint64_t galloc(TBlk *t, size_t len)
{
    uint64_t gpa;

    if (t->data_next + len > t->data_gpa + DATA_SIZE) {
        t->data_next = t->data_gpa;
    }
    gpa = t->data_next;
    t->data_next = (t->data_next + len + 63) & ~63ull;
    return gpa;
}

/* The stops the device told (error-policy tests), test thread only. */
static GArray *stops;            /* of VirtioIoError, strings not kept */

static void record_stop(const VirtioIoError *e)
{
    VirtioIoError copy = *e;

    g_assert_cmpstr(e->export_id, ==, "exp0");
    g_assert_cmpstr(e->node_name, ==, "bad");
    copy.export_id = copy.node_name = NULL;
    g_array_append_val(stops, copy);
}

/*
 * A device of logical block size lbs over a fresh node opened from node
 * (NULL: NODE_1M), with the error policies of policy (NULL: report),
 * started.
 */
static void tblk_new_node(TBlk *t, uint32_t lbs, const char *node,
                          const VirtioBlkConf *policy)
{
    VirtioBlkConf conf = {
        .num_queues = NUM_QUEUES, .queue_size = 0,
        .logical_block_size = lbs, .writable = true,
    };
    AioPollParams no_polling = { .max_ns = 0 };
    Error *err = NULL;
    uint64_t features;

    memset(t, 0, sizeof(*t));
    t->ctx = ctx_new();
    aio_context_set_poll_params(t->ctx, &no_polling);
    t->iot = iot_new("vblk-iot", "poll-max-ns=0");
    if (policy) {
        conf.rerror = policy->rerror;
        conf.werror = policy->werror;
        conf.export_id = "exp0";
        conf.main_ctx = t->ctx;
        conf.io_error = record_stop;
    }
    t->bs = block_node_open_str(node ? node : NODE_1M, t->ctx, &err);
    g_assert_no_error(err);
    t->vb = virtio_blk_new(&conf, t->bs, &err);
    g_assert_no_error(err);

    features = virtio_blk_vu_ops.get_features(t->vb) |
               (1ull << VIRTIO_F_VERSION_1);
    virtio_blk_vu_ops.set_features(t->vb, features);
    lmem_init(&t->m, MEM_SIZE, NUM_QUEUES, QVA_BASE, features);
    t->data_gpa = t->data_next = lmem_alloc(&t->m, DATA_SIZE);
    for (unsigned i = 0; i < NUM_QUEUES; i++) {
        /* Queue 0 in the main loop, queue 1 in the IOThread. */
        AioContext *ctx = i ? iothread_get_aio_context(t->iot) : t->ctx;

        lq_init(&t->q[i], &t->m, i, ctx, features, &virtio_blk_vu_ops,
                t->vb);
        lq_start(&t->q[i]);
    }
}

/* A device of logical block size lbs over a fresh NODE_1M, started. */
static void tblk_new(TBlk *t, uint32_t lbs)
{
    tblk_new_node(t, lbs, NULL, NULL);
}

static void tblk_cleanup(TBlk *t)
{
    for (unsigned i = 0; i < NUM_QUEUES; i++) {
        lq_stop(&t->q[i]);
    }
    virtio_blk_free(t->vb);
    block_node_unref(t->bs);
    for (unsigned i = 0; i < NUM_QUEUES; i++) {
        lq_cleanup(&t->q[i]);
    }
    iothread_destroy(t->iot);
    while (aio_poll(t->ctx, false)) {
        /* leftover BHs */
    }
    aio_context_unref(t->ctx);
    lmem_cleanup(&t->m);
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
 * Post one request on queue qi: type at sector, with len data bytes
 * (device-writable for IN and GET_ID); for DISCARD and WRITE_ZEROES, one
 * segment of len bytes instead.  Returns its head; *status_gpa is where
 * its status byte will be.
 */
static uint16_t blk_post(TBlk *t, unsigned qi, uint32_t type,
                         uint64_t sector, uint32_t len, uint64_t *status_gpa)
{
    LocalQueue *q = &t->q[qi];
    VirtioBlkOutHdr hdr = { htole32(type), 0, htole64(sector) };
    uint64_t hdr_gpa = galloc(t, sizeof(hdr));
    uint64_t data_gpa = 0;
    bool data_in = type == VIRTIO_BLK_T_IN || type == VIRTIO_BLK_T_GET_ID;
    bool dwz = type == VIRTIO_BLK_T_DISCARD ||
               type == VIRTIO_BLK_T_WRITE_ZEROES;
    VufSeg b[3];
    unsigned n = 0;
    uint16_t head;

    *status_gpa = galloc(t, 1);
    memcpy(gptr(t, hdr_gpa), &hdr, sizeof(hdr));
    b[n++] = (VufSeg) { hdr_gpa, sizeof(hdr), false };
    if (dwz) {
        VirtioBlkSeg seg = { htole64(sector), htole32(len / 512), 0 };

        data_gpa = galloc(t, sizeof(seg));
        memcpy(gptr(t, data_gpa), &seg, sizeof(seg));
        b[n++] = (VufSeg) { data_gpa, sizeof(seg), false };
    } else if (len) {
        data_gpa = galloc(t, len);
        memset(gptr(t, data_gpa), 0x5a, len);
        b[n++] = (VufSeg) { data_gpa, len, data_in };
    }
    *(uint8_t *)gptr(t, *status_gpa) = 0xff;
    b[n++] = (VufSeg) { *status_gpa, 1, true };

    head = lq_add_chain(q, b, n);
    lq_publish(q, head, true);
    return head;
}

/* Wait for the next used entry of queue qi; its head. */
static uint32_t blk_wait_used(TBlk *t, unsigned qi)
{
    int64_t deadline = clock_now_ns() + WAIT_NS;
    uint32_t id;

    while (!lq_next_used(&t->q[qi], &id, NULL)) {
        g_assert_cmpint(clock_now_ns(), <, deadline);
        aio_poll(t->ctx, false);
        g_usleep(50);
    }
    return id;
}

/* blk_post(), wait for it and return its status byte. */
static uint8_t blk_req(TBlk *t, unsigned qi, uint32_t type, uint64_t sector,
                       uint32_t len)
{
    uint64_t status_gpa;
    uint16_t head = blk_post(t, qi, type, sector, len, &status_gpa);

    g_assert_cmpuint(blk_wait_used(t, qi), ==, head);
    return *(uint8_t *)gptr(t, status_gpa);
}

/* Let queue qi run for a while: true if it pushed anything. */
static bool blk_any_used(TBlk *t, unsigned qi)
{
    for (unsigned i = 0; i < 200; i++) {
        if (lq_next_used(&t->q[qi], NULL, NULL)) {
            return true;
        }
        aio_poll(t->ctx, false);
        g_usleep(50);
    }
    return false;
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
    /* Queue, type, sector, length, and the status the device gives. */
    static const struct {
        unsigned q;
        uint32_t type;
        uint64_t sector;
        uint32_t len;
        uint8_t status;
    } reqs[] = {
        { 0, VIRTIO_BLK_T_IN, 0, 4096, VIRTIO_BLK_S_OK },
        { 1, VIRTIO_BLK_T_IN, 8, 1024, VIRTIO_BLK_S_OK },
        { 1, VIRTIO_BLK_T_OUT, 16, 2048, VIRTIO_BLK_S_OK },
        { 0, VIRTIO_BLK_T_FLUSH, 0, 0, VIRTIO_BLK_S_OK },
        { 1, VIRTIO_BLK_T_DISCARD, 64, 8192, VIRTIO_BLK_S_OK },
        { 0, VIRTIO_BLK_T_WRITE_ZEROES, 128, 512, VIRTIO_BLK_S_OK },
        /* Refused by the device: never reach the node. */
        { 0, VIRTIO_BLK_T_IN, 4096, 512, VIRTIO_BLK_S_IOERR },
        { 1, VIRTIO_BLK_T_GET_ID, 0, 20, VIRTIO_BLK_S_OK },
    };
    /* What the node saw: operations and bytes per kind. */
    static const uint64_t counted[][3] = {
        { BLOCK_OP_READ, 2, 5120 },
        { BLOCK_OP_WRITE, 1, 2048 },
        { BLOCK_OP_FLUSH, 1, 0 },
        { BLOCK_OP_DISCARD, 1, 8192 },
        { BLOCK_OP_WRITE_ZEROES, 1, 512 },
    };
    TBlk t;

    tblk_new(&t, 512);
    assert_op(&t, BLOCK_OP_READ, 0, 0);
    for (unsigned i = 0; i < G_N_ELEMENTS(reqs); i++) {
        g_assert_cmpuint(blk_req(&t, reqs[i].q, reqs[i].type, reqs[i].sector,
                                 reqs[i].len), ==, reqs[i].status);
    }
    for (unsigned i = 0; i < G_N_ELEMENTS(counted); i++) {
        assert_op(&t, counted[i][0], counted[i][1], counted[i][2]);
    }
    g_assert_cmpuint(op_stats(&t, BLOCK_OP_READ).total_time_ns, >, 0);

    lq_stop(&t.q[1]);
    lq_start(&t.q[1]);
    g_assert_cmpuint(blk_req(&t, 1, VIRTIO_BLK_T_IN, 0, 512), ==,
                     VIRTIO_BLK_S_OK);
    assert_op(&t, BLOCK_OP_READ, 3, 5632);
    tblk_cleanup(&t);
}

/* ------------------------------------------------------------------------ */
/* Requests with no place for a status                                       */

/*
 * A request whose last device-writable descriptor is missing or empty
 * leaves the device nowhere to write its status (the driver reads it
 * there): it is not completed, queue 0 is broken (one warning, the error
 * eventfd), nothing written into the request, later requests on the queue
 * not served; queue 1 keeps serving.
 */
static void test_no_status(void)
{
    /* The device-writable descriptors after the 16-byte header. */
    static const struct {
        uint32_t type;
        unsigned nin;
        uint32_t in_len[2];
    } shapes[] = {
        { VIRTIO_BLK_T_FLUSH, 0, { 0 } },           /* none at all */
        { VIRTIO_BLK_T_FLUSH, 1, { 0 } },           /* one, empty */
        { VIRTIO_BLK_T_IN, 2, { 512, 0 } },         /* data, empty status */
        { VIRTIO_BLK_T_GET_ID, 2, { 20, 0 } },
    };

    for (unsigned i = 0; i < G_N_ELEMENTS(shapes); i++) {
        VirtioBlkOutHdr hdr = { htole32(shapes[i].type), 0, 0 };
        uint64_t in_gpa[2];
        VufSeg b[3];
        unsigned n = 0;
        TBlk t;

        tblk_new(&t, 512);
        b[n] = (VufSeg) { galloc(&t, sizeof(hdr)), sizeof(hdr), false };
        memcpy(gptr(&t, b[n++].gpa), &hdr, sizeof(hdr));
        for (unsigned j = 0; j < shapes[i].nin; j++) {
            uint32_t len = shapes[i].in_len[j];

            in_gpa[j] = galloc(&t, MAX(len, 1u));
            memset(gptr(&t, in_gpa[j]), 0xee, MAX(len, 1u));
            b[n++] = (VufSeg) { in_gpa[j], len, true };
        }

        g_test_expect_message(NULL, G_LOG_LEVEL_WARNING,
                              "virtqueue 0 is broken*no device-writable "
                              "byte for its status*");
        lq_publish(&t.q[0], lq_add_chain(&t.q[0], b, n), true);
        g_assert_false(blk_any_used(&t, 0));
        g_test_assert_expected_messages();
        g_assert_true(virtqueue_is_broken(t.q[0].vq));
        g_assert_true(vufq_error_signalled(t.q[0].fq));
        g_assert_cmpuint(virtqueue_inflight(t.q[0].vq), ==, 0);
        for (unsigned j = 0; j < shapes[i].nin; j++) {
            uint32_t len = MAX(shapes[i].in_len[j], 1u);

            for (uint32_t k = 0; k < len; k++) {
                g_assert_cmphex(((uint8_t *)gptr(&t, in_gpa[j]))[k], ==,
                                0xee);
            }
        }

        /* A good request on the broken queue is not served... */
        b[1] = (VufSeg) { galloc(&t, 1), 1, true };
        lq_publish(&t.q[0], lq_add_chain(&t.q[0], b, 2), true);
        g_assert_false(blk_any_used(&t, 0));
        /* ... the other queue serves. */
        g_assert_cmpuint(blk_req(&t, 1, VIRTIO_BLK_T_IN, 0, 512), ==,
                         VIRTIO_BLK_S_OK);
        g_assert_false(vufq_error_signalled(t.q[1].fq));
        tblk_cleanup(&t);
    }
}

/* ------------------------------------------------------------------------ */
/* Error policies                                                            */

/* blkdebug over NODE_1M's null-co, failing as rules say. */
#define BAD_NODE(rules) \
    "driver=blkdebug,node-name=bad,image.driver=null-co,image.size=1M," \
    "image.read-zeroes=on," rules

/* Writes to sectors 8 and 16 fail once with ENOSPC, reads of 24 with
 * EIO, every write to sector 32 with EIO, write-zeroes over 12 once with
 * ENOSPC. */
#define RULES \
    "inject-error.0.op=write,inject-error.0.sector=8,inject-error.0.once=on," \
    "inject-error.0.errno=28," \
    "inject-error.1.op=write,inject-error.1.sector=16,inject-error.1.once=on," \
    "inject-error.1.errno=28," \
    "inject-error.2.op=read,inject-error.2.sector=24,inject-error.2.once=on," \
    "inject-error.3.op=write,inject-error.3.sector=32," \
    "inject-error.4.op=write-zeroes,inject-error.4.sector=12," \
    "inject-error.4.once=on,inject-error.4.errno=28"

static void tblk_new_policy(TBlk *t, BlockErrorPolicy rerror,
                            BlockErrorPolicy werror)
{
    VirtioBlkConf policy = { .rerror = rerror, .werror = werror };

    stops = g_array_new(false, true, sizeof(VirtioIoError));
    tblk_new_node(t, 512, BAD_NODE(RULES), &policy);
}

static void tblk_cleanup_policy(TBlk *t)
{
    tblk_cleanup(t);
    g_array_unref(stops);
    stops = NULL;
}

/* Run the loop a little: BHs (the stop's event) and completions. */
static void spin(TBlk *t)
{
    for (unsigned i = 0; i < 50; i++) {
        aio_poll(t->ctx, false);
        g_usleep(100);
    }
}

/*
 * report (the default: the guest gets the error) and ignore (answered
 * OK): no stop, no event, nothing to resume.  Reads follow rerror only
 * (report here).
 */
static void test_policy_answered(void)
{
    static const struct {
        BlockErrorPolicy werror;
        uint8_t write_status;
    } cases[] = {
        { BLOCK_ERROR_POLICY_REPORT, VIRTIO_BLK_S_IOERR },
        { BLOCK_ERROR_POLICY_IGNORE, VIRTIO_BLK_S_OK },
    };

    for (unsigned i = 0; i < G_N_ELEMENTS(cases); i++) {
        TBlk t;

        tblk_new_policy(&t, BLOCK_ERROR_POLICY_REPORT, cases[i].werror);
        for (unsigned qi = 0; qi < NUM_QUEUES; qi++) {
            g_assert_cmpuint(blk_req(&t, qi, VIRTIO_BLK_T_OUT, 32, 512), ==,
                             cases[i].write_status);
        }
        g_assert_cmpuint(blk_req(&t, 0, VIRTIO_BLK_T_IN, 24, 512), ==,
                         VIRTIO_BLK_S_IOERR);
        spin(&t);
        g_assert_cmpuint(stops->len, ==, 0);
        g_assert_cmpuint(virtio_blk_stops(t.vb, false), ==, 0);
        g_assert_cmpuint(virtio_blk_stops(t.vb, true), ==, 0);
        tblk_cleanup_policy(&t);
    }
}

/* enospc: stops on ENOSPC (writes at 8), reports EIO (writes at 32). */
static void test_policy_enospc(void)
{
    uint64_t st;
    uint16_t head;
    TBlk t;

    tblk_new_policy(&t, BLOCK_ERROR_POLICY_ENOSPC,
                    BLOCK_ERROR_POLICY_ENOSPC);
    g_assert_cmpuint(blk_req(&t, 0, VIRTIO_BLK_T_OUT, 32, 512), ==,
                     VIRTIO_BLK_S_IOERR);
    head = blk_post(&t, 0, VIRTIO_BLK_T_OUT, 8, 512, &st);
    g_assert_false(blk_any_used(&t, 0));
    spin(&t);
    g_assert_cmpuint(stops->len, ==, 1);
    g_assert_cmpuint(g_array_index(stops, VirtioIoError, 0).error, ==,
                     ENOSPC);
    g_assert_true(g_array_index(stops, VirtioIoError, 0).write);
    g_assert_cmpuint(g_array_index(stops, VirtioIoError, 0).queue, ==, 0);
    g_assert_cmpuint(virtio_blk_stops(t.vb, false), ==, 1);
    g_assert_cmpuint(virtio_blk_stops(t.vb, true), ==, 1);
    g_assert_cmpuint(blk_wait_used(&t, 0), ==, head);
    g_assert_cmpuint(*(uint8_t *)gptr(&t, st), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(virtio_blk_stops(t.vb, false), ==, 0);
    tblk_cleanup_policy(&t);
}

/*
 * stop: the failed writes are held, the queue takes nothing new (a good
 * request posted after them stays in the ring), the other queue goes
 * on; one event per stop; resume retries the held ones in ring order
 * and then takes the waiting one: all complete, in that order.
 */
static void test_policy_stop_resume(void)
{
    uint64_t st[3];
    uint16_t head[3];
    TBlk t;

    tblk_new_policy(&t, BLOCK_ERROR_POLICY_REPORT,
                    BLOCK_ERROR_POLICY_STOP);
    /* 16 before 8 in the ring: both fail, both held, 16 first. */
    head[0] = blk_post(&t, 0, VIRTIO_BLK_T_OUT, 16, 512, &st[0]);
    head[1] = blk_post(&t, 0, VIRTIO_BLK_T_OUT, 8, 512, &st[1]);
    spin(&t);
    head[2] = blk_post(&t, 0, VIRTIO_BLK_T_OUT, 0, 512, &st[2]);
    g_assert_false(blk_any_used(&t, 0));
    g_assert_cmpuint(virtqueue_inflight(t.q[0].vq), ==, 2);
    g_assert_cmpuint(stops->len, ==, 1);
    g_assert_cmpuint(virtio_blk_stops(t.vb, false), ==, 1);
    /* Queue 1 is not stopped; its read of 24 follows rerror=report. */
    g_assert_cmpuint(blk_req(&t, 1, VIRTIO_BLK_T_OUT, 0, 512), ==,
                     VIRTIO_BLK_S_OK);
    g_assert_cmpuint(blk_req(&t, 1, VIRTIO_BLK_T_IN, 24, 512), ==,
                     VIRTIO_BLK_S_IOERR);

    g_assert_cmpuint(virtio_blk_stops(t.vb, true), ==, 2);
    for (unsigned i = 0; i < 3; i++) {
        g_assert_cmpuint(blk_wait_used(&t, 0), ==, head[i]);
        g_assert_cmpuint(*(uint8_t *)gptr(&t, st[i]), ==, VIRTIO_BLK_S_OK);
    }
    g_assert_cmpuint(stops->len, ==, 1);
    g_assert_cmpuint(virtio_blk_stops(t.vb, false), ==, 0);
    tblk_cleanup_policy(&t);
}

/*
 * A held request that fails again on resume stops the queue again (a new
 * event); one held when the front-end stops the ring gets one more try
 * and is then answered with the error.
 */
static void test_policy_stop_again_and_drain(void)
{
    uint64_t st;
    uint32_t id;
    uint16_t head;
    TBlk t;

    tblk_new_policy(&t, BLOCK_ERROR_POLICY_STOP, BLOCK_ERROR_POLICY_STOP);
    head = blk_post(&t, 0, VIRTIO_BLK_T_OUT, 32, 512, &st);
    spin(&t);
    g_assert_cmpuint(stops->len, ==, 1);
    g_assert_cmpuint(virtio_blk_stops(t.vb, true), ==, 1);
    spin(&t);
    g_assert_false(blk_any_used(&t, 0));
    g_assert_cmpuint(stops->len, ==, 2);
    g_assert_cmpuint(g_array_index(stops, VirtioIoError, 1).error, ==, EIO);
    g_assert_cmpuint(virtio_blk_stops(t.vb, false), ==, 1);

    lq_stop(&t.q[0]);
    g_assert_cmpuint(virtio_blk_stops(t.vb, false), ==, 0);
    g_assert_true(lq_next_used(&t.q[0], &id, NULL));
    g_assert_cmpuint(id, ==, head);
    g_assert_cmpuint(*(uint8_t *)gptr(&t, st), ==, VIRTIO_BLK_S_IOERR);
    tblk_cleanup_policy(&t);
}

/* A discard / write-zeroes request retries the segment that failed. */
static void test_policy_stop_write_zeroes(void)
{
    uint64_t st;
    uint16_t head;
    TBlk t;

    tblk_new_policy(&t, BLOCK_ERROR_POLICY_REPORT,
                    BLOCK_ERROR_POLICY_STOP);
    head = blk_post(&t, 0, VIRTIO_BLK_T_WRITE_ZEROES, 8, 4096, &st);
    spin(&t);
    g_assert_false(blk_any_used(&t, 0));
    g_assert_cmpuint(stops->len, ==, 1);
    g_assert_cmpuint(virtio_blk_stops(t.vb, true), ==, 1);
    g_assert_cmpuint(blk_wait_used(&t, 0), ==, head);
    g_assert_cmpuint(*(uint8_t *)gptr(&t, st), ==, VIRTIO_BLK_S_OK);
    tblk_cleanup_policy(&t);
}

static const TestCase tests[] = {
    { "/virtio-blk/policy/report-and-ignore", test_policy_answered },
    { "/virtio-blk/policy/enospc", test_policy_enospc },
    { "/virtio-blk/policy/stop-resume", test_policy_stop_resume },
    { "/virtio-blk/policy/stop-again-and-drain",
      test_policy_stop_again_and_drain },
    { "/virtio-blk/policy/stop-write-zeroes", test_policy_stop_write_zeroes },
    { "/virtio-blk/refresh-capacity", test_refresh_capacity },
    { "/virtio-blk/refresh-capacity-block-size",
      test_refresh_capacity_block_size },
    { "/virtio-blk/acct", test_acct },
    { "/virtio-blk/no-status", test_no_status },
};

TEST_MAIN(tests, 50)

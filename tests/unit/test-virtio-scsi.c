/*
 * Unit tests for the virtio-scsi device (hw/virtio/virtio-scsi.c and
 * hw/virtio/virtio-scsi-ctrl.c).
 *
 * Theory of operation: a TDev is a small virtio-scsi driver for these
 * tests plus the device under test, driven directly through its VuDevOps
 * callbacks (no vhost-user socket: the server has its own tests).  The
 * rings are driven by the front-end library's driver, in-process
 * (local-virtio.h): the VirtQueues (control, event, N request queues) are
 * real ones over the library's guest memory and rings.  The test adds
 * descriptor chains (the request header, CDB, data-out; the response
 * header, sense, data-in; split across descriptors where a test wants
 * it), publishes them, kicks, and reads the used ring, recording for each
 * head the length pushed and the order in which it was pushed (so a test
 * can check that a TMF completed after the commands it affected).
 *
 * The control and event queues run in the test thread's AioContext; the
 * request queues run there too, or in an IOThread (or alternately in two)
 * for the tests of the cross-thread task management and LUN hot-plug
 * paths.  The test thread plays the main thread for features, config,
 * capacity changes and LUN add/remove.  LUNs are ScsiDisks
 * over null-co nodes (latency-ns keeps a command in flight long enough to
 * abort it) or over a file node for the data round trip.
 */
#include <endian.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <glib.h>

#include "block/block.h"
#include "hw/scsi/scsi-defs.h"
#include "hw/scsi/scsi-disk.h"
#include "hw/virtio/guest-memory.h"
#include "hw/virtio/virtio-scsi.h"
#include "hw/virtio/virtio-scsi-wire.h"
#include "hw/virtio/virtqueue.h"
#include "util/aio.h"
#include "util/clock.h"
#include "util/event-notifier.h"
#include "util/iothread.h"
#include "test-helpers.h"
#include "local-virtio.h"

#define MEM_SIZE        (4u << 20)
#define QVA_BASE        0x7f1000000000ull
#define DATA_SIZE       (3u << 20)
#define MAX_VQS         6
#define WAIT_NS         (10 * NS_PER_SEC)

#define REQ_HDR         sizeof(VirtioScsiCmdReqHdr)
#define RESP_HDR        sizeof(VirtioScsiCmdRespHdr)
#define SENSE_DEFAULT   VIRTIO_SCSI_SENSE_DEFAULT_SIZE
#define NOT_USED        UINT32_MAX

/* A latency that keeps a command in flight while a TMF arrives. */
#define SLOW_NODE       "driver=null-co,size=1M,read-zeroes=on," \
                        "latency-ns=500000000"
#define FAST_NODE       "driver=null-co,size=1M,read-zeroes=on"

typedef struct TDev TDev;

typedef struct TQueue {
    LocalQueue d;                  /* the ring and the device's VirtQueue */
    TDev *t;
    unsigned index;
    uint32_t used_len[LOCAL_RING_NUM];  /* by head; NOT_USED until pushed */
    uint64_t used_seq[LOCAL_RING_NUM];  /* the tdev_reap() pass that saw it */
} TQueue;

typedef struct TLun {
    unsigned lun;
    const char *node;            /* block_node_open_str() options */
} TLun;

typedef struct TConf {
    unsigned num_queues;
    bool iothread;               /* request queues in an IOThread */
    bool two_iothreads;          /* ... alternating between two */
    bool no_change;              /* do not negotiate VIRTIO_SCSI_F_CHANGE */
    bool no_hotplug;             /* ... nor VIRTIO_SCSI_F_HOTPLUG */
    const TLun *luns;
    unsigned nluns;
} TConf;

struct TDev {
    LocalMem m;
    AioContext *ctx;             /* the test thread's */
    IOThread *iot, *iot2;
    VirtioScsi *vs;
    unsigned nvqs;
    TQueue q[MAX_VQS];
    uint64_t data_gpa;           /* DATA_SIZE bytes for commands */
    uint64_t data_next;
    uint64_t used_seq;           /* tdev_reap() passes */
    uint32_t sense_size;         /* the layout the driver builds */
    uint32_t cdb_size;
};

/* A command sent, and its answer. */
typedef struct TCmd {
    TQueue *q;
    uint16_t head;
    uint64_t resp_gpa;
    uint64_t in_gpa;
    uint32_t in_len;
    uint32_t used_len;
    uint8_t response;
    uint8_t status;
    uint32_t sense_len;
    uint32_t resid;
    uint8_t sense[VIRTIO_SCSI_SENSE_DEFAULT_SIZE * 3];
} TCmd;

/* ------------------------------------------------------------------------ */
/* Guest memory                                                              */

static void *gptr(TDev *t, uint64_t gpa)
{
    return lmem_ptr(&t->m, gpa);
}

static uint64_t galloc(TDev *t, size_t len)
{
    uint64_t gpa = t->data_next;

    t->data_next = (t->data_next + len + 63) & ~63ull;
    g_assert_cmpuint(t->data_next, <=, t->data_gpa + DATA_SIZE);
    return gpa;
}

/* Guest memory of len bytes holding data (or 0xee to see what we write). */
static uint64_t gbuf(TDev *t, const void *data, size_t len)
{
    uint64_t gpa = galloc(t, len);

    if (data) {
        memcpy(gptr(t, gpa), data, len);
    } else {
        memset(gptr(t, gpa), 0xee, len);
    }
    return gpa;
}

/* ------------------------------------------------------------------------ */
/* The driver's rings                                                        */

/* Make head available; kick the queue's eventfd if kick. */
static void tq_publish(TQueue *q, uint16_t head, bool kick)
{
    q->used_len[head] = NOT_USED;
    lq_publish(&q->d, head, kick);
}

static void tq_reap(TQueue *q)
{
    uint32_t id, len;

    while (lq_next_used(&q->d, &id, &len)) {
        g_assert_cmpuint(id, <, LOCAL_RING_NUM);
        q->used_len[id] = len;
        q->used_seq[id] = q->t->used_seq;
    }
}

/*
 * Read every queue's used ring, the control queue first: when a TMF is
 * seen in pass p, the commands pushed before it are seen in pass p or
 * earlier, while commands pushed later are (but for a tiny window) seen
 * in a later pass.
 */
static void tdev_reap(TDev *t)
{
    t->used_seq++;
    for (unsigned i = 0; i < t->nvqs; i++) {
        tq_reap(&t->q[i]);
    }
}

/* Run the test thread's loop once (without blocking) and look. */
static bool tq_check(TQueue *q, uint16_t head)
{
    aio_poll(q->t->ctx, false);
    tdev_reap(q->t);
    return q->used_len[head] != NOT_USED;
}

/* Wait until head is pushed; returns its length. */
static uint32_t tq_wait(TQueue *q, uint16_t head)
{
    int64_t deadline = clock_now_ns() + WAIT_NS;

    while (!tq_check(q, head)) {
        g_assert_cmpint(clock_now_ns(), <, deadline);
        g_usleep(100);
    }
    return q->used_len[head];
}

/* Check for ms milliseconds that head is not pushed. */
static void tq_assert_pending(TQueue *q, uint16_t head, unsigned ms)
{
    int64_t end = clock_now_ns() + ms * NS_PER_MS;

    while (clock_now_ns() < end) {
        g_assert_false(tq_check(q, head));
        g_usleep(200);
    }
}

/*
 * Publish the chain b on q, which leaves the device no room for an honest
 * answer: the queue breaks (one warning matching why, the error eventfd
 * signalled) and nothing is pushed.
 */
static void tq_expect_broken(TQueue *q, const VufSeg *b, unsigned n,
                             const char *why)
{
    g_autofree char *pattern = g_strdup_printf("virtqueue %u is broken*%s*",
                                               q->index, why);
    uint16_t head;

    g_assert_false(virtqueue_is_broken(q->d.vq));
    g_test_expect_message(NULL, G_LOG_LEVEL_WARNING, pattern);
    head = lq_add_chain(&q->d, b, n);
    tq_publish(q, head, true);
    tq_assert_pending(q, head, 20);
    g_test_assert_expected_messages();
    g_assert_true(virtqueue_is_broken(q->d.vq));
    g_assert_true(vufq_error_signalled(q->d.fq));
}

/* ------------------------------------------------------------------------ */
/* Device set-up                                                             */

static void tq_start(TQueue *q)
{
    lq_start(&q->d);
    while (aio_poll(q->t->ctx, false)) {
        /* the start-up BHs */
    }
}

static void tq_init(TDev *t, TQueue *q, unsigned index, AioContext *ctx,
                    uint64_t features)
{
    memset(q, 0, sizeof(*q));
    q->t = t;
    q->index = index;
    memset(q->used_len, 0xff, sizeof(q->used_len));
    lq_init(&q->d, &t->m, index, ctx, features, &virtio_scsi_vu_ops, t->vs);
}

/* A disk over a node opened from options node. */
static ScsiDisk *tdisk_new(TDev *t, const char *node)
{
    ScsiDiskConf dconf = {
        .vendor = "SPINDLE", .product = "TEST DISK", .revision = "0.1",
        .logical_block_size = 512, .writable = true,
    };
    Error *err = NULL;
    BlockNode *bs = block_node_open_str(node, t->ctx, &err);
    ScsiDisk *d;

    g_assert_no_error(err);
    d = scsi_disk_new(&dconf, bs, &err);
    g_assert_no_error(err);
    block_node_unref(bs);         /* the disk holds its own reference */
    return d;
}

/* Add LUN lun on node (before the start or while the device runs). */
static void tdev_add_lun(TDev *t, unsigned lun, const char *node)
{
    Error *err = NULL;

    g_assert_true(virtio_scsi_add_lun(t->vs, lun, tdisk_new(t, node), &err));
    g_assert_no_error(err);
}

static void tdev_add_luns(TDev *t, const TConf *c)
{
    for (unsigned i = 0; i < c->nluns; i++) {
        tdev_add_lun(t, c->luns[i].lun, c->luns[i].node);
    }
}

static void tdev_init(TDev *t, const TConf *c)
{
    VirtioScsiConf vconf = { .num_queues = c->num_queues, .queue_size = 0 };
    AioPollParams no_polling = { .max_ns = 0 };
    Error *err = NULL;
    uint64_t features;

    memset(t, 0, sizeof(*t));
    t->sense_size = VIRTIO_SCSI_SENSE_DEFAULT_SIZE;
    t->cdb_size = VIRTIO_SCSI_CDB_DEFAULT_SIZE;

    t->ctx = ctx_new();
    aio_context_set_poll_params(t->ctx, &no_polling);
    if (c->iothread || c->two_iothreads) {
        t->iot = iot_new("vscsi-iot", "poll-max-ns=0");
    }
    if (c->two_iothreads) {
        t->iot2 = iot_new("vscsi-iot2", "poll-max-ns=0");
    }
    t->vs = virtio_scsi_new(&vconf, &err);
    g_assert_no_error(err);
    tdev_add_luns(t, c);

    features = virtio_scsi_vu_ops.get_features(t->vs) |
               (1ull << VIRTIO_F_VERSION_1);
    if (c->no_change) {
        features &= ~(1ull << VIRTIO_SCSI_F_CHANGE);
    }
    if (c->no_hotplug) {
        features &= ~(1ull << VIRTIO_SCSI_F_HOTPLUG);
    }
    virtio_scsi_vu_ops.set_features(t->vs, features);

    t->nvqs = virtio_scsi_num_virtqueues(t->vs);
    g_assert_cmpuint(t->nvqs, ==, c->num_queues + 2);
    g_assert_cmpuint(t->nvqs, <=, MAX_VQS);
    lmem_init(&t->m, MEM_SIZE, t->nvqs, QVA_BASE, features);
    t->data_gpa = t->data_next = lmem_alloc(&t->m, DATA_SIZE);
    for (unsigned i = 0; i < t->nvqs; i++) {
        AioContext *ctx = t->ctx;

        if (i >= VIRTIO_SCSI_VQ_REQUEST0 && t->iot) {
            /* With two IOThreads, request queue n runs in the n % 2-th. */
            bool second = t->iot2 && (i - VIRTIO_SCSI_VQ_REQUEST0) % 2;

            ctx = iothread_get_aio_context(second ? t->iot2 : t->iot);
        }
        tq_init(t, &t->q[i], i, ctx, features);
    }
}

static void tdev_start(TDev *t)
{
    for (unsigned i = 0; i < t->nvqs; i++) {
        tq_start(&t->q[i]);
    }
}

static void tdev_new(TDev *t, const TConf *c)
{
    tdev_init(t, c);
    tdev_start(t);
}

/* The usual device: one request queue, LUN 0 on a fast null node. */
/* LUN 0 on a fast null node; the rest of the configuration from c. */
static void tdev_new_lun0_conf(TDev *t, TConf c)
{
    static const TLun luns[] = { { 0, FAST_NODE } };

    c.luns = luns;
    c.nluns = 1;
    tdev_new(t, &c);
}

static void tdev_new_lun0(TDev *t)
{
    tdev_new_lun0_conf(t, (TConf) { .num_queues = 1 });
}

/*
 * num_queues request queues (in an IOThread or not) and nluns LUNs, 0 and
 * 1, whose reads take a while so that commands stay in flight.
 */
static void tdev_new_slow(TDev *t, unsigned num_queues, unsigned nluns,
                          bool iothread)
{
    static const TLun luns[] = { { 0, SLOW_NODE }, { 1, SLOW_NODE } };
    TConf c = { .num_queues = num_queues, .iothread = iothread,
                .luns = luns, .nluns = nluns };

    g_assert(nluns <= G_N_ELEMENTS(luns));
    tdev_new(t, &c);
}

static void tdev_cleanup(TDev *t)
{
    for (unsigned i = 0; i < t->nvqs; i++) {
        lq_stop(&t->q[i].d);
    }
    virtio_scsi_free(t->vs);
    for (unsigned i = 0; i < t->nvqs; i++) {
        lq_cleanup(&t->q[i].d);
    }
    if (t->iot) {
        iothread_destroy(t->iot);
    }
    if (t->iot2) {
        iothread_destroy(t->iot2);
    }
    while (aio_poll(t->ctx, false)) {
        /* leftover BHs */
    }
    aio_context_unref(t->ctx);
    lmem_cleanup(&t->m);
}

static TQueue *reqq(TDev *t, unsigned i)
{
    return &t->q[VIRTIO_SCSI_VQ_REQUEST0 + i];
}

static int set_config_u32(TDev *t, uint32_t offset, uint32_t val)
{
    uint32_t le = htole32(val);

    return virtio_scsi_vu_ops.set_config(t->vs, (uint8_t *)&le, offset, 4);
}

/* ------------------------------------------------------------------------ */
/* Commands                                                                  */

static void lun_addr(uint8_t *lun, unsigned target, unsigned n)
{
    memset(lun, 0, VIRTIO_SCSI_LUN_BYTES);
    lun[0] = 1;
    lun[1] = (uint8_t)target;
    lun[2] = 0x40 | (uint8_t)(n >> 8);
    lun[3] = (uint8_t)n;
}

/* The device-readable head: request header and a CDB of cdb_size. */
static uint64_t cmd_head(TDev *t, const uint8_t *lun, uint64_t tag,
                         const uint8_t *cdb, size_t cdb_len)
{
    uint8_t buf[REQ_HDR + 256];
    VirtioScsiCmdReqHdr hdr;

    g_assert_cmpuint(cdb_len, <=, t->cdb_size);
    memset(&hdr, 0, sizeof(hdr));
    memcpy(hdr.lun, lun, VIRTIO_SCSI_LUN_BYTES);
    hdr.tag = htole64(tag);
    memset(buf, 0, sizeof(buf));
    memcpy(buf, &hdr, sizeof(hdr));
    memcpy(buf + REQ_HDR, cdb, cdb_len);
    return gbuf(t, buf, REQ_HDR + t->cdb_size);
}

/* Publish the chain b[0..n) as command c on q; resp_gpa/in_gpa say where
 * the response and the data-in went. */
static void cmd_publish(TCmd *c, TQueue *q, const VufSeg *b, unsigned n,
                        uint64_t resp_gpa, uint64_t in_gpa, uint32_t in_len,
                        bool kick)
{
    memset(c, 0, sizeof(*c));
    c->q = q;
    c->resp_gpa = resp_gpa;
    c->in_gpa = in_gpa;
    c->in_len = in_len;
    c->head = lq_add_chain(&q->d, b, n);
    tq_publish(q, c->head, kick);
}

/*
 * Send cdb to lun on request queue qi: data-out out[0..out_len) in one
 * descriptor, then the response and sense in one, and in_len bytes of
 * data-in in another.
 */
static void cmd_send_ex(TDev *t, TCmd *c, unsigned qi, const uint8_t *lun,
                        uint64_t tag, const uint8_t *cdb, size_t cdb_len,
                        const void *out, size_t out_len, size_t in_len,
                        bool kick)
{
    VufSeg b[4];
    unsigned n = 0;
    uint64_t resp, in = 0;

    b[n++] = (VufSeg){ cmd_head(t, lun, tag, cdb, cdb_len),
                     REQ_HDR + t->cdb_size, false };
    if (out_len) {
        b[n++] = (VufSeg){ gbuf(t, out, out_len), out_len, false };
    }
    resp = gbuf(t, NULL, RESP_HDR + t->sense_size);
    b[n++] = (VufSeg){ resp, RESP_HDR + t->sense_size, true };
    if (in_len) {
        in = gbuf(t, NULL, in_len);
        b[n++] = (VufSeg){ in, in_len, true };
    }
    cmd_publish(c, reqq(t, qi), b, n, resp, in, in_len, kick);
}

static void cmd_send(TDev *t, TCmd *c, const uint8_t *lun, uint64_t tag,
                     const uint8_t *cdb, size_t cdb_len, const void *out,
                     size_t out_len, size_t in_len)
{
    cmd_send_ex(t, c, 0, lun, tag, cdb, cdb_len, out, out_len, in_len, true);
}

/* Wait for c's answer and decode the response header and sense. */
static void cmd_wait(TDev *t, TCmd *c)
{
    VirtioScsiCmdRespHdr hdr;

    c->used_len = tq_wait(c->q, c->head);
    memcpy(&hdr, gptr(t, c->resp_gpa), sizeof(hdr));
    c->response = hdr.response;
    c->status = hdr.status;
    c->sense_len = le32toh(hdr.sense_len);
    c->resid = le32toh(hdr.resid);
    memcpy(c->sense, gptr(t, c->resp_gpa + RESP_HDR),
           MIN(t->sense_size, (uint32_t)sizeof(c->sense)));
}

static void cmd_run(TDev *t, TCmd *c, const uint8_t *lun, const uint8_t *cdb,
                    size_t cdb_len, const void *out, size_t out_len,
                    size_t in_len)
{
    cmd_send(t, c, lun, 1, cdb, cdb_len, out, out_len, in_len);
    cmd_wait(t, c);
}

static const uint8_t *cmd_data(TDev *t, const TCmd *c)
{
    return gptr(t, c->in_gpa);
}

/* Fixed-format sense: key, asc, ascq. */
static void assert_sense(const TCmd *c, uint8_t key, uint8_t asc,
                         uint8_t ascq)
{
    g_assert_cmpuint(c->response, ==, VIRTIO_SCSI_S_OK);
    g_assert_cmphex(c->status, ==, SCSI_STATUS_CHECK_CONDITION);
    g_assert_cmpuint(c->sense_len, >=, 14);
    g_assert_cmphex(c->sense[0] & 0x7f, ==, SCSI_SENSE_FIXED_CURRENT);
    g_assert_cmphex(c->sense[2] & 0x0f, ==, key);
    g_assert_cmphex(c->sense[12], ==, asc);
    g_assert_cmphex(c->sense[13], ==, ascq);
}

static void assert_good(const TCmd *c)
{
    g_assert_cmpuint(c->response, ==, VIRTIO_SCSI_S_OK);
    g_assert_cmphex(c->status, ==, SCSI_STATUS_GOOD);
    g_assert_cmpuint(c->sense_len, ==, 0);
}

static const uint8_t cdb_inquiry[6] = { SCSI_OP_INQUIRY, 0, 0, 0, 96, 0 };
static const uint8_t cdb_tur[6] = { SCSI_OP_TEST_UNIT_READY };

static void cdb_rw10(uint8_t *cdb, uint8_t op, uint32_t lba, uint16_t blocks)
{
    memset(cdb, 0, 10);
    cdb[0] = op;
    cdb[2] = lba >> 24;
    cdb[3] = lba >> 16;
    cdb[4] = lba >> 8;
    cdb[5] = lba;
    cdb[7] = blocks >> 8;
    cdb[8] = blocks;
}

/*
 * What the tests on a slow device send: the addresses of LUN 0 and LUN 1
 * (lun1 may be NULL) and a one-block READ(10) at LBA 0.
 */
static void slow_read_addrs(uint8_t lun0[8], uint8_t lun1[8],
                            uint8_t cdb[10])
{
    lun_addr(lun0, 0, 0);
    if (lun1) {
        lun_addr(lun1, 0, 1);
    }
    cdb_rw10(cdb, SCSI_OP_READ_10, 0, 1);
}

static void cdb_report_luns(uint8_t *cdb, uint8_t select, uint32_t alloc)
{
    memset(cdb, 0, 12);
    cdb[0] = SCSI_OP_REPORT_LUNS;
    cdb[2] = select;
    cdb[6] = alloc >> 24;
    cdb[7] = alloc >> 16;
    cdb[8] = alloc >> 8;
    cdb[9] = alloc;
}

/* ------------------------------------------------------------------------ */
/* Control and event queue requests                                         */

static TQueue *ctrlq(TDev *t)
{
    return &t->q[VIRTIO_SCSI_VQ_CONTROL];
}

static TQueue *eventq(TDev *t)
{
    return &t->q[VIRTIO_SCSI_VQ_EVENT];
}

typedef struct TTmf {
    uint16_t head;
    uint64_t resp_gpa;
} TTmf;

static void tmf_send(TDev *t, TTmf *m, uint32_t subtype, const uint8_t *lun,
                     uint64_t tag)
{
    VirtioScsiCtrlTmfReq req;
    VufSeg b[2];

    memset(&req, 0, sizeof(req));
    req.type = htole32(VIRTIO_SCSI_T_TMF);
    req.subtype = htole32(subtype);
    memcpy(req.lun, lun, VIRTIO_SCSI_LUN_BYTES);
    req.tag = htole64(tag);
    b[0] = (VufSeg){ gbuf(t, &req, sizeof(req)), sizeof(req), false };
    m->resp_gpa = gbuf(t, NULL, 1);
    b[1] = (VufSeg){ m->resp_gpa, 1, true };
    m->head = lq_add_chain(&ctrlq(t)->d, b, 2);
    tq_publish(ctrlq(t), m->head, true);
}

/* Wait for the TMF's answer: its response byte. */
static uint8_t tmf_wait(TDev *t, TTmf *m)
{
    g_assert_cmpuint(tq_wait(ctrlq(t), m->head), ==, 1);
    return *(uint8_t *)gptr(t, m->resp_gpa);
}

static uint8_t tmf_run(TDev *t, uint32_t subtype, const uint8_t *lun,
                       uint64_t tag)
{
    TTmf m;

    tmf_send(t, &m, subtype, lun, tag);
    return tmf_wait(t, &m);
}

/* Give the device an event buffer of len bytes; returns its head. */
static uint16_t event_buf_post(TDev *t, uint32_t len, uint64_t *gpa)
{
    VufSeg b = { gbuf(t, NULL, len), len, true };
    uint16_t head = lq_add_chain(&eventq(t)->d, &b, 1);

    *gpa = b.gpa;
    tq_publish(eventq(t), head, true);
    /* Let the device pop it. */
    while (aio_poll(t->ctx, false)) {
        /* nothing */
    }
    return head;
}

/* ------------------------------------------------------------------------ */
/* Configuration                                                             */

static void test_config(void)
{
    static const TLun luns[] = { { 0, FAST_NODE } };
    TConf c = { .num_queues = 3, .luns = luns, .nluns = 1 };
    VirtioScsiConf bad_queues = { .num_queues = 0 };
    VirtioScsiConf too_many = { .num_queues = 65 };
    VirtioScsiConf bad_size = { .num_queues = 1, .queue_size = 100 };
    VirtioScsiConfig cfg;
    uint32_t both[2] = { htole32(64), htole32(16) };
    uint64_t f;
    Error *err = NULL;
    TDev t;

    g_assert_null(virtio_scsi_new(&bad_queues, &err));
    g_assert_nonnull(err);
    g_clear_error(&err);
    g_assert_null(virtio_scsi_new(&too_many, &err));
    g_clear_error(&err);
    g_assert_null(virtio_scsi_new(&bad_size, &err));
    g_clear_error(&err);

    tdev_init(&t, &c);
    f = virtio_scsi_vu_ops.get_features(t.vs);
    g_assert_true(f & (1ull << VIRTIO_SCSI_F_HOTPLUG));
    g_assert_true(f & (1ull << VIRTIO_SCSI_F_CHANGE));
    g_assert_false(f & (1ull << VIRTIO_SCSI_F_INOUT));
    g_assert_false(f & (1ull << VIRTIO_SCSI_F_T10_PI));

    g_assert_cmpuint(virtio_scsi_vu_ops.get_config(t.vs, (uint8_t *)&cfg,
                                                   sizeof(cfg)), ==, 36);
    g_assert_cmpuint(le32toh(cfg.num_queues), ==, 3);
    g_assert_cmpuint(le32toh(cfg.seg_max), ==, VIRTQUEUE_MAX_SEGS - 2);
    g_assert_cmpuint(le32toh(cfg.max_sectors), ==, 0xffff);
    g_assert_cmpuint(le32toh(cfg.cmd_per_lun), ==, 256);
    g_assert_cmpuint(le32toh(cfg.event_info_size), ==, 16);
    g_assert_cmpuint(le32toh(cfg.sense_size), ==, 96);
    g_assert_cmpuint(le32toh(cfg.cdb_size), ==, 32);
    g_assert_cmpuint(le16toh(cfg.max_channel), ==, 0);
    g_assert_cmpuint(le16toh(cfg.max_target), ==, 0);
    g_assert_cmpuint(le32toh(cfg.max_lun), ==, 16383);

    /* Only sense_size and cdb_size, whole fields, sane values. */
    g_assert_cmpint(set_config_u32(&t, 0, 4), ==, -EINVAL);
    g_assert_cmpint(set_config_u32(&t, 16, 16), ==, -EINVAL);
    g_assert_cmpint(set_config_u32(&t, 22, 16), ==, -EINVAL);
    g_assert_cmpint(set_config_u32(&t, 28, 0), ==, -EINVAL);
    g_assert_cmpint(set_config_u32(&t, 20, 257), ==, -EINVAL);
    g_assert_cmpint(set_config_u32(&t, 24, 5), ==, -EINVAL);
    g_assert_cmpint(set_config_u32(&t, 24, 257), ==, -EINVAL);
    g_assert_cmpint(virtio_scsi_vu_ops.set_config(t.vs, (uint8_t *)both, 20,
                                                  2), ==, -EINVAL);
    virtio_scsi_vu_ops.get_config(t.vs, (uint8_t *)&cfg, sizeof(cfg));
    g_assert_cmpuint(le32toh(cfg.sense_size), ==, 96);
    g_assert_cmpuint(le32toh(cfg.cdb_size), ==, 32);

    g_assert_cmpint(virtio_scsi_vu_ops.set_config(t.vs, (uint8_t *)both, 20,
                                                  8), ==, 0);
    virtio_scsi_vu_ops.get_config(t.vs, (uint8_t *)&cfg, sizeof(cfg));
    g_assert_cmpuint(le32toh(cfg.sense_size), ==, 64);
    g_assert_cmpuint(le32toh(cfg.cdb_size), ==, 16);
    g_assert_cmpint(set_config_u32(&t, 20, 0), ==, 0);
    g_assert_cmpint(set_config_u32(&t, 24, 256), ==, 0);
    virtio_scsi_vu_ops.get_config(t.vs, (uint8_t *)&cfg, sizeof(cfg));
    g_assert_cmpuint(le32toh(cfg.sense_size), ==, 0);
    g_assert_cmpuint(le32toh(cfg.cdb_size), ==, 256);

    /* LUNs: range, duplicates, lookup. */
    g_assert_false(virtio_scsi_add_lun(t.vs, 16384,
                                       virtio_scsi_get_lun(t.vs, 0), &err));
    g_assert_nonnull(err);
    g_clear_error(&err);
    g_assert_false(virtio_scsi_add_lun(t.vs, 0, virtio_scsi_get_lun(t.vs, 0),
                                       &err));
    g_clear_error(&err);
    g_assert_nonnull(virtio_scsi_get_lun(t.vs, 0));
    g_assert_null(virtio_scsi_get_lun(t.vs, 1));
    tdev_cleanup(&t);
}

/* ------------------------------------------------------------------------ */
/* INQUIRY, REPORT LUNS, missing LUNs                                       */

static void test_inquiry(void)
{
    uint8_t lun[8], evpd[6] = { SCSI_OP_INQUIRY, 1, 0x80, 0, 96, 0 };
    TCmd cmd;
    TDev t;

    tdev_new_lun0(&t);
    lun_addr(lun, 0, 0);
    cmd_run(&t, &cmd, lun, cdb_inquiry, 6, NULL, 0, 96);
    assert_good(&cmd);
    g_assert_cmphex(cmd_data(&t, &cmd)[0], ==, SCSI_PDT_DIRECT_ACCESS);
    g_assert_cmpuint(cmd.resid, ==, 96 - 36);
    g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + SENSE_DEFAULT + 36);

    /* A LUN that does not exist: qualifier 3, type 1Fh, a real version. */
    lun_addr(lun, 0, 5);
    cmd_run(&t, &cmd, lun, cdb_inquiry, 6, NULL, 0, 96);
    assert_good(&cmd);
    g_assert_cmphex(cmd_data(&t, &cmd)[0], ==, SCSI_INQUIRY_NO_LUN);
    g_assert_cmphex(cmd_data(&t, &cmd)[2], >=, 5);
    g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + SENSE_DEFAULT + 36);
    g_assert_cmpuint(cmd.resid, ==, 96 - 36);

    /* ... also for a VPD page: a header, nothing else. */
    cmd_run(&t, &cmd, lun, evpd, 6, NULL, 0, 96);
    assert_good(&cmd);
    g_assert_cmphex(cmd_data(&t, &cmd)[0], ==, SCSI_INQUIRY_NO_LUN);
    g_assert_cmphex(cmd_data(&t, &cmd)[1], ==, 0x80);
    g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + SENSE_DEFAULT + 4);

    /* An address format we never give out is a missing LUN too. */
    lun[2] = 0x80;
    cmd_run(&t, &cmd, lun, cdb_inquiry, 6, NULL, 0, 96);
    assert_good(&cmd);
    g_assert_cmphex(cmd_data(&t, &cmd)[0], ==, SCSI_INQUIRY_NO_LUN);

    /* Allocation length truncates. */
    lun_addr(lun, 0, 0);
    {
        uint8_t short_inq[6] = { SCSI_OP_INQUIRY, 0, 0, 0, 5, 0 };

        cmd_run(&t, &cmd, lun, short_inq, 6, NULL, 0, 96);
        assert_good(&cmd);
        g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + SENSE_DEFAULT + 5);
        g_assert_cmphex(cmd_data(&t, &cmd)[5], ==, 0xee);
    }
    tdev_cleanup(&t);
}

/* Decode the REPORT LUNS list at p (its 8-byte header first). */
static unsigned parse_report_luns(const uint8_t *p, unsigned *out,
                                  unsigned max)
{
    uint32_t len = (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3];
    unsigned n = len / 8;

    g_assert_cmpuint(len % 8, ==, 0);
    g_assert_cmpuint(n, <=, max);
    for (unsigned i = 0; i < n; i++) {
        const uint8_t *e = p + 8 + 8 * i;

        g_assert_cmphex(e[2] | e[3] | e[4] | e[5] | e[6] | e[7], ==, 0);
        if ((e[0] & 0xc0) == 0x40) {
            out[i] = (unsigned)(e[0] & 0x3f) << 8 | e[1];
        } else {
            g_assert_cmphex(e[0], ==, 0);
            out[i] = e[1];
        }
    }
    return n;
}

static void test_report_luns(void)
{
    static const TLun luns[] = {
        { 300, FAST_NODE }, { 3, FAST_NODE }, { 0, FAST_NODE },
    };
    TConf c = { .num_queues = 1, .luns = luns, .nluns = 3 };
    uint8_t lun[8], cdb[12];
    uint8_t wlun[8] = { 1, 0, 0xc1, 0x01, 0, 0, 0, 0 };
    const uint8_t *targets[3];
    unsigned got[8];
    TCmd cmd;
    TDev t;

    tdev_new(&t, &c);
    cdb_report_luns(cdb, 0, 4096);

    /* The same list through LUN 0, a missing LUN and the well-known LUN. */
    lun_addr(lun, 0, 0);
    targets[0] = lun;
    {
        uint8_t missing[8];

        lun_addr(missing, 0, 7);
        targets[1] = missing;
        targets[2] = wlun;
        for (unsigned i = 0; i < 3; i++) {
            cmd_run(&t, &cmd, targets[i], cdb, 12, NULL, 0, 4096);
            assert_good(&cmd);
            g_assert_cmpuint(parse_report_luns(cmd_data(&t, &cmd), got, 8),
                             ==, 3);
            g_assert_cmpuint(got[0], ==, 0);
            g_assert_cmpuint(got[1], ==, 3);
            g_assert_cmpuint(got[2], ==, 300);
            g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + SENSE_DEFAULT + 32);
            g_assert_cmpuint(cmd.resid, ==, 4096 - 32);
        }
    }

    /* Truncated by the allocation length. */
    cdb_report_luns(cdb, 0, 16);
    cmd_run(&t, &cmd, lun, cdb, 12, NULL, 0, 4096);
    assert_good(&cmd);
    g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + SENSE_DEFAULT + 16);

    /* Well-known LUNs only: none listed.  A bad SELECT REPORT: error. */
    cdb_report_luns(cdb, 1, 4096);
    cmd_run(&t, &cmd, lun, cdb, 12, NULL, 0, 4096);
    assert_good(&cmd);
    g_assert_cmpuint(parse_report_luns(cmd_data(&t, &cmd), got, 8), ==, 0);
    cdb_report_luns(cdb, 0x42, 4096);
    cmd_run(&t, &cmd, lun, cdb, 12, NULL, 0, 4096);
    assert_sense(&cmd, SCSI_SENSE_ILLEGAL_REQUEST,
                 SCSI_ASC_INVALID_FIELD_IN_CDB, 0);
    tdev_cleanup(&t);
}

/* Without LUN 0 the target still answers for it (the guest's scan). */
static void test_no_lun0(void)
{
    static const TLun luns[] = { { 3, FAST_NODE } };
    TConf c = { .num_queues = 1, .luns = luns, .nluns = 1 };
    uint8_t lun[8], cdb[12];
    unsigned got[4];
    TCmd cmd;
    TDev t;

    tdev_new(&t, &c);
    lun_addr(lun, 0, 0);
    cmd_run(&t, &cmd, lun, cdb_inquiry, 6, NULL, 0, 96);
    assert_good(&cmd);
    g_assert_cmphex(cmd_data(&t, &cmd)[0], ==, SCSI_INQUIRY_NO_LUN);
    cdb_report_luns(cdb, 0, 256);
    cmd_run(&t, &cmd, lun, cdb, 12, NULL, 0, 256);
    assert_good(&cmd);
    g_assert_cmpuint(parse_report_luns(cmd_data(&t, &cmd), got, 4), ==, 1);
    g_assert_cmpuint(got[0], ==, 3);
    lun_addr(lun, 0, 3);
    cmd_run(&t, &cmd, lun, cdb_inquiry, 6, NULL, 0, 96);
    assert_good(&cmd);
    g_assert_cmphex(cmd_data(&t, &cmd)[0], ==, SCSI_PDT_DIRECT_ACCESS);
    tdev_cleanup(&t);
}

static void test_missing_lun(void)
{
    uint8_t lun[8], cdb[10];
    uint8_t req_sense[6] = { SCSI_OP_REQUEST_SENSE, 0, 0, 0, 252, 0 };
    TCmd cmd;
    TDev t;

    tdev_new_lun0(&t);
    lun_addr(lun, 0, 9);
    cmd_run(&t, &cmd, lun, cdb_tur, 6, NULL, 0, 0);
    assert_sense(&cmd, SCSI_SENSE_ILLEGAL_REQUEST,
                 SCSI_ASC_LUN_NOT_SUPPORTED, SCSI_ASCQ_LUN_NOT_SUPPORTED);
    g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + SENSE_DEFAULT);

    cdb_rw10(cdb, SCSI_OP_READ_10, 0, 1);
    cmd_run(&t, &cmd, lun, cdb, 10, NULL, 0, 512);
    assert_sense(&cmd, SCSI_SENSE_ILLEGAL_REQUEST,
                 SCSI_ASC_LUN_NOT_SUPPORTED, SCSI_ASCQ_LUN_NOT_SUPPORTED);
    g_assert_cmpuint(cmd.resid, ==, 512);

    /* REQUEST SENSE returns the reason as data. */
    cmd_run(&t, &cmd, lun, req_sense, 6, NULL, 0, 252);
    assert_good(&cmd);
    g_assert_cmphex(cmd_data(&t, &cmd)[0] & 0x7f, ==,
                    SCSI_SENSE_FIXED_CURRENT);
    g_assert_cmphex(cmd_data(&t, &cmd)[2] & 0xf, ==,
                    SCSI_SENSE_ILLEGAL_REQUEST);
    g_assert_cmphex(cmd_data(&t, &cmd)[12], ==, SCSI_ASC_LUN_NOT_SUPPORTED);
    g_assert_cmpuint(cmd.used_len, >=, RESP_HDR + SENSE_DEFAULT + 14);
    tdev_cleanup(&t);
}

static void test_bad_target(void)
{
    uint8_t lun[8];
    TCmd cmd;
    TDev t;

    tdev_new_lun0(&t);
    lun_addr(lun, 1, 0);
    cmd_run(&t, &cmd, lun, cdb_inquiry, 6, NULL, 0, 96);
    g_assert_cmpuint(cmd.response, ==, VIRTIO_SCSI_S_BAD_TARGET);
    g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + SENSE_DEFAULT);
    g_assert_cmpuint(cmd.resid, ==, 96);
    g_assert_cmphex(cmd_data(&t, &cmd)[0], ==, 0xee);

    lun_addr(lun, 0, 0);
    lun[0] = 0;
    cmd_run(&t, &cmd, lun, cdb_tur, 6, NULL, 0, 0);
    g_assert_cmpuint(cmd.response, ==, VIRTIO_SCSI_S_BAD_TARGET);
    tdev_cleanup(&t);
}

/* ------------------------------------------------------------------------ */
/* Data                                                                      */

static void test_read_write(void)
{
    char *path = NULL;
    int fd = g_file_open_tmp("test-virtio-scsi-XXXXXX", &path, NULL);
    char *node;
    TLun luns[1];
    TConf c = { .num_queues = 2, .luns = luns, .nluns = 1 };
    uint8_t lun[8], cdb[10], *data = g_malloc(4096), *back = g_malloc(4096);
    uint64_t resp, in_a, in_b;
    VufSeg b[6];
    TCmd cmd;
    TDev t;

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, 1 << 20), ==, 0);
    node = g_strdup_printf("driver=file,filename=%s", path);
    luns[0] = (TLun){ 0, node };
    tdev_new(&t, &c);
    lun_addr(lun, 0, 0);
    fill_random(data, 4096);

    /* WRITE(10) of 8 blocks at LBA 10, the data in three descriptors. */
    cdb_rw10(cdb, SCSI_OP_WRITE_10, 10, 8);
    b[0] = (VufSeg){ cmd_head(&t, lun, 1, cdb, 10), REQ_HDR + 32, false };
    b[1] = (VufSeg){ gbuf(&t, data, 1000), 1000, false };
    b[2] = (VufSeg){ gbuf(&t, data + 1000, 2000), 2000, false };
    b[3] = (VufSeg){ gbuf(&t, data + 3000, 1096), 1096, false };
    resp = gbuf(&t, NULL, RESP_HDR + SENSE_DEFAULT);
    b[4] = (VufSeg){ resp, RESP_HDR + SENSE_DEFAULT, true };
    cmd_publish(&cmd, reqq(&t, 1), b, 5, resp, 0, 0, true);
    cmd_wait(&t, &cmd);
    assert_good(&cmd);
    g_assert_cmpuint(cmd.resid, ==, 0);
    g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + SENSE_DEFAULT);
    g_assert_cmpint(pread(fd, back, 4096, 10 * 512), ==, 4096);
    assert_same(back, data, 4096, 10 * 512, "file after WRITE(10)");

    /* READ(10) back: response, sense and the first 100 bytes of data in
     * one descriptor, the rest in another. */
    cdb_rw10(cdb, SCSI_OP_READ_10, 10, 8);
    b[0] = (VufSeg){ cmd_head(&t, lun, 2, cdb, 10), REQ_HDR + 32, false };
    in_a = gbuf(&t, NULL, RESP_HDR + SENSE_DEFAULT + 100);
    in_b = gbuf(&t, NULL, 4096 - 100);
    b[1] = (VufSeg){ in_a, RESP_HDR + SENSE_DEFAULT + 100, true };
    b[2] = (VufSeg){ in_b, 4096 - 100, true };
    cmd_publish(&cmd, reqq(&t, 0), b, 3, in_a, 0, 0, true);
    cmd_wait(&t, &cmd);
    assert_good(&cmd);
    g_assert_cmpuint(cmd.resid, ==, 0);
    g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + SENSE_DEFAULT + 4096);
    assert_same(gptr(&t, in_a + RESP_HDR + SENSE_DEFAULT), data, 100, 0,
                "READ(10) first descriptor");
    assert_same(gptr(&t, in_b), data + 100, 4096 - 100, 100,
                "READ(10) second descriptor");

    /* A buffer larger than the transfer: the rest is the residual. */
    cdb_rw10(cdb, SCSI_OP_READ_10, 10, 1);
    cmd_run(&t, &cmd, lun, cdb, 10, NULL, 0, 2048);
    assert_good(&cmd);
    g_assert_cmpuint(cmd.resid, ==, 2048 - 512);
    g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + SENSE_DEFAULT + 512);
    assert_same(cmd_data(&t, &cmd), data, 512, 0, "short READ(10)");

    tdev_cleanup(&t);
    close(fd);
    unlink(path);
    g_free(path);
    g_free(node);
    g_free(data);
    g_free(back);
}

static void test_overrun(void)
{
    uint8_t lun[8], cdb[10], data[512] = { 0 };
    TCmd cmd;
    TDev t;

    tdev_new_lun0(&t);
    lun_addr(lun, 0, 0);
    cdb_rw10(cdb, SCSI_OP_READ_10, 0, 8);
    cmd_run(&t, &cmd, lun, cdb, 10, NULL, 0, 512);
    g_assert_cmpuint(cmd.response, ==, VIRTIO_SCSI_S_OVERRUN);
    g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + SENSE_DEFAULT);
    g_assert_cmpuint(cmd.resid, ==, 512);

    cdb_rw10(cdb, SCSI_OP_WRITE_10, 0, 8);
    cmd_run(&t, &cmd, lun, cdb, 10, data, sizeof(data), 0);
    g_assert_cmpuint(cmd.response, ==, VIRTIO_SCSI_S_OVERRUN);
    g_assert_cmpuint(cmd.resid, ==, 512);
    tdev_cleanup(&t);
}

/* ------------------------------------------------------------------------ */
/* Malformed chains                                                          */

static void test_malformed(void)
{
    uint8_t lun[8], cdb[10], data[512] = { 0 };
    uint64_t head, resp, cdb_a, cdb_b;
    uint8_t raw[REQ_HDR + 32];
    VufSeg b[4];
    TCmd cmd;
    TDev t;

    tdev_new_lun0(&t);
    lun_addr(lun, 0, 0);

    /* A request shorter than header + CDB: FAILURE. */
    b[0] = (VufSeg){ cmd_head(&t, lun, 1, cdb_tur, 6), REQ_HDR + 16, false };
    resp = gbuf(&t, NULL, RESP_HDR + SENSE_DEFAULT);
    b[1] = (VufSeg){ resp, RESP_HDR + SENSE_DEFAULT, true };
    cmd_publish(&cmd, reqq(&t, 0), b, 2, resp, 0, 0, true);
    cmd_wait(&t, &cmd);
    g_assert_cmpuint(cmd.response, ==, VIRTIO_SCSI_S_FAILURE);
    g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + SENSE_DEFAULT);

    /* A response part without room for the sense: FAILURE, with the
     * header and as much of the (empty) sense area as fits. */
    b[0].len = REQ_HDR + 32;
    resp = gbuf(&t, NULL, RESP_HDR + 10);
    b[1] = (VufSeg){ resp, RESP_HDR + 10, true };
    cmd_publish(&cmd, reqq(&t, 0), b, 2, resp, 0, 0, true);
    cmd_wait(&t, &cmd);
    g_assert_cmpuint(cmd.response, ==, VIRTIO_SCSI_S_FAILURE);
    g_assert_cmpuint(cmd.sense_len, ==, 0);
    g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + 10);

    /* Data in both directions (no VIRTIO_SCSI_F_INOUT): FAILURE. */
    cdb_rw10(cdb, SCSI_OP_READ_10, 0, 1);
    cmd_send(&t, &cmd, lun, 1, cdb, 10, data, sizeof(data), 512);
    cmd_wait(&t, &cmd);
    g_assert_cmpuint(cmd.response, ==, VIRTIO_SCSI_S_FAILURE);
    g_assert_cmphex(cmd_data(&t, &cmd)[0], ==, 0xee);

    /* Data in the direction the command does not use: FAILURE. */
    cdb_rw10(cdb, SCSI_OP_WRITE_10, 0, 1);
    cmd_run(&t, &cmd, lun, cdb, 10, NULL, 0, 512);
    g_assert_cmpuint(cmd.response, ==, VIRTIO_SCSI_S_FAILURE);
    cdb_rw10(cdb, SCSI_OP_READ_10, 0, 1);
    cmd_run(&t, &cmd, lun, cdb, 10, data, sizeof(data), 0);
    g_assert_cmpuint(cmd.response, ==, VIRTIO_SCSI_S_FAILURE);

    /* Header and CDB split across three descriptors (the CDB in two),
     * the sense and data-in in one: a normal command. */
    memset(raw, 0, sizeof(raw));
    memcpy(raw, lun, 8);
    memcpy(raw + REQ_HDR, cdb_inquiry, 6);
    head = gbuf(&t, raw, REQ_HDR);
    cdb_a = gbuf(&t, raw + REQ_HDR, 3);
    cdb_b = gbuf(&t, raw + REQ_HDR + 3, 29);
    b[0] = (VufSeg){ head, REQ_HDR, false };
    b[1] = (VufSeg){ cdb_a, 3, false };
    b[2] = (VufSeg){ cdb_b, 29, false };
    resp = gbuf(&t, NULL, RESP_HDR + SENSE_DEFAULT + 96);
    b[3] = (VufSeg){ resp, RESP_HDR + SENSE_DEFAULT + 96, true };
    cmd_publish(&cmd, reqq(&t, 0), b, 4, resp, resp + RESP_HDR +
                SENSE_DEFAULT, 96, true);
    cmd_wait(&t, &cmd);
    assert_good(&cmd);
    g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + SENSE_DEFAULT + 36);
    g_assert_cmphex(cmd_data(&t, &cmd)[0], ==, SCSI_PDT_DIRECT_ACCESS);
    g_assert_cmphex(cmd_data(&t, &cmd)[2], !=, 0xee);

    g_assert_false(virtqueue_is_broken(reqq(&t, 0)->d.vq));
    tdev_cleanup(&t);
}

/*
 * Chains whose device-writable part cannot hold the response (a command's
 * 12-byte header, a TMF's or AN's response, an event): no answer would be
 * honest, so the queue breaks; it serves nothing more, and the device's
 * other queues keep working.
 */
static void test_no_room_for_response(void)
{
    static const struct {
        unsigned vq;
        uint32_t type;           /* control requests: VIRTIO_SCSI_T_* */
        uint32_t in_len;         /* the device-writable bytes */
        const char *why;
    } cases[] = {
        { VIRTIO_SCSI_VQ_REQUEST0, 0, 0, "no room for the 12-byte "
          "response header" },
        { VIRTIO_SCSI_VQ_REQUEST0, 0, 8, "has 8 device-writable bytes" },
        { VIRTIO_SCSI_VQ_REQUEST0, 0, 11, "has 11 device-writable bytes" },
        { VIRTIO_SCSI_VQ_CONTROL, VIRTIO_SCSI_T_TMF, 0, "task management "
          "request at head * no room for the 1-byte response" },
        { VIRTIO_SCSI_VQ_CONTROL, VIRTIO_SCSI_T_AN_QUERY, 0,
          "no room for the 5-byte response" },
        { VIRTIO_SCSI_VQ_CONTROL, VIRTIO_SCSI_T_AN_SUBSCRIBE, 4,
          "asynchronous notification request at head * has 4" },
        { VIRTIO_SCSI_VQ_EVENT, 0, 8, "has 8 device-writable bytes, less "
          "than an event (16)" },
        { VIRTIO_SCSI_VQ_EVENT, 0, 15, "has 15 device-writable bytes" },
    };
    uint8_t lun[8];

    lun_addr(lun, 0, 0);
    for (unsigned i = 0; i < G_N_ELEMENTS(cases); i++) {
        VirtioScsiCtrlTmfReq tmf = { .type = htole32(cases[i].type) };
        VirtioScsiCtrlAnReq an = { .type = htole32(cases[i].type) };
        TQueue *q;
        uint64_t gpa;
        uint16_t head;
        VufSeg b[2];
        unsigned n = 0;
        TCmd cmd;
        TTmf m;
        TDev t;

        tdev_new_lun0(&t);
        q = &t.q[cases[i].vq];
        memcpy(tmf.lun, lun, sizeof(lun));
        memcpy(an.lun, lun, sizeof(lun));
        if (cases[i].vq == VIRTIO_SCSI_VQ_REQUEST0) {
            b[n++] = (VufSeg){ cmd_head(&t, lun, 1, cdb_tur, 6),
                               REQ_HDR + 32, false };
        } else if (cases[i].type == VIRTIO_SCSI_T_TMF) {
            b[n++] = (VufSeg){ gbuf(&t, &tmf, sizeof(tmf)), sizeof(tmf),
                               false };
        } else if (cases[i].vq == VIRTIO_SCSI_VQ_CONTROL) {
            b[n++] = (VufSeg){ gbuf(&t, &an, sizeof(an)), sizeof(an), false };
        }
        if (cases[i].in_len) {
            gpa = gbuf(&t, NULL, cases[i].in_len);
            b[n++] = (VufSeg){ gpa, cases[i].in_len, true };
        }
        tq_expect_broken(q, b, n, cases[i].why);
        if (cases[i].in_len) {
            /* Nothing written where the driver would look. */
            for (uint32_t k = 0; k < cases[i].in_len; k++) {
                g_assert_cmphex(((uint8_t *)gptr(&t, gpa))[k], ==, 0xee);
            }
        }

        /* A good request on the broken queue is not served. */
        if (cases[i].vq == VIRTIO_SCSI_VQ_REQUEST0) {
            cmd_send(&t, &cmd, lun, 2, cdb_tur, 6, NULL, 0, 0);
            head = cmd.head;
        } else if (cases[i].vq == VIRTIO_SCSI_VQ_CONTROL) {
            tmf_send(&t, &m, VIRTIO_SCSI_T_TMF_QUERY_TASK_SET, lun, 0);
            head = m.head;
        } else {
            head = event_buf_post(&t, 16, &gpa);
            virtio_scsi_capacity_changed(t.vs, 0);
        }
        tq_assert_pending(q, head, 20);

        /* The other queues serve. */
        if (cases[i].vq != VIRTIO_SCSI_VQ_REQUEST0) {
            cmd_run(&t, &cmd, lun, cdb_tur, 6, NULL, 0, 0);
            g_assert_cmpuint(cmd.response, ==, VIRTIO_SCSI_S_OK);
        }
        if (cases[i].vq != VIRTIO_SCSI_VQ_CONTROL) {
            g_assert_cmpuint(tmf_run(&t, VIRTIO_SCSI_T_TMF_QUERY_TASK_SET,
                                     lun, 0), ==,
                             VIRTIO_SCSI_S_FUNCTION_COMPLETE);
        }
        for (unsigned j = 0; j < t.nvqs; j++) {
            g_assert_cmpint(virtqueue_is_broken(t.q[j].d.vq), ==,
                            j == cases[i].vq);
        }
        tdev_cleanup(&t);
    }
}

/* The driver sets sense_size and cdb_size: the layout follows. */
static void test_config_sizes(void)
{
    uint8_t lun[8], cdb16[16] = { SCSI_OP_INQUIRY, 0, 0, 0, 96, 0 };
    TCmd cmd;
    TDev t;

    tdev_new_lun0(&t);
    g_assert_cmpint(set_config_u32(&t, 20, 40), ==, 0);
    g_assert_cmpint(set_config_u32(&t, 24, 16), ==, 0);
    t.sense_size = 40;
    t.cdb_size = 16;
    lun_addr(lun, 0, 0);
    cmd_run(&t, &cmd, lun, cdb16, 16, NULL, 0, 96);
    assert_good(&cmd);
    g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + 40 + 36);
    g_assert_cmphex(cmd_data(&t, &cmd)[0], ==, SCSI_PDT_DIRECT_ACCESS);
    g_assert_cmphex(cmd_data(&t, &cmd)[2], !=, 0xee);

    /* Sense within 40 bytes, the sense area written in full. */
    lun_addr(lun, 0, 9);
    cmd_run(&t, &cmd, lun, cdb_tur, 6, NULL, 0, 0);
    assert_sense(&cmd, SCSI_SENSE_ILLEGAL_REQUEST,
                 SCSI_ASC_LUN_NOT_SUPPORTED, SCSI_ASCQ_LUN_NOT_SUPPORTED);
    g_assert_cmpuint(cmd.sense_len, <=, 40);
    g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + 40);
    g_assert_cmphex(cmd.sense[39], ==, 0);

    /* A sense area smaller than the sense: truncated. */
    g_assert_cmpint(set_config_u32(&t, 20, 8), ==, 0);
    t.sense_size = 8;
    cmd_run(&t, &cmd, lun, cdb_tur, 6, NULL, 0, 0);
    g_assert_cmphex(cmd.status, ==, SCSI_STATUS_CHECK_CONDITION);
    g_assert_cmpuint(cmd.sense_len, ==, 8);
    g_assert_cmpuint(cmd.used_len, ==, RESP_HDR + 8);
    tdev_cleanup(&t);
}

/* ------------------------------------------------------------------------ */
/* Task management                                                           */

/* ABORT TASK on a command in flight: it ends ABORTED, then the TMF. */
static void run_abort_task(bool iothread, bool kick_cmd)
{
    uint8_t lun0[8], lun1[8], cdb[10];
    TCmd victim, other, bystander;
    TTmf m;
    TDev t;

    tdev_new_slow(&t, 2, 2, iothread);
    slow_read_addrs(lun0, lun1, cdb);
    /* Without a kick the command is still in the ring when the TMF
     * arrives: the device must find it there. */
    cmd_send_ex(&t, &victim, 1, lun0, 0x1234, cdb, 10, NULL, 0, 512,
                kick_cmd);
    cmd_send_ex(&t, &other, 0, lun0, 0x9999, cdb, 10, NULL, 0, 512, true);
    /* Queue 1 gets no kick but the victim's (if any). */
    cmd_send_ex(&t, &bystander, 0, lun1, 0x1234, cdb, 10, NULL, 0, 512,
                true);
    if (kick_cmd) {
        tq_assert_pending(victim.q, victim.head, 20);
    }

    tmf_send(&t, &m, VIRTIO_SCSI_T_TMF_ABORT_TASK, lun0, 0x1234);
    tq_assert_pending(ctrlq(&t), m.head, 20);
    g_assert_cmpuint(tmf_wait(&t, &m), ==, VIRTIO_SCSI_S_FUNCTION_COMPLETE);
    g_assert_cmpuint(victim.q->used_len[victim.head], !=, NOT_USED);
    g_assert_cmpuint(victim.q->used_seq[victim.head], <=,
                     ctrlq(&t)->used_seq[m.head]);
    cmd_wait(&t, &victim);
    g_assert_cmpuint(victim.response, ==, VIRTIO_SCSI_S_ABORTED);
    g_assert_cmpuint(victim.resid, ==, 512);

    /* Another tag and the same tag at another LUN carry on. */
    cmd_wait(&t, &other);
    assert_good(&other);
    cmd_wait(&t, &bystander);
    assert_good(&bystander);
    tdev_cleanup(&t);
}

static void test_tmf_abort_task(void)
{
    run_abort_task(false, true);
}

static void test_tmf_abort_task_iothread(void)
{
    run_abort_task(true, true);
}

static void test_tmf_abort_task_in_ring(void)
{
    run_abort_task(false, false);
}

static void test_tmf_abort_task_in_ring_iothread(void)
{
    run_abort_task(true, false);
}

static void run_lun_reset(bool iothread, uint32_t subtype)
{
    bool nexus = subtype == VIRTIO_SCSI_T_TMF_I_T_NEXUS_RESET;
    uint8_t lun0[8], lun1[8], cdb[10];
    TCmd a, b, other, cmd;
    TTmf m;
    TDev t;

    tdev_new_slow(&t, 2, 2, iothread);
    slow_read_addrs(lun0, lun1, cdb);
    cmd_send_ex(&t, &a, 0, lun0, 1, cdb, 10, NULL, 0, 512, true);
    cmd_send_ex(&t, &b, 1, lun0, 2, cdb, 10, NULL, 0, 512, true);
    cmd_send_ex(&t, &other, 1, lun1, 3, cdb, 10, NULL, 0, 512, true);

    tmf_send(&t, &m, subtype, lun0, 0);
    g_assert_cmpuint(tmf_wait(&t, &m), ==, VIRTIO_SCSI_S_FUNCTION_COMPLETE);
    cmd_wait(&t, &a);
    cmd_wait(&t, &b);
    g_assert_cmpuint(a.response, ==, VIRTIO_SCSI_S_RESET);
    g_assert_cmpuint(b.response, ==, VIRTIO_SCSI_S_RESET);
    g_assert_cmpuint(a.q->used_seq[a.head], <=, ctrlq(&t)->used_seq[m.head]);
    g_assert_cmpuint(b.q->used_seq[b.head], <=, ctrlq(&t)->used_seq[m.head]);
    cmd_wait(&t, &other);
    if (nexus) {
        g_assert_cmpuint(other.response, ==, VIRTIO_SCSI_S_RESET);
    } else {
        assert_good(&other);
    }

    /* The reset unit attention, once; the other LUN's only for I_T. */
    cmd_run(&t, &cmd, lun0, cdb_tur, 6, NULL, 0, 0);
    assert_sense(&cmd, SCSI_SENSE_UNIT_ATTENTION, SCSI_ASC_RESET_OCCURRED,
                 SCSI_ASCQ_POWER_ON_RESET_OCCURRED);
    cmd_run(&t, &cmd, lun0, cdb_tur, 6, NULL, 0, 0);
    assert_good(&cmd);
    cmd_run(&t, &cmd, lun1, cdb_tur, 6, NULL, 0, 0);
    if (nexus) {
        assert_sense(&cmd, SCSI_SENSE_UNIT_ATTENTION,
                     SCSI_ASC_RESET_OCCURRED,
                     SCSI_ASCQ_POWER_ON_RESET_OCCURRED);
    } else {
        assert_good(&cmd);
    }
    tdev_cleanup(&t);
}

static void test_tmf_lun_reset(void)
{
    run_lun_reset(false, VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET);
}

static void test_tmf_lun_reset_iothread(void)
{
    run_lun_reset(true, VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET);
}

static void test_tmf_nexus_reset(void)
{
    run_lun_reset(true, VIRTIO_SCSI_T_TMF_I_T_NEXUS_RESET);
}

static void run_query_and_sets(bool iothread)
{
    uint8_t lun0[8], lun1[8], lun5[8], bad[8], cdb[10];
    TCmd a, b;
    TDev t;

    tdev_new_slow(&t, 2, 2, iothread);
    slow_read_addrs(lun0, lun1, cdb);
    lun_addr(lun5, 0, 5);
    lun_addr(bad, 2, 0);
    cmd_send_ex(&t, &a, 0, lun0, 7, cdb, 10, NULL, 0, 512, true);
    cmd_send_ex(&t, &b, 1, lun0, 8, cdb, 10, NULL, 0, 512, true);

    g_assert_cmpuint(tmf_run(&t, VIRTIO_SCSI_T_TMF_QUERY_TASK, lun0, 7), ==,
                     VIRTIO_SCSI_S_FUNCTION_SUCCEEDED);
    g_assert_cmpuint(tmf_run(&t, VIRTIO_SCSI_T_TMF_QUERY_TASK, lun0, 9), ==,
                     VIRTIO_SCSI_S_FUNCTION_COMPLETE);
    g_assert_cmpuint(tmf_run(&t, VIRTIO_SCSI_T_TMF_QUERY_TASK, lun1, 7), ==,
                     VIRTIO_SCSI_S_FUNCTION_COMPLETE);
    g_assert_cmpuint(tmf_run(&t, VIRTIO_SCSI_T_TMF_QUERY_TASK_SET, lun0, 0),
                     ==, VIRTIO_SCSI_S_FUNCTION_SUCCEEDED);
    g_assert_cmpuint(tmf_run(&t, VIRTIO_SCSI_T_TMF_QUERY_TASK_SET, lun1, 0),
                     ==, VIRTIO_SCSI_S_FUNCTION_COMPLETE);
    g_assert_cmpuint(tmf_run(&t, VIRTIO_SCSI_T_TMF_CLEAR_ACA, lun0, 0), ==,
                     VIRTIO_SCSI_S_FUNCTION_REJECTED);
    g_assert_cmpuint(tmf_run(&t, 99, lun0, 0), ==,
                     VIRTIO_SCSI_S_FUNCTION_REJECTED);
    g_assert_cmpuint(tmf_run(&t, VIRTIO_SCSI_T_TMF_ABORT_TASK, bad, 7), ==,
                     VIRTIO_SCSI_S_BAD_TARGET);
    g_assert_cmpuint(tmf_run(&t, VIRTIO_SCSI_T_TMF_ABORT_TASK, lun5, 7), ==,
                     VIRTIO_SCSI_S_INCORRECT_LUN);
    /* Queries did not touch the commands: still running. */
    tdev_reap(&t);
    g_assert_cmpuint(a.q->used_len[a.head], ==, NOT_USED);

    /* ABORT TASK SET takes both, on two queues. */
    g_assert_cmpuint(tmf_run(&t, VIRTIO_SCSI_T_TMF_ABORT_TASK_SET, lun0, 0),
                     ==, VIRTIO_SCSI_S_FUNCTION_COMPLETE);
    cmd_wait(&t, &a);
    cmd_wait(&t, &b);
    g_assert_cmpuint(a.response, ==, VIRTIO_SCSI_S_ABORTED);
    g_assert_cmpuint(b.response, ==, VIRTIO_SCSI_S_ABORTED);
    /* Nothing left: done at once. */
    g_assert_cmpuint(tmf_run(&t, VIRTIO_SCSI_T_TMF_QUERY_TASK, lun0, 7), ==,
                     VIRTIO_SCSI_S_FUNCTION_COMPLETE);
    tdev_cleanup(&t);
}

static void test_tmf_query(void)
{
    run_query_and_sets(false);
}

static void test_tmf_query_iothread(void)
{
    run_query_and_sets(true);
}

/* Stopping the control queue waits for its TMF, and the TMF for its
 * command in another thread. */
static void test_tmf_drain(void)
{
    uint8_t lun0[8], cdb[10];
    TCmd a;
    TTmf m;
    TDev t;

    tdev_new_slow(&t, 1, 1, true);
    slow_read_addrs(lun0, NULL, cdb);
    cmd_send(&t, &a, lun0, 5, cdb, 10, NULL, 0, 512);
    tmf_send(&t, &m, VIRTIO_SCSI_T_TMF_ABORT_TASK, lun0, 5);
    /* Let the control queue pop it. */
    while (aio_poll(t.ctx, false)) {
        /* nothing */
    }
    lq_stop(&ctrlq(&t)->d);
    tdev_reap(&t);
    g_assert_cmpuint(ctrlq(&t)->used_len[m.head], ==, 1);
    cmd_wait(&t, &a);
    g_assert_cmpuint(a.response, ==, VIRTIO_SCSI_S_ABORTED);
    tdev_cleanup(&t);
}

/* ------------------------------------------------------------------------ */
/* Control queue: AN and malformed requests                                 */

static uint32_t ctrl_raw(TDev *t, const void *req, size_t req_len,
                         size_t resp_len, uint64_t *resp_gpa)
{
    VufSeg b[2];
    unsigned n = 0;
    uint16_t head;

    b[n++] = (VufSeg){ gbuf(t, req, req_len), req_len, false };
    *resp_gpa = gbuf(t, NULL, MAX(resp_len, 1u));
    if (resp_len) {
        b[n++] = (VufSeg){ *resp_gpa, resp_len, true };
    }
    head = lq_add_chain(&ctrlq(t)->d, b, n);
    tq_publish(ctrlq(t), head, true);
    return tq_wait(ctrlq(t), head);
}

static void test_ctrl_an(void)
{
    VirtioScsiCtrlAnReq an;
    VirtioScsiCtrlAnResp resp;
    VirtioScsiCtrlTmfReq tmf;
    uint32_t type = htole32(7);
    uint64_t gpa;
    TDev t;

    tdev_new_lun0(&t);
    memset(&an, 0, sizeof(an));
    lun_addr(an.lun, 0, 0);
    an.event_requested = htole32(2 | 4 | 16);
    for (uint32_t ty = VIRTIO_SCSI_T_AN_QUERY;
         ty <= VIRTIO_SCSI_T_AN_SUBSCRIBE; ty++) {
        an.type = htole32(ty);
        g_assert_cmpuint(ctrl_raw(&t, &an, sizeof(an), sizeof(resp), &gpa),
                         ==, sizeof(resp));
        memcpy(&resp, gptr(&t, gpa), sizeof(resp));
        g_assert_cmpuint(le32toh(resp.event_actual), ==, 0);
        g_assert_cmpuint(resp.response, ==, VIRTIO_SCSI_S_OK);
    }

    /* Malformed: no type, unknown type (nowhere known to put a response:
     * handed back empty), a short TMF or AN request (FAILURE: the
     * response fits).  Responses that do not fit break the queue
     * (test_no_room_for_response()). */
    g_assert_cmpuint(ctrl_raw(&t, &type, 2, 8, &gpa), ==, 0);
    g_assert_cmpuint(ctrl_raw(&t, &type, 4, 8, &gpa), ==, 0);
    memset(&tmf, 0, sizeof(tmf));
    tmf.type = htole32(VIRTIO_SCSI_T_TMF);
    g_assert_cmpuint(ctrl_raw(&t, &tmf, 10, 1, &gpa), ==, 1);
    g_assert_cmpuint(*(uint8_t *)gptr(&t, gpa), ==, VIRTIO_SCSI_S_FAILURE);
    an.type = htole32(VIRTIO_SCSI_T_AN_QUERY);
    g_assert_cmpuint(ctrl_raw(&t, &an, 10, sizeof(resp), &gpa), ==,
                     sizeof(resp));
    memcpy(&resp, gptr(&t, gpa), sizeof(resp));
    g_assert_cmpuint(resp.response, ==, VIRTIO_SCSI_S_FAILURE);
    g_assert_cmpuint(le32toh(resp.event_actual), ==, 0);
    g_assert_false(virtqueue_is_broken(ctrlq(&t)->d.vq));
    tdev_cleanup(&t);
}

/* ------------------------------------------------------------------------ */
/* Events                                                                    */

static void read_event(TDev *t, uint64_t gpa, VirtioScsiEvent *ev)
{
    memcpy(ev, gptr(t, gpa), sizeof(*ev));
    ev->event = le32toh(ev->event);
    ev->reason = le32toh(ev->reason);
}

static void assert_event(TDev *t, uint16_t head, uint64_t gpa,
                         uint32_t event, const uint8_t *lun, uint32_t reason)
{
    VirtioScsiEvent ev;

    g_assert_cmpuint(tq_wait(eventq(t), head), ==, 16);
    read_event(t, gpa, &ev);
    g_assert_cmphex(ev.event, ==, event);
    g_assert_cmpmem(ev.lun, 8, lun, 8);
    g_assert_cmphex(ev.reason, ==, reason);
}

/*
 * Post an event buffer after an event was missed: it comes back at once,
 * saying EVENTS_MISSED.  The flag is taken: post the next buffer, which
 * waits for the next event; returns its head (guest address in *gpa).
 */
static uint16_t event_missed_then_post(TDev *t, uint64_t *gpa)
{
    VirtioScsiEvent ev;
    uint64_t missed_gpa;
    uint16_t head = event_buf_post(t, 16, &missed_gpa);

    g_assert_cmpuint(tq_wait(eventq(t), head), ==, 16);
    read_event(t, missed_gpa, &ev);
    g_assert_cmphex(ev.event, ==,
                    VIRTIO_SCSI_T_NO_EVENT | VIRTIO_SCSI_T_EVENTS_MISSED);
    head = event_buf_post(t, 16, gpa);
    g_assert_false(tq_check(eventq(t), head));
    return head;
}

static void test_event_param_change(void)
{
    static const TLun luns[] = { { 0, FAST_NODE }, { 300, FAST_NODE } };
    TConf c = { .num_queues = 1, .iothread = true, .luns = luns,
                .nluns = 2 };
    static const uint8_t lun300[8] = { 1, 0, 0x41, 0x2c, 0, 0, 0, 0 };
    static const uint8_t lun0[8] = { 1, 0, 0, 0, 0, 0, 0, 0 };
    uint64_t gpa[2];
    uint16_t head[2];
    uint8_t lun[8];
    TCmd cmd;
    TDev t;

    tdev_new(&t, &c);
    head[0] = event_buf_post(&t, 16, &gpa[0]);
    head[1] = event_buf_post(&t, 32, &gpa[1]);
    /* (A buffer too small for an event breaks the queue:
     * test_no_room_for_response().) */
    g_assert_false(tq_check(eventq(&t), head[0]));

    /* PARAM_CHANGE, the LUN, and CAPACITY DATA HAS CHANGED (ASC 0x2a,
     * ASCQ 0x09) as the reason. */
    virtio_scsi_capacity_changed(t.vs, 300);
    assert_event(&t, head[0], gpa[0], VIRTIO_SCSI_T_PARAM_CHANGE, lun300,
                 0x2a | 0x09 << 8);
    g_assert_false(tq_check(eventq(&t), head[1]));

    virtio_scsi_capacity_changed(t.vs, 0);
    assert_event(&t, head[1], gpa[1], VIRTIO_SCSI_T_PARAM_CHANGE, lun0,
                 0x2a | 0x09 << 8);

    /* And the LUN has the unit attention. */
    lun_addr(lun, 0, 300);
    cmd_run(&t, &cmd, lun, cdb_tur, 6, NULL, 0, 0);
    assert_sense(&cmd, SCSI_SENSE_UNIT_ATTENTION, SCSI_ASC_PARAMETERS_CHANGED,
                 SCSI_ASCQ_CAPACITY_DATA_CHANGED);
    tdev_cleanup(&t);
}

static void test_event_missed(void)
{
    VirtioScsiEvent ev;
    uint64_t gpa;
    uint16_t head;
    TDev t;

    tdev_new_lun0(&t);
    /* No buffer: missed; the next buffer says so at once.  Then events
     * are whole again. */
    virtio_scsi_capacity_changed(t.vs, 0);
    head = event_missed_then_post(&t, &gpa);
    virtio_scsi_capacity_changed(t.vs, 0);
    g_assert_cmpuint(tq_wait(eventq(&t), head), ==, 16);
    read_event(&t, gpa, &ev);
    g_assert_cmphex(ev.event, ==, VIRTIO_SCSI_T_PARAM_CHANGE);
    tdev_cleanup(&t);
}

/* Without VIRTIO_SCSI_F_CHANGE only the unit attention. */
static void test_event_not_negotiated(void)
{
    uint8_t lun[8];
    uint64_t gpa;
    uint16_t head;
    TCmd cmd;
    TDev t;

    tdev_new_lun0_conf(&t, (TConf) { .num_queues = 1, .no_change = true });
    head = event_buf_post(&t, 16, &gpa);
    virtio_scsi_capacity_changed(t.vs, 0);
    tq_assert_pending(eventq(&t), head, 20);
    lun_addr(lun, 0, 0);
    cmd_run(&t, &cmd, lun, cdb_tur, 6, NULL, 0, 0);
    assert_sense(&cmd, SCSI_SENSE_UNIT_ATTENTION, SCSI_ASC_PARAMETERS_CHANGED,
                 SCSI_ASCQ_CAPACITY_DATA_CHANGED);
    /* Stopping hands the buffer back, unused. */
    lq_stop(&eventq(&t)->d);
    tdev_reap(&t);
    g_assert_cmpuint(eventq(&t)->used_len[head], ==, 0);
    tdev_cleanup(&t);
}

/* ------------------------------------------------------------------------ */
/* LUN hot-plug                                                              */

/* The event addresses of LUNs 1 and 300 (single-level, flat above 255). */
static const uint8_t ev_lun1[8] = { 1, 0, 0, 1, 0, 0, 0, 0 };
static const uint8_t ev_lun300[8] = { 1, 0, 0x41, 0x2c, 0, 0, 0, 0 };

/* Wait for the event buffer head at gpa; check what it says. */
static void cmd_run_q(TDev *t, TCmd *c, unsigned qi, const uint8_t *lun,
                      const uint8_t *cdb, size_t cdb_len, size_t in_len)
{
    cmd_send_ex(t, c, qi, lun, 1, cdb, cdb_len, NULL, 0, in_len, true);
    cmd_wait(t, c);
}

/* INQUIRY through request queue qi: the peripheral qualifier and type. */
static uint8_t inquiry_pdt(TDev *t, unsigned qi, unsigned n)
{
    uint8_t lun[8];
    TCmd cmd;

    lun_addr(lun, 0, n);
    cmd_run_q(t, &cmd, qi, lun, cdb_inquiry, 6, 96);
    assert_good(&cmd);
    return cmd_data(t, &cmd)[0];
}

/* REPORT LUNS through request queue qi, to LUN 0. */
static unsigned report_luns_q(TDev *t, unsigned qi, unsigned *got,
                              unsigned max)
{
    uint8_t lun[8], cdb[12];
    TCmd cmd;

    lun_addr(lun, 0, 0);
    cdb_report_luns(cdb, 0, 4096);
    cmd_run_q(t, &cmd, qi, lun, cdb, 12, 4096);
    assert_good(&cmd);
    return parse_report_luns(cmd_data(t, &cmd), got, max);
}

/* A command to LUN n through queue qi gets the absent-LUN answer. */
static void assert_lun_absent(TDev *t, unsigned qi, unsigned n)
{
    uint8_t lun[8];
    TCmd cmd;

    g_assert_cmphex(inquiry_pdt(t, qi, n), ==, SCSI_INQUIRY_NO_LUN);
    lun_addr(lun, 0, n);
    cmd_run_q(t, &cmd, qi, lun, cdb_tur, 6, 0);
    assert_sense(&cmd, SCSI_SENSE_ILLEGAL_REQUEST,
                 SCSI_ASC_LUN_NOT_SUPPORTED, SCSI_ASCQ_LUN_NOT_SUPPORTED);
}

/* LUNs added while the queues run: RESCAN events, then the LUNs work. */
static void test_hotplug_add(void)
{
    uint8_t lun1[8], cdb[10];
    unsigned got[4];
    uint64_t gpa[2];
    uint16_t head[2];
    Error *err = NULL;
    TCmd cmd;
    TDev t;

    tdev_new_lun0_conf(&t, (TConf) { .num_queues = 1, .iothread = true });
    assert_lun_absent(&t, 0, 1);
    head[0] = event_buf_post(&t, 16, &gpa[0]);
    head[1] = event_buf_post(&t, 16, &gpa[1]);

    tdev_add_lun(&t, 1, FAST_NODE);
    assert_event(&t, head[0], gpa[0], VIRTIO_SCSI_T_TRANSPORT_RESET, ev_lun1,
                 VIRTIO_SCSI_EVT_RESET_RESCAN);
    g_assert_false(tq_check(eventq(&t), head[1]));
    g_assert_cmphex(inquiry_pdt(&t, 0, 1), ==, SCSI_PDT_DIRECT_ACCESS);
    lun_addr(lun1, 0, 1);
    cdb_rw10(cdb, SCSI_OP_READ_10, 0, 2);
    cmd_run(&t, &cmd, lun1, cdb, 10, NULL, 0, 1024);
    assert_good(&cmd);
    g_assert_cmpuint(cmd.resid, ==, 0);
    g_assert_cmpuint(report_luns_q(&t, 0, got, 4), ==, 2);
    g_assert_cmpuint(got[0], ==, 0);
    g_assert_cmpuint(got[1], ==, 1);

    /* A flat-space LUN: its event address; a LUN in use is refused. */
    tdev_add_lun(&t, 300, FAST_NODE);
    assert_event(&t, head[1], gpa[1], VIRTIO_SCSI_T_TRANSPORT_RESET,
                 ev_lun300, VIRTIO_SCSI_EVT_RESET_RESCAN);
    g_assert_cmphex(inquiry_pdt(&t, 0, 300), ==, SCSI_PDT_DIRECT_ACCESS);
    g_assert_false(virtio_scsi_add_lun(t.vs, 1, virtio_scsi_get_lun(t.vs, 0),
                                       &err));
    g_assert_nonnull(err);
    error_free(err);
    tdev_cleanup(&t);
}

/*
 * LUN 1 removed while a read at it is in flight: the read completes
 * normally before the removal returns the disk, the driver gets a REMOVED
 * event, and LUN 1 is gone for new commands; LUN 0 carries on.
 */
static void run_hotplug_remove(bool iothread)
{
    static const TLun luns[] = { { 0, FAST_NODE }, { 1, SLOW_NODE } };
    TConf c = { .num_queues = 1, .iothread = iothread, .luns = luns,
                .nluns = 2 };
    uint8_t lun1[8], cdb[10];
    unsigned got[4];
    uint64_t gpa;
    uint16_t head;
    ScsiDisk *d, *d1;
    TCmd a;
    TDev t;

    tdev_new(&t, &c);
    head = event_buf_post(&t, 16, &gpa);
    d1 = virtio_scsi_get_lun(t.vs, 1);
    lun_addr(lun1, 0, 1);
    cdb_rw10(cdb, SCSI_OP_READ_10, 0, 1);
    cmd_send(&t, &a, lun1, 7, cdb, 10, NULL, 0, 512);
    tq_assert_pending(a.q, a.head, 20);

    d = virtio_scsi_remove_lun(t.vs, 1);
    g_assert_true(d == d1);
    tdev_reap(&t);
    g_assert_cmpuint(a.q->used_len[a.head], !=, NOT_USED);
    cmd_wait(&t, &a);
    assert_good(&a);
    g_assert_cmpuint(a.resid, ==, 0);
    assert_event(&t, head, gpa, VIRTIO_SCSI_T_TRANSPORT_RESET, ev_lun1,
                 VIRTIO_SCSI_EVT_RESET_REMOVED);

    assert_lun_absent(&t, 0, 1);
    g_assert_cmpuint(report_luns_q(&t, 0, got, 4), ==, 1);
    g_assert_cmpuint(got[0], ==, 0);
    g_assert_cmphex(inquiry_pdt(&t, 0, 0), ==, SCSI_PDT_DIRECT_ACCESS);
    g_assert_null(virtio_scsi_remove_lun(t.vs, 1));
    g_assert_null(virtio_scsi_get_lun(t.vs, 1));
    scsi_disk_free(d);
    tdev_cleanup(&t);
}

static void test_hotplug_remove(void)
{
    run_hotplug_remove(false);
}

static void test_hotplug_remove_iothread(void)
{
    run_hotplug_remove(true);
}

/* Without VIRTIO_SCSI_F_HOTPLUG the LUNs change, but no event. */
static void test_hotplug_not_negotiated(void)
{
    uint64_t gpa;
    uint16_t head;
    TDev t;

    tdev_new_lun0_conf(&t, (TConf) { .num_queues = 1, .no_hotplug = true });
    head = event_buf_post(&t, 16, &gpa);
    tdev_add_lun(&t, 1, FAST_NODE);
    g_assert_cmphex(inquiry_pdt(&t, 0, 1), ==, SCSI_PDT_DIRECT_ACCESS);
    tq_assert_pending(eventq(&t), head, 20);
    scsi_disk_free(virtio_scsi_remove_lun(t.vs, 1));
    assert_lun_absent(&t, 0, 1);
    tq_assert_pending(eventq(&t), head, 20);
    tdev_cleanup(&t);
}

/* An add with no event buffer: the next buffer says EVENTS_MISSED. */
static void test_hotplug_missed(void)
{
    uint64_t gpa;
    uint16_t head;
    TDev t;

    tdev_new_lun0(&t);
    tdev_add_lun(&t, 1, FAST_NODE);
    /* The flag is taken: the removal's event comes whole. */
    head = event_missed_then_post(&t, &gpa);
    scsi_disk_free(virtio_scsi_remove_lun(t.vs, 1));
    assert_event(&t, head, gpa, VIRTIO_SCSI_T_TRANSPORT_RESET, ev_lun1,
                 VIRTIO_SCSI_EVT_RESET_REMOVED);
    tdev_cleanup(&t);
}

/* Request queues in two IOThreads both see an added and a removed LUN;
 * the removal waits for the commands of both. */
static void test_hotplug_two_iothreads(void)
{
    uint8_t lun1[8], cdb[10];
    unsigned got[4];
    uint64_t gpa;
    uint16_t head;
    TCmd a[2];
    TDev t;

    tdev_new_lun0_conf(&t, (TConf) { .num_queues = 2, .two_iothreads = true });
    g_assert_true(reqq(&t, 0)->d.ctx != reqq(&t, 1)->d.ctx);
    head = event_buf_post(&t, 16, &gpa);
    tdev_add_lun(&t, 1, SLOW_NODE);
    assert_event(&t, head, gpa, VIRTIO_SCSI_T_TRANSPORT_RESET, ev_lun1,
                 VIRTIO_SCSI_EVT_RESET_RESCAN);
    for (unsigned qi = 0; qi < 2; qi++) {
        g_assert_cmphex(inquiry_pdt(&t, qi, 1), ==, SCSI_PDT_DIRECT_ACCESS);
        g_assert_cmpuint(report_luns_q(&t, qi, got, 4), ==, 2);
        g_assert_cmpuint(got[1], ==, 1);
    }

    lun_addr(lun1, 0, 1);
    cdb_rw10(cdb, SCSI_OP_READ_10, 0, 1);
    for (unsigned qi = 0; qi < 2; qi++) {
        cmd_send_ex(&t, &a[qi], qi, lun1, qi, cdb, 10, NULL, 0, 512, true);
    }
    tq_assert_pending(a[0].q, a[0].head, 20);
    tq_assert_pending(a[1].q, a[1].head, 1);
    scsi_disk_free(virtio_scsi_remove_lun(t.vs, 1));
    tdev_reap(&t);
    for (unsigned qi = 0; qi < 2; qi++) {
        g_assert_cmpuint(a[qi].q->used_len[a[qi].head], !=, NOT_USED);
        cmd_wait(&t, &a[qi]);
        assert_good(&a[qi]);
        assert_lun_absent(&t, qi, 1);
        g_assert_cmpuint(report_luns_q(&t, qi, got, 4), ==, 1);
    }
    tdev_cleanup(&t);
}

/* A request queue stopped during an add picks the LUN up at its start. */
static void test_hotplug_restart(void)
{
    TDev t;

    tdev_new_lun0(&t);
    lq_stop(&reqq(&t, 0)->d);
    tdev_add_lun(&t, 1, FAST_NODE);
    tq_start(reqq(&t, 0));
    g_assert_cmphex(inquiry_pdt(&t, 0, 1), ==, SCSI_PDT_DIRECT_ACCESS);
    lq_stop(&reqq(&t, 0)->d);
    scsi_disk_free(virtio_scsi_remove_lun(t.vs, 1));
    tq_start(reqq(&t, 0));
    assert_lun_absent(&t, 0, 1);
    tdev_cleanup(&t);
}

/* Stopping a request queue finishes its commands first. */
static void test_drain(void)
{
    uint8_t lun[8], cdb[10];
    TCmd a;
    TDev t;

    tdev_new_slow(&t, 1, 1, true);
    slow_read_addrs(lun, NULL, cdb);
    cmd_send(&t, &a, lun, 5, cdb, 10, NULL, 0, 512);
    tq_assert_pending(a.q, a.head, 20);
    lq_stop(&a.q->d);
    tdev_reap(&t);
    g_assert_cmpuint(a.q->used_len[a.head], !=, NOT_USED);
    cmd_wait(&t, &a);
    assert_good(&a);
    tdev_cleanup(&t);
}

/* ------------------------------------------------------------------------ */
/* Accounting and capacity                                                   */

/* LUN n's counters of op. */
static BlockAcctOpStats lun_op_stats(TDev *t, unsigned n, BlockOp op)
{
    BlockAcctStats st;

    g_assert_true(virtio_scsi_get_lun_stats(t->vs, n, &st));
    return st.op[op];
}

static void assert_op_stats(TDev *t, unsigned n, BlockOp op, uint64_t ops,
                            uint64_t bytes)
{
    BlockAcctOpStats s = lun_op_stats(t, n, op);

    g_assert_cmpuint(s.ops, ==, ops);
    g_assert_cmpuint(s.bytes, ==, bytes);
    g_assert_cmpuint(s.failed, ==, 0);
}

/* READ (10) or WRITE (10) of blocks 512-byte blocks at lba through
 * request queue qi; returns the command for checks. */
static void rw_q(TDev *t, TCmd *c, unsigned qi, unsigned n, bool write,
                 uint32_t lba, uint16_t blocks)
{
    static uint8_t zeroes[4096];
    uint8_t lun[8], cdb[10];

    g_assert(blocks * 512u <= sizeof(zeroes));
    lun_addr(lun, 0, n);
    cdb_rw10(cdb, write ? SCSI_OP_WRITE_10 : SCSI_OP_READ_10, lba, blocks);
    cmd_send_ex(t, c, qi, lun, 1, cdb, 10, write ? zeroes : NULL,
                write ? blocks * 512u : 0, write ? 0 : blocks * 512u, true);
    cmd_wait(t, c);
}

/*
 * Each LUN counts its own I/O over every request queue (queues in two
 * IOThreads), across a queue restart; what the device answers itself
 * (INQUIRY, an out-of-range READ) is not counted; a LUN added later
 * starts from zero and a removed LUN's counts go with it.
 */
static void test_lun_stats(void)
{
    static const TLun luns[] = { { 0, FAST_NODE }, { 1, FAST_NODE } };
    TConf c = { .num_queues = 2, .two_iothreads = true, .luns = luns,
                .nluns = 2 };
    BlockAcctStats st;
    TCmd cmd;
    TDev t;

    tdev_new(&t, &c);
    g_assert_false(virtio_scsi_get_lun_stats(t.vs, 2, &st));
    assert_op_stats(&t, 1, BLOCK_OP_READ, 0, 0);

    rw_q(&t, &cmd, 0, 1, false, 0, 2);
    assert_good(&cmd);
    rw_q(&t, &cmd, 1, 1, false, 8, 1);
    assert_good(&cmd);
    rw_q(&t, &cmd, 0, 0, true, 4, 1);
    assert_good(&cmd);
    g_assert_cmphex(inquiry_pdt(&t, 1, 1), ==, SCSI_PDT_DIRECT_ACCESS);
    rw_q(&t, &cmd, 1, 1, false, 2048, 1);     /* past the end: refused */
    assert_sense(&cmd, SCSI_SENSE_ILLEGAL_REQUEST, SCSI_ASC_LBA_OUT_OF_RANGE,
                 0);
    assert_op_stats(&t, 1, BLOCK_OP_READ, 2, 1536);
    assert_op_stats(&t, 1, BLOCK_OP_WRITE, 0, 0);
    assert_op_stats(&t, 0, BLOCK_OP_WRITE, 1, 512);
    assert_op_stats(&t, 0, BLOCK_OP_READ, 0, 0);
    g_assert_cmpuint(lun_op_stats(&t, 1, BLOCK_OP_READ).total_time_ns, >, 0);

    /* A queue's BlockQueues are remade at its restart: the counts stay. */
    lq_stop(&reqq(&t, 0)->d);
    tq_start(reqq(&t, 0));
    rw_q(&t, &cmd, 0, 1, false, 0, 1);
    assert_good(&cmd);
    assert_op_stats(&t, 1, BLOCK_OP_READ, 3, 2048);

    /* Hot-added LUN 2 counts from zero, by itself. */
    tdev_add_lun(&t, 2, FAST_NODE);
    assert_op_stats(&t, 2, BLOCK_OP_READ, 0, 0);
    rw_q(&t, &cmd, 1, 2, true, 0, 8);
    assert_good(&cmd);
    assert_op_stats(&t, 2, BLOCK_OP_WRITE, 1, 4096);
    assert_op_stats(&t, 1, BLOCK_OP_WRITE, 0, 0);

    /* Removed: its counts are gone; added again, a fresh start. */
    scsi_disk_free(virtio_scsi_remove_lun(t.vs, 1));
    g_assert_false(virtio_scsi_get_lun_stats(t.vs, 1, &st));
    tdev_add_lun(&t, 1, FAST_NODE);
    assert_op_stats(&t, 1, BLOCK_OP_READ, 0, 0);
    rw_q(&t, &cmd, 0, 1, false, 0, 1);
    assert_good(&cmd);
    assert_op_stats(&t, 1, BLOCK_OP_READ, 1, 512);
    tdev_cleanup(&t);
}

/* READ CAPACITY (10): the last LBA. */
static uint32_t read_capacity_last_lba(TDev *t, unsigned n)
{
    uint8_t lun[8], cdb[10] = { SCSI_OP_READ_CAPACITY_10 };
    const uint8_t *p;
    TCmd cmd;

    lun_addr(lun, 0, n);
    cmd_run(t, &cmd, lun, cdb, 10, NULL, 0, 8);
    assert_good(&cmd);
    p = cmd_data(t, &cmd);
    return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3];
}

/*
 * A node resized under a running LUN: READ CAPACITY and the range checks
 * follow the node's new length at once; virtio_scsi_capacity_changed()
 * adds the unit attention (and the event: test_event_param_change).
 */
static void test_capacity_resize(void)
{
    BlockNode *bs;
    Error *err = NULL;
    uint8_t lun[8];
    TCmd cmd;
    TDev t;

    tdev_new_lun0_conf(&t, (TConf) { .num_queues = 1, .iothread = true });
    bs = scsi_disk_get_node(virtio_scsi_get_lun(t.vs, 0));
    g_assert_cmpuint(read_capacity_last_lba(&t, 0), ==, 2047);
    rw_q(&t, &cmd, 0, 0, false, 2048, 1);
    assert_sense(&cmd, SCSI_SENSE_ILLEGAL_REQUEST, SCSI_ASC_LBA_OUT_OF_RANGE,
                 0);

    g_assert_true(block_node_resize(bs, 2 << 20, &err));
    g_assert_no_error(err);
    g_assert_cmpuint(read_capacity_last_lba(&t, 0), ==, 4095);
    rw_q(&t, &cmd, 0, 0, false, 4095, 1);
    assert_good(&cmd);
    rw_q(&t, &cmd, 0, 0, true, 2048, 1);
    assert_good(&cmd);
    rw_q(&t, &cmd, 0, 0, false, 4096, 1);
    assert_sense(&cmd, SCSI_SENSE_ILLEGAL_REQUEST, SCSI_ASC_LBA_OUT_OF_RANGE,
                 0);

    virtio_scsi_capacity_changed(t.vs, 0);
    lun_addr(lun, 0, 0);
    cmd_run(&t, &cmd, lun, cdb_tur, 6, NULL, 0, 0);
    assert_sense(&cmd, SCSI_SENSE_UNIT_ATTENTION, SCSI_ASC_PARAMETERS_CHANGED,
                 SCSI_ASCQ_CAPACITY_DATA_CHANGED);
    cmd_run(&t, &cmd, lun, cdb_tur, 6, NULL, 0, 0);
    assert_good(&cmd);
    tdev_cleanup(&t);
}

static const TestCase tests[] = {
    { "/virtio-scsi/config", test_config },
    { "/virtio-scsi/inquiry", test_inquiry },
    { "/virtio-scsi/report-luns", test_report_luns },
    { "/virtio-scsi/no-lun0", test_no_lun0 },
    { "/virtio-scsi/missing-lun", test_missing_lun },
    { "/virtio-scsi/bad-target", test_bad_target },
    { "/virtio-scsi/read-write", test_read_write },
    { "/virtio-scsi/overrun", test_overrun },
    { "/virtio-scsi/malformed", test_malformed },
    { "/virtio-scsi/malformed/no-room-for-response",
      test_no_room_for_response },
    { "/virtio-scsi/config-sizes", test_config_sizes },
    { "/virtio-scsi/tmf/abort-task", test_tmf_abort_task },
    { "/virtio-scsi/tmf/abort-task-iothread",
      test_tmf_abort_task_iothread },
    { "/virtio-scsi/tmf/abort-task-in-ring", test_tmf_abort_task_in_ring },
    { "/virtio-scsi/tmf/abort-task-in-ring-iothread",
      test_tmf_abort_task_in_ring_iothread },
    { "/virtio-scsi/tmf/lun-reset", test_tmf_lun_reset },
    { "/virtio-scsi/tmf/lun-reset-iothread", test_tmf_lun_reset_iothread },
    { "/virtio-scsi/tmf/i-t-nexus-reset", test_tmf_nexus_reset },
    { "/virtio-scsi/tmf/query", test_tmf_query },
    { "/virtio-scsi/tmf/query-iothread", test_tmf_query_iothread },
    { "/virtio-scsi/tmf/drain", test_tmf_drain },
    { "/virtio-scsi/ctrl/an", test_ctrl_an },
    { "/virtio-scsi/event/param-change", test_event_param_change },
    { "/virtio-scsi/event/missed", test_event_missed },
    { "/virtio-scsi/event/not-negotiated", test_event_not_negotiated },
    { "/virtio-scsi/hotplug/add", test_hotplug_add },
    { "/virtio-scsi/hotplug/remove", test_hotplug_remove },
    { "/virtio-scsi/hotplug/remove-iothread",
      test_hotplug_remove_iothread },
    { "/virtio-scsi/hotplug/not-negotiated", test_hotplug_not_negotiated },
    { "/virtio-scsi/hotplug/missed", test_hotplug_missed },
    { "/virtio-scsi/hotplug/two-iothreads", test_hotplug_two_iothreads },
    { "/virtio-scsi/hotplug/restart", test_hotplug_restart },
    { "/virtio-scsi/lun-stats", test_lun_stats },
    { "/virtio-scsi/capacity-resize", test_capacity_resize },
    { "/virtio-scsi/drain", test_drain },
};

/* Below the meson timeout, so that the watchdog reports first. */
TEST_MAIN(tests, 50)

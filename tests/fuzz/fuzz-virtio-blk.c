/*
 * Fuzz harness: virtio-blk request decode and completion
 * (hw/virtio/virtio-blk.c) over a null-co node.
 *
 * Theory of operation: each input makes a VirtioBlk over a fresh null-co
 * node (latency-ns=0, read-zeroes=on: every request completes in the
 * node's bottom half, in the next loop turn) with the configuration and
 * features the input picks, and one queue of the size it picks, started
 * in the harness's context with the device's own VuDevOps callbacks.  It
 * then plays operations: batches of requests, each a descriptor chain
 * described by the input (ring.h: segments of any direction, length
 * and placement, direct or indirect, the header, data and discard /
 * write-zeroes segments being the device-readable bytes), published
 * together, kicked, and run until the loop settles; config space reads and
 * writes in between.
 *
 * Input: a header
 *     u8  0x01 writable | 0x02 writethrough | 0x04 4 KiB logical blocks
 *         | 0x08 a node with a tail that is not a whole block
 *     u8  features the driver drops: 0x01 FLUSH | 0x02 CONFIG_WCE
 *         | 0x04 DISCARD | 0x08 WRITE_ZEROES; and takes: 0x10 EVENT_IDX
 *         | 0x20 INDIRECT_DESC
 *     u8  log2 of the ring size (mod 9)
 * then operations (ops[] below), a u8 opcode (mod their number) and its
 * arguments:
 *     BATCH       u8 n (mod BATCH_MAX, + 1), then n chains (ring.h)
 *     SET_CONFIG  u8 offset, u8 len (mod 4, + 1), u8 value
 *     GET_CONFIG
 *
 * Checked, for every batch: the loop settles with nothing in flight (a
 * request that never completes is a hang); every used entry names a chain
 * of the batch, once; a chain that has device-writable bytes got one of
 * the three status values in its last writable byte and the used length
 * its type implies (a read: all its writable bytes, which read as zeroes
 * when it succeeded; GET_ID: the serial, 20 bytes at most, and the
 * status; anything else, or a header shorter than 16 bytes: the status
 * alone); one with no writable byte, or whose last writable buffer is
 * empty, is never completed and breaks its queue (nowhere to write a
 * status the driver will read).  Malformed chains (buffers outside guest
 * memory) may break the queue; then nothing more completes.  At the end
 * the queue is stopped and drained the way the server does it, and the
 * device and node are freed: ASan's leak check sees what remains.
 */
#include <endian.h>
#include <stdint.h>
#include <string.h>
#include <glib.h>

#include "block/block.h"
#include "ring.h"
#include "hw/virtio/virtio-blk.h"
#include "hw/virtio/virtio-blk-wire.h"

#define CONF_WRITABLE       0x01
#define CONF_WRITETHROUGH   0x02
#define CONF_LBS_4K         0x04
#define CONF_ODD_SIZE       0x08

#define DROP_FLUSH          0x01
#define DROP_WCE            0x02
#define DROP_DISCARD        0x04
#define DROP_WZ             0x08
#define TAKE_EVENT_IDX      0x10
#define TAKE_INDIRECT       0x20

#define BATCH_MAX           8
#define OPS_MAX             64

/* The rings (room for 256 entries each); buffers from DATA_GPA. */
#define DESC_GPA            0x0000
#define AVAIL_GPA           0x1000
#define USED_GPA            0x2000
#define DATA_GPA            0x3000

typedef struct Fuzz {
    BlockNode *bs;
    VirtioBlk *vb;
    FuzzRing r;
    GuestMemory *mem;
} Fuzz;

static Fuzz f;

static uint64_t feature_bit(unsigned bit)
{
    return UINT64_C(1) << bit;
}

/* The driver's feature choice from the device's offer. */
static uint64_t driver_features(uint8_t sel)
{
    uint64_t features = virtio_blk_vu_ops.get_features(f.vb) |
                        feature_bit(VIRTIO_F_VERSION_1);
    static const struct { uint8_t sel; unsigned bit; } drops[] = {
        { DROP_FLUSH, VIRTIO_BLK_F_FLUSH },
        { DROP_WCE, VIRTIO_BLK_F_CONFIG_WCE },
        { DROP_DISCARD, VIRTIO_BLK_F_DISCARD },
        { DROP_WZ, VIRTIO_BLK_F_WRITE_ZEROES },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(drops); i++) {
        if (sel & drops[i].sel) {
            features &= ~feature_bit(drops[i].bit);
        }
    }
    if (sel & TAKE_EVENT_IDX) {
        features |= feature_bit(VIRTIO_RING_F_EVENT_IDX);
    }
    if (sel & TAKE_INDIRECT) {
        features |= feature_bit(VIRTIO_RING_F_INDIRECT_DESC);
    }
    return features;
}

static void setup(FuzzReader *in)
{
    uint8_t conf_sel = fuzz_read_u8(in);
    uint8_t feat_sel = fuzz_read_u8(in);
    unsigned num = 1u << (fuzz_read_u8(in) % 9);
    uint32_t lbs = conf_sel & CONF_LBS_4K ? 4096 : 512;
    VirtioBlkConf conf = {
        .num_queues = 1,
        .logical_block_size = lbs,
        .writable = conf_sel & CONF_WRITABLE,
        .writethrough = conf_sel & CONF_WRITETHROUGH,
        .serial = "fuzz-serial",
    };
    g_autofree char *node = g_strdup_printf(
        "driver=null-co,node-name=fuzz,size=%u,read-zeroes=on,"
        "latency-ns=0",
        conf_sel & CONF_ODD_SIZE ? (1u << 20) + lbs / 2 + 512 : 1u << 20);
    Error *err = NULL;
    uint64_t features;

    memset(&f, 0, sizeof(f));
    f.bs = block_node_open_str(node, fuzz_ctx(), &err);
    FUZZ_CHECK(f.bs && !err);
    f.vb = virtio_blk_new(&conf, f.bs, &err);
    FUZZ_CHECK(f.vb && !err);
    features = driver_features(feat_sel);
    virtio_blk_vu_ops.set_features(f.vb, features);

    fuzz_ring_init(&f.r, 0, num, DESC_GPA, AVAIL_GPA, USED_GPA, features, 0);
    f.mem = fuzz_guest_memory(FUZZ_MEM_ALL);
    FUZZ_CHECK(virtqueue_start(f.r.vq, f.mem, virtio_blk_vu_ops.handle_queue,
                               f.vb) == 0);
    virtio_blk_vu_ops.queue_started(f.vb, f.r.vq);
    fuzz_run();
}

static void teardown(void)
{
    virtqueue_stop(f.r.vq);
    virtio_blk_vu_ops.queue_drain(f.vb, f.r.vq);
    fuzz_run();
    fuzz_ring_cleanup(&f.r);
    virtio_blk_free(f.vb);
    block_node_unref(f.bs);
    guest_memory_unref(f.mem);
}

/* ------------------------------------------------------------------------ */
/* Operations                                                                */

/* Whether the n device-writable bytes of c from off are all v. */
static bool in_bytes_are(const FuzzChain *c, uint64_t off, uint64_t n,
                         uint8_t v)
{
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *p = fuzz_chain_byte(c, true, off + i);

        if (!p || *p != v) {
            return false;
        }
    }
    return true;
}

/*
 * The used entry of chain c: its length and the status it got.  Reads
 * (read-zeroes) fill every byte before the status with zeroes, GET_ID
 * the serial NUL-padded (20 bytes at most); other requests write only
 * the status.
 */
/* No byte where the driver reads its status: no writable byte at all, or
 * an empty last writable buffer. */
static bool no_status(const FuzzChain *c)
{
    return c->in_bytes == 0 || c->last_in_len == 0;
}

static void check_completion(const FuzzChain *c, uint32_t len)
{
    static const char serial[VIRTIO_BLK_ID_BYTES] = "fuzz-serial";
    uint32_t type = fuzz_chain_le32(c, false, 0);
    uint64_t data;               /* writable bytes before the status */
    const uint8_t *status;

    if (c->bad) {
        return;                  /* the queue broke at its pop */
    }
    /* Nowhere to write a status: the queue breaks instead. */
    FUZZ_CHECK(!no_status(c));
    data = c->in_bytes - 1;
    status = fuzz_gpa(c->last_in_gpa, 1);
    FUZZ_CHECK(status);
    FUZZ_CHECK(*status == VIRTIO_BLK_S_OK || *status == VIRTIO_BLK_S_IOERR ||
               *status == VIRTIO_BLK_S_UNSUPP);
    if (c->out_bytes < VIRTIO_BLK_HDR_SIZE) {
        FUZZ_CHECK(len == 1 && *status == VIRTIO_BLK_S_IOERR);
    } else if (type == VIRTIO_BLK_T_IN) {
        FUZZ_CHECK(len == c->in_bytes);
        FUZZ_CHECK(*status != VIRTIO_BLK_S_OK || in_bytes_are(c, 0, data, 0));
    } else if (type == VIRTIO_BLK_T_GET_ID) {
        uint64_t n = MIN(data, (uint64_t)VIRTIO_BLK_ID_BYTES);

        FUZZ_CHECK(len == n + 1 && *status == VIRTIO_BLK_S_OK);
        for (uint64_t i = 0; i < n; i++) {
            FUZZ_CHECK(*fuzz_chain_byte(c, true, i) == (uint8_t)serial[i]);
        }
    } else {
        FUZZ_CHECK(len == 1);
    }
}

static void op_batch(FuzzReader *in)
{
    unsigned n = fuzz_read_u8(in) % BATCH_MAX + 1, added = 0;
    FuzzChain chains[BATCH_MAX];
    bool done[BATCH_MAX] = { false };
    uint32_t id, len;

    fuzz_data_reset(DATA_GPA);
    f.r.desc_next = 0;
    for (unsigned i = 0; i < n; i++) {
        if (fuzz_chain_add(&f.r, in, &chains[added])) {
            added++;
        }
    }
    fuzz_ring_kick(&f.r);
    fuzz_run();

    /* null-co completes everything in the turn after it was submitted. */
    FUZZ_CHECK(virtqueue_inflight(f.r.vq) == 0);
    while (fuzz_ring_next_used(&f.r, &id, &len)) {
        unsigned i;

        for (i = 0; i < added && (done[i] || chains[i].head != id); i++) {
            /* find the chain */
        }
        FUZZ_CHECK(i < added);
        done[i] = true;
        check_completion(&chains[i], len);
    }
    if (!virtqueue_is_broken(f.r.vq)) {
        for (unsigned i = 0; i < added; i++) {
            FUZZ_CHECK(done[i]);
            FUZZ_CHECK(chains[i].bad || !no_status(&chains[i]));
        }
    }
}

static void op_set_config(FuzzReader *in)
{
    uint8_t offset = fuzz_read_u8(in);
    uint8_t len = fuzz_read_u8(in) % 4 + 1;
    uint8_t buf[4] = { fuzz_read_u8(in), 0, 0, 0 };

    virtio_blk_vu_ops.set_config(f.vb, buf, offset, len);
}

static void op_get_config(FuzzReader *in)
{
    VirtioBlkConfig cfg;

    FUZZ_CHECK(virtio_blk_vu_ops.get_config(f.vb, (uint8_t *)&cfg,
                                            sizeof(cfg)) == sizeof(cfg));
    FUZZ_CHECK(le64toh(cfg.capacity) == virtio_blk_get_capacity(f.vb));
}

/* The operations, in opcode order (the header comment's list). */
static FuzzOpFn *const ops[] = { op_batch, op_set_config, op_get_config };

FUZZ_HARNESS(setup, ops, OPS_MAX, NULL, teardown);

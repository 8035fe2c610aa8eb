/*
 * Fuzz harness: the virtio-scsi device (hw/virtio/virtio-scsi*.c) and the
 * SCSI disk behind it (hw/scsi: CDBs, mode pages, VPD pages, sense).
 *
 * Theory of operation: each input makes a VirtioScsi with one or two
 * request queues and up to two LUNs, ScsiDisks over fresh null-co nodes
 * (latency-ns=0, read-zeroes=on: every block request completes in the
 * node's bottom half, in the next loop turn): LUN 0 (512-byte blocks,
 * writable or not, with or without serial and wwn) and LUN 258 (flat
 * space addressing, 4 KiB blocks, discard=unmap).  Every virtqueue (0
 * control, 1 event, 2.. requests) runs in the harness's context with the
 * device's own VuDevOps callbacks.  Operations then send batches of
 * chains (ring.h) to the control and request queues (the
 * device-readable bytes are the request header, CDB and data-out, or a
 * TMF / AN request), published on all the queues before one run of the
 * loop, so a TMF finds the commands of its batch in flight; give the
 * event queue buffers; write and read the config space (sense_size,
 * cdb_size); raise a capacity change; unplug and replug LUN 0.
 *
 * Input: a header
 *     u8  0x01 two request queues | 0x02 LUN 0 read-only | 0x04 LUN 258
 *         | 0x08 LUN 0 has a serial and a wwn | 0x10 LUN 0 writethrough
 *     u8  features the driver drops: 0x01 HOTPLUG | 0x02 CHANGE; and
 *         takes: 0x10 EVENT_IDX | 0x20 INDIRECT_DESC
 *     u8  log2 of the ring size (mod 8)
 * then operations (ops[] below), a u8 opcode (mod their number) and its
 * arguments:
 *     BATCH       u8 n (mod BATCH_MAX, + 1), then n times: u8 queue (mod
 *                 the number of queues; the event queue means the control
 *                 queue) and a chain
 *     EVENT_BUFS  u8 n (mod 4, + 1), u8 len (mod 64): n event buffers
 *     SET_CONFIG  u8 offset, u8 len (mod 8, + 1), u32, u32
 *     GET_CONFIG
 *     CAPACITY    u8 LUN selector
 *     HOTPLUG     unplug LUN 0, or plug it back
 *
 * Checked, for every batch: the loop settles with no command or TMF in
 * flight; every used entry names a chain of its queue, once; a command
 * chain with less device-writable room than the response header is never
 * completed and breaks its queue; one with room gets the header
 * and sense area (as much as fits: the config's sense_size, which the
 * harness tracks) plus at most its data-in, a known response code, sense
 * within that area and the disk's buffer, and when it ran with data-in a
 * residual that is the data-in not written; a control answer carries a
 * known response code; the config space reads back what the driver set.
 * At the end every queue is stopped and drained the way the server does
 * it, and the device, disks and nodes are freed for ASan's leak check.
 */
#include <endian.h>
#include <stdint.h>
#include <string.h>
#include <glib.h>

#include "block/block.h"
#include "ring.h"
#include "hw/scsi/scsi-disk.h"
#include "hw/virtio/virtio-scsi.h"
#include "hw/virtio/virtio-scsi-wire.h"

#define CONF_TWO_QUEUES     0x01
#define CONF_LUN0_RO        0x02
#define CONF_LUN258         0x04
#define CONF_LUN0_IDS       0x08
#define CONF_LUN0_WT        0x10

#define DROP_HOTPLUG        0x01
#define DROP_CHANGE         0x02
#define TAKE_EVENT_IDX      0x10
#define TAKE_INDIRECT       0x20

#define MAX_VQS             4
#define BATCH_MAX           8
#define OPS_MAX             64
#define LUN_OTHER           258

/* Queue i's rings at RING_GPA(i) (room for 128 entries); event buffers
 * in their own area (the device keeps them across batches); the
 * batches' buffers from DATA_GPA. */
#define RING_GPA(i)         (0x3000u * (i))
#define EVENT_GPA           (RING_GPA(MAX_VQS))
#define EVENT_AREA          0x2000u
#define DATA_GPA            (EVENT_GPA + EVENT_AREA)

#define RESP_HDR            sizeof(VirtioScsiCmdRespHdr)

/* The driver-writable config limits the device enforces (virtio-scsi.h). */
#define SENSE_SIZE_MAX      256
#define CDB_SIZE_MIN        6
#define CDB_SIZE_MAX        256

typedef struct Fuzz {
    VirtioScsi *vs;
    unsigned nvqs;
    FuzzRing r[MAX_VQS];
    GuestMemory *mem;
    ScsiDisk *unplugged;         /* LUN 0 while it is out */
    uint32_t sense_size;         /* the config space, as the driver set it */
    uint32_t cdb_size;
    uint64_t event_next;         /* the next event buffer */
} Fuzz;

static Fuzz f;

/* ------------------------------------------------------------------------ */
/* Set-up                                                                    */

static ScsiDisk *disk_new(const char *node, const ScsiDiskConf *conf)
{
    Error *err = NULL;
    BlockNode *bs = block_node_open_str(node, fuzz_ctx(), &err);
    ScsiDisk *d;

    FUZZ_CHECK(bs && !err);
    d = scsi_disk_new(conf, bs, &err);
    FUZZ_CHECK(d && !err);
    block_node_unref(bs);        /* the disk holds its own reference */
    return d;
}

static void add_lun(unsigned lun, ScsiDisk *d)
{
    Error *err = NULL;

    FUZZ_CHECK(virtio_scsi_add_lun(f.vs, lun, d, &err) && !err);
}

static void add_luns(uint8_t conf_sel)
{
    ScsiDiskConf lun0 = {
        .logical_block_size = 512,
        .writable = !(conf_sel & CONF_LUN0_RO),
        .writethrough = conf_sel & CONF_LUN0_WT,
        .serial = conf_sel & CONF_LUN0_IDS ? "FUZZ0001" : NULL,
        .wwn = conf_sel & CONF_LUN0_IDS ? 0x5000000000001234ull : 0,
    };
    ScsiDiskConf other = { .logical_block_size = 4096, .writable = true };

    add_lun(0, disk_new(conf_sel & CONF_LUN0_RO ?
                        "driver=null-co,node-name=lun0,size=1M,"
                        "read-zeroes=on,latency-ns=0,read-only=on" :
                        "driver=null-co,node-name=lun0,size=1M,"
                        "read-zeroes=on,latency-ns=0", &lun0));
    if (conf_sel & CONF_LUN258) {
        add_lun(LUN_OTHER, disk_new("driver=null-co,node-name=lun258,"
                                    "size=2M,read-zeroes=on,latency-ns=0,"
                                    "discard=unmap", &other));
    }
}

static uint64_t driver_features(uint8_t sel)
{
    uint64_t features = virtio_scsi_vu_ops.get_features(f.vs) |
                        (UINT64_C(1) << VIRTIO_F_VERSION_1);

    if (sel & DROP_HOTPLUG) {
        features &= ~(UINT64_C(1) << VIRTIO_SCSI_F_HOTPLUG);
    }
    if (sel & DROP_CHANGE) {
        features &= ~(UINT64_C(1) << VIRTIO_SCSI_F_CHANGE);
    }
    if (sel & TAKE_EVENT_IDX) {
        features |= UINT64_C(1) << VIRTIO_RING_F_EVENT_IDX;
    }
    if (sel & TAKE_INDIRECT) {
        features |= UINT64_C(1) << VIRTIO_RING_F_INDIRECT_DESC;
    }
    return features;
}

static void setup(FuzzReader *in)
{
    uint8_t conf_sel = fuzz_read_u8(in);
    uint8_t feat_sel = fuzz_read_u8(in);
    unsigned num = 1u << (fuzz_read_u8(in) % 8);
    VirtioScsiConf conf = {
        .num_queues = conf_sel & CONF_TWO_QUEUES ? 2 : 1,
    };
    Error *err = NULL;
    uint64_t features;

    memset(&f, 0, sizeof(f));
    f.sense_size = VIRTIO_SCSI_SENSE_DEFAULT_SIZE;
    f.cdb_size = VIRTIO_SCSI_CDB_DEFAULT_SIZE;
    f.vs = virtio_scsi_new(&conf, &err);
    FUZZ_CHECK(f.vs && !err);
    add_luns(conf_sel);
    features = driver_features(feat_sel);
    virtio_scsi_vu_ops.set_features(f.vs, features);

    f.nvqs = virtio_scsi_num_virtqueues(f.vs);
    FUZZ_CHECK(f.nvqs <= MAX_VQS);
    f.mem = fuzz_guest_memory(FUZZ_MEM_ALL);
    f.event_next = EVENT_GPA;
    for (unsigned i = 0; i < f.nvqs; i++) {
        FuzzRing *r = &f.r[i];

        fuzz_ring_init(r, i, num, RING_GPA(i), RING_GPA(i) + 0x1000,
                       RING_GPA(i) + 0x2000, features, 0);
        FUZZ_CHECK(virtqueue_start(r->vq, f.mem,
                                   virtio_scsi_vu_ops.handle_queue,
                                   f.vs) == 0);
        virtio_scsi_vu_ops.queue_started(f.vs, r->vq);
    }
    fuzz_run();
}

static void teardown(void)
{
    for (unsigned i = 0; i < f.nvqs; i++) {
        virtqueue_stop(f.r[i].vq);
        virtio_scsi_vu_ops.queue_drain(f.vs, f.r[i].vq);
    }
    fuzz_run();
    for (unsigned i = 0; i < f.nvqs; i++) {
        fuzz_ring_cleanup(&f.r[i]);
    }
    virtio_scsi_free(f.vs);
    if (f.unplugged) {
        scsi_disk_free(f.unplugged);
    }
    guest_memory_unref(f.mem);
}

/* ------------------------------------------------------------------------ */
/* Batches                                                                   */

typedef struct Sent {
    unsigned q;
    FuzzChain c;
    uint32_t ctrl_type;          /* control queue: the request's type */
    bool done;
} Sent;

static void check_response_code(const FuzzChain *c, uint64_t off)
{
    const uint8_t *resp = fuzz_chain_byte(c, true, off);

    FUZZ_CHECK(resp && *resp <= VIRTIO_SCSI_S_INCORRECT_LUN);
}

/*
 * A command's answer: the response header and sense area, as much as fits
 * (room), then the data-in written; sense within both the sense area and
 * the disk's buffer; and for a command that ran with data-in, the
 * residual is the data-in not written.
 */
static void check_cmd(const FuzzChain *c, uint32_t len)
{
    uint64_t resp_len = RESP_HDR + f.sense_size;
    uint64_t req_len = sizeof(VirtioScsiCmdReqHdr) + f.cdb_size;
    uint64_t room = MIN(resp_len, c->in_bytes);
    uint64_t in_data = c->in_bytes > resp_len ? c->in_bytes - resp_len : 0;
    uint32_t sense_len, resid;
    const uint8_t *response;

    /* No room for the response header: the queue breaks instead. */
    FUZZ_CHECK(c->in_bytes >= RESP_HDR);
    response = fuzz_chain_byte(c, true, offsetof(VirtioScsiCmdRespHdr,
                                                 response));
    sense_len = fuzz_chain_le32(c, true, offsetof(VirtioScsiCmdRespHdr,
                                                  sense_len));
    resid = fuzz_chain_le32(c, true, offsetof(VirtioScsiCmdRespHdr, resid));
    FUZZ_CHECK(response && *response <= VIRTIO_SCSI_S_INCORRECT_LUN);
    FUZZ_CHECK(sense_len <= room - RESP_HDR &&
               sense_len <= SCSI_SENSE_BUF_SIZE);
    FUZZ_CHECK(len >= room && len <= room + in_data);
    if (*response == VIRTIO_SCSI_S_OK && in_data &&
        c->out_bytes == req_len) {
        FUZZ_CHECK(len == room + in_data - resid);
    }
}

static void check_ctrl(const Sent *s, uint32_t len)
{
    FUZZ_CHECK(len <= s->c.in_bytes);
    if (len == 0) {
        return;
    }
    if (s->ctrl_type == VIRTIO_SCSI_T_TMF) {
        check_response_code(&s->c, offsetof(VirtioScsiCtrlTmfResp, response));
    } else if (s->ctrl_type == VIRTIO_SCSI_T_AN_QUERY ||
               s->ctrl_type == VIRTIO_SCSI_T_AN_SUBSCRIBE) {
        check_response_code(&s->c, offsetof(VirtioScsiCtrlAnResp, response));
    }
}

static void reap(Sent *sent, unsigned nsent, unsigned q)
{
    uint32_t id, len;

    while (fuzz_ring_next_used(&f.r[q], &id, &len)) {
        unsigned i;

        for (i = 0; i < nsent; i++) {
            if (sent[i].q == q && !sent[i].done && sent[i].c.head == id) {
                break;
            }
        }
        FUZZ_CHECK(i < nsent);
        sent[i].done = true;
        if (fuzz_verbose()) {
            const FuzzChain *c = &sent[i].c;

            fprintf(stderr, "queue %u head %u: len %u, in bytes 0-3 %08x, "
                    "4-7 %08x, 8-11 %08x, 12-15 %08x\n", q, id, len,
                    fuzz_chain_le32(c, true, 0), fuzz_chain_le32(c, true, 4),
                    fuzz_chain_le32(c, true, 8), fuzz_chain_le32(c, true, 12));
        }
        if (sent[i].c.bad) {
            continue;            /* the queue broke at its pop */
        }
        if (q == VIRTIO_SCSI_VQ_CONTROL) {
            check_ctrl(&sent[i], len);
        } else {
            check_cmd(&sent[i].c, len);
        }
    }
}

static void op_batch(FuzzReader *in)
{
    unsigned n = fuzz_read_u8(in) % BATCH_MAX + 1, nsent = 0;
    Sent sent[BATCH_MAX];

    fuzz_data_reset(DATA_GPA);
    for (unsigned i = 0; i < f.nvqs; i++) {
        if (i != VIRTIO_SCSI_VQ_EVENT) {
            f.r[i].desc_next = 0;
        }
    }
    for (unsigned i = 0; i < n; i++) {
        unsigned q = fuzz_read_u8(in) % f.nvqs;
        Sent *s = &sent[nsent];

        if (q == VIRTIO_SCSI_VQ_EVENT) {
            q = VIRTIO_SCSI_VQ_CONTROL;
        }
        memset(s, 0, sizeof(*s));
        s->q = q;
        if (fuzz_chain_add(&f.r[q], in, &s->c)) {
            s->ctrl_type = fuzz_chain_le32(&s->c, false, 0);
            nsent++;
        }
    }
    /* All published first: the control queue's TMFs see the commands. */
    for (unsigned i = 0; i < f.nvqs; i++) {
        if (i != VIRTIO_SCSI_VQ_EVENT) {
            fuzz_ring_kick(&f.r[i]);
        }
    }
    fuzz_run();

    for (unsigned i = 0; i < f.nvqs; i++) {
        if (i == VIRTIO_SCSI_VQ_EVENT) {
            continue;
        }
        /* null-co completes everything in the turn after it was
         * submitted, and a TMF completes with its commands. */
        FUZZ_CHECK(virtqueue_inflight(f.r[i].vq) == 0);
        reap(sent, nsent, i);
    }
    for (unsigned i = 0; i < nsent; i++) {
        bool broken = virtqueue_is_broken(f.r[sent[i].q].vq);

        FUZZ_CHECK(sent[i].done || broken);
        /* A command with no room for its response header broke its queue
         * (unless an earlier bad chain broke it first). */
        FUZZ_CHECK(sent[i].q == VIRTIO_SCSI_VQ_CONTROL || sent[i].c.bad ||
                   sent[i].c.in_bytes >= RESP_HDR || broken);
    }
}

/* ------------------------------------------------------------------------ */
/* Other operations                                                          */

/* Event buffers: single device-writable descriptors in the event area. */
static void op_event_bufs(FuzzReader *in)
{
    FuzzRing *r = &f.r[VIRTIO_SCSI_VQ_EVENT];
    unsigned n = fuzz_read_u8(in) % 4 + 1;
    uint32_t len = fuzz_read_u8(in) % 64;

    for (unsigned i = 0; i < n; i++) {
        if (r->desc_next == r->num ||
            f.event_next + len > EVENT_GPA + EVENT_AREA) {
            break;
        }
        fuzz_write_desc(r->desc_gpa, r->desc_next, f.event_next, len,
                        VRING_DESC_F_WRITE, 0);
        fuzz_ring_add_avail(r, r->desc_next++);
        f.event_next += (len + 7) & ~7u;
    }
    fuzz_ring_set_avail_idx(r, r->avail_idx);
    fuzz_ring_kick(r);
    fuzz_run();
}

/* Events the device delivered (after a capacity change, a hot-plug). */
static void reap_events(void)
{
    FuzzRing *r = &f.r[VIRTIO_SCSI_VQ_EVENT];
    uint32_t id, len;

    while (fuzz_ring_next_used(r, &id, &len)) {
        FUZZ_CHECK(id < r->desc_next);
        FUZZ_CHECK(len == 0 || len == sizeof(VirtioScsiEvent));
    }
}

/* A config write; the fields it sets when the device takes it. */
static void op_set_config(FuzzReader *in)
{
    uint8_t offset = fuzz_read_u8(in);
    uint8_t len = fuzz_read_u8(in) % 8 + 1;
    uint32_t v[2] = { fuzz_read_u32(in), fuzz_read_u32(in) };
    uint32_t le[2] = { htole32(v[0]), htole32(v[1]) };

    if (virtio_scsi_vu_ops.set_config(f.vs, (const uint8_t *)le, offset,
                                      len) < 0) {
        return;
    }
    for (unsigned i = 0; i < len / 4u; i++) {
        if (offset + 4 * i == offsetof(VirtioScsiConfig, sense_size)) {
            f.sense_size = v[i];
        } else {
            FUZZ_CHECK(offset + 4 * i == offsetof(VirtioScsiConfig,
                                                  cdb_size));
            f.cdb_size = v[i];
        }
    }
    FUZZ_CHECK(f.sense_size <= SENSE_SIZE_MAX);
    FUZZ_CHECK(f.cdb_size >= CDB_SIZE_MIN && f.cdb_size <= CDB_SIZE_MAX);
}

static void op_get_config(FuzzReader *in)
{
    VirtioScsiConfig cfg;

    FUZZ_CHECK(virtio_scsi_vu_ops.get_config(f.vs, (uint8_t *)&cfg,
                                             sizeof(cfg)) == sizeof(cfg));
    FUZZ_CHECK(le32toh(cfg.sense_size) == f.sense_size);
    FUZZ_CHECK(le32toh(cfg.cdb_size) == f.cdb_size);
}

static void op_capacity(FuzzReader *in)
{
    virtio_scsi_capacity_changed(f.vs, fuzz_read_u8(in) & 1 ? LUN_OTHER : 0);
    fuzz_run();
}

static void op_hotplug(FuzzReader *in)
{
    if (f.unplugged) {
        add_lun(0, f.unplugged);
        f.unplugged = NULL;
    } else {
        f.unplugged = virtio_scsi_remove_lun(f.vs, 0);
        FUZZ_CHECK(f.unplugged);
    }
    fuzz_run();
}

/* The operations, in opcode order (the header comment's list). */
static FuzzOpFn *const ops[] = {
    op_batch, op_event_bufs, op_set_config, op_get_config, op_capacity,
    op_hotplug,
};

FUZZ_HARNESS(setup, ops, OPS_MAX, reap_events, teardown);

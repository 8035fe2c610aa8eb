/*
 * spindle-bench: the virtio-blk device (--device=blk, the default).
 *
 * Everything about the disk comes from the virtio-blk config space read at
 * connect (vuf_blk_config()): the capacity, the logical block size
 * (BLK_SIZE), read-only (RO), and the data segment limits (SIZE_MAX,
 * SEG_MAX) that decide how many data descriptors one request of --bs
 * takes.  A request is a VufBlkReq: header, data, status byte
 * (tools/frontend/vu-blk.c lays out the chain and cuts the data at
 * size_max); it succeeded when the device wrote status OK.
 */
#include <inttypes.h>

#include <glib.h>

#include "bench-int.h"

/* Data descriptors one request may use: vu-blk.c's chain limit minus the
 * header and status descriptors. */
#define LIB_DATA_SEGS_MAX   510

static uint64_t blk_queue_count(VuFrontend *fe)
{
    const VirtioBlkConfig *cfg = vuf_blk_config(fe);
    uint64_t n = vuf_queue_num_max(fe);

    if (!(vuf_features_offered(fe) & VUF_BIT(VIRTIO_BLK_F_MQ))) {
        return 1;
    }
    if (cfg && cfg->num_queues && (!n || cfg->num_queues < n)) {
        n = cfg->num_queues;
    }
    return n;
}

/*
 * How many data descriptors a request of bs bytes takes: the data is cut
 * at size_max (vu-blk.c); more pieces than seg_max is not something a
 * driver may send.
 */
static bool blk_data_segs(VuFrontend *fe, const VirtioBlkConfig *cfg,
                          uint64_t bs, uint64_t *segs, Error **errp)
{
    uint64_t size_max = 0;

    *segs = 1;
    if (cfg && vuf_has_feature(fe, VIRTIO_BLK_F_SIZE_MAX) && cfg->size_max) {
        size_max = cfg->size_max;
        *segs = (bs + size_max - 1) / size_max;
    }
    if (cfg && vuf_has_feature(fe, VIRTIO_BLK_F_SEG_MAX) && cfg->seg_max &&
        *segs > cfg->seg_max) {
        error_setg(errp, "--bs %" PRIu64 " does not fit in one request: the "
                   "back-end takes at most %u segments of %" PRIu64
                   " bytes (size_max x seg_max = %" PRIu64 " bytes)", bs,
                   cfg->seg_max, size_max, cfg->seg_max * size_max);
        return false;
    }
    if (*segs > LIB_DATA_SEGS_MAX) {
        error_setg(errp, "--bs %" PRIu64 " needs %" PRIu64 " segments of "
                   "size_max %" PRIu64 " bytes; this tool builds at most %d",
                   bs, *segs, size_max, LIB_DATA_SEGS_MAX);
        return false;
    }
    return true;
}

static bool blk_probe(Bench *b, const BenchOpts *o, BenchDisk *d,
                      Error **errp)
{
    const VirtioBlkConfig *cfg = vuf_blk_config(b->fe);

    d->block_size = SECTOR;
    if (cfg) {
        d->have_capacity = true;
        d->capacity = cfg->capacity * SECTOR;
        if (vuf_has_feature(b->fe, VIRTIO_BLK_F_BLK_SIZE) &&
            cfg->blk_size > SECTOR) {
            d->block_size = cfg->blk_size;
        }
    }
    d->read_only = vuf_has_feature(b->fe, VIRTIO_BLK_F_RO);
    return blk_data_segs(b->fe, cfg, o->bs, &d->data_segs, errp);
}

static void *blk_req_new(Bench *b, void *opaque, uint8_t **data,
                         Error **errp)
{
    VufBlkReq *req = vufblk_req_new(b->fe, b->o->bs, errp);

    if (!req) {
        return NULL;
    }
    req->opaque = opaque;
    *data = req->data;
    return req;
}

static void blk_req_free(Bench *b, void *req)
{
    vufblk_req_free(b->fe, req);
}

static int blk_submit(BenchQueue *bq, void *opaque, uint64_t tag, bool write,
                      uint64_t off)
{
    VufBlkReq *req = opaque;
    uint64_t bs = bq->b->o->bs;
    int r = write ? vufblk_prep_write(req, off / SECTOR, bs)
                  : vufblk_prep_read(req, off / SECTOR, bs);

    return r < 0 ? r : vufblk_submit(bq->q, req, bq->b->add_flags);
}

static int blk_complete(VufQueue *q, void **opaque)
{
    VufBlkReq *req;
    int r = vufblk_complete(q, &req);

    if (r == 1) {
        *opaque = req->opaque;
    }
    return r;
}

static bool blk_check(const void *opaque, BenchIoError *e)
{
    const VufBlkReq *req = opaque;
    int status = *req->status;

    if (status == VIRTIO_BLK_S_OK) {
        return true;
    }
    *e = (BenchIoError) { .status = vufblk_status_name(status) };
    return false;
}

const BenchDevOps bench_dev_blk = {
    .name = "virtio-blk",
    .type = VUF_DEVICE_BLK,
    .first_vq = 0,
    .queue_noun = "queues",
    .queue_count = blk_queue_count,
    .probe = blk_probe,
    .req_new = blk_req_new,
    .req_free = blk_req_free,
    .submit = blk_submit,
    .complete = blk_complete,
    .check = blk_check,
};

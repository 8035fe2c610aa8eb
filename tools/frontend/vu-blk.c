/*
 * vu-blk: virtio-blk requests on top of the vu-frontend virtqueue driver.
 *
 * Theory of operation
 * -------------------
 * A VufBlkReq owns two pieces of guest memory: a 64-byte block holding the
 * request header (16 bytes), a discard/write-zeroes segment (16 bytes) and
 * the status byte, and a 4096-aligned data buffer.  vufblk_prep_*() fills
 * the header (and segment) and sets the status byte to 0xff, a value no
 * device writes, so that a completion without a status shows.
 *
 * vufblk_submit() lays the chain out as a guest driver does (virtio 1.x,
 * 5.2.6): the header (device-readable), the data (readable for OUT,
 * DISCARD and WRITE_ZEROES, writable for IN and GET_ID), then the status
 * byte (writable).  The data is cut into req->data_segs pieces (in 512-byte
 * units where possible) and each piece further at the device's size_max;
 * more data segments than seg_max is refused with -E2BIG, as a driver
 * would never send them.
 *
 * Data path functions belong to the queue's thread; vufblk_req_new/free
 * use the thread-safe guest memory allocator.
 */

#include <errno.h>
#include <string.h>

#include <glib.h>

#include "vu-frontend-int.h"

/* Most descriptors one request may use (stack array in vufblk_submit). */
#define BLK_SEGS_MAX        512
#define SMALL_BLOCK_BYTES   64
#define STATUS_NONE         0xff

VufBlkReq *vufblk_req_new(VuFrontend *fe, size_t data_cap, Error **errp)
{
    uint64_t small_gpa, data_gpa = 0;
    uint8_t *data, *small;
    VufBlkReq *req;

    small = vuf_req_mem_alloc(fe, SMALL_BLOCK_BYTES, SMALL_BLOCK_BYTES,
                              &small_gpa, data_cap, &data, &data_gpa,
                              "a request", errp);
    if (!small) {
        return NULL;
    }
    req = g_new(VufBlkReq, 1);
    *req = (VufBlkReq) {
        .hdr = (VirtioBlkOutHdr *)small, .hdr_gpa = small_gpa,
        .dwz = (VirtioBlkSeg *)(small + 16), .dwz_gpa = small_gpa + 16,
        .status = small + 32, .status_gpa = small_gpa + 32,
        .data = data, .data_gpa = data_gpa, .data_cap = data_cap,
        .data_segs = 1,
    };
    return req;
}

void vufblk_req_free(VuFrontend *fe, VufBlkReq *req)
{
    if (req) {
        vuf_req_mem_free(fe, req->hdr, req->data);
        g_free(req);
    }
}

static int prep(VufBlkReq *req, uint32_t type, uint64_t sector,
                size_t data_len, bool data_in, bool use_dwz)
{
    if (!use_dwz && data_len > req->data_cap) {
        return -EINVAL;
    }
    req->hdr->type = type;
    req->hdr->reserved = 0;
    req->hdr->sector = sector;
    req->data_len = data_len;
    req->data_in = data_in;
    req->use_dwz = use_dwz;
    *req->status = STATUS_NONE;
    return 0;
}

int vufblk_prep_read(VufBlkReq *req, uint64_t sector, size_t len)
{
    return prep(req, VIRTIO_BLK_T_IN, sector, len, true, false);
}

int vufblk_prep_write(VufBlkReq *req, uint64_t sector, size_t len)
{
    return prep(req, VIRTIO_BLK_T_OUT, sector, len, false, false);
}

int vufblk_prep_flush(VufBlkReq *req)
{
    return prep(req, VIRTIO_BLK_T_FLUSH, 0, 0, false, false);
}

int vufblk_prep_get_id(VufBlkReq *req)
{
    return prep(req, VIRTIO_BLK_T_GET_ID, 0, VIRTIO_BLK_ID_BYTES, true, false);
}

static int prep_dwz(VufBlkReq *req, uint32_t type, uint64_t sector,
                    uint32_t nsectors, uint32_t flags)
{
    *req->dwz = (VirtioBlkSeg) {
        .sector = sector,
        .num_sectors = nsectors,
        .flags = flags,
    };
    return prep(req, type, 0, sizeof(VirtioBlkSeg), false, true);
}

int vufblk_prep_discard(VufBlkReq *req, uint64_t sector, uint32_t nsectors)
{
    return prep_dwz(req, VIRTIO_BLK_T_DISCARD, sector, nsectors, 0);
}

int vufblk_prep_write_zeroes(VufBlkReq *req, uint64_t sector,
                             uint32_t nsectors, bool unmap)
{
    return prep_dwz(req, VIRTIO_BLK_T_WRITE_ZEROES, sector, nsectors,
                    unmap ? VIRTIO_BLK_DWZ_F_UNMAP : 0);
}

/* The longest descriptor the device takes (size_max), or UINT32_MAX. */
static uint32_t seg_len_limit(VuFrontend *fe)
{
    const VirtioBlkConfig *cfg = vuf_blk_config(fe);

    if (cfg && vuf_has_feature(fe, VIRTIO_BLK_F_SIZE_MAX) && cfg->size_max) {
        return cfg->size_max;
    }
    return UINT32_MAX;
}

/* Append the data of req to segs[*n], cut as the theory comment says. */
static int add_data_segs(VufQueue *q, const VufBlkReq *req, VufSeg *segs,
                         unsigned *n)
{
    VuFrontend *fe = vufq_frontend(q);
    const VirtioBlkConfig *cfg = vuf_blk_config(fe);
    unsigned first = *n;
    int r;

    r = vufq_add_data_segs(segs, n, BLK_SEGS_MAX, req->data_gpa,
                           req->data_len, req->data_segs, seg_len_limit(fe),
                           req->data_in);
    if (r < 0) {
        return r;
    }
    if (cfg && vuf_has_feature(fe, VIRTIO_BLK_F_SEG_MAX) && cfg->seg_max &&
        *n - first > cfg->seg_max) {
        return -E2BIG;
    }
    return 0;
}

int vufblk_submit(VufQueue *q, VufBlkReq *req, unsigned flags)
{
    VufSeg segs[BLK_SEGS_MAX];
    unsigned n = 0;
    int r;

    segs[n++] = (VufSeg) { req->hdr_gpa, sizeof(VirtioBlkOutHdr), false };
    if (req->use_dwz) {
        segs[n++] = (VufSeg) { req->dwz_gpa, sizeof(VirtioBlkSeg), false };
    } else if (req->data_len) {
        r = add_data_segs(q, req, segs, &n);
        if (r < 0) {
            return r;
        }
    }
    segs[n++] = (VufSeg) { req->status_gpa, 1, true };
    r = vufq_add(q, segs, n, flags, req);
    return r < 0 ? r : 0;
}

int vufblk_complete(VufQueue *q, VufBlkReq **req)
{
    void *token;
    int r = vufq_get_used(q, &token, NULL);

    if (r == 1) {
        *req = token;
    }
    return r;
}

int vufblk_do(VufQueue *q, VufBlkReq *req, unsigned flags,
              int64_t timeout_ns)
{
    int r = vufq_do_one(q, vufblk_submit(q, req, flags), req, timeout_ns,
                        NULL);

    return r < 0 ? r : *req->status;
}

const char *vufblk_status_name(int status)
{
    static const char *const names[] = {
        [VIRTIO_BLK_S_OK] = "OK",
        [VIRTIO_BLK_S_IOERR] = "IOERR",
        [VIRTIO_BLK_S_UNSUPP] = "UNSUPP",
    };

    return status == STATUS_NONE ? "none"
           : vuf_table_name(names, G_N_ELEMENTS(names), status, "unknown");
}

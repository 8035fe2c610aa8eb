/*
 * vu-blk: virtio-blk requests on a vu-frontend queue (vu-blk.c).
 */
#ifndef SPINDLE_TOOLS_VU_BLK_H
#define SPINDLE_TOOLS_VU_BLK_H

#include "vu-types.h"

/* ------------------------------------------------------------------------ */
/* virtio-blk requests                                                       */

/*
 * A request whose header, status byte and data buffer live in guest
 * memory.  The caller fills it with a vufblk_prep_*() call, submits it,
 * and after completion reads *status and (for reads) data.
 */
typedef struct VufBlkReq {
    VirtioBlkOutHdr *hdr;          /* guest memory */
    VirtioBlkSeg *dwz;          /* guest memory: discard/write-zeroes seg */
    uint8_t *status;            /* guest memory */
    uint8_t *data;              /* guest memory, data_cap bytes */
    uint64_t hdr_gpa, dwz_gpa, status_gpa, data_gpa;
    size_t data_cap;
    /* Set by vufblk_prep_*(): */
    size_t data_len;            /* bytes of data in this request */
    bool data_in;               /* the device writes the data (IN, GET_ID) */
    bool use_dwz;               /* the data is *dwz */
    /* Set by the caller: */
    unsigned data_segs;         /* split data into this many descriptors
                                 * (>= 1; default 1) */
    void *opaque;               /* anything */
} VufBlkReq;

/*
 * Allocate a request with data_cap bytes of data buffer (4096-aligned) in
 * fe's guest memory.  NULL (errp set) when the memory is exhausted.
 * Thread-safe.  Free with vufblk_req_free().
 */
VufBlkReq *vufblk_req_new(VuFrontend *fe, size_t data_cap, Error **errp);
void vufblk_req_free(VuFrontend *fe, VufBlkReq *req);

/*
 * Fill the request.  Offsets and lengths are in bytes (multiples of 512)
 * or sectors as named.  Return 0, or -EINVAL if len exceeds data_cap.  The
 * status byte is set to 0xff so that a device that never writes it shows.
 */
int vufblk_prep_read(VufBlkReq *req, uint64_t sector, size_t len);
int vufblk_prep_write(VufBlkReq *req, uint64_t sector, size_t len);
int vufblk_prep_flush(VufBlkReq *req);
int vufblk_prep_get_id(VufBlkReq *req);
int vufblk_prep_discard(VufBlkReq *req, uint64_t sector, uint32_t nsectors);
int vufblk_prep_write_zeroes(VufBlkReq *req, uint64_t sector,
                             uint32_t nsectors, bool unmap);

/*
 * Add the request's chain (header, data split in data_segs descriptors and
 * at size_max, status) to q with vufq_add() flags; the token is req.
 * Does not kick.  Returns 0 or vufq_add()'s -errno.
 */
int vufblk_submit(VufQueue *q, VufBlkReq *req, unsigned flags);

/*
 * Harvest one completed request: 1 and *req, 0 if none, -EIO as
 * vufq_get_used().
 */
int vufblk_complete(VufQueue *q, VufBlkReq **req);

/*
 * Submit req, kick, and wait for it (timeout_ns < 0: forever).  Nothing
 * else may be in flight on q.  Returns the status byte (VIRTIO_BLK_S_*, or
 * 0xff if the device did not write it), or -errno as vufblk_submit() /
 * vufq_wait().
 */
int vufblk_do(VufQueue *q, VufBlkReq *req, unsigned flags,
              int64_t timeout_ns);

/* "OK", "IOERR", "UNSUPP", "none" (0xff) or "unknown". Any thread. */
const char *vufblk_status_name(int status);

#endif

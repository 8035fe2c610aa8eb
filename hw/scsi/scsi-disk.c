/*
 * SCSI disk emulation over a block node (SPC-4 / SBC-3): requests and the
 * data path.
 *
 * Theory of operation
 * -------------------
 * scsi_disk_submit() copies the CDB into the request's private part
 * (ScsiDiskReq, inside ScsiRequest.priv: no allocation) and from then on
 * reads only the copy, so an initiator that rewrites the CDB in guest
 * memory while we work cannot make us see two values.  Then, in order:
 *
 *   1. a pending unit attention is reported (CHECK CONDITION) to any
 *      command but INQUIRY, REPORT LUNS and REQUEST SENSE, and cleared;
 *   2. the opcode is looked up in scsi_disk_commands[], a const table
 *      giving each supported opcode its handler, CDB length and data
 *      direction; unknown opcodes get INVALID COMMAND OPERATION CODE;
 *   3. a CDB shorter than its opcode's length (cdb_len), or with NACA set
 *      in the CONTROL byte (we have no ACA), gets INVALID FIELD IN CDB;
 *   4. data buffers in a direction the command does not use get
 *      SCSI_XFER_WRONG_DIRECTION (not executed);
 *   5. the handler validates its fields and either answers at once (the
 *      commands of scsi-disk-info.c, errors) or starts block I/O.
 *
 * Every check happens before any I/O starts.  READ and WRITE go to the
 * node zero-copy: the BlockRequest's iovec is the caller's array when the
 * transfer ends on an element boundary (the usual case), else a trimmed
 * copy (inline for up to SCSI_DISK_INLINE_IOVS elements, else allocated).
 * A buffer shorter than the transfer is SCSI_XFER_OVERRUN (not executed).
 *
 * Commands that need several block requests run them one after the other
 * with the request's single BlockRequest, their progress in ScsiDiskReq:
 * UNMAP (one DISCARD per descriptor, all validated and copied first),
 * WRITE SAME with a non-zero block (the block repeated into a buffer of at
 * most SCSI_DISK_CHUNK_MAX bytes, written chunk by chunk) and VERIFY with
 * BYTCHK=1 (read a chunk, compare it with the data-out).  WRITE SAME of a
 * zero block (or NDOB) is one WRITE_ZEROES, with BLOCK_REQ_MAY_UNMAP if
 * the UNMAP bit is set.
 *
 * Write caching: writes carry BLOCK_REQ_FUA when the CDB's FUA bit is set
 * or the caching page's WCE is 0 (then every write must be stable when it
 * completes).
 *
 * Errors from the node become sense data in scsi_disk_fail_errno():
 * -ENOSPC is DATA PROTECT, SPACE ALLOCATION FAILED WRITE PROTECT (the
 * host ran out of room for a thin image); -EPERM/-EROFS DATA PROTECT,
 * WRITE PROTECTED; -EINVAL/-EOPNOTSUPP ILLEGAL REQUEST, INVALID FIELD IN
 * CDB (the node refused what we asked: for UNMAP and WRITE SAME, Linux
 * then stops sending them); -ENOMEM/-EAGAIN status BUSY (try again);
 * anything else MEDIUM ERROR, UNRECOVERED READ ERROR for reads and WRITE
 * ERROR for the rest: the `report` policy.  scsi_disk_io_error() applies
 * rerror / werror first (ignore: on as if it succeeded; stop: to the
 * transport's hold, then scsi_req_retry() submits the same block request,
 * the step that failed: a multi-step command only advances on success).
 *
 * Threads: a request runs and completes in the thread of its BlockQueue's
 * context.  The LUN's shared state (pending unit attentions, WCE,
 * D_SENSE) is a few independent atomics; nothing takes a lock.
 */
#include "config-host.h"
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <glib.h>

#include "block/block.h"
#include "hw/scsi/scsi-defs.h"
#include "hw/scsi/scsi-disk.h"
#include "scsi-disk-int.h"
#include "util/error.h"
#include "util/iov.h"
#include "util/trace.h"

/* Largest buffer of one WRITE SAME or VERIFY step. */
#define SCSI_DISK_CHUNK_MAX         (UINT32_C(1) << 20)

/* Limits used when the node sets none (bytes). */
#define SCSI_DISK_DEFAULT_MAX_XFER  (UINT64_C(32) << 20)
#define SCSI_DISK_DEFAULT_MAX_DWZ   (UINT64_C(1) << 30)

#define SCSI_DISK_DEFAULT_VENDOR    "SPINDLE"
#define SCSI_DISK_DEFAULT_PRODUCT   "SPINDLE DISK"

/* ------------------------------------------------------------------------ */
/* Shared helpers                                                            */

uint64_t scsi_disk_num_blocks(ScsiDisk *d)
{
    int64_t len = block_node_get_length(d->bs);

    return len > 0 ? (uint64_t)len >> d->block_bits : 0;
}

static bool scsi_disk_range_ok(ScsiDisk *d, uint64_t lba, uint64_t nblocks)
{
    uint64_t cap = scsi_disk_num_blocks(d);

    return lba <= cap && nblocks <= cap - lba;
}

static bool scsi_disk_wce(ScsiDisk *d)
{
    return atomic_load_explicit(&d->wce, memory_order_relaxed);
}

/*
 * Compare buf[0..len) with iov's bytes from offset on.  Returns the index
 * of the first difference, or len if they are equal (bytes missing from
 * iov count as different).
 */
static size_t scsi_iov_compare(const struct iovec *iov, int niov,
                               size_t offset, const uint8_t *buf, size_t len)
{
    size_t done = 0;

    for (int i = 0; i < niov && done < len; i++) {
        const uint8_t *p;
        size_t n;

        if (offset >= iov[i].iov_len) {
            offset -= iov[i].iov_len;
            continue;
        }
        p = (const uint8_t *)iov[i].iov_base + offset;
        n = MIN(iov[i].iov_len - offset, len - done);
        if (memcmp(p, buf + done, n) != 0) {
            for (size_t j = 0; j < n; j++) {
                if (p[j] != buf[done + j]) {
                    return done + j;
                }
            }
        }
        done += n;
        offset = 0;
    }
    return done;
}

static bool scsi_buf_is_zero(const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i]) {
            return false;
        }
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Sense data and unit attentions                                            */

unsigned scsi_sense_build(uint8_t *sense, bool descriptor, uint8_t key,
                          uint8_t asc, uint8_t ascq, bool has_info,
                          uint64_t info)
{
    if (descriptor) {
        uint8_t *desc = sense + SCSI_SENSE_DESC_HDR_LEN;

        memset(sense, 0, SCSI_SENSE_DESC_HDR_LEN + SCSI_SENSE_DESC_INFO_LEN);
        sense[0] = SCSI_SENSE_DESC_CURRENT;
        sense[1] = key & 0x0f;
        sense[2] = asc;
        sense[3] = ascq;
        if (!has_info) {
            return SCSI_SENSE_DESC_HDR_LEN;
        }
        sense[SCSI_SENSE_DESC_ADD_LEN] = SCSI_SENSE_DESC_INFO_LEN;
        desc[0] = SCSI_SENSE_DESC_TYPE_INFO;
        desc[1] = SCSI_SENSE_DESC_INFO_LEN - 2;
        desc[2] = SCSI_SENSE_VALID;
        st_be64(desc + 4, info);
        return SCSI_SENSE_DESC_HDR_LEN + SCSI_SENSE_DESC_INFO_LEN;
    }

    memset(sense, 0, SCSI_SENSE_FIXED_LEN);
    sense[0] = SCSI_SENSE_FIXED_CURRENT;
    sense[2] = key & 0x0f;
    /* The fixed format has 4 bytes of INFORMATION: VALID only if it fits. */
    if (has_info && info <= UINT32_MAX) {
        sense[0] |= SCSI_SENSE_VALID;
        st_be32(sense + SCSI_SENSE_FIXED_INFO, (uint32_t)info);
    }
    sense[SCSI_SENSE_FIXED_ADD_LEN] = SCSI_SENSE_FIXED_LEN - 8;
    sense[SCSI_SENSE_FIXED_ASC] = asc;
    sense[SCSI_SENSE_FIXED_ASCQ] = ascq;
    return SCSI_SENSE_FIXED_LEN;
}

unsigned scsi_build_sense(uint8_t *sense, bool descriptor, uint8_t key,
                          uint8_t asc, uint8_t ascq)
{
    return scsi_sense_build(sense, descriptor, key, asc, ascq, false, 0);
}

static void scsi_disk_raise_ua(ScsiDisk *d, unsigned bit)
{
    /* Relaxed: the bit is the whole message (see struct ScsiDisk). */
    atomic_fetch_or_explicit(&d->ua_pending, bit, memory_order_relaxed);
}

void scsi_disk_reset(ScsiDisk *d)
{
    scsi_disk_raise_ua(d, SCSI_DISK_UA_RESET);
}

void scsi_disk_capacity_changed(ScsiDisk *d)
{
    scsi_disk_raise_ua(d, SCSI_DISK_UA_CAPACITY);
}

bool scsi_disk_take_unit_attention(ScsiDisk *d, uint8_t *asc, uint8_t *ascq)
{
    unsigned pending = atomic_load_explicit(&d->ua_pending,
                                            memory_order_relaxed);

    /*
     * Several queues may race for one unit attention: the compare-exchange
     * hands each bit to exactly one command.
     */
    while (pending) {
        unsigned bit = pending & -pending;

        if (atomic_compare_exchange_weak_explicit(&d->ua_pending, &pending,
                                                  pending & ~bit,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed)) {
            if (bit == SCSI_DISK_UA_RESET) {
                *asc = SCSI_ASC_RESET_OCCURRED;
                *ascq = SCSI_ASCQ_POWER_ON_RESET_OCCURRED;
            } else {
                *asc = SCSI_ASC_PARAMETERS_CHANGED;
                *ascq = SCSI_ASCQ_CAPACITY_DATA_CHANGED;
            }
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------------------ */
/* Finishing requests                                                        */

void scsi_req_complete(ScsiRequest *req)
{
    ScsiDiskReq *r = scsi_disk_req(req);

    g_free(r->heap);
    r->heap = NULL;
    SPINDLE_TRACE3(scsi_disk_complete, r->cdb[0], req->status,
                   req->xfer_error);
    req->cb(req);
}

static void scsi_req_fail_info(ScsiRequest *req, uint8_t key, uint8_t asc,
                               uint8_t ascq, bool has_info, uint64_t info)
{
    ScsiDisk *d = scsi_disk_req(req)->d;
    bool desc = atomic_load_explicit(&d->d_sense, memory_order_relaxed);

    req->status = SCSI_STATUS_CHECK_CONDITION;
    req->in_done = 0;
    req->sense_len = scsi_sense_build(req->sense, desc, key, asc, ascq,
                                      has_info, info);
    scsi_req_complete(req);
}

void scsi_req_fail(ScsiRequest *req, uint8_t key, uint8_t asc, uint8_t ascq)
{
    scsi_req_fail_info(req, key, asc, ascq, false, 0);
}

void scsi_req_invalid_cdb(ScsiRequest *req)
{
    scsi_req_fail(req, SCSI_SENSE_ILLEGAL_REQUEST,
                  SCSI_ASC_INVALID_FIELD_IN_CDB,
                  SCSI_ASCQ_INVALID_FIELD_IN_CDB);
}

void scsi_req_invalid_param(ScsiRequest *req)
{
    scsi_req_fail(req, SCSI_SENSE_ILLEGAL_REQUEST,
                  SCSI_ASC_INVALID_FIELD_IN_PARAM_LIST,
                  SCSI_ASCQ_INVALID_FIELD_IN_PARAM_LIST);
}

static void scsi_req_invalid_opcode(ScsiRequest *req)
{
    scsi_req_fail(req, SCSI_SENSE_ILLEGAL_REQUEST, SCSI_ASC_INVALID_OPCODE,
                  SCSI_ASCQ_INVALID_OPCODE);
}

void scsi_req_param_length_error(ScsiRequest *req)
{
    scsi_req_fail(req, SCSI_SENSE_ILLEGAL_REQUEST,
                  SCSI_ASC_PARAMETER_LIST_LENGTH_ERROR,
                  SCSI_ASCQ_PARAMETER_LIST_LENGTH_ERROR);
}

static void scsi_req_lba_out_of_range(ScsiRequest *req)
{
    scsi_req_fail(req, SCSI_SENSE_ILLEGAL_REQUEST, SCSI_ASC_LBA_OUT_OF_RANGE,
                  SCSI_ASCQ_LBA_OUT_OF_RANGE);
}

static void scsi_req_write_protected(ScsiRequest *req)
{
    scsi_req_fail(req, SCSI_SENSE_DATA_PROTECT, SCSI_ASC_WRITE_PROTECTED,
                  SCSI_ASCQ_WRITE_PROTECTED);
}

void scsi_req_xfer_fail(ScsiRequest *req, ScsiXferError err)
{
    req->xfer_error = err;
    req->in_done = 0;
    scsi_req_complete(req);
}

bool scsi_req_want_data_out(ScsiRequest *req, uint64_t len)
{
    if (req->out_len < len) {
        scsi_req_xfer_fail(req, SCSI_XFER_OVERRUN);
        return false;
    }
    if (len == 0) {
        scsi_req_complete(req);
        return false;
    }
    return true;
}

void scsi_req_reply(ScsiRequest *req, const uint8_t *buf, size_t len,
                    size_t alloc)
{
    size_t n = MIN(MIN(len, alloc), req->in_len);

    req->in_done = iov_from_buf(req->in_iov, req->in_niov, 0, buf, n);
    scsi_req_complete(req);
}

/* A failed block request: see the theory comment for the mapping. */
static void scsi_disk_fail_errno(ScsiRequest *req, int ret)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    bool read = r->kind == SCSI_IO_READ || r->kind == SCSI_IO_VERIFY;

    switch (-ret) {
    case ENOSPC:
        scsi_req_fail(req, SCSI_SENSE_DATA_PROTECT, SCSI_ASC_WRITE_PROTECTED,
                      SCSI_ASCQ_SPACE_ALLOC_FAILED_WRITE_PROTECT);
        break;
    case EPERM:
    case EROFS:
        scsi_req_write_protected(req);
        break;
    case EINVAL:
    case EOPNOTSUPP:
        scsi_req_invalid_cdb(req);
        break;
    case ENOMEM:
    case EAGAIN:
        req->status = SCSI_STATUS_BUSY;
        req->in_done = 0;
        scsi_req_complete(req);
        break;
    default:
        if (read) {
            scsi_req_fail(req, SCSI_SENSE_MEDIUM_ERROR,
                          SCSI_ASC_UNRECOVERED_READ_ERROR,
                          SCSI_ASCQ_UNRECOVERED_READ_ERROR);
        } else {
            scsi_req_fail(req, SCSI_SENSE_MEDIUM_ERROR, SCSI_ASC_WRITE_ERROR,
                          SCSI_ASCQ_WRITE_ERROR);
        }
        break;
    }
}

/* ------------------------------------------------------------------------ */
/* Block I/O                                                                 */

static void scsi_disk_io_done(BlockRequest *breq, int ret);

static void scsi_disk_submit_io(ScsiRequest *req, BlockOp op,
                                uint64_t offset, uint64_t bytes,
                                struct iovec *iov, int niov)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    BlockRequest *breq = &r->breq;

    breq->op = op;
    breq->flags = op == BLOCK_OP_READ || op == BLOCK_OP_FLUSH ? 0 : r->bflags;
    breq->offset = (int64_t)offset;
    breq->bytes = (int64_t)bytes;
    breq->iov = iov;
    breq->niov = niov;
    breq->cb = scsi_disk_io_done;
    breq->opaque = req;
    block_queue_submit(r->q, breq);
}

/* The size of the next WRITE SAME / VERIFY step. */
static uint64_t scsi_disk_chunk_bytes(const ScsiDiskReq *r)
{
    return MIN(r->end - r->pos, (uint64_t)SCSI_DISK_CHUNK_MAX);
}

static void scsi_disk_chunk_step(ScsiRequest *req, BlockOp op)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    uint64_t n = scsi_disk_chunk_bytes(r);

    r->u.iov[0] = (struct iovec) { .iov_base = r->heap, .iov_len = n };
    scsi_disk_submit_io(req, op, r->pos, n, r->u.iov, 1);
}

static void scsi_disk_unmap_step(ScsiRequest *req)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    const ScsiUnmapRange *ranges = r->heap ? r->heap : r->u.ranges;
    const ScsiUnmapRange *rg;

    if (r->next_range == r->nranges) {
        scsi_req_complete(req);
        return;
    }
    rg = &ranges[r->next_range++];
    scsi_disk_submit_io(req, BLOCK_OP_DISCARD, rg->lba << r->d->block_bits,
                        (uint64_t)rg->nblocks << r->d->block_bits, NULL, 0);
}

/* VERIFY BYTCHK=1: compare the chunk just read with the data-out. */
static bool scsi_disk_verify_chunk(ScsiRequest *req)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    uint64_t n = scsi_disk_chunk_bytes(r);
    size_t off = r->pos - r->start;
    size_t diff = scsi_iov_compare(req->out_iov, req->out_niov, off,
                                   r->heap, n);

    if (diff < n) {
        /* SBC: INFORMATION is the offset in the data-out of the first
         * byte that differs. */
        scsi_req_fail_info(req, SCSI_SENSE_MISCOMPARE,
                           SCSI_ASC_MISCOMPARE_DURING_VERIFY,
                           SCSI_ASCQ_MISCOMPARE_DURING_VERIFY, true,
                           off + diff);
        return false;
    }
    return true;
}

/* Apply the LUN's error policy to req's failure ret: true to go on as if
 * it had succeeded (ignore), false once req is failed or held. */
static bool scsi_disk_io_error(ScsiRequest *req, int ret)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    bool read = r->kind == SCSI_IO_READ || r->kind == SCSI_IO_VERIFY;
    BlockErrorAction a = block_error_action(read ? r->d->rerror
                                                 : r->d->werror, ret);

    if (a == BLOCK_ERROR_ACTION_IGNORE) {
        return true;
    }
    if (a != BLOCK_ERROR_ACTION_STOP || !req->hold ||
        !req->hold(req, ret, !read)) {
        scsi_disk_fail_errno(req, ret);
    }
    return false;
}

void scsi_req_retry(ScsiRequest *req)
{
    ScsiDiskReq *r = scsi_disk_req(req);

    g_assert(aio_context_in_home_thread(block_queue_get_aio_context(r->q)));
    block_queue_submit(r->q, &r->breq);
}

static void scsi_disk_io_done(BlockRequest *breq, int ret)
{
    ScsiRequest *req = breq->opaque;
    ScsiDiskReq *r = scsi_disk_req(req);

    g_assert(aio_context_in_home_thread(block_queue_get_aio_context(r->q)));
    if (G_UNLIKELY(ret < 0) && !scsi_disk_io_error(req, ret)) {
        return;
    }
    switch ((ScsiIoKind)r->kind) {
    case SCSI_IO_READ:
        req->in_done = r->end - r->start;
        scsi_req_complete(req);
        break;
    case SCSI_IO_WRITE:
    case SCSI_IO_FLUSH:
        scsi_req_complete(req);
        break;
    case SCSI_IO_UNMAP:
        scsi_disk_unmap_step(req);
        break;
    case SCSI_IO_WRITE_SAME:
        r->pos += scsi_disk_chunk_bytes(r);
        if (r->pos == r->end) {
            scsi_req_complete(req);
        } else {
            scsi_disk_chunk_step(req, BLOCK_OP_WRITE);
        }
        break;
    case SCSI_IO_VERIFY:
        if (!scsi_disk_verify_chunk(req)) {
            break;
        }
        r->pos += scsi_disk_chunk_bytes(r);
        if (r->pos == r->end) {
            scsi_req_complete(req);
        } else {
            scsi_disk_chunk_step(req, BLOCK_OP_READ);
        }
        break;
    }
}

/*
 * Point the BlockRequest at the first bytes of (iov, niov): the caller's
 * array itself when they end on an element boundary, else a trimmed copy.
 * False if the array holds fewer bytes than that (the caller's lengths
 * were wrong).
 */
static bool scsi_disk_map_data(ScsiDiskReq *r, struct iovec *iov, int niov,
                               uint64_t bytes, struct iovec **out_iov,
                               int *out_niov)
{
    uint64_t sum = 0;
    struct iovec *copy;
    int k = 0;

    while (k < niov && sum < bytes) {
        sum += iov[k].iov_len;
        k++;
    }
    if (sum < bytes) {
        return false;
    }
    *out_niov = k;
    if (sum == bytes) {
        *out_iov = iov;
        return true;
    }
    if (k <= SCSI_DISK_INLINE_IOVS) {
        copy = r->u.iov;
    } else {
        copy = g_new(struct iovec, k);
        r->heap = copy;
    }
    memcpy(copy, iov, k * sizeof(struct iovec));
    copy[k - 1].iov_len -= sum - bytes;
    *out_iov = copy;
    return true;
}

/* ------------------------------------------------------------------------ */
/* CDB fields                                                                */

/*
 * The LBA and the block count of a READ/WRITE-like CDB, by its group
 * (the top 3 bits of the opcode say the CDB's layout): 6-byte READ/WRITE
 * (a count of 0 means 256), 10-byte (VERIFY, SYNCHRONIZE CACHE, WRITE
 * SAME, too), 12-byte and 16-byte.
 */
static void scsi_cdb_lba_count(const uint8_t *cdb, uint64_t *lba,
                               uint32_t *count)
{
    switch (cdb[0] >> 5) {
    case 0:
        *lba = ld_be24(cdb + 1) & ((SCSI_READ6_LBA_MASK << 16) | 0xffff);
        *count = cdb[4] ? cdb[4] : 256;
        break;
    case 1:
    case 2:
        *lba = ld_be32(cdb + 2);
        *count = ld_be16(cdb + 7);
        break;
    case 4:
        *lba = ld_be64(cdb + 2);
        *count = ld_be32(cdb + 10);
        break;
    case 5:
        *lba = ld_be32(cdb + 2);
        *count = ld_be32(cdb + 6);
        break;
    default:
        g_assert_not_reached();     /* only the table's opcodes get here */
    }
}

/* Byte 1 of a READ/WRITE CDB (flags); READ(6)/WRITE(6) have none. */
static uint8_t scsi_cdb_rw_flags(const uint8_t *cdb)
{
    return cdb[0] >> 5 == 0 ? 0 : cdb[1];
}

/* ------------------------------------------------------------------------ */
/* Commands                                                                  */

static void scsi_disk_cmd_test_unit_ready(ScsiRequest *req)
{
    scsi_req_complete(req);
}

static void scsi_disk_cmd_prevent_allow(ScsiRequest *req)
{
    /* The medium is not removable: preventing its removal is a no-op. */
    scsi_req_complete(req);
}

static void scsi_disk_start_flush(ScsiRequest *req)
{
    ScsiDiskReq *r = scsi_disk_req(req);

    r->kind = SCSI_IO_FLUSH;
    scsi_disk_submit_io(req, BLOCK_OP_FLUSH, 0, 0, NULL, 0);
}

/*
 * START STOP UNIT: the medium cannot stop or be ejected, so every
 * combination is accepted (LOEJ included) and the unit stays ready.  A
 * stop (START=0, no power condition) without NO_FLUSH first writes the
 * cache back, as SBC asks of a unit that stops.
 */
static void scsi_disk_cmd_start_stop(ScsiRequest *req)
{
    const uint8_t *cdb = scsi_disk_req(req)->cdb;
    uint8_t power = cdb[4] >> SCSI_START_STOP_POWER_SHIFT;

    if (power == 0 && !(cdb[4] & SCSI_START_STOP_START) &&
        !(cdb[4] & SCSI_START_STOP_NO_FLUSH)) {
        scsi_disk_start_flush(req);
        return;
    }
    scsi_req_complete(req);
}

/*
 * SYNCHRONIZE CACHE (10/16): the range is checked, then the whole node is
 * flushed.  IMMED is ignored: status comes after the flush, later than
 * IMMED asks for but never claiming more durability than there is.
 */
static void scsi_disk_cmd_sync_cache(ScsiRequest *req)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    uint64_t lba;
    uint32_t count;

    scsi_cdb_lba_count(r->cdb, &lba, &count);
    if (!scsi_disk_range_ok(r->d, lba, count)) {
        scsi_req_lba_out_of_range(req);
        return;
    }
    scsi_disk_start_flush(req);
}

static void scsi_disk_cmd_rw(ScsiRequest *req, bool write)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    ScsiDisk *d = r->d;
    uint8_t flags = scsi_cdb_rw_flags(r->cdb);
    struct iovec *iov;
    uint64_t lba, bytes, avail;
    uint32_t count;
    int niov;

    scsi_cdb_lba_count(r->cdb, &lba, &count);
    /* No protection information; a transfer above VPD 0xB0's maximum is
     * an invalid transfer length (SBC). */
    if ((flags & SCSI_CDB_PROTECT_MASK) || count > d->max_xfer_blocks) {
        scsi_req_invalid_cdb(req);
        return;
    }
    if (write && !d->writable) {
        scsi_req_write_protected(req);
        return;
    }
    if (!scsi_disk_range_ok(d, lba, count)) {
        scsi_req_lba_out_of_range(req);
        return;
    }
    bytes = (uint64_t)count << d->block_bits;
    avail = write ? req->out_len : req->in_len;
    if (avail < bytes) {
        scsi_req_xfer_fail(req, SCSI_XFER_OVERRUN);
        return;
    }
    if (count == 0) {
        scsi_req_complete(req);     /* SBC: not an error, nothing moves */
        return;
    }
    if (!scsi_disk_map_data(r, write ? req->out_iov : req->in_iov,
                            write ? req->out_niov : req->in_niov, bytes,
                            &iov, &niov)) {
        scsi_req_xfer_fail(req, SCSI_XFER_OVERRUN);
        return;
    }
    r->kind = write ? SCSI_IO_WRITE : SCSI_IO_READ;
    r->start = lba << d->block_bits;
    r->end = r->start + bytes;
    if (write && ((flags & SCSI_CDB_FUA) || !scsi_disk_wce(d))) {
        r->bflags = BLOCK_REQ_FUA;
    }
    SPINDLE_TRACE3(scsi_disk_rw, r->cdb[0], lba, count);
    scsi_disk_submit_io(req, write ? BLOCK_OP_WRITE : BLOCK_OP_READ,
                        r->start, bytes, iov, niov);
}

static void scsi_disk_cmd_read(ScsiRequest *req)
{
    scsi_disk_cmd_rw(req, false);
}

static void scsi_disk_cmd_write(ScsiRequest *req)
{
    scsi_disk_cmd_rw(req, true);
}

/*
 * VERIFY (10/16).  BYTCHK=0: the range is checked and the command
 * succeeds (the node has no medium check of its own).  BYTCHK=1: the
 * range is read chunk by chunk and compared with the data-out; the first
 * difference is a MISCOMPARE.  BYTCHK=3 (one block compared with every
 * block) is not supported, and 2 is reserved: INVALID FIELD IN CDB.
 */
static void scsi_disk_cmd_verify(ScsiRequest *req)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    ScsiDisk *d = r->d;
    uint8_t flags = r->cdb[1];
    unsigned bytchk = (flags & SCSI_VERIFY_BYTCHK_MASK) >>
                      SCSI_VERIFY_BYTCHK_SHIFT;
    uint64_t lba, bytes;
    uint32_t count;

    scsi_cdb_lba_count(r->cdb, &lba, &count);
    if ((flags & SCSI_CDB_PROTECT_MASK) ||
        (bytchk != SCSI_VERIFY_BYTCHK_NONE &&
         bytchk != SCSI_VERIFY_BYTCHK_ALL) ||
        count > d->max_xfer_blocks) {
        scsi_req_invalid_cdb(req);
        return;
    }
    if (!scsi_disk_range_ok(d, lba, count)) {
        scsi_req_lba_out_of_range(req);
        return;
    }
    bytes = (uint64_t)count << d->block_bits;
    if (bytchk == SCSI_VERIFY_BYTCHK_NONE) {
        if (req->out_len) {
            scsi_req_xfer_fail(req, SCSI_XFER_WRONG_DIRECTION);
        } else {
            scsi_req_complete(req);
        }
        return;
    }
    if (!scsi_req_want_data_out(req, bytes)) {
        return;
    }
    r->kind = SCSI_IO_VERIFY;
    r->start = r->pos = lba << d->block_bits;
    r->end = r->start + bytes;
    r->heap = g_malloc(scsi_disk_chunk_bytes(r));
    scsi_disk_chunk_step(req, BLOCK_OP_READ);
}

/*
 * WRITE SAME (10/16).  WSNZ is set in VPD 0xB0, so a count of 0 is an
 * invalid field, as are ANCHOR (no anchored blocks), the obsolete
 * PBDATA/LBDATA bits and protection information.  The block is copied out
 * of the data-out once; a zero block (or NDOB) becomes one WRITE_ZEROES,
 * allowed to deallocate when UNMAP is set (the node deallocates only with
 * discard=unmap, and the range reads back as zeroes either way); any other
 * block is written repeatedly, SCSI_DISK_CHUNK_MAX bytes at a time.
 */
static void scsi_disk_cmd_write_same(ScsiRequest *req)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    ScsiDisk *d = r->d;
    uint8_t flags = r->cdb[1];
    bool ndob = r->cdb[0] == SCSI_OP_WRITE_SAME_16 &&
                (flags & SCSI_WRITE_SAME_NDOB);
    uint8_t block[4096];
    uint64_t lba, chunk;
    uint32_t count;

    scsi_cdb_lba_count(r->cdb, &lba, &count);
    if ((flags & (SCSI_CDB_PROTECT_MASK | SCSI_WRITE_SAME_ANCHOR |
                  SCSI_WRITE_SAME_OBSOLETE)) ||
        count == 0 || count > d->max_ws_blocks) {
        scsi_req_invalid_cdb(req);
        return;
    }
    if (!d->writable) {
        scsi_req_write_protected(req);
        return;
    }
    if (!scsi_disk_range_ok(d, lba, count)) {
        scsi_req_lba_out_of_range(req);
        return;
    }
    if (ndob ? req->out_len != 0 : req->out_len < d->block_size) {
        scsi_req_xfer_fail(req, ndob ? SCSI_XFER_WRONG_DIRECTION
                                     : SCSI_XFER_OVERRUN);
        return;
    }
    r->start = r->pos = lba << d->block_bits;
    r->end = r->start + ((uint64_t)count << d->block_bits);
    r->bflags = scsi_disk_wce(d) ? 0 : BLOCK_REQ_FUA;
    if (!ndob) {
        g_assert(d->block_size <= sizeof(block));
        iov_to_buf(req->out_iov, req->out_niov, 0, block, d->block_size);
    }
    if (ndob || scsi_buf_is_zero(block, d->block_size)) {
        if (flags & SCSI_WRITE_SAME_UNMAP) {
            r->bflags |= BLOCK_REQ_MAY_UNMAP;
        }
        r->kind = SCSI_IO_WRITE;
        scsi_disk_submit_io(req, BLOCK_OP_WRITE_ZEROES, r->start,
                            r->end - r->start, NULL, 0);
        return;
    }
    r->kind = SCSI_IO_WRITE_SAME;
    chunk = scsi_disk_chunk_bytes(r);
    r->heap = g_malloc(chunk);
    for (uint64_t off = 0; off < chunk; off += d->block_size) {
        memcpy((uint8_t *)r->heap + off, block, d->block_size);
    }
    scsi_disk_chunk_step(req, BLOCK_OP_WRITE);
}

/*
 * Copy and check the UNMAP parameter list: 8 <= 8 + descriptor length <=
 * 2 + data length <= parameter list length (else PARAMETER LIST LENGTH
 * ERROR), at most SCSI_DISK_MAX_UNMAP_DESCS descriptors and
 * max_unmap_blocks blocks in all (else INVALID FIELD IN PARAMETER LIST),
 * every range on the medium (else LBA OUT OF RANGE).  A trailing partial
 * descriptor is ignored, as SBC says.  On success the non-empty ranges
 * are in r (inline or r->heap).  On failure req is completed.
 */
static bool scsi_disk_unmap_parse(ScsiRequest *req, uint32_t plen)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    ScsiDisk *d = r->d;
    ScsiUnmapRange *ranges = r->u.ranges;
    uint8_t hdr[SCSI_UNMAP_HDR_LEN];
    uint32_t data_len, desc_len, ndesc;
    uint64_t total = 0;

    if (plen < SCSI_UNMAP_HDR_LEN) {
        scsi_req_param_length_error(req);
        return false;
    }
    iov_to_buf(req->out_iov, req->out_niov, 0, hdr, sizeof(hdr));
    data_len = ld_be16(hdr);
    desc_len = ld_be16(hdr + 2);
    if (SCSI_UNMAP_HDR_LEN + desc_len > data_len + 2 ||
        data_len + 2 > plen) {
        scsi_req_param_length_error(req);
        return false;
    }
    ndesc = desc_len / SCSI_UNMAP_DESC_LEN;
    if (ndesc > SCSI_DISK_MAX_UNMAP_DESCS) {
        scsi_req_invalid_param(req);
        return false;
    }
    if (ndesc > SCSI_DISK_INLINE_RANGES) {
        ranges = g_new(ScsiUnmapRange, ndesc);
        r->heap = ranges;
    }
    r->nranges = 0;
    for (uint32_t i = 0; i < ndesc; i++) {
        uint8_t desc[SCSI_UNMAP_DESC_LEN];
        uint64_t lba;
        uint32_t count;

        iov_to_buf(req->out_iov, req->out_niov,
                   SCSI_UNMAP_HDR_LEN + i * SCSI_UNMAP_DESC_LEN, desc,
                   sizeof(desc));
        lba = ld_be64(desc);
        count = ld_be32(desc + 8);
        total += count;
        if (total > d->max_unmap_blocks) {
            scsi_req_invalid_param(req);
            return false;
        }
        if (!scsi_disk_range_ok(d, lba, count)) {
            scsi_req_lba_out_of_range(req);
            return false;
        }
        if (count) {
            ranges[r->nranges++] = (ScsiUnmapRange) {
                .lba = lba, .nblocks = count,
            };
        }
    }
    return true;
}

/*
 * UNMAP.  When the node does not discard (discard=ignore), VPD 0xB2 does
 * not advertise LBPU, i.e. the command is not supported: INVALID COMMAND
 * OPERATION CODE rather than a success that deallocates nothing.
 */
static void scsi_disk_cmd_unmap(ScsiRequest *req)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    ScsiDisk *d = r->d;
    uint32_t plen = ld_be16(r->cdb + 7);

    if (!d->can_unmap) {
        scsi_req_invalid_opcode(req);
        return;
    }
    if (r->cdb[1] & SCSI_UNMAP_ANCHOR) {
        scsi_req_invalid_cdb(req);
        return;
    }
    if (!d->writable) {
        scsi_req_write_protected(req);
        return;
    }
    /* SBC: an empty list is not an error. */
    if (!scsi_req_want_data_out(req, plen) ||
        !scsi_disk_unmap_parse(req, plen)) {
        return;
    }
    r->kind = SCSI_IO_UNMAP;
    r->next_range = 0;
    scsi_disk_unmap_step(req);
}

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                  */

typedef void ScsiCmdFunc(ScsiRequest *req);

typedef enum ScsiDir {
    SCSI_DIR_NONE,               /* no data either way */
    SCSI_DIR_IN,                 /* data-in only */
    SCSI_DIR_OUT,                /* data-out only */
} ScsiDir;

/* ScsiCommand.flags */
enum {
    SCSI_CMD_NO_UA = 1 << 0,     /* runs despite a pending unit attention */
};

typedef struct ScsiCommand {
    ScsiCmdFunc *fn;             /* NULL: not supported here */
    uint8_t cdb_len;
    uint8_t dir;                 /* ScsiDir */
    uint8_t flags;
} ScsiCommand;

static const ScsiCommand scsi_disk_commands[256] = {
    [SCSI_OP_TEST_UNIT_READY] = {
        scsi_disk_cmd_test_unit_ready, 6, SCSI_DIR_NONE, 0 },
    [SCSI_OP_REQUEST_SENSE] = {
        scsi_disk_cmd_request_sense, 6, SCSI_DIR_IN, SCSI_CMD_NO_UA },
    [SCSI_OP_READ_6] = { scsi_disk_cmd_read, 6, SCSI_DIR_IN, 0 },
    [SCSI_OP_WRITE_6] = { scsi_disk_cmd_write, 6, SCSI_DIR_OUT, 0 },
    [SCSI_OP_INQUIRY] = {
        scsi_disk_cmd_inquiry, 6, SCSI_DIR_IN, SCSI_CMD_NO_UA },
    [SCSI_OP_MODE_SELECT_6] = {
        scsi_disk_cmd_mode_select, 6, SCSI_DIR_OUT, 0 },
    [SCSI_OP_MODE_SENSE_6] = { scsi_disk_cmd_mode_sense, 6, SCSI_DIR_IN, 0 },
    [SCSI_OP_START_STOP_UNIT] = {
        scsi_disk_cmd_start_stop, 6, SCSI_DIR_NONE, 0 },
    [SCSI_OP_PREVENT_ALLOW_MEDIUM_REMOVAL] = {
        scsi_disk_cmd_prevent_allow, 6, SCSI_DIR_NONE, 0 },
    [SCSI_OP_READ_CAPACITY_10] = {
        scsi_disk_cmd_read_capacity_10, 10, SCSI_DIR_IN, 0 },
    [SCSI_OP_READ_10] = { scsi_disk_cmd_read, 10, SCSI_DIR_IN, 0 },
    [SCSI_OP_WRITE_10] = { scsi_disk_cmd_write, 10, SCSI_DIR_OUT, 0 },
    [SCSI_OP_VERIFY_10] = { scsi_disk_cmd_verify, 10, SCSI_DIR_OUT, 0 },
    [SCSI_OP_SYNCHRONIZE_CACHE_10] = {
        scsi_disk_cmd_sync_cache, 10, SCSI_DIR_NONE, 0 },
    [SCSI_OP_WRITE_SAME_10] = {
        scsi_disk_cmd_write_same, 10, SCSI_DIR_OUT, 0 },
    [SCSI_OP_UNMAP] = { scsi_disk_cmd_unmap, 10, SCSI_DIR_OUT, 0 },
    [SCSI_OP_MODE_SELECT_10] = {
        scsi_disk_cmd_mode_select, 10, SCSI_DIR_OUT, 0 },
    [SCSI_OP_MODE_SENSE_10] = {
        scsi_disk_cmd_mode_sense, 10, SCSI_DIR_IN, 0 },
    [SCSI_OP_READ_16] = { scsi_disk_cmd_read, 16, SCSI_DIR_IN, 0 },
    [SCSI_OP_WRITE_16] = { scsi_disk_cmd_write, 16, SCSI_DIR_OUT, 0 },
    [SCSI_OP_VERIFY_16] = { scsi_disk_cmd_verify, 16, SCSI_DIR_OUT, 0 },
    [SCSI_OP_SYNCHRONIZE_CACHE_16] = {
        scsi_disk_cmd_sync_cache, 16, SCSI_DIR_NONE, 0 },
    [SCSI_OP_WRITE_SAME_16] = {
        scsi_disk_cmd_write_same, 16, SCSI_DIR_OUT, 0 },
    [SCSI_OP_SERVICE_ACTION_IN_16] = {
        scsi_disk_cmd_service_action_in, 16, SCSI_DIR_IN, 0 },
    /* The transport answers REPORT LUNS (it knows the LUNs); one that
     * reaches us is unsupported, but never hidden by a unit attention. */
    [SCSI_OP_REPORT_LUNS] = { NULL, 12, SCSI_DIR_IN, SCSI_CMD_NO_UA },
    [SCSI_OP_READ_12] = { scsi_disk_cmd_read, 12, SCSI_DIR_IN, 0 },
    [SCSI_OP_WRITE_12] = { scsi_disk_cmd_write, 12, SCSI_DIR_OUT, 0 },
};

/* Report and clear a pending unit attention; false if there is none. */
static bool scsi_disk_report_unit_attention(ScsiDisk *d, ScsiRequest *req)
{
    uint8_t asc, ascq;

    if (!scsi_disk_take_unit_attention(d, &asc, &ascq)) {
        return false;
    }
    scsi_req_fail(req, SCSI_SENSE_UNIT_ATTENTION, asc, ascq);
    return true;
}

static bool scsi_disk_direction_ok(const ScsiRequest *req, ScsiDir dir)
{
    switch (dir) {
    case SCSI_DIR_IN:
        return req->out_len == 0;
    case SCSI_DIR_OUT:
        return req->in_len == 0;
    case SCSI_DIR_NONE:
    default:
        return req->in_len == 0 && req->out_len == 0;
    }
}

void scsi_disk_submit(ScsiDisk *d, BlockQueue *q, ScsiRequest *req)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    const ScsiCommand *cmd;
    unsigned len;

    g_assert(aio_context_in_home_thread(block_queue_get_aio_context(q)));

    req->status = SCSI_STATUS_GOOD;
    req->xfer_error = SCSI_XFER_OK;
    req->sense_len = 0;
    req->in_done = 0;
    r->d = d;
    r->q = q;
    r->heap = NULL;
    r->kind = SCSI_IO_WRITE;
    r->bflags = 0;
    len = MIN(req->cdb_len, (unsigned)SCSI_DISK_CDB_MAX);
    memset(r->cdb, 0, sizeof(r->cdb));
    if (len) {
        memcpy(r->cdb, req->cdb, len);
    }
    SPINDLE_TRACE2(scsi_disk_submit, r->cdb[0], req->cdb_len);

    if (req->cdb_len == 0) {
        /* No operation code at all. */
        scsi_req_invalid_opcode(req);
        return;
    }
    cmd = &scsi_disk_commands[r->cdb[0]];
    if (!(cmd->flags & SCSI_CMD_NO_UA) &&
        scsi_disk_report_unit_attention(d, req)) {
        return;
    }
    if (!cmd->fn) {
        scsi_req_invalid_opcode(req);
        return;
    }
    /* A CDB cut short: its missing bytes are fields we cannot read. */
    if (req->cdb_len < cmd->cdb_len ||
        (r->cdb[cmd->cdb_len - 1] & SCSI_CONTROL_NACA)) {
        scsi_req_invalid_cdb(req);
        return;
    }
    if (!scsi_disk_direction_ok(req, cmd->dir)) {
        scsi_req_xfer_fail(req, SCSI_XFER_WRONG_DIRECTION);
        return;
    }
    cmd->fn(req);
}

/* ------------------------------------------------------------------------ */
/* REPORT LUNS (for the transport)                                           */

size_t scsi_build_report_luns(const uint16_t *luns, unsigned n, uint8_t *buf,
                              size_t len)
{
    uint8_t data[SCSI_REPORT_LUNS_HDR_LEN];
    size_t done;

    memset(data, 0, sizeof(data));
    st_be32(data, n * SCSI_REPORT_LUNS_ENTRY_LEN);
    done = MIN(len, sizeof(data));
    memcpy(buf, data, done);
    for (unsigned i = 0; i < n && done < len; i++) {
        uint8_t entry[SCSI_REPORT_LUNS_ENTRY_LEN] = { 0 };
        size_t k;

        /* Our own invariant: the transport only has LUNs up to 16383. */
        g_assert(luns[i] <= SCSI_LUN_FLAT_MAX);
        if (luns[i] < 256) {
            entry[1] = (uint8_t)luns[i];                /* peripheral */
        } else {
            entry[0] = SCSI_LUN_FLAT_SPACE | luns[i] >> 8;
            entry[1] = luns[i] & 0xff;
        }
        k = MIN(len - done, sizeof(entry));
        memcpy(buf + done, entry, k);
        done += k;
    }
    return done;
}

/* ------------------------------------------------------------------------ */
/* Creation                                                                  */

bool scsi_disk_check_string(const char *name, const char *value, size_t max,
                            Error **errp)
{
    size_t len = strlen(value);

    if (len > max) {
        error_setg(errp, "Parameter '%s' is %zu characters long; at most %zu "
                   "are allowed", name, len, max);
        return false;
    }
    for (const char *p = value; *p; p++) {
        if (*p < 0x20 || *p > 0x7e) {
            error_setg(errp, "Parameter '%s' must be printable ASCII "
                       "(SCSI strings are ASCII); '%s' is not", name, value);
            return false;
        }
    }
    return true;
}

static bool scsi_disk_conf_valid(const ScsiDiskConf *conf, BlockNode *bs,
                                 uint32_t lbs, Error **errp)
{
    int64_t length = block_node_get_length(bs);

    if ((conf->vendor &&
         !scsi_disk_check_string("vendor", conf->vendor,
                                 SCSI_INQUIRY_VENDOR_LEN, errp)) ||
        (conf->product &&
         !scsi_disk_check_string("product", conf->product,
                                 SCSI_INQUIRY_PRODUCT_LEN, errp)) ||
        (conf->revision &&
         !scsi_disk_check_string("revision", conf->revision,
                                 SCSI_INQUIRY_REVISION_LEN, errp)) ||
        (conf->serial &&
         !scsi_disk_check_string("serial", conf->serial,
                                 SCSI_DISK_SERIAL_MAX, errp))) {
        return false;
    }
    if (lbs != 512 && lbs != 4096) {
        error_setg(errp, "Parameter 'logical-block-size' expects 512 or "
                   "4096, got %u", lbs);
        return false;
    }
    if (conf->writable && block_node_is_read_only(bs)) {
        error_setg(errp, "writable=on, but node '%s' is read-only",
                   block_node_get_name(bs));
        return false;
    }
    if (length < lbs) {
        error_setg(errp, "node '%s' is smaller than one logical block (%u "
                   "bytes)", block_node_get_name(bs), lbs);
        return false;
    }
    if (length % lbs) {
        error_setg(errp, "node '%s' is %" G_GINT64_FORMAT " bytes long, not "
                   "a multiple of the logical block size (%u): its last "
                   "bytes would be unreachable", block_node_get_name(bs),
                   length, lbs);
        return false;
    }
    return true;
}

/* Copy src into dst (n bytes), padded with spaces. */
static void scsi_pad_copy(char *dst, const char *src, size_t n)
{
    size_t len = MIN(strlen(src), n);

    memset(dst, ' ', n);
    memcpy(dst, src, len);
}

/* The default revision: "MAJOR.MINOR" of the version, at most 4 chars. */
static void scsi_default_revision(char *dst)
{
    const char *v = SPINDLE_VERSION;
    unsigned dots = 0;
    size_t n = 0;

    while (v[n] && n < SCSI_INQUIRY_REVISION_LEN) {
        if (v[n] == '.' && ++dots == 2) {
            break;
        }
        n++;
    }
    memset(dst, ' ', SCSI_INQUIRY_REVISION_LEN);
    memcpy(dst, v, n);
}

/* A limit in blocks from a node limit in bytes (0: dflt), within 1..max. */
static uint32_t scsi_blocks_limit(uint64_t node_bytes, uint64_t dflt,
                                  uint32_t lbs)
{
    uint64_t bytes = node_bytes ? MIN(node_bytes, dflt) : dflt;

    return (uint32_t)MAX(bytes / lbs, UINT64_C(1));
}

static void scsi_disk_set_limits(ScsiDisk *d, const ScsiDiskConf *conf)
{
    uint32_t lbs = d->block_size;
    BlockLimits l;

    block_node_get_limits(d->bs, &l);
    if (conf->max_transfer) {
        d->max_xfer_blocks = conf->max_transfer;
    } else {
        d->max_xfer_blocks = scsi_blocks_limit(l.max_transfer,
                                               SCSI_DISK_DEFAULT_MAX_XFER,
                                               lbs);
    }
    d->max_unmap_blocks = scsi_blocks_limit(l.max_discard,
                                            SCSI_DISK_DEFAULT_MAX_DWZ, lbs);
    d->max_ws_blocks = scsi_blocks_limit(l.max_write_zeroes,
                                         SCSI_DISK_DEFAULT_MAX_DWZ, lbs);
    d->unmap_gran_blocks = MAX(l.discard_alignment / lbs, 1u);
    d->xfer_gran_blocks = (uint16_t)CLAMP(l.request_alignment / lbs, 1u,
                                          UINT16_MAX);
}

ScsiDisk *scsi_disk_new(const ScsiDiskConf *conf, BlockNode *bs,
                        Error **errp)
{
    uint32_t lbs = conf->logical_block_size ? conf->logical_block_size : 512;
    ScsiDisk *d;

    if (!scsi_disk_conf_valid(conf, bs, lbs, errp)) {
        return NULL;
    }
    d = g_new0(ScsiDisk, 1);
    d->bs = bs;
    block_node_ref(bs);
    d->block_size = lbs;
    d->block_bits = (unsigned)__builtin_ctz(lbs);
    d->writable = conf->writable;
    d->can_unmap = conf->writable && block_node_discard_enabled(bs);
    d->default_wce = !conf->writethrough;
    d->rerror = conf->rerror;
    d->werror = conf->werror;
    d->wwn = conf->wwn;
    scsi_pad_copy(d->vendor, conf->vendor ? conf->vendor
                                          : SCSI_DISK_DEFAULT_VENDOR,
                  SCSI_INQUIRY_VENDOR_LEN);
    scsi_pad_copy(d->product, conf->product ? conf->product
                                            : SCSI_DISK_DEFAULT_PRODUCT,
                  SCSI_INQUIRY_PRODUCT_LEN);
    if (conf->revision) {
        scsi_pad_copy(d->revision, conf->revision, SCSI_INQUIRY_REVISION_LEN);
    } else {
        scsi_default_revision(d->revision);
    }
    if (conf->serial) {
        d->serial_len = strlen(conf->serial);
        memcpy(d->serial, conf->serial, d->serial_len);
    }
    scsi_disk_set_limits(d, conf);
    atomic_init(&d->ua_pending, 0);
    atomic_init(&d->wce, d->default_wce);
    atomic_init(&d->d_sense, false);
    return d;
}

void scsi_disk_free(ScsiDisk *d)
{
    if (!d) {
        return;
    }
    block_node_unref(d->bs);
    g_free(d);
}

BlockNode *scsi_disk_get_node(const ScsiDisk *d)
{
    return d->bs;
}

uint32_t scsi_disk_block_size(const ScsiDisk *d)
{
    return d->block_size;
}

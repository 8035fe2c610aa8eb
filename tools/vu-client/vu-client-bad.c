/*
 * spindle-vu-client: the bad-request command.
 *
 * Theory of operation
 * -------------------
 * `bad-request KIND` puts one hand-built virtio-blk request in a queue,
 * kicks, and reports what the device did with it.  The rings stay
 * well-formed (that is `malformed`'s business); what is wrong is the
 * request itself as virtio 1.x section 5.2.6 frames it: the header, the
 * descriptor directions, the status byte, the data length, the sector
 * range, the request type, the discard/write-zeroes segments.  A few kinds
 * are legal but unusual layouts (a header split across descriptors, a
 * header and its data in one descriptor), as controls, and three are plain
 * well-formed requests, for read-only exports.
 *
 * Every buffer of the request lives in one 32 KiB scratch area of guest
 * memory, at fixed offsets with gaps between them, and the whole area is
 * filled with a canary before the request is built.  After the completion
 * (or the timeout) the area is compared with a snapshot taken before the
 * kick:
 *
 *   memory_intact   no byte outside the device-writable descriptors changed
 *                   (a device must never write a device-readable buffer,
 *                   nor around a writable one);
 *   data_written    some byte of a device-writable descriptor other than
 *                   the status byte changed.
 *
 * It also says whether the device signalled the queue's error eventfd
 * (error_signalled: it broke the queue, as it must for a request with no
 * place for a status) and whether the library found the used ring
 * impossible (queue_broken).
 *
 * The status byte is where the framing puts it: the last byte of the last
 * non-empty device-writable descriptor ("status" is "none" when there is
 * no such byte or the device left it alone).  Data a kind carries to the
 * disk is the client's pattern (docs/frontend.md) with the --pattern seed
 * (default 0xbad) at the target's disk offset, so that a test can read the
 * disk around the target and tell whether anything of it arrived.
 *
 * The command judges nothing: it fails only when the request cannot be
 * put in the ring.  Tests decide which reactions and statuses are fine.
 *
 * The request types, status values and segment layout are the spec's
 * numbers, spelled out here so that this file depends only on the
 * front-end's functions (vufq_add() and friends), not on its constants.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <glib.h>

#include "util/bswap.h"
#include "util/error.h"
#include "vu-client-bad.h"
#include "vu-client-pattern.h"
#include "vu-client-result.h"
#include "vu-client-session.h"

#define BR_SECTOR               512u
#define BR_SCRATCH_BYTES        (32u << 10)
#define BR_OFF_HDR              0u      /* header pieces at 0, 64, 128 */
#define BR_OFF_DATA             4096u   /* data, up to 8 KiB */
#define BR_OFF_SEGS             16384u  /* discard/write-zeroes segments */
#define BR_SEGS_MAX             256u    /* 4 KiB of segments */
#define BR_OFF_STATUS           20480u
#define BR_OFF_ID               24576u
#define BR_CANARY               0xa5u
#define BR_MAX_PIECES           8
#define BR_WAIT_MS              500
#define BR_DEFAULT_SEED         0xbad

/* virtio 1.x, 5.2.6. */
#define BR_T_IN                 0u
#define BR_T_OUT                1u
#define BR_T_GET_ID             8u
#define BR_T_DISCARD            11u
#define BR_T_WRITE_ZEROES       13u
#define BR_T_UNKNOWN            0x7fu   /* no such type, barrier bit clear */
#define BR_HDR_BYTES            16u
#define BR_SEG_BYTES            16u
#define BR_SEG_F_UNMAP          1u
#define BR_SEG_F_RESERVED       2u
/* virtio_blk_config: capacity, max_discard_seg, max_write_zeroes_seg. */
#define BR_CFG_CAPACITY         0u
#define BR_CFG_MAX_DISCARD_SEG  40u
#define BR_CFG_MAX_WZ_SEG       52u
#define BR_STATUS_NONE          0xffu

typedef struct BrPiece {
    uint32_t off;               /* in the scratch area */
    uint32_t len;
    bool device_writes;
} BrPiece;

/* What a kind builds, and what it wants checked. */
typedef struct BrReq {
    BrPiece pieces[BR_MAX_PIECES];
    unsigned n;
    uint32_t type;
    uint64_t sector;
    /* The disk range a legal kind writes (pattern or zeroes), or len 0. */
    uint64_t writes_off, writes_len;
    /* A read to check against the pattern: data at scratch offset
     * read_data, read_len bytes from disk offset read_disk_off. */
    uint32_t read_data, read_len;
    uint64_t read_disk_off;
    /* GET_ID into a buffer of id_len bytes at BR_OFF_ID. */
    uint32_t id_len;
} BrReq;

typedef struct BrCtx {
    Client *c;
    const Command *cmd;
    uint8_t *s;                 /* the scratch area */
    uint64_t sector;            /* the target: --offset / 512 */
    uint64_t seed;
    uint64_t capacity;          /* sectors */
    uint32_t max_discard_seg;
    uint32_t max_wz_seg;
} BrCtx;

typedef void (*BrBuild)(BrCtx *x, BrReq *b);

typedef struct BrKind {
    const char *name;
    BrBuild build;
} BrKind;

/* ------------------------------------------------------------------------ */
/* Building blocks                                                           */

static void add_piece(BrReq *b, uint32_t off, uint32_t len, bool writes)
{
    g_assert(b->n < BR_MAX_PIECES);
    b->pieces[b->n++] = (BrPiece) { off, len, writes };
}

/* The 16-byte header at scratch offset off. */
static void put_hdr(BrCtx *x, BrReq *b, uint32_t off, uint32_t type,
                    uint64_t sector)
{
    uint8_t *p = x->s + off;

    b->type = type;
    b->sector = sector;
    st_le32(p, type);
    st_le32(p + 4, 0);
    st_le64(p + 8, sector);
}

/* The header of a type request of the target, cut into n pieces of the
 * given lengths, each in its own device-readable descriptor 64 bytes
 * after the last (the canary stays where the header was made). */
static void split_hdr(BrCtx *x, BrReq *b, uint32_t type, const uint32_t *lens,
                      unsigned n)
{
    uint8_t tmp[BR_HDR_BYTES];
    uint32_t done = 0;

    put_hdr(x, b, BR_OFF_HDR, type, x->sector);
    memcpy(tmp, x->s + BR_OFF_HDR, sizeof(tmp));
    memset(x->s + BR_OFF_HDR, BR_CANARY, sizeof(tmp));
    for (unsigned i = 0; i < n; i++) {
        memcpy(x->s + 64 * i, tmp + done, lens[i]);
        add_piece(b, 64 * i, lens[i], false);
        done += lens[i];
    }
}

/* The usual header: one device-readable descriptor. */
static void hdr(BrCtx *x, BrReq *b, uint32_t type, uint64_t sector)
{
    put_hdr(x, b, BR_OFF_HDR, type, sector);
    add_piece(b, BR_OFF_HDR, BR_HDR_BYTES, false);
}

static void status(BrReq *b)
{
    add_piece(b, BR_OFF_STATUS, 1, true);
}

/* Write data: the pattern of [disk_off, disk_off + len). */
static void out_data(BrCtx *x, BrReq *b, uint64_t disk_off, uint32_t len)
{
    pattern_fill(x->s + BR_OFF_DATA, disk_off, len, x->seed);
    add_piece(b, BR_OFF_DATA, len, false);
}

static void in_data(BrReq *b, uint32_t len)
{
    add_piece(b, BR_OFF_DATA, len, true);
}

/* The usual chain of one I/O request: header, len bytes of data (written
 * by the device for BR_T_IN, else the pattern of disk_off), status. */
static void io_req(BrCtx *x, BrReq *b, uint32_t type, uint64_t sector,
                   uint64_t disk_off, uint32_t len)
{
    hdr(x, b, type, sector);
    if (type == BR_T_IN) {
        in_data(b, len);
    } else {
        out_data(x, b, disk_off, len);
    }
    status(b);
}

/* Segment i of a discard / write-zeroes request. */
static void put_seg(BrCtx *x, unsigned i, uint64_t sector, uint32_t nsectors,
                    uint32_t flags)
{
    uint8_t *p = x->s + BR_OFF_SEGS + i * BR_SEG_BYTES;

    g_assert(i < BR_SEGS_MAX);
    st_le64(p, sector);
    st_le32(p + 8, nsectors);
    st_le32(p + 12, flags);
}

/* A discard / write-zeroes request of nsegs segments already put. */
static void dwz(BrCtx *x, BrReq *b, uint32_t type, unsigned nsegs)
{
    hdr(x, b, type, 0);
    if (nsegs) {
        add_piece(b, BR_OFF_SEGS, nsegs * BR_SEG_BYTES, false);
    }
    status(b);
}

static uint64_t target_off(const BrCtx *x)
{
    return x->sector * BR_SECTOR;
}

/* ------------------------------------------------------------------------ */
/* Legal layouts and well-formed requests (controls)                        */

/* A 4 KiB write whose header is split 8 + 8 over two descriptors. */
static void build_split_header(BrCtx *x, BrReq *b)
{
    split_hdr(x, b, BR_T_OUT, (const uint32_t[]) { 8, 8 }, 2);
    out_data(x, b, target_off(x), 4096);
    status(b);
    b->writes_off = target_off(x);
    b->writes_len = 4096;
}

/* A 4 KiB read whose header is split 1 + 7 + 8 over three descriptors. */
static void build_split_header_read(BrCtx *x, BrReq *b)
{
    split_hdr(x, b, BR_T_IN, (const uint32_t[]) { 1, 7, 8 }, 3);
    in_data(b, 4096);
    status(b);
    b->read_data = BR_OFF_DATA;
    b->read_len = 4096;
    b->read_disk_off = target_off(x);
}

/* A 4 KiB write with its header and data in one descriptor. */
static void build_header_with_data(BrCtx *x, BrReq *b)
{
    put_hdr(x, b, BR_OFF_DATA - BR_HDR_BYTES, BR_T_OUT, x->sector);
    pattern_fill(x->s + BR_OFF_DATA, target_off(x), 4096, x->seed);
    add_piece(b, BR_OFF_DATA - BR_HDR_BYTES, BR_HDR_BYTES + 4096, false);
    status(b);
    b->writes_off = target_off(x);
    b->writes_len = 4096;
}

/* A 4 KiB read with its data and status byte in one descriptor. */
static void build_status_with_data(BrCtx *x, BrReq *b)
{
    hdr(x, b, BR_T_IN, x->sector);
    add_piece(b, BR_OFF_DATA, 4096 + 1, true);
    b->read_data = BR_OFF_DATA;
    b->read_len = 4096;
    b->read_disk_off = target_off(x);
}

static void build_plain_write(BrCtx *x, BrReq *b)
{
    io_req(x, b, BR_T_OUT, x->sector, target_off(x), 4096);
    b->writes_off = target_off(x);
    b->writes_len = 4096;
}

static void build_plain_write_zeroes(BrCtx *x, BrReq *b)
{
    put_seg(x, 0, x->sector, 8, 0);
    dwz(x, b, BR_T_WRITE_ZEROES, 1);
    b->writes_off = target_off(x);
    b->writes_len = 4096;
}

static void build_plain_discard(BrCtx *x, BrReq *b)
{
    put_seg(x, 0, x->sector, 8, 0);
    dwz(x, b, BR_T_DISCARD, 1);
    b->writes_off = target_off(x);
    b->writes_len = 4096;
}

/* ------------------------------------------------------------------------ */
/* Header and status                                                         */

/* A one-sector read whose header is 8 bytes long. */
static void build_short_header(BrCtx *x, BrReq *b)
{
    put_hdr(x, b, BR_OFF_HDR, BR_T_IN, x->sector);
    add_piece(b, BR_OFF_HDR, 8, false);
    in_data(b, BR_SECTOR);
    status(b);
}

/* A 4 KiB write with no device-writable descriptor at all. */
static void build_no_status(BrCtx *x, BrReq *b)
{
    hdr(x, b, BR_T_OUT, x->sector);
    out_data(x, b, target_off(x), 4096);
}

/* A 4 KiB write whose status descriptor is 0 bytes long: there is no
 * device-writable byte at all. */
static void build_status_len_0(BrCtx *x, BrReq *b)
{
    build_no_status(x, b);
    add_piece(b, BR_OFF_STATUS, 0, true);
}

/* A one-sector read followed by a 0-byte status descriptor: by the
 * framing, the status is the data's last byte and 511 bytes remain. */
static void build_status_len_0_after_data(BrCtx *x, BrReq *b)
{
    hdr(x, b, BR_T_IN, x->sector);
    in_data(b, BR_SECTOR);
    add_piece(b, BR_OFF_STATUS, 0, true);
}

/* A one-sector read whose header is device-writable. */
static void build_header_writable(BrCtx *x, BrReq *b)
{
    put_hdr(x, b, BR_OFF_HDR, BR_T_IN, x->sector);
    add_piece(b, BR_OFF_HDR, BR_HDR_BYTES, true);
    in_data(b, BR_SECTOR);
    status(b);
}

/* ------------------------------------------------------------------------ */
/* Directions and lengths                                                    */

/* IN with a device-readable data buffer. */
static void build_read_readable_data(BrCtx *x, BrReq *b)
{
    hdr(x, b, BR_T_IN, x->sector);
    add_piece(b, BR_OFF_DATA, BR_SECTOR, false);
    status(b);
}

/* OUT with a device-writable data buffer (holding the pattern). */
static void build_write_writable_data(BrCtx *x, BrReq *b)
{
    hdr(x, b, BR_T_OUT, x->sector);
    pattern_fill(x->s + BR_OFF_DATA, target_off(x), BR_SECTOR, x->seed);
    add_piece(b, BR_OFF_DATA, BR_SECTOR, true);
    status(b);
}

static void build_read_partial_sector(BrCtx *x, BrReq *b)
{
    io_req(x, b, BR_T_IN, x->sector, 0, 1000);
}

static void build_write_partial_sector(BrCtx *x, BrReq *b)
{
    io_req(x, b, BR_T_OUT, x->sector, target_off(x), 1000);
}

/* ------------------------------------------------------------------------ */
/* Sector ranges                                                             */

/* One sector just past the end. */
static void build_read_beyond_end(BrCtx *x, BrReq *b)
{
    io_req(x, b, BR_T_IN, x->capacity, 0, BR_SECTOR);
}

/* Two sectors from the last one: half in, half out. */
static void build_write_beyond_end(BrCtx *x, BrReq *b)
{
    io_req(x, b, BR_T_OUT, x->capacity - 1, (x->capacity - 1) * BR_SECTOR,
           2 * BR_SECTOR);
}

/* Sector 2^55: its byte offset, sector * 512, wraps around to 0. */
static void build_write_sector_wrap(BrCtx *x, BrReq *b)
{
    io_req(x, b, BR_T_OUT, UINT64_C(1) << 55, 0, 4096);
}

/* Sector 2^64 - 1 and two sectors: sector + count wraps around to 1. */
static void build_write_sector_overflow(BrCtx *x, BrReq *b)
{
    io_req(x, b, BR_T_OUT, UINT64_MAX, 0, 2 * BR_SECTOR);
}

/* Eight sectors from 2^64 - 8: ends exactly at 2^64. */
static void build_read_sector_overflow(BrCtx *x, BrReq *b)
{
    io_req(x, b, BR_T_IN, UINT64_MAX - 7, 0, 4096);
}

/* ------------------------------------------------------------------------ */
/* Types                                                                     */

/* Type 0x7f, laid out like a 4 KiB write of the target. */
static void build_unknown_type(BrCtx *x, BrReq *b)
{
    io_req(x, b, BR_T_UNKNOWN, x->sector, target_off(x), 4096);
}

/* GET_ID with an 8-byte buffer (the serial takes up to 20). */
static void build_get_id_short(BrCtx *x, BrReq *b)
{
    hdr(x, b, BR_T_GET_ID, 0);
    add_piece(b, BR_OFF_ID, 8, true);
    status(b);
    b->id_len = 8;
}

/* ------------------------------------------------------------------------ */
/* Discard and write-zeroes segments                                         */

static void build_discard_no_segs(BrCtx *x, BrReq *b)
{
    dwz(x, b, BR_T_DISCARD, 0);
}

static void build_write_zeroes_no_segs(BrCtx *x, BrReq *b)
{
    dwz(x, b, BR_T_WRITE_ZEROES, 0);
}

/* max + 1 one-sector segments, every other sector from the target. */
static void too_many_segs(BrCtx *x, BrReq *b, uint32_t type, uint32_t max)
{
    unsigned n = MIN(max + 1, BR_SEGS_MAX);

    for (unsigned i = 0; i < n; i++) {
        put_seg(x, i, x->sector + 2 * i, 1, 0);
    }
    dwz(x, b, type, n);
}

static void build_discard_too_many_segs(BrCtx *x, BrReq *b)
{
    too_many_segs(x, b, BR_T_DISCARD, x->max_discard_seg);
}

static void build_write_zeroes_too_many_segs(BrCtx *x, BrReq *b)
{
    too_many_segs(x, b, BR_T_WRITE_ZEROES, x->max_wz_seg);
}

static void build_discard_seg_beyond_end(BrCtx *x, BrReq *b)
{
    put_seg(x, 0, x->capacity - 1, 2, 0);
    dwz(x, b, BR_T_DISCARD, 1);
}

static void build_write_zeroes_seg_beyond_end(BrCtx *x, BrReq *b)
{
    put_seg(x, 0, x->capacity - 1, 2, 0);
    dwz(x, b, BR_T_WRITE_ZEROES, 1);
}

static void build_write_zeroes_seg_overflow(BrCtx *x, BrReq *b)
{
    put_seg(x, 0, UINT64_MAX, 2, 0);
    dwz(x, b, BR_T_WRITE_ZEROES, 1);
}

/* A good segment (8 sectors at the target), then one past the end. */
static void build_write_zeroes_bad_second_seg(BrCtx *x, BrReq *b)
{
    put_seg(x, 0, x->sector, 8, 0);
    put_seg(x, 1, x->capacity, 1, 0);
    dwz(x, b, BR_T_WRITE_ZEROES, 2);
}

static void build_write_zeroes_reserved_flags(BrCtx *x, BrReq *b)
{
    put_seg(x, 0, x->sector, 8, BR_SEG_F_RESERVED);
    dwz(x, b, BR_T_WRITE_ZEROES, 1);
}

static void build_discard_reserved_flags(BrCtx *x, BrReq *b)
{
    put_seg(x, 0, x->sector, 8, BR_SEG_F_RESERVED);
    dwz(x, b, BR_T_DISCARD, 1);
}

/* The unmap flag is for write-zeroes only (5.2.6.2: UNSUPP). */
static void build_discard_unmap(BrCtx *x, BrReq *b)
{
    put_seg(x, 0, x->sector, 8, BR_SEG_F_UNMAP);
    dwz(x, b, BR_T_DISCARD, 1);
}

/* A segment past the end, then one with a reserved flag: the flag must
 * still make it UNSUPP (5.2.6.2: "if any unknown flag is set"). */
static void build_write_zeroes_range_then_flag(BrCtx *x, BrReq *b)
{
    put_seg(x, 0, x->capacity, 1, 0);
    put_seg(x, 1, x->sector, 8, BR_SEG_F_RESERVED);
    dwz(x, b, BR_T_WRITE_ZEROES, 2);
}

/* 24 bytes of segments: one good segment and half of another. */
static void build_write_zeroes_partial_seg(BrCtx *x, BrReq *b)
{
    put_seg(x, 0, x->sector, 8, 0);
    put_seg(x, 1, x->sector, 8, 0);
    hdr(x, b, BR_T_WRITE_ZEROES, 0);
    add_piece(b, BR_OFF_SEGS, BR_SEG_BYTES + 8, false);
    status(b);
}

static const BrKind br_kinds[] = {
    /* Legal layouts and well-formed requests. */
    { "split-header", build_split_header },
    { "split-header-read", build_split_header_read },
    { "header-with-data", build_header_with_data },
    { "status-with-data", build_status_with_data },
    { "plain-write", build_plain_write },
    { "plain-write-zeroes", build_plain_write_zeroes },
    { "plain-discard", build_plain_discard },
    /* Header and status. */
    { "short-header", build_short_header },
    { "no-status", build_no_status },
    { "status-len-0", build_status_len_0 },
    { "status-len-0-after-data", build_status_len_0_after_data },
    { "header-writable", build_header_writable },
    /* Directions and lengths. */
    { "read-readable-data", build_read_readable_data },
    { "write-writable-data", build_write_writable_data },
    { "read-partial-sector", build_read_partial_sector },
    { "write-partial-sector", build_write_partial_sector },
    /* Sector ranges. */
    { "read-beyond-end", build_read_beyond_end },
    { "write-beyond-end", build_write_beyond_end },
    { "write-sector-wrap", build_write_sector_wrap },
    { "write-sector-overflow", build_write_sector_overflow },
    { "read-sector-overflow", build_read_sector_overflow },
    /* Types. */
    { "unknown-type", build_unknown_type },
    { "get-id-short", build_get_id_short },
    /* Discard and write-zeroes. */
    { "discard-no-segs", build_discard_no_segs },
    { "write-zeroes-no-segs", build_write_zeroes_no_segs },
    { "discard-too-many-segs", build_discard_too_many_segs },
    { "write-zeroes-too-many-segs", build_write_zeroes_too_many_segs },
    { "discard-seg-beyond-end", build_discard_seg_beyond_end },
    { "write-zeroes-seg-beyond-end", build_write_zeroes_seg_beyond_end },
    { "write-zeroes-seg-overflow", build_write_zeroes_seg_overflow },
    { "write-zeroes-bad-second-seg", build_write_zeroes_bad_second_seg },
    { "write-zeroes-reserved-flags", build_write_zeroes_reserved_flags },
    { "discard-reserved-flags", build_discard_reserved_flags },
    { "discard-unmap", build_discard_unmap },
    { "write-zeroes-range-then-flag", build_write_zeroes_range_then_flag },
    { "write-zeroes-partial-seg", build_write_zeroes_partial_seg },
};

static const BrKind *find_kind(const char *name)
{
    return kind_find(br_kinds, G_N_ELEMENTS(br_kinds), sizeof(br_kinds[0]),
                     name);
}

bool bad_request_kind_valid(const char *name)
{
    return find_kind(name) != NULL;
}

char *bad_request_kinds(void)
{
    GString *s = g_string_new(NULL);
    unsigned n = 0;

    kind_names(s, br_kinds, G_N_ELEMENTS(br_kinds), sizeof(br_kinds[0]), 4,
               &n);
    return g_string_free(s, FALSE);
}

/* ------------------------------------------------------------------------ */
/* Running one                                                               */

/* The device config fields the kinds need (capacity, segment limits). */
static bool read_limits(BrCtx *x, Error **errp)
{
    uint8_t cfg[BR_CFG_MAX_WZ_SEG + 4];

    if (!vuf_get_config(x->c->fe, 0, cfg, sizeof(cfg), errp)) {
        error_prepend(errp, "bad-request needs the device config: ");
        return false;
    }
    x->capacity = ld_le64(cfg + BR_CFG_CAPACITY);
    x->max_discard_seg = ld_le32(cfg + BR_CFG_MAX_DISCARD_SEG);
    x->max_wz_seg = ld_le32(cfg + BR_CFG_MAX_WZ_SEG);
    if (x->capacity == 0) {
        error_setg(errp, "bad-request: the device has a capacity of 0");
        return false;
    }
    if (x->sector >= x->capacity || x->capacity - x->sector < 2 * BR_SEGS_MAX) {
        error_setg(errp, "bad-request --offset %" PRIu64 " leaves less than "
                   "%u KiB before the end of the disk (%" PRIu64 " bytes)",
                   x->cmd->offset, BR_SEGS_MAX, x->capacity * BR_SECTOR);
        return false;
    }
    return true;
}

/* The scratch offset of the status byte, or -1 if there is none. */
static int64_t status_offset(const BrReq *b)
{
    for (int i = (int)b->n - 1; i >= 0; i--) {
        const BrPiece *p = &b->pieces[i];

        if (p->device_writes && p->len) {
            return (int64_t)p->off + p->len - 1;
        }
    }
    return -1;
}

/* Compare the scratch area with its snapshot; see the theory comment. */
static void check_memory(const BrReq *b, const uint8_t *now,
                         const uint8_t *before, int64_t status_off,
                         bool *memory_intact, bool *data_written)
{
    g_autofree bool *writable = g_new0(bool, BR_SCRATCH_BYTES);

    for (unsigned i = 0; i < b->n; i++) {
        const BrPiece *p = &b->pieces[i];

        if (p->device_writes) {
            memset(writable + p->off, true, p->len);
        }
    }
    *memory_intact = true;
    *data_written = false;
    for (uint32_t i = 0; i < BR_SCRATCH_BYTES; i++) {
        if (now[i] == before[i]) {
            continue;
        }
        if (!writable[i]) {
            *memory_intact = false;
        } else if ((int64_t)i != status_off) {
            *data_written = true;
        }
    }
}

/* Wait for the completion of token; the reaction's name. */
static const char *br_wait(VufQueue *q, void *token, uint32_t *used_len,
                           bool *closed)
{
    int64_t deadline = g_get_monotonic_time() + BR_WAIT_MS * 1000ll;

    *closed = false;
    for (;;) {
        int64_t left = deadline - g_get_monotonic_time();
        void *got;
        int r;

        if (left <= 0) {
            return "no-completion";
        }
        r = vufq_wait(q, left * 1000);
        if (r == -ETIMEDOUT) {
            return "no-completion";
        }
        if (r == -ECONNRESET) {
            *closed = true;
            return "closed";
        }
        if (r < 0) {
            return "bad-used-entry";
        }
        while ((r = vufq_get_used(q, &got, used_len)) == 1) {
            if (got == token) {
                return "completed";
            }
            /* A late completion of an earlier request: not ours. */
        }
        if (r < 0) {
            return "bad-used-entry";
        }
    }
}

static void br_report_data(Result *r, const BrCtx *x, const BrReq *b,
                           bool completed, int status_byte)
{
    JsonObject *o = r->obj;

    if (b->read_len && completed && status_byte == 0) {
        uint64_t bad_off, want, got;

        json_object_set_boolean_member(o, "data_ok",
            pattern_check(x->s + b->read_data, b->read_disk_off, b->read_len,
                          x->seed, &bad_off, &want, &got));
    }
    if (b->id_len) {
        g_autofree char *hex = g_malloc(2 * b->id_len + 1);
        g_autofree char *text = g_strndup((const char *)x->s + BR_OFF_ID,
                                          b->id_len);

        for (uint32_t i = 0; i < b->id_len; i++) {
            sprintf(hex + 2 * i, "%02x", x->s[BR_OFF_ID + i]);
        }
        json_object_set_string_member(o, "id_hex", hex);
        json_object_set_string_member(o, "id", text);
    }
}

/*
 * Build kind's request in the scratch area (canary first, the status byte
 * where the framing puts it set to BR_STATUS_NONE) and its descriptors
 * in segs (guest addresses from gpa).  Returns the status byte's offset,
 * or -1 if the chain has none.
 */
static int64_t br_build(BrCtx *x, BrReq *b, const BrKind *kind, uint64_t gpa,
                        VufSeg *segs)
{
    int64_t status_off;

    memset(x->s, BR_CANARY, BR_SCRATCH_BYTES);
    memset(x->s + BR_OFF_STATUS, BR_STATUS_NONE, 1);
    kind->build(x, b);
    status_off = status_offset(b);
    if (status_off >= 0) {
        x->s[status_off] = BR_STATUS_NONE;
    }
    for (unsigned i = 0; i < b->n; i++) {
        segs[i] = (VufSeg) {
            .gpa = gpa + b->pieces[i].off,
            .len = b->pieces[i].len,
            .device_writes = b->pieces[i].device_writes,
        };
    }
    return status_off;
}

/* What the device did with the request: see the theory comment. */
static void br_report(Result *r, const BrCtx *x, const BrReq *b,
                      const uint8_t *before, int64_t status_off,
                      const char *reaction, uint32_t used_len)
{
    g_autofree char *sector = g_strdup_printf("%" PRIu64, b->sector);
    bool completed = !strcmp(reaction, "completed");
    int status_byte = status_off >= 0 ? x->s[status_off] : -1;
    bool memory_intact, data_written;

    json_object_set_int_member(r->obj, "type", b->type);
    json_object_set_string_member(r->obj, "sector", sector);
    json_object_set_int_member(r->obj, "descriptors", b->n);
    json_object_set_string_member(r->obj, "reaction", reaction);
    json_object_set_string_member(r->obj, "status",
        status_byte < 0 ? "none" : vufblk_status_name(status_byte));
    json_object_set_int_member(r->obj, "status_value", status_byte);
    if (completed) {
        json_object_set_int_member(r->obj, "used_len", used_len);
    }
    check_memory(b, x->s, before, status_off, &memory_intact, &data_written);
    json_object_set_boolean_member(r->obj, "memory_intact", memory_intact);
    json_object_set_boolean_member(r->obj, "data_written", data_written);
    br_report_data(r, x, b, completed, status_byte);
}

bool cmd_bad_request(Client *c, const Command *cmd, Result *r, Error **errp)
{
    const BrKind *kind = find_kind(cmd->what);
    VufQueue *q = vuf_queue(c->fe, cmd->queue);
    BrCtx x = {
        .c = c,
        .cmd = cmd,
        .sector = cmd->offset / BR_SECTOR,
        .seed = cmd->have_seed ? cmd->seed : BR_DEFAULT_SEED,
    };
    BrReq b = { 0 };
    VufSeg segs[BR_MAX_PIECES];
    g_autofree uint8_t *before = NULL;
    const char *reaction;
    uint32_t used_len = 0;
    uint64_t gpa;
    int64_t status_off;
    bool closed;
    int ret;

    g_assert(kind);
    json_object_set_string_member(r->obj, "kind", kind->name);
    json_object_set_int_member(r->obj, "queue", cmd->queue);
    if (!read_limits(&x, errp)) {
        return false;
    }
    x.s = vuf_mem_alloc(c->fe, BR_SCRATCH_BYTES, 4096, &gpa);
    if (!x.s) {
        error_setg(errp, "bad-request: guest memory exhausted");
        return false;
    }
    status_off = br_build(&x, &b, kind, gpa, segs);
    before = g_memdup2(x.s, BR_SCRATCH_BYTES);
    if (b.writes_len) {
        extents_forget(c, b.writes_off, b.writes_len);
    }
    ret = vufq_add(q, segs, b.n, c->add_flags, &x);
    if (ret >= 0) {
        ret = vufq_kick(q);
    }
    if (ret < 0) {
        /* Nothing reached the device: the scratch area can go. */
        vuf_mem_free(c->fe, x.s);
        error_setg(errp, "cannot queue %s on queue %u: %s", kind->name,
                   cmd->queue, client_strerror(-ret));
        return false;
    }
    reaction = br_wait(q, &x, &used_len, &closed);
    br_report(r, &x, &b, before, status_off, reaction, used_len);
    res_queue_alive(r, c->fe, q, closed);
    /* Unless it completed, the device may still write there: leave the
     * scratch area allocated. */
    if (!strcmp(reaction, "completed")) {
        vuf_mem_free(c->fe, x.s);
    }
    return true;
}

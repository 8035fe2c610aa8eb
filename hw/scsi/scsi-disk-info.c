/*
 * SCSI disk emulation: the commands answered from the LUN's description
 * and state, without I/O -- INQUIRY (standard data and VPD pages), READ
 * CAPACITY (10/16), MODE SENSE / MODE SELECT (6/10) and REQUEST SENSE.
 *
 * Theory of operation
 * -------------------
 * Each command builds its whole answer in a small buffer on the stack and
 * hands it to scsi_req_reply(), which copies as much as the allocation
 * length and the data-in buffer allow (SPC: a short allocation length
 * truncates, it is not an error; the length fields inside still give the
 * full size).  The answers are built from the ScsiDisk's fixed
 * description (strings, limits) and its shared atomics (WCE, D_SENSE,
 * pending unit attentions); the capacity comes from the node each time.
 *
 * Choices SPC/SBC leave open:
 * - VPD 0x83 holds an NAA designator when a WWN is configured: the 8-byte
 *   form, the WWN's 64 bits as they are (so its top four bits are the NAA
 *   field: 5 for an IEEE Registered name), and always a T10 vendor ID
 *   designator: vendor (8 bytes), product (16 bytes), then the serial (or,
 *   without one, the node name: two LUNs must never share an identifier).
 * - VPD 0x80 is offered (and listed in 0x00) only with a serial number.
 * - VPD 0xB0 reports no optimal transfer length (0): a guest makes it its
 *   io_opt, which Linux turns into twice as much readahead and mkfs into
 *   a stripe width -- wrong for a virtual disk that has neither.
 * - VPD 0xB2 sets LBPU, LBPWS and LBPWS10 (and READ CAPACITY(16) sets
 *   LBPME) only when the node discards (discard=unmap) and the LUN is
 *   writable; LBPRZ is never set, since what a discarded range reads back
 *   depends on the host (zeroes on a file, anything on some devices).
 * - MODE SENSE's changeable values show WCE and D_SENSE only; its block
 *   descriptor reads as zeroes for them (nothing in it can change).
 *   MODE SELECT needs PF=1 whenever it carries data, refuses SP=1
 *   (INVALID FIELD IN CDB: nothing can be saved) and accepts the caching
 *   and control pages with only WCE / D_SENSE changed, a block
 *   descriptor only if it repeats the current values (or 0 blocks).
 *
 * Threads: the caller's (the request's queue); the LUN's state is read
 * and written with relaxed atomics (see struct ScsiDisk).
 */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <glib.h>

#include "hw/scsi/scsi-defs.h"
#include "hw/scsi/scsi-disk.h"
#include "scsi-disk-int.h"
#include "util/iov.h"

/* Large enough for every answer built here. */
#define SCSI_INFO_BUF_SIZE          256

/* Largest MODE SELECT parameter list accepted: a header, a long block
 * descriptor and each of our pages a few times over. */
#define SCSI_MODE_SELECT_MAX        256

/* ------------------------------------------------------------------------ */
/* INQUIRY                                                                   */

static size_t scsi_inquiry_standard(ScsiDisk *d, uint8_t *p)
{
    memset(p, 0, SCSI_INQUIRY_STD_LEN);
    p[0] = SCSI_PDT_DIRECT_ACCESS;
    p[2] = SCSI_INQUIRY_VERSION_SPC4;
    p[3] = SCSI_INQUIRY_RDF;
    p[4] = SCSI_INQUIRY_STD_LEN - 5;        /* additional length */
    p[7] = SCSI_INQUIRY_CMDQUE;
    memcpy(p + SCSI_INQUIRY_VENDOR_OFF, d->vendor, SCSI_INQUIRY_VENDOR_LEN);
    memcpy(p + SCSI_INQUIRY_PRODUCT_OFF, d->product,
           SCSI_INQUIRY_PRODUCT_LEN);
    memcpy(p + SCSI_INQUIRY_REVISION_OFF, d->revision,
           SCSI_INQUIRY_REVISION_LEN);
    return SCSI_INQUIRY_STD_LEN;
}

/* Fill a VPD page's header for len bytes of page data; the page's size. */
static size_t scsi_vpd_header(uint8_t *p, uint8_t page, size_t len)
{
    p[0] = SCSI_PDT_DIRECT_ACCESS;
    p[1] = page;
    st_be16(p + 2, (uint16_t)len);
    return SCSI_VPD_HDR_LEN + len;
}

static size_t scsi_vpd_supported_pages(ScsiDisk *d, uint8_t *p)
{
    size_t n = 0;

    p[SCSI_VPD_HDR_LEN + n++] = SCSI_VPD_SUPPORTED_PAGES;
    if (d->serial_len) {
        p[SCSI_VPD_HDR_LEN + n++] = SCSI_VPD_UNIT_SERIAL_NUMBER;
    }
    p[SCSI_VPD_HDR_LEN + n++] = SCSI_VPD_DEVICE_IDENTIFICATION;
    p[SCSI_VPD_HDR_LEN + n++] = SCSI_VPD_BLOCK_LIMITS;
    p[SCSI_VPD_HDR_LEN + n++] = SCSI_VPD_BLOCK_DEV_CHARS;
    p[SCSI_VPD_HDR_LEN + n++] = SCSI_VPD_LB_PROVISIONING;
    return scsi_vpd_header(p, SCSI_VPD_SUPPORTED_PAGES, n);
}

static size_t scsi_vpd_serial(ScsiDisk *d, uint8_t *p)
{
    memcpy(p + SCSI_VPD_HDR_LEN, d->serial, d->serial_len);
    return scsi_vpd_header(p, SCSI_VPD_UNIT_SERIAL_NUMBER, d->serial_len);
}

static size_t scsi_vpd_device_id(ScsiDisk *d, uint8_t *p)
{
    size_t off = SCSI_VPD_HDR_LEN;
    const char *id;
    size_t id_len;
    uint8_t *desig;
    size_t len;

    if (d->wwn) {
        desig = p + off;
        desig[0] = SCSI_DESIG_CODE_SET_BINARY;
        desig[1] = SCSI_DESIG_ASSOC_LU | SCSI_DESIG_TYPE_NAA;
        desig[2] = 0;
        desig[3] = 8;
        st_be64(desig + SCSI_DESIG_HDR_LEN, d->wwn);
        off += SCSI_DESIG_HDR_LEN + 8;
    }

    /*
     * The vendor-specific part must tell this LU from the others: the
     * serial, or without one the node's name (unique in the daemon), so
     * that two LUNs without serial or WWN do not look like two paths to
     * one disk to the guest's multipath and udev.
     */
    if (d->serial_len) {
        id = d->serial;
        id_len = d->serial_len;
    } else {
        id = block_node_get_name(d->bs);
        id_len = MIN(strlen(id), SCSI_DISK_SERIAL_MAX);
    }
    desig = p + off;
    len = SCSI_INQUIRY_VENDOR_LEN + SCSI_INQUIRY_PRODUCT_LEN + id_len;
    desig[0] = SCSI_DESIG_CODE_SET_ASCII;
    desig[1] = SCSI_DESIG_ASSOC_LU | SCSI_DESIG_TYPE_T10_VENDOR;
    desig[2] = 0;
    desig[3] = (uint8_t)len;
    desig += SCSI_DESIG_HDR_LEN;
    memcpy(desig, d->vendor, SCSI_INQUIRY_VENDOR_LEN);
    memcpy(desig + SCSI_INQUIRY_VENDOR_LEN, d->product,
           SCSI_INQUIRY_PRODUCT_LEN);
    memcpy(desig + SCSI_INQUIRY_VENDOR_LEN + SCSI_INQUIRY_PRODUCT_LEN,
           id, id_len);
    off += SCSI_DESIG_HDR_LEN + len;

    return scsi_vpd_header(p, SCSI_VPD_DEVICE_IDENTIFICATION,
                           off - SCSI_VPD_HDR_LEN);
}

static size_t scsi_vpd_block_limits(ScsiDisk *d, uint8_t *p)
{
    memset(p, 0, SCSI_VPD_HDR_LEN + SCSI_VPD_BL_PAGE_LEN);
    p[SCSI_VPD_BL_WSNZ] = 0x01;     /* WRITE SAME of 0 blocks is invalid */
    st_be16(p + SCSI_VPD_BL_OPT_XFER_GRAN, d->xfer_gran_blocks);
    st_be32(p + SCSI_VPD_BL_MAX_XFER, d->max_xfer_blocks);
    /* SCSI_VPD_BL_OPT_XFER stays 0: see the theory comment. */
    if (d->can_unmap) {
        st_be32(p + SCSI_VPD_BL_MAX_UNMAP_LBAS, d->max_unmap_blocks);
        st_be32(p + SCSI_VPD_BL_MAX_UNMAP_DESCS, SCSI_DISK_MAX_UNMAP_DESCS);
        st_be32(p + SCSI_VPD_BL_OPT_UNMAP_GRAN, d->unmap_gran_blocks);
    }
    st_be64(p + SCSI_VPD_BL_MAX_WRITE_SAME, d->max_ws_blocks);
    return scsi_vpd_header(p, SCSI_VPD_BLOCK_LIMITS, SCSI_VPD_BL_PAGE_LEN);
}

static size_t scsi_vpd_block_dev_chars(ScsiDisk *d, uint8_t *p)
{
    memset(p, 0, SCSI_VPD_HDR_LEN + SCSI_VPD_BDC_PAGE_LEN);
    st_be16(p + SCSI_VPD_BDC_ROTATION_RATE, SCSI_ROTATION_NON_ROTATING);
    return scsi_vpd_header(p, SCSI_VPD_BLOCK_DEV_CHARS,
                           SCSI_VPD_BDC_PAGE_LEN);
}

static size_t scsi_vpd_lb_provisioning(ScsiDisk *d, uint8_t *p)
{
    memset(p, 0, SCSI_VPD_HDR_LEN + SCSI_VPD_LBP_PAGE_LEN);
    if (d->can_unmap) {
        p[SCSI_VPD_LBP_FLAGS] = SCSI_VPD_LBP_LBPU | SCSI_VPD_LBP_LBPWS |
                                SCSI_VPD_LBP_LBPWS10;
        p[SCSI_VPD_LBP_TYPE] = SCSI_PROV_TYPE_THIN;
    }
    return scsi_vpd_header(p, SCSI_VPD_LB_PROVISIONING,
                           SCSI_VPD_LBP_PAGE_LEN);
}

/* VPD page `page` into p; 0 if we do not have it. */
static size_t scsi_inquiry_vpd(ScsiDisk *d, uint8_t page, uint8_t *p)
{
    switch (page) {
    case SCSI_VPD_SUPPORTED_PAGES:
        return scsi_vpd_supported_pages(d, p);
    case SCSI_VPD_UNIT_SERIAL_NUMBER:
        return d->serial_len ? scsi_vpd_serial(d, p) : 0;
    case SCSI_VPD_DEVICE_IDENTIFICATION:
        return scsi_vpd_device_id(d, p);
    case SCSI_VPD_BLOCK_LIMITS:
        return scsi_vpd_block_limits(d, p);
    case SCSI_VPD_BLOCK_DEV_CHARS:
        return scsi_vpd_block_dev_chars(d, p);
    case SCSI_VPD_LB_PROVISIONING:
        return scsi_vpd_lb_provisioning(d, p);
    default:
        return 0;
    }
}

/*
 * INQUIRY.  CmdDt (obsolete) is not supported; a page code without EVPD,
 * or a VPD page we do not have, is an invalid field.
 */
void scsi_disk_cmd_inquiry(ScsiRequest *req)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    const uint8_t *cdb = r->cdb;
    uint8_t buf[SCSI_INFO_BUF_SIZE];
    size_t len;

    if (cdb[1] & SCSI_INQUIRY_CMDDT) {
        scsi_req_invalid_cdb(req);
        return;
    }
    if (cdb[1] & SCSI_INQUIRY_EVPD) {
        len = scsi_inquiry_vpd(r->d, cdb[2], buf);
    } else {
        len = cdb[2] == 0 ? scsi_inquiry_standard(r->d, buf) : 0;
    }
    if (len == 0) {
        scsi_req_invalid_cdb(req);
        return;
    }
    scsi_req_reply(req, buf, len, ld_be16(cdb + 3));
}

/* ------------------------------------------------------------------------ */
/* READ CAPACITY                                                             */

static uint64_t scsi_disk_last_lba(ScsiDisk *d)
{
    uint64_t n = scsi_disk_num_blocks(d);

    return n ? n - 1 : 0;
}

/*
 * READ CAPACITY(10): 8 bytes, no allocation length, so a smaller data-in
 * buffer is an overrun.  The obsolete PMI bit is accepted (the answer is
 * the last LBA either way); without it the LBA field must be 0.
 */
void scsi_disk_cmd_read_capacity_10(ScsiRequest *req)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    uint8_t buf[SCSI_READ_CAPACITY_10_LEN];
    uint64_t last;

    if (!(r->cdb[8] & SCSI_READ_CAPACITY_PMI) && ld_be32(r->cdb + 2)) {
        scsi_req_invalid_cdb(req);
        return;
    }
    if (req->in_len < sizeof(buf)) {
        scsi_req_xfer_fail(req, SCSI_XFER_OVERRUN);
        return;
    }
    last = scsi_disk_last_lba(r->d);
    /* Too large for 32 bits: all ones tells the initiator to use (16). */
    st_be32(buf, last > UINT32_MAX - 1 ? UINT32_MAX : (uint32_t)last);
    st_be32(buf + 4, r->d->block_size);
    scsi_req_reply(req, buf, sizeof(buf), sizeof(buf));
}

/* SERVICE ACTION IN(16): only READ CAPACITY(16). */
void scsi_disk_cmd_service_action_in(ScsiRequest *req)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    ScsiDisk *d = r->d;
    uint8_t buf[SCSI_READ_CAPACITY_16_LEN];

    if ((r->cdb[1] & SCSI_SA_MASK) != SCSI_SAI_READ_CAPACITY_16) {
        scsi_req_invalid_cdb(req);
        return;
    }
    memset(buf, 0, sizeof(buf));
    st_be64(buf, scsi_disk_last_lba(d));
    st_be32(buf + 8, d->block_size);
    /* Byte 13: no protection, one logical block per physical block. */
    if (d->can_unmap) {
        buf[14] = SCSI_READ_CAPACITY_16_LBPME;
    }
    scsi_req_reply(req, buf, sizeof(buf), ld_be32(r->cdb + 10));
}

/* ------------------------------------------------------------------------ */
/* Mode pages                                                                */

/* Zero the len bytes of mode page `page` at p and fill in its header. */
static void scsi_mode_page_init(uint8_t *p, uint8_t page, size_t len)
{
    memset(p, 0, len);
    p[0] = page;
    p[1] = len - 2;
}

/*
 * A bit the driver may change (WCE, D_SENSE), as page control pc asks
 * for it: set in the changeable mask, else its default or current value.
 */
static bool scsi_mode_bit(unsigned pc, bool dflt, bool current)
{
    switch (pc) {
    case SCSI_PC_CHANGEABLE:
        return true;
    case SCSI_PC_DEFAULT:
        return dflt;
    default:
        return current;
    }
}

static size_t scsi_mode_page_caching(ScsiDisk *d, unsigned pc, uint8_t *p)
{
    bool wce = scsi_mode_bit(pc, d->default_wce,
                             atomic_load_explicit(&d->wce,
                                                  memory_order_relaxed));

    scsi_mode_page_init(p, SCSI_MODE_PAGE_CACHING, SCSI_MODE_CACHING_LEN);
    p[2] = wce ? SCSI_MODE_CACHING_WCE : 0;
    return SCSI_MODE_CACHING_LEN;
}

static size_t scsi_mode_page_control(ScsiDisk *d, unsigned pc, uint8_t *p)
{
    bool d_sense = scsi_mode_bit(pc, false,
                                 atomic_load_explicit(&d->d_sense,
                                                      memory_order_relaxed));

    scsi_mode_page_init(p, SCSI_MODE_PAGE_CONTROL, SCSI_MODE_CONTROL_LEN);
    p[2] = d_sense ? SCSI_MODE_CONTROL_D_SENSE : 0;
    if (pc != SCSI_PC_CHANGEABLE) {
        /* Commands may complete in any order (they do, across queues). */
        p[3] = SCSI_MODE_CONTROL_QAM_UNRESTRICTED;
    }
    return SCSI_MODE_CONTROL_LEN;
}

/* Page `code` (not ALL) into p; 0 if we do not have it. */
static size_t scsi_mode_page(ScsiDisk *d, unsigned code, unsigned pc,
                             uint8_t *p)
{
    switch (code) {
    case SCSI_MODE_PAGE_CACHING:
        return scsi_mode_page_caching(d, pc, p);
    case SCSI_MODE_PAGE_CONTROL:
        return scsi_mode_page_control(d, pc, p);
    default:
        return 0;
    }
}

/* The block descriptor (short or long) into p; its length. */
static size_t scsi_mode_block_desc(ScsiDisk *d, bool longlba, unsigned pc,
                                   uint8_t *p)
{
    size_t len = longlba ? SCSI_MODE_BLKDESC_LONG_LEN : SCSI_MODE_BLKDESC_LEN;
    uint64_t blocks = scsi_disk_num_blocks(d);

    memset(p, 0, len);
    if (pc == SCSI_PC_CHANGEABLE) {
        return len;
    }
    if (longlba) {
        st_be64(p, blocks);
        st_be32(p + 12, d->block_size);
    } else {
        st_be32(p, blocks > UINT32_MAX ? UINT32_MAX : (uint32_t)blocks);
        st_be24(p + 5, d->block_size);
    }
    return len;
}

static uint8_t scsi_mode_device_specific(ScsiDisk *d)
{
    return (d->writable ? 0 : SCSI_MODE_DEVSPEC_WP) | SCSI_MODE_DEVSPEC_DPOFUA;
}

/*
 * MODE SENSE (6/10).  DBD drops the block descriptor; LLBAA (10 only)
 * asks for the long one.  Saved values are not supported (SAVING
 * PARAMETERS NOT SUPPORTED); subpage 0 or 0xFF (all subpages: ours have
 * none) only.
 */
void scsi_disk_cmd_mode_sense(ScsiRequest *req)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    ScsiDisk *d = r->d;
    const uint8_t *cdb = r->cdb;
    bool ten = cdb[0] == SCSI_OP_MODE_SENSE_10;
    bool dbd = cdb[1] & SCSI_MODE_SENSE_DBD;
    bool llbaa = ten && (cdb[1] & SCSI_MODE_SENSE_LLBAA);
    unsigned pc = cdb[2] >> SCSI_MODE_SENSE_PC_SHIFT;
    unsigned page = cdb[2] & SCSI_MODE_SENSE_PAGE_MASK;
    size_t alloc = ten ? ld_be16(cdb + 7) : cdb[4];
    size_t hdr_len = ten ? SCSI_MODE_HDR10_LEN : SCSI_MODE_HDR6_LEN;
    uint8_t buf[SCSI_INFO_BUF_SIZE];
    size_t off = hdr_len, bd_len = 0, n;

    if (pc == SCSI_PC_SAVED) {
        scsi_req_fail(req, SCSI_SENSE_ILLEGAL_REQUEST,
                      SCSI_ASC_SAVING_PARAMS_NOT_SUPPORTED,
                      SCSI_ASCQ_SAVING_PARAMS_NOT_SUPPORTED);
        return;
    }
    if (cdb[3] != 0 && cdb[3] != SCSI_MODE_SUBPAGE_ALL) {
        scsi_req_invalid_cdb(req);
        return;
    }
    if (!dbd) {
        bd_len = scsi_mode_block_desc(d, llbaa, pc, buf + off);
        off += bd_len;
    }
    if (page == SCSI_MODE_PAGE_ALL) {
        off += scsi_mode_page(d, SCSI_MODE_PAGE_CACHING, pc, buf + off);
        off += scsi_mode_page(d, SCSI_MODE_PAGE_CONTROL, pc, buf + off);
    } else {
        n = scsi_mode_page(d, page, pc, buf + off);
        if (n == 0) {
            scsi_req_invalid_cdb(req);
            return;
        }
        off += n;
    }

    memset(buf, 0, hdr_len);
    if (ten) {
        st_be16(buf, (uint16_t)(off - 2));    /* excludes itself */
        buf[3] = scsi_mode_device_specific(d);
        buf[4] = llbaa && bd_len ? SCSI_MODE_HDR10_LONGLBA : 0;
        st_be16(buf + 6, (uint16_t)bd_len);
    } else {
        buf[0] = (uint8_t)(off - 1);
        buf[2] = scsi_mode_device_specific(d);
        buf[3] = (uint8_t)bd_len;
    }
    scsi_req_reply(req, buf, off, alloc);
}

/*
 * One page of a MODE SELECT list (len bytes, length already checked to
 * fit the list).  Every byte must match the current page but for the
 * changeable bits; the new WCE / D_SENSE go to *wce / *d_sense.
 */
static bool scsi_mode_select_page(ScsiDisk *d, const uint8_t *page,
                                  size_t len, bool *wce, bool *d_sense)
{
    unsigned code = page[0] & SCSI_MODE_PAGE_CODE_MASK;
    uint8_t cur[SCSI_INFO_BUF_SIZE], mask[SCSI_INFO_BUF_SIZE];
    size_t n = scsi_mode_page(d, code, SCSI_PC_CURRENT, cur);

    if (n == 0 || len != n || (page[0] & SCSI_MODE_PAGE_SPF)) {
        return false;
    }
    scsi_mode_page(d, code, SCSI_PC_CHANGEABLE, mask);
    /* Byte 0's PS bit is reserved in MODE SELECT; byte 1 is checked. */
    for (size_t i = 1; i < n; i++) {
        if ((page[i] ^ cur[i]) & ~mask[i]) {
            return false;
        }
    }
    if (code == SCSI_MODE_PAGE_CACHING) {
        *wce = page[2] & SCSI_MODE_CACHING_WCE;
    } else {
        *d_sense = page[2] & SCSI_MODE_CONTROL_D_SENSE;
    }
    return true;
}

/* A MODE SELECT block descriptor: the current values, or 0 blocks. */
static bool scsi_mode_select_block_desc_ok(ScsiDisk *d, const uint8_t *p,
                                           bool longlba)
{
    uint8_t cur[SCSI_MODE_BLKDESC_LONG_LEN];
    size_t len = scsi_mode_block_desc(d, longlba, SCSI_PC_CURRENT, cur);
    size_t count_len = longlba ? 8 : 4;
    static const uint8_t zero[8];

    if (memcmp(p, cur, count_len) != 0 && memcmp(p, zero, count_len) != 0) {
        return false;
    }
    return memcmp(p + count_len, cur + count_len, len - count_len) == 0;
}

/*
 * Check the parameter list p[0..plen) and, if it is entirely valid, apply
 * it.  Completes req on an error; true if it did not.
 */
static bool scsi_mode_select_apply(ScsiRequest *req, const uint8_t *p,
                                   size_t plen, bool ten)
{
    ScsiDisk *d = scsi_disk_req(req)->d;
    size_t hdr_len = ten ? SCSI_MODE_HDR10_LEN : SCSI_MODE_HDR6_LEN;
    bool wce = atomic_load_explicit(&d->wce, memory_order_relaxed);
    bool d_sense = atomic_load_explicit(&d->d_sense, memory_order_relaxed);
    bool longlba;
    size_t bd_len, off;

    if (plen < hdr_len) {
        scsi_req_param_length_error(req);
        return false;
    }
    longlba = ten && (p[4] & SCSI_MODE_HDR10_LONGLBA);
    bd_len = ten ? ld_be16(p + 6) : p[3];
    if (p[ten ? 2 : 1] != 0 ||      /* medium type */
        (bd_len != 0 && bd_len != (longlba ? SCSI_MODE_BLKDESC_LONG_LEN
                                           : SCSI_MODE_BLKDESC_LEN))) {
        scsi_req_invalid_param(req);
        return false;
    }
    if (hdr_len + bd_len > plen) {
        goto length_error;
    }
    if (bd_len && !scsi_mode_select_block_desc_ok(d, p + hdr_len, longlba)) {
        scsi_req_invalid_param(req);
        return false;
    }
    for (off = hdr_len + bd_len; off < plen;) {
        size_t len;

        if (plen - off < 2) {
            goto length_error;
        }
        len = (size_t)p[off + 1] + 2;
        if (len > plen - off) {
            goto length_error;
        }
        if (!scsi_mode_select_page(d, p + off, len, &wce, &d_sense)) {
            scsi_req_invalid_param(req);
            return false;
        }
        off += len;
    }
    atomic_store_explicit(&d->wce, wce, memory_order_relaxed);
    atomic_store_explicit(&d->d_sense, d_sense, memory_order_relaxed);
    return true;

length_error:
    scsi_req_param_length_error(req);
    return false;
}

/* MODE SELECT (6/10); see the theory comment for what is accepted. */
void scsi_disk_cmd_mode_select(ScsiRequest *req)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    const uint8_t *cdb = r->cdb;
    bool ten = cdb[0] == SCSI_OP_MODE_SELECT_10;
    size_t plen = ten ? ld_be16(cdb + 7) : cdb[4];
    uint8_t buf[SCSI_MODE_SELECT_MAX];

    if (cdb[1] & SCSI_MODE_SELECT_SP) {
        scsi_req_invalid_cdb(req);
        return;
    }
    /* SPC: no data is not an error. */
    if (!scsi_req_want_data_out(req, plen)) {
        return;
    }
    if (!(cdb[1] & SCSI_MODE_SELECT_PF)) {
        scsi_req_invalid_cdb(req);
        return;
    }
    if (plen > sizeof(buf)) {
        scsi_req_param_length_error(req);
        return;
    }
    /* One copy out of guest memory; only the copy is looked at. */
    iov_to_buf(req->out_iov, req->out_niov, 0, buf, plen);
    if (scsi_mode_select_apply(req, buf, plen, ten)) {
        scsi_req_complete(req);
    }
}

/* ------------------------------------------------------------------------ */
/* REQUEST SENSE                                                             */

/*
 * The pending unit attention (which this clears), else NO SENSE; in the
 * format the DESC bit asks for, whatever D_SENSE says.
 */
void scsi_disk_cmd_request_sense(ScsiRequest *req)
{
    ScsiDiskReq *r = scsi_disk_req(req);
    bool desc = r->cdb[1] & SCSI_REQUEST_SENSE_DESC;
    uint8_t buf[SCSI_SENSE_BUF_SIZE];
    uint8_t asc, ascq;
    unsigned len;

    if (scsi_disk_take_unit_attention(r->d, &asc, &ascq)) {
        len = scsi_build_sense(buf, desc, SCSI_SENSE_UNIT_ATTENTION, asc,
                               ascq);
    } else {
        len = scsi_build_sense(buf, desc, SCSI_SENSE_NO_SENSE,
                               SCSI_ASC_NO_ADDITIONAL_SENSE,
                               SCSI_ASCQ_NO_ADDITIONAL_SENSE);
    }
    scsi_req_reply(req, buf, len, r->cdb[4]);
}

/*
 * Helpers shared by the SCSI disk test programs; see scsi-test-helpers.h.
 *
 * Theory of operation: a Lun owns an AioContext whose home thread is the
 * test's, so submitting a command, the block layer's completions and the
 * disk's callbacks all run in the test's thread; cmd_wait() runs that
 * context's loop until the command's callback has run.
 */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "block/block.h"
#include "hw/scsi/scsi-defs.h"
#include "hw/scsi/scsi-disk.h"
#include "util/aio.h"
#include "scsi-test-helpers.h"
#include "test-helpers.h"

/* ------------------------------------------------------------------------ */
/* Big-endian fields                                                        */

void put16(uint8_t *p, uint16_t v)
{
    p[0] = v >> 8;
    p[1] = v;
}

void put32(uint8_t *p, uint32_t v)
{
    put16(p, v >> 16);
    put16(p + 2, v);
}

void put64(uint8_t *p, uint64_t v)
{
    put32(p, v >> 32);
    put32(p + 4, v);
}

uint32_t get16(const uint8_t *p)
{
    return (uint32_t)p[0] << 8 | p[1];
}

uint32_t get32(const uint8_t *p)
{
    return get16(p) << 16 | get16(p + 2);
}

uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

/* ------------------------------------------------------------------------ */
/* LUNs                                                                      */

ScsiDiskConf conf_default(void)
{
    return (ScsiDiskConf) {
        .vendor = "TESTVEND",
        .product = "TEST DISK",
        .revision = "1.2",
        .serial = "SER-0042",
        .logical_block_size = 512,
        .writable = true,
    };
}

static void lun_open(Lun *l, const char *opts, const ScsiDiskConf *conf)
{
    Error *err = NULL;

    if (!l->path) {
        l->fd = -1;
    }
    l->ctx = ctx_new();
    l->bs = block_node_open_str(opts, l->ctx, &err);
    if (!l->bs) {
        g_error("opening '%s' failed: %s", opts, err->message);
    }
    l->q = block_queue_new(l->bs, l->ctx, &err);
    g_assert_no_error(err);
    l->d = scsi_disk_new(conf, l->bs, &err);
    if (!l->d) {
        g_error("scsi_disk_new over '%s' failed: %s", opts, err->message);
    }
}

/* A null-co LUN of size bytes whose reads return zeroes. */
void lun_open_null(Lun *l, const char *size, const char *extra,
                   const ScsiDiskConf *conf)
{
    g_autofree char *opts = g_strdup_printf(
        "driver=null-co,read-zeroes=on,size=%s%s%s", size, extra ? "," : "",
        extra ? extra : "");

    memset(l, 0, sizeof(*l));
    lun_open(l, opts, conf);
}

void lun_open_default(Lun *l)
{
    ScsiDiskConf conf = conf_default();

    lun_open_null(l, "1M", NULL, &conf);
}

/* A LUN over a temporary file of size bytes (all 0x5a), threads engine. */
void lun_open_file(Lun *l, int64_t size, const char *extra,
                   const ScsiDiskConf *conf)
{
    g_autoptr(GError) gerr = NULL;
    g_autofree char *opts = NULL;
    g_autofree uint8_t *fill = g_malloc(size);

    memset(l, 0, sizeof(*l));
    l->fd = g_file_open_tmp("test-scsi-disk-XXXXXX", &l->path, &gerr);
    g_assert_no_error(gerr);
    memset(fill, 0x5a, size);
    g_assert_cmpint(pwrite(l->fd, fill, size, 0), ==, size);
    opts = g_strdup_printf("driver=file,filename=%s,aio=threads%s%s",
                           l->path, extra ? "," : "", extra ? extra : "");
    lun_open(l, opts, conf);
}

/* A blkdebug LUN over 1 MiB of null-co, with the given rules. */
void lun_open_blkdebug(Lun *l, const char *rules,
                       const ScsiDiskConf *conf)
{
    g_autofree char *opts = g_strdup_printf(
        "driver=blkdebug,image.driver=null-co,image.read-zeroes=on,"
        "image.size=1M,%s", rules);

    memset(l, 0, sizeof(*l));
    lun_open(l, opts, conf);
}

void lun_close(Lun *l)
{
    scsi_disk_free(l->d);
    block_queue_free(l->q);
    block_node_unref(l->bs);
    aio_context_unref(l->ctx);
    if (l->path) {
        close(l->fd);
        g_unlink(l->path);
        g_free(l->path);
    }
}

void file_read(Lun *l, int64_t offset, void *buf, size_t len)
{
    g_assert_cmpint(pread(l->fd, buf, len, offset), ==, (ssize_t)len);
}

void assert_file_bytes(Lun *l, int64_t offset, size_t len,
                       uint8_t byte)
{
    g_autofree uint8_t *got = NULL;
    g_autofree uint8_t *want = NULL;

    if (len == 0) {
        return;
    }
    got = g_malloc(len);
    want = g_malloc(len);
    file_read(l, offset, got, len);
    memset(want, byte, len);
    assert_same(got, want, len, offset, "image");
}

/* Allocated bytes of the image (st_blocks). */
int64_t file_allocated(Lun *l)
{
    struct stat st;

    g_assert_cmpint(fstat(l->fd, &st), ==, 0);
    return (int64_t)st.st_blocks * 512;
}

/* ------------------------------------------------------------------------ */
/* Commands                                                                  */

static void cmd_cb(ScsiRequest *req)
{
    Cmd *c = container_of(req, Cmd, req);

    c->callbacks++;
}

/* Set c up for cdb with one data-out and one data-in segment. */
void cmd_init(Cmd *c, const uint8_t *cdb, unsigned cdb_len,
              const void *out, size_t out_len, void *in,
              size_t in_len)
{
    memset(c, 0, sizeof(*c));
    memset(&c->req.priv, 0xa5, sizeof(c->req.priv));
    memset(c->req.sense, 0xee, sizeof(c->req.sense));
    c->req.status = 0xff;
    c->req.in_done = UINT64_MAX;
    memcpy(c->cdb, cdb, cdb_len);
    c->req.cdb = c->cdb;
    c->req.cdb_len = cdb_len;
    if (out_len) {
        c->out_iov[0] = (struct iovec) { (void *)out, out_len };
        c->req.out_iov = c->out_iov;
        c->req.out_niov = 1;
        c->req.out_len = out_len;
    }
    if (in_len) {
        c->in_iov[0] = (struct iovec) { in, in_len };
        c->req.in_iov = c->in_iov;
        c->req.in_niov = 1;
        c->req.in_len = in_len;
    }
    c->req.cb = cmd_cb;
}

void cmd_submit(Lun *l, Cmd *c)
{
    scsi_disk_submit(l->d, l->q, &c->req);
    c->sync = c->callbacks > 0;
}

void cmd_wait(Lun *l, Cmd *c)
{
    while (c->callbacks == 0) {
        aio_poll(l->ctx, true);
    }
    g_assert_cmpuint(c->callbacks, ==, 1);
    g_assert_cmpuint(block_queue_in_flight(l->q), ==, 0);
}

void cmd_run(Lun *l, Cmd *c)
{
    cmd_submit(l, c);
    cmd_wait(l, c);
}

/* Run cdb (its length from the opcode group) with the given buffers. */
void run(Lun *l, Cmd *c, const uint8_t *cdb, unsigned cdb_len,
         const void *out, size_t out_len, void *in, size_t in_len)
{
    cmd_init(c, cdb, cdb_len, out, out_len, in, in_len);
    cmd_run(l, c);
}

void assert_good(const Cmd *c)
{
    g_assert_cmpuint(c->req.xfer_error, ==, SCSI_XFER_OK);
    g_assert_cmphex(c->req.status, ==, 0x00);
    g_assert_cmpuint(c->req.sense_len, ==, 0);
}

void run_good(Lun *l, Cmd *c, const uint8_t *cdb, unsigned cdb_len,
              const void *out, size_t out_len, void *in, size_t in_len)
{
    run(l, c, cdb, cdb_len, out, out_len, in, in_len);
    assert_good(c);
}

void assert_xfer(const Cmd *c, ScsiXferError err)
{
    g_assert_cmpuint(c->req.xfer_error, ==, err);
    g_assert_cmpuint(c->req.in_done, ==, 0);
    g_assert_cmpuint(c->req.sense_len, ==, 0);
}

/* CHECK CONDITION with fixed-format sense key/asc/ascq. */
void assert_sense(const Cmd *c, uint8_t key, uint8_t asc,
                  uint8_t ascq)
{
    const uint8_t *s = c->req.sense;

    g_assert_cmpuint(c->req.xfer_error, ==, SCSI_XFER_OK);
    g_assert_cmphex(c->req.status, ==, 0x02);
    g_assert_cmpuint(c->req.in_done, ==, 0);
    g_assert_cmpuint(c->req.sense_len, ==, 18);
    g_assert_cmphex(s[0] & 0x7f, ==, 0x70);
    g_assert_cmphex(s[2], ==, key);
    g_assert_cmphex(s[7], ==, 10);
    g_assert_cmphex(s[12], ==, asc);
    g_assert_cmphex(s[13], ==, ascq);
}

/* The same in descriptor format. */
void assert_sense_desc(const Cmd *c, uint8_t key, uint8_t asc,
                       uint8_t ascq)
{
    const uint8_t *s = c->req.sense;

    g_assert_cmphex(c->req.status, ==, 0x02);
    g_assert_cmpuint(c->req.sense_len, >=, 8);
    g_assert_cmphex(s[0], ==, 0x72);
    g_assert_cmphex(s[1], ==, key);
    g_assert_cmphex(s[2], ==, asc);
    g_assert_cmphex(s[3], ==, ascq);
    g_assert_cmpuint(c->req.sense_len, ==, 8u + s[7]);
}

void assert_invalid_cdb(const Cmd *c)
{
    assert_sense(c, KEY_ILLEGAL_REQUEST, 0x24, 0x00);
}

/* ------------------------------------------------------------------------ */
/* CDBs                                                                      */

/* A READ/WRITE-like CDB of op's size; its length. */
unsigned cdb_io(uint8_t *cdb, uint8_t op, uint64_t lba,
                uint32_t count, uint8_t byte1)
{
    memset(cdb, 0, 16);
    cdb[0] = op;
    switch (op >> 5) {
    case 0:
        cdb[1] = (lba >> 16) & 0x1f;
        cdb[2] = lba >> 8;
        cdb[3] = lba;
        cdb[4] = count;
        return 6;
    case 1:
    case 2:
        cdb[1] = byte1;
        put32(cdb + 2, lba);
        put16(cdb + 7, count);
        return 10;
    case 4:
        cdb[1] = byte1;
        put64(cdb + 2, lba);
        put32(cdb + 10, count);
        return 16;
    default:
        cdb[1] = byte1;
        put32(cdb + 2, lba);
        put32(cdb + 6, count);
        return 12;
    }
}

unsigned cdb6(uint8_t *cdb, uint8_t op, uint8_t b1, uint8_t b2,
              uint8_t b3, uint8_t b4)
{
    memset(cdb, 0, 16);
    cdb[0] = op;
    cdb[1] = b1;
    cdb[2] = b2;
    cdb[3] = b3;
    cdb[4] = b4;
    return 6;
}

unsigned cdb_inquiry(uint8_t *cdb, bool evpd, uint8_t page,
                     uint16_t alloc)
{
    cdb6(cdb, SCSI_OP_INQUIRY, evpd ? 1 : 0, page, 0, 0);
    put16(cdb + 3, alloc);
    return 6;
}

/* MODE SENSE(10) (ten) or (6). */
/* A MODE SENSE or MODE SELECT CDB (op6/op10): byte 1 and the length. */
static unsigned cdb_mode(uint8_t *cdb, bool ten, uint8_t op6, uint8_t op10,
                         uint8_t byte1, uint16_t len)
{
    memset(cdb, 0, 16);
    cdb[0] = ten ? op10 : op6;
    cdb[1] = byte1;
    if (ten) {
        put16(cdb + 7, len);
        return 10;
    }
    cdb[4] = len;
    return 6;
}

unsigned cdb_mode_sense(uint8_t *cdb, bool ten, uint8_t byte1,
                        uint8_t pc, uint8_t page, uint8_t subpage,
                        uint16_t alloc)
{
    unsigned len = cdb_mode(cdb, ten, SCSI_OP_MODE_SENSE_6,
                            SCSI_OP_MODE_SENSE_10, byte1, alloc);

    cdb[2] = pc << 6 | page;
    cdb[3] = subpage;
    return len;
}

unsigned cdb_mode_select(uint8_t *cdb, bool ten, uint8_t byte1,
                         uint16_t plen)
{
    return cdb_mode(cdb, ten, SCSI_OP_MODE_SELECT_6, SCSI_OP_MODE_SELECT_10,
                    byte1, plen);
}

/* ------------------------------------------------------------------------ */
/* Common command sequences                                                  */

void run_simple(Lun *l, Cmd *c, uint8_t op)
{
    uint8_t cdb[16];

    run(l, c, cdb, cdb6(cdb, op, 0, 0, 0, 0), NULL, 0, NULL, 0);
}

/* Write/read count blocks of buf at lba with op; asserts GOOD. */
void rw_ok(Lun *l, uint8_t op, uint64_t lba, uint32_t count,
           uint8_t byte1, void *buf, size_t len)
{
    bool write = op == SCSI_OP_WRITE_6 || op == SCSI_OP_WRITE_10 ||
                 op == SCSI_OP_WRITE_12 || op == SCSI_OP_WRITE_16;
    uint8_t cdb[16];
    unsigned n = cdb_io(cdb, op, lba, count, byte1);
    Cmd c;

    if (write) {
        run(l, &c, cdb, n, buf, len, NULL, 0);
    } else {
        run(l, &c, cdb, n, NULL, 0, buf, len);
    }
    assert_good(&c);
    g_assert_false(c.sync);
    g_assert_cmpuint(c.req.in_done, ==, write ? 0 : len);
}

/* The page `page` (current values unless pc) via MODE SENSE(10), DBD. */
size_t get_mode_page(Lun *l, uint8_t pc, uint8_t page, uint8_t *out)
{
    uint8_t cdb[16], buf[256];
    size_t len;
    Cmd c;

    run(l, &c, cdb, cdb_mode_sense(cdb, true, 0x08, pc, page, 0, 256),
        NULL, 0, buf, sizeof(buf));
    assert_good(&c);
    g_assert_cmpuint(get16(buf + 6), ==, 0);           /* no descriptor */
    len = c.req.in_done - 8;
    g_assert_cmpuint(get16(buf), ==, c.req.in_done - 2);
    memcpy(out, buf + 8, len);
    return len;
}

/* MODE SELECT(10) with PF of one page; returns the command for checks. */
void mode_select(Lun *l, Cmd *c, const uint8_t *page, size_t len)
{
    uint8_t cdb[16], list[256];

    memset(list, 0, 8);
    memcpy(list + 8, page, len);
    run(l, c, cdb, cdb_mode_select(cdb, true, 0x10, 8 + len), list, 8 + len,
        NULL, 0);
}

/* Set or clear bit 2 of byte 2 of mode page page_code (WCE of the
 * caching page, D_SENSE of the control page); assert GOOD. */
static void set_mode_page_bit2(Lun *l, uint8_t page_code, bool on)
{
    uint8_t page[64];
    size_t len = get_mode_page(l, 0, page_code, page);
    Cmd c;

    page[2] = (page[2] & ~0x04) | (on ? 0x04 : 0);
    mode_select(l, &c, page, len);
    assert_good(&c);
}

void set_wce(Lun *l, bool wce)
{
    set_mode_page_bit2(l, 0x08, wce);
}

void set_d_sense(Lun *l, bool d_sense)
{
    set_mode_page_bit2(l, 0x0a, d_sense);
}


/*
 * Unit tests for the SCSI disk emulation, the commands answered without
 * I/O (hw/scsi/scsi-disk-info.c) and the dispatch (hw/scsi/scsi-disk.c):
 * creation errors, opcode/CDB/direction checks, INQUIRY and its VPD
 * pages byte by byte, READ CAPACITY, MODE SENSE / MODE SELECT, REQUEST
 * SENSE, unit attentions, and the transport helpers (REPORT LUNS data,
 * sense data).  The data path is in test-scsi-disk-io.c.
 *
 * Theory of operation: each test builds a LUN over a null-co node (see
 * scsi-test-helpers.h), runs CDBs through scsi_disk_submit() and checks
 * status, sense and data-in bytes against the values SPC-4/SBC-3 give.
 */
#include <stdint.h>
#include <string.h>
#include <glib.h>

#include "block/block.h"
#include "hw/scsi/scsi-defs.h"
#include "hw/scsi/scsi-disk.h"
#include "scsi-test-helpers.h"
#include "test-helpers.h"

/* ------------------------------------------------------------------------ */
/* Creation                                                                  */

static void new_fails(const char *opts, const ScsiDiskConf *conf,
                      const char *needle)
{
    AioContext *ctx = ctx_new();
    Error *err = NULL;
    BlockNode *bs = block_node_open_str(opts, ctx, &err);
    ScsiDisk *d;

    g_assert_no_error(err);
    d = scsi_disk_new(conf, bs, &err);
    g_assert_null(d);
    g_assert_nonnull(err);
    if (!strstr(err->message, needle)) {
        g_error("error '%s' does not mention '%s'", err->message, needle);
    }
    g_test_message("%s", err->message);
    error_free(err);
    block_node_unref(bs);
    aio_context_unref(ctx);
}

static void test_new_errors(void)
{
    ScsiDiskConf conf = conf_default();
    const char *null = "driver=null-co,size=1M";

    conf.vendor = "NINECHARS";
    new_fails(null, &conf, "vendor");
    conf = conf_default();
    conf.product = "SEVENTEEN CHARS!!";
    new_fails(null, &conf, "product");
    conf = conf_default();
    conf.revision = "1.2.3";
    new_fails(null, &conf, "revision");
    conf = conf_default();
    conf.serial = "tab\there";
    new_fails(null, &conf, "serial");
    conf = conf_default();
    conf.serial = "0123456789012345678901234567890123456";   /* 37 */
    new_fails(null, &conf, "serial");
    conf = conf_default();
    conf.logical_block_size = 1024;
    new_fails(null, &conf, "logical-block-size");
    conf = conf_default();
    new_fails("driver=null-co,size=1M,read-only=on", &conf, "read-only");
    conf.logical_block_size = 4096;
    new_fails("driver=null-co,size=6144", &conf, "multiple");
    conf.logical_block_size = 512;
    new_fails("driver=null-co,size=0", &conf, "smaller");
}

static void test_new_accessors(void)
{
    ScsiDiskConf conf = conf_default();
    Lun l;

    conf.logical_block_size = 4096;
    lun_open_null(&l, "1M", NULL, &conf);
    g_assert_true(scsi_disk_get_node(l.d) == l.bs);
    g_assert_cmpuint(scsi_disk_block_size(l.d), ==, 4096);
    lun_close(&l);

    /* A read-only LUN over a read-only node is fine. */
    conf = conf_default();
    conf.writable = false;
    lun_open_null(&l, "1M", "read-only=on", &conf);
    lun_close(&l);
}

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                  */

static void test_test_unit_ready(void)
{
    uint8_t cdb[16], buf[16];
    Lun l;
    Cmd c;

    lun_open_default(&l);
    run_simple(&l, &c, SCSI_OP_TEST_UNIT_READY);
    assert_good(&c);
    g_assert_true(c.sync);
    g_assert_cmpuint(c.req.in_done, ==, 0);

    /* Data in a direction a command does not use: not executed. */
    cdb6(cdb, SCSI_OP_TEST_UNIT_READY, 0, 0, 0, 0);
    run(&l, &c, cdb, 6, NULL, 0, buf, sizeof(buf));
    assert_xfer(&c, SCSI_XFER_WRONG_DIRECTION);
    cdb_inquiry(cdb, false, 0, 36);
    run(&l, &c, cdb, 6, buf, sizeof(buf), buf, sizeof(buf));
    assert_xfer(&c, SCSI_XFER_WRONG_DIRECTION);
    lun_close(&l);
}

static void test_invalid_opcode(void)
{
    static const uint8_t ops[] = { 0xff, 0x7f, 0xa0, 0x04, 0x3b, 0xa3 };
    uint8_t cdb[32] = { 0 };
    Lun l;
    Cmd c;

    lun_open_default(&l);
    for (size_t i = 0; i < G_N_ELEMENTS(ops); i++) {
        static const uint8_t want[18] = {
            0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x20, 0x00,
        };

        cdb[0] = ops[i];
        run(&l, &c, cdb, 32, NULL, 0, NULL, 0);
        assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x20, 0x00);
        g_assert_true(c.sync);
        /* Every byte of the fixed format. */
        g_assert_cmpmem(c.req.sense, 18, want, 18);
    }
    /* No CDB at all. */
    run(&l, &c, cdb, 0, NULL, 0, NULL, 0);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x20, 0x00);
    lun_close(&l);
}

static void test_short_cdb(void)
{
    uint8_t cdb[16], buf[4096];
    Lun l;
    Cmd c;

    lun_open_default(&l);
    /* READ(10) with only 9 bytes of CDB, READ(16) with 10. */
    cdb_io(cdb, SCSI_OP_READ_10, 0, 1, 0);
    run(&l, &c, cdb, 9, NULL, 0, buf, 512);
    assert_invalid_cdb(&c);
    cdb_io(cdb, SCSI_OP_READ_16, 0, 1, 0);
    run(&l, &c, cdb, 10, NULL, 0, buf, 512);
    assert_invalid_cdb(&c);
    cdb_inquiry(cdb, false, 0, 36);
    run(&l, &c, cdb, 5, NULL, 0, buf, 36);
    assert_invalid_cdb(&c);
    /* NACA in the CONTROL byte: we have no ACA. */
    cdb_io(cdb, SCSI_OP_READ_10, 0, 1, 0);
    cdb[9] = 0x04;
    run(&l, &c, cdb, 10, NULL, 0, buf, 512);
    assert_invalid_cdb(&c);
    /* A longer CDB than needed is fine. */
    cdb_io(cdb, SCSI_OP_READ_10, 0, 1, 0);
    run_good(&l, &c, cdb, 16, NULL, 0, buf, 512);
    lun_close(&l);
}

/* The CDB is copied: changing it while the command runs changes nothing. */
static void test_cdb_copied(void)
{
    ScsiDiskConf conf = conf_default();
    uint8_t data[1024], got[512], cdb[16];
    Lun l;
    Cmd c;

    lun_open_file(&l, 64 * KiB, NULL, &conf);
    fill_random(data, sizeof(data));
    rw_ok(&l, SCSI_OP_WRITE_10, 0, 2, 0, data, sizeof(data));

    cmd_init(&c, cdb, cdb_io(cdb, SCSI_OP_READ_10, 1, 1, 0), NULL, 0, got,
             sizeof(got));
    cmd_submit(&l, &c);
    g_assert_false(c.sync);
    cdb_io(c.cdb, SCSI_OP_WRITE_10, 0, 1, 0);     /* the "guest" rewrites it */
    cmd_wait(&l, &c);
    assert_good(&c);
    g_assert_cmpuint(c.req.in_done, ==, 512);
    assert_same(got, data + 512, 512, 512, "block 1");
    lun_close(&l);
}

/* ------------------------------------------------------------------------ */
/* INQUIRY                                                                   */

static void test_inquiry_standard(void)
{
    ScsiDiskConf conf = conf_default();
    uint8_t cdb[16], buf[256];
    Lun l;
    Cmd c;

    lun_open_null(&l, "1M", NULL, &conf);
    memset(buf, 0xcc, sizeof(buf));
    run_good(&l, &c, cdb, cdb_inquiry(cdb, false, 0, 255), NULL, 0, buf,
             sizeof(buf));
    g_assert_true(c.sync);
    g_assert_cmpuint(c.req.in_done, ==, 36);
    g_assert_cmphex(buf[0], ==, 0x00);          /* connected disk */
    g_assert_cmphex(buf[1], ==, 0x00);          /* not removable */
    g_assert_cmphex(buf[2], ==, 0x06);          /* SPC-4 */
    g_assert_cmphex(buf[3] & 0x0f, ==, 0x02);   /* response data format */
    g_assert_cmpuint(buf[4], ==, 31);           /* additional length */
    g_assert_cmphex(buf[7] & 0x02, ==, 0x02);   /* CmdQue */
    g_assert_cmpmem(buf + 8, 8, "TESTVEND", 8);
    g_assert_cmpmem(buf + 16, 16, "TEST DISK       ", 16);
    g_assert_cmpmem(buf + 32, 4, "1.2 ", 4);
    g_assert_cmphex(buf[36], ==, 0xcc);         /* nothing beyond */
    lun_close(&l);

    /* Defaults. */
    conf = (ScsiDiskConf) { .writable = true };
    lun_open_null(&l, "1M", NULL, &conf);
    run_good(&l, &c, cdb, cdb_inquiry(cdb, false, 0, 36), NULL, 0, buf, 36);
    g_assert_cmpmem(buf + 8, 8, "SPINDLE ", 8);
    g_assert_cmpmem(buf + 16, 16, "SPINDLE DISK    ", 16);
    for (int i = 32; i < 36; i++) {
        g_assert_true(g_ascii_isprint(buf[i]));
    }
    lun_close(&l);
}

static void test_inquiry_truncated(void)
{
    uint8_t cdb[16], full[64], buf[64];
    Lun l;
    Cmd c;

    lun_open_default(&l);
    run_good(&l, &c, cdb, cdb_inquiry(cdb, false, 0, 64), NULL, 0, full, 64);

    /* Allocation length 5: 5 bytes, the additional length still 31. */
    memset(buf, 0xcc, sizeof(buf));
    run_good(&l, &c, cdb, cdb_inquiry(cdb, false, 0, 5), NULL, 0, buf, 64);
    g_assert_cmpuint(c.req.in_done, ==, 5);
    g_assert_cmpmem(buf, 5, full, 5);
    g_assert_cmphex(buf[5], ==, 0xcc);

    /* A data-in buffer smaller than the allocation length. */
    memset(buf, 0xcc, sizeof(buf));
    run_good(&l, &c, cdb, cdb_inquiry(cdb, false, 0, 255), NULL, 0, buf, 10);
    g_assert_cmpuint(c.req.in_done, ==, 10);
    g_assert_cmpmem(buf, 10, full, 10);

    /* Allocation length 0: nothing, and no error; no buffer at all. */
    run_good(&l, &c, cdb, cdb_inquiry(cdb, false, 0, 0), NULL, 0, buf, 64);
    g_assert_cmpuint(c.req.in_done, ==, 0);
    run_good(&l, &c, cdb, cdb_inquiry(cdb, true, 0x83, 255), NULL, 0, NULL, 0);
    g_assert_cmpuint(c.req.in_done, ==, 0);

    /* A VPD page cut to 3 bytes. */
    run_good(&l, &c, cdb, cdb_inquiry(cdb, true, 0x00, 3), NULL, 0, buf, 64);
    g_assert_cmpuint(c.req.in_done, ==, 3);
    g_assert_cmphex(buf[1], ==, 0x00);
    lun_close(&l);
}

static void test_inquiry_invalid(void)
{
    ScsiDiskConf conf = conf_default();
    uint8_t cdb[16], buf[256];
    Lun l;
    Cmd c;

    lun_open_null(&l, "1M", NULL, &conf);
    /* CmdDt, alone and with EVPD. */
    cdb_inquiry(cdb, false, 0, 255);
    cdb[1] = 0x02;
    run(&l, &c, cdb, 6, NULL, 0, buf, sizeof(buf));
    assert_invalid_cdb(&c);
    cdb[1] = 0x03;
    run(&l, &c, cdb, 6, NULL, 0, buf, sizeof(buf));
    assert_invalid_cdb(&c);
    /* A page code without EVPD. */
    run(&l, &c, cdb, cdb_inquiry(cdb, false, 0x80, 255), NULL, 0, buf,
        sizeof(buf));
    assert_invalid_cdb(&c);
    /* Pages we do not have. */
    run(&l, &c, cdb, cdb_inquiry(cdb, true, 0x81, 255), NULL, 0, buf,
        sizeof(buf));
    assert_invalid_cdb(&c);
    run(&l, &c, cdb, cdb_inquiry(cdb, true, 0x89, 255), NULL, 0, buf,
        sizeof(buf));
    assert_invalid_cdb(&c);
    lun_close(&l);

    /* No serial: no page 0x80. */
    conf.serial = NULL;
    lun_open_null(&l, "1M", NULL, &conf);
    run(&l, &c, cdb, cdb_inquiry(cdb, true, 0x80, 255), NULL, 0, buf,
        sizeof(buf));
    assert_invalid_cdb(&c);
    lun_close(&l);
}

/* Fetch VPD page `page` into buf; its length (checked against header). */
static size_t get_vpd(Lun *l, uint8_t page, uint8_t *buf, size_t len)
{
    uint8_t cdb[16];
    Cmd c;

    run(l, &c, cdb, cdb_inquiry(cdb, true, page, len), NULL, 0, buf, len);
    assert_good(&c);
    g_assert_cmphex(buf[0], ==, 0x00);
    g_assert_cmphex(buf[1], ==, page);
    g_assert_cmpuint(c.req.in_done, ==, 4 + get16(buf + 2));
    return c.req.in_done;
}

static void test_vpd_supported_pages(void)
{
    static const uint8_t with_serial[] = {
        0x00, 0x00, 0x00, 6, 0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2,
    };
    static const uint8_t without_serial[] = {
        0x00, 0x00, 0x00, 5, 0x00, 0x83, 0xb0, 0xb1, 0xb2,
    };
    ScsiDiskConf conf = conf_default();
    uint8_t buf[256];
    size_t len;
    Lun l;

    lun_open_null(&l, "1M", NULL, &conf);
    len = get_vpd(&l, 0x00, buf, sizeof(buf));
    g_assert_cmpmem(buf, len, with_serial, sizeof(with_serial));
    /* Every page listed answers. */
    for (size_t i = 4; i < len; i++) {
        uint8_t page[256];

        get_vpd(&l, buf[i], page, sizeof(page));
    }
    lun_close(&l);

    conf.serial = NULL;
    lun_open_null(&l, "1M", NULL, &conf);
    len = get_vpd(&l, 0x00, buf, sizeof(buf));
    g_assert_cmpmem(buf, len, without_serial, sizeof(without_serial));
    lun_close(&l);
}

static void test_vpd_serial(void)
{
    static const uint8_t want[] = {
        0x00, 0x80, 0x00, 8, 'S', 'E', 'R', '-', '0', '0', '4', '2',
    };
    uint8_t buf[256];
    size_t len;
    Lun l;

    lun_open_default(&l);
    len = get_vpd(&l, 0x80, buf, sizeof(buf));
    g_assert_cmpmem(buf, len, want, sizeof(want));
    lun_close(&l);
}

static void test_vpd_device_id(void)
{
    ScsiDiskConf conf = conf_default();
    static const uint8_t naa[] = {
        0x01, 0x03, 0x00, 0x08,                 /* binary, LU, NAA, 8 */
        0x50, 0x01, 0x40, 0x50, 0x12, 0x34, 0x56, 0x78,
    };
    static const uint8_t t10_hdr[] = { 0x02, 0x01, 0x00, 8 + 16 + 8 };
    static const char t10[] = "TESTVENDTEST DISK       SER-0042";
    uint8_t buf[256];
    size_t len;
    Lun l;

    conf.wwn = UINT64_C(0x5001405012345678);
    lun_open_null(&l, "1M", NULL, &conf);
    len = get_vpd(&l, 0x83, buf, sizeof(buf));
    g_assert_cmpuint(len, ==, 4 + 12 + 4 + 32);
    g_assert_cmpmem(buf + 4, 12, naa, 12);
    g_assert_cmpmem(buf + 16, 4, t10_hdr, 4);
    g_assert_cmpmem(buf + 20, 32, t10, 32);
    lun_close(&l);

    /* No WWN: only the T10 vendor ID designator. */
    conf.wwn = 0;
    lun_open_null(&l, "1M", NULL, &conf);
    len = get_vpd(&l, 0x83, buf, sizeof(buf));
    g_assert_cmpuint(len, ==, 4 + 4 + 32);
    g_assert_cmpmem(buf + 4, 4, t10_hdr, 4);
    g_assert_cmpmem(buf + 8, 32, t10, 32);
    lun_close(&l);

    /*
     * Neither serial nor WWN: the node's name makes the designator unique,
     * so that two such LUNs are not taken for two paths to one disk.
     */
    {
        uint8_t other[256];
        size_t other_len;
        const char *name;
        Lun l2;

        conf.serial = NULL;
        lun_open_null(&l, "1M", NULL, &conf);
        lun_open_null(&l2, "1M", NULL, &conf);
        len = get_vpd(&l, 0x83, buf, sizeof(buf));
        other_len = get_vpd(&l2, 0x83, other, sizeof(other));
        name = block_node_get_name(l.bs);
        g_assert_cmpuint(len, ==, 4 + 4 + 24 + strlen(name));
        g_assert_cmpuint(buf[7], ==, 24 + strlen(name));
        g_assert_cmpmem(buf + 8 + 24, strlen(name), name, strlen(name));
        g_assert_false(len == other_len &&
                       memcmp(buf, other, len) == 0);
        lun_close(&l2);
        lun_close(&l);
    }
}

static void test_vpd_block_limits(void)
{
    ScsiDiskConf conf = conf_default();
    uint8_t buf[256];
    size_t len;
    Lun l;

    /* discard=unmap: the unmap fields are filled in. */
    conf.max_transfer = 128;
    lun_open_null(&l, "64M", "discard=unmap", &conf);
    len = get_vpd(&l, 0xb0, buf, sizeof(buf));
    g_assert_cmpuint(len, ==, 64);
    g_assert_cmphex(buf[4] & 0x01, ==, 0x01);           /* WSNZ */
    g_assert_cmpuint(get16(buf + 6), >=, 1);            /* OTLG */
    g_assert_cmpuint(get32(buf + 8), ==, 128);          /* max transfer */
    g_assert_cmpuint(get32(buf + 12), ==, 0);           /* optimal: none */
    g_assert_cmpuint(get32(buf + 20), ==, (1u << 30) / 512);
    g_assert_cmpuint(get32(buf + 24), ==, 256);
    g_assert_cmpuint(get32(buf + 28), >=, 1);
    g_assert_cmpuint(get64(buf + 36), ==, (1u << 30) / 512);
    lun_close(&l);

    /* discard=ignore: no unmap limits; default transfer limit 32 MiB. */
    conf.max_transfer = 0;
    conf.logical_block_size = 4096;
    lun_open_null(&l, "64M", NULL, &conf);
    get_vpd(&l, 0xb0, buf, sizeof(buf));
    g_assert_cmpuint(get32(buf + 8), ==, 32 * MiB / 4096);
    g_assert_cmpuint(get32(buf + 20), ==, 0);
    g_assert_cmpuint(get32(buf + 24), ==, 0);
    g_assert_cmpuint(get64(buf + 36), ==, (1u << 30) / 4096);
    lun_close(&l);
}

static void test_vpd_block_characteristics(void)
{
    uint8_t buf[256];
    size_t len;
    Lun l;

    lun_open_default(&l);
    len = get_vpd(&l, 0xb1, buf, sizeof(buf));
    g_assert_cmpuint(len, ==, 64);
    g_assert_cmpuint(get16(buf + 4), ==, 1);            /* non-rotating */
    lun_close(&l);
}

static void test_vpd_provisioning(void)
{
    ScsiDiskConf conf = conf_default();
    uint8_t buf[256];
    size_t len;
    Lun l;

    lun_open_null(&l, "1M", "discard=unmap", &conf);
    len = get_vpd(&l, 0xb2, buf, sizeof(buf));
    g_assert_cmpuint(len, ==, 8);
    g_assert_cmphex(buf[5], ==, 0xe0);      /* LBPU, LBPWS, LBPWS10; !LBPRZ */
    g_assert_cmphex(buf[6] & 0x07, ==, 0x02);           /* thin */
    lun_close(&l);

    lun_open_null(&l, "1M", NULL, &conf);
    get_vpd(&l, 0xb2, buf, sizeof(buf));
    g_assert_cmphex(buf[5], ==, 0x00);
    g_assert_cmphex(buf[6] & 0x07, ==, 0x00);
    lun_close(&l);

    /* A read-only LUN cannot unmap, whatever the node says. */
    conf.writable = false;
    lun_open_null(&l, "1M", "discard=unmap", &conf);
    get_vpd(&l, 0xb2, buf, sizeof(buf));
    g_assert_cmphex(buf[5], ==, 0x00);
    lun_close(&l);
}

/* ------------------------------------------------------------------------ */
/* READ CAPACITY                                                             */

static void test_read_capacity_10(void)
{
    ScsiDiskConf conf = conf_default();
    uint8_t cdb[16], buf[16];
    Lun l;
    Cmd c;

    lun_open_null(&l, "1M", NULL, &conf);
    memset(cdb, 0, 16);
    cdb[0] = SCSI_OP_READ_CAPACITY_10;
    run_good(&l, &c, cdb, 10, NULL, 0, buf, 8);
    g_assert_cmpuint(c.req.in_done, ==, 8);
    g_assert_cmpuint(get32(buf), ==, 2047);
    g_assert_cmpuint(get32(buf + 4), ==, 512);
    /* An 8-byte answer into 4 bytes: overrun. */
    run(&l, &c, cdb, 10, NULL, 0, buf, 4);
    assert_xfer(&c, SCSI_XFER_OVERRUN);
    /* LBA without PMI: invalid; with PMI: accepted. */
    put32(cdb + 2, 5);
    run(&l, &c, cdb, 10, NULL, 0, buf, 8);
    assert_invalid_cdb(&c);
    cdb[8] = 0x01;
    run_good(&l, &c, cdb, 10, NULL, 0, buf, 8);
    lun_close(&l);

    /* 3 TiB of 512-byte blocks: more than 32 bits (and the low 32 bits
     * of the last LBA are not all ones). */
    lun_open_null(&l, "3T", NULL, &conf);
    memset(cdb, 0, 16);
    cdb[0] = SCSI_OP_READ_CAPACITY_10;
    run_good(&l, &c, cdb, 10, NULL, 0, buf, 8);
    g_assert_cmphex(get32(buf), ==, 0xffffffff);
    lun_close(&l);
}

static unsigned cdb_read_capacity_16(uint8_t *cdb, uint32_t alloc)
{
    memset(cdb, 0, 16);
    cdb[0] = SCSI_OP_SERVICE_ACTION_IN_16;
    cdb[1] = 0x10;
    put32(cdb + 10, alloc);
    return 16;
}

static void test_read_capacity_16(void)
{
    ScsiDiskConf conf = conf_default();
    uint8_t cdb[16], buf[64], zero[32] = { 0 };
    Lun l;
    Cmd c;

    conf.logical_block_size = 4096;
    lun_open_null(&l, "4T", "discard=unmap", &conf);
    memset(buf, 0xcc, sizeof(buf));
    run_good(&l, &c, cdb, cdb_read_capacity_16(cdb, 64), NULL, 0, buf, 64);
    g_assert_cmpuint(c.req.in_done, ==, 32);
    g_assert_cmpuint(get64(buf), ==, (UINT64_C(4) << 40) / 4096 - 1);
    g_assert_cmpuint(get32(buf + 8), ==, 4096);
    g_assert_cmphex(buf[12], ==, 0);            /* no protection */
    g_assert_cmphex(buf[13], ==, 0);            /* LBPPBE 0 */
    g_assert_cmphex(buf[14], ==, 0x80);         /* LBPME, no LBPRZ */
    g_assert_cmphex(buf[15], ==, 0);
    g_assert_cmpmem(buf + 16, 16, zero, 16);

    /* Truncated by the allocation length. */
    memset(buf, 0xcc, sizeof(buf));
    run_good(&l, &c, cdb, cdb_read_capacity_16(cdb, 12), NULL, 0, buf, 64);
    g_assert_cmpuint(c.req.in_done, ==, 12);
    g_assert_cmphex(buf[12], ==, 0xcc);

    /* Another service action. */
    cdb_read_capacity_16(cdb, 32);
    cdb[1] = 0x11;
    run(&l, &c, cdb, 16, NULL, 0, buf, 64);
    assert_invalid_cdb(&c);
    lun_close(&l);

    /* No discard: no LBPME. */
    lun_open_null(&l, "1M", NULL, &conf);
    run_good(&l, &c, cdb, cdb_read_capacity_16(cdb, 32), NULL, 0, buf, 32);
    g_assert_cmpuint(get64(buf), ==, 255);
    g_assert_cmphex(buf[14], ==, 0);
    lun_close(&l);
}

/* ------------------------------------------------------------------------ */
/* MODE SENSE / MODE SELECT                                                  */

static void test_mode_sense_caching(void)
{
    ScsiDiskConf conf = conf_default();
    uint8_t cdb[16], buf[256], page[64];
    Lun l;
    Cmd c;

    lun_open_null(&l, "1M", NULL, &conf);
    /* MODE SENSE(6), caching page, with the block descriptor. */
    run_good(&l, &c, cdb, cdb_mode_sense(cdb, false, 0, 0, 0x08, 0, 255), NULL,
             0, buf, sizeof(buf));
    g_assert_true(c.sync);
    g_assert_cmpuint(c.req.in_done, ==, 4 + 8 + 20);
    g_assert_cmpuint(buf[0], ==, 4 + 8 + 20 - 1);       /* mode data length */
    g_assert_cmphex(buf[1], ==, 0);                     /* medium type */
    g_assert_cmphex(buf[2], ==, 0x10);                  /* DPOFUA, no WP */
    g_assert_cmpuint(buf[3], ==, 8);
    g_assert_cmpuint(get32(buf + 4), ==, 2048);         /* blocks */
    g_assert_cmpuint(get32(buf + 8) & 0xffffff, ==, 512);
    g_assert_cmphex(buf[12], ==, 0x08);
    g_assert_cmphex(buf[13], ==, 0x12);
    g_assert_cmphex(buf[14], ==, 0x04);                 /* WCE */
    for (int i = 15; i < 32; i++) {
        g_assert_cmphex(buf[i], ==, 0);
    }

    /* MODE SENSE(10) with DBD: no descriptor. */
    run_good(&l, &c, cdb, cdb_mode_sense(cdb, true, 0x08, 0, 0x08, 0, 255),
             NULL, 0, buf, sizeof(buf));
    g_assert_cmpuint(c.req.in_done, ==, 8 + 20);
    g_assert_cmpuint(get16(buf), ==, 8 + 20 - 2);
    g_assert_cmphex(buf[3], ==, 0x10);
    g_assert_cmpuint(get16(buf + 6), ==, 0);
    g_assert_cmphex(buf[8], ==, 0x08);

    /* Changeable: only WCE; default: WCE as configured. */
    get_mode_page(&l, 1, 0x08, page);
    g_assert_cmphex(page[2], ==, 0x04);
    for (int i = 3; i < 20; i++) {
        g_assert_cmphex(page[i], ==, 0);
    }
    get_mode_page(&l, 2, 0x08, page);
    g_assert_cmphex(page[2], ==, 0x04);

    /* Saved values: not supported. */
    run(&l, &c, cdb, cdb_mode_sense(cdb, true, 0, 3, 0x08, 0, 255), NULL, 0,
        buf, sizeof(buf));
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x39, 0x00);
    lun_close(&l);

    /* writethrough: WCE 0, current and default. */
    conf.writethrough = true;
    lun_open_null(&l, "1M", NULL, &conf);
    get_mode_page(&l, 0, 0x08, page);
    g_assert_cmphex(page[2], ==, 0x00);
    get_mode_page(&l, 2, 0x08, page);
    g_assert_cmphex(page[2], ==, 0x00);
    lun_close(&l);
}

static void test_mode_sense_pages(void)
{
    ScsiDiskConf conf = conf_default();
    uint8_t cdb[16], buf[256];
    Lun l;
    Cmd c;

    conf.writable = false;
    lun_open_null(&l, "4T", NULL, &conf);
    /* All pages, long LBA descriptor. */
    run_good(&l, &c, cdb, cdb_mode_sense(cdb, true, 0x10, 0, 0x3f, 0, 255),
             NULL, 0, buf, sizeof(buf));
    g_assert_cmpuint(c.req.in_done, ==, 8 + 16 + 20 + 12);
    g_assert_cmphex(buf[3], ==, 0x90);                  /* WP, DPOFUA */
    g_assert_cmphex(buf[4] & 0x01, ==, 0x01);           /* LONGLBA */
    g_assert_cmpuint(get16(buf + 6), ==, 16);
    g_assert_cmpuint(get64(buf + 8), ==, (UINT64_C(4) << 40) / 512);
    g_assert_cmpuint(get32(buf + 20), ==, 512);
    g_assert_cmphex(buf[24], ==, 0x08);                 /* caching */
    g_assert_cmphex(buf[44], ==, 0x0a);                 /* control */
    g_assert_cmphex(buf[45], ==, 0x0a);
    g_assert_cmphex(buf[46] & 0x04, ==, 0);             /* D_SENSE off */

    /* Short descriptor of a big disk: all ones.  Subpage 0xFF is fine. */
    run_good(&l, &c, cdb, cdb_mode_sense(cdb, false, 0, 0, 0x3f, 0xff, 255),
             NULL, 0, buf, sizeof(buf));
    g_assert_cmpuint(c.req.in_done, ==, 4 + 8 + 20 + 12);
    g_assert_cmphex(buf[2], ==, 0x90);
    g_assert_cmphex(get32(buf + 4), ==, 0xffffffff);

    /* Only the control page. */
    run_good(&l, &c, cdb, cdb_mode_sense(cdb, false, 0x08, 0, 0x0a, 0, 255),
             NULL, 0, buf, sizeof(buf));
    g_assert_cmpuint(c.req.in_done, ==, 4 + 12);
    g_assert_cmphex(buf[4], ==, 0x0a);

    /* Unknown page, unknown subpage. */
    run(&l, &c, cdb, cdb_mode_sense(cdb, false, 0, 0, 0x1c, 0, 255), NULL,
        0, buf, sizeof(buf));
    assert_invalid_cdb(&c);
    run(&l, &c, cdb, cdb_mode_sense(cdb, false, 0, 0, 0x08, 0x01, 255),
        NULL, 0, buf, sizeof(buf));
    assert_invalid_cdb(&c);
    lun_close(&l);
}

static void test_mode_sense_truncated(void)
{
    uint8_t cdb[16], buf[256];
    Lun l;
    Cmd c;

    lun_open_default(&l);
    memset(buf, 0xcc, sizeof(buf));
    run_good(&l, &c, cdb, cdb_mode_sense(cdb, false, 0, 0, 0x3f, 0, 4), NULL, 0,
             buf, sizeof(buf));
    g_assert_cmpuint(c.req.in_done, ==, 4);
    g_assert_cmpuint(buf[0], ==, 4 + 8 + 20 + 12 - 1);   /* still the full */
    g_assert_cmphex(buf[4], ==, 0xcc);

    run_good(&l, &c, cdb, cdb_mode_sense(cdb, true, 0, 0, 0x08, 0, 3), NULL, 0,
             buf, sizeof(buf));
    g_assert_cmpuint(c.req.in_done, ==, 3);
    g_assert_cmpuint(get16(buf), ==, 8 + 8 + 20 - 2);
    lun_close(&l);
}

static void test_mode_select_wce(void)
{
    uint8_t page[64], cdb[16], list[64];
    Lun l;
    Cmd c;

    lun_open_default(&l);
    set_wce(&l, false);
    get_mode_page(&l, 0, 0x08, page);
    g_assert_cmphex(page[2], ==, 0x00);
    get_mode_page(&l, 2, 0x08, page);           /* default unchanged */
    g_assert_cmphex(page[2], ==, 0x04);
    set_wce(&l, true);
    get_mode_page(&l, 0, 0x08, page);
    g_assert_cmphex(page[2], ==, 0x04);

    /* MODE SELECT(6), with a block descriptor repeating the values. */
    memset(list, 0, sizeof(list));
    list[3] = 8;
    put32(list + 4, 2048);
    list[9] = 0;
    list[10] = 512 >> 8;
    list[11] = 0;
    get_mode_page(&l, 0, 0x08, list + 12);
    list[12 + 2] = 0;                           /* WCE off */
    run_good(&l, &c, cdb, cdb_mode_select(cdb, false, 0x10, 32), list, 32, NULL,
             0);
    get_mode_page(&l, 0, 0x08, page);
    g_assert_cmphex(page[2], ==, 0x00);
    /* ... or 0 blocks (no change). */
    put32(list + 4, 0);
    list[12 + 2] = 0x04;
    run_good(&l, &c, cdb, cdb_mode_select(cdb, false, 0x10, 32), list, 32, NULL,
             0);
    get_mode_page(&l, 0, 0x08, page);
    g_assert_cmphex(page[2], ==, 0x04);
    lun_close(&l);
}

static void test_mode_select_errors(void)
{
    uint8_t cdb[16], list[300], caching[64], control[64], page[64];
    size_t clen, tlen;
    Lun l;
    Cmd c;

    lun_open_default(&l);
    clen = get_mode_page(&l, 0, 0x08, caching);
    tlen = get_mode_page(&l, 0, 0x0a, control);
    g_assert_cmpuint(clen, ==, 20);
    g_assert_cmpuint(tlen, ==, 12);
    memset(list, 0, sizeof(list));
    memcpy(list + 8, caching, clen);

    /* SP=1; PF=0. */
    run(&l, &c, cdb, cdb_mode_select(cdb, true, 0x11, 28), list, 28, NULL,
        0);
    assert_invalid_cdb(&c);
    run(&l, &c, cdb, cdb_mode_select(cdb, true, 0x00, 28), list, 28, NULL,
        0);
    assert_invalid_cdb(&c);
    /* No data is not an error. */
    run_good(&l, &c, cdb, cdb_mode_select(cdb, true, 0x10, 0), NULL, 0, NULL,
             0);
    /* Less data-out than the parameter list length. */
    run(&l, &c, cdb, cdb_mode_select(cdb, true, 0x10, 28), list, 27, NULL,
        0);
    assert_xfer(&c, SCSI_XFER_OVERRUN);
    /* A header cut short; a page cut short. */
    run(&l, &c, cdb, cdb_mode_select(cdb, true, 0x10, 6), list, 6, NULL, 0);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x1a, 0x00);
    run(&l, &c, cdb, cdb_mode_select(cdb, true, 0x10, 27), list, 27, NULL,
        0);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x1a, 0x00);
    run(&l, &c, cdb, cdb_mode_select(cdb, true, 0x10, 9), list, 9, NULL, 0);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x1a, 0x00);
    /* A list too long to be ours. */
    run(&l, &c, cdb, cdb_mode_select(cdb, true, 0x10, 300), list, 300, NULL,
        0);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x1a, 0x00);

    /* A bit that is not changeable (RCD), a wrong page length, SPF. */
    memcpy(page, caching, clen);
    page[2] |= 0x01;
    mode_select(&l, &c, page, clen);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x26, 0x00);
    memcpy(page, caching, clen);
    page[1] = 0x10;
    mode_select(&l, &c, page, 18);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x26, 0x00);
    memcpy(page, caching, clen);
    page[0] |= 0x40;
    mode_select(&l, &c, page, clen);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x26, 0x00);
    /* The control page with anything but D_SENSE changed. */
    memcpy(page, control, tlen);
    page[2] |= 0x02;                                    /* GLTSD */
    mode_select(&l, &c, page, tlen);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x26, 0x00);
    /* A page we do not have. */
    memset(page, 0, sizeof(page));
    page[0] = 0x1c;
    page[1] = 10;
    mode_select(&l, &c, page, 12);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x26, 0x00);

    /* Nothing is applied from a list with an error: a valid caching page
     * turning WCE off, then a bad page. */
    memcpy(list + 8, caching, clen);
    list[8 + 2] = 0;
    memcpy(list + 8 + clen, control, tlen);
    list[8 + clen + 3] ^= 0x80;
    run(&l, &c, cdb, cdb_mode_select(cdb, true, 0x10, 8 + clen + tlen), list,
        8 + clen + tlen, NULL, 0);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x26, 0x00);
    get_mode_page(&l, 0, 0x08, page);
    g_assert_cmphex(page[2], ==, 0x04);

    /* Block descriptors: a wrong length, a different block size, a
     * different block count, a medium type. */
    memset(list, 0, sizeof(list));
    list[7] = 4;
    run(&l, &c, cdb, cdb_mode_select(cdb, true, 0x10, 12), list, 12, NULL,
        0);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x26, 0x00);
    list[7] = 8;
    put32(list + 8, 2048);
    put32(list + 12, 4096);
    run(&l, &c, cdb, cdb_mode_select(cdb, true, 0x10, 16), list, 16, NULL,
        0);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x26, 0x00);
    put32(list + 8, 1000);
    put32(list + 12, 512);
    run(&l, &c, cdb, cdb_mode_select(cdb, true, 0x10, 16), list, 16, NULL,
        0);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x26, 0x00);
    put32(list + 8, 2048);
    run_good(&l, &c, cdb, cdb_mode_select(cdb, true, 0x10, 16), list, 16, NULL,
             0);
    list[2] = 1;
    run(&l, &c, cdb, cdb_mode_select(cdb, true, 0x10, 16), list, 16, NULL,
        0);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x26, 0x00);
    /* A block descriptor longer than the list. */
    list[2] = 0;
    run(&l, &c, cdb, cdb_mode_select(cdb, true, 0x10, 12), list, 12, NULL,
        0);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x1a, 0x00);
    lun_close(&l);
}

static void test_d_sense(void)
{
    uint8_t cdb[16], buf[64], page[64];
    Lun l;
    Cmd c;

    lun_open_default(&l);
    set_d_sense(&l, true);
    get_mode_page(&l, 0, 0x0a, page);
    g_assert_cmphex(page[2] & 0x04, ==, 0x04);
    get_mode_page(&l, 1, 0x0a, page);
    g_assert_cmphex(page[2], ==, 0x04);

    /* Errors now come in descriptor format, every byte as SPC says. */
    memset(cdb, 0, 16);
    cdb[0] = 0xff;
    run(&l, &c, cdb, 16, NULL, 0, NULL, 0);
    {
        static const uint8_t want[8] = { 0x72, 0x05, 0x20, 0x00, 0, 0, 0, 0 };

        g_assert_cmpuint(c.req.sense_len, ==, 8);
        g_assert_cmpmem(c.req.sense, 8, want, 8);
    }
    cdb_io(cdb, SCSI_OP_READ_10, 4096, 1, 0);
    run(&l, &c, cdb, 10, NULL, 0, buf, 512);
    assert_sense_desc(&c, KEY_ILLEGAL_REQUEST, 0x21, 0x00);

    set_d_sense(&l, false);
    run(&l, &c, cdb, 10, NULL, 0, buf, 512);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x21, 0x00);
    lun_close(&l);
}

/* ------------------------------------------------------------------------ */
/* REQUEST SENSE and unit attentions                                         */

static void test_request_sense(void)
{
    static const uint8_t fixed[18] = { 0x70, 0, 0x00, 0, 0, 0, 0, 10 };
    static const uint8_t desc[8] = { 0x72, 0x00, 0x00, 0x00 };
    uint8_t cdb[16], buf[64];
    Lun l;
    Cmd c;

    lun_open_default(&l);
    run_good(&l, &c, cdb, cdb6(cdb, SCSI_OP_REQUEST_SENSE, 0, 0, 0, 252), NULL,
             0, buf, sizeof(buf));
    g_assert_cmpuint(c.req.in_done, ==, 18);
    g_assert_cmpmem(buf, 18, fixed, 18);
    /* DESC=1. */
    run_good(&l, &c, cdb, cdb6(cdb, SCSI_OP_REQUEST_SENSE, 1, 0, 0, 252), NULL,
             0, buf, sizeof(buf));
    g_assert_cmpuint(c.req.in_done, ==, 8);
    g_assert_cmpmem(buf, 8, desc, 8);
    /* Truncated. */
    run_good(&l, &c, cdb, cdb6(cdb, SCSI_OP_REQUEST_SENSE, 0, 0, 0, 3), NULL, 0,
             buf, sizeof(buf));
    g_assert_cmpuint(c.req.in_done, ==, 3);
    lun_close(&l);
}

static void test_unit_attention_reset(void)
{
    uint8_t cdb[16], buf[4096];
    Lun l;
    Cmd c;

    lun_open_default(&l);
    scsi_disk_reset(l.d);
    /* INQUIRY does not see it (nor clear it). */
    run_good(&l, &c, cdb, cdb_inquiry(cdb, false, 0, 36), NULL, 0, buf, 36);
    /* The next other command does, once; an unknown opcode too. */
    memset(cdb, 0, 16);
    cdb[0] = 0xff;
    run(&l, &c, cdb, 16, NULL, 0, NULL, 0);
    assert_sense(&c, KEY_UNIT_ATTENTION, 0x29, 0x00);
    run_simple(&l, &c, SCSI_OP_TEST_UNIT_READY);
    assert_good(&c);

    /* A READ gets it instead of its data. */
    scsi_disk_reset(l.d);
    memset(buf, 0xcc, 512);
    cdb_io(cdb, SCSI_OP_READ_10, 0, 1, 0);
    run(&l, &c, cdb, 10, NULL, 0, buf, 512);
    assert_sense(&c, KEY_UNIT_ATTENTION, 0x29, 0x00);
    g_assert_cmphex(buf[0], ==, 0xcc);
    run_good(&l, &c, cdb, 10, NULL, 0, buf, 512);

    /* Two of them: reset first, then capacity; once each. */
    scsi_disk_capacity_changed(l.d);
    scsi_disk_reset(l.d);
    run_simple(&l, &c, SCSI_OP_TEST_UNIT_READY);
    assert_sense(&c, KEY_UNIT_ATTENTION, 0x29, 0x00);
    run_simple(&l, &c, SCSI_OP_TEST_UNIT_READY);
    assert_sense(&c, KEY_UNIT_ATTENTION, 0x2a, 0x09);
    run_simple(&l, &c, SCSI_OP_TEST_UNIT_READY);
    assert_good(&c);

    /* In descriptor format with D_SENSE. */
    set_d_sense(&l, true);
    scsi_disk_capacity_changed(l.d);
    run_simple(&l, &c, SCSI_OP_TEST_UNIT_READY);
    assert_sense_desc(&c, KEY_UNIT_ATTENTION, 0x2a, 0x09);
    lun_close(&l);
}

static void test_unit_attention_request_sense(void)
{
    uint8_t cdb[16], buf[64];
    Lun l;
    Cmd c;

    lun_open_default(&l);
    scsi_disk_capacity_changed(l.d);
    run_good(&l, &c, cdb, cdb6(cdb, SCSI_OP_REQUEST_SENSE, 0, 0, 0, 18), NULL,
             0, buf, sizeof(buf));
    g_assert_cmpuint(c.req.in_done, ==, 18);
    g_assert_cmphex(buf[0], ==, 0x70);
    g_assert_cmphex(buf[2], ==, 0x06);
    g_assert_cmphex(buf[12], ==, 0x2a);
    g_assert_cmphex(buf[13], ==, 0x09);
    /* Cleared. */
    run_simple(&l, &c, SCSI_OP_TEST_UNIT_READY);
    assert_good(&c);
    run_good(&l, &c, cdb, cdb6(cdb, SCSI_OP_REQUEST_SENSE, 0, 0, 0, 18), NULL,
             0, buf, sizeof(buf));
    g_assert_cmphex(buf[2], ==, 0x00);
    g_assert_cmphex(buf[12], ==, 0x00);

    /* Descriptor format on request. */
    scsi_disk_reset(l.d);
    run_good(&l, &c, cdb, cdb6(cdb, SCSI_OP_REQUEST_SENSE, 1, 0, 0, 18), NULL,
             0, buf, sizeof(buf));
    g_assert_cmpuint(c.req.in_done, ==, 8);
    g_assert_cmphex(buf[0], ==, 0x72);
    g_assert_cmphex(buf[1], ==, 0x06);
    g_assert_cmphex(buf[2], ==, 0x29);
    g_assert_cmphex(buf[3], ==, 0x00);
    run_simple(&l, &c, SCSI_OP_TEST_UNIT_READY);
    assert_good(&c);
    lun_close(&l);
}

/* ------------------------------------------------------------------------ */
/* Helpers for the transport                                                 */

static void test_report_luns(void)
{
    static const uint16_t luns[] = { 0, 5, 300, 16383 };
    static const uint8_t want[8 + 32] = {
        0, 0, 0, 32, 0, 0, 0, 0,
        0x00, 0x00, 0, 0, 0, 0, 0, 0,
        0x00, 0x05, 0, 0, 0, 0, 0, 0,
        0x41, 0x2c, 0, 0, 0, 0, 0, 0,       /* flat space: 0x40 | 300 >> 8 */
        0x7f, 0xff, 0, 0, 0, 0, 0, 0,
    };
    uint8_t buf[64];

    memset(buf, 0xcc, sizeof(buf));
    g_assert_cmpuint(scsi_build_report_luns(luns, 4, buf, sizeof(buf)), ==,
                     40);
    g_assert_cmpmem(buf, 40, want, 40);
    g_assert_cmphex(buf[40], ==, 0xcc);
    /* Truncated: the list length still counts every LUN. */
    memset(buf, 0xcc, sizeof(buf));
    g_assert_cmpuint(scsi_build_report_luns(luns, 4, buf, 12), ==, 12);
    g_assert_cmpmem(buf, 12, want, 12);
    g_assert_cmphex(buf[12], ==, 0xcc);
    g_assert_cmpuint(scsi_build_report_luns(luns, 0, buf, sizeof(buf)), ==,
                     8);
    g_assert_cmpuint(get32(buf), ==, 0);
}

static void test_build_sense(void)
{
    static const uint8_t fixed[18] = {
        0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x25, 0x00, 0, 0, 0, 0,
    };
    static const uint8_t desc[8] = { 0x72, 0x05, 0x25, 0x00, 0, 0, 0, 0 };
    uint8_t sense[SCSI_SENSE_BUF_SIZE];

    memset(sense, 0xcc, sizeof(sense));
    g_assert_cmpuint(scsi_build_sense(sense, false, 0x05, 0x25, 0x00), ==,
                     18);
    g_assert_cmpmem(sense, 18, fixed, 18);
    memset(sense, 0xcc, sizeof(sense));
    g_assert_cmpuint(scsi_build_sense(sense, true, 0x05, 0x25, 0x00), ==, 8);
    g_assert_cmpmem(sense, 8, desc, 8);
}


static const TestCase tests[] = {
    { "/scsi-disk/new/errors", test_new_errors },
    { "/scsi-disk/new/accessors", test_new_accessors },
    { "/scsi-disk/dispatch/test-unit-ready", test_test_unit_ready },
    { "/scsi-disk/dispatch/invalid-opcode", test_invalid_opcode },
    { "/scsi-disk/dispatch/short-cdb", test_short_cdb },
    { "/scsi-disk/dispatch/cdb-copied", test_cdb_copied },
    { "/scsi-disk/inquiry/standard", test_inquiry_standard },
    { "/scsi-disk/inquiry/truncated", test_inquiry_truncated },
    { "/scsi-disk/inquiry/invalid", test_inquiry_invalid },
    { "/scsi-disk/inquiry/vpd-supported-pages", test_vpd_supported_pages },
    { "/scsi-disk/inquiry/vpd-serial", test_vpd_serial },
    { "/scsi-disk/inquiry/vpd-device-id", test_vpd_device_id },
    { "/scsi-disk/inquiry/vpd-block-limits", test_vpd_block_limits },
    { "/scsi-disk/inquiry/vpd-block-characteristics",
      test_vpd_block_characteristics },
    { "/scsi-disk/inquiry/vpd-provisioning", test_vpd_provisioning },
    { "/scsi-disk/read-capacity/10", test_read_capacity_10 },
    { "/scsi-disk/read-capacity/16", test_read_capacity_16 },
    { "/scsi-disk/mode-sense/caching", test_mode_sense_caching },
    { "/scsi-disk/mode-sense/pages", test_mode_sense_pages },
    { "/scsi-disk/mode-sense/truncated", test_mode_sense_truncated },
    { "/scsi-disk/mode-select/wce", test_mode_select_wce },
    { "/scsi-disk/mode-select/errors", test_mode_select_errors },
    { "/scsi-disk/mode-select/d-sense", test_d_sense },
    { "/scsi-disk/request-sense/no-sense", test_request_sense },
    { "/scsi-disk/unit-attention/reset", test_unit_attention_reset },
    { "/scsi-disk/unit-attention/request-sense",
      test_unit_attention_request_sense },
    { "/scsi-disk/report-luns", test_report_luns },
    { "/scsi-disk/build-sense", test_build_sense },
};

/* Below the 60 s meson timeout, so that the watchdog reports first. */
TEST_MAIN(tests, 50)

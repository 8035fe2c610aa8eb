/*
 * Unit tests for the SCSI disk emulation's data path (hw/scsi/scsi-disk.c):
 * READ/WRITE (6/10/12/16) with scattered buffers, transfer limits, FUA
 * and WCE, block I/O errors as sense data, VERIFY, WRITE SAME, UNMAP,
 * SYNCHRONIZE CACHE, START STOP UNIT and PREVENT ALLOW MEDIUM REMOVAL.
 *
 * Theory of operation: each test builds a LUN (see scsi-test-helpers.h)
 * over a temporary file, to check what reached the image with pread, or
 * over blkdebug, to make chosen block requests fail, and runs CDBs through
 * scsi_disk_submit().
 *
 * FUA is observed where it reaches the kernel: the file nodes use the
 * threads engine, which writes with pwritev2() and passes RWF_DSYNC for a
 * FUA write.  This program defines pwritev2() itself (the block layer is
 * linked in statically, so its calls come here), counts the writes with
 * and without RWF_DSYNC and makes the system call.
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <glib.h>

#include "block/block.h"
#include "hw/scsi/scsi-defs.h"
#include "hw/scsi/scsi-disk.h"
#include "scsi-test-helpers.h"
#include "test-helpers.h"

/* ------------------------------------------------------------------------ */
/* FUA observation                                                           */

static atomic_uint dsync_writes;
static atomic_uint plain_writes;

ssize_t pwritev2(int fd, const struct iovec *iov, int iovcnt, off_t offset,
                 int flags)
{
    if (flags & RWF_DSYNC) {
        atomic_fetch_add(&dsync_writes, 1);
    } else {
        atomic_fetch_add(&plain_writes, 1);
    }
    /* x86-64 and the other 64-bit ABIs: the offset's high half is 0. */
    return syscall(SYS_pwritev2, fd, iov, iovcnt, (long)offset, 0L, flags);
}

/* ------------------------------------------------------------------------ */
/* READ / WRITE                                                              */

static void test_rw_round_trip(void)
{
    static const struct {
        uint8_t read, write;
        uint64_t lba;
        uint32_t count;
    } cases[] = {
        { SCSI_OP_READ_6, SCSI_OP_WRITE_6, 3, 5 },
        { SCSI_OP_READ_10, SCSI_OP_WRITE_10, 17, 8 },
        { SCSI_OP_READ_12, SCSI_OP_WRITE_12, 40, 3 },
        { SCSI_OP_READ_16, SCSI_OP_WRITE_16, 127, 1 },
    };
    uint32_t sizes[] = { 512, 4096 };

    for (size_t s = 0; s < G_N_ELEMENTS(sizes); s++) {
        ScsiDiskConf conf = conf_default();
        uint32_t bs = sizes[s];
        Lun l;

        conf.logical_block_size = bs;
        lun_open_file(&l, 128 * bs, NULL, &conf);
        for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
            size_t len = cases[i].count * bs;
            g_autofree uint8_t *data = g_malloc(len);
            g_autofree uint8_t *got = g_malloc(len);

            fill_random(data, len);
            rw_ok(&l, cases[i].write, cases[i].lba, cases[i].count, 0,
                  data, len);
            /* The image holds it at lba * block size. */
            file_read(&l, cases[i].lba * bs, got, len);
            assert_same(got, data, len, cases[i].lba * bs, "image");
            memset(got, 0, len);
            rw_ok(&l, cases[i].read, cases[i].lba, cases[i].count, 0, got,
                  len);
            assert_same(got, data, len, 0, "read back");
        }
        /* Neighbours untouched. */
        assert_file_bytes(&l, 2 * bs, bs, 0x5a);
        assert_file_bytes(&l, 126 * bs, bs, 0x5a);
        lun_close(&l);
    }
}

static void test_rw_read6_256(void)
{
    ScsiDiskConf conf = conf_default();
    size_t len = 256 * 512;
    g_autofree uint8_t *data = g_malloc(len + 512);
    g_autofree uint8_t *got = g_malloc(len + 512);
    uint8_t cdb[16];
    Lun l;
    Cmd c;

    lun_open_file(&l, 1 * MiB, NULL, &conf);
    fill_random(data, len);
    g_assert_cmpint(pwrite(l.fd, data, len, 512), ==, (ssize_t)len);
    /* READ(6), transfer length 0: 256 blocks. */
    memset(got, 0xcc, len + 512);
    run_good(&l, &c, cdb, cdb_io(cdb, SCSI_OP_READ_6, 1, 0, 0), NULL, 0, got,
             len + 512);
    g_assert_cmpuint(c.req.in_done, ==, len);
    assert_same(got, data, len, 512, "READ(6) of 256 blocks");
    g_assert_cmphex(got[len], ==, 0xcc);
    /* ... so 255 blocks of buffer are an overrun. */
    run(&l, &c, cdb, 6, NULL, 0, got, len - 512);
    assert_xfer(&c, SCSI_XFER_OVERRUN);
    /* WRITE(6) likewise. */
    fill_random(data, len);
    cdb_io(cdb, SCSI_OP_WRITE_6, 2, 0, 0);
    run_good(&l, &c, cdb, 6, data, len, NULL, 0);
    file_read(&l, 1024, got, len);
    assert_same(got, data, len, 1024, "WRITE(6) of 256 blocks");
    lun_close(&l);
}

/* Set c's data-in (or data-out) to segments of buf with these lengths. */
static void cmd_set_segments(Cmd *c, bool in, uint8_t *buf,
                             const size_t *lens, int n)
{
    struct iovec *iov = in ? c->in_iov : c->out_iov;
    uint64_t total = 0;

    for (int i = 0; i < n; i++) {
        iov[i] = (struct iovec) { buf + total, lens[i] };
        total += lens[i];
    }
    if (in) {
        c->req.in_iov = iov;
        c->req.in_niov = n;
        c->req.in_len = total;
    } else {
        c->req.out_iov = iov;
        c->req.out_niov = n;
        c->req.out_len = total;
    }
}

static void test_rw_segments(void)
{
    /* Ends on a boundary; ends inside the 3rd; inside the 7th (more than
     * the inline iovecs); a zero-length segment in the middle. */
    static const size_t seg_a[] = { 1024, 512, 1024, 512 };
    static const size_t seg_b[] = { 100, 1900, 1000, 4096 };
    static const size_t seg_c[] = { 100, 412, 1, 511, 300, 700, 1000, 1024,
                                    2048 };
    static const size_t seg_d[] = { 512, 0, 1536, 512 };
    static const struct {
        const size_t *lens;
        int n;
        uint32_t blocks;
    } cases[] = {
        { seg_a, 4, 5 }, { seg_b, 4, 5 }, { seg_c, 9, 5 }, { seg_d, 4, 4 },
    };
    ScsiDiskConf conf = conf_default();
    uint8_t data[8192], got[8192], cdb[16];
    Lun l;
    Cmd c;

    lun_open_file(&l, 1 * MiB, NULL, &conf);
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        size_t len = cases[i].blocks * 512;
        uint64_t lba = 8 + 16 * i;

        g_test_message("case %zu", i);
        /* WRITE from scattered data-out. */
        fill_random(data, sizeof(data));
        cmd_init(&c, cdb, cdb_io(cdb, SCSI_OP_WRITE_10, lba, cases[i].blocks,
                                 0), NULL, 0, NULL, 0);
        cmd_set_segments(&c, false, data, cases[i].lens, cases[i].n);
        cmd_run(&l, &c);
        assert_good(&c);
        file_read(&l, lba * 512, got, len + 512);
        assert_same(got, data, len, lba * 512, "image");
        g_assert_cmphex(got[len], ==, 0x5a);

        /* READ into scattered data-in; bytes past the transfer intact. */
        memset(got, 0xcc, sizeof(got));
        cmd_init(&c, cdb, cdb_io(cdb, SCSI_OP_READ_10, lba, cases[i].blocks,
                                 0), NULL, 0, NULL, 0);
        cmd_set_segments(&c, true, got, cases[i].lens, cases[i].n);
        cmd_run(&l, &c);
        assert_good(&c);
        g_assert_cmpuint(c.req.in_done, ==, len);
        assert_same(got, data, len, 0, "read back");
        for (size_t j = len; j < c.req.in_len; j++) {
            g_assert_cmphex(got[j], ==, 0xcc);
        }
    }
    lun_close(&l);
}

static void test_rw_errors(void)
{
    ScsiDiskConf conf = conf_default();
    uint8_t cdb[16], buf[8192];
    Lun l;
    Cmd c;

    conf.max_transfer = 8;
    lun_open_file(&l, 64 * KiB, NULL, &conf);      /* 128 blocks */

    /* Length 0: nothing moves, no error. */
    run_good(&l, &c, cdb, cdb_io(cdb, SCSI_OP_READ_10, 5, 0, 0), NULL, 0, buf,
             512);
    g_assert_cmpuint(c.req.in_done, ==, 0);

    /* Out of range: at the end, across it, far past it, overflowing. */
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_READ_10, 128, 1, 0), NULL, 0, buf,
        512);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x21, 0x00);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_10, 125, 4, 0), buf, 2048,
        NULL, 0);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x21, 0x00);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_READ_16, UINT64_MAX, 2, 0), NULL, 0,
        buf, 1024);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x21, 0x00);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_READ_6, 0x1fffff, 1, 0), NULL, 0,
        buf, 512);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x21, 0x00);
    /* The last block is fine. */
    run_good(&l, &c, cdb, cdb_io(cdb, SCSI_OP_READ_10, 127, 1, 0), NULL, 0, buf,
             512);

    /* Above the transfer limit: invalid field. */
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_READ_10, 0, 9, 0), NULL, 0, buf,
        9 * 512);
    assert_invalid_cdb(&c);
    run_good(&l, &c, cdb, cdb_io(cdb, SCSI_OP_READ_10, 0, 8, 0), NULL, 0, buf,
             8 * 512);
    /* RDPROTECT / WRPROTECT: no protection information here. */
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_READ_10, 0, 1, 0x20), NULL, 0, buf,
        512);
    assert_invalid_cdb(&c);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_16, 0, 1, 0x60), buf, 512,
        NULL, 0);
    assert_invalid_cdb(&c);

    /* Short buffers: overrun, nothing done. */
    memset(buf, 0xcc, sizeof(buf));
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_READ_10, 0, 2, 0), NULL, 0, buf,
        1023);
    assert_xfer(&c, SCSI_XFER_OVERRUN);
    g_assert_cmphex(buf[0], ==, 0xcc);
    memset(buf, 0x11, sizeof(buf));
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_10, 0, 2, 0), buf, 1000, NULL,
        0);
    assert_xfer(&c, SCSI_XFER_OVERRUN);
    assert_file_bytes(&l, 0, 1024, 0x5a);
    /* Data the wrong way. */
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_10, 0, 1, 0), buf, 512, buf,
        512);
    assert_xfer(&c, SCSI_XFER_WRONG_DIRECTION);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_READ_10, 0, 1, 0), buf, 512, buf,
        512);
    assert_xfer(&c, SCSI_XFER_WRONG_DIRECTION);
    assert_file_bytes(&l, 0, 1024, 0x5a);
    lun_close(&l);
}

static void test_rw_read_only(void)
{
    ScsiDiskConf conf = conf_default();
    static const uint8_t want[18] = {
        0x70, 0, 0x07, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x27, 0x00,
    };
    uint8_t cdb[16], buf[512];
    Lun l;
    Cmd c;

    conf.writable = false;
    lun_open_file(&l, 64 * KiB, "discard=unmap", &conf);
    memset(buf, 0x11, sizeof(buf));
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_10, 0, 1, 0), buf, 512, NULL,
        0);
    assert_sense(&c, KEY_DATA_PROTECT, 0x27, 0x00);
    g_assert_cmpmem(c.req.sense, 18, want, 18);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_6, 0, 1, 0), buf, 512, NULL,
        0);
    assert_sense(&c, KEY_DATA_PROTECT, 0x27, 0x00);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_16, 0, 1, 0), buf, 512,
        NULL, 0);
    assert_sense(&c, KEY_DATA_PROTECT, 0x27, 0x00);
    /* UNMAP is not offered at all on a read-only LUN. */
    memset(cdb, 0, 16);
    cdb[0] = SCSI_OP_UNMAP;
    run(&l, &c, cdb, 10, NULL, 0, NULL, 0);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x20, 0x00);
    assert_file_bytes(&l, 0, 512, 0x5a);
    /* Reads work. */
    rw_ok(&l, SCSI_OP_READ_10, 0, 1, 0, buf, 512);
    lun_close(&l);
}

/* Writes with and without RWF_DSYNC since the last call. */
static void fua_counts(unsigned *dsync, unsigned *plain)
{
    static unsigned last_dsync, last_plain;
    unsigned d = atomic_load(&dsync_writes), p = atomic_load(&plain_writes);

    *dsync = d - last_dsync;
    *plain = p - last_plain;
    last_dsync = d;
    last_plain = p;
}

static void assert_fua(unsigned want_dsync, unsigned want_plain)
{
    unsigned dsync, plain;

    fua_counts(&dsync, &plain);
    g_assert_cmpuint(dsync, ==, want_dsync);
    g_assert_cmpuint(plain, ==, want_plain);
}

/* Write buf, two blocks, at LBA 0 with op and CDB byte 1 (0x08: FUA);
 * assert that it reached the file as a stable (RWF_DSYNC) write or not. */
static void write_assert_fua(Lun *l, uint8_t op, uint8_t byte1, uint8_t *buf,
                             bool stable)
{
    rw_ok(l, op, 0, 2, byte1, buf, 1024);
    assert_fua(stable, !stable);
}

static void test_rw_fua(void)
{
    ScsiDiskConf conf = conf_default();
    uint8_t buf[1024];
    Lun l;

    fill_random(buf, sizeof(buf));
    lun_open_file(&l, 64 * KiB, NULL, &conf);
    fua_counts(&(unsigned) { 0 }, &(unsigned) { 0 });
    /* WCE=1: only the FUA bit makes a write stable. */
    write_assert_fua(&l, SCSI_OP_WRITE_10, 0, buf, false);
    write_assert_fua(&l, SCSI_OP_WRITE_10, 0x08, buf, true);
    write_assert_fua(&l, SCSI_OP_WRITE_16, 0x08, buf, true);
    write_assert_fua(&l, SCSI_OP_WRITE_6, 0, buf, false);
    /* WCE=0 through MODE SELECT: every write. */
    set_wce(&l, false);
    write_assert_fua(&l, SCSI_OP_WRITE_10, 0, buf, true);
    write_assert_fua(&l, SCSI_OP_WRITE_6, 0, buf, true);
    write_assert_fua(&l, SCSI_OP_WRITE_12, 0, buf, true);
    set_wce(&l, true);
    write_assert_fua(&l, SCSI_OP_WRITE_10, 0, buf, false);
    lun_close(&l);

    /* writethrough: WCE=0 from the start. */
    conf.writethrough = true;
    lun_open_file(&l, 64 * KiB, NULL, &conf);
    write_assert_fua(&l, SCSI_OP_WRITE_10, 0, buf, true);
    lun_close(&l);
}

/* ------------------------------------------------------------------------ */
/* Block I/O errors                                                          */

static void test_io_errors(void)
{
    static const struct {
        const char *rule;
        uint8_t op;                 /* READ_10, WRITE_10 or SYNC CACHE */
        uint8_t key, asc, ascq;     /* key 0xff: status BUSY */
    } cases[] = {
        { "inject-error.0.op=read,inject-error.0.errno=5", SCSI_OP_READ_10,
          KEY_MEDIUM_ERROR, 0x11, 0x00 },
        { "inject-error.0.op=write,inject-error.0.errno=5", SCSI_OP_WRITE_10,
          KEY_MEDIUM_ERROR, 0x0c, 0x00 },
        { "inject-error.0.op=write,inject-error.0.errno=28",
          SCSI_OP_WRITE_10, KEY_DATA_PROTECT, 0x27, 0x07 },
        { "inject-error.0.op=write,inject-error.0.errno=1", SCSI_OP_WRITE_10,
          KEY_DATA_PROTECT, 0x27, 0x00 },
        { "inject-error.0.op=read,inject-error.0.errno=22", SCSI_OP_READ_10,
          KEY_ILLEGAL_REQUEST, 0x24, 0x00 },
        { "inject-error.0.op=flush,inject-error.0.errno=5",
          SCSI_OP_SYNCHRONIZE_CACHE_10, KEY_MEDIUM_ERROR, 0x0c, 0x00 },
        { "inject-error.0.op=read,inject-error.0.errno=12", SCSI_OP_READ_10,
          0xff, 0, 0 },
    };
    ScsiDiskConf conf = conf_default();
    uint8_t cdb[16], buf[4096];

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        bool write = cases[i].op == SCSI_OP_WRITE_10;
        bool sync = cases[i].op == SCSI_OP_SYNCHRONIZE_CACHE_10;
        Lun l;
        Cmd c;

        g_test_message("%s", cases[i].rule);
        lun_open_blkdebug(&l, cases[i].rule, &conf);
        for (int desc = 0; desc < 2; desc++) {
            cdb_io(cdb, cases[i].op, 8, sync ? 0 : 2, 0);
            run(&l, &c, cdb, 10, write ? buf : NULL, write ? 1024 : 0,
                write || sync ? NULL : buf, write || sync ? 0 : 1024);
            if (cases[i].key == 0xff) {
                g_assert_cmphex(c.req.status, ==, 0x08);
                g_assert_cmpuint(c.req.sense_len, ==, 0);
                g_assert_cmpuint(c.req.in_done, ==, 0);
            } else if (desc) {
                assert_sense_desc(&c, cases[i].key, cases[i].asc,
                                  cases[i].ascq);
            } else {
                assert_sense(&c, cases[i].key, cases[i].asc, cases[i].ascq);
            }
            set_d_sense(&l, true);
        }
        lun_close(&l);
    }
}

/* ------------------------------------------------------------------------ */
/* VERIFY                                                                    */

static void test_verify(void)
{
    ScsiDiskConf conf = conf_default();
    size_t len = 3 * MiB;               /* three chunks */
    uint32_t blocks = len / 512;
    g_autofree uint8_t *data = g_malloc(len);
    g_autofree uint8_t *cmp = g_malloc(len);
    uint8_t cdb[16];
    Lun l;
    Cmd c;

    conf.max_transfer = 16384;
    lun_open_file(&l, 4 * MiB, NULL, &conf);
    fill_random(data, len);
    g_assert_cmpint(pwrite(l.fd, data, len, 512), ==, (ssize_t)len);

    /* BYTCHK=0: range only. */
    run_good(&l, &c, cdb, cdb_io(cdb, SCSI_OP_VERIFY_10, 1, blocks, 0), NULL, 0,
             NULL, 0);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_VERIFY_16, 8190, 3, 0), NULL, 0,
        NULL, 0);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x21, 0x00);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_VERIFY_10, 1, 1, 0), data, 512,
        NULL, 0);
    assert_xfer(&c, SCSI_XFER_WRONG_DIRECTION);

    /* BYTCHK=1, equal. */
    memcpy(cmp, data, len);
    run_good(&l, &c, cdb, cdb_io(cdb, SCSI_OP_VERIFY_16, 1, blocks, 0x02), cmp,
             len, NULL, 0);
    g_assert_false(c.sync);

    /* A difference in the second chunk: MISCOMPARE at its offset. */
    cmp[MiB + 1234] ^= 0x01;
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_VERIFY_16, 1, blocks, 0x02), cmp,
        len, NULL, 0);
    assert_sense(&c, KEY_MISCOMPARE, 0x1d, 0x00);
    g_assert_cmphex(c.req.sense[0], ==, 0xf0);          /* VALID */
    g_assert_cmpuint(get32(c.req.sense + 3), ==, MiB + 1234);

    /* Descriptor format: an information descriptor. */
    set_d_sense(&l, true);
    cmp[MiB + 1234] ^= 0x01;
    cmp[77] ^= 0x80;
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_VERIFY_10, 1, 8, 0x02), cmp, 4096,
        NULL, 0);
    assert_sense_desc(&c, KEY_MISCOMPARE, 0x1d, 0x00);
    {
        static const uint8_t info[12] = {
            0x00, 0x0a, 0x80, 0x00, 0, 0, 0, 0, 0, 0, 0, 77,
        };

        g_assert_cmpuint(c.req.sense_len, ==, 20);
        g_assert_cmpuint(c.req.sense[7], ==, 12);
        g_assert_cmpmem(c.req.sense + 8, 12, info, 12);
    }
    set_d_sense(&l, false);

    /* Short data-out; BYTCHK=3 and 2; protection. */
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_VERIFY_10, 1, 8, 0x02), cmp, 4095,
        NULL, 0);
    assert_xfer(&c, SCSI_XFER_OVERRUN);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_VERIFY_10, 1, 8, 0x06), cmp, 512,
        NULL, 0);
    assert_invalid_cdb(&c);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_VERIFY_10, 1, 8, 0x04), cmp, 4096,
        NULL, 0);
    assert_invalid_cdb(&c);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_VERIFY_10, 1, 8, 0x22), cmp, 4096,
        NULL, 0);
    assert_invalid_cdb(&c);
    lun_close(&l);

    /* A read error while verifying. */
    lun_open_blkdebug(&l, "inject-error.0.op=read", &conf);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_VERIFY_10, 0, 1, 0x02), cmp, 512,
        NULL, 0);
    assert_sense(&c, KEY_MEDIUM_ERROR, 0x11, 0x00);
    lun_close(&l);
}

/* ------------------------------------------------------------------------ */
/* WRITE SAME                                                                */

/* Whether the image's file system can punch holes (a deallocation test). */
static bool can_punch_holes(Lun *l)
{
    return fallocate(l->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                     0, 4096) == 0;
}

static void test_write_same_data(void)
{
    ScsiDiskConf conf = conf_default();
    uint8_t block[4096], cdb[16];
    uint32_t count = 3000;              /* 1.5 MB: two chunks */
    size_t len = (size_t)count * 512;
    g_autofree uint8_t *got = g_malloc(len);
    Lun l;
    Cmd c;

    lun_open_file(&l, 4 * MiB, NULL, &conf);
    fill_random(block, 512);
    run_good(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_16, 10, count, 0),
             block, 512, NULL, 0);
    g_assert_false(c.sync);
    file_read(&l, 10 * 512, got, len);
    for (uint32_t i = 0; i < count; i++) {
        assert_same(got + i * 512, block, 512, (10 + i) * 512, "block");
    }
    assert_file_bytes(&l, 9 * 512, 512, 0x5a);
    assert_file_bytes(&l, (10 + count) * 512, 512, 0x5a);

    /* WRITE SAME(10) of one block, with WCE=0: FUA writes. */
    set_wce(&l, false);
    fua_counts(&(unsigned) { 0 }, &(unsigned) { 0 });
    block[0] ^= 0xff;
    run_good(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_10, 5, 1, 0), block,
             512, NULL, 0);
    assert_fua(1, 0);
    file_read(&l, 5 * 512, got, 512);
    assert_same(got, block, 512, 5 * 512, "WRITE SAME(10)");
    lun_close(&l);

    /* 4096-byte blocks. */
    conf.logical_block_size = 4096;
    lun_open_file(&l, 1 * MiB, NULL, &conf);
    fill_random(block, 4096);
    run_good(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_10, 3, 4, 0), block,
             4096, NULL, 0);
    for (int i = 0; i < 4; i++) {
        file_read(&l, (3 + i) * 4096, got, 4096);
        assert_same(got, block, 4096, (3 + i) * 4096, "4k block");
    }
    assert_file_bytes(&l, 7 * 4096, 4096, 0x5a);
    lun_close(&l);
}

static void test_write_same_zero(void)
{
    ScsiDiskConf conf = conf_default();
    uint8_t zero[512] = { 0 }, cdb[16];
    int64_t before;
    Lun l;
    Cmd c;

    bool punch;

    lun_open_file(&l, 4 * MiB, "discard=unmap", &conf);
    punch = can_punch_holes(&l);
    /* A zero block, no UNMAP: zeroes, the space stays allocated. */
    before = file_allocated(&l);
    run_good(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_16, 0, 2048, 0), zero,
             512, NULL, 0);
    assert_file_bytes(&l, 0, MiB, 0x00);
    assert_file_bytes(&l, MiB, 512, 0x5a);
    g_assert_cmpint(file_allocated(&l), >=, before);

    /* With UNMAP: zeroes, and deallocated where the host can. */
    before = file_allocated(&l);
    run_good(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_16, 2048, 2048, 0x08),
             zero, 512, NULL, 0);
    assert_file_bytes(&l, MiB, MiB, 0x00);
    assert_file_bytes(&l, 2 * MiB, 512, 0x5a);
    if (punch) {
        g_assert_cmpint(file_allocated(&l), <=, before - MiB);
    } else {
        g_test_message("no hole punching in $TMPDIR: deallocation unchecked");
    }

    /* NDOB (16 only): zeroes without data-out; with data-out: wrong way. */
    run_good(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_16, 4096, 8, 0x01),
             NULL, 0, NULL, 0);
    assert_file_bytes(&l, 2 * MiB, 4096, 0x00);
    assert_file_bytes(&l, 2 * MiB + 4096, 512, 0x5a);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_16, 4096, 8, 0x01), zero,
        512, NULL, 0);
    assert_xfer(&c, SCSI_XFER_WRONG_DIRECTION);
    /* WRITE SAME(10) with UNMAP. */
    run_good(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_10, 6000, 8, 0x08),
             zero, 512, NULL, 0);
    assert_file_bytes(&l, 6000 * 512, 4096, 0x00);
    lun_close(&l);
}

static void test_write_same_errors(void)
{
    ScsiDiskConf conf = conf_default();
    uint8_t block[512], cdb[16];
    Lun l;
    Cmd c;

    memset(block, 0x33, sizeof(block));
    lun_open_file(&l, 64 * KiB, NULL, &conf);       /* 128 blocks */
    /* Count 0 (WSNZ), ANCHOR, obsolete bits, protection. */
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_16, 0, 0, 0), block, 512,
        NULL, 0);
    assert_invalid_cdb(&c);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_16, 0, 1, 0x10), block,
        512, NULL, 0);
    assert_invalid_cdb(&c);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_10, 0, 1, 0x02), block,
        512, NULL, 0);
    assert_invalid_cdb(&c);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_10, 0, 1, 0x20), block,
        512, NULL, 0);
    assert_invalid_cdb(&c);
    /* Above the WRITE SAME limit (1 GiB). */
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_16, 0, 2097153, 0),
        block, 512, NULL, 0);
    assert_invalid_cdb(&c);
    /* Out of range; short data-out. */
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_16, 120, 9, 0), block,
        512, NULL, 0);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x21, 0x00);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_16, 0, 1, 0), block, 511,
        NULL, 0);
    assert_xfer(&c, SCSI_XFER_OVERRUN);
    assert_file_bytes(&l, 0, 64 * KiB, 0x5a);
    lun_close(&l);

    /* Write errors: the data path and the zero path. */
    lun_open_blkdebug(&l, "inject-error.0.op=write,"
                      "inject-error.1.op=write-zeroes,"
                      "inject-error.1.errno=28", &conf);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_16, 0, 4, 0), block, 512,
        NULL, 0);
    assert_sense(&c, KEY_MEDIUM_ERROR, 0x0c, 0x00);
    memset(block, 0, sizeof(block));
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_SAME_16, 0, 4, 0x08), block,
        512, NULL, 0);
    assert_sense(&c, KEY_DATA_PROTECT, 0x27, 0x07);
    lun_close(&l);
}

/* ------------------------------------------------------------------------ */
/* UNMAP                                                                     */

/* An UNMAP parameter list of n descriptors; its length. */
static size_t unmap_list(uint8_t *list, const uint64_t *lba,
                         const uint32_t *count, unsigned n)
{
    memset(list, 0, 8 + 16 * n);
    put16(list, 6 + 16 * n);
    put16(list + 2, 16 * n);
    for (unsigned i = 0; i < n; i++) {
        put64(list + 8 + 16 * i, lba[i]);
        put32(list + 8 + 16 * i + 8, count[i]);
    }
    return 8 + 16 * n;
}

static void run_unmap(Lun *l, Cmd *c, const uint8_t *list, uint16_t plen,
                      size_t out_len)
{
    uint8_t cdb[16] = { SCSI_OP_UNMAP };

    put16(cdb + 7, plen);
    run(l, c, cdb, 10, list, out_len, NULL, 0);
}

static void test_unmap(void)
{
    static const uint64_t lba[] = { 8, 100, 200, 300, 400, 500 };
    static const uint32_t count[] = { 8, 1, 16, 0, 3, 7 };
    ScsiDiskConf conf = conf_default();
    uint8_t list[256];
    int64_t before;
    size_t plen;
    Lun l;
    Cmd c;

    lun_open_file(&l, 1 * MiB, "discard=unmap", &conf);
    before = file_allocated(&l);
    /* Six descriptors (more than fit inline), one of them empty. */
    plen = unmap_list(list, lba, count, 6);
    run_unmap(&l, &c, list, plen, plen);
    assert_good(&c);
    g_assert_false(c.sync);
    for (int i = 0; i < 6; i++) {
        assert_file_bytes(&l, lba[i] * 512, count[i] * 512, 0x00);
        assert_file_bytes(&l, (lba[i] + count[i]) * 512, 512, 0x5a);
    }
    assert_file_bytes(&l, 7 * 512, 512, 0x5a);
    g_assert_cmpint(file_allocated(&l), <=, before);

    /* One range, and an empty list. */
    plen = unmap_list(list, (uint64_t[]) { 1000 }, (uint32_t[]) { 24 }, 1);
    run_unmap(&l, &c, list, plen, plen);
    assert_good(&c);
    assert_file_bytes(&l, 1000 * 512, 24 * 512, 0x00);
    run_unmap(&l, &c, NULL, 0, 0);
    assert_good(&c);
    /* A trailing partial descriptor is ignored. */
    plen = unmap_list(list, (uint64_t[]) { 1100, 1200 },
                      (uint32_t[]) { 4, 4 }, 2);
    put16(list, 6 + 24);
    put16(list + 2, 24);
    run_unmap(&l, &c, list, 32, 32);
    assert_good(&c);
    assert_file_bytes(&l, 1100 * 512, 4 * 512, 0x00);
    assert_file_bytes(&l, 1200 * 512, 4 * 512, 0x5a);
    lun_close(&l);
}

static void test_unmap_errors(void)
{
    ScsiDiskConf conf = conf_default();
    g_autofree uint8_t *big = g_malloc0(8 + 16 * 257);
    uint8_t list[256], cdb[16];
    size_t plen;
    Lun l;
    Cmd c;

    lun_open_file(&l, 1 * MiB, "discard=unmap", &conf);     /* 2048 blocks */
    plen = unmap_list(list, (uint64_t[]) { 8, 2040 }, (uint32_t[]) { 8, 9 },
                      2);
    /* The second range is out of range: nothing is unmapped. */
    run_unmap(&l, &c, list, plen, plen);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x21, 0x00);
    assert_file_bytes(&l, 8 * 512, 8 * 512, 0x5a);
    /* Parameter list lengths: 1..7; descriptors beyond the list; data
     * length beyond the list; descriptors beyond the data length. */
    run_unmap(&l, &c, list, 7, 7);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x1a, 0x00);
    run_unmap(&l, &c, list, 24, 40);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x1a, 0x00);
    plen = unmap_list(list, (uint64_t[]) { 8 }, (uint32_t[]) { 8 }, 1);
    put16(list, 100);
    run_unmap(&l, &c, list, plen, plen);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x1a, 0x00);
    put16(list, 6);
    run_unmap(&l, &c, list, plen, plen);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x1a, 0x00);
    /* Less data-out than the parameter list length. */
    put16(list, 22);
    run_unmap(&l, &c, list, plen, plen - 1);
    assert_xfer(&c, SCSI_XFER_OVERRUN);
    /* Too many descriptors (257), too many blocks. */
    put16(big, 6 + 16 * 257);
    put16(big + 2, 16 * 257);
    run_unmap(&l, &c, big, 8 + 16 * 257, 8 + 16 * 257);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x26, 0x00);
    /* ANCHOR. */
    memset(cdb, 0, 16);
    cdb[0] = SCSI_OP_UNMAP;
    cdb[1] = 0x01;
    run(&l, &c, cdb, 10, NULL, 0, NULL, 0);
    assert_invalid_cdb(&c);
    assert_file_bytes(&l, 0, MiB, 0x5a);
    lun_close(&l);

    /* More blocks in all than VPD 0xB0 allows (1 GiB), on a big LUN. */
    lun_open_null(&l, "4G", "discard=unmap", &conf);
    plen = unmap_list(list, (uint64_t[]) { 0, 3000000 },
                      (uint32_t[]) { 2000000, 97153 }, 2);
    run_unmap(&l, &c, list, plen, plen);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x26, 0x00);
    plen = unmap_list(list, (uint64_t[]) { 0, 3000000 },
                      (uint32_t[]) { 2000000, 97152 }, 2);
    run_unmap(&l, &c, list, plen, plen);
    assert_good(&c);
    lun_close(&l);

    /* Without discard=unmap (no LBPU): the command is not supported. */
    lun_open_file(&l, 1 * MiB, NULL, &conf);
    plen = unmap_list(list, (uint64_t[]) { 8 }, (uint32_t[]) { 8 }, 1);
    run_unmap(&l, &c, list, plen, plen);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x20, 0x00);
    assert_file_bytes(&l, 0, MiB, 0x5a);
    lun_close(&l);

    /* A discard error. */
    lun_open_blkdebug(&l, "discard=unmap,inject-error.0.op=discard", &conf);
    run_unmap(&l, &c, list, plen, plen);
    assert_sense(&c, KEY_MEDIUM_ERROR, 0x0c, 0x00);
    lun_close(&l);
}

/* ------------------------------------------------------------------------ */
/* SYNCHRONIZE CACHE, START STOP UNIT, PREVENT ALLOW MEDIUM REMOVAL          */

static void test_sync_cache(void)
{
    ScsiDiskConf conf = conf_default();
    uint8_t cdb[16];
    Lun l;
    Cmd c;

    lun_open_file(&l, 64 * KiB, NULL, &conf);
    run_good(&l, &c, cdb, cdb_io(cdb, SCSI_OP_SYNCHRONIZE_CACHE_10, 0, 0, 0),
             NULL, 0, NULL, 0);
    g_assert_false(c.sync);
    run_good(&l, &c, cdb,
             cdb_io(cdb, SCSI_OP_SYNCHRONIZE_CACHE_16, 100, 28, 0x02),
             NULL, 0, NULL, 0);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_SYNCHRONIZE_CACHE_16, 100, 29, 0),
        NULL, 0, NULL, 0);
    assert_sense(&c, KEY_ILLEGAL_REQUEST, 0x21, 0x00);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_SYNCHRONIZE_CACHE_10, 0, 0, 0),
        NULL, 0, (uint8_t[16]) { 0 }, 16);
    assert_xfer(&c, SCSI_XFER_WRONG_DIRECTION);
    lun_close(&l);
}

static void test_start_stop(void)
{
    static const struct {
        uint8_t byte4;
        bool flushes;
    } cases[] = {
        { 0x01, false },            /* start */
        { 0x00, true },             /* stop: the cache is written back */
        { 0x04, false },            /* stop, NO_FLUSH */
        { 0x02, true },             /* eject (LOEJ), accepted */
        { 0x03, false },            /* load */
        { 0x30, false },            /* a power condition */
    };
    ScsiDiskConf conf = conf_default();
    uint8_t cdb[16];
    Lun l;
    Cmd c;

    /* Every flush fails here: that is how we see that one was made. */
    lun_open_blkdebug(&l, "inject-error.0.op=flush", &conf);
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        run(&l, &c, cdb, cdb6(cdb, SCSI_OP_START_STOP_UNIT, 0, 0, 0,
                              cases[i].byte4), NULL, 0, NULL, 0);
        if (cases[i].flushes) {
            assert_sense(&c, KEY_MEDIUM_ERROR, 0x0c, 0x00);
        } else {
            assert_good(&c);
        }
        /* The unit stays ready. */
        run_simple(&l, &c, SCSI_OP_TEST_UNIT_READY);
        assert_good(&c);
    }
    lun_close(&l);
}

static void test_prevent_allow(void)
{
    uint8_t cdb[16];
    Lun l;
    Cmd c;

    lun_open_default(&l);
    for (uint8_t prevent = 0; prevent < 4; prevent++) {
        run_good(&l, &c, cdb,
                 cdb6(cdb, SCSI_OP_PREVENT_ALLOW_MEDIUM_REMOVAL, 0, 0, 0,
                      prevent), NULL, 0, NULL, 0);
    }
    lun_close(&l);
}


/* ------------------------------------------------------------------------ */
/* Error policies                                                            */

static unsigned held;
static int held_ret;
static bool held_write;

static bool hold_it(ScsiRequest *req, int ret, bool write)
{
    held++;
    held_ret = ret;
    held_write = write;
    return true;
}

/*
 * rerror=ignore: a failed read is GOOD.  werror=stop: a failed write goes
 * to hold() and not to cb; scsi_req_retry() runs it again (the rule
 * fails it once) and it completes GOOD.  Without a hold callback, stop
 * reports.  enospc reports EIO.
 */
static void test_error_policies(void)
{
    ScsiDiskConf conf = conf_default();
    uint8_t buf[512] = { 0 }, cdb[16];
    Lun l;
    Cmd c;

    conf.rerror = BLOCK_ERROR_POLICY_IGNORE;
    conf.werror = BLOCK_ERROR_POLICY_STOP;
    lun_open_blkdebug(&l, "inject-error.0.op=read,"
                      "inject-error.1.op=write,inject-error.1.once=on,"
                      "inject-error.1.errno=28", &conf);
    run_good(&l, &c, cdb, cdb_io(cdb, SCSI_OP_READ_10, 0, 1, 0), NULL, 0,
             buf, 512);

    held = 0;
    cmd_init(&c, cdb, cdb_io(cdb, SCSI_OP_WRITE_10, 0, 1, 0), buf, 512,
             NULL, 0);
    c.req.hold = hold_it;
    cmd_submit(&l, &c);
    for (unsigned i = 0; i < 100 && !held; i++) {
        aio_poll(l.ctx, false);
        g_usleep(100);
    }
    g_assert_cmpuint(held, ==, 1);
    g_assert_cmpint(held_ret, ==, -ENOSPC);
    g_assert_true(held_write);
    g_assert_cmpuint(c.callbacks, ==, 0);
    scsi_req_retry(&c.req);
    cmd_wait(&l, &c);
    g_assert_cmphex(c.req.status, ==, 0);
    lun_close(&l);

    /* stop without a hold callback, and enospc on EIO: reported. */
    conf.werror = BLOCK_ERROR_POLICY_STOP;
    lun_open_blkdebug(&l, "inject-error.0.op=write", &conf);
    run(&l, &c, cdb, cdb_io(cdb, SCSI_OP_WRITE_10, 0, 1, 0), buf, 512,
        NULL, 0);
    assert_sense(&c, KEY_MEDIUM_ERROR, 0x0c, 0x00);
    lun_close(&l);
    conf.werror = BLOCK_ERROR_POLICY_ENOSPC;
    lun_open_blkdebug(&l, "inject-error.0.op=write", &conf);
    held = 0;
    cmd_init(&c, cdb, cdb_io(cdb, SCSI_OP_WRITE_10, 0, 1, 0), buf, 512,
             NULL, 0);
    c.req.hold = hold_it;
    cmd_submit(&l, &c);
    cmd_wait(&l, &c);
    g_assert_cmpuint(held, ==, 0);
    assert_sense(&c, KEY_MEDIUM_ERROR, 0x0c, 0x00);
    lun_close(&l);
}

static const TestCase tests[] = {
    { "/scsi-disk/error-policies", test_error_policies },
    { "/scsi-disk/rw/round-trip", test_rw_round_trip },
    { "/scsi-disk/rw/read6-zero-is-256", test_rw_read6_256 },
    { "/scsi-disk/rw/segments", test_rw_segments },
    { "/scsi-disk/rw/errors", test_rw_errors },
    { "/scsi-disk/rw/read-only", test_rw_read_only },
    { "/scsi-disk/rw/fua", test_rw_fua },
    { "/scsi-disk/io-errors", test_io_errors },
    { "/scsi-disk/verify", test_verify },
    { "/scsi-disk/write-same/data", test_write_same_data },
    { "/scsi-disk/write-same/zero", test_write_same_zero },
    { "/scsi-disk/write-same/errors", test_write_same_errors },
    { "/scsi-disk/unmap/ranges", test_unmap },
    { "/scsi-disk/unmap/errors", test_unmap_errors },
    { "/scsi-disk/sync-cache", test_sync_cache },
    { "/scsi-disk/start-stop", test_start_stop },
    { "/scsi-disk/prevent-allow", test_prevent_allow },
};

/* Below the 60 s meson timeout, so that the watchdog reports first. */
TEST_MAIN(tests, 50)

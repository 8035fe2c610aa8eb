/*
 * Helpers shared by the SCSI disk test programs (test-scsi-disk.c: the
 * commands answered without I/O; test-scsi-disk-io.c: the data path).
 *
 * - Lun: an AioContext whose home thread is the caller, a block node in
 *   it (null-co with read-zeroes=on, a temporary file image, or blkdebug
 *   over null-co), a BlockQueue over the node and a ScsiDisk.
 * - Cmd: a ScsiRequest with its CDB and iovecs; run() submits it and runs
 *   the loop until its callback has run (exactly once).  The request's
 *   private part is filled with garbage first, so state the disk forgets
 *   to set up shows.
 * - CDB builders and sense assertions.  Expected sense values are spelled
 *   as SPC-4 numbers them (KEY_*, literal ASC/ASCQ), not with the
 *   constants of scsi-defs.h, so a wrong constant fails a test.
 *
 * Every helper fails the running test (g_assert) rather than returning an
 * error.  Main thread (the tests' thread) only.
 */
#ifndef TESTS_UNIT_SCSI_TEST_HELPERS_H
#define TESTS_UNIT_SCSI_TEST_HELPERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "block/block.h"
#include "hw/scsi/scsi-defs.h"
#include "hw/scsi/scsi-disk.h"
#include "util/aio.h"

#define KiB ((int64_t)1024)
#define MiB (KiB * 1024)

#define container_of(ptr, type, member) \
    ((type *)((char *)(ptr) - offsetof(type, member)))

/* Sense keys, as SPC-4 numbers them. */
#define KEY_MEDIUM_ERROR    0x03
#define KEY_ILLEGAL_REQUEST 0x05
#define KEY_UNIT_ATTENTION  0x06
#define KEY_DATA_PROTECT    0x07
#define KEY_MISCOMPARE      0x0e

/* Big-endian fields. */
void put16(uint8_t *p, uint16_t v);
void put32(uint8_t *p, uint32_t v);
void put64(uint8_t *p, uint64_t v);
uint32_t get16(const uint8_t *p);
uint32_t get32(const uint8_t *p);
uint64_t get64(const uint8_t *p);

/* ------------------------------------------------------------------------ */
/* LUNs                                                                      */

typedef struct Lun {
    AioContext *ctx;
    BlockNode *bs;
    BlockQueue *q;
    ScsiDisk *d;
    int fd;                      /* the image file, or -1 */
    char *path;
} Lun;

/* Vendor "TESTVEND", product "TEST DISK", revision "1.2", serial
 * "SER-0042", 512-byte blocks, writable, WCE on. */
ScsiDiskConf conf_default(void);

/* A null-co LUN of size bytes ("1M", "4T") whose reads return zeroes;
 * extra: more node options ("discard=unmap") or NULL. */
void lun_open_null(Lun *l, const char *size, const char *extra,
                   const ScsiDiskConf *conf);

/* The usual LUN: 1 MiB of null-co with conf_default(). */
void lun_open_default(Lun *l);

/* A LUN over a new temporary file of size bytes, all 0x5a, opened with
 * the threads engine (aio=threads) and extra options. */
void lun_open_file(Lun *l, int64_t size, const char *extra,
                   const ScsiDiskConf *conf);

/* A blkdebug LUN over 1 MiB of null-co; rules: its options
 * ("inject-error.0.op=read,..."). */
void lun_open_blkdebug(Lun *l, const char *rules, const ScsiDiskConf *conf);

/* Free everything lun_open_*() made, the image file included. */
void lun_close(Lun *l);

/* The image's bytes (a file LUN). */
void file_read(Lun *l, int64_t offset, void *buf, size_t len);
/* Fail unless the image's [offset, offset + len) are all byte. */
void assert_file_bytes(Lun *l, int64_t offset, size_t len, uint8_t byte);
/* Bytes the image's file system has allocated to it (st_blocks). */
int64_t file_allocated(Lun *l);

/* ------------------------------------------------------------------------ */
/* Commands                                                                  */

#define CMD_MAX_IOV 16

typedef struct Cmd {
    ScsiRequest req;
    uint8_t cdb[32];
    struct iovec in_iov[CMD_MAX_IOV];
    struct iovec out_iov[CMD_MAX_IOV];
    unsigned callbacks;
    bool sync;                   /* completed inside scsi_disk_submit() */
} Cmd;

/* Set c up for cdb with one data-out and one data-in segment (none when
 * the length is 0). */
void cmd_init(Cmd *c, const uint8_t *cdb, unsigned cdb_len, const void *out,
              size_t out_len, void *in, size_t in_len);
/* Submit c (records whether it completed inside the call). */
void cmd_submit(Lun *l, Cmd *c);
/* Run the loop until c has completed; fail unless exactly once and
 * nothing is left in flight. */
void cmd_wait(Lun *l, Cmd *c);
void cmd_run(Lun *l, Cmd *c);
/* cmd_init() and cmd_run(). */
void run(Lun *l, Cmd *c, const uint8_t *cdb, unsigned cdb_len,
         const void *out, size_t out_len, void *in, size_t in_len);

/* GOOD, no sense. */
void assert_good(const Cmd *c);
/* run(), then assert_good(). */
void run_good(Lun *l, Cmd *c, const uint8_t *cdb, unsigned cdb_len,
              const void *out, size_t out_len, void *in, size_t in_len);
/* Not executed, with err. */
void assert_xfer(const Cmd *c, ScsiXferError err);
/* CHECK CONDITION with key/asc/ascq in fixed (18 bytes) or descriptor
 * format; ILLEGAL REQUEST, INVALID FIELD IN CDB. */
void assert_sense(const Cmd *c, uint8_t key, uint8_t asc, uint8_t ascq);
void assert_sense_desc(const Cmd *c, uint8_t key, uint8_t asc, uint8_t ascq);
void assert_invalid_cdb(const Cmd *c);

/* ------------------------------------------------------------------------ */
/* CDBs (into cdb, at least 16 bytes; each returns the CDB's length)         */

/* READ/WRITE-like (READ, WRITE, VERIFY, WRITE SAME, SYNCHRONIZE CACHE) in
 * op's layout; byte1: the flags byte (not in 6-byte CDBs). */
unsigned cdb_io(uint8_t *cdb, uint8_t op, uint64_t lba, uint32_t count,
                uint8_t byte1);
unsigned cdb6(uint8_t *cdb, uint8_t op, uint8_t b1, uint8_t b2, uint8_t b3,
              uint8_t b4);
unsigned cdb_inquiry(uint8_t *cdb, bool evpd, uint8_t page, uint16_t alloc);
/* MODE SENSE(10) if ten, else (6); pc: page control. */
unsigned cdb_mode_sense(uint8_t *cdb, bool ten, uint8_t byte1, uint8_t pc,
                        uint8_t page, uint8_t subpage, uint16_t alloc);
unsigned cdb_mode_select(uint8_t *cdb, bool ten, uint8_t byte1,
                         uint16_t plen);

/* ------------------------------------------------------------------------ */
/* Sequences                                                                 */

/* A 6-byte CDB of op and zeroes, without data. */
void run_simple(Lun *l, Cmd *c, uint8_t op);
/* READ or WRITE count blocks at lba from/to buf (len bytes); asserts
 * GOOD, asynchronous completion and in_done. */
void rw_ok(Lun *l, uint8_t op, uint64_t lba, uint32_t count, uint8_t byte1,
           void *buf, size_t len);
/* Mode page `page` (pc values) via MODE SENSE(10) with DBD; its length. */
size_t get_mode_page(Lun *l, uint8_t pc, uint8_t page, uint8_t *out);
/* MODE SELECT(10), PF, of one page. */
void mode_select(Lun *l, Cmd *c, const uint8_t *page, size_t len);
/* Set WCE / D_SENSE through MODE SENSE and MODE SELECT; assert GOOD. */
void set_wce(Lun *l, bool wce);
void set_d_sense(Lun *l, bool d_sense);

#endif

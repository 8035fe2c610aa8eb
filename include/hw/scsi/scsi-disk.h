/*
 * SCSI disk emulation over a block node: one logical unit.
 *
 * A ScsiDisk answers SCSI commands (SPC-4 / SBC-3) for one LUN whose
 * medium is a block node: TEST UNIT READY, INQUIRY (standard data and the
 * VPD pages 0x00, 0x80, 0x83, 0xB0, 0xB1, 0xB2), REPORT LUNS (through
 * the transport: scsi_build_report_luns()), READ CAPACITY (10) and (16), MODE
 * SENSE (6/10) and MODE SELECT (6/10) (caching page with WCE, control page
 * with D_SENSE), REQUEST SENSE, READ/WRITE (6/10/12/16) honouring FUA,
 * VERIFY (10/16), SYNCHRONIZE CACHE (10/16), UNMAP, WRITE SAME (10/16)
 * with and without UNMAP, START STOP UNIT and PREVENT ALLOW MEDIUM
 * REMOVAL.  Anything else gets CHECK CONDITION, ILLEGAL REQUEST, INVALID
 * COMMAND OPERATION CODE; invalid fields get INVALID FIELD IN CDB; LBAs
 * past the end get LBA OUT OF RANGE; a write to a read-only LUN gets DATA
 * PROTECT, WRITE PROTECTED.  Sense data is fixed format unless the
 * initiator set D_SENSE in the control mode page (then descriptor format).
 *
 * A unit attention is raised once after a LUN reset (scsi_disk_reset():
 * POWER ON, RESET, OR BUS DEVICE RESET OCCURRED) and after a capacity
 * change (scsi_disk_capacity_changed(): CAPACITY DATA HAS CHANGED): the
 * next command other than INQUIRY, REPORT LUNS and REQUEST SENSE gets
 * CHECK CONDITION with it, and REQUEST SENSE returns and clears it.  One
 * initiator (the VM) is assumed: one set of pending unit attentions per
 * LUN, at most one of each kind, the reset reported before the capacity
 * change; each is reported to exactly one command, whichever queue it
 * comes from.
 *
 * Choices the standards leave open (details in hw/scsi/): VPD 0x80 exists
 * only with a serial; VPD 0x83 has an 8-byte NAA designator (the wwn) and
 * always a T10 vendor ID designator; LBPU/LBPWS/LBPWS10 and LBPME are set
 * only for a writable LUN whose node discards (discard=unmap), and UNMAP
 * is INVALID COMMAND OPERATION CODE otherwise; LBPRZ is never set; VPD
 * 0xB0 reports no optimal transfer length; START STOP UNIT and PREVENT
 * ALLOW MEDIUM REMOVAL accept everything (a stop writes the cache back);
 * SYNCHRONIZE CACHE ignores IMMED; VERIFY supports BYTCHK 0 and 1.  A CDB
 * shorter than its command gets INVALID FIELD IN CDB.  Block errors:
 * -ENOSPC is DATA PROTECT, SPACE ALLOCATION FAILED WRITE PROTECT; -EPERM
 * DATA PROTECT, WRITE PROTECTED; -EINVAL/-EOPNOTSUPP ILLEGAL REQUEST,
 * INVALID FIELD IN CDB; -ENOMEM/-EAGAIN status BUSY (no sense); others
 * MEDIUM ERROR (UNRECOVERED READ ERROR for reads, else WRITE ERROR).
 *
 * Requests run in the caller's thread: scsi_disk_submit() takes the
 * BlockQueue of the caller's context (one per LUN per virtqueue), and the
 * completion runs in that thread.  The LUN's small shared state (pending
 * unit attention, WCE, D_SENSE) may be read and changed from several
 * queues' threads and uses atomics; nothing on the data path takes a lock.
 * Creation, free and the configuration calls are main-thread functions.
 */
#ifndef SPINDLE_HW_SCSI_SCSI_DISK_H
#define SPINDLE_HW_SCSI_SCSI_DISK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>
#include "block/block.h"
#include "block/error-policy.h"
#include "util/error.h"

typedef struct ScsiDisk ScsiDisk;

typedef struct ScsiDiskConf {
    /* NULL strings: the defaults in parentheses.  Printable ASCII. */
    const char *vendor;          /* INQUIRY, up to 8 ASCII chars ("SPINDLE") */
    const char *product;         /* up to 16 ("SPINDLE DISK") */
    const char *revision;        /* up to 4 (the version, e.g. "0.1") */
    const char *serial;          /* VPD 0x80, up to 36 chars; NULL or "":
                                  * none (no VPD page 0x80) */
    uint64_t wwn;                /* VPD 0x83 NAA designator, the 8-byte
                                  * form: these 64 bits as they are (so the
                                  * top 4 bits are the NAA field, e.g. 5 for
                                  * IEEE Registered); 0: none.  A T10 vendor
                                  * ID designator (vendor, product, serial)
                                  * is there in any case. */
    uint32_t logical_block_size; /* 512 or 4096 (0: 512) */
    bool writable;               /* off: write commands get DATA PROTECT */
    bool writethrough;           /* start with WCE = 0 */
    uint32_t max_transfer;       /* blocks limit reported in VPD 0xB0, and
                                  * the most one READ/WRITE may move; 0: the
                                  * node's max_transfer or 32 MiB */
    /* What a failed read (READ, VERIFY) / other command does
     * (block/error-policy.h; zero: report, as sense data).  stop
     * needs the transport's ScsiRequest.hold. */
    BlockErrorPolicy rerror;
    BlockErrorPolicy werror;
} ScsiDiskConf;

/*
 * Errors: bad strings (too long, not printable ASCII), bad block size, a
 * writable LUN over a read-only node, a node whose size is not a multiple
 * of the block size (the tail would be unreachable: an error, not a silent
 * truncation) or that is smaller than one block.  Takes a reference to bs.
 */
ScsiDisk *scsi_disk_new(const ScsiDiskConf *conf, BlockNode *bs,
                        Error **errp);

/*
 * Check an INQUIRY or VPD string (vendor, product, revision, serial):
 * printable ASCII (SPC-4 4.3.1), at most max characters.  name is the
 * option's name for the message.  Returns false with errp set otherwise.
 * Any thread.
 */
bool scsi_disk_check_string(const char *name, const char *value, size_t max,
                            Error **errp);
void scsi_disk_free(ScsiDisk *d);

BlockNode *scsi_disk_get_node(const ScsiDisk *d);
uint32_t scsi_disk_block_size(const ScsiDisk *d);

/* Raise the reset unit attention (after LOGICAL UNIT RESET or I_T NEXUS
 * RESET, once the LUN's requests are drained).  Any thread. */
void scsi_disk_reset(ScsiDisk *d);
/* Raise CAPACITY DATA HAS CHANGED (the node was resized).  Any thread. */
void scsi_disk_capacity_changed(ScsiDisk *d);

/* ------------------------------------------------------------------------ */
/* Status, sense                                                             */

/* SAM status codes. */
#define SCSI_STATUS_GOOD                0x00
#define SCSI_STATUS_CHECK_CONDITION     0x02
#define SCSI_STATUS_BUSY                0x08
#define SCSI_STATUS_RESERVATION_CONFLICT 0x18
#define SCSI_STATUS_TASK_SET_FULL       0x28
#define SCSI_STATUS_TASK_ABORTED        0x40

/* Room for sense data: virtio-scsi's default sense_size. */
#define SCSI_SENSE_BUF_SIZE             96

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */

typedef struct ScsiRequest ScsiRequest;
typedef void ScsiCompletionFunc(ScsiRequest *req);

/*
 * The transport's view of a command that was not executed because the
 * buffers the initiator gave do not fit the command (5.6.6.1 OVERRUN):
 * a READ/WRITE/UNMAP/... whose transfer is larger than the data buffer
 * in its direction, or data in the direction the command does not use.
 * Allocation-length commands (INQUIRY, MODE SENSE, ...) never overrun:
 * their answer is truncated to the buffer, as SPC says.
 */
typedef enum ScsiXferError {
    SCSI_XFER_OK,
    SCSI_XFER_OVERRUN,           /* buffer too small for the transfer */
    SCSI_XFER_WRONG_DIRECTION,   /* data-out for a read, or data-in for a
                                  * write */
} ScsiXferError;

/* Private state of a request (block request, bounce, progress). */
typedef struct ScsiRequestPriv {
    _Alignas(16) unsigned char space[384];
} ScsiRequestPriv;

struct ScsiRequest {
    /* Filled by the caller; they must stay valid until the completion. */
    const uint8_t *cdb;
    unsigned cdb_len;            /* bytes available (>= the command's) */
    struct iovec *out_iov;       /* data from the initiator */
    int out_niov;
    uint64_t out_len;            /* total bytes of out_iov */
    struct iovec *in_iov;        /* data to the initiator */
    int in_niov;
    uint64_t in_len;             /* total bytes of in_iov */
    ScsiCompletionFunc *cb;
    void *opaque;
    /*
     * The LUN's error policy says stop: hold the request (it failed with
     * ret, a write unless it was a read; return true) until the transport
     * calls scsi_req_retry(), or return false to have it fail as report
     * says.  NULL: stop acts as report.  The BlockQueue's thread.
     */
    bool (*hold)(ScsiRequest *req, int ret, bool write);

    /* Results, valid in cb. */
    uint8_t status;              /* SCSI_STATUS_* */
    ScsiXferError xfer_error;    /* not SCSI_XFER_OK: not executed (status
                                  * GOOD, no sense, in_done 0) */
    unsigned sense_len;          /* bytes of sense (0 unless CHECK CONDITION) */
    uint8_t sense[SCSI_SENSE_BUF_SIZE];
    uint64_t in_done;            /* bytes written to in_iov (resid =
                                  * in_len - in_done) */

    ScsiRequestPriv priv;
};

/*
 * Execute req on d through q (a BlockQueue of d's node in the calling
 * thread's context).  req->cb runs in this thread when the command is
 * done: before scsi_disk_submit() returns for commands that need no I/O
 * (INQUIRY, MODE SENSE, errors...), later for the others.  Never fails
 * otherwise: every problem is a SCSI status with sense data, or an
 * xfer_error.
 */
void scsi_disk_submit(ScsiDisk *d, BlockQueue *q, ScsiRequest *req);

/*
 * Submit again the block request of req that failed and was held
 * (ScsiRequest.hold): the command goes on from there, and completes (or
 * is held again) as usual.  The BlockQueue's thread; the BlockQueue must
 * still exist.
 */
void scsi_req_retry(ScsiRequest *req);

/*
 * REPORT LUNS needs the list of LUNs of the target, which the transport
 * knows: it answers that command itself with scsi_build_report_luns()
 * (any LUN, or a well-known LUN, may receive it; one that reaches
 * scsi_disk_submit() gets INVALID COMMAND OPERATION CODE).  Fills buf (up
 * to len bytes) with the REPORT LUNS parameter data for the n LUN numbers
 * (single-level format: peripheral addressing below 256, flat space
 * addressing up to 16383; larger numbers are a caller bug and abort),
 * returns the bytes written.  The LUN list length field always counts all
 * n LUNs, as SPC wants when the data is truncated.  Any thread.
 */
size_t scsi_build_report_luns(const uint16_t *luns, unsigned n, uint8_t *buf,
                              size_t len);

/*
 * Build sense data for key/asc/ascq into sense (SCSI_SENSE_BUF_SIZE
 * bytes), fixed format (descriptor: false; 18 bytes) or descriptor format
 * (8 bytes, no descriptors); returns its length.  For the transport's own
 * errors (a command to a LUN that does not exist: ILLEGAL REQUEST, LOGICAL
 * UNIT NOT SUPPORTED).  Any thread.
 */
unsigned scsi_build_sense(uint8_t *sense, bool descriptor, uint8_t key,
                          uint8_t asc, uint8_t ascq);

#endif

/*
 * SCSI disk internals, shared by scsi-disk.c (requests, the data path)
 * and scsi-disk-info.c (INQUIRY, VPD, READ CAPACITY, mode pages, REQUEST
 * SENSE).  Not for other directories: the interface is
 * include/hw/scsi/scsi-disk.h.
 */
#ifndef SPINDLE_HW_SCSI_SCSI_DISK_INT_H
#define SPINDLE_HW_SCSI_SCSI_DISK_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <glib.h>

#include "block/block.h"
#include "hw/scsi/scsi-defs.h"
#include "hw/scsi/scsi-disk.h"
#include "util/bswap.h"

/* CDB bytes we keep: every command we implement fits in 16. */
#define SCSI_DISK_CDB_MAX           16

#define SCSI_DISK_SERIAL_MAX        36

/* Most descriptors in one UNMAP (VPD 0xB0). */
#define SCSI_DISK_MAX_UNMAP_DESCS   256

/* Pending unit attentions, a bit each; the lowest set bit goes first. */
#define SCSI_DISK_UA_RESET          (1u << 0)
#define SCSI_DISK_UA_CAPACITY       (1u << 1)

struct ScsiDisk {
    BlockNode *bs;               /* a reference */

    /* Fixed at creation. */
    uint32_t block_size;         /* 512 or 4096 */
    unsigned block_bits;         /* log2(block_size) */
    bool writable;
    bool can_unmap;              /* the node discards (discard=unmap) */
    bool default_wce;            /* !conf->writethrough */
    BlockErrorPolicy rerror;    /* conf's error policies */
    BlockErrorPolicy werror;
    uint32_t max_xfer_blocks;    /* READ/WRITE/VERIFY limit */
    uint32_t max_unmap_blocks;   /* sum of one UNMAP's descriptors */
    uint32_t max_ws_blocks;      /* WRITE SAME limit */
    uint32_t unmap_gran_blocks;  /* optimal unmap granularity */
    uint16_t xfer_gran_blocks;   /* optimal transfer length granularity */
    uint64_t wwn;                /* 0: no NAA designator */
    char vendor[SCSI_INQUIRY_VENDOR_LEN];       /* space-padded, no NUL */
    char product[SCSI_INQUIRY_PRODUCT_LEN];
    char revision[SCSI_INQUIRY_REVISION_LEN];
    char serial[SCSI_DISK_SERIAL_MAX];          /* serial_len bytes */
    unsigned serial_len;         /* 0: no serial, no VPD page 0x80 */

    /*
     * Shared by every queue's thread (and the main thread for the UA
     * bits).  Each is a self-contained value: nothing else is published
     * with it, so relaxed atomics suffice (no ordering to pair).
     */
    _Atomic unsigned ua_pending; /* SCSI_DISK_UA_* */
    _Atomic bool wce;            /* caching page WCE */
    _Atomic bool d_sense;        /* control page D_SENSE */
};

/* One range of an UNMAP, validated and copied out of the parameter list. */
typedef struct ScsiUnmapRange {
    uint64_t lba;
    uint32_t nblocks;
} ScsiUnmapRange;

/* What the BlockRequest of a command is doing (ScsiDiskReq.kind). */
typedef enum ScsiIoKind {
    SCSI_IO_READ,                /* READ: in_done on success */
    SCSI_IO_WRITE,               /* WRITE, write-zeroes */
    SCSI_IO_FLUSH,               /* SYNCHRONIZE CACHE, START STOP UNIT */
    SCSI_IO_UNMAP,               /* one DISCARD per range */
    SCSI_IO_WRITE_SAME,          /* one WRITE per chunk */
    SCSI_IO_VERIFY,              /* one READ per chunk, then compare */
} ScsiIoKind;

#define SCSI_DISK_INLINE_IOVS       4
#define SCSI_DISK_INLINE_RANGES     4

/*
 * The private part of a request (ScsiRequest.priv).  heap is the one
 * allocation a command may need beyond the request itself: a trimmed
 * iovec array longer than the inline one, the ranges of a long UNMAP, or
 * the chunk buffer of WRITE SAME and VERIFY; freed when the command ends.
 */
typedef struct ScsiDiskReq {
    BlockRequest breq;
    ScsiDisk *d;
    BlockQueue *q;
    void *heap;
    uint64_t start;              /* node bytes: where the command starts, */
    uint64_t pos;                /* ... where its next step starts, */
    uint64_t end;                /* ... and where it ends */
    uint8_t cdb[SCSI_DISK_CDB_MAX];  /* our copy; the rest zero-filled */
    uint8_t kind;                /* ScsiIoKind */
    uint8_t bflags;              /* BLOCK_REQ_* for the writes */
    uint16_t nranges;            /* UNMAP */
    uint16_t next_range;
    union {
        struct iovec iov[SCSI_DISK_INLINE_IOVS];    /* data, or a chunk */
        ScsiUnmapRange ranges[SCSI_DISK_INLINE_RANGES];
    } u;
} ScsiDiskReq;

G_STATIC_ASSERT(sizeof(ScsiDiskReq) <= sizeof(ScsiRequestPriv));
G_STATIC_ASSERT(_Alignof(ScsiDiskReq) <= _Alignof(ScsiRequestPriv));

static inline ScsiDiskReq *scsi_disk_req(ScsiRequest *req)
{
    return (ScsiDiskReq *)req->priv.space;
}

/* ------------------------------------------------------------------------ */
/* scsi-disk.c: shared helpers (the request's thread)                        */

/* The capacity in logical blocks, from the node's current length. */
uint64_t scsi_disk_num_blocks(ScsiDisk *d);

/* Take the highest-priority pending unit attention: false if none. */
bool scsi_disk_take_unit_attention(ScsiDisk *d, uint8_t *asc, uint8_t *ascq);

/* Build sense data, with an INFORMATION field if has_info; its length. */
unsigned scsi_sense_build(uint8_t *sense, bool descriptor, uint8_t key,
                          uint8_t asc, uint8_t ascq, bool has_info,
                          uint64_t info);

/* Finish req as it stands (status, sense, in_done already set). */
void scsi_req_complete(ScsiRequest *req);

/* Finish req with CHECK CONDITION and sense key/asc/ascq, in the format
 * D_SENSE selects. */
void scsi_req_fail(ScsiRequest *req, uint8_t key, uint8_t asc, uint8_t ascq);

/* ILLEGAL REQUEST, INVALID FIELD IN CDB / IN PARAMETER LIST /
 * PARAMETER LIST LENGTH ERROR. */
void scsi_req_invalid_cdb(ScsiRequest *req);
void scsi_req_invalid_param(ScsiRequest *req);
void scsi_req_param_length_error(ScsiRequest *req);

/* Finish req unexecuted with xfer_error err. */
void scsi_req_xfer_fail(ScsiRequest *req, ScsiXferError err);

/*
 * For a command that takes len bytes of data-out (a parameter list, data
 * to compare): true if it goes on; false if req is finished, with
 * SCSI_XFER_OVERRUN when the driver's buffer is shorter, or with GOOD when
 * len is 0 (no data is no error for the commands that call this).
 */
bool scsi_req_want_data_out(ScsiRequest *req, uint64_t len);

/*
 * Finish req with GOOD and an allocation-length answer: the first
 * min(len, alloc, in_len) bytes of buf go to the data-in buffer.
 */
void scsi_req_reply(ScsiRequest *req, const uint8_t *buf, size_t len,
                    size_t alloc);


/* ------------------------------------------------------------------------ */
/* scsi-disk-info.c: commands answered from the LUN's state, no I/O          */

void scsi_disk_cmd_inquiry(ScsiRequest *req);
void scsi_disk_cmd_request_sense(ScsiRequest *req);
void scsi_disk_cmd_read_capacity_10(ScsiRequest *req);
void scsi_disk_cmd_service_action_in(ScsiRequest *req);
void scsi_disk_cmd_mode_sense(ScsiRequest *req);
void scsi_disk_cmd_mode_select(ScsiRequest *req);

#endif

/*
 * virtio-blk wire format: feature bits, the configuration space, the
 * request header, request types, status values and the discard /
 * write-zeroes segment.
 *
 * Specification: virtio 1.x (OASIS, "Virtual I/O Device (VIRTIO)"),
 * section 5.2 "Block Device".  Every field is little-endian.
 *
 * Shared by the back-end (hw/virtio/virtio-blk.c) and the guest-less
 * front-end (tools/frontend/), so both sides agree on one layout.  Plain
 * data definitions only.
 */
#ifndef SPINDLE_HW_VIRTIO_VIRTIO_BLK_WIRE_H
#define SPINDLE_HW_VIRTIO_VIRTIO_BLK_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <glib.h>

/* Feature bits (5.2.3). */
#define VIRTIO_BLK_F_SIZE_MAX       1
#define VIRTIO_BLK_F_SEG_MAX        2
#define VIRTIO_BLK_F_GEOMETRY       4
#define VIRTIO_BLK_F_RO             5
#define VIRTIO_BLK_F_BLK_SIZE       6
#define VIRTIO_BLK_F_FLUSH          9
#define VIRTIO_BLK_F_TOPOLOGY      10
#define VIRTIO_BLK_F_CONFIG_WCE    11
#define VIRTIO_BLK_F_MQ            12
#define VIRTIO_BLK_F_DISCARD       13
#define VIRTIO_BLK_F_WRITE_ZEROES  14

/* Request types (5.2.6). */
#define VIRTIO_BLK_T_IN             0
#define VIRTIO_BLK_T_OUT            1
#define VIRTIO_BLK_T_FLUSH          4
#define VIRTIO_BLK_T_GET_ID         8
#define VIRTIO_BLK_T_DISCARD       11
#define VIRTIO_BLK_T_WRITE_ZEROES  13

/* Status byte values. */
#define VIRTIO_BLK_S_OK             0
#define VIRTIO_BLK_S_IOERR          1
#define VIRTIO_BLK_S_UNSUPP         2

/* Discard / write-zeroes segment flags. */
#define VIRTIO_BLK_DWZ_F_UNMAP      (1u << 0)

/* Sectors are 512 bytes whatever the logical block size. */
#define VIRTIO_BLK_SECTOR_BITS      9
#define VIRTIO_BLK_SECTOR_SIZE      (1u << VIRTIO_BLK_SECTOR_BITS)

/* Bytes of a GET_ID answer (NUL-padded, not terminated when full). */
#define VIRTIO_BLK_ID_BYTES         20

#define VIRTIO_BLK_HDR_SIZE         16
#define VIRTIO_BLK_SEG_SIZE         16

/*
 * The configuration space (5.2.4) up to and including
 * write_zeroes_may_unmap and its padding.  Later fields (secure erase,
 * zoned) belong to features Spindle neither offers nor asks for.
 */
typedef struct __attribute__((packed)) VirtioBlkConfig {
    uint64_t capacity;           /* in 512-byte sectors */
    uint32_t size_max;
    uint32_t seg_max;
    uint16_t cylinders;
    uint8_t heads;
    uint8_t sectors;
    uint32_t blk_size;
    uint8_t physical_block_exp;
    uint8_t alignment_offset;
    uint16_t min_io_size;
    uint32_t opt_io_size;
    uint8_t writeback;
    uint8_t unused0;
    uint16_t num_queues;
    uint32_t max_discard_sectors;
    uint32_t max_discard_seg;
    uint32_t discard_sector_alignment;
    uint32_t max_write_zeroes_sectors;
    uint32_t max_write_zeroes_seg;
    uint8_t write_zeroes_may_unmap;
    uint8_t unused1[3];
} VirtioBlkConfig;

G_STATIC_ASSERT(offsetof(VirtioBlkConfig, size_max) == 8);
G_STATIC_ASSERT(offsetof(VirtioBlkConfig, cylinders) == 16);
G_STATIC_ASSERT(offsetof(VirtioBlkConfig, blk_size) == 20);
G_STATIC_ASSERT(offsetof(VirtioBlkConfig, min_io_size) == 26);
G_STATIC_ASSERT(offsetof(VirtioBlkConfig, writeback) == 32);
G_STATIC_ASSERT(offsetof(VirtioBlkConfig, num_queues) == 34);
G_STATIC_ASSERT(offsetof(VirtioBlkConfig, max_discard_sectors) == 36);
G_STATIC_ASSERT(offsetof(VirtioBlkConfig, max_write_zeroes_sectors) == 48);
G_STATIC_ASSERT(offsetof(VirtioBlkConfig, write_zeroes_may_unmap) == 56);
G_STATIC_ASSERT(sizeof(VirtioBlkConfig) == 60);

/* The device-readable header that starts every request (5.2.6). */
typedef struct VirtioBlkOutHdr {
    uint32_t type;               /* VIRTIO_BLK_T_* */
    uint32_t reserved;
    uint64_t sector;
} VirtioBlkOutHdr;

G_STATIC_ASSERT(offsetof(VirtioBlkOutHdr, sector) == 8);
G_STATIC_ASSERT(sizeof(VirtioBlkOutHdr) == VIRTIO_BLK_HDR_SIZE);

/* One discard / write-zeroes segment; the data of those requests. */
typedef struct VirtioBlkSeg {
    uint64_t sector;
    uint32_t num_sectors;
    uint32_t flags;              /* VIRTIO_BLK_DWZ_F_* */
} VirtioBlkSeg;

G_STATIC_ASSERT(offsetof(VirtioBlkSeg, num_sectors) == 8);
G_STATIC_ASSERT(offsetof(VirtioBlkSeg, flags) == 12);
G_STATIC_ASSERT(sizeof(VirtioBlkSeg) == VIRTIO_BLK_SEG_SIZE);

#endif

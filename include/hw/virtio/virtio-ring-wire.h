/*
 * Split virtqueue wire format: the descriptor table, available ring and
 * used ring that a driver and a device share in guest memory, their flags,
 * and the device-independent feature bits that shape them.
 *
 * Specification: virtio 1.x (OASIS, "Virtual I/O Device (VIRTIO)"),
 * section 2.7 "Split Virtqueues" and section 6 "Reserved Feature Bits".
 * Every field is little-endian.
 *
 * Shared by the back-end (hw/virtio/virtqueue.c) and the guest-less
 * front-end (tools/frontend/), so both sides agree on one layout.  Plain
 * data definitions only; vring_need_event() is the spec's own formula.
 *
 * The ring fields the other side writes while we run are _Atomic so that
 * every access names its memory order; the descriptor table and the used
 * elements are plain (each side copies or fills them before publishing
 * an index with a release store).
 */
#ifndef SPINDLE_HW_VIRTIO_VIRTIO_RING_WIRE_H
#define SPINDLE_HW_VIRTIO_VIRTIO_RING_WIRE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <glib.h>

/* Device-independent feature bits (in the 64-bit feature word). */
#define VIRTIO_RING_F_INDIRECT_DESC 28
#define VIRTIO_RING_F_EVENT_IDX     29
#define VIRTIO_F_VERSION_1          32

/* Descriptor flags. */
#define VRING_DESC_F_NEXT           1   /* chain continues at next */
#define VRING_DESC_F_WRITE          2   /* device-writable buffer */
#define VRING_DESC_F_INDIRECT       4   /* buffer is a descriptor table */

/* Ring flags. */
#define VRING_USED_F_NO_NOTIFY      1   /* device: "don't kick me" */
#define VRING_AVAIL_F_NO_INTERRUPT  1   /* driver: "don't interrupt me" */

#define VRING_DESC_SIZE 16

typedef struct VRingDesc {
    uint64_t addr;
    uint32_t len;
    uint16_t flags;
    uint16_t next;
} VRingDesc;

/* Written by the driver. */
typedef struct VRingAvail {
    _Atomic uint16_t flags;
    _Atomic uint16_t idx;
    _Atomic uint16_t ring[];     /* num entries, then used_event */
} VRingAvail;

typedef struct VRingUsedElem {
    uint32_t id;
    uint32_t len;
} VRingUsedElem;

/* Written by the device. */
typedef struct VRingUsed {
    _Atomic uint16_t flags;
    _Atomic uint16_t idx;
    VRingUsedElem ring[];        /* num entries, then avail_event */
} VRingUsed;

G_STATIC_ASSERT(sizeof(_Atomic uint16_t) == 2);
G_STATIC_ASSERT(sizeof(VRingDesc) == VRING_DESC_SIZE);
G_STATIC_ASSERT(offsetof(VRingDesc, len) == 8);
G_STATIC_ASSERT(offsetof(VRingDesc, flags) == 12);
G_STATIC_ASSERT(offsetof(VRingDesc, next) == 14);
G_STATIC_ASSERT(offsetof(VRingAvail, ring) == 4);
G_STATIC_ASSERT(sizeof(VRingUsedElem) == 8);
G_STATIC_ASSERT(offsetof(VRingUsed, ring) == 4);

/*
 * The event-index rule, the spec's vring_need_event(): signal if event
 * lies in [old, new_idx), i.e. the other side asked to be told once the
 * index passed event and it did so in the entries published since old.
 * Arithmetic is modulo 2^16.  Any thread.
 */
static inline bool vring_need_event(uint16_t event, uint16_t new_idx,
                                    uint16_t old)
{
    return (uint16_t)(new_idx - event - 1) < (uint16_t)(new_idx - old);
}

#endif

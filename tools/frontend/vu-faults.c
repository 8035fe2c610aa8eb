/*
 * vu-faults: malformed rings, for tests that a back-end survives a hostile
 * guest.
 *
 * Theory of operation
 * -------------------
 * Every fault starts from a well-formed virtio-blk read of sector 0 (header,
 * 512-byte data buffer, status byte, in a scratch page of guest memory that
 * the queue allocates on first use), built with vufq_build_chain() and
 * then spoilt in exactly one way before it is published and the device is
 * kicked (always: a fault nobody looks at tests nothing).  A correct
 * back-end must not touch memory outside the guest's, must not loop, and
 * should at worst stop that queue or drop the connection; what it actually
 * did is for the caller to observe (used ring, status byte, socket).
 *
 * Runs in the queue's thread, like the rest of the data path.
 */

#include <errno.h>
#include <string.h>

#include <glib.h>

#include "vu-frontend-int.h"

#define SCRATCH_BYTES       4096
#define SCRATCH_STATUS      16
#define SCRATCH_TABLE2      1024
#define SCRATCH_DATA        2048

static const char *const fault_names[VUF_FAULT_COUNT] = {
    [VUF_FAULT_HEAD_OUT_OF_RANGE] = "head-out-of-range",
    [VUF_FAULT_DESC_LOOP] = "desc-loop",
    [VUF_FAULT_ADDR_OUT_OF_RANGE] = "addr-out-of-range",
    [VUF_FAULT_ADDR_OVERFLOW] = "addr-overflow",
    [VUF_FAULT_NEXT_OUT_OF_RANGE] = "next-out-of-range",
    [VUF_FAULT_INDIRECT_BAD_LEN] = "indirect-bad-len",
    [VUF_FAULT_INDIRECT_NESTED] = "indirect-nested",
    [VUF_FAULT_INDIRECT_LOOP] = "indirect-loop",
    [VUF_FAULT_AVAIL_IDX_JUMP] = "avail-idx-jump",
};

/* The token of fault chains, should the device ever complete one. */
static char fault_token;

const char *vuf_ring_fault_name(VufRingFault f)
{
    return vuf_table_name(fault_names, VUF_FAULT_COUNT, f, NULL);
}

int vuf_ring_fault_by_name(const char *name)
{
    int f;

    for (f = 0; f < VUF_FAULT_COUNT; f++) {
        if (!strcmp(fault_names[f], name)) {
            return f;
        }
    }
    return -1;
}

static bool fault_is_indirect(VufRingFault f)
{
    return f == VUF_FAULT_INDIRECT_BAD_LEN || f == VUF_FAULT_INDIRECT_NESTED ||
           f == VUF_FAULT_INDIRECT_LOOP;
}

/* A valid read of sector 0 in the scratch page: header, data, status. */
static void scratch_read_request(VufQueue *q, VufSeg segs[3])
{
    uint8_t *s = q->fault_scratch;
    uint64_t gpa = q->fault_scratch_gpa;

    *(VirtioBlkOutHdr *)s = (VirtioBlkOutHdr) { .type = VIRTIO_BLK_T_IN };
    s[SCRATCH_STATUS] = 0xff;
    segs[0] = (VufSeg) { gpa, sizeof(VirtioBlkOutHdr), false };
    segs[1] = (VufSeg) { gpa + SCRATCH_DATA, VIRTIO_BLK_SECTOR_SIZE, true };
    segs[2] = (VufSeg) { gpa + SCRATCH_STATUS, 1, true };
}

/* Faults that need no chain: the available ring itself is wrong. */
static int inject_avail_fault(VufQueue *q, VufRingFault f)
{
    if (f == VUF_FAULT_HEAD_OUT_OF_RANGE) {
        vufq_publish(q, q->num);
    } else {
        q->avail_idx += q->num + 1;
        /* Release: pairs with the device's acquire load of avail->idx. */
        atomic_store_explicit(&q->avail->idx, q->avail_idx,
                              memory_order_release);
    }
    return 0;
}

/* Spoil the direct chain at head (three descriptors). */
static void spoil_direct_chain(VufQueue *q, uint16_t head, VufRingFault f)
{
    uint16_t second = q->next[head];
    uint16_t third = q->next[second];

    if (f == VUF_FAULT_DESC_LOOP) {
        /* status -> data: both device-writable, so only a loop check (or
         * a chain length limit) can catch it. */
        q->desc[third].flags |= VRING_DESC_F_NEXT;
        q->desc[third].next = second;
    } else if (f == VUF_FAULT_NEXT_OUT_OF_RANGE) {
        q->desc[head].next = q->num;
    }
}

/* Spoil the indirect chain at head (a table of three entries). */
static void spoil_indirect_chain(VufQueue *q, uint16_t head, VufRingFault f)
{
    VRingDesc *table = q->indirect + (size_t)head * q->indirect_max;
    VRingDesc *table2 = (VRingDesc *)((uint8_t *)q->fault_scratch +
                                      SCRATCH_TABLE2);

    switch (f) {
    case VUF_FAULT_INDIRECT_BAD_LEN:
        q->desc[head].len = 3 * sizeof(VRingDesc) + 8;
        break;
    case VUF_FAULT_INDIRECT_NESTED:
        table2[0] = table[1];
        table2[0].flags &= ~VRING_DESC_F_NEXT;
        table[1] = (VRingDesc) {
            .addr = q->fault_scratch_gpa + SCRATCH_TABLE2,
            .len = sizeof(VRingDesc),
            .flags = VRING_DESC_F_INDIRECT | VRING_DESC_F_NEXT,
            .next = 2,
        };
        break;
    case VUF_FAULT_INDIRECT_LOOP:
        table[2].flags |= VRING_DESC_F_NEXT;
        table[2].next = 1;     /* status -> data, as for desc-loop */
        break;
    default:
        g_assert_not_reached();
    }
}

int vufq_inject_fault(VufQueue *q, VufRingFault f)
{
    VufSeg segs[3];
    int head;

    if (f >= VUF_FAULT_COUNT) {
        return -EINVAL;
    }
    if (!q->ready) {
        return -ENOTCONN;
    }
    if (fault_is_indirect(f) && !q->indirect_ok) {
        return -ENOTSUP;
    }
    if (!q->fault_scratch) {
        q->fault_scratch = vuf_mem_alloc(q->fe, SCRATCH_BYTES, SCRATCH_BYTES,
                                         &q->fault_scratch_gpa);
        if (!q->fault_scratch) {
            return -ENOMEM;
        }
    }
    ((uint8_t *)q->fault_scratch)[SCRATCH_STATUS] = 0xff;
    if (f == VUF_FAULT_HEAD_OUT_OF_RANGE || f == VUF_FAULT_AVAIL_IDX_JUMP) {
        inject_avail_fault(q, f);
        return vufq_kick_force(q) < 0 ? -EIO : 0;
    }

    scratch_read_request(q, segs);
    if (f == VUF_FAULT_ADDR_OUT_OF_RANGE) {
        segs[1].gpa = vuf_mem_size(q->fe) + 4096;
    } else if (f == VUF_FAULT_ADDR_OVERFLOW) {
        segs[1].gpa = UINT64_MAX - VIRTIO_BLK_SECTOR_SIZE / 2;
    }
    head = vufq_build_chain(q, segs, 3,
                            fault_is_indirect(f) ? VUFQ_ADD_INDIRECT : 0,
                            &fault_token);
    if (head < 0) {
        return head;
    }
    if (fault_is_indirect(f)) {
        spoil_indirect_chain(q, head, f);
    } else {
        spoil_direct_chain(q, head, f);
    }
    vufq_publish(q, head);
    return vufq_kick_force(q) < 0 ? -EIO : 0;
}

int vufq_fault_status(const VufQueue *q)
{
    if (!q->fault_scratch) {
        return 0xff;
    }
    return ((const uint8_t *)q->fault_scratch)[SCRATCH_STATUS];
}

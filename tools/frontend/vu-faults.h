/*
 * vu-faults: malformed rings, for tests that a back-end survives a hostile
 * guest (vu-faults.c).
 */
#ifndef SPINDLE_TOOLS_VU_FAULTS_H
#define SPINDLE_TOOLS_VU_FAULTS_H

#include "vu-types.h"

/* ------------------------------------------------------------------------ */
/* Malformed rings (the queue's thread)                                      */

/* Faults vufq_inject_fault() can put in a ring; each is a virtio-blk read
 * of one sector that is wrong in exactly one way. */
typedef enum VufRingFault {
    VUF_FAULT_HEAD_OUT_OF_RANGE,    /* avail ring entry >= queue size */
    VUF_FAULT_DESC_LOOP,            /* the last descriptor links back to
                                     * the second (same direction) */
    VUF_FAULT_ADDR_OUT_OF_RANGE,    /* data buffer beyond guest memory */
    VUF_FAULT_ADDR_OVERFLOW,        /* addr + len wraps around 2^64 */
    VUF_FAULT_NEXT_OUT_OF_RANGE,    /* next >= queue size */
    VUF_FAULT_INDIRECT_BAD_LEN,     /* indirect table length % 16 != 0 */
    VUF_FAULT_INDIRECT_NESTED,      /* INDIRECT flag inside a table */
    VUF_FAULT_INDIRECT_LOOP,        /* the same loop inside a table */
    VUF_FAULT_AVAIL_IDX_JUMP,       /* avail->idx moved by > queue size */
    VUF_FAULT_COUNT,
} VufRingFault;

/* Name ("desc-loop", ...) of a fault, and the reverse (-1 if unknown). */
const char *vuf_ring_fault_name(VufRingFault f);
int vuf_ring_fault_by_name(const char *name);

/*
 * Put fault f in the available ring and kick.  Returns 0 or -errno (as
 * vufq_add(); -ENOTSUP for an indirect fault without INDIRECT_DESC).  The
 * queue should be considered spoilt afterwards: reconnect to use it again.
 */
int vufq_inject_fault(VufQueue *q, VufRingFault f);

/* The status byte of the last injected fault's request: 0xff if the device
 * did not write it (or there was no request). */
int vufq_fault_status(const VufQueue *q);

#endif

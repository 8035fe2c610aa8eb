/*
 * Inside a split virtqueue: the VirtQueue itself and the ring sizes, for
 * the files that make up the queue (virtqueue.c: set-up, pop, push,
 * notifications, polling, start and stop; virtqueue-log.c: dirty
 * logging).  Private to hw/virtio.  The theory of operation is at the
 * top of virtqueue.c.
 */
#ifndef SPINDLE_HW_VIRTIO_VIRTQUEUE_INT_H
#define SPINDLE_HW_VIRTIO_VIRTQUEUE_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <glib.h>
#include "hw/virtio/vhost-inflight.h"
#include "hw/virtio/virtqueue.h"

/* ------------------------------------------------------------------------ */
/* Ring sizes (the layout is in hw/virtio/virtio-ring-wire.h)               */

/* Sizes of the three areas for a ring of num entries (event fields too). */
static inline uint64_t vring_desc_size(unsigned num)
{
    return (uint64_t)VRING_DESC_SIZE * num;
}

static inline uint64_t vring_avail_size(unsigned num)
{
    return 6 + 2 * (uint64_t)num;
}

static inline uint64_t vring_used_size(unsigned num)
{
    return 6 + 8 * (uint64_t)num;
}

/* ------------------------------------------------------------------------ */
/* The queue                                                                */

typedef struct VirtQueueCounters {
    _Atomic uint64_t kicks;
    _Atomic uint64_t polled;
    _Atomic uint64_t interrupts;
    _Atomic uint64_t interrupts_suppressed;
    _Atomic uint64_t requests;
} VirtQueueCounters;

struct VirtQueue {
    /* Set-up (main thread, queue stopped). */
    unsigned index;
    unsigned num;                    /* 0: not set */
    VirtQueueAddrs addrs;
    bool addrs_set;
    uint64_t features;
    _Atomic bool enabled;
    EventNotifier kick;
    EventNotifier call;
    EventNotifier err;
    AioContext *ctx;
    char name[AIO_HANDLER_NAME_SIZE];   /* "[owner/]vq<N>", the handler's
                                         * label */
    VhostInflight *inflight_region;  /* a reference, or NULL */
    unsigned inflight_index;         /* our queue part in it */
    VhostLog *log;                   /* a reference: dirty logging on;
                                      * NULL: off (home thread once
                                      * started) */

    /* Running state (home thread). */
    bool started;
    bool event_idx;                  /* VIRTIO_RING_F_EVENT_IDX negotiated */
    bool indirect;                   /* VIRTIO_RING_F_INDIRECT_DESC */
    bool polling;                    /* between io_poll_begin and _end */
    bool paused;                     /* virtqueue_set_paused(): no handler
                                      * runs, polling and pop find
                                      * nothing */
    bool notify_pending;             /* notify_bh is scheduled */
    bool signalled_valid;            /* signalled_used means something */
    uint16_t last_avail_idx;         /* next avail entry to pop */
    uint16_t used_idx;               /* next used entry to fill */
    uint16_t signalled_used;         /* used_idx at the last notify check */
    uint16_t used_flags;             /* what we last stored in used->flags */
    VhostInflightTrack track;        /* .q NULL: no inflight tracking */
    uint16_t *resubmit;              /* heads to pop before the avail ring */
    unsigned resubmit_pos;           /* the next of them to pop */
    unsigned resubmit_n;
    GuestMemory *mem;
    GPtrArray *retired;              /* old tables kept for in-flight elems */
    const VRingDesc *desc;
    VRingAvail *avail;
    VRingUsed *used;
    _Atomic uint16_t *used_event;    /* in the avail ring, after ring[num] */
    _Atomic uint16_t *avail_event;   /* in the used ring, after ring[num] */
    VirtQueueHandler *handler;
    void *opaque;
    QEMUBH *notify_bh;
    QEMUBH *kick_bh;

    /* Written by the home thread, readable anywhere. */
    _Atomic unsigned resubmitted;    /* by the last start */
    _Atomic unsigned inflight;
    _Atomic bool broken;
    VirtQueueCounters stats;
};

static inline void virtqueue_assert_home(const VirtQueue *vq)
{
    g_assert(vq->ctx && aio_context_in_home_thread(vq->ctx));
}

/* ------------------------------------------------------------------------ */
/* Dirty logging (virtqueue-log.c), home thread                              */

/*
 * The in iovecs [from, to) of elem were just mapped from one descriptor
 * at guest address gpa: record where each starts.  Pop calls it only
 * while the queue has a log.
 */
static inline void virtqueue_record_in_gpa(VirtQueueElement *elem,
                                           unsigned from, unsigned to,
                                           uint64_t gpa)
{
    for (unsigned i = from; i < to; i++) {
        elem->in_gpa[i] = gpa;
        gpa += elem->in_sg[i].iov_len;
    }
}

/*
 * Mark what pushing elem with len bytes written writes into guest memory
 * (virtqueue_push(), or virtqueue_push_status_last() with status_last):
 * the in buffers' bytes, then the used ring.  vq->log is set.
 */
void virtqueue_log_push(VirtQueue *vq, const VirtQueueElement *elem,
                        uint32_t len, bool status_last);

/* Mark the whole used ring if the ring logs it (VHOST_VRING_F_LOG);
 * vq->log is set and the rings are mapped. */
void virtqueue_log_used(VirtQueue *vq);

#endif

/*
 * Split virtqueues (virtio 1.x, section 2.7), back-end side.
 *
 * A VirtQueue lives in one AioContext (its IOThread).  When started it
 * registers its kick eventfd in that context as a pollable handler:
 *   io_poll        reads avail->idx (a plain load) and compares it with the
 *                  next index to pop;
 *   io_poll_begin  suppresses guest kicks (VRING_USED_F_NO_NOTIFY, or with
 *                  EVENT_IDX stops advancing avail_event);
 *   io_poll_end    re-enables them; the loop then fences and polls again.
 * and calls the device's handler when there is work.
 *
 * The device pops elements (a descriptor chain mapped to iovecs pointing
 * into guest memory, zero copy), processes them, pushes them back with the
 * number of bytes written, and the queue signals the call eventfd at most
 * once per loop turn (a BH), and only if the driver asked for it
 * (VRING_AVAIL_F_NO_INTERRUPT, or used_event with EVENT_IDX).
 *
 * Guest input is untrusted: every index, length, address and chain is
 * checked.  A violation marks the queue broken (it stops processing and
 * logs why once); nothing else is affected.
 *
 * Threads: set-up (virtqueue_set_*) in the main thread while the queue is
 * stopped; start/stop/pop/push in the queue's home thread.
 */
#ifndef SPINDLE_HW_VIRTIO_VIRTQUEUE_H
#define SPINDLE_HW_VIRTIO_VIRTQUEUE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>
#include "hw/virtio/guest-memory.h"
#include "hw/virtio/vhost-inflight.h"
#include "hw/virtio/vhost-log.h"
#include "hw/virtio/vhost-user-wire.h"
#include "hw/virtio/virtio-ring-wire.h"
#include "util/aio.h"
#include "util/event-notifier.h"

#define VIRTQUEUE_MAX_SIZE 1024

/* Most iovecs one element may carry (in + out).  seg_max for devices. */
#define VIRTQUEUE_MAX_SEGS 128

typedef struct VirtQueue VirtQueue;

typedef struct VirtQueueElement {
    uint16_t head;               /* first descriptor of the chain */
    uint16_t out_num;            /* driver -> device buffers */
    uint16_t in_num;             /* device -> driver buffers */
    uint32_t in_bytes;           /* total length of the in buffers */
    /* Length of the chain's last device-writable descriptor: 0 when it
     * has none or that descriptor is empty (which adds no iovec). */
    uint32_t in_last_len;
    /* Popped while the queue had a dirty log: in_gpa[i] is the guest
     * physical address of in_sg[i] (otherwise in_gpa is not filled). */
    bool in_gpa_valid;
    struct iovec out_sg[VIRTQUEUE_MAX_SEGS];
    struct iovec in_sg[VIRTQUEUE_MAX_SEGS];
    uint64_t in_gpa[VIRTQUEUE_MAX_SEGS];
} VirtQueueElement;

/* Called in the queue's home thread when the queue may have work. */
typedef void VirtQueueHandler(VirtQueue *vq, void *opaque);

/* Ring addresses as SET_VRING_ADDR gives them (front-end addresses). */
typedef struct VirtQueueAddrs {
    uint64_t desc_qva;
    uint64_t avail_qva;
    uint64_t used_qva;
    uint64_t log_gpa;            /* the used ring's guest address */
    uint32_t flags;              /* VHOST_VRING_F_LOG: log the used ring */
} VirtQueueAddrs;

/* ------------------------------------------------------------------------ */
/* Set-up (main thread, queue stopped)                                       */

VirtQueue *virtqueue_new(unsigned index);
void virtqueue_free(VirtQueue *vq);

/*
 * Name the queue after its owner (the export id) for the event loop's
 * statistics: "OWNER/vqN" (truncated to fit), or "vqN" with owner NULL or
 * empty (the default).
 */
void virtqueue_set_owner(VirtQueue *vq, const char *owner);

unsigned virtqueue_index(const VirtQueue *vq);

/* Ring size: a power of two from 1 to VIRTQUEUE_MAX_SIZE.  -EINVAL else. */
int virtqueue_set_num(VirtQueue *vq, unsigned num);
/* Next avail index to process (and used index: they start equal). */
void virtqueue_set_base(VirtQueue *vq, uint16_t base);
void virtqueue_set_addrs(VirtQueue *vq, const VirtQueueAddrs *addrs);
/*
 * Take ownership of the fds (-1: none).  The call and error fds may also
 * be changed on a started queue, from its home thread.  A new call fd is
 * signalled once at once, started queue or not (see virtqueue.c).
 */
void virtqueue_set_kick_fd(VirtQueue *vq, int fd);
void virtqueue_set_call_fd(VirtQueue *vq, int fd);
void virtqueue_set_err_fd(VirtQueue *vq, int fd);
void virtqueue_set_features(VirtQueue *vq, uint64_t features);
/*
 * Track the queue's requests in queue part index of region from its next
 * start (NULL: no tracking, the default), taking a reference on region
 * and dropping the one on the region before.  At that start the region
 * decides the used and next avail indexes and the requests a dead
 * process left are popped first (virtqueue_start()).  Main thread, queue
 * stopped with nothing in flight; index < vhost_inflight_num_queues().
 */
void virtqueue_set_inflight(VirtQueue *vq, VhostInflight *region,
                            unsigned index);
/*
 * Dirty logging (live migration).  With a log, the queue marks in it
 * every guest page it and its device write: the part of each element's
 * in buffers that push reports written, and, when the ring's addresses
 * carry VHOST_VRING_F_LOG, the whole used ring at its log_gpa; all of an
 * element's marks are made before its used index is published.  log
 * NULL stops logging (the default).  A reference is taken on log and the
 * one on the log before is dropped.  On a started queue: its home thread
 * (elements in flight that were popped before are logged too, slower,
 * from their host addresses); on a stopped one: the main thread, with
 * nothing in flight.  Turning logging on marks the used ring at once.
 */
void virtqueue_set_log(VirtQueue *vq, VhostLog *log);

/*
 * Change only the used ring's logging of the addresses set: flags
 * (VHOST_VRING_F_LOG) and log_gpa, as a front-end does on a running ring
 * to start and end a migration.  Same threads as virtqueue_set_log().
 */
void virtqueue_set_log_used(VirtQueue *vq, uint32_t flags, uint64_t log_gpa);

/* Only recorded (any thread): the caller starts/stops enabled queues. */
void virtqueue_set_enabled(VirtQueue *vq, bool enabled);
bool virtqueue_is_enabled(const VirtQueue *vq);
/* Whether num, addresses and the kick fd are all set. */
bool virtqueue_is_ready(const VirtQueue *vq);
/* The queue's home context (set before start). */
void virtqueue_set_aio_context(VirtQueue *vq, AioContext *ctx);
AioContext *virtqueue_get_aio_context(const VirtQueue *vq);

/* ------------------------------------------------------------------------ */
/* Running (home thread)                                                     */

/*
 * Translate the ring addresses with mem (a reference is taken), register
 * the kick handler, and call handler when there is work.  With an
 * inflight region (virtqueue_set_inflight()), first resume from it
 * (vhost_inflight_resume() with used->idx read from guest memory): the
 * used index becomes used->idx, the next avail index used->idx plus the
 * requests still marked, and pop returns those first, in the order they
 * were first popped.  Returns -EFAULT if the rings are not inside guest
 * memory, -EPROTO if the region does not fit the ring (too few entries,
 * hostile contents; the queue is broken in both cases, why logged), or
 * -EINVAL if the queue is not ready (virtqueue_is_ready()).
 */
int virtqueue_start(VirtQueue *vq, GuestMemory *mem, VirtQueueHandler *handler,
                    void *opaque);

/*
 * Unregister the kick handler.  Requests already popped stay the device's
 * to finish (push) before the last avail index is read for GET_VRING_BASE.
 * Returns the next avail index to process.  On a queue that is not started
 * it only returns that index.  Elements pushed after stop (the device
 * draining) still go to the used ring, each signalled at once if the
 * driver wants an interrupt.
 */
uint16_t virtqueue_stop(VirtQueue *vq);

bool virtqueue_is_started(const VirtQueue *vq);

/*
 * Pause a started queue: its handler is not called (kicks are still
 * cleared and counted), polling finds no work and pop returns 0 (so a
 * handler that pauses the queue leaves its pop loop), until it is
 * unpaused; then the handler runs once soon (a BH) for the entries
 * published meanwhile.  For a device that must take no new request for a while
 * (an error policy holding failed requests).  A stop unpauses.  Home
 * thread.
 */
void virtqueue_set_paused(VirtQueue *vq, bool paused);

/* Requests the last virtqueue_start() found in the inflight region and
 * pops first (0 without a region).  Any thread. */
unsigned virtqueue_resubmitted(const VirtQueue *vq);

/*
 * Swap the guest memory table of a started queue (re-translates rings;
 * a reference on mem is taken).  Elements in flight keep the old table
 * alive until they are pushed.  Home thread.  A stopped queue ignores it
 * (virtqueue_start() takes the table).  -EFAULT if the rings are not in
 * mem (the queue is then broken).
 */
int virtqueue_set_memory(VirtQueue *vq, GuestMemory *mem);

/*
 * Pop the next element into elem.  1: popped; 0: the ring is empty (or
 * the queue is paused);
 * -EIO: the ring or chain is malformed (the queue is now broken).
 */
int virtqueue_pop(VirtQueue *vq, VirtQueueElement *elem);

/*
 * Return elem to the driver with len bytes written into its in buffers
 * (at their start: the bytes a dirty log marks), and arrange for the call eventfd to be signalled at the end of the loop
 * turn if the driver wants an interrupt.
 */
void virtqueue_push(VirtQueue *vq, const VirtQueueElement *elem, uint32_t len);

/*
 * virtqueue_push() for a device whose status is the very last byte of the
 * in buffers (virtio-blk): len counts it, and the other len - 1 bytes
 * written are at the start of the in buffers.  The same but for what a
 * dirty log marks.  len >= 1 and elem->in_bytes >= 1.
 */
void virtqueue_push_status_last(VirtQueue *vq, const VirtQueueElement *elem,
                                uint32_t len);

/*
 * Give elem up and break the queue: for a request the driver built so
 * that no honest answer fits in it (no room for its status or response).
 * elem is not returned to the driver (nothing goes to the used ring); as
 * for a malformed chain, why is logged once, the error eventfd signalled
 * and pop returns -EIO from then on.  Elements in flight may still be
 * pushed.  Home thread.
 */
void G_GNUC_PRINTF(3, 4) virtqueue_fail_element(VirtQueue *vq,
                                                const VirtQueueElement *elem,
                                                const char *fmt, ...);

/* Elements popped and not pushed yet. */
unsigned virtqueue_inflight(const VirtQueue *vq);

bool virtqueue_is_broken(const VirtQueue *vq);

/* Statistics: kicks received, interrupts sent, elements processed. */
typedef struct VirtQueueStats {
    uint64_t kicks;
    uint64_t polled;             /* times the poll callback found work */
    uint64_t interrupts;
    uint64_t interrupts_suppressed;
    uint64_t requests;
} VirtQueueStats;
void virtqueue_get_stats(const VirtQueue *vq, VirtQueueStats *out);

#endif

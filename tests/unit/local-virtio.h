/*
 * In-process virtio devices for the device test programs (test-virtqueue.c,
 * test-virtio-blk.c, test-virtio-scsi.c): the guest driver is the
 * front-end library's (tools/frontend, the one spindle-bench and
 * spindle-vu-client use), started without a socket (vuf_start_local());
 * the device's VirtQueues are set up over its rings as the vhost-user
 * server would set them up from the front-end's messages.
 *
 * - LocalMem: the library's VuFrontend (guest memory and queues) and the
 *   GuestMemory the device translates through (one region at guest
 *   address 0, front-end address qva: deliberately not the test's own
 *   mapping, so that a device using the wrong address faults).
 * - LocalQueue: queue i of both sides.  The test adds chains
 *   (lq_add_chain()), makes them available and kicks (lq_publish()), and
 *   reads used entries (lq_next_used()); the device's VirtQueue runs in the
 *   queue's AioContext with the device's VuDevOps callbacks.
 *
 * Every helper fails the running test (g_assert) rather than returning an
 * error.  The driver side (everything but the start/stop work, which runs
 * in the queue's context) runs in the test's thread.
 */
#ifndef TESTS_UNIT_LOCAL_VIRTIO_H
#define TESTS_UNIT_LOCAL_VIRTIO_H

#include <stdbool.h>
#include <stdint.h>

#include "hw/virtio/guest-memory.h"
#include "hw/virtio/vhost-user-server.h"
#include "hw/virtio/virtqueue.h"
#include "util/aio.h"
#include "vu-frontend.h"
#include "vu-raw.h"

/* Entries of every ring. */
#define LOCAL_RING_NUM      64

/* ------------------------------------------------------------------------ */
/* Guest memory                                                              */

typedef struct LocalMem {
    VuFrontend *fe;              /* the driver: memory, rings, eventfds */
    uint64_t qva;                /* the front-end address of guest address 0 */
    GuestMemory *mem;            /* what the device's queues use */
} LocalMem;

/*
 * A front-end with opts' guest memory and queues, in a local session with
 * features negotiated (opts->socket_path is set here: it is never
 * connected).  Free with vuf_free().
 */
VuFrontend *local_frontend_new(VufOptions *opts, uint64_t features);

/*
 * The device's view of fe's guest memory: the regions r[0..n) of its
 * memfd (each mmap_offset a file offset).  The caller owns the reference.
 */
GuestMemory *local_guest_memory(VuFrontend *fe, const GuestMemRegionDesc *r,
                                unsigned n);

/*
 * A front-end with size bytes of guest memory (a multiple of 4096, at
 * least 1 MiB) and nqueues queues of LOCAL_RING_NUM entries, in a local
 * session with features negotiated; and the device's view of its memory,
 * at front-end address qva.  Free with lmem_cleanup().
 */
void lmem_init(LocalMem *m, uint64_t size, unsigned nqueues, uint64_t qva,
               uint64_t features);

/* Drop the GuestMemory reference and free the front-end. */
void lmem_cleanup(LocalMem *m);

/* The test's pointer to guest address gpa (which must be inside). */
void *lmem_ptr(LocalMem *m, uint64_t gpa);

/* len bytes of guest memory (64-byte aligned) from the front-end's
 * allocator, freed with the front-end; returns the guest address. */
uint64_t lmem_alloc(LocalMem *m, size_t len);

/*
 * Give a device's queue vq what the front-end's queue fq would send over
 * vhost-user: size, ring addresses (front-end addresses: qva + guest
 * address), dups of the kick, call and error eventfds, features and ctx;
 * and enable it (not started).  The call eventfd's first signal (sent as
 * it is set) is taken; vufq_error_signalled(fq) tells whether the device
 * broke the queue.
 */
void local_vq_configure(VirtQueue *vq, VufQueue *fq, uint64_t qva,
                        uint64_t features, AioContext *ctx);

/* ------------------------------------------------------------------------ */
/* Queues                                                                    */

typedef struct LocalQueue {
    LocalMem *m;
    VufQueue *fq;                /* the driver's queue */
    VirtQueue *vq;               /* the device's queue */
    AioContext *ctx;             /* where vq runs */
    const VuDevOps *ops;         /* the device's callbacks, and their dev */
    void *dev;
    bool started;
} LocalQueue;

/*
 * Set up queue index of device dev (ops): its VirtQueue gets the
 * front-end's queue index (local_vq_configure()), with features and ctx.
 */
void lq_init(LocalQueue *q, LocalMem *m, unsigned index, AioContext *ctx,
             uint64_t features, const VuDevOps *ops, void *dev);

/*
 * Start the VirtQueue in its context (virtqueue_start() with the device's
 * handler, then ops->queue_started), waiting until that is done.
 */
void lq_start(LocalQueue *q);

/*
 * If started: stop the VirtQueue in its context and let the device drain
 * it (ops->queue_drain), asserting that nothing is left in flight.
 */
void lq_stop(LocalQueue *q);

/* Free the (stopped) VirtQueue. */
void lq_cleanup(LocalQueue *q);

/*
 * Add segs[0..n) as one chain (vufq_add_unpublished()); returns its head.
 * Does not make it available.
 */
uint16_t lq_add_chain(LocalQueue *q, const VufSeg *segs, unsigned n);

/* Make head available to the device; kick the queue's eventfd if kick. */
void lq_publish(LocalQueue *q, uint16_t head, bool kick);

/*
 * The next used entry the device pushed, if any: true with its id (head)
 * and length in *id and *len (either may be NULL), false if there is none
 * (yet).
 */
bool lq_next_used(LocalQueue *q, uint32_t *id, uint32_t *len);

#endif

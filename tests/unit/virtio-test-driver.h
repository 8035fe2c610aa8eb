/*
 * A minimal virtio driver for the device test programs (test-virtio-blk.c,
 * test-virtio-scsi.c): guest memory and the driver's side of split
 * virtqueues, with the device's VirtQueues set up over them as the
 * vhost-user server would (no socket).
 *
 * - DrvMem: "guest memory", a memfd mapped once into the test, and the
 *   GuestMemory the device translates through (one region at guest
 *   address 0, front-end address qva).
 * - DrvQueue: one queue.  Its ring is at a guest address of the test's
 *   choosing: the descriptor table at +0, the avail ring at +0x400, the
 *   used ring at +0x800 (so DRV_RING_NUM entries fit in 4 KiB).  The test
 *   writes descriptor chains (drvq_add_chain()), makes them available and
 *   kicks (drvq_publish()), and reads used entries (drvq_next_used()); the
 *   device's VirtQueue runs in the queue's AioContext with the device's
 *   VuDevOps callbacks.
 *
 * Every helper fails the running test (g_assert) rather than returning an
 * error.  The driver side (everything but the start/stop work, which runs
 * in the queue's context) runs in the test's thread.
 */
#ifndef TESTS_UNIT_VIRTIO_TEST_DRIVER_H
#define TESTS_UNIT_VIRTIO_TEST_DRIVER_H

#include <stdbool.h>
#include <stdint.h>

#include "hw/virtio/guest-memory.h"
#include "hw/virtio/vhost-user-server.h"
#include "hw/virtio/virtqueue.h"
#include "util/aio.h"
#include "util/event-notifier.h"

/* Entries of every ring. */
#define DRV_RING_NUM        64
/* Descriptor flags (the split ring's VIRTQ_DESC_F_*). */
#define DRV_DESC_F_NEXT     1
#define DRV_DESC_F_WRITE    2

/* ------------------------------------------------------------------------ */
/* Guest memory                                                              */

typedef struct DrvMem {
    int memfd;
    uint8_t *map;                /* the test's mapping, guest address 0 */
    uint64_t size;
    uint64_t qva;                /* the front-end address of guest address 0 */
    GuestMemory *mem;            /* what the device's queues use */
} DrvMem;

/*
 * size bytes of zeroed guest memory in a memfd named name (for
 * /proc/PID/fd), mapped at front-end address qva.  Free with
 * drvmem_cleanup().
 */
void drvmem_init(DrvMem *m, const char *name, uint64_t size, uint64_t qva);

/* Drop the GuestMemory reference, unmap and close. */
void drvmem_cleanup(DrvMem *m);

/* The test's pointer to guest address gpa (which must be inside). */
void *drvmem_ptr(DrvMem *m, uint64_t gpa);

/* ------------------------------------------------------------------------ */
/* Queues                                                                    */

/* One descriptor: len bytes at gpa, device-writable if write. */
typedef struct DrvBuf {
    uint64_t gpa;
    uint32_t len;
    bool write;
} DrvBuf;

typedef struct DrvQueue {
    DrvMem *m;
    VirtQueue *vq;               /* the device's queue */
    AioContext *ctx;             /* where vq runs */
    const VuDevOps *ops;         /* the device's callbacks, and their dev */
    void *dev;
    EventNotifier kick, call;
    uint64_t gpa;                /* ring: desc +0, avail +0x400, used +0x800 */
    uint16_t avail_idx;          /* the driver's avail->idx */
    uint16_t last_used;          /* used entries read so far */
    unsigned next_desc;          /* descriptors are used round-robin */
    bool started;
} DrvQueue;

/*
 * Set up queue index of device dev (ops) with its ring at gpa in m: the
 * VirtQueue gets DRV_RING_NUM entries, the ring addresses, fds for kick
 * and call, the negotiated features and ctx, and is enabled (not
 * started).
 */
void drvq_init(DrvQueue *q, DrvMem *m, unsigned index, uint64_t gpa,
               AioContext *ctx, uint64_t features, const VuDevOps *ops,
               void *dev);

/*
 * Start the VirtQueue in its context (virtqueue_start() with the device's
 * handler, then ops->queue_started), waiting until that is done.
 */
void drvq_start(DrvQueue *q);

/*
 * If started: stop the VirtQueue in its context and let the device drain
 * it (ops->queue_drain), asserting that nothing is left in flight.
 */
void drvq_stop(DrvQueue *q);

/* Free the (stopped) VirtQueue and the queue's event notifiers. */
void drvq_cleanup(DrvQueue *q);

/*
 * Write b[0..n) as one chain into the next free descriptors (chained with
 * DRV_DESC_F_NEXT); returns its head.  Does not make it available.
 */
uint16_t drvq_add_chain(DrvQueue *q, const DrvBuf *b, unsigned n);

/* Make head available to the device; kick the queue's eventfd if kick. */
void drvq_publish(DrvQueue *q, uint16_t head, bool kick);

/*
 * The next used entry the device pushed, if any: true with its id (head)
 * and length in *id and *len (either may be NULL), false if there is none
 * (yet).
 */
bool drvq_next_used(DrvQueue *q, uint32_t *id, uint32_t *len);

#endif

/*
 * What the virtio block devices share to apply the `stop` error policy
 * (include/block/error-policy.h) to a queue.
 *
 * Each queue has a VirtioStop: the requests it holds (VirtioHeld, in the
 * device's request), sorted by their sequence number (the order they were
 * taken from the ring), and whether it is stopped.  virtio_stop_hold()
 * adds one; the first one pauses the virtqueue (it takes no new request)
 * and tells the main thread with virtio_io_error_notify(): the event
 * carries copies of what it needs, so the device may go away before it is
 * delivered.  A resume (virtio_stop_resume(), from the main thread) runs
 * the device's retry function in the queue's thread: virtio_stop_take()
 * hands back the held requests in order and ends the stop, the device
 * submits them again, and virtio_stop_restart() unpauses the virtqueue
 * unless one of them failed at once and stopped it again.
 */
#ifndef SPINDLE_HW_VIRTIO_VIRTIO_IO_ERROR_H
#define SPINDLE_HW_VIRTIO_VIRTIO_IO_ERROR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "block/error-policy.h"
#include "hw/virtio/virtqueue.h"
#include "util/aio.h"

/* A stop, as the main thread learns of it (BLOCK_IO_ERROR). */
typedef struct VirtioIoError {
    const char *export_id;       /* the export whose device stopped */
    const char *node_name;       /* the node that failed the request */
    unsigned queue;              /* the virtqueue that stopped */
    int lun;                     /* virtio-scsi: the LUN; else -1 */
    bool write;                  /* anything but a read */
    int error;                   /* positive errno */
} VirtioIoError;

/* Called in the main thread with e (valid for the call only). */
typedef void VirtioIoErrorFn(const VirtioIoError *e);

/*
 * From a queue's thread: have fn(e) called in main_ctx's thread soon,
 * with copies of e's strings (fn NULL: nothing).  Allocates; for the
 * error path only.
 */
void virtio_io_error_notify(AioContext *main_ctx, VirtioIoErrorFn *fn,
                            const VirtioIoError *e);

/* A request held by a stop (a member of the device's request). */
typedef struct VirtioHeld {
    struct VirtioHeld *next;
    uint64_t seq;                /* set by the device: the list's order */
} VirtioHeld;

/* The device's: retry what virtio_stop_take() returns on queue, then
 * (with restart: a resume) virtio_stop_restart(); returns how many it
 * submitted.  Home thread. */
typedef unsigned VirtioStopRetryFn(void *queue, bool restart);

/* One queue's stop.  Its home thread, except `seen` and `ctx`. */
typedef struct VirtioStop {
    VirtioHeld *held;            /* by seq */
    bool stopped;
    bool draining;               /* the device reports errors instead: the
                                  * front-end is taking the ring back */
    _Atomic bool seen;           /* stopped, for other threads */
    VirtioStopRetryFn *retry;    /* fixed by virtio_stop_init() */
    void *queue;
    unsigned retried;            /* what retry returned, for the main
                                  * thread in virtio_stop_all() (its
                                  * aio_run_sync() orders the accesses) */
    /* The queue's home once it started (it never changes): release in
     * virtio_stop_set_context(), acquire in virtio_stop_resume(). */
    _Atomic(AioContext *) ctx;
} VirtioStop;

/* A new queue's stop: not stopped, retried by retry(queue).  Main
 * thread, before the queue starts. */
void virtio_stop_init(VirtioStop *s, VirtioStopRetryFn *retry, void *queue);

/* The queue starts in ctx (always the same one).  Home thread. */
void virtio_stop_set_context(VirtioStop *s, AioContext *ctx);

/*
 * Hold h (its seq set) on s.  The first one stops s: vq is paused and e
 * goes to fn in main_ctx's thread (virtio_io_error_notify()).  Home
 * thread.
 */
void virtio_stop_hold(VirtioStop *s, VirtioHeld *h, VirtQueue *vq,
                      AioContext *main_ctx, VirtioIoErrorFn *fn,
                      const VirtioIoError *e);

/* End s's stop and return what it held, in order (NULL: it was not
 * stopped).  Home thread. */
VirtioHeld *virtio_stop_take(VirtioStop *s);

/* After the retries of what virtio_stop_take() returned: unpause vq
 * unless s stopped again.  Home thread. */
void virtio_stop_restart(VirtioStop *s, VirtQueue *vq);

/* Whether s is stopped.  Any thread. */
bool virtio_stop_is_stopped(VirtioStop *s);

/*
 * For the n queues of a device, whose structs are stride bytes apart and
 * hold their VirtioStop at the same place (first: the first queue's):
 * with resume, run the retry of each stopped queue in its home thread and
 * wait for it (aio_run_sync()), returning how many requests were
 * submitted again; else count the stopped queues.  Main thread to resume,
 * any thread to count.
 */
unsigned virtio_stop_all(VirtioStop *first, size_t stride, unsigned n,
                         bool resume);

#endif

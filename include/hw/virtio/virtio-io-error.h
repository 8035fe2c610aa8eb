/*
 * Error policies of the virtio block devices (QEMU's rerror / werror):
 * what a device does when the node fails one of its requests.
 *
 *   report  the guest gets the error (an I/O error status or sense); the
 *           default, and what the devices always did
 *   ignore  the request completes as if it had succeeded: a read leaves
 *           whatever was in the buffer, a write may be lost (dangerous:
 *           only for tests and for data nobody needs)
 *   enospc  stop on ENOSPC (a full thin-provisioned image), report others
 *   stop    hold the request and stop the queue until the export is
 *           resumed (block-export-resume); then the held requests are
 *           tried again, in the order they were taken from the ring
 *
 * A device that stops tells the main thread with
 * virtio_io_error_notify(): the event carries copies of what it needs,
 * so the device may go away before it is delivered.  Requests the node
 * answers ENOTSUP (an operation the node lacks) are not errors of the
 * policy's kind: they are reported as unsupported, whatever the policy.
 *
 * Threads: the tables and virtio_io_error_action() are for any thread.
 */
#ifndef SPINDLE_HW_VIRTIO_VIRTIO_IO_ERROR_H
#define SPINDLE_HW_VIRTIO_VIRTIO_IO_ERROR_H

#include <errno.h>
#include <stdbool.h>
#include "util/aio.h"

typedef enum VirtioErrorPolicy {
    VIRTIO_ERROR_POLICY_REPORT,  /* 0: the default */
    VIRTIO_ERROR_POLICY_IGNORE,
    VIRTIO_ERROR_POLICY_ENOSPC,
    VIRTIO_ERROR_POLICY_STOP,
} VirtioErrorPolicy;

/* The policies' option values, by VirtioErrorPolicy, NULL-terminated (for
 * opts_get_enum()). */
extern const char *const virtio_error_policy_names[];

typedef enum VirtioErrorAction {
    VIRTIO_ERROR_ACTION_REPORT,
    VIRTIO_ERROR_ACTION_IGNORE,
    VIRTIO_ERROR_ACTION_STOP,
} VirtioErrorAction;

/* What policy says to do with a request that failed with ret (< 0). */
static inline VirtioErrorAction virtio_io_error_action(VirtioErrorPolicy p,
                                                       int ret)
{
    if (ret == -ENOTSUP || ret == -EOPNOTSUPP) {
        return VIRTIO_ERROR_ACTION_REPORT;
    }
    switch (p) {
    case VIRTIO_ERROR_POLICY_IGNORE:
        return VIRTIO_ERROR_ACTION_IGNORE;
    case VIRTIO_ERROR_POLICY_STOP:
        return VIRTIO_ERROR_ACTION_STOP;
    case VIRTIO_ERROR_POLICY_ENOSPC:
        return ret == -ENOSPC ? VIRTIO_ERROR_ACTION_STOP
                              : VIRTIO_ERROR_ACTION_REPORT;
    default:
        return VIRTIO_ERROR_ACTION_REPORT;
    }
}

/* A stop, as the main thread learns of it (BLOCK_IO_ERROR). */
typedef struct VirtioIoError {
    const char *export_id;       /* the export whose device stopped */
    const char *node_name;       /* the node that failed the request */
    unsigned queue;              /* the virtqueue that stopped */
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

#endif

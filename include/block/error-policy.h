/*
 * Error policies of the devices that serve nodes (QEMU's rerror / werror):
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
 * Requests the node answers ENOTSUP (an operation the node lacks) are not
 * errors of the policy's kind: they are reported as unsupported, whatever
 * the policy.  The devices apply the policies (hw/virtio/virtio-blk.c,
 * hw/scsi/scsi-disk.c); hw/virtio/virtio-io-error.h tells the main thread
 * about a stop.  Header only; any thread.
 */
#ifndef SPINDLE_BLOCK_ERROR_POLICY_H
#define SPINDLE_BLOCK_ERROR_POLICY_H

#include <errno.h>

typedef enum BlockErrorPolicy {
    BLOCK_ERROR_POLICY_REPORT,   /* 0: the default */
    BLOCK_ERROR_POLICY_IGNORE,
    BLOCK_ERROR_POLICY_ENOSPC,
    BLOCK_ERROR_POLICY_STOP,
} BlockErrorPolicy;

typedef enum BlockErrorAction {
    BLOCK_ERROR_ACTION_REPORT,
    BLOCK_ERROR_ACTION_IGNORE,
    BLOCK_ERROR_ACTION_STOP,
} BlockErrorAction;

/* What policy says to do with a request that failed with ret (< 0). */
static inline BlockErrorAction block_error_action(BlockErrorPolicy p, int ret)
{
    if (ret == -ENOTSUP || ret == -EOPNOTSUPP) {
        return BLOCK_ERROR_ACTION_REPORT;
    }
    switch (p) {
    case BLOCK_ERROR_POLICY_IGNORE:
        return BLOCK_ERROR_ACTION_IGNORE;
    case BLOCK_ERROR_POLICY_STOP:
        return BLOCK_ERROR_ACTION_STOP;
    case BLOCK_ERROR_POLICY_ENOSPC:
        return ret == -ENOSPC ? BLOCK_ERROR_ACTION_STOP
                              : BLOCK_ERROR_ACTION_REPORT;
    default:
        return BLOCK_ERROR_ACTION_REPORT;
    }
}

#endif

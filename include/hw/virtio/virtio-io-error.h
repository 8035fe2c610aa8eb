/*
 * A device whose error policy (include/block/error-policy.h) stopped a
 * queue tells the main thread with virtio_io_error_notify(): the event
 * carries copies of what it needs, so the device may go away before it
 * is delivered.
 */
#ifndef SPINDLE_HW_VIRTIO_VIRTIO_IO_ERROR_H
#define SPINDLE_HW_VIRTIO_VIRTIO_IO_ERROR_H

#include <stdbool.h>
#include "block/error-policy.h"
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

#endif

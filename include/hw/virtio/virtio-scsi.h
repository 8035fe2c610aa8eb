/*
 * virtio-scsi device (virtio 1.x, section 5.6): one target (target 0) with
 * LUNs backed by ScsiDisks, served through a VuServer.
 *
 * Queues: 0 is the control queue (task management, asynchronous
 * notification queries), 1 the event queue, 2.. the request queues.  The
 * VuServer is created with num_queues + 2 queues and places them on its
 * contexts round-robin, like virtio-blk's; every context that runs a
 * request queue gets a BlockQueue per LUN when the queue starts.
 *
 * Commands are validated before anything runs (request and response
 * headers present, directions, LUN addressing): a malformed chain is
 * logged and answered with the best response the buffers allow, or handed
 * back untouched when there is nowhere to write one; it never breaks other
 * queues.  Commands to a LUN that does not exist get BAD_TARGET (other
 * targets) or CHECK CONDITION, LOGICAL UNIT NOT SUPPORTED (other LUNs of
 * target 0), except INQUIRY, which answers "no device" (peripheral
 * qualifier 3) so the guest's scan finds exactly the configured LUNs, and
 * REPORT LUNS, which lists them.
 *
 * A command the disk does not run because the buffers do not fit it
 * (ScsiXferError) is answered VIRTIO_SCSI_S_OVERRUN when a buffer is too
 * small for the transfer, VIRTIO_SCSI_S_FAILURE when its data goes in the
 * direction the command does not use (a driver error, like data in both
 * directions without VIRTIO_SCSI_F_INOUT, which is not offered).
 *
 * Config space: num_queues, seg_max VIRTQUEUE_MAX_SEGS - 2, max_sectors
 * 0xffff, cmd_per_lun the queue size, event_info_size 16, max_channel 0,
 * max_target 0, max_lun VIRTIO_SCSI_MAX_LUN.  The driver may write
 * sense_size (0..256) and cdb_size (6..256), whole fields; other writes
 * and values are refused (-EINVAL).  Each command uses the values in
 * force when it is popped; they last until written again (VuDevOps has no
 * device-reset callback to restore the defaults, 96 and 32).
 *
 * Task management: ABORT TASK and ABORT TASK SET / CLEAR TASK SET wait for
 * the affected commands to finish (block requests cannot be recalled),
 * answer those commands with VIRTIO_SCSI_S_ABORTED, then complete the TMF;
 * LOGICAL UNIT RESET and I_T NEXUS RESET do the same for a LUN / all LUNs,
 * answering the commands with VIRTIO_SCSI_S_RESET (5.6.6.1: cancelled by
 * a reset), and then raise the reset unit attention; QUERY TASK and QUERY
 * TASK SET answer FUNCTION_SUCCEEDED when a matching command is in
 * flight, else FUNCTION_COMPLETE; CLEAR ACA and unknown subtypes are
 * rejected (FUNCTION_REJECTED); another target gets BAD_TARGET, a LUN
 * that does not exist INCORRECT_LUN.  Commands the driver queued before
 * the TMF count even if they were still in the ring.  A TMF completes
 * after every command it affected has been pushed.  AN query/subscribe
 * answer with no events supported (event_actual 0).
 *
 * Events: with VIRTIO_SCSI_F_CHANGE negotiated, virtio_scsi_capacity_
 * changed() queues a PARAM_CHANGE event (CAPACITY DATA HAS CHANGED) in
 * the event queue.  An event that finds no driver buffer is lost, and the
 * next buffer the driver gives comes back at once as NO_EVENT with
 * EVENTS_MISSED set.
 *
 * LUN hot-plug: LUNs may be added and removed at any time, also while the
 * queues run.  Each request queue and the control queue keep their own
 * copy of the LUN table, changed in their own thread (aio_run_sync()), so
 * the per-command LUN lookup takes no lock.  An added LUN gets a
 * BlockQueue in every started request queue's context; a removed one
 * disappears for new commands at once (they get the answers for a LUN
 * that does not exist), and its commands in flight finish normally before
 * the removal returns.  With VIRTIO_SCSI_F_HOTPLUG negotiated each change
 * queues a TRANSPORT_RESET event for the LUN (reason RESCAN on add,
 * REMOVED on remove) in the event queue, with the EVENTS_MISSED rule
 * above.  Each LUN counts its I/O (virtio_scsi_get_lun_stats()) from
 * when it is added until it is removed.
 *
 * Threads: creation, LUNs and the VuDevOps set-up callbacks in the main
 * thread; commands in the request queues' home threads.
 */
#ifndef SPINDLE_HW_VIRTIO_VIRTIO_SCSI_H
#define SPINDLE_HW_VIRTIO_VIRTIO_SCSI_H

#include <stdbool.h>
#include <stdint.h>
#include "hw/scsi/scsi-disk.h"
#include "hw/virtio/vhost-user-server.h"
#include "hw/virtio/virtio-io-error.h"
#include "util/error.h"

typedef struct VirtioScsi VirtioScsi;

/*
 * Error policies (each LUN's rerror / werror, in its ScsiDiskConf): a
 * command held by `stop` stops its whole request queue (the queue takes
 * no new command for any LUN; the others in flight complete), as QEMU
 * stops the whole guest.  A resume retries the held commands in the order
 * they were taken and restarts the queues.  A TMF that names a held command waits for it like
 * for any other running one, so until the resume (and does not see the
 * commands still in the ring of a stopped queue); a command a TMF
 * already cancelled is not held.  Draining a queue or removing a LUN
 * retries the held commands once and reports the errors then.  As
 * virtio_blk_stops(): resume (main thread, waits for the queues' threads)
 * or count the stopped request queues (any thread).
 */
unsigned virtio_scsi_stops(VirtioScsi *vs, bool resume);

/* LUN numbers: single-level addressing, 0..16383. */
#define VIRTIO_SCSI_MAX_LUN         16383

typedef struct VirtioScsiConf {
    unsigned num_queues;         /* request queues, 1..64 */
    unsigned queue_size;         /* largest ring accepted (default 256) */
    /* A LUN's error policy (ScsiDiskConf) that stops a queue is told to
     * io_error (NULL: nobody) in main_ctx's thread, naming export_id
     * (copied). */
    const char *export_id;
    AioContext *main_ctx;
    VirtioIoErrorFn *io_error;
} VirtioScsiConf;

/* Errors: num_queues out of range, queue_size not a power of two up to
 * VIRTQUEUE_MAX_SIZE (0 means 256).  Main thread. */
VirtioScsi *virtio_scsi_new(const VirtioScsiConf *conf, Error **errp);
/* Frees the device and every LUN's ScsiDisk.  Queues are stopped and
 * drained (the VuServer is gone).  Main thread. */
void virtio_scsi_free(VirtioScsi *vs);

/*
 * Add LUN lun (0..VIRTIO_SCSI_MAX_LUN) served by d, which the device then
 * owns (on success only).  Before the VuServer starts or while it runs:
 * every started request queue gets a BlockQueue for d's node in its own
 * context and sees the LUN from then on (REPORT LUNS lists it); then, if
 * the driver negotiated VIRTIO_SCSI_F_HOTPLUG, a TRANSPORT_RESET event,
 * reason RESCAN, for the LUN.  Main thread; waits for each IOThread of a
 * queue that ever started (aio_run_sync()), so those must be running.
 * Errors: LUN out of range or already present.
 */
bool virtio_scsi_add_lun(VirtioScsi *vs, unsigned lun, ScsiDisk *d,
                         Error **errp);

/*
 * Remove LUN lun: new commands to it get the answers for a LUN that does
 * not exist, its commands in flight in every queue finish (this waits for
 * them), each queue's BlockQueue for it is freed in that queue's thread,
 * and, if the driver negotiated VIRTIO_SCSI_F_HOTPLUG, a TRANSPORT_RESET
 * event, reason REMOVED, is queued.  Returns the LUN's disk, which the
 * caller now owns (to free), or NULL if there is no such LUN.  Main
 * thread; the IOThreads must be running, as for virtio_scsi_add_lun().
 */
ScsiDisk *virtio_scsi_remove_lun(VirtioScsi *vs, unsigned lun);

/* LUN lun's disk (still owned by the device), or NULL.  Main thread. */
ScsiDisk *virtio_scsi_get_lun(VirtioScsi *vs, unsigned lun);

/*
 * LUN lun's I/O since it was added, summed over every request queue and
 * front-end (block_acct_get()): false if there is no such LUN.  The
 * counts go with the LUN when it is removed.  Main thread.
 */
bool virtio_scsi_get_lun_stats(VirtioScsi *vs, unsigned lun,
                               BlockAcctStats *out);

/*
 * The node of LUN lun grew or shrank: unit attention, and a PARAM_CHANGE
 * event when the driver negotiated VIRTIO_SCSI_F_CHANGE.  A LUN that does
 * not exist is ignored.  Main thread; the event is delivered in the event
 * queue's IOThread, and this waits for that (aio_run_sync()), so the
 * IOThreads must be running.
 */
void virtio_scsi_capacity_changed(VirtioScsi *vs, unsigned lun);

/* The callbacks to give vu_server_new() with vs as dev, and the number of
 * virtqueues (num_queues + 2) to give it. */
extern const VuDevOps virtio_scsi_vu_ops;
unsigned virtio_scsi_num_virtqueues(const VirtioScsi *vs);

#endif

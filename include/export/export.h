/*
 * Exports: block nodes served to a front-end (one node, or one per LUN).  Created from --export
 * options (qemu-storage-daemon syntax, key=value or JSON), kept in a
 * registry by id.  Main thread.
 */
#ifndef SPINDLE_EXPORT_EXPORT_H
#define SPINDLE_EXPORT_EXPORT_H

#include <stdbool.h>
#include <stdint.h>
#include "block/block.h"
#include "hw/virtio/virtio-io-error.h"
#include "util/aio.h"
#include "util/error.h"
#include "util/iothread.h"
#include "util/opts.h"

typedef struct Export Export;

/*
 * Create and start the export described by opts:
 *   type=vhost-user-blk,id=ID,node-name=N,addr.type=unix,addr.path=P
 *   (or addr.type=fd,addr.str=FD), writable=on|off, num-queues=N,
 *   logical-block-size=N, iothread=ID (or a list: iothread.0=a,...),
 *   serial=S, and qemu-storage-daemon's writethrough=on|off and
 *   fixed-iothread=on|off; or
 *   type=vhost-user-scsi,id=ID,addr...,num-queues=N,iothread=...,
 *   lun.0.node-name=N,lun.0.writable=on|off,... (or lun.0=N) (docs/cli.md)
 * IOThreads are looked up by id (iothread_lookup()).  main_ctx runs the
 * socket.  Errors name the option; on error nothing is left behind.
 */
Export *export_create(Opts *opts, AioContext *main_ctx, Error **errp);

/*
 * What happens on an export's front-end connection, for the monitor to
 * turn into QMP events: event is "BLOCK_EXPORT_CONNECTED",
 * "BLOCK_EXPORT_DISCONNECTED" (queue and requests -1) or
 * "BLOCK_EXPORT_RESUBMITTED" (queue: the virtqueue that resumed from the
 * inflight region, requests: how many it resubmitted).  id is the
 * export's.  Main thread.
 */
typedef void ExportEventSink(const char *event, const char *id, int queue,
                             int requests);

/* Send every export's events to sink from now on (NULL: nowhere, the
 * default).  Main thread. */
void export_set_event_sink(ExportEventSink *sink);

/*
 * Send every export's error-policy stops (a queue stopped with a request
 * held: rerror / werror = stop or enospc) to sink from now on, for the
 * monitor's BLOCK_IO_ERROR (NULL: nowhere, the default).  Main thread.
 */
void export_set_io_error_sink(VirtioIoErrorFn *sink);

/*
 * Parse the argument of --export (key=value with the implied key "type",
 * or JSON) into Opts for export_create().  Unlike opts_parse(), it also
 * takes a JSON list of strings for "iothread".  Returns NULL and sets errp
 * if the text is malformed.  Main thread.
 */
Opts *export_opts_parse(const char *str, Error **errp);

Export *export_find(const char *id);

/* Stop serving (drain, disconnect, remove the socket) and free. */
void export_delete(Export *exp);

/* Delete every export (at shutdown). */
void export_delete_all(void);

/* Call fn for every export, oldest first.  fn must not delete exports. */
void export_foreach(void (*fn)(Export *exp, void *opaque), void *opaque);

const char *export_get_id(const Export *exp);
/* The (first) node served; borrowed.  NULL for a vhost-user-scsi export
 * whose every LUN was removed (export_del_lun()). */
BlockNode *export_get_node(const Export *exp);
/* The nodes served (1 for vhost-user-blk, one per LUN for vhost-user-scsi)
 * and node i (< export_get_num_nodes(); borrowed). */
unsigned export_get_num_nodes(const Export *exp);
BlockNode *export_get_nth_node(const Export *exp, unsigned i);
unsigned export_get_num_queues(const Export *exp);

/* One queue's counters since the export started, over every front-end. */
typedef struct ExportQueueStats {
    const char *iothread;        /* where the queue runs; NULL: main loop */
    uint64_t requests;           /* requests taken from the ring */
    uint64_t kicks;              /* notifications from the driver */
    uint64_t polled;             /* times polling found requests */
    uint64_t interrupts;         /* notifications sent to the driver */
    uint64_t interrupts_suppressed;  /* ... not sent (EVENT_IDX, flags) */
} ExportQueueStats;

/* Queue i's statistics; false if there is no queue i. */
bool export_get_queue_stats(Export *exp, unsigned i, ExportQueueStats *out);

/* ------------------------------------------------------------------------ */
/* Live management (the QMP monitor).  Main thread.                          */

/* "vhost-user-blk" or "vhost-user-scsi" (static). */
const char *export_get_type(const Export *exp);

/* Whether exp's front-end runs (it holds its nodes; export_set_running()
 * in export-int.h), whether it was created with allow-inactive=on, and
 * why its last start was refused (NULL if it ran since, or never was).
 * Main thread. */
bool export_is_running(const Export *exp);
bool export_get_allow_inactive(const Export *exp);
const char *export_get_start_error(const Export *exp);

/*
 * QMP blockdev-set-active: make node bs (NULL: every node) active or
 * inactive (block_node_set_active()).  Inactivating a node that a
 * running export serves is refused (its front-end writes through it;
 * stop the front-end first, as a migration's end does).  With bs NULL,
 * nodes go inactive from the top down and active from the bottom up, and
 * the first error stops.  Main thread.
 */
bool export_set_node_active(BlockNode *bs, bool active, Error **errp);

/* Whether a front-end is connected right now. */
bool export_has_client(const Export *exp);

/*
 * QMP block-export-resume: every queue of exp that an error policy
 * stopped retries its held requests, in the order they were taken from
 * the ring, and takes new ones again.  *retried (may be NULL) gets how
 * many were submitted again; an export that is not stopped is no error
 * (0).  Errors: the type has no error policies.  And whether some queue
 * of exp is stopped right now.  Main thread.
 */
bool export_resume(Export *exp, unsigned *retried, Error **errp);
bool export_is_io_stopped(const Export *exp);

/*
 * Node i's I/O through this export since the export started, summed over
 * its queues and front-ends (requests the device rejected before they
 * reached the node are not counted).  False if there is no node i.
 */
bool export_get_node_stats(Export *exp, unsigned i, BlockAcctStats *out);

/* For a vhost-user-scsi export, the LUN number of node i; else -1. */
int export_get_nth_lun(const Export *exp, unsigned i);

/* The oldest export that serves bs / that runs a queue (or its nodes) in
 * iot, or NULL.  Borrowed. */
Export *export_find_by_node(BlockNode *bs);
Export *export_find_by_iothread(IOThread *iot);

/*
 * After block_node_resize(): every export compares the size its device
 * shows with its nodes' lengths and tells the front-end about each change:
 * vhost-user-blk updates the capacity in its config space and sends a
 * config-change message on the back-end channel (the guest gets a
 * config-change interrupt); vhost-user-scsi raises the LUN's CAPACITY
 * DATA HAS CHANGED unit attention and a PARAM_CHANGE event.
 */
void export_refresh_sizes(void);

/*
 * vhost-user-scsi only: add LUN lun to a running export, from opts with
 * the members of a --export lun entry (lun=N required, node-name
 * required, writable, serial, wwn, vendor, product, logical-block-size),
 * binding and moving the node as export_create() does; the guest gets a
 * TRANSPORT_RESET RESCAN event.  Or remove LUN lun: its commands finish,
 * the guest gets a TRANSPORT_RESET REMOVED event, the node is released.
 * Errors: not a vhost-user-scsi export, LUN taken / absent, node errors
 * as at creation.  Nothing changes on error.
 */
bool export_add_lun(Export *exp, Opts *opts, Error **errp);
bool export_del_lun(Export *exp, unsigned lun, Error **errp);

#endif

/*
 * Exports: block nodes served to a front-end (one node, or one per LUN).  Created from --export
 * options (qemu-storage-daemon syntax, key=value or JSON), kept in a
 * registry by id.  Main thread.
 */
#ifndef SPINDLE_DAEMON_EXPORT_H
#define SPINDLE_DAEMON_EXPORT_H

#include <stdbool.h>
#include <stdint.h>
#include "block/block.h"
#include "util/aio.h"
#include "util/error.h"
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
/* The (first) node served; borrowed. */
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

#endif

/*
 * Export internals: the export types' interface.  Included only by the
 * files in daemon/ that implement exports.
 */
#ifndef SPINDLE_DAEMON_EXPORT_INT_H
#define SPINDLE_DAEMON_EXPORT_INT_H

#include <stdbool.h>
#include "block/block.h"
#include "daemon/export.h"
#include "hw/virtio/virtqueue.h"
#include "util/iothread.h"

/* What every export has, whatever its type.  Main thread. */
struct Export {
    char *id;
    const struct ExportDriver *drv;
    void *state;                 /* the type's own, from drv->parse() */
    BlockNode *bs;               /* a reference */
    bool writable;
    bool writethrough;
    IOThread *iothread;          /* NULL: the node runs in the main loop */
    AioContext *ctx;             /* where the node runs (its home) */
    /* Where the queues run, round-robin: the IOThreads given (in order)
     * if several, else just ctx. */
    AioContext **ctxs;
    unsigned nctx;
    AioContext *main_ctx;        /* the main loop's: sockets, control */
};

/*
 * An export type.  export_create() reads the options every type shares
 * (type, id, node-name, writable, writethrough, iothread, fixed-iothread),
 * then:
 *   1. parse()  reads the type's own options into a new state, without
 *               side effects (nothing is opened or started);
 *   2. the generic code checks for unknown keys and moves the node into
 *      exp->ctx;
 *   3. start()  starts serving (exp is complete);
 *   4. free()   stops serving (drain, disconnect, remove sockets) if it was
 *               started, and frees the state.  Called after a failed
 *               start() too, and with a state start() never saw.
 * All of them run in the main thread.
 */
typedef struct ExportDriver {
    const char *type;
    void *(*parse)(Opts *opts, Error **errp);
    bool (*start)(Export *exp, void *state, Error **errp);
    void (*free)(void *state);
    /* Statistics (main thread, after a successful start()): the number
     * of queues, and queue i's since start (false if there is none). */
    unsigned (*num_queues)(void *state);
    bool (*get_queue_stats)(void *state, unsigned i, VirtQueueStats *out);
} ExportDriver;

extern const ExportDriver export_vhost_user_blk;

#endif

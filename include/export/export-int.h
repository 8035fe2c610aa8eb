/*
 * Export internals: the export types' interface.  Included only by the
 * files in export/ that implement exports.
 */
#ifndef SPINDLE_EXPORT_EXPORT_INT_H
#define SPINDLE_EXPORT_EXPORT_INT_H

#include <stdbool.h>
#include "block/block.h"
#include "export/export.h"
#include "hw/virtio/vhost-user-server.h"
#include "hw/virtio/virtqueue.h"
#include "util/iothread.h"

/* A node an export serves.  Main thread. */
typedef struct ExportNode {
    BlockNode *bs;               /* a reference */
    bool writable;               /* the export may write to it */
    char *what;                  /* the option that named it, for messages:
                                  * "node-name", "lun.1" */
    int lun;                     /* the LUN it serves (a type with LUNs);
                                  * -1 for node-name */
} ExportNode;

/* What every export has, whatever its type.  Main thread. */
struct Export {
    char *id;
    const struct ExportDriver *drv;
    void *state;                 /* the type's own, from drv->parse() */
    /* The nodes served, in the order they were bound: node-name's for a
     * type that serves one node, the type's own (export_bind_node()) for
     * one with binds_nodes.  Each holds a reference. */
    GArray *nodes;               /* of ExportNode */
    BlockNode *bs;               /* nodes[0].bs (borrowed), the node of a
                                  * type that serves one */
    bool writable;               /* nodes[0].writable */
    bool writethrough;
    bool fixed_iothread;         /* while nodes are bound */
    const char *ctx_pinned_by;   /* while nodes are bound: the node (its
                                  * "what") whose other export decided ctx;
                                  * NULL if none did */
    IOThread *iothread;          /* NULL: the nodes run in the main loop */
    AioContext *ctx;             /* where the nodes run (their home) */
    /* Where the queues run, round-robin: the IOThreads given (in order)
     * if several, else just ctx. */
    AioContext **ctxs;
    unsigned nctx;
    AioContext *main_ctx;        /* the main loop's: sockets, control */
    bool started;                /* start() succeeded: ctx and ctxs are
                                  * fixed, nodes bound later must come to
                                  * ctx */
    bool allow_inactive;         /* allow-inactive=on */
    bool running;                /* a ring of its front-end runs: its
                                  * nodes are active and its own */
    char *start_error;           /* why the last start was refused, or
                                  * NULL (it ran since) */
};

/*
 * An export type.  export_create() reads the options every type shares
 * (type, id, writethrough, iothread, fixed-iothread, and unless the type
 * binds its own nodes, node-name and writable), then:
 *   1. parse()  reads the type's own options into a new state, without
 *               side effects (nothing is opened or started); a type with
 *               binds_nodes binds each node it serves here with
 *               export_bind_node();
 *   2. the generic code checks for unknown keys and moves every node into
 *      exp->ctx;
 *   3. start()  starts serving (exp is complete);
 *   4. free()   stops serving (drain, disconnect, remove sockets) if it was
 *               started, and frees the state.  Called after a failed
 *               start() too, and with a state start() never saw.
 * Then the generic code releases the nodes (each moves back to the main
 * loop when no other export serves it).  All of them run in the main
 * thread.
 */
typedef struct ExportDriver {
    const char *type;
    /* The type names its nodes in its own options (one per LUN, say)
     * instead of the shared node-name and writable. */
    bool binds_nodes;
    void *(*parse)(Export *exp, Opts *opts, Error **errp);
    bool (*start)(Export *exp, void *state, Error **errp);
    void (*free)(void *state);
    /* Statistics (main thread, after a successful start()): the number
     * of queues, and queue i's since start (false if there is none). */
    unsigned (*num_queues)(void *state);
    bool (*get_queue_stats)(void *state, unsigned i, VirtQueueStats *out);
    /* Whether a front-end is connected (main thread, after start()). */
    bool (*has_client)(void *state);

    /*
     * Live management (main thread, after a successful start()).
     * get_node_stats: the I/O of exp->nodes[i] through the device since
     * start (false if the device has none for it).
     * refresh_sizes: compare the sizes the device shows with its nodes'
     * lengths and tell the front-end about each change.
     * add_lun / del_lun (NULL: the type has no LUNs): add a LUN from the
     * options of one lun entry, or remove LUN lun; nothing changes on
     * error.  add_lun binds its node with export_bind_node() and moves it
     * with export_move_new_node(); del_lun drains the LUN and releases
     * its node with export_release_node().
     */
    bool (*get_node_stats)(Export *exp, void *state, unsigned i,
                           BlockAcctStats *out);
    void (*refresh_sizes)(Export *exp, void *state);
    bool (*add_lun)(Export *exp, void *state, Opts *opts, Error **errp);
    bool (*del_lun)(Export *exp, void *state, unsigned lun, Error **errp);
    /*
     * Error policies (NULL: the type has none): with resume, resume the
     * queues a policy stopped (returns the requests submitted again);
     * without, how many are stopped now.
     */
    unsigned (*stops)(void *state, bool resume);
} ExportDriver;

/*
 * For a type with binds_nodes, from its parse() (or add_lun()): serve node
 * node_name as LUN lun (-1: the type has no LUNs), named by option what
 * ("lun.1", used as the prefix of messages), with writes allowed or not.  Checks what export_create() checks for
 * node-name: the node exists, is not read-only if writable, is not
 * already served by this export, and may be shared with the exports that
 * serve it (a writable export needs a node to itself; exports of one node
 * run in one context, so the export follows the node into its context,
 * which is an error with fixed-iothread=on or when another of its nodes
 * already tied it to a different one).  Takes a reference; nothing else
 * changes until parse() returns: the node moves into exp->ctx afterwards,
 * and is released when the export goes away (or fails to start).
 * Returns the node (borrowed; valid while the export exists) or NULL with
 * errp set ("lun.1: there is no node 'disk9' ...").  Main thread.
 */
BlockNode *export_bind_node(Export *exp, const char *what,
                            const char *node_name, int lun, bool writable,
                            Error **errp);

/*
 * For add_lun(), on a running export, after export_bind_node(bs): move bs
 * into exp->ctx unless it is there (it is idle then: no other export
 * serves it, or it would be in that export's context already).  On
 * error, or when add_lun() fails later, export_unbind_node() undoes the
 * bind and the move.  Main thread.
 */
bool export_move_new_node(Export *exp, BlockNode *bs, Error **errp);

/*
 * Undo export_bind_node(bs) (and export_move_new_node()): drop bs from
 * exp->nodes, move it back to the main loop if no other export serves it
 * and it is not there, and drop the reference.  The device must not use
 * bs any more (its requests drained).  Main thread.
 */
void export_unbind_node(Export *exp, BlockNode *bs);

/*
 * The hand-over (VuServerConfig.rings_running of every vhost-user
 * export): exp's front-end starts running (running=true, before its first
 * ring starts) or stopped (running=false, after its last ring stopped;
 * migrating: with dirty logging on, i.e. at the end of a live migration).
 * Starting is refused (false, errp set, also kept for
 * query-block-exports) while another export that shares a node with exp
 * runs and one of the two may write it, or when a node cannot be
 * activated (another process holds its image); otherwise every inactive
 * node of exp is activated.  Stopping while migrating releases the nodes
 * no other running export uses: they go inactive (drained, flushed,
 * unlocked) before this returns, so the destination can take them as
 * soon as the front-end moves on.  Each step is logged.  Main thread.
 */
bool export_set_running(Export *exp, bool running, bool migrating,
                        Error **errp);

/*
 * What every vhost-user export type's state starts with (its first
 * member): the address it listens on and, once started, its server.
 * vhost-user-export.c has the functions below.  Main thread.
 */
typedef struct VhostUserExport {
    char *path;                  /* addr.type=unix */
    int listen_fd;               /* addr.type=fd; else -1 */
    bool listen_fd_borrowed;     /* listen_fd is a socket systemd passed
                                  * (util/listen-fds.h): never closed */
    bool inflight_tracking;      /* inflight-tracking=on (the default) */
    char *id;                    /* the export's, for events */
    VuServer *server;            /* from vhost_user_export_serve() */
} VhostUserExport;

/*
 * The options every vhost-user export has, into vu: addr.type=unix,
 * addr.path=P (vu->path gets a copy) or addr.type=fd,addr.str=N|NAME
 * (vu->listen_fd = N, or the fd of the socket systemd passed as NAME,
 * checked to be an open, listening UNIX stream socket; still the
 * caller's to close unless vu->listen_fd_borrowed), and
 * inflight-tracking=on|off.
 * Errors name the option.  Main thread.
 */
bool vhost_user_export_parse(Opts *opts, VhostUserExport *vu, Error **errp);

/*
 * The VirtioIoErrorFn every device of an export is given: passes the stop
 * to the sink of export_set_io_error_sink(), if any.  Main thread.
 */
void export_io_error_event(const VirtioIoError *e);

/*
 * rerror=report|ignore|enospc|stop and werror=... from opts, at keys
 * rkey / wkey (default report).  Errors name the key and the values.
 */
bool export_parse_error_policies(Opts *opts, const char *rkey,
                                 const char *wkey, BlockErrorPolicy *rerror,
                                 BlockErrorPolicy *werror, Error **errp);

/* Pass an event to the sink of export_set_event_sink(), if any.  Main
 * thread. */
void export_emit_event(const char *event, const char *id, int queue,
                       int requests);

/*
 * Serve dev (a device with these VuDevOps and num_queues virtqueues) on
 * vu's address: a VuServer named after the export, whose queues run in
 * exp's contexts, offering inflight tracking unless vu says not to and
 * reporting its connection's events (export_emit_event()), goes in
 * vu->server.  The server listens on a duplicate
 * of an inherited fd, so that fd is closed here (listen_fd becomes -1),
 * as when qemu-storage-daemon adopts one.  False with errp set if the
 * server cannot start.  Main thread.
 */
bool vhost_user_export_serve(VhostUserExport *vu, Export *exp,
                             unsigned num_queues, const VuDevOps *ops,
                             void *dev, Error **errp);

/*
 * Stop serving and free what vu holds: the server first (it drains the
 * queues that use the device, disconnects the front-end and removes the
 * socket file it created), then the path.  The caller frees the device
 * afterwards.  Main thread.
 */
void vhost_user_export_stop(VhostUserExport *vu);

/*
 * ExportDriver.get_queue_stats for a type whose state starts with a
 * VhostUserExport: the server's statistics of virtqueue i.
 */
bool vhost_user_export_queue_stats(void *state, unsigned i,
                                   VirtQueueStats *out);

/* ExportDriver.has_client for the same types. */
bool vhost_user_export_has_client(void *state);

extern const ExportDriver export_vhost_user_blk;
extern const ExportDriver export_vhost_user_scsi;

#endif

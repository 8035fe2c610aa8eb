/*
 * vhost-user back-end server (docs/interop/vhost-user.rst in QEMU's tree is
 * the protocol's specification).
 *
 * A VuServer listens on a UNIX socket (a path it creates, or a listening fd
 * it inherited) in the main loop thread and serves one front-end at a time;
 * when that one disconnects it accepts the next (QEMU's reconnect).  It
 * speaks the protocol (features, memory table, vrings, config, reset) and
 * owns the VirtQueues; the device behind it (virtio-blk, virtio-scsi) only
 * sees the VuDevOps callbacks below.
 *
 * Queues run in IOThreads: queue i runs in ctxs[i % nctx].  The server never
 * touches a running queue from the main thread: it runs the start, stop and
 * memory-table changes in the queue's home thread with aio_run_sync().
 *
 * Untrusted input: a malformed message (bad size, unknown request, fd count
 * wrong, index out of range, rings outside guest memory) gets an error
 * reply when the front-end asked for one (REPLY_ACK) or drops the
 * connection; the queue concerned is marked broken at most.  Nothing a
 * front-end sends can stop the process or touch another export.
 *
 * Threads: every function here is for the main thread, except the
 * VuDevOps queue callbacks, which run in the queue's home thread.
 */
#ifndef SPINDLE_HW_VIRTIO_VHOST_USER_SERVER_H
#define SPINDLE_HW_VIRTIO_VHOST_USER_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include "hw/virtio/virtqueue.h"
#include "util/aio.h"
#include "util/error.h"

typedef struct VuServer VuServer;

typedef struct VuDevOps {
    /* Device feature bits (virtio-blk's, ...); the server adds the
     * transport's (VERSION_1, INDIRECT_DESC, EVENT_IDX,
     * VHOST_USER_F_PROTOCOL_FEATURES). */
    uint64_t (*get_features)(void *dev);
    /* The features the driver accepted (main thread, queues stopped). */
    void (*set_features)(void *dev, uint64_t features);
    /* Copy up to len bytes of the config space into buf; returns bytes. */
    uint32_t (*get_config)(void *dev, uint8_t *buf, uint32_t len);
    /* A config write at offset; 0 or -errno. */
    int (*set_config)(void *dev, const uint8_t *buf, uint32_t offset,
                      uint32_t len);

    /*
     * Queue vq was started in its home thread: the device's handler will
     * be called for it from now on.  Home thread.
     */
    void (*queue_started)(void *dev, VirtQueue *vq);
    /*
     * Queue vq is stopping (GET_VRING_BASE, reset, disconnect): finish every
     * element popped from it (push them) before returning, running the
     * loop (aio_poll, nested) if requests are in flight.  Home thread.
     */
    void (*queue_drain)(void *dev, VirtQueue *vq);
    /* The handler for a queue's work.  Home thread. */
    VirtQueueHandler *handle_queue;
} VuDevOps;

/* What the server tells its owner about the front-end (main thread). */
typedef enum VuServerEvent {
    VU_EVENT_CONNECTED,          /* a front-end was accepted */
    VU_EVENT_DISCONNECTED,       /* it went away, or was dropped */
    VU_EVENT_RESUBMITTED,        /* ring `queue` resumed from an inflight
                                  * region used before, with `count`
                                  * requests of a dead process to redo */
} VuServerEvent;

typedef void VuServerEventFn(void *opaque, VuServerEvent ev, unsigned queue,
                             unsigned count);

typedef struct VuServerConfig {
    const char *path;            /* socket path to create (mode 0600) ... */
    int listen_fd;               /* ... or (path NULL) an inherited listening
                                  * fd; the server uses a duplicate, the
                                  * caller keeps and closes this one */
    unsigned num_queues;         /* 1..64 */
    unsigned max_queue_size;     /* largest SET_VRING_NUM accepted */
    AioContext **ctxs;           /* contexts for the queues, round-robin */
    unsigned nctx;
    const VuDevOps *ops;
    void *dev;                   /* passed to ops */
    const char *name;            /* for messages: the export id */
    /* Offer VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD: the front-end keeps a
     * log of the requests in flight that survives our crash. */
    bool inflight_tracking;
    VuServerEventFn *event;      /* NULL: none; called with event_opaque */
    void *event_opaque;
    /*
     * The device starts or stops running (NULL: nobody cares), called
     * with rings_opaque in the main thread:
     *  - running=true just before the first ring starts (none runs).
     *    Returning false (errp set) refuses: no ring starts; the refusal
     *    is logged, the request that would have started them
     *    (SET_VRING_KICK, SET_VRING_ENABLE, ...) gets an error
     *    acknowledgement if it asked for one (REPLY_ACK), and the rings
     *    are tried again only when their set-up changes (a new kick fd,
     *    a new session);
     *  - running=false once the last running ring has stopped and its
     *    requests are finished, before the answer to the request that
     *    stopped it (GET_VRING_BASE, ...).  migrating: VHOST_F_LOG_ALL
     *    was negotiated then, so the front-end is ending a live migration
     *    (it stops the rings with logging still on).  errp is NULL.
     */
    bool (*rings_running)(void *opaque, bool running, bool migrating,
                          Error **errp);
    void *rings_opaque;
} VuServerConfig;

/*
 * Start listening.  Errors: the path exists and is not a stale socket,
 * cannot bind, fd not a listening UNIX socket.  main_ctx is the main loop's
 * context (where the socket handlers run).
 */
VuServer *vu_server_new(const VuServerConfig *cfg, AioContext *main_ctx,
                        Error **errp);

/*
 * Disconnect the client (draining its queues), stop listening, remove the
 * socket file (if the server created it) and free everything.  The queues'
 * IOThreads must still be running (the drain runs in them).
 */
void vu_server_free(VuServer *server);

/* Whether a front-end is connected. */
bool vu_server_has_client(const VuServer *server);

/*
 * Queue i (for statistics), or NULL.  The queue is replaced by a fresh one
 * when the front-end disconnects or resets the device: look it up again
 * rather than keeping the pointer.
 */
VirtQueue *vu_server_get_queue(VuServer *server, unsigned i);

/*
 * Statistics of queue i since the server started, over every front-end
 * and reset (the current ring's plus those before it).  False if there
 * is no queue i.  Main thread.
 */
bool vu_server_get_queue_stats(VuServer *server, unsigned i,
                               VirtQueueStats *out);

/*
 * Tell the front-end that the device's config space changed: a
 * VHOST_USER_SLAVE_CONFIG_CHANGE_MSG on the back-end channel
 * (VHOST_USER_PROTOCOL_F_SLAVE_REQ, whose fd the front-end gave with
 * SET_SLAVE_REQ_FD), without waiting for a reply.  QEMU then reads the
 * config again (GET_CONFIG) and, for virtio-blk, interrupts the guest.
 * Returns true if the message was sent; false if no front-end is
 * connected or it set up no back-end channel (it sees the change at its
 * next GET_CONFIG).  Main thread.
 */
bool vu_server_config_changed(VuServer *server);

/*
 * Whether the connected front-end has dirty logging on (VHOST_F_LOG_ALL
 * negotiated): it is migrating the guest away.  Main thread.
 */
bool vu_server_dirty_logging(const VuServer *server);

#endif

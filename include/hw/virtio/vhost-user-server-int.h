/*
 * Inside the vhost-user back-end server: the state the server's files
 * share, and what each of them offers the others.  Private to hw/virtio
 * (and to the unit test and fuzz harnesses that drive the handlers
 * without a socket).
 *
 * The server is four files, one concern each:
 *
 *   vhost-user-msg.c       what a request looks like: its name, payload
 *                          size and fd count, checked before any handler
 *                          runs (hw/virtio/vhost-user-protocol.h)
 *   vhost-user-handlers.c  what a request does: one handler per request,
 *                          and vu_server_handle_msg(), which turns one
 *                          decoded message into the answer to send
 *   vhost-user-rings.c     starting and stopping the rings, and swapping
 *                          their memory table, in their home threads
 *   vhost-user-server.c    the connection: listening, accepting, reading
 *                          requests, sending answers, disconnecting (and
 *                          the next accept), the back-end channel, and
 *                          the public API of hw/virtio/vhost-user-server.h
 *
 * with the socket I/O itself in vhost-user-socket.c.
 *
 * Threads: everything here is main-thread state and main-thread code (the
 * server's main_ctx), except where a function says it runs in a ring's
 * home thread.
 */
#ifndef SPINDLE_HW_VIRTIO_VHOST_USER_SERVER_INT_H
#define SPINDLE_HW_VIRTIO_VHOST_USER_SERVER_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "hw/virtio/guest-memory.h"
#include "hw/virtio/vhost-inflight.h"
#include "hw/virtio/vhost-log.h"
#include "hw/virtio/vhost-user-protocol.h"
#include "hw/virtio/vhost-user-server.h"

typedef struct VuQueue {
    VirtQueue *vq;
    AioContext *ctx;          /* home context: ctxs[index % nctx] */
    bool started;             /* virtqueue_start() succeeded, not stopped */
    bool enabled;             /* SET_VRING_ENABLE */
    bool start_failed;        /* don't retry until the set-up changes */
    bool resuming;            /* its part of the inflight region was used
                               * before: report what the next start
                               * resubmits */
    uint16_t base;            /* next avail index while stopped */
    VirtQueueAddrs addrs;     /* the last SET_VRING_ADDR */
    VirtQueueStats past;      /* of the rings before vq (reset, reconnect) */
} VuQueue;

struct VuServer {
    char *name;
    AioContext *main_ctx;
    const VuDevOps *ops;
    void *dev;
    unsigned num_queues;
    unsigned max_queue_size;
    bool inflight_tracking;   /* INFLIGHT_SHMFD offered */
    VuServerEventFn *event;
    void *event_opaque;
    /* VuServerConfig.rings_running and its opaque. */
    bool (*rings_running)(void *opaque, bool running, bool migrating,
                          Error **errp);
    void *rings_opaque;

    int listen_fd;            /* ours: created, or a dup of the given fd;
                               * -1 for a server without a socket */
    bool accepting;           /* listen_fd handler registered */
    char *path;               /* socket file we created, or NULL */
    dev_t path_dev;           /* its identity, to unlink only our file */
    ino_t path_ino;

    /* The connection and its state (reset on disconnect). */
    int client_fd;
    bool dispatching;         /* a request is being handled */
    uint64_t features;        /* SET_FEATURES */
    bool features_set;
    uint64_t protocol_features;
    GuestMemory *mem;         /* NULL until the first table */
    int slave_fd;             /* the back-end channel (SET_SLAVE_REQ_FD), or
                               * -1; ours to close */
    VhostInflight *inflight;  /* SET_INFLIGHT_FD's region, or NULL */
    VhostLog *log;            /* SET_LOG_BASE's dirty log, or NULL */
    int log_fd;               /* SET_LOG_FD's eventfd, or -1; ours */

    char why[256];            /* reason of the last failure */
    VuQueue queues[];
};

/* Log one line naming the export (error_report()).  Main thread. */
void G_GNUC_PRINTF(2, 3) vu_log(VuServer *s, const char *fmt, ...);

/* Tell the server's owner (VuServerConfig.event), if any.  Main thread. */
void vu_event(VuServer *s, VuServerEvent ev, unsigned queue, unsigned count);

/* ------------------------------------------------------------------------ */
/* The server without a socket (vhost-user-server.c)                         */

/*
 * A server with its queues and device but no socket: it never accepts,
 * and requests reach it only through vu_server_handle_msg().  cfg's path
 * and listen_fd are ignored; the other fields are checked as
 * vu_server_new() checks them (errp set, NULL returned).  Free it with
 * vu_server_free().  Thread of main_ctx.
 */
VuServer *vu_server_new_socketless(const VuServerConfig *cfg,
                                   AioContext *main_ctx, Error **errp);

/* ------------------------------------------------------------------------ */
/* Handlers (vhost-user-handlers.c)                                          */

/* What the connection does with a request once it has been handled. */
typedef enum VuAnswer {
    VU_ANSWER_NONE,     /* nothing to send */
    VU_ANSWER_REPLY,    /* send the reply (header and payload filled in) */
    VU_ANSWER_CLOSE,    /* close the connection; s->why says why */
} VuAnswer;

/*
 * Handle one request as it came off the socket: check it
 * (vu_msg_validate()), run its handler, and decide the answer.  A refused
 * request is answered with a non-zero REPLY_ACK status when the front-end
 * asked for one (and negotiated REPLY_ACK) and the request has no reply
 * of its own; that failure, and a request ignored as unsupported, is
 * logged.  Otherwise a refusal closes the connection (s->why: why; the
 * caller logs it).
 *
 * msg is the caller's; every fd in it is consumed: handed to its new
 * owner (a ring, the back-end channel) or closed, and msg->nfds is 0 on
 * return.  reply is filled for VU_ANSWER_REPLY (the front-end's request
 * code, the version and reply flags, the payload, and the fds to send
 * with it, which the caller closes after sending: vu_msg_close_fds()),
 * and holds no fd otherwise.
 * Main thread (the server's main_ctx); rings are started and stopped in
 * their home threads, which must be running their loops unless they are
 * the main thread.
 */
VuAnswer vu_server_handle_msg(VuServer *s, VuMsg *msg, VuMsg *reply);

/*
 * Forget what the front-end set up: stop and reset every ring, drop the
 * memory table, the features, the inflight region and the back-end
 * channel.  For a disconnect.  Main thread.
 */
void vu_server_forget_client(VuServer *s);

/* Close the back-end channel, if there is one.  Main thread. */
void vu_close_slave_channel(VuServer *s);

/* ------------------------------------------------------------------------ */
/* Ring lifecycle (vhost-user-rings.c)                                       */

/* Create queue i's ring (in s->queues[i], home context ctx). */
void vu_queue_init(VuServer *s, unsigned i, AioContext *ctx);

/* Whether q may run: always, or after SET_VRING_ENABLE 1 when
 * VHOST_USER_F_PROTOCOL_FEATURES was negotiated. */
bool vu_queue_enabled(VuServer *s, const VuQueue *q);

/* Whether any ring is running. */
bool vu_any_queue_started(VuServer *s);

/* Start every ring that became startable (and did not fail to start
 * with the same set-up before).  False if the server's owner refused to
 * let the rings run (VuServerConfig.rings_running; s->why says why, for
 * the caller to log): no ring started, and those that could have are
 * marked failed. */
bool vu_queues_update(VuServer *s);

/* Stop a running ring and finish its requests; remembers its base. */
void vu_queue_stop(VuServer *s, VuQueue *q);

/* Stop every ring, then forget all ring state (fds, sizes, bases) and
 * the inflight region; the statistics are kept. */
void vu_queues_reset(VuServer *s);

/* Install the inflight region of SET_INFLIGHT_FD (takes the reference;
 * NULL: none) for the rings' next starts.  Every ring is stopped. */
void vu_set_inflight(VuServer *s, VhostInflight *region);

/*
 * Install the dirty log of SET_LOG_BASE (takes the reference; NULL: none)
 * and hand every ring what it logs into now: the log while
 * VHOST_F_LOG_ALL is negotiated, else nothing; running rings switch in
 * their home threads, and only then is the old log dropped.  Also what
 * SET_FEATURES calls (with s->log) when LOG_ALL changes.
 */
void vu_set_log(VuServer *s, VhostLog *log);

/* Change a running ring's used ring logging (SET_VRING_ADDR's flags and
 * log address) in its home thread. */
void vu_queue_set_log_used(VuQueue *q, const VirtQueueAddrs *addrs);

/* Install a new memory table (takes the reference); running rings keep
 * running on it, the old table is dropped after they switched. */
void vu_set_memory(VuServer *s, GuestMemory *mem);

/* Set one of a running ring's fds (call, err) in its home thread. */
typedef void VuSetFd(VirtQueue *vq, int fd);
void vu_queue_set_fd_running(VuQueue *q, VuSetFd *set_fd, int fd);

/* The statistics of queue i since the server started. */
void vu_queue_get_stats(VuServer *s, unsigned i, VirtQueueStats *out);

#endif

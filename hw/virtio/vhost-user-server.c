/*
 * vhost-user back-end server: the connection.
 *
 * Theory of operation
 * -------------------
 * A VuServer owns one listening UNIX socket (a path it created, or a
 * duplicate of an inherited listening fd), at most one client connection,
 * the guest memory table the client sent, and num_queues VirtQueues.  All
 * of that is main-thread state: the socket handlers run in main_ctx.  This
 * file is the connection: listening, accepting, reading a request and
 * sending its answer, disconnecting, and the back-end channel's notices.
 * What a request must carry is checked in vhost-user-msg.c, what it does
 * is in vhost-user-handlers.c (vu_server_handle_msg(), which needs no
 * socket), and the rings start and stop in vhost-user-rings.c; the socket
 * I/O itself is vhost-user-socket.c.
 *
 * One client at a time: while a client is connected the listening socket
 * is not watched, so a second front-end that connects waits in the
 * kernel's listen backlog (its connect() succeeds, its messages are not
 * read) until the first one disconnects; then it is accepted.  This is
 * what QEMU's reconnect needs: when the old connection goes away every
 * queue is stopped and drained, the guest memory is unmapped and all
 * per-connection state is reset before the next accept
 * (vu_server_forget_client()).
 *
 * Reading messages: the client socket is blocking, but it is read only
 * when the loop reports it readable, and a message (12-byte header, at
 * most VHOST_USER_MAX_PAYLOAD bytes of payload, at most VHOST_USER_MAX_FDS
 * fds) is read whole before it is handled.  A front-end that sends part of
 * a message and stops could block the main loop, so the whole message must
 * arrive within VU_MSG_TIMEOUT_MS of its first byte (poll() with the time
 * left before each further read, and SO_RCVTIMEO as a backstop); otherwise
 * the connection is closed.  Replies are sent with SO_SNDTIMEO for the same
 * reason.  So a misbehaving front-end can stall the main loop for about a
 * second, once, and then it is gone.  A request the handlers refuse
 * without an error ack, a framing error and a reply that cannot be sent
 * all close the connection, with one line in the log.
 *
 * Handling a request may run the main loop again (a ring drained in
 * main_ctx: a nested aio_poll()); `dispatching` keeps that nested loop
 * from reading the next request in the middle of this one.
 *
 * The back-end channel: the only request the back-end sends on it
 * (SET_SLAVE_REQ_FD gave it) is the config-change notice
 * (vu_server_config_changed(), after a resize), header only and without
 * asking for a reply, so nothing is ever read from the channel.  It is
 * sent without blocking: the main loop must not wait for a front-end, so
 * a channel whose buffer is full loses the notice (logged; the front-end
 * still sees the new config at its next GET_CONFIG), and a channel that
 * takes only part of a message is closed, as the stream would be out of
 * step.
 */
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib.h>

#include "util/main-thread.h"
#include "hw/virtio/vhost-user-server-int.h"
#include "util/trace.h"
#include "util/unix-socket.h"

/* A message must arrive whole within this time of its first byte. */
#define VU_MSG_TIMEOUT_MS 1000

#define VU_MAX_QUEUES 64

void vu_log(VuServer *s, const char *fmt, ...)
{
    va_list ap;
    char *msg;

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    error_report("vhost-user export '%s': %s", s->name, msg);
    g_free(msg);
}

void vu_event(VuServer *s, VuServerEvent ev, unsigned queue, unsigned count)
{
    if (s->event) {
        s->event(s->event_opaque, ev, queue, count);
    }
}

/* ------------------------------------------------------------------------ */
/* Connection                                                                */

static void vu_accept(void *opaque);
static void vu_client_read(void *opaque);

static void vu_set_accepting(VuServer *s, bool on)
{
    if (s->accepting != on) {
        aio_set_fd_handler(s->main_ctx, s->listen_fd, on ? vu_accept : NULL,
                           NULL, NULL, NULL, s);
        s->accepting = on;
    }
}

/* Drop the client: stop and drain the rings, unmap memory, reset state. */
static void vu_client_disconnect(VuServer *s)
{
    g_assert(s->client_fd >= 0);
    vu_server_forget_client(s);
    aio_set_fd_handler(s->main_ctx, s->client_fd, NULL, NULL, NULL, NULL,
                       NULL);
    close(s->client_fd);
    s->client_fd = -1;
    SPINDLE_TRACE0(vu_disconnect);
    vu_log(s, "front-end disconnected");
    vu_event(s, VU_EVENT_DISCONNECTED, 0, 0);
    /* The next front-end (maybe already waiting in the backlog). */
    vu_set_accepting(s, true);
}

static void vu_client_read(void *opaque)
{
    VuServer *s = opaque;
    VuMsg msg, reply;
    VuAnswer answer;
    int r;

    assert_main_thread();
    if (s->dispatching) {
        /* A nested aio_poll() (a ring drained in main_ctx): later. */
        return;
    }
    r = vu_msg_recv(s->client_fd, &msg, VU_MSG_TIMEOUT_MS, s->why,
                    sizeof(s->why));
    if (r <= 0) {
        if (r < 0) {
            vu_log(s, "%s; closing the connection", s->why);
        }
        vu_client_disconnect(s);
        return;
    }
    SPINDLE_TRACE2(vu_request, msg.hdr.request, msg.hdr.size);
    s->dispatching = true;
    answer = vu_server_handle_msg(s, &msg, &reply);
    s->dispatching = false;
    if (answer == VU_ANSWER_REPLY &&
        !vu_msg_send(s->client_fd, &reply, s->why, sizeof(s->why))) {
        answer = VU_ANSWER_CLOSE;
    }
    vu_msg_close_fds(&reply);      /* sent: the front-end has its own */
    if (answer == VU_ANSWER_CLOSE) {
        vu_log(s, "%s; closing the connection", s->why);
        vu_client_disconnect(s);
    }
}

static void vu_accept(void *opaque)
{
    VuServer *s = opaque;
    int fd;

    assert_main_thread();
    g_assert(s->client_fd < 0);
    fd = vu_socket_accept(s->listen_fd, VU_MSG_TIMEOUT_MS);
    if (fd < 0) {
        if (fd != -EAGAIN && fd != -EINTR && fd != -ECONNABORTED) {
            vu_log(s, "cannot accept a connection: %s", g_strerror(-fd));
        }
        return;
    }
    s->client_fd = fd;
    /* One client at a time: the next waits in the backlog. */
    vu_set_accepting(s, false);
    aio_set_fd_handler(s->main_ctx, fd, vu_client_read, NULL, NULL, NULL, s);
    SPINDLE_TRACE1(vu_connect, fd);
    vu_log(s, "front-end connected");
    vu_event(s, VU_EVENT_CONNECTED, 0, 0);
}

/* ------------------------------------------------------------------------ */
/* Public API                                                                */

static bool vu_check_config_struct(const VuServerConfig *cfg, Error **errp)
{
    const char *name = cfg->name ? cfg->name : "?";

    if (cfg->num_queues < 1 || cfg->num_queues > VU_MAX_QUEUES) {
        error_setg(errp, "Export '%s': num-queues must be 1 to %u, not %u",
                   name, VU_MAX_QUEUES, cfg->num_queues);
        return false;
    }
    if (cfg->max_queue_size < 1 || cfg->max_queue_size > VIRTQUEUE_MAX_SIZE) {
        error_setg(errp, "Export '%s': queue size must be 1 to %u, not %u",
                   name, VIRTQUEUE_MAX_SIZE, cfg->max_queue_size);
        return false;
    }
    g_assert(cfg->nctx >= 1 && cfg->ctxs);
    g_assert(cfg->ops && cfg->ops->get_features && cfg->ops->set_features &&
             cfg->ops->handle_queue);
    return true;
}

/* A server for a checked cfg, without a socket. */
static VuServer *vu_server_alloc(const VuServerConfig *cfg,
                                 AioContext *main_ctx)
{
    VuServer *s = g_malloc0(sizeof(*s) + cfg->num_queues * sizeof(VuQueue));

    s->name = g_strdup(cfg->name ? cfg->name : "");
    s->main_ctx = main_ctx;
    s->ops = cfg->ops;
    s->dev = cfg->dev;
    s->num_queues = cfg->num_queues;
    s->max_queue_size = cfg->max_queue_size;
    s->inflight_tracking = cfg->inflight_tracking;
    s->event = cfg->event;
    s->event_opaque = cfg->event_opaque;
    s->rings_running = cfg->rings_running;
    s->rings_opaque = cfg->rings_opaque;
    s->listen_fd = -1;
    s->client_fd = -1;
    s->slave_fd = -1;
    s->log_fd = -1;
    for (unsigned i = 0; i < s->num_queues; i++) {
        vu_queue_init(s, i, cfg->ctxs[i % cfg->nctx]);
    }
    return s;
}

VuServer *vu_server_new_socketless(const VuServerConfig *cfg,
                                   AioContext *main_ctx, Error **errp)
{
    assert_main_thread();
    if (!vu_check_config_struct(cfg, errp)) {
        return NULL;
    }
    return vu_server_alloc(cfg, main_ctx);
}

VuServer *vu_server_new(const VuServerConfig *cfg, AioContext *main_ctx,
                        Error **errp)
{
    const char *name = cfg->name ? cfg->name : "?";
    VuServer *s;
    struct stat st;
    int fd;

    assert_main_thread();
    if (!vu_check_config_struct(cfg, errp)) {
        return NULL;
    }
    /* path wins: a zero-initialised config has listen_fd 0. */
    if (!cfg->path && cfg->listen_fd < 0) {
        error_setg(errp, "Export '%s': give a socket path or a listening "
                   "file descriptor", name);
        return NULL;
    }
    s = vu_server_alloc(cfg, main_ctx);
    /* An inherited fd stays the caller's: the server listens on a copy. */
    fd = cfg->path ? unix_socket_listen_path(cfg->path, "vhost-user", &st,
                                             errp)
                   : unix_socket_adopt_listen_fd(cfg->listen_fd, true, errp);
    if (fd < 0) {
        vu_server_free(s);
        return NULL;
    }
    s->listen_fd = fd;
    if (cfg->path) {
        s->path = g_strdup(cfg->path);
        s->path_dev = st.st_dev;
        s->path_ino = st.st_ino;
    }
    vu_set_accepting(s, true);
    return s;
}

void vu_server_free(VuServer *s)
{
    if (!s) {
        return;
    }
    assert_main_thread();
    g_assert(!s->dispatching);
    if (s->client_fd >= 0) {
        vu_client_disconnect(s);
    } else {
        /* A socketless server holds what its requests set up. */
        vu_server_forget_client(s);
    }
    vu_set_accepting(s, false);
    if (s->listen_fd >= 0) {
        close(s->listen_fd);
    }
    /* Remove the socket file only if it is still the one we created. */
    unix_socket_unlink_if_same(s->path, s->path_dev, s->path_ino);
    for (unsigned i = 0; i < s->num_queues; i++) {
        virtqueue_free(s->queues[i].vq);
    }
    g_free(s->path);
    g_free(s->name);
    g_free(s);
}

bool vu_server_has_client(const VuServer *s)
{
    assert_main_thread();
    return s->client_fd >= 0;
}

bool vu_server_dirty_logging(const VuServer *s)
{
    assert_main_thread();
    /* features is the front-end's (reset when it goes away). */
    return s->client_fd >= 0 && (s->features & (1ull << VHOST_F_LOG_ALL));
}

VirtQueue *vu_server_get_queue(VuServer *s, unsigned i)
{
    assert_main_thread();
    return i < s->num_queues ? s->queues[i].vq : NULL;
}

bool vu_server_get_queue_stats(VuServer *s, unsigned i, VirtQueueStats *out)
{
    assert_main_thread();
    if (i >= s->num_queues) {
        return false;
    }
    vu_queue_get_stats(s, i, out);
    return true;
}

bool vu_server_config_changed(VuServer *s)
{
    VhostUserHeader hdr = {
        .request = VHOST_USER_SLAVE_CONFIG_CHANGE_MSG,
        .flags = VHOST_USER_VERSION,
        .size = 0,
    };
    ssize_t n;

    assert_main_thread();
    if (s->client_fd < 0 || s->slave_fd < 0) {
        return false;
    }
    do {
        /* Never block the main loop on a front-end that does not read. */
        n = send(s->slave_fd, &hdr, sizeof(hdr), MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n == sizeof(hdr)) {
        SPINDLE_TRACE0(vu_config_changed);
        return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        vu_log(s, "back-end channel full: config-change notice dropped (the "
               "front-end sees the new config at its next GET_CONFIG)");
        return false;
    }
    if (n < 0) {
        vu_log(s, "cannot send a config-change notice on the back-end "
               "channel: %s; channel closed", g_strerror(errno));
    } else {
        vu_log(s, "back-end channel took %zd of %zu bytes of a message; "
               "channel closed", n, sizeof(hdr));
    }
    vu_close_slave_channel(s);
    return false;
}

/*
 * The vhost-user export base: what the vhost-user export types
 * (vhost-user-blk, vhost-user-scsi) share, their address and the server on
 * it.
 *
 * The options they share: inflight-tracking=on|off (offer
 * VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD, on by default, so that a restart
 * finishes the requests a crashed process had taken), and the address.
 * The address is qemu-storage-daemon's SocketAddress restricted to what
 * vhost-user can use: addr.type=unix,addr.path=PATH (a socket the server
 * creates) or addr.type=fd,addr.str=N (a listening UNIX socket inherited
 * as fd N) or addr.str=NAME (the socket systemd passed under that name:
 * util/listen-fds.h).  Parsing only checks, it changes nothing: an
 * inherited fd must be open and a listening UNIX stream socket; the
 * server listens on a duplicate.  A numbered fd is the export's and is
 * closed once the server has its duplicate; a named one stays open (the
 * table's), so that the name works again for a later export.  Each
 * type's state starts with a VhostUserExport, so that starting, stopping
 * and the queue statistics are the same code for all.
 *
 * Threads: main thread.
 */
#include <fcntl.h>
#include <limits.h>
#include <sys/socket.h>
#include <unistd.h>
#include <glib.h>

#include "export/export-int.h"
#include "util/cutils.h"
#include "util/listen-fds.h"
#include "util/main-thread.h"

/* What an inherited fd must be, socket option by socket option. */
static const struct {
    int option;                  /* SOL_SOCKET level */
    int value;                   /* what it must read */
    const char *what;            /* "fd N is not ..." */
} vhost_user_fd_checks[] = {
    { SO_DOMAIN, AF_UNIX, "a UNIX domain socket" },
    { SO_TYPE, SOCK_STREAM, "a stream socket" },
    { SO_ACCEPTCONN, 1, "listening (call listen() on it before starting "
      "spindle)" },
};

/* An inherited fd must be an open, listening UNIX stream socket. */
static bool vhost_user_check_fd(int fd, Error **errp)
{
    if (fcntl(fd, F_GETFD) < 0) {
        error_setg(errp, "Parameter 'addr.str': fd %d is not open (the "
                   "parent must pass it to spindle)", fd);
        return false;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(vhost_user_fd_checks); i++) {
        int val;
        socklen_t len = sizeof(val);

        if (getsockopt(fd, SOL_SOCKET, vhost_user_fd_checks[i].option, &val,
                       &len) < 0 || val != vhost_user_fd_checks[i].value) {
            error_setg(errp, "Parameter 'addr.str': fd %d is not %s", fd,
                       vhost_user_fd_checks[i].what);
            return false;
        }
    }
    return true;
}

static bool vhost_user_export_parse_addr(Opts *opts, VhostUserExport *vu,
                                         Error **errp)
{
    static const char *const types[] = {
        "unix", "fd", "inet", "vsock", NULL
    };
    g_autoptr(Opts) addr = opts_get_child(opts, "addr");
    const char *str;
    int fd;
    int type;

    if (!addr) {
        if (opts_has(opts, "addr")) {
            error_setg(errp, "Parameter 'addr' expects an object: "
                       "addr.type=unix,addr.path=PATH or "
                       "addr.type=fd,addr.str=FD");
        } else {
            error_setg(errp, "Parameter 'addr' is missing: give "
                       "addr.type=unix,addr.path=PATH or "
                       "addr.type=fd,addr.str=FD");
        }
        return false;
    }
    if (!opts_get_enum(addr, "type", types, -1, &type, errp)) {
        return false;
    }
    switch (type) {
    case -1:
        error_setg(errp, "Parameter 'addr.type' is missing (unix or fd)");
        return false;
    case 0:
        if (!opts_get_str(addr, "path", NULL, &str, errp)) {
            return false;
        }
        if (!str || !*str) {
            error_setg(errp, "Parameter 'addr.path' is missing (the socket "
                       "to create)");
            return false;
        }
        vu->path = g_strdup(str);
        break;
    case 1:
        if (!opts_get_str(addr, "str", NULL, &str, errp)) {
            return false;
        }
        if (!str) {
            error_setg(errp, "Parameter 'addr.str' is missing (the number "
                       "of an inherited listening socket, or the name "
                       "systemd passed it under)");
            return false;
        }
        fd = listen_fds_lookup("addr.str", str, &vu->listen_fd_borrowed,
                               errp);
        if (fd < 0 || !vhost_user_check_fd(fd, errp)) {
            return false;
        }
        vu->listen_fd = fd;
        break;
    default:
        error_setg(errp, "Parameter 'addr.type': vhost-user needs a UNIX "
                   "domain socket; use addr.type=unix or addr.type=fd");
        return false;
    }
    return opts_check_unused(addr, NULL, errp);
}

bool vhost_user_export_parse(Opts *opts, VhostUserExport *vu, Error **errp)
{
    return vhost_user_export_parse_addr(opts, vu, errp) &&
           opts_get_bool(opts, "inflight-tracking", true,
                         &vu->inflight_tracking, errp);
}

/* VuServerConfig.event: the server's news, as the export's events. */
static void vhost_user_export_event(void *opaque, VuServerEvent ev,
                                    unsigned queue, unsigned count)
{
    static const char *const names[] = {
        [VU_EVENT_CONNECTED] = "BLOCK_EXPORT_CONNECTED",
        [VU_EVENT_DISCONNECTED] = "BLOCK_EXPORT_DISCONNECTED",
        [VU_EVENT_RESUBMITTED] = "BLOCK_EXPORT_RESUBMITTED",
    };
    VhostUserExport *vu = opaque;
    bool per_queue = ev == VU_EVENT_RESUBMITTED;

    g_assert(ev < G_N_ELEMENTS(names));
    export_emit_event(names[ev], vu->id, per_queue ? (int)queue : -1,
                      per_queue ? (int)count : -1);
}

/* VuServerConfig.rings_running: the hand-over (export.c). */
static bool vhost_user_export_rings_running(void *opaque, bool running,
                                            bool migrating, Error **errp)
{
    return export_set_running(opaque, running, migrating, errp);
}

bool vhost_user_export_serve(VhostUserExport *vu, Export *exp,
                             unsigned num_queues, const VuDevOps *ops,
                             void *dev, Error **errp)
{
    VuServerConfig cfg = {
        .path = vu->path,
        .listen_fd = vu->listen_fd,
        .num_queues = num_queues,
        .max_queue_size = VIRTQUEUE_MAX_SIZE,
        .ctxs = exp->ctxs,
        .nctx = exp->nctx,
        .ops = ops,
        .dev = dev,
        .name = exp->id,
        .inflight_tracking = vu->inflight_tracking,
        .event = vhost_user_export_event,
        .event_opaque = vu,
        .rings_running = vhost_user_export_rings_running,
        .rings_opaque = exp,
    };

    assert_main_thread();
    vu->id = g_strdup(exp->id);
    vu->server = vu_server_new(&cfg, exp->main_ctx, errp);
    if (!vu->server) {
        return false;
    }
    if (vu->listen_fd >= 0) {
        /* The server listens on a duplicate; the one we were given is ours
         * to close, unless systemd's table keeps it. */
        if (!vu->listen_fd_borrowed) {
            close(vu->listen_fd);
        }
        vu->listen_fd = -1;
    }
    return true;
}

void vhost_user_export_stop(VhostUserExport *vu)
{
    assert_main_thread();
    if (vu->server) {
        vu_server_free(vu->server);
        vu->server = NULL;
    }
    g_clear_pointer(&vu->path, g_free);
    g_clear_pointer(&vu->id, g_free);
}

bool vhost_user_export_queue_stats(void *state, unsigned i,
                                   VirtQueueStats *out)
{
    VhostUserExport *vu = state;

    return vu_server_get_queue_stats(vu->server, i, out);
}

bool vhost_user_export_has_client(void *state)
{
    VhostUserExport *vu = state;

    return vu->server && vu_server_has_client(vu->server);
}

/*
 * The `nbd` block driver: an export of an NBD server, through libnbd.
 *
 * Theory of operation.
 *
 * Options are QEMU's: server.type=unix (server.path) or inet (server.host,
 * server.port, default 10809), export (default ""), reconnect-delay
 * (seconds, default 0).  Open (main thread) resolves the address once (a
 * host name is looked up here, never again), connects with a bounded wait
 * and reads what the server offers: the size, whether the export is
 * read-only (a writable node on it is refused), FLUSH, FUA, TRIM,
 * WRITE_ZEROES, multi-conn and the block sizes.  All of that is fixed for
 * the node's life: a reconnection that finds another size fails.
 *
 * Connections.  A libnbd handle belongs to one thread at a time, so each
 * AioContext the node is used from has its own connection (NbdConn), which
 * every BlockQueue of that context shares (attach_queue takes a reference,
 * detach_queue drops it).  The handle made at open is kept as the node's
 * spare while no context uses it; the first context to attach takes it,
 * and the last queue of a context to go hands a healthy handle back, so a
 * node that moves between contexts keeps its one connection.  Another
 * context opens a connection of its own (asynchronously, in its thread)
 * only when the server offers multi-conn, which promises that a flush on
 * one connection covers writes done on all; without it a second context
 * could not keep the node consistent, so its requests fail with EIO and
 * one log line says why (an export over such a server needs one IOThread).
 *
 * Requests.  libnbd 1.14 takes one buffer per command, so a READ or WRITE
 * is one command per element of its iovec (cut at max_chunk): no copy,
 * and no allocation of ours (libnbd allocates a small record per
 * command, and frees it when the command is answered).  The node's alignments are the server's minimum block
 * size, so every element of an aligned request is aligned too (the
 * generic layer bounces the rest).  DISCARD is TRIM when offered, else
 * nothing (discard is a hint); WRITE_ZEROES is the server's WRITE_ZEROES
 * (NO_HOLE unless the request may unmap and the node has discard=unmap),
 * else WRITEs from a shared zeroed buffer, as the file driver does; FLUSH
 * is NBD's FLUSH, and a no-op when the server does not offer it (the NBD
 * protocol then says its writes are stable when answered); a FUA write
 * carries NBD's FUA, or is followed by a FLUSH on a server that can flush
 * but not FUA.  Per request, the commands not yet answered and the first
 * error are kept in the request (block_req_int(req)->engine.nbd).
 *
 * The loop.  The connection's socket is watched by the context with the
 * directions libnbd asks for (nbd_aio_get_direction(), re-read after
 * every call into libnbd and changed only when it differs, so one
 * epoll_ctl per change, none per request).  Readable: nbd_aio_notify_read()
 * reads the replies; writable (libnbd could not send all at once):
 * nbd_aio_notify_write().  libnbd calls each command's completion callback
 * with its lock held, where nothing may call into libnbd again: the
 * callback only counts the command done and, for the request's last one,
 * queues the request on conn->done; the requests there complete after
 * libnbd has returned (nbd_conn_complete_done()), so a completion that
 * submits again, or runs a nested loop, finds libnbd free.
 *
 * Polling.  There is no shared ring to read: while the poll window is open
 * and commands are in flight, io_poll asks the kernel whether the socket
 * has bytes waiting with a one-byte recv(MSG_PEEK | MSG_DONTWAIT), about
 * as costly as any small system call (a few hundred ns per look), and with
 * nothing in flight it answers no without one.  A reply found that way is
 * read through the same path as one that woke the loop.  No notification
 * is suppressed, so there are no poll_begin/end hooks.
 *
 * Connection loss.  A reply that never comes because the server closed or
 * the socket failed retires every command with ENOTCONN; those requests,
 * and the requests that come while the connection is down, then wait or
 * fail, as QEMU's nbd driver does: for reconnect-delay seconds after the
 * loss they wait (and are sent again, whole, once reconnected: a READ,
 * WRITE or FLUSH may be repeated safely); after that, or at once with
 * reconnect-delay=0, they fail with EIO until a connection is back.
 * Meanwhile the connection tries again in the background: a timer in the
 * context starts a nonblocking connection (nbd_aio_connect() to the
 * address resolved at open) once at the loss and then every second (an
 * attempt whose handshake is not done in 30 s is given up), never a
 * blocking connect on the loop.  Each loss, giving up waiting and
 * reconnection is one log line.  Anything else the server answers (EIO,
 * ENOSPC, ...) is that request's error.  Nothing the server does stops the
 * daemon: malformed replies are libnbd's to detect (the connection dies).
 *
 * Threads: open, close, getlength and truncate run in the main thread;
 * everything of an NbdConn in its context's home thread.  NbdState is
 * fixed after open but for conns and spare, which attach and detach
 * (in several threads) change under its lock.
 */
#include "config-host.h"
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <libnbd.h>
#include "block/block-int.h"
#include "util/clock.h"
#include "util/cutils.h"

#define NBD_DEFAULT_PORT 10809

/* The largest READ/WRITE command: what the NBD protocol lets a client
 * send without a maximum block size from the server. */
#define NBD_MAX_RW_CHUNK (32 * 1024 * 1024)

/* The largest TRIM or WRITE_ZEROES command (its length is 32-bit). */
#define NBD_MAX_ZERO_CHUNK (1024 * 1024 * 1024)

/* Write-zeroes without the server's WRITE_ZEROES: writes of this buffer. */
#define NBD_ZERO_BUF_SIZE (1024 * 1024)

#define NBD_OPEN_TIMEOUT_NS (30 * (int64_t)1000000000)
#define NBD_RECONNECT_INTERVAL_NS ((int64_t)1000000000)

/* Never written: the data of emulated write-zeroes (in .bss). */
static char nbd_zero_buf[NBD_ZERO_BUF_SIZE];

typedef struct NbdConn NbdConn;

typedef struct NbdState {
    /* Fixed after open. */
    BlockNode *bs;
    char *export;
    char *where;                 /* "unix:PATH" or "inet:HOST:PORT" */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int64_t reconnect_delay_ns;
    int64_t size;
    bool can_flush, can_fua, can_trim, can_zero, multi_conn;
    uint64_t max_chunk;          /* READ/WRITE command size limit */

    GMutex lock;                 /* conns, spare */
    BlockCtxEntry *conns;        /* NbdConn: one per context in use */
    struct nbd_handle *spare;    /* connected, in no context */
} NbdState;

typedef enum NbdConnState {
    NBD_CONN_CONNECTING,         /* nbd_aio_connect() under way */
    NBD_CONN_READY,
    NBD_CONN_DOWN,               /* lost; retry_timer tries again */
    NBD_CONN_REFUSED,            /* a second context, no multi-conn */
} NbdConnState;

/* One connection of a node, for the queues of one context. */
struct NbdConn {
    BlockCtxEntry link;          /* first: its context, in s->conns */
    NbdState *s;

    /* The rest: ctx's home thread only. */
    struct nbd_handle *h;        /* NULL while down */
    int fd;                      /* watched in ctx, -1: none */
    unsigned dir;                /* the directions watched */
    NbdConnState state;
    bool failing;                /* down past reconnect-delay: fail at once */
    bool reported;               /* the loss was logged */
    const char *refusal;         /* the mismatch logged in this loss */
    unsigned in_flight;          /* commands sent, not answered */
    uint64_t done_count;         /* commands answered (poll counts) */
    BlockReqFifo done;           /* answered, to complete */
    BlockReqFifo waiting;        /* for the connection to come back */
    QEMUBH *done_bh;             /* completes conn->done (from submit) */
    AioTimer retry_timer;        /* the next connection attempt */
    AioTimer give_up_timer;      /* reconnect-delay after the loss */
};

typedef __typeof__(((BlockRequestInt *)0)->engine.nbd) NbdReq;

static NbdReq *nbd_req(BlockRequest *req)
{
    return &block_req_int(req)->engine.nbd;
}

static void nbd_conn_update_handler(NbdConn *c);
static void nbd_conn_complete_done(NbdConn *c);
static void nbd_conn_start(NbdConn *c, BlockRequest *req);

/* ------------------------------------------------------------------------ */
/* Options and the address (main thread)                                     */

static bool nbd_unix_addr(NbdState *s, const char *path, Error **errp)
{
    struct sockaddr_un *sun = (struct sockaddr_un *)&s->addr;

    if (!path) {
        error_setg(errp, "Parameter 'server.path' is missing "
                   "(server.type=unix)");
        return false;
    }
    if (!path[0] || strlen(path) >= sizeof(sun->sun_path)) {
        error_setg(errp, "Parameter 'server.path': a UNIX socket path has "
                   "1 to %zu bytes", sizeof(sun->sun_path) - 1);
        return false;
    }
    sun->sun_family = AF_UNIX;
    strcpy(sun->sun_path, path);
    s->addrlen = sizeof(*sun);
    s->where = g_strdup_printf("unix:%s", path);
    return true;
}

/* The first address of host:port; tried at open, kept for reconnects. */
static bool nbd_inet_addr(NbdState *s, const char *host, int64_t port,
                          Error **errp)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
    struct addrinfo *res = NULL;
    char service[16];
    int r;

    if (!host || !host[0]) {
        error_setg(errp, "Parameter 'server.host' is missing "
                   "(server.type=inet)");
        return false;
    }
    snprintf(service, sizeof(service), "%" PRId64, port);
    r = getaddrinfo(host, service, &hints, &res);
    if (r) {
        error_setg(errp, "Parameter 'server.host': cannot resolve '%s': %s",
                   host, gai_strerror(r));
        return false;
    }
    memcpy(&s->addr, res->ai_addr, res->ai_addrlen);
    s->addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    s->where = g_strdup_printf("inet:%s:%" PRId64, host, port);
    return true;
}

static bool nbd_read_opts(NbdState *s, Opts *opts, Error **errp)
{
    static const char *const types[] = { "unix", "inet", NULL };
    const char *path, *host, *export;
    int64_t port, delay;
    int type;

    if (!opts_has(opts, "server.type")) {
        error_setg(errp, "Parameter 'server.type' is missing (unix or inet)");
        return false;
    }
    if (!opts_get_enum(opts, "server.type", types, 0, &type, errp) ||
        !opts_get_str(opts, "server.path", NULL, &path, errp) ||
        !opts_get_str(opts, "server.host", NULL, &host, errp) ||
        !opts_get_int(opts, "server.port", 1, 65535, NBD_DEFAULT_PORT, &port,
                      errp) ||
        !opts_get_str(opts, "export", "", &export, errp) ||
        !opts_get_int(opts, "reconnect-delay", 0, UINT32_MAX, 0, &delay,
                      errp)) {
        return false;
    }
    if (type == 0 && (host || opts_has(opts, "server.port"))) {
        error_setg(errp, "Parameter 'server.%s' is for server.type=inet",
                   host ? "host" : "port");
        return false;
    }
    if (type == 1 && path) {
        error_setg(errp, "Parameter 'server.path' is for server.type=unix");
        return false;
    }
    if (strlen(export) > 4096) {
        error_setg(errp, "Parameter 'export': at most 4096 bytes");
        return false;
    }
    s->export = g_strdup(export);
    s->reconnect_delay_ns = delay * (int64_t)1000000000;
    return type == 0 ? nbd_unix_addr(s, path, errp)
                     : nbd_inet_addr(s, host, port, errp);
}

/* ------------------------------------------------------------------------ */
/* Handles                                                                   */

/* A new handle, connecting (nonblocking) to the node's server.  NULL and
 * *msg (static or libnbd's) if it cannot even start.  Any thread. */
static struct nbd_handle *nbd_handle_start(NbdState *s, const char **msg)
{
    struct nbd_handle *h = nbd_create();

    if (!h) {
        *msg = nbd_get_error();
        return NULL;
    }
    /* Reads are answered in full or fail: libnbd need not zero them. */
    if (nbd_set_export_name(h, s->export) < 0 ||
        nbd_set_pread_initialize(h, false) < 0 ||
        nbd_aio_connect(h, (struct sockaddr *)&s->addr, s->addrlen) < 0) {
        *msg = nbd_get_error();
        nbd_close(h);
        return NULL;
    }
    return h;
}

/* Whether the connection of h is gone (the server closed, a socket
 * error, a reply libnbd could not make sense of). */
static bool nbd_handle_dead(struct nbd_handle *h)
{
    return nbd_aio_is_dead(h) || nbd_aio_is_closed(h);
}

/* Close h without waiting: ask the server to end politely if we can. */
static void nbd_handle_close(struct nbd_handle *h)
{
    if (h && nbd_aio_is_ready(h)) {
        nbd_aio_disconnect(h, 0);
    }
    nbd_close(h);
}

static const char *nbd_error_or(const char *fallback)
{
    const char *msg = nbd_get_error();

    return msg ? msg : fallback;
}

/*
 * Wait up to ms for h's socket and tell libnbd what came.  (Not
 * nbd_poll(): it reports a refused connection as a read, which libnbd
 * 1.14 rejects while connecting, and loses the reason.)  False: time out.
 */
static bool nbd_handle_wait(struct nbd_handle *h, int ms)
{
    unsigned dir = nbd_aio_get_direction(h);
    struct pollfd pfd = {
        .fd = nbd_aio_get_fd(h),
        .events = (dir & LIBNBD_AIO_DIRECTION_READ ? POLLIN : 0) |
                  (dir & LIBNBD_AIO_DIRECTION_WRITE ? POLLOUT : 0),
    };
    int r = pfd.fd >= 0 ? poll(&pfd, 1, ms) : -1;

    if (r <= 0) {
        return r < 0 && errno == EINTR;
    }
    if ((pfd.revents & POLLIN) ||
        ((pfd.revents & (POLLHUP | POLLERR)) &&
         !(dir & LIBNBD_AIO_DIRECTION_WRITE))) {
        nbd_aio_notify_read(h);
    } else {
        nbd_aio_notify_write(h);     /* a refused connect: POLLERR */
    }
    return true;
}

/* The connection of open: connect and wait for the handshake, at most
 * NBD_OPEN_TIMEOUT_NS.  Main thread. */
static struct nbd_handle *nbd_connect_blocking(NbdState *s, Error **errp)
{
    int64_t deadline = clock_now_ns() + NBD_OPEN_TIMEOUT_NS;
    const char *msg = NULL;
    struct nbd_handle *h = nbd_handle_start(s, &msg);

    while (h && nbd_aio_is_connecting(h)) {
        int64_t left_ms = (deadline - clock_now_ns()) / 1000000;

        if (left_ms <= 0 || (!nbd_handle_wait(h, (int)MIN(left_ms, 1000)) &&
                             clock_now_ns() >= deadline)) {
            msg = "timed out waiting for the handshake";
            break;
        }
    }
    if (h && nbd_aio_is_ready(h)) {
        return h;
    }
    if (!msg) {
        msg = nbd_error_or("the connection failed");
    }
    error_setg(errp, "Cannot connect to the NBD server at %s (export '%s'): "
               "%s", s->where, s->export, msg);
    if (h) {
        nbd_close(h);
    }
    return NULL;
}

/* What a connection must offer to serve bs: the size it was opened with,
 * writable if bs is.  NULL, or what is wrong (static). */
static const char *nbd_handle_mismatch(NbdState *s, struct nbd_handle *h)
{
    if (nbd_get_size(h) != s->size) {
        return "the export's size changed";
    }
    if (!block_node_is_read_only(s->bs) && nbd_is_read_only(h) != 0) {
        return "the export is read-only now";
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Issuing commands (conn's home thread)                                     */

/* libnbd's completion callback, with its lock held: count, queue. */
static int nbd_command_done(void *opaque, int *error)
{
    BlockRequest *req = opaque;
    NbdReq *r = nbd_req(req);
    NbdConn *c = r->conn;

    c->in_flight--;
    c->done_count++;
    if (*error == ENOTCONN) {
        r->lost = true;          /* not a server's answer: see the top */
    } else if (*error && !r->ret) {
        r->ret = -*error;
    }
    if (--r->parts == 0) {
        block_req_fifo_push(&c->done, req);
    }
    return 1;                    /* retired */
}

typedef enum NbdCmd {
    NBD_SEND_READ, NBD_SEND_WRITE, NBD_SEND_FLUSH, NBD_SEND_TRIM,
    NBD_SEND_ZERO,
} NbdCmd;

/* Send one command of req; on failure to send, note its error.  Returns
 * false if nothing more should be sent for req. */
static bool nbd_send(NbdConn *c, BlockRequest *req, NbdCmd cmd, void *buf,
                     uint64_t len, uint64_t offset, uint32_t flags)
{
    nbd_completion_callback cb = { .callback = nbd_command_done,
                                   .user_data = req };
    NbdReq *r = nbd_req(req);
    int64_t cookie = -1;

    r->parts++;
    c->in_flight++;
    switch (cmd) {
    case NBD_SEND_READ:
        cookie = nbd_aio_pread(c->h, buf, len, offset, cb, flags);
        break;
    case NBD_SEND_WRITE:
        cookie = nbd_aio_pwrite(c->h, buf, len, offset, cb, flags);
        break;
    case NBD_SEND_FLUSH:
        cookie = nbd_aio_flush(c->h, cb, flags);
        break;
    case NBD_SEND_TRIM:
        cookie = nbd_aio_trim(c->h, len, offset, cb, flags);
        break;
    case NBD_SEND_ZERO:
        cookie = nbd_aio_zero(c->h, len, offset, cb, flags);
        break;
    }
    if (cookie >= 0) {
        return true;
    }
    /* Not sent, so libnbd will not call the callback. */
    r->parts--;
    c->in_flight--;
    if (nbd_handle_dead(c->h)) {
        r->lost = true;
    } else if (!r->ret) {
        r->ret = nbd_get_errno() ? -nbd_get_errno() : -EIO;
    }
    return false;
}

/* Commands of at most max bytes over [offset, offset + bytes), data from
 * buf (advanced) when buf is not NULL; rep: a buffer to send again for
 * every command (the zero buffer). */
static bool nbd_send_range(NbdConn *c, BlockRequest *req, NbdCmd cmd,
                           char *buf, bool rep, uint64_t offset,
                           uint64_t bytes, uint64_t max, uint32_t flags)
{
    while (bytes > 0) {
        uint64_t len = MIN(bytes, max);

        if (!nbd_send(c, req, cmd, buf, len, offset, flags)) {
            return false;
        }
        if (buf && !rep) {
            buf += len;
        }
        offset += len;
        bytes -= len;
    }
    return true;
}

/* Whether req is a write that must be stable when answered. */
static bool nbd_req_fua(NbdState *s, BlockRequest *req)
{
    return (req->op == BLOCK_OP_WRITE || req->op == BLOCK_OP_WRITE_ZEROES) &&
           (req->flags & BLOCK_REQ_FUA) && !s->bs->no_flush;
}

/* The command flags of req's WRITE or WRITE_ZEROES commands. */
static uint32_t nbd_write_flags(NbdState *s, BlockRequest *req)
{
    uint32_t flags = nbd_req_fua(s, req) && s->can_fua ?
                     LIBNBD_CMD_FLAG_FUA : 0;

    if (req->op == BLOCK_OP_WRITE_ZEROES &&
        !((req->flags & BLOCK_REQ_MAY_UNMAP) && s->bs->discard_unmap)) {
        flags |= LIBNBD_CMD_FLAG_NO_HOLE;    /* the server must not unmap */
    }
    return flags;
}

/* Send req's commands (the connection is ready). */
static void nbd_send_request(NbdConn *c, BlockRequest *req)
{
    NbdState *s = c->s;
    NbdReq *r = nbd_req(req);
    uint32_t flags = nbd_write_flags(s, req);
    uint64_t off = req->offset;
    bool rd = req->op == BLOCK_OP_READ;

    *r = (NbdReq) { .conn = c, .parts = 1 };   /* 1: until all are sent */
    r->then_flush = nbd_req_fua(s, req) && !s->can_fua && s->can_flush;
    switch (req->op) {
    case BLOCK_OP_READ:
    case BLOCK_OP_WRITE:
        for (int i = 0; i < req->niov; i++) {
            if (!nbd_send_range(c, req, rd ? NBD_SEND_READ : NBD_SEND_WRITE,
                                req->iov[i].iov_base, false, off,
                                req->iov[i].iov_len, s->max_chunk,
                                rd ? 0 : flags)) {
                break;
            }
            off += req->iov[i].iov_len;
        }
        break;
    case BLOCK_OP_FLUSH:
        if (s->can_flush) {
            nbd_send(c, req, NBD_SEND_FLUSH, NULL, 0, 0, 0);
        }
        break;
    case BLOCK_OP_DISCARD:
        if (s->can_trim) {
            nbd_send_range(c, req, NBD_SEND_TRIM, NULL, false, off,
                           req->bytes, NBD_MAX_ZERO_CHUNK, 0);
        }
        break;
    case BLOCK_OP_WRITE_ZEROES:
        if (s->can_zero) {
            nbd_send_range(c, req, NBD_SEND_ZERO, NULL, false, off,
                           req->bytes, NBD_MAX_ZERO_CHUNK, flags);
        } else {
            nbd_send_range(c, req, NBD_SEND_WRITE, nbd_zero_buf, true, off,
                           req->bytes, MIN(s->max_chunk, NBD_ZERO_BUF_SIZE),
                           flags & LIBNBD_CMD_FLAG_FUA);
        }
        break;
    }
    if (--r->parts == 0) {
        /* Nothing was sent, or everything sent was answered already. */
        block_req_fifo_push(&c->done, req);
    }
    if (c->done.head) {
        /* Ours, or requests a connection that died in this send gave up
         * (libnbd retires them inside the call): never inside submit. */
        aio_bh_schedule(c->done_bh);
    }
}

/* ------------------------------------------------------------------------ */
/* Completing (conn's home thread)                                           */

static void nbd_conn_check(NbdConn *c, const char *why);

/* The request failed for want of a connection: wait or fail. */
static void nbd_conn_hold(NbdConn *c, BlockRequest *req)
{
    nbd_conn_check(c, NULL);
    if (c->state == NBD_CONN_READY) {
        /* Back already (a nested loop reconnected): send it again. */
        nbd_send_request(c, req);
    } else if (c->failing || c->state == NBD_CONN_REFUSED) {
        block_request_complete(req, -EIO);
    } else {
        block_req_fifo_push(&c->waiting, req);
    }
}

/* One request whose commands were all answered. */
static void nbd_conn_finish(NbdConn *c, BlockRequest *req)
{
    NbdReq *r = nbd_req(req);

    if (r->lost || (r->ret == 0 && r->then_flush &&
                    c->state != NBD_CONN_READY)) {
        /* (A write whose FLUSH cannot go out now is done again whole.) */
        nbd_conn_hold(c, req);
    } else if (r->ret == 0 && r->then_flush) {
        /* The write is answered; now its FLUSH (FUA without FUA). */
        *r = (NbdReq) { .conn = c, .parts = 1 };
        nbd_send(c, req, NBD_SEND_FLUSH, NULL, 0, 0, 0);
        if (--r->parts == 0) {
            nbd_conn_finish(c, req);
        }
    } else {
        block_request_complete(req, r->ret);
    }
}

/* Complete what was answered; one at a time, as a completion may run a
 * nested loop that completes some too. */
static void nbd_conn_complete_done(NbdConn *c)
{
    BlockRequest *req;

    block_acct_batch_begin();
    while ((req = block_req_fifo_pop(&c->done)) != NULL) {
        nbd_conn_finish(c, req);
    }
    block_acct_batch_end();
    nbd_conn_update_handler(c);
}

static void nbd_conn_progress(NbdConn *c, int r);

static void nbd_conn_done_bh(void *opaque)
{
    nbd_conn_progress(opaque, 0);
}

/* Fail every waiting request with EIO. */
static void nbd_conn_fail_waiting(NbdConn *c)
{
    BlockRequest *req;

    block_acct_batch_begin();
    while ((req = block_req_fifo_pop(&c->waiting)) != NULL) {
        block_request_complete(req, -EIO);
    }
    block_acct_batch_end();
}

/* ------------------------------------------------------------------------ */
/* The connection's life (conn's home thread)                                */

static const char *nbd_node_name(NbdConn *c)
{
    return block_node_get_name(c->s->bs);
}

static void nbd_conn_read(void *opaque);
static void nbd_conn_write(void *opaque);
static bool nbd_conn_poll(void *opaque);
static void nbd_conn_counts(void *opaque, AioPollCounts *counts);

/* Watch the socket in the directions libnbd wants now. */
static void nbd_conn_update_handler(NbdConn *c)
{
    bool live = c->h && (c->state == NBD_CONN_READY ||
                         c->state == NBD_CONN_CONNECTING);
    int fd = live ? nbd_aio_get_fd(c->h) : -1;
    unsigned dir = fd >= 0 ? nbd_aio_get_direction(c->h) &
                             LIBNBD_AIO_DIRECTION_BOTH : 0;
    bool rd = dir & LIBNBD_AIO_DIRECTION_READ;

    if (fd == c->fd && dir == c->dir) {
        return;
    }
    if (c->fd >= 0 && c->fd != fd) {
        aio_set_fd_handler(c->link.ctx, c->fd, NULL, NULL, NULL, NULL, NULL);
    }
    c->fd = dir ? fd : -1;
    c->dir = dir;
    if (!dir) {
        if (fd >= 0) {
            aio_set_fd_handler(c->link.ctx, fd, NULL, NULL, NULL, NULL,
                               NULL);
        }
        return;
    }
    /* Polling needs a read handler (what it finds must be able to wake
     * the loop too): while libnbd only wants to write (a connection
     * being made), the context does not poll. */
    aio_set_fd_handler(c->link.ctx, fd, rd ? nbd_conn_read : NULL,
                       dir & LIBNBD_AIO_DIRECTION_WRITE ? nbd_conn_write
                                                        : NULL,
                       rd ? nbd_conn_poll : NULL, NULL, c);
    aio_set_fd_handler_name(c->link.ctx, fd, "nbd");
    if (rd) {
        aio_set_fd_poll_counts(c->link.ctx, fd, nbd_conn_counts);
    }
}

static void nbd_conn_drop_handle(NbdConn *c)
{
    if (c->fd >= 0) {
        aio_set_fd_handler(c->link.ctx, c->fd, NULL, NULL, NULL, NULL, NULL);
        c->fd = -1;
        c->dir = 0;
    }
    nbd_handle_close(c->h);
    c->h = NULL;
}

/* Reconnect-delay is over: stop waiting. */
static void nbd_conn_give_up_cb(void *opaque)
{
    NbdConn *c = opaque;

    c->failing = true;
    error_report("node '%s': no reconnection to the NBD server at %s within "
                 "reconnect-delay: requests fail with EIO until it is back",
                 nbd_node_name(c), c->s->where);
    nbd_conn_fail_waiting(c);
}

/* The connection is gone (or could not be made): close the handle, let
 * the requests wait or fail, and try again. */
static void nbd_conn_lost(NbdConn *c, const char *why, int64_t retry_ns)
{
    nbd_conn_drop_handle(c);
    c->state = NBD_CONN_DOWN;
    if (!c->reported) {
        c->reported = true;
        c->failing = c->s->reconnect_delay_ns == 0;
        error_report("node '%s': lost the connection to the NBD server at "
                     "%s: %s; %s", nbd_node_name(c), c->s->where, why,
                     c->failing ? "requests fail with EIO until it is back"
                                : "requests wait for reconnect-delay");
        if (!c->failing) {
            aio_timer_mod(&c->give_up_timer,
                          add_sat_int64(clock_now_ns(),
                                        c->s->reconnect_delay_ns));
        }
    }
    if (c->failing) {
        nbd_conn_fail_waiting(c);
    }
    aio_timer_mod(&c->retry_timer, add_sat_int64(clock_now_ns(), retry_ns));
}

static void nbd_conn_ready(NbdConn *c)
{
    const char *bad = nbd_handle_mismatch(c->s, c->h);
    BlockRequest *req;

    if (bad) {
        if (c->reported && bad != c->refusal) {
            error_report("node '%s': the NBD server at %s is back, but %s: "
                         "not using it", nbd_node_name(c), c->s->where, bad);
            c->refusal = bad;
        }
        nbd_conn_lost(c, bad, NBD_RECONNECT_INTERVAL_NS);
        return;
    }
    c->state = NBD_CONN_READY;
    aio_timer_del(&c->retry_timer);
    if (c->reported) {
        error_report("node '%s': reconnected to the NBD server at %s",
                     nbd_node_name(c), c->s->where);
    }
    c->reported = false;
    c->refusal = NULL;
    c->failing = false;
    aio_timer_del(&c->give_up_timer);
    while ((req = block_req_fifo_pop(&c->waiting)) != NULL) {
        nbd_send_request(c, req);
    }
}

/*
 * Follow libnbd's state: a handshake that ended, a connection that died.
 * why: libnbd's message if the call that moved it failed, else NULL (its
 * last message may be an old one then).
 */
static void nbd_conn_check(NbdConn *c, const char *why)
{
    if (c->state == NBD_CONN_CONNECTING && !nbd_aio_is_connecting(c->h)) {
        if (nbd_aio_is_ready(c->h)) {
            nbd_conn_ready(c);
        } else {
            nbd_conn_lost(c, why ? why : "the connection failed",
                          NBD_RECONNECT_INTERVAL_NS);
        }
    } else if (c->state == NBD_CONN_READY && nbd_handle_dead(c->h)) {
        /* Try again at once: the server may be back already (a restart). */
        nbd_conn_lost(c, why ? why : "the server closed the connection", 0);
    }
}

/* After every call into libnbd that may have moved its state; r: what
 * it returned. */
static void nbd_conn_progress(NbdConn *c, int r)
{
    nbd_conn_check(c, r < 0 ? nbd_get_error() : NULL);
    nbd_conn_complete_done(c);
}

static void nbd_conn_write(void *opaque)
{
    NbdConn *c = opaque;

    nbd_conn_progress(c, nbd_aio_notify_write(c->h));
}

/* Bytes waiting on the socket (see the top of the file). */
static bool nbd_conn_poll(void *opaque)
{
    NbdConn *c = opaque;
    char byte;

    if (c->in_flight == 0 || c->state != NBD_CONN_READY) {
        return false;
    }
    /* 0 (the server closed) counts: reading finds out. */
    return recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) >= 0;
}

/*
 * Readable: read replies while more wait.  libnbd reads one reply per call
 * (back in its ready state it stops, not knowing whether more bytes
 * wait), so a burst of replies would otherwise take a loop turn each.
 * Another call only in its ready state (not in the middle of sending a
 * command, or of a reply still on its way) and with bytes waiting: libnbd
 * expects a read notification only when the socket is readable.
 */
static void nbd_conn_read(void *opaque)
{
    NbdConn *c = opaque;
    uint64_t done;

    do {
        done = c->done_count;
        nbd_conn_progress(c, nbd_aio_notify_read(c->h));
    } while (c->done_count != done && c->state == NBD_CONN_READY &&
             nbd_aio_is_ready(c->h) && nbd_conn_poll(c));
}

static void nbd_conn_counts(void *opaque, AioPollCounts *counts)
{
    NbdConn *c = opaque;

    counts->pending = c->in_flight;
    counts->done = c->done_count;
}

/* Start a connection attempt (the timer, or a new context). */
static void nbd_conn_connect(NbdConn *c)
{
    const char *msg = NULL;

    c->h = nbd_handle_start(c->s, &msg);
    if (!c->h) {
        nbd_conn_lost(c, msg ? msg : "cannot start a connection",
                      NBD_RECONNECT_INTERVAL_NS);
        return;
    }
    c->state = NBD_CONN_CONNECTING;
    /* A server that accepts but never finishes the handshake: give up
     * on this attempt then (nbd_conn_retry_cb()). */
    aio_timer_mod(&c->retry_timer,
                  add_sat_int64(clock_now_ns(), NBD_OPEN_TIMEOUT_NS));
    nbd_conn_update_handler(c);
    nbd_conn_progress(c, 0);     /* a UNIX socket may be done already */
}

/* Down: the next attempt.  Connecting: the attempt took too long. */
static void nbd_conn_retry_cb(void *opaque)
{
    NbdConn *c = opaque;

    if (c->state == NBD_CONN_CONNECTING) {
        nbd_conn_lost(c, "timed out waiting for the handshake",
                      NBD_RECONNECT_INTERVAL_NS);
        nbd_conn_complete_done(c);
    } else {
        nbd_conn_connect(c);
    }
}

/* ------------------------------------------------------------------------ */
/* BlockDriver: requests and contexts                                        */

static void nbd_conn_start(NbdConn *c, BlockRequest *req)
{
    switch (c->state) {
    case NBD_CONN_READY:
        nbd_send_request(c, req);
        nbd_conn_update_handler(c);
        return;
    case NBD_CONN_REFUSED:
        block_request_complete_later(req, -EIO);
        return;
    case NBD_CONN_DOWN:
    case NBD_CONN_CONNECTING:
        if (c->failing) {
            block_request_complete_later(req, -EIO);
            return;
        }
        break;
    }
    block_req_fifo_push(&c->waiting, req);
}

static void nbd_submit(BlockNode *bs, BlockRequest *req)
{
    BlockQueue *q = block_req_queue(bs, req);

    g_assert(aio_context_in_home_thread(q->ctx));
    nbd_conn_start(q->opaque, req);
}

/* A new connection for ctx (s->lock held): the spare handle, a new
 * connection (multi-conn), or none. */
static NbdConn *nbd_conn_new(NbdState *s, AioContext *ctx)
{
    NbdConn *c = g_new0(NbdConn, 1);

    *c = (NbdConn) { .s = s, .fd = -1 };
    block_ctx_entry_add(&s->conns, &c->link, ctx);
    c->done_bh = aio_bh_new(ctx, nbd_conn_done_bh, c);
    aio_timer_init(ctx, &c->retry_timer, nbd_conn_retry_cb, c);
    aio_timer_init(ctx, &c->give_up_timer, nbd_conn_give_up_cb, c);
    if (s->spare) {
        c->h = s->spare;
        s->spare = NULL;
        c->state = NBD_CONN_READY;
        nbd_conn_update_handler(c);
    } else if (s->multi_conn || !c->link.next) {
        nbd_conn_connect(c);
    } else {
        c->state = NBD_CONN_REFUSED;
        error_report("node '%s': the NBD server at %s does not offer "
                     "multi-conn, so the node serves one IOThread only: "
                     "requests from another fail with EIO",
                     block_node_get_name(s->bs), s->where);
    }
    return c;
}

/* q->ctx's home thread. */
static void nbd_attach_queue(BlockQueue *q)
{
    NbdState *s = q->bs->opaque;
    NbdConn *c;

    g_assert(aio_context_in_home_thread(q->ctx));
    g_mutex_lock(&s->lock);
    c = (NbdConn *)block_ctx_entry_ref(s->conns, q->ctx);
    if (!c) {
        c = nbd_conn_new(s, q->ctx);
    }
    g_mutex_unlock(&s->lock);
    q->opaque = c;
}

/* q->ctx's home thread, q drained. */
static void nbd_detach_queue(BlockQueue *q)
{
    NbdState *s = q->bs->opaque;
    NbdConn *c = q->opaque;

    g_assert(aio_context_in_home_thread(q->ctx));
    q->opaque = NULL;
    g_mutex_lock(&s->lock);
    if (!block_ctx_entry_unref(&s->conns, &c->link)) {
        g_mutex_unlock(&s->lock);
        return;
    }
    /* Drained: the queues of ctx have nothing in flight, so nothing
     * waits and no command is out. */
    g_assert(!c->waiting.head && !c->done.head && c->in_flight == 0);
    if (c->state == NBD_CONN_READY && !s->spare) {
        if (c->fd >= 0) {
            aio_set_fd_handler(c->link.ctx, c->fd, NULL, NULL, NULL, NULL,
                               NULL);
            c->fd = -1;
        }
        s->spare = c->h;         /* for the next context */
        c->h = NULL;
    }
    g_mutex_unlock(&s->lock);
    nbd_conn_drop_handle(c);
    aio_timer_del(&c->retry_timer);
    aio_timer_del(&c->give_up_timer);
    aio_bh_delete(c->done_bh);
    g_free(c);
}

/* ------------------------------------------------------------------------ */
/* BlockDriver: open, close, size (main thread)                              */

/* Read what the server offers into s and bs's limits. */
static bool nbd_read_server(BlockNode *bs, NbdState *s, struct nbd_handle *h,
                            Error **errp)
{
    int64_t min = nbd_get_block_size(h, LIBNBD_SIZE_MINIMUM);
    int64_t max = nbd_get_block_size(h, LIBNBD_SIZE_MAXIMUM);

    s->size = nbd_get_size(h);
    if (s->size < 0) {
        error_setg(errp, "NBD server at %s: cannot read the export's size: "
                   "%s", s->where, nbd_error_or("unknown error"));
        return false;
    }
    if (!bs->read_only && nbd_is_read_only(h) != 0) {
        error_setg(errp, "The NBD server at %s serves export '%s' read-only: "
                   "open the node with read-only=on", s->where, s->export);
        return false;
    }
    s->can_flush = nbd_can_flush(h) == 1;
    s->can_fua = nbd_can_fua(h) == 1;
    s->can_trim = nbd_can_trim(h) == 1;
    s->can_zero = nbd_can_zero(h) == 1;
    s->multi_conn = nbd_can_multi_conn(h) == 1;
    s->max_chunk = max > 0 ? MIN(max, NBD_MAX_RW_CHUNK) : NBD_MAX_RW_CHUNK;
    if (min < 1 || min > 65536 || (min & (min - 1))) {
        min = 1;                 /* not said, or nothing we can honour */
    }
    bs->limits = (BlockLimits) {
        .request_alignment = min,
        .mem_alignment = min,
        .max_transfer = s->max_chunk,
        .max_discard = NBD_MAX_ZERO_CHUNK,
        .max_write_zeroes = NBD_MAX_ZERO_CHUNK,
    };
    return true;
}

static void nbd_free_state(NbdState *s)
{
    nbd_handle_close(s->spare);
    s->spare = NULL;
    g_free(s->export);
    g_free(s->where);
    g_mutex_clear(&s->lock);
}

static bool nbd_open(BlockNode *bs, Opts *opts, Error **errp)
{
    NbdState *s = bs->opaque;
    struct nbd_handle *h;

    s->bs = bs;
    g_mutex_init(&s->lock);
    if (!nbd_read_opts(s, opts, errp) ||
        !opts_check_unused(opts, NULL, errp)) {
        nbd_free_state(s);
        return false;
    }
    h = nbd_connect_blocking(s, errp);
    if (!h || !nbd_read_server(bs, s, h, errp)) {
        nbd_handle_close(h);
        nbd_free_state(s);
        return false;
    }
    s->spare = h;
    return true;
}

static void nbd_close_node(BlockNode *bs)
{
    NbdState *s = bs->opaque;

    g_assert(!s->conns);
    nbd_free_state(s);
}

static int64_t nbd_getlength(BlockNode *bs)
{
    NbdState *s = bs->opaque;

    return s->size;
}

static bool nbd_truncate(BlockNode *bs, int64_t size, Error **errp)
{
    error_setg(errp, "Node '%s' (driver 'nbd') cannot be resized: the NBD "
               "protocol has no resize; resize the export on the server",
               block_node_get_name(bs));
    return false;
}

const BlockDriver block_driver_nbd = {
    .instance_size = sizeof(NbdState),
    .open = nbd_open,
    .close = nbd_close_node,
    .getlength = nbd_getlength,
    .truncate = nbd_truncate,
    .submit = nbd_submit,
    .attach_queue = nbd_attach_queue,
    .detach_queue = nbd_detach_queue,
};

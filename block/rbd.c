/*
 * The `rbd` block driver: a Ceph RBD image, through librbd.
 *
 * Theory of operation.
 *
 * Options are QEMU's: pool and image (required), namespace (default: the
 * pool's default one), snapshot (the image as of a snapshot: read-only),
 * conf (a ceph.conf; without it librbd's usual search, and none found is
 * fine) and user (the client's id, default "admin").  They are all read
 * and checked before anything talks to the cluster: a writable node on a
 * snapshot is refused there.  Cache: cache.direct=on turns librbd's own
 * cache off (rbd_cache=false), as QEMU's cache=none does; otherwise
 * librbd caches (writethrough until the guest's first flush, which shows
 * that it flushes, then writeback).
 *
 * One cluster connection per node.  Open (main thread) makes it: a rados
 * handle, the pool's I/O context and the open image, with every wait
 * bounded, so that a dead cluster fails the open with a clear error and
 * never hangs the main thread: client_mount_timeout,
 * rados_mon_op_timeout and rados_osd_op_timeout are RBD_TIMEOUT_S where
 * the configuration leaves them at librbd's defaults (no bound, or 300 s
 * for the first).  The last also bounds a request whose OSD does not
 * answer: it fails with ETIMEDOUT after that long (until then librbd
 * resends on its own, and a request whose OSD comes back in time just
 * waits).  The image is librbd's, thread-safe, and every context the
 * node is used from submits to it directly.
 *
 * Requests.  READ and WRITE are rbd_aio_readv()/rbd_aio_writev() on the
 * request's iovec (no copy), FLUSH is rbd_aio_flush(), DISCARD is
 * rbd_aio_discard() (librbd may skip parts of objects: a hint),
 * WRITE_ZEROES is rbd_aio_write_zeroes(), thick-provisioned unless the
 * request may unmap and the node has discard=unmap.  librbd has no FUA:
 * a FUA write is followed by a flush once it is answered.  Offsets and
 * lengths need no alignment (librbd handles partial objects itself).
 * SIZE is the image's size at open; block_resize is rbd_resize() in the
 * main thread (bounded by the timeouts above too).
 *
 * Completions.  At open librbd is given an eventfd
 * (rbd_set_image_notification()): it queues every finished completion
 * on the image and signals the eventfd.  Every context with a queue over
 * the node (RbdCtx, shared by the queues of one context like the nbd
 * driver's connections) watches that eventfd; when it fires, the context
 * reads it and takes the queued completions (rbd_poll_io_events(), a
 * lock-free queue in librbd).  While the poll window is open the poll
 * callback takes them the same way, without a system call; what it finds
 * is completed by the poll-ready callback (or, if the loop does not call
 * it, by the read handler: the eventfd is still set).
 *
 * The image's queue is shared, so a context may take a completion of a
 * request of another context.  Each request carries its RbdCtx, and such
 * a completion is handed over: pushed on that context's inbox (a mutex
 * and a BH scheduled under it, so the BH cannot be deleted while another
 * thread still schedules it) and completed by the BH in its home thread.
 * With one context, the common case, nothing is handed over.
 *
 * Errors.  A request's negative return value is its error, reported to
 * the guest through the usual path.  Each context logs the first failure
 * (with librbd's errno), and one more line once requests succeed again,
 * with no failure for a second more than rados_osd_op_timeout (a read
 * librbd's cache answers in the middle of an outage does not count): a
 * lost OSD is two log lines, not one per request.  Nothing the cluster
 * does stops the daemon.
 *
 * Threads: open, close, getlength and truncate run in the main thread;
 * the rest of an RbdCtx in its context's home thread, but for its inbox
 * (under its lock).  RbdState is fixed after open, but for ctxs (under
 * its lock) and size (main thread).
 */
#include "config-host.h"
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <rbd/librbd.h>
#include "block/block-int.h"
#include "util/clock.h"
#include "util/cutils.h"

/* The default bound on every wait for the cluster, in seconds. */
#define RBD_TIMEOUT_S "30"

/* Completions taken from librbd per call. */
#define RBD_POLL_BATCH 32

/* The largest READ/WRITE advertised (librbd splits at object edges). */
#define RBD_MAX_TRANSFER (32 * 1024 * 1024)

/* The largest DISCARD or WRITE_ZEROES request. */
#define RBD_MAX_ZERO (1024 * 1024 * 1024)

typedef struct RbdCtx RbdCtx;

typedef struct RbdState {
    /* Fixed after open. */
    BlockNode *bs;
    char *where;                 /* "pool/namespace/image@snapshot" */
    rados_t cluster;
    rados_ioctx_t io;
    rbd_image_t image;
    int efd;                     /* librbd's completion notification */
    int64_t quiet_ns;            /* no failure this long: recovered */

    int64_t size;                /* main thread */
    GMutex lock;                 /* ctxs */
    BlockCtxEntry *ctxs;         /* RbdCtx: one per context in use */
} RbdState;

/* The queues of one context over a node. */
struct RbdCtx {
    BlockCtxEntry link;          /* first: its context, in s->ctxs */
    RbdState *s;

    /* ctx's home thread only. */
    unsigned in_flight;          /* submitted, not completed */
    uint64_t done_count;         /* completed (poll counts) */
    BlockReqFifo ready;          /* answered, to complete */
    bool failing;                /* a failure was logged, no recovery */
    int64_t last_failure_ns;     /* while failing */
    uint64_t failures;           /* requests failed while failing */

    /* Handed over by other contexts. */
    GMutex lock;
    BlockReqFifo inbox;
    QEMUBH *inbox_bh;
};

typedef __typeof__(((BlockRequestInt *)0)->engine.rbd) RbdReq;

static RbdReq *rbd_req(BlockRequest *req)
{
    return &block_req_int(req)->engine.rbd;
}

/* ------------------------------------------------------------------------ */
/* Options (main thread)                                                     */

typedef struct RbdOpts {
    const char *pool, *ns, *image, *snapshot, *conf, *user;
} RbdOpts;

/* A name the cluster will take: not empty, and without the separators
 * QEMU's rbd: file names use. */
static bool rbd_name_ok(const char *key, const char *v, bool required,
                        Error **errp)
{
    if (!v) {
        if (required) {
            error_setg(errp, "Parameter '%s' is missing", key);
        }
        return !required;
    }
    if (!v[0] || strpbrk(v, "/@")) {
        error_setg(errp, "Parameter '%s' must be a non-empty name without "
                   "'/' or '@'", key);
        return false;
    }
    return true;
}

static bool rbd_read_opts(BlockNode *bs, Opts *opts, RbdOpts *o, Error **errp)
{
    if (!opts_get_str(opts, "pool", NULL, &o->pool, errp) ||
        !opts_get_str(opts, "namespace", NULL, &o->ns, errp) ||
        !opts_get_str(opts, "image", NULL, &o->image, errp) ||
        !opts_get_str(opts, "snapshot", NULL, &o->snapshot, errp) ||
        !opts_get_str(opts, "conf", NULL, &o->conf, errp) ||
        !opts_get_str(opts, "user", NULL, &o->user, errp) ||
        !rbd_name_ok("pool", o->pool, true, errp) ||
        !rbd_name_ok("image", o->image, true, errp) ||
        !rbd_name_ok("namespace", o->ns, false, errp) ||
        !rbd_name_ok("snapshot", o->snapshot, false, errp) ||
        !opts_check_unused(opts, NULL, errp)) {
        return false;
    }
    if (o->conf && !o->conf[0]) {
        error_setg(errp, "Parameter 'conf' must name a file");
        return false;
    }
    if (o->user && !o->user[0]) {
        error_setg(errp, "Parameter 'user' must not be empty");
        return false;
    }
    if (o->snapshot && !bs->read_only) {
        error_setg(errp, "Parameter 'snapshot': a snapshot is read-only: "
                   "open the node with read-only=on");
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Completing (a context's home thread)                                      */

static const char *rbd_op_name(BlockRequest *req)
{
    switch (req->op) {
    case BLOCK_OP_READ:
        return "read";
    case BLOCK_OP_WRITE:
        return "write";
    case BLOCK_OP_FLUSH:
        return "flush";
    case BLOCK_OP_DISCARD:
        return "discard";
    case BLOCK_OP_WRITE_ZEROES:
        return "write-zeroes";
    }
    return "request";
}

/*
 * One log line when requests start failing, one when they work again.
 * Some requests succeed in the middle of an outage (a read librbd's cache
 * answers), so requests count as working again only once one succeeds
 * quiet_ns (longer than librbd takes to fail one) after the last failure.
 */
static void rbd_ctx_note(RbdCtx *c, BlockRequest *req, int ret)
{
    const char *name = block_node_get_name(c->s->bs);
    int64_t now;

    if (ret == 0 && !c->failing) {
        return;
    }
    now = clock_now_ns();
    if (ret < 0) {
        if (!c->failing) {
            c->failing = true;
            c->failures = 0;
            error_report("node '%s': RBD image %s: %s at %" PRId64 " failed: "
                         "%s; the guest sees I/O errors while this lasts",
                         name, c->s->where, rbd_op_name(req), req->offset,
                         strerror(-ret));
        }
        c->failures++;
        c->last_failure_ns = now;
    } else if (now - c->last_failure_ns >= c->s->quiet_ns) {
        c->failing = false;
        error_report("node '%s': RBD image %s: requests succeed again "
                     "(%" PRIu64 " failed)", name, c->s->where, c->failures);
    }
}

/* Hand req to librbd; 0 or -errno (then nothing was started). */
static int rbd_start(RbdState *s, BlockRequest *req, bool flush)
{
    rbd_completion_t comp;
    int zero_flags = 0;
    int ret = rbd_aio_create_completion(req, NULL, &comp);

    if (ret < 0) {
        return ret;
    }
    if (flush) {
        ret = rbd_aio_flush(s->image, comp);
    } else {
        switch (req->op) {
        case BLOCK_OP_READ:
            ret = rbd_aio_readv(s->image, req->iov, req->niov, req->offset,
                                comp);
            break;
        case BLOCK_OP_WRITE:
            ret = rbd_aio_writev(s->image, req->iov, req->niov, req->offset,
                                 comp);
            break;
        case BLOCK_OP_FLUSH:
            ret = rbd_aio_flush(s->image, comp);
            break;
        case BLOCK_OP_DISCARD:
            ret = rbd_aio_discard(s->image, req->offset, req->bytes, comp);
            break;
        case BLOCK_OP_WRITE_ZEROES:
            if (!((req->flags & BLOCK_REQ_MAY_UNMAP) &&
                  s->bs->discard_unmap)) {
                zero_flags = RBD_WRITE_ZEROES_FLAG_THICK_PROVISION;
            }
            ret = rbd_aio_write_zeroes(s->image, req->offset, req->bytes,
                                       comp, zero_flags, 0);
            break;
        default:
            ret = -EINVAL;
            break;
        }
    }
    if (ret < 0) {
        rbd_aio_release(comp);
    }
    return ret;
}

/* req (of c) was answered with r->ret: its FUA flush, or complete it. */
static void rbd_ctx_finish(RbdCtx *c, BlockRequest *req)
{
    RbdReq *r = rbd_req(req);
    int ret = r->ret;

    if (ret == 0 && r->then_flush) {
        r->then_flush = false;
        ret = rbd_start(c->s, req, true);
        if (ret == 0) {
            return;
        }
    }
    rbd_ctx_note(c, req, ret);
    c->in_flight--;
    c->done_count++;
    block_request_complete(req, ret);
}

/* Complete what is ready; one at a time, as a completion may run a
 * nested loop that completes some too. */
static void rbd_ctx_complete_ready(RbdCtx *c)
{
    BlockRequest *req;

    block_acct_batch_begin();
    while ((req = block_req_fifo_pop(&c->ready)) != NULL) {
        rbd_ctx_finish(c, req);
    }
    block_acct_batch_end();
}

/* Requests of c that other contexts took from librbd. */
static void rbd_ctx_inbox_bh(void *opaque)
{
    RbdCtx *c = opaque;
    BlockRequest *req;

    g_mutex_lock(&c->lock);
    while ((req = block_req_fifo_pop(&c->inbox)) != NULL) {
        block_req_fifo_push(&c->ready, req);
    }
    g_mutex_unlock(&c->lock);
    rbd_ctx_complete_ready(c);
}

/* Take librbd's finished completions: ours on c->ready, the others'
 * handed over.  Whether any of ours came. */
static bool rbd_ctx_collect(RbdCtx *c)
{
    rbd_completion_t comps[RBD_POLL_BATCH];
    bool ours = false;
    int n;

    do {
        n = rbd_poll_io_events(c->s->image, comps, RBD_POLL_BATCH);
        for (int i = 0; i < n; i++) {
            BlockRequest *req = rbd_aio_get_arg(comps[i]);
            RbdReq *r = rbd_req(req);
            ssize_t ret = rbd_aio_get_return_value(comps[i]);
            RbdCtx *owner = r->ctx;

            rbd_aio_release(comps[i]);
            r->ret = ret < 0 ? (int)ret : 0;
            if (owner == c) {
                block_req_fifo_push(&c->ready, req);
                ours = true;
            } else {
                g_mutex_lock(&owner->lock);
                block_req_fifo_push(&owner->inbox, req);
                aio_bh_schedule(owner->inbox_bh);
                g_mutex_unlock(&owner->lock);
            }
        }
    } while (n == RBD_POLL_BATCH);
    return ours;
}

/* The eventfd fired: clear it, then take what librbd queued (in that
 * order: a completion queued after the take signals it again). */
static void rbd_ctx_read(void *opaque)
{
    RbdCtx *c = opaque;
    uint64_t v;

    /* Fails only when already clear (EAGAIN): nothing to do then. */
    ssize_t cleared = read(c->s->efd, &v, sizeof(v));

    (void)cleared;
    rbd_ctx_collect(c);
    rbd_ctx_complete_ready(c);
}

/* Busy polling: take finished completions without a system call. */
static bool rbd_ctx_poll(void *opaque)
{
    RbdCtx *c = opaque;

    if (c->ready.head) {
        return true;
    }
    return c->in_flight > 0 && rbd_ctx_collect(c);
}

static void rbd_ctx_poll_ready(void *opaque)
{
    rbd_ctx_complete_ready(opaque);
}

static void rbd_ctx_counts(void *opaque, AioPollCounts *counts)
{
    RbdCtx *c = opaque;

    counts->pending = c->in_flight;
    counts->done = c->done_count;
}

/* ------------------------------------------------------------------------ */
/* BlockDriver: requests and contexts                                        */

static void rbd_submit(BlockNode *bs, BlockRequest *req)
{
    RbdState *s = bs->opaque;
    BlockQueue *q = block_req_queue(bs, req);
    RbdCtx *c = q->opaque;
    RbdReq *r = rbd_req(req);
    int ret;

    g_assert(aio_context_in_home_thread(q->ctx));
    *r = (RbdReq) { .ctx = c };
    r->then_flush = (req->op == BLOCK_OP_WRITE ||
                     req->op == BLOCK_OP_WRITE_ZEROES) &&
                    (req->flags & BLOCK_REQ_FUA) && !bs->no_flush;
    ret = rbd_start(s, req, false);
    if (ret < 0) {
        rbd_ctx_note(c, req, ret);
        block_request_complete_later(req, ret);
        return;
    }
    c->in_flight++;
}

/* q->ctx's home thread. */
static void rbd_attach_queue(BlockQueue *q)
{
    RbdState *s = q->bs->opaque;
    RbdCtx *c;

    g_assert(aio_context_in_home_thread(q->ctx));
    g_mutex_lock(&s->lock);
    c = (RbdCtx *)block_ctx_entry_ref(s->ctxs, q->ctx);
    if (!c) {
        c = g_new0(RbdCtx, 1);
        c->s = s;
        block_ctx_entry_add(&s->ctxs, &c->link, q->ctx);
        g_mutex_init(&c->lock);
        c->inbox_bh = aio_bh_new(q->ctx, rbd_ctx_inbox_bh, c);
        aio_set_fd_handler(q->ctx, s->efd, rbd_ctx_read, NULL, rbd_ctx_poll,
                           rbd_ctx_poll_ready, c);
        aio_set_fd_handler_name(q->ctx, s->efd, "rbd");
        aio_set_fd_poll_counts(q->ctx, s->efd, rbd_ctx_counts);
    }
    g_mutex_unlock(&s->lock);
    q->opaque = c;
}

/* q->ctx's home thread, q drained. */
static void rbd_detach_queue(BlockQueue *q)
{
    RbdState *s = q->bs->opaque;
    RbdCtx *c = q->opaque;

    g_assert(aio_context_in_home_thread(q->ctx));
    q->opaque = NULL;
    g_mutex_lock(&s->lock);
    if (!block_ctx_entry_unref(&s->ctxs, &c->link)) {
        g_mutex_unlock(&s->lock);
        return;
    }
    g_mutex_unlock(&s->lock);
    /* Drained: every request of c completed, so nothing of c is in
     * librbd, on its lists or being handed over. */
    g_assert(c->in_flight == 0 && !c->ready.head && !c->inbox.head);
    aio_set_fd_handler(c->link.ctx, s->efd, NULL, NULL, NULL, NULL, NULL);
    aio_bh_delete(c->inbox_bh);
    g_mutex_clear(&c->lock);
    g_free(c);
}

/* ------------------------------------------------------------------------ */
/* BlockDriver: open, close, size (main thread)                              */

static void rbd_free_state(RbdState *s)
{
    if (s->image) {
        rbd_close(s->image);
        s->image = NULL;
    }
    if (s->io) {
        rados_ioctx_destroy(s->io);
        s->io = NULL;
    }
    if (s->cluster) {
        rados_shutdown(s->cluster);
        s->cluster = NULL;
    }
    if (s->efd >= 0) {
        close(s->efd);
        s->efd = -1;
    }
    g_free(s->where);
    s->where = NULL;
    g_mutex_clear(&s->lock);
}

/* How long without a failure means requests work again (see
 * rbd_ctx_note()): a second more than librbd takes to fail a request
 * whose OSD does not answer. */
static int64_t rbd_quiet_ns(rados_t cluster)
{
    char val[64];
    double timeout_s = 0;

    if (rados_conf_get(cluster, "rados_osd_op_timeout", val,
                       sizeof(val)) == 0) {
        timeout_s = g_ascii_strtod(val, NULL);
    }
    return (int64_t)((MAX(timeout_s, 0) + 1) * 1e9);
}

/* The rados handle, configured; not connected yet. */
static bool rbd_configure(BlockNode *bs, RbdState *s, const RbdOpts *o,
                          Error **errp)
{
    /* The bounds on waits, and librbd's defaults for them. */
    static const struct {
        const char *key;
        double dflt;
    } timeouts[] = {
        { "client_mount_timeout", 300 },
        { "rados_mon_op_timeout", 0 },
        { "rados_osd_op_timeout", 0 },
    };
    int r = rados_create(&s->cluster, o->user);

    if (r < 0) {
        s->cluster = NULL;
        error_setg(errp, "Cannot create a Ceph client (user '%s'): %s",
                   o->user ? o->user : "admin", strerror(-r));
        return false;
    }
    r = rados_conf_read_file(s->cluster, o->conf);
    if (r < 0 && o->conf) {
        error_setg(errp, "Parameter 'conf': cannot read the Ceph "
                   "configuration '%s': %s", o->conf, strerror(-r));
        return false;
    }
    /* (Without conf, no file found in the usual places is fine.)  A
     * value set here would win over the file's, so only those the file
     * left at librbd's default are bounded. */
    for (size_t i = 0; i < G_N_ELEMENTS(timeouts); i++) {
        char val[64];

        if (rados_conf_get(s->cluster, timeouts[i].key, val,
                           sizeof(val)) < 0 ||
            g_ascii_strtod(val, NULL) == timeouts[i].dflt) {
            rados_conf_set(s->cluster, timeouts[i].key, RBD_TIMEOUT_S);
        }
    }
    s->quiet_ns = rbd_quiet_ns(s->cluster);
    r = rados_conf_set(s->cluster, "rbd_cache",
                       bs->cache_direct ? "false" : "true");
    if (r < 0) {
        error_setg(errp, "Cannot set rbd_cache: %s", strerror(-r));
        return false;
    }
    return true;
}

/* Connect, open the pool and the image: every wait bounded (see the
 * top of the file). */
static bool rbd_connect(BlockNode *bs, RbdState *s, const RbdOpts *o,
                        Error **errp)
{
    uint64_t size;
    int r;

    r = rados_connect(s->cluster);
    if (r < 0) {
        error_setg(errp, "Cannot connect to the Ceph cluster%s%s: %s",
                   o->conf ? " of " : "", o->conf ? o->conf : "",
                   strerror(-r));
        return false;
    }
    r = rados_ioctx_create(s->cluster, o->pool, &s->io);
    if (r < 0) {
        s->io = NULL;
        error_setg(errp, "Cannot open the Ceph pool '%s': %s", o->pool,
                   strerror(-r));
        return false;
    }
    rados_ioctx_set_namespace(s->io, o->ns);
    r = bs->read_only
        ? rbd_open_read_only(s->io, o->image, &s->image, o->snapshot)
        : rbd_open(s->io, o->image, &s->image, NULL);
    if (r < 0) {
        s->image = NULL;
        error_setg(errp, "Cannot open the RBD image %s: %s", s->where,
                   strerror(-r));
        return false;
    }
    r = rbd_get_size(s->image, &size);
    if (r < 0 || size > INT64_MAX) {
        error_setg(errp, "Cannot read the size of the RBD image %s: %s",
                   s->where, strerror(r < 0 ? -r : EFBIG));
        return false;
    }
    s->size = size;
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd < 0) {
        error_setg_errno(errp, errno, "Cannot create an eventfd");
        return false;
    }
    r = rbd_set_image_notification(s->image, s->efd, EVENT_TYPE_EVENTFD);
    if (r < 0) {
        error_setg(errp, "RBD image %s: cannot set its completion "
                   "notification: %s", s->where, strerror(-r));
        return false;
    }
    return true;
}

static bool rbd_open_node(BlockNode *bs, Opts *opts, Error **errp)
{
    RbdState *s = bs->opaque;
    RbdOpts o = { 0 };

    s->bs = bs;
    s->efd = -1;
    g_mutex_init(&s->lock);
    if (!rbd_read_opts(bs, opts, &o, errp)) {
        rbd_free_state(s);
        return false;
    }
    s->where = g_strdup_printf("%s/%s%s%s%s%s", o.pool,
                               o.ns ? o.ns : "", o.ns ? "/" : "", o.image,
                               o.snapshot ? "@" : "",
                               o.snapshot ? o.snapshot : "");
    if (!rbd_configure(bs, s, &o, errp) || !rbd_connect(bs, s, &o, errp)) {
        rbd_free_state(s);
        return false;
    }
    bs->limits = (BlockLimits) {
        .request_alignment = 1,
        .mem_alignment = 1,
        .max_transfer = RBD_MAX_TRANSFER,
        .max_discard = RBD_MAX_ZERO,
        .max_write_zeroes = RBD_MAX_ZERO,
    };
    return true;
}

static void rbd_close_node(BlockNode *bs)
{
    RbdState *s = bs->opaque;

    g_assert(!s->ctxs);
    rbd_free_state(s);
}

static int64_t rbd_getlength(BlockNode *bs)
{
    RbdState *s = bs->opaque;

    return s->size;
}

static bool rbd_truncate(BlockNode *bs, int64_t size, Error **errp)
{
    RbdState *s = bs->opaque;
    int r;

    if (bs->read_only) {
        error_setg(errp, "Node '%s': the RBD image %s is open read-only",
                   block_node_get_name(bs), s->where);
        return false;
    }
    r = rbd_resize(s->image, size);
    if (r < 0) {
        error_setg(errp, "Node '%s': cannot resize the RBD image %s: %s",
                   block_node_get_name(bs), s->where, strerror(-r));
        return false;
    }
    s->size = size;
    return true;
}

const BlockDriver block_driver_rbd = {
    .instance_size = sizeof(RbdState),
    .open = rbd_open_node,
    .close = rbd_close_node,
    .getlength = rbd_getlength,
    .truncate = rbd_truncate,
    .submit = rbd_submit,
    .attach_queue = rbd_attach_queue,
    .detach_queue = rbd_detach_queue,
};

/*
 * Block nodes: the registry, opening from options, references, context moves.
 *
 * Theory of operation.  A node is made by block_node_open() from an Opts
 * tree (the --blockdev syntax): the generic keys (driver, node-name,
 * read-only, cache.direct, cache.no-flush, discard) are read here, the rest
 * by the driver's open(), and any key nobody read is an error, so a typo
 * never passes silently.  Filters open their child through
 * block_node_open_child(), inline or by node-name.  Every node with a name
 * is in one registry (main thread only); nodes opened without one get
 * "#blockN".
 *
 * A node belongs to one AioContext (its home, for the single-context API),
 * but may be used from others through BlockQueues.  A queue is a chain:
 * one BlockQueue per node from the top down, all in one context, each
 * holding that node's per-context driver state (engine instance, BH,
 * timer), created by the driver's attach_queue() in the context's home
 * thread and torn down by detach_queue() there; block.c runs those hooks
 * through aio_run_sync(), children before parents on attach and parents
 * before children on detach.  Every node has a default queue chain in its
 * own context, made on open and remade on a move, through which
 * block_node_submit() & co. go.  The last reference drains the node,
 * detaches it, closes it and drops its child.
 *
 * Active and inactive (block_node_set_active()).  The state lives here,
 * in each node; a driver only takes or drops what an active node holds
 * (file: its lock, and a flush on the way out).  Activating walks the
 * chain bottom-up and inactivating top-down, so an active node never sits
 * on an inactive one: the request check (io.c) looks only at the node a
 * request is submitted to, and filters pass requests down unchecked.
 *
 * The registry also keeps the nodes in creation order (block_node_list()),
 * which puts every child before its parents.  Resizing relies on it: the
 * driver grows the storage (a filter forwards to its child), then every
 * node's length is read again in that order and published with a release
 * store, so a filter over the grown node grows too, and IOThreads checking
 * bounds against the new length (an acquire load) find the storage grown.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include "block/block-int.h"
#include "util/main-thread.h"
#include "util/cutils.h"

static GHashTable *block_nodes;          /* node-name -> BlockNode, main thread */
static GPtrArray *block_node_order;      /* the same nodes, oldest first */
static unsigned block_auto_name_counter;

/* The drivers by name; a node reports the name it was opened with. */
typedef struct BlockDriverName {
    const char *name;
    const BlockDriver *drv;
} BlockDriverName;

static const BlockDriverName block_drivers[] = {
    { "file", &block_driver_file },
    { "null-co", &block_driver_null },
    { "null-aio", &block_driver_null },     /* QEMU's other name for it */
    { "raw", &block_driver_raw },
    { "blkdebug", &block_driver_blkdebug },
    { "qcow2", &block_driver_qcow2 },
    { "throttle", &block_driver_throttle },
#ifdef CONFIG_LIBNBD
    { "nbd", &block_driver_nbd },
#else
    { "nbd", NULL },             /* known, refused: built without libnbd */
#endif
#ifdef CONFIG_LIBRBD
    { "rbd", &block_driver_rbd },
#else
    { "rbd", NULL },             /* known, refused: built without librbd */
#endif
};

static const BlockDriverName *block_driver_lookup(const char *name)
{
    for (size_t i = 0; i < G_N_ELEMENTS(block_drivers); i++) {
        if (!strcmp(block_drivers[i].name, name)) {
            return &block_drivers[i];
        }
    }
    return NULL;
}

const BlockDriver *block_driver_find(const char *name)
{
    const BlockDriverName *d = block_driver_lookup(name);

    return d ? d->drv : NULL;
}

static void block_driver_unknown(const char *name, Error **errp)
{
    GString *names = g_string_new(NULL);

    for (size_t i = 0; i < G_N_ELEMENTS(block_drivers); i++) {
        g_string_append_printf(names, "%s%s", i ? ", " : "",
                               block_drivers[i].name);
    }
    error_setg(errp, "Unknown driver '%s' (available: %s)", name, names->str);
    g_string_free(names, TRUE);
}

/* ------------------------------------------------------------------------ */
/* Registry                                                                  */

BlockNode *block_node_find(const char *node_name)
{
    assert_main_thread();
    return block_nodes ? g_hash_table_lookup(block_nodes, node_name) : NULL;
}

/* A node-name as QEMU accepts it: a letter, then letters, digits, -._ */
static bool block_node_name_valid(const char *name, Error **errp)
{
    size_t len = strlen(name);

    if (len == 0 || len > 31 || !g_ascii_isalpha(name[0])) {
        error_setg(errp, "Invalid node-name '%s': it must start with a letter "
                   "and have at most 31 characters", name);
        return false;
    }
    if (!id_chars_valid(name)) {
        error_setg(errp, "Invalid node-name '%s': use letters, digits, "
                   "'-', '.' and '_'", name);
        return false;
    }
    if (block_node_find(name)) {
        error_setg(errp, "Duplicate node name '%s'", name);
        return false;
    }
    return true;
}

static void block_node_register(BlockNode *bs)
{
    if (!block_nodes) {
        block_nodes = g_hash_table_new(g_str_hash, g_str_equal);
        block_node_order = g_ptr_array_new();
    }
    g_hash_table_insert(block_nodes, bs->node_name, bs);
    g_ptr_array_add(block_node_order, bs);
}

static void block_node_unregister(BlockNode *bs)
{
    g_hash_table_remove(block_nodes, bs->node_name);
    g_ptr_array_remove(block_node_order, bs);    /* keeps the order */
}

GPtrArray *block_node_list(void)
{
    GPtrArray *list = g_ptr_array_new();

    assert_main_thread();
    for (guint i = 0; block_node_order && i < block_node_order->len; i++) {
        g_ptr_array_add(list, g_ptr_array_index(block_node_order, i));
    }
    return list;
}

BlockNode *block_node_find_parent(const BlockNode *bs)
{
    assert_main_thread();
    for (guint i = 0; block_node_order && i < block_node_order->len; i++) {
        BlockNode *n = g_ptr_array_index(block_node_order, i);

        if (n->child == bs) {
            return n;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Per-context hooks, run in the context's home thread                       */

/* The chain of queues for bs and its children in ctx (not attached). */
static BlockQueue *block_queue_chain_new(BlockNode *bs, AioContext *ctx)
{
    BlockQueue *q = g_new0(BlockQueue, 1);

    q->bs = bs;
    q->ctx = ctx;
    g_mutex_lock(&bs->rmw_lock);          /* io.c sums the queues' writes */
    q->node_next = bs->queues;
    bs->queues = q;
    g_mutex_unlock(&bs->rmw_lock);
    if (bs->child) {
        q->child = block_queue_chain_new(bs->child, ctx);
    }
    return q;
}

/* Children first, so a parent's hook finds its child's state set up. */
static void block_queue_attach_bh(void *opaque)
{
    BlockQueue *q = opaque;

    if (q->child) {
        block_queue_attach_bh(q->child);
    }
    block_queue_deferred_init(q);
    if (q->bs->drv->attach_queue) {
        q->bs->drv->attach_queue(q);
    }
}

/* Parents first; frees the chain. */
static void block_queue_detach_bh(void *opaque)
{
    BlockQueue *q = opaque;

    g_assert(q->in_flight == 0 && q->plugged == 0);
    block_queue_acct_detach(q);
    if (q->bs->drv->detach_queue) {
        q->bs->drv->detach_queue(q);
    }
    block_queue_deferred_fini(q);
    g_assert(atomic_load(&q->fast_writes) == 0);
    g_mutex_lock(&q->bs->rmw_lock);
    for (BlockQueue **p = &q->bs->queues; *p; p = &(*p)->node_next) {
        if (*p == q) {
            *p = q->node_next;
            break;
        }
    }
    g_mutex_unlock(&q->bs->rmw_lock);
    if (q->child) {
        block_queue_detach_bh(q->child);
    }
    g_free(q);
}

BlockQueue *block_queue_new(BlockNode *bs, AioContext *ctx, Error **errp)
{
    BlockQueue *q = block_queue_chain_new(bs, ctx);

    aio_run_sync(ctx, block_queue_attach_bh, q);
    return q;
}

void block_queue_free(BlockQueue *q)
{
    if (q) {
        aio_run_sync(q->ctx, block_queue_detach_bh, q);
    }
}

AioContext *block_queue_get_aio_context(const BlockQueue *q)
{
    return q->ctx;
}

static void block_node_attach(BlockNode *bs)
{
    bs->default_q = block_queue_new(bs, bs->ctx, NULL);
}

static void block_node_detach(BlockNode *bs)
{
    block_queue_free(bs->default_q);
    bs->default_q = NULL;
}

/* ------------------------------------------------------------------------ */
/* Opening                                                                   */

/*
 * The generic options; the driver reads the rest.  active= defaults to
 * the parent's state for a child opened inline (parent_active), as in
 * QEMU: an image opened for an incoming migration is inactive all the
 * way down.
 */
static bool block_node_read_generic_opts(BlockNode *bs, Opts *opts,
                                         bool parent_active, Error **errp)
{
    static const char *const discard_modes[] = {
        "ignore", "unmap", "off", "on", NULL
    };
    int discard;
    bool active;

    if (!opts_get_bool(opts, "read-only", false, &bs->read_only, errp) ||
        !opts_get_bool(opts, "cache.direct", false, &bs->cache_direct, errp) ||
        !opts_get_bool(opts, "cache.no-flush", false, &bs->no_flush, errp) ||
        !opts_get_enum(opts, "discard", discard_modes, 0, &discard, errp) ||
        !opts_get_bool(opts, "active", parent_active, &active, errp)) {
        return false;
    }
    bs->discard_unmap = discard == 1 || discard == 3;   /* "unmap" or "on" */
    atomic_store_explicit(&bs->inactive, !active, memory_order_relaxed);
    return true;
}

static bool block_node_limits_valid(BlockNode *bs, Error **errp)
{
    const BlockLimits *l = &bs->limits;

    if (l->request_alignment == 0 || (l->request_alignment & (l->request_alignment - 1)) ||
        l->mem_alignment == 0 || (l->mem_alignment & (l->mem_alignment - 1))) {
        error_setg(errp, "Driver '%s' reported invalid alignments (%u, %u)",
                   bs->driver_name, l->request_alignment, l->mem_alignment);
        return false;
    }
    return true;
}

static bool block_node_read_length(BlockNode *bs, Error **errp)
{
    int64_t len = bs->drv->getlength(bs);

    if (len < 0) {
        error_setg_errno(errp, (int)-len, "Cannot get the size");
        return false;
    }
    /* Not yet visible to any other thread: no ordering needed. */
    atomic_store_explicit(&bs->length, len, memory_order_relaxed);
    return true;
}

/* Say which node an error of block_node_open() is about. */
static void block_node_open_error(BlockNode *bs, Error **errp)
{
    if (bs->auto_name) {
        error_prepend(errp, "blockdev (driver '%s'): ", bs->driver_name);
    } else {
        error_prepend(errp, "node '%s': ", bs->node_name);
    }
}

static void block_node_free(BlockNode *bs)
{
    if (bs->child) {
        block_node_unref(bs->child);
    }
    g_assert(!bs->queues);
    g_mutex_clear(&bs->rmw_lock);
    g_free(bs->opaque);
    g_free(bs->node_name);
    g_free(bs);
}

static BlockNode *block_node_open_inner(Opts *opts, AioContext *ctx,
                                        bool parent_active, Error **errp)
{
    const char *driver, *node_name;
    const BlockDriverName *entry;
    const BlockDriver *drv;
    BlockNode *bs;

    assert_main_thread();
    if (!opts_get_str(opts, "driver", NULL, &driver, errp) ||
        !opts_get_str(opts, "node-name", NULL, &node_name, errp)) {
        return NULL;
    }
    if (!driver) {
        error_setg(errp, "Parameter 'driver' is missing");
        return NULL;
    }
    entry = block_driver_lookup(driver);
    if (!entry) {
        block_driver_unknown(driver, errp);
        return NULL;
    }
    if (!entry->drv) {
        error_setg(errp, "Driver '%s': spindle was built without lib%s",
                   driver, driver);
        return NULL;
    }
    if (node_name && !block_node_name_valid(node_name, errp)) {
        return NULL;
    }

    bs = g_new0(BlockNode, 1);
    drv = entry->drv;
    bs->drv = drv;
    bs->driver_name = entry->name;
    bs->opaque = drv->instance_size ? g_malloc0(drv->instance_size) : NULL;
    bs->refcnt = 1;
    bs->ctx = ctx;
    bs->limits = (BlockLimits) { .request_alignment = 1, .mem_alignment = 1 };
    g_mutex_init(&bs->rmw_lock);
    if (node_name) {
        bs->node_name = g_strdup(node_name);
    } else {
        bs->node_name = g_strdup_printf("#block%u", block_auto_name_counter++);
        bs->auto_name = true;
    }

    if (!block_node_read_generic_opts(bs, opts, parent_active, errp) ||
        !drv->open(bs, opts, errp)) {
        block_node_open_error(bs, errp);
        block_node_free(bs);
        return NULL;
    }
    if (!opts_check_unused(opts, NULL, errp) ||
        !block_node_limits_valid(bs, errp) ||
        !block_node_read_length(bs, errp)) {
        block_node_open_error(bs, errp);
        drv->close(bs);
        block_node_free(bs);
        return NULL;
    }
    block_node_register(bs);
    block_node_attach(bs);
    return bs;
}

BlockNode *block_node_open(Opts *opts, AioContext *ctx, Error **errp)
{
    return block_node_open_inner(opts, ctx, true, errp);
}

BlockNode *block_node_open_str(const char *str, AioContext *ctx, Error **errp)
{
    g_autoptr(Opts) opts = NULL;

    assert_main_thread();
    opts = opts_parse(str, NULL, errp);
    return opts ? block_node_open(opts, ctx, errp) : NULL;
}

BlockNode *block_node_open_child(BlockNode *parent, Opts *opts,
                                 const char *key, Error **errp)
{
    g_autoptr(Opts) child_opts = opts_get_child(opts, key);
    const char *name;
    BlockNode *child;

    assert_main_thread();
    if (child_opts) {
        child = block_node_open_inner(child_opts, parent->ctx,
                                      block_node_is_active(parent), errp);
    } else {
        if (!opts_get_str(opts, key, NULL, &name, errp)) {
            return NULL;
        }
        if (!name) {
            error_setg(errp, "Parameter '%s' is missing (the node below '%s')",
                       key, parent->driver_name);
            return NULL;
        }
        child = block_node_find(name);
        if (!child) {
            error_setg(errp, "Parameter '%s': no node named '%s'", key, name);
            return NULL;
        }
        if (child->ctx != parent->ctx) {
            error_setg(errp, "Parameter '%s': node '%s' is in another "
                       "IOThread", key, name);
            return NULL;
        }
        block_node_ref(child);
    }
    parent->child = child;
    if (child && !parent->read_only && block_node_is_read_only(child)) {
        error_setg(errp, "Parameter '%s' is a read-only node: open this "
                   "one with read-only=on too", key);
        return NULL;
    }
    if (child && block_node_is_active(parent) &&
        !block_node_is_active(child)) {
        error_setg(errp, "Parameter '%s': node '%s' is inactive; open this "
                   "one with active=off too, or activate it first "
                   "(blockdev-set-active)", key, child->node_name);
        return NULL;
    }
    return child;
}

/* ------------------------------------------------------------------------ */
/* References                                                                */

void block_node_ref(BlockNode *bs)
{
    bs->refcnt++;
}

static void block_node_drain_bh(void *opaque)
{
    block_node_drain(opaque);
}

void block_node_unref(BlockNode *bs)
{
    if (!bs || --bs->refcnt > 0) {
        return;
    }
    aio_run_sync(bs->ctx, block_node_drain_bh, bs);
    block_node_detach(bs);
    bs->drv->close(bs);
    block_node_unregister(bs);
    block_node_free(bs);
}

/* ------------------------------------------------------------------------ */
/* Queries                                                                   */

const char *block_node_get_name(const BlockNode *bs)
{
    return bs->node_name;
}

const char *block_node_get_driver_name(const BlockNode *bs)
{
    return bs->driver_name;
}

bool block_node_is_read_only(const BlockNode *bs)
{
    return bs->read_only;
}

bool block_node_is_active(const BlockNode *bs)
{
    return !atomic_load_explicit(&((BlockNode *)bs)->inactive,
                                 memory_order_relaxed);
}

bool block_node_discard_enabled(const BlockNode *bs)
{
    return bs->discard_unmap;
}

int64_t block_node_get_length(BlockNode *bs)
{
    return block_node_length(bs);
}

void block_node_get_limits(const BlockNode *bs, BlockLimits *out)
{
    *out = bs->limits;
}

AioContext *block_node_get_aio_context(const BlockNode *bs)
{
    return bs->ctx;
}

bool block_node_get_cache_direct(const BlockNode *bs)
{
    return bs->cache_direct;
}

bool block_node_get_cache_no_flush(const BlockNode *bs)
{
    return bs->no_flush;
}

const char *block_node_get_filename(const BlockNode *bs)
{
    while (bs && bs->drv != &block_driver_file) {
        bs = bs->child;
    }
    return bs ? block_file_get_filename(bs) : NULL;
}

BlockNode *block_node_get_child(const BlockNode *bs)
{
    return bs->child;
}

/* ------------------------------------------------------------------------ */
/* Resizing                                                                  */

bool block_driver_truncate(BlockNode *bs, int64_t size, Error **errp)
{
    assert_main_thread();
    if (!bs->drv->truncate) {
        error_setg(errp, "Node '%s' (driver '%s') cannot be resized",
                   bs->node_name, bs->driver_name);
        return false;
    }
    return bs->drv->truncate(bs, size, errp);
}

/*
 * Publish a node's new length.  The release store pairs with the acquire
 * load in block_node_length(): whoever sees the new length also sees what
 * the driver did to grow the storage before it.
 */
static void block_node_publish_length(BlockNode *bs, int64_t len)
{
    atomic_store_explicit(&bs->length, len, memory_order_release);
}

void block_node_grow_length(BlockNode *bs, int64_t len)
{
    int64_t cur = block_node_length(bs);

    while (cur < len &&
           !atomic_compare_exchange_weak_explicit(&bs->length, &cur, len,
                                                  memory_order_release,
                                                  memory_order_acquire)) {
        /* cur reloaded: another thread raised it meanwhile */
    }
}

/*
 * Read every registered node's length again, oldest first: a node's child
 * is older than the node (opened before it, inline or by name), so a
 * filter reads its child's length after the child published it, and a
 * request on the filter within its new length finds the child grown too.
 * Lengths only grow here: a node whose storage shrank behind our back
 * keeps its length (its requests past the end fail in the host).
 */
static void block_node_refresh_lengths(void)
{
    for (guint i = 0; block_node_order && i < block_node_order->len; i++) {
        BlockNode *n = g_ptr_array_index(block_node_order, i);
        int64_t len = n->drv->getlength(n);

        if (len > block_node_length(n)) {
            block_node_publish_length(n, len);
        }
    }
}

static bool block_node_resize_check(BlockNode *bs, int64_t size, Error **errp)
{
    int64_t old = block_node_length(bs);
    uint32_t align = bs->limits.request_alignment;

    if (bs->read_only) {
        error_setg(errp, "Node '%s' is read-only", bs->node_name);
        return false;
    }
    if (!block_node_is_active(bs)) {
        /* The image may be another process's now: not ours to grow. */
        error_setg(errp, "Node '%s' is inactive", bs->node_name);
        return false;
    }
    if (size <= 0) {
        error_setg(errp, "Invalid size %" PRId64 " for node '%s': it must be "
                   "positive", size, bs->node_name);
        return false;
    }
    if (size % 512) {
        error_setg(errp, "Invalid size %" PRId64 " for node '%s': it must be "
                   "a multiple of 512", size, bs->node_name);
        return false;
    }
    if (size % align) {
        error_setg(errp, "Invalid size %" PRId64 " for node '%s': it must be "
                   "a multiple of %" PRIu32 " (the node's request alignment)",
                   size, bs->node_name, align);
        return false;
    }
    if (size < old) {
        error_setg(errp, "Shrinking node '%s' to %" PRId64 " bytes is not "
                   "supported: it would discard data; the node is %" PRId64
                   " bytes", bs->node_name, size, old);
        return false;
    }
    return true;
}

bool block_node_resize(BlockNode *bs, int64_t size, Error **errp)
{
    assert_main_thread();
    if (!block_node_resize_check(bs, size, errp) ||
        !block_driver_truncate(bs, size, errp)) {
        return false;
    }
    block_node_refresh_lengths();
    if (block_node_length(bs) < size) {
        /* The storage grew, but its size cannot be read back. */
        error_setg(errp, "Node '%s' was resized to %" PRId64 " bytes, but "
                   "its size reads %" PRId64 " bytes", bs->node_name, size,
                   block_node_length(bs));
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Active and inactive                                                       */

/* An active registered node whose child is bs, other than skip, or NULL. */
static BlockNode *block_node_find_active_parent(const BlockNode *bs,
                                                const BlockNode *skip)
{
    for (guint i = 0; block_node_order && i < block_node_order->len; i++) {
        BlockNode *n = g_ptr_array_index(block_node_order, i);

        if (n != skip && n->child == bs && block_node_is_active(n)) {
            return n;
        }
    }
    return NULL;
}

/* Change one node's state through its driver, then publish it. */
static bool block_node_set_active_one(BlockNode *bs, bool active,
                                      Error **errp)
{
    if (block_node_is_active(bs) == active) {
        return true;
    }
    if (bs->drv->set_active && !bs->drv->set_active(bs, active, errp)) {
        error_prepend(errp, "Cannot %s node '%s': ",
                      active ? "activate" : "inactivate", bs->node_name);
        return false;
    }
    atomic_store_explicit(&bs->inactive, !active, memory_order_relaxed);
    return true;
}

/* Bottom-up; on failure the nodes activated here go back. */
static bool block_node_activate(BlockNode *bs, Error **errp)
{
    bool child_was_active = bs->child && block_node_is_active(bs->child);

    if (bs->child && !block_node_activate(bs->child, errp)) {
        return false;
    }
    if (!block_node_set_active_one(bs, true, errp)) {
        if (bs->child && !child_was_active) {
            /* Undo what this call did below. */
            block_node_set_active(bs->child, false, NULL);
        }
        return false;
    }
    return true;
}

bool block_node_set_active(BlockNode *bs, bool active, Error **errp)
{
    BlockNode *parent;

    assert_main_thread();
    if (active) {
        return block_node_activate(bs, errp);
    }
    parent = block_node_find_active_parent(bs, NULL);
    if (parent) {
        error_setg(errp, "Cannot inactivate node '%s': node '%s' above it "
                   "is active (inactivate that one)", bs->node_name,
                   parent->node_name);
        return false;
    }
    if (block_node_is_active(bs)) {
        aio_run_sync(bs->ctx, block_node_drain_bh, bs);
    }
    for (BlockNode *n = bs; n; n = n->child) {
        if (n != bs && block_node_find_active_parent(n, NULL)) {
            break;          /* another active node still uses it */
        }
        if (!block_node_set_active_one(n, false, errp)) {
            return false;
        }
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Moving between contexts                                                   */

static bool block_node_tree_idle(BlockNode *bs, Error **errp)
{
    for (BlockNode *n = bs; n; n = n->child) {
        if (n->default_q->in_flight) {
            error_setg(errp, "Node '%s' has %u requests in flight",
                       n->node_name, n->default_q->in_flight);
            return false;
        }
    }
    return true;
}

bool block_node_set_aio_context(BlockNode *bs, AioContext *new_ctx,
                                Error **errp)
{
    GPtrArray *chain;

    assert_main_thread();
    if (bs->ctx == new_ctx) {
        return true;
    }
    if (!block_node_tree_idle(bs, errp)) {
        return false;
    }
    chain = g_ptr_array_new();
    for (BlockNode *n = bs; n; n = n->child) {
        g_ptr_array_add(chain, n);
    }
    for (guint i = 0; i < chain->len; i++) {         /* parents first */
        block_node_detach(g_ptr_array_index(chain, i));
    }
    for (guint i = chain->len; i-- > 0;) {            /* children first */
        BlockNode *n = g_ptr_array_index(chain, i);

        n->ctx = new_ctx;
        block_node_attach(n);
    }
    g_ptr_array_free(chain, TRUE);
    return true;
}

/*
 * Exports: the registry and the options every export type shares.
 *
 * Theory of operation
 * -------------------
 * An export serves block nodes to front-ends: one (node-name, as in
 * vhost-user-blk), or, for a type that binds its own nodes
 * (ExportDriver.binds_nodes: vhost-user-scsi, one node per LUN), as many
 * as the type names in its options.  export_create() reads the options in
 * qemu-storage-daemon's BlockExportOptions (type, id, node-name, writable,
 * writethrough, iothread, fixed-iothread), looks everything up, lets the
 * type read its own options (ExportDriver.parse, no side effects; a type
 * that binds its nodes calls export_bind_node() for each), rejects unknown
 * keys, and only then changes anything: it moves the nodes into the
 * export's IOThread and starts the type (ExportDriver.start).  A failure at
 * any step undoes the earlier ones, so a bad --export leaves the daemon as
 * it was.  Every node an export serves is an ExportNode in exp->nodes, so
 * the rules below apply to each of them alike.
 *
 * Where the node runs.  A block node lives in one AioContext and every
 * request to it is submitted and completed there, so an export's queues run
 * in the node's context.  iothread=ID moves the node into that IOThread
 * (it must be idle: nothing is exported from it yet).  Without iothread the
 * node stays where it is (the main loop for a node nobody exports), as in
 * qemu-storage-daemon.  If another export already serves the node from
 * another context, fixed-iothread=on is an error and fixed-iothread=off
 * (the default) uses the node's context instead of the one asked for.
 * When the last export of a node that was moved goes away, the node moves
 * back to the main loop.
 *
 * Several IOThreads for one export (iothread.0=a,iothread.1=b, or a JSON
 * list): the node moves into the first, as with one, and the export's
 * queues are spread over all of them, queue i in IOThread i % n (Export
 * ctxs/nctx).  Each queue reaches the node through a BlockQueue of its own
 * context, so its requests are submitted and completed in its IOThread.
 *
 * Sharing.  A node may back several read-only exports; an export that is
 * writable must have the node to itself (a guest caches what it reads and
 * would not see another guest's writes).  Within one export a node serves
 * once (two LUNs of one node would be two caches of it).  An export whose
 * nodes are served by other exports from different contexts cannot run
 * in both: that is an error.
 *
 * Hand-over (live migration).  A node is active (block.h: it holds its
 * image and may be written) or inactive.  An export with allow-inactive=on
 * (QEMU's option) may serve an inactive node as it is, and may share a
 * node with a writable export: the destination of a migration on this
 * host, or (active=off) the destination of one between hosts sharing the
 * storage.  Such sharing is safe because only one export of a node may
 * run at a time when either may write: the vhost-user server tells its
 * export when its front-end starts (before the first ring starts) and
 * stops (after the last ring stopped), export_set_running().  Starting
 * is refused while another export of the node runs, or when a node cannot
 * be activated (another process holds the image); otherwise the export's
 * inactive nodes are activated.  Stopping with dirty logging on is the
 * end of a live migration (QEMU stops the rings before logging is
 * switched off): the nodes no other running export uses go inactive
 * before GET_VRING_BASE is answered, so that the destination can take
 * them.  A stop without logging (reset, disconnect) keeps them.  An
 * export without allow-inactive activates its nodes when it is created,
 * as QEMU's do.
 *
 * Live management (the QMP monitor).  A started export's contexts are
 * fixed: a node bound later (export_add_lun() through the type's add_lun)
 * must come to exp->ctx.  A node no other export serves is idle, so it
 * moves there (export_move_new_node()); one another export serves is
 * already in that export's context, which must then be ours (checked by
 * export_check_sharing() with exp->started set).  Unbinding
 * (export_unbind_node(), after the device drained the node) releases it
 * as deletion does.  export_refresh_sizes() and export_get_node_stats()
 * hand over to the type, which knows what its device shows and counts.
 *
 * Threads: everything here runs in the main thread.
 */
#include <string.h>
#include <glib.h>
#include <json-glib/json-glib.h>

#include "util/main-thread.h"
#include "export/export-int.h"
#include "util/iothread.h"

static const ExportDriver *const export_drivers[] = {
    &export_vhost_user_blk,
    &export_vhost_user_scsi,
    NULL,
};

#define EXPORT_TYPES "vhost-user-blk, vhost-user-scsi"

/* Every export, in creation order. */
static GPtrArray *exports;

/* Where the exports' events go (the monitor), or NULL. */
static ExportEventSink *export_event_sink;

/* Where the exports' error-policy stops go (the monitor), or NULL. */
static VirtioIoErrorFn *export_io_error_sink;

/* ------------------------------------------------------------------------ */
/* Registry                                                                  */

Export *export_find(const char *id)
{
    assert_main_thread();
    for (guint i = 0; exports && i < exports->len; i++) {
        Export *exp = g_ptr_array_index(exports, i);

        if (!strcmp(exp->id, id)) {
            return exp;
        }
    }
    return NULL;
}

/* exp's entry for bs, or NULL. */
static ExportNode *export_node_entry(const Export *exp, BlockNode *bs)
{
    for (guint i = 0; exp->nodes && i < exp->nodes->len; i++) {
        ExportNode *n = &g_array_index(exp->nodes, ExportNode, i);

        if (n->bs == bs) {
            return n;
        }
    }
    return NULL;
}

/*
 * Another export serving bs, other than skip; NULL if none.  *entry (may
 * be NULL) gets its ExportNode for bs.
 */
static Export *export_find_other_by_node(BlockNode *bs, Export *skip,
                                         ExportNode **entry)
{
    for (guint i = 0; exports && i < exports->len; i++) {
        Export *exp = g_ptr_array_index(exports, i);
        ExportNode *n;

        if (exp != skip && (n = export_node_entry(exp, bs))) {
            if (entry) {
                *entry = n;
            }
            return exp;
        }
    }
    return NULL;
}

/*
 * A running export other than exp (NULL: any) that serves bs; if n (exp's
 * entry for bs) is given, only one where it or n may write.  NULL if
 * none.
 */
static Export *export_running_user(const Export *exp, BlockNode *bs,
                                   const ExportNode *n)
{
    for (guint i = 0; exports && i < exports->len; i++) {
        Export *o = g_ptr_array_index(exports, i);
        ExportNode *on;

        if (o != exp && o->running && (on = export_node_entry(o, bs)) &&
            (!n || n->writable || on->writable)) {
            return o;
        }
    }
    return NULL;
}

static const ExportDriver *export_driver_find(const char *type)
{
    for (int i = 0; export_drivers[i]; i++) {
        if (!strcmp(export_drivers[i]->type, type)) {
            return export_drivers[i];
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Parsing                                                                   */

/*
 * A JSON list is the one form of "iothread" that Opts cannot read (its
 * lists are lists of objects): turn ["a", "b"] into {"0": "a", "1": "b"},
 * the tree the key=value form iothread.0=a,iothread.1=b produces.
 */
static void export_json_normalize_iothreads(JsonObject *obj)
{
    JsonNode *node = json_object_get_member(obj, "iothread");
    JsonArray *array;
    JsonObject *list;

    if (!node || !JSON_NODE_HOLDS_ARRAY(node)) {
        return;
    }
    array = json_node_get_array(node);
    list = json_object_new();
    for (guint i = 0; i < json_array_get_length(array); i++) {
        g_autofree char *key = g_strdup_printf("%u", i);

        json_object_set_member(list, key,
                               json_node_copy(json_array_get_element(array,
                                                                     i)));
    }
    json_object_set_object_member(obj, "iothread", list);
}

static bool export_str_is_json(const char *str)
{
    while (g_ascii_isspace(*str)) {
        str++;
    }
    return *str == '{';
}

Opts *export_opts_parse(const char *str, Error **errp)
{
    g_autoptr(JsonParser) parser = NULL;
    JsonNode *root;

    assert_main_thread();
    if (!export_str_is_json(str)) {
        return opts_parse_keyval(str, "type", errp);
    }
    parser = json_parser_new();
    if (!json_parser_load_from_data(parser, str, -1, NULL) ||
        !(root = json_parser_get_root(parser)) ||
        !JSON_NODE_HOLDS_OBJECT(root)) {
        /* Let the common parser describe what is wrong. */
        return opts_parse_json(str, errp);
    }
    export_json_normalize_iothreads(json_node_get_object(root));
    return opts_new_from_object(json_node_get_object(root));
}

/* The options every type shares, as read from Opts. */
typedef struct ExportCommonOpts {
    const char *type;
    const char *id;
    const char *node_name;
    bool writable;
    bool writethrough;
    bool fixed_iothread;
    bool allow_inactive;
    GPtrArray *iothreads;        /* of const char * (borrowed from opts) */
} ExportCommonOpts;

/* "iothread": absent, one id, or a list (iothread.0=..., or JSON). */
static bool export_read_iothreads(Opts *opts, GPtrArray *out, Error **errp)
{
    const char *id;

    if (!opts_has(opts, "iothread")) {
        return true;
    }
    if (!opts_has(opts, "iothread.0")) {
        if (!opts_get_str(opts, "iothread", NULL, &id, errp)) {
            return false;
        }
        g_ptr_array_add(out, (gpointer)id);
        return true;
    }
    for (unsigned i = 0;; i++) {
        g_autofree char *key = g_strdup_printf("iothread.%u", i);

        if (!opts_has(opts, key)) {
            break;
        }
        if (!opts_get_str(opts, key, NULL, &id, errp)) {
            return false;
        }
        g_ptr_array_add(out, (gpointer)id);
    }
    return true;
}

static bool export_read_common(Opts *opts, ExportCommonOpts *c, Error **errp)
{
    if (!opts_get_str(opts, "type", NULL, &c->type, errp) ||
        !opts_get_str(opts, "id", NULL, &c->id, errp) ||
        !opts_get_bool(opts, "writethrough", false, &c->writethrough, errp) ||
        !opts_get_bool(opts, "fixed-iothread", false, &c->fixed_iothread,
                       errp) ||
        !opts_get_bool(opts, "allow-inactive", false, &c->allow_inactive,
                       errp) ||
        !export_read_iothreads(opts, c->iothreads, errp)) {
        return false;
    }
    if (!c->type) {
        error_setg(errp, "Parameter 'type' is missing (the export type: "
                   EXPORT_TYPES ")");
        return false;
    }
    if (!c->id) {
        error_setg(errp, "Parameter 'id' is missing");
        return false;
    }
    if (!*c->id) {
        error_setg(errp, "Parameter 'id' must not be empty");
        return false;
    }
    return true;
}

/* node-name and writable, for a type that serves the one node they name. */
static bool export_read_node_opts(Opts *opts, ExportCommonOpts *c,
                                  Error **errp)
{
    if (!opts_get_str(opts, "node-name", NULL, &c->node_name, errp) ||
        !opts_get_bool(opts, "writable", false, &c->writable, errp)) {
        return false;
    }
    if (!c->node_name) {
        error_setg(errp, "Parameter 'node-name' is missing");
        return false;
    }
    return true;
}

/* The (first) IOThread the export asks for; *iot = NULL if none.  Errors
 * name it. */
static bool export_lookup_iothread(GPtrArray *ids, IOThread **iot,
                                   Error **errp)
{
    *iot = NULL;
    for (guint i = 0; i < ids->len; i++) {
        const char *id = g_ptr_array_index(ids, i);

        if (!iothread_lookup(id)) {
            error_setg(errp, "Parameter 'iothread': there is no IOThread "
                       "'%s' (create it with --object iothread,id=%s "
                       "or object-add)", id, id);
            return false;
        }
    }
    if (ids->len >= 1) {
        *iot = iothread_lookup(g_ptr_array_index(ids, 0));
    }
    return true;
}

/* "IOThread 'x'" or "the main loop", for messages. */
static char *export_describe_ctx(AioContext *ctx, AioContext *main_ctx)
{
    IOThread *iot;

    if (ctx == main_ctx) {
        return g_strdup("the main loop");
    }
    iot = iothread_find_by_context(ctx);
    return iot ? g_strdup_printf("IOThread '%s'", iothread_get_id(iot))
               : g_strdup("another context");
}

/*
 * The prefix of messages about node n: "lun.1: " for a node a type binds
 * itself, nothing for node-name (the messages name the node).  Caller
 * frees.
 */
static char *export_node_prefix(const Export *exp, const char *what)
{
    return exp->drv->binds_nodes ? g_strdup_printf("%s: ", what)
                                 : g_strdup("");
}

/*
 * Check that node n may be exported once more, and choose the context the
 * export runs in.
 */
static bool export_check_sharing(Export *exp, const ExportNode *n,
                                 Error **errp)
{
    ExportNode *other_node = NULL;
    Export *other = export_find_other_by_node(n->bs, NULL, &other_node);
    const char *node = block_node_get_name(n->bs);
    g_autofree char *prefix = export_node_prefix(exp, n->what);

    if (!other) {
        return true;
    }
    /* allow-inactive=on on either side: two guests taking turns (a live
     * migration), which export_set_running() keeps one at a time. */
    if ((n->writable || other_node->writable) &&
        !exp->allow_inactive && !other->allow_inactive) {
        error_setg(errp, "%snode '%s' is already exported by '%s'; %s",
                   prefix, node, other->id,
                   n->writable ? "a writable export needs the node to itself"
                               : "that export is writable and needs the "
                                 "node to itself");
        return false;
    }
    if (other->ctx != exp->ctx) {
        g_autofree char *where = export_describe_ctx(other->ctx,
                                                     exp->main_ctx);
        g_autofree char *asked = export_describe_ctx(exp->ctx,
                                                     exp->main_ctx);

        if (exp->started) {
            /* A running export's queues cannot follow the node. */
            error_setg(errp, "%snode '%s' is served by export '%s' from %s, "
                       "but this export runs in %s; one export runs in one "
                       "place", prefix, node, other->id, where, asked);
            return false;
        }
        if (exp->fixed_iothread) {
            error_setg(errp, "%snode '%s' is served by export '%s' from %s, "
                       "so it cannot move (fixed-iothread=on)", prefix, node,
                       other->id, where);
            return false;
        }
        if (exp->ctx_pinned_by) {
            error_setg(errp, "%snode '%s' is served by export '%s' from %s, "
                       "but the node of %s is served from %s; one export "
                       "runs in one place", prefix, node, other->id, where,
                       exp->ctx_pinned_by, asked);
            return false;
        }
        error_report("warning: export '%s': %snode '%s' is served by "
                     "export '%s' from %s, so this export runs there "
                     "too, not in %s (fixed-iothread=on makes this an "
                     "error)", exp->id, prefix, node, other->id, where,
                     asked);
        exp->ctx = other->ctx;
        exp->iothread = other->iothread;
    }
    /* Shared: the export must stay in this node's context (a started
     * export stays where it is anyway). */
    if (!exp->started) {
        exp->ctx_pinned_by = n->what;
    }
    return true;
}

/*
 * Whether exp may take node n as it is: as in QEMU, an export that does
 * not allow inactive nodes activates its node (taking the image) or
 * fails; so does a running export (a LUN added while its front-end
 * runs), which must also not meet another running writer of the node.
 */
static bool export_add_node_check_state(Export *exp, const char *prefix,
                                        const ExportNode *n, Error **errp)
{
    Export *other = exp->running ? export_running_user(exp, n->bs, n) : NULL;

    if (other) {
        error_setg(errp, "%snode '%s' is in use by export '%s', whose "
                   "front-end is running", prefix, block_node_get_name(n->bs),
                   other->id);
        return false;
    }
    if ((exp->allow_inactive && !exp->running) ||
        block_node_is_active(n->bs)) {
        return true;
    }
    if (!block_node_set_active(n->bs, true, errp)) {
        error_prepend(errp, "%snode '%s' is inactive%s: ", prefix,
                      block_node_get_name(n->bs),
                      exp->running ? ""
                      : " (allow-inactive=on exports it as it is)");
        return false;
    }
    return true;
}

/*
 * Add bs to exp's nodes after the checks of export_bind_node(); what
 * names the option ("node-name", "lun.1").
 */
static bool export_add_node(Export *exp, const char *what, BlockNode *bs,
                            int lun, bool writable, Error **errp)
{
    g_autofree char *prefix = export_node_prefix(exp, what);
    ExportNode *dup = export_node_entry(exp, bs);
    ExportNode n = { .bs = bs, .writable = writable, .lun = lun };

    if (dup) {
        error_setg(errp, "%snode '%s' is already served by %s of this "
                   "export; give each node once", prefix,
                   block_node_get_name(bs), dup->what);
        return false;
    }
    if (writable && block_node_is_read_only(bs)) {
        error_setg(errp, "%swritable=on, but node '%s' is read-only", prefix,
                   block_node_get_name(bs));
        return false;
    }
    if (!exp->ctx) {
        /* No iothread: the export runs where its first node is. */
        exp->ctx = block_node_get_aio_context(bs);
    }
    n.what = g_strdup(what);
    if (!export_check_sharing(exp, &n, errp) ||
        !export_add_node_check_state(exp, prefix, &n, errp)) {
        g_free(n.what);
        return false;
    }
    block_node_ref(bs);
    g_array_append_val(exp->nodes, n);
    if (exp->nodes->len == 1) {
        exp->bs = bs;
        exp->writable = writable;
    }
    return true;
}

BlockNode *export_bind_node(Export *exp, const char *what,
                            const char *node_name, int lun, bool writable,
                            Error **errp)
{
    BlockNode *bs = block_node_find(node_name);

    assert_main_thread();
    g_assert(exp->drv->binds_nodes);
    if (!bs) {
        error_setg(errp, "%s: there is no node '%s' (create it with "
                   "--blockdev or blockdev-add)", what, node_name);
        return NULL;
    }
    return export_add_node(exp, what, bs, lun, writable, errp) ? bs : NULL;
}

/* ------------------------------------------------------------------------ */
/* Creation and deletion                                                     */

/*
 * Release node n (the caller drops the entry): move it back to the main
 * loop if no other export uses it, and drop the reference.
 */
static void export_release_node(Export *exp, ExportNode *n)
{
    if (!export_find_other_by_node(n->bs, exp, NULL) &&
        block_node_get_aio_context(n->bs) != exp->main_ctx) {
        Error *err = NULL;

        /* The device no longer uses it and drained it: the node is idle. */
        if (!block_node_set_aio_context(n->bs, exp->main_ctx, &err)) {
            error_prepend(&err, "export '%s': ", exp->id);
            error_report_err(err);
        }
    }
    block_node_unref(n->bs);
    g_free(n->what);
}

/* Release every node, newest first. */
static void export_release_nodes(Export *exp)
{
    for (guint i = exp->nodes->len; i-- > 0;) {
        export_release_node(exp, &g_array_index(exp->nodes, ExportNode, i));
    }
    g_array_set_size(exp->nodes, 0);
    exp->bs = NULL;
}

void export_unbind_node(Export *exp, BlockNode *bs)
{
    assert_main_thread();
    for (guint i = 0; i < exp->nodes->len; i++) {
        ExportNode *n = &g_array_index(exp->nodes, ExportNode, i);

        if (n->bs == bs) {
            export_release_node(exp, n);
            g_array_remove_index(exp->nodes, i);
            break;
        }
    }
    /* nodes[0] may have changed (or there is none left: a vhost-user-scsi
     * export whose every LUN was removed). */
    if (exp->nodes->len) {
        ExportNode *first = &g_array_index(exp->nodes, ExportNode, 0);

        exp->bs = first->bs;
        exp->writable = first->writable;
    } else {
        exp->bs = NULL;
        exp->writable = false;
    }
}

bool export_move_new_node(Export *exp, BlockNode *bs, Error **errp)
{
    AioContext *ctx = block_node_get_aio_context(bs);

    assert_main_thread();
    if (ctx == exp->ctx) {
        return true;
    }
    /* export_check_sharing() lets a shared node through only in exp->ctx. */
    g_assert(!export_find_other_by_node(bs, exp, NULL));
    if (ctx != exp->main_ctx) {
        g_autofree char *where = export_describe_ctx(ctx, exp->main_ctx);

        /* Nobody exports it, yet it is not in the main loop: a node above
         * it took it along into an export's context. */
        error_setg(errp, "node '%s' runs in %s, where a node that uses it "
                   "is exported; it cannot move", block_node_get_name(bs),
                   where);
        return false;
    }
    /* No export serves it: nothing submits requests to it. */
    return block_node_set_aio_context(bs, exp->ctx, errp);
}

/* Release the nodes and free exp (its state is the caller's business). */
static void export_free(Export *exp)
{
    export_release_nodes(exp);
    g_array_unref(exp->nodes);
    g_free(exp->ctxs);
    g_free(exp->start_error);
    g_free(exp->id);
    g_free(exp);
}

/* The contexts of the queues: the IOThreads listed if several, else ctx. */
static void export_setup_ctxs(Export *exp, GPtrArray *iothreads)
{
    if (iothreads->len > 1) {
        exp->nctx = iothreads->len;
        exp->ctxs = g_new(AioContext *, exp->nctx);
        for (guint i = 0; i < iothreads->len; i++) {
            exp->ctxs[i] = iothread_get_aio_context(
                iothread_lookup(g_ptr_array_index(iothreads, i)));
        }
    } else {
        exp->nctx = 1;
        exp->ctxs = g_new(AioContext *, 1);
        exp->ctxs[0] = exp->ctx;
    }
}

/* Move every node into exp->ctx (nodes other exports share are there). */
static bool export_move_nodes(Export *exp, Error **errp)
{
    for (guint i = 0; i < exp->nodes->len; i++) {
        ExportNode *n = &g_array_index(exp->nodes, ExportNode, i);

        if (!block_node_set_aio_context(n->bs, exp->ctx, errp)) {
            return false;
        }
    }
    return true;
}

static Export *export_create_inner(Opts *opts, AioContext *main_ctx,
                                   ExportCommonOpts *c, Error **errp)
{
    const ExportDriver *drv;
    BlockNode *bs = NULL;
    IOThread *iot;
    Export *exp;

    if (!export_read_common(opts, c, errp)) {
        return NULL;
    }
    drv = export_driver_find(c->type);
    if (!drv) {
        error_setg(errp, "Parameter 'type': unknown export type '%s' "
                   "(supported: " EXPORT_TYPES ")", c->type);
        return NULL;
    }
    if (!drv->binds_nodes && !export_read_node_opts(opts, c, errp)) {
        return NULL;
    }
    if (export_find(c->id)) {
        error_setg(errp, "an export with id '%s' already exists", c->id);
        return NULL;
    }
    if (!drv->binds_nodes) {
        bs = block_node_find(c->node_name);
        if (!bs) {
            error_setg(errp, "Parameter 'node-name': there is no node '%s' "
                       "(create it with --blockdev or blockdev-add)",
                       c->node_name);
            return NULL;
        }
    }
    if (!export_lookup_iothread(c->iothreads, &iot, errp)) {
        return NULL;
    }

    exp = g_new0(Export, 1);
    exp->id = g_strdup(c->id);
    exp->drv = drv;
    exp->nodes = g_array_new(FALSE, FALSE, sizeof(ExportNode));
    exp->main_ctx = main_ctx;
    exp->writethrough = c->writethrough;
    exp->fixed_iothread = c->fixed_iothread;
    exp->allow_inactive = c->allow_inactive;
    exp->iothread = iot;
    /* NULL: where the first node is (export_add_node()). */
    exp->ctx = iot ? iothread_get_aio_context(iot) : NULL;
    if (bs && !export_add_node(exp, "node-name", bs, -1, c->writable,
                               errp)) {
        goto fail;
    }
    exp->state = drv->parse(exp, opts, errp);
    if (!exp->state) {
        goto fail;
    }
    /* Every type serves at least one node (parse() says so if not). */
    g_assert(exp->nodes->len > 0);
    exp->ctx_pinned_by = NULL;
    export_setup_ctxs(exp, c->iothreads);
    if (!opts_check_unused(opts, NULL, errp) ||
        !export_move_nodes(exp, errp) ||
        !drv->start(exp, exp->state, errp)) {
        drv->free(exp->state);
        goto fail;
    }
    exp->started = true;
    if (!exports) {
        exports = g_ptr_array_new();
    }
    g_ptr_array_add(exports, exp);
    return exp;

fail:
    export_free(exp);
    return NULL;
}

Export *export_create(Opts *opts, AioContext *main_ctx, Error **errp)
{
    g_autoptr(GPtrArray) iothreads = g_ptr_array_new();
    ExportCommonOpts c = { .iothreads = iothreads };
    Export *exp;

    assert_main_thread();
    exp = export_create_inner(opts, main_ctx, &c, errp);
    if (!exp && c.id && *c.id && errp && *errp) {
        error_prepend(errp, "export '%s': ", c.id);
    }
    return exp;
}

void export_set_event_sink(ExportEventSink *sink)
{
    assert_main_thread();
    export_event_sink = sink;
}

void export_emit_event(const char *event, const char *id, int queue,
                       int requests)
{
    assert_main_thread();
    if (export_event_sink) {
        export_event_sink(event, id, queue, requests);
    }
}

void export_set_io_error_sink(VirtioIoErrorFn *sink)
{
    assert_main_thread();
    export_io_error_sink = sink;
}

void export_io_error_event(const VirtioIoError *e)
{
    assert_main_thread();
    if (export_io_error_sink) {
        export_io_error_sink(e);
    }
}

/* The error policies' option values, by BlockErrorPolicy. */
static const char *const export_error_policy_names[] = {
    [BLOCK_ERROR_POLICY_REPORT] = "report",
    [BLOCK_ERROR_POLICY_IGNORE] = "ignore",
    [BLOCK_ERROR_POLICY_ENOSPC] = "enospc",
    [BLOCK_ERROR_POLICY_STOP] = "stop",
    NULL,
};

bool export_parse_error_policies(Opts *opts, const char *rkey,
                                 const char *wkey, BlockErrorPolicy *rerror,
                                 BlockErrorPolicy *werror, Error **errp)
{
    int r, w;

    if (!opts_get_enum(opts, rkey, export_error_policy_names,
                       BLOCK_ERROR_POLICY_REPORT, &r, errp) ||
        !opts_get_enum(opts, wkey, export_error_policy_names,
                       BLOCK_ERROR_POLICY_REPORT, &w, errp)) {
        return false;
    }
    *rerror = (BlockErrorPolicy)r;
    *werror = (BlockErrorPolicy)w;
    return true;
}

bool export_resume(Export *exp, unsigned *retried, Error **errp)
{
    unsigned n;

    assert_main_thread();
    if (!exp->drv->stops) {
        error_setg(errp, "export '%s' of type '%s' has no error policies to "
                   "resume from", exp->id, exp->drv->type);
        return false;
    }
    n = exp->drv->stops(exp->state, true);
    if (retried) {
        *retried = n;
    }
    return true;
}

bool export_is_io_stopped(const Export *exp)
{
    return exp->drv->stops && exp->drv->stops(exp->state, false) > 0;
}

void export_delete(Export *exp)
{
    assert_main_thread();
    g_ptr_array_remove(exports, exp);
    exp->drv->free(exp->state);
    export_free(exp);
}

void export_foreach(void (*fn)(Export *exp, void *opaque), void *opaque)
{
    for (guint i = 0; exports && i < exports->len; i++) {
        fn(g_ptr_array_index(exports, i), opaque);
    }
}

const char *export_get_id(const Export *exp)
{
    return exp->id;
}

BlockNode *export_get_node(const Export *exp)
{
    return exp->bs;
}

unsigned export_get_num_nodes(const Export *exp)
{
    return exp->nodes->len;
}

BlockNode *export_get_nth_node(const Export *exp, unsigned i)
{
    g_assert(i < exp->nodes->len);
    return g_array_index(exp->nodes, ExportNode, i).bs;
}

unsigned export_get_num_queues(const Export *exp)
{
    return exp->drv->num_queues(exp->state);
}

bool export_get_queue_stats(Export *exp, unsigned i, ExportQueueStats *out)
{
    VirtQueueStats st;
    IOThread *iot;

    if (i >= export_get_num_queues(exp) ||
        !exp->drv->get_queue_stats(exp->state, i, &st)) {
        return false;
    }
    iot = iothread_find_by_context(exp->ctxs[i % exp->nctx]);
    *out = (ExportQueueStats) {
        .iothread = iot ? iothread_get_id(iot) : NULL,
        .requests = st.requests,
        .kicks = st.kicks,
        .polled = st.polled,
        .interrupts = st.interrupts,
        .interrupts_suppressed = st.interrupts_suppressed,
    };
    return true;
}

/* ------------------------------------------------------------------------ */
/* Live management                                                           */

const char *export_get_type(const Export *exp)
{
    return exp->drv->type;
}

bool export_has_client(const Export *exp)
{
    assert_main_thread();
    return exp->drv->has_client(exp->state);
}

int export_get_nth_lun(const Export *exp, unsigned i)
{
    g_assert(i < exp->nodes->len);
    return g_array_index(exp->nodes, ExportNode, i).lun;
}

Export *export_find_by_node(BlockNode *bs)
{
    return export_find_other_by_node(bs, NULL, NULL);
}

Export *export_find_by_iothread(IOThread *iot)
{
    AioContext *ctx = iothread_get_aio_context(iot);

    for (guint i = 0; exports && i < exports->len; i++) {
        Export *exp = g_ptr_array_index(exports, i);

        if (exp->iothread == iot || exp->ctx == ctx) {
            return exp;
        }
        for (unsigned j = 0; j < exp->nctx; j++) {
            if (exp->ctxs[j] == ctx) {
                return exp;
            }
        }
    }
    return NULL;
}

bool export_get_node_stats(Export *exp, unsigned i, BlockAcctStats *out)
{
    assert_main_thread();
    if (i >= exp->nodes->len || !exp->drv->get_node_stats) {
        return false;
    }
    memset(out, 0, sizeof(*out));
    return exp->drv->get_node_stats(exp, exp->state, i, out);
}

void export_refresh_sizes(void)
{
    for (guint i = 0; exports && i < exports->len; i++) {
        Export *exp = g_ptr_array_index(exports, i);

        assert_main_thread();
        if (exp->drv->refresh_sizes) {
            exp->drv->refresh_sizes(exp, exp->state);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Hand-over: one running front-end per image                                */

bool export_is_running(const Export *exp)
{
    return exp->running;
}

bool export_get_allow_inactive(const Export *exp)
{
    return exp->allow_inactive;
}

const char *export_get_start_error(const Export *exp)
{
    return exp->start_error;
}

/* Inactivate exp's first count nodes again (a refused start's undo). */
static void export_undo_activation(Export *exp, const bool *activated,
                                   guint count)
{
    for (guint i = count; i-- > 0;) {
        if (activated[i]) {
            block_node_set_active(g_array_index(exp->nodes, ExportNode,
                                                i).bs, false, NULL);
        }
    }
}

/* Take exp's nodes: check that nobody else runs them, activate them. */
static bool export_take_nodes(Export *exp, Error **errp)
{
    g_autofree bool *activated = g_new0(bool, exp->nodes->len + 1);

    for (guint i = 0; i < exp->nodes->len; i++) {
        ExportNode *n = &g_array_index(exp->nodes, ExportNode, i);
        Export *other = export_running_user(exp, n->bs, n);

        if (other) {
            error_setg(errp, "export '%s' cannot start: node '%s' is in use "
                       "by export '%s', whose front-end is running (it "
                       "releases the node when it stops at the end of a "
                       "migration)", exp->id, block_node_get_name(n->bs),
                       other->id);
            return false;
        }
    }
    for (guint i = 0; i < exp->nodes->len; i++) {
        BlockNode *bs = g_array_index(exp->nodes, ExportNode, i).bs;

        if (block_node_is_active(bs)) {
            continue;
        }
        if (!block_node_set_active(bs, true, errp)) {
            error_prepend(errp, "export '%s' cannot start: ", exp->id);
            export_undo_activation(exp, activated, i);
            return false;
        }
        activated[i] = true;
        error_report("export '%s' took node '%s'", exp->id,
                     block_node_get_name(bs));
    }
    return true;
}

/* The front-end migrated away: let the destination have the nodes. */
static void export_release_nodes_for_migration(Export *exp)
{
    for (guint i = 0; i < exp->nodes->len; i++) {
        BlockNode *bs = g_array_index(exp->nodes, ExportNode, i).bs;
        Error *err = NULL;

        if (!block_node_is_active(bs) ||
            export_running_user(exp, bs, NULL)) {
            continue;
        }
        if (!block_node_set_active(bs, false, &err)) {
            error_prepend(&err, "export '%s' could not release node '%s': ",
                          exp->id, block_node_get_name(bs));
            error_report_err(err);
            continue;
        }
        error_report("export '%s' released node '%s' (its front-end "
                     "stopped with dirty logging on: migrated away)",
                     exp->id, block_node_get_name(bs));
    }
}

bool export_set_running(Export *exp, bool running, bool migrating,
                        Error **errp)
{
    assert_main_thread();
    if (!running) {
        exp->running = false;
        if (migrating) {
            export_release_nodes_for_migration(exp);
        }
        return true;
    }
    g_clear_pointer(&exp->start_error, g_free);
    if (!export_take_nodes(exp, errp)) {
        exp->start_error = g_strdup(error_get_pretty(*errp));
        return false;
    }
    exp->running = true;
    return true;
}

/* One node for blockdev-set-active: refused under a running export. */
static bool export_set_one_node_active(BlockNode *bs, bool active,
                                       Error **errp)
{
    Export *user = active ? NULL : export_running_user(NULL, bs, NULL);

    if (user) {
        error_setg(errp, "Cannot inactivate node '%s': export '%s' is "
                   "running on it (stop its front-end first)",
                   block_node_get_name(bs), user->id);
        return false;
    }
    return block_node_set_active(bs, active, errp);
}

bool export_set_node_active(BlockNode *bs, bool active, Error **errp)
{
    g_autoptr(GPtrArray) nodes = NULL;

    assert_main_thread();
    if (bs) {
        return export_set_one_node_active(bs, active, errp);
    }
    /* Oldest first is children first: activate in that order, inactivate
     * in the reverse (parents first, so no active parent is left). */
    nodes = block_node_list();
    for (guint k = 0; k < nodes->len; k++) {
        guint i = active ? k : nodes->len - 1 - k;

        if (!export_set_one_node_active(g_ptr_array_index(nodes, i), active,
                                        errp)) {
            return false;
        }
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* LUNs                                                                      */

/* Whether exp's type has LUNs (add_lun and del_lun); an error if not. */
static bool export_check_has_luns(const Export *exp, Error **errp)
{
    assert_main_thread();
    if (!exp->drv->add_lun) {
        error_setg(errp, "export '%s' is a %s export: only vhost-user-scsi "
                   "exports have LUNs", exp->id, exp->drv->type);
        return false;
    }
    return true;
}

/* What the type's add_lun or del_lun returned; its error names exp. */
static bool export_lun_done(const Export *exp, bool ok, Error **errp)
{
    if (!ok) {
        error_prepend(errp, "export '%s': ", exp->id);
    }
    return ok;
}

bool export_add_lun(Export *exp, Opts *opts, Error **errp)
{
    return export_check_has_luns(exp, errp) &&
           export_lun_done(exp, exp->drv->add_lun(exp, exp->state, opts,
                                                  errp), errp);
}

bool export_del_lun(Export *exp, unsigned lun, Error **errp)
{
    return export_check_has_luns(exp, errp) &&
           export_lun_done(exp, exp->drv->del_lun(exp, exp->state, lun,
                                                  errp), errp);
}

void export_delete_all(void)
{
    /* Newest first: the reverse of the order they were created in. */
    while (exports && exports->len) {
        export_delete(g_ptr_array_index(exports, exports->len - 1));
    }
    g_clear_pointer(&exports, g_ptr_array_unref);
}

/*
 * QMP commands for block nodes: blockdev-add, blockdev-del,
 * query-named-block-nodes, blockdev-set-active, block_resize and
 * query-blockstats.
 *
 * Theory of operation
 * -------------------
 * Nodes.  blockdev-add takes the node's options exactly as --blockdev
 * takes them in JSON (QEMU's BlockdevOptions: "driver", "node-name",
 * "cache": {"direct": ...}, a child inline as "file": {...} or by name as
 * "file": "NODE"); the arguments object becomes the node's Opts as it is
 * (opts_new_from_object()) and goes to blockdev_add(), which opens the node
 * in the main loop and keeps it until blockdev-del.  As in QEMU's QMP (and
 * unlike the command line), "node-name" is required: a node nobody can name
 * could never be deleted.  Unknown and ill-typed options are reported by
 * the block layer, naming the option.
 *
 * query-named-block-nodes lists every registered node (inline children
 * too, as QEMU does) with the subset of QEMU's BlockDeviceInfo that has a
 * meaning here; the throttling members are left out (Spindle does not
 * throttle).  "spindle-iothread" says which IOThread's context the node
 * lives in (null: the main loop), "spindle-user-node" whether blockdev-del
 * can drop it.  "flat" is accepted and changes nothing: without backing
 * files there is no chain to flatten.
 *
 * blockdev-set-active is QEMU 10's: {"node-name": N (optional: every
 * node), "active": bool}.  It makes the node and those below it active
 * (taking the image's lock, or failing because another process holds
 * it) or inactive (drained, flushed, unlocked: another process may write
 * the image); export_set_node_active() refuses to inactivate a node a
 * running export writes through.  Exports hand their nodes over by
 * themselves at the start and end of a migration; this is for doing it
 * by hand.  query-named-block-nodes shows "active" (QEMU 10's member).
 *
 * block_resize grows a node (block_node_resize(): the driver grows what is
 * below, and every node's length is read again), then export_refresh_sizes()
 * tells the front-ends of every export whose size changed.  There are no
 * "devices" (QEMU's BlockBackends) in Spindle: "device" is refused with a
 * message that says to use "node-name".
 *
 * Statistics.  Spindle counts I/O per export and node (BlockAcct: the
 * requests a device sent to the node), not per node alone, so
 * query-blockstats reports one entry per node an export serves:
 *   {"device": "", "node-name": N, "qdev": EXPORT-ID, "stats": {...},
 *    "spindle-export": EXPORT-ID [, "spindle-lun": L]}
 * in export order (oldest first), nodes in LUN order.  "qdev" is the
 * export id: the export is what plays the device's part.  With
 * "query-nodes": true it reports one entry per registered node instead,
 * {"node-name": N, "stats": {...}, "spindle-exports": [IDS]}, its stats the
 * sum over every export that serves it (all zero for a node no export
 * serves: the block layer itself does not count).  "parent" (QEMU's stats
 * of the protocol layer below) is not reported.
 *
 * The stats object has QEMU's BlockDeviceStats names.  As QEMU's
 * virtio-blk does, WRITE ZEROES requests count as writes (wr_operations,
 * wr_bytes with the zeroed length, wr_total_time_ns, failed_wr_operations),
 * and DISCARD as unmap; "spindle-write-zeroes" gives the WRITE ZEROES part
 * on its own so the two can be told apart.  Spindle does not merge
 * requests (*_merged are 0) and counts requests its devices reject as
 * invalid nowhere (invalid_* are 0, account_invalid is false); failed
 * requests are counted (account_failed is true).  There are no latency
 * histograms or timed windows (timed_stats is empty); wr_highest_offset
 * and idle_time_ns, which Spindle does not track, are left out.
 *
 * Threads: main thread only.
 */
#include <inttypes.h>
#include <string.h>
#include <glib.h>
#include <json-glib/json-glib.h>

#include "block/block.h"
#include "export/blockdev.h"
#include "export/export.h"
#include "util/main-thread.h"
#include "qmp-int.h"
#include "monitor/qmp.h"
#include "util/iothread.h"
#include "util/opts.h"

/* The registered node node_name, or NULL with QEMU's DeviceNotFound. */
static BlockNode *find_node(const char *node_name, Error **errp)
{
    BlockNode *bs = block_node_find(node_name);

    if (!bs) {
        qmp_error_set(errp, QMP_ERROR_CLASS_DEVICE_NOT_FOUND,
                      "Cannot find node-name='%s'", node_name);
    }
    return bs;
}

/* ------------------------------------------------------------------------ */
/* blockdev-add / blockdev-del                                               */

static JsonNode *qmp_blockdev_add(JsonObject *args, Error **errp)
{
    g_autoptr(Opts) opts = NULL;
    const char *driver, *node_name;

    assert_main_thread();
    /* The rest is checked (unknown keys included) by the block layer. */
    if (!qmp_arg_str(args, "driver", true, &driver, errp)) {
        return NULL;
    }
    if (!json_object_has_member(args, "node-name")) {
        error_setg(errp, "Parameter 'node-name' is missing: a node added "
                   "at run time needs a name (blockdev-del and exports "
                   "refer to it)");
        return NULL;
    }
    if (!qmp_arg_str(args, "node-name", true, &node_name, errp)) {
        return NULL;
    }
    opts = opts_new_from_object(args);
    if (!blockdev_add(opts, main_loop_get_context(), errp)) {
        return NULL;
    }
    return qmp_return_empty();
}

static JsonNode *qmp_blockdev_del(JsonObject *args, Error **errp)
{
    const char *node_name;

    assert_main_thread();
    if (!qmp_args_only_str(args, "node-name", &node_name, errp) ||
        !blockdev_del(node_name, errp)) {
        return NULL;
    }
    return qmp_return_empty();
}

/* ------------------------------------------------------------------------ */
/* query-named-block-nodes                                                   */

/*
 * What QEMU shows as a node's "file": the image at the bottom of its
 * chain, "null-co://" (or "null-aio://") for the null drivers, else "".
 */
static char *node_file_name(BlockNode *bs)
{
    const char *filename = block_node_get_filename(bs);
    BlockNode *bottom = bs;

    if (filename) {
        return g_strdup(filename);
    }
    while (block_node_get_child(bottom)) {
        bottom = block_node_get_child(bottom);
    }
    if (g_str_has_prefix(block_node_get_driver_name(bottom), "null-")) {
        return g_strdup_printf("%s://", block_node_get_driver_name(bottom));
    }
    return g_strdup("");
}

/*
 * QEMU's ImageInfo of bs: its file, format and size and, for a qcow2
 * node with a backing node, the backing chain nested in backing-image;
 * *depth gets the chain's length below bs.
 */
static JsonObject *node_image_info(BlockNode *bs, int64_t *depth)
{
    JsonObject *image = json_object_new();
    g_autofree char *file = node_file_name(bs);
    BlockNode *backing = block_qcow2_get_backing(bs);

    json_object_set_string_member(image, "filename", file);
    json_object_set_string_member(image, "format",
                                  block_node_get_driver_name(bs));
    json_object_set_int_member(image, "virtual-size",
                               block_node_get_length(bs));
    *depth = 0;
    if (backing) {
        g_autofree char *bfile = node_file_name(backing);
        const char *named = block_qcow2_get_backing_file(bs);
        int64_t below;

        json_object_set_string_member(image, "backing-filename",
                                      named ? named : bfile);
        json_object_set_string_member(image, "full-backing-filename", bfile);
        json_object_set_string_member(image, "backing-filename-format",
                                      block_node_get_driver_name(backing));
        json_object_set_object_member(image, "backing-image",
                                      node_image_info(backing, &below));
        *depth = below + 1;
    }
    return image;
}

static JsonObject *node_info(BlockNode *bs)
{
    JsonObject *o = json_object_new();
    JsonObject *cache = json_object_new();
    int64_t depth;
    JsonObject *image = node_image_info(bs, &depth);
    g_autofree char *file = node_file_name(bs);
    const char *drv = block_node_get_driver_name(bs);
    IOThread *iot = iothread_find_by_context(block_node_get_aio_context(bs));

    json_object_set_string_member(o, "node-name", block_node_get_name(bs));
    json_object_set_string_member(o, "drv", drv);
    json_object_set_boolean_member(o, "ro", block_node_is_read_only(bs));
    json_object_set_boolean_member(o, "active", block_node_is_active(bs));
    json_object_set_string_member(o, "file", file);
    json_object_set_boolean_member(o, "encrypted", false);
    json_object_set_string_member(o, "detect_zeroes", "off");
    if (json_object_has_member(image, "backing-filename")) {
        json_object_set_string_member(o, "backing_file",
            json_object_get_string_member(image, "backing-filename"));
    }
    json_object_set_int_member(o, "backing_file_depth", depth);
    json_object_set_int_member(o, "write_threshold", 0);

    /* Writeback: an export's writethrough=on flushes after each write
     * itself; the node never does. */
    json_object_set_boolean_member(cache, "writeback", true);
    json_object_set_boolean_member(cache, "direct",
                                   block_node_get_cache_direct(bs));
    json_object_set_boolean_member(cache, "no-flush",
                                   block_node_get_cache_no_flush(bs));
    json_object_set_object_member(o, "cache", cache);

    json_object_set_object_member(o, "image", image);

    if (iot) {
        json_object_set_string_member(o, "spindle-iothread",
                                      iothread_get_id(iot));
    } else {
        json_object_set_null_member(o, "spindle-iothread");
    }
    json_object_set_boolean_member(o, "spindle-user-node",
                                   blockdev_is_user_node(bs));
    return o;
}

/* A new array of entry(node) for every node, in the block layer's order. */
static JsonArray *node_entries(JsonObject *(*entry)(BlockNode *bs))
{
    g_autoptr(GPtrArray) nodes = block_node_list();
    JsonArray *arr = json_array_new();

    for (guint i = 0; i < nodes->len; i++) {
        json_array_add_object_element(arr,
                                      entry(g_ptr_array_index(nodes, i)));
    }
    return arr;
}

static JsonNode *qmp_query_named_block_nodes(JsonObject *args, Error **errp)
{
    bool flat = false;

    assert_main_thread();
    /* Accepted as QEMU does; the list is the same either way. */
    if (!qmp_args_only_bool(args, "flat", &flat, errp)) {
        return NULL;
    }
    return qmp_return_array(node_entries(node_info));
}

/* ------------------------------------------------------------------------ */
/* blockdev-set-active                                                       */

static JsonNode *qmp_blockdev_set_active(JsonObject *args, Error **errp)
{
    static const char *const allowed[] = { "node-name", "active", NULL };
    const char *node_name = NULL;
    BlockNode *bs = NULL;
    bool active;

    assert_main_thread();
    if (!qmp_arg_str(args, "node-name", false, &node_name, errp) ||
        !qmp_arg_bool(args, "active", true, &active, errp) ||
        !qmp_args_check(args, allowed, errp)) {
        return NULL;
    }
    if (node_name && !(bs = find_node(node_name, errp))) {
        return NULL;
    }
    if (!export_set_node_active(bs, active, errp)) {
        return NULL;
    }
    return qmp_return_empty();
}

/* ------------------------------------------------------------------------ */
/* block_resize                                                              */

static JsonNode *qmp_block_resize(JsonObject *args, Error **errp)
{
    static const char *const allowed[] = { "device", "node-name", "size",
                                           NULL };
    const char *node_name;
    int64_t size;
    BlockNode *bs;

    assert_main_thread();
    if (!qmp_args_check(args, allowed, errp)) {
        return NULL;
    }
    if (json_object_has_member(args, "device")) {
        error_setg(errp, "Parameter 'device' is not supported: Spindle has "
                   "no block devices; use 'node-name'");
        return NULL;
    }
    if (!qmp_arg_str(args, "node-name", true, &node_name, errp) ||
        !qmp_arg_int(args, "size", true, 0, INT64_MAX, &size, errp)) {
        return NULL;
    }
    bs = find_node(node_name, errp);
    if (!bs || !block_node_resize(bs, size, errp)) {
        return NULL;
    }
    export_refresh_sizes();
    return qmp_return_empty();
}

/* ------------------------------------------------------------------------ */
/* query-blockstats                                                          */

static void set_uint(JsonObject *o, const char *name, uint64_t v)
{
    /* JSON integers are signed 64-bit in json-glib; counters never get
     * near 2^63. */
    json_object_set_int_member(o, name, (gint64)MIN(v, (uint64_t)G_MAXINT64));
}

/* QEMU's BlockDeviceStats from Spindle's counters. */
static JsonObject *stats_object(const BlockAcctStats *st)
{
    const BlockAcctOpStats *rd = &st->op[BLOCK_OP_READ];
    const BlockAcctOpStats *wr = &st->op[BLOCK_OP_WRITE];
    const BlockAcctOpStats *wz = &st->op[BLOCK_OP_WRITE_ZEROES];
    const BlockAcctOpStats *fl = &st->op[BLOCK_OP_FLUSH];
    const BlockAcctOpStats *un = &st->op[BLOCK_OP_DISCARD];
    JsonObject *o = json_object_new();
    JsonObject *z = json_object_new();

    set_uint(o, "rd_bytes", rd->bytes);
    set_uint(o, "wr_bytes", wr->bytes + wz->bytes);
    set_uint(o, "unmap_bytes", un->bytes);
    set_uint(o, "rd_operations", rd->ops);
    set_uint(o, "wr_operations", wr->ops + wz->ops);
    set_uint(o, "flush_operations", fl->ops);
    set_uint(o, "unmap_operations", un->ops);
    set_uint(o, "rd_total_time_ns", rd->total_time_ns);
    set_uint(o, "wr_total_time_ns", wr->total_time_ns + wz->total_time_ns);
    set_uint(o, "flush_total_time_ns", fl->total_time_ns);
    set_uint(o, "unmap_total_time_ns", un->total_time_ns);
    set_uint(o, "rd_merged", 0);
    set_uint(o, "wr_merged", 0);
    set_uint(o, "unmap_merged", 0);
    set_uint(o, "failed_rd_operations", rd->failed);
    set_uint(o, "failed_wr_operations", wr->failed + wz->failed);
    set_uint(o, "failed_flush_operations", fl->failed);
    set_uint(o, "failed_unmap_operations", un->failed);
    set_uint(o, "invalid_rd_operations", 0);
    set_uint(o, "invalid_wr_operations", 0);
    set_uint(o, "invalid_flush_operations", 0);
    set_uint(o, "invalid_unmap_operations", 0);
    json_object_set_boolean_member(o, "account_invalid", false);
    json_object_set_boolean_member(o, "account_failed", true);
    json_object_set_array_member(o, "timed_stats", json_array_new());

    set_uint(z, "operations", wz->ops);
    set_uint(z, "bytes", wz->bytes);
    set_uint(z, "failed-operations", wz->failed);
    set_uint(z, "total-time-ns", wz->total_time_ns);
    json_object_set_object_member(o, "spindle-write-zeroes", z);
    return o;
}

/* query-nodes=false: one entry per node of each export. */
static void export_stats_entries(Export *exp, void *opaque)
{
    JsonArray *arr = opaque;

    for (unsigned i = 0; i < export_get_num_nodes(exp); i++) {
        BlockNode *bs = export_get_nth_node(exp, i);
        JsonObject *o;
        BlockAcctStats st;
        int lun = export_get_nth_lun(exp, i);

        if (!export_get_node_stats(exp, i, &st)) {
            continue;
        }
        o = json_object_new();
        json_object_set_string_member(o, "device", "");
        json_object_set_string_member(o, "node-name", block_node_get_name(bs));
        json_object_set_string_member(o, "qdev", export_get_id(exp));
        json_object_set_object_member(o, "stats", stats_object(&st));
        json_object_set_string_member(o, "spindle-export", export_get_id(exp));
        if (lun >= 0) {
            json_object_set_int_member(o, "spindle-lun", lun);
        }
        json_array_add_object_element(arr, o);
    }
}

/* query-nodes=true: a node's counters summed over every export. */
typedef struct NodeStatsSum {
    BlockNode *bs;
    BlockAcctStats sum;
    JsonArray *exports;          /* ids of the exports that serve bs */
} NodeStatsSum;

static void node_stats_add_export(Export *exp, void *opaque)
{
    NodeStatsSum *s = opaque;

    for (unsigned i = 0; i < export_get_num_nodes(exp); i++) {
        BlockAcctStats st;

        if (export_get_nth_node(exp, i) == s->bs &&
            export_get_node_stats(exp, i, &st)) {
            block_acct_stats_add(&s->sum, &st);
            json_array_add_string_element(s->exports, export_get_id(exp));
        }
    }
}

static JsonObject *node_stats_entry(BlockNode *bs)
{
    NodeStatsSum s = { .bs = bs, .exports = json_array_new() };
    JsonObject *o = json_object_new();

    export_foreach(node_stats_add_export, &s);
    json_object_set_string_member(o, "node-name", block_node_get_name(bs));
    json_object_set_object_member(o, "stats", stats_object(&s.sum));
    json_object_set_array_member(o, "spindle-exports", s.exports);
    return o;
}

static JsonNode *qmp_query_blockstats(JsonObject *args, Error **errp)
{
    bool query_nodes = false;
    JsonArray *arr;

    assert_main_thread();
    if (!qmp_args_only_bool(args, "query-nodes", &query_nodes, errp)) {
        return NULL;
    }
    if (query_nodes) {
        return qmp_return_array(node_entries(node_stats_entry));
    }
    arr = json_array_new();
    export_foreach(export_stats_entries, arr);
    return qmp_return_array(arr);
}

/* ------------------------------------------------------------------------ */

void qmp_register_block_commands(void)
{
    qmp_register_command("blockdev-add", qmp_blockdev_add);
    qmp_register_command("blockdev-del", qmp_blockdev_del);
    qmp_register_command("query-named-block-nodes",
                         qmp_query_named_block_nodes);
    qmp_register_command("block_resize", qmp_block_resize);
    qmp_register_command("blockdev-set-active", qmp_blockdev_set_active);
    qmp_register_command("query-blockstats", qmp_query_blockstats);
}

/*
 * The user's block nodes: those --blockdev and QMP blockdev-add created.
 *
 * Theory of operation: the block layer keeps every node in its registry
 * (by node-name), including children opened inline; this file keeps the
 * list of the ones the user created, oldest first, holding one reference
 * to each.  blockdev_del() refuses a node that something still uses (an
 * export, or another node as its child: the block layer keeps no count of
 * users, so we ask both) and drops the reference; the node closes when
 * its last reference goes (an export holding one keeps it alive).  At
 * shutdown the exports go first, then blockdev_del_all() drops the nodes
 * newest first, so that a node goes before a node it refers to by name.
 *
 * Threads: main thread.
 */
#include <glib.h>

#include "export/blockdev.h"
#include "export/export.h"
#include "util/main-thread.h"

static GPtrArray *blockdev_nodes;   /* BlockNode *, one reference each */
static BlockNode *blockdev_keep(BlockNode *bs)
{
    if (!bs) {
        return NULL;
    }
    if (!blockdev_nodes) {
        blockdev_nodes = g_ptr_array_new();
    }
    g_ptr_array_add(blockdev_nodes, bs);
    return bs;
}

BlockNode *blockdev_add(Opts *opts, AioContext *ctx, Error **errp)
{
    assert_main_thread();
    g_assert(aio_context_in_home_thread(ctx));
    return blockdev_keep(block_node_open(opts, ctx, errp));
}

BlockNode *blockdev_add_str(const char *str, AioContext *ctx, Error **errp)
{
    assert_main_thread();
    g_assert(aio_context_in_home_thread(ctx));
    return blockdev_keep(block_node_open_str(str, ctx, errp));
}

bool blockdev_is_user_node(BlockNode *bs)
{
    assert_main_thread();
    return blockdev_nodes && g_ptr_array_find(blockdev_nodes, bs, NULL);
}

bool blockdev_del(const char *node_name, Error **errp)
{
    BlockNode *bs, *parent;
    Export *exp;

    assert_main_thread();
    bs = block_node_find(node_name);
    if (!bs) {
        error_setg(errp, "Failed to find node with node-name='%s'",
                   node_name);
        return false;
    }
    if (!blockdev_is_user_node(bs)) {
        error_setg(errp, "Node '%s' is not a top-level node (it was opened "
                   "as a child)", node_name);
        return false;
    }
    exp = export_find_by_node(bs);
    if (exp) {
        error_setg(errp, "Node '%s' is busy: export '%s' uses it", node_name,
                   export_get_id(exp));
        return false;
    }
    parent = block_node_find_parent(bs);
    if (parent) {
        error_setg(errp, "Node '%s' is busy: node '%s' uses it as its child",
                   node_name, block_node_get_name(parent));
        return false;
    }
    g_ptr_array_remove(blockdev_nodes, bs);      /* keeps the order */
    block_node_unref(bs);
    return true;
}

void blockdev_del_all(void)
{
    assert_main_thread();
    while (blockdev_nodes && blockdev_nodes->len) {
        block_node_unref(g_ptr_array_steal_index(blockdev_nodes,
                                                 blockdev_nodes->len - 1));
    }
    g_clear_pointer(&blockdev_nodes, g_ptr_array_unref);
}

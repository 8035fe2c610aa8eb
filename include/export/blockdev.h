/*
 * The nodes a user created (--blockdev, QMP blockdev-add): the daemon
 * holds one reference to each until blockdev-del or shutdown.  Nodes
 * opened inline as children of these are not in the list (they live as
 * long as their parent).  Main thread.
 */
#ifndef SPINDLE_EXPORT_BLOCKDEV_H
#define SPINDLE_EXPORT_BLOCKDEV_H

#include <stdbool.h>
#include "block/block.h"
#include "util/aio.h"
#include "util/error.h"
#include "util/opts.h"

/*
 * Open a node from opts (as block_node_open(), in ctx: the main loop's)
 * and keep it.  Returns the node (borrowed) or NULL with errp set.
 */
BlockNode *blockdev_add(Opts *opts, AioContext *ctx, Error **errp);

/* The same from the text of --blockdev (key=value or JSON). */
BlockNode *blockdev_add_str(const char *str, AioContext *ctx, Error **errp);

/*
 * Drop the user's node node_name.  Errors (nothing changes):
 *   - no such node: "Failed to find node with node-name='X'";
 *   - the node was not created by the user (an inline child):
 *     "Node 'X' is not a top-level node (it was opened as a child)";
 *   - an export serves it: "Node 'X' is busy: export 'E' uses it";
 *   - another node uses it as its child: "Node 'X' is busy: node 'P'
 *     uses it as its child".
 */
bool blockdev_del(const char *node_name, Error **errp);

/* Whether the user created node bs (it is in the list). */
bool blockdev_is_user_node(BlockNode *bs);

/* Drop every user node, newest first (at shutdown, after the exports). */
void blockdev_del_all(void);

#endif

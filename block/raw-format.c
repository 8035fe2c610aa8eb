/*
 * raw: the raw format driver, a window onto a child node.
 *
 * Theory of operation.  A raw node shows the bytes [offset, offset + size)
 * of its child (option `file`: an inline node or the node-name of an
 * existing one) as a device of its own, starting at 0.  Without `offset`
 * and `size` it is the whole child.
 *
 * Everything is decided at open: the window must lie inside the child, and
 * its start must be a multiple of the child's request alignment so that
 * an aligned request on the raw node is still aligned on the child.  The
 * node copies the child's limits, so the generic layer (which checks
 * bounds, read-only and alignment against this node, and bounces
 * unaligned buffers) hands submit requests that only need moving by
 * `offset`; submit then passes them to the child's driver, whose
 * completion goes straight to the caller.  There is no per-request state
 * and no queue here.  The translation is done in place: once submit has
 * run, req->offset is an offset in the child, so code above raw must not
 * read it back to find where the request was on the raw node.
 *
 * With `size`, the window's length is fixed at open.  Without it the
 * window runs to the end of the child (getlength reads the child's
 * length), so it grows with the child.  block_node_resize() of a raw
 * node with neither option grows the child (truncate forwards); with
 * either, the window is fixed and the resize is refused.
 */
#include <errno.h>
#include <inttypes.h>
#include "block/block-int.h"

typedef struct RawState {
    int64_t offset;
    int64_t size;                /* with has_size */
    bool has_offset;             /* options given: a fixed window */
    bool has_size;
} RawState;

static bool raw_open(BlockNode *bs, Opts *opts, Error **errp)
{
    RawState *s = bs->opaque;
    BlockNode *child;
    int64_t child_len;
    uint64_t offset, size;
    uint32_t align;

    if (!opts_get_size(opts, "offset", 0, &offset, errp)) {
        return false;
    }
    child = block_node_open_child(bs, opts, "file", errp);
    if (!child) {
        return false;
    }

    child_len = block_node_get_length(child);
    if (child_len < 0) {
        error_setg_errno(errp, (int)-child_len,
                         "Cannot get the length of 'file'");
        return false;
    }
    if (offset > (uint64_t)child_len) {
        error_setg(errp, "Parameter 'offset' (%" PRIu64 ") is beyond the "
                   "end of 'file' (%" PRId64 " bytes)", offset, child_len);
        return false;
    }
    if (!opts_get_size(opts, "size", child_len - offset, &size, errp)) {
        return false;
    }
    if (size > (uint64_t)child_len - offset) {
        error_setg(errp, "Parameters 'offset' (%" PRIu64 ") + 'size' (%"
                   PRIu64 ") are beyond the end of 'file' (%" PRId64
                   " bytes)", offset, size, child_len);
        return false;
    }
    align = child->limits.request_alignment;   /* >= 1: checked at open */
    if (offset % align) {
        error_setg(errp, "Parameter 'offset' (%" PRIu64 ") must be a "
                   "multiple of %" PRIu32 " (the request alignment of 'file')",
                   offset, align);
        return false;
    }

    s->offset = offset;
    s->size = size;
    s->has_offset = opts_has(opts, "offset");
    s->has_size = opts_has(opts, "size");
    bs->limits = child->limits;
    return true;
}

static void raw_close(BlockNode *bs)
{
    /* The child's reference (bs->child) is dropped by the generic layer. */
}

/* Without size=, the window runs to the child's end and grows with it. */
static int64_t raw_getlength(BlockNode *bs)
{
    RawState *s = bs->opaque;
    int64_t child_len;

    if (s->has_size) {
        return s->size;
    }
    child_len = block_node_get_length(bs->child);
    return child_len < s->offset ? 0 : child_len - s->offset;
}

/* The whole child: grow the child.  A window (offset=, size=): refuse. */
static bool raw_truncate(BlockNode *bs, int64_t size, Error **errp)
{
    RawState *s = bs->opaque;

    if (s->has_offset || s->has_size) {
        error_setg(errp, "Node '%s' was opened with option '%s': it shows a "
                   "fixed part of its child and cannot be resized",
                   block_node_get_name(bs), s->has_size ? "size" : "offset");
        return false;
    }
    return block_driver_truncate(bs->child, size, errp);
}

static void raw_submit(BlockNode *bs, BlockRequest *req)
{
    RawState *s = bs->opaque;

    /* The generic layer checked the range against s->size, so it stays
     * inside the child.  A flush has no range. */
    if (req->op != BLOCK_OP_FLUSH) {
        req->offset += s->offset;
    }
    block_driver_submit(bs->child, req);
}

const BlockDriver block_driver_raw = {
    .instance_size = sizeof(RawState),
    .open = raw_open,
    .close = raw_close,
    .getlength = raw_getlength,
    .truncate = raw_truncate,
    .submit = raw_submit,
};

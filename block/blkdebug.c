/*
 * blkdebug: a filter that makes chosen requests fail, for tests.
 *
 * Theory of operation.  A blkdebug node sits on a child node (option
 * `image`: an inline node or the node-name of an existing one) and shows
 * it unchanged: same length, same limits.  At open it reads a list of
 * error injection rules (option `inject-error`), each saying which requests
 * fail and with which errno:
 *
 *     errno    the error, 1..4095 (default 5, EIO); the request completes
 *              with -errno
 *     op       read, write, flush, discard, write-zeroes or any (default)
 *     sector   first 512-byte sector of the range (default: any offset)
 *     sectors  length of the range in sectors (default 1; needs sector)
 *     once     on: only the first matching request fails (default off)
 *
 * in either spelling:
 *     inject-error.0.op=write,inject-error.0.sector=8,inject-error.0.once=on
 *     "inject-error": [{"op": "write", "sector": 8, "once": true}]
 *
 * A request matches a rule with a range if its bytes overlap the range; a
 * flush has no range, so it matches only rules without one.  submit looks
 * for the first rule (in list order) that matches and has not fired yet if
 * it is a once rule; if there is one, the request completes with its errno
 * through block_request_complete_later() (from a BH: never inside submit)
 * and never reaches the child; otherwise it goes to the child unchanged and
 * the child's completion goes straight to the caller.
 *
 * Option `align=N` makes the node report a request and memory alignment of
 * N bytes (a power of two, at least the child's), so that tests can drive
 * the generic layer's bounce buffers and read-modify-write over any child.
 *
 * The rules are an array owned by the node, fixed after open except for
 * the `fired` flags of once rules, which requests from queues in several
 * threads may set: an atomic exchange decides which request fires.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include "block/block-int.h"
#include "util/trace.h"

#define BLKDEBUG_SECTOR_SIZE 512
#define BLKDEBUG_MAX_SECTOR (INT64_MAX / BLKDEBUG_SECTOR_SIZE)
#define BLKDEBUG_MAX_ERRNO 4095

/* The values of `op`, in the order of blkdebug_op_ops[]. */
static const char *const blkdebug_op_names[] = {
    "read", "write", "flush", "discard", "write-zeroes", "any", NULL,
};
static const int blkdebug_op_ops[] = {
    BLOCK_OP_READ, BLOCK_OP_WRITE, BLOCK_OP_FLUSH, BLOCK_OP_DISCARD,
    BLOCK_OP_WRITE_ZEROES, -1,
};
#define BLKDEBUG_OP_ANY_INDEX 5

typedef struct BlkdebugRule {
    int error;                   /* positive errno */
    int op;                      /* a BlockOp, or -1 for any */
    int64_t start;               /* byte range [start, end); -1: any */
    int64_t end;
    bool once;
    _Atomic bool fired;          /* a once rule that has failed a request */
} BlkdebugRule;

typedef struct BlkdebugState {
    BlkdebugRule *rules;
    unsigned nrules;
} BlkdebugState;

/*
 * Read rule number index from its options.  The getters' messages already
 * name the full key ("inject-error.1.errno"): list elements carry their
 * path.
 */
static bool blkdebug_parse_rule(Opts *ropts, unsigned index,
                                BlkdebugRule *rule, Error **errp)
{
    int64_t error, sector = -1, sectors = 1;
    bool has_sectors = opts_has(ropts, "sectors");
    int op;

    if (!opts_get_int(ropts, "errno", 1, BLKDEBUG_MAX_ERRNO, EIO, &error,
                      errp) ||
        !opts_get_enum(ropts, "op", blkdebug_op_names, BLKDEBUG_OP_ANY_INDEX,
                       &op, errp) ||
        (opts_has(ropts, "sector") &&
         !opts_get_int(ropts, "sector", 0, BLKDEBUG_MAX_SECTOR, 0, &sector,
                       errp)) ||
        !opts_get_int(ropts, "sectors", 1, BLKDEBUG_MAX_SECTOR, 1, &sectors,
                      errp) ||
        !opts_get_bool(ropts, "once", false, &rule->once, errp) ||
        !opts_check_unused(ropts, NULL, errp)) {
        return false;
    }
    if (has_sectors && sector < 0) {
        error_setg(errp, "Parameter 'inject-error.%u.sectors' needs "
                   "'inject-error.%u.sector' (the first sector of the range)",
                   index, index);
        return false;
    }

    rule->error = error;
    rule->op = blkdebug_op_ops[op];
    if (sector < 0) {
        rule->start = rule->end = -1;
    } else {
        /* Both are at most INT64_MAX / 512: only the sum needs clamping. */
        rule->start = sector * BLKDEBUG_SECTOR_SIZE;
        rule->end = MIN(sector + sectors, BLKDEBUG_MAX_SECTOR) *
                    BLKDEBUG_SECTOR_SIZE;
    }
    return true;
}

static bool blkdebug_parse_rules(BlkdebugState *s, Opts *opts, Error **errp)
{
    g_autoptr(GPtrArray) list = opts_get_list(opts, "inject-error", errp);

    if (!list) {
        return false;
    }
    s->nrules = list->len;
    s->rules = g_new0(BlkdebugRule, s->nrules);
    for (unsigned i = 0; i < list->len; i++) {
        if (!blkdebug_parse_rule(g_ptr_array_index(list, i), i,
                                 &s->rules[i], errp)) {
            return false;
        }
    }
    return true;
}

static void blkdebug_free_rules(BlkdebugState *s)
{
    g_free(s->rules);
    s->rules = NULL;
    s->nrules = 0;
}

/*
 * align=N: report a request (and memory) alignment of N bytes, so tests can
 * drive the generic layer's bounce and read-modify-write paths over any
 * child.  N is a power of two, at least the child's own alignment.
 */
static bool blkdebug_parse_align(BlockNode *bs, Opts *opts, Error **errp)
{
    uint64_t align;

    if (!opts_get_size(opts, "align", bs->limits.request_alignment, &align,
                       errp)) {
        return false;
    }
    if (align == 0 || (align & (align - 1)) || align > 1024 * 1024 ||
        align < bs->limits.request_alignment) {
        error_setg(errp, "Parameter 'align' expects a power of two from %u "
                   "(the alignment of 'image') to 1M, got %" PRIu64,
                   bs->limits.request_alignment, align);
        return false;
    }
    bs->limits.request_alignment = align;
    bs->limits.mem_alignment = MAX(bs->limits.mem_alignment, (uint32_t)align);
    return true;
}

static bool blkdebug_open(BlockNode *bs, Opts *opts, Error **errp)
{
    BlkdebugState *s = bs->opaque;
    BlockNode *child;

    if (!blkdebug_parse_rules(s, opts, errp)) {
        goto fail;
    }
    child = block_node_open_child(bs, opts, "image", errp);
    if (!child) {
        goto fail;
    }
    bs->limits = child->limits;
    if (!blkdebug_parse_align(bs, opts, errp)) {
        goto fail;
    }
    return true;

fail:
    /* The child, if any, is the generic layer's to drop (bs->child). */
    blkdebug_free_rules(s);
    return false;
}

static void blkdebug_close(BlockNode *bs)
{
    blkdebug_free_rules(bs->opaque);
}

static int64_t blkdebug_getlength(BlockNode *bs)
{
    return block_node_get_length(bs->child);
}

/* Resizing goes to the child; the length follows (getlength). */
static bool blkdebug_truncate(BlockNode *bs, int64_t size, Error **errp)
{
    return block_driver_truncate(bs->child, size, errp);
}

static bool blkdebug_rule_matches(const BlkdebugRule *rule,
                                  const BlockRequest *req)
{
    if (rule->once && atomic_load_explicit(&rule->fired,
                                           memory_order_relaxed)) {
        return false;
    }
    if (rule->op >= 0 && rule->op != (int)req->op) {
        return false;
    }
    if (rule->start < 0) {
        return true;
    }
    if (req->op == BLOCK_OP_FLUSH) {
        return false;
    }
    /* Overlap of [offset, offset + bytes) with [start, end). */
    return req->offset < rule->end && rule->start - req->offset < req->bytes;
}

static void blkdebug_submit(BlockNode *bs, BlockRequest *req)
{
    BlkdebugState *s = bs->opaque;

    for (unsigned i = 0; i < s->nrules; i++) {
        BlkdebugRule *rule = &s->rules[i];

        if (blkdebug_rule_matches(rule, req)) {
            /* Queues in several threads may race for a once rule: the
             * exchange lets exactly one of them fire it. */
            if (atomic_exchange(&rule->fired, true) && rule->once) {
                continue;
            }
            SPINDLE_TRACE3(blkdebug_inject_error, bs, req, rule->error);
            block_request_complete_later(req, -rule->error);
            return;
        }
    }
    block_driver_submit(bs->child, req);
}

const BlockDriver block_driver_blkdebug = {
    .instance_size = sizeof(BlkdebugState),
    .open = blkdebug_open,
    .close = blkdebug_close,
    .getlength = blkdebug_getlength,
    .truncate = blkdebug_truncate,
    .submit = blkdebug_submit,
};

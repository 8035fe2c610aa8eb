/*
 * blkdebug: a filter that makes chosen requests fail or wait, for tests.
 *
 * Theory of operation.  A blkdebug node sits on a child node (option
 * `image`: an inline node or the node-name of an existing one) and shows
 * it unchanged: same length, same limits.  At open it reads two lists of
 * rules: `inject-error` (requests that fail) and `inject-delay` (requests
 * that wait before they go on).  Both kinds of rule say which requests
 * they match with the same keys:
 *
 *     op       read, write, flush, discard, write-zeroes or any (default)
 *     sector   first 512-byte sector of the range (default: any offset)
 *     sectors  length of the range in sectors (default 1; needs sector)
 *     once     on: only the first matching request (default off)
 *
 * plus what they do:
 *
 *     errno     inject-error: the error, 1..4095 (default 5, EIO); the
 *               request completes with -errno
 *     delay-ns  inject-delay: required; the request waits this many
 *               nanoseconds, then goes to the child unchanged
 *
 * in either spelling:
 *     inject-error.0.op=write,inject-error.0.sector=8,inject-error.0.once=on
 *     "inject-delay": [{"op": "write", "sector": 8, "delay-ns": 1000000}]
 *
 * A request matches a rule with a range if its bytes overlap the range; a
 * flush has no range, so it matches only rules without one.  submit first
 * looks for the first error rule (in list order) that matches and has not
 * fired yet if it is a once rule; if there is one, the request completes
 * with its errno through block_request_complete_later() (from a BH: never
 * inside submit) and never reaches the child.  Otherwise the first
 * matching delay rule, if any, delays it; otherwise it goes to the child
 * at once.  The child's completion goes straight to the caller.
 *
 * Delayed requests wait in their queue's BlkdebugQueue (q->opaque, made by
 * attach_queue in the queue's home thread): a list sorted by deadline
 * (kept in block_req_int(req)->submit_ns until the request moves on;
 * equal deadlines keep submission order) and one AioTimer armed for the
 * head.  Nothing sleeps: the timer fires in the thread that submitted the
 * request and hands every due request to the child.  Requests with
 * different delays therefore complete out of order, which is what the
 * tests of crash recovery need.  A waiting request counts as in flight, so
 * a drain waits for it.
 *
 * Option `align=N` makes the node report a request and memory alignment of
 * N bytes (a power of two, at least the child's), so that tests can drive
 * the generic layer's bounce buffers and read-modify-write over any child.
 *
 * The rules are arrays owned by the node, fixed after open except for
 * the `fired` flags of once rules, which requests from queues in several
 * threads may set: an atomic exchange decides which request fires.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include "block/block-int.h"
#include "util/clock.h"
#include "util/cutils.h"
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
    int64_t value;               /* positive errno, or delay in ns */
    int op;                      /* a BlockOp, or -1 for any */
    int64_t start;               /* byte range [start, end); -1: any */
    int64_t end;
    bool once;
    _Atomic bool fired;          /* a once rule that has acted on a request */
} BlkdebugRule;

/* What a list of rules is called and what its rules do. */
typedef struct BlkdebugRuleKind {
    const char *list;            /* the option: "inject-error" */
    const char *value;           /* the key of the action: "errno" */
    int64_t min, max, def;       /* its range; def < 0: required */
} BlkdebugRuleKind;

enum { BLKDEBUG_ERROR, BLKDEBUG_DELAY, BLKDEBUG_NKINDS };

static const BlkdebugRuleKind blkdebug_rule_kinds[BLKDEBUG_NKINDS] = {
    [BLKDEBUG_ERROR] = { "inject-error", "errno", 1, BLKDEBUG_MAX_ERRNO, EIO },
    [BLKDEBUG_DELAY] = { "inject-delay", "delay-ns", 1, INT64_MAX, -1 },
};

typedef struct BlkdebugRules {
    BlkdebugRule *rules;
    unsigned n;
} BlkdebugRules;

typedef struct BlkdebugState {
    BlkdebugRules kinds[BLKDEBUG_NKINDS];
} BlkdebugState;

/* Per BlockQueue (per context): its home thread only. */
typedef struct BlkdebugQueue {
    BlockNode *bs;
    BlockReqFifo delayed;        /* sorted by deadline (submit_ns) */
    AioTimer timer;              /* armed for the head of delayed */
} BlkdebugQueue;

/*
 * Read rule number index of kind k from its options.  The getters'
 * messages already name the full key ("inject-error.1.errno"): list
 * elements carry their path.
 */
static bool blkdebug_parse_rule(Opts *ropts, const BlkdebugRuleKind *k,
                                unsigned index, BlkdebugRule *rule,
                                Error **errp)
{
    int64_t value, sector = -1, sectors = 1;
    bool has_sectors = opts_has(ropts, "sectors");
    int op;

    if (k->def < 0 && !opts_has(ropts, k->value)) {
        error_setg(errp, "Parameter '%s.%u.%s' is missing", k->list, index,
                   k->value);
        return false;
    }
    if (!opts_get_int(ropts, k->value, k->min, k->max, k->def, &value,
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
        error_setg(errp, "Parameter '%s.%u.sectors' needs '%s.%u.sector' "
                   "(the first sector of the range)", k->list, index,
                   k->list, index);
        return false;
    }

    rule->value = value;
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

static bool blkdebug_parse_rules(BlkdebugRules *r, const BlkdebugRuleKind *k,
                                 Opts *opts, Error **errp)
{
    g_autoptr(GPtrArray) list = opts_get_list(opts, k->list, errp);

    if (!list) {
        return false;
    }
    r->n = list->len;
    r->rules = g_new0(BlkdebugRule, r->n);
    for (unsigned i = 0; i < list->len; i++) {
        if (!blkdebug_parse_rule(g_ptr_array_index(list, i), k, i,
                                 &r->rules[i], errp)) {
            return false;
        }
    }
    return true;
}

static void blkdebug_free_rules(BlkdebugState *s)
{
    for (unsigned k = 0; k < BLKDEBUG_NKINDS; k++) {
        g_free(s->kinds[k].rules);
        s->kinds[k] = (BlkdebugRules) { 0 };
    }
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

    for (unsigned k = 0; k < BLKDEBUG_NKINDS; k++) {
        if (!blkdebug_parse_rules(&s->kinds[k], &blkdebug_rule_kinds[k],
                                  opts, errp)) {
            goto fail;
        }
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

/*
 * The first rule of r that matches req and may fire, or NULL.  Queues in
 * several threads may race for a once rule: the exchange lets exactly one
 * of them fire it.
 */
static BlkdebugRule *blkdebug_find_rule(BlkdebugRules *r,
                                        const BlockRequest *req)
{
    for (unsigned i = 0; i < r->n; i++) {
        BlkdebugRule *rule = &r->rules[i];

        if (blkdebug_rule_matches(rule, req) &&
            !(atomic_exchange(&rule->fired, true) && rule->once)) {
            return rule;
        }
    }
    return NULL;
}

/* Arm the timer for the first delayed request, or disarm it. */
static void blkdebug_timer_update(BlkdebugQueue *dq)
{
    if (dq->delayed.head) {
        aio_timer_mod(&dq->timer, block_req_int(dq->delayed.head)->submit_ns);
    } else {
        aio_timer_del(&dq->timer);
    }
}

/* Hand every delayed request that is due to the child. */
static void blkdebug_timer_cb(void *opaque)
{
    BlkdebugQueue *dq = opaque;
    int64_t now = clock_now_ns();

    /* submit never completes inside itself, so the list cannot change
     * under us while we forward. */
    while (dq->delayed.head &&
           block_req_int(dq->delayed.head)->submit_ns <= now) {
        block_driver_submit(dq->bs->child, block_req_fifo_pop(&dq->delayed));
    }
    blkdebug_timer_update(dq);
}

/* Queue req until delay_ns from now, after those due no later. */
static void blkdebug_delay(BlkdebugQueue *dq, BlockRequest *req,
                           int64_t delay_ns)
{
    int64_t due = add_sat_int64(clock_now_ns(), delay_ns);
    BlockReqFifo *q = &dq->delayed;
    BlockRequest **link = &q->head, *prev = NULL;

    block_req_int(req)->submit_ns = due;
    while (*link && block_req_int(*link)->submit_ns <= due) {
        prev = *link;
        link = &block_req_int(prev)->next;
    }
    block_req_int(req)->next = *link;
    *link = req;
    if (q->tail == prev) {
        q->tail = req;
    }
    q->len++;
    blkdebug_timer_update(dq);
}

static void blkdebug_submit(BlockNode *bs, BlockRequest *req)
{
    BlkdebugState *s = bs->opaque;
    BlkdebugRule *rule;

    rule = blkdebug_find_rule(&s->kinds[BLKDEBUG_ERROR], req);
    if (rule) {
        SPINDLE_TRACE3(blkdebug_inject_error, bs, req, rule->value);
        block_request_complete_later(req, -rule->value);
        return;
    }
    rule = blkdebug_find_rule(&s->kinds[BLKDEBUG_DELAY], req);
    if (rule) {
        blkdebug_delay(block_req_queue(bs, req)->opaque, req, rule->value);
        return;
    }
    block_driver_submit(bs->child, req);
}

/* Set up the queue's delay list and timer.  q->ctx's home thread. */
static void blkdebug_attach_queue(BlockQueue *q)
{
    BlkdebugQueue *dq = g_new0(BlkdebugQueue, 1);

    dq->bs = q->bs;
    aio_timer_init(q->ctx, &dq->timer, blkdebug_timer_cb, dq);
    q->opaque = dq;
}

/* q->ctx's home thread, q drained: nothing is waiting. */
static void blkdebug_detach_queue(BlockQueue *q)
{
    BlkdebugQueue *dq = q->opaque;

    g_assert(!dq->delayed.head);
    g_assert(!aio_timer_pending(&dq->timer));
    g_free(dq);
    q->opaque = NULL;
}

const BlockDriver block_driver_blkdebug = {
    .instance_size = sizeof(BlkdebugState),
    .open = blkdebug_open,
    .close = blkdebug_close,
    .getlength = blkdebug_getlength,
    .truncate = blkdebug_truncate,
    .submit = blkdebug_submit,
    .attach_queue = blkdebug_attach_queue,
    .detach_queue = blkdebug_detach_queue,
};

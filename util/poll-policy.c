/*
 * The poll policies that serve as baselines, and the policy registry.
 *
 * fixed: every turn spins exactly poll-max-ns (0: never).  No adaptation:
 * the measuring stick of scripts/poll-frontier, and a real choice for a
 * user who wants cloud-hypervisor style fixed polling.
 *
 * qemu-classic: the rule of KVM's halt polling and of QEMU's IOThreads
 * (since QEMU 10.0 per handler), unchanged.  After a turn that waited,
 * each handler is judged by the time from the start of the turn until its
 * event was seen (or, without an event, how long the turn waited):
 *  - the event came within the window: the window was right, keep it;
 *  - the wait was longer than poll-max-ns: shrink (divide by poll-shrink,
 *    or drop to 0 when poll-shrink is 0);
 *  - otherwise a larger window would have caught it: grow (multiply by
 *    poll-grow, default 2, starting from 4 µs), never above poll-max-ns.
 * A turn spins for the largest handler window.
 *
 * qemu-weighted: QEMU 11.1's rule.  Each handler keeps an estimate of its
 * block time, a weighted average in which a new sample counts 2^-w
 * (w = poll-weight, 0 meaning 3): est = est - est/2^w + block/2^w, or the
 * sample itself when the estimate is 0.  An estimate that reaches
 * poll-max-ns falls to 0 (polling cannot help that handler).  A handler
 * without an event in a turn adds the turn's wait to its estimate, so one
 * that goes quiet soon falls to 0 too.  The context has one window: after
 * a turn in which handlers had events, it grows toward the largest of
 * their estimates (to that estimate, or by poll-grow if that is more) or,
 * when that estimate is below window/poll-shrink, shrinks by poll-shrink
 * (default 2).  A turn spins for the context's window.  (Written from the
 * description of the QEMU series; the merged code was not available to us.
 * We adjust the context window only on turns in which a handler had an
 * event, so a timer's turn does not shrink it.)
 */
#include <string.h>
#include <glib.h>
#include "util/poll-policy.h"
#include "util/cutils.h"

/* ------------------------------------------------------------------------ */
/* fixed                                                                     */

static int64_t fixed_plan(AioPollState *st, AioPollSource *const *srcs,
                          unsigned n, const AioPollTurn *turn)
{
    return st->params.max_ns;
}

static AioPollAdjustment fixed_learn(AioPollState *st, AioPollSource *src,
                                     const AioPollTurn *turn)
{
    src->window_ns = st->params.max_ns;
    return AIO_POLL_KEPT;
}

const AioPollPolicyOps aio_poll_policy_fixed = {
    .name = "fixed",
    .plan = fixed_plan,
    .learn = fixed_learn,
};

/* ------------------------------------------------------------------------ */
/* qemu-classic                                                              */

/* The turn's wait as QEMU measures it: from the start of the turn until the
 * handler's event was found by polling, else until dispatch. */
static int64_t qemu_block_ns(const AioPollSource *src, const AioPollTurn *turn)
{
    if (src->ev && src->ev_exact) {
        return src->ev_ns - turn->start_ns;
    }
    return turn->waited_ns;
}

static AioPollAdjustment classic_shrink(int64_t shrink, int64_t *ns)
{
    int64_t v = shrink ? *ns / shrink : 0;

    if (v == *ns) {
        return AIO_POLL_KEPT;     /* already 0, or a shrink factor of 1 */
    }
    *ns = v;
    return AIO_POLL_SHRANK;
}

static AioPollAdjustment classic_grow(const AioPollParams *p, int64_t *ns)
{
    int64_t grow = p->grow ? p->grow : 2;
    int64_t v = *ns ? mul_sat_int64(*ns, grow) : AIO_POLL_START_NS;

    v = MIN(v, p->max_ns);
    if (v <= *ns) {
        return AIO_POLL_KEPT;     /* a grow factor of 1 */
    }
    *ns = v;
    return AIO_POLL_GREW;
}

static AioPollAdjustment classic_learn(AioPollState *st, AioPollSource *src,
                                       const AioPollTurn *turn)
{
    const AioPollParams *p = &st->params;
    int64_t wait_ns = qemu_block_ns(src, turn);

    if (p->max_ns == 0) {
        return classic_shrink(0, &src->window_ns);
    }
    if (src->window_ns > p->max_ns) {
        src->window_ns = p->max_ns;     /* poll-max-ns was lowered */
    }
    if (wait_ns > p->max_ns) {
        return classic_shrink(p->shrink, &src->window_ns);
    }
    if (!src->ev || wait_ns <= src->window_ns) {
        return AIO_POLL_KEPT;
    }
    return classic_grow(p, &src->window_ns);
}

static int64_t largest_window(AioPollSource *const *srcs, unsigned n)
{
    int64_t largest = 0;

    for (unsigned i = 0; i < n; i++) {
        largest = MAX(largest, srcs[i]->window_ns);
    }
    return largest;
}

static int64_t classic_plan(AioPollState *st, AioPollSource *const *srcs,
                            unsigned n, const AioPollTurn *turn)
{
    return MIN(largest_window(srcs, n), st->params.max_ns);
}

const AioPollPolicyOps aio_poll_policy_qemu_classic = {
    .name = "qemu-classic",
    .plan = classic_plan,
    .learn = classic_learn,
};

/* ------------------------------------------------------------------------ */
/* qemu-weighted                                                             */

static AioPollAdjustment weighted_learn(AioPollState *st, AioPollSource *src,
                                        const AioPollTurn *turn)
{
    const AioPollParams *p = &st->params;
    int64_t w = p->weight ? p->weight : AIO_POLL_WEIGHT_DEFAULT;
    int64_t block = qemu_block_ns(src, turn);
    int64_t est = src->est_ns;

    if (src->ev) {
        est = est ? est - (est >> w) + (block >> w) : block;
    } else if (est) {
        est = add_sat_int64(est, block);
    }
    if (est >= p->max_ns) {
        est = 0;
    }
    src->est_ns = est;
    src->window_ns = est;
    return AIO_POLL_KEPT;
}

static AioPollAdjustment weighted_end_turn(AioPollState *st,
                                           AioPollSource *const *srcs,
                                           unsigned n, const AioPollTurn *turn)
{
    const AioPollParams *p = &st->params;
    int64_t grow = p->grow ? p->grow : 2;
    int64_t shrink = p->shrink ? p->shrink : 2;
    int64_t adj = 0, ns = MIN(st->window_ns, p->max_ns);
    bool any = false;

    for (unsigned i = 0; i < n; i++) {
        if (srcs[i]->ev) {
            any = true;
            adj = MAX(adj, srcs[i]->est_ns);
        }
    }
    if (!any) {
        st->window_ns = ns;
        return AIO_POLL_KEPT;
    }
    if (adj > ns) {
        int64_t grown = mul_sat_int64(ns, grow);

        st->window_ns = MIN(adj > grown ? adj : grown, p->max_ns);
        return st->window_ns > ns ? AIO_POLL_GREW : AIO_POLL_KEPT;
    }
    if (adj < ns / shrink) {
        st->window_ns = ns / shrink;
        return AIO_POLL_SHRANK;
    }
    st->window_ns = ns;
    return AIO_POLL_KEPT;
}

static int64_t weighted_plan(AioPollState *st, AioPollSource *const *srcs,
                             unsigned n, const AioPollTurn *turn)
{
    return MIN(st->window_ns, st->params.max_ns);
}

const AioPollPolicyOps aio_poll_policy_qemu_weighted = {
    .name = "qemu-weighted",
    .plan = weighted_plan,
    .learn = weighted_learn,
    .end_turn = weighted_end_turn,
};

/* ------------------------------------------------------------------------ */
/* Registry                                                                  */

static const AioPollPolicyOps *const aio_poll_policies[] = {
    &aio_poll_policy_fixed,
    &aio_poll_policy_qemu_classic,
    &aio_poll_policy_qemu_weighted,
    &aio_poll_policy_predictive,
};

const AioPollPolicyOps *aio_poll_policy_find(const char *name)
{
    if (!strcmp(name, "adaptive")) {
        return &aio_poll_policy_qemu_classic;     /* its name until 2026-11 */
    }
    for (size_t i = 0; i < G_N_ELEMENTS(aio_poll_policies); i++) {
        if (!strcmp(aio_poll_policies[i]->name, name)) {
            return aio_poll_policies[i];
        }
    }
    return NULL;
}

const char *aio_poll_policy_names(void)
{
    return "fixed, qemu-classic, qemu-weighted, predictive";
}

void aio_poll_source_reset(AioPollSource *src)
{
    g_free(src->priv);
    memset(src, 0, sizeof(*src));
}

/*
 * Poll policies: how a handler's busy-poll window follows the waits the
 * loop observes, and how long a turn spins.
 *
 * "adaptive" is the halt-polling rule KVM and QEMU use, applied per handler:
 *  - the event came within the window: the window was right, keep it;
 *  - the wait was longer than poll-max-ns: polling could not have caught it
 *    at any allowed window, so shrink (divide by poll-shrink, or drop to 0);
 *  - otherwise a larger window would have caught it: grow (multiply by
 *    poll-grow, default 2, starting from 4 µs), never above poll-max-ns.
 * A turn in which the handler saw no event but the loop waited longer than
 * poll-max-ns counts as such a long wait: that is how an idle handler's
 * window falls to zero and stops costing CPU.
 */
#include <string.h>
#include "util/aio.h"
#include "util/cutils.h"

static AioPollAdjustment adaptive_shrink(const AioPollParams *p,
                                         AioPollWindow *win)
{
    int64_t ns = p->shrink ? win->ns / p->shrink : 0;

    if (ns == win->ns) {
        return AIO_POLL_KEPT;     /* already 0, or a shrink factor of 1 */
    }
    win->ns = ns;
    return AIO_POLL_SHRANK;
}

static AioPollAdjustment adaptive_grow(const AioPollParams *p,
                                       AioPollWindow *win)
{
    int64_t grow = p->grow ? p->grow : 2;
    int64_t ns = win->ns ? mul_sat_int64(win->ns, grow) : AIO_POLL_START_NS;

    ns = MIN(ns, p->max_ns);
    if (ns <= win->ns) {
        return AIO_POLL_KEPT;     /* a grow factor of 1 */
    }
    win->ns = ns;
    return AIO_POLL_GREW;
}

static AioPollAdjustment adaptive_adjust(const AioPollParams *p,
                                         AioPollWindow *win, int64_t wait_ns,
                                         bool had_event)
{
    if (p->max_ns == 0) {
        return adaptive_shrink(&(AioPollParams){ .shrink = 0 }, win);
    }
    if (win->ns > p->max_ns) {
        win->ns = p->max_ns;      /* poll-max-ns was lowered */
    }
    if (wait_ns > p->max_ns) {
        return adaptive_shrink(p, win);
    }
    if (!had_event || wait_ns <= win->ns) {
        return AIO_POLL_KEPT;
    }
    return adaptive_grow(p, win);
}

static int64_t adaptive_spin_ns(const AioPollParams *p, int64_t largest)
{
    return MIN(largest, p->max_ns);
}

const AioPollPolicyOps aio_poll_policy_adaptive = {
    .name = "adaptive",
    .adjust = adaptive_adjust,
    .spin_ns = adaptive_spin_ns,
};

static const AioPollPolicyOps *const aio_poll_policies[] = {
    &aio_poll_policy_adaptive,
};

const AioPollPolicyOps *aio_poll_policy_find(const char *name)
{
    for (size_t i = 0; i < G_N_ELEMENTS(aio_poll_policies); i++) {
        if (!strcmp(aio_poll_policies[i]->name, name)) {
            return aio_poll_policies[i];
        }
    }
    return NULL;
}

/*
 * fd monitor on epoll.  Each handler's fd is registered once with the events
 * it wants; wait() marks the handlers that became ready.  The wait takes a
 * nanosecond timeout (epoll_pwait2), so a timer a few microseconds away is
 * not rounded up to a millisecond.  Kernels without epoll_pwait2 (< 5.11)
 * fall back to epoll_wait with the timeout rounded up to whole milliseconds.
 */
#include <errno.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <time.h>
#include "aio-internal.h"

#define FDMON_EPOLL_MAX_EVENTS 128

static int fdmon_epoll_update(AioContext *ctx, AioHandler *h, uint32_t events)
{
    struct epoll_event ev = { .events = events, .data.ptr = h };
    int op;

    if (events == h->epoll_events) {
        return 0;
    }
    if (events == 0) {
        op = EPOLL_CTL_DEL;
    } else if (h->epoll_events == 0) {
        op = EPOLL_CTL_ADD;
    } else {
        op = EPOLL_CTL_MOD;
    }
    if (epoll_ctl(ctx->epollfd, op, h->fd, &ev) < 0) {
        return -errno;
    }
    h->epoll_events = events;
    return 0;
}

/* Set once the kernel refused epoll_pwait2 (before Linux 5.11). */
static _Atomic bool no_pwait2;

static int fdmon_epoll_pwait(int epfd, struct epoll_event *evs, int max,
                             int64_t timeout_ns)
{
    struct timespec ts;
    int r;

    if (timeout_ns < 0 || atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
        int ms = timeout_ns < 0 ? -1 :
                 (int)MIN((timeout_ns + 999999) / 1000000, (int64_t)G_MAXINT);
        return epoll_wait(epfd, evs, max, ms);
    }
    ts.tv_sec = timeout_ns / 1000000000LL;
    ts.tv_nsec = timeout_ns % 1000000000LL;
    r = epoll_pwait2(epfd, evs, max, &ts, NULL);
    if (r < 0 && errno == ENOSYS) {
        atomic_store_explicit(&no_pwait2, true, memory_order_relaxed);
        return fdmon_epoll_pwait(epfd, evs, max, timeout_ns);
    }
    return r;
}

static int fdmon_epoll_wait(AioContext *ctx, int64_t timeout_ns)
{
    struct epoll_event evs[FDMON_EPOLL_MAX_EVENTS];
    int n;

    do {
        n = fdmon_epoll_pwait(ctx->epollfd, evs, FDMON_EPOLL_MAX_EVENTS,
                              timeout_ns);
    } while (n < 0 && errno == EINTR && timeout_ns == 0);
    if (n < 0) {
        return errno == EINTR ? 0 : -errno;
    }
    for (int i = 0; i < n; i++) {
        AioHandler *h = evs[i].data.ptr;

        h->revents = evs[i].events;
        aio_handler_mark_ready(ctx, h);
    }
    return n;
}

/* Nanosecond timeouts, or (without epoll_pwait2) whole milliseconds. */
static bool fdmon_epoll_fine_timeouts(AioContext *ctx)
{
    return !atomic_load_explicit(&no_pwait2, memory_order_relaxed);
}

const FDMonOps fdmon_epoll_ops = {
    .update = fdmon_epoll_update,
    .wait = fdmon_epoll_wait,
    .fine_timeouts = fdmon_epoll_fine_timeouts,
};

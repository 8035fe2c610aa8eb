/*
 * The `stop` error policy's parts that the virtio block devices share:
 * each queue's held requests and stop (include/hw/virtio/virtio-io-error.h
 * has the design), and the hand-over of a stop to the main thread.
 *
 * A stop happens in a queue's thread, the QMP event goes out from the
 * main thread: virtio_io_error_notify() copies the event (the device and
 * its export may be gone by the time the main loop runs it) into one
 * allocation and schedules a one-shot BH there.
 */
#include <string.h>
#include <glib.h>

#include "hw/virtio/virtio-io-error.h"
#include "util/main-thread.h"

typedef struct VirtioIoErrorMsg {
    VirtioIoErrorFn *fn;
    VirtioIoError e;             /* its strings point into the copies */
    char *export_id;
    char *node_name;
} VirtioIoErrorMsg;

static void virtio_io_error_bh(void *opaque)
{
    VirtioIoErrorMsg *m = opaque;

    m->fn(&m->e);
    g_free(m->export_id);
    g_free(m->node_name);
    g_free(m);
}

void virtio_io_error_notify(AioContext *main_ctx, VirtioIoErrorFn *fn,
                            const VirtioIoError *e)
{
    VirtioIoErrorMsg *m;

    if (!fn || !main_ctx) {
        return;
    }
    m = g_new0(VirtioIoErrorMsg, 1);
    m->fn = fn;
    m->e = *e;
    m->export_id = g_strdup(e->export_id ? e->export_id : "");
    m->node_name = g_strdup(e->node_name ? e->node_name : "");
    m->e.export_id = m->export_id;
    m->e.node_name = m->node_name;
    aio_bh_schedule_oneshot(main_ctx, virtio_io_error_bh, m);
}

void virtio_stop_hold(VirtioStop *s, VirtioHeld *h, VirtQueue *vq,
                      AioContext *main_ctx, VirtioIoErrorFn *fn,
                      const VirtioIoError *e)
{
    VirtioHeld **p = &s->held;

    while (*p && (*p)->seq < h->seq) {
        p = &(*p)->next;
    }
    h->next = *p;
    *p = h;
    if (s->stopped) {
        return;
    }
    s->stopped = true;
    atomic_store_explicit(&s->seen, true, memory_order_relaxed);
    virtqueue_set_paused(vq, true);
    virtio_io_error_notify(main_ctx, fn, e);
}

VirtioHeld *virtio_stop_take(VirtioStop *s)
{
    VirtioHeld *held = s->held;

    s->held = NULL;
    s->stopped = false;
    atomic_store_explicit(&s->seen, false, memory_order_relaxed);
    return held;
}

void virtio_stop_restart(VirtioStop *s, VirtQueue *vq)
{
    if (!s->stopped) {
        virtqueue_set_paused(vq, false);
    }
}

bool virtio_stop_is_stopped(VirtioStop *s)
{
    return atomic_load_explicit(&s->seen, memory_order_relaxed);
}

void virtio_stop_init(VirtioStop *s, VirtioStopRetryFn *retry, void *queue)
{
    memset(s, 0, sizeof(*s));
    s->retry = retry;
    s->queue = queue;
    atomic_init(&s->seen, false);
    atomic_init(&s->ctx, NULL);
}

void virtio_stop_set_context(VirtioStop *s, AioContext *ctx)
{
    g_assert(aio_context_in_home_thread(ctx));
    /* Release: pairs with the acquire in virtio_stop_resume(). */
    atomic_store_explicit(&s->ctx, ctx, memory_order_release);
}

static void virtio_stop_retry_bh(void *opaque)
{
    VirtioStop *s = opaque;

    s->retried = s->retry(s->queue, true);
}

/* Resume s if it is stopped; the requests submitted again. */
static unsigned virtio_stop_resume(VirtioStop *s)
{
    AioContext *ctx = atomic_load_explicit(&s->ctx, memory_order_acquire);

    if (!ctx || !virtio_stop_is_stopped(s)) {
        return 0;
    }
    aio_run_sync(ctx, virtio_stop_retry_bh, s);
    return s->retried;
}

unsigned virtio_stop_all(VirtioStop *first, size_t stride, unsigned n,
                         bool resume)
{
    unsigned sum = 0;

    if (resume) {
        assert_main_thread();
    }
    for (unsigned i = 0; i < n; i++) {
        VirtioStop *s = (VirtioStop *)((char *)first + i * stride);

        sum += resume ? virtio_stop_resume(s) : virtio_stop_is_stopped(s);
    }
    return sum;
}

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

typedef struct VirtioStopRetry {
    unsigned (*retry)(void *queue);
    void *queue;
    unsigned n;
} VirtioStopRetry;

static void virtio_stop_retry_bh(void *opaque)
{
    VirtioStopRetry *r = opaque;

    r->n = r->retry(r->queue);
}

unsigned virtio_stop_resume(VirtioStop *s, AioContext *ctx,
                            unsigned (*retry)(void *queue), void *queue)
{
    VirtioStopRetry r = { retry, queue, 0 };

    assert_main_thread();
    if (ctx && virtio_stop_is_stopped(s)) {
        aio_run_sync(ctx, virtio_stop_retry_bh, &r);
    }
    return r.n;
}

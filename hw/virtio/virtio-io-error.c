/*
 * The hand-over of an error policy's stop to the main thread (include/
 * block/error-policy.h says what each policy does).
 *
 * A stop happens in a queue's thread, the QMP event goes out from the
 * main thread: virtio_io_error_notify() copies the event (the device and
 * its export may be gone by the time the main loop runs it) into one
 * allocation and schedules a one-shot BH there.
 */
#include <glib.h>

#include "hw/virtio/virtio-io-error.h"

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

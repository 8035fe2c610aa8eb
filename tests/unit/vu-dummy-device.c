/*
 * The dummy vhost-user device of the server tests (see vu-dummy-device.h).
 * Its counters are atomics: the server calls the queue callbacks in the
 * rings' IOThreads while the test reads them.
 */
#include <errno.h>
#include <string.h>
#include <glib.h>

#include "hw/virtio/virtqueue.h"
#include "util/iov.h"
#include "vu-dummy-device.h"

static uint64_t dummy_get_features(void *dev)
{
    return 1ull << DUMMY_FEATURE_BIT;
}

/* Config and features: the server's main thread, when it is checked. */
static void dummy_check_main(Dummy *d)
{
    if (d->main_ctx) {
        g_assert(aio_context_in_home_thread(d->main_ctx));
    }
}

static void dummy_set_features(void *dev, uint64_t features)
{
    Dummy *d = dev;

    dummy_check_main(d);
    atomic_fetch_add(&d->set_features_calls, 1);
    atomic_store(&d->features, features);
}

static uint32_t dummy_get_config(void *dev, uint8_t *buf, uint32_t len)
{
    Dummy *d = dev;
    uint32_t n = MIN(len, DUMMY_CONFIG_LEN);

    dummy_check_main(d);
    memcpy(buf, d->config, n);
    return n;
}

/* Only the first 8 bytes are writable. */
static int dummy_set_config(void *dev, const uint8_t *buf, uint32_t offset,
                            uint32_t len)
{
    Dummy *d = dev;

    dummy_check_main(d);
    if (offset > 8 || len > 8 - offset) {
        return -EINVAL;
    }
    memcpy(d->config + offset, buf, len);
    atomic_fetch_add(&d->set_config_calls, 1);
    return 0;
}

/* A queue callback: its ring's context, not the main one, not the test's. */
static void dummy_check_thread(Dummy *d, VirtQueue *vq)
{
    if (!d->main_ctx) {
        return;
    }
    if (!aio_context_in_home_thread(virtqueue_get_aio_context(vq)) ||
        pthread_equal(pthread_self(), d->test_thread) ||
        aio_context_in_home_thread(d->main_ctx)) {
        atomic_fetch_add(&d->wrong_thread, 1);
    }
}

static void dummy_queue_started(void *dev, VirtQueue *vq)
{
    Dummy *d = dev;

    dummy_check_thread(d, vq);
    atomic_fetch_add(&d->started, 1);
}

static void dummy_queue_drain(void *dev, VirtQueue *vq)
{
    Dummy *d = dev;

    dummy_check_thread(d, vq);
    /* The echo handler pushes everything it pops at once. */
    g_assert_cmpuint(virtqueue_inflight(vq), ==, 0);
    atomic_fetch_add(&d->drained, 1);
}

static void dummy_handle_queue(VirtQueue *vq, void *opaque)
{
    Dummy *d = opaque;

    dummy_check_thread(d, vq);
    for (;;) {
        VirtQueueElement *elem = g_new(VirtQueueElement, 1);
        uint8_t buf[4096];
        size_t len;
        int r = virtqueue_pop(vq, elem);

        if (r <= 0) {
            if (r < 0) {
                atomic_fetch_add(&d->pop_errors, 1);
            }
            g_free(elem);
            return;
        }
        len = iov_to_buf(elem->out_sg, elem->out_num, 0, buf, sizeof(buf));
        len = iov_from_buf(elem->in_sg, elem->in_num, 0, buf, len);
        virtqueue_push(vq, elem, len);
        atomic_fetch_add(&d->handled, 1);
        g_free(elem);
    }
}

const VuDevOps dummy_ops = {
    .get_features = dummy_get_features,
    .set_features = dummy_set_features,
    .get_config = dummy_get_config,
    .set_config = dummy_set_config,
    .queue_started = dummy_queue_started,
    .queue_drain = dummy_queue_drain,
    .handle_queue = dummy_handle_queue,
};

void dummy_init(Dummy *d)
{
    *d = (Dummy) { .main_ctx = NULL };
    memcpy(d->config, "spindle-dummy-01", DUMMY_CONFIG_LEN);
}

Dummy *dummy_new(AioContext *main_ctx, pthread_t test_thread)
{
    Dummy *d = g_new(Dummy, 1);

    dummy_init(d);
    d->main_ctx = main_ctx;
    d->test_thread = test_thread;
    return d;
}

void dummy_free(Dummy *d)
{
    g_assert_cmpint(atomic_load(&d->wrong_thread), ==, 0);
    g_free(d);
}

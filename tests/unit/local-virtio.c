/*
 * In-process virtio devices for the device test programs: see
 * local-virtio.h.  The driver's side of the rings (descriptor layout,
 * publishing, kicks, the used ring and their barriers) is the front-end
 * library's; this file only wires the device's VirtQueues to it.
 */
#include <string.h>
#include <unistd.h>
#include <glib.h>

#include "local-virtio.h"

/* ------------------------------------------------------------------------ */
/* Guest memory                                                              */

VuFrontend *local_frontend_new(VufOptions *opts, uint64_t features)
{
    Error *err = NULL;
    VuFrontend *fe;

    opts->socket_path = "(local)";
    fe = vuf_new(opts, &err);
    g_assert_no_error(err);
    vuf_start_local(fe, features, &err);
    g_assert_no_error(err);
    return fe;
}

GuestMemory *local_guest_memory(VuFrontend *fe, const GuestMemRegionDesc *r,
                                unsigned n)
{
    GuestMemory *mem = guest_memory_new_empty(), *next;
    Error *err = NULL;

    for (unsigned i = 0; i < n; i++) {
        next = guest_memory_add(mem, &r[i], vuf_mem_fd(fe), &err);
        g_assert_no_error(err);
        guest_memory_unref(mem);
        mem = next;
    }
    return mem;
}

void lmem_init(LocalMem *m, uint64_t size, unsigned nqueues, uint64_t qva,
               uint64_t features)
{
    GuestMemRegionDesc r = { 0, size, qva, 0 };
    VufOptions opts;

    memset(m, 0, sizeof(*m));
    vuf_options_init_device(&opts, VUF_DEVICE_GENERIC);
    opts.mem_size = size;
    opts.num_queues = nqueues;
    opts.queue_size = LOCAL_RING_NUM;
    opts.features_wanted = features;
    m->fe = local_frontend_new(&opts, features);
    m->qva = qva;
    m->mem = local_guest_memory(m->fe, &r, 1);
}

void lmem_cleanup(LocalMem *m)
{
    guest_memory_unref(m->mem);
    vuf_free(m->fe);
}

void *lmem_ptr(LocalMem *m, uint64_t gpa)
{
    void *p = vuf_hva(m->fe, gpa, 1);

    g_assert_nonnull(p);
    return p;
}

uint64_t lmem_alloc(LocalMem *m, size_t len)
{
    uint64_t gpa;

    g_assert_nonnull(vuf_mem_alloc(m->fe, len, 64, &gpa));
    return gpa;
}

void local_vq_configure(VirtQueue *vq, VufQueue *fq, uint64_t qva,
                        uint64_t features, AioContext *ctx)
{
    VirtQueueAddrs addrs = { 0 };
    uint64_t desc, avail, used;

    vufq_ring_gpas(fq, &desc, &avail, &used);
    addrs.desc_qva = qva + desc;
    addrs.avail_qva = qva + avail;
    addrs.used_qva = qva + used;
    g_assert_cmpint(virtqueue_set_num(vq, vufq_size(fq)), ==, 0);
    virtqueue_set_addrs(vq, &addrs);
    virtqueue_set_kick_fd(vq, dup(vufq_kick_fd(fq)));
    virtqueue_set_call_fd(vq, dup(vufq_call_fd(fq)));
    /* A new call fd is signalled once at once (virtqueue_set_call_fd()):
     * take that interrupt, so the tests count only what pushes cause. */
    vufq_collect_interrupts(fq);
    virtqueue_set_err_fd(vq, dup(vufq_err_fd(fq)));
    virtqueue_set_features(vq, features);
    virtqueue_set_aio_context(vq, ctx);
    virtqueue_set_enabled(vq, true);
}

/* ------------------------------------------------------------------------ */
/* Queues                                                                    */

void lq_init(LocalQueue *q, LocalMem *m, unsigned index, AioContext *ctx,
             uint64_t features, const VuDevOps *ops, void *dev)
{
    memset(q, 0, sizeof(*q));
    q->m = m;
    q->fq = vuf_queue(m->fe, index);
    q->ctx = ctx;
    q->ops = ops;
    q->dev = dev;
    q->vq = virtqueue_new(index);
    local_vq_configure(q->vq, q->fq, m->qva, features, ctx);
}

static void lq_start_bh(void *opaque)
{
    LocalQueue *q = opaque;

    g_assert_cmpint(virtqueue_start(q->vq, q->m->mem, q->ops->handle_queue,
                                    q->dev), ==, 0);
    q->ops->queue_started(q->dev, q->vq);
}

static void lq_stop_bh(void *opaque)
{
    LocalQueue *q = opaque;

    virtqueue_stop(q->vq);
    q->ops->queue_drain(q->dev, q->vq);
    /* queue_drain's promise: every popped element is back. */
    g_assert_cmpuint(virtqueue_inflight(q->vq), ==, 0);
}

void lq_start(LocalQueue *q)
{
    aio_run_sync(q->ctx, lq_start_bh, q);
    q->started = true;
}

void lq_stop(LocalQueue *q)
{
    if (q->started) {
        aio_run_sync(q->ctx, lq_stop_bh, q);
        q->started = false;
    }
}

void lq_cleanup(LocalQueue *q)
{
    g_assert_false(q->started);
    virtqueue_free(q->vq);
}

uint16_t lq_add_chain(LocalQueue *q, const VufSeg *segs, unsigned n)
{
    /* The token only has to be non-NULL: completions are told apart by
     * their head (lq_next_used()). */
    int head = vufq_add_unpublished(q->fq, segs, n, 0, q);

    g_assert_cmpint(head, >=, 0);
    return head;
}

void lq_publish(LocalQueue *q, uint16_t head, bool kick)
{
    vufq_publish_head(q->fq, head);
    if (kick) {
        g_assert_cmpint(vufq_kick_always(q->fq), ==, 1);
    }
}

bool lq_next_used(LocalQueue *q, uint32_t *id, uint32_t *len)
{
    uint16_t head;
    uint32_t used_len;
    void *token;
    int r = vufq_get_used_head(q->fq, &head, &token, &used_len);

    g_assert_cmpint(r, >=, 0);
    if (r == 0) {
        return false;
    }
    if (id) {
        *id = head;
    }
    if (len) {
        *len = used_len;
    }
    return true;
}

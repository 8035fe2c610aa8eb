/*
 * A minimal virtio driver for the device test programs: see
 * virtio-test-driver.h.
 *
 * Theory of operation: the driver's side of a split ring follows the
 * virtio specification's order.  A chain's descriptors and its avail ring
 * entry are written first; the release store of avail->idx publishes them
 * (the device's acquire load of avail->idx pairs with it); then the kick.
 * Reading the used ring, the acquire load of used->idx pairs with the
 * device's release store of it, so the entries below it are complete.
 * Rings hold DRV_RING_NUM entries, and the driver reuses descriptors
 * round-robin: a test never has more than DRV_RING_NUM descriptors in
 * flight on one queue.
 */
#include <endian.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <glib.h>

#include "virtio-test-driver.h"

#define DRV_AVAIL_OFF   0x400
#define DRV_USED_OFF    0x800

/* ------------------------------------------------------------------------ */
/* Guest memory                                                              */

void drvmem_init(DrvMem *m, const char *name, uint64_t size, uint64_t qva)
{
    GuestMemRegionDesc r = { 0, size, qva, 0 };
    GuestMemory *empty = guest_memory_new_empty();
    Error *err = NULL;

    memset(m, 0, sizeof(*m));
    m->size = size;
    m->qva = qva;
    m->memfd = memfd_create(name, MFD_CLOEXEC);
    g_assert_cmpint(m->memfd, >=, 0);
    g_assert_cmpint(ftruncate(m->memfd, size), ==, 0);
    m->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, m->memfd,
                  0);
    g_assert(m->map != MAP_FAILED);
    m->mem = guest_memory_add(empty, &r, m->memfd, &err);
    g_assert_no_error(err);
    guest_memory_unref(empty);
}

void drvmem_cleanup(DrvMem *m)
{
    guest_memory_unref(m->mem);
    munmap(m->map, m->size);
    close(m->memfd);
}

void *drvmem_ptr(DrvMem *m, uint64_t gpa)
{
    g_assert_cmpuint(gpa, <, m->size);
    return m->map + gpa;
}

/* ------------------------------------------------------------------------ */
/* Queues                                                                    */

static _Atomic uint16_t *drvq_ring16(DrvQueue *q, uint64_t off)
{
    return drvmem_ptr(q->m, q->gpa + off);
}

void drvq_init(DrvQueue *q, DrvMem *m, unsigned index, uint64_t gpa,
               AioContext *ctx, uint64_t features, const VuDevOps *ops,
               void *dev)
{
    VirtQueueAddrs addrs = { 0 };

    memset(q, 0, sizeof(*q));
    q->m = m;
    q->ctx = ctx;
    q->ops = ops;
    q->dev = dev;
    q->gpa = gpa;
    g_assert_cmpuint(gpa + DRV_USED_OFF + 4 + 8 * DRV_RING_NUM + 2, <=,
                     m->size);
    g_assert_cmpint(event_notifier_init(&q->kick, false), ==, 0);
    g_assert_cmpint(event_notifier_init(&q->call, false), ==, 0);
    addrs.desc_qva = m->qva + gpa;
    addrs.avail_qva = m->qva + gpa + DRV_AVAIL_OFF;
    addrs.used_qva = m->qva + gpa + DRV_USED_OFF;
    q->vq = virtqueue_new(index);
    g_assert_cmpint(virtqueue_set_num(q->vq, DRV_RING_NUM), ==, 0);
    virtqueue_set_addrs(q->vq, &addrs);
    virtqueue_set_kick_fd(q->vq, dup(q->kick.fd));
    virtqueue_set_call_fd(q->vq, dup(q->call.fd));
    virtqueue_set_features(q->vq, features);
    virtqueue_set_aio_context(q->vq, ctx);
    virtqueue_set_enabled(q->vq, true);
}

static void drvq_start_bh(void *opaque)
{
    DrvQueue *q = opaque;

    g_assert_cmpint(virtqueue_start(q->vq, q->m->mem, q->ops->handle_queue,
                                    q->dev), ==, 0);
    q->ops->queue_started(q->dev, q->vq);
}

static void drvq_stop_bh(void *opaque)
{
    DrvQueue *q = opaque;

    virtqueue_stop(q->vq);
    q->ops->queue_drain(q->dev, q->vq);
    /* queue_drain's promise: every popped element is back. */
    g_assert_cmpuint(virtqueue_inflight(q->vq), ==, 0);
}

void drvq_start(DrvQueue *q)
{
    aio_run_sync(q->ctx, drvq_start_bh, q);
    q->started = true;
}

void drvq_stop(DrvQueue *q)
{
    if (q->started) {
        aio_run_sync(q->ctx, drvq_stop_bh, q);
        q->started = false;
    }
}

void drvq_cleanup(DrvQueue *q)
{
    g_assert_false(q->started);
    virtqueue_free(q->vq);
    event_notifier_cleanup(&q->kick);
    event_notifier_cleanup(&q->call);
}

uint16_t drvq_add_chain(DrvQueue *q, const DrvBuf *b, unsigned n)
{
    uint16_t head = q->next_desc % DRV_RING_NUM;

    for (unsigned i = 0; i < n; i++) {
        unsigned idx = (q->next_desc + i) % DRV_RING_NUM;
        uint8_t *d = drvmem_ptr(q->m, q->gpa + 16 * idx);
        uint64_t addr = htole64(b[i].gpa);
        uint32_t len = htole32(b[i].len);
        uint16_t flags = htole16((b[i].write ? DRV_DESC_F_WRITE : 0) |
                                 (i + 1 < n ? DRV_DESC_F_NEXT : 0));
        uint16_t next = htole16((idx + 1) % DRV_RING_NUM);

        memcpy(d, &addr, 8);
        memcpy(d + 8, &len, 4);
        memcpy(d + 12, &flags, 2);
        memcpy(d + 14, &next, 2);
    }
    q->next_desc += n;
    return head;
}

void drvq_publish(DrvQueue *q, uint16_t head, bool kick)
{
    atomic_store_explicit(drvq_ring16(q, DRV_AVAIL_OFF + 4 + 2 *
                                      (q->avail_idx % DRV_RING_NUM)),
                          htole16(head), memory_order_relaxed);
    q->avail_idx++;
    /* Release: descriptors and ring entry before the index (pairs with
     * the device's acquire load of avail->idx). */
    atomic_store_explicit(drvq_ring16(q, DRV_AVAIL_OFF + 2),
                          htole16(q->avail_idx), memory_order_release);
    if (kick) {
        event_notifier_set(&q->kick);
    }
}

bool drvq_next_used(DrvQueue *q, uint32_t *id, uint32_t *len)
{
    /* Acquire: pairs with the device's release store of used->idx. */
    uint16_t idx = le16toh(atomic_load_explicit(
                               drvq_ring16(q, DRV_USED_OFF + 2),
                               memory_order_acquire));
    uint32_t e[2];

    if (idx == q->last_used) {
        return false;
    }
    memcpy(e, drvmem_ptr(q->m, q->gpa + DRV_USED_OFF + 4 +
                         8 * (q->last_used % DRV_RING_NUM)), sizeof(e));
    q->last_used++;
    if (id) {
        *id = le32toh(e[0]);
    }
    if (len) {
        *len = le32toh(e[1]);
    }
    return true;
}

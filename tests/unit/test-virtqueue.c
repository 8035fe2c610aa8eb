/*
 * Unit tests for split virtqueues (hw/virtio/virtqueue.c).
 *
 * Theory of operation: a Drv pairs the guest driver of the front-end
 * library (tools/frontend, the one spindle-bench and spindle-vu-client
 * use), in a local session with no socket (vu-raw.h), with the
 * VirtQueue under test, started in an AioContext whose home thread is the
 * test's thread.  The library owns the guest memory and lays out the
 * rings; the device sees that memory as two regions that are adjacent in
 * guest physical space but mapped separately, region B starting at an
 * unaligned file offset, so buffers can cross a region boundary and the
 * device must split them into two iovecs.  The library's driver writes
 * descriptors (direct chains or indirect tables), adds heads to the avail
 * ring, publishes avail->idx, decides whether to kick from used->flags or
 * avail_event, reads used entries, and counts the interrupts it gets on
 * its call eventfd.  Tests either pop and push directly or let aio_poll()
 * dispatch an "echo" handler that copies each element's out bytes into
 * its in buffers.  One test runs the driver in a second thread while the
 * loop polls, to see kicks suppressed and work found by polling.
 *
 * Malformed rings, which the library's driver never builds, are written
 * by hand into its descriptor table (drv_set_desc()) and published with
 * vufq_publish_head().  They must mark the queue broken with one warning
 * naming the queue and the reason (checked with g_test_expect_message()),
 * signal the error eventfd, make pop return -EIO from then on and leave
 * stop working.
 *
 * The inflight tests kill the back-end by dropping its VirtQueue with
 * requests popped and not pushed, then start a new one on the same rings
 * and inflight region, as a restarted process would.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <glib.h>

#include "hw/virtio/guest-memory.h"
#include "hw/virtio/vhost-inflight.h"
#include "hw/virtio/vhost-log.h"
#include "hw/virtio/virtqueue.h"
#include "util/aio.h"
#include "util/event-notifier.h"
#include "util/iov.h"
#include "local-virtio.h"
#include "test-helpers.h"

#define KiB 1024ULL
#define MiB (1024 * KiB)

/*
 * Guest physical layout: the library's memory, region A from 0 to SIZE_A
 * (not a page multiple, so region B starts at an unaligned file offset),
 * region B from there to the end.  The rings, the test's data buffers and
 * its hand-written indirect tables all come from the library's allocator,
 * low in region A.
 */
#define MEM_SIZE      (1 * MiB)
#define SIZE_A        (256 * KiB + 0x800)
#define DATA_SIZE     0x8000
#define TABLE_SIZE    0x1000
#define QVA_A         0x7f0000000000ULL
#define QVA_B         0x7e0000000000ULL

typedef struct Drv {
    /* Driver */
    VuFrontend *fe;
    VufQueue *q;
    unsigned num;
    bool event_idx;
    uint64_t size_a, size_b;       /* the device's two regions */
    uint64_t desc_gpa, avail_gpa, used_gpa;
    uint64_t data_gpa;             /* DATA_SIZE bytes of buffers */
    uint64_t table_gpa;            /* TABLE_SIZE bytes for indirect tables */
    unsigned submitted;            /* drv_submit_one() calls */
    EventNotifier err;             /* the driver's end */

    /* Device side */
    GuestMemory *mem;
    AioContext *ctx;
    VirtQueue *vq;
    _Atomic unsigned handled;      /* echo handler calls */
    _Atomic unsigned processed;    /* elements the echo handler pushed */
} Drv;

/* ------------------------------------------------------------------------ */
/* The driver's view of guest memory                                        */

static void *drv_ptr(Drv *d, uint64_t gpa, size_t len)
{
    void *p = vuf_hva(d->fe, gpa, len);

    g_assert_nonnull(p);
    return p;
}

static void drv_write(Drv *d, uint64_t gpa, const void *buf, size_t len)
{
    memcpy(drv_ptr(d, gpa, len), buf, len);
}

static void drv_read(Drv *d, uint64_t gpa, void *buf, size_t len)
{
    memcpy(buf, drv_ptr(d, gpa, len), len);
}

static void drv_fill(Drv *d, uint64_t gpa, size_t len, uint8_t seed)
{
    uint8_t *p = drv_ptr(d, gpa, len);

    for (size_t i = 0; i < len; i++) {
        p[i] = (uint8_t)(seed + i * 3);
    }
}

/* Ring fields, for the tests that look at or overrule the suppression
 * state (the library keeps its own copy of the indexes). */
static _Atomic uint16_t *avail_flags(Drv *d)
{
    return &vufq_avail(d->q)->flags;
}

static _Atomic uint16_t *avail_idx_field(Drv *d)
{
    return &vufq_avail(d->q)->idx;
}

static _Atomic uint16_t *used_event(Drv *d)
{
    return &vufq_avail(d->q)->ring[d->num];
}

static _Atomic uint16_t *used_flags(Drv *d)
{
    return &vufq_used(d->q)->flags;
}

static _Atomic uint16_t *used_idx_field(Drv *d)
{
    return &vufq_used(d->q)->idx;
}

static _Atomic uint16_t *avail_event(Drv *d)
{
    return (_Atomic uint16_t *)&vufq_used(d->q)->ring[d->num];
}

static uint16_t ld16(_Atomic uint16_t *p)
{
    return atomic_load_explicit(p, memory_order_relaxed);
}

static void st16(_Atomic uint16_t *p, uint16_t v)
{
    atomic_store_explicit(p, v, memory_order_relaxed);
}

/* ------------------------------------------------------------------------ */
/* Driver operations                                                        */

/* Write descriptor i of the table at table_gpa by hand (the ring's own is
 * at d->desc_gpa). */
static void drv_set_desc(Drv *d, uint64_t table_gpa, unsigned i,
                         uint64_t addr, uint32_t len, uint16_t flags,
                         uint16_t next)
{
    VRingDesc t = { .addr = addr, .len = len, .flags = flags, .next = next };

    drv_write(d, table_gpa + sizeof(t) * (uint64_t)i, &t, sizeof(t));
}

/* A chain built by the library, not yet published; returns its head. */
static uint16_t drv_add(Drv *d, const VufSeg *b, unsigned n, unsigned flags)
{
    int head = vufq_add_unpublished(d->q, b, n, flags, d);

    g_assert_cmpint(head, >=, 0);
    return head;
}

static uint16_t drv_add_direct(Drv *d, const VufSeg *b, unsigned n)
{
    return drv_add(d, b, n, 0);
}

/* An indirect table (the library's), referenced by one ring descriptor. */
static uint16_t drv_add_indirect(Drv *d, const VufSeg *b, unsigned n)
{
    return drv_add(d, b, n, VUFQ_ADD_INDIRECT);
}

/* Make head available and kick if the device asked for it. */
static bool drv_publish(Drv *d, uint16_t head)
{
    int r;

    vufq_publish_head(d->q, head);
    r = vufq_kick(d->q);
    g_assert_cmpint(r, >=, 0);
    return r == 1;
}

/* Kicks sent so far (avoided ones not counted). */
static uint64_t drv_kicks(Drv *d)
{
    VufQueueStats st;

    vufq_get_stats(d->q, &st);
    return st.kicks;
}

/* One chain with a single device-writable buffer of 16 bytes. */
static uint16_t drv_submit_one(Drv *d)
{
    VufSeg b = { d->data_gpa + 0x100 * (d->submitted++ % d->num), 16, true };
    uint16_t head = drv_add_direct(d, &b, 1);

    drv_publish(d, head);
    return head;
}

static bool drv_get_used(Drv *d, uint32_t *id, uint32_t *len)
{
    uint16_t head;
    void *token;
    int r = vufq_get_used_head(d->q, &head, &token, len);

    g_assert_cmpint(r, >=, 0);
    if (r) {
        g_assert(token == d);
        *id = head;
    }
    return r;
}

/* Interrupts received since the last call (the eventfd's counter). */
static uint64_t drv_calls(Drv *d)
{
    return vufq_collect_interrupts(d->q);
}

/* ------------------------------------------------------------------------ */
/* Set-up                                                                   */

static GuestMemory *drv_build_table(Drv *d, bool with_a, bool with_b)
{
    GuestMemRegionDesc r[2] = {
        { 0, d->size_a, QVA_A, 0 },
        { d->size_a, d->size_b, QVA_B, d->size_a },
    };

    /* A, B or both: the regions wanted are consecutive in r. */
    return local_guest_memory(d->fe, r + !with_a, with_a + with_b);
}

static void drv_setup_sized(Drv *d, unsigned num, uint64_t features,
                            uint64_t size_a, uint64_t mem_size)
{
    AioPollParams no_polling = { .max_ns = 0 };
    VufOptions opts;

    memset(d, 0, sizeof(*d));
    features |= 1ULL << VIRTIO_F_VERSION_1;
    d->num = num;
    d->event_idx = features & (1ULL << VIRTIO_RING_F_EVENT_IDX);
    d->size_a = size_a;
    d->size_b = mem_size - size_a;

    vuf_options_init_device(&opts, VUF_DEVICE_GENERIC);
    opts.mem_size = mem_size;
    opts.queue_size = num;
    opts.indirect_max = VIRTQUEUE_MAX_SEGS + 1;
    opts.features_wanted = features;
    d->fe = local_frontend_new(&opts, features);
    d->q = vuf_queue(d->fe, 0);
    /* Ask for every interrupt, as the tests expect the device to send
     * them: no NO_INTERRUPT flag, used_event at the next entry. */
    vufq_set_completion(d->q, VUF_COMPLETION_INTERRUPT);
    vufq_ring_gpas(d->q, &d->desc_gpa, &d->avail_gpa, &d->used_gpa);
    g_assert_nonnull(vuf_mem_alloc(d->fe, DATA_SIZE, 4096, &d->data_gpa));
    g_assert_nonnull(vuf_mem_alloc(d->fe, TABLE_SIZE, 4096, &d->table_gpa));
    g_assert_cmpuint(d->table_gpa + TABLE_SIZE, <=, size_a - 0x1000);
    d->mem = drv_build_table(d, true, true);
    g_assert_cmpint(event_notifier_init(&d->err, false), ==, 0);

    d->ctx = ctx_new();
    aio_context_set_poll_params(d->ctx, &no_polling);
    d->vq = virtqueue_new(0);
    local_vq_configure(d->vq, d->q, QVA_A, features, d->ctx);
    virtqueue_set_err_fd(d->vq, dup(d->err.fd));
}

static void drv_setup(Drv *d, unsigned num, uint64_t features)
{
    drv_setup_sized(d, num, features, SIZE_A, MEM_SIZE);
}

/* Driver and device agree on base (before start). */
static void drv_set_base(Drv *d, uint16_t base)
{
    g_assert_cmpint(vufq_set_base(d->q, base), ==, 0);
    virtqueue_set_base(d->vq, base);
}

static void drv_start(Drv *d, VirtQueueHandler *handler)
{
    g_assert_cmpint(virtqueue_start(d->vq, d->mem, handler, d), ==, 0);
    g_assert_true(virtqueue_is_started(d->vq));
    /* Run the start-up BH now, so that tests start from a quiet loop. */
    while (aio_poll(d->ctx, false)) {
        /* nothing */
    }
}

static void drv_cleanup(Drv *d)
{
    virtqueue_stop(d->vq);
    virtqueue_free(d->vq);
    aio_context_unref(d->ctx);
    guest_memory_unref(d->mem);
    vuf_free(d->fe);
    event_notifier_cleanup(&d->err);
}

static const uint64_t F_EVENT_IDX = 1ULL << VIRTIO_RING_F_EVENT_IDX;
static const uint64_t F_INDIRECT_DESC = 1ULL << VIRTIO_RING_F_INDIRECT_DESC;

/* ------------------------------------------------------------------------ */
/* The device: an echo handler                                              */

/* Copy the out bytes into the in buffers; returns the bytes copied. */
static size_t echo_element(VirtQueueElement *e)
{
    size_t out = iov_size(e->out_sg, e->out_num);
    uint8_t *buf = g_malloc(out + 1);
    size_t done;

    iov_to_buf(e->out_sg, e->out_num, 0, buf, out);
    done = iov_from_buf(e->in_sg, e->in_num, 0, buf, out);
    g_free(buf);
    return done;
}

static void echo_handler(VirtQueue *vq, void *opaque)
{
    Drv *d = opaque;
    VirtQueueElement *e = g_new0(VirtQueueElement, 1);

    atomic_fetch_add(&d->handled, 1);
    while (virtqueue_pop(vq, e) == 1) {
        virtqueue_push(vq, e, echo_element(e));
        atomic_fetch_add(&d->processed, 1);
    }
    g_free(e);
}

/* ------------------------------------------------------------------------ */
/* Set-up and start                                                         */

static void test_setup(void)
{
    AioContext *ctx = ctx_new();
    VirtQueue *vq = virtqueue_new(3);
    VirtQueueAddrs addrs = { 0x1000, 0x2000, 0x3000, 0, 0 };
    GuestMemory *mem = guest_memory_new_empty();
    EventNotifier e;

    g_assert_cmpuint(virtqueue_index(vq), ==, 3);
    g_assert_cmpint(virtqueue_set_num(vq, 0), ==, -EINVAL);
    g_assert_cmpint(virtqueue_set_num(vq, 3), ==, -EINVAL);
    g_assert_cmpint(virtqueue_set_num(vq, 1025), ==, -EINVAL);
    g_assert_cmpint(virtqueue_set_num(vq, 2048), ==, -EINVAL);
    g_assert_cmpint(virtqueue_set_num(vq, 1), ==, 0);
    g_assert_cmpint(virtqueue_set_num(vq, VIRTQUEUE_MAX_SIZE), ==, 0);
    g_assert_false(virtqueue_is_ready(vq));
    virtqueue_set_addrs(vq, &addrs);
    g_assert_false(virtqueue_is_ready(vq));

    virtqueue_set_aio_context(vq, ctx);
    g_assert(virtqueue_get_aio_context(vq) == ctx);
    /* Not ready: no kick fd. */
    g_assert_cmpint(virtqueue_start(vq, mem, NULL, NULL), ==, -EINVAL);
    g_assert_false(virtqueue_is_started(vq));
    g_assert_false(virtqueue_is_broken(vq));

    g_assert_cmpint(event_notifier_init(&e, false), ==, 0);
    virtqueue_set_kick_fd(vq, e.fd);           /* the queue owns it now */
    g_assert_true(virtqueue_is_ready(vq));
    virtqueue_set_kick_fd(vq, -1);
    g_assert_false(virtqueue_is_ready(vq));

    g_assert_false(virtqueue_is_enabled(vq));
    virtqueue_set_enabled(vq, true);
    g_assert_true(virtqueue_is_enabled(vq));

    /* Stopped: stop returns the base, set_memory waits for start. */
    virtqueue_set_base(vq, 7);
    g_assert_cmpuint(virtqueue_stop(vq), ==, 7);
    g_assert_cmpint(virtqueue_set_memory(vq, mem), ==, 0);
    g_assert_cmpuint(virtqueue_inflight(vq), ==, 0);

    virtqueue_free(vq);
    virtqueue_free(NULL);
    guest_memory_unref(mem);
    aio_context_unref(ctx);
}

static void start_fails(Drv *d, uint64_t desc, uint64_t avail, uint64_t used)
{
    VirtQueueAddrs addrs = { desc, avail, used, 0, 0 };

    virtqueue_set_addrs(d->vq, &addrs);
    g_test_expect_message(NULL, G_LOG_LEVEL_WARNING,
                          "virtqueue 0 is broken*rings*not inside guest "
                          "memory*");
    g_assert_cmpint(virtqueue_start(d->vq, d->mem, echo_handler, d), ==,
                    -EFAULT);
    g_test_assert_expected_messages();
    g_assert_false(virtqueue_is_started(d->vq));
    g_assert_true(virtqueue_is_broken(d->vq));
    g_assert_true(event_notifier_test_and_clear(&d->err));
}

static void test_start_rings_outside(void)
{
    Drv d;
    uint64_t desc, avail, used;
    VirtQueueAddrs good;
    VirtQueueElement *e = g_new0(VirtQueueElement, 1);

    drv_setup(&d, 16, 0);
    desc = QVA_A + d.desc_gpa;
    avail = QVA_A + d.avail_gpa;
    used = QVA_A + d.used_gpa;
    good = (VirtQueueAddrs) { desc, avail, used, 0, 0 };
    /* A GPA is not a front-end address. */
    start_fails(&d, d.desc_gpa, avail, used);
    /* Outside every region. */
    start_fails(&d, desc, QVA_A + 64 * MiB, used);
    /* Straddling the end of a region (used ring is 6 + 8 * 16 bytes). */
    start_fails(&d, desc, avail, QVA_A + SIZE_A - 64);
    /* Desc table of 256 bytes running off region B's end. */
    start_fails(&d, QVA_B + (MEM_SIZE - SIZE_A) - 128, avail, used);
    /* Overflowing. */
    start_fails(&d, UINT64_MAX - 8, avail, used);
    /* Misaligned used ring (its fields are accessed atomically). */
    start_fails(&d, desc, avail, used + 2);
    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, -EIO);

    /* Good addresses: a fresh start clears the broken state. */
    virtqueue_set_addrs(d.vq, &good);
    drv_start(&d, echo_handler);
    g_assert_false(virtqueue_is_broken(d.vq));
    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, 0);
    g_free(e);
    drv_cleanup(&d);
}

/* ------------------------------------------------------------------------ */
/* Round trips                                                              */

static void test_roundtrip_direct(void)
{
    Drv d;
    VirtQueueElement *e = g_new0(VirtQueueElement, 1);
    VirtQueueElement *more = g_new0(VirtQueueElement, 3);
    VufSeg bufs[2];
    const char reply[] = "response from the device";
    char got[sizeof(reply)];
    uint8_t expect[32];
    VirtQueueStats st;
    uint32_t id, len;
    uint16_t head;

    drv_setup(&d, 16, 0);
    drv_start(&d, NULL);
    g_assert_cmpuint(ld16(used_flags(&d)), ==, 0);
    bufs[0] = (VufSeg) { d.data_gpa, 32, false };
    bufs[1] = (VufSeg) { d.data_gpa + 0x1000, 64, true };

    drv_fill(&d, d.data_gpa, 32, 0x40);
    drv_read(&d, d.data_gpa, expect, 32);
    head = drv_add_direct(&d, bufs, 2);
    g_assert_true(drv_publish(&d, head));       /* notifications are on */

    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, 1);
    g_assert_cmpuint(e->head, ==, head);
    g_assert_cmpuint(e->out_num, ==, 1);
    g_assert_cmpuint(e->in_num, ==, 1);
    g_assert_cmpuint(e->in_bytes, ==, 64);
    g_assert_cmpuint(e->out_sg[0].iov_len, ==, 32);
    g_assert_cmpmem(e->out_sg[0].iov_base, 32, expect, 32);
    g_assert(e->in_sg[0].iov_base ==
             guest_memory_gpa_to_host(d.mem, d.data_gpa + 0x1000, 64));
    g_assert_cmpuint(e->in_sg[0].iov_len, ==, 64);
    g_assert_cmpuint(virtqueue_inflight(d.vq), ==, 1);
    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, 0);

    memcpy(e->in_sg[0].iov_base, reply, sizeof(reply));
    g_assert_false(drv_get_used(&d, &id, &len));
    virtqueue_push(d.vq, e, sizeof(reply));
    g_assert_cmpuint(virtqueue_inflight(d.vq), ==, 0);
    g_assert_true(drv_get_used(&d, &id, &len));
    g_assert_cmpuint(id, ==, head);
    g_assert_cmpuint(len, ==, sizeof(reply));
    drv_read(&d, d.data_gpa + 0x1000, got, sizeof(got));
    g_assert_cmpstr(got, ==, reply);

    /* The interrupt comes from the loop (a BH), not from push. */
    g_assert_cmpuint(drv_calls(&d), ==, 0);
    aio_poll(d.ctx, false);
    g_assert_cmpuint(drv_calls(&d), ==, 1);

    /* Several in flight, completed out of order. */
    for (unsigned i = 0; i < 3; i++) {
        drv_submit_one(&d);
    }
    for (unsigned i = 0; i < 3; i++) {
        g_assert_cmpint(virtqueue_pop(d.vq, &more[i]), ==, 1);
    }
    g_assert_cmpuint(virtqueue_inflight(d.vq), ==, 3);
    virtqueue_push(d.vq, &more[2], 1);
    virtqueue_push(d.vq, &more[0], 2);
    virtqueue_push(d.vq, &more[1], 3);
    g_assert_true(drv_get_used(&d, &id, &len));
    g_assert_cmpuint(id, ==, more[2].head);
    g_assert_cmpuint(len, ==, 1);
    g_assert_true(drv_get_used(&d, &id, &len));
    g_assert_cmpuint(id, ==, more[0].head);
    g_assert_true(drv_get_used(&d, &id, &len));
    g_assert_cmpuint(id, ==, more[1].head);
    g_assert_cmpuint(len, ==, 3);
    aio_poll(d.ctx, false);
    g_assert_cmpuint(drv_calls(&d), ==, 1);

    virtqueue_get_stats(d.vq, &st);
    g_assert_cmpuint(st.requests, ==, 4);
    g_assert_cmpuint(st.interrupts, ==, 2);
    g_assert_cmpuint(st.interrupts_suppressed, ==, 0);
    g_free(e);
    g_free(more);
    drv_cleanup(&d);
}

/*
 * Publish head and pop it into e: its head, its number of device-readable
 * and -writable segments, and the bytes of the latter must be as given.
 */
static void publish_and_pop(Drv *d, uint16_t head, VirtQueueElement *e,
                            unsigned out_num, unsigned in_num,
                            size_t in_bytes)
{
    drv_publish(d, head);
    g_assert_cmpint(virtqueue_pop(d->vq, e), ==, 1);
    g_assert_cmpuint(e->head, ==, head);
    g_assert_cmpuint(e->out_num, ==, out_num);
    g_assert_cmpuint(e->in_num, ==, in_num);
    g_assert_cmpuint(e->in_bytes, ==, in_bytes);
}

static void test_roundtrip_indirect(void)
{
    Drv d;
    VirtQueueElement *e = g_new0(VirtQueueElement, 1);
    VufSeg bufs[3], tail_in;
    uint32_t id, len;
    uint16_t head;

    drv_setup(&d, 16, F_INDIRECT_DESC);
    drv_start(&d, NULL);
    bufs[0] = (VufSeg) { d.data_gpa, 16, false };
    bufs[1] = (VufSeg) { d.data_gpa + 0x1000, 512, true };
    bufs[2] = (VufSeg) { d.data_gpa + 0x2000, 1, true };
    tail_in = (VufSeg) { d.data_gpa + 0x3000, 8, true };
    drv_fill(&d, d.data_gpa, 16, 1);

    head = drv_add_indirect(&d, bufs, 3);
    publish_and_pop(&d, head, e, 1, 2, 513);
    g_assert(e->out_sg[0].iov_base ==
             guest_memory_gpa_to_host(d.mem, d.data_gpa, 16));
    g_assert(e->in_sg[1].iov_base ==
             guest_memory_gpa_to_host(d.mem, d.data_gpa + 0x2000, 1));
    g_assert_cmpuint(echo_element(e), ==, 16);
    virtqueue_push(d.vq, e, 513);
    g_assert_true(drv_get_used(&d, &id, &len));
    g_assert_cmpuint(id, ==, head);
    g_assert_cmpuint(len, ==, 513);
    {
        uint8_t a[16], b[16];

        drv_read(&d, d.data_gpa, a, 16);
        drv_read(&d, d.data_gpa + 0x1000, b, 16);
        g_assert_cmpmem(a, 16, b, 16);
    }

    /* A direct chain may end in an indirect descriptor (its WRITE flag
     * is ignored): the library's chain of two, its last descriptor turned
     * into a reference to a table of one. */
    drv_set_desc(&d, d.table_gpa, 0, tail_in.gpa, tail_in.len,
                 VRING_DESC_F_WRITE, 0);
    head = drv_add_direct(&d, (VufSeg[]){ { d.data_gpa, 4, false },
                                          { d.table_gpa, 16, true } }, 2);
    vufq_desc_table(d.q)[vufq_desc_table(d.q)[head].next].flags =
        VRING_DESC_F_INDIRECT | VRING_DESC_F_WRITE;
    publish_and_pop(&d, head, e, 1, 1, 8);
    virtqueue_push(d.vq, e, 0);
    g_assert_true(drv_get_used(&d, &id, &len));
    g_assert_cmpuint(len, ==, 0);
    g_free(e);
    drv_cleanup(&d);
}

static void test_index_wrap(void)
{
    Drv d;
    VirtQueueElement *e = g_new0(VirtQueueElement, 1);
    uint32_t id, len;

    drv_setup(&d, 16, F_EVENT_IDX);
    drv_set_base(&d, 65530);
    drv_start(&d, NULL);
    g_assert_cmpuint(ld16(avail_event(&d)), ==, 65530);
    for (unsigned i = 0; i < 40; i++) {
        uint16_t head = drv_submit_one(&d);

        g_assert_cmpint(virtqueue_pop(d.vq, e), ==, 1);
        g_assert_cmpuint(e->head, ==, head);
        virtqueue_push(d.vq, e, i % 16);
        g_assert_true(drv_get_used(&d, &id, &len));
        g_assert_cmpuint(id, ==, head);
        g_assert_cmpuint(len, ==, i % 16);
    }
    g_assert_cmpuint(ld16(used_idx_field(&d)), ==, (uint16_t)(65530 + 40));
    g_assert_cmpuint(virtqueue_stop(d.vq), ==, (uint16_t)(65530 + 40));
    g_free(e);
    drv_cleanup(&d);
}

static void test_multi_region(void)
{
    Drv d;
    VirtQueueElement *e = g_new0(VirtQueueElement, 1);
    uint64_t cross = SIZE_A - 0x800;      /* 2 KiB before B */
    VufSeg bufs[2] = {
        { cross, 0x1000, false },                /* 2 KiB in A, 2 KiB in B */
        { SIZE_A - 0x100, 0x200, true },   /* 256 B in A, 256 B in B */
    };
    uint8_t *out = g_malloc(0x1000), in[0x200];
    uint32_t id, len;

    drv_setup(&d, 16, 0);
    drv_start(&d, NULL);
    drv_fill(&d, cross, 0x1000, 9);
    drv_read(&d, cross, out, 0x1000);
    drv_publish(&d, drv_add_direct(&d, bufs, 2));

    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, 1);
    g_assert_cmpuint(e->out_num, ==, 2);
    g_assert_cmpuint(e->in_num, ==, 2);
    g_assert(e->out_sg[0].iov_base ==
             guest_memory_gpa_to_host(d.mem, cross, 0x800));
    g_assert_cmpuint(e->out_sg[0].iov_len, ==, 0x800);
    g_assert(e->out_sg[1].iov_base ==
             guest_memory_gpa_to_host(d.mem, SIZE_A, 0x800));
    g_assert_cmpuint(e->out_sg[1].iov_len, ==, 0x800);
    /* Adjacent in GPA, not in our address space. */
    g_assert((uint8_t *)e->out_sg[0].iov_base + 0x800 !=
             e->out_sg[1].iov_base);
    g_assert_cmpmem(e->out_sg[0].iov_base, 0x800, out, 0x800);
    g_assert_cmpmem(e->out_sg[1].iov_base, 0x800, out + 0x800, 0x800);
    g_assert_cmpuint(e->in_sg[0].iov_len, ==, 0x100);
    g_assert_cmpuint(e->in_sg[1].iov_len, ==, 0x100);
    g_assert_cmpuint(e->in_bytes, ==, 0x200);

    g_assert_cmpuint(echo_element(e), ==, 0x200);
    virtqueue_push(d.vq, e, 0x200);
    g_assert_true(drv_get_used(&d, &id, &len));
    g_assert_cmpuint(len, ==, 0x200);
    drv_read(&d, SIZE_A - 0x100, in, sizeof(in));
    g_assert_cmpmem(in, sizeof(in), out, sizeof(in));
    g_free(out);
    g_free(e);
    drv_cleanup(&d);
}

static void test_segments(void)
{
    Drv d;
    VirtQueueElement *e = g_new0(VirtQueueElement, 1);
    VufSeg bufs[6];
    VufSeg *many = g_new0(VufSeg, VIRTQUEUE_MAX_SEGS);
    uint32_t id, len;

    drv_setup(&d, 16, F_INDIRECT_DESC);
    drv_start(&d, NULL);
    bufs[0] = (VufSeg) { d.data_gpa, 1, false };
    bufs[1] = (VufSeg) { d.data_gpa + 0x100, 100, false };
    bufs[2] = (VufSeg) { d.data_gpa + 0x200, 511, false };
    bufs[3] = (VufSeg) { d.data_gpa + 0x1000, 4096, true };
    bufs[4] = (VufSeg) { d.data_gpa + 0x3000, 0, true };  /* empty: no iovec */
    bufs[5] = (VufSeg) { d.data_gpa + 0x2000, 1, true };

    drv_publish(&d, drv_add_direct(&d, bufs, 6));
    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, 1);
    g_assert_cmpuint(e->out_num, ==, 3);
    g_assert_cmpuint(e->in_num, ==, 2);
    g_assert_cmpuint(e->out_sg[0].iov_len, ==, 1);
    g_assert_cmpuint(e->out_sg[1].iov_len, ==, 100);
    g_assert_cmpuint(e->out_sg[2].iov_len, ==, 511);
    g_assert_cmpuint(e->in_sg[0].iov_len, ==, 4096);
    g_assert_cmpuint(e->in_sg[1].iov_len, ==, 1);
    g_assert_cmpuint(e->in_bytes, ==, 4097);
    g_assert_cmpuint(e->in_last_len, ==, 1);
    virtqueue_push(d.vq, e, 4097);
    g_assert_true(drv_get_used(&d, &id, &len));
    g_assert_cmpuint(len, ==, 4097);

    /* Exactly VIRTQUEUE_MAX_SEGS iovecs, half out, half in. */
    for (unsigned i = 0; i < VIRTQUEUE_MAX_SEGS; i++) {
        many[i] = (VufSeg) { d.data_gpa + 16 * i, 8,
                             i >= VIRTQUEUE_MAX_SEGS / 2 };
    }
    drv_publish(&d, drv_add_indirect(&d, many,
                                     VIRTQUEUE_MAX_SEGS));
    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, 1);
    g_assert_cmpuint(e->out_num, ==, VIRTQUEUE_MAX_SEGS / 2);
    g_assert_cmpuint(e->in_num, ==, VIRTQUEUE_MAX_SEGS / 2);
    g_assert_cmpuint(e->in_bytes, ==, 8 * VIRTQUEUE_MAX_SEGS / 2);
    virtqueue_push(d.vq, e, 0);
    g_assert_true(drv_get_used(&d, &id, &len));

    /* A direct chain through all num descriptors is fine.  Written by
     * hand, to start at 3 and wrap around the end of the table (the
     * library has nothing in flight now). */
    g_assert_cmpuint(vufq_in_flight(d.q), ==, 0);
    for (unsigned i = 0; i < 16; i++) {
        drv_set_desc(&d, d.desc_gpa, (3 + i) % 16, d.data_gpa + 32 * i, 32,
                     (i >= 8 ? VRING_DESC_F_WRITE : 0) |
                     (i < 15 ? VRING_DESC_F_NEXT : 0), (4 + i) % 16);
    }
    drv_publish(&d, 3);
    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, 1);
    g_assert_cmpuint(e->head, ==, 3);
    g_assert_cmpuint(e->out_num, ==, 8);
    g_assert_cmpuint(e->in_num, ==, 8);
    virtqueue_push(d.vq, e, 256);
    g_assert_false(virtqueue_is_broken(d.vq));
    g_free(many);
    g_free(e);
    drv_cleanup(&d);
}

/* ------------------------------------------------------------------------ */
/* Interrupts and kicks                                                     */

/* Pop n elements and push them all back (one loop turn's worth). */
static void device_complete(Drv *d, unsigned n)
{
    VirtQueueElement *e = g_new0(VirtQueueElement, 1);

    for (unsigned i = 0; i < n; i++) {
        g_assert_cmpint(virtqueue_pop(d->vq, e), ==, 1);
        virtqueue_push(d->vq, e, 4);
    }
    g_free(e);
}

static void submit_n(Drv *d, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        drv_submit_one(d);
    }
}

/*
 * Submit n requests, complete them and let the loop run: the interrupts
 * (calls) the driver got for them.
 */
static unsigned round_trip(Drv *d, unsigned n)
{
    submit_n(d, n);
    device_complete(d, n);
    aio_poll(d->ctx, false);
    return drv_calls(d);
}

static void test_no_interrupt_flag(void)
{
    Drv d;
    VirtQueueStats st;

    drv_setup(&d, 16, 0);
    drv_start(&d, NULL);
    st16(avail_flags(&d), 1);                   /* NO_INTERRUPT */
    g_assert_cmpuint(round_trip(&d, 2), ==, 0);
    virtqueue_get_stats(d.vq, &st);
    g_assert_cmpuint(st.interrupts, ==, 0);
    g_assert_cmpuint(st.interrupts_suppressed, ==, 1);

    /* used_event means nothing without EVENT_IDX. */
    st16(avail_flags(&d), 0);
    st16(used_event(&d), 100);
    g_assert_cmpuint(round_trip(&d, 1), ==, 1);
    virtqueue_get_stats(d.vq, &st);
    g_assert_cmpuint(st.interrupts, ==, 1);
    drv_cleanup(&d);
}

/*
 * Completions pushed while the ring has no call eventfd (the front-end
 * replaces it while it masks interrupts) are not lost: the check is not
 * counted as signalled, and the new eventfd is signalled once.  Before,
 * with EVENT_IDX, the skipped interrupt was taken as sent and the driver
 * waited forever (a guest's SCSI scan hung at its first command).
 */
static void test_interrupt_without_call_fd(void)
{
    EventNotifier call2;
    uint64_t v;
    Drv d;

    drv_setup(&d, 16, F_EVENT_IDX);
    drv_start(&d, NULL);
    virtqueue_set_call_fd(d.vq, -1);
    st16(used_event(&d), 0);                    /* wants entry 0's interrupt */
    g_assert_cmpuint(round_trip(&d, 1), ==, 0);

    /* A new eventfd: signalled at once for what was pushed meanwhile. */
    g_assert_cmpint(event_notifier_init(&call2, false), ==, 0);
    virtqueue_set_call_fd(d.vq, dup(call2.fd));
    g_assert_cmpint(read(call2.fd, &v, sizeof(v)), ==, sizeof(v));
    g_assert_cmpuint(v, ==, 1);

    /* And the bookkeeping still works: the next completion the driver
     * asks for is signalled. */
    st16(used_event(&d), 1);
    submit_n(&d, 1);
    device_complete(&d, 1);
    aio_poll(d.ctx, false);
    g_assert_cmpint(read(call2.fd, &v, sizeof(v)), ==, sizeof(v));
    g_assert_cmpuint(v, ==, 1);
    event_notifier_cleanup(&call2);
    drv_cleanup(&d);
}

/*
 * A new call eventfd is signalled once as soon as it is set, before the
 * queue runs too (drivers may wait for an interrupt right after DRIVER_OK:
 * QEMU's vhost-user-blk qtest does).  Only the running queue's signals
 * count in the statistics.
 */
/* The counter of eventfd e, read (and so cleared); 0 if it was not set. */
static uint64_t efd_take(EventNotifier *e)
{
    uint64_t v;

    return read(e->fd, &v, sizeof(v)) == sizeof(v) ? v : 0;
}

static void test_new_call_fd(void)
{
    EventNotifier call2, call3;
    VirtQueueStats st;
    Drv d;

    drv_setup(&d, 16, F_EVENT_IDX);
    g_assert_cmpint(event_notifier_init(&call2, false), ==, 0);
    g_assert_cmpint(event_notifier_init(&call3, false), ==, 0);

    /* Not started: signalled at once, and only once. */
    virtqueue_set_call_fd(d.vq, dup(call2.fd));
    g_assert_cmpuint(efd_take(&call2), ==, 1);
    g_assert_cmpuint(efd_take(&call2), ==, 0);
    /* No fd: nothing to signal (and the old one is closed, not signalled). */
    virtqueue_set_call_fd(d.vq, -1);
    g_assert_cmpuint(efd_take(&call2), ==, 0);
    virtqueue_get_stats(d.vq, &st);
    g_assert_cmpuint(st.interrupts, ==, 0);

    /* The start itself sends nothing; the first completion does. */
    virtqueue_set_call_fd(d.vq, dup(call2.fd));
    g_assert_cmpuint(efd_take(&call2), ==, 1);
    drv_start(&d, NULL);
    aio_poll(d.ctx, false);
    g_assert_cmpuint(efd_take(&call2), ==, 0);
    st16(used_event(&d), 0);
    g_assert_cmpuint(round_trip(&d, 1), ==, 0);  /* not the library's fd */
    g_assert_cmpuint(efd_take(&call2), ==, 1);

    /* Running: signalled once in the home thread, and counted. */
    virtqueue_set_call_fd(d.vq, dup(call3.fd));
    g_assert_cmpuint(efd_take(&call3), ==, 1);
    aio_poll(d.ctx, false);
    g_assert_cmpuint(efd_take(&call3), ==, 0);
    g_assert_cmpuint(efd_take(&call2), ==, 0);
    virtqueue_get_stats(d.vq, &st);
    g_assert_cmpuint(st.interrupts, ==, 2);
    event_notifier_cleanup(&call2);
    event_notifier_cleanup(&call3);
    drv_cleanup(&d);
}

static void test_event_idx_interrupts(void)
{
    Drv d;
    VirtQueueStats st;

    drv_setup(&d, 16, F_EVENT_IDX);
    drv_start(&d, NULL);

    /* The first check after start has no history: it signals. */
    st16(used_event(&d), 0);
    g_assert_cmpuint(round_trip(&d, 1), ==, 1); /* used idx 1 */

    /* "Interrupt me once entry 2 is used", i.e. when used idx passes 2. */
    st16(used_event(&d), 2);
    g_assert_cmpuint(round_trip(&d, 1), ==, 0); /* used idx 2 */
    g_assert_cmpuint(round_trip(&d, 1), ==, 1); /* used idx 3 */

    /* Batches: the event must fall among the entries since the last check. */
    st16(used_event(&d), 10);
    g_assert_cmpuint(round_trip(&d, 3), ==, 0); /* 4, 5, 6 */
    g_assert_cmpuint(round_trip(&d, 5), ==, 1); /* 7 .. 11 */

    /* avail->flags is ignored with EVENT_IDX. */
    st16(avail_flags(&d), 1);
    st16(used_event(&d), 11);
    g_assert_cmpuint(round_trip(&d, 1), ==, 1); /* 12 */

    /* An event index behind everything: no interrupt. */
    st16(used_event(&d), 5);
    g_assert_cmpuint(round_trip(&d, 2), ==, 0); /* 13, 14 */

    virtqueue_get_stats(d.vq, &st);
    g_assert_cmpuint(st.interrupts, ==, 4);
    g_assert_cmpuint(st.interrupts_suppressed, ==, 3);
    drv_cleanup(&d);
}

static void test_avail_event(void)
{
    Drv d;
    VirtQueueElement *e = g_new0(VirtQueueElement, 1);

    drv_setup(&d, 16, F_EVENT_IDX);
    drv_set_base(&d, 5);
    st16(avail_event(&d), 1234);                /* stale, from someone else */
    drv_start(&d, NULL);
    g_assert_cmpuint(ld16(avail_event(&d)), ==, 5);
    /* The device never sets NO_NOTIFY with EVENT_IDX. */
    g_assert_cmpuint(ld16(used_flags(&d)), ==, 0);

    /* The first entry past avail_event kicks, the next ones do not. */
    g_assert_true(drv_publish(&d, drv_add_direct(&d, &(VufSeg){ d.data_gpa, 4,
                                                         true }, 1)));
    g_assert_false(drv_publish(&d, drv_add_direct(&d, &(VufSeg){ d.data_gpa, 4,
                                                          true }, 1)));
    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, 1);
    g_assert_cmpuint(ld16(avail_event(&d)), ==, 6);
    virtqueue_push(d.vq, e, 0);
    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, 1);
    g_assert_cmpuint(ld16(avail_event(&d)), ==, 7);
    virtqueue_push(d.vq, e, 0);
    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, 0);
    g_assert_cmpuint(ld16(avail_event(&d)), ==, 7);
    /* Caught up: the next entry kicks again. */
    g_assert_true(drv_publish(&d, drv_add_direct(&d, &(VufSeg){ d.data_gpa, 4,
                                                         true }, 1)));
    g_assert_cmpuint(drv_kicks(&d), ==, 2);
    g_free(e);
    drv_cleanup(&d);
}

static void test_one_signal_per_turn(void)
{
    Drv d;
    VirtQueueStats st;
    uint32_t id, len;
    unsigned used = 0;

    drv_setup(&d, 16, 0);
    drv_start(&d, echo_handler);
    submit_n(&d, 12);
    g_assert_cmpuint(drv_kicks(&d), ==, 12);          /* notifications on */
    g_assert_true(aio_poll(d.ctx, false));
    g_assert_cmpuint(atomic_load(&d.processed), ==, 12);
    g_assert_cmpuint(drv_calls(&d), ==, 1);     /* 12 pushes, 1 interrupt */
    while (drv_get_used(&d, &id, &len)) {
        used++;
    }
    g_assert_cmpuint(used, ==, 12);

    submit_n(&d, 5);
    aio_poll(d.ctx, false);
    g_assert_cmpuint(atomic_load(&d.processed), ==, 17);
    g_assert_cmpuint(drv_calls(&d), ==, 1);
    virtqueue_get_stats(d.vq, &st);
    g_assert_cmpuint(st.requests, ==, 17);
    g_assert_cmpuint(st.interrupts, ==, 2);
    g_assert_cmpuint(st.kicks, ==, 2);          /* the eventfd coalesces */
    drv_cleanup(&d);
}

static void test_kick_dispatch(void)
{
    Drv d;
    AioHandlerWindow w[4];
    VirtQueueStats st;
    uint32_t id, len;
    int n;
    bool named = false;

    drv_setup(&d, 16, 0);
    drv_start(&d, echo_handler);
    g_assert_cmpuint(atomic_load(&d.handled), ==, 1);  /* start-up check */
    g_assert_cmpuint(atomic_load(&d.processed), ==, 0);

    n = aio_context_get_handler_windows(d.ctx, w, G_N_ELEMENTS(w));
    for (int i = 0; i < MIN(n, 4); i++) {
        named |= strcmp(w[i].name, "vq0") == 0;
    }
    g_assert_true(named);

    drv_fill(&d, d.data_gpa, 8, 0x11);
    drv_publish(&d, drv_add_direct(&d, (VufSeg[]){
                                       { d.data_gpa, 8, false },
                                       { d.data_gpa + 0x100, 8, true } }, 2));
    g_assert_cmpuint(drv_kicks(&d), ==, 1);
    g_assert_true(aio_poll(d.ctx, true));
    g_assert_cmpuint(atomic_load(&d.handled), ==, 2);
    g_assert_cmpuint(atomic_load(&d.processed), ==, 1);
    g_assert_true(drv_get_used(&d, &id, &len));
    g_assert_cmpuint(len, ==, 8);
    g_assert_cmpuint(drv_calls(&d), ==, 1);
    virtqueue_get_stats(d.vq, &st);
    g_assert_cmpuint(st.kicks, ==, 1);
    g_assert_cmpuint(st.polled, ==, 0);

    /* A spurious kick just runs the handler, which finds nothing. */
    g_assert_cmpint(vufq_kick_always(d.q), ==, 1);
    aio_poll(d.ctx, true);
    g_assert_cmpuint(atomic_load(&d.handled), ==, 3);
    g_assert_cmpuint(atomic_load(&d.processed), ==, 1);
    aio_poll(d.ctx, false);
    g_assert_cmpuint(drv_calls(&d), ==, 0);
    drv_cleanup(&d);
}

/* Entries published before start (no kick will come) are still served. */
static void test_start_pending(void)
{
    Drv d;

    drv_setup(&d, 16, 0);
    st16(used_flags(&d), 1);             /* left over by a previous back-end */
    submit_n(&d, 3);
    g_assert_cmpuint(drv_kicks(&d), ==, 0);
    g_assert_cmpint(virtqueue_start(d.vq, d.mem, echo_handler, &d), ==, 0);
    g_assert_cmpuint(ld16(used_flags(&d)), ==, 0);
    while (aio_poll(d.ctx, false)) {
        /* the start-up BH, then the notify BH it scheduled */
    }
    g_assert_cmpuint(atomic_load(&d.processed), ==, 3);
    g_assert_cmpuint(drv_calls(&d), ==, 1);
    drv_cleanup(&d);
}

/* ------------------------------------------------------------------------ */
/* Polling                                                                  */

typedef struct PollRun {
    Drv *d;
    unsigned n;
    _Atomic unsigned unkicked;       /* entries published without a kick */
    _Atomic unsigned saw_no_notify;  /* NO_NOTIFY was set when publishing */
    _Atomic unsigned saw_stale;      /* avail_event was behind */
} PollRun;

static gpointer poll_producer(gpointer opaque)
{
    PollRun *run = opaque;
    Drv *d = run->d;
    VufSeg b = { d->data_gpa, 8, true };
    uint32_t id, len;

    for (unsigned i = 0; i < run->n; i++) {
        int64_t deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;

        /* One request at a time, like a guest at queue depth 1; the
         * previous one's descriptor comes back for this one. */
        while (atomic_load(&d->processed) < i) {
            g_assert_cmpint(g_get_monotonic_time(), <, deadline);
            sleep_ns(20000);
        }
        while (drv_get_used(d, &id, &len)) {
            /* harvested */
        }
        sleep_ns(NS_PER_MS);
        if (ld16(used_flags(d)) & 1) {
            atomic_fetch_add(&run->saw_no_notify, 1);
        }
        if (d->event_idx &&
            ld16(avail_event(d)) != ld16(avail_idx_field(d))) {
            atomic_fetch_add(&run->saw_stale, 1);
        }
        if (!drv_publish(d, drv_add_direct(d, &b, 1))) {
            atomic_fetch_add(&run->unkicked, 1);
        }
    }
    return NULL;
}

/*
 * A request added while the loop spins, right after it woke from a sleep
 * (the sleep left notifications on: avail_event at the next index, or no
 * NO_NOTIFY): the driver must not kick for it.  The loop spins 50 ms from
 * its first turn (poll-policy fixed); the driver adds one entry 5 ms in.
 */
typedef struct LatePublish {
    Drv *d;
    _Atomic bool kicked;
} LatePublish;

static gpointer late_publisher(gpointer opaque)
{
    LatePublish *lp = opaque;
    VufSeg b = { lp->d->data_gpa, 8, true };

    sleep_ns(5 * NS_PER_MS);
    atomic_store(&lp->kicked,
                 drv_publish(lp->d, drv_add_direct(lp->d, &b, 1)));
    return NULL;
}

static void run_first_after_sleep(bool event_idx)
{
    AioPollParams params = { .max_ns = 50 * NS_PER_MS };
    LatePublish lp;
    VirtQueueStats st;
    int64_t deadline;
    GThread *t;
    Drv d;

    drv_setup(&d, 16, event_idx ? F_EVENT_IDX : 0);
    lp.d = &d;
    atomic_store(&lp.kicked, false);
    aio_context_set_poll_policy(d.ctx, &aio_poll_policy_fixed);
    aio_context_set_poll_params(d.ctx, &params);
    drv_start(&d, echo_handler);
    /* Notifications on, as a sleep leaves them. */
    if (event_idx) {
        g_assert_cmpuint(ld16(avail_event(&d)), ==,
                         ld16(avail_idx_field(&d)));
    }
    g_assert_cmpuint(ld16(used_flags(&d)) & 1, ==, 0);
    t = g_thread_new("late-publisher", late_publisher, &lp);
    deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
    while (atomic_load(&d.processed) < 1) {
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
        aio_poll(d.ctx, true);
    }
    g_thread_join(t);
    virtqueue_get_stats(d.vq, &st);
    g_assert_false(atomic_load(&lp.kicked));
    g_assert_cmpuint(drv_kicks(&d), ==, 0);
    g_assert_cmpuint(st.polled, ==, 1);
    /* Polling ends with the queue: notifications back on. */
    g_assert_cmpuint(virtqueue_stop(d.vq), ==, 1);
    if (event_idx) {
        g_assert_cmpuint(ld16(avail_event(&d)), ==, 1);
    }
    g_assert_cmpuint(ld16(used_flags(&d)), ==, 0);
    drv_cleanup(&d);
}

static void test_poll_first_after_sleep(void)
{
    run_first_after_sleep(false);
}

static void test_poll_first_after_sleep_event_idx(void)
{
    run_first_after_sleep(true);
}

static void run_polled(bool event_idx)
{
    Drv d;
    PollRun run = { .d = &d, .n = 30 };
    /* Two events arriving after the window open it to max_ns. */
    AioPollParams params = { .max_ns = 500 * NS_PER_MS, .grow = 1000000 };
    int64_t deadline;
    VirtQueueStats st;
    GThread *t;

    drv_setup(&d, 16, event_idx ? F_EVENT_IDX : 0);
    aio_context_set_poll_params(d.ctx, &params);
    /* qemu-classic's rule opens the window on the first waits; the
     * predictive policy would rightly never spin for a request that comes
     * 1 ms after the last. */
    aio_context_set_poll_policy(d.ctx, &aio_poll_policy_qemu_classic);
    drv_start(&d, echo_handler);
    t = g_thread_new("producer", poll_producer, &run);
    deadline = g_get_monotonic_time() + 20 * G_USEC_PER_SEC;
    while (atomic_load(&d.processed) < run.n) {
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
        aio_poll(d.ctx, true);
    }
    g_thread_join(t);

    virtqueue_get_stats(d.vq, &st);
    g_test_message("%s: %u published, %" G_GUINT64_FORMAT " kicks, %u "
                   "unkicked, %" G_GUINT64_FORMAT " found by polling",
                   event_idx ? "event-idx" : "flags", run.n, drv_kicks(&d),
                   atomic_load(&run.unkicked), st.polled);
    g_assert_cmpuint(st.requests, ==, run.n);
    g_assert_cmpuint(st.polled, >=, 1);
    g_assert_cmpuint(atomic_load(&run.unkicked), >=, 1);
    g_assert_cmpuint(drv_kicks(&d) + atomic_load(&run.unkicked), ==, run.n);
    g_assert_cmpuint(st.kicks, <=, drv_kicks(&d));
    if (event_idx) {
        /* Polling stopped advancing avail_event; flags stay 0. */
        g_assert_cmpuint(atomic_load(&run.saw_stale), >=, 1);
        g_assert_cmpuint(atomic_load(&run.saw_no_notify), ==, 0);
    } else {
        /* io_poll_begin set NO_NOTIFY while the loop was spinning. */
        g_assert_cmpuint(atomic_load(&run.saw_no_notify), >=, 1);
    }

    /* Removing the handler ends polling: notifications back on. */
    g_assert_cmpuint(virtqueue_stop(d.vq), ==, run.n);
    g_assert_cmpuint(ld16(used_flags(&d)), ==, 0);
    if (event_idx) {
        g_assert_cmpuint(ld16(avail_event(&d)), ==, run.n);
    }
    drv_cleanup(&d);
}

static void test_poll_dispatch(void)
{
    run_polled(false);
}

static void test_poll_dispatch_event_idx(void)
{
    run_polled(true);
}

/* ------------------------------------------------------------------------ */
/* Stop, restart, memory changes                                            */

static void test_stop_restart(void)
{
    Drv d;
    VirtQueueElement *e = g_new0(VirtQueueElement, 1);
    uint32_t id = 0, len = 0;

    drv_setup(&d, 16, 0);
    drv_start(&d, NULL);
    submit_n(&d, 3);
    device_complete(&d, 3);
    /* Stopping flushes the pending interrupt of this turn's pushes. */
    g_assert_cmpuint(virtqueue_stop(d.vq), ==, 3);
    g_assert_false(virtqueue_is_started(d.vq));
    g_assert_cmpuint(drv_calls(&d), ==, 1);
    g_assert_cmpuint(virtqueue_stop(d.vq), ==, 3);     /* idempotent */

    /* While stopped, nothing is popped or dispatched. */
    submit_n(&d, 1);
    aio_poll(d.ctx, false);
    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, 0);

    /* Restart from the returned base. */
    virtqueue_set_base(d.vq, 3);
    drv_start(&d, NULL);
    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, 1);
    g_assert_cmpuint(virtqueue_inflight(d.vq), ==, 1);

    /* Stop, then drain: an element pushed after stop still reaches the
     * used ring, and the driver gets its interrupt at once. */
    g_assert_cmpuint(virtqueue_stop(d.vq), ==, 4);
    g_assert_cmpuint(drv_calls(&d), ==, 0);
    virtqueue_push(d.vq, e, 2);
    g_assert_cmpuint(virtqueue_inflight(d.vq), ==, 0);
    g_assert_cmpuint(drv_calls(&d), ==, 1);
    while (drv_get_used(&d, &id, &len)) {
        /* the three from before, then this one */
    }
    g_assert_cmpuint(id, ==, e->head);
    g_assert_cmpuint(len, ==, 2);
    aio_poll(d.ctx, false);
    g_assert_cmpuint(drv_calls(&d), ==, 0);

    /* Same with NO_INTERRUPT: the driver's wish still counts. */
    drv_start(&d, NULL);
    st16(avail_flags(&d), 1);
    submit_n(&d, 1);
    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, 1);
    g_assert_cmpuint(virtqueue_stop(d.vq), ==, 5);
    virtqueue_push(d.vq, e, 0);
    g_assert_cmpuint(drv_calls(&d), ==, 0);
    g_free(e);
    drv_cleanup(&d);
}

static bool page_is_mapped(const void *p)
{
    long page = sysconf(_SC_PAGESIZE);
    void *base = (void *)((uintptr_t)p & ~(uintptr_t)(page - 1));
    unsigned char vec;

    return mincore(base, page, &vec) == 0;
}

static void test_set_memory(void)
{
    Drv d;
    VirtQueueElement *e = g_new0(VirtQueueElement, 1);
    GuestMemory *next, *only_b;
    uint8_t *old_in;
    uint32_t id, len;

    drv_setup(&d, 16, 0);
    drv_start(&d, NULL);
    submit_n(&d, 1);
    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, 1);
    old_in = e->in_sg[0].iov_base;

    /* A new table (fresh mappings of the same memory); we drop the old
     * one, but the element in flight keeps it mapped. */
    next = drv_build_table(&d, true, true);
    g_assert_cmpint(virtqueue_set_memory(d.vq, next), ==, 0);
    guest_memory_unref(d.mem);
    d.mem = next;
    g_assert(page_is_mapped(old_in));
    memset(old_in, 0x77, 16);
    virtqueue_push(d.vq, e, 16);
    g_assert_false(page_is_mapped(old_in));    /* released with the push */
    g_assert_true(drv_get_used(&d, &id, &len));

    /* The rings now come from the new table. */
    submit_n(&d, 1);
    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, 1);
    g_assert(e->in_sg[0].iov_base ==
             guest_memory_gpa_to_host(next, d.data_gpa + 0x100, 16));
    virtqueue_push(d.vq, e, 1);
    g_assert_true(drv_get_used(&d, &id, &len));
    g_assert_cmpuint(len, ==, 1);

    /* A table without the rings breaks the queue; stop still works. */
    only_b = drv_build_table(&d, false, true);
    g_test_expect_message(NULL, G_LOG_LEVEL_WARNING,
                          "virtqueue 0 is broken*not inside the new guest "
                          "memory table*");
    g_assert_cmpint(virtqueue_set_memory(d.vq, only_b), ==, -EFAULT);
    g_test_assert_expected_messages();
    g_assert_true(virtqueue_is_broken(d.vq));
    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, -EIO);
    guest_memory_unref(only_b);
    g_assert_cmpuint(virtqueue_stop(d.vq), ==, 2);
    g_free(e);
    drv_cleanup(&d);
}

/* ------------------------------------------------------------------------ */
/* Malformed rings                                                          */

/* The next pop must break the queue with one warning containing why. */
static void expect_broken(Drv *d, const char *why)
{
    VirtQueueElement *e = g_new0(VirtQueueElement, 1);
    char *pattern = g_strdup_printf("virtqueue 0 is broken*%s*", why);
    unsigned handled;
    VirtQueueStats st;

    g_test_expect_message(NULL, G_LOG_LEVEL_WARNING, pattern);
    g_assert_cmpint(virtqueue_pop(d->vq, e), ==, -EIO);
    g_test_assert_expected_messages();
    g_assert_true(virtqueue_is_broken(d->vq));
    g_assert_true(event_notifier_test_and_clear(&d->err));
    g_assert_cmpuint(virtqueue_inflight(d->vq), ==, 0);

    /* Once only; from now on -EIO, and the handler no longer runs. */
    g_assert_cmpint(virtqueue_pop(d->vq, e), ==, -EIO);
    handled = atomic_load(&d->handled);
    g_assert_cmpint(vufq_kick_always(d->q), ==, 1);
    aio_poll(d->ctx, false);
    g_assert_cmpuint(atomic_load(&d->handled), ==, handled);
    g_assert_false(event_notifier_test_and_clear(&d->err));
    virtqueue_get_stats(d->vq, &st);
    g_assert_cmpuint(st.requests, ==, 0);

    g_assert_cmpuint(virtqueue_stop(d->vq), ==, 0);
    g_free(pattern);
    g_free(e);
}

/*
 * A device gives up an element it cannot answer (virtqueue_fail_element()):
 * the queue breaks as for a malformed chain, the element never reaches the
 * used ring, and elements popped before it may still be pushed.
 */
static void test_fail_element(void)
{
    VirtQueueElement *e = g_new0(VirtQueueElement, 2);
    VufSeg bufs[3];
    uint32_t id, len;
    Drv d;

    drv_setup(&d, 16, 0);
    drv_start(&d, NULL);
    submit_n(&d, 1);
    g_assert_cmpint(virtqueue_pop(d.vq, &e[0]), ==, 1);
    g_assert_cmpuint(e[0].in_last_len, >, 0);

    /* The last device-writable descriptor is empty: in_last_len says so. */
    bufs[0] = (VufSeg) { d.data_gpa, 16, false };
    bufs[1] = (VufSeg) { d.data_gpa + 0x100, 512, true };
    bufs[2] = (VufSeg) { d.data_gpa + 0x400, 0, true };
    drv_publish(&d, drv_add_direct(&d, bufs, 3));
    g_assert_cmpint(virtqueue_pop(d.vq, &e[1]), ==, 1);
    g_assert_cmpuint(e[1].in_num, ==, 1);
    g_assert_cmpuint(e[1].in_bytes, ==, 512);
    g_assert_cmpuint(e[1].in_last_len, ==, 0);
    g_assert_cmpuint(virtqueue_inflight(d.vq), ==, 2);

    g_test_expect_message(NULL, G_LOG_LEVEL_WARNING,
                          "virtqueue 0 is broken*no room for head 1*");
    virtqueue_fail_element(d.vq, &e[1], "no room for head %u", e[1].head);
    g_test_assert_expected_messages();
    g_assert_true(virtqueue_is_broken(d.vq));
    g_assert_true(event_notifier_test_and_clear(&d.err));
    g_assert_cmpuint(virtqueue_inflight(d.vq), ==, 1);
    g_assert_cmpint(virtqueue_pop(d.vq, &e[1]), ==, -EIO);
    aio_poll(d.ctx, false);
    g_assert_false(drv_get_used(&d, &id, &len));

    /* The element popped before it still completes. */
    virtqueue_push(d.vq, &e[0], 0);
    g_assert_true(drv_get_used(&d, &id, &len));
    g_assert_cmpuint(id, ==, e[0].head);
    g_assert_false(drv_get_used(&d, &id, &len));
    g_assert_cmpuint(virtqueue_inflight(d.vq), ==, 0);
    g_assert_false(event_notifier_test_and_clear(&d.err));
    /* Stopping works and reports both pops. */
    g_assert_cmpuint(virtqueue_stop(d.vq), ==, 2);
    g_free(e);
    drv_cleanup(&d);
}

static void broken_setup(Drv *d, uint64_t features)
{
    drv_setup(d, 16, features);
    drv_start(d, echo_handler);
}

/*
 * The malformed chains written by hand.  A descriptor goes into the ring's
 * table or an indirect one (in), at index idx; its address is an area's
 * address plus off.
 */
typedef enum Area {
    AT_ABS,                     /* no area: the address is off */
    AT_RING,                    /* the ring's descriptor table */
    AT_DATA,                    /* the data buffers */
    AT_TABLE,                   /* the indirect table */
    AT_TABLE2,                  /* a second indirect table, after it */
} Area;

typedef struct BadDesc {
    Area in;
    unsigned idx;
    Area area;
    uint64_t off;
    uint32_t len;
    uint16_t flags;
    uint16_t next;
} BadDesc;

/*
 * One malformed ring: the features, the descriptors, the head made
 * available, and what the warning that breaks the queue must say.
 * Consecutive rows with the same path are one test.
 */
typedef struct Malformed {
    const char *path;
    uint64_t features;
    unsigned head;
    const char *why;
    unsigned ndesc;
    BadDesc desc[5];
} Malformed;

static const Malformed malformed[] = {
    { "/virtqueue/malformed/head", 0, 16,
      "names descriptor 16 of a ring of 16", 0, { { 0 } } },
    { "/virtqueue/malformed/loop", 0, 0, "longer than 16 descriptors", 2, {
        { AT_RING, 0, AT_DATA, 0, 8, VRING_DESC_F_NEXT, 1 },
        { AT_RING, 1, AT_DATA, 0, 8, VRING_DESC_F_NEXT, 0 } } },
    { "/virtqueue/malformed/self-loop", 0, 7, "longer than 16 descriptors", 1,
      { { AT_RING, 7, AT_DATA, 0, 8,
          VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 7 } } },
    { "/virtqueue/malformed/indirect-loop", F_INDIRECT_DESC, 0,
      "longer than 4 descriptors", 5, {
        { AT_TABLE, 0, AT_DATA, 0, 8, VRING_DESC_F_NEXT, 1 },
        { AT_TABLE, 1, AT_DATA, 0, 8, VRING_DESC_F_NEXT, 2 },
        { AT_TABLE, 2, AT_DATA, 0, 8, VRING_DESC_F_NEXT, 3 },
        { AT_TABLE, 3, AT_DATA, 0, 8, VRING_DESC_F_NEXT, 0 },
        { AT_RING, 0, AT_TABLE, 0, 64, VRING_DESC_F_INDIRECT, 0 } } },
    { "/virtqueue/malformed/next", 0, 0,
      "links to descriptor 16 of a table of 16", 1,
      { { AT_RING, 0, AT_DATA, 0, 8, VRING_DESC_F_NEXT, 16 } } },
    /* Starts in region B, runs past its end. */
    { "/virtqueue/malformed/addr-outside", 0, 0, "outside guest memory", 1,
      { { AT_RING, 0, AT_ABS, MEM_SIZE - 8, 16, 0, 0 } } },
    { "/virtqueue/malformed/addr-overflow", 0, 0, "outside guest memory", 2, {
        { AT_RING, 0, AT_DATA, 0, 8, VRING_DESC_F_NEXT, 1 },
        { AT_RING, 1, AT_ABS, UINT64_MAX - 7, 16, VRING_DESC_F_WRITE, 0 } } },
    { "/virtqueue/malformed/in-before-out", 0, 0,
      "device-readable buffer after a device-writable", 2, {
        { AT_RING, 0, AT_DATA, 0, 8,
          VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 1 },
        { AT_RING, 1, AT_DATA, 8, 8, 0, 0 } } },
    { "/virtqueue/malformed/nested-indirect", F_INDIRECT_DESC, 0,
      "nests an indirect table", 4, {
        { AT_TABLE, 0, AT_DATA, 0, 8, VRING_DESC_F_NEXT, 1 },
        { AT_TABLE, 1, AT_TABLE2, 0, 16, VRING_DESC_F_INDIRECT, 0 },
        { AT_TABLE2, 0, AT_DATA, 0, 8, VRING_DESC_F_WRITE, 0 },
        { AT_RING, 0, AT_TABLE, 0, 32, VRING_DESC_F_INDIRECT, 0 } } },
    /* The library would not build this one. */
    { "/virtqueue/malformed/indirect-no-feature", 0, 0,
      "VIRTIO_RING_F_INDIRECT_DESC was not negotiated", 2, {
        { AT_TABLE, 0, AT_DATA, 0, 8, VRING_DESC_F_WRITE, 0 },
        { AT_RING, 0, AT_TABLE, 0, 16, VRING_DESC_F_INDIRECT, 0 } } },
    { "/virtqueue/malformed/indirect-len", F_INDIRECT_DESC, 0,
      "indirect table of 24 bytes", 1,
      { { AT_RING, 0, AT_TABLE, 0, 24, VRING_DESC_F_INDIRECT, 0 } } },
    { "/virtqueue/malformed/indirect-len", F_INDIRECT_DESC, 0,
      "indirect table of 0 bytes", 1,
      { { AT_RING, 0, AT_TABLE, 0, 0, VRING_DESC_F_INDIRECT, 0 } } },
    { "/virtqueue/malformed/indirect-len", F_INDIRECT_DESC, 0,
      "indirect table of 17 bytes", 1,
      { { AT_RING, 0, AT_TABLE, 0, 17, VRING_DESC_F_INDIRECT, 0 } } },
    { "/virtqueue/malformed/indirect-len", F_INDIRECT_DESC, 0,
      "indirect table of 16400 bytes", 1,
      { { AT_RING, 0, AT_TABLE, 0, 16 * (VIRTQUEUE_MAX_SIZE + 1),
          VRING_DESC_F_INDIRECT, 0 } } },
    { "/virtqueue/malformed/indirect-next", F_INDIRECT_DESC, 0,
      "indirect descriptor with VRING_DESC_F_NEXT", 3, {
        { AT_TABLE, 0, AT_DATA, 0, 8, VRING_DESC_F_WRITE, 0 },
        { AT_RING, 0, AT_TABLE, 0, 16,
          VRING_DESC_F_INDIRECT | VRING_DESC_F_NEXT, 1 },
        { AT_RING, 1, AT_DATA, 0, 8, VRING_DESC_F_WRITE, 0 } } },
    /* Past the end, across the A/B boundary, wrapping. */
    { "/virtqueue/malformed/indirect-outside", F_INDIRECT_DESC, 0,
      "indirect table outside guest memory or across regions", 1,
      { { AT_RING, 0, AT_ABS, MEM_SIZE, 32, VRING_DESC_F_INDIRECT, 0 } } },
    { "/virtqueue/malformed/indirect-outside", F_INDIRECT_DESC, 0,
      "indirect table outside guest memory or across regions", 1,
      { { AT_RING, 0, AT_ABS, SIZE_A - 16, 32, VRING_DESC_F_INDIRECT, 0 } } },
    { "/virtqueue/malformed/indirect-outside", F_INDIRECT_DESC, 0,
      "indirect table outside guest memory or across regions", 1,
      { { AT_RING, 0, AT_ABS, UINT64_MAX - 15, 32,
          VRING_DESC_F_INDIRECT, 0 } } },
};

static uint64_t area_gpa(Drv *d, Area a)
{
    switch (a) {
    case AT_RING:
        return d->desc_gpa;
    case AT_DATA:
        return d->data_gpa;
    case AT_TABLE:
        return d->table_gpa;
    case AT_TABLE2:
        return d->table_gpa + 0x100;
    default:
        return 0;
    }
}

static void run_malformed(const Malformed *m)
{
    Drv d;

    broken_setup(&d, m->features);
    for (unsigned i = 0; i < m->ndesc; i++) {
        const BadDesc *b = &m->desc[i];

        drv_set_desc(&d, area_gpa(&d, b->in), b->idx,
                     area_gpa(&d, b->area) + b->off, b->len, b->flags,
                     b->next);
    }
    drv_publish(&d, m->head);
    expect_broken(&d, m->why);
    drv_cleanup(&d);
}

/* The row arg of malformed[] and those after it with the same path. */
static void test_malformed(const void *arg)
{
    const Malformed *first = arg;
    const Malformed *end = malformed + G_N_ELEMENTS(malformed);

    for (const Malformed *m = first;
         m < end && !strcmp(m->path, first->path); m++) {
        run_malformed(m);
    }
}

static void add_malformed_tests(void)
{
    static TestCase tests[G_N_ELEMENTS(malformed)];
    size_t n = 0;

    for (size_t i = 0; i < G_N_ELEMENTS(malformed); i++) {
        if (i == 0 || strcmp(malformed[i].path, malformed[i - 1].path)) {
            tests[n++] = (TestCase) {
                .path = malformed[i].path,
                .fn_data = test_malformed,
                .data = &malformed[i],
            };
        }
    }
    test_add_with_watchdog(tests, n, 50);
}

static void test_bad_avail_jump(void)
{
    Drv d;

    broken_setup(&d, 0);
    st16(avail_idx_field(&d), 17);
    expect_broken(&d, "avail index jumped from 0 to 17");
    drv_cleanup(&d);
}

static void test_bad_too_many_segments(void)
{
    VufSeg *b = g_new0(VufSeg, VIRTQUEUE_MAX_SEGS + 1);

    /* All out, and split between out and in: the budget is shared. */
    for (unsigned split = 0; split < 2; split++) {
        Drv d;

        broken_setup(&d, F_INDIRECT_DESC);
        for (unsigned i = 0; i <= VIRTQUEUE_MAX_SEGS; i++) {
            b[i] = (VufSeg) { d.data_gpa + 8 * i, 1, split && i >= 64 };
        }
        drv_publish(&d, drv_add_indirect(&d, b,
                                         VIRTQUEUE_MAX_SEGS + 1));
        expect_broken(&d, "needs more than 128 segments");
        drv_cleanup(&d);
    }

    /* A buffer crossing a region boundary needs two iovecs. */
    {
        Drv d;

        broken_setup(&d, F_INDIRECT_DESC);
        for (unsigned i = 0; i < VIRTQUEUE_MAX_SEGS; i++) {
            b[i] = (VufSeg) { d.data_gpa + 8 * i, 1, false };
        }
        b[VIRTQUEUE_MAX_SEGS - 1] = (VufSeg) { SIZE_A - 1, 2, true };
        drv_publish(&d, drv_add_indirect(&d, b,
                                         VIRTQUEUE_MAX_SEGS));
        expect_broken(&d, "needs more than 128 segments");
        drv_cleanup(&d);
    }
    g_free(b);
}

/* More than 4 GiB in one chain (sparse memory: nothing is touched). */
static void test_bad_total_length(void)
{
    Drv d;
    uint64_t big = 2 * 1024 * MiB + MiB;

    drv_setup_sized(&d, 16, 0, big, big + 64 * KiB);
    drv_start(&d, echo_handler);
    drv_set_desc(&d, d.desc_gpa, 0, MiB, 0x80000000u, VRING_DESC_F_NEXT, 1);
    drv_set_desc(&d, d.desc_gpa, 1, MiB, 0x80000000u, 0, 0);
    drv_publish(&d, 0);
    expect_broken(&d, "more than 4 GiB");
    drv_cleanup(&d);
}

/* ------------------------------------------------------------------------ */
/* Inflight tracking                                                        */

/* A region of one queue of qs entries, as SET_INFLIGHT_FD maps it. */
static VhostInflight *inflight_region_new(unsigned qs)
{
    uint64_t size = vhost_inflight_region_bytes(1, qs);
    Error *err = NULL;
    int fd = vhost_inflight_memfd_new(size, &err);
    VhostInflight *r;

    g_assert_no_error(err);
    r = vhost_inflight_map(fd, size, 0, 1, qs, 1, &err);
    g_assert_no_error(err);
    close(fd);
    return r;
}

/*
 * The back-end dies: its VirtQueue goes without pushing what it popped,
 * and a new one takes over the same rings and region, with
 * SET_VRING_BASE = used->idx as QEMU sends after a crash.  Returns what
 * the new queue's start returned.
 */
static int drv_crash_restart(Drv *d, uint64_t features, VhostInflight *region)
{
    int r;

    virtqueue_stop(d->vq);
    virtqueue_free(d->vq);
    d->vq = virtqueue_new(0);
    local_vq_configure(d->vq, d->q, QVA_A, features, d->ctx);
    virtqueue_set_err_fd(d->vq, dup(d->err.fd));
    virtqueue_set_base(d->vq, ld16(used_idx_field(d)));
    virtqueue_set_inflight(d->vq, region, 0);
    r = virtqueue_start(d->vq, d->mem, NULL, d);
    while (aio_poll(d->ctx, false)) {
        /* the start-up BH */
    }
    return r;
}

/* Pop one element; it must be head. */
static void pop_expect(Drv *d, VirtQueueElement *e, uint16_t head)
{
    g_assert_cmpint(virtqueue_pop(d->vq, e), ==, 1);
    g_assert_cmpuint(e->head, ==, head);
    g_assert_cmpuint(e->in_bytes, ==, 16);
}

/* The driver reads exactly the ids want[0..n) from the used ring. */
static void used_expect(Drv *d, const uint16_t *want, unsigned n)
{
    uint32_t id, len;

    for (unsigned i = 0; i < n; i++) {
        g_assert_true(drv_get_used(d, &id, &len));
        g_assert_cmpuint(id, ==, want[i]);
    }
    g_assert_false(drv_get_used(d, &id, &len));
}

/*
 * Pop 6, push 1, 3 and 4 out of order, die.  The new queue resubmits 0,
 * 2 and 5 in that order, then takes new requests from the avail ring,
 * and nothing is answered twice; from used index 0 and across the wrap.
 * A push cut between used->idx and clearing its flag (rolled back by
 * hand) is not resubmitted.
 */
static void test_inflight_resubmit(void)
{
    static const uint16_t bases[] = { 0, 65533 };

    for (unsigned b = 0; b < G_N_ELEMENTS(bases); b++) {
        VhostInflight *region = inflight_region_new(16);
        VirtQueueElement *e = g_new0(VirtQueueElement, 6);
        VhostInflightQueue *q = vhost_inflight_get_queue(region, 0);
        uint16_t h[8];
        Drv d;

        drv_setup(&d, 16, F_EVENT_IDX);
        drv_set_base(&d, bases[b]);
        virtqueue_set_inflight(d.vq, region, 0);
        drv_start(&d, NULL);
        g_assert_cmpuint(virtqueue_resubmitted(d.vq), ==, 0);
        g_assert_cmpuint(q->hdr.version, ==, 1);
        for (unsigned i = 0; i < 6; i++) {
            h[i] = drv_submit_one(&d);
            pop_expect(&d, &e[i], h[i]);
        }
        virtqueue_push(d.vq, &e[1], 1);
        virtqueue_push(d.vq, &e[3], 3);
        virtqueue_push(d.vq, &e[4], 4);
        used_expect(&d, (uint16_t[]){ h[1], h[3], h[4] }, 3);
        /* The last push stopped after used->idx: flag and header as
         * before it. */
        q->desc[h[4]].inflight = 1;
        q->hdr.used_idx -= 1;

        g_assert_cmpint(drv_crash_restart(&d, F_EVENT_IDX, region), ==, 0);
        g_assert_cmpuint(virtqueue_resubmitted(d.vq), ==, 3);
        pop_expect(&d, &e[0], h[0]);
        pop_expect(&d, &e[2], h[2]);
        pop_expect(&d, &e[5], h[5]);
        g_assert_cmpint(virtqueue_pop(d.vq, &e[1]), ==, 0);
        h[6] = drv_submit_one(&d);
        pop_expect(&d, &e[1], h[6]);
        virtqueue_push(d.vq, &e[2], 2);
        /* A second crash: 0, 5 and the new one, still oldest first. */
        g_assert_cmpint(drv_crash_restart(&d, F_EVENT_IDX, region), ==, 0);
        g_assert_cmpuint(virtqueue_resubmitted(d.vq), ==, 3);
        pop_expect(&d, &e[0], h[0]);
        pop_expect(&d, &e[5], h[5]);
        pop_expect(&d, &e[1], h[6]);
        virtqueue_push(d.vq, &e[5], 5);
        virtqueue_push(d.vq, &e[0], 0);
        virtqueue_push(d.vq, &e[1], 6);
        used_expect(&d, (uint16_t[]){ h[2], h[5], h[0], h[6] }, 4);
        g_assert_cmpuint(ld16(used_idx_field(&d)), ==,
                         (uint16_t)(bases[b] + 7));
        g_assert_cmpuint(virtqueue_stop(d.vq), ==, (uint16_t)(bases[b] + 7));
        for (unsigned i = 0; i < 16; i++) {
            g_assert_cmpuint(q->desc[i].inflight, ==, 0);
        }
        g_free(e);
        drv_cleanup(&d);
        shared_mapping_unref(region);
    }
}

/* A region with fewer entries than the ring, or hostile contents, breaks
 * the queue at start with the reason. */
static void test_inflight_bad_region(void)
{
    VhostInflight *small = inflight_region_new(8);
    VhostInflight *region = inflight_region_new(16);
    Drv d;

    drv_setup(&d, 16, 0);
    /* A region for rings of 8, fresh or initialised for 8: no room for a
     * ring of 16. */
    virtqueue_set_inflight(d.vq, small, 0);
    g_test_expect_message(NULL, G_LOG_LEVEL_WARNING,
                          "virtqueue 0 is broken*inflight region for rings "
                          "of 8 descriptors: the ring has 16*");
    g_assert_cmpint(virtqueue_start(d.vq, d.mem, NULL, &d), ==, -EPROTO);
    g_test_assert_expected_messages();
    g_assert_true(virtqueue_is_broken(d.vq));
    g_assert_false(virtqueue_is_started(d.vq));
    vhost_inflight_get_queue(small, 0)->hdr.version = 1;
    vhost_inflight_get_queue(small, 0)->hdr.desc_num = 8;
    g_test_expect_message(NULL, G_LOG_LEVEL_WARNING,
                          "virtqueue 0 is broken*the ring has 16*");
    g_assert_cmpint(drv_crash_restart(&d, 0, small), ==, -EPROTO);
    g_test_assert_expected_messages();

    vhost_inflight_get_queue(region, 0)->hdr.version = 7;
    g_test_expect_message(NULL, G_LOG_LEVEL_WARNING,
                          "virtqueue 0 is broken*version 7*");
    g_assert_cmpint(drv_crash_restart(&d, 0, region), ==, -EPROTO);
    g_test_assert_expected_messages();

    /* Without a region the same rings start. */
    g_assert_cmpint(drv_crash_restart(&d, 0, NULL), ==, 0);
    g_assert_false(virtqueue_is_broken(d.vq));
    drv_cleanup(&d);
    shared_mapping_unref(small);
    shared_mapping_unref(region);
}

/* A resubmitted chain is walked and checked like a new one. */
static void test_inflight_resubmit_checked(void)
{
    VhostInflight *region = inflight_region_new(16);
    VirtQueueElement *e = g_new0(VirtQueueElement, 1);
    uint16_t head;
    Drv d;

    drv_setup(&d, 16, 0);
    virtqueue_set_inflight(d.vq, region, 0);
    drv_start(&d, NULL);
    head = drv_submit_one(&d);
    pop_expect(&d, e, head);
    g_assert_cmpint(drv_crash_restart(&d, 0, region), ==, 0);
    g_assert_cmpuint(virtqueue_resubmitted(d.vq), ==, 1);
    /* The guest rewrote the descriptor meanwhile: now outside memory. */
    drv_set_desc(&d, d.desc_gpa, head, MEM_SIZE + 0x1000, 16,
                 VRING_DESC_F_WRITE, 0);
    g_test_expect_message(NULL, G_LOG_LEVEL_WARNING,
                          "virtqueue 0 is broken*outside guest memory*");
    g_assert_cmpint(virtqueue_pop(d.vq, e), ==, -EIO);
    g_test_assert_expected_messages();
    g_assert_cmpuint(virtqueue_inflight(d.vq), ==, 0);
    g_free(e);
    drv_cleanup(&d);
    shared_mapping_unref(region);
}

/* ------------------------------------------------------------------------ */
/* Dirty logging                                                            */

/* A dirty log for the whole of the test's guest memory, and its fd. */
typedef struct TestLog {
    int fd;
    VhostLog *log;
    uint64_t bytes;
} TestLog;

static void test_log_init(TestLog *l, Drv *d)
{
    Error *err = NULL;

    l->bytes = vhost_log_bytes_for_memory(d->mem);
    l->fd = memfd_create("test-virtqueue-log", MFD_CLOEXEC);
    g_assert_cmpint(l->fd, >=, 0);
    g_assert_cmpint(ftruncate(l->fd, (off_t)l->bytes), ==, 0);
    l->log = vhost_log_map(l->fd, l->bytes, 0, d->mem, &err);
    g_assert_no_error(err);
}

static void test_log_cleanup(TestLog *l)
{
    shared_mapping_unref(l->log);
    close(l->fd);
}

/* What the front-end does between two passes: read and clear. */
static void test_log_clear(TestLog *l)
{
    g_autofree uint8_t *zero = g_malloc0(l->bytes);

    g_assert_cmpint(pwrite(l->fd, zero, l->bytes, 0), ==, (ssize_t)l->bytes);
}

/*
 * The log must mark exactly the pages of ranges[0..n) (gpa, len pairs);
 * each page wrongly marked or not marked is named.
 */
static void test_log_expect(TestLog *l, const uint64_t (*ranges)[2],
                            unsigned n)
{
    g_autofree uint8_t *got = g_malloc(l->bytes);
    g_autofree uint8_t *want = g_malloc0(l->bytes);
    bool ok = true;

    for (unsigned i = 0; i < n; i++) {
        for (uint64_t p = ranges[i][0] / VHOST_LOG_PAGE;
             p <= (ranges[i][0] + ranges[i][1] - 1) / VHOST_LOG_PAGE; p++) {
            want[p / 8] |= 1u << (p % 8);
        }
    }
    g_assert_cmpint(pread(l->fd, got, l->bytes, 0), ==, (ssize_t)l->bytes);
    for (uint64_t p = 0; p < l->bytes * 8; p++) {
        bool g = got[p / 8] & (1u << (p % 8)), w = want[p / 8] & (1u << (p % 8));

        if (g != w) {
            g_test_message("page %" G_GUINT64_FORMAT " (GPA 0x%"
                           G_GINT64_MODIFIER "x) is %s", p,
                           p * VHOST_LOG_PAGE, g ? "marked" : "not marked");
            ok = false;
        }
    }
    g_assert_true(ok);
}

typedef struct LogCase {
    const char *path;
    bool popped_before;      /* logging starts with the element in flight */
    bool status_last;        /* virtqueue_push_status_last() */
    bool no_used_flag;       /* the ring's addresses lack VHOST_VRING_F_LOG */
} LogCase;

static const LogCase log_cases[] = {
    { "/virtqueue/log/in-and-used" },
    { "/virtqueue/log/status-last", .status_last = true },
    { "/virtqueue/log/popped-before", .popped_before = true },
    { "/virtqueue/log/used-not-asked", .no_used_flag = true },
};

/*
 * One element with an out buffer and three in buffers (one across pages,
 * one across the boundary of the two regions, one status-like byte far
 * away); the device writes all of the first, part of the second (both of
 * its iovecs, on two pages) and, as virtio-blk does, the status.  The log
 * must hold exactly those pages and the used ring's: it fails if the
 * in buffers' (read data) or the used ring's pages are not logged, or if
 * anything else is.
 */
static void test_log(const void *data)
{
    const LogCase *c = data;
    Drv d;
    TestLog l;
    VirtQueueElement *e = g_new0(VirtQueueElement, 1);
    uint64_t status;
    VufSeg bufs[4];
    uint64_t want[4][2];
    unsigned nwant = 0;
    uint32_t len = 0x2000 + 0xa00, id, got_len;

    drv_setup(&d, 16, 0);
    status = d.data_gpa + 0x6000 + 0xf;
    bufs[0] = (VufSeg) { d.data_gpa, 0x1000, false };
    bufs[1] = (VufSeg) { d.data_gpa + 0x2f00, 0x2000, true };
    bufs[2] = (VufSeg) { SIZE_A - 0x100, 0x1000, true };
    bufs[3] = (VufSeg) { d.data_gpa + 0x6000, 0x10, true };
    test_log_init(&l, &d);
    if (!c->no_used_flag) {
        virtqueue_set_log_used(d.vq, VHOST_VRING_F_LOG, d.used_gpa);
    }
    if (!c->popped_before) {
        virtqueue_set_log(d.vq, l.log);
    }
    drv_start(&d, NULL);
    publish_and_pop(&d, drv_add_direct(&d, bufs, 4), e, 1, 4,
                    0x2000 + 0x1000 + 0x10);
    g_assert_cmpint(e->in_gpa_valid, ==, !c->popped_before);
    if (c->popped_before) {
        virtqueue_set_log(d.vq, l.log);
    }
    test_log_clear(&l);

    memset(e->in_sg[0].iov_base, 0xaa, 0x2000);
    memset(e->in_sg[1].iov_base, 0xbb, 0x100);
    memset(e->in_sg[2].iov_base, 0xbb, 0x900);
    want[nwant][0] = d.data_gpa + 0x2f00;
    want[nwant++][1] = 0x2000;
    want[nwant][0] = SIZE_A - 0x100;
    want[nwant++][1] = 0xa00;
    if (!c->no_used_flag) {
        want[nwant][0] = d.used_gpa;
        want[nwant++][1] = 6 + 8 * 16;
    }
    /* Disjoint pages, or a missing class could hide behind another. */
    g_assert_cmpuint(d.used_gpa / VHOST_LOG_PAGE, !=,
                     (d.data_gpa + 0x2f00) / VHOST_LOG_PAGE);
    g_assert_cmpuint((SIZE_A + 0x900) / VHOST_LOG_PAGE, !=,
                     (SIZE_A - 0x100) / VHOST_LOG_PAGE);
    if (c->status_last) {
        *(uint8_t *)guest_memory_gpa_to_host(d.mem, status, 1) = 0;
        virtqueue_push_status_last(d.vq, e, len + 1);
        want[nwant][0] = status;
        want[nwant++][1] = 1;
    } else {
        virtqueue_push(d.vq, e, len);
    }
    test_log_expect(&l, want, nwant);
    g_assert_true(drv_get_used(&d, &id, &got_len));

    /* Stopping marks the used ring again (its flags and event). */
    test_log_clear(&l);
    virtqueue_stop(d.vq);
    test_log_expect(&l, want + nwant - !c->no_used_flag - c->status_last,
                    !c->no_used_flag);
    g_free(e);
    drv_cleanup(&d);
    test_log_cleanup(&l);
}

/* Logging switched off on a running ring: nothing is marked any more. */
static void test_log_off(void)
{
    Drv d;
    TestLog l;
    VirtQueueElement *e = g_new0(VirtQueueElement, 1);
    VufSeg b = { 0, 0x100, true };
    uint32_t id, len;

    drv_setup(&d, 16, 0);
    b.gpa = d.data_gpa;
    test_log_init(&l, &d);
    virtqueue_set_log_used(d.vq, VHOST_VRING_F_LOG, d.used_gpa);
    virtqueue_set_log(d.vq, l.log);
    drv_start(&d, NULL);
    publish_and_pop(&d, drv_add_direct(&d, &b, 1), e, 0, 1, 0x100);
    virtqueue_set_log(d.vq, NULL);
    virtqueue_set_log_used(d.vq, 0, 0);
    test_log_clear(&l);
    virtqueue_push(d.vq, e, 0x100);
    g_assert_true(drv_get_used(&d, &id, &len));
    publish_and_pop(&d, drv_add_direct(&d, &b, 1), e, 0, 1, 0x100);
    g_assert_false(e->in_gpa_valid);
    virtqueue_push(d.vq, e, 0x100);
    virtqueue_stop(d.vq);
    test_log_expect(&l, NULL, 0);
    g_free(e);
    drv_cleanup(&d);
    test_log_cleanup(&l);
}

static const TestCase tests[] = {
    { "/virtqueue/setup", test_setup },
    { "/virtqueue/start/rings-outside", test_start_rings_outside },
    { "/virtqueue/start/pending", test_start_pending },
    { "/virtqueue/roundtrip/direct", test_roundtrip_direct },
    { "/virtqueue/roundtrip/indirect", test_roundtrip_indirect },
    { "/virtqueue/roundtrip/index-wrap", test_index_wrap },
    { "/virtqueue/roundtrip/multi-region", test_multi_region },
    { "/virtqueue/roundtrip/segments", test_segments },
    { "/virtqueue/notify/no-interrupt-flag", test_no_interrupt_flag },
    { "/virtqueue/notify/event-idx", test_event_idx_interrupts },
    { "/virtqueue/notify/without-call-fd", test_interrupt_without_call_fd },
    { "/virtqueue/notify/new-call-fd", test_new_call_fd },
    { "/virtqueue/notify/avail-event", test_avail_event },
    { "/virtqueue/notify/one-signal-per-turn", test_one_signal_per_turn },
    { "/virtqueue/dispatch/kick", test_kick_dispatch },
    { "/virtqueue/dispatch/poll", test_poll_dispatch },
    { "/virtqueue/dispatch/poll-event-idx", test_poll_dispatch_event_idx },
    { "/virtqueue/dispatch/poll-first-after-sleep",
      test_poll_first_after_sleep },
    { "/virtqueue/dispatch/poll-first-after-sleep-event-idx",
      test_poll_first_after_sleep_event_idx },
    { "/virtqueue/stop-restart", test_stop_restart },
    { "/virtqueue/set-memory", test_set_memory },
    { "/virtqueue/malformed/avail-jump", test_bad_avail_jump },
    { "/virtqueue/malformed/too-many-segments",
      test_bad_too_many_segments },
    { "/virtqueue/malformed/total-length", test_bad_total_length },
    { "/virtqueue/malformed/fail-element", test_fail_element },
    { "/virtqueue/inflight/resubmit", test_inflight_resubmit },
    { "/virtqueue/inflight/bad-region", test_inflight_bad_region },
    { "/virtqueue/inflight/resubmit-checked",
      test_inflight_resubmit_checked },
    { "/virtqueue/log/off", test_log_off },
};

static void add_table_tests(void)
{
    add_malformed_tests();
    TEST_ADD_ROWS(log_cases, test_log, 50);
}

TEST_MAIN_SETUP(tests, 50, add_table_tests, NULL)

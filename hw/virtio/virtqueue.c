/*
 * Split virtqueues, device side (virtio 1.x, "Split Virtqueues").  Steps
 * 1-3 and 7 of docs/devel/architecture.md, The life of a request.
 *
 * Theory of operation.
 *
 * Rings.  The driver shares three areas of guest memory: the descriptor
 * table (16 bytes per entry), the available ring (flags, idx, num head
 * indexes, then used_event) and the used ring (flags, idx, num {id, len}
 * pairs, then avail_event).  virtqueue_start() translates the three areas,
 * with their full sizes, from front-end addresses to our mapping of guest
 * memory, and keeps a reference on the GuestMemory table so the mapping
 * cannot go away under the queue.  All ring fields are little-endian.
 *
 * Popping.  virtqueue_pop() reads avail->idx with an acquire load, checks
 * that the driver did not claim more than num new entries, reads the head
 * index from the ring and walks the descriptor chain, possibly through one
 * indirect table.  Each buffer is translated into iovecs pointing straight
 * into guest memory (split where it crosses a region boundary).  Every
 * field the guest controls is read once into a local and checked: indexes,
 * chain length (so a loop ends), device-readable before device-writable,
 * indirect rules, addresses, total length, number of iovecs.  A violation
 * marks the queue broken: a warning is logged once, the error eventfd is
 * signalled, and pop returns -EIO from then on.  Nothing else stops.  A
 * device breaks its queue the same way, with virtqueue_fail_element(),
 * for a well-formed chain that leaves it no room for an honest answer (a
 * virtio-blk request without a status byte): that element is given up,
 * never pushed.
 *
 * Pushing.  virtqueue_push() writes the used element, then publishes the
 * new used->idx with a release store.  It does not signal the driver
 * itself: it schedules the queue's notify BH, which runs once at the end of
 * the loop turn however many elements were pushed, issues a full fence and
 * then decides from avail->flags (VRING_AVAIL_F_NO_INTERRUPT) or, with
 * EVENT_IDX, from used_event whether the driver wants an interrupt.
 * Elements finished after virtqueue_stop() (the device draining) make that
 * decision at once, as there is no BH any more.
 * A new call eventfd is signalled once as soon as it is set, started or
 * not (virtqueue_set_call_fd() says why).
 *
 * Kicks and polling.  The kick eventfd is a pollable AioContext handler:
 *   - io_read (a kick) clears the eventfd and runs the device's handler;
 *   - io_poll compares avail->idx with the next index to pop (a plain load:
 *     no system call, no locked instruction);
 *   - io_poll_begin suppresses kicks: VRING_USED_F_NO_NOTIFY in used->flags,
 *     or with EVENT_IDX avail_event = next index to pop - 1, which the
 *     driver's next entries do not cross (a sleep left avail_event at the
 *     next index, so without this the first request after every sleep
 *     kicked although the loop was polling for it), and pop stops
 *     advancing it;
 *   - io_poll_end re-enables them (clears the flag, or publishes avail_event
 *     = next index to pop); the loop then fences and calls io_poll again.
 *
 * Avoiding lost kicks.  We rely on the loop rather than toggling
 * notifications around every batch:
 *   - While the loop polls, kicks are off, and the loop's "io_poll_end,
 *     full fence, io_poll" sequence closes the race when polling stops.
 *   - While the loop does not poll, notifications stay on, even while the
 *     handler pops.  Without EVENT_IDX the driver then always kicks, so
 *     nothing can be missed.  With EVENT_IDX, every pop advances
 *     avail_event, and when pop finds the ring empty it publishes
 *     avail_event, fences and reads avail->idx once more; that fence pairs
 *     with the driver's fence between writing avail->idx and reading
 *     avail_event, so either the driver kicks or we see its entry.
 *
 * Inflight tracking (VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD).  A queue given
 * a part of an inflight region (virtqueue_set_inflight()) logs there every
 * request it pops and clears it when it pushes it, so that after a crash
 * the next process can finish exactly the requests this one had taken
 * (hw/virtio/vhost-inflight.h has the layout and the store order, and
 * why a crash between any two of those stores is recoverable).  At start
 * vhost_inflight_resume() compares the region with used->idx in guest
 * memory: the used index becomes used->idx, the next avail index
 * used->idx plus the requests still marked, and pop returns those
 * requests first, oldest first, each chain walked and checked like any
 * other before new ones from the avail ring.  Without a region the hot
 * path pays one predictable branch in pop and one in push.
 *
 * Dirty logging (live migration).  A queue given a dirty log
 * (virtqueue_set_log(), on a running queue too) marks there every guest
 * page it writes, before it publishes the used index: virtqueue-log.c
 * says what and how.  Without a log the hot path pays one predictable
 * branch per device-writable descriptor in pop and one in push.
 *
 * Memory tables in flight.  Elements point into the GuestMemory the queue
 * used when they were popped.  When the table is replaced (set_memory) or
 * the queue stops with elements still in flight, the old table is kept in
 * a "retired" list and released when the last of them is pushed.
 *
 * Threads: set-up in the main thread while the queue is stopped; start,
 * stop, pop, push and all the callbacks in the queue's home thread.
 * Statistics, the broken flag and the in-flight count are written by the
 * home thread with relaxed atomics and may be read from any thread.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <glib.h>

#include "hw/virtio/vhost-inflight.h"
#include "hw/virtio/virtqueue.h"
#include "virtqueue-int.h"
#include "util/trace.h"

/* Single-writer counter: relaxed load and store, no locked instruction. */
static void vq_stat_inc(_Atomic uint64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

static bool virtqueue_has_feature(const VirtQueue *vq, unsigned bit)
{
    return (vq->features >> bit) & 1;
}

/* ------------------------------------------------------------------------ */
/* Set-up                                                                   */

VirtQueue *virtqueue_new(unsigned index)
{
    VirtQueue *vq = g_new0(VirtQueue, 1);

    vq->index = index;
    vq->kick.fd = -1;
    vq->call.fd = -1;
    vq->err.fd = -1;
    virtqueue_set_owner(vq, NULL);
    return vq;
}

void virtqueue_set_owner(VirtQueue *vq, const char *owner)
{
    g_autofree char *suffix = g_strdup_printf("vq%u", vq->index);

    g_assert(!vq->started);
    if (owner && *owner) {
        /* Keep the queue number whole: shorten the owner if need be. */
        int room = (int)sizeof(vq->name) - 2 - (int)strlen(suffix);

        snprintf(vq->name, sizeof(vq->name), "%.*s/%s", MAX(room, 0), owner,
                 suffix);
    } else {
        g_strlcpy(vq->name, suffix, sizeof(vq->name));
    }
}

/* Release the retired tables (no element points into them any more). */
static void virtqueue_release_retired(VirtQueue *vq)
{
    if (!vq->retired) {
        return;
    }
    for (unsigned i = 0; i < vq->retired->len; i++) {
        guest_memory_unref(g_ptr_array_index(vq->retired, i));
    }
    g_ptr_array_set_size(vq->retired, 0);
}

void virtqueue_free(VirtQueue *vq)
{
    if (!vq) {
        return;
    }
    g_assert(!vq->started);
    event_notifier_cleanup(&vq->kick);
    event_notifier_cleanup(&vq->call);
    event_notifier_cleanup(&vq->err);
    virtqueue_release_retired(vq);
    if (vq->retired) {
        g_ptr_array_free(vq->retired, true);
    }
    guest_memory_unref(vq->mem);
    shared_mapping_unref(vq->inflight_region);
    shared_mapping_unref(vq->log);
    g_free(vq->resubmit);
    g_free(vq);
}

unsigned virtqueue_index(const VirtQueue *vq)
{
    return vq->index;
}

int virtqueue_set_num(VirtQueue *vq, unsigned num)
{
    g_assert(!vq->started);
    if (num == 0 || num > VIRTQUEUE_MAX_SIZE || (num & (num - 1)) != 0) {
        return -EINVAL;
    }
    vq->num = num;
    return 0;
}

void virtqueue_set_base(VirtQueue *vq, uint16_t base)
{
    g_assert(!vq->started);
    vq->last_avail_idx = base;
    vq->used_idx = base;
}

void virtqueue_set_addrs(VirtQueue *vq, const VirtQueueAddrs *addrs)
{
    g_assert(!vq->started);
    vq->addrs = *addrs;
    vq->addrs_set = true;
}

/*
 * Replace the fd of e (taking ownership of fd; -1 leaves none).  The fd is
 * the front-end's, and we write the call and error fds from the main
 * thread and the IOThreads: made non-blocking here, a front-end that hands
 * over a pipe it never reads, or an eventfd at its maximum count, costs a
 * dropped signal (EAGAIN, see event_notifier_set()) instead of a thread
 * stuck in write().  O_NONBLOCK is shared with the front-end's copy; QEMU
 * and tools/frontend create these eventfds non-blocking anyway.
 */
static void virtqueue_replace_fd(EventNotifier *e, int fd)
{
    event_notifier_cleanup(e);
    if (fd >= 0) {
        int flags = fcntl(fd, F_GETFL);

        if (flags >= 0 && !(flags & O_NONBLOCK)) {
            (void)fcntl(fd, F_SETFL, flags | O_NONBLOCK);
        }
        event_notifier_init_fd(e, fd);
    } else {
        e->fd = -1;
    }
}

void virtqueue_set_kick_fd(VirtQueue *vq, int fd)
{
    g_assert(!vq->started);
    virtqueue_replace_fd(&vq->kick, fd);
}

void virtqueue_set_call_fd(VirtQueue *vq, int fd)
{
    /* Front-ends change it on a running ring (interrupt masking). */
    if (vq->started) {
        virtqueue_assert_home(vq);
    }
    virtqueue_replace_fd(&vq->call, fd);
    if (fd < 0) {
        return;
    }
    /*
     * Signal every new call eventfd once, whether the queue runs or not.
     * Running: elements may have been pushed while there was no eventfd,
     * or while the front-end was swapping the old one out.  Not started
     * yet: drivers may wait for an interrupt as soon as they set
     * DRIVER_OK (QEMU's own vhost-user-blk test does), and libvhost-user
     * back-ends signal a new call fd at once.  A spurious interrupt costs
     * the driver a look at its used ring; a lost one hangs it.  The
     * counter stays set in the eventfd until the front-end reads it, so
     * the signal cannot be lost however late the fd is wired to the
     * guest; a second one before it is read merges with it.  Stopped, the
     * caller (the main thread) owns the queue and the fd; started, this
     * is the home thread (asserted above).  Only the running queue's
     * interrupts are counted: the statistics are the home thread's.
     */
    event_notifier_set(&vq->call);
    if (vq->started) {
        vq->signalled_valid = false;
        vq_stat_inc(&vq->stats.interrupts);
    }
}

void virtqueue_set_err_fd(VirtQueue *vq, int fd)
{
    if (vq->started) {
        virtqueue_assert_home(vq);
    }
    virtqueue_replace_fd(&vq->err, fd);
}

void virtqueue_set_inflight(VirtQueue *vq, VhostInflight *region,
                            unsigned index)
{
    g_assert(!vq->started);
    g_assert(!region || index < vhost_inflight_num_queues(region));
    /* Elements still draining after stop keep clearing into the old
     * part: the region goes only once none is in flight. */
    g_assert(virtqueue_inflight(vq) == 0);
    shared_mapping_ref(region);
    shared_mapping_unref(vq->inflight_region);
    vq->inflight_region = region;
    vq->inflight_index = index;
    vq->track.q = NULL;
}

unsigned virtqueue_resubmitted(const VirtQueue *vq)
{
    return atomic_load_explicit(&vq->resubmitted, memory_order_relaxed);
}

void virtqueue_set_features(VirtQueue *vq, uint64_t features)
{
    g_assert(!vq->started);
    vq->features = features;
}

void virtqueue_set_enabled(VirtQueue *vq, bool enabled)
{
    atomic_store_explicit(&vq->enabled, enabled, memory_order_relaxed);
}

bool virtqueue_is_enabled(const VirtQueue *vq)
{
    return atomic_load_explicit(&vq->enabled, memory_order_relaxed);
}

bool virtqueue_is_ready(const VirtQueue *vq)
{
    return vq->num != 0 && vq->addrs_set &&
           event_notifier_get_fd(&vq->kick) >= 0;
}

void virtqueue_set_aio_context(VirtQueue *vq, AioContext *ctx)
{
    g_assert(!vq->started);
    vq->ctx = ctx;
}

AioContext *virtqueue_get_aio_context(const VirtQueue *vq)
{
    return vq->ctx;
}

bool virtqueue_is_started(const VirtQueue *vq)
{
    return vq->started;
}

bool virtqueue_is_broken(const VirtQueue *vq)
{
    return atomic_load_explicit(&vq->broken, memory_order_relaxed);
}

unsigned virtqueue_inflight(const VirtQueue *vq)
{
    return atomic_load_explicit(&vq->inflight, memory_order_relaxed);
}

void virtqueue_get_stats(const VirtQueue *vq, VirtQueueStats *out)
{
    out->kicks = atomic_load_explicit(&vq->stats.kicks, memory_order_relaxed);
    out->polled = atomic_load_explicit(&vq->stats.polled,
                                       memory_order_relaxed);
    out->interrupts = atomic_load_explicit(&vq->stats.interrupts,
                                           memory_order_relaxed);
    out->interrupts_suppressed =
        atomic_load_explicit(&vq->stats.interrupts_suppressed,
                             memory_order_relaxed);
    out->requests = atomic_load_explicit(&vq->stats.requests,
                                         memory_order_relaxed);
}

/* ------------------------------------------------------------------------ */
/* Broken queues                                                            */

/*
 * Mark the queue broken because of what the guest did; log why once and
 * tell the front-end through the error eventfd.  Returns -EIO for the
 * caller to pass up.  Only this slow path formats a message.
 */
static int G_GNUC_PRINTF(2, 0) virtqueue_vfail(VirtQueue *vq,
                                               const char *fmt, va_list ap)
{
    char *reason;

    if (atomic_load_explicit(&vq->broken, memory_order_relaxed)) {
        return -EIO;
    }
    atomic_store_explicit(&vq->broken, true, memory_order_relaxed);
    reason = g_strdup_vprintf(fmt, ap);
    g_warning("virtqueue %u is broken and stops: %s", vq->index, reason);
    g_free(reason);
    SPINDLE_TRACE1(vq_broken, vq->index);
    if (event_notifier_get_fd(&vq->err) >= 0) {
        event_notifier_set(&vq->err);
    }
    return -EIO;
}

static int G_GNUC_PRINTF(2, 3) virtqueue_fail(VirtQueue *vq,
                                              const char *fmt, ...)
{
    va_list ap;
    int ret;

    va_start(ap, fmt);
    ret = virtqueue_vfail(vq, fmt, ap);
    va_end(ap);
    return ret;
}

/* ------------------------------------------------------------------------ */
/* Ring memory                                                              */

typedef struct VRingPtrs {
    const VRingDesc *desc;
    VRingAvail *avail;
    VRingUsed *used;
} VRingPtrs;

/* Translate the three ring areas with mem; -EFAULT if any is not inside. */
static int virtqueue_map_rings(const VirtQueue *vq, const GuestMemory *mem,
                               VRingPtrs *p)
{
    p->desc = guest_memory_qva_to_host(mem, vq->addrs.desc_qva,
                                       vring_desc_size(vq->num));
    p->avail = guest_memory_qva_to_host(mem, vq->addrs.avail_qva,
                                        vring_avail_size(vq->num));
    p->used = guest_memory_qva_to_host(mem, vq->addrs.used_qva,
                                       vring_used_size(vq->num));
    if (!p->desc || !p->avail || !p->used) {
        return -EFAULT;
    }
    /* The 16- and 32-bit ring fields are accessed atomically: aligned. */
    if ((uintptr_t)p->avail % 2 != 0 || (uintptr_t)p->used % 4 != 0) {
        return -EFAULT;
    }
    return 0;
}

static void virtqueue_set_rings(VirtQueue *vq, const VRingPtrs *p)
{
    vq->desc = p ? p->desc : NULL;
    vq->avail = p ? p->avail : NULL;
    vq->used = p ? p->used : NULL;
    vq->used_event = p ? &vq->avail->ring[vq->num] : NULL;
    vq->avail_event = p ? (_Atomic uint16_t *)&vq->used->ring[vq->num] : NULL;
}

/* Keep mem alive until no popped element can point into it. */
static void virtqueue_retire_memory(VirtQueue *vq, GuestMemory *mem)
{
    if (!mem) {
        return;
    }
    if (virtqueue_inflight(vq) == 0) {
        guest_memory_unref(mem);
        return;
    }
    if (!vq->retired) {
        vq->retired = g_ptr_array_new();
    }
    g_ptr_array_add(vq->retired, mem);
}

/* ------------------------------------------------------------------------ */
/* Notification suppression (our side: the driver's kicks)                  */

static void virtqueue_store_used_flags(VirtQueue *vq, uint16_t flags)
{
    vq->used_flags = flags;
    atomic_store_explicit(&vq->used->flags, htole16(flags),
                          memory_order_relaxed);
}

static void virtqueue_publish_avail_event(VirtQueue *vq)
{
    atomic_store_explicit(vq->avail_event, htole16(vq->last_avail_idx),
                          memory_order_relaxed);
}

/* The driver's avail->idx; acquire orders the ring reads that follow. */
static uint16_t virtqueue_load_avail_idx(const VirtQueue *vq)
{
    /* Acquire: pairs with the driver's write barrier between filling the
     * descriptors and ring entry and storing avail->idx. */
    return le16toh(atomic_load_explicit(&vq->avail->idx,
                                        memory_order_acquire));
}

/*
 * The ring looked empty.  With EVENT_IDX and notifications on, make sure
 * the driver sees avail_event == the next index to pop, then look again.
 * Returns the fresh avail->idx (equal to last_avail_idx if still empty).
 */
static uint16_t virtqueue_recheck_empty(VirtQueue *vq, uint16_t avail_idx)
{
    if (!vq->event_idx || vq->polling) {
        /* No EVENT_IDX: NO_NOTIFY is clear whenever we are not polling, so
         * the driver kicks for anything it adds.  Polling: the loop's
         * io_poll_end + fence + io_poll does the re-check. */
        return avail_idx;
    }
    virtqueue_publish_avail_event(vq);
    /* Full fence: orders the avail_event store before the avail->idx load
     * below; pairs with the driver's full barrier between storing
     * avail->idx and loading avail_event.  Either the driver sees our
     * avail_event and kicks, or we see its new entry here. */
    atomic_thread_fence(memory_order_seq_cst);
    return virtqueue_load_avail_idx(vq);
}

/* ------------------------------------------------------------------------ */
/* Descriptor chains                                                        */

/* The chain being mapped into an element. */
typedef struct VirtQueueChain {
    VirtQueueElement *elem;
    uint16_t head;
    unsigned out_num;
    unsigned in_num;
    bool seen_in;            /* a device-writable buffer came already */
    uint64_t total;          /* bytes in all buffers */
    uint64_t in_bytes;
    uint32_t in_last_len;    /* the last device-writable descriptor's */
} VirtQueueChain;

/* Copy one descriptor out of shared memory: each field is read once. */
static void vring_read_desc(const VRingDesc *src, VRingDesc *d)
{
    VRingDesc raw;

    memcpy(&raw, src, sizeof(raw));
    d->addr = le64toh(raw.addr);
    d->len = le32toh(raw.len);
    d->flags = le16toh(raw.flags);
    d->next = le16toh(raw.next);
}

/* Map one buffer descriptor into the element's iovecs. */
static int virtqueue_map_desc(VirtQueue *vq, VirtQueueChain *c,
                              const VRingDesc *d)
{
    VirtQueueElement *elem = c->elem;
    int r;

    c->total += d->len;
    if (c->total > UINT32_MAX) {
        return virtqueue_fail(vq, "descriptor chain at head %u holds more "
                              "than 4 GiB", c->head);
    }
    if (d->flags & VRING_DESC_F_WRITE) {
        unsigned first = c->in_num;

        c->seen_in = true;
        c->in_bytes += d->len;
        c->in_last_len = d->len;
        /* Out and in iovecs share one budget of VIRTQUEUE_MAX_SEGS. */
        r = guest_memory_map_iov(vq->mem, d->addr, d->len, elem->in_sg,
                                 &c->in_num, VIRTQUEUE_MAX_SEGS - c->out_num);
        if (vq->log && r == 0) {
            virtqueue_record_in_gpa(elem, first, c->in_num, d->addr);
        }
    } else {
        if (c->seen_in) {
            return virtqueue_fail(vq, "descriptor chain at head %u has a "
                                  "device-readable buffer after a "
                                  "device-writable one", c->head);
        }
        r = guest_memory_map_iov(vq->mem, d->addr, d->len, elem->out_sg,
                                 &c->out_num, VIRTQUEUE_MAX_SEGS);
    }
    if (r == -ENOBUFS) {
        /*
         * Even a well-formed chain is refused if it needs more iovecs than
         * we carry: devices advertise seg_max below VIRTQUEUE_MAX_SEGS, so
         * a driver that honours it never gets here.
         */
        return virtqueue_fail(vq, "descriptor chain at head %u needs more "
                              "than %d segments", c->head, VIRTQUEUE_MAX_SEGS);
    }
    if (r < 0) {
        return virtqueue_fail(vq, "descriptor chain at head %u has a buffer "
                              "outside guest memory (GPA 0x%" G_GINT64_MODIFIER
                              "x, %u bytes)", c->head, d->addr, d->len);
    }
    return 0;
}

/*
 * d refers to an indirect table: check the rules and return the table
 * (*size entries), or NULL with the queue broken.
 */
static const VRingDesc *virtqueue_enter_indirect(VirtQueue *vq,
                                                 const VirtQueueChain *c,
                                                 const VRingDesc *d,
                                                 bool in_indirect,
                                                 unsigned *size)
{
    const VRingDesc *table;

    if (!vq->indirect) {
        virtqueue_fail(vq, "descriptor chain at head %u uses an indirect "
                       "table but VIRTIO_RING_F_INDIRECT_DESC was not "
                       "negotiated", c->head);
        return NULL;
    }
    if (in_indirect) {
        virtqueue_fail(vq, "descriptor chain at head %u nests an indirect "
                       "table in an indirect table", c->head);
        return NULL;
    }
    if (d->flags & VRING_DESC_F_NEXT) {
        virtqueue_fail(vq, "descriptor chain at head %u has an indirect "
                       "descriptor with VRING_DESC_F_NEXT", c->head);
        return NULL;
    }
    if (d->len == 0 || d->len % VRING_DESC_SIZE != 0 ||
        d->len > VIRTQUEUE_MAX_SIZE * VRING_DESC_SIZE) {
        virtqueue_fail(vq, "descriptor chain at head %u has an indirect "
                       "table of %u bytes (must be a non-zero multiple of %d, "
                       "at most %d)", c->head, d->len, VRING_DESC_SIZE,
                       VIRTQUEUE_MAX_SIZE * VRING_DESC_SIZE);
        return NULL;
    }
    /* The table must be contiguous in our mapping: within one region. */
    table = guest_memory_gpa_to_host(vq->mem, d->addr, d->len);
    if (!table) {
        virtqueue_fail(vq, "descriptor chain at head %u has an indirect "
                       "table outside guest memory or across regions (GPA "
                       "0x%" G_GINT64_MODIFIER "x, %u bytes)",
                       c->head, d->addr, d->len);
        return NULL;
    }
    *size = d->len / VRING_DESC_SIZE;
    return table;
}

/*
 * Walk the chain starting at head (< num) and fill elem.  A chain visits
 * at most num descriptors of the ring's table and at most the table's
 * entries of an indirect table, so a loop ends.  0 or -EIO (broken).
 */
static int virtqueue_walk_chain(VirtQueue *vq, uint16_t head,
                                VirtQueueElement *elem)
{
    VirtQueueChain c = { .elem = elem, .head = head };
    const VRingDesc *table = vq->desc;
    unsigned size = vq->num;
    unsigned i = head;
    unsigned visited = 0;
    bool in_indirect = false;

    for (;;) {
        VRingDesc d;

        if (visited == size) {
            return virtqueue_fail(vq, "descriptor chain at head %u is longer "
                                  "than %u descriptors (a loop?)", head, size);
        }
        visited++;
        vring_read_desc(&table[i], &d);

        if (d.flags & VRING_DESC_F_INDIRECT) {
            /* The WRITE flag of this descriptor means nothing: ignored. */
            table = virtqueue_enter_indirect(vq, &c, &d, in_indirect, &size);
            if (!table) {
                return -EIO;
            }
            in_indirect = true;
            i = 0;
            visited = 0;
            continue;
        }
        if (virtqueue_map_desc(vq, &c, &d) < 0) {
            return -EIO;
        }
        if (!(d.flags & VRING_DESC_F_NEXT)) {
            break;
        }
        if (d.next >= size) {
            return virtqueue_fail(vq, "descriptor chain at head %u links to "
                                  "descriptor %u of a table of %u",
                                  head, d.next, size);
        }
        i = d.next;
    }
    elem->head = head;
    elem->out_num = c.out_num;
    elem->in_num = c.in_num;
    elem->in_bytes = (uint32_t)c.in_bytes;     /* <= total <= UINT32_MAX */
    elem->in_last_len = c.in_last_len;
    elem->in_gpa_valid = vq->log != NULL;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Pop and push                                                             */

/* Walk head's chain into elem and count it in flight.  1, or -EIO. */
static int virtqueue_take(VirtQueue *vq, uint16_t head, VirtQueueElement *elem)
{
    if (virtqueue_walk_chain(vq, head, elem) < 0) {
        return -EIO;
    }
    atomic_store_explicit(&vq->inflight, virtqueue_inflight(vq) + 1,
                          memory_order_relaxed);
    return 1;
}

/* Pop the next entry of the avail ring (see virtqueue_pop()). */
static int virtqueue_pop_avail(VirtQueue *vq, VirtQueueElement *elem)
{
    uint16_t avail_idx, pending, head;

    avail_idx = virtqueue_load_avail_idx(vq);
    if (avail_idx == vq->last_avail_idx) {
        avail_idx = virtqueue_recheck_empty(vq, avail_idx);
        if (avail_idx == vq->last_avail_idx) {
            return 0;
        }
    }
    pending = avail_idx - vq->last_avail_idx;
    if (pending > vq->num) {
        return virtqueue_fail(vq, "avail index jumped from %u to %u "
                              "(ring of %u)", vq->last_avail_idx, avail_idx,
                              vq->num);
    }
    /* Ordered after the acquire load of avail->idx. */
    head = le16toh(atomic_load_explicit(
        &vq->avail->ring[vq->last_avail_idx & (vq->num - 1)],
        memory_order_relaxed));
    if (head >= vq->num) {
        return virtqueue_fail(vq, "avail ring entry %u names descriptor %u "
                              "of a ring of %u", vq->last_avail_idx, head,
                              vq->num);
    }
    if (virtqueue_take(vq, head, elem) < 0) {
        return -EIO;
    }
    vq->last_avail_idx++;
    if (vq->event_idx && !vq->polling) {
        /* Kicks are on: ask for one when the driver passes what we took. */
        virtqueue_publish_avail_event(vq);
    }
    SPINDLE_TRACE3(vq_pop, vq->index, head, vq->last_avail_idx);
    return 1;
}

/*
 * Pop with an inflight region: first the requests a dead process left
 * marked (they stay marked, with their first counter, so a second crash
 * resubmits them in the same order), then new ones, each marked before
 * the device sees it.
 */
static int virtqueue_pop_tracked(VirtQueue *vq, VirtQueueElement *elem)
{
    int r;

    if (vq->resubmit_pos < vq->resubmit_n) {
        uint16_t head = vq->resubmit[vq->resubmit_pos++];

        r = virtqueue_take(vq, head, elem);
        if (r > 0) {
            SPINDLE_TRACE3(vq_pop, vq->index, head, vq->last_avail_idx);
        }
        return r;
    }
    r = virtqueue_pop_avail(vq, elem);
    if (r > 0) {
        vhost_inflight_mark(&vq->track, elem->head);
    }
    return r;
}

int virtqueue_pop(VirtQueue *vq, VirtQueueElement *elem)
{
    virtqueue_assert_home(vq);
    if (virtqueue_is_broken(vq)) {
        return -EIO;
    }
    if (!vq->started || vq->paused) {
        return 0;
    }
    if (vq->track.q) {
        return virtqueue_pop_tracked(vq, elem);
    }
    return virtqueue_pop_avail(vq, elem);
}

static void virtqueue_notify(VirtQueue *vq);

static void virtqueue_schedule_notify(VirtQueue *vq)
{
    if (!vq->notify_pending) {
        vq->notify_pending = true;
        aio_bh_schedule(vq->notify_bh);
    }
}

/* One popped element fewer in flight; the last one lets go of what only
 * elements in flight still needed. */
static void virtqueue_put_inflight(VirtQueue *vq)
{
    unsigned inflight = virtqueue_inflight(vq);

    g_assert(inflight > 0);
    atomic_store_explicit(&vq->inflight, inflight - 1, memory_order_relaxed);
    if (inflight == 1) {
        virtqueue_release_retired(vq);
        if (!vq->started) {
            virtqueue_set_rings(vq, NULL);    /* their memory may be gone */
        }
    }
}

/* Write the used element for head and publish the new used->idx. */
static void virtqueue_fill_used(VirtQueue *vq, uint16_t head, uint32_t len)
{
    VRingUsedElem *u = &vq->used->ring[vq->used_idx & (vq->num - 1)];

    u->id = htole32(head);
    u->len = htole32(len);
    vq->used_idx++;
    /* Release: the element above is visible before the new index;
     * pairs with the driver's read barrier between loading used->idx
     * and reading the used elements. */
    atomic_store_explicit(&vq->used->idx, htole16(vq->used_idx),
                          memory_order_release);
}

static void virtqueue_push_elem(VirtQueue *vq, const VirtQueueElement *elem,
                                uint32_t len, bool status_last)
{
    virtqueue_assert_home(vq);
    g_assert(virtqueue_inflight(vq) > 0);
    g_assert(len <= elem->in_bytes);
    vq_stat_inc(&vq->stats.requests);
    SPINDLE_TRACE3(vq_push, vq->index, elem->head, len);

    if (vq->used) {
        if (vq->log) {
            /* Before used->idx is published (release, in fill_used). */
            virtqueue_log_push(vq, elem, len, status_last);
        }
        if (vq->track.q) {
            /* Linked before used->idx moves, cleared after: the order
             * vhost_inflight_resume() relies on. */
            vhost_inflight_link(&vq->track, elem->head);
            virtqueue_fill_used(vq, elem->head, len);
            vhost_inflight_clear(&vq->track, elem->head, vq->used_idx);
        } else {
            virtqueue_fill_used(vq, elem->head, len);
        }
        if (vq->started) {
            virtqueue_schedule_notify(vq);
        } else {
            /* Draining after stop (no BH any more): rare, signal now. */
            virtqueue_notify(vq);
        }
    }
    virtqueue_put_inflight(vq);
}

void virtqueue_push(VirtQueue *vq, const VirtQueueElement *elem, uint32_t len)
{
    virtqueue_push_elem(vq, elem, len, false);
}

void virtqueue_push_status_last(VirtQueue *vq, const VirtQueueElement *elem,
                                uint32_t len)
{
    g_assert(len >= 1 && elem->in_bytes >= 1);
    virtqueue_push_elem(vq, elem, len, true);
}

void virtqueue_fail_element(VirtQueue *vq, const VirtQueueElement *elem,
                            const char *fmt, ...)
{
    va_list ap;

    virtqueue_assert_home(vq);
    va_start(ap, fmt);
    virtqueue_vfail(vq, fmt, ap);
    va_end(ap);
    virtqueue_put_inflight(vq);
}

/* ------------------------------------------------------------------------ */
/* Interrupts (the call eventfd)                                            */

/* Decide whether the driver wants an interrupt for what we pushed. */
static bool virtqueue_driver_wants_interrupt(VirtQueue *vq)
{
    bool need;

    if (vq->event_idx) {
        uint16_t event = le16toh(atomic_load_explicit(vq->used_event,
                                                      memory_order_relaxed));

        /* The first check after start has no reference point: signal. */
        need = !vq->signalled_valid ||
               vring_need_event(event, vq->used_idx, vq->signalled_used);
        vq->signalled_used = vq->used_idx;
        vq->signalled_valid = true;
        return need;
    }
    return !(le16toh(atomic_load_explicit(&vq->avail->flags,
                                          memory_order_relaxed)) &
             VRING_AVAIL_F_NO_INTERRUPT);
}

static void virtqueue_notify(VirtQueue *vq)
{
    bool signalled = false;

    vq->notify_pending = false;
    if (!vq->used) {
        return;
    }
    if (event_notifier_get_fd(&vq->call) < 0) {
        /*
         * No call eventfd (yet): nothing to signal.  Do not decide either,
         * or the EVENT_IDX bookkeeping would count this interrupt as sent
         * and the driver, waiting for it, would never get one.  The next
         * virtqueue_set_call_fd() signals.
         */
        vq->signalled_valid = false;
        SPINDLE_TRACE2(vq_notify, vq->index, signalled);
        return;
    }
    /* Full fence: orders our used->idx stores before the loads of
     * avail->flags / used_event; pairs with the driver's full barrier
     * between re-enabling interrupts (clearing VRING_AVAIL_F_NO_INTERRUPT
     * or writing used_event) and re-reading used->idx.  Either we see its
     * request for an interrupt or it sees our new used entries. */
    atomic_thread_fence(memory_order_seq_cst);
    if (!virtqueue_driver_wants_interrupt(vq)) {
        vq_stat_inc(&vq->stats.interrupts_suppressed);
    } else {
        event_notifier_set(&vq->call);
        vq_stat_inc(&vq->stats.interrupts);
        signalled = true;
    }
    SPINDLE_TRACE2(vq_notify, vq->index, signalled);
}

/* The notify BH: runs once per loop turn however many elements were pushed. */
static void virtqueue_notify_bh(void *opaque)
{
    VirtQueue *vq = opaque;

    virtqueue_assert_home(vq);
    virtqueue_notify(vq);
}

/* ------------------------------------------------------------------------ */
/* Kick handler and polling                                                 */

static void virtqueue_run_handler(VirtQueue *vq)
{
    if (vq->started && !vq->paused && !virtqueue_is_broken(vq) &&
        vq->handler) {
        vq->handler(vq, vq->opaque);
    }
}

static VirtQueue *virtqueue_from_kick(EventNotifier *e)
{
    return (VirtQueue *)((char *)e - offsetof(VirtQueue, kick));
}

/* io_read: the driver kicked. */
static void virtqueue_kick_read(EventNotifier *e)
{
    VirtQueue *vq = virtqueue_from_kick(e);

    virtqueue_assert_home(vq);
    if (event_notifier_test_and_clear(e)) {
        vq_stat_inc(&vq->stats.kicks);
        SPINDLE_TRACE1(vq_kick, vq->index);
    }
    virtqueue_run_handler(vq);
}

/*
 * io_poll: is there an entry we have not popped?  Called in the busy-poll
 * loop of the home thread, so it skips the thread assertion and does a
 * single plain load of shared memory.
 */
static bool virtqueue_poll(EventNotifier *e)
{
    VirtQueue *vq = virtqueue_from_kick(e);
    uint16_t avail_idx;

    if (!vq->avail || vq->paused || virtqueue_is_broken(vq)) {
        return false;
    }
    /* Relaxed: only looks for work; virtqueue_pop() reloads it with
     * acquire before reading the ring. */
    avail_idx = le16toh(atomic_load_explicit(&vq->avail->idx,
                                             memory_order_relaxed));
    return avail_idx != vq->last_avail_idx;
}

/* io_poll_ready: polling found work. */
static void virtqueue_poll_ready(EventNotifier *e)
{
    VirtQueue *vq = virtqueue_from_kick(e);

    virtqueue_assert_home(vq);
    vq_stat_inc(&vq->stats.polled);
    virtqueue_run_handler(vq);
}

/* io_poll_begin: we are watching the ring; the driver need not kick. */
static void virtqueue_poll_begin(EventNotifier *e)
{
    VirtQueue *vq = virtqueue_from_kick(e);

    virtqueue_assert_home(vq);
    vq->polling = true;
    if (vq->used && !vq->event_idx) {
        virtqueue_store_used_flags(vq, vq->used_flags | VRING_USED_F_NO_NOTIFY);
    }
    /*
     * With EVENT_IDX: an avail_event just behind the next index to pop
     * (the driver kicks when its new entries cross avail_event), and pop
     * stops advancing it.  A driver that read the old value kicks once: a
     * spurious kick, harmless.  So is the one after 65536 entries popped
     * in one polling stretch, when the index comes round to it again.
     */
    if (vq->used && vq->event_idx) {
        atomic_store_explicit(vq->avail_event,
                              htole16((uint16_t)(vq->last_avail_idx - 1)),
                              memory_order_relaxed);
    }
}

/*
 * io_poll_end: kicks back on.  The loop follows with a full fence (paired
 * with the driver's barrier between storing avail->idx and reading
 * used->flags / avail_event) and one more io_poll.
 */
static void virtqueue_poll_end(EventNotifier *e)
{
    VirtQueue *vq = virtqueue_from_kick(e);

    virtqueue_assert_home(vq);
    vq->polling = false;
    if (!vq->used) {
        return;
    }
    if (vq->event_idx) {
        virtqueue_publish_avail_event(vq);
    } else {
        virtqueue_store_used_flags(vq,
                                   vq->used_flags & ~VRING_USED_F_NO_NOTIFY);
    }
}

/*
 * For the poll policy: requests popped and not yet completed, and those
 * completed so far.  A guest that waits for its requests (a closed loop)
 * sends the next one after a completion, so the policy learns the queue's
 * waits separately for "we owe it completions" and "it owes us requests";
 * and the two counts give the requests' latency (Little's law).
 */
static void virtqueue_poll_counts(EventNotifier *e, AioPollCounts *c)
{
    VirtQueue *vq = virtqueue_from_kick(e);

    c->pending = virtqueue_inflight(vq);
    c->done = atomic_load_explicit(&vq->stats.requests, memory_order_relaxed);
}

/* Run once after start: entries published before we were listening. */
static void virtqueue_kick_bh(void *opaque)
{
    VirtQueue *vq = opaque;

    virtqueue_assert_home(vq);
    virtqueue_run_handler(vq);
}

/* ------------------------------------------------------------------------ */
/* Start, stop, memory changes                                              */

/*
 * Bring the queue in line with its inflight region before it runs (see
 * "Inflight tracking" above).  0, or -EPROTO with the queue broken if
 * the region's contents do not fit the ring.
 */
static int virtqueue_resume_inflight(VirtQueue *vq)
{
    VhostInflightResume r = {
        /* Only we write used->idx; the ring is not running yet. */
        .used_idx = le16toh(atomic_load_explicit(&vq->used->idx,
                                                 memory_order_relaxed)),
        .num = vq->num,
    };
    VhostInflightQueue *q = vhost_inflight_get_queue(vq->inflight_region,
                                                     vq->inflight_index);
    char why[200];

    vq->resubmit = g_renew(uint16_t, vq->resubmit, vq->num);
    r.heads = vq->resubmit;
    if (vhost_inflight_resume(q, vhost_inflight_queue_size(
                                  vq->inflight_region),
                              &r, why, sizeof(why)) < 0) {
        virtqueue_fail(vq, "%s", why);
        return -EPROTO;
    }
    if (!r.fresh) {
        /* What the region says beats SET_VRING_BASE: it knows which
         * requests past used->idx were taken. */
        vq->used_idx = r.used_idx;
        vq->last_avail_idx = r.used_idx + r.nheads;
    }
    vq->track = (VhostInflightTrack) {
        .q = q,
        .next_counter = r.next_counter,
        .last_head = r.last_batch_head,
    };
    vq->resubmit_pos = 0;
    vq->resubmit_n = r.nheads;
    atomic_store_explicit(&vq->resubmitted, r.nheads, memory_order_relaxed);
    return 0;
}

int virtqueue_start(VirtQueue *vq, GuestMemory *mem, VirtQueueHandler *handler,
                    void *opaque)
{
    VRingPtrs rings;
    int fd = event_notifier_get_fd(&vq->kick);

    virtqueue_assert_home(vq);
    g_assert(!vq->started);
    if (!virtqueue_is_ready(vq)) {
        return -EINVAL;
    }
    atomic_store_explicit(&vq->broken, false, memory_order_relaxed);
    if (virtqueue_map_rings(vq, mem, &rings) < 0) {
        virtqueue_fail(vq, "rings (desc 0x%" G_GINT64_MODIFIER "x, avail 0x%"
                       G_GINT64_MODIFIER "x, used 0x%" G_GINT64_MODIFIER
                       "x, %u entries) are not inside guest memory or are "
                       "misaligned", vq->addrs.desc_qva, vq->addrs.avail_qva,
                       vq->addrs.used_qva, vq->num);
        return -EFAULT;
    }
    virtqueue_set_rings(vq, &rings);
    vq->track.q = NULL;
    vq->resubmit_n = 0;
    atomic_store_explicit(&vq->resubmitted, 0, memory_order_relaxed);
    if (vq->inflight_region && virtqueue_resume_inflight(vq) < 0) {
        virtqueue_set_rings(vq, NULL);
        return -EPROTO;
    }
    vq->mem = guest_memory_ref(mem);
    vq->event_idx = virtqueue_has_feature(vq, VIRTIO_RING_F_EVENT_IDX);
    vq->indirect = virtqueue_has_feature(vq, VIRTIO_RING_F_INDIRECT_DESC);
    vq->handler = handler;
    vq->opaque = opaque;
    vq->polling = false;
    vq->notify_pending = false;
    vq->signalled_valid = false;

    /* Kicks on, whatever a previous back-end left in the ring. */
    virtqueue_store_used_flags(vq, 0);
    if (vq->event_idx) {
        virtqueue_publish_avail_event(vq);
    }
    /* Full fence: the stores above before kick_bh's look at avail->idx;
     * pairs with the driver's barrier between storing avail->idx and
     * reading used->flags / avail_event. */
    atomic_thread_fence(memory_order_seq_cst);

    vq->notify_bh = aio_bh_new(vq->ctx, virtqueue_notify_bh, vq);
    vq->kick_bh = aio_bh_new(vq->ctx, virtqueue_kick_bh, vq);
    vq->started = true;
    aio_set_event_notifier(vq->ctx, &vq->kick, virtqueue_kick_read,
                           virtqueue_poll, virtqueue_poll_ready);
    aio_set_event_notifier_poll(vq->ctx, &vq->kick, virtqueue_poll_begin,
                                virtqueue_poll_end);
    aio_set_event_notifier_counts(vq->ctx, &vq->kick, virtqueue_poll_counts);
    aio_set_fd_handler_name(vq->ctx, fd, vq->name);
    aio_bh_schedule(vq->kick_bh);
    return 0;
}

uint16_t virtqueue_stop(VirtQueue *vq)
{
    if (!vq->started) {
        return vq->last_avail_idx;
    }
    virtqueue_assert_home(vq);
    if (vq->log) {
        /* The flag and event writes since the last push. */
        virtqueue_log_used(vq);
    }
    /* Removing the handler runs io_poll_end if polling had begun. */
    aio_set_event_notifier(vq->ctx, &vq->kick, NULL, NULL, NULL);
    if (vq->notify_pending) {
        /* Elements pushed this turn (the drain) still get their interrupt. */
        aio_bh_cancel(vq->notify_bh);
        virtqueue_notify(vq);
    }
    aio_bh_delete(vq->notify_bh);
    aio_bh_delete(vq->kick_bh);
    vq->notify_bh = NULL;
    vq->kick_bh = NULL;
    vq->started = false;
    vq->polling = false;
    vq->handler = NULL;
    virtqueue_retire_memory(vq, vq->mem);
    vq->mem = NULL;
    vq->paused = false;          /* the next start takes requests */
    if (virtqueue_inflight(vq) == 0) {
        virtqueue_set_rings(vq, NULL);
    }
    return vq->last_avail_idx;
}

void virtqueue_set_paused(VirtQueue *vq, bool paused)
{
    virtqueue_assert_home(vq);
    vq->paused = paused;
    /* Entries the driver published meanwhile (their kicks found the
     * handler off): look once, as after a start. */
    if (!paused && vq->started) {
        aio_bh_schedule(vq->kick_bh);
    }
}

int virtqueue_set_memory(VirtQueue *vq, GuestMemory *mem)
{
    GuestMemory *old = vq->mem;
    VRingPtrs rings;

    if (!vq->started) {
        return 0;                /* virtqueue_start() takes the table */
    }
    virtqueue_assert_home(vq);
    if (virtqueue_map_rings(vq, mem, &rings) < 0) {
        vq->mem = NULL;
        virtqueue_set_rings(vq, NULL);
        virtqueue_retire_memory(vq, old);
        virtqueue_fail(vq, "rings are not inside the new guest memory table");
        return -EFAULT;
    }
    vq->mem = guest_memory_ref(mem);
    virtqueue_set_rings(vq, &rings);
    virtqueue_retire_memory(vq, old);
    return 0;
}

/*
 * vu-virtqueue: the driver side of a split virtqueue (virtio 1.x, 2.7).
 *
 * Theory of operation
 * -------------------
 * Each queue's descriptor table, available ring and used ring (and, when
 * INDIRECT_DESC is negotiated, one indirect table per descriptor) are
 * carved out of the guest memory when the VuFrontend is created, each on
 * its own page.  The chain links and the free list live in a private array
 * (next[]), never read back from shared memory, so a misbehaving device
 * cannot corrupt our bookkeeping; tokens[head] is the caller's cookie for
 * a chain in flight and NULL otherwise.
 *
 * Submission: vufq_add() fills descriptors from the free list, writes the
 * head into avail->ring and publishes it with a release store of avail->idx
 * (the device's acquire load of avail->idx pairs with it).  vufq_kick()
 * then decides whether the device wants a notification for everything
 * added since the last decision: a full fence orders our avail->idx store
 * before our read of the device's suppression state (the device does the
 * mirror image: it re-enables notifications, fences, re-reads avail->idx),
 * then with EVENT_IDX we kick iff the new entries cross used->avail_event
 * (vring_need_event), otherwise iff VRING_USED_F_NO_NOTIFY is clear.  Each
 * decision counts as a kick sent or a kick avoided.
 *
 * Completion: vufq_get_used() acquire-loads used->idx (pairs with the
 * device's release store after it wrote the used element), validates the
 * element (index in range, head really in flight, idx not beyond the ring)
 * and returns the chain's descriptors to the free list.  What the chain
 * was (its token and avail index) stays with its head until the head is
 * used again (retired[], published_at[]), so that an element for a head
 * no longer in flight can be named: after vuf_resume() that is a request
 * the new back-end ran a second time (vufq_bad_used()).  Two modes:
 * - poll: we ask for no interrupts (VRING_AVAIL_F_NO_INTERRUPT, or with
 *   EVENT_IDX a used_event that trails last_used, refreshed every 16k
 *   completions so that the device's index never crosses it) and
 *   vufq_wait() spins on used->idx;
 * - interrupt: vufq_wait() arms (clears the flag, or used_event =
 *   last_used), issues a full fence (pairs with the device's fence between
 *   its used->idx store and its read of used_event/flags), checks used->idx
 *   once more and only then blocks in poll() on the call eventfd.  Every
 *   eventfd counter increment read is one interrupt.
 *
 * Trace points (util/trace.h, provider "spindle"): vuf_add (queue, head),
 * vuf_kick and vuf_kick_avoided (queue, avail index), vuf_complete (queue,
 * head, length), vuf_interrupt (queue, count).
 *
 * Dirty logging (vu-dirty-log.c): while the front-end logs, each chain
 * built is copied privately and each one harvested marks what the device
 * must have written; one branch each when not logging.
 *
 * Sessions: vufq_session_start() resets the rings for a new back-end;
 * vufq_session_resume() keeps them as they are (chains in flight
 * included) and only renews the eventfds, for a back-end that takes over
 * where a dead one stopped.
 *
 * Threads: everything on a queue's data path belongs to the one thread
 * using the queue; the control thread touches the queue only in
 * vufq_session_start/resume/end, while nobody uses it.  Statistics are
 * single-writer relaxed atomics on their own cache line.
 */

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>

#include "util/clock.h"
#include "util/trace.h"
#include "vu-frontend-int.h"

#define RING_ALIGN              4096
#define SPINS_PER_CLOCK_CHECK   1024
#define SPINS_PER_HANGUP_CHECK  (1u << 20)
/* In poll mode with EVENT_IDX, how far last_used may run ahead of the
 * used_event we stored before we move used_event up again. */
#define USED_EVENT_REFRESH      0x4000
/* Data pieces are cut in whole sectors where possible, as drivers do. */
#define DATA_PIECE_UNIT         512

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ------------------------------------------------------------------------ */
/* Creation and sessions (control thread)                                    */

static void *alloc_ring(VuFrontend *fe, size_t bytes, uint64_t *gpa,
                        const char *what, unsigned index, Error **errp)
{
    void *p = vuf_mem_alloc(fe, bytes, RING_ALIGN, gpa);

    if (!p) {
        error_setg(errp, "guest memory (%" PRIu64 " bytes) is too small for "
                   "the %s of queue %u: raise the memory size or lower the "
                   "queue count or size", vuf_mem_size(fe), what, index);
    }
    return p;
}

VufQueue *vufq_create(VuFrontend *fe, unsigned index, Error **errp)
{
    const VufOptions *o = vuf_options(fe);
    VufQueue *q;
    void *mem;

    if (posix_memalign(&mem, VUF_CACHELINE, sizeof(VufQueue))) {
        error_setg(errp, "out of memory for queue %u", index);
        return NULL;
    }
    q = memset(mem, 0, sizeof(VufQueue));
    q->fe = fe;
    q->index = index;
    q->num = o->queue_size;
    q->indirect_max = o->indirect_max;
    q->kick_fd = q->call_fd = q->err_fd = -1;
    q->mode = o->completion;
    q->desc_bytes = sizeof(VRingDesc) * q->num;
    q->avail_bytes = sizeof(VRingAvail) + sizeof(uint16_t) * (q->num + 1);
    q->used_bytes = sizeof(VRingUsed) + sizeof(VRingUsedElem) * q->num +
                    sizeof(uint16_t);
    q->next = g_new0(uint16_t, q->num);
    q->chain_len = g_new0(uint16_t, q->num);
    q->tokens = g_new0(void *, q->num);
    q->retired = g_new0(void *, q->num);
    q->published_at = g_new0(uint16_t, q->num);

    q->desc = alloc_ring(fe, q->desc_bytes, &q->desc_gpa,
                         "descriptor table", index, errp);
    if (q->desc) {
        q->avail = alloc_ring(fe, q->avail_bytes, &q->avail_gpa,
                              "available ring", index, errp);
    }
    if (q->avail) {
        q->used = alloc_ring(fe, q->used_bytes, &q->used_gpa, "used ring",
                             index, errp);
    }
    if (q->used &&
        (o->features_wanted & VUF_BIT(VIRTIO_RING_F_INDIRECT_DESC))) {
        q->indirect = alloc_ring(fe, sizeof(VRingDesc) * q->indirect_max *
                                 q->num, &q->indirect_gpa,
                                 "indirect descriptor tables", index, errp);
        if (!q->indirect) {
            vufq_destroy(q);
            return NULL;
        }
    }
    if (!q->used) {
        vufq_destroy(q);
        return NULL;
    }
    q->used_event = &q->avail->ring[q->num];
    q->avail_event = (_Atomic uint16_t *)&q->used->ring[q->num];
    return q;
}

void vufq_destroy(VufQueue *q)
{
    vufq_session_end(q);
    vuf_mem_free(q->fe, q->desc);
    vuf_mem_free(q->fe, q->avail);
    vuf_mem_free(q->fe, q->used);
    vuf_mem_free(q->fe, q->indirect);
    vuf_mem_free(q->fe, q->fault_scratch);
    g_free(q->next);
    g_free(q->chain_len);
    g_free(q->tokens);
    g_free(q->retired);
    g_free(q->published_at);
    free(q);
}

/* New eventfds and the completion mode for a session on q's rings. */
static bool session_open(VufQueue *q, Error **errp)
{
    q->error_signalled = false;
    q->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    q->call_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    q->err_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (q->kick_fd < 0 || q->call_fd < 0 || q->err_fd < 0) {
        error_setg_errno(errp, errno, "cannot create the eventfds of queue %u",
                         q->index);
        vufq_session_end(q);
        return false;
    }
    vufq_set_completion(q, q->mode);
    /* Publish the rings before the back-end hears about them (the socket
     * send is a full barrier in practice; say so explicitly). */
    atomic_thread_fence(memory_order_release);
    q->ready = true;
    return true;
}

bool vufq_session_start(VufQueue *q, bool event_idx, bool indirect,
                        Error **errp)
{
    unsigned i;

    vufq_session_end(q);
    memset(q->desc, 0, q->desc_bytes);
    memset(q->avail, 0, q->avail_bytes);
    memset(q->used, 0, q->used_bytes);
    for (i = 0; i < q->num; i++) {
        q->next[i] = (i + 1) % q->num;
        q->chain_len[i] = 0;
        q->tokens[i] = NULL;
        q->retired[i] = NULL;
    }
    q->free_head = 0;
    q->num_free = q->num;
    q->in_flight = 0;
    q->avail_idx = q->kicked_idx = q->last_used = 0;
    q->broken = q->bad_used = false;
    q->event_idx = event_idx;
    q->indirect_ok = indirect && q->indirect;
    return session_open(q, errp);
}

bool vufq_session_resume(VufQueue *q, Error **errp)
{
    vufq_session_end(q);
    return session_open(q, errp);
}

uint16_t vufq_used_idx(VufQueue *q)
{
    /* Acquire: pairs with the device's release store of used->idx. */
    return atomic_load_explicit(&q->used->idx, memory_order_acquire);
}

void vufq_session_end(VufQueue *q)
{
    q->ready = false;
    vuf_close_fd(&q->kick_fd);
    vuf_close_fd(&q->call_fd);
    vuf_close_fd(&q->err_fd);
}

/* ------------------------------------------------------------------------ */
/* Accessors                                                                 */

unsigned vufq_index(const VufQueue *q)
{
    return q->index;
}

unsigned vufq_size(const VufQueue *q)
{
    return q->num;
}

bool vufq_ready(const VufQueue *q)
{
    return q->ready;
}

VuFrontend *vufq_frontend(const VufQueue *q)
{
    return q->fe;
}

VufCompletion vufq_completion(const VufQueue *q)
{
    return q->mode;
}

unsigned vufq_free_descs(const VufQueue *q)
{
    return q->num_free;
}

unsigned vufq_in_flight(const VufQueue *q)
{
    return q->in_flight;
}

unsigned vufq_max_segs(const VufQueue *q, unsigned flags)
{
    return (flags & VUFQ_ADD_INDIRECT) ? q->indirect_max : q->num;
}

bool vufq_broken(const VufQueue *q)
{
    return q->broken;
}

int vufq_err_fd(const VufQueue *q)
{
    return q->ready ? q->err_fd : -1;
}

bool vufq_error_signalled(VufQueue *q)
{
    uint64_t count;

    if (!q->error_signalled && q->err_fd >= 0 &&
        read(q->err_fd, &count, sizeof(count)) == sizeof(count) &&
        count > 0) {
        q->error_signalled = true;
    }
    return q->error_signalled;
}

bool vufq_bad_used(const VufQueue *q, unsigned *head, void **token,
                   uint16_t *avail_pos)
{
    bool known = q->bad_used && q->bad_id < q->num;

    if (head) {
        *head = q->bad_id;
    }
    if (token) {
        *token = known ? q->retired[q->bad_id] : NULL;
    }
    if (avail_pos) {
        *avail_pos = known ? q->published_at[q->bad_id] : 0;
    }
    return q->bad_used;
}

void vufq_set_other_done(VufQueue *q, VufqOtherDone *cb, void *opaque)
{
    q->other_done = cb;
    q->other_opaque = opaque;
}

uint16_t vufq_avail_idx(const VufQueue *q)
{
    return q->avail_idx;
}

int vufq_call_fd(const VufQueue *q)
{
    return q->ready ? q->call_fd : -1;
}

VRingDesc *vufq_desc_table(VufQueue *q)
{
    return q->desc;
}

VRingAvail *vufq_avail(VufQueue *q)
{
    return q->avail;
}

VRingUsed *vufq_used(VufQueue *q)
{
    return q->used;
}

/* Each counter and the VufQueueStats member it is copied to. */
static const struct {
    size_t counter;             /* in VufStatCounters */
    size_t stat;                /* in VufQueueStats */
} stat_fields[] = {
    { offsetof(VufStatCounters, added), offsetof(VufQueueStats, added) },
    { offsetof(VufStatCounters, completed),
      offsetof(VufQueueStats, completed) },
    { offsetof(VufStatCounters, kicks), offsetof(VufQueueStats, kicks) },
    { offsetof(VufStatCounters, kicks_avoided),
      offsetof(VufQueueStats, kicks_avoided) },
    { offsetof(VufStatCounters, interrupts),
      offsetof(VufQueueStats, interrupts) },
    { offsetof(VufStatCounters, wakeups), offsetof(VufQueueStats, wakeups) },
    { offsetof(VufStatCounters, spins), offsetof(VufQueueStats, spins) },
};

static _Atomic uint64_t *stat_counter(const VufQueue *q, size_t i)
{
    return (_Atomic uint64_t *)((char *)&q->stats + stat_fields[i].counter);
}

void vufq_get_stats(const VufQueue *q, VufQueueStats *out)
{
    for (size_t i = 0; i < G_N_ELEMENTS(stat_fields); i++) {
        *(uint64_t *)((char *)out + stat_fields[i].stat) =
            atomic_load_explicit(stat_counter(q, i), memory_order_relaxed);
    }
}

void vufq_reset_stats(VufQueue *q)
{
    for (size_t i = 0; i < G_N_ELEMENTS(stat_fields); i++) {
        atomic_store_explicit(stat_counter(q, i), 0, memory_order_relaxed);
    }
}

/* ------------------------------------------------------------------------ */
/* Notification suppression                                                  */

static void store_used_event(VufQueue *q, uint16_t value)
{
    q->used_event_shadow = value;
    atomic_store_explicit(q->used_event, value, memory_order_relaxed);
}

void vufq_set_completion(VufQueue *q, VufCompletion mode)
{
    q->mode = mode;
    if (mode == VUF_COMPLETION_POLL) {
        /* Without EVENT_IDX the flag asks for no interrupts; with it the
         * device ignores the flag and a used_event just behind last_used is
         * never crossed. */
        atomic_store_explicit(&q->avail->flags, VRING_AVAIL_F_NO_INTERRUPT,
                              memory_order_relaxed);
        store_used_event(q, q->last_used - 1);
    } else {
        atomic_store_explicit(&q->avail->flags, 0, memory_order_relaxed);
        store_used_event(q, q->last_used);
    }
    /* Full fence: make the new suppression state visible before any used
     * ring check that follows (pairs with the device's fence between its
     * used->idx store and its read of flags/used_event). */
    atomic_thread_fence(memory_order_seq_cst);
}

/* ------------------------------------------------------------------------ */
/* Submission                                                                */

static void fill_desc(VRingDesc *d, const VufSeg *seg, bool more,
                      uint16_t next)
{
    d->addr = seg->gpa;
    d->len = seg->len;
    d->flags = (seg->device_writes ? VRING_DESC_F_WRITE : 0) |
               (more ? VRING_DESC_F_NEXT : 0);
    d->next = more ? next : 0;
}

int vufq_build_chain(VufQueue *q, const VufSeg *segs, unsigned n,
                     unsigned flags, void *token)
{
    bool indirect = flags & VUFQ_ADD_INDIRECT;
    unsigned need = indirect ? 1 : n;
    uint16_t head, idx;
    unsigned i;

    if (!q->ready) {
        return -ENOTCONN;
    }
    if (q->broken) {
        return -EIO;
    }
    if (n == 0 || !token || n > vufq_max_segs(q, flags)) {
        return -EINVAL;
    }
    if (indirect && !q->indirect_ok) {
        return -ENOTSUP;
    }
    if (q->num_free < need) {
        return -ENOSPC;
    }
    head = q->free_head;
    if (indirect) {
        VRingDesc *table = q->indirect + (size_t)head * q->indirect_max;

        for (i = 0; i < n; i++) {
            fill_desc(&table[i], &segs[i], i + 1 < n, i + 1);
        }
        q->desc[head] = (VRingDesc) {
            .addr = q->indirect_gpa +
                    (uint64_t)head * q->indirect_max * sizeof(VRingDesc),
            .len = n * sizeof(VRingDesc),
            .flags = VRING_DESC_F_INDIRECT,
        };
        q->free_head = q->next[head];
    } else {
        idx = head;
        for (i = 0; i < n; i++) {
            fill_desc(&q->desc[idx], &segs[i], i + 1 < n, q->next[idx]);
            idx = q->next[idx];
        }
        q->free_head = idx;
    }
    if (q->log_segs) {
        vufq_log_note_chain(q, head, segs, n, indirect);
    }
    q->num_free -= need;
    q->chain_len[head] = need;
    q->tokens[head] = token;
    q->in_flight++;
    return head;
}

void vufq_publish(VufQueue *q, uint16_t head)
{
    /* Relaxed: ordered by the release store of avail->idx below. */
    atomic_store_explicit(&q->avail->ring[q->avail_idx % q->num], head,
                          memory_order_relaxed);
    if (head < q->num) {        /* tests publish impossible heads too */
        q->published_at[head] = q->avail_idx;
    }
    q->avail_idx++;
    /* Release: the descriptors and the ring entry above become visible
     * before the new index (pairs with the device's acquire load of
     * avail->idx). */
    atomic_store_explicit(&q->avail->idx, q->avail_idx, memory_order_release);
    vuf_stat_add(&q->stats.added, 1);
    SPINDLE_TRACE2(vuf_add, q->index, head);
}

int vufq_add(VufQueue *q, const VufSeg *segs, unsigned n, unsigned flags,
             void *token)
{
    int head = vufq_build_chain(q, segs, n, flags, token);

    if (head >= 0) {
        vufq_publish(q, head);
    }
    return head;
}

int vufq_kick_force(VufQueue *q)
{
    uint64_t one = 1;

    if (write(q->kick_fd, &one, sizeof(one)) != sizeof(one)) {
        return -errno;
    }
    vuf_stat_add(&q->stats.kicks, 1);
    SPINDLE_TRACE2(vuf_kick, q->index, q->avail_idx);
    return 1;
}

int vufq_kick(VufQueue *q)
{
    uint16_t old_idx = q->kicked_idx, new_idx = q->avail_idx;
    bool needed;

    if (!q->ready) {
        return -ENOTCONN;
    }
    if (old_idx == new_idx) {
        return 0;
    }
    q->kicked_idx = new_idx;
    /* Full fence: our avail->idx store before our read of the device's
     * suppression state (pairs with the device's fence between enabling
     * notifications and re-reading avail->idx). */
    atomic_thread_fence(memory_order_seq_cst);
    if (q->event_idx) {
        uint16_t event = atomic_load_explicit(q->avail_event,
                                              memory_order_relaxed);

        needed = vring_need_event(event, new_idx, old_idx);
    } else {
        needed = !(atomic_load_explicit(&q->used->flags,
                                        memory_order_relaxed) &
                   VRING_USED_F_NO_NOTIFY);
    }
    if (!needed) {
        vuf_stat_add(&q->stats.kicks_avoided, 1);
        SPINDLE_TRACE2(vuf_kick_avoided, q->index, new_idx);
        return 0;
    }
    return vufq_kick_force(q);
}

/* ------------------------------------------------------------------------ */
/* Completion                                                                */

static void free_chain(VufQueue *q, uint16_t head)
{
    uint16_t tail = head;
    unsigned i;

    for (i = 1; i < q->chain_len[head]; i++) {
        tail = q->next[tail];
    }
    q->next[tail] = q->free_head;
    q->free_head = head;
    q->num_free += q->chain_len[head];
    q->chain_len[head] = 0;
    q->retired[head] = q->tokens[head];
    q->tokens[head] = NULL;
    q->in_flight--;
}

static bool used_pending(VufQueue *q)
{
    /* Acquire: pairs with the device's release store of used->idx, so the
     * used elements (and the data it wrote) are visible once we see it. */
    return atomic_load_explicit(&q->used->idx, memory_order_acquire) !=
           q->last_used;
}

static int mark_broken(VufQueue *q)
{
    q->broken = true;
    return -EIO;
}

int vufq_get_used(VufQueue *q, void **token, uint32_t *len)
{
    uint16_t used_idx;
    VRingUsedElem elem;

    if (!q->ready) {
        return -ENOTCONN;
    }
    if (q->broken) {
        return -EIO;
    }
    /* Acquire: see used_pending(). */
    used_idx = atomic_load_explicit(&q->used->idx, memory_order_acquire);
    if (used_idx == q->last_used) {
        return 0;
    }
    if ((uint16_t)(used_idx - q->last_used) > q->in_flight) {
        return mark_broken(q);   /* more completions than requests */
    }
    elem = q->used->ring[q->last_used % q->num];
    if (elem.id >= q->num || !q->tokens[elem.id]) {
        q->bad_used = true;
        q->bad_id = elem.id;
        return mark_broken(q);
    }
    *token = q->tokens[elem.id];
    if (len) {
        *len = elem.len;
    }
    if (q->log_nsegs) {
        vufq_log_expect_chain(q, elem.id, q->last_used % q->num, elem.len);
    }
    free_chain(q, elem.id);
    q->last_used++;
    if (q->mode == VUF_COMPLETION_INTERRUPT) {
        if (q->event_idx) {
            store_used_event(q, q->last_used);
        }
    } else if (q->event_idx &&
               (uint16_t)(q->last_used - q->used_event_shadow) >=
               USED_EVENT_REFRESH) {
        store_used_event(q, q->last_used - 1);
    }
    vuf_stat_add(&q->stats.completed, 1);
    SPINDLE_TRACE3(vuf_complete, q->index, elem.id, elem.len);
    return 1;
}

static bool peer_hung_up(VufQueue *q)
{
    struct pollfd pfd = { .fd = vuf_socket_fd(q->fe), .events = POLLRDHUP };

    if (pfd.fd < 0) {
        return true;
    }
    return poll(&pfd, 1, 0) > 0 &&
           (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static int wait_poll(VufQueue *q, int64_t timeout_ns)
{
    int64_t deadline = timeout_ns < 0 ? INT64_MAX : now_ns() + timeout_ns;
    uint64_t spins;

    for (spins = 1;; spins++) {
        if (used_pending(q)) {
            vuf_stat_add(&q->stats.spins, spins - 1);
            return 0;
        }
        cpu_relax();
        if (spins % SPINS_PER_CLOCK_CHECK == 0 && now_ns() > deadline) {
            vuf_stat_add(&q->stats.spins, spins);
            return -ETIMEDOUT;
        }
        if (spins % SPINS_PER_HANGUP_CHECK == 0 && peer_hung_up(q)) {
            vuf_stat_add(&q->stats.spins, spins);
            return -ECONNRESET;
        }
    }
}

uint64_t vufq_collect_interrupts(VufQueue *q)
{
    uint64_t count;

    if (q->call_fd < 0 ||
        read(q->call_fd, &count, sizeof(count)) != sizeof(count)) {
        return 0;
    }
    vuf_stat_add(&q->stats.interrupts, count);
    SPINDLE_TRACE2(vuf_interrupt, q->index, count);
    return count;
}

static int wait_interrupt(VufQueue *q, int64_t timeout_ns)
{
    int64_t deadline = timeout_ns < 0 ? INT64_MAX : now_ns() + timeout_ns;

    for (;;) {
        struct pollfd pfd[2] = {
            { .fd = q->call_fd, .events = POLLIN },
            { .fd = vuf_socket_fd(q->fe), .events = POLLRDHUP },
        };
        int64_t left_ns = deadline - now_ns();
        int timeout_ms, r;

        /* Arm: ask for an interrupt at the next used entry. */
        if (q->event_idx) {
            store_used_event(q, q->last_used);
        } else {
            atomic_store_explicit(&q->avail->flags, 0, memory_order_relaxed);
        }
        /* Full fence: our arming before our re-read of used->idx (pairs
         * with the device's fence between its used->idx store and its
         * read of used_event/flags).  Either it sees us armed and signals,
         * or we see its entry now. */
        atomic_thread_fence(memory_order_seq_cst);
        if (used_pending(q)) {
            return 0;
        }
        if (left_ns <= 0) {
            return -ETIMEDOUT;
        }
        timeout_ms = deadline == INT64_MAX ? -1
                     : (int)MIN((left_ns + 999999) / 1000000, INT_MAX);
        r = poll(pfd, 2, timeout_ms);
        if (r < 0 && errno != EINTR) {
            return -errno;
        }
        if (r > 0 && (pfd[0].revents & POLLIN)) {
            if (vufq_collect_interrupts(q)) {
                vuf_stat_add(&q->stats.wakeups, 1);
            }
            continue;
        }
        if (r > 0 && pfd[1].revents) {
            return used_pending(q) ? 0 : -ECONNRESET;
        }
    }
}

int vufq_wait(VufQueue *q, int64_t timeout_ns)
{
    if (!q->ready) {
        return -ENOTCONN;
    }
    if (q->broken) {
        return -EIO;
    }
    if (used_pending(q)) {
        return 0;
    }
    if (q->mode == VUF_COMPLETION_POLL) {
        return wait_poll(q, timeout_ns);
    }
    return wait_interrupt(q, timeout_ns);
}

int vufq_add_data_segs(VufSeg *segs, unsigned *n, unsigned max, uint64_t gpa,
                       size_t len, unsigned pieces, uint32_t limit,
                       bool device_writes)
{
    size_t piece, done = 0;

    pieces = MAX(pieces, 1);
    piece = len / pieces;
    if (piece >= DATA_PIECE_UNIT) {
        piece -= piece % DATA_PIECE_UNIT;
    }
    if (piece == 0) {
        piece = len;
    }
    for (unsigned p = 0; done < len; p++) {
        size_t this_piece = p + 1 >= pieces ? len - done
                                            : MIN(piece, len - done);
        size_t off = 0;

        while (off < this_piece) {
            uint32_t seg_len = MIN(this_piece - off, limit);

            if (*n >= max - 1) {
                return -E2BIG;
            }
            segs[(*n)++] = (VufSeg) {
                .gpa = gpa + done + off,
                .len = seg_len,
                .device_writes = device_writes,
            };
            off += seg_len;
        }
        done += this_piece;
    }
    return 0;
}

int vufq_do_one(VufQueue *q, int added, void *token, int64_t timeout_ns,
                uint32_t *used_len)
{
    int64_t deadline = timeout_ns < 0 ? -1 : now_ns() + timeout_ns;
    void *done = NULL;
    uint32_t len = 0;
    int r;

    if (added < 0) {
        return added;
    }
    r = vufq_kick(q);
    if (r < 0) {
        return r;
    }
    for (;;) {
        r = vufq_wait(q, deadline < 0 ? -1 : MAX(deadline - now_ns(), 0));
        if (r < 0) {
            return r;
        }
        r = vufq_get_used(q, &done, &len);
        if (r < 0) {
            return r;
        }
        if (r == 1 && done == token) {
            break;
        }
        if (r == 0 || !q->other_done) {
            return -EIO;    /* someone else's: misuse or a bad device */
        }
        q->other_done(q, done, len, q->other_opaque);
    }
    if (used_len) {
        *used_len = len;
    }
    return 0;
}

/*
 * Inflight I/O tracking for split virtqueues (vhost-user
 * VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD): a region of shared memory in
 * which the back-end logs the requests it has taken from each ring and
 * not yet returned, so that a new back-end process, after a crash or an
 * upgrade, can finish exactly those.
 *
 * The front-end asks for the region (GET_INFLIGHT_FD), keeps the fd, and
 * hands it back to every back-end it connects to (SET_INFLIGHT_FD).  The
 * layout is the one QEMU's docs/interop/vhost-user.rst ("Inflight I/O
 * tracking") gives for split rings: per queue, one VhostInflightHeader and
 * then one VhostInflightDesc per descriptor of the ring, queues back to
 * back, in the host's byte order.  Spindle rounds each queue's part up to
 * a cache line (VHOST_INFLIGHT_ALIGN), so two queues, which may run in two
 * IOThreads, never share one.
 *
 * What this module offers:
 *   - the layout and its sizes;
 *   - vhost_inflight_memfd_new(): a new region, as a memfd sealed against
 *     shrinking and growing (what GET_INFLIGHT_FD answers with);
 *   - vhost_inflight_map(): check a region handed back (its size, its
 *     seals) and map it, as a reference-counted VhostInflight;
 *   - the per-request bookkeeping, inline below (VhostInflightTrack):
 *     mark on pop, link and clear around the used-ring update on push;
 *   - vhost_inflight_resume(): what a queue start does with a region,
 *     as a function of the region and the used index alone (initialise
 *     a fresh one; finish an interrupted used-ring update; list the
 *     requests to resubmit, in the order they were first taken).
 *
 * The region is shared with the front-end, which is not trusted: every
 * count, size and index read from it is checked, and every walk is
 * bounded.  A bad region makes the queue start fail with a message; it
 * never stops the process.
 *
 * Threads: VhostInflight may be referenced and released from any thread;
 * a VhostInflightTrack and the queue part of the region it points to
 * belong to one queue's home thread.
 */
#ifndef SPINDLE_HW_VIRTIO_VHOST_INFLIGHT_H
#define SPINDLE_HW_VIRTIO_VHOST_INFLIGHT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <glib.h>
#include "hw/virtio/guest-memory.h"
#include "util/error.h"

/* The only layout version; 0 means "never used by a back-end". */
#define VHOST_INFLIGHT_VERSION 1

/* Largest queue_size GET_INFLIGHT_FD accepts (the spec's largest ring). */
#define VHOST_INFLIGHT_MAX_QUEUE_SIZE 32768

/* Each queue's part of the region starts on its own cache line. */
#define VHOST_INFLIGHT_ALIGN 64

/* One queue's header. */
typedef struct VhostInflightHeader {
    uint64_t features;           /* 0: none defined */
    uint16_t version;            /* VHOST_INFLIGHT_VERSION, 0: fresh */
    uint16_t desc_num;           /* entries that follow */
    uint16_t last_batch_head;    /* the last element pushed */
    uint16_t used_idx;           /* used->idx once that push was complete */
} VhostInflightHeader;

/* One descriptor's entry, indexed by the head of a chain. */
typedef struct VhostInflightDesc {
    uint8_t inflight;            /* 1: taken from the ring, not returned */
    uint8_t padding[5];
    uint16_t next;               /* the element pushed before this one */
    uint64_t counter;            /* when it was taken: the order to redo */
} VhostInflightDesc;

typedef struct VhostInflightQueue {
    VhostInflightHeader hdr;
    VhostInflightDesc desc[];
} VhostInflightQueue;

G_STATIC_ASSERT(sizeof(VhostInflightHeader) == 16);
G_STATIC_ASSERT(sizeof(VhostInflightDesc) == 16);
G_STATIC_ASSERT(offsetof(VhostInflightDesc, next) == 6);
G_STATIC_ASSERT(offsetof(VhostInflightQueue, desc) == 16);

/* ------------------------------------------------------------------------ */
/* Sizes and the region                                                      */

/* Bytes of one queue's part for rings of queue_size entries. */
uint64_t vhost_inflight_queue_bytes(unsigned queue_size);

/* Bytes of a region of num_queues queues of queue_size entries. */
uint64_t vhost_inflight_region_bytes(unsigned num_queues,
                                     unsigned queue_size);

/*
 * Check a region's shape as a front-end gives it: num_queues from 1 to
 * max_queues, queue_size a power of two from 1 to
 * VHOST_INFLIGHT_MAX_QUEUE_SIZE.  what names the request in the message.
 * Any thread.
 */
bool vhost_inflight_check_shape(const char *what, unsigned num_queues,
                                unsigned queue_size, unsigned max_queues,
                                Error **errp);

/*
 * A new, zeroed region of size bytes: a close-on-exec memfd sealed
 * against shrinking, growing and further sealing, so whoever maps it can
 * never be faulted by a truncation.  Returns the fd (the caller's), or -1
 * with errp set.  Any thread.
 */
int vhost_inflight_memfd_new(uint64_t size, Error **errp);

typedef struct VhostInflight VhostInflight;

/*
 * Check and map a region handed back by the front-end (SET_INFLIGHT_FD):
 * num_queues queues of queue_size entries (vhost_inflight_check_shape()
 * with max_queues), at least vhost_inflight_region_bytes() in mmap_size,
 * mmap_offset page-aligned, all of it inside fd's file, and fd sealed
 * against shrinking (F_SEAL_SHRINK; otherwise the front-end could cut the
 * file under our mapping and the next access would kill the process with
 * SIGBUS).  fd stays the caller's.  Returns a new reference, or NULL with
 * errp set.  Any thread.
 */
VhostInflight *vhost_inflight_map(int fd, uint64_t mmap_size,
                                  uint64_t mmap_offset, unsigned num_queues,
                                  unsigned queue_size, unsigned max_queues,
                                  Error **errp);

/* A VhostInflight is a SharedMapping (guest-memory.h): take and drop
 * references with shared_mapping_ref() / shared_mapping_unref(); the last
 * one unmaps.  Any thread. */

unsigned vhost_inflight_num_queues(const VhostInflight *r);
unsigned vhost_inflight_queue_size(const VhostInflight *r);

/* Queue i's part (i < vhost_inflight_num_queues()).  Valid while the
 * caller holds a reference. */
VhostInflightQueue *vhost_inflight_get_queue(VhostInflight *r, unsigned i);

/* ------------------------------------------------------------------------ */
/* Resuming a queue                                                          */

typedef struct VhostInflightResume {
    /* In */
    uint16_t used_idx;           /* used->idx as read from guest memory */
    unsigned num;                /* the ring's size */
    uint16_t *heads;             /* room for num heads */
    /* Out */
    unsigned nheads;             /* heads[0..nheads): to resubmit, in the
                                  * order they were first taken */
    uint64_t next_counter;       /* first counter for new requests */
    uint16_t last_batch_head;    /* the header's, after resuming */
    bool fresh;                  /* the region was unused: initialised */
    unsigned batch;              /* entries of an interrupted used-ring
                                  * update whose flags were cleared */
} VhostInflightResume;

/*
 * Bring queue part q (room for capacity entries: the region's queue_size)
 * in line with the used ring before the queue starts.  A ring of more
 * than capacity entries is refused.  Then:
 *   - version 0 (never used): initialise it for capacity entries at used
 *     index r->used_idx; nothing to resubmit;
 *   - version 1: if the header's used_idx lags r->used_idx, the last
 *     (r->used_idx - used_idx) pushes reached the used ring but not the
 *     log: walk them from last_batch_head and clear their flags; then
 *     every entry below r->num still marked is listed in r->heads by
 *     increasing counter.
 * Every field is read once and checked: another version, desc_num above
 * capacity or below r->num, a batch longer than desc_num or a walk that
 * leaves the table are refused with why set (one line) and -EINVAL, the
 * region unchanged apart from what a walk already cleared.  A function of
 * the region and r alone (it allocates a scratch array for the sort);
 * the thread that owns the queue, before the queue runs.
 */
int vhost_inflight_resume(VhostInflightQueue *q, unsigned capacity,
                          VhostInflightResume *r, char *why, size_t why_len);

/* ------------------------------------------------------------------------ */
/* The per-request bookkeeping (the queue's home thread)                     */

/*
 * A running queue's view of its part of the region.  The counter and the
 * last pushed head are kept here too, so the hot path only stores into
 * the region and never trusts what the front-end may have written there.
 *
 * Why plain stores and compiler barriers are enough: nobody reads the
 * region while this process runs (the front-end reads it, if at all,
 * after we died, and the next back-end only at its queue start).  A
 * killed process loses no store it executed: its stores reach the shared
 * page whatever order the CPU retires them in.  So what matters is only
 * the order in which the program issues them, which atomic_signal_fence()
 * fixes against the compiler, and a crash may cut that order between any
 * two stores.  vhost_inflight_resume() handles every such cut.
 */
typedef struct VhostInflightTrack {
    VhostInflightQueue *q;       /* NULL: not tracking */
    uint64_t next_counter;
    uint16_t last_head;
} VhostInflightTrack;

/*
 * Head (< the ring's size) was taken from the ring.  The counter first,
 * then the flag: cut between the two, the entry is not marked and the
 * request is taken from the avail ring again, as the next back-end
 * starts at used index + marked entries, which is where this one was.
 */
static inline void vhost_inflight_mark(VhostInflightTrack *t, uint16_t head)
{
    VhostInflightDesc *d = &t->q->desc[head];

    d->counter = t->next_counter++;
    atomic_signal_fence(memory_order_seq_cst);
    d->inflight = 1;
}

/*
 * Before head's used element is written: link it into the batch list.
 * Cut before the used index moves, head is still marked and is redone;
 * nothing of the batch list matters while used->idx == header used_idx.
 */
static inline void vhost_inflight_link(VhostInflightTrack *t, uint16_t head)
{
    t->q->desc[head].next = t->last_head;
    t->q->hdr.last_batch_head = head;
    t->last_head = head;
    atomic_signal_fence(memory_order_seq_cst);
}

/*
 * After used->idx was stored as used_idx: the request is the driver's.
 * Cut before the flag is cleared, or between the flag and the header,
 * used->idx is one ahead of the header's used_idx and the resume walk,
 * starting at last_batch_head (head), clears the flag: never redone.
 */
static inline void vhost_inflight_clear(VhostInflightTrack *t, uint16_t head,
                                        uint16_t used_idx)
{
    atomic_signal_fence(memory_order_seq_cst);
    t->q->desc[head].inflight = 0;
    atomic_signal_fence(memory_order_seq_cst);
    t->q->hdr.used_idx = used_idx;
}

#endif

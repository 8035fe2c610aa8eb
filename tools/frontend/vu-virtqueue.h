/*
 * vu-virtqueue: the driver side of a split virtqueue (vu-virtqueue.c).
 */
#ifndef SPINDLE_TOOLS_VU_VIRTQUEUE_H
#define SPINDLE_TOOLS_VU_VIRTQUEUE_H

#include "vu-types.h"

/* ------------------------------------------------------------------------ */
/* Virtqueue driver (data path: one thread per queue at a time)             */

typedef struct VufSeg {
    uint64_t gpa;               /* guest address of the buffer */
    uint32_t len;
    bool device_writes;         /* VRING_DESC_F_WRITE: the device fills it */
} VufSeg;

/* vufq_add() flags. */
#define VUFQ_ADD_INDIRECT       1u  /* put the chain in an indirect table */

typedef struct VufQueueStats {
    uint64_t added;             /* chains put in the available ring */
    uint64_t completed;         /* used elements harvested */
    uint64_t kicks;             /* kick eventfd writes */
    uint64_t kicks_avoided;     /* vufq_kick() calls the device said to skip */
    uint64_t interrupts;        /* call eventfd signals received */
    uint64_t wakeups;           /* blocking waits that returned on the fd */
    uint64_t spins;             /* poll-mode looks at used->idx that found
                                 * nothing */
} VufQueueStats;

/* Queue index, size, and whether it is set up in the current session. */
unsigned vufq_index(const VufQueue *q);
unsigned vufq_size(const VufQueue *q);
bool vufq_ready(const VufQueue *q);
VuFrontend *vufq_frontend(const VufQueue *q);

/*
 * Choose how vufq_wait() detects completions and tell the device whether we
 * want interrupts (VRING_AVAIL_F_NO_INTERRUPT, or used_event with
 * EVENT_IDX).  Call while nothing is in flight, or between waits.
 */
void vufq_set_completion(VufQueue *q, VufCompletion mode);
VufCompletion vufq_completion(const VufQueue *q);

/* Free descriptors, and chains added but not yet harvested. */
unsigned vufq_free_descs(const VufQueue *q);
unsigned vufq_in_flight(const VufQueue *q);
/* Largest chain vufq_add() accepts with/without VUFQ_ADD_INDIRECT. */
unsigned vufq_max_segs(const VufQueue *q, unsigned flags);

/*
 * Add a descriptor chain of n segments (readable ones must come before
 * device-writable ones) and publish it in the available ring (release
 * store of avail->idx).  token (not NULL) comes back from vufq_get_used().
 * Does not kick.  Returns the head index, -ENOSPC if there are not enough
 * free descriptors, -EINVAL for n == 0, a NULL token or a too long chain,
 * -ENOTSUP for VUFQ_ADD_INDIRECT without INDIRECT_DESC, -EIO on a broken
 * queue, -ENOTCONN if the queue is not set up.
 */
int vufq_add(VufQueue *q, const VufSeg *segs, unsigned n, unsigned flags,
             void *token);

/*
 * What vufq_do_one() (and so vufblk_do(), vufscsi_do()) does with a
 * completion of another chain than the one it waits for: by default it
 * fails with -EIO; with a handler set it calls cb(q, token, len, opaque)
 * and goes on waiting.  For callers that leave requests in flight
 * (submitted without waiting) while they run synchronous ones.  cb NULL
 * removes the handler.  The queue's thread.
 */
typedef void VufqOtherDone(VufQueue *q, void *token, uint32_t len,
                           void *opaque);
void vufq_set_other_done(VufQueue *q, VufqOtherDone *cb, void *opaque);

/* The available ring index the next chain added will be published at. */
uint16_t vufq_avail_idx(const VufQueue *q);

/*
 * Kick the device if it wants to know about the chains added since the last
 * kick: with EVENT_IDX when they cross used->avail_event, otherwise unless
 * VRING_USED_F_NO_NOTIFY is set.  Returns 1 if it kicked, 0 if the kick was
 * avoided or nothing was added, -errno if the eventfd write failed.
 */
int vufq_kick(VufQueue *q);

/*
 * Harvest one used element: 1 with *token and *len (bytes the device
 * wrote) set, 0 if there is none, -EIO if the device returned an id that is
 * not in flight or moved used->idx by more than the queue size (the queue
 * is then broken until the next session).
 */
int vufq_get_used(VufQueue *q, void **token, uint32_t *len);

/*
 * Whether vufq_get_used() broke the queue because the device returned a
 * used element whose id is not a chain in flight (after vuf_resume(): a
 * request the device had completed already, run again).  If so: *head
 * the id, *token the token of the chain that last completed at that head
 * (NULL if none did in this queue's life) and *avail_pos the available
 * ring index it had been published at.  Any pointer may be NULL.  The
 * queue's thread.
 */
bool vufq_bad_used(const VufQueue *q, unsigned *head, void **token,
                   uint16_t *avail_pos);

/*
 * Wait until a used element is ready or timeout_ns passes (< 0: forever):
 * spin on used->idx in poll mode, arm interrupts and block on the call
 * eventfd in interrupt mode.  Returns 0 when one is ready, -ETIMEDOUT,
 * -ECONNRESET if the back-end hung up, -EIO on a broken queue, -ENOTCONN.
 */
int vufq_wait(VufQueue *q, int64_t timeout_ns);

/*
 * Read the call eventfd without blocking and add what it counted to the
 * interrupts (e.g. at the end of a poll-mode run, to see whether the device
 * signalled although we asked it not to).  Returns the count read, or 0.
 * The queue's thread.
 */
uint64_t vufq_collect_interrupts(VufQueue *q);

/*
 * The call eventfd of the current session, or -1 when the queue is not set
 * up.  For a caller that must block on it with a finer timeout than
 * vufq_wait()'s milliseconds, or together with other fds: arm and re-check
 * first with vufq_wait(q, 0) in interrupt mode (it returns 0 if a used
 * element is ready, -ETIMEDOUT otherwise), block until the fd is readable,
 * then count the signal with vufq_collect_interrupts().  The fd stays the
 * queue's: do not read or close it.  The queue's thread.
 */
int vufq_call_fd(const VufQueue *q);

/* Copy the counters (any thread). */
void vufq_get_stats(const VufQueue *q, VufQueueStats *out);
/* Zero the counters (the queue's thread). */
void vufq_reset_stats(VufQueue *q);
/* True once the device returned something impossible on this queue. */
bool vufq_broken(const VufQueue *q);
/*
 * The error eventfd of the current session (SET_VRING_ERR), or -1 when the
 * queue is not set up.  The fd stays the queue's: do not read or close it.
 */
int vufq_err_fd(const VufQueue *q);
/*
 * True once the device signalled the queue's error eventfd in this
 * session: it found the ring or a request malformed and stopped the queue
 * (a non-blocking look; it stays true until the next session).
 */
bool vufq_error_signalled(VufQueue *q);

/*
 * Ring access for tests that craft their own chains.  The pointers stay
 * valid until vuf_free(); writing through them bypasses every check.
 */
VRingDesc *vufq_desc_table(VufQueue *q);
VRingAvail *vufq_avail(VufQueue *q);
VRingUsed *vufq_used(VufQueue *q);

#endif

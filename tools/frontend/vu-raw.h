/*
 * vu-raw: lower-level access to a VuFrontend, for tests of a device or of
 * a vhost-user back-end.
 *
 * Three kinds of test need more than vu-frontend.h gives:
 *
 * - Tests that set the back-end's rings up themselves: in-process, with no
 *   vhost-user socket between driver and device, or over a socket
 *   connected with vuf_connect_socket() alone, message by message
 *   (vuf_send_raw()).  vuf_start_local() starts a session without telling
 *   any back-end: every queue gets fresh rings and eventfds exactly as
 *   vuf_setup_queues() would give them, and the features are taken as
 *   negotiated.  The caller then hands the device what the vhost-user
 *   messages carry: the guest memory (vuf_mem_fd(): one region, guest
 *   address 0, file offset 0, vuf_mem_size() bytes at vuf_mem_base()),
 *   each queue's size and ring addresses (vufq_size(), vufq_ring_gpas()),
 *   its kick and call eventfds (vufq_kick_fd(), vufq_call_fd(); they stay
 *   the queue's: send or dup() them) and its start index
 *   (vufq_set_base()).  vufq_renew_kick_fd() and vufq_renew_call_fd()
 *   replace an eventfd, as a front-end does when it re-plumbs a queue.
 *   vuf_disconnect() ends the session.  With no socket, vufq_wait() in
 *   poll mode takes the missing socket for a hang-up after a while: such
 *   tests poll the used ring with vufq_get_used() or wait in interrupt mode.
 *
 * - Tests that put chains in the ring that the driver itself would not:
 *   vufq_add_unpublished() builds a chain and leaves it unpublished, so
 *   that the caller can alter its descriptors (vufq_desc_table()) before
 *   vufq_publish_head() makes it available; vufq_publish_head() also takes
 *   any head at all, valid or not.  vufq_kick_always() kicks whatever the
 *   device asked for.  vufq_get_used_head() tells which chain the device
 *   completed.
 *
 * - Tests of a back-end's framing: vuf_send_bytes() sends any bytes with
 *   any number of fds (half a header, more fds than a message may carry).
 *
 * Threads: vuf_start_local() is a control-path call (the thread that
 * created the front-end, no queue in use); the vufq_*() functions belong to
 * the queue's thread, as in vu-frontend.h.
 */
#ifndef SPINDLE_TOOLS_VU_RAW_H
#define SPINDLE_TOOLS_VU_RAW_H

#include "vu-frontend.h"

/* The memfd behind the guest memory (the front-end's: do not close it). */
int vuf_mem_fd(const VuFrontend *fe);

/*
 * Start every queue's session without setting it up in a back-end:
 * features (a subset of what the device offers, chosen by the caller)
 * count as negotiated, and every queue is reset and gets new eventfds.
 * False with errp set if a queue is already set up (vuf_connect() did it,
 * or an earlier call: vuf_disconnect() first) or the eventfds cannot be
 * created.
 */
bool vuf_start_local(VuFrontend *fe, uint64_t features, Error **errp);

/* Guest addresses of queue q's descriptor table, available and used
 * rings (any of the pointers may be NULL). */
void vufq_ring_gpas(const VufQueue *q, uint64_t *desc, uint64_t *avail,
                    uint64_t *used);

/* The kick eventfd of the current session, or -1 when the queue is not
 * set up.  The fd stays the queue's: do not read or close it. */
int vufq_kick_fd(const VufQueue *q);

/*
 * Replace queue q's kick (call) eventfd with a new one and close the old
 * one: chains added from now on are kicked (completions signalled) on the
 * new fd, which the caller hands the device (SET_VRING_KICK / _CALL).
 * Returns the new fd (the queue's: do not close it) or -errno;
 * -ENOTCONN if the queue is not set up.  The queue's thread, between
 * waits.
 */
int vufq_renew_kick_fd(VufQueue *q);
int vufq_renew_call_fd(VufQueue *q);

/*
 * Start the rings at index base instead of 0, as a driver resuming a
 * queue that the device stopped at base does: avail->idx and used->idx
 * and the driver's own indexes become base.  The caller tells the device
 * (SET_VRING_BASE or its equivalent).  Only while nothing is in flight:
 * returns 0, -EBUSY otherwise, -ENOTCONN if the queue is not set up.
 */
int vufq_set_base(VufQueue *q, uint16_t base);

/*
 * Build the chain as vufq_add() does (same arguments and errors) but do
 * not publish it: returns the head, whose descriptors (or indirect table)
 * the caller may now change through vufq_desc_table() and guest memory.
 */
int vufq_add_unpublished(VufQueue *q, const VufSeg *segs, unsigned n,
                         unsigned flags, void *token);

/*
 * Put head in the next available ring entry and publish it (release
 * store of avail->idx).  head is not checked: a chain from
 * vufq_add_unpublished(), or anything a test wants the device to see.
 */
void vufq_publish_head(VufQueue *q, uint16_t head);

/* Write the kick eventfd whatever the device asked for.  1, or -errno. */
int vufq_kick_always(VufQueue *q);

/*
 * vufq_get_used(), also storing the used element's id (the head of the
 * chain the device completed) in *head (may be NULL).
 */
int vufq_get_used_head(VufQueue *q, uint16_t *head, void **token,
                       uint32_t *len);

/* Most fds vuf_send_bytes() takes. */
#define VUF_SEND_BYTES_MAX_FDS  32

/*
 * Send buf[0..len) to the back-end as they are, in one sendmsg(), with
 * nfds (<= VUF_SEND_BYTES_MAX_FDS) descriptors attached (they stay ours):
 * a header cut short, a message with more fds than the protocol allows.
 * False with errp set if not connected, or if the send fails or is short.
 * Control thread.
 */
bool vuf_send_bytes(VuFrontend *fe, const void *buf, size_t len,
                    const int *fds, size_t nfds, Error **errp);

#endif

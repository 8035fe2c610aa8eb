/*
 * vu-frontend: a guest-less vhost-user front-end (the part QEMU plays).
 *
 * A VuFrontend owns a block of "guest memory" (a memfd mapped in this
 * process), connects to a vhost-user back-end over a UNIX socket, negotiates
 * features, shares the memory with the back-end and sets up N split
 * virtqueues whose rings live in that memory.  Callers then drive the queues
 * like a guest driver: put descriptor chains in the available ring, kick the
 * back-end when it wants to be kicked, and harvest the used ring by polling
 * or by blocking on the call eventfd.  A virtio-blk layer on top builds
 * requests (read, write, flush, get-id, discard, write-zeroes), and a
 * virtio-scsi layer (vu-scsi.c) commands with a CDB, task management and
 * asynchronous notification on the control queue, and event buffers.
 *
 * Users: tools/vu-client/ (spindle-vu-client, the command-line
 * driver used by the functional tests) and spindle-bench (tools/bench), which
 * drives each queue from its own pinned thread.
 *
 * Threads
 * -------
 * - Control path (everything taking Error **, and vuf_free/disconnect):
 *   the "control thread", the one that called vuf_new() (asserted).  It
 *   connects, negotiates, stops queues, sends raw messages, disconnects.
 *   It must not disconnect or reconnect while another thread uses a queue.
 * - Data path (vufq_*, vufblk_* except vufblk_req_new/free): each VufQueue
 *   is used by one thread at a time, which need not be the control thread;
 *   different queues may run in different threads with no locking.  These
 *   functions return 0 / a count or a negative errno.
 * - The guest memory allocator (vuf_mem_alloc/free) is thread-safe.
 * - Statistics (vufq_get_stats) may be read from any thread at any time.
 *
 * Crash recovery: with INFLIGHT_SHMFD the front-end keeps the back-end's
 * inflight region and hands it to the next back-end; vuf_resume() goes on
 * after the back-end died, keeping rings and requests in flight
 * (vu-inflight.c).
 *
 * Migration: with LOG_SHMFD, vuf_log_start() and vuf_log_stop() switch
 * dirty page logging on and off on running rings as QEMU does, and the
 * front-end knows which pages the device must have dirtied meanwhile
 * (vu-dirty-log.c).
 *
 * Guest memory layout
 * -------------------
 * One region, guest physical address 0, user address = our mapping.  The
 * rings and indirect tables of every queue are carved out of it when the
 * VuFrontend is created; the rest is handed out by vuf_mem_alloc().  Memory
 * (and so every buffer) survives a reconnect; rings are reset (but by
 * vuf_resume()).
 *
 * Byte order: the rings and virtio-blk structures are little-endian; this
 * code only builds on little-endian hosts.
 *
 * Headers, one concern each (this one includes them all):
 *   vu-types.h         the handles and enums every part names
 *   vu-features.h      default feature sets and feature bit names
 *   vu-session.h       options, lifecycle, negotiation, device config
 *   vu-guest-mem.h     guest memory and its allocator
 *   vu-msg.h           raw vhost-user messages (back-end tests)
 *   vu-backend-chan.h  the back-end channel
 *   vu-inflight.h      the inflight region; resuming after a crash
 *   vu-dirty-log.h     dirty page logging, as a migration drives it
 *   vu-virtqueue.h     the split-ring driver
 *   vu-faults.h        malformed rings (back-end tests)
 *   vu-blk.h           virtio-blk requests
 *   vu-scsi.h          virtio-scsi commands, control requests, events
 */
#ifndef SPINDLE_TOOLS_VU_FRONTEND_H
#define SPINDLE_TOOLS_VU_FRONTEND_H

#include "vu-backend-chan.h"
#include "vu-blk.h"
#include "vu-dirty-log.h"
#include "vu-faults.h"
#include "vu-features.h"
#include "vu-guest-mem.h"
#include "vu-inflight.h"
#include "vu-msg.h"
#include "vu-scsi.h"
#include "vu-session.h"
#include "vu-types.h"
#include "vu-virtqueue.h"

#endif

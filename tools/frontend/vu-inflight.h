/*
 * vu-inflight: the inflight I/O tracking region a front-end keeps for its
 * back-end (VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD), and resuming a session
 * after the back-end died (vu-inflight.c).
 */
#ifndef SPINDLE_TOOLS_VU_INFLIGHT_H
#define SPINDLE_TOOLS_VU_INFLIGHT_H

#include "vu-types.h"

typedef struct VufInflightInfo {
    bool negotiated;            /* this session has INFLIGHT_SHMFD */
    bool have_region;           /* a region is kept (and was handed over) */
    uint64_t mmap_size;         /* its size, 0 without one */
    unsigned gets;              /* GET_INFLIGHT_FD sent for this region */
    unsigned sets;              /* SET_INFLIGHT_FD sent with it */
    unsigned resumes;           /* sessions vuf_resume() started */
    unsigned resume_retries;    /* ... tries the back-end dropped */
} VufInflightInfo;

/* What the front-end knows of its inflight region.  Control thread. */
void vuf_inflight_info(const VuFrontend *fe, VufInflightInfo *out);

/*
 * Go on after the back-end died, as QEMU does with a reconnecting
 * chardev: wait until the socket hangs up, connect again (retrying while
 * nobody listens), negotiate (handing the inflight region back with
 * SET_INFLIGHT_FD when the new back-end offers INFLIGHT_SHMFD), and set
 * every queue up on its rings as they are, chains in flight included,
 * with SET_VRING_BASE = the used ring's index; then kick the queues that
 * have chains in flight.  A back-end that tracks them finishes exactly
 * those; one that does not starts at the used index, so it runs again
 * what completed after it (vufq_bad_used()) or never finishes what it had
 * (the caller's timeout says so).  Everything happens within timeout_ms.
 *
 * A connection the back-end drops before the session is up is tried
 * again (a process on its way out may still take one).
 *
 * Fails with errp set when the socket does not hang up, nobody listens
 * again in time, the new back-end negotiates other virtio features (the
 * rings could not be kept), or any step of the session fails; the
 * front-end is then disconnected, its rings still as they were, and
 * vuf_resume() may be tried again.  Control thread; no queue in use by
 * another thread.
 */
bool vuf_resume(VuFrontend *fe, int timeout_ms, Error **errp);

#endif

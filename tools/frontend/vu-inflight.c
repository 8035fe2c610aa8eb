/*
 * vu-inflight: the front-end's side of inflight I/O tracking, and resuming
 * after the back-end died.
 *
 * Theory of operation
 * -------------------
 * With VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD the back-end logs, in a region
 * of shared memory it creates, which requests it took from each ring and
 * has not answered yet.  The front-end asks for the region once
 * (GET_INFLIGHT_FD with its queue count and size, answered with the
 * region's size and an fd), maps it and keeps fd and mapping, and hands
 * the region to every back-end it talks to on these rings
 * (SET_INFLIGHT_FD), so that a new back-end process finds the old one's
 * log.  As QEMU 7.2 does, both messages go after the protocol features
 * and the device config and before SET_FEATURES (vuf_negotiate() calls
 * vuf_inflight_negotiate()).  The front-end never reads the region.
 *
 * The region belongs to the rings: a session that starts on reset rings
 * (vuf_connect(), vuf_reconnect()) after the region was handed over once
 * drops it and asks for a new one, as QEMU does on a device reset, since
 * the old log describes rings that are gone.  Only vuf_resume() keeps it.
 *
 * vuf_resume() is what QEMU does when the back-end's socket drops and the
 * chardev reconnects: GET_VRING_BASE cannot be asked on a dead socket, so
 * every ring is rewound to its used index, and the next session sends
 * SET_VRING_BASE with that.  Guest memory, descriptors, both rings and the
 * driver's bookkeeping of the chains in flight stay as they are
 * (vufq_session_resume()).  The virtio features must come out the same,
 * or the rings would mean something else to the new back-end.
 *
 * Everything here runs in the control thread; see vu-frontend.h.
 */

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib.h>

#include "vu-frontend-int.h"

/* Largest region we map: far above what any ring shape needs (64 queues
 * of 32768 entries take 32 MiB). */
#define INFLIGHT_MAX_BYTES      (1ull << 30)

/* Pause between two tries of vuf_resume() at a session. */
#define RESUME_RETRY_MS         20

/* ------------------------------------------------------------------------ */
/* The region                                                                */

void vuf_inflight_free(VuFrontend *fe)
{
    if (fe->inflight_mem) {
        munmap(fe->inflight_mem, fe->inflight.mmap_size);
        fe->inflight_mem = NULL;
    }
    vuf_close_fd(&fe->inflight_fd);
    fe->inflight = (VhostUserInflight) { 0 };
    fe->inflight_gets = fe->inflight_sets = 0;
}

/* Check the region the back-end described in d and map it from fd. */
static bool inflight_map(VuFrontend *fe, const VhostUserInflight *d, int fd,
                         Error **errp)
{
    long page = sysconf(_SC_PAGESIZE);
    struct stat st;
    void *mem;

    if (fd < 0) {
        error_setg(errp, "GET_INFLIGHT_FD: the reply describes a %" PRIu64
                   "-byte region but carries no fd", d->mmap_size);
        return false;
    }
    if (d->mmap_size > INFLIGHT_MAX_BYTES || d->mmap_offset % page ||
        d->mmap_offset > INFLIGHT_MAX_BYTES) {
        error_setg(errp, "GET_INFLIGHT_FD: a region of %" PRIu64 " bytes at "
                   "offset %" PRIu64 " cannot be right (at most %llu bytes, "
                   "page-aligned offset)", d->mmap_size, d->mmap_offset,
                   INFLIGHT_MAX_BYTES);
        return false;
    }
    if (fstat(fd, &st) < 0) {
        error_setg_errno(errp, errno, "GET_INFLIGHT_FD: cannot stat the fd");
        return false;
    }
    if ((uint64_t)st.st_size < d->mmap_offset + d->mmap_size) {
        error_setg(errp, "GET_INFLIGHT_FD: the region ends at byte %" PRIu64
                   " of a file of %lld bytes", d->mmap_offset + d->mmap_size,
                   (long long)st.st_size);
        return false;
    }
    mem = mmap(NULL, d->mmap_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
               d->mmap_offset);
    if (mem == MAP_FAILED) {
        error_setg_errno(errp, errno, "GET_INFLIGHT_FD: cannot map the "
                         "region");
        return false;
    }
    fe->inflight_mem = mem;
    fe->inflight_fd = fd;
    /* What SET_INFLIGHT_FD says: the back-end's size and offset, our
     * shape (as QEMU sends it). */
    fe->inflight = (VhostUserInflight) {
        .mmap_size = d->mmap_size,
        .mmap_offset = d->mmap_offset,
        .num_queues = fe->num_queues,
        .queue_size = fe->opts.queue_size,
    };
    return true;
}

/* GET_INFLIGHT_FD: ask for a region for our queues and keep it. */
static bool inflight_get(VuFrontend *fe, Error **errp)
{
    VhostUserInflight d = {
        .num_queues = fe->num_queues,
        .queue_size = fe->opts.queue_size,
    };
    int fd;

    if (!vuf_send_raw(fe, VHOST_USER_GET_INFLIGHT_FD, VHOST_USER_VERSION, &d,
                      sizeof(d), NULL, 0, errp) ||
        !vuf_read_reply_fd(fe, VHOST_USER_GET_INFLIGHT_FD, &d, sizeof(d), &fd,
                           errp)) {
        return false;
    }
    fe->inflight_gets++;
    if (d.mmap_size == 0) {
        /* The back-end has no region for us: go on without one. */
        vuf_close_fd(&fd);
        return true;
    }
    if (!inflight_map(fe, &d, fd, errp)) {
        vuf_close_fd(&fd);
        return false;
    }
    return true;
}

bool vuf_inflight_negotiate(VuFrontend *fe, Error **errp)
{
    if (!vuf_has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD)) {
        return true;
    }
    if (!fe->resuming && fe->inflight_sets) {
        /* New rings: the old log no longer describes them. */
        vuf_inflight_free(fe);
    }
    if (fe->inflight_fd < 0 && !inflight_get(fe, errp)) {
        return false;
    }
    if (fe->inflight_fd < 0) {
        return true;
    }
    if (!vuf_request_set(fe, VHOST_USER_SET_INFLIGHT_FD, &fe->inflight,
                         sizeof(fe->inflight), &fe->inflight_fd, 1, errp)) {
        return false;
    }
    fe->inflight_sets++;
    return true;
}

void vuf_inflight_info(const VuFrontend *fe, VufInflightInfo *out)
{
    *out = (VufInflightInfo) {
        .negotiated = vuf_has_protocol_feature(
            fe, VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD),
        .have_region = fe->inflight_fd >= 0,
        .mmap_size = fe->inflight.mmap_size,
        .gets = fe->inflight_gets,
        .sets = fe->inflight_sets,
        .resumes = fe->resumes,
        .resume_retries = fe->resume_retries,
    };
}

/* ------------------------------------------------------------------------ */
/* Resuming                                                                  */

/* 1 if the peer of socket fd hung up within timeout_ms, 0 if not,
 * -errno. */
static int poll_hangup(int fd, int timeout_ms)
{
    struct pollfd pfd = { .fd = fd, .events = POLLRDHUP };
    int r = poll(&pfd, 1, timeout_ms);

    if (r < 0) {
        return errno == EINTR ? 0 : -errno;
    }
    return r > 0 &&
           (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Wait until the back-end's end of the socket is gone. */
static bool wait_hangup(VuFrontend *fe, int64_t deadline_ms, Error **errp)
{
    while (fe->sock >= 0) {
        int64_t left = MAX(deadline_ms - vuf_now_ms(), 0);
        int r = poll_hangup(fe->sock, (int)MIN(left, INT_MAX));

        if (r > 0) {
            return true;
        }
        if (r < 0) {
            error_setg_errno(errp, -r, "waiting for the back-end to hang "
                             "up");
            return false;
        }
        if (left == 0) {
            error_setg(errp, "the back-end is still connected: its socket "
                       "did not drop within the timeout");
            return false;
        }
    }
    return true;
}

static bool check_same_features(VuFrontend *fe, uint64_t before,
                                Error **errp)
{
    g_autofree char *gone = NULL, *added = NULL;

    if (fe->features == before) {
        return true;
    }
    gone = vuf_feature_list(fe->opts.device, before & ~fe->features, false);
    added = vuf_feature_list(fe->opts.device, fe->features & ~before, false);
    error_setg(errp, "the new back-end negotiated other features (lost: %s; "
               "new: %s): the rings cannot be kept", gone, added);
    return false;
}

/* A kick for every queue with chains in flight: the new back-end looks at
 * its ring even if it does not resubmit anything by itself. */
static bool kick_in_flight(VuFrontend *fe, Error **errp)
{
    for (unsigned i = 0; i < fe->num_queues; i++) {
        VufQueue *q = fe->queues[i];
        int r = q->in_flight ? vufq_kick_force(q) : 0;

        if (r < 0) {
            error_setg_errno(errp, -r, "cannot kick queue %u", i);
            return false;
        }
    }
    return true;
}

/*
 * One try at a session on the rings as they are.  On failure *dropped
 * says whether the back-end had closed the connection.
 */
static bool resume_session(VuFrontend *fe, int64_t deadline,
                           uint64_t features, bool *dropped, Error **errp)
{
    bool ok;

    fe->resuming = true;
    ok = vuf_connect_socket_until(fe, deadline, errp) &&
         vuf_negotiate(fe, errp) &&
         check_same_features(fe, features, errp) &&
         vuf_setup_queues_as(fe, true, errp) &&
         kick_in_flight(fe, errp);
    fe->resuming = false;
    if (!ok) {
        *dropped = fe->sock >= 0 && poll_hangup(fe->sock, 0) > 0;
        vuf_disconnect(fe);
        /* The next try compares with what the rings were made for. */
        fe->features = features;
    }
    return ok;
}

bool vuf_resume(VuFrontend *fe, int timeout_ms, Error **errp)
{
    int64_t deadline = vuf_now_ms() + timeout_ms;
    uint64_t features = fe->features;
    Error *err = NULL;
    bool dropped;

    vuf_assert_control_thread(fe);
    if (!wait_hangup(fe, deadline, errp)) {
        return false;
    }
    vuf_disconnect(fe);
    /*
     * A back-end that drops the new connection before the session is up
     * is tried again while there is time, as QEMU's reconnecting chardev
     * does: a process on its way out may still have taken it.  Any other
     * failure is an answer.
     */
    while (!resume_session(fe, deadline, features, &dropped, &err)) {
        if (!dropped || vuf_now_ms() >= deadline) {
            error_propagate(errp, err);
            error_prepend(errp, "resuming after the back-end died: ");
            return false;
        }
        error_free(err);
        err = NULL;
        fe->resume_retries++;
        g_usleep(RESUME_RETRY_MS * 1000);
    }
    fe->resumes++;
    return true;
}

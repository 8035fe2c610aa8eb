/*
 * vu-backend-chan: the back-end channel of a vu-frontend (SLAVE_REQ, which
 * the newer spec calls BACKEND_REQ).
 *
 * Theory of operation
 * -------------------
 * With the SLAVE_REQ protocol feature negotiated, vuf_negotiate() calls
 * vuf_backend_channel_open() right after the protocol features: it makes
 * a socket pair, keeps one end (fe->backend_fd) and hands the other to the
 * back-end with SET_SLAVE_REQ_FD.  On it the back-end sends requests of
 * its own, in the vhost-user message format.
 *
 * Nothing reads the channel in the background: messages wait in the
 * socket until a caller asks (vuf_poll_backend_channel(),
 * vuf_wait_config_change()), which keeps this front-end single-threaded
 * on its control path.  A CONFIG_CHANGE_MSG (the device config changed,
 * e.g. a resized disk) is counted; any request that asks for a reply gets
 * one (status 0 for CONFIG_CHANGE_MSG, 1 for the requests we do not
 * implement).  A malformed message or a close ends the channel; the
 * session itself goes on.
 *
 * Everything here runs in the control thread; see vu-frontend.h.
 */

#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include <glib.h>

#include "vu-frontend-int.h"

bool vuf_backend_channel_open(VuFrontend *fe, Error **errp)
{
    int sv[2];
    bool ok;

    g_assert(fe->backend_fd < 0);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        error_setg_errno(errp, errno, "cannot create the back-end channel");
        return false;
    }
    ok = vuf_request_set(fe, VHOST_USER_SET_SLAVE_REQ_FD, NULL, 0, &sv[1], 1,
                         errp);
    close(sv[1]);
    if (!ok) {
        close(sv[0]);
        return false;
    }
    fe->backend_fd = sv[0];
    return true;
}

void vuf_backend_channel_close(VuFrontend *fe)
{
    vuf_close_fd(&fe->backend_fd);
}

int vuf_backend_channel_fd(const VuFrontend *fe)
{
    return fe->backend_fd;
}

uint64_t vuf_config_changes(const VuFrontend *fe)
{
    return fe->config_changes;
}

/* Answer a back-end request that asked for a reply. */
static bool backend_channel_ack(VuFrontend *fe, uint32_t request,
                                uint64_t status, Error **errp)
{
    struct {
        VhostUserHeader hdr;
        uint64_t status;
    } __attribute__((packed)) reply = {
        { request, VHOST_USER_VERSION | VHOST_USER_REPLY_MASK,
          sizeof(uint64_t) },
        status,
    };
    ssize_t n;

    do {
        n = send(fe->backend_fd, &reply, sizeof(reply), MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(reply)) {
        error_setg_errno(errp, n < 0 ? errno : EIO, "cannot answer the "
                         "back-end's request %u", request);
        return false;
    }
    return true;
}

/*
 * Read and handle one message from the back-end channel, waiting until
 * deadline_ms for it.  Returns 1 (handled), 0 (none came) or -1 (errp
 * set; the channel is closed on anything but a local error).
 */
static int backend_channel_read_one(VuFrontend *fe, int64_t deadline_ms,
                                    Error **errp)
{
    uint8_t payload[VHOST_USER_MAX_PAYLOAD];
    VhostUserHeader hdr;
    int r = vuf_wait_readable(fe->backend_fd, deadline_ms);

    if (r == 0) {
        return 0;
    }
    /* Once a message starts, the rest of it gets a second. */
    deadline_ms = MAX(deadline_ms, vuf_now_ms() + 1000);
    if (r > 0) {
        r = vuf_read_exact(fe->backend_fd, &hdr, sizeof(hdr), deadline_ms,
                           true);
    }
    if (r == 0) {
        error_setg(errp, "the back-end closed its back-end channel");
        goto close;
    }
    if (r > 0 && hdr.size > sizeof(payload)) {
        error_setg(errp, "back-end request %u with a payload of %u bytes",
                   hdr.request, hdr.size);
        goto close;
    }
    if (r > 0 && hdr.size) {
        r = vuf_read_exact(fe->backend_fd, payload, hdr.size, deadline_ms,
                           false);
    }
    if (r < 0) {
        error_setg_errno(errp, -r, "cannot read from the back-end channel");
        goto close;
    }
    if ((hdr.flags & VHOST_USER_VERSION_MASK) != VHOST_USER_VERSION ||
        (hdr.flags & VHOST_USER_REPLY_MASK)) {
        error_setg(errp, "back-end request %u with flags 0x%x", hdr.request,
                   hdr.flags);
        goto close;
    }
    if (hdr.request == VHOST_USER_SLAVE_CONFIG_CHANGE_MSG) {
        fe->config_changes++;
    }
    if ((hdr.flags & VHOST_USER_NEED_REPLY_MASK) &&
        !backend_channel_ack(fe, hdr.request,
                             hdr.request == VHOST_USER_SLAVE_CONFIG_CHANGE_MSG
                             ? 0 : 1, errp)) {
        goto close;
    }
    return 1;

close:
    vuf_backend_channel_close(fe);
    return -1;
}

/*
 * The start of every public reader: asserts the control thread; true if
 * the back-end channel is open, false with errp set if not.
 */
static bool backend_channel_begin(VuFrontend *fe, Error **errp)
{
    vuf_assert_control_thread(fe);
    if (fe->backend_fd < 0) {
        error_setg(errp, "there is no back-end channel (the back-end does "
                   "not offer the BACKEND_REQ protocol feature, or it was "
                   "not accepted)");
        return false;
    }
    return true;
}

bool vuf_poll_backend_channel(VuFrontend *fe, int timeout_ms, Error **errp)
{
    int64_t deadline = vuf_now_ms() + MAX(timeout_ms, 0);
    int r;

    if (!backend_channel_begin(fe, errp)) {
        return false;
    }
    /* The first message may take until the deadline; then take what is
     * there. */
    for (r = backend_channel_read_one(fe, deadline, errp); r > 0;
         r = backend_channel_read_one(fe, 0, errp)) {
    }
    return r == 0;
}

bool vuf_wait_config_change(VuFrontend *fe, int timeout_ms, Error **errp)
{
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : vuf_now_ms() + timeout_ms;

    if (!backend_channel_begin(fe, errp)) {
        return false;
    }
    while (fe->config_changes == fe->config_changes_taken) {
        int r = backend_channel_read_one(fe, deadline, errp);

        if (r < 0) {
            return false;
        }
        if (r == 0) {
            error_setg(errp, "no config-change message from the back-end "
                       "within %.1f s", timeout_ms / 1000.0);
            return false;
        }
    }
    fe->config_changes_taken++;
    return true;
}

/*
 * vu-raw: lower-level access to a VuFrontend, for tests of a device or of
 * a vhost-user back-end (see vu-raw.h).  The ring functions are built on
 * the driver of vu-virtqueue.c; nothing bypasses its bookkeeping except
 * what the caller writes into the rings itself.
 */

#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "vu-frontend-int.h"
#include "vu-raw.h"

int vuf_mem_fd(const VuFrontend *fe)
{
    return fe->memfd;
}

bool vuf_start_local(VuFrontend *fe, uint64_t features, Error **errp)
{
    unsigned i;

    vuf_assert_control_thread(fe);
    for (i = 0; i < fe->num_queues; i++) {
        if (fe->queues[i]->ready) {
            error_setg(errp, "queue %u is already set up", i);
            return false;
        }
    }
    fe->features = features;
    for (i = 0; i < fe->num_queues; i++) {
        if (!vufq_session_start(fe->queues[i],
                                vuf_has_feature(fe, VIRTIO_RING_F_EVENT_IDX),
                                vuf_has_feature(fe,
                                                VIRTIO_RING_F_INDIRECT_DESC),
                                errp)) {
            vuf_disconnect(fe);
            return false;
        }
    }
    return true;
}

void vufq_ring_gpas(const VufQueue *q, uint64_t *desc, uint64_t *avail,
                    uint64_t *used)
{
    if (desc) {
        *desc = q->desc_gpa;
    }
    if (avail) {
        *avail = q->avail_gpa;
    }
    if (used) {
        *used = q->used_gpa;
    }
}

int vufq_kick_fd(const VufQueue *q)
{
    return q->ready ? q->kick_fd : -1;
}

/* Put a new eventfd in *fd (closing the old one); the new fd or -errno. */
static int renew_eventfd(VufQueue *q, int *fd)
{
    int new_fd;

    if (!q->ready) {
        return -ENOTCONN;
    }
    new_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (new_fd < 0) {
        return -errno;
    }
    close(*fd);
    *fd = new_fd;
    return new_fd;
}

int vufq_renew_kick_fd(VufQueue *q)
{
    return renew_eventfd(q, &q->kick_fd);
}

int vufq_renew_call_fd(VufQueue *q)
{
    return renew_eventfd(q, &q->call_fd);
}

int vufq_set_base(VufQueue *q, uint16_t base)
{
    if (!q->ready) {
        return -ENOTCONN;
    }
    if (q->in_flight) {
        return -EBUSY;
    }
    q->avail_idx = q->kicked_idx = q->last_used = base;
    atomic_store_explicit(&q->avail->idx, base, memory_order_relaxed);
    atomic_store_explicit(&q->used->idx, base, memory_order_relaxed);
    /* Moves used_event along with last_used and fences, so that the
     * device sees the new indexes with the suppression state that goes
     * with them. */
    vufq_set_completion(q, q->mode);
    return 0;
}

int vufq_add_unpublished(VufQueue *q, const VufSeg *segs, unsigned n,
                         unsigned flags, void *token)
{
    return vufq_build_chain(q, segs, n, flags, token);
}

void vufq_publish_head(VufQueue *q, uint16_t head)
{
    vufq_publish(q, head);
}

int vufq_kick_always(VufQueue *q)
{
    if (!q->ready) {
        return -ENOTCONN;
    }
    return vufq_kick_force(q);
}

int vufq_get_used_head(VufQueue *q, uint16_t *head, void **token,
                       uint32_t *len)
{
    uint16_t id = 0;
    int r;

    if (q->ready && !q->broken &&
        atomic_load_explicit(&q->used->idx, memory_order_acquire) !=
        q->last_used) {
        /* The element vufq_get_used() is about to take (same thread). */
        id = q->used->ring[q->last_used % q->num].id;
    }
    r = vufq_get_used(q, token, len);
    if (r == 1 && head) {
        *head = id;
    }
    return r;
}

bool vuf_send_bytes(VuFrontend *fe, const void *buf, size_t len,
                    const int *fds, size_t nfds, Error **errp)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * VUF_SEND_BYTES_MAX_FDS)];
        struct cmsghdr align;
    } rights = { { 0 } };
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
    ssize_t sent;

    vuf_assert_control_thread(fe);
    g_assert(nfds <= VUF_SEND_BYTES_MAX_FDS);
    if (vuf_socket_fd(fe) < 0) {
        error_setg(errp, "not connected to the back-end");
        return false;
    }
    if (nfds) {
        struct cmsghdr *c;

        msg.msg_control = rights.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        c = CMSG_FIRSTHDR(&msg);
        *c = (struct cmsghdr) {
            .cmsg_len = CMSG_LEN(sizeof(int) * nfds),
            .cmsg_level = SOL_SOCKET,
            .cmsg_type = SCM_RIGHTS,
        };
        memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    do {
        sent = sendmsg(vuf_socket_fd(fe), &msg, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    if (sent < 0) {
        error_setg_errno(errp, errno, "cannot send %zu bytes to the back-end",
                         len);
        return false;
    }
    if ((size_t)sent != len) {
        error_setg(errp, "sent only %zd of %zu bytes to the back-end", sent,
                   len);
        return false;
    }
    return true;
}

/*
 * Fuzz harness: the vhost-user back-end's message handler.
 *
 * Each input is a sequence of requests as the socket layer would deliver
 * them to vu_server_handle_msg() of a server without a socket
 * (vu_server_new_socketless()) that serves a virtio-blk device over a
 * null-co node.  One request in the input:
 *
 *   u32 request, u32 flags, u32 size   the vhost-user header (LE)
 *   u8 nfds                            fds sent with it (mod 9)
 *   size bytes                         the payload (as many as are left)
 *
 * A size over VHOST_USER_MAX_PAYLOAD ends the input: the socket layer
 * refuses such a header before any handler sees it.  The fds are real:
 * a memfd (GUEST_MEM_SIZE bytes, sparse) for the requests that carry
 * memory (SET_MEM_TABLE, ADD_MEM_REG, ...), a dirty log (LOG_FILE_SIZE
 * bytes, sparse, enough for guest memory up to 2 GiB) for SET_LOG_BASE,
 * so that rings started with logging on mark it, the inflight region for
 * SET_INFLIGHT_FD (the last one GET_INFLIGHT_FD answered with, or at
 * first a sealed one of the harness's for NUM_QUEUES queues of
 * MAX_QUEUE_SIZE entries), an eventfd for the others.
 * Request 0 (no request has that number: the handler would refuse it) is the
 * harness's own: its payload, after a u32 offset, is written into that
 * memfd, so that inputs can lay out rings and requests in guest memory;
 * with bit 31 of its flags set, into the inflight region instead, so
 * that inputs can leave requests marked there (or anything else) for the
 * next ring start to resume from.
 *
 * Regions may be anywhere relative to the memfd: one that runs past its
 * end was this harness's first finding (a SIGBUS at the ring's start;
 * guest-memory.c now refuses it; regression input
 * corpus/fuzz-vhost-user/regress-region-past-fd-end).
 *
 * After each request every eventfd handed out so far is signalled and
 * the loop is run, so rings that started see a kick and process what is
 * in guest memory; their home context is the harness's main context, so
 * ring starts (aio_run_sync() into it) run directly and nothing needs
 * another thread.  The server, the device and the node are made afresh
 * for each input and freed at its end.
 */
#include <fcntl.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>
#include <glib.h>

#include "block/block.h"
#include "helpers.h"
#include "hw/virtio/vhost-inflight.h"
#include "hw/virtio/vhost-user-server-int.h"
#include "hw/virtio/virtio-blk.h"

#define NUM_QUEUES      2
#define MAX_QUEUE_SIZE  256
#define GUEST_MEM_SIZE  (1u << 20)
#define MAX_EVENTFDS    64        /* kept to kick; more are not kept */
#define TO_INFLIGHT     (1u << 31) /* request 0's flags: write the region */
#define LOG_FILE_SIZE   (1u << 16)

typedef struct FuzzVu {
    AioContext *ctx;
    BlockNode *bs;
    VirtioBlk *vb;
    VuServer *server;
    int memfd;                    /* guest memory; requests get dups */
    int inflight_fd;              /* the inflight region; SET gets dups */
    int log_fd;                   /* the dirty log; SET_LOG_BASE gets dups */
    int eventfds[MAX_EVENTFDS];   /* dups of those handed out */
    unsigned neventfds;
} FuzzVu;

static bool request_carries_memory(uint32_t request)
{
    switch (request) {
    case VHOST_USER_SET_MEM_TABLE:
    case VHOST_USER_ADD_MEM_REG:
    case VHOST_USER_REM_MEM_REG:
        return true;
    default:
        return false;
    }
}

static int new_fd(FuzzVu *f, uint32_t request)
{
    int fd;

    if (request_carries_memory(request)) {
        return fcntl(f->memfd, F_DUPFD_CLOEXEC, 0);
    }
    if (request == VHOST_USER_SET_INFLIGHT_FD) {
        return fcntl(f->inflight_fd, F_DUPFD_CLOEXEC, 0);
    }
    if (request == VHOST_USER_SET_LOG_BASE) {
        return fcntl(f->log_fd, F_DUPFD_CLOEXEC, 0);
    }
    fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd >= 0 && f->neventfds < MAX_EVENTFDS) {
        f->eventfds[f->neventfds++] = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    }
    return fd;
}

static void kick_all(FuzzVu *f)
{
    static const uint64_t one = 1;

    for (unsigned i = 0; i < f->neventfds; i++) {
        if (f->eventfds[i] >= 0 &&
            write(f->eventfds[i], &one, sizeof(one)) < 0) {
            /* full: it is signalled anyway */
        }
    }
    fuzz_poll(f->ctx);
}

static void fuzz_vu_setup(FuzzVu *f)
{
    VirtioBlkConf conf = {
        .num_queues = NUM_QUEUES,
        .queue_size = MAX_QUEUE_SIZE,
        .logical_block_size = 512,
        .writable = true,
    };
    VuServerConfig cfg = {
        .listen_fd = -1,
        .num_queues = NUM_QUEUES,
        .max_queue_size = MAX_QUEUE_SIZE,
        .ctxs = &f->ctx,
        .nctx = 1,
        .ops = &virtio_blk_vu_ops,
        .name = "fuzz",
        .inflight_tracking = true,
    };
    Error *err = NULL;

    memset(f, 0, sizeof(*f));
    f->ctx = fuzz_main_context();
    f->bs = block_node_open_str("driver=null-co,size=1M", f->ctx, &err);
    g_assert_no_error(err);
    f->vb = virtio_blk_new(&conf, f->bs, &err);
    g_assert_no_error(err);
    cfg.dev = f->vb;
    f->server = vu_server_new_socketless(&cfg, f->ctx, &err);
    g_assert_no_error(err);
    f->memfd = memfd_create("fuzz-guest", MFD_CLOEXEC);
    g_assert(f->memfd >= 0);
    g_assert(ftruncate(f->memfd, GUEST_MEM_SIZE) == 0);
    f->log_fd = memfd_create("fuzz-log", MFD_CLOEXEC);
    g_assert(f->log_fd >= 0);
    g_assert(ftruncate(f->log_fd, LOG_FILE_SIZE) == 0);
    f->inflight_fd = vhost_inflight_memfd_new(
        vhost_inflight_region_bytes(NUM_QUEUES, MAX_QUEUE_SIZE), &err);
    g_assert_no_error(err);
}

static void fuzz_vu_cleanup(FuzzVu *f)
{
    vu_server_free(f->server);
    virtio_blk_free(f->vb);
    block_node_unref(f->bs);
    fuzz_poll(f->ctx);
    for (unsigned i = 0; i < f->neventfds; i++) {
        close(f->eventfds[i]);
    }
    close(f->memfd);
    close(f->log_fd);
    close(f->inflight_fd);
}

/* Request 0: write the payload (after its u32 offset) into guest memory,
 * or the inflight region (flags TO_INFLIGHT), as far as the file goes. */
static void write_guest_memory(FuzzVu *f, const VuMsg *m)
{
    int fd = (m->hdr.flags & TO_INFLIGHT) ? f->inflight_fd : f->memfd;
    off_t end = lseek(fd, 0, SEEK_END);
    uint32_t off;

    if (m->hdr.size < sizeof(off) || end <= 0) {
        return;
    }
    memcpy(&off, m->payload.bytes, sizeof(off));
    off %= end;
    if (pwrite(fd, m->payload.bytes + sizeof(off),
               MIN(m->hdr.size - sizeof(off), (size_t)(end - off)), off) < 0) {
        g_assert_not_reached();
    }
}

/* A GET_INFLIGHT_FD answer's region is what SET_INFLIGHT_FD gets next,
 * as a front-end would hand it back. */
static void keep_reply_fds(FuzzVu *f, VuMsg *reply)
{
    if (reply->nfds == 1) {
        close(f->inflight_fd);
        f->inflight_fd = reply->fds[0];
        reply->fds[0] = -1;
    }
    vu_msg_close_fds(reply);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FuzzReader r = { data, size };
    FuzzVu f;
    VuMsg m, reply;

    fuzz_vu_setup(&f);
    while (!fuzz_reader_done(&r)) {
        unsigned nfds;

        memset(&m, 0, sizeof(m));
        m.hdr.request = fuzz_read_u32(&r);
        m.hdr.flags = fuzz_read_u32(&r);
        m.hdr.size = fuzz_read_u32(&r);
        nfds = fuzz_read_u8(&r) % (VHOST_USER_MAX_FDS + 1);
        if (m.hdr.size > VHOST_USER_MAX_PAYLOAD) {
            break;
        }
        fuzz_read_bytes(&r, m.payload.bytes, m.hdr.size);
        if (m.hdr.request == 0) {
            write_guest_memory(&f, &m);
            continue;
        }
        for (unsigned i = 0; i < nfds; i++) {
            int fd = new_fd(&f, m.hdr.request);

            if (fd >= 0) {
                m.fds[m.nfds++] = fd;
            }
        }
        if (vu_server_handle_msg(f.server, &m, &reply) == VU_ANSWER_CLOSE) {
            /* The connection is closed, as on a disconnect; what
             * follows comes from the front-end's next connection. */
            vu_server_forget_client(f.server);
        } else {
            keep_reply_fds(&f, &reply);
        }
        g_assert(m.nfds == 0);
        kick_all(&f);
    }
    fuzz_vu_cleanup(&f);
    return 0;
}

/*
 * Fuzz harness: the QMP monitor's input stream.
 *
 * Each input is what one client sends after connecting: bytes the server
 * frames into messages, parses, checks and dispatches (the greeting, the
 * qmp_capabilities negotiation, then commands).  The server code has no
 * entry point below its socket, so the harness is a client of its own in
 * the same thread: a QmpServer listens on an abstract UNIX socket (no
 * file) made once; for each input the harness connects, turns the loop
 * (the server accepts and greets), writes the input as fast as the
 * socket takes it, turning the loop and discarding the replies as it
 * goes, then half-closes and turns the loop until the server has closed
 * the connection.  Everything runs in the harness's thread.
 *
 * Commands: the core ones (qmp_capabilities, query-version,
 * query-commands, quit, whose handler here does nothing) and the block
 * node ones (blockdev-add, blockdev-del, query-named-block-nodes,
 * block_resize, query-blockstats).  Not the IOThread or export commands:
 * object-add starts threads and block-export-add creates sockets and
 * files; fuzz-options covers their option parsing.  Inputs that could
 * name a host file are skipped (helpers.h).  The nodes an input created
 * are deleted at its end.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <glib.h>

#include "export/blockdev.h"
#include "helpers.h"
#include "monitor/qmp.h"

/* Turns of the loop, after the input is sent, for the server to finish
 * with it and close; each turn that makes no progress counts. */
#define DRAIN_TURNS 1000

static AioContext *ctx;
static QmpServer *server;
static struct sockaddr_un addr;
static socklen_t addr_len;

static void quit_ignored(void *opaque)
{
}

/* The server, on an abstract socket the kernel names (autobind). */
static void fuzz_qmp_init(void)
{
    QmpServerConfig cfg = { .name = "fuzz" };
    sa_family_t family = AF_UNIX;
    Error *err = NULL;
    int fd;

    ctx = fuzz_main_context();
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    g_assert(fd >= 0);
    g_assert(bind(fd, (struct sockaddr *)&family, sizeof(family)) == 0);
    g_assert(listen(fd, 4) == 0);
    addr_len = sizeof(addr);
    g_assert(getsockname(fd, (struct sockaddr *)&addr, &addr_len) == 0);
    cfg.listen_fd = fd;
    server = qmp_server_new(&cfg, ctx, &err);
    g_assert_no_error(err);
    qmp_register_block_commands();
    qmp_set_quit_handler(quit_ignored, NULL);
}

/* Read and drop what the server sent; false at end of stream. */
static bool discard_replies(int fd)
{
    char buf[65536];

    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

        if (n > 0) {
            continue;
        }
        return !(n == 0 || (errno != EAGAIN && errno != EINTR));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    int fd;

    if (fuzz_may_name_host_file(data, size)) {
        return -1;                  /* not kept in the corpus */
    }
    if (!server) {
        fuzz_qmp_init();
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    g_assert(fd >= 0);
    g_assert(connect(fd, (struct sockaddr *)&addr, addr_len) == 0);
    fuzz_poll(ctx);
    while (off < size) {
        ssize_t n = send(fd, data + off, size - off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);

        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            break;                  /* the server dropped us */
        }
        off += n > 0 ? (size_t)n : 0;
        fuzz_poll(ctx);
        if (!discard_replies(fd)) {
            break;
        }
    }
    shutdown(fd, SHUT_WR);
    for (int i = 0; i < DRAIN_TURNS && discard_replies(fd); i++) {
        fuzz_poll(ctx);
    }
    g_assert(qmp_server_num_clients(server) == 0);
    close(fd);
    blockdev_del_all();
    fuzz_poll(ctx);
    return 0;
}

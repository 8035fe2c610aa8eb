/*
 * Fuzz harness: the qcow2 format driver (block/qcow2*.c) over an image
 * the input holds.
 *
 * Theory of operation: a qcow2 image is untrusted input (a user hands
 * the daemon a file; every header field, extension, L1/L2 entry,
 * refcount and compressed-cluster descriptor comes from it), and a bad
 * one may fail its open or its requests but never the process.  Each
 * input is a few bytes of set-up and operations, then the image.  The
 * image goes into a memfd, which a file node opens through
 * /proc/self/fd (locking=off: nothing else uses it); a qcow2 node over
 * it is opened read-only or writable, with its backing chain cut
 * (backing=null) or a null-co node of the input's size as the backing
 * node: the header's backing file name is read but never opened, so
 * nothing an input does reaches the machine's files.  If the open
 * succeeds, the operations run: requests at offsets inside the virtual
 * size (so a huge size in the header costs nothing), each run to
 * completion or, marked "async", left in flight beside the next ones
 * (the workers serialise allocating writes per cluster); a grow of the
 * virtual size; an inactivation and activation, which reads the header
 * and tables again.  Then the node is closed (its caches written back),
 * and the nodes and memfd are freed, so ASan's leak check and a look
 * at the open fds see what an input leaves behind.
 *
 * Input:
 *     u8  0x01 writable | 0x02 a backing node | 0x04 the smallest caches
 *         (2 L2 tables, 4 refcount blocks: evictions) | 0x08 discard=unmap
 *     u8  number of operations (mod OPS_MAX + 1)
 *     u16 the backing node's size in 64 KiB (with 0x02)
 *     then the operations, OP_SIZE bytes each:
 *         u8  opcode (mod OP__MAX)   u8 flags (OPF_*)
 *         u16 length in bytes, + 1 (OP_GROW: mod GROW_MAX, + 1, x 64 KiB)
 *         u64 offset (mod the virtual size)
 *     and the rest of the input is the image.
 *
 * Checked: every request completes, once, with 0 or a negative errno
 * (a request that never completes is a hang: libFuzzer's timeout); the
 * node has nothing in flight after a drain; no fd on the image is left
 * open after an input; ASan and UBSan see the rest.  The data a request
 * returns is not checked: a damaged image may map two guest clusters
 * onto one host cluster, so no model of the disk holds.  Left
 * out: the header's backing file (the unit tests open real chains),
 * cache-clean-interval, IOThreads (the driver's own workers are the
 * threads here).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <glib.h>

#include "block/block.h"
#include "helpers.h"

#define CONF_WRITABLE       0x01
#define CONF_BACKING        0x02
#define CONF_SMALL_CACHES   0x04
#define CONF_UNMAP          0x08

#define OPS_MAX             32
#define OP_SIZE             12
#define INFLIGHT_MAX        8
#define GROW_UNIT           (64 * 1024)
/* A grow over a larger backing node writes zeroes over the new part
 * (it must not show the backing data), cluster by cluster: 16 MiB at
 * most, so one input stays fast. */
#define GROW_MAX            256
#define FUZZ_MEMFD          "fuzz-qcow2-image"

/* An image larger than this is not wanted (seeds are a few KiB). */
#define IMAGE_MAX           (1024 * 1024)

enum {
    OP_READ,
    OP_WRITE,
    OP_WRITE_ZEROES,
    OP_DISCARD,
    OP_FLUSH,
    OP_GROW,
    OP_REACTIVATE,
    OP__MAX,
};

#define OPF_ASYNC           0x01   /* leave in flight, drain later */
#define OPF_SECTORS         0x02   /* offset and length in whole sectors */
#define OPF_FUA             0x04   /* write: BLOCK_REQ_FUA */
#define OPF_UNMAP           0x08   /* write-zeroes: BLOCK_REQ_MAY_UNMAP */

typedef struct FuzzReq {
    BlockRequest req;
    struct iovec iov;
    uint8_t *buf;
    bool done;
    int ret;
} FuzzReq;

typedef struct Fuzz {
    BlockNode *bs;
    FuzzReq reqs[INFLIGHT_MAX];
    unsigned nreqs;
} Fuzz;

/* FUZZ_VERBOSE set: say what each input does (replaying one by hand):
 * the open's error, each grow, and each request as it completes (its
 * BlockOp, and its offset as it ended up: the host offset for one the
 * driver passed straight to the file). */
static bool fuzz_verbose(void)
{
    static int verbose = -1;

    if (verbose < 0) {
        verbose = g_getenv("FUZZ_VERBOSE") != NULL;
    }
    return verbose;
}

static void fuzz_req_cb(BlockRequest *req, int ret)
{
    FuzzReq *r = (FuzzReq *)req;

    FUZZ_CHECK(!r->done);
    FUZZ_CHECK(ret <= 0 && ret > -4096);
    r->done = true;
    r->ret = ret;
    if (fuzz_verbose()) {
        fprintf(stderr, "op %d offset %" G_GINT64_FORMAT " bytes %"
                G_GINT64_FORMAT ": %s\n", req->op, req->offset, req->bytes,
                ret ? g_strerror(-ret) : "ok");
    }
}

/* Wait for every request in flight; check and free them. */
static void fuzz_drain(Fuzz *f)
{
    block_node_drain(f->bs);
    FUZZ_CHECK(block_node_in_flight(f->bs) == 0);
    for (unsigned i = 0; i < f->nreqs; i++) {
        FuzzReq *r = &f->reqs[i];

        FUZZ_CHECK(r->done);
        g_free(r->buf);
    }
    f->nreqs = 0;
}

static const BlockOp fuzz_ops[] = {
    [OP_READ] = BLOCK_OP_READ,
    [OP_WRITE] = BLOCK_OP_WRITE,
    [OP_WRITE_ZEROES] = BLOCK_OP_WRITE_ZEROES,
    [OP_DISCARD] = BLOCK_OP_DISCARD,
    [OP_FLUSH] = BLOCK_OP_FLUSH,
};

/* One request: [offset, +len) clipped to the virtual size. */
static void fuzz_request(Fuzz *f, unsigned i, unsigned op, uint8_t flags,
                         uint64_t len, uint64_t offset)
{
    int64_t size = block_node_get_length(f->bs);
    FuzzReq *r = &f->reqs[f->nreqs++];

    memset(r, 0, sizeof(*r));
    r->req.op = fuzz_ops[op];
    if (op != OP_FLUSH) {
        if (size <= 0) {
            offset = len = 0;
        } else {
            offset %= (uint64_t)size;
            len = MIN(len, (uint64_t)size - offset);
        }
        if (flags & OPF_SECTORS) {
            offset &= ~511ull;
            len &= ~511ull;
        }
        r->req.offset = offset;
        r->req.bytes = len;
    }
    if (op == OP_READ || op == OP_WRITE) {
        r->buf = g_malloc(MAX(len, 1));
        /* Writes: bytes that differ from operation to operation, so
         * that a replay's reads show whose data they return. */
        for (uint64_t k = 0; k < len; k++) {
            r->buf[k] = op == OP_READ ? 0xa5 : (uint8_t)(i * 37 + k);
        }
        r->iov = (struct iovec) { .iov_base = r->buf, .iov_len = len };
        r->req.iov = &r->iov;
        r->req.niov = 1;
    }
    if (op == OP_WRITE && (flags & OPF_FUA)) {
        r->req.flags |= BLOCK_REQ_FUA;
    }
    if (op == OP_WRITE_ZEROES && (flags & OPF_UNMAP)) {
        r->req.flags |= BLOCK_REQ_MAY_UNMAP;
    }
    r->req.cb = fuzz_req_cb;
    block_node_submit(f->bs, &r->req);
    if (!(flags & OPF_ASYNC) || f->nreqs == INFLIGHT_MAX) {
        fuzz_drain(f);
    }
}

static void fuzz_grow(Fuzz *f, uint64_t units)
{
    int64_t size = block_node_get_length(f->bs);
    Error *err = NULL;

    fuzz_drain(f);
    if (size < 0 || (uint64_t)size > INT64_MAX - units * GROW_UNIT) {
        return;
    }
    block_node_resize(f->bs, size + units * GROW_UNIT, &err);
    if (fuzz_verbose()) {
        fprintf(stderr, "grow %" G_GINT64_FORMAT " -> %" G_GUINT64_FORMAT
                ": %s\n", size, size + units * GROW_UNIT,
                err ? err->message : "ok");
    }
    error_free(err);
}

static void fuzz_reactivate(Fuzz *f)
{
    Error *err = NULL;

    fuzz_drain(f);
    if (!block_node_set_active(f->bs, false, &err)) {
        error_free(err);
        err = NULL;
    }
    if (!block_node_set_active(f->bs, true, &err)) {
        error_free(err);
    }
}

static void fuzz_run_ops(Fuzz *f, FuzzReader *in, unsigned nops)
{
    for (unsigned i = 0; i < nops; i++) {
        unsigned op = fuzz_read_u8(in) % OP__MAX;
        uint8_t flags = fuzz_read_u8(in);
        uint64_t len = (uint64_t)fuzz_read_u16(in) + 1;
        uint64_t offset = fuzz_read_u64(in);

        switch (op) {
        case OP_GROW:
            fuzz_grow(f, (len - 1) % GROW_MAX + 1);
            break;
        case OP_REACTIVATE:
            fuzz_reactivate(f);
            break;
        default:
            fuzz_request(f, i, op, flags, len, offset);
        }
    }
    fuzz_drain(f);
}

/* A memfd holding the image; -1 if it cannot be made (a harness bug). */
static int fuzz_image_fd(const uint8_t *data, size_t size)
{
    int fd = memfd_create(FUZZ_MEMFD, MFD_CLOEXEC);

    FUZZ_CHECK(fd >= 0);
    while (size) {
        ssize_t n = write(fd, data, size);

        FUZZ_CHECK(n > 0);
        data += n;
        size -= n;
    }
    return fd;
}

/*
 * Whether the image is still open: an fd on the harness's memfd (its
 * own, or the file node's, opened through /proc/self/fd).  Other fds
 * come and go with libFuzzer itself (its symbolizer's pipes), so only
 * these are counted.
 */
static bool fuzz_image_open(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    bool found = false;

    FUZZ_CHECK(d);
    while (!found && (e = readdir(d))) {
        g_autofree char *link = g_strdup_printf("/proc/self/fd/%s",
                                                e->d_name);
        g_autofree char *target = g_file_read_link(link, NULL);

        found = target && g_str_has_prefix(target, "/memfd:" FUZZ_MEMFD);
        if (found) {
            fprintf(stderr, "fd %s is still open: %s\n", e->d_name, target);
        }
    }
    closedir(d);
    return found;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    AioContext *ctx = fuzz_main_context();
    FuzzReader in = { .p = data, .left = size };
    uint8_t conf = fuzz_read_u8(&in);
    unsigned nops = fuzz_read_u8(&in) % (OPS_MAX + 1);
    uint64_t backing_size = (uint64_t)fuzz_read_u16(&in) * GROW_UNIT;
    const uint8_t *ops = in.p;
    BlockNode *backing = NULL;
    g_autofree char *opts = NULL;
    Fuzz f = { 0 };
    Error *err = NULL;
    static bool once;
    int fd;

    /*
     * The node's workers come from GLib's shared threads.  Keep them all
     * when a node frees its pool, rather than ending all but two: a
     * thread that ends while LeakSanitizer looks still holds GSlice's
     * per-thread cache, reported as a leak of 2032 bytes, and starting
     * up to 16 threads again for each input is slow.
     */
    if (!once) {
        g_thread_pool_set_max_unused_threads(-1);
        g_thread_pool_set_max_idle_time(0);
        once = true;
    }
    fuzz_read_skip(&in, (size_t)nops * OP_SIZE);
    if (in.left > IMAGE_MAX) {
        return -1;
    }
    fd = fuzz_image_fd(in.p, in.left);
    if (conf & CONF_BACKING) {
        g_autofree char *b = g_strdup_printf(
            "driver=null-co,node-name=fuzz-backing,read-zeroes=on,"
            "size=%" G_GUINT64_FORMAT, backing_size);

        backing = block_node_open_str(b, ctx, &err);
        FUZZ_CHECK(backing && !err);
    }
    opts = g_strdup_printf(
        "driver=qcow2,node-name=fuzz,read-only=%s,discard=%s,backing=%s,"
        "%sfile.driver=file,file.filename=/proc/self/fd/%d,"
        "file.locking=off",
        conf & CONF_WRITABLE ? "off" : "on",
        conf & CONF_UNMAP ? "unmap" : "ignore",
        backing ? "fuzz-backing" : "null",
        conf & CONF_SMALL_CACHES ?
            "l2-cache-size=0,refcount-cache-size=0," : "", fd);
    f.bs = block_node_open_str(opts, ctx, &err);
    if (f.bs) {
        FuzzReader op_in = { .p = ops, .left = (size_t)nops * OP_SIZE };

        fuzz_run_ops(&f, &op_in, nops);
        block_node_unref(f.bs);
    } else {
        FUZZ_CHECK(err);
        if (fuzz_verbose()) {
            fprintf(stderr, "open: %s\n", err->message);
        }
        error_free(err);
    }
    if (backing) {
        block_node_unref(backing);
    }
    fuzz_poll(ctx);
    close(fd);
    FUZZ_CHECK(!fuzz_image_open());
    return 0;
}

/*
 * qcow2: the qcow2 format driver (QEMU's image format), versions 2 and 3.
 *
 * Theory of operation.  A qcow2 node sits on a file node (option `file`)
 * holding the image and shows the guest disk the image describes: its
 * virtual size, and each guest cluster mapped through the L1 and L2
 * tables to a host cluster of the file, a compressed cluster, zeros, or
 * nothing (then the backing node's data, or zeros without one).  The
 * files:
 *   qcow2.c           open and close (header, features, extensions,
 *                     options, the backing chain), request dispatch,
 *                     resize, and the waiting I/O the others use;
 *   qcow2-cluster.c   L1/L2 mapping and the slow requests (an
 *                     allocating write step by step);
 *   qcow2-alloc.c     the common allocating write, run by the IOThread;
 *   qcow2-cache.c     the write-back metadata caches, and the order in
 *                     which metadata reaches storage (crash safety);
 *   qcow2-refcount.c  refcounts and allocation;
 *   qcow2-compress.c  zlib and zstd compressed clusters.
 *
 * Two paths for a request.  submit() runs in the IOThread of the request
 * and must not wait for anything.  With the node's lock free (a trylock)
 * and the L2 tables it needs in the cache, a READ or WRITE whose clusters
 * are all allocated data clusters, contiguous in the file (and, for a
 * write, not shared: COPIED), is moved to the host offset and passed to
 * the file node as it is, like the raw driver does: no copy, no
 * allocation, the file's completion goes straight to the caller.  A READ
 * of clusters that all read as zeros is answered from a BH, one of
 * unallocated clusters that the backing node covers is passed to it
 * (through its queue in the same context); a FLUSH with nothing dirty in
 * the caches goes to the file.  A WRITE into clusters
 * that have no host cluster yet and read as zeros around it, with its L2
 * table and refcount block cached, is allocated by the IOThread itself:
 * the new clusters counted, the guest's data written to them, the L2
 * entries set on that write's completion (qcow2-alloc.c).  Everything
 * else (a table not cached, copy-on-write, an old cluster to replace,
 * backing data, compressed data, write-zeroes, discard, a FLUSH that
 * writes the caches back) goes to the node's worker threads (a
 * GThreadPool of its own), which run it as straight-line code: metadata
 * under the node's lock, and I/O that waits (qcow2_pread() & co.: the
 * sub-request is submitted in the request's own context from a one-shot
 * BH, through the queues of the file and backing nodes in that context,
 * and the worker sleeps until its completion).  The IOThread never blocks
 * and never waits for the lock (the fast paths only try it); a worker
 * schedules the request's completion back into its IOThread.
 *
 * Threads.  The node's state is shared by every context that uses it,
 * under s->lock, so several IOThreads on one qcow2 node are safe: each
 * request's I/O goes through the queues of its own context (the backing
 * node gets a queue per context in attach_queue).  The main thread
 * (open, close, resize) does its I/O the same waiting way; when it is
 * itself the home of the context it waits in, it runs that loop nested
 * instead of sleeping.
 *
 * Metadata safety: see qcow2-cache.c for the order in which metadata
 * reaches storage and qcow2-refcount.c for new refcount blocks and
 * tables.  The refcounts on storage never fall behind the entries on
 * storage (that is what QEMU's lazy refcounts allow, and what its dirty
 * bit warns of), so this driver never sets the dirty bit, lazy_refcounts
 * images included, and an image found dirty is opened read-only only (a
 * writable open says to run qemu-img check -r all).  A corrupt image
 * likewise.  An inactive node has written its caches back; activating
 * it again reads the header and tables afresh.  A writable open marks
 * persistent bitmaps in use (they are not updated here; QEMU then treats
 * them as inconsistent, as after a crash of its own) and clears unknown
 * autoclear bits, as the specification asks of a writer that does not
 * keep them; the snapshot table and the header extensions are never
 * rewritten, so they survive as they were.
 *
 * The image is untrusted: every offset read from it is checked before
 * use (qcow2_host_offset_valid()); at open a bad header is an error, on a
 * request a bad table entry fails that request with -EIO.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "qcow2.h"
#include "util/bswap.h"
#include "util/iov.h"

#define QCOW2_WORKERS           16
#define QCOW2_MIN_L2_TABLES     2
#define QCOW2_MIN_RC_BLOCKS     4
#define QCOW2_DEFAULT_L2_MAX    (32 * 1024 * 1024)

/* Header extension types. */
#define QCOW2_EXT_END           0x00000000u
#define QCOW2_EXT_BACKING_FMT   0xe2792acau
#define QCOW2_EXT_FEATURES      0x6803f857u
#define QCOW2_EXT_BITMAPS       0x23852875u
#define QCOW2_EXT_CRYPTO        0x0537be77u
#define QCOW2_EXT_DATA_FILE     0x44415441u

/* ------------------------------------------------------------------------ */
/* Waiting I/O                                                               */

typedef struct Qcow2Sync {
    BlockRequest req;
    BlockQueue *q;
    GAsyncQueue *done;           /* the completion pushes req here */
    int ret;
} Qcow2Sync;

static void qcow2_sync_cb(BlockRequest *req, int ret)
{
    Qcow2Sync *w = req->opaque;

    w->ret = ret;
    /* The push orders ret before the waiter's pop (the queue's lock). */
    g_async_queue_push(w->done, req);
}

static void qcow2_sync_submit_bh(void *opaque)
{
    Qcow2Sync *w = opaque;

    block_queue_submit(w->q, &w->req);
}

int qcow2_sync_iov(BlockQueue *q, BlockOp op, uint64_t offset,
                   struct iovec *iov, int niov, uint64_t bytes)
{
    Qcow2Sync w = {
        .req = {
            .op = op, .offset = offset, .bytes = bytes,
            .iov = iov, .niov = niov, .cb = qcow2_sync_cb,
        },
        .q = q,
    };

    if (offset > INT64_MAX || bytes > INT64_MAX - offset) {
        return -EIO;
    }
    w.req.opaque = &w;
    w.done = g_async_queue_new();
    if (aio_context_in_home_thread(q->ctx)) {
        /* The main thread on its own loop (open, resize): run it. */
        block_queue_submit(q, &w.req);
        while (!g_async_queue_try_pop(w.done)) {
            aio_poll(q->ctx, true);
        }
    } else {
        aio_bh_schedule_oneshot(q->ctx, qcow2_sync_submit_bh, &w);
        g_async_queue_pop(w.done);
    }
    g_async_queue_unref(w.done);
    return w.ret;
}

static int qcow2_sync_io(BlockQueue *q, BlockOp op, uint64_t offset,
                         void *buf, uint64_t bytes)
{
    struct iovec iov = { .iov_base = buf, .iov_len = bytes };

    return qcow2_sync_iov(q, op, offset, &iov, buf ? 1 : 0, bytes);
}

int qcow2_pread(BlockQueue *q, uint64_t offset, void *buf, uint64_t bytes)
{
    return qcow2_sync_io(q, BLOCK_OP_READ, offset, buf, bytes);
}

int qcow2_pwrite(BlockQueue *q, uint64_t offset, const void *buf,
                 uint64_t bytes)
{
    return qcow2_sync_io(q, BLOCK_OP_WRITE, offset, (void *)buf, bytes);
}

int qcow2_flush_file(Qcow2State *s, Qcow2Io *io)
{
    return qcow2_sync_io(io->file, BLOCK_OP_FLUSH, 0, NULL, 0);
}

int qcow2_discard_file(Qcow2Io *io, uint64_t offset, uint64_t bytes)
{
    return qcow2_sync_io(io->file, BLOCK_OP_DISCARD, offset, NULL, bytes);
}

void *qcow2_alloc_buf(uint64_t bytes)
{
    void *p;

    /* 4 KiB covers every O_DIRECT memory alignment we meet; io.c bounces
     * the rare buffer that still is not aligned enough. */
    if (posix_memalign(&p, 4096, MAX(bytes, 1))) {
        g_error("qcow2: out of memory (%" PRIu64 " bytes)", bytes);
    }
    return p;
}

/*
 * Take s->lock from the main thread.  A worker holding it may be waiting
 * for I/O that the main loop runs, so keep that loop turning meanwhile.
 */
static void qcow2_lock_main(Qcow2State *s)
{
    AioContext *ctx = s->bs->ctx;

    while (!g_mutex_trylock(&s->lock)) {
        if (aio_context_in_home_thread(ctx)) {
            aio_poll(ctx, false);
        }
        g_usleep(100);
    }
}

/* ------------------------------------------------------------------------ */
/* The header                                                                */

/* The name of feature bit (type, bit) from the table, or NULL. */
static char *qcow2_feature_name(const uint8_t *table, uint32_t len,
                                int type, int bit)
{
    for (uint32_t i = 0; i + 48 <= len; i += 48) {
        if (table[i] == type && table[i + 1] == bit) {
            return g_strndup((const char *)table + i + 2, 46);
        }
    }
    return NULL;
}

static bool qcow2_check_incompat(Qcow2State *s, const uint8_t *features,
                                 uint32_t flen, Error **errp)
{
    uint64_t known = QCOW2_INCOMPAT_DIRTY | QCOW2_INCOMPAT_CORRUPT |
                     QCOW2_INCOMPAT_DATA_FILE | QCOW2_INCOMPAT_COMPRESSION |
                     QCOW2_INCOMPAT_EXTL2;
    const char *refused = NULL;

    if (s->incompat & QCOW2_INCOMPAT_DATA_FILE) {
        refused = "an external data file";
    } else if (s->incompat & QCOW2_INCOMPAT_EXTL2) {
        refused = "extended L2 entries (subclusters)";
    }
    if (refused) {
        error_setg(errp, "The image uses %s, which driver 'qcow2' does not "
                   "support", refused);
        return false;
    }
    if (s->incompat & ~known) {
        int bit = __builtin_ctzll(s->incompat & ~known);
        g_autofree char *name = qcow2_feature_name(features, flen, 0, bit);

        error_setg(errp, "The image uses an unsupported incompatible "
                   "feature: %s (bit %d)", name ? name : "unknown", bit);
        return false;
    }
    if ((s->incompat & QCOW2_INCOMPAT_DIRTY) && !s->bs->read_only) {
        error_setg(errp, "The image is dirty (its refcounts may be wrong): "
                   "repair it with 'qemu-img check -r all' first, or open "
                   "it with read-only=on");
        return false;
    }
    if ((s->incompat & QCOW2_INCOMPAT_CORRUPT) && !s->bs->read_only) {
        error_setg(errp, "The image is marked corrupt: repair it with "
                   "'qemu-img check -r all' first, or open it with "
                   "read-only=on");
        return false;
    }
    return true;
}

/* Read the header extensions in hdr[from..cs). */
static bool qcow2_read_extensions(Qcow2State *s, const uint8_t *hdr,
                                  uint64_t from, uint64_t end,
                                  const uint8_t **features, uint32_t *flen,
                                  Error **errp)
{
    uint64_t p = from;

    while (p + 8 <= end) {
        uint32_t type = ld_be32(hdr + p), len = ld_be32(hdr + p + 4);

        p += 8;
        if (type == QCOW2_EXT_END) {
            return true;
        }
        if (len > end - p) {
            error_setg(errp, "Header extension 0x%08" PRIx32 " runs past "
                       "the first cluster", type);
            return false;
        }
        switch (type) {
        case QCOW2_EXT_BACKING_FMT:
            g_free(s->backing_fmt);
            s->backing_fmt = g_strndup((const char *)hdr + p, len);
            break;
        case QCOW2_EXT_FEATURES:
            *features = hdr + p;
            *flen = len;
            break;
        case QCOW2_EXT_BITMAPS:
            s->has_bitmaps = true;
            if (len >= 24) {
                s->nb_bitmaps = ld_be32(hdr + p);
                s->bitmap_dir_size = ld_be64(hdr + p + 8);
                s->bitmap_dir_offset = ld_be64(hdr + p + 16);
            }
            break;
        case QCOW2_EXT_CRYPTO:
            error_setg(errp, "The image is encrypted, which driver 'qcow2' "
                       "does not support");
            return false;
        default:
            break;               /* unknown: kept as is, never rewritten */
        }
        p += (len + 7) & ~7ull;
    }
    return true;
}

static bool qcow2_parse_header(Qcow2State *s, const uint8_t *hdr,
                               uint64_t file_len, Error **errp)
{
    uint64_t backing_off = ld_be64(hdr + 8);
    uint32_t backing_len = ld_be32(hdr + 16);
    uint64_t rct_clusters, l1_need, cs;
    const uint8_t *features = NULL;
    uint32_t flen = 0;

    s->size = ld_be64(hdr + 24);
    if (ld_be32(hdr + 32) != 0) {
        error_setg(errp, "The image is encrypted, which driver 'qcow2' does "
                   "not support");
        return false;
    }
    s->l1_size = ld_be32(hdr + 36);
    s->l1_offset = ld_be64(hdr + 40);
    s->rct_offset = ld_be64(hdr + 48);
    rct_clusters = ld_be32(hdr + 56);
    s->nb_snapshots = ld_be32(hdr + 60);
    cs = s->cluster_size;
    if (s->version >= 3) {
        s->incompat = ld_be64(hdr + 72);
        s->compat = ld_be64(hdr + 80);
        s->autoclear = ld_be64(hdr + 88);
        s->refcount_order = ld_be32(hdr + 96);
        s->header_length = ld_be32(hdr + 100);
        if (s->header_length < 104 || s->header_length % 8 ||
            s->header_length > cs) {
            error_setg(errp, "Invalid header length %" PRIu32,
                       s->header_length);
            return false;
        }
        if (s->header_length > 104) {
            s->compression_type = hdr[104];
        }
    } else {
        s->refcount_order = 4;
        s->header_length = 72;
    }
    if (s->refcount_order > 6) {
        error_setg(errp, "Invalid refcount order %" PRIu32,
                   s->refcount_order);
        return false;
    }
    if (!qcow2_read_extensions(s, hdr, s->header_length, cs, &features,
                               &flen, errp) ||
        !qcow2_check_incompat(s, features, flen, errp)) {
        return false;
    }
    if (!(s->incompat & QCOW2_INCOMPAT_COMPRESSION)) {
        s->compression_type = 0;
    } else if (s->compression_type != 1) {
        error_setg(errp, "Unknown compression type %" PRIu32,
                   s->compression_type);
        return false;
    }

    /* Tables: aligned, after the header, of a sane size, in the file. */
    s->l2_bits = s->cluster_bits - 3;
    s->rc_block_bits = s->cluster_bits + 3 - s->refcount_order;
    if ((uint64_t)s->l1_size * 8 > QCOW2_MAX_TABLE_BYTES) {
        error_setg(errp, "The L1 table is too large (%" PRIu32 " entries)",
                   s->l1_size);
        return false;
    }
    l1_need = (s->size + (cs << s->l2_bits) - 1) / (cs << s->l2_bits);
    if (s->size > (1ull << 62) || l1_need > s->l1_size) {
        error_setg(errp, "The L1 table (%" PRIu32 " entries) is too small "
                   "for the image size %" PRIu64, s->l1_size, s->size);
        return false;
    }
    if (s->l1_size && (s->l1_offset == 0 || s->l1_offset % cs ||
                       s->l1_offset > file_len ||
                       (uint64_t)s->l1_size * 8 > file_len - s->l1_offset)) {
        error_setg(errp, "Invalid L1 table offset 0x%" PRIx64, s->l1_offset);
        return false;
    }
    if (rct_clusters == 0 || rct_clusters * cs > QCOW2_MAX_TABLE_BYTES) {
        error_setg(errp, "Invalid refcount table size (%" PRIu64
                   " clusters)", rct_clusters);
        return false;
    }
    if (s->rct_offset == 0 || s->rct_offset % cs ||
        s->rct_offset > file_len ||
        rct_clusters * cs > file_len - s->rct_offset) {
        error_setg(errp, "Invalid refcount table offset 0x%" PRIx64,
                   s->rct_offset);
        return false;
    }
    s->rct_entries = rct_clusters * cs / 8;

    if (backing_off) {
        if (backing_len == 0 || backing_len > 1023 || backing_off >= cs ||
            backing_len > cs - backing_off) {
            error_setg(errp, "Invalid backing file name in the header");
            return false;
        }
        s->backing_file = g_strndup((const char *)hdr + backing_off,
                                    backing_len);
    }
    return true;
}

/* Read a table of n big-endian 64-bit entries at off into host order. */
static int qcow2_read_table(Qcow2Io *io, uint64_t off, uint64_t n,
                            uint64_t **out)
{
    uint8_t *buf = qcow2_alloc_buf(n * 8);
    int r = n ? qcow2_pread(io->file, off, buf, n * 8) : 0;

    *out = g_new0(uint64_t, MAX(n, 1));
    for (uint64_t i = 0; r == 0 && i < n; i++) {
        (*out)[i] = ld_be64(buf + 8 * i);
    }
    free(buf);
    return r;
}

static bool qcow2_read_image(Qcow2State *s, Qcow2Io *io, Error **errp)
{
    uint8_t first[512];
    uint8_t *hdr;
    BlockNode *file = s->bs->child;
    /* Read afresh: on activation, another program may have grown the
     * file while the node was inactive, and allocation starts at its end
     * (qcow2_reserve()). */
    int64_t file_len = MAX(block_node_get_length(file),
                           file->drv->getlength(file));
    bool ok;
    int r;

    r = qcow2_pread(io->file, 0, first, sizeof(first));
    if (r < 0) {
        error_setg_errno(errp, -r, "Cannot read the image header");
        return false;
    }
    if (ld_be32(first) != QCOW2_MAGIC) {
        error_setg(errp, "The image is not in qcow2 format (bad magic)");
        return false;
    }
    s->version = ld_be32(first + 4);
    if (s->version != 2 && s->version != 3) {
        error_setg(errp, "Unsupported qcow2 version %" PRIu32, s->version);
        return false;
    }
    s->cluster_bits = ld_be32(first + 20);
    if (s->cluster_bits < QCOW2_MIN_CLUSTER_BITS ||
        s->cluster_bits > QCOW2_MAX_CLUSTER_BITS) {
        error_setg(errp, "Unsupported cluster size 2^%" PRIu32 " (512 bytes "
                   "to 2 MiB are)", s->cluster_bits);
        return false;
    }
    s->cluster_size = 1ull << s->cluster_bits;
    s->alloc_end = ((uint64_t)MAX(file_len, 0) + s->cluster_size - 1) &
                   ~(s->cluster_size - 1);
    /* Requests to the file may reach the end of its last cluster. */
    qcow2_grow_file(s, s->alloc_end);
    hdr = qcow2_alloc_buf(s->cluster_size);
    r = qcow2_pread(io->file, 0, hdr, s->cluster_size);
    if (r < 0) {
        free(hdr);
        error_setg_errno(errp, -r, "Cannot read the image header");
        return false;
    }
    ok = qcow2_parse_header(s, hdr, s->alloc_end, errp);
    free(hdr);
    if (!ok) {
        return false;
    }
    if (s->compression_type && !qcow2_compression_supported(1)) {
        /* Refused at open rather than failing every compressed read. */
        error_setg(errp, "The image uses zstd compression, but spindle was "
                   "built without libzstd");
        return false;
    }
    r = qcow2_read_table(io, s->l1_offset, s->l1_size, &s->l1);
    if (r == 0) {
        r = qcow2_read_table(io, s->rct_offset, s->rct_entries, &s->rct);
    }
    if (r < 0) {
        error_setg_errno(errp, -r, "Cannot read the image's tables");
        return false;
    }
    return true;
}

#define QCOW2_BITMAP_IN_USE     1u    /* a bitmap directory entry's flag */

/*
 * Mark every persistent bitmap in use (inconsistent), in place in its
 * directory entry: this driver does not record writes in them.  0, or
 * -EINVAL if the directory is not where and what the extension says
 * (the caller then gives the bitmaps up), or -errno of the I/O.
 */
static int qcow2_mark_bitmaps_in_use(Qcow2State *s, Qcow2Io *io)
{
    uint64_t off = s->bitmap_dir_offset, size = s->bitmap_dir_size;
    uint32_t n = 0;
    uint64_t p = 0;
    uint8_t *dir;
    int r;

    if (!qcow2_host_offset_valid(s, off) || size == 0 ||
        size > QCOW2_MAX_TABLE_BYTES || size > s->alloc_end - off) {
        return -EINVAL;
    }
    dir = g_malloc(size);
    r = qcow2_pread(io->file, off, dir, size);
    /*
     * Each entry: 24 bytes of fields (flags at 12, the name's length at 18,
     * the extra data's at 20), extra data, the name, padding to 8.
     */
    while (r == 0 && p < size) {
        uint8_t *e = dir + p;
        uint64_t len;

        if (size - p < 24) {
            r = -EINVAL;
            break;
        }
        len = (24 + (uint64_t)ld_be32(e + 20) + ld_be16(e + 18) + 7) & ~7ull;
        if (len > size - p) {
            r = -EINVAL;
            break;
        }
        st_be32(e + 12, ld_be32(e + 12) | QCOW2_BITMAP_IN_USE);
        p += len;
        n++;
    }
    if (r == 0 && n != s->nb_bitmaps) {
        r = -EINVAL;
    }
    if (r == 0) {
        r = qcow2_pwrite(io->file, off, dir, size);
    }
    g_free(dir);
    return r;
}

/*
 * A writable open: bitmaps are marked in use, as QEMU marks those it
 * opens (they are not updated here, so they become inconsistent, but stay
 * listed and keep their clusters); the other autoclear bits, which mean
 * nothing to this driver, are cleared, as the specification asks of a
 * writer that does not keep what they guard.  A bitmap directory that
 * cannot be read as the extension describes is given up the same way.
 */
static bool qcow2_clear_autoclear(Qcow2State *s, Qcow2Io *io, Error **errp)
{
    uint64_t keep = 0;
    uint8_t buf[8];
    int r = 0;

    if (s->version < 3 || s->autoclear == 0) {
        return true;
    }
    if ((s->autoclear & QCOW2_AUTOCLEAR_BITMAPS) && s->has_bitmaps) {
        r = qcow2_mark_bitmaps_in_use(s, io);
        if (r == 0) {
            keep = QCOW2_AUTOCLEAR_BITMAPS;
        } else if (r != -EINVAL) {
            error_setg_errno(errp, -r, "Cannot mark the image's bitmaps "
                             "in use");
            return false;
        }
        r = 0;
    }
    if (s->autoclear != keep) {
        s->autoclear = keep;
        st_be64(buf, keep);
        r = qcow2_pwrite(io->file, QCOW2_HDR_AUTOCLEAR, buf, sizeof(buf));
    }
    if (r == 0) {
        r = qcow2_flush_file(s, io);
    }
    if (r < 0) {
        error_setg_errno(errp, -r, "Cannot update the image header");
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Options and the backing chain                                             */

/* The cache sizes from l2-cache-size, refcount-cache-size, cache-size. */
static bool qcow2_cache_sizes(Qcow2State *s, Opts *opts, unsigned *l2,
                              unsigned *rc, Error **errp)
{
    uint64_t cs = s->cluster_size, span = cs << s->l2_bits;
    uint64_t need = MAX((s->size + span - 1) / span * cs, 1);
    uint64_t l2_bytes, rc_bytes, total;
    bool has_l2 = opts_has(opts, "l2-cache-size");
    bool has_rc = opts_has(opts, "refcount-cache-size");
    bool has_total = opts_has(opts, "cache-size");
    int64_t interval;

    if (!opts_get_size(opts, "l2-cache-size",
                       MIN(need, QCOW2_DEFAULT_L2_MAX), &l2_bytes, errp) ||
        !opts_get_size(opts, "refcount-cache-size",
                       QCOW2_MIN_RC_BLOCKS * cs, &rc_bytes, errp) ||
        !opts_get_size(opts, "cache-size", 0, &total, errp) ||
        /* Accepted for QEMU's command lines, no effect: the caches have
         * a fixed size, and nothing frees idle entries. */
        !opts_get_int(opts, "cache-clean-interval", 0, UINT32_MAX, 600,
                      &interval, errp)) {
        return false;
    }
    if (has_total) {
        if (has_l2 && has_rc && l2_bytes + rc_bytes != total) {
            error_setg(errp, "l2-cache-size (%" PRIu64 ") + "
                       "refcount-cache-size (%" PRIu64 ") must equal "
                       "cache-size (%" PRIu64 ")", l2_bytes, rc_bytes, total);
            return false;
        }
        if (has_l2 && l2_bytes > total) {
            error_setg(errp, "l2-cache-size may not exceed cache-size");
            return false;
        }
        if (!has_l2) {
            l2_bytes = total > rc_bytes ? MIN(need, total - rc_bytes) : 0;
        }
        if (!has_rc && total > l2_bytes) {
            rc_bytes = total - l2_bytes;
        }
    }
    /* More L2 tables than the image has are never used (QEMU caps it
     * alike); the refcount cache is capped as the L2 cache's default. */
    l2_bytes = MIN(l2_bytes, need);
    rc_bytes = MIN(rc_bytes, QCOW2_DEFAULT_L2_MAX);
    *l2 = MAX(l2_bytes / cs, QCOW2_MIN_L2_TABLES);
    *rc = MAX(rc_bytes / cs, QCOW2_MIN_RC_BLOCKS);
    return true;
}

static BlockNode *qcow2_open_node(JsonObject *obj, AioContext *ctx,
                                  Error **errp)
{
    Opts *o = opts_new_from_object(obj);
    BlockNode *n = block_node_open(o, ctx, errp);

    opts_free(o);
    json_object_unref(obj);
    return n;
}

/* The backing file the header names, relative to the image's folder. */
static char *qcow2_backing_path(Qcow2State *s, Error **errp)
{
    const char *image = block_node_get_filename(s->bs->child);
    g_autofree char *dir = NULL;

    if (g_path_is_absolute(s->backing_file)) {
        return g_strdup(s->backing_file);
    }
    if (image && !strchr(image, '/')) {
        return g_strdup(s->backing_file);    /* both in the current folder */
    }
    if (!image) {
        error_setg(errp, "Cannot find backing file '%s': the image has no "
                   "file name to resolve it against; give 'backing'",
                   s->backing_file);
        return NULL;
    }
    dir = g_path_get_dirname(image);
    return g_build_filename(dir, s->backing_file, NULL);
}

/* Open the backing file named in the header: raw or qcow2 only. */
static BlockNode *qcow2_open_backing_file(Qcow2State *s, Error **errp)
{
    g_autofree char *path = qcow2_backing_path(s, errp);
    const char *fmt = s->backing_fmt;
    BlockNode *file, *node;
    JsonObject *obj;
    uint8_t magic[512];

    if (!path) {
        return NULL;
    }
    obj = json_object_new();
    json_object_set_string_member(obj, "driver", "file");
    json_object_set_string_member(obj, "filename", path);
    json_object_set_boolean_member(obj, "read-only", true);
    file = qcow2_open_node(obj, s->bs->ctx, errp);
    if (!file) {
        error_prepend(errp, "Cannot open backing file '%s': ", path);
        return NULL;
    }
    if (!fmt) {
        /* No backing format in the image: tell qcow2 from raw only. */
        int r = qcow2_pread(file->default_q, 0, magic, sizeof(magic));

        fmt = r == 0 && ld_be32(magic) == QCOW2_MAGIC ? "qcow2" : "raw";
    }
    if (strcmp(fmt, "qcow2") && strcmp(fmt, "raw")) {
        error_setg(errp, "Backing file '%s' has format '%s': only qcow2 "
                   "and raw are supported", path, fmt);
        block_node_unref(file);
        return NULL;
    }
    obj = json_object_new();
    json_object_set_string_member(obj, "driver", fmt);
    json_object_set_string_member(obj, "file", block_node_get_name(file));
    json_object_set_boolean_member(obj, "read-only", true);
    node = qcow2_open_node(obj, s->bs->ctx, errp);
    block_node_unref(file);     /* the format node holds it */
    if (!node) {
        error_prepend(errp, "Cannot open backing file '%s': ", path);
    }
    return node;
}

/* backing=NODE|{inline}|null, or absent: the header's. */
static bool qcow2_open_backing(Qcow2State *s, Opts *opts, Error **errp)
{
    g_autoptr(Opts) inline_opts = opts_get_child(opts, "backing");
    const char *name;

    if (opts_take_null(opts, "backing")) {
        return true;
    }
    if (inline_opts) {
        s->backing = block_node_open(inline_opts, s->bs->ctx, errp);
        return s->backing != NULL;
    }
    if (!opts_get_str(opts, "backing", NULL, &name, errp)) {
        return false;
    }
    if (name && (!strcmp(name, "null") || !*name)) {
        return true;
    }
    if (name) {
        s->backing = block_node_find(name);
        if (!s->backing) {
            error_setg(errp, "Parameter 'backing': no node named '%s'", name);
            return false;
        }
        block_node_ref(s->backing);
        return true;
    }
    if (s->backing_file) {
        s->backing = qcow2_open_backing_file(s, errp);
        return s->backing != NULL;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Open and close                                                            */

static void qcow2_worker(gpointer data, gpointer user_data);

static void qcow2_free_state(Qcow2State *s)
{
    if (s->pool) {
        g_thread_pool_free(s->pool, FALSE, TRUE);
        s->pool = NULL;
    }
    if (s->finisher) {
        g_thread_pool_free(s->finisher, FALSE, TRUE);
        s->finisher = NULL;
    }
    if (s->backing) {
        block_node_unref(s->backing);
        s->backing = NULL;
    }
    qcow2_cache_destroy(&s->l2_cache);
    qcow2_cache_destroy(&s->rc_cache);
    g_clear_pointer(&s->allocating, g_array_unref);
    g_clear_pointer(&s->pending_frees, g_array_unref);
    g_free(s->l1);
    g_free(s->rct);
    g_free(s->backing_file);
    g_free(s->backing_fmt);
    s->l1 = s->rct = NULL;
    s->backing_file = s->backing_fmt = NULL;
}

/* Open s->bs (qcow2_open() undoes what this did if it fails). */
/*
 * A writable qcow2 node allocates past the end of its file, which must
 * therefore grow: a regular file does, a block device or a remote image
 * (nbd, rbd, null-co) does not.  Refused at open rather than failing the
 * guest's first allocating write.
 */
static bool qcow2_file_growable(BlockNode *child, Error **errp)
{
    const char *name = block_node_get_filename(child);
    struct stat st;

    if (name && stat(name, &st) == 0 && S_ISREG(st.st_mode)) {
        return true;
    }
    if (name) {
        error_setg(errp, "A writable qcow2 node needs a regular file below "
                   "it ('%s' is not one); open it with read-only=on", name);
    } else {
        error_setg(errp, "A writable qcow2 node needs a regular file below "
                   "it (node '%s' is driver '%s'); open it with "
                   "read-only=on", block_node_get_name(child),
                   block_node_get_driver_name(child));
    }
    return false;
}

static bool qcow2_open_state(Qcow2State *s, Opts *opts, Error **errp)
{
    BlockNode *bs = s->bs, *child;
    unsigned l2n, rcn;
    bool lazy;
    Qcow2Io io;

    g_mutex_init(&s->lock);
    g_cond_init(&s->alloc_cond);
    s->allocating = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    s->pending_frees = g_array_new(FALSE, FALSE, sizeof(Qcow2Extent));
    child = block_node_open_child(bs, opts, "file", errp);
    if (!child) {
        return false;
    }
    if (!bs->read_only && !qcow2_file_growable(child, errp)) {
        return false;
    }
    io = (Qcow2Io) { .file = child->default_q };
    if (!qcow2_read_image(s, &io, errp) ||
        !qcow2_cache_sizes(s, opts, &l2n, &rcn, errp) ||
        /* Accepted; refcounts are always updated eagerly here. */
        !opts_get_bool(opts, "lazy-refcounts", false, &lazy, errp) ||
        !qcow2_open_backing(s, opts, errp)) {
        return false;
    }
    qcow2_cache_init(&s->l2_cache, l2n, s->cluster_size);
    qcow2_cache_init(&s->rc_cache, rcn, s->cluster_size);
    if (!bs->read_only && block_node_is_active(bs) &&
        !qcow2_clear_autoclear(s, &io, errp)) {
        return false;
    }
    bs->limits = child->limits;
    bs->limits.discard_alignment = s->cluster_size;
    bs->limits.max_discard = 0;
    bs->limits.max_write_zeroes = 0;
    s->pool = g_thread_pool_new(qcow2_worker, s, QCOW2_WORKERS, FALSE,
                                NULL);
    s->finisher = g_thread_pool_new(qcow2_alloc_finish, s, 1, FALSE, NULL);
    return true;
}

/* Write the metadata caches back and flush, from the main thread (the
 * node idle: a close, an inactivation). */
static int qcow2_flush_idle(Qcow2State *s)
{
    Qcow2Io io = { .file = s->bs->child->default_q };
    int r;

    qcow2_lock_main(s);
    r = qcow2_flush_metadata(s, &io);
    g_mutex_unlock(&s->lock);
    return r;
}

static void qcow2_close(BlockNode *bs)
{
    Qcow2State *s = bs->opaque;
    int r;

    /* Drained: the workers have finished (the pool waits for the last to
     * return).  What the caches hold goes to the image first.  (After a
     * failed open there is no pool and nothing to write.) */
    if (s->pool && !qcow2_metadata_clean(s)) {
        r = qcow2_flush_idle(s);
        if (r < 0) {
            error_report("node '%s': cannot write the qcow2 metadata back: "
                         "%s (the image may have leaked clusters)",
                         block_node_get_name(bs), g_strerror(-r));
        }
    }
    qcow2_free_state(s);
    g_cond_clear(&s->alloc_cond);
    g_mutex_clear(&s->lock);
}

/* A failed open is not closed by the generic layer: undo it here (the
 * child, bs->child, is the generic layer's to drop). */
static bool qcow2_open(BlockNode *bs, Opts *opts, Error **errp)
{
    Qcow2State *s = bs->opaque;

    s->bs = bs;
    if (!qcow2_open_state(s, opts, errp)) {
        qcow2_close(bs);
        return false;
    }
    return true;
}

static int64_t qcow2_getlength(BlockNode *bs)
{
    Qcow2State *s = bs->opaque;

    return s->size;
}

/*
 * The part [old, size) of an overlay just grown reads as zeros, not as
 * what its backing node holds there (as QEMU does).  Main thread, no
 * lock held; the guest cannot reach the part yet.
 */
static int qcow2_zero_grown(Qcow2State *s, uint64_t old, uint64_t size)
{
    int64_t blen = s->backing ? block_node_get_length(s->backing) : 0;
    Qcow2Io io = { .file = s->bs->child->default_q };
    BlockRequest req = { .op = BLOCK_OP_WRITE_ZEROES, .offset = old };

    if (blen <= (int64_t)old) {
        return 0;
    }
    io.backing = s->backing->default_q;
    req.bytes = MIN(size, (uint64_t)blen) - old;
    return qcow2_co_rw(s, &io, &req);
}

static bool qcow2_truncate(BlockNode *bs, int64_t size, Error **errp)
{
    Qcow2State *s = bs->opaque;
    Qcow2Io io = { .file = bs->child->default_q };
    uint8_t buf[8];
    int r;

    if (s->version < 3 && s->nb_snapshots) {
        error_setg(errp, "A version 2 image with snapshots cannot be "
                   "resized");
        return false;
    }
    qcow2_lock_main(s);
    r = qcow2_grow_l1(s, &io, size);
    g_mutex_unlock(&s->lock);
    if (r == 0) {
        r = qcow2_zero_grown(s, s->size, size);
    }
    qcow2_lock_main(s);
    if (r == 0) {
        /* The zeros on storage before the size that shows them. */
        r = qcow2_flush_metadata(s, &io);
    }
    if (r == 0) {
        st_be64(buf, size);
        r = qcow2_pwrite(io.file, QCOW2_HDR_SIZE, buf, sizeof(buf));
    }
    if (r == 0) {
        r = qcow2_flush_file(s, &io);
    }
    if (r == 0) {
        s->size = size;
    }
    g_mutex_unlock(&s->lock);
    if (r < 0) {
        error_setg_errno(errp, -r, "Cannot resize the qcow2 image");
        return false;
    }
    return true;
}

/*
 * Inactive: another process may write the image from now on, so
 * everything the caches hold goes to it first.  Active again: that
 * process may have changed anything, so the header and tables are read
 * again and the caches start empty.  Main thread, the node idle.
 */
static bool qcow2_set_active(BlockNode *bs, bool active, Error **errp)
{
    Qcow2State *s = bs->opaque;
    Qcow2Io io = { .file = bs->child->default_q };
    bool ok;
    int r;

    if (!active) {
        r = qcow2_flush_idle(s);
        if (r < 0) {
            error_setg_errno(errp, -r, "Cannot write the qcow2 metadata "
                             "back");
            return false;
        }
        return true;
    }
    qcow2_lock_main(s);
    g_clear_pointer(&s->l1, g_free);
    g_clear_pointer(&s->rct, g_free);
    g_clear_pointer(&s->backing_file, g_free);
    g_clear_pointer(&s->backing_fmt, g_free);
    qcow2_cache_clear(&s->l2_cache);
    qcow2_cache_clear(&s->rc_cache);
    ok = qcow2_read_image(s, &io, errp) &&
         (bs->read_only || qcow2_clear_autoclear(s, &io, errp));
    g_mutex_unlock(&s->lock);
    return ok;
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */

/* A request on its way through a worker (the pool's user data is the
 * node's Qcow2State). */
typedef struct Qcow2Job {
    BlockRequest *req;
    AioContext *ctx;             /* its home: the completion goes there */
    Qcow2Io io;
    int ret;
} Qcow2Job;

/* Back in the request's home thread: complete it through its queue's
 * deferred completions (one BH for every request finished meanwhile). */
static void qcow2_job_done_bh(void *opaque)
{
    Qcow2Job *job = opaque;

    block_request_complete_later(job->req, job->ret);
    g_free(job);
}

static void qcow2_worker(gpointer data, gpointer user_data)
{
    Qcow2Job *job = data;

    job->ret = qcow2_co_rw(user_data, &job->io, job->req);
    aio_bh_schedule_oneshot(job->ctx, qcow2_job_done_bh, job);
}

/*
 * What the IOThread can do alone: 1 (data clusters, contiguous: *host is
 * where the range starts in the file), 2 (a read of zeros), 3 (a read
 * of unallocated clusters that the backing node holds whole), 0 (a
 * worker's job).  Never waits: the lock is only tried.
 */
static int qcow2_fast_map(Qcow2State *s, BlockRequest *req, uint64_t *host)
{
    uint64_t cs = s->cluster_size, end = req->offset + req->bytes;
    bool write = req->op == BLOCK_OP_WRITE;
    int kind = 0;

    if (!g_mutex_trylock(&s->lock)) {
        return 0;
    }
    /* A FUA write is on storage when it completes, and so must be what
     * maps its clusters: with metadata waiting in the caches (an entry
     * set by an allocation not yet written back) it is a worker's job,
     * which writes the caches back after the data (qcow2_co_rw()). */
    if (write && (req->flags & BLOCK_REQ_FUA) && !qcow2_metadata_clean(s)) {
        g_mutex_unlock(&s->lock);
        return 0;
    }
    for (uint64_t off = req->offset; off < end;
         off = (off & ~(cs - 1)) + cs) {
        uint64_t e, h;
        int k;

        if (qcow2_get_entry(s, NULL, off, &e, true) < 0) {
            kind = 0;
            break;
        }
        switch (qcow2_entry_type(s, e)) {
        case QCOW2_CLUSTER_NORMAL:
            h = e & QCOW2_OFFSET_MASK;
            k = qcow2_host_offset_valid(s, h) &&
                (!write || (e & QCOW2_COPIED)) ? 1 : 0;
            h += off & (cs - 1);
            if (off == (uint64_t)req->offset) {
                *host = h;
            } else if (h != *host + (off - req->offset)) {
                k = 0;
            }
            break;
        case QCOW2_CLUSTER_ZERO:
            k = write ? 0 : 2;
            break;
        case QCOW2_CLUSTER_UNALLOCATED:
            k = write ? 0 : !s->backing ? 2 :
                end <= (uint64_t)block_node_get_length(s->backing) ? 3 : 0;
            break;
        default:
            k = 0;
        }
        if (k == 0 || (kind && k != kind)) {
            kind = 0;
            break;
        }
        kind = k;
    }
    g_mutex_unlock(&s->lock);
    return kind;
}

/* A read passed on to the backing node, in the request's context. */
typedef struct Qcow2BackingRead {
    BlockRequest sub;
    BlockRequest *req;
} Qcow2BackingRead;

static void qcow2_backing_read_cb(BlockRequest *sub, int ret)
{
    Qcow2BackingRead *b = sub->opaque;

    block_request_complete_later(b->req, ret);
    g_free(b);
}

static void qcow2_backing_read(BlockQueue *backing, BlockRequest *req)
{
    Qcow2BackingRead *b = g_new(Qcow2BackingRead, 1);

    b->req = req;
    b->sub = (BlockRequest) {
        .op = BLOCK_OP_READ, .offset = req->offset, .bytes = req->bytes,
        .iov = req->iov, .niov = req->niov,
        .cb = qcow2_backing_read_cb, .opaque = b,
    };
    block_queue_submit(backing, &b->sub);
}

static void qcow2_submit(BlockNode *bs, BlockRequest *req)
{
    Qcow2State *s = bs->opaque;
    BlockQueue *q = block_req_queue(bs, req);
    Qcow2Queue *qq = q->opaque;
    Qcow2Job *job;
    uint64_t host = 0;

    if (req->op == BLOCK_OP_FLUSH && g_mutex_trylock(&s->lock)) {
        bool clean = qcow2_metadata_clean(s);

        g_mutex_unlock(&s->lock);
        if (clean) {
            /* Nothing to write back: the file's flush is all it takes. */
            block_driver_submit(bs->child, req);
            return;
        }
    }
    if (req->op == BLOCK_OP_READ || req->op == BLOCK_OP_WRITE) {
        switch (qcow2_fast_map(s, req, &host)) {
        case 1:
            req->offset = host;
            block_driver_submit(bs->child, req);
            return;
        case 2:
            iov_zero_from(req->iov, req->niov, 0);
            block_request_complete_later(req, 0);
            return;
        case 3:
            qcow2_backing_read(qq->backing, req);
            return;
        default:
            break;
        }
        if (qcow2_alloc_start(s, q, qq->backing, req)) {
            return;
        }
    }
    job = g_new0(Qcow2Job, 1);
    job->req = req;
    job->ctx = q->ctx;
    job->io = (Qcow2Io) { .file = q->child, .backing = qq->backing };
    g_thread_pool_push(s->pool, job, NULL);
}

/* The backing node's queue in q's context.  q->ctx's home thread. */
static void qcow2_attach_queue(BlockQueue *q)
{
    Qcow2State *s = q->bs->opaque;
    Qcow2Queue *qq = g_new0(Qcow2Queue, 1);

    if (s->backing) {
        qq->backing = block_queue_new(s->backing, q->ctx, NULL);
    }
    q->opaque = qq;
}

static void qcow2_detach_queue(BlockQueue *q)
{
    Qcow2Queue *qq = q->opaque;

    block_queue_free(qq->backing);
    g_free(qq);
    q->opaque = NULL;
}

const BlockDriver block_driver_qcow2 = {
    .instance_size = sizeof(Qcow2State),
    .open = qcow2_open,
    .close = qcow2_close,
    .getlength = qcow2_getlength,
    .truncate = qcow2_truncate,
    .submit = qcow2_submit,
    .attach_queue = qcow2_attach_queue,
    .detach_queue = qcow2_detach_queue,
    .set_active = qcow2_set_active,
};

/* ------------------------------------------------------------------------ */
/* Queries                                                                   */

BlockNode *block_qcow2_get_backing(const BlockNode *bs)
{
    return bs->drv == &block_driver_qcow2 ?
           ((Qcow2State *)bs->opaque)->backing : NULL;
}

uint64_t block_qcow2_get_iothread_allocs(const BlockNode *bs)
{
    return bs->drv == &block_driver_qcow2 ?
           atomic_load_explicit(&((Qcow2State *)bs->opaque)->iothread_allocs,
                                memory_order_relaxed) : 0;
}

const char *block_qcow2_get_backing_file(const BlockNode *bs)
{
    return bs->drv == &block_driver_qcow2 ?
           ((Qcow2State *)bs->opaque)->backing_file : NULL;
}

/*
 * The `file` block driver: a regular file or a block device on the host.
 *
 * Theory of operation.
 *
 * Open (main thread) reads the driver's options, opens the file with
 * O_RDWR or O_RDONLY, O_CLOEXEC and O_DIRECT for cache.direct=on, takes an
 * OFD lock (below), works out the node's limits (below) and picks the I/O
 * engine.  Everything in FilePosixState is fixed after open except the
 * engine instance, which follows the node from AioContext to AioContext.
 *
 * Engines.  READ, WRITE and FLUSH go to an I/O engine (block/aio-engine.h):
 * Linux AIO ("native"), io_uring or the thread pool ("threads").  Engines
 * have one instance per AioContext, shared by every file node there, so the
 * driver keeps the engine's ops (chosen once, at open) and the instance of
 * each context the node is used from (one per BlockQueue, in q->opaque):
 * tried at open (in the node's context, via aio_run_sync() when that is
 * an IOThread's), so that the default can be chosen and an explicit aio=
 * that cannot work fails the open, and obtained in attach_queue(), which
 * the generic layer runs for the node's default queue after open and
 * after every move, and for every other queue over the node.  Without aio=, the default is
 * io_uring if it was built and the kernel lets us set up a ring in the
 * node's context, else native if it was built and cache.direct=on (Linux
 * AIO is only asynchronous with O_DIRECT), else threads.  An explicit aio=
 * that cannot be set up fails the open; if it cannot be set up in a context
 * the node later moves to or is used from, the node falls back to threads
 * there (with a warning), because attaching cannot fail at that point.
 *
 * DISCARD and WRITE_ZEROES are blocking system calls (fallocate, the
 * BLKDISCARD / BLKZEROOUT ioctls), so they run in the thread pool; the
 * worker reads only the request and the fixed part of the state, and the
 * completion comes back in the node's context through the pool's BH.
 * Discard is a hint: with discard=ignore, or where the file system or
 * device cannot deallocate (EOPNOTSUPP), it completes with 0 and changes
 * nothing.  Write-zeroes must leave zeroes, so it tries, in order:
 * deallocating (PUNCH_HOLE, only with BLOCK_REQ_MAY_UNMAP and
 * discard=unmap), FALLOC_FL_ZERO_RANGE (files) or BLKZEROOUT (block
 * devices), and finally writing zeroes from a shared zeroed buffer.  A
 * method found unsupported is remembered and not tried again.
 *
 * Writes past the end.  The generic layer refuses requests beyond the
 * node's length, but with O_DIRECT on a file whose size is not a multiple
 * of the alignment, its read-modify-write of the last, partial block
 * writes the whole block.  Such a WRITE is done in the thread pool, which
 * then truncates the file back, so the image never grows.
 *
 * Resizing (block_node_resize(), main thread, requests possibly in
 * flight) grows a regular file with ftruncate and never shrinks one; a
 * block device keeps its size (its current size is accepted, read
 * again).  The node's length lives in the generic layer (an atomic that
 * it publishes after truncate()), and the write-past-the-end path above
 * reads and restores the file size under size_lock, which truncate() and
 * getlength() take too, so that neither undoes the other.
 *
 * Locking (file-lock.c).  An active node holds OFD locks on the image,
 * Spindle's own byte and the bytes QEMU's file driver locks, so neither
 * two Spindles nor a Spindle and a QEMU write one image at once.  OFD
 * locks belong to the open file description, so two nodes on one image
 * in the same process conflict just like two processes.  An inactive
 * node (block.h; opened with active=off, or made inactive later) holds no
 * lock at all, so another daemon can write the image meanwhile: going
 * inactive syncs the file (fdatasync) and drops the locks, going active
 * takes them as an open does (the same grace for a busy lock, the same
 * error).
 *
 * Limits.  Without O_DIRECT any offset, length and buffer work (alignment
 * 1).  With O_DIRECT we ask the kernel (statx STATX_DIOALIGN); where it
 * does not say, block devices report their logical block size
 * (BLKSSZGET), and files are probed with O_DIRECT reads at offset 0 of
 * growing sizes (1, 512, ..., 64 KiB) into an aligned buffer: the first
 * size that reads data is the request alignment (EINVAL means "too
 * small"), and reads of that size into buffers at growing alignments give
 * the memory alignment.  A file system that refuses every size does not
 * do O_DIRECT at all, and the open fails.  A read that hits the end of the
 * file (an empty file) proves nothing, so then we assume 4096 for both,
 * which is safe everywhere and costs only bounce buffers.  The memory alignment is never
 * less than the request alignment, because older kernels also require
 * each iovec element's length to be a multiple of the logical block size.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <glib.h>

#include "block/aio-engine.h"
#include "block/block-int.h"
#include "file-lock.h"
#include "util/thread-pool.h"
#include "util/trace.h"

/* Largest O_DIRECT alignment probed, and the fallback when unknown. */
#define FILE_PROBE_MAX_ALIGN    65536
#define FILE_DEFAULT_DIO_ALIGN  4096

/*
 * Limits for the layers above: the kernel splits large requests itself, so
 * these only need to stay well below the ~2 GiB that one Linux read or
 * write moves at most (larger ones come back short) while not getting in
 * the way of any request a guest sends.
 */
#define FILE_MAX_TRANSFER       (16 * 1024 * 1024)
#define FILE_MAX_DISCARD        (1024 * 1024 * 1024)
#define FILE_MAX_WRITE_ZEROES   (1024 * 1024 * 1024)

/* The shared zeroed buffer for write-zeroes without kernel support. */
#define FILE_ZERO_BUF_SIZE      (1024 * 1024)
#define FILE_ZERO_BUF_ALIGN     FILE_PROBE_MAX_ALIGN

/* aio= values, in QEMU's spelling.  Index 0 (threads) is the fallback. */
static const char *const file_aio_names[] = {
    "threads", "native", "io_uring", NULL
};

typedef struct FilePosixState {
    int fd;
    char *filename;              /* as the user gave it, for messages */
    bool is_blkdev;
    bool locked;                 /* we hold the OFD locks */
    FileLocking locking;         /* locking=, for activating later */
    bool drop_cache;             /* drop-cache=: see file_set_active() */
    uint32_t block_size;         /* block devices: logical block size */

    /* The engine chosen at open; the instances are per queue. */
    const BlockEngineOps *chosen_ops;

    /*
     * Held (regular files only) by whatever changes or reads the file's
     * size: a write past the end (a pool worker: it grows the file, then
     * cuts it back), truncate() and getlength() (main thread).  So a
     * resize never meets a file that is grown only for a moment, and a
     * write past the end never cuts back a file that a resize has grown.
     * Rare paths only: ordinary requests do not take it.
     */
    GMutex size_lock;

    /*
     * Methods found unsupported, set and read by pool workers.  Relaxed:
     * each is only a hint that saves a failing system call; a worker that
     * does not see another's store yet just tries once more.
     */
    _Atomic bool no_punch_hole;
    _Atomic bool no_zero_range;
    _Atomic bool no_blkzeroout;
} FilePosixState;

/* What a pool worker needs: the state is fixed while requests are in
 * flight, the request is owned by the block layer until we complete it. */
/* Per BlockQueue (per context): the engine instance there.  Home thread. */
typedef struct FileQueue {
    const BlockEngineOps *ops;   /* == chosen_ops unless we fell back */
    BlockEngine *engine;
} FileQueue;

typedef struct FileWork {
    FilePosixState *s;
    BlockRequest *req;
    int64_t length;              /* the node's length */
    bool discard_unmap;
    bool no_flush;
} FileWork;

/* ------------------------------------------------------------------------ */
/* Engines                                                                   */

typedef struct FileEngineGet {
    const BlockEngineOps *ops;
    AioContext *ctx;
    BlockEngine *engine;
    Error *err;
} FileEngineGet;

static void file_engine_get_in_ctx(void *opaque)
{
    FileEngineGet *g = opaque;

    g_assert(aio_context_in_home_thread(g->ctx));
    g->engine = block_engine_get(g->ops, g->ctx, &g->err);
}

/*
 * ctx's instance of ops, created in ctx's home thread (engines are
 * home-thread objects).  Any thread; from another thread ctx must be
 * running (aio_run_sync()).
 */
static BlockEngine *file_engine_get(const BlockEngineOps *ops, AioContext *ctx,
                                    Error **errp)
{
    FileEngineGet g = { .ops = ops, .ctx = ctx };

    aio_run_sync(ctx, file_engine_get_in_ctx, &g);
    if (!g.engine) {
        if (!g.err) {
            error_setg(&g.err, "the I/O engine could not be set up");
        }
        error_propagate(errp, g.err);
    }
    return g.engine;
}

/* Use engine name in ctx if it is built and works there; false, quietly,
 * if not. */
static bool file_engine_try(FilePosixState *s, const char *name,
                            AioContext *ctx)
{
    const BlockEngineOps *ops = block_engine_find(name);

    if (!ops) {
        return false;
    }
    if (!file_engine_get(ops, ctx, NULL)) {
        return false;
    }
    s->chosen_ops = ops;
    return true;
}

/* aio_index: index into file_aio_names, or -1 for the default. */
static bool file_engine_choose(BlockNode *bs, int aio_index, Error **errp)
{
    FilePosixState *s = bs->opaque;
    const char *name;

    if (aio_index < 0) {
        if (file_engine_try(s, "io_uring", bs->ctx)) {
            return true;
        }
        if (bs->cache_direct && file_engine_try(s, "native", bs->ctx)) {
            return true;
        }
        aio_index = 0;           /* threads */
    }
    name = file_aio_names[aio_index];
    s->chosen_ops = block_engine_find(name);
    if (!s->chosen_ops) {
        error_setg(errp, "aio=%s is not supported by this build of Spindle",
                   name);
        return false;
    }
    if (!file_engine_get(s->chosen_ops, bs->ctx, errp)) {
        error_prepend(errp, "aio=%s: ", name);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Opening                                                                   */

static int file_open_fd(const char *filename, int flags)
{
    int fd;

    do {
        fd = open(filename, flags);
    } while (fd < 0 && errno == EINTR);
    return fd < 0 ? -errno : fd;
}

static bool file_open_image(BlockNode *bs, Error **errp)
{
    FilePosixState *s = bs->opaque;
    int flags = (bs->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
    int fd;

    if (bs->cache_direct) {
        flags |= O_DIRECT;
    }
    fd = file_open_fd(s->filename, flags);
    if (fd == -EINVAL && bs->cache_direct) {
        /* Is it O_DIRECT that the file system refuses?  Ask once more
         * without it. */
        int fd2 = file_open_fd(s->filename, flags & ~O_DIRECT);

        if (fd2 >= 0) {
            close(fd2);
            error_setg(errp, "Could not open '%s': cache.direct=on is not "
                       "supported by the file system of '%s' (it refuses "
                       "O_DIRECT); use cache.direct=off", s->filename,
                       s->filename);
            return false;
        }
    }
    if (fd < 0) {
        error_setg_errno(errp, -fd, "Could not open '%s'", s->filename);
        return false;
    }
    s->fd = fd;
    return true;
}

static bool file_check_type(BlockNode *bs, Error **errp)
{
    FilePosixState *s = bs->opaque;
    struct stat st;

    if (fstat(s->fd, &st) < 0) {
        error_setg_errno(errp, errno, "Could not stat '%s'", s->filename);
        return false;
    }
    if (S_ISBLK(st.st_mode)) {
        s->is_blkdev = true;
    } else if (!S_ISREG(st.st_mode)) {
        error_setg(errp, "'%s' is not a regular file or a block device",
                   s->filename);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Locking                                                                   */

static bool file_lock(BlockNode *bs, FileLocking locking, Error **errp)
{
    FilePosixState *s = bs->opaque;

    return file_lock_image(s->fd, s->filename, bs->read_only, locking,
                           &s->locked, errp);
}

static void file_unlock(FilePosixState *s)
{
    if (s->locked) {
        file_unlock_image(s->fd);
        s->locked = false;
    }
}

/* Going inactive: what was written reaches storage, then the lock goes. */
static bool file_set_active(BlockNode *bs, bool active, Error **errp)
{
    FilePosixState *s = bs->opaque;

    if (active) {
        if (!file_lock(bs, s->locking, errp)) {
            return false;
        }
        /* Another host may have written the image while we were inactive
         * (shared storage): what our page cache holds of it may be stale.
         * QEMU's drop-cache=on, the default; a hint, errors ignored. */
        if (s->drop_cache && !bs->cache_direct) {
            posix_fadvise(s->fd, 0, 0, POSIX_FADV_DONTNEED);
        }
        return true;
    }
    if (!bs->read_only && fdatasync(s->fd) < 0) {
        error_setg_errno(errp, errno, "Failed to flush '%s'", s->filename);
        return false;
    }
    file_unlock(s);
    return true;
}

/* ------------------------------------------------------------------------ */
/* Limits                                                                    */

static bool file_statx_dio_align(int fd, uint32_t *offset_align,
                                 uint32_t *mem_align)
{
#ifdef STATX_DIOALIGN
    struct statx stx;

    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
        (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align) {
        *offset_align = stx.stx_dio_offset_align;
        *mem_align = MAX(stx.stx_dio_mem_align, 1);
        return true;
    }
#endif
    return false;
}

/* 1: read data, 0: end of file (proves nothing), -errno. */
static int file_probe_read(int fd, void *buf, size_t len)
{
    ssize_t n;

    do {
        n = pread(fd, buf, len, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        return -errno;
    }
    return n > 0;
}

/*
 * Probe O_DIRECT alignments with reads at offset 0.  Returns 1 and sets
 * *req_align and *mem_align if a read transferred data; 0 if nothing
 * conclusive was learnt (end of file, an I/O error); -EINVAL if the file
 * system refused every size.
 */
static int file_probe_dio_align(int fd, uint32_t *req_align,
                                uint32_t *mem_align)
{
    /* Twice the largest alignment, so buf + a is aligned to exactly a. */
    void *buf = NULL;
    uint32_t size;
    int ret = -EINVAL;

    if (posix_memalign(&buf, FILE_PROBE_MAX_ALIGN, 2 * FILE_PROBE_MAX_ALIGN)) {
        return 0;
    }
    for (size = 1; size <= FILE_PROBE_MAX_ALIGN;
         size = size < 512 ? 512 : size * 2) {
        ret = file_probe_read(fd, buf, size);
        if (ret != -EINVAL) {
            break;
        }
    }
    if (ret == 1) {
        *req_align = size;
        *mem_align = FILE_DEFAULT_DIO_ALIGN;
        for (uint32_t a = 1; a <= FILE_DEFAULT_DIO_ALIGN; a *= 2) {
            if (file_probe_read(fd, (char *)buf + a, size) == 1) {
                *mem_align = a;
                break;
            }
        }
    }
    free(buf);
    return ret == 1 || ret == -EINVAL ? ret : 0;
}

static bool file_blkdev_limits(BlockNode *bs, Error **errp)
{
    FilePosixState *s = bs->opaque;
    int logical = 0;
    unsigned int physical = 0;

    if (ioctl(s->fd, BLKSSZGET, &logical) < 0 || logical <= 0) {
        error_setg_errno(errp, logical <= 0 ? EINVAL : errno,
                         "Could not get the block size of '%s'", s->filename);
        return false;
    }
    s->block_size = logical;
    if (ioctl(s->fd, BLKPBSZGET, &physical) < 0 || physical == 0) {
        physical = logical;
    }
    bs->limits.discard_alignment = MAX(physical, (unsigned)logical);
    return true;
}

static bool file_dio_limits(BlockNode *bs, Error **errp)
{
    FilePosixState *s = bs->opaque;
    uint32_t req_align = FILE_DEFAULT_DIO_ALIGN;
    uint32_t mem_align = FILE_DEFAULT_DIO_ALIGN;

    if (!file_statx_dio_align(s->fd, &req_align, &mem_align)) {
        int ret = file_probe_dio_align(s->fd, &req_align, &mem_align);

        if (ret == -EINVAL) {
            error_setg(errp, "cache.direct=on is not supported by the file "
                       "system of '%s' (it refuses every O_DIRECT read of up "
                       "to %d bytes); use cache.direct=off", s->filename,
                       FILE_PROBE_MAX_ALIGN);
            return false;
        }
        if (ret == 0 && s->is_blkdev) {
            req_align = s->block_size;
        }
    }
    if (s->is_blkdev) {
        req_align = MAX(req_align, s->block_size);
    }
    bs->limits.request_alignment = req_align;
    bs->limits.mem_alignment = MAX(mem_align, req_align);
    return true;
}

static bool file_set_limits(BlockNode *bs, Error **errp)
{
    FilePosixState *s = bs->opaque;
    struct stat st;

    bs->limits = (BlockLimits) {
        .request_alignment = 1,
        .mem_alignment = 1,
        .max_transfer = FILE_MAX_TRANSFER,
        .max_discard = FILE_MAX_DISCARD,
        .max_write_zeroes = FILE_MAX_WRITE_ZEROES,
    };
    if (s->is_blkdev) {
        if (!file_blkdev_limits(bs, errp)) {
            return false;
        }
    } else if (fstat(s->fd, &st) == 0 && st.st_blksize > 0) {
        /* Holes are punched in whole file system blocks. */
        bs->limits.discard_alignment = st.st_blksize;
    }
    if (bs->cache_direct) {
        return file_dio_limits(bs, errp);
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* BlockDriver: open, close, length                                          */

static void file_close(BlockNode *bs)
{
    FilePosixState *s = bs->opaque;

    if (s->fd >= 0) {
        file_unlock(s);
        close(s->fd);
        s->fd = -1;
    }
    g_clear_pointer(&s->filename, g_free);
    g_mutex_clear(&s->size_lock);
}

static bool file_read_options(BlockNode *bs, Opts *opts, int *aio_index,
                              FileLocking *locking, Error **errp)
{
    FilePosixState *s = bs->opaque;
    const char *filename;
    int locking_index;

    if (!opts_get_str(opts, "filename", NULL, &filename, errp)) {
        return false;
    }
    if (!filename || !*filename) {
        error_setg(errp, "Parameter 'filename' is required by driver 'file'");
        return false;
    }
    s->filename = g_strdup(filename);
    if (!opts_get_enum(opts, "aio", file_aio_names, -1, aio_index, errp) ||
        !opts_get_enum(opts, "locking", file_locking_names,
                       FILE_LOCKING_AUTO, &locking_index, errp) ||
        !opts_get_bool(opts, "drop-cache", true, &s->drop_cache, errp)) {
        return false;
    }
    *locking = locking_index;
    return true;
}

static bool file_open(BlockNode *bs, Opts *opts, Error **errp)
{
    FilePosixState *s = bs->opaque;
    int aio_index;

    s->fd = -1;
    g_mutex_init(&s->size_lock);      /* cleared by file_close() */
    if (!file_read_options(bs, opts, &aio_index, &s->locking, errp) ||
        !file_open_image(bs, errp) ||
        !file_check_type(bs, errp) ||
        (block_node_is_active(bs) && !file_lock(bs, s->locking, errp)) ||
        !file_set_limits(bs, errp) ||
        !file_engine_choose(bs, aio_index, errp)) {
        file_close(bs);
        return false;
    }
    SPINDLE_TRACE2(file_open, s->fd, s->chosen_ops->name);
    return true;
}

const char *block_file_get_filename(const BlockNode *bs)
{
    const FilePosixState *s = bs->opaque;

    g_assert(bs->drv == &block_driver_file);
    return s->filename;
}

static int64_t file_blkdev_size(FilePosixState *s)
{
    uint64_t size;

    if (ioctl(s->fd, BLKGETSIZE64, &size) < 0) {
        return -errno;
    }
    return size > INT64_MAX ? INT64_MAX : (int64_t)size;
}

static int64_t file_getlength(BlockNode *bs)
{
    FilePosixState *s = bs->opaque;
    struct stat st;
    int ret;

    if (s->is_blkdev) {
        return file_blkdev_size(s);
    }
    g_mutex_lock(&s->size_lock);      /* not while a write past EOF runs */
    ret = fstat(s->fd, &st);
    g_mutex_unlock(&s->size_lock);
    return ret < 0 ? -errno : st.st_size;
}

/*
 * Grow the file to size bytes (the generic layer checked size against the
 * node).  A block device cannot be resized here: only its current size,
 * read again, is accepted (to pick up a device grown outside).  A regular
 * file grows with ftruncate (sparse: reads of the new part give zeroes,
 * with or without O_DIRECT); it is never cut: if it is already larger
 * (grown outside), the caller must ask for at least that.
 */
static bool file_truncate(BlockNode *bs, int64_t size, Error **errp)
{
    FilePosixState *s = bs->opaque;
    struct stat st;
    bool ok = false;

    if (s->is_blkdev) {
        int64_t dev_size = file_blkdev_size(s);

        if (dev_size < 0) {
            error_setg_errno(errp, (int)-dev_size, "Cannot get the size of "
                             "'%s'", s->filename);
            return false;
        }
        if (dev_size != size) {
            error_setg(errp, "'%s' is a block device of %" PRId64 " bytes: "
                       "Spindle cannot resize it to %" PRId64 " bytes (grow "
                       "the device, then resize the node to its new size)",
                       s->filename, dev_size, size);
            return false;
        }
        return true;
    }

    g_mutex_lock(&s->size_lock);
    if (fstat(s->fd, &st) < 0) {
        error_setg_errno(errp, errno, "Could not stat '%s'", s->filename);
    } else if (st.st_size > size) {
        error_setg(errp, "'%s' is already %" PRId64 " bytes (grown outside "
                   "Spindle?): resize the node to at least that",
                   s->filename, (int64_t)st.st_size);
    } else if (st.st_size < size && ftruncate(s->fd, size) < 0) {
        error_setg_errno(errp, errno, "Could not resize '%s' to %" PRId64
                         " bytes", s->filename, size);
    } else {
        ok = true;
    }
    g_mutex_unlock(&s->size_lock);
    return ok;
}

/* ------------------------------------------------------------------------ */
/* Discard and write-zeroes (pool workers)                                   */

static int file_fallocate(int fd, int mode, int64_t offset, int64_t bytes)
{
    while (fallocate(fd, mode, offset, bytes) < 0) {
        if (errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

static int file_blkdev_ioctl_range(int fd, unsigned long cmd, int64_t offset,
                                   int64_t bytes)
{
    uint64_t range[2] = { offset, bytes };

    while (ioctl(fd, cmd, range) < 0) {
        if (errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

static bool file_errno_is_unsupported(int ret)
{
    return ret == -EOPNOTSUPP || ret == -ENOTSUP || ret == -ENOTTY ||
           ret == -ENOSYS;
}

static void *file_zero_buffer(void)
{
    static gsize once;
    static void *zeroes;

    if (g_once_init_enter(&once)) {
        /* Never freed: shared by every node for the life of the process. */
        if (posix_memalign(&zeroes, FILE_ZERO_BUF_ALIGN, FILE_ZERO_BUF_SIZE)) {
            g_error("cannot allocate the zero buffer");
        }
        memset(zeroes, 0, FILE_ZERO_BUF_SIZE);
        g_once_init_leave(&once, 1);
    }
    return zeroes;
}

static int file_pwrite_all(int fd, const void *buf, size_t len, int64_t offset)
{
    while (len > 0) {
        ssize_t n = pwrite(fd, buf, len, offset);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        if (n == 0) {
            return -EIO;
        }
        buf = (const char *)buf + n;
        len -= n;
        offset += n;
    }
    return 0;
}

/* The last resort: write zeroes.  Aligned for O_DIRECT if the request is. */
static int file_pwrite_zeroes(int fd, int64_t offset, int64_t bytes)
{
    const void *zeroes = file_zero_buffer();
    int ret = 0;

    while (bytes > 0 && ret == 0) {
        size_t chunk = MIN(bytes, FILE_ZERO_BUF_SIZE);

        ret = file_pwrite_all(fd, zeroes, chunk, offset);
        offset += chunk;
        bytes -= chunk;
    }
    return ret;
}

/* Remember a method that turned out unsupported; returns ret. */
static int file_try_method(_Atomic bool *unsupported, int ret)
{
    if (file_errno_is_unsupported(ret)) {
        atomic_store_explicit(unsupported, true, memory_order_relaxed);
    }
    return ret;
}

static bool file_method_known_unsupported(_Atomic bool *unsupported)
{
    return atomic_load_explicit(unsupported, memory_order_relaxed);
}

static int file_discard_work(void *opaque)
{
    FileWork *w = opaque;
    FilePosixState *s = w->s;
    int64_t offset = w->req->offset;
    int64_t end = offset + w->req->bytes;
    int ret;

    if (s->is_blkdev) {
        /* BLKDISCARD wants whole logical blocks: discard the ones inside
         * the range (it is a hint, the edges can stay). */
        int64_t mask = (int64_t)s->block_size - 1;

        offset = (offset + mask) & ~mask;
        end &= ~mask;
        if (end <= offset) {
            return 0;
        }
        ret = file_blkdev_ioctl_range(s->fd, BLKDISCARD, offset, end - offset);
    } else {
        ret = file_fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                             offset, end - offset);
    }
    /* Discard is a hint: "cannot deallocate here" is not an error. */
    return file_errno_is_unsupported(ret) ? 0 : ret;
}

static bool file_blkdev_aligned(FilePosixState *s, int64_t offset,
                                int64_t bytes)
{
    return ((offset | bytes) & (s->block_size - 1)) == 0;
}


/*
 * Zero by deallocating (punch hole), when the request allows it
 * (BLOCK_REQ_MAY_UNMAP) and the node does (discard=unmap).  On a block
 * device this zeroes by deallocating, or fails.  -EOPNOTSUPP when not
 * allowed or known not to work, so the caller tries the next method.
 */
static int file_write_zeroes_by_unmap(FileWork *w)
{
    FilePosixState *s = w->s;
    BlockRequest *req = w->req;

    if (!(req->flags & BLOCK_REQ_MAY_UNMAP) || !w->discard_unmap ||
        file_method_known_unsupported(&s->no_punch_hole)) {
        return -EOPNOTSUPP;
    }
    return file_try_method(&s->no_punch_hole,
                           file_fallocate(s->fd, FALLOC_FL_PUNCH_HOLE |
                                          FALLOC_FL_KEEP_SIZE,
                                          req->offset, req->bytes));
}

/*
 * Zero in place, the kernel's way for this kind of node: BLKZEROOUT on a
 * block device, FALLOC_FL_ZERO_RANGE on a file.  -EOPNOTSUPP when known
 * not to work, so the caller tries the next method.
 */
static int file_write_zeroes_in_place(FileWork *w)
{
    FilePosixState *s = w->s;
    BlockRequest *req = w->req;
    _Atomic bool *no = s->is_blkdev ? &s->no_blkzeroout : &s->no_zero_range;

    if (file_method_known_unsupported(no)) {
        return -EOPNOTSUPP;
    }
    return file_try_method(no, s->is_blkdev ?
                           file_blkdev_ioctl_range(s->fd, BLKZEROOUT,
                                                   req->offset, req->bytes) :
                           file_fallocate(s->fd, FALLOC_FL_ZERO_RANGE,
                                          req->offset, req->bytes));
}

/* Deallocate (if allowed), else zero in place, else write zeroes. */
static int file_write_zeroes(FileWork *w)
{
    FilePosixState *s = w->s;
    BlockRequest *req = w->req;
    int ret;

    /* The kernel's zeroing of a block device works on whole logical
     * blocks only; buffered nodes may ask for less, so they get written
     * zeroes. */
    if (s->is_blkdev && !file_blkdev_aligned(s, req->offset, req->bytes)) {
        return file_pwrite_zeroes(s->fd, req->offset, req->bytes);
    }
    ret = file_write_zeroes_by_unmap(w);
    if (file_errno_is_unsupported(ret)) {
        ret = file_write_zeroes_in_place(w);
    }
    if (file_errno_is_unsupported(ret)) {
        ret = file_pwrite_zeroes(s->fd, req->offset, req->bytes);
    }
    return ret;
}

/* After a successful write-like request: FUA means "on stable storage". */
static int file_work_fua(FileWork *w, int ret)
{
    if (ret < 0 || !(w->req->flags & BLOCK_REQ_FUA) || w->no_flush) {
        return ret;
    }
    while (fdatasync(w->s->fd) < 0) {
        if (errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

static int file_write_zeroes_work(void *opaque)
{
    FileWork *w = opaque;

    return file_work_fua(w, file_write_zeroes(w));
}

/*
 * A WRITE that ends past the node's length: with O_DIRECT, the generic
 * layer's read-modify-write of the last, partial block of a file whose
 * size is not a multiple of the alignment writes the whole block.  Write
 * it, then cut the file back so that it does not grow.  The generic layer
 * runs no other write meanwhile (it serialises read-modify-writes).
 */
static int file_write_past_eof_work(void *opaque)
{
    FileWork *w = opaque;
    BlockRequest *req = w->req;
    int64_t offset = req->offset;
    struct stat st;
    int ret = 0;

    /* The size read here is the one to restore: no resize meanwhile. */
    g_mutex_lock(&w->s->size_lock);
    if (fstat(w->s->fd, &st) < 0) {
        g_mutex_unlock(&w->s->size_lock);
        return -errno;
    }
    for (int i = 0; i < req->niov && ret == 0; i++) {
        ret = file_pwrite_all(w->s->fd, req->iov[i].iov_base,
                              req->iov[i].iov_len, offset);
        offset += req->iov[i].iov_len;
    }
    if (ret == 0 && offset > MAX(st.st_size, w->length) &&
        ftruncate(w->s->fd, MAX(st.st_size, w->length)) < 0) {
        ret = -errno;
    }
    g_mutex_unlock(&w->s->size_lock);
    return file_work_fua(w, ret);
}

static void file_work_done(void *opaque, int ret)
{
    FileWork *w = opaque;
    BlockRequest *req = w->req;

    g_free(w);
    block_acct_batch_begin();          /* a batch of one: see block-int.h */
    block_request_complete(req, ret);
    block_acct_batch_end();
}

static void file_submit_work(BlockNode *bs, BlockRequest *req,
                             ThreadPoolFunc *func)
{
    AioContext *ctx = block_req_queue(bs, req)->ctx;
    FileWork *w = g_new(FileWork, 1);

    *w = (FileWork) {
        .s = bs->opaque,
        .req = req,
        .length = block_node_length(bs),
        .discard_unmap = bs->discard_unmap,
        .no_flush = bs->no_flush,
    };
    thread_pool_submit(ctx, func, w, file_work_done, w);
}

/* ------------------------------------------------------------------------ */
/* BlockDriver: requests and contexts (home thread)                          */

static void file_submit(BlockNode *bs, BlockRequest *req)
{
    FilePosixState *s = bs->opaque;
    BlockQueue *q = block_req_queue(bs, req);
    FileQueue *fq = q->opaque;

    g_assert(aio_context_in_home_thread(q->ctx));
    switch (req->op) {
    case BLOCK_OP_READ:
        fq->ops->submit(fq->engine, s->fd, req);
        return;
    case BLOCK_OP_WRITE:
        if (!s->is_blkdev &&
            req->offset + req->bytes > block_node_length(bs)) {
            file_submit_work(bs, req, file_write_past_eof_work);
        } else {
            fq->ops->submit(fq->engine, s->fd, req);
        }
        return;
    case BLOCK_OP_FLUSH:
        if (bs->no_flush) {
            block_request_complete_later(req, 0);
        } else {
            fq->ops->submit(fq->engine, s->fd, req);
        }
        return;
    case BLOCK_OP_DISCARD:
        SPINDLE_TRACE3(file_discard, s->fd, req->offset, req->bytes);
        if (!bs->discard_unmap) {
            block_request_complete_later(req, 0);
        } else {
            file_submit_work(bs, req, file_discard_work);
        }
        return;
    case BLOCK_OP_WRITE_ZEROES:
        SPINDLE_TRACE3(file_write_zeroes, s->fd, req->offset, req->bytes);
        file_submit_work(bs, req, file_write_zeroes_work);
        return;
    }
    block_request_complete_later(req, -EINVAL);
}

static void file_io_plug(BlockQueue *q)
{
    FileQueue *fq = q->opaque;

    g_assert(aio_context_in_home_thread(q->ctx));
    if (fq->ops->plug) {
        fq->ops->plug(fq->engine);
    }
}

static void file_io_unplug(BlockQueue *q)
{
    FileQueue *fq = q->opaque;

    g_assert(aio_context_in_home_thread(q->ctx));
    if (fq->ops->unplug) {
        fq->ops->unplug(fq->engine);
    }
}

static void file_detach_queue(BlockQueue *q)
{
    g_assert(aio_context_in_home_thread(q->ctx));
    /* The instance belongs to the context and stays there. */
    g_free(q->opaque);
    q->opaque = NULL;
}

static void file_attach_queue(BlockQueue *q)
{
    FilePosixState *s = q->bs->opaque;
    FileQueue *fq = g_new0(FileQueue, 1);
    Error *err = NULL;

    g_assert(aio_context_in_home_thread(q->ctx));
    fq->ops = s->chosen_ops;
    fq->engine = block_engine_get(fq->ops, q->ctx, &err);
    if (!fq->engine) {
        /* Attaching cannot fail here: serve the queue with threads. */
        error_report("node '%s': aio=%s unavailable in a new context (%s);"
                     " using aio=threads there", q->bs->node_name,
                     fq->ops->name, error_get_pretty(err));
        error_free(err);
        fq->ops = &block_engine_threads;
        fq->engine = block_engine_get(fq->ops, q->ctx, NULL);
        /* Our invariant: the thread pool engine always exists. */
        g_assert(fq->engine);
    }
    q->opaque = fq;
}

const BlockDriver block_driver_file = {
    .instance_size = sizeof(FilePosixState),
    .open = file_open,
    .close = file_close,
    .getlength = file_getlength,
    .truncate = file_truncate,
    .submit = file_submit,
    .attach_queue = file_attach_queue,
    .detach_queue = file_detach_queue,
    .io_plug = file_io_plug,
    .io_unplug = file_io_unplug,
    .set_active = file_set_active,
};

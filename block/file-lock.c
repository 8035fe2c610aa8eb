/*
 * Image locks of the `file` driver (file-posix.c).
 *
 * Theory of operation.
 *
 * So that two daemons cannot write one image, and so that QEMU and its
 * tools (which lock the same way) see Spindle's use of an image and
 * Spindle theirs, each active node holds open file description locks
 * (fcntl F_OFD_SETLK; they may lie beyond the end of the file and never
 * touch its data) on two kinds of bytes:
 *
 * - Spindle's own, FILE_LOCK_WRITER_BYTE (0x5350494e, "SPIN"): a
 *   writable node a write (exclusive) lock, a read-only node a read
 *   (shared) lock.  One writer excludes everyone else, any number of
 *   read-only nodes coexist; Spindles before QEMU's bytes below know only
 *   this one.
 * - QEMU's, as its file driver takes them for its permissions (consistent
 *   read, write, write unchanged, resize: bits 0..3): a read lock on byte
 *   100 + n while it holds permission n, and on byte 200 + n while it does
 *   not let others hold it.  After taking its own it tests, with
 *   F_OFD_GETLK, the bytes that conflict with them (200 + n for a
 *   permission it holds, 100 + n for one it does not share), so of two
 *   processes racing at least one sees the other.  A writable node holds
 *   consistent read, write and resize, a read-only one consistent read;
 *   both share only consistent read and write unchanged, like a QEMU
 *   guest's disk: a QEMU, qemu-img or qemu-storage-daemon that opens the
 *   image for writing refuses ("Failed to get \"write\" lock"), and a
 *   node refuses an image that one of them writes, while readers that
 *   share writing (qemu-img -U, a read-only qemu-storage-daemon export)
 *   coexist with a read-only node.
 *
 * A try takes the whole set or, on any conflict, drops what it took, and
 * a busy image is tried again for a while (FILE_LOCK_GRACE_MS).  OFD
 * locks belong to the open file description, so two nodes on one image
 * in the same process conflict just like two processes.  locking=off
 * takes no lock; locking=auto (the default) behaves like on, except that
 * a file system without OFD locks (EINVAL, ENOTSUP, ENOLCK) is used
 * unlocked, silently.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>

#include "file-lock.h"

const char *const file_locking_names[] = { "auto", "on", "off", NULL };

/* The byte whose OFD lock says "a writer (write lock) / reader (read lock)
 * has this image open".  ASCII "SPIN". */
#define FILE_LOCK_WRITER_BYTE   0x5350494eLL

/*
 * QEMU's lock bytes: 100 + n is "I hold permission n", 200 + n "I do not
 * share permission n", n being the bit number of QEMU's permission.
 */
#define FILE_LOCK_PERM_BASE     100
#define FILE_LOCK_SHARED_BASE   200

#define FILE_PERM_CONSISTENT_READ   (1u << 0)
#define FILE_PERM_WRITE             (1u << 1)
#define FILE_PERM_WRITE_UNCHANGED   (1u << 2)
#define FILE_PERM_RESIZE            (1u << 3)
#define FILE_PERM_COUNT             4

/* As QEMU's messages name them. */
static const char *const file_perm_names[FILE_PERM_COUNT] = {
    "consistent read", "write", "write unchanged", "resize",
};

/* What a node holds (resize: QMP may grow the image) and lets others
 * hold: readers, and writers that do not change the data. */
#define FILE_PERMS_WRITER   (FILE_PERM_CONSISTENT_READ | FILE_PERM_WRITE | \
                             FILE_PERM_RESIZE)
#define FILE_PERMS_READER   FILE_PERM_CONSISTENT_READ
#define FILE_PERMS_SHARED   (FILE_PERM_CONSISTENT_READ | \
                             FILE_PERM_WRITE_UNCHANGED)

/* One OFD lock of type (F_RDLCK, F_WRLCK, F_UNLCK) on one byte: 0 or
 * -errno. */
static int file_lock_set(int fd, short type, off_t byte)
{
    struct flock fl = {
        .l_type = type,
        .l_whence = SEEK_SET,
        .l_start = byte,
        .l_len = 1,
        .l_pid = 0,              /* required for OFD locks */
    };

    while (fcntl(fd, F_OFD_SETLK, &fl) < 0) {
        if (errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

/* Does another open file description hold a lock on byte?  0 if not,
 * -EAGAIN if it does, another -errno if we cannot tell.  Locks of fd's
 * own never conflict with it, so a byte we hold ourselves tests fine. */
static int file_lock_test(int fd, off_t byte)
{
    struct flock fl = {
        .l_type = F_WRLCK,       /* conflicts with a lock of either type */
        .l_whence = SEEK_SET,
        .l_start = byte,
        .l_len = 1,
        .l_pid = 0,
    };

    while (fcntl(fd, F_OFD_GETLK, &fl) < 0) {
        if (errno != EINTR) {
            return -errno;
        }
    }
    return fl.l_type == F_UNLCK ? 0 : -EAGAIN;
}

/* Every byte fd has locked goes, whichever (one fcntl over the whole
 * range).  Closing the descriptor drops them anyway, so an error here
 * changes nothing. */
void file_unlock_image(int fd)
{
    struct flock fl = {
        .l_type = F_UNLCK,
        .l_whence = SEEK_SET,
        .l_start = 0,
        .l_len = 0,              /* to the end, however far */
        .l_pid = 0,
    };

    while (fcntl(fd, F_OFD_SETLK, &fl) < 0 && errno == EINTR) {
    }
}

/* QEMU's bytes a node holds (for each permission: "I hold it", "I do
 * not share it"): their count, the bytes in bytes[]. */
static int file_lock_qemu_bytes(bool read_only,
                                int bytes[2 * FILE_PERM_COUNT])
{
    unsigned held = read_only ? FILE_PERMS_READER : FILE_PERMS_WRITER;
    int n = 0;

    for (int i = 0; i < FILE_PERM_COUNT; i++) {
        if (held & (1u << i)) {
            bytes[n++] = FILE_LOCK_PERM_BASE + i;
        }
        if (!(FILE_PERMS_SHARED & (1u << i))) {
            bytes[n++] = FILE_LOCK_SHARED_BASE + i;
        }
    }
    return n;
}

/* The permission (bit number) one of QEMU's bytes is about. */
static int file_lock_qemu_perm(int byte)
{
    return byte - (byte < FILE_LOCK_SHARED_BASE ? FILE_LOCK_PERM_BASE
                                                : FILE_LOCK_SHARED_BASE);
}

/* The byte that conflicts with one of ours: "I hold permission n" with
 * "I do not share permission n", both ways. */
static int file_lock_qemu_conflict(int byte)
{
    return (byte < FILE_LOCK_SHARED_BASE ? FILE_LOCK_SHARED_BASE
                                         : FILE_LOCK_PERM_BASE) +
           file_lock_qemu_perm(byte);
}

/* One try's outcome: 0 or -errno, and for a conflict found on QEMU's
 * bytes the byte another process holds (else -1: Spindle's own byte). */
typedef struct FileLockTry {
    int ret;
    int held_byte;
} FileLockTry;

/*
 * One try at the whole set: Spindle's byte, then QEMU's bytes the way
 * QEMU's file driver takes them: ours first, then a test of the bytes
 * that conflict with them, so that of two processes racing at least one
 * sees the other.  A failed try drops whatever it took.
 */
static FileLockTry file_lock_try(int fd, bool read_only)
{
    int bytes[2 * FILE_PERM_COUNT];
    int n = file_lock_qemu_bytes(read_only, bytes);
    FileLockTry t = { .held_byte = -1 };

    t.ret = file_lock_set(fd, read_only ? F_RDLCK : F_WRLCK,
                          FILE_LOCK_WRITER_BYTE);
    for (int i = 0; t.ret == 0 && i < n; i++) {
        t.ret = file_lock_set(fd, F_RDLCK, bytes[i]);
    }
    for (int i = 0; t.ret == 0 && i < n; i++) {
        t.ret = file_lock_test(fd, file_lock_qemu_conflict(bytes[i]));
        if (t.ret < 0) {
            t.held_byte = file_lock_qemu_conflict(bytes[i]);
        }
    }
    if (t.ret < 0) {
        file_unlock_image(fd);
    }
    return t;
}

/*
 * A process killed with io_uring requests in flight keeps its open file
 * description, and so its lock, for a moment after it has been reaped:
 * the kernel tears its rings down in a worker once those requests end
 * (measured here: up to 17 ms, in 7 of 20 kills).  A daemon restarted at
 * once on the same image (crash recovery, an upgrade) waits that long
 * before it calls the image busy; a real second owner costs the caller
 * this wait before the error.
 */
#define FILE_LOCK_GRACE_MS 1000
#define FILE_LOCK_RETRY_MS 10

static bool file_lock_errno_is_busy(int err)
{
    return err == EAGAIN || err == EACCES;
}

static FileLockTry file_lock_try_patiently(int fd, bool read_only)
{
    FileLockTry t = file_lock_try(fd, read_only);

    for (int waited = 0; file_lock_errno_is_busy(-t.ret) &&
         waited < FILE_LOCK_GRACE_MS; waited += FILE_LOCK_RETRY_MS) {
        g_usleep(FILE_LOCK_RETRY_MS * 1000);
        t = file_lock_try(fd, read_only);
    }
    return t;
}

static bool file_lock_errno_is_unsupported(int err)
{
    return err == EINVAL || err == ENOTSUP || err == EOPNOTSUPP ||
           err == ENOLCK;
}

/* A busy image: the message Spindle always gave, and when it was a QEMU
 * byte that conflicted, which one and what it means in QEMU's words. */
static void file_lock_busy_error(const char *filename, bool read_only,
                                 int held_byte, Error **errp)
{
    g_autofree char *qemu = NULL;

    if (held_byte >= 0) {
        qemu = g_strdup_printf(" (another process %s QEMU's \"%s\" "
                               "permission: lock byte %d)",
                               held_byte < FILE_LOCK_SHARED_BASE ?
                               "holds" : "does not share",
                               file_perm_names[file_lock_qemu_perm(held_byte)],
                               held_byte);
    }
    if (read_only) {
        error_setg(errp, "Failed to get shared lock on '%s': is another "
                   "process writing to the image?%s", filename,
                   qemu ? qemu : "");
    } else {
        error_setg(errp, "Failed to get write lock on '%s': is another "
                   "process using the image?%s", filename,
                   qemu ? qemu : "");
    }
}

bool file_lock_image(int fd, const char *filename, bool read_only,
                     FileLocking locking, bool *locked, Error **errp)
{
    FileLockTry t;

    *locked = false;
    if (locking == FILE_LOCKING_OFF) {
        return true;
    }
    t = file_lock_try_patiently(fd, read_only);
    if (t.ret == 0) {
        *locked = true;
        return true;
    }
    if (file_lock_errno_is_busy(-t.ret)) {
        file_lock_busy_error(filename, read_only, t.held_byte, errp);
        return false;
    }
    if (file_lock_errno_is_unsupported(-t.ret)) {
        if (locking == FILE_LOCKING_AUTO) {
            return true;
        }
        error_setg_errno(errp, -t.ret, "locking=on: the file system of '%s' "
                         "does not support OFD locks (use locking=off or "
                         "locking=auto)", filename);
        return false;
    }
    error_setg_errno(errp, -t.ret, "Failed to lock '%s'", filename);
    return false;
}

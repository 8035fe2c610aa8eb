/*
 * A temporary test file for the block benchmarks.
 *
 * Theory of operation: O_DIRECT support is a property of the file system
 * (tmpfs refuses it at open, some FUSE file systems at the first read), so
 * each candidate directory gets a small probe file: one block written, then
 * opened with O_DIRECT and read back into an aligned buffer.  The first
 * directory where that works holds the test file; otherwise the first
 * writable one does, and the note says why O_DIRECT is off.  The chosen
 * probe file then grows to the requested size with pseudo-random data
 * (never zero, never a hole) and is synced, so O_DIRECT reads go to the
 * device and find real blocks.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <glib.h>

#include "bench-file.h"

#define PROBE_SIZE 4096          /* also the O_DIRECT buffer alignment */
#define FILL_CHUNK (1 << 20)

const char *const bench_direct_mode_names[BENCH_DIRECT_COUNT] = {
    [BENCH_DIRECT_AUTO] = "auto",
    [BENCH_DIRECT_ON] = "on",
    [BENCH_DIRECT_OFF] = "off",
};

static const char *fs_type_name(unsigned long type)
{
    switch (type) {
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794C7630: return "overlayfs";
    case 0x6969: return "nfs";
    case 0x2FC12FC1: return "zfs";
    case 0x65735546: return "fuse";
    case 0xF2F52010: return "f2fs";
    default: return NULL;
    }
}

static char *fs_type_of(const char *path)
{
    struct statfs st;
    const char *name;

    if (statfs(path, &st) != 0) {
        return g_strdup("unknown");
    }
    name = fs_type_name((unsigned long)st.f_type);
    return name ? g_strdup(name) :
                  g_strdup_printf("0x%lx", (unsigned long)st.f_type);
}

/* Fill buf (a multiple of 8 bytes) with xorshift64* output. */
static void fill_random(void *buf, size_t len, uint64_t *state)
{
    uint64_t *w = buf;
    size_t i;

    for (i = 0; i < len / sizeof(*w); i++) {
        uint64_t x = *state;

        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        *state = x;
        w[i] = x * 0x2545F4914F6CDD1DULL;
    }
}

/* Write len bytes of data at the start of fd and sync them.  0 or -errno. */
static int write_file(int fd, int64_t len)
{
    g_autofree void *buf = g_malloc(FILL_CHUNK);
    uint64_t rng = 0x853C49E6748FEA9BULL;
    int64_t done = 0;

    while (done < len) {
        size_t chunk = MIN((int64_t)FILL_CHUNK, len - done);
        ssize_t n;

        fill_random(buf, chunk, &rng);
        n = pwrite(fd, buf, chunk, done);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        done += n;
    }
    return fdatasync(fd) == 0 ? 0 : -errno;
}

/*
 * Create a file in dir with one block written.  Returns its path, or NULL
 * with *why set (caller frees).
 */
static char *create_probe_file(const char *dir, char **why)
{
    g_autofree char *tmpl =
        g_build_filename(dir, "spindle-bench-XXXXXX", NULL);
    int fd, ret;

    fd = g_mkstemp(tmpl);
    if (fd < 0) {
        *why = g_strdup_printf("%s: cannot create a file: %s", dir,
                               g_strerror(errno));
        return NULL;
    }
    ret = write_file(fd, PROBE_SIZE);
    close(fd);
    if (ret < 0) {
        *why = g_strdup_printf("%s: cannot write a file: %s", dir,
                               g_strerror(-ret));
        unlink(tmpl);
        return NULL;
    }
    return g_steal_pointer(&tmpl);
}

/* Whether path can be opened and read with O_DIRECT; else *why says why. */
static bool direct_io_works(const char *path, char **why)
{
    void *buf;
    ssize_t n;
    int fd, err = 0;

    fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0) {
        *why = g_strdup_printf("O_DIRECT open: %s", g_strerror(errno));
        return false;
    }
    if (posix_memalign(&buf, PROBE_SIZE, PROBE_SIZE) != 0) {
        g_error("out of memory");
    }
    n = pread(fd, buf, PROBE_SIZE, 0);
    if (n != PROBE_SIZE) {
        err = n < 0 ? errno : EIO;
    }
    free(buf);
    close(fd);
    if (err) {
        *why = g_strdup_printf("O_DIRECT read: %s", g_strerror(err));
        return false;
    }
    return true;
}

static void append_reason(GString *reasons, const char *dir, const char *why)
{
    if (reasons->len) {
        g_string_append(reasons, "; ");
    }
    if (dir) {
        g_string_append_printf(reasons, "%s: ", dir);
    }
    g_string_append(reasons, why);
}

/*
 * Probe the candidates.  On return tf->path and tf->dir are set if one
 * allows O_DIRECT (and mode wants it); otherwise *fallback and
 * *fallback_dir name the first writable one (or are NULL).  reasons
 * collects what failed where.
 */
static void probe_dirs(BenchTestFile *tf, const char *const *dirs,
                       BenchDirectMode mode, char **fallback,
                       char **fallback_dir, GString *reasons)
{
    for (; *dirs && !tf->path; dirs++) {
        g_autofree char *why = NULL;
        char *path = create_probe_file(*dirs, &why);

        if (!path) {
            append_reason(reasons, NULL, why);
            continue;
        }
        if (mode != BENCH_DIRECT_OFF && direct_io_works(path, &why)) {
            tf->path = path;
            tf->dir = g_strdup(*dirs);
            tf->direct = true;
            return;
        }
        if (why) {
            append_reason(reasons, *dirs, why);
        }
        if (*fallback) {
            unlink(path);
            g_free(path);
            continue;
        }
        *fallback = path;
        *fallback_dir = g_strdup(*dirs);
        if (mode == BENCH_DIRECT_OFF) {
            return;
        }
    }
}

bool bench_test_file_create(BenchTestFile *tf, const char *const *dirs,
                            int64_t size, BenchDirectMode mode, Error **errp)
{
    g_autoptr(GString) reasons = g_string_new(NULL);
    g_autofree char *fallback = NULL;
    g_autofree char *fallback_dir = NULL;
    int fd, ret;

    probe_dirs(tf, dirs, mode, &fallback, &fallback_dir, reasons);
    if (tf->path && fallback) {
        unlink(fallback);
    } else if (!tf->path) {
        if (mode == BENCH_DIRECT_ON || !fallback) {
            error_setg(errp, "%s: %s", mode == BENCH_DIRECT_ON ?
                       "no candidate directory allows O_DIRECT" :
                       "cannot create the test file", reasons->str);
            if (fallback) {
                unlink(fallback);
            }
            return false;
        }
        tf->path = g_steal_pointer(&fallback);
        tf->dir = g_steal_pointer(&fallback_dir);
        tf->direct = false;
        tf->note = mode == BENCH_DIRECT_OFF ?
            g_strdup("O_DIRECT not requested: reads hit the page cache") :
            g_strdup_printf("no candidate directory allows O_DIRECT (%s): "
                            "reads hit the page cache", reasons->str);
    }
    tf->fs = fs_type_of(tf->path);

    fd = open(tf->path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        error_setg_errno(errp, errno, "cannot open the test file %s",
                         tf->path);
        return false;
    }
    ret = write_file(fd, size);
    close(fd);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "cannot fill the test file %s",
                         tf->path);
        return false;
    }
    return true;
}

void bench_test_file_destroy(BenchTestFile *tf)
{
    if (tf->path) {
        unlink(tf->path);
    }
    g_free(tf->path);
    g_free(tf->dir);
    g_free(tf->fs);
    g_free(tf->note);
    memset(tf, 0, sizeof(*tf));
}

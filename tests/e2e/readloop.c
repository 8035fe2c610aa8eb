/*
 * readloop: the guest's reader in the migration test (tests/e2e/migrate.py).
 *
 * Runs in the end-to-end guest, built by the host with `cc -static`, as
 *
 *     readloop DEVICES SEEDS OFFSET SIZE BLOCK MAX_SECONDS
 *
 * DEVICES and SEEDS are comma-separated lists of the same length: the host
 * filled SIZE bytes of device d from OFFSET on with readloop_fill()'s
 * pattern of seed d (migrate.py's region_pattern() is the same function),
 * in which every 8-byte word depends on the seed, the block and its place
 * in the block, so any two blocks of BLOCK bytes differ everywhere.
 *
 * Why it exists: a migration copies the guest's RAM while the guest runs,
 * and pages written after they were copied must be copied again.  QEMU
 * knows the pages the guest's CPUs write; the pages a vhost-user back-end
 * writes (the data of reads) it learns only from the back-end's dirty log.
 * So readloop keeps a set of buffers, one per block of the region, that
 * only the device writes: pass p reads block (i + p) mod n of the region
 * into buffer i with O_DIRECT, one read after another, then compares every
 * buffer with the block it must hold now.  A page of a buffer that the
 * back-end wrote after the migration had copied it and did not log arrives
 * on the destination with what an earlier pass read there, another block's
 * data, and the comparison after the migration tells.  The CPU never
 * writes the buffers, so nothing but the log can save them.
 *
 * It prints "SPINDLE-READS ok=N bad=M" (reads whose buffer held the right
 * block when checked, and those that did not) at most every 100 ms, a
 * warning for the first bad ones (the device, the block, the pass, and
 * which block the buffer held instead), stops when /tmp/stop exists or
 * after MAX_SECONDS, and reports "SPINDLE-RESULT reader.KEY=VALUE" lines:
 * ok, bad, io_errors, passes.  Exit status 0 when every read was good.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEVICES     8
#define MAX_WARNINGS    20
#define PRINT_EVERY_NS  100000000LL
#define STOP_FILE       "/tmp/stop"

typedef struct Device {
    const char *path;
    uint64_t seed;
    int fd;
    uint8_t *expected;           /* the region as the host wrote it */
    uint8_t *buffers;            /* buffer i: block i + pass, mod n */
    bool *failed;                /* buffer i's read of this pass failed */
} Device;

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Word k of the region (little endian): the same function as the host's. */
static void readloop_fill(uint8_t *region, size_t size, uint64_t seed)
{
    for (size_t k = 0; k < size / 8; k++) {
        uint64_t v = splitmix64(seed * 0x100000000ULL + k);

        for (int j = 0; j < 8; j++) {
            region[k * 8 + j] = (uint8_t)(v >> (8 * j));
        }
    }
}

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Which block of the region buf holds (compared whole), or -1. */
static long which_block(const Device *dev, const uint8_t *buf, size_t n,
                        size_t block)
{
    for (size_t b = 0; b < n; b++) {
        if (!memcmp(buf, dev->expected + b * block, block)) {
            return (long)b;
        }
    }
    return -1;
}

static size_t split(char *list, char **out, size_t max)
{
    size_t n = 0;

    for (char *tok = strtok(list, ","); tok && n < max;
         tok = strtok(NULL, ",")) {
        out[n++] = tok;
    }
    return n;
}

int main(int argc, char **argv)
{
    Device devs[MAX_DEVICES];
    char *paths[MAX_DEVICES], *seeds[MAX_DEVICES];
    uint64_t ok = 0, bad = 0, io_errors = 0, passes = 0, warnings = 0;
    size_t ndev, n, block, size;
    off_t offset;
    int64_t start, deadline, printed = 0;

    if (argc != 7) {
        fprintf(stderr, "usage: readloop DEVICES SEEDS OFFSET SIZE BLOCK "
                "MAX_SECONDS\n");
        return 2;
    }
    ndev = split(argv[1], paths, MAX_DEVICES);
    if (split(argv[2], seeds, MAX_DEVICES) != ndev || ndev == 0) {
        fprintf(stderr, "readloop: one seed per device\n");
        return 2;
    }
    offset = (off_t)strtoull(argv[3], NULL, 0);
    size = strtoull(argv[4], NULL, 0);
    block = strtoull(argv[5], NULL, 0);
    if (!block || block % 4096 || size % block || size / block < 2) {
        fprintf(stderr, "readloop: SIZE must be 2 or more BLOCKs of a "
                "multiple of 4096 bytes\n");
        return 2;
    }
    n = size / block;
    start = now_ns();
    deadline = start + (int64_t)(atof(argv[6]) * 1e9);
    for (size_t d = 0; d < ndev; d++) {
        Device *dev = &devs[d];

        dev->path = paths[d];
        dev->seed = strtoull(seeds[d], NULL, 0);
        dev->fd = open(dev->path, O_RDONLY | O_DIRECT);
        dev->expected = malloc(size);
        dev->failed = calloc(n, sizeof(bool));
        if (dev->fd < 0 || !dev->expected || !dev->failed ||
            posix_memalign((void **)&dev->buffers, 4096, size)) {
            perror(dev->path);
            return 2;
        }
        readloop_fill(dev->expected, size, dev->seed);
    }
    printf("SPINDLE-STAGE reading\n");
    fflush(stdout);
    while (access(STOP_FILE, F_OK) != 0 && now_ns() < deadline) {
        for (size_t d = 0; d < ndev; d++) {
            Device *dev = &devs[d];

            for (size_t i = 0; i < n; i++) {
                size_t b = (i + passes) % n;

                dev->failed[i] = pread(dev->fd, dev->buffers + i * block,
                                       block, offset + (off_t)(b * block)) !=
                                 (ssize_t)block;
                io_errors += dev->failed[i];
            }
            for (size_t i = 0; i < n; i++) {
                size_t b = (i + passes) % n;
                const uint8_t *buf = dev->buffers + i * block;

                if (dev->failed[i]) {
                    continue;
                }
                if (!memcmp(buf, dev->expected + b * block, block)) {
                    ok++;
                    continue;
                }
                bad++;
                if (warnings++ < MAX_WARNINGS) {
                    printf("SPINDLE-WARN readloop %s block %zu pass %" PRIu64
                           ": the buffer holds block %ld\n", dev->path, b,
                           passes, which_block(dev, buf, n, block));
                }
            }
        }
        passes++;
        if (now_ns() - printed >= PRINT_EVERY_NS) {
            printed = now_ns();
            printf("SPINDLE-READS ok=%" PRIu64 " bad=%" PRIu64 "\n", ok, bad);
            fflush(stdout);
        }
    }
    printf("SPINDLE-READS ok=%" PRIu64 " bad=%" PRIu64 "\n", ok, bad);
    printf("SPINDLE-RESULT reader.ok=%" PRIu64 "\n", ok);
    printf("SPINDLE-RESULT reader.bad=%" PRIu64 "\n", bad);
    printf("SPINDLE-RESULT reader.io_errors=%" PRIu64 "\n", io_errors);
    printf("SPINDLE-RESULT reader.passes=%" PRIu64 "\n", passes);
    printf("SPINDLE-RESULT reader.seconds=%.1f\n",
           (double)(now_ns() - start) / 1e9);
    fflush(stdout);
    return bad || io_errors ? 1 : 0;
}

/*
 * crashio: the guest side of the crash test (tests/e2e/crash.py).
 *
 * Runs in the end-to-end guest, built by the host with `cc -static`, as
 *
 *     crashio DEVICES WRITERS BLOCKS MAX_SECONDS RUN_ID HUNG_SECONDS \
 *             [FIRST_BLOCK]
 *
 * DEVICES is a comma-separated list of n block devices.  WRITERS threads
 * each own BLOCKS 4 KiB blocks: writer w those of device w % n from block
 * FIRST_BLOCK + (w / n) * BLOCKS on (FIRST_BLOCK defaults to 256, 1 MiB
 * in).  Writer w is pinned to vCPU w % ncpus, so with one virtio queue per
 * vCPU several writers share each queue.  A writer loops: it picks a
 * block of its region (half the time the one it wrote last, so that a block
 * often has several acknowledged versions close together), writes it with
 * O_DIRECT (pwrite, one request) and, once the write is acknowledged, reads
 * its whole region back with one O_DIRECT read and checks every block.
 *
 * A block holds a 40-byte header (magic, writer, block, sequence number,
 * run id, checksum) and a payload derived from them, so a torn or
 * misdirected block fails its checksum and every version of a block is
 * told apart by its sequence number.  Per block the writer remembers the
 * last acknowledged sequence number and whether a read has seen it on the
 * disk since.  A region read then finds, per block:
 *
 *   the last acknowledged version      fine (it is now "seen");
 *   an older version (or nothing),     "replayed" if the newer one had been
 *     the newer one had been seen      seen: an old write landed over it;
 *   an older version (or nothing),     "lost": an acknowledged write never
 *     the newer one never seen         reached the disk (or was overwritten
 *                                      at once by a replayed older one);
 *   a newer version, another writer's  "corrupt" (writes are synchronous,
 *     block or a bad checksum          so nothing newer can be in flight).
 *
 * A warning names the block and the version found (-1: not a valid block).
 * A failed write or read counts as an I/O error; the block a failed write
 * was aimed at may then hold either version.  Each bad block is reported
 * once, until its writer writes it again.
 *
 * The main thread prints "SPINDLE-PROGRESS acked=N" at most every 100 ms
 * while writes are being acknowledged, which the host reads to see when the
 * guest writes again after a restart, and "SPINDLE-HUNG ..." once for a
 * writer whose write has waited HUNG_SECONDS: a request the back-end lost
 * (the other writers may well go on).  It stops the writers when a line
 * "stop" arrives on stdin (the host writes it to the serial console) or
 * after MAX_SECONDS, waits up to HUNG_SECONDS for them (one still waiting
 * then counts as "hung"), and prints the results as "SPINDLE-RESULT
 * crash.KEY=VALUE" lines, among them each writer's final version of each
 * block (crash.final.wN), which the host checks in the image file once QEMU
 * has exited.  Exit status 0 when nothing went wrong.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096
#define MAGIC UINT64_C(0x53504e444c435231)     /* "SPNDLCR1" */
#define PROGRESS_NS 100000000L
#define MAX_WARNINGS 50
/* After an I/O error a writer waits this long: not to flood the console. */
#define ERROR_PAUSE_MS 10
#define PRINTF_FORMAT(f, a) __attribute__((format(printf, f, a)))

typedef struct {
    uint64_t magic;
    uint32_t writer;
    uint32_t block;
    uint64_t seq;
    uint64_t run;
    uint64_t sum;
} BlockHeader;

enum { LOST, REPLAYED, CORRUPT, IO_ERRORS, NCOUNTERS };
static const char *const counter_names[NCOUNTERS] = {
    "lost", "replayed", "corrupt", "io_errors",
};

typedef struct {
    uint64_t last;          /* last acknowledged sequence number, 0: none */
    uint64_t maybe;         /* a failed write's number: may be there too */
    bool seen;              /* a read found `last` on the disk */
    bool reported;          /* reported bad since the last write */
} BlockState;

typedef struct {
    pthread_t thread;
    unsigned id;
    const char *device;
    int fd;
    uint64_t first;         /* first block of the region */
    BlockState *blocks;
    uint64_t seq;
    uint64_t rng;
    volatile uint64_t inflight_seq;    /* the write waiting now, 0: none */
    volatile uint32_t inflight_block;
    volatile double inflight_since;    /* when it was issued (now_s()) */
    uint64_t hung_seq;                 /* reported as hung (main thread) */
    volatile bool done;
} Writer;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static char **devices;
static unsigned ndevices;
static unsigned nblocks;
static uint64_t run_id;
static unsigned ncpus;
static volatile bool stopping;
static uint64_t acked;          /* acknowledged writes, all writers */
static uint64_t checked;        /* acknowledged writes a read found */
static uint64_t counters[NCOUNTERS];

static void count(int which)
{
    __atomic_fetch_add(&counters[which], 1, __ATOMIC_RELAXED);
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* FNV-1a over the block with the checksum field taken as zero. */
static uint64_t block_sum(const uint8_t *buf)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);

    for (size_t i = 0; i < BLOCK; i++) {
        uint8_t c = (i >= offsetof(BlockHeader, sum) &&
                     i < offsetof(BlockHeader, sum) + 8) ? 0 : buf[i];
        h = (h ^ c) * UINT64_C(0x100000001b3);
    }
    return h;
}

static void fill_block(uint8_t *buf, unsigned writer, uint32_t block,
                       uint64_t seq)
{
    BlockHeader h = {
        .magic = MAGIC, .writer = writer, .block = block, .seq = seq,
        .run = run_id,
    };
    uint64_t s = seq * UINT64_C(0x9e3779b97f4a7c15) ^ block ^
                 ((uint64_t)writer << 32) ^ run_id;

    s = s ? s : 1;
    for (size_t i = sizeof(h); i + 8 <= BLOCK; i += 8) {
        uint64_t v = xorshift(&s);
        memcpy(buf + i, &v, 8);
    }
    memcpy(buf, &h, sizeof(h));
    h.sum = block_sum(buf);
    memcpy(buf, &h, sizeof(h));
}

/* Count a failure of kind `which` and say what it was, as one of the first
 * MAX_WARNINGS warnings (a broken queue fails every request after it). */
static void PRINTF_FORMAT(2, 3) fail(int which, const char *fmt, ...)
{
    static unsigned warnings;
    unsigned n = __atomic_fetch_add(&warnings, 1, __ATOMIC_RELAXED);
    va_list ap;

    count(which);
    if (n > MAX_WARNINGS) {
        return;
    }
    flockfile(stdout);
    if (n == MAX_WARNINGS) {
        printf("SPINDLE-WARN crashio: more failures, not shown\n");
    } else {
        printf("SPINDLE-WARN crashio: %s: ", counter_names[which]);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
    }
    fflush(stdout);
    funlockfile(stdout);
}

static void report(Writer *w, uint32_t b, BlockState *st, int which,
                   const char *what, uint64_t found)
{
    if (st->reported) {
        return;
    }
    st->reported = true;
    fail(which, "writer %u block %u holds %" PRId64 ", its last acknowledged "
         "write is %" PRIu64 " (%s)", w->id, b,
         found == UINT64_MAX ? -1 : (int64_t)found, st->last, what);
}

/* The sequence number a block holds: 0 for a never-written (zero) block,
 * UINT64_MAX for one that is not a valid block of this writer. */
static uint64_t block_seq(Writer *w, uint32_t b, const uint8_t *buf)
{
    BlockHeader h;

    memcpy(&h, buf, sizeof(h));
    if (h.magic == 0) {
        for (size_t i = 0; i < BLOCK; i++) {
            if (buf[i]) {
                return UINT64_MAX;
            }
        }
        return 0;
    }
    if (h.magic != MAGIC || h.writer != w->id || h.block != b ||
        h.run != run_id || h.seq == 0 || h.seq == UINT64_MAX ||
        h.sum != block_sum(buf)) {
        return UINT64_MAX;
    }
    return h.seq;
}

static void check_block(Writer *w, uint32_t b, const uint8_t *buf)
{
    BlockState *st = &w->blocks[b];
    uint64_t seq = block_seq(w, b, buf);

    if (seq == st->last || (st->maybe && seq == st->maybe)) {
        if (seq != st->last) {          /* the failed write did land */
            st->last = seq;
            st->seen = false;
        }
        st->maybe = 0;
        if (!st->seen && seq) {
            st->seen = true;
            __atomic_fetch_add(&checked, 1, __ATOMIC_RELAXED);
        }
        return;
    }
    if (seq == UINT64_MAX) {
        report(w, b, st, CORRUPT, "not a valid block of this writer", seq);
    } else if (seq > st->last) {
        report(w, b, st, CORRUPT, "newer than any write made", seq);
    } else if (st->seen) {
        report(w, b, st, REPLAYED, "an older write landed after it", seq);
    } else {
        report(w, b, st, LOST, "no read has found it", seq);
    }
}

static void *writer_main(void *opaque)
{
    Writer *w = opaque;
    size_t region = (size_t)nblocks * BLOCK;
    uint8_t *wbuf, *rbuf;
    uint32_t b = 0;
    cpu_set_t cpus;

    CPU_ZERO(&cpus);
    CPU_SET(w->id % ncpus, &cpus);
    sched_setaffinity(0, sizeof(cpus), &cpus);
    if (posix_memalign((void **)&wbuf, BLOCK, BLOCK) ||
        posix_memalign((void **)&rbuf, BLOCK, region)) {
        fail(IO_ERRORS, "writer %u: out of memory", w->id);
        w->done = true;
        return NULL;
    }
    while (!stopping) {
        uint64_t seq = ++w->seq;
        BlockState *st;
        ssize_t n;

        if (xorshift(&w->rng) & 1) {
            b = xorshift(&w->rng) % nblocks;
        }
        st = &w->blocks[b];
        fill_block(wbuf, w->id, b, seq);
        w->inflight_block = b;
        w->inflight_since = now_s();
        w->inflight_seq = seq;
        n = pwrite(w->fd, wbuf, BLOCK, (off_t)(w->first + b) * BLOCK);
        w->inflight_seq = 0;
        st->reported = false;
        if (n != BLOCK) {
            fail(IO_ERRORS, "writer %u: write %" PRIu64 " of block %u failed: "
                 "%s", w->id, seq, b, n < 0 ? strerror(errno) : "short write");
            st->maybe = seq;
            poll(NULL, 0, ERROR_PAUSE_MS);
        } else {
            st->last = seq;
            st->maybe = 0;
            st->seen = false;
            __atomic_fetch_add(&acked, 1, __ATOMIC_RELAXED);
        }
        n = pread(w->fd, rbuf, region, (off_t)w->first * BLOCK);
        if (n != (ssize_t)region) {
            fail(IO_ERRORS, "writer %u: read of its region failed: %s", w->id,
                 n < 0 ? strerror(errno) : "short read");
            poll(NULL, 0, ERROR_PAUSE_MS);
            continue;
        }
        for (uint32_t i = 0; i < nblocks; i++) {
            check_block(w, i, rbuf + (size_t)i * BLOCK);
        }
    }
    free(wbuf);
    free(rbuf);
    w->done = true;
    return NULL;
}

/* Print SPINDLE-HUNG once for each write that has waited hung_s; return
 * how many writers wait so. */
static unsigned check_hung(Writer *writers, unsigned n, double hung_s)
{
    unsigned hung = 0;

    for (unsigned i = 0; i < n; i++) {
        Writer *w = &writers[i];
        /* Read the number first: the writer sets it last. */
        uint64_t seq = w->inflight_seq;
        double since = w->inflight_since;

        if (!seq || w->done || now_s() - since < hung_s) {
            continue;
        }
        hung++;
        if (w->hung_seq != seq) {
            w->hung_seq = seq;
            printf("SPINDLE-HUNG writer=%u block=%u seq=%" PRIu64
                   " waited=%.0f\n", i, w->inflight_block, seq, now_s() - since);
            fflush(stdout);
        }
    }
    return hung;
}

/* Whether stdin (the console) has a line "stop"; waits up to timeout_ms. */
static bool stop_requested(int timeout_ms)
{
    static char line[64];
    static size_t len;
    static bool eof;
    struct pollfd p = { .fd = 0, .events = POLLIN };
    char c;

    if (eof) {
        poll(NULL, 0, timeout_ms);
        return false;
    }
    if (poll(&p, 1, timeout_ms) <= 0 || !(p.revents & (POLLIN | POLLHUP))) {
        return false;
    }
    for (;;) {
        ssize_t n = read(0, &c, 1);

        if (n <= 0) {
            eof = n == 0 || (errno != EINTR && errno != EAGAIN);
            break;
        }
        if (c == '\n' || c == '\r') {
            line[len] = 0;
            len = 0;
            if (strcmp(line, "stop") == 0) {
                return true;
            }
        } else if (len + 1 < sizeof(line)) {
            line[len++] = c;
        }
        p.revents = 0;
        if (poll(&p, 1, 0) <= 0) {
            break;
        }
    }
    return false;
}

int main(int argc, char **argv)
{
    unsigned nwriters, hung = 0;
    double max_s, hung_s, start, last_print = 0;
    uint64_t first, printed = 0, failures = 0;
    Writer *writers;

    if (argc < 7) {
        fprintf(stderr, "usage: crashio DEVICE WRITERS BLOCKS MAX_SECONDS "
                "RUN_ID HUNG_SECONDS [FIRST_BLOCK]\n");
        return 2;
    }
    nwriters = strtoul(argv[2], NULL, 0);
    nblocks = strtoul(argv[3], NULL, 0);
    max_s = strtod(argv[4], NULL);
    run_id = strtoull(argv[5], NULL, 0);
    hung_s = strtod(argv[6], NULL);
    first = argc > 7 ? strtoull(argv[7], NULL, 0) : 256;
    devices = calloc(strlen(argv[1]) + 1, sizeof(*devices));
    for (char *save, *d = strtok_r(argv[1], ",", &save); d;
         d = strtok_r(NULL, ",", &save)) {
        devices[ndevices++] = d;
    }
    ncpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (!ndevices || !nwriters || !nblocks || !ncpus || hung_s <= 0) {
        fprintf(stderr, "crashio: DEVICES, WRITERS, BLOCKS and HUNG_SECONDS "
                "must not be empty or zero\n");
        return 2;
    }
    writers = calloc(nwriters, sizeof(*writers));
    for (unsigned i = 0; i < nwriters; i++) {
        Writer *w = &writers[i];

        w->id = i;
        w->device = devices[i % ndevices];
        w->first = first + (uint64_t)(i / ndevices) * nblocks;
        w->rng = run_id * 2654435761u + i + 1;
        w->blocks = calloc(nblocks, sizeof(*w->blocks));
        w->fd = open(w->device, O_RDWR | O_DIRECT);
        if (w->fd < 0 || !w->blocks) {
            printf("SPINDLE-WARN crashio: cannot open %s: %s\n", w->device,
                   strerror(errno));
            return 1;
        }
    }
    printf("SPINDLE-STAGE writing\n");
    fflush(stdout);
    start = now_s();
    for (unsigned i = 0; i < nwriters; i++) {
        pthread_create(&writers[i].thread, NULL, writer_main, &writers[i]);
    }
    while (!stop_requested(PROGRESS_NS / 1000000) && now_s() - start < max_s) {
        uint64_t n = __atomic_load_n(&acked, __ATOMIC_RELAXED);

        if (n != printed && now_s() - last_print >= PROGRESS_NS / 1e9) {
            printf("SPINDLE-PROGRESS acked=%" PRIu64 "\n", n);
            fflush(stdout);
            printed = n;
            last_print = now_s();
        }
        check_hung(writers, nwriters, hung_s);
    }
    stopping = true;
    printf("SPINDLE-STAGE stopping\n");
    fflush(stdout);
    /* Give every writer up to hung_s to finish the write it is waiting for. */
    for (double t0 = now_s(); now_s() - t0 < hung_s; ) {
        unsigned running = 0;

        for (unsigned i = 0; i < nwriters; i++) {
            running += !writers[i].done;
        }
        if (!running) {
            break;
        }
        poll(NULL, 0, 50);
    }
    hung = check_hung(writers, nwriters, hung_s);
    printf("SPINDLE-RESULT crash.seconds=%.1f\n", now_s() - start);
    printf("SPINDLE-RESULT crash.writers=%u\n", nwriters);
    printf("SPINDLE-RESULT crash.blocks=%u\n", nblocks);
    printf("SPINDLE-RESULT crash.acked=%" PRIu64 "\n", acked);
    printf("SPINDLE-RESULT crash.checked=%" PRIu64 "\n", checked);
    for (int i = 0; i < NCOUNTERS; i++) {
        printf("SPINDLE-RESULT crash.%s=%" PRIu64 "\n", counter_names[i],
               counters[i]);
        failures += counters[i];
    }
    printf("SPINDLE-RESULT crash.hung=%u\n", hung);
    for (unsigned i = 0; i < nwriters; i++) {
        Writer *w = &writers[i];

        printf("SPINDLE-RESULT crash.final.w%u=", i);
        for (unsigned b = 0; b < nblocks; b++) {
            BlockState *st = &w->blocks[b];
            /* A block still in doubt is left out of the host's check. */
            bool doubt = !w->done || st->maybe || st->reported;

            if (doubt) {
                printf("%s?", b ? "," : "");
            } else {
                printf("%s%" PRIu64, b ? "," : "", st->last);
            }
        }
        printf("\n");
    }
    printf("SPINDLE-RESULT crash.verdict=%s\n",
           failures || hung ? "fail" : "ok");
    fflush(stdout);
    /* A hung writer's thread cannot be joined: leave without waiting. */
    _exit(failures || hung ? 1 : 0);
}

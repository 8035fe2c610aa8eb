/*
 * The virtqueue-like kick channel shared by bench-aio and bench-block.
 *
 * A client thread publishes work in shared memory (each benchmark lays out
 * its own ring words, one per cache line), then calls bench_kick_notify():
 * a full fence and, unless the server is busy-polling, a write to the kick
 * eventfd.  The server is a handler in an IOThread registered by
 * bench_kick_attach(): the eventfd's read handler, an io_poll callback that
 * sees whether the client's published index moved past what the server
 * took, and io_poll_begin/end
 * hooks that set and clear no_notify (VRING_USED_F_NO_NOTIFY).
 *
 * Also here: zeroed cache-line-aligned allocation for the shared layouts,
 * and the sampling of a server thread (CPU clock, voluntary context
 * switches, loop statistics) around the recorded requests.
 */
#ifndef SPINDLE_TESTS_BENCH_RING_H
#define SPINDLE_TESTS_BENCH_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "util/aio.h"
#include "util/error.h"
#include "util/event-notifier.h"
#include "util/iothread.h"
#include "bench-common.h"

/*
 * What the kick handler does with the benchmark's ring.  Runs in the
 * IOThread with the opaque given to bench_kick_init().
 */
typedef struct BenchKickOps {
    /* Take every piece of work published so far (after a kick, or when
     * io_poll saw the index move). */
    void (*process)(void *opaque);
} BenchKickOps;

typedef struct BenchKick {
    /* Written by the IOThread's poll hooks, read by the client. */
    _Alignas(BENCH_CACHELINE) _Atomic int no_notify;
    /* Set up by main; read-only while the handler is attached. */
    _Alignas(BENCH_CACHELINE) EventNotifier notifier;
    AioContext *ctx;         /* while attached */
    /* The index the client publishes (release) and how far the server
     * has taken it (server-private): io_poll sees work while they
     * differ. */
    const _Atomic uint32_t *published;
    const uint32_t *taken;
    const BenchKickOps *ops;
    void *opaque;
} BenchKick;

/*
 * Allocate size bytes aligned to align (a power of two, a multiple of
 * sizeof(void *)), zeroed.  Aborts when out of memory.  Free with free().
 */
void *bench_alloc_aligned(size_t align, size_t size);

/*
 * Create k's eventfd and remember the ring's published and taken indexes,
 * ops and opaque.  Main thread.  Returns false with errp set if the
 * eventfd cannot be created; k needs no cleanup then.
 */
bool bench_kick_init(BenchKick *k, const _Atomic uint32_t *published,
                     const uint32_t *taken, const BenchKickOps *ops,
                     void *opaque, Error **errp);

/* Close k's eventfd.  Main thread; k must be detached. */
void bench_kick_cleanup(BenchKick *k);

/*
 * Register k's handler (named "bench-kick") in ctx, running the
 * registration in ctx's home thread (aio_run_sync).  Main thread.
 */
void bench_kick_attach(BenchKick *k, AioContext *ctx);

/* Remove k's handler from its context, in the home thread.  Main thread. */
void bench_kick_detach(BenchKick *k);

/*
 * Client, after its release store of the index it publishes: a full fence
 * (pairs with the loop's full barrier after io_poll_end, before its last
 * poll), then a kick unless the server is polling.  Returns true if it
 * kicked.
 */
bool bench_kick_notify(BenchKick *k);

/*
 * The poll window of k's own handler in its context, or -1 if the context
 * does not list it.  Any thread; k must be attached.
 */
int64_t bench_kick_handler_window(BenchKick *k);

/* ------------------------------------------------------------------------ */
/* Sampling the server side                                                  */

/* The thread that serves the requests, as the client sees it. */
typedef struct BenchServerProbe {
    IOThread *iot;           /* an IOThread server, or NULL */
    clockid_t cpu_clock;     /* without iot: the server thread's CPU clock */
    pid_t tid;               /* the server thread */
} BenchServerProbe;

typedef struct BenchServerSample {
    int64_t cpu_ns;          /* the server thread's CPU time (0 if unknown) */
    int64_t sleeps;          /* its voluntary context switches, -1 unknown */
    AioPollStats stats;      /* its loop's counters; zeroes without iot */
} BenchServerSample;

/*
 * The parts of a BenchServerSample, read separately: each benchmark keeps
 * its own order of reads around the recorded requests (the order decides
 * which clock reads see which others' updates).  Any thread (the
 * client's).
 */
/* The server thread's CPU time in ns, or 0 if its clock cannot be read. */
int64_t bench_probe_cpu_ns(const BenchServerProbe *p);
/* Its voluntary context switches, or -1 if unknown. */
int64_t bench_probe_sleeps(const BenchServerProbe *p);
/* Its loop's counters, or zeroes if it has no loop (no iot). */
void bench_probe_loop_stats(const BenchServerProbe *p, AioPollStats *out);

/*
 * Voluntary context switches per request between a and b, or -1 if either
 * sample does not know them.
 */
double bench_sleeps_per(const BenchServerSample *a,
                        const BenchServerSample *b, double n);

/*
 * "turns=N wakeups=N poll_hits=N poll_misses=N dispatches=N poll_ns=N":
 * a loop's state for a stall report.  Caller frees.
 */
char *bench_loop_stats_string(const AioPollStats *st);

/* ------------------------------------------------------------------------ */
/* The statistics every benchmark reports                                    */

/*
 * The first entries of every benchmark's array of statistics of a run (a
 * RunStats): the latency of the recorded requests, in ns, and the server
 * loop's counters over them.  A benchmark's own StatIds go on from
 * BENCH_STAT_SHARED.
 */
enum {
    STAT_P50,
    STAT_P99,
    STAT_P999,
    STAT_MEAN,
    STAT_MIN,
    STAT_MAX,
    STAT_POLL_HITS,
    STAT_POLL_MISSES,
    STAT_WAKEUPS,
    STAT_DISPATCHES,
    STAT_POLL_TIME,
    STAT_BLOCK_TIME,
    STAT_POLL_NS,            /* the context's window at the end */
    BENCH_STAT_SHARED,
};

/*
 * Sort samples[0..n) (n >= 1) and store their nearest-rank statistics in
 * v[STAT_P50] .. v[STAT_MAX].
 */
void bench_latency_stats(uint64_t *samples, size_t n, double *v);

/*
 * The loop counters of b minus those of a into v[STAT_POLL_HITS] ..
 * v[STAT_POLL_NS] (poll_ns: b's, the window at the end).
 */
void bench_loop_stats_store(const AioPollStats *a, const AioPollStats *b,
                            double *v);

#endif

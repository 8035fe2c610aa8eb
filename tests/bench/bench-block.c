/*
 * bench-block: latency, IOPS and CPU cost of 4 KiB random reads through the
 * block layer, with and without the adaptive poll window.
 *
 * Theory of operation
 * -------------------
 * A client thread pinned to one CPU plays the guest; an IOThread pinned to
 * another owns a block node and plays the device.  They share a ring laid
 * out like a split virtqueue, each part on its own cache lines:
 *
 *   desc_offset[id]   the byte offset of request slot id (client writes)
 *   avail[], avail_idx  slot ids posted by the client, and how many
 *   used[], used_idx    slot ids completed by the IOThread, and how many
 *   no_notify           set by the IOThread while it busy-polls
 *                       (VRING_USED_F_NO_NOTIFY)
 *
 * The client keeps QD requests outstanding: it fills free slots with random
 * 4 KiB-aligned offsets, publishes avail_idx (release), issues a full fence
 * and, unless no_notify is set, kicks the IOThread's eventfd.  Then it spins
 * on used_idx (acquire), takes every completed slot, records
 * now - post time for each, and refills.  The client is identical in every
 * configuration; only the server side changes.
 *
 * The IOThread registers the kick eventfd with a poll callback (avail_idx
 * moved) and io_poll_begin/end hooks that set and clear no_notify (the kick
 * channel is bench-ring.h's, shared with bench-aio).  For each
 * new slot it submits a BlockRequest (READ, 4 KiB, a buffer from a 4 KiB
 * aligned pool) to the node; the completion callback appends the slot to
 * used[] and publishes used_idx (release).  The "no lost kick" argument is
 * bench-aio's: the client stores avail_idx, fences, loads no_notify; the
 * loop clears no_notify in io_poll_end, issues a full barrier and polls once
 * more, so either the client sees 0 and kicks or the loop sees the request.
 *
 * Configurations (cells): every engine (null-co; file with aio=native,
 * io_uring and threads on a temporary file, O_DIRECT where the file system
 * allows it) x every queue depth x {poll-max-ns=0, the adaptive window}.
 * Each cell gets a fresh IOThread and node, sends warm-up requests (not
 * recorded; the window settles), then samples the IOThread's CPU clock, the
 * loop's AioPollStats and the engine's counters (in the IOThread, through
 * aio_run_sync: block_engine_get_stats() is a home-thread function) around
 * the recorded requests.  With --repeat R every cell runs R times,
 * alternating, and every statistic is the median over the R runs.
 * Percentiles are nearest-rank on the sorted samples.
 *
 * Threads: main creates and destroys IOThreads and nodes (main-thread
 * jobs); a dedicated client thread runs the requests so that the main
 * thread's affinity is left alone.  The tables and the JSON report are
 * printed by bench-block-report.c.
 */

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>

#include "block/aio-engine.h"
#include "block/block.h"
#include "util/aio.h"
#include "util/clock.h"
#include "util/cli-parse.h"
#include "util/cutils.h"
#include "util/error.h"
#include "util/event-notifier.h"
#include "util/iothread.h"
#include "bench-block.h"
#include "bench-common.h"
#include "bench-file.h"
#include "bench-ring.h"

#define CACHELINE BENCH_CACHELINE

/* Ring entries: a power of two, at least QD_MAX. */
#define RING_SIZE 256
#define RING_MASK (RING_SIZE - 1)

#define NULL_LATENCY_NS_MAX 1000000000    /* 1 s */
#define FILE_SIZE_MIN (1LL << 20)
#define FILE_SIZE_MAX (64LL << 30)
#define FILE_SIZE_DEFAULT (64LL << 20)

G_STATIC_ASSERT(RING_SIZE >= QD_MAX && (RING_SIZE & RING_MASK) == 0);
G_STATIC_ASSERT(FILE_SIZE_MIN >= (int64_t)QD_MAX * BLOCK_SIZE);

/* ------------------------------------------------------------------------ */
/* Names (declared in bench-block.h)                                         */

const char *const engine_names[ENGINE_COUNT] = {
    [ENGINE_NULL_CO] = "null-co",
    [ENGINE_NATIVE] = "native",
    [ENGINE_IO_URING] = "io_uring",
    [ENGINE_THREADS] = "threads",
};

const char *const poll_names[POLL_COUNT] = {
    [POLL_OFF] = "off",
    [POLL_ADAPTIVE] = "adaptive",
};

const StatInfo stat_info[STAT_COUNT] = {
    [STAT_P50] = { "p50_ns", true },
    [STAT_P99] = { "p99_ns", true },
    [STAT_P999] = { "p999_ns", true },
    [STAT_MEAN] = { "mean_ns", true },
    [STAT_MIN] = { "min_ns", true },
    [STAT_MAX] = { "max_ns", true },
    [STAT_IOPS] = { "iops", false },
    [STAT_CPU_PER_IO] = { "cpu_ns_per_io", true },
    [STAT_ALL_CPU_PER_IO] = { "all_cpu_ns_per_io", true },
    [STAT_KICKS_PER_IO] = { "kicks_per_io", false },
    [STAT_SLEEPS_PER_IO] = { "sleeps_per_io", false },
    [STAT_COMPLETIONS] = { "completions", true },
    [STAT_COMPLETIONS_POLLED] = { "completions_polled", true },
    [STAT_POLLED_FRACTION] = { "polled_fraction", false },
    [STAT_SUBMISSIONS] = { "submissions", true },
    [STAT_RESUBMITS] = { "resubmits", true },
    [STAT_POLL_HITS] = { "poll_hits", true },
    [STAT_POLL_MISSES] = { "poll_misses", true },
    [STAT_WAKEUPS] = { "wakeups", true },
    [STAT_DISPATCHES] = { "dispatches", true },
    [STAT_POLL_TIME] = { "poll_time_ns", true },
    [STAT_BLOCK_TIME] = { "block_time_ns", true },
    [STAT_POLL_NS] = { "poll_ns", true },
    [STAT_BHS] = { "bhs", true },
    [STAT_KICK_WINDOW] = { "kick_window_ns", true },
    [STAT_ELAPSED] = { "elapsed_ns", true },
};

/* For the stall handler: the test file to remove before _exit. */
static const char *stall_unlink_path;

/* ------------------------------------------------------------------------ */
/* Shared ring                                                               */

typedef struct BenchRing BenchRing;

/* The IOThread's side of one request slot. */
typedef struct BenchSlot {
    BlockRequest req;
    struct iovec iov;
    void *buf;               /* BLOCK_SIZE bytes, BLOCK_SIZE-aligned */
    BenchRing *ring;
    uint16_t id;
} BenchSlot;

struct BenchRing {
    /* Written by the client. */
    _Alignas(CACHELINE) _Atomic uint32_t avail_idx;
    _Alignas(CACHELINE) uint16_t avail[RING_SIZE];
    _Alignas(CACHELINE) int64_t desc_offset[QD_MAX];
    /* Written by the IOThread. */
    _Alignas(CACHELINE) _Atomic uint32_t used_idx;
    _Alignas(CACHELINE) uint16_t used[RING_SIZE];
    /* no_notify (written by the IOThread's poll hooks) and the eventfd. */
    BenchKick kick;
    /* IOThread-private (read by the client once the run is over). */
    _Alignas(CACHELINE) uint32_t last_avail;
    uint32_t used_shadow;
    uint64_t errors;         /* requests that completed with an error */
    int first_error;         /* -errno of the first one */
    /* Set up by main. */
    BlockNode *node;
    unsigned qd;
    BenchSlot *slots;        /* qd of them */
    void *pool;              /* qd * BLOCK_SIZE bytes */
};

static BenchRing *ring_new(unsigned qd, BlockNode *node)
{
    BenchRing *r = bench_alloc_aligned(CACHELINE, sizeof(*r));
    unsigned i;

    r->pool = bench_alloc_aligned(BLOCK_SIZE, (size_t)qd * BLOCK_SIZE);
    atomic_init(&r->avail_idx, 0);
    atomic_init(&r->used_idx, 0);
    memset(r->pool, 0x5a, (size_t)qd * BLOCK_SIZE);
    r->node = node;
    r->qd = qd;
    r->slots = g_new0(BenchSlot, qd);
    for (i = 0; i < qd; i++) {
        r->slots[i].buf = (char *)r->pool + (size_t)i * BLOCK_SIZE;
        r->slots[i].ring = r;
        r->slots[i].id = i;
    }
    return r;
}

static void ring_free(BenchRing *r)
{
    g_free(r->slots);
    free(r->pool);
    free(r);
}

/* ------------------------------------------------------------------------ */
/* Server: the device side, in the IOThread                                  */

/* Completion of one slot: hand it back to the client.  IOThread. */
static void server_complete(BlockRequest *req, int ret)
{
    BenchSlot *s = req->opaque;
    BenchRing *r = s->ring;

    if (ret < 0) {
        if (!r->errors++) {
            r->first_error = ret;
        }
    }
    r->used[r->used_shadow & RING_MASK] = s->id;
    r->used_shadow++;
    /*
     * Pairs with the client's acquire load of used_idx: the used[] entry
     * (and the error count) are visible before the new index.
     */
    atomic_store_explicit(&r->used_idx, r->used_shadow, memory_order_release);
}

static void server_submit(BenchRing *r, uint16_t id)
{
    BenchSlot *s = &r->slots[id];

    s->iov.iov_base = s->buf;
    s->iov.iov_len = BLOCK_SIZE;
    s->req.op = BLOCK_OP_READ;
    s->req.flags = 0;
    s->req.offset = r->desc_offset[id];
    s->req.bytes = BLOCK_SIZE;
    s->req.iov = &s->iov;
    s->req.niov = 1;
    s->req.cb = server_complete;
    s->req.opaque = s;
    block_node_submit(r->node, &s->req);
}

/* Submit every slot posted since the last look.  IOThread. */
static void server_process(void *opaque)
{
    BenchRing *r = opaque;
    /* Pairs with the client's release store of avail_idx. */
    uint32_t avail = atomic_load_explicit(&r->avail_idx, memory_order_acquire);

    while (r->last_avail != avail) {
        uint16_t id = r->avail[r->last_avail & RING_MASK];

        r->last_avail++;
        /* The client is this program: a bad slot id is our own bug. */
        g_assert(id < r->qd);
        server_submit(r, id);
    }
}

/* The kick channel's io_poll sees avail_idx move past last_avail. */
static const BenchKickOps server_kick_ops = {
    .process = server_process,
};

/* ------------------------------------------------------------------------ */
/* Engine statistics (home-thread function, called through aio_run_sync)     */

typedef struct EngineStatsCall {
    const BlockEngineOps *ops;
    AioContext *ctx;
    BlockEngineStats st;
    bool found;
} EngineStatsCall;

static void engine_stats_in_iothread(void *opaque)
{
    EngineStatsCall *c = opaque;

    c->found = block_engine_get_stats(c->ops, c->ctx, &c->st);
}

/* The engine instance's counters in ctx; zeroes if it has none. */
static void read_engine_stats(const BlockEngineOps *ops, AioContext *ctx,
                              BlockEngineStats *out)
{
    EngineStatsCall c = { .ops = ops, .ctx = ctx };

    aio_run_sync(ctx, engine_stats_in_iothread, &c);
    *out = c.found ? c.st : (BlockEngineStats) { 0 };
}

/* ------------------------------------------------------------------------ */
/* Client: the guest side                                                    */

typedef struct ClientRun {
    /* Inputs. */
    BenchRing *ring;
    const BenchOpts *opts;
    IOThread *iot;
    BenchServerProbe probe;             /* the IOThread */
    const BlockEngineOps *engine_ops;   /* NULL for null-co */
    const char *label;                  /* for stall reports */
    unsigned qd;
    uint64_t nblocks;
    uint64_t rng;
    /* Client-private ring state. */
    uint32_t avail_shadow;
    uint32_t used_seen;
    unsigned nfree;
    uint16_t free_ids[QD_MAX];
    int64_t post_ns[QD_MAX];
    /* Outputs. */
    uint64_t *samples;       /* opts->common.count latencies, in ns */
    uint64_t kicks;          /* over the recorded requests */
    int64_t start_ns, end_ns;
    BenchServerSample server_start, server_end;   /* the IOThread */
    int64_t proc_cpu_start_ns, proc_cpu_end_ns;   /* the whole process */
    int64_t self_cpu_start_ns, self_cpu_end_ns;   /* the client thread */
    BlockEngineStats engine_start, engine_end;   /* zeroes if none */
} ClientRun;

/* xorshift64*: cheap, and the same sequence in every cell. */
static uint64_t rng_next(uint64_t *state)
{
    return xorshift64star(state);
}

static int64_t process_cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* No completion within BENCH_RESPONSE_TIMEOUT_NS: say what we saw, give
 * up. */
static void G_GNUC_NORETURN client_report_stall(const ClientRun *run)
{
    g_autofree char *loop = NULL;
    AioPollStats st;

    aio_context_get_stats(iothread_get_aio_context(run->iot), &st);
    loop = bench_loop_stats_string(&st);
    fprintf(stderr,
            "bench-block: %s: no completion for %lld s "
            "(avail_idx=%" PRIu32 " used_idx=%" PRIu32 " seen=%" PRIu32
            " no_notify=%d); IOThread loop: %s: lost wakeup or stuck "
            "request?\n",
            run->label, BENCH_RESPONSE_TIMEOUT_NS / 1000000000LL,
            atomic_load(&run->ring->avail_idx),
            atomic_load(&run->ring->used_idx), run->used_seen,
            atomic_load(&run->ring->kick.no_notify), loop);
    fflush(stderr);
    if (stall_unlink_path) {
        unlink(stall_unlink_path);
    }
    /* Other threads may be wedged: do not run exit handlers. */
    _exit(EXIT_FAILURE);
}

/*
 * Fill up to max free slots with random offsets, publish them and kick the
 * IOThread unless it is polling.  Returns the number posted.
 */
static int64_t client_post(ClientRun *run, int64_t max, uint64_t *kicks)
{
    BenchRing *r = run->ring;
    int64_t now = clock_now_ns();
    int64_t k = 0;

    while (run->nfree && k < max) {
        uint16_t id = run->free_ids[--run->nfree];

        r->desc_offset[id] =
            (int64_t)(rng_next(&run->rng) % run->nblocks) * BLOCK_SIZE;
        run->post_ns[id] = now;
        r->avail[run->avail_shadow & RING_MASK] = id;
        run->avail_shadow++;
        k++;
    }
    /* Pairs with the IOThread's acquire load of avail_idx. */
    atomic_store_explicit(&r->avail_idx, run->avail_shadow,
                          memory_order_release);
    *kicks += bench_kick_notify(&r->kick);
    return k;
}

/*
 * Spin until at least one request has completed, then take every completed
 * one: record its latency into samples (if not NULL) and free its slot.
 * Returns the number taken.
 */
static int64_t client_reap(ClientRun *run, uint64_t *samples)
{
    BenchRing *r = run->ring;
    int64_t t0 = clock_now_ns();
    unsigned spins = 0;
    uint32_t used;
    int64_t now, k = 0;

    /* Pairs with the IOThread's release store of used_idx. */
    while ((used = atomic_load_explicit(&r->used_idx, memory_order_acquire))
           == run->used_seen) {
        if (bench_spin_timed_out(&spins, t0)) {
            client_report_stall(run);
        }
    }
    now = clock_now_ns();
    while (run->used_seen != used) {
        uint16_t id = r->used[run->used_seen & RING_MASK];

        run->used_seen++;
        g_assert(id < run->qd);
        if (samples) {
            samples[k] = now - run->post_ns[id];
        }
        run->free_ids[run->nfree++] = id;
        k++;
    }
    return k;
}

/* Complete n requests with qd in flight; the ring is idle on return. */
static void client_phase(ClientRun *run, int64_t n, uint64_t *samples,
                         uint64_t *kicks)
{
    int64_t posted = 0, done = 0;

    while (done < n) {
        if (run->nfree && posted < n) {
            posted += client_post(run, n - posted, kicks);
        }
        done += client_reap(run, samples ? samples + done : NULL);
    }
}

static void client_sample(ClientRun *run, bool end)
{
    AioContext *ctx = iothread_get_aio_context(run->iot);

    if (!end) {
        if (run->engine_ops) {
            read_engine_stats(run->engine_ops, ctx, &run->engine_start);
        }
        run->server_start.sleeps = bench_probe_sleeps(&run->probe);
        bench_probe_loop_stats(&run->probe, &run->server_start.stats);
        run->self_cpu_start_ns = clock_thread_cpu_ns();
        run->proc_cpu_start_ns = process_cpu_ns();
        run->server_start.cpu_ns = bench_probe_cpu_ns(&run->probe);
        run->start_ns = clock_now_ns();
        return;
    }
    run->end_ns = clock_now_ns();
    run->server_end.cpu_ns = bench_probe_cpu_ns(&run->probe);
    run->proc_cpu_end_ns = process_cpu_ns();
    run->self_cpu_end_ns = clock_thread_cpu_ns();
    bench_probe_loop_stats(&run->probe, &run->server_end.stats);
    run->server_end.sleeps = bench_probe_sleeps(&run->probe);
    if (run->engine_ops) {
        read_engine_stats(run->engine_ops, ctx, &run->engine_end);
    }
}

static void *client_thread_fn(void *opaque)
{
    ClientRun *run = opaque;
    uint64_t warmup_kicks = 0;
    unsigned i;

    for (i = 0; i < run->qd; i++) {
        run->free_ids[run->nfree++] = run->qd - 1 - i;
    }
    client_phase(run, run->opts->common.warmup, NULL, &warmup_kicks);
    client_sample(run, false);
    client_phase(run, run->opts->common.count, run->samples, &run->kicks);
    client_sample(run, true);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Turning samples into statistics                                           */

/*
 * The engine's counters over the recorded requests.  null-co has no engine:
 * its requests complete from a bottom half, none is found by a poll
 * callback, so it reports every request as completed and none as polled.
 */
static void fill_engine_stats(RunStats *rs, const ClientRun *run)
{
    const BlockEngineStats *a = &run->engine_start, *b = &run->engine_end;
    double completions, polled;

    if (!run->engine_ops) {
        rs->v[STAT_COMPLETIONS] = (double)run->opts->common.count;
        return;              /* polled, submissions, resubmits: 0 */
    }
    completions = (double)(b->completions - a->completions);
    polled = (double)(b->completions_polled - a->completions_polled);
    rs->v[STAT_COMPLETIONS] = completions;
    rs->v[STAT_COMPLETIONS_POLLED] = polled;
    rs->v[STAT_POLLED_FRACTION] = completions > 0 ? polled / completions : 0;
    rs->v[STAT_SUBMISSIONS] = (double)(b->submissions - a->submissions);
    rs->v[STAT_RESUBMITS] = (double)(b->resubmits - a->resubmits);
}

static void fill_run_stats(RunStats *rs, ClientRun *run)
{
    double n = (double)run->opts->common.count;
    double elapsed = (double)(run->end_ns - run->start_ns);
    double all_cpu = (double)(run->proc_cpu_end_ns - run->proc_cpu_start_ns) -
                     (double)(run->self_cpu_end_ns - run->self_cpu_start_ns);

    memset(rs, 0, sizeof(*rs));
    bench_latency_stats(run->samples, run->opts->common.count, rs->v);
    rs->v[STAT_ELAPSED] = elapsed;
    rs->v[STAT_IOPS] = elapsed > 0 ? n * 1e9 / elapsed : 0;
    rs->v[STAT_CPU_PER_IO] =
        (run->server_end.cpu_ns - run->server_start.cpu_ns) / n;
    rs->v[STAT_ALL_CPU_PER_IO] = all_cpu > 0 ? all_cpu / n : 0;
    rs->v[STAT_KICKS_PER_IO] = run->kicks / n;
    rs->v[STAT_SLEEPS_PER_IO] =
        bench_sleeps_per(&run->server_start, &run->server_end, n);
    fill_engine_stats(rs, run);
    bench_loop_stats_store(&run->server_start.stats, &run->server_end.stats,
                           rs->v);
    rs->v[STAT_BHS] = run->server_end.stats.bhs - run->server_start.stats.bhs;
}

/* ------------------------------------------------------------------------ */
/* Running one cell                                                          */

/* ',' inside a key=value option value is written ",,". */
static char *escape_keyval(const char *value)
{
    g_auto(GStrv) parts = g_strsplit(value, ",", -1);

    return g_strjoinv(",,", parts);
}

static char *node_options(const Cell *cell, const BenchOpts *opts,
                          const BenchTestFile *tf)
{
    g_autofree char *filename = NULL;

    if (cell->engine == ENGINE_NULL_CO) {
        return g_strdup_printf("driver=null-co,node-name=bench-disk,"
                               "size=%" PRId64 ",latency-ns=%" PRId64,
                               opts->file_size, opts->null_latency_ns);
    }
    filename = escape_keyval(tf->path);
    return g_strdup_printf("driver=file,node-name=bench-disk,filename=%s,"
                           "aio=%s,cache.direct=%s,read-only=on",
                           filename, engine_names[cell->engine],
                           cell->direct ? "on" : "off");
}

static IOThread *create_iothread(const Cell *cell, const BenchOpts *opts,
                                 Error **errp)
{
    g_autofree char *optstr = NULL;
    int64_t poll_max_ns = cell->poll == POLL_ADAPTIVE ?
                          opts->common.poll_max_ns : 0;

    optstr = g_strdup_printf("iothread,id=bench-block,poll-max-ns=%" PRId64
                             ",cpu-affinity=%d", poll_max_ns,
                             opts->common.server_cpu);
    return iothread_create_from_string(optstr, errp);
}

static char *cell_label(const Cell *cell)
{
    return g_strdup_printf("%s qd=%" PRId64 " poll=%s",
                           engine_names[cell->engine], cell->qd,
                           poll_names[cell->poll]);
}

/* Run the client thread against a ready ring; fills rs. */
static bool run_client(BenchRing *r, const BenchOpts *opts, const Cell *cell,
                       IOThread *iot, RunStats *rs, Error **errp)
{
    g_autofree char *label = cell_label(cell);
    ClientRun *run = g_new0(ClientRun, 1);
    pthread_t thread;
    bool ok = false;

    run->ring = r;
    run->opts = opts;
    run->iot = iot;
    run->probe.iot = iot;
    run->probe.tid = iothread_get_thread_id(iot);
    run->engine_ops = engine_is_file(cell->engine) ?
                      block_engine_find(engine_names[cell->engine]) : NULL;
    run->label = label;
    run->qd = cell->qd;
    run->nblocks = opts->file_size / BLOCK_SIZE;
    run->rng = 0x9E3779B97F4A7C15ULL;
    run->samples = g_new(uint64_t, opts->common.count);
    if (bench_start_pinned_thread(&thread, "bench-client",
                                  opts->common.client_cpu, client_thread_fn,
                                  run, errp)) {
        pthread_join(thread, NULL);
        /* Ordered by the client's acquire loads of used_idx. */
        if (r->errors) {
            error_setg_errno(errp, -r->first_error,
                             "%" PRIu64 " of the reads failed, the first with",
                             r->errors);
        } else {
            fill_run_stats(rs, run);
            ok = true;
        }
    }
    g_free(run->samples);
    g_free(run);
    return ok;
}

/*
 * Run one cell once.  *open_failed tells a node that could not be opened or
 * whose reads failed (the engine is unusable here) from other errors.
 */
static bool run_cell(Cell *cell, const BenchOpts *opts,
                     const BenchTestFile *tf, RunStats *rs, bool *open_failed,
                     Error **errp)
{
    g_autofree char *nodeopts = node_options(cell, opts, tf);
    IOThread *iot;
    AioContext *ctx;
    BlockNode *node;
    BenchRing *r;
    bool ok = false;

    *open_failed = false;
    iot = create_iothread(cell, opts, errp);
    if (!iot) {
        return false;
    }
    ctx = iothread_get_aio_context(iot);
    node = block_node_open_str(nodeopts, ctx, errp);
    if (!node) {
        *open_failed = true;
        goto out_iothread;
    }
    r = ring_new(cell->qd, node);
    if (!bench_kick_init(&r->kick, &r->avail_idx, &r->last_avail,
                         &server_kick_ops, r, errp)) {
        goto out_ring;
    }
    bench_kick_attach(&r->kick, ctx);

    ok = run_client(r, opts, cell, iot, rs, errp);
    if (ok) {
        rs->v[STAT_KICK_WINDOW] = bench_kick_handler_window(&r->kick);
    } else {
        *open_failed = r->errors > 0;
    }

    bench_kick_detach(&r->kick);
    bench_kick_cleanup(&r->kick);
out_ring:
    ring_free(r);
    block_node_unref(node);
out_iothread:
    iothread_destroy(iot);
    return ok;
}

/* ------------------------------------------------------------------------ */
/* The test file                                                             */

/*
 * Create the test file in $TMPDIR, the build directory or /var/tmp: the
 * first whose file system allows O_DIRECT (see bench-file.h).
 */
static bool test_file_create(BenchTestFile *tf, const BenchOpts *opts,
                             Error **errp)
{
    const char *tmpdir = g_getenv("TMPDIR");
    const char *dirs[4];
    int n = 0;

    if (tmpdir && *tmpdir) {
        dirs[n++] = tmpdir;
    }
    dirs[n++] = BENCH_BUILD_DIR;
    dirs[n++] = "/var/tmp";
    dirs[n] = NULL;
    if (!bench_test_file_create(tf, dirs, opts->file_size, opts->direct,
                                errp)) {
        error_prepend(errp, "test file: ");
        return false;
    }
    stall_unlink_path = tf->path;
    return true;
}

/* ------------------------------------------------------------------------ */
/* All cells                                                                 */

static void bench_skip_engine(Bench *b, EngineId e, const char *reason)
{
    if (!b->skipped[e]) {
        b->skipped[e] = g_strdup(reason);
        fprintf(stderr, "bench-block: skipping %s: %s\n", engine_names[e],
                reason);
    }
}

bool bench_has_file_engine(const Bench *b)
{
    int e;

    for (e = 0; e < ENGINE_COUNT; e++) {
        if (b->opts->engines[e] && engine_is_file(e) && !b->skipped[e]) {
            return true;
        }
    }
    return false;
}

static bool bench_ran_any(const Bench *b)
{
    size_t i;

    for (i = 0; i < b->ncells; i++) {
        if (!b->skipped[b->cells[i].engine]) {
            return true;
        }
    }
    return false;
}

/* Engines that were not built in are skipped before anything runs. */
static void bench_check_engines(Bench *b)
{
    int e;

    for (e = 0; e < ENGINE_COUNT; e++) {
        if (b->opts->engines[e] && engine_is_file(e) &&
            !block_engine_find(engine_names[e])) {
            bench_skip_engine(b, e, "not built in (its library was missing "
                              "when Spindle was configured)");
        }
    }
}

static void bench_make_cells(Bench *b)
{
    const BenchOpts *opts = b->opts;
    size_t n = 0;
    int e, q, p;

    b->cells = g_new0(Cell, ENGINE_COUNT * opts->nqd * POLL_COUNT);
    for (e = 0; e < ENGINE_COUNT; e++) {
        if (!opts->engines[e] || b->skipped[e]) {
            continue;
        }
        for (q = 0; q < opts->nqd; q++) {
            for (p = 0; p < POLL_COUNT; p++) {
                Cell *c = &b->cells[n++];

                c->engine = e;
                c->qd = opts->qds[q];
                c->poll = p;
                c->direct = engine_is_file(e) && b->file.direct;
                c->runs = g_new0(RunStats, opts->common.repeat);
            }
        }
    }
    b->ncells = n;
}

static bool bench_run_all(Bench *b, Error **errp)
{
    const BenchOpts *opts = b->opts;
    int64_t r;
    size_t i;

    for (r = 0; r < opts->common.repeat; r++) {
        for (i = 0; i < b->ncells; i++) {
            Cell *c = &b->cells[i];
            Error *err = NULL;
            bool open_failed;

            if (b->skipped[c->engine]) {
                continue;
            }
            if (run_cell(c, opts, &b->file, &c->runs[r], &open_failed,
                         &err)) {
                continue;
            }
            /*
             * An engine that this host cannot run (no io_uring in the
             * kernel, a file system without AIO support) fails on its
             * first cell: skip it.  Later failures are real errors.
             */
            if (open_failed && r == 0 &&
                (i == 0 || b->cells[i - 1].engine != c->engine)) {
                bench_skip_engine(b, c->engine, error_get_pretty(err));
                error_free(err);
                continue;
            }
            g_autofree char *label = cell_label(c);
            error_propagate(errp, err);
            error_prepend(errp, "%s: ", label);
            return false;
        }
    }
    for (i = 0; i < b->ncells; i++) {
        Cell *c = &b->cells[i];

        if (!b->skipped[c->engine]) {
            bench_median_stats(c->runs, sizeof(RunStats), opts->common.repeat,
                               STAT_COUNT, c->result.v);
        }
    }
    return true;
}

static void bench_free(Bench *b)
{
    size_t i;
    int e;

    for (i = 0; i < b->ncells; i++) {
        g_free(b->cells[i].runs);
    }
    g_free(b->cells);
    for (e = 0; e < ENGINE_COUNT; e++) {
        g_free(b->skipped[e]);
    }
    stall_unlink_path = NULL;
    bench_test_file_destroy(&b->file);
}

/* ------------------------------------------------------------------------ */
/* Command line                                                              */

static bool parse_qds(const char *str, BenchOpts *opts, Error **errp)
{
    g_auto(GStrv) words = NULL;
    int i, j;

    if (!str) {
        str = "1,32";
    }
    if (!*str) {
        error_setg(errp, "--qd: expected a comma-separated list of queue "
                   "depths (1-%d), got an empty string", QD_MAX);
        return false;
    }
    words = g_strsplit(str, ",", -1);
    if (g_strv_length(words) > QD_LIST_MAX) {
        error_setg(errp, "--qd: at most %d queue depths, got %u",
                   QD_LIST_MAX, g_strv_length(words));
        return false;
    }
    opts->nqd = 0;
    for (i = 0; words[i]; i++) {
        int64_t qd;

        if (!bench_parse_optional_int("--qd", words[i], 1, QD_MAX, &qd,
                                      errp)) {
            return false;
        }
        for (j = 0; j < opts->nqd; j++) {
            if (opts->qds[j] == qd) {
                error_setg(errp, "--qd: queue depth %" PRId64 " is listed "
                           "twice", qd);
                return false;
            }
        }
        opts->qds[opts->nqd++] = qd;
    }
    return true;
}

/* A byte count with an optional k, M, G or T suffix (powers of 1024). */
static bool parse_file_size(const char *str, BenchOpts *opts, Error **errp)
{
    uint64_t value;

    if (!str) {
        return true;
    }
    if (!cli_parse_size("--file-size", str, &value, errp)) {
        return false;
    }
    if (value > FILE_SIZE_MAX) {
        error_setg(errp, "--file-size: '%s' is larger than %lld GiB", str,
                   FILE_SIZE_MAX >> 30);
        return false;
    }
    if (value < FILE_SIZE_MIN || value % BLOCK_SIZE) {
        error_setg(errp, "--file-size: '%s' must be a multiple of %d bytes "
                   "and at least 1M", str, BLOCK_SIZE);
        return false;
    }
    opts->file_size = value;
    return true;
}

static bool parse_direct(const char *str, BenchOpts *opts, Error **errp)
{
    int mode;

    if (!str) {
        return true;
    }
    if (!cli_parse_choice("--direct", str, bench_direct_mode_names,
                          BENCH_DIRECT_COUNT, &mode, errp)) {
        return false;
    }
    opts->direct = mode;
    return true;
}

/* What --help says, and how it words the common options. */
static const BenchCommonHelp help = {
    .parameter = "- block layer random-read micro-benchmark",
    .summary =
        "4 KiB random reads at fixed queue depths through an IOThread that\n"
        "owns a block node (null-co, or file with aio=native, io_uring or\n"
        "threads on a temporary file), with poll-max-ns=0 and with the\n"
        "adaptive poll window: latency percentiles, IOPS, CPU per I/O.",
    .items = "requests",
    .unit = "cell",
    .server = "IOThread",
    .polled = "adaptive mode",
};

static bool parse_command_line(int argc, char **argv, BenchOpts *opts,
                               Error **errp)
{
    g_autofree char *engines = NULL;
    g_autofree char *qd = NULL;
    g_autofree char *null_latency_ns = NULL;
    g_autofree char *file_size = NULL;
    g_autofree char *direct = NULL;
    const GOptionEntry entries[] = {
        { "engines", 0, 0, G_OPTION_ARG_STRING, &engines,
          "null-co, native, io_uring, threads, a comma-separated list, or "
          "all (default all)", "LIST" },
        { "qd", 0, 0, G_OPTION_ARG_STRING, &qd,
          "Queue depths, comma-separated (default 1,32; at most 256)",
          "LIST" },
        { "null-latency-ns", 0, 0, G_OPTION_ARG_STRING, &null_latency_ns,
          "latency-ns of the null-co node (default 0)", "N" },
        { "file-size", 0, 0, G_OPTION_ARG_STRING, &file_size,
          "Size of the test file and of the null-co node (default 64M)",
          "SIZE" },
        { "direct", 0, 0, G_OPTION_ARG_STRING, &direct,
          "cache.direct of the file engines: auto (O_DIRECT where the "
          "file system allows it), on or off (default auto)", "MODE" },
        { NULL }
    };

    return bench_parse_command_line(argc, argv, &help, entries,
        &opts->common, errp) &&
        bench_parse_optional_int("--null-latency-ns", null_latency_ns, 0,
                                 NULL_LATENCY_NS_MAX, &opts->null_latency_ns,
                                 errp) &&
        parse_file_size(file_size, opts, errp) &&
        bench_parse_name_set("--engines", "engine", engines, engine_names,
                             ENGINE_COUNT, opts->engines, errp) &&
        parse_qds(qd, opts, errp) &&
        parse_direct(direct, opts, errp);
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    BenchOpts opts = {
        .null_latency_ns = 0,
        .file_size = FILE_SIZE_DEFAULT,
        .direct = BENCH_DIRECT_AUTO,
    };
    Bench b = { .opts = &opts };
    Error *err = NULL;
    int status = EXIT_FAILURE;

    bench_common_init(&opts.common, 20000);
    if (!parse_command_line(argc, argv, &opts, &err)) {
        return bench_fail("bench-block", err, BENCH_EXIT_USAGE);
    }
    bench_check_engines(&b);
    if (bench_has_file_engine(&b) && !test_file_create(&b.file, &opts, &err)) {
        goto out;
    }
    bench_make_cells(&b);
    if (!bench_run_all(&b, &err)) {
        goto out;
    }
    if (!bench_ran_any(&b)) {
        error_setg(&err, "no engine could run on this machine");
        goto out;
    }
    if (opts.common.json) {
        bench_block_print_json(&b);
    } else {
        bench_block_print_table(&b);
    }
    status = EXIT_SUCCESS;
out:
    if (err) {
        bench_fail("bench-block", err, status);
    }
    bench_free(&b);
    return status;
}

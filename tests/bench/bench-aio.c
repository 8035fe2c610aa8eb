/*
 * bench-aio: round-trip latency and server CPU cost of the event loop.
 *
 * Theory of operation
 * -------------------
 * Two threads pinned to different CPUs ping-pong N messages through shared
 * memory laid out like a virtqueue.  Three words, each on its own 64-byte
 * cache line:
 *
 *   req        the client's sequence number (the "avail index")
 *   resp       the server's echo of it (the "used index")
 *   no_notify  set by the server while it busy-polls (VRING_USED_F_NO_NOTIFY)
 *
 * The client sends message i by storing req = i, issuing a full fence and,
 * unless no_notify is set, kicking the server's eventfd.  It then spins until
 * resp == i and records the round trip.  The server is one of:
 *
 *   eventfd    an IOThread with poll-max-ns=0: every message is a kick that
 *              wakes the IOThread from epoll_wait;
 *   polled     the same handler in an IOThread with the adaptive poll window
 *              (--poll-max-ns, default 32768): while the window is open the
 *              loop's poll callback sees req change and no kick is needed;
 *   cacheline  a bare thread spinning on req: the physical floor, one cache
 *              line crossing each way, no event loop and no kicks.
 *
 * The "no lost kick" argument (a Dekker pair): the client stores req, fences,
 * then loads no_notify; the loop stores no_notify = 0 in io_poll_end, issues
 * a full barrier and calls io_poll once more.  Either the client sees 0 and
 * kicks, or the loop's re-check sees the new req.  The kick channel (the
 * eventfd, its handler and poll hooks, the client's fence and kick) is
 * bench-ring.h's, shared with bench-block.
 *
 * Back to back (the default) the eventfd server may not get to sleep at
 * all: if the next kick lands before the IOThread is back in epoll_wait, the
 * wait returns at once and the round trip costs two system calls, not a
 * wakeup.  sleeps_per_msg (the server thread's voluntary context switches
 * per message, from /proc) shows which case was measured; --gap-ns makes the
 * client pause between a response and its next request, as a guest would.
 *
 * Per mode, warm-up messages are sent first (not recorded; they let the
 * window settle), then the server's CPU clock and the AioContext statistics
 * are sampled around the recorded messages.  Percentiles are nearest-rank on
 * the sorted samples.  With --repeat R the modes run R times, alternating,
 * and every statistic is the median over the R runs.
 *
 * Output is a table (default) or one JSON object (--json) with a key per mode
 * run; each holds p50_ns, p99_ns, p999_ns, cpu_ns_per_msg and extra fields.
 *
 * Threads: main creates and destroys the servers (IOThread lifecycle is a
 * main-thread job); a dedicated client thread runs the ping-pong so that the
 * main thread's affinity is left alone.
 */

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "util/aio.h"
#include "util/clock.h"
#include "util/cutils.h"
#include "util/error.h"
#include "util/event-notifier.h"
#include "util/iothread.h"
#include "bench-common.h"
#include "bench-ring.h"

#define CACHELINE BENCH_CACHELINE

#define GAP_NS_MAX 1000000000   /* 1 s */

/* ------------------------------------------------------------------------ */
/* Options                                                                   */

typedef enum {
    MODE_EVENTFD,
    MODE_POLLED,
    MODE_CACHELINE,
    MODE_COUNT,
} BenchMode;

static const char *const mode_names[MODE_COUNT] = {
    [MODE_EVENTFD] = "eventfd",
    [MODE_POLLED] = "polled",
    [MODE_CACHELINE] = "cacheline",
};

typedef struct BenchOpts {
    BenchCommonOpts common;  /* poll_max_ns: for the polled mode */
    int64_t gap_ns;          /* client idle time between messages */
    bool modes[MODE_COUNT];
} BenchOpts;

/* ------------------------------------------------------------------------ */
/* Statistics of one run                                                     */

/*
 * After bench-ring.h's latency and loop statistics (the loop's only for
 * the IOThread modes).  p50_ns, p99_ns, p999_ns and cpu_ns_per_msg every
 * mode must report, with these JSON names; the rest are extras.
 */
typedef enum {
    STAT_CPU_PER_MSG = BENCH_STAT_SHARED,
    STAT_KICKS_PER_MSG,
    STAT_SLEEPS_PER_MSG,     /* the server thread's voluntary switches */
    STAT_HANDLER_WINDOW,     /* the kick handler's window at the end */
    STAT_COUNT,
} StatId;

typedef struct StatInfo {
    const char *json_name;
    bool is_integer;
    bool iothread_only;
} StatInfo;

static const StatInfo stat_info[STAT_COUNT] = {
    [STAT_P50] = { "p50_ns", true, false },
    [STAT_P99] = { "p99_ns", true, false },
    [STAT_P999] = { "p999_ns", true, false },
    [STAT_MEAN] = { "mean_ns", true, false },
    [STAT_MIN] = { "min_ns", true, false },
    [STAT_MAX] = { "max_ns", true, false },
    [STAT_CPU_PER_MSG] = { "cpu_ns_per_msg", true, false },
    [STAT_KICKS_PER_MSG] = { "kicks_per_msg", false, false },
    [STAT_SLEEPS_PER_MSG] = { "sleeps_per_msg", false, false },
    [STAT_POLL_HITS] = { "poll_hits", true, true },
    [STAT_POLL_MISSES] = { "poll_misses", true, true },
    [STAT_WAKEUPS] = { "wakeups", true, true },
    [STAT_DISPATCHES] = { "dispatches", true, true },
    [STAT_POLL_TIME] = { "poll_time_ns", true, true },
    [STAT_BLOCK_TIME] = { "block_time_ns", true, true },
    [STAT_POLL_NS] = { "poll_ns", true, true },
    [STAT_HANDLER_WINDOW] = { "handler_window_ns", true, true },
};

typedef struct RunStats {
    double v[STAT_COUNT];
} RunStats;

static bool mode_uses_iothread(BenchMode mode)
{
    return mode != MODE_CACHELINE;
}

/* ------------------------------------------------------------------------ */
/* Shared state                                                              */

typedef struct PingPong {
    /* Written by the client. */
    _Alignas(CACHELINE) _Atomic uint32_t req;
    /* Written by the server. */
    _Alignas(CACHELINE) _Atomic uint32_t resp;
    /* no_notify (written by the server's poll hooks) and the eventfd. */
    BenchKick kick;
    /* Written by main to stop the cache-line echo thread. */
    _Alignas(CACHELINE) _Atomic bool stop;
    /* Server-private. */
    _Alignas(CACHELINE) uint32_t last_seen;
    _Atomic pid_t echo_tid;      /* the cache-line echo thread, once started */
} PingPong;

/* The sequence numbers of a run (warm-up and recorded messages) fit req's
 * 32 bits, as a ring's index does: they never wrap. */
G_STATIC_ASSERT(2 * (uint64_t)BENCH_COUNT_MAX < UINT32_MAX);

static PingPong *pingpong_new(void)
{
    PingPong *pp = bench_alloc_aligned(CACHELINE, sizeof(*pp));

    atomic_init(&pp->req, 0);
    atomic_init(&pp->resp, 0);
    atomic_init(&pp->stop, false);
    atomic_init(&pp->echo_tid, 0);
    return pp;
}

static void pingpong_free(PingPong *pp)
{
    free(pp);
}

/* ------------------------------------------------------------------------ */
/* Server: the kick handler in an IOThread (see bench-ring.h)                */

/* Echo the newest request, if there is one.  IOThread. */
static void server_process(void *opaque)
{
    PingPong *pp = opaque;
    /* Pairs with the client's release store of req. */
    uint32_t r = atomic_load_explicit(&pp->req, memory_order_acquire);

    if (r == pp->last_seen) {
        return;
    }
    pp->last_seen = r;
    /* Pairs with the client's acquire load of resp. */
    atomic_store_explicit(&pp->resp, r, memory_order_release);
}

/* The kick channel's io_poll sees req move past last_seen. */
static const BenchKickOps server_kick_ops = {
    .process = server_process,
};

/* ------------------------------------------------------------------------ */
/* Server: the bare cache-line echo thread                                   */

static void *echo_thread_fn(void *opaque)
{
    PingPong *pp = opaque;
    uint32_t last = 0;

    atomic_store(&pp->echo_tid, gettid());
    while (!atomic_load_explicit(&pp->stop, memory_order_relaxed)) {
        /* Pairs with the client's release store of req. */
        uint32_t r = atomic_load_explicit(&pp->req, memory_order_acquire);

        if (r != last) {
            last = r;
            /* Pairs with the client's acquire load of resp. */
            atomic_store_explicit(&pp->resp, r, memory_order_release);
        } else {
            cpu_relax();
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Client                                                                    */

typedef struct ClientRun {
    /* Inputs. */
    PingPong *pp;
    const BenchOpts *opts;
    const BenchServerProbe *probe;
    BenchMode mode;
    bool use_kick;
    /* Outputs. */
    uint64_t *samples;       /* opts->common.count round trips, in ns */
    uint64_t kicks;          /* over the recorded messages */
    BenchServerSample start, end;   /* around the recorded messages */
} ClientRun;

/* No answer within BENCH_RESPONSE_TIMEOUT_NS: say what we saw, give up. */
static void G_GNUC_NORETURN client_report_stall(const ClientRun *run,
                                                uint32_t seq)
{
    g_autofree char *loop = NULL;
    AioPollStats st;

    bench_probe_loop_stats(run->probe, &st);
    loop = bench_loop_stats_string(&st);
    fprintf(stderr,
            "bench-aio: %s: no response to message %" PRIu32 " after %lld s "
            "(req=%" PRIu32 " resp=%" PRIu32 " no_notify=%d); "
            "server loop: %s: lost wakeup or stuck loop?\n",
            mode_names[run->mode], seq,
            BENCH_RESPONSE_TIMEOUT_NS / 1000000000LL,
            atomic_load(&run->pp->req), atomic_load(&run->pp->resp),
            atomic_load(&run->pp->kick.no_notify), loop);
    fflush(stderr);
    /* Other threads may be wedged: do not run exit handlers. */
    _exit(EXIT_FAILURE);
}

/* Publish request seq and kick the server if it is not polling. */
static bool client_send(PingPong *pp, uint32_t seq, bool use_kick)
{
    /* Pairs with the server's acquire load of req. */
    atomic_store_explicit(&pp->req, seq, memory_order_release);
    return use_kick && bench_kick_notify(&pp->kick);
}

/* Spin until the server has echoed seq. */
static void client_wait(const ClientRun *run, uint32_t seq, int64_t t0)
{
    unsigned spins = 0;

    /* Pairs with the server's release store of resp. */
    while (atomic_load_explicit(&run->pp->resp, memory_order_acquire) != seq) {
        if (bench_spin_timed_out(&spins, t0)) {
            client_report_stall(run, seq);
        }
    }
}

/* Spin (the client's CPU is its own) until the time "until". */
static void client_idle_until(int64_t until)
{
    while (clock_now_ns() < until) {
        cpu_relax();
    }
}

/*
 * One round trip; returns its duration in ns.  With --gap-ns the client
 * then stays quiet for that long (not counted), like a guest that does
 * something else before its next request.
 */
static uint64_t client_round_trip(ClientRun *run, uint32_t seq, bool *kicked)
{
    int64_t t0 = clock_now_ns();
    int64_t t1;

    *kicked = client_send(run->pp, seq, run->use_kick);
    client_wait(run, seq, t0);
    t1 = clock_now_ns();
    if (run->opts->gap_ns) {
        client_idle_until(t1 + run->opts->gap_ns);
    }
    return t1 - t0;
}

static void *client_thread_fn(void *opaque)
{
    ClientRun *run = opaque;
    uint32_t seq = 0;
    int64_t i;
    bool kicked;

    for (i = 0; i < run->opts->common.warmup; i++) {
        client_round_trip(run, ++seq, &kicked);
    }

    run->start.sleeps = bench_probe_sleeps(run->probe);
    run->start.cpu_ns = bench_probe_cpu_ns(run->probe);
    bench_probe_loop_stats(run->probe, &run->start.stats);
    for (i = 0; i < run->opts->common.count; i++) {
        run->samples[i] = client_round_trip(run, ++seq, &kicked);
        run->kicks += kicked;
    }
    run->end.cpu_ns = bench_probe_cpu_ns(run->probe);
    bench_probe_loop_stats(run->probe, &run->end.stats);
    run->end.sleeps = bench_probe_sleeps(run->probe);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Turning samples into statistics                                           */

static void fill_run_stats(RunStats *rs, ClientRun *run)
{
    double n = (double)run->opts->common.count;

    memset(rs, 0, sizeof(*rs));
    bench_latency_stats(run->samples, run->opts->common.count, rs->v);
    rs->v[STAT_CPU_PER_MSG] = (run->end.cpu_ns - run->start.cpu_ns) / n;
    rs->v[STAT_KICKS_PER_MSG] = run->kicks / n;
    rs->v[STAT_SLEEPS_PER_MSG] = bench_sleeps_per(&run->start, &run->end, n);
    bench_loop_stats_store(&run->start.stats, &run->end.stats, rs->v);
}

/* ------------------------------------------------------------------------ */
/* Running one mode                                                          */

/* Run the client against an already running server; fills rs. */
static bool run_client(PingPong *pp, const BenchOpts *opts, BenchMode mode,
                       const BenchServerProbe *probe, RunStats *rs,
                       Error **errp)
{
    ClientRun run = {
        .pp = pp,
        .opts = opts,
        .probe = probe,
        .mode = mode,
        .use_kick = mode_uses_iothread(mode),
    };
    pthread_t thread;

    run.samples = g_new(uint64_t, opts->common.count);
    if (!bench_start_pinned_thread(&thread, "bench-client",
                                   opts->common.client_cpu, client_thread_fn,
                                   &run, errp)) {
        g_free(run.samples);
        return false;
    }
    pthread_join(thread, NULL);
    fill_run_stats(rs, &run);
    g_free(run.samples);
    return true;
}

static IOThread *create_server_iothread(BenchMode mode, const BenchOpts *opts,
                                        Error **errp)
{
    g_autofree char *optstr = NULL;
    int64_t poll_max_ns = mode == MODE_POLLED ? opts->common.poll_max_ns : 0;

    optstr = g_strdup_printf("iothread,id=bench-%s,poll-max-ns=%" PRId64
                             ",cpu-affinity=%d",
                             mode_names[mode], poll_max_ns,
                             opts->common.server_cpu);
    return iothread_create_from_string(optstr, errp);
}

static bool run_iothread_mode(BenchMode mode, const BenchOpts *opts,
                              RunStats *rs, Error **errp)
{
    PingPong *pp = pingpong_new();
    BenchServerProbe probe = { 0 };
    bool ok = false;

    if (!bench_kick_init(&pp->kick, &pp->req, &pp->last_seen,
                         &server_kick_ops, pp, errp)) {
        goto out_free;
    }
    probe.iot = create_server_iothread(mode, opts, errp);
    if (!probe.iot) {
        goto out_notifier;
    }
    probe.tid = iothread_get_thread_id(probe.iot);
    bench_kick_attach(&pp->kick, iothread_get_aio_context(probe.iot));

    ok = run_client(pp, opts, mode, &probe, rs, errp);
    if (ok) {
        rs->v[STAT_HANDLER_WINDOW] = bench_kick_handler_window(&pp->kick);
    }

    bench_kick_detach(&pp->kick);
    iothread_destroy(probe.iot);
out_notifier:
    bench_kick_cleanup(&pp->kick);
out_free:
    pingpong_free(pp);
    return ok;
}

static pid_t wait_for_echo_tid(PingPong *pp)
{
    pid_t tid;

    while (!(tid = atomic_load(&pp->echo_tid))) {
        sched_yield();
    }
    return tid;
}

static bool run_cacheline_mode(const BenchOpts *opts, RunStats *rs,
                               Error **errp)
{
    PingPong *pp = pingpong_new();
    BenchServerProbe probe = { 0 };
    pthread_t echo;
    bool ok = false;
    int ret;

    if (!bench_start_pinned_thread(&echo, "bench-echo", opts->common.server_cpu,
                                   echo_thread_fn, pp, errp)) {
        goto out_free;
    }
    probe.tid = wait_for_echo_tid(pp);
    ret = pthread_getcpuclockid(echo, &probe.cpu_clock);
    if (ret != 0) {
        error_setg_errno(errp, ret, "cannot read the echo thread's CPU clock");
    } else {
        ok = run_client(pp, opts, MODE_CACHELINE, &probe, rs, errp);
    }
    atomic_store_explicit(&pp->stop, true, memory_order_relaxed);
    pthread_join(echo, NULL);
out_free:
    pingpong_free(pp);
    return ok;
}

static bool run_mode(BenchMode mode, const BenchOpts *opts, RunStats *rs,
                     Error **errp)
{
    if (mode == MODE_CACHELINE) {
        return run_cacheline_mode(opts, rs, errp);
    }
    return run_iothread_mode(mode, opts, rs, errp);
}

/* ------------------------------------------------------------------------ */
/* Output                                                                    */

static void json_add_mode(JsonBuilder *b, BenchMode mode, const RunStats *rs)
{
    int s;

    json_builder_set_member_name(b, mode_names[mode]);
    json_builder_begin_object(b);
    for (s = 0; s < STAT_COUNT; s++) {
        if (stat_info[s].iothread_only && !mode_uses_iothread(mode)) {
            continue;
        }
        bench_json_add_stat(b, stat_info[s].json_name,
                            stat_info[s].is_integer, rs->v[s]);
    }
    json_builder_end_object(b);
}

static void json_add_config(JsonBuilder *b, const BenchOpts *opts)
{
    json_builder_set_member_name(b, "config");
    json_builder_begin_object(b);
    bench_json_add_common(b, &opts->common);
    bench_json_add_int(b, "gap_ns", opts->gap_ns);
    bench_json_add_machine(b);
    json_builder_end_object(b);
}

static void print_json(const BenchOpts *opts, const RunStats *results)
{
    g_autoptr(JsonBuilder) b = json_builder_new();
    int m;

    json_builder_begin_object(b);
    for (m = 0; m < MODE_COUNT; m++) {
        if (opts->modes[m]) {
            json_add_mode(b, m, &results[m]);
        }
    }
    json_add_config(b, opts);
    json_builder_end_object(b);
    bench_json_print(b);
}

static void print_table_header(const BenchOpts *opts)
{
    const BenchCommonOpts *c = &opts->common;
    g_autofree char *model = bench_cpu_model();

    printf("bench-aio: ping-pong of %" PRId64 " messages (%" PRId64
           " warm-up), client CPU %d, server CPU %d, polled poll-max-ns %"
           PRId64 ", gap %" PRId64 " ns, repeat %" PRId64 "%s\n",
           c->count, c->warmup, c->client_cpu, c->server_cpu,
           c->poll_max_ns, opts->gap_ns, c->repeat,
           c->repeat > 1 ? " (medians)" : "");
    printf("machine: %ld CPUs online, %s\n\n", bench_online_cpus(), model);
    printf("%-10s %10s %10s %10s %10s %12s %10s %11s\n", "mode", "p50(ns)",
           "p99(ns)", "p99.9(ns)", "mean(ns)", "cpu/msg(ns)", "kicks/msg",
           "sleeps/msg");
}

static void print_table_row(BenchMode mode, const RunStats *rs)
{
    printf("%-10s %10.0f %10.0f %10.0f %10.0f %12.0f %10.3f %11.3f\n",
           mode_names[mode], rs->v[STAT_P50], rs->v[STAT_P99],
           rs->v[STAT_P999], rs->v[STAT_MEAN], rs->v[STAT_CPU_PER_MSG],
           rs->v[STAT_KICKS_PER_MSG], rs->v[STAT_SLEEPS_PER_MSG]);
}

static void print_loop_details(BenchMode mode, const RunStats *rs, double n)
{
    printf("  %-9s loop: poll hits/msg %.3f, wakeups/msg %.3f, "
           "poll misses %.0f, window %.0f ns (kick handler %.0f ns)\n",
           mode_names[mode], rs->v[STAT_POLL_HITS] / n,
           rs->v[STAT_WAKEUPS] / n, rs->v[STAT_POLL_MISSES],
           rs->v[STAT_POLL_NS], rs->v[STAT_HANDLER_WINDOW]);
}

static void print_ratio(const char *what, double num, double den,
                        const char *goal)
{
    if (den > 0) {
        printf("%s p50: %.2fx (%s)\n", what, num / den, goal);
    }
}

/* Say so when the eventfd mode measured system calls rather than wakeups. */
static void print_eventfd_note(const BenchOpts *opts, const RunStats *results)
{
    double sleeps = results[MODE_EVENTFD].v[STAT_SLEEPS_PER_MSG];

    if (opts->modes[MODE_EVENTFD] && sleeps >= 0 && sleeps < 0.5) {
        printf("  note: the eventfd IOThread slept on only %.1f%% of the "
               "messages (kicks beat it\n"
               "        back to epoll_wait); --gap-ns 5000 measures real "
               "wakeups\n", sleeps * 100);
    }
}

static void print_table(const BenchOpts *opts, const RunStats *results)
{
    int m;

    print_table_header(opts);
    for (m = 0; m < MODE_COUNT; m++) {
        if (opts->modes[m]) {
            print_table_row(m, &results[m]);
        }
    }
    printf("\n");
    for (m = 0; m < MODE_COUNT; m++) {
        if (opts->modes[m] && mode_uses_iothread(m)) {
            print_loop_details(m, &results[m], opts->common.count);
        }
    }
    print_eventfd_note(opts, results);
    printf("\n");
    if (opts->modes[MODE_EVENTFD] && opts->modes[MODE_POLLED]) {
        print_ratio("eventfd/polled  ", results[MODE_EVENTFD].v[STAT_P50],
                    results[MODE_POLLED].v[STAT_P50], "goal: >= 3");
    }
    if (opts->modes[MODE_POLLED] && opts->modes[MODE_CACHELINE]) {
        print_ratio("polled/cacheline", results[MODE_POLLED].v[STAT_P50],
                    results[MODE_CACHELINE].v[STAT_P50], "goal: <= 4");
    }
}

/* ------------------------------------------------------------------------ */
/* Command line                                                              */

/* What --help says, and how it words the common options. */
static const BenchCommonHelp help = {
    .parameter = "- event-loop round-trip micro-benchmark",
    .summary =
        "Ping-pongs messages between two pinned threads through an IOThread\n"
        "woken by eventfd (eventfd), the same with the adaptive poll window\n"
        "(polled), and a bare cache-line echo (cacheline).",
    .items = "messages",
    .unit = "mode",
    .server = "server",
    .polled = "polled mode",
};

static bool parse_command_line(int argc, char **argv, BenchOpts *opts,
                               Error **errp)
{
    g_autofree char *gap_ns = NULL;
    g_autofree char *mode = NULL;
    const GOptionEntry entries[] = {
        { "gap-ns", 0, 0, G_OPTION_ARG_STRING, &gap_ns,
          "Client idle time between a response and the next request "
          "(default 0: back to back)", "N" },
        { "mode", 0, 0, G_OPTION_ARG_STRING, &mode,
          "eventfd, polled, cacheline or all (default all)", "MODE" },
        { NULL }
    };

    return bench_parse_command_line(argc, argv, &help, entries,
        &opts->common, errp) &&
        bench_parse_optional_int("--gap-ns", gap_ns, 0, GAP_NS_MAX,
                                 &opts->gap_ns, errp) &&
        bench_parse_name_set("--mode", "mode", mode, mode_names, MODE_COUNT,
                             opts->modes, errp);
}

/* ------------------------------------------------------------------------ */

static bool run_all(const BenchOpts *opts, RunStats *results, Error **errp)
{
    int64_t repeat = opts->common.repeat, r;
    g_autofree RunStats *runs = g_new0(RunStats, MODE_COUNT * repeat);
    int m;

    for (r = 0; r < repeat; r++) {
        for (m = 0; m < MODE_COUNT; m++) {
            if (opts->modes[m] &&
                !run_mode(m, opts, &runs[m * repeat + r], errp)) {
                error_prepend(errp, "%s: ", mode_names[m]);
                return false;
            }
        }
    }
    for (m = 0; m < MODE_COUNT; m++) {
        if (opts->modes[m]) {
            bench_median_stats(&runs[m * repeat], sizeof(RunStats), repeat,
                               STAT_COUNT, results[m].v);
        }
    }
    return true;
}

int main(int argc, char **argv)
{
    BenchOpts opts = { 0 };
    RunStats results[MODE_COUNT] = { 0 };
    Error *err = NULL;

    bench_common_init(&opts.common, 100000);
    if (!parse_command_line(argc, argv, &opts, &err)) {
        return bench_fail("bench-aio", err, BENCH_EXIT_USAGE);
    }
    if (!run_all(&opts, results, &err)) {
        return bench_fail("bench-aio", err, EXIT_FAILURE);
    }
    if (opts.common.json) {
        print_json(&opts, results);
    } else {
        print_table(&opts, results);
    }
    return EXIT_SUCCESS;
}

/*
 * Helpers shared by the micro-benchmarks in tests/bench.
 *
 * Pinned threads, nearest-rank percentiles and medians, the machine
 * description printed in every report, the options that all benchmarks
 * take (BenchCommonOpts: --count, --warmup, --repeat, --cpus,
 * --poll-max-ns, --json) and the parsing of the command line and of the
 * values in it, the client's timed spin, and the pieces of the JSON
 * reports.  Every function may be called from any thread unless it says
 * otherwise; none keeps state.
 */
#ifndef SPINDLE_TESTS_BENCH_COMMON_H
#define SPINDLE_TESTS_BENCH_COMMON_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "util/clock.h"
#include "util/error.h"

#define BENCH_CACHELINE 64

/* Exit status for bad command-line values. */
#define BENCH_EXIT_USAGE 2

/* No answer from the server for this long means a lost wakeup or a stuck
 * request: the client reports what it saw and gives up. */
#define BENCH_RESPONSE_TIMEOUT_NS (10LL * 1000 * 1000 * 1000)
/* Spins between two looks at the clock while the client waits. */
#define BENCH_SPINS_PER_CLOCK_CHECK 1024

/* Limits of the options every benchmark takes. */
#define BENCH_COUNT_MAX 100000000     /* 800 MB of samples */
#define BENCH_REPEAT_MAX 1000

/*
 * One spin of a client's wait that began at t0 (clock_now_ns()): every
 * BENCH_SPINS_PER_CLOCK_CHECK calls look at the clock.  True once the wait
 * has lasted BENCH_RESPONSE_TIMEOUT_NS.  *spins starts at 0.
 */
static inline bool bench_spin_timed_out(unsigned *spins, int64_t t0)
{
    cpu_relax();
    if (++*spins < BENCH_SPINS_PER_CLOCK_CHECK) {
        return false;
    }
    *spins = 0;
    return clock_now_ns() - t0 > BENCH_RESPONSE_TIMEOUT_NS;
}

/*
 * Start fn(opaque) in a new thread pinned to cpu and named name.  Returns
 * false with errp set if the thread cannot be created.
 */
bool bench_start_pinned_thread(pthread_t *thread, const char *name, int cpu,
                               void *(*fn)(void *), void *opaque,
                               Error **errp);

/* Sort v[0..n) in ascending order. */
void bench_sort_u64(uint64_t *v, size_t n);

/*
 * Nearest-rank percentile of the sorted v[0..n) (n >= 1), given in permille:
 * 500 = p50, 990 = p99, 999 = p99.9.
 */
uint64_t bench_percentile_sorted(const uint64_t *v, size_t n,
                                 unsigned permille);

/* Arithmetic mean of v[0..n) (n >= 1). */
double bench_mean_u64(const uint64_t *v, size_t n);

/* Median of v[0..n) (n >= 1; sorts v): the mean of the middle two if n is
 * even. */
double bench_median_double(double *v, size_t n);

/*
 * The medians over repeats: runs holds nruns records of stride bytes, each
 * starting with nstats doubles (a RunStats); out[s] is the median of
 * statistic s over the records.
 */
void bench_median_stats(const void *runs, size_t stride, size_t nruns,
                        size_t nstats, double *out);

/* The CPU's model name from /proc/cpuinfo, or "unknown".  Caller frees. */
char *bench_cpu_model(void);

/* CPUs online. */
long bench_online_cpus(void);

/*
 * Voluntary context switches of thread tid of this process (how often it
 * really went to sleep), from /proc; -1 if unknown.
 */
int64_t bench_thread_sleeps(pid_t tid);

/*
 * Parse str as an integer in [min, max] (0 <= min) into *out, naming the
 * option name in errors (util/cli-parse.h).  A NULL str (option not given)
 * leaves *out alone and succeeds.
 */
bool bench_parse_optional_int(const char *name, const char *str,
                              int64_t min, int64_t max, int64_t *out,
                              Error **errp);

/*
 * Parse --NAME's value: "all" (or NULL, not given), or a comma-separated
 * list of names[0..n) (what they are: noun, e.g. "mode"), into set[0..n).
 */
bool bench_parse_name_set(const char *name, const char *noun,
                          const char *str, const char *const *names,
                          size_t n, bool *set, Error **errp);

/*
 * Parse the --cpus value "CLIENT,SERVER" (NULL means "0,1"), a CPU list
 * (util/cpu-list.h) of two different CPUs that this process may run on.
 * Errors name --cpus.
 */
bool bench_parse_cpus(const char *str, int *client_cpu, int *server_cpu,
                      Error **errp);

/* ------------------------------------------------------------------------ */
/* The options every benchmark takes                                         */

/*
 * --count, --warmup, --repeat, --cpus, --poll-max-ns and --json, converted
 * and checked.  Each benchmark's BenchOpts holds one as its member common.
 */
typedef struct BenchCommonOpts {
    int64_t count;           /* recorded requests per run */
    int64_t warmup;          /* unrecorded ones before them */
    int64_t repeat;          /* runs of everything, alternating */
    int64_t poll_max_ns;     /* of the configuration that polls */
    int client_cpu;
    int server_cpu;
    bool json;
} BenchCommonOpts;

/* What a benchmark's --help says, and how it words the common options. */
typedef struct BenchCommonHelp {
    const char *parameter;   /* after the usage line: "- what it is" */
    const char *summary;     /* a paragraph under it */
    const char *items;       /* what is counted: "messages" */
    const char *unit;        /* what runs and repeats: "mode" */
    const char *server;      /* the thread that serves: "server" */
    const char *polled;      /* the configuration that polls: "polled mode" */
} BenchCommonHelp;

/*
 * The defaults: count recorded requests, 1000 warm-up ones, one repeat,
 * CPUs 0 and 1, the default poll window, a table.
 */
void bench_common_init(BenchCommonOpts *o, int64_t count);

/*
 * Parse the command line: the common options into *common, the
 * benchmark's own entries (NULL-terminated; they read strings that the
 * caller converts afterwards), then no stray argument.  --help (worded by
 * help) prints the usage and exits.  Main thread.
 */
bool bench_parse_command_line(int argc, char **argv,
                              const BenchCommonHelp *help,
                              const GOptionEntry *entries,
                              BenchCommonOpts *common, Error **errp);

/* Print "PROG: message" for err on stderr, free it, and return status. */
int bench_fail(const char *prog, Error *err, int status);

/* ------------------------------------------------------------------------ */
/* JSON reports                                                              */

/* Print b's root as one pretty-printed JSON object on stdout. */
void bench_json_print(JsonBuilder *b);

/* "name": value, rounded to the nearest integer if is_integer. */
void bench_json_add_stat(JsonBuilder *b, const char *name, bool is_integer,
                         double value);

/* "name": value */
void bench_json_add_int(JsonBuilder *b, const char *name, int64_t value);

/* "count", "warmup", "repeat", "cpus" ([client, server]), "poll_max_ns" */
void bench_json_add_common(JsonBuilder *b, const BenchCommonOpts *o);

/* "nproc" and "cpu_model": the machine, as every report gives it. */
void bench_json_add_machine(JsonBuilder *b);

#endif

/*
 * Helpers shared by the micro-benchmarks in tests/bench.
 *
 * Pinned threads, nearest-rank percentiles and medians, the machine
 * description printed in every report, and the parsing of the options that
 * all benchmarks take (integers in a range, --cpus).  Every function may be
 * called from any thread unless it says otherwise; none keeps state.
 */
#ifndef SPINDLE_TESTS_BENCH_COMMON_H
#define SPINDLE_TESTS_BENCH_COMMON_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/error.h"

#define BENCH_CACHELINE 64

/* Exit status for bad command-line values. */
#define BENCH_EXIT_USAGE 2

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
 * Parse str as an integer in [min, max] into *out, naming the option name
 * in errors.  A NULL str (option not given) leaves *out alone and succeeds.
 */
bool bench_parse_optional_int(const char *name, const char *str,
                              int64_t min, int64_t max, int64_t *out,
                              Error **errp);

/*
 * Parse the --cpus value "CLIENT,SERVER" (NULL means "0,1"): two different
 * CPUs that this process may run on.  Errors name --cpus.
 */
bool bench_parse_cpus(const char *str, int *client_cpu, int *server_cpu,
                      Error **errp);

#endif

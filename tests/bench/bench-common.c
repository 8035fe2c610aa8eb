/*
 * Helpers shared by the micro-benchmarks in tests/bench.
 *
 * Theory of operation: nothing here keeps state.  Percentiles are
 * nearest-rank on sorted samples (no interpolation, so a reported latency
 * is always one that was measured), medians are taken over repeats, and
 * option parsing produces an Error that names the option, which the
 * benchmarks print before exiting with BENCH_EXIT_USAGE.
 */

#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <glib.h>

#include "util/cutils.h"
#include "bench-common.h"

bool bench_start_pinned_thread(pthread_t *thread, const char *name, int cpu,
                               void *(*fn)(void *), void *opaque,
                               Error **errp)
{
    pthread_attr_t attr;
    cpu_set_t set;
    int ret;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_attr_init(&attr);
    ret = pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
    if (ret == 0) {
        ret = pthread_create(thread, &attr, fn, opaque);
    }
    pthread_attr_destroy(&attr);
    if (ret != 0) {
        error_setg_errno(errp, ret, "cannot start thread %s on CPU %d",
                         name, cpu);
        return false;
    }
    pthread_setname_np(*thread, name);
    return true;
}

/* ------------------------------------------------------------------------ */
/* Statistics                                                                */

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

void bench_sort_u64(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof(v[0]), compare_u64);
}

uint64_t bench_percentile_sorted(const uint64_t *v, size_t n,
                                 unsigned permille)
{
    size_t rank = ((uint64_t)permille * n + 999) / 1000;

    if (rank == 0) {
        rank = 1;
    }
    return v[rank - 1];
}

double bench_mean_u64(const uint64_t *v, size_t n)
{
    double sum = 0;
    size_t i;

    for (i = 0; i < n; i++) {
        sum += (double)v[i];
    }
    return sum / (double)n;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

double bench_median_double(double *v, size_t n)
{
    qsort(v, n, sizeof(v[0]), compare_double);
    if (n % 2) {
        return v[n / 2];
    }
    return (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ------------------------------------------------------------------------ */
/* Machine description                                                       */

char *bench_cpu_model(void)
{
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;
    char **l;

    if (!g_file_get_contents("/proc/cpuinfo", &text, NULL, NULL)) {
        return g_strdup("unknown");
    }
    lines = g_strsplit(text, "\n", -1);
    for (l = lines; *l; l++) {
        const char *colon = strchr(*l, ':');

        if (g_str_has_prefix(*l, "model name") && colon) {
            return g_strstrip(g_strdup(colon + 1));
        }
    }
    return g_strdup("unknown");
}

long bench_online_cpus(void)
{
    return sysconf(_SC_NPROCESSORS_ONLN);
}

int64_t bench_thread_sleeps(pid_t tid)
{
    g_autofree char *path = NULL;
    g_autofree char *text = NULL;
    const char *line;

    path = g_strdup_printf("/proc/self/task/%d/status", (int)tid);
    if (!g_file_get_contents(path, &text, NULL, NULL)) {
        return -1;
    }
    line = strstr(text, "\nvoluntary_ctxt_switches:");
    if (!line) {
        return -1;
    }
    return g_ascii_strtoll(strchr(line, ':') + 1, NULL, 10);
}

/* ------------------------------------------------------------------------ */
/* Options                                                                   */

bool bench_parse_optional_int(const char *name, const char *str,
                              int64_t min, int64_t max, int64_t *out,
                              Error **errp)
{
    if (!str) {
        return true;         /* keep the default */
    }
    return parse_int64_in_range(name, str, min, max, out, errp);
}

static bool cpu_is_usable(int64_t cpu)
{
    cpu_set_t set;

    if (cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof(set), &set) != 0) {
        return false;
    }
    return CPU_ISSET(cpu, &set);
}

bool bench_parse_cpus(const char *str, int *client_cpu, int *server_cpu,
                      Error **errp)
{
    g_auto(GStrv) parts = NULL;
    int64_t a, b;

    if (!str) {
        str = "0,1";
    }
    parts = g_strsplit(str, ",", -1);
    if (g_strv_length(parts) != 2) {
        error_setg(errp, "--cpus: expected two CPU numbers 'CLIENT,SERVER' "
                   "(e.g. 0,1), got '%s'", str);
        return false;
    }
    if (!parse_int64_in_range("--cpus", parts[0], 0, INT_MAX, &a,
                              errp) ||
        !parse_int64_in_range("--cpus", parts[1], 0, INT_MAX, &b,
                              errp)) {
        return false;
    }
    if (a == b) {
        error_setg(errp, "--cpus: the client and server CPUs must differ "
                   "(both threads spin), got %" PRId64 " twice", a);
        return false;
    }
    if (!cpu_is_usable(a) || !cpu_is_usable(b)) {
        error_setg(errp, "--cpus: CPU %" PRId64 " does not exist or is not "
                   "available to this process (%ld CPUs online)",
                   cpu_is_usable(a) ? b : a, bench_online_cpus());
        return false;
    }
    *client_cpu = a;
    *server_cpu = b;
    return true;
}

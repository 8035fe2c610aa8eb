/*
 * Helpers shared by the micro-benchmarks in tests/bench.
 *
 * Theory of operation: nothing here keeps state.  Percentiles are
 * nearest-rank on sorted samples (no interpolation, so a reported latency
 * is always one that was measured), medians are taken over repeats, and
 * option parsing (util/cli-parse.h and util/cpu-list.h underneath)
 * produces an Error that names the option, which the benchmarks print
 * with bench_fail() before exiting with BENCH_EXIT_USAGE.
 */

#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <glib.h>

#include "util/cli-parse.h"
#include "util/cpu-list.h"
#include "util/poll-policy.h"
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

void bench_median_stats(const void *runs, size_t stride, size_t nruns,
                        size_t nstats, double *out)
{
    g_autofree double *col = g_new(double, nruns);
    size_t r, s;

    for (s = 0; s < nstats; s++) {
        for (r = 0; r < nruns; r++) {
            const double *v = (const void *)((const char *)runs + r * stride);

            col[r] = v[s];
        }
        out[s] = bench_median_double(col, nruns);
    }
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
    uint64_t v;

    if (!str) {
        return true;         /* keep the default */
    }
    g_assert(min >= 0);
    if (!cli_parse_uint(name, str, min, max, &v, errp)) {
        return false;
    }
    *out = v;
    return true;
}

bool bench_parse_cpus(const char *str, int *client_cpu, int *server_cpu,
                      Error **errp)
{
    g_autofree int *cpus = NULL;
    unsigned n;

    if (!str) {
        str = "0,1";
    }
    cpus = cpu_list_parse("--cpus", str, &n, errp);
    if (!cpus) {
        return false;
    }
    if (n != 2) {
        error_setg(errp, "--cpus: expected two CPU numbers 'CLIENT,SERVER' "
                   "(e.g. 0,1), got '%s'", str);
        return false;
    }
    if (cpus[0] == cpus[1]) {
        error_setg(errp, "--cpus: the client and server CPUs must differ "
                   "(both threads spin), got %d twice", cpus[0]);
        return false;
    }
    if (!cpu_list_check_allowed("--cpus", cpus, n, errp)) {
        return false;
    }
    *client_cpu = cpus[0];
    *server_cpu = cpus[1];
    return true;
}

bool bench_parse_name_set(const char *name, const char *noun,
                          const char *str, const char *const *names,
                          size_t n, bool *set, Error **errp)
{
    g_autoptr(GString) expected = g_string_new(NULL);
    g_auto(GStrv) words = NULL;
    size_t i;

    for (i = 0; i < n; i++) {
        g_string_append_printf(expected, "%s, ", names[i]);
    }
    g_string_truncate(expected, expected->len - 2);
    g_string_append(expected, " or all");
    if (!str || !strcmp(str, "all")) {
        for (i = 0; i < n; i++) {
            set[i] = true;
        }
        return true;
    }
    if (!*str) {
        error_setg(errp, "%s: expected %s, got an empty string", name,
                   expected->str);
        return false;
    }
    words = g_strsplit(str, ",", -1);
    for (char **w = words; *w; w++) {
        int k;

        if (!cli_parse_choice(name, *w, names, n, &k, NULL)) {
            error_setg(errp, "%s: unknown %s '%s'; expected %s (or a "
                       "comma-separated list of %ss)", name, noun, *w,
                       expected->str, noun);
            return false;
        }
        set[k] = true;
    }
    return true;
}

void bench_common_init(BenchCommonOpts *o, int64_t count)
{
    *o = (BenchCommonOpts) {
        .count = count,
        .warmup = 1000,
        .repeat = 1,
        .poll_max_ns = AIO_POLL_MAX_NS_DEFAULT,
        .client_cpu = 0,
        .server_cpu = 1,
    };
}

/* The common options, as GOption read them. */
typedef struct BenchCommonRaw {
    char *count;
    char *warmup;
    char *repeat;
    char *cpus;
    char *poll_max_ns;
    gboolean json;
} BenchCommonRaw;

static bool bench_common_convert(const BenchCommonRaw *raw,
                                 BenchCommonOpts *o, Error **errp)
{
    o->json = raw->json;
    return bench_parse_optional_int("--count", raw->count, 1,
                                    BENCH_COUNT_MAX, &o->count, errp) &&
           bench_parse_optional_int("--warmup", raw->warmup, 0,
                                    BENCH_COUNT_MAX, &o->warmup, errp) &&
           bench_parse_optional_int("--repeat", raw->repeat, 1,
                                    BENCH_REPEAT_MAX, &o->repeat, errp) &&
           bench_parse_optional_int("--poll-max-ns", raw->poll_max_ns, 1,
                                    INT64_MAX, &o->poll_max_ns, errp) &&
           bench_parse_cpus(raw->cpus, &o->client_cpu, &o->server_cpu,
                            errp);
}

bool bench_parse_command_line(int argc, char **argv,
                              const BenchCommonHelp *help,
                              const GOptionEntry *entries,
                              BenchCommonOpts *common, Error **errp)
{
    BenchCommonRaw raw = { 0 };
    g_autofree char *count = g_strdup_printf("Recorded %s per %s (default "
        "%" PRId64 ")", help->items, help->unit, common->count);
    g_autofree char *warmup = g_strdup_printf("Unrecorded warm-up %s per %s "
        "(default %" PRId64 ")", help->items, help->unit, common->warmup);
    g_autofree char *repeat = g_strdup_printf("Run the %ss R times "
        "alternating, report medians (default 1)", help->unit);
    g_autofree char *cpus = g_strdup_printf("Client and %s CPUs (default "
        "0,1)", help->server);
    g_autofree char *poll = g_strdup_printf("poll-max-ns of the %s (default "
        "%d)", help->polled, AIO_POLL_MAX_NS_DEFAULT);
    const GOptionEntry common_entries[] = {
        { "count", 'n', 0, G_OPTION_ARG_STRING, &raw.count, count, "N" },
        { "warmup", 0, 0, G_OPTION_ARG_STRING, &raw.warmup, warmup, "N" },
        { "repeat", 0, 0, G_OPTION_ARG_STRING, &raw.repeat, repeat, "R" },
        { "cpus", 0, 0, G_OPTION_ARG_STRING, &raw.cpus, cpus, "A,B" },
        { "poll-max-ns", 0, 0, G_OPTION_ARG_STRING, &raw.poll_max_ns, poll,
          "N" },
        { "json", 0, 0, G_OPTION_ARG_NONE, &raw.json,
          "Print one JSON object instead of a table", NULL },
        { NULL }
    };
    g_autoptr(GOptionContext) ctx = g_option_context_new(help->parameter);
    bool ok;

    g_option_context_set_summary(ctx, help->summary);
    g_option_context_add_main_entries(ctx, common_entries, NULL);
    g_option_context_add_main_entries(ctx, entries, NULL);
    ok = cli_parse_argv(ctx, argc, argv, errp) &&
         bench_common_convert(&raw, common, errp);
    g_free(raw.count);
    g_free(raw.warmup);
    g_free(raw.repeat);
    g_free(raw.cpus);
    g_free(raw.poll_max_ns);
    return ok;
}

int bench_fail(const char *prog, Error *err, int status)
{
    fprintf(stderr, "%s: %s\n", prog, error_get_pretty(err));
    error_free(err);
    return status;
}

/* ------------------------------------------------------------------------ */
/* JSON reports                                                              */

void bench_json_print(JsonBuilder *b)
{
    g_autoptr(JsonGenerator) gen = json_generator_new();
    g_autoptr(JsonNode) root = json_builder_get_root(b);
    g_autofree char *text = NULL;

    json_generator_set_root(gen, root);
    json_generator_set_pretty(gen, TRUE);
    text = json_generator_to_data(gen, NULL);
    printf("%s\n", text);
}

void bench_json_add_stat(JsonBuilder *b, const char *name, bool is_integer,
                         double value)
{
    json_builder_set_member_name(b, name);
    if (is_integer) {
        json_builder_add_int_value(b, (gint64)(value + (value < 0 ? -0.5 :
                                                                0.5)));
    } else {
        json_builder_add_double_value(b, value);
    }
}

void bench_json_add_int(JsonBuilder *b, const char *name, int64_t value)
{
    json_builder_set_member_name(b, name);
    json_builder_add_int_value(b, value);
}

void bench_json_add_common(JsonBuilder *b, const BenchCommonOpts *o)
{
    bench_json_add_int(b, "count", o->count);
    bench_json_add_int(b, "warmup", o->warmup);
    bench_json_add_int(b, "repeat", o->repeat);
    json_builder_set_member_name(b, "cpus");
    json_builder_begin_array(b);
    json_builder_add_int_value(b, o->client_cpu);
    json_builder_add_int_value(b, o->server_cpu);
    json_builder_end_array(b);
    bench_json_add_int(b, "poll_max_ns", o->poll_max_ns);
}

void bench_json_add_machine(JsonBuilder *b)
{
    g_autofree char *model = bench_cpu_model();

    bench_json_add_int(b, "nproc", bench_online_cpus());
    json_builder_set_member_name(b, "cpu_model");
    json_builder_add_string_value(b, model);
}

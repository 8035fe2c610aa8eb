/*
 * spindle-stat: a live view of a running spindle, like iostat -x
 * (docs/stat.md).
 *
 * It connects to the daemon's QMP monitor, takes a first sample of the
 * counters (stat-report.h), and then, every interval, takes another and
 * prints the rates between the last two: as a table, or with --json as
 * one JSON object per line.  The samples are taken on a fixed schedule
 * (the first sample's time + k * interval), so a slow query does not
 * make the intervals drift; each report still divides by the time actually measured between
 * its samples.
 *
 * Exit status: 0 after --count reports (or on SIGINT/SIGTERM), 1 when the
 * daemon goes away or fails a query after the start, 2 for a bad command
 * line or a socket that is not there or not a QMP monitor.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "stat-qmp.h"
#include "stat-report.h"
#include "util/cli-parse.h"

#define EXIT_GONE       1
#define EXIT_USAGE      2
#define INTERVAL_MIN_S  0.1
#define INTERVAL_MAX_S  86400.0

typedef struct StatOpts {
    char *socket;
    double interval_s;
    uint64_t count;             /* 0: until stopped */
    gboolean json;
} StatOpts;

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
    stop_requested = 1;
}

static bool parse_interval(const char *name, const char *str, double *out,
                           Error **errp)
{
    double v;

    if (!cli_parse_seconds(name, str, INTERVAL_MAX_S, &v, errp)) {
        return false;
    }
    if (v < INTERVAL_MIN_S) {
        error_setg(errp, "%s: expected at least %g seconds, got '%s'", name,
                   INTERVAL_MIN_S, str);
        return false;
    }
    *out = v;
    return true;
}

static bool parse_command_line(int argc, char **argv, StatOpts *o,
                               Error **errp)
{
    g_autofree char *interval = NULL, *count = NULL;
    GOptionEntry entries[] = {
        { "interval", 'i', 0, G_OPTION_ARG_STRING, &interval,
          "Seconds between reports (default 1; also the INTERVAL argument)",
          "SECONDS" },
        { "count", 'c', 0, G_OPTION_ARG_STRING, &count,
          "Print N reports, then exit (default: until interrupted)", "N" },
        { "json", 'j', 0, G_OPTION_ARG_NONE, &o->json,
          "One JSON object per report and line, for scripts", NULL },
        { NULL },
    };
    g_autoptr(GOptionContext) ctx =
        g_option_context_new("SOCKET [INTERVAL] - live view of spindle");
    bool ok;

    g_option_context_add_main_entries(ctx, entries, NULL);
    g_option_context_set_description(ctx,
        "SOCKET is the path of spindle's QMP monitor (--chardev socket,...,"
        "path=SOCKET\n--monitor ...).  Every interval, per IOThread: its "
        "poll window, poll hit rate,\nwake-ups/s and CPU %; per export and "
        "queue: IOPS, MB/s, kicks and interrupts\nper I/O.  Exit status: 0 "
        "done, 1 the daemon went away, 2 bad usage or no monitor\nat "
        "SOCKET.  See docs/stat.md or spindle-stat(1).");
    if (!g_option_context_parse(ctx, &argc, &argv, errp)) {
        return false;
    }
    if (argc < 2) {
        error_setg(errp, "missing SOCKET (the QMP monitor's path)");
        return false;
    }
    if (argc > 3) {
        error_setg(errp, "unexpected argument '%s'", argv[3]);
        return false;
    }
    if (argc == 3 && interval) {
        error_setg(errp, "INTERVAL given twice: '%s' and --interval %s",
                   argv[2], interval);
        return false;
    }
    o->socket = g_strdup(argv[1]);
    o->interval_s = 1;
    ok = true;
    if (argc == 3) {
        ok = parse_interval("INTERVAL", argv[2], &o->interval_s, errp);
    } else if (interval) {
        ok = parse_interval("--interval", interval, &o->interval_s, errp);
    }
    return ok && (!count || cli_parse_uint("--count", count, 1, UINT32_MAX,
                                           &o->count, errp));
}

/* Sleep until deadline_us (g_get_monotonic_time()'s clock, which is
 * CLOCK_MONOTONIC), or less if a signal comes: g_usleep() would sleep on
 * through SIGINT. */
static void sleep_until(int64_t deadline_us)
{
    struct timespec ts = {
        .tv_sec = deadline_us / G_USEC_PER_SEC,
        .tv_nsec = deadline_us % G_USEC_PER_SEC * 1000,
    };

    if (!stop_requested) {
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    }
}

static void print_report(const StatOpts *o, JsonNode *report)
{
    if (o->json) {
        g_autofree char *text = json_to_string(report, FALSE);

        printf("%s\n", text);
    } else {
        stat_report_print_table(report, stdout);
    }
    fflush(stdout);
}

static int run(const StatOpts *o, StatQmp *q)
{
    StatSample prev = { 0 }, cur = { 0 };
    int64_t start;
    Error *err = NULL;
    uint64_t n;
    int ret = EXIT_SUCCESS;

    if (!stat_sample_take(q, &prev, &err)) {
        goto gone;
    }
    start = prev.mono_ns / 1000;
    for (n = 1; !o->count || n <= o->count; n++) {
        g_autoptr(JsonNode) report = NULL;

        sleep_until(start + (int64_t)(n * o->interval_s * 1e6));
        if (stop_requested) {
            break;
        }
        if (!stat_sample_take(q, &cur, &err)) {
            goto gone;
        }
        report = stat_report_build(&prev, &cur);
        print_report(o, report);
        stat_sample_clear(&prev);
        prev = cur;
        memset(&cur, 0, sizeof(cur));
    }
    goto out;

gone:
    fprintf(stderr, "spindle-stat: %s: the daemon went away: %s\n",
            o->socket, err->message);
    error_free(err);
    ret = EXIT_GONE;
out:
    stat_sample_clear(&prev);
    stat_sample_clear(&cur);
    return ret;
}

int main(int argc, char **argv)
{
    StatOpts o = { 0 };
    struct sigaction sa = { .sa_handler = on_stop_signal };
    Error *err = NULL;
    StatQmp *q;
    int ret;

    if (!parse_command_line(argc, argv, &o, &err)) {
        fprintf(stderr, "spindle-stat: %s\n", err->message);
        error_free(err);
        g_free(o.socket);
        return EXIT_USAGE;
    }
    q = stat_qmp_connect(o.socket, &err);
    if (!q) {
        fprintf(stderr, "spindle-stat: %s\n", err->message);
        error_free(err);
        g_free(o.socket);
        return EXIT_USAGE;
    }
    /* No SA_RESTART: a signal cuts the sleep short and we stop cleanly. */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    ret = run(&o, q);
    stat_qmp_close(q);
    g_free(o.socket);
    return ret;
}

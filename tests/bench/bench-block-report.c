/*
 * bench-block's report: the tables (default) and the JSON object (--json).
 *
 * Theory of operation: bench-block.c runs every cell and leaves the medians
 * over the repeats in each Cell's result; this file only formats them.  The
 * table has one row per cell (latency, IOPS, CPU, kicks, sleeps, polled
 * completions), then one per cell for the IOThread's loop, then the QD1
 * p50 ratio between poll-max-ns=0 and the adaptive window per engine.  The
 * JSON object has "config" (the options, the test file, skipped engines,
 * the machine) and "results" (one object per cell, every StatId under its
 * stat_info name; integers rounded to nearest).
 */

#include <inttypes.h>
#include <stdio.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "bench-block.h"
#include "bench-common.h"

/* The cell for engine e, queue depth qd and poll mode p, if it ran. */
static const Cell *bench_find_cell(const Bench *b, EngineId e, int64_t qd,
                                   PollMode p)
{
    size_t i;

    for (i = 0; i < b->ncells; i++) {
        const Cell *c = &b->cells[i];

        if (c->engine == e && c->qd == qd && c->poll == p &&
            !b->skipped[e]) {
            return c;
        }
    }
    return NULL;
}

static void json_add_cell(JsonBuilder *jb, const Bench *b, const Cell *c)
{
    int s;

    json_builder_begin_object(jb);
    json_builder_set_member_name(jb, "engine");
    json_builder_add_string_value(jb, engine_names[c->engine]);
    json_builder_set_member_name(jb, "driver");
    json_builder_add_string_value(jb, engine_is_file(c->engine) ? "file" :
                                  "null-co");
    json_builder_set_member_name(jb, "direct");
    json_builder_add_boolean_value(jb, c->direct);
    bench_json_add_int(jb, "qd", c->qd);
    json_builder_set_member_name(jb, "poll");
    json_builder_add_string_value(jb, poll_names[c->poll]);
    bench_json_add_int(jb, "poll_max_ns", c->poll == POLL_ADAPTIVE ?
                       b->opts->common.poll_max_ns : 0);
    bench_json_add_int(jb, "count", b->opts->common.count);
    json_builder_set_member_name(jb, "engine_stats");
    json_builder_add_boolean_value(jb, engine_is_file(c->engine));
    for (s = 0; s < STAT_COUNT; s++) {
        bench_json_add_stat(jb, stat_info[s].json_name,
                            stat_info[s].is_integer, c->result.v[s]);
    }
    json_builder_end_object(jb);
}

static void json_add_file(JsonBuilder *jb, const BenchTestFile *tf)
{
    json_builder_set_member_name(jb, "file");
    if (!tf->path) {
        json_builder_add_null_value(jb);
        return;
    }
    json_builder_begin_object(jb);
    json_builder_set_member_name(jb, "dir");
    json_builder_add_string_value(jb, tf->dir);
    json_builder_set_member_name(jb, "fs");
    json_builder_add_string_value(jb, tf->fs);
    json_builder_set_member_name(jb, "direct");
    json_builder_add_boolean_value(jb, tf->direct);
    json_builder_set_member_name(jb, "note");
    if (tf->note) {
        json_builder_add_string_value(jb, tf->note);
    } else {
        json_builder_add_null_value(jb);
    }
    json_builder_end_object(jb);
}

static void json_add_config(JsonBuilder *jb, const Bench *b)
{
    const BenchOpts *opts = b->opts;
    int i;

    json_builder_set_member_name(jb, "config");
    json_builder_begin_object(jb);
    bench_json_add_common(jb, &opts->common);
    bench_json_add_int(jb, "block_size", BLOCK_SIZE);
    bench_json_add_int(jb, "file_size", opts->file_size);
    bench_json_add_int(jb, "null_latency_ns", opts->null_latency_ns);
    json_builder_set_member_name(jb, "direct_mode");
    json_builder_add_string_value(jb, bench_direct_mode_names[opts->direct]);
    json_builder_set_member_name(jb, "qd");
    json_builder_begin_array(jb);
    for (i = 0; i < opts->nqd; i++) {
        json_builder_add_int_value(jb, opts->qds[i]);
    }
    json_builder_end_array(jb);
    json_builder_set_member_name(jb, "engines");
    json_builder_begin_array(jb);
    for (i = 0; i < ENGINE_COUNT; i++) {
        if (opts->engines[i]) {
            json_builder_add_string_value(jb, engine_names[i]);
        }
    }
    json_builder_end_array(jb);
    json_builder_set_member_name(jb, "skipped");
    json_builder_begin_array(jb);
    for (i = 0; i < ENGINE_COUNT; i++) {
        if (opts->engines[i] && b->skipped[i]) {
            json_builder_begin_object(jb);
            json_builder_set_member_name(jb, "engine");
            json_builder_add_string_value(jb, engine_names[i]);
            json_builder_set_member_name(jb, "reason");
            json_builder_add_string_value(jb, b->skipped[i]);
            json_builder_end_object(jb);
        }
    }
    json_builder_end_array(jb);
    json_add_file(jb, &b->file);
    bench_json_add_machine(jb);
    json_builder_end_object(jb);
}

void bench_block_print_json(const Bench *b)
{
    g_autoptr(JsonBuilder) jb = json_builder_new();
    size_t i;

    json_builder_begin_object(jb);
    json_add_config(jb, b);
    json_builder_set_member_name(jb, "results");
    json_builder_begin_array(jb);
    for (i = 0; i < b->ncells; i++) {
        if (!b->skipped[b->cells[i].engine]) {
            json_add_cell(jb, b, &b->cells[i]);
        }
    }
    json_builder_end_array(jb);
    json_builder_end_object(jb);
    bench_json_print(jb);
}

static void print_table_header(const Bench *b)
{
    const BenchOpts *opts = b->opts;
    const BenchCommonOpts *c = &opts->common;
    g_autofree char *model = bench_cpu_model();
    int e;

    printf("bench-block: 4 KiB random reads, %" PRId64 " per cell (%" PRId64
           " warm-up), client CPU %d, IOThread CPU %d, adaptive poll-max-ns %"
           PRId64 ", repeat %" PRId64 "%s\n",
           c->count, c->warmup, c->client_cpu, c->server_cpu,
           c->poll_max_ns, c->repeat, c->repeat > 1 ? " (medians)" : "");
    printf("machine: %ld CPUs online, %s\n", bench_online_cpus(), model);
    if (opts->engines[ENGINE_NULL_CO] && !b->skipped[ENGINE_NULL_CO]) {
        printf("null-co: latency-ns=%" PRId64 ", size %" PRId64 " MiB\n",
               opts->null_latency_ns, opts->file_size >> 20);
    }
    if (b->file.path && bench_has_file_engine(b)) {
        printf("file: %" PRId64 " MiB test file in %s (%s), cache.direct=%s\n",
               opts->file_size >> 20, b->file.dir, b->file.fs,
               b->file.direct ? "on (O_DIRECT)" : "off");
        if (b->file.note) {
            printf("  note: %s\n", b->file.note);
        }
    }
    for (e = 0; e < ENGINE_COUNT; e++) {
        if (opts->engines[e] && b->skipped[e]) {
            printf("skipped %s: %s\n", engine_names[e], b->skipped[e]);
        }
    }
    printf("\n%-9s %6s %4s %-8s %9s %9s %10s %10s %11s %9s %9s %8s\n",
           "engine", "direct", "qd", "poll", "p50(ns)", "p99(ns)", "iops",
           "cpu/io(ns)", "all-cpu/io", "kicks/io", "sleeps/io", "polled");
}

static void print_table_row(const Cell *c)
{
    const RunStats *rs = &c->result;
    char polled[16];

    if (engine_is_file(c->engine)) {
        snprintf(polled, sizeof(polled), "%.1f%%",
                 rs->v[STAT_POLLED_FRACTION] * 100);
    } else {
        snprintf(polled, sizeof(polled), "-");
    }
    printf("%-9s %6s %4" PRId64 " %-8s %9.0f %9.0f %10.0f %10.0f %11.0f "
           "%9.3f %9.3f %8s\n",
           engine_names[c->engine],
           engine_is_file(c->engine) ? (c->direct ? "on" : "off") : "-",
           c->qd, poll_names[c->poll], rs->v[STAT_P50], rs->v[STAT_P99],
           rs->v[STAT_IOPS], rs->v[STAT_CPU_PER_IO],
           rs->v[STAT_ALL_CPU_PER_IO], rs->v[STAT_KICKS_PER_IO],
           rs->v[STAT_SLEEPS_PER_IO], polled);
}

static void print_loop_row(const Bench *b, const Cell *c)
{
    const RunStats *rs = &c->result;
    double n = (double)b->opts->common.count;

    printf("%-9s %4" PRId64 " %-8s %12.3f %11.3f %11.0f %10.0f %11.0f %14.3f\n",
           engine_names[c->engine], c->qd, poll_names[c->poll],
           rs->v[STAT_POLL_HITS] / n, rs->v[STAT_WAKEUPS] / n,
           rs->v[STAT_POLL_MISSES], rs->v[STAT_POLL_NS],
           rs->v[STAT_KICK_WINDOW], rs->v[STAT_SUBMISSIONS] / n);
}

static void print_ratios(const Bench *b)
{
    int e;

    printf("QD1 p50 ratio, poll-max-ns=0 / adaptive (> 1: polling is "
           "faster):\n");
    for (e = 0; e < ENGINE_COUNT; e++) {
        const Cell *off = bench_find_cell(b, e, 1, POLL_OFF);
        const Cell *on = bench_find_cell(b, e, 1, POLL_ADAPTIVE);

        if (off && on && on->result.v[STAT_P50] > 0) {
            printf("  %-9s %6.2fx  (%.0f / %.0f ns)\n", engine_names[e],
                   off->result.v[STAT_P50] / on->result.v[STAT_P50],
                   off->result.v[STAT_P50], on->result.v[STAT_P50]);
        }
    }
}

void bench_block_print_table(const Bench *b)
{
    size_t i;

    print_table_header(b);
    for (i = 0; i < b->ncells; i++) {
        if (!b->skipped[b->cells[i].engine]) {
            print_table_row(&b->cells[i]);
        }
    }
    printf("\n%-9s %4s %-8s %12s %11s %11s %10s %11s %14s\n", "loop", "qd",
           "poll", "poll-hits/io", "wakeups/io", "poll-misses", "window",
           "kick-window", "submissions/io");
    for (i = 0; i < b->ncells; i++) {
        if (!b->skipped[b->cells[i].engine]) {
            print_loop_row(b, &b->cells[i]);
        }
    }
    printf("\n");
    print_ratios(b);
}

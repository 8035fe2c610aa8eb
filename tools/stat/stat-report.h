/*
 * spindle-stat: samples of the daemon's counters, and the report of one
 * interval computed from two of them (docs/stat.md describes the fields).
 *
 * One thread (the tool's only one).
 */
#ifndef SPINDLE_STAT_REPORT_H
#define SPINDLE_STAT_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "stat-qmp.h"

/* What the three queries returned, and when (the middle of the three). */
typedef struct StatSample {
    int64_t mono_ns;            /* CLOCK_MONOTONIC */
    int64_t wall_us;            /* g_get_real_time() */
    JsonNode *iothreads;        /* query-iothreads */
    JsonNode *exports;          /* query-block-exports */
    JsonNode *blockstats;       /* query-blockstats */
} StatSample;

/*
 * Fill s from the monitor q (s must be empty: zeroed or cleared).  False
 * with errp set when a query failed; s is then empty.
 */
bool stat_sample_take(StatQmp *q, StatSample *s, Error **errp);

/* Free what s holds and zero it. */
void stat_sample_clear(StatSample *s);

/*
 * The report of the interval from prev to cur: a JSON object, owned by
 * the caller (json_node_unref()).  IOThreads and exports that are not in
 * both samples are left out (an export added meanwhile shows up in the
 * next report); counters that went backwards count as 0.
 */
JsonNode *stat_report_build(const StatSample *prev, const StatSample *cur);

/* Print report as iostat -x prints: a time line, then an aligned table
 * for the IOThreads and one for the exports and their queues. */
void stat_report_print_table(JsonNode *report, FILE *out);

#endif

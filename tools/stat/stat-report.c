/*
 * spindle-stat: from two samples to one interval's report, and the table.
 *
 * A sample is what query-iothreads, query-block-exports and
 * query-blockstats return, kept as JSON.  Every figure is a delta of a
 * counter between the two samples over the time between them, so the
 * tool needs nothing the monitor does not already show:
 *
 *   IOThread (query-iothreads, "spindle-poll")
 *     window_ns        the thread's window now (not a delta)
 *     poll_hit_pct     of the events its handlers had, the share polling
 *                      found (sum of handlers' "poll-hits" over their
 *                      "events")
 *     wakeups_per_s    "wakeups"
 *     cpu_pct          "cpu-ns" over the wall-clock time
 *   export (query-block-exports "spindle-queues", query-blockstats)
 *     iops             requests taken from its rings, all queues
 *     read_iops, write_iops, read_mbps, write_mbps
 *                      the blockstats entries of the export (one per LUN
 *                      for SCSI), summed; MB is 10^6 bytes
 *     kicks_per_io, interrupts_per_io
 *   queue: iops, kicks_per_io, interrupts_per_io, from its own counters
 *     (blockstats count per export, so a queue has no MB/s)
 *
 * A ratio per I/O or per event with no I/O or event in the interval is
 * null in JSON and "-" in the table.  The report is built as JSON first;
 * the table is printed from that same object, so both always agree.
 */
#include <inttypes.h>
#include <string.h>
#include <time.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "stat-report.h"

static const char *const queries[] = {
    "query-iothreads", "query-block-exports", "query-blockstats",
};

void stat_sample_clear(StatSample *s)
{
    JsonNode **nodes[] = { &s->iothreads, &s->exports, &s->blockstats };
    size_t i;

    for (i = 0; i < G_N_ELEMENTS(nodes); i++) {
        g_clear_pointer(nodes[i], json_node_unref);
    }
    memset(s, 0, sizeof(*s));
}

bool stat_sample_take(StatQmp *q, StatSample *s, Error **errp)
{
    JsonNode **nodes[] = { &s->iothreads, &s->exports, &s->blockstats };
    int64_t start = g_get_monotonic_time();
    size_t i;

    G_STATIC_ASSERT(G_N_ELEMENTS(nodes) == G_N_ELEMENTS(queries));
    for (i = 0; i < G_N_ELEMENTS(queries); i++) {
        *nodes[i] = stat_qmp_execute(q, queries[i], errp);
        if (!*nodes[i] || !JSON_NODE_HOLDS_ARRAY(*nodes[i])) {
            if (*nodes[i]) {
                error_setg(errp, "%s did not return a list", queries[i]);
            }
            stat_sample_clear(s);
            return false;
        }
    }
    s->mono_ns = (start + g_get_monotonic_time()) / 2 * 1000;
    s->wall_us = g_get_real_time();
    return true;
}

/* --- reading the samples --- */

static uint64_t member_u64(JsonObject *o, const char *name)
{
    gint64 v = o ? json_object_get_int_member_with_default(o, name, 0) : 0;

    return v > 0 ? v : 0;
}

static JsonObject *member_object(JsonObject *o, const char *name)
{
    JsonNode *n = o ? json_object_get_member(o, name) : NULL;

    return n && JSON_NODE_HOLDS_OBJECT(n) ? json_node_get_object(n) : NULL;
}

static JsonArray *member_array(JsonObject *o, const char *name)
{
    JsonNode *n = o ? json_object_get_member(o, name) : NULL;

    return n && JSON_NODE_HOLDS_ARRAY(n) ? json_node_get_array(n) : NULL;
}

static const char *member_string(JsonObject *o, const char *name)
{
    JsonNode *n = o ? json_object_get_member(o, name) : NULL;

    return n && JSON_NODE_HOLDS_VALUE(n) &&
        json_node_get_value_type(n) == G_TYPE_STRING ?
        json_node_get_string(n) : NULL;
}

/* The entry of list whose "id" is id, or NULL. */
static JsonObject *find_by_id(JsonNode *list, const char *id)
{
    JsonArray *a = json_node_get_array(list);
    guint i;

    for (i = 0; i < json_array_get_length(a); i++) {
        JsonObject *o = json_array_get_object_element(a, i);

        if (g_strcmp0(member_string(o, "id"), id) == 0) {
            return o;
        }
    }
    return NULL;
}

static uint64_t delta(uint64_t before, uint64_t after)
{
    return after >= before ? after - before : 0;
}

/* --- building the report --- */

/* Counters that are summed (over handlers, queues, LUNs) and then
 * subtracted: one struct for both samples of an interval. */
typedef struct Totals {
    uint64_t events, poll_hits;                         /* handlers */
    uint64_t requests, kicks, interrupts;               /* queues */
    uint64_t rd_ops, wr_ops, rd_bytes, wr_bytes;        /* blockstats */
} Totals;

static void add_null_or(JsonBuilder *b, const char *name, bool valid,
                        double v)
{
    json_builder_set_member_name(b, name);
    if (valid) {
        json_builder_add_double_value(b, v);
    } else {
        json_builder_add_null_value(b);
    }
}

static void add_double(JsonBuilder *b, const char *name, double v)
{
    add_null_or(b, name, true, v);
}

static void add_per_io(JsonBuilder *b, const char *name, uint64_t n,
                       uint64_t ios)
{
    add_null_or(b, name, ios > 0, ios ? (double)n / ios : 0);
}

static void handler_totals(JsonObject *poll, Totals *t)
{
    JsonArray *h = member_array(poll, "handlers");
    guint i;

    for (i = 0; h && i < json_array_get_length(h); i++) {
        JsonObject *o = json_array_get_object_element(h, i);

        t->events += member_u64(o, "events");
        t->poll_hits += member_u64(o, "poll-hits");
    }
}

static void build_iothread(JsonBuilder *b, JsonObject *before,
                           JsonObject *after, double dt_s)
{
    JsonObject *p0 = member_object(before, "spindle-poll");
    JsonObject *p1 = member_object(after, "spindle-poll");
    Totals t0 = { 0 }, t1 = { 0 };
    uint64_t events, hits;

    handler_totals(p0, &t0);
    handler_totals(p1, &t1);
    events = delta(t0.events, t1.events);
    hits = MIN(delta(t0.poll_hits, t1.poll_hits), events);

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "id");
    json_builder_add_string_value(b, member_string(after, "id"));
    json_builder_set_member_name(b, "policy");
    json_builder_add_string_value(b, member_string(p1, "policy"));
    json_builder_set_member_name(b, "window_ns");
    json_builder_add_int_value(b, member_u64(p1, "window-ns"));
    add_null_or(b, "poll_hit_pct", events > 0,
                events ? 100.0 * hits / events : 0);
    add_double(b, "wakeups_per_s",
               delta(member_u64(p0, "wakeups"),
                     member_u64(p1, "wakeups")) / dt_s);
    add_double(b, "cpu_pct",
               delta(member_u64(p0, "cpu-ns"),
                     member_u64(p1, "cpu-ns")) / (dt_s * 1e7));
    json_builder_end_object(b);
}

static void queue_totals(JsonObject *q, Totals *t)
{
    t->requests += member_u64(q, "requests");
    t->kicks += member_u64(q, "kicks");
    t->interrupts += member_u64(q, "interrupts");
}

/* iops, kicks_per_io, interrupts_per_io of d (an interval's deltas). */
static void add_queue_rates(JsonBuilder *b, const Totals *d, double dt_s)
{
    add_double(b, "iops", d->requests / dt_s);
    add_per_io(b, "kicks_per_io", d->kicks, d->requests);
    add_per_io(b, "interrupts_per_io", d->interrupts, d->requests);
}

static void totals_delta(const Totals *t0, const Totals *t1, Totals *d)
{
    const uint64_t *a = (const uint64_t *)t0, *z = (const uint64_t *)t1;
    uint64_t *out = (uint64_t *)d;
    size_t i;

    for (i = 0; i < sizeof(Totals) / sizeof(uint64_t); i++) {
        out[i] = delta(a[i], z[i]);
    }
}

static void build_queue(JsonBuilder *b, guint index, JsonObject *q0,
                        JsonObject *q1, double dt_s, Totals *sum0,
                        Totals *sum1)
{
    Totals t0 = { 0 }, t1 = { 0 }, d;
    const char *iot = member_string(q1, "iothread");

    queue_totals(q0, &t0);
    queue_totals(q1, &t1);
    queue_totals(q0, sum0);
    queue_totals(q1, sum1);
    totals_delta(&t0, &t1, &d);

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "queue");
    json_builder_add_int_value(b, index);
    json_builder_set_member_name(b, "iothread");
    if (iot) {
        json_builder_add_string_value(b, iot);
    } else {
        json_builder_add_null_value(b);
    }
    add_queue_rates(b, &d, dt_s);
    json_builder_end_object(b);
}

/* Sum the blockstats entries of export id into t. */
static void blockstats_totals(JsonNode *stats, const char *id, Totals *t)
{
    JsonArray *a = json_node_get_array(stats);
    guint i;

    for (i = 0; i < json_array_get_length(a); i++) {
        JsonObject *e = json_array_get_object_element(a, i);
        JsonObject *s = member_object(e, "stats");

        if (g_strcmp0(member_string(e, "spindle-export"), id) != 0) {
            continue;
        }
        t->rd_ops += member_u64(s, "rd_operations");
        t->wr_ops += member_u64(s, "wr_operations");
        t->rd_bytes += member_u64(s, "rd_bytes");
        t->wr_bytes += member_u64(s, "wr_bytes");
    }
}

static void build_export(JsonBuilder *b, const StatSample *prev,
                         const StatSample *cur, JsonObject *before,
                         JsonObject *after, double dt_s)
{
    const char *id = member_string(after, "id");
    JsonArray *qa0 = member_array(before, "spindle-queues");
    JsonArray *qa1 = member_array(after, "spindle-queues");
    guint nq = MIN(qa0 ? json_array_get_length(qa0) : 0,
                   qa1 ? json_array_get_length(qa1) : 0);
    Totals t0 = { 0 }, t1 = { 0 }, d;
    guint i;

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "id");
    json_builder_add_string_value(b, id);
    json_builder_set_member_name(b, "type");
    json_builder_add_string_value(b, member_string(after, "type"));
    json_builder_set_member_name(b, "connected");
    json_builder_add_boolean_value(b,
        json_object_get_boolean_member_with_default(
            after, "spindle-client-connected", FALSE));
    json_builder_set_member_name(b, "queues");
    json_builder_begin_array(b);
    for (i = 0; i < nq; i++) {
        build_queue(b, i, json_array_get_object_element(qa0, i),
                    json_array_get_object_element(qa1, i), dt_s, &t0, &t1);
    }
    json_builder_end_array(b);

    blockstats_totals(prev->blockstats, id, &t0);
    blockstats_totals(cur->blockstats, id, &t1);
    totals_delta(&t0, &t1, &d);
    add_queue_rates(b, &d, dt_s);
    add_double(b, "read_iops", d.rd_ops / dt_s);
    add_double(b, "write_iops", d.wr_ops / dt_s);
    add_double(b, "read_mbps", d.rd_bytes / dt_s / 1e6);
    add_double(b, "write_mbps", d.wr_bytes / dt_s / 1e6);
    json_builder_end_object(b);
}

/* The entries of cur's list that prev's list has too, built by fn. */
typedef void (*BuildEntry)(JsonBuilder *b, const StatSample *prev,
                           const StatSample *cur, JsonObject *before,
                           JsonObject *after, double dt_s);

static void build_list(JsonBuilder *b, const char *name, JsonNode *list0,
                       JsonNode *list1, const StatSample *prev,
                       const StatSample *cur, double dt_s, BuildEntry fn)
{
    JsonArray *a = json_node_get_array(list1);
    guint i;

    json_builder_set_member_name(b, name);
    json_builder_begin_array(b);
    for (i = 0; i < json_array_get_length(a); i++) {
        JsonObject *after = json_array_get_object_element(a, i);
        JsonObject *before = find_by_id(list0, member_string(after, "id"));

        if (after && before) {
            fn(b, prev, cur, before, after, dt_s);
        }
    }
    json_builder_end_array(b);
}

static void build_iothread_entry(JsonBuilder *b, const StatSample *prev,
                                 const StatSample *cur, JsonObject *before,
                                 JsonObject *after, double dt_s)
{
    build_iothread(b, before, after, dt_s);
}

JsonNode *stat_report_build(const StatSample *prev, const StatSample *cur)
{
    g_autoptr(JsonBuilder) b = json_builder_new();
    double dt_s = MAX(cur->mono_ns - prev->mono_ns, 1) / 1e9;

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "timestamp");
    json_builder_add_double_value(b, cur->wall_us / 1e6);
    add_double(b, "interval_s", dt_s);
    build_list(b, "iothreads", prev->iothreads, cur->iothreads, prev, cur,
               dt_s, build_iothread_entry);
    build_list(b, "exports", prev->exports, cur->exports, prev, cur, dt_s,
               build_export);
    json_builder_end_object(b);
    return json_builder_get_root(b);
}

/* --- the table --- */

/* "%*.*f" of member name of o, or "-" right-aligned when it is null. */
static void print_number(FILE *out, JsonObject *o, const char *name,
                         int width, int decimals)
{
    JsonNode *n = json_object_get_member(o, name);

    if (!n || JSON_NODE_HOLDS_NULL(n)) {
        fprintf(out, " %*s", width, "-");
    } else {
        fprintf(out, " %*.*f", width, decimals, json_node_get_double(n));
    }
}

typedef struct Column {
    const char *title;
    const char *member;         /* NULL: not shown on this row */
    int width, decimals;
} Column;

static const Column iothread_columns[] = {
    { "window-ns", "window_ns", 10, 0 },
    { "poll-hit%", "poll_hit_pct", 9, 1 },
    { "wakeups/s", "wakeups_per_s", 10, 0 },
    { "cpu%", "cpu_pct", 6, 1 },
};

static const Column export_columns[] = {
    { "IOPS", "iops", 9, 0 },
    { "r/s", "read_iops", 9, 0 },
    { "w/s", "write_iops", 9, 0 },
    { "rMB/s", "read_mbps", 8, 1 },
    { "wMB/s", "write_mbps", 8, 1 },
    { "kicks/IO", "kicks_per_io", 8, 2 },
    { "irqs/IO", "interrupts_per_io", 8, 2 },
};

static void print_header(FILE *out, const char *first, int name_width,
                         const char *second, const Column *cols, size_t n)
{
    size_t i;

    fprintf(out, "%-*s %-12s", name_width, first, second);
    for (i = 0; i < n; i++) {
        fprintf(out, " %*s", cols[i].width, cols[i].title);
    }
    fputc('\n', out);
}

/* One row: the name, a second text column, then cols from o; a column
 * that o lacks (a queue's MB/s) is blank. */
static void print_row(FILE *out, const char *name, int name_width,
                      const char *second, JsonObject *o,
                      const Column *cols, size_t n)
{
    size_t i;

    fprintf(out, "%-*s %-12s", name_width, name, second ? second : "-");
    for (i = 0; i < n; i++) {
        if (json_object_has_member(o, cols[i].member)) {
            print_number(out, o, cols[i].member, cols[i].width,
                         cols[i].decimals);
        } else {
            fprintf(out, " %*s", cols[i].width, "");
        }
    }
    fputc('\n', out);
}

static int name_width(JsonArray *threads, JsonArray *exports)
{
    size_t w = strlen("Export/queue");
    guint i;

    for (i = 0; i < json_array_get_length(threads); i++) {
        w = MAX(w, strlen(member_string(
                    json_array_get_object_element(threads, i), "id") ?: ""));
    }
    for (i = 0; i < json_array_get_length(exports); i++) {
        /* "  ID/vqNN" for its queues */
        w = MAX(w, strlen(member_string(
                    json_array_get_object_element(exports, i), "id") ?: "") + 7);
    }
    return w;
}

static void print_exports(FILE *out, JsonArray *exports, int w)
{
    guint i, j;

    print_header(out, "Export/queue", w, "iothread", export_columns,
                 G_N_ELEMENTS(export_columns));
    for (i = 0; i < json_array_get_length(exports); i++) {
        JsonObject *e = json_array_get_object_element(exports, i);
        const char *id = member_string(e, "id");
        JsonArray *qs = member_array(e, "queues");

        print_row(out, id, w, e && json_object_get_boolean_member(
                      e, "connected") ? "connected" : "idle",
                  e, export_columns, G_N_ELEMENTS(export_columns));
        for (j = 0; qs && j < json_array_get_length(qs); j++) {
            JsonObject *q = json_array_get_object_element(qs, j);
            g_autofree char *name = g_strdup_printf("  %s/vq%u", id, j);

            print_row(out, name, w, member_string(q, "iothread") ?: "main",
                      q, export_columns, G_N_ELEMENTS(export_columns));
        }
    }
}

void stat_report_print_table(JsonNode *report, FILE *out)
{
    JsonObject *r = json_node_get_object(report);
    JsonArray *threads = member_array(r, "iothreads");
    JsonArray *exports = member_array(r, "exports");
    int w = name_width(threads, exports);
    time_t now = json_object_get_double_member(r, "timestamp");
    char when[32];
    guint i;

    strftime(when, sizeof(when), "%F %T", localtime(&now));
    fprintf(out, "%s  interval %.2f s\n", when,
            json_object_get_double_member(r, "interval_s"));
    print_header(out, "IOThread", w, "policy", iothread_columns,
                 G_N_ELEMENTS(iothread_columns));
    for (i = 0; i < json_array_get_length(threads); i++) {
        JsonObject *t = json_array_get_object_element(threads, i);

        print_row(out, member_string(t, "id"), w,
                  member_string(t, "policy"), t, iothread_columns,
                  G_N_ELEMENTS(iothread_columns));
    }
    fputc('\n', out);
    print_exports(out, exports, w);
    fputc('\n', out);
}

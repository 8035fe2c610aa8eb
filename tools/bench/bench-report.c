/*
 * spindle-bench: the results of a run, as text or as one JSON object.
 *
 * Everything here runs in the main thread after the queue threads have
 * been joined, so it reads the BenchQueues without locks.
 * bench_summarize() merges the per-queue histograms and counters into a
 * Summary, whose window runs from the common window start to the end of
 * the last queue's window, and turns what went wrong (a queue that
 * stopped early, I/O errors, verify mismatches) into one-line messages,
 * from which main() decides the exit status.  The printers only format:
 * the text report is for a person (a line per queue when there are
 * several), the JSON object for scripts, with a figure that does not
 * apply given as null rather than left out.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "bench-int.h"

#define CDF_POINTS          100

static double per_io(double v, uint64_t ios)
{
    return ios ? v / ios : 0;
}

static double ratio(double num, double den)
{
    return den > 0 ? num / den : 0;
}

/* Why the queue's thread stopped early.  Caller frees. */
static char *queue_fail_reason(const BenchQueue *bq)
{
    switch (bq->fail) {
    case ECONNRESET:
        return g_strdup("the back-end hung up");
    case EIO:
        return g_strdup("the back-end broke the queue (an invalid used "
                        "ring entry)");
    case ENOTCONN:
        return g_strdup("the queue is not set up (the session ended)");
    case ETIMEDOUT:
        return g_strdup_printf("no completion for %llu s with %u requests "
                               "in flight: the back-end is stuck",
                               STALL_NS / NS_PER_S, bq->fail_in_flight);
    default:
        return g_strdup(g_strerror(bq->fail));
    }
}

/* "IOERR", or "CHECK_CONDITION, sense DATA_PROTECT, ASC 0x27, ASCQ
 * 0x00".  Caller frees. */
static char *io_error_string(const BenchIoError *e)
{
    if (!e->have_sense) {
        return g_strdup(e->status);
    }
    return g_strdup_printf("%s, sense %s, ASC 0x%02x, ASCQ 0x%02x",
                           e->status, vufscsi_sense_key_name(e->sense_key),
                           e->asc, e->ascq);
}

static void summarize_failures(const Bench *b, Summary *s)
{
    unsigned i;

    for (i = 0; i < b->nq; i++) {
        const BenchQueue *bq = &b->queues[i];

        if (bq->fail) {
            g_autofree char *why = queue_fail_reason(bq);

            g_ptr_array_add(s->failures,
                            g_strdup_printf("queue %u: %s", bq->index, why));
        }
    }
    if (s->error_q) {
        const BenchQueue *bq = s->error_q;
        g_autofree char *what = io_error_string(&bq->error);

        g_ptr_array_add(s->failures,
            g_strdup_printf("%" PRIu64 " I/O error%s; first: %s at byte %"
                            PRIu64 ": %s", s->errors,
                            s->errors == 1 ? "" : "s",
                            bq->error_write ? "write" : "read",
                            bq->error_offset, what));
    }
    if (s->mismatch_q) {
        const VerifyMismatch *m = &s->mismatch_q->mismatch;
        g_autofree char *expected = m->expected_gen
            ? g_strdup_printf("expected generation %u", m->expected_gen)
            : g_strdup("expected a valid sector of any generation");
        g_autofree char *detail = m->problem == VERIFY_NO_HEADER
            ? g_strdup(expected)
            : g_strdup_printf("found sector %" PRIu64 " generation %u, %s",
                              m->found_sector, m->found_gen, expected);

        g_ptr_array_add(s->failures,
            g_strdup_printf("verify: %" PRIu64 " bad sector%s; first at byte "
                            "%" PRIu64 ": %s (%s)", s->bad_sectors,
                            s->bad_sectors == 1 ? "" : "s", m->offset,
                            verify_problem_name(m->problem), detail));
    }
}

/* The back-end's snapshot at the start of phase k (k = nphases: the
 * end), or NULL. */
static const CpuSnapshot *phase_snapshot(const Bench *b, const CpuWindow *cpu,
                                         unsigned k)
{
    if (k == 0) {
        return cpu->start;
    }
    if (k == b->o->nphases) {
        return cpu->end;
    }
    return cpu->phase ? cpu->phase[k] : NULL;
}

/* --phase: each phase's I/O, latency and back-end CPU; a phase is cut
 * where the window ended (end). */
static void summarize_phases(const Bench *b, const CpuWindow *cpu,
                             uint64_t end, Summary *s)
{
    unsigned n = b->o->nphases, k, i;

    if (!n) {
        return;
    }
    s->phases = g_new0(SummaryPhase, n);
    for (k = 0; k < n; k++) {
        SummaryPhase *p = &s->phases[k];
        const CpuSnapshot *from = phase_snapshot(b, cpu, k);
        const CpuSnapshot *to = phase_snapshot(b, cpu, k + 1);

        p->start_ns = MIN(b->phase_start[k], end);
        p->end_ns = MIN(b->phase_start[k + 1], end);
        p->hist = lat_hist_new();
        for (i = 0; i < b->nq; i++) {
            const BenchQueue *bq = &b->queues[i];

            p->ios += bq->phase_ios[k];
            lat_hist_merge(p->hist, bq->phase_hist[k]);
        }
        if (from && to) {
            p->have_backend = true;
            cpu_snapshot_delta(from, to, &p->backend);
        }
    }
}

void bench_summarize(const Bench *b, const CpuWindow *cpu, Summary *s)
{
    uint64_t end = b->win_start;
    unsigned i;

    s->hist = lat_hist_new();
    s->lag_hist = lat_hist_new();
    s->failures = g_ptr_array_new_with_free_func(g_free);
    for (i = 0; i < b->nq; i++) {
        const BenchQueue *bq = &b->queues[i];

        if (bq->measuring && bq->win_end > end) {
            end = bq->win_end;
        }
        lat_hist_merge(s->hist, bq->hist);
        s->ios += bq->ios;
        s->reads += bq->reads;
        s->writes += bq->writes;
        s->errors += bq->errors;
        s->backlogged += bq->backlogged;
        s->arrivals += bq->arrivals;
        lat_hist_merge(s->lag_hist, bq->lag_hist);
        s->kicks += bq->stats.kicks;
        s->kicks_avoided += bq->stats.kicks_avoided;
        s->interrupts += bq->stats.interrupts;
        s->sectors_checked += bq->sectors_checked;
        s->bad_sectors += bq->bad_sectors;
        s->bench_cpu_s += bq->cpu_ns / 1e9;
        if (bq->have_mismatch && !s->mismatch_q) {
            s->mismatch_q = bq;
        }
        if (bq->have_error && !s->error_q) {
            s->error_q = bq;
        }
    }
    s->runtime_s = (end - b->win_start) / 1e9;
    s->bytes = s->ios * b->o->bs;
    if (cpu->start && cpu->end) {
        s->have_backend = true;
        cpu_snapshot_delta(cpu->start, cpu->end, &s->backend);
    }
    summarize_phases(b, cpu, end, s);
    summarize_failures(b, s);
}

void bench_summary_free(Summary *s, unsigned nphases)
{
    unsigned k;

    lat_hist_free(s->hist);
    lat_hist_free(s->lag_hist);
    g_ptr_array_free(s->failures, TRUE);
    for (k = 0; s->phases && k < nphases; k++) {
        lat_hist_free(s->phases[k].hist);
    }
    g_free(s->phases);
}

/* The back-end's CPU seconds: schedstat when readable (ns), else stat. */
static double cpu_delta_best(const CpuDelta *d)
{
    if (d->sched_s >= 0) {
        return d->sched_s;
    }
    return d->utime_s + d->stime_s;
}

static double backend_cpu_best(const Summary *s)
{
    return cpu_delta_best(&s->backend);
}

static double phase_seconds(const SummaryPhase *p)
{
    return (p->end_ns - p->start_ns) / 1e9;
}

void bench_print_text(const Bench *b, const Summary *s)
{
    const BenchOpts *o = b->o;
    const LatHist *h = s->hist;
    unsigned i;

    printf("spindle-bench: ");
    if (b->dev->type == VUF_DEVICE_SCSI) {
        printf("%s lun=%u ", b->dev->name, o->lun);
    }
    printf("%s", rw_names[o->rw]);
    if (o->rw == RW_RANDRW) {
        printf(" rwmixread=%u", o->rwmixread);
    }
    printf(" bs=%" PRIu64, o->bs);
    if (b->rate_mean_ns) {
        printf(" rate=%g/s%s", o->rate, b->nq > 1 ? " per queue" : "");
    }
    if (o->nphases) {
        printf(" phases=%u", o->nphases);
    }
    printf(" iodepth=%u queues=%u completion=%s runtime=%.2f s\n", b->depth,
           b->nq, vuf_completion_names[o->completion], s->runtime_s);
    printf("  ios=%" PRIu64 " iops=%.1f bw=%.2f MiB/s errors=%" PRIu64,
           s->ios, ratio(s->ios, s->runtime_s),
           ratio(s->bytes / 1048576.0, s->runtime_s), s->errors);
    if (o->rw == RW_RANDRW) {
        printf(" (reads=%" PRIu64 " writes=%" PRIu64 ")", s->reads,
               s->writes);
    }
    if (b->open_loop) {
        printf("\n  arrivals=%" PRIu64 " backlogged=%" PRIu64 " submitted "
               "late by ns: p50=%" PRIu64 " p99=%" PRIu64 " max=%" PRIu64,
               s->arrivals, s->backlogged,
               lat_hist_percentile(s->lag_hist, 50),
               lat_hist_percentile(s->lag_hist, 99),
               lat_hist_max(s->lag_hist));
    }
    printf("\n  latency ns: min=%" PRIu64 " mean=%.0f p50=%" PRIu64 " p90=%"
           PRIu64 " p99=%" PRIu64 " p99.9=%" PRIu64 " max=%" PRIu64 "\n",
           lat_hist_min(h), lat_hist_mean(h), lat_hist_percentile(h, 50),
           lat_hist_percentile(h, 90), lat_hist_percentile(h, 99),
           lat_hist_percentile(h, 99.9), lat_hist_max(h));
    printf("  kicks/io=%.2f (%" PRIu64 " sent, %" PRIu64 " avoided) "
           "interrupts/io=%.2f\n", per_io(s->kicks, s->ios), s->kicks,
           s->kicks_avoided, per_io(s->interrupts, s->ios));
    printf("  ");
    if (s->have_backend) {
        printf("back-end CPU: %.2f s (%.1f us/io)   ", backend_cpu_best(s),
               per_io(backend_cpu_best(s) * 1e6, s->ios));
        if (s->backend.switches >= 0) {
            printf("switches: %.2f/io   ",
                   per_io((double)s->backend.switches, s->ios));
        }
    }
    printf("bench CPU: %.1f us/io\n", per_io(s->bench_cpu_s * 1e6, s->ios));
    if (o->verify) {
        printf("  verify: %" PRIu64 " sectors checked, %" PRIu64
               " mismatches\n", s->sectors_checked, s->bad_sectors);
    }
    if (o->dirty_log) {
        printf("  dirty log: %" PRIu64 " pages found dirty in %" PRIu64
               " syncs (every %u ms)\n", b->log_pages, b->log_syncs,
               o->dirty_log_sync_ms);
    }
    for (i = 0; s->phases && i < o->nphases; i++) {
        const SummaryPhase *p = &s->phases[i];
        char load[32];

        printf("  phase %u %s %.2f s: ios=%" PRIu64 " iops=%.1f p50=%" PRIu64
               " p99=%" PRIu64, i + 1,
               bench_phase_load_name(&o->phases[i], load, sizeof(load)),
               phase_seconds(p), p->ios, ratio(p->ios, phase_seconds(p)),
               lat_hist_percentile(p->hist, 50),
               lat_hist_percentile(p->hist, 99));
        if (p->have_backend) {
            printf(" back-end CPU %.1f us/io",
                   per_io(cpu_delta_best(&p->backend) * 1e6, p->ios));
        }
        printf("\n");
    }
    for (i = 0; b->nq > 1 && i < b->nq; i++) {
        const BenchQueue *bq = &b->queues[i];
        double secs = bq->measuring ? (bq->win_end - b->win_start) / 1e9 : 0;
        char cpu[32] = "";

        if (bq->cpu >= 0) {
            snprintf(cpu, sizeof(cpu), " (cpu %d)", bq->cpu);
        }
        printf("  queue %u%s: ios=%" PRIu64 " iops=%.1f p50=%" PRIu64
               " p99=%" PRIu64 " kicks=%" PRIu64 " interrupts=%" PRIu64 "\n",
               bq->index, cpu, bq->ios, ratio(bq->ios, secs),
               lat_hist_percentile(bq->hist, 50),
               lat_hist_percentile(bq->hist, 99), bq->stats.kicks,
               bq->stats.interrupts);
    }
}

static JsonObject *json_lat(const LatHist *h, bool full)
{
    JsonObject *o = json_object_new();

    if (full) {
        json_object_set_int_member(o, "min", lat_hist_min(h));
        json_object_set_double_member(o, "mean", lat_hist_mean(h));
    }
    json_object_set_int_member(o, "p50", lat_hist_percentile(h, 50));
    if (full) {
        json_object_set_int_member(o, "p90", lat_hist_percentile(h, 90));
    }
    json_object_set_int_member(o, "p99", lat_hist_percentile(h, 99));
    if (full) {
        json_object_set_int_member(o, "p999", lat_hist_percentile(h, 99.9));
        json_object_set_int_member(o, "max", lat_hist_max(h));
    }
    return o;
}

static JsonArray *json_cdf(const LatHist *h)
{
    double ns[CDF_POINTS], frac[CDF_POINTS];
    size_t n = lat_hist_cdf(h, ns, frac, CDF_POINTS), i;
    JsonArray *a = json_array_new();

    for (i = 0; i < n; i++) {
        JsonArray *pt = json_array_new();

        json_array_add_double_element(pt, ns[i]);
        json_array_add_double_element(pt, frac[i]);
        json_array_add_array_element(a, pt);
    }
    return a;
}

static JsonObject *json_verify(const BenchOpts *o, const Summary *s)
{
    JsonObject *v = json_object_new();

    json_object_set_boolean_member(v, "enabled", o->verify);
    json_object_set_int_member(v, "sectors_checked", s->sectors_checked);
    json_object_set_int_member(v, "mismatches", s->bad_sectors);
    if (s->mismatch_q) {
        const VerifyMismatch *m = &s->mismatch_q->mismatch;
        JsonObject *f = json_object_new();

        json_object_set_int_member(f, "queue", s->mismatch_q->index);
        json_object_set_int_member(f, "offset", m->offset);
        json_object_set_string_member(f, "problem",
                                      verify_problem_name(m->problem));
        json_object_set_int_member(f, "found_sector", m->found_sector);
        json_object_set_int_member(f, "found_gen", m->found_gen);
        json_object_set_int_member(f, "expected_gen", m->expected_gen);
        json_object_set_object_member(v, "first_mismatch", f);
    } else {
        json_object_set_null_member(v, "first_mismatch");
    }
    return v;
}

static void json_backend(JsonObject *j, const BenchOpts *o, const Summary *s)
{
    if (o->backend_pid) {
        json_object_set_int_member(j, "backend_pid", o->backend_pid);
    } else {
        json_object_set_null_member(j, "backend_pid");
    }
    if (s->have_backend) {
        json_object_set_double_member(j, "backend_cpu_s",
                                      s->backend.utime_s +
                                      s->backend.stime_s);
        json_object_set_double_member(j, "backend_utime_s",
                                      s->backend.utime_s);
        json_object_set_double_member(j, "backend_stime_s",
                                      s->backend.stime_s);
        if (s->backend.sched_s >= 0) {
            json_object_set_double_member(j, "backend_cpu_sched_s",
                                          s->backend.sched_s);
        } else {
            json_object_set_null_member(j, "backend_cpu_sched_s");
        }
        json_object_set_double_member(j, "backend_cpu_us_per_io",
                                      per_io(backend_cpu_best(s) * 1e6,
                                             s->ios));
        json_object_set_int_member(j, "backend_threads", s->backend.threads);
        if (s->backend.switches >= 0) {
            json_object_set_int_member(j, "backend_switches",
                                       s->backend.switches);
            json_object_set_double_member(j, "backend_switches_per_io",
                                          ratio(s->backend.switches, s->ios));
        } else {
            json_object_set_null_member(j, "backend_switches");
            json_object_set_null_member(j, "backend_switches_per_io");
        }
    } else {
        json_object_set_null_member(j, "backend_cpu_s");
        json_object_set_null_member(j, "backend_cpu_sched_s");
        json_object_set_null_member(j, "backend_cpu_us_per_io");
        json_object_set_null_member(j, "backend_threads");
        json_object_set_null_member(j, "backend_switches");
        json_object_set_null_member(j, "backend_switches_per_io");
    }
}

static JsonArray *json_per_queue(const Bench *b)
{
    JsonArray *a = json_array_new();
    unsigned i;

    for (i = 0; i < b->nq; i++) {
        const BenchQueue *bq = &b->queues[i];
        double secs = bq->measuring ? (bq->win_end - b->win_start) / 1e9 : 0;
        JsonObject *q = json_object_new();

        json_object_set_int_member(q, "queue", bq->index);
        json_object_set_int_member(q, "cpu", bq->cpu);
        json_object_set_int_member(q, "ios", bq->ios);
        json_object_set_double_member(q, "iops", ratio(bq->ios, secs));
        json_object_set_double_member(q, "runtime_s", secs);
        json_object_set_object_member(q, "lat_ns", json_lat(bq->hist, false));
        json_object_set_int_member(q, "kicks", bq->stats.kicks);
        json_object_set_int_member(q, "kicks_avoided",
                                   bq->stats.kicks_avoided);
        json_object_set_int_member(q, "interrupts", bq->stats.interrupts);
        json_object_set_int_member(q, "errors", bq->errors);
        if (bq->fail) {
            g_autofree char *why = queue_fail_reason(bq);

            json_object_set_string_member(q, "failure", why);
        } else {
            json_object_set_null_member(q, "failure");
        }
        json_array_add_object_element(a, q);
    }
    return a;
}

/* --phase: one object per phase. */
static JsonArray *json_phases(const Bench *b, const Summary *s)
{
    JsonArray *a = json_array_new();
    unsigned k;

    for (k = 0; k < b->o->nphases; k++) {
        const SummaryPhase *p = &s->phases[k];
        JsonObject *o = json_object_new();
        char load[32];

        json_object_set_string_member(o, "load",
            bench_phase_load_name(&b->o->phases[k], load, sizeof(load)));
        json_object_set_double_member(o, "seconds", b->o->phases[k].seconds);
        json_object_set_int_member(o, "start_ns", p->start_ns);
        json_object_set_int_member(o, "end_ns", p->end_ns);
        json_object_set_int_member(o, "ios", p->ios);
        json_object_set_double_member(o, "iops",
                                      ratio(p->ios, phase_seconds(p)));
        json_object_set_object_member(o, "lat_ns", json_lat(p->hist, false));
        if (p->have_backend) {
            json_object_set_double_member(o, "backend_cpu_s",
                                          cpu_delta_best(&p->backend));
            json_object_set_double_member(o, "backend_cpu_us_per_io",
                per_io(cpu_delta_best(&p->backend) * 1e6, p->ios));
        } else {
            json_object_set_null_member(o, "backend_cpu_s");
            json_object_set_null_member(o, "backend_cpu_us_per_io");
        }
        json_array_add_object_element(a, o);
    }
    return a;
}

/* The sense of a CHECK CONDITION (virtio-scsi), or nulls. */
static void json_io_sense(JsonObject *e, const BenchIoError *err)
{
    if (err->have_sense) {
        json_object_set_string_member(e, "sense_key",
                                      vufscsi_sense_key_name(err->sense_key));
        json_object_set_int_member(e, "asc", err->asc);
        json_object_set_int_member(e, "ascq", err->ascq);
    } else {
        json_object_set_null_member(e, "sense_key");
        json_object_set_null_member(e, "asc");
        json_object_set_null_member(e, "ascq");
    }
}

static void json_setup(JsonObject *j, const Bench *b)
{
    const BenchOpts *o = b->o;

    json_object_set_string_member(j, "tool", "spindle-bench");
    json_object_set_string_member(j, "socket", o->socket);
    json_object_set_string_member(j, "device", b->dev->name);
    if (b->dev->type == VUF_DEVICE_SCSI) {
        json_object_set_int_member(j, "lun", o->lun);
    } else {
        json_object_set_null_member(j, "lun");
    }
    json_object_set_string_member(j, "rw", rw_names[o->rw]);
    json_object_set_int_member(j, "rwmixread",
                               o->rw == RW_RANDRW ? o->rwmixread
                               : rw_reads(o->rw) ? 100 : 0);
    json_object_set_int_member(j, "bs", o->bs);
    json_object_set_int_member(j, "iodepth", b->depth);
    json_object_set_double_member(j, "rate_iops", b->rate_mean_ns ? o->rate
                                                                  : 0);
    json_object_set_int_member(j, "queues", b->nq);
    json_object_set_string_member(j, "completion",
                                  vuf_completion_names[o->completion]);
    json_object_set_double_member(j, "ramp_s", o->ramp);
    json_object_set_int_member(j, "size", o->size);
    json_object_set_int_member(j, "offset", o->offset);
    json_object_set_int_member(j, "queue_size", o->queue_size);
    json_object_set_boolean_member(j, "event_idx",
        vuf_has_feature(b->fe, VIRTIO_RING_F_EVENT_IDX));
    json_object_set_boolean_member(j, "indirect",
                                   b->add_flags & VUFQ_ADD_INDIRECT);
    if (o->count) {
        json_object_set_int_member(j, "count", o->count);
    } else {
        json_object_set_null_member(j, "count");
    }
    json_object_set_int_member(j, "seed", o->seed);
}

void bench_print_json(const Bench *b, const Summary *s, int status)
{
    g_autoptr(JsonGenerator) gen = json_generator_new();
    g_autoptr(JsonNode) root = json_node_new(JSON_NODE_OBJECT);
    JsonObject *j = json_object_new();
    JsonArray *failures = json_array_new();
    g_autofree char *text = NULL;
    guint i;

    json_setup(j, b);
    json_object_set_double_member(j, "runtime_s", s->runtime_s);
    json_object_set_int_member(j, "ios", s->ios);
    json_object_set_int_member(j, "reads", s->reads);
    json_object_set_int_member(j, "writes", s->writes);
    json_object_set_int_member(j, "errors", s->errors);
    json_object_set_int_member(j, "bytes", s->bytes);
    json_object_set_double_member(j, "iops", ratio(s->ios, s->runtime_s));
    json_object_set_double_member(j, "bw_mib_s",
                                  ratio(s->bytes / 1048576.0, s->runtime_s));
    json_object_set_object_member(j, "lat_ns", json_lat(s->hist, true));
    json_object_set_array_member(j, "lat_cdf", json_cdf(s->hist));
    json_object_set_int_member(j, "kicks", s->kicks);
    json_object_set_int_member(j, "kicks_avoided", s->kicks_avoided);
    json_object_set_double_member(j, "kicks_per_io", per_io(s->kicks,
                                                            s->ios));
    json_object_set_int_member(j, "interrupts", s->interrupts);
    json_object_set_double_member(j, "interrupts_per_io",
                                  per_io(s->interrupts, s->ios));
    json_object_set_int_member(j, "backlogged", s->backlogged);
    if (b->open_loop) {
        json_object_set_int_member(j, "arrivals", s->arrivals);
        json_object_set_object_member(j, "arrival_lag_ns",
                                      json_lat(s->lag_hist, true));
    } else {
        json_object_set_null_member(j, "arrivals");
        json_object_set_null_member(j, "arrival_lag_ns");
    }
    json_backend(j, b->o, s);
    json_object_set_double_member(j, "bench_cpu_s", s->bench_cpu_s);
    json_object_set_double_member(j, "bench_cpu_us_per_io",
                                  per_io(s->bench_cpu_s * 1e6, s->ios));
    json_object_set_object_member(j, "verify", json_verify(b->o, s));
    if (b->o->dirty_log) {
        JsonObject *d = json_object_new();

        json_object_set_int_member(d, "sync_ms", b->o->dirty_log_sync_ms);
        json_object_set_int_member(d, "syncs", b->log_syncs);
        json_object_set_int_member(d, "dirty_pages", b->log_pages);
        json_object_set_object_member(j, "dirty_log", d);
    } else {
        json_object_set_null_member(j, "dirty_log");
    }
    if (s->error_q) {
        const BenchQueue *bq = s->error_q;
        JsonObject *e = json_object_new();

        json_object_set_string_member(e, "op", bq->error_write ? "write"
                                                               : "read");
        json_object_set_int_member(e, "offset", bq->error_offset);
        json_object_set_string_member(e, "status", bq->error.status);
        json_io_sense(e, &bq->error);
        json_object_set_object_member(j, "first_error", e);
    } else {
        json_object_set_null_member(j, "first_error");
    }
    json_object_set_array_member(j, "per_queue", json_per_queue(b));
    if (s->phases) {
        json_object_set_array_member(j, "phases", json_phases(b, s));
    } else {
        json_object_set_null_member(j, "phases");
    }
    for (i = 0; i < s->failures->len; i++) {
        json_array_add_string_element(failures, s->failures->pdata[i]);
    }
    json_object_set_array_member(j, "failures", failures);
    json_object_set_boolean_member(j, "ok", status == 0);
    json_object_set_int_member(j, "exit_status", status);

    json_node_take_object(root, j);
    json_generator_set_root(gen, root);
    json_generator_set_pretty(gen, TRUE);
    text = json_generator_to_data(gen, NULL);
    printf("%s\n", text);
}

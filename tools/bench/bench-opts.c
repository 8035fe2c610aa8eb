/*
 * spindle-bench: the command line (docs/bench.md lists the options).
 *
 * GOption reads every option as a string into a RawOpts; convert_opts()
 * then converts and checks each one into the BenchOpts that the rest of
 * the tool reads, so that every message names the option, says what it
 * accepts and shows what was given.  The values themselves are read by
 * util/cli-parse.h and util/cpu-list.h, as in the other tools; sizes take
 * k, M, G and T suffixes (powers of 1024).  The integer options are one
 * table (uint_opts).  --phase (repeatable) replaces --runtime, --iodepth,
 * --rate and --count, and needs one queue; its specs are parsed by
 * bench_parse_phase(), which the unit tests call directly.  What the
 * command line alone decides is checked here (and --cpus against our
 * affinity mask); what depends on the back-end
 * (the region against the disk, --bs against the negotiated limits,
 * --iodepth against the queue), and whether the --backend-pid process
 * exists, bench-main.c checks.
 */
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <glib.h>

#include "bench-int.h"
#include "util/cli-parse.h"
#include "util/cpu-list.h"

#define BS_MAX              (1ull << 30)

const char *const rw_names[] = {
    [RW_RANDREAD] = "randread",
    [RW_RANDWRITE] = "randwrite",
    [RW_READ] = "read",
    [RW_WRITE] = "write",
    [RW_RANDRW] = "randrw",
};

typedef struct RawOpts {
    char *socket, *queues, *cpus, *rw, *rwmixread, *bs, *iodepth, *rate;
    char *runtime, *count, *ramp, *size, *offset, *completion;
    char *backend_pid, *queue_size, *require, *seed, *connect_timeout;
    char *device, *lun, *dirty_log_sync;
    char **phases;
    gboolean verify, json, no_event_idx, no_indirect, dirty_log;
} RawOpts;

static void raw_opts_free(RawOpts *r)
{
    char **strs[] = {
        &r->socket, &r->queues, &r->cpus, &r->rw, &r->rwmixread, &r->bs,
        &r->iodepth, &r->rate, &r->runtime, &r->count, &r->ramp, &r->size,
        &r->offset, &r->completion, &r->backend_pid, &r->queue_size,
        &r->require, &r->seed, &r->connect_timeout, &r->device, &r->lun,
        &r->dirty_log_sync,
    };
    size_t i;

    for (i = 0; i < G_N_ELEMENTS(strs); i++) {
        g_free(*strs[i]);
        *strs[i] = NULL;
    }
    g_strfreev(r->phases);
    r->phases = NULL;
}

/* "0-3,8" -> the CPUs in the order given, each checked against our
 * affinity mask (pinning to a CPU we may not use would fail later). */
static bool parse_cpus(const char *str, BenchOpts *o, Error **errp)
{
    unsigned n;
    g_autofree int *cpus = cpu_list_parse("--cpus", str, &n, errp);

    if (!cpus || !cpu_list_check_allowed("--cpus", cpus, n, errp)) {
        return false;
    }
    o->ncpus = n;
    o->cpus = g_steal_pointer(&cpus);
    return true;
}

/* Feature names as vuf_device_feature_by_name() spells them for the
 * device; '-' may stand for '_' ("ring-packed"), as in most command
 * lines. */
static bool parse_features(const char *str, VufDeviceType dev,
                           uint64_t *mask, Error **errp)
{
    g_auto(GStrv) names = g_strsplit(str, ",", -1);
    char **n;

    for (n = names; *n; n++) {
        g_autofree char *name = g_strdelimit(g_strdup(*n), "-", '_');
        int bit = vuf_device_feature_by_name(dev, name);

        if (bit < 0) {
            error_setg(errp, "--require: unknown feature '%s' (names such "
                       "as RING_EVENT_IDX, RING_INDIRECT_DESC, %s)", *n,
                       dev == VUF_DEVICE_SCSI ? "SCSI_HOTPLUG, SCSI_CHANGE"
                                              : "BLK_MQ, BLK_FLUSH");
            return false;
        }
        *mask |= 1ull << bit;
    }
    return true;
}

/* An option naming one of names[0..n) (if given) into the enum at *out. */
static bool parse_enum(const char *name, const char *str,
                       const char *const *names, size_t n, int *out,
                       Error **errp)
{
    return !str || cli_parse_choice(name, str, names, n, out, errp);
}

static bool convert_sizes(const RawOpts *r, BenchOpts *o, Error **errp)
{
    if (r->bs) {
        if (!cli_parse_size("--bs", r->bs, &o->bs, errp)) {
            return false;
        }
        if (o->bs == 0 || o->bs % SECTOR || o->bs > BS_MAX) {
            error_setg(errp, "--bs: expected a multiple of 512 from 512 to "
                       "1G, got '%s'", r->bs);
            return false;
        }
    }
    if (r->size) {
        if (!cli_parse_size("--size", r->size, &o->size, errp)) {
            return false;
        }
        if (o->size == 0) {
            error_setg(errp, "--size: the region must not be empty");
            return false;
        }
        o->have_size = true;
    }
    if (r->offset) {
        if (!cli_parse_size("--offset", r->offset, &o->offset, errp)) {
            return false;
        }
        if (o->offset % SECTOR) {
            error_setg(errp, "--offset: expected a multiple of 512, got '%s'",
                       r->offset);
            return false;
        }
    }
    return true;
}

/*
 * The integer options: their range, and the BenchOpts field each goes to
 * (an unsigned or int, or a uint64_t).
 */
static const struct {
    const char *name;
    size_t raw;                 /* offsetof(RawOpts, ...) */
    uint64_t min, max;
    size_t out;                 /* offsetof(BenchOpts, ...) */
    bool wide;                  /* the field is a uint64_t */
} uint_opts[] = {
    { "--queues", offsetof(RawOpts, queues), 1, VUF_QUEUES_MAX,
      offsetof(BenchOpts, queues), false },
    { "--rwmixread", offsetof(RawOpts, rwmixread), 0, 100,
      offsetof(BenchOpts, rwmixread), false },
    { "--iodepth", offsetof(RawOpts, iodepth), 1, VUF_QUEUE_SIZE_MAX,
      offsetof(BenchOpts, iodepth), false },
    { "--count", offsetof(RawOpts, count), 1, UINT64_MAX,
      offsetof(BenchOpts, count), true },
    { "--queue-size", offsetof(RawOpts, queue_size), 1, VUF_QUEUE_SIZE_MAX,
      offsetof(BenchOpts, queue_size), false },
    { "--backend-pid", offsetof(RawOpts, backend_pid), 1, INT_MAX,
      offsetof(BenchOpts, backend_pid), false },
    { "--connect-timeout", offsetof(RawOpts, connect_timeout), 0, INT_MAX,
      offsetof(BenchOpts, connect_timeout_ms), false },
    { "--seed", offsetof(RawOpts, seed), 0, UINT64_MAX,
      offsetof(BenchOpts, seed), true },
    { "--dirty-log-sync", offsetof(RawOpts, dirty_log_sync), 0, INT_MAX,
      offsetof(BenchOpts, dirty_log_sync_ms), false },
};

/* The int fields above are stored through an unsigned pointer. */
G_STATIC_ASSERT(sizeof(((BenchOpts *)NULL)->backend_pid) == sizeof(unsigned));
G_STATIC_ASSERT(sizeof(((BenchOpts *)NULL)->connect_timeout_ms) ==
                sizeof(unsigned));

static bool convert_numbers(const RawOpts *r, BenchOpts *o, Error **errp)
{
    size_t i;

    for (i = 0; i < G_N_ELEMENTS(uint_opts); i++) {
        const char *str = *(char *const *)((const char *)r + uint_opts[i].raw);
        void *field = (char *)o + uint_opts[i].out;
        uint64_t v;

        if (!str) {
            continue;
        }
        if (!cli_parse_uint(uint_opts[i].name, str, uint_opts[i].min,
                            uint_opts[i].max, &v, errp)) {
            return false;
        }
        /* The narrow fields are unsigned or int, of one size; the range
         * above keeps v in both. */
        if (uint_opts[i].wide) {
            *(uint64_t *)field = v;
        } else {
            *(unsigned *)field = v;
        }
    }
    if (o->queue_size & (o->queue_size - 1)) {
        error_setg(errp, "--queue-size: expected a power of 2, got '%s'",
                   r->queue_size);
        return false;
    }
    return true;
}

static bool convert_times(const RawOpts *r, BenchOpts *o, Error **errp)
{
    if (r->rate && !cli_parse_number("--rate", r->rate, 1e9, &o->rate, errp)) {
        return false;
    }
    if (r->ramp && !cli_parse_seconds("--ramp", r->ramp, 1e6, &o->ramp, errp)) {
        return false;
    }
    if (r->runtime) {
        if (!cli_parse_seconds("--runtime", r->runtime, 1e6, &o->runtime, errp)) {
            return false;
        }
        if (o->runtime <= 0) {
            error_setg(errp, "--runtime: expected a positive number of "
                       "seconds, got '%s'", r->runtime);
            return false;
        }
    }
    /* --count alone runs until the count is reached. */
    o->have_deadline = r->runtime || !o->count;
    return true;
}

#define PHASE_SYNTAX "expected SECONDS:LOAD with LOAD qdN, rate=IOPS or " \
                     "idle (e.g. 2:qd1, 1:idle, 0.5:rate=10000)"

bool bench_parse_phase(const char *str, BenchPhase *p, Error **errp)
{
    g_autofree char *secs = NULL;
    const char *colon = strchr(str, ':'), *load;
    uint64_t v;

    if (!colon) {
        error_setg(errp, "--phase: " PHASE_SYNTAX ", got '%s'", str);
        return false;
    }
    secs = g_strndup(str, colon - str);
    load = colon + 1;
    *p = (BenchPhase) { 0 };
    if (!cli_parse_seconds("--phase", secs, 1e6, &p->seconds, NULL) ||
        p->seconds <= 0) {
        error_setg(errp, "--phase: expected a positive number of seconds "
                   "before ':', got '%s'", str);
        return false;
    }
    if (!strcmp(load, "idle")) {
        p->load = LOAD_IDLE;
        return true;
    }
    if (g_str_has_prefix(load, "qd")) {
        if (!cli_parse_uint("--phase", load + 2, 1, VUF_QUEUE_SIZE_MAX, &v,
                        NULL)) {
            error_setg(errp, "--phase: qdN takes a queue depth from 1 to %u, "
                       "got '%s'", VUF_QUEUE_SIZE_MAX, str);
            return false;
        }
        p->load = LOAD_QD;
        p->iodepth = v;
        return true;
    }
    if (g_str_has_prefix(load, "rate=")) {
        if (!cli_parse_number("--phase", load + 5, 1e9, &p->rate, NULL) ||
            p->rate <= 0) {
            error_setg(errp, "--phase: rate=IOPS takes a positive number of "
                       "arrivals per second, got '%s'", str);
            return false;
        }
        p->load = LOAD_RATE;
        return true;
    }
    error_setg(errp, "--phase: " PHASE_SYNTAX ", got '%s'", str);
    return false;
}

const char *bench_phase_load_name(const BenchPhase *p, char *buf,
                                  size_t size)
{
    switch (p->load) {
    case LOAD_QD:
        snprintf(buf, size, "qd%u", p->iodepth);
        break;
    case LOAD_RATE:
        snprintf(buf, size, "rate=%g", p->rate);
        break;
    default:
        snprintf(buf, size, "idle");
        break;
    }
    return buf;
}

/*
 * --phase: the phases replace --runtime, --iodepth and --rate (and
 * --count), and run on one connection, so one queue.
 */
static bool convert_phases(const RawOpts *r, BenchOpts *o, Error **errp)
{
    static const struct {
        const char *name;
        size_t offset;
    } exclusive[] = {
        { "--runtime", offsetof(RawOpts, runtime) },
        { "--iodepth", offsetof(RawOpts, iodepth) },
        { "--rate", offsetof(RawOpts, rate) },
        { "--count", offsetof(RawOpts, count) },
    };
    unsigned n = r->phases ? g_strv_length(r->phases) : 0, i;
    double total = 0;

    if (n == 0) {
        return true;
    }
    for (i = 0; i < G_N_ELEMENTS(exclusive); i++) {
        if (*(char *const *)((const char *)r + exclusive[i].offset)) {
            error_setg(errp, "--phase: not with %s (the phases give the "
                       "load and the length of the run)", exclusive[i].name);
            return false;
        }
    }
    if (o->queues != 1) {
        error_setg(errp, "--phase: only with one queue (--queues 1), got "
                   "--queues %u", o->queues);
        return false;
    }
    o->phases = g_new0(BenchPhase, n);
    o->nphases = n;
    for (i = 0; i < n; i++) {
        BenchPhase *p = &o->phases[i];

        if (!bench_parse_phase(r->phases[i], p, errp)) {
            return false;
        }
        total += p->seconds;
        if (p->load == LOAD_QD) {
            o->phase_max_qd = MAX(o->phase_max_qd, p->iodepth);
        }
        o->phase_rate |= p->load == LOAD_RATE;
    }
    o->runtime = total;
    o->have_deadline = true;
    return true;
}

/* --device and --lun: which device, and for virtio-scsi which LUN. */
static bool convert_device(const RawOpts *r, BenchOpts *o, Error **errp)
{
    int dev = o->device;
    uint64_t v;

    if (!parse_enum("--device", r->device, vuf_device_names,
                    VUF_DEVICE_NAMES, &dev, errp)) {
        return false;
    }
    o->device = dev;
    if (r->lun) {
        if (o->device != VUF_DEVICE_SCSI) {
            error_setg(errp, "--lun: only with --device=scsi");
            return false;
        }
        /* The LUNs the virtio-scsi address format can carry. */
        if (!cli_parse_uint("--lun", r->lun, 0, 16383, &v, errp)) {
            return false;
        }
        o->lun = v;
    }
    return true;
}

static bool convert_opts(const RawOpts *r, BenchOpts *o, Error **errp)
{
    int rw = o->rw, completion = o->completion;

    if (!r->socket) {
        error_setg(errp, "--socket PATH is required");
        return false;
    }
    if (!convert_device(r, o, errp)) {
        return false;
    }
    o->socket = g_strdup(r->socket);
    o->verify = r->verify;
    o->json = r->json;
    o->no_event_idx = r->no_event_idx;
    o->no_indirect = r->no_indirect;
    o->dirty_log = r->dirty_log;
    if (r->dirty_log_sync && !r->dirty_log) {
        error_setg(errp, "--dirty-log-sync needs --dirty-log");
        return false;
    }
    if (!parse_enum("--rw", r->rw, rw_names, RW_RANDRW + 1, &rw, errp) ||
        !parse_enum("--completion", r->completion, vuf_completion_names,
                    VUF_COMPLETION_NAMES, &completion, errp)) {
        return false;
    }
    o->rw = rw;
    o->completion = completion;
    if (!convert_sizes(r, o, errp) || !convert_numbers(r, o, errp) ||
        !convert_times(r, o, errp) || !convert_phases(r, o, errp)) {
        return false;
    }
    if (r->require &&
        !parse_features(r->require, o->device, &o->required, errp)) {
        return false;
    }
    return !r->cpus || parse_cpus(r->cpus, o, errp);
}

bool bench_parse_command_line(int argc, char **argv, BenchOpts *o,
                              Error **errp)
{
    RawOpts r = { 0 };
    GOptionEntry entries[] = {
        { "socket", 0, 0, G_OPTION_ARG_STRING, &r.socket,
          "vhost-user socket of the back-end (required)", "PATH" },
        { "device", 0, 0, G_OPTION_ARG_STRING, &r.device,
          "blk (vhost-user-blk, default) or scsi (vhost-user-scsi)", "TYPE" },
        { "lun", 0, 0, G_OPTION_ARG_STRING, &r.lun,
          "With --device=scsi: the LUN to drive (default 0)", "N" },
        { "queues", 0, 0, G_OPTION_ARG_STRING, &r.queues,
          "Queues, one thread each (default 1)", "N" },
        { "cpus", 0, 0, G_OPTION_ARG_STRING, &r.cpus,
          "Pin queue thread i to the (i mod n)-th CPU of LIST (0,2 or 0-3)",
          "LIST" },
        { "rw", 0, 0, G_OPTION_ARG_STRING, &r.rw,
          "randread (default), randwrite, read, write or randrw", "MODE" },
        { "rwmixread", 0, 0, G_OPTION_ARG_STRING, &r.rwmixread,
          "Percent of reads with randrw (default 50)", "PCT" },
        { "bs", 0, 0, G_OPTION_ARG_STRING, &r.bs,
          "Bytes per request, a multiple of 512 (default 4k)", "SIZE" },
        { "iodepth", 0, 0, G_OPTION_ARG_STRING, &r.iodepth,
          "Requests in flight per queue (closed loop, default 1); with "
          "--rate the cap (default: what fits in the queue)", "N" },
        { "rate", 0, 0, G_OPTION_ARG_STRING, &r.rate,
          "Open loop: Poisson arrivals per second per queue", "IOPS" },
        { "runtime", 0, 0, G_OPTION_ARG_STRING, &r.runtime,
          "Measured seconds (default 5; none with --count alone)",
          "SECONDS" },
        { "count", 0, 0, G_OPTION_ARG_STRING, &r.count,
          "Stop each queue after N measured I/Os", "N" },
        { "ramp", 0, 0, G_OPTION_ARG_STRING, &r.ramp,
          "Unmeasured warm-up seconds (default 0)", "SECONDS" },
        { "size", 0, 0, G_OPTION_ARG_STRING, &r.size,
          "Bytes of the disk to use (default: all after --offset)", "SIZE" },
        { "offset", 0, 0, G_OPTION_ARG_STRING, &r.offset,
          "Start of the region used (default 0)", "SIZE" },
        { "completion", 0, 0, G_OPTION_ARG_STRING, &r.completion,
          "poll (spin on the used ring, default) or interrupt (block on "
          "the call eventfd)", "MODE" },
        { "verify", 0, 0, G_OPTION_ARG_NONE, &r.verify,
          "Write self-checking blocks and check every read", NULL },
        { "backend-pid", 0, 0, G_OPTION_ARG_STRING, &r.backend_pid,
          "Report this process's CPU time per I/O", "PID" },
        { "json", 0, 0, G_OPTION_ARG_NONE, &r.json,
          "Print one JSON object", NULL },
        { "queue-size", 0, 0, G_OPTION_ARG_STRING, &r.queue_size,
          "Descriptors per queue, a power of 2 (default 256)", "N" },
        { "no-event-idx", 0, 0, G_OPTION_ARG_NONE, &r.no_event_idx,
          "Do not negotiate RING_EVENT_IDX", NULL },
        { "no-indirect", 0, 0, G_OPTION_ARG_NONE, &r.no_indirect,
          "Do not negotiate RING_INDIRECT_DESC", NULL },
        { "dirty-log", 0, 0, G_OPTION_ARG_NONE, &r.dirty_log,
          "Run with dirty page logging on, as during a live migration "
          "(needs LOG_SHMFD)", NULL },
        { "dirty-log-sync", 0, 0, G_OPTION_ARG_STRING, &r.dirty_log_sync,
          "With --dirty-log: read and clear the log every MS (default "
          "100; 0: never)", "MS" },
        { "require", 0, 0, G_OPTION_ARG_STRING, &r.require,
          "Fail unless the back-end offers these features", "NAME[,NAME]" },
        { "seed", 0, 0, G_OPTION_ARG_STRING, &r.seed,
          "Seed of the offset and read/write choices (default 1)", "N" },
        { "connect-timeout", 0, 0, G_OPTION_ARG_STRING, &r.connect_timeout,
          "Keep retrying to connect this long (default 0)", "MS" },
        { "phase", 0, 0, G_OPTION_ARG_STRING_ARRAY, &r.phases,
          "Run LOAD (qdN, rate=IOPS or idle) for SECONDS, then the next "
          "--phase, on one connection (instead of --runtime, --iodepth, "
          "--rate)", "SECONDS:LOAD" },
        { NULL }
    };
    g_autoptr(GOptionContext) ctx = g_option_context_new(NULL);
    bool ok;

    g_option_context_set_summary(ctx,
        "Drive a vhost-user-blk or vhost-user-scsi back-end like a guest "
        "driver and\nreport IOPS, latency, kicks and interrupts per I/O and "
        "CPU per I/O.");
    g_option_context_set_description(ctx,
        "Sizes take k, M, G, T suffixes (powers of 1024).  See docs/bench.md.\n"
        "Exit status: 0 ok, 1 the run failed (I/O error, verify mismatch, "
        "the\nback-end hung up), 2 bad options or setup.");
    g_option_context_add_main_entries(ctx, entries, NULL);
    ok = cli_parse_argv(ctx, argc, argv, errp) && convert_opts(&r, o, errp);
    raw_opts_free(&r);
    return ok;
}

void bench_opts_init(BenchOpts *o)
{
    *o = (BenchOpts) {
        .queues = 1,
        .rw = RW_RANDREAD,
        .rwmixread = 50,
        .bs = 4096,
        .runtime = 5,
        .completion = VUF_COMPLETION_POLL,
        .queue_size = VUF_QUEUE_SIZE_DEFAULT,
        .seed = 1,
        .dirty_log_sync_ms = 100,
    };
}

void bench_opts_free(BenchOpts *o)
{
    g_free(o->socket);
    g_free(o->cpus);
    g_free(o->phases);
}

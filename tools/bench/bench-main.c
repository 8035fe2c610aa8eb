/*
 * spindle-bench: drive a vhost-user-blk or vhost-user-scsi back-end the
 * way a guest driver does, and measure it (docs/bench.md is the user's
 * page).
 *
 * This file sets the run up, starts and times it, and holds main().  The
 * rest:
 *   bench-queue.c   one queue: its requests, its thread and its window
 *   bench-opts.c    the command line, checked into a BenchOpts
 *   bench-report.c  the results, merged into a Summary and printed
 *   bench-blk.c     virtio-blk requests and disk geometry
 *   bench-scsi.c    the same over virtio-scsi (READ/WRITE CDBs)
 *   bench-int.h     what these files share
 * and the modules behind bench.h (histogram, --verify contents, CPU time).
 *
 * Theory of operation
 * -------------------
 * Setup (main thread, the vu-frontend control thread).  The options are
 * parsed and checked first, so that a typo fails before the back-end is
 * touched.  The guest memory is sized from the options (every request's
 * data buffer plus the rings, with a margin), then the session is opened
 * step by step (vuf_connect_socket, vuf_negotiate, vuf_setup_queues) so
 * that a refused negotiation can be explained in the user's terms ("the
 * back-end has 2 queues, --queues asks for 4") from what the back-end
 * offered.  The device (a BenchDevOps, --device) then describes the disk:
 * its capacity and block size, and how many data descriptors one request
 * of --bs bytes takes; that fixes the request layout: whether chains go in
 * indirect tables, and so how many requests fit in a ring at once.  Every
 * request of either device is two descriptors (virtio-blk: header and
 * status; virtio-scsi: command and response) plus its data.
 *
 * The region [offset, offset+size) is cut into one bs-aligned slice per
 * queue.  Each queue has a BenchQueue (bench-queue.c): its requests, its
 * PRNG, and its results.  One thread per queue, each optionally pinned,
 * touches nothing but its BenchQueue and its VufQueue, so the data path
 * takes no lock.  The threads wait at a start gate until the main thread
 * has published the common start time t0 (and, with --phase, the start of
 * every phase).
 *
 * The run (main thread).  The measured window starts at t0 + ramp for
 * everybody and ends at the deadline (t0 + ramp + runtime), when every
 * queue has done --count I/Os, or on SIGINT/SIGTERM (bench_stop_requested).
 * The main thread snapshots the back-end's per-thread CPU time (/proc) at
 * the window's start, at each --phase boundary and when every queue has
 * closed its window, then joins the threads.
 *
 * --dirty-log runs the whole session as a live migration's copy phase
 * would: the back-end gets a log (SET_LOG_BASE) and VHOST_F_LOG_ALL with
 * each ring's VHOST_VRING_F_LOG before the threads start, and the main
 * thread, between its other duties, reads and clears the log every
 * --dirty-log-sync ms as QEMU's bitmap sync does.  The front-end does not
 * track what the device should have logged (spindle-vu-client log-dirty
 * does that): the point is what logging costs the back-end.
 *
 * Reporting (main thread, after join): see bench-report.c.  Exit status:
 * 2 for usage and setup errors (nothing measured), 1 when the run failed
 * (an I/O error, a verify mismatch, a hung-up or broken queue), 0
 * otherwise.
 */

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <glib.h>

#include "bench-int.h"

#define EXIT_RUN_FAILED     1
#define EXIT_USAGE          2

#define MEM_MIN             (64ull << 20)
#define MEM_ALIGN           (2ull << 20)

/* Declared in bench-int.h: set by on_stop_signal(). */
atomic_bool bench_stop_requested;

/* ------------------------------------------------------------------------ */
/* Setup                                                                     */

/* The depth asked for, or the default of the loop model (--phase: the
 * deepest phase, or a whole queue for an open loop). */
static uint64_t wanted_depth(const BenchOpts *o)
{
    if (o->nphases) {
        return o->phase_rate ? o->queue_size : MAX(o->phase_max_qd, 1);
    }
    return o->iodepth ? o->iodepth : o->rate > 0 ? o->queue_size : 1;
}

static uint64_t round_up(uint64_t v, uint64_t align)
{
    return (v + align - 1) / align * align;
}

/* Guest memory for every request's buffers and every queue's rings and
 * indirect tables, with a margin for the allocator's alignment. */
static uint64_t bench_mem_size(const BenchOpts *o, unsigned nvq)
{
    uint64_t qs = o->queue_size;
    uint64_t depth = wanted_depth(o);
    uint64_t per_req = round_up(o->bs, 4096) + 4096;
    uint64_t rings = 16 * qs + 8 * qs + 6 + 2 * qs + 6 + 3 * 4096 +
                     16ull * VUF_INDIRECT_MAX_DEFAULT * qs;
    uint64_t total = o->queues * depth * per_req + nvq * rings;

    total += total / 4 + (1u << 20);
    return round_up(MAX(total, MEM_MIN), MEM_ALIGN);
}

static const char *feature_name(VufDeviceType dev, unsigned bit)
{
    const char *name = vuf_device_feature_name(dev, bit);

    return name ? name : "an unnamed feature";
}

/* Replace the library's message when the user's own terms explain it. */
static void explain_negotiation(const BenchDevOps *dev, VuFrontend *fe,
                                const BenchOpts *o, Error **errp)
{
    uint64_t missing = o->required & ~vuf_features_offered(fe);
    uint64_t have;

    if (!vuf_features_offered(fe)) {
        return;                 /* it failed before GET_FEATURES answered */
    }
    if (missing) {
        g_clear_error(errp);
        error_setg(errp, "the back-end does not offer %s",
                   feature_name(dev->type, __builtin_ctzll(missing)));
        return;
    }
    have = dev->queue_count(fe);
    if (have && o->queues > have) {
        g_clear_error(errp);
        error_setg(errp, "the back-end has %" PRIu64 " %s, --queues asks "
                   "for %u", have, dev->queue_noun, o->queues);
    }
}

static VuFrontend *bench_connect(const BenchDevOps *dev, const BenchOpts *o,
                                 Error **errp)
{
    VufOptions vo;
    VuFrontend *fe;

    vuf_options_init_device(&vo, dev->type);
    vo.socket_path = o->socket;
    vo.num_queues = dev->first_vq + o->queues;
    vo.queue_size = o->queue_size;
    vo.completion = o->completion;
    vo.mem_size = bench_mem_size(o, vo.num_queues);
    vo.connect_timeout_ms = o->connect_timeout_ms;
    if (o->no_event_idx) {
        vo.features_wanted &= ~VUF_BIT(VIRTIO_RING_F_EVENT_IDX);
    }
    if (o->no_indirect) {
        vo.features_wanted &= ~VUF_BIT(VIRTIO_RING_F_INDIRECT_DESC);
    }
    vo.features_required |= o->required;
    if (o->dirty_log) {
        vo.protocol_features_wanted |=
            VUF_BIT(VHOST_USER_PROTOCOL_F_LOG_SHMFD);
    }

    fe = vuf_new(&vo, errp);
    if (!fe) {
        return NULL;
    }
    if (!vuf_connect_socket(fe, errp)) {
        vuf_free(fe);
        return NULL;
    }
    if (!vuf_negotiate(fe, errp)) {
        explain_negotiation(dev, fe, o, errp);
        vuf_free(fe);
        return NULL;
    }
    if (!vuf_setup_queues(fe, errp)) {
        vuf_free(fe);
        return NULL;
    }
    return fe;
}

/*
 * Ask the device about the disk, check the region against it and cut it
 * into slices.  The size default (the rest of the disk) needs the
 * capacity.
 */
static bool bench_geometry(Bench *b, BenchOpts *o, Error **errp)
{
    const BenchDisk *d = &b->disk;
    uint64_t cap, blk;

    if (!b->dev->probe(b, o, &b->disk, errp)) {
        return false;
    }
    cap = d->capacity;
    blk = d->block_size;
    if (!d->have_capacity) {
        if (!o->have_size) {
            error_setg(errp, "the back-end does not report its capacity "
                       "(no CONFIG protocol feature): give --size");
            return false;
        }
    } else {
        if (o->offset >= cap ||
            (o->have_size && o->size > cap - o->offset)) {
            if (o->offset) {
                error_setg(errp, "the disk has %" PRIu64 " bytes, --offset %"
                           PRIu64 " + --size %" PRIu64 " asks for %" PRIu64,
                           cap, o->offset, o->size, o->offset + o->size);
            } else {
                error_setg(errp, "the disk has %" PRIu64 " bytes, --size asks "
                           "for %" PRIu64, cap, o->size);
            }
            return false;
        }
        if (!o->have_size) {
            o->size = cap - o->offset;
        }
    }
    if (o->bs % blk || o->offset % blk) {
        error_setg(errp, "the disk's logical block size is %" PRIu64
                   " bytes: --bs and --offset must be multiples of it", blk);
        return false;
    }
    b->slice = o->size / b->nq / o->bs * o->bs;
    if (b->slice == 0) {
        error_setg(errp, "--size %" PRIu64 " is too small: each of the %u "
                   "queues needs at least one --bs block of %" PRIu64
                   " bytes", o->size, b->nq, o->bs);
        return false;
    }
    if (rw_writes(o->rw) && d->read_only) {
        error_setg(errp, "the back-end is read-only, --rw=%s writes",
                   rw_names[o->rw]);
        return false;
    }
    return true;
}

/*
 * How a request is laid out, and how many fit in a ring.  Chains with
 * more than one data descriptor go in an indirect table when that was
 * negotiated, as Linux does; so do single ones when direct chains would
 * not leave room for the depth.  A device may also limit the requests in
 * flight on the disk (virtio-scsi's cmd_per_lun): a driver stays below.
 */
static bool bench_layout(Bench *b, const BenchOpts *o, Error **errp)
{
    VufQueue *q = vuf_queue(b->fe, b->dev->first_vq);
    uint64_t segs = b->disk.data_segs, chain, per_req, fit;
    uint64_t limit = b->disk.inflight_max;
    bool indirect_ok;

    chain = segs + 2;
    indirect_ok = vuf_has_feature(b->fe, VIRTIO_RING_F_INDIRECT_DESC) &&
                  chain <= vufq_max_segs(q, VUFQ_ADD_INDIRECT);
    b->add_flags = 0;
    if (indirect_ok &&
        (segs > 1 || wanted_depth(o) * chain > o->queue_size)) {
        b->add_flags = VUFQ_ADD_INDIRECT;
    }
    per_req = b->add_flags ? 1 : chain;
    fit = o->queue_size / per_req;
    if (fit == 0) {
        error_setg(errp, "--bs %" PRIu64 " takes chains of %" PRIu64
                   " descriptors, more than the queue's %u: raise "
                   "--queue-size", o->bs, chain, o->queue_size);
        return false;
    }
    if (o->iodepth > fit || o->phase_max_qd > fit) {
        unsigned qd = MAX(o->iodepth, o->phase_max_qd);

        error_setg(errp, "%s %u needs %" PRIu64 " descriptors per "
                   "queue (%" PRIu64 " per request) but a queue has %u: "
                   "raise --queue-size", o->nphases ? "--phase qd"
                   : "--iodepth", qd, qd * per_req, per_req, o->queue_size);
        return false;
    }
    if (limit && o->iodepth && (uint64_t)o->iodepth * b->nq > limit) {
        error_setg(errp, "--iodepth %u x %u queues is more than the %" PRIu64
                   " commands the device takes in flight (cmd_per_lun)",
                   o->iodepth, b->nq, limit);
        return false;
    }
    if (limit && o->phase_max_qd > limit) {
        error_setg(errp, "--phase qd%u is more than the %" PRIu64 " commands "
                   "the device takes in flight (cmd_per_lun)",
                   o->phase_max_qd, limit);
        return false;
    }
    if (o->nphases) {
        b->depth = o->phase_rate ? fit : MAX(o->phase_max_qd, 1);
    } else {
        b->depth = o->iodepth ? o->iodepth : o->rate > 0 ? fit : 1;
    }
    if (limit && b->depth > MAX(limit / b->nq, 1)) {
        b->depth = MAX(limit / b->nq, 1);       /* --rate's default cap */
    }
    /* --verify keeps one request per chunk. */
    if (o->verify && b->depth > b->slice / o->bs) {
        b->depth = b->slice / o->bs;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Running                                                                   */

static void on_stop_signal(int sig)
{
    atomic_store_explicit(&bench_stop_requested, true, memory_order_relaxed);
}

static void install_signal_handlers(void)
{
    struct sigaction sa = { .sa_handler = on_stop_signal };

    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static void sleep_until(uint64_t t)
{
    struct timespec ts = ns_to_timespec(t);

    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
           EINTR) {
        if (atomic_load_explicit(&bench_stop_requested, memory_order_relaxed)) {
            return;
        }
    }
}

static bool start_thread(Bench *b, BenchQueue *bq, Error **errp)
{
    pthread_attr_t attr;
    int err;

    pthread_attr_init(&attr);
    if (bq->cpu >= 0) {
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(bq->cpu, &set);
        pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
    }
    err = pthread_create(&bq->thread, &attr, bench_queue_thread, bq);
    pthread_attr_destroy(&attr);
    if (err) {
        error_setg_errno(errp, err, "cannot start the thread of queue %u",
                         bq->index);
        return false;
    }
    return true;
}

/* Take a back-end snapshot; a failure here only loses that figure. */
static CpuSnapshot *snapshot(const BenchOpts *o)
{
    Error *err = NULL;
    CpuSnapshot *s;

    if (!o->backend_pid ||
        atomic_load_explicit(&bench_stop_requested, memory_order_relaxed)) {
        return NULL;
    }
    s = cpu_snapshot_take(o->backend_pid, &err);
    if (!s) {
        fprintf(stderr, "spindle-bench: back-end CPU: %s\n",
                error_get_pretty(err));
        error_free(err);
    }
    return s;
}

/*
 * Start the threads, time the window and take the back-end's CPU
 * snapshots at its edges, join.  Thread start failures are setup errors.
 */
static void open_gate(Bench *b, int go)
{
    pthread_mutex_lock(&b->lock);
    b->go = go;
    pthread_cond_broadcast(&b->start);
    pthread_mutex_unlock(&b->lock);
}

/* Wait until every queue's window has closed (true) or until t (false;
 * UINT64_MAX: no limit). */
static bool wait_closed_until(Bench *b, uint64_t t)
{
    bool all;

    pthread_mutex_lock(&b->lock);
    while (b->closed < b->nq) {
        if (t == UINT64_MAX) {
            pthread_cond_wait(&b->cond, &b->lock);
        } else {
            struct timespec ts = ns_to_timespec(t);

            if (pthread_cond_timedwait(&b->cond, &b->lock, &ts) ==
                ETIMEDOUT) {
                break;
            }
        }
    }
    all = b->closed >= b->nq;
    pthread_mutex_unlock(&b->lock);
    return all;
}

/* --dirty-log: one sync, as QEMU's: read and clear the log, count. */
static void log_sync(Bench *b)
{
    size_t words = vuf_log_words(b->fe);

    vuf_log_take_dirty(b->fe, b->log_bits);
    for (size_t w = 0; w < words; w++) {
        b->log_pages += __builtin_popcountll(b->log_bits[w]);
    }
    b->log_syncs++;
}

/*
 * wait_closed_until(), syncing the dirty log every --dirty-log-sync ms
 * meanwhile when --dirty-log asks for it.
 */
static bool wait_closed_syncing(Bench *b, uint64_t t)
{
    uint64_t period = (uint64_t)b->o->dirty_log_sync_ms * 1000000;

    if (!b->o->dirty_log || period == 0) {
        return wait_closed_until(b, t);
    }
    for (;;) {
        uint64_t now = now_ns();

        if (now >= t) {
            return false;
        }
        if (wait_closed_until(b, t - now > period ? now + period : t)) {
            return true;
        }
        log_sync(b);
    }
}

/* --phase: the phases back to back from the window start. */
static void set_phase_starts(Bench *b)
{
    const BenchOpts *o = b->o;
    double elapsed = 0;
    unsigned k;

    if (!o->nphases) {
        return;
    }
    for (k = 0; k < o->nphases; k++) {
        b->phase_start[k] = b->win_start + (uint64_t)(elapsed * NS_PER_S);
        elapsed += o->phases[k].seconds;
    }
    b->phase_start[o->nphases] = b->deadline;
}

static bool bench_run(Bench *b, CpuWindow *cpu, Error **errp)
{
    const BenchOpts *o = b->o;
    pthread_condattr_t ca;
    unsigned i, started = 0;
    bool ok = true;

    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&b->start, NULL);
    pthread_mutex_init(&b->lock, NULL);
    for (i = 0; i < b->nq && ok; i++) {
        ok = start_thread(b, &b->queues[i], errp);
        started += ok;
    }
    if (!ok) {
        open_gate(b, -1);
        for (i = 0; i < started; i++) {
            pthread_join(b->queues[i].thread, NULL);
        }
        return false;
    }
    install_signal_handlers();
    if (o->ramp == 0) {
        cpu->start = snapshot(o);
    }
    b->t0 = now_ns();
    b->win_start = b->t0 + (uint64_t)(o->ramp * NS_PER_S);
    b->deadline = o->have_deadline
                  ? b->win_start + (uint64_t)(o->runtime * NS_PER_S)
                  : UINT64_MAX;
    set_phase_starts(b);
    open_gate(b, 1);
    if (o->ramp > 0) {
        sleep_until(b->win_start);
        cpu->start = snapshot(o);
    }
    /* --phase: the back-end's CPU at each boundary inside the window. */
    for (i = 1; i < o->nphases; i++) {
        if (wait_closed_syncing(b, b->phase_start[i])) {
            break;
        }
        if (cpu->start) {
            cpu->phase[i] = snapshot(o);
        }
    }
    wait_closed_syncing(b, b->deadline);
    if (cpu->start) {
        cpu->end = snapshot(o);
    }
    if (o->dirty_log) {
        log_sync(b);            /* what the last period dirtied */
    }
    for (i = 0; i < b->nq; i++) {
        pthread_join(b->queues[i].thread, NULL);
    }
    pthread_cond_destroy(&b->start);
    pthread_cond_destroy(&b->cond);
    pthread_mutex_destroy(&b->lock);
    return true;
}

/* ------------------------------------------------------------------------ */
/* main                                                                      */

static int usage_error(Error *err)
{
    fprintf(stderr, "spindle-bench: %s\n", error_get_pretty(err));
    error_free(err);
    return EXIT_USAGE;
}

/* Connect, check the geometry and layout, allocate the queues. */
static bool bench_setup(Bench *b, BenchOpts *o, Error **errp)
{
    unsigned i;

    if (o->backend_pid) {
        /* Fail now, not after the run, on a wrong PID. */
        CpuSnapshot *s = cpu_snapshot_take(o->backend_pid, errp);

        if (!s) {
            error_prepend(errp, "--backend-pid: ");
            return false;
        }
        cpu_snapshot_free(s);
    }
    b->dev = o->device == VUF_DEVICE_SCSI ? &bench_dev_scsi : &bench_dev_blk;
    b->fe = bench_connect(b->dev, o, errp);
    if (!b->fe || !bench_geometry(b, o, errp) ||
        !bench_layout(b, o, errp)) {
        return false;
    }
    if (o->rate > 0) {
        b->rate_mean_ns = MAX(1, (uint64_t)(1e9 / o->rate));
    }
    b->open_loop = b->rate_mean_ns || o->phase_rate;
    if (o->nphases) {
        b->phase_start = g_new0(uint64_t, o->nphases + 1);
    }
    b->queues = g_new0(BenchQueue, b->nq);
    for (i = 0; i < b->nq; i++) {
        if (!bench_queue_init(b, &b->queues[i], i, errp)) {
            error_prepend(errp, "%u queues x %u requests of %" PRIu64
                          " bytes: ", b->nq, b->depth, o->bs);
            return false;
        }
    }
    if (o->dirty_log) {
        if (!vuf_log_start_untracked(b->fe, 0, errp)) {
            error_prepend(errp, "--dirty-log: ");
            return false;
        }
        b->log_bits = g_new0(uint64_t, vuf_log_words(b->fe));
    }
    return true;
}

static void cpu_window_free(CpuWindow *cpu, unsigned nphases)
{
    unsigned k;

    cpu_snapshot_free(cpu->start);
    cpu_snapshot_free(cpu->end);
    for (k = 0; cpu->phase && k < nphases; k++) {
        cpu_snapshot_free(cpu->phase[k]);
    }
    g_free(cpu->phase);
}

static void bench_teardown(Bench *b)
{
    unsigned i;

    for (i = 0; b->queues && i < b->nq; i++) {
        bench_queue_fini(b, &b->queues[i]);
    }
    g_free(b->queues);
    g_free(b->phase_start);
    g_free(b->log_bits);
    vuf_free(b->fe);
}

int main(int argc, char **argv)
{
    BenchOpts o;
    Bench b = { .o = &o };
    CpuWindow cpu = { 0 };
    Summary s = { 0 };
    Error *err = NULL;
    int status;
    guint i;

    bench_opts_init(&o);
    if (!bench_parse_command_line(argc, argv, &o, &err)) {
        bench_opts_free(&o);
        return usage_error(err);
    }
    b.nq = o.queues;
    if (o.nphases) {
        cpu.phase = g_new0(CpuSnapshot *, o.nphases);
    }
    if (!bench_setup(&b, &o, &err) || !bench_run(&b, &cpu, &err)) {
        cpu_window_free(&cpu, o.nphases);
        bench_teardown(&b);
        bench_opts_free(&o);
        return usage_error(err);
    }
    bench_summarize(&b, &cpu, &s);
    status = s.failures->len ? EXIT_RUN_FAILED : EXIT_SUCCESS;
    if (o.json) {
        bench_print_json(&b, &s, status);
    } else {
        bench_print_text(&b, &s);
    }
    fflush(stdout);
    for (i = 0; i < s.failures->len; i++) {
        fprintf(stderr, "spindle-bench: %s\n", (char *)s.failures->pdata[i]);
    }
    bench_summary_free(&s, o.nphases);
    cpu_window_free(&cpu, o.nphases);
    bench_teardown(&b);
    bench_opts_free(&o);
    return status;
}

/*
 * spindle-bench: drive a vhost-user-blk or vhost-user-scsi back-end the
 * way a guest driver does, and measure it (docs/bench.md is the user's
 * page).
 *
 * This file sets the run up, drives it and holds main().  The rest:
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
 * queue.  Each queue has a BenchQueue: its requests (Slots, allocated here
 * in guest memory), its PRNG, and its results.  One thread per queue, each
 * optionally pinned, touches nothing but its BenchQueue and its VufQueue,
 * so the data path takes no lock.  The threads wait at a start gate until
 * the main thread has published the common start time t0.
 *
 * The run (queue threads).  queue_run() is one loop: look at the clock,
 * open or close the measured window, submit what the load model allows,
 * kick once per batch (vufq_kick honours the device's suppression, so a
 * kick avoided is a VM exit a real guest would have saved), harvest every
 * completion that is ready, and when there is none, wait:
 * - closed loop (--iodepth): keep iodepth requests in flight; latency runs
 *   from the submission;
 * - open loop (--rate): requests arrive as a Poisson process and latency
 *   runs from the scheduled arrival, so that time spent waiting for a free
 *   request (a backlog) counts, as it would for an application; arrivals
 *   are generated lazily in order, so a backlog needs no memory.
 * Waiting is like the guest's completion detection: poll mode spins on the
 * used ring (vufq_wait, or our own spin while an open-loop arrival is due
 * soon); interrupt mode blocks on the call eventfd (vufq_wait, or, when
 * the next arrival must not be late by vufq_wait's millisecond rounding,
 * ppoll on vufq_call_fd() until just before it; see
 * wait_interrupt_until()).
 *
 * With --phase the load changes during the run, on the same connection
 * (one queue): phase k runs from phase_start[k] to phase_start[k + 1],
 * back to back from the window start, and the ramp runs at the first
 * phase's load.  At each boundary the queue thread switches its model
 * (queue_enter_phase(): a closed loop at the phase's depth, Poisson
 * arrivals from the boundary on, or nothing new while what is in flight
 * completes), an I/O belongs to the phase it was submitted (scheduled)
 * in, and the main thread snapshots the back-end's CPU time.
 *
 * The measured window starts at t0 + ramp for everybody and ends at the
 * deadline (t0 + ramp + runtime), when every queue has done --count I/Os,
 * or on SIGINT/SIGTERM.  An I/O counts if it was submitted (or, open loop,
 * scheduled) inside the window and completed inside it.  At its window
 * start each thread resets its queue statistics and notes its own CPU
 * time; at its window end it reads them back, so kicks, interrupts and
 * bench CPU cover the window only.  The main thread snapshots the
 * back-end's per-thread CPU time (/proc) at the same two moments.  After
 * the window each thread drains what is still in flight without counting
 * it, and with --verify and a write-only mode reads back every block it
 * wrote.
 *
 * --verify.  Every sector written carries a header (bench.h); per chunk
 * the thread keeps the last generation it wrote and never has two requests
 * in flight on one chunk, so the expected contents of a read are known
 * whatever the completion order.
 *
 * Reporting (main thread, after join): see bench-report.c.  Exit status:
 * 2 for usage and setup errors (nothing measured), 1 when the run failed
 * (an I/O error, a verify mismatch, a hung-up or broken queue), 0
 * otherwise.
 */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>

#include "bench-int.h"
#include "util/clock.h"
#include "util/cutils.h"

#define EXIT_RUN_FAILED     1
#define EXIT_USAGE          2

/* Longest single wait, so that a stop request or a hang-up is noticed. */
#define WAIT_SLICE_NS       (100 * 1000000ull)
/* How often our own open-loop spin looks for a hung-up back-end. */
#define HANGUP_CHECK_NS     (100 * 1000000ull)
/* Open loop, interrupt mode: the most we spin before an arrival. */
#define WAKE_MARGIN_MAX_NS  (200 * 1000ull)
#define WAKE_MARGIN_INIT_NS (20 * 1000ull)
/* --verify: random picks of a busy chunk before scanning for a free one. */
#define PICK_TRIES          4
#define MEM_MIN             (64ull << 20)
#define MEM_ALIGN           (2ull << 20)

/* Set by SIGINT/SIGTERM: end the window now and report. */
static atomic_bool stop_requested;

/* ------------------------------------------------------------------------ */
/* Slots and helpers (BenchQueue and Bench are in bench-int.h)               */

/* One request and what it was for. */
struct Slot {
    void *req;                  /* the device's (BenchDevOps) */
    uint8_t *data;              /* its data buffer, bs bytes */
    uint64_t chunk;             /* index in the queue's slice */
    uint64_t start_ns;          /* submission, or scheduled arrival */
    unsigned phase;             /* --phase in force then */
    uint32_t gen;               /* --verify: written, or expected by a read */
    bool write;
    bool measured;              /* started inside the window */
};

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static struct timespec ns_to_timespec(uint64_t ns)
{
    return (struct timespec) {
        .tv_sec = ns / NS_PER_S,
        .tv_nsec = ns % NS_PER_S,
    };
}

static bool rw_writes(BenchRw rw)
{
    return rw == RW_RANDWRITE || rw == RW_WRITE || rw == RW_RANDRW;
}

static bool rw_sequential(BenchRw rw)
{
    return rw == RW_READ || rw == RW_WRITE;
}

/* ------------------------------------------------------------------------ */
/* Per-thread random numbers (xorshift64*, seeded through splitmix64)        */

static uint64_t rng_next(uint64_t *s)
{
    return xorshift64star(s);
}

/* Uniform in [0, n): the high half of a 64x64 product, no division. */
static uint64_t rng_below(uint64_t *s, uint64_t n)
{
    return ((unsigned __int128)rng_next(s) * n) >> 64;
}

/* An exponentially distributed interval with the given mean. */
static uint64_t rng_exp_ns(uint64_t *s, uint64_t mean_ns)
{
    double u = (rng_next(s) >> 11) * 0x1.0p-53;     /* [0, 1) */

    return -log1p(-u) * mean_ns;
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */

static uint64_t pick_chunk(BenchQueue *bq)
{
    const BenchOpts *o = bq->b->o;
    uint64_t c;
    unsigned i;

    if (rw_sequential(o->rw)) {
        c = bq->seq_next;
        while (o->verify && bq->busy[c]) {
            c = (c + 1) % bq->nchunks;
        }
        bq->seq_next = (c + 1) % bq->nchunks;
        return c;
    }
    c = rng_below(&bq->rng, bq->nchunks);
    if (!o->verify) {
        return c;
    }
    /* Depth <= chunks, so a free chunk exists; a busy pick tries again a
     * few times (keeping the choice uniform in the common case) and then
     * takes the next free one. */
    for (i = 1; bq->busy[c] && i < PICK_TRIES; i++) {
        c = rng_below(&bq->rng, bq->nchunks);
    }
    while (bq->busy[c]) {
        c = (c + 1) % bq->nchunks;
    }
    return c;
}

static bool pick_write(BenchQueue *bq)
{
    const BenchOpts *o = bq->b->o;

    if (o->rw == RW_RANDRW) {
        return rng_below(&bq->rng, 100) >= o->rwmixread;
    }
    return rw_writes(o->rw);
}

/* Make every sector of buf lack the header, so that a read the device
 * completes without writing the data cannot pass for the expected data. */
static void scribble(uint8_t *buf, size_t len)
{
    size_t i;

    for (i = 0; i < len; i += VERIFY_SECTOR) {
        memset(buf + i, 0, 4);
    }
}

static void slot_prepare(BenchQueue *bq, Slot *s, uint64_t chunk, bool write)
{
    const BenchOpts *o = bq->b->o;
    uint64_t off = bq->base + chunk * o->bs;

    s->chunk = chunk;
    s->write = write;
    if (write) {
        if (o->verify) {
            s->gen = bq->gen[chunk] + 1 ? bq->gen[chunk] + 1 : 1;
            bq->gen[chunk] = s->gen;
            verify_fill(s->data, off, o->bs, s->gen);
        }
    } else if (o->verify) {
        s->gen = bq->gen[chunk];
        scribble(s->data, o->bs);
    }
    if (o->verify) {
        bq->busy[chunk] = 1;
    }
}

static void record_error(BenchQueue *bq, const Slot *s,
                         const BenchIoError *e)
{
    bq->errors++;
    if (!bq->have_error) {
        bq->have_error = true;
        bq->error_write = s->write;
        bq->error_offset = bq->base + s->chunk * bq->b->o->bs;
        bq->error = *e;
    }
}

static void check_read(BenchQueue *bq, const Slot *s)
{
    uint64_t bs = bq->b->o->bs;
    VerifyMismatch m;
    unsigned bad;

    bad = verify_check(s->data, bq->base + s->chunk * bs, bs, s->gen,
                       &m);
    bq->sectors_checked += bs / VERIFY_SECTOR;
    if (bad) {
        bq->bad_sectors += bad;
        if (!bq->have_mismatch) {
            bq->have_mismatch = true;
            bq->mismatch = m;
        }
    }
}

static void queue_close_window(BenchQueue *bq, uint64_t end);

/* Account for one completed request seen at time t and free its slot. */
static void slot_complete(BenchQueue *bq, Slot *s, uint64_t t)
{
    const BenchOpts *o = bq->b->o;
    BenchIoError e;
    bool ok = bq->b->dev->check(s->req, &e);

    if (!ok) {
        record_error(bq, s, &e);
        if (o->verify && s->write) {
            bq->gen[s->chunk] = 0;  /* old or new contents: either valid */
        }
    } else if (o->verify && !s->write) {
        check_read(bq, s);
    }
    if (o->verify) {
        bq->busy[s->chunk] = 0;
    }
    if (s->measured && !bq->closed && t < bq->b->deadline) {
        bq->completed++;
        if (ok) {
            bq->ios++;
            if (s->write) {
                bq->writes++;
            } else {
                bq->reads++;
            }
            lat_hist_add(bq->hist, t - s->start_ns);
            if (bq->phase_hist) {
                bq->phase_ios[s->phase]++;
                lat_hist_add(bq->phase_hist[s->phase], t - s->start_ns);
            }
        }
        if (o->count && bq->completed >= o->count) {
            queue_close_window(bq, t);
        }
    }
    bq->free_slots[bq->nfree++] = s - bq->slots;
}

/* Harvest every completion that is ready; returns how many, or -errno. */
static int queue_harvest(BenchQueue *bq)
{
    bool was_full = bq->nfree == 0;
    unsigned n = 0, i;
    uint64_t t;
    int r;

    for (;;) {
        void *slot;

        r = bq->b->dev->complete(bq->q, &slot);
        if (r < 0) {
            return r;
        }
        if (r == 0) {
            break;
        }
        bq->ready[n++] = slot;
    }
    if (n == 0) {
        return 0;
    }
    /* One timestamp for the batch: every element was already complete
     * when we looked, and checking data must not age the later ones. */
    t = now_ns();
    bq->last_progress = t;
    if (was_full) {
        bq->full_until = t;
    }
    for (i = 0; i < n; i++) {
        slot_complete(bq, bq->ready[i], t);
    }
    return n;
}

static int queue_submit_slot(BenchQueue *bq, uint64_t chunk, bool write,
                             uint64_t start, bool measured)
{
    unsigned k = bq->free_slots[bq->nfree - 1];
    Slot *s = &bq->slots[k];
    int r;

    slot_prepare(bq, s, chunk, write);
    s->start_ns = start ? start : now_ns();
    s->measured = measured;
    s->phase = bq->phase;
    r = bq->b->dev->submit(bq, s->req, (uint64_t)bq->index << 32 | k, write,
                           bq->base + chunk * bq->b->o->bs);
    if (r < 0) {
        return r;
    }
    bq->nfree--;
    if (measured) {
        bq->started++;
    }
    if (measured && start) {
        /* How late the arrival went out: the bench's own part of the
         * latency (wake-up, a backlog), reported so it can be judged. */
        bq->arrivals++;
        lat_hist_add(bq->lag_hist, now_ns() - start);
    }
    return 0;
}

/* May another measured request start?  With --count, no more than will
 * be counted: I/O past the count would only be drained. */
static bool queue_may_start(BenchQueue *bq)
{
    uint64_t count = bq->b->o->count;

    return !bq->measuring || !count || bq->started < count;
}

/* Closed loop: keep bq->qd requests in flight (every slot without
 * --phase). */
static int queue_submit_closed(BenchQueue *bq)
{
    unsigned n = 0;
    int r;

    while (bq->nfree && bq->b->depth - bq->nfree < bq->qd &&
           queue_may_start(bq)) {
        r = queue_submit_slot(bq, pick_chunk(bq), pick_write(bq), 0,
                              bq->measuring);
        if (r < 0) {
            return r;
        }
        n++;
    }
    return n ? vufq_kick(bq->q) : 0;
}

/* Open loop: start every arrival that is due, while a slot is free. */
static int queue_submit_open(BenchQueue *bq, uint64_t now)
{
    const Bench *b = bq->b;
    unsigned n = 0;
    int r;

    while (bq->next_arrival <= now && bq->nfree && queue_may_start(bq)) {
        uint64_t at = bq->next_arrival;
        bool measured = bq->measuring && at >= b->win_start;

        /* Due before the queue last stopped being full: it waited. */
        if (measured && at < bq->full_until) {
            bq->backlogged++;
        }
        r = queue_submit_slot(bq, pick_chunk(bq), pick_write(bq), at,
                              measured);
        if (r < 0) {
            return r;
        }
        bq->next_arrival += rng_exp_ns(&bq->rng, bq->rate_mean_ns);
        n++;
    }
    return n ? vufq_kick(bq->q) : 0;
}

/* ------------------------------------------------------------------------ */
/* Waiting                                                                   */

static bool socket_hung_up(VuFrontend *fe)
{
    struct pollfd pfd = { .fd = vuf_socket_fd(fe), .events = POLLRDHUP };

    return pfd.fd < 0 ||
           (poll(&pfd, 1, 0) > 0 &&
            (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)));
}

/*
 * Interrupt mode, waiting for an open-loop arrival: arm and re-check
 * through the library, then block on the call eventfd (and the socket, for
 * a hang-up) with ppoll's ns timeout.
 *
 * Waking from a timed sleep costs from a few to tens of microseconds, and
 * an arrival sent out late counts as the back-end's latency.  So we sleep
 * until wake_margin before the arrival and let the main loop spin the rest
 * (harvesting as it goes, as an awake guest would).  The margin follows
 * twice the moving average of how late our timed wake-ups are.
 *
 * Returns 0 (something may be ready), -ETIMEDOUT or -errno.
 */
static int wait_interrupt_until(BenchQueue *bq, uint64_t until)
{
    struct pollfd pfd[2] = {
        { .fd = vufq_call_fd(bq->q), .events = POLLIN },
        { .fd = vuf_socket_fd(bq->b->fe), .events = POLLRDHUP },
    };
    uint64_t now, wake;
    struct timespec ts;
    int r = vufq_wait(bq->q, 0);

    if (r != -ETIMEDOUT) {
        return r;
    }
    now = now_ns();
    if (now + bq->wake_margin >= until) {
        cpu_relax();
        return -ETIMEDOUT;
    }
    wake = until - bq->wake_margin;
    ts = ns_to_timespec(wake - now);
    r = ppoll(pfd, 2, &ts, NULL);
    if (r == 0) {
        uint64_t woke = now_ns(), late = woke > wake ? woke - wake : 0;

        bq->wake_late_avg = (7 * bq->wake_late_avg + late) / 8;
        bq->wake_margin = MIN(2 * bq->wake_late_avg, WAKE_MARGIN_MAX_NS);
        return -ETIMEDOUT;
    }
    if (r < 0) {
        return errno == EINTR ? 0 : -errno;
    }
    if (r > 0 && (pfd[0].revents & POLLIN)) {
        vufq_collect_interrupts(bq->q);
        return 0;
    }
    if (r > 0 && pfd[1].revents) {
        return vufq_wait(bq->q, 0) == 0 ? 0 : -ECONNRESET;
    }
    return -ETIMEDOUT;
}

/* Wait for a completion or until `until`, whichever comes first, at most
 * one slice.  Returns 0, -ETIMEDOUT or -errno (hung up, broken). */
static int queue_wait(BenchQueue *bq, uint64_t now, uint64_t until,
                      bool precise)
{
    bool poll_mode = bq->b->o->completion == VUF_COMPLETION_POLL;

    until = MIN(until, now + WAIT_SLICE_NS);
    if (!precise) {
        return vufq_wait(bq->q, until > now ? until - now : 0);
    }
    if (!poll_mode) {
        return wait_interrupt_until(bq, until);
    }
    /*
     * Poll mode, an open-loop arrival due soon: vufq_wait() looks at the
     * clock only every thousand spins, too coarse for the arrival, so the
     * loop itself is the spin; it only needs to notice a dead back-end.
     */
    cpu_relax();
    if (now >= bq->next_hangup_check) {
        bq->next_hangup_check = now + HANGUP_CHECK_NS;
        if (socket_hung_up(bq->b->fe)) {
            return -ECONNRESET;
        }
    }
    return -ETIMEDOUT;
}

/* The next moment the loop must act without a completion: the window
 * boundary, the next --phase, or (open loop, a slot free) the next
 * arrival.  *arrival: that moment must be met precisely. */
static uint64_t queue_next_event(BenchQueue *bq, bool *arrival)
{
    const Bench *b = bq->b;
    uint64_t t = bq->measuring ? b->deadline : b->win_start;

    *arrival = false;
    if (b->phase_start && bq->phase + 1 < b->o->nphases &&
        b->phase_start[bq->phase + 1] < t) {
        /* On time, as an arrival: the next phase's load starts then. */
        t = b->phase_start[bq->phase + 1];
        *arrival = true;
    }
    if (bq->rate_mean_ns && bq->nfree && queue_may_start(bq) &&
        bq->next_arrival < t) {
        t = bq->next_arrival;
        *arrival = true;
    }
    return t;
}

/* ------------------------------------------------------------------------ */
/* The window and the thread                                                 */

static void queue_open_window(BenchQueue *bq)
{
    /* Signals from before the window belong to the ramp. */
    vufq_collect_interrupts(bq->q);
    vufq_reset_stats(bq->q);
    bq->cpu_start = cpu_thread_ns();
    bq->measuring = true;
}

static void queue_close_window(BenchQueue *bq, uint64_t end)
{
    Bench *b = bq->b;

    if (bq->closed) {
        return;
    }
    if (bq->measuring) {
        /* In poll mode the device should not have signalled: count it if
         * it did.  In interrupt mode this picks up the last signals. */
        vufq_collect_interrupts(bq->q);
        vufq_get_stats(bq->q, &bq->stats);
        bq->cpu_ns = cpu_thread_ns() - bq->cpu_start;
        bq->win_end = end;
    }
    bq->closed = true;
    pthread_mutex_lock(&b->lock);
    b->closed++;
    pthread_cond_signal(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

/* True when the window is over for this queue (and closes it). */
static bool queue_window_over(BenchQueue *bq, uint64_t now)
{
    const Bench *b = bq->b;

    if (bq->closed) {
        return true;
    }
    if (atomic_load_explicit(&stop_requested, memory_order_relaxed)) {
        queue_close_window(bq, now);
    } else if (bq->measuring && now >= b->deadline) {
        queue_close_window(bq, b->deadline);
    }
    return bq->closed;
}

static int queue_fail(BenchQueue *bq, int r)
{
    bq->fail = -r;
    bq->fail_in_flight = vufq_in_flight(bq->q);
    queue_close_window(bq, now_ns());
    return r;
}

/* Did nothing complete for too long? */
static int queue_check_stall(BenchQueue *bq, uint64_t now)
{
    if (vufq_in_flight(bq->q) && now - bq->last_progress >= STALL_NS) {
        return -ETIMEDOUT;
    }
    return 0;
}

/*
 * Take up phase k's load from time `at` (its start; t0 for the first, so
 * that the ramp runs at its load).  Arrivals of an open loop start afresh
 * from `at`; those of the phase before that did not go out are dropped.
 */
static void queue_enter_phase(BenchQueue *bq, unsigned k, uint64_t at)
{
    const BenchPhase *p = &bq->b->o->phases[k];

    bq->phase = k;
    bq->qd = p->load == LOAD_QD ? p->iodepth : 0;
    bq->rate_mean_ns = p->load == LOAD_RATE
                       ? MAX(1, (uint64_t)(1e9 / p->rate)) : 0;
    if (bq->rate_mean_ns) {
        bq->next_arrival = at + rng_exp_ns(&bq->rng, bq->rate_mean_ns);
    }
}

/* --phase: switch to the phase in force at `now` if that changed. */
static void queue_follow_phases(BenchQueue *bq, uint64_t now)
{
    const Bench *b = bq->b;
    unsigned k = bq->phase;

    while (k + 1 < b->o->nphases && now >= b->phase_start[k + 1]) {
        k++;
    }
    if (k != bq->phase) {
        queue_enter_phase(bq, k, b->phase_start[k]);
    }
}

/* Submit what the load in force allows. */
static int queue_submit(BenchQueue *bq, uint64_t now)
{
    if (bq->rate_mean_ns) {
        return queue_submit_open(bq, now);
    }
    return bq->qd ? queue_submit_closed(bq) : 0;
}

/* The measured run: until the window closes or the queue fails. */
static int queue_run(BenchQueue *bq)
{
    Bench *b = bq->b;
    int r;

    bq->last_progress = b->t0;
    for (;;) {
        uint64_t now = now_ns(), until;
        bool arrival;

        if (!bq->measuring && now >= b->win_start) {
            queue_open_window(bq);
        }
        if (queue_window_over(bq, now)) {
            return 0;
        }
        if (b->phase_start) {
            queue_follow_phases(bq, now);
        }
        r = queue_submit(bq, now);
        if (r >= 0) {
            r = queue_harvest(bq);
        }
        if (r < 0) {
            return queue_fail(bq, r);
        }
        if (r > 0 || bq->closed) {
            continue;
        }
        until = queue_next_event(bq, &arrival);
        r = queue_wait(bq, now, until, arrival);
        if (r == -ETIMEDOUT) {
            r = queue_check_stall(bq, now_ns());
        }
        if (r < 0) {
            return queue_fail(bq, r);
        }
    }
}

/* After the window: wait one slice for completions and harvest them. */
static int queue_wait_harvest(BenchQueue *bq)
{
    int r = vufq_wait(bq->q, WAIT_SLICE_NS);

    if (r == 0) {
        r = queue_harvest(bq);
    } else if (r == -ETIMEDOUT) {
        r = queue_check_stall(bq, now_ns());
    }
    return r < 0 ? r : 0;
}

/* The queue failed after the window with -errno r: note it, return r. */
static int queue_fail_late(BenchQueue *bq, int r)
{
    bq->fail = -r;
    bq->fail_in_flight = vufq_in_flight(bq->q);
    return r;
}

/* Wait for everything in flight, without counting it. */
static int queue_drain(BenchQueue *bq)
{
    int r;

    bq->last_progress = now_ns();
    while (vufq_in_flight(bq->q)) {
        r = queue_wait_harvest(bq);
        if (r < 0) {
            return queue_fail_late(bq, r);
        }
    }
    return 0;
}

/* --verify with writes only: read back and check every chunk written. */
static int queue_read_back(BenchQueue *bq)
{
    uint64_t next = 0;
    int r;

    bq->last_progress = now_ns();
    for (;;) {
        unsigned n = 0;

        while (bq->nfree && next < bq->nchunks) {
            if (bq->gen[next]) {
                r = queue_submit_slot(bq, next, false, 0, false);
                if (r < 0) {
                    goto fail;
                }
                n++;
            }
            next++;
        }
        r = n ? vufq_kick(bq->q) : 0;
        if (r < 0) {
            goto fail;
        }
        if (next >= bq->nchunks) {
            break;
        }
        r = queue_wait_harvest(bq);
        if (r < 0) {
            goto fail;
        }
    }
    return queue_drain(bq);
fail:
    return queue_fail_late(bq, r);
}

static void *queue_thread(void *opaque)
{
    BenchQueue *bq = opaque;
    Bench *b = bq->b;

    /* Timed waits (open loop) must end at the arrival, not up to the
     * default 50 us timer slack later: that lateness would count as the
     * back-end's latency. */
    prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
    pthread_mutex_lock(&b->lock);
    while (!b->go) {
        pthread_cond_wait(&b->start, &b->lock);
    }
    pthread_mutex_unlock(&b->lock);
    if (b->go < 0) {
        return NULL;
    }
    if (b->o->nphases) {
        queue_enter_phase(bq, 0, b->t0);
    } else {
        bq->qd = b->rate_mean_ns ? 0 : b->depth;
        bq->rate_mean_ns = b->rate_mean_ns;
        if (bq->rate_mean_ns) {
            bq->next_arrival = b->t0 + rng_exp_ns(&bq->rng,
                                                  bq->rate_mean_ns);
        }
    }
    if (queue_run(bq) < 0 || queue_drain(bq) < 0) {
        return NULL;
    }
    if (b->o->verify && !rw_reads(b->o->rw) &&
        !atomic_load_explicit(&stop_requested, memory_order_relaxed)) {
        queue_read_back(bq);
    }
    return NULL;
}

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

static bool queue_init(Bench *b, BenchQueue *bq, unsigned i, Error **errp)
{
    const BenchOpts *o = b->o;
    unsigned k;

    bq->b = b;
    bq->index = i;
    bq->cpu = o->cpus ? o->cpus[i % o->ncpus] : -1;
    bq->q = vuf_queue(b->fe, b->dev->first_vq + i);
    bq->base = o->offset + i * b->slice;
    bq->nchunks = b->slice / o->bs;
    bq->wake_margin = WAKE_MARGIN_INIT_NS;
    bq->wake_late_avg = WAKE_MARGIN_INIT_NS / 2;
    bq->rng = splitmix64(o->seed * 0x100000001B3ull + i) | 1;
    bq->hist = lat_hist_new();
    bq->lag_hist = lat_hist_new();
    if (o->nphases) {
        bq->phase_hist = g_new0(LatHist *, o->nphases);
        bq->phase_ios = g_new0(uint64_t, o->nphases);
        for (k = 0; k < o->nphases; k++) {
            bq->phase_hist[k] = lat_hist_new();
        }
    }
    bq->slots = g_new0(Slot, b->depth);
    bq->ready = g_new0(Slot *, b->depth);
    bq->free_slots = g_new(unsigned, b->depth);
    if (o->verify) {
        bq->gen = g_new0(uint32_t, bq->nchunks);
        bq->busy = g_new0(uint8_t, bq->nchunks);
    }
    for (k = 0; k < b->depth; k++) {
        Slot *s = &bq->slots[k];

        s->req = b->dev->req_new(b, s, &s->data, errp);
        if (!s->req) {
            return false;
        }
        /* Without --verify, writes carry this: not zeroes, which a
         * back-end might detect and skip. */
        verify_fill(s->data, 0, o->bs, 1);
        bq->free_slots[k] = k;
    }
    bq->nfree = b->depth;
    return true;
}

static void queue_fini(Bench *b, BenchQueue *bq)
{
    unsigned k;

    for (k = 0; bq->slots && k < b->depth; k++) {
        b->dev->req_free(b, bq->slots[k].req);
    }
    g_free(bq->slots);
    g_free(bq->ready);
    g_free(bq->free_slots);
    g_free(bq->gen);
    g_free(bq->busy);
    if (bq->hist) {
        lat_hist_free(bq->hist);
        lat_hist_free(bq->lag_hist);
    }
    for (k = 0; bq->phase_hist && k < b->o->nphases; k++) {
        lat_hist_free(bq->phase_hist[k]);
    }
    g_free(bq->phase_hist);
    g_free(bq->phase_ios);
}

/* ------------------------------------------------------------------------ */
/* Running                                                                   */

static void on_stop_signal(int sig)
{
    atomic_store_explicit(&stop_requested, true, memory_order_relaxed);
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
        if (atomic_load_explicit(&stop_requested, memory_order_relaxed)) {
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
    err = pthread_create(&bq->thread, &attr, queue_thread, bq);
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
        atomic_load_explicit(&stop_requested, memory_order_relaxed)) {
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
        if (wait_closed_until(b, b->phase_start[i])) {
            break;
        }
        if (cpu->start) {
            cpu->phase[i] = snapshot(o);
        }
    }
    wait_closed_until(b, b->deadline);
    if (cpu->start) {
        cpu->end = snapshot(o);
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
        if (!queue_init(b, &b->queues[i], i, errp)) {
            error_prepend(errp, "%u queues x %u requests of %" PRIu64
                          " bytes: ", b->nq, b->depth, o->bs);
            return false;
        }
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
        queue_fini(b, &b->queues[i]);
    }
    g_free(b->queues);
    g_free(b->phase_start);
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

/*
 * spindle-bench: one queue and the thread that drives it.
 *
 * bench-main.c sets the queues up (bench_queue_init()), starts one thread
 * per queue on bench_queue_thread() and joins it; bench-int.h has the
 * BenchQueue and Bench the two files share.
 *
 * Theory of operation
 * -------------------
 * A queue owns its requests (Slots, allocated in guest memory at setup),
 * its PRNG and its results.  While its thread runs, nothing else touches
 * them, so the data path takes no lock.
 *
 * The run.  queue_run() is one loop: look at the clock, open or close the
 * measured window, submit what the load model allows, kick once per batch
 * (vufq_kick honours the device's suppression, so a kick avoided is a VM
 * exit a real guest would have saved), harvest every completion that is
 * ready, and when there is none, wait:
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
 */

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include <glib.h>

#include "bench-int.h"
#include "util/clock.h"
#include "util/cutils.h"

/* Longest single wait, so that a stop request or a hang-up is noticed. */
#define WAIT_SLICE_NS       (100 * 1000000ull)
/* How often our own open-loop spin looks for a hung-up back-end. */
#define HANGUP_CHECK_NS     (100 * 1000000ull)
/* Open loop, interrupt mode: the most we spin before an arrival. */
#define WAKE_MARGIN_MAX_NS  (200 * 1000ull)
#define WAKE_MARGIN_INIT_NS (20 * 1000ull)
/* --verify: random picks of a busy chunk before scanning for a free one. */
#define PICK_TRIES          4

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
    if (atomic_load_explicit(&bench_stop_requested, memory_order_relaxed)) {
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

void *bench_queue_thread(void *opaque)
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
        !atomic_load_explicit(&bench_stop_requested, memory_order_relaxed)) {
        queue_read_back(bq);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Setup and teardown of a queue                                             */

bool bench_queue_init(Bench *b, BenchQueue *bq, unsigned i, Error **errp)
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

void bench_queue_fini(Bench *b, BenchQueue *bq)
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

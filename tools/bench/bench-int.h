/*
 * spindle-bench: what bench-main.c, bench-queue.c, bench-opts.c and
 * bench-report.c share.
 *
 * Private to the spindle-bench executable; bench.h stays the contract of
 * the histogram, --verify and CPU modules, which the unit tests link too.
 * bench-opts.c turns the command line into a BenchOpts; bench-main.c
 * connects, runs one thread per BenchQueue and leaves each queue's results
 * in it (bench-queue.c is the queue threads' part of it); bench-report.c
 * merges those into a Summary and prints it.  What
 * differs between virtio-blk and virtio-scsi (finding the disk's size,
 * building, sending and judging a request) is a BenchDevOps table, one
 * per device: bench-blk.c and bench-scsi.c.
 */
#ifndef SPINDLE_TOOLS_BENCH_INT_H
#define SPINDLE_TOOLS_BENCH_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <glib.h>

#include "bench.h"
#include "vu-frontend.h"

#define SECTOR              VIRTIO_BLK_SECTOR_SIZE
#define NS_PER_S            1000000000ull
/* No completion for this long with requests in flight: the back-end is
 * stuck, give up on the queue rather than hang. */
#define STALL_NS            (30 * NS_PER_S)
#define CACHELINE           64

/* ------------------------------------------------------------------------ */
/* Options (bench-opts.c)                                                    */

/* The --rw modes. */
typedef enum BenchRw {
    RW_RANDREAD,
    RW_RANDWRITE,
    RW_READ,
    RW_WRITE,
    RW_RANDRW,
} BenchRw;

/* The --rw names, indexed by BenchRw. */
extern const char *const rw_names[];

/* Does the mode read at all (randrw does both)? */
static inline bool rw_reads(BenchRw rw)
{
    return rw == RW_RANDREAD || rw == RW_READ || rw == RW_RANDRW;
}

/* Does the mode write at all? */
static inline bool rw_writes(BenchRw rw)
{
    return rw == RW_RANDWRITE || rw == RW_WRITE || rw == RW_RANDRW;
}

/* What a --phase does: a closed loop, an open loop, or nothing. */
typedef enum BenchLoad {
    LOAD_QD,                    /* closed loop at iodepth */
    LOAD_RATE,                  /* Poisson arrivals at rate per second */
    LOAD_IDLE,                  /* no new I/O (what is in flight ends) */
} BenchLoad;

/* One --phase=SECONDS:LOAD. */
typedef struct BenchPhase {
    double seconds;
    BenchLoad load;
    unsigned iodepth;           /* LOAD_QD */
    double rate;                /* LOAD_RATE */
} BenchPhase;

/*
 * Parse one --phase argument, "SECONDS:LOAD" with LOAD "qdN", "rate=IOPS"
 * or "idle", into *p.  Any thread.  False with errp set to a one-line
 * message naming --phase.
 */
bool bench_parse_phase(const char *str, BenchPhase *p, Error **errp);

/* The phase's LOAD as --phase spells it ("qd1", "rate=10000", "idle"),
 * in buf (at least 32 bytes); returns buf. */
const char *bench_phase_load_name(const BenchPhase *p, char *buf,
                                  size_t size);

/*
 * The command line, converted and checked.  Read-only once the threads
 * run; before that, bench_geometry() fills in the default --size.
 */
typedef struct BenchOpts {
    char *socket;
    VufDeviceType device;       /* VUF_DEVICE_BLK or VUF_DEVICE_SCSI */
    unsigned lun;               /* virtio-scsi: the LUN driven */
    unsigned queues;
    int *cpus;                  /* NULL: threads are not pinned */
    unsigned ncpus;
    BenchRw rw;
    unsigned rwmixread;         /* percent of reads with randrw */
    uint64_t bs;
    unsigned iodepth;           /* 0: the default of the loop model */
    double rate;                /* arrivals per second per queue; 0 closed */
    bool have_deadline;
    double runtime;
    uint64_t count;             /* per queue; 0: no limit */
    double ramp;
    bool have_size;
    uint64_t size;
    uint64_t offset;
    VufCompletion completion;
    bool verify;
    int backend_pid;            /* 0: none */
    bool json;
    unsigned queue_size;
    bool no_event_idx;
    bool no_indirect;
    /* --dirty-log: logging on from the start of the run, the log read
     * and cleared every dirty_log_sync_ms (0: never). */
    bool dirty_log;
    unsigned dirty_log_sync_ms;
    uint64_t required;          /* feature bits --require names */
    uint64_t seed;
    int connect_timeout_ms;
    /* --phase, in order (NULL, 0: none).  With phases, runtime is their
     * sum, iodepth and rate are 0, and these two sum them up: */
    BenchPhase *phases;
    unsigned nphases;
    unsigned phase_max_qd;      /* the deepest closed-loop phase, or 0 */
    bool phase_rate;            /* some phase is an open loop */
} BenchOpts;

/* Set *o to the defaults the command line starts from. */
void bench_opts_init(BenchOpts *o);

/*
 * Parse and check argv into *o, which holds the defaults on entry; main
 * thread, before anything else (--help prints the usage and exits here).
 * Returns true, or false with errp set to a one-line message that names
 * the option (or the stray argument).  Either way *o may own memory:
 * release it with bench_opts_free().
 */
bool bench_parse_command_line(int argc, char **argv, BenchOpts *o,
                              Error **errp);

/* Free what *o owns (not o itself). */
void bench_opts_free(BenchOpts *o);

/* ------------------------------------------------------------------------ */
/* The run (bench-main.c, bench-queue.c)                                     */

/* CLOCK_MONOTONIC now, in ns: every time of the run is on this clock. */
static inline uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static inline struct timespec ns_to_timespec(uint64_t ns)
{
    return (struct timespec) {
        .tv_sec = ns / NS_PER_S,
        .tv_nsec = ns % NS_PER_S,
    };
}

/*
 * Set by SIGINT/SIGTERM (bench-main.c): end the window now and report.
 * Read by the queue threads; relaxed, as each only needs to see it soon.
 */
extern atomic_bool bench_stop_requested;

/* One request and what it was for (bench-queue.c's alone). */
typedef struct Slot Slot;

typedef struct Bench Bench;
typedef struct BenchQueue BenchQueue;

/* ------------------------------------------------------------------------ */
/* The device (bench-blk.c, bench-scsi.c)                                    */

/* The disk as the device describes it, found once at setup. */
typedef struct BenchDisk {
    bool have_capacity;         /* false: virtio-blk without CONFIG */
    uint64_t capacity;          /* bytes */
    uint64_t block_size;        /* logical block, bytes (a multiple of 512) */
    bool read_only;             /* the device says so: writes are refused
                                 * at setup */
    uint64_t data_segs;         /* data descriptors of a request of --bs */
    uint64_t inflight_max;      /* requests in flight over all queues that
                                 * a driver may have; 0: no limit */
} BenchDisk;

/* How a failed request ended, as the device said it. */
typedef struct BenchIoError {
    const char *status;         /* static: "IOERR", "CHECK_CONDITION",
                                 * "BAD_TARGET", "none"... */
    bool have_sense;            /* virtio-scsi CHECK CONDITION */
    uint8_t sense_key, asc, ascq;
} BenchIoError;

/*
 * One device type: what bench-main.c asks of virtio-blk or virtio-scsi.
 * A request is the device's own type (VufBlkReq, VufScsiReq) behind a
 * void pointer; its data buffer holds exactly the --bs bytes read or
 * written, whatever the device, so --verify is the same for both.
 */
typedef struct BenchDevOps {
    const char *name;           /* "virtio-blk": the JSON "device" */
    VufDeviceType type;
    unsigned first_vq;          /* the virtqueue of bench queue 0 */
    const char *queue_noun;     /* "queues", "request queues" */

    /* Control path (main thread, the session set up, no queue thread
     * running).  How many of its queues the back-end can drive, from what
     * it offered; 0 if it does not say. */
    uint64_t (*queue_count)(VuFrontend *fe);
    /* Fill *d for the options (o->bs, o->lun).  May run commands on the
     * first bench queue's virtqueue and leaves nothing in flight there.
     * False with errp set to a one-line message. */
    bool (*probe)(Bench *b, const BenchOpts *o, BenchDisk *d, Error **errp);
    /* A request with a data buffer of o->bs bytes (*data) in guest
     * memory; opaque comes back from complete().  NULL with errp set when
     * the memory is exhausted.  Free with req_free (NULL is fine). */
    void *(*req_new)(Bench *b, void *opaque, uint8_t **data, Error **errp);
    void (*req_free)(Bench *b, void *req);

    /* Data path (the queue's thread).  Build the read or write of o->bs
     * bytes at byte offset off (tag: unique among bq's requests in
     * flight) and add it to bq's virtqueue, without kicking.  0 or
     * vufq_add()'s -errno. */
    int (*submit)(BenchQueue *bq, void *req, uint64_t tag, bool write,
                  uint64_t off);
    /* Harvest one completion: 1 and its opaque, 0 if none, -EIO. */
    int (*complete)(VufQueue *q, void **opaque);
    /* Did the completed req succeed?  If not, describe it in *e. */
    bool (*check)(const void *req, BenchIoError *e);
} BenchDevOps;

extern const BenchDevOps bench_dev_blk;
extern const BenchDevOps bench_dev_scsi;

/*
 * One queue and the thread that drives it.  While the thread runs it is
 * the only one to touch its BenchQueue; the results are read by the main
 * thread after join.
 */
struct BenchQueue {
    Bench *b;
    unsigned index;
    int cpu;                    /* -1: not pinned */
    VufQueue *q;
    uint64_t base;              /* first byte of the slice */
    uint64_t nchunks;
    Slot *slots;
    Slot **ready;               /* harvest batch, depth entries */
    unsigned *free_slots;
    unsigned nfree;
    uint64_t rng;
    uint64_t seq_next;          /* sequential modes: next chunk */
    uint32_t *gen;              /* --verify: last generation per chunk */
    uint8_t *busy;              /* --verify: a request is on the chunk */
    uint64_t next_arrival;      /* open loop: scheduled time, ns */
    uint64_t full_until;        /* open loop: when the last backlog ended */
    uint64_t last_progress;     /* last completion (stall detection) */
    uint64_t next_hangup_check;
    uint64_t wake_margin;       /* open loop, interrupt mode: see */
    uint64_t wake_late_avg;     /* wait_interrupt_until() */
    /* The load in force: the one of the options, or of the current
     * --phase (the ramp runs at the first phase's). */
    unsigned phase;             /* index in o->phases */
    unsigned qd;                /* closed loop: requests in flight; 0 not */
    uint64_t rate_mean_ns;      /* open loop: mean inter-arrival; 0 not */
    uint64_t started;           /* measured I/Os submitted (--count) */
    uint64_t arrivals;          /* ... of them open-loop arrivals */
    uint64_t completed;         /* measured I/Os completed (--count) */
    uint64_t cpu_start;
    bool measuring;             /* the window has begun here */
    bool closed;                /* ... and ended */
    pthread_t thread;

    /* Results, read by the main thread after join. */
    LatHist *hist;
    uint64_t ios, reads, writes, errors, backlogged;
    LatHist *lag_hist;          /* open loop: submission - arrival, ns */
    LatHist **phase_hist;       /* --phase: per phase (of submission) */
    uint64_t *phase_ios;
    uint64_t win_end;           /* valid when measuring */
    uint64_t cpu_ns;
    VufQueueStats stats;
    bool have_error;
    bool error_write;
    uint64_t error_offset;
    BenchIoError error;
    uint64_t sectors_checked, bad_sectors;
    bool have_mismatch;
    VerifyMismatch mismatch;
    int fail;                   /* errno that stopped the thread, or 0 */
    unsigned fail_in_flight;
    /* The queues sit in one array: keep each one's last fields off the
     * cache line where the next one's first fields are. */
    char pad[CACHELINE];
};

/* The whole run: the session, the queues, and the start gate and window
 * times that the queue threads share. */
struct Bench {
    const BenchOpts *o;
    const BenchDevOps *dev;
    VuFrontend *fe;
    BenchDisk disk;
    unsigned nq;
    unsigned depth;             /* requests per queue */
    unsigned add_flags;         /* VUFQ_ADD_INDIRECT or 0 */
    uint64_t slice;             /* bytes per queue */
    uint64_t rate_mean_ns;      /* open loop: mean inter-arrival, 0 closed */
    bool open_loop;             /* --rate, or some --phase is a rate */
    BenchQueue *queues;

    pthread_mutex_t lock;
    /* The start gate: threads wait until go is 1 (run) or -1 (give up).
     * t0, win_start and deadline are written before go under the lock,
     * and only read after. */
    pthread_cond_t start;
    int go;
    uint64_t t0, win_start, deadline;
    /* --phase: phase k runs from phase_start[k] to phase_start[k + 1]
     * (CLOCK_MONOTONIC ns); phase_start[nphases] is the deadline.  Set
     * with t0. */
    uint64_t *phase_start;
    /* Threads whose window has ended; the main thread waits for all. */
    pthread_cond_t cond;
    unsigned closed;
    /* --dirty-log: the main thread's copy of the log at each sync, the
     * syncs made and the dirty pages they found (summed). */
    uint64_t *log_bits;
    uint64_t log_syncs;
    uint64_t log_pages;
};

/*
 * Allocate queue i's requests (b->depth of them, in guest memory), its
 * histograms and its --verify state, and set its slice, CPU and seed.
 * Main thread, at setup (b->depth, b->slice and b->fe known).  False with
 * errp set when guest memory runs out; bench_queue_fini() frees what was
 * allocated either way.
 */
bool bench_queue_init(Bench *b, BenchQueue *bq, unsigned i, Error **errp);
void bench_queue_fini(Bench *b, BenchQueue *bq);

/*
 * The thread of one queue (opaque: its BenchQueue): waits at b's start
 * gate, runs the load, drains, and with --verify of a write-only mode
 * reads back what it wrote.  Its results stay in the BenchQueue for the
 * main thread to read after join.
 */
void *bench_queue_thread(void *opaque);

/* The back-end's CPU snapshots at the window's edges; NULL when not taken
 * (no --backend-pid, a failure, a stop request). */
typedef struct CpuWindow {
    CpuSnapshot *start;
    CpuSnapshot *end;
    /* --phase: at the start of phase k, k = 1 .. nphases - 1 (phase 0
     * starts at start, the last one ends at end); NULL when not taken. */
    CpuSnapshot **phase;
} CpuWindow;

/* ------------------------------------------------------------------------ */
/* Results (bench-report.c)                                                  */

/* The queues' results merged.  mismatch_q and error_q point into the
 * Bench's queues, so a Summary is only good while its Bench is. */
typedef struct Summary {
    double runtime_s;
    uint64_t ios, reads, writes, errors, bytes, backlogged;
    uint64_t arrivals;              /* open loop */
    LatHist *lag_hist;
    uint64_t kicks, kicks_avoided, interrupts;
    uint64_t sectors_checked, bad_sectors;
    const BenchQueue *mismatch_q;   /* the first queue with a mismatch */
    const BenchQueue *error_q;      /* the first queue with an I/O error */
    double bench_cpu_s;
    bool have_backend;
    CpuDelta backend;
    LatHist *hist;
    GPtrArray *failures;            /* one-line messages (char *) */
    struct SummaryPhase *phases;    /* --phase: one per phase, else NULL */
} Summary;

/* One --phase's results: the I/O submitted (or scheduled) in it that
 * completed inside the window. */
typedef struct SummaryPhase {
    uint64_t start_ns, end_ns;      /* CLOCK_MONOTONIC; end_ns is where the
                                     * window ended if it ended early */
    uint64_t ios;
    LatHist *hist;
    bool have_backend;
    CpuDelta backend;
} SummaryPhase;

/*
 * Merge the queues' results into *s (zeroed by the caller) and put in
 * s->failures one line per thing that went wrong (a queue that stopped
 * early, I/O errors, verify mismatches).  Main thread, after every queue
 * thread has been joined.  Free with bench_summary_free().
 */
void bench_summarize(const Bench *b, const CpuWindow *cpu, Summary *s);

/* Free what bench_summarize() allocated in *s (not s itself); nphases is
 * the run's number of --phase. */
void bench_summary_free(Summary *s, unsigned nphases);

/* Print the report for a person on stdout. */
void bench_print_text(const Bench *b, const Summary *s);

/* Print the report as one JSON object on stdout; status is the exit
 * status main() returns, reported as "ok" and "exit_status". */
void bench_print_json(const Bench *b, const Summary *s, int status);

#endif

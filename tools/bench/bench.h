/*
 * spindle-bench: a vhost-user front-end that measures a back-end.
 *
 * It plays the guest driver's part over the vhost-user protocol (through
 * the vu-frontend library, tools/frontend/vu-frontend.h) against any
 * vhost-user-blk back-end, so the same load can be pointed at Spindle and
 * at qemu-storage-daemon, or any vhost-user-scsi one (--device=scsi).
 * docs/bench.md is the user's page.
 *
 * Files:
 *   bench-main.c    connection, threads, the run, exit status
 *   bench-queue.c   one queue's thread: requests, the loop, the window
 *   bench-blk.c     the virtio-blk device (requests, geometry)
 *   bench-scsi.c    the virtio-scsi device (READ/WRITE CDBs, geometry)
 *   bench-opts.c    the command line
 *   bench-report.c  the text and JSON reports
 *   bench-int.h     what those six share
 *   bench-hist.c    latency histogram (log-linear buckets, percentiles, CDF)
 *   bench-verify.c  self-checking block contents for --verify
 *   bench-cpu.c     CPU time of another process's threads (/proc)
 *
 * This header is the contract between them.
 */
#ifndef SPINDLE_TOOLS_BENCH_H
#define SPINDLE_TOOLS_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

/* ------------------------------------------------------------------------ */
/* Latency histogram (bench-hist.c)                                          */

/*
 * Values in nanoseconds from 0 to 2^40 (about 18 minutes; larger values
 * are clamped), kept in log-linear buckets: exact below 64 ns, then 64
 * buckets per power of two, so every value is known within 1/64 (1.6%).
 * One histogram per thread (not thread-safe), merged at the end.
 */
typedef struct LatHist LatHist;

LatHist *lat_hist_new(void);
void lat_hist_free(LatHist *h);
void lat_hist_reset(LatHist *h);
void lat_hist_add(LatHist *h, uint64_t ns);
/* dst += src */
void lat_hist_merge(LatHist *dst, const LatHist *src);

uint64_t lat_hist_count(const LatHist *h);
uint64_t lat_hist_min(const LatHist *h);     /* exact; 0 if empty */
uint64_t lat_hist_max(const LatHist *h);     /* exact; 0 if empty */
double lat_hist_mean(const LatHist *h);      /* exact sum / count; 0 if empty */
/*
 * The value below which p percent of the samples lie (0 < p <= 100): the
 * upper edge of the bucket holding the sample of rank ceil(p/100 * count),
 * never above the exact max.  0 if empty.
 */
uint64_t lat_hist_percentile(const LatHist *h, double p);
/*
 * The cumulative distribution as up to max_points (value ns, fraction of
 * samples <= value) pairs in increasing order, spread evenly in log(value)
 * between min and max (every non-empty bucket if they fit).  The last
 * point is (max, 1.0).  Returns the number of points written.
 */
size_t lat_hist_cdf(const LatHist *h, double *ns, double *frac,
                    size_t max_points);

/* ------------------------------------------------------------------------ */
/* Self-checking data (bench-verify.c)                                       */

/*
 * With --verify every 512-byte sector written carries a header:
 *
 *   bytes 0..3    magic "SPBV"
 *   bytes 4..7    write generation (little-endian u32, >= 1)
 *   bytes 8..15   sector number on the disk (little-endian u64)
 *   bytes 16..23  checksum of the sector with these 8 bytes taken as zero
 *   bytes 24..511 pseudo-random bytes derived from (sector, generation)
 *
 * so a read can tell corrupted data (checksum), misplaced data (sector
 * number) and stale data (an older generation) apart, even without knowing
 * what was written (a later run reading an earlier run's data).
 */
#define VERIFY_SECTOR       512u
#define VERIFY_MAGIC        0x56425053u      /* "SPBV" read little-endian */

/* Fill buf (len a multiple of 512) as the data of a write at byte offset
 * off (a multiple of 512) with generation gen (>= 1). */
void verify_fill(void *buf, uint64_t off, size_t len, uint32_t gen);

typedef enum VerifyProblem {
    VERIFY_OK,
    VERIFY_NO_HEADER,        /* no magic: never written, or overwritten */
    VERIFY_WRONG_SECTOR,     /* a valid sector of another place */
    VERIFY_BAD_CHECKSUM,     /* the sector's bytes were changed */
    VERIFY_WRONG_GENERATION, /* valid, but not the last write (stale) */
} VerifyProblem;

/* "ok", "no header", "wrong sector", "bad checksum", "wrong generation". */
const char *verify_problem_name(VerifyProblem p);

typedef struct VerifyMismatch {
    uint64_t offset;             /* byte offset of the bad sector on the disk */
    VerifyProblem problem;
    uint64_t found_sector;       /* what the header says (if there is one) */
    uint32_t found_gen;
    uint32_t expected_gen;       /* 0: not known */
} VerifyMismatch;

/*
 * Check buf (len a multiple of 512), read from byte offset off.
 * expected_gen >= 1: every sector must be that write's (magic, sector,
 * checksum, generation).  expected_gen 0 (not written in this run):
 * sectors without the magic are accepted (never written), the others must
 * be valid for their place (sector number and checksum; any generation).
 * Returns the number of bad sectors and describes the first in *first
 * (when not NULL and there is one).
 */
unsigned verify_check(const void *buf, uint64_t off, size_t len,
                      uint32_t expected_gen, VerifyMismatch *first);

/* ------------------------------------------------------------------------ */
/* CPU time of a process (bench-cpu.c)                                       */

/*
 * The CPU time of every thread of a process, from /proc/PID/task/TID/stat
 * (utime, stime: clock ticks) and /proc/PID/task/TID/schedstat (ns on the
 * CPU, finer; absent on kernels without schedstats).  Threads are matched
 * by TID between two snapshots: one that started in between counts from
 * zero, one that ended in between is lost (its time is not readable).
 */
typedef struct CpuSnapshot CpuSnapshot;

/* NULL with errp set ("no process PID", unreadable /proc). */
CpuSnapshot *cpu_snapshot_take(int pid, Error **errp);
void cpu_snapshot_free(CpuSnapshot *s);

typedef struct CpuDelta {
    double utime_s;              /* from stat's ticks */
    double stime_s;
    double sched_s;              /* from schedstat; < 0 if not readable */
    int64_t switches;            /* times a thread was switched in (from
                                  * schedstat); < 0 if not readable */
    unsigned threads;            /* threads seen in the later snapshot */
} CpuDelta;

/* The CPU time spent between two snapshots of one process. */
void cpu_snapshot_delta(const CpuSnapshot *before, const CpuSnapshot *after,
                        CpuDelta *out);

/* The calling thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), ns. */
uint64_t cpu_thread_ns(void);

#endif

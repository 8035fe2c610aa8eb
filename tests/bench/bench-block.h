/*
 * bench-block: the types shared by the benchmark (bench-block.c) and its
 * report (bench-block-report.c).
 *
 * Main thread only: the report is printed after every cell has run.
 */
#ifndef SPINDLE_TESTS_BENCH_BLOCK_H
#define SPINDLE_TESTS_BENCH_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench-common.h"
#include "bench-file.h"
#include "bench-ring.h"

#define BLOCK_SIZE 4096
#define QD_MAX 256
#define QD_LIST_MAX 16

/* ------------------------------------------------------------------------ */
/* Options                                                                   */

typedef enum {
    ENGINE_NULL_CO,
    ENGINE_NATIVE,
    ENGINE_IO_URING,
    ENGINE_THREADS,
    ENGINE_COUNT,
} EngineId;

typedef enum {
    POLL_OFF,
    POLL_ADAPTIVE,
    POLL_COUNT,
} PollMode;

typedef struct BenchOpts {
    BenchCommonOpts common;    /* poll_max_ns: of the adaptive mode */
    int64_t null_latency_ns;
    int64_t file_size;
    bool engines[ENGINE_COUNT];
    int64_t qds[QD_LIST_MAX];
    int nqd;
    BenchDirectMode direct;
} BenchOpts;

/* ------------------------------------------------------------------------ */
/* Statistics of one run of one cell                                         */

/* After bench-ring.h's latency and loop statistics. */
typedef enum {
    STAT_IOPS = BENCH_STAT_SHARED,
    STAT_CPU_PER_IO,         /* the IOThread */
    STAT_ALL_CPU_PER_IO,     /* every thread but the client */
    STAT_KICKS_PER_IO,
    STAT_SLEEPS_PER_IO,      /* the IOThread's voluntary context switches */
    /* The engine's counters (file engines; null-co: see fill_engine_stats) */
    STAT_COMPLETIONS,
    STAT_COMPLETIONS_POLLED,
    STAT_POLLED_FRACTION,
    STAT_SUBMISSIONS,
    STAT_RESUBMITS,
    STAT_BHS,                /* the loop's bottom halves */
    STAT_KICK_WINDOW,        /* the kick handler's window at the end */
    STAT_ELAPSED,
    STAT_COUNT,
} StatId;

typedef struct StatInfo {
    const char *json_name;
    bool is_integer;
} StatInfo;

typedef struct RunStats {
    double v[STAT_COUNT];
} RunStats;

/* One configuration: engine x queue depth x poll mode. */
typedef struct Cell {
    EngineId engine;
    int64_t qd;
    PollMode poll;
    bool direct;
    RunStats *runs;          /* opts->repeat */
    RunStats result;         /* medians */
} Cell;

/* ------------------------------------------------------------------------ */
/* All cells                                                                 */

typedef struct Bench {
    const BenchOpts *opts;
    BenchTestFile file;
    Cell *cells;
    size_t ncells;
    char *skipped[ENGINE_COUNT];   /* reason, or NULL if the engine ran */
} Bench;

/* Names indexed by EngineId, PollMode and StatId (the JSON field names). */
extern const char *const engine_names[ENGINE_COUNT];
extern const char *const poll_names[POLL_COUNT];
extern const StatInfo stat_info[STAT_COUNT];

static inline bool engine_is_file(EngineId e)
{
    return e != ENGINE_NULL_CO;
}

/* Does b run a file engine that has not been skipped? */
bool bench_has_file_engine(const Bench *b);

/*
 * Print b's results as one JSON object, or as the tables, on stdout.  Every
 * cell whose engine was not skipped has its medians in result.
 */
void bench_block_print_json(const Bench *b);
void bench_block_print_table(const Bench *b);

#endif

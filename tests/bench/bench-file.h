/*
 * A temporary test file for the block benchmarks, on a file system that
 * allows O_DIRECT where one of the candidate directories does.
 *
 * Main thread (any single thread): nothing here is shared.
 */
#ifndef SPINDLE_TESTS_BENCH_FILE_H
#define SPINDLE_TESTS_BENCH_FILE_H

#include <stdbool.h>
#include <stdint.h>

#include "util/error.h"

typedef enum {
    BENCH_DIRECT_AUTO,       /* O_DIRECT if a candidate allows it */
    BENCH_DIRECT_ON,         /* O_DIRECT or fail */
    BENCH_DIRECT_OFF,        /* page cache, first writable candidate */
    BENCH_DIRECT_COUNT,
} BenchDirectMode;

/* "auto", "on", "off", indexed by BenchDirectMode. */
extern const char *const bench_direct_mode_names[BENCH_DIRECT_COUNT];

typedef struct BenchTestFile {
    char *path;              /* NULL until created */
    char *dir;               /* the candidate directory it is in */
    char *fs;                /* file system type, e.g. "ext4" */
    bool direct;             /* O_DIRECT works on it and is wanted */
    char *note;              /* why direct is false, or NULL */
} BenchTestFile;

/*
 * Create a file in the first of the candidate directories dirs
 * (NULL-terminated) whose file system allows O_DIRECT (with
 * BENCH_DIRECT_AUTO or _ON), else in the first writable one (AUTO says why
 * in tf->note; ON fails), and fill it with size bytes of pseudo-random data
 * (no holes, so reads hit real blocks), synced to the device.  On failure
 * errp is set and tf holds whatever must still be destroyed.
 */
bool bench_test_file_create(BenchTestFile *tf, const char *const *dirs,
                            int64_t size, BenchDirectMode mode, Error **errp);

/* Remove the file (if created) and free tf's fields. */
void bench_test_file_destroy(BenchTestFile *tf);

#endif

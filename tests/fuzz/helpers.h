/*
 * What the libFuzzer harnesses of tests/fuzz share.
 *
 * Each harness is one program (fuzz-NAME.c) with LLVMFuzzerTestOneInput()
 * driving one entry point of the real code: no sockets or threads in the
 * way where the code allows it, the same answer for the same input, and
 * nothing left behind by an input (libFuzzer's leak check runs after
 * inputs that allocated more than they freed).  The main thread's
 * AioContext is the harness's own (fuzz_main_context()), so code that
 * asserts the main thread or runs things "in the home thread" through
 * aio_run_sync() runs them directly.
 *
 * Adding a harness: docs/devel/testing.md, "Fuzzing".
 */
#ifndef TESTS_FUZZ_HELPERS_H
#define TESTS_FUZZ_HELPERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/aio.h"

/* An invariant of the code under test does not hold: a finding. */
#define FUZZ_CHECK(cond)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__,    \
                    __LINE__, #cond);                                      \
            abort();                                                       \
        }                                                                  \
    } while (0)

/* The main loop's context, created by the first call (in the fuzzing
 * thread, which becomes the main thread). */
AioContext *fuzz_main_context(void);

/* Run what is ready in ctx (BHs, fd handlers, timers that expired)
 * without blocking, until nothing is, or a bounded number of turns. */
void fuzz_poll(AioContext *ctx);

/*
 * Whether the input could open the file driver: it holds the word
 * "file" other than as a JSON key or before a word byte ("file.driver",
 * "file": {...}: a child's options), or a JSON \u escape (which could
 * spell it).  The option and QMP harnesses skip such inputs so that a
 * mutation never opens or grows a file of the machine; the file driver
 * has its own unit tests.  Inputs holding "nbd" or "rbd" are skipped
 * too: the nbd driver connects to servers and looks host names up, the
 * rbd driver reads a Ceph configuration and reaches a cluster.
 */
bool fuzz_may_name_host_file(const uint8_t *data, size_t size);

/* The input as a NUL-terminated string (a new one: g_free() it), or
 * NULL if it holds a NUL byte (the options it stands for cannot). */
char *fuzz_input_string(const uint8_t *data, size_t size);

/* Reading an input front to back; past its end, everything reads 0. */
typedef struct FuzzReader {
    const uint8_t *p;
    size_t left;
} FuzzReader;

static inline bool fuzz_reader_done(const FuzzReader *r)
{
    return r->left == 0;
}

/* Little-endian integers. */
uint8_t fuzz_read_u8(FuzzReader *r);
uint16_t fuzz_read_u16(FuzzReader *r);
uint32_t fuzz_read_u32(FuzzReader *r);
uint64_t fuzz_read_u64(FuzzReader *r);

/* Pass over up to n bytes. */
void fuzz_read_skip(FuzzReader *r, size_t n);

/* Copy up to n bytes into buf (zero-filling the rest); returns how many
 * came from the input. */
size_t fuzz_read_bytes(FuzzReader *r, void *buf, size_t n);

#endif

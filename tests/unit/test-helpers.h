/*
 * Helpers shared by the unit test programs in tests/unit/.
 *
 * - A watchdog that aborts a test that hangs, the table of test cases
 *   it runs (TestCase, test_add_with_watchdog()), table-driven tests run
 *   once per variant (VariantCheck, test_add_variants()), and the main()
 *   of every program (TestProgram, test_main(), TEST_MAIN()).
 * - The I/O engines as variants (EngineVariant, all_engines).
 * - Time helpers (sleep_ns(), spin_ns()).
 * - A one-shot gate for threads (Gate), a delayed call in a thread
 *   (DelayedCall), count_dir_entries().
 * - Constructors that assert success (ctx_new(), iot_new()).
 * - PollSrc, a counter-based pollable source with a producer and a
 *   kick eventfd, used to drive and observe the loop's adaptive polling.
 *   It has no rings or descriptors: tests of real split rings drive them
 *   with the guest-side library (tools/frontend, local-virtio.h).
 *
 * Every helper fails the running test (g_assert) rather than returning an
 * error; none may be called from a signal handler.
 */
#ifndef TESTS_UNIT_TEST_HELPERS_H
#define TESTS_UNIT_TEST_HELPERS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <glib.h>

#include "util/aio.h"
#include "util/event-notifier.h"
#include "util/iothread.h"

#define NS_PER_MS  ((int64_t)1000000)
#define NS_PER_SEC ((int64_t)1000000000)

/* ------------------------------------------------------------------------ */
/* Tests, the watchdog, table-driven tests and main()                        */

/*
 * One test: its g_test path and either fn (a test of its own) or fn_data
 * called with data (one case of a table-driven test: several TestCases
 * share fn_data, each with its own data).
 */
typedef struct TestCase {
    const char *path;
    void (*fn)(void);
    void (*fn_data)(const void *data);
    const void *data;
} TestCase;

/*
 * Register tests[0..n-1] with g_test_add_data_func(), each under its path.
 * Each test runs under a watchdog: if it has not returned watchdog_s
 * seconds after it started, SIGALRM writes "PROGRAM: watchdog: PATH did
 * not finish in N s" (PROGRAM from g_get_prgname()) to stderr and aborts.
 * Set watchdog_s below the program's meson timeout, so that the watchdog's
 * message comes first.
 *
 * Main thread, after g_test_init() and before g_test_run().  tests must
 * stay valid until g_test_run() returns (a static table); the tests must
 * not use SIGALRM or alarm() themselves.
 */
void test_add_with_watchdog(const TestCase *tests, size_t n,
                            unsigned watchdog_s);

/*
 * What a table-driven test registered by test_add_variants() gets as its
 * data: the variant it runs on and the data of its row of the table.
 */
typedef struct TestVariant {
    const char *variant;
    const void *data;
} TestVariant;

/*
 * One row of a table of checks that run once for each variant: its path,
 * a format with one %s for the variant's name, the check, and the data it
 * gets with the variant (in a TestVariant).
 */
typedef struct VariantCheck {
    const char *path;
    void (*fn)(const void *arg);
    const void *data;
} VariantCheck;

/*
 * Register, under the watchdog, each of checks[0..n_checks-1] once for
 * each of variants[0..n_variants-1] (an engine, say).  Main thread, where
 * test_add_with_watchdog() may be called; what it allocates lives until
 * the program exits.
 */
void test_add_variants(const char *const *variants, size_t n_variants,
                       const VariantCheck *checks, size_t n_checks,
                       unsigned watchdog_s);

/*
 * Register, under the watchdog, one test per row of a static table
 * rows[0..n-1] of row_size bytes whose rows start with their path (a
 * const char *): fn gets the row.  Main thread, where
 * test_add_with_watchdog() may be called.
 */
void test_add_rows(const void *rows, size_t n, size_t row_size,
                   void (*fn)(const void *), unsigned watchdog_s);
#define TEST_ADD_ROWS(rows, fn, watchdog_s) \
    test_add_rows(rows, G_N_ELEMENTS(rows), sizeof(rows[0]), fn, watchdog_s)

/*
 * A unit test program: its table of tests, their watchdog (seconds, below
 * the program's meson timeout, so that the watchdog reports first), and
 * optional set-up of what all its tests share (run once, in the main
 * thread, after g_test_init(); it may register more tests) and tear-down
 * (after g_test_run()).
 */
typedef struct TestProgram {
    const TestCase *tests;
    size_t n_tests;
    unsigned watchdog_s;
    void (*setup)(void);
    void (*teardown)(void);
} TestProgram;

/*
 * The main() of every unit test program: set up GLib's test framework,
 * run prog->setup, register prog->tests under the watchdog, run them, run
 * prog->teardown; returns g_test_run()'s exit status.  Main thread, once.
 */
int test_main(int argc, char **argv, const TestProgram *prog);

/*
 * Define the program's main() from its static TestCase table: TEST_MAIN
 * for a program whose tests need nothing shared, TEST_MAIN_SETUP for one
 * with set-up and tear-down functions (either may be NULL).
 */
#define TEST_MAIN_SETUP(table, watchdog_s, setup_fn, teardown_fn)         \
    int main(int argc, char **argv)                                       \
    {                                                                     \
        static const TestProgram prog = {                                 \
            (table), G_N_ELEMENTS(table), (watchdog_s),                   \
            (setup_fn), (teardown_fn),                                    \
        };                                                                \
        return test_main(argc, argv, &prog);                              \
    }
#define TEST_MAIN(table, watchdog_s) \
    TEST_MAIN_SETUP(table, watchdog_s, NULL, NULL)

/* ------------------------------------------------------------------------ */
/* Engine variants (the block tests)                                         */

/*
 * The variant tests of the block layer run on each I/O engine: their
 * TestVariant's variant names the engine, and their row's data points to
 * o_direct where the file is to be opened O_DIRECT.  engine_variant()
 * decodes a test's data (its const void * argument) into both.
 */
typedef struct EngineVariant {
    const char *engine;
    bool direct;
} EngineVariant;

extern const bool o_direct;

/* The engines' names, for test_add_variants(): all, and the kernel's. */
extern const char *const all_engines[3];
extern const char *const kernel_engines[2];

EngineVariant engine_variant(const void *arg);

/* ------------------------------------------------------------------------ */
/* Time                                                                      */

/* Sleep (off the CPU) for about ns.  Any thread. */
void sleep_ns(int64_t ns);

/*
 * Busy-wait ns (the caller wants to stay on the CPU: µs-scale delays).
 * Any thread.
 */
void spin_ns(int64_t ns);

/* ------------------------------------------------------------------------ */
/* Constructors                                                              */

/*
 * A new AioContext whose home thread is the caller; asserts that creation
 * succeeded.  Any thread.  The caller owns the reference: aio_context_unref().
 */
AioContext *ctx_new(void);

/*
 * A new running IOThread named id, with props (a key=value list such as
 * "poll-max-ns=0,poll-grow=4", or NULL for the defaults); asserts that it
 * parsed and started.  Any thread but an IOThread's.  The caller owns it:
 * iothread_destroy().
 */
IOThread *iot_new(const char *id, const char *props);

/* ------------------------------------------------------------------------ */
/* Threads                                                                   */

/*
 * A one-shot gate: threads wait at it (gate_pass()) until some thread
 * opens it (gate_open()); once open it stays open.  Any thread.
 */
typedef struct Gate {
    GMutex lock;
    GCond cond;
    bool open;
} Gate;

/* Initialise *g, open or closed. */
void gate_init(Gate *g, bool open);

/* Open g and wake every thread waiting at it. */
void gate_open(Gate *g);

/* Return once g is open (at once if it already is). */
void gate_pass(Gate *g);

/* Free g's resources; no thread may be waiting at it. */
void gate_destroy(Gate *g);

/*
 * A thread that sleeps delay_ns, then runs fn(opaque): something that
 * happens elsewhere while the test's loop blocks.  delayed_call_join()
 * waits for the thread to end.  Any thread.
 */
typedef struct DelayedCall {
    int64_t delay_ns;
    void (*fn)(void *opaque);
    void *opaque;
    GThread *thread;
} DelayedCall;

/* Fill *dc and start its thread; dc must stay put until the join. */
void delayed_call_start(DelayedCall *dc, int64_t delay_ns,
                        void (*fn)(void *opaque), void *opaque);

/* Wait until dc's thread has run fn and ended. */
void delayed_call_join(DelayedCall *dc);

/* The number of entries in directory path ("/proc/self/fd", say). */
int count_dir_entries(const char *path);

/* ------------------------------------------------------------------------ */
/* Data buffers (the block tests)                                            */

/*
 * A buffer of size bytes (at least 1) aligned to align (a power of two, a
 * multiple of sizeof(void *)), uninitialised.  Fails the test when out of
 * memory.  Free with free().  Any thread.
 */
void *test_aligned_buf(size_t align, size_t size);

/* Fill p[0..n) with bytes from the test's random generator.  Main thread. */
void fill_random(uint8_t *p, size_t n);

/*
 * Fail the test unless got[0..n) equals want[0..n); the message names what
 * and the first differing byte's position (offset + its index).
 */
void assert_same(const uint8_t *got, const uint8_t *want, size_t n,
                 int64_t offset, const char *what);

/* ------------------------------------------------------------------------ */
/* PollSrc: a pollable source with the notification protocol of a ring        */

/*
 * The model:
 *   - the producer (any thread but ctx's home thread) publishes a message
 *     by incrementing avail, issues a full fence, then kicks the eventfd
 *     only if the consumer's no_notify flag is clear (psrc_publish());
 *   - the consumer (the loop, in ctx's home thread) polls avail in
 *     io_poll, sets no_notify in io_poll_begin and clears it in
 *     io_poll_end, and acknowledges what it consumed in acked, so that the
 *     producer can wait for it (psrc_wait_acked()).
 *
 * The consumer's hooks deliberately use plain (release) stores and its
 * io_poll no locked instructions, so that the loop's own full barrier
 * after io_poll_end is the only thing ordering "kicks back on" before
 * "look at the ring again", as it is for a real virtqueue.
 *
 * The counters are written only by the consumer (kicks: by producers) and
 * may be read from any thread.  The fields from linger on are knobs and
 * probes for the lost-wakeup stress test in test-aio.c; left at zero (as
 * psrc_init() leaves them), io_poll_end does nothing but clear no_notify and
 * count.
 */
typedef struct PollSrc {
    EventNotifier kick;            /* first: callbacks get &psrc->kick */
    AioContext *ctx;

    _Atomic uint64_t avail;        /* producer: messages published */
    _Atomic uint64_t acked;        /* consumer: messages consumed */
    _Atomic bool no_notify;        /* consumer: "don't kick, I'm polling" */
    _Atomic bool end_started;      /* set on entry to io_poll_end */
    uint64_t seen;                 /* consumer's copy of avail */

    /* Counters (home thread writes, any thread reads). */
    _Atomic uint64_t polls;        /* io_poll calls */
    _Atomic uint64_t poll_ready;   /* io_poll_ready calls */
    _Atomic uint64_t reads;        /* io_read calls */
    _Atomic uint64_t reads_work;   /* io_read calls that found a message */
    _Atomic uint64_t begins;
    _Atomic uint64_t ends;
    _Atomic uint64_t kicks;        /* producer: eventfd writes */
    _Atomic uint64_t alternation_errors; /* begin twice / end without begin */
    _Atomic bool begun;

    /* io_poll_end lingering (stress test) */
    bool linger;
    uint64_t rng;                  /* xorshift state, home thread */
    int64_t linger_before_ns;      /* fixed linger (self-test) */

    /*
     * Rendezvous at the poll->block transition.  The producer sets
     * hs_want; io_poll_end then announces itself (end_started) and waits,
     * briefly, until the producer has published (hs_published), either
     * before or after it re-enables kicks.  "Before" forces the message to
     * be found only by the loop's final io_poll after the barrier;
     * "after" makes the kick race with that final io_poll.
     */
    _Atomic bool hs_want;
    _Atomic bool hs_published;
    _Atomic bool hs_go;            /* producer is publishing right now */
    _Atomic uint64_t hs_simultaneous;  /* rendezvous completed, racing */
    _Atomic uint64_t hs_before_store;  /* rendezvous completed, before */
    _Atomic uint64_t hs_after_store;   /* rendezvous completed, after */
    bool ended;                    /* io_poll_end ran, no poll/read since */
    _Atomic uint64_t recheck_hits; /* found by the io_poll after io_poll_end */

    /* Self-test: model a loop that forgets the re-check after io_poll_end. */
    bool lie_after_end;
    bool just_ended;
} PollSrc;

/*
 * Zero *psrc, open its kick eventfd and register it in ctx with io_read,
 * io_poll and io_poll_ready, plus io_poll_begin/io_poll_end if with_hooks.
 * ctx's home thread.  psrc must stay put until psrc_cleanup().
 */
void psrc_init(PollSrc *psrc, AioContext *ctx, bool with_hooks);

/*
 * Unregister psrc from its context and close its eventfd.  ctx's home
 * thread.  Checks nothing: a caller that wants io_poll_begin/io_poll_end
 * to have alternated asserts alternation_errors == 0 itself.
 */
void psrc_cleanup(PollSrc *psrc);

/*
 * Producer side: publish one message; kick the eventfd unless the consumer
 * is polling.  Any thread (normally not ctx's home thread: the message is
 * consumed by a later aio_poll()).
 */
void psrc_publish(PollSrc *psrc);

/*
 * Producer side: wait (spinning, then yielding) until the consumer has
 * acked at least n messages.  True if it has, false if it still has not
 * after timeout_ns.  Any thread but ctx's home thread.
 */
bool psrc_wait_acked(PollSrc *psrc, uint64_t n, int64_t timeout_ns);

#endif

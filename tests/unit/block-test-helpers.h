/*
 * Helpers shared by the block layer test programs (test-block-acct.c,
 * test-block-drivers.c, test-block-nodes.c, test-file-posix.c).
 *
 * - TReq: a BlockRequest over one buffer whose callback records that it
 *   ran (exactly once), its result, when, and in which order.
 * - treq_submit(), treq_run(), run_op(): one request through a node.
 * - open_ok(), open_fails(): open a node from an option string, or fail
 *   the test.
 * - tmp_image(), tmp_image_open(): a temporary image file.
 * - loop_attach(): a loop block device over an image file.
 * - ctx_job_start(): a thread that runs a function in a context's home
 *   thread.
 *
 * Every helper fails the running test (g_assert, g_error) rather than
 * returning an error, but for loop_attach(), whose caller decides whether
 * a missing loop device skips the test.  Any thread unless said otherwise.
 */
#ifndef TESTS_UNIT_BLOCK_TEST_HELPERS_H
#define TESTS_UNIT_BLOCK_TEST_HELPERS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "block/block.h"
#include "util/aio.h"

#define KiB ((int64_t)1024)
#define MiB (KiB * 1024)

typedef struct TReq {
    BlockRequest req;            /* first: treq_cb() finds the TReq */
    struct iovec iov;
    bool done;
    int ret;
    int64_t submit_ns;           /* set by treq_submit() */
    int64_t done_ns;             /* set by treq_cb() */
    unsigned seq;                /* completion order in the program */
    BlockNode *drain_in_cb;      /* treq_cb() drains it: a nested drain */
} TReq;

/*
 * A TReq's completion callback: sets done, ret, done_ns and seq, then
 * drains drain_in_cb if set; fails the test if the request completes
 * twice.  Callbacks of their own may call it first.  Completions in
 * several threads at once would race on seq: one thread at a time.
 */
void treq_cb(BlockRequest *req, int ret);

/*
 * Zero *r and make it a request of op at offset for bytes bytes, with
 * treq_cb() as its callback; READ and WRITE get buf[0..bytes) as their
 * one iovec, the other ops no data.
 */
void treq_init(TReq *r, BlockOp op, int64_t offset, void *buf,
               int64_t bytes);

/*
 * Submit r to bs (setting submit_ns) and check that its callback did not
 * run inside submit.  bs's home thread.
 */
void treq_submit(BlockNode *bs, TReq *r);

/*
 * treq_submit(), then drain bs; checks that r was in flight until the
 * drain completed it.  Returns r's result.  bs's home thread.
 */
int treq_run(BlockNode *bs, TReq *r);

/* A request of op on buf[0..bytes) (treq_init()) through treq_run(). */
int run_op(BlockNode *bs, BlockOp op, int64_t offset, void *buf,
           int64_t bytes);

/*
 * The node opened from str (block_node_open_str()) in ctx; fails the test
 * with the error's message if it cannot be opened.  ctx's home thread.
 */
BlockNode *open_ok(const char *str, AioContext *ctx);

/*
 * Opening str in ctx must fail with a message that contains needle;
 * fails the test otherwise.  ctx's home thread.
 */
void open_fails(const char *str, AioContext *ctx, const char *needle);

/*
 * A new temporary file of size bytes (zeroes, sparse) in the temporary
 * directory: its path (the caller unlinks and frees it); tmp_image_open()
 * also returns it open (read/write), for the caller to close.
 */
char *tmp_image(int64_t size);
int tmp_image_open(int64_t size, char **path);

/*
 * Attach the file backing to a free loop device with auto-clear (it goes
 * away when the last descriptor is closed, even if the test dies).
 * Returns the holding descriptor and sets *dev (the caller frees it), or
 * returns -errno (no loop device to be had, or no permission).
 */
int loop_attach(const char *backing, char **dev);

/*
 * A new thread that runs fn(opaque) in ctx's home thread (aio_run_sync())
 * and ends when it has returned; the caller joins it.  Any thread.
 */
GThread *ctx_job_start(AioContext *ctx, void (*fn)(void *opaque),
                       void *opaque);

#endif

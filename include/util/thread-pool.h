/*
 * Thread pool for blocking work (fsync on a slow device, fallocate, I/O
 * with aio=threads).  Work runs on a shared set of worker threads (a GLib
 * GThreadPool); its completion callback runs in the AioContext that
 * submitted it, through a bottom half, so the submitter never needs a lock.
 */
#ifndef SPINDLE_UTIL_THREAD_POOL_H
#define SPINDLE_UTIL_THREAD_POOL_H

#include "util/aio.h"

/* Runs in a worker thread.  Returns 0 or -errno. */
typedef int ThreadPoolFunc(void *arg);

/* Runs in the submitting context's home thread with func's return value. */
typedef void ThreadPoolDoneFunc(void *opaque, int ret);

/*
 * Run func(arg) in a worker, then done(opaque, ret) in ctx's home thread.
 * Home thread of ctx.  One allocation per call.
 */
void thread_pool_submit(AioContext *ctx, ThreadPoolFunc *func, void *arg,
                        ThreadPoolDoneFunc *done, void *opaque);

/* Requests of ctx submitted and not yet completed.  Home thread of ctx. */
unsigned thread_pool_in_flight(AioContext *ctx);

#endif

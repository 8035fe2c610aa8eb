/*
 * The main thread: the one that runs the main loop's AioContext, where the
 * command line, the QMP monitors, the vhost-user sockets and the creation
 * and deletion of IOThreads, nodes and exports live (docs/devel/
 * architecture.md, Threads; docs/devel/threading.md).  A function whose comment says "Main thread." begins with
 * assert_main_thread().
 *
 * Which thread that is: the home thread of the context given to
 * main_loop_set_context() (the daemon sets it at start-up, before it
 * creates anything; a unit test that drives main-thread code from a thread
 * of its own sets the context that thread runs).  Until a context is set,
 * it is the process's first thread.
 */
#ifndef SPINDLE_UTIL_MAIN_THREAD_H
#define SPINDLE_UTIL_MAIN_THREAD_H

#include <stdbool.h>
#include <glib.h>
#include "util/aio.h"

/*
 * Make ctx the main loop's context (NULL: none again).  Called from ctx's
 * home thread, which becomes the main thread, before other threads look.
 */
void main_loop_set_context(AioContext *ctx);

/* The main loop's context, or NULL before main_loop_set_context(). */
AioContext *main_loop_get_context(void);

/* True in the main thread. */
bool in_main_thread(void);

#define assert_main_thread() g_assert(in_main_thread())

#endif

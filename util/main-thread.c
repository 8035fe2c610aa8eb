/*
 * The main thread (include/util/main-thread.h).
 *
 * The context is written once at start-up (and cleared at shutdown) by
 * the thread that becomes the main thread, and read by any thread that
 * asserts; an acquire/release pair, so a reader that sees the context
 * sees it fully made.
 */
#include <stdatomic.h>
#include <unistd.h>
#include "util/main-thread.h"

static _Atomic(AioContext *) main_loop_ctx;

void main_loop_set_context(AioContext *ctx)
{
    g_assert(!ctx || aio_context_in_home_thread(ctx));
    /* Pairs with the acquire load in main_loop_get_context(). */
    atomic_store_explicit(&main_loop_ctx, ctx, memory_order_release);
}

AioContext *main_loop_get_context(void)
{
    return atomic_load_explicit(&main_loop_ctx, memory_order_acquire);
}

bool in_main_thread(void)
{
    AioContext *ctx = main_loop_get_context();

    if (ctx) {
        return aio_context_in_home_thread(ctx);
    }
    return gettid() == getpid();
}

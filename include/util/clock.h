/*
 * Monotonic time in nanoseconds.  Any thread.
 */
#ifndef SPINDLE_UTIL_CLOCK_H
#define SPINDLE_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds.  Cheap (vDSO), never goes backwards. */
static inline int64_t clock_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* CPU time (user + system) consumed by the calling thread, in nanoseconds. */
static inline int64_t clock_thread_cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Tell the CPU we are spinning (x86 PAUSE); a compiler barrier elsewhere. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

#endif

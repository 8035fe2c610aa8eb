/*
 * Trace points (USDT probes, provider "spindle").  Off by default: a probe
 * that nobody attached to is a single NOP.  Every probe is listed, with its
 * arguments and the programs that carry it, in util/trace-probes.h; a
 * SPINDLE_TRACEn() of a probe that is not listed there, or with another
 * number of arguments, does not compile.  List what a binary carries with
 *     readelf -n build/<binary> | grep -A2 stapsdt
 * and attach with bpftrace/perf/systemtap, e.g.
 *     bpftrace -e 'usdt:./prog:spindle:poll_grow { printf("%d\n", arg2); }'
 */
#ifndef SPINDLE_UTIL_TRACE_H
#define SPINDLE_UTIL_TRACE_H

#include "config-host.h"

/* One constant per listed probe: its number of arguments. */
#define SPINDLE_PROBE(name, nargs, binaries, args) \
    SPINDLE_PROBE_NARGS_##name = (nargs),
enum {
#include "util/trace-probes.h"
};
#undef SPINDLE_PROBE

#define SPINDLE_TRACE_CHECK(name, n)                                        \
    _Static_assert(SPINDLE_PROBE_NARGS_##name == (n),                       \
                   "probe " #name " takes another number of arguments "     \
                   "in util/trace-probes.h")

#ifdef CONFIG_SDT
#include <sys/sdt.h>
#define SPINDLE_TRACE0(name) do {                                           \
        SPINDLE_TRACE_CHECK(name, 0);                                       \
        DTRACE_PROBE(spindle, name);                                        \
    } while (0)
#define SPINDLE_TRACE1(name, a) do {                                        \
        SPINDLE_TRACE_CHECK(name, 1);                                       \
        DTRACE_PROBE1(spindle, name, a);                                    \
    } while (0)
#define SPINDLE_TRACE2(name, a, b) do {                                     \
        SPINDLE_TRACE_CHECK(name, 2);                                       \
        DTRACE_PROBE2(spindle, name, a, b);                                 \
    } while (0)
#define SPINDLE_TRACE3(name, a, b, c) do {                                  \
        SPINDLE_TRACE_CHECK(name, 3);                                       \
        DTRACE_PROBE3(spindle, name, a, b, c);                              \
    } while (0)
#else
#define SPINDLE_TRACE0(name) do {                                           \
        SPINDLE_TRACE_CHECK(name, 0);                                       \
    } while (0)
#define SPINDLE_TRACE1(name, a) do {                                        \
        SPINDLE_TRACE_CHECK(name, 1);                                       \
        (void)(a);                                                          \
    } while (0)
#define SPINDLE_TRACE2(name, a, b) do {                                     \
        SPINDLE_TRACE_CHECK(name, 2);                                       \
        (void)(a); (void)(b);                                               \
    } while (0)
#define SPINDLE_TRACE3(name, a, b, c) do {                                  \
        SPINDLE_TRACE_CHECK(name, 3);                                       \
        (void)(a); (void)(b); (void)(c);                                    \
    } while (0)
#endif

#endif

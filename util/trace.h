/*
 * Trace points (USDT probes, provider "spindle").  Off by default: a probe
 * that nobody attached to is a single NOP.  List them with
 *     readelf -n build/<binary> | grep -A2 stapsdt
 * and attach with bpftrace/perf/systemtap, e.g.
 *     bpftrace -e 'usdt:./prog:spindle:poll_grow { printf("%d\n", arg2); }'
 */
#ifndef SPINDLE_UTIL_TRACE_H
#define SPINDLE_UTIL_TRACE_H

#include "config-host.h"

#ifdef CONFIG_SDT
#include <sys/sdt.h>
#define SPINDLE_TRACE0(name)             DTRACE_PROBE(spindle, name)
#define SPINDLE_TRACE1(name, a)          DTRACE_PROBE1(spindle, name, a)
#define SPINDLE_TRACE2(name, a, b)       DTRACE_PROBE2(spindle, name, a, b)
#define SPINDLE_TRACE3(name, a, b, c)    DTRACE_PROBE3(spindle, name, a, b, c)
#else
#define SPINDLE_TRACE0(name)             do { } while (0)
#define SPINDLE_TRACE1(name, a)          do { (void)(a); } while (0)
#define SPINDLE_TRACE2(name, a, b)       do { (void)(a); (void)(b); } while (0)
#define SPINDLE_TRACE3(name, a, b, c)    do { (void)(a); (void)(b); (void)(c); } while (0)
#endif

#endif

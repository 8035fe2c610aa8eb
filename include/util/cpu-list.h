/*
 * CPU lists as a user writes them: "0-3,8" (CPU numbers and ranges,
 * comma-separated), for the --cpus options of the tools and benchmarks.
 *
 * A list is kept as an array of CPU numbers in the order given, ranges
 * expanded upwards, duplicates kept: spindle-bench pins its i-th thread to
 * the (i mod n)-th entry, so the order is the user's.
 *
 * Any thread; nothing here keeps state.
 */
#ifndef SPINDLE_UTIL_CPU_LIST_H
#define SPINDLE_UTIL_CPU_LIST_H

#include <sched.h>
#include <stdbool.h>

#include "util/error.h"

/*
 * Parse str into a new array of *n CPU numbers, each below CPU_SETSIZE;
 * free it with g_free().  An empty list or element, a range that ends
 * before it starts, and anything but digits, '-' and ',' are errors: NULL
 * with errp set to "NAME: expected CPU numbers and ranges such as 0,2 or
 * 0-3, got 'STR'".
 */
int *cpu_list_parse(const char *name, const char *str, unsigned *n,
                    Error **errp);

/*
 * Check that every CPU of cpus[0..n) is in this process's affinity mask
 * (pinning a thread to another would fail later, or run it elsewhere).
 * False with errp set to "NAME: CPU C is not in this process's affinity
 * mask (allowed: LIST)", or when the mask cannot be read.
 */
bool cpu_list_check_allowed(const char *name, const int *cpus, unsigned n,
                            Error **errp);

/* The CPUs of set as a list that cpu_list_parse() reads back: runs of
 * three or more as ranges ("0-3,8,9").  "" for an empty set.  Caller
 * frees. */
char *cpu_list_format(const cpu_set_t *set);

#endif

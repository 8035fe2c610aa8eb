/*
 * Strict parsing of command-line option values, for the tools and the
 * benchmarks (spindle-bench, spindle-vu-client, tests/bench).
 *
 * Every function parses the whole string: an empty value, a sign where
 * none is allowed, leading or trailing junk, overflow and a value out of
 * range are all errors.  The message starts with the option's name as the
 * user typed it and shows what was given, in the form
 *     --bs: expected a byte count such as 4096, 64k or 1G, got '4x'
 * so that a program prints it after its own name and nothing else.  (The
 * daemon's --blockdev and QMP values go through util/opts.h and
 * util/cutils.h instead, whose messages speak of parameters.)
 *
 * Integers are decimal, or hexadecimal after 0x; a leading 0 is not octal.
 *
 * Any thread; nothing here keeps state.  On failure *out is left alone.
 */
#ifndef SPINDLE_UTIL_CLI_PARSE_H
#define SPINDLE_UTIL_CLI_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <glib.h>

#include "util/error.h"

/*
 * An unsigned integer in [min, max].
 * "NAME: expected an integer from MIN to MAX, got 'STR'".
 */
bool cli_parse_uint(const char *name, const char *str, uint64_t min,
                    uint64_t max, uint64_t *out, Error **errp);

/*
 * A byte count: an integer with an optional suffix k, M, G or T (either
 * case; powers of 1024), which may be followed by "iB" or "B" ("64KiB").
 * "NAME: expected a byte count such as 4096, 64k or 1G, got 'STR'".
 */
bool cli_parse_size(const char *name, const char *str, uint64_t *out,
                    Error **errp);

/*
 * A decimal number from 0 to max (a rate, a fraction; "1.5", "2e3").
 * "NAME: expected a number from 0 to MAX, got 'STR'".
 */
bool cli_parse_number(const char *name, const char *str, double max,
                      double *out, Error **errp);

/*
 * A duration in seconds, a decimal number from 0 to max ("0.25").
 * "NAME: expected seconds from 0 to MAX, got 'STR'".
 */
bool cli_parse_seconds(const char *name, const char *str, double max,
                       double *out, Error **errp);

/*
 * on/off, yes/no or true/false.
 * "NAME: expected on or off, got 'STR'".
 */
bool cli_parse_bool(const char *name, const char *str, bool *out,
                    Error **errp);

/*
 * One of the n names in choices (a NULL entry is skipped); *out is its
 * index.  "NAME: expected A, B or C, got 'STR'".
 */
bool cli_parse_choice(const char *name, const char *str,
                      const char *const *choices, size_t n, int *out,
                      Error **errp);

/*
 * Parse argv with ctx (which holds the program's GOptionEntry tables):
 * GOption's own errors, and then a positional argument, which none of our
 * programs takes ("unexpected argument 'X'").  --help prints the usage and
 * exits inside, as GOption does.  Main thread, before anything else.
 */
bool cli_parse_argv(GOptionContext *ctx, int argc, char **argv,
                    Error **errp);

#endif

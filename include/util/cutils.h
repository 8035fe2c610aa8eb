/*
 * Strict parsing of user-supplied values (command line, QMP, properties).
 * Any thread.
 */
#ifndef SPINDLE_UTIL_CUTILS_H
#define SPINDLE_UTIL_CUTILS_H

#include <stdbool.h>
#include <stdint.h>
#include "util/error.h"

/*
 * Parse the whole of str as a decimal (or 0x hexadecimal; a leading 0 is
 * not octal) integer in
 * [min, max].  Leading/trailing junk, an empty string, overflow and values
 * out of range are errors; the message names "name" (an option or property)
 * and says what range is accepted.
 */
bool parse_int64_in_range(const char *name, const char *str, int64_t min,
                          int64_t max, int64_t *out, Error **errp);

/* Parse "on/off/yes/no/true/false" into *out; errors name "name". */
bool parse_bool(const char *name, const char *str, bool *out, Error **errp);

/*
 * Whether str is made only of ASCII letters, digits, '-', '.' and '_', the
 * characters of a node-name or an object id (true for "").
 */
bool id_chars_valid(const char *str);

/*
 * Multiply a non-negative value by a non-negative factor, saturating at
 * INT64_MAX instead of overflowing.
 */
static inline int64_t mul_sat_int64(int64_t a, int64_t b)
{
    int64_t r;

    if (__builtin_mul_overflow(a, b, &r)) {
        return INT64_MAX;
    }
    return r;
}

/*
 * splitmix64: step x by the golden ratio and mix the bits.  A good hash of
 * one 64-bit value, and the usual way to turn a small seed into a PRNG
 * state.
 */
static inline uint64_t splitmix64(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* xorshift64*: a fast PRNG for workloads.  *state must not be 0. */
static inline uint64_t xorshift64star(uint64_t *state)
{
    uint64_t x = *state;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * UINT64_C(0x2545f4914f6cdd1d);
}

/* a + b for non-negative b, saturating at INT64_MAX. */
static inline int64_t add_sat_int64(int64_t a, int64_t b)
{
    int64_t r;

    if (__builtin_add_overflow(a, b, &r)) {
        return INT64_MAX;
    }
    return r;
}

#endif

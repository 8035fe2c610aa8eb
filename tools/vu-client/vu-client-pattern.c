/*
 * spindle-vu-client: the data pattern.
 *
 * Theory of operation
 * -------------------
 * Word i (8 bytes, little-endian) of the disk written with seed S is
 * splitmix64's output function applied to S + (i + 1) * golden ratio
 * (docs/frontend.md spells it out for the tests' Python side).  So the
 * pattern of any range can be made or checked without knowing how it was
 * written, and a check names the first differing byte and the words
 * around it.
 */

#include <string.h>

#include <glib.h>

#include "vu-client-pattern.h"

uint64_t pattern_word(uint64_t seed, uint64_t word_index)
{
    /* splitmix64's output function over seed + golden-ratio steps. */
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (word_index + 1);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void pattern_fill(uint8_t *buf, uint64_t disk_off, size_t len, uint64_t seed)
{
    size_t i;

    g_assert(disk_off % 8 == 0 && len % 8 == 0);
    for (i = 0; i < len; i += 8) {
        uint64_t w = pattern_word(seed, (disk_off + i) / 8);

        memcpy(buf + i, &w, 8);     /* little-endian host */
    }
}

bool pattern_check(const uint8_t *buf, uint64_t disk_off, size_t len,
                   uint64_t seed, uint64_t *bad_off, uint64_t *want,
                   uint64_t *got)
{
    size_t i;

    for (i = 0; i < len; i += 8) {
        uint64_t w = pattern_word(seed, (disk_off + i) / 8), g;

        memcpy(&g, buf + i, 8);
        if (g != w) {
            uint64_t diff = g ^ w;

            *bad_off = disk_off + i + __builtin_ctzll(diff) / 8;
            *want = w;
            *got = g;
            return false;
        }
    }
    return true;
}

bool zeroes_check(const uint8_t *buf, uint64_t disk_off, size_t len,
                  uint64_t *bad_off, uint64_t *got)
{
    size_t i;

    for (i = 0; i < len; i++) {
        if (buf[i]) {
            *bad_off = disk_off + i;
            *got = buf[i];
            return false;
        }
    }
    return true;
}

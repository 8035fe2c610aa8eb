/*
 * spindle-vu-client: the data pattern (docs/frontend.md).  Data written
 * with a seed is a pure function of the disk offset and the seed, so any
 * part of it can be checked later, by this program or by a test reading
 * the image file.  Pure functions: any thread.
 */
#ifndef SPINDLE_TOOLS_VU_CLIENT_PATTERN_H
#define SPINDLE_TOOLS_VU_CLIENT_PATTERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The pattern word for 8-byte word word_index of the disk, seed seed. */
uint64_t pattern_word(uint64_t seed, uint64_t word_index);
/* Fill buf (len bytes, len % 8 == 0) with the pattern of disk bytes
 * [disk_off, disk_off + len). */
void pattern_fill(uint8_t *buf, uint64_t disk_off, size_t len, uint64_t seed);
/* Compare; on a mismatch return false with *bad_off the disk offset of the
 * first differing byte, *want and *got the 8-byte words around it. */
bool pattern_check(const uint8_t *buf, uint64_t disk_off, size_t len,
                   uint64_t seed, uint64_t *bad_off, uint64_t *want,
                   uint64_t *got);
/* Verify bytes that should be zeroes; on a mismatch *bad_off / *got. */
bool zeroes_check(const uint8_t *buf, uint64_t disk_off, size_t len,
                  uint64_t *bad_off, uint64_t *got);

#endif

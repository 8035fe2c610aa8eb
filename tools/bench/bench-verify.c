/*
 * spindle-bench: self-checking block contents (--verify).
 *
 * Every 512-byte sector written carries its own description (bench.h):
 * magic, generation, sector number and a checksum, then bytes that follow
 * from the sector number and generation.  A sector read back can so be
 * judged on its own: the checksum catches changed bytes, the sector number
 * data that landed in the wrong place, and the generation (when the run
 * knows which write came last) data that a write should have replaced.
 */
#include <string.h>
#include <glib.h>

#include "bench.h"
#include "util/bswap.h"
#include "util/cutils.h"

#define OFF_MAGIC       0
#define OFF_GEN         4
#define OFF_SECTOR      8
#define OFF_CSUM        16
#define OFF_PAYLOAD     24

/* Checksum of a sector, its checksum field taken as zero. */
static uint64_t sector_csum(const uint8_t *s)
{
    uint64_t h = UINT64_C(0x5350494e444c45);            /* "SPINDLE" */

    for (unsigned i = 0; i < VERIFY_SECTOR; i += 8) {
        uint64_t w = i == OFF_CSUM ? 0 : ld_le64(s + i);

        h = splitmix64(h ^ w);
    }
    return h;
}

void verify_fill(void *buf, uint64_t off, size_t len, uint32_t gen)
{
    g_assert(off % VERIFY_SECTOR == 0 && len % VERIFY_SECTOR == 0);
    g_assert(gen >= 1);

    for (size_t done = 0; done < len; done += VERIFY_SECTOR) {
        uint8_t *s = (uint8_t *)buf + done;
        uint64_t sector = (off + done) / VERIFY_SECTOR;
        uint64_t state = sector * UINT64_C(0x100000001b3) ^ gen;

        st_le32(s + OFF_MAGIC, VERIFY_MAGIC);
        st_le32(s + OFF_GEN, gen);
        st_le64(s + OFF_SECTOR, sector);
        st_le64(s + OFF_CSUM, 0);
        for (unsigned i = OFF_PAYLOAD; i < VERIFY_SECTOR; i += 8) {
            state = splitmix64(state);
            st_le64(s + i, state);
        }
        st_le64(s + OFF_CSUM, sector_csum(s));
    }
}

const char *verify_problem_name(VerifyProblem p)
{
    switch (p) {
    case VERIFY_OK:
        return "ok";
    case VERIFY_NO_HEADER:
        return "no header";
    case VERIFY_WRONG_SECTOR:
        return "wrong sector";
    case VERIFY_BAD_CHECKSUM:
        return "bad checksum";
    case VERIFY_WRONG_GENERATION:
        return "wrong generation";
    }
    return "unknown";
}

/* Judge one sector that should be sector number `sector`. */
static VerifyProblem check_sector(const uint8_t *s, uint64_t sector,
                                  uint32_t expected_gen)
{
    if (ld_le32(s + OFF_MAGIC) != VERIFY_MAGIC) {
        return expected_gen ? VERIFY_NO_HEADER : VERIFY_OK;
    }
    if (ld_le64(s + OFF_CSUM) != sector_csum(s)) {
        return VERIFY_BAD_CHECKSUM;
    }
    if (ld_le64(s + OFF_SECTOR) != sector) {
        return VERIFY_WRONG_SECTOR;
    }
    if (expected_gen && ld_le32(s + OFF_GEN) != expected_gen) {
        return VERIFY_WRONG_GENERATION;
    }
    return VERIFY_OK;
}

unsigned verify_check(const void *buf, uint64_t off, size_t len,
                      uint32_t expected_gen, VerifyMismatch *first)
{
    unsigned bad = 0;

    g_assert(off % VERIFY_SECTOR == 0 && len % VERIFY_SECTOR == 0);
    for (size_t done = 0; done < len; done += VERIFY_SECTOR) {
        const uint8_t *s = (const uint8_t *)buf + done;
        uint64_t sector = (off + done) / VERIFY_SECTOR;
        VerifyProblem p = check_sector(s, sector, expected_gen);

        if (p == VERIFY_OK) {
            continue;
        }
        if (bad++ == 0 && first) {
            bool header = p != VERIFY_NO_HEADER;

            *first = (VerifyMismatch) {
                .offset = off + done,
                .problem = p,
                .found_sector = header ? ld_le64(s + OFF_SECTOR) : 0,
                .found_gen = header ? ld_le32(s + OFF_GEN) : 0,
                .expected_gen = expected_gen,
            };
        }
    }
    return bad;
}

/*
 * What the libFuzzer harnesses share (helpers.h).
 */
#include <string.h>
#include <glib.h>

#include "helpers.h"
#include "util/main-thread.h"

/* Enough for any chain of BHs an input sets off; more is a hang. */
#define FUZZ_POLL_MAX_TURNS 1000

AioContext *fuzz_main_context(void)
{
    static AioContext *ctx;

    if (!ctx) {
        Error *err = NULL;

        ctx = aio_context_new(&err);
        g_assert_no_error(err);
        main_loop_set_context(ctx);
    }
    return ctx;
}

void fuzz_poll(AioContext *ctx)
{
    for (int i = 0; i < FUZZ_POLL_MAX_TURNS && aio_poll(ctx, false); i++) {
        /* progress */
    }
}

/* A byte that continues a word: "file" followed by one is another word
 * ("file.driver", the child's options), not the driver's name. */
static bool fuzz_is_word_byte(uint8_t c)
{
    return g_ascii_isalnum(c) || c == '.' || c == '-' || c == '_';
}

bool fuzz_may_name_host_file(const uint8_t *data, size_t size)
{
    const uint8_t *p = data, *end = data + size;

    /* driver=nbd would connect to a server (and look its host up);
     * driver=rbd would read a Ceph configuration and reach a cluster. */
    if (memmem(data, size, "\\u", 2) || memmem(data, size, "nbd", 3) ||
        memmem(data, size, "rbd", 3)) {
        return true;
    }
    while ((p = memmem(p, end - p, "file", 4))) {
        const uint8_t *q = p + 4;

        p++;
        if (q < end && fuzz_is_word_byte(*q)) {
            continue;
        }
        /* "file": ... is a JSON key (a child), not a value. */
        if (q < end && *q == '"') {
            for (q++; q < end && g_ascii_isspace(*q); q++) {
                /* skip */
            }
            if (q < end && *q == ':') {
                continue;
            }
        }
        return true;
    }
    return false;
}

char *fuzz_input_string(const uint8_t *data, size_t size)
{
    if (memchr(data, 0, size)) {
        return NULL;
    }
    return g_strndup((const char *)data, size);
}

size_t fuzz_read_bytes(FuzzReader *r, void *buf, size_t n)
{
    size_t got = MIN(n, r->left);

    memcpy(buf, r->p, got);
    memset((uint8_t *)buf + got, 0, n - got);
    r->p += got;
    r->left -= got;
    return got;
}

void fuzz_read_skip(FuzzReader *r, size_t n)
{
    size_t got = MIN(n, r->left);

    r->p += got;
    r->left -= got;
}

uint8_t fuzz_read_u8(FuzzReader *r)
{
    uint8_t v;

    fuzz_read_bytes(r, &v, sizeof(v));
    return v;
}

uint16_t fuzz_read_u16(FuzzReader *r)
{
    uint16_t v;

    fuzz_read_bytes(r, &v, sizeof(v));
    return GUINT16_FROM_LE(v);
}

uint32_t fuzz_read_u32(FuzzReader *r)
{
    uint32_t v;

    fuzz_read_bytes(r, &v, sizeof(v));
    return GUINT32_FROM_LE(v);
}

uint64_t fuzz_read_u64(FuzzReader *r)
{
    uint64_t v;

    fuzz_read_bytes(r, &v, sizeof(v));
    return GUINT64_FROM_LE(v);
}

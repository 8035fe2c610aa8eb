/*
 * Copying between a flat buffer and an iovec array.  Both directions walk
 * the array the same way: entries wholly before the offset are skipped,
 * then each entry takes what is left of the request, until the request or
 * the array ends.
 */
#include <stdint.h>
#include <string.h>
#include <stdbool.h>
#include <glib.h>

#include "util/iov.h"

size_t iov_size(const struct iovec *iov, unsigned niov)
{
    size_t total = 0;

    for (unsigned i = 0; i < niov; i++) {
        total += iov[i].iov_len;
    }
    return total;
}

/*
 * Copy len bytes between buf and iov starting offset bytes into iov; to_buf
 * says which way.  Returns the bytes copied.
 */
static size_t iov_copy(const struct iovec *iov, unsigned niov, size_t offset,
                       uint8_t *buf, size_t len, bool to_buf)
{
    size_t done = 0;

    for (unsigned i = 0; i < niov && done < len; i++) {
        uint8_t *base;
        size_t n;

        if (offset >= iov[i].iov_len) {
            offset -= iov[i].iov_len;
            continue;
        }
        base = (uint8_t *)iov[i].iov_base + offset;
        n = MIN(iov[i].iov_len - offset, len - done);
        if (to_buf) {
            memcpy(buf + done, base, n);
        } else {
            memcpy(base, buf + done, n);
        }
        done += n;
        offset = 0;
    }
    return done;
}

size_t iov_to_buf(const struct iovec *iov, unsigned niov, size_t offset,
                  void *buf, size_t len)
{
    return iov_copy(iov, niov, offset, buf, len, true);
}

void iov_zero_from(const struct iovec *iov, unsigned niov, size_t offset)
{
    for (unsigned i = 0; i < niov; i++) {
        if (offset >= iov[i].iov_len) {
            offset -= iov[i].iov_len;
            continue;
        }
        memset((uint8_t *)iov[i].iov_base + offset, 0,
               iov[i].iov_len - offset);
        offset = 0;
    }
}

size_t iov_from_buf(const struct iovec *iov, unsigned niov, size_t offset,
                    const void *buf, size_t len)
{
    /* iov_copy() only reads buf when copying into iov. */
    return iov_copy(iov, niov, offset, (uint8_t *)buf, len, false);
}

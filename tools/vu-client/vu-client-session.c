/*
 * spindle-vu-client: the session's shared state.
 *
 * Theory of operation
 * -------------------
 * The client remembers what it wrote or zeroed in this run as a list of
 * non-overlapping extents (pattern with its seed, or zeroes), so that
 * `reconnect` can verify all of it through the new session.  A write
 * records its range (replacing what was known there), a failed or
 * unknown write forgets it; an extent cut in the middle becomes two.
 *
 * client_strerror() words the data path's errnos for a user, and
 * client_reaction() names what a device did with a test request
 * (malformed, scsi-bad-request).
 */

#include <errno.h>

#include <glib.h>

#include "util/error.h"
#include "vu-client-session.h"

const char *client_strerror(int err)
{
    static const struct {
        int err;
        const char *message;
    } messages[] = {
        { ETIMEDOUT, "no completion within the timeout (see --timeout)" },
        { ECONNRESET, "the back-end hung up" },
        { EIO, "the device put an invalid entry in the used ring" },
        { ENOTCONN, "the queue is not set up (the session ended)" },
        { ENOTSUP, "indirect descriptors were not negotiated" },
        { E2BIG, "the request needs more segments than the device's "
                 "seg_max" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(messages); i++) {
        if (messages[i].err == err) {
            return messages[i].message;
        }
    }
    return g_strerror(err);
}

const char *client_reaction(VufQueue *q, void *token, int timeout_ms,
                            const char *what, uint32_t *used_len,
                            bool *closed, Error **errp)
{
    void *done;
    int ret = vufq_wait(q, timeout_ms * 1000000ll);

    *closed = ret == -ECONNRESET;
    if (ret == 0) {
        ret = vufq_get_used(q, &done, used_len);
        return ret == 1 && (!token || done == token) ? "completed"
                                                      : "bad-used-entry";
    }
    if (ret == -ECONNRESET || ret == -ETIMEDOUT) {
        return *closed ? "closed" : "no-completion";
    }
    error_setg(errp, "waiting after %s: %s", what, client_strerror(-ret));
    return NULL;
}

void extents_forget(Client *c, uint64_t start, uint64_t len)
{
    uint64_t end = start + len;
    guint i = 0;

    while (i < c->extents->len) {
        Extent *e = &g_array_index(c->extents, Extent, i);

        if (e->end <= start || e->start >= end) {
            i++;
            continue;
        }
        if (e->start < start && e->end > end) {
            Extent tail = *e;

            tail.start = end;
            e->end = start;
            g_array_insert_val(c->extents, i + 1, tail);
            i += 2;
        } else if (e->start < start) {
            e->end = start;
            i++;
        } else if (e->end > end) {
            e->start = end;
            i++;
        } else {
            g_array_remove_index(c->extents, i);
        }
    }
}

void extents_record(Client *c, uint64_t start, uint64_t len,
                    ExtentKind kind, uint64_t seed)
{
    Extent e = { start, start + len, kind, seed };

    extents_forget(c, start, len);
    g_array_append_val(c->extents, e);
}

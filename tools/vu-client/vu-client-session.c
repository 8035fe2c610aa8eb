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
 *
 * Every request the commands add is noted by its virtqueue and available
 * ring index (client_note_request()), so that when a back-end that took
 * over after a crash completes one that was done already (a replay: its
 * descriptor head is not in flight any more), client_io_error() can
 * say which request it ran again.
 */

#include <errno.h>
#include <limits.h>

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

static guint request_key(VufQueue *q, uint16_t avail_pos)
{
    return vufq_index(q) << 16 | avail_pos;
}

void client_note_request(Client *c, VufQueue *q, const char *what)
{
    if (!c->names) {
        c->names = g_hash_table_new_full(g_direct_hash, g_direct_equal,
                                         NULL, g_free);
    }
    g_hash_table_insert(c->names,
                        GUINT_TO_POINTER(request_key(q, vufq_avail_idx(q))),
                        g_strdup(what));
}

/* Why err happened on q, as client_io_error() says it.  Caller frees. */
static char *queue_error(Client *c, VufQueue *q, int err)
{
    const char *what = NULL;
    uint16_t pos;
    unsigned head;
    void *token;

    if (err != -EIO || !vufq_bad_used(q, &head, &token, &pos)) {
        return g_strdup(client_strerror(-err));
    }
    if (token && c->names) {
        what = g_hash_table_lookup(c->names,
                                   GUINT_TO_POINTER(request_key(q, pos)));
    }
    if (!what) {
        return g_strdup_printf("the device completed descriptor head %u, "
                               "which is not in flight", head);
    }
    return g_strdup_printf("replay: the device completed %s (avail index "
                           "%u, descriptor head %u) again, which had "
                           "completed already", what, pos, head);
}

void client_io_error(Client *c, VufQueue *q, int err, const char *what,
                     Error **errp)
{
    g_autofree char *why = queue_error(c, q, err);
    bool scsi = c->opts->device == VUF_DEVICE_SCSI;

    error_setg(errp, "%s on %squeue %u: %s", what, scsi ? "request " : "",
               vufq_index(q) - (scsi ? VIRTIO_SCSI_VQ_REQUEST0 : 0), why);
}

int client_wait_timeout_ms(const Client *c, const Command *cmd)
{
    double s = cmd->wait_s >= 0 ? cmd->wait_s : c->opts->timeout_s;

    return (int)MIN(s * 1000, (double)INT_MAX);
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

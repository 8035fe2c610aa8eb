/*
 * spindle-vu-client: the session every command runs in (Client): the
 * front-end, one synchronous request per queue, what is known about the
 * disk's contents, and the virtio-scsi state.  Main thread, except that
 * verify-run's queue threads read it.
 */
#ifndef SPINDLE_TOOLS_VU_CLIENT_SESSION_H
#define SPINDLE_TOOLS_VU_CLIENT_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "vu-client-cmd.h"
#include "vu-frontend.h"

/* What is known about the disk's contents, for `reconnect` to verify. */
typedef enum ExtentKind {
    EXTENT_PATTERN,
    EXTENT_ZEROES,
} ExtentKind;

typedef struct Extent {
    uint64_t start, end;        /* bytes, end exclusive */
    ExtentKind kind;
    uint64_t seed;
} Extent;

struct Client {
    ClientOpts *opts;
    VuFrontend *fe;
    VufBlkReq **reqs;           /* one synchronous request per queue */
    size_t chunk;               /* data bytes of each of those */
    GArray *extents;            /* Extent, non-overlapping */
    unsigned add_flags;         /* VUFQ_ADD_INDIRECT or 0 */
    int64_t timeout_ns;
    /* virtio-scsi (vu-client-scsi.c) */
    VufScsiReq **sreqs;         /* one synchronous command per request
                                 * queue */
    VufScsiCtrl *ctrl;
    VufScsiEventBuf **events;   /* posted on the event queue */
    unsigned nevents;
    GArray *event_log;          /* VirtioScsiEvent received so far */
    uint64_t next_tag;          /* tag of the next command (from 1) */
    uint64_t last_tag;          /* tag of the last command sent */
    GHashTable *block_sizes;    /* LUN -> READ CAPACITY's block size */
    /* Crash recovery (vu-client-inflight.c) */
    GPtrArray *pending;         /* Pending *: writes submitted without
                                 * waiting, in submission order */
    GHashTable *names;          /* virtqueue << 16 | avail index -> what
                                 * the request published there was */
    /* Dirty logging (vu-client-log.c), since log-start: pages found
     * dirty and pages expected, page bitmaps of vuf_log_words() words,
     * or NULL. */
    uint64_t *log_seen;
    uint64_t *log_expected;
};

/* The number of request queues (SCSI) or queues (blk) to use. */
static inline unsigned client_io_queues(const Client *c)
{
    unsigned n = vuf_num_queues(c->fe);

    return c->opts->device == VUF_DEVICE_SCSI ? n - VIRTIO_SCSI_VQ_REQUEST0
                                              : n;
}

/* Message for a data-path errno from the vufq/vufblk/vufscsi functions. */
const char *client_strerror(int err);

/*
 * Remember what the request about to be added to q is (what, copied), so
 * that a replay of it can be named (client_io_error()).
 */
void client_note_request(Client *c, VufQueue *q, const char *what);

/*
 * Set errp to "WHAT on [request ]queue N: WHY" for data-path error err
 * (-errno) on q: why is client_strerror(), but when the device returned a
 * used element for a request that is not in flight (vufq_bad_used()),
 * which request that was (a replay).
 */
void client_io_error(Client *c, VufQueue *q, int err, const char *what,
                     Error **errp);

/* A command's --timeout in ms: its own, else the global one. */
int client_wait_timeout_ms(const Client *c, const Command *cmd);

/*
 * After a test request was queued on q: wait up to timeout_ms and say how
 * the device reacted: "completed" (token's, or any if token is NULL;
 * *used_len the length the device wrote, if used_len), "bad-used-entry",
 * "closed" (*closed set) or "no-completion".  NULL with errp set
 * ("waiting after <what>: ...") when the wait fails otherwise.
 */
const char *client_reaction(VufQueue *q, void *token, int timeout_ms,
                            const char *what, uint32_t *used_len,
                            bool *closed, Error **errp);

/* Forget what is known about [start, start+len). */
void extents_forget(Client *c, uint64_t start, uint64_t len);
/* Remember that [start, start+len) holds kind (with seed for a pattern). */
void extents_record(Client *c, uint64_t start, uint64_t len, ExtentKind kind,
                    uint64_t seed);

#endif

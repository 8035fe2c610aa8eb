/*
 * spindle-vu-client: requests left in flight (write --no-wait,
 * scsi-write --no-wait) and resume, the front-end's side of a back-end
 * crash.
 *
 * Theory of operation
 * -------------------
 * A write submitted without waiting gets a Pending record and a request
 * of its own (VufBlkReq or VufScsiReq: the virtqueue token) with a buffer
 * for its data; it stays outstanding until its completion is harvested:
 * by the synchronous commands that run on its queue meanwhile
 * (vufq_set_other_done() hands them its completion) or by resume.
 *
 * resume is what a guest lives through when QEMU reconnects to a
 * restarted back-end: wait until the socket drops (a test kills the
 * daemon), vuf_resume() (connect again, hand the inflight region back,
 * set the queues up on their rings with SET_VRING_BASE = the used index),
 * then collect every outstanding request within the timeout.  Two
 * failures are what inflight tracking exists to prevent, and what resume
 * reports:
 *   - a replay: a used element whose head is not in flight, i.e. the
 *     new back-end ran a request that had completed already
 *     (client_io_error() names it);
 *   - a loss: an outstanding request that does not complete in time.
 * A virtio-blk write that completes with OK joins the session's extents,
 * which `reconnect` verifies; any write that completes with an error
 * fails the command that collects it.
 */

#include <inttypes.h>
#include <stdio.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "util/error.h"
#include "vu-client-inflight.h"
#include "vu-client-pattern.h"
#include "vu-client-scsi.h"
#include "vu-client-session.h"

#define SECTOR              VIRTIO_BLK_SECTOR_SIZE
#define SCSI_STATUS_GOOD    0x00

typedef struct Pending {
    char *what;                 /* "write at 0+4096" */
    unsigned queue;             /* --queue */
    VufQueue *q;
    VufBlkReq *blk;             /* one of the two is the token */
    VufScsiReq *scsi;
    uint64_t offset, len, seed;
    bool done;                  /* its completion was harvested */
    bool ok;                    /* ... with status OK (GOOD) */
    bool by_resume;             /* ... by resume */
} Pending;

static Pending *pending_find(Client *c, void *token)
{
    for (guint i = 0; c->pending && i < c->pending->len; i++) {
        Pending *p = c->pending->pdata[i];

        if (!p->done && (token == (void *)p->blk ||
                         token == (void *)p->scsi)) {
            return p;
        }
    }
    return NULL;
}

unsigned client_outstanding(const Client *c)
{
    unsigned n = 0;

    for (guint i = 0; c->pending && i < c->pending->len; i++) {
        n += !((Pending *)c->pending->pdata[i])->done;
    }
    return n;
}

/* p's completion came: judge it, and remember what a good write wrote. */
static void pending_done(Client *c, Pending *p, bool by_resume)
{
    p->done = true;
    p->by_resume = by_resume;
    if (p->blk) {
        p->ok = *p->blk->status == VIRTIO_BLK_S_OK;
    } else {
        p->ok = p->scsi->resp->response == VIRTIO_SCSI_S_OK &&
                p->scsi->resp->status == SCSI_STATUS_GOOD;
    }
    if (p->ok && p->blk) {
        extents_record(c, p->offset, p->len, EXTENT_PATTERN, p->seed);
    }
}

/* vufq_do_one() harvested an outstanding request's completion. */
static void other_done(VufQueue *q, void *token, uint32_t len, void *opaque)
{
    Client *c = opaque;
    Pending *p = pending_find(c, token);

    if (p) {
        pending_done(c, p, false);
    }
}

/* Allocate p's request with its data and prepare it as cmd's write. */
static bool pending_prep(Client *c, const Command *cmd, Pending *p,
                         Result *r, Error **errp)
{
    if (c->opts->device == VUF_DEVICE_SCSI) {
        p->scsi = vufscsi_req_new(c->fe, cmd->len, errp);
        if (!p->scsi) {
            return false;
        }
        p->scsi->data_segs = c->opts->segments;
        return scsi_prep_write(c, cmd, p->scsi, r, errp);
    }
    p->blk = vufblk_req_new(c->fe, cmd->len, errp);
    if (!p->blk) {
        return false;
    }
    p->blk->data_segs = c->opts->segments;
    pattern_fill(p->blk->data, cmd->offset, cmd->len, cmd->seed);
    vufblk_prep_write(p->blk, cmd->offset / SECTOR, cmd->len);
    return true;
}

bool client_submit_write(Client *c, const Command *cmd, Result *r,
                         Error **errp)
{
    bool scsi = c->opts->device == VUF_DEVICE_SCSI;
    VufQueue *q = vuf_queue(c->fe, scsi ? VUFSCSI_VQ_REQUEST(cmd->queue)
                                        : cmd->queue);
    Pending *p = g_new0(Pending, 1);
    int ret;

    *p = (Pending) {
        .what = g_strdup_printf("%s at %" PRIu64 "+%" PRIu64, cmd->name,
                                cmd->offset, cmd->len),
        .queue = cmd->queue, .q = q, .offset = cmd->offset,
        .len = cmd->len, .seed = cmd->seed,
        .done = true,           /* until it is in flight */
    };
    if (!c->pending) {
        c->pending = g_ptr_array_new();
    }
    g_ptr_array_add(c->pending, p);     /* freed at the end, whatever */
    res_int(r, "offset", cmd->offset);
    res_int(r, "len", cmd->len);
    res_int(r, "queue", cmd->queue);
    res_int(r, "seed", cmd->seed);
    if (!pending_prep(c, cmd, p, r, errp)) {
        return false;
    }
    client_note_request(c, q, p->what);
    ret = scsi ? vufscsi_submit(q, p->scsi, c->add_flags)
               : vufblk_submit(q, p->blk, c->add_flags);
    if (ret >= 0) {
        p->done = false;
        vufq_set_other_done(q, other_done, c);
        /* Unknown until it completes. */
        extents_forget(c, cmd->offset, cmd->len);
        ret = vufq_kick(q);
    }
    if (ret < 0) {
        client_io_error(c, q, ret, p->what, errp);
        return false;
    }
    res_bool(r, "outstanding", true);
    return true;
}

#define INFLIGHT_BOOL(field, name)  RES_BOOL(VufInflightInfo, field, name)
#define INFLIGHT_INT(field, name)   RES_FIELD(VufInflightInfo, field, name, 1)

static const ResField inflight_fields[] = {
    INFLIGHT_BOOL(negotiated, "negotiated"),
    INFLIGHT_BOOL(have_region, "region"),
    INFLIGHT_INT(mmap_size, "mmap_size"),
    INFLIGHT_INT(gets, "get_inflight_fd"),
    INFLIGHT_INT(sets, "set_inflight_fd"),
    INFLIGHT_INT(resumes, "resumes"),
    INFLIGHT_INT(resume_retries, "resume_retries"),
};

void res_inflight(Result *r, VuFrontend *fe)
{
    VufInflightInfo i;

    vuf_inflight_info(fe, &i);
    res_fields(r, "inflight", &i, inflight_fields,
               G_N_ELEMENTS(inflight_fields));
}

/* The outstanding requests on q: "a (queue 0), b (queue 0)". */
static char *outstanding_names(Client *c, VufQueue *q)
{
    GString *s = g_string_new(NULL);

    for (guint i = 0; i < c->pending->len; i++) {
        Pending *p = c->pending->pdata[i];

        if (!p->done && p->q == q) {
            g_string_append_printf(s, "%s%s (queue %u)", s->len ? ", " : "",
                                   p->what, p->queue);
        }
    }
    return g_string_free(s, FALSE);
}

/*
 * Harvest one completion on q before deadline_us (g_get_monotonic_time()):
 * true when one came, false with errp set on a replay, a loss (the time
 * ran out; timeout_ms is what it was) or another error.
 */
static bool collect_one(Client *c, VufQueue *q, int64_t deadline_us,
                        int timeout_ms, Result *r, Error **errp)
{
    int64_t left_us = MAX(deadline_us - g_get_monotonic_time(), 0);
    void *token = NULL;
    g_autofree char *msg = NULL;
    int ret = vufq_wait(q, left_us * 1000);
    Pending *p;

    if (ret == 0) {
        ret = vufq_get_used(q, &token, NULL);
    }
    if (ret == -ETIMEDOUT) {
        msg = outstanding_names(c, q);
        res_int(r, "lost", client_outstanding(c));
        error_setg(errp, "lost: %s did not complete within %.1f s after the "
                   "resume", msg, timeout_ms / 1000.0);
        return false;
    }
    if (ret < 0) {
        res_int(r, "replayed", vufq_bad_used(q, NULL, NULL, NULL));
        client_io_error(c, q, ret, "after the resume", errp);
        return false;
    }
    p = ret == 1 ? pending_find(c, token) : NULL;
    if (p) {
        pending_done(c, p, true);
    }
    return true;
}

/* Is a used element waiting on a queue with outstanding requests?  A
 * replay that came after the last of them shows here. */
static bool check_quiet(Client *c, Result *r, Error **errp)
{
    for (guint i = 0; i < c->pending->len; i++) {
        VufQueue *q = ((Pending *)c->pending->pdata[i])->q;
        void *token;
        int ret = vufq_get_used(q, &token, NULL);

        if (ret < 0) {
            res_int(r, "replayed", vufq_bad_used(q, NULL, NULL, NULL));
            client_io_error(c, q, ret, "after the resume", errp);
            return false;
        }
    }
    return true;
}

/* The requests' outcomes into r; false with errp set if a write failed. */
static bool report_pending(Client *c, unsigned before, Result *r,
                           Error **errp)
{
    JsonArray *a = res_array(r, "requests");
    unsigned by_resume = 0;
    Pending *failed = NULL;

    for (guint i = 0; i < c->pending->len; i++) {
        Pending *p = c->pending->pdata[i];
        JsonObject *o = json_object_new();

        json_object_set_string_member(o, "request", p->what);
        json_object_set_int_member(o, "queue", p->queue);
        json_object_set_boolean_member(o, "ok", p->ok);
        json_object_set_boolean_member(o, "by_resume", p->by_resume);
        json_array_add_object_element(a, o);
        by_resume += p->by_resume;
        if (!p->ok && !failed) {
            failed = p;
        }
    }
    res_int(r, "completed_after_resume", by_resume);
    res_int(r, "completed_before_resume", c->pending->len - before);
    res_int(r, "replayed", 0);
    if (failed) {
        error_setg(errp, "%s (queue %u) completed with an error",
                   failed->what, failed->queue);
        return false;
    }
    return true;
}

bool cmd_resume(Client *c, const Command *cmd, Result *r, Error **errp)
{
    int timeout_ms = client_wait_timeout_ms(c, cmd);
    int64_t deadline_us = g_get_monotonic_time() + timeout_ms * 1000ll;
    unsigned before = client_outstanding(c);

    res_int(r, "outstanding", before);
    if (!c->pending) {
        c->pending = g_ptr_array_new();
    }
    /* A test watching stderr knows the earlier commands are done. */
    fprintf(stderr, "spindle-vu-client: waiting for the back-end to go "
            "away\n");
    fflush(stderr);
    if (!vuf_resume(c->fe, timeout_ms, errp)) {
        res_inflight(r, c->fe);
        return false;
    }
    res_inflight(r, c->fe);
    for (guint i = 0; i < c->pending->len; i++) {
        Pending *p = c->pending->pdata[i];

        while (!p->done) {
            if (!collect_one(c, p->q, deadline_us, timeout_ms, r, errp)) {
                return false;
            }
        }
    }
    return check_quiet(c, r, errp) && report_pending(c, before, r, errp);
}

void client_inflight_free(Client *c)
{
    for (guint i = 0; c->pending && i < c->pending->len; i++) {
        Pending *p = c->pending->pdata[i];

        vufblk_req_free(c->fe, p->blk);
        vufscsi_req_free(c->fe, p->scsi);
        g_free(p->what);
        g_free(p);
    }
    g_clear_pointer(&c->pending, g_ptr_array_unref);
    g_clear_pointer(&c->names, g_hash_table_unref);
}

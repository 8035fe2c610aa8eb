/*
 * spindle-vu-client: dirty page logging (log-start, log-stop, log-dirty),
 * the part of a live migration a vhost-user device takes.
 *
 * Theory of operation
 * -------------------
 * log-start and log-stop switch logging on and off on the running rings
 * as a migrating QEMU does (vuf_log_start(), vuf_log_stop()); the client
 * asks for LOG_SHMFD at connect only when one of the log commands is on
 * its line (QEMU offers LOG_ALL only while it migrates, too).
 *
 * log-dirty is one round of QEMU's copy loop: it reads and clears the log
 * (vuf_log_take_dirty()) and compares it with what the front-end knows
 * the device must have written since the last round: the first
 * used-length bytes of the device-writable buffers of every request that
 * completed (reads' data, status bytes, GET_ID serials, SCSI responses,
 * sense and data-in, event buffers) and the used ring entries
 * (vuf_log_take_expected()).  A page expected but never found dirty since
 * log-start is missing: the log would have let a migration lose what the
 * device wrote there, and log-dirty fails.  A page dirty but never
 * expected is extra: allowed, reported.  A device writes more than the
 * front-end can tell: the used rings' flags and avail_event, whenever it
 * changes its notification state; the used rings' pages are reported
 * too (used_rings), so that a test can tell those from data pages.
 * Both are judged against everything seen since log-start, so that a
 * request whose completion is harvested a round after the device logged
 * it (a write left in flight) counts right.
 *
 * Page sets are bitmaps in the log's layout (bit p of word p / 64 is the
 * page at guest address p * 4096), reported as [first page, count]
 * ranges.
 */

#include <inttypes.h>
#include <string.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "util/error.h"
#include "vu-client-log.h"
#include "vu-client-session.h"

/* Missing ranges named in log-dirty's error, at most. */
#define MISSING_NAMED       8

bool client_wants_dirty_log(const ClientOpts *o)
{
    for (guint i = 0; i < o->commands->len; i++) {
        CmdKind k = ((const Command *)o->commands->pdata[i])->kind;

        if (k == CMD_LOG_START || k == CMD_LOG_STOP || k == CMD_LOG_DIRTY) {
            return true;
        }
    }
    return false;
}

#define LOG_BOOL(field)     RES_BOOL(VufLogInfo, field, #field)
#define LOG_INT(field)      RES_FIELD(VufLogInfo, field, #field, 1)

static const ResField dirty_log_fields[] = {
    LOG_BOOL(negotiated),
    LOG_BOOL(log_all_offered),
    LOG_BOOL(logging),
    LOG_INT(log_size),
    LOG_INT(log_size_needed),
    LOG_INT(pages),
    LOG_INT(set_log_base),
    RES_FIELD(VufLogInfo, log_base_reply, "set_log_base_reply", 1),
};

void res_dirty_log(Result *r, VuFrontend *fe)
{
    VufLogInfo i;

    vuf_log_info(fe, &i);
    res_fields(r, "dirty_log", &i, dirty_log_fields,
               G_N_ELEMENTS(dirty_log_fields));
}

void client_log_free(Client *c)
{
    g_clear_pointer(&c->log_seen, g_free);
    g_clear_pointer(&c->log_expected, g_free);
}

bool cmd_log_start(Client *c, const Command *cmd, Result *r, Error **errp)
{
    size_t words = vuf_log_words(c->fe);
    bool ok = vuf_log_start(c->fe, cmd->size, errp);

    if (ok) {
        client_log_free(c);
        c->log_seen = g_new0(uint64_t, words);
        c->log_expected = g_new0(uint64_t, words);
    }
    res_dirty_log(r, c->fe);
    return ok;
}

bool cmd_log_stop(Client *c, const Command *cmd, Result *r, Error **errp)
{
    bool ok = vuf_log_stop(c->fe, errp);

    res_dirty_log(r, c->fe);
    return ok;
}

/* The pages set in bits (words long) as [first, count] ranges, member key
 * of r; returns how many pages. */
static uint64_t res_pages(Result *r, const char *key, const uint64_t *bits,
                          size_t words)
{
    JsonArray *a = res_array(r, key);
    uint64_t pages = words * 64, count = 0, p = 0;

    while (p < pages) {
        uint64_t first;
        JsonArray *range;

        if (!(bits[p / 64] & (1ull << (p % 64)))) {
            p++;
            continue;
        }
        for (first = p; p < pages && (bits[p / 64] & (1ull << (p % 64)));
             p++) {
        }
        range = json_array_new();
        json_array_add_int_element(range, first);
        json_array_add_int_element(range, p - first);
        json_array_add_array_element(a, range);
        count += p - first;
    }
    return count;
}

/* The pages of every queue's used ring (flags, idx, ring, avail_event)
 * into bits. */
static void used_ring_pages(VuFrontend *fe, uint64_t *bits)
{
    for (unsigned i = 0; i < vuf_num_queues(fe); i++) {
        VufQueue *q = vuf_queue(fe, i);
        uint64_t gpa = vuf_gpa(fe, vufq_used(q));
        uint64_t end = gpa + sizeof(VRingUsed) +
                       sizeof(VRingUsedElem) * vufq_size(q) + sizeof(uint16_t);

        for (uint64_t p = gpa / VUF_LOG_PAGE; p <= (end - 1) / VUF_LOG_PAGE;
             p++) {
            bits[p / 64] |= 1ull << (p % 64);
        }
    }
}

/* "0x3000+0x2000, 0x9000+0x1000" for the first ranges of a (as
 * res_pages() made it).  Caller frees. */
static char *ranges_text(JsonArray *a)
{
    GString *s = g_string_new(NULL);
    guint n = json_array_get_length(a);

    for (guint i = 0; i < MIN(n, MISSING_NAMED); i++) {
        JsonArray *range = json_array_get_array_element(a, i);

        g_string_append_printf(s, "%sguest 0x%" PRIx64 "+0x%" PRIx64,
                               i ? ", " : "",
                               json_array_get_int_element(range, 0) *
                               VUF_LOG_PAGE,
                               json_array_get_int_element(range, 1) *
                               VUF_LOG_PAGE);
    }
    if (n > MISSING_NAMED) {
        g_string_append_printf(s, " and %u more ranges", n - MISSING_NAMED);
    }
    return g_string_free(s, FALSE);
}

bool cmd_log_dirty(Client *c, const Command *cmd, Result *r, Error **errp)
{
    size_t words = vuf_log_words(c->fe);
    g_autofree uint64_t *dirty = g_new0(uint64_t, words);
    g_autofree uint64_t *expected = g_new0(uint64_t, words);
    g_autofree uint64_t *missing = g_new0(uint64_t, words);
    g_autofree uint64_t *extra = g_new0(uint64_t, words);
    g_autofree uint64_t *rings = g_new0(uint64_t, words);
    g_autofree char *named = NULL;
    uint64_t n_missing;

    res_dirty_log(r, c->fe);
    if (!c->log_seen || !vuf_log_take_dirty(c->fe, dirty)) {
        error_setg(errp, "no dirty log to read: run log-start first");
        return false;
    }
    vuf_log_take_expected(c->fe, expected);
    for (size_t w = 0; w < words; w++) {
        c->log_seen[w] |= dirty[w];
        c->log_expected[w] |= expected[w];
        missing[w] = expected[w] & ~c->log_seen[w];
        extra[w] = dirty[w] & ~c->log_expected[w];
    }
    res_int(r, "dirty_pages", res_pages(r, "dirty", dirty, words));
    res_int(r, "expected_pages", res_pages(r, "expected", expected, words));
    n_missing = res_pages(r, "missing", missing, words);
    res_int(r, "missing_pages", n_missing);
    res_int(r, "extra_pages", res_pages(r, "extra", extra, words));
    used_ring_pages(c->fe, rings);
    res_pages(r, "used_rings", rings, words);
    if (n_missing) {
        named = ranges_text(json_object_get_array_member(r->obj, "missing"));
        error_setg(errp, "%" PRIu64 " page(s) the device wrote are not "
                   "marked in the dirty log: %s", n_missing, named);
        return false;
    }
    return true;
}

/*
 * spindle-vu-client: the scsi-* commands, for a virtio-scsi device.
 *
 * Theory of operation
 * -------------------
 * With a virtio-scsi device (--device scsi, or any scsi-* command on the
 * line) the session has the control queue (0), the event queue (1) and
 * --queues request queues (2 + Q); --queue Q picks request queue Q.  At
 * the start, and after a reconnect, a few event buffers are posted on the
 * event queue, as Linux's driver does; `scsi-events` collects what the
 * device put in them.
 *
 * Each request queue has one synchronous command (VufScsiReq) with a data
 * buffer of the same size as the blk commands'; the control queue has one
 * control request.  Commands get tags 1, 2, 3... in the order they are
 * sent; each result names its tag, so that `scsi-tmf abort-task` and
 * `query-task` can name one (by default the last one sent).
 *
 * Outcome.  A SCSI command fails unless the response is OK and the status
 * GOOD; with --expect-sense KEY it succeeds exactly when the status is
 * CHECK CONDITION with sense key KEY.  Every result carries the response,
 * the status and the sense (key, ASC, ASCQ) for the test to judge.  I/O
 * commands (scsi-read, scsi-write, scsi-unmap, scsi-sync, and the READ
 * CAPACITY that finds a LUN's block size) resend a command that got UNIT
 * ATTENTION, up to three times, as a guest does (the command did not run);
 * the result counts them.  scsi-tur, scsi-inquiry, scsi-read-capacity and
 * scsi-report-luns never retry, so they show a pending unit attention.
 *
 * scsi-read and scsi-write take byte offsets and lengths that must be
 * whole blocks of the LUN (READ CAPACITY (16), once per LUN) and use the
 * client's data pattern, like read and write; they move at most 1 MiB per
 * command.
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "util/bswap.h"
#include "util/cli-parse.h"
#include "util/error.h"
#include "vu-client-inflight.h"
#include "vu-client-pattern.h"
#include "vu-client-result.h"
#include "vu-client-scsi.h"
#include "vu-client-session.h"

#define SCSI_EVENT_BUFS         4
#define SCSI_UA_RETRIES         3
#define SCSI_INQUIRY_ALLOC      4096
#define SCSI_REPORT_LUNS_ALLOC  4096
#define SCSI_SK_UNIT_ATTENTION  0x6
#define STATUS_GOOD             0x00
#define STATUS_CHECK_CONDITION  0x02

/* Operation codes (SPC-4, SBC-3). */
#define OP_TEST_UNIT_READY      0x00
#define OP_INQUIRY              0x12
#define OP_READ_CAPACITY_10     0x25
#define OP_READ_10              0x28
#define OP_WRITE_10             0x2a
#define OP_SYNCHRONIZE_CACHE_10 0x35
#define OP_UNMAP                0x42
#define OP_READ_16              0x88
#define OP_WRITE_16             0x8a
#define OP_SERVICE_ACTION_IN_16 0x9e
#define SAI_READ_CAPACITY_16    0x10
#define OP_REPORT_LUNS          0xa0

typedef struct LunGeometry {
    uint32_t block_size;
    uint64_t nblocks;
} LunGeometry;

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

/* An INQUIRY string field: ASCII, trailing spaces dropped. */
static char *scsi_string(const uint8_t *p, size_t n)
{
    char *s = g_strndup((const char *)p, n);

    for (char *q = s; *q; q++) {
        if (*q < 0x20 || *q > 0x7e) {
            *q = '?';
        }
    }
    return g_strchomp(s);
}

int scsi_sense_key_by_name(const char *name)
{
    g_autofree char *norm = g_ascii_strup(name, -1);
    uint64_t v;

    g_strdelimit(norm, "-", '_');
    for (int key = 0; key < 16; key++) {
        if (!strcmp(norm, vufscsi_sense_key_name(key))) {
            return key;
        }
    }
    /* The caller words the error: it also names the keys. */
    if (cli_parse_uint("sense key", name, 0, 15, &v, NULL)) {
        return (int)v;
    }
    return -1;
}

uint64_t scsi_next_tag(Client *c)
{
    c->last_tag = c->next_tag++;
    return c->last_tag;
}

unsigned scsi_cdb_rw(uint8_t *cdb, bool write, uint64_t lba,
                     uint32_t nblocks, unsigned cdb_bits, bool fua)
{
    static const uint8_t ops[2][2] = {
        { OP_READ_16, OP_WRITE_16 },
        { OP_READ_10, OP_WRITE_10 },
    };
    bool ten = cdb_bits == 10;

    memset(cdb, 0, ten ? 10 : 16);
    cdb[0] = ops[ten][write];
    cdb[1] = fua ? 0x08 : 0;            /* FUA */
    if (ten) {
        st_be32(cdb + 2, lba);
        st_be16(cdb + 7, nblocks);
    } else {
        st_be64(cdb + 2, lba);
        st_be32(cdb + 10, nblocks);
    }
    return ten ? 10 : 16;
}

/* ------------------------------------------------------------------------ */
/* Session                                                                   */

bool client_scsi_repost_events(Client *c, Error **errp)
{
    VufQueue *q = vuf_queue(c->fe, VUFSCSI_VQ_EVENT);

    for (unsigned i = 0; i < c->nevents; i++) {
        int r = vufscsi_event_post(q, c->events[i], c->add_flags);

        if (r < 0) {
            error_setg(errp, "posting event buffers: %s",
                       client_strerror(-r));
            return false;
        }
    }
    return true;
}

bool client_scsi_start(Client *c, Error **errp)
{
    unsigned nq = client_io_queues(c);

    if (c->opts->indirect &&
        !vuf_has_feature(c->fe, VIRTIO_RING_F_INDIRECT_DESC)) {
        error_setg(errp, "--indirect: the back-end did not negotiate "
                   "RING_INDIRECT_DESC");
        return false;
    }
    c->next_tag = 1;
    c->block_sizes = g_hash_table_new_full(g_direct_hash, g_direct_equal,
                                           NULL, g_free);
    c->event_log = g_array_new(FALSE, FALSE, sizeof(VirtioScsiEvent));
    c->sreqs = g_new0(VufScsiReq *, nq);
    for (unsigned i = 0; i < nq; i++) {
        c->sreqs[i] = vufscsi_req_new(c->fe, c->chunk, errp);
        if (!c->sreqs[i]) {
            return false;
        }
        c->sreqs[i]->data_segs = c->opts->segments;
    }
    c->ctrl = vufscsi_ctrl_new(c->fe, errp);
    if (!c->ctrl) {
        return false;
    }
    c->events = g_new0(VufScsiEventBuf *, SCSI_EVENT_BUFS);
    for (unsigned i = 0; i < SCSI_EVENT_BUFS; i++) {
        c->events[i] = vufscsi_event_new(c->fe, errp);
        if (!c->events[i]) {
            return false;
        }
        c->nevents = i + 1;
    }
    return client_scsi_repost_events(c, errp);
}

void client_scsi_free(Client *c)
{
    if (!c->fe) {
        return;
    }
    for (unsigned i = 0; c->sreqs && i < c->opts->queues; i++) {
        vufscsi_req_free(c->fe, c->sreqs[i]);
    }
    g_clear_pointer(&c->sreqs, g_free);
    vufscsi_ctrl_free(c->fe, c->ctrl);
    c->ctrl = NULL;
    for (unsigned i = 0; c->events && i < c->nevents; i++) {
        vufscsi_event_free(c->fe, c->events[i]);
    }
    g_clear_pointer(&c->events, g_free);
    if (c->event_log) {
        g_array_free(c->event_log, TRUE);
        c->event_log = NULL;
    }
    g_clear_pointer(&c->block_sizes, g_hash_table_unref);
}

/* ------------------------------------------------------------------------ */
/* Running a command                                                         */

/* Response, status and sense of req into r. */
static void res_outcome(Result *r, const VufScsiReq *req)
{
    uint8_t key, asc, ascq;

    res_str(r, "response", vufscsi_response_name(req->resp->response));
    res_str(r, "status", vufscsi_status_name(req->resp->status));
    res_int(r, "status_code", req->resp->status);
    if (req->resp->response == VIRTIO_SCSI_S_OK &&
        vufscsi_sense(req, &key, &asc, &ascq)) {
        res_str(r, "sense_key", vufscsi_sense_key_name(key));
        res_int(r, "asc", asc);
        res_int(r, "ascq", ascq);
    } else {
        json_object_set_null_member(r->obj, "sense_key");
        if (json_object_has_member(r->obj, "asc")) {
            json_object_remove_member(r->obj, "asc");
            json_object_remove_member(r->obj, "ascq");
        }
    }
    if (req->resp->resid != UINT32_MAX) {
        res_int(r, "resid", req->resp->resid);
    }
}

/* Did req get CHECK CONDITION with sense key key? */
static bool scsi_check_is(const VufScsiReq *req, int key)
{
    uint8_t k, asc, ascq;

    return req->resp->response == VIRTIO_SCSI_S_OK &&
           req->resp->status == STATUS_CHECK_CONDITION &&
           vufscsi_sense(req, &k, &asc, &ascq) && k == key;
}

/*
 * Judge a command the device answered (resp, the status and sense in
 * req) as the theory comment says; *expected as for scsi_run().
 */
static bool scsi_judge(const VufScsiReq *req, int resp, const char *what,
                       int expect_sense, bool *expected, Error **errp)
{
    uint8_t key = 0, asc = 0, ascq = 0;

    if (resp != VIRTIO_SCSI_S_OK) {
        error_setg(errp, "%s: the device answered response %s (%d)", what,
                   vufscsi_response_name(resp), resp);
        return false;
    }
    vufscsi_sense(req, &key, &asc, &ascq);
    if (expect_sense >= 0) {
        if (scsi_check_is(req, expect_sense)) {
            *expected = true;
            return true;
        }
        if (req->resp->status == STATUS_CHECK_CONDITION) {
            error_setg(errp, "%s: expected CHECK CONDITION with %s, got "
                       "sense %s, ASC 0x%02x, ASCQ 0x%02x", what,
                       vufscsi_sense_key_name(expect_sense),
                       vufscsi_sense_key_name(key), asc, ascq);
        } else {
            error_setg(errp, "%s: expected CHECK CONDITION with %s, got "
                       "status %s", what,
                       vufscsi_sense_key_name(expect_sense),
                       vufscsi_status_name(req->resp->status));
        }
        return false;
    }
    if (req->resp->status == STATUS_CHECK_CONDITION) {
        error_setg(errp, "%s: CHECK CONDITION, sense %s, ASC 0x%02x, ASCQ "
                   "0x%02x", what, vufscsi_sense_key_name(key), asc, ascq);
        return false;
    }
    if (req->resp->status != STATUS_GOOD) {
        error_setg(errp, "%s: status %s (0x%02x)", what,
                   vufscsi_status_name(req->resp->status),
                   req->resp->status);
        return false;
    }
    return true;
}

/*
 * Send the command prepared in request queue qi's req (a new tag each
 * time) and judge it as the theory comment says.  *expected is set when
 * the command ended with the CHECK CONDITION that expect_sense asked for.
 * False with errp set on a transport error or an unexpected outcome.
 */
static bool scsi_run(Client *c, unsigned qi, const char *what,
                     int expect_sense, bool retry_ua, bool *expected,
                     Result *r, Error **errp)
{
    VufScsiReq *req = c->sreqs[qi];
    VufQueue *q = vuf_queue(c->fe, VUFSCSI_VQ_REQUEST(qi));
    unsigned ua = 0;
    int resp;

    if (expect_sense == SCSI_SK_UNIT_ATTENTION) {
        retry_ua = false;
    }
    *expected = false;
    for (;;) {
        req->hdr->tag = scsi_next_tag(c);
        req->resp->response = VUFSCSI_RESPONSE_NONE;
        req->resp->status = VUFSCSI_STATUS_NONE;
        req->resp->sense_len = UINT32_MAX;
        req->resp->resid = UINT32_MAX;
        client_note_request(c, q, what);
        resp = vufscsi_do(q, req, c->add_flags, c->timeout_ns);
        if (resp < 0) {
            client_io_error(c, q, resp, what, errp);
            return false;
        }
        if (retry_ua && ua < SCSI_UA_RETRIES &&
            scsi_check_is(req, SCSI_SK_UNIT_ATTENTION)) {
            ua++;
            continue;
        }
        break;
    }
    res_int(r, "tag", req->hdr->tag);
    res_outcome(r, req);
    if (ua) {
        res_int(r, "unit_attentions", ua);
    }
    return scsi_judge(req, resp, what, expect_sense, expected, errp);
}

static int scsi_prep(Client *c, unsigned qi, unsigned lun, const uint8_t *cdb,
                     unsigned cdb_len, size_t data_len, VufScsiDir dir)
{
    return vufscsi_prep(c->sreqs[qi], lun, 0, cdb, cdb_len, data_len, dir);
}

/* What a query's data-in says, into r: n bytes at d.  False with errp set
 * if it cannot be parsed. */
typedef bool (*ScsiParse)(const Command *cmd, const uint8_t *d, size_t n,
                          Result *r, Error **errp);

/*
 * A query: send cdb (cdb_len bytes) for up to alloc bytes of data-in,
 * zeroed first, on cmd's request queue and LUN, judged as scsi_run()
 * does, without resending (what names it); then parse what came, unless
 * the command ended with the CHECK CONDITION cmd expected.
 */
static bool scsi_query(Client *c, const Command *cmd, const uint8_t *cdb,
                       unsigned cdb_len, size_t alloc, const char *what,
                       ScsiParse parse, Result *r, Error **errp)
{
    VufScsiReq *req = c->sreqs[cmd->queue];
    bool expected;

    memset(req->data, 0, alloc);
    scsi_prep(c, cmd->queue, cmd->lun, cdb, cdb_len, alloc,
              VUFSCSI_DIR_FROM_DEV);
    if (!scsi_run(c, cmd->queue, what, cmd->expect_sense, false, &expected,
                  r, errp)) {
        return false;
    }
    return expected || parse(cmd, req->data, vufscsi_data_in(req), r, errp);
}

/* ------------------------------------------------------------------------ */
/* Geometry                                                                  */

static void parse_read_capacity_16(const uint8_t *d, LunGeometry *g)
{
    g->nblocks = ld_be64(d) + 1;
    g->block_size = ld_be32(d + 8);
}

bool scsi_lun_geometry(Client *c, unsigned qi, unsigned lun, uint32_t *bs,
                       uint64_t *nblocks, Error **errp)
{
    LunGeometry *g = g_hash_table_lookup(c->block_sizes,
                                         GUINT_TO_POINTER(lun));
    uint8_t cdb[16] = { OP_SERVICE_ACTION_IN_16, SAI_READ_CAPACITY_16 };
    g_autofree char *what = g_strdup_printf("READ CAPACITY (16) of LUN %u",
                                            lun);
    g_autoptr(JsonObject) scratch = json_object_new();
    Result r = { scratch };
    bool expected;

    if (!g) {
        st_be32(cdb + 10, 32);
        scsi_prep(c, qi, lun, cdb, 16, 32, VUFSCSI_DIR_FROM_DEV);
        if (!scsi_run(c, qi, what, -1, true, &expected, &r, errp)) {
            return false;
        }
        g = g_new0(LunGeometry, 1);
        parse_read_capacity_16(c->sreqs[qi]->data, g);
        if (g->block_size == 0) {
            error_setg(errp, "%s: block size 0", what);
            g_free(g);
            return false;
        }
        g_hash_table_insert(c->block_sizes, GUINT_TO_POINTER(lun), g);
    }
    *bs = g->block_size;
    *nblocks = g->nblocks;
    return true;
}

/* ------------------------------------------------------------------------ */
/* Commands                                                                  */

/* A command without data (cdb_len bytes of cdb) on cmd's LUN, as
 * scsi_run() runs it. */
static bool scsi_run_no_data(Client *c, const Command *cmd,
                             const uint8_t *cdb, unsigned cdb_len,
                             const char *what, bool retry_ua, Result *r,
                             Error **errp)
{
    bool expected;

    res_int(r, "lun", cmd->lun);
    scsi_prep(c, cmd->queue, cmd->lun, cdb, cdb_len, 0, VUFSCSI_DIR_NONE);
    return scsi_run(c, cmd->queue, what, cmd->expect_sense, retry_ua,
                    &expected, r, errp);
}

bool cmd_scsi_tur(Client *c, const Command *cmd, Result *r, Error **errp)
{
    uint8_t cdb[6] = { OP_TEST_UNIT_READY };

    return scsi_run_no_data(c, cmd, cdb, sizeof(cdb), "TEST UNIT READY",
                            false, r, errp);
}

static void inquiry_standard(Result *r, const uint8_t *d, size_t n)
{
    g_autofree char *vendor = NULL, *product = NULL, *revision = NULL;

    if (n < 36) {
        res_int(r, "short_data", n);
        return;
    }
    vendor = scsi_string(d + 8, 8);
    product = scsi_string(d + 16, 16);
    revision = scsi_string(d + 32, 4);
    res_int(r, "peripheral_qualifier", d[0] >> 5);
    res_int(r, "device_type", d[0] & 0x1f);
    res_bool(r, "removable", d[1] & 0x80);
    res_int(r, "version", d[2]);
    res_int(r, "response_data_format", d[3] & 0x0f);
    res_int(r, "additional_length", d[4]);
    res_bool(r, "cmdque", d[7] & 0x02);
    res_str(r, "vendor", vendor);
    res_str(r, "product", product);
    res_str(r, "revision", revision);
}

static void inquiry_designators(Result *r, const uint8_t *d, size_t len)
{
    JsonArray *a = json_array_new();
    size_t off = 0;

    while (off + 4 <= len) {
        const uint8_t *p = d + off;
        unsigned dlen = p[3];
        JsonObject *o = json_object_new();
        g_autofree char *hex = NULL;

        if (off + 4 + dlen > len) {
            json_object_unref(o);
            break;
        }
        hex = hex_string(p + 4, dlen);
        json_object_set_int_member(o, "code_set", p[0] & 0x0f);
        json_object_set_int_member(o, "association", (p[1] >> 4) & 0x03);
        json_object_set_int_member(o, "type", p[1] & 0x0f);
        json_object_set_int_member(o, "length", dlen);
        json_object_set_string_member(o, "hex", hex);
        if ((p[1] & 0x0f) == 3 && dlen == 8) {
            g_autofree char *naa = g_strdup_printf("0x%016" PRIx64,
                                                   ld_be64(p + 4));

            json_object_set_string_member(o, "naa", naa);
            res_str(r, "wwn", naa);
        } else if ((p[0] & 0x0f) == 2) {        /* ASCII */
            g_autofree char *text = scsi_string(p + 4, dlen);

            json_object_set_string_member(o, "text", text);
        }
        json_array_add_object_element(a, o);
        off += 4 + dlen;
    }
    json_object_set_array_member(r->obj, "designators", a);
}

static void inquiry_vpd(Result *r, const uint8_t *d, size_t n)
{
    size_t len;
    g_autofree char *hex = NULL;

    if (n < 4) {
        res_int(r, "short_data", n);
        return;
    }
    len = MIN(ld_be16(d + 2), n - 4);
    hex = hex_string(d, 4 + len);
    res_int(r, "peripheral_qualifier", d[0] >> 5);
    res_int(r, "device_type", d[0] & 0x1f);
    res_int(r, "page", d[1]);
    res_int(r, "page_length", ld_be16(d + 2));
    res_str(r, "data_hex", hex);
    switch (d[1]) {
    case 0x00: {
        JsonArray *a = json_array_new();

        for (size_t i = 0; i < len; i++) {
            json_array_add_int_element(a, d[4 + i]);
        }
        json_object_set_array_member(r->obj, "pages", a);
        break;
    }
    case 0x80: {
        g_autofree char *serial = scsi_string(d + 4, len);

        res_str(r, "serial", serial);
        break;
    }
    case 0x83:
        inquiry_designators(r, d + 4, len);
        break;
    case 0xb0:
        if (len >= 0x3c - 4) {
            res_int(r, "max_transfer_length", ld_be32(d + 8));
            res_int(r, "optimal_transfer_length", ld_be32(d + 12));
            res_int(r, "max_unmap_lba_count", ld_be32(d + 20));
            res_int(r, "max_unmap_descriptors", ld_be32(d + 24));
            res_int(r, "unmap_granularity", ld_be32(d + 28));
            res_int(r, "max_write_same_length", ld_be64(d + 36));
        }
        break;
    case 0xb1:
        if (len >= 2) {
            res_int(r, "rotation_rate", ld_be16(d + 4));
        }
        break;
    case 0xb2:
        if (len >= 2) {
            res_bool(r, "lbpu", d[5] & 0x80);
            res_bool(r, "lbpws", d[5] & 0x40);
            res_bool(r, "lbpws10", d[5] & 0x20);
            res_bool(r, "lbprz", d[5] & 0x04);
        }
        if (len >= 3) {
            res_int(r, "provisioning_type", d[6] & 0x07);
        }
        break;
    default:
        break;
    }
}

static bool parse_inquiry(const Command *cmd, const uint8_t *d, size_t n,
                          Result *r, Error **errp)
{
    res_int(r, "length", n);
    if (cmd->evpd_page >= 0) {
        inquiry_vpd(r, d, n);
    } else {
        inquiry_standard(r, d, n);
    }
    return true;
}

bool cmd_scsi_inquiry(Client *c, const Command *cmd, Result *r, Error **errp)
{
    uint8_t cdb[6] = { OP_INQUIRY };
    size_t alloc = MIN(SCSI_INQUIRY_ALLOC, c->sreqs[cmd->queue]->data_cap);

    res_int(r, "lun", cmd->lun);
    if (cmd->evpd_page >= 0) {
        cdb[1] = 0x01;
        cdb[2] = cmd->evpd_page;
        res_int(r, "evpd", cmd->evpd_page);
    }
    st_be16(cdb + 3, alloc);
    return scsi_query(c, cmd, cdb, sizeof(cdb), alloc, "INQUIRY",
                      parse_inquiry, r, errp);
}

static bool parse_read_capacity(const Command *cmd, const uint8_t *d,
                                size_t n, Result *r, Error **errp)
{
    uint64_t nblocks;
    uint32_t bs;

    if (cmd->cdb_bits == 10) {
        nblocks = (uint64_t)ld_be32(d) + 1;
        bs = ld_be32(d + 4);
    } else {
        nblocks = ld_be64(d) + 1;
        bs = ld_be32(d + 8);
        res_int(r, "physical_block_exp", d[13] & 0x0f);
        res_bool(r, "lbpme", d[14] & 0x80);
        res_bool(r, "lbprz", d[14] & 0x40);
        res_int(r, "lowest_aligned_lba", ld_be16(d + 14) & 0x3fff);
    }
    res_int(r, "blocks", nblocks);
    res_int(r, "block_size", bs);
    res_int(r, "bytes", nblocks * bs);
    return true;
}

bool cmd_scsi_read_capacity(Client *c, const Command *cmd, Result *r,
                            Error **errp)
{
    uint8_t cdb[16] = { 0 };

    res_int(r, "lun", cmd->lun);
    res_int(r, "cdb", cmd->cdb_bits);
    if (cmd->cdb_bits == 10) {
        cdb[0] = OP_READ_CAPACITY_10;
    } else {
        cdb[0] = OP_SERVICE_ACTION_IN_16;
        cdb[1] = SAI_READ_CAPACITY_16;
        st_be32(cdb + 10, 32);
    }
    return scsi_query(c, cmd, cdb, cmd->cdb_bits,
                      cmd->cdb_bits == 10 ? 8 : 32, "READ CAPACITY",
                      parse_read_capacity, r, errp);
}

static bool parse_report_luns(const Command *cmd, const uint8_t *d,
                              size_t n, Result *r, Error **errp)
{
    JsonArray *luns;
    size_t list;

    if (n < 8) {
        error_setg(errp, "REPORT LUNS: only %zu bytes of data", n);
        return false;
    }
    list = ld_be32(d);
    res_int(r, "list_length", list);
    luns = res_array(r, "luns");
    for (size_t off = 8; off + 8 <= MIN(n, list + 8); off += 8) {
        const uint8_t *e = d + off;

        switch (e[0] >> 6) {
        case 0:                             /* peripheral device */
            json_array_add_int_element(luns, e[1]);
            break;
        case 1:                             /* flat space */
            json_array_add_int_element(luns, (e[0] & 0x3f) << 8 | e[1]);
            break;
        default: {
            g_autofree char *hex = hex_string(e, 8);

            json_array_add_string_element(luns, hex);
        }
        }
    }
    return true;
}

bool cmd_scsi_report_luns(Client *c, const Command *cmd, Result *r,
                          Error **errp)
{
    uint8_t cdb[12] = { OP_REPORT_LUNS };
    size_t alloc = MIN(SCSI_REPORT_LUNS_ALLOC,
                       c->sreqs[cmd->queue]->data_cap);

    res_int(r, "lun", cmd->lun);
    st_be32(cdb + 6, alloc);
    return scsi_query(c, cmd, cdb, sizeof(cdb), alloc, "REPORT LUNS",
                      parse_report_luns, r, errp);
}

/* The LUN's block size, and the range of cmd checked against it. */
static bool scsi_io_geometry(Client *c, const Command *cmd, Result *r,
                             uint32_t *bs, Error **errp)
{
    uint64_t nblocks;

    if (!scsi_lun_geometry(c, cmd->queue, cmd->lun, bs, &nblocks, errp)) {
        return false;
    }
    res_int(r, "block_size", *bs);
    if (cmd->offset % *bs || cmd->len % *bs) {
        error_setg(errp, "OFFSET %" PRIu64 " and LEN %" PRIu64 " must be "
                   "multiples of LUN %u's block size %u", cmd->offset,
                   cmd->len, cmd->lun, *bs);
        return false;
    }
    if (cmd->offset > nblocks * *bs || cmd->len > nblocks * *bs - cmd->offset) {
        /* Sent anyway: the device must refuse it; just say so. */
        g_printerr("spindle-vu-client: note: %s %" PRIu64 "+%" PRIu64
                   " goes past the end of LUN %u (%" PRIu64 " bytes)\n",
                   cmd->name, cmd->offset, cmd->len, cmd->lun,
                   nblocks * *bs);
    }
    if (cmd->cdb_bits == 10 &&
        (cmd->offset + cmd->len) / *bs > UINT32_MAX) {
        error_setg(errp, "the range ends beyond what a 10-byte CDB can "
                   "address (LBA 2^32); use --cdb 16");
        return false;
    }
    return true;
}

static void res_io(Result *r, const Command *cmd)
{
    res_int(r, "lun", cmd->lun);
    res_int(r, "offset", cmd->offset);
    res_int(r, "len", cmd->len);
    res_int(r, "queue", cmd->queue);
    res_int(r, "cdb", cmd->cdb_bits);
}

/* The bytes one command of cmd moves: at most the buffer, and with a
 * 10-byte CDB at most 65535 blocks. */
static size_t scsi_chunk(Client *c, const Command *cmd, uint32_t bs,
                         uint64_t left)
{
    uint64_t n = MIN(c->chunk, left);

    if (cmd->cdb_bits == 10) {
        n = MIN(n, (uint64_t)UINT16_MAX * bs);
    }
    return n - n % bs;
}

/*
 * Send the WRITE (req's data ready) or READ of the n bytes at off of cmd's
 * LUN, whose blocks are bs bytes, as scsi_run() does (what names it).
 */
static bool scsi_run_rw(Client *c, const Command *cmd, bool write,
                        uint64_t off, size_t n, uint32_t bs, const char *what,
                        bool *expected, Result *r, Error **errp)
{
    uint8_t cdb[16];
    unsigned len = scsi_cdb_rw(cdb, write, off / bs, n / bs, cmd->cdb_bits,
                               write && cmd->fua);

    scsi_prep(c, cmd->queue, cmd->lun, cdb, len, n,
              write ? VUFSCSI_DIR_TO_DEV : VUFSCSI_DIR_FROM_DEV);
    return scsi_run(c, cmd->queue, what, cmd->expect_sense, true, expected,
                    r, errp);
}

static bool scsi_check_data(const Command *cmd, const uint8_t *data,
                            uint64_t off, size_t n, unsigned qi, Result *r,
                            Error **errp)
{
    uint64_t bad, want = 0, got;

    if (cmd->have_seed &&
        !pattern_check(data, off, n, cmd->seed, &bad, &want, &got)) {
        res_mismatch(r, bad, want, got);
        error_setg(errp, "data mismatch at LUN %u offset %" PRIu64
                   " (request queue %u): expected word 0x%016" PRIx64
                   " of pattern seed %" PRIu64 ", found 0x%016" PRIx64,
                   cmd->lun, bad, qi, want, cmd->seed, got);
        return false;
    }
    if (cmd->expect_zeroes && !zeroes_check(data, off, n, &bad, &got)) {
        res_mismatch(r, bad, 0, got);
        error_setg(errp, "data mismatch at LUN %u offset %" PRIu64
                   " (request queue %u): expected zeroes, found byte "
                   "0x%02" PRIx64, cmd->lun, bad, qi, got);
        return false;
    }
    return true;
}

/* A READ of n bytes at off came back: all of it, as expected? */
static bool scsi_read_done(const Command *cmd, const VufScsiReq *req,
                           uint64_t off, size_t n, const char *what,
                           GChecksum *sum, Result *r, Error **errp)
{
    if (vufscsi_data_in(req) != n) {
        error_setg(errp, "%s: the device moved %zu bytes (resid %u)",
                   what, vufscsi_data_in(req), req->resp->resid);
        return false;
    }
    g_checksum_update(sum, req->data, n);
    return scsi_check_data(cmd, req->data, off, n, cmd->queue, r, errp);
}

/*
 * WRITE the pattern to cmd's range, or READ it (checked, and summed into
 * sum), a chunk per command, each judged as scsi_run() does.  *expected:
 * a command ended with the CHECK CONDITION that --expect-sense asked for
 * (the rest is not sent).
 */
static bool scsi_rw_range(Client *c, const Command *cmd, bool write,
                          GChecksum *sum, bool *expected, Result *r,
                          Error **errp)
{
    VufScsiReq *req = c->sreqs[cmd->queue];
    uint32_t bs;
    size_t n;

    *expected = false;
    if (!scsi_io_geometry(c, cmd, r, &bs, errp)) {
        return false;
    }
    for (uint64_t done = 0; done < cmd->len && !*expected; done += n) {
        uint64_t off = cmd->offset + done;
        g_autofree char *what = NULL;

        n = scsi_chunk(c, cmd, bs, cmd->len - done);
        what = g_strdup_printf("%s at %" PRIu64 "+%zu",
                               write ? "WRITE" : "READ", off, n);
        if (write) {
            pattern_fill(req->data, off, n, cmd->seed);
        } else {
            memset(req->data, 0, n);
        }
        if (!scsi_run_rw(c, cmd, write, off, n, bs, what, expected, r,
                         errp) ||
            (!write && !*expected &&
             !scsi_read_done(cmd, req, off, n, what, sum, r, errp))) {
            return false;
        }
    }
    return true;
}

bool scsi_prep_write(Client *c, const Command *cmd, VufScsiReq *req,
                     Result *r, Error **errp)
{
    uint8_t cdb[16];
    unsigned cdb_len;
    uint32_t bs;

    if (!scsi_io_geometry(c, cmd, r, &bs, errp)) {
        return false;
    }
    pattern_fill(req->data, cmd->offset, cmd->len, cmd->seed);
    cdb_len = scsi_cdb_rw(cdb, true, cmd->offset / bs, cmd->len / bs,
                          cmd->cdb_bits, cmd->fua);
    vufscsi_prep(req, cmd->lun, scsi_next_tag(c), cdb, cdb_len, cmd->len,
                 VUFSCSI_DIR_TO_DEV);
    res_int(r, "tag", req->hdr->tag);
    return true;
}

bool cmd_scsi_write(Client *c, const Command *cmd, Result *r, Error **errp)
{
    bool expected;

    if (cmd->no_wait) {
        return client_submit_write(c, cmd, r, errp);
    }
    res_io(r, cmd);
    res_int(r, "seed", cmd->seed);
    res_bool(r, "fua", cmd->fua);
    return scsi_rw_range(c, cmd, true, NULL, &expected, r, errp);
}

bool cmd_scsi_read(Client *c, const Command *cmd, Result *r, Error **errp)
{
    g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
    bool expected;

    res_io(r, cmd);
    if (!scsi_rw_range(c, cmd, false, sum, &expected, r, errp)) {
        return false;
    }
    if (!expected) {
        res_verified(r, sum, cmd->have_seed, cmd->seed, cmd->expect_zeroes);
    }
    return true;
}

bool cmd_scsi_unmap(Client *c, const Command *cmd, Result *r, Error **errp)
{
    VufScsiReq *req = c->sreqs[cmd->queue];
    uint8_t cdb[10] = { OP_UNMAP };
    uint8_t *p = req->data;
    bool expected;

    res_int(r, "lun", cmd->lun);
    res_int(r, "lba", cmd->lba);
    res_int(r, "count", cmd->nblocks);
    /* One block descriptor (SBC-3 5.28.2). */
    memset(p, 0, 24);
    st_be16(p, 22);
    st_be16(p + 2, 16);
    st_be64(p + 8, cmd->lba);
    st_be32(p + 16, cmd->nblocks);
    st_be16(cdb + 7, 24);
    scsi_prep(c, cmd->queue, cmd->lun, cdb, sizeof(cdb), 24,
              VUFSCSI_DIR_TO_DEV);
    return scsi_run(c, cmd->queue, "UNMAP", cmd->expect_sense, true,
                    &expected, r, errp);
}

bool cmd_scsi_sync(Client *c, const Command *cmd, Result *r, Error **errp)
{
    uint8_t cdb[10] = { OP_SYNCHRONIZE_CACHE_10 };

    return scsi_run_no_data(c, cmd, cdb, sizeof(cdb), "SYNCHRONIZE CACHE",
                            true, r, errp);
}

/*
 * Send the control request prepared in c->ctrl and wait for it.  Returns
 * its response, or -1 with errp set ("<what> on the control queue: ...")
 * on a transport error.
 */
static int scsi_ctrl_run(Client *c, const char *what, Error **errp)
{
    int resp = vufscsi_ctrl_do(vuf_queue(c->fe, VUFSCSI_VQ_CONTROL), c->ctrl,
                               c->add_flags, c->timeout_ns);

    if (resp < 0) {
        error_setg(errp, "%s on the control queue: %s", what,
                   client_strerror(-resp));
        return -1;
    }
    return resp;
}

bool cmd_scsi_tmf(Client *c, const Command *cmd, Result *r, Error **errp)
{
    int subtype = vufscsi_tmf_by_name(cmd->what);
    uint64_t tag = cmd->have_tag ? cmd->tag : c->last_tag;
    int resp;

    g_assert(subtype >= 0);
    res_str(r, "tmf", vufscsi_tmf_name(subtype));
    res_int(r, "lun", cmd->lun);
    res_int(r, "tag", tag);
    vufscsi_prep_tmf(c->ctrl, subtype, cmd->lun, tag);
    resp = scsi_ctrl_run(c, "task management", errp);
    if (resp < 0) {
        return false;
    }
    /* 0 is both OK and FUNCTION COMPLETE: name it as a TMF answer. */
    res_str(r, "response", resp == VIRTIO_SCSI_S_FUNCTION_COMPLETE
                           ? "FUNCTION_COMPLETE"
                           : vufscsi_response_name(resp));
    res_int(r, "response_code", resp);
    res_int(r, "used_len", c->ctrl->used_len);
    return true;
}

bool cmd_scsi_an_query(Client *c, const Command *cmd, Result *r, Error **errp)
{
    int resp;

    res_int(r, "lun", cmd->lun);
    res_int(r, "event_requested", cmd->events);
    vufscsi_prep_an(c->ctrl, VIRTIO_SCSI_T_AN_QUERY, cmd->lun, cmd->events);
    resp = scsi_ctrl_run(c, "AN query", errp);
    if (resp < 0) {
        return false;
    }
    res_str(r, "response", vufscsi_response_name(resp));
    res_int(r, "response_code", resp);
    res_int(r, "event_actual", c->ctrl->resp.an->event_actual);
    res_int(r, "used_len", c->ctrl->used_len);
    return true;
}

/* The LUN number in an event's address, or -1 if it is not target 0's. */
static int event_lun(const uint8_t *lun)
{
    if (lun[0] != 1 || lun[1] != 0) {
        return -1;
    }
    return (lun[2] & 0x3f) << 8 | lun[3];
}

bool cmd_scsi_events(Client *c, const Command *cmd, Result *r, Error **errp)
{
    VufQueue *q = vuf_queue(c->fe, VUFSCSI_VQ_EVENT);
    JsonArray *a = json_array_new();
    VufScsiEventBuf *buf;
    int ret;

    json_object_set_array_member(r->obj, "events", a);
    if (cmd->wait_s > 0) {
        ret = vufq_wait(q, cmd->wait_s * 1e9);
        if (ret < 0 && ret != -ETIMEDOUT) {
            error_setg(errp, "waiting on the event queue: %s",
                       client_strerror(-ret));
            return false;
        }
    }
    while ((ret = vufscsi_event_complete(q, &buf)) == 1) {
        JsonObject *o = json_object_new();
        VirtioScsiEvent ev = *buf->ev;

        g_array_append_val(c->event_log, ev);
        json_object_set_int_member(o, "event", ev.event);
        json_object_set_boolean_member(o, "events_missed",
                                       ev.event & VIRTIO_SCSI_T_EVENTS_MISSED);
        json_object_set_int_member(o, "lun", event_lun(ev.lun));
        json_object_set_int_member(o, "reason", ev.reason);
        json_object_set_int_member(o, "used_len", buf->used_len);
        json_array_add_object_element(a, o);
        ret = vufscsi_event_post(q, buf, c->add_flags);
        if (ret < 0) {
            error_setg(errp, "posting an event buffer: %s",
                       client_strerror(-ret));
            return false;
        }
    }
    if (ret < 0) {
        error_setg(errp, "harvesting events: %s", client_strerror(-ret));
        return false;
    }
    res_int(r, "count", json_array_get_length(a));
    return true;
}

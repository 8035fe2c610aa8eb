/*
 * spindle-vu-client: drive a vhost-user-blk or vhost-user-scsi back-end from
 * the command line.
 *
 * Theory of operation
 * -------------------
 *   spindle-vu-client --socket PATH [options] COMMAND [ARGS] [COMMAND ...]
 *
 * Global options are parsed with GOption in strict POSIX mode, which stops
 * at the first command word; the rest is split into commands by hand: a
 * known command name, its positional arguments, then its own --options.
 * All commands are parsed before anything is done, so that a typo fails
 * with exit status 2 before the back-end is touched, and so that the number
 * of queues to set up can be raised to what the commands need.
 *
 * One session (vu-frontend) serves all commands, in order.  Each command
 * fills a Result (a JSON object); at the end the results are printed as one
 * JSON document (--json) or as indented "key: value" text.  The first
 * failing command stops the run with exit status 1 and its error in the
 * output; a data mismatch names the disk offset, expected and found words.
 *
 * Data written with `write --pattern SEED` is a pure function of the disk
 * offset and the seed (pattern_word(), documented in docs/frontend.md), so
 * `read --verify SEED` can check any part of it, in any later run, and a
 * test can check the image file itself.  The client remembers what it wrote
 * or zeroed in this run (an extent list) so that `reconnect` can verify it
 * all through the new session.
 *
 * get-config and wait-config-change follow a resize: the back-end sends a
 * config-change message on the back-end channel (vu-backend-chan.c sets it
 * up when the back-end offers BACKEND_REQ) and the client reads the
 * config again, as QEMU does.  wait-file PATH sleeps until PATH exists
 * (announcing it on stderr), so that a test can resize or hot-plug
 * between two commands of one session.
 *
 * The device is virtio-blk unless --device scsi is given or a scsi-*
 * command is on the line (vu-client-scsi.c); then --queues and --queue
 * count request queues (virtqueue 2 + Q), and the control and event
 * queues come on top.
 */

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "util/error.h"
#include "vu-client.h"

#define SECTOR              VIRTIO_BLK_SECTOR_SIZE

/* ------------------------------------------------------------------------ */
/* The data pattern                                                          */

uint64_t pattern_word(uint64_t seed, uint64_t word_index)
{
    /* splitmix64's output function over seed + golden-ratio steps. */
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (word_index + 1);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void pattern_fill(uint8_t *buf, uint64_t disk_off, size_t len, uint64_t seed)
{
    size_t i;

    g_assert(disk_off % 8 == 0 && len % 8 == 0);
    for (i = 0; i < len; i += 8) {
        uint64_t w = pattern_word(seed, (disk_off + i) / 8);

        memcpy(buf + i, &w, 8);     /* little-endian host */
    }
}

bool pattern_check(const uint8_t *buf, uint64_t disk_off, size_t len,
                   uint64_t seed, uint64_t *bad_off, uint64_t *want,
                   uint64_t *got)
{
    size_t i;

    for (i = 0; i < len; i += 8) {
        uint64_t w = pattern_word(seed, (disk_off + i) / 8), g;

        memcpy(&g, buf + i, 8);
        if (g != w) {
            uint64_t diff = g ^ w;

            *bad_off = disk_off + i + __builtin_ctzll(diff) / 8;
            *want = w;
            *got = g;
            return false;
        }
    }
    return true;
}

bool zeroes_check(const uint8_t *buf, uint64_t disk_off, size_t len,
                  uint64_t *bad_off, uint64_t *got)
{
    size_t i;

    for (i = 0; i < len; i++) {
        if (buf[i]) {
            *bad_off = disk_off + i;
            *got = buf[i];
            return false;
        }
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Extents known to hold a pattern or zeroes                                 */

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

static void extents_record(Client *c, uint64_t start, uint64_t len,
                           ExtentKind kind, uint64_t seed)
{
    Extent e = { start, start + len, kind, seed };

    extents_forget(c, start, len);
    g_array_append_val(c->extents, e);
}

/* ------------------------------------------------------------------------ */
/* Results and output                                                        */

void res_int(Result *r, const char *key, int64_t v)
{
    json_object_set_int_member(r->obj, key, v);
}

void res_str(Result *r, const char *key, const char *v)
{
    json_object_set_string_member(r->obj, key, v);
}

void res_bool(Result *r, const char *key, bool v)
{
    json_object_set_boolean_member(r->obj, key, v);
}

static void res_hex(Result *r, const char *key, uint64_t v)
{
    g_autofree char *s = g_strdup_printf("0x%016" PRIx64, v);

    res_str(r, key, s);
}

static void print_node_text(const char *key, JsonNode *node, int indent);

static void print_object_text(JsonObject *obj, int indent)
{
    g_autoptr(GList) members = json_object_get_members(obj);
    GList *m;

    for (m = members; m; m = m->next) {
        print_node_text(m->data, json_object_get_member(obj, m->data),
                        indent);
    }
}

static void print_node_text(const char *key, JsonNode *node, int indent)
{
    if (JSON_NODE_HOLDS_OBJECT(node)) {
        printf("%*s%s:\n", indent, "", key);
        print_object_text(json_node_get_object(node), indent + 2);
    } else if (JSON_NODE_HOLDS_ARRAY(node)) {
        JsonArray *a = json_node_get_array(node);
        guint i, n = json_array_get_length(a);

        if (n && JSON_NODE_HOLDS_OBJECT(json_array_get_element(a, 0))) {
            printf("%*s%s:\n", indent, "", key);
            for (i = 0; i < n; i++) {
                g_autofree char *k = g_strdup_printf("[%u]", i);

                print_node_text(k, json_array_get_element(a, i), indent + 2);
            }
        } else {
            printf("%*s%s:", indent, "", key);
            for (i = 0; i < n; i++) {
                JsonNode *e = json_array_get_element(a, i);
                g_autofree char *s = json_node_get_value_type(e) ==
                                     G_TYPE_STRING
                                     ? g_strdup(json_node_get_string(e))
                                     : json_to_string(e, FALSE);

                printf("%s%s", i ? ", " : " ", s);
            }
            printf("\n");
        }
    } else if (JSON_NODE_HOLDS_NULL(node)) {
        printf("%*s%s: -\n", indent, "", key);
    } else if (json_node_get_value_type(node) == G_TYPE_STRING) {
        printf("%*s%s: %s\n", indent, "", key, json_node_get_string(node));
    } else {
        g_autofree char *s = json_to_string(node, FALSE);

        printf("%*s%s: %s\n", indent, "", key, s);
    }
}

static void print_results(const ClientOpts *o, JsonArray *results,
                          const char *error)
{
    guint i;

    if (o->json) {
        g_autoptr(JsonBuilder) b = json_builder_new();
        g_autoptr(JsonGenerator) gen = json_generator_new();
        g_autoptr(JsonNode) root = NULL;
        g_autofree char *text = NULL;

        json_builder_begin_object(b);
        json_builder_set_member_name(b, "ok");
        json_builder_add_boolean_value(b, !error);
        json_builder_set_member_name(b, "error");
        if (error) {
            json_builder_add_string_value(b, error);
        } else {
            json_builder_add_null_value(b);
        }
        json_builder_set_member_name(b, "results");
        json_builder_add_value(b, json_node_init_array(json_node_alloc(),
                                                       results));
        json_builder_end_object(b);
        root = json_builder_get_root(b);
        json_generator_set_root(gen, root);
        json_generator_set_pretty(gen, TRUE);
        text = json_generator_to_data(gen, NULL);
        printf("%s\n", text);
        return;
    }
    for (i = 0; i < json_array_get_length(results); i++) {
        JsonObject *obj = json_array_get_object_element(results, i);

        printf("%s\n", json_object_get_string_member(obj, "command"));
        print_object_text(obj, 2);
    }
    fflush(stdout);
    if (error) {
        fprintf(stderr, "spindle-vu-client: %s\n", error);
    }
}

/* Raise --queues to what the commands use. */
static void queues_needed(ClientOpts *o)
{
    guint i;

    for (i = 0; i < o->commands->len; i++) {
        Command *cmd = o->commands->pdata[i];

        o->queues = MAX(o->queues, cmd->queue + 1);
        if (cmd->kind == CMD_VERIFY_RUN || cmd->kind == CMD_SCSI_VERIFY_RUN) {
            o->queues = MAX(o->queues, cmd->run_queues);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Session                                                                   */

const char *client_strerror(int err)
{
    switch (err) {
    case ETIMEDOUT:
        return "no completion within the timeout (see --timeout)";
    case ECONNRESET:
        return "the back-end hung up";
    case EIO:
        return "the device put an invalid entry in the used ring";
    case ENOTCONN:
        return "the queue is not set up (the session ended)";
    case ENOTSUP:
        return "indirect descriptors were not negotiated";
    case E2BIG:
        return "the request needs more segments than the device's seg_max";
    default:
        return g_strerror(err);
    }
}

static bool client_connect(Client *c, Error **errp)
{
    const ClientOpts *o = c->opts;
    VufOptions vo;
    unsigned i;

    vuf_options_init_device(&vo, o->device);
    vo.socket_path = o->socket;
    vo.num_queues = o->queues;
    if (o->device == VUF_DEVICE_SCSI) {
        vo.num_queues += VIRTIO_SCSI_VQ_REQUEST0;
    }
    vo.mem_size = o->mem_size;
    vo.queue_size = o->queue_size;
    vo.completion = o->completion;
    vo.features_wanted &= ~o->features_disabled;
    vo.features_required |= o->features_required;
    vo.features_required &= ~o->features_disabled;
    vo.protocol_features_wanted &= ~o->protocol_features_disabled;
    vo.mem_method = o->mem_slots ? VUF_MEM_ADD_MEM_REG : VUF_MEM_SET_MEM_TABLE;
    vo.reply_timeout_ms = MAX(1, o->timeout_s * 1000);
    vo.connect_timeout_ms = o->connect_timeout_s * 1000;

    c->fe = vuf_new(&vo, errp);
    if (!c->fe) {
        return false;
    }
    if (o->device == VUF_DEVICE_SCSI) {
        /* The commands' CDB and sense sizes come from the config. */
        if (!vuf_connect(c->fe, errp)) {
            return false;
        }
        return client_scsi_start(c, errp);
    }
    c->reqs = g_new0(VufBlkReq *, o->queues);
    for (i = 0; i < o->queues; i++) {
        c->reqs[i] = vufblk_req_new(c->fe, c->chunk, errp);
        if (!c->reqs[i]) {
            return false;
        }
        c->reqs[i]->data_segs = o->segments;
    }
    if (!vuf_connect(c->fe, errp)) {
        return false;
    }
    if (o->indirect && !vuf_has_feature(c->fe, VIRTIO_RING_F_INDIRECT_DESC)) {
        error_setg(errp, "--indirect: the back-end did not negotiate "
                   "RING_INDIRECT_DESC");
        return false;
    }
    return true;
}

/*
 * Run the prepared request of queue qi and check its status.  what names
 * the request in errors ("write at 4096+512").
 */
static bool run_request(Client *c, unsigned qi, const char *what,
                        int *status, Error **errp)
{
    VufBlkReq *req = c->reqs[qi];
    int r = vufblk_do(vuf_queue(c->fe, qi), req, c->add_flags, c->timeout_ns);

    if (r < 0) {
        error_setg(errp, "%s on queue %u: %s", what, qi, client_strerror(-r));
        return false;
    }
    *status = r;
    if (r != VIRTIO_BLK_S_OK) {
        error_setg(errp, "%s on queue %u: the device answered %s (status %d)",
                   what, qi, vufblk_status_name(r), r);
        return false;
    }
    return true;
}

static void res_status(Result *r, int status)
{
    res_str(r, "status", vufblk_status_name(status));
}

/* ------------------------------------------------------------------------ */
/* Commands                                                                  */

static JsonArray *feature_array(VufDeviceType dev, uint64_t mask,
                                bool protocol)
{
    JsonArray *a = json_array_new();
    unsigned bit;

    for (bit = 0; bit < 64; bit++) {
        const char *name;

        if (!(mask & VUF_BIT(bit))) {
            continue;
        }
        name = protocol ? vuf_protocol_feature_name(bit)
                        : vuf_device_feature_name(dev, bit);
        if (name) {
            json_array_add_string_element(a, name);
        } else {
            g_autofree char *unknown = g_strdup_printf("bit%u", bit);

            json_array_add_string_element(a, unknown);
        }
    }
    return a;
}

static JsonObject *config_object(const VirtioBlkConfig *cfg)
{
    JsonObject *o = json_object_new();

    json_object_set_int_member(o, "capacity_sectors", cfg->capacity);
    json_object_set_int_member(o, "capacity_bytes", cfg->capacity * SECTOR);
    json_object_set_int_member(o, "size_max", cfg->size_max);
    json_object_set_int_member(o, "seg_max", cfg->seg_max);
    json_object_set_int_member(o, "blk_size", cfg->blk_size);
    json_object_set_int_member(o, "physical_block_exp",
                               cfg->physical_block_exp);
    json_object_set_int_member(o, "min_io_size", cfg->min_io_size);
    json_object_set_int_member(o, "opt_io_size", cfg->opt_io_size);
    json_object_set_int_member(o, "wce", cfg->writeback);
    json_object_set_int_member(o, "num_queues", cfg->num_queues);
    json_object_set_int_member(o, "max_discard_sectors",
                               cfg->max_discard_sectors);
    json_object_set_int_member(o, "max_discard_seg", cfg->max_discard_seg);
    json_object_set_int_member(o, "discard_sector_alignment",
                               cfg->discard_sector_alignment);
    json_object_set_int_member(o, "max_write_zeroes_sectors",
                               cfg->max_write_zeroes_sectors);
    json_object_set_int_member(o, "max_write_zeroes_seg",
                               cfg->max_write_zeroes_seg);
    json_object_set_int_member(o, "write_zeroes_may_unmap",
                               cfg->write_zeroes_may_unmap);
    return o;
}

static JsonObject *scsi_config_object(const VirtioScsiConfig *cfg)
{
    JsonObject *o = json_object_new();

    json_object_set_int_member(o, "num_queues", cfg->num_queues);
    json_object_set_int_member(o, "seg_max", cfg->seg_max);
    json_object_set_int_member(o, "max_sectors", cfg->max_sectors);
    json_object_set_int_member(o, "cmd_per_lun", cfg->cmd_per_lun);
    json_object_set_int_member(o, "event_info_size", cfg->event_info_size);
    json_object_set_int_member(o, "sense_size", cfg->sense_size);
    json_object_set_int_member(o, "cdb_size", cfg->cdb_size);
    json_object_set_int_member(o, "max_channel", cfg->max_channel);
    json_object_set_int_member(o, "max_target", cfg->max_target);
    json_object_set_int_member(o, "max_lun", cfg->max_lun);
    return o;
}

static char *hex_string(const uint8_t *p, size_t n)
{
    GString *h = g_string_new(NULL);
    size_t i;

    for (i = 0; i < n; i++) {
        g_string_append_printf(h, "%02x", p[i]);
    }
    return g_string_free(h, FALSE);
}

/* GET_ID into the result; false (errp set) only on transport errors. */
static bool get_serial(Client *c, unsigned qi, Result *r, Error **errp)
{
    VufBlkReq *req = c->reqs[qi];
    char serial[VIRTIO_BLK_ID_BYTES + 1];
    g_autofree char *hex = NULL;
    int status;

    vufblk_prep_get_id(req);
    memset(req->data, 0, VIRTIO_BLK_ID_BYTES);
    status = vufblk_do(vuf_queue(c->fe, qi), req, c->add_flags,
                       c->timeout_ns);
    if (status < 0) {
        error_setg(errp, "GET_ID on queue %u: %s", qi,
                   client_strerror(-status));
        return false;
    }
    res_str(r, "serial_status", vufblk_status_name(status));
    if (status != VIRTIO_BLK_S_OK) {
        json_object_set_null_member(r->obj, "serial");
        return true;
    }
    /* The ID is NUL-terminated unless it fills all 20 bytes. */
    memcpy(serial, req->data, VIRTIO_BLK_ID_BYTES);
    serial[VIRTIO_BLK_ID_BYTES] = '\0';
    hex = hex_string(req->data, VIRTIO_BLK_ID_BYTES);
    res_str(r, "serial", g_utf8_validate(serial, -1, NULL) ? serial : "");
    res_str(r, "serial_hex", hex);
    return true;
}

static bool cmd_info(Client *c, const Command *cmd, Result *r, Error **errp)
{
    VuFrontend *fe = c->fe;
    const VirtioBlkConfig *cfg = vuf_blk_config(fe);
    const char *mode = c->opts->completion == VUF_COMPLETION_POLL
                       ? "poll" : "interrupt";

    VufDeviceType dev = c->opts->device;

    json_object_set_array_member(r->obj, "features_offered",
        feature_array(dev, vuf_features_offered(fe), false));
    json_object_set_array_member(r->obj, "features",
        feature_array(dev, vuf_features(fe), false));
    res_hex(r, "features_offered_mask", vuf_features_offered(fe));
    res_hex(r, "features_mask", vuf_features(fe));
    json_object_set_array_member(r->obj, "protocol_features_offered",
        feature_array(dev, vuf_protocol_features_offered(fe), true));
    json_object_set_array_member(r->obj, "protocol_features",
        feature_array(dev, vuf_protocol_features(fe), true));
    res_int(r, "queue_num_max", vuf_queue_num_max(fe));
    res_int(r, "max_mem_slots", vuf_max_mem_slots(fe));
    res_int(r, "queues", vuf_num_queues(fe));
    res_int(r, "queue_size", vufq_size(vuf_queue(fe, 0)));
    res_str(r, "completion", mode);
    res_int(r, "mem_size", vuf_mem_size(fe));
    if (dev == VUF_DEVICE_SCSI) {
        const VirtioScsiConfig *sc = vuf_scsi_config(fe);

        res_str(r, "device", "scsi");
        res_int(r, "request_queues", client_io_queues(c));
        if (sc) {
            json_object_set_object_member(r->obj, "config",
                                          scsi_config_object(sc));
        } else {
            json_object_set_null_member(r->obj, "config");
        }
        return true;
    }
    res_str(r, "device", "blk");
    res_bool(r, "read_only", vuf_has_feature(fe, VIRTIO_BLK_F_RO));
    if (cfg) {
        json_object_set_object_member(r->obj, "config", config_object(cfg));
        res_int(r, "capacity_bytes", cfg->capacity * SECTOR);
    } else {
        json_object_set_null_member(r->obj, "config");
        json_object_set_null_member(r->obj, "capacity_bytes");
    }
    return get_serial(c, cmd->queue, r, errp);
}

static bool cmd_get_id(Client *c, const Command *cmd, Result *r, Error **errp)
{
    if (!get_serial(c, cmd->queue, r, errp)) {
        return false;
    }
    if (strcmp(json_object_get_string_member(r->obj, "serial_status"),
               "OK")) {
        error_setg(errp, "GET_ID: the device answered %s",
                   json_object_get_string_member(r->obj, "serial_status"));
        return false;
    }
    return true;
}

/* Does [off, off+len) fit the disk? (Unknown capacity: assume so.) */
static bool check_range(Client *c, const Command *cmd, Error **errp)
{
    const VirtioBlkConfig *cfg = vuf_blk_config(c->fe);

    if (cfg && (cmd->offset > cfg->capacity * SECTOR ||
                cmd->len > cfg->capacity * SECTOR - cmd->offset)) {
        /* Sent anyway: the device must refuse it; just say so. */
        g_printerr("spindle-vu-client: note: %s %" PRIu64 "+%" PRIu64
                   " goes past the end of the disk (%" PRIu64 " bytes)\n",
                   cmd->name, cmd->offset, cmd->len, cfg->capacity * SECTOR);
    }
    return true;
}

static void res_io(Result *r, const Command *cmd)
{
    res_int(r, "offset", cmd->offset);
    res_int(r, "len", cmd->len);
    res_int(r, "queue", cmd->queue);
}

static bool cmd_write(Client *c, const Command *cmd, Result *r, Error **errp)
{
    VufBlkReq *req = c->reqs[cmd->queue];
    uint64_t done = 0;
    int status = VIRTIO_BLK_S_OK;

    res_io(r, cmd);
    res_int(r, "seed", cmd->seed);
    check_range(c, cmd, errp);
    while (done < cmd->len) {
        size_t n = MIN(c->chunk, cmd->len - done);
        uint64_t off = cmd->offset + done;
        g_autofree char *what = g_strdup_printf("write at %" PRIu64 "+%zu",
                                                off, n);

        pattern_fill(req->data, off, n, cmd->seed);
        vufblk_prep_write(req, off / SECTOR, n);
        if (!run_request(c, cmd->queue, what, &status, errp)) {
            res_status(r, status);
            extents_forget(c, cmd->offset, cmd->len);
            return false;
        }
        done += n;
    }
    res_status(r, status);
    extents_record(c, cmd->offset, cmd->len, EXTENT_PATTERN, cmd->seed);
    return true;
}

void res_mismatch(Result *r, uint64_t off, uint64_t want, uint64_t got)
{
    JsonObject *m = json_object_new();
    g_autofree char *w = g_strdup_printf("0x%016" PRIx64, want);
    g_autofree char *g = g_strdup_printf("0x%016" PRIx64, got);

    json_object_set_int_member(m, "offset", off);
    json_object_set_string_member(m, "expected", w);
    json_object_set_string_member(m, "found", g);
    json_object_set_object_member(r->obj, "mismatch", m);
}

/*
 * Read [offset, offset+len) on queue qi; check it against a pattern seed
 * (check_seed) or zeroes (check_zeroes), feed a checksum and/or a file.
 */
static bool read_range(Client *c, unsigned qi, uint64_t offset, uint64_t len,
                       bool check_seed, uint64_t seed, bool check_zeroes,
                       GChecksum *sum, FILE *out, Result *r, Error **errp)
{
    VufBlkReq *req = c->reqs[qi];
    uint64_t done = 0;
    int status = VIRTIO_BLK_S_OK;

    while (done < len) {
        size_t n = MIN(c->chunk, len - done);
        uint64_t off = offset + done, bad, want = 0, got;
        g_autofree char *what = g_strdup_printf("read at %" PRIu64 "+%zu",
                                                off, n);
        bool ok = true;

        vufblk_prep_read(req, off / SECTOR, n);
        if (!run_request(c, qi, what, &status, errp)) {
            res_status(r, status);
            return false;
        }
        if (sum) {
            g_checksum_update(sum, req->data, n);
        }
        if (out && fwrite(req->data, 1, n, out) != n) {
            error_setg_errno(errp, errno, "cannot write the data read");
            return false;
        }
        if (check_seed) {
            ok = pattern_check(req->data, off, n, seed, &bad, &want, &got);
        } else if (check_zeroes) {
            ok = zeroes_check(req->data, off, n, &bad, &got);
        }
        if (!ok) {
            res_status(r, status);
            res_mismatch(r, bad, want, got);
            if (check_seed) {
                error_setg(errp, "data mismatch at disk offset %" PRIu64
                           " (queue %u): expected word 0x%016" PRIx64
                           " of pattern seed %" PRIu64 ", found 0x%016"
                           PRIx64, bad, qi, want, seed, got);
            } else {
                error_setg(errp, "data mismatch at disk offset %" PRIu64
                           " (queue %u): expected zeroes, found byte 0x%02"
                           PRIx64, bad, qi, got);
            }
            return false;
        }
        done += n;
    }
    res_status(r, status);
    return true;
}

static bool cmd_read(Client *c, const Command *cmd, Result *r, Error **errp)
{
    g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
    FILE *out = NULL;
    bool ok;

    res_io(r, cmd);
    check_range(c, cmd, errp);
    if (cmd->output) {
        out = fopen(cmd->output, "wb");
        if (!out) {
            error_setg_errno(errp, errno, "read --output: cannot create '%s'",
                             cmd->output);
            return false;
        }
    }
    ok = read_range(c, cmd->queue, cmd->offset, cmd->len, cmd->have_seed,
                    cmd->seed, cmd->expect_zeroes, sum, out, r, errp);
    if (out && fclose(out) != 0 && ok) {
        error_setg_errno(errp, errno, "read --output: cannot write '%s'",
                         cmd->output);
        ok = false;
    }
    if (ok) {
        res_str(r, "sha256", g_checksum_get_string(sum));
        if (cmd->have_seed) {
            res_int(r, "seed", cmd->seed);
        }
        res_str(r, "verified", cmd->have_seed ? "pattern"
                               : cmd->expect_zeroes ? "zeroes" : "no");
    }
    return ok;
}

static bool cmd_flush(Client *c, const Command *cmd, Result *r, Error **errp)
{
    int status = VIRTIO_BLK_S_OK;
    bool ok;

    vufblk_prep_flush(c->reqs[cmd->queue]);
    ok = run_request(c, cmd->queue, "flush", &status, errp);
    res_status(r, status);
    return ok;
}

static bool cmd_dwz(Client *c, const Command *cmd, Result *r, Error **errp)
{
    VufBlkReq *req = c->reqs[cmd->queue];
    bool zeroes = cmd->kind == CMD_WRITE_ZEROES;
    g_autofree char *what = g_strdup_printf("%s at %" PRIu64 "+%" PRIu64,
                                            cmd->name, cmd->offset, cmd->len);
    int status = VIRTIO_BLK_S_OK;
    bool ok;

    res_io(r, cmd);
    if (zeroes) {
        res_bool(r, "unmap", cmd->unmap);
        vufblk_prep_write_zeroes(req, cmd->offset / SECTOR,
                                 cmd->len / SECTOR, cmd->unmap);
    } else {
        vufblk_prep_discard(req, cmd->offset / SECTOR, cmd->len / SECTOR);
    }
    ok = run_request(c, cmd->queue, what, &status, errp);
    res_status(r, status);
    if (ok && zeroes) {
        extents_record(c, cmd->offset, cmd->len, EXTENT_ZEROES, 0);
    } else {
        extents_forget(c, cmd->offset, cmd->len);
    }
    return ok;
}

static bool cmd_reconnect(Client *c, const Command *cmd, Result *r,
                          Error **errp)
{
    uint64_t bytes = 0;
    guint i;

    if (!vuf_reconnect(c->fe, errp)) {
        error_prepend(errp, "reconnect: ");
        return false;
    }
    if (c->opts->device == VUF_DEVICE_SCSI &&
        !client_scsi_repost_events(c, errp)) {
        error_prepend(errp, "reconnect: ");
        return false;
    }
    for (i = 0; i < c->extents->len; i++) {
        Extent *e = &g_array_index(c->extents, Extent, i);

        if (!read_range(c, 0, e->start, e->end - e->start,
                        e->kind == EXTENT_PATTERN, e->seed,
                        e->kind == EXTENT_ZEROES, NULL, NULL, r, errp)) {
            error_prepend(errp, "after reconnecting: ");
            return false;
        }
        bytes += e->end - e->start;
    }
    res_int(r, "verified_extents", c->extents->len);
    res_int(r, "verified_bytes", bytes);
    return true;
}

static bool cmd_stop(Client *c, const Command *cmd, Result *r, Error **errp)
{
    JsonArray *a = json_array_new();
    unsigned i;

    json_object_set_array_member(r->obj, "queues", a);
    for (i = 0; i < vuf_num_queues(c->fe); i++) {
        JsonObject *o;
        uint32_t base;

        if (!vufq_ready(vuf_queue(c->fe, i))) {
            continue;
        }
        if (!vuf_stop_queue(c->fe, i, &base, errp)) {
            return false;
        }
        o = json_object_new();
        json_object_set_int_member(o, "queue", i);
        json_object_set_int_member(o, "last_avail", base);
        json_array_add_object_element(a, o);
    }
    return true;
}

static bool cmd_stats(Client *c, const Command *cmd, Result *r, Error **errp)
{
    JsonArray *a = json_array_new();
    unsigned i;

    json_object_set_array_member(r->obj, "queues", a);
    for (i = 0; i < vuf_num_queues(c->fe); i++) {
        JsonObject *o = json_object_new();
        VufQueueStats s;

        vufq_collect_interrupts(vuf_queue(c->fe, i));
        vufq_get_stats(vuf_queue(c->fe, i), &s);
        json_object_set_int_member(o, "queue", i);
        json_object_set_int_member(o, "requests", s.added);
        json_object_set_int_member(o, "completed", s.completed);
        json_object_set_int_member(o, "kicks", s.kicks);
        json_object_set_int_member(o, "kicks_avoided", s.kicks_avoided);
        json_object_set_int_member(o, "interrupts", s.interrupts);
        json_object_set_int_member(o, "wakeups", s.wakeups);
        json_array_add_object_element(a, o);
    }
    return true;
}

/* The current config (after GET_CONFIG) and the config-change count. */
static bool report_config(Client *c, Result *r, Error **errp)
{
    VuFrontend *fe = c->fe;

    if (!(vuf_protocol_features(fe) & VUF_BIT(VHOST_USER_PROTOCOL_F_CONFIG))) {
        error_setg(errp, "the back-end does not offer the CONFIG protocol "
                   "feature: its config cannot be read");
        return false;
    }
    if (!vuf_reread_config(fe, errp)) {
        return false;
    }
    res_int(r, "config_changes", vuf_config_changes(fe));
    if (c->opts->device == VUF_DEVICE_SCSI) {
        res_str(r, "device", "scsi");
        json_object_set_object_member(r->obj, "config",
                                      scsi_config_object(vuf_scsi_config(fe)));
        return true;
    }
    res_str(r, "device", "blk");
    json_object_set_object_member(r->obj, "config",
                                  config_object(vuf_blk_config(fe)));
    res_int(r, "capacity_bytes", vuf_blk_config(fe)->capacity * SECTOR);
    return true;
}

/* A command's --timeout in ms: its own, else the global one. */
static int wait_timeout_ms(const Client *c, const Command *cmd)
{
    double s = cmd->wait_s >= 0 ? cmd->wait_s : c->opts->timeout_s;

    return (int)MIN(s * 1000, (double)INT_MAX);
}

static bool cmd_get_config(Client *c, const Command *cmd, Result *r,
                           Error **errp)
{
    /* Count what the back-end already said, without waiting. */
    if (vuf_backend_channel_fd(c->fe) >= 0 &&
        !vuf_poll_backend_channel(c->fe, 0, errp)) {
        return false;
    }
    res_bool(r, "backend_channel", vuf_backend_channel_fd(c->fe) >= 0);
    return report_config(c, r, errp);
}

static bool cmd_wait_config_change(Client *c, const Command *cmd, Result *r,
                                   Error **errp)
{
    int64_t start = g_get_monotonic_time();

    if (!vuf_wait_config_change(c->fe, wait_timeout_ms(c, cmd), errp)) {
        return false;
    }
    res_int(r, "waited_ms", (g_get_monotonic_time() - start) / 1000);
    return report_config(c, r, errp);
}

static bool cmd_wait_file(Client *c, const Command *cmd, Result *r,
                          Error **errp)
{
    int64_t start = g_get_monotonic_time();
    int64_t deadline = start + (int64_t)wait_timeout_ms(c, cmd) * 1000;

    /* A test watching stderr knows the earlier commands are done. */
    fprintf(stderr, "spindle-vu-client: waiting for %s\n", cmd->what);
    fflush(stderr);
    res_str(r, "path", cmd->what);
    while (!g_file_test(cmd->what, G_FILE_TEST_EXISTS)) {
        if (g_get_monotonic_time() >= deadline) {
            error_setg(errp, "'%s' did not appear within %.1f s", cmd->what,
                       wait_timeout_ms(c, cmd) / 1000.0);
            return false;
        }
        g_usleep(10 * 1000);
    }
    res_int(r, "waited_ms", (g_get_monotonic_time() - start) / 1000);
    return true;
}

static bool run_command(Client *c, const Command *cmd, Result *r,
                        Error **errp)
{
    if (cmd->queue >= client_io_queues(c)) {
        error_setg(errp, "%s: no %squeue %u", cmd->name,
                   c->opts->device == VUF_DEVICE_SCSI ? "request " : "",
                   cmd->queue);
        return false;
    }
    if (command_device(cmd->kind) == CMD_DEV_SCSI) {
        return cmd_scsi(c, cmd, r, errp);
    }
    switch (cmd->kind) {
    case CMD_INFO:
        return cmd_info(c, cmd, r, errp);
    case CMD_GET_ID:
        return cmd_get_id(c, cmd, r, errp);
    case CMD_WRITE:
        return cmd_write(c, cmd, r, errp);
    case CMD_READ:
        return cmd_read(c, cmd, r, errp);
    case CMD_FLUSH:
        return cmd_flush(c, cmd, r, errp);
    case CMD_DISCARD:
    case CMD_WRITE_ZEROES:
        return cmd_dwz(c, cmd, r, errp);
    case CMD_VERIFY_RUN:
        return cmd_verify_run(c, cmd, r, errp);
    case CMD_RECONNECT:
        return cmd_reconnect(c, cmd, r, errp);
    case CMD_STOP:
        return cmd_stop(c, cmd, r, errp);
    case CMD_MALFORMED:
        return cmd_malformed(c, cmd, r, errp);
    case CMD_STATS:
        return cmd_stats(c, cmd, r, errp);
    case CMD_BAD_REQUEST:
        return cmd_bad_request(c, cmd, r, errp);
    case CMD_GET_CONFIG:
        return cmd_get_config(c, cmd, r, errp);
    case CMD_WAIT_CONFIG_CHANGE:
        return cmd_wait_config_change(c, cmd, r, errp);
    case CMD_WAIT_FILE:
        return cmd_wait_file(c, cmd, r, errp);
    default:
        break;
    }
    g_assert_not_reached();
}

/* The data bytes each synchronous request needs. */
static size_t chunk_size(const ClientOpts *o)
{
    uint64_t biggest = 4096;
    guint i;

    for (i = 0; i < o->commands->len; i++) {
        const Command *cmd = o->commands->pdata[i];

        if (cmd->kind == CMD_WRITE || cmd->kind == CMD_READ ||
            cmd->kind == CMD_SCSI_WRITE || cmd->kind == CMD_SCSI_READ) {
            biggest = MAX(biggest, cmd->len);
        }
    }
    biggest = MIN(biggest, CHUNK_MAX);
    return (biggest + 4095) & ~(uint64_t)4095;
}

static bool run_all(Client *c, JsonArray *results, Error **errp)
{
    const ClientOpts *o = c->opts;
    guint i;

    if (!client_connect(c, errp)) {
        return false;
    }
    for (i = 0; i < o->commands->len; i++) {
        const Command *cmd = o->commands->pdata[i];
        Result r = { json_object_new() };
        bool ok;

        res_str(&r, "command", cmd->name);
        ok = run_command(c, cmd, &r, errp);
        res_bool(&r, "ok", ok);
        json_array_add_object_element(results, r.obj);
        if (!ok) {
            error_prepend(errp, "%s: ", cmd->name);
            return false;
        }
    }
    return true;
}

int main(int argc, char **argv)
{
    ClientOpts o = {
        .queues = 1,
        .mem_size = VUF_MEM_SIZE_DEFAULT,
        .queue_size = VUF_QUEUE_SIZE_DEFAULT,
        .completion = VUF_COMPLETION_POLL,
        .segments = 1,
        .timeout_s = 30,
        .commands = g_ptr_array_new_with_free_func(command_free),
    };
    Client c = { .opts = &o };
    g_autoptr(JsonArray) results = json_array_new();
    Error *err = NULL;
    int ret = EXIT_SUCCESS;
    unsigned i;

    if (!parse_command_line(argc, argv, &o, &err)) {
        fprintf(stderr, "spindle-vu-client: %s\n", err->message);
        error_free(err);
        g_ptr_array_free(o.commands, TRUE);
        g_free(o.socket);
        return CLIENT_EXIT_USAGE;
    }
    queues_needed(&o);
    c.chunk = chunk_size(&o);
    c.extents = g_array_new(FALSE, FALSE, sizeof(Extent));
    c.add_flags = o.indirect ? VUFQ_ADD_INDIRECT : 0;
    c.timeout_ns = o.timeout_s * 1e9;

    if (!run_all(&c, results, &err)) {
        ret = CLIENT_EXIT_FAILURE;
    }
    print_results(&o, results, err ? err->message : NULL);
    if (err) {
        error_free(err);
    }
    for (i = 0; c.reqs && i < o.queues; i++) {
        vufblk_req_free(c.fe, c.reqs[i]);
    }
    g_free(c.reqs);
    client_scsi_free(&c);
    vuf_free(c.fe);
    g_array_free(c.extents, TRUE);
    g_ptr_array_free(o.commands, TRUE);
    g_free(o.socket);
    return ret;
}

/*
 * spindle-vu-client: the commands about the session and the device, for
 * either device type: info, reconnect, stop, stats, get-config,
 * wait-config-change, wait-file and touch.
 *
 * Theory of operation
 * -------------------
 * info reports what was negotiated (features by name and as masks, queue
 * and memory sizes) and the device config, field by field from a table;
 * for virtio-blk also the serial (GET_ID).  reconnect starts a new session
 * (vuf_reconnect()), posts the virtio-scsi event buffers again, and reads
 * back every extent the client wrote or zeroed.  stop and stats report per
 * queue.
 *
 * get-config and wait-config-change follow a resize: the back-end sends a
 * config-change message on the back-end channel (vu-backend-chan.c sets it
 * up when the back-end offers BACKEND_REQ) and the client reads the
 * config again, as QEMU does.  wait-file PATH sleeps until PATH exists
 * (announcing it on stderr), so that a test can resize or hot-plug
 * between two commands of one session; touch PATH is the other way
 * round: it creates PATH, so that a test knows where the session is.
 */

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "util/error.h"
#include "vu-client-blk.h"
#include "vu-client-ctl.h"
#include "vu-client-inflight.h"
#include "vu-client-log.h"
#include "vu-client-result.h"
#include "vu-client-scsi.h"
#include "vu-client-session.h"

#define SECTOR              VIRTIO_BLK_SECTOR_SIZE

/* The names of the bits of mask as array member key of r. */
static void res_features(Result *r, const char *key, VufDeviceType dev,
                         uint64_t mask, bool protocol)
{
    g_auto(GStrv) names = vuf_feature_names(dev, mask, protocol);
    JsonArray *a = res_array(r, key);

    for (char **n = names; *n; n++) {
        json_array_add_string_element(a, *n);
    }
}

/* The config spaces are little-endian, as is the host (vu-frontend.h). */
#define BLK_FIELD(name, field, scale) \
    RES_FIELD(VirtioBlkConfig, field, name, scale)
#define SCSI_FIELD(field) \
    RES_FIELD(VirtioScsiConfig, field, #field, 1)

static const ResField blk_config_fields[] = {
    BLK_FIELD("capacity_sectors", capacity, 1),
    BLK_FIELD("capacity_bytes", capacity, SECTOR),
    BLK_FIELD("size_max", size_max, 1),
    BLK_FIELD("seg_max", seg_max, 1),
    BLK_FIELD("blk_size", blk_size, 1),
    BLK_FIELD("physical_block_exp", physical_block_exp, 1),
    BLK_FIELD("min_io_size", min_io_size, 1),
    BLK_FIELD("opt_io_size", opt_io_size, 1),
    BLK_FIELD("wce", writeback, 1),
    BLK_FIELD("num_queues", num_queues, 1),
    BLK_FIELD("max_discard_sectors", max_discard_sectors, 1),
    BLK_FIELD("max_discard_seg", max_discard_seg, 1),
    BLK_FIELD("discard_sector_alignment", discard_sector_alignment, 1),
    BLK_FIELD("max_write_zeroes_sectors", max_write_zeroes_sectors, 1),
    BLK_FIELD("max_write_zeroes_seg", max_write_zeroes_seg, 1),
    BLK_FIELD("write_zeroes_may_unmap", write_zeroes_may_unmap, 1),
};

static const ResField scsi_config_fields[] = {
    SCSI_FIELD(num_queues),
    SCSI_FIELD(seg_max),
    SCSI_FIELD(max_sectors),
    SCSI_FIELD(cmd_per_lun),
    SCSI_FIELD(event_info_size),
    SCSI_FIELD(sense_size),
    SCSI_FIELD(cdb_size),
    SCSI_FIELD(max_channel),
    SCSI_FIELD(max_target),
    SCSI_FIELD(max_lun),
};

#undef BLK_FIELD
#undef SCSI_FIELD

static JsonObject *blk_config_object(const VirtioBlkConfig *cfg)
{
    return res_fields_object(cfg, blk_config_fields,
                             G_N_ELEMENTS(blk_config_fields));
}

static JsonObject *scsi_config_object(const VirtioScsiConfig *cfg)
{
    return res_fields_object(cfg, scsi_config_fields,
                             G_N_ELEMENTS(scsi_config_fields));
}

bool cmd_info(Client *c, const Command *cmd, Result *r, Error **errp)
{
    VuFrontend *fe = c->fe;
    const VirtioBlkConfig *cfg = vuf_blk_config(fe);
    const char *mode = vuf_completion_names[c->opts->completion];

    VufDeviceType dev = c->opts->device;

    res_features(r, "features_offered", dev, vuf_features_offered(fe), false);
    res_features(r, "features", dev, vuf_features(fe), false);
    res_hex(r, "features_offered_mask", vuf_features_offered(fe));
    res_hex(r, "features_mask", vuf_features(fe));
    res_features(r, "protocol_features_offered", dev,
                 vuf_protocol_features_offered(fe), true);
    res_features(r, "protocol_features", dev, vuf_protocol_features(fe),
                 true);
    res_int(r, "queue_num_max", vuf_queue_num_max(fe));
    res_int(r, "max_mem_slots", vuf_max_mem_slots(fe));
    res_inflight(r, fe);
    res_dirty_log(r, fe);
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
        json_object_set_object_member(r->obj, "config", blk_config_object(cfg));
        res_int(r, "capacity_bytes", cfg->capacity * SECTOR);
    } else {
        json_object_set_null_member(r->obj, "config");
        json_object_set_null_member(r->obj, "capacity_bytes");
    }
    return blk_get_serial(c, cmd->queue, r, errp);
}


bool cmd_reconnect(Client *c, const Command *cmd, Result *r, Error **errp)
{
    uint64_t bytes = 0;
    guint i;

    if (client_outstanding(c)) {
        error_setg(errp, "%u requests are outstanding (--no-wait); a new "
                   "session would forget them (resume keeps them)",
                   client_outstanding(c));
        return false;
    }
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

        if (!blk_read_range(c, 0, e->start, e->end - e->start,
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

bool cmd_stop(Client *c, const Command *cmd, Result *r, Error **errp)
{
    JsonArray *a = res_array(r, "queues");

    for (unsigned i = 0; i < vuf_num_queues(c->fe); i++) {
        uint32_t base;

        if (!vufq_ready(vuf_queue(c->fe, i))) {
            continue;
        }
        if (!vuf_stop_queue(c->fe, i, &base, errp)) {
            return false;
        }
        json_object_set_int_member(res_queue_entry(a, i), "last_avail", base);
    }
    return true;
}

bool cmd_stats(Client *c, const Command *cmd, Result *r, Error **errp)
{
    JsonArray *a = res_array(r, "queues");

    for (unsigned i = 0; i < vuf_num_queues(c->fe); i++) {
        JsonObject *o = res_queue_entry(a, i);
        VufQueueStats s;

        vufq_collect_interrupts(vuf_queue(c->fe, i));
        vufq_get_stats(vuf_queue(c->fe, i), &s);
        json_object_set_int_member(o, "requests", s.added);
        json_object_set_int_member(o, "completed", s.completed);
        res_queue_stats(o, &s);
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
                                  blk_config_object(vuf_blk_config(fe)));
    res_int(r, "capacity_bytes", vuf_blk_config(fe)->capacity * SECTOR);
    return true;
}

bool cmd_get_config(Client *c, const Command *cmd, Result *r, Error **errp)
{
    /* Count what the back-end already said, without waiting. */
    if (vuf_backend_channel_fd(c->fe) >= 0 &&
        !vuf_poll_backend_channel(c->fe, 0, errp)) {
        return false;
    }
    res_bool(r, "backend_channel", vuf_backend_channel_fd(c->fe) >= 0);
    return report_config(c, r, errp);
}

bool cmd_wait_config_change(Client *c, const Command *cmd, Result *r,
                            Error **errp)
{
    int64_t start = g_get_monotonic_time();

    if (!vuf_wait_config_change(c->fe, client_wait_timeout_ms(c, cmd), errp)) {
        return false;
    }
    res_int(r, "waited_ms", (g_get_monotonic_time() - start) / 1000);
    return report_config(c, r, errp);
}

bool cmd_wait_file(Client *c, const Command *cmd, Result *r, Error **errp)
{
    int64_t start = g_get_monotonic_time();
    int64_t deadline = start + (int64_t)client_wait_timeout_ms(c, cmd) * 1000;

    /* A test watching stderr knows the earlier commands are done. */
    fprintf(stderr, "spindle-vu-client: waiting for %s\n", cmd->what);
    fflush(stderr);
    res_str(r, "path", cmd->what);
    while (!g_file_test(cmd->what, G_FILE_TEST_EXISTS)) {
        if (g_get_monotonic_time() >= deadline) {
            error_setg(errp, "'%s' did not appear within %.1f s", cmd->what,
                       client_wait_timeout_ms(c, cmd) / 1000.0);
            return false;
        }
        g_usleep(10 * 1000);
    }
    res_int(r, "waited_ms", (g_get_monotonic_time() - start) / 1000);
    return true;
}

bool cmd_touch(Client *c, const Command *cmd, Result *r, Error **errp)
{
    int fd = open(cmd->what, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

    res_str(r, "path", cmd->what);
    if (fd < 0) {
        error_setg_errno(errp, errno, "cannot create '%s'", cmd->what);
        return false;
    }
    close(fd);
    return true;
}

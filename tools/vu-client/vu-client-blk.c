/*
 * spindle-vu-client: the virtio-blk commands (get-id, write, read, flush,
 * discard, write-zeroes).
 *
 * Theory of operation
 * -------------------
 * Each queue has one synchronous request (Client.reqs, allocated at
 * connect with a data buffer of Client.chunk bytes); a command prepares
 * it, sends it with vufblk_do() and checks the status byte.  Longer I/O
 * is cut into chunks.  Writes use the client's data pattern
 * (vu-client-pattern.c) and record what they wrote in the session's
 * extents, reads check a pattern or zeroes and report a SHA-256 of what
 * they read; `reconnect` reads every extent again with blk_read_range().
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "util/error.h"
#include "vu-client-blk.h"
#include "vu-client-inflight.h"
#include "vu-client-pattern.h"
#include "vu-client-result.h"
#include "vu-client-session.h"

#define SECTOR              VIRTIO_BLK_SECTOR_SIZE

/*
 * Run the prepared request of queue qi and check its status.  what names
 * the request in errors ("write at 4096+512").
 */
static bool run_request(Client *c, unsigned qi, const char *what,
                        int *status, Error **errp)
{
    VufBlkReq *req = c->reqs[qi];
    VufQueue *q = vuf_queue(c->fe, qi);
    int r;

    client_note_request(c, q, what);
    r = vufblk_do(q, req, c->add_flags, c->timeout_ns);
    if (r < 0) {
        client_io_error(c, q, r, what, errp);
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


bool blk_get_serial(Client *c, unsigned qi, Result *r, Error **errp)
{
    VufBlkReq *req = c->reqs[qi];
    char serial[VIRTIO_BLK_ID_BYTES + 1];
    g_autofree char *hex = NULL;
    int status;

    vufblk_prep_get_id(req);
    memset(req->data, 0, VIRTIO_BLK_ID_BYTES);
    client_note_request(c, vuf_queue(c->fe, qi), "GET_ID");
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


bool cmd_get_id(Client *c, const Command *cmd, Result *r, Error **errp)
{
    if (!blk_get_serial(c, cmd->queue, r, errp)) {
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

bool cmd_write(Client *c, const Command *cmd, Result *r, Error **errp)
{
    VufBlkReq *req = c->reqs[cmd->queue];
    uint64_t done = 0;
    int status = VIRTIO_BLK_S_OK;

    if (cmd->no_wait) {
        return client_submit_write(c, cmd, r, errp);
    }
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

bool blk_read_range(Client *c, unsigned qi, uint64_t offset, uint64_t len,
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

bool cmd_read(Client *c, const Command *cmd, Result *r, Error **errp)
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
    ok = blk_read_range(c, cmd->queue, cmd->offset, cmd->len, cmd->have_seed,
                        cmd->seed, cmd->expect_zeroes, sum, out, r, errp);
    if (out && fclose(out) != 0 && ok) {
        error_setg_errno(errp, errno, "read --output: cannot write '%s'",
                         cmd->output);
        ok = false;
    }
    if (ok) {
        res_verified(r, sum, cmd->have_seed, cmd->seed, cmd->expect_zeroes);
    }
    return ok;
}

bool cmd_flush(Client *c, const Command *cmd, Result *r, Error **errp)
{
    int status = VIRTIO_BLK_S_OK;
    bool ok;

    vufblk_prep_flush(c->reqs[cmd->queue]);
    ok = run_request(c, cmd->queue, "flush", &status, errp);
    res_status(r, status);
    return ok;
}

bool cmd_dwz(Client *c, const Command *cmd, Result *r, Error **errp)
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

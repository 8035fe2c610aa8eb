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
 * The device is virtio-blk unless --device scsi is given or a scsi-*
 * command is on the line (vu-client-scsi.c); then --queues and --queue
 * count request queues (virtqueue 2 + Q), and the control and event
 * queues come on top.
 *
 * The files, in dependency order (each header declares one thing):
 *   vu-client-cmd.c      a parsed command line: Command, ClientOpts
 *   vu-client-pattern.c  the data pattern
 *   vu-client-result.c   a command's result, and the output
 *   vu-client-session.c  the session state (Client), its extents
 *   vu-client-verify.c   the engine of verify-run and scsi-verify-run
 *   vu-client-blk.c      the virtio-blk commands
 *   vu-client-scsi.c     the scsi-* commands (a virtio-scsi device)
 *   vu-client-inflight.c writes left in flight (--no-wait), resume
 *   vu-client-log.c      dirty page logging: log-start, -stop, -dirty
 *   vu-client-ctl.c      info, reconnect, stop, stats, get-config, wait-*,
 *                        touch
 *   vu-client-run.c      verify-run and malformed
 *   vu-client-bad.c      bad-request (malformed virtio-blk requests)
 *   vu-client-scsi-run.c scsi-verify-run and scsi-bad-request
 *   vu-client-args.c     command-line parsing (the table of commands)
 *   vu-client.c          main: parse, connect, run, print
 *
 * Everything runs in the main thread except verify-run's and
 * scsi-verify-run's queue threads, which only touch their own queue,
 * requests and result slot.
 */

#include <stdio.h>
#include <stdlib.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "util/error.h"
#include "vu-client-args.h"
#include "vu-client-cmd.h"
#include "vu-client-inflight.h"
#include "vu-client-log.h"
#include "vu-client-result.h"
#include "vu-client-scsi.h"
#include "vu-client-session.h"

#define CLIENT_EXIT_FAILURE 1
#define CLIENT_EXIT_USAGE   2

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
    if (client_wants_dirty_log(o)) {
        vo.protocol_features_wanted |=
            VUF_BIT(VHOST_USER_PROTOCOL_F_LOG_SHMFD);
    }
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


static bool run_command(Client *c, const Command *cmd, Result *r,
                        Error **errp)
{
    if (cmd->queue >= client_io_queues(c)) {
        error_setg(errp, "%s: no %squeue %u", cmd->name,
                   c->opts->device == VUF_DEVICE_SCSI ? "request " : "",
                   cmd->queue);
        return false;
    }
    return cmd->run(c, cmd, r, errp);
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
    print_results(o.json, results, err ? err->message : NULL);
    if (err) {
        error_free(err);
    }
    for (i = 0; c.reqs && i < o.queues; i++) {
        vufblk_req_free(c.fe, c.reqs[i]);
    }
    g_free(c.reqs);
    client_inflight_free(&c);
    client_log_free(&c);
    client_scsi_free(&c);
    vuf_free(c.fe);
    g_array_free(c.extents, TRUE);
    g_ptr_array_free(o.commands, TRUE);
    g_free(o.socket);
    return ret;
}

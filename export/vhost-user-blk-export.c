/*
 * The vhost-user-blk export type: a virtio-blk device (hw/virtio/virtio-blk.c)
 * served over a vhost-user socket (hw/virtio/vhost-user-server.c).
 *
 * Theory of operation
 * -------------------
 * parse() reads the type's options (qemu-storage-daemon's, plus serial):
 *   addr.type=unix,addr.path=PATH   a socket the server creates (mode 0600)
 *   addr.type=fd,addr.str=N         a listening UNIX socket inherited as fd N
 *   num-queues=N                    1..64, default 1
 *   logical-block-size=N            512..64k, a power of two, default 512
 *   serial=S                        GET_ID's answer, at most 20 bytes
 *   inflight-tracking=on|off        INFLIGHT_SHMFD offered, default on
 *   rerror=, werror=report|ignore|enospc|stop   error policies (QEMU's
 *                                   values), default report
 * and checks what can be checked without side effects (an inherited fd must
 * be an open, listening UNIX stream socket: vhost-user-export.c).
 * start() creates the VirtioBlk over the export's node and a VuServer whose
 * queues run in the export's contexts (exp->ctxs, queue i in
 * ctxs[i % nctx]); the server listens on a duplicate of an inherited fd, so
 * the original is closed once it runs.  free() frees the server first -- it
 * drains the queues, disconnects the front-end and removes the socket file
 * it created -- and then the device.
 *
 * Live management: refresh_sizes() makes the device's capacity follow the
 * node after a resize and, if it changed, sends the front-end a
 * config-change notice on the back-end channel (QEMU reads the config
 * again and interrupts the guest); get_node_stats() reads the device's
 * accounting; stops() resumes or counts what the error policies stopped
 * (virtio_blk_stops()).  The type has no LUNs (add_lun/del_lun are NULL: export.c
 * answers with an error).
 *
 * Threads: main thread.
 */
#include <stddef.h>
#include <glib.h>

#include "export/export-int.h"
#include "hw/virtio/virtio-blk.h"
#include "hw/virtio/virtqueue.h"
#include "util/cutils.h"

#define VHOST_USER_BLK_MAX_QUEUES 64

typedef struct VhostUserBlkExport {
    VhostUserExport vu;          /* first: address and server */
    unsigned num_queues;
    uint32_t logical_block_size;
    char *serial;
    BlockErrorPolicy rerror;
    BlockErrorPolicy werror;
    VirtioBlk *vb;
} VhostUserBlkExport;

G_STATIC_ASSERT(offsetof(VhostUserBlkExport, vu) == 0);

static void vhost_user_blk_export_free(void *opaque)
{
    VhostUserBlkExport *vexp = opaque;

    if (!vexp) {
        return;
    }
    /* The server first: it drains the queues that use the device. */
    vhost_user_export_stop(&vexp->vu);
    virtio_blk_free(vexp->vb);
    g_free(vexp->serial);
    g_free(vexp);
}

static void *vhost_user_blk_export_parse(Export *exp, Opts *opts,
                                         Error **errp)
{
    g_autoptr(GError) err = NULL;
    VhostUserBlkExport *vexp = g_new0(VhostUserBlkExport, 1);
    const char *serial;
    int64_t num_queues;
    uint64_t lbs;

    vexp->vu.listen_fd = -1;
    if (!opts_get_int(opts, "num-queues", 1, VHOST_USER_BLK_MAX_QUEUES, 1,
                      &num_queues, &err) ||
        !opts_get_size(opts, "logical-block-size", 512, &lbs, &err) ||
        !opts_get_str(opts, "serial", NULL, &serial, &err) ||
        !export_parse_error_policies(opts, "rerror", "werror", &vexp->rerror,
                                     &vexp->werror, &err) ||
        !vhost_user_export_parse(opts, &vexp->vu, &err)) {
        goto fail;
    }
    if (lbs < 512 || lbs > 65536 || (lbs & (lbs - 1))) {
        error_setg(&err, "Parameter 'logical-block-size' expects a power of "
                   "two from 512 to 65536 (64k), got %" G_GUINT64_FORMAT,
                   lbs);
        goto fail;
    }
    if (serial && strlen(serial) > 20) {
        error_setg(&err, "Parameter 'serial' is %zu bytes long; at most 20 "
                   "are allowed", strlen(serial));
        goto fail;
    }
    vexp->num_queues = (unsigned)num_queues;
    vexp->logical_block_size = (uint32_t)lbs;
    vexp->serial = g_strdup(serial);
    return vexp;

fail:
    vhost_user_blk_export_free(vexp);
    error_propagate(errp, g_steal_pointer(&err));
    return NULL;
}

static bool vhost_user_blk_export_start(Export *exp, void *opaque,
                                        Error **errp)
{
    VhostUserBlkExport *vexp = opaque;
    VirtioBlkConf conf = {
        .num_queues = vexp->num_queues,
        .queue_size = VIRTQUEUE_MAX_SIZE,
        .logical_block_size = vexp->logical_block_size,
        .writable = exp->writable,
        .writethrough = exp->writethrough,
        .serial = vexp->serial,
        .rerror = vexp->rerror,
        .werror = vexp->werror,
        .export_id = exp->id,
        .main_ctx = exp->main_ctx,
        .io_error = export_io_error_event,
    };

    vexp->vb = virtio_blk_new(&conf, exp->bs, errp);
    if (!vexp->vb) {
        return false;
    }
    return vhost_user_export_serve(&vexp->vu, exp, vexp->num_queues,
                                   &virtio_blk_vu_ops, vexp->vb, errp);
}

static unsigned vhost_user_blk_export_num_queues(void *opaque)
{
    VhostUserBlkExport *vexp = opaque;

    return vexp->num_queues;
}

static bool vhost_user_blk_export_get_node_stats(Export *exp, void *opaque,
                                                 unsigned i,
                                                 BlockAcctStats *out)
{
    VhostUserBlkExport *vexp = opaque;

    if (i != 0 || !vexp->vb) {
        return false;
    }
    virtio_blk_get_acct_stats(vexp->vb, out);
    return true;
}

static void vhost_user_blk_export_refresh_sizes(Export *exp, void *opaque)
{
    VhostUserBlkExport *vexp = opaque;

    if (!vexp->vb || !virtio_blk_refresh_capacity(vexp->vb)) {
        return;
    }
    /* Without a channel the front-end sees it at its next GET_CONFIG. */
    vu_server_config_changed(vexp->vu.server);
}

static unsigned vhost_user_blk_export_stops(void *opaque, bool resume)
{
    VhostUserBlkExport *vexp = opaque;

    return vexp->vb ? virtio_blk_stops(vexp->vb, resume) : 0;
}

const ExportDriver export_vhost_user_blk = {
    .type = "vhost-user-blk",
    .parse = vhost_user_blk_export_parse,
    .start = vhost_user_blk_export_start,
    .free = vhost_user_blk_export_free,
    .num_queues = vhost_user_blk_export_num_queues,
    .get_queue_stats = vhost_user_export_queue_stats,
    .has_client = vhost_user_export_has_client,
    .get_node_stats = vhost_user_blk_export_get_node_stats,
    .refresh_sizes = vhost_user_blk_export_refresh_sizes,
    .stops = vhost_user_blk_export_stops,
};

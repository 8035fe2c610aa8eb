/*
 * The vhost-user-scsi export type: a virtio-scsi device (hw/virtio/
 * virtio-scsi.c) with one target whose LUNs are SCSI disks (hw/scsi/
 * scsi-disk.c) over block nodes, served over a vhost-user socket
 * (hw/virtio/vhost-user-server.c), for QEMU's vhost-user-scsi-pci.
 *
 * Theory of operation
 * -------------------
 * parse() reads the type's options:
 *   addr.type=unix,addr.path=PATH   a socket the server creates (mode 0600)
 *   addr.type=fd,addr.str=N         a listening UNIX socket inherited as fd N
 *   num-queues=N                    request queues, 1..62, default 1
 *   inflight-tracking=on|off        INFLIGHT_SHMFD offered, default on
 *   lun.N.node-name=NODE            LUN N's node (lun.N=NODE is short for
 *                                   it; in JSON "lun": [{...}, "NODE"])
 *   lun.N.writable=on|off           default off, as qemu-storage-daemon's
 *                                   exports
 *   lun.N.serial=S                  VPD 0x80, up to 36 printable characters
 *   lun.N.wwn=0xHEX                 VPD 0x83 NAA identifier (NAA 2, 3, 5)
 *   lun.N.vendor=V, .product=P      INQUIRY strings (8 and 16 characters)
 *   lun.N.logical-block-size=N      512 or 4096
 *   lun.N.rerror=, lun.N.werror=report|ignore|enospc|stop
 *                                   LUN N's error policies, default report
 *                                   (a stop stops the request queue)
 * The LUN number is the index in the list; the list must not be empty.
 * This type binds its own nodes (ExportDriver.binds_nodes): each LUN's
 * node goes through export_bind_node(), so the generic sharing checks,
 * context moves and release apply to every LUN; the top-level node-name
 * and writable do not exist here.  writethrough, iothread (one or a list)
 * and fixed-iothread are the generic ones.
 *
 * start() creates a ScsiDisk per LUN (which takes its own reference to the
 * node) and hands it to the VirtioScsi, then a VuServer with
 * virtio_scsi_num_virtqueues() queues (control, event, then the request
 * queues) spread over the export's contexts.  free() frees the server
 * first -- it drains the queues, disconnects the front-end and removes the
 * socket file it created -- then the device (and with it the disks).
 *
 * Live management.  add_lun() takes the members of one lun entry plus its
 * number (lun=N) and goes the way of a LUN at creation: the same option
 * parsing and export_bind_node() checks, then the node moves into the
 * export's context (export_move_new_node(): only a node no other export
 * serves can move, and it is idle then), then the disk is made and
 * virtio_scsi_add_lun() shows it to the guest (TRANSPORT_RESET RESCAN).
 * Any failure undoes the earlier steps.  del_lun() is the reverse:
 * virtio_scsi_remove_lun() waits for the LUN's commands and sends
 * TRANSPORT_RESET REMOVED, then the disk is freed and the node released
 * (back to the main loop when no export serves it).  The LUNs are kept in
 * the order they were added; their numbers need not be contiguous.
 * Neither runs while the front-end has dirty logging on (it is migrating
 * the guest, whose destination has the LUNs it was created with): both
 * are refused then, with an error that says to wait for the end of it.
 * refresh_sizes() compares each LUN's node length with the one the guest
 * was last told about; READ CAPACITY and the range checks read the node's
 * length themselves, so only the notice is missing: the CAPACITY DATA HAS
 * CHANGED unit attention and, with VIRTIO_SCSI_F_CHANGE, a PARAM_CHANGE
 * event (virtio_scsi_capacity_changed()).  get_node_stats() reads a LUN's
 * accounting in the device.
 *
 * Threads: main thread.
 */
#include "config-host.h"

#include <inttypes.h>
#include <stddef.h>
#include <string.h>
#include <glib.h>

#include "export/export-int.h"
#include "hw/scsi/scsi-disk.h"
#include "hw/virtio/virtio-scsi.h"
#include "hw/virtio/virtqueue.h"

/* The VuServer's 64 virtqueues less the control and the event queue. */
#define VHOST_USER_SCSI_MAX_QUEUES  62

#define SCSI_VENDOR_MAX     8
#define SCSI_PRODUCT_MAX    16
#define SCSI_SERIAL_MAX     36

/* One LUN as given. */
typedef struct VhostUserScsiLun {
    unsigned lun;
    int64_t length;              /* the node's length when the guest was
                                  * last told */
    BlockNode *bs;               /* borrowed: the export holds a reference */
    bool writable;
    char *serial;
    char *vendor;
    char *product;
    uint64_t wwn;                /* 0: none */
    uint32_t logical_block_size;
    BlockErrorPolicy rerror;
    BlockErrorPolicy werror;
} VhostUserScsiLun;

typedef struct VhostUserScsiExport {
    VhostUserExport vu;          /* first: address and server */
    unsigned num_queues;
    GPtrArray *luns;             /* of VhostUserScsiLun *, owned */
    VirtioScsi *vs;
} VhostUserScsiExport;

G_STATIC_ASSERT(offsetof(VhostUserScsiExport, vu) == 0);

static void vhost_user_scsi_export_free(void *opaque)
{
    VhostUserScsiExport *vexp = opaque;

    if (!vexp) {
        return;
    }
    /* The server first: it drains the queues that use the device. */
    vhost_user_export_stop(&vexp->vu);
    if (vexp->vs) {
        virtio_scsi_free(vexp->vs);
    }
    g_ptr_array_unref(vexp->luns);
    g_free(vexp);
}

static void vhost_user_scsi_lun_free(gpointer p)
{
    VhostUserScsiLun *lun = p;

    g_free(lun->serial);
    g_free(lun->vendor);
    g_free(lun->product);
    g_free(lun);
}

/* The entry of LUN number lun, or NULL; *index (may be NULL) its index. */
static VhostUserScsiLun *vhost_user_scsi_find_lun(VhostUserScsiExport *vexp,
                                                  unsigned lun,
                                                  unsigned *index)
{
    for (guint i = 0; i < vexp->luns->len; i++) {
        VhostUserScsiLun *l = g_ptr_array_index(vexp->luns, i);

        if (l->lun == lun) {
            if (index) {
                *index = i;
            }
            return l;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* LUN options                                                               */

/* A string option that must be printable ASCII; *out a copy or NULL. */
static bool vhost_user_scsi_get_ascii(Opts *lun, const char *prefix,
                                      const char *name, size_t max,
                                      char **out, Error **errp)
{
    g_autofree char *key = g_strconcat(prefix, name, NULL);
    const char *str;

    if (!opts_get_str(lun, name, NULL, &str, errp)) {
        return false;
    }
    if (str && !scsi_disk_check_string(key, str, max, errp)) {
        return false;
    }
    *out = g_strdup(str);
    return true;
}

/*
 * wwn: an 8-byte NAA identifier, written as hex with an optional 0x
 * ("0x5000c500a1b2c3d4"), or a JSON number.  Its first hex digit is the
 * NAA type, and only the 8-byte types make sense here: 2 (IEEE extended),
 * 3 (locally assigned) and 5 (IEEE registered).
 */
static bool vhost_user_scsi_get_wwn(Opts *lun, const char *prefix,
                                    uint64_t *out, Error **errp)
{
    g_autofree char *key = g_strconcat(prefix, "wwn", NULL);
    const char *str = NULL;
    const char *digits;
    int64_t num;
    unsigned naa;
    uint64_t v = 0;

    *out = 0;
    if (!opts_has(lun, "wwn")) {
        return true;
    }
    if (!opts_get_str(lun, "wwn", NULL, &str, NULL)) {
        /* Not a string: a JSON number. */
        if (!opts_get_int(lun, "wwn", 1, INT64_MAX, 0, &num, errp)) {
            return false;
        }
        v = (uint64_t)num;
    } else {
        digits = str;
        if (digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
            digits += 2;
        }
        if (!*digits || strlen(digits) > 16 ||
            strspn(digits, "0123456789abcdefABCDEF") != strlen(digits)) {
            error_setg(errp, "Parameter '%s' expects 16 hex digits such as "
                       "0x5000c500a1b2c3d4, got '%s'", key, str);
            return false;
        }
        v = g_ascii_strtoull(digits, NULL, 16);
    }
    naa = v >> 60;
    if (naa != 2 && naa != 3 && naa != 5) {
        error_setg(errp, "Parameter '%s': 0x%016" PRIx64 " is not an 8-byte "
                   "NAA identifier (its first hex digit, the NAA type, must "
                   "be 2, 3 or 5)", key, v);
        return false;
    }
    *out = v;
    return true;
}

/*
 * The options of LUN i (Opts lun: node-name, writable, serial, ...) into
 * out, and bind its node.  prefix starts the options' names in messages
 * ("lun.1." for --export, "" for export_add_lun()).
 */
static bool vhost_user_scsi_parse_lun(Export *exp, Opts *lun, unsigned i,
                                      const char *prefix,
                                      VhostUserScsiLun *out, Error **errp)
{
    g_autofree char *what = g_strdup_printf("lun.%u", i);
    const char *node_name;
    uint64_t lbs;

    if (!opts_get_str(lun, "node-name", NULL, &node_name, errp) ||
        !opts_get_bool(lun, "writable", false, &out->writable, errp) ||
        !vhost_user_scsi_get_ascii(lun, prefix, "serial", SCSI_SERIAL_MAX,
                                   &out->serial, errp) ||
        !vhost_user_scsi_get_ascii(lun, prefix, "vendor", SCSI_VENDOR_MAX,
                                   &out->vendor, errp) ||
        !vhost_user_scsi_get_ascii(lun, prefix, "product", SCSI_PRODUCT_MAX,
                                   &out->product, errp) ||
        !vhost_user_scsi_get_wwn(lun, prefix, &out->wwn, errp) ||
        !opts_get_size(lun, "logical-block-size", 512, &lbs, errp) ||
        !export_parse_error_policies(lun, "rerror", "werror", &out->rerror,
                                     &out->werror, errp)) {
        return false;
    }
    if (lbs != 512 && lbs != 4096) {
        error_setg(errp, "Parameter '%slogical-block-size' expects 512 or "
                   "4096, got %" PRIu64, prefix, lbs);
        return false;
    }
    out->logical_block_size = (uint32_t)lbs;
    if (!node_name) {
        if (*prefix) {
            error_setg(errp, "Parameter '%snode-name' is missing (the node "
                       "LUN %u serves; lun.%u=NODE is short for it)", prefix,
                       i, i);
        } else {
            error_setg(errp, "Parameter 'node-name' is missing (the node "
                       "LUN %u serves)", i);
        }
        return false;
    }
    if (!opts_check_unused(lun, NULL, errp)) {
        return false;
    }
    out->lun = i;
    out->bs = export_bind_node(exp, what, node_name, (int)i, out->writable,
                               errp);
    if (!out->bs) {
        return false;
    }
    out->length = block_node_get_length(out->bs);
    return true;
}

static bool vhost_user_scsi_parse_luns(Export *exp, Opts *opts,
                                       VhostUserScsiExport *vexp,
                                       Error **errp)
{
    g_autoptr(GPtrArray) list = opts_get_list_implied(opts, "lun",
                                                      "node-name", errp);

    if (!list) {
        return false;
    }
    if (list->len == 0) {
        error_setg(errp, "Parameter 'lun' is missing: give at least one LUN, "
                   "as lun.0.node-name=NODE (or lun.0=NODE)");
        return false;
    }
    if (list->len > VIRTIO_SCSI_MAX_LUN + 1) {
        error_setg(errp, "Parameter 'lun' has %u LUNs; at most %u are "
                   "allowed", list->len, VIRTIO_SCSI_MAX_LUN + 1);
        return false;
    }
    for (guint i = 0; i < list->len; i++) {
        g_autofree char *prefix = g_strdup_printf("lun.%u.", i);
        VhostUserScsiLun *lun = g_new0(VhostUserScsiLun, 1);

        /* In the list at once: free() frees it whatever happens. */
        g_ptr_array_add(vexp->luns, lun);
        if (!vhost_user_scsi_parse_lun(exp, g_ptr_array_index(list, i), i,
                                       prefix, lun, errp)) {
            return false;
        }
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* The export type                                                           */

static void *vhost_user_scsi_export_parse(Export *exp, Opts *opts,
                                          Error **errp)
{
    g_autoptr(GError) err = NULL;
    VhostUserScsiExport *vexp = g_new0(VhostUserScsiExport, 1);
    int64_t num_queues;

    vexp->vu.listen_fd = -1;
    vexp->luns = g_ptr_array_new_with_free_func(vhost_user_scsi_lun_free);
    if (!opts_get_int(opts, "num-queues", 1, VHOST_USER_SCSI_MAX_QUEUES, 1,
                      &num_queues, &err) ||
        !vhost_user_export_parse(opts, &vexp->vu, &err) ||
        !vhost_user_scsi_parse_luns(exp, opts, vexp, &err)) {
        vhost_user_scsi_export_free(vexp);
        error_propagate(errp, g_steal_pointer(&err));
        return NULL;
    }
    vexp->num_queues = (unsigned)num_queues;
    return vexp;
}

/* Create lun's disk and give it to the device (errors name lun.N). */
static bool vhost_user_scsi_add_lun(Export *exp, VhostUserScsiExport *vexp,
                                    const VhostUserScsiLun *lun, Error **errp)
{
    unsigned i = lun->lun;
    ScsiDiskConf conf = {
        .vendor = lun->vendor ? lun->vendor : "SPINDLE",
        .product = lun->product ? lun->product : "SPINDLE DISK",
        .revision = NULL,
        .serial = lun->serial,
        .wwn = lun->wwn,
        .logical_block_size = lun->logical_block_size,
        .writable = lun->writable,
        .writethrough = exp->writethrough,
        .max_transfer = 0,
        .rerror = lun->rerror,
        .werror = lun->werror,
    };
    g_autofree char *revision = NULL;
    const char *dot;
    ScsiDisk *d;

    /* The revision is the version, "0.1" of "0.1.0" (4 characters). */
    dot = strchr(SPINDLE_VERSION, '.');
    dot = dot ? strchr(dot + 1, '.') : NULL;
    revision = dot ? g_strndup(SPINDLE_VERSION, dot - SPINDLE_VERSION)
                   : g_strdup(SPINDLE_VERSION);
    if (strlen(revision) > 4) {
        revision[4] = '\0';
    }
    conf.revision = revision;
    d = scsi_disk_new(&conf, lun->bs, errp);
    if (!d) {
        error_prepend(errp, "lun.%u: ", i);
        return false;
    }
    if (!virtio_scsi_add_lun(vexp->vs, i, d, errp)) {
        scsi_disk_free(d);
        error_prepend(errp, "lun.%u: ", i);
        return false;
    }
    return true;
}

static bool vhost_user_scsi_export_start(Export *exp, void *opaque,
                                         Error **errp)
{
    VhostUserScsiExport *vexp = opaque;
    VirtioScsiConf conf = {
        .num_queues = vexp->num_queues,
        .queue_size = VIRTQUEUE_MAX_SIZE,
        .export_id = exp->id,
        .main_ctx = exp->main_ctx,
        .io_error = export_io_error_event,
    };

    vexp->vs = virtio_scsi_new(&conf, errp);
    if (!vexp->vs) {
        return false;
    }
    for (guint i = 0; i < vexp->luns->len; i++) {
        if (!vhost_user_scsi_add_lun(exp, vexp,
                                     g_ptr_array_index(vexp->luns, i),
                                     errp)) {
            return false;
        }
    }
    return vhost_user_export_serve(&vexp->vu, exp,
                                   virtio_scsi_num_virtqueues(vexp->vs),
                                   &virtio_scsi_vu_ops, vexp->vs, errp);
}

/* Statistics count every virtqueue: 0 control, 1 event, 2.. requests. */
static unsigned vhost_user_scsi_export_num_queues(void *opaque)
{
    VhostUserScsiExport *vexp = opaque;

    return virtio_scsi_num_virtqueues(vexp->vs);
}

/* ------------------------------------------------------------------------ */
/* Live management                                                           */

static bool vhost_user_scsi_export_get_node_stats(Export *exp, void *opaque,
                                                  unsigned i,
                                                  BlockAcctStats *out)
{
    VhostUserScsiExport *vexp = opaque;
    int lun = export_get_nth_lun(exp, i);

    return lun >= 0 && vexp->vs &&
           virtio_scsi_get_lun_stats(vexp->vs, (unsigned)lun, out);
}

static void vhost_user_scsi_export_refresh_sizes(Export *exp, void *opaque)
{
    VhostUserScsiExport *vexp = opaque;

    for (guint i = 0; vexp->vs && i < vexp->luns->len; i++) {
        VhostUserScsiLun *lun = g_ptr_array_index(vexp->luns, i);
        int64_t length = block_node_get_length(lun->bs);
        uint32_t lbs = lun->logical_block_size;

        /* What READ CAPACITY shows: whole blocks. */
        if (length / lbs != lun->length / lbs) {
            virtio_scsi_capacity_changed(vexp->vs, lun->lun);
        }
        lun->length = length;
    }
}

/*
 * Refuse to change the LUNs while the front-end migrates the guest (dirty
 * logging on): QEMU sends its device state to the destination, whose
 * export has the LUNs it was created with, so a LUN added or removed here
 * now would be missing (or extra) on the other side, and the guest would
 * lose the event that announced it if it arrived after the last RAM pass.
 * what: "add" or "remove"; the caller names the export.
 */
static bool vhost_user_scsi_check_not_migrating(VhostUserScsiExport *vexp,
                                                const char *what,
                                                Error **errp)
{
    if (vexp->vu.server && vu_server_dirty_logging(vexp->vu.server)) {
        error_setg(errp, "the guest is being migrated (dirty logging is "
                   "on); %s the LUN after the migration, on the destination "
                   "too", what);
        return false;
    }
    return true;
}

static bool vhost_user_scsi_export_add_lun(Export *exp, void *opaque,
                                           Opts *opts, Error **errp)
{
    VhostUserScsiExport *vexp = opaque;
    VhostUserScsiLun *lun;
    VhostUserScsiLun *taken;
    int64_t num;

    if (!vhost_user_scsi_check_not_migrating(vexp, "add", errp)) {
        return false;
    }
    if (!opts_get_int(opts, "lun", 0, VIRTIO_SCSI_MAX_LUN, -1, &num, errp)) {
        return false;
    }
    if (num < 0) {
        error_setg(errp, "Parameter 'lun' is missing (the LUN number, 0 to "
                   "%u)", VIRTIO_SCSI_MAX_LUN);
        return false;
    }
    taken = vhost_user_scsi_find_lun(vexp, (unsigned)num, NULL);
    if (taken) {
        error_setg(errp, "LUN %u is already in use (node '%s'); remove it "
                   "first or choose another number", (unsigned)num,
                   block_node_get_name(taken->bs));
        return false;
    }
    lun = g_new0(VhostUserScsiLun, 1);
    if (!vhost_user_scsi_parse_lun(exp, opts, (unsigned)num, "", lun,
                                   errp)) {
        /* Nothing bound: export_bind_node() is the last step. */
        vhost_user_scsi_lun_free(lun);
        return false;
    }
    if (!export_move_new_node(exp, lun->bs, errp) ||
        !vhost_user_scsi_add_lun(exp, vexp, lun, errp)) {
        export_unbind_node(exp, lun->bs);
        vhost_user_scsi_lun_free(lun);
        return false;
    }
    g_ptr_array_add(vexp->luns, lun);
    return true;
}

static bool vhost_user_scsi_export_del_lun(Export *exp, void *opaque,
                                           unsigned num, Error **errp)
{
    VhostUserScsiExport *vexp = opaque;
    VhostUserScsiLun *lun;
    unsigned index;
    ScsiDisk *d;

    if (!vhost_user_scsi_check_not_migrating(vexp, "remove", errp)) {
        return false;
    }
    lun = vhost_user_scsi_find_lun(vexp, num, &index);
    if (!lun) {
        error_setg(errp, "there is no LUN %u", num);
        return false;
    }
    /* Waits for the LUN's commands; the guest gets REMOVED. */
    d = virtio_scsi_remove_lun(vexp->vs, num);
    g_assert(d);
    scsi_disk_free(d);
    export_unbind_node(exp, lun->bs);
    g_ptr_array_remove_index(vexp->luns, index);
    return true;
}

static unsigned vhost_user_scsi_export_stops(void *opaque, bool resume)
{
    VhostUserScsiExport *vexp = opaque;

    return vexp->vs ? virtio_scsi_stops(vexp->vs, resume) : 0;
}

const ExportDriver export_vhost_user_scsi = {
    .type = "vhost-user-scsi",
    .binds_nodes = true,
    .parse = vhost_user_scsi_export_parse,
    .start = vhost_user_scsi_export_start,
    .free = vhost_user_scsi_export_free,
    .num_queues = vhost_user_scsi_export_num_queues,
    .get_queue_stats = vhost_user_export_queue_stats,
    .has_client = vhost_user_export_has_client,
    .get_node_stats = vhost_user_scsi_export_get_node_stats,
    .refresh_sizes = vhost_user_scsi_export_refresh_sizes,
    .add_lun = vhost_user_scsi_export_add_lun,
    .del_lun = vhost_user_scsi_export_del_lun,
    .stops = vhost_user_scsi_export_stops,
};

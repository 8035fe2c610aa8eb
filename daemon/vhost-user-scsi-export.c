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
 *   lun.N.node-name=NODE            LUN N's node (lun.N=NODE is short for
 *                                   it; in JSON "lun": [{...}, "NODE"])
 *   lun.N.writable=on|off           default off, as qemu-storage-daemon's
 *                                   exports
 *   lun.N.serial=S                  VPD 0x80, up to 36 printable characters
 *   lun.N.wwn=0xHEX                 VPD 0x83 NAA identifier (NAA 2, 3, 5)
 *   lun.N.vendor=V, .product=P      INQUIRY strings (8 and 16 characters)
 *   lun.N.logical-block-size=N      512 or 4096
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
 * Threads: main thread.
 */
#include "config-host.h"

#include <inttypes.h>
#include <stddef.h>
#include <string.h>
#include <glib.h>

#include "daemon/export-int.h"
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
    BlockNode *bs;               /* borrowed: the export holds a reference */
    bool writable;
    char *serial;
    char *vendor;
    char *product;
    uint64_t wwn;                /* 0: none */
    uint32_t logical_block_size;
} VhostUserScsiLun;

typedef struct VhostUserScsiExport {
    VhostUserExport vu;          /* first: address and server */
    unsigned num_queues;
    VhostUserScsiLun *luns;
    unsigned nluns;
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
    for (unsigned i = 0; i < vexp->nluns; i++) {
        g_free(vexp->luns[i].serial);
        g_free(vexp->luns[i].vendor);
        g_free(vexp->luns[i].product);
    }
    g_free(vexp->luns);
    g_free(vexp);
}

/* ------------------------------------------------------------------------ */
/* LUN options                                                               */

/*
 * An INQUIRY or VPD string: printable ASCII (SPC-4 4.3.1), at most max
 * characters.  key is the option's full name for messages.
 */
static bool vhost_user_scsi_check_ascii(const char *key, const char *str,
                                        size_t max, Error **errp)
{
    size_t len = strlen(str);

    if (len > max) {
        error_setg(errp, "Parameter '%s' is %zu characters long; at most "
                   "%zu are allowed", key, len, max);
        return false;
    }
    for (const char *p = str; *p; p++) {
        if (*p < 0x20 || *p > 0x7e) {
            error_setg(errp, "Parameter '%s' must be printable ASCII "
                       "(SCSI strings are ASCII); '%s' is not", key, str);
            return false;
        }
    }
    return true;
}

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
    if (str && !vhost_user_scsi_check_ascii(key, str, max, errp)) {
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

static bool vhost_user_scsi_parse_lun(Export *exp, Opts *lun, unsigned i,
                                      VhostUserScsiLun *out, Error **errp)
{
    g_autofree char *what = g_strdup_printf("lun.%u", i);
    g_autofree char *prefix = g_strdup_printf("lun.%u.", i);
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
        !opts_get_size(lun, "logical-block-size", 512, &lbs, errp)) {
        return false;
    }
    if (lbs != 512 && lbs != 4096) {
        error_setg(errp, "Parameter '%slogical-block-size' expects 512 or "
                   "4096, got %" PRIu64, prefix, lbs);
        return false;
    }
    out->logical_block_size = (uint32_t)lbs;
    if (!node_name) {
        error_setg(errp, "Parameter '%snode-name' is missing (the node LUN "
                   "%u serves; lun.%u=NODE is short for it)", prefix, i, i);
        return false;
    }
    if (!opts_check_unused(lun, NULL, errp)) {
        return false;
    }
    out->bs = export_bind_node(exp, what, node_name, out->writable, errp);
    return out->bs != NULL;
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
    vexp->luns = g_new0(VhostUserScsiLun, list->len);
    for (guint i = 0; i < list->len; i++) {
        vexp->nluns = i + 1;
        if (!vhost_user_scsi_parse_lun(exp, g_ptr_array_index(list, i), i,
                                       &vexp->luns[i], errp)) {
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
    if (!opts_get_int(opts, "num-queues", 1, VHOST_USER_SCSI_MAX_QUEUES, 1,
                      &num_queues, &err) ||
        !vhost_user_export_parse_addr(opts, &vexp->vu.path,
                                      &vexp->vu.listen_fd, &err) ||
        !vhost_user_scsi_parse_luns(exp, opts, vexp, &err)) {
        vhost_user_scsi_export_free(vexp);
        error_propagate(errp, g_steal_pointer(&err));
        return NULL;
    }
    vexp->num_queues = (unsigned)num_queues;
    return vexp;
}

/* Create LUN i's disk and give it to the device. */
static bool vhost_user_scsi_add_lun(Export *exp, VhostUserScsiExport *vexp,
                                    unsigned i, Error **errp)
{
    const VhostUserScsiLun *lun = &vexp->luns[i];
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
    };

    vexp->vs = virtio_scsi_new(&conf, errp);
    if (!vexp->vs) {
        return false;
    }
    for (unsigned i = 0; i < vexp->nluns; i++) {
        if (!vhost_user_scsi_add_lun(exp, vexp, i, errp)) {
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

const ExportDriver export_vhost_user_scsi = {
    .type = "vhost-user-scsi",
    .binds_nodes = true,
    .parse = vhost_user_scsi_export_parse,
    .start = vhost_user_scsi_export_start,
    .free = vhost_user_scsi_export_free,
    .num_queues = vhost_user_scsi_export_num_queues,
    .get_queue_stats = vhost_user_export_queue_stats,
};

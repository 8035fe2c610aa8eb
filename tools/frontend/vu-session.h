/*
 * vu-session: options, lifecycle and session of a vu-frontend (vu-session.c):
 * create the front-end, connect and negotiate, set up and stop queues,
 * reconnect; what was negotiated, and the device config.
 */
#ifndef SPINDLE_TOOLS_VU_SESSION_H
#define SPINDLE_TOOLS_VU_SESSION_H

#include "vu-features.h"
#include "vu-types.h"

/* ------------------------------------------------------------------------ */
/* Options                                                                   */


typedef struct VufOptions {
    const char *socket_path;    /* borrowed; must outlive the VuFrontend */
    VufDeviceType device;
    uint64_t mem_size;          /* guest memory bytes (default 64 MiB) */
    unsigned num_queues;        /* queues to set up (default 1) */
    unsigned queue_size;        /* descriptors per queue, power of 2 (256) */
    unsigned indirect_max;      /* entries per indirect table (default 64) */
    uint64_t features_wanted;   /* accepted when offered */
    uint64_t features_required; /* connect fails without them */
    uint64_t protocol_features_wanted;
    VufMemMethod mem_method;
    VufCompletion completion;   /* initial mode of every queue */
    int reply_timeout_ms;       /* per control reply (default 5000) */
    int connect_timeout_ms;     /* retry connect() this long (default 0) */
} VufOptions;

#define VUF_MEM_SIZE_DEFAULT        (64ull << 20)
#define VUF_QUEUE_SIZE_DEFAULT      256
#define VUF_QUEUE_SIZE_MAX          32768
#define VUF_QUEUES_MAX              64
#define VUF_INDIRECT_MAX_DEFAULT    64

/* Fill *opts with the defaults above (socket_path NULL).  Any thread. */
void vuf_options_init(VufOptions *opts);
/* The same for device dev: VUF_DEVICE_SCSI gets VUF_SCSI_FEATURES_DEFAULT
 * and 3 queues (control, event, one request queue).  Any thread. */
void vuf_options_init_device(VufOptions *opts, VufDeviceType dev);


/* ------------------------------------------------------------------------ */
/* Front-end lifecycle (control thread)                                      */

typedef struct VuFrontend VuFrontend;
typedef struct VufQueue VufQueue;

/*
 * Create a front-end: allocate and map the guest memory and carve out the
 * rings of opts->num_queues queues.  No connection yet.  The options are
 * copied (socket_path is borrowed).  Returns NULL with errp set on bad
 * options or when the memory cannot be created.  Free with vuf_free().
 */
VuFrontend *vuf_new(const VufOptions *opts, Error **errp);

/* Disconnect if connected, unmap the memory, free everything. NULL is ok. */
void vuf_free(VuFrontend *fe);

/*
 * Start a session: vuf_connect_socket(), vuf_negotiate(),
 * vuf_setup_queues().  On failure the socket is closed again and errp says
 * which step failed and why (socket unreachable, a required feature
 * missing, a short or unexpected reply, too many queues requested, ...).
 */
bool vuf_connect(VuFrontend *fe, Error **errp);

/* The steps of vuf_connect(), for tests that stop in between. */
bool vuf_connect_socket(VuFrontend *fe, Error **errp);
/* GET_FEATURES, protocol features, GET_QUEUE_NUM, GET_MAX_MEM_SLOTS,
 * the back-end channel (SET_SLAVE_REQ_FD, with the SLAVE_REQ protocol
 * feature), SET_OWNER, GET_CONFIG, feature checks, the inflight region
 * (GET_INFLIGHT_FD once, SET_INFLIGHT_FD; with INFLIGHT_SHMFD),
 * SET_FEATURES, memory table. */
bool vuf_negotiate(VuFrontend *fe, Error **errp);
/* Reset and hand over every queue's rings: SET_VRING_NUM/BASE/ADDR/CALL/
 * KICK and SET_VRING_ENABLE. */
bool vuf_setup_queues(VuFrontend *fe, Error **errp);

/*
 * Stop queue i with GET_VRING_BASE (the back-end finishes and stops the
 * ring); *last_avail (may be NULL) gets the back-end's next avail index.
 */
bool vuf_stop_queue(VuFrontend *fe, unsigned i, uint32_t *last_avail,
                    Error **errp);

/* SET_VRING_ENABLE for queue i. */
bool vuf_enable_queue(VuFrontend *fe, unsigned i, bool enable, Error **errp);

/*
 * End the session: close the socket and the queues' eventfds.  In-flight
 * requests are forgotten.  No queue may be in use by another thread.
 * Harmless when not connected.
 */
void vuf_disconnect(VuFrontend *fe);

/*
 * Stop every started queue (errors ignored: the back-end may be gone),
 * disconnect and start a new session with the same options.  Guest memory
 * and everything allocated in it stay; rings start from index 0 again,
 * with a new inflight region.  (vuf_resume() keeps the rings.)
 */
bool vuf_reconnect(VuFrontend *fe, Error **errp);

bool vuf_is_connected(const VuFrontend *fe);


/* ------------------------------------------------------------------------ */
/* What was negotiated (control thread, or any thread once set up)           */

uint64_t vuf_features_offered(const VuFrontend *fe);
uint64_t vuf_features(const VuFrontend *fe);           /* negotiated */
bool vuf_has_feature(const VuFrontend *fe, unsigned bit);
uint64_t vuf_protocol_features_offered(const VuFrontend *fe);
uint64_t vuf_protocol_features(const VuFrontend *fe);  /* negotiated */
/* GET_QUEUE_NUM's answer, 0 if the back-end lacks protocol feature MQ. */
uint64_t vuf_queue_num_max(const VuFrontend *fe);
/* GET_MAX_MEM_SLOTS's answer, 0 without CONFIGURE_MEM_SLOTS. */
uint64_t vuf_max_mem_slots(const VuFrontend *fe);
/* The virtio-blk config space as read at connect (little-endian, which is
 * host order here), or NULL when the back-end has no CONFIG protocol
 * feature (or device is VUF_DEVICE_GENERIC).  Fields whose feature was not
 * negotiated are filled too (a back-end usually fills them anyway); check
 * the feature bits.  Borrowed. */
const VirtioBlkConfig *vuf_blk_config(const VuFrontend *fe);
/* The virtio-scsi config space as read at connect, or NULL (no CONFIG
 * protocol feature, or the device is not VUF_DEVICE_SCSI).  It was
 * checked: num_queues >= 1, cdb_size and sense_size large enough for
 * what this front-end sends (they are left at the device's values: QEMU
 * does not change them either).  Borrowed. */
const VirtioScsiConfig *vuf_scsi_config(const VuFrontend *fe);
unsigned vuf_num_queues(const VuFrontend *fe);
/* Queue i (< vuf_num_queues()); the pointer stays valid until vuf_free(). */
VufQueue *vuf_queue(VuFrontend *fe, unsigned i);
const VufOptions *vuf_options(const VuFrontend *fe);

int vuf_device_feature_by_name(VufDeviceType dev, const char *name);

/*
 * GET_CONFIG: read size bytes (<= 256) at offset of the device config space
 * into buf.  Fails if CONFIG was not negotiated or the reply is malformed
 * (wrong size, zero size = the back-end's error).
 */
bool vuf_get_config(VuFrontend *fe, uint32_t offset, void *buf,
                    uint32_t size, Error **errp);

/*
 * Read the device config again (GET_CONFIG), as QEMU does after a
 * config-change message: vuf_blk_config() / vuf_scsi_config() then show
 * the new values.  A no-op without the CONFIG protocol feature.
 */
bool vuf_reread_config(VuFrontend *fe, Error **errp);

#endif

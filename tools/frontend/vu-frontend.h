/*
 * vu-frontend: a guest-less vhost-user front-end (the part QEMU plays).
 *
 * A VuFrontend owns a block of "guest memory" (a memfd mapped in this
 * process), connects to a vhost-user back-end over a UNIX socket, negotiates
 * features, shares the memory with the back-end and sets up N split
 * virtqueues whose rings live in that memory.  Callers then drive the queues
 * like a guest driver: put descriptor chains in the available ring, kick the
 * back-end when it wants to be kicked, and harvest the used ring by polling
 * or by blocking on the call eventfd.  A virtio-blk layer on top builds
 * requests (read, write, flush, get-id, discard, write-zeroes), and a
 * virtio-scsi layer (vu-scsi.c) commands with a CDB, task management and
 * asynchronous notification on the control queue, and event buffers.
 *
 * Users: tools/frontend/vu-client.c (spindle-vu-client, the command-line
 * driver used by the functional tests) and spindle-bench (tools/bench), which
 * drives each queue from its own pinned thread.
 *
 * Threads
 * -------
 * - Control path (everything taking Error **, and vuf_free/disconnect):
 *   the "control thread", the one that called vuf_new() (asserted).  It
 *   connects, negotiates, stops queues, sends raw messages, disconnects.
 *   It must not disconnect or reconnect while another thread uses a queue.
 * - Data path (vufq_*, vufblk_* except vufblk_req_new/free): each VufQueue
 *   is used by one thread at a time, which need not be the control thread;
 *   different queues may run in different threads with no locking.  These
 *   functions return 0 / a count or a negative errno.
 * - The guest memory allocator (vuf_mem_alloc/free) is thread-safe.
 * - Statistics (vufq_get_stats) may be read from any thread at any time.
 *
 * Guest memory layout
 * -------------------
 * One region, guest physical address 0, user address = our mapping.  The
 * rings and indirect tables of every queue are carved out of it when the
 * VuFrontend is created; the rest is handed out by vuf_mem_alloc().  Memory
 * (and so every buffer) survives a reconnect; rings are reset.
 *
 * Byte order: the rings and virtio-blk structures are little-endian; this
 * code only builds on little-endian hosts.
 */
#ifndef SPINDLE_TOOLS_VU_FRONTEND_H
#define SPINDLE_TOOLS_VU_FRONTEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hw/virtio/vhost-user-wire.h"
#include "hw/virtio/virtio-blk-wire.h"
#include "hw/virtio/virtio-ring-wire.h"
#include "hw/virtio/virtio-scsi-wire.h"
#include "util/error.h"

/* ------------------------------------------------------------------------ */
/* Feature defaults (the wire formats: include/hw/virtio/...-wire.h)         */

#define VUF_BIT(n)                  (1ull << (n))

/* Features accepted by default when the back-end offers them. */
#define VUF_FEATURES_DEFAULT \
    (VUF_BIT(VIRTIO_F_VERSION_1) | VUF_BIT(VIRTIO_RING_F_INDIRECT_DESC) | \
     VUF_BIT(VIRTIO_RING_F_EVENT_IDX) | VUF_BIT(VIRTIO_BLK_F_SIZE_MAX) | \
     VUF_BIT(VIRTIO_BLK_F_SEG_MAX) | VUF_BIT(VIRTIO_BLK_F_GEOMETRY) | \
     VUF_BIT(VIRTIO_BLK_F_RO) | VUF_BIT(VIRTIO_BLK_F_BLK_SIZE) | \
     VUF_BIT(VIRTIO_BLK_F_FLUSH) | VUF_BIT(VIRTIO_BLK_F_TOPOLOGY) | \
     VUF_BIT(VIRTIO_BLK_F_CONFIG_WCE) | VUF_BIT(VIRTIO_BLK_F_MQ) | \
     VUF_BIT(VIRTIO_BLK_F_DISCARD) | VUF_BIT(VIRTIO_BLK_F_WRITE_ZEROES))
/* The same for a virtio-scsi device (VUF_DEVICE_SCSI): the transport's and
 * hot-plug and parameter change events; not INOUT or T10_PI. */
#define VUF_SCSI_FEATURES_DEFAULT \
    (VUF_BIT(VIRTIO_F_VERSION_1) | VUF_BIT(VIRTIO_RING_F_INDIRECT_DESC) | \
     VUF_BIT(VIRTIO_RING_F_EVENT_IDX) | VUF_BIT(VIRTIO_SCSI_F_HOTPLUG) | \
     VUF_BIT(VIRTIO_SCSI_F_CHANGE))
/* Features without which we refuse to go on, by default. */
#define VUF_FEATURES_REQUIRED_DEFAULT   VUF_BIT(VIRTIO_F_VERSION_1)
/* Protocol features accepted by default when offered. */
#define VUF_PROTOCOL_FEATURES_DEFAULT \
    (VUF_BIT(VHOST_USER_PROTOCOL_F_MQ) | \
     VUF_BIT(VHOST_USER_PROTOCOL_F_REPLY_ACK) | \
     VUF_BIT(VHOST_USER_PROTOCOL_F_SLAVE_REQ) | \
     VUF_BIT(VHOST_USER_PROTOCOL_F_CONFIG) | \
     VUF_BIT(VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS))

/* ------------------------------------------------------------------------ */
/* Options                                                                   */

typedef enum VufCompletion {
    VUF_COMPLETION_POLL,        /* spin on used->idx; ask for no interrupts */
    VUF_COMPLETION_INTERRUPT,   /* block on the call eventfd */
} VufCompletion;

typedef enum VufDeviceType {
    VUF_DEVICE_BLK,             /* read and check the virtio-blk config */
    VUF_DEVICE_GENERIC,         /* no device-specific config handling */
    VUF_DEVICE_SCSI,            /* read and check the virtio-scsi config;
                                 * queue 0 is the control queue, 1 the
                                 * event queue, 2.. the request queues */
} VufDeviceType;

typedef enum VufMemMethod {
    VUF_MEM_SET_MEM_TABLE,      /* the default */
    VUF_MEM_ADD_MEM_REG,        /* needs CONFIGURE_MEM_SLOTS; error if absent */
} VufMemMethod;

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
 * feature), SET_OWNER, GET_CONFIG, feature checks, SET_FEATURES, memory
 * table. */
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
 * and everything allocated in it stay; rings start from index 0 again.
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

/*
 * Name of a feature bit ("VERSION_1", "BLK_FLUSH", ...), or NULL if unknown;
 * of a protocol feature bit ("REPLY_ACK", ...) likewise.  Any thread.
 */
const char *vuf_feature_name(unsigned bit);
const char *vuf_protocol_feature_name(unsigned bit);
/* Look up a feature bit by name (as vuf_feature_name() spells it, case
 * insensitive); -1 if unknown. */
int vuf_feature_by_name(const char *name);
/*
 * The same for device dev's bits: the device-specific bits (below 24) have
 * their own names per device ("SCSI_HOTPLUG" is bit 1 for VUF_DEVICE_SCSI,
 * where vuf_feature_name() says "BLK_SIZE_MAX"); the transport's are
 * shared.  Any thread.
 */
const char *vuf_device_feature_name(VufDeviceType dev, unsigned bit);
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

/* ------------------------------------------------------------------------ */
/* The back-end channel (control thread)                                     */

/*
 * With the SLAVE_REQ protocol feature the front-end gives the back-end one
 * end of a socket pair (SET_SLAVE_REQ_FD) on which the back-end sends its
 * own requests.  This front-end understands CONFIG_CHANGE_MSG (the device
 * config changed: a resized disk) and counts it; it acknowledges any
 * request that asks for a reply (status 0 for CONFIG_CHANGE_MSG, 1 for
 * others, which are otherwise ignored).  Messages are read only inside the
 * calls below, so they wait in the socket meanwhile.
 */

/* Our end of the channel, or -1 (not negotiated, not connected). */
int vuf_backend_channel_fd(const VuFrontend *fe);

/*
 * Handle the messages on the channel, waiting up to timeout_ms for the
 * first (0: only what is there).  False with errp set if there is no
 * channel, the back-end closed it or sent a malformed message.
 */
bool vuf_poll_backend_channel(VuFrontend *fe, int timeout_ms, Error **errp);

/* CONFIG_CHANGE_MSGs received in this session so far. */
uint64_t vuf_config_changes(const VuFrontend *fe);

/*
 * Wait up to timeout_ms (< 0: forever) for a CONFIG_CHANGE_MSG not yet
 * returned by an earlier call (one that already arrived counts at once).
 * False with errp set on a time-out or as vuf_poll_backend_channel().
 */
bool vuf_wait_config_change(VuFrontend *fe, int timeout_ms, Error **errp);

/* ------------------------------------------------------------------------ */
/* Guest memory (thread-safe)                                                */

void *vuf_mem_base(const VuFrontend *fe);
uint64_t vuf_mem_size(const VuFrontend *fe);

/*
 * Allocate size bytes of guest memory aligned to align (a power of two, 0
 * means 64).  Returns the host pointer and stores the guest address in *gpa
 * (may be NULL); NULL when the memory is exhausted.  The memory is not
 * cleared.  Free with vuf_mem_free().
 */
void *vuf_mem_alloc(VuFrontend *fe, size_t size, size_t align, uint64_t *gpa);
void vuf_mem_free(VuFrontend *fe, void *ptr);
/* Bytes not allocated (fragmentation not accounted for). */
uint64_t vuf_mem_available(VuFrontend *fe);

/* Guest address of a host pointer inside the memory. */
uint64_t vuf_gpa(const VuFrontend *fe, const void *hva);
/* Host pointer for [gpa, gpa+len), or NULL if outside the memory. */
void *vuf_hva(const VuFrontend *fe, uint64_t gpa, uint64_t len);

/* ------------------------------------------------------------------------ */
/* Raw messages, for tests of the back-end (control thread)                  */

typedef enum VufRecvResult {
    VUF_RECV_MESSAGE,           /* a message arrived */
    VUF_RECV_TIMEOUT,           /* nothing within the timeout */
    VUF_RECV_CLOSED,            /* the back-end closed the connection */
} VufRecvResult;

/*
 * Send one message exactly as given: header {request, flags, size}, then
 * size payload bytes, with nfds (<= VHOST_USER_MAX_FDS) descriptors attached
 * (the fds stay ours).  Nothing is checked, so this can send what the
 * protocol forbids.  Returns false with errp set if the send fails.
 */
bool vuf_send_raw(VuFrontend *fe, uint32_t request, uint32_t flags,
                  const void *payload, size_t size, const int *fds,
                  size_t nfds, Error **errp);

/* Like vuf_send_raw(), but the header's size field says size_field while
 * len bytes follow: a lying header. */
bool vuf_send_raw_header(VuFrontend *fe, uint32_t request, uint32_t flags,
                         uint32_t size_field, const void *payload,
                         size_t len, const int *fds, size_t nfds,
                         Error **errp);

/*
 * Wait up to timeout_ms for one message from the back-end.  On
 * VUF_RECV_MESSAGE, *hdr gets its header and payload (of capacity max) its
 * first min(size, max) bytes; *len the bytes stored.  Any fds that came
 * with it are closed.  Returns false with errp set only on a local error or
 * a truncated message.
 */
bool vuf_recv_raw(VuFrontend *fe, int timeout_ms, VhostUserHeader *hdr,
                  void *payload, size_t max, size_t *len,
                  VufRecvResult *result, Error **errp);

/*
 * Is the back-end still talking to us?  Sends GET_FEATURES and waits up to
 * timeout_ms for its reply, skipping any stray replies.  No Error: false
 * means closed, silent or nonsensical.
 */
bool vuf_check_alive(VuFrontend *fe, int timeout_ms);

/* The socket, or -1 when disconnected (e.g. to poll for hang-up). */
int vuf_socket_fd(const VuFrontend *fe);

/* ------------------------------------------------------------------------ */
/* Virtqueue driver (data path: one thread per queue at a time)             */

typedef struct VufSeg {
    uint64_t gpa;               /* guest address of the buffer */
    uint32_t len;
    bool device_writes;         /* VRING_DESC_F_WRITE: the device fills it */
} VufSeg;

/* vufq_add() flags. */
#define VUFQ_ADD_INDIRECT       1u  /* put the chain in an indirect table */

typedef struct VufQueueStats {
    uint64_t added;             /* chains put in the available ring */
    uint64_t completed;         /* used elements harvested */
    uint64_t kicks;             /* kick eventfd writes */
    uint64_t kicks_avoided;     /* vufq_kick() calls the device said to skip */
    uint64_t interrupts;        /* call eventfd signals received */
    uint64_t wakeups;           /* blocking waits that returned on the fd */
    uint64_t spins;             /* poll-mode looks at used->idx that found
                                 * nothing */
} VufQueueStats;

/* Queue index, size, and whether it is set up in the current session. */
unsigned vufq_index(const VufQueue *q);
unsigned vufq_size(const VufQueue *q);
bool vufq_ready(const VufQueue *q);
VuFrontend *vufq_frontend(const VufQueue *q);

/*
 * Choose how vufq_wait() detects completions and tell the device whether we
 * want interrupts (VRING_AVAIL_F_NO_INTERRUPT, or used_event with
 * EVENT_IDX).  Call while nothing is in flight, or between waits.
 */
void vufq_set_completion(VufQueue *q, VufCompletion mode);
VufCompletion vufq_completion(const VufQueue *q);

/* Free descriptors, and chains added but not yet harvested. */
unsigned vufq_free_descs(const VufQueue *q);
unsigned vufq_in_flight(const VufQueue *q);
/* Largest chain vufq_add() accepts with/without VUFQ_ADD_INDIRECT. */
unsigned vufq_max_segs(const VufQueue *q, unsigned flags);

/*
 * Add a descriptor chain of n segments (readable ones must come before
 * device-writable ones) and publish it in the available ring (release
 * store of avail->idx).  token (not NULL) comes back from vufq_get_used().
 * Does not kick.  Returns the head index, -ENOSPC if there are not enough
 * free descriptors, -EINVAL for n == 0, a NULL token or a too long chain,
 * -ENOTSUP for VUFQ_ADD_INDIRECT without INDIRECT_DESC, -EIO on a broken
 * queue, -ENOTCONN if the queue is not set up.
 */
int vufq_add(VufQueue *q, const VufSeg *segs, unsigned n, unsigned flags,
             void *token);

/*
 * Kick the device if it wants to know about the chains added since the last
 * kick: with EVENT_IDX when they cross used->avail_event, otherwise unless
 * VRING_USED_F_NO_NOTIFY is set.  Returns 1 if it kicked, 0 if the kick was
 * avoided or nothing was added, -errno if the eventfd write failed.
 */
int vufq_kick(VufQueue *q);

/*
 * Harvest one used element: 1 with *token and *len (bytes the device
 * wrote) set, 0 if there is none, -EIO if the device returned an id that is
 * not in flight or moved used->idx by more than the queue size (the queue
 * is then broken until the next session).
 */
int vufq_get_used(VufQueue *q, void **token, uint32_t *len);

/*
 * Wait until a used element is ready or timeout_ns passes (< 0: forever):
 * spin on used->idx in poll mode, arm interrupts and block on the call
 * eventfd in interrupt mode.  Returns 0 when one is ready, -ETIMEDOUT,
 * -ECONNRESET if the back-end hung up, -EIO on a broken queue, -ENOTCONN.
 */
int vufq_wait(VufQueue *q, int64_t timeout_ns);

/*
 * Read the call eventfd without blocking and add what it counted to the
 * interrupts (e.g. at the end of a poll-mode run, to see whether the device
 * signalled although we asked it not to).  Returns the count read, or 0.
 * The queue's thread.
 */
uint64_t vufq_collect_interrupts(VufQueue *q);

/*
 * The call eventfd of the current session, or -1 when the queue is not set
 * up.  For a caller that must block on it with a finer timeout than
 * vufq_wait()'s milliseconds, or together with other fds: arm and re-check
 * first with vufq_wait(q, 0) in interrupt mode (it returns 0 if a used
 * element is ready, -ETIMEDOUT otherwise), block until the fd is readable,
 * then count the signal with vufq_collect_interrupts().  The fd stays the
 * queue's: do not read or close it.  The queue's thread.
 */
int vufq_call_fd(const VufQueue *q);

/* Copy the counters (any thread). */
void vufq_get_stats(const VufQueue *q, VufQueueStats *out);
/* Zero the counters (the queue's thread). */
void vufq_reset_stats(VufQueue *q);
/* True once the device returned something impossible on this queue. */
bool vufq_broken(const VufQueue *q);

/*
 * Ring access for tests that craft their own chains.  The pointers stay
 * valid until vuf_free(); writing through them bypasses every check.
 */
VRingDesc *vufq_desc_table(VufQueue *q);
VRingAvail *vufq_avail(VufQueue *q);
VRingUsed *vufq_used(VufQueue *q);

/* Faults vufq_inject_fault() can put in a ring; each is a virtio-blk read
 * of one sector that is wrong in exactly one way. */
typedef enum VufRingFault {
    VUF_FAULT_HEAD_OUT_OF_RANGE,    /* avail ring entry >= queue size */
    VUF_FAULT_DESC_LOOP,            /* the last descriptor links back to
                                     * the second (same direction) */
    VUF_FAULT_ADDR_OUT_OF_RANGE,    /* data buffer beyond guest memory */
    VUF_FAULT_ADDR_OVERFLOW,        /* addr + len wraps around 2^64 */
    VUF_FAULT_NEXT_OUT_OF_RANGE,    /* next >= queue size */
    VUF_FAULT_INDIRECT_BAD_LEN,     /* indirect table length % 16 != 0 */
    VUF_FAULT_INDIRECT_NESTED,      /* INDIRECT flag inside a table */
    VUF_FAULT_INDIRECT_LOOP,        /* the same loop inside a table */
    VUF_FAULT_AVAIL_IDX_JUMP,       /* avail->idx moved by > queue size */
    VUF_FAULT_COUNT,
} VufRingFault;

/* Name ("desc-loop", ...) of a fault, and the reverse (-1 if unknown). */
const char *vuf_ring_fault_name(VufRingFault f);
int vuf_ring_fault_by_name(const char *name);

/*
 * Put fault f in the available ring and kick.  Returns 0 or -errno (as
 * vufq_add(); -ENOTSUP for an indirect fault without INDIRECT_DESC).  The
 * queue should be considered spoilt afterwards: reconnect to use it again.
 */
int vufq_inject_fault(VufQueue *q, VufRingFault f);

/* The status byte of the last injected fault's request: 0xff if the device
 * did not write it (or there was no request). */
int vufq_fault_status(const VufQueue *q);

/* ------------------------------------------------------------------------ */
/* virtio-blk requests                                                       */

/*
 * A request whose header, status byte and data buffer live in guest
 * memory.  The caller fills it with a vufblk_prep_*() call, submits it,
 * and after completion reads *status and (for reads) data.
 */
typedef struct VufBlkReq {
    VirtioBlkOutHdr *hdr;          /* guest memory */
    VirtioBlkSeg *dwz;          /* guest memory: discard/write-zeroes seg */
    uint8_t *status;            /* guest memory */
    uint8_t *data;              /* guest memory, data_cap bytes */
    uint64_t hdr_gpa, dwz_gpa, status_gpa, data_gpa;
    size_t data_cap;
    /* Set by vufblk_prep_*(): */
    size_t data_len;            /* bytes of data in this request */
    bool data_in;               /* the device writes the data (IN, GET_ID) */
    bool use_dwz;               /* the data is *dwz */
    /* Set by the caller: */
    unsigned data_segs;         /* split data into this many descriptors
                                 * (>= 1; default 1) */
    void *opaque;               /* anything */
} VufBlkReq;

/*
 * Allocate a request with data_cap bytes of data buffer (4096-aligned) in
 * fe's guest memory.  NULL (errp set) when the memory is exhausted.
 * Thread-safe.  Free with vufblk_req_free().
 */
VufBlkReq *vufblk_req_new(VuFrontend *fe, size_t data_cap, Error **errp);
void vufblk_req_free(VuFrontend *fe, VufBlkReq *req);

/*
 * Fill the request.  Offsets and lengths are in bytes (multiples of 512)
 * or sectors as named.  Return 0, or -EINVAL if len exceeds data_cap.  The
 * status byte is set to 0xff so that a device that never writes it shows.
 */
int vufblk_prep_read(VufBlkReq *req, uint64_t sector, size_t len);
int vufblk_prep_write(VufBlkReq *req, uint64_t sector, size_t len);
int vufblk_prep_flush(VufBlkReq *req);
int vufblk_prep_get_id(VufBlkReq *req);
int vufblk_prep_discard(VufBlkReq *req, uint64_t sector, uint32_t nsectors);
int vufblk_prep_write_zeroes(VufBlkReq *req, uint64_t sector,
                             uint32_t nsectors, bool unmap);

/*
 * Add the request's chain (header, data split in data_segs descriptors and
 * at size_max, status) to q with vufq_add() flags; the token is req.
 * Does not kick.  Returns 0 or vufq_add()'s -errno.
 */
int vufblk_submit(VufQueue *q, VufBlkReq *req, unsigned flags);

/*
 * Harvest one completed request: 1 and *req, 0 if none, -EIO as
 * vufq_get_used().
 */
int vufblk_complete(VufQueue *q, VufBlkReq **req);

/*
 * Submit req, kick, and wait for it (timeout_ns < 0: forever).  Nothing
 * else may be in flight on q.  Returns the status byte (VIRTIO_BLK_S_*, or
 * 0xff if the device did not write it), or -errno as vufblk_submit() /
 * vufq_wait().
 */
int vufblk_do(VufQueue *q, VufBlkReq *req, unsigned flags,
              int64_t timeout_ns);

/* "OK", "IOERR", "UNSUPP", "none" (0xff) or "unknown". Any thread. */
const char *vufblk_status_name(int status);

/* ------------------------------------------------------------------------ */
/* virtio-scsi requests (vu-scsi.c)                                          */

/*
 * Queues of a VUF_DEVICE_SCSI front-end (virtio 5.6.2): 0 is the control
 * queue (task management, asynchronous notification), 1 the event queue,
 * 2 + i the request queue i.
 */
#define VUFSCSI_VQ_CONTROL      VIRTIO_SCSI_VQ_CONTROL
#define VUFSCSI_VQ_EVENT        VIRTIO_SCSI_VQ_EVENT
#define VUFSCSI_VQ_REQUEST(i)   (VIRTIO_SCSI_VQ_REQUEST0 + (i))

/* Which way a command moves data. */
typedef enum VufScsiDir {
    VUFSCSI_DIR_NONE,           /* no data */
    VUFSCSI_DIR_TO_DEV,         /* data-out: WRITE, UNMAP's list, ... */
    VUFSCSI_DIR_FROM_DEV,       /* data-in: READ, INQUIRY, ... */
} VufScsiDir;

/* What vufscsi_prep() puts in fields the device must overwrite. */
#define VUFSCSI_RESPONSE_NONE   0xff
#define VUFSCSI_STATUS_NONE     0xff

/*
 * A command whose request (header + CDB), response (header + sense) and
 * data buffer live in guest memory.  The chain is laid out as a guest
 * driver does (5.6.6.1): request (readable), data-out (readable),
 * response (writable), data-in (writable).  The CDB and sense areas have
 * the sizes the device's config gave when the request was allocated (32
 * and 96 by default).
 */
typedef struct VufScsiReq {
    VirtioScsiCmdReqHdr *hdr;   /* guest memory; the CDB follows */
    uint8_t *cdb;               /* cdb_size bytes right after hdr */
    VirtioScsiCmdRespHdr *resp; /* guest memory; the sense follows */
    uint8_t *sense;             /* sense_size bytes right after resp */
    uint8_t *data;              /* guest memory, data_cap bytes */
    uint64_t hdr_gpa, resp_gpa, data_gpa;
    size_t data_cap;
    unsigned cdb_size, sense_size;
    /* Set by vufscsi_prep(): */
    size_t data_len;            /* bytes of data in this request */
    VufScsiDir dir;
    /* Set on completion (vufscsi_complete()): */
    uint32_t used_len;          /* bytes the device said it wrote */
    /* Set by the caller: */
    unsigned data_segs;         /* split data into this many descriptors
                                 * (>= 1; default 1) */
    void *opaque;               /* anything */
} VufScsiReq;

/*
 * Allocate a command with data_cap bytes of data buffer (4096-aligned) in
 * fe's guest memory, its CDB and sense areas sized after fe's virtio-scsi
 * config (defaults when there is none).  NULL (errp set) when the memory
 * is exhausted.  Thread-safe.  Free with vufscsi_req_free().
 */
VufScsiReq *vufscsi_req_new(VuFrontend *fe, size_t data_cap, Error **errp);
void vufscsi_req_free(VuFrontend *fe, VufScsiReq *req);

/*
 * Write the 8-byte virtio-scsi LUN address of target 0, LUN lun
 * (0..16383) as Linux does: 1, 0, 0x40 | lun >> 8, lun & 0xff, 0, 0, 0, 0.
 */
void vufscsi_lun_bytes(uint8_t out[VIRTIO_SCSI_LUN_BYTES], unsigned lun);

/*
 * Fill the command: LUN lun of target 0, tag, task attribute SIMPLE, the
 * CDB (cdb_len <= cdb_size bytes, the rest zeroed), data_len bytes of data
 * in direction dir (the data itself is the caller's, in req->data).  The
 * response is set to VUFSCSI_RESPONSE_NONE / VUFSCSI_STATUS_NONE and the
 * lengths to all ones, so that a device that does not write them shows.
 * Returns 0, or -EINVAL if cdb_len or data_len do not fit.
 */
int vufscsi_prep(VufScsiReq *req, unsigned lun, uint64_t tag,
                 const uint8_t *cdb, unsigned cdb_len, size_t data_len,
                 VufScsiDir dir);

/*
 * Add the command's chain to q (a request queue) with vufq_add() flags;
 * the token is req.  Data is cut into req->data_segs descriptors; more
 * data descriptors than the config's seg_max is -E2BIG.  Does not kick.
 * Returns 0 or vufq_add()'s -errno.
 */
int vufscsi_submit(VufQueue *q, VufScsiReq *req, unsigned flags);

/* Harvest one completed command: 1 and *req (used_len set), 0 if none,
 * -EIO as vufq_get_used(). */
int vufscsi_complete(VufQueue *q, VufScsiReq **req);

/*
 * Submit req, kick, wait for it (timeout_ns < 0: forever).  Nothing else
 * may be in flight on q.  Returns the response (VIRTIO_SCSI_S_*, or
 * VUFSCSI_RESPONSE_NONE if the device did not write it); the SAM status
 * is req->resp->status.  Or -errno as vufscsi_submit() / vufq_wait().
 */
int vufscsi_do(VufQueue *q, VufScsiReq *req, unsigned flags,
               int64_t timeout_ns);

/*
 * The sense key, ASC and ASCQ of the sense data in req (fixed format 0x70
 * and 0x71, or descriptor format 0x72 and 0x73).  False if there is no
 * sense data (sense_len 0) or it is not in either format.
 */
bool vufscsi_sense(const VufScsiReq *req, uint8_t *key, uint8_t *asc,
                   uint8_t *ascq);

/* Names, for reports ("OK", "BAD_TARGET"..., "GOOD", "CHECK_CONDITION"...,
 * "ILLEGAL_REQUEST"...); "none" for the NONE values, else "unknown".
 * Any thread. */
const char *vufscsi_response_name(int response);
const char *vufscsi_status_name(int status);
const char *vufscsi_sense_key_name(int key);

/*
 * A control queue request (5.6.6.2): task management or asynchronous
 * notification query / subscribe, and its response, in guest memory.
 */
typedef struct VufScsiCtrl {
    union {
        VirtioScsiCtrlTmfReq *tmf;
        VirtioScsiCtrlAnReq *an;
        void *raw;
    } req;
    union {
        VirtioScsiCtrlTmfResp *tmf;
        VirtioScsiCtrlAnResp *an;
        void *raw;
    } resp;
    uint64_t req_gpa, resp_gpa;
    size_t req_len, resp_len;   /* set by the prep functions */
    uint32_t used_len;          /* set on completion */
    void *opaque;
} VufScsiCtrl;

/* Allocate / free a control request in fe's guest memory (thread-safe). */
VufScsiCtrl *vufscsi_ctrl_new(VuFrontend *fe, Error **errp);
void vufscsi_ctrl_free(VuFrontend *fe, VufScsiCtrl *ctrl);

/* Task management function subtype (VIRTIO_SCSI_T_TMF_*) on LUN lun, for
 * the task tag (ABORT TASK, QUERY TASK).  The response byte is set to
 * VUFSCSI_RESPONSE_NONE. */
void vufscsi_prep_tmf(VufScsiCtrl *ctrl, uint32_t subtype, unsigned lun,
                      uint64_t tag);
/* VIRTIO_SCSI_T_AN_QUERY or _SUBSCRIBE for the event classes in mask. */
void vufscsi_prep_an(VufScsiCtrl *ctrl, uint32_t type, unsigned lun,
                     uint32_t event_mask);

/*
 * Submit on q (the control queue), kick, wait.  Nothing else may be in
 * flight on q.  Returns the response byte (VIRTIO_SCSI_S_*, or
 * VUFSCSI_RESPONSE_NONE), or -errno.
 */
int vufscsi_ctrl_do(VufQueue *q, VufScsiCtrl *ctrl, unsigned flags,
                    int64_t timeout_ns);

/* Name of a TMF subtype ("abort-task", "logical-unit-reset", ...) and the
 * reverse (-1 if unknown).  Any thread. */
const char *vufscsi_tmf_name(uint32_t subtype);
int vufscsi_tmf_by_name(const char *name);

/*
 * Event buffers (5.6.6.3): the driver keeps device-writable buffers of
 * event_info_size bytes in the event queue; the device fills one per event.
 */
typedef struct VufScsiEventBuf {
    VirtioScsiEvent *ev;        /* guest memory */
    uint64_t gpa;
    size_t len;
    uint32_t used_len;          /* set on completion */
} VufScsiEventBuf;

VufScsiEventBuf *vufscsi_event_new(VuFrontend *fe, Error **errp);
void vufscsi_event_free(VuFrontend *fe, VufScsiEventBuf *buf);
/* Put buf in q (the event queue) and kick if the device wants it.
 * 0 or -errno. */
int vufscsi_event_post(VufQueue *q, VufScsiEventBuf *buf, unsigned flags);
/* Harvest one filled event buffer without waiting: 1 and *buf, 0 if none,
 * -EIO. */
int vufscsi_event_complete(VufQueue *q, VufScsiEventBuf **buf);

#endif

/*
 * Internals shared by the vu-frontend source files (not for users: they go
 * through vu-frontend.h): the structures behind VuFrontend and VufQueue,
 * and the functions one part of the library offers the others.
 *
 *   vu-session.c       session: options, lifecycle, negotiation, queues
 *   vu-guest-mem.c     guest memory and its allocator
 *   vu-msg.c           vhost-user messages: transport, request/reply, raw
 *   vu-backend-chan.c  the back-end channel (SLAVE_REQ)
 *   vu-inflight.c      the inflight region, resuming after a crash
 *   vu-dirty-log.c     dirty page logging, the pages expected dirty
 *   vu-features.c      feature bit names
 *   vu-virtqueue.c     the split-ring driver
 *   vu-faults.c        malformed rings, for back-end tests
 *   vu-blk.c           virtio-blk requests
 *   vu-scsi.c          virtio-scsi commands, control requests, events
 */
#ifndef SPINDLE_TOOLS_VU_FRONTEND_INT_H
#define SPINDLE_TOOLS_VU_FRONTEND_INT_H

#include <pthread.h>
#include <unistd.h>

#include <glib.h>

#include "vu-frontend.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "vu-frontend lays out little-endian virtio structures natively"
#endif

#define VUF_CACHELINE 64

/* Largest CDB and sense areas a VufScsiReq has room for. */
#define VUFSCSI_CDB_MAX     256
#define VUFSCSI_SENSE_MAX   256

/* Counters written by the queue's thread only, read by anyone: each update
 * is a relaxed load and store (no read-modify-write needed). */
typedef struct VufStatCounters {
    _Atomic uint64_t added;
    _Atomic uint64_t completed;
    _Atomic uint64_t kicks;
    _Atomic uint64_t kicks_avoided;
    _Atomic uint64_t interrupts;
    _Atomic uint64_t wakeups;
    _Atomic uint64_t spins;
} VufStatCounters;

struct VufQueue {
    /* Fixed at vuf_new(). */
    VuFrontend *fe;
    unsigned index;
    unsigned num;
    unsigned indirect_max;
    VRingDesc *desc;
    VRingAvail *avail;
    VRingUsed *used;
    VRingDesc *indirect;        /* num tables of indirect_max entries */
    _Atomic uint16_t *used_event;   /* &avail->ring[num] */
    _Atomic uint16_t *avail_event;  /* &used->ring[num] */
    uint64_t desc_gpa, avail_gpa, used_gpa, indirect_gpa;
    size_t desc_bytes, avail_bytes, used_bytes;
    /* Private shadow of the chain links and the free list: never read back
     * from shared memory. */
    uint16_t *next;
    uint16_t *chain_len;        /* descriptors used by the chain at head */
    void **tokens;              /* non-NULL while the head is in flight */
    /* What the last chain at each head was, kept after it completed, so
     * that a used element for a head not in flight can be named (a
     * replay after vuf_resume()): its token and its avail index. */
    void **retired;
    uint16_t *published_at;
    void *fault_scratch;        /* guest buffer for vufq_inject_fault() */
    uint64_t fault_scratch_gpa;

    /* Dirty logging (vu-dirty-log.c): while the front-end logs, a private
     * copy of each chain's segments, indexed as the descriptors are (the
     * num direct ones, then indirect_max per head), and per head the
     * chain's segment count (| LOG_CHAIN_INDIRECT), 0 for a chain added
     * before logging started.  NULL when not logging.  Set by the control
     * thread while the queue is idle. */
    VufSeg *log_segs;
    uint32_t *log_nsegs;

    /* Per session, set by the control thread while the queue is idle. */
    int kick_fd;
    int call_fd;
    int err_fd;                 /* the device signals a broken ring */
    bool ready;
    bool event_idx;
    bool indirect_ok;

    /* Data path state: the queue's thread. */
    VufCompletion mode;
    bool broken;
    bool bad_used;              /* broken by a used id not in flight */
    uint16_t bad_id;            /* ... that id */
    bool error_signalled;       /* err_fd was seen signalled this session */
    VufqOtherDone *other_done;  /* vufq_do_one(): others' completions */
    void *other_opaque;
    uint16_t avail_idx;         /* shadow of avail->idx */
    uint16_t kicked_idx;        /* avail_idx at the last kick decision */
    uint16_t last_used;         /* next used ring slot to harvest */
    uint16_t used_event_shadow; /* last value stored in used_event */
    uint16_t free_head;
    unsigned num_free;
    unsigned in_flight;

    VufStatCounters stats __attribute__((aligned(VUF_CACHELINE)));
};

/* One free extent of guest memory. */
typedef struct VufExtent {
    uint64_t start;
    uint64_t len;
} VufExtent;

struct VuFrontend {
    VufOptions opts;
    pthread_t control_thread;   /* the thread that called vuf_new() */

    /* Guest memory. */
    int memfd;
    uint8_t *mem;
    uint64_t mem_size;
    GMutex mem_lock;            /* protects free_extents, allocs, mem_free */
    GArray *free_extents;       /* VufExtent, sorted by start, coalesced */
    GHashTable *allocs;         /* start -> len of allocated blocks */
    uint64_t mem_free;

    /* Session. */
    int sock;
    uint64_t features_offered;
    uint64_t features;
    uint64_t protocol_features_offered;
    uint64_t protocol_features;
    uint64_t queue_num_max;
    uint64_t max_mem_slots;
    bool have_blk_config;
    VirtioBlkConfig blk_config;
    bool have_scsi_config;
    VirtioScsiConfig scsi_config;
    /* The back-end channel (SLAVE_REQ): our end of the socket pair whose
     * other end went to the back-end with SET_SLAVE_REQ_FD, or -1. */
    int backend_fd;
    uint64_t config_changes;        /* CONFIG_CHANGE_MSGs received */
    uint64_t config_changes_taken;  /* ... of which vuf_wait_config_change()
                                     * returned */

    unsigned num_queues;
    VufQueue **queues;

    /* Inflight I/O tracking (vu-inflight.c): the region GET_INFLIGHT_FD
     * gave, kept for as long as the rings, or -1 / NULL. */
    int inflight_fd;
    void *inflight_mem;
    VhostUserInflight inflight;     /* what SET_INFLIGHT_FD sends */
    unsigned inflight_gets, inflight_sets;
    bool resuming;                  /* inside vuf_resume() */
    unsigned resumes;
    unsigned resume_retries;        /* sessions dropped while resuming */

    /* Dirty logging (vu-dirty-log.c): the log last sent with
     * SET_LOG_BASE (fd and mapping, or -1 / NULL), kept until the next
     * one so that it can be read after logging stopped; the pages
     * tracked chains were expected to dirty (log_words words, set by the
     * queues' threads with atomic ORs, or NULL). */
    int log_fd;
    _Atomic uint64_t *log_mem;
    uint64_t log_size;
    bool logging;
    unsigned log_bases;             /* SET_LOG_BASE answered this session */
    uint64_t log_base_reply;        /* ... the last answer */
    _Atomic uint64_t *log_expected;
};

/* Control-path functions run in the thread that created the front-end. */
static inline void vuf_assert_control_thread(const VuFrontend *fe)
{
    g_assert(pthread_equal(pthread_self(), fe->control_thread));
}

static inline void vuf_stat_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

static inline bool vuf_is_power_of_2(uint64_t x)
{
    return x && !(x & (x - 1));
}

static inline bool vuf_has_protocol_feature(const VuFrontend *fe,
                                            unsigned bit)
{
    return fe->protocol_features & VUF_BIT(bit);
}

/* Close *fd if it is open and mark it closed (-1). */
static inline void vuf_close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/*
 * names[i] if i is inside the table and has a name there, else dflt.  For
 * the name tables indexed by a protocol value (requests, responses, ...).
 */
static inline const char *vuf_table_name(const char *const *names, size_t n,
                                         int64_t i, const char *dflt)
{
    return i >= 0 && (uint64_t)i < n && names[i] ? names[i] : dflt;
}

/* vu-guest-mem.c */
/* Create and map fe->mem_size bytes of guest memory, all of it free.
 * False with errp set; vuf_guest_mem_destroy() cleans up either way. */
bool vuf_guest_mem_create(VuFrontend *fe, Error **errp);
void vuf_guest_mem_destroy(VuFrontend *fe);
/*
 * The guest memory of a request (vu-blk, vu-scsi): a block of small_len
 * bytes, small_align-aligned, for its headers (returned, guest address in
 * *small_gpa) and, unless data_cap is 0, a 4096-aligned data buffer of
 * data_cap bytes (*data, *data_gpa).  NULL when the memory is exhausted:
 * nothing stays allocated and errp says "cannot allocate <what> with N
 * data bytes" and how much memory is left.  Thread-safe.
 */
uint8_t *vuf_req_mem_alloc(VuFrontend *fe, size_t small_len,
                           size_t small_align, uint64_t *small_gpa,
                           size_t data_cap, uint8_t **data,
                           uint64_t *data_gpa, const char *what,
                           Error **errp);

/* Free what vuf_req_mem_alloc() returned (small, and data if not NULL). */
void vuf_req_mem_free(VuFrontend *fe, void *small, void *data);

/* vu-msg.c (control thread) */
/* CLOCK_MONOTONIC in milliseconds. */
int64_t vuf_now_ms(void);
/* "GET_FEATURES", ... or "unknown request". */
const char *vuf_request_name(uint32_t request);
/*
 * Wait until fd is readable or deadline_ms passes.  Returns 1 if
 * readable (or hung up: the read will tell), 0 on timeout, -errno.
 */
int vuf_wait_readable(int fd, int64_t deadline_ms);
/*
 * Read exactly len bytes before deadline_ms (fds that come along are
 * closed).  Returns 1 when done, 0 if the peer closed before the first
 * byte (only reported when allow_eof), -errno otherwise (-ETIMEDOUT,
 * -ECONNRESET for a close in the middle).
 */
int vuf_read_exact(int fd, void *buf, size_t len, int64_t deadline_ms,
                   bool allow_eof);
/*
 * Read the reply to request into buf: exactly want bytes, or any size up to
 * want if *got is not NULL.  Errors name the request.
 */
bool vuf_read_reply(VuFrontend *fe, uint32_t request, void *buf,
                    size_t want, size_t *got, Error **errp);
/*
 * vuf_read_reply() of exactly want bytes, for a reply that may carry an
 * fd: *fd gets the first one that came (the caller's to close), or -1.
 * On failure *fd is -1 (anything received is closed).
 */
bool vuf_read_reply_fd(VuFrontend *fe, uint32_t request, void *buf,
                       size_t want, int *fd, Error **errp);
/* A request answered with a u64 (GET_FEATURES and friends). */
bool vuf_request_u64(VuFrontend *fe, uint32_t request, uint64_t *value,
                     Error **errp);
/*
 * A request without a reply of its own.  With REPLY_ACK, ask for the
 * acknowledgement and fail if it is not zero.
 */
bool vuf_request_set(VuFrontend *fe, uint32_t request, const void *payload,
                     size_t size, const int *fds, size_t nfds, Error **errp);
/* vuf_request_set() with a u64 payload, or a vring state. */
bool vuf_request_u64_set(VuFrontend *fe, uint32_t request, uint64_t value,
                         const int *fds, size_t nfds, Error **errp);
bool vuf_request_vring_state(VuFrontend *fe, uint32_t request,
                             unsigned index, unsigned num, Error **errp);

/* vu-session.c (control thread) */
/* vuf_connect_socket(), retrying until deadline_ms (vuf_now_ms()). */
bool vuf_connect_socket_until(VuFrontend *fe, int64_t deadline_ms,
                              Error **errp);
/* vuf_setup_queues(); with resume, on the rings as they are, each with
 * SET_VRING_BASE = its used index (vuf_resume()). */
bool vuf_setup_queues_as(VuFrontend *fe, bool resume, Error **errp);

/* vu-inflight.c (control thread) */
/*
 * The inflight step of vuf_negotiate(), when INFLIGHT_SHMFD was
 * negotiated: GET_INFLIGHT_FD unless a region is kept for these rings,
 * then SET_INFLIGHT_FD with it (if the back-end gave one).
 */
bool vuf_inflight_negotiate(VuFrontend *fe, Error **errp);
/* Unmap and close the region, if any (vuf_free()). */
void vuf_inflight_free(VuFrontend *fe);

/* vu-dirty-log.c */
/* Bit of VufQueue.log_nsegs: the chain is in an indirect table. */
#define LOG_CHAIN_INDIRECT      (1u << 31)
/* Keep a copy of the n segments of the chain just built at head (the
 * queue's thread, while logging: q->log_segs set). */
void vufq_log_note_chain(VufQueue *q, uint16_t head, const VufSeg *segs,
                         unsigned n, bool indirect);
/* The chain at head completed in used ring slot used_slot with used
 * length len: mark what the device must have written as expected dirty
 * (the queue's thread, while logging, before the chain is freed). */
void vufq_log_expect_chain(VufQueue *q, uint16_t head, uint16_t used_slot,
                           uint32_t len);
/* The session ended: logging is off (vuf_disconnect()). */
void vuf_log_session_end(VuFrontend *fe);
/* Unmap and close the log, free the bitmaps (vuf_free()). */
void vuf_log_free(VuFrontend *fe);

/* vu-session.c: SET_VRING_ADDR for q, with VHOST_VRING_F_LOG and the used
 * ring's guest address as log_guest_addr when log (control thread). */
bool vuf_set_vring_addr(VuFrontend *fe, VufQueue *q, bool log, Error **errp);

/* vu-backend-chan.c (control thread) */
/* Make the socket pair and send the back-end its end (SET_SLAVE_REQ_FD). */
bool vuf_backend_channel_open(VuFrontend *fe, Error **errp);
/* Close our end, if open. */
void vuf_backend_channel_close(VuFrontend *fe);

/* vu-features.c */
/* "VERSION_1, RING_EVENT_IDX, bit50" for the bits of mask ("none" if
 * there is none), for error messages.  Caller frees. */
char *vuf_feature_list(VufDeviceType dev, uint64_t mask, bool protocol);

/* vu-virtqueue.c */
/* Carve queue i's rings out of fe's memory.  NULL with errp on failure. */
VufQueue *vufq_create(VuFrontend *fe, unsigned index, Error **errp);
void vufq_destroy(VufQueue *q);
/* Reset the rings and state for a new session: zero the rings, rebuild the
 * free list, create the eventfds, apply the completion mode. */
bool vufq_session_start(VufQueue *q, bool event_idx, bool indirect,
                        Error **errp);
/* Close the eventfds; the queue is no longer ready. */
void vufq_session_end(VufQueue *q);
/*
 * Start a new session on the rings as they are (vuf_resume()): the
 * descriptors, both rings, the chains in flight and our indexes stay;
 * new eventfds, the completion mode applied again.  The ring features
 * must be the previous session's (the caller checks).
 */
bool vufq_session_resume(VufQueue *q, Error **errp);
/* used->idx as the device last published it (acquire). */
uint16_t vufq_used_idx(VufQueue *q);
/*
 * Build a chain as vufq_add() does, but leave it unpublished: the caller
 * may alter the descriptors, then call vufq_publish().  Returns the head or
 * -errno.
 */
int vufq_build_chain(VufQueue *q, const VufSeg *segs, unsigned n,
                     unsigned flags, void *token);
/* Put head in the available ring and publish it. */
void vufq_publish(VufQueue *q, uint16_t head);
/* Write the kick eventfd regardless of what the device asked. */
int vufq_kick_force(VufQueue *q);
/*
 * Append the len data bytes at gpa to segs[*n] as a driver lays them out:
 * cut into pieces parts (whole 512-byte units where possible; 0 counts as
 * 1), and each part further into descriptors of at most limit bytes.
 * -E2BIG if that takes segs past max - 1 entries (one stays for the
 * descriptor after the data); else 0.
 */
int vufq_add_data_segs(VufSeg *segs, unsigned *n, unsigned max, uint64_t gpa,
                       size_t len, unsigned pieces, uint32_t limit,
                       bool device_writes);
/*
 * The rest of a synchronous request whose chain (token) was just added,
 * added being what adding it returned: a negative errno there is returned
 * as is.  Else kick q, wait up to timeout_ns and harvest the one
 * completion, which must be token's: -EIO if it is another's (unless a
 * handler takes those: vufq_set_other_done()) or none came.  0 with
 * *used_len the length the device wrote (if used_len), or -errno from
 * vufq_kick/wait/get_used.  The queue's thread.
 */
int vufq_do_one(VufQueue *q, int added, void *token, int64_t timeout_ns,
                uint32_t *used_len);

#endif

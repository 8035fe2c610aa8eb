/*
 * vu-dirty-log: dirty page logging as a migrating QEMU drives it
 * (VHOST_USER_PROTOCOL_F_LOG_SHMFD, VHOST_F_LOG_ALL), and what the
 * front-end knows the device must have written meanwhile
 * (vu-dirty-log.c).
 */
#ifndef SPINDLE_TOOLS_VU_DIRTY_LOG_H
#define SPINDLE_TOOLS_VU_DIRTY_LOG_H

#include "vu-types.h"

/*
 * One log bit covers this many bytes of guest physical memory.  The wire
 * format (VHOST_F_LOG_ALL, VHOST_VRING_F_LOG, SET_LOG_BASE's VhostUserLog)
 * is hw/virtio/vhost-user-wire.h's.
 */
#define VUF_LOG_PAGE            4096u

typedef struct VufLogInfo {
    bool negotiated;            /* LOG_SHMFD was negotiated */
    bool log_all_offered;       /* the back-end offers VHOST_F_LOG_ALL */
    bool logging;               /* between vuf_log_start() and _stop() */
    uint64_t log_size;          /* bytes of the last log sent, 0: none */
    uint64_t log_size_needed;   /* bytes that cover the guest memory */
    uint64_t pages;             /* guest pages (bits of a bitmap) */
    unsigned set_log_base;      /* SET_LOG_BASE answered this session */
    uint64_t log_base_reply;    /* ... the last answer (0 per the spec) */
} VufLogInfo;

/* What the front-end knows of dirty logging.  Control thread. */
void vuf_log_info(const VuFrontend *fe, VufLogInfo *out);

/* Words of a page bitmap (bit p of word p / 64 = page p) that covers
 * the guest memory.  Any thread. */
size_t vuf_log_words(const VuFrontend *fe);

/*
 * Start logging on the running rings as a migrating QEMU does: create a
 * log (a memfd of log_size bytes, 0: vuf_log_info()'s log_size_needed;
 * else a multiple of 8, for tests of a back-end's checks), hand it over
 * with SET_LOG_BASE and wait for the back-end's reply (same request,
 * a u64: 0 per the spec, kept in VufLogInfo.log_base_reply); then
 * SET_FEATURES with VHOST_F_LOG_ALL added and, on every queue set up,
 * SET_VRING_ADDR with the same addresses, VHOST_VRING_F_LOG and
 * log_guest_addr = the used ring's guest address; each waited for
 * (REPLY_ACK, or a GET_FEATURES round trip).  From then on every chain
 * added is tracked: when it completes, the first used-length bytes of
 * its device-writable buffers and its used ring entry count as expected
 * dirty (vuf_log_take_expected()).
 *
 * Fails with errp set when not connected, already logging, LOG_SHMFD was
 * not negotiated or LOG_ALL not offered, the log cannot be created, the
 * back-end does not answer SET_LOG_BASE (it hangs up on a log it
 * refuses), or a later step fails.  Control thread; no queue in use by
 * another thread.
 */
bool vuf_log_start(VuFrontend *fe, uint64_t log_size, Error **errp);

/*
 * vuf_log_start() without the tracking: the front-end keeps no copy of
 * the chains and expects nothing (vuf_log_take_expected() stays empty),
 * as a real QEMU, which only reads and clears the log.  For measuring
 * what logging costs the back-end (spindle-bench --dirty-log).
 */
bool vuf_log_start_untracked(VuFrontend *fe, uint64_t log_size,
                             Error **errp);

/*
 * Stop logging likewise: SET_FEATURES without VHOST_F_LOG_ALL, then
 * SET_VRING_ADDR without VHOST_VRING_F_LOG on every queue set up, each
 * waited for; chains are no longer tracked.  The log stays mapped, to be
 * read once more.  Fails with errp set when not logging or a step fails.
 * Control thread; no queue in use by another thread.
 */
bool vuf_log_stop(VuFrontend *fe, Error **errp);

/*
 * Read and clear the log (an atomic exchange per word, as QEMU does while
 * the back-end goes on writing it) into bits (vuf_log_words() words);
 * pages past the log's end read as clean.  Returns false (bits zeroed)
 * if no log was ever created.  Control thread.
 */
bool vuf_log_take_dirty(VuFrontend *fe, uint64_t *bits);

/*
 * Take and clear the pages tracked chains were expected to dirty since
 * vuf_log_start() or the last call, into bits (vuf_log_words() words).
 * Control thread, with no queue in use by another thread.
 */
void vuf_log_take_expected(VuFrontend *fe, uint64_t *bits);

#endif

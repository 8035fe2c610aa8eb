/*
 * vhost-user message decoding and validation.
 *
 * Theory of operation
 * -------------------
 * vhost-user-socket.c reads a message whole and checks its framing (the
 * version, the reply flag, the largest payload).  What a request must
 * carry is described here, once, in vu_requests[], indexed by the request
 * code: its name for messages, whether its reply is its own payload, and
 * two rules, one for the payload size and one for the number of fds.
 * vu_msg_validate() applies them before any handler runs, so a handler
 * (vhost-user-handlers.c) reads a payload whose size it knows and fds that
 * are there, and checks only what depends on the server's state (a ring
 * index against num_queues, values against the negotiated features).
 *
 * Most requests have a fixed payload and no fds.  The others:
 *   - SET_MEM_TABLE: a region count, then that many regions (QEMU) or a
 *     whole table with unused slots (other front-ends), and one fd per
 *     region;
 *   - GET_CONFIG, SET_CONFIG: a 12-byte header, then as many bytes of
 *     config space as the header says, at most VHOST_USER_MAX_CONFIG_SIZE;
 *   - SET_VRING_KICK/CALL/ERR: a u64 with the ring index and a "no fd"
 *     flag, and one fd unless that flag is set;
 *   - ADD_MEM_REG, SET_SLAVE_REQ_FD and SET_INFLIGHT_FD carry one fd,
 *     REM_MEM_REG carries none (one is tolerated from old front-ends and
 *     closed unused);
 *   - SET_LOG_BASE carries a log description and one fd (the log), and
 *     has a reply of its own; SET_LOG_FD carries one fd and a payload
 *     that is not looked at (the specification gives it none);
 * A request without an entry is refused as unsupported.
 *
 * The checks run in a fixed order (fds dropped on receipt, payload size,
 * the payload's own fields, the fd count) so that one malformed message
 * always gets the same reason.  Nothing here keeps state or touches an
 * fd: any thread.
 */
#include <inttypes.h>
#include <glib.h>

#include "hw/virtio/vhost-user-protocol.h"

/* How the payload size of a request is checked. */
typedef enum VuSizeRule {
    VU_SIZE_EXACT,        /* exactly .size bytes */
    VU_SIZE_MEM_TABLE,    /* SET_MEM_TABLE: by its region count */
    VU_SIZE_CONFIG,       /* GET/SET_CONFIG: by the size in its header */
    VU_SIZE_ANY,          /* not checked */
} VuSizeRule;

/* How many fds a request carries. */
typedef enum VuFdsRule {
    VU_FDS_NONE,
    VU_FDS_ONE,
    VU_FDS_AT_MOST_ONE,   /* REM_MEM_REG */
    VU_FDS_PER_REGION,    /* SET_MEM_TABLE */
    VU_FDS_VRING,         /* one unless VHOST_USER_VRING_NOFD_MASK */
    VU_FDS_ANY,           /* not checked */
} VuFdsRule;

typedef struct VuRequestInfo {
    const char *name;     /* NULL: no such request (unsupported) */
    bool has_reply;       /* the reply is its own payload */
    VuSizeRule size_rule;
    uint32_t size;        /* for VU_SIZE_EXACT */
    VuFdsRule fds_rule;
} VuRequestInfo;

/* Payload sizes, short enough for one table row each. */
#define VU_U64 sizeof(uint64_t)
#define VU_STATE sizeof(VhostUserVringState)
#define VU_ADDR sizeof(VhostUserVringAddr)
#define VU_MEMREG sizeof(VhostUserMemRegMsg)
#define VU_INFLIGHT sizeof(VhostUserInflight)
#define VU_LOG sizeof(VhostUserLog)

static const VuRequestInfo vu_requests[] = {
    [VHOST_USER_GET_FEATURES] =
        { "GET_FEATURES", true, VU_SIZE_EXACT, 0, VU_FDS_NONE },
    [VHOST_USER_SET_FEATURES] =
        { "SET_FEATURES", false, VU_SIZE_EXACT, VU_U64, VU_FDS_NONE },
    [VHOST_USER_SET_OWNER] =
        { "SET_OWNER", false, VU_SIZE_EXACT, 0, VU_FDS_NONE },
    [VHOST_USER_RESET_OWNER] =
        { "RESET_OWNER", false, VU_SIZE_EXACT, 0, VU_FDS_NONE },
    [VHOST_USER_SET_MEM_TABLE] =
        { "SET_MEM_TABLE", false, VU_SIZE_MEM_TABLE, 0, VU_FDS_PER_REGION },
    [VHOST_USER_SET_LOG_BASE] =
        { "SET_LOG_BASE", true, VU_SIZE_EXACT, VU_LOG, VU_FDS_ONE },
    [VHOST_USER_SET_LOG_FD] =
        { "SET_LOG_FD", false, VU_SIZE_ANY, 0, VU_FDS_ONE },
    [VHOST_USER_SET_VRING_NUM] =
        { "SET_VRING_NUM", false, VU_SIZE_EXACT, VU_STATE, VU_FDS_NONE },
    [VHOST_USER_SET_VRING_ADDR] =
        { "SET_VRING_ADDR", false, VU_SIZE_EXACT, VU_ADDR, VU_FDS_NONE },
    [VHOST_USER_SET_VRING_BASE] =
        { "SET_VRING_BASE", false, VU_SIZE_EXACT, VU_STATE, VU_FDS_NONE },
    [VHOST_USER_GET_VRING_BASE] =
        { "GET_VRING_BASE", true, VU_SIZE_EXACT, VU_STATE, VU_FDS_NONE },
    [VHOST_USER_SET_VRING_KICK] =
        { "SET_VRING_KICK", false, VU_SIZE_EXACT, VU_U64, VU_FDS_VRING },
    [VHOST_USER_SET_VRING_CALL] =
        { "SET_VRING_CALL", false, VU_SIZE_EXACT, VU_U64, VU_FDS_VRING },
    [VHOST_USER_SET_VRING_ERR] =
        { "SET_VRING_ERR", false, VU_SIZE_EXACT, VU_U64, VU_FDS_VRING },
    [VHOST_USER_GET_PROTOCOL_FEATURES] =
        { "GET_PROTOCOL_FEATURES", true, VU_SIZE_EXACT, 0, VU_FDS_NONE },
    [VHOST_USER_SET_PROTOCOL_FEATURES] =
        { "SET_PROTOCOL_FEATURES", false, VU_SIZE_EXACT, VU_U64, VU_FDS_NONE },
    [VHOST_USER_GET_QUEUE_NUM] =
        { "GET_QUEUE_NUM", true, VU_SIZE_EXACT, 0, VU_FDS_NONE },
    [VHOST_USER_SET_VRING_ENABLE] =
        { "SET_VRING_ENABLE", false, VU_SIZE_EXACT, VU_STATE, VU_FDS_NONE },
    [VHOST_USER_SET_SLAVE_REQ_FD] =
        { "SET_SLAVE_REQ_FD", false, VU_SIZE_EXACT, 0, VU_FDS_ONE },
    [VHOST_USER_GET_CONFIG] =
        { "GET_CONFIG", true, VU_SIZE_CONFIG, 0, VU_FDS_NONE },
    [VHOST_USER_SET_CONFIG] =
        { "SET_CONFIG", false, VU_SIZE_CONFIG, 0, VU_FDS_NONE },
    [VHOST_USER_GET_INFLIGHT_FD] =
        { "GET_INFLIGHT_FD", true, VU_SIZE_EXACT, VU_INFLIGHT, VU_FDS_NONE },
    [VHOST_USER_SET_INFLIGHT_FD] =
        { "SET_INFLIGHT_FD", false, VU_SIZE_EXACT, VU_INFLIGHT, VU_FDS_ONE },
    [VHOST_USER_RESET_DEVICE] =
        { "RESET_DEVICE", false, VU_SIZE_EXACT, 0, VU_FDS_NONE },
    [VHOST_USER_GET_MAX_MEM_SLOTS] =
        { "GET_MAX_MEM_SLOTS", true, VU_SIZE_EXACT, 0, VU_FDS_NONE },
    [VHOST_USER_ADD_MEM_REG] =
        { "ADD_MEM_REG", false, VU_SIZE_EXACT, VU_MEMREG, VU_FDS_ONE },
    [VHOST_USER_REM_MEM_REG] =
        { "REM_MEM_REG", false, VU_SIZE_EXACT, VU_MEMREG, VU_FDS_AT_MOST_ONE },
};

/* The entry of req, or NULL if the server does not know it. */
static const VuRequestInfo *vu_request_info(uint32_t req)
{
    if (req >= G_N_ELEMENTS(vu_requests) || !vu_requests[req].name) {
        return NULL;
    }
    return &vu_requests[req];
}

const char *vu_request_name(uint32_t req)
{
    const VuRequestInfo *info = vu_request_info(req);

    return info ? info->name : NULL;
}

bool vu_request_has_reply(uint32_t req)
{
    const VuRequestInfo *info = vu_request_info(req);

    return info && info->has_reply;
}

static bool vu_check_size(const VuMsg *msg, uint32_t size, char *why,
                          size_t why_len)
{
    if (msg->hdr.size != size) {
        g_snprintf(why, why_len, "%s with a payload of %" PRIu32
                   " bytes, expected %" PRIu32,
                   vu_request_name(msg->hdr.request), msg->hdr.size, size);
        return false;
    }
    return true;
}

static bool vu_check_nfds(const VuMsg *msg, unsigned nfds, char *why,
                          size_t why_len)
{
    if (msg->nfds != nfds) {
        g_snprintf(why, why_len, "%s with %u file descriptors, expected %u",
                   vu_request_name(msg->hdr.request), msg->nfds, nfds);
        return false;
    }
    return true;
}

/* SET_MEM_TABLE: the region count, and a payload that fits it. */
static bool vu_check_mem_table(const VuMsg *msg, char *why, size_t why_len)
{
    const uint32_t hdr_size = offsetof(VhostUserMemory, regions);
    const uint32_t region_size = sizeof(VhostUserMemRegion);
    uint32_t n;

    if (msg->hdr.size < hdr_size) {
        g_snprintf(why, why_len, "SET_MEM_TABLE with a payload of %" PRIu32
                   " bytes, too short", msg->hdr.size);
        return false;
    }
    n = msg->payload.memory.nregions;
    if (n == 0 || n > VHOST_USER_MEM_TABLE_MAX_REGIONS) {
        g_snprintf(why, why_len, "SET_MEM_TABLE with %" PRIu32 " regions, "
                   "expected 1 to %u", n, VHOST_USER_MEM_TABLE_MAX_REGIONS);
        return false;
    }
    /*
     * QEMU sends the regions it fills; other front-ends send the whole
     * fixed-size table with unused slots.  Both are fine.
     */
    if (msg->hdr.size != hdr_size + n * region_size &&
        msg->hdr.size != hdr_size +
                         VHOST_USER_MEM_TABLE_MAX_REGIONS * region_size) {
        g_snprintf(why, why_len, "SET_MEM_TABLE with %" PRIu32 " regions "
                   "and a payload of %" PRIu32 " bytes", n, msg->hdr.size);
        return false;
    }
    return true;
}

/* GET_CONFIG/SET_CONFIG: the header, and as many bytes as it says. */
static bool vu_check_config(const VuMsg *msg, char *why, size_t why_len)
{
    const VhostUserConfig *c = &msg->payload.config;

    if (msg->hdr.size < VHOST_USER_CONFIG_HDR_SIZE) {
        g_snprintf(why, why_len, "%s with a payload of %" PRIu32
                   " bytes, too short", vu_request_name(msg->hdr.request),
                   msg->hdr.size);
        return false;
    }
    if (c->size > VHOST_USER_MAX_CONFIG_SIZE) {
        g_snprintf(why, why_len, "%s of %" PRIu32 " bytes, at most %u",
                   vu_request_name(msg->hdr.request), c->size,
                   VHOST_USER_MAX_CONFIG_SIZE);
        return false;
    }
    return vu_check_size(msg, VHOST_USER_CONFIG_HDR_SIZE + c->size, why,
                         why_len);
}

static bool vu_check_payload(const VuMsg *msg, const VuRequestInfo *info,
                             char *why, size_t why_len)
{
    switch (info->size_rule) {
    case VU_SIZE_EXACT:
        return vu_check_size(msg, info->size, why, why_len);
    case VU_SIZE_MEM_TABLE:
        return vu_check_mem_table(msg, why, why_len);
    case VU_SIZE_CONFIG:
        return vu_check_config(msg, why, why_len);
    case VU_SIZE_ANY:
        return true;
    }
    g_assert_not_reached();
}

/* SET_VRING_KICK/CALL/ERR: only the index and the "no fd" flag. */
static bool vu_check_vring_fd_payload(const VuMsg *msg, char *why,
                                      size_t why_len)
{
    uint64_t val = msg->payload.u64;

    if (val & ~(uint64_t)(VHOST_USER_VRING_INDEX_MASK |
                          VHOST_USER_VRING_NOFD_MASK)) {
        g_snprintf(why, why_len, "%s with unknown bits in 0x%" PRIx64,
                   vu_request_name(msg->hdr.request), val);
        return false;
    }
    return true;
}

static bool vu_check_fds(const VuMsg *msg, const VuRequestInfo *info,
                         char *why, size_t why_len)
{
    switch (info->fds_rule) {
    case VU_FDS_NONE:
        return vu_check_nfds(msg, 0, why, why_len);
    case VU_FDS_ONE:
        return vu_check_nfds(msg, 1, why, why_len);
    case VU_FDS_AT_MOST_ONE:
        if (msg->nfds > 1) {
            g_snprintf(why, why_len, "%s with %u file descriptors",
                       info->name, msg->nfds);
            return false;
        }
        return true;
    case VU_FDS_PER_REGION:
        return vu_check_nfds(msg, msg->payload.memory.nregions, why,
                             why_len);
    case VU_FDS_VRING:
        return vu_check_vring_fd_payload(msg, why, why_len) &&
               vu_check_nfds(msg, vu_msg_vring_nofd(msg) ? 0 : 1, why,
                             why_len);
    case VU_FDS_ANY:
        return true;
    }
    g_assert_not_reached();
}

bool vu_msg_validate(const VuMsg *msg, char *why, size_t why_len)
{
    const VuRequestInfo *info = vu_request_info(msg->hdr.request);

    if (msg->fds_dropped) {
        g_snprintf(why, why_len, "%s with more than %u file descriptors",
                   info ? info->name : "request", VHOST_USER_MAX_FDS);
        return false;
    }
    if (!info) {
        g_snprintf(why, why_len, "unsupported request %" PRIu32,
                   msg->hdr.request);
        return false;
    }
    return vu_check_payload(msg, info, why, why_len) &&
           vu_check_fds(msg, info, why, why_len);
}

uint32_t vu_msg_ring_index(const VuMsg *msg)
{
    switch (msg->hdr.request) {
    case VHOST_USER_SET_VRING_ADDR:
        return msg->payload.addr.index;
    case VHOST_USER_SET_VRING_KICK:
    case VHOST_USER_SET_VRING_CALL:
    case VHOST_USER_SET_VRING_ERR:
        return msg->payload.u64 & VHOST_USER_VRING_INDEX_MASK;
    default:
        /* SET_VRING_NUM, SET_VRING_BASE, GET_VRING_BASE, SET_VRING_ENABLE */
        return msg->payload.state.index;
    }
}

bool vu_msg_vring_nofd(const VuMsg *msg)
{
    return msg->payload.u64 & VHOST_USER_VRING_NOFD_MASK;
}

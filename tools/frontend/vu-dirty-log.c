/*
 * vu-dirty-log: the front-end's side of dirty page logging, as a
 * migrating QEMU drives it.
 *
 * Theory of operation
 * -------------------
 * While a guest migrates, QEMU copies its memory in rounds and must learn
 * which pages changed since the last copy; the vhost-user device writes
 * guest memory behind QEMU's back, so it records every page it writes in
 * a log QEMU shares with it (VHOST_USER_PROTOCOL_F_LOG_SHMFD): one bit
 * per 4 KiB page of guest physical address, little-endian words.  QEMU
 * does not ask for VHOST_F_LOG_ALL at the start; during a migration it sends
 * the log (SET_LOG_BASE, answered once the back-end mapped it), switches
 * LOG_ALL on with SET_FEATURES and re-sends every running ring's
 * SET_VRING_ADDR with VHOST_VRING_F_LOG and the used ring's guest address,
 * reads and clears the log word by word (an atomic exchange: the device
 * goes on setting bits meanwhile) in every round, and switches it off the
 * same way.  vuf_log_start(), vuf_log_stop() and vuf_log_take_dirty() do
 * that here.  The log is a memfd of our own; it stays mapped after
 * logging stopped, so that it can be read once more, until the next one.
 *
 * The front-end also knows what the device must have written: while
 * logging, the virtqueue (vu-virtqueue.c) hands every chain it builds to
 * vufq_log_note_chain(), which keeps a private copy of its segments (the
 * descriptors in guest memory are the device's to read, and ours to
 * trust only as we wrote them), and every chain it harvests to
 * vufq_log_expect_chain(), which marks the pages of the first used-length
 * bytes of the chain's device-writable buffers (virtio 2.7.8.2: the
 * device wrote at least that many, from the first writable buffer on)
 * and of its used ring element and used->idx as expected dirty.  Chains
 * added before logging started are not counted.  The expected pages are
 * a bitmap of the same layout that the queues' threads set with relaxed
 * atomic ORs; vuf_log_take_expected() takes them, with no queue in use.
 *
 * A chain is harvested after the used index that published it was
 * acquire-loaded, and the device logs before it publishes (release), so
 * by the time a chain counts as expected its bits are in the log.
 *
 * Control functions run in the control thread (see vu-frontend.h); the
 * two vufq_ hooks in the queue's thread.
 */

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <glib.h>

#include "vu-frontend-int.h"

#define BITS_PER_WORD       64

size_t vuf_log_words(const VuFrontend *fe)
{
    uint64_t pages = (fe->mem_size + VUF_LOG_PAGE - 1) / VUF_LOG_PAGE;

    return (pages + BITS_PER_WORD - 1) / BITS_PER_WORD;
}

void vuf_log_info(const VuFrontend *fe, VufLogInfo *out)
{
    *out = (VufLogInfo) {
        .negotiated = vuf_has_protocol_feature(
            fe, VHOST_USER_PROTOCOL_F_LOG_SHMFD),
        .log_all_offered = fe->features_offered & VUF_BIT(VHOST_F_LOG_ALL),
        .logging = fe->logging,
        .log_size = fe->log_mem ? fe->log_size : 0,
        .log_size_needed = vuf_log_words(fe) * sizeof(uint64_t),
        .pages = (fe->mem_size + VUF_LOG_PAGE - 1) / VUF_LOG_PAGE,
        .set_log_base = fe->log_bases,
        .log_base_reply = fe->log_base_reply,
    };
}

/* ------------------------------------------------------------------------ */
/* Expected pages (the queues' threads)                                      */

/* Mark the pages of [gpa, gpa + len) expected dirty. */
static void expect_range(VuFrontend *fe, uint64_t gpa, uint64_t len)
{
    uint64_t last;

    if (len == 0 || gpa >= fe->mem_size) {
        return;
    }
    last = (MIN(gpa + len, fe->mem_size) - 1) / VUF_LOG_PAGE;
    for (uint64_t p = gpa / VUF_LOG_PAGE; p <= last; p++) {
        /* Relaxed: the bits are taken by the control thread once the
         * queues are idle (thread join or the same thread). */
        atomic_fetch_or_explicit(&fe->log_expected[p / BITS_PER_WORD],
                                 1ull << (p % BITS_PER_WORD),
                                 memory_order_relaxed);
    }
}

/* Where the i-th segment of the chain at head is kept in q->log_segs. */
static size_t seg_slot(VufQueue *q, uint16_t head, bool indirect,
                       uint16_t *idx, unsigned i)
{
    size_t slot;

    if (indirect) {
        return q->num + (size_t)head * q->indirect_max + i;
    }
    slot = *idx;
    *idx = q->next[*idx];
    return slot;
}

void vufq_log_note_chain(VufQueue *q, uint16_t head, const VufSeg *segs,
                         unsigned n, bool indirect)
{
    uint16_t idx = head;

    for (unsigned i = 0; i < n; i++) {
        q->log_segs[seg_slot(q, head, indirect, &idx, i)] = segs[i];
    }
    q->log_nsegs[head] = n | (indirect ? LOG_CHAIN_INDIRECT : 0);
}

void vufq_log_expect_chain(VufQueue *q, uint16_t head, uint16_t used_slot,
                           uint32_t len)
{
    uint32_t n = q->log_nsegs[head] & ~LOG_CHAIN_INDIRECT;
    bool indirect = q->log_nsegs[head] & LOG_CHAIN_INDIRECT;
    uint16_t idx = head;

    if (n == 0) {
        return;                 /* added before logging started */
    }
    q->log_nsegs[head] = 0;
    for (unsigned i = 0; i < n && len; i++) {
        const VufSeg *s = &q->log_segs[seg_slot(q, head, indirect, &idx, i)];
        uint32_t wrote = MIN(s->len, len);

        if (s->device_writes) {
            expect_range(q->fe, s->gpa, wrote);
            len -= wrote;
        }
    }
    expect_range(q->fe, q->used_gpa + offsetof(VRingUsed, ring) +
                 (uint64_t)used_slot * sizeof(VRingUsedElem),
                 sizeof(VRingUsedElem));
    expect_range(q->fe, q->used_gpa + offsetof(VRingUsed, idx),
                 sizeof(uint16_t));
}

/* ------------------------------------------------------------------------ */
/* Tracking chains (control thread, queues idle)                             */

static void track_chains(VuFrontend *fe, bool on)
{
    for (unsigned i = 0; fe->queues && i < fe->num_queues; i++) {
        VufQueue *q = fe->queues[i];

        if (!q) {
            continue;
        }
        g_clear_pointer(&q->log_segs, g_free);
        g_clear_pointer(&q->log_nsegs, g_free);
        if (on) {
            q->log_segs = g_new0(VufSeg, (size_t)q->num *
                                         (1 + q->indirect_max));
            q->log_nsegs = g_new0(uint32_t, q->num);
        }
    }
}

void vuf_log_take_expected(VuFrontend *fe, uint64_t *bits)
{
    size_t words = vuf_log_words(fe);

    vuf_assert_control_thread(fe);
    for (size_t w = 0; w < words; w++) {
        bits[w] = fe->log_expected
            ? atomic_exchange_explicit(&fe->log_expected[w], 0,
                                       memory_order_relaxed)
            : 0;
    }
}

/* ------------------------------------------------------------------------ */
/* The log (control thread)                                                  */

static void log_unmap(VuFrontend *fe)
{
    if (fe->log_mem) {
        munmap((void *)fe->log_mem, fe->log_size);
        fe->log_mem = NULL;
    }
    vuf_close_fd(&fe->log_fd);
    fe->log_size = 0;
}

void vuf_log_session_end(VuFrontend *fe)
{
    fe->logging = false;
    fe->log_bases = 0;
    track_chains(fe, false);
}

void vuf_log_free(VuFrontend *fe)
{
    log_unmap(fe);
    g_clear_pointer(&fe->log_expected, g_free);
}

bool vuf_log_take_dirty(VuFrontend *fe, uint64_t *bits)
{
    size_t words = vuf_log_words(fe);
    size_t have = fe->log_mem ? fe->log_size / sizeof(uint64_t) : 0;

    vuf_assert_control_thread(fe);
    for (size_t w = 0; w < words; w++) {
        /* Relaxed: the device publishes what it logged with its used
         * index (release), which we acquired when harvesting; bits set
         * later are simply taken in a later round. */
        bits[w] = w < have
            ? atomic_exchange_explicit(&fe->log_mem[w], 0,
                                       memory_order_relaxed)
            : 0;
    }
    return fe->log_mem != NULL;
}

/* A zeroed memfd of size bytes, mapped: *fd and *mem. */
static bool log_create(uint64_t size, int *fd, void **mem, Error **errp)
{
    *fd = memfd_create("spindle-vu-dirty-log", MFD_CLOEXEC);
    if (*fd < 0) {
        error_setg_errno(errp, errno, "cannot create the dirty log");
        return false;
    }
    if (ftruncate(*fd, size) < 0) {
        error_setg_errno(errp, errno, "cannot size the dirty log to %" PRIu64
                         " bytes", size);
        vuf_close_fd(fd);
        return false;
    }
    *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    if (*mem == MAP_FAILED) {
        error_setg_errno(errp, errno, "cannot map the dirty log");
        vuf_close_fd(fd);
        return false;
    }
    return true;
}

/*
 * SET_LOG_BASE with the log in fd: sent without NEED_REPLY (as QEMU does),
 * the back-end answers with the same request and a u64 once it mapped the
 * log.  The spec's answer is 0, but QEMU does not look at it, and
 * libvhost-user (qemu-storage-daemon 7.2) echoes mmap_size: kept for the
 * caller to judge (VufLogInfo.log_base_reply), as QEMU would go on.
 */
static bool send_log_base(VuFrontend *fe, int fd, uint64_t size,
                          Error **errp)
{
    VhostUserLog d = { .mmap_size = size, .mmap_offset = 0 };

    if (!vuf_send_raw(fe, VHOST_USER_SET_LOG_BASE, VHOST_USER_VERSION, &d,
                      sizeof(d), &fd, 1, errp) ||
        !vuf_read_reply(fe, VHOST_USER_SET_LOG_BASE, &fe->log_base_reply,
                        sizeof(fe->log_base_reply), NULL, errp)) {
        error_prepend(errp, "the back-end did not take a %" PRIu64 "-byte "
                      "log: ", size);
        return false;
    }
    fe->log_bases++;
    return true;
}

/* Without REPLY_ACK, a round trip proves the back-end processed what we
 * sent (with it, every message was acknowledged already). */
static bool sync_backend(VuFrontend *fe, Error **errp)
{
    uint64_t features;

    return vuf_has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_REPLY_ACK) ||
           vuf_request_u64(fe, VHOST_USER_GET_FEATURES, &features, errp);
}

/* LOG_ALL on or off: SET_FEATURES, then every queue's SET_VRING_ADDR. */
static bool switch_logging(VuFrontend *fe, bool on, Error **errp)
{
    uint64_t features = fe->features | (on ? VUF_BIT(VHOST_F_LOG_ALL) : 0);

    if (!vuf_request_u64_set(fe, VHOST_USER_SET_FEATURES, features, NULL, 0,
                             errp)) {
        return false;
    }
    for (unsigned i = 0; i < fe->num_queues; i++) {
        if (fe->queues[i]->ready &&
            !vuf_set_vring_addr(fe, fe->queues[i], on, errp)) {
            error_prepend(errp, "queue %u: ", i);
            return false;
        }
    }
    return sync_backend(fe, errp);
}

static bool check_can_log(VuFrontend *fe, uint64_t log_size, Error **errp)
{
    if (fe->sock < 0) {
        error_setg(errp, "not connected");
        return false;
    }
    if (fe->logging) {
        error_setg(errp, "dirty logging is on already");
        return false;
    }
    if (!vuf_has_protocol_feature(fe, VHOST_USER_PROTOCOL_F_LOG_SHMFD)) {
        error_setg(errp, "the LOG_SHMFD protocol feature was not negotiated "
                   "(%s): no dirty log can be shared",
                   fe->protocol_features_offered &
                   VUF_BIT(VHOST_USER_PROTOCOL_F_LOG_SHMFD)
                   ? "offered, not asked for" : "the back-end does not offer "
                   "it");
        return false;
    }
    if (!(fe->features_offered & VUF_BIT(VHOST_F_LOG_ALL))) {
        error_setg(errp, "the back-end offers LOG_SHMFD but not the LOG_ALL "
                   "feature: it cannot be asked to log");
        return false;
    }
    if (log_size == 0 || log_size % sizeof(uint64_t)) {
        error_setg(errp, "a log of %" PRIu64 " bytes: it must be a non-zero "
                   "multiple of 8", log_size);
        return false;
    }
    return true;
}

static bool log_start(VuFrontend *fe, uint64_t log_size, bool track,
                      Error **errp)
{
    int fd = -1;
    void *mem;

    vuf_assert_control_thread(fe);
    if (log_size == 0) {
        log_size = vuf_log_words(fe) * sizeof(uint64_t);
    }
    if (!check_can_log(fe, log_size, errp) ||
        !log_create(log_size, &fd, &mem, errp)) {
        return false;
    }
    if (!send_log_base(fe, fd, log_size, errp)) {
        munmap(mem, log_size);
        vuf_close_fd(&fd);
        return false;
    }
    /* The back-end has the new log: the old one can go. */
    log_unmap(fe);
    fe->log_fd = fd;
    fe->log_mem = mem;
    fe->log_size = log_size;
    if (!fe->log_expected) {
        fe->log_expected = g_new0(_Atomic uint64_t, vuf_log_words(fe));
    }
    memset((void *)fe->log_expected, 0,
           vuf_log_words(fe) * sizeof(uint64_t));
    track_chains(fe, track);
    fe->logging = true;
    if (!switch_logging(fe, true, errp)) {
        error_prepend(errp, "starting dirty logging: ");
        return false;
    }
    return true;
}

bool vuf_log_start(VuFrontend *fe, uint64_t log_size, Error **errp)
{
    return log_start(fe, log_size, true, errp);
}

bool vuf_log_start_untracked(VuFrontend *fe, uint64_t log_size,
                             Error **errp)
{
    return log_start(fe, log_size, false, errp);
}

bool vuf_log_stop(VuFrontend *fe, Error **errp)
{
    vuf_assert_control_thread(fe);
    if (!fe->logging) {
        error_setg(errp, "dirty logging is not on");
        return false;
    }
    fe->logging = false;
    track_chains(fe, false);
    if (!switch_logging(fe, false, errp)) {
        error_prepend(errp, "stopping dirty logging: ");
        return false;
    }
    return true;
}

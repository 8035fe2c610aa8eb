/*
 * Dirty page logging for live migration (vhost-user
 * VHOST_USER_PROTOCOL_F_LOG_SHMFD, VHOST_F_LOG_ALL): a bitmap in memory
 * shared with the front-end, one bit per VHOST_LOG_PAGE bytes of guest
 * physical address space, in which the back-end sets the bit of every
 * guest page it writes while the front-end migrates the guest.
 *
 * The front-end creates the log (a memfd), sends it with SET_LOG_BASE
 * (its size and the offset of the bitmap in the fd) and reads and clears
 * it concurrently, page by page, copying what was marked to the
 * destination.  Bit n of byte b stands for the page at guest physical
 * address (b * 8 + n) * VHOST_LOG_PAGE.
 *
 * What this module offers:
 *   - the sizes (vhost_log_bytes_for(), vhost_log_bytes_for_memory());
 *   - vhost_log_map(): check a log a front-end sends (inside its file,
 *     big enough for the guest memory table) and map it, as a
 *     reference-counted VhostLog, like the inflight region;
 *   - vhost_log_covers(): whether a log is big enough for a table;
 *   - vhost_log_mark(): set the bits of a guest physical range.
 *
 * The log is shared with the front-end, which clears bits while we set
 * them: every bit is set with an atomic OR, never a plain store (a plain
 * read-modify-write of a byte would bring back bits the front-end just
 * cleared, or lose ours).  Relaxed order is enough for the bits
 * themselves; what the front-end must see in order is a request's log
 * bits before its used index, which the virtqueue's release store of
 * used->idx gives (see virtqueue.c).
 *
 * Threads: a VhostLog may be mapped, referenced and released in any
 * thread, and marked from any number of threads at once.
 */
#ifndef SPINDLE_HW_VIRTIO_VHOST_LOG_H
#define SPINDLE_HW_VIRTIO_VHOST_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include "hw/virtio/guest-memory.h"
#include "util/error.h"

/* Bytes of guest physical address space per bit of the log. */
#define VHOST_LOG_PAGE 4096

typedef struct VhostLog VhostLog;

/* Bytes of log that cover guest physical addresses [0, end). */
uint64_t vhost_log_bytes_for(uint64_t end);

/* Bytes of log that cover every page of mem (0 for an empty table). */
uint64_t vhost_log_bytes_for_memory(const GuestMemory *mem);

/*
 * Check and map a log sent with SET_LOG_BASE: mmap_size bytes at
 * mmap_offset of fd (any offset: mapped from the page below it).  The
 * whole of [mmap_offset, mmap_offset + mmap_size) must be inside fd's
 * file (fstat) so that no access can fault, and mmap_size must cover
 * every page of mem (vhost_log_bytes_for_memory(); mem may be NULL: no
 * table yet).  fd stays the caller's.  Returns a new reference, or NULL
 * with errp set (one line naming SET_LOG_BASE).  Any thread.
 */
VhostLog *vhost_log_map(int fd, uint64_t mmap_size, uint64_t mmap_offset,
                        const GuestMemory *mem, Error **errp);

/* A VhostLog is a SharedMapping (guest-memory.h): take and drop
 * references with shared_mapping_ref() / shared_mapping_unref(); the last
 * one unmaps (after every marker's ORs).  Any thread. */

/* The log's size in bytes (mmap_size). */
uint64_t vhost_log_size(const VhostLog *log);

/* The bitmap (vhost_log_size() bytes), for tests.  Valid while the
 * caller holds a reference. */
const uint8_t *vhost_log_bitmap(const VhostLog *log);

/*
 * Whether log covers every page of mem; false with errp set (naming
 * what) if not.  Any thread.
 */
bool vhost_log_covers(const VhostLog *log, const GuestMemory *mem,
                      const char *what, Error **errp);

/*
 * Mark every page that [gpa, gpa + len) touches as dirty (len 0: none).
 * Pages past the end of the log are not marked: vhost_log_map() and
 * vhost_log_covers() make sure guest memory has none, so only an address
 * outside guest memory (a used ring log address the front-end made up)
 * can name one.  Any thread; atomic against the front-end and other
 * markers.
 */
void vhost_log_mark(VhostLog *log, uint64_t gpa, uint64_t len);

#endif

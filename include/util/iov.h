/*
 * Copying between a flat buffer and an iovec array (a scatter-gather list
 * such as a virtqueue element's, or a SCSI command's data buffers).
 *
 * The functions only read the iovec array and never keep a pointer to it.
 * Entries of length zero are skipped, so their iov_base is never touched
 * (it may be NULL).  Any thread; no locking, no allocation.
 */
#ifndef SPINDLE_UTIL_IOV_H
#define SPINDLE_UTIL_IOV_H

#include <stddef.h>
#include <sys/uio.h>

/* The total length in bytes of iov[0..niov). */
size_t iov_size(const struct iovec *iov, unsigned niov);

/*
 * Copy len bytes of iov[0..niov), starting offset bytes in, to buf.
 * Returns the bytes copied: fewer than len when iov ends first (0 when
 * offset is at or past its end).
 */
size_t iov_to_buf(const struct iovec *iov, unsigned niov, size_t offset,
                  void *buf, size_t len);

/*
 * Copy len bytes of buf into iov[0..niov), starting offset bytes in.
 * Returns the bytes copied: fewer than len when iov ends first (0 when
 * offset is at or past its end).
 */
size_t iov_from_buf(const struct iovec *iov, unsigned niov, size_t offset,
                    const void *buf, size_t len);

/* Zero iov[0..niov) from offset bytes in to its end. */
void iov_zero_from(const struct iovec *iov, unsigned niov, size_t offset);

#endif

/*
 * Image locks of the `file` driver (file-lock.c): what a node holds on its
 * image so that two writers, Spindles or QEMUs, never share one.  Private
 * to block/: only file-posix.c includes it.
 *
 * Main thread only, like opening and activating a node.
 */
#ifndef SPINDLE_BLOCK_FILE_LOCK_H
#define SPINDLE_BLOCK_FILE_LOCK_H

#include <stdbool.h>
#include "util/error.h"

/* locking=, in QEMU's spelling and order of file_locking_names. */
typedef enum FileLocking {
    FILE_LOCKING_AUTO,
    FILE_LOCKING_ON,
    FILE_LOCKING_OFF,
} FileLocking;

/* "auto", "on", "off", NULL: the values of locking=. */
extern const char *const file_locking_names[];

/*
 * Take the locks of a node (read_only or writable) on the image open as
 * fd, whose name the user gave as filename (for messages; borrowed).  A
 * busy image is tried again for up to a second (a killed holder's
 * descriptor can outlive it that long) before it is an error.
 *
 * Returns true with *locked set when the locks are held, cleared when
 * none were taken (locking=off; locking=auto on a file system without
 * OFD locks).  Returns false with errp set, holding nothing, when another
 * open of the image conflicts ("Failed to get write lock on 'FILE': is
 * another process using the image?", for a read-only node "Failed to get
 * shared lock on 'FILE': is another process writing to the image?", with
 * QEMU's name of the permission when a QEMU holds it), when locking=on
 * meets a file system without OFD locks, or on any other fcntl error.
 */
bool file_lock_image(int fd, const char *filename, bool read_only,
                     FileLocking locking, bool *locked, Error **errp);

/* Drop every lock file_lock_image() took on fd.  Cannot fail (closing fd
 * drops them anyway). */
void file_unlock_image(int fd);

#endif

/*
 * virtio-blk device (virtio 1.x, section 5.2) over a block node, served
 * through a VuServer.
 *
 * Requests are validated before any I/O (header size and direction, status
 * byte, sector range, length a multiple of 512, read-only), then go to the
 * block layer with iovecs pointing into guest memory (zero copy).  Each
 * request is one allocation holding the VirtQueueElement and the
 * BlockRequest.
 *
 * Threads: creation and the VuDevOps set-up callbacks in the main thread;
 * request processing in the queues' home threads.  The block node must be
 * in the context of every queue (one IOThread per export for now).
 */
#ifndef SPINDLE_HW_VIRTIO_VIRTIO_BLK_H
#define SPINDLE_HW_VIRTIO_VIRTIO_BLK_H

#include <stdbool.h>
#include <stdint.h>
#include "block/block.h"
#include "hw/virtio/vhost-user-server.h"
#include "hw/virtio/virtio-io-error.h"

typedef struct VirtioBlk VirtioBlk;

typedef struct VirtioBlkConf {
    unsigned num_queues;         /* 1..64 */
    unsigned queue_size;         /* largest ring accepted (default 256) */
    uint32_t logical_block_size; /* 512..64k, power of two (default 512) */
    bool writable;               /* off: VIRTIO_BLK_F_RO */
    bool writethrough;           /* start with the config's writeback = 0:
                                  * writes complete once stable (FUA) */
    const char *serial;          /* GET_ID answer, at most 20 bytes; NULL: "" */
    /* What a failed read / other request does (block/error-policy.h; zero:
     * report). */
    BlockErrorPolicy rerror;
    BlockErrorPolicy werror;
    /* A stop is told to io_error (NULL: nobody) in main_ctx's thread,
     * naming export_id (copied). */
    const char *export_id;
    AioContext *main_ctx;
    VirtioIoErrorFn *io_error;
} VirtioBlkConf;

/* Errors: bad block size, serial too long, writable over a read-only node. */
VirtioBlk *virtio_blk_new(const VirtioBlkConf *conf, BlockNode *bs,
                          Error **errp);
void virtio_blk_free(VirtioBlk *vb);

/*
 * Read the node's length again (after block_node_resize()) and make the
 * capacity the config space shows and requests are checked against
 * follow it.  Returns whether the capacity changed (the caller then tells
 * the front-end: vu_server_config_changed()).  Main thread; the queues
 * may run meanwhile.
 */
bool virtio_blk_refresh_capacity(VirtioBlk *vb);

/* The capacity in 512-byte sectors.  Any thread. */
uint64_t virtio_blk_get_capacity(VirtioBlk *vb);

/* The node's I/O through the device since it was created, over every
 * queue and front-end.  Any thread. */
void virtio_blk_get_acct_stats(VirtioBlk *vb, BlockAcctStats *out);

/*
 * With resume: retry the requests an error policy holds on every stopped
 * queue, in the order they were taken from the ring, and let the queues
 * take new ones (unless a retry fails at once and stops its queue again);
 * runs each queue's part in its home thread and waits (aio_run_sync());
 * returns how many requests were submitted again (0: nothing was
 * stopped); main thread.  Without: how many queues are stopped right
 * now; any thread.
 */
unsigned virtio_blk_stops(VirtioBlk *vb, bool resume);

/* The callbacks to give vu_server_new() with vb as dev. */
extern const VuDevOps virtio_blk_vu_ops;

#endif

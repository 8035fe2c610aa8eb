/*
 * A queue's free list of device requests (virtio-blk, virtio-scsi).
 *
 * A device request is one allocation of a few KiB: it holds the
 * VirtQueueElement, with room for the longest chain.  Handing each one
 * back to malloc cost a third of an IOThread's time at QD32, so every
 * queue keeps up to a device-chosen number of the requests it used and
 * takes the next one from there.
 *
 * The list is linked through a VirtioReqLink that must be the request's
 * first member, so that a kept request is freed as the allocation it is.
 * A pool starts zeroed (empty) and belongs to one queue: only that
 * queue's home thread uses it, without locks.
 */
#ifndef SPINDLE_HW_VIRTIO_REQ_POOL_H
#define SPINDLE_HW_VIRTIO_REQ_POOL_H

#include <stddef.h>
#include <glib.h>

/* The first member of a request kept in a pool. */
typedef struct VirtioReqLink {
    struct VirtioReqLink *next;
} VirtioReqLink;

typedef struct VirtioReqPool {
    VirtioReqLink *free;        /* kept requests, by VirtioReqLink.next */
    unsigned nfree;
} VirtioReqPool;

/*
 * A kept request, or else a new allocation of size bytes (never NULL: an
 * allocation failure aborts).  Its contents are undefined; the caller owns
 * it until virtio_req_pool_put().
 */
static inline void *virtio_req_pool_get(VirtioReqPool *pool, size_t size)
{
    VirtioReqLink *link = pool->free;

    if (link) {
        pool->free = link->next;
        pool->nfree--;
        return link;
    }
    return g_malloc(size);
}

/*
 * Keep req (from virtio_req_pool_get() on this pool, its VirtioReqLink
 * first) for the next request, or free it if the pool already holds max.
 */
static inline void virtio_req_pool_put(VirtioReqPool *pool, void *req,
                                       unsigned max)
{
    VirtioReqLink *link = req;

    if (pool->nfree >= max) {
        g_free(req);
        return;
    }
    link->next = pool->free;
    pool->free = link;
    pool->nfree++;
}

/* Free every kept request; the pool is empty afterwards. */
static inline void virtio_req_pool_drain(VirtioReqPool *pool)
{
    while (pool->free) {
        VirtioReqLink *link = pool->free;

        pool->free = link->next;
        g_free(link);
    }
    pool->nfree = 0;
}

#endif

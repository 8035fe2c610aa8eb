/*
 * spindle-vu-client: the engine of verify-run (virtio-blk, vu-client-run.c)
 * and scsi-verify-run (virtio-scsi, vu-client-scsi-run.c).  The engine
 * owns the threads, the per-queue slots, the write and read phases, the
 * check of the data read, the result and the reporting of a mismatch,
 * and allocates and harvests the library's requests; a VerifyOps supplies
 * what differs between the devices: how a request is prepared and sent,
 * what the device's answer means, and the device's own result members.
 *
 * Threads: verify_run() and the ops' result run in the main thread; the
 * other ops run in the queue's thread and touch only that VerifyQueue and
 * its slots.
 */
#ifndef SPINDLE_TOOLS_VU_CLIENT_VERIFY_H
#define SPINDLE_TOOLS_VU_CLIENT_VERIFY_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "vu-client-cmd.h"
#include "vu-frontend.h"

typedef struct VerifyRun VerifyRun;

/* One request a queue keeps in flight. */
typedef struct VerifySlot {
    void *req;                  /* the device's (VufBlkReq, VufScsiReq) */
    uint8_t *data;              /* its data buffer, --bs bytes */
    uint64_t block;             /* --bs block of the queue's slice */
    uint32_t gen;               /* generation written, or expected */
    unsigned resent;            /* times this request was sent again */
} VerifySlot;

/* One queue's share of the run: its thread, slots and results. */
typedef struct VerifyQueue {
    const VerifyRun *run;
    VufQueue *q;
    unsigned qi;                /* (request) queue number, from 0 */
    uint64_t base;              /* first byte of this queue's slice */
    uint64_t nblocks;           /* --bs blocks in the slice */
    uint64_t *order;            /* shuffled block numbers */
    uint32_t *gen;              /* generation last written, per block */
    VerifySlot *slots;
    unsigned *free_slots;
    unsigned nfree;
    unsigned depth;
    uint64_t tag;               /* next command tag, for devices with tags:
                                 * (qi + 1) << 40 up, unique across queues */
    pthread_t thread;
    /* Results. */
    uint64_t writes, reads;
    uint64_t resent;            /* requests sent again (SCSI: UNIT
                                 * ATTENTION) */
    char *error;                /* NULL on success */
    bool mismatch;
    uint64_t bad_off, want, got, bad_block;
    uint32_t bad_gen;
    VufQueueStats stats;
} VerifyQueue;

/* What the device made of a request, as VerifyOps.answer sees it. */
typedef enum VerifyAnswer {
    VERIFY_ANSWER_DONE,         /* done successfully: count and check it */
    VERIFY_ANSWER_RESENT,       /* sent again: still in flight */
    VERIFY_ANSWER_FAILED,       /* an error: VerifyQueue.error is set */
} VerifyAnswer;

/*
 * The device's side.  The engine allocates the slots' requests itself
 * (VufBlkReq or VufScsiReq, after the session's device type): each is
 * the token of its chain in the virtqueue and points back at its slot
 * (opaque), so that a completion finds its slot.
 */
typedef struct VerifyOps {
    /* How messages name a queue: "queue", "request queue". */
    const char *queue_name;
    /* The virtqueue that (request) queue qi is. */
    unsigned (*vq_index)(unsigned qi);
    /* Make s->req the write (s->data holds the pattern) or read of block
     * s->block. */
    void (*prepare)(VerifyQueue *vq, VerifySlot *s, bool writing);
    /* Add s->req to vq->q: 0 or -errno (-ENOSPC: the ring is full). */
    int (*submit)(VerifyQueue *vq, VerifySlot *s);
    /* Judge the device's answer to s (the request may be sent again). */
    VerifyAnswer (*answer)(VerifyQueue *vq, VerifySlot *s, bool writing);
    /* Optional: whether a read the device completed moved all its data;
     * false with vq->error set.  Checked before the data. */
    bool (*read_whole)(VerifyQueue *vq, VerifySlot *s);
    /* Optional: add the device's own members to the run's result (after
     * those verify_run() writes for every device). */
    void (*result)(const VerifyRun *run, Result *r);
} VerifyOps;

/* A verify-run: what the caller fills in before verify_run(). */
struct VerifyRun {
    const VerifyOps *ops;
    Client *c;
    const Command *cmd;
    unsigned nq;                /* queues, each with a thread */
    uint64_t slice;             /* bytes per queue: whole --bs blocks */
    uint32_t lbs;               /* the unit the device addresses in */
    const char *target;         /* messages: "disk", "LUN 3" */
    VerifyQueue *queues;        /* nq, set by verify_run() */
};

/*
 * Set run->slice: --size split over run->nq queues, in whole --bs blocks.
 * False with errp set if a queue would get no block.
 */
bool verify_run_slice(VerifyRun *run, Error **errp);

/*
 * Run it: set up every queue (a request per slot), start one
 * thread per queue, wait for them all, fill r (ops->result, and the first
 * mismatch found) and free the queues.  False with errp set if a queue
 * could not be set up or a thread not started, or with the first queue's
 * error (a transport error, a bad answer, a mismatch).
 */
bool verify_run(VerifyRun *run, Result *r, Error **errp);

/* Set vq->error to "<queue> N: what: <errno message>"; returns false. */
bool verify_fail(VerifyQueue *vq, const char *what, int err);

#endif

/*
 * qcow2: what the files of the qcow2 driver share (block/qcow2*.c).
 *
 * qcow2.c opens the image (header, options, backing file), owns the
 * node's state and dispatches requests; qcow2-cluster.c maps guest
 * clusters through the L1 and L2 tables and runs reads, writes,
 * write-zeroes and discards; qcow2-cache.c holds the metadata caches
 * and writes them back in a crash-safe order; qcow2-refcount.c keeps the
 * refcounts and allocates clusters; qcow2-compress.c inflates
 * compressed clusters; qcow2-alloc.c runs the common allocating write
 * in the request's IOThread.  The theory of operation is at the top of
 * qcow2.c.
 *
 * Locking: every function here that takes a Qcow2State is called with
 * s->lock held unless it says otherwise; those that do I/O (a Qcow2Io
 * argument) wait for it, so they run only in the node's workers, its
 * finisher or the main thread, never in an IOThread.  Those without I/O
 * (qcow2_get_entry() with peek, the cache's peek and mark_dirty, the
 * busy clusters, qcow2_rc_alloc_cached()) are what the IOThread's fast
 * paths use, the lock tried.
 */
#ifndef SPINDLE_BLOCK_QCOW2_H
#define SPINDLE_BLOCK_QCOW2_H

#include <stdatomic.h>
#include <stdint.h>
#include <glib.h>
#include "block/block-int.h"

#define QCOW2_MAGIC                 0x514649fbu   /* "QFI\xfb" */
#define QCOW2_MIN_CLUSTER_BITS      9
#define QCOW2_MAX_CLUSTER_BITS      21            /* 2 MiB, as QEMU */
#define QCOW2_MAX_TABLE_BYTES       (32 * 1024 * 1024)  /* L1, refcount table */
#define QCOW2_MAX_RUN_BYTES         (2 * 1024 * 1024)   /* one allocating write */

/* Incompatible feature bits. */
#define QCOW2_INCOMPAT_DIRTY        (1ull << 0)
#define QCOW2_INCOMPAT_CORRUPT      (1ull << 1)
#define QCOW2_INCOMPAT_DATA_FILE    (1ull << 2)
#define QCOW2_INCOMPAT_COMPRESSION  (1ull << 3)
#define QCOW2_INCOMPAT_EXTL2        (1ull << 4)
/* Autoclear feature bits. */
#define QCOW2_AUTOCLEAR_BITMAPS     (1ull << 0)

/* Header field offsets that the driver rewrites. */
#define QCOW2_HDR_SIZE              24
#define QCOW2_HDR_L1                36  /* l1_size (4), l1_table_offset (8) */
#define QCOW2_HDR_REFTABLE          48  /* offset (8), clusters (4) */
#define QCOW2_HDR_AUTOCLEAR         88

/* L1 and L2 entries. */
#define QCOW2_COPIED                (1ull << 63)
#define QCOW2_COMPRESSED            (1ull << 62)
#define QCOW2_ZERO                  1ull
#define QCOW2_OFFSET_MASK           0x00fffffffffffe00ull
#define QCOW2_REFT_OFFSET_MASK      0xfffffffffffffe00ull

/* A guest cluster as its L2 entry describes it. */
typedef enum Qcow2ClusterType {
    QCOW2_CLUSTER_UNALLOCATED,   /* backing file, or zeros */
    QCOW2_CLUSTER_ZERO,          /* reads as zeros (v3 flag) */
    QCOW2_CLUSTER_NORMAL,        /* data at a host cluster */
    QCOW2_CLUSTER_COMPRESSED,
} Qcow2ClusterType;

/*
 * A cache of metadata tables (L2 tables, refcount blocks), one cluster
 * each, keyed by host offset (0: a free slot), write-back
 * (qcow2-cache.c).  A pointer into a table stays valid while s->lock is
 * held and no other table is loaded into the same cache.
 */
typedef struct Qcow2CacheEntry {
    uint64_t offset;
    uint64_t used;               /* LRU clock */
    uint8_t *data;
    bool dirty;                  /* changed, not written back yet */
} Qcow2CacheEntry;

typedef struct Qcow2Cache {
    Qcow2CacheEntry *entries;
    unsigned n;
    unsigned ndirty;
    uint64_t clock;
    GHashTable *index;           /* &entry->offset -> entry */
} Qcow2Cache;

/* A byte range of the image file. */
typedef struct Qcow2Extent {
    uint64_t off;
    uint64_t bytes;
} Qcow2Extent;

/*
 * Where one request's (or a main-thread operation's) I/O goes: the queue
 * of the file child and that of the backing node, in the context of the
 * request.  backing is NULL without a backing node.
 */
typedef struct Qcow2Io {
    BlockQueue *file;
    BlockQueue *backing;
} Qcow2Io;

typedef struct Qcow2State {
    BlockNode *bs;

    /* The header (fixed after open but where said). */
    uint32_t version;
    uint32_t cluster_bits;
    uint64_t cluster_size;
    uint32_t l2_bits;            /* log2 of the entries of an L2 table */
    uint64_t size;               /* virtual size (grows: truncate) */
    uint64_t incompat, compat, autoclear;
    uint32_t refcount_order;
    uint32_t rc_block_bits;      /* log2 of the entries of a refcount block */
    uint32_t header_length;
    uint32_t compression_type;   /* 0 zlib, 1 zstd */
    uint32_t nb_snapshots;
    bool has_bitmaps;
    /* The bitmaps extension: where the bitmap directory lies. */
    uint32_t nb_bitmaps;
    uint64_t bitmap_dir_offset;
    uint64_t bitmap_dir_size;

    /* The active L1 table and the refcount table, host byte order. */
    uint64_t *l1;
    uint32_t l1_size;
    uint64_t l1_offset;
    uint64_t *rct;
    uint64_t rct_entries;
    uint64_t rct_offset;

    char *backing_file;          /* from the header, or NULL */
    char *backing_fmt;           /* from the extension, or NULL */
    BlockNode *backing;          /* referenced, or NULL */

    Qcow2Cache l2_cache;
    Qcow2Cache rc_cache;

    /* Allocation: clusters are taken from the end of the image. */
    uint64_t alloc_end;
    /*
     * Barriers: every metadata write counts in write_gen (when it was
     * issued, under the lock); flushed_gen is the count the last completed
     * flush of the file covered.
     */
    uint64_t write_gen;
    uint64_t flushed_gen;
    /* References given up by dirty L2 entries, dropped once those are on
     * storage (qcow2_flush_metadata()). */
    GArray *pending_frees;       /* Qcow2Extent */
    /* Guest clusters being allocated (per-cluster serialisation). */
    GArray *allocating;          /* uint64_t guest cluster indexes */
    GCond alloc_cond;
    unsigned alloc_waiters;      /* threads waiting on alloc_cond */

    GMutex lock;                 /* everything above that changes */
    GThreadPool *pool;           /* the workers: slow requests */
    GThreadPool *finisher;       /* one thread: qcow2_alloc_finish() */
    /* Allocating writes the IOThreads ran (qcow2-alloc.c), since open;
     * changed under lock, read by any thread. */
    _Atomic uint64_t iothread_allocs;
} Qcow2State;

/* The per-queue state (q->opaque): the backing node's queue there. */
typedef struct Qcow2Queue {
    BlockQueue *backing;
} Qcow2Queue;

/* qcow2.c: I/O on the file or backing node that waits for completion.
 * Any thread but a running IOThread's (a worker, or the main thread on
 * the main loop).  Returns 0 or -errno. */
int qcow2_pread(BlockQueue *q, uint64_t offset, void *buf, uint64_t bytes);
int qcow2_pwrite(BlockQueue *q, uint64_t offset, const void *buf,
                 uint64_t bytes);
/* The same for a READ or WRITE of iov[0..niov) (bytes in all). */
int qcow2_sync_iov(BlockQueue *q, BlockOp op, uint64_t offset,
                   struct iovec *iov, int niov, uint64_t bytes);
int qcow2_flush_file(Qcow2State *s, Qcow2Io *io);
int qcow2_discard_file(Qcow2Io *io, uint64_t offset, uint64_t bytes);
/* A buffer fit for the file node's O_DIRECT needs (free with free()). */
void *qcow2_alloc_buf(uint64_t bytes);

/* qcow2-cache.c */
void qcow2_cache_init(Qcow2Cache *c, unsigned n, uint64_t cluster_size);
void qcow2_cache_destroy(Qcow2Cache *c);
/* The table at offset, loaded if needed (evicting, which may write a
 * dirty table back); -errno on an I/O error. */
int qcow2_cache_get(Qcow2State *s, Qcow2Io *io, Qcow2Cache *c,
                    uint64_t offset, uint8_t **table);
/* The table at offset if cached, else NULL (no I/O). */
uint8_t *qcow2_cache_peek(Qcow2Cache *c, uint64_t offset);
/* A zeroed, clean table for offset in the cache (a new table: no read);
 * -errno if evicting failed. */
int qcow2_cache_new(Qcow2State *s, Qcow2Io *io, Qcow2Cache *c,
                    uint64_t offset, uint8_t **table);
/* The cached table at offset was changed: write it back later. */
void qcow2_cache_mark_dirty(Qcow2Cache *c, uint64_t offset);
/* Write every dirty table of c back. */
int qcow2_cache_write_dirty(Qcow2State *s, Qcow2Io *io, Qcow2Cache *c);
/* Forget every table (none may be dirty). */
void qcow2_cache_clear(Qcow2Cache *c);
/*
 * Make the refcounts and every other metadata write issued so far reach
 * stable storage: the dirty refcount blocks are written, then the file
 * is flushed if anything was written since the last flush.  Before an
 * L2 table or L1 entry that may point at newly counted clusters, and
 * before a header field points at new tables.
 */
int qcow2_barrier(Qcow2State *s, Qcow2Io *io);
/* Drop one reference to each host cluster of [off, off + bytes) once the
 * dirty L2 entries are on storage. */
void qcow2_defer_free(Qcow2State *s, uint64_t off, uint64_t bytes);
/* Whether nothing is dirty or waiting (a FLUSH may go straight down). */
bool qcow2_metadata_clean(Qcow2State *s);
/* Write everything back in the safe order, apply the deferred frees, and
 * flush the file (always: the data too). */
int qcow2_flush_metadata(Qcow2State *s, Qcow2Io *io);

/* qcow2-cluster.c */
/* Write bytes [from, from + len) of table (at host offset) to the file,
 * widened to whole sectors. */
int qcow2_table_write(Qcow2State *s, Qcow2Io *io, uint64_t offset,
                      const uint8_t *table, uint64_t from, uint64_t len);
/* Write entry index of the table arr[0..n) at host offset offset
 * (big-endian, the sectors holding it; entries past n as 0). */
int qcow2_array_write(Qcow2State *s, Qcow2Io *io, uint64_t offset,
                      const uint64_t *arr, uint64_t n, uint64_t index);
/* Whether host cluster offset off is one the image may refer to. */
bool qcow2_host_offset_valid(Qcow2State *s, uint64_t off);
Qcow2ClusterType qcow2_entry_type(Qcow2State *s, uint64_t entry);
/* Where guest offset off is mapped: its L1 index, and its L2 index in
 * that table. */
static inline uint64_t qcow2_l1_index(const Qcow2State *s, uint64_t off)
{
    return off >> (s->cluster_bits + s->l2_bits);
}

static inline uint64_t qcow2_l2_index(const Qcow2State *s, uint64_t off)
{
    return (off >> s->cluster_bits) & ((1ull << s->l2_bits) - 1);
}
/*
 * The L2 entry of guest offset off: from the cache only (peek: returns
 * -EAGAIN on a miss) or loading its table.  *entry is 0 for a cluster
 * whose L2 table is unallocated.  -EIO for a corrupt L1 entry.
 */
int qcow2_get_entry(Qcow2State *s, Qcow2Io *io, uint64_t off,
                    uint64_t *entry, bool peek);
/* Point the L2 entry of guest offset off (its cluster busy) at entry, in
 * the cache (written back later, qcow2-cache.c). */
int qcow2_set_entry(Qcow2State *s, Qcow2Io *io, uint64_t off,
                    uint64_t entry);
/* An entry whose guest cluster reads as zeros. */
bool qcow2_entry_reads_zero(Qcow2State *s, uint64_t e);
/* Whether guest cluster gc (an index) is busy: being allocated, or its
 * entry being changed. */
bool qcow2_is_allocating(Qcow2State *s, uint64_t gc);
/* Mark the guest cluster of off busy (it is not), and end that (waking
 * those waiting on s->alloc_cond). */
void qcow2_cluster_mark_busy(Qcow2State *s, uint64_t off);
void qcow2_cluster_unbusy(Qcow2State *s, uint64_t off);
/* The worker side of READ, WRITE, WRITE_ZEROES, DISCARD.  No lock held. */
int qcow2_co_rw(Qcow2State *s, Qcow2Io *io, BlockRequest *req);
/* Grow the L1 table to cover size bytes.  s->lock held. */
int qcow2_grow_l1(Qcow2State *s, Qcow2Io *io, uint64_t size);

/* qcow2-refcount.c */
uint64_t qcow2_rc_get_entry(Qcow2State *s, const uint8_t *block,
                            uint64_t index);
/* Add delta to the refcount of the host cluster at off (allocating
 * refcount blocks as needed); -ERANGE if it would leave 0..max.  The
 * new count in *newval (may be NULL). */
int qcow2_rc_update(Qcow2State *s, Qcow2Io *io, uint64_t off, int delta,
                    uint64_t *newval);
/* Take bytes at the end of the image (no refcounts: the caller's
 * business); the file node's length follows. */
uint64_t qcow2_reserve(Qcow2State *s, uint64_t bytes);
/* Raise the length of the file node, and of any filter between, to at
 * least len (requests to the file may reach that far).  Any thread. */
void qcow2_grow_file(Qcow2State *s, uint64_t len);
/* n new contiguous clusters at the end, their refcounts 1 on storage. */
int qcow2_alloc_clusters(Qcow2State *s, Qcow2Io *io, uint64_t n,
                         uint64_t *off);
/* The same without I/O (in an IOThread): -EAGAIN, and nothing changed,
 * unless the refcount blocks covering the n clusters exist, are cached
 * and count them 0; else they are counted 1 in the cache (dirty, reaching
 * storage as qcow2-cache.c orders it). */
int qcow2_rc_alloc_cached(Qcow2State *s, uint64_t n, uint64_t *off);
/* Drop one reference from each host cluster of [off, off + bytes);
 * those that reach 0 are discarded in the file. */
int qcow2_free_clusters(Qcow2State *s, Qcow2Io *io, uint64_t off,
                        uint64_t bytes);

/*
 * qcow2-alloc.c.  Start req (a WRITE, in q->ctx's home thread, no lock
 * held) as an allocating write run by the IOThread, if it fits (see the
 * theory there); false if it does not, with nothing changed (a worker's
 * job then).  q is the node's queue of req, backing the backing node's
 * queue in that context (or NULL).
 */
bool qcow2_alloc_start(Qcow2State *s, BlockQueue *q, BlockQueue *backing,
                       BlockRequest *req);
/* The finisher pool's function: step 2 of such a write, the lock waited
 * for and the L2 table loaded if need be. */
void qcow2_alloc_finish(gpointer data, gpointer user_data);

/* qcow2-compress.c: inflate one compressed cluster of the image into
 * out (cluster_size bytes) from in[0..in_len).  -EIO if the data is bad,
 * -ENOTSUP if this build lacks the compression type. */
int qcow2_decompress(Qcow2State *s, const uint8_t *in, size_t in_len,
                     uint8_t *out);
/* Whether this build can read compressed clusters of type t. */
bool qcow2_compression_supported(uint32_t t);

#endif

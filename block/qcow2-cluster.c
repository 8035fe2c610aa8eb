/*
 * qcow2: cluster mapping (L1 and L2 tables) and the work of the slow
 * requests.
 *
 * Theory of operation.  A guest offset is found in two steps: the L1
 * table (in memory, s->l1, written through) gives the host offset of an
 * L2 table, one cluster of 64-bit entries, and the entry there describes
 * the guest cluster (Qcow2ClusterType).  L2 tables are read and changed
 * through s->l2_cache, written back later (qcow2-cache.c).
 *
 * qcow2_co_rw() is what a worker thread runs for a request the IOThread
 * could not finish itself (qcow2.c, and qcow2-alloc.c for the allocating
 * writes it does finish itself): it walks the request one guest
 * cluster at a time, holding s->lock only to look at and change the
 * metadata, never across the data I/O of a cluster.
 *
 * Allocating writes.  A write to a cluster that has no data cluster of
 * its own (unallocated, zero, compressed, or shared with a snapshot, i.e.
 * without the COPIED flag) allocates one.  The guest cluster is marked
 * busy in s->allocating while that happens, and any other write-like
 * request to the same guest cluster waits on s->alloc_cond until it is
 * done, then looks again (and finds the cluster allocated); requests to
 * other clusters go on meanwhile, so allocation is serialised per cluster
 * (the IOThread's allocations, qcow2-alloc.c, mark their clusters busy in
 * the same array).
 * The steps:
 *   1. a new cluster at the end of the image is counted (refcount 1, in
 *      the refcount cache);
 *   2. its data is written: the guest's bytes, and around them what the
 *      cluster showed before (backing file, the old or decompressed
 *      data), the copy-on-write; where it showed zeros, nothing, since a
 *      new cluster reads as zeros already (qcow2_reserve());
 *   3. the L2 entry points at it (in the cache; a new or copied L2 table
 *      is counted, written, and flushed with the refcounts before the L1
 *      entry pointing at it is written);
 *   4. the cluster it replaces, if any, is given up (a deferred free).
 * What reaches storage when, and why a crash then leaves a consistent
 * image, is in qcow2-cache.c.  Write-zeroes and discard change the entry
 * (zero flag, or unallocated) without allocating, then give up the old
 * cluster as in step 4.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "qcow2.h"
#include "util/bswap.h"
#include "util/iov.h"

/* The unit metadata is written in: a sector, or the file's alignment. */
static uint64_t qcow2_write_unit(Qcow2State *s)
{
    uint64_t unit = MAX(512, s->bs->child->limits.request_alignment);

    return MIN(unit, s->cluster_size);
}

int qcow2_table_write(Qcow2State *s, Qcow2Io *io, uint64_t offset,
                      const uint8_t *table, uint64_t from, uint64_t len)
{
    uint64_t unit = qcow2_write_unit(s);
    uint64_t a = from & ~(unit - 1);
    uint64_t b = MIN((from + len + unit - 1) & ~(unit - 1), s->cluster_size);

    s->write_gen++;
    return qcow2_pwrite(io->file, offset + a, table + a, b - a);
}

int qcow2_array_write(Qcow2State *s, Qcow2Io *io, uint64_t offset,
                      const uint64_t *arr, uint64_t n, uint64_t index)
{
    uint64_t unit = qcow2_write_unit(s);
    uint64_t first = (index * 8) & ~(unit - 1);
    uint8_t *buf = qcow2_alloc_buf(unit);
    int r;

    s->write_gen++;
    /* Entries past n (the rest of the table's last cluster) read as 0. */
    for (uint64_t k = 0; k < unit / 8; k++) {
        uint64_t i = first / 8 + k;

        st_be64(buf + 8 * k, i < n ? arr[i] : 0);
    }
    r = qcow2_pwrite(io->file, offset + first, buf, unit);
    free(buf);
    return r;
}

/* ------------------------------------------------------------------------ */
/* Mapping                                                                   */

bool qcow2_host_offset_valid(Qcow2State *s, uint64_t off)
{
    /* Cluster 0 is the header: nothing else may point there. */
    return off != 0 && !(off & (s->cluster_size - 1)) &&
           off < s->alloc_end && off <= QCOW2_OFFSET_MASK;
}

Qcow2ClusterType qcow2_entry_type(Qcow2State *s, uint64_t entry)
{
    if (entry & QCOW2_COMPRESSED) {
        return QCOW2_CLUSTER_COMPRESSED;
    }
    if ((entry & QCOW2_ZERO) && s->version >= 3) {
        return QCOW2_CLUSTER_ZERO;
    }
    if (!(entry & QCOW2_OFFSET_MASK)) {
        return QCOW2_CLUSTER_UNALLOCATED;
    }
    return QCOW2_CLUSTER_NORMAL;
}

int qcow2_get_entry(Qcow2State *s, Qcow2Io *io, uint64_t off,
                    uint64_t *entry, bool peek)
{
    uint64_t l1i = qcow2_l1_index(s, off);
    uint64_t l2i = qcow2_l2_index(s, off);
    uint64_t l2off;
    uint8_t *table;
    int r;

    *entry = 0;
    if (l1i >= s->l1_size) {
        return 0;
    }
    l2off = s->l1[l1i] & QCOW2_OFFSET_MASK;
    if (!l2off) {
        return 0;
    }
    if (!qcow2_host_offset_valid(s, l2off)) {
        return -EIO;
    }
    if (peek) {
        table = qcow2_cache_peek(&s->l2_cache, l2off);
        if (!table) {
            return -EAGAIN;
        }
    } else {
        r = qcow2_cache_get(s, io, &s->l2_cache, l2off, &table);
        if (r < 0) {
            return r;
        }
    }
    *entry = ld_be64(table + 8 * l2i);
    return 0;
}

/* The sectors a compressed entry's data lies in: [*start, *start + *len),
 * and where in them the stream starts (*skip). */
static void qcow2_compressed_range(Qcow2State *s, uint64_t e,
                                   uint64_t *start, uint64_t *len,
                                   uint64_t *skip)
{
    uint32_t shift = 62 - (s->cluster_bits - 8);
    uint64_t coff = e & ((1ull << shift) - 1);
    uint64_t nsec = ((e >> shift) & ((1ull << (s->cluster_bits - 8)) - 1)) + 1;

    *start = coff & ~511ull;
    *len = nsec * 512;
    *skip = coff & 511;
}

/* ------------------------------------------------------------------------ */
/* Reading                                                                   */

/* Read [off, off + len) of the backing node: zeros past its end. */
static int qcow2_read_backing(Qcow2Io *io, uint64_t off, uint8_t *buf,
                              uint64_t len)
{
    int64_t blen;
    uint64_t n = 0;
    int r;

    if (io->backing) {
        blen = block_node_get_length(io->backing->bs);
        if (blen > 0 && off < (uint64_t)blen) {
            n = MIN(len, (uint64_t)blen - off);
            r = qcow2_pread(io->backing, off, buf, n);
            if (r < 0) {
                return r;
            }
        }
    }
    memset(buf + n, 0, len - n);
    return 0;
}

static int qcow2_read_compressed(Qcow2State *s, Qcow2Io *io, uint64_t e,
                                 uint64_t in, uint8_t *buf, uint64_t len)
{
    uint64_t start, clen, skip;
    uint8_t *cbuf, *out;
    int r;

    qcow2_compressed_range(s, e, &start, &clen, &skip);
    if (start == 0 || start >= s->alloc_end ||
        clen > s->alloc_end - start) {
        return -EIO;
    }
    cbuf = qcow2_alloc_buf(clen);
    out = qcow2_alloc_buf(s->cluster_size);
    r = qcow2_pread(io->file, start, cbuf, clen);
    if (r == 0) {
        r = qcow2_decompress(s, cbuf + skip, clen - skip, out);
    }
    if (r == 0) {
        memcpy(buf, out + in, len);
    }
    free(cbuf);
    free(out);
    return r;
}

/*
 * Read [off, off + len), inside one guest cluster whose L2 entry is e,
 * into buf.  No lock held.
 */
static int qcow2_read_entry(Qcow2State *s, Qcow2Io *io, uint64_t e,
                            uint64_t off, uint8_t *buf, uint64_t len)
{
    uint64_t in = off & (s->cluster_size - 1);
    uint64_t host = e & QCOW2_OFFSET_MASK;

    switch (qcow2_entry_type(s, e)) {
    case QCOW2_CLUSTER_UNALLOCATED:
        return qcow2_read_backing(io, off, buf, len);
    case QCOW2_CLUSTER_ZERO:
        memset(buf, 0, len);
        return 0;
    case QCOW2_CLUSTER_COMPRESSED:
        return qcow2_read_compressed(s, io, e, in, buf, len);
    case QCOW2_CLUSTER_NORMAL:
        if (!qcow2_host_offset_valid(s, host)) {
            return -EIO;
        }
        return qcow2_pread(io->file, host + in, buf, len);
    }
    return -EIO;
}

static int qcow2_read_part(Qcow2State *s, Qcow2Io *io, uint64_t off,
                           uint8_t *buf, uint64_t len)
{
    uint64_t e;
    int r;

    g_mutex_lock(&s->lock);
    r = qcow2_get_entry(s, io, off, &e, false);
    g_mutex_unlock(&s->lock);
    return r < 0 ? r : qcow2_read_entry(s, io, e, off, buf, len);
}

/* ------------------------------------------------------------------------ */
/* Changing entries                                                          */

static int qcow2_l1_write(Qcow2State *s, Qcow2Io *io, uint64_t l1i)
{
    return qcow2_array_write(s, io, s->l1_offset, s->l1, s->l1_size, l1i);
}

/*
 * The host offset of the L2 table of guest offset off, made writable:
 * allocated if absent, copied if shared with a snapshot (no COPIED flag
 * in its L1 entry).  The new table is counted, written and flushed
 * before the L1 entry points at it.
 */
static int qcow2_l2_writable(Qcow2State *s, Qcow2Io *io, uint64_t off,
                             uint64_t *l2off)
{
    uint64_t l1i = qcow2_l1_index(s, off);
    uint64_t e, old, t;
    uint8_t *copy = NULL, *table;
    int r;

    if (l1i >= s->l1_size) {
        return -EIO;
    }
    e = s->l1[l1i];
    old = e & QCOW2_OFFSET_MASK;
    if (old && !qcow2_host_offset_valid(s, old)) {
        return -EIO;
    }
    if (old && (e & QCOW2_COPIED)) {
        *l2off = old;
        return 0;
    }
    if (old) {
        r = qcow2_cache_get(s, io, &s->l2_cache, old, &table);
        if (r < 0) {
            return r;
        }
        copy = g_memdup2(table, s->cluster_size);
    }
    r = qcow2_alloc_clusters(s, io, 1, &t);
    if (r == 0) {
        r = qcow2_cache_new(s, io, &s->l2_cache, t, &table);
    }
    if (r == 0) {
        if (copy) {
            memcpy(table, copy, s->cluster_size);
        }
        r = qcow2_table_write(s, io, t, table, 0, s->cluster_size);
    }
    g_free(copy);
    if (r == 0) {
        /* Its count and content on storage before the L1 entry. */
        r = qcow2_barrier(s, io);
    }
    if (r < 0) {
        return r;
    }
    s->l1[l1i] = t | QCOW2_COPIED;
    r = qcow2_l1_write(s, io, l1i);
    if (r < 0) {
        s->l1[l1i] = e;
        return r;
    }
    *l2off = t;
    /* The snapshot keeps the old table; ours no longer counts (once the
     * new L1 entry is on storage). */
    if (old) {
        qcow2_defer_free(s, old, s->cluster_size);
    }
    return 0;
}

int qcow2_set_entry(Qcow2State *s, Qcow2Io *io, uint64_t off,
                    uint64_t entry)
{
    uint64_t l2i = qcow2_l2_index(s, off);
    uint64_t l2off = 0;
    uint8_t *table;
    int r;

    r = qcow2_l2_writable(s, io, off, &l2off);
    if (r == 0) {
        r = qcow2_cache_get(s, io, &s->l2_cache, l2off, &table);
    }
    if (r < 0) {
        return r;
    }
    st_be64(table + 8 * l2i, entry);
    qcow2_cache_mark_dirty(&s->l2_cache, l2off);
    return 0;
}

/* The reference entry e held on its host cluster(s), if any, is given up
 * (dropped once the entry that replaced it is on storage). */
static void qcow2_release_entry(Qcow2State *s, uint64_t e)
{
    uint64_t start, len, skip;

    switch (qcow2_entry_type(s, e)) {
    case QCOW2_CLUSTER_COMPRESSED:
        qcow2_compressed_range(s, e, &start, &len, &skip);
        qcow2_defer_free(s, start, len);
        break;
    case QCOW2_CLUSTER_NORMAL:
    case QCOW2_CLUSTER_ZERO:
        start = e & QCOW2_OFFSET_MASK;
        if (start) {
            qcow2_defer_free(s, start, s->cluster_size);
        }
        break;
    default:
        break;
    }
}

bool qcow2_is_allocating(Qcow2State *s, uint64_t gc)
{
    for (guint i = 0; i < s->allocating->len; i++) {
        if (g_array_index(s->allocating, uint64_t, i) == gc) {
            return true;
        }
    }
    return false;
}

void qcow2_cluster_mark_busy(Qcow2State *s, uint64_t off)
{
    uint64_t gc = off >> s->cluster_bits;

    g_array_append_val(s->allocating, gc);
}

/*
 * Wait until no other request changes the guest cluster of off, then mark
 * it ours (qcow2_cluster_unbusy() ends that).  Returns its current entry.
 */
static int qcow2_cluster_busy(Qcow2State *s, Qcow2Io *io, uint64_t off,
                              uint64_t *e)
{
    while (qcow2_is_allocating(s, off >> s->cluster_bits)) {
        s->alloc_waiters++;
        g_cond_wait(&s->alloc_cond, &s->lock);
        s->alloc_waiters--;
    }
    qcow2_cluster_mark_busy(s, off);
    return qcow2_get_entry(s, io, off, e, false);
}

void qcow2_cluster_unbusy(Qcow2State *s, uint64_t off)
{
    uint64_t gc = off >> s->cluster_bits;

    for (guint i = 0; i < s->allocating->len; i++) {
        if (g_array_index(s->allocating, uint64_t, i) == gc) {
            g_array_remove_index_fast(s->allocating, i);
            break;
        }
    }
    /* A broadcast is a futex call even with nobody waiting: skip it
     * then (the count changes under s->lock, as the busy clusters do). */
    if (s->alloc_waiters) {
        g_cond_broadcast(&s->alloc_cond);
    }
}

/* An entry whose cluster a write may overwrite in place. */
static bool qcow2_entry_writable(Qcow2State *s, uint64_t e)
{
    return qcow2_entry_type(s, e) == QCOW2_CLUSTER_NORMAL &&
           (e & QCOW2_COPIED);
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                   */

/*
 * What a write writes: bytes of iov[0..niov) from pos on (the guest's
 * buffers, or a buffer of zeros).  Written from where they are, never
 * copied.
 */
typedef struct Qcow2Data {
    const struct iovec *iov;
    int niov;
    uint64_t pos;
} Qcow2Data;

/* Append to v the iovecs of bytes [src->pos, src->pos + len) of src. */
static void qcow2_data_slice(const Qcow2Data *src, uint64_t len, GArray *v)
{
    uint64_t skip = src->pos;

    for (int i = 0; i < src->niov && len; i++) {
        struct iovec part = src->iov[i];

        if (skip >= part.iov_len) {
            skip -= part.iov_len;
            continue;
        }
        part.iov_base = (uint8_t *)part.iov_base + skip;
        part.iov_len = MIN(part.iov_len - skip, len);
        skip = 0;
        len -= part.iov_len;
        g_array_append_val(v, part);
    }
}

static void qcow2_iov_add(GArray *v, void *base, uint64_t len)
{
    struct iovec part = { .iov_base = base, .iov_len = len };

    if (len) {
        g_array_append_val(v, part);
    }
}

bool qcow2_entry_reads_zero(Qcow2State *s, uint64_t e)
{
    Qcow2ClusterType t = qcow2_entry_type(s, e);

    return t == QCOW2_CLUSTER_ZERO ||
           (t == QCOW2_CLUSTER_UNALLOCATED && !s->backing);
}

/*
 * Allocate, fill and map new data clusters for the write of len bytes of
 * src at guest offset off, whose cluster is busy and has entry e0: that
 * cluster and those after it that the write reaches, need a cluster of
 * their own too and are free to take (a run of at most
 * QCOW2_MAX_RUN_BYTES), get contiguous new clusters, written in one
 * request: the copy-on-write head of the first cluster, the guest's
 * bytes, the copy-on-write tail of the last.  A head or tail that reads
 * as zeros is left out: the new clusters read as zeros until written
 * (qcow2_reserve()), so a 4 KiB write into an empty cluster writes
 * 4 KiB, not the whole cluster.  Returns the bytes of src written, or
 * -errno.  s->lock held on entry and exit, dropped for the data I/O; the
 * run's clusters are not busy any more on return.
 */
static int64_t qcow2_write_alloc(Qcow2State *s, Qcow2Io *io, uint64_t off,
                                 uint64_t e0, const Qcow2Data *src,
                                 uint64_t len)
{
    uint64_t cs = s->cluster_size, in = off & (cs - 1), start = off - in;
    uint64_t max = MIN((in + len + cs - 1) / cs, QCOW2_MAX_RUN_BYTES / cs);
    g_autofree uint64_t *e = g_new(uint64_t, MAX(max, 1));
    uint64_t k = 1, n, end, wstart, wend, host = 0;
    uint8_t *head = NULL, *tail = NULL;
    GArray *v;
    int r;

    e[0] = e0;
    while (k < max) {
        uint64_t o = start + k * cs;

        if (qcow2_is_allocating(s, o >> s->cluster_bits) ||
            qcow2_get_entry(s, io, o, &e[k], false) < 0 ||
            qcow2_entry_writable(s, e[k])) {
            break;
        }
        qcow2_cluster_mark_busy(s, o);
        k++;
    }
    n = MIN(k * cs - in, len);
    end = in + n;                /* where the guest's bytes end in the run */
    /* The part of the run written: [wstart, wend). */
    wstart = in && !qcow2_entry_reads_zero(s, e[0]) ? 0 : in;
    wend = end < k * cs && !qcow2_entry_reads_zero(s, e[k - 1]) ?
           k * cs : end;
    r = qcow2_alloc_clusters(s, io, k, &host);
    if (r == 0) {
        g_mutex_unlock(&s->lock);
        v = g_array_new(FALSE, FALSE, sizeof(struct iovec));
        /* Copy-on-write of what the first and last cluster showed
         * outside the write (one read if that is the same cluster). */
        if (wstart < in || (k == 1 && wend > end)) {
            head = qcow2_alloc_buf(cs);
            r = qcow2_read_entry(s, io, e[0], start, head, cs);
        }
        if (r == 0 && k > 1 && wend > end) {
            tail = qcow2_alloc_buf(cs);
            r = qcow2_read_entry(s, io, e[k - 1], start + (k - 1) * cs,
                                 tail, cs);
        }
        if (head) {
            qcow2_iov_add(v, head + wstart, in - wstart);
        }
        qcow2_data_slice(src, n, v);
        if (tail) {
            qcow2_iov_add(v, tail + end - (k - 1) * cs, wend - end);
        } else if (k == 1 && head) {
            qcow2_iov_add(v, head + end, wend - end);
        }
        if (r == 0) {
            r = qcow2_sync_iov(io->file, BLOCK_OP_WRITE, host + wstart,
                               (struct iovec *)v->data, v->len,
                               wend - wstart);
        }
        g_array_unref(v);
        free(head);
        free(tail);
        g_mutex_lock(&s->lock);
    }
    for (uint64_t i = 0; i < k; i++) {
        if (r == 0) {
            r = qcow2_set_entry(s, io, start + i * cs,
                                (host + i * cs) | QCOW2_COPIED);
        }
        if (r == 0) {
            qcow2_release_entry(s, e[i]);
        }
        qcow2_cluster_unbusy(s, start + i * cs);
    }
    return r < 0 ? r : (int64_t)n;
}

/*
 * Write the start of len bytes of src at guest offset off: the rest of
 * its cluster in place if that is allocated, else a run of new clusters
 * (qcow2_write_alloc()).  Returns the bytes written, or -errno.
 */
static int64_t qcow2_write_step(Qcow2State *s, Qcow2Io *io, uint64_t off,
                                const Qcow2Data *src, uint64_t len)
{
    uint64_t cs = s->cluster_size, in = off & (cs - 1);
    uint64_t n = MIN(cs - in, len), e, host;
    GArray *v;
    int64_t r;

    g_mutex_lock(&s->lock);
    r = qcow2_get_entry(s, io, off, &e, false);
    if (r == 0 && !qcow2_entry_writable(s, e)) {
        r = qcow2_cluster_busy(s, io, off, &e);
        if (r == 0 && !qcow2_entry_writable(s, e)) {
            r = qcow2_write_alloc(s, io, off, e, src, len);
            g_mutex_unlock(&s->lock);
            return r;
        }
        /* Another request allocated it while we waited. */
        qcow2_cluster_unbusy(s, off);
    }
    g_mutex_unlock(&s->lock);
    if (r < 0) {
        return r;
    }
    host = e & QCOW2_OFFSET_MASK;
    if (!qcow2_host_offset_valid(s, host)) {
        return -EIO;
    }
    v = g_array_new(FALSE, FALSE, sizeof(struct iovec));
    qcow2_data_slice(src, n, v);
    r = qcow2_sync_iov(io->file, BLOCK_OP_WRITE, host + in,
                       (struct iovec *)v->data, v->len, n);
    g_array_unref(v);
    return r < 0 ? r : (int64_t)n;
}

/* Write len bytes of src (from src->pos on) at guest offset off. */
static int qcow2_write_range(Qcow2State *s, Qcow2Io *io, uint64_t off,
                             Qcow2Data src, uint64_t len)
{
    for (uint64_t done = 0; done < len;) {
        int64_t n = qcow2_write_step(s, io, off + done, &src, len - done);

        if (n < 0) {
            return n;
        }
        done += n;
        src.pos += n;
    }
    return 0;
}

/*
 * Write-zeroes or discard of one whole guest cluster: set its entry to
 * what new_entry() says, then drop what the old entry held.
 */
static int qcow2_remap_part(Qcow2State *s, Qcow2Io *io, uint64_t off,
                            bool zero, bool may_unmap)
{
    Qcow2ClusterType t;
    uint64_t e, ne;
    int r;

    g_mutex_lock(&s->lock);
    r = qcow2_cluster_busy(s, io, off, &e);
    t = qcow2_entry_type(s, e);
    if (r < 0) {
        goto out;
    }
    if (zero) {
        if (t == QCOW2_CLUSTER_ZERO ||
            (t == QCOW2_CLUSTER_UNALLOCATED && !s->backing)) {
            goto out;            /* reads as zeros already */
        }
        if (t == QCOW2_CLUSTER_NORMAL && (e & QCOW2_COPIED) && !may_unmap) {
            /* Keep the cluster (preallocated), flag it zero. */
            r = qcow2_set_entry(s, io, off, e | QCOW2_ZERO);
            goto out;
        }
        ne = QCOW2_ZERO;
    } else {
        if (t == QCOW2_CLUSTER_UNALLOCATED) {
            goto out;
        }
        /* With a backing file, hide it behind zeros (v3) rather than let
         * its old data show through. */
        ne = s->backing ? QCOW2_ZERO : 0;
    }
    r = qcow2_set_entry(s, io, off, ne);
    if (r == 0) {
        qcow2_release_entry(s, e);
    }
out:
    qcow2_cluster_unbusy(s, off);
    g_mutex_unlock(&s->lock);
    return r;
}

/* Write n zeros (inside one cluster) at guest offset off, from *zeros
 * (one zeroed cluster, made on first use). */
static int qcow2_write_zeros(Qcow2State *s, Qcow2Io *io, uint64_t off,
                             uint64_t n, uint8_t **zeros)
{
    struct iovec z;

    if (!*zeros) {
        *zeros = qcow2_alloc_buf(s->cluster_size);
        memset(*zeros, 0, s->cluster_size);
    }
    z = (struct iovec) { .iov_base = *zeros, .iov_len = n };
    return qcow2_write_range(s, io, off, (Qcow2Data) { &z, 1, 0 }, n);
}

/* ------------------------------------------------------------------------ */
/* A request, cluster by cluster                                             */

int qcow2_co_rw(Qcow2State *s, Qcow2Io *io, BlockRequest *req)
{
    uint64_t cs = s->cluster_size;
    uint8_t *buf = NULL, *zeros = NULL;
    int r = 0;

    if (req->op == BLOCK_OP_FLUSH) {
        g_mutex_lock(&s->lock);
        r = qcow2_flush_metadata(s, io);
        g_mutex_unlock(&s->lock);
        return r;
    }
    if (req->op == BLOCK_OP_WRITE) {
        Qcow2Data src = { .iov = req->iov, .niov = req->niov };

        r = qcow2_write_range(s, io, req->offset, src, req->bytes);
        if (r == 0 && (req->flags & BLOCK_REQ_FUA)) {
            /* On stable storage at completion: the data, and the entries
             * of the clusters it allocated (the flush covers both). */
            g_mutex_lock(&s->lock);
            r = qcow2_flush_metadata(s, io);
            g_mutex_unlock(&s->lock);
        }
        return r;
    }
    if (req->op == BLOCK_OP_READ) {
        buf = qcow2_alloc_buf(MIN((uint64_t)req->bytes, cs));
    }
    for (uint64_t pos = 0; pos < (uint64_t)req->bytes && r == 0;) {
        uint64_t off = req->offset + pos;
        uint64_t n = MIN(cs - (off & (cs - 1)), req->bytes - pos);
        bool whole = n == cs;

        switch (req->op) {
        case BLOCK_OP_READ:
            r = qcow2_read_part(s, io, off, buf, n);
            if (r == 0) {
                iov_from_buf(req->iov, req->niov, pos, buf, n);
            }
            break;
        case BLOCK_OP_WRITE_ZEROES:
            if (whole && s->version >= 3) {
                r = qcow2_remap_part(s, io, off, true,
                                     req->flags & BLOCK_REQ_MAY_UNMAP);
                break;
            }
            r = qcow2_write_zeros(s, io, off, n, &zeros);
            break;
        case BLOCK_OP_DISCARD:
            /* Partial clusters, and v2 images with a backing file (no
             * zero flag to hide it), keep their data: a discard is a
             * hint. */
            if (whole && (s->version >= 3 || !s->backing)) {
                r = qcow2_remap_part(s, io, off, false, true);
            }
            break;
        default:
            r = -EINVAL;
        }
        pos += n;
    }
    free(buf);
    free(zeros);
    return r;
}

int qcow2_grow_l1(Qcow2State *s, Qcow2Io *io, uint64_t size)
{
    uint64_t cs = s->cluster_size, span = cs << s->l2_bits;
    uint64_t n = (size + span - 1) / span, bytes, off;
    uint64_t old_off = s->l1_offset;
    uint64_t old_bytes = ((uint64_t)s->l1_size * 8 + cs - 1) & ~(cs - 1);
    uint8_t *buf, hdr[12];
    int r;

    if (n <= s->l1_size) {
        return 0;
    }
    bytes = (n * 8 + cs - 1) & ~(cs - 1);
    if (bytes > QCOW2_MAX_TABLE_BYTES) {
        return -EFBIG;
    }
    r = qcow2_alloc_clusters(s, io, bytes / cs, &off);
    if (r < 0) {
        return r;
    }
    buf = qcow2_alloc_buf(bytes);
    memset(buf, 0, bytes);
    for (uint64_t i = 0; i < s->l1_size; i++) {
        st_be64(buf + 8 * i, s->l1[i]);
    }
    s->write_gen++;
    r = qcow2_pwrite(io->file, off, buf, bytes);
    free(buf);
    if (r < 0 || (r = qcow2_barrier(s, io)) < 0) {
        return r;
    }
    st_be32(hdr, n);
    st_be64(hdr + 4, off);
    s->write_gen++;
    r = qcow2_pwrite(io->file, QCOW2_HDR_L1, hdr, sizeof(hdr));
    if (r < 0) {
        return r;
    }
    s->l1 = g_renew(uint64_t, s->l1, n);
    memset(s->l1 + s->l1_size, 0, (n - s->l1_size) * 8);
    s->l1_size = n;
    s->l1_offset = off;
    r = qcow2_barrier(s, io);
    if (r == 0 && old_off && old_bytes) {
        r = qcow2_free_clusters(s, io, old_off, old_bytes);
    }
    return r;
}

/*
 * qcow2: refcounts and cluster allocation.
 *
 * Theory of operation.  Every host cluster of the image has a reference
 * count: how many L1/L2 entries, tables and header fields point at it.
 * The counts live in refcount blocks (one cluster of refcount_bits-wide
 * entries each), found through the refcount table, which the header
 * points at.  The table is kept in memory (s->rct, host byte order) and
 * written through; blocks go through s->rc_cache (write-back, with the
 * ordering rules of qcow2-cache.c).
 *
 * Allocation takes clusters from the end of the image (s->alloc_end, the
 * file's length rounded up to a cluster at open): no free-space search,
 * and a cluster freed by a discard is never handed out again in this
 * run (its space is returned to the file system by a discard of the
 * file instead).  A new cluster's refcount reaches the file before
 * anything on storage points at it (qcow2-cache.c).
 *
 * A refcount block that does not exist yet is made at the end of the
 * image.  If it lands in the range it covers itself (the usual case, as
 * allocation is at the end) its own entry is set in it before it is
 * written; if not, it is counted in the block that covers it first.  It
 * is written whole, then (after a barrier) the table entry pointing at it.
 *
 * When the refcount table is too small, a new one at least twice the
 * size is built at the end of the image, with the refcount blocks its own
 * clusters need made after it (all in memory first, so the coverage can
 * be checked and the layout redone before anything is written): the new
 * blocks, the increments in old blocks, the new table, a barrier, the
 * header's two table fields in one write, a barrier, and only then are
 * the old table's clusters freed.  A crash at any point leaves either
 * table in force, every cluster it describes counted; at worst leaks.
 *
 * All functions here run with s->lock held, in a worker or the main
 * thread; qcow2_rc_alloc_cached() (no I/O: the cached blocks only) in an
 * IOThread too (qcow2-alloc.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "qcow2.h"
#include "util/bswap.h"

uint64_t qcow2_rc_get_entry(Qcow2State *s, const uint8_t *block,
                            uint64_t i)
{
    uint32_t order = s->refcount_order;

    switch (order) {
    case 3:
        return block[i];
    case 4:
        return ld_be16(block + 2 * i);
    case 5:
        return ld_be32(block + 4 * i);
    case 6:
        return ld_be64(block + 8 * i);
    default: {
        /* Sub-byte widths: entry 0 in the least significant bits. */
        uint32_t bits = 1u << order, per_byte = 8 / bits;

        return (block[i / per_byte] >> ((i % per_byte) * bits)) &
               ((1u << bits) - 1);
    }
    }
}

static void qcow2_rc_set_entry(Qcow2State *s, uint8_t *block, uint64_t i,
                               uint64_t v)
{
    uint32_t order = s->refcount_order;

    switch (order) {
    case 3:
        block[i] = v;
        break;
    case 4:
        st_be16(block + 2 * i, v);
        break;
    case 5:
        st_be32(block + 4 * i, v);
        break;
    case 6:
        st_be64(block + 8 * i, v);
        break;
    default: {
        uint32_t bits = 1u << order, per_byte = 8 / bits;
        uint32_t shift = (i % per_byte) * bits;
        uint8_t mask = ((1u << bits) - 1) << shift;

        block[i / per_byte] = (block[i / per_byte] & ~mask) |
                              ((v << shift) & mask);
        break;
    }
    }
}

static uint64_t qcow2_rc_max(Qcow2State *s)
{
    return s->refcount_order == 6 ? UINT64_MAX :
           (1ull << (1u << s->refcount_order)) - 1;
}

/* The refcount table index and block index of host offset off. */
static uint64_t qcow2_rc_table_index(Qcow2State *s, uint64_t off)
{
    return off >> (s->cluster_bits + s->rc_block_bits);
}

static uint64_t qcow2_rc_block_index(Qcow2State *s, uint64_t off)
{
    return (off >> s->cluster_bits) & ((1ull << s->rc_block_bits) - 1);
}

/* Write entry ti of the refcount table. */
static int qcow2_rct_write_entry(Qcow2State *s, Qcow2Io *io, uint64_t ti)
{
    return qcow2_array_write(s, io, s->rct_offset, s->rct, s->rct_entries,
                             ti);
}

static int qcow2_rc_grow_table(Qcow2State *s, Qcow2Io *io, uint64_t need);

/*
 * Take bytes at the end of the image.  Space is never reused (a freed
 * cluster stays a hole or a leak until qemu-img tidies it), and
 * s->alloc_end starts at the file's end at open, so what this returns
 * has not been written since the file was opened: it lies past the
 * file's end, where reads give zeros, or in the hole a later write past
 * it leaves.  qcow2_write_alloc() counts on that: it writes no zeros
 * into a new cluster.
 */
uint64_t qcow2_reserve(Qcow2State *s, uint64_t bytes)
{
    uint64_t start = s->alloc_end;

    s->alloc_end += bytes;
    qcow2_grow_file(s, s->alloc_end);
    return start;
}

void qcow2_grow_file(Qcow2State *s, uint64_t len)
{
    /* Each node down to the file's (a filter such as blkdebug may sit
     * between): a filter passes requests on without the child's bounds
     * check, and the file driver cuts back a write past its own length. */
    for (BlockNode *n = s->bs->child; n; n = n->child) {
        block_node_grow_length(n, len);
    }
}

/*
 * Make the refcount block for table index ti (absent) at the end of the
 * image; *boff gets its offset.
 */
static int qcow2_rc_new_block(Qcow2State *s, Qcow2Io *io, uint64_t ti,
                              uint64_t *boff)
{
    uint64_t off = qcow2_reserve(s, s->cluster_size);
    bool self = qcow2_rc_table_index(s, off) == ti;
    uint8_t *block;
    int r;

    if (!self) {
        /* Counted in the block of its own range (made first if need be). */
        r = qcow2_rc_update(s, io, off, 1, NULL);
        if (r < 0) {
            return r;
        }
    }
    r = qcow2_cache_new(s, io, &s->rc_cache, off, &block);
    if (r < 0) {
        return r;
    }
    if (self) {
        qcow2_rc_set_entry(s, block, qcow2_rc_block_index(s, off), 1);
    }
    r = qcow2_table_write(s, io, off, block, 0, s->cluster_size);
    if (r < 0) {
        return r;
    }
    r = qcow2_barrier(s, io);
    if (r < 0) {
        return r;
    }
    s->rct[ti] = off;
    r = qcow2_rct_write_entry(s, io, ti);
    if (r < 0) {
        s->rct[ti] = 0;
        return r;
    }
    *boff = off;
    return 0;
}

/*
 * The refcount block covering host offset off: loaded, or (alloc) made
 * if absent.  Without alloc, an absent block gives *block = NULL.
 */
static int qcow2_rc_block(Qcow2State *s, Qcow2Io *io, uint64_t off,
                          bool alloc, uint8_t **block, uint64_t *boff)
{
    uint64_t ti = qcow2_rc_table_index(s, off);
    uint64_t e;
    int r;

    *block = NULL;
    if (ti >= s->rct_entries) {
        if (!alloc) {
            return 0;
        }
        r = qcow2_rc_grow_table(s, io, ti);
        if (r < 0) {
            return r;
        }
    }
    e = s->rct[ti] & QCOW2_REFT_OFFSET_MASK;
    if (e == 0) {
        if (!alloc) {
            return 0;
        }
        r = qcow2_rc_new_block(s, io, ti, &e);
        if (r < 0) {
            return r;
        }
    } else if (!qcow2_host_offset_valid(s, e)) {
        return -EIO;
    }
    *boff = e;
    return qcow2_cache_get(s, io, &s->rc_cache, e, block);
}

int qcow2_rc_update(Qcow2State *s, Qcow2Io *io, uint64_t off, int delta,
                    uint64_t *newval)
{
    uint64_t boff = 0, i, v;
    uint8_t *block;
    int r;

    r = qcow2_rc_block(s, io, off, delta > 0, &block, &boff);
    if (r < 0) {
        return r;
    }
    if (!block) {
        return -EIO;             /* dropping a count that is not there */
    }
    i = qcow2_rc_block_index(s, off);
    v = qcow2_rc_get_entry(s, block, i);
    if ((delta < 0 && v < (uint64_t)-delta) ||
        (delta > 0 && v > qcow2_rc_max(s) - delta)) {
        return -ERANGE;
    }
    v += delta;
    qcow2_rc_set_entry(s, block, i, v);
    qcow2_cache_mark_dirty(&s->rc_cache, boff);
    if (newval) {
        *newval = v;
    }
    return 0;
}

int qcow2_alloc_clusters(Qcow2State *s, Qcow2Io *io, uint64_t n,
                         uint64_t *off)
{
    uint64_t start;
    int r;

    /* Reserve the range first: refcount blocks made on the way go after
     * it.  On an error the range stays reserved (leaked, never reused). */
    start = qcow2_reserve(s, n * s->cluster_size);
    for (uint64_t k = 0; k < n; k++) {
        r = qcow2_rc_update(s, io, start + k * s->cluster_size, 1, NULL);
        if (r < 0) {
            return r;
        }
    }
    *off = start;
    return 0;
}

/* The cached refcount block covering host offset off, or NULL (absent,
 * or not cached). */
static uint8_t *qcow2_rc_peek(Qcow2State *s, uint64_t off, uint64_t *boff)
{
    uint64_t ti = qcow2_rc_table_index(s, off);

    if (ti >= s->rct_entries) {
        return NULL;
    }
    *boff = s->rct[ti] & QCOW2_REFT_OFFSET_MASK;
    if (!qcow2_host_offset_valid(s, *boff)) {
        return NULL;
    }
    return qcow2_cache_peek(&s->rc_cache, *boff);
}

int qcow2_rc_alloc_cached(Qcow2State *s, uint64_t n, uint64_t *off)
{
    uint64_t cs = s->cluster_size, start = s->alloc_end, boff;

    /* All or nothing: look first (peeks load nothing, evict nothing). */
    for (uint64_t c = start; c < start + n * cs; c += cs) {
        uint8_t *block = qcow2_rc_peek(s, c, &boff);

        if (!block ||
            qcow2_rc_get_entry(s, block, qcow2_rc_block_index(s, c))) {
            return -EAGAIN;
        }
    }
    qcow2_reserve(s, n * cs);
    for (uint64_t c = start; c < start + n * cs; c += cs) {
        uint8_t *block = qcow2_rc_peek(s, c, &boff);

        qcow2_rc_set_entry(s, block, qcow2_rc_block_index(s, c), 1);
        qcow2_cache_mark_dirty(&s->rc_cache, boff);
    }
    *off = start;
    return 0;
}

int qcow2_free_clusters(Qcow2State *s, Qcow2Io *io, uint64_t off,
                        uint64_t bytes)
{
    uint64_t cs = s->cluster_size;
    uint64_t first = off & ~(cs - 1), last = (off + bytes - 1) & ~(cs - 1);

    for (uint64_t c = first; c <= last; c += cs) {
        uint64_t v;
        int r = qcow2_rc_update(s, io, c, -1, &v);

        if (r < 0) {
            return r;
        }
        if (v == 0) {
            /* Unused now: give the space back (a no-op unless the file
             * node was opened with discard=unmap). */
            qcow2_discard_file(io, c, cs);
        }
    }
    return 0;
}

/*
 * The layout of a grown refcount table: n entries at s->alloc_end, the
 * blocks its own clusters need right after it.  Returns false if n is
 * too small to cover that layout (the caller retries with more).
 */
typedef struct Qcow2RcLayout {
    uint64_t n;                  /* entries */
    uint64_t *table;             /* host order, n entries */
    uint64_t start, end;         /* [start, end): table, then new blocks */
    GArray *old_counted;         /* clusters counted in existing blocks */
    GPtrArray *blocks;           /* new blocks' buffers, in order */
} Qcow2RcLayout;

static void qcow2_rc_layout_free(Qcow2RcLayout *l)
{
    g_free(l->table);
    if (l->old_counted) {
        g_array_unref(l->old_counted);
    }
    if (l->blocks) {
        g_ptr_array_free(l->blocks, TRUE);
    }
    *l = (Qcow2RcLayout) { 0 };
}

static bool qcow2_rc_layout(Qcow2State *s, uint64_t n, Qcow2RcLayout *l)
{
    uint64_t cs = s->cluster_size;

    l->n = n;
    l->table = g_new0(uint64_t, n);
    memcpy(l->table, s->rct, s->rct_entries * 8);
    l->start = s->alloc_end;
    l->end = l->start + n * 8;                   /* n fills whole clusters */
    l->old_counted = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    l->blocks = g_ptr_array_new_with_free_func(free);
    for (uint64_t c = l->start; c < l->end; c += cs) {
        uint64_t ti = qcow2_rc_table_index(s, c);
        uint64_t boff;

        if (ti >= n) {
            return false;
        }
        if (!l->table[ti]) {
            uint8_t *b = qcow2_alloc_buf(cs);

            memset(b, 0, cs);
            l->table[ti] = l->end;
            l->end += cs;
            g_ptr_array_add(l->blocks, b);
        }
        boff = l->table[ti];
        if (boff >= l->start) {
            uint8_t *b = g_ptr_array_index(l->blocks,
                                           (boff - l->start - n * 8) / cs);
            uint64_t i = qcow2_rc_block_index(s, c);

            qcow2_rc_set_entry(s, b, i, qcow2_rc_get_entry(s, b, i) + 1);
        } else {
            g_array_append_val(l->old_counted, c);
        }
    }
    return true;
}

/* Write what qcow2_rc_layout() planned and switch the header to it. */
static int qcow2_rc_layout_commit(Qcow2State *s, Qcow2Io *io,
                                  Qcow2RcLayout *l)
{
    uint64_t cs = s->cluster_size, tbytes = l->n * 8;
    uint64_t old_off = s->rct_offset, old_bytes = s->rct_entries * 8;
    uint8_t *buf, hdr[12];
    int r = 0;

    qcow2_reserve(s, l->end - l->start);
    s->write_gen++;
    for (guint k = 0; k < l->blocks->len && r == 0; k++) {
        r = qcow2_pwrite(io->file, l->start + tbytes + k * cs,
                         g_ptr_array_index(l->blocks, k), cs);
    }
    for (guint k = 0; k < l->old_counted->len && r == 0; k++) {
        r = qcow2_rc_update(s, io, g_array_index(l->old_counted, uint64_t, k),
                            1, NULL);
    }
    if (r < 0) {
        return r;
    }
    buf = qcow2_alloc_buf(tbytes);
    for (uint64_t k = 0; k < l->n; k++) {
        st_be64(buf + 8 * k, l->table[k]);
    }
    s->write_gen++;
    r = qcow2_pwrite(io->file, l->start, buf, tbytes);
    free(buf);
    if (r < 0 || (r = qcow2_barrier(s, io)) < 0) {
        return r;
    }
    st_be64(hdr, l->start);
    st_be32(hdr + 8, tbytes / cs);
    s->write_gen++;
    r = qcow2_pwrite(io->file, QCOW2_HDR_REFTABLE, hdr, sizeof(hdr));
    if (r < 0) {
        return r;
    }
    g_free(s->rct);
    s->rct = g_steal_pointer(&l->table);
    s->rct_entries = l->n;
    s->rct_offset = l->start;
    /* The old table is unused now; only after the switch is durable may
     * its clusters be counted down (the barrier before the next entry
     * that depends on it takes care of that). */
    r = qcow2_barrier(s, io);
    return r < 0 ? r : qcow2_free_clusters(s, io, old_off, old_bytes);
}

static int qcow2_rc_grow_table(Qcow2State *s, Qcow2Io *io, uint64_t need)
{
    uint64_t per_cluster = s->cluster_size / 8;
    uint64_t n = MAX(need + 1, s->rct_entries * 2);
    Qcow2RcLayout l = { 0 };
    int r;

    for (;;) {
        n = (n + per_cluster - 1) / per_cluster * per_cluster;
        if (n * 8 > QCOW2_MAX_TABLE_BYTES) {
            return -EFBIG;
        }
        if (qcow2_rc_layout(s, n, &l)) {
            break;
        }
        n = qcow2_rc_table_index(s, l.end) + 1 + per_cluster;
        qcow2_rc_layout_free(&l);
    }
    r = qcow2_rc_layout_commit(s, io, &l);
    qcow2_rc_layout_free(&l);
    return r;
}

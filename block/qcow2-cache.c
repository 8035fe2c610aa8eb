/*
 * qcow2: the metadata caches (L2 tables, refcount blocks) and writing
 * them back.
 *
 * Theory of operation.  Each cache holds a fixed number of tables, one
 * cluster each, keyed by their host offset (a hash index), evicting the
 * least recently used.  They are write-back, as QEMU's are: a request
 * changes a table in the cache and marks it dirty, and the table is
 * written when it is evicted, or when the node is flushed (a guest's
 * FLUSH, a close, an inactivation).  What a crash may lose is therefore
 * what the guest wrote since its last flush, as with QEMU; what it
 * leaves on storage must stay consistent, which three rules give:
 *   - a dirty L2 table is written only after every dirty refcount block
 *     has been written and flushed (qcow2_barrier()): an entry on
 *     storage never points at a cluster whose count is not there yet;
 *   - the reference an entry gave up (an overwritten compressed cluster,
 *     a snapshot's shared one, a discarded cluster) is not dropped in the
 *     refcount blocks at once: it waits in s->pending_frees until the
 *     dirty L2 tables have been written and flushed
 *     (qcow2_flush_metadata()), so no count falls while an entry on
 *     storage still points at its cluster;
 *   - a refcount block is written on its own whenever (eviction, or
 *     before an L2 table): its content never holds a decrement too early,
 *     by the rule above.
 * A crash between any two writes leaves at worst clusters counted and not
 * referenced: leaks, which qemu-img check -r leaks tidies.  Structural
 * changes (a new L2 table or refcount block, a grown table, the header)
 * are written at once, after a barrier, by their callers.
 *
 * Everything here runs with s->lock held, in a worker or the main thread;
 * peek and mark_dirty, which do no I/O, in an IOThread too (its fast
 * paths, qcow2.c and qcow2-alloc.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "qcow2.h"

void qcow2_cache_init(Qcow2Cache *c, unsigned n, uint64_t cluster_size)
{
    c->n = n;
    c->clock = 0;
    c->ndirty = 0;
    c->entries = g_new0(Qcow2CacheEntry, n);
    c->index = g_hash_table_new(g_int64_hash, g_int64_equal);
    for (unsigned i = 0; i < n; i++) {
        c->entries[i].data = qcow2_alloc_buf(cluster_size);
    }
}

void qcow2_cache_destroy(Qcow2Cache *c)
{
    for (unsigned i = 0; i < c->n; i++) {
        free(c->entries[i].data);
    }
    g_free(c->entries);
    if (c->index) {
        g_hash_table_unref(c->index);
    }
    *c = (Qcow2Cache) { 0 };
}

uint8_t *qcow2_cache_peek(Qcow2Cache *c, uint64_t offset)
{
    Qcow2CacheEntry *e = g_hash_table_lookup(c->index, &offset);

    if (!e) {
        return NULL;
    }
    e->used = ++c->clock;
    return e->data;
}

/* Write table e back (whole), clean now. */
static int qcow2_cache_write_entry(Qcow2State *s, Qcow2Io *io,
                                   Qcow2Cache *c, Qcow2CacheEntry *e)
{
    int r;

    s->write_gen++;
    r = qcow2_pwrite(io->file, e->offset, e->data, s->cluster_size);
    if (r == 0) {
        e->dirty = false;
        c->ndirty--;
    }
    return r;
}

int qcow2_cache_write_dirty(Qcow2State *s, Qcow2Io *io, Qcow2Cache *c)
{
    for (unsigned i = 0; i < c->n && c->ndirty; i++) {
        if (c->entries[i].dirty) {
            int r = qcow2_cache_write_entry(s, io, c, &c->entries[i]);

            if (r < 0) {
                return r;
            }
        }
    }
    return 0;
}

/*
 * The least recently used slot, written back if dirty (an L2 table after
 * the refcounts: the barrier), emptied and given to offset.
 */
static int qcow2_cache_take(Qcow2State *s, Qcow2Io *io, Qcow2Cache *c,
                            uint64_t offset, Qcow2CacheEntry **out)
{
    Qcow2CacheEntry *victim = &c->entries[0];
    int r;

    for (unsigned i = 1; i < c->n && victim->offset; i++) {
        if (!c->entries[i].offset || c->entries[i].used < victim->used) {
            victim = &c->entries[i];
        }
    }
    if (victim->dirty) {
        r = c == &s->l2_cache ? qcow2_barrier(s, io) : 0;
        if (r == 0) {
            r = qcow2_cache_write_entry(s, io, c, victim);
        }
        if (r < 0) {
            return r;
        }
    }
    if (victim->offset) {
        g_hash_table_remove(c->index, &victim->offset);
    }
    victim->offset = offset;
    victim->used = ++c->clock;
    g_hash_table_insert(c->index, &victim->offset, victim);
    *out = victim;
    return 0;
}

static void qcow2_cache_drop(Qcow2Cache *c, Qcow2CacheEntry *e)
{
    g_hash_table_remove(c->index, &e->offset);
    e->offset = 0;
}

int qcow2_cache_get(Qcow2State *s, Qcow2Io *io, Qcow2Cache *c,
                    uint64_t offset, uint8_t **table)
{
    Qcow2CacheEntry *e;
    int r;

    *table = qcow2_cache_peek(c, offset);
    if (*table) {
        return 0;
    }
    r = qcow2_cache_take(s, io, c, offset, &e);
    if (r < 0) {
        return r;
    }
    r = qcow2_pread(io->file, offset, e->data, s->cluster_size);
    if (r < 0) {
        qcow2_cache_drop(c, e);
        return r;
    }
    *table = e->data;
    return 0;
}

int qcow2_cache_new(Qcow2State *s, Qcow2Io *io, Qcow2Cache *c,
                    uint64_t offset, uint8_t **table)
{
    Qcow2CacheEntry *e = g_hash_table_lookup(c->index, &offset);
    int r;

    if (!e) {
        r = qcow2_cache_take(s, io, c, offset, &e);
        if (r < 0) {
            return r;
        }
    }
    memset(e->data, 0, s->cluster_size);
    *table = e->data;
    return 0;
}

void qcow2_cache_mark_dirty(Qcow2Cache *c, uint64_t offset)
{
    Qcow2CacheEntry *e = g_hash_table_lookup(c->index, &offset);

    g_assert(e);                 /* the caller just looked it up */
    if (!e->dirty) {
        e->dirty = true;
        c->ndirty++;
    }
}

void qcow2_cache_clear(Qcow2Cache *c)
{
    g_assert(c->ndirty == 0);
    g_hash_table_remove_all(c->index);
    for (unsigned i = 0; i < c->n; i++) {
        c->entries[i].offset = 0;
    }
}

/* ------------------------------------------------------------------------ */
/* Barriers and flushes                                                      */

int qcow2_barrier(Qcow2State *s, Qcow2Io *io)
{
    uint64_t gen;
    int r;

    r = qcow2_cache_write_dirty(s, io, &s->rc_cache);
    if (r < 0 || s->flushed_gen >= s->write_gen) {
        return r;
    }
    gen = s->write_gen;
    r = qcow2_flush_file(s, io);
    if (r == 0) {
        s->flushed_gen = gen;
    }
    return r;
}

void qcow2_defer_free(Qcow2State *s, uint64_t off, uint64_t bytes)
{
    Qcow2Extent x = { off, bytes };

    g_array_append_val(s->pending_frees, x);
}

bool qcow2_metadata_clean(Qcow2State *s)
{
    return !s->l2_cache.ndirty && !s->rc_cache.ndirty &&
           !s->pending_frees->len;
}

int qcow2_flush_metadata(Qcow2State *s, Qcow2Io *io)
{
    int r = 0;

    if (s->l2_cache.ndirty) {
        r = qcow2_barrier(s, io);
        if (r == 0) {
            r = qcow2_cache_write_dirty(s, io, &s->l2_cache);
        }
    }
    if (r == 0 && s->pending_frees->len) {
        guint done = 0;

        /* The entries that gave these up must be on storage first. */
        r = qcow2_barrier(s, io);
        for (; r == 0 && done < s->pending_frees->len; done++) {
            Qcow2Extent *x = &g_array_index(s->pending_frees, Qcow2Extent,
                                            done);

            r = qcow2_free_clusters(s, io, x->off, x->bytes);
        }
        /* Those dropped (and on error the one that failed half way: a
         * leak rather than a count dropped twice) are done with. */
        g_array_remove_range(s->pending_frees, 0, done);
    }
    if (r == 0) {
        r = qcow2_cache_write_dirty(s, io, &s->rc_cache);
    }
    if (r == 0) {
        uint64_t gen = s->write_gen;

        /* Unconditional: the data written meanwhile counts too. */
        r = qcow2_flush_file(s, io);
        if (r == 0) {
            s->flushed_gen = gen;
        }
    }
    return r;
}

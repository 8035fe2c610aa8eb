/*
 * The guest side of the virtio fuzz harnesses: see ring.h.
 *
 * The ring writes mirror what a driver does (descriptors, then the avail
 * entry, then avail->idx with a release store), but nothing here checks
 * that what it writes makes sense: that is the input's choice.
 */
#include <endian.h>
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>
#include <glib.h>

#include "ring.h"
#include "util/error.h"

/* Turns of the loop fuzz_run() allows: far more than any input needs. */
#define FUZZ_RUN_MAX_TURNS  100000

static int mem_fd = -1;
static bool verbose;
static uint8_t *mem_base;
static AioContext *ctx;

/* ------------------------------------------------------------------------ */
/* Input                                                                     */

/* ------------------------------------------------------------------------ */
/* Guest memory and the loop                                                 */

/* Millions of inputs break queues on purpose: keep the log for real
 * trouble unless asked. */
static GLogWriterOutput fuzz_log_writer(GLogLevelFlags level,
                                        const GLogField *fields,
                                        gsize n_fields, gpointer data)
{
    if (!(level & (G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL)) && !verbose) {
        return G_LOG_WRITER_HANDLED;
    }
    return g_log_writer_default(level, fields, n_fields, data);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    Error *err = NULL;

    verbose = getenv("FUZZ_VERBOSE") != NULL;
    g_log_set_writer_func(fuzz_log_writer, NULL, NULL);
    mem_fd = memfd_create("fuzz-guest", MFD_CLOEXEC);
    FUZZ_CHECK(mem_fd >= 0);
    FUZZ_CHECK(ftruncate(mem_fd, FUZZ_MEM_SIZE) == 0);
    mem_base = mmap(NULL, FUZZ_MEM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
                    mem_fd, 0);
    FUZZ_CHECK(mem_base != MAP_FAILED);

    ctx = aio_context_new(&err);
    FUZZ_CHECK(ctx && !err);
    /* No busy polling: a turn does the same thing every time. */
    aio_context_set_poll_params(ctx, &(AioPollParams){ .max_ns = 0 });
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const FuzzHarness *h = &fuzz_harness;
    FuzzReader in = { data, size };

    memset(mem_base, 0, FUZZ_MEM_SIZE);
    h->setup(&in);
    for (unsigned i = 0; i < h->max_ops && !fuzz_reader_done(&in); i++) {
        h->ops[fuzz_read_u8(&in) % h->nops](&in);
        if (h->after) {
            h->after();
        }
    }
    h->teardown();
    /* Nothing of this input may run in the next one. */
    FUZZ_CHECK(!aio_poll(ctx, false));
    return 0;
}

void *fuzz_gpa(uint64_t gpa, uint64_t len)
{
    if (gpa > FUZZ_MEM_SIZE || len > FUZZ_MEM_SIZE - gpa) {
        return NULL;
    }
    return mem_base + gpa;
}

uint64_t fuzz_qva(uint64_t gpa)
{
    if (gpa < FUZZ_REGION_B) {
        return FUZZ_QVA_A + gpa;
    }
    if (gpa < FUZZ_HOLE) {
        return FUZZ_QVA_B + (gpa - FUZZ_REGION_B);
    }
    if (gpa >= FUZZ_REGION_C && gpa < FUZZ_MEM_SIZE) {
        return FUZZ_QVA_C + (gpa - FUZZ_REGION_C);
    }
    return 0x1000 + gpa;         /* not a front-end address of any region */
}

GuestMemory *fuzz_guest_memory(FuzzMemLayout layout)
{
    GuestMemRegionDesc r[] = {
        { FUZZ_REGION_A, FUZZ_REGION_B - FUZZ_REGION_A, FUZZ_QVA_A,
          FUZZ_REGION_A },
        { FUZZ_REGION_B, FUZZ_HOLE - FUZZ_REGION_B, FUZZ_QVA_B,
          FUZZ_REGION_B },
        { FUZZ_REGION_C, FUZZ_MEM_SIZE - FUZZ_REGION_C, FUZZ_QVA_C,
          FUZZ_REGION_C },
    };
    GuestMemory *mem = guest_memory_new_empty(), *next;
    Error *err = NULL;

    if (layout == FUZZ_MEM_B_MOVED) {
        r[1].qva = FUZZ_QVA_B + 0x100000000ull;
    }
    for (unsigned i = 0; i < G_N_ELEMENTS(r); i++) {
        next = guest_memory_add(mem, &r[i], mem_fd, &err);
        FUZZ_CHECK(next && !err);
        guest_memory_unref(mem);
        mem = next;
    }
    if (layout == FUZZ_MEM_NO_C) {
        /* As REM_MEM_REG makes it: the other regions stay mapped. */
        next = guest_memory_remove(mem, &r[2], &err);
        FUZZ_CHECK(next && !err);
        guest_memory_unref(mem);
        mem = next;
    }
    return mem;
}

uint64_t fuzz_host_to_gpa(const GuestMemory *mem, const void *p, size_t len)
{
    uintptr_t q = (uintptr_t)p;

    for (unsigned i = 0; i < mem->nregions; i++) {
        const GuestMemRegion *r = &mem->regions[i];
        uintptr_t h = (uintptr_t)r->host;

        if (q >= h && len <= r->size && q - h <= r->size - len) {
            return r->gpa + (q - h);
        }
    }
    FUZZ_CHECK(!"host range outside every region of the table");
    return 0;
}

bool fuzz_verbose(void)
{
    return verbose;
}

AioContext *fuzz_ctx(void)
{
    return ctx;
}

void fuzz_run(void)
{
    unsigned turns = 0;

    while (aio_poll(ctx, false)) {
        /* A loop that never settles is a hang in the device. */
        FUZZ_CHECK(++turns < FUZZ_RUN_MAX_TURNS);
    }
}

/* ------------------------------------------------------------------------ */
/* A ring                                                                    */

static int fuzz_eventfd(void)
{
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

    FUZZ_CHECK(fd >= 0);
    return fd;
}

void fuzz_ring_init(FuzzRing *r, unsigned index, unsigned num,
                    uint64_t desc_gpa, uint64_t avail_gpa, uint64_t used_gpa,
                    uint64_t features, uint16_t base)
{
    VirtQueueAddrs addrs = {
        .desc_qva = fuzz_qva(desc_gpa),
        .avail_qva = fuzz_qva(avail_gpa),
        .used_qva = fuzz_qva(used_gpa),
    };
    int kick = fuzz_eventfd(), err = fuzz_eventfd();

    *r = (FuzzRing) {
        .num = num, .desc_gpa = desc_gpa, .avail_gpa = avail_gpa,
        .used_gpa = used_gpa, .avail_idx = base, .used_seen = base,
        .vq = virtqueue_new(index),
    };
    FUZZ_CHECK(virtqueue_set_num(r->vq, num) == 0);
    virtqueue_set_base(r->vq, base);
    virtqueue_set_addrs(r->vq, &addrs);
    r->kick_fd = dup(kick);
    r->err_fd = dup(err);
    FUZZ_CHECK(r->kick_fd >= 0 && r->err_fd >= 0);
    virtqueue_set_kick_fd(r->vq, kick);
    virtqueue_set_call_fd(r->vq, fuzz_eventfd());
    virtqueue_set_err_fd(r->vq, err);
    virtqueue_set_features(r->vq, features);
    virtqueue_set_aio_context(r->vq, ctx);
    virtqueue_set_enabled(r->vq, true);
}

void fuzz_ring_cleanup(FuzzRing *r)
{
    FUZZ_CHECK(!virtqueue_is_started(r->vq));
    FUZZ_CHECK(virtqueue_inflight(r->vq) == 0);
    virtqueue_free(r->vq);
    close(r->kick_fd);
    close(r->err_fd);
    r->vq = NULL;
}

void fuzz_write_desc(uint64_t table_gpa, unsigned i, uint64_t addr,
                     uint32_t len, uint16_t flags, uint16_t next)
{
    VRingDesc d = {
        .addr = htole64(addr), .len = htole32(len),
        .flags = htole16(flags), .next = htole16(next),
    };
    void *p = fuzz_gpa(table_gpa + (uint64_t)i * sizeof(d), sizeof(d));

    if (p) {
        memcpy(p, &d, sizeof(d));
    }
}

static VRingAvail *fuzz_ring_avail(FuzzRing *r)
{
    return fuzz_gpa(r->avail_gpa, 4 + 2 * (uint64_t)r->num);
}

void fuzz_ring_add_avail(FuzzRing *r, uint16_t head)
{
    VRingAvail *avail = fuzz_ring_avail(r);

    if (avail && r->avail_gpa % 2 == 0) {
        atomic_store_explicit(&avail->ring[r->avail_idx % r->num],
                              htole16(head), memory_order_relaxed);
    }
    r->avail_idx++;
}

void fuzz_ring_set_avail_idx(FuzzRing *r, uint16_t idx)
{
    VRingAvail *avail = fuzz_ring_avail(r);

    if (avail && r->avail_gpa % 2 == 0) {
        /* Release: the ring entries before the index. */
        atomic_store_explicit(&avail->idx, htole16(idx), memory_order_release);
    }
}

void fuzz_ring_kick(FuzzRing *r)
{
    FUZZ_CHECK(eventfd_write(r->kick_fd, 1) == 0);
}

bool fuzz_ring_next_used(FuzzRing *r, uint32_t *id, uint32_t *len)
{
    VRingUsed *used = fuzz_gpa(r->used_gpa, 4 + 8 * (uint64_t)r->num);
    uint16_t idx;
    VRingUsedElem e;

    if (!used || r->used_gpa % 4 != 0) {
        return false;
    }
    idx = le16toh(atomic_load_explicit(&used->idx, memory_order_acquire));
    if (idx == r->used_seen) {
        return false;
    }
    memcpy(&e, &used->ring[r->used_seen % r->num], sizeof(e));
    r->used_seen++;
    *id = le32toh(e.id);
    *len = le32toh(e.len);
    return true;
}

bool fuzz_ring_err_signalled(FuzzRing *r)
{
    eventfd_t v;

    return eventfd_read(r->err_fd, &v) == 0 && v > 0;
}

/* ------------------------------------------------------------------------ */
/* Chains                                                                    */

/* Where the next buffer goes. */
static uint64_t data_next;

void fuzz_data_reset(uint64_t data_gpa)
{
    data_next = data_gpa;
}

/* len bytes of buffer memory (8-byte aligned), or UINT64_MAX if full. */
static uint64_t fuzz_data_alloc(uint64_t len)
{
    uint64_t gpa = data_next;

    if (gpa + len > FUZZ_HOLE) {
        return UINT64_MAX;
    }
    data_next = (gpa + len + 7) & ~7ull;
    return gpa;
}

/* Place segment s of flags sflags; false if memory is short. */
static bool fuzz_seg_place(FuzzSeg *s, uint8_t sflags)
{
    if (sflags & FUZZ_SEG_BAD) {
        /* Half in B, half in the hole (all of it, when len < 2). */
        s->gpa = FUZZ_HOLE - s->len / 2;
        return true;
    }
    if ((sflags & FUZZ_SEG_CROSS_AB) && s->len >= 2 &&
        data_next < FUZZ_REGION_B - s->len / 2) {
        data_next = FUZZ_REGION_B - s->len / 2;
    }
    s->gpa = fuzz_data_alloc(s->len);
    return s->gpa != UINT64_MAX;
}

bool fuzz_chain_add(FuzzRing *r, FuzzReader *in, FuzzChain *c)
{
    unsigned nseg = fuzz_read_u8(in) % FUZZ_CHAIN_MAX_SEGS + 1;
    uint8_t cflags = fuzz_read_u8(in);
    bool indirect = cflags & FUZZ_CHAIN_INDIRECT;
    uint8_t sflags[FUZZ_CHAIN_MAX_SEGS];
    uint64_t table;
    unsigned ndesc = indirect ? 1 : nseg;
    uint16_t n;
    bool ok = true;

    memset(c, 0, sizeof(*c));
    c->nseg = nseg;
    for (unsigned i = 0; i < nseg; i++) {
        FuzzSeg *s = &c->seg[i];

        sflags[i] = fuzz_read_u8(in);
        s->len = fuzz_read_u16(in) % (FUZZ_SEG_MAX_LEN + 1);
        if (sflags[i] & FUZZ_SEG_EMPTY) {
            s->len = 0;
        }
        s->write = sflags[i] & FUZZ_SEG_WRITE;
        c->bad |= (sflags[i] & FUZZ_SEG_BAD) != 0;
        ok = ok && fuzz_seg_place(s, sflags[i]);
    }
    n = fuzz_read_u16(in);
    table = indirect ? fuzz_data_alloc(nseg * sizeof(VRingDesc)) : 0;
    if (!ok || table == UINT64_MAX || r->desc_next + ndesc > r->num) {
        /* Still consume the bytes, so the next chain reads its own. */
        fuzz_read_skip(in, n);
        return false;
    }

    /* Device-readable bytes from the input; writable ones poisoned. */
    for (unsigned i = 0; i < nseg; i++) {
        FuzzSeg *s = &c->seg[i];
        uint8_t *p = fuzz_gpa(s->gpa, s->len);

        if (s->write) {
            if (p) {
                memset(p, 0xee, s->len);
            }
            if (s->len) {
                c->last_in_gpa = s->gpa + s->len - 1;
            }
            c->last_in_len = s->len;
            c->in_bytes += s->len;
        } else if (p) {
            c->out_bytes += s->len;
            uint32_t k = MIN((uint32_t)n, s->len);

            fuzz_read_bytes(in, p, k);
            n -= k;
        }
    }
    fuzz_read_skip(in, n);

    /* The descriptors: in the ring's table, or in an indirect table. */
    c->head = r->desc_next;
    for (unsigned i = 0; i < nseg; i++) {
        uint64_t t = indirect ? table : r->desc_gpa;
        unsigned idx = indirect ? i : r->desc_next + i;
        uint16_t flags = (c->seg[i].write ? VRING_DESC_F_WRITE : 0) |
                         (i + 1 < nseg ? VRING_DESC_F_NEXT : 0);

        fuzz_write_desc(t, idx, c->seg[i].gpa, c->seg[i].len, flags, idx + 1);
    }
    if (indirect) {
        fuzz_write_desc(r->desc_gpa, r->desc_next, table,
                        nseg * sizeof(VRingDesc), VRING_DESC_F_INDIRECT, 0);
    }
    r->desc_next += ndesc;
    fuzz_ring_add_avail(r, c->head);
    fuzz_ring_set_avail_idx(r, r->avail_idx);
    return true;
}

uint8_t *fuzz_chain_byte(const FuzzChain *c, bool write, uint64_t off)
{
    for (unsigned i = 0; i < c->nseg; i++) {
        const FuzzSeg *s = &c->seg[i];

        if (s->write != write) {
            continue;
        }
        if (off < s->len) {
            return fuzz_gpa(s->gpa + off, 1);
        }
        off -= s->len;
    }
    return NULL;
}

uint32_t fuzz_chain_le32(const FuzzChain *c, bool write, uint64_t off)
{
    uint32_t v = 0;

    for (unsigned i = 0; i < 4; i++) {
        const uint8_t *p = fuzz_chain_byte(c, write, off + i);

        v |= (uint32_t)(p ? *p : 0) << (8 * i);
    }
    return v;
}

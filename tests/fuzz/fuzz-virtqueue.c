/*
 * Fuzz harness: split virtqueue parsing (hw/virtio/virtqueue.c).
 *
 * Theory of operation: the input is a driver that writes anything it
 * likes into guest memory (ring.h: three regions, a hole, an end),
 * places the three ring areas where it wants and then plays a sequence of
 * operations on one VirtQueue started in the harness's own AioContext.
 * The device is this file's handler: it pops until the ring is empty or
 * broken, and either pushes each element at once or holds it for a later
 * PUSH (so elements stay in flight across memory table changes, stops and
 * restarts).
 *
 * Input: a header
 *     u8  log2 of the ring size (the low 4 bits, mod 11) | 0x10 EVENT_IDX
 *         | 0x20 INDIRECT | 0x40 hold popped elements
 *     u32 desc, avail, used guest addresses
 *     u16 the first avail / used index
 * then operations (ops[] below), each a u8 opcode (mod their number) and
 * its arguments:
 *     DESC     u16 i, u32 addr, u32 len, u16 flags, u16 next: ring table
 *              entry i (mod size)
 *     DESC64   the same with a u64 addr
 *     TDESC    u32 table, u8 i, u32 addr, u32 len, u16 flags, u16 next:
 *              entry i of a table anywhere (an indirect one)
 *     AVAIL    u16 head: the next avail entry (not published)
 *     PUBLISH  avail->idx = the next avail index
 *     SET_IDX  u16 idx: avail->idx = idx (jumps, too)
 *     KICK     kick and run the loop until it settles
 *     PUSH     u8 n, u8 len mode: push the n oldest held elements
 *     POKE     u32 gpa, u8 n (mod 32), n bytes: raw guest writes (flags,
 *              used_event, the used ring...)
 *     SET_MEM  u8 layout: a new memory table (FuzzMemLayout)
 *     RESTART  u8 mode, u16 base: stop, drain, start again (at base if
 *              mode is odd, else where the queue stopped)
 *     CALL_FD  u8: a new call eventfd (odd) or none
 *
 * Checked: every popped element is the chain the avail ring names, its
 * iovecs lie inside one region of the table in force and are at most
 * VIRTQUEUE_MAX_SEGS, in_bytes is their sum; a push publishes exactly one
 * used entry with its head and length (unless the queue is broken); a
 * broken queue signals its error eventfd once, stays broken until it is
 * restarted, pops -EIO and never calls the handler; the in buffers of
 * elements still in flight stay mapped (they are written at push, after
 * their table was replaced and released by the harness); nothing is left
 * in flight or scheduled at the end.
 */
#include <endian.h>
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/eventfd.h>
#include <glib.h>

#include "ring.h"
#include "hw/virtio/virtqueue.h"

#define CFG_EVENT_IDX   0x10
#define CFG_INDIRECT    0x20
#define CFG_HOLD        0x40

/* Elements the harness holds at most; the handler pushes the oldest when
 * it needs room. */
#define HELD_MAX        32

/* Operations per input at most (longer inputs are cut). */
#define OPS_MAX         1024

typedef struct Fuzz {
    FuzzRing r;
    bool hold;
    uint16_t next_pop;           /* the avail index the next pop takes */
    uint16_t next_push;          /* the used index the next push fills */
    bool broken_seen;            /* since the last start */
    const GuestMemory *mem;      /* the queue's table (its reference) */
    unsigned nheld;
    unsigned held_first;         /* a ring of HELD_MAX elements */
    VirtQueueElement held[HELD_MAX];
} Fuzz;

static Fuzz f;

/* ------------------------------------------------------------------------ */
/* The device's side                                                         */

/* The avail entry the next pop must take, from the harness's mapping. */
static uint16_t expected_head(void)
{
    const VRingAvail *avail = fuzz_gpa(f.r.avail_gpa, 4 + 2 * f.r.num);

    FUZZ_CHECK(avail);
    return le16toh(atomic_load_explicit(&avail->ring[f.next_pop % f.r.num],
                                        memory_order_relaxed));
}

/* A walk through an element's out or in iovecs, as guest addresses. */
typedef struct IovCursor {
    const GuestMemory *mem;
    const struct iovec *iov;
    unsigned n, i;
    size_t off;
} IovCursor;

/* The next len bytes of the cursor must be guest memory from gpa on. */
static void iov_expect(IovCursor *c, uint64_t gpa, uint64_t len)
{
    while (len > 0) {
        const struct iovec *v;
        size_t n;

        while (c->i < c->n && c->off == c->iov[c->i].iov_len) {
            c->i++;
            c->off = 0;
        }
        FUZZ_CHECK(c->i < c->n);
        v = &c->iov[c->i];
        n = MIN(len, v->iov_len - c->off);
        FUZZ_CHECK(fuzz_host_to_gpa(c->mem, (uint8_t *)v->iov_base + c->off,
                                    n) == gpa);
        c->off += n;
        gpa += n;
        len -= n;
    }
}

static bool iov_at_end(IovCursor *c)
{
    while (c->i < c->n && c->off == c->iov[c->i].iov_len) {
        c->i++;
        c->off = 0;
    }
    return c->i == c->n;
}

/* A ring of num descriptors and one table of at most 1024. */
#define WALK_MAX        (VIRTQUEUE_MAX_SIZE + VIRTQUEUE_MAX_SIZE + 1)

/* One buffer of the chain at the next avail entry, as the driver wrote
 * it. */
typedef struct Buf {
    uint64_t gpa;
    uint32_t len;
    bool write;
} Buf;

static Buf walk[WALK_MAX];
static unsigned nwalk;

/*
 * Before a pop: the buffers of the chain at head, in order, through
 * indirect tables, as a driver that follows the rules reads them; false
 * if the walk does not end (then the device must refuse the chain).  Read
 * before the pop, as the device reads them: its pop writes avail_event,
 * which may lie anywhere.
 */
static bool walk_chain(uint16_t head)
{
    uint64_t table = f.r.desc_gpa;
    unsigned i = head;

    nwalk = 0;
    for (unsigned steps = 0; steps < WALK_MAX; steps++) {
        const VRingDesc *p = fuzz_gpa(table + 16 * (uint64_t)i, 16);
        VRingDesc d;

        if (!p) {
            return false;
        }
        memcpy(&d, p, sizeof(d));
        if (le16toh(d.flags) & VRING_DESC_F_INDIRECT) {
            table = le64toh(d.addr);
            i = 0;
            continue;
        }
        walk[nwalk++] = (Buf) {
            le64toh(d.addr), le32toh(d.len),
            le16toh(d.flags) & VRING_DESC_F_WRITE,
        };
        if (!(le16toh(d.flags) & VRING_DESC_F_NEXT)) {
            return true;
        }
        i = le16toh(d.next);
    }
    return false;
}

/* The element the device popped must be the chain walk_chain() saw. */
static void check_elem(const VirtQueueElement *e, uint16_t head,
                       const GuestMemory *mem)
{
    IovCursor out = { mem, e->out_sg, e->out_num, 0, 0 };
    IovCursor in = { mem, e->in_sg, e->in_num, 0, 0 };
    uint64_t in_bytes = 0;

    FUZZ_CHECK(e->head == head && head < f.r.num);
    FUZZ_CHECK(e->out_num + e->in_num <= VIRTQUEUE_MAX_SEGS);
    for (unsigned i = 0; i < nwalk; i++) {
        iov_expect(walk[i].write ? &in : &out, walk[i].gpa, walk[i].len);
        in_bytes += walk[i].write ? walk[i].len : 0;
    }
    FUZZ_CHECK(iov_at_end(&out) && iov_at_end(&in));
    FUZZ_CHECK(in_bytes == e->in_bytes);
}

/* Note the queue is broken: its error eventfd must have fired once. */
static void note_broken(void)
{
    if (virtqueue_is_broken(f.r.vq) && !f.broken_seen) {
        FUZZ_CHECK(fuzz_ring_err_signalled(&f.r));
        f.broken_seen = true;
    }
    if (f.broken_seen) {
        FUZZ_CHECK(virtqueue_is_broken(f.r.vq));
    }
}

/* Write len bytes of e's in buffers and push it; check the used ring. */
static void push_elem(VirtQueueElement *e, uint32_t len)
{
    VRingUsed *used = fuzz_gpa(f.r.used_gpa, 4 + 8 * (uint64_t)f.r.num);
    uint32_t left = len;

    for (unsigned i = 0; i < e->in_num && left; i++) {
        size_t n = MIN(left, e->in_sg[i].iov_len);

        memset(e->in_sg[i].iov_base, 0x5a, n);
        left -= n;
    }
    if (used) {
        /* Whatever the driver poked there: the device writes it all. */
        memset(&used->ring[f.next_push % f.r.num], 0xff,
               sizeof(VRingUsedElem));
        used->idx = htole16((uint16_t)~(f.next_push + 1));
    }
    virtqueue_push(f.r.vq, e, len);
    if (used && le16toh(used->idx) == (uint16_t)(f.next_push + 1)) {
        VRingUsedElem u;

        memcpy(&u, &used->ring[f.next_push % f.r.num], sizeof(u));
        FUZZ_CHECK(le32toh(u.id) == e->head && le32toh(u.len) == len);
    } else {
        /* Only a queue that lost its rings publishes nothing. */
        FUZZ_CHECK(virtqueue_is_broken(f.r.vq));
    }
    f.next_push++;
}

static uint32_t push_len(const VirtQueueElement *e, uint8_t mode)
{
    switch (mode % 3) {
    case 0:
        return e->in_bytes;
    case 1:
        return 0;
    default:
        return e->in_bytes / 2;
    }
}

static void push_held(unsigned n, uint8_t mode)
{
    while (n-- && f.nheld) {
        VirtQueueElement *e = &f.held[f.held_first];

        push_elem(e, push_len(e, mode));
        f.held_first = (f.held_first + 1) % HELD_MAX;
        f.nheld--;
    }
}

static void handler(VirtQueue *vq, void *opaque)
{
    FUZZ_CHECK(vq == f.r.vq && opaque == &f);
    FUZZ_CHECK(!virtqueue_is_broken(vq));
    for (;;) {
        VirtQueueElement *e;
        uint16_t head = 0;
        bool walked = false;
        bool have_avail = fuzz_gpa(f.r.avail_gpa, 4 + 2 * f.r.num) != NULL;
        int r;

        if (f.nheld == HELD_MAX) {
            push_held(1, 0);
        }
        e = &f.held[(f.held_first + f.nheld) % HELD_MAX];
        if (have_avail) {
            head = expected_head();
            walked = head < f.r.num && walk_chain(head);
        }
        r = virtqueue_pop(vq, e);
        if (r < 0) {
            FUZZ_CHECK(r == -EIO && virtqueue_is_broken(vq));
            FUZZ_CHECK(virtqueue_pop(vq, e) == -EIO);
            note_broken();
            return;
        }
        if (r == 0) {
            return;
        }
        FUZZ_CHECK(have_avail && walked);
        /* The table in force is the one the queue has just used. */
        check_elem(e, head, f.mem);
        f.next_pop++;
        if (f.hold) {
            f.nheld++;
        } else {
            push_elem(e, e->in_bytes);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Operations                                                                */

static void start(GuestMemory *mem)
{
    f.mem = mem;
    f.broken_seen = false;
    if (virtqueue_start(f.r.vq, mem, handler, &f) < 0) {
        FUZZ_CHECK(virtqueue_is_broken(f.r.vq) || !virtqueue_is_ready(f.r.vq));
        f.mem = NULL;
    }
    /* The queue has its own reference: dropping ours lets a table it
     * released too early be unmapped under it. */
    guest_memory_unref(mem);
    note_broken();
}

/* Stop the queue and give back what is in flight (the device's drain). */
static uint16_t stop(void)
{
    uint16_t base = virtqueue_stop(f.r.vq);

    push_held(HELD_MAX, 0);
    FUZZ_CHECK(virtqueue_inflight(f.r.vq) == 0);
    f.mem = NULL;
    return base;
}

static void op_desc_addr(FuzzReader *in, bool wide)
{
    uint16_t i = fuzz_read_u16(in);
    uint64_t addr = wide ? fuzz_read_u64(in) : fuzz_read_u32(in);
    uint32_t len = fuzz_read_u32(in);
    uint16_t flags = fuzz_read_u16(in);

    fuzz_write_desc(f.r.desc_gpa, i % f.r.num, addr, len, flags,
                    fuzz_read_u16(in));
}

static void op_desc(FuzzReader *in)
{
    op_desc_addr(in, false);
}

static void op_desc64(FuzzReader *in)
{
    op_desc_addr(in, true);
}

static void op_tdesc(FuzzReader *in)
{
    uint32_t table = fuzz_read_u32(in);
    uint8_t i = fuzz_read_u8(in);
    uint32_t addr = fuzz_read_u32(in);
    uint32_t len = fuzz_read_u32(in);
    uint16_t flags = fuzz_read_u16(in);

    fuzz_write_desc(table, i, addr, len, flags, fuzz_read_u16(in));
}

static void op_poke(FuzzReader *in)
{
    uint32_t gpa = fuzz_read_u32(in);
    uint8_t n = fuzz_read_u8(in) % 32;
    uint8_t buf[32];
    void *p = fuzz_gpa(gpa, n);

    fuzz_read_bytes(in, buf, n);
    if (p) {
        memcpy(p, buf, n);
    }
}

static void op_restart(FuzzReader *in)
{
    uint8_t mode = fuzz_read_u8(in);
    uint16_t base = fuzz_read_u16(in);
    uint16_t stopped = stop();

    if (!(mode & 1)) {
        base = stopped;
    }
    virtqueue_set_base(f.r.vq, base);
    f.next_pop = base;
    f.next_push = base;
    f.r.avail_idx = base;
    f.r.used_seen = base;
    start(fuzz_guest_memory(FUZZ_MEM_ALL));
}

static void op_set_mem(FuzzReader *in)
{
    GuestMemory *mem = fuzz_guest_memory(fuzz_read_u8(in) % FUZZ_MEM_LAYOUTS);

    if (virtqueue_is_started(f.r.vq)) {
        f.mem = virtqueue_set_memory(f.r.vq, mem) == 0 ? mem : NULL;
    }
    guest_memory_unref(mem);
}

static void op_call_fd(FuzzReader *in)
{
    int fd = fuzz_read_u8(in) & 1 ? eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC) : -1;

    virtqueue_set_call_fd(f.r.vq, fd);
}

static void op_avail(FuzzReader *in)
{
    fuzz_ring_add_avail(&f.r, fuzz_read_u16(in));
}

static void op_publish(FuzzReader *in)
{
    fuzz_ring_set_avail_idx(&f.r, f.r.avail_idx);
}

static void op_set_idx(FuzzReader *in)
{
    f.r.avail_idx = fuzz_read_u16(in);
    fuzz_ring_set_avail_idx(&f.r, f.r.avail_idx);
}

static void op_kick(FuzzReader *in)
{
    fuzz_ring_kick(&f.r);
    fuzz_run();
}

static void op_push(FuzzReader *in)
{
    uint8_t n = fuzz_read_u8(in);

    push_held(n, fuzz_read_u8(in));
    fuzz_run();
}

/* The operations, in opcode order (the header comment's list). */
static FuzzOpFn *const ops[] = {
    op_desc, op_desc64, op_tdesc, op_avail, op_publish, op_set_idx, op_kick,
    op_push, op_poke, op_set_mem, op_restart, op_call_fd,
};

static void setup(FuzzReader *in)
{
    uint8_t cfg = fuzz_read_u8(in);
    unsigned num = 1u << (cfg % 16 % 11);
    uint64_t features = 0;
    uint32_t desc = fuzz_read_u32(in);
    uint32_t avail = fuzz_read_u32(in);
    uint32_t used = fuzz_read_u32(in);
    uint16_t base = fuzz_read_u16(in);

    memset(&f, 0, sizeof(f));
    f.hold = cfg & CFG_HOLD;
    f.next_pop = base;
    f.next_push = base;
    if (cfg & CFG_EVENT_IDX) {
        features |= UINT64_C(1) << VIRTIO_RING_F_EVENT_IDX;
    }
    if (cfg & CFG_INDIRECT) {
        features |= UINT64_C(1) << VIRTIO_RING_F_INDIRECT_DESC;
    }
    fuzz_ring_init(&f.r, 0, num, desc, avail, used, features, base);
    start(fuzz_guest_memory(FUZZ_MEM_ALL));
    fuzz_run();
}

static void teardown(void)
{
    stop();
    fuzz_run();
    fuzz_ring_cleanup(&f.r);
}

FUZZ_HARNESS(setup, ops, OPS_MAX, note_broken, teardown);

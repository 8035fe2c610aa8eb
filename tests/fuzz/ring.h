/*
 * The guest side of the virtio fuzz harnesses (fuzz-virtqueue.c,
 * fuzz-virtio-blk.c, fuzz-virtio-scsi.c): an input reader, guest memory
 * the harness owns, and the driver's half of split rings, written by hand
 * into that memory so that an input can describe any ring, well formed or
 * not.
 *
 * Guest memory is one memfd of FUZZ_MEM_SIZE bytes.  The harness sees it
 * all at one mapping (fuzz_gpa(): guest address = file offset); the device
 * sees it through a GuestMemory of three regions, each mapped on its own:
 *
 *   A  [0x00000, 0x18000)  front-end address FUZZ_QVA_A + gpa
 *   B  [0x18000, 0x30000)  FUZZ_QVA_B + (gpa - 0x18000): adjacent to A in
 *                          guest space, so a buffer crossing 0x18000 is
 *                          split into two iovecs
 *      [0x30000, 0x31800)  a hole: no region
 *   C  [0x31800, 0x40000)  starts at an unaligned file offset
 *      [0x40000, ...)      past the end of guest memory
 *
 * The device's queues run in one AioContext whose home thread is the
 * harness's (fuzz_ctx()), with polling off, so an input runs the same way
 * every time: fuzz_run() turns the loop until nothing is left to do.
 *
 * Every function fails the run (abort) rather than returning an error it
 * does not expect.
 */
#ifndef TESTS_FUZZ_RING_H
#define TESTS_FUZZ_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "hw/virtio/guest-memory.h"
#include "hw/virtio/virtqueue.h"
#include "util/aio.h"
#include "helpers.h"

/* ------------------------------------------------------------------------ */
/* Input                                                                     */

/* The input is read with helpers.h's FuzzReader (reads past its end give
 * zeroes). */

/*
 * A harness: what LLVMFuzzerTestOneInput() (ring.c, the same for
 * every harness) runs for each input, after zeroing guest memory: setup
 * reads the input's header and makes the device; then operations, each a
 * u8 opcode (mod nops) naming ops[opcode] and that operation's arguments,
 * until the input ends or max_ops have run, after (if not NULL) after
 * each; then teardown, which stops and frees everything.  Each harness
 * defines fuzz_harness with FUZZ_HARNESS().
 */
typedef void FuzzOpFn(FuzzReader *in);

typedef struct FuzzHarness {
    void (*setup)(FuzzReader *in);
    FuzzOpFn *const *ops;
    unsigned nops;
    unsigned max_ops;
    void (*after)(void);
    void (*teardown)(void);
} FuzzHarness;

extern const FuzzHarness fuzz_harness;

#define FUZZ_HARNESS(setup, ops, max_ops, after, teardown)                 \
    const FuzzHarness fuzz_harness = {                                     \
        setup, ops, G_N_ELEMENTS(ops), max_ops, after, teardown,           \
    }

/* ------------------------------------------------------------------------ */
/* Guest memory and the loop                                                 */

#define FUZZ_MEM_SIZE     0x40000u
#define FUZZ_REGION_A     0x00000u
#define FUZZ_REGION_B     0x18000u
#define FUZZ_HOLE         0x30000u
#define FUZZ_REGION_C     0x31800u
#define FUZZ_QVA_A        0x7f0000000000ull
#define FUZZ_QVA_B        0x7e0000000000ull
#define FUZZ_QVA_C        0x7d0000000000ull

/* Variants of the device's table (fuzz_guest_memory()). */
typedef enum FuzzMemLayout {
    FUZZ_MEM_ALL,                /* A, B, C */
    FUZZ_MEM_NO_C,               /* A and B: C's buffers become invalid */
    FUZZ_MEM_B_MOVED,            /* B at another front-end address: rings
                                  * placed in B no longer translate */
    FUZZ_MEM_LAYOUTS,
} FuzzMemLayout;

/*
 * LLVMFuzzerInitialize(), the same for every harness: once per process,
 * the memfd, the harness's mapping, the context; messages below CRITICAL
 * are dropped unless FUZZ_VERBOSE is set.
 */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The harness's pointer to [gpa, gpa + len), or NULL outside the memfd. */
void *fuzz_gpa(uint64_t gpa, uint64_t len);

/* The front-end address of gpa in the FUZZ_MEM_ALL layout (an address
 * that translates nowhere for the hole and past the end). */
uint64_t fuzz_qva(uint64_t gpa);

/* A new table of the given layout, mapped afresh (the caller owns the
 * reference: the last unref unmaps it, so a device that keeps using a
 * table it released faults). */
GuestMemory *fuzz_guest_memory(FuzzMemLayout layout);

/* The guest address of host address p in mem's mappings; [p, p + len)
 * must lie inside one region (checked). */
uint64_t fuzz_host_to_gpa(const GuestMemory *mem, const void *p, size_t len);

AioContext *fuzz_ctx(void);

/* Whether FUZZ_VERBOSE is set: log messages, and what the harness sees. */
bool fuzz_verbose(void);

/* Turn the loop (not blocking) until a turn does nothing; bounded. */
void fuzz_run(void);

/* ------------------------------------------------------------------------ */
/* A ring: the driver's half and the device's VirtQueue                      */

typedef struct FuzzRing {
    unsigned num;
    uint64_t desc_gpa, avail_gpa, used_gpa;
    uint16_t avail_idx;          /* the driver's next avail entry */
    uint16_t used_seen;          /* the next used entry to read */
    unsigned desc_next;          /* fuzz_chain_add()'s next descriptor */
    VirtQueue *vq;
    int kick_fd;                 /* the driver's ends of the eventfds */
    int err_fd;
} FuzzRing;

/*
 * A VirtQueue of index for a ring of num entries at those guest
 * addresses, with features, in fuzz_ctx(), enabled (not started); its
 * kick, call and error eventfds are fresh, the harness keeping ends of the
 * kick and error ones.  base: the first avail/used index.
 */
void fuzz_ring_init(FuzzRing *r, unsigned index, unsigned num,
                    uint64_t desc_gpa, uint64_t avail_gpa, uint64_t used_gpa,
                    uint64_t features, uint16_t base);

/* Free the VirtQueue (stopped, nothing in flight) and the driver's fds. */
void fuzz_ring_cleanup(FuzzRing *r);

/* Driver writes: descriptor i of the table at table_gpa, an avail entry,
 * avail->idx.  Nothing is written outside the memfd. */
void fuzz_write_desc(uint64_t table_gpa, unsigned i, uint64_t addr,
                     uint32_t len, uint16_t flags, uint16_t next);
void fuzz_ring_add_avail(FuzzRing *r, uint16_t head);
void fuzz_ring_set_avail_idx(FuzzRing *r, uint16_t idx);
void fuzz_ring_kick(FuzzRing *r);

/* The next used entry: true with its id and len, false if none.  The
 * device never publishes more entries than it was given: checked. */
bool fuzz_ring_next_used(FuzzRing *r, uint32_t *id, uint32_t *len);

/* Consume the error eventfd: whether it had been signalled. */
bool fuzz_ring_err_signalled(FuzzRing *r);

/* ------------------------------------------------------------------------ */
/* Chains for the device harnesses                                          */

/* Segment flags of the chain description in an input. */
#define FUZZ_SEG_WRITE       0x01   /* device-writable */
#define FUZZ_SEG_CROSS_AB    0x02   /* place it across the A/B boundary */
#define FUZZ_SEG_BAD         0x04   /* place it across the hole */
#define FUZZ_SEG_EMPTY       0x08   /* zero length */

#define FUZZ_CHAIN_INDIRECT  0x01   /* the chain is an indirect table */

#define FUZZ_CHAIN_MAX_SEGS  16
#define FUZZ_SEG_MAX_LEN     8192

typedef struct FuzzSeg {
    uint64_t gpa;
    uint32_t len;
    bool write;
} FuzzSeg;

/* One chain read from an input and laid out in guest memory. */
typedef struct FuzzChain {
    uint16_t head;
    unsigned nseg;
    FuzzSeg seg[FUZZ_CHAIN_MAX_SEGS];
    uint64_t in_bytes;           /* device-writable bytes */
    uint64_t out_bytes;          /* device-readable bytes (inside memory) */
    uint64_t last_in_gpa;        /* the last device-writable byte */
    uint32_t last_in_len;        /* length of the last writable segment */
    bool bad;                    /* a buffer outside guest memory */
} FuzzChain;

/*
 * Guest memory for buffers, from data_gpa up to the hole, handed out in
 * order; reset per batch of requests, when nothing is in flight.  Ring
 * descriptors are handed out from r->desc_next (set it back to 0 then).
 */
void fuzz_data_reset(uint64_t data_gpa);

/*
 * Read one chain from in and lay it out:
 *   u8 nseg (mod FUZZ_CHAIN_MAX_SEGS, + 1), u8 FUZZ_CHAIN_* flags,
 *   nseg x { u8 FUZZ_SEG_* flags, u16 len (mod FUZZ_SEG_MAX_LEN + 1) },
 *   u16 n, then n bytes: the device-readable bytes, in order across the
 *   readable segments (the rest are zero).
 * Writable segments are filled with 0xee.  Returns false when the ring has
 * no free descriptor or memory is short (nothing is added then); else
 * the chain is added and made available (not kicked).
 */
bool fuzz_chain_add(FuzzRing *r, FuzzReader *in, FuzzChain *c);

/* The harness's pointer to the off-th device-writable (write) or
 * device-readable byte of c, or NULL past the end. */
uint8_t *fuzz_chain_byte(const FuzzChain *c, bool write, uint64_t off);

/* The le32 at off of those bytes (zeroes past the end). */
uint32_t fuzz_chain_le32(const FuzzChain *c, bool write, uint64_t off);

#endif

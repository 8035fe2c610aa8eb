#!/usr/bin/env python3
"""Write the seed corpora of the virtio fuzz harnesses.

    tests/fuzz/gen-seeds.py [OUTDIR]      (default: tests/fuzz/corpus)

Each seed is a small input in the harness's format (the comment at the top
of tests/fuzz/fuzz-virtqueue.c, fuzz-virtio-blk.c, fuzz-virtio-scsi.c, and
the chain format of fuzz-ring.h): mostly well-formed requests of every
kind, so that the fuzzer starts deep in the parsers, plus one or two of
each malformed shape the code refuses.  Output is deterministic; the
corpus in the tree is this script's output (regression inputs added later
are kept beside it, named crash-*).
"""
import os
import struct
import sys

# Guest memory layout (fuzz-ring.h).
REGION_B = 0x18000
HOLE = 0x30000
REGION_C = 0x31800

DESC_F_NEXT, DESC_F_WRITE, DESC_F_INDIRECT = 1, 2, 4


def u8(v):
    return struct.pack('<B', v & 0xff)


def u16(v):
    return struct.pack('<H', v & 0xffff)


def u32(v):
    return struct.pack('<I', v & 0xffffffff)


def u64(v):
    return struct.pack('<Q', v & 0xffffffffffffffff)


# ---------------------------------------------------------------------------
# fuzz-virtqueue

(VQ_DESC, VQ_DESC64, VQ_TDESC, VQ_AVAIL, VQ_PUBLISH, VQ_SET_IDX, VQ_KICK,
 VQ_PUSH, VQ_POKE, VQ_SET_MEM, VQ_RESTART, VQ_CALL_FD) = range(12)
CFG_EVENT_IDX, CFG_INDIRECT, CFG_HOLD = 0x10, 0x20, 0x40


def vq_header(log2num=3, flags=0, desc=0x1000, avail=0x2000, used=0x3000,
              base=0):
    return u8(log2num | flags) + u32(desc) + u32(avail) + u32(used) + u16(base)


def vq_desc(i, addr, length, flags=0, nxt=0):
    return u8(VQ_DESC) + u16(i) + u32(addr) + u32(length) + u16(flags) + u16(nxt)


def vq_desc64(i, addr, length, flags=0, nxt=0):
    return (u8(VQ_DESC64) + u16(i) + u64(addr) + u32(length) + u16(flags) +
            u16(nxt))


def vq_tdesc(table, i, addr, length, flags=0, nxt=0):
    return (u8(VQ_TDESC) + u32(table) + u8(i) + u32(addr) + u32(length) +
            u16(flags) + u16(nxt))


def vq_avail(head):
    return u8(VQ_AVAIL) + u16(head)


def vq_publish_kick(*heads):
    return b''.join(vq_avail(h) for h in heads) + u8(VQ_PUBLISH) + u8(VQ_KICK)


def vq_seeds():
    out16 = lambda i, a, nxt=None: vq_desc(i, a, 16, 0 if nxt is None else
                                           DESC_F_NEXT, nxt or 0)
    seeds = {}
    # A request as virtio-blk sends it: header, data, status.
    seeds['direct'] = (vq_header() + out16(0, 0x4000, 1) +
                       vq_desc(1, 0x5000, 512, DESC_F_WRITE | DESC_F_NEXT, 2) +
                       vq_desc(2, 0x6000, 1, DESC_F_WRITE) +
                       vq_publish_kick(0))
    # Two chains, the second across the A/B boundary (two iovecs).
    seeds['cross-regions'] = (vq_header() + out16(0, 0x4000, 1) +
                              vq_desc(1, REGION_B - 0x100, 0x200,
                                      DESC_F_WRITE) +
                              vq_desc(2, 0x4100, 64) + vq_publish_kick(0, 2))
    # An indirect table.
    seeds['indirect'] = (vq_header(flags=CFG_INDIRECT) +
                         vq_tdesc(0x7000, 0, 0x4000, 16, DESC_F_NEXT, 1) +
                         vq_tdesc(0x7000, 1, 0x5000, 4096,
                                  DESC_F_WRITE | DESC_F_NEXT, 2) +
                         vq_tdesc(0x7000, 2, 0x6000, 1, DESC_F_WRITE) +
                         vq_desc(3, 0x7000, 48, DESC_F_INDIRECT) +
                         vq_publish_kick(3))
    # Held elements across a memory table change, pushes, a restart.
    seeds['hold-setmem-restart'] = (
        vq_header(flags=CFG_HOLD | CFG_EVENT_IDX) + out16(0, 0x4000) +
        vq_desc(1, REGION_C + 0x100, 64, DESC_F_WRITE) +
        vq_publish_kick(0, 1) + u8(VQ_SET_MEM) + u8(1) + u8(VQ_PUSH) + u8(1) +
        u8(0) + u8(VQ_RESTART) + u8(0) + u16(0) + vq_publish_kick(0) +
        u8(VQ_PUSH) + u8(4) + u8(2))
    # Rings in region C (an unaligned file offset), a large ring.
    seeds['rings-in-c'] = (vq_header(log2num=6, desc=REGION_C + 0x800,
                                     avail=REGION_C + 0x400,
                                     used=REGION_C + 0x2000) +
                           vq_desc(63, 0x4000, 100) + vq_publish_kick(63))
    # Refused: a loop, an index jump, a buffer in the hole, a bad head.
    seeds['bad-loop'] = (vq_header() + vq_desc(0, 0x4000, 16, DESC_F_NEXT, 0) +
                         vq_publish_kick(0))
    seeds['bad-idx-jump'] = (vq_header() + out16(0, 0x4000) + u8(VQ_SET_IDX) +
                             u16(9) + u8(VQ_KICK))
    seeds['bad-hole'] = (vq_header() + vq_desc64(0, HOLE - 8, 16) +
                         vq_publish_kick(0))
    seeds['bad-head'] = vq_header() + vq_publish_kick(8)
    # Wrapping indexes, event index, call fd changes, pokes of flags.
    seeds['wrap-event-idx'] = (
        vq_header(log2num=1, flags=CFG_EVENT_IDX, base=0xfffe) +
        out16(0, 0x4000) + out16(1, 0x4100) + vq_publish_kick(0, 1, 0) +
        u8(VQ_CALL_FD) + u8(0) + vq_publish_kick(1) + u8(VQ_CALL_FD) +
        u8(1) + u8(VQ_POKE) + u32(0x2000) + u8(2) + u16(1) +
        vq_publish_kick(0))
    return seeds


# ---------------------------------------------------------------------------
# Chains (fuzz-ring.h: fuzz_chain_add())

SEG_WRITE, SEG_CROSS_AB, SEG_BAD, SEG_EMPTY = 1, 2, 4, 8
CHAIN_INDIRECT = 1


def chain(segs, data=b'', indirect=False):
    """segs: (length, seg flags) pairs; data: the device-readable bytes."""
    b = u8(len(segs) - 1) + u8(CHAIN_INDIRECT if indirect else 0)
    for length, flags in segs:
        b += u8(flags) + u16(length)
    return b + u16(len(data)) + data


def write_seeds(outdir, name, seeds):
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    for seed, data in sorted(seeds.items()):
        with open(os.path.join(d, 'seed-' + seed), 'wb') as f:
            f.write(data)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), 'corpus')
    write_seeds(outdir, 'fuzz-virtqueue', vq_seeds())


if __name__ == '__main__':
    main()

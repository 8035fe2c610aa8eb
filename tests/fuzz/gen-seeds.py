#!/usr/bin/env python3
"""Write the seed corpora of the virtio fuzz harnesses.

    tests/fuzz/gen-seeds.py [OUTDIR]      (default: tests/fuzz/corpus)

Each seed is a small input in the harness's format (the comment at the top
of tests/fuzz/fuzz-virtqueue.c, fuzz-virtio-blk.c, fuzz-virtio-scsi.c, and
the chain format of ring.h): mostly well-formed requests of every
kind, so that the fuzzer starts deep in the parsers, plus one or two of
each malformed shape the code refuses.  Output is deterministic; the
corpus in the tree is this script's output (regression inputs added later
are kept beside it, named crash-*).
"""
import os
import struct
import sys

# Guest memory layout (ring.h).
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
# Chains (ring.h: fuzz_chain_add())

SEG_WRITE, SEG_CROSS_AB, SEG_BAD, SEG_EMPTY = 1, 2, 4, 8
CHAIN_INDIRECT = 1


def chain(segs, data=b'', indirect=False):
    """segs: (length, seg flags) pairs; data: the device-readable bytes."""
    b = u8(len(segs) - 1) + u8(CHAIN_INDIRECT if indirect else 0)
    for length, flags in segs:
        b += u8(flags) + u16(length)
    return b + u16(len(data)) + data


# ---------------------------------------------------------------------------
# fuzz-virtio-blk

BLK_BATCH, BLK_SET_CONFIG, BLK_GET_CONFIG = range(3)
T_IN, T_OUT, T_FLUSH, T_GET_ID, T_DISCARD, T_WRITE_ZEROES = 0, 1, 4, 8, 11, 13
WRITEBACK_OFFSET = 32            # VirtioBlkConfig.writeback


def blk_header(conf=0x01, feat=0x30, log2num=4):
    return u8(conf) + u8(feat) + u8(log2num)


def blk_hdr(rtype, sector=0):
    return u32(rtype) + u32(0) + u64(sector)


def blk_dwz_seg(sector, num, flags=0):
    return u64(sector) + u32(num) + u32(flags)


def blk_batch(*chains):
    return u8(BLK_BATCH) + u8(len(chains) - 1) + b''.join(chains)


def blk_seeds():
    W = SEG_WRITE
    read = chain([(16, 0), (512, W), (1, W)], blk_hdr(T_IN, 8))
    write = chain([(16, 0), (1024, 0), (1, W)],
                  blk_hdr(T_OUT, 16) + bytes(range(256)) * 4)
    flush = chain([(16, 0), (1, W)], blk_hdr(T_FLUSH))
    get_id = chain([(16, 0), (20, W), (1, W)], blk_hdr(T_GET_ID))
    discard = chain([(16, 0), (32, 0), (1, W)],
                    blk_hdr(T_DISCARD) + blk_dwz_seg(0, 8) +
                    blk_dwz_seg(64, 16))
    wzeroes = chain([(16, 0), (16, 0), (1, W)],
                    blk_hdr(T_WRITE_ZEROES) + blk_dwz_seg(8, 8, 1))
    seeds = {
        'read': blk_header() + blk_batch(read),
        'write': blk_header() + blk_batch(write),
        'flush': blk_header() + blk_batch(flush),
        'get-id': blk_header() + blk_batch(get_id),
        'discard': blk_header() + blk_batch(discard),
        'write-zeroes': blk_header() + blk_batch(wzeroes),
        'all-types': blk_header(log2num=6) +
                     blk_batch(read, write, flush, get_id, discard, wzeroes),
        'unknown-type': blk_header() + blk_batch(
            chain([(16, 0), (1, W)], blk_hdr(99))),
        # The header split over two buffers; status inside the data buffer.
        'split-header': blk_header() + blk_batch(
            chain([(8, 0), (8, 0), (513, W)], blk_hdr(T_IN, 1))),
        # Indirect, 4 KiB blocks, across the A/B boundary.
        'indirect-4k-cross': blk_header(conf=0x05) + blk_batch(
            chain([(16, 0), (4096, W | SEG_CROSS_AB), (1, W)],
                  blk_hdr(T_IN, 8), indirect=True)),
        'read-only-write': blk_header(conf=0x00) + blk_batch(write),
        'past-end': blk_header(conf=0x09) + blk_batch(
            chain([(16, 0), (1024, W), (1, W)], blk_hdr(T_IN, 2047))),
        # Writeback toggled by the driver, then a write (FUA or not).
        'config-writeback': blk_header(feat=0x00) + u8(BLK_SET_CONFIG) +
                            u8(WRITEBACK_OFFSET) + u8(0) + u8(0) +
                            u8(BLK_GET_CONFIG) + blk_batch(write),
        # Malformed: no status byte, an empty status, a buffer in the hole.
        'no-status': blk_header() + blk_batch(
            chain([(16, 0), (512, 0)], blk_hdr(T_OUT))),
        'empty-status': blk_header() + blk_batch(
            chain([(16, 0), (512, W), (0, W | SEG_EMPTY)], blk_hdr(T_IN))),
        'bad-buffer': blk_header() + blk_batch(
            chain([(16, 0), (512, W | SEG_BAD), (1, W)], blk_hdr(T_IN)),
            flush),
    }
    return seeds


# ---------------------------------------------------------------------------
# fuzz-virtio-scsi

(SCSI_BATCH, SCSI_EVENT_BUFS, SCSI_SET_CONFIG, SCSI_GET_CONFIG, SCSI_CAPACITY,
 SCSI_HOTPLUG) = range(6)
VQ_CONTROL, VQ_REQUEST0 = 0, 2
CDB_SIZE, SENSE_SIZE = 32, 96        # the config space defaults
SENSE_SIZE_OFFSET = 20               # VirtioScsiConfig.sense_size
T_TMF, T_AN_QUERY = 0, 1
TMF_ABORT_TASK, TMF_ABORT_TASK_SET, TMF_LUN_RESET, TMF_QUERY_TASK = 0, 1, 5, 6


def scsi_header(conf=0x0d, feat=0x30, log2num=4):
    return u8(conf) + u8(feat) + u8(log2num)


def scsi_lun(lun, target=0):
    if lun < 256:
        return bytes([1, target, 0, lun, 0, 0, 0, 0])
    return bytes([1, target, 0x40 | (lun >> 8), lun & 0xff, 0, 0, 0, 0])


def scsi_cmd(cdb, lun=0, data_out=b'', data_in=0, tag=1, lun_bytes=None,
             split=False):
    """A command chain on request queue 0 (the queue byte first)."""
    out = ((lun_bytes or scsi_lun(lun)) + u64(tag) + bytes(3) +
           bytes(cdb).ljust(CDB_SIZE, b'\0') + data_out)
    W = SEG_WRITE
    segs = [(19, 0), (CDB_SIZE, 0)] if split else [(19 + CDB_SIZE, 0)]
    if data_out:
        segs.append((len(data_out), 0))
    segs.append((12 + SENSE_SIZE, W))
    if data_in:
        segs.append((data_in, W))
    return u8(VQ_REQUEST0) + chain(segs, out)


def scsi_tmf(subtype, lun=0, tag=1):
    return u8(VQ_CONTROL) + chain([(24, 0), (1, SEG_WRITE)],
                                  u32(T_TMF) + u32(subtype) + scsi_lun(lun) +
                                  u64(tag))


def scsi_batch(*chains):
    return u8(SCSI_BATCH) + u8(len(chains) - 1) + b''.join(chains)


def be16(v):
    return struct.pack('>H', v)


def be32(v):
    return struct.pack('>I', v)


def be64(v):
    return struct.pack('>Q', v)


def scsi_seeds():
    h = scsi_header()
    inquiry = [0x12, 0, 0, 0, 0xff, 0]
    seeds = {
        'tur': h + scsi_batch(scsi_cmd([0x00])),
        'inquiry': h + scsi_batch(scsi_cmd(inquiry, data_in=255)),
        'report-luns': h + scsi_batch(scsi_cmd(
            [0xa0, 0, 0, 0, 0, 0] + list(be32(256)) + [0, 0], data_in=256)),
        'read-capacity': h + scsi_batch(
            scsi_cmd([0x25], data_in=8),
            scsi_cmd([0x9e, 0x10] + [0] * 8 + list(be32(32)) + [0, 0],
                     lun=258, data_in=32)),
        'mode-sense': h + scsi_batch(
            scsi_cmd([0x1a, 0, 0x3f, 0, 0xff, 0], data_in=255),
            scsi_cmd([0x5a, 0, 0x08, 0, 0, 0, 0, 0x01, 0x00, 0],
                     data_in=256)),
        # Caching page WCE off (MODE SELECT 6), control page D_SENSE on
        # (MODE SELECT 10), then an error to see descriptor sense.
        'mode-select': h + scsi_batch(
            scsi_cmd([0x15, 0x10, 0, 0, 24, 0],
                     data_out=bytes(4) + bytes([0x08, 0x12]) + bytes(18)),
            scsi_cmd([0x55, 0x10, 0, 0, 0, 0, 0, 0, 20, 0],
                     data_out=bytes(8) + bytes([0x0a, 0x0a, 0x04]) +
                     bytes(9)),
            scsi_cmd([0xff])),
        'request-sense': h + scsi_batch(scsi_cmd([0x03, 0, 0, 0, 96, 0],
                                                 data_in=96)),
        'read-write': h + scsi_batch(
            scsi_cmd([0x28, 0] + list(be32(8)) + [0] + list(be16(2)) + [0],
                     data_in=1024),
            scsi_cmd([0x2a, 0x08] + list(be32(16)) + [0] + list(be16(1)) +
                     [0], data_out=bytes(range(256)) * 2),
            scsi_cmd([0x08, 0, 0, 4, 1, 0], data_in=512),
            scsi_cmd([0xa8, 0] + list(be32(0)) + list(be32(1)) + [0, 0],
                     data_in=512),
            scsi_cmd([0x8a, 0x08] + list(be64(2)) + list(be32(1)) + [0, 0],
                     data_out=bytes(512))),
        'read-4k-lun': h + scsi_batch(
            scsi_cmd([0x88, 0] + list(be64(3)) + list(be32(1)) + [0, 0],
                     lun=258, data_in=4096)),
        'past-end': h + scsi_batch(
            scsi_cmd([0x28, 0] + list(be32(2047)) + [0] + list(be16(2)) +
                     [0], data_in=1024)),
        'sync-verify-start-stop': h + scsi_batch(
            scsi_cmd([0x35]), scsi_cmd([0x91] + [0] * 15),
            scsi_cmd([0x2f, 0] + list(be32(0)) + [0] + list(be16(8)) + [0]),
            scsi_cmd([0x1b, 0, 0, 0, 1, 0]), scsi_cmd([0x1e, 0, 0, 0, 1, 0])),
        'unmap-write-same': h + scsi_batch(
            scsi_cmd([0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0], lun=258,
                     data_out=be16(22) + be16(16) + bytes(4) + be64(8) +
                     be32(4) + bytes(4)),
            scsi_cmd([0x93, 0x08] + list(be64(16)) + list(be32(8)) + [0, 0],
                     lun=258, data_out=bytes(4096)),
            scsi_cmd([0x41, 0] + list(be32(0)) + [0] + list(be16(8)) + [0],
                     data_out=bytes(512))),
        'no-lun-bad-target-wlun': h + scsi_batch(
            scsi_cmd(inquiry, lun=5, data_in=255),
            scsi_cmd([0x00], lun=5),
            scsi_cmd([0x00], lun_bytes=scsi_lun(0, target=1)),
            scsi_cmd([0xa0, 0, 0, 0, 0, 0] + list(be32(64)) + [0, 0],
                     lun_bytes=bytes([0xc1, 0x01]) + bytes(6), data_in=64)),
        'vpd-pages': scsi_header(conf=0x0d) + scsi_batch(
            *[scsi_cmd([0x12, 1, page, 0, 0xff, 0], data_in=255)
              for page in (0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2)]),
        'split-cdb': h + scsi_batch(scsi_cmd([0x25], data_in=8, split=True)),
        # A write and the TMFs that look for it in the same batch.
        'tmf': h + scsi_batch(
            scsi_cmd([0x2a, 0] + list(be32(0)) + [0] + list(be16(1)) + [0],
                     data_out=bytes(512), tag=7),
            scsi_tmf(TMF_QUERY_TASK, tag=7), scsi_tmf(TMF_ABORT_TASK, tag=7),
            scsi_tmf(TMF_ABORT_TASK_SET), scsi_tmf(TMF_LUN_RESET),
            scsi_cmd([0x00])),
        'an-query': h + scsi_batch(
            u8(VQ_CONTROL) + chain([(16, 0), (5, SEG_WRITE)],
                                   u32(T_AN_QUERY) + scsi_lun(0) + u32(0xff))),
        # Events: buffers, a capacity change, LUN 0 out and back in.
        'events': scsi_header(conf=0x05, feat=0x00) + u8(SCSI_EVENT_BUFS) +
                  u8(3) + u8(16) + u8(SCSI_CAPACITY) + u8(0) +
                  u8(SCSI_HOTPLUG) + scsi_batch(scsi_cmd(inquiry,
                                                         data_in=64)) +
                  u8(SCSI_HOTPLUG) + u8(SCSI_CAPACITY) + u8(1) +
                  scsi_batch(scsi_cmd([0x00])),
        # sense_size 8, then a command that has sense to truncate.
        'config-sense-size': h + u8(SCSI_SET_CONFIG) + u8(SENSE_SIZE_OFFSET) +
                             u8(3) + u32(8) + u32(0) + u8(SCSI_GET_CONFIG) +
                             scsi_batch(scsi_cmd([0xff])),
        'two-queues-read-only': scsi_header(conf=0x03) + scsi_batch(
            scsi_cmd([0x2a, 0] + list(be32(0)) + [0] + list(be16(1)) + [0],
                     data_out=bytes(512))),
        # Malformed: no room for the response, data both ways.
        'no-response-room': h + scsi_batch(
            u8(VQ_REQUEST0) + chain([(51, 0), (8, SEG_WRITE)],
                                    scsi_lun(0) + bytes(11))),
        'bidirectional': h + scsi_batch(
            scsi_cmd([0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0], data_out=bytes(512),
                     data_in=512)),
    }
    return seeds


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
    write_seeds(outdir, 'fuzz-virtio-blk', blk_seeds())
    write_seeds(outdir, 'fuzz-virtio-scsi', scsi_seeds())


if __name__ == '__main__':
    main()

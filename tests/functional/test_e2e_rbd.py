"""End-to-end: a Linux guest on a vhost-user-blk disk backed by Ceph RBD.

The image lives in the session's test cluster (ceph_cluster, see
ceph_cluster.py); it is made with `rbd import` from a file holding a
region of host data.  Spindle serves it (driver=rbd, two queues, one
IOThread) and one guest boot (the harness of tests/e2e, as in
test_e2e_blk.py) checks the disk's size, reads the host's data, writes a
known pattern in the middle and at the very end with O_DIRECT, reads it
back and compares, and discards a region.  After the guest and the
daemon are gone, `rbd export` reads the image from the cluster: it holds
the guest's data and the host's.

Skipped, saying why, where a guest cannot boot (scripts/install-deps.sh
installs QEMU, a kernel and busybox), spindle has no rbd driver, or the
test cluster cannot start.
"""

import pytest

from test_e2e_blk import (GuestResults, _spindle_or_skip, boot_dir, daemons,
                          guest, run_guest_on, skip_without_guest)

MiB = 1 << 20
KiB = 1 << 10
SIZE = 32 * MiB
QUEUES = 2
PATTERN_OFFSET = 1 * MiB
PATTERN = guest.pattern_bytes(2 * MiB, seed=0x7b6d)
TAIL = guest.pattern_bytes(128 * KiB, seed=0x7b6e)
HOST_REGION = (8 * MiB, 1 * MiB)
HOST_DATA = guest.pattern_bytes(HOST_REGION[1], seed=0x7b6f)
DISCARD_REGION = (16 * MiB, 4 * MiB)     # one whole 4 MiB object
GUEST_TIMEOUT_S = 120


class Boot(GuestResults):
    def __init__(self, run):
        self.run = run


def test_guest_on_an_rbd_disk(ceph_cluster):
    skip_without_guest()
    spindle = _spindle_or_skip()
    with boot_dir("rbd") as workdir:
        src = bytearray(SIZE)
        src[HOST_REGION[0]:sum(HOST_REGION)] = HOST_DATA
        # Non-zero data where the guest will discard.
        src[DISCARD_REGION[0]:sum(DISCARD_REGION)] = \
            b"\xa5" * DISCARD_REGION[1]
        (workdir / "src.img").write_bytes(src)
        ceph_cluster.rbd("import", "--no-progress", str(workdir / "src.img"),
                         "e2e")
        try:
            exp = daemons.Export("", str(workdir / "vda.sock"),
                                 num_queues=QUEUES,
                                 blockdev=ceph_cluster.blockdev(
                                     "e2e", "discard=unmap"))
            wl = guest.blk_workload(
                "vda", pattern=PATTERN, pattern_offset=PATTERN_OFFSET,
                tail_pattern=TAIL, host_region=HOST_REGION,
                discard_region=DISCARD_REGION)
            daemon = daemons.Daemon(spindle, [exp], "spindle",
                                    workdir).start()
            run, status = run_guest_on(
                daemon, [guest.Disk(exp.socket, num_queues=QUEUES)],
                wl.script, workdir, files=wl.files, smp=QUEUES,
                timeout=GUEST_TIMEOUT_S)
            assert status == 0, daemon.stderr()
            boot = Boot(run)
            run.check()
            assert boot.r("vda.workload") == "finished"
            assert int(boot.r("vda.size_sectors")) == SIZE // 512
            assert boot.r("vda.host_md5") == guest.md5(HOST_DATA)
            boot.check_written("vda", PATTERN, TAIL)
            assert boot.r("vda.discard_rc") == "0"

            out = workdir / "export.img"
            ceph_cluster.rbd("export", "--no-progress", "e2e", str(out))
            data = out.read_bytes()
        finally:
            ceph_cluster.rbd("rm", "--no-progress", "e2e", check=False)
    assert len(data) == SIZE
    assert data[PATTERN_OFFSET:PATTERN_OFFSET + len(PATTERN)] == PATTERN
    assert data[-len(TAIL):] == TAIL
    assert data[HOST_REGION[0]:sum(HOST_REGION)] == HOST_DATA
    assert data[:PATTERN_OFFSET] == bytes(PATTERN_OFFSET)
    # The discarded object reads as zeroes (librbd removed it).
    assert data[DISCARD_REGION[0]:sum(DISCARD_REGION)] == \
        bytes(DISCARD_REGION[1])

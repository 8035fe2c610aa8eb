"""End-to-end: a guest's disk whose four queues run in two IOThreads.

spindle serves one vhost-user-blk export of an image opened with
cache.direct=on (the node needs aligned I/O, as in production), with
num-queues=4 and iothread.0=iot0,iothread.1=iot1: queue i runs in IOThread
i % 2.  The guest (4 vCPUs, so virtio-blk gives each CPU its own queue)
runs one writer per CPU at once, each pinned with taskset and writing its
own region with O_DIRECT, then reads every region back and compares.

Afterwards the host checks the image file, and the statistics spindle
prints at exit: every queue took requests in the IOThread it belongs to,
and no write of the guest took the node's read-modify-write lock (aligned
writes from two IOThreads share no lock).  Skipped, with the reason, when
QEMU, a kernel or busybox is missing, or the directory has no O_DIRECT.
"""

import re

import pytest

from conftest import make_image
from test_e2e_blk import (_spindle_or_skip, boot_dir, daemons, guest,
                          run_guest_on, skip_without_guest)
from test_multi_iothread import QUEUE_STATS, WRITE_STATS, o_direct_works

MiB = 1 << 20
QUEUES = 4
IOTHREADS = ("iot0", "iot1")
REGION = 2 * MiB                       # per writer
BLOCK = 64 * 1024
DISK_SIZE = 16 * MiB
PATTERNS = [guest.pattern_bytes(REGION, seed=0x10710 + c) for c in range(QUEUES)]
GUEST_TIMEOUT_S = 90


def _script():
    n = REGION // BLOCK
    return rf"""
r() {{ echo "SPINDLE-RESULT $1=$2"; }}
DEV=/dev/vda
i=0
while [ ! -b $DEV ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
r hw_queues $(ls /sys/block/vda/mq | wc -l)
r cpus $(nproc)
for c in 0 1 2 3; do
    taskset -c $c dd if=/p$c.bin of=$DEV bs={BLOCK} seek=$((c * {n})) \
        oflag=direct conv=notrunc,fsync 2>/tmp/w$c.err &
    eval pid$c=$!
done
for c in 0 1 2 3; do
    eval wait \$pid$c
    r write$c $?
done
for c in 0 1 2 3; do
    taskset -c $c dd if=$DEV of=/tmp/b$c bs={BLOCK} skip=$((c * {n})) \
        count={n} iflag=direct 2>/tmp/r$c.err
    r read$c $?
    if cmp -s /p$c.bin /tmp/b$c; then r verify$c ok; else r verify$c mismatch; fi
    rm -f /tmp/b$c
done
"""


@pytest.fixture(scope="module")
def run():
    skip_without_guest()
    program = _spindle_or_skip()
    with boot_dir("multi-IOThread") as workdir:
        if not o_direct_works(workdir):
            pytest.skip(f"{workdir} does not support O_DIRECT (tmpfs?)")
        image = make_image(workdir / "disk.img", DISK_SIZE)
        exp = daemons.Export(str(image), str(workdir / "vda.sock"),
                             num_queues=QUEUES, iothread=IOTHREADS,
                             node_opts=",cache.direct=on")
        files = {f"/p{c}.bin": PATTERNS[c] for c in range(QUEUES)}
        daemon = daemons.Daemon(program, [exp], "spindle", workdir).start()
        result, status = run_guest_on(
            daemon, [guest.Disk(exp.socket, num_queues=QUEUES)], _script(),
            workdir, files=files, smp=QUEUES, timeout=GUEST_TIMEOUT_S)
        yield result, status, daemon.stderr(), image.read_bytes()


def test_guest_writes_from_four_cpus_and_verifies(run):
    result, _, _, _ = run
    result.check()
    assert result.results.get("hw_queues") == str(QUEUES)
    assert result.results.get("cpus") == str(QUEUES)
    for c in range(QUEUES):
        assert result.results.get(f"write{c}") == "0", result.results
        assert result.results.get(f"read{c}") == "0", result.results
        assert result.results.get(f"verify{c}") == "ok", result.results


def test_image_holds_every_writers_data(run):
    _, status, stderr, data = run
    assert status == 0, stderr
    for c in range(QUEUES):
        assert data[c * REGION:(c + 1) * REGION] == PATTERNS[c], f"region {c}"
    assert data[QUEUES * REGION:] == bytes(DISK_SIZE - QUEUES * REGION)


def test_each_queue_ran_in_its_iothread(run):
    _, _, stderr, _ = run
    queues = {int(m[1]): (m[2], int(m[3])) for m in QUEUE_STATS.finditer(stderr)}
    assert sorted(queues) == list(range(QUEUES)), stderr
    for i, (iothread, requests) in queues.items():
        assert iothread == IOTHREADS[i % len(IOTHREADS)], stderr
        # Each CPU's writer and reader went through its own queue.
        assert requests >= 2 * (REGION // BLOCK), (i, stderr)
    # Both IOThreads ran loop turns for it.
    for iot in IOTHREADS:
        m = re.search(rf"iothread {iot} stats: turns=(\d+)", stderr)
        assert m and int(m[1]) > 0, stderr


def test_aligned_guest_writes_took_no_lock(run):
    _, _, stderr, _ = run
    m = WRITE_STATS.search(stderr)
    assert m, stderr
    assert (int(m[1]), int(m[2])) == (0, 0), stderr

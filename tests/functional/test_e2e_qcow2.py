"""End-to-end: a Linux guest on qcow2, and issue 20's command line as given.

One guest boot (TCG, the harness of tests/e2e/) on two disks, each from a
daemon of its own:

  vda  a qcow2 overlay over a raw base (the backing file opened from the
       image's header), writable, in IOThread iot0: the guest reads what the
       host put in the base through the overlay, writes a pattern with
       O_DIRECT over clusters only the base holds (4 KiB writes into 64 KiB
       clusters: copy-on-write) and at the disk's end, reads them back and
       compares.  After the daemon stops, `qemu-img check` finds the overlay
       clean and `qemu-img compare` finds it equal to the base with the
       guest's writes applied; the base is unchanged.
  vdb  issue 20's example, the command line exactly as a user writes it
       (file node, qcow2 node, a throttle group and a throttle filter, the
       export in the main loop and, as in qemu-storage-daemon, read-only by
       default): the guest sees its size, reads the host's data through the
       whole stack, and a write is refused.

While spindle has no throttle driver, the boot runs without vdb and its
test is skipped with the reason "throttle driver not merged" (taken from
spindle's refusal of the command line, never assumed); without the qcow2
driver every test skips.  A boot takes about 10 s.  SPINDLE_QCOW2_DAEMON=qsd
runs both disks on qemu-storage-daemon instead (qcow2_util.py).
"""

from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import DaemonError
from qcow2_util import (QEMU_IMG, check_image, daemon_flavour,
                        images_equal, qemu_img, sha256_file,
                        skip_if_not_merged)
from test_e2e_blk import (GuestResults, _spindle_or_skip, boot_dir,
                          run_guest_on, skip_without_guest)

import daemons  # tests/e2e, on sys.path through conftest
import guest

pytestmark = pytest.mark.skipif(
    QEMU_IMG is None, reason="qemu-img is not installed "
                             "(apt-get install qemu-utils)")

MiB = 1 << 20
KiB = 1 << 10
SIZE = 32 * MiB
BLOCK = 4 * KiB
HOST_REGION = (8 * MiB, 1 * MiB)         # in the base, read by the guest
HOST_DATA = guest.pattern_bytes(HOST_REGION[1], seed=0x0c02)
# 4 KiB-aligned, not cluster-aligned, over clusters the base holds.
PATTERN_OFFSET = 12 * MiB + 4 * KiB
PATTERN = guest.pattern_bytes(256 * KiB, seed=0x0c03)
BASE_UNDER_PATTERN = (12 * MiB, 1 * MiB)
BASE_DATA = guest.pattern_bytes(BASE_UNDER_PATTERN[1], seed=0x0c04)
TAIL = guest.pattern_bytes(64 * KiB, seed=0x0c05)
GUEST_TIMEOUT_S = 90

# Issue 20's example, as filed; only the socket path is filled in.
EXAMPLE = """
    --blockdev driver=file,node-name=file1,filename=disk1.qcow2
    --blockdev driver=qcow2,node-name=fmt1,file=file1
    --object throttle-group,id=tg0,x-iops-total=2000
    --blockdev driver=throttle,node-name=thr1,throttle-group=tg0,file=fmt1
    --export type=vhost-user-blk,id=export1,node-name=thr1,addr.type=unix,addr.path=SOCK
"""


def throttle_missing(error):
    """Whether a refusal of EXAMPLE says that spindle has no throttling."""
    return ("'throttle-group' is not supported" in error
            or "Unknown driver 'throttle'" in error)


@dataclass
class Boot(GuestResults):
    run: guest.GuestRun
    statuses: dict
    stderr: dict
    workdir: Path
    example_skip: str       # why vdb was left out, or None


def make_images(workdir):
    """base.raw (the host's data), vda.qcow2 over it, disk1.qcow2 over a
    copy of it; and expected.raw, what vda must read as at the end."""
    base = bytearray(SIZE)
    for off, data in ((HOST_REGION[0], HOST_DATA),
                      (BASE_UNDER_PATTERN[0], BASE_DATA)):
        base[off:off + len(data)] = data
    for name in ("base.raw", "base1.raw"):
        (workdir / name).write_bytes(base)
    qemu_img("create", "-f", "qcow2", "-b", "base.raw", "-F", "raw",
             workdir / "vda.qcow2")
    qemu_img("create", "-f", "qcow2", "-b", "base1.raw", "-F", "raw",
             workdir / "disk1.qcow2")
    expected = base
    expected[PATTERN_OFFSET:PATTERN_OFFSET + len(PATTERN)] = PATTERN
    expected[-len(TAIL):] = TAIL
    (workdir / "expected.raw").write_bytes(expected)


def start(program, workdir, name, args, sock):
    flavour = daemon_flavour()[0]
    d = daemons.Daemon(program, [], flavour, workdir, extra_args=args,
                       extra_sockets=[sock],
                       log_path=workdir / f"{name}.stderr")
    return d.start()


def start_vda(spindle, workdir):
    sock = workdir / "vda.sock"
    args = ["--object", "iothread,id=iot0",
            "--blockdev", "driver=file,node-name=f0,filename=vda.qcow2",
            "--blockdev", "driver=qcow2,node-name=q0,file=f0",
            "--export", f"type=vhost-user-blk,id=e0,node-name=q0,"
                        f"addr.type=unix,addr.path={sock},writable=on,"
                        "iothread=iot0"]
    try:
        return start(spindle, workdir, "vda", args, sock)
    except DaemonError as e:
        skip_if_not_merged(str(e))
        raise


def start_example(spindle, workdir):
    """The example's daemon, or (None, why it is left out)."""
    sock = workdir / "vdb.sock"
    args = EXAMPLE.replace("SOCK", str(sock)).split()
    try:
        return start(spindle, workdir, "vdb", args, sock), None
    except DaemonError as e:
        if throttle_missing(str(e)):
            return None, "throttle driver not merged"
        raise


def workload():
    vda = guest.blk_workload(
        "vda", pattern=PATTERN, pattern_offset=PATTERN_OFFSET,
        tail_pattern=TAIL, host_region=HOST_REGION, block=BLOCK)
    vdb = guest.blk_workload("vdb", host_region=HOST_REGION, try_write=True,
                             block=BLOCK)
    return vda, vdb


def boot_once(workdir):
    skip_without_guest()
    spindle = daemon_flavour()[1] or _spindle_or_skip()
    make_images(workdir)
    vda_daemon = start_vda(spindle, workdir)
    vdb_daemon, example_skip = start_example(spindle, workdir)
    vda, vdb = workload()
    disks = [guest.Disk(str(workdir / "vda.sock"))]
    script, files = vda.script, dict(vda.files)
    if vdb_daemon:
        disks.append(guest.Disk(str(workdir / "vdb.sock")))
        script += vdb.script
        files.update(vdb.files)
    try:
        run, vda_status = run_guest_on(
            vda_daemon, disks, script, workdir, files=files, smp=2,
            timeout=GUEST_TIMEOUT_S)
    finally:
        vdb_status = vdb_daemon.stop() if vdb_daemon else None
    return Boot(run, {"vda": vda_status, "vdb": vdb_status},
                {"vda": vda_daemon.stderr(),
                 "vdb": vdb_daemon.stderr() if vdb_daemon else ""},
                workdir, example_skip)


@pytest.fixture(scope="module")
def boot():
    with boot_dir("qcow2") as workdir:
        yield boot_once(workdir)


def test_guest_writes_and_verifies_on_qcow2_overlay(boot):
    boot.run.check()
    assert boot.r("vda.workload") == "finished"
    assert int(boot.r("vda.size_sectors")) == SIZE // 512
    assert boot.r("vda.ro") == "0"
    assert boot.r("vda.direct") == "1", "busybox dd could not use O_DIRECT"
    assert boot.r("vda.host_md5") == guest.md5(HOST_DATA)
    boot.check_written("vda", PATTERN, TAIL)
    assert boot.statuses["vda"] == 0, boot.stderr["vda"]


def test_overlay_checks_clean_and_holds_the_guests_writes(boot):
    img = boot.workdir / "vda.qcow2"
    check_image(img)
    same, out = images_equal(img, boot.workdir / "expected.raw")
    assert same, out
    # The guest's writes went into the overlay, not the base.
    base = boot.workdir / "base.raw"
    assert sha256_file(base) == sha256_file(boot.workdir / "base1.raw")


def test_issue_example_command_line_serves_a_guest(boot):
    if boot.example_skip:
        pytest.skip(boot.example_skip)
    assert boot.r("vdb.workload") == "finished"
    assert boot.r("vdb.present") == "1"
    assert int(boot.r("vdb.size_sectors")) == SIZE // 512
    assert boot.r("vdb.ro") == "1"
    assert boot.r("vdb.host_md5") == guest.md5(HOST_DATA)
    assert boot.r("vdb.write_refused") == "1"
    assert boot.statuses["vdb"] == 0, boot.stderr["vdb"]
    # Nothing was written to the read-only disk's image.
    check_image(boot.workdir / "disk1.qcow2")
    same, out = images_equal(boot.workdir / "disk1.qcow2",
                             boot.workdir / "base1.raw")
    assert same, out

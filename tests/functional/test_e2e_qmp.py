"""End-to-end: a running Linux guest sees what QMP changes under it.

One guest boot (the harness is in tests/e2e/, see its README.md) on two
vhost-user devices that spindle serves, with a QMP monitor:

  vda  vhost-user-blk, a 64 MiB image file (node d0, export e0);
  sd*  vhost-user-scsi with one LUN, 16 MiB (export e1, LUN 0).

The guest records what it has, prints "SPINDLE-STAGE ready" and polls.  When
the test sees that line on the console it runs, over QMP (qemu.qmp):

  block_resize          d0 from 64 to 96 MiB: spindle updates the capacity in
                        the virtio-blk config space and tells QEMU over the
                        back-end channel; the guest gets a config interrupt;
  block_resize          LUN 0's node from 16 to 20 MiB: a unit attention and
                        a parameter-change event, on which Linux reads the
                        capacity again;
  blockdev-add          a new file node (24 MiB) ...
  block-export-lun-add  ... as LUN 1 of e1: the guest gets a transport-reset
                        RESCAN event and probes a new sd disk.

The guest waits (up to ~40 s) until /sys/block/vda/size shows the new size
and a new sd disk appears (and LUN 0 has grown, or 3 s more), then writes a pattern in the grown part of vda
(right at the old end, and at the new end) and on the new LUN, reads it back
and compares, and prints "SPINDLE-STAGE lun-io-done"; the test then removes
LUN 1 (block-export-lun-del, then blockdev-del of its node) and the guest
reports the disk going away.  After the guest powers off, the host finds
the guest's data in both image files.  No reboot anywhere.

A boot takes about 10 s under TCG.  Skipped, with the reason, when QEMU, a
kernel or busybox is missing, when qemu.qmp is not installed, or when the
spindle binary has no QMP monitor yet.  SPINDLE_E2E_KEEP=1 keeps the boot's
directory (console log, images, spindle's stderr).
"""

import re
import subprocess

import pytest

from conftest import make_image
from test_e2e_blk import (GuestResults, _spindle_or_skip, boot_dir, daemons,
                          guest, run_guest_on, skip_without_guest)

MiB = 1 << 20
KiB = 1 << 10

VDA_OLD = 64 * MiB
VDA_NEW = 96 * MiB
LUN0_SIZE = 16 * MiB
LUN0_NEW = 20 * MiB
LUN1_SIZE = 24 * MiB                   # differs from LUN 0: found by size

# What the guest writes: right past vda's old end, at vda's new end, and on
# the new LUN.
VDA_GROWN_OFFSET = VDA_OLD
VDA_GROWN = guest.pattern_bytes(1 * MiB, seed=0x9e51)
VDA_TAIL = guest.pattern_bytes(128 * KiB, seed=0x9e52)
LUN1_OFFSET = 2 * MiB
LUN1_PATTERN = guest.pattern_bytes(1 * MiB, seed=0x1a1)
LUN1_TAIL = guest.pattern_bytes(128 * KiB, seed=0x1a2)

GUEST_SMP = 1
GUEST_TIMEOUT_S = 90
HOT_NODE = "hot1"

# The guest, part 1: wait for its disks, remember them, say "ready", then
# poll (every 0.2 s, up to 40 s) until vda has grown and a new sd disk is
# there.
_WAIT_FOR_CHANGES = r"""
r() { echo "SPINDLE-RESULT $1=$2"; }
w() { echo "SPINDLE-WARN $*"; }
sds() { for s in /sys/block/sd*; do [ -e "$s" ] && echo -n " ${s##*/}"; done; }
i=0
while [ ! -b /dev/vda ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
i=0
while [ -z "$(sds)" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
OLD=$(cat /sys/block/vda/size)
BEFORE="$(sds) "
LUN0=$(sds); LUN0=${LUN0# }; LUN0=${LUN0%% *}
L0OLD=$(cat /sys/block/$LUN0/size)
r vda.old_sectors $OLD
r sd_before "$BEFORE"
r lun0.old_sectors $L0OLD
echo "SPINDLE-STAGE ready"
NEW=$OLD; NEWSD=; L0NEW=$L0OLD; i=0
while [ $i -lt 200 ]; do
    NEW=$(cat /sys/block/vda/size)
    L0NEW=$(cat /sys/block/$LUN0/size)
    if [ -z "$NEWSD" ]; then
        for d in $(sds); do
            case "$BEFORE" in *" $d "*) ;; *) NEWSD=$d ;; esac
        done
    fi
    [ "$NEW" != "$OLD" ] && [ -n "$NEWSD" ] && [ "$L0NEW" != "$L0OLD" ] && break
    # LUN 0's new size may need a rescan (below): do not wait for it alone.
    [ "$NEW" != "$OLD" ] && [ -n "$NEWSD" ] && [ $i -ge 15 ] && break
    sleep 0.2; i=$((i + 1))
done
r waited_ms $((i * 200))
r vda.new_sectors $NEW
r lun0.event_sectors $L0NEW
# What a user would do if the guest missed the event: rescan the disk.
echo 1 > /sys/block/$LUN0/device/rescan
r lun0.rescan_sectors $(cat /sys/block/$LUN0/size)
r lun1.dev "${NEWSD:-none}"
if [ -n "$NEWSD" ]; then
    r lun1.hctl "$(basename "$(readlink /sys/block/$NEWSD/device)")"
    r lun1.sysfs_sectors $(cat /sys/block/$NEWSD/size)
fi
"""

# Part 3: after the I/O, ask for the LUN's removal and wait for it to go.
_WAIT_FOR_REMOVAL = r"""
echo "SPINDLE-STAGE lun-io-done"
if [ -n "$NEWSD" ]; then
    i=0
    while [ -e /sys/block/$NEWSD ] && [ $i -lt 75 ]; do sleep 0.2; i=$((i + 1)); done
    if [ -e /sys/block/$NEWSD ]; then r lun1.removed 0; else r lun1.removed 1; fi
    r sd_after "$(sds) "
fi
"""


def _script():
    vda = guest.blk_workload("vda", pattern=VDA_GROWN,
                             pattern_offset=VDA_GROWN_OFFSET,
                             tail_pattern=VDA_TAIL)
    lun1 = guest.blk_workload("$NEWSD", name="lun1", pattern=LUN1_PATTERN,
                              pattern_offset=LUN1_OFFSET, tail_pattern=LUN1_TAIL)
    files = {**vda.files, **lun1.files}
    return _WAIT_FOR_CHANGES + vda.script + lun1.script + _WAIT_FOR_REMOVAL, files


def _spindle_with_monitor_or_skip():
    path = _spindle_or_skip()
    text = subprocess.run([str(path), "--help"], capture_output=True,
                          text=True, timeout=10)
    text = text.stdout + text.stderr
    if "vhost-user-scsi" not in text:
        pytest.skip(f"{path} has no vhost-user-scsi export")
    if "--monitor" not in text or re.search(r"monitor.*not implemented", text):
        pytest.skip(f"{path} has no QMP monitor yet (`spindle --help`)")
    return path


class Actions:
    """What the test does over QMP when the guest reaches a stage."""

    def __init__(self, qmp, lun1_image):
        self.qmp, self.lun1_image = qmp, lun1_image
        self.done = []               # (stage, command, reply) in order
        self.seen = set()

    def run(self, stage, command, **args):
        self.done.append((stage, command, self.qmp.cmd(command, **args)))

    def on_line(self, line):
        for stage in ("ready", "lun-io-done"):
            if f"SPINDLE-STAGE {stage}" in line and stage not in self.seen:
                self.seen.add(stage)
                getattr(self, stage.replace("-", "_"))()

    def ready(self):
        self.run("ready", "block_resize", **{"node-name": "d0", "size": VDA_NEW})
        self.run("ready", "block_resize", **{"node-name": "d1l0", "size": LUN0_NEW})
        self.run("ready", "blockdev-add", driver="file",
                 **{"node-name": HOT_NODE, "filename": str(self.lun1_image)})
        self.run("ready", "block-export-lun-add", id="e1", lun=1,
                 **{"node-name": HOT_NODE, "writable": True})

    def lun_io_done(self):
        self.run("lun-io-done", "block-export-lun-del", id="e1", lun=1)
        self.run("lun-io-done", "blockdev-del", **{"node-name": HOT_NODE})


class Boot(GuestResults):
    def __init__(self, run, actions, status, stderr, workdir, images):
        self.run, self.actions = run, actions
        self.daemon_status, self.daemon_stderr = status, stderr
        self.workdir, self.images = workdir, images


@pytest.fixture(scope="module")
def boot():
    skip_without_guest()
    legacy = pytest.importorskip("qemu.qmp.legacy",
                                 reason="qemu.qmp is not installed (pip install qemu.qmp)")
    program = _spindle_with_monitor_or_skip()
    with boot_dir("qmp") as workdir:
        images = {"vda": workdir / "vda.img", "lun0": workdir / "lun0.img",
                  "lun1": workdir / "lun1.img"}
        for name, size in (("vda", VDA_OLD), ("lun0", LUN0_SIZE),
                           ("lun1", LUN1_SIZE)):
            make_image(images[name], size)
        qmp_sock = workdir / "qmp.sock"
        exports = [
            daemons.Export(str(images["vda"]), str(workdir / "vda.sock")),
            daemons.ScsiExport([daemons.ScsiLun(str(images["lun0"]), writable=True)],
                               str(workdir / "sd.sock")),
        ]
        daemon = daemons.Daemon(
            program, exports, "spindle", workdir,
            extra_args=("--chardev", f"socket,id=m0,path={qmp_sock},server=on,wait=off",
                        "--monitor", "chardev=m0"),
            extra_sockets=(qmp_sock,)).start()
        qmp = legacy.QEMUMonitorProtocol(str(qmp_sock))
        try:
            qmp.connect()
            qmp.settimeout(20)
            actions = Actions(qmp, images["lun1"])
            script, files = _script()
            run, status = run_guest_on(
                daemon, [guest.Disk(exports[0].socket),
                         guest.Disk(exports[1].socket, kind="scsi")],
                script, workdir, files=files, smp=GUEST_SMP,
                timeout=GUEST_TIMEOUT_S, on_line=actions.on_line,
                context=lambda: f"QMP done: {actions.done}\n")
        finally:
            qmp.close()
            daemon.stop()
        yield Boot(run, actions, status, daemon.stderr(), workdir, images)


def test_guest_finishes_and_qmp_commands_succeeded(boot):
    boot.run.check()
    assert [(s, c) for s, c, _ in boot.actions.done] == [
        ("ready", "block_resize"), ("ready", "block_resize"),
        ("ready", "blockdev-add"),
        ("ready", "block-export-lun-add"),
        ("lun-io-done", "block-export-lun-del"), ("lun-io-done", "blockdev-del")]
    assert all(reply == {} for _, _, reply in boot.actions.done), boot.actions.done
    print(f"\nguest saw both changes after {boot.r('waited_ms')} ms; boot took "
          f"{boot.run.seconds:.1f} s")


def test_guest_sees_vda_grow_without_reboot(boot):
    assert int(boot.r("vda.old_sectors")) == VDA_OLD // 512
    assert int(boot.r("vda.new_sectors")) == VDA_NEW // 512
    # blk_workload's own look, after the change, agrees.
    assert int(boot.r("vda.size_sectors")) == VDA_NEW // 512


def test_guest_sees_a_scsi_lun_grow_without_rescan(boot):
    """block_resize of LUN 0's node: the parameter-change event makes Linux
    read the capacity again by itself (lun0.event_sectors is read before
    the script's own rescan)."""
    assert int(boot.r("lun0.old_sectors")) == LUN0_SIZE // 512
    assert int(boot.r("lun0.event_sectors")) == LUN0_NEW // 512
    assert int(boot.r("lun0.rescan_sectors")) == LUN0_NEW // 512
    assert boot.images["lun0"].stat().st_size == LUN0_NEW


def test_guest_uses_the_grown_area(boot):
    boot.check_written("vda", VDA_GROWN, VDA_TAIL)


def test_new_lun_appears_with_its_size(boot):
    dev = boot.r("lun1.dev")
    assert dev != "none", boot.run.results
    assert dev not in boot.r("sd_before").split()
    assert int(boot.r("lun1.sysfs_sectors")) == LUN1_SIZE // 512
    assert int(boot.r("lun1.size_sectors")) == LUN1_SIZE // 512
    h, c, t, l = (int(x) for x in boot.r("lun1.hctl").split(":"))
    assert (c, t, l) == (0, 0, 1), boot.r("lun1.hctl")
    assert boot.r("lun1.ro") == "0"


def test_guest_uses_the_new_lun(boot):
    boot.check_written("lun1", LUN1_PATTERN, LUN1_TAIL)


def test_guest_sees_the_lun_go(boot):
    assert boot.r("lun1.removed") == "1"
    assert boot.r("lun1.dev") not in boot.r("sd_after").split()
    # LUN 0 is still there.
    assert boot.r("sd_after").split() == boot.r("sd_before").split()


def test_images_hold_the_guests_data(boot):
    vda = boot.images["vda"].read_bytes()
    assert len(vda) == VDA_NEW               # the file grew
    expect = bytearray(VDA_NEW)
    expect[VDA_GROWN_OFFSET:VDA_GROWN_OFFSET + len(VDA_GROWN)] = VDA_GROWN
    expect[-len(VDA_TAIL):] = VDA_TAIL
    assert vda == bytes(expect)
    lun1 = boot.images["lun1"].read_bytes()
    expect = bytearray(LUN1_SIZE)
    expect[LUN1_OFFSET:LUN1_OFFSET + len(LUN1_PATTERN)] = LUN1_PATTERN
    expect[-len(LUN1_TAIL):] = LUN1_TAIL
    assert lun1 == bytes(expect)


def test_daemon_exits_0_on_sigterm(boot):
    assert boot.daemon_status == 0, boot.daemon_stderr[-3000:]

"""End-to-end: a real Linux guest in QEMU does I/O on vhost-user-scsi LUNs.

spindle serves two vhost-user-scsi exports from one process, and one guest
boot (2 vCPUs, virtio_scsi + sd_mod) checks all their LUNs (the harness is
in tests/e2e/, see its README.md):

  e0  num-queues=2, two writable LUNs:
      LUN 0  64 MiB, discard=unmap, serial, vendor, product and wwn set: the
             guest sees its size, the vendor and model in sysfs, the serial
             in VPD page 0x80, the wwn in VPD page 0x83 (wwid), discard
             limits, a write-back cache, a non-rotational medium (VPD 0xB1)
             and two hardware queues; it writes known patterns with O_DIRECT
             in the middle and at the very end, reads them back and
             compares, reads a region the host filled, and discards a region
             with blkdiscard.
      LUN 1  32 MiB, defaults otherwise: no discard; the same write, read
             and compare, from the other vCPU (so through the other queue).
  e1  num-queues=1, one LUN whose writable= is left at its default (off):
      16 MiB, the guest sees a read-only disk with one queue, reads the
      host's data, and a write fails.

The guest names disks sdX in the order it happens to probe them, so the
script finds each LUN by its size and prints its H:C:T:L; the host then
checks that LUN numbers are the list indexes of lun.N and that LUNs without
a serial or wwn still have distinct identifiers.  After shutdown the host
finds the guest's data (and the discarded hole) in the image files, both of
e0's request queues carried requests (spindle's exit statistics), and
spindle exits 0 on SIGTERM.

A boot takes about 8 s under TCG.  Skipped, with the reason, when QEMU, a
kernel or busybox is missing (scripts/install-deps.sh installs them) or when
the spindle binary has no vhost-user-scsi export yet.  SPINDLE_E2E_KEEP=1
keeps the boot's directory (console log, images, spindle's stderr).
"""

import re
import subprocess

import pytest

from test_e2e_blk import (GuestResults, _spindle_or_skip, boot_dir, daemons,
                          guest, run_guest_on, skip_without_guest)

MiB = 1 << 20
KiB = 1 << 10

VENDOR = "E2EVEND"                     # INQUIRY: up to 8 characters
PRODUCT = "E2E-SCSI-DISK"              # up to 16
SERIAL = "spindle-e2e-lun0"            # VPD 0x80
WWN = 0x5000c500a1b2c3d4               # VPD 0x83, NAA 5
DEFAULT_VENDOR = "SPINDLE"
DEFAULT_PRODUCT = "SPINDLE DISK"

GUEST_SMP = 2
# What spindle prints for each virtqueue of export e0 when it exits.
QUEUE_STATS = re.compile(r"export e0 queue (\d+) stats: iothread=\S+ requests=(\d+)")
GUEST_TIMEOUT_S = 90


class Lun:
    """One LUN of the boot: its image, what the guest does, what it sees."""

    def __init__(self, name, size, export, lun, writable=True, node_opts="",
                 props=None, pattern_offset=None, host_region=None,
                 discard_region=None, seed=0):
        self.name, self.size, self.export, self.lun = name, size, export, lun
        self.writable, self.node_opts, self.props = writable, node_opts, props
        self.pattern_offset = pattern_offset
        self.host_region = host_region
        self.discard_region = discard_region
        self.pattern = (guest.pattern_bytes(2 * MiB, seed=seed)
                        if pattern_offset is not None else b"")
        self.tail = (guest.pattern_bytes(128 * KiB, seed=seed + 1)
                     if pattern_offset is not None else b"")
        self.host_data = (guest.pattern_bytes(host_region[1], seed=seed + 2)
                          if host_region else b"")
        self.image = None

    def make_image(self, workdir):
        self.image = workdir / f"{self.name}.img"
        with open(self.image, "wb") as f:
            f.truncate(self.size)
            if self.host_region:
                f.seek(self.host_region[0])
                f.write(self.host_data)
            if self.discard_region:
                # Non-zero data where the guest will discard.
                f.seek(self.discard_region[0])
                f.write(b"\xa5" * self.discard_region[1])

    def workload(self):
        """blk_workload for this LUN, on the sdX the guest found for it."""
        return guest.blk_workload(
            f"${self.name.upper()}", name=self.name, pattern=self.pattern,
            pattern_offset=self.pattern_offset or 0, tail_pattern=self.tail,
            host_region=self.host_region, discard_region=self.discard_region,
            try_write=not self.writable)

    def scsi_lun(self):
        return daemons.ScsiLun(str(self.image), writable=self.writable or None,
                               node_opts=self.node_opts, props=self.props)


LUNS = {
    "lun0": Lun("lun0", 64 * MiB, export=0, lun=0, node_opts=",discard=unmap",
                props={"serial": SERIAL, "vendor": VENDOR, "product": PRODUCT,
                       "wwn": f"0x{WWN:016x}"},
                pattern_offset=1 * MiB, host_region=(8 * MiB, 1 * MiB),
                discard_region=(16 * MiB, 1 * MiB), seed=0x5c5100),
    "lun1": Lun("lun1", 32 * MiB, export=0, lun=1, pattern_offset=4 * MiB,
                seed=0x5c5110),
    # writable= left out: the default is off.  The host's data is where the
    # guest's (refused) write of zeroes goes.
    "ro": Lun("ro", 16 * MiB, export=1, lun=0, writable=False,
              host_region=(0, 512 * KiB), seed=0x5c5120),
}
EXPORT_QUEUES = (2, 1)
# The vCPU each LUN's workload runs on: with 2 queues, blk-mq maps CPU i to
# queue i, so LUN 0 and LUN 1 go through different queues of e0.
CPU = {"lun0": 0, "lun1": 1, "ro": 0}

# Finds each LUN's sdX by size (sd names follow probe order, which is not
# the LUN order), sets $LUN0, $LUN1, $RO and prints what SCSI shows in sysfs.
_FIND_LUNS = r"""
r() { echo "SPINDLE-RESULT $1=$2"; }
w() { echo "SPINDLE-WARN $*"; }
sysval() { if [ -r "$1" ]; then cat "$1"; else echo none; fi; }
r cpus $(nproc)
i=0
while [ $(ls -d /sys/block/sd* 2>/dev/null | wc -l) -lt @NLUNS@ ] && [ $i -lt 100 ]; do
    sleep 0.1; i=$((i + 1))
done
r sd_count $(ls -d /sys/block/sd* 2>/dev/null | wc -l)
for s in /sys/block/sd*; do
    [ -e "$s" ] || continue
    d=${s##*/}
    case $(cat $s/size) in
@CASES@
        *) w "unexpected disk $d of $(cat $s/size) sectors"; continue ;;
    esac
    eval $(echo $n | tr a-z A-Z)=$d
    r "$n.dev" $d
    r "$n.hctl" "$(basename "$(readlink $s/device)")"
    r "$n.vendor" "$(sysval $s/device/vendor)"
    r "$n.model" "$(sysval $s/device/model)"
    r "$n.wwid" "$(sysval $s/device/wwid)"
    if [ -r $s/device/vpd_pg80 ]; then
        r "$n.vpd80_serial" "$(dd if=$s/device/vpd_pg80 bs=1 skip=4 2>/dev/null | tr -d '\000')"
    else
        r "$n.vpd80_serial" none
    fi
    if [ -r $s/device/vpd_pg83 ]; then
        r "$n.vpd83_hex" "$(od -An -tx1 -v $s/device/vpd_pg83 | tr -d ' \n')"
    else
        r "$n.vpd83_hex" none
    fi
    r "$n.rotational" $(sysval $s/queue/rotational)
    r "$n.scsi_cache_type" "$(sysval $s/device/scsi_disk/*/cache_type)"
    r "$n.fua" "$(sysval $s/device/scsi_disk/*/FUA)"
    r "$n.provisioning_mode" "$(sysval $s/device/scsi_disk/*/provisioning_mode)"
done
"""


def _script():
    cases = "\n".join(f"        {lun.size // 512}) n={lun.name} ;;"
                      for lun in LUNS.values())
    parts = [_FIND_LUNS.replace("@NLUNS@", str(len(LUNS)))
             .replace("@CASES@", cases)]
    files = {}
    for name, lun in LUNS.items():
        work = lun.workload()
        parts.append(f"taskset -pc {CPU[name]} $$ >/dev/null || w taskset failed\n"
                     + work.script)
        files.update(work.files)
    return "".join(parts), files


def _spindle_scsi_or_skip():
    """Path of a spindle with a vhost-user-scsi export, or skip with the reason."""
    path = _spindle_or_skip()
    proc = subprocess.run([str(path), "--help"], capture_output=True, text=True,
                          timeout=10)
    if "vhost-user-scsi" not in proc.stdout + proc.stderr:
        pytest.skip(f"{path} has no vhost-user-scsi export yet (`spindle "
                    "--help` does not list it)")
    return path


class Boot(GuestResults):
    def __init__(self, run, status, stderr, workdir):
        self.run, self.daemon_status, self.daemon_stderr = run, status, stderr
        self.workdir = workdir


@pytest.fixture(scope="module")
def boot():
    skip_without_guest()
    program = _spindle_scsi_or_skip()
    with boot_dir("scsi") as workdir:
        for lun in LUNS.values():
            lun.make_image(workdir)
        exports = []
        for e, queues in enumerate(EXPORT_QUEUES):
            luns = sorted((l for l in LUNS.values() if l.export == e),
                          key=lambda l: l.lun)
            assert [l.lun for l in luns] == list(range(len(luns)))
            exports.append(daemons.ScsiExport(
                [l.scsi_lun() for l in luns], str(workdir / f"s{e}.sock"),
                num_queues=queues))
        script, files = _script()
        daemon = daemons.Daemon(program, exports, "spindle", workdir).start()
        run, status = run_guest_on(
            daemon, [guest.Disk(exp.socket, num_queues=exp.num_queues,
                                kind="scsi") for exp in exports],
            script, workdir, files=files, smp=GUEST_SMP,
            timeout=GUEST_TIMEOUT_S)
        yield Boot(run, status, daemon.stderr(), workdir)


def test_guest_boots_and_finishes(boot):
    boot.run.check()
    assert boot.r("cpus") == str(GUEST_SMP)
    for name in LUNS:
        assert boot.r(f"{name}.workload") == "finished"
    assert not [w for w in boot.run.warnings if "insmod" not in w], boot.run.warnings


def test_guest_finds_exactly_the_luns_with_their_numbers(boot):
    """Three sd disks (REPORT LUNS / INQUIRY found no others), each with the
    right size, LUN number = index in lun.N, one SCSI host per export."""
    assert int(boot.r("sd_count")) == len(LUNS)
    hosts = {}
    for name, lun in LUNS.items():
        assert boot.r(f"{name}.present") == "1"
        assert int(boot.r(f"{name}.size_sectors")) == lun.size // 512
        h, c, t, l = (int(x) for x in boot.r(f"{name}.hctl").split(":"))
        assert (c, t, l) == (0, 0, lun.lun), (name, boot.r(f"{name}.hctl"))
        hosts.setdefault(lun.export, set()).add(h)
    assert all(len(h) == 1 for h in hosts.values()), hosts
    assert len(set.union(*hosts.values())) == len(EXPORT_QUEUES), hosts
    assert len({boot.r(f"{n}.dev") for n in LUNS}) == len(LUNS)


def test_inquiry_vendor_and_product(boot):
    assert boot.r("lun0.vendor").strip() == VENDOR
    assert boot.r("lun0.model").strip() == PRODUCT
    for name in ("lun1", "ro"):
        assert boot.r(f"{name}.vendor").strip() == DEFAULT_VENDOR, name
        assert boot.r(f"{name}.model").strip() == DEFAULT_PRODUCT, name


def test_serial_in_vpd_page_0x80(boot):
    serial = boot.r("lun0.vpd80_serial")
    if serial == "none":
        pytest.fail("the guest has no /sys/block/sdX/device/vpd_pg80: the "
                    "LUN does not list VPD page 0x80 in page 0x00")
    assert serial.strip() == SERIAL


def test_wwn_in_vpd_page_0x83(boot):
    # Linux names the LUN by its NAA designator: "naa." + 16 hex digits.
    assert boot.r("lun0.wwid") == f"naa.{WWN:016x}"
    # Designator: binary, associated with the LUN, NAA, 8 bytes, the wwn.
    assert f"01030008{WWN:016x}" in boot.r("lun0.vpd83_hex")


def test_luns_without_serial_or_wwn_have_distinct_ids(boot):
    """A LUN's VPD 0x83 designator names it: Linux makes it the wwid, udev
    the /dev/disk/by-id name, and multipath takes two disks with one id for
    two paths to the same LUN.  So two LUNs must not share one, even when
    neither has a serial or a wwn."""
    ids = {name: boot.r(f"{name}.wwid") for name in ("lun1", "ro")}
    assert all(i not in ("", "none") for i in ids.values()), ids
    assert ids["lun1"] != ids["ro"], ids


def test_discard_only_on_the_unmap_lun(boot):
    assert int(boot.r("lun0.discard_max_bytes")) > 0
    assert int(boot.r("lun0.discard_granularity")) > 0
    assert boot.r("lun0.discard_rc") == "0"
    for name in ("lun1", "ro"):
        assert int(boot.r(f"{name}.discard_max_bytes")) == 0, name
        assert f"{name}.discard_rc" not in boot.run.results


def test_write_back_cache_fua_and_non_rotational(boot):
    for name, lun in LUNS.items():
        # WCE is on by default; Linux ignores it on a write-protected disk.
        cache = "write back" if lun.writable else "write through"
        assert boot.r(f"{name}.cache_type") == cache, name
        assert boot.r(f"{name}.scsi_cache_type") == cache, name
        # MODE SENSE's DPOFUA: the guest may send FUA writes.
        if lun.writable:
            assert boot.r(f"{name}.fua") == "1", name
        assert boot.r(f"{name}.rotational") == "0", name


def test_hardware_queues_follow_num_queues(boot):
    for name, lun in LUNS.items():
        assert int(boot.r(f"{name}.hw_queues")) == EXPORT_QUEUES[lun.export], name


def test_guest_verifies_what_it_wrote(boot):
    for name, lun in LUNS.items():
        if not lun.writable:
            continue
        assert boot.r(f"{name}.ro") == "0"
        assert boot.r(f"{name}.direct") == "1", "busybox dd could not use O_DIRECT"
        boot.check_written(name, lun.pattern, lun.tail)


def test_guest_reads_what_the_host_wrote(boot):
    for name, lun in LUNS.items():
        if lun.host_region:
            assert boot.r(f"{name}.host_md5") == guest.md5(lun.host_data), name


def test_image_files_hold_the_guests_data(boot):
    for name, lun in LUNS.items():
        data = lun.image.read_bytes()
        assert len(data) == lun.size, name
        expect = bytearray(lun.size)
        if lun.host_region:
            off, length = lun.host_region
            expect[off:off + length] = lun.host_data
        if lun.writable:
            off = lun.pattern_offset
            expect[off:off + len(lun.pattern)] = lun.pattern
            expect[-len(lun.tail):] = lun.tail
        # The discarded region (0xa5 before the boot) is a hole now.
        assert data == bytes(expect), name


def test_read_only_lun_by_default(boot):
    assert boot.r("ro.ro") == "1"
    assert boot.r("ro.write_refused") == "1"


def test_both_request_queues_took_requests(boot):
    """e0's virtqueues 2 and 3 (0 is control, 1 events) each carried one
    LUN's workload: the guest ran them on different vCPUs."""
    queues = {int(m[1]): int(m[2]) for m in QUEUE_STATS.finditer(boot.daemon_stderr)}
    # Each workload wrote and read back a 2 MiB pattern in 64 KiB requests.
    least = 2 * (2 * MiB // (64 * KiB))
    for q in (2, 3):
        assert queues.get(q, 0) >= least, (q, boot.daemon_stderr)


def test_daemon_exits_0_on_sigterm(boot):
    assert boot.daemon_status == 0, boot.daemon_stderr

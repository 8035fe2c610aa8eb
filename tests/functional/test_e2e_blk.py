"""End-to-end: a real Linux guest in QEMU does I/O on vhost-user-blk disks.

Each back-end (spindle, and Debian's qemu-storage-daemon as a cross-check)
serves two exports from one process, and one guest boot checks both
(the harness is in tests/e2e/, see its README.md):

  vda  64 MiB + 192 KiB, writable, num-queues=4, serial=SERIAL (spindle only;
       qemu-storage-daemon's serial is fixed): the guest checks its size,
       serial, 4 hardware queues and discard limits, writes a known pattern
       with O_DIRECT in the middle and at the very end, reads it back and
       compares; it also reads a region the host filled before the boot and
       discards a region.  After shutdown the host finds the guest's data in
       the image file.
  vdb  32 MiB, writable=off, logical-block-size=4096, num-queues=1: the guest
       sees a read-only disk with 4 KiB sectors and one queue, reads the
       host's data, and a write fails.

That boot passes edd=off, so the Linux driver is tested on its own.  A second,
short boot per back-end leaves it out: the kernel's EDD probe then reads each
disk's first sector through SeaBIOS's virtio-blk driver (as every BIOS boot
from such a disk does), which must not hang.

The guest runs under TCG with 4 vCPUs (virtio-blk uses at most one queue per
CPU); a boot takes about 8 s.  Tests are skipped, with the reason, when QEMU,
a kernel or busybox is missing (scripts/install-deps.sh installs them) or
when the spindle binary does not implement the daemon yet.
SPINDLE_E2E_KEEP=1 keeps each boot's directory (console log, images, the
daemon's stderr) and prints where it is.
"""

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

import daemons  # noqa: E402
import guest  # noqa: E402
from conftest import _build_dir_path, find_binary  # noqa: E402

MiB = 1 << 20
KiB = 1 << 10
SERIAL = "spindle-e2e-vda"
QSD_SERIAL = "vhost_user_blk"          # fixed in qemu-storage-daemon 7.2

VDA_SIZE = 64 * MiB + 192 * KiB        # not a power of two, a multiple of 64 KiB
VDA_QUEUES = 4
PATTERN_OFFSET = 1 * MiB
PATTERN = guest.pattern_bytes(2 * MiB, seed=0x5b1d1e)
TAIL = guest.pattern_bytes(128 * KiB, seed=0x7a11)
HOST_REGION = (8 * MiB, 1 * MiB)       # written by the host before the boot
HOST_DATA = guest.pattern_bytes(HOST_REGION[1], seed=0x4057)
DISCARD_REGION = (16 * MiB, 1 * MiB)

VDB_SIZE = 32 * MiB
VDB_BLOCK = 4096
VDB_REGION = (4 * MiB, 512 * KiB)
VDB_DATA = guest.pattern_bytes(VDB_REGION[1], seed=0xb10c)

GUEST_SMP = 4
GUEST_TIMEOUT_S = 90
FIRMWARE_TIMEOUT_S = 40                # a good boot takes about 7 s
BACKENDS = ("spindle", "qemu-storage-daemon")


class GuestResults:
    """For a boot's record with a .run (a guest.GuestRun): r(key) and
    check_written(dev, pattern, tail).

    test_e2e_*.py's Boot classes share it."""

    def r(self, key):
        """A guest result; fails the test with the console if it is missing."""
        if key not in self.run.results:
            pytest.fail(f"guest printed no {key}; console tail:\n"
                        f"{guest.tail(self.run.console)}")
        return self.run.results[key]

    def check_written(self, dev, pattern, tail):
        """The guest wrote blk_workload's pattern and tail on dev (the
        name its results carry), read them back and found them intact."""
        for part, data in (("pattern", pattern), ("tail", tail)):
            assert self.r(f"{dev}.{part}_write_rc") == "0", (dev, part)
            assert self.r(f"{dev}.{part}_read_rc") == "0", (dev, part)
            assert self.r(f"{dev}.{part}_verify") == "ok", (dev, part)
            assert self.r(f"{dev}.{part}_md5") == guest.md5(data), (dev, part)


@dataclass
class Boot(GuestResults):
    backend: str
    run: guest.GuestRun
    daemon_status: int
    daemon_stderr: str
    vda_image: Path
    vdb_image: Path
    workdir: Path


def _spindle_or_skip():
    """Path of a spindle that implements the daemon, or skip with the reason."""
    build = _build_dir_path()
    path = find_binary(build, "spindle")
    if path is None:
        pytest.skip(f"spindle is not built in {build}: run `make`")
    proc = subprocess.run([str(path), "--help"], capture_output=True, text=True,
                          timeout=10)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 or "vhost-user-blk" not in text:
        pytest.skip(f"{path} does not implement the daemon yet (`spindle --help` "
                    f"exited {proc.returncode} without describing a "
                    "vhost-user-blk export)")
    return path


@contextlib.contextmanager
def boot_dir(what):
    """A fresh directory for one boot, with a short path (UNIX socket paths
    are limited to 107 bytes); removed afterwards, or kept and named with
    SPINDLE_E2E_KEEP=1."""
    workdir = Path(tempfile.mkdtemp(prefix="spindle-e2e-"))
    try:
        yield workdir
    finally:
        if os.environ.get("SPINDLE_E2E_KEEP"):
            print(f"\nkept the {what} boot (console, images, stderr): "
                  f"{workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def skip_without_guest():
    reasons = guest.missing_prerequisites()
    if reasons:
        pytest.skip("cannot boot a guest: " + "; ".join(reasons))


def run_guest_on(daemon, disks, script, workdir, context=lambda: "", **kw):
    """Boot a guest on disks of the started `daemon` (edd=off, console in
    WORKDIR/console.log) and run script; then stop the daemon.  Returns
    (the guest.GuestRun, the daemon's exit status).  A failed boot (or an
    exception from kw's on_line) fails the test with its reason, context(),
    the console's tail and the daemon's output."""
    try:
        run = guest.run_guest(disks, script,
                              console_log=workdir / "console.log",
                              append_extra=guest.NO_FIRMWARE_DISK_PROBE, **kw)
    except Exception as e:
        try:
            console = (workdir / "console.log").read_text(errors="replace")
        except OSError:
            console = ""
        daemon.stop()
        pytest.fail(f"{type(e).__name__}: {e}\n{context()}console tail:\n"
                    f"{guest.tail(console)}\n{daemon.name} stderr:\n"
                    f"{daemon.stderr()[-3000:]}", pytrace=False)
    finally:
        status = daemon.stop()
    return run, status


def _program(backend):
    if backend == "spindle":
        return _spindle_or_skip(), "spindle"
    path = daemons.find_qsd()
    if path is None:
        pytest.skip("qemu-storage-daemon not found: install qemu-system-common")
    return path, "qsd"


def _workload():
    vda = guest.blk_workload(
        "vda", pattern=PATTERN, pattern_offset=PATTERN_OFFSET, tail_pattern=TAIL,
        host_region=HOST_REGION, discard_region=DISCARD_REGION)
    vdb = guest.blk_workload("vdb", host_region=VDB_REGION, try_write=True)
    return vda.script + vdb.script, {**vda.files, **vdb.files}


def _make_images(workdir):
    vda = workdir / "vda.img"
    with open(vda, "wb") as f:
        f.truncate(VDA_SIZE)
        f.seek(HOST_REGION[0])
        f.write(HOST_DATA)
        # Non-zero data where the guest will discard.
        f.seek(DISCARD_REGION[0])
        f.write(b"\xa5" * DISCARD_REGION[1])
    vdb = workdir / "vdb.img"
    with open(vdb, "wb") as f:
        f.truncate(VDB_SIZE)
        f.seek(VDB_REGION[0])
        f.write(VDB_DATA)
    return vda, vdb


def _boot(backend):
    skip_without_guest()
    program, flavour = _program(backend)
    # A short directory: UNIX socket paths are limited to 107 bytes.
    workdir = Path(tempfile.mkdtemp(prefix="spindle-e2e-"))
    try:
        vda_img, vdb_img = _make_images(workdir)
        exports = [
            daemons.Export(str(vda_img), str(workdir / "vda.sock"),
                           num_queues=VDA_QUEUES, serial=SERIAL),
            daemons.Export(str(vdb_img), str(workdir / "vdb.sock"),
                           num_queues=1, writable=False,
                           logical_block_size=VDB_BLOCK),
        ]
        script, files = _workload()
        daemon = daemons.Daemon(program, exports, flavour, workdir).start()
        run, status = run_guest_on(
            daemon, [guest.Disk(exports[0].socket, num_queues=VDA_QUEUES),
                     guest.Disk(exports[1].socket, num_queues=1)],
            script, workdir, files=files, smp=GUEST_SMP,
            timeout=GUEST_TIMEOUT_S)
        return Boot(backend, run, status, daemon.stderr(), vda_img, vdb_img,
                    workdir)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise


_BOOTS = {}


def _boot_cached(backend):
    """One boot per back-end per session, shared by the tests below."""
    if backend not in _BOOTS:
        try:
            _BOOTS[backend] = _boot(backend)
        except BaseException as e:
            _BOOTS[backend] = e
            raise
    cached = _BOOTS[backend]
    if isinstance(cached, pytest.skip.Exception):
        pytest.skip(str(cached))
    if isinstance(cached, BaseException):
        pytest.fail(f"the {backend} boot failed earlier: {cached}", pytrace=False)
    return cached


@pytest.fixture(scope="module", params=BACKENDS)
def boot(request):
    b = _boot_cached(request.param)
    yield b


@pytest.fixture(scope="module", autouse=True)
def _cleanup():
    yield
    for b in _BOOTS.values():
        if isinstance(b, Boot):
            if os.environ.get("SPINDLE_E2E_KEEP"):
                print(f"\nkept {b.backend} boot (console, images, stderr): {b.workdir}")
            else:
                shutil.rmtree(b.workdir, ignore_errors=True)
    _BOOTS.clear()


def test_guest_boots_and_finishes(boot):
    boot.run.check()
    assert boot.r("vda.workload") == "finished"
    assert boot.r("vdb.workload") == "finished"
    assert not [w for w in boot.run.warnings if "insmod" not in w], boot.run.warnings


def test_guest_sees_vda_with_the_right_size(boot):
    assert boot.r("vda.present") == "1"
    assert int(boot.r("vda.size_sectors")) == VDA_SIZE // 512
    assert boot.r("vda.ro") == "0"
    assert int(boot.r("vda.logical_block_size")) == 512


def test_guest_sees_the_serial(boot):
    serial = boot.r("vda.serial")
    if serial == "<no-sysfs-attr>":
        pytest.skip("this guest kernel has no /sys/block/vda/serial")
    expected = SERIAL if boot.backend == "spindle" else QSD_SERIAL
    assert serial == expected


def test_num_queues_4_gives_4_hw_queues(boot):
    assert int(boot.r("vda.hw_queues")) == VDA_QUEUES
    assert int(boot.r("vdb.hw_queues")) == 1


def test_guest_verifies_what_it_wrote(boot):
    assert boot.r("vda.direct") == "1", "busybox dd could not use O_DIRECT"
    boot.check_written("vda", PATTERN, TAIL)


def test_guest_reads_what_the_host_wrote(boot):
    assert boot.r("vda.host_md5") == guest.md5(HOST_DATA)
    assert boot.r("vdb.host_md5") == guest.md5(VDB_DATA)


def test_image_file_holds_the_guests_data(boot):
    data = boot.vda_image.read_bytes()
    assert len(data) == VDA_SIZE
    assert data[PATTERN_OFFSET:PATTERN_OFFSET + len(PATTERN)] == PATTERN
    assert data[-len(TAIL):] == TAIL
    assert data[HOST_REGION[0]:HOST_REGION[0] + HOST_REGION[1]] == HOST_DATA
    # Nothing else was written: the gaps are still zero.
    assert data[:PATTERN_OFFSET] == bytes(PATTERN_OFFSET)


def test_discard_limits_are_offered(boot):
    assert int(boot.r("vda.discard_max_bytes")) > 0
    assert int(boot.r("vda.discard_granularity")) > 0
    assert boot.r("vda.discard_rc") == "0"


def test_read_only_4k_export(boot):
    assert boot.r("vdb.present") == "1"
    assert boot.r("vdb.ro") == "1"
    assert int(boot.r("vdb.logical_block_size")) == VDB_BLOCK
    assert int(boot.r("vdb.size_sectors")) == VDB_SIZE // 512
    assert boot.r("vdb.write_refused") == "1"
    data = boot.vdb_image.read_bytes()
    assert data[:64 * KiB] == bytes(64 * KiB), "the refused write reached the image"
    assert data[VDB_REGION[0]:sum(VDB_REGION)] == VDB_DATA


def test_daemon_exits_0_on_sigterm(boot):
    assert boot.daemon_status == 0, boot.daemon_stderr


def test_cross_check_same_guest_view():
    """Where the two back-ends should agree, the guest sees the same thing."""
    spindle = _boot_cached("spindle")
    qsd = _boot_cached("qemu-storage-daemon")
    keys = ("size_sectors", "hw_queues", "ro", "logical_block_size",
            "pattern_verify", "tail_verify", "host_md5")
    for dev in ("vda", "vdb"):
        for key in keys:
            k = f"{dev}.{key}"
            assert spindle.run.results.get(k) == qsd.run.results.get(k), k


@pytest.mark.parametrize("backend", BACKENDS)
def test_firmware_reads_the_disk(backend):
    """SeaBIOS's virtio-blk driver can read the disk (no edd=off this time).

    The kernel's EDD probe asks the BIOS for each disk's first sector, which
    SeaBIOS reads through its own small virtio-blk driver: one queue, no
    EVENT_IDX, no interrupts, requests split by size_max * seg_max.  If that
    read never completes, or completes in a way SeaBIOS retries forever, the
    boot stops at "Probing EDD" and this test times out.
    """
    skip_without_guest()
    program, flavour = _program(backend)
    with boot_dir(f"{backend} firmware") as workdir:
        img = workdir / "boot.img"
        mbr = guest.pattern_bytes(512, seed=0xb007)
        with open(img, "wb") as f:
            f.truncate(16 * MiB)
            f.write(mbr)
        exp = daemons.Export(str(img), str(workdir / "boot.sock"), serial=SERIAL)
        script = ('r() { echo "SPINDLE-RESULT $1=$2"; }\n'
                  'r mbr_md5 "$(dd if=/dev/vda bs=512 count=1 2>/dev/null'
                  ' | md5sum | cut -d" " -f1)"\n')
        failure = None
        with daemons.Daemon(program, [exp], flavour, workdir) as daemon:
            try:
                run = guest.run_guest([guest.Disk(exp.socket)], script,
                                      timeout=FIRMWARE_TIMEOUT_S)
            except guest.GuestError as e:
                failure = str(e)
        if failure:
            pytest.fail(f"{failure}\n{backend} stderr:\n{daemon.stderr()[-2000:]}",
                        pytrace=False)
        run.check()
        assert run.results.get("mbr_md5") == guest.md5(mbr)

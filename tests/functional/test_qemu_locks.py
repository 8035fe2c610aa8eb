"""Image locks that QEMU understands, against Debian's QEMU 7.2 tools.

A file node holds, besides Spindle's own lock byte, the OFD locks QEMU's
file driver takes for its permissions (docs/block.md, "Locking"), so:

- QEMU's tools refuse to open for writing an image that a writable or a
  read-only Spindle node holds (qemu-img resize, qemu-io, a writable
  qemu-storage-daemon export: 'Failed to get "write" lock'), while what
  QEMU lets read beside a writer (qemu-img info, with or without -U)
  still works;
- Spindle refuses an image that qemu-io or qemu-storage-daemon holds for
  writing, with one line naming QEMU's permission;
- a read-only node and QEMU's readers that share writing (qemu-io -r, a
  read-only qemu-storage-daemon export) coexist;
- locking=off takes nothing, and an inactive node (active=off) takes its
  locks only when it is activated.

Each QEMU program is looked up on PATH; a test needing one that is missing
is skipped with the package to install (scripts/install-deps.sh installs
them).
"""

import fcntl
import os
import shutil
import struct
import subprocess

import pytest

import daemons
from conftest import check_one_line_error, make_image, run_spindle, wait_for
from qmp_util import SpindleQmp

IMAGE_SIZE = 16 << 20
TOOL_TIMEOUT_S = 30
# How long a program that stays up (qemu-io reading its commands) gets to
# open the image and take its locks.
HOLD_TIMEOUT_S = 10
QEMU_WRITE_REFUSED = 'Failed to get "write" lock'
QEMU_HINT = "Is another process using the image"
# QEMU's lock bytes for "holds the consistent read / write permission".
QEMU_CONSISTENT_READ_BYTE = 100
QEMU_WRITE_BYTE = 101


def tool(name, package="qemu-utils"):
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not found: install {package}")
    return path


def qemu_img(*args):
    return subprocess.run([tool("qemu-img"), *map(str, args)],
                          capture_output=True, text=True,
                          timeout=TOOL_TIMEOUT_S)


def qemu_io(image, *args):
    """qemu-io on a raw image, one command (-c), exiting by itself."""
    return subprocess.run([tool("qemu-io"), "-f", "raw", *args, str(image)],
                          capture_output=True, text=True,
                          timeout=TOOL_TIMEOUT_S, stdin=subprocess.DEVNULL)


def assert_qemu_refused(proc):
    assert proc.returncode != 0, proc.stdout
    assert QEMU_WRITE_REFUSED in proc.stderr, proc.stderr
    assert QEMU_HINT in proc.stderr, proc.stderr


def blockdev(image, extra=""):
    return f"driver=file,node-name=disk,filename={image}{extra}"


def export_args(image, sock, extra="", writable=True):
    return ["--blockdev", blockdev(image, extra),
            "--export", f"type=vhost-user-blk,id=e0,node-name=disk,"
                        f"addr.type=unix,addr.path={sock},"
                        f"writable={'on' if writable else 'off'}"]


def qsd_or_skip():
    path = daemons.find_qsd()
    if path is None:
        pytest.skip("qemu-storage-daemon not found: install "
                    "qemu-system-common")
    return path


def start_qsd(spindle_daemon, image, sock, writable):
    """qemu-storage-daemon serving image on a vhost-user-blk socket."""
    return spindle_daemon(
        program=qsd_or_skip(), flavour="qsd", exports=[daemons.Export(
            str(image), str(sock), writable=writable, iothread=None,
            node_opts="" if writable else ",read-only=on")])


def byte_locked(image, byte):
    """Does any process hold an OFD lock on this byte of image?  (What
    QEMU tests itself: F_OFD_GETLK for a write lock.)"""
    with open(image, "rb") as f:
        probe = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, byte, 1, 0)
        got = fcntl.fcntl(f.fileno(), fcntl.F_OFD_GETLK, probe)
    return struct.unpack("hhqqi4x", got)[0] != fcntl.F_UNLCK


class QemuIo:
    """qemu-io holding the image open (waiting for commands on a pipe)
    until close()."""

    def __init__(self, image, *args):
        self.proc = subprocess.Popen(
            [tool("qemu-io"), "-f", "raw", *args, str(image)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        # Open once it holds the last byte it takes ("write", or for -r
        # "consistent read"); a refused open makes it exit.
        last = QEMU_CONSISTENT_READ_BYTE if "-r" in args else QEMU_WRITE_BYTE
        wait_for(lambda: self.proc.poll() is not None or
                 byte_locked(image, last),
                 "qemu-io to open the image", HOLD_TIMEOUT_S)
        assert self.proc.poll() is None, self.proc.stderr.read()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=TOOL_TIMEOUT_S)
        self.proc.stderr.close()


@pytest.fixture
def image(workdir):
    return make_image(workdir / "disk.img", IMAGE_SIZE)


# --------------------------------------------------------------------------
# QEMU beside Spindle

@pytest.mark.parametrize("writable", [True, False],
                         ids=["writable", "read-only"])
def test_qemu_writers_refuse_a_spindle_image(spindle_daemon, workdir, image,
                                             writable):
    extra = "" if writable else ",read-only=on"
    d = spindle_daemon(export_args(image, workdir / "s.sock", extra,
                                   writable), ready=[workdir / "s.sock"])
    assert_qemu_refused(qemu_img("resize", "-f", "raw", image, "+1M"))
    assert_qemu_refused(qemu_io(image, "-c", "write 0 4k"))
    # What QEMU lets run beside one of its own writers.
    for args in (["info", "-U", image], ["info", image]):
        proc = qemu_img(*args)
        assert proc.returncode == 0, proc.stderr
    assert d.stop() == 0, d.stderr()
    # The refusals were the locks': they go with the daemon.
    proc = qemu_img("resize", "-f", "raw", image, "+1M")
    assert proc.returncode == 0, proc.stderr


def test_qsd_refuses_a_spindle_image(spindle_daemon, workdir, image):
    spindle_daemon(export_args(image, workdir / "s.sock"),
                   ready=[workdir / "s.sock"])
    qsd = qsd_or_skip()
    proc = subprocess.run(
        [qsd, *daemons.export_args([daemons.Export(
            str(image), str(workdir / "q.sock"), iothread=None)], "qsd")],
        capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    assert proc.returncode != 0
    assert QEMU_WRITE_REFUSED in proc.stderr, proc.stderr


def test_read_only_node_beside_qemu_readers(spindle_daemon, workdir, image):
    spindle_daemon(export_args(image, workdir / "s.sock", ",read-only=on",
                               writable=False), ready=[workdir / "s.sock"])
    proc = qemu_io(image, "-r", "-c", "read 0 4k")
    assert proc.returncode == 0, proc.stderr
    q = start_qsd(spindle_daemon, image, workdir / "q.sock", writable=False)
    assert q.alive()
    # A second read-only node, with both of them there.
    d = spindle_daemon(export_args(image, workdir / "t.sock", ",read-only=on",
                                   writable=False),
                       ready=[workdir / "t.sock"])
    assert d.alive()


# --------------------------------------------------------------------------
# Spindle beside QEMU

SPINDLE_REFUSED = {
    True: "Failed to get write lock on '{image}': is another process using "
          "the image? (another process holds QEMU's \"write\" permission: "
          "lock byte 101)",
    False: "Failed to get shared lock on '{image}': is another process "
           "writing to the image? (another process holds QEMU's \"write\" "
           "permission: lock byte 101)",
}


def check_spindle_refused(spindle, workdir, image, writable):
    extra = "" if writable else ",read-only=on"
    proc = run_spindle(spindle, export_args(image, workdir / "s.sock", extra,
                                            writable))
    check_one_line_error(proc, "--blockdev",
                         SPINDLE_REFUSED[writable].format(image=image))


@pytest.mark.parametrize("writable", [True, False],
                         ids=["writable", "read-only"])
def test_spindle_refuses_an_image_qemu_io_writes(spindle, workdir, image,
                                                 writable):
    holder = QemuIo(image)
    try:
        check_spindle_refused(spindle, workdir, image, writable)
    finally:
        holder.close()


@pytest.mark.parametrize("writable", [True, False],
                         ids=["writable", "read-only"])
def test_spindle_refuses_an_image_qsd_writes(spindle, spindle_daemon,
                                             workdir, image, writable):
    start_qsd(spindle_daemon, image, workdir / "q.sock", writable=True)
    check_spindle_refused(spindle, workdir, image, writable)


def test_read_only_node_opens_beside_a_qemu_reader(spindle_daemon, workdir,
                                                   image):
    start_qsd(spindle_daemon, image, workdir / "q.sock", writable=False)
    holder = QemuIo(image, "-r")
    try:
        d = spindle_daemon(export_args(image, workdir / "s.sock",
                                       ",read-only=on", writable=False),
                           ready=[workdir / "s.sock"])
        assert d.alive()
    finally:
        holder.close()


# --------------------------------------------------------------------------
# locking= and active=

def test_locking_off_takes_nothing(spindle_daemon, workdir, image):
    spindle_daemon(export_args(image, workdir / "s.sock", ",locking=off"),
                   ready=[workdir / "s.sock"])
    proc = qemu_io(image, "-c", "write 0 4k")
    assert proc.returncode == 0, proc.stderr


def test_locking_on_refuses_like_auto(spindle, workdir, image):
    holder = QemuIo(image)
    try:
        proc = run_spindle(spindle, export_args(image, workdir / "s.sock",
                                                ",locking=on"))
        check_one_line_error(proc, "--blockdev",
                             SPINDLE_REFUSED[True].format(image=image))
    finally:
        holder.close()


def test_inactive_node_locks_when_activated(spindle, workdir, image):
    args = ["--blockdev", blockdev(image, ",active=off")]
    with SpindleQmp(spindle, workdir, args).start() as d:
        proc = qemu_io(image, "-c", "write 0 4k")
        assert proc.returncode == 0, proc.stderr
        # Activating takes QEMU's bytes too, and refuses while QEMU writes.
        holder = QemuIo(image)
        try:
            cls, desc = d.qmp.error("blockdev-set-active",
                                    {"node-name": "disk", "active": True})
            assert "holds QEMU's \"write\" permission" in desc, desc
        finally:
            holder.close()
        d.qmp.cmd("blockdev-set-active", {"node-name": "disk",
                                          "active": True})
        assert_qemu_refused(qemu_io(image, "-c", "write 0 4k"))
        d.qmp.cmd("blockdev-set-active", {"node-name": "disk",
                                          "active": False})
        proc = qemu_io(image, "-c", "write 0 4k")
        assert proc.returncode == 0, proc.stderr

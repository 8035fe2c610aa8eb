"""Helpers of the qcow2 tests (test_qcow2.py, test_e2e_qcow2.py): Debian's
qemu-img as the independent referee, image contents made without qemu-io,
and a daemon exporting a format node over a file node.

    qemu_img          run qemu-img; fail the test with its output if it fails
    image_info        `qemu-img info --output=json` of an image
    check_image       `qemu-img check`: no corruption (and no leak, unless
                      allowed); returns its JSON report
    images_equal      `qemu-img compare` of two images (backing chains
                      included): True when the guest-visible contents agree
    write_content     a raw file of chunks of random bytes, compressible
                      text and holes, from a seed
    change_content    a copy of a raw file with some sub-cluster ranges
                      rewritten (the next layer of a backing chain)
    write_ranges      write those ranges into an image with qemu-img
    sha256_file       the SHA-256 of a file (what spindle-vu-client's read
                      prints for a range)
    format_args       --blockdev options of a file node and a format node
                      over it
    start_format_export
                      a daemon exporting such a format node over
                      vhost-user-blk (vu.sock in the directory given),
                      optionally with a QMP monitor (qmp.sock); skips,
                      saying so, while spindle has no qcow2 driver
    disk_sha256       what a whole export reads as, through spindle-vu-client
    stopped_cleanly   stop a daemon; it must exit 0
    skip_if_not_merged
                      skip where an error says spindle has no qcow2 driver
    spindle_only      skip a test under SPINDLE_QCOW2_DAEMON=qsd, saying why

Every test runs against spindle.  SPINDLE_QCOW2_DAEMON=qsd runs them
against qemu-storage-daemon instead, to check the tests themselves with
QEMU's own qcow2 driver (tests that expect more of Spindle than QEMU does
skip there, saying why).
"""

import hashlib
import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

import daemons  # tests/e2e, on sys.path through conftest
from conftest import DaemonError, vu_ok

QEMU_IMG = shutil.which("qemu-img")
CHUNK = 64 << 10
# The error of a spindle without the driver (block/block.c's message).
NOT_MERGED = "Unknown driver 'qcow2'"


def daemon_flavour():
    """("spindle", None) or, with SPINDLE_QCOW2_DAEMON=qsd, ("qsd", its
    path); skips if that qemu-storage-daemon is missing."""
    if os.environ.get("SPINDLE_QCOW2_DAEMON", "spindle") != "qsd":
        return "spindle", None
    qsd = daemons.find_qsd()
    if qsd is None:
        pytest.skip("SPINDLE_QCOW2_DAEMON=qsd: qemu-storage-daemon is not "
                    "installed")
    return "qsd", qsd


def spindle_only(reason):
    """Skip under SPINDLE_QCOW2_DAEMON=qsd: QEMU does not do this (reason)."""
    if daemon_flavour()[0] == "qsd":
        pytest.skip(f"qemu-storage-daemon {reason}")


def qemu_img(*args, ok=(0,)):
    """Run qemu-img ARGS; its exit status must be in `ok`.  Returns the
    CompletedProcess (text)."""
    proc = subprocess.run([QEMU_IMG, *map(str, args)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode in ok, (
        f"qemu-img {' '.join(map(str, args))}: exit {proc.returncode}\n"
        f"{proc.stdout}{proc.stderr}")
    return proc


def image_info(path, *more):
    """qemu-img info --output=json (-U: also while a daemon holds it)."""
    return json.loads(qemu_img("info", "-U", "--output=json", *more,
                               path).stdout)


def check_image(path, leaks_ok=False):
    """qemu-img check: no corruption, no error reading the metadata, and no
    leaked cluster unless leaks_ok.  Returns the JSON report."""
    # Exit status 0: clean; 3: leaks only; 2: corruptions; 1: check failed.
    proc = qemu_img("check", "--output=json", path,
                    ok=(0, 3) if leaks_ok else (0,))
    report = json.loads(proc.stdout)
    assert report.get("corruptions", 0) == 0, report
    assert report.get("check-errors", 0) == 0, report
    if not leaks_ok:
        assert report.get("leaks", 0) == 0, report
    return report


def images_equal(a, b, fmt_a="qcow2", fmt_b="raw"):
    """qemu-img compare (not strict: what a guest reads, not how it is
    allocated): (True if the contents agree, its output)."""
    proc = qemu_img("compare", "-f", fmt_a, "-F", fmt_b, a, b, ok=(0, 1))
    return proc.returncode == 0, proc.stdout


def write_content(path, size, seed, holes=True):
    """A raw file of `size` bytes made of 64 KiB chunks, each (from seed)
    random bytes, compressible text (so that qemu-img convert -c really
    compresses it), data in its second half only, or a hole.  Returns
    path."""
    r = random.Random(seed)
    kinds = ("random", "text", "half", "hole") if holes else ("random", "text")
    with open(path, "wb") as f:
        f.truncate(size)
        for off in range(0, size, CHUNK):
            kind = r.choice(kinds)
            if kind == "hole":
                continue
            if kind == "text":
                data = (f"chunk {off} seed {seed} ".encode() * CHUNK)[:CHUNK]
            else:
                data = r.randbytes(CHUNK)
            if kind == "half":
                f.seek(off + CHUNK // 2)
                f.write(data[CHUNK // 2:])
            else:
                f.seek(off)
                f.write(data)
    return path


def change_content(src, dst, seed, changes=24):
    """Copy raw file src to dst and rewrite `changes` ranges of 512 bytes
    to 12 KiB (from seed) at sector offsets: the next layer of a chain.
    Returns the ranges, [(offset, length)]."""
    shutil.copyfile(src, dst)
    size = Path(dst).stat().st_size
    r = random.Random(seed)
    ranges = []
    with open(dst, "r+b") as f:
        for _ in range(changes):
            length = 512 * r.randint(1, 24)
            off = 512 * r.randrange((size - length) // 512)
            f.seek(off)
            f.write(r.randbytes(length))
            ranges.append((off, length))
    return ranges


def write_ranges(image, raw, ranges, fmt="qcow2"):
    """Write the `ranges` of raw file `raw` into image with qemu-img alone:
    convert -n into a raw filter node (offset, size) over the image, so
    that only those bytes are written (a layer over a backing file then
    holds just the clusters they touch)."""
    patch = Path(image).with_suffix(".patch")
    with open(raw, "rb") as f:
        for off, length in ranges:
            f.seek(off)
            patch.write_bytes(f.read(length))
            qemu_img("convert", "-n", "-f", "raw", "--target-image-opts",
                     patch, f"driver=raw,offset={off},size={length},"
                            f"file.driver={fmt},file.file.filename={image}")
    patch.unlink()


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def format_args(image, node="fmt0", fmt="qcow2", fmt_opts="", file_opts=""):
    """--blockdev options: a file node (file0) over image, and a `fmt`
    node over it (qcow2 or raw) with ",key=value" fmt_opts, or in JSON
    with the members of a dict fmt_opts (`"backing": null` has no
    key=value form)."""
    if isinstance(fmt_opts, dict):
        fmt_node = json.dumps({"driver": fmt, "node-name": node,
                               "file": "file0", **fmt_opts})
    else:
        fmt_node = f"driver={fmt},node-name={node},file=file0{fmt_opts}"
    return ["--blockdev", f"driver=file,node-name=file0,filename={image}"
                          f"{file_opts}",
            "--blockdev", fmt_node]


def export_args(sock, node="fmt0", iothread="iot0"):
    return ["--export", f"type=vhost-user-blk,id=e0,node-name={node},"
                        f"addr.type=unix,addr.path={sock},writable=on,"
                        f"iothread={iothread}"]


def stopped_cleanly(d):
    """Stop the daemon (SIGTERM): spindle must exit 0.  qemu-storage-daemon
    7.2 may abort in its own shutdown after a block_resize ("qemu_mutex_
    destroy: Device or resource busy"); only that is let pass there."""
    status = d.stop()
    if status != 0 and daemon_flavour()[0] == "qsd" and \
            "qemu_mutex_destroy" in d.stderr():
        return
    assert status == 0, d.stderr()


def monitor_args(workdir):
    return ["--chardev", f"socket,id=m0,path={workdir}/qmp.sock,server=on,"
                         "wait=off", "--monitor", "chardev=m0"]


def skip_if_not_merged(error):
    """Skip, saying so, if `error` (a daemon's output or a QMP error) is
    that of a spindle without the qcow2 driver."""
    if NOT_MERGED in error:
        pytest.skip(f"qcow2 driver not merged (spindle: {NOT_MERGED})")


def start_daemon(spindle_daemon, workdir, args, ready):
    """spindle_daemon(args) in workdir (the flavour daemon_flavour() says),
    waiting for `ready`; skips while spindle has no qcow2 driver."""
    flavour, program = daemon_flavour()
    try:
        return spindle_daemon(args, ready=ready, workdir=workdir,
                              program=program, flavour=flavour)
    except DaemonError as e:
        skip_if_not_merged(str(e))
        raise


def start_format_export(spindle_daemon, workdir, image, fmt="qcow2",
                        fmt_opts="", file_opts="", qmp=False, more=()):
    """A daemon exporting a `fmt` node over image on workdir/vu.sock, in
    IOThread iot0; with qmp, a monitor on workdir/qmp.sock.  `more`: more
    --blockdev options given before the format node (a backing node)."""
    sock = workdir / "vu.sock"
    args = ["--object", "iothread,id=iot0", *more,
            *format_args(image, fmt=fmt, fmt_opts=fmt_opts,
                         file_opts=file_opts),
            *export_args(sock)]
    ready = [sock]
    if qmp:
        args += monitor_args(workdir)
        ready.append(workdir / "qmp.sock")
    return start_daemon(spindle_daemon, workdir, args, ready)


def disk_sha256(client, sock, size):
    """The SHA-256 of the whole disk as the export reads it."""
    return vu_ok(client, sock, "read", 0, size)[0]["sha256"]

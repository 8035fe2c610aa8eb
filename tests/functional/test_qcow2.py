"""driver=qcow2 against Debian's qemu-img as the independent referee.

Reads: images qemu-img made (plain, v2 and v3, 4 KiB and 2 MiB clusters,
compressed with zlib and zstd, preallocated, with internal snapshots, over a
raw backing file and in a chain of three, with zero clusters over a backing
file, through caches far smaller than the metadata) read through Spindle
exactly as `qemu-img convert -O raw` reads them.  Contents come from raw files with a
seeded pattern (qemu-img convert, -B for a layer over its backing file, -n
to rewrite an existing image): no qemu-io.

Writes: what Spindle wrote passes `qemu-img check` (no corruption, and no
leak after a clean stop) and `qemu-img compare` against a raw image that
received the same writes through Spindle's file driver; over a backing
file (copy-on-write) too.  Internal snapshots and bitmaps stay listed, a
snapshot's data stays intact when the active layer is written, block_resize
grows the image, query-named-block-nodes shows the format and the chain.
Queues in two IOThreads on one qcow2 node are refused in one line, or their
concurrent allocating writes leave a consistent image.

Crashes: SIGKILL during allocating writes at QD32, several rounds on one
image: `qemu-img check` finds no corruption (leaks allowed), what was
flushed before the kills reads back, every sector reads as a whole sector
of the bench's for its own place (or was never written), and Spindle and
qemu-img read the same disk.

Errors: encryption, an external data file and extended L2 entries are
refused at open, naming the feature; an L2 table past the end of the file
(a truncated image, an L1 entry scribbled over) fails at open or gives I/O
errors, and the daemon goes on serving its other export.

The daemon under test is spindle; SPINDLE_QCOW2_DAEMON=qsd runs the same
tests against qemu-storage-daemon (qcow2_util.py).  While spindle has no
qcow2 driver, each test skips saying so.
"""

import json
import random
import re
import shutil
import signal
import struct
import subprocess
import time

import pytest

from conftest import DaemonError, run_spindle, vu, vu_ok, wait_for
from qcow2_util import (QEMU_IMG, change_content, check_image, daemon_flavour,
                        disk_sha256, export_args, format_args, image_info,
                        images_equal, qemu_img, sha256_file,
                        skip_if_not_merged, spindle_only, start_daemon,
                        start_format_export, stopped_cleanly,
                        write_content, write_ranges)
from qemu.qmp.qmp_client import ExecuteError
from qmp_util import QmpSync
from remote_export import bench, check_verified, run_bench  # noqa: F401

pytestmark = pytest.mark.skipif(
    QEMU_IMG is None, reason="qemu-img is not installed "
                             "(apt-get install qemu-utils)")

SIZE = 16 << 20


def convert(src, dst, *opts):
    """qemu-img convert raw src to qcow2 dst with opts (-c, -o ...)."""
    qemu_img("convert", "-f", "raw", "-O", "qcow2", *opts, src, dst)
    return dst


def expect_reads_as(client, sock, raw):
    """The export reads exactly as the raw file."""
    size = raw.stat().st_size
    assert disk_sha256(client, sock, size) == sha256_file(raw)


# -- reads ------------------------------------------------------------------

# name: qemu-img convert options for a plain image of the content.
PLAIN_IMAGES = {
    "v3": (),
    "v2": ("-o", "compat=0.10"),
    "cluster-4k": ("-o", "cluster_size=4k"),
    "cluster-2M": ("-o", "cluster_size=2M"),
    "zlib": ("-c",),
    "zstd": ("-c", "-o", "compression_type=zstd"),
    "prealloc-metadata": ("-o", "preallocation=metadata"),
    "prealloc-falloc": ("-o", "preallocation=falloc"),
    "prealloc-full": ("-o", "preallocation=full"),
    "v2-zlib-4k": ("-c", "-o", "compat=0.10,cluster_size=4k"),
}


@pytest.mark.parametrize("kind", PLAIN_IMAGES)
def test_reads_as_qemu_img_converts(spindle_daemon, client, workdir, kind):
    raw = write_content(workdir / "content.raw", SIZE, seed=len(kind))
    img = convert(raw, workdir / "img.qcow2", *PLAIN_IMAGES[kind])
    if kind in ("zlib", "zstd"):
        info = image_info(img)
        assert info["format-specific"]["data"]["compression-type"] == kind
        assert info["actual-size"] < SIZE // 2, "convert -c did not compress"
    start_format_export(spindle_daemon, workdir, img)
    expect_reads_as(client, workdir / "vu.sock", raw)


def test_reads_snapshot_image_active_layer(spindle_daemon, client, workdir):
    """An image with two internal snapshots reads as its active layer."""
    a = write_content(workdir / "a.raw", SIZE, seed=1)
    img = convert(a, workdir / "img.qcow2")
    for n, name in enumerate(("s1", "s2")):
        qemu_img("snapshot", "-c", name, img)
        ranges = change_content(a, workdir / "next.raw", seed=2 + n)
        write_ranges(img, workdir / "next.raw", ranges)
        a = (workdir / "next.raw").rename(workdir / f"{name}-next.raw")
    start_format_export(spindle_daemon, workdir, img)
    expect_reads_as(client, workdir / "vu.sock", a)


def overlay(workdir, name, below, content, ranges, *opts):
    """A qcow2 layer `name` over `below` that holds just `ranges` of raw
    file content."""
    fmt = "raw" if str(below).endswith(".raw") else "qcow2"
    img = workdir / name
    qemu_img("create", "-f", "qcow2", "-b", below, "-F", fmt, *opts, img)
    write_ranges(img, content, ranges)
    return img


def test_reads_through_raw_backing_file(spindle_daemon, client, workdir):
    """qcow2 over a raw base: the backing file is opened from the header."""
    base = write_content(workdir / "base.raw", SIZE, seed=4)
    full = workdir / "full.raw"
    img = overlay(workdir, "top.qcow2", "base.raw", full,
                  change_content(base, full, seed=5))
    assert image_info(img)["backing-filename"] == "base.raw"
    start_format_export(spindle_daemon, workdir, img)
    expect_reads_as(client, workdir / "vu.sock", full)


def make_chain(workdir):
    """base.raw <- mid.qcow2 <- top.qcow2 (4 KiB clusters), each layer
    holding only what differs from the one below; returns (top, what it
    reads as)."""
    base = write_content(workdir / "base.raw", SIZE, seed=6)
    b, c = workdir / "b.raw", workdir / "c.raw"
    overlay(workdir, "mid.qcow2", "base.raw", b,
            change_content(base, b, seed=7))
    top = overlay(workdir, "top.qcow2", "mid.qcow2", c,
                  change_content(b, c, seed=8), "-o", "cluster_size=4k")
    return top, c


def test_reads_through_three_deep_chain(spindle_daemon, client, workdir):
    top, content = make_chain(workdir)
    # Each layer holds little: the chain is really used.
    assert image_info(top)["actual-size"] < SIZE // 4
    assert image_info(workdir / "mid.qcow2")["actual-size"] < SIZE // 4
    d = start_format_export(spindle_daemon, workdir, top, qmp=True)
    expect_reads_as(client, workdir / "vu.sock", content)
    qmp = QmpSync(str(workdir / "qmp.sock"), alive=d.alive)
    try:
        nodes = qmp.cmd("query-named-block-nodes")
    finally:
        qmp.close()
    # backing_file may be the name in the header or the one opened.
    def base(name):
        return name.rsplit("/", 1)[-1] if name else name
    by_file = {(base(n["image"]["filename"]), n["drv"]): n for n in nodes}
    top_node = next(n for n in nodes if n["node-name"] == "fmt0")
    assert top_node["drv"] == "qcow2"
    assert top_node["image"]["format"] == "qcow2"
    assert base(top_node["backing_file"]) == "mid.qcow2"
    assert top_node["image"]["backing-filename"] == "mid.qcow2"
    assert ("mid.qcow2", "qcow2") in by_file, nodes
    mid = by_file[("mid.qcow2", "qcow2")]
    assert base(mid["backing_file"]) == "base.raw"
    assert ("base.raw", "raw") in by_file or ("base.raw", "file") in by_file


def test_backing_given_by_node_and_null(spindle_daemon, client, workdir):
    """backing=NODE replaces the header's backing file; backing=null reads
    what the image itself holds, zeroes elsewhere."""
    base = write_content(workdir / "base.raw", SIZE, seed=9)
    other = write_content(workdir / "other.raw", SIZE, seed=10)
    img = workdir / "ov.qcow2"
    qemu_img("create", "-f", "qcow2", "-b", "base.raw", "-F", "raw", img)
    start_format_export(
        spindle_daemon, workdir, img, fmt_opts=",backing=other0",
        more=["--blockdev", f"driver=file,node-name=other0,filename={other}"])
    expect_reads_as(client, workdir / "vu.sock", other)


def test_backing_null_reads_zeroes(spindle_daemon, client, workdir):
    write_content(workdir / "base.raw", SIZE, seed=11)
    img = workdir / "ov.qcow2"
    qemu_img("create", "-f", "qcow2", "-b", "base.raw", "-F", "raw", img)
    start_format_export(spindle_daemon, workdir, img,
                        fmt_opts={"backing": None})
    vu_ok(client, workdir / "vu.sock", "read", 0, SIZE, "--expect-zeroes")


def test_zero_clusters_hide_the_backing_file(spindle_daemon, client,
                                             workdir):
    """Zeroes written over a backing file: whole clusters become zero
    clusters (qemu-img map: zero, no data, in the overlay), partial ones
    allocated clusters; both read as zeroes, not as the base."""
    base = write_content(workdir / "base.raw", SIZE, seed=15, holes=False)
    zeroed = workdir / "zeroed.raw"
    shutil.copyfile(base, zeroed)
    ranges = [(1 << 20, 256 << 10), ((4 << 20) + 4096, 8192)]
    with open(zeroed, "r+b") as f:
        for off, length in ranges:
            f.seek(off)
            f.write(bytes(length))
    img = overlay(workdir, "ov.qcow2", "base.raw", zeroed, ranges)
    zero_clusters = [m for m in json.loads(qemu_img(
        "map", "--output=json", img).stdout)
        if m["depth"] == 0 and m["zero"] and not m["data"]]
    assert [(m["start"], m["length"]) for m in zero_clusters] == \
        [ranges[0]], zero_clusters
    start_format_export(spindle_daemon, workdir, img)
    expect_reads_as(client, workdir / "vu.sock", zeroed)


# An image of 4 KiB clusters needs 8 L2 tables for 16 MiB; a cache of two
# makes every pass over the disk evict (and write back) tables.
SMALL_CACHES = ",l2-cache-size=8192,refcount-cache-size=8192"


def test_reads_with_small_caches(spindle_daemon, client, workdir):
    """QEMU's cache options: a cache far smaller than the metadata."""
    raw = write_content(workdir / "content.raw", SIZE, seed=16)
    img = convert(raw, workdir / "img.qcow2", "-o", "cluster_size=4k")
    start_format_export(spindle_daemon, workdir, img,
                        fmt_opts=SMALL_CACHES + ",cache-clean-interval=30")
    expect_reads_as(client, workdir / "vu.sock", raw)


# -- writes -----------------------------------------------------------------

# The same writes for the qcow2 node and the raw reference: aligned and not,
# inside a cluster and across clusters, over data and over holes, zeroes
# partial and whole, and a flush; and where both nodes unmap, a
# cluster-aligned discard (reads as zeroes from both then).
def writes(discard):
    return ["write", 0, "64k", "--pattern", 1,
            "write", "4k", "8k", "--pattern", 2,
            "write", (1 << 20) + 512, 3072, "--pattern", 3,
            "write", "3M", "1M", "--pattern", 4,
            "write-zeroes", (3 << 20) + (64 << 10), "128k",
            "write-zeroes", "5M", "4k",
            *(["discard", "3584k", "128k"] if discard else []),
            "write", (15 << 20) + (60 << 10), "8k", "--pattern", 5,
            "write", "7M", "512", "--pattern", 6,
            "flush"]


# And spindle-bench: QD1 so that the same seed makes the same writes.
BENCH_WRITES = ["--rw=randwrite", "--verify", "--iodepth=1", "--count=1500",
                "--seed=7", "--offset=8M", "--size=6M"]


def write_both(spindle_daemon, client, bench, workdir, targets,
               discard=False):
    """Give each (image, format, fmt_opts) in targets the same writes
    through Spindle, one daemon after the other, each stopped cleanly;
    with discard, the nodes unmap and the writes include a discard."""
    unmap = ",discard=unmap" if discard else ""
    for image, fmt, fmt_opts in targets:
        d = start_format_export(spindle_daemon, workdir, image, fmt=fmt,
                                fmt_opts=fmt_opts + unmap, file_opts=unmap)
        sock = workdir / "vu.sock"
        vu_ok(client, sock, *writes(discard))
        check_verified(run_bench(bench, sock, *BENCH_WRITES))
        stopped_cleanly(d)


@pytest.mark.parametrize("create_opts, fmt_opts", [
    ("compat=1.1", ""), ("compat=0.10", ""), ("cluster_size=4k", ""),
    ("cluster_size=4k", SMALL_CACHES), ("lazy_refcounts=on", "")],
    ids=["v3", "v2", "cluster-4k", "small-caches", "lazy-refcounts"])
def test_writes_pass_check_and_compare(spindle_daemon, client, bench, workdir,
                                       create_opts, fmt_opts):
    img, ref = workdir / "img.qcow2", workdir / "ref.raw"
    qemu_img("create", "-f", "qcow2", "-o", create_opts, img, SIZE)
    qemu_img("create", "-f", "raw", ref, SIZE)
    write_both(spindle_daemon, client, bench, workdir,
               [(img, "qcow2", fmt_opts), (ref, "raw", "")], discard=True)
    check_image(img)
    same, out = images_equal(img, ref)
    assert same, out
    assert image_info(img)["dirty-flag"] is False


def written_like_raw(spindle_daemon, client, bench, workdir, content, img):
    """Give img (made from raw file content) and a raw copy of content the
    same writes; img must then check clean and read as the copy."""
    ref = workdir / "ref.raw"
    shutil.copyfile(content, ref)
    write_both(spindle_daemon, client, bench, workdir,
               [(img, "qcow2", ""), (ref, "raw", "")])
    check_image(img)
    same, out = images_equal(img, ref)
    assert same, out


def test_writes_over_backing_file_copy_on_write(spindle_daemon, client, bench,
                                                workdir):
    """Partial writes to clusters only the backing file holds copy the rest
    of the cluster up; the base is not written."""
    base = write_content(workdir / "base.raw", SIZE, seed=12, holes=False)
    base_sum = sha256_file(base)
    img = workdir / "ov.qcow2"
    qemu_img("create", "-f", "qcow2", "-b", "base.raw", "-F", "raw", img)
    written_like_raw(spindle_daemon, client, bench, workdir, base, img)
    assert sha256_file(base) == base_sum


def test_snapshots_survive_writes(spindle_daemon, client, bench, workdir):
    """Writes over clusters a snapshot shares are copied: the snapshot
    keeps its data and stays listed."""
    a = write_content(workdir / "a.raw", SIZE, seed=13)
    img = convert(a, workdir / "img.qcow2")
    qemu_img("snapshot", "-c", "before", img)
    written_like_raw(spindle_daemon, client, bench, workdir, a, img)
    listed = qemu_img("snapshot", "-l", img).stdout
    assert "before" in listed, listed
    info = image_info(img)
    assert [s["name"] for s in info.get("snapshots", [])] == ["before"]
    snap = workdir / "snap.raw"
    qemu_img("convert", "-l", "snapshot.name=before", "-O", "raw", img, snap)
    assert sha256_file(snap) == sha256_file(a)


def test_bitmaps_stay_listed_after_writes(spindle_daemon, client, bench,
                                          workdir):
    """A persistent bitmap Spindle does not keep up to date stays in the
    image (QEMU lists it, marked in-use if it is no longer consistent),
    and its clusters stay referenced: no leak."""
    a = write_content(workdir / "a.raw", SIZE, seed=17)
    img = convert(a, workdir / "img.qcow2")
    qemu_img("bitmap", "--add", img, "b0")
    written_like_raw(spindle_daemon, client, bench, workdir, a, img)
    bitmaps = image_info(img)["format-specific"]["data"].get("bitmaps", [])
    assert [b["name"] for b in bitmaps] == ["b0"], bitmaps
    if daemon_flavour()[0] == "spindle":
        # Spindle does not record writes in it: no longer consistent.
        assert "in-use" in bitmaps[0]["flags"], bitmaps


def test_block_resize_grows_image(spindle_daemon, client, workdir):
    img = workdir / "img.qcow2"
    qemu_img("create", "-f", "qcow2", img, SIZE)
    d = start_format_export(spindle_daemon, workdir, img, qmp=True)
    sock = workdir / "vu.sock"
    qmp = QmpSync(str(workdir / "qmp.sock"), alive=d.alive)
    try:
        qmp.cmd("block_resize", {"node-name": "fmt0", "size": 2 * SIZE})
        node = next(n for n in qmp.cmd("query-named-block-nodes")
                    if n["node-name"] == "fmt0")
        assert node["image"]["virtual-size"] == 2 * SIZE
    finally:
        qmp.close()
    # Past the old end: written and read back.
    vu_ok(client, sock, "write", 2 * SIZE - (64 << 10), "64k", "--pattern",
          8, "read", 2 * SIZE - (64 << 10), "64k", "--verify", 8)
    stopped_cleanly(d)
    assert image_info(img)["virtual-size"] == 2 * SIZE
    check_image(img)


def test_several_iothreads_safe_or_refused(spindle_daemon, bench, workdir):
    """An export spreading a qcow2 node's queues over two IOThreads: either
    refused with one line naming the IOThreads, or allocating writes from
    both at once leave a consistent image that reads as written."""
    spindle_only("has no export over several IOThreads")
    img = workdir / "img.qcow2"
    qemu_img("create", "-f", "qcow2", img, SIZE)
    sock = workdir / "vu.sock"
    args = ["--object", "iothread,id=iot0", "--object", "iothread,id=iot1",
            *format_args(img),
            "--export", f"type=vhost-user-blk,id=e0,node-name=fmt0,"
                        f"addr.type=unix,addr.path={sock},writable=on,"
                        "num-queues=2,iothread.0=iot0,iothread.1=iot1"]
    try:
        d = start_daemon(spindle_daemon, workdir, args, [sock])
    except DaemonError as e:
        lines = [line for line in str(e).splitlines()
                 if line.startswith("spindle:")]
        assert len(lines) == 1 and "iothread" in lines[0].lower(), str(e)
        return
    r = run_bench(bench, sock, "--rw=randrw", "--verify", "--queues=2",
                  "--iodepth=16", "--count=3000", f"--size={SIZE}")
    check_verified(r)
    stopped_cleanly(d)
    check_image(img)


# -- crashes ----------------------------------------------------------------

KILL_ROUNDS = 4
REGION = 4 << 20                 # per round: written by the bench
FLUSHED = 256 << 10              # per round: written and flushed first


def test_kill_during_allocating_writes(spindle_daemon, client, bench, workdir):
    """SIGKILL 0.2-1.5 s into allocating writes at QD32, several rounds on
    one image: qemu-img check finds no corruption (leaks are allowed), what
    a flush covered reads back, and every sector holds a whole sector of
    the bench's for its own place or nothing.

    Writes that completed but were not flushed may be lost with the
    process: qcow2 keeps metadata in its caches until a flush (as QEMU
    does), and a guest only counts on what a flush covered."""
    img = workdir / "img.qcow2"
    size = KILL_ROUNDS * (REGION + FLUSHED)
    qemu_img("create", "-f", "qcow2", img, size)
    sock = workdir / "vu.sock"
    r = random.Random()
    seed = r.randrange(1 << 30)
    for n in range(KILL_ROUNDS):
        flushed = KILL_ROUNDS * REGION + n * FLUSHED
        d = start_format_export(spindle_daemon, workdir, img)
        vu_ok(client, sock, "write", flushed, FLUSHED, "--pattern", seed + n,
              "flush")
        proc = subprocess.Popen(
            [str(bench), f"--socket={sock}", "--json", "--rw=randwrite",
             "--verify", "--iodepth=32", f"--offset={n * REGION}",
             f"--size={REGION}", "--runtime=30", f"--seed={seed + n}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(r.uniform(0.2, 1.5))
            assert proc.poll() is None, proc.communicate()
            d.stop(signal.SIGKILL)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 1, err       # the back-end hung up
        assert json.loads(out)["ios"] > 0, err
        check_image(img, leaks_ok=True)

    start_format_export(spindle_daemon, workdir, img)
    for n in range(KILL_ROUNDS):
        vu_ok(client, sock, "read", KILL_ROUNDS * REGION + n * FLUSHED,
              FLUSHED, "--verify", seed + n)
    r = run_bench(bench, sock, "--rw=read", "--verify", "--iodepth=8",
                  f"--size={KILL_ROUNDS * REGION}",
                  f"--count={KILL_ROUNDS * REGION // 4096}")
    check_verified(r)
    spindle_sum = disk_sha256(client, sock, size)
    raw = workdir / "img.raw"
    qemu_img("convert", "-U", "-O", "raw", img, raw)
    assert spindle_sum == sha256_file(raw)


# -- errors -----------------------------------------------------------------

SECRET = ["--object", "secret,id=sec0,data=secret"]
UNSUPPORTED = {
    "encryption-aes": (SECRET + ["-o", "encrypt.format=aes,"
                                       "encrypt.key-secret=sec0"], r"encrypt"),
    "encryption-luks": (SECRET + ["-o", "encrypt.format=luks,"
                                        "encrypt.key-secret=sec0,"
                                        "encrypt.iter-time=10"], r"encrypt"),
    "data-file": (["-o", "data_file={dir}/data.raw"], r"data.file"),
    "extended-l2": (["-o", "extended_l2=on"], r"extended.l2"),
}
# qemu-img's LUKS set-up times its key derivation and gives up, now and
# then, on a loaded machine: "Unable to get accurate CPU usage".
CREATE_TRIES = 10


def create_with(img, create):
    """qemu-img create img with the options in create, trying again where
    the LUKS timing failed; skips if it never worked."""
    for _ in range(CREATE_TRIES):
        proc = qemu_img("create", "-q", *create, "-f", "qcow2", img, SIZE,
                        ok=(0, 1))
        if proc.returncode == 0:
            return
        assert "accurate CPU usage" in proc.stderr, proc.stderr
    pytest.skip(f"qemu-img could not time LUKS key derivation here in "
                f"{CREATE_TRIES} tries: {proc.stderr.strip()}")


@pytest.mark.parametrize("feature", UNSUPPORTED)
def test_unsupported_feature_refused_at_open(spindle, workdir, feature):
    spindle_only("supports these")
    create, pattern = UNSUPPORTED[feature]
    img = workdir / "img.qcow2"
    create_with(img, [o.format(dir=workdir) for o in create])
    proc = run_spindle(spindle, [*format_args(img),
                                 *export_args(workdir / "vu.sock")],
                       cwd=workdir)
    skip_if_not_merged(proc.stderr)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert re.search(pattern, lines[0], re.I), lines[0]
    assert not (workdir / "vu.sock").exists()


def l1_table(img):
    """(offset, entries) of the image's L1 table, from its header."""
    with open(img, "rb") as f:
        header = f.read(48)
    entries, offset = struct.unpack(">IQ", header[36:48])
    return offset, entries


def scribble_l1(img):
    """Point L1 entry 0 at an L2 table 1 TiB into the file."""
    offset, _ = l1_table(img)
    with open(img, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack(">Q", (1 << 63) | (1 << 40)))


def truncate_after_l1(img):
    """Cut the file right after its L1 table: every L2 table is gone."""
    offset, entries = l1_table(img)
    with open(img, "r+b") as f:
        f.truncate(offset + 8 * entries)


@pytest.mark.parametrize("damage", [scribble_l1, truncate_after_l1],
                         ids=["l1-past-end", "truncated"])
def test_corrupted_image_errors_and_others_go_on(spindle_daemon, client,
                                                 workdir, damage):
    """The damaged image is added over QMP beside a served raw image: the
    open fails naming the node, or the export's reads fail with IOERR;
    either way the raw export goes on."""
    spindle_only("reads an L2 table past the end of the file as zeroes")
    content = write_content(workdir / "content.raw", SIZE, seed=14,
                            holes=False)
    img = convert(content, workdir / "img.qcow2")
    damage(img)
    good = workdir / "good.raw"
    qemu_img("create", "-f", "raw", good, SIZE)
    good_sock, bad_sock = workdir / "vu.sock", workdir / "bad.sock"
    d = start_format_export(spindle_daemon, workdir, good, fmt="raw",
                            qmp=True)
    qmp = QmpSync(str(workdir / "qmp.sock"), alive=d.alive)
    try:
        node = {"driver": "qcow2", "node-name": "bad0",
                "file": {"driver": "file", "node-name": "bad0-file",
                         "filename": str(img)}}
        try:
            qmp.cmd("blockdev-add", node)
            opened = True
        except ExecuteError as e:
            opened = False
            desc = str(e)
            skip_if_not_merged(desc)
            assert "bad0" in desc or "img.qcow2" in desc, desc
        if opened:
            qmp.cmd("block-export-add", {
                "type": "vhost-user-blk", "id": "e1", "node-name": "bad0",
                "writable": True, "iothread": "iot0",
                "addr": {"type": "unix", "path": str(bad_sock)}})
    finally:
        qmp.close()
    if opened:
        wait_for(lambda: bad_sock.exists(), "the damaged image's export",
                 daemon=d)
        rc, doc = vu(client, bad_sock, "read", 0, "64k")
        assert rc == 1 and doc["results"][-1]["status"] == "IOERR", doc
    # The daemon serves the other export as before.
    vu_ok(client, good_sock, "write", 0, "64k", "--pattern", 9,
          "read", 0, "64k", "--verify", 9)
    assert d.alive()

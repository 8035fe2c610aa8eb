"""driver=rbd (block/rbd.c, docs/block.md) against a real Ceph cluster.

The cluster is the session's ceph_cluster fixture (ceph_cluster.py): one
monitor, one OSD on a file-backed BlueStore, one pool, started by the
tests in about 9 s and stopped at the end.  Each test makes its own
image.  Every test is skipped, saying why, where spindle was built
without librbd or the cluster cannot start.

What is checked: spindle-bench --verify over a vhost-user-blk export and
a virtio-scsi LUN of an rbd node, over one IOThread and over two (whose
completions may be taken by either); what the bench wrote read back with
`rbd export` and compared; flush, and a discard that frees the image's
objects (`rbd du`); write-zeroes reading back zeroes; a SCSI write with
FUA followed by a flush (librbd's counters, read through spindle's admin
socket), with and without librbd's cache; block_resize growing the image
and the front-end seeing the new capacity; a snapshot opened read-only
(and refused writable); a missing image or pool failing the open with a
clear error; and faults: the OSD frozen (SIGSTOP) or killed (SIGKILL)
mid-run, so that requests time out (rados_osd_op_timeout, 5 s in the
test cluster's ceph.conf) and fail with I/O errors, the daemon logging it
once, staying up and answering QMP, then serving again, with the data
flushed before the fault intact, once the OSD is thawed or started again.
"""

import itertools
import json
import time

import pytest

import daemons  # tests/e2e, on sys.path through conftest
from ceph_cluster import OSD_OP_TIMEOUT_S
from conftest import check_one_line_error, run_spindle, vu_ok
from qmp_util import QmpSync
from remote_export import (bench, bench_in_background,  # noqa: F401
                           check_qmp_answers, join_failed_bench,
                           skip_unless_built_with, start_export,
                           start_scsi_export, verify_run, verify_scsi_lun)
from spindle_daemon import wait_for

SIZE = 64 << 20

_names = itertools.count()


@pytest.fixture(scope="module", autouse=True)
def built_with_librbd(build_dir):
    skip_unless_built_with(build_dir, "librbd")


@pytest.fixture
def image(ceph_cluster):
    """A new 64M image of the test pool (its name)."""
    name = f"img{next(_names)}"
    ceph_cluster.rbd("create", "--size", f"{SIZE >> 20}M", name)
    yield name
    ceph_cluster.rbd("rm", "--no-progress", name, check=False)


def export_image(cluster, image, workdir):
    """The image's bytes, through `rbd export`."""
    out = workdir / f"{image}.export"
    cluster.rbd("export", "--no-progress", image, str(out))
    data = out.read_bytes()
    out.unlink()
    return data


# --------------------------------------------------------------------------
# Data

def test_verify_blk_and_rbd_export(spindle_daemon, workdir, ceph_cluster,
                                   image, bench, client):
    """The bench's data, verified through spindle, is what `rbd export`
    reads from the cluster afterwards."""
    d = start_export(spindle_daemon, workdir, ceph_cluster.blockdev(image))
    verify_run(bench, workdir / "vu.sock", count=2000)
    seen = workdir / "seen"
    vu_ok(client, workdir / "vu.sock", "write", "8M", "64k", "--pattern", "9",
          "flush", "read", "0", "9M", "--output", seen)
    assert d.stop() == 0, d.stderr()
    data = export_image(ceph_cluster, image, workdir)
    assert len(data) == SIZE
    seen = seen.read_bytes()
    assert len(seen) == 9 << 20
    assert data[:9 << 20] == seen
    assert any(seen[:4 << 20]) and any(seen[8 << 20:])


def test_verify_scsi_lun(spindle_daemon, workdir, ceph_cluster, image, bench):
    verify_scsi_lun(spindle_daemon, workdir, bench,
                    ceph_cluster.blockdev(image), count=2000)


@pytest.mark.parametrize("direct", ["off", "on"])
def test_fua_writes_over_scsi(spindle_daemon, workdir, ceph_cluster, image,
                              client, direct):
    """A SCSI write with FUA is a write, then a flush (librbd has no FUA;
    its counters show the flush), with librbd's cache (cache.direct=off)
    and without it (on); a write without FUA flushes nothing."""
    d = start_scsi_export(spindle_daemon, workdir, ceph_cluster.blockdev(
        image, f"cache.direct={direct}"))
    sock = workdir / "scsi.sock"

    def flushes():
        return ceph_cluster.image_counters(d.proc.pid, image)["flush"]

    vu_ok(client, sock, "scsi-write", "0", "4k", "--pattern", "12")
    before = flushes()
    vu_ok(client, sock, "scsi-write", "0", "4k", "--pattern", "12")
    assert flushes() == before
    vu_ok(client, sock, "scsi-write", "1M", "256k", "--pattern", "11",
          "--fua", "scsi-read", "1M", "256k", "--verify", "11",
          "scsi-read", "0", "4k", "--verify", "12")
    assert flushes() == before + 1
    assert d.stop() == 0, d.stderr()
    assert "failed" not in d.stderr()
    data = export_image(ceph_cluster, image, workdir)
    assert any(data[1 << 20:(1 << 20) + (256 << 10)])


def test_two_iothreads(spindle_daemon, workdir, ceph_cluster, image, bench):
    """Two contexts on one image: completions either one takes reach the
    request's own context."""
    d = start_export(spindle_daemon, workdir, ceph_cluster.blockdev(image),
                     iothread=["iot0", "iot1"])
    r = verify_run(bench, workdir / "vu.sock", count=2000)
    assert all(q["ios"] > 0 for q in r["per_queue"])
    assert d.stop() == 0, d.stderr()


def test_flush_discard_zeroes(spindle_daemon, workdir, ceph_cluster, image,
                              client):
    d = start_export(spindle_daemon, workdir,
                     ceph_cluster.blockdev(image, "discard=unmap"), queues=1)
    sock = workdir / "vu.sock"
    vu_ok(client, sock, "write", "0", "8M", "--pattern", "3", "flush")
    used = rbd_used(ceph_cluster, image)
    assert used >= 8 << 20
    # Whole 4M objects: librbd removes them.
    vu_ok(client, sock, "discard", "0", "8M", "flush",
          "read", "0", "8M", "--expect-zeroes",
          "write", "16M", "64k", "--pattern", "4",
          "write-zeroes", "16M", "64k", "flush",
          "read", "16M", "64k", "--expect-zeroes")
    assert rbd_used(ceph_cluster, image) <= used - (8 << 20) + (4 << 20)
    assert d.stop() == 0, d.stderr()


def rbd_used(cluster, image):
    out = cluster.rbd("du", "--format=json", image).stdout
    return sum(i["used_size"] for i in json.loads(out)["images"]
               if i["name"] == image)


def test_block_resize_grows_the_image(spindle_daemon, workdir, ceph_cluster,
                                      image, client):
    d = start_export(spindle_daemon, workdir, ceph_cluster.blockdev(image),
                     queues=1, qmp=True)
    sock = workdir / "vu.sock"
    (cfg,) = vu_ok(client, sock, "get-config")
    assert cfg["capacity_bytes"] == SIZE
    qmp = QmpSync(str(workdir / "qmp.sock"))
    try:
        qmp.cmd("block_resize", {"node-name": "d0", "size": 2 * SIZE})
        nodes = qmp.cmd("query-named-block-nodes")
        assert [n["image"]["virtual-size"] for n in nodes
                if n["node-name"] == "d0"] == [2 * SIZE]
    finally:
        qmp.close()
    info = json.loads(ceph_cluster.rbd("info", "--format=json",
                                       image).stdout)
    assert info["size"] == 2 * SIZE
    cfg, _, _ = vu_ok(client, sock, "get-config",
                   "write", str(2 * SIZE - 65536), "64k", "--pattern", "5",
                   "read", str(2 * SIZE - 65536), "64k", "--verify", "5")
    assert cfg["capacity_bytes"] == 2 * SIZE
    assert d.stop() == 0, d.stderr()


# --------------------------------------------------------------------------
# Open

def test_snapshot_is_read_only(spindle, spindle_daemon, workdir,
                               ceph_cluster, image, client):
    d = start_export(spindle_daemon, workdir, ceph_cluster.blockdev(image),
                     queues=1)
    vu_ok(client, workdir / "vu.sock", "write", "0", "64k", "--pattern", "6",
          "flush")
    ceph_cluster.rbd("snap", "create", f"{image}@s1")
    vu_ok(client, workdir / "vu.sock", "write", "0", "64k", "--pattern", "8",
          "flush")
    assert d.stop() == 0, d.stderr()

    proc = run_spindle(spindle, ["--blockdev", ceph_cluster.blockdev(
        image, "node-name=n0,snapshot=s1")])
    check_one_line_error(proc, "--blockdev",
                         "a snapshot is read-only: open the node with "
                         "read-only=on")

    (workdir / "vu.sock").unlink(missing_ok=True)
    exp = daemons.Export("", str(workdir / "vu.sock"), num_queues=1,
                         blockdev=ceph_cluster.blockdev(
                             image, "snapshot=s1,read-only=on"),
                         iothread="iot0", writable=False)
    d = spindle_daemon(exports=[exp], workdir=workdir)
    vu_ok(client, workdir / "vu.sock", "read", "0", "64k", "--verify", "6")
    assert d.stop() == 0, d.stderr()
    ceph_cluster.rbd("snap", "purge", "--no-progress", image)


@pytest.mark.parametrize("what", ["image", "pool"])
def test_missing_image_or_pool_fails_at_open(spindle, ceph_cluster, what):
    opts = (f"driver=rbd,node-name=n0,conf={ceph_cluster.conf},"
            + ("pool=rbd,image=nope" if what == "image"
               else "pool=nopool,image=x"))
    start = time.monotonic()
    proc = run_spindle(spindle, ["--blockdev", opts])
    check_one_line_error(proc, "--blockdev",
                         "Cannot open the RBD image rbd/nope"
                         if what == "image" else
                         "Cannot open the Ceph pool 'nopool'")
    assert time.monotonic() - start < 20


# --------------------------------------------------------------------------
# Faults

@pytest.mark.parametrize("fault", ["frozen", "killed"])
def test_osd_lost_mid_run(spindle_daemon, workdir, ceph_cluster, image,
                          bench, client, fault):
    """The OSD stops answering mid-run (frozen: SIGSTOP) or dies (killed:
    SIGKILL): the requests it holds time out after rados_osd_op_timeout
    and reach the bench as I/O errors; the daemon logs it once per
    IOThread, stays up and answers QMP.  Thawed, or started again, the
    OSD serves again and so does the export, and what was flushed before
    the fault is still there."""
    lose, restore = {
        "frozen": (ceph_cluster.freeze_osd, ceph_cluster.thaw_osd),
        "killed": (ceph_cluster.kill_osd, ceph_cluster.start_osd),
    }[fault]
    d = start_export(spindle_daemon, workdir, ceph_cluster.blockdev(image),
                     qmp=True)
    sock = workdir / "vu.sock"
    vu_ok(client, sock, "write", "32M", "1M", "--pattern", "3", "flush")
    t, out = bench_in_background(bench, sock, "--rw=randrw", "--queues=2",
                                 "--iodepth=4", "--size=4M",
                                 f"--runtime={OSD_OP_TIMEOUT_S + 4}")
    time.sleep(1)
    lose()
    try:
        wait_for(lambda: "the guest sees I/O errors" in d.stderr(),
                 "requests to time out", OSD_OP_TIMEOUT_S + 10, daemon=d)
        assert d.alive()
        check_qmp_answers(workdir)
    finally:
        restore()
    join_failed_bench(t, out)
    # Back: the export works again, and the flushed data is there.  The
    # log says so once a request succeeds a second more than the op
    # timeout after the last failure.
    wait_for(lambda: vu_ok(client, sock, "write", "0", "64k", "--pattern",
                           "2", "read", "0", "64k", "--verify", "2",
                           "read", "32M", "1M", "--verify", "3") and
             "requests succeed again" in d.stderr(),
             "requests to succeed again", OSD_OP_TIMEOUT_S + 15, daemon=d,
             interval=0.5)
    assert d.stderr().count("the guest sees I/O errors") == 1, d.stderr()
    assert d.alive()
    assert d.stop() == 0, d.stderr()

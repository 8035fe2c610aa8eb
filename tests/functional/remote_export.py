"""Helpers of the tests of the remote-storage drivers (test_nbd.py,
test_rbd.py): a daemon exporting one node of the driver over
vhost-user-blk, and spindle-bench runs against it.

    start_export      a daemon with one vhost-user-blk export (vu.sock in
                      the test's directory) of a node from --blockdev
                      options, and optionally a QMP monitor (qmp.sock)
    run_bench         spindle-bench --json to completion: its document
    bench_in_background
                      spindle-bench --json in a thread, for a test that
                      acts on the server meanwhile
    join_failed_bench join that thread: the bench must have done I/O, then
                      seen I/O errors (a fault test)
    check_qmp_answers the daemon's QMP monitor (qmp.sock) answers
    check_verified    a --verify run found no error and no mismatch
    verify_run        run_bench --verify (random reads and writes, two
                      queues) and check_verified
    start_scsi_export a daemon with one virtio-scsi export (scsi.sock, two
                      queues) whose one LUN is a node from --blockdev options
    verify_scsi_lun   verify_run over such a LUN
    skip_unless_built_with
                      skip the module where spindle was built without the
                      driver's library
and the fixture bench (spindle-bench's path), which a test module imports.
"""

import json
import subprocess
import threading
from pathlib import Path

import pytest

import daemons  # tests/e2e, on sys.path through conftest
from qmp_util import QmpSync

BENCH = "tools/bench/spindle-bench"
RUN_TIMEOUT_S = 60


def skip_unless_built_with(build_dir, lib):
    """Skip unless config-host.h has CONFIG_<LIB> (lib: "libnbd")."""
    config = Path(build_dir) / "include" / "config-host.h"
    if f"#define CONFIG_{lib.upper()}" not in config.read_text():
        pytest.skip(f"spindle was built without {lib} "
                    f"(apt-get install {lib}-dev, then reconfigure)")


@pytest.fixture
def bench(binary):
    return binary(BENCH)


def start_export(spindle_daemon, workdir, blockdev, queues=2, iothread="iot0",
                 qmp=False):
    exp = daemons.Export("", str(workdir / "vu.sock"), num_queues=queues,
                         blockdev=blockdev, iothread=iothread)
    args = []
    if qmp:
        args = ["--chardev", f"socket,id=m0,path={workdir}/qmp.sock,"
                "server=on,wait=off", "--monitor", "chardev=m0"]
    return spindle_daemon(args, exports=[exp], workdir=workdir,
                          ready=[workdir / "qmp.sock"] if qmp else [])


def _bench(bench, sock, args):
    argv = [str(bench), f"--socket={sock}", "--json", *map(str, args)]
    return argv, subprocess.run(argv, capture_output=True, text=True,
                                timeout=RUN_TIMEOUT_S)


def run_bench(bench, sock, *args, expect=0):
    argv, proc = _bench(bench, sock, args)
    assert proc.returncode == expect, (
        f"{' '.join(argv)}\nexit {proc.returncode}\n{proc.stdout}\n"
        f"{proc.stderr}")
    return json.loads(proc.stdout)


def bench_in_background(bench, sock, *args):
    """Start the bench in a thread; returns (thread, result dict): the
    dict's "proc" is its CompletedProcess once the thread is joined."""
    out = {}

    def run():
        out["proc"] = _bench(bench, sock, args)[1]
    t = threading.Thread(target=run)
    t.start()
    return t, out


def join_failed_bench(t, out):
    """Join a bench_in_background() thread whose bench did I/O, then got
    I/O errors; returns its document."""
    t.join()
    proc = out["proc"]
    assert proc.returncode == 1, proc.stderr
    r = json.loads(proc.stdout)
    assert r["errors"] > 0 and r["first_error"]["status"] == "IOERR"
    assert r["ios"] > 0                  # it worked before the fault
    return r


def check_qmp_answers(workdir, nodes=("d0",)):
    """The monitor on qmp.sock answers, listing the block nodes."""
    qmp = QmpSync(str(workdir / "qmp.sock"))
    try:
        assert [n["node-name"] for n in qmp.cmd("query-named-block-nodes")] \
            == list(nodes)
    finally:
        qmp.close()


def check_verified(r):
    assert r["errors"] == 0 and r["first_error"] is None, r["first_error"]
    assert r["verify"]["mismatches"] == 0, r["verify"]["first_mismatch"]
    assert r["verify"]["sectors_checked"] > 0


def verify_run(bench, sock, *args, count, iodepth=8):
    """spindle-bench --verify, random reads and writes over 4M from two
    queues (and args) on sock: checked, and its document returned."""
    r = run_bench(bench, sock, "--verify", "--rw=randrw", "--queues=2",
                  f"--iodepth={iodepth}", "--size=4M", f"--count={count}",
                  *args)
    check_verified(r)
    return r


def start_scsi_export(spindle_daemon, workdir, blockdev):
    lun = daemons.ScsiLun(image="", writable=True, blockdev=blockdev)
    exp = daemons.ScsiExport(luns=[lun], socket=str(workdir / "scsi.sock"),
                             num_queues=2)
    return spindle_daemon(exports=[exp], workdir=workdir)


def verify_scsi_lun(spindle_daemon, workdir, bench, blockdev, count):
    """verify_run over start_scsi_export()'s LUN; the daemon must then stop
    cleanly."""
    d = start_scsi_export(spindle_daemon, workdir, blockdev)
    verify_run(bench, workdir / "scsi.sock", "--device=scsi", count=count)
    assert d.stop() == 0, d.stderr()

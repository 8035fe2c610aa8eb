"""scripts/bench-compare, on a matrix of one cell (null-co, then a file).

The full comparison takes minutes and its numbers belong in
docs/performance.md, not in a test.  Here one short cell (QD1, no service
time, the default poll window, one repeat) checks the plumbing: both
daemons start with the same command line but the program, spindle-bench
drives each, the table has both sides and the ratio columns, the goals
are reported, the raw JSON holds each run's report, the PNG plots are
drawn, and no daemon is left behind.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import pids_of, skip_without_two_cpus

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "bench-compare"


def daemons_left():
    return pids_of("qemu-storage-daemon", orphans=True) | \
        pids_of("daemon/spindle", orphans=True)


def _need_daemons(binary):
    """Both daemons and spindle-bench, and two CPUs to pin them to."""
    binary("spindle")
    binary("tools/bench/spindle-bench")
    if not shutil.which("qemu-storage-daemon"):
        pytest.skip("qemu-storage-daemon not found: install qemu-system-common")
    skip_without_two_cpus("bench-compare")


def test_one_cell(binary, tmp_path):
    _need_daemons(binary)
    pytest.importorskip("matplotlib")
    out = tmp_path / "results"
    before = daemons_left()
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--skip-deps", "--no-build",
         "--services", "0", "--loads", "qd1", "--polls", "default",
         "--repeats", "1", "--runtime", "0.2", "--ramp", "0.05",
         "--idle", "0.2", "--out", str(out)],
        capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout
    assert "spindle/qsd" in text and "qemu-storage-daemon" in text, text
    assert "Goals" in text, text
    # The daemons are gone.
    after = daemons_left()
    assert after <= before, after - before

    results = json.loads((out / "results.json").read_text())
    runs = results["runs"]
    assert {r["daemon"] for r in runs} == {"spindle", "qsd"} or \
        {r["daemon"] for r in runs} == {"spindle", "qemu-storage-daemon"}
    assert len(runs) == 2
    for r in runs:
        report = r["attempts"][-1]["result"]
        assert report["ios"] > 0 and report["iodepth"] == 1
        assert report["backend_cpu_us_per_io"] > 0
    # The same command line for both daemons, but the program.
    cmds = results["pairs"][0]["commands"]
    spindle_args = cmds["spindle"][cmds["spindle"].index("--object"):]
    qsd_args = cmds["qsd"][cmds["qsd"].index("--object"):]
    assert [a.replace("qsd0", "X").replace("spindle0", "X")
            for a in spindle_args] == \
        [a.replace("qsd0", "X").replace("spindle0", "X") for a in qsd_args]
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) == 3, pngs
    assert all((out / p).stat().st_size > 10000 for p in pngs)


def _run(args, timeout=180):
    return subprocess.run([sys.executable, str(SCRIPT), "--skip-deps", "--no-build",
                           *args], capture_output=True, text=True, timeout=timeout)


def test_file_backend_one_cell(binary, tmp_path):
    """--backend file: a preconditioned image, both daemons on it with the
    same file node (aio=io_uring, O_DIRECT) and two queues, the engine in
    the table, context switches per I/O, the real-disk goals, and the image
    removed at the end."""
    _need_daemons(binary)
    pytest.importorskip("matplotlib")
    out, disk = tmp_path / "results", tmp_path / "disk"
    disk.mkdir()
    proc = _run(["--backend", "file", "--dir", str(disk), "--disk-size", "16M",
                 "--engines", "io_uring", "--loads", "qd8", "--queues", "2",
                 "--polls", "default", "--repeats", "1", "--runtime", "0.2",
                 "--ramp", "0.05", "--idle", "0", "--out", str(out)])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout
    assert "engine" in text and "io_uring" in text and "QD8x2" in text, text
    assert "csw/IO" in text, text
    assert "QD8 and deeper" in text, text
    assert list(disk.iterdir()) == [], "the image was left behind"

    results = json.loads((out / "results.json").read_text())
    assert results["matrix"]["backend"] == "file"
    assert results["image"]["bytes"] == 16 << 20
    for r in results["runs"]:
        report = r["attempts"][-1]["result"]
        assert report["ios"] > 0 and report["queues"] == 2 and report["iodepth"] == 8
        assert report["backend_switches_per_io"] is not None
    cmds = results["pairs"][0]["commands"]
    for flavour in ("spindle", "qsd"):
        node = cmds[flavour][cmds[flavour].index("--blockdev") + 1]
        assert node.startswith("driver=file,") and "aio=io_uring" in node, node
        assert "cache.direct=on" in node and str(disk) in node, node
        export = cmds[flavour][cmds[flavour].index("--export") + 1]
        assert "num-queues=2" in export, export


@pytest.mark.parametrize("args, message", [
    (["--backend", "file", "--services", "0"], "--services is for --backend null"),
    (["--engines", "native"], "--engines and --dir are for --backend file"),
    (["--backend", "file", "--engines", "posix"], "bad engine 'posix'"),
    (["--queues", "0"], "bad queue count '0'"),
])
def test_bad_options(args, message):
    proc = _run([*args, "--dry-run"], timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr, proc.stderr


def test_file_backend_refuses_a_directory_without_room(binary, tmp_path):
    _need_daemons(binary)
    proc = _run(["--backend", "file", "--dir", str(tmp_path / "missing"),
                 "--loads", "qd1", "--repeats", "1", "--no-plots", "--idle", "0",
                 "--out", str(tmp_path / "out")], timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not a directory" in proc.stderr, proc.stderr

"""scripts/bench-compare, on a matrix of one cell.

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

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "bench-compare"


def _pids_of(program):
    out = subprocess.run(["pgrep", "-f", program], capture_output=True,
                         text=True).stdout.split()
    return {int(p) for p in out}


def test_one_cell(binary, tmp_path):
    binary("spindle")
    binary("tools/bench/spindle-bench")
    if not shutil.which("qemu-storage-daemon"):
        pytest.skip("qemu-storage-daemon not found: install qemu-system-common")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("bench-compare pins the daemons and the bench to two CPUs")
    pytest.importorskip("matplotlib")
    out = tmp_path / "results"
    before = _pids_of("qemu-storage-daemon") | _pids_of("daemon/spindle")
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
    after = _pids_of("qemu-storage-daemon") | _pids_of("daemon/spindle")
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

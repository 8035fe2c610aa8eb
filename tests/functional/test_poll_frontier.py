"""scripts/poll-frontier, end to end on a tiny matrix.

The real comparison takes minutes and its numbers belong in
docs/performance.md.  Here one service time, two loads (QD1 and an open
loop at 10k IOPS), the fixed windows 0 and 8 µs and the three policies,
one short repeat each, check the plumbing: the daemon starts with a QMP
monitor, every configuration is set live and measured in every cell, the
verdicts are there for every cell, a short load step (spindle-bench
--phase, sampled over QMP) and the idle check run, the PNG is drawn, and
no daemon is left behind.  With a made-up probe that reports a machine
change, the runs before it are repeated and left out of the medians.
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
SCRIPT = REPO / "scripts" / "poll-frontier"

CONFIGS = ["W0", "W8", "qemu-classic", "qemu-weighted", "predictive"]
CELLS = ["0/QD1", "0/10k"]


def test_tiny_matrix(binary, build_dir, tmp_path):
    binary("spindle")
    binary("tools/bench/spindle-bench")
    binary("tools/bench/spindle-cpuprobe")
    if not shutil.which("taskset"):
        pytest.skip("taskset is not installed (util-linux)")
    skip_without_two_cpus("poll-frontier")
    pytest.importorskip("matplotlib", reason="poll-frontier draws its plot with "
                                             "matplotlib")
    out = tmp_path / "results"
    mine = str(build_dir / "daemon" / "spindle")
    before = pids_of(mine, orphans=True)
    env = dict(os.environ, SPINDLE_BUILD=str(build_dir))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--skip-deps", "--skip-build",
         "--services", "0", "--loads", "qd1,10k", "--windows", "0,8",
         "--repeats", "1", "--runtime", "0.2", "--ramp", "0.1", "--no-idle63",
         "--load-step-seconds", "0.3", "--idle-seconds", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout
    assert "verdicts for predictive" in text, text
    assert "predictive: " in text and "cells pass" in text, text
    assert "idle: " in text, text
    after = pids_of(mine, orphans=True)
    assert after <= before, f"daemons left behind: {after - before}"

    results = json.loads((out / "results.json").read_text())
    assert results["complete"] is True
    assert [c["name"] for c in results["configs"]] == CONFIGS
    runs = [r for r in results["runs"] if r["kind"] == "cell"]
    # The real probe ran around every run; a run the machine changed under
    # may have been repeated (superseded), but one per config is kept.
    for r in runs:
        assert phase_level(r, "before") > 0 and phase_level(r, "after") > 0, r["probe"]
    runs = [r for r in runs if not r["superseded"]]
    assert sorted((r["cell"], r["config"]) for r in runs) == \
        sorted((c, k) for c in CELLS for k in CONFIGS)
    for cell in CELLS:
        assert results["cell_phases"][cell]["level_ns"] > 0
    for r in runs:
        rep = r["result"]
        assert r["ok"] and rep is not None, r["attempts"]
        # --min-ios (3000 by default) lengthens the 10k cell's runs to 0.3 s.
        assert r["runtime_s"] == (0.3 if r["cell"] == "0/10k" else 0.2), r["cell"]
        assert rep["runtime_s"] == pytest.approx(r["runtime_s"], abs=0.05)
        assert rep["ios"] > 0 and rep["lat_ns"]["p50"] > 0
        assert rep["backend_cpu_us_per_io"] > 0
        assert r["config_mismatch"] is None
        # The counters moved during the run, and the policy was the one set.
        assert r["qmp"]["delta"]["turns"] > 0
        assert r["qmp"]["after"]["spindle-poll"]["policy"] in (
            r["policy"], "adaptive")
        assert r["qmp"]["after"]["poll-max-ns"] == r["poll_max_ns"]
    for cell in CELLS:
        summary = results["cell_summaries"][cell]
        for cfg in CONFIGS:
            med = summary[cfg]["median"]
            assert med["p50_us"] > 0 and med["cpu_us_per_io"] > 0, (cell, cfg)
        verdicts = results["verdicts"][cell]
        assert [v["id"] for v in verdicts["predictive"]] == [1, 2, 3, 4]
        assert [v["id"] for v in verdicts["qemu-classic"]] == [1, 2, 3]
        for v in verdicts["predictive"]:
            assert v["status"] in ("pass", "MISS", "n/a") and v["detail"]
    assert results["summary"]["predictive"]["cells"] == len(CELLS)
    # The load step: one spindle-bench --phase run, sampled over QMP.
    step = results["load_step"]
    assert step["ok"], step["attempts"]
    assert [p["load"] for p in step["result"]["phases"]] == \
        ["qd1", "idle", "rate=10000", "qd1"]
    assert len(step["samples"]) > 50 and not step["sampler_errors"]
    rows = step["analysis"]["phases"]
    assert [r["loaded"] for r in rows] == [True, False, True, True]
    for r in rows:
        if r["loaded"]:
            assert r["status"] in ("pass", "MISS"), r
            assert r["settle_ios"] is not None and r["window_ns"] is not None
    assert step["analysis"]["status"] in ("pass", "MISS")
    assert "load step: " in text
    idle = results["idle"]
    assert idle["percent_of_core"] is not None and idle["seconds"] >= 0.9
    assert results["machine"]["nproc"] >= 2
    png = out / "frontier.png"
    assert png.is_file() and png.stat().st_size > 10000
    assert (out / "table.txt").read_text().count("verdicts for predictive") == len(CELLS)


def phase_level(record, when):
    return (record["probe"][when] or {}).get("cacheline_rt_min_ns", 0)


FAKE_PROBE = """#!/usr/bin/env python3
import json, os
state = os.environ["FAKE_PROBE_STATE"]
n = int(open(state).read()) if os.path.exists(state) else 0
open(state, "w").write(str(n + 1))
level = 50.0 if n < int(os.environ["FAKE_PROBE_SWITCH"]) else 400.0
print(json.dumps({"cacheline_rt_min_ns": level, "wakeup_rt_p10_us": 30.0}))
"""


def fake_probe(binary, build_dir, tmp_path, switch):
    """The made-up probe (400 ns from its call number `switch` + 1 on), and
    the environment that runs poll-frontier with it."""
    binary("spindle")
    binary("tools/bench/spindle-bench")
    skip_without_two_cpus("poll-frontier")
    probe = tmp_path / "probe"
    probe.write_text(FAKE_PROBE)
    probe.chmod(0o755)
    env = dict(os.environ, SPINDLE_BUILD=str(build_dir),
               FAKE_PROBE_STATE=str(tmp_path / "calls"),
               FAKE_PROBE_SWITCH=str(switch))
    return probe, env


def run_with_probe(probe, env, out, *args):
    """poll-frontier on the made-up probe, without plots."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--skip-deps", "--skip-build", *args,
         "--no-plots", "--cpuprobe", str(probe), "--out", str(out)],
        capture_output=True, text=True, timeout=120, env=env)


def test_machine_change_repeats_runs(binary, build_dir, tmp_path):
    """A probe that goes from 50 to 400 ns at its 4th call (the second run's
    "after"): the first two runs are repeated once, after the cell, and only
    the repeats count in the medians."""
    probe, env = fake_probe(binary, build_dir, tmp_path, 3)
    out = tmp_path / "results"
    proc = run_with_probe(
        probe, env, out, "--services", "0", "--loads", "qd1", "--windows", "0,8",
        "--policies", "predictive", "--repeats", "2", "--runtime", "0.1",
        "--ramp", "0.05", "--no-idle63", "--no-load-step", "--idle-seconds", "0")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 of 6 runs again, pass 1" in proc.stdout, proc.stdout
    assert "2 runs repeated in 1 pass because the machine changed" in proc.stdout
    results = json.loads((out / "results.json").read_text())
    runs = results["runs"]
    assert [r["superseded"] for r in runs] == [True, True] + [False] * 6
    assert [r["redo"] for r in runs] == [0] * 6 + [1, 1]
    assert [r["job"] for r in runs[6:]] == [r["job"] for r in runs[:2]]
    assert [phase_level(r, "after") for r in runs[:2]] == [50.0, 400.0]
    assert all(r["phase"] == "match" for r in runs[2:])
    ph = results["cell_phases"]["0/QD1"]
    assert (ph["level_ns"], ph["passes"], ph["repeated_runs"], ph["kept_off_phase"]) \
        == (400.0, 1, 2, 0)
    # Two runs per config in the medians, not three.
    for cfg in ("W0", "W8", "predictive"):
        assert results["cell_summaries"]["0/QD1"][cfg]["runs"] == 2
    # The same with --phase-passes 0: probes recorded, nothing repeated.
    (tmp_path / "calls").unlink()
    proc = run_with_probe(
        probe, env, out, "--services", "0", "--loads", "qd1", "--windows", "0",
        "--policies", "predictive", "--repeats", "2", "--runtime", "0.1",
        "--ramp", "0.05", "--no-idle63", "--no-load-step", "--idle-seconds", "0",
        "--phase-passes", "0")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert len(results["runs"]) == 4
    assert "kept from another phase" in proc.stdout, proc.stdout
    assert results["cell_phases"]["0/QD1"]["kept_off_phase"] == 2


def test_machine_change_repeats_load_step(binary, build_dir, tmp_path):
    """A probe that goes from 50 to 400 ns at its 7th call: the load step's
    "after" (calls: 1 at the start, 2 around each of the cell's 2 runs, then
    the load step's two).  The step runs again; the first attempt is kept,
    with its samples and a verdict that does not count."""
    probe, env = fake_probe(binary, build_dir, tmp_path, 6)
    out = tmp_path / "results"
    proc = run_with_probe(
        probe, env, out, "--services", "0", "--loads", "qd1", "--windows", "0",
        "--policies", "predictive", "--repeats", "1", "--runtime", "0.1",
        "--ramp", "0.05", "--no-idle63", "--idle-seconds", "0",
        "--load-step-seconds", "0.2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "the machine changed during the load step (cache-line round trip " \
           "50 -> 400 ns): again" in proc.stdout, proc.stdout
    results = json.loads((out / "results.json").read_text())
    step = results["load_step"]
    earlier = step["repeated_after_machine_change"]
    assert len(earlier) == 1
    assert [earlier[0]["probe"][w]["cacheline_rt_min_ns"]
            for w in ("before", "after")] == [50.0, 400.0]
    assert [step["probe"][w]["cacheline_rt_min_ns"]
            for w in ("before", "after")] == [400.0, 400.0]
    assert len(earlier[0]["samples"]) > 50
    assert earlier[0]["analysis"]["status"] in ("pass", "MISS")
    assert len(earlier[0]["analysis"]["phases"]) == 4
    assert ("(run 2 times: the machine changed during the first 1, whose "
            f"verdicts do not count: {earlier[0]['analysis']['status']})") \
        in (out / "table.txt").read_text()


def test_file_cells(binary, build_dir, tmp_path):
    """--file-dir: a real-disk cell per engine, each on its own image (two
    nodes of one daemon cannot both hold a file's write lock), in its own
    IOThread, measured like the null-co cells; the images are removed."""
    binary("spindle")
    binary("tools/bench/spindle-bench")
    skip_without_two_cpus("poll-frontier")
    out, disk = tmp_path / "results", tmp_path / "disk"
    disk.mkdir()
    env = dict(os.environ, SPINDLE_BUILD=str(build_dir))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--skip-deps", "--skip-build",
         "--services", "0", "--loads", "qd1", "--windows", "0",
         "--policies", "predictive", "--file-dir", str(disk), "--file-size", "8M",
         "--repeats", "1", "--runtime", "0.2", "--ramp", "0.05", "--no-idle63",
         "--no-load-step", "--idle-seconds", "0", "--no-plots", "--out", str(out)],
        capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert list(disk.iterdir()) == [], "the images were left behind"
    results = json.loads((out / "results.json").read_text())
    cells = {c["key"]: c for c in results["cells"]}
    assert set(cells) == {"0/QD1", "file-native/QD1", "file-io_uring/QD1"}
    assert cells["file-native/QD1"]["iothread"] == "iot-file-native"
    args = results["daemon"]["command"]
    nodes = [a for a in args if a.startswith("driver=file,")]
    assert len(nodes) == 2 and "aio=native" in nodes[0] and "aio=io_uring" in nodes[1]
    images = [a.split("filename=")[1].split(",")[0] for a in nodes]
    assert len(set(images)) == 2 and all(str(disk) in i for i in images)
    for r in results["runs"]:
        if r["cell"].startswith("file-"):
            assert r["ok"] and r["result"]["ios"] > 0, r["attempts"]

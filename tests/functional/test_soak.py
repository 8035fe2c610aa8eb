"""scripts/soak, short: it passes on a healthy daemon and fails on a bad one.

The real soak runs for minutes (docs/devel/testing.md, "Verify soak");
here 15 s on 4 MiB files check the plumbing: four exports verified at once
with I/Os counted and no mismatch, QMP traffic of every kind, the daemon's
CPU reported, the files removed.  Then two planted failures must each make
it fail with a message that says why: a file zeroed behind the daemon's
back (--corrupt-after; the bench reads back blocks it wrote and finds no
header) and the daemon killed mid-run.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "soak"
TIME_S = 15
EXPORTS = ("blk1", "blk2", "scsi1", "scsi2")
QMP_COMMANDS = ("query-named-block-nodes", "query-blockstats",
                "query-iothreads", "query-block-exports", "qom-set",
                "block_resize")


def soak_argv(build_dir, workdir, *extra):
    return [sys.executable, str(SCRIPT), "--build", str(build_dir),
            "--dir", str(workdir), "--size", "4M", "--seed", "7",
            "--json", str(workdir / "soak.json"), *extra]


def run_soak(build_dir, workdir, *extra, time_s=TIME_S):
    proc = subprocess.run(soak_argv(build_dir, workdir, "--time",
                                    str(time_s), *extra),
                          capture_output=True, text=True,
                          timeout=time_s + 120)
    summary = json.loads((workdir / "soak.json").read_text())
    return proc, summary


def test_soak_passes(binary, build_dir, workdir):
    binary("spindle")
    binary("tools/bench/spindle-bench")
    proc, s = run_soak(build_dir, workdir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "soak: PASSED" in proc.stdout
    assert s["passed"] and s["failures"] == []
    assert s["mismatches"] == 0 and s["errors"] == 0
    assert s["ios"] > 0 and s["sectors_checked"] > 0
    for name in EXPORTS:
        e = s["exports"][name]
        assert e["ios"] > 0 and e["sectors_checked"] > 0, (name, e)
        assert e["mismatches"] == 0, (name, e)
    assert s["daemon_cpu_s"] > 0
    # About 20 commands a second for 15 s: every kind is sent.
    for cmd in QMP_COMMANDS:
        assert s["qmp"].get(cmd, 0) > 0, (cmd, s["qmp"])
    assert f"ios={s['ios']} mismatches=0" in proc.stdout
    assert not list(workdir.glob("*.img")), "the files were not removed"


def test_soak_catches_corruption(binary, build_dir, workdir):
    binary("spindle")
    binary("tools/bench/spindle-bench")
    proc, s = run_soak(build_dir, workdir, "--corrupt-after", "5",
                       time_s=10)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "soak: FAILED" in proc.stdout
    assert s["exports"]["blk1"]["mismatches"] > 0
    assert s["mismatches"] == s["exports"]["blk1"]["mismatches"]
    assert "verify mismatches" in proc.stderr
    assert "blk1: spindle-bench exited with status 1" in proc.stderr


def test_soak_catches_a_dead_daemon(binary, build_dir, workdir):
    binary("spindle")
    binary("tools/bench/spindle-bench")
    proc = subprocess.Popen(soak_argv(build_dir, workdir, "--time", "30"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("soak: spindle pid "), first
        pid = int(first.split()[3].rstrip(","))
        time.sleep(3)
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, first + out + err
    assert "the daemon died during the soak (status -9)" in err
    assert "soak: FAILED" in out
    s = json.loads((workdir / "soak.json").read_text())
    assert not s["passed"] and s["daemon_cpu_s"] is None
    # It did not wait for the 30 s: a dead daemon ends the soak.
    assert s["elapsed_s"] < 20

"""spindle-stat (tools/stat, docs/stat.md): a live view over QMP.

A spindle with two null-co exports and a monitor; spindle-bench drives
one of them at a fixed open-loop rate while spindle-stat --json reports
three one-second intervals: the loaded export's IOPS fall in a broad band
around the rate (the load is Poisson and the machine is shared, so the
band is wide on purpose), the idle export shows 0 and no per-I/O ratios,
and the IOThread figures are present and within their ranges.  The table
has its headers and a row per IOThread, export and queue; a monitor with
pretty=on (a reply over many lines) reads the same.  A socket that
is not there or is no QMP monitor exits 2 with one line, a bad option
too, the daemon going away under a running spindle-stat exits 1, and
SIGINT or SIGTERM stops it with 0.
"""

import json
import signal
import subprocess

import pytest

import daemons  # tests/e2e, on sys.path through conftest
from conftest import bad_options, check_bad_option, wait_for

STAT = "tools/stat/spindle-stat"
BENCH = "tools/bench/spindle-bench"
RATE = 1000                     # IOPS spindle-bench offers to e0
NULL_CO = "driver=null-co,size=1G"


@pytest.fixture
def stat(binary):
    return binary(STAT)


@pytest.fixture
def daemon(spindle_daemon, workdir):
    """spindle: e0 (one queue) and e1 (two queues) on null-co nodes in
    iot0, and a QMP monitor at workdir/qmp.sock."""
    monitor = workdir / "qmp.sock"
    exports = [
        daemons.Export("", str(workdir / "e0.sock"), blockdev=NULL_CO),
        daemons.Export("", str(workdir / "e1.sock"), num_queues=2,
                       blockdev=NULL_CO),
    ]
    d = spindle_daemon(
        ["--chardev", f"socket,id=m0,path={monitor},server=on,wait=off",
         "--monitor", "chardev=m0"],
        exports=exports, ready=[monitor], workdir=workdir)
    d.monitor = monitor
    return d


def run_stat(stat, *args, timeout=30):
    return subprocess.run([str(stat), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def reports(stat, monitor, *args):
    proc = run_stat(stat, monitor, "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def by_id(entries):
    return {e["id"]: e for e in entries}


def export_iops(stat, monitor, export):
    return by_id(reports(stat, monitor, "--count=1", "--interval=0.2")
                 [0]["exports"])[export]["iops"]


def check_iothread(t):
    assert t["policy"] in ("predictive", "fixed", "qemu-classic",
                           "qemu-weighted")
    assert isinstance(t["window_ns"], int) and t["window_ns"] >= 0
    assert t["poll_hit_pct"] is None or 0 <= t["poll_hit_pct"] <= 100
    assert t["wakeups_per_s"] >= 0
    # One thread's CPU time over the interval: at most 100 %, with some
    # room for the samples' times not being exactly the thread's.
    assert 0 <= t["cpu_pct"] <= 110


def check_loaded(e):
    assert e["connected"]
    assert 0.5 * RATE <= e["iops"] <= 1.5 * RATE, e
    # spindle-bench reads by default; every request is one.
    assert e["read_iops"] == pytest.approx(e["iops"], rel=0.2, abs=20)
    assert e["write_iops"] == 0
    assert e["read_mbps"] == pytest.approx(e["read_iops"] * 4096 / 1e6,
                                           rel=0.05)
    assert 0 <= e["kicks_per_io"] <= 1.05
    assert e["interrupts_per_io"] >= 0
    assert [q["queue"] for q in e["queues"]] == [0]
    assert e["queues"][0]["iops"] == pytest.approx(e["iops"])
    assert e["queues"][0]["iothread"] == "iot0"


def check_idle(e):
    assert not e["connected"]
    assert e["iops"] == 0 and e["read_mbps"] == 0 and e["write_mbps"] == 0
    assert e["kicks_per_io"] is None and e["interrupts_per_io"] is None
    assert len(e["queues"]) == 2
    assert all(q["iops"] == 0 for q in e["queues"])


def test_rates_under_fixed_load(stat, binary, daemon):
    bench = subprocess.Popen(
        [str(binary(BENCH)), f"--socket={daemon.exports[0].socket}",
         f"--rate={RATE}", "--runtime=8", "--bs=4k"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: export_iops(stat, daemon.monitor, "e0") > 0,
                 "spindle-bench's requests on e0", daemon=daemon)
        rs = reports(stat, daemon.monitor, "--count=3", "--interval=1")
    finally:
        bench.kill()
        bench.wait()
    assert len(rs) == 3
    for r in rs:
        assert 0.8 <= r["interval_s"] <= 1.5, r
        threads = by_id(r["iothreads"])
        assert list(threads) == ["iot0"]
        check_iothread(threads["iot0"])
        exports = by_id(r["exports"])
        assert list(exports) == ["e0", "e1"]
        check_loaded(exports["e0"])
        check_idle(exports["e1"])
    assert rs[0]["timestamp"] < rs[1]["timestamp"] < rs[2]["timestamp"]


def test_table(stat, daemon):
    proc = run_stat(stat, daemon.monitor, "0.2", "--count", "2")
    assert proc.returncode == 0, proc.stderr
    blocks = proc.stdout.split("\n\n")
    # Per report: the time and IOThreads, then the exports; a blank line
    # after each.
    assert len(blocks) == 5 and blocks[-1] == "", proc.stdout
    threads = blocks[0].splitlines()
    assert "interval 0.2" in threads[0]
    assert threads[1].split() == ["IOThread", "policy", "window-ns",
                                  "poll-hit%", "wakeups/s", "cpu%"]
    assert threads[2].split()[0] == "iot0"
    lines = blocks[1].splitlines()
    header = lines[0]
    assert header.split()[:3] == ["Export/queue", "iothread", "IOPS"]
    names = [line.split()[0] for line in lines[1:]]
    assert names == ["e0", "e0/vq0", "e1", "e1/vq0", "e1/vq1"]
    # Aligned: every row ends where the header does.
    assert all(len(line) == len(header) for line in lines)


def test_missing_socket(stat, workdir):
    proc = run_stat(stat, workdir / "nope.sock")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"spindle-stat: cannot connect to {workdir / 'nope.sock'}: "
        "No such file or directory"]
    assert proc.stdout == ""


def test_not_a_monitor(stat, daemon):
    # An export's socket accepts the connection but never greets.
    sock = daemon.exports[1].socket
    proc = run_stat(stat, sock)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"spindle-stat: {sock} is not a QMP monitor (no QMP greeting)"]
    assert proc.stdout == ""


@pytest.mark.parametrize("args, option", bad_options(
    "--count 0", "--count x", "--interval 0", "--interval 1s",
    "--interval -1", "--bogus 1"))
def test_bad_option(stat, workdir, args, option):
    check_bad_option(run_stat(stat, workdir / "qmp.sock", *args), option)


@pytest.mark.parametrize("args, text", [
    ((), "missing SOCKET"),
    (("s", "1", "2"), "unexpected argument '2'"),
    (("s", "0.01"), "INTERVAL: expected at least 0.1 seconds"),
    (("s", "1", "--interval=2"), "INTERVAL given twice"),
])
def test_bad_arguments(stat, args, text):
    proc = run_stat(stat, *args)
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and text in proc.stderr
    assert proc.stdout == ""


def test_daemon_goes_away(stat, daemon):
    proc = subprocess.Popen([str(stat), str(daemon.monitor), "--json",
                             "--interval=0.2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stdout.readline())
        assert [e["id"] for e in first["exports"]] == ["e0", "e1"]
        assert daemon.stop() == 0
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 1, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(
        f"spindle-stat: {daemon.monitor}: the daemon went away: "), err


def test_pretty_monitor(stat, spindle_daemon, workdir):
    # pretty=on spreads each reply over many lines.
    monitor = workdir / "qmp.sock"
    spindle_daemon(
        ["--chardev", f"socket,id=m0,path={monitor},server=on,wait=off",
         "--monitor", "chardev=m0,pretty=on"],
        iothreads=2, ready=[monitor], workdir=workdir)
    [r] = reports(stat, monitor, "--count=1", "--interval=0.2")
    assert [t["id"] for t in r["iothreads"]] == ["iot0", "iot1"]
    assert r["exports"] == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_cleanly(stat, daemon, sig):
    proc = subprocess.Popen([str(stat), str(daemon.monitor), "--json",
                             "--interval=0.2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        json.loads(proc.stdout.readline())
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0 and err == "", (proc.returncode, err)

"""Acceptance: live IOThread statistics over QMP while I/O runs.

qemu.qmp's own asyncio client (QMPClient) connects to spindle's monitor and
reads query-iothreads again and again while spindle-bench drives random
reads through a vhost-user-blk export whose queue runs in IOThread iot0.
The IOThread's polling statistics ("spindle-poll": loop turns, handlers
found by polling, callbacks dispatched, ...) must move while the I/O runs
and nearly stop when it is over; query-blockstats and query-block-exports
must count the same I/O.  A second IOThread that serves nothing must stay
still throughout.

Only what holds on a noisy 2-CPU VM is asserted: every interval sampled
while the bench runs shows work, and an idle interval shows far less than a
busy one.  `pytest -s` prints the samples.
"""

import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT, _build_dir_path, find_binary

sys.path.insert(0, str(REPO_ROOT / "tests" / "e2e"))
from daemons import die_with_parent  # noqa: E402

qmp = pytest.importorskip("qemu.qmp",
                          reason="qemu.qmp is not installed (pip install qemu.qmp)")

SAMPLE_S = 0.4
BENCH_RUNTIME_S = 2.5
IDLE_SAMPLES = 3
# Counters of "spindle-poll" that must grow while the I/O runs.
BUSY_COUNTERS = ("turns", "dispatches")
SHOWN = ("window-ns", "turns", "poll-hits", "poll-misses", "wakeups",
         "dispatches", "grows", "shrinks", "poll-time-ns", "block-time-ns",
         "cpu-ns")


def _programs_or_skip():
    build = _build_dir_path()
    found = {}
    for name in ("spindle", "spindle-bench"):
        path = find_binary(build, name)
        if path is None:
            pytest.skip(f"{name} is not built in {build}")
        found[name] = path
    text = subprocess.run([str(found["spindle"]), "--help"], capture_output=True,
                          text=True, timeout=10)
    text = text.stdout + text.stderr
    if "--monitor" not in text or re.search(r"monitor.*not implemented", text):
        pytest.skip("spindle has no QMP monitor yet (`spindle --help`)")
    return found


def _poll(reply, iothread):
    for entry in reply:
        if entry["id"] == iothread:
            return entry["spindle-poll"]
    raise AssertionError(f"no IOThread {iothread!r} in {reply}")


def _delta(a, b, key):
    return b[key] - a[key]


async def _connect(path, timeout=10.0):
    client = qmp.QMPClient("live-stats")
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    while True:
        try:
            await client.connect(str(path))
            return client
        except qmp.ConnectError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


class Sample:
    def __init__(self, t, phase, iot0, iot1, requests, reads):
        self.t, self.phase = t, phase
        self.iot0, self.iot1 = iot0, iot1
        self.requests, self.reads = requests, reads


async def _sample(client, t0, phase):
    iothreads = await client.execute("query-iothreads")
    exports = await client.execute("query-block-exports")
    stats = await client.execute("query-blockstats")
    requests = sum(q["requests"] for e in exports for q in e["spindle-queues"])
    reads = sum(s["stats"]["rd_operations"] for s in stats)
    return Sample(time.monotonic() - t0, phase, _poll(iothreads, "iot0"),
                  _poll(iothreads, "iot1"), requests, reads)


async def _scenario(programs, workdir):
    sock = workdir / "vu.sock"
    monitor = workdir / "qmp.sock"
    daemon = await asyncio.create_subprocess_exec(
        str(programs["spindle"]),
        "--object", "iothread,id=iot0",
        "--object", "iothread,id=iot1",
        "--blockdev", "driver=null-co,node-name=n0,size=1073741824",
        "--export", f"type=vhost-user-blk,id=e0,node-name=n0,addr.type=unix,"
                    f"addr.path={sock},iothread=iot0,num-queues=1",
        "--chardev", f"socket,id=m0,path={monitor},server=on,wait=off",
        "--monitor", "chardev=m0",
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=open(workdir / "spindle.stderr", "w"), preexec_fn=die_with_parent())
    samples = []
    bench_out = None
    client = None
    quit_sent = False
    try:
        client = await _connect(monitor)
        t0 = time.monotonic()
        for _ in range(IDLE_SAMPLES):
            samples.append(await _sample(client, t0, "idle-before"))
            await asyncio.sleep(SAMPLE_S)
        bench = await asyncio.create_subprocess_exec(
            str(programs["spindle-bench"]), f"--socket={sock}",
            f"--runtime={BENCH_RUNTIME_S}", "--rw=randread", "--iodepth=4",
            "--json", "--connect-timeout=5000",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            preexec_fn=die_with_parent())
        wait = asyncio.ensure_future(bench.communicate())
        while not wait.done():
            samples.append(await _sample(client, t0, "bench"))
            await asyncio.wait([wait], timeout=SAMPLE_S)
        out, err = wait.result()
        assert bench.returncode == 0, err.decode()
        bench_out = json.loads(out)
        for _ in range(IDLE_SAMPLES + 1):
            samples.append(await _sample(client, t0, "idle-after"))
            await asyncio.sleep(SAMPLE_S)
        await client.execute("quit")
        quit_sent = True
    finally:
        if client is not None:
            try:
                await client.disconnect()
            except EOFError:
                # qemu.qmp reports the server closing the stream, which
                # is what it does after quit (QEMU's does too).
                if not quit_sent:
                    raise
        try:
            await asyncio.wait_for(daemon.wait(), 15)
        except asyncio.TimeoutError:
            daemon.kill()
            await daemon.wait()
    return samples, bench_out, daemon.returncode


def _show(samples):
    print()
    print(f"{'t/s':>5} {'phase':<12} {'requests':>9} {'rd_ops':>9} "
          + " ".join(f"{k:>13}" for k in SHOWN) + "   iot1 turns")
    for s in samples:
        print(f"{s.t:5.2f} {s.phase:<12} {s.requests:>9} {s.reads:>9} "
              + " ".join(f"{s.iot0.get(k, '-'):>13}" for k in SHOWN)
              + f"   {s.iot1.get('turns', '-')}")


@pytest.fixture(scope="module")
def live():
    programs = _programs_or_skip()
    workdir = Path(tempfile.mkdtemp(prefix="spindle-live-"))
    try:
        samples, bench, status = asyncio.run(_scenario(programs, workdir))
        _show(samples)
        print(f"bench: {bench['ios']} I/Os, {bench['iops']:.0f} IOPS, "
              f"{bench['kicks_per_io']:.3f} kicks/IO; spindle exit {status}")
        yield samples, bench, status, workdir
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _busy_intervals(samples):
    """(a, b) for consecutive samples both taken while requests flowed: the
    export's request count moved from a to b, and had already moved into a."""
    out = []
    for prev, a, b in zip(samples, samples[1:], samples[2:]):
        if (a.phase == b.phase == "bench" and prev.requests < a.requests < b.requests):
            out.append((a, b))
    return out


def test_counters_grow_in_every_busy_interval(live):
    samples, bench, _, _ = live
    busy = _busy_intervals(samples)
    assert len(busy) >= 2, "fewer than two intervals sampled while I/O ran"
    for a, b in busy:
        for key in BUSY_COUNTERS:
            assert _delta(a.iot0, b.iot0, key) > 0, (key, a.t, b.t)
        # Every request was found either by polling or by a wakeup.
        found = (_delta(a.iot0, b.iot0, "poll-hits")
                 + _delta(a.iot0, b.iot0, "wakeups"))
        assert found > 0, (a.t, b.t)


def test_counters_nearly_stop_when_idle(live):
    samples, _, _, _ = live
    busy = _busy_intervals(samples)
    assert busy
    busy_turns = min(_delta(a.iot0, b.iot0, "turns") for a, b in busy)
    after = [s for s in samples if s.phase == "idle-after"]
    # The first idle sample may still include the bench's last requests.
    idle = [_delta(a.iot0, b.iot0, "turns") for a, b in zip(after[1:], after[2:])]
    assert idle, "no idle interval after the I/O"
    for turns in idle:
        assert turns * 10 <= max(busy_turns, 100), (idle, busy_turns)
    # Nothing moved the request counters once the bench was gone.
    assert after[-1].requests == after[1].requests
    assert after[-1].reads == after[1].reads


def test_unused_iothread_stays_still(live):
    samples, _, _, _ = live
    busy = _busy_intervals(samples)
    iot1 = samples[-1].iot1["turns"] - samples[0].iot1["turns"]
    iot0 = sum(_delta(a.iot0, b.iot0, "turns") for a, b in busy)
    assert iot1 * 10 <= max(iot0, 100), (iot1, iot0)


def test_blockstats_and_export_count_the_bench_io(live):
    samples, bench, _, _ = live
    last = samples[-1]
    # The bench's measured I/Os are a subset of what reached the node (its
    # ramp and the requests in flight at the end are not counted by it).
    assert last.reads >= bench["ios"] > 0
    assert last.requests >= last.reads
    assert bench["errors"] == 0


def test_daemon_exits_0_after_quit(live):
    _, _, status, _ = live
    assert status == 0

"""Throttle groups and the throttle filter (docs/block.md#throttle).

spindle-bench drives exports on throttle nodes over null-co (so the
limit, not the device, sets the pace), with --completion=interrupt so
that several benches and the daemon share two CPUs without spinning:

- the limits over 10 s, all at once on one daemon: x-iops-total shared
  by two disks in one group (in two IOThreads; their sum is the limit
  and round-robin gives each half), x-bps-read, and x-iops-write with
  x-iops-size (a 16k write counts as two 8k operations); each within 5%,
  after a short ramp that takes the initial bucket (a tenth of a second
  of I/O) out;
- a burst: x-iops-total-max for x-iops-total-max-length seconds, then
  the average;
- qom-set of the group's limits while a bench runs: the next second runs
  at the new rate, and qom-get shows it;
- an unthrottled disk on the same IOThread as a throttled QD32 load
  keeps its latency (its bench alone spins on the used ring), and the
  throttled load does not make the IOThread spin: its CPU stays far
  below what serving the I/O unthrottled costs;
- qemu-storage-daemon's command lines for throttling start unchanged
  (key=value, JSON, --config), and errors are one clear line.
"""

import json
import subprocess
import time

import pytest

from conftest import check_one_line_error, make_image, run_spindle, two_cpus
from qmp_util import SpindleQmp
from test_bench import RUN_TIMEOUT_S, bench, run_json  # noqa: F401 (fixture)

NULL_SIZE = 1 << 30
# Several benches and the daemon share two CPUs: none of them spins
# (but the neighbour in test_neighbour_keeps_latency_and_no_spinning).
BENCH_ARGS = ["--completion=interrupt", "--connect-timeout=5000"]

def throttled_disk(name, group, iothread="iot0"):
    """A null-co node under a throttle node in group, exported as name."""
    return ["--blockdev", f"driver=null-co,node-name={name}-null,"
            f"size={NULL_SIZE}",
            "--blockdev", f"driver=throttle,node-name={name},"
            f"throttle-group={group},file={name}-null"]


def export(workdir, name, iothread="iot0"):
    return ["--export", f"type=vhost-user-blk,id={name},node-name={name},"
            f"addr.type=unix,addr.path={workdir / name}.sock,writable=on,"
            f"iothread={iothread}"]


def start_bench(bench, workdir, name, *args):
    argv = [str(bench), f"--socket={workdir / name}.sock", "--json",
            *BENCH_ARGS, *[str(a) for a in args]]
    return subprocess.Popen(argv, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish_bench(proc):
    out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, f"{proc.args}\n{out}\n{err}"
    return json.loads(out)


def run_bench(bench, workdir, name, *args):
    return run_json(bench, f"{workdir / name}.sock", *BENCH_ARGS, *args)[0]


def iothread_poll(d, iot):
    for info in d.qmp.cmd("query-iothreads"):
        if info["id"] == iot:
            return info["spindle-poll"]
    raise AssertionError(f"no IOThread {iot}")


def test_limits_over_ten_seconds(spindle, bench, workdir):
    args = ["--object", "iothread,id=iot0", "--object", "iothread,id=iot1",
            "--object", "throttle-group,id=shared,x-iops-total=1000",
            "--object", "throttle-group,id=bps,x-bps-read=8388608",
            "--object", "throttle-group,id=wr,x-iops-write=400,"
            "x-iops-size=8192",
            *throttled_disk("a", "shared"), *throttled_disk("b", "shared"),
            *throttled_disk("c", "bps"), *throttled_disk("d", "wr"),
            *export(workdir, "a"), *export(workdir, "b", "iot1"),
            *export(workdir, "c"), *export(workdir, "d")]
    common = ["--ramp=0.5", "--runtime=10", "--iodepth=8"]
    with SpindleQmp(spindle, workdir, args).start():
        procs = {
            "a": start_bench(bench, workdir, "a", *common, "--rw=randrw"),
            "b": start_bench(bench, workdir, "b", *common, "--rw=randrw"),
            "c": start_bench(bench, workdir, "c", *common, "--rw=randread",
                             "--bs=64k"),
            "d": start_bench(bench, workdir, "d", *common, "--rw=randwrite",
                             "--bs=16k"),
        }
        r = {name: finish_bench(p) for name, p in procs.items()}
    # Two disks in one group share its 1000 IOPS, half each (round-robin).
    assert r["a"]["iops"] + r["b"]["iops"] == pytest.approx(1000, rel=0.05)
    for name in "ab":
        assert r[name]["iops"] == pytest.approx(500, rel=0.1), r[name]
    # 8 MiB/s of reads.
    assert r["c"]["bw_mib_s"] == pytest.approx(8, rel=0.05)
    # 400 operations of 8k a second: 200 writes of 16k.
    assert r["d"]["iops"] == pytest.approx(200, rel=0.05)


def test_burst_then_average(spindle, bench, workdir):
    # 1000/s for 2 s (2000 I/Os and what drained meanwhile), then 200/s.
    args = ["--object", "iothread,id=iot0",
            "--object", "throttle-group,id=tg,x-iops-total=200,"
            "x-iops-total-max=1000,x-iops-total-max-length=2",
            *throttled_disk("a", "tg"), *export(workdir, "a")]
    with SpindleQmp(spindle, workdir, args).start():
        r = run_bench(bench, workdir, "a", "--phase=2:qd8", "--phase=1:qd8",
                      "--phase=3:qd8")
    burst, _, average = r["phases"]
    assert burst["iops"] == pytest.approx(1000, rel=0.1), burst
    assert average["iops"] == pytest.approx(200, rel=0.05), average


def test_qom_set_takes_effect_within_a_second(spindle, bench, workdir):
    args = ["--object", "iothread,id=iot0",
            "--object", "throttle-group,id=tg,x-iops-total=200",
            *throttled_disk("a", "tg"), *export(workdir, "a")]
    with SpindleQmp(spindle, workdir, args).start() as d:
        proc = start_bench(bench, workdir, "a", *["--phase=1:qd16"] * 5)
        time.sleep(2.5)
        # The bench's phase times are CLOCK_MONOTONIC, as Python's.
        set_start = time.monotonic_ns()
        assert d.qmp.cmd("qom-set", {"path": "/objects/tg",
                                     "property": "limits",
                                     "value": {"iops-total": 1000}}) == {}
        set_end = time.monotonic_ns()
        r = finish_bench(proc)
        limits = d.qmp.cmd("qom-get", {"path": "tg", "property": "limits"})
        assert limits["iops-total"] == 1000
        assert d.qmp.cmd("qom-get", {"path": "tg",
                                     "property": "x-iops-total"}) == 1000
    phases = r["phases"]
    seen = [(p["iops"], p["start_ns"] - set_start) for p in phases]
    before = [p for p in phases[1:] if p["end_ns"] <= set_start]
    after = [p for p in phases if p["start_ns"] >= set_end]
    assert before and len(after) >= 2, seen
    for p in before:
        assert p["iops"] == pytest.approx(200, rel=0.05), seen
    # The first second that starts after the change runs at the new rate
    # (plus the tenth of a second that the emptied bucket lets through).
    assert after[0]["iops"] == pytest.approx(1050, rel=0.1), seen
    for p in after[1:]:
        assert p["iops"] == pytest.approx(1000, rel=0.05), seen


def cpu_over(d, iot, fn):
    """Run fn(); return its result, the wall time, and iot's CPU time and
    time spent spinning meanwhile (ns)."""
    before, t0 = iothread_poll(d, iot), time.monotonic_ns()
    result = fn()
    after, wall = iothread_poll(d, iot), time.monotonic_ns() - t0
    return (result, wall, after["cpu-ns"] - before["cpu-ns"],
            after["poll-time-ns"] - before["poll-time-ns"])


def test_neighbour_keeps_latency_and_no_spinning(spindle, bench, workdir):
    """A throttled QD32 load at 1000 IOPS costs its IOThread a few percent
    of a CPU (timers, not spinning: the poll policy sees ms-long waits,
    and a timer's wake-up ends no source's interval), as little as an
    idle IOThread beside it costs nothing; and an unthrottled disk on the
    same IOThread keeps its median latency within 1.5x of running alone.

    The IOThread runs on one CPU and the benches on another.  The
    neighbour's bench spins on its used ring (the others block), so that
    its latency is the daemon's: in interrupt mode it shares its CPU's
    wake-ups with the throttled bench, and its null-co median went from
    1.3 to 1.9 µs beside the load with a fixed 32 µs window as with the
    default policy.  This VM also has phases, from under a second to tens
    of seconds long, that move that median between 0.37 and 1.17 µs in
    poll mode (and between 1.3 and 17-28 µs in interrupt mode, where the
    bench then misses the daemon's answer before it sleeps; measured
    2026-11-27).  So the neighbour runs alone and beside the load in turn,
    and each run beside the load is compared with the slower of the runs
    alone just before and after it: a phase change spoils at most the
    pairs around it, while a load that always slows the neighbour fails
    every pair."""
    iot_cpu, bench_cpu = two_cpus("the IOThread and the benches each "
                                  "need a CPU of their own").split(",")
    pin = f"--cpus={bench_cpu}"
    args = ["--object", f"iothread,id=iot0,cpu-affinity={iot_cpu}",
            "--object", "iothread,id=idle",
            "--object", "throttle-group,id=tg,x-iops-total=1000",
            *throttled_disk("t", "tg"), *export(workdir, "t"),
            "--blockdev", f"driver=null-co,node-name=u,size={NULL_SIZE}",
            *export(workdir, "u")]

    def neighbour():
        return run_bench(bench, workdir, "u", "--runtime=1", "--completion=poll",
                         pin)["lat_ns"]["p50"]

    def neighbour_beside_load():
        load = start_bench(bench, workdir, "t", "--runtime=2",
                           "--iodepth=32", pin)
        time.sleep(0.4)
        p50 = neighbour()
        finish_bench(load)
        return p50

    with SpindleQmp(spindle, workdir, args).start() as d:
        throttled, wall, cpu, spun = cpu_over(d, "iot0", lambda: run_bench(
            bench, workdir, "t", "--runtime=3", "--iodepth=32", pin))
        _, idle_wall, idle_cpu, _ = cpu_over(d, "idle", lambda: time.sleep(1))
        alone, beside = [neighbour()], []
        for _ in range(3):
            beside.append(neighbour_beside_load())
            alone.append(neighbour())
    ratios = [b / max(alone[i], alone[i + 1]) for i, b in enumerate(beside)]
    print(f"throttled QD32 at {throttled['iops']:.0f} IOPS: IOThread CPU "
          f"{100 * cpu / wall:.2f}%, spinning {100 * spun / wall:.3f}%; "
          f"idle IOThread {100 * idle_cpu / idle_wall:.3f}%; neighbour p50 "
          f"alone {alone} ns, beside {beside} ns; ratios "
          f"{[round(r, 2) for r in ratios]}")
    # Never above the limit (3 s and the first tenth of a second's bucket);
    # a loaded machine may keep the bench below it.
    assert throttled["iops"] <= 1000 * 3.1 / 3 * 1.01, throttled["iops"]
    assert cpu < 0.10 * wall and spun < 0.01 * wall, (cpu, spun, wall)
    assert idle_cpu < 0.01 * idle_wall
    assert min(ratios) <= 1.5, (alone, beside)


QSD_ARGS = [
    "--object", "throttle-group,id=tg0,x-iops-total=2000",
    "--blockdev", "driver=throttle,node-name=thr1,throttle-group=tg0,"
    "file=file1",
]


@pytest.mark.parametrize("form", ["keyval", "json", "config"])
def test_qsd_command_lines_start_unchanged(spindle, bench, workdir, form):
    image = make_image(workdir / "disk1.img", 64 << 20)
    file1 = ["--blockdev", f"driver=file,node-name=file1,filename={image}"]
    exp = ["--export", "type=vhost-user-blk,id=export1,node-name=thr1,"
           f"addr.type=unix,addr.path={workdir / 'thr1'}.sock,writable=on"]
    if form == "keyval":
        args = [*file1, *QSD_ARGS, *exp]
    elif form == "json":
        args = [*file1,
                "--object", '{"qom-type": "throttle-group", "id": "tg0", '
                '"limits": {"iops-total": 2000}}',
                "--blockdev", '{"driver": "throttle", "node-name": "thr1", '
                '"throttle-group": "tg0", "file": "file1"}', *exp]
    else:
        config = workdir / "spindle.json"
        config.write_text(json.dumps({
            "object": [{"qom-type": "throttle-group", "id": "tg0",
                        "x-iops-total": 2000}],
            "blockdev": [{"driver": "file", "node-name": "file1",
                          "filename": str(image)},
                         {"driver": "throttle", "node-name": "thr1",
                          "throttle-group": "tg0", "file": "file1"}],
        }))
        args = ["--config", str(config), *exp]
    with SpindleQmp(spindle, workdir, args).start() as d:
        r = run_bench(bench, workdir, "thr1", "--rw=randrw", "--verify",
                      "--runtime=0.5", "--iodepth=4")
        assert r["errors"] == 0
        # Spread over the half second: not faster than the limit (and
        # its initial tenth of a second).
        assert r["iops"] <= 2000 * 1.25, r["iops"]
        cls, desc = d.qmp.error("object-del", {"id": "tg0"})
        assert "throttle-group 'tg0' is in use by 1 throttle node" in desc
        names = {n["node-name"]: n["drv"]
                 for n in d.qmp.cmd("query-named-block-nodes")}
        assert names["thr1"] == "throttle"


@pytest.mark.parametrize("args,option,error", [
    (["--object", "throttle-group,id=tg,x-iops-total=10,x-iops-read=5"],
     "--object", "Parameters 'x-iops-total' and 'x-iops-read' cannot be "
     "used at the same time"),
    (["--object", "throttle-group,id=tg,x-bps-total=100,x-bps-total-max=50"],
     "--object", "Parameter 'x-bps-total-max' (50) cannot be lower than "
     "'x-bps-total' (100)"),
    (["--object", "throttle-group,id=tg,x-iops-write-max-length=3"],
     "--object", "Parameter 'x-iops-write-max-length' needs "
     "'x-iops-write-max'"),
    (["--object", "throttle-group,id=tg,limits.iops-read=-1"],
     "--object", "Parameter 'limits.iops-read' expects a value from 0"),
    (["--object", "throttle-group,id=tg,x-iops-totl=5"],
     "--object", "Invalid parameter 'x-iops-totl'"),
    (["--object", "iothread,id=tg", "--object", "throttle-group,id=tg"],
     "--object", "id 'tg' is already the id of an iothread"),
    (["--blockdev", "driver=null-co,node-name=n",
      "--blockdev", "driver=throttle,node-name=t,file=n"],
     "--blockdev", "Parameter 'throttle-group' is missing"),
    (["--blockdev", "driver=null-co,node-name=n",
      "--blockdev", "driver=throttle,node-name=t,throttle-group=no,file=n"],
     "--blockdev", "no throttle-group 'no'"),
])
def test_bad_options_one_line(spindle, args, option, error):
    check_one_line_error(run_spindle(spindle, args), option, error)


def test_object_help(spindle):
    out = run_spindle(spindle, ["--object", "help"]).stdout
    assert "throttle-group" in out.splitlines()[-1]
    out = run_spindle(spindle, ["--object", "throttle-group,help"]).stdout
    for name in ("x-iops-total", "x-bps-write-max-length", "x-iops-size",
                 "limits."):
        assert name in out

"""spindle-cpuprobe (tools/bench/cpuprobe.c): a cache line's and an eventfd
wake-up's round trip between two CPUs, poll-frontier's machine-phase probe.

Between two CPUs the JSON object has every statistic, each positive and
each fastest figure at most its median; the text line says the same; the
counts asked for are the counts made (round trips rounded down to whole
batches of 40).  A bad option exits 2 with one line
that names it and prints nothing on stdout.  No figure is checked against
a bound: the machine's phase decides them, which is the tool's point.
"""

import json
import subprocess

import pytest

from conftest import bad_options, check_bad_option, two_cpus

PROBE = "tools/bench/spindle-cpuprobe"


def run(program, *args):
    return subprocess.run([str(program), *args], capture_output=True, text=True,
                          timeout=60)


def test_json_between_two_cpus(binary):
    cpus = two_cpus("spindle-cpuprobe crosses between two CPUs")
    proc = run(binary(PROBE), f"--cpus={cpus}", "--json", "--round-trips=4010",
               "--wakeups=50")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    a, b = (int(c) for c in cpus.split(","))
    assert (out["cpu_a"], out["cpu_b"]) == (a, b)
    assert (out["round_trips"], out["wakeups"]) == (4000, 50)    # 100 per batch
    assert 0 < out["cacheline_rt_min_ns"] <= out["cacheline_rt_median_ns"]
    assert 0 < out["wakeup_rt_p10_us"] <= out["wakeup_rt_median_us"]
    # A wake-up through the scheduler costs more than a cache line's trip.
    assert out["wakeup_rt_p10_us"] * 1000 > out["cacheline_rt_min_ns"]


def test_text_line(binary):
    cpus = two_cpus("spindle-cpuprobe crosses between two CPUs")
    proc = run(binary(PROBE), "--cpus", cpus)
    assert proc.returncode == 0, proc.stderr
    a, b = cpus.split(",")
    line = proc.stdout.strip()
    assert line.startswith(f"CPU {a} <-> {b}: cache line round trip (ns): fastest batch ")
    assert "; eventfd wake-up round trip (us): p10 " in line
    assert len(proc.stdout.splitlines()) == 1


@pytest.mark.parametrize("args, option", bad_options(
    "--cpus 0", "--cpus 0,0", "--cpus 0,x", "--cpus 0,1,2", "--cpus 0,99999",
    "--round-trips 39", "--round-trips 20000000", "--round-trips x",
    "--wakeups 0"))
def test_bad_option(binary, args, option):
    extra = [] if args[0] == "--cpus" else [
        "--cpus=" + two_cpus("the other options are checked after --cpus")]
    proc = run(binary(PROBE), *args, *extra)
    check_bad_option(proc, option)


def test_cpus_required_and_no_arguments(binary):
    check_bad_option(run(binary(PROBE)), "--cpus")
    proc = run(binary(PROBE), "--cpus=0,1", "extra")
    assert proc.returncode == 2 and "unexpected argument 'extra'" in proc.stderr

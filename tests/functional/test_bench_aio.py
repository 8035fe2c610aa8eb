"""Functional tests of the event-loop micro-benchmark (tests/bench/bench-aio).

These check behaviour, not speed: the report's shape, that the polled mode
really polls and the eventfd mode really kicks, and that bad options are
rejected with a message naming the option.  Performance goals are
checked by running the benchmark (docs/performance.md), not here.
"""

import functools
import json
import subprocess

import pytest

from conftest import bad_options, check_bad_option, two_cpus

MODES = ("eventfd", "polled", "cacheline")
REQUIRED_FIELDS = ("p50_ns", "p99_ns", "p999_ns", "cpu_ns_per_msg")
SMALL_RUN = ("--count", "3000", "--warmup", "200")
TIMEOUT_S = 60
BENCH_PATH = "tests/bench/bench-aio"


@pytest.fixture
def bench_aio(binary):
    """Path of the bench-aio binary; skips if it has not been built."""
    return binary(BENCH_PATH)


@pytest.fixture
def cpus():
    """Two CPUs this process may use, as the --cpus value."""
    return two_cpus("bench-aio needs two CPUs (both threads spin)")


def run_bench(binary, *args):
    return subprocess.run([str(binary), *args], capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False)


@functools.lru_cache(maxsize=None)
def run_bench_json(binary, *args):
    """Run with --json, check it succeeded and return the parsed report."""
    proc = run_bench(binary, *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def mode_keys(report):
    return {key for key in report if key != "config"}


@pytest.fixture
def all_modes_report(bench_aio, cpus):
    # Cached: one small run serves every test that inspects all modes.
    return run_bench_json(bench_aio, *SMALL_RUN, "--cpus", cpus)


def test_all_modes_report_required_fields(all_modes_report):
    assert mode_keys(all_modes_report) == set(MODES)
    for mode in MODES:
        stats = all_modes_report[mode]
        for field in REQUIRED_FIELDS:
            value = stats.get(field)
            assert isinstance(value, int) and not isinstance(value, bool), \
                f"{mode}.{field} = {value!r} is not an integer"
            assert value > 0, f"{mode}.{field} = {value}"
        assert stats["p50_ns"] <= stats["p99_ns"] <= stats["p999_ns"], stats


def test_config_echoes_options(all_modes_report, cpus):
    config = all_modes_report["config"]
    assert config["count"] == 3000
    assert config["warmup"] == 200
    assert config["cpus"] == [int(c) for c in cpus.split(",")]


def test_polled_mode_finds_work_by_polling(all_modes_report):
    assert all_modes_report["polled"]["poll_hits"] > 0


def test_eventfd_mode_kicks_every_message(all_modes_report):
    assert all_modes_report["eventfd"]["kicks_per_msg"] >= 0.99
    # With polling off every message is an fd event, never a poll hit.
    assert all_modes_report["eventfd"]["poll_hits"] == 0


def test_cacheline_mode_never_kicks(all_modes_report):
    assert all_modes_report["cacheline"]["kicks_per_msg"] == 0


def test_single_mode_reports_only_that_mode(bench_aio, cpus):
    report = run_bench_json(bench_aio, *SMALL_RUN, "--cpus", cpus,
                            "--mode", "polled")
    assert mode_keys(report) == {"polled"}
    for field in REQUIRED_FIELDS:
        assert report["polled"][field] > 0


def test_table_output_names_every_mode(bench_aio, cpus):
    proc = run_bench(bench_aio, "--count", "500", "--warmup", "50",
                     "--cpus", cpus)
    assert proc.returncode == 0, proc.stderr
    for word in (*MODES, "p50", "p99.9", "cpu/msg", "kicks/msg",
                 "eventfd/polled", "polled/cacheline"):
        assert word in proc.stdout


@pytest.mark.parametrize("args, option", bad_options(
    "--count abc", "--count -5", "--count 0", "--warmup -1", "--repeat 0",
    "--poll-max-ns x", "--poll-max-ns 0", "--gap-ns -1", "--cpus 0,99999",
    "--cpus 0", "--cpus 1,1", "--mode bogus", "--mode "))
def test_bad_option_is_rejected_by_name(bench_aio, args, option):
    proc = run_bench(bench_aio, *args)
    check_bad_option(proc, option)

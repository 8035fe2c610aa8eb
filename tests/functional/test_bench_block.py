"""Functional tests of the block-layer micro-benchmark (tests/bench/bench-block).

These check behaviour, not speed: the report's shape and its internal
consistency (every cell present, percentiles ordered, engine counters that
add up, polling really off with poll-max-ns=0), that engines the machine
lacks are skipped with a reason, that the temporary file is removed, and
that bad options are rejected with a message naming the option.  Whether
polling lowers latency is measured by running the benchmark
(docs/performance.md), not asserted here.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import bad_options, check_bad_option, two_cpus

BENCH_PATH = "tests/bench/bench-block"
ENGINES = ("null-co", "native", "io_uring", "threads")
FILE_ENGINES = ("native", "io_uring", "threads")
POLL_MODES = ("off", "adaptive")
QDS = (1, 32)
COUNT = 500
SMALL_RUN = ("--count", str(COUNT), "--warmup", "50", "--file-size", "8M")
TIMEOUT_S = 120

INT_FIELDS = ("qd", "poll_max_ns", "p50_ns", "p99_ns", "p999_ns", "mean_ns",
              "cpu_ns_per_io", "all_cpu_ns_per_io", "completions",
              "completions_polled", "submissions", "poll_hits", "poll_misses",
              "wakeups", "poll_ns")
NUMBER_FIELDS = ("iops", "kicks_per_io", "sleeps_per_io", "polled_fraction")


@pytest.fixture(scope="module")
def bench_block(binary):
    """Path of the bench-block binary; skips if it has not been built."""
    return binary(BENCH_PATH)


@pytest.fixture(scope="module")
def cpus():
    """Two CPUs this process may use, as the --cpus value."""
    return two_cpus("bench-block needs two CPUs (both threads spin)")


def run_bench(binary, *args, tmpdir=None):
    env = dict(os.environ)
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return subprocess.run([str(binary), *args], capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False, env=env)


def run_bench_json(binary, *args, tmpdir=None):
    """Run with --json, check it succeeded and return the parsed report."""
    proc = run_bench(binary, *args, "--json", tmpdir=tmpdir)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def leftover_files(directory):
    return sorted(p.name for p in Path(directory).glob("spindle-bench-*"))


@pytest.fixture(scope="module")
def full_run(bench_block, cpus, tmp_path_factory):
    """One tiny run of every engine; returns (report, its TMPDIR)."""
    tmpdir = tmp_path_factory.mktemp("bench-block")
    report = run_bench_json(bench_block, *SMALL_RUN, "--cpus", cpus,
                            tmpdir=tmpdir)
    return report, tmpdir


@pytest.fixture(scope="module")
def report(full_run):
    return full_run[0]


def skipped_engines(report):
    return {s["engine"]: s["reason"] for s in report["config"]["skipped"]}


def results_of(report, engine):
    return [r for r in report["results"] if r["engine"] == engine]


def test_every_engine_ran_or_was_skipped_with_a_reason(report):
    ran = {r["engine"] for r in report["results"]}
    skipped = skipped_engines(report)
    assert ran | set(skipped) == set(ENGINES)
    assert not ran & set(skipped)
    assert "null-co" in ran, "null-co needs nothing from the host"
    for engine, reason in skipped.items():
        assert isinstance(reason, str) and reason, engine


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_reports_every_qd_and_poll_mode(report, engine):
    skipped = skipped_engines(report)
    if engine in skipped:
        pytest.skip(f"{engine} is not available here: {skipped[engine]}")
    cells = {(r["qd"], r["poll"]) for r in results_of(report, engine)}
    assert cells == {(qd, poll) for qd in QDS for poll in POLL_MODES}
    assert len(results_of(report, engine)) == len(cells)


def test_every_result_has_consistent_fields(report):
    assert report["results"], "no results"
    for r in report["results"]:
        where = f'{r.get("engine")} qd={r.get("qd")} poll={r.get("poll")}'
        assert r["engine"] in ENGINES, where
        assert r["poll"] in POLL_MODES, where
        assert isinstance(r["direct"], bool), where
        for field in INT_FIELDS:
            value = r.get(field)
            assert isinstance(value, int) and not isinstance(value, bool), \
                f"{where}: {field} = {value!r} is not an integer"
        for field in NUMBER_FIELDS:
            value = r.get(field)
            assert isinstance(value, (int, float)) and \
                not isinstance(value, bool), \
                f"{where}: {field} = {value!r} is not a number"
        assert 0 < r["p50_ns"] <= r["p99_ns"] <= r["p999_ns"], where
        assert r["min_ns"] <= r["p50_ns"] and r["p999_ns"] <= r["max_ns"], \
            where
        assert r["iops"] > 0, where
        assert r["cpu_ns_per_io"] > 0, where
        assert 0 <= r["completions_polled"] <= r["completions"], where
        assert 0 <= r["polled_fraction"] <= 1, where
        assert r["kicks_per_io"] >= 0, where
        assert r["count"] == COUNT, where


def test_file_engines_count_every_completion(report):
    for r in report["results"]:
        if r["engine"] in FILE_ENGINES:
            assert r["engine_stats"] is True
            # The ring is idle when the counters are read, so the recorded
            # requests are exactly the engine's completions in between.
            assert r["completions"] == COUNT, r
            assert r["submissions"] >= 1, r
        else:
            assert r["engine_stats"] is False
            assert r["completions_polled"] == 0, r


def test_poll_off_never_polls(report):
    for r in report["results"]:
        if r["poll"] != "off":
            continue
        assert r["poll_max_ns"] == 0, r
        assert r["poll_hits"] == 0, r
        assert r["completions_polled"] == 0, r
        if r["qd"] == 1:
            # No poll window, so notifications are never suppressed: every
            # request is a kick.
            assert r["kicks_per_io"] == 1.0, r


def test_adaptive_mode_uses_the_configured_window(report):
    for r in report["results"]:
        if r["poll"] == "adaptive":
            assert r["poll_max_ns"] == report["config"]["poll_max_ns"] > 0


def test_file_engines_share_the_direct_setting(report):
    file_info = report["config"]["file"]
    for r in report["results"]:
        if r["engine"] in FILE_ENGINES:
            assert r["direct"] == file_info["direct"], r
        else:
            assert r["direct"] is False, r
    if file_info is not None and not file_info["direct"]:
        assert file_info["note"], "O_DIRECT off without a reason"


def test_config_echoes_options(report, cpus):
    config = report["config"]
    assert config["count"] == COUNT
    assert config["warmup"] == 50
    assert config["file_size"] == 8 << 20
    assert config["block_size"] == 4096
    assert config["qd"] == list(QDS)
    assert config["engines"] == list(ENGINES)
    assert config["cpus"] == [int(c) for c in cpus.split(",")]


def test_test_file_is_removed(full_run):
    report, tmpdir = full_run
    if report["config"]["file"] is None:
        pytest.skip("no file engine ran")
    assert leftover_files(tmpdir) == []
    if report["config"]["file"]["dir"] != str(tmpdir):
        assert leftover_files(report["config"]["file"]["dir"]) == []


def test_single_engine_and_qd(bench_block, cpus, tmp_path):
    report = run_bench_json(bench_block, *SMALL_RUN, "--cpus", cpus,
                            "--engines", "null-co", "--qd", "4",
                            "--repeat", "3", tmpdir=tmp_path)
    assert [(r["engine"], r["qd"], r["poll"]) for r in report["results"]] == \
        [("null-co", 4, "off"), ("null-co", 4, "adaptive")]
    assert report["config"]["repeat"] == 3
    # null-co alone needs no test file.
    assert report["config"]["file"] is None
    assert leftover_files(tmp_path) == []


def test_null_latency_is_never_early(bench_block, cpus, tmp_path):
    report = run_bench_json(bench_block, "--count", "200", "--warmup", "20",
                            "--cpus", cpus, "--engines", "null-co",
                            "--qd", "1", "--null-latency-ns", "20000",
                            tmpdir=tmp_path)
    assert report["config"]["null_latency_ns"] == 20000
    for r in report["results"]:
        assert r["min_ns"] >= 20000, r


def test_direct_off_uses_the_page_cache(bench_block, cpus, tmp_path):
    report = run_bench_json(bench_block, *SMALL_RUN, "--cpus", cpus,
                            "--engines", "threads", "--qd", "1",
                            "--direct", "off", tmpdir=tmp_path)
    skipped = skipped_engines(report)
    if "threads" in skipped:
        pytest.skip(f"threads is not available here: {skipped['threads']}")
    assert report["config"]["file"]["direct"] is False
    assert report["config"]["file"]["note"]
    assert all(r["direct"] is False for r in report["results"])
    assert leftover_files(tmp_path) == []


def test_table_output(bench_block, cpus, tmp_path):
    proc = run_bench(bench_block, "--count", "300", "--warmup", "30",
                     "--file-size", "8M", "--cpus", cpus, tmpdir=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for word in ("machine:", "p50(ns)", "p99(ns)", "iops", "cpu/io(ns)",
                 "kicks/io", "polled", "poll-hits/io", "null-co",
                 "QD1 p50 ratio"):
        assert word in proc.stdout, word
    assert leftover_files(tmp_path) == []


@pytest.mark.parametrize("args, option", bad_options(
    "--count abc", "--count 0", "--warmup -1", "--repeat 0", "--cpus 0,99999",
    "--cpus 0", "--cpus 1,1", "--engines bogus", "--engines ", "--qd 0",
    "--qd 257", "--qd 1,1", "--qd x", "--poll-max-ns 0",
    "--null-latency-ns -1", "--file-size 1000", "--file-size lots",
    "--file-size 65G", "--direct maybe"))
def test_bad_option_is_rejected_by_name(bench_block, args, option):
    proc = run_bench(bench_block, *args)
    check_bad_option(proc, option)

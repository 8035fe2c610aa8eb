"""Machine phases in scripts/poll-frontier (scripts/pollfrontier/phase.py):
which runs the machine changed under, which are repeated, which are kept,
on made-up probe levels.

A record here is what main.py's measured_run leaves: a "job" (repeat,
position, config) and the probes before and after the run; only the
cache-line level matters to the rule.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from pollfrontier import phase  # noqa: E402

TOL = phase.DEFAULT_TOLERANCE
FAST, SLOW = 45.0, 350.0          # the development VM's two phases (ns)


def rec(job, before, after, **extra):
    def p(v):
        return None if v is None else {phase.LEVEL_KEY: v}
    return dict({"job": job, "probe": {"before": p(before), "after": p(after)}}, **extra)


JOBS = [(0, 0, "W0"), (0, 1, "W8"), (1, 0, "W8"), (1, 1, "W0")]


def test_same_within_tolerance_only():
    assert phase.same(45, 60, TOL) and phase.same(60, 45, TOL)
    assert phase.same(45, 90, TOL)
    assert not phase.same(45, 91, TOL)
    assert not phase.same(FAST, SLOW, TOL)
    assert not phase.same(None, 45, TOL) and not phase.same(45, None, TOL)


def test_level_ignores_failed_and_missing_probes():
    assert phase.level({phase.LEVEL_KEY: 47.5}) == 47.5
    assert phase.level(None) is None
    assert phase.level({"error": "exit status 1"}) is None
    assert phase.level({phase.LEVEL_KEY: 0}) is None


def test_one_phase_repeats_nothing():
    runs = [rec(j, FAST, FAST * 1.3) for j in JOBS]
    assert phase.missing(runs, JOBS, FAST, TOL) == []
    assert phase.select(runs, JOBS, FAST * 1.1, TOL) == []
    assert all(not r["superseded"] and r["phase"] == "match" for r in runs)
    assert phase.describe(FAST, 0, [], 0) is None


def test_change_in_the_middle_repeats_the_runs_before_it():
    # The machine went slow during the second run and stayed slow.
    runs = [rec(JOBS[0], FAST, FAST), rec(JOBS[1], FAST, SLOW),
            rec(JOBS[2], SLOW, SLOW), rec(JOBS[3], SLOW, SLOW)]
    todo = phase.missing(runs, JOBS, SLOW, TOL)
    assert todo == JOBS[:2]
    # They ran again in the slow phase: those runs are kept, the first ones not.
    again = [rec(j, SLOW, SLOW, redo=1) for j in todo]
    runs += again
    assert phase.missing(runs, JOBS, SLOW, TOL) == []
    off = phase.select(runs, JOBS, SLOW, TOL)
    assert off == []
    assert [r["superseded"] for r in runs] == [True, True, False, False, False, False]
    assert all(r["phase"] == "match" for r in runs if not r["superseded"])
    line = phase.describe(SLOW, len(todo), off, 1)
    assert "2 runs repeated in 1 pass" in line and "350 ns" in line


def test_the_current_phase_decides_not_the_majority():
    # Three of four runs were fast, but the machine is slow now: the fast runs
    # are the ones that cannot be matched by running again now.
    runs = [rec(JOBS[0], FAST, FAST), rec(JOBS[1], FAST, FAST),
            rec(JOBS[2], FAST, FAST), rec(JOBS[3], SLOW, SLOW)]
    assert phase.missing(runs, JOBS, SLOW, TOL) == JOBS[:3]
    assert phase.missing(runs, JOBS, FAST, TOL) == JOBS[3:]


def test_back_to_the_first_phase_keeps_the_first_runs():
    # Fast, then slow for the last two runs and their repeats of an earlier
    # pass, then fast again: the first runs match again and are kept.
    runs = [rec(JOBS[0], FAST, FAST), rec(JOBS[1], FAST, FAST),
            rec(JOBS[2], SLOW, SLOW), rec(JOBS[3], SLOW, SLOW),
            rec(JOBS[0], SLOW, FAST, redo=1)]
    assert phase.missing(runs, JOBS, FAST, TOL) == JOBS[2:]
    runs += [rec(JOBS[2], FAST, FAST, redo=2), rec(JOBS[3], FAST, FAST, redo=2)]
    assert phase.select(runs, JOBS, FAST, TOL) == []
    kept = [r for r in runs if not r["superseded"]]
    assert [(r["job"], r.get("redo", 0)) for r in kept] == \
        [(JOBS[0], 0), (JOBS[1], 0), (JOBS[2], 2), (JOBS[3], 2)]


def test_out_of_passes_keeps_the_best_there_is_and_says_so():
    # JOBS[0] never matched the final level: its latest steady run is kept
    # over a later run that straddled a change; JOBS[1] only straddled.
    runs = [rec(JOBS[0], FAST, FAST), rec(JOBS[0], FAST, SLOW, redo=1),
            rec(JOBS[1], SLOW, FAST), rec(JOBS[2], SLOW, SLOW),
            rec(JOBS[3], SLOW, SLOW)]
    off = phase.select(runs, JOBS, SLOW, TOL)
    assert runs[0]["superseded"] is False and runs[0]["phase"] == "other"
    assert runs[1]["superseded"] is True
    assert runs[2]["superseded"] is False and runs[2]["phase"] == "changed"
    assert off == [runs[0], runs[2]]
    line = phase.describe(SLOW, 1, off, 1)
    assert "2 kept from another phase (changed, other)" in line


def test_no_probe_keeps_the_latest_run():
    runs = [rec(JOBS[0], None, None), rec(JOBS[0], None, None, redo=1)]
    off = phase.select(runs, JOBS[:1], None, TOL)
    assert [r["superseded"] for r in runs] == [True, False]
    assert runs[1]["phase"] == "unknown" and off == [runs[1]]
    line = phase.describe(None, 0, off, 0)
    assert "unknown (the probe failed)" in line and "1 kept from another phase" in line


@pytest.mark.parametrize("before,after,want", [
    (FAST, FAST, True), (FAST, SLOW, False), (None, FAST, False)])
def test_steady(before, after, want):
    assert phase.steady(rec(JOBS[0], before, after), TOL) is want


def test_probe_reports_a_failing_program(tmp_path):
    bad = tmp_path / "probe"
    bad.write_text("#!/bin/sh\necho 'no such CPU' >&2\nexit 2\n")
    bad.chmod(0o755)
    out = phase.probe(bad, 1, 0)
    assert "exit status 2" in out["error"] and "no such CPU" in out["error"]
    bad.write_text("#!/bin/sh\necho '{\"x\": 1}'\n")
    assert "without a positive " + phase.LEVEL_KEY in phase.probe(bad, 1, 0)["error"]
    bad.write_text("#!/bin/sh\necho '{\"%s\": 0}'\n" % phase.LEVEL_KEY)
    assert "without a positive " in phase.probe(bad, 1, 0)["error"]
    assert "error" in phase.probe(tmp_path / "missing", 1, 0)


def test_a_run_across_the_level_does_not_match():
    # Both probes within 2x of the level, but 3.6x apart: the machine changed.
    r = rec(JOBS[0], SLOW / 1.9, SLOW * 1.9)
    assert not phase.matches(r, SLOW, TOL)
    assert phase.missing([r], JOBS[:1], SLOW, TOL) == JOBS[:1]


def test_a_failed_run_does_not_replace_one_that_succeeded():
    runs = [rec(JOBS[0], SLOW, SLOW, ok=True),
            rec(JOBS[0], SLOW, SLOW, ok=False, redo=1)]
    assert phase.select(runs, JOBS[:1], SLOW, TOL) == []
    assert [r["superseded"] for r in runs] == [False, True]
    # Among runs of the other phase too.
    runs = [rec(JOBS[0], FAST, FAST, ok=True),
            rec(JOBS[0], FAST, FAST, ok=False, redo=1)]
    phase.select(runs, JOBS[:1], SLOW, TOL)
    assert [r["superseded"] for r in runs] == [False, True]

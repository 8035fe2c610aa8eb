"""The load step analysis of scripts/poll-frontier
(scripts/pollfrontier/loadstep.py), on made-up samples.

A run of four phases, 1 s each from t = 10 s: QD1 at 100k IOPS, idle, an
open loop at 10k IOPS, QD1 again.  Samples come every 10 ms; the handler's
window changes are placed where each case needs them.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from pollfrontier import loadstep as ls  # noqa: E402

S = 1_000_000_000
MS = 1_000_000
T0 = 10 * S


def phases(iops=(100_000, 0, 10_000, 100_000)):
    loads = ["qd1", "idle", "rate=10000", "qd1"]
    return [{"load": load, "start_ns": T0 + i * S, "end_ns": T0 + (i + 1) * S,
             "ios": int(rate), "iops": float(rate), "lat_ns": {"p50": 500, "p99": 900}}
            for i, (load, rate) in enumerate(zip(loads, iops))]


RATES = (100_000, 0, 10_000, 100_000)      # events per second, per phase


def events(t, rates=RATES):
    """The handler's events at t: one per I/O, at each phase's rate."""
    n = 0.0
    for i, rate in enumerate(rates):
        lo = T0 + i * S
        n += max(0, min(t, lo + S) - lo) * rate / S
    return round(n)


def samples(changes, turns_per_ms=100, start=T0 - 50 * MS, end=T0 + 4 * S,
            period=10 * MS, handler_from=T0 - 20 * MS, with_events=True):
    """Samples every `period`; `changes` is a sorted list of (t_ns, window)
    at which the handler's window changed."""
    out = []
    t = start
    while t <= end:
        done = [c for c in changes if c[0] <= t]
        present = t >= handler_from
        out.append({
            "t_ns": t, "t_sent_ns": t - 50_000,
            "turns": (t - start) // MS * turns_per_ms,
            "events": events(t) if present else None,
            "window_ns": (done[-1][1] if done else 0) if present else None,
            "window_changes": len(done) if present else None,
            "last_change_ns": (done[-1][0] if done else 0) if present else None,
            "last_change_event": ((events(done[-1][0]) if done else 0)
                                  if present and with_events else None),
        })
        t += period
    return out


def loaded_rows(result):
    return [r for r in result["phases"] if r["loaded"]]


def test_settles_quickly_everywhere():
    # Each loaded phase: one change 0.5 ms after its start (50 I/Os at
    # 100k IOPS, 5 at 10k); nothing afterwards.
    changes = [(T0 + MS // 2, 2048), (T0 + 2 * S + MS // 2, 0),
               (T0 + 3 * S + MS // 2, 2048)]
    r = ls.analyze(phases(), samples(changes))
    assert r["status"] == "pass", r["detail"]
    rows = loaded_rows(r)
    assert [round(x["settle_ios"]) for x in rows] == [50, 5, 50]
    assert [x["window_ns"] for x in rows] == [2048, 0, 2048]
    # No change in the second halves.
    assert [x["changes_per_1k_turns"] for x in rows] == [0, 0, 0]
    assert all(x["status"] == "pass" for x in rows)
    idle = r["phases"][1]
    assert not idle["loaded"] and idle["status"] is None
    assert idle["window_ns"] == 2048       # as the first phase left it


def test_late_change_is_a_miss_and_named():
    # Phase 1 changes again 2 ms in: 200 I/Os at 100k IOPS.
    changes = [(T0 + MS // 2, 2048), (T0 + 2 * MS, 4096)]
    r = ls.analyze(phases(), samples(changes))
    assert r["status"] == "MISS"
    assert "1 qd1" in r["detail"] and "3 rate" not in r["detail"]
    first = loaded_rows(r)[0]
    assert first["status"] == "MISS"
    assert first["settle_ios"] == pytest.approx(200)
    assert first["window_ns"] == 4096


def test_boundary_exactly_100_ios_passes():
    # 1 ms at 100k IOPS = 100 I/Os: "within 100".
    changes = [(T0 + MS, 2048)]
    r = ls.analyze(phases(), samples(changes))
    assert loaded_rows(r)[0]["settle_ios"] == pytest.approx(100)
    assert loaded_rows(r)[0]["status"] == "pass"
    changes = [(T0 + MS + 10_000, 2048)]           # 101 I/Os
    assert loaded_rows(ls.analyze(phases(), samples(changes)))[0]["status"] == "MISS"


def test_settle_counts_events_not_the_phase_average_rate():
    # Phase 4 starts slowly: its first 20 events take 2 ms (blocked
    # wake-ups), then 100k/s.  The daemon's event count at the change says
    # 20 events; the phase's average rate would have said 200.
    rates = list(RATES)

    def ev(t):
        n = events(min(t, T0 + 3 * S))
        if t > T0 + 3 * S:
            dt = t - (T0 + 3 * S)
            n += dt * 20 // (2 * MS) if dt <= 2 * MS else 20 + (dt - 2 * MS) * rates[3] // S
        return n
    change = T0 + 3 * S + 2 * MS
    smp = samples([(T0 + MS // 2, 2048), (T0 + 2 * S + MS // 2, 0), (change, 2048)])
    for s in smp:
        s["events"] = ev(s["t_ns"])
        if s["last_change_ns"] == change:
            s["last_change_event"] = ev(change)
    last = loaded_rows(ls.analyze(phases(), smp))[2]
    assert last["settle_ios"] == pytest.approx(20, abs=1)
    assert last["status"] == "pass"
    # Without the daemon's count: the rate estimate (a MISS here).
    for s in smp:
        s["last_change_event"] = None
    last = loaded_rows(ls.analyze(phases(), smp))[2]
    assert last["settle_ios"] == pytest.approx(200)
    assert last["status"] == "MISS"


def test_events_at_interpolates_the_load_before():
    smp = samples([])
    # 25 ms into phase 3 (10k/s; samples at 10 and 20 ms): 250 events after
    # the 100000 of phase 1.
    assert ls.events_at(smp, T0 + 2 * S + 25 * MS) == pytest.approx(100_250)
    # At a phase's start the load before it counts: idle, so none.
    assert ls.events_at(smp, T0 + 2 * S + 5 * MS) == pytest.approx(100_000)
    # A new handler: 0.
    assert ls.events_at(samples([], handler_from=T0 + S), T0) == 0


def test_change_before_the_phase_counts_as_zero():
    # The only change happened in the first phase; phase 3 and 4 did not
    # change at all: settle 0 for them.
    changes = [(T0 + MS // 2, 2048)]
    r = ls.analyze(phases(), samples(changes))
    rows = loaded_rows(r)
    assert rows[1]["settle_ios"] == 0 and rows[2]["settle_ios"] == 0
    assert "no window change" in rows[1]["detail"]
    assert r["status"] == "pass"


def test_only_samples_before_the_phase_end_are_used():
    # A change 5 ms after phase 1 ended (in the idle phase) must not be
    # charged to phase 1.
    changes = [(T0 + MS // 2, 2048), (T0 + S + 5 * MS, 1024)]
    r = ls.analyze(phases(), samples(changes))
    first = loaded_rows(r)[0]
    assert first["settle_ios"] == pytest.approx(50)
    assert first["window_ns"] == 2048
    assert first["status"] == "pass"


def test_a_change_after_the_last_sample_is_not_seen():
    # The estimate's blind spot: a change in the phase's last 3 ms, after
    # the last sample before its end (at 995 ms), does not show.
    changes = [(T0 + MS // 2, 2048), (T0 + S - 3 * MS, 4096)]
    smp = samples(changes, start=T0 - 45 * MS)
    first = loaded_rows(ls.analyze(phases(), smp))[0]
    assert first["status"] == "pass" and first["window_ns"] == 2048


def test_steady_flapping_shows_in_the_change_rate():
    # A window that flips every 10 ms through the whole first phase.
    changes = [(T0 + k * 10 * MS + MS, 1024 if k % 2 else 2048) for k in range(100)]
    r = ls.analyze(phases(), samples(changes))
    first = loaded_rows(r)[0]
    assert first["status"] == "MISS"
    # Second half: 50 changes over 500 ms x 100 turns/ms.
    assert first["changes_per_1k_turns"] == pytest.approx(1.0, rel=0.05)


def test_no_sample_in_a_phase_is_na():
    smp = [s for s in samples([(T0 + MS // 2, 2048)])
           if not (T0 + 2 * S <= s["t_ns"] <= T0 + 3 * S)]
    r = ls.analyze(phases(), smp)
    assert loaded_rows(r)[1]["status"] == "n/a"
    assert r["status"] == "n/a" and "3 rate=10000" in r["detail"]


def test_handler_absent_in_early_samples():
    # Before spindle-bench connects the handler is not listed: those
    # samples are skipped, not read as window 0.
    smp = samples([(T0 + MS // 2, 2048)], handler_from=T0 + 30 * MS)
    r = ls.analyze(phases(), smp)
    assert loaded_rows(r)[0]["window_ns"] == 2048
    assert ls.sample_before(smp, T0 + 20 * MS) is None


def test_sample_from_entry():
    entry = {"id": "iot-0", "spindle-poll": {
        "turns": 1234, "window-ns": 4096,
        "handlers": [{"name": "e1/vq0", "window-ns": 1, "events": 1,
                      "window-changes": 1, "last-change-ns": 1},
                     {"name": "e0/vq0", "window-ns": 2048, "events": 77,
                      "window-changes": 5, "last-change-ns": 999}]}}
    s = ls.sample_from_entry(10, 9, entry, "e0/vq0")
    assert s == {"t_ns": 10, "t_sent_ns": 9, "turns": 1234, "thread_window_ns": 4096,
                 "events": 77, "window_ns": 2048, "window_changes": 5,
                 "last_change_ns": 999, "last_change_event": None}
    s = ls.sample_from_entry(10, 9, entry, "e9/vq0")
    assert s["window_ns"] is None and s["turns"] == 1234

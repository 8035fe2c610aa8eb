"""The load step: does the policy's window settle after the load changes?

One spindle-bench run with --phase (QD1, idle, an open loop at 10k IOPS,
QD1 again) on one connection, while a thread reads query-iothreads every
10 ms.  analyze() is pure (no I/O, tested with made-up samples in
tests/functional/test_poll_frontier_loadstep.py).  Its inputs:

    phases   spindle-bench's JSON "phases": load, start_ns, end_ns, ios,
             iops (CLOCK_MONOTONIC, as time.monotonic_ns())
    samples  in time order, each {"t_ns": when the reply came (monotonic),
             "turns": the IOThread's loop turns, and of the export's queue
             handler "events", "window_ns", "window_changes",
             "last_change_ns", "last_change_event"} (the handler fields
             None while it is not there, before spindle-bench connects)

For each loaded phase (not idle), from the last sample whose reply came
before the phase ended:

    window   the handler's window at the end of the phase;
    settle   the handler's events between the phase's start and its last
             window change inside the phase (0 if the last change came
             before the phase started): last_change_event, the daemon's
             event count at that change, minus the count at the phase's
             start, interpolated from the samples just before it at the
             rate of the load before it (0 for a handler that appears
             with the phase).  For a queue an event is a request (or a
             batch of them).  Samples without last_change_event fall back
             to (last_change_ns - start_ns) x the phase's IOPS, which
             overestimates when the phase starts slowly.  A change in the
             phase's last ~10 ms (after the last sample) is not seen;
    changes  the handler's window changes per 1000 loop turns over the
             second half of the phase (the samples at mid-phase and end).

Verdict: every loaded phase settles within 100 events ("steady within 100
events"): pass, MISS (naming the phases), or n/a when a phase has no
sample inside it.
"""

PASS, MISS, NA = "pass", "MISS", "n/a"
SETTLE_MAX_IOS = 100
IDLE = "idle"


def _has_handler(s):
    return s.get("window_ns") is not None


def sample_before(samples, t_ns):
    """The last sample (with the handler) whose reply came at or before t_ns."""
    best = None
    for s in samples:
        if s["t_ns"] > t_ns:
            break
        if _has_handler(s):
            best = s
    return best


def events_at(samples, t_ns):
    """The handler's event count at t_ns: the last sample at or before it,
    moved on at the rate between the two samples before it (the load that
    ran up to t_ns), but not past the first sample after it.  0 if the
    handler was not there yet (it is new)."""
    before = [s for s in samples if s["t_ns"] <= t_ns and _has_handler(s)]
    if not before:
        return 0.0
    last = before[-1]
    rate = 0.0
    if len(before) >= 2 and last["t_ns"] > before[-2]["t_ns"]:
        rate = ((last["events"] - before[-2]["events"])
                / (last["t_ns"] - before[-2]["t_ns"]))
    est = last["events"] + rate * (t_ns - last["t_ns"])
    after = next((s for s in samples if s["t_ns"] > t_ns and _has_handler(s)), None)
    if after is not None:
        est = min(est, after["events"])
    return est


def analyze_phase(phase, samples, max_settle=SETTLE_MAX_IOS):
    """One phase's row: {"load", "start_ns", "end_ns", "ios", "iops",
    "loaded", "window_ns", "settle_ios", "changes_per_1k_turns", "status",
    "detail"}."""
    start, end = phase["start_ns"], phase["end_ns"]
    row = {"load": phase["load"], "start_ns": start, "end_ns": end,
           "ios": phase.get("ios"), "iops": phase.get("iops"),
           "p50_ns": (phase.get("lat_ns") or {}).get("p50"),
           "loaded": phase["load"] != IDLE, "window_ns": None,
           "settle_ios": None, "last_change_ns": None,
           "changes_per_1k_turns": None, "samples": 0,
           "status": None, "detail": None}
    row["samples"] = sum(1 for s in samples
                         if start <= s["t_ns"] <= end and _has_handler(s))
    last = sample_before(samples, end)
    if last is None or last["t_ns"] < start:
        row["status"] = NA if row["loaded"] else None
        row["detail"] = "no query-iothreads sample inside the phase"
        return row
    row["window_ns"] = last["window_ns"]
    if not row["loaded"]:
        return row
    lc = last.get("last_change_ns") or 0
    row["last_change_ns"] = lc or None
    if lc < start:
        settle = 0.0
    elif last.get("last_change_event") is not None:
        settle = max(0.0, last["last_change_event"] - events_at(samples, start))
    else:
        settle = (lc - start) * (phase.get("iops") or 0) / 1e9
    row["settle_ios"] = settle
    mid = sample_before(samples, start + (end - start) // 2)
    if mid is not None and mid["t_ns"] >= start and last["turns"] > mid["turns"]:
        row["changes_per_1k_turns"] = ((last["window_changes"] - mid["window_changes"])
                                       * 1000 / (last["turns"] - mid["turns"]))
    if settle <= max_settle:
        row["status"] = PASS
        row["detail"] = (f"settled within {settle:.0f} events" if lc >= start
                         else "no window change in the phase")
    else:
        row["status"] = MISS
        row["detail"] = (f"last window change {(lc - start) / 1e6:.1f} ms after the "
                         f"start, {settle:.0f} events in (> {max_settle})")
    return row


def analyze(phases, samples, max_settle=SETTLE_MAX_IOS):
    """{"phases": [rows], "status", "detail"} for the whole run."""
    rows = [analyze_phase(p, samples, max_settle) for p in phases]
    loaded = [(i, r) for i, r in enumerate(rows) if r["loaded"]]
    missed = [f"{i + 1} {r['load']}" for i, r in loaded if r["status"] == MISS]
    unknown = [f"{i + 1} {r['load']}" for i, r in loaded if r["status"] == NA]
    if not loaded:
        status, detail = NA, "no loaded phase"
    elif missed:
        status, detail = MISS, (f"not steady within {max_settle} events in phase "
                                + ", ".join(missed))
    elif unknown:
        status, detail = NA, "no sample inside phase " + ", ".join(unknown)
    else:
        status = PASS
        worst = max(r["settle_ios"] for _, r in loaded)
        detail = (f"every loaded phase steady within {max_settle} events "
                  f"(at most {worst:.0f} events)")
    return {"phases": rows, "status": status, "detail": detail,
            "max_settle_ios": max_settle}


def sample_from_entry(t_ns, t_sent_ns, entry, handler):
    """One sample from an IOThread's query-iothreads entry and the name of
    the handler to follow."""
    poll = entry.get("spindle-poll", {})
    h = next((x for x in poll.get("handlers", []) if x.get("name") == handler), None)
    return {
        "t_ns": t_ns, "t_sent_ns": t_sent_ns, "turns": poll.get("turns"),
        "thread_window_ns": poll.get("window-ns"),
        "events": h.get("events") if h else None,
        "window_ns": h.get("window-ns") if h else None,
        "window_changes": h.get("window-changes") if h else None,
        "last_change_ns": h.get("last-change-ns") if h else None,
        "last_change_event": h.get("last-change-event") if h else None,
    }

"""The verdicts: does a policy sit on the frontier the fixed windows draw?

Pure functions, no I/O, so that they can be tested with made-up numbers
(tests/functional/test_poll_frontier_verdicts.py).  Their input, per cell,
is the median p50 latency and the median daemon CPU per I/O of each
configuration:

    fixed     {W in µs: Point or None}   the fixed windows (W = 0 never polls)
    policies  {name: Point or None}      the adaptive policies

None means the configuration was run but has no result (every repeat
failed); a configuration that was not run is simply not a key.  Either
way a verdict that needs it is "n/a" and names it, unless the numbers
that are there already decide it (a window that dominates P is a MISS
whatever the missing ones would have shown).

The verdicts for a policy P, all thresholds inclusive:

  1 never dominated:     no fixed W <= P's poll-max-ns has both
                         p50 <= 0.9 x P.p50 and CPU/IO <= 0.9 x P.cpu.
  2 no useless spinning: only if no fixed W has p50 <= 0.9 x W0.p50
                         (polling does not pay in this cell); then
                         P.cpu <= 1.1 x W0.cpu.
  3 latency where cheap: S = {fixed W > 0 with p50 <= 0.5 x W0.p50 and
                         CPU/IO <= 2 x W0.cpu}; only if S is not empty;
                         then P.p50 <= 1.2 x min over S of p50.
  4 beats QEMU's rules:  neither qemu-classic nor qemu-weighted has both
                         p50 and CPU/IO at most 0.9 x P's.

Each is {"id", "name", "status": "pass" | "MISS" | "n/a", "by": [config
names that caused a MISS], "detail": one line of text}.
"""

from dataclasses import dataclass

from benchcompare.report import sig3

PASS, MISS, NA = "pass", "MISS", "n/a"

DOMINATE = 0.9          # verdicts 1 and 4: both at least 10% lower
POLL_PAYS = 0.9         # verdict 2: a window that cuts p50 by 10% or more
SPIN_SLACK = 1.1        # verdict 2: CPU/IO at most 10% above W0's
CHEAP_LATENCY = 0.5     # verdict 3: p50 at most half of W0's ...
CHEAP_CPU = 2.0         # ... for at most twice its CPU/IO
LATENCY_SLACK = 1.2     # verdict 3: within 20% of the best cheap window

QEMU_POLICIES = ("qemu-classic", "qemu-weighted")

NAMES = {1: "never dominated", 2: "no useless spinning", 3: "latency where cheap",
         4: "beats QEMU's rules"}

# Relative tolerance of the comparisons, so that "exactly 10% lower"
# counts as 10% lower despite floating point.
_EPS = 1e-9


@dataclass(frozen=True)
class Point:
    """A configuration's medians in one cell: p50 latency and CPU per I/O."""
    p50: float
    cpu: float


def window_name(w):
    """8 -> "W8", 0.5 -> "W0.5" (the config names of poll-frontier)."""
    return f"W{w:g}"


def _le(a, b):
    """a <= b, with a relative tolerance."""
    return a <= b + abs(b) * _EPS



def _verdict(vid, status, detail, by=()):
    return {"id": vid, "name": NAMES[vid], "status": status, "by": list(by),
            "detail": detail}


def _missing_text(names, absent=()):
    parts = []
    if names:
        parts.append("no result for " + ", ".join(names))
    if absent:
        parts.append("not measured: " + ", ".join(absent))
    return "; ".join(parts)


def dominates(q, p):
    """True if q has both p50 and CPU/IO at most 0.9 x p's."""
    return _le(q.p50, DOMINATE * p.p50) and _le(q.cpu, DOMINATE * p.cpu)


def never_dominated(fixed, p, max_ns, pname="P"):
    """Verdict 1."""
    if p is None:
        return _verdict(1, NA, f"no result for {pname}")
    relevant = sorted(w for w in fixed if w * 1000 <= max_ns)
    if not relevant:
        return _verdict(1, NA, f"no fixed window <= poll-max-ns {max_ns} ns was measured")
    by = [w for w in relevant if fixed[w] is not None and dominates(fixed[w], p)]
    if by:
        w = by[0]
        return _verdict(1, MISS, (
            f"dominated by {', '.join(window_name(x) for x in by)}: "
            f"{window_name(w)} p50 {sig3(fixed[w].p50)} <= 0.9 x {sig3(p.p50)} us and "
            f"CPU/IO {sig3(fixed[w].cpu)} <= 0.9 x {sig3(p.cpu)} us"),
            [window_name(x) for x in by])
    missing = [window_name(w) for w in relevant if fixed[w] is None]
    if missing:
        return _verdict(1, NA, _missing_text(missing))
    return _verdict(1, PASS, f"no fixed window up to {window_name(relevant[-1])} "
                             "is 10% better in both p50 and CPU/IO")


def _against_w0(n, fixed):
    """What verdicts 2 and 3 (n) compare with W0: (W0's Point, the positive
    windows, None), or (None, None, verdict n as n/a, saying why)."""
    if 0 not in fixed:
        why = _missing_text((), ["W0 (fixed window 0, no polling)"])
    elif fixed[0] is None:
        why = _missing_text(["W0"])
    else:
        return fixed[0], sorted(w for w in fixed if w > 0), None
    return None, None, _verdict(n, NA, why)


def no_useless_spinning(fixed, p, pname="P"):
    """Verdict 2."""
    w0, positive, not_applicable = _against_w0(2, fixed)
    if not_applicable:
        return not_applicable
    pays = [w for w in positive if fixed[w] is not None
            and _le(fixed[w].p50, POLL_PAYS * w0.p50)]
    if pays:
        best = min(pays, key=lambda w: fixed[w].p50)
        return _verdict(2, NA, (
            f"does not apply: polling pays here ({window_name(best)} p50 "
            f"{sig3(fixed[best].p50)} <= 0.9 x W0's {sig3(w0.p50)} us)"))
    missing = [window_name(w) for w in positive if fixed[w] is None]
    if missing:
        return _verdict(2, NA, _missing_text(missing))
    if p is None:
        return _verdict(2, NA, f"no result for {pname}")
    if _le(p.cpu, SPIN_SLACK * w0.cpu):
        return _verdict(2, PASS, (f"polling does not pay; CPU/IO {sig3(p.cpu)} <= 1.1 x "
                                  f"W0's {sig3(w0.cpu)} us"))
    return _verdict(2, MISS, (f"polling does not pay, yet CPU/IO {sig3(p.cpu)} > 1.1 x "
                              f"W0's {sig3(w0.cpu)} us"), ["W0"])


def latency_where_cheap(fixed, p, pname="P"):
    """Verdict 3."""
    w0, positive, not_applicable = _against_w0(3, fixed)
    if not_applicable:
        return not_applicable
    cheap = [w for w in positive if fixed[w] is not None
             and _le(fixed[w].p50, CHEAP_LATENCY * w0.p50)
             and _le(fixed[w].cpu, CHEAP_CPU * w0.cpu)]
    missing = [window_name(w) for w in positive if fixed[w] is None]
    if not cheap:
        if missing:
            return _verdict(3, NA, _missing_text(missing))
        return _verdict(3, NA, ("does not apply: no fixed window halves W0's p50 "
                                f"({sig3(w0.p50)} us) for at most 2x its CPU/IO "
                                f"({sig3(w0.cpu)} us)"))
    if p is None:
        return _verdict(3, NA, f"no result for {pname}")
    best = min(cheap, key=lambda w: fixed[w].p50)
    bp = fixed[best].p50
    names = ", ".join(window_name(w) for w in cheap)
    if not _le(p.p50, LATENCY_SLACK * bp):
        return _verdict(3, MISS, (f"p50 {sig3(p.p50)} > 1.2 x {window_name(best)}'s "
                                  f"{sig3(bp)} us (cheap windows: {names})"),
                        [window_name(best)])
    if missing:
        return _verdict(3, NA, _missing_text(missing))
    return _verdict(3, PASS, (f"p50 {sig3(p.p50)} <= 1.2 x {window_name(best)}'s "
                              f"{sig3(bp)} us (cheap windows: {names})"))


def beats_qemu(policies, pname):
    """Verdict 4 for the policy named pname, against QEMU's two rules."""
    p = policies.get(pname)
    if p is None:
        return _verdict(4, NA, f"no result for {pname}")
    rivals = [q for q in QEMU_POLICIES if q != pname]
    by = [q for q in rivals if policies.get(q) is not None and dominates(policies[q], p)]
    if by:
        q = by[0]
        return _verdict(4, MISS, (
            f"dominated by {', '.join(by)}: {q} p50 {sig3(policies[q].p50)} <= 0.9 x "
            f"{sig3(p.p50)} us and CPU/IO {sig3(policies[q].cpu)} <= 0.9 x {sig3(p.cpu)} us"),
            by)
    absent = [q for q in rivals if q not in policies]
    missing = [q for q in rivals if q in policies and policies[q] is None]
    if absent or missing:
        return _verdict(4, NA, _missing_text(missing, absent))
    return _verdict(4, PASS, f"neither {' nor '.join(rivals)} is 10% better in both")


def judge_policy(fixed, policies, pname, max_ns, with_qemu=True):
    """Verdicts 1-3 (and 4 if with_qemu) for one policy: a list of dicts."""
    p = policies.get(pname)
    out = [never_dominated(fixed, p, max_ns, pname),
           no_useless_spinning(fixed, p, pname),
           latency_where_cheap(fixed, p, pname)]
    if with_qemu:
        out.append(beats_qemu(policies, pname))
    return out


def judge_cell(fixed, policies, judged, max_ns):
    """{policy: [verdicts]}: all four for `judged`, 1-3 for QEMU's policies
    measured in the cell (for comparison)."""
    out = {}
    if judged in policies:
        out[judged] = judge_policy(fixed, policies, judged, max_ns, True)
    for q in QEMU_POLICIES:
        if q in policies and q != judged:
            out[q] = judge_policy(fixed, policies, q, max_ns, False)
    return out


def cell_status(verdicts):
    """"MISS" if any verdict missed, "n/a" if none applied, else "pass"."""
    statuses = [v["status"] for v in verdicts]
    if MISS in statuses:
        return MISS
    if statuses and all(s == NA for s in statuses):
        return NA
    return PASS


def summarize(cells):
    """Per policy over the cells.

    `cells` is {cell key: {policy: [verdicts]}}.  Returns {policy: {"cells",
    "pass", "miss", "na", "misses": ["KEY: 3 latency where cheap (W8)", ...],
    "line"}} where a cell passes when none of its verdicts is a MISS and at
    least one applied.
    """
    out = {}
    for key, per_policy in cells.items():
        for pname, verdicts in per_policy.items():
            s = out.setdefault(pname, {"cells": 0, "pass": 0, "miss": 0, "na": 0,
                                       "misses": [], "verdicts": len(verdicts)})
            s["cells"] += 1
            status = cell_status(verdicts)
            s[{"pass": "pass", "MISS": "miss", "n/a": "na"}[status]] += 1
            for v in verdicts:
                if v["status"] == MISS:
                    s["misses"].append(f"{key}: {v['id']} {v['name']} "
                                       f"({', '.join(v['by'])})")
    for pname, s in out.items():
        which = "1-4" if s["verdicts"] == 4 else "1-3"
        line = f"{pname}: {s['pass']}/{s['cells']} cells pass (verdicts {which})"
        if s["na"]:
            line += f", {s['na']} with no verdict that applies"
        line += "; misses: " + ("; ".join(s["misses"]) if s["misses"] else "none")
        s["line"] = line
    return out

"""Machine phases: runs the machine changed under, and which to repeat.

A virtual machine's host may move its vCPUs (onto SMT siblings of one
core, onto other cores) for minutes at a time.  On the 2-CPU development
VM a cache line's round trip between the daemon's and spindle-bench's CPUs
then goes from ~45 ns to ~350 ns and an eventfd wake-up's from ~31 to
~42 µs, and every configuration's p50 at service 0 triples with it.  A
cell's configurations alternate, so a change in the middle of a cell puts
some repeats of each in one phase and the rest in the other, and the
medians compare configurations measured on two different machines.

spindle-cpuprobe measures the crossing around every run (before and
after), and after a cell's runs once more: the phase the machine is in
now.  A run *matches* a level when both of its probes are within
`tolerance` (a factor) of it.  Every (repeat, configuration) of the cell
without a run that matches the current level is run again, and so on up
to `passes` times; then each (repeat, configuration) keeps its latest
matching run, or failing that its latest run whose probes agree with each
other, or its latest run, and the others are marked superseded (kept in
results.json, left out of the medians).  The decision reads only the
probes, never a run's results, and treats every configuration alike.

Pure functions but probe(), which runs the program; main.py makes the runs.
"""

import json
import subprocess

# Two probes within this factor of each other are the same phase.  The
# development VM's phases differ by 5-8x in the statistic below; within a
# phase the statistic spreads by less than 1.5x.
DEFAULT_TOLERANCE = 2.0
DEFAULT_PASSES = 3
# The statistic compared: the fastest batch of cache-line round trips (a
# batch that was preempted is slower, never faster, so the minimum is what
# the hardware gives).
LEVEL_KEY = "cacheline_rt_min_ns"
PROBE_TIMEOUT_S = 10.0


def probe(program, cpu_a, cpu_b):
    """Run spindle-cpuprobe once: its JSON object, or {"error": why}."""
    cmd = [str(program), f"--cpus={cpu_a},{cpu_b}", "--json"]
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    if proc.returncode != 0:
        return {"error": f"exit status {proc.returncode}: "
                         f"{proc.stderr.strip()[-300:]}"}
    try:
        out = json.loads(proc.stdout)
    except ValueError as e:
        return {"error": f"output is not JSON ({e})"}
    if not isinstance(out, dict) or level(out) is None:
        return {"error": f"output without a positive {LEVEL_KEY}"}
    return out


def level(p):
    """The probe's statistic, or None (no probe, or a failed one)."""
    v = (p or {}).get(LEVEL_KEY)
    return v if isinstance(v, (int, float)) and v > 0 else None


def same(a, b, tolerance):
    """Levels a and b are within a factor `tolerance` of each other."""
    if a is None or b is None:
        return False
    return max(a, b) <= tolerance * min(a, b)


def run_levels(record):
    pr = record.get("probe") or {}
    return level(pr.get("before")), level(pr.get("after"))


def steady(record, tolerance):
    """The machine did not change during the run (as far as its probes say)."""
    b, a = run_levels(record)
    return same(b, a, tolerance)


def matches(record, ref, tolerance):
    """Both of the run's probes are at the level ref, and near each other."""
    b, a = run_levels(record)
    return (same(b, ref, tolerance) and same(a, ref, tolerance) and
            same(b, a, tolerance))


def missing(records, jobs, ref, tolerance):
    """The jobs (in their order) without a record that matches ref.

    records: every record of the set, each with a "job" key (any hashable
    the caller chose: (repeat, config) for a cell)."""
    have = {r["job"] for r in records if matches(r, ref, tolerance)}
    return [j for j in jobs if j not in have]


def select(records, jobs, ref, tolerance):
    """Keep one record per job; mark the others superseded.

    Per job: the latest record matching ref, else the latest steady one,
    else the latest; at each step a run that succeeded ("ok") goes before one
    that failed (whether a run failed is not what it measured).  Sets r["superseded"] on every record and r["phase"]
    ("match", "other", "changed" or "unknown") on the kept ones.  Returns
    the kept records that do not match ref (for the report)."""
    off = []
    for job in jobs:
        mine = [r for r in records if r["job"] == job]
        if not mine:
            continue
        newest_ok_first = sorted(reversed(mine), key=lambda r: not r.get("ok", True))
        keep = next((r for r in newest_ok_first if matches(r, ref, tolerance)), None)
        if keep is None:
            keep = next((r for r in newest_ok_first if steady(r, tolerance)),
                        newest_ok_first[0])
        for r in mine:
            r["superseded"] = r is not keep
        b, a = run_levels(keep)
        if ref is None or b is None or a is None:
            keep["phase"] = "unknown"
        elif matches(keep, ref, tolerance):
            keep["phase"] = "match"
        else:
            keep["phase"] = "other" if steady(keep, tolerance) else "changed"
        if keep["phase"] != "match":
            off.append(keep)
    return off


def describe(ref, redone, off, passes_used):
    """One line for the cell's report, or None when nothing happened."""
    if not redone and not off:
        return None
    parts = []
    if redone:
        parts.append(f"{redone} run{'s' if redone != 1 else ''} repeated in "
                     f"{passes_used} pass{'es' if passes_used != 1 else ''} because "
                     f"the machine changed")
    if off:
        parts.append(f"{len(off)} kept from another phase "
                     f"({', '.join(sorted({r['phase'] for r in off}))})")
    now = "unknown (the probe failed)" if ref is None else f"now {ref:.0f} ns"
    return f"machine phase: cache-line round trip {now}; " + "; ".join(parts)

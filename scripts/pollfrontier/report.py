"""Medians per (cell, config), the verdicts per cell, and the tables.

Every number is the median over a (cell, config)'s successful repeats of
the per-run value (benchcompare.report.metrics on spindle-bench's JSON;
window changes per 1000 turns from the IOThread's counters before and
after the run).  The verdicts (verdicts.py) use the medians of p50 and
of the daemon's CPU per I/O.
"""

import statistics

from benchcompare.report import median_metrics, sig3, si

from . import verdicts as vd
from .cells import medium_label

# An open-loop cell that achieved less than this share of its arrival
# rate is marked as saturated.
SATURATED_SHARE = 0.9


def _median(vals):
    vals = [v for v in vals if isinstance(v, (int, float))]
    return statistics.median(vals) if vals else None


def summarize_cell(cell, configs, runs):
    """{config name: {"runs", "ok", "median", "changes_per_1k_turns", ...}}."""
    out = {}
    for cfg in configs:
        mine = [r for r in runs if r["cell"] == cell.key and r["config"] == cfg.name
                and not r.get("superseded")]
        results = [r["result"] for r in mine if r["result"] is not None]
        ok = [r for r in mine if r["result"] is not None]
        out[cfg.name] = {
            "runs": len(mine), "ok": len(results),
            "median": median_metrics(results) if results else None,
            "changes_per_1k_turns": _median(
                [(r.get("qmp") or {}).get("changes_per_1k_turns") for r in ok]),
            "turns_per_io": _median(
                [(r.get("qmp") or {}).get("turns_per_io") for r in ok]),
            "per_run": [{"p50_us": _us(r["result"], "p50"),
                         "cpu_us_per_io": r["result"].get("backend_cpu_us_per_io")}
                        for r in ok],
        }
    return out


def _us(result, key):
    v = (result.get("lat_ns") or {}).get(key)
    return v / 1000 if isinstance(v, (int, float)) else None


def points(cell_summary, configs):
    """The verdicts' input: ({W: Point or None}, {policy: Point or None})."""
    fixed, policies = {}, {}
    for cfg in configs:
        med = cell_summary[cfg.name]["median"]
        pt = None
        if med and med.get("p50_us") is not None and med.get("cpu_us_per_io") is not None:
            pt = vd.Point(med["p50_us"], med["cpu_us_per_io"])
        if cfg.fixed:
            fixed[cfg.window_us] = pt
        else:
            policies[cfg.name] = pt
    return fixed, policies


def judge(cell_summary, configs, judged, max_ns):
    fixed, policies = points(cell_summary, configs)
    return vd.judge_cell(fixed, policies, judged, max_ns)


# ---------------------------------------------------------------------------
# Text

# (header, width, formatter of a config's summary)
COLUMNS = [
    ("p50 us", 8, lambda s: sig3(s["median"]["p50_us"])),
    ("p99 us", 8, lambda s: sig3(s["median"]["p99_us"])),
    ("CPU us/IO", 9, lambda s: sig3(s["median"]["cpu_us_per_io"])),
    ("kicks/IO", 8, lambda s: sig3(s["median"]["kicks_per_io"])),
    ("ints/IO", 7, lambda s: sig3(s["median"]["interrupts_per_io"])),
    ("chg/1k turns", 12, lambda s: sig3(s["changes_per_1k_turns"])),
    ("IOPS", 7, lambda s: si(s["median"]["iops"])),
]
NAME_W = 22


def cell_header(cell, repeats):
    return (f"== {cell.key}: {cell.label()}; IOThread {cell.iothread}; "
            f"median of {repeats}")


def format_cell(cell, configs, cell_summary, verdicts, judged, max_ns, repeats,
                phase_line=None):
    """The table of one cell (rows = configs), the phase line, the verdicts."""
    lines = [cell_header(cell, repeats)]
    head = "config".ljust(NAME_W) + " ".join(h.rjust(w) for h, w, _ in COLUMNS) + "   ok"
    lines += [head, "-" * len(head)]
    for cfg in configs:
        s = cell_summary[cfg.name]
        if s["median"] is None:
            cols = ["fail".rjust(COLUMNS[0][1])] + ["-".rjust(w) for _, w, _ in COLUMNS[1:]]
        else:
            cols = [fmt(s).rjust(w) for _, w, fmt in COLUMNS]
            iops = s["median"]["iops"]
            if cell.load.open_loop and iops is not None and \
                    iops < SATURATED_SHARE * cell.load.rate:
                cols[-1] = (si(iops) + "*").rjust(COLUMNS[-1][1])
        name = cfg.name + ("" if cfg.fixed else f" ({cfg.max_ns})")
        lines.append(name.ljust(NAME_W) + " ".join(cols) +
                     f"  {s['ok']}/{s['runs']}")
    if phase_line:
        lines.append(phase_line)
    lines += format_verdicts(verdicts, judged, max_ns)
    return lines


def format_verdicts(verdicts, judged, max_ns):
    lines = []
    if judged in verdicts:
        lines.append(f"verdicts for {judged} (poll-max-ns {max_ns}):")
        for v in verdicts[judged]:
            lines.append(f"  {v['id']} {v['name']:<20} {v['status']:<4}  {v['detail']}")
    others = [p for p in verdicts if p != judged]
    if others:
        lines.append("for comparison (verdicts 1-3):")
        for p in others:
            parts = []
            for v in verdicts[p]:
                t = f"{v['id']} {v['status']}"
                if v["status"] == vd.MISS:
                    t += f" ({', '.join(v['by'])})"
                parts.append(t)
            lines.append(f"  {p:<14} " + ", ".join(parts))
    return lines


def legend():
    return [
        "p50/p99: latency percentiles (µs); CPU us/IO: the daemon's CPU time (all "
        "threads, schedstat) per I/O;",
        "kicks/IO, ints/IO: kicks the front-end sent and interrupts it got, per I/O;",
        "chg/1k turns: (grows + shrinks) * 1000 / turns of the cell's IOThread over the "
        "run (ramp included); IOPS: achieved",
        "(* below 90% of the offered rate: saturated). ok: repeats that succeeded. "
        "Wn: poll-policy=fixed, poll-max-ns = n µs (W0: never polls).",
    ]


def format_service_list(services):
    """Service times and file media: "0, 50us, file-native"."""
    return ", ".join(medium_label(s) for s in services)

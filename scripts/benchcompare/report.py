"""Medians over repeats, the side-by-side table, and the goals.

Every number in the table is the median over a cell's successful repeats
of the per-run value (so IOPS per CPU-second is the median of each run's
1e6 / CPU-µs-per-I/O).  Ratios are spindle / qsd of those medians.
"""

import statistics

from .backends import DISPLAY, FLAVOURS
from .matrix import format_service

# Goals of the issue, as thresholds.
GOAL_QD1_P50_RATIO = 0.5        # spindle p50 <= half of qsd's (QD1, 0 µs, poll default)
GOAL_QD32_EFFICIENCY = 1.5      # spindle IOPS per CPU-second >= 1.5x qsd's (QD32)
GOAL_IDLE_PERCENT = 1.0         # spindle idle CPU < 1% of a core

# --backend file: the goals of the real-disk issue.
FILE_DEEP_QD = 8                # from this queue depth: IOPS >= qsd's, less CPU
FILE_QD1_GAIN = 1.3             # QD1 default window: IOPS >= 1.3x poll off ...
FILE_POLL_MAX_NS = 32768        # ... on a disk faster than poll-max-ns at QD1
FILE_QD1_CPU = 1.1              # else no more CPU than poll off (10% noise) ...
FILE_QD1_P50 = 0.9              # ... unless p50 improves by 10%

# --backend qcow2: allocated reads at least this share of raw's IOPS, and
# no qcow2 cell behind qsd by more than this (noise).
QCOW2_OF_RAW = 0.9
QCOW2_NOISE = 0.05

# An open-loop cell that achieved less than this share of its arrival rate
# is marked as saturated in the table.
SATURATED_SHARE = 0.9


def metrics(result):
    """The numbers of one spindle-bench result that the report uses."""
    lat = result.get("lat_ns") or {}
    cpu = result.get("backend_cpu_us_per_io")
    m = {
        "p50_us": _div(lat.get("p50"), 1000),
        "p90_us": _div(lat.get("p90"), 1000),
        "p99_us": _div(lat.get("p99"), 1000),
        "p999_us": _div(lat.get("p999"), 1000),
        "mean_us": _div(lat.get("mean"), 1000),
        "iops": result.get("iops"),
        "cpu_us_per_io": cpu,
        "iops_per_cpu_s": 1e6 / cpu if cpu else None,
        "kicks_per_io": result.get("kicks_per_io"),
        "interrupts_per_io": result.get("interrupts_per_io"),
        "bench_cpu_us_per_io": result.get("bench_cpu_us_per_io"),
        "switches_per_io": result.get("backend_switches_per_io"),
        "backlogged": result.get("backlogged"),
        "errors": result.get("errors"),
        # --backend nbd|rbd: put there by the harness, not by spindle-bench.
        "server_cpu_us_per_io": result.get("server_cpu_us_per_io"),
        # --backend qcow2, alloc: likewise.
        "clusters_per_write": result.get("qcow2_clusters_per_write"),
    }
    return m


def _div(v, d):
    return v / d if isinstance(v, (int, float)) else None


def median_metrics(results):
    """Median of every metric over the results (None where none has it)."""
    per_run = [metrics(r) for r in results]
    out = {}
    for key in per_run[0] if per_run else ():
        vals = [m[key] for m in per_run if isinstance(m[key], (int, float))]
        out[key] = statistics.median(vals) if vals else None
    return out


def median_run(results):
    """The result whose p50 is the median one (for its latency CDF)."""
    ok = [r for r in results if r.get("lat_ns", {}).get("p50") is not None]
    if not ok:
        return None
    ok.sort(key=lambda r: r["lat_ns"]["p50"])
    return ok[(len(ok) - 1) // 2]


def summarize(cells, runs):
    """{cell.key: {"cell": ..., flavour: {"runs", "ok", "median", "cdf"}, "ratio": ...}}."""
    summary = {}
    for cell in cells:
        entry = {"service_ns": cell.pair.service_ns, "medium": cell.pair.medium,
                 "engine": cell.pair.engine, "poll": cell.pair.poll.name,
                 "load": cell.load.name, "rate_iops": cell.load.rate,
                 "iodepth": cell.load.iodepth, "queues": cell.load.queues}
        for flavour in FLAVOURS:
            mine = [r for r in runs if r["cell"] == cell.key and r["daemon"] == flavour]
            results = [r["result"] for r in mine if r["result"] is not None]
            best = median_run(results)
            entry[flavour] = {
                "runs": len(mine), "ok": len(results),
                "median": median_metrics(results) if results else None,
                "median_run_cdf": best.get("lat_cdf") if best else None,
            }
        entry["ratio"] = ratios(entry["spindle"]["median"], entry["qsd"]["median"])
        summary[cell.key] = entry
    return summary


def ratios(s, q):
    """spindle / qsd of p50, IOPS, CPU per I/O and IOPS per CPU-second."""
    out = {}
    for key in ("p50_us", "p99_us", "iops", "cpu_us_per_io", "iops_per_cpu_s"):
        a = s.get(key) if s else None
        b = q.get(key) if q else None
        out[key] = a / b if isinstance(a, (int, float)) and b else None
    return out


# ---------------------------------------------------------------------------
# The table

def si(v):
    """123 -> "123", 12345 -> "12.3k", 1234567 -> "1.23M"."""
    if v is None:
        return "-"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{sig3(v / div)}{suffix}"
    return sig3(v)


def sig3(v):
    """Three significant digits, no exponent."""
    if v is None:
        return "-"
    a = abs(v)
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def _ratio(v):
    return "-" if v is None else f"{v:.2f}"


# (header, width, formatter of the median dict)
DAEMON_COLUMNS = [
    ("p50us", 7, lambda m: sig3(m["p50_us"])),
    ("p99us", 7, lambda m: sig3(m["p99_us"])),
    ("IOPS", 7, lambda m: si(m["iops"])),
    ("CPUus/IO", 8, lambda m: sig3(m["cpu_us_per_io"])),
    ("kick/IO", 7, lambda m: sig3(m["kicks_per_io"])),
    ("csw/IO", 6, lambda m: sig3(m["switches_per_io"])),
    ("IO/CPUs", 7, lambda m: si(m["iops_per_cpu_s"])),
]
# --backend nbd|rbd: the server's CPU per I/O while the daemon ran.
SERVER_COLUMNS = [
    ("srvCPU", 6, lambda m: sig3(m["server_cpu_us_per_io"])),
]
# --backend qcow2: clusters an allocating run added per write.
QCOW2_COLUMNS = [
    ("cl/W", 5, lambda m: sig3(m["clusters_per_write"])),
]
COLUMN_NOTES = {
    "srvCPU": "srvCPU: the server's CPU time (all its threads, ramp included) per "
              "I/O while that daemon ran, in µs.",
    "cl/W": "cl/W: qcow2 clusters the run allocated per write, from the image's "
            "growth (ramp included; 1: every write allocated).",
}
RATIO_COLUMNS = [
    ("p50", 5, "p50_us"),
    ("IOPS", 5, "iops"),
    ("CPU/IO", 6, "cpu_us_per_io"),
]
KEY_COLUMNS = [("service", 8), ("poll", 7), ("load", 7)]
SEP = " | "


def format_table(summary, medium_header="service", extra_columns=()):
    """The fixed-width side-by-side table, as a list of lines; the first key
    column is the service time, or the engine (medium_header "engine") or
    the remote driver ("driver"); extra_columns follow each daemon's own."""
    daemon_columns = DAEMON_COLUMNS + list(extra_columns)
    medium_w = max([KEY_COLUMNS[0][1], *(len(e["medium"]) for e in summary.values())])
    key_columns = [(medium_header, medium_w)] + KEY_COLUMNS[1:]
    key_w = sum(w for _, w in key_columns) + len(key_columns) - 1
    daemon_w = sum(w for _, w, _ in daemon_columns) + len(daemon_columns) - 1
    ratio_w = sum(w for _, w, _ in RATIO_COLUMNS) + len(RATIO_COLUMNS) - 1
    top = SEP.join([" " * key_w, DISPLAY["spindle"].center(daemon_w),
                    DISPLAY["qsd"].center(daemon_w), "spindle/qsd".center(ratio_w)])
    head = SEP.join([
        " ".join(h.ljust(w) for h, w in key_columns),
        " ".join(h.rjust(w) for h, w, _ in daemon_columns),
        " ".join(h.rjust(w) for h, w, _ in daemon_columns),
        " ".join(h.rjust(w) for h, w, _ in RATIO_COLUMNS)])
    lines = [top, head, "-" * len(head)]
    notes = set()
    previous = None
    for entry in summary.values():
        pair = (entry["medium"], entry["poll"])
        if previous is not None and pair != previous:
            lines.append("")
        previous = pair
        load = entry["load"]
        if any(entry[f]["ok"] < entry[f]["runs"] for f in FLAVOURS):
            load += "!"
            notes.add("!")
        key = " ".join(v.ljust(w) for v, (_, w) in zip(
            [entry["medium"], entry["poll"], load], key_columns))
        blocks = [key]
        for flavour in FLAVOURS:
            med = entry[flavour]["median"]
            if med is None:
                cols = ["fail".rjust(daemon_columns[0][1])] + \
                       ["-".rjust(w) for _, w, _ in daemon_columns[1:]]
            else:
                cols = [fmt(med).rjust(w) for _, w, fmt in daemon_columns]
                if entry["rate_iops"] and med["iops"] is not None and \
                        med["iops"] < SATURATED_SHARE * entry["rate_iops"]:
                    cols[2] = (si(med["iops"]) + "*").rjust(DAEMON_COLUMNS[2][1])
                    notes.add("*")
            blocks.append(" ".join(cols))
        blocks.append(" ".join(_ratio(entry["ratio"][k]).rjust(w)
                               for _, w, k in RATIO_COLUMNS))
        lines.append(SEP.join(blocks))
    lines.append("")
    lines.append("p50us/p99us: latency percentiles in µs; IOPS: achieved; CPUus/IO: the "
                 "daemon's CPU time (all threads) per I/O;")
    lines.append("kick/IO: kicks the front-end sent per I/O; csw/IO: times a daemon thread "
                 "was switched in, per I/O;")
    lines.append("IO/CPUs: I/Os per second of daemon CPU time (1e6 / CPUus/IO).")
    lines += [COLUMN_NOTES[h] for h, _, _ in extra_columns]
    lines.append("Medians over the repeats; ratios are spindle / qsd (p50 and CPU/IO: "
                 "lower is better for spindle; IOPS: higher).")
    if "*" in notes:
        lines.append(f"*  achieved less than {SATURATED_SHARE:.0%} of the offered arrival "
                     "rate (saturated)")
    if "!" in notes:
        lines.append("!  some repeats failed (twice each); medians over the others; "
                     "'fail' where none succeeded")
    return lines


# ---------------------------------------------------------------------------
# Goals

def _find(summary, service_ns, poll, load):
    for entry in summary.values():
        if (entry["service_ns"], entry["poll"], entry["load"]) == (service_ns, poll, load):
            return entry
    return None


def evaluate_goals(summary, idle):
    """The issue's three goals, as measured: a list of dicts."""
    goals = []

    entry = _find(summary, 0, "default", "QD1")
    r = entry["ratio"]["p50_us"] if entry else None
    goals.append({
        "goal": "QD1, 0 µs service, default poll window: spindle p50 latency at "
                "most half of qsd's",
        "measured": None if r is None else (
            f"spindle/qsd p50 = {r:.2f} ({sig3(entry['spindle']['median']['p50_us'])}"
            f" µs vs {sig3(entry['qsd']['median']['p50_us'])} µs)"),
        "value": r, "threshold": f"<= {GOAL_QD1_P50_RATIO}",
        "met": None if r is None else r <= GOAL_QD1_P50_RATIO})

    qd32 = [e for e in summary.values() if e["load"] == "QD32"
            and e["ratio"]["iops_per_cpu_s"] is not None]
    head = _find(summary, 0, "default", "QD32")
    r = head["ratio"]["iops_per_cpu_s"] if head else None
    if r is None and qd32:
        head = min(qd32, key=lambda e: e["ratio"]["iops_per_cpu_s"])
        r = head["ratio"]["iops_per_cpu_s"]
    measured = None
    if r is not None:
        measured = (f"spindle/qsd = {r:.2f} at service {format_service(head['service_ns'])}, "
                    f"poll {head['poll']} ({si(head['spindle']['median']['iops_per_cpu_s'])}"
                    f" vs {si(head['qsd']['median']['iops_per_cpu_s'])} I/Os per CPU-second)")
        if len(qd32) > 1:
            worst = min(qd32, key=lambda e: e["ratio"]["iops_per_cpu_s"])
            best = max(qd32, key=lambda e: e["ratio"]["iops_per_cpu_s"])
            measured += (f"; over all {len(qd32)} QD32 cells "
                         f"{worst['ratio']['iops_per_cpu_s']:.2f} "
                         f"({format_service(worst['service_ns'])}, {worst['poll']}) to "
                         f"{best['ratio']['iops_per_cpu_s']:.2f} "
                         f"({format_service(best['service_ns'])}, {best['poll']})")
    goals.append({
        "goal": "QD32: spindle's IOPS per backend CPU-second at least 1.5x qsd's",
        "measured": measured, "value": r, "threshold": f">= {GOAL_QD32_EFFICIENCY}",
        "met": None if r is None else r >= GOAL_QD32_EFFICIENCY})

    s_vals = [i["percent"]["spindle"] for i in idle
              if i["percent"].get("spindle") is not None]
    q_vals = [i["percent"]["qsd"] for i in idle if i["percent"].get("qsd") is not None]
    worst = max(s_vals) if s_vals else None
    goals.append({
        "goal": "no I/O: spindle's idle CPU under 1% of a core",
        "measured": None if worst is None else (
            f"at most {worst:.4f}% of a core over {len(s_vals)} idle windows of "
            f"{idle[0]['seconds']:g} s (median {statistics.median(s_vals):.4f}%; qsd at most "
            f"{max(q_vals) if q_vals else float('nan'):.4f}%)"),
        "value": worst, "threshold": f"< {GOAL_IDLE_PERCENT}%",
        "met": None if worst is None else worst < GOAL_IDLE_PERCENT})
    return goals


def evaluate_file_goals(summary):
    """The real-disk goals (--backend file), as measured: a list of dicts."""
    goals = []
    deep = [e for e in summary.values() if e["poll"] == "default"
            and not e["rate_iops"] and e["iodepth"] >= FILE_DEEP_QD]
    misses, rows = [], []
    for e in deep:
        s, q = e["spindle"]["median"], e["qsd"]["median"]
        if not s or not q:
            misses.append(f"{e['medium']}/{e['load']}: no result")
            continue
        iops, cpu = e["ratio"]["iops"], e["ratio"]["cpu_us_per_io"]
        rows.append(f"{e['medium']}/{e['load']} IOPS {iops:.2f}x, CPU/IO {cpu:.2f}x")
        if not (iops >= 1.0 and cpu < 1.0):
            misses.append(f"{e['medium']}/{e['load']} (IOPS {si(s['iops'])} vs "
                          f"{si(q['iops'])}, CPU/IO {sig3(s['cpu_us_per_io'])} vs "
                          f"{sig3(q['cpu_us_per_io'])} µs)")
    goals.append({
        "goal": f"QD{FILE_DEEP_QD} and deeper, default window: spindle's IOPS at least "
                "qsd's, with less daemon CPU per I/O",
        "measured": ("; ".join(rows) + (f". Behind: {'; '.join(misses)}" if misses else "")
                     if rows or misses else None),
        "value": len(misses), "threshold": "in every such cell",
        "met": None if not deep else not misses})

    for entry in summary.values():
        if entry["load"] != "QD1" or entry["poll"] != "default":
            continue
        off = next((e for e in summary.values() if e["medium"] == entry["medium"]
                    and e["load"] == "QD1" and e["poll"] == "off"), None)
        d = entry["spindle"]["median"]
        o = off["spindle"]["median"] if off else None
        if not d or not o or not o["iops"] or not o["cpu_us_per_io"]:
            continue
        gain, cpu = d["iops"] / o["iops"], d["cpu_us_per_io"] / o["cpu_us_per_io"]
        p50 = d["p50_us"] / o["p50_us"]
        fast = o["p50_us"] * 1000 < FILE_POLL_MAX_NS
        measured = (f"default/off: IOPS {gain:.2f}x ({si(d['iops'])} vs {si(o['iops'])}), "
                    f"p50 {p50:.2f}x ({sig3(d['p50_us'])} vs {sig3(o['p50_us'])} µs), "
                    f"CPU/IO {cpu:.2f}x ({sig3(d['cpu_us_per_io'])} vs "
                    f"{sig3(o['cpu_us_per_io'])} µs)")
        if fast:
            goals.append({
                "goal": f"{entry['medium']}, QD1 (p50 with poll off under poll-max-ns): "
                        f"spindle's default window at least {FILE_QD1_GAIN}x the IOPS of "
                        "poll off",
                "measured": measured, "value": gain, "threshold": f">= {FILE_QD1_GAIN}",
                "met": gain >= FILE_QD1_GAIN})
        else:
            goals.append({
                "goal": f"{entry['medium']}, QD1 (p50 with poll off over poll-max-ns): "
                        "spindle's default window no more CPU per I/O than poll off, "
                        "unless p50 improves",
                "measured": measured, "value": cpu,
                "threshold": f"CPU <= {FILE_QD1_CPU}x, or p50 <= {FILE_QD1_P50}x",
                "met": cpu <= FILE_QD1_CPU or p50 <= FILE_QD1_P50})
    return goals


def evaluate_remote_goals(summary):
    """The remote-storage goals (--backend nbd|rbd), as measured: at QD32
    spindle's daemon CPU per I/O at most qsd's, at QD1 its p50 at most
    qsd's, for each driver and poll setting measured."""
    goals = []
    for load, key, what in (("QD32", "cpu_us_per_io", "daemon CPU per I/O"),
                            ("QD1", "p50_us", "p50 latency")):
        for e in summary.values():
            if e["load"] != load:
                continue
            s, q, r = e["spindle"]["median"], e["qsd"]["median"], e["ratio"][key]
            goals.append({
                "goal": f"{e['medium']}, poll {e['poll']}, {load}: spindle's {what} at "
                        "most qsd's",
                "measured": None if r is None else (
                    f"spindle/qsd = {r:.2f} ({sig3(s[key])} vs {sig3(q[key])} µs)"),
                "value": r, "threshold": "<= 1.0",
                "met": None if r is None else r <= 1.0})
    return goals


def evaluate_qcow2_goals(summary):
    """The qcow2 goals (--backend qcow2), as measured: Spindle's allocated
    reads within 10% of its raw IOPS at the same engine, poll and load, and
    in every qcow2 cell (reads and allocating writes) Spindle's IOPS and
    CPU per I/O no worse than qsd's beyond noise."""
    goals = []
    for e in summary.values():
        if not e["medium"].startswith("qcow2-"):
            continue
        raw = next((r for r in summary.values()
                    if r["medium"] == "raw-" + e["medium"][len("qcow2-"):]
                    and (r["poll"], r["load"]) == (e["poll"], e["load"])), None)
        s = e["spindle"]["median"]
        r = raw["spindle"]["median"] if raw else None
        share = s["iops"] / r["iops"] if s and r and s["iops"] and r["iops"] else None
        goals.append({
            "goal": f"{e['medium']}, poll {e['poll']}, {e['load']}: spindle's allocated "
                    f"reads at least {QCOW2_OF_RAW:.0%} of its raw IOPS",
            "measured": None if share is None else (
                f"qcow2/raw = {share:.2f} ({si(s['iops'])} vs {si(r['iops'])} IOPS)"),
            "value": share, "threshold": f">= {QCOW2_OF_RAW}",
            "met": None if share is None else share >= QCOW2_OF_RAW})
    for e in summary.values():
        if e["medium"].startswith("raw-"):
            continue
        iops, cpu = e["ratio"]["iops"], e["ratio"]["cpu_us_per_io"]
        s, q = e["spindle"]["median"], e["qsd"]["median"]
        goals.append({
            "goal": f"{e['medium']}, poll {e['poll']}, {e['load']}: spindle no more "
                    f"than {QCOW2_NOISE:.0%} behind qsd in IOPS and CPU per I/O",
            "measured": None if iops is None or cpu is None else (
                f"spindle/qsd IOPS {iops:.2f} ({si(s['iops'])} vs {si(q['iops'])}), "
                f"CPU/IO {cpu:.2f} ({sig3(s['cpu_us_per_io'])} vs "
                f"{sig3(q['cpu_us_per_io'])} µs)"),
            "value": iops, "threshold": f"IOPS >= {1 - QCOW2_NOISE:.2f}x, "
                                        f"CPU/IO <= {1 + QCOW2_NOISE:.2f}x",
            "met": None if iops is None or cpu is None else
            iops >= 1 - QCOW2_NOISE and cpu <= 1 + QCOW2_NOISE})
    return goals


def format_goals(goals):
    lines = ["Goals (as measured in this run, not asserted):"]
    for g in goals:
        verdict = {True: "met", False: "not met", None: "not measured"}[g["met"]]
        lines.append(f"  - {g['goal']} ({g['threshold']}): {verdict}")
        if g["measured"]:
            lines.append(f"      {g['measured']}")
    return lines

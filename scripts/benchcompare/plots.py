"""The PNG plots (matplotlib with the Agg backend: no display needed).

    cdf-qd1.png        latency CDFs at QD1, one panel per service time (or
                       file engine): both daemons, default poll window and
                       poll off
    cpu-per-io.png     daemon CPU µs per I/O against achieved IOPS in the
                       open-loop cells, one panel per service time (or engine)
    iops-per-cpu.png   I/Os per daemon CPU-second for every cell, bars for
                       both daemons (whiskers: lowest and highest repeat)
"""

import math
import textwrap

from .backends import DISPLAY, FLAVOURS
from .report import metrics

COLORS = {"spindle": "tab:blue", "qsd": "tab:orange"}
# Line styles and markers by poll setting; other settings cycle below.
STYLES = {"default": "-", "off": "--"}
OTHER_STYLES = [":", "-."]
MARKERS = {"default": "o", "off": "s"}
# Bars whose heights differ by more than this factor get a log scale.
LOG_SPREAD = 20
OTHER_MARKERS = ["^", "D"]


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _style(poll, polls):
    if poll in STYLES:
        return STYLES[poll]
    others = [p for p in polls if p not in STYLES]
    return OTHER_STYLES[others.index(poll) % len(OTHER_STYLES)]


def _marker(poll, polls):
    if poll in MARKERS:
        return MARKERS[poll]
    others = [p for p in polls if p not in MARKERS]
    return OTHER_MARKERS[others.index(poll) % len(OTHER_MARKERS)]


def _si_axis(axis):
    """Tick labels such as 10k, 1.5M on a matplotlib axis."""
    from matplotlib.ticker import FuncFormatter
    def short(v, _pos):
        for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if abs(v) >= div:
                return f"{v / div:g}{suffix}"
        return f"{v:g}"
    axis.set_major_formatter(FuncFormatter(short))


def _grid(n):
    cols = min(n, 2)
    return math.ceil(n / cols), cols


def _panels(plt, n, width=6.0, height=4.2):
    rows, cols = _grid(n)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows + 0.8),
                             squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _finish(plt, fig, title, note, path):
    chars = int(fig.get_figwidth() * 13)
    fig.suptitle("\n".join([title] + textwrap.wrap(note, chars)), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _series_panels(plt, media, polls, draw_series, empty_text):
    """A figure of one panel a medium, drawing draw_series(ax, service,
    flavour, poll) (true if it drew anything) for each daemon and poll
    setting.  A panel with nothing drawn says empty_text.  Returns the
    figure and a list of (ax, title, drawn) to finish the panels with."""
    fig, axes = _panels(plt, len(media))
    panels = []
    for ax, (service, title) in zip(axes, media):
        drawn = False
        for flavour in FLAVOURS:
            for poll in polls:
                drawn = draw_series(ax, service, flavour, poll) or drawn
        if not drawn:
            ax.text(0.5, 0.5, empty_text, ha="center", transform=ax.transAxes)
        panels.append((ax, title, drawn))
    return fig, panels


def plot_cdfs(summary, media, polls, note, path):
    """Latency CDFs of the median run of each QD1 cell."""
    plt = _pyplot()

    def series(ax, service, flavour, poll):
        entry = _entry(summary, service, poll, "QD1")
        cdf = entry[flavour]["median_run_cdf"] if entry else None
        if not cdf:
            return False
        xs = [p[0] / 1000 for p in cdf if p[0] > 0]
        ys = [p[1] for p in cdf if p[0] > 0]
        ax.step(xs, ys, where="post", color=COLORS[flavour],
                linestyle=_style(poll, polls),
                label=f"{DISPLAY[flavour]}, poll {poll}")
        return True

    fig, panels = _series_panels(plt, media, polls, series, "no QD1 results")
    for ax, title, drawn in panels:
        ax.set_title(f"{title}, QD1")
        ax.set_xlabel("latency (µs, log scale)")
        ax.set_ylabel("fraction of I/Os ≤ latency")
        ax.set_ylim(0, 1.01)
        ax.grid(True, which="both", alpha=0.3)
        if drawn:
            ax.set_xscale("log")
            ax.legend(fontsize=8, loc="lower right")
    _finish(plt, fig, "Latency CDF at queue depth 1", note, path)


def plot_cpu_per_io(summary, media, polls, note, path):
    """Daemon CPU µs per I/O against achieved IOPS (open-loop cells)."""
    plt = _pyplot()

    def series(ax, service, flavour, poll):
        pts = []
        for entry in summary.values():
            med = entry[flavour]["median"]
            if (entry["medium"] == service and entry["poll"] == poll
                    and entry["rate_iops"] and med
                    and med["iops"] and med["cpu_us_per_io"] is not None):
                pts.append((med["iops"], med["cpu_us_per_io"]))
        if not pts:
            return False
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts],
                marker=_marker(poll, polls), markerfacecolor="none"
                if poll != "default" else COLORS[flavour],
                color=COLORS[flavour], linestyle=_style(poll, polls),
                label=f"{DISPLAY[flavour]}, poll {poll}")
        return True

    fig, panels = _series_panels(plt, media, polls, series,
                                 "no open-loop results")
    for ax, title, drawn in panels:
        ax.set_title(f"{title}, open loop")
        ax.set_xlabel("achieved IOPS (log scale)")
        ax.set_ylabel("daemon CPU per I/O (µs)")
        ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
        if drawn:
            ax.set_xscale("log")
            rates = [e["rate_iops"] for e in summary.values() if e["rate_iops"]]
            ax.set_xlim(min(rates) / 3, max(rates) * 3)
            _si_axis(ax.xaxis)
            ax.xaxis.set_minor_formatter(plt.NullFormatter())
            ax.set_ylim(top=ax.get_ylim()[1] * 1.35)    # room for the legend
            ax.legend(fontsize=8, loc="upper left", ncol=2)
    _finish(plt, fig, "Daemon CPU time per I/O against arrival rate", note, path)


def plot_iops_per_cpu(summary, runs, media, note, path):
    """I/Os per daemon CPU-second, every cell, both daemons side by side."""
    plt = _pyplot()
    n_cells = max(1, max(sum(1 for e in summary.values() if e["medium"] == s)
                         for s, _ in media))
    fig, axes = plt.subplots(len(media), 1, squeeze=False,
                             figsize=(max(9.0, 0.75 * n_cells + 2), 3.3 * len(media) + 1.0))
    for ax, (service, title) in zip([row[0] for row in axes], media):
        entries = [(k, e) for k, e in summary.items() if e["medium"] == service]
        width = 0.38
        for i, flavour in enumerate(FLAVOURS):
            xs, ys, lo, hi = [], [], [], []
            for x, (key, entry) in enumerate(entries):
                med = entry[flavour]["median"]
                if not med or med["iops_per_cpu_s"] is None:
                    continue
                vals = [metrics(r["result"])["iops_per_cpu_s"] for r in runs
                        if r["cell"] == key and r["daemon"] == flavour and r["result"]]
                vals = [v for v in vals if v is not None]
                xs.append(x + (i - 0.5) * width)
                ys.append(med["iops_per_cpu_s"])
                lo.append(med["iops_per_cpu_s"] - min(vals))
                hi.append(max(vals) - med["iops_per_cpu_s"])
            ax.bar(xs, ys, width, color=COLORS[flavour], label=DISPLAY[flavour],
                   yerr=[lo, hi], capsize=2, error_kw={"elinewidth": 0.8})
        ax.set_xticks(range(len(entries)))
        ax.set_xticklabels([f"{e['poll']}\n{e['load']}" for _, e in entries], fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("I/Os per daemon CPU-second")
        heights = [p.get_height() for p in ax.patches if p.get_height() > 0]
        if heights and max(heights) > LOG_SPREAD * min(heights):
            ax.set_yscale("log")
            ax.set_ylabel("I/Os per daemon CPU-second (log)")
        _si_axis(ax.yaxis)
        ax.set_xlabel("poll setting / load")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _finish(plt, fig, "I/Os per second of daemon CPU time (higher is better)", note, path)


def _entry(summary, medium, poll, load):
    for entry in summary.values():
        if (entry["medium"], entry["poll"], entry["load"]) == (medium, poll, load):
            return entry
    return None


def draw_all(summary, runs, matrix, note, out_dir):
    """Draw the three plots into out_dir; returns their paths."""
    what = "engine" if matrix.engines else "service time"
    media = [(m, f"{what} {m}") for m in matrix.media]
    polls = [p.name for p in matrix.polls]
    paths = [out_dir / "cdf-qd1.png", out_dir / "cpu-per-io.png",
             out_dir / "iops-per-cpu.png"]
    plot_cdfs(summary, media, polls, note, paths[0])
    plot_cpu_per_io(summary, media, polls, note, paths[1])
    plot_iops_per_cpu(summary, runs, media, note, paths[2])
    return paths

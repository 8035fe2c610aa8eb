"""The frontier plot (matplotlib with the Agg backend: no display needed).

    frontier.png   one panel per cell: x = median p50 latency, y = median
                   daemon CPU per I/O; the fixed windows as a line whose
                   points are labelled with W in µs, each policy a marker of
                   its own; faint dots are the single repeats
"""

import math
import textwrap

# Panels whose p50 values spread over more than this factor get a log x axis.
LOG_SPREAD = 10
POLICY_STYLE = {
    "predictive": ("*", "tab:red", 190),
    "qemu-classic": ("s", "tab:green", 70),
    "qemu-weighted": ("D", "tab:purple", 70),
}
FIXED_COLOR = "tab:blue"


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def draw_frontier(session, note, path):
    """Draw frontier.png; returns [path] (nothing if there is no data)."""
    args = session.args
    cells = [c for c in args.cells if c.key in session.cell_summaries]
    if not cells:
        return []
    plt = _pyplot()
    cols = min(len(cells), len(args.load_list)) or 1
    cols = min(cols, 4)
    rows = math.ceil(len(cells) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.9 * rows + 1.0),
                             squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[len(cells):]:
        ax.set_visible(False)
    handles = {}
    for ax, cell in zip(flat, cells):
        _panel(ax, cell, args, session.cell_summaries[cell.key],
               session.cell_verdicts.get(cell.key, {}), handles)
    fig.legend(handles.values(), handles.keys(), loc="lower center",
               ncol=len(handles), fontsize=8, frameon=False)
    chars = int(fig.get_figwidth() * 13)
    title = (f"poll-frontier: daemon CPU per I/O against p50 latency "
             f"(median of {args.repeats}); fixed windows W µs, policies at poll-max-ns "
             f"{args.policy_max_ns}")
    fig.suptitle("\n".join([title] + textwrap.wrap(note, chars)), fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]


def _log_x(ax):
    """A log x axis with plain tick labels at 1, 2, 5 x 10^n."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _point(summary):
    med = summary.get("median")
    if not med or med.get("p50_us") is None or med.get("cpu_us_per_io") is None:
        return None
    return med["p50_us"], med["cpu_us_per_io"]


def _panel(ax, cell, args, summary, verdicts, handles):
    fixed = [(c, _point(summary[c.name])) for c in args.configs if c.fixed]
    fixed = [(c, p) for c, p in fixed if p]
    policies = [(c, _point(summary[c.name])) for c in args.configs if not c.fixed]
    xs = [p[0] for _, p in fixed] + [p[0] for _, p in policies if p]
    # The single repeats, faintly.
    for c in args.configs:
        for r in summary[c.name]["per_run"]:
            if r["p50_us"] is not None and r["cpu_us_per_io"] is not None:
                color = FIXED_COLOR if c.fixed else POLICY_STYLE.get(
                    c.name, ("o", "black", 60))[1]
                ax.plot(r["p50_us"], r["cpu_us_per_io"], ".", color=color, alpha=0.25,
                        markersize=4)
    if fixed:
        line, = ax.plot([p[0] for _, p in fixed], [p[1] for _, p in fixed], "-o",
                        color=FIXED_COLOR, markersize=4, linewidth=1)
        handles.setdefault("fixed windows (W µs)", line)
        for c, (x, y) in fixed:
            ax.annotate(f"{c.window_us:g}", (x, y), textcoords="offset points",
                        xytext=(4, 3), fontsize=7, color=FIXED_COLOR)
    for c, p in policies:
        if not p:
            continue
        marker, color, size = POLICY_STYLE.get(c.name, ("o", "black", 60))
        h = ax.scatter([p[0]], [p[1]], marker=marker, s=size, color=color,
                       edgecolors="black", linewidths=0.5, zorder=5)
        handles.setdefault(c.name, h)
    if xs and min(xs) > 0 and max(xs) / min(xs) > LOG_SPREAD:
        _log_x(ax)
    ax.set_xlabel("p50 latency (µs)", fontsize=8)
    ax.set_ylabel("daemon CPU per I/O (µs)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    judged = verdicts.get(args.default_policy) or []
    marks = " ".join(f"{v['id']}:{v['status']}" for v in judged)
    ax.set_title(f"{cell.key}\n{args.default_policy} {marks}", fontsize=8)

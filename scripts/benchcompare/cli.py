"""What the benchmark drivers (bench-compare, poll-frontier) share on their
command line: stopping cleanly on a signal, the workload, machine and
program options that mean the same in both, and how a run starts (output
directory, plan, dry run) and ends (plots, results, table.txt, where
everything went, what failed)."""

import argparse
import signal
import sys
from pathlib import Path

from .machine import SetupError


class Interrupted(Exception):
    """SIGINT, SIGTERM or SIGHUP arrived."""


class SystematicFailure(Exception):
    """Every run so far failed: spindle-bench cannot run here at all."""


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _on_signal(signum, frame):
    """Raise Interrupted once; later signals must not cut the clean-up short."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signal.Signals(signum).name)


def catch_stop_signals():
    """Turn every stop signal into Interrupted, also when the process was
    started with SIGINT ignored (a background job of a script): every way
    of being stopped goes through the clean-up."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _on_signal)


def parser(prog, description, epilog, first_group, quick_minutes):
    """The driver's argument parser, and its first group, which starts with
    --quick (the reduced matrix, done in under quick_minutes)."""
    p = argparse.ArgumentParser(prog=prog, description=description,
                                epilog=epilog,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group(first_group)
    g.add_argument("--quick", action="store_true",
                   help=f"the reduced matrix (see below); under {quick_minutes} "
                        "minutes")
    return p, g


def add_workload_args(g, seed_help, completion=False):
    """spindle-bench's workload options, into argument group g."""
    g.add_argument("--rw", default="randread",
                   choices=["randread", "randwrite", "read", "write", "randrw"],
                   help="access pattern (default %(default)s)")
    g.add_argument("--rwmixread", type=int, metavar="PCT", default=70,
                   help="reads in %% with --rw randrw (default %(default)s)")
    g.add_argument("--bs", default="4k", metavar="SIZE",
                   help="block size (default %(default)s)")
    if completion:
        # None: the driver chooses (bench-compare: poll, but interrupt where
        # a server shares the bench's CPU).
        g.add_argument("--completion", choices=["poll", "interrupt"],
                       help="how spindle-bench learns of completions (default poll)")
    g.add_argument("--open-iodepth", type=int, metavar="N", default=256,
                   help="cap on I/Os in flight in the open-loop cells (default %(default)s)")
    g.add_argument("--seed", type=int, metavar="N", default=1, help=seed_help)
    g.add_argument("--connect-timeout", dest="connect_timeout_ms", type=int,
                   metavar="MS", default=5000,
                   help="spindle-bench's --connect-timeout (default %(default)s)")


def add_cpu_args(g, daemon_help, bench_help):
    """--daemon-cpu and --bench-cpu, into argument group g."""
    g.add_argument("--daemon-cpu", type=int, metavar="CPU", default=1,
                   help=daemon_help + " (default %(default)s)")
    g.add_argument("--bench-cpu", type=int, metavar="CPU", default=0,
                   help=bench_help + " (default %(default)s)")


def add_program_args(g, out_default):
    """--out, --build, --bench, --skip-deps, into argument group g."""
    g.add_argument("--out", metavar="DIR", type=Path,
                   help=f"where results go (default {out_default} here)")
    g.add_argument("--build", metavar="DIR", type=Path,
                   help="build directory (default $SPINDLE_BUILD, else build/)")
    g.add_argument("--bench", metavar="PROGRAM", type=Path,
                   help="spindle-bench (default <build>/tools/bench/spindle-bench)")
    g.add_argument("--skip-deps", action="store_true",
                   help="do not run scripts/install-deps.sh")


def say(text=""):
    print(text, flush=True)


def fmt_duration(s):
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def begin(name, args, out_default, prepare, print_plan, print_dry_run):
    """How both drivers start: the stop signals caught, the output directory
    (--out, else bench-results/OUT_DEFAULT), prepare(args, out_dir) ->
    (programs, facts, warning), the plan printed, and with --dry-run what
    would run.  Returns (programs, facts, out_dir) to go on with, or the
    exit status to end with at once."""
    catch_stop_signals()
    out_dir = (args.out or Path("bench-results") / out_default).resolve()
    try:
        programs, facts, warning = prepare(args, out_dir)
    except SetupError as e:
        print(f"{name}: {e}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted):
        return 130
    print_plan(args, facts, warning)
    if args.dry_run:
        print_dry_run(args, programs)
        return 0
    out_dir.mkdir(parents=True, exist_ok=True)
    say(f"output: {out_dir}")
    return programs, facts, out_dir


def finish(name, args, session, draw, plots_what, json_extra, table_lines,
           wall, logs, failed, failed_what, wall_note=""):
    """How both drivers end: draw() the plots (unless --no-plots; a plot
    that fails must not lose the results), session.write_json() the
    results (complete, the plots and json_extra), write table.txt in
    session.out_dir, say where everything is (`logs`: the daemon log line)
    and name what failed.  Returns the exit status: 1 if anything is in
    `failed` (described by failed_what), else 0."""
    plots = []
    if not args.no_plots:
        try:
            plots = draw()
        except Exception as e:
            say(f"{name}: drawing {plots_what} failed: {e!r}")
    json_path = session.write_json(complete=True, **json_extra, plots=plots)
    table_path = session.out_dir / "table.txt"
    table_path.write_text("\n".join(table_lines) + "\n")
    say(f"\nwall time {wall:.0f} s" + (f" ({wall / 60:.1f} min)" if wall >= 120 else "")
        + wall_note)
    say(f"raw results: {json_path}")
    say(f"table:       {table_path}")
    for p in plots:
        say(f"plot:        {p}")
    say(logs)
    if failed:
        say(f"{failed_what}: {', '.join(failed)}")
        return 1
    return 0

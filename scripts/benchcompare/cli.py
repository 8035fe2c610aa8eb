"""What the benchmark drivers (bench-compare, poll-frontier) share on their
command line: stopping cleanly on a signal, and the workload, machine and
program options that mean the same in both."""

import signal
from pathlib import Path


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
        g.add_argument("--completion", default="poll", choices=["poll", "interrupt"],
                       help="how spindle-bench learns of completions (default %(default)s)")
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

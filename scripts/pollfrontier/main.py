"""poll-frontier's options and the order of events (see scripts/poll-frontier)."""

import datetime
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from benchcompare import cli, image as img, machine, runner
from benchcompare.backends import BackendError, die_with_parent, thread_affinities, \
    thread_cpu_ns
from benchcompare.cli import Interrupted, SystematicFailure, fmt_duration, say
from benchcompare.machine import SetupError
from benchcompare.matrix import Load as BaseLoad, parse_services, parse_size
from benchcompare.report import median_metrics, metrics, si, sig3

from . import cells as cl, loadstep as ls, phase, report, verdicts as vd
from .daemon import (IDLE_EXPORTS, IDLE_IOTHREAD, DaemonDied, IdleFrontends, Layout,
                     apply_config, config_mismatch, connect_qmp, counter_delta,
                     handler_name, idle_export_id, iothreads, make_backend, snapshot,
                     without_handlers)
from .qmp import QmpError

# Per-run overhead beyond --ramp + --runtime (spindle-bench's start, QMP, the
# two machine-phase probes), for the time estimate; runs repeated after a
# machine change come on top.
RUN_OVERHEAD_S = 0.11
# The handler list is read this far into the measured window (a share of it).
HANDLERS_AT = 0.8
# idle63: the p50 of the export among 63 idle ones over the lone one's.
IDLE63_MAX_RATIO = 1.1
IDLE63_WAIT_S = 20.0
# The idle check: the busy QD1 run before it, and what counts as 0.0%.
IDLE_BUSY_S = 0.5
IDLE_MAX_PERCENT = 0.05
# The load step: its idle phase, its rate phase's load, the sampling period.
LOAD_STEP_IDLE_S = 1.0
LOAD_STEP_RAMP_S = 0.5          # at QD1, before phase 1 (same connection)
LOAD_STEP_RATE = 10000
LOAD_STEP_SAMPLE_S = 0.010
# Runs in a row that fail before any succeeded: the set-up is at fault.
FIRST_FAILURES_FATAL = 4

DESCRIPTION = """\
The latency/CPU frontier of fixed busy-poll windows, and where the adaptive
policies sit on it, per cell, in one run of one daemon.

One spindle daemon serves one null-co export per service time, each in its own
IOThread (iot-0, iot-10us, ...), and with --file-dir one export per
--file-engines on a raw image of its own (iot-file-native, ...: real-disk
cells), all its threads pinned to --daemon-cpu; spindle-bench runs on
--bench-cpu.  In each cell (a service time and a load)
every configuration runs once per repeat, in an order rotated by the repeat,
so that they alternate: fixed windows (poll-policy=fixed, poll-max-ns = W µs;
W = 0 never polls) and the policies (qemu-classic, qemu-weighted, predictive at
--policy-max-ns).  Before each run the configuration is set on the cell's
IOThread with qom-set (poll-policy, then poll-max-ns), and query-iothreads is
read before and after it (and once near the end of the window, for the
handler list).  The table shows medians over the repeats; the verdicts say
whether --default-policy is on the frontier (never dominated, no useless
spinning, latency where cheap, beats QEMU's rules).

Machine phases: a virtual machine's host may move its vCPUs for minutes at a
time, and every latency moves with it.  spindle-cpuprobe times a cache line's
round trip between the two CPUs before and after every run; after a cell's
runs, those not at the level the machine shows now (--phase-tolerance) are
run again, up to --phase-passes times, and the medians use one run per
repeat and configuration, preferring those at that level.  The rule reads
only the probes, never a run's results.

Then the idle63 cell (the default policy on an export among 63 idle connected
ones, against the lone export of iot-0), the load step (the default policy on
iot-0 through QD1 -> idle -> 10k IOPS -> QD1 on one connection, after a
0.5 s ramp at QD1, with
query-iothreads every 10 ms: does the window settle within 100 events of each
change?) and the idle check (the daemon's CPU over --idle-seconds without I/O,
right after a busy QD1 run).

It writes into --out results.json (every run's spindle-bench report and
command line, the QMP snapshots, the machine, the verdicts), table.txt and
frontier.png.  From a fresh clone on Debian 12 it first runs
scripts/install-deps.sh and builds the tree (the build directory is
$SPINDLE_BUILD or build/).
"""

EPILOG = """\
loads: "qdN" is a closed loop at queue depth N; a number ("1000", "10k") an
open loop with Poisson arrivals at that many IOPS (at most --open-iodepth in
flight); "-int" after either ("qd1-int") detects completions by interrupt
instead of by polling the used ring.  Service times: a number with ns, us, ms
or s (a bare number is µs).  Windows: µs.

full matrix (default): --services 0,10us,50us,1ms
  --loads qd1,qd1-int,1k,10k,50k,qd32 --windows 0,2,4,8,16,32
  --policies qemu-classic,qemu-weighted,predictive --repeats 3 --runtime 1
  --ramp 0.5, then idle63, the load step (2 s phases) and a 10 s idle check
--quick: --services 0,50us --loads qd1,qd1-int,10k,50k --runtime 0.3 --ramp 0.3
  --load-step-seconds 1 (under 4 minutes on 2 CPUs).  Explicit options
  override the --quick values.

exit status: 0 done; 1 the daemon died, or a configuration failed in every
repeat of a cell; 2 a setup error; 130 interrupted (partial results are
written).

examples:
  scripts/poll-frontier --quick
  make poll-frontier BENCH_ARGS="--services 0 --loads qd1,10k --repeats 5"
"""


def parse_args(argv):
    p, g = cli.parser("poll-frontier", DESCRIPTION, EPILOG, "what to compare", 4)
    g.add_argument("--services", metavar="LIST",
                   help=f"service times, null-co latency-ns (default {cl.FULL_SERVICES})")
    g.add_argument("--loads", metavar="LIST", help=f"loads (default {cl.FULL_LOADS})")
    g.add_argument("--file-dir", metavar="DIR", type=Path,
                   help="also run every load on a real disk: a raw image written in "
                        "full in DIR (not a tmpfs), one IOThread and export per "
                        "--file-engines (cells file-native, file-io_uring)")
    g.add_argument("--file-engines", metavar="LIST", default="native,io_uring",
                   help="with --file-dir: the image's aio= values (default %(default)s)")
    g.add_argument("--file-size", metavar="SIZE", default="1G",
                   help="with --file-dir: the image's size (default %(default)s)")
    g.add_argument("--windows", metavar="LIST", default=cl.DEFAULT_WINDOWS,
                   help="fixed windows in µs (default %(default)s)")
    g.add_argument("--policies", metavar="LIST", default=cl.DEFAULT_POLICIES,
                   help="adaptive policies (default %(default)s)")
    g.add_argument("--default-policy", metavar="NAME", default=cl.DEFAULT_POLICY,
                   choices=cl.KNOWN_POLICIES,
                   help="the policy the verdicts judge, also used by idle63 and the "
                        "idle check (default %(default)s)")
    g.add_argument("--policy-max-ns", type=int, metavar="NS", default=cl.POLICY_MAX_NS,
                   help="poll-max-ns of the policies (default %(default)s)")
    g.add_argument("--repeats", type=int, metavar="N", default=3,
                   help="runs per (cell, config); the table shows medians (default 3)")
    g.add_argument("--runtime", type=float, metavar="S",
                   help="measured seconds per run (default 1, --quick 0.3)")
    g.add_argument("--min-ios", type=int, metavar="N", default=3000,
                   help="runs of a cell whose rate is low (open loop at 1k IOPS, "
                        "QD1 on a 1 ms service) last long enough for about N "
                        "requests, so that a few milliseconds of CPU the machine "
                        "spends elsewhere do not swing CPU per I/O; 0: every run "
                        "lasts --runtime (default %(default)s)")
    g.add_argument("--ramp", type=float, metavar="S",
                   help="unmeasured seconds before each run, in which the policy "
                        "adapts (default 0.5, --quick 0.3)")
    g.add_argument("--no-idle63", action="store_true",
                   help="skip the cell with 63 idle front-ends")
    g.add_argument("--no-load-step", action="store_true",
                   help="skip the load step check")
    g.add_argument("--load-step-seconds", type=float, metavar="S",
                   help="length of each loaded phase of the load step (the idle "
                        "one is 1 s) (default 2, --quick 1)")
    g.add_argument("--phase-passes", type=int, metavar="N", default=phase.DEFAULT_PASSES,
                   help="spindle-cpuprobe measures the crossing between the two CPUs "
                        "before and after every run; after a cell, its runs that "
                        "were not at the level the machine is at now are repeated, "
                        "up to N times (0: record the probes, repeat nothing; "
                        "default %(default)s)")
    g.add_argument("--phase-tolerance", type=float, metavar="F",
                   default=phase.DEFAULT_TOLERANCE,
                   help="probes within a factor F of each other are one phase "
                        "(default %(default)g)")
    g.add_argument("--idle-seconds", type=float, metavar="S", default=10.0,
                   help="length of the idle check; 0 to skip (default %(default)g)")
    g = p.add_argument_group("workload (passed to spindle-bench)")
    cli.add_workload_args(g, "seed of repeat 0; repeat r uses N+r for every config")
    g = p.add_argument_group("machine")
    cli.add_cpu_args(g, "the CPU all threads of the daemon run on",
                     "the CPU spindle-bench (and the idle front-ends) run on")
    g = p.add_argument_group("programs and output")
    cli.add_program_args(g, "bench-results/poll-frontier-<timestamp>/")
    g.add_argument("--cpuprobe", metavar="PROGRAM", type=Path,
                   help="the machine-phase probe (default "
                        "<build>/tools/bench/spindle-cpuprobe)")
    g.add_argument("--skip-build", "--no-build", dest="skip_build", action="store_true",
                   help="do not run make")
    g.add_argument("--no-plots", action="store_true", help="do not draw the PNG")
    g.add_argument("--dry-run", action="store_true",
                   help="print the plan and the command lines; run nothing")
    args = p.parse_args(argv)

    quick = args.quick
    args.services = args.services or (cl.QUICK_SERVICES if quick else cl.FULL_SERVICES)
    args.loads = args.loads or (cl.QUICK_LOADS if quick else cl.FULL_LOADS)
    if args.runtime is None:
        args.runtime = 0.3 if quick else 1.0
    if args.ramp is None:
        args.ramp = 0.3 if quick else 0.5
    if args.load_step_seconds is None:
        args.load_step_seconds = 1.0 if quick else 2.0
    if args.load_step_seconds <= 0:
        p.error("--load-step-seconds must be positive")
    if args.runtime <= 0:
        p.error("--runtime must be positive")
    if args.ramp < 0 or args.idle_seconds < 0:
        p.error("--ramp and --idle-seconds must be >= 0")
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    if args.min_ios < 0:
        p.error("--min-ios must be >= 0")
    if args.phase_passes < 0:
        p.error("--phase-passes must be >= 0")
    if not args.phase_tolerance > 1:
        p.error("--phase-tolerance must be above 1")
    if args.open_iodepth < 1:
        p.error("--open-iodepth must be at least 1")
    if args.policy_max_ns < 0:
        p.error("--policy-max-ns must be >= 0")
    try:
        args.service_list = parse_services(args.services)
        if args.file_dir:
            args.service_list += cl.parse_file_engines(args.file_engines)
            args.file_bytes = parse_size(args.file_size)
        args.load_list = cl.parse_loads(args.loads, args.open_iodepth)
        args.window_list = cl.parse_windows(args.windows)
        args.policy_list = cl.parse_policies(args.policies)
    except ValueError as e:
        p.error(str(e))
    if args.default_policy not in args.policy_list:
        args.policy_list.append(args.default_policy)
    args.configs = cl.make_configs(args.window_list, args.policy_list, args.policy_max_ns)
    args.cells = cl.make_cells(args.service_list, args.load_list)
    # Service 0 is always there: idle63's lone export and the idle check use it.
    args.daemon_services = ([0] if 0 not in args.service_list else []) + args.service_list
    args.completion = "poll"       # benchcompare.runner's default; loads override it
    return args


def run_count(args):
    return len(args.cells) * len(args.configs) * args.repeats


def cell_runtime(args, cell):
    return cell.runtime_s(args.runtime, args.min_ios)


def estimate_s(args):
    per_run = args.ramp + args.runtime + RUN_OVERHEAD_S
    total = 1.0 + sum(len(args.configs) * args.repeats *
                      (args.ramp + cell_runtime(args, cell) + RUN_OVERHEAD_S)
                      for cell in args.cells)
    if not args.no_idle63:
        total += 2 * args.repeats * per_run + 3.0
    if not args.no_load_step:
        total += (3 * args.load_step_seconds + LOAD_STEP_IDLE_S +
                  LOAD_STEP_RAMP_S + 0.3)
    if args.idle_seconds:
        total += args.idle_seconds + IDLE_BUSY_S + 0.2
    return total


def load_step_phases(args):
    """[(seconds, load)] of the load step's spindle-bench --phase."""
    s = args.load_step_seconds
    return [(s, "qd1"), (LOAD_STEP_IDLE_S, "idle"), (s, f"rate={LOAD_STEP_RATE}"),
            (s, "qd1")]


def _opts(args, **over):
    """args with some values replaced (for runner.bench_command)."""
    ns = SimpleNamespace(**vars(args))
    for k, v in over.items():
        setattr(ns, k, v)
    return ns


class Session:
    """One poll-frontier run: the daemon, its monitor and every record."""

    def __init__(self, args, programs, facts, out_dir):
        self.args = args
        self.programs = programs
        self.facts = facts
        self.out_dir = out_dir
        self.log_dir = out_dir / "logs"
        self.started = datetime.datetime.now().astimezone()
        self.t0 = time.monotonic()
        self.runs = []
        self.cell_summaries = {}
        self.cell_verdicts = {}
        self.cell_phases = {}
        self.idle63 = None
        self.load_step = None
        self.idle = None
        self.daemon = None
        self.daemon_record = {}
        self.qmp = None
        self.qmp_side = None
        self.frontends = None
        self.run_no = 0
        self.total_runs = run_count(args) + (0 if args.no_idle63 else 2 * args.repeats)
        self.layout = None
        self.images = {}               # engine -> raw image (--file-dir)
        self.warnings = []
        self.probe_program = programs.get("cpuprobe")

    # -- machine phases (phase.py) -----------------------------------------------

    def probe(self):
        """spindle-cpuprobe between the two CPUs: its object, or None if off."""
        if self.probe_program is None:
            return None
        out = phase.probe(self.probe_program, self.args.daemon_cpu, self.args.bench_cpu)
        if "error" in out:
            self.warnings.append(f"spindle-cpuprobe failed, probes off: {out['error']}")
            say(f"warning: {self.warnings[-1]}")
            self.probe_program = None
            return None
        return {k: out[k] for k in ("cacheline_rt_min_ns", "cacheline_rt_median_ns",
                                    "wakeup_rt_p10_us", "wakeup_rt_median_us")
                if k in out}

    def run_jobs(self, jobs, run_job):
        """Run every job once, then repeat those the machine changed under.

        run_job(job, redo) makes one measured run (its record, in self.runs,
        gets "job" and "redo").  Returns the set's phase record, or None when
        the probes are off.  If the probe fails on the way, the last level it
        gave is the reference."""
        args = self.args
        start = len(self.runs)
        for job in jobs:
            run_job(job, 0)
        if self.probe_program is None:
            return None
        passes = redone = 0
        ref = None
        while True:
            now = phase.level(self.probe())
            ref = ref if now is None else now
            if now is None or passes >= args.phase_passes:
                break
            todo = phase.missing(self.runs[start:], jobs, ref, args.phase_tolerance)
            if not todo:
                break
            passes += 1
            redone += len(todo)
            self.total_runs += len(todo)
            say(f"  the machine changed (cache-line round trip now {ref:.0f} ns): "
                f"{len(todo)} of {len(jobs)} runs again, pass {passes}")
            for job in todo:
                run_job(job, passes)
        mine = self.runs[start:]
        off = phase.select(mine, jobs, ref, args.phase_tolerance)
        line = phase.describe(ref, redone, off, passes)
        if off:
            self.warnings.append(f"{mine[0]['cell']}: {line}")
        return {"level_ns": ref, "passes": passes, "repeated_runs": redone,
                "kept_off_phase": len(off), "line": line}

    # -- the daemon ----------------------------------------------------------

    def start_daemon(self, sock_dir):
        args = self.args
        for m in args.service_list:
            if isinstance(m, cl.FileMedium):
                self.images[m.engine] = img.create(args.file_dir, args.file_bytes, say)
        self.layout = Layout(sock_dir, args.daemon_services, not args.no_idle63,
                             images=self.images)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.daemon = make_backend(self.programs["spindle"], self.layout,
                                   args.daemon_cpu, self.log_dir / "spindle.log")
        self.daemon.start(timeout=20.0)
        self.qmp = connect_qmp(self.layout, self.daemon)
        self.qmp_side = connect_qmp(self.layout, self.daemon)
        threads = iothreads(self.qmp)
        missing = [i for i in self.layout.iothreads() if i not in threads]
        if missing:
            raise BackendError(f"query-iothreads lacks {', '.join(missing)}")
        self.daemon_record = {
            "command": self.daemon.command, "pid": self.daemon.pid,
            "affinity_at_start": self.daemon.affinity,
            "iothreads_at_start": {k: without_handlers(v) for k, v in threads.items()},
        }
        say(f"spindle pid {self.daemon.pid}: {len(self.layout.iothreads())} IOThreads "
            f"({', '.join(self.layout.iothreads())}), "
            f"{len(self.layout.all_sockets()) - 1} exports, all threads on CPU "
            f"{args.daemon_cpu}; log {self.daemon.log_path}")

    def check_alive(self, what):
        if self.daemon is not None and not self.daemon.alive():
            self.daemon.stop()
            rc = self.daemon.returncode
            how = (f"killed by signal {-rc} ({signal.Signals(-rc).name})"
                   if rc is not None and rc < 0 else f"exit status {rc}")
            raise DaemonDied(
                f"the spindle daemon (pid {self.daemon.pid}) died during {what}: "
                f"{how}\n  last lines of its log "
                f"({self.daemon.log_path}):\n{self.daemon._tail()}")

    def qcmd(self, fn, what):
        """Run fn() (QMP calls); a QMP failure of a dead daemon is DaemonDied."""
        try:
            return fn()
        except (QmpError, OSError):
            self.check_alive(what)
            raise

    def stop_daemon(self):
        if self.frontends is not None:
            self.daemon_record["idle_frontends_ok"] = self.frontends.stop()
            self.frontends = None
        for q in (self.qmp, self.qmp_side):
            if q is not None:
                q.close()
        self.qmp = self.qmp_side = None
        if self.daemon is not None:
            if self.daemon.alive():
                self.daemon_record["affinity_at_end"] = thread_affinities(self.daemon.pid)
            self.daemon_record["exit_status"] = self.daemon.stop()
            self.daemon_record["stats_lines"] = self.daemon.stats_lines()
            self.daemon.close()
            self.daemon = None

    # -- one run ----------------------------------------------------------------

    def bench_cmd(self, socket, load, seed, **over):
        opts = _opts(self.args, **over) if over else self.args
        return runner.bench_command(opts, socket, load.base if isinstance(load, cl.Load)
                                    else load, self.daemon.pid, seed,
                                    completion=getattr(load, "completion", "poll"))

    def measured_run(self, iothread, config, socket, load, seed, record, label=None,
                     runtime=None):
        """Set config, run spindle-bench (retried once), read the counters.

        Fills `record` (a dict) and returns the spindle-bench result or None.
        """
        args = self.args
        runtime = args.runtime if runtime is None else runtime
        timeout = args.ramp + runtime + runner.RUN_SLACK_S
        cmd = self.bench_cmd(socket, load, seed, runtime=runtime)
        state = {}
        probe_before = self.probe()

        def arm():
            self.qcmd(lambda: apply_config(self.qmp, iothread, config), "qom-set")
            before = self.qcmd(lambda: snapshot(self.qmp, iothread), "query-iothreads")
            state["before"] = before
            state["mismatch"] = config_mismatch(before, config)
            state["handlers"] = None
            delay = args.ramp + HANDLERS_AT * runtime

            def take():
                try:
                    state["handlers"] = snapshot(self.qmp_side, iothread)
                except (QmpError, OSError, KeyError, ValueError):
                    state["handlers"] = None
            state["timer"] = threading.Timer(delay, take)
            state["timer"].daemon = True
            state["timer"].start()

        def before_retry():
            _disarm(state)
            self.check_alive("a spindle-bench run")
            arm()

        arm()
        try:
            result, attempts = runner.run_with_retry(cmd, timeout, before_retry,
                                                     preexec_fn=die_with_parent())
        finally:
            _disarm(state)
        self.check_alive("a spindle-bench run")
        after = self.qcmd(lambda: snapshot(self.qmp, iothread), "query-iothreads")
        probe_after = self.probe()
        delta = counter_delta(state["before"], after)
        turns = delta.get("turns")
        changes = None
        if turns:
            changes = (delta.get("grows", 0) + delta.get("shrinks", 0)) * 1000 / turns
        mid = state.get("handlers")
        record.update({
            "config": label or config.name, "policy": config.policy,
            "poll_max_ns": config.max_ns, "iothread": iothread, "command": cmd,
            "runtime_s": runtime, "attempts": attempts, "ok": result is not None,
            "result": result,
            "config_mismatch": state.get("mismatch"),
            "probe": {"before": probe_before, "after": probe_after},
            "qmp": {
                "before": without_handlers(state["before"]),
                "after": without_handlers(after),
                "delta": delta,
                "changes_per_1k_turns": changes,
                "turns_per_io": (turns / result["ios"]
                                 if turns and result and result.get("ios") else None),
                "handlers_sampled_ns": mid.get("sampled_ns") if mid else None,
                "handlers": (mid.get("spindle-poll", {}).get("handlers")
                             if mid else None),
            },
        })
        if state.get("mismatch"):
            self.warnings.append(f"{iothread} {config.name}: query-iothreads shows "
                                 f"{state['mismatch']}")
        self.runs.append(record)
        self._progress(record, result, attempts, changes)
        if result is None and len([r for r in self.runs if r["ok"]]) == 0 and \
                len(self.runs) >= FIRST_FAILURES_FATAL:
            raise SystematicFailure(
                f"the first {len(self.runs)} runs all failed; the last with "
                f"{attempts[-1]['error']}\n  command: {' '.join(map(str, cmd))}")
        return result

    def _progress(self, record, result, attempts, changes):
        self.run_no += 1
        prefix = (f"[{self.run_no:>{len(str(self.total_runs))}}/{self.total_runs}] "
                  f"{record['cell']:<13} #{record['repeat']} {record['config']:<14}")
        pr = record.get("probe") or {}
        b, a = phase.level(pr.get("before")), phase.level(pr.get("after"))
        probes = ("" if b is None or a is None else
                  f"  xcpu {b:.0f}/{a:.0f} ns")
        if result is None:
            say(f"{prefix} FAILED twice: {attempts[-1]['error']}{probes}")
            return
        m = metrics(result)
        retry = f" (after a retry: {attempts[0]['error']})" if len(attempts) > 1 else ""
        say(f"{prefix} p50 {sig3(m['p50_us']):>6} us  p99 {sig3(m['p99_us']):>6} us  "
            f"{si(m['iops']):>6} IOPS  {sig3(m['cpu_us_per_io']):>6} us CPU/IO  "
            f"chg/1k {sig3(changes):>5}{probes}{retry}")

    # -- the cells --------------------------------------------------------------

    def run_cells(self):
        args = self.args
        configs = args.configs
        for i, cell in enumerate(args.cells):
            runtime = cell_runtime(args, cell)
            longer = (f", runs of {runtime:g} s (--min-ios {args.min_ios})"
                      if runtime != args.runtime else "")
            say(f"\n== cell {i + 1}/{len(args.cells)}: {cell.label()}{longer} "
                f"({fmt_duration(time.monotonic() - self.t0)} so far)")
            socket = self.layout.socket(cell.service_ns)
            jobs = []
            for rep in range(args.repeats):
                k = rep % len(configs)
                jobs += [(rep, position, cfg.name)
                         for position, cfg in enumerate(configs[k:] + configs[:k])]

            def run_job(job, redo, cell=cell, socket=socket, runtime=runtime):
                rep, position, name = job
                cfg = next(c for c in configs if c.name == name)
                record = {"kind": "cell", "cell": cell.key,
                          "service_ns": cl.medium_json(cell.service_ns),
                          "load": cell.load.name, "repeat": rep,
                          "position": position, "job": job, "redo": redo}
                self.measured_run(cell.iothread, cfg, socket, cell.load,
                                  args.seed + rep, record, runtime=runtime)
            ph = self.run_jobs(jobs, run_job)
            if ph is not None:
                self.cell_phases[cell.key] = ph
            # Leave the IOThread with the default policy.
            self.qcmd(lambda: apply_config(self.qmp, cell.iothread, self.default_config()),
                      "qom-set")
            summary = report.summarize_cell(cell, configs, self.runs)
            self.cell_summaries[cell.key] = summary
            self.cell_verdicts[cell.key] = report.judge(summary, configs,
                                                        args.default_policy,
                                                        args.policy_max_ns)
            say("\n".join(report.format_cell(cell, configs, summary,
                                             self.cell_verdicts[cell.key],
                                             args.default_policy, args.policy_max_ns,
                                             args.repeats, self.phase_line(cell.key))))
            self.write_json(complete=False)

    def phase_line(self, key):
        return (self.cell_phases.get(key) or {}).get("line")

    def default_config(self):
        return cl.policy_config(self.args.default_policy, self.args.policy_max_ns)

    # -- idle63 ---------------------------------------------------------------

    def run_idle63(self):
        args = self.args
        say(f"\n== idle63: {args.default_policy} on an export among "
            f"{IDLE_EXPORTS - 1} idle connected ones ({IDLE_IOTHREAD}) against the "
            f"lone export of iot-0; QD1, poll completion")
        rec = {"iothread": IDLE_IOTHREAD, "idle_frontends": IDLE_EXPORTS - 1,
               "status": None, "reason": None}
        self.idle63 = rec
        stopfile = Path(self.layout.sock_dir) / "idle63.stop"
        socks = [self.layout.idle_socket(k) for k in range(IDLE_EXPORTS - 1)]
        self.frontends = IdleFrontends(self.programs["vu_client"], socks, stopfile,
                                       args.bench_cpu, self.log_dir / "idle-frontends.log")
        self.frontends.start()
        rec["frontend_command"] = self.frontends.commands[0]
        want = {handler_name(idle_export_id(k)) for k in range(IDLE_EXPORTS - 1)}
        deadline = time.monotonic() + IDLE63_WAIT_S
        names = set()
        while True:
            self.check_alive("idle63's set-up")
            entry = self.qcmd(lambda: snapshot(self.qmp, IDLE_IOTHREAD), "query-iothreads")
            names = {h["name"] for h in entry["spindle-poll"].get("handlers", [])}
            if want <= names:
                break
            gone = self.frontends.exited()
            if gone or time.monotonic() > deadline:
                rec["status"] = vd.NA
                rec["reason"] = (f"{IDLE_IOTHREAD} lists {len(want & names)} of the "
                                 f"{len(want)} idle queue handlers"
                                 + (f"; {len(gone)} front-ends exited (first: {gone[0]})"
                                    if gone else f" after {IDLE63_WAIT_S:g} s"))
                say(f"idle63: n/a: {rec['reason']} (log {self.frontends.log_path})")
                return
            time.sleep(0.05)
        rec["handlers_before"] = entry["spindle-poll"]["handlers"]
        say(f"{IDLE_IOTHREAD} lists {len(want & names)} queue handlers of idle "
            f"front-ends")
        load = cl.Load(BaseLoad("QD1", 1), "poll")
        cfg = self.default_config()
        sides = [("among", IDLE_IOTHREAD, self.layout.idle_socket(IDLE_EXPORTS - 1)),
                 ("lone", cl.iothread_id(0), self.layout.socket(0))]
        jobs = []
        for rep in range(args.repeats):
            order = sides if rep % 2 == 0 else sides[::-1]
            jobs += [(rep, position, side) for position, (side, _, _) in enumerate(order)]

        def run_job(job, redo):
            rep, position, side = job
            _, iot, sock = next(x for x in sides if x[0] == side)
            record = {"kind": "idle63", "cell": "idle63", "side": side,
                      "service_ns": 0, "load": load.name, "repeat": rep,
                      "position": position, "job": job, "redo": redo}
            self.measured_run(iot, cfg, sock, load, args.seed + rep, record, label=side)
        rec["phase"] = self.run_jobs(jobs, run_job)
        med = {}
        for side, _, _ in sides:
            results = [r["result"] for r in self.runs
                       if r["kind"] == "idle63" and r["side"] == side and r["ok"]
                       and not r.get("superseded")]
            med[side] = median_metrics(results) if results else None
        rec["median"] = med
        a = (med["among"] or {}).get("p50_us")
        b = (med["lone"] or {}).get("p50_us")
        if a is None or b is None:
            rec["status"] = vd.NA
            rec["reason"] = "no result for " + " and ".join(
                s for s, v in (("among", a), ("lone", b)) if v is None)
        else:
            rec["p50_ratio"] = a / b
            rec["status"] = vd.PASS if vd._le(a / b, IDLE63_MAX_RATIO) else vd.MISS
        say("\n".join(format_idle63(rec)))

    # -- the load step ----------------------------------------------------------

    def run_load_step(self):
        args = self.args
        phases = load_step_phases(args)
        iot = cl.iothread_id(0)
        export = self.layout.export(0)
        handler = handler_name(export)
        say(f"\n== load step: {args.default_policy} on {iot}, one connection: "
            + " -> ".join(f"{w} {s:g} s" for s, w in phases)
            + f"; query-iothreads every {LOAD_STEP_SAMPLE_S * 1000:g} ms")
        cfg = self.default_config()
        self.qcmd(lambda: apply_config(self.qmp, iot, cfg), "qom-set")
        # The sequence starts from a steady QD1: the ramp runs at the first
        # phase's load on the same connection, so phase 1 is judged as the
        # steps after it are, not as a queue's first requests.
        cmd = runner.bench_command(_opts(args, ramp=LOAD_STEP_RAMP_S),
                                   self.layout.socket(0), None,
                                   self.daemon.pid, args.seed, completion="poll",
                                   phases=phases)
        earlier = []
        while True:
            probe_before = self.probe()
            result, attempts, samples, errors = self._load_step_once(cmd, phases, iot,
                                                                     handler)
            probes = {"before": probe_before, "after": self.probe()}
            if (self.probe_program is None or len(earlier) >= args.phase_passes or
                    phase.steady({"probe": probes}, args.phase_tolerance)):
                break
            say(f"  the machine changed during the load step (cache-line round trip "
                f"{phase.level(probes['before']):.0f} -> "
                f"{phase.level(probes['after']):.0f} ns): again")
            # Kept with its samples and its verdict, which does not count:
            # a reader can still see what that attempt showed.
            earlier.append({"probe": probes, "attempts": attempts,
                            "result": result, "samples": samples,
                            "analysis": _load_step_analysis(result, attempts,
                                                            samples)})
        rec = {"iothread": iot, "handler": handler, "policy": cfg.policy,
               "poll_max_ns": cfg.max_ns, "phases_asked": phases, "command": cmd,
               "attempts": attempts, "ok": result is not None, "result": result,
               "sample_period_s": LOAD_STEP_SAMPLE_S, "sampler_errors": errors,
               "samples": samples, "probe": probes,
               "repeated_after_machine_change": earlier}
        self.load_step = rec
        rec["analysis"] = _load_step_analysis(result, attempts, samples)
        say("\n".join(format_load_step(rec)))

    def _load_step_once(self, cmd, phases, iot, handler):
        """One run of the load step, sampled: (result, attempts, samples, errors)."""
        samples = []
        stop = threading.Event()
        errors = []

        def sample():
            while not stop.is_set():
                t_sent = time.monotonic_ns()
                try:
                    entry = iothreads(self.qmp_side).get(iot)
                except (QmpError, OSError, ValueError) as e:
                    errors.append(str(e))
                    return
                t = time.monotonic_ns()
                if entry is not None:
                    samples.append(ls.sample_from_entry(t, t_sent, entry, handler))
                stop.wait(max(0.0, LOAD_STEP_SAMPLE_S - (t - t_sent) / 1e9))

        sampler = threading.Thread(target=sample, name="load-step-sampler",
                                   daemon=True)
        timeout = LOAD_STEP_RAMP_S + sum(s for s, _ in phases) + runner.RUN_SLACK_S
        sampler.start()
        try:
            result, attempts = runner.run_with_retry(
                cmd, timeout, lambda: self.check_alive("the load step"),
                preexec_fn=die_with_parent())
        finally:
            stop.set()
            sampler.join()
        self.check_alive("the load step")
        return result, attempts, samples, errors

    # -- the idle check -------------------------------------------------------

    def run_idle_check(self):
        args = self.args
        say(f"\n== idle check: {args.default_policy} on every IOThread, a "
            f"{IDLE_BUSY_S:g} s QD1 run on iot-0, then {args.idle_seconds:g} s without I/O")
        cfg = self.default_config()
        for iot in self.layout.iothreads():
            self.qcmd(lambda: apply_config(self.qmp, iot, cfg), "qom-set")
        load = cl.Load(BaseLoad("QD1", 1), "poll")
        cmd = self.bench_cmd(self.layout.socket(0), load, args.seed, runtime=IDLE_BUSY_S,
                             ramp=0)
        busy = runner.run_once(cmd, IDLE_BUSY_S + runner.RUN_SLACK_S,
                               preexec_fn=die_with_parent())
        self.check_alive("the idle check's busy run")
        before = self.qcmd(lambda: iothreads(self.qmp), "query-iothreads")
        c0 = thread_cpu_ns(self.daemon.pid)
        t0 = time.monotonic()
        time.sleep(args.idle_seconds)
        c1 = thread_cpu_ns(self.daemon.pid)
        elapsed = time.monotonic() - t0
        self.check_alive("the idle check")
        after = self.qcmd(lambda: iothreads(self.qmp), "query-iothreads")
        pct = None if c0 is None or c1 is None else 100.0 * (c1 - c0) / (elapsed * 1e9)
        turns = {k: counter_delta(before[k], after[k]).get("turns")
                 for k in after if k in before}
        self.idle = {
            "seconds": round(elapsed, 3), "percent_of_core": pct,
            "cpu_ns": None if pct is None else c1 - c0,
            "busy_run": {"command": cmd, "ok": busy["result"] is not None,
                         "error": busy["error"], "result": busy["result"]},
            "turns_during": turns,
            "idle_frontends_connected": (IDLE_EXPORTS - 1) if self.frontends else 0,
            "threshold_percent": IDLE_MAX_PERCENT,
            "status": (vd.NA if pct is None else
                       vd.PASS if pct < IDLE_MAX_PERCENT else vd.MISS),
        }
        say(format_idle(self.idle))

    # -- output -----------------------------------------------------------------

    def results(self, complete, summary=None, plots=None, wall=None):
        args = self.args
        skip = ("configs", "cells", "service_list", "load_list", "window_list",
                "policy_list", "daemon_services")
        opts = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                if k not in skip}
        return {
            "tool": "poll-frontier", "format": 1, "complete": complete,
            "started": self.started.isoformat(timespec="seconds"),
            "wall_s": round(wall if wall is not None else time.monotonic() - self.t0, 1),
            "machine": self.facts,
            "pinning": {"daemon_cpu": args.daemon_cpu, "bench_cpu": args.bench_cpu,
                        "note": "all threads of the daemon share the daemon CPU; "
                                "spindle-bench and the idle front-ends run on the "
                                "bench CPU"},
            "options": opts,
            "configs": [c.as_json() for c in args.configs],
            "cells": [{"key": c.key, "service_ns": cl.medium_json(c.service_ns),
                       "iothread": c.iothread,
                       "load": c.load.as_json()} for c in args.cells],
            "judged_policy": args.default_policy,
            "daemon": self.daemon_record,
            "cell_summaries": self.cell_summaries,
            "verdicts": self.cell_verdicts,
            "cell_phases": self.cell_phases,
            "idle63": self.idle63, "load_step": self.load_step, "idle": self.idle,
            "summary": summary, "warnings": self.warnings,
            "runs": self.runs,
            "plots": [str(p) for p in plots] if plots else None,
        }

    def write_json(self, complete, **extra):
        return machine.write_json(self.out_dir / "results.json",
                                  self.results(complete, **extra))


def _disarm(state):
    timer = state.pop("timer", None)
    if timer is not None:
        timer.cancel()
        timer.join()


def format_idle63(rec):
    lines = []
    med = rec.get("median") or {}
    for side in ("among", "lone"):
        m = med.get(side)
        if m:
            lines.append(f"  {side:<6} p50 {sig3(m['p50_us'])} us  p99 "
                         f"{sig3(m['p99_us'])} us  CPU/IO {sig3(m['cpu_us_per_io'])} us")
    line = (rec.get("phase") or {}).get("line")
    if line:
        lines.append("  " + line)
    if rec.get("p50_ratio") is not None:
        lines.append(f"idle63: p50 among {rec['idle_frontends']} idle / lone = "
                     f"{rec['p50_ratio']:.2f} (acceptance <= {IDLE63_MAX_RATIO}): "
                     f"{rec['status']}")
    else:
        lines.append(f"idle63: {rec['status']}: {rec.get('reason')}")
    return lines


def _load_step_analysis(result, attempts, samples):
    """The load step's verdict from one attempt's report and samples."""
    if result is None or not result.get("phases"):
        return {"phases": [], "status": vd.NA,
                "detail": f"spindle-bench failed: {attempts[-1]['error']}"}
    return ls.analyze(result["phases"], samples)


def format_load_step(rec):
    a = rec["analysis"]
    n = len(rec["samples"])
    lines = [f"load step ({rec['policy']} on {rec['iothread']}, handler "
             f"{rec['handler']}; {n} samples):",
             f"  {'phase':<14} {'IOPS':>7} {'p50 us':>7} {'window ns':>10} "
             f"{'settle ev':>11} {'chg/1k turns':>12}  verdict"]
    again = len(rec.get("repeated_after_machine_change") or [])
    if again:
        lines.insert(1, f"  (run {again + 1} times: the machine changed during the "
                        f"first {again}, whose verdicts do not count: "
                        + ", ".join(e["analysis"]["status"]
                                    for e in rec["repeated_after_machine_change"])
                        + ")")
    for i, r in enumerate(a["phases"]):
        if not r["loaded"]:
            window = "-" if r["window_ns"] is None else str(r["window_ns"])
            lines.append(f"  {i + 1} {r['load']:<12} {'-':>7} {'-':>7} {window:>10}")
            continue
        p50 = None if r["p50_ns"] is None else r["p50_ns"] / 1000
        window = "-" if r["window_ns"] is None else str(r["window_ns"])
        settle = "-" if r["settle_ios"] is None else f"{r['settle_ios']:.0f}"
        lines.append(
            f"  {i + 1} {r['load']:<12} {si(r['iops']):>7} {sig3(p50):>7} "
            f"{window:>10} {settle:>11} "
            f"{sig3(r['changes_per_1k_turns']):>12}  {r['status']}"
            + (f" ({r['detail']})" if r["status"] != vd.PASS and r["detail"] else ""))
    lines.append("  settle ev: the handler's events from the phase's start to its last "
                 "window change in it (the daemon's last-change-event minus the count")
    lines.append("  at the start, interpolated between samples), from the last sample "
                 "before the phase ended (a change in the last ~10 ms is not seen);")
    lines.append("  chg/1k turns: window changes per 1000 loop turns over the phase's "
                 "second half")
    lines.append(f"load step: {a['status']}: {a['detail']}")
    return lines


def format_idle(idle):
    pct = idle["percent_of_core"]
    conn = idle["idle_frontends_connected"]
    return (f"idle: {'-' if pct is None else f'{pct:.1f}'}% of a core "
            f"({'-' if pct is None else f'{pct:.4f}'}%, {idle['cpu_ns'] or 0} ns of CPU) "
            f"over {idle['seconds']:g} s right after a QD1 run"
            + (f", {conn} idle front-ends connected" if conn else "")
            + f" (acceptance 0.0%): {idle['status']}")


def prepare(args, out_dir):
    """Dependencies, build, programs; returns ({name: path}, facts, warning)."""
    build_dir = args.build.resolve() if args.build else machine.default_build_dir()
    if not args.skip_deps and not args.dry_run:
        say("== dependencies (scripts/install-deps.sh)")
        machine.install_deps(say, tool="poll-frontier", needs="taskset, matplotlib")
    if not args.skip_build and not args.dry_run:
        say(f"== build ({build_dir})")
        out_dir.mkdir(parents=True, exist_ok=True)
        machine.build(build_dir, out_dir / "build.log")
    programs = machine.bench_programs(build_dir, args.bench)
    programs["vu_client"] = build_dir / "tools" / "vu-client" / "spindle-vu-client"
    programs["cpuprobe"] = (args.cpuprobe.resolve() if args.cpuprobe else
                            build_dir / "tools" / "bench" / "spindle-cpuprobe")
    machine.check_tools(programs["spindle"], programs["bench"])
    if not args.no_idle63 and not os.access(programs["vu_client"], os.X_OK):
        raise SetupError(f"{programs['vu_client']} is not built (run make, or pass "
                         "--no-idle63)")
    args.bench = programs["bench"]
    warning = machine.check_cpus(args.daemon_cpu, args.bench_cpu)
    if args.cpuprobe and not os.access(programs["cpuprobe"], os.X_OK):
        raise SetupError(f"--cpuprobe {args.cpuprobe}: not an executable program")
    if not os.access(programs["cpuprobe"], os.X_OK):
        warning = ((warning + "; ") if warning else "") + (
            f"{programs['cpuprobe']} is not built: no machine-phase probes, no runs "
            "repeated (run make)")
        programs["cpuprobe"] = None
    elif args.daemon_cpu == args.bench_cpu:
        programs["cpuprobe"] = None
    args.cpuprobe = programs["cpuprobe"]
    if not args.no_plots and not args.dry_run:
        machine.require_matplotlib()
    return programs, machine.facts(programs["spindle"], programs["bench"]), warning


def print_plan(args, facts, warning):
    say(f"machine: {facts['nproc']} CPUs, {facts['cpu_model']}, Linux {facts['kernel']}")
    say(f"programs: spindle {facts['spindle_git_describe'] or '?'} ({facts['spindle']}), "
        f"{facts['spindle_bench']}")
    say(f"pinning: every thread of the daemon shares CPU {args.daemon_cpu}; "
        f"spindle-bench runs on CPU {args.bench_cpu}")
    if warning:
        say(f"warning: {warning}")
    say(f"cells: service {report.format_service_list(args.service_list)} x loads "
        f"{', '.join(l.name for l in args.load_list)}"
        + ("" if args.no_idle63 else " + idle63")
        + ("" if args.no_load_step else " + load step")
        + (f" + {args.idle_seconds:g} s idle check" if args.idle_seconds else ""))
    if args.daemon_cpu == args.bench_cpu:
        say("machine phases: not probed (the daemon and the bench share a CPU)")
    elif args.cpuprobe:
        say(f"machine phases: spindle-cpuprobe between CPUs {args.daemon_cpu} and "
            f"{args.bench_cpu} before and after every run; runs off the current "
            f"phase (by more than {args.phase_tolerance:g}x) repeated, up to "
            f"{args.phase_passes} passes per cell")
    say(f"configs: {', '.join(c.name for c in args.configs)} (policies at poll-max-ns "
        f"{args.policy_max_ns}); judged: {args.default_policy}")
    say(f"{len(args.cells)} cells x {len(args.configs)} configs x {args.repeats} repeats "
        f"= {run_count(args)} runs of {args.ramp:g} s ramp + {args.runtime:g} s"
        + _longer_note(args) + f", about {fmt_duration(estimate_s(args))} in all")


def _longer_note(args):
    """Which cells' runs --min-ios makes longer, for the plan and the header."""
    longer = [f"{c.key} {cell_runtime(args, c):g} s" for c in args.cells
              if cell_runtime(args, c) != args.runtime]
    return f" ({', '.join(longer)}: --min-ios {args.min_ios})" if longer else ""


def print_dry_run(args, programs):
    layout = Layout("/tmp/spf.XXXX", args.daemon_services, False,
                    images={m.engine: args.file_dir / f"bench-compare-{m.engine}.img"
                            for m in args.service_list if isinstance(m, cl.FileMedium)})
    say("\ndaemon:")
    say("  taskset -c {} {} {}".format(args.daemon_cpu, programs["spindle"],
                                       " ".join(layout.args())))
    if not args.no_idle63:
        say(f"  (and, before --chardev: --object iothread,id={IDLE_IOTHREAD} and "
            f"{IDLE_EXPORTS} null-co nodes ni0.. with exports idle0.. in it)")
        say("idle63's front-ends, one per export idle0..idle62:")
        say(f"  taskset -c {args.bench_cpu} {programs['vu_client']} -s "
            "/tmp/spf.XXXX/idle0.sock --mem-size 4M wait-file /tmp/spf.XXXX/idle63.stop "
            "--timeout 3600")
    say("per run: qom-set poll-policy and poll-max-ns on the cell's IOThread, then")
    for load in args.load_list:
        cmd = runner.bench_command(args, "/tmp/spf.XXXX/e0.sock", load.base, "PID",
                                   args.seed, completion=load.completion)
        say("  " + " ".join(map(str, cmd)))
    if not args.no_load_step:
        say("the load step (query-iothreads every "
            f"{LOAD_STEP_SAMPLE_S * 1000:g} ms meanwhile):")
        cmd = runner.bench_command(_opts(args, ramp=LOAD_STEP_RAMP_S),
                                   "/tmp/spf.XXXX/e0.sock", None,
                                   "PID", args.seed, completion="poll",
                                   phases=load_step_phases(args))
        say("  " + " ".join(map(str, cmd)))


def summary_lines(session):
    args = session.args
    verdict_summary = vd.summarize(session.cell_verdicts)
    lines = ["Summary (verdicts per cell; a cell passes when none of its verdicts "
             "is a MISS):"]
    for pname in [args.default_policy] + [p for p in verdict_summary
                                          if p != args.default_policy]:
        if pname in verdict_summary:
            lines.append("  " + verdict_summary[pname]["line"])
    if session.idle63 is not None:
        lines += ["  " + l for l in format_idle63(session.idle63)[-1:]]
    if session.load_step is not None:
        lines.append("  " + format_load_step(session.load_step)[-1])
    if session.idle is not None:
        lines.append("  " + format_idle(session.idle))
    return lines, verdict_summary


def finish(session, args, wall):
    note = machine.machine_note(session.facts, args.daemon_cpu, args.bench_cpu)
    header = [f"poll-frontier {session.started:%Y-%m-%d %H:%M}: {note}",
              f"{args.rw} {args.bs}, ramp {args.ramp:g} s + runtime {args.runtime:g} s"
              f"{_longer_note(args)}, "
              f"median of {args.repeats}; configs rotated per repeat; spindle "
              f"{session.facts['spindle_git_describe']}"]
    body = []
    for cell in args.cells:
        if cell.key in session.cell_summaries:
            body += report.format_cell(cell, args.configs, session.cell_summaries[cell.key],
                                       session.cell_verdicts[cell.key],
                                       args.default_policy, args.policy_max_ns,
                                       args.repeats, session.phase_line(cell.key)) + [""]
    body += report.legend()
    if session.idle63 is not None:
        body += ["", f"== idle63 ({args.default_policy}, QD1, median of {args.repeats})"]
        body += format_idle63(session.idle63)
    if session.load_step is not None:
        body += ["", "== load step"] + format_load_step(session.load_step)
    if session.idle is not None:
        body += ["", "== idle check", format_idle(session.idle)]
    if session.warnings:
        body += ["", "warnings:"] + ["  " + w for w in session.warnings]
    lines, verdict_summary = summary_lines(session)
    say("\n" + "\n".join(header))
    say("\n".join(lines))
    def draw():
        from . import plots as plotting
        return plotting.draw_frontier(session, f"{note}; {args.rw} {args.bs}",
                                      session.out_dir / "frontier.png")

    failed = [f"{k} {c}" for k, s in session.cell_summaries.items()
              for c, e in s.items() if e["ok"] == 0]
    return cli.finish("poll-frontier", args, session, draw, "the plot",
                      {"summary": verdict_summary, "wall": wall},
                      header + [""] + body + [""] + lines, wall,
                      f"daemon log:  {session.log_dir}/spindle.log", failed,
                      "configurations that failed in every repeat",
                      wall_note=" (after dependencies and build)")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    started = cli.begin("poll-frontier", args, f"poll-frontier-{stamp}",
                        prepare, print_plan, print_dry_run)
    if isinstance(started, int):
        return started
    programs, facts, out_dir = started
    session = Session(args, programs, facts, out_dir)
    # A short directory: a UNIX socket path has at most 107 bytes.
    sock_dir = tempfile.mkdtemp(prefix="spf.", dir="/tmp")
    status = None
    try:
        session.start_daemon(sock_dir)
        session.run_cells()
        if not args.no_idle63:
            session.run_idle63()
        if not args.no_load_step:
            session.run_load_step()
        if args.idle_seconds > 0:
            session.run_idle_check()
        wall = time.monotonic() - session.t0
    except DaemonDied as e:
        print(f"\npoll-frontier: {e}", file=sys.stderr)
        status = 1
    except (BackendError, SystematicFailure, img.ImageError) as e:
        print(f"\npoll-frontier: {e}", file=sys.stderr)
        status = 2
    except (KeyboardInterrupt, Interrupted):
        print("\npoll-frontier: interrupted", file=sys.stderr)
        status = 130
    finally:
        session.stop_daemon()
        shutil.rmtree(sock_dir, ignore_errors=True)
        for path in session.images.values():
            path.unlink(missing_ok=True)
    if status is not None:
        path = session.write_json(complete=False)
        print(f"poll-frontier: daemon stopped; partial results: {path}", file=sys.stderr)
        return status
    return finish(session, args, wall)

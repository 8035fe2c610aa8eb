"""bench-compare's options and the order of events (see scripts/bench-compare)."""

import argparse
import datetime
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from . import cli, image, machine, matrix as mx, qcow2, remote, report, runner
from .backends import (DISPLAY, FLAVOURS, Backend, BackendError, daemon_args,
                       measure_idle, die_with_parent)
from .cli import Interrupted, SystematicFailure, fmt_duration, say

# Per-run overhead beyond --ramp + --runtime (connect, set-up, report), for
# the time estimate only.
RUN_OVERHEAD_S = 0.1
# Between a daemon's start and the idle measurement.
SETTLE_S = 0.3
# If this many runs in a row fail before any has succeeded, the failure is
# not the daemons' but the set-up's: stop instead of failing every cell.
FIRST_FAILURES_FATAL = 4

DESCRIPTION = """\
Spindle against Debian's qemu-storage-daemon, side by side, with spindle-bench.

Both daemons get the same command line (a null-co node whose latency-ns is the
service time, one IOThread with the same poll setting, a vhost-user-blk export
with one queue in that IOThread) and run pinned to --daemon-cpu: all of a
daemon's threads share that one CPU.  spindle-bench runs pinned to --bench-cpu.
For each (service time, poll setting) both daemons are started, their idle
CPU is measured, then every load is run --repeats times on each daemon,
alternating between them (which one goes first alternates per repeat), then
the idle CPU is measured again and both are stopped.  A run that fails is
retried once, then recorded as failed; the matrix goes on.

It prints a table of medians over the repeats with spindle/qsd ratios and
the issue's goals as measured, and writes into --out: results.json (every
raw result, the machine facts, the exact command lines), table.txt, and three
PNG plots (latency CDFs at QD1, CPU per I/O against arrival rate, I/Os per
CPU-second).

With --backend file the node is a raw image in --dir instead, written in
full before the first run (so reads reach the disk), opened with
cache.direct=on and aio= each of --engines; the pairs are then (engine,
poll setting), the loads closed loops on 1 or more queues (--queues), and
the table adds the daemons' context switches per I/O.  The goals printed
are then the real-disk ones: at QD8 and deeper, Spindle's IOPS at least
qsd's for less CPU per I/O; at QD1 the default window against poll off.

With --backend nbd or rbd both daemons open the same image on a server the
harness starts and stops itself (nbd: nbdkit's memory plugin on a UNIX
socket; rbd: a single-node Ceph test cluster, the image written in full),
pinned to --server-cpu; the pair is (driver, poll setting), the loads QD1
and QD32, and the table adds the server's CPU per I/O while each daemon ran.
The goals printed are the remote-storage ones: at QD32 Spindle's CPU per
I/O at most qsd's, at QD1 its p50 at most qsd's.

With --backend qcow2 the raw image of --backend file is also converted to a
qcow2 image with every cluster allocated, and the pairs are (case, engine,
poll setting) over --cases: raw (the raw image, the reference), qcow2
(allocated reads through a qcow2 node over the file node) and alloc
(randwrite on a fresh copy of an empty qcow2 image for every run, both
daemons restarted on their own copy: allocating writes).  The raw and qcow2
pairs of an engine and poll setting run together, their runs alternating.  The goals printed
are: allocated reads within 10% of raw's IOPS, and no qcow2 cell where
Spindle's IOPS or CPU per I/O is behind qsd's by more than noise (5%).

From a fresh clone on Debian 12 it first runs scripts/install-deps.sh (as
root it installs what is missing, matplotlib included) and builds the tree
with make (the build directory is $SPINDLE_BUILD or build/).
"""

EPILOG = """\
loads: "qdN" is a closed loop at queue depth N; a number ("1000", "10k") is an
open loop with Poisson arrivals at that many IOPS, at most --open-iodepth in
flight.  Service times: a number with ns, us, ms or s (a bare number is µs).
Poll settings: "default" (poll-max-ns not given: 32768 ns in both daemons),
"off" (poll-max-ns=0) or a number of ns.

full matrix (default): --services 0,10us,50us,1ms --loads qd1,qd32,1k,10k,50k
  --polls default,off --repeats 3 --runtime 3 --ramp 0.5 --idle 3  (~15 min)
--quick: --services 0,50us --loads qd1,qd32,10k --polls default,off
  --repeats 3 --runtime 1 --ramp 0.2 --idle 2  (under 3 min)
--backend file: --engines native,io_uring --loads qd1,qd8,qd32,qd128
  --queues 1 --polls default,off --repeats 5 (--quick: --loads qd1,qd32)
--backend nbd|rbd: --loads qd1,qd32 --polls default --repeats 6
  --disk-size 256M --completion interrupt (a busy-polling bench would take
  the CPU it shares with the server)
--backend qcow2: --cases raw,qcow2,alloc --engines native --loads qd1,qd32
  --polls default --repeats 5 --disk-size 1G  (~5 min)
Explicit options override the --quick values.

environment:
  SPINDLE_BUILD  the build directory (default: build/ in the tree)
  SPINDLE_QSD    qemu-storage-daemon to use (default: the one on $PATH)

exit status: 0 the matrix ran; 1 it ran but some cells failed on a daemon
in every repeat; 2 a setup error (missing tool, failed build, a daemon that
does not start); 130 interrupted (the partial results are still written).

example:
  scripts/bench-compare --quick
  make bench-compare BENCH_ARGS="--services 0 --loads qd1 --repeats 5"
  scripts/bench-compare --backend file --dir /var/tmp --queues 1,4
  scripts/bench-compare --backend rbd --runtime 2
  scripts/bench-compare --backend qcow2 --dir /var/tmp
"""


def parse_args(argv):
    p, g = cli.parser("bench-compare", DESCRIPTION, EPILOG, "matrix", 3)
    g.add_argument("--backend", choices=["null", "file", *remote.BACKENDS, "qcow2"],
                   default="null",
                   help="null-co with a service time, a raw image on a disk, an "
                        "image on an NBD server or a Ceph cluster, or qcow2 images "
                        "on a disk (default %(default)s)")
    g.add_argument("--services", metavar="LIST",
                   help=f"service times (null-co latency-ns) (default {mx.FULL_SERVICES})")
    g.add_argument("--engines", metavar="LIST",
                   help=f"--backend file|qcow2: the file node's aio= values (default "
                        f"{mx.FILE_ENGINES}; qcow2 {mx.QCOW2_ENGINES})")
    g.add_argument("--dir", metavar="DIR", type=Path,
                   help="--backend file|qcow2: where the images are written (default "
                        "/var/tmp)")
    g.add_argument("--cases", metavar="LIST",
                   help=f"--backend qcow2: of raw, qcow2 (allocated reads), alloc "
                        f"(allocating writes) (default {mx.QCOW2_CASES})")
    g.add_argument("--loads", metavar="LIST",
                   help=f"loads (default {mx.FULL_LOADS}; --backend file "
                        f"{mx.FILE_LOADS})")
    g.add_argument("--queues", metavar="LIST", default="1",
                   help="run every load on each of these numbers of queues, one "
                        "spindle-bench thread each (default %(default)s)")
    g.add_argument("--polls", metavar="LIST",
                   help="IOThread poll settings, both daemons alike (defaults below)")
    g.add_argument("--repeats", type=int, metavar="N",
                   help="runs per cell and daemon; the table shows medians (default 3; "
                        f"--backend file {mx.FILE_REPEATS}, nbd|rbd {mx.REMOTE_REPEATS})")
    g.add_argument("--runtime", type=float, metavar="S",
                   help="measured seconds per run (default 3, --quick 1)")
    g.add_argument("--ramp", type=float, metavar="S",
                   help="unmeasured seconds before each run (default 0.5, --quick 0.2)")
    g.add_argument("--idle", type=float, metavar="S",
                   help="seconds of idle CPU measurement after start and after the "
                        "loads, per daemon pair; 0 to skip (default 3, --quick 2)")
    g = p.add_argument_group("workload (passed to spindle-bench)")
    cli.add_workload_args(g, "seed of repeat 0; repeat r uses N+r, the same for both daemons",
                          completion=True)
    g = p.add_argument_group("machine")
    cli.add_cpu_args(g, "the CPU all threads of both daemons run on",
                     "the CPU spindle-bench runs on")
    g.add_argument("--disk-size", metavar="SIZE",
                   help="size of the null-co node or of the image (default 1G; "
                        f"--backend nbd|rbd {mx.REMOTE_DISK_SIZE})")
    g.add_argument("--server-cpu", type=int, metavar="CPU",
                   help="--backend nbd|rbd: the CPU the server's processes run on "
                        "(default: --bench-cpu)")
    g = p.add_argument_group("programs and output")
    cli.add_program_args(g, "bench-results/<timestamp>/")
    g.add_argument("--qsd", metavar="PROGRAM",
                   help="qemu-storage-daemon (default $SPINDLE_QSD, else from $PATH)")
    g.add_argument("--no-build", action="store_true", help="do not run make")
    g.add_argument("--no-plots", action="store_true", help="do not draw the PNGs")
    g.add_argument("--dry-run", action="store_true",
                   help="print the matrix, command lines and time estimate; run nothing")
    args = p.parse_args(argv)

    quick = args.quick
    qcow2_backend = args.backend == "qcow2"
    file = args.backend in ("file", "qcow2")
    remote_backend = args.backend if args.backend in remote.BACKENDS else None
    if args.backend != "null" and args.services:
        p.error(f"--services is for --backend null (--backend {args.backend} has no "
                "service time)")
    if not file and (args.engines or args.dir):
        p.error("--engines and --dir are for --backend file and qcow2")
    if not qcow2_backend and args.cases:
        p.error("--cases is for --backend qcow2")
    if not remote_backend and args.server_cpu is not None:
        p.error("--server-cpu is for --backend nbd and rbd")
    args.services = args.services or (mx.QUICK_SERVICES if quick else mx.FULL_SERVICES)
    args.polls = args.polls or (mx.REMOTE_POLLS if remote_backend else
                                mx.QCOW2_POLLS if qcow2_backend else mx.DEFAULT_POLLS)
    args.disk_size = args.disk_size or (mx.REMOTE_DISK_SIZE if remote_backend else "1G")
    if args.server_cpu is None:
        args.server_cpu = args.bench_cpu
    args.completion = args.completion or ("interrupt" if remote_backend else "poll")
    if qcow2_backend:
        args.loads = args.loads or mx.QCOW2_LOADS
        args.engines = args.engines or mx.QCOW2_ENGINES
        args.cases = args.cases or mx.QCOW2_CASES
    elif file:
        args.loads = args.loads or (mx.QUICK_FILE_LOADS if quick else mx.FILE_LOADS)
        args.engines = args.engines or mx.FILE_ENGINES
    if file:
        args.dir = args.dir or Path("/var/tmp")
    elif remote_backend:
        args.loads = args.loads or mx.REMOTE_LOADS
    else:
        args.loads = args.loads or (mx.QUICK_LOADS if quick else mx.FULL_LOADS)
    if args.repeats is None:
        args.repeats = (mx.REMOTE_REPEATS if remote_backend else
                        mx.FILE_REPEATS if file else 3)
    if args.runtime is None:
        args.runtime = 1.0 if quick else 3.0
    if args.ramp is None:
        args.ramp = 0.2 if quick else 0.5
    if args.idle is None:
        args.idle = 2.0 if quick else 3.0
    for name in ("runtime", "ramp", "idle"):
        if getattr(args, name) < 0 or (name == "runtime" and args.runtime == 0):
            p.error(f"--{name} must be {'positive' if name == 'runtime' else '>= 0'}")
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    if args.open_iodepth < 1:
        p.error("--open-iodepth must be at least 1")
    try:
        args.matrix = mx.Matrix(
            [0] if args.backend != "null" else mx.parse_services(args.services),
            mx.parse_polls(args.polls),
            mx.parse_loads(args.loads, args.open_iodepth, mx.parse_queues(args.queues)),
            args.repeats, mx.parse_engines(args.engines) if file else None,
            remote_backend, mx.parse_cases(args.cases) if qcow2_backend else None)
        args.disk_bytes = mx.parse_size(args.disk_size)
    except ValueError as e:
        p.error(str(e))
    if remote_backend and args.disk_bytes % (1 << 20):
        p.error(f"--disk-size must be a whole number of MiB for --backend "
                f"{remote_backend}")
    return args


def estimate_s(args):
    m = args.matrix
    per_run = args.ramp + args.runtime + RUN_OVERHEAD_S
    per_pair = SETTLE_S + 2 * args.idle + 0.5
    return m.runs() * per_run + len(m.pairs()) * per_pair


class Session:
    """One bench-compare run: the programs, the output and every record."""

    def __init__(self, args, programs, facts, out_dir):
        self.args = args
        self.programs = programs          # {"spindle", "qsd", "bench"}: Path
        self.facts = facts
        self.out_dir = out_dir
        self.log_dir = out_dir / "logs"
        self.sock_dir = None
        self.pairs = []
        self.idle = []
        self.runs = []
        self.started = datetime.datetime.now().astimezone()
        self.t0 = time.monotonic()
        self.run_no = 0
        self.backends = []
        self.image = None
        self.image_facts = None
        self.server = None
        self.qcow2 = None                 # --backend qcow2: qcow2.Images
        self.spent_images = []            # alloc copies, removed after the pair

    # -- the matrix ----------------------------------------------------------

    def run_matrix(self):
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # A short directory: a UNIX socket path has at most 107 bytes.
        self.sock_dir = tempfile.mkdtemp(prefix="sbc.", dir="/tmp")
        try:
            if self.args.backend in ("file", "qcow2"):
                self.image = image.create(self.args.dir, self.args.disk_bytes, say)
                self.image_facts = image.describe(self.image)
            if self.args.backend == "qcow2":
                self.qcow2 = qcow2.Images(self.image, self.args.disk_bytes, say)
            elif self.args.matrix.remote:
                self.server = remote.server(self.args.matrix.remote,
                                            f"{self.sock_dir}/server",
                                            self.args.disk_bytes,
                                            self.args.server_cpu, say)
                say(f"== {self.args.matrix.remote}: starting "
                    f"{self.server.describe()['server']} on CPU {self.args.server_cpu}")
                self.server.start()
            total = len(self.args.matrix.pairs())
            for group in self.groups():
                say(f"\n== {'; '.join(f'{i + 1}/{total}: {p.label}' for i, p in group)}"
                    f" ({fmt_duration(time.monotonic() - self.t0)} so far)")
                self.run_group(group)
                self.write_json(complete=False)
        finally:
            self.stop_backends()
            if self.server:
                self.server.stop()
            shutil.rmtree(self.sock_dir, ignore_errors=True)
            if self.image:
                self.image.unlink(missing_ok=True)
            if self.qcow2:
                self.qcow2.cleanup()

    def groups(self):
        """The numbered pairs in the groups whose daemons run together: each
        pair alone, but with --backend qcow2 the raw and the qcow2 pair of an
        engine and poll setting together, their runs alternating, so that
        the disk's drift over minutes does not enter the qcow2/raw ratio."""
        groups = []
        for i, pair in enumerate(self.args.matrix.pairs()):
            mate = next((g for g in groups if pair.case == "qcow2" and len(g) == 1
                         and g[0][1] == mx.Pair(0, pair.poll, pair.engine, case="raw")),
                        None)
            if mate:
                mate.append((i, pair))
            else:
                groups.append([(i, pair)])
        return groups

    def start_backends(self, index, pair):
        """Both daemons of the pair, started, as {flavour: Backend}; they
        join self.backends."""
        started = [self.new_backend(flavour, index, pair) for flavour in FLAVOURS]
        self.backends += started
        for b in started:
            b.start()
        return {b.flavour: b for b in started}

    def new_backend(self, flavour, index, pair):
        """A Backend for the pair, not started; with the alloc case, on a
        fresh copy of the empty qcow2 image (b.image, its own)."""
        tag = f"{index}-{pair.medium}-{pair.poll.name}"
        socket = f"{self.sock_dir}/{flavour}{index}.sock"
        fresh = self.qcow2.fresh(flavour) if pair.case == "alloc" else None
        b = Backend(flavour, self.programs[flavour], socket, pair.service_ns,
                    pair.poll, self.args.daemon_cpu, self.args.disk_bytes,
                    self.log_dir / f"{flavour}-{tag}.log",
                    args=self.daemon_args(socket, pair, fresh))
        b.image = fresh
        return b

    def daemon_args(self, socket, pair, fresh=None):
        node = self.server.node() if self.server else None
        if pair.case:
            node = qcow2.node_args(pair.case, fresh or self.qcow2.image_of(pair.case),
                                   pair.engine)
        return daemon_args(socket, pair.service_ns, pair.poll, self.args.disk_bytes,
                           image=self.image, engine=pair.engine,
                           num_queues=self.args.matrix.max_queues, node=node)

    def renew(self, backends, index, pair, flavour):
        """The alloc case: stop the flavour's daemon and start a new one on a
        fresh copy.  The old copy is removed after the pair's last run: on a
        file system mounted with discard, removing a file of a GiB takes the
        disk's attention for a minute or more, which the next run must not
        share."""
        old = backends[flavour]
        old.close()
        self.spent_images.append(old.image)
        b = self.new_backend(flavour, index, pair)
        self.backends[self.backends.index(old)] = b
        backends[flavour] = b
        return b.start()

    def stop_backends(self):
        for b in self.backends:
            b.close()
            if b.image:
                self.spent_images.append(b.image)
        for path in self.spent_images:
            path.unlink(missing_ok=True)
        self.spent_images = []

    def run_group(self, group):
        """Start both daemons of every (index, pair) of the group, run every
        load on each pair's, repeat by repeat (the daemons' order and the
        pairs' order alternate per repeat), then stop them all."""
        args = self.args
        started = [(index, pair, self.start_pair(index, pair)) for index, pair in group]
        if args.idle > 0:
            time.sleep(SETTLE_S)
            for _, pair, (_, backends) in started:
                self.measure_idle(pair, backends, "after start")

        for load in args.matrix.loads:
            for rep in range(args.repeats):
                order = FLAVOURS if rep % 2 == 0 else tuple(reversed(FLAVOURS))
                for index, pair, (_, backends) in (started if rep % 2 == 0
                                                   else started[::-1]):
                    cell = mx.Cell(pair, load)
                    for position, flavour in enumerate(order):
                        b = backends[flavour]
                        if pair.case == "alloc" and b.runs_done:
                            b = self.renew(backends, index, pair, flavour)
                        self.run_one(cell, b, rep, position)

        for _, pair, (record, backends) in started:
            if args.idle > 0:
                self.measure_idle(pair, backends, "after load")
            for f, b in backends.items():
                record.setdefault("exit_status", {})[f] = b.stop()
                record.setdefault("restarts", {})[f] = b.restarts
                record.setdefault("stats_lines", {})[f] = b.stats_lines()
        self.stop_backends()
        self.backends = []

    def start_pair(self, index, pair):
        """The pair's record (in self.pairs) and its started daemons."""
        record = {"service_ns": pair.service_ns, "engine": pair.engine,
                  "medium": pair.medium, "poll": pair.poll.name,
                  "poll_max_ns": pair.poll.max_ns, "commands": {}, "pids": {},
                  "affinity": {}}
        self.pairs.append(record)
        backends = self.start_backends(index, pair)
        for f, b in backends.items():
            record["commands"][f] = b.command
            record["pids"][f] = b.pid
            record["affinity"][f] = b.affinity
            say(f"{DISPLAY[f]} pid {b.pid}: {' '.join(b.command)}")
        return record, backends

    def measure_idle(self, pair, backends, when):
        pct = measure_idle(backends.values(), self.args.idle)
        self.idle.append({"service_ns": pair.service_ns, "medium": pair.medium,
                          "poll": pair.poll.name,
                          "when": when, "seconds": self.args.idle, "percent": pct})
        of = f" of {pair.medium}" if pair.case else ""
        say(f"idle CPU{of} {when} ({self.args.idle:g} s): " + ", ".join(
            f"{DISPLAY[f]} {'-' if v is None else f'{v:.4f}'}% of a core"
            for f, v in pct.items()))

    def run_one(self, cell, backend, rep, position):
        args = self.args
        if cell.pair.case:
            args = argparse.Namespace(**{**vars(args),
                                         "rw": qcow2.case_rw(cell.pair.case, args.rw)})
        self.run_no += 1
        backend.runs_done += 1
        total = args.matrix.runs()
        timeout = args.ramp + args.runtime + runner.RUN_SLACK_S
        restarted = []

        def before_retry():
            if backend.ensure_running():
                restarted.append(backend.pid)
            # The pid may have changed.
            cmd[:] = runner.bench_command(args, backend.socket, cell.load,
                                          backend.pid, args.seed + rep)

        backend.ensure_running()
        cmd = runner.bench_command(args, backend.socket, cell.load, backend.pid,
                                   args.seed + rep)
        server_before, t0 = self.server_cpu_ns(), time.monotonic()
        image_before = backend.image.stat().st_size if backend.image else None
        result, attempts = runner.run_with_retry(cmd, timeout, before_retry,
                                                 preexec_fn=die_with_parent())
        self.add_server_cpu(result, server_before, time.monotonic() - t0)
        if result is not None and backend.image:
            result["qcow2_clusters_per_write"] = qcow2.clusters_per_write(
                backend.image, image_before, result.get("ios"))
        self.runs.append({
            "cell": cell.key, "service_ns": cell.pair.service_ns,
            "medium": cell.pair.medium, "poll": cell.pair.poll.name,
            "load": cell.load.name, "queues": cell.load.queues,
            "daemon": backend.flavour, "repeat": rep, "position": position,
            "command": cmd, "attempts": attempts, "daemon_restarted": bool(restarted),
            "ok": result is not None, "result": result})
        prefix = (f"[{self.run_no:>{len(str(total))}}/{total}] {cell.key:<18} "
                  f"#{rep} {backend.name:<19}")
        if result is None:
            say(f"{prefix} FAILED twice: {attempts[-1]['error']}")
            if (len(self.runs) >= FIRST_FAILURES_FATAL
                    and not any(r["ok"] for r in self.runs)):
                raise SystematicFailure(
                    f"the first {len(self.runs)} runs all failed; the last with "
                    f"{attempts[-1]['error']}\n  command: {' '.join(map(str, cmd))}")
            return
        m = report.metrics(result)
        retry = f" (after a retry: {attempts[0]['error']})" if len(attempts) > 1 else ""
        say(f"{prefix} p50 {report.sig3(m['p50_us']):>6} us  p99 "
            f"{report.sig3(m['p99_us']):>6} us  {report.si(m['iops']):>6} IOPS  "
            f"{report.sig3(m['cpu_us_per_io']):>6} us CPU/IO{retry}")

    def server_cpu_ns(self):
        return self.server.cpu_ns() if self.server else None

    def add_server_cpu(self, result, before, seconds):
        """The server's CPU per I/O while the run went on, into its result:
        its CPU time over the whole run (ramp and connection included) over
        the I/Os the run's IOPS make in that time, so a slight overestimate."""
        after = self.server_cpu_ns()
        if result is None or before is None or after is None or not result.get("iops"):
            return
        result["server_cpu_us_per_io"] = (after - before) / 1000 / (result["iops"]
                                                                   * seconds)

    # -- output --------------------------------------------------------------

    def results(self, complete, summary=None, goals=None, plots=None):
        args = self.args
        opts = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                if k not in ("matrix",)}
        m = args.matrix
        return {
            "tool": "bench-compare", "format": 1, "complete": complete,
            "started": self.started.isoformat(timespec="seconds"),
            "wall_s": round(time.monotonic() - self.t0, 1),
            "machine": self.facts,
            "pinning": {"daemon_cpu": args.daemon_cpu, "bench_cpu": args.bench_cpu,
                        "note": "all threads of each daemon share the daemon CPU; "
                                "both daemons run at once, the idle one waits"},
            "options": opts,
            "matrix": {"backend": args.backend, "services_ns": m.services,
                       "engines": m.engines, "polls": [p.name for p in m.polls],
                       "loads": [{"name": l.name, "iodepth": l.iodepth, "rate": l.rate,
                                  "queues": l.queues} for l in m.loads],
                       "repeats": m.repeats},
            "image": ({"bytes": args.disk_bytes, **self.image_facts}
                      if self.image_facts else None),
            "server": self.server.describe() if self.server else None,
            "pairs": self.pairs, "idle": self.idle, "runs": self.runs,
            "summary": summary, "goals": goals,
            "plots": [str(p) for p in plots] if plots else None,
        }

    def write_json(self, complete, **extra):
        return machine.write_json(self.out_dir / "results.json",
                                  self.results(complete, **extra))


def prepare(args, out_dir):
    """Dependencies, build, programs; returns ({name: path}, facts, warning)."""
    build_dir = (args.build.resolve() if args.build else machine.default_build_dir())
    if not args.skip_deps and not args.dry_run:
        say("== dependencies (scripts/install-deps.sh)")
        machine.install_deps(say)
    if not args.no_build and not args.dry_run:
        say(f"== build ({build_dir})")
        out_dir.mkdir(parents=True, exist_ok=True)
        machine.build(build_dir, out_dir / "build.log")
    programs = machine.bench_programs(build_dir, args.bench)
    programs["qsd"] = machine.find_qsd(args.qsd)
    machine.check_tools(programs["spindle"], programs["bench"], programs["qsd"])
    args.bench = programs["bench"]
    warning = machine.check_cpus(args.daemon_cpu, args.bench_cpu)
    if not args.no_plots and not args.dry_run:
        machine.require_matplotlib()
    return programs, machine.facts(programs["spindle"], programs["bench"],
                                   programs["qsd"]), warning


def print_plan(args, facts, warning):
    m = args.matrix
    say(f"machine: {facts['nproc']} CPUs, {facts['cpu_model']}, Linux {facts['kernel']}")
    say(f"programs: spindle {facts['spindle_git_describe'] or '?'} "
        f"({facts['spindle']}), {facts['qemu_version']}, {facts['spindle_bench']}")
    say(f"pinning: every thread of each daemon (main loop, IOThread, helpers) shares CPU "
        f"{args.daemon_cpu}; spindle-bench runs on CPU {args.bench_cpu}")
    if warning:
        say(f"warning: {warning}")
    if m.cases:
        media = (f"qcow2 cases {', '.join(m.cases)}, engines {', '.join(m.engines)} "
                 f"({args.disk_size} images in {args.dir}, cache.direct=on)")
    elif m.engines:
        media = (f"file engines {', '.join(m.engines)} (a {args.disk_size} image in "
                 f"{args.dir}, cache.direct=on)")
    elif m.remote:
        media = (f"driver {m.remote} (a {args.disk_size} image, the server on CPU "
                 f"{args.server_cpu})")
    else:
        media = f"service {', '.join(mx.format_service(s) for s in m.services)}"
    say(f"matrix: {media}; "
        f"poll {', '.join(p.name for p in m.polls)}; "
        f"loads {', '.join(l.name for l in m.loads)}; "
        f"{m.repeats} repeats; {args.rw} {args.bs}, completion={args.completion}, "
        f"ramp {args.ramp:g} s + runtime {args.runtime:g} s")
    say(f"{len(m.cells())} cells x {m.repeats} repeats x 2 daemons = {m.runs()} runs, "
        f"about {fmt_duration(estimate_s(args))}")


def print_dry_run(args, programs):
    pairs = args.matrix.pairs()
    if args.matrix.cases:       # the first pair of each case
        pairs = [next(p for p in pairs if p.case == c) for c in args.matrix.cases]
    say("\ncommand lines of the first pair" + (" of each case" if args.matrix.cases
                                                else "") +
        " (SOCK in a temporary directory):")
    for pair in pairs:
        for flavour in FLAVOURS:
            socket = f"/tmp/sbc.XXXX/{flavour}0.sock"
            say("  " + " ".join(Backend(flavour, programs[flavour], socket,
                                        pair.service_ns, pair.poll, args.daemon_cpu,
                                        args.disk_bytes, os.devnull,
                                        args=dry_run_args(args, socket, pair)).command))
    say("spindle-bench, one per load" + (" (the alloc case with --rw=randwrite):"
                                         if "alloc" in (args.matrix.cases or ()) else ":"))
    for load in args.matrix.loads:
        say("  " + " ".join(runner.bench_command(args, "/tmp/sbc.XXXX/spindle0.sock",
                                                 load, "PID", args.seed)))


def dry_run_args(args, socket, pair):
    """daemon_args() with placeholder paths for what a run would create."""
    node = None
    if pair.remote:
        node = remote.server(pair.remote, "/tmp/sbc.XXXX/server", args.disk_bytes,
                             args.server_cpu).node()
    elif pair.case:
        node = qcow2.node_args(pair.case, args.dir / {
            "raw": "bench-compare-XXXX.img", "qcow2": "bench-compare-XXXX.qcow2",
            "alloc": "bench-compare-XXXX.FLAVOUR.N.qcow2"}[pair.case], pair.engine)
    return daemon_args(socket, pair.service_ns, pair.poll, args.disk_bytes,
                       image=(args.dir / "bench-compare-XXXX.img"
                              if pair.engine else None),
                       engine=pair.engine, num_queues=args.matrix.max_queues,
                       node=node)


def finish(session, args):
    """Summary, table, goals, plots, files; returns the exit status."""
    cells = args.matrix.cells()
    summary = report.summarize(cells, session.runs)
    file = args.backend == "file"
    if args.matrix.cases:
        goals = report.evaluate_qcow2_goals(summary)
    elif file:
        goals = report.evaluate_file_goals(summary)
    elif args.matrix.remote:
        goals = report.evaluate_remote_goals(summary)
    else:
        goals = report.evaluate_goals(summary, session.idle)
    note = machine.machine_note(session.facts, args.daemon_cpu, args.bench_cpu)
    if session.image_facts:
        img = session.image_facts
        note += (f"; a {args.disk_size} image on {img['device']} ({img['fs']}) in "
                 f"{img['dir']}")
    if session.server:
        srv = session.server.describe()
        note += f"; {srv['server']} on CPU {srv['cpu']}"
    table = report.format_table(
        summary, "image" if args.matrix.cases else "engine" if file else
        "driver" if args.matrix.remote else "service",
        report.SERVER_COLUMNS if args.matrix.remote else
        report.QCOW2_COLUMNS if args.matrix.cases else ())
    goal_lines = report.format_goals(goals)
    wall = time.monotonic() - session.t0
    header = [f"bench-compare {session.started:%Y-%m-%d %H:%M}: {note}",
              f"{args.rw} {args.bs}, completion={args.completion}, ramp {args.ramp:g} s + "
              f"runtime {args.runtime:g} s, median of {args.repeats}; "
              f"spindle {session.facts['spindle_git_describe']}, "
              f"{session.facts['qemu_version']}"]
    say("\n" + "\n".join(header))
    say("\n".join(table))
    say("\n" + "\n".join(goal_lines))

    def draw():
        from . import plots as plotting
        return plotting.draw_all(summary, session.runs, args.matrix,
                                 f"{note}; {args.rw} {args.bs}", session.out_dir)

    failed = [k for k, e in summary.items() if any(e[f]["ok"] == 0 for f in FLAVOURS)]
    return cli.finish("bench-compare", args, session, draw, "the plots",
                      {"summary": summary, "goals": goals},
                      header + [""] + table + [""] + goal_lines, wall,
                      f"daemon logs: {session.log_dir}/", failed,
                      "cells that failed on a daemon in every repeat")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    started = cli.begin("bench-compare", args, stamp, prepare, print_plan,
                        print_dry_run)
    if isinstance(started, int):
        return started
    programs, facts, out_dir = started
    session = Session(args, programs, facts, out_dir)
    try:
        session.run_matrix()
    except (BackendError, SystematicFailure, image.ImageError,
            remote.RemoteError) as e:
        print(f"bench-compare: {e}", file=sys.stderr)
        path = session.write_json(complete=False)
        print(f"bench-compare: partial results: {path}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted):
        path = session.write_json(complete=False)
        print(f"\nbench-compare: interrupted; daemons stopped; partial results: {path}",
              file=sys.stderr)
        return 130
    return finish(session, args)

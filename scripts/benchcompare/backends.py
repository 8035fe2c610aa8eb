"""The two daemons under test, started with one command line.

Spindle's command line follows qemu-storage-daemon's, so both get the same
arguments after the program name (only the program differs):

    --object iothread,id=iot0[,poll-max-ns=N]
    --blockdev driver=null-co,node-name=n0,size=BYTES,read-zeroes=off[,latency-ns=L]
    --export type=vhost-user-blk,id=e0,node-name=n0,addr.type=unix,
             addr.path=SOCK,writable=on,num-queues=1,iothread=iot0

(`size` is given in bytes: QEMU 7.2's null-co does not take a suffix.)
With --backend file the node is a preconditioned raw image instead:

    --blockdev driver=file,node-name=n0,filename=IMAGE,aio=ENGINE,cache.direct=on,locking=off

and the export has as many queues as the loads use most (num-queues=N).
Both daemons stay up for the whole run and take turns on the one image, so
neither may lock it: Spindle takes the lock bytes QEMU's file driver takes,
and the second daemon would be refused.  Only one of them does I/O at a
time.
With --backend nbd or rbd the node is the remote server's image, with the
same options for both (scripts/benchcompare/remote.py); with --backend
qcow2 a qcow2 node over such a file node (scripts/benchcompare/qcow2.py).

Each daemon runs under `taskset -c CPU`, so all of its threads (main loop,
IOThread, QEMU's RCU and worker threads) share that one CPU; the affinity
of every thread is checked once it is ready.  A Backend is the functional
tests' launcher (tests/functional/spindle_daemon.py): readiness is the
export socket listening in /proc/net/unix, so nothing connects before the
benchmark does.  Each daemon gets PR_SET_PDEATHSIG with SIGKILL, so a
killed bench-compare does not leave it behind (SIGKILL, not SIGTERM:
qemu-storage-daemon 7.2 was seen to hang in its SIGTERM shutdown after its
front-end died in the middle of a run).
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "functional"))
from spindle_daemon import (  # noqa: E402,F401  (die_with_parent: re-exported)
    Daemon, DaemonError, die_with_parent)

FLAVOURS = ("spindle", "qsd")
DISPLAY = {"spindle": "spindle", "qsd": "qemu-storage-daemon"}
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BackendError(RuntimeError):
    """A daemon did not start or died; the message says why."""


def daemon_args(socket, service_ns, poll, size_bytes, image=None, engine=None,
                num_queues=1, node=None):
    """The arguments after the program name; the same for both daemons.
    With `image` and `engine`, the node is that file (O_DIRECT) instead of
    null-co; with `node`, those --blockdev options (a list: one --blockdev
    each, the last one the exported node n0)."""
    if image and not node:
        node = (f"driver=file,node-name=n0,filename={image},aio={engine},"
                "cache.direct=on,locking=off")
    elif not node:
        node = f"driver=null-co,node-name=n0,size={size_bytes},read-zeroes=off"
        if service_ns:
            node += f",latency-ns={service_ns}"
    export = ("type=vhost-user-blk,id=e0,node-name=n0,addr.type=unix,"
              f"addr.path={socket},writable=on,num-queues={num_queues},"
              "iothread=iot0")
    nodes = node if isinstance(node, list) else [node]
    return ["--object", f"iothread,id=iot0{poll.iothread_props()}",
            *(a for n in nodes for a in ("--blockdev", n)),
            "--export", export]


def thread_cpu_ns(pid):
    """CPU time of all threads of `pid` so far, in ns, or None if it is gone.

    From /proc/PID/task/TID/schedstat (ns on the CPU), else from utime+stime
    in /proc/PID/task/TID/stat (clock ticks).
    """
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        try:
            with open(f"{base}/schedstat") as f:
                total += int(f.read().split()[0])
            continue
        except (OSError, ValueError, IndexError):
            pass
        try:
            with open(f"{base}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            # After "(comm)": state is field 3, utime 14, stime 15.
            total += (int(fields[11]) + int(fields[12])) * 10**9 // CLK_TCK
        except (OSError, ValueError, IndexError):
            pass    # the thread just ended
    return total


def thread_affinities(pid):
    """{"comm/tid": "Cpus_allowed_list"} for each thread of `pid`."""
    out = {}
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("Cpus_allowed_list:"):
                        out[f"{comm}/{tid}"] = line.split(":", 1)[1].strip()
        except OSError:
            pass
    return out


class Backend(Daemon):
    """One daemon: spindle or qemu-storage-daemon, pinned to one CPU."""

    def __init__(self, flavour, program, socket, service_ns, poll, cpu,
                 size_bytes, log_path, args=None, more_sockets=()):
        """`args`, if given, replaces daemon_args() (service_ns, poll and
        size_bytes are then unused); start() waits for `socket` and every
        one of `more_sockets` (more exports, a QMP monitor) to listen."""
        self.flavour = flavour
        self.socket = str(socket)
        self.sockets = [self.socket, *map(str, more_sockets)]
        self.cpu = cpu
        self.args = (list(args) if args is not None
                     else daemon_args(self.socket, service_ns, poll, size_bytes))
        # taskset execs the daemon: the pid is the daemon's.
        super().__init__("taskset", ["-c", str(cpu), str(program), *self.args],
                         log_path=log_path, ready=self.sockets,
                         name=DISPLAY[flavour], pdeathsig=signal.SIGKILL)
        self.program = str(program)
        self.affinity = {}
        self.restarts = 0
        self.image = None       # an image file of its own (--backend qcow2, alloc)
        self.runs_done = 0

    def _open_log(self):
        # Every start of the daemon goes to one log, after its command.
        log = open(self.log_path, "a")
        log.write(f"$ {' '.join(self.command)}\n")
        log.flush()
        return log

    def start(self, timeout=10.0):
        """Start the daemon and wait until its socket listens."""
        try:
            super().start(timeout)
        except DaemonError as e:
            raise BackendError(str(e)) from None
        self._check_pinning()
        return self

    def _check_pinning(self):
        """Every thread on self.cpu; re-pin with taskset -a -p if not."""
        want = str(self.cpu)
        self.affinity = thread_affinities(self.pid)
        if all(v == want for v in self.affinity.values()):
            return
        subprocess.run(["taskset", "-a", "-p", "-c", want, str(self.pid)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.affinity = thread_affinities(self.pid)
        if not all(v == want for v in self.affinity.values()):
            raise BackendError(f"could not pin {self.name}'s threads to CPU {want}: "
                               f"{self.affinity}")

    def ensure_running(self):
        """Restart the daemon if it died (after a crash in a run). True if it had to."""
        if self.alive():
            return False
        status = self.wait()
        with open(self.log_path, "a") as log:
            log.write(f"bench-compare: {self.name} had exited with status "
                      f"{status}; restarting it\n")
        self.restarts += 1
        self.start()
        return True

    def cpu_ns(self):
        """CPU time of the daemon's threads so far (ns), None if not running."""
        return thread_cpu_ns(self.pid) if self.alive() else None

    def stop(self, sig=signal.SIGTERM, timeout=5.0):
        """SIGTERM, wait (SIGKILL after `timeout`); return the exit status."""
        return super().stop(sig, timeout)

    def output(self):
        """Everything the daemon printed (all its starts)."""
        return self.stderr()

    def stats_lines(self):
        """The statistics lines Spindle prints at exit (none from qsd)."""
        return [line for line in self.output().splitlines() if " stats: " in line]

    def _tail(self, n=15):
        lines = self.output().splitlines()[-n:]
        return "\n".join("    " + line for line in lines)

    def close(self):
        self.stop()


def measure_idle(backends, seconds):
    """% of a core each backend used over `seconds` of doing nothing.

    Returns {flavour: percent}, or None for a daemon that was not running.
    """
    before = {b.flavour: b.cpu_ns() for b in backends}
    t0 = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    after = {b.flavour: b.cpu_ns() for b in backends}
    out = {}
    for flavour in before:
        if before[flavour] is None or after[flavour] is None:
            out[flavour] = None
        else:
            out[flavour] = 100.0 * (after[flavour] - before[flavour]) / (elapsed * 1e9)
    return out

"""The storage behind both daemons with --backend nbd and --backend rbd.

The harness starts the server itself, before the first pair, and stops it
at the end (also when the run is interrupted); both daemons then open the
same image on it with the same --blockdev options, so the only difference
between their runs is the daemon:

    nbd: driver=nbd,node-name=n0,server.type=unix,server.path=SOCK
    rbd: driver=rbd,node-name=n0,pool=rbd,image=bench,conf=CONF,cache.direct=on

NBD server: nbdkit's memory plugin with allocator=malloc (one flat buffer),
not qemu-nbd over a file.  Every request then costs the server a memcpy
and nothing else: no page cache or disk behind it whose state changes from
run to run, so the server's own cost is the lowest and the steadiest the
NBD path can have and what is left is the client's (the daemon's) share.
qemu-nbd over a file puts its own block layer and the host's page cache
(or, with O_DIRECT, the disk) behind every request.

Ceph: the single-node test cluster of the functional tests
(tests/functional/ceph_cluster.py, one monitor and one OSD on BlueStore in
a sparse file, no authentication), reused as it is.  The image is written
in full first (`rbd bench --io-type write`): a read of an object never
written is answered by the OSD without reading anything, much cheaper
than a real one.  cache.direct=on turns librbd's cache off in both daemons
(rbd_cache=false), so every read reaches the OSD.

The server's processes (nbdkit; ceph-mon and ceph-osd) run pinned to
--server-cpu (default: --bench-cpu), away from the daemons' CPU: their CPU
time is not the daemons', and the daemons' CPU per I/O stays theirs alone.
cpu_ns() gives the server's CPU time so far (all its threads), which the
harness reads around every run.
"""

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .backends import ROOT, thread_cpu_ns, die_with_parent

sys.path.insert(0, str(ROOT / "tests" / "functional"))
from ceph_cluster import POOL, CephCluster, CephUnavailable  # noqa: E402

BACKENDS = ("nbd", "rbd")
RBD_IMAGE = "bench"
START_TIMEOUT_S = 10


class RemoteError(RuntimeError):
    """The server did not start; the message says why."""


def _pin(pid, cpu):
    """Every thread of pid (started or to come) on cpu."""
    subprocess.run(["taskset", "-a", "-p", "-c", str(cpu), str(pid)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class NbdServer:
    """nbdkit memory (allocator=malloc) on a UNIX socket in directory."""

    program = "nbdkit"

    def __init__(self, directory, size_bytes, cpu):
        self.dir = Path(directory)
        self.size = size_bytes
        self.cpu = cpu
        self.sock = self.dir / "nbd.sock"
        self.proc = None
        self.command = ["taskset", "-c", str(cpu), "nbdkit", "-f",
                        "--exit-with-parent", "-U", str(self.sock),
                        "-P", str(self.dir / "nbd.pid"), "memory",
                        f"size={size_bytes}", "allocator=malloc"]

    def start(self):
        if not shutil.which("nbdkit"):
            raise RemoteError("nbdkit is not installed (apt-get install nbdkit)")
        self.dir.mkdir(parents=True, exist_ok=True)
        pidfile = self.dir / "nbd.pid"
        self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE,
                                     preexec_fn=die_with_parent(signal.SIGKILL))
        deadline = time.monotonic() + START_TIMEOUT_S
        while not pidfile.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RemoteError(f"nbdkit did not start: "
                                  f"{self.proc.stderr.read().decode().strip()}")
            time.sleep(0.05)
        return self

    def node(self):
        return f"driver=nbd,node-name=n0,server.type=unix,server.path={self.sock}"

    def pids(self):
        return [self.proc.pid] if self.proc else []

    def describe(self):
        return {"server": "nbdkit memory, allocator=malloc", "cpu": self.cpu,
                "command": self.command, "bytes": self.size}

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc and self.proc.stderr:
            self.proc.stderr.close()

    def cpu_ns(self):
        return _cpu_ns(self.pids())


class RbdServer:
    """The test cluster, with one image written in full."""

    program = "ceph-osd"

    def __init__(self, directory, size_bytes, cpu, say=print):
        self.cluster = CephCluster(Path(directory))
        self.size = size_bytes
        self.cpu = cpu
        self.say = say

    def start(self):
        try:
            self.cluster.start()
        except (CephUnavailable, subprocess.SubprocessError, OSError,
                RuntimeError) as e:
            self.stop()
            raise RemoteError(f"the Ceph test cluster did not start: {e}") from None
        mib = self.size >> 20
        self.say(f"== rbd: image {POOL}/{RBD_IMAGE}, {mib} MiB, written in full")
        try:
            for pid in self.pids():
                _pin(pid, self.cpu)
            self.cluster.rbd("create", "--size", f"{mib}M", RBD_IMAGE)
            self.cluster.rbd("bench", "--io-type", "write", "--io-pattern", "seq",
                             "--io-size", "4M", "--io-threads", "4",
                             "--io-total", f"{mib}M", RBD_IMAGE, timeout=600)
        except (RuntimeError, subprocess.SubprocessError) as e:
            self.stop()
            raise RemoteError(f"preparing the cluster's image: {e}") from None
        return self

    def node(self):
        return (f"driver=rbd,node-name=n0,pool={POOL},image={RBD_IMAGE},"
                f"conf={self.cluster.conf},cache.direct=on")

    def pids(self):
        return [p.pid for p in self.cluster.procs.values() if p.poll() is None]

    def describe(self):
        return {"server": f"single-node Ceph ({self.cluster.objectstore}), "
                          "one monitor and one OSD",
                "cpu": self.cpu, "conf": str(self.cluster.conf), "bytes": self.size}

    def stop(self):
        self.cluster.stop()

    def cpu_ns(self):
        return _cpu_ns(self.pids())


def _cpu_ns(pids):
    """CPU time of all threads of pids so far, or None if one is gone."""
    total = 0
    for pid in pids:
        ns = thread_cpu_ns(pid)
        if ns is None:
            return None
        total += ns
    return total if pids else None


def server(backend, directory, size_bytes, cpu, say=print):
    """The (not yet started) server of --backend nbd or rbd."""
    if backend == "nbd":
        return NbdServer(directory, size_bytes, cpu)
    return RbdServer(directory, size_bytes, cpu, say)

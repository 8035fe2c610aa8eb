"""Start a vhost-user-blk back-end (spindle or qemu-storage-daemon) for a guest.

Both daemons take the same command line for a vhost-user-blk export
(DESIGN.md section 6), so one function builds it for either:

    --object iothread,id=iot0[,poll-max-ns=N]
    --blockdev driver=file,node-name=d0,filename=IMG
    --export type=vhost-user-blk,id=e0,node-name=d0,addr.type=unix,
             addr.path=SOCK,writable=on,num-queues=N,iothread=iot0[,serial=S]

A ScsiExport (spindle only) gives, with LUN N = luns[N]:

    --blockdev driver=file,node-name=dIlN,filename=IMG   (for each LUN N)
    --export type=vhost-user-scsi,id=eI,addr.type=unix,addr.path=SOCK,
             num-queues=N,iothread=iot0,lun.N.node-name=dIlN[,lun.N.KEY=V]

`serial=` is Spindle's addition; qemu-storage-daemon 7.2 rejects it (its
vhost-user-blk serial is fixed), so it is only passed to spindle.  So is a
list of IOThreads (`iothread.0=a,iothread.1=b`: queue i runs in the i % n-th).

A Daemon is ready when every export's socket is listening, which is read
from /proc/net/unix, so readiness is checked without connecting (a
vhost-user-blk server serves one client at a time).  stop() sends SIGTERM,
waits, and returns the exit status; stderr is kept for the test to show or
parse (IOThread statistics, for example).
"""

import os
import shutil
import signal
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

QSD_NAME = "qemu-storage-daemon"
# A line the daemon prints for each IOThread when it exits (or on SIGUSR1):
#   spindle: iothread iot0 stats: turns=N poll_hits=N ...
STATS_MARKER = " stats: "


def die_with_parent(sig=signal.SIGTERM):
    """A preexec_fn: the child gets `sig` when the process that started it dies.

    Keeps a killed test run from leaving daemons (or QEMU) behind.
    """
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PDEATHSIG = 1

    def preexec():
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    return preexec


def find_qsd():
    """Path of qemu-storage-daemon ($SPINDLE_QSD overrides), or None."""
    env = os.environ.get("SPINDLE_QSD")
    if env:
        return Path(env) if os.access(env, os.X_OK) else None
    path = shutil.which(QSD_NAME)
    return Path(path) if path else None


@dataclass
class Export:
    """One vhost-user-blk export of an image file."""
    image: str
    socket: str
    num_queues: int = 1
    writable: bool = True
    serial: str = None
    logical_block_size: int = None
    iothread: str = "iot0"       # or a list of ids (spindle only)
    node_opts: str = ""          # more ",key=value" for --blockdev
    blockdev: str = None         # instead of the file node, e.g.
                                 # "driver=null-co,size=1G" (image unused)


@dataclass
class ScsiLun:
    """One LUN of a ScsiExport: an image file and its lun.N.* options."""
    image: str
    writable: bool = None        # None: the daemon's default (off)
    node_opts: str = ""          # more ",key=value" for --blockdev
    props: dict = None           # lun.N.KEY=VALUE: serial, vendor, wwn...
    blockdev: str = None         # instead of the file node, e.g.
                                 # "driver=null-co,size=1G" (image unused)


@dataclass
class ScsiExport:
    """A vhost-user-scsi export (spindle only); LUN N is luns[N]."""
    luns: list
    socket: str
    num_queues: int = 1
    iothread: str = "iot0"


def export_args(exports, flavour, iothread_props=""):
    """The command-line arguments (after the program name) for `exports`.

    `flavour` is "spindle" or "qsd"; it only decides whether serial= is
    passed.  Every IOThread the exports name is created once, with
    `iothread_props` (",poll-max-ns=..." for example) appended.
    """
    args = []
    seen = []
    for exp in exports:
        for iot in _iothreads(exp):
            if iot not in seen:
                seen.append(iot)
                args += ["--object", f"iothread,id={iot}{iothread_props}"]
    for i, exp in enumerate(exports):
        if isinstance(exp, ScsiExport):
            args += _scsi_export_args(exp, i)
            continue
        node = f"d{i}"
        if exp.blockdev:
            args += ["--blockdev", f"{exp.blockdev},node-name={node}"]
        else:
            args += ["--blockdev", f"driver=file,node-name={node},"
                                   f"filename={exp.image}{exp.node_opts}"]
        opts = [
            "type=vhost-user-blk", f"id=e{i}", f"node-name={node}",
            "addr.type=unix", f"addr.path={exp.socket}",
            f"writable={'on' if exp.writable else 'off'}",
            f"num-queues={exp.num_queues}",
        ]
        iothreads = _iothreads(exp)
        if len(iothreads) == 1:
            opts.append(f"iothread={iothreads[0]}")
        else:
            opts += [f"iothread.{n}={iot}" for n, iot in enumerate(iothreads)]
        if exp.logical_block_size:
            opts.append(f"logical-block-size={exp.logical_block_size}")
        if exp.serial is not None and flavour == "spindle":
            opts.append(f"serial={exp.serial}")
        args += ["--export", ",".join(opts)]
    return args


def _scsi_export_args(exp, i):
    args = []
    opts = ["type=vhost-user-scsi", f"id=e{i}", "addr.type=unix",
            f"addr.path={exp.socket}", f"num-queues={exp.num_queues}"]
    iothreads = _iothreads(exp)
    if len(iothreads) == 1:
        opts.append(f"iothread={iothreads[0]}")
    else:
        opts += [f"iothread.{n}={iot}" for n, iot in enumerate(iothreads)]
    for n, lun in enumerate(exp.luns):
        node = f"d{i}l{n}"
        if lun.blockdev:
            args += ["--blockdev", f"{lun.blockdev},node-name={node}"]
        else:
            args += ["--blockdev", f"driver=file,node-name={node},"
                                   f"filename={lun.image}{lun.node_opts}"]
        opts.append(f"lun.{n}.node-name={node}")
        if lun.writable is not None:
            opts.append(f"lun.{n}.writable={'on' if lun.writable else 'off'}")
        opts += [f"lun.{n}.{k}={v}" for k, v in (lun.props or {}).items()]
    return args + ["--export", ",".join(opts)]


def _iothreads(exp):
    if not exp.iothread:
        return []
    if isinstance(exp.iothread, str):
        return [exp.iothread]
    return list(exp.iothread)


def listening_unix_paths():
    """The paths of listening UNIX sockets on this machine (/proc/net/unix)."""
    paths = set()
    try:
        with open("/proc/net/unix") as f:
            next(f, None)
            for line in f:
                parts = line.split()
                # Num RefCount Protocol Flags Type St Inode [Path]
                if len(parts) >= 8 and int(parts[3], 16) & 0x10000:   # __SO_ACCEPTCON
                    paths.add(parts[7])
    except OSError:
        pass
    return paths


class DaemonError(RuntimeError):
    """The daemon exited or did not get ready; the message has its stderr."""


class Daemon:
    """A running back-end.  Use as a context manager, or call stop()."""

    def __init__(self, program, exports, flavour, workdir, iothread_props="",
                 extra_args=(), env=None, extra_sockets=()):
        program = str(program)
        # The daemon runs in `workdir`: a relative program path is made absolute.
        if "/" in program:
            program = os.path.abspath(program)
        self.program = program
        self.exports = list(exports)
        self.flavour = flavour
        self.workdir = Path(workdir)
        self.command = [self.program,
                        *export_args(self.exports, flavour, iothread_props),
                        *extra_args]
        self.stderr_path = self.workdir / f"{flavour}.stderr"
        self.proc = None
        self.returncode = None
        self._env = env
        # More sockets start() waits for (a QMP monitor's, from extra_args).
        self.extra_sockets = [str(p) for p in extra_sockets]

    def start(self, timeout=10):
        """Start the daemon and wait until every export socket (and every
        one of extra_sockets) listens."""
        self._stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL,
                                     stdout=self._stderr, stderr=self._stderr,
                                     cwd=self.workdir, env=self._env,
                                     preexec_fn=die_with_parent())
        want = {e.socket for e in self.exports} | set(self.extra_sockets)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                self.returncode = self.proc.returncode
                self._stderr.close()
                raise DaemonError(
                    f"{self.flavour} exited with status {self.returncode} before "
                    f"its sockets were ready\ncommand: {' '.join(self.command)}\n"
                    f"stderr:\n{self.stderr()}")
            ready = want <= listening_unix_paths()
            if ready and all(_is_socket(p) for p in want):
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise DaemonError(
                    f"{self.flavour} did not listen on {sorted(want)} within "
                    f"{timeout} s\nstderr:\n{self.stderr()}")
            time.sleep(0.02)

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def stderr(self):
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def stats_lines(self):
        """Lines of stderr that report IOThread statistics (may be empty)."""
        return [l for l in self.stderr().splitlines()
                if "iothread" in l and STATS_MARKER in l]

    def stop(self, timeout=15):
        """SIGTERM, wait (SIGKILL after `timeout` s); return the exit status."""
        if self.proc is None or self.returncode is not None:
            return self.returncode
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.returncode = self.proc.returncode
        self._stderr.close()
        return self.returncode

    def __enter__(self):
        return self.start() if self.proc is None else self

    def __exit__(self, *exc):
        self.stop()


def _is_socket(path):
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False

"""Start a daemon, wait for it, stop it: the one launcher of the tests.

    d = launch(program, ["--blockdev", ..., "--export", ...],
               log_path=tmp / "spindle.log", ready=[sock])
    ...
    assert d.stop() == 0, d.stderr()

A Daemon runs `program args...` with stdin on /dev/null and stdout and
stderr both in log_path (so that what it printed can be read while it runs
and after it exits), in `cwd` if given.  It gets PR_SET_PDEATHSIG, so a
killed test run leaves no daemon behind.

start() returns once every path in `ready` is ready: a UNIX socket when it
listens (read from /proc/net/unix, so nothing connects to find out: a
vhost-user server serves one client at a time, and a socket file appears at
bind(), a moment before listen()), any other file (a pid file) when it
exists.  stop() sends a signal (SIGTERM), waits, kills the daemon if it does
not exit in time, and returns the exit status.

wait_for() is the one wait helper: it polls a condition with a timeout and,
given the daemon, stops early if the daemon exits.  Either way it fails with
a message that names what it waited for and quotes the daemon's output.

tests/e2e/daemons.py builds the export command line shared by spindle and
qemu-storage-daemon on top of this; scripts/benchcompare reuses
die_with_parent() and listening_unix_paths().
"""

import os
import signal
import stat
import subprocess
import time
from pathlib import Path

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 15.0
WAIT_TIMEOUT_S = 15.0
# How much of a daemon's output a failure message quotes.
OUTPUT_TAIL = 4000


class DaemonError(AssertionError):
    """A daemon exited or was not ready in time; the message has its output."""


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


def is_listening(path):
    """Whether a UNIX socket listens at path."""
    return os.fspath(path) in listening_unix_paths()


def is_socket(path):
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def is_ready(path):
    """A socket that listens, or any other file that exists."""
    if is_socket(path):
        return is_listening(path)
    return os.path.exists(path)


def wait_for(predicate, what, timeout=WAIT_TIMEOUT_S, daemon=None,
             interval=0.01):
    """Poll predicate() until it returns a true value; return that value.

    Raises DaemonError if `timeout` seconds pass first, or, with `daemon`
    (a Daemon), as soon as the daemon exits; the message names `what` (a
    string, or a function that says it then) and quotes the daemon's
    output.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        said = what() if callable(what) else what
        if daemon is not None and not daemon.alive():
            raise DaemonError(f"{daemon.name} exited with status "
                              f"{daemon.proc.returncode} while waiting for "
                              f"{said}{daemon.describe()}")
        if time.monotonic() > deadline:
            extra = daemon.describe() if daemon is not None else ""
            raise DaemonError(f"timed out after {timeout:g} s waiting for "
                              f"{said}{extra}")
        time.sleep(interval)


class Daemon:
    """One daemon process.  Use as a context manager, or call stop()."""

    def __init__(self, program, args=(), *, log_path, ready=(), name=None,
                 cwd=None, env=None, pass_fds=(), pdeathsig=signal.SIGTERM):
        program = str(program)
        # With cwd, a relative program path must not change meaning.
        if cwd is not None and "/" in program:
            program = os.path.abspath(program)
        self.program = program
        self.command = [program, *map(str, args)]
        self.name = name or Path(program).name
        self.log_path = Path(log_path)
        self.ready = [str(p) for p in ready]
        self.cwd = cwd
        self.env = env
        self.pass_fds = tuple(pass_fds)
        self.pdeathsig = pdeathsig
        self.proc = None
        self.returncode = None
        self._log = None

    def start(self, timeout=START_TIMEOUT_S):
        """Start the daemon; return self once every `ready` path is ready.
        A daemon that exited can be started again."""
        self.returncode = None
        self._log = self._open_log()
        self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=self._log,
                                     cwd=self.cwd, env=self.env,
                                     pass_fds=self.pass_fds,
                                     preexec_fn=die_with_parent(self.pdeathsig))
        try:
            self.wait_ready(self.ready, timeout)
        except DaemonError:
            self.stop()
            raise
        return self

    def _open_log(self):
        return open(self.log_path, "w")

    def wait_ready(self, paths, timeout=START_TIMEOUT_S):
        paths = [str(p) for p in ([paths] if isinstance(paths, (str, Path))
                                  else paths)]

        def waited_for():
            if len(paths) <= 2:
                return " and ".join(paths)
            missing = [p for p in paths if not is_ready(p)]
            return (f"{len(paths)} paths ({len(missing)} not ready, e.g. "
                    f"{missing[0] if missing else '-'})")
        if paths:
            wait_for(lambda: all(is_ready(p) for p in paths), waited_for,
                     timeout, daemon=self)

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stderr(self):
        """Everything the daemon printed so far (stdout and stderr)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def describe(self):
        """The command and the tail of the output, for a failure message."""
        return (f"\ncommand: {' '.join(self.command)}\noutput:\n"
                f"{self.stderr()[-OUTPUT_TAIL:]}")

    def stats_lines(self):
        """The IOThread statistics lines (`spindle: iothread X stats: ...`)
        the daemon printed at exit or on SIGUSR1 (may be empty)."""
        return [line for line in self.stderr().splitlines()
                if "iothread" in line and " stats: " in line]

    def wait(self, timeout=STOP_TIMEOUT_S):
        """Wait for the daemon to exit on its own (SIGKILL after `timeout`);
        return the exit status."""
        if self.proc is None or self.returncode is not None:
            return self.returncode
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.returncode = self.proc.returncode
        self._log.close()
        return self.returncode

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT_S):
        """Send `sig` if it runs, wait (SIGKILL after `timeout`); return the
        exit status."""
        if self.alive():
            self.proc.send_signal(sig)
        return self.wait(timeout)

    def kill(self):
        return self.stop(signal.SIGKILL)

    def __enter__(self):
        return self.start() if self.proc is None else self

    def __exit__(self, *exc):
        self.stop()


def launch(program, args=(), **kw):
    """Start `program args...` as a Daemon (see there); return it, ready."""
    return Daemon(program, args, **kw).start()

"""A spindle with a QMP monitor, and a synchronous QMP client for tests.

    with SpindleQmp(spindle, workdir, ["--object", "iothread,id=iot0"]) as d:
        d.qmp.cmd("query-iothreads")                    # -> the "return" value
        cls, desc = d.qmp.error("object-del", {"id": "nope"})
        ev = d.qmp.event("BLOCK_EXPORT_DELETED")        # -> the event message

SpindleQmp starts the daemon with its monitor on a UNIX socket in workdir
(`--chardev socket,id=m0,path=...,server=on,wait=off --monitor chardev=m0`
after the given arguments) and connects a QmpSync to it.  stop() (or leaving
the `with`) closes the client, sends SIGTERM and waits; the exit status is
in .returncode and what the daemon wrote on stderr in .stderr().

QmpSync wraps qemu.qmp's asyncio QMPClient in an event loop of its own, so
tests stay plain functions.  Events are buffered by the client's default
listener while a command runs (and read from the socket at the next call),
so an event sent before or with a command's reply is never lost.
"""

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

from qemu.qmp import QMPClient
from qemu.qmp.qmp_client import ExecuteError

MONITOR_SOCKET = "qmp.sock"
CONNECT_TIMEOUT_S = 10.0
REPLY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 20.0


def _die_with_parent():
    """preexec_fn: the daemon gets SIGTERM if the test process dies."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PDEATHSIG = 1
    libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


class QmpSync:
    """A blocking QMP client (qemu.qmp underneath)."""

    def __init__(self, path, timeout=CONNECT_TIMEOUT_S, alive=None):
        self.loop = asyncio.new_event_loop()
        deadline = time.monotonic() + timeout
        while not Path(path).exists() and time.monotonic() < deadline and \
                (not alive or alive()):
            time.sleep(0.01)    # (qemu.qmp logs every failed connect)
        while True:
            # A new client for each try: nothing of a failed one is reused.
            self.client = QMPClient("spindle-test")
            try:
                self._run(self.client.connect(str(path)), REPLY_TIMEOUT_S)
                break
            except Exception:
                if time.monotonic() > deadline or (alive and not alive()):
                    self.loop.close()
                    raise
                time.sleep(0.05)

    def _run(self, coro, timeout):
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def cmd(self, name, args=None, timeout=REPLY_TIMEOUT_S):
        """Run a command; return its "return" value (ExecuteError if not)."""
        return self._run(self.client.execute(name, args), timeout)

    def error(self, name, args=None, timeout=REPLY_TIMEOUT_S):
        """Run a command that must fail; return (error class, desc)."""
        try:
            ret = self.cmd(name, args, timeout)
        except ExecuteError as e:
            return e.error_class, str(e)
        raise AssertionError(f"{name} {args} succeeded ({ret!r}); an error "
                             "was expected")

    def event(self, name, timeout=5.0):
        """Wait for the next event called name (others are dropped)."""
        async def wait():
            while True:
                ev = await self.client.events.get()
                if ev["event"] == name:
                    return ev
        return self._run(wait(), timeout)

    def drain_events(self):
        """Drop the events received so far; return them."""
        self._run(asyncio.sleep(0), 1)
        return self.client.events.clear()

    def close(self):
        try:
            self._run(self.client.disconnect(), REPLY_TIMEOUT_S)
        except Exception:
            pass
        self.loop.close()


class SpindleQmp:
    """spindle with a monitor; .qmp is the connected client."""

    def __init__(self, program, workdir, args, env=None):
        self.workdir = Path(workdir)
        self.monitor = self.workdir / MONITOR_SOCKET
        self.args = [str(program), *map(str, args),
                     "--chardev", f"socket,id=m0,path={self.monitor},"
                                  "server=on,wait=off",
                     "--monitor", "chardev=m0"]
        self.env = env
        self.proc = None
        self.qmp = None
        self.returncode = None
        self._stderr_path = self.workdir / "spindle.stderr"

    def start(self):
        self._stderr = open(self._stderr_path, "wb")
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=self._stderr, env=self.env,
                                     preexec_fn=_die_with_parent)
        try:
            self.qmp = QmpSync(self.monitor,
                               alive=lambda: self.proc.poll() is None)
        except Exception as e:
            self.stop()
            raise RuntimeError(f"cannot talk to spindle's monitor ({e!r}); "
                               f"exit {self.returncode}; stderr:\n"
                               f"{self.stderr()}") from e
        return self

    @property
    def pid(self):
        return self.proc.pid

    def stderr(self):
        try:
            return self._stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self):
        if self.qmp:
            self.qmp.close()
            self.qmp = None
        if self.proc and self.returncode is None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.returncode = self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.returncode = self.proc.wait()
            self._stderr.close()
        return self.returncode

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def thread_comm(pid, tid):
    """The name of thread tid of process pid, or None if it is gone."""
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return None


def thread_cpus(pid, tid):
    """Cpus_allowed_list of thread tid of process pid."""
    for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no Cpus_allowed_list")


def wait_until(pred, timeout=5.0, what="condition"):
    """Poll pred() until it returns a true value; return that value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def is_listening(path):
    """Whether a UNIX socket listens at path (from /proc/net/unix)."""
    path = os.fspath(path)
    with open("/proc/net/unix") as f:
        next(f, None)
        for line in f:
            parts = line.split()
            if len(parts) >= 8 and parts[7] == path and \
                    int(parts[3], 16) & 0x10000:      # __SO_ACCEPTCON
                return True
    return False

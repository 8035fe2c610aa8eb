"""A spindle with a QMP monitor, and a synchronous QMP client for tests.

    with SpindleQmp(spindle, workdir, ["--object", "iothread,id=iot0"]) as d:
        d.qmp.cmd("query-iothreads")                    # -> the "return" value
        cls, desc = d.qmp.error("object-del", {"id": "nope"})
        ev = d.qmp.event("BLOCK_EXPORT_DELETED")        # -> the event message

SpindleQmp is the tests' launcher (spindle_daemon.Daemon) with the daemon's
monitor on a UNIX socket in workdir (`--chardev socket,id=m0,path=...,
server=on,wait=off --monitor chardev=m0` after the given arguments): start()
waits for the monitor to listen and connects a QmpSync to it.  stop() (or
leaving the `with`) closes the client, sends SIGTERM and waits; the exit
status is in .returncode and what the daemon wrote on stderr in .stderr().

QmpSync wraps qemu.qmp's asyncio QMPClient in an event loop of its own, so
tests stay plain functions.  Events are buffered by the client's default
listener while a command runs (and read from the socket at the next call),
so an event sent before or with a command's reply is never lost.
"""

import asyncio
import signal
import time
from pathlib import Path

from qemu.qmp import QMPClient
from qemu.qmp.qmp_client import ExecuteError

from spindle_daemon import Daemon, DaemonError

MONITOR_SOCKET = "qmp.sock"
CONNECT_TIMEOUT_S = 10.0
REPLY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 20.0


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


class SpindleQmp(Daemon):
    """spindle with a monitor; .qmp is the connected client."""

    def __init__(self, program, workdir, args, env=None):
        self.workdir = Path(workdir)
        self.monitor = self.workdir / MONITOR_SOCKET
        monitor = ["--chardev",
                   f"socket,id=m0,path={self.monitor},server=on,wait=off",
                   "--monitor", "chardev=m0"]
        super().__init__(program, [*args, *monitor],
                         log_path=self.workdir / "spindle.stderr", env=env,
                         ready=[self.monitor])
        self.qmp = None

    def start(self, timeout=CONNECT_TIMEOUT_S):
        super().start(timeout)
        try:
            self.qmp = QmpSync(self.monitor, alive=self.alive)
        except Exception as e:
            self.stop()
            raise DaemonError(f"cannot talk to spindle's monitor ({e!r})"
                              f"{self.describe()}") from e
        return self

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT_S):
        if self.qmp:
            self.qmp.close()
            self.qmp = None
        return super().stop(sig, timeout)


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

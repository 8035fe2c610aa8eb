"""The QMP monitor's protocol, against the real daemon (docs/cli.md, docs/qmp.md).

spindle is started with `--chardev socket,id=m0,path=...,server=on,wait=off
--monitor chardev=m0` (plus whatever a test needs) and talked to:

  - with raw sockets, for what a library would hide: framing (messages
    without a newline, split across writes, several in one write), the
    exact error class and text for each kind of malformed input, the "id"
    echo, the size and nesting limits; after every bad input the same
    connection still runs a valid command, and the daemon is still alive;
  - with qemu.qmp (QEMU's own Python client), for a normal session:
    connect and greeting, query-version, query-commands, quit (reply,
    SHUTDOWN event, exit 0, sockets and pid file removed);
  - several monitors at once, several clients on one monitor, pretty=on,
    wait=on (the daemon does not count as started until a client came),
    an inherited listening socket (fd=N), and bad --chardev/--monitor
    options (one line naming the option, exit 1, nothing left behind).

The framing scanner and the argument helpers are tested in more detail by
tests/unit/test-qmp.c.
"""

import asyncio
import json
import os
import signal
import socket
import stat
import time
from pathlib import Path

import pytest

from conftest import (check_one_line_error, run_spindle,
                      start_on_listening_socket, wait_for)

TIMEOUT = 15
MAX_MESSAGE = 1 << 20      # QMP_MAX_MESSAGE
MAX_NESTING = 64           # QMP_MAX_NESTING

qmp_mod = pytest.importorskip("qemu.qmp")
QMPClient = qmp_mod.QMPClient


def version_triple(spindle):
    out = run_spindle(spindle, ["--version"]).stdout.split()
    assert out[0] == "spindle"
    return out[1], [int(x) for x in out[1].split(".")]


def monitor_args(path, chardev="m0", wait="off", pretty=None):
    mon = f"chardev={chardev}" + (f",pretty={pretty}" if pretty else "")
    wait_opt = f",wait={wait}" if wait is not None else ""
    return ["--chardev", f"socket,id={chardev},path={path},server=on{wait_opt}",
            "--monitor", mon]


class Raw:
    """A QMP client on a plain socket: bytes in, lines of JSON out."""

    def __init__(self, path):
        # The file appears at bind(), a moment before listen().
        deadline = time.monotonic() + TIMEOUT
        while True:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(TIMEOUT)
            try:
                self.sock.connect(str(path))
                break
            except (ConnectionRefusedError, FileNotFoundError):
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data.encode() if isinstance(data, str) else data)

    def _fill(self):
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise EOFError("the daemon closed the connection")
        self.buf += chunk

    def line(self):
        while b"\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def msg(self):
        return json.loads(self.line())

    def pretty_msg(self):
        """A pretty=on message: it ends with '}' alone on a line."""
        while b"\n}\n" not in self.buf:
            self._fill()
        text, self.buf = self.buf.split(b"\n}\n", 1)
        return (text + b"\n}\n").decode()

    def at_eof(self):
        """Read until the daemon closes; True if it did, nothing left."""
        try:
            while True:
                self._fill()
        except EOFError:
            return True

    def negotiate(self):
        greeting = self.msg()
        assert "QMP" in greeting
        self.send('{"execute": "qmp_capabilities"}')
        assert self.msg() == {"return": {}}
        return greeting

    def expect_silence(self, seconds=0.1):
        self.sock.settimeout(seconds)
        try:
            data = self.sock.recv(1 << 16)
        except socket.timeout:
            data = None
        finally:
            self.sock.settimeout(TIMEOUT)
        assert data is None, f"unexpected output: {data!r}"

    def close(self):
        self.sock.close()


def raw_client(path):
    """A Raw client past the greeting and qmp_capabilities."""
    c = Raw(path)
    c.negotiate()
    return c


def start_with_monitor(spindle_daemon, tmp_path, extra=(), **kw):
    qmp = tmp_path / "qmp.sock"
    d = spindle_daemon([*extra, *monitor_args(qmp, **kw)], ready=[qmp])
    return d, qmp


def err(cls, desc, id_=None):
    msg = {"error": {"class": cls, "desc": desc}}
    if id_ is not None:
        msg["id"] = id_
    return msg


# --------------------------------------------------------------------------
# Raw sockets: greeting, negotiation, framing, malformed input


def test_greeting_and_negotiation(spindle, spindle_daemon, tmp_path):
    version, (major, minor, micro) = version_triple(spindle)
    d, qmp = start_with_monitor(spindle_daemon, tmp_path)
    st = qmp.stat()
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    c = Raw(qmp)
    assert c.msg() == {"QMP": {"version": {"qemu": {"major": major,
                                                    "minor": minor,
                                                    "micro": micro},
                                           "package": f"spindle {version}"},
                               "capabilities": []}}
    c.send('{"execute": "query-version", "id": 1}')
    assert c.msg() == err("CommandNotFound", "Expecting capabilities "
                          "negotiation with 'qmp_capabilities'", 1)
    c.send('{"execute": "qmp_capabilities", "arguments": '
           '{"enable": ["oob"]}}')
    assert c.msg() == err("GenericError", "Capability 'oob' not available")
    c.send('{"execute": "qmp_capabilities", "id": "neg"}')
    assert c.msg() == {"return": {}, "id": "neg"}
    c.send('{"execute": "qmp_capabilities"}')
    assert c.msg() == err("CommandNotFound", "Capabilities negotiation is "
                          "already complete, command ignored")
    c.send('{"execute": "query-version", "id": 2}')
    assert c.msg() == {"return": {"qemu": {"major": major, "minor": minor,
                                           "micro": micro},
                                  "package": f"spindle {version}"}, "id": 2}
    c.close()
    assert d.stop() == 0


def test_framing(spindle_daemon, tmp_path):
    d, qmp = start_with_monitor(spindle_daemon, tmp_path)
    c = raw_client(qmp)
    c.send('{"execute": "query-version"}')
    version = c.msg()["return"]
    # No newline at all (qemu.qmp's way), two messages in one write.
    c.send('{"execute":"query-version","id":1}{"execute":"query-version",'
           '"id":2}')
    assert c.msg()["id"] == 1
    assert c.msg()["id"] == 2
    # One message in many writes, split inside strings and between tokens;
    # a string holding braces and an escaped quote in the id.
    msg = b'{"execute": "query-version", "id": "}{\\"["}  \n'
    for i in range(len(msg)):
        c.send(msg[i:i + 1])
        if i < len(msg) - 4:
            time.sleep(0.001)
    assert c.msg() == {"return": version, "id": '}{"['}
    c.expect_silence()
    assert d.alive()
    c.close()
    assert d.stop() == 0


def nested(depth):
    """A request nested depth levels deep in total."""
    inner = "[" * (depth - 2) + "]" * (depth - 2)
    return '{"execute": "query-version", "arguments": {"x": %s}}' % inner


def padded(size):
    """A well-formed request of exactly size bytes."""
    head = '{"execute": "query-version", "id": "'
    tail = '"}'
    return head + "x" * (size - len(head) - len(tail)) + tail


BAD_INPUTS = [
    # (name, bytes sent, expected reply; desc None: a prefix check)
    ("not-object", b"[1, 2]",
     err("GenericError", "QMP input must be a JSON object")),
    ("string", b'"execute"',
     err("GenericError", "QMP input must be a JSON object")),
    ("number", b"42\n",
     err("GenericError", "QMP input must be a JSON object")),
    ("no-execute", b'{"id": 7}',
     err("GenericError", "QMP input lacks member 'execute'", 7)),
    ("execute-not-string", b'{"execute": 1, "id": [1, 2]}',
     err("GenericError", "QMP input member 'execute' must be a string",
         [1, 2])),
    ("arguments-not-object",
     b'{"execute": "query-version", "arguments": [], "id": {"a": 1}}',
     err("GenericError", "QMP input member 'arguments' must be an object",
         {"a": 1})),
    ("unexpected-member", b'{"execute": "query-version", "foo": 1, "id": 3}',
     err("GenericError", "QMP input member 'foo' is unexpected", 3)),
    ("exec-oob", b'{"exec-oob": "query-version"}',
     err("GenericError", "QMP input member 'exec-oob' is unexpected")),
    ("unknown-command", b'{"execute": "no-such-command", "id": "u"}',
     err("CommandNotFound", "The command no-such-command has not been found",
         "u")),
    ("bad-argument", b'{"execute": "query-version", "arguments": {"x": 1}}',
     err("GenericError", "Parameter 'x' is unexpected")),
    ("parse-error", b'{"execute": "query-version",}',
     ("GenericError", "JSON parse error, ")),
    ("garbage-word", b"foo\n", ("GenericError", "JSON parse error, ")),
    ("bare-bracket", b"]", ("GenericError", "JSON parse error, ")),
    ("invalid-utf8", b'{"execute": "\xff\xfe"}',
     err("GenericError", "JSON parse error, JSON data must be UTF-8 "
         "encoded")),
    ("infinite-number", b'{"execute": "query-version", "id": 1e999}',
     err("GenericError", "JSON parse error, number out of range")),
    ("too-large", padded(MAX_MESSAGE + 1).encode(),
     err("GenericError", f"JSON parse error, message too large (more than "
         f"{MAX_MESSAGE} bytes)")),
    ("too-deep", nested(MAX_NESTING + 1).encode(),
     err("GenericError", f"JSON parse error, nesting too deep (more than "
         f"{MAX_NESTING} levels)")),
]


def test_malformed_input_keeps_the_connection(spindle_daemon, tmp_path):
    d, qmp = start_with_monitor(spindle_daemon, tmp_path)
    c = raw_client(qmp)
    for name, data, want in BAD_INPUTS:
        c.send(data)
        got = c.msg()
        if isinstance(want, tuple):
            cls, prefix = want
            assert got["error"]["class"] == cls, name
            assert got["error"]["desc"].startswith(prefix), (name, got)
            assert len(got["error"]["desc"]) > len(prefix), name
            assert set(got) == {"error"}, name
        else:
            assert got == want, name
        # The same connection goes on.
        c.send('{"execute": "query-version", "id": "after-%s"}' % name)
        ok = c.msg()
        assert ok["id"] == f"after-{name}" and "return" in ok, name
    # The limits are limits, not less: exactly at them is fine.
    c.send(padded(MAX_MESSAGE))
    assert "return" in c.msg()
    c.send(nested(MAX_NESTING))
    assert c.msg() == err("GenericError", "Parameter 'x' is unexpected")
    c.expect_silence()
    assert d.alive()
    c.close()
    # A new client is served as usual.
    c2 = raw_client(qmp)
    c2.close()
    assert d.stop() == 0


def test_clients_that_vanish(spindle_daemon, tmp_path):
    d, qmp = start_with_monitor(spindle_daemon, tmp_path)
    # Half a message, then gone.
    c = raw_client(qmp)
    c.send('{"execute": "query-ver')
    c.close()
    # Commands sent, replies never read.
    c = Raw(qmp)
    c.send('{"execute": "qmp_capabilities"}' +
           '{"execute": "query-commands"}' * 50)
    c.close()
    # Gone before the greeting could be read.
    c = Raw(qmp)
    c.close()
    time.sleep(0.1)
    assert d.alive()
    c = raw_client(qmp)
    c.send('{"execute": "query-version"}')
    assert "return" in c.msg()
    c.close()
    assert d.stop() == 0


def test_sigterm_sends_shutdown_event(spindle_daemon, tmp_path):
    d, qmp = start_with_monitor(spindle_daemon, tmp_path)
    negotiated = raw_client(qmp)
    silent = Raw(qmp)                    # never negotiates: no events
    silent.msg()                         # the greeting
    before = time.time()
    d.proc.send_signal(signal.SIGTERM)
    ev = negotiated.msg()
    assert ev["event"] == "SHUTDOWN"
    assert ev["data"] == {"guest": False, "reason": "host-signal"}
    ts = ev["timestamp"]
    assert set(ts) == {"seconds", "microseconds"}
    assert 0 <= ts["microseconds"] < 1000000
    assert before - 1 <= ts["seconds"] + ts["microseconds"] / 1e6 <= \
        time.time() + 1
    assert negotiated.at_eof()
    assert silent.at_eof() and silent.buf == b""
    assert d.wait() == 0
    assert not qmp.exists()


# --------------------------------------------------------------------------
# qemu.qmp


def run_async(coro, timeout=TIMEOUT):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def qmp_connect(path):
    Raw(path).close()                # the socket listens (see Raw)
    client = QMPClient("spindle-test")
    await client.connect(str(path))
    return client


async def qmp_close(client):
    try:
        await client.disconnect()
    except Exception:      # the daemon hung up first: fine here
        pass


def test_qemu_qmp_session_and_quit(spindle, spindle_daemon, tmp_path):
    version, (major, minor, micro) = version_triple(spindle)
    vu = tmp_path / "vm.sock"
    pidfile = tmp_path / "spindle.pid"
    d, qmp = start_with_monitor(spindle_daemon, tmp_path, extra=[
        "--blockdev", "driver=null-co,node-name=n0",
        "--export", f"type=vhost-user-blk,id=e0,node-name=n0,addr.type=unix,"
                    f"addr.path={vu}",
        "--pidfile", pidfile])
    wait_for(pidfile.exists, "the pid file", daemon=d)

    async def session():
        client = await qmp_connect(qmp)
        greeting = client.greeting._raw
        assert greeting["QMP"]["version"]["qemu"] == {
            "major": major, "minor": minor, "micro": micro}
        assert greeting["QMP"]["capabilities"] == []
        ver = await client.execute("query-version")
        assert ver == {"qemu": {"major": major, "minor": minor,
                                "micro": micro},
                       "package": f"spindle {version}"}
        cmds = await client.execute("query-commands")
        names = [c["name"] for c in cmds]
        assert all(set(c) == {"name"} for c in cmds)
        assert names == sorted(names)
        assert len(set(names)) == len(names)
        for core in ("qmp_capabilities", "query-version", "query-commands",
                     "quit"):
            assert core in names
        assert await client.execute("quit") == {}
        ev = await asyncio.wait_for(client.events.get(), TIMEOUT)
        assert ev["event"] == "SHUTDOWN"
        assert ev["data"] == {"guest": False, "reason": "host-qmp-quit"}
        await qmp_close(client)

    run_async(session())
    assert d.wait() == 0
    assert not qmp.exists()
    assert not vu.exists()
    assert not pidfile.exists()


def test_two_monitors_and_two_clients(spindle_daemon, tmp_path):
    qa, qb = tmp_path / "a.sock", tmp_path / "b.sock"
    d = spindle_daemon([*monitor_args(qa, chardev="ma"),
                        *monitor_args(qb, chardev="mb"),
                        # A chardev no monitor uses is fine (and not created).
                        "--chardev",
                        f"socket,id=spare,path={tmp_path / 'spare'},"
                        "server=on,wait=off"], ready=[qa, qb])
    assert not (tmp_path / "spare").exists()

    async def session():
        clients = [await qmp_connect(qa), await qmp_connect(qa),
                   await qmp_connect(qb)]
        for c in clients:
            assert "qemu" in await c.execute("query-version")
        # Every negotiated client of every monitor gets the event.
        d.proc.send_signal(signal.SIGTERM)
        for c in clients:
            ev = await asyncio.wait_for(c.events.get(), TIMEOUT)
            assert ev["event"] == "SHUTDOWN"
            assert ev["data"]["reason"] == "host-signal"
        for c in clients:
            await qmp_close(c)

    run_async(session())
    assert d.wait() == 0
    assert not qa.exists() and not qb.exists()


def test_pretty_output(spindle_daemon, tmp_path):
    d, qmp = start_with_monitor(spindle_daemon, tmp_path, pretty="on")
    c = Raw(qmp)
    text = c.pretty_msg()
    assert text.startswith('{\n    "QMP" : {\n        "version" : {\n')
    assert "QMP" in json.loads(text)
    c.send('{"execute": "qmp_capabilities", "id": 1}')
    text = c.pretty_msg()
    assert json.loads(text) == {"return": {}, "id": 1}
    assert '\n    "id" : 1\n' in text
    c.send('{"execute": "nope"}')
    assert json.loads(c.pretty_msg()) == err(
        "CommandNotFound", "The command nope has not been found")
    c.close()
    assert d.stop() == 0


def test_inherited_listening_socket(spindle_daemon, tmp_path):
    path = tmp_path / "inherited.sock"
    d = start_on_listening_socket(spindle_daemon, path, lambda fd: [
        "--chardev", f"socket,id=m0,fd={fd},server=on,wait=off",
        "--monitor", "chardev=m0"])

    async def session():
        client = await qmp_connect(path)
        assert "qemu" in await client.execute("query-version")
        await qmp_close(client)

    run_async(session())
    assert d.stop() == 0
    assert path.exists()       # not the daemon's file: left alone
    assert "waiting" not in d.stderr()


# --------------------------------------------------------------------------
# wait=on


def test_wait_on_holds_start_until_a_client(spindle_daemon, tmp_path):
    qmp = tmp_path / "qmp.sock"
    pidfile = tmp_path / "spindle.pid"
    # wait=on is the default for server=on, as in QEMU.
    d = spindle_daemon([*monitor_args(qmp, wait=None), "--pidfile", pidfile])
    d.wait_ready(qmp)
    wait_for(lambda: "waiting" in d.stderr(), "the waiting message",
             daemon=d)
    assert d.stderr() == f"spindle: waiting for a QMP client on {qmp}\n"
    time.sleep(0.2)
    assert not pidfile.exists()      # not started yet
    c = raw_client(qmp)
    wait_for(pidfile.exists, "the pid file", daemon=d)
    c.send('{"execute": "query-version", "id": 1}')
    assert c.msg()["id"] == 1
    c.close()
    assert d.stop() == 0
    assert not pidfile.exists()


def test_wait_on_sigterm_stops_waiting(spindle_daemon, tmp_path):
    qmp = tmp_path / "qmp.sock"
    pidfile = tmp_path / "spindle.pid"
    d = spindle_daemon([*monitor_args(qmp, wait="on"), "--pidfile", pidfile])
    wait_for(lambda: "waiting" in d.stderr(), "the waiting message",
             daemon=d)
    assert d.stop() == 0
    assert not qmp.exists() and not pidfile.exists()


def test_wait_on_every_monitor(spindle_daemon, tmp_path):
    qa, qb = tmp_path / "a.sock", tmp_path / "b.sock"
    pidfile = tmp_path / "spindle.pid"
    d = spindle_daemon([*monitor_args(qa, chardev="ma", wait="on"),
                        *monitor_args(qb, chardev="mb", wait="on"),
                        "--pidfile", pidfile])
    wait_for(lambda: d.stderr().count("waiting") == 2, "two messages",
             daemon=d)
    a = raw_client(qa)
    time.sleep(0.2)
    assert not pidfile.exists()      # b has had no client yet
    b = Raw(qb)
    b.msg()
    b.close()                        # connecting is enough
    wait_for(pidfile.exists, "the pid file", daemon=d)
    a.close()
    assert d.stop() == 0


def test_wait_on_with_daemonize(spindle_daemon, tmp_path):
    qmp = tmp_path / "qmp.sock"
    pidfile = tmp_path / "spindle.pid"
    parent = spindle_daemon([*monitor_args(qmp, wait="on"),
                             "--pidfile", pidfile, "--daemonize"],
                            ready=[qmp])
    try:
        time.sleep(0.2)
        assert parent.alive()            # still waiting for a client
        c = raw_client(qmp)
        assert parent.wait(TIMEOUT) == 0
        assert parent.stderr() == (f"spindle: waiting for a QMP client on "
                                   f"{qmp}\n")
        wait_for(pidfile.exists, "the pid file")
        pid = int(pidfile.read_text())
        c.send('{"execute": "quit"}')
        assert c.msg() == {"return": {}}
        assert c.msg()["event"] == "SHUTDOWN"
        assert c.at_eof()
        wait_for(lambda: not pidfile.exists(), "the daemon to stop")
        deadline = time.monotonic() + TIMEOUT
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


# --------------------------------------------------------------------------
# Bad options


def bad_option_cases(d):
    sock = d / "q.sock"
    return [
        ("two-monitors-one-chardev",
         [*monitor_args(sock), "--monitor", "chardev=m0"],
         "--monitor", "already used"),
        ("path-is-a-file", monitor_args(d / "file"), "--monitor",
         "is not a socket"),
        ("fd-not-a-socket",
         ["--chardev", "socket,id=m0,fd=0,server=on,wait=off",
          "--monitor", "chardev=m0"], "--monitor", "not a listening"),
        ("fd-not-open",
         ["--chardev", "socket,id=m0,fd=999,server=on,wait=off",
          "--monitor", "chardev=m0"], "--monitor", "not open"),
        ("path-and-fd",
         ["--chardev", f"socket,id=m0,path={sock},fd=3,server=on"],
         "--chardev", "exactly one"),
        ("monitor-no-chardev", ["--monitor", "chardev=m0"], "--monitor",
         "'m0'"),
        ("monitor-bad-pretty",
         ["--chardev", f"socket,id=m0,path={sock},server=on,wait=off",
          "--monitor", "chardev=m0,pretty=maybe"], "--monitor", "pretty"),
        ("monitor-unknown-key",
         ["--chardev", f"socket,id=m0,path={sock},server=on,wait=off",
          "--monitor", "chardev=m0,color=on"], "--monitor", "color"),
        ("chardev-wait-bad",
         ["--chardev", f"socket,id=m0,path={sock},server=on,wait=sometimes"],
         "--chardev", "wait"),
        ("chardev-duplicate-id",
         ["--chardev", f"socket,id=m0,path={sock},server=on",
          "--chardev", f"socket,id=m0,path={d / 'r.sock'},server=on"],
         "--chardev", "'m0'"),
        # A later error removes the monitor socket created before it.
        ("later-error",
         [*monitor_args(sock), "--blockdev", "driver=nope,node-name=x"],
         "--blockdev", "nope"),
    ]


@pytest.mark.parametrize("case", [c[0] for c in bad_option_cases(Path("d"))])
def test_bad_options(spindle, tmp_path, case):
    work = tmp_path / "work"
    work.mkdir()
    (work / "file").write_text("not a socket")
    name, args, option, word = next(c for c in bad_option_cases(work)
                                    if c[0] == case)
    check_one_line_error(run_spindle(spindle, args), option, word)
    assert sorted(p.name for p in work.iterdir()) == ["file"]
    assert (work / "file").read_text() == "not a socket"


def test_monitor_socket_in_use(spindle_daemon, tmp_path, spindle):
    d, qmp = start_with_monitor(spindle_daemon, tmp_path)
    proc = run_spindle(spindle, monitor_args(qmp))
    assert proc.returncode == 1
    assert proc.stderr.startswith("spindle: --monitor: ")
    assert "in use" in proc.stderr
    # The first daemon's socket is untouched and still served.
    c = raw_client(qmp)
    c.close()
    assert d.stop() == 0


def test_stale_socket_is_replaced(spindle_daemon, tmp_path):
    qmp = tmp_path / "qmp.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(qmp))
    stale.close()                    # the file stays, nobody listens
    d = spindle_daemon(monitor_args(qmp))
    c = Raw(qmp)                     # retries while the file is stale
    c.negotiate()
    c.close()
    assert d.stop() == 0

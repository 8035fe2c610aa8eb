"""Running spindle under systemd, without systemd: readiness, sockets it
passes, and the configuration file a unit points at.

systemd is not PID 1 where these tests run, so each test plays its part
the way systemd does it (sd_notify(3), sd_listen_fds(3)):

- NOTIFY_SOCKET: the test binds an AF_UNIX datagram socket and reads what
  the daemon sends: READY=1 once every export and monitor listens (the test
  connects to them as soon as it reads it), STOPPING=1 on SIGTERM.
- LISTEN_FDS / LISTEN_FDNAMES / LISTEN_PID: the test creates listening
  sockets, and the daemon gets them as fds 3, 4, ... through bash that
  sets LISTEN_PID=$$ and execs spindle (so that the pid is the daemon's);
  spindle-bench --verify then runs through the passed vhost-user socket and
  a QMP client through the passed monitor socket.
- --config FILE: the same options as JSON; its happy path and each shape
  of error (which names the file, the entry and the key), and
  docs/user-guide.md's example configuration, run as it stands.
- The unit files under contrib/systemd pass `systemd-analyze verify`
  (skipped where systemd-analyze is missing).

Names need libsystemd: in a build without it, the tests check that a name
is refused with a message that says so.
"""

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

from conftest import check_one_line_error, make_image, run_spindle
from qmp_util import QmpSync
from spindle_daemon import Daemon, wait_for

BENCH = "tools/bench/spindle-bench"
NOTIFY_TIMEOUT_S = 20.0
IMAGE_SIZE = 32 << 20


def have_libsystemd(build_dir):
    config = (build_dir / "include" / "config-host.h").read_text()
    return "#define CONFIG_LIBSYSTEMD" in config


@pytest.fixture
def libsystemd(build_dir):
    if not have_libsystemd(build_dir):
        pytest.skip("spindle is built without libsystemd (-Dlibsystemd)")


class NotifySocket:
    """The service manager's end of sd_notify: a bound datagram socket."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.messages = []

    def env(self):
        return {"NOTIFY_SOCKET": self.path}

    def wait_for(self, line, timeout=NOTIFY_TIMEOUT_S, daemon=None):
        """Read messages until one has line (e.g. "READY=1"); return that
        message's lines.  Every message read is kept in .messages."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {line} in {timeout} s; got "
                                     f"{self.messages!r}" +
                                     (daemon.describe() if daemon else ""))
            if daemon is not None and not daemon.alive():
                raise AssertionError(f"the daemon exited before {line}"
                                     f"{daemon.describe()}")
            self.sock.settimeout(min(left, 0.5))
            try:
                msg = self.sock.recv(4096).decode().split("\n")
            except socket.timeout:
                continue
            self.messages.append(msg)
            if line in msg:
                return msg

    def pending(self):
        """The messages already sent and not read yet."""
        self.sock.settimeout(0)
        out = []
        try:
            while True:
                out.append(self.sock.recv(4096).decode().split("\n"))
        except BlockingIOError:
            pass
        self.messages += out
        return out

    def close(self):
        self.sock.close()


@pytest.fixture
def notify(workdir):
    n = NotifySocket(workdir / "notify")
    yield n
    n.close()


def listener(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen()
    return s


def connects(path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(5)
        c.connect(str(path))
    return True


def activated(spindle, workdir, sockets, args, env=None):
    """An unstarted Daemon that gets sockets ([(name, listening socket)])
    as systemd passes them: fds 3, 4, ... with LISTEN_FDS, LISTEN_FDNAMES
    and LISTEN_PID naming the daemon.  The shell (bash) moves each socket
    from a high fd to its place, then execs spindle (same pid)."""
    # Above every fd the moves write to (3 .. 3+n), so none is clobbered.
    high = [fcntl.fcntl(s.fileno(), fcntl.F_DUPFD_CLOEXEC, 20)
            for _, s in sockets]
    moves = " ".join(f"{3 + i}<&{fd} {fd}<&-" for i, fd in enumerate(high))
    script = f'LISTEN_PID=$$ exec "$@" {moves}'
    env = dict(os.environ, **(env or {}),
               LISTEN_FDS=str(len(sockets)),
               LISTEN_FDNAMES=":".join(name for name, _ in sockets))
    # bash: dash takes single-digit fds only in redirections.
    d = Daemon("bash", ["-c", script, "bash", spindle, *args],
               log_path=workdir / "spindle.log", env=env, pass_fds=high,
               name="spindle")
    d.high_fds = high
    return d


@contextlib.contextmanager
def qmp_client(path, daemon):
    q = QmpSync(path, alive=daemon.alive)
    try:
        yield q
    finally:
        q.close()


def start_activated(d):
    try:
        return d.start()
    finally:
        for fd in d.high_fds:
            os.close(fd)     # only the daemon holds them now


# ---------------------------------------------------------------------------
# Readiness


def test_ready_once_listening_then_stopping(spindle, libsystemd, workdir,
                                            notify):
    img = make_image(workdir / "disk.img", IMAGE_SIZE)
    vsock, qsock = workdir / "vu.sock", workdir / "qmp.sock"
    d = Daemon(spindle, [
        "--blockdev", f"driver=file,node-name=d0,filename={img}",
        "--export", f"vhost-user-blk,id=e0,node-name=d0,addr.type=unix,"
                    f"addr.path={vsock},writable=on",
        "--chardev", f"socket,id=m0,path={qsock},server=on,wait=off",
        "--monitor", "chardev=m0"],
        log_path=workdir / "spindle.log", env=dict(os.environ, **notify.env()))
    d.start()
    try:
        msg = notify.wait_for("READY=1", daemon=d)
        # Right after READY=1 both sockets take connections.
        assert connects(vsock) and connects(qsock)
        assert "STATUS=serving 1 export, 1 QMP monitor" in msg, msg
        assert not any("STOPPING=1" in m for m in notify.messages)
        d.proc.send_signal(signal.SIGTERM)
        notify.wait_for("STOPPING=1")
    finally:
        rc = d.stop()
    assert rc == 0, d.stderr()


def test_not_ready_while_waiting_for_a_monitor(spindle, libsystemd, workdir,
                                               notify):
    # wait=on: started only once a QMP client came, so READY=1 waits too.
    qsock = workdir / "qmp.sock"
    d = Daemon(spindle, [
        "--chardev", f"socket,id=m0,path={qsock},server=on",
        "--monitor", "chardev=m0"],
        log_path=workdir / "spindle.log", env=dict(os.environ, **notify.env()),
        ready=[qsock])
    d.start()
    try:
        msg = notify.wait_for(f"STATUS=waiting for a QMP client on {qsock}")
        assert "READY=1" not in msg
        time.sleep(0.3)
        assert not any("READY=1" in m for m in notify.pending())
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(str(qsock))
            notify.wait_for("READY=1", daemon=d)
    finally:
        rc = d.stop()
    assert rc == 0, d.stderr()


# ---------------------------------------------------------------------------
# Sockets systemd passes


def bench_verify(bench, sock, count):
    """spindle-bench --verify through sock: every read matches."""
    proc = subprocess.run(
        [str(bench), f"--socket={sock}", "--json", "--verify", "--rw=randrw",
         "--queues=2", "--iodepth=4", "--size=4M", f"--count={count}"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["verify"]["mismatches"] == 0 and r["ios"] > 0


def test_socket_activation(spindle, binary, libsystemd, workdir, notify):
    bench = binary(BENCH)
    img = make_image(workdir / "disk.img", IMAGE_SIZE)
    vsock, qsock = workdir / "vu.sock", workdir / "qmp.sock"
    sockets = [("vhost", listener(vsock)), ("qmp", listener(qsock)),
               ("spare", listener(workdir / "spare.sock"))]
    d = activated(spindle, workdir, sockets, [
        "--blockdev", f"driver=file,node-name=d0,filename={img}",
        "--export", "vhost-user-blk,id=e0,node-name=d0,addr.type=fd,"
                    "addr.str=vhost,writable=on,num-queues=2",
        "--chardev", "socket,id=m0,fd=qmp,server=on,wait=off",
        "--monitor", "chardev=m0"], env=notify.env())
    for _, s in sockets:
        s.close()
    start_activated(d)
    try:
        notify.wait_for("READY=1", daemon=d)
        bench_verify(bench, vsock, 2000)
        with qmp_client(qsock, d) as q:
            exports = q.cmd("query-block-exports")
            assert [e["id"] for e in exports] == ["e0"]
            # The export listens on a duplicate: deleted and added again,
            # the same name still finds the socket.
            q.cmd("block-export-del", {"id": "e0"})
            q.event("BLOCK_EXPORT_DELETED")
            q.cmd("block-export-add", {
                "type": "vhost-user-blk", "id": "e1", "node-name": "d0",
                "writable": True, "num-queues": 2,
                "addr": {"type": "fd", "str": "vhost"}})
        bench_verify(bench, vsock, 500)
    finally:
        rc = d.stop()
    err = d.stderr()
    assert rc == 0, err
    # The one nobody used is named, the used ones are not.
    warn = [ln for ln in err.splitlines() if "no export or monitor" in ln]
    assert len(warn) == 1 and "spare (fd 5)" in warn[0], err
    assert "vhost" not in warn[0] and "qmp" not in warn[0]
    # systemd's socket files are left alone.
    assert vsock.exists() and qsock.exists()


def run_activated(spindle, workdir, names, args):
    sockets = [(n, listener(workdir / f"{n}.sock")) for n in names]
    d = activated(spindle, workdir, sockets, args)
    for _, s in sockets:
        s.close()
    start_activated(d)
    rc = d.wait()
    return rc, d.stderr()


EXPORT_FD = ("vhost-user-blk,id=e0,node-name=n0,addr.type=fd,addr.str={}")


@pytest.mark.parametrize("option, args", [
    ("--export", ["--blockdev", "driver=null-co,node-name=n0",
                  "--export", EXPORT_FD.format("nope")]),
    ("--chardev", ["--chardev", "socket,id=m0,fd=nope,server=on,wait=off",
                   "--monitor", "chardev=m0"]),
])
def test_unknown_name_lists_the_passed_ones(spindle, libsystemd, workdir,
                                            option, args):
    rc, err = run_activated(spindle, workdir, ["vhost", "qmp"], args)
    assert rc == 1, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"spindle: {option}: "), err
    assert "no socket named 'nope'" in lines[0]
    assert "'vhost', 'qmp'" in lines[0]


def test_name_without_passed_sockets(spindle, build_dir, workdir):
    proc = run_spindle(spindle, [
        "--blockdev", "driver=null-co,node-name=n0",
        "--export", EXPORT_FD.format("vhost")])
    if have_libsystemd(build_dir):
        check_one_line_error(proc, "--export", "passed no sockets")
    else:
        check_one_line_error(proc, "--export",
                             "spindle was built without libsystemd")


def test_numbered_passed_socket_still_works(spindle, libsystemd, workdir,
                                            notify):
    # fd 3 by number, as before names: counts as used (no warning).
    vsock = workdir / "vu.sock"
    d = activated(spindle, workdir, [("vhost", listener(vsock))], [
        "--blockdev", "driver=null-co,node-name=n0",
        "--export", EXPORT_FD.format(3)], env=notify.env())
    start_activated(d)
    try:
        notify.wait_for("READY=1", daemon=d)
        assert connects(vsock)
    finally:
        rc = d.stop()
    assert rc == 0, d.stderr()
    assert "no export or monitor" not in d.stderr()


# ---------------------------------------------------------------------------
# --config FILE


def write_config(path, doc):
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_config_file(spindle, workdir, notify):
    img = make_image(workdir / "disk.img", IMAGE_SIZE)
    qsock, v0, v1 = (workdir / n for n in ("qmp.sock", "v0.sock", "v1.sock"))
    # Keys in any order; processed object, blockdev, chardev, monitor,
    # export.  Entries as JSON objects or key=value strings.
    cfg = write_config(workdir / "vm.json", {
        "export": [{"type": "vhost-user-blk", "id": "e0", "node-name": "d0",
                    "iothread": "iot0", "writable": True,
                    "addr": {"type": "unix", "path": str(v0)}}],
        "monitor": [{"chardev": "m0"}],
        "chardev": [f"socket,id=m0,path={qsock},server=on,wait=off"],
        "blockdev": [{"driver": "file", "node-name": "d0",
                      "filename": str(img)},
                     "driver=null-co,node-name=n1"],
        "object": [{"qom-type": "iothread", "id": "iot0"}],
    })
    # The command line goes on after the file, using what it defined.
    d = Daemon(spindle, [
        "--config", cfg,
        "--export", f"vhost-user-blk,id=e1,node-name=n1,iothread=iot0,"
                    f"addr.type=unix,addr.path={v1}"],
        log_path=workdir / "spindle.log", ready=[qsock, v0, v1],
        env=dict(os.environ, **notify.env()))
    d.start()
    try:
        with qmp_client(qsock, d) as q:
            exports = {e["id"]: e for e in q.cmd("query-block-exports")}
            assert sorted(exports) == ["e0", "e1"]
            assert exports["e0"]["node-name"] == "d0"
            assert [t["id"] for t in q.cmd("query-iothreads")] == ["iot0"]
    finally:
        rc = d.stop()
    assert rc == 0, d.stderr()


CONFIG_ERRORS = [
    ("not-json", "{\"export\": [", None, "invalid JSON"),
    ("not-object", "[]", None, "expected a JSON object"),
    ("unknown-key", {"exports": []}, None, "unknown key 'exports'"),
    ("not-array", {"blockdev": {"driver": "null-co"}}, None,
     "key 'blockdev' must hold an array"),
    ("bad-entry-type", {"blockdev": [{"driver": "null-co",
                                      "node-name": "n0"}, 3]},
     "blockdev[1]", "must be a JSON object"),
    ("bad-entry-key", {"blockdev": [{"driver": "null-co", "node-name": "n0",
                                     "colour": "red"}]},
     "blockdev[0]", "colour"),
    ("bad-entry-value", {"chardev": [{"backend": "socket", "id": "m0",
                                      "path": "x.sock", "server": True,
                                      "wait": "sometimes"}]},
     "chardev[0]", "wait"),
    # The entry that is wrong is named, not the first of its key.
    ("later-entry", {"blockdev": ["driver=null-co,node-name=n0"],
                     "export": ["vhost-user-blk,id=e0,node-name=n0,"
                                "addr.type=unix,addr.path=v0.sock",
                                "vhost-user-blk,id=e1,node-name=n0,"
                                "addr.type=unix,addr.path=v1.sock,"
                                "num-queues=0"]},
     "export[1]", "num-queues"),
]


@pytest.mark.parametrize("doc, entry, text",
                         [c[1:] for c in CONFIG_ERRORS],
                         ids=[c[0] for c in CONFIG_ERRORS])
def test_config_errors(spindle, workdir, doc, entry, text):
    cfg = write_config(workdir / "bad.json", doc)
    proc = run_spindle(spindle, ["--config", cfg], cwd=workdir)
    option = f"--config {cfg}" + (f": {entry}" if entry else "")
    check_one_line_error(proc, option, text)
    assert list(workdir.glob("*.sock")) == []


def test_config_missing_file(spindle, workdir):
    missing = workdir / "nope.json"
    proc = run_spindle(spindle, ["--config", missing])
    check_one_line_error(proc, f"--config {missing}", "cannot read it")


def user_guide_config(repo_root):
    """The /etc/spindle/vm1.json of docs/user-guide.md's systemd section."""
    text = (repo_root / "docs" / "user-guide.md").read_text()
    section = text.split("## Running under systemd", 1)[1]
    return json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])


def test_user_guide_config(spindle, repo_root, libsystemd, workdir, notify):
    # The guide's example runs as it stands, on sockets passed by name.
    doc = user_guide_config(repo_root)
    doc["blockdev"][0]["filename"] = str(
        make_image(workdir / "vm1.img", IMAGE_SIZE))
    cfg = write_config(workdir / "vm1.json", doc)
    vsock, qsock = workdir / "vu.sock", workdir / "qmp.sock"
    d = activated(spindle, workdir, [("vhost", listener(vsock)),
                                     ("qmp", listener(qsock))],
                  ["--config", cfg], env=notify.env())
    start_activated(d)
    try:
        msg = notify.wait_for("READY=1", daemon=d)
        assert "STATUS=serving 1 export, 1 QMP monitor" in msg
        assert connects(vsock)
        with qmp_client(qsock, d) as q:
            assert [e["id"] for e in q.cmd("query-block-exports")] == ["e0"]
    finally:
        rc = d.stop()
    assert rc == 0, d.stderr()
    assert "no export or monitor" not in d.stderr()


# ---------------------------------------------------------------------------
# The unit files


def test_units_verify(build_dir, spindle, tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    built = build_dir / "contrib" / "systemd"
    units = {"spindle@.service": "spindle@vm1.service",
             "spindle@.socket": "spindle@vm1.socket",
             "spindle-qmp@.socket": "spindle-qmp@vm1.socket"}
    for template, instance in units.items():
        text = (built / template).read_text()
        if template.endswith(".service"):
            # The installed path is not there yet: verify checks that the
            # program exists, so point at the built one.
            start = [ln for ln in text.splitlines()
                     if ln.startswith("ExecStart=")]
            assert len(start) == 1 and "--config /etc/spindle/%i.json" \
                in start[0]
            assert "Type=notify" in text
            text = text.replace(start[0].split()[0],
                                f"ExecStart={spindle}")
        (tmp_path / instance).write_text(text)
    proc = subprocess.run([analyze, "verify", "--man=no",
                           *[str(tmp_path / u) for u in units.values()]],
                          capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    ours = [ln for ln in proc.stderr.splitlines()
            if "spindle" in ln]
    assert proc.returncode == 0 and not ours, proc.stderr

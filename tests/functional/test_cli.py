"""The spindle daemon's command line (docs/cli.md).

Every test starts the real binary.  Errors: each bad option makes spindle
print exactly one line, "spindle: --OPTION: message", exit 1, and leave
nothing behind (no socket, no pid file).  Good command lines: the daemon
starts, creates its socket with mode 0600, writes its pid file, and a
stop signal makes it exit 0 after removing both.  --daemonize returns
once the daemon is ready.  An export can also listen on a socket inherited
from the parent (addr.type=fd), and the daemon then answers vhost-user
messages on it.

The guest-less data path (reads, writes, flushes, ...) is tested with the
vhost-user front-end in tools/vu-client; these tests only go as far as one
GET_FEATURES message, to show that a socket really is served.
"""

import os
import signal
import socket
import stat
import struct
from pathlib import Path

import pytest

from conftest import (check_one_line_error, run_spindle,
                      start_on_listening_socket, wait_for)

MiB = 1 << 20
TIMEOUT = 15

# vhost-user (QEMU's docs/interop/vhost-user.rst): header u32 request,
# u32 flags, u32 size; GET_FEATURES = 1 answers with a u64.
VHOST_USER_GET_FEATURES = 1
VHOST_USER_VERSION = 0x1
VHOST_USER_REPLY = 0x4

VIRTIO_BLK_F_RO = 5
VIRTIO_BLK_F_FLUSH = 9
VIRTIO_BLK_F_MQ = 12
VIRTIO_BLK_F_DISCARD = 13
VIRTIO_BLK_F_WRITE_ZEROES = 14
VIRTIO_F_VERSION_1 = 32


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "disk.img"
    with open(path, "wb") as f:
        f.truncate(16 * MiB)
    return path


def blockdev(image, node="disk0", extra=""):
    return ["--blockdev", f"driver=file,node-name={node},filename={image}{extra}"]


def export(sock, node="disk0", exp_id="exp0", extra=""):
    return ["--export", f"type=vhost-user-blk,id={exp_id},node-name={node},"
                        f"addr.type=unix,addr.path={sock}{extra}"]


def pid_alive(pid):
    """True if pid runs (a zombie nobody reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def vhost_user_get_features(path):
    """Send GET_FEATURES on the vhost-user socket at path; return the bits."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(TIMEOUT)
        s.connect(str(path))
        s.sendall(struct.pack("<III", VHOST_USER_GET_FEATURES,
                              VHOST_USER_VERSION, 0))
        reply = b""
        while len(reply) < 20:
            chunk = s.recv(20 - len(reply))
            assert chunk, "the daemon closed the connection"
            reply += chunk
    request, flags, size = struct.unpack("<III", reply[:12])
    assert request == VHOST_USER_GET_FEATURES
    assert flags & VHOST_USER_REPLY
    assert size == 8
    return struct.unpack("<Q", reply[12:])[0]


def has_bit(features, bit):
    return bool(features & (1 << bit))


# --------------------------------------------------------------------------
# --help, --version


def test_help_lists_every_option(spindle):
    proc = run_spindle(spindle, ["--help"])
    assert proc.returncode == 0
    assert proc.stderr == ""
    for opt in ("-h, --help", "-V, --version", "--object", "--blockdev",
                "--export", "--chardev", "--monitor", "--pidfile",
                "--daemonize", "addr.type=fd", "num-queues",
                "logical-block-size", "iothread", "serial"):
        assert opt in proc.stdout, f"--help does not mention {opt}"
    assert "QMP monitor" in proc.stdout
    assert "not implemented" not in proc.stdout
    assert run_spindle(spindle, ["-h"]).stdout == proc.stdout


def test_version(spindle):
    for opt in ("--version", "-V"):
        proc = run_spindle(spindle, [opt])
        assert proc.returncode == 0
        words = proc.stdout.split()
        assert words[0] == "spindle"
        assert words[1].count(".") == 2


def test_object_help(spindle):
    proc = run_spindle(spindle, ["--object", "help"])
    assert proc.returncode == 0 and "iothread" in proc.stdout
    proc = run_spindle(spindle, ["--object", "iothread,help"])
    assert proc.returncode == 0 and "poll-max-ns" in proc.stdout


# --------------------------------------------------------------------------
# Errors: one line naming the option, exit 1, nothing left behind

def error_cases(img, d):
    """(id, args, option named, text in the message)."""
    sock = d / "vm.sock"
    good_export = export(sock, extra=",writable=on")
    iot = ["--object", "iothread,id=iot0"]
    bdev = blockdev(img)
    return [
        ("unknown-option", ["--frobnicate"], "--frobnicate", "unknown option"),
        ("unknown-option-value", ["--frobnicate=3"], "--frobnicate",
         "unknown option"),
        ("unknown-short", ["-x"], "-x", "unknown option"),
        ("missing-argument", ["--export"], "--export", "requires an argument"),
        ("stray-argument", ["disk.img"], None, "unexpected argument 'disk.img'"),
        ("trace", ["--trace", "virtio*"], "--trace", "not supported"),
        ("nbd-server", ["--nbd-server", "addr.type=unix,addr.path=n.sock"],
         "--nbd-server", "not supported"),
        # --object
        ("iothread-bad-value", ["--object", "iothread,id=iot0,poll-max-ns=-1"],
         "--object", "poll-max-ns"),
        ("iothread-bad-number", ["--object", "iothread,id=iot0,poll-grow=lots"],
         "--object", "poll-grow"),
        ("iothread-unknown-property", ["--object", "iothread,id=iot0,sparkle=1"],
         "--object", "sparkle"),
        ("iothread-no-id", ["--object", "iothread"], "--object", "'id'"),
        ("iothread-bad-cpus", ["--object", "iothread,id=iot0,cpu-affinity=5-2"],
         "--object", "cpu-affinity"),
        ("iothread-duplicate", iot + iot, "--object", "already exists"),
        ("object-other-type", ["--object", "secret,id=s0,data=x"], "--object",
         "'secret' is not supported"),
        ("object-no-type", ["--object", "id=iot0"], "--object", "qom-type"),
        ("object-json-no-type", ["--object", '{"id": "iot0"}'], "--object",
         "qom-type"),
        # --blockdev
        ("blockdev-unknown-driver", ["--blockdev", "driver=vmdk,node-name=d0"],
         "--blockdev", "vmdk"),
        ("blockdev-missing-file", blockdev(d / "nope" / "x.img"), "--blockdev",
         "No such file or directory"),
        ("blockdev-unknown-key", blockdev(img, extra=",sparkle=on"),
         "--blockdev", "sparkle"),
        ("blockdev-duplicate", bdev + bdev, "--blockdev", "disk0"),
        ("blockdev-bad-json", ["--blockdev", '{"driver": "file",'], "--blockdev",
         "JSON"),
        # --export
        ("export-missing-node", export(sock, node="nope"), "--export", "'nope'"),
        ("export-node-defined-later", export(sock) + bdev, "--export", "'disk0'"),
        ("export-missing-iothread", bdev + export(sock, extra=",iothread=iotX"),
         "--export", "'iotX'"),
        ("export-iothread-defined-later",
         bdev + export(sock, extra=",iothread=iot0") + iot, "--export", "'iot0'"),
        ("export-num-queues-zero", bdev + export(sock, extra=",num-queues=0"),
         "--export", "num-queues"),
        ("export-num-queues-too-many", bdev + export(sock, extra=",num-queues=65"),
         "--export", "num-queues"),
        ("export-num-queues-not-number",
         bdev + export(sock, extra=",num-queues=four"), "--export", "num-queues"),
        ("export-lbs-not-power-of-two",
         bdev + export(sock, extra=",logical-block-size=1000"), "--export",
         "logical-block-size"),
        ("export-lbs-too-small",
         bdev + export(sock, extra=",logical-block-size=256"), "--export",
         "logical-block-size"),
        ("export-lbs-too-large",
         bdev + export(sock, extra=",logical-block-size=128k"), "--export",
         "logical-block-size"),
        ("export-unknown-key", bdev + export(sock, extra=",sparkle=on"),
         "--export", "sparkle"),
        ("export-unknown-addr-key", bdev + export(sock, extra=",addr.abstract=on"),
         "--export", "addr.abstract"),
        ("export-unknown-type",
         bdev + ["--export", "type=nbd,id=e0,node-name=disk0"], "--export", "nbd"),
        ("export-no-type", bdev + ["--export", "id=e0,node-name=disk0"],
         "--export", "'type'"),
        ("export-no-id",
         bdev + ["--export", f"vhost-user-blk,node-name=disk0,addr.type=unix,"
                             f"addr.path={sock}"], "--export", "'id'"),
        ("export-no-addr", bdev + ["--export", "vhost-user-blk,id=e0,"
                                               "node-name=disk0"],
         "--export", "addr"),
        ("export-inet", bdev + ["--export", "vhost-user-blk,id=e0,node-name=disk0,"
                                            "addr.type=inet,addr.host=::,"
                                            "addr.port=1234"],
         "--export", "addr.type"),
        ("export-socket-dir-missing", bdev + export(d / "nodir" / "vm.sock"),
         "--export", "No such file or directory"),
        ("export-socket-path-too-long", bdev + export(d / ("s" * 120)),
         "--export", "s" * 20),
        ("export-duplicate-id",
         bdev + blockdev(img, node="ro", extra=",read-only=on,locking=off")
         + good_export + export(d / "b.sock", node="ro"),
         "--export", "already exists"),
        ("export-writable-read-only-node",
         blockdev(img, extra=",read-only=on") + good_export, "--export",
         "read-only"),
        ("export-node-shared-writable",
         bdev + good_export + export(d / "b.sock", exp_id="exp1"),
         "--export", "already exported"),
        ("export-serial-too-long",
         bdev + export(sock, extra=",serial=123456789012345678901"), "--export",
         "serial"),
        ("export-fd-not-open",
         bdev + ["--export", "vhost-user-blk,id=e0,node-name=disk0,addr.type=fd,"
                             "addr.str=999"], "--export", "addr.str"),
        ("export-fd-not-number",
         bdev + ["--export", "vhost-user-blk,id=e0,node-name=disk0,addr.type=fd,"
                             "addr.str=three"], "--export", "addr.str"),
        ("export-fd-not-socket",
         bdev + ["--export", "vhost-user-blk,id=e0,node-name=disk0,addr.type=fd,"
                             "addr.str=0"], "--export", "addr.str"),
        # --chardev, --monitor
        ("chardev-other-type", ["--chardev", "file,id=c0,path=x"], "--chardev",
         "'file'"),
        ("chardev-client", ["--chardev", f"socket,id=c0,path={d / 'q.sock'}"],
         "--chardev", "server"),
        ("chardev-no-id", ["--chardev", f"socket,path={d / 'q.sock'},server=on"],
         "--chardev", "'id'"),
        ("chardev-unknown-key",
         ["--chardev", f"socket,id=c0,path={d / 'q.sock'},server=on,telnet=on"],
         "--chardev", "telnet"),
        ("monitor-missing-chardev", ["--monitor", "chardev=nope"], "--monitor",
         "'nope'"),
        ("monitor-readline",
         ["--chardev", f"socket,id=c0,path={d / 'q.sock'},server=on,wait=off",
          "--monitor", "chardev=c0,mode=readline"], "--monitor", "mode"),
        # --pidfile: written last; its failure undoes everything
        ("pidfile-dir-missing",
         iot + bdev + export(sock, extra=",iothread=iot0")
         + ["--pidfile", str(d / "nodir" / "spindle.pid")], "--pidfile",
         "No such file or directory"),
    ]


ERROR_IDS = [c[0] for c in error_cases(Path("i"), Path("d"))]


@pytest.mark.parametrize("case", ERROR_IDS)
def test_error_names_option(spindle, image, tmp_path, case):
    work = tmp_path / "work"
    work.mkdir()
    _, args, option, text = next(c for c in error_cases(image, work)
                                 if c[0] == case)
    check_one_line_error(run_spindle(spindle, args, cwd=work), option, text)
    # Nothing created on the way is left behind.
    leftovers = [p.name for p in work.iterdir()]
    assert leftovers == [], f"left behind: {leftovers}"


def test_socket_file_in_the_way(spindle, image, tmp_path):
    sock = tmp_path / "vm.sock"
    sock.write_text("not a socket")
    proc = run_spindle(spindle, blockdev(image) + export(sock))
    assert proc.returncode == 1
    assert proc.stderr.startswith("spindle: --export: ")
    assert sock.read_text() == "not a socket"


def test_socket_in_use(spindle, tmp_path, spindle_daemon):
    sock = tmp_path / "vm.sock"
    first = spindle_daemon(["--blockdev", "driver=null-co,node-name=n0",
                            *export(sock, node="n0")])
    first.wait_ready(sock)
    proc = run_spindle(spindle, ["--blockdev", "driver=null-co,node-name=n0",
                         *export(sock, node="n0")])
    assert proc.returncode == 1
    assert proc.stderr.startswith("spindle: --export: ")
    assert "in use" in proc.stderr
    assert sock.exists()                     # the first daemon's, untouched
    rc, err = first.stop(), first.stderr()
    assert rc == 0, err


def test_stale_socket_is_replaced(spindle, tmp_path, spindle_daemon):
    sock = tmp_path / "vm.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sock))
    stale.close()                            # the file stays, nobody listens
    d = spindle_daemon(["--blockdev", "driver=null-co,node-name=n0",
                        *export(sock, node="n0"),
                        "--pidfile", str(tmp_path / "pid")])
    d.wait_ready(tmp_path / "pid")
    assert vhost_user_get_features(sock) & (1 << VIRTIO_F_VERSION_1)
    rc, err = d.stop(), d.stderr()
    assert rc == 0, err
    assert not sock.exists()


# --------------------------------------------------------------------------
# Running


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP],
                         ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_start_and_stop(spindle, image, tmp_path, spindle_daemon, sig):
    sock = tmp_path / "vm.sock"
    pidfile = tmp_path / "spindle.pid"
    d = spindle_daemon(["--object", "iothread,id=iot0,poll-max-ns=16384",
                        *blockdev(image, extra=",cache.direct=off,aio=threads"),
                        *export(sock, extra=",writable=on,num-queues=2,"
                                            "iothread=iot0,serial=abc"),
                        "--pidfile", str(pidfile)])
    d.wait_ready(pidfile)
    # The pid file comes last: by then the socket exists.
    assert stat.S_ISSOCK(sock.stat().st_mode)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert pidfile.read_text() == f"{d.proc.pid}\n"
    threads = {Path(t, "comm").read_text().strip()
               for t in Path(f"/proc/{d.proc.pid}/task").iterdir()}
    assert "iot-iot0" in threads

    rc, err = d.stop(sig), d.stderr()
    assert rc == 0, err
    assert not sock.exists()
    assert not pidfile.exists()
    assert "iothread iot0 stats: turns=" in err


def test_sigusr1_prints_stats(spindle, tmp_path, spindle_daemon):
    sock = tmp_path / "vm.sock"
    d = spindle_daemon(["--object", "iothread,id=iot0",
                        "--blockdev", "driver=null-co,node-name=n0",
                        *export(sock, node="n0", extra=",iothread=iot0")])
    d.wait_ready(sock)
    d.proc.send_signal(signal.SIGUSR1)
    line = wait_for(d.stats_lines, "the statistics line", daemon=d)[0]
    assert line.startswith("spindle: iothread iot0 stats: turns=")
    assert d.proc.poll() is None          # still running
    rc = d.stop()
    assert rc == 0


def test_relative_paths(spindle, tmp_path, spindle_daemon):
    (tmp_path / "vm1.img").write_bytes(b"\0" * MiB)
    d = spindle_daemon(["--blockdev", "driver=file,node-name=d0,filename=vm1.img",
                        "--export", "vhost-user-blk,id=e0,node-name=d0,"
                                    "addr.type=unix,addr.path=vm1.sock",
                        "--pidfile", "vm1.pid"], workdir=tmp_path)
    d.wait_ready(tmp_path / "vm1.pid")
    assert (tmp_path / "vm1.sock").exists()
    rc, err = d.stop(), d.stderr()
    assert rc == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vm1.img"]


def test_json_options(spindle, image, tmp_path, spindle_daemon):
    sock = tmp_path / "vm.sock"
    d = spindle_daemon([
      "--object", '{"qom-type": "iothread", "id": "iot0", "poll-max-ns": 0}',
      "--blockdev", f'{{"driver": "file", "node-name": "disk0", '
                    f'"filename": "{image}", "cache": {{"direct": false}}}}',
      "--export", f'{{"type": "vhost-user-blk", "id": "exp0", '
                  f'"node-name": "disk0", "writable": true, "num-queues": 2, '
                  f'"logical-block-size": 4096, "iothread": ["iot0"], '
                  f'"addr": {{"type": "unix", "path": "{sock}"}}}}'])
    d.wait_ready(sock)
    features = vhost_user_get_features(sock)
    assert has_bit(features, VIRTIO_BLK_F_MQ)
    rc, err = d.stop(), d.stderr()
    assert rc == 0, err
    assert not sock.exists()


def test_json_export_errors_name_keys(spindle, image, tmp_path):
    proc = run_spindle(spindle, blockdev(image) + [
        "--export", '{"type": "vhost-user-blk", "id": "e0", "node-name": "disk0",'
                    ' "num-queues": 0, "addr": {"type": "unix", "path": "x"}}'])
    assert proc.returncode == 1
    assert proc.stderr.startswith("spindle: --export: ")
    assert "num-queues" in proc.stderr


def test_iothread_list_of_one(spindle, tmp_path, spindle_daemon):
    sock = tmp_path / "vm.sock"
    d = spindle_daemon(["--object", "iothread,id=iot0",
                        "--blockdev", "driver=null-co,node-name=n0",
                        *export(sock, node="n0", extra=",iothread.0=iot0")])
    d.wait_ready(sock)
    rc, err = d.stop(), d.stderr()
    assert rc == 0, err


@pytest.mark.parametrize("writable,queues", [(False, 1), (True, 4)],
                         ids=["read-only", "writable-4-queues"])
def test_features_follow_options(spindle, tmp_path, spindle_daemon, writable,
                                 queues):
    sock = tmp_path / "vm.sock"
    d = spindle_daemon(["--blockdev", "driver=null-co,node-name=n0,size=64M",
                        *export(sock, node="n0",
                                extra=f",writable={'on' if writable else 'off'},"
                                      f"num-queues={queues}")])
    d.wait_ready(sock)
    f = vhost_user_get_features(sock)
    assert has_bit(f, VIRTIO_F_VERSION_1)
    assert has_bit(f, VIRTIO_BLK_F_FLUSH)
    assert has_bit(f, VIRTIO_BLK_F_RO) == (not writable)
    assert has_bit(f, VIRTIO_BLK_F_DISCARD) == writable
    assert has_bit(f, VIRTIO_BLK_F_WRITE_ZEROES) == writable
    assert has_bit(f, VIRTIO_BLK_F_MQ) == (queues > 1)
    rc, err = d.stop(), d.stderr()
    assert rc == 0, err


def test_read_only_node_shared_by_two_exports(spindle, image, tmp_path,
                                             spindle_daemon):
    a, b = tmp_path / "a.sock", tmp_path / "b.sock"
    d = spindle_daemon(["--object", "iothread,id=iot0",
                        *blockdev(image, extra=",read-only=on"),
                        *export(a, exp_id="ea", extra=",iothread=iot0"),
                        *export(b, exp_id="eb", extra=",iothread=iot0")])
    d.wait_ready(b)
    assert a.exists()
    rc, err = d.stop(), d.stderr()
    assert rc == 0, err
    assert not a.exists() and not b.exists()


def test_inherited_listening_socket(spindle, image, tmp_path, spindle_daemon):
    sock_path = tmp_path / "vm.sock"
    pidfile = tmp_path / "spindle.pid"
    d = start_on_listening_socket(spindle_daemon, sock_path, lambda fd: [
        *blockdev(image),
        "--export", f"type=vhost-user-blk,id=exp0,node-name=disk0,"
                    f"addr.type=fd,addr.str={fd},writable=on",
        "--pidfile", str(pidfile)])
    d.wait_ready(pidfile)
    features = vhost_user_get_features(sock_path)
    assert has_bit(features, VIRTIO_F_VERSION_1)
    assert not has_bit(features, VIRTIO_BLK_F_RO)
    rc, err = d.stop(), d.stderr()
    assert rc == 0, err
    # The daemon did not create the socket file, so it leaves it alone.
    assert sock_path.exists()
    assert not pidfile.exists()


def test_monitor_serves_qmp(spindle, tmp_path, spindle_daemon):
    # The protocol itself: test_qmp_protocol.py.
    sock = tmp_path / "vm.sock"
    qmp = tmp_path / "qmp.sock"
    pidfile = tmp_path / "spindle.pid"
    d = spindle_daemon(["--chardev", f"socket,id=mon0,path={qmp},server=on,"
                                     "wait=off",
                        "--monitor", "chardev=mon0",
                        "--blockdev", "driver=null-co,node-name=n0",
                        *export(sock, node="n0"),
                        "--pidfile", str(pidfile)])
    d.wait_ready(pidfile)
    assert stat.S_ISSOCK(qmp.stat().st_mode)
    assert stat.S_IMODE(qmp.stat().st_mode) == 0o600
    with socket.socket(socket.AF_UNIX) as c:
        c.settimeout(TIMEOUT)
        c.connect(str(qmp))
        assert c.recv(4096).startswith(b'{"QMP":')
    rc, err = d.stop(), d.stderr()
    assert rc == 0, err
    assert "warning" not in err
    assert not qmp.exists()


def test_pidfile_is_locked(spindle, tmp_path, spindle_daemon):
    pidfile = tmp_path / "spindle.pid"
    first = spindle_daemon(["--blockdev", "driver=null-co,node-name=n0",
                            *export(tmp_path / "a.sock", node="n0"),
                            "--pidfile", str(pidfile)])
    first.wait_ready(pidfile)
    proc = run_spindle(spindle, ["--blockdev", "driver=null-co,node-name=n0",
                         *export(tmp_path / "b.sock", node="n0"),
                         "--pidfile", str(pidfile)])
    assert proc.returncode == 1
    assert proc.stderr.startswith("spindle: --pidfile: ")
    assert "lock" in proc.stderr
    assert not (tmp_path / "b.sock").exists()
    assert pidfile.read_text() == f"{first.proc.pid}\n"
    rc, err = first.stop(), first.stderr()
    assert rc == 0, err


# --------------------------------------------------------------------------
# --daemonize


def test_daemonize(spindle, image, tmp_path):
    sock = tmp_path / "vm.sock"
    pidfile = tmp_path / "spindle.pid"
    proc = run_spindle(spindle, ["--daemonize", "--object", "iothread,id=iot0",
                         *blockdev(image),
                         *export(sock, extra=",writable=on,iothread=iot0"),
                         "--pidfile", str(pidfile)])
    pid = None
    try:
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "" and proc.stderr == ""
        # Ready when the parent returned: no waiting needed.
        assert stat.S_ISSOCK(sock.stat().st_mode)
        pid = int(pidfile.read_text())
        assert pid_alive(pid)
        # Detached: its own session, stdio on /dev/null.
        assert os.getsid(pid) == pid
        for fd in (0, 1, 2):
            assert os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/null"
        assert vhost_user_get_features(sock) & (1 << VIRTIO_F_VERSION_1)
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not pid_alive(pid), "the daemon to exit")
        pid = None
        assert not sock.exists()
        assert not pidfile.exists()
    finally:
        if pid is not None and pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_daemonize_reports_start_up_errors(spindle, image, tmp_path):
    proc = run_spindle(spindle, ["--daemonize", *blockdev(image),
                         *export(tmp_path / "vm.sock", extra=",num-queues=0")])
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("spindle: --export: ")
    assert list(tmp_path.iterdir()) == [image]

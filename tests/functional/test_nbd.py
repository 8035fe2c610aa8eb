"""driver=nbd (block/nbd.c, docs/block.md) against real NBD servers.

The servers are started by the tests themselves, on a UNIX socket in the
test's directory, and stopped by PID: nbdkit's memory plugin (64M; its
log filter to see which commands arrive) and qemu-nbd serving a file (which outlives a restart of the
server, so data written before it can be checked after).  Each test is
skipped, saying why, where spindle was built without libnbd or the
server's program is missing.

What is checked: spindle-bench --verify over a vhost-user-blk export and
a virtio-scsi LUN of an nbd node; flush, discard and write-zeroes reaching
the server (nbdkit's log) and a discard leaving a hole in qemu-nbd's file;
a read-only server refusing a writable node and a wrong export name, both
at open; block_resize refused; an export over two IOThreads with and
without multi-conn; and faults: the server killed mid-run (the bench sees
I/O errors, the daemon logs the loss once, stays up and answers QMP, and
serves again once the server is back), and with reconnect-delay a server
restarted mid-run (the bench sees no error and no mismatch); and a
server of our own (BadServer) that closes in the middle of a reply or
answers with a reply libnbd cannot parse: the read fails, the daemon logs
why and stays up.
"""

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest

from conftest import check_one_line_error, make_image, run_spindle, vu, vu_ok
from qmp_util import QmpSync
from remote_export import (bench, bench_in_background,  # noqa: F401
                           check_verified, run_bench, skip_unless_built_with,
                           check_qmp_answers, join_failed_bench, start_export,
                           verify_run, verify_scsi_lun)
from spindle_daemon import wait_for

SIZE = 64 << 20
START_TIMEOUT_S = 10


@pytest.fixture(scope="module", autouse=True)
def built_with_libnbd(build_dir):
    skip_unless_built_with(build_dir, "libnbd")


class Server:
    """An NBD server program on a UNIX socket, started (again) by
    start() and stopped by PID."""

    def __init__(self, argv, sock, pidfile):
        self.argv = argv
        self.sock = sock
        self.pidfile = pidfile
        self.proc = None

    def start(self):
        for p in (self.sock, self.pidfile):
            if os.path.exists(p):
                os.unlink(p)
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        wait_for(lambda: os.path.exists(self.pidfile) or
                 self.proc.poll() is not None,
                 f"{self.argv[0]} to listen", START_TIMEOUT_S)
        assert self.proc.poll() is None, self.proc.stderr.read().decode()
        return self

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def blockdev(self, extra=""):
        """--blockdev options of an nbd node on this server."""
        return (f"driver=nbd,server.type=unix,server.path={self.sock}"
                + (f",{extra}" if extra else ""))


@pytest.fixture
def servers():
    started = []
    yield started
    for s in started:
        s.kill()


@pytest.fixture
def nbdkit(servers, workdir):
    """Factory: nbdkit(*args) -> a started Server running
    `nbdkit ... args` (filters, plugin, its arguments)."""
    if not shutil.which("nbdkit"):
        pytest.skip("nbdkit is not installed (apt-get install nbdkit)")

    def start(*args):
        s = Server(["nbdkit", "-f", "--exit-with-parent",
                    "-U", str(workdir / "nbd.sock"),
                    "-P", str(workdir / "nbd.pid"), *args],
                   str(workdir / "nbd.sock"), str(workdir / "nbd.pid"))
        servers.append(s)
        return s.start()
    return start


@pytest.fixture
def qemu_nbd(servers, workdir):
    """Factory: qemu_nbd(image, *args) -> a started Server serving image
    (raw) as export "disk"."""
    if not shutil.which("qemu-nbd"):
        pytest.skip("qemu-nbd is not installed (apt-get install qemu-utils)")

    def start(image, *args):
        s = Server(["qemu-nbd", "-t", "-f", "raw", "-x", "disk",
                    "-k", str(workdir / "qnbd.sock"),
                    "--pid-file", str(workdir / "qnbd.pid"), *args,
                    str(image)],
                   str(workdir / "qnbd.sock"), str(workdir / "qnbd.pid"))
        servers.append(s)
        return s.start()
    return start


# --------------------------------------------------------------------------
# Data

def test_verify_blk_over_nbdkit(spindle_daemon, workdir, nbdkit, bench):
    srv = nbdkit("memory", "64M")
    d = start_export(spindle_daemon, workdir, srv.blockdev())
    verify_run(bench, workdir / "vu.sock", count=3000)
    assert d.stop() == 0, d.stderr()


def test_verify_scsi_lun_over_qemu_nbd(spindle_daemon, workdir, qemu_nbd,
                                       bench):
    image = make_image(workdir / "disk.img", SIZE)
    srv = qemu_nbd(image)
    verify_scsi_lun(spindle_daemon, workdir, bench,
                    srv.blockdev("export=disk"), count=3000)


def test_flush_discard_zeroes_reach_the_server(spindle_daemon, workdir,
                                               nbdkit, client):
    log = workdir / "nbdkit.log"
    srv = nbdkit("--filter=log", "memory", "64M", f"logfile={log}")
    d = start_export(spindle_daemon, workdir, srv.blockdev("discard=unmap"),
                     queues=1)
    vu_ok(client, workdir / "vu.sock", "write", "0", "64k", "--pattern", "7",
          "flush", "discard", "0", "32k", "write-zeroes", "1M", "64k",
          "read", "32k", "32k", "--verify", "7",
          "read", "1M", "64k", "--expect-zeroes")
    assert d.stop() == 0, d.stderr()
    srv.kill()
    text = log.read_text()
    for what in (" Write id=", " Flush id=", " Trim id=", " Zero id="):
        assert what in text, text


def test_discard_leaves_a_hole_in_qemu_nbds_file(spindle_daemon, workdir,
                                                 qemu_nbd, client):
    image = make_image(workdir / "disk.img", SIZE)
    srv = qemu_nbd(image, "--discard=unmap")
    d = start_export(spindle_daemon, workdir,
                     srv.blockdev("export=disk,discard=unmap"), queues=1)
    sock = workdir / "vu.sock"
    vu_ok(client, sock, "write", "0", "4M", "--pattern", "3", "flush")
    written = os.stat(image).st_blocks
    assert written * 512 >= 4 << 20
    vu_ok(client, sock, "discard", "0", "4M", "flush",
          "read", "0", "4M", "--expect-zeroes")
    assert os.stat(image).st_blocks * 512 <= written * 512 - (3 << 20)
    assert d.stop() == 0, d.stderr()


# --------------------------------------------------------------------------
# Open

def test_read_only_server_refuses_a_writable_node(spindle, workdir, nbdkit):
    srv = nbdkit("-r", "memory", "64M")
    proc = run_spindle(spindle, ["--blockdev", srv.blockdev("node-name=n0")])
    check_one_line_error(proc, "--blockdev",
                         "serves export '' read-only: open the node with "
                         "read-only=on")


def test_missing_export_name_fails_at_open(spindle, workdir, qemu_nbd):
    image = make_image(workdir / "disk.img", SIZE)
    srv = qemu_nbd(image)
    proc = run_spindle(spindle, ["--blockdev",
                                 srv.blockdev("node-name=n0,export=nope")])
    check_one_line_error(proc, "--blockdev",
                         f"Cannot connect to the NBD server at unix:{srv.sock}"
                         " (export 'nope')")


def test_block_resize_is_refused(spindle_daemon, workdir, nbdkit):
    srv = nbdkit("memory", "64M")
    d = start_export(spindle_daemon, workdir, srv.blockdev(), qmp=True)
    qmp = QmpSync(str(workdir / "qmp.sock"))
    try:
        cls, desc = qmp.error("block_resize", {"node-name": "d0",
                                               "size": 128 << 20})
        assert "cannot be resized" in desc, desc
        nodes = qmp.cmd("query-named-block-nodes")
        assert [n["image"]["virtual-size"] for n in nodes
                if n["node-name"] == "d0"] == [SIZE]
    finally:
        qmp.close()
    assert d.stop() == 0, d.stderr()


# --------------------------------------------------------------------------
# IOThreads

def test_two_iothreads_with_multi_conn(spindle_daemon, workdir, nbdkit,
                                       bench):
    """nbdkit's memory plugin offers multi-conn: each IOThread gets its
    own connection."""
    srv = nbdkit("memory", "64M")
    d = start_export(spindle_daemon, workdir, srv.blockdev(),
                     iothread=["iot0", "iot1"])
    r = verify_run(bench, workdir / "vu.sock", count=1000, iodepth=4)
    assert all(q["ios"] > 0 for q in r["per_queue"])
    assert d.stop() == 0, d.stderr()


def test_two_iothreads_without_multi_conn(spindle_daemon, workdir, qemu_nbd,
                                          bench):
    """qemu-nbd (one client, no multi-conn): the second IOThread's queue
    gets I/O errors and the log says why; the first one's works."""
    image = make_image(workdir / "disk.img", SIZE)
    srv = qemu_nbd(image)
    d = start_export(spindle_daemon, workdir, srv.blockdev("export=disk"),
                     iothread=["iot0", "iot1"])
    r = run_bench(bench, workdir / "vu.sock", "--rw=randread", "--queues=2",
                  "--iodepth=1", "--count=50", expect=1)
    assert r["errors"] > 0
    assert any(q["ios"] > 0 for q in r["per_queue"])
    assert d.alive()
    assert "does not offer multi-conn" in d.stderr()
    assert d.stop() == 0, d.stderr()


# --------------------------------------------------------------------------
# Faults

def test_server_killed_mid_run(spindle_daemon, workdir, nbdkit, bench,
                               client):
    """reconnect-delay=0: I/O errors while the server is gone, the daemon
    stays up (QMP answers), one log line; back to work once it is back."""
    srv = nbdkit("memory", "64M")
    d = start_export(spindle_daemon, workdir, srv.blockdev(), qmp=True)
    t, out = bench_in_background(bench, workdir / "vu.sock", "--rw=randrw",
                                 "--queues=2", "--iodepth=4", "--runtime=2")
    time.sleep(0.7)
    srv.kill()
    join_failed_bench(t, out)
    assert d.alive()
    check_qmp_answers(workdir)
    assert d.stderr().count("lost the connection to the NBD server") == 1
    srv.start()
    wait_for(lambda: "reconnected to the NBD server" in d.stderr(),
             "the reconnection", 10, daemon=d)
    vu_ok(client, workdir / "vu.sock", "write", "0", "64k", "--pattern", "2",
          "read", "0", "64k", "--verify", "2")
    assert d.stop() == 0, d.stderr()


def test_reconnect_delay_resumes_io(spindle_daemon, workdir, qemu_nbd,
                                    bench):
    """reconnect-delay=10 and qemu-nbd restarted on the same socket
    mid-run: requests wait, then go on; no error, no mismatch."""
    image = make_image(workdir / "disk.img", SIZE)
    srv = qemu_nbd(image)
    d = start_export(spindle_daemon, workdir,
                     srv.blockdev("export=disk,reconnect-delay=10"))
    t, out = bench_in_background(bench, workdir / "vu.sock", "--verify",
                                 "--rw=randrw", "--queues=2", "--iodepth=4",
                                 "--size=4M", "--runtime=3")
    time.sleep(0.7)
    srv.kill()
    time.sleep(0.8)
    srv.start()
    t.join()
    proc = out["proc"]
    assert proc.returncode == 0, proc.stderr
    check_verified(json.loads(proc.stdout))
    assert "lost the connection" in d.stderr()
    assert "reconnected to the NBD server" in d.stderr()
    assert d.stop() == 0, d.stderr()


class BadServer:
    """A minimal NBD server (fixed newstyle handshake, simple replies) that
    misbehaves on every READ: `mode` "close" sends the reply's header and
    half its data, then closes; "garbage" sends a reply with a wrong
    magic.  Other commands succeed.  Serves connections one after the
    other (the driver reconnects) until stop()."""

    SIZE = 1 << 20

    def __init__(self, path, mode):
        self.mode = mode
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(4)
        self.listener.settimeout(0.2)
        self.reads = 0
        self.running = True
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def stop(self):
        self.running = False
        self.thread.join()
        self.listener.close()

    @staticmethod
    def recv(conn, n):
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise ConnectionError("client went away")
            data += chunk
        return data

    @staticmethod
    def opt_reply(conn, opt, rtype, data=b""):
        conn.sendall(struct.pack(">QIII", 0x3e889045565a9, opt, rtype,
                                 len(data)) + data)

    def handshake(self, conn):
        conn.sendall(b"NBDMAGICIHAVEOPT" + struct.pack(">H", 3))
        self.recv(conn, 4)                              # client flags
        while True:
            _, opt, length = struct.unpack(">QII", self.recv(conn, 16))
            self.recv(conn, length)
            if opt != 7:                                # not NBD_OPT_GO
                self.opt_reply(conn, opt, 0x80000001)   # ERR_UNSUP
                continue
            # NBD_INFO_EXPORT: size, HAS_FLAGS | SEND_FLUSH; then ACK.
            self.opt_reply(conn, opt, 3,
                           struct.pack(">HQH", 0, self.SIZE, 1 | 4))
            self.opt_reply(conn, opt, 1)
            return

    def transmission(self, conn):
        while True:
            _, _, cmd, handle, _, length = struct.unpack(
                ">IHHQQI", self.recv(conn, 28))
            if cmd == 1:                                # WRITE
                self.recv(conn, length)
            if cmd == 2:                                # DISC
                return
            if cmd != 0:
                conn.sendall(struct.pack(">IIQ", 0x67446698, 0, handle))
                continue
            self.reads += 1
            if self.mode == "close":
                conn.sendall(struct.pack(">IIQ", 0x67446698, 0, handle) +
                             bytes(length // 2))
                return
            conn.sendall(struct.pack(">IIQ", 0x12345678, 0, handle) +
                         bytes(length))

    def serve(self):
        while self.running:
            try:
                conn, _ = self.listener.accept()
            except socket.timeout:
                continue
            with conn:
                try:
                    self.handshake(conn)
                    self.transmission(conn)
                except (ConnectionError, OSError):
                    pass


@pytest.mark.parametrize("mode,why", [
    ("close", "server disconnected unexpectedly"),
    ("garbage", "invalid reply magic"),
])
def test_server_misbehaving_mid_reply(spindle_daemon, workdir, client, mode,
                                      why):
    """A read whose reply is cut short or malformed fails with an I/O
    error; the daemon logs the lost connection and why, and stays up."""
    srv = BadServer(str(workdir / "bad.sock"), mode)
    try:
        d = start_export(spindle_daemon, workdir,
                         f"driver=nbd,server.type=unix,"
                         f"server.path={workdir}/bad.sock", queues=1)
        vu_ok(client, workdir / "vu.sock", "write", "0", "4k", "flush")
        rc, doc = vu(client, workdir / "vu.sock", "read", "0", "4k")
        assert rc != 0 and doc["results"][0]["status"] == "IOERR", doc
        assert srv.reads >= 1
        assert d.alive()
        wait_for(lambda: "lost the connection to the NBD server" in
                 d.stderr(), "the loss in the log", 5, daemon=d)
        assert why in d.stderr()
        assert d.stop() == 0, d.stderr()
    finally:
        srv.stop()

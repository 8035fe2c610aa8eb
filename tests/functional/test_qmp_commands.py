"""Functional tests of the QMP management commands against a real daemon.

A real spindle runs with its monitor on a UNIX socket (qmp_util.SpindleQmp)
and a qemu.qmp client drives it: IOThreads (object-add, object-del, qom-set,
qom-get, query-iothreads), block nodes (blockdev-add, blockdev-del,
query-named-block-nodes, block_resize, query-blockstats) and exports
(block-export-add, block-export-del, query-block-exports,
block-export-lun-add, block-export-lun-del).  spindle-vu-client
(tools/frontend) is the guest: it does the I/O whose effects the commands
must show (statistics that grow, exact request counts, a resize the
front-end sees, hot-plugged LUNs it can use, a forced disconnect).

Every command is also checked on its error paths: missing, ill-typed and
unexpected arguments, unknown ids, and the refusals that protect what is
in use (a node an export serves, an IOThread an export runs in, an export
a front-end is connected to).  After a refused command nothing changed.
"""

import contextlib
import json
import os
import subprocess
import time

import pytest

from conftest import make_image
from qmp_util import SpindleQmp, thread_comm, thread_cpus
from spindle_daemon import is_listening, wait_for
from test_frontend import pattern

KiB = 1 << 10
MiB = 1 << 20
IMAGE_SIZE = 64 * MiB
CLIENT_TIMEOUT_S = 60

POLL_STATS = {"window-ns", "turns", "poll-hits", "poll-misses", "wakeups",
              "poll-time-ns", "block-time-ns", "grows", "shrinks",
              "dispatches", "bhs", "timers", "naps", "cpu-ns", "policy",
              "block-cpu-ns", "wake-late-ns", "budget-ns", "handlers"}
# What query-iothreads says about each pollable handler.
HANDLER_STATS = {"name", "window-ns", "events", "poll-hits", "poll-misses",
                 "window-changes", "last-change-event", "last-change-ns",
                 "active", "pending"}
POLICIES = ("fixed", "qemu-classic", "qemu-weighted", "predictive")

# QEMU's BlockDeviceStats members that Spindle reports.
BLOCK_STATS = {
    "rd_bytes", "wr_bytes", "unmap_bytes", "rd_operations", "wr_operations",
    "flush_operations", "unmap_operations", "rd_total_time_ns",
    "wr_total_time_ns", "flush_total_time_ns", "unmap_total_time_ns",
    "rd_merged", "wr_merged", "unmap_merged", "failed_rd_operations",
    "failed_wr_operations", "failed_flush_operations",
    "failed_unmap_operations", "invalid_rd_operations",
    "invalid_wr_operations", "invalid_flush_operations",
    "invalid_unmap_operations", "account_invalid", "account_failed",
    "timed_stats", "spindle-write-zeroes",
}

GENERIC = "GenericError"
NOT_FOUND = "DeviceNotFound"

# virtio-scsi event numbers (virtio spec 5.6.6.3).
SCSI_T_TRANSPORT_RESET = 1
SCSI_EVT_RESET_RESCAN = 1
SCSI_EVT_RESET_REMOVED = 2


# --------------------------------------------------------------------------
# Fixtures and helpers

def blk_args(workdir, num_queues=2):
    """iot0; node d0 (a 64 MiB file, discard=unmap) exported as e0 in iot0."""
    image = make_image(workdir / "d0.img", IMAGE_SIZE)
    return ["--object", "iothread,id=iot0",
            "--blockdev", f"driver=file,node-name=d0,filename={image},"
                          "discard=unmap",
            "--export", f"type=vhost-user-blk,id=e0,node-name=d0,"
                        f"addr.type=unix,addr.path={workdir / 'e0.sock'},"
                        f"writable=on,num-queues={num_queues},iothread=iot0"]


@pytest.fixture
def daemon(spindle, workdir):
    d = SpindleQmp(spindle, workdir, blk_args(workdir)).start()
    yield d
    assert d.stop() == 0, d.stderr()


class ClientRun:
    """A finished spindle-vu-client --json run."""

    def __init__(self, returncode, stdout, stderr):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        try:
            self.doc = json.loads(stdout)
        except json.JSONDecodeError:
            self.doc = None

    @property
    def ok(self):
        return self.returncode == 0 and self.doc is not None and \
            self.doc["ok"]

    @property
    def results(self):
        return self.doc["results"] if self.doc else []

    def result(self, command, nth=0):
        return [r for r in self.results if r["command"] == command][nth]

    def describe(self):
        return (f"exit {self.returncode}\nstdout: {self.stdout[-3000:]}\n"
                f"stderr: {self.stderr[-3000:]}")


def client_argv(client, sock, args):
    return [str(client), "--socket", str(sock), "--json", "--timeout", "20",
            "--connect-timeout", "5", *map(str, args)]


def vu(client, sock, *args, check=True):
    """Run spindle-vu-client to completion."""
    proc = subprocess.run(client_argv(client, sock, args),
                          capture_output=True, text=True,
                          timeout=CLIENT_TIMEOUT_S)
    run = ClientRun(proc.returncode, proc.stdout, proc.stderr)
    if check:
        assert run.ok, run.describe()
    return run


@contextlib.contextmanager
def vu_running(client, sock, *args):
    """spindle-vu-client in the background while the body runs (yields its
    Popen; vu_wait() finishes it); killed if it still runs at the end."""
    proc = subprocess.Popen(client_argv(client, sock, args),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            vu_wait(proc)


def vu_wait(proc, timeout=CLIENT_TIMEOUT_S):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return ClientRun(proc.returncode, out, err)


def check_errors(q, command, cases):
    """For each (arguments, desc) in cases, command fails: GenericError,
    desc."""
    for args, desc in cases:
        assert q.error(command, args) == (GENERIC, desc), args


def iothreads(d):
    return {t["id"]: t for t in d.qmp.cmd("query-iothreads")}


def nodes(d):
    return {n["node-name"]: n for n in d.qmp.cmd("query-named-block-nodes")}


def exports(d):
    return {e["id"]: e for e in d.qmp.cmd("query-block-exports")}


def blockstats(d, export, lun=None):
    """The query-blockstats entry of export's node (LUN lun)."""
    found = [s for s in d.qmp.cmd("query-blockstats")
             if s["spindle-export"] == export and s.get("spindle-lun") == lun]
    assert len(found) == 1, found
    return found[0]


def client_connected(d, export):
    return exports(d)[export]["spindle-client-connected"]


# --------------------------------------------------------------------------
# IOThreads

def test_query_iothreads_reports_qemu_members_and_poll_stats(daemon):
    threads = daemon.qmp.cmd("query-iothreads")
    assert [t["id"] for t in threads] == ["iot0"]
    t = threads[0]
    assert (t["poll-max-ns"], t["poll-grow"], t["poll-shrink"],
            t["poll-weight"], t["aio-max-batch"]) == (32768, 0, 0, 0, 0)
    # thread-id is the kernel's id of the IOThread's thread.
    assert thread_comm(daemon.pid, t["thread-id"]) == "iot-iot0"
    assert set(t["spindle-poll"]) == POLL_STATS
    assert t["spindle-poll"]["policy"] == "predictive"
    assert t["spindle-poll"]["turns"] > 0
    # No front-end: no queue runs; the only pollable handler is the I/O
    # engine's completion ring (the node uses aio=io_uring).
    handlers = t["spindle-poll"]["handlers"]
    assert [h["name"] for h in handlers] == ["io_uring"]
    assert set(handlers[0]) == HANDLER_STATS
    assert handlers[0]["events"] == 0 and handlers[0]["pending"] is False
    assert daemon.qmp.error("query-iothreads", {"verbose": True}) == \
        (GENERIC, "Parameter 'verbose' is unexpected")


def test_query_iothreads_names_each_queue_and_its_window(daemon, client):
    """While a front-end runs I/O, every queue of the export is a handler
    named EXPORT/vqN, with its own window and counters."""
    with vu_running(client, daemon.workdir / "e0.sock", "verify-run",
                    "--size", "1M", "--count", 10000000, "--queues", 2,
                    "--iodepth", 1) as proc:
        def queues_busy():
            hs = {h["name"]: h for h in
                  _poll_stats(daemon)["handlers"]}
            return all(hs.get(f"e0/vq{i}", {}).get("events", 0) > 200
                       for i in range(2)) and hs
        hs = wait_for(queues_busy, what="both queues to see requests")
    assert set(hs) == {"e0/vq0", "e0/vq1", "io_uring"}
    for name in ("e0/vq0", "e0/vq1"):
        h = hs[name]
        assert set(h) == HANDLER_STATS
        assert h["active"] is True
        assert 0 <= h["poll-hits"] <= h["events"]
        assert 0 <= h["window-ns"] <= 32768
        assert h["last-change-event"] <= h["events"]
    # The ring had requests in flight and completions to report.
    assert hs["io_uring"]["events"] > 0
    st = _poll_stats(daemon)
    # Going to sleep was measured (the thread blocked at least once).
    assert st["block-cpu-ns"] > 0


def test_object_add_and_del_an_iothread(daemon):
    ret = daemon.qmp.cmd("object-add", {
        "qom-type": "iothread", "id": "iot1", "poll-max-ns": 1000,
        "poll-grow": 4, "poll-shrink": 2, "poll-weight": 5, "aio-max-batch": 8,
        "poll-policy": "qemu-weighted", "cpu-affinity": "0"})
    assert ret == {}
    threads = daemon.qmp.cmd("query-iothreads")
    assert [t["id"] for t in threads] == ["iot0", "iot1"]     # creation order
    t = threads[1]
    assert (t["poll-max-ns"], t["poll-grow"], t["poll-shrink"],
            t["poll-weight"], t["aio-max-batch"]) == (1000, 4, 2, 5, 8)
    assert t["spindle-poll"]["policy"] == "qemu-weighted"
    tid = t["thread-id"]
    assert thread_comm(daemon.pid, tid) == "iot-iot1"
    assert thread_cpus(daemon.pid, tid) == "0"
    assert daemon.qmp.cmd("qom-get", {"path": "/objects/iot1",
                                      "property": "cpu-affinity"}) == "0"

    assert daemon.qmp.cmd("object-del", {"id": "iot1"}) == {}
    assert list(iothreads(daemon)) == ["iot0"]
    wait_for(lambda: thread_comm(daemon.pid, tid) is None,
             what="the IOThread's thread to exit")
    # The id is free again.
    daemon.qmp.cmd("object-add", {"qom-type": "iothread", "id": "iot1"})
    assert iothreads(daemon)["iot1"]["poll-max-ns"] == 32768


@pytest.mark.parametrize("args,error", [
    ({"id": "x"}, "Parameter 'qom-type' is missing"),
    ({"qom-type": "memory-backend-memfd", "id": "x"},
     "Object type 'memory-backend-memfd' is not supported (Spindle has: "
     "iothread, throttle-group)"),
    ({"qom-type": "iothread"}, "Parameter 'id' is missing"),
    ({"qom-type": 7, "id": "x"},
     "Invalid parameter type for 'qom-type', expected: string"),
    ({"qom-type": "iothread", "id": "x", "poll-max-ns": "1000"},
     "Invalid parameter type for 'poll-max-ns', expected: integer"),
    ({"qom-type": "iothread", "id": "x", "poll-grow": -1},
     "Parameter 'poll-grow' expects a value between 0 and"),
    ({"qom-type": "iothread", "id": "x", "cpu-affinity": 3},
     "Invalid parameter type for 'cpu-affinity', expected: string"),
    ({"qom-type": "iothread", "id": "x", "cpu-affinity": "99999"},
     "cpu-affinity"),
    ({"qom-type": "iothread", "id": "x", "poll-policy": "psychic"},
     "unknown policy 'psychic'"),
    ({"qom-type": "iothread", "id": "x", "poll-weight": 64},
     "Parameter 'poll-weight' expects an integer from 0 to 63, got '64'"),
    ({"qom-type": "iothread", "id": "x", "poll-weight": "3"},
     "Invalid parameter type for 'poll-weight', expected: integer"),
    ({"qom-type": "iothread", "id": "x", "poll-hunger": 3},
     "Parameter 'poll-hunger' is unexpected"),
    ({"qom-type": "iothread", "id": "iot0"}, "'iot0' already exists"),
])
def test_object_add_errors(daemon, args, error):
    cls, desc = daemon.qmp.error("object-add", args)
    assert cls == GENERIC
    assert error in desc
    assert list(iothreads(daemon)) == ["iot0"]


def test_object_del_errors(daemon):
    check_errors(daemon.qmp, "object-del", [
        ({"id": "nope"}, "object 'nope' not found"),
        ({}, "Parameter 'id' is missing"),
        ({"id": "iot0", "force": True}, "Parameter 'force' is unexpected"),
        ({"id": 0}, "Invalid parameter type for 'id', expected: string"),
        # e0 runs in iot0.
        ({"id": "iot0"}, "IOThread 'iot0' is in use by export 'e0'"),
    ])
    assert list(iothreads(daemon)) == ["iot0"]


def _poll_stats(d, iot="iot0"):
    return iothreads(d)[iot]["spindle-poll"]


def test_qom_set_changes_a_running_iothread(daemon, client):
    q = daemon.qmp
    sock = daemon.workdir / "e0.sock"
    assert q.cmd("qom-get", {"path": "/objects/iot0",
                             "property": "poll-max-ns"}) == 32768
    # Integer properties, by full and by partial path.
    for prop, value in (("poll-max-ns", 1000), ("poll-grow", 4),
                        ("poll-shrink", 2), ("poll-weight", 63),
                        ("aio-max-batch", 16)):
        assert q.cmd("qom-set", {"path": "/objects/iot0", "property": prop,
                                 "value": value}) == {}
        assert q.cmd("qom-get", {"path": "iot0", "property": prop}) == value
        assert iothreads(daemon)["iot0"][prop] == value
    for policy in POLICIES:
        assert q.cmd("qom-set", {"path": "iot0", "property": "poll-policy",
                                 "value": policy}) == {}
        assert q.cmd("qom-get", {"path": "iot0",
                                 "property": "poll-policy"}) == policy
        assert _poll_stats(daemon)["policy"] == policy
    # qemu-classic's old name is accepted and reads back as the new one.
    assert q.cmd("qom-set", {"path": "iot0", "property": "poll-policy",
                             "value": "adaptive"}) == {}
    assert q.cmd("qom-get", {"path": "iot0",
                             "property": "poll-policy"}) == "qemu-classic"
    q.cmd("qom-set", {"path": "iot0", "property": "poll-policy",
                      "value": "predictive"})
    tid = q.cmd("qom-get", {"path": "iot0", "property": "thread-id"})
    assert tid == iothreads(daemon)["iot0"]["thread-id"]

    # The thread itself follows: with polling off, I/O is only ever seen
    # through wake-ups; turned back on, polling finds requests again.
    q.cmd("qom-set", {"path": "iot0", "property": "poll-max-ns", "value": 0})
    vu(client, sock, "write", 0, "4k")          # let one turn pass
    before = _poll_stats(daemon)
    vu(client, sock, "verify-run", "--size", "2M", "--count", 300,
       "--iodepth", 4)
    after = _poll_stats(daemon)
    assert after["poll-hits"] == before["poll-hits"]
    assert after["wakeups"] > before["wakeups"]

    q.cmd("qom-set", {"path": "iot0", "property": "poll-max-ns",
                      "value": 1000000})
    before = after
    vu(client, sock, "verify-run", "--size", "2M", "--count", 2000,
       "--iodepth", 4)
    after = _poll_stats(daemon)
    assert after["poll-hits"] > before["poll-hits"]
    assert after["window-ns"] <= 1000000

    # cpu-affinity moves the thread.
    q.cmd("qom-set", {"path": "iot0", "property": "cpu-affinity",
                      "value": "0"})
    assert thread_cpus(daemon.pid, tid) == "0"
    q.cmd("qom-set", {"path": "iot0", "property": "cpu-affinity",
                      "value": ""})                    # every CPU
    if os.cpu_count() > 1:
        assert thread_cpus(daemon.pid, tid) != "0"


@pytest.mark.parametrize("cmd,args,error", [
    ("qom-get", {"path": "/objects/nope", "property": "poll-max-ns"},
     (NOT_FOUND, "Device '/objects/nope' not found")),
    ("qom-get", {"path": "/machine/peripheral/x", "property": "poll-max-ns"},
     (NOT_FOUND, "Device '/machine/peripheral/x' not found")),
    ("qom-set", {"path": "nope", "property": "poll-max-ns", "value": 1},
     (NOT_FOUND, "Device 'nope' not found")),
    ("qom-get", {"path": "iot0", "property": "poll-hunger"},
     (GENERIC, "Property 'iothread.poll-hunger' not found")),
    ("qom-set", {"path": "iot0", "property": "poll-hunger", "value": 1},
     (GENERIC, "Property 'iothread.poll-hunger' not found")),
    ("qom-set", {"path": "iot0", "property": "poll-weight", "value": 64},
     (GENERIC, "Parameter 'poll-weight' expects an integer from 0 to 63")),
    ("qom-set", {"path": "iot0", "property": "poll-max-ns", "value": "1"},
     (GENERIC, "Invalid parameter type for 'value', expected: integer")),
    ("qom-set", {"path": "iot0", "property": "poll-policy", "value": 1},
     (GENERIC, "Invalid parameter type for 'value', expected: string")),
    ("qom-set", {"path": "iot0", "property": "poll-max-ns", "value": -5},
     (GENERIC, "Parameter 'value' expects a value between 0 and")),
    ("qom-set", {"path": "iot0", "property": "poll-policy",
                 "value": "psychic"},
     (GENERIC, "unknown policy 'psychic'")),
    ("qom-set", {"path": "iot0", "property": "cpu-affinity",
                 "value": "1-0"},
     (GENERIC, "ends before it starts")),
    ("qom-set", {"path": "iot0", "property": "thread-id", "value": 1},
     (GENERIC, "Property 'iothread.thread-id' is read-only")),
    ("qom-set", {"path": "iot0", "property": "poll-max-ns"},
     (GENERIC, "Parameter 'value' is missing")),
    ("qom-get", {"property": "poll-max-ns"},
     (GENERIC, "Parameter 'path' is missing")),
    ("qom-get", {"path": "iot0"},
     (GENERIC, "Parameter 'property' is missing")),
    ("qom-get", {"path": "iot0", "property": "poll-max-ns", "value": 1},
     (GENERIC, "Parameter 'value' is unexpected")),
])
def test_qom_errors(daemon, cmd, args, error):
    cls, desc = daemon.qmp.error(cmd, args)
    assert cls == error[0]
    assert error[1] in desc, desc
    # Nothing changed.
    t = iothreads(daemon)["iot0"]
    assert (t["poll-max-ns"], t["poll-weight"], t["spindle-poll"]["policy"]) \
        == (32768, 0, "predictive")
    assert daemon.qmp.cmd("qom-get", {"path": "iot0",
                                      "property": "cpu-affinity"}) == ""


def test_iothread_and_queue_stats_grow_with_io(daemon, client):
    sock = daemon.workdir / "e0.sock"
    before = iothreads(daemon)["iot0"]["spindle-poll"]
    q_before = exports(daemon)["e0"]["spindle-queues"]
    assert [q["requests"] for q in q_before] == [0, 0]
    run = vu(client, sock, "verify-run", "--size", "4M", "--count", 500,
             "--queues", 2, "--iodepth", 8).result("verify-run")
    after = iothreads(daemon)["iot0"]["spindle-poll"]
    for key in ("turns", "cpu-ns"):
        assert after[key] > before[key], key
    # Requests were seen by polling or by a wake-up, and dispatched.
    assert after["poll-hits"] + after["wakeups"] > \
        before["poll-hits"] + before["wakeups"]
    assert after["dispatches"] > before["dispatches"]
    queues = exports(daemon)["e0"]["spindle-queues"]
    assert [q["iothread"] for q in queues] == ["iot0", "iot0"]
    assert sum(q["requests"] for q in queues) == run["writes"] + run["reads"]
    assert all(q["requests"] > 0 for q in queues)


# --------------------------------------------------------------------------
# Block nodes

def test_query_named_block_nodes(daemon):
    n = nodes(daemon)["d0"]
    image = str(daemon.workdir / "d0.img")
    assert n["drv"] == "file" and n["ro"] is False
    assert n["file"] == image
    assert n["image"] == {"filename": image, "format": "file",
                          "virtual-size": IMAGE_SIZE}
    assert n["cache"] == {"writeback": True, "direct": False,
                          "no-flush": False}
    assert (n["encrypted"], n["detect_zeroes"], n["backing_file_depth"],
            n["write_threshold"]) == (False, "off", 0, 0)
    assert n["spindle-iothread"] == "iot0"      # exported from iot0
    assert n["spindle-user-node"] is True
    flat = daemon.qmp.cmd("query-named-block-nodes", {"flat": True})
    assert {x["node-name"]: x for x in flat}["d0"] == n
    assert daemon.qmp.error("query-named-block-nodes", {"flat": "yes"}) == \
        (GENERIC, "Invalid parameter type for 'flat', expected: boolean")
    assert daemon.qmp.error("query-named-block-nodes", {"depth": 1}) == \
        (GENERIC, "Parameter 'depth' is unexpected")


def test_blockdev_add_inline_child_and_del(daemon):
    q = daemon.qmp
    assert q.cmd("blockdev-add", {
        "driver": "raw", "node-name": "r1", "read-only": True,
        "file": {"driver": "null-co", "size": 32 * MiB}}) == {}
    all_nodes = nodes(daemon)
    r1 = all_nodes["r1"]
    assert (r1["drv"], r1["ro"], r1["file"]) == ("raw", True, "null-co://")
    assert r1["image"]["virtual-size"] == 32 * MiB
    assert r1["spindle-iothread"] is None           # the main loop
    assert r1["spindle-user-node"] is True
    child, = [n for n in all_nodes.values() if n["drv"] == "null-co"]
    assert child["node-name"].startswith("#block")
    assert child["spindle-user-node"] is False
    cls, desc = q.error("blockdev-del", {"node-name": child["node-name"]})
    assert "is not a top-level node" in desc

    # A child by name: it cannot go while its parent uses it.
    q.cmd("blockdev-add", {"driver": "null-co", "node-name": "n0",
                           "size": MiB})
    q.cmd("blockdev-add", {"driver": "raw", "node-name": "r2", "file": "n0"})
    assert q.error("blockdev-del", {"node-name": "n0"}) == \
        (GENERIC, "Node 'n0' is busy: node 'r2' uses it as its child")
    q.cmd("blockdev-del", {"node-name": "r2"})
    q.cmd("blockdev-del", {"node-name": "n0"})
    q.cmd("blockdev-del", {"node-name": "r1"})
    # The inline child went with its parent.
    assert list(nodes(daemon)) == ["d0"]


@pytest.mark.parametrize("args,error", [
    ({"node-name": "x"}, "Parameter 'driver' is missing"),
    ({"driver": "null-co"}, "Parameter 'node-name' is missing"),
    ({"driver": 5, "node-name": "x"},
     "Invalid parameter type for 'driver', expected: string"),
    ({"driver": "null-co", "node-name": ["x"]},
     "Invalid parameter type for 'node-name', expected: string"),
    ({"driver": "qcow9", "node-name": "x"}, "qcow9"),
    ({"driver": "null-co", "node-name": "d0"}, "Duplicate node name 'd0'"),
    ({"driver": "null-co", "node-name": "x", "bogus": 1},
     "Invalid parameter 'bogus'"),
    ({"driver": "null-co", "node-name": "x", "size": "lots"}, "size"),
    ({"driver": "file", "node-name": "x", "filename": "/nonexistent/x.img"},
     "/nonexistent/x.img"),
    ({"driver": "raw", "node-name": "x", "file": "nope"}, "nope"),
    ({"driver": "null-co", "node-name": "1st"}, "Invalid node-name '1st'"),
])
def test_blockdev_add_errors(daemon, args, error):
    cls, desc = daemon.qmp.error("blockdev-add", args)
    assert cls == GENERIC
    assert error in desc, desc
    assert list(nodes(daemon)) == ["d0"]


def test_blockdev_del_errors(daemon):
    check_errors(daemon.qmp, "blockdev-del", [
        ({"node-name": "nope"}, "Failed to find node with node-name='nope'"),
        ({"node-name": "d0"}, "Node 'd0' is busy: export 'e0' uses it"),
        ({}, "Parameter 'node-name' is missing"),
        ({"node-name": "d0", "force": True},
         "Parameter 'force' is unexpected"),
    ])
    assert list(nodes(daemon)) == ["d0"]


# --------------------------------------------------------------------------
# Exports

def test_query_block_exports(daemon, client):
    e = exports(daemon)["e0"]
    assert (e["type"], e["node-name"], e["shutting-down"]) == \
        ("vhost-user-blk", "d0", False)
    assert e["spindle-nodes"] == ["d0"]
    assert "spindle-luns" not in e
    assert e["spindle-client-connected"] is False
    assert len(e["spindle-queues"]) == 2
    for queue in e["spindle-queues"]:
        assert set(queue) == {"iothread", "requests", "kicks", "polled",
                              "interrupts", "interrupts-suppressed"}
    # A front-end that stays connected (a long run) shows as connected.
    with vu_running(client, daemon.workdir / "e0.sock", "verify-run",
                    "--size", "1M", "--count", 10000000) as proc:
        wait_for(lambda: client_connected(daemon, "e0"),
                 what="the client to connect")
    wait_for(lambda: not client_connected(daemon, "e0"),
             what="the client to be gone")
    assert daemon.qmp.error("query-block-exports", {"id": "e0"}) == \
        (GENERIC, "Parameter 'id' is unexpected")


def test_runtime_node_and_export_lifecycle(daemon, client):
    q = daemon.qmp
    work = daemon.workdir
    image = make_image(work / "n1.img", 16 * MiB)
    sock = work / "e1.sock"
    assert q.cmd("blockdev-add", {"driver": "file", "node-name": "n1",
                                  "filename": str(image),
                                  "cache": {"direct": False}}) == {}
    assert q.cmd("object-add", {"qom-type": "iothread", "id": "iot1"}) == {}
    assert q.cmd("block-export-add", {
        "type": "vhost-user-blk", "id": "e1", "node-name": "n1",
        "addr": {"type": "unix", "path": str(sock)}, "writable": True,
        "iothread": "iot1", "num-queues": 2, "serial": "qmp-disk-1"}) == {}
    assert is_listening(sock)
    e1 = exports(daemon)["e1"]
    assert (e1["type"], e1["node-name"], e1["spindle-nodes"]) == \
        ("vhost-user-blk", "n1", ["n1"])
    assert [x["iothread"] for x in e1["spindle-queues"]] == ["iot1", "iot1"]
    assert list(exports(daemon)) == ["e0", "e1"]
    assert nodes(daemon)["n1"]["spindle-iothread"] == "iot1"

    # The front-end uses it.
    run = vu(client, sock, "info", "get-id",
             "write", 0, "64k", "--pattern", 7,
             "write", "8M", "128k", "--pattern", 8, "--queue", 1,
             "read", 0, "64k", "--verify", 7,
             "read", "8M", "128k", "--verify", 8)
    assert run.result("info")["capacity_bytes"] == 16 * MiB
    assert run.result("get-id")["serial"] == "qmp-disk-1"

    # In use: the node and the IOThread stay.
    assert q.error("blockdev-del", {"node-name": "n1"}) == \
        (GENERIC, "Node 'n1' is busy: export 'e1' uses it")
    assert q.error("object-del", {"id": "iot1"}) == \
        (GENERIC, "IOThread 'iot1' is in use by export 'e1'")

    q.drain_events()
    assert q.cmd("block-export-del", {"id": "e1"}) == {}
    ev = q.event("BLOCK_EXPORT_DELETED")
    assert ev["data"] == {"id": "e1"}
    assert not sock.exists() and not is_listening(sock)
    assert list(exports(daemon)) == ["e0"]
    assert nodes(daemon)["n1"]["spindle-iothread"] is None   # moved back

    assert q.cmd("blockdev-del", {"node-name": "n1"}) == {}
    assert "n1" not in nodes(daemon)
    assert q.cmd("object-del", {"id": "iot1"}) == {}
    data = image.read_bytes()
    assert data[:64 * KiB] == pattern(7, 0, 64 * KiB)
    assert data[8 * MiB:8 * MiB + 128 * KiB] == pattern(8, 8 * MiB, 128 * KiB)


def test_block_export_add_over_an_inherited_fd_form_is_checked(daemon):
    # addr.type=fd must name an open listening socket: fd 999 is not open.
    daemon.qmp.cmd("blockdev-add", {"driver": "null-co", "node-name": "n"})
    cls, desc = daemon.qmp.error("block-export-add", {
        "type": "vhost-user-blk", "id": "e9", "node-name": "n",
        "addr": {"type": "fd", "str": "999"}})
    assert "fd 999 is not open" in desc
    assert list(exports(daemon)) == ["e0"]
    daemon.qmp.cmd("blockdev-del", {"node-name": "n"})


@pytest.mark.parametrize("args,error", [
    ({"id": "x"}, "Parameter 'type' is missing"),
    ({"type": "vhost-user-blk"}, "Parameter 'id' is missing"),
    ({"type": ["vhost-user-blk"], "id": "x"},
     "Invalid parameter type for 'type', expected: string"),
    ({"type": "nbd", "id": "x", "node-name": "n"},
     "unknown export type 'nbd'"),
    ({"type": "vhost-user-blk", "id": "e0", "node-name": "n"},
     "an export with id 'e0' already exists"),
    ({"type": "vhost-user-blk", "id": "x", "node-name": "nope"},
     "there is no node 'nope'"),
    ({"type": "vhost-user-blk", "id": "x", "node-name": "n",
      "iothread": "nope"}, "there is no IOThread 'nope'"),
    ({"type": "vhost-user-blk", "id": "x", "node-name": "n"},
     "Parameter 'addr' is missing"),
    ({"type": "vhost-user-blk", "id": "x", "node-name": "n",
      "addr": {"type": "inet", "host": "::", "port": "1"}},
     "needs a UNIX domain socket"),
    ({"type": "vhost-user-blk", "id": "x", "node-name": "n", "bogus": 1,
      "addr": {"type": "unix", "path": "SOCK"}}, "Invalid parameter 'bogus'"),
    ({"type": "vhost-user-blk", "id": "x", "node-name": "n",
      "logical-block-size": 1000, "addr": {"type": "unix", "path": "SOCK"}},
     "logical-block-size"),
    ({"type": "vhost-user-blk", "id": "x", "node-name": "d0",
      "addr": {"type": "unix", "path": "SOCK"}, "writable": True},
     "node 'd0' is already exported by 'e0'"),
])
def test_block_export_add_errors(daemon, args, error):
    q = daemon.qmp
    sock = daemon.workdir / "x.sock"
    q.cmd("blockdev-add", {"driver": "null-co", "node-name": "n"})
    args = json.loads(json.dumps(args).replace("SOCK", str(sock)))
    cls, desc = q.error("block-export-add", args)
    assert cls == GENERIC
    assert error in desc, desc
    assert list(exports(daemon)) == ["e0"]
    assert not sock.exists()
    # The node was not kept by a half-made export.
    q.cmd("blockdev-del", {"node-name": "n"})


def test_block_export_del_refuses_while_connected_then_hard(daemon, client):
    q = daemon.qmp
    sock = daemon.workdir / "e0.sock"
    check_errors(q, "block-export-del", [
        ({"id": "nope"}, "Export 'nope' is not found"),
        ({}, "Parameter 'id' is missing"),
        ({"id": "e0", "mode": "gentle"},
         "Parameter 'mode' does not accept value 'gentle' "
         "(expected: safe, hard)"),
        ({"id": "e0", "now": True}, "Parameter 'now' is unexpected"),
    ])

    # A front-end doing I/O that would go on for minutes.
    with vu_running(client, sock, "verify-run", "--size", "4M", "--count",
                    10000000, "--iodepth", 4) as proc:
        wait_for(lambda: client_connected(daemon, "e0"),
                 what="the client to connect")
        for args in ({"id": "e0"}, {"id": "e0", "mode": "safe"}):
            assert q.error("block-export-del", args) == \
                (GENERIC, "export 'e0' still in use (use mode=hard to "
                          "disconnect the front-end)")
        assert list(exports(daemon)) == ["e0"]
        q.drain_events()
        start = time.monotonic()
        assert q.cmd("block-export-del", {"id": "e0", "mode": "hard"}) == {}
        assert q.event("BLOCK_EXPORT_DELETED")["data"] == {"id": "e0"}
        run = vu_wait(proc, timeout=10)
    # The front-end was disconnected: its run failed, promptly.
    assert run.returncode == 1, run.describe()
    assert time.monotonic() - start < 10
    assert exports(daemon) == {}
    assert not sock.exists()
    # Nothing serves d0 any more: it can go, and iot0 with it.
    assert nodes(daemon)["d0"]["spindle-iothread"] is None
    q.cmd("blockdev-del", {"node-name": "d0"})
    q.cmd("object-del", {"id": "iot0"})
    assert iothreads(daemon) == {} and nodes(daemon) == {}


# --------------------------------------------------------------------------
# query-blockstats

def test_query_blockstats_counts_the_clients_requests(daemon, client):
    q = daemon.qmp
    s = blockstats(daemon, "e0")
    assert (s["device"], s["node-name"], s["qdev"]) == ("", "d0", "e0")
    assert "spindle-lun" not in s
    assert set(s["stats"]) == BLOCK_STATS
    assert all(s["stats"][k] == 0 for k in BLOCK_STATS
               if k.endswith(("_bytes", "_operations")))

    vu(client, daemon.workdir / "e0.sock",
       "write", 0, "64k", "--pattern", 1,
       "write", "1M", "4k", "--pattern", 2, "--queue", 1,
       "write-zeroes", "2M", "128k",
       "read", 0, "64k", "--verify", 1,
       "read", "1M", "4k", "--verify", 2,
       "read", "2M", "128k", "--expect-zeroes",
       "read", "3M", "8k",
       "flush",
       "discard", "4M", "64k")
    # A read past the end: the device refuses it before the node sees it.
    bad = vu(client, daemon.workdir / "e0.sock", "read", "64M", "4k",
             check=False)
    assert bad.result("read")["status"] == "IOERR"

    st = blockstats(daemon, "e0")["stats"]
    assert (st["rd_operations"], st["rd_bytes"]) == \
        (4, 64 * KiB + 4 * KiB + 128 * KiB + 8 * KiB)
    # WRITE ZEROES counts as a write, as QEMU's virtio-blk counts it ...
    assert (st["wr_operations"], st["wr_bytes"]) == \
        (3, 64 * KiB + 4 * KiB + 128 * KiB)
    # ... and on its own.
    wz = st["spindle-write-zeroes"]
    assert (wz["operations"], wz["bytes"], wz["failed-operations"]) == \
        (1, 128 * KiB, 0)
    assert wz["total-time-ns"] > 0
    assert st["flush_operations"] == 1
    assert (st["unmap_operations"], st["unmap_bytes"]) == (1, 64 * KiB)
    for k in ("rd_total_time_ns", "wr_total_time_ns", "flush_total_time_ns",
              "unmap_total_time_ns"):
        assert st[k] > 0, k
    for k in ("failed_rd_operations", "failed_wr_operations",
              "failed_flush_operations", "failed_unmap_operations",
              "invalid_rd_operations", "invalid_wr_operations",
              "rd_merged", "wr_merged", "unmap_merged"):
        assert st[k] == 0, k
    assert (st["account_failed"], st["account_invalid"],
            st["timed_stats"]) == (True, False, [])
    assert st["wr_total_time_ns"] >= wz["total-time-ns"]

    # Per node: the same numbers, and which exports they come from.
    per_node = {n["node-name"]: n for n in
                q.cmd("query-blockstats", {"query-nodes": True})}
    assert per_node["d0"]["stats"] == st
    assert per_node["d0"]["spindle-exports"] == ["e0"]

    # Counts survive a reconnect and keep adding up.
    vu(client, daemon.workdir / "e0.sock", "read", 0, "4k")
    st2 = blockstats(daemon, "e0")["stats"]
    assert (st2["rd_operations"], st2["rd_bytes"]) == \
        (5, st["rd_bytes"] + 4 * KiB)

    assert q.error("query-blockstats", {"query-nodes": 1}) == \
        (GENERIC, "Invalid parameter type for 'query-nodes', expected: "
                  "boolean")
    assert q.error("query-blockstats", {"device": "e0"}) == \
        (GENERIC, "Parameter 'device' is unexpected")


def test_query_blockstats_per_node_without_exports(daemon):
    q = daemon.qmp
    q.cmd("blockdev-add", {"driver": "null-co", "node-name": "idle"})
    per_node = {n["node-name"]: n for n in
                q.cmd("query-blockstats", {"query-nodes": True})}
    assert set(per_node) == {"d0", "idle"}
    assert per_node["idle"]["spindle-exports"] == []
    assert per_node["idle"]["stats"]["rd_operations"] == 0
    # Without query-nodes, only exported nodes.
    assert [s["node-name"] for s in q.cmd("query-blockstats")] == ["d0"]


# --------------------------------------------------------------------------
# block_resize

def test_block_resize_grows_what_the_front_end_sees(daemon, client):
    q = daemon.qmp
    sock = daemon.workdir / "e0.sock"
    image = daemon.workdir / "d0.img"
    new_size = 96 * MiB
    # A front-end connected during the resize is told: a config-change
    # message on the back-end channel, and the new capacity in the config.
    with vu_running(client, sock, "info", "write", 0, "4k",
                    "wait-config-change", "--timeout", 15, "get-config",
                    "write", "90M", "64k", "--pattern", 5,
                    "read", "90M", "64k", "--verify", 5) as proc:
        # Past "info" and the write: the session is set up.
        wait_for(lambda: sum(x["requests"] for x in
                             exports(daemon)["e0"]["spindle-queues"]) >= 1,
                 what="the client's first write")
        assert q.cmd("block_resize", {"node-name": "d0",
                                      "size": new_size}) == {}
        run = vu_wait(proc, timeout=20)
    assert run.ok, run.describe()
    assert run.result("info")["capacity_bytes"] == IMAGE_SIZE
    change = run.result("wait-config-change")
    assert (change["capacity_bytes"], change["config_changes"]) == \
        (new_size, 1)
    assert run.result("get-config")["capacity_bytes"] == new_size

    assert os.path.getsize(image) == new_size
    assert nodes(daemon)["d0"]["image"]["virtual-size"] == new_size
    # A new session reads the new size.
    assert vu(client, sock, "info").result("info")["capacity_bytes"] == \
        new_size
    data = image.read_bytes()
    assert data[90 * MiB:90 * MiB + 64 * KiB] == \
        pattern(5, 90 * MiB, 64 * KiB)


@pytest.mark.parametrize("args,error", [
    ({"node-name": "d0", "size": 64 * MiB + 100}, (GENERIC, "512")),
    ({"node-name": "d0", "size": -512},
     (GENERIC, "Parameter 'size' expects a value between 0 and")),
    ({"node-name": "d0", "size": "96M"},
     (GENERIC, "Invalid parameter type for 'size', expected: integer")),
    ({"node-name": "d0"}, (GENERIC, "Parameter 'size' is missing")),
    ({"size": 96 * MiB}, (GENERIC, "Parameter 'node-name' is missing")),
    ({"device": "e0", "size": 96 * MiB},
     (GENERIC, "Parameter 'device' is not supported: Spindle has no block "
               "devices; use 'node-name'")),
    ({"node-name": "nope", "size": 96 * MiB},
     (NOT_FOUND, "Cannot find node-name='nope'")),
    ({"node-name": "d0", "size": 96 * MiB, "force": True},
     (GENERIC, "Parameter 'force' is unexpected")),
])
def test_block_resize_errors(daemon, args, error):
    cls, desc = daemon.qmp.error("block_resize", args)
    assert cls == error[0]
    assert error[1] in desc, desc
    assert os.path.getsize(daemon.workdir / "d0.img") == IMAGE_SIZE
    assert nodes(daemon)["d0"]["image"]["virtual-size"] == IMAGE_SIZE


def test_block_resize_refuses_to_shrink(daemon):
    cls, desc = daemon.qmp.error("block_resize", {"node-name": "d0",
                                                  "size": 32 * MiB})
    assert cls == GENERIC
    assert "shrink" in desc.lower() or "smaller" in desc.lower(), desc
    assert os.path.getsize(daemon.workdir / "d0.img") == IMAGE_SIZE


# --------------------------------------------------------------------------
# LUN hot-plug on a vhost-user-scsi export

@pytest.fixture
def scsi_daemon(spindle, workdir):
    image = make_image(workdir / "l0.img", 16 * MiB)
    sock = workdir / "s0.sock"
    d = SpindleQmp(spindle, workdir, [
        "--object", "iothread,id=iot0",
        "--blockdev", f"driver=file,node-name=l0,filename={image}",
        "--export", f"type=vhost-user-scsi,id=s0,addr.type=unix,"
                    f"addr.path={sock},num-queues=1,iothread=iot0,"
                    "lun.0.node-name=l0,lun.0.writable=on"]).start()
    yield d
    assert d.stop() == 0, d.stderr()


def _scsi_request_count(d):
    # Virtqueues 0 and 1 are the control and event queues.
    return sum(q["requests"] for q in exports(d)["s0"]["spindle-queues"][2:])


def test_lun_hot_add_and_remove(scsi_daemon, client):
    d = scsi_daemon
    q = d.qmp
    hot = make_image(d.workdir / "hot.img", 8 * MiB)
    q.cmd("blockdev-add", {"driver": "file", "node-name": "hot",
                           "filename": str(hot)})
    e = exports(d)["s0"]
    assert (e["type"], e["spindle-nodes"], e["spindle-luns"]) == \
        ("vhost-user-scsi", ["l0"], [0])

    # The guest: list the LUNs, wait for an event, use the new LUN, wait
    # for the next event, list again.
    with vu_running(client, d.workdir / "s0.sock", "--device", "scsi",
                    "scsi-report-luns",
                    "scsi-events", "--wait", 15,
                    "scsi-report-luns",
                    "scsi-inquiry", "--lun", 5, "--evpd", 0x80,
                    "scsi-write", 0, "64k", "--lun", 5, "--pattern", 3,
                    "scsi-read", 0, "64k", "--lun", 5, "--verify", 3,
                    "scsi-events", "--wait", 15,
                    "scsi-report-luns",
                    "scsi-tur", "--lun", 5, "--expect-sense",
                    "ILLEGAL_REQUEST") as proc:
        # Past the first REPORT LUNS: now waiting for an event.
        wait_for(lambda: _scsi_request_count(d) >= 1,
                 what="the first REPORT LUNS")
        assert q.cmd("block-export-lun-add", {
            "id": "s0", "lun": 5, "node-name": "hot", "writable": True,
            "serial": "HOT-5"}) == {}
        e = exports(d)["s0"]
        assert (e["spindle-nodes"], e["spindle-luns"]) == \
            (["l0", "hot"], [0, 5])
        assert nodes(d)["hot"]["spindle-iothread"] == "iot0"
        assert q.error("blockdev-del", {"node-name": "hot"}) == \
            (GENERIC, "Node 'hot' is busy: export 's0' uses it")

        # The guest's write and read reach LUN 5, and are counted there.
        def lun5_read():
            s = blockstats(d, "s0", lun=5)["stats"]
            return s if s["rd_operations"] >= 1 else None
        st = wait_for(lun5_read, what="the read on LUN 5")
        assert (st["wr_operations"], st["wr_bytes"]) == (1, 64 * KiB)
        assert (st["rd_operations"], st["rd_bytes"]) == (1, 64 * KiB)
        assert blockstats(d, "s0", lun=0)["stats"]["wr_operations"] == 0
        assert blockstats(d, "s0", lun=5)["node-name"] == "hot"

        assert q.cmd("block-export-lun-del", {"id": "s0", "lun": 5}) == {}
        run = vu_wait(proc, timeout=20)
    assert run.ok, run.describe()
    first, second = run.result("scsi-report-luns", 0), \
        run.result("scsi-report-luns", 1)
    third = run.result("scsi-report-luns", 2)
    assert first["luns"] == [0]
    assert second["luns"] == [0, 5]
    assert third["luns"] == [0]
    assert run.result("scsi-inquiry")["serial"] == "HOT-5"
    added, = run.result("scsi-events", 0)["events"]
    removed, = run.result("scsi-events", 1)["events"]
    assert (added["event"], added["lun"], added["reason"]) == \
        (SCSI_T_TRANSPORT_RESET, 5, SCSI_EVT_RESET_RESCAN)
    assert (removed["event"], removed["lun"], removed["reason"]) == \
        (SCSI_T_TRANSPORT_RESET, 5, SCSI_EVT_RESET_REMOVED)

    e = exports(d)["s0"]
    assert (e["spindle-nodes"], e["spindle-luns"]) == (["l0"], [0])
    assert [s.get("spindle-lun") for s in q.cmd("query-blockstats")] == [0]
    # Released: back in the main loop, and it can go.
    assert nodes(d)["hot"]["spindle-iothread"] is None
    q.cmd("blockdev-del", {"node-name": "hot"})
    assert hot.read_bytes()[:64 * KiB] == pattern(3, 0, 64 * KiB)


def test_lun_add_del_errors(scsi_daemon):
    d = scsi_daemon
    q = d.qmp
    q.cmd("blockdev-add", {"driver": "null-co", "node-name": "n"})
    q.cmd("blockdev-add", {"driver": "null-co", "node-name": "b"})
    q.cmd("block-export-add", {
        "type": "vhost-user-blk", "id": "blk", "node-name": "b",
        "addr": {"type": "unix", "path": str(d.workdir / "blk.sock")}})

    def err(cmd, args):
        cls, desc = q.error(cmd, args)
        assert cls == GENERIC
        return desc

    add = "block-export-lun-add"
    assert err(add, {"id": "nope", "lun": 1, "node-name": "n"}) == \
        "Export 'nope' is not found"
    assert "vhost-user-scsi" in err(add, {"id": "blk", "lun": 1,
                                          "node-name": "n"})
    assert "0" in err(add, {"id": "s0", "lun": 0, "node-name": "n"})
    assert "nope" in err(add, {"id": "s0", "lun": 1, "node-name": "nope"})
    assert "'l0'" in err(add, {"id": "s0", "lun": 1, "node-name": "l0"})
    assert err(add, {"id": "s0", "node-name": "n"}) == \
        "Parameter 'lun' is missing"
    assert err(add, {"id": "s0", "lun": 1}) == \
        "Parameter 'node-name' is missing"
    assert err(add, {"id": "s0", "lun": -1, "node-name": "n"}).startswith(
        "Parameter 'lun' expects a value between 0 and")
    assert err(add, {"id": "s0", "lun": 1, "node-name": "n",
                     "color": "red"}) == "Parameter 'color' is unexpected"
    assert "vendor" in err(add, {"id": "s0", "lun": 1, "node-name": "n",
                                 "vendor": "MUCH TOO LONG A VENDOR"})
    assert "logical-block-size" in err(add, {
        "id": "s0", "lun": 1, "node-name": "n", "logical-block-size": 1000})

    dele = "block-export-lun-del"
    assert err(dele, {"id": "nope", "lun": 0}) == \
        "Export 'nope' is not found"
    assert "7" in err(dele, {"id": "s0", "lun": 7})
    assert "vhost-user-scsi" in err(dele, {"id": "blk", "lun": 0})
    assert err(dele, {"id": "s0"}) == "Parameter 'lun' is missing"
    assert err(dele, {"id": "s0", "lun": "0"}) == \
        "Invalid parameter type for 'lun', expected: integer"
    assert err(dele, {"id": "s0", "lun": 0, "x": 1}) == \
        "Parameter 'x' is unexpected"

    # Nothing changed; n is free.
    e = exports(d)["s0"]
    assert (e["spindle-nodes"], e["spindle-luns"]) == (["l0"], [0])
    assert nodes(d)["n"]["spindle-iothread"] is None
    q.cmd("blockdev-del", {"node-name": "n"})

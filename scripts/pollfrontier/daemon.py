"""The one spindle daemon of a poll-frontier run, its QMP monitor, and the
idle front-ends of the idle63 cell.

The daemon has one IOThread per service time, `iot-<service>` (iot-0,
iot-10us, ...), each with its own null-co node (latency-ns = the service
time, 1 GiB, read-zeroes=off) and one vhost-user-blk export with one
queue; with the idle63 cell also `iot-idle` with 64 null-co exports of
service 0.  It is started by benchcompare.backends.Backend: under
`taskset -c CPU`, every thread's affinity checked once it is ready,
PR_SET_PDEATHSIG so it never outlives poll-frontier.

    --object iothread,id=iot-0
    --blockdev driver=null-co,node-name=n0,size=1073741824,read-zeroes=off,latency-ns=0
    --export type=vhost-user-blk,id=e0,node-name=n0,addr.type=unix,addr.path=DIR/e0.sock,
             writable=on,num-queues=1,iothread=iot-0
    ...
    --object iothread,id=iot-idle
    --blockdev driver=null-co,node-name=ni0,...   --export ...,id=idle0,...  (x 64)
    --chardev socket,id=mon0,path=DIR/qmp.sock,server=on,wait=off --monitor chardev=mon0

A vhost-user queue's handler shows in query-iothreads as EXPORT/vq0
("e0/vq0", "idle5/vq0").
"""

import signal
import subprocess
import time
from pathlib import Path

from benchcompare.backends import Backend, die_with_parent

from .cells import FileMedium, iothread_id
from .qmp import Qmp

DISK_BYTES = 1 << 30
IDLE_IOTHREAD = "iot-idle"
IDLE_EXPORTS = 64
QMP_SOCKET = "qmp.sock"


class DaemonDied(RuntimeError):
    """The daemon exited during the run; the message says how."""


def export_id(index):
    return f"e{index}"


def idle_export_id(k):
    return f"idle{k}"


def handler_name(export):
    return f"{export}/vq0"


class Layout:
    """Names and sockets of everything the daemon serves."""

    def __init__(self, sock_dir, services, idle63, images=None):
        self.sock_dir = Path(sock_dir)
        self.services = list(services)
        self.idle63 = idle63
        # FileMedium services: engine -> its own raw image (two nodes of one
        # daemon cannot both hold a file's write lock).
        self.images = images or {}
        self.qmp_socket = self.sock_dir / QMP_SOCKET

    def export(self, service_ns):
        return export_id(self.services.index(service_ns))

    def socket(self, service_ns):
        return self.sock_dir / f"{self.export(service_ns)}.sock"

    def idle_socket(self, k):
        return self.sock_dir / f"{idle_export_id(k)}.sock"

    def all_sockets(self):
        socks = [self.socket(s) for s in self.services]
        if self.idle63:
            socks += [self.idle_socket(k) for k in range(IDLE_EXPORTS)]
        return socks + [self.qmp_socket]

    def iothreads(self):
        ids = [iothread_id(s) for s in self.services]
        return ids + ([IDLE_IOTHREAD] if self.idle63 else [])

    def args(self):
        """The daemon's arguments after the program name."""
        args = []
        for i, s in enumerate(self.services):
            node = (_file_node(f"n{i}", self.images[s.engine], s.engine)
                    if isinstance(s, FileMedium) else _null_node(f"n{i}", s))
            args += ["--object", f"iothread,id={iothread_id(s)}",
                     "--blockdev", node,
                     "--export", _export(export_id(i), f"n{i}", self.socket(s),
                                         iothread_id(s))]
        if self.idle63:
            args += ["--object", f"iothread,id={IDLE_IOTHREAD}"]
            for k in range(IDLE_EXPORTS):
                args += ["--blockdev", _null_node(f"ni{k}", 0),
                         "--export", _export(idle_export_id(k), f"ni{k}",
                                             self.idle_socket(k), IDLE_IOTHREAD)]
        args += ["--chardev", f"socket,id=mon0,path={self.qmp_socket},server=on,wait=off",
                 "--monitor", "chardev=mon0"]
        return args


def _null_node(name, service_ns):
    return (f"driver=null-co,node-name={name},size={DISK_BYTES},read-zeroes=off,"
            f"latency-ns={service_ns}")


def _file_node(name, image, engine):
    return (f"driver=file,node-name={name},filename={image},aio={engine},"
            "cache.direct=on")


def _export(eid, node, socket, iothread):
    return (f"type=vhost-user-blk,id={eid},node-name={node},addr.type=unix,"
            f"addr.path={socket},writable=on,num-queues=1,iothread={iothread}")


def make_backend(program, layout, cpu, log_path):
    socks = layout.all_sockets()
    return Backend("spindle", program, socks[0], None, None, cpu, DISK_BYTES,
                   log_path, args=layout.args(), more_sockets=socks[1:])


# ---------------------------------------------------------------------------
# QMP helpers

def apply_config(qmp, iothread, config):
    """qom-set poll-policy, then poll-max-ns, on /objects/IOTHREAD."""
    path = f"/objects/{iothread}"
    qmp.cmd("qom-set", {"path": path, "property": "poll-policy", "value": config.policy})
    qmp.cmd("qom-set", {"path": path, "property": "poll-max-ns", "value": config.max_ns})


def iothreads(qmp):
    """{id: query-iothreads entry}."""
    return {t["id"]: t for t in qmp.cmd("query-iothreads")}


def snapshot(qmp, iothread):
    """The IOThread's entry of query-iothreads plus the monotonic time."""
    t = time.monotonic_ns()
    entry = iothreads(qmp).get(iothread)
    if entry is None:
        raise KeyError(f"query-iothreads has no IOThread '{iothread}'")
    entry = dict(entry)
    entry["sampled_ns"] = t
    return entry


DELTA_FIELDS = ("turns", "grows", "shrinks", "poll-hits", "poll-misses", "wakeups",
                "poll-time-ns", "block-time-ns", "cpu-ns", "dispatches", "naps")


def counter_delta(before, after):
    """after - before of spindle-poll's counters (a field missing on either
    side is left out)."""
    b, a = before.get("spindle-poll", {}), after.get("spindle-poll", {})
    return {k: a[k] - b[k] for k in DELTA_FIELDS
            if isinstance(a.get(k), int) and isinstance(b.get(k), int)}


def without_handlers(entry):
    """An entry of query-iothreads with its (long) handler list left out."""
    e = dict(entry)
    poll = dict(e.get("spindle-poll", {}))
    handlers = poll.pop("handlers", None)
    poll["handler_count"] = None if handlers is None else len(handlers)
    e["spindle-poll"] = poll
    return e


def config_mismatch(entry, config):
    """None if the IOThread reports the config, else what differs."""
    poll = entry.get("spindle-poll", {})
    policy = poll.get("policy")
    problems = []
    if entry.get("poll-max-ns") != config.max_ns:
        problems.append(f"poll-max-ns {entry.get('poll-max-ns')} (set {config.max_ns})")
    if policy is not None and policy != config.policy and \
            not (config.policy == "qemu-classic" and policy == "adaptive"):
        problems.append(f"policy {policy} (set {config.policy})")
    return "; ".join(problems) or None


# ---------------------------------------------------------------------------
# The idle front-ends

class IdleFrontends:
    """spindle-vu-client processes that connect and then wait for a file."""

    def __init__(self, client, sockets, stopfile, cpu, log_path):
        self.client = str(client)
        self.sockets = [str(s) for s in sockets]
        self.stopfile = Path(stopfile)
        self.cpu = cpu
        self.log_path = Path(log_path)
        self.procs = []
        self.commands = []
        self._log = None

    def start(self):
        self._log = open(self.log_path, "a")
        for sock in self.sockets:
            cmd = ["taskset", "-c", str(self.cpu), self.client, "-s", sock,
                   "--mem-size", "4M", "wait-file", str(self.stopfile),
                   "--timeout", "3600"]
            self.commands.append(cmd)
            self.procs.append(subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                preexec_fn=die_with_parent(signal.SIGKILL)))
        return self

    def exited(self):
        """[(socket, exit status)] of the clients that are gone."""
        return [(s, p.returncode) for s, p in zip(self.sockets, self.procs)
                if p.poll() is not None]

    def stop(self, timeout=10.0):
        """Create the stop file; wait for the clients (SIGKILL the late ones).
        Returns how many exited 0."""
        if not self.procs:
            return 0
        self.stopfile.touch()
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self._log:
            self._log.close()
        ok = sum(1 for p in self.procs if p.returncode == 0)
        self.procs_done = [p.returncode for p in self.procs]
        return ok


def connect_qmp(layout, backend):
    return Qmp(layout.qmp_socket, alive=backend.alive)

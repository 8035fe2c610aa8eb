"""A single-node Ceph cluster for the rbd driver's tests.

One monitor and one OSD from Debian's packages (ceph-mon, ceph-osd; the
`ceph`, `rbd` and `rados` tools from ceph-common), in a directory of the
caller's, on 127.0.0.1 at a free port, without authentication (auth none)
and without a manager: nothing the tests do needs one.  One pool,
replicated with size 1.

The OSD keeps its objects in a BlueStore on a sparse 1 GiB file of the
directory (a few MB written): the cluster is up in about 9 s, and an OSD
killed and started again (kill_osd(), start_osd()) comes back with its
data in about 5 s.  objectstore="memstore" keeps them in memory instead
and is up in about 6 s, but Debian's ceph-osd 16 does not bring a
memstore OSD's placement groups back after a restart (its saved store
holds only the superblock; the PGs stay inactive), so only freezing the
OSD (freeze_osd(): SIGSTOP, it stops answering as a hung or cut-off OSD
does; thaw_osd()) works there.

Every daemon is started in the foreground (-f) as a child of the test run
and stopped by its PID; nothing is installed or left running.  Each also
gets PR_SET_PDEATHSIG (SIGKILL): a test run or bench-compare that is
killed takes its cluster with it (the signal follows the thread that
started the daemon, so start the cluster from a thread that outlives it).  start()
raises CephUnavailable, saying why and with the tail of the failing
daemon's log, when the cluster cannot come up; the fixtures turn that
into a skip.

Clients (the tools, and spindle through conf=) read the cluster's
ceph.conf, which also bounds how long a client waits: a monitor that does
not answer fails a connection after 10 s and an OSD that does not answer
fails a request after OSD_OP_TIMEOUT_S.  It gives every process an admin
socket, so that a test can read librbd's counters in spindle
(image_counters()).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

from spindle_daemon import die_with_parent

POOL = "rbd"
OSD_OP_TIMEOUT_S = 5
START_TIMEOUT_S = 60
TOOL_TIMEOUT_S = 60

OBJECTSTORES = {
    "bluestore": """osd objectstore = bluestore
bluestore block create = true
bluestore block size = 1073741824
bluestore block db create = false
bluestore block wal create = false
bluestore cache size = 67108864
bluestore fsck on mkfs = false
bluestore fsck on mount = false
osd memory target = 536870912
""",
    "memstore": """osd objectstore = memstore
memstore device bytes = 268435456
""",
}

PROGRAMS = ("ceph-mon", "ceph-osd", "monmaptool", "ceph", "rbd", "rados")


class CephUnavailable(Exception):
    """The test cluster cannot start; the message says why."""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path, lines=20):
    try:
        return "\n".join(Path(path).read_text(errors="replace")
                         .splitlines()[-lines:])
    except OSError:
        return "(no log)"


class CephCluster:
    def __init__(self, directory, objectstore="bluestore"):
        self.dir = Path(directory)
        self.objectstore = objectstore
        self.conf = self.dir / "ceph.conf"
        self.procs = {}
        self.port = None

    # -- tools --------------------------------------------------------

    def env(self):
        env = dict(os.environ)
        env["CEPH_CONF"] = str(self.conf)
        return env

    def run(self, *argv, check=True, timeout=TOOL_TIMEOUT_S, input=None):
        """Run a ceph tool (ceph, rbd, rados) against the cluster."""
        proc = subprocess.run([*argv, "--conf", str(self.conf)],
                              env=self.env(), capture_output=True,
                              input=input, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):"
                               f" {proc.stderr.decode(errors='replace')}")
        return proc

    def rbd(self, *args, **kw):
        return self.run("rbd", "-p", POOL, *args, **kw)

    def image_counters(self, pid, image):
        """librbd's performance counters of image in the client process
        pid (spindle): its admin socket, which the configuration gives
        every client."""
        asok = next((self.dir / "run").glob(f"client.*.{pid}.asok"))
        proc = subprocess.run(["ceph", "--admin-daemon", str(asok), "perf",
                               "dump"], capture_output=True, check=True,
                              timeout=TOOL_TIMEOUT_S)
        for name, counters in json.loads(proc.stdout).items():
            if name.startswith("librbd-") and name.endswith(f"-{image}"):
                return counters
        raise AssertionError(f"no librbd counters for {image} in {asok}")

    def blockdev(self, image, extra=""):
        """--blockdev options of an rbd node on image of the pool."""
        return (f"driver=rbd,pool={POOL},image={image},conf={self.conf}"
                + (f",{extra}" if extra else ""))

    # -- daemons ------------------------------------------------------

    def _write_conf(self):
        self.port = _free_port()
        fsid = uuid.uuid4()
        run = self.dir / "run"
        self.conf.write_text(f"""[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{self.port}
ms bind msgr1 = false
auth cluster required = none
auth service required = none
auth client required = none
run dir = {run}
log file = {self.dir}/$name.log
admin socket = {run}/$name.$pid.asok
pid file =
mon data = {self.dir}/mon.$id
osd data = {self.dir}/osd.$id
{OBJECTSTORES[self.objectstore]}osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd max object name len = 256
osd max object namespace len = 64
client mount timeout = 10
rados mon op timeout = 10
rados osd op timeout = {OSD_OP_TIMEOUT_S}
""")
        run.mkdir(exist_ok=True)

    def _spawn(self, name, argv):
        log = open(self.dir / f"{name}.out", "wb")
        self.procs[name] = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, env=self.env(),
            preexec_fn=die_with_parent(signal.SIGKILL))
        log.close()

    def _check(self, name, what):
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is not None:
            raise CephUnavailable(
                f"{name} exited ({proc.returncode}) while {what}:\n"
                + _tail(self.dir / f"{name}.out") + "\n"
                + _tail(self.dir / f"{name}.log"))

    def _wait(self, name, what, ok, deadline):
        while True:
            self._check(name, what)
            if ok():
                return
            if time.monotonic() > deadline:
                raise CephUnavailable(f"timed out {what}:\n"
                                      + _tail(self.dir / f"{name}.log"))
            time.sleep(0.2)

    def _mkfs(self, argv, name):
        proc = subprocess.run(argv, env=self.env(), capture_output=True,
                              timeout=TOOL_TIMEOUT_S)
        if proc.returncode != 0:
            raise CephUnavailable(f"{' '.join(argv[:2])} failed:\n"
                                  + proc.stderr.decode(errors="replace")
                                  + _tail(self.dir / f"{name}.log"))

    def start_osd(self, deadline=None, pool=True):
        """(Re)start the OSD and wait until it is up and (pool) the
        pool's PGs are active."""
        deadline = deadline or time.monotonic() + START_TIMEOUT_S
        self._spawn("osd.0", ["ceph-osd", "-f", "-i", "0",
                              "--conf", str(self.conf)])
        self._wait("osd.0", "waiting for the OSD to come up",
                   self._osd_up, deadline)
        if pool:
            self._wait("osd.0", "waiting for the pool's PGs to be active",
                       self._pool_writable, deadline)
            self.run("rados", "-p", POOL, "rm", "spindle-probe")

    def _osd_up(self):
        proc = self.run("ceph", "osd", "dump", "--format=json", check=False,
                        timeout=15)
        if proc.returncode != 0:
            return False
        osds = json.loads(proc.stdout).get("osds", [])
        return any(o.get("osd") == 0 and o.get("up") for o in osds)

    def _pool_writable(self):
        # Without a manager there is no `ceph pg stat`: a write to the
        # pool answers once its PGs are active.
        return self.run("rados", "-p", POOL, "put", "spindle-probe",
                        "/dev/null", check=False, timeout=15).returncode == 0

    def start(self):
        missing = [p for p in PROGRAMS if not shutil.which(p)]
        if missing:
            raise CephUnavailable(
                f"{', '.join(missing)} not installed "
                "(apt-get install --no-install-recommends ceph-mon ceph-osd "
                "ceph-common)")
        deadline = time.monotonic() + START_TIMEOUT_S
        self.dir.mkdir(parents=True, exist_ok=True)
        self._write_conf()
        monmap = self.dir / "monmap"
        subprocess.run(["monmaptool", "--create", "--clobber",
                        "--fsid", self._fsid(),
                        "--addv", "a", f"[v2:127.0.0.1:{self.port}]",
                        str(monmap)], check=True, capture_output=True)
        self._mkfs(["ceph-mon", "--mkfs", "-i", "a", "--monmap", str(monmap),
                    "--conf", str(self.conf)], "mon.a")
        self._spawn("mon.a", ["ceph-mon", "-f", "-i", "a",
                              "--conf", str(self.conf)])
        self._wait("mon.a", "waiting for the monitor",
                   lambda: self.run("ceph", "mon", "stat", check=False,
                                    timeout=15).returncode == 0, deadline)
        osd_uuid = str(uuid.uuid4())
        self.run("ceph", "osd", "new", osd_uuid, "0")
        (self.dir / "osd.0").mkdir(exist_ok=True)
        self._mkfs(["ceph-osd", "--mkfs", "-i", "0", "--osd-uuid", osd_uuid,
                    "--conf", str(self.conf)], "osd.0")
        self.start_osd(deadline, pool=False)
        self.run("ceph", "osd", "pool", "create", POOL, "8")
        self.run("ceph", "osd", "pool", "application", "enable", POOL, "rbd")
        self._wait("osd.0", "waiting for the pool's PGs to be active",
                   self._pool_writable, deadline)
        self.run("rados", "-p", POOL, "rm", "spindle-probe")
        return self

    def _fsid(self):
        for line in self.conf.read_text().splitlines():
            if line.startswith("fsid ="):
                return line.split("=", 1)[1].strip()
        raise AssertionError("no fsid in ceph.conf")

    def stop_daemon(self, name, sig=signal.SIGTERM, timeout=30):
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill_osd(self):
        """The OSD dies (SIGKILL), until start_osd()."""
        self.stop_daemon("osd.0", signal.SIGKILL)

    def freeze_osd(self):
        """The OSD stops answering (SIGSTOP) until thaw_osd()."""
        self.procs["osd.0"].send_signal(signal.SIGSTOP)

    def thaw_osd(self):
        self.procs["osd.0"].send_signal(signal.SIGCONT)

    def stop(self):
        if "osd.0" in self.procs:
            self.thaw_osd()
        for name in ("osd.0", "mon.a"):
            self.stop_daemon(name)

    def log_tail(self, name, lines=20):
        return _tail(self.dir / f"{name}.log", lines)

"""Handing an image over between two exports: live migration's storage side.

Two guests may be attached to one image for a live migration, but only one
may write it at a time.  A node is active (it holds the image) or inactive;
an export with allow-inactive=on may share a node that a writable export
serves, or serve an inactive node (--blockdev ...,active=off: the image is
another daemon's for now).  The hand-over needs no command: an export's
front-end starting its first ring takes the node (refused while another
export of it runs, or while another process holds the image), and its last
ring stopping with dirty logging on (QEMU ending a migration) releases it
before GET_VRING_BASE is answered.

spindle-vu-client plays both QEMUs: the source writes, then "migrates away"
(log-start, then stop: GET_VRING_BASE on every ring with logging on), and
tries to run again afterwards with `reconnect`; the destination's session
is refused while the source runs, then starts and finds the source's data.
wait-file and touch order the steps of the sessions that run side by side.
"""

import subprocess
import time

import pytest

from conftest import make_image, run_spindle, vu, vu_argv, vu_ok
from qmp_util import SpindleQmp

IMAGE_SIZE = 16 << 20
STEP_TIMEOUT_S = 30
REFUSED = "the back-end rejected SET_VRING_ENABLE"


# --------------------------------------------------------------------------
# Helpers

def blockdev(image, extra=""):
    return ["--blockdev",
            f"driver=file,node-name=disk,filename={image}{extra}"]


def export(workdir, name, extra="", device="blk"):
    """A writable export of node disk; for scsi, as its LUN 0."""
    node = ("node-name=disk,writable=on" if device == "blk" else
            "lun.0.node-name=disk,lun.0.writable=on")
    return ["--export",
            f"type=vhost-user-{device},id={name},{node},"
            f"addr.type=unix,addr.path={workdir / name}.sock{extra}"]


# The client's I/O commands for each device.
IO = {"blk": ("write", "read"), "scsi": ("scsi-write", "scsi-read")}


class Session:
    """A spindle-vu-client session running in the background."""

    def __init__(self, client, sock, *args):
        self.proc = subprocess.Popen(vu_argv(client, sock, args),
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def wait_for(self, path):
        """Wait until the session creates path (its `touch`)."""
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while not path.exists():
            if self.proc.poll() is not None:
                out, err = self.proc.communicate()
                pytest.fail(f"the session ended before {path.name}:\n{out}"
                            f"\n{err}")
            assert time.monotonic() < deadline, f"no {path.name}"
            time.sleep(0.02)

    def finish(self):
        """Wait for the end; returns (exit status, stdout, stderr)."""
        out, err = self.proc.communicate(timeout=STEP_TIMEOUT_S)
        return self.proc.returncode, out, err

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def export_info(daemon, name):
    (info,) = [e for e in daemon.qmp.cmd("query-block-exports")
               if e["id"] == name]
    return info


def node_active(daemon):
    (node,) = [n for n in daemon.qmp.cmd("query-named-block-nodes")
               if n["node-name"] == "disk"]
    return node["active"]


def source_session(client, sock, workdir, device):
    """The source guest: writes 64 KiB of pattern 1, waits for go0,
    migrates away (logging on, rings stopped), waits for go1 and tries to
    run again (a new session)."""
    write, _ = IO[device]
    return Session(client, sock, write, "0", "64k", "--pattern", "1",
                   "touch", workdir / "ready0", "wait-file", workdir / "go0",
                   "log-start", "stop", "touch", workdir / "stopped0",
                   "wait-file", workdir / "go1", "reconnect")


def destination_session(client, sock, workdir, device):
    """The destination guest: finds the source's data, writes its own,
    and keeps running until go2."""
    write, read = IO[device]
    return Session(client, sock, read, "0", "64k", "--verify", "1",
                   write, "1M", "64k", "--pattern", "3",
                   "touch", workdir / "ready1", "wait-file", workdir / "go2")


def check_refused(client, sock, device):
    """A session on sock cannot start its rings (and writes nothing)."""
    rc, doc = vu(client, sock, IO[device][0], "0", "4k", "--pattern", "2")
    assert rc == 1 and REFUSED in doc["error"], doc


def run_migration(client, workdir, src, dst, src_sock, dst_sock,
                  busy_because, device="blk"):
    """The hand-over from src's export e0 to dst's e1 (src and dst may be
    one daemon); busy_because: what e1's refused start says."""
    source = source_session(client, src_sock, workdir, device)
    destination = None
    try:
        source.wait_for(workdir / "ready0")
        assert export_info(src, "e0")["spindle-running"]
        assert node_active(src)

        # The destination may not start while the source runs.
        check_refused(client, dst_sock, device)
        info = export_info(dst, "e1")
        assert not info["spindle-running"]
        assert busy_because in info["spindle-start-error"]

        # The source migrates away: its node goes inactive before the
        # last GET_VRING_BASE is answered.
        (workdir / "go0").write_text("")
        source.wait_for(workdir / "stopped0")
        assert not node_active(src)
        assert "export 'e0' released node 'disk'" in src.stderr()

        destination = destination_session(client, dst_sock, workdir, device)
        destination.wait_for(workdir / "ready1")
        info = export_info(dst, "e1")
        assert info["spindle-running"]
        assert "spindle-start-error" not in info
        assert node_active(dst)
        assert "export 'e1' took node 'disk'" in dst.stderr()

        # The source cannot come back while the destination runs.
        (workdir / "go1").write_text("")
        rc, out, err = source.finish()
        assert rc == 1 and REFUSED in out, (out, err)
        assert not export_info(src, "e0")["spindle-running"]
        assert "spindle-start-error" in export_info(src, "e0")

        (workdir / "go2").write_text("")
        rc, out, err = destination.finish()
        assert rc == 0, (out, err)
    finally:
        source.kill()
        if destination:
            destination.kill()
    # The refused writes of pattern 2 never landed; the others did.
    read = IO[device][1]
    vu_ok(client, dst_sock, read, "0", "64k", "--verify", "1",
          read, "1M", "64k", "--verify", "3")


# --------------------------------------------------------------------------
# One daemon, one node, two exports

@pytest.mark.parametrize("device", ["blk", "scsi"])
def test_same_host_handover(spindle, client, workdir, device):
    image = make_image(workdir / "disk.img", IMAGE_SIZE)
    args = [*blockdev(image), *export(workdir, "e0", device=device),
            *export(workdir, "e1", ",allow-inactive=on", device)]
    with SpindleQmp(spindle, workdir, args).start() as d:
        info = export_info(d, "e1")
        assert info["spindle-allow-inactive"]
        assert not info["spindle-running"]
        assert not export_info(d, "e0")["spindle-allow-inactive"]
        run_migration(client, workdir, d, d, workdir / "e0.sock",
                      workdir / "e1.sock",
                      "node 'disk' is in use by export 'e0', whose "
                      "front-end is running", device)


def test_two_writable_exports_need_allow_inactive(spindle, workdir):
    image = make_image(workdir / "disk.img", IMAGE_SIZE)
    proc = run_spindle(spindle, [*blockdev(image), *export(workdir, "e0"),
                                 *export(workdir, "e1")])
    assert proc.returncode == 1
    assert "node 'disk' is already exported by 'e0'" in proc.stderr


def test_running_export_keeps_its_node(spindle, client, workdir):
    image = make_image(workdir / "disk.img", IMAGE_SIZE)
    args = [*blockdev(image), *export(workdir, "e0")]
    with SpindleQmp(spindle, workdir, args).start() as d:
        session = Session(client, workdir / "e0.sock", "write", "0", "4k",
                          "touch", workdir / "ready", "wait-file",
                          workdir / "go", "write", "4k", "4k")
        try:
            session.wait_for(workdir / "ready")
            cls, desc = d.qmp.error("blockdev-set-active",
                                    {"node-name": "disk", "active": False})
            assert desc == ("Cannot inactivate node 'disk': export 'e0' is "
                            "running on it (stop its front-end first)")
            (workdir / "go").write_text("")
            rc, out, err = session.finish()
            assert rc == 0, err
        finally:
            session.kill()
        # A stop without dirty logging (a reset, a disconnect) keeps it.
        assert node_active(d)
        assert "released" not in d.stderr()


def test_failed_migration_source_takes_node_back(spindle, client, workdir):
    """A migration that fails after the source's rings stopped: QEMU starts
    them again, and the source's export takes its node back."""
    image = make_image(workdir / "disk.img", IMAGE_SIZE)
    args = [*blockdev(image), *export(workdir, "e0"),
            *export(workdir, "e1", ",allow-inactive=on")]
    with SpindleQmp(spindle, workdir, args).start() as d:
        vu_ok(client, workdir / "e0.sock", "write", "0", "64k", "--pattern",
              "1", "log-start", "stop", "reconnect", "write", "64k", "64k",
              "--pattern", "2", "read", "0", "64k", "--verify", "1")
        log = d.stderr()
        assert log.index("export 'e0' released node 'disk'") < \
            log.index("export 'e0' took node 'disk'")
        assert node_active(d)


# --------------------------------------------------------------------------
# Two daemons, one image (shared storage)

def test_cross_process_handover(spindle, client, workdir):
    image = make_image(workdir / "disk.img", IMAGE_SIZE)
    src_dir = workdir / "src"
    dst_dir = workdir / "dst"
    src_dir.mkdir()
    dst_dir.mkdir()
    with SpindleQmp(spindle, src_dir,
                    [*blockdev(image), *export(workdir, "e0")]).start() as src:
        # Without active=off the destination cannot even open the image.
        proc = run_spindle(spindle, [*blockdev(image),
                                     *export(workdir, "e1")])
        assert proc.returncode == 1
        assert "Failed to get write lock" in proc.stderr
        with SpindleQmp(spindle, dst_dir,
                        [*blockdev(image, ",active=off"),
                         *export(workdir, "e1",
                                 ",allow-inactive=on")]).start() as dst:
            assert not node_active(dst)
            run_migration(client, workdir, src, dst, workdir / "e0.sock",
                          workdir / "e1.sock",
                          "Cannot activate node 'disk': Failed to get "
                          "write lock on")
            assert "Failed to get write lock" in \
                export_info(src, "e0")["spindle-start-error"]


# --------------------------------------------------------------------------
# blockdev-set-active

def test_blockdev_set_active(spindle, workdir):
    image = make_image(workdir / "disk.img", IMAGE_SIZE)
    with SpindleQmp(spindle, workdir, blockdev(image)).start() as d:
        q = d.qmp
        # A second node on the image, inactive: it takes no lock.
        q.cmd("blockdev-add", {"driver": "file", "node-name": "other",
                               "filename": str(image), "active": False})
        cls, desc = q.error("blockdev-set-active",
                            {"node-name": "other", "active": True})
        assert desc.startswith("Cannot activate node 'other': Failed to get "
                               "write lock on ")
        assert "is another process using the image?" in desc

        # Both ways, by name.
        q.cmd("blockdev-set-active", {"node-name": "disk", "active": False})
        assert not node_active(d)
        q.cmd("blockdev-set-active", {"node-name": "other", "active": True})
        cls, desc = q.error("blockdev-set-active",
                            {"node-name": "disk", "active": True})
        assert "Cannot activate node 'disk'" in desc
        assert not node_active(d)

        # Every node at once.
        q.cmd("blockdev-set-active", {"active": False})
        nodes = q.cmd("query-named-block-nodes")
        assert [n["active"] for n in nodes] == [False, False]
        q.cmd("blockdev-set-active", {"node-name": "disk", "active": True})
        assert node_active(d)

        # Errors.
        cls, desc = q.error("blockdev-set-active",
                            {"node-name": "nope", "active": True})
        assert cls == "DeviceNotFound"
        cls, desc = q.error("blockdev-set-active", {"node-name": "disk"})
        assert "'active'" in desc
        cls, desc = q.error("blockdev-set-active",
                            {"active": True, "colour": "red"})
        assert "colour" in desc


def test_lun_added_while_running_is_taken(spindle, client, workdir):
    """A LUN hot-added to an allow-inactive export: left inactive while its
    front-end does not run, activated when it does."""
    image = make_image(workdir / "disk.img", IMAGE_SIZE)
    images = [make_image(workdir / f"l{i}.img", IMAGE_SIZE) for i in (1, 2)]
    args = [*blockdev(image),
            *export(workdir, "e0", ",allow-inactive=on", "scsi")]
    with SpindleQmp(spindle, workdir, args).start() as d:
        for i, img in enumerate(images, 1):
            d.qmp.cmd("blockdev-add", {"driver": "file", "node-name": f"l{i}",
                                       "filename": str(img), "active": False})
        d.qmp.cmd("block-export-lun-add", {"id": "e0", "lun": 1,
                                           "node-name": "l1", "writable": True})
        session = Session(client, workdir / "e0.sock", "scsi-write", "0",
                          "4k", "touch", workdir / "ready", "wait-file",
                          workdir / "go", "scsi-write", "0", "4k", "--lun",
                          "2")
        try:
            session.wait_for(workdir / "ready")
            d.qmp.cmd("block-export-lun-add", {"id": "e0", "lun": 2,
                                               "node-name": "l2",
                                               "writable": True})
            active = {n["node-name"]: n["active"]
                      for n in d.qmp.cmd("query-named-block-nodes")}
            # The running export took l1 when it started, l2 when added.
            assert active == {"disk": True, "l1": True, "l2": True}
            (workdir / "go").write_text("")
            rc, out, err = session.finish()
            assert rc == 0, out
        finally:
            session.kill()

"""LUN hot-plug while the front-end migrates a vhost-user-scsi guest.

A migrating QEMU switches dirty logging on (VHOST_F_LOG_ALL) and sends
the device's state to a destination whose export has the LUNs it was
created with; a LUN added or removed on the source meanwhile would be
missing (or extra) there.  So block-export-lun-add and
block-export-lun-del refuse while the export's front-end has logging on,
with an error saying why and what to do, and change nothing; once logging
is off again (a migration that failed or was cancelled) both work.

spindle-vu-client plays the migrating QEMU: `log-start` hands spindle a
log and switches LOG_ALL on, `log-stop` switches it off (LOG_SHMFD stays
negotiated: only logging itself matters).  `touch` and `wait-file` let
the test issue its QMP commands at known points of the client's session.
"""

import pytest

from conftest import make_image
from qmp_util import SpindleQmp
from spindle_daemon import wait_for
from test_qmp_commands import (GENERIC, SCSI_EVT_RESET_RESCAN,
                               SCSI_T_TRANSPORT_RESET, exports, nodes,
                               vu_running, vu_wait)

MiB = 1 << 20
MIGRATING = ("export 's0': the guest is being migrated (dirty logging is "
             "on); {} the LUN after the migration, on the destination too")


@pytest.fixture
def scsi_daemon(spindle, workdir):
    """s0: a vhost-user-scsi export with LUN 0; node `hot` free to add."""
    image = make_image(workdir / "l0.img", 16 * MiB)
    hot = make_image(workdir / "hot.img", 8 * MiB)
    d = SpindleQmp(spindle, workdir, [
        "--object", "iothread,id=iot0",
        "--blockdev", f"driver=file,node-name=l0,filename={image}",
        "--blockdev", f"driver=file,node-name=hot,filename={hot}",
        "--export", "type=vhost-user-scsi,id=s0,addr.type=unix,"
                    f"addr.path={workdir / 's0.sock'},num-queues=1,"
                    "iothread=iot0,lun.0.node-name=l0,lun.0.writable=on"]
    ).start()
    yield d
    assert d.stop() == 0, d.stderr()


def _luns(d):
    e = exports(d)["s0"]
    return e["spindle-nodes"], e["spindle-luns"]


def test_lun_changes_refused_while_logging(scsi_daemon, client):
    d = scsi_daemon
    q = d.qmp
    w = d.workdir
    add = {"id": "s0", "lun": 5, "node-name": "hot", "writable": True}
    with vu_running(client, w / "s0.sock", "--device", "scsi",
                    "log-start", "touch", w / "logging",
                    "wait-file", w / "stop-logging", "--timeout", 30,
                    "log-stop", "touch", w / "stopped",
                    "scsi-events", "--wait", 15,
                    "scsi-report-luns",
                    "wait-file", w / "done", "--timeout", 30) as proc:
        wait_for(lambda: (w / "logging").exists() or proc.poll() is not None,
                 what="the client's log-start")
        assert proc.poll() is None, vu_wait(proc).describe()
        assert q.error("block-export-lun-add", add) == \
            (GENERIC, MIGRATING.format("add"))
        assert q.error("block-export-lun-del", {"id": "s0", "lun": 0}) == \
            (GENERIC, MIGRATING.format("remove"))
        # Nothing changed: LUN 0 only, `hot` free in the main loop.
        assert _luns(d) == (["l0"], [0])
        assert nodes(d)["hot"]["spindle-iothread"] is None

        (w / "stop-logging").touch()
        wait_for(lambda: (w / "stopped").exists() or proc.poll() is not None,
                 what="the client's log-stop")
        assert q.cmd("block-export-lun-add", add) == {}
        assert _luns(d) == (["l0", "hot"], [0, 5])
        (w / "done").touch()
        run = vu_wait(proc, timeout=30)
    assert run.ok, run.describe()
    start, stop = run.result("log-start"), run.result("log-stop")
    assert start["ok"] and stop["ok"], run.describe()
    # The guest was told of the LUN added once logging was off, and sees it.
    event, = run.result("scsi-events")["events"]
    assert (event["event"], event["lun"], event["reason"]) == \
        (SCSI_T_TRANSPORT_RESET, 5, SCSI_EVT_RESET_RESCAN)
    assert run.result("scsi-report-luns")["luns"] == [0, 5]
    # Without a front-end nothing is migrating: removing works.
    assert q.cmd("block-export-lun-del", {"id": "s0", "lun": 5}) == {}
    assert _luns(d) == (["l0"], [0])
    assert "dirty logging on" in d.stderr()

"""Functional tests of the live-management plumbing of exports that needs no
QMP monitor: the vhost-user back-end channel and spindle-vu-client's
get-config, wait-config-change and wait-file commands.

A real spindle serves a vhost-user-blk export and a vhost-user-scsi export
over sparse image files.  spindle-vu-client (tools/vu-client, docs/frontend.md)
plays QEMU: it accepts the BACKEND_REQ protocol feature and hands the
back-end its channel (SET_SLAVE_REQ_FD), reads the config again on
request, and waits for files so that a test can act between two commands
of one session.  What changes the config (block_resize, LUN hot-plug) is
driven over QMP and tested with the monitor.
"""

import json
import subprocess
import time

import pytest

import daemons  # tests/e2e, on sys.path through conftest
from conftest import make_image, vu, vu_argv, vu_ok

BLK_SIZE = 64 << 20
LUN_SIZE = 16 << 20
RUN_TIMEOUT_S = 20


@pytest.fixture
def daemon(spindle_daemon, workdir):
    """spindle with a vhost-user-blk export (e0, two queues) and a
    vhost-user-scsi one (e1, two LUNs, two request queues) over sparse
    image files."""
    exports = [
        daemons.Export(image=str(make_image(workdir / "blk.img", BLK_SIZE)),
                       socket=str(workdir / "blk.sock"), num_queues=2),
        daemons.ScsiExport(
            luns=[daemons.ScsiLun(image=str(make_image(workdir / "lun0.img",
                                                       LUN_SIZE)),
                                  writable=True),
                  daemons.ScsiLun(image=str(make_image(workdir / "lun1.img",
                                                       LUN_SIZE)))],
            socket=str(workdir / "scsi.sock"), num_queues=2),
    ]
    d = spindle_daemon(exports=exports, workdir=workdir)
    yield d
    assert d.stop() == 0, d.stderr()


def blk_sock(d):
    return d.exports[0].socket


def scsi_sock(d):
    return d.exports[1].socket


# --------------------------------------------------------------------------
# The back-end channel and get-config

def test_backend_channel_is_negotiated(client, daemon):
    for sock, device in ((blk_sock(daemon), "blk"),
                         (scsi_sock(daemon), "scsi")):
        (info,) = vu_ok(client, sock, "info", extra=("--device", device))
        assert "BACKEND_REQ" in info["protocol_features_offered"]
        assert "BACKEND_REQ" in info["protocol_features"]


def test_get_config_blk(client, daemon):
    info, cfg = vu_ok(client, blk_sock(daemon), "info", "get-config")
    assert cfg["backend_channel"] is True
    assert cfg["config_changes"] == 0
    assert cfg["device"] == "blk"
    assert cfg["capacity_bytes"] == BLK_SIZE
    assert cfg["config"]["capacity_sectors"] == BLK_SIZE // 512
    # The same config as the one read at connect.
    assert cfg["config"] == info["config"]
    assert cfg["config"]["num_queues"] == 2


def test_get_config_scsi(client, daemon):
    (cfg,) = vu_ok(client, scsi_sock(daemon), "get-config",
                   extra=("--device", "scsi"))
    assert cfg["device"] == "scsi"
    assert cfg["backend_channel"] is True
    assert cfg["config_changes"] == 0
    assert cfg["config"]["num_queues"] == 2
    assert cfg["config"]["max_lun"] == 16383


def test_no_config_change_without_a_resize(client, daemon):
    start = time.monotonic()
    rc, doc = vu(client, blk_sock(daemon), "get-config",
                 "wait-config-change", "--timeout", "0.3")
    assert rc == 1 and not doc["ok"]
    assert "no config-change message" in doc["error"]
    assert time.monotonic() - start < RUN_TIMEOUT_S
    assert [r["ok"] for r in doc["results"]] == [True, False]


def test_without_backend_req_there_is_no_channel(client, daemon):
    extra = ("--disable-protocol-feature", "BACKEND_REQ")
    (info, cfg) = vu_ok(client, blk_sock(daemon), "info", "get-config",
                        extra=extra)
    assert "BACKEND_REQ" in info["protocol_features_offered"]
    assert "BACKEND_REQ" not in info["protocol_features"]
    assert cfg["backend_channel"] is False
    assert cfg["capacity_bytes"] == BLK_SIZE
    rc, doc = vu(client, blk_sock(daemon), "wait-config-change", "--timeout",
                 "5", extra=extra)
    assert rc == 1
    assert "no back-end channel" in doc["error"]


def test_io_still_works_with_the_channel(client, daemon):
    """The channel changes nothing on the data path: a write and read back
    on each export, and the daemon logs no protocol complaint."""
    vu_ok(client, blk_sock(daemon), "write", "1M", "64k", "--pattern", "7",
          "read", "1M", "64k", "--verify", "7", "get-config")
    vu_ok(client, scsi_sock(daemon), "scsi-write", "0", "8k", "--pattern",
          "3", "scsi-read", "0", "8k", "--verify", "3", "get-config")
    assert "SLAVE" not in daemon.stderr()


# --------------------------------------------------------------------------
# wait-file: acting between two commands of one session

def test_wait_file_pauses_a_session(client, daemon, workdir):
    flag = workdir / "go"
    proc = subprocess.Popen(
        vu_argv(client, blk_sock(daemon),
                    ["write", "0", "4k", "--pattern", "5", "wait-file",
                     str(flag), "read", "0", "4k", "--verify", "5"]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # It announces the wait once the write is done, then waits.
        line = proc.stderr.readline()
        assert line.strip() == f"spindle-vu-client: waiting for {flag}"
        time.sleep(0.3)
        assert proc.poll() is None
        flag.write_text("")
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    doc = json.loads(out)
    write, wait, read = doc["results"]
    assert wait["command"] == "wait-file" and wait["ok"]
    assert wait["path"] == str(flag)
    assert wait["waited_ms"] >= 250
    assert read["ok"]


def test_wait_file_times_out(client, daemon, workdir):
    start = time.monotonic()
    rc, doc = vu(client, blk_sock(daemon), "wait-file",
                 str(workdir / "never"), "--timeout", "0.2", "get-config")
    assert rc == 1
    assert "did not appear within 0.2 s" in doc["error"]
    assert time.monotonic() - start < RUN_TIMEOUT_S
    # The command after it did not run.
    assert [r["command"] for r in doc["results"]] == ["wait-file"]


def test_wait_file_existing_returns_at_once(client, daemon, workdir):
    flag = workdir / "there"
    flag.write_text("")
    (wait,) = vu_ok(client, blk_sock(daemon), "wait-file", str(flag),
                    "--timeout", "5")
    assert wait["waited_ms"] < 1000


@pytest.mark.parametrize("args,message", [
    (["wait-file"], "missing argument"),
    (["wait-file", "x", "--timeout", "soon"], "expected seconds"),
    (["wait-config-change", "--timeout", "-1"], "expected seconds"),
    (["get-config", "--timeout", "1"], "unknown option"),
])
def test_bad_command_lines_exit_2(client, workdir, args, message):
    proc = subprocess.run([str(client), "--socket", str(workdir / "none"),
                           *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_help_lists_the_new_commands(client):
    out = subprocess.run([str(client), "--help"], capture_output=True,
                         text=True, timeout=RUN_TIMEOUT_S).stdout
    for usage in ("get-config", "wait-config-change [--timeout SECONDS]",
                  "wait-file PATH [--timeout SECONDS]"):
        assert usage in out

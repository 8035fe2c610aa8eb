"""Crash recovery with inflight I/O tracking, through spindle-vu-client.

Spindle serves an image through a blkdebug node whose `inject-delay` rule
holds writes to the first range back for DELAY_S (docs/block.md), so that
requests complete out of order.  spindle-vu-client plays QEMU and the guest
(docs/frontend.md): it writes A to the slow range without waiting
(outstanding), then B and C elsewhere, which complete (acknowledged), and
touches a marker.  The test then kills the daemon with SIGKILL while A is
in flight and starts it again with the same command line (it replaces the
socket the dead process left).  The client's `resume` reconnects as QEMU
7.2 does (SET_VRING_BASE = the used index, the inflight region handed back
with SET_INFLIGHT_FD) and waits for A.

With the export's inflight tracking on (the default), A completes once
after the restart, B and C are not run again, and all three ranges read
back with their patterns.  Without it (the export's `inflight-tracking=off`,
or a front-end that does not negotiate INFLIGHT_SHMFD) the new daemon
starts at the used index, which is past A: it runs C again (a replay, which
the client reports) and never finishes A (a loss).  The test asserts that
failure, for virtio-blk and virtio-scsi alike.
"""

import json
import re
import subprocess

import pytest

from conftest import make_image, vu, vu_argv, vu_ok, wait_for

IMAGE_SIZE = 16 << 20
DELAY_S = 3
RESUME_TIMEOUT_S = 30
CLIENT_BACKSTOP_S = 120

# The three writes: A on the slow range, then B and C, each 4 KiB.
SLOW_SECTORS = 8
WRITES = (("A", 0, 11), ("B", 64 << 10, 12), ("C", 128 << 10, 13))
LEN = 4096

DEVICES = {
    "blk": ("write", "read"),
    "scsi": ("scsi-write", "scsi-read"),
}


def daemon_args(device, image, sock, tracking, delay_s=DELAY_S):
    """The daemon's command line: the same before and after the kill."""
    node = ("driver=blkdebug,node-name=d0,image.driver=file,"
            f"image.filename={image}")
    if delay_s:
        node += (f",inject-delay.0.op=write,inject-delay.0.sector=0,"
                 f"inject-delay.0.sectors={SLOW_SECTORS},"
                 f"inject-delay.0.delay-ns={delay_s * 10**9}")
    if device == "blk":
        export = ["type=vhost-user-blk", "node-name=d0", "writable=on"]
    else:
        export = ["type=vhost-user-scsi", "lun.0.node-name=d0",
                  "lun.0.writable=on"]
    export += ["id=e0", "addr.type=unix", f"addr.path={sock}",
               "iothread=iot0"]
    if tracking is not None:
        export.append(f"inflight-tracking={tracking}")
    return ["--blockdev", node, "--export", ",".join(export)]


def client_commands(device, marker, resume_timeout_s=RESUME_TIMEOUT_S):
    write, read = DEVICES[device]
    cmds = []
    for i, (_, offset, seed) in enumerate(WRITES):
        cmds += [write, offset, LEN, "--pattern", seed]
        if i == 0:
            cmds.append("--no-wait")
    cmds += ["touch", marker, "resume", "--timeout", resume_timeout_s]
    for _, offset, seed in WRITES:
        cmds += [read, offset, LEN, "--verify", seed]
    return cmds


def crash_and_resume(spindle_daemon, client, workdir, device,
                     tracking=None, client_opts=(),
                     resume_timeout_s=RESUME_TIMEOUT_S):
    """Run the scenario; return (client's exit status, its JSON document,
    the restarted daemon)."""
    image = make_image(workdir / "disk.img", IMAGE_SIZE)
    sock = workdir / "vu.sock"
    marker = workdir / "ready"
    d = spindle_daemon(daemon_args(device, image, sock, tracking),
                       iothreads=1, ready=[sock], workdir=workdir)
    argv = vu_argv(client, sock,
                   client_commands(device, marker, resume_timeout_s),
                   extra=["--completion", "interrupt", *client_opts])
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: marker.exists() or proc.poll() is not None,
                 "the client's marker (A in flight, B and C done)",
                 daemon=d)
        assert proc.poll() is None, proc.communicate()
        d.kill()
        d.start()               # same command line, stale socket replaced
        out, err = proc.communicate(timeout=CLIENT_BACKSTOP_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    try:
        doc = json.loads(out)
    except json.JSONDecodeError:
        pytest.fail(f"spindle-vu-client printed no JSON (status "
                    f"{proc.returncode}):\n{out}\n{err}")
    return proc.returncode, doc, d


def result_of(doc, command):
    return next(r for r in doc["results"] if r["command"] == command)


def check_premise(doc):
    """A was still in flight when the daemon died, B and C were done: the
    scenario tested what it means to (else DELAY_S is too short here)."""
    resume = result_of(doc, "resume")
    assert resume["outstanding"] == 1, resume
    assert resume.get("completed_before_resume", 0) == 0, (
        f"A completed before the kill: the delay of {DELAY_S} s was too "
        f"short on this machine\n{resume}")
    writes = [r for r in doc["results"] if r["command"].endswith("write")]
    assert [w.get("outstanding", False) for w in writes] == [True, False,
                                                            False]


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_resume_with_tracking_finishes_the_slow_write_once(
        spindle_daemon, client, workdir, device):
    rc, doc, d = crash_and_resume(spindle_daemon, client, workdir, device)
    assert rc == 0 and doc["ok"], f"{doc['error']}\n{d.stderr()}"
    check_premise(doc)
    resume = result_of(doc, "resume")
    assert resume["completed_after_resume"] == 1
    assert resume["replayed"] == 0
    assert [r["ok"] and r["by_resume"] for r in resume["requests"]] == [True]
    # QEMU's sequence: the region asked for once, handed to both daemons.
    inflight = resume["inflight"]
    assert (inflight["negotiated"], inflight["region"],
            inflight["get_inflight_fd"], inflight["set_inflight_fd"],
            inflight["resumes"]) == (True, True, 1, 2, 1), inflight
    assert inflight["mmap_size"] > 0
    # The restarted daemon says so: it took the region and redid A.
    log = d.stderr()
    assert "SET_INFLIGHT_FD" in log, log
    assert re.search(r"\b1 requests? resubmitted", log), log
    # All three ranges read back with their patterns.
    reads = [r for r in doc["results"] if r["command"].endswith("read")]
    assert [r["verified"] for r in reads] == ["pattern"] * 3
    assert d.stop() == 0, d.stderr()


@pytest.mark.parametrize("device", sorted(DEVICES))
@pytest.mark.parametrize("switched_off", ["export", "client"])
def test_resume_without_tracking_replays_or_loses(
        spindle_daemon, client, workdir, device, switched_off):
    tracking = "off" if switched_off == "export" else None
    client_opts = (["--disable-protocol-feature", "INFLIGHT_SHMFD"]
                   if switched_off == "client" else [])
    rc, doc, d = crash_and_resume(spindle_daemon, client, workdir, device,
                                  tracking, client_opts)
    assert rc == 1 and not doc["ok"], doc
    check_premise(doc)
    error = doc["error"]
    assert "replay" in error or "lost" in error, error
    resume = result_of(doc, "resume")
    assert not resume["ok"]
    # The new daemon starts at the used index, past A: C runs again.
    assert resume.get("replayed") == 1, resume
    assert "write at 131072+4096" in error or "WRITE at 131072+4096" in error
    assert d.alive()


def test_resume_reports_a_request_that_does_not_come_back(
        spindle_daemon, client, workdir):
    """A loss as resume reports it: the restarted daemon redoes A, but A
    takes DELAY_S again, longer than resume waits."""
    rc, doc, d = crash_and_resume(spindle_daemon, client, workdir, "blk",
                                  resume_timeout_s=DELAY_S - 1)
    assert rc == 1, doc
    check_premise(doc)
    assert doc["error"] == ("resume: lost: write at 0+4096 (queue 0) did not "
                            f"complete within {DELAY_S - 1}.0 s after the "
                            "resume"), doc["error"]
    assert result_of(doc, "resume")["lost"] == 1
    assert d.alive()


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_inflight_region_exchanged(spindle_daemon, client, workdir, device):
    """GET_INFLIGHT_FD and SET_INFLIGHT_FD in a plain session, as QEMU
    sends them; none when the front-end turns the feature down."""
    image = make_image(workdir / "disk.img", IMAGE_SIZE)
    sock = workdir / "vu.sock"
    d = spindle_daemon(daemon_args(device, image, sock, None), iothreads=1,
                       ready=[sock], workdir=workdir)
    extra = ["--device", device]
    info = vu_ok(client, sock, "info", extra=extra)[0]
    assert "INFLIGHT_SHMFD" in info["protocol_features_offered"]
    assert "INFLIGHT_SHMFD" in info["protocol_features"]
    assert info["inflight"]["negotiated"] and info["inflight"]["region"]
    assert info["inflight"]["get_inflight_fd"] == 1
    assert info["inflight"]["set_inflight_fd"] == 1
    log = d.stderr()
    assert "GET_INFLIGHT_FD" in log and "SET_INFLIGHT_FD" in log, log
    info = vu_ok(client, sock, "info", extra=[
        *extra, "--disable-protocol-feature", "INFLIGHT_SHMFD"])[0]
    assert "INFLIGHT_SHMFD" not in info["protocol_features"]
    assert info["inflight"] == {
        "negotiated": False, "region": False, "mmap_size": 0,
        "get_inflight_fd": 0, "set_inflight_fd": 0, "resumes": 0,
        "resume_retries": 0}
    assert d.alive()


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_no_wait_write_collected_by_later_commands(
        spindle_daemon, client, workdir, device):
    """Without a crash (and without a delay), a write left in flight
    completes while the next command waits on its queue, and its data is
    there."""
    write, read = DEVICES[device]
    image = make_image(workdir / "disk.img", IMAGE_SIZE)
    sock = workdir / "vu.sock"
    d = spindle_daemon(daemon_args(device, image, sock, None, delay_s=0),
                       iothreads=1, ready=[sock], workdir=workdir)
    # A's completion comes while the second write waits for its own.
    results = vu_ok(client, sock, write, 0, LEN, "--pattern", 21,
                    "--no-wait", write, 64 << 10, LEN, "--pattern", 22,
                    read, 0, LEN, "--verify", 21, read, 64 << 10, LEN,
                    "--verify", 22)
    assert results[0]["outstanding"]
    assert [r["verified"] for r in results[2:]] == ["pattern"] * 2
    assert d.stop() == 0, d.stderr()


def test_reconnect_refused_while_a_write_is_outstanding(
        spindle_daemon, client, workdir):
    image = make_image(workdir / "disk.img", IMAGE_SIZE)
    sock = workdir / "vu.sock"
    spindle_daemon(daemon_args("blk", image, sock, None), iothreads=1,
                   ready=[sock], workdir=workdir)
    rc, doc = vu(client, sock, "write", 0, LEN, "--no-wait", "reconnect")
    assert rc == 1 and "outstanding" in doc["error"], doc


@pytest.mark.parametrize("write", ["write", "scsi-write"])
def test_no_wait_write_is_one_request(client, write):
    proc = subprocess.run([str(client), "--socket", "/nonexistent", write,
                           "0", "2M", "--no-wait"], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2
    assert f"{write} --no-wait: LEN is at most 1048576 bytes" in proc.stderr

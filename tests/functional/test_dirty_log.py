"""Dirty page logging (live migration) through spindle-vu-client.

spindle-vu-client plays a migrating QEMU (docs/frontend.md, "Dirty page
logging"): `log-start` hands the back-end a log (SET_LOG_BASE) and turns
VHOST_F_LOG_ALL and each running ring's VHOST_VRING_F_LOG on, I/O runs,
and `log-dirty` reads and clears the log and compares it with every page
the front-end knows the device must have written since: the device-
writable buffers of each completed request up to its used length (read
data, status bytes, GET_ID serials, SCSI responses and data-in) and the
used ring entries.  A page written and not logged is "missing" and fails
the command: a migration would have lost what the device put there.

The tests run against Spindle (virtio-blk and virtio-scsi) and, for
virtio-blk, against qemu-storage-daemon (libvhost-user logs what it writes
too): the reference that shows the front-end's own side right.  A back-end
that does not offer LOG_SHMFD is skipped with that reason; never a pass.
"""

import shutil
import subprocess

import pytest

import daemons  # tests/e2e, on sys.path through conftest
from conftest import make_image, vu, vu_ok

IMAGE_SIZE = 16 << 20
PAGE = 4096
NO_LOG_REASON = ("{} does not offer VHOST_USER_PROTOCOL_F_LOG_SHMFD: it has "
                 "no dirty logging (the daemon side of live migration)")

# Each back-end and the devices it serves.
BACKENDS = [("spindle", "blk"), ("spindle", "scsi"), ("qsd", "blk")]


# --------------------------------------------------------------------------
# Daemons

def start_backend(spindle_daemon, workdir, kind, device, queues=1):
    """A daemon of kind (spindle or qsd) serving device on one image;
    returns it.  Skips when qemu-storage-daemon is not installed."""
    program = None
    if kind == "qsd":
        program = shutil.which("qemu-storage-daemon")
        if not program:
            pytest.skip("qemu-storage-daemon is not installed "
                        "(apt-get install qemu-system-common)")
    image = str(make_image(workdir / f"{kind}.img", IMAGE_SIZE))
    sock = str(workdir / f"{kind}.sock")
    if device == "scsi":
        export = daemons.ScsiExport(
            luns=[daemons.ScsiLun(image=image, writable=True,
                                  props={"serial": "DIRTYLOG"})],
            socket=sock, num_queues=queues)
    else:
        export = daemons.Export(image=image, socket=sock, num_queues=queues)
    return spindle_daemon(exports=[export], program=program, flavour=kind,
                          workdir=workdir)


def sock_of(d):
    return d.exports[0].socket


def info(client, d, *extra):
    r, = vu_ok(client, sock_of(d), "info", extra=extra)
    return r


def skip_unless_logging(client, d):
    """Skip (with the reason) unless d offers LOG_SHMFD."""
    if "LOG_SHMFD" not in info(client, d)["protocol_features_offered"]:
        pytest.skip(NO_LOG_REASON.format(d.flavour))


@pytest.fixture(params=BACKENDS, ids=lambda b: "-".join(b))
def backend(request, spindle_daemon, workdir):
    kind, device = request.param
    return start_backend(spindle_daemon, workdir, kind, device), device


def log_dirty_results(doc):
    return [r for r in doc["results"] if r["command"] == "log-dirty"]


def pages_of(ranges):
    return {p for first, count in ranges for p in range(first, first + count)}


def check_round(r, spindle):
    """One log-dirty round that passed: nothing missing, every expected
    page dirty.  Spindle logs no data page more than it must: what it
    logs beyond the expected pages are used ring pages, whose flags and
    avail_event it writes when it changes its notification state (the
    front-end cannot tell when)."""
    assert r["ok"] and r["missing"] == [] and r["missing_pages"] == 0, r
    assert pages_of(r["expected"]) <= pages_of(r["dirty"]), r
    if spindle:
        assert pages_of(r["extra"]) <= pages_of(r["used_rings"]), r


# --------------------------------------------------------------------------
# What is negotiated

@pytest.mark.parametrize("kind,device", BACKENDS, ids="-".join)
def test_log_features_not_asked_by_default(spindle_daemon, workdir, client,
                                           kind, device):
    """Without a log-* command the client asks for neither LOG_SHMFD nor
    LOG_ALL, as QEMU does not while it does not migrate; a back-end that
    offers one offers both."""
    d = start_backend(spindle_daemon, workdir, kind, device)
    r = info(client, d)
    assert "LOG_SHMFD" not in r["protocol_features"], r
    assert "LOG_ALL" not in r["features"], r
    assert r["dirty_log"]["negotiated"] is False
    assert r["dirty_log"]["logging"] is False
    offered = ("LOG_SHMFD" in r["protocol_features_offered"],
               "LOG_ALL" in r["features_offered"])
    assert offered in ((True, True), (False, False)), offered


def test_log_start_needs_the_protocol_feature(backend, client):
    """log-start without LOG_SHMFD negotiated fails before anything is
    sent, naming the feature."""
    d, _ = backend
    rc, doc = vu(client, sock_of(d), "log-start",
                 extra=["--disable-protocol-feature", "LOG_SHMFD"])
    assert rc == 1 and not doc["ok"], doc
    assert ("log-start: the LOG_SHMFD protocol feature was not negotiated"
            in doc["error"]), doc["error"]
    assert d.alive()


def test_log_start_and_stop_switch_logging(backend, client):
    """With a log-* command LOG_SHMFD is negotiated; LOG_ALL is on only
    between log-start and log-stop, and the log covers the guest
    memory."""
    d, _ = backend
    skip_unless_logging(client, d)
    before, start, during, stop, after = vu_ok(
        client, sock_of(d), "info", "log-start", "info", "log-stop", "info")
    assert "LOG_SHMFD" in before["protocol_features"]
    assert "LOG_ALL" in before["features_offered"]
    assert "LOG_ALL" not in before["features"]
    states = [r["dirty_log"] for r in (before, start, during, stop, after)]
    assert [s["logging"] for s in states] == [False, True, True, False,
                                              False]
    log = start["dirty_log"]
    assert log["set_log_base"] == 1
    assert log["log_size"] == log["log_size_needed"] == log["pages"] // 8
    if d.flavour == "spindle":
        assert log["set_log_base_reply"] == 0, log


# --------------------------------------------------------------------------
# What is logged

BLK_IO = ["write", 0, "64k", "--pattern", 3,
          "read", 0, "64k", "--verify", 3,
          "read", "1M", "12k", "--expect-zeroes",
          "write-zeroes", "2M", "8k",
          "get-id", "flush"]
SCSI_IO = ["scsi-write", 0, "64k", "--pattern", 3,
           "scsi-read", 0, "64k", "--verify", 3,
           "scsi-read", "1M", "12k", "--expect-zeroes",
           "scsi-inquiry", "scsi-inquiry", "--evpd", 0x80,
           "scsi-read-capacity", "scsi-report-luns", "scsi-tur",
           "scsi-sync"]
IO = {"blk": BLK_IO, "scsi": SCSI_IO}


@pytest.mark.parametrize("layout", [[], ["--indirect"],
                                    ["--segments", "3"]],
                         ids=["direct", "indirect", "segments"])
def test_every_page_the_device_writes_is_logged(backend, client, layout):
    """Reads, writes, flush, GET_ID (SCSI: reads, INQUIRY, READ CAPACITY,
    REPORT LUNS, ...) under logging: no page the device wrote is missing
    from the log.  The expected pages include the read buffers, so a
    back-end that does not log reads' data (or status bytes, SCSI
    responses, used ring entries) fails here."""
    d, device = backend
    skip_unless_logging(client, d)
    rc, doc = vu(client, sock_of(d), "log-start", "log-dirty", *IO[device],
                 "log-dirty", extra=layout)
    assert rc == 0 and doc["ok"], doc["error"]
    # The first round takes what logging marks when it starts (the used
    # rings), so that the second shows what the I/O marked.
    start, r = log_dirty_results(doc)
    check_round(start, d.flavour == "spindle")
    check_round(r, d.flavour == "spindle")
    # 16 pages of read data at least (64k, 4k-aligned buffers), plus
    # status bytes and used ring entries.
    assert r["expected_pages"] >= 64 * 1024 // PAGE + 1, r
    assert d.stop() == 0, d.stderr()


def test_logging_off_after_log_stop(backend, client):
    """After log-stop the device logs nothing: I/O marks no page."""
    d, device = backend
    skip_unless_logging(client, d)
    rc, doc = vu(client, sock_of(d), "log-start", *IO[device][:10],
                 "log-stop", "log-dirty", *IO[device], "log-dirty")
    assert rc == 0 and doc["ok"], doc["error"]
    during, after = log_dirty_results(doc)
    check_round(during, d.flavour == "spindle")
    assert during["dirty_pages"] > 0
    assert (after["dirty"], after["expected"]) == ([], []), after


def test_log_dirty_reads_and_clears(backend, client):
    """A second round without I/O finds the log clean."""
    d, device = backend
    skip_unless_logging(client, d)
    rc, doc = vu(client, sock_of(d), "log-start", *IO[device][:5],
                 "log-dirty", "log-dirty", *IO[device][5:10], "log-dirty")
    assert rc == 0 and doc["ok"], doc["error"]
    first, idle, again = log_dirty_results(doc)
    for r in (first, again):
        check_round(r, d.flavour == "spindle")
        assert r["dirty_pages"] > 0
    assert idle["dirty"] == [] and idle["expected"] == [], idle


@pytest.mark.parametrize("kind", ["spindle", "qsd"])
def test_parallel_queues_under_logging(spindle_daemon, workdir, client,
                                       kind):
    """verify-run on two queues in two threads: every completion of both
    counts (the expected pages are set from both threads)."""
    d = start_backend(spindle_daemon, workdir, kind, "blk", queues=2)
    skip_unless_logging(client, d)
    rc, doc = vu(client, sock_of(d), "log-start", "verify-run", "--size",
                 "4M", "--count", 256, "--queues", 2, "--iodepth", 4,
                 "log-dirty")
    assert rc == 0 and doc["ok"], doc["error"]
    r, = log_dirty_results(doc)
    check_round(r, kind == "spindle")
    assert r["expected_pages"] > 0


def test_write_left_in_flight_counts_when_collected(backend, client):
    """A write left in flight across a round: whether the device logged
    it before or after that round, its status page is found when its
    completion is collected (by the next command on its queue)."""
    d, device = backend
    skip_unless_logging(client, d)
    write, read = IO[device][0], IO[device][5]
    rc, doc = vu(client, sock_of(d), "log-start", write, "4M", "4k",
                 "--no-wait", "log-dirty", read, 0, "4k", "log-dirty")
    assert rc == 0 and doc["ok"], doc["error"]
    for r in log_dirty_results(doc):
        assert r["missing"] == [], r


# --------------------------------------------------------------------------
# A log the daemon must refuse

@pytest.mark.parametrize("device", ["blk", "scsi"])
def test_too_small_log_refused(spindle_daemon, workdir, client, device):
    """A log that does not cover the guest memory: Spindle refuses it
    (it drops the connection, saying why) and goes on serving."""
    d = start_backend(spindle_daemon, workdir, "spindle", device)
    skip_unless_logging(client, d)
    needed = info(client, d)["dirty_log"]["log_size_needed"]
    rc, doc = vu(client, sock_of(d), "log-start", "--size", needed // 2)
    assert rc == 1 and not doc["ok"], doc
    assert "log-start: the back-end did not take a" in doc["error"], doc
    log = d.stderr()
    assert "SET_LOG_BASE" in log and str(needed // 2) in log, log
    assert str(needed) in log, log
    assert d.alive()
    vu_ok(client, sock_of(d), *IO[device][:10])
    assert d.stop() == 0, d.stderr()


# --------------------------------------------------------------------------
# The commands' own errors

@pytest.mark.parametrize("size", ["0", "12"])
def test_log_start_size_must_be_whole_words(client, workdir, size):
    """--size is checked before anything is sent (exit status 2)."""
    proc = subprocess.run([str(client), "--socket", str(workdir / "none"),
                           "log-start", "--size", size],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc
    assert proc.stderr == ("spindle-vu-client: log-start --size must be a "
                           f"non-zero multiple of 8, got {size}\n")


def test_log_dirty_needs_log_start(backend, client):
    d, _ = backend
    skip_unless_logging(client, d)
    rc, doc = vu(client, sock_of(d), "log-dirty")
    assert rc == 1, doc
    assert doc["error"] == ("log-dirty: no dirty log to read: run log-start "
                            "first"), doc["error"]
    rc, doc = vu(client, sock_of(d), "log-stop")
    assert rc == 1 and doc["error"] == "log-stop: dirty logging is not on"

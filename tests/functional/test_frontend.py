"""Functional tests of vhost-user-blk back-ends through spindle-vu-client.

The guest-less front-end (tools/frontend, docs/frontend.md) drives a real
back-end process over its real UNIX socket: feature negotiation, the device
config, I/O with data checked byte for byte, flush, discard, write-zeroes,
GET_ID, several queues in parallel threads, poll and interrupt completion,
disconnect and reconnect, the image file after the daemon exits, read-only
exports, and malformed messages and rings (the daemon must survive and a
second export in it must keep serving).

Every test that makes sense for any vhost-user-blk back-end runs against
both Spindle (build/daemon/spindle) and Debian's qemu-storage-daemon, with
the same command line, so that the two can be seen to behave alike where
they should (data, sizes, statuses, serial semantics); features may differ.
A back-end that is not installed or built is skipped with the reason.
"""

import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

import daemons  # tests/e2e, on sys.path through conftest
from conftest import CLIENT, make_image
IMAGE_SIZE = 64 << 20
NUM_QUEUES = 4
START_TIMEOUT_S = 10
STOP_TIMEOUT_S = 15
CLIENT_TIMEOUT_S = 120
MASK64 = (1 << 64) - 1

# Malformed inputs spindle-vu-client can send (`malformed KIND`).
MESSAGE_KINDS = ("unknown-request", "short-payload", "oversized-payload",
                 "bad-version", "bad-queue-index", "bad-vring-addr",
                 "mem-table-no-fd", "mem-table-too-many", "kick-no-fd")
RING_KINDS = ("head-out-of-range", "desc-loop", "addr-out-of-range",
              "addr-overflow", "next-out-of-range", "indirect-bad-len",
              "indirect-nested", "indirect-loop", "avail-idx-jump")

# Known crashes of the reference back-end: skipped for it, with the reason.
QSD_CRASHES = {
    "bad-queue-index": "qemu-storage-daemon 7.2 with num-queues=4 "
                       "segfaults on SET_VRING_NUM for queue 255 "
                       "(libvhost-user does not check the index)",
    "mem-table-too-many": "qemu-storage-daemon 7.2 segfaults on a "
                          "SET_MEM_TABLE that claims 1000 regions",
}


# --------------------------------------------------------------------------
# The data pattern of `write --pattern SEED` (docs/frontend.md)

def pattern_word(seed, index):
    z = (seed + 0x9E3779B97F4A7C15 * (index + 1)) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def pattern(seed, offset, length):
    """The bytes `write OFFSET LENGTH --pattern SEED` puts on the disk."""
    assert offset % 8 == 0 and length % 8 == 0
    return b"".join(struct.pack("<Q", pattern_word(seed, (offset + i) // 8))
                    for i in range(0, length, 8))


def test_pattern_matches_documented_values():
    # Pinned values (also in docs/frontend.md): the C and Python sides must
    # agree, and a changed formula must not pass unnoticed.
    assert pattern_word(1, 0) == 0x910A2DEC89025CC1
    assert pattern(7, 0, 8) == struct.pack("<Q", pattern_word(7, 0))


# --------------------------------------------------------------------------
# Daemons

def qsd_program():
    return shutil.which("qemu-storage-daemon")


@pytest.fixture(params=["spindle", "qsd"])
def backend_kind(request):
    return request.param


@pytest.fixture
def make_daemon(spindle_daemon, workdir):
    """Factory: make_daemon(kind, exports=[...]) -> a started daemon
    (daemons.Daemon; kind is its flavour), serving each export in IOThread
    iot0.

    Each export is a dict: image, socket, writable (True), queues (4),
    serial (absent).  Images are created (sparse, 64 MiB) if missing.
    Skips when qemu-storage-daemon is asked for and not installed.
    """
    def make(kind, exports=None):
        program = None
        if kind == "qsd":
            program = qsd_program()
            if not program:
                pytest.skip("qemu-storage-daemon is not installed "
                            "(apt-get install qemu-system-common)")
        specs = []
        for i, e in enumerate(exports or [{}]):
            image = e.get("image", str(workdir / f"{kind}-{i}.img"))
            socket = e.get("socket", str(workdir / f"{kind}-{i}.sock"))
            if not Path(image).exists():
                make_image(image, IMAGE_SIZE)
            Path(socket).unlink(missing_ok=True)
            specs.append(daemons.Export(
                image=image, socket=socket, writable=e.get("writable", True),
                num_queues=e.get("queues", NUM_QUEUES), serial=e.get("serial")))
        return spindle_daemon(exports=specs, program=program, flavour=kind,
                              workdir=workdir)

    return make


@pytest.fixture
def daemon(make_daemon, backend_kind):
    return make_daemon(backend_kind)


class ClientResult:
    def __init__(self, proc):
        self.proc = proc
        self.returncode = proc.returncode
        self.stderr = proc.stderr
        try:
            self.doc = json.loads(proc.stdout)
        except json.JSONDecodeError:
            self.doc = None

    @property
    def results(self):
        return self.doc["results"] if self.doc else []

    def result(self, command, nth=0):
        found = [r for r in self.results if r["command"] == command]
        return found[nth]

    def describe(self):
        return (f"exit {self.returncode}\nstdout: {self.proc.stdout[-3000:]}"
                f"\nstderr: {self.stderr[-3000:]}")


def run_client(client, socket, *args, json_out=True, check=True,
               timeout=CLIENT_TIMEOUT_S):
    argv = [str(client), "--socket", str(socket), "--connect-timeout", "5",
            "--timeout", "30"]
    if json_out:
        argv.append("--json")
    argv += [str(a) for a in args]
    proc = subprocess.run(argv, capture_output=True, text=True,
                          timeout=timeout, check=False)
    res = ClientResult(proc)
    if check:
        assert res.returncode == 0, res.describe()
        assert res.doc is not None and res.doc["ok"], res.describe()
    return res


def sock(d, i=0):
    return d.exports[i].socket


# --------------------------------------------------------------------------
# Without a back-end

def test_help_lists_commands(client):
    out = subprocess.run([str(client), "--help"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    for word in ("info", "write OFFSET LEN", "verify-run", "reconnect",
                 "malformed KIND", "desc-loop", "--completion"):
        assert word in out


@pytest.mark.parametrize("args, message", [
    ((), "no command given"),
    (("frobnicate",), "unknown command 'frobnicate'"),
    (("write", "0"), "write: missing argument"),
    (("write", "0", "100"), "multiples of 512"),
    (("read", "0", "4k", "--bogus"), "unknown option '--bogus'"),
    (("malformed", "nonsense"), "unknown kind 'nonsense'"),
    (("verify-run", "--size", "1M"), "needs --size BYTES and --count N"),
    (("--completion", "sometimes", "info"), "--completion"),
    (("--disable-feature", "NOPE", "info"), "unknown feature 'NOPE'"),
])
def test_bad_command_line_exits_2(client, args, message):
    proc = subprocess.run([str(client), "--socket", "/nonexistent", *args],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr


def test_unreachable_socket_is_a_clear_error(client, workdir):
    res = run_client(client, workdir / "nobody.sock", "info", check=False)
    assert res.returncode == 1
    assert "cannot connect to vhost-user socket" in res.doc["error"]
    assert res.results == []


# --------------------------------------------------------------------------
# Negotiation and configuration

def test_info_negotiates_and_reads_config(client, daemon):
    info = run_client(client, sock(daemon), "info").result("info")
    features = set(info["features"])
    assert {"VERSION_1", "BLK_FLUSH", "BLK_MQ"} <= features
    assert set(info["features"]) <= set(info["features_offered"])
    assert "CONFIG" in info["protocol_features"]
    assert info["capacity_bytes"] == IMAGE_SIZE
    assert info["config"]["blk_size"] == 512
    assert info["config"]["num_queues"] == NUM_QUEUES
    assert info["queue_num_max"] >= NUM_QUEUES
    assert info["read_only"] is False
    assert info["serial_status"] == "OK"
    assert len(info["serial"].encode()) <= 20


def test_too_many_queues_is_refused(client, daemon):
    res = run_client(client, sock(daemon), "--queues", NUM_QUEUES * 2, "info",
                     check=False)
    assert res.returncode == 1
    assert f"{NUM_QUEUES * 2} queues asked for" in res.doc["error"]


def test_missing_required_feature_is_refused(client, daemon):
    # A writable export does not offer VIRTIO_BLK_F_RO.
    res = run_client(client, sock(daemon), "--require-feature", "BLK_RO",
                     "info", check=False)
    assert res.returncode == 1
    assert "lacks required feature(s) BLK_RO" in res.doc["error"]


def test_serial_is_stable_across_sessions(client, daemon):
    first = run_client(client, sock(daemon), "get-id").result("get-id")
    second = run_client(client, sock(daemon), "get-id").result("get-id")
    assert first["serial_hex"] == second["serial_hex"]
    raw = bytes.fromhex(first["serial_hex"])
    # NUL-terminated unless all 20 bytes are used; printable before it.
    text = raw.split(b"\0", 1)[0]
    assert text.decode() == first["serial"]
    assert all(32 <= b < 127 for b in text)


def test_serial_option(client, make_daemon):
    d = make_daemon("spindle", [{"serial": "spindle-disk-7"}])
    res = run_client(client, sock(d), "get-id")
    assert res.result("get-id")["serial"] == "spindle-disk-7"


# --------------------------------------------------------------------------
# I/O

@pytest.mark.parametrize("completion", ["poll", "interrupt"])
@pytest.mark.parametrize("layout", [(), ("--indirect",),
                                    ("--segments", "3")],
                         ids=["direct", "indirect", "3-segments"])
def test_write_read_verify(client, daemon, completion, layout):
    res = run_client(client, sock(daemon), "--completion", completion,
                     *layout,
                     "write", "0", "4k", "--pattern", "11",
                     "write", "1M", "192k", "--pattern", "12",
                     "write", "63M", "1M", "--pattern", "13",
                     "read", "0", "4k", "--verify", "11",
                     "read", "1M", "192k", "--verify", "12",
                     "read", "63M", "1M", "--verify", "13",
                     "read", "1M", "512", "--verify", "12",
                     "stats")
    stats = res.result("stats")["queues"][0]
    assert stats["requests"] == stats["completed"]
    assert stats["kicks"] + stats["kicks_avoided"] <= stats["requests"]
    if completion == "interrupt":
        assert stats["interrupts"] > 0


def test_wrong_seed_is_reported_with_its_location(client, daemon):
    run_client(client, sock(daemon), "write", "8k", "4k", "--pattern", "5")
    res = run_client(client, sock(daemon), "read", "8k", "4k", "--verify",
                     "6", check=False)
    assert res.returncode == 1
    assert "data mismatch at disk offset 8192" in res.doc["error"]
    assert res.result("read")["mismatch"]["offset"] == 8192


def test_flush(client, daemon):
    res = run_client(client, sock(daemon), "write", "0", "64k", "flush")
    assert res.result("flush")["status"] == "OK"


def test_write_zeroes_and_discard(client, daemon):
    run_client(client, sock(daemon),
               "write", "0", "1M", "--pattern", "21",
               "write-zeroes", "64k", "64k",
               "write-zeroes", "256k", "128k", "--unmap",
               "read", "64k", "64k", "--expect-zeroes",
               "read", "256k", "128k", "--expect-zeroes",
               "read", "0", "64k", "--verify", "21",
               "read", "128k", "128k", "--verify", "21",
               "read", "384k", "640k", "--verify", "21",
               "discard", "512k", "64k",
               # After a discard the contents are undefined; the
               # neighbours must be untouched.
               "read", "448k", "64k", "--verify", "21",
               "read", "576k", "64k", "--verify", "21")


def test_io_beyond_the_end_fails_with_ioerr(client, daemon):
    res = run_client(client, sock(daemon), "read", "64M", "4k", check=False)
    assert res.returncode == 1
    assert res.result("read")["status"] == "IOERR"


@pytest.mark.parametrize("completion", ["poll", "interrupt"])
def test_queues_in_parallel_threads(client, daemon, completion):
    res = run_client(client, sock(daemon), "--completion", completion,
                     "verify-run", "--size", "8M", "--count", "1500",
                     "--queues", NUM_QUEUES, "--iodepth", "16")
    run = res.result("verify-run")
    assert run["queues"] == NUM_QUEUES
    assert run["writes"] == 1500 * NUM_QUEUES
    assert run["reads"] > 0
    assert all(q["writes"] == 1500 for q in run["per_queue"])
    assert run["kicks"] + run["kicks_avoided"] <= run["writes"] + run["reads"]
    if completion == "poll":
        # We asked for no interrupts; a device may send a few.
        assert run["interrupts"] < (run["writes"] + run["reads"]) / 10
    else:
        assert run["interrupts"] > 0


def test_without_event_idx_and_reply_ack(client, daemon):
    run_client(client, sock(daemon),
               "--disable-feature", "RING_EVENT_IDX,RING_INDIRECT_DESC",
               "--disable-protocol-feature", "REPLY_ACK",
               "verify-run", "--size", "4M", "--count", "500", "--queues", "2")
    info = run_client(client, sock(daemon),
                      "--disable-feature", "RING_EVENT_IDX",
                      "info").result("info")
    assert "RING_EVENT_IDX" not in info["features"]


def test_memory_shared_with_add_mem_reg(client, daemon):
    info = run_client(client, sock(daemon), "info").result("info")
    if "CONFIGURE_MEM_SLOTS" not in info["protocol_features"]:
        pytest.skip(f"{daemon.flavour} does not offer CONFIGURE_MEM_SLOTS")
    assert info["max_mem_slots"] >= 8
    run_client(client, sock(daemon), "--mem-slots",
               "write", "0", "128k", "--pattern", "31",
               "read", "0", "128k", "--verify", "31")


# --------------------------------------------------------------------------
# Sessions and persistence

def test_reconnect_keeps_data(client, daemon):
    res = run_client(client, sock(daemon), "--queues", "2",
                     "write", "0", "256k", "--pattern", "41",
                     "write", "1M", "64k", "--pattern", "42", "--queue", "1",
                     "write-zeroes", "64k", "64k",
                     "stop",
                     "reconnect",
                     "reconnect",
                     "read", "128k", "128k", "--verify", "41", "--queue", "1")
    rec = res.result("reconnect")
    assert rec["verified_bytes"] == 256 * 1024 + 64 * 1024
    assert [q["queue"] for q in res.result("stop")["queues"]] == [0, 1]
    # A new client process (a new front-end) sees the same data.
    run_client(client, sock(daemon), "read", "0", "64k", "--verify", "41",
               "read", "64k", "64k", "--expect-zeroes",
               "read", "1M", "64k", "--verify", "42")


def test_data_is_in_the_image_after_exit(client, daemon):
    run_client(client, sock(daemon),
               "write", "0", "64k", "--pattern", "51",
               "write", "10M", "40k", "--pattern", "52", "--queue", "3",
               "write", "20M", "8k", "--pattern", "53",
               "write-zeroes", "20M", "4k",
               "flush")
    status = daemon.stop()
    assert status == 0, f"{daemon.flavour} exit status {status}: {daemon.stderr()}"
    with open(daemon.exports[0].image, "rb") as f:
        def at(offset, length):
            f.seek(offset)
            return f.read(length)
        assert at(0, 64 << 10) == pattern(51, 0, 64 << 10)
        assert at(10 << 20, 40 << 10) == pattern(52, 10 << 20, 40 << 10)
        assert at(20 << 20, 4 << 10) == bytes(4 << 10)
        assert at((20 << 20) + 4096, 4096) == pattern(53, (20 << 20) + 4096,
                                                       4096)


def test_read_only_export_refuses_writes(client, make_daemon, backend_kind,
                                         workdir):
    image = workdir / "ro.img"
    with open(image, "wb") as f:
        f.truncate(IMAGE_SIZE)
        f.seek(4096)
        f.write(pattern(61, 4096, 4096))
    d = make_daemon(backend_kind, [{"image": str(image), "writable": False}])
    info = run_client(client, sock(d), "info").result("info")
    assert info["read_only"] is True
    run_client(client, sock(d), "read", "4k", "4k", "--verify", "61")
    res = run_client(client, sock(d), "write", "4k", "4k", "--pattern", "62",
                     check=False)
    assert res.returncode == 1
    assert res.result("write")["status"] == "IOERR"
    assert "IOERR" in res.doc["error"]
    res = run_client(client, sock(d), "write-zeroes", "0", "4k", check=False)
    assert res.returncode == 1
    assert res.result("write-zeroes")["status"] in ("IOERR", "UNSUPP")
    d.stop()
    assert image.read_bytes()[4096:8192] == pattern(61, 4096, 4096)


# --------------------------------------------------------------------------
# Malformed messages and rings

def two_exports(make_daemon, kind):
    return make_daemon(kind, [{}, {}])


def check_still_serving(client, d, kind):
    assert d.alive(), f"{d.flavour} died after {kind}: {d.stderr()}"
    # The other export is untouched ...
    run_client(client, sock(d, 1), "--queues", "2",
               "write", "0", "64k", "--pattern", "71", "--queue", "1",
               "read", "0", "64k", "--verify", "71")
    # ... and the attacked one takes a new session.
    run_client(client, sock(d, 0), "write", "0", "4k", "--pattern", "72",
               "read", "0", "4k", "--verify", "72")
    assert d.alive(), f"{d.flavour} died after {kind}: {d.stderr()}"


@pytest.mark.parametrize("kind", MESSAGE_KINDS + RING_KINDS)
def test_malformed_input_is_survived(client, make_daemon, backend_kind,
                                     kind):
    if backend_kind == "qsd" and kind in QSD_CRASHES:
        pytest.skip(QSD_CRASHES[kind])
    d = two_exports(make_daemon, backend_kind)
    res = run_client(client, sock(d), "malformed", kind)
    outcome = res.result("malformed")
    if backend_kind == "spindle":
        # An error reply or a disconnect, never an acknowledgement; a bad
        # ring stops (at most) its queue or completes with an error.
        if kind in MESSAGE_KINDS:
            assert outcome["reaction"] in ("error-reply", "closed"), outcome
        elif outcome["reaction"] == "completed":
            assert outcome["status"] != "OK", outcome
        else:
            assert outcome["reaction"] in ("no-completion", "closed"), outcome
    check_still_serving(client, d, kind)


@pytest.mark.parametrize("kind", ["desc-loop", "addr-out-of-range",
                                  "head-out-of-range"])
def test_ring_fault_breaks_only_its_queue(client, make_daemon, kind):
    d = make_daemon("spindle")
    res = run_client(client, sock(d), "--queues", "2",
                     "malformed", kind, "--queue", "0",
                     "write", "0", "4k", "--pattern", "81", "--queue", "1",
                     "read", "0", "4k", "--verify", "81", "--queue", "1")
    assert res.result("malformed")["alive"] is True


# --------------------------------------------------------------------------
# Side by side

CROSS_SCRIPT = (
    "write", "0", "128k", "--pattern", "91",
    "write", "8M", "64k", "--pattern", "92", "--queue", "2",
    "write-zeroes", "32k", "32k",
    "flush",
    "read", "0", "128k",
    "read", "8M", "64k", "--queue", "3",
    "read", "32M", "4k",
    "read", "64M", "4k",
)


def test_spindle_and_qsd_agree(client, make_daemon):
    """The same script against both back-ends: same data, sizes, statuses."""
    if not qsd_program():
        pytest.skip("qemu-storage-daemon is not installed "
                    "(apt-get install qemu-system-common)")
    outcomes = {}
    for kind in ("spindle", "qsd"):
        d = make_daemon(kind)
        res = run_client(client, sock(d), "info", *CROSS_SCRIPT, check=False)
        assert res.doc is not None, res.describe()
        outcomes[kind] = res
        d.stop()
    spindle, qsd = outcomes["spindle"], outcomes["qsd"]
    # The last read is past the end: both must refuse it the same way.
    assert spindle.returncode == qsd.returncode == 1
    for key in ("capacity_bytes", "read_only"):
        assert spindle.result("info")[key] == qsd.result("info")[key], key
    for key in ("blk_size", "num_queues", "capacity_sectors"):
        assert (spindle.result("info")["config"][key] ==
                qsd.result("info")["config"][key]), key
    assert ([r["command"] for r in spindle.results] ==
            [r["command"] for r in qsd.results])
    for a, b in zip(spindle.results, qsd.results):
        assert a.get("status") == b.get("status"), (a, b)
        assert a.get("sha256") == b.get("sha256"), (a, b)
    assert spindle.results[-1]["status"] == "IOERR"

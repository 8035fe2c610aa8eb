"""Functional tests of the vhost-user-scsi export through spindle-vu-client.

A real spindle serves a virtio-scsi device with two LUNs over file images
in a temporary directory: LUN 0 writable, with serial, WWN, vendor and
product set, on a node with discard=unmap; LUN 1 read-only with defaults
and 4096-byte blocks.  spindle-vu-client (tools/vu-client, docs/frontend.md)
plays the guest: INQUIRY and its VPD pages, REPORT LUNS, READ CAPACITY,
READ/WRITE with data checked byte for byte and in the image file after the
daemon stops, UNMAP, task management and unit attentions, several request
queues in parallel threads, malformed requests (the daemon must survive
and a second export in it must keep serving), and the command-line errors
of the export.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

import daemons  # tests/e2e, on sys.path through conftest
from conftest import (check_one_line_error, make_image, run_spindle,
                      start_on_listening_socket, vu, vu_ok)
from test_frontend import pattern

IMAGE_SIZE = 64 << 20
RO_IMAGE_SIZE = 16 << 20
MiB = 1 << 20

SERIAL = "SPNDL-0042"
WWN = "0x5000c500a1b2c3d4"
VENDOR = "ACME"
PRODUCT = "Widget 9000"

# SAM / SPC numbers the tests look for.
ASC_LU_NOT_SUPPORTED = 0x25
ASC_WRITE_PROTECTED = 0x27
ASC_POWER_ON_RESET = 0x29
ASC_LBA_OUT_OF_RANGE = 0x21
ASC_INVALID_OPCODE = 0x20


# --------------------------------------------------------------------------
# Fixtures and helpers

def revision_of(spindle):
    """The INQUIRY revision Spindle reports: the version's first two parts."""
    out = run_spindle(spindle, ["--version"]).stdout.split()[1]
    return ".".join(out.split(".")[:2])[:4]


def scsi_exports(work, luns_extra=None, num_queues=1, iothread="iot0"):
    """The standard two-LUN export (and its images) in work."""
    lun0 = daemons.ScsiLun(
        image=str(make_image(work / "lun0.img", IMAGE_SIZE)),
        writable=True, node_opts=",discard=unmap",
        props={"serial": SERIAL, "wwn": WWN, "vendor": VENDOR,
               "product": PRODUCT})
    lun1 = daemons.ScsiLun(
        image=str(make_image(work / "lun1.img", RO_IMAGE_SIZE, b"\x5a")),
        node_opts=",read-only=on", props={"logical-block-size": 4096})
    return daemons.ScsiExport(luns=[lun0, lun1] + (luns_extra or []),
                              socket=str(work / "scsi.sock"),
                              num_queues=num_queues, iothread=iothread)


@pytest.fixture
def scsi_daemon(spindle_daemon, workdir):
    return spindle_daemon(exports=[scsi_exports(workdir, num_queues=2)],
                          workdir=workdir)


def sock_of(d):
    return d.exports[0].socket


# --------------------------------------------------------------------------
# Identification: INQUIRY, VPD, REPORT LUNS, READ CAPACITY

def test_inquiry_standard_data(spindle, client, scsi_daemon):
    r0, r1 = vu_ok(client, sock_of(scsi_daemon), "scsi-inquiry",
                   "scsi-inquiry", "--lun", 1)
    rev = revision_of(spindle)
    assert (r0["vendor"], r0["product"], r0["revision"]) == \
        (VENDOR, PRODUCT, rev)
    assert (r1["vendor"], r1["product"], r1["revision"]) == \
        ("SPINDLE", "SPINDLE DISK", rev)
    for r in (r0, r1):
        assert r["status"] == "GOOD" and r["response"] == "OK"
        assert r["peripheral_qualifier"] == 0
        assert r["device_type"] == 0            # direct access block device
        assert r["removable"] is False
        assert r["length"] >= 36


def test_inquiry_vpd_serial_and_wwn(client, scsi_daemon):
    pages, serial, ident, ident1 = vu_ok(
        client, sock_of(scsi_daemon), "scsi-inquiry", "--evpd", 0,
        "scsi-inquiry", "--evpd", 0x80, "scsi-inquiry", "--evpd", 0x83,
        "scsi-inquiry", "--evpd", 0x83, "--lun", 1)
    assert {0x00, 0x80, 0x83, 0xb0}.issubset(pages["pages"])
    assert serial["page"] == 0x80 and serial["serial"] == SERIAL
    assert ident["page"] == 0x83
    assert ident["wwn"] == WWN
    naa = [d for d in ident["designators"] if d["type"] == 3]
    assert len(naa) == 1 and naa[0]["hex"] == WWN[2:]
    assert naa[0]["code_set"] == 1 and naa[0]["association"] == 0
    # LUN 1 has no WWN: an identifier all the same, but no NAA one, and
    # none that LUN 0 has.
    assert ident1["designators"], ident1
    assert "wwn" not in ident1
    assert all(d["hex"] != naa[0]["hex"] for d in ident1["designators"])


def test_missing_lun_inquiry_qualifier_3(client, scsi_daemon):
    sock = sock_of(scsi_daemon)
    for lun in (2, 300):
        r, = vu_ok(client, sock, "scsi-inquiry", "--lun", lun)
        assert r["peripheral_qualifier"] == 3, r
        assert r["device_type"] == 0x1f, r
    # Other commands to it: LOGICAL UNIT NOT SUPPORTED.
    r, = vu_ok(client, sock, "scsi-tur", "--lun", 2, "--expect-sense",
               "ILLEGAL_REQUEST")
    assert r["asc"] == ASC_LU_NOT_SUPPORTED


def test_report_luns_lists_exactly_the_luns(client, scsi_daemon):
    for lun in (0, 1):
        r, = vu_ok(client, sock_of(scsi_daemon), "scsi-report-luns", "--lun",
                   lun)
        assert r["luns"] == [0, 1], r
        assert r["list_length"] == 16


def test_read_capacity(client, scsi_daemon):
    r16, r10, ro16 = vu_ok(client, sock_of(scsi_daemon),
                           "scsi-read-capacity", "scsi-read-capacity",
                           "--cdb", 10, "scsi-read-capacity", "--lun", 1)
    for r in (r16, r10):
        assert r["block_size"] == 512
        assert r["blocks"] == IMAGE_SIZE // 512
        assert r["bytes"] == IMAGE_SIZE
    assert r16["lbpme"] is True         # discard=unmap: UNMAP frees space
    assert ro16["block_size"] == 4096
    assert ro16["blocks"] == RO_IMAGE_SIZE // 4096


# --------------------------------------------------------------------------
# Data

def test_write_read_verify_and_image_file(client, spindle_daemon, workdir):
    d = spindle_daemon(exports=[scsi_exports(workdir)], workdir=workdir)
    with d:
        sock = sock_of(d)
        res = vu_ok(client, sock,
                    "scsi-write", 0, "256k", "--pattern", 11,
                    "scsi-write", "3M", "1536k", "--pattern", 12, "--fua",
                    "scsi-write", "10M", "64k", "--pattern", 13, "--cdb", 10,
                    "scsi-read", 0, "256k", "--verify", 11,
                    "scsi-read", "3M", "1536k", "--verify", 12, "--cdb", 10,
                    "scsi-read", "10M", "64k", "--verify", 13,
                    "scsi-read", "20M", "64k", "--expect-zeroes",
                    "scsi-sync")
        assert [r["verified"] for r in res[3:7]] == \
            ["pattern"] * 3 + ["zeroes"]
        # A read that is not told what to expect must not pass by luck.
        rc, doc = vu(client, sock, "scsi-read", "3M", "4k", "--verify", 99)
        assert rc == 1 and "mismatch" in doc["results"][-1]
        assert doc["results"][-1]["mismatch"]["offset"] == 3 * MiB
    assert d.returncode == 0, d.stderr()
    data = Path(workdir / "lun0.img").read_bytes()
    assert data[0:256 << 10] == pattern(11, 0, 256 << 10)
    assert data[3 * MiB:3 * MiB + (1536 << 10)] == \
        pattern(12, 3 * MiB, 1536 << 10)
    assert data[10 * MiB:10 * MiB + (64 << 10)] == \
        pattern(13, 10 * MiB, 64 << 10)
    assert data[20 * MiB:21 * MiB] == bytes(MiB)
    assert len(data) == IMAGE_SIZE


def test_read_only_lun_refuses_writes(client, spindle_daemon, workdir):
    d = spindle_daemon(exports=[scsi_exports(workdir)], workdir=workdir)
    with d:
        sock = sock_of(d)
        w, w10, u, lbp, r = vu_ok(
            client, sock,
            "scsi-write", 0, "8k", "--lun", 1,
            "--expect-sense", "DATA_PROTECT",
            "scsi-write", "4k", "4k", "--lun", 1, "--cdb", 10,
            "--expect-sense", "DATA_PROTECT",
            "scsi-unmap", 0, 2, "--lun", 1, "--expect-sense",
            "ILLEGAL_REQUEST",
            "scsi-inquiry", "--evpd", 0xb2, "--lun", 1,
            "scsi-read", 0, "8k", "--lun", 1)
        assert w["status"] == "CHECK_CONDITION"
        assert w["asc"] == w10["asc"] == ASC_WRITE_PROTECTED
        # A read-only LUN does not offer UNMAP (VPD 0xB2 says so), so the
        # command is not supported there: INVALID COMMAND OPERATION CODE.
        assert lbp["lbpu"] is False
        assert u["asc"] == ASC_INVALID_OPCODE
        # Without --expect-sense the refused write is a failure.
        rc, doc = vu(client, sock, "scsi-write", 0, "4k", "--lun", 1)
        assert rc == 1 and doc["results"][-1]["sense_key"] == "DATA_PROTECT"
    assert d.returncode == 0
    assert Path(workdir / "lun1.img").read_bytes() == b"\x5a" * RO_IMAGE_SIZE


def _punch_hole_works(directory):
    """Can the file system under directory deallocate a range?"""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2
    path = directory / "punch-probe"
    with open(path, "wb") as f:
        f.write(b"\x01" * MiB)
        f.flush()
        os.fsync(f.fileno())
        before = os.stat(path).st_blocks
        ok = libc.fallocate(f.fileno(), FALLOC_FL_KEEP_SIZE |
                            FALLOC_FL_PUNCH_HOLE, ctypes.c_long(0),
                            ctypes.c_long(MiB)) == 0
        after = os.stat(path).st_blocks
    path.unlink()
    return ok and after < before


def test_unmap_deallocates_and_reads_zeroes(client, spindle_daemon,
                                            workdir):
    d = spindle_daemon(exports=[scsi_exports(workdir)], workdir=workdir)
    img = workdir / "lun0.img"
    with d:
        sock = sock_of(d)
        vu_ok(client, sock, "scsi-write", "4M", "2M", "--pattern", 5,
              "scsi-sync")
        blocks_written = os.stat(img).st_blocks
        # LBA 8192 = 4 MiB, 2048 blocks = 1 MiB: the first half.
        vu_ok(client, sock, "scsi-unmap", 8192, 2048,
              "scsi-read", "4M", "1M", "--expect-zeroes",
              "scsi-read", "5M", "1M", "--verify", 5)
        blocks_unmapped = os.stat(img).st_blocks
    assert d.returncode == 0
    data = img.read_bytes()
    assert data[4 * MiB:5 * MiB] == bytes(MiB)
    assert data[5 * MiB:6 * MiB] == pattern(5, 5 * MiB, MiB)
    if _punch_hole_works(workdir):
        # 1 MiB is 2048 blocks of 512 bytes (st_blocks' unit).
        assert blocks_written - blocks_unmapped >= 2048, \
            (blocks_written, blocks_unmapped)


# --------------------------------------------------------------------------
# Task management

def test_lun_reset_raises_unit_attention_once(client, scsi_daemon):
    sock = sock_of(scsi_daemon)
    tmf, ua, again, other = vu_ok(
        client, sock,
        "scsi-tmf", "logical-unit-reset", "--lun", 0,
        "scsi-tur", "--lun", 0, "--expect-sense", "UNIT_ATTENTION",
        "scsi-tur", "--lun", 0,
        "scsi-tur", "--lun", 1)
    assert tmf["response"] == "FUNCTION_COMPLETE"
    assert ua["asc"] == ASC_POWER_ON_RESET
    assert again["status"] == "GOOD"
    assert other["status"] == "GOOD"      # only LUN 0 was reset
    # I_T NEXUS RESET: every LUN.
    res = vu_ok(client, sock, "scsi-tmf", "i-t-nexus-reset",
                "scsi-tur", "--lun", 1, "--expect-sense", "UNIT_ATTENTION",
                "scsi-tur", "--lun", 0, "--expect-sense", "UNIT_ATTENTION",
                "scsi-tur", "--lun", 0)
    assert res[0]["response"] == "FUNCTION_COMPLETE"
    assert res[1]["asc"] == res[2]["asc"] == ASC_POWER_ON_RESET
    # I/O commands resend after a unit attention, as a guest does.
    res = vu_ok(client, sock, "scsi-write", 0, "4k",
                "scsi-tmf", "logical-unit-reset",
                "scsi-write", 0, "4k", "scsi-read", 0, "4k", "--verify", 1)
    assert "unit_attentions" not in res[0]
    assert res[2]["unit_attentions"] == 1
    assert "unit_attentions" not in res[3]


def test_abort_and_query_of_a_finished_task(client, scsi_daemon):
    sock = sock_of(scsi_daemon)
    res = vu_ok(client, sock, "scsi-write", 0, "4k",
                "scsi-tmf", "abort-task",
                "scsi-tmf", "query-task",
                "scsi-tmf", "abort-task-set",
                "scsi-tmf", "query-task-set",
                "scsi-tmf", "clear-aca",
                "scsi-an-query",
                "scsi-tur")
    write, abort, query, abort_set, query_set, clear_aca, an, tur = res
    # The TMFs name the write's tag (the last one sent).
    assert abort["tag"] == write["tag"] == query["tag"]
    assert abort["response"] == "FUNCTION_COMPLETE"
    assert query["response"] == "FUNCTION_COMPLETE"     # not in flight
    assert abort_set["response"] == "FUNCTION_COMPLETE"
    assert query_set["response"] == "FUNCTION_COMPLETE"
    assert clear_aca["response"] == "FUNCTION_REJECTED"
    assert an["response"] == "OK" and an["event_actual"] == 0
    # Aborting a finished task raised nothing: the next command is GOOD.
    assert tur["status"] == "GOOD"


# --------------------------------------------------------------------------
# Several queues

def test_request_queues_in_parallel(client, spindle_daemon, workdir):
    exp = scsi_exports(workdir, num_queues=2, iothread=["iot0", "iot1"])
    d = spindle_daemon(exports=[exp], workdir=workdir)
    with d:
        info, run = vu_ok(client, sock_of(d), "--queues", 2, "info",
                          "scsi-verify-run", "--queues", 2, "--size", "8M",
                          "--count", 3000, "--iodepth", 16, "--offset", "16M",
                          "--bs", "8k")
        assert info["config"]["num_queues"] == 2
        assert info["request_queues"] == 2
        assert run["queues"] == 2
        assert run["writes"] == 6000
        assert run["reads"] > 0 and run["bytes_verified"] > 0
        assert [q["writes"] for q in run["per_queue"]] == [3000, 3000]
        # The same data through another session and the other CDB size.
        vu_ok(client, sock_of(d), "scsi-verify-run", "--size", "1M",
              "--count", 200, "--cdb", 10)
    assert d.returncode == 0, d.stderr()
    err = d.stderr()
    # Stats: one line per node, and the request queues (virtqueues 2 and
    # 3) ran in both IOThreads.
    assert "export e0 node d0l0 stats:" in err
    assert "export e0 node d0l1 stats:" in err
    for vq, iot in ((2, "iot0"), (3, "iot1")):
        line = next(l for l in err.splitlines()
                    if f"export e0 queue {vq} stats:" in l)
        assert f"iothread={iot}" in line
        assert int(line.split("requests=")[1].split()[0]) >= 3000


# --------------------------------------------------------------------------
# Malformed requests

# A request whose device-writable part cannot hold the response (header):
# no answer would be honest, so the device breaks the queue.
BROKEN = "broken"

# kind: (response, status, sense key) expected; None: anything, as long as
# the daemon survives; BROKEN: not completed, the queue broken.
BAD_REQUESTS = {
    "good-read": ("OK", "GOOD", None),
    "split-request": ("OK", "GOOD", None),
    "short-request": None,
    "short-cdb": None,
    "no-response": BROKEN,
    "short-response": BROKEN,
    "response-readable": BROKEN,
    "read-overrun": ("OVERRUN", None, None),
    "write-overrun": ("OVERRUN", None, None),
    "read-wrong-direction": None,
    "write-wrong-direction": None,
    "huge-transfer": None,
    "lba-out-of-range": ("OK", "CHECK_CONDITION", "ILLEGAL_REQUEST"),
    "lba-wrap": ("OK", "CHECK_CONDITION", "ILLEGAL_REQUEST"),
    "bad-target": ("BAD_TARGET", None, None),
    "bad-lun-format": None,
    "missing-lun": ("OK", "CHECK_CONDITION", "ILLEGAL_REQUEST"),
    "unknown-opcode": ("OK", "CHECK_CONDITION", "ILLEGAL_REQUEST"),
    "inquiry-huge-alloc": ("OK", "GOOD", None),
    "ctrl-short": None,
    "ctrl-unknown-type": None,
    "ctrl-no-response": BROKEN,
    "tmf-bad-subtype": None,
    "tmf-bad-target": None,
}
RING_FAULTS = ("head-out-of-range", "desc-loop", "addr-out-of-range",
               "next-out-of-range", "indirect-loop", "avail-idx-jump")


def test_malformed_requests_do_not_stop_the_daemon(client, spindle_daemon,
                                                   workdir):
    blk_img = make_image(workdir / "blk.img", 16 * MiB)
    blk = daemons.Export(image=str(blk_img), socket=str(workdir / "blk.sock"))
    d = spindle_daemon(exports=[scsi_exports(workdir), blk], workdir=workdir)
    with d:
        sock = sock_of(d)
        for kind, want in BAD_REQUESTS.items():
            if want is BROKEN:
                check_broken_queue(client, sock, kind)
                continue
            rc, doc = vu(client, sock, "scsi-bad-request", kind)
            r = doc["results"][-1]
            assert rc == 0, (kind, doc)
            assert r["alive"] is True, (kind, r)
            assert r["reaction"] in ("completed", "no-completion"), (kind, r)
            assert r["error_signalled"] is False, (kind, r)
            if want is not None:
                resp, status, key = want
                assert r["reaction"] == "completed", (kind, r)
                assert r["response"] == resp, (kind, r)
                if status is not None:
                    assert r["status"] == status, (kind, r)
                if key is not None:
                    assert r["sense_key"] == key, (kind, r)
            # The queue keeps working after each of them.
            vu_ok(client, sock, "scsi-write", "1M", "4k", "--pattern", 3,
                  "scsi-read", "1M", "4k", "--verify", 3)
        for fault in RING_FAULTS:
            rc, doc = vu(client, sock, "malformed", fault)
            assert rc == 0 and doc["results"][-1]["alive"] is True, \
                (fault, doc)
            assert d.proc.poll() is None, f"spindle died after {fault}"
        for kind in ("oversized-payload", "bad-queue-index",
                     "mem-table-too-many", "kick-no-fd"):
            rc, doc = vu(client, sock, "malformed", kind)
            assert rc == 0, (kind, doc)
            assert d.proc.poll() is None, f"spindle died after {kind}"
        # Both exports still serve.
        vu_ok(client, sock, "scsi-read", "1M", "4k", "--verify", 3,
              "scsi-report-luns")
        vu_ok(client, blk.socket, "write", 0, "64k", "--pattern", 4,
              "read", 0, "64k", "--verify", 4)
    assert d.returncode == 0, d.stderr()
    # Malformed requests are logged, at most once per queue.
    assert "malformed request" in d.stderr()
    assert "virtqueue 0 is broken" in d.stderr()      # ctrl-no-response
    assert "virtqueue 2 is broken" in d.stderr()      # no-response, ...


def check_broken_queue(client, sock, kind):
    """kind breaks its queue: no completion, the error eventfd signalled;
    in the same session a later request on that queue is not served
    either, while the device's other queue (control or request) serves."""
    control = kind.startswith("ctrl-")
    later = "tmf-bad-target" if control else "good-read"
    other = ["scsi-tur"] if control else ["scsi-tmf", "query-task-set"]
    rc, doc = vu(client, sock, "scsi-bad-request", kind,
                 "scsi-bad-request", later, *other)
    assert rc == 0, (kind, doc)
    bad = [r for r in doc["results"] if r["command"] == "scsi-bad-request"]
    for r in bad:
        assert r["queue_kind"] == ("control" if control else "request"), r
        assert r["reaction"] == "no-completion", (kind, r)
        assert r["error_signalled"] is True, (kind, r)
        assert r["alive"] is True, (kind, r)
    assert doc["results"][-1]["command"] == other[0], doc


# --------------------------------------------------------------------------
# Command line

def cli_error_cases(work):
    img = work / "disk.img"
    ro = work / "ro.img"
    bdev = ["--blockdev", f"driver=file,node-name=disk0,filename={img}",
            "--blockdev", f"driver=file,node-name=disk1,filename={ro},"
                          "read-only=on"]
    base = "type=vhost-user-scsi,id=e0,addr.type=unix,addr.path=s.sock"

    def scsi(opts):
        """The two nodes and export e0 with `opts` (lun.N..., more keys)."""
        return bdev + ["--export", f"{base},{opts}"]

    # LUN 0 on disk0 with one more lun.0 key.
    def lun0(key):
        return scsi(f"lun.0.node-name=disk0,lun.0.{key}")

    return [
        ("no-lun", bdev + ["--export", base], "'lun' is missing"),
        ("no-lun-json", bdev + ["--export", json.dumps({
            "type": "vhost-user-scsi", "id": "e0",
            "addr": {"type": "unix", "path": "s.sock"}, "lun": []})],
         "'lun' is missing"),
        ("unknown-node", scsi("lun.0=disk0,lun.1=disk9"),
         "lun.1: there is no node 'disk9'"),
        ("lun-given-twice", scsi("lun.0=disk0,lun.0=disk1"),
         "'lun.0' is given twice"),
        ("node-in-two-luns", scsi("lun.0=disk1,lun.1.node-name=disk1"),
         "lun.1: node 'disk1' is already served by lun.0"),
        ("lun-gap", scsi("lun.0=disk0,lun.2=disk1"), "no element 1"),
        ("bad-wwn", lun0("wwn=0xfoo"), "'lun.0.wwn' expects 16 hex digits"),
        ("wwn-not-naa", lun0("wwn=0x1000c500a1b2c3d4"), "NAA type"),
        ("writable-read-only-node",
         scsi("lun.0.node-name=disk1,lun.0.writable=on"),
         "lun.0: writable=on, but node 'disk1' is read-only"),
        ("no-node-name", scsi("lun.0.serial=x"),
         "'lun.0.node-name' is missing"),
        ("long-vendor", lun0("vendor=VERYLONGV"),
         "'lun.0.vendor' is 9 characters long"),
        ("bad-block-size", lun0("logical-block-size=1k"),
         "'lun.0.logical-block-size' expects 512 or 4096"),
        ("unknown-lun-key", lun0("sparkle=on"),
         "Invalid parameter 'lun.0.sparkle'"),
        ("top-level-node-name", scsi("lun.0=disk0,node-name=disk0"),
         "Invalid parameter 'node-name'"),
        ("too-many-queues", scsi("lun.0=disk0,num-queues=63"),
         "'num-queues' expects an integer from 1 to 62"),
        ("shared-with-writable-blk",
         bdev + ["--export", "vhost-user-blk,id=b0,node-name=disk0,"
                             "addr.type=unix,addr.path=b.sock,writable=on",
                 "--export", base.replace("id=e0", "id=e1") + ",lun.0=disk0"],
         "lun.0: node 'disk0' is already exported by 'b0'"),
    ]


CLI_IDS = [c[0] for c in cli_error_cases(Path("w"))]


@pytest.mark.parametrize("case", CLI_IDS)
def test_export_errors_are_one_clear_line(spindle, tmp_path, case):
    work = tmp_path / "w"
    work.mkdir()
    images = (make_image(tmp_path / "disk.img", 4 * MiB),
              make_image(tmp_path / "ro.img", 4 * MiB))
    _, args, text = next(c for c in cli_error_cases(tmp_path)
                         if c[0] == case)
    check_one_line_error(run_spindle(spindle, args, work), "--export", text)
    assert list(work.iterdir()) == [], "left behind"
    assert all(i.exists() for i in images)


def test_help_lists_the_scsi_export(spindle):
    proc = run_spindle(spindle, ["--help"], None)
    assert proc.returncode == 0
    for text in ("vhost-user-scsi", "lun.0.node-name", "lun.0.wwn",
                 "lun.1=NODE"):
        assert text in proc.stdout, text
    proc = run_spindle(spindle, ["--export", "type=nbd,id=e0"], None)
    assert "vhost-user-scsi" in proc.stderr


def test_json_lun_list_and_shorthand(client, spindle_daemon, workdir):
    a = make_image(workdir / "a.img", 8 * MiB)
    b = make_image(workdir / "b.img", 4 * MiB)
    sock = workdir / "j.sock"
    exp = {"type": "vhost-user-scsi", "id": "j0",
           "addr": {"type": "unix", "path": str(sock)},
           "num-queues": 1,
           "lun": [{"node-name": "da", "serial": "JSON-A", "writable": True},
                   "db"]}
    d = spindle_daemon(["--blockdev", f"driver=file,node-name=da,filename={a}",
                        "--blockdev", f"driver=file,node-name=db,filename={b}",
                        "--export", json.dumps(exp)], ready=[sock])
    luns, serial, cap, w, rw = vu_ok(
        client, sock, "scsi-report-luns", "scsi-inquiry", "--evpd", 0x80,
        "scsi-read-capacity", "--lun", 1,
        "scsi-write", 0, "4k", "--lun", 1, "--expect-sense",
        "DATA_PROTECT", "scsi-write", 0, "4k", "--lun", 0)
    assert luns["luns"] == [0, 1]
    assert serial["serial"] == "JSON-A"
    assert cap["bytes"] == 4 * MiB
    assert d.stop() == 0, d.stderr()


def test_inherited_listening_socket(client, spindle_daemon, workdir):
    img = make_image(workdir / "fd.img", 4 * MiB)
    path = workdir / "fd.sock"
    d = start_on_listening_socket(spindle_daemon, path, lambda fd: [
        "--blockdev", f"driver=file,node-name=d,filename={img}",
        "--export", f"vhost-user-scsi,id=f0,addr.type=fd,addr.str={fd},"
                    "lun.0.node-name=d,lun.0.writable=on"])
    res = vu_ok(client, path, "scsi-write", 0, "8k", "--pattern", 9,
                "scsi-read", 0, "8k", "--verify", 9)
    assert res[1]["verified"] == "pattern"
    assert d.stop() == 0, d.stderr()
    assert path.exists()        # not ours to remove


@pytest.mark.parametrize("args,text", [
    (["write", "0", "4k", "scsi-tur"], "scsi-tur is a virtio-scsi command"),
    (["--device", "blk", "scsi-inquiry"], "the device is virtio-blk"),
    (["--device", "scsi", "get-id"], "get-id is a virtio-blk command"),
    (["scsi-tmf", "reboot"], "unknown kind 'reboot'"),
    (["scsi-read", "0", "100"], "multiples of the LUN's block size"),
    (["scsi-tur", "--expect-sense", "SORT_OF_BAD"], "unknown sense key"),
    (["scsi-inquiry", "--lun", "16384"], "--lun"),
    (["scsi-bad-request", "nonsense"], "unknown kind 'nonsense'"),
], ids=["blk-then-scsi", "device-blk", "device-scsi", "tmf-kind",
        "read-length", "sense-key", "lun-range", "bad-request-kind"])
def test_client_usage_errors(client, tmp_path, args, text):
    # Nothing is sent: the socket does not even exist.
    proc = subprocess.run([str(client), "--socket", str(tmp_path / "none"),
                           *args], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert text in proc.stderr, proc.stderr

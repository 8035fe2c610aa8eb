"""spindle-bench (tools/bench, docs/bench.md) against a running spindle.

Short runs (a fraction of a second each) check that the benchmark does
what it claims, not how fast anything is: both completion modes, closed
and open loop, several pinned queues, counts that add up in the JSON
report (IOPS x runtime = I/Os, reads + writes = I/Os), the kick and
interrupt accounting, the back-end CPU sampling, and that --verify catches
bad data: writes a null-co node drops (reads come back as zeroes), and a
byte changed in the image file behind the daemon's back.  Bad input gives
one clear line and exit status 2.

--device=scsi runs the same against a vhost-user-scsi export: both
completion modes over two request queues, --verify on a file LUN and on a
null-co LUN, READ/WRITE (16) past 2 TiB landing where they should, a
read-only LUN (DATA PROTECT errors, exit 1), a pending unit attention at
start (resent, as a guest does), and a LUN that does not exist (exit 2).
"""

import json
import os
import subprocess
import time

import pytest

import daemons  # tests/e2e, on sys.path through conftest
from conftest import make_image

BENCH = "tools/bench/spindle-bench"
IMAGE_SIZE = 64 << 20
RUN_TIMEOUT_S = 60


@pytest.fixture
def bench(binary):
    return binary(BENCH)


@pytest.fixture
def start_spindle(spindle_daemon, workdir):
    """Factory: start_spindle(blockdev=None, queues=2, image=None) -> a
    spindle with one export (a file, or `blockdev`)."""
    def start(blockdev=None, queues=2, image=None):
        if image is None and blockdev is None:
            image = make_image(workdir / "disk.img", IMAGE_SIZE)
        exp = daemons.Export(str(image) if image else "",
                             str(workdir / "vu.sock"), num_queues=queues,
                             blockdev=blockdev)
        return spindle_daemon(exports=[exp], workdir=workdir)
    return start


def run_bench(bench, socket, *args, expect=0):
    argv = [str(bench), f"--socket={socket}", *[str(a) for a in args]]
    proc = subprocess.run(argv, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    assert proc.returncode == expect, (
        f"{' '.join(argv)}\nexit {proc.returncode}\nstdout:\n{proc.stdout}\n"
        f"stderr:\n{proc.stderr}")
    return proc


def run_json(bench, socket, *args, expect=0):
    proc = run_bench(bench, socket, "--json", *args, expect=expect)
    return json.loads(proc.stdout), proc


def check_consistent(r):
    """The counts of one JSON report agree with each other."""
    assert r["ios"] > 0
    assert r["reads"] + r["writes"] == r["ios"]
    assert r["runtime_s"] > 0
    assert r["iops"] == pytest.approx(r["ios"] / r["runtime_s"], rel=1e-9)
    assert r["bytes"] == r["ios"] * r["bs"]
    assert r["bw_mib_s"] == pytest.approx(r["bytes"] / r["runtime_s"] / 2**20,
                                          rel=1e-6)
    lat = r["lat_ns"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] \
        <= lat["p999"] <= lat["max"]
    assert lat["min"] <= lat["mean"] <= lat["max"]
    cdf = r["lat_cdf"]
    assert 1 <= len(cdf) <= 100
    assert cdf[-1] == [pytest.approx(lat["max"]), 1.0]
    assert all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(cdf, cdf[1:]))
    assert r["kicks_per_io"] == pytest.approx(r["kicks"] / r["ios"])
    assert r["interrupts_per_io"] == pytest.approx(r["interrupts"] / r["ios"])
    assert sum(q["ios"] for q in r["per_queue"]) == r["ios"]
    assert len(r["per_queue"]) == r["queues"]
    assert r["errors"] == 0 and r["first_error"] is None


def run_completion_mode(bench, d, completion, *args):
    """A short closed-loop run at QD4 in `completion` mode on d's export,
    then d stopped; returns the report, checked for what every device
    shows in that mode: the interrupts it gives, a back-end CPU time."""
    try:
        r, _ = run_json(bench, d.exports[0].socket, *args, "--iodepth=4",
                        "--runtime=0.3", f"--completion={completion}",
                        f"--backend-pid={d.pid}")
    finally:
        assert d.stop() == 0
    check_consistent(r)
    assert r["completion"] == completion and r["iodepth"] == 4
    if completion == "poll":
        # The bench asked for no interrupts and spun on the used ring.
        assert r["interrupts_per_io"] < 0.05, r
    else:
        # It blocked on the call eventfd: interrupts came, fewer than I/Os
        # at most by batching, never more than one per I/O plus spurious.
        assert 0 < r["interrupts"] <= r["ios"] + r["queues"], r
    assert r["backend_cpu_us_per_io"] is not None
    assert r["backend_cpu_us_per_io"] > 0
    return r


@pytest.mark.parametrize("completion", ["poll", "interrupt"])
def test_closed_loop_both_completion_modes(start_spindle, bench,
                                           completion):
    d = start_spindle()
    r = run_completion_mode(bench, d, completion, "--rw=randread")
    assert r["device"] == "virtio-blk" and r["lun"] is None
    assert r["rw"] == "randread" and r["writes"] == 0
    # The back-end's CPU was sampled over the window.
    assert r["backend_pid"] == d.pid
    assert r["backend_cpu_s"] is not None and r["backend_cpu_s"] >= 0


def test_count_stops_each_queue(start_spindle, bench, workdir):
    d = start_spindle(queues=2)
    try:
        r, _ = run_json(bench, d.exports[0].socket, "--queues=2",
                        "--count=500", "--rw=randwrite", "--iodepth=8")
    finally:
        d.stop()
    check_consistent(r)
    assert r["ios"] == 1000 and r["writes"] == 1000
    assert [q["ios"] for q in r["per_queue"]] == [500, 500]


def test_multi_queue_pinned(start_spindle, bench, workdir):
    cpus = sorted(os.sched_getaffinity(0))[:2]
    d = start_spindle(queues=2)
    try:
        r, _ = run_json(bench, d.exports[0].socket, "--queues=2",
                        f"--cpus={','.join(map(str, cpus))}",
                        "--rw=randrw", "--rwmixread=70", "--iodepth=4",
                        "--runtime=0.3")
    finally:
        d.stop()
    check_consistent(r)
    assert r["queues"] == 2
    assert [q["queue"] for q in r["per_queue"]] == [0, 1]
    # Thread i is pinned to the (i mod n)-th CPU of the list.
    assert [q["cpu"] for q in r["per_queue"]] == [cpus[0], cpus[1 % len(cpus)]]
    assert all(q["ios"] > 0 for q in r["per_queue"])
    # A 70% read mix, give or take what a third of a second allows.
    assert 0.5 < r["reads"] / r["ios"] < 0.9, r


def test_open_loop_rate(start_spindle, bench, workdir):
    d = start_spindle(blockdev="driver=null-co,size=1G")
    try:
        r, _ = run_json(bench, d.exports[0].socket, "--rate=2000",
                        "--runtime=0.5", "--ramp=0.1")
    finally:
        d.stop()
    check_consistent(r)
    assert r["rate_iops"] == 2000
    # Poisson arrivals at 2000/s for 0.5 s: about 1000 I/Os (well within
    # +-30%; a standard deviation is about 32).
    assert 700 < r["ios"] < 1300, r
    assert r["iops"] == pytest.approx(2000, rel=0.3)


def test_phases_on_one_connection(start_spindle, bench, workdir):
    """--phase: a closed loop, an idle pause, an open loop, back to back."""
    d = start_spindle(blockdev="driver=null-co,size=1G",
                      queues=1)
    before = time.monotonic_ns()
    try:
        r, _ = run_json(bench, d.exports[0].socket, "--ramp=0.1",
                        "--phase", "0.3:qd1", "--phase=0.2:idle",
                        "--phase", "0.5:rate=2000", f"--backend-pid={d.pid}")
    finally:
        assert d.stop() == 0
    after = time.monotonic_ns()
    check_consistent(r)
    phases = r["phases"]
    assert [p["load"] for p in phases] == ["qd1", "idle", "rate=2000"]
    assert [p["seconds"] for p in phases] == [0.3, 0.2, 0.5]
    # Back to back on CLOCK_MONOTONIC (Python's monotonic clock), inside
    # the run, each as long as asked.
    assert before < phases[0]["start_ns"] < phases[-1]["end_ns"] < after
    for p, q in zip(phases, phases[1:]):
        assert p["end_ns"] == q["start_ns"]
    for p in phases:
        assert p["end_ns"] - p["start_ns"] == \
            pytest.approx(p["seconds"] * 1e9, abs=1000)
    assert r["runtime_s"] == pytest.approx(1.0, abs=1e-3)
    qd1, idle, rate = phases
    # The totals are the phases' sum.
    assert sum(p["ios"] for p in phases) == r["ios"]
    assert qd1["ios"] > 0 and 0 < qd1["lat_ns"]["p50"] <= qd1["lat_ns"]["p99"]
    assert qd1["iops"] == pytest.approx(qd1["ios"] / 0.3, rel=1e-6)
    assert qd1["backend_cpu_us_per_io"] > 0
    # Idle: no I/O submitted, so none counted (and no NaN).
    assert idle["ios"] == 0 and idle["iops"] == 0
    assert idle["lat_ns"] == {"p50": 0, "p99": 0}
    assert idle["backend_cpu_us_per_io"] == 0
    assert idle["backend_cpu_s"] >= 0
    # Poisson arrivals at 2000/s for 0.5 s: about 1000 (+-30% is over 9
    # standard deviations).
    assert rate["iops"] == pytest.approx(2000, rel=0.3), rate
    assert r["arrivals"] >= rate["ios"]
    assert r["rate_iops"] == 0 and r["iodepth"] >= 1


@pytest.mark.parametrize("extra", [["--runtime=1"], ["--iodepth=2"],
                                   ["--rate=100"], ["--queues=2"]])
def test_phase_excludes_options(bench, workdir, extra):
    proc = run_bench(bench, workdir / "nothing.sock", "--phase", "1:qd1",
                     *extra, expect=2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spindle-bench: --phase:")
    assert extra[0].split("=")[0] in lines[0]


def test_phase_bad_spec(bench, workdir):
    proc = run_bench(bench, workdir / "nothing.sock", "--phase", "1:fast",
                     expect=2)
    assert "--phase" in proc.stderr and "1:fast" in proc.stderr


def test_verify_passes_on_a_good_disk(start_spindle, bench, workdir):
    d = start_spindle()
    try:
        r, _ = run_json(bench, d.exports[0].socket, "--verify", "--rw=randrw",
                        "--queues=2", "--iodepth=8", "--size=4M",
                        "--count=3000")
    finally:
        d.stop()
    check_consistent(r)
    v = r["verify"]
    assert v["enabled"] is True
    assert v["mismatches"] == 0 and v["first_mismatch"] is None
    # Reads of blocks written in the run were checked, 8 sectors each.
    assert v["sectors_checked"] >= 8 * r["reads"] // 2 > 0


def test_verify_catches_lost_writes(start_spindle, bench, workdir):
    """null-co drops every write and reads back zeroes: a written block
    that reads back without its header is a lost write."""
    d = start_spindle(blockdev="driver=null-co,size=64M,read-zeroes=on")
    try:
        r, proc = run_json(bench, d.exports[0].socket, "--verify",
                           "--rw=randrw", "--size=1M", "--count=2000",
                           expect=1)
    finally:
        d.stop()
    v = r["verify"]
    assert v["mismatches"] > 0
    first = v["first_mismatch"]
    assert first["problem"] == "no header"
    assert first["offset"] % 512 == 0 and first["offset"] < 1 << 20
    assert first["expected_gen"] >= 1
    assert "verify" in proc.stderr and "no header" in proc.stderr


def test_verify_catches_a_changed_byte_in_the_image(start_spindle, bench,
                                                    workdir):
    """Write the region, change one byte of the image behind the daemon's
    back, read it all back: the checksum names the sector."""
    image = workdir / "disk.img"
    with open(image, "wb") as f:
        f.truncate(IMAGE_SIZE)
    d = start_spindle(image=image)
    try:
        sock = d.exports[0].socket
        r, _ = run_json(bench, sock, "--verify", "--rw=write", "--size=2M",
                        "--bs=64k", "--count=32")
        assert r["verify"]["mismatches"] == 0
        # The whole region was written (sequentially, once) and read back.
        assert r["writes"] == 32
        bad = (1 << 20) + 4096 + 100         # inside sector 2056's payload
        with open(image, "r+b") as f:
            f.seek(bad)
            old = f.read(1)
            f.seek(bad)
            f.write(bytes([old[0] ^ 0x40]))
        r, proc = run_json(bench, sock, "--verify", "--rw=read",
                           "--size=2M", "--bs=64k", "--count=32", expect=1)
    finally:
        d.stop()
    v = r["verify"]
    assert v["mismatches"] == 1, v
    assert v["first_mismatch"]["offset"] == bad // 512 * 512
    assert v["first_mismatch"]["problem"] == "bad checksum"
    assert str(bad // 512 * 512) in proc.stderr


def test_dirty_log_run(start_spindle, bench, workdir):
    """--dirty-log: the run goes on with logging on, its data verified, and
    the syncs find the pages the back-end wrote: at least each request's
    read buffer (2 queues x 8 requests, each read into its own page)."""
    d = start_spindle()
    try:
        r, _ = run_json(bench, d.exports[0].socket, "--dirty-log",
                        "--dirty-log-sync=20", "--verify", "--rw=randrw",
                        "--queues=2", "--iodepth=8", "--size=4M",
                        "--runtime=0.5")
        off, _ = run_json(bench, d.exports[0].socket, "--runtime=0.1")
    finally:
        d.stop()
    check_consistent(r)
    assert r["verify"]["mismatches"] == 0
    log = r["dirty_log"]
    assert log["sync_ms"] == 20 and log["syncs"] >= 10, log
    assert log["dirty_pages"] >= 2 * 8, log
    assert off["dirty_log"] is None
    assert "dirty logging on" in d.stderr(), d.describe()


def test_dirty_log_sync_needs_dirty_log(bench, workdir):
    proc = run_bench(bench, workdir / "vu.sock", "--dirty-log-sync=5",
                     expect=2)
    assert "--dirty-log-sync needs --dirty-log" in proc.stderr


def test_human_report(start_spindle, bench, workdir):
    d = start_spindle(blockdev="driver=null-co,size=1G")
    try:
        proc = run_bench(bench, d.exports[0].socket, "--runtime=0.2")
    finally:
        d.stop()
    for word in ("iops=", "p50=", "p99.9=", "kicks/io=", "interrupts/io="):
        assert word in proc.stdout, proc.stdout


def test_unreachable_socket(bench, workdir):
    proc = run_bench(bench, workdir / "nothing.sock", "--runtime=0.1",
                     expect=2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spindle-bench: "), lines
    assert "nothing.sock" in lines[0]


def test_size_beyond_the_disk(start_spindle, bench, workdir):
    d = start_spindle(blockdev="driver=null-co,size=16M")
    try:
        proc = run_bench(bench, d.exports[0].socket, "--size=32M",
                         "--runtime=0.1", expect=2)
    finally:
        d.stop()
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--size" in lines[0], lines


def test_feature_the_back_end_does_not_offer(start_spindle, bench, workdir):
    d = start_spindle(blockdev="driver=null-co,size=16M")
    try:
        proc = run_bench(bench, d.exports[0].socket, "--require=ring-packed",
                         "--runtime=0.1", expect=2)
        # The daemon is fine after a front-end gave up on it.
        r, _ = run_json(bench, d.exports[0].socket, "--runtime=0.1")
    finally:
        assert d.stop() == 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not offer" in lines[0], lines
    check_consistent(r)


def test_more_queues_than_the_export_has(start_spindle, bench, workdir):
    d = start_spindle(blockdev="driver=null-co,size=16M",
                      queues=1)
    try:
        proc = run_bench(bench, d.exports[0].socket, "--queues=4",
                         "--runtime=0.1", expect=2)
    finally:
        d.stop()
    assert "queues" in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_lun_needs_device_scsi(bench, workdir):
    proc = run_bench(bench, workdir / "nothing.sock", "--lun=1", expect=2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--lun" in lines[0] and "scsi" in lines[0]


# --------------------------------------------------------------------------
# --device=scsi

@pytest.fixture
def start_spindle_scsi(spindle_daemon, workdir):
    """Factory: start_spindle_scsi(luns, queues=2) -> a spindle with one
    vhost-user-scsi export of `luns` (ScsiLun)."""
    def start(luns, queues=2):
        exp = daemons.ScsiExport(luns=luns, socket=str(workdir / "scsi.sock"),
                                 num_queues=queues)
        return spindle_daemon(exports=[exp], workdir=workdir)
    return start


def file_lun(workdir, name="lun0.img", size=IMAGE_SIZE, **kw):
    image = make_image(workdir / name, size)
    return daemons.ScsiLun(image=str(image), **kw)


def run_scsi(bench, d, *args, expect=0):
    return run_json(bench, d.exports[0].socket, "--device=scsi", *args,
                    expect=expect)


@pytest.mark.parametrize("completion", ["poll", "interrupt"])
def test_scsi_both_completion_modes(start_spindle_scsi, bench, workdir,
                                    completion):
    d = start_spindle_scsi([file_lun(workdir, writable=True)])
    r = run_completion_mode(bench, d, completion, "--device=scsi",
                            "--queues=2", "--rw=randrw")
    assert r["device"] == "virtio-scsi" and r["lun"] == 0
    assert r["reads"] > 0 and r["writes"] > 0
    # Both request queues (virtqueues 2 and 3) did work.
    assert all(q["ios"] > 0 for q in r["per_queue"]), r["per_queue"]


def test_scsi_verify_passes_on_a_file_lun(start_spindle_scsi, bench, workdir):
    d = start_spindle_scsi([file_lun(workdir, writable=True)])
    try:
        r, _ = run_scsi(bench, d, "--verify", "--rw=randrw", "--queues=2",
                        "--iodepth=8", "--size=4M", "--count=3000")
    finally:
        d.stop()
    check_consistent(r)
    v = r["verify"]
    assert v["mismatches"] == 0 and v["first_mismatch"] is None
    assert v["sectors_checked"] >= 8 * r["reads"] // 2 > 0


def test_scsi_verify_catches_lost_writes(start_spindle_scsi, bench, workdir):
    """A null-co LUN drops writes and reads back zeroes."""
    lun = daemons.ScsiLun(image="", writable=True,
                          blockdev="driver=null-co,size=64M,read-zeroes=on")
    d = start_spindle_scsi([lun])
    try:
        r, proc = run_scsi(bench, d, "--verify", "--rw=randrw", "--size=1M",
                           "--count=2000", expect=1)
    finally:
        d.stop()
    assert r["errors"] == 0
    v = r["verify"]
    assert v["mismatches"] > 0
    assert v["first_mismatch"]["problem"] == "no header"
    assert v["first_mismatch"]["expected_gen"] >= 1
    assert "verify" in proc.stderr and "no header" in proc.stderr


def test_scsi_16_byte_cdbs_past_2_tib(start_spindle_scsi, bench, workdir):
    """LBAs beyond 2^32 blocks need READ/WRITE (16): the data must land at
    the offset asked for, not at a truncated LBA."""
    lun = file_lun(workdir, name="big.img", size=3 << 40, writable=True)
    d = start_spindle_scsi([lun], queues=1)
    offset = (5 << 39) + (1 << 20)          # 2.5 TiB + 1 MiB
    try:
        r, _ = run_scsi(bench, d, "--verify", "--rw=write", "--bs=64k",
                        f"--offset={offset}", "--size=256k", "--count=4")
    finally:
        assert d.stop() == 0
    assert r["writes"] == 4 and r["verify"]["mismatches"] == 0
    assert r["verify"]["sectors_checked"] == 4 * 128
    with open(lun.image, "rb") as f:
        f.seek(offset)
        assert f.read(4) == b"SPBV"
        # Nothing where a 32-bit LBA would have put it.
        f.seek(offset % (512 << 32))
        assert f.read(4) == bytes(4)


def test_scsi_read_only_lun_fails_writes(start_spindle_scsi, bench, workdir):
    luns = [file_lun(workdir, writable=True),
            file_lun(workdir, name="ro.img", size=16 << 20,
                     node_opts=",read-only=on",
                     props={"logical-block-size": 4096})]
    d = start_spindle_scsi(luns)
    try:
        r, proc = run_scsi(bench, d, "--lun=1", "--rw=randwrite",
                           "--count=100", expect=1)
        # The same LUN reads fine; and its 4096-byte blocks are found.
        ok, _ = run_scsi(bench, d, "--lun=1", "--count=100")
        small = run_bench(bench, d.exports[0].socket, "--device=scsi",
                          "--lun=1", "--bs=512", "--count=1", expect=2)
    finally:
        assert d.stop() == 0
    assert r["lun"] == 1 and r["ios"] == 0 and r["errors"] >= 100
    assert r["exit_status"] == 1 and r["ok"] is False
    e = r["first_error"]
    assert e["op"] == "write" and e["status"] == "CHECK_CONDITION"
    assert e["sense_key"] == "DATA_PROTECT"
    assert e["asc"] == 0x27                     # WRITE PROTECTED
    assert "DATA_PROTECT" in proc.stderr
    check_consistent(ok)
    assert ok["lun"] == 1 and ok["reads"] == 100
    assert "4096" in small.stderr and len(small.stderr.splitlines()) == 1


def test_scsi_unit_attention_at_start_is_resent(client, start_spindle_scsi,
                                                bench, workdir):
    """After a LUN reset the next command gets UNIT ATTENTION; the bench
    sends READ CAPACITY again, as a guest does, and the run is clean."""
    d = start_spindle_scsi([file_lun(workdir, writable=True)])
    try:
        sock = d.exports[0].socket
        subprocess.run([str(client), "--socket", sock, "--json",
                        "scsi-tmf", "logical-unit-reset", "--lun", "0"],
                       check=True, capture_output=True, timeout=30)
        r, _ = run_scsi(bench, d, "--rw=randrw", "--count=200")
    finally:
        assert d.stop() == 0
    check_consistent(r)
    assert r["ios"] == 200


def test_scsi_missing_lun(start_spindle_scsi, bench, workdir):
    d = start_spindle_scsi([file_lun(workdir, writable=True)])
    try:
        proc = run_bench(bench, d.exports[0].socket, "--device=scsi",
                         "--lun=3", "--runtime=0.1", expect=2)
        more = run_bench(bench, d.exports[0].socket, "--device=scsi",
                         "--queues=3", "--runtime=0.1", expect=2)
    finally:
        assert d.stop() == 0
    lines = proc.stderr.strip().splitlines()
    assert lines == ["spindle-bench: --lun 3: the target has no LUN 3"], lines
    lines = more.stderr.strip().splitlines()
    assert lines == ["spindle-bench: the back-end has 2 request queues, "
                     "--queues asks for 3"], lines

"""End-to-end: spindle is killed (SIGKILL) and restarted under a writing guest.

A real Linux guest (QEMU under TCG, 4 vCPUs) boots on a vhost-user-blk
export with 4 queues through `-chardev socket,...,reconnect=1` and runs
crashio: 8 writers, two per queue, writing O_DIRECT blocks and reading them
back after every acknowledged write.  The test kills spindle three times at
random moments and starts it again with the same command line; QEMU
reconnects and the guest must carry on: no acknowledged write lost or
replayed, no I/O error, no hang, and the image file holds the guest's last
version of every block (tests/e2e/crash.py does the work; scripts/crash-soak
runs it for as many cycles as asked).  QEMU must have asked for the inflight
region (GET_INFLIGHT_FD) and handed it to every new process
(SET_INFLIGHT_FD).  The kill tests need spindle's inflight-tracking
(VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD) and are skipped without it: QEMU
alone rewinds each queue to its used index, which loses or replays requests
that completed out of order, as eight writers' requests do now and then.

When spindle's blkdebug has inject-delay, writes to two blocks of every
writer's region wait 300 ms, so requests complete out of order and some are
in flight behind completed ones at every kill: spindle must then have
resubmitted requests, and the same run with inflight-tracking=off must
fail, which shows that the test sees what the region prevents.

Restarting at once can meet the killed process's image lock (with
aio=io_uring the kernel lets go of the file a little after the process is
reaped); spindle gives such a lock up to a second at open, so the restart
must succeed.

virtio-scsi with two LUNs runs the same on a QEMU that can reconnect a
vhost-user-scsi device (8.2 and later): Debian 12's 7.2 cannot, so it runs
on the QEMU scripts/install-deps.sh unpacks from bookworm-backports, and is
skipped with the reason where there is none; the two-LUN workload without
kills runs on the default QEMU.  crashio's own
checks are tried on a plain file.  Everything is skipped, with the reason,
when QEMU, a kernel, busybox or a C compiler with a static C library is
missing.  SPINDLE_E2E_KEEP=1 keeps each run's directory (console, QEMU's
trace, spindle's logs, images).
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_e2e_blk import _spindle_or_skip, boot_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "e2e"))
import crash  # noqa: E402

CYCLES = 3
DELAY_MS = 300
# Short enough for CI, long enough for a loaded machine: a restart takes
# about 1 s (QEMU retries the socket once a second).
HUNG_S = 20.0


def _setup():
    """(spindle, the delay to use: 0 without inject-delay), or skip with
    the reason."""
    missing = crash.missing_prerequisites()
    if missing:
        pytest.skip("cannot run the crash test: " + "; ".join(missing))
    spindle = _spindle_or_skip()
    delay = DELAY_MS if crash.has_inject_delay(spindle) else 0
    return spindle, delay


def _skip_without_inflight_tracking(spindle, workdir):
    if not crash.has_inflight_tracking(spindle, workdir):
        pytest.skip("spindle's exports have no inflight-tracking: after a "
                    "kill QEMU can only rewind each queue to its used index, "
                    "which loses or replays requests that completed out of "
                    "order (scripts/crash-soak shows it within a few dozen "
                    "cycles); the kill tests check the inflight region")


def _run(workdir, config):
    spindle, _ = _setup()
    try:
        return crash.run_crash(spindle, workdir, config)
    except crash.CrashSetupError as e:
        pytest.skip(str(e))


def _describe(report):
    return (f"failures: {report.failures}\nguest warnings: "
            f"{report.warnings[:10]}\ncycles: "
            f"{[c.line(report.config.cycles) for c in report.cycles]}\n"
            f"summary: {report.summary()}\nconsole tail:\n"
            f"{report.console_tail}")


def _check_survived(report, cycles):
    assert report.ok, _describe(report)
    assert len(report.cycles) == cycles
    assert all(c.recover_s is not None or c.next_early for c in report.cycles)
    assert report.counter("acked") > 0
    assert report.counter("checked") == report.counter("acked")
    assert report.host_checked > 0
    assert report.results.get("crash.exit") == "0", _describe(report)


def _check_inflight_used(report):
    """QEMU asked for the inflight region and handed it back on every
    reconnect, and (with requests held back) spindle resubmitted what was
    in flight."""
    assert report.qemu_requests["GET_INFLIGHT_FD"] >= 1, _describe(report)
    assert report.qemu_requests["SET_INFLIGHT_FD"] >= len(report.cycles) + 1
    if report.config.delay_ms:
        assert report.resubmitted > 0, report.spindle_inflight_lines


def test_blk_survives_kills():
    """spindle is started again the moment the killed one is reaped, as a
    supervisor does.  With aio=io_uring (the default) the killed process's
    image lock can outlive it by some milliseconds; the new process waits
    for it (block/file-posix.c), so every restart must succeed."""
    spindle, delay = _setup()
    with boot_dir("crash blk") as workdir:
        _skip_without_inflight_tracking(spindle, workdir)
        report = _run(workdir, crash.CrashConfig(
            cycles=CYCLES, delay_ms=delay, hung_s=HUNG_S))
        _check_survived(report, CYCLES)
        _check_inflight_used(report)


def test_blk_without_inflight_tracking_fails():
    """The same run with inflight-tracking=off: QEMU rewinds each queue to
    its used index, which with requests completing out of order loses one
    (the guest hangs) or runs one again (the guest's driver sees a used id
    that is not a request of its: "id N is not a head!", I/O errors)."""
    spindle, delay = _setup()
    if not delay:
        pytest.skip("spindle's blkdebug has no inject-delay: without "
                    "requests held back, a few kills do not reliably catch "
                    "one in flight behind completed ones")
    with boot_dir("crash blk, inflight-tracking=off") as workdir:
        _skip_without_inflight_tracking(spindle, workdir)
        report = _run(workdir, crash.CrashConfig(
            cycles=2, delay_ms=delay, hung_s=6.0, inflight="off"))
        assert not report.ok, _describe(report)
        assert report.qemu_requests["GET_INFLIGHT_FD"] == 0


def test_scsi_two_luns_write_and_verify():
    """The SCSI layout without kills (so without reconnect=, which QEMU
    before 8.2 refuses for vhost-user-scsi): both LUNs found, written and
    checked, here as where the kills run."""
    _setup()
    with boot_dir("crash scsi, no kills") as workdir:
        report = _run(workdir, crash.CrashConfig(
            cycles=0, kind="scsi", queues=2, smp=2, hung_s=HUNG_S))
        _check_survived(report, 0)
        assert report.host_checked == report.config.writers * report.config.blocks


def test_scsi_two_luns_survive_kills(monkeypatch):
    """virtio-scsi with two LUNs through the same kills, on a QEMU that
    can reconnect vhost-user-scsi-pci (8.2 or later: Debian 12's own 7.2
    cannot, so scripts/install-deps.sh unpacks one from bookworm-backports
    for this test alone)."""
    spindle, delay = _setup()
    # The QEMU chosen below goes into $SPINDLE_QEMU for this test only.
    monkeypatch.setenv("SPINDLE_QEMU", os.environ.get("SPINDLE_QEMU", ""))
    reason = crash.use_qemu_for_scsi_reconnect()
    if reason:
        pytest.skip(reason)
    with boot_dir("crash scsi") as workdir:
        _skip_without_inflight_tracking(spindle, workdir)
        report = _run(workdir, crash.CrashConfig(
            cycles=CYCLES, kind="scsi", queues=2, smp=2, writers=8,
            delay_ms=delay, hung_s=HUNG_S))
        _check_survived(report, CYCLES)
        _check_inflight_used(report)


def _crashio_on_file(tmp_path, meddle=None, seconds=1.5):
    """Run crashio (1 writer, 4 blocks) on a file in tmp_path for `seconds`,
    calling meddle(path) in the middle; return its results."""
    try:
        binary = crash.build_crashio(tmp_path / "cache")
    except crash.CrashSetupError as e:
        pytest.skip(str(e))
    exe = tmp_path / "crashio"
    exe.write_bytes(binary)
    exe.chmod(0o755)
    image = tmp_path / "disk.img"
    with open(image, "wb") as f:
        f.truncate(2 * crash.MiB)
    proc = subprocess.Popen([str(exe), str(image), "1", "4", "60", "77", "5"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    time.sleep(seconds / 2)
    if meddle:
        meddle(image)
    time.sleep(seconds / 2)
    out, _ = proc.communicate("stop\n", timeout=30)
    if "cannot open" in out:
        pytest.skip(f"no O_DIRECT on {tmp_path}'s file system: {out.strip()}")
    results, warnings, _ = crash.guest.parse_console(out)
    return proc.returncode, results, warnings


def _block(n):
    return (crash.FIRST_BLOCK + n) * crash.BLOCK


def test_crashio_passes_an_undisturbed_run(tmp_path):
    rc, results, warnings = _crashio_on_file(tmp_path)
    assert rc == 0 and results["crash.verdict"] == "ok", warnings
    assert int(results["crash.acked"]) > 0
    assert results["crash.checked"] == results["crash.acked"]


def test_crashio_finds_old_and_corrupt_blocks(tmp_path):
    """What the guest checks is checked: an older version of a block put
    back behind the writer's back (as a replayed write would) and a block
    overwritten with garbage are both found."""
    def meddle(image):
        with open(image, "r+b") as f:
            f.seek(_block(0))
            old = f.read(crash.BLOCK)
            time.sleep(0.2)            # the writer writes newer versions
            for _ in range(50):
                f.seek(_block(0))
                f.write(old)
                f.seek(_block(2))
                f.write(b"\xa5" * 512)
                f.flush()
                time.sleep(0.005)

    rc, results, warnings = _crashio_on_file(tmp_path, meddle)
    assert rc == 1 and results["crash.verdict"] == "fail"
    assert (int(results["crash.replayed"]) + int(results["crash.lost"])) > 0, warnings
    assert int(results["crash.corrupt"]) > 0, warnings
    assert any("writer 0 block 2" in w for w in warnings), warnings

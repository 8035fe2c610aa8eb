"""End-to-end: live migration of a guest on a Spindle disk, back and forth.

A real Linux guest (QEMU under TCG, 2 vCPUs) boots on a vhost-user-blk
export with 2 queues over 2 IOThreads and runs crashio (O_DIRECT writes,
each followed by a read-back of the writer's region) and readloop (O_DIRECT
reads of a region the host filled into buffers only the device writes,
checked after each pass).  One spindle serves the image's one node
through two exports, the second with allow-inactive=on, and hands the
image from the source's export to the destination's at each migration;
the two-spindles variant does the same with two spindles on one image, as
two hosts sharing the storage (the destination's node opened with
active=off, the image's lock passing from one process to the other).
The guest is migrated
over a UNIX socket to a second QEMU on the other export and back again,
three times (tests/e2e/migrate.py does the work): every migration must
complete, the guest must go on writing on the destination, crashio must
find nothing lost, replayed or corrupt, every read must return the host's
data (pages spindle wrote but did not mark in the dirty log would arrive
stale) and the image must hold the guest's last version of every block.
The same runs with a vhost-user-scsi disk of two LUNs (writers and
reads on both).

QEMU refused to migrate such a guest before spindle offered dirty logging
("Migration disabled: vhost-user backend lacks
VHOST_USER_PROTOCOL_F_LOG_SHMFD feature"); spindle must say that QEMU gave
it a log and switched logging on.  The guests run on QEMU 8.0 or later
(Debian 12's 7.2 loses pages the guest's CPU wrote when it migrates a TCG
guest, with any disk: tests/e2e/migrate.py), the one scripts/install-deps.sh
unpacks from bookworm-backports where the default is older.  Skipped, with the reason, when QEMU, a
kernel, busybox or a C compiler with a static C library is missing.
SPINDLE_E2E_KEEP=1 keeps the run's directory (consoles, spindle's log).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_e2e_blk import _spindle_or_skip, boot_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "e2e"))
import crash  # noqa: E402
import migrate  # noqa: E402

MIGRATIONS = 3


def _describe(report):
    return (f"failures: {report.failures}\nmigrations: "
            f"{[m.line(report.config.migrations) for m in report.migrations]}\n"
            f"guest warnings: {report.warnings[:10]}\nQEMU: "
            f"{report.qemu_messages[:10]}\nspindle: {report.spindle_log_lines}")


def _run(monkeypatch, what, config):
    """Run the migration test with config; skip, with the reason, where it
    cannot run.  Returns the report, checked for what every kind must
    show."""
    missing = migrate.missing_prerequisites()
    if missing:
        pytest.skip("cannot run the migration test: " + "; ".join(missing))
    spindle = _spindle_or_skip()
    # The QEMU chosen below goes into $SPINDLE_QEMU for this test only.
    monkeypatch.setenv("SPINDLE_QEMU", os.environ.get("SPINDLE_QEMU", ""))
    reason = migrate.use_qemu_for_migration()
    if reason:
        pytest.skip(reason)
    with boot_dir(what) as workdir:
        try:
            report = migrate.run_migrate(spindle, workdir, config)
        except (migrate.MigrateSetupError, crash.CrashSetupError) as e:
            pytest.skip(str(e))
    assert report.ok, _describe(report)
    assert len(report.migrations) == MIGRATIONS
    assert all(m.status == "completed" and m.resume_s is not None
               for m in report.migrations), _describe(report)
    assert report.counter("acked") > 0
    assert report.counter("checked") == report.counter("acked")
    assert report.results.get("crash.exit") == "0", _describe(report)
    assert report.host_checked > 0
    assert report.reads_ok > 0 and report.reads_after_migration > 0
    # The reader went on through the migrations, and every read checked
    # held the host's data (report.ok): with reads not logged, buffers
    # filled after the RAM was copied would reach the destination stale.
    assert report.reads_during_migrations > 0, _describe(report)
    # Each migration handed the node over: released by the source's
    # export when its rings stopped, taken by the destination's.
    for step in ("released node 'd0'", "took node 'd0'"):
        assert sum(step in line for line in report.spindle_log_lines) \
            == MIGRATIONS, _describe(report)
    # Both exports were given a log and switched logging on.
    for export in ("e0", "e1"):
        assert any(f"'{export}': SET_LOG_BASE" in line
                   for line in report.spindle_log_lines), _describe(report)
        assert any(f"'{export}': dirty logging on" in line
                   for line in report.spindle_log_lines), _describe(report)
    return report


@pytest.mark.parametrize("cross_process", [False, True],
                         ids=["one-spindle", "two-spindles"])
def test_blk_migrates_back_and_forth(monkeypatch, cross_process):
    report = _run(monkeypatch, "migrate blk", migrate.MigrateConfig(
        migrations=MIGRATIONS, queues=2, iothreads=2, smp=2,
        cross_process=cross_process))
    assert report.results.get("vda.hw_queues") == "2"


def test_scsi_migrates_back_and_forth(monkeypatch):
    """The same with a vhost-user-scsi disk of two LUNs (2 request queues
    over 2 IOThreads): crashio's writers are spread over both LUNs, and
    the reader reads each LUN's region in turn."""
    report = _run(monkeypatch, "migrate scsi", migrate.MigrateConfig(
        migrations=MIGRATIONS, kind="scsi", queues=2, iothreads=2, smp=2))
    assert report.results.get("scsi.disks") == "2", _describe(report)
    # Both LUNs were written (writer w writes LUN w % 2), and the image
    # check above found each writer's last versions there.
    for w in range(2):
        final = report.results.get(f"crash.final.w{w}", "").split(",")
        assert any(v not in ("0", "?") for v in final), _describe(report)


@pytest.mark.parametrize("args,message", [
    (["0"], "need at least one migration"),
    (["--backends", "spindle,nbd"], "unknown back-end 'nbd'"),
    (["--kind", "scsi"], "qemu-storage-daemon has no vhost-user-scsi"),
])
def test_migrate_soak_rejects_bad_options(args, message):
    """scripts/migrate-soak refuses bad options before it starts anything
    (exit 2, the reason on stderr)."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "migrate-soak"
    proc = subprocess.run([sys.executable, str(script), *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc
    assert message in proc.stderr, proc.stderr

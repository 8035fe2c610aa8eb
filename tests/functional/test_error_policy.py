"""Error policies of the exports: rerror / werror (vhost-user-blk), and
lun.N.rerror / lun.N.werror (vhost-user-scsi).

spindle-vu-client plays QEMU and the guest (docs/frontend.md).  The node is
a blkdebug filter (docs/block.md) that fails chosen requests, or a file on
a small tmpfs that really fills up.

- stop: the failed write is held and the queue takes nothing more (the
  requests the client posts after it stay in the ring: nothing completes
  until the resume), the monitor sends BLOCK_IO_ERROR naming the export,
  the node, the operation and the error, query-block-exports shows the
  export stopped; block-export-resume retries the held write and the queue
  goes on: every write completes without an error and reads back.
- report (the default): the client sees the error at once, no event.
- enospc over a full filesystem: the export stops with nospace, the test
  makes room, resumes, and the client's writes all complete and verify;
  then the same under a real Linux guest (QEMU under TCG, tests/e2e/),
  whose dd sees no I/O error and reads its data back (skipped, with the
  reason, where a guest cannot boot).
"""

import contextlib
import json
import os
import subprocess
import threading
import time

import pytest

import guest  # tests/e2e, on sys.path through conftest
from conftest import make_image, vu, vu_argv, vu_ok, wait_for
from qmp_util import SpindleQmp

IMAGE_SIZE = 16 << 20
LEN = 4096
CLIENT_BACKSTOP_S = 120


def blkdebug(image, rules=""):
    node = ("driver=blkdebug,node-name=disk,image.driver=file,"
            f"image.filename={image}")
    return ["--blockdev", node + rules]


def export(workdir, policy="", device="blk"):
    """The export e0 of node disk; policy: ",werror=stop" and the like,
    given to LUN 0 for scsi."""
    if device == "blk":
        what = f"type=vhost-user-blk,node-name=disk,writable=on{policy}"
    else:
        what = ("type=vhost-user-scsi,lun.0.node-name=disk,"
                "lun.0.writable=on" + policy.replace(",", ",lun.0."))
    return ["--object", "iothread,id=iot0", "--export",
            f"{what},id=e0,addr.type=unix,"
            f"addr.path={workdir / 'vu.sock'},iothread=iot0"]


# The commands of each device, and the index of its (first) request queue.
DEVICES = {
    "blk": ("write", "read", 0),
    "scsi": ("scsi-write", "scsi-read", 2),
}


def export_info(d):
    return next(e for e in d.qmp.cmd("query-block-exports")
                if e["id"] == "e0")


@contextlib.contextmanager
def client_running(client, workdir, cmds):
    """spindle-vu-client running cmds in the background; killed at the end
    if it is still running."""
    argv = vu_argv(client, workdir / "vu.sock", cmds,
                   extra=["--completion", "interrupt"])
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def finish_client(proc):
    out, err = proc.communicate(timeout=CLIENT_BACKSTOP_S)
    try:
        return proc.returncode, json.loads(out)
    except json.JSONDecodeError:
        pytest.fail(f"spindle-vu-client printed no JSON (status "
                    f"{proc.returncode}):\n{out}\n{err}")


def check_verified(rc, doc, read, count):
    """The client succeeded, and its count reads found their patterns."""
    assert rc == 0 and doc["ok"], doc
    reads = [r for r in doc["results"] if r["command"] == read]
    assert [r["verified"] for r in reads] == ["pattern"] * count


def check_event(ev, operation, nospace, reason, device="blk"):
    data = ev["data"]
    expected = {
        "device": "e0", "node-name": "disk", "operation": operation,
        "action": "stop", "nospace": nospace, "reason": reason,
        "id": "e0", "spindle-queue": DEVICES[device][2],
    }
    if device == "scsi":
        expected["spindle-lun"] = 0
    assert data == expected, data


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_stop_holds_and_resume_retries_in_order(spindle, client, workdir,
                                                device):
    # The write to sector 8 fails once: held, then retried by the resume.
    write, read, qi = DEVICES[device]
    image = make_image(workdir / "disk.img", IMAGE_SIZE)
    rules = (",inject-error.0.op=write,inject-error.0.sector=8,"
             "inject-error.0.once=on,inject-error.0.errno=5")
    args = [*blkdebug(image, rules),
            *export(workdir, ",werror=stop", device)]
    stopped, marker, go = (workdir / "stopped", workdir / "posted",
                           workdir / "go")
    # The third write goes into the ring once the export has stopped.
    cmds = [write, 0, LEN, "--pattern", 1,
            write, LEN, LEN, "--pattern", 2, "--no-wait",
            "wait-file", stopped, "--timeout", 60,
            write, 2 * LEN, LEN, "--pattern", 3, "--no-wait",
            "touch", marker, "wait-file", go, "--timeout", 60]
    for i in range(3):
        cmds += [read, i * LEN, LEN, "--verify", i + 1]
    with SpindleQmp(spindle, workdir, args).start() as d:
        assert "spindle-io-status" not in export_info(d)
        with client_running(client, workdir, cmds) as proc:
            check_event(d.qmp.event("BLOCK_IO_ERROR", timeout=30), "write",
                        False, "Input/output error", device)
            done = export_info(d)["spindle-queues"][qi]["requests"]
            stopped.touch()
            wait_for(lambda: marker.exists() or proc.poll() is not None,
                     "the client's marker (writes posted)")
            assert proc.poll() is None, proc.communicate()
            info = export_info(d)
            assert info["spindle-io-status"] == "stopped"
            # Nothing completed since the stop: the failed write is held,
            # the third waits in the ring.
            time.sleep(0.5)
            assert export_info(d)["spindle-queues"][qi]["requests"] == done
            assert d.qmp.cmd("block-export-resume", {"id": "e0"}) == {}
            # The held write and the third complete; then the client reads
            # (a guest does not read what it has not seen written).
            wait_for(lambda: export_info(d)["spindle-queues"][qi]["requests"]
                     == done + 2, "the held and the waiting write")
            go.touch()
            rc, doc = finish_client(proc)
        check_verified(rc, doc, read, 3)
        info = export_info(d)
        assert "spindle-io-status" not in info
        # The held write, the third and the three reads.
        assert info["spindle-queues"][qi]["requests"] == done + 5
        # Resuming an export that is not stopped does nothing.
        assert d.qmp.cmd("block-export-resume", {"id": "e0"}) == {}
        assert d.qmp.error("block-export-resume", {"id": "nope"}) == (
            "GenericError", "Export 'nope' is not found")
        assert d.stop() == 0, d.stderr()


@pytest.mark.parametrize("policy", ["", ",werror=report",
                                    ",rerror=stop,werror=enospc"])
@pytest.mark.parametrize("device", sorted(DEVICES))
def test_report_answers_the_error(spindle, client, workdir, policy, device):
    write = DEVICES[device][0]
    image = make_image(workdir / "disk.img", IMAGE_SIZE)
    rules = (",inject-error.0.op=write,inject-error.0.sector=8,"
             "inject-error.0.errno=5")
    args = [*blkdebug(image, rules), *export(workdir, policy, device)]
    with SpindleQmp(spindle, workdir, args).start() as d:
        rc, doc = vu(client, workdir / "vu.sock", write, LEN, LEN)
        assert rc == 1 and not doc["ok"], doc
        vu_ok(client, workdir / "vu.sock", write, 0, LEN)
        assert all(e["event"] != "BLOCK_IO_ERROR"
                   for e in d.qmp.drain_events())
        assert "spindle-io-status" not in export_info(d)


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_ignore_completes_as_success(spindle, client, workdir, device):
    read = DEVICES[device][1]
    image = make_image(workdir / "disk.img", IMAGE_SIZE)
    rules = (",inject-error.0.op=read,inject-error.0.sector=0,"
             "inject-error.0.errno=5")
    args = [*blkdebug(image, rules),
            *export(workdir, ",rerror=ignore", device)]
    with SpindleQmp(spindle, workdir, args).start():
        vu_ok(client, workdir / "vu.sock", read, 0, LEN)


@pytest.mark.parametrize("device", sorted(DEVICES))
@pytest.mark.parametrize("option", ["rerror", "werror"])
def test_bad_policy_is_refused(spindle, workdir, option, device):
    image = make_image(workdir / "disk.img", IMAGE_SIZE)
    proc = subprocess.run(
        [str(spindle), *blkdebug(image),
         *export(workdir, f",{option}=panic", device)],
        capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert option in proc.stderr and "stop" in proc.stderr, proc.stderr


# --------------------------------------------------------------------------
# A thin-provisioned image on a filesystem that fills up

TMPFS_SIZE = 8 << 20
FILLER = 5 << 20
CHUNK = 1 << 20


@pytest.fixture
def small_fs(workdir):
    mnt = workdir / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o",
                           f"size={TMPFS_SIZE}", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_enospc_stops_then_room_and_resume(spindle, client, workdir,
                                           small_fs, device):
    write, read, _ = DEVICES[device]
    image = make_image(small_fs / "disk.img", IMAGE_SIZE)
    filler = small_fs / "filler"
    filler.write_bytes(b"\xaa" * FILLER)
    args = ["--blockdev",
            f"driver=file,node-name=disk,filename={image}",
            *export(workdir, ",werror=enospc", device)]
    # 6 MiB of writes into 3 MiB of room.
    cmds = []
    for i in range(6):
        cmds += [write, i * CHUNK, CHUNK, "--pattern", i + 1]
    for i in range(6):
        cmds += [read, i * CHUNK, CHUNK, "--verify", i + 1]
    with SpindleQmp(spindle, workdir, args).start() as d:
        with client_running(client, workdir, cmds) as proc:
            check_event(d.qmp.event("BLOCK_IO_ERROR", timeout=30), "write",
                        True, os.strerror(28), device)
            assert export_info(d)["spindle-io-status"] == "stopped"
            time.sleep(0.5)
            assert proc.poll() is None    # the client waits, sees no error
            filler.unlink()               # make room
            d.qmp.cmd("block-export-resume", {"id": "e0"})
            rc, doc = finish_client(proc)
        check_verified(rc, doc, read, 6)
        assert "spindle-io-status" not in export_info(d)
        assert d.stop() == 0, d.stderr()


GUEST_IMAGE_SIZE = 32 << 20
GUEST_WRITE = 6 << 20            # into 3 MiB of room
GUEST_OFFSET = 1 << 20


def test_e2e_guest_fills_a_thin_image(spindle, workdir, small_fs):
    missing = guest.missing_prerequisites()
    if missing:
        pytest.skip("; ".join(missing))
    image = make_image(small_fs / "disk.img", GUEST_IMAGE_SIZE)
    filler = small_fs / "filler"
    filler.write_bytes(b"\xaa" * FILLER)
    args = ["--blockdev", f"driver=file,node-name=disk,filename={image}",
            *export(workdir, ",werror=enospc")]
    work = guest.blk_workload("vda", pattern=guest.pattern_bytes(
        GUEST_WRITE, seed=0x7e1), pattern_offset=GUEST_OFFSET)
    events = []

    def make_room(d):
        # In its own thread: the guest's write waits until the resume.
        try:
            events.append(d.qmp.event("BLOCK_IO_ERROR", timeout=150))
            filler.unlink()
            d.qmp.cmd("block-export-resume", {"id": "e0"})
        except Exception as e:    # reported by the asserts below
            events.append(e)

    with SpindleQmp(spindle, workdir, args).start() as d:
        helper = threading.Thread(target=make_room, args=(d,), daemon=True)
        helper.start()
        run = guest.run_guest([guest.Disk(str(workdir / "vu.sock"))],
                              work.script, files=work.files, timeout=180,
                              append_extra=guest.NO_FIRMWARE_DISK_PROBE)
        helper.join(10)
        assert events and not isinstance(events[0], Exception), events
        check_event(events[0], "write", True, os.strerror(28))
        run.check()
        assert run.results["vda.pattern_write_rc"] == "0", run.console
        assert run.results["vda.pattern_verify"] == "ok", run.console
        assert not run.warnings, run.warnings
        assert "I/O error" not in run.console, guest.tail(run.console)
        assert "spindle-io-status" not in export_info(d)

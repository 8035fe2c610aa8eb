"""End-to-end under libvirt: a guest libvirt starts does I/O on a Spindle disk.

The domain is the one docs/user-guide.md shows ("Connecting libvirt"): the
test reads that XML block from the guide and changes only what ties it to a
host (libvirtd.guest_domain_xml: TCG, 512 MiB, 2 vCPUs, the socket's path, a
direct kernel boot of the e2e kernel and initramfs, a serial console on a
UNIX socket).  So the guide's `<memoryBacking>` (memfd, shared), its
`<disk type='vhostuser'>` with `<reconnect enabled='yes'/>`, its
`<iothreads>` and its `<acpi/>` are what runs.

A session-wide libvirtd 9.0 of the test's own (tests/e2e/libvirtd.py:
session mode, every file in a temporary directory, started as `nobody`
when the tests run as root, so QEMU runs as another user than Spindle the
way libvirt-qemu does; Spindle's 0600 socket is chowned to it, as the guide
says) creates the domain transient and paused (`virsh create --paused`),
the test connects to its console and resumes it.  The guest, one boot for
the module:

  vda  64 MiB, num-queues=2 (the guide's queues='2'): the guest checks its
       size and queues, writes a pattern with O_DIRECT, reads it back and
       compares, reads a region the host wrote; then prints "ready" and
       waits.

While it waits the test runs `virsh domblklist`, `virsh domstats` and
`virsh dumpxml`.  Then it stops Spindle and starts a new one on the same
socket: QEMU comes back to it (`<reconnect>`), and the guest writes, reads
back and verifies a second pattern through it, then waits again.  `virsh
destroy` ends it: the transient domain is gone, Spindle sees its front-end
leave and exits 0 on SIGTERM, and the image holds both patterns.  libvirtd
is stopped by its pid at the end of the session.  About 60 s here.

Skipped, with the reason, where a guest cannot boot (see test_e2e_blk.py)
or where libvirtd is missing or cannot run (scripts/install-deps.sh
installs it).  SPINDLE_E2E_KEEP=1 keeps the boot's directory (console,
image, the domain XML and QEMU's log as libvirt wrote it).
"""

import os
import re
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

# The guest's data: the same pattern, tail and host-written region as the
# plain QEMU boots of test_e2e_blk.py.
from test_e2e_blk import (HOST_DATA, HOST_REGION, PATTERN, PATTERN_OFFSET, TAIL,
                          GuestResults, _spindle_or_skip, boot_dir, daemons,
                          guest, skip_without_guest)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

import libvirtd  # noqa: E402
from initramfs import build_initramfs, find_kernel  # noqa: E402

MiB = 1 << 20
GUIDE = REPO / "docs" / "user-guide.md"
GUIDE_SECTION = "## Connecting libvirt"

DOMAIN = "spindle-e2e"
VDA_SIZE = 64 * MiB
VDA_QUEUES = 2                 # the guide's <driver queues='2'/>
GUEST_VCPUS = 2
BOOT_TIMEOUT_S = 150           # to each stage; a boot takes about 10 s here
WAIT_IN_GUEST_S = 300          # the guest waits at most this long for the host

# Written after the host restarted Spindle, between PATTERN and HOST_REGION.
AFTER_RESTART_OFFSET = 4 * MiB
AFTER_RESTART = guest.pattern_bytes(1 * MiB, seed=0x11b7)


def _wait_for_host(stage):
    """Guest shell: say `stage`, then wait for a line on the console while
    the host looks at the running domain or restarts Spindle."""
    return f'echo "SPINDLE-STAGE {stage}"\nread -t {WAIT_IN_GUEST_S} line\n'


def guide_domain_xml():
    """The domain XML block of the guide's libvirt section."""
    text = GUIDE.read_text()
    start = text.index(GUIDE_SECTION)
    end = text.find("\n## ", start + len(GUIDE_SECTION))
    section = text[start:end if end >= 0 else None]
    match = re.search(r"```xml\n(.*?)```", section, re.S)
    assert match, f"no ```xml block in {GUIDE.name}'s {GUIDE_SECTION!r}"
    return match.group(1)


@pytest.fixture(scope="session")
def libvirt_daemon():
    """A libvirtd of the session's own, or a skip saying why it cannot run."""
    reasons = libvirtd.missing_prerequisites()
    if reasons:
        pytest.skip("cannot start libvirtd: " + "; ".join(reasons))
    base = Path(tempfile.mkdtemp(prefix="spindle-lv-"))
    daemon = libvirtd.Libvirtd(base)
    try:
        daemon.start()
    except libvirtd.LibvirtdError as e:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"libvirtd cannot run here: {e}")
    try:
        yield daemon
    finally:
        daemon.stop()
        if os.environ.get("SPINDLE_E2E_KEEP"):
            print(f"\nkept libvirtd's directory: {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


@dataclass
class Boot(GuestResults):
    run: guest.GuestRun
    domblklist: str
    domstats: dict
    live_xml: str
    qemu_log: str
    domains_after_destroy: list
    daemon_status: list            # each spindle's exit status, in order
    daemon_stderr: list            # and what it printed
    image: Path


def _virsh_stats(text):
    """`virsh domstats` output as a dict (key=value lines)."""
    pairs = (line.strip().partition("=") for line in text.splitlines())
    return {k: v for k, sep, v in pairs if sep}


def _make_image(path):
    with open(path, "wb") as f:
        f.truncate(VDA_SIZE)
        f.seek(HOST_REGION[0])
        f.write(HOST_DATA)


def _guest_script():
    """The guest's script and files: the verified I/O, "ready", wait; the
    second write after the host restarted Spindle, "again", wait."""
    first = guest.blk_workload("vda", pattern=PATTERN, pattern_offset=PATTERN_OFFSET,
                               tail_pattern=TAIL, host_region=HOST_REGION)
    second = guest.blk_workload("vda", pattern=AFTER_RESTART,
                                pattern_offset=AFTER_RESTART_OFFSET, name="vda2")
    script = (first.script + _wait_for_host("ready") + second.script
              + _wait_for_host("again"))
    return script, {**first.files, **second.files}


def _boot(lv, workdir):
    kernel, version = find_kernel()
    image = workdir / "vda.img"
    _make_image(image)
    script, files = _guest_script()
    initrd = build_initramfs(guest.default_cache_dir(), script, files=files,
                             kernel_version=version, out_dir=workdir)
    # QEMU (libvirtd's user) reads the initramfs and makes its console
    # socket here; Spindle's socket is handed to it once it exists.
    workdir.chmod(0o755)
    initrd.chmod(0o644)
    if not kernel.stat().st_mode & 0o004:
        # Some distributions keep /boot/vmlinuz-* root's (0600).
        kernel = Path(shutil.copy(kernel, workdir / "vmlinuz"))
        kernel.chmod(0o644)
    console_dir = lv.shared_dir(workdir / "console")
    exp = daemons.Export(str(image), str(workdir / "vda.sock"),
                         num_queues=VDA_QUEUES)
    xml = libvirtd.guest_domain_xml(
        guide_domain_xml(), DOMAIN, exp.socket, kernel, initrd,
        "console=ttyS0 panic=-1 loglevel=4 " + guest.NO_FIRMWARE_DISK_PROBE,
        console_dir / "console.sock", vcpus=GUEST_VCPUS)
    (workdir / "domain.xml").write_text(xml)

    program = _spindle_or_skip()
    spindles = [daemons.Daemon(program, [exp], "spindle", workdir).start()]
    console = libvirtd.Console(console_dir / "console.sock",
                               log=workdir / "console.log")

    def failed(what):
        lv.virsh("destroy", DOMAIN, check=False)
        spindles[-1].stop()
        pytest.fail(f"{what}\nconsole tail:\n{guest.tail(console.text)}\n"
                    f"QEMU's log (libvirt):\n{lv.qemu_log(DOMAIN)[-3000:]}\n"
                    f"spindle stderr:\n{spindles[-1].stderr()[-2000:]}",
                    pytrace=False)

    def wait_for_guest(stage):
        if not console.wait_for(f"SPINDLE-STAGE {stage}", BOOT_TIMEOUT_S):
            failed(f"the guest did not say {stage!r} within {BOOT_TIMEOUT_S} s")

    try:
        lv.give(exp.socket)
        lv.virsh("create", str(workdir / "domain.xml"), "--paused")
        console.connect()
        lv.virsh("resume", DOMAIN)
        wait_for_guest("ready")
        domblklist = lv.virsh("domblklist", DOMAIN).stdout
        domstats = _virsh_stats(lv.virsh("domstats", DOMAIN).stdout)
        live_xml = lv.virsh("dumpxml", DOMAIN).stdout
        # <reconnect>: a new Spindle on the same socket, and the guest
        # writes again (its requests wait in the rings until QEMU is back).
        spindles[0].stop()
        spindles.append(daemons.Daemon(program, [exp], "spindle", workdir,
                                       log_path=workdir / "spindle.1.stderr")
                        .start())
        lv.give(exp.socket)
        console.send("go\n")
        wait_for_guest("again")
        lv.virsh("destroy", DOMAIN)
        after = lv.domains()
    except (libvirtd.LibvirtdError, daemons.DaemonError) as e:
        failed(str(e))
    finally:
        console.close()
    qemu_log = lv.qemu_log(DOMAIN)
    status = [d.stop() for d in spindles]
    results, warnings, stages = guest.parse_console(console.text)
    run = guest.GuestRun(returncode=0, console=console.text, seconds=0,
                         command=["virsh", "create"], results=results,
                         warnings=warnings, stages=stages)
    return Boot(run, domblklist, domstats, live_xml, qemu_log, after, status,
                [d.stderr() for d in spindles], image)


@pytest.fixture(scope="module")
def boot(libvirt_daemon):
    skip_without_guest()
    _spindle_or_skip()
    with boot_dir("libvirt") as workdir:
        yield _boot(libvirt_daemon, workdir)


def test_guest_verifies_what_it_wrote(boot):
    assert boot.r("vda.workload") == "finished"
    assert boot.r("vda.direct") == "1", "busybox dd could not use O_DIRECT"
    boot.check_written("vda", PATTERN, TAIL)
    assert boot.r("vda.host_md5") == guest.md5(HOST_DATA)


def test_guest_sees_the_disk_as_the_xml_says(boot):
    assert boot.r("vda.present") == "1"
    assert int(boot.r("vda.size_sectors")) == VDA_SIZE // 512
    assert boot.r("vda.ro") == "0"
    assert int(boot.r("vda.hw_queues")) == VDA_QUEUES


def test_libvirt_gave_qemu_the_guides_devices(boot):
    """The shared memfd, the vhost-user-blk device with its queues and a
    reconnecting chardev on Spindle's socket, and the IOThread."""
    log = boot.qemu_log
    assert '"qom-type":"memory-backend-memfd"' in log and '"share":true' in log
    assert re.search(r"-chardev socket,id=(\S+),path=\S*vda\.sock,reconnect=10", log), log
    assert '"driver":"vhost-user-blk-pci","num-queues":2' in log
    assert '"qom-type":"iothread"' in log


def test_domblklist_lists_the_socket(boot):
    rows = [line.split() for line in boot.domblklist.splitlines() if line.strip()]
    assert ["vda", str(boot.image.parent / "vda.sock")] in rows, boot.domblklist


def test_domstats_reports_the_running_domain(boot):
    s = boot.domstats
    assert s.get("state.state") == "1", s          # VIR_DOMAIN_RUNNING
    assert s.get("vcpu.current") == str(GUEST_VCPUS), s
    assert s.get("block.count") == "1" and s.get("block.0.name") == "vda", s
    assert s.get("iothread.count") == "1", s


def test_live_xml_keeps_the_vhostuser_disk(boot):
    xml = boot.live_xml
    assert "<disk type='vhostuser' device='disk'" in xml
    assert "<reconnect enabled='yes' timeout='10'/>" in xml
    assert "<access mode='shared'/>" in xml and "<source type='memfd'/>" in xml


def test_destroy_removes_the_transient_domain(boot):
    assert DOMAIN not in boot.domains_after_destroy


def test_qemu_comes_back_to_a_restarted_spindle(boot):
    """<reconnect>: after Spindle was stopped and started again on the same
    socket, QEMU connected to the new one and the guest's next write and
    read went through it, unaware."""
    assert "front-end connected" in boot.daemon_stderr[1], boot.daemon_stderr[1]
    assert boot.r("vda2.workload") == "finished"
    for key in ("pattern_write_rc", "pattern_read_rc"):
        assert boot.r(f"vda2.{key}") == "0", key
    assert boot.r("vda2.pattern_verify") == "ok"
    assert not [w for w in boot.run.warnings if "insmod" not in w], boot.run.warnings


def test_spindle_exits_0_on_sigterm_with_or_without_a_guest(boot):
    """The first one is stopped under the running guest, the second after
    `virsh destroy`, whose QEMU left it."""
    assert "front-end disconnected" in boot.daemon_stderr[1], boot.daemon_stderr[1]
    assert boot.daemon_status == [0, 0], boot.daemon_stderr


def test_image_file_holds_the_guests_data(boot):
    data = boot.image.read_bytes()
    assert data[PATTERN_OFFSET:PATTERN_OFFSET + len(PATTERN)] == PATTERN
    assert data[-len(TAIL):] == TAIL
    assert data[HOST_REGION[0]:sum(HOST_REGION)] == HOST_DATA
    end = AFTER_RESTART_OFFSET + len(AFTER_RESTART)
    assert data[AFTER_RESTART_OFFSET:end] == AFTER_RESTART


def test_guide_xml_has_what_a_vhost_user_disk_needs():
    """Checked without libvirt: the guide's XML asks for what the test and a
    user rely on (the test boots that XML, so it must stay complete)."""
    dom = ET.fromstring(guide_domain_xml())
    assert dom.find("memoryBacking/source").get("type") == "memfd"
    assert dom.find("memoryBacking/access").get("mode") == "shared"
    disk = dom.find("devices/disk[@type='vhostuser']")
    assert disk is not None and disk.get("device") == "disk"
    assert disk.find("driver").attrib == {"name": "qemu", "type": "raw",
                                          "queues": str(VDA_QUEUES)}
    assert disk.find("source").get("type") == "unix"
    assert disk.find("source/reconnect").get("enabled") == "yes"
    assert dom.find("iothreads") is not None
    assert dom.find("features/acpi") is not None


def test_a_libvirtd_that_cannot_start_says_why():
    """What the skip says where libvirtd cannot run: its exit and its own
    words (here: a libvirtd.conf it refuses)."""
    if libvirtd.missing_prerequisites():
        pytest.skip("; ".join(libvirtd.missing_prerequisites()))

    class Broken(libvirtd.Libvirtd):
        def _write_config(self):
            conf = super()._write_config()
            conf.write_text(conf.read_text() + "no_such_setting = [\n")
            return conf

    base = Path(tempfile.mkdtemp(prefix="spindle-lv-"))
    try:
        daemon = Broken(base)
        with pytest.raises(libvirtd.LibvirtdError) as e:
            daemon.start()
        daemon.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert "libvirtd exited" in str(e.value)
    assert "syntax error" in str(e.value), str(e.value)

"""Boot a real Linux guest in QEMU (TCG) on vhost-user disks and read its results.

This is the end-to-end harness (README.md beside it).  A guest is Debian's
qemu-system-x86_64 under TCG (KVM is not needed), a Debian kernel from
/boot, and an initramfs built by initramfs.py whose /init runs a shell
script, prints what it finds on the serial console and powers off.  Guest
memory is a shared memfd, as vhost-user requires.

Lines the guest prints that matter:

    SPINDLE-RESULT key=value     a result; collected into GuestRun.results
    SPINDLE-STAGE name           progress (init, modules, done)
    SPINDLE-WARN text            something odd that is not fatal

Typical use:

    from guest import Disk, run_guest, blk_workload
    work = blk_workload("vda", pattern=PATTERN, pattern_offset=1 << 20)
    run = run_guest([Disk(sock, num_queues=4)], work.script, files=work.files,
                    smp=4, cache_dir=cache)
    run.check()                     # raises with the console if the guest failed
    run.results["vda.pattern_verify"]   # "ok"

Everything here uses only Python's standard library.
"""

import hashlib
import os
import random
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from daemons import die_with_parent
from initramfs import InitramfsError, build_initramfs, find_busybox, find_kernel

QEMU_NAMES = ("qemu-system-x86_64",)
DEFAULT_MEM_MB = 512
# What QEMU's vhost-user-blk-pci device is called; SCSI disks use the other.
DEVICE_MODELS = {"blk": "vhost-user-blk-pci", "scsi": "vhost-user-scsi-pci"}


# Kernel parameter that skips the boot code's EDD probe.  That probe reads the
# first sector of every BIOS disk through SeaBIOS's own virtio-blk driver, so
# a back-end that SeaBIOS cannot use hangs the boot before Linux starts.
# Workloads that test Linux's driver pass it to keep the two apart; a test of
# the firmware path boots without it (test_e2e_blk.py).
NO_FIRMWARE_DISK_PROBE = "edd=off"


class GuestError(RuntimeError):
    """The guest did not boot, timed out, or did not finish its script."""


def default_cache_dir():
    """Where built initramfs bases are kept between runs.

    $SPINDLE_E2E_CACHE, else $XDG_CACHE_HOME/spindle-e2e, else
    ~/.cache/spindle-e2e.  Never inside the source tree.
    """
    env = os.environ.get("SPINDLE_E2E_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "spindle-e2e"


def find_qemu():
    """Path of qemu-system-x86_64 ($SPINDLE_QEMU overrides), or None."""
    env = os.environ.get("SPINDLE_QEMU")
    if env:
        return Path(env) if os.access(env, os.X_OK) else None
    for name in QEMU_NAMES:
        path = shutil.which(name)
        if path:
            return Path(path)
    return None


def missing_prerequisites():
    """A list of human-readable reasons a guest cannot boot here (empty: it can)."""
    reasons = []
    if find_qemu() is None:
        reasons.append("qemu-system-x86_64 not found: install qemu-system-x86")
    try:
        find_kernel()
    except InitramfsError as e:
        reasons.append(str(e))
    try:
        find_busybox()
    except InitramfsError as e:
        reasons.append(str(e))
    if shutil.which("modprobe") is None and not os.access("/sbin/modprobe", os.X_OK):
        reasons.append("modprobe not found: install kmod")
    return reasons


@dataclass
class Disk:
    """A vhost-user disk as QEMU sees it: the daemon's socket and the device."""
    socket: str
    num_queues: int = 1
    kind: str = "blk"            # "blk" or "scsi"
    extra: str = ""              # more ",key=value" properties for -device
    reconnect: int = 0           # seconds between QEMU's tries to reconnect
                                 # when the back-end goes away (0: never)


@dataclass
class GuestRun:
    """What a boot produced."""
    returncode: int
    console: str
    seconds: float
    command: list
    results: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    stages: list = field(default_factory=list)

    @property
    def finished(self):
        """True if the guest's script ran to the end (it printed stage done)."""
        return "done" in self.stages

    def check(self):
        """Raise GuestError (with the console's tail) unless the guest finished."""
        if self.returncode != 0 or not self.finished:
            raise GuestError(
                f"guest did not finish (qemu exit {self.returncode}, stages "
                f"{self.stages}); console tail:\n{tail(self.console)}")
        return self


def tail(text, lines=40):
    return "\n".join(text.splitlines()[-lines:])


def parse_console(text):
    """Return (results, warnings, stages) from the guest's console output."""
    results, warnings, stages = {}, [], []
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        # The kernel may print on the same line; find the marker anywhere.
        for marker in ("SPINDLE-RESULT ", "SPINDLE-STAGE ", "SPINDLE-WARN "):
            pos = line.find(marker)
            if pos < 0:
                continue
            body = line[pos + len(marker):]
            if marker == "SPINDLE-RESULT ":
                key, sep, value = body.partition("=")
                if sep:
                    results[key.strip()] = value.strip()
            elif marker == "SPINDLE-STAGE ":
                stages.append(body.strip())
            else:
                warnings.append(body.strip())
    return results, warnings, stages


def qemu_command(kernel, initrd, disks, smp=1, mem_mb=DEFAULT_MEM_MB,
                 append_extra="", qemu=None, qemu_args=()):
    """The qemu-system-x86_64 argument list for a guest on `disks`."""
    qemu = qemu or find_qemu()
    if qemu is None:
        raise GuestError("qemu-system-x86_64 not found: install qemu-system-x86")
    append = "console=ttyS0 panic=-1 loglevel=4 " + append_extra
    cmd = [
        str(qemu),
        "-accel", "tcg",
        "-cpu", "max",
        "-smp", str(smp),
        "-m", f"{mem_mb}M",
        # vhost-user needs the guest's RAM in memory the daemon can map.
        "-object", f"memory-backend-memfd,id=mem,size={mem_mb}M,share=on",
        "-numa", "node,memdev=mem",
        "-kernel", str(kernel),
        "-initrd", str(initrd),
        "-append", append.strip(),
        "-nodefaults", "-nographic", "-serial", "stdio", "-monitor", "none",
        "-no-reboot",
    ]
    for i, disk in enumerate(disks):
        model = DEVICE_MODELS[disk.kind]
        dev = f"{model},chardev=vu{i},id=disk{i}"
        # vhost-user-scsi-pci spells it num_queues; without it QEMU gives
        # a SCSI disk one request queue per vCPU, whatever the back-end has.
        prop = "num-queues" if disk.kind == "blk" else "num_queues"
        dev += f",{prop}={disk.num_queues}"
        dev += disk.extra
        chardev = f"socket,id=vu{i},path={disk.socket}"
        if disk.reconnect:
            chardev += f",reconnect={disk.reconnect}"
        cmd += ["-chardev", chardev, "-device", dev]
    return cmd + list(qemu_args)


def run_guest(disks, script, files=None, timeout=90, smp=1,
              mem_mb=DEFAULT_MEM_MB, cache_dir=None, kernel=None,
              console_log=None, append_extra="", echo=False, qemu_args=(),
              on_line=None, on_start=None):
    """Boot a guest on `disks`, run `script` in it, return a GuestRun.

    `script` is shell code run by /init after modules are loaded (results are
    printed as "SPINDLE-RESULT key=value"); `files` maps guest paths to bytes
    to put in the initramfs.  The guest powers itself off; after `timeout`
    seconds QEMU is killed and GuestError raised.  The console is also written
    to `console_log` if given, and copied to stdout as it arrives if `echo`.
    `append_extra` is added to the kernel command line ("loglevel=7" to see
    the kernel's messages) and `qemu_args` to QEMU's ("-trace", "vhost*").

    `on_line`, if given, is called with each complete console line (without
    its line ending) as soon as it arrives, while the guest runs: a test can
    act on the host when the guest prints, say, "SPINDLE-STAGE ready".  The
    guest's console output waits meanwhile, so keep it short; an exception it
    raises stops the guest and propagates.

    `on_start`, if given, is called with QEMU's subprocess.Popen as soon as
    it runs, and QEMU's stdin is then a pipe: what the caller writes to
    proc.stdin reaches the guest's console (its /init's stdin), so a host
    thread can tell a running guest to stop; proc.kill() ends a guest that
    hangs.  Without it, the guest's console input is empty.
    """
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    kernel_path, version = find_kernel(kernel)
    work = Path(tempfile.mkdtemp(prefix="boot-", dir=_ensure(cache_dir)))
    try:
        initrd = build_initramfs(cache_dir, script, files=files,
                                 kernel_version=version, out_dir=work)
        cmd = qemu_command(kernel_path, initrd, disks, smp=smp, mem_mb=mem_mb,
                           append_extra=append_extra, qemu_args=qemu_args)
        return _run(cmd, timeout, console_log, echo, on_line, on_start)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _ensure(path):
    path.mkdir(parents=True, exist_ok=True)
    return path


def _run(cmd, timeout, console_log, echo, on_line=None, on_start=None):
    start = time.monotonic()
    chunks = []
    partial = ""                 # the console's last, unfinished line
    log = open(console_log, "w") if console_log else None
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if on_start else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=die_with_parent(signal.SIGKILL))
    if on_start:
        on_start(proc)
    fd = proc.stdout.fileno()
    timed_out = False
    stopped = False              # the loop ended (rather than an exception)
    try:
        while True:
            left = timeout - (time.monotonic() - start)
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            data = os.read(fd, 65536)
            if not data:            # QEMU closed its output: it is exiting
                break
            text = data.decode("utf-8", "replace")
            chunks.append(text)
            if log:
                log.write(text)
                log.flush()
            if echo:
                print(text, end="", flush=True)
            if on_line:
                partial += text
                *lines, partial = partial.split("\n")
                for line in lines:
                    on_line(line.rstrip("\r"))
        stopped = True
    finally:
        if stopped and not timed_out:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        if proc.stdin:
            try:
                proc.stdin.close()
            except OSError:
                pass
        if log:
            log.close()
    console = "".join(chunks).replace("\r\n", "\n")
    run = GuestRun(returncode=proc.returncode, console=console,
                   seconds=time.monotonic() - start, command=cmd)
    run.results, run.warnings, run.stages = parse_console(console)
    if timed_out:
        raise GuestError(f"guest timed out after {timeout} s (stages "
                         f"{run.stages}); console tail:\n{tail(console)}")
    return run


# --- the block workload -----------------------------------------------------------

@dataclass
class Workload:
    """Shell code for /init and the files (guest path -> bytes) it reads."""
    script: str
    files: dict


def pattern_bytes(size, seed):
    """A deterministic, incompressible byte pattern (the same for host and guest)."""
    return random.Random(seed).randbytes(size)


def md5(data):
    return hashlib.md5(data).hexdigest()


def blk_workload(dev="vda", pattern=b"", pattern_offset=0, tail_pattern=b"",
                 host_region=None, discard_region=None, try_write=False,
                 block=65536, name=None):
    """Shell code that inspects /dev/DEV and does verified I/O on it.

    - `pattern` is written at byte `pattern_offset` with O_DIRECT (when the
      guest's dd supports it; otherwise through the page cache, then sync and
      drop_caches), read back and compared in the guest;
    - `tail_pattern` is written the same way into the disk's last bytes;
    - `host_region` = (offset, length): a region the host filled before the
      boot; the guest prints its md5 so the host can compare;
    - `discard_region` = (offset, length): discarded with blkdiscard when the
      disk offers discard, after the writes;
    - `try_write`: write one block of zeroes at offset 0 and report whether
      it was refused (write_refused=1), for read-only disks.

    Offsets and lengths must be multiples of `block` (64 KiB by default).
    Results are printed as DEV.key=value; see the keys in the script.
    `name` (default: `dev`) replaces DEV in the keys and names the files;
    `dev` may then be a shell expression expanded in the guest ("$LUN0" for
    a SCSI disk, whose sdX name depends on the order the guest probed them).
    """
    files = {}
    name = name or dev
    lines = [f'D={name}', f'DEV=/dev/{dev}', f'S=/sys/block/{dev}', f'BS={block}']
    lines.append(_BLK_INSPECT)
    if pattern:
        assert pattern_offset % block == 0 and len(pattern) % block == 0
        files[f"/{name}-pattern.bin"] = pattern
        lines.append(_write_verify("pattern", f"/{name}-pattern.bin",
                                   pattern_offset // block, len(pattern) // block))
    if tail_pattern:
        assert len(tail_pattern) % block == 0
        files[f"/{name}-tail.bin"] = tail_pattern
        nblocks = len(tail_pattern) // block
        # The seek is computed in the guest from the size it sees.
        lines.append(f'TAIL_SEEK=$(( SIZE_BYTES / BS - {nblocks} ))')
        lines.append(_write_verify("tail", f"/{name}-tail.bin", "$TAIL_SEEK", nblocks))
    if host_region:
        off, length = host_region
        assert off % block == 0 and length % block == 0
        lines.append(
            f'r "$D.host_md5" "$(dd if=$DEV bs=$BS skip={off // block} '
            f'count={length // block} $IFLAG 2>/dev/null | md5sum | cut -d" " -f1)"')
    if discard_region:
        off, length = discard_region
        lines.append(
            'if [ "$(cat $S/queue/discard_max_bytes)" != 0 ]; then\n'
            f'    blkdiscard -o {off} -l {length} $DEV 2>/tmp/discard.err\n'
            '    r "$D.discard_rc" $?\n'
            '    [ -s /tmp/discard.err ] && w "blkdiscard: $(cat /tmp/discard.err)"\n'
            'fi')
    if try_write:
        lines.append(
            'if dd if=/dev/zero of=$DEV bs=$BS count=1 $OFLAG conv=notrunc,fsync '
            '2>/tmp/dd.err; then r "$D.write_refused" 0; else r "$D.write_refused" 1; fi')
    lines.append('r "$D.workload" finished')
    lines.append("fi   # $DEV present")
    return Workload(script=_BLK_HELPERS + "\n".join(lines) + "\n", files=files)


_BLK_HELPERS = r"""
r() { echo "SPINDLE-RESULT $1=$2"; }
w() { echo "SPINDLE-WARN $*"; }
sysval() { if [ -r "$1" ]; then cat "$1"; else echo none; fi; }
"""

_BLK_INSPECT = r"""
i=0
while [ ! -b $DEV ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
if [ ! -b $DEV ]; then
    r "$D.present" 0
    w "$DEV did not appear; /sys/block has: $(ls /sys/block)"
else
r "$D.present" 1
SIZE_SECTORS=$(cat $S/size)
SIZE_BYTES=$((SIZE_SECTORS * 512))
r "$D.size_sectors" $SIZE_SECTORS
if [ -r $S/serial ]; then r "$D.serial" "$(cat $S/serial)"; else r "$D.serial" "<no-sysfs-attr>"; fi
r "$D.hw_queues" $(ls $S/mq | wc -l)
r "$D.ro" $(sysval $S/ro)
r "$D.logical_block_size" $(sysval $S/queue/logical_block_size)
r "$D.physical_block_size" $(sysval $S/queue/physical_block_size)
r "$D.discard_max_bytes" $(sysval $S/queue/discard_max_bytes)
r "$D.discard_granularity" $(sysval $S/queue/discard_granularity)
r "$D.write_zeroes_max_bytes" $(sysval $S/queue/write_zeroes_max_bytes)
r "$D.max_segments" $(sysval $S/queue/max_segments)
r "$D.max_segment_size" $(sysval $S/queue/max_segment_size)
r "$D.max_hw_sectors_kb" $(sysval $S/queue/max_hw_sectors_kb)
r "$D.cache_type" "$(sysval $S/queue/write_cache)"
# O_DIRECT if this dd has it and the device takes it; else the page cache.
if dd if=$DEV of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null; then
    IFLAG=iflag=direct; OFLAG=oflag=direct; r "$D.direct" 1
else
    IFLAG=; OFLAG=; r "$D.direct" 0
fi
"""


def _write_verify(name, src, seek_blocks, nblocks):
    """Shell: write `src` at block `seek_blocks`, read back, compare, report."""
    return rf"""
dd if={src} of=$DEV bs=$BS seek={seek_blocks} $OFLAG conv=notrunc,fsync 2>/tmp/dd.err
rc=$?; r "$D.{name}_write_rc" $rc
[ $rc = 0 ] || w "dd write {name}: $(cat /tmp/dd.err)"
if [ -z "$OFLAG" ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi
dd if=$DEV of=/tmp/{name}.back bs=$BS skip={seek_blocks} count={nblocks} $IFLAG 2>/tmp/dd.err
rc=$?; r "$D.{name}_read_rc" $rc
[ $rc = 0 ] || w "dd read {name}: $(cat /tmp/dd.err)"
r "$D.{name}_md5" "$(md5sum < /tmp/{name}.back | cut -d' ' -f1)"
if cmp -s {src} /tmp/{name}.back; then r "$D.{name}_verify" ok; else r "$D.{name}_verify" mismatch; fi
rm -f /tmp/{name}.back
"""


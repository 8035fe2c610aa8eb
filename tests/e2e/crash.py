"""Kill spindle under a writing guest, again and again, and check the data.

The crash test of the end-to-end harness (README.md beside it), used by
scripts/crash-soak and tests/functional/test_e2e_crash.py:

    report = crash.run_crash(spindle, workdir, crash.CrashConfig(cycles=3))
    report.ok, report.failures, report.summary()

One spindle serves one export of raw files opened with cache.direct=on: a
vhost-user-blk disk with `queues` queues, or a vhost-user-scsi one with two
LUNs.  A guest (guest.run_guest, `smp` vCPUs) boots on it through
`-chardev socket,...,reconnect=1` and runs crashio (crashio.c, compiled
here with `cc -static` and put in the initramfs): `writers` threads, each
pinned to a vCPU and so to a queue, each writing blocks of its own region
with O_DIRECT and reading the region back after every acknowledged write.

The host then runs `cycles` crash cycles: let the guest write for a random
time (`run_s`), SIGKILL spindle, start it again at once with the same
command line (the stale socket is replaced, the dead process's image lock
went with it), and wait until the guest's count of acknowledged writes
grows again: QEMU has reconnected and the guest writes.  The time from the
kill to then is the cycle's recovery time.  With `early_kill` (a chance) a
kill comes instead 0-EARLY_KILL_S after the restart before it, without
waiting for the guest: while QEMU reconnects, hands the inflight region
over or the new process resubmits.  A guest that writes nothing for
`hung_s` after a restart, or a writer whose one write has waited `hung_s`
(crashio's SPINDLE-HUNG: a request the back-end lost) ends the run as a
hang.  Afterwards the host types "stop" on the guest's console, crashio
reports (lost or replayed acknowledged writes, corrupt blocks, I/O errors,
hung writers) and the host checks every block crashio vouches for in the
image files once QEMU has exited.

`delay_ms` puts a blkdebug filter (inject-delay) under the export that holds
back writes to the first two blocks of every region, so that requests
complete out of order and some are in flight behind completed ones at the
kill: the case QEMU's rewind to the used index gets wrong and the inflight
region (VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD) gets right.  `inflight` sets
the export's inflight-tracking=on|off (None: spindle's default).

QEMU's vhost-user trace (-trace vhost_user_write, in WORKDIR/qemu-trace.log)
shows whether it sent GET_INFLIGHT_FD (31) and SET_INFLIGHT_FD (32);
spindle's logs (WORKDIR/spindle.N.log, one per process) say how many
requests each restart resubmitted.

Only Python's standard library is used.
"""

import fcntl
import hashlib
import os
import random
import re
import shutil
import struct
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import daemons
import guest

MiB = 1 << 20
BLOCK = 4096
FIRST_BLOCK = 256                 # crashio's default: regions start 1 MiB in
MAGIC = 0x53504E444C435231        # crashio's block magic, "SPNDLCR1"
HEADER = struct.Struct("<QIIQQQ")   # magic, writer, block, seq, run, sum
DELAYED_BLOCKS = 2                # blocks of each region that delay_ms slows
# The byte of an image file whose OFD lock a writable spindle node holds
# (block/file-posix.c: "SPIN").
SPINDLE_LOCK_BYTE = 0x5350494E
LOCK_WAIT_MAX_S = 5.0

CRASHIO_SOURCE = Path(__file__).resolve().with_name("crashio.c")
GUEST_CRASHIO = "/crashio"

# QEMU tries the socket again once a second (reconnect=1), so no write can
# be acknowledged within this long of a kill: progress the guest prints
# then was the killed process's.
QUIET_AFTER_KILL_S = 0.3
# An early kill comes this long at most after the restart before it: QEMU
# reconnects about 1 s after a kill.
EARLY_KILL_S = 1.5
# After "stop", how long the guest may take to finish (on top of hung_s,
# which crashio gives its writers) before QEMU is killed.
STOP_GRACE_S = 60
# How long a guest may take to power off once crashio has reported.
POWEROFF_S = 15

# The counters crashio prints (crash.KEY), each a failure when not zero.
FAILURE_COUNTERS = ("lost", "replayed", "corrupt", "io_errors", "hung")
# A sanitizer's report in spindle's output (a build-san/ spindle).
SANITIZER_REPORT = re.compile(
    r"ERROR: (AddressSanitizer|LeakSanitizer|ThreadSanitizer)|"
    r"runtime error:|SUMMARY: \w+Sanitizer")
# What QEMU's vhost-user trace calls the inflight messages.
INFLIGHT_REQUESTS = {"GET_INFLIGHT_FD": 31, "SET_INFLIGHT_FD": 32}


class CrashSetupError(RuntimeError):
    """Something the crash test needs is missing; the message says what."""


@dataclass
class CrashConfig:
    cycles: int = 3
    kind: str = "blk"             # "blk" (one disk) or "scsi" (two LUNs)
    queues: int = 4
    smp: int = 4
    writers: int = 8
    blocks: int = 16              # per writer
    run_s: tuple = (0.5, 3.0)     # guest I/O between a recovery and a kill
    early_kill: float = 0.0       # chance that a kill comes 0-EARLY_KILL_S
                                  # after a restart, not after a recovery
    wait_for_lock: bool = False   # restart only once the image is unlocked
    hung_s: float = 30.0
    delay_ms: int = 0             # blkdebug inject-delay (0: plain file)
    inflight: str = None          # inflight-tracking=on|off, None: default
    seed: int = None
    image_size: int = 16 * MiB
    boot_timeout_s: float = 120.0


@dataclass
class Cycle:
    number: int
    ran_s: float                  # guest I/O before the kill
    acked_at_kill: int
    restart_s: float              # kill -> the new spindle listens
    lock_wait_s: float = 0.0      # kill -> the dead process's image lock
                                  # was gone (with wait_for_lock)
    early: bool = False           # killed ran_s after the last restart,
                                  # without waiting for the guest
    recover_s: float = None       # kill -> the guest writes again
    next_early: bool = False      # the next kill did not wait for it

    def line(self, cycles):
        if self.next_early:
            then = "the next kill does not wait for the guest"
        elif self.recover_s is None:
            then = "the guest never wrote again"
        else:
            then = f"guest writing again after {self.recover_s:.2f} s"
        ran = (f"{self.ran_s:.2f} s after the restart" if self.early
               else f"after {self.ran_s:.2f} s of I/O")
        lock = (f", its image lock outlived it by {self.lock_wait_s:.3f} s"
                if self.lock_wait_s else "")
        return (f"cycle {self.number}/{cycles}: killed {ran} "
                f"({self.acked_at_kill} writes acknowledged so far){lock}, "
                f"listening again in {self.restart_s:.3f} s, {then}")


@dataclass
class CrashioReport:
    """What a guest running crashio came to: the part the crash test and
    the migration test (migrate.py) share."""
    config: object
    workdir: Path
    results: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    host_checked: int = 0

    @property
    def ok(self):
        return not self.failures

    def counter(self, key):
        """crashio's crash.KEY as an int (0 when it printed none)."""
        try:
            return int(self.results.get(f"crash.{key}", 0))
        except ValueError:
            return 0


@dataclass
class CrashReport(CrashioReport):
    cycles: list = field(default_factory=list)
    qemu_requests: dict = field(default_factory=dict)   # name -> times sent
    qemu_messages: dict = field(default_factory=dict)   # QEMU's errors -> times
    resubmitted: int = 0          # spindle's count, over all restarts
    spindle_inflight_lines: list = field(default_factory=list)
    console_tail: str = ""
    seconds: float = 0.0

    def summary(self):
        """The totals scripts/crash-soak prints, as (label, value) pairs."""
        recover = [c.recover_s for c in self.cycles if c.recover_s is not None]
        locks = [c.lock_wait_s for c in self.cycles if c.lock_wait_s]
        return [
            ("cycles", len(self.cycles)),
            ("early kills (during a reconnect)",
             sum(1 for c in self.cycles if c.early)),
            ("acknowledged writes", self.counter("acked")),
            ("acknowledged writes checked", self.counter("checked")),
            ("lost", self.counter("lost")),
            ("replayed", self.counter("replayed")),
            ("guest errors", self.counter("io_errors") + self.counter("corrupt")),
            ("hangs", self.counter("hung") + sum(
                1 for f in self.failures if f.startswith("hang"))),
            ("blocks checked in the image", self.host_checked),
            ("recovery s (min/median/max)", _spread(recover)),
            *((("restarts that waited for the dead process's image lock",
                f"{len(locks)} (longest {max(locks):.3f} s)"),) if locks else ()),
            ("requests resubmitted by spindle", self.resubmitted),
            *((f"QEMU sent {name}", n) for name, n in self.qemu_requests.items()),
        ]


def _spread(values):
    if not values:
        return "-"
    values = sorted(values)
    return (f"{values[0]:.2f} / {values[len(values) // 2]:.2f} / "
            f"{values[-1]:.2f}")


# --- the guest program --------------------------------------------------------

def build_crashio(cache_dir, source_path=CRASHIO_SOURCE):
    """crashio's bytes (or another guest program's, source_path): the
    source compiled with `cc -static`, cached in cache_dir by a hash of
    it.  Raises CrashSetupError when there is no C compiler or no static
    C library."""
    source = source_path.read_bytes()
    name = source_path.stem
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"{name}-{hashlib.sha256(source).hexdigest()[:16]}"
    if path.is_file():
        return path.read_bytes()
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise CrashSetupError(f"no C compiler (cc) to build the guest's {name}")
    tmp = Path(f"{path}.tmp{os.getpid()}")
    proc = subprocess.run([cc, "-static", "-O2", "-pthread", "-o", str(tmp),
                           str(source_path)], capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise CrashSetupError(
            f"`{cc} -static` cannot build {source_path.name} (a static C "
            f"library, libc6-dev, is needed): {proc.stderr.strip()[-500:]}")
    os.replace(tmp, path)
    return path.read_bytes()


def missing_prerequisites():
    """Reasons the crash test cannot run here (empty: it can)."""
    reasons = guest.missing_prerequisites()
    if not (os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")):
        reasons.append("no C compiler (cc) to build the guest's crashio")
    return reasons


def qemu_version(qemu=None):
    """QEMU's (major, minor), or None if it cannot be told."""
    qemu = qemu or guest.find_qemu()
    try:
        out = subprocess.run([str(qemu), "--version"], capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"version (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def scsi_reconnect_unsupported(qemu=None):
    """Why QEMU cannot reconnect a vhost-user-scsi-pci device, or None.

    QEMU learnt it in 8.2.  7.2 does not wait for a reconnecting chardev to
    connect, so with reconnect=1 the device fails at startup ("Failed to set
    msg fds." / "vhost_backend_init failed: Protocol error"), and without
    it a back-end that dies is never reconnected: the guest's I/O stops.
    """
    version = qemu_version(qemu)
    if version is None:
        return "cannot tell QEMU's version"
    if version < (8, 2):
        return (f"QEMU {version[0]}.{version[1]} cannot reconnect "
                "vhost-user-scsi-pci (QEMU 8.2 learnt it): with reconnect=1 "
                "the device fails at startup with \"vhost_backend_init "
                "failed: Protocol error\"")
    return None


# Where scripts/install-deps.sh unpacks a QEMU from bookworm-backports.
BACKPORTS_QEMU_DIR = Path(os.environ.get(
    "SPINDLE_QEMU_BACKPORTS", "/var/cache/spindle/qemu-backports"))


def use_qemu_for_scsi_reconnect():
    """Make the guests of this process use a QEMU that can reconnect a
    vhost-user-scsi-pci device: the default one if it can, else the one
    install-deps unpacked from bookworm-backports (through $SPINDLE_QEMU).
    Returns None, or why there is none."""
    reason = scsi_reconnect_unsupported()
    if reason is None:
        return None
    backports = BACKPORTS_QEMU_DIR / "usr" / "bin" / "qemu-system-x86_64"
    if os.access(backports, os.X_OK) and \
            scsi_reconnect_unsupported(backports) is None:
        os.environ["SPINDLE_QEMU"] = str(backports)
        return None
    return (reason + "; and no newer QEMU in " + str(BACKPORTS_QEMU_DIR) +
            " (scripts/install-deps.sh unpacks one from bookworm-backports)")


def has_inject_delay(spindle):
    """Whether this spindle's blkdebug takes inject-delay rules: the node
    is parsed before the (deliberately broken) export is refused."""
    proc = subprocess.run(
        [str(spindle), "--blockdev", "driver=blkdebug,node-name=probe,"
         "image.driver=null-co,inject-delay.0.delay-ns=1",
         "--export", "type=none"], capture_output=True, text=True, timeout=30)
    return "inject-delay" not in proc.stdout + proc.stderr


def has_inflight_tracking(spindle, workdir):
    """Whether this spindle's exports take inflight-tracking=on: one that
    does starts and listens (in workdir, a short path)."""
    exp = daemons.Export("", str(Path(workdir) / "probe.sock"),
                         blockdev="driver=null-co,size=1M",
                         options=",inflight-tracking=on")
    daemon = daemons.Daemon(spindle, [exp], "spindle", workdir,
                            log_path=Path(workdir) / "probe.log")
    try:
        daemon.start()
    except daemons.DaemonError:
        return False
    finally:
        daemon.stop()
        Path(workdir, "probe.log").unlink(missing_ok=True)
    return True


# --- the guest's disks and script ---------------------------------------------

@dataclass
class _Layout:
    images: list                  # one per device, in crashio's order
    exports: list
    disks: list
    script: str


# The SCSI LUNs have different sizes, so that the guest can tell which sdX
# is which (sd names follow probe order).
_SCSI_EXTRA = MiB


def scsi_disks_script(sizes):
    """Shell that waits for len(sizes) SCSI disks and sets $D0, $D1, ...
    to the one of sizes[0], sizes[1], ... bytes (sd names follow probe
    order); and "$D0,$D1,..." for crashio."""
    find = "".join(f'        {size // 512}) D{d}=/dev/${{s##*/}} ;;\n'
                   for d, size in enumerate(sizes))
    wait = (r"""
i=0
while [ $(ls -d /sys/block/sd* 2>/dev/null | wc -l) -lt %d ] && [ $i -lt 100 ]; do
    sleep 0.1; i=$((i + 1))
done
for s in /sys/block/sd*; do
    case $(cat $s/size) in
""" % len(sizes) + find + """    esac
done
""")
    return wait, ",".join(f"$D{d}" for d in range(len(sizes)))


def _layout(config, workdir, run_id):
    images = []
    ndev = 2 if config.kind == "scsi" else 1
    for d in range(ndev):
        img = workdir / f"disk{d}.img"
        with open(img, "wb") as f:
            f.truncate(config.image_size + d * _SCSI_EXTRA)
        images.append(img)
    regions = -(-config.writers // ndev)
    if (FIRST_BLOCK + regions * config.blocks) * BLOCK > config.image_size:
        raise CrashSetupError(f"{config.writers} writers of {config.blocks} "
                              "blocks do not fit in the image")
    sock = str(workdir / "vu.sock")
    options = (f",inflight-tracking={config.inflight}" if config.inflight
               else "")
    nodes = [_node(config, img, regions) for img in images]
    if config.kind == "scsi":
        exports = [daemons.ScsiExport(
            [daemons.ScsiLun(str(img), writable=True, **node)
             for img, node in zip(images, nodes)],
            sock, num_queues=config.queues, options=options)]
        wait, devices = scsi_disks_script(
            [config.image_size + d * _SCSI_EXTRA for d in range(ndev)])
    else:
        exports = [daemons.Export(str(images[0]), sock,
                                  num_queues=config.queues, options=options,
                                  **nodes[0])]
        devices = "/dev/vda"
        wait = ("i=0\nwhile [ ! -b /dev/vda ] && [ $i -lt 100 ]; do "
                "sleep 0.1; i=$((i + 1)); done\n"
                'echo "SPINDLE-RESULT vda.hw_queues=$(ls /sys/block/vda/mq | '
                'wc -l)"\n')
    # Without kills, no reconnect=: QEMU before 8.2 cannot start a
    # vhost-user-scsi device with it, and this way the SCSI layout is
    # checked there too.
    disks = [guest.Disk(sock, num_queues=config.queues, kind=config.kind,
                        reconnect=1 if config.cycles else 0)]
    # Longer than any run can take: the host stops crashio with "stop".
    max_s = config.boot_timeout_s + config.cycles * (
        config.run_s[1] + 2 * config.hung_s) + 600
    script = (wait +
              f"chmod 755 {GUEST_CRASHIO}\n"
              f"{GUEST_CRASHIO} {devices} {config.writers} {config.blocks} "
              f"{max_s:.0f} {run_id} {config.hung_s:g}\n"
              'echo "SPINDLE-RESULT crash.exit=$?"\n')
    return _Layout(images, exports, disks, script)


def _node(config, image, regions):
    """The node options (daemons.Export / ScsiLun keywords) of one image."""
    if not config.delay_ms:
        return {"node_opts": ",cache.direct=on"}
    rules = []
    for r in range(regions):
        first = (FIRST_BLOCK + r * config.blocks) * (BLOCK // 512)
        rule = f"inject-delay.{r}"
        rules += [f"{rule}.op=write", f"{rule}.sector={first}",
                  f"{rule}.sectors={DELAYED_BLOCKS * BLOCK // 512}",
                  f"{rule}.delay-ns={config.delay_ms * 1000000}"]
    return {"blockdev": ",".join(
        ["driver=blkdebug", "image.driver=file", f"image.filename={image}",
         "image.cache.direct=on", *rules])}


# --- the run ----------------------------------------------------------------------

class _GuestState:
    """What the console said so far; written by the console reader."""

    def __init__(self):
        self.cond = threading.Condition()
        self.writing = False
        self.acked = 0
        self.progress_at = 0.0
        self.hung = []
        self.verdict = None           # crashio's: "ok" or "fail"
        self.finished = False
        self.proc = None
        self.run = None
        self.error = None

    def on_line(self, line):
        now = time.monotonic()
        with self.cond:
            if "SPINDLE-PROGRESS acked=" in line:
                try:
                    self.acked = int(line.split("acked=", 1)[1].split()[0])
                except (ValueError, IndexError):
                    return
                self.progress_at = now
            elif "SPINDLE-STAGE writing" in line:
                self.writing = True
            elif "SPINDLE-HUNG" in line:
                self.hung.append(line[line.find("SPINDLE-HUNG"):])
            elif "SPINDLE-RESULT crash.verdict=" in line:
                self.verdict = line.split("crash.verdict=", 1)[1].strip()
            else:
                return
            self.cond.notify_all()

    def on_start(self, proc):
        self.proc = proc

    def wait(self, predicate, timeout, until_hung=True):
        """Wait until predicate() (under the lock) or the guest ended or,
        with until_hung, a writer hung; return predicate()."""
        with self.cond:
            self.cond.wait_for(
                lambda: (predicate() or self.finished or
                         (until_hung and self.hung)), timeout)
            return predicate()


def run_crash(program, workdir, config, log=lambda text: None):
    """Run the crash test (see the module's docstring); return a CrashReport.

    `program` is the spindle binary, `workdir` a directory with a short
    path (UNIX socket paths are limited to 107 bytes) where the images,
    logs and console are kept.  `log(text)` is called with each cycle's
    line as it ends.  Raises CrashSetupError if a prerequisite is missing
    or spindle does not start at all (an option it lacks, for example).
    """
    start = time.monotonic()
    workdir = Path(workdir)
    rng = random.Random(config.seed)
    run_id = rng.getrandbits(48) | 1
    report = CrashReport(config, workdir)
    crashio = build_crashio(guest.default_cache_dir())
    layout = _layout(config, workdir, run_id)
    daemon = daemons.Daemon(program, layout.exports, "spindle", workdir,
                            log_path=workdir / "spindle.0.log")
    state = _GuestState()
    trace_log = workdir / "qemu-trace.log"

    def guest_main():
        try:
            state.run = guest.run_guest(
                layout.disks, layout.script, files={GUEST_CRASHIO: crashio},
                timeout=_guest_timeout(config), smp=config.smp,
                console_log=workdir / "console.log",
                append_extra=guest.NO_FIRMWARE_DISK_PROBE,
                qemu_args=("-trace", "vhost_user_write", "-D", str(trace_log)),
                on_line=state.on_line, on_start=state.on_start)
        except Exception as e:     # reported by the main thread
            state.error = e
        finally:
            with state.cond:
                state.finished = True
                state.cond.notify_all()

    # spindle is started (and restarted) by this thread, and QEMU by the
    # guest thread: each dies with the thread that started it (the
    # launchers' PR_SET_PDEATHSIG follows the thread).
    try:
        daemon.start()
    except daemons.DaemonError as e:
        raise CrashSetupError(f"spindle did not start: {e}") from None
    thread = threading.Thread(target=guest_main, name="crash-guest")
    thread.start()
    try:
        _cycles(config, daemon, state, rng, report, log)
    finally:
        _stop_guest(config, state, thread)
        stop_spindle(daemon, report)
    _collect(config, layout, state, report, trace_log)
    report.seconds = time.monotonic() - start
    return report


def stop_spindle(daemon, report):
    """Stop spindle with SIGTERM; a status other than 0 is a failure."""
    status = daemon.stop()
    if status != 0:
        report.failures.append(f"spindle exited with status {status} at SIGTERM")


def _guest_timeout(config):
    return (config.boot_timeout_s + config.cycles * (config.run_s[1] + 10) +
            3 * config.hung_s + STOP_GRACE_S + 60)


def _cycles(config, daemon, state, rng, report, log):
    if not state.wait(lambda: state.writing and state.acked > 0,
                      config.boot_timeout_s):
        if not state.hung:
            report.failures.append("the guest did not start writing within "
                                   f"{config.boot_timeout_s:g} s")
        return
    early = False
    for number in range(1, config.cycles + 1):
        # An early kill comes while QEMU reconnects, hands over the
        # inflight region or the new process resubmits.
        ran = rng.uniform(0, EARLY_KILL_S) if early else rng.uniform(*config.run_s)
        t_run = time.monotonic()
        state.wait(lambda: False, ran)
        if state.finished or state.hung:
            break
        with state.cond:
            acked = state.acked
        t_kill = time.monotonic()
        daemon.kill()
        lock_wait = (_wait_unlocked(daemon.exports, t_kill)
                     if config.wait_for_lock else 0.0)
        daemon.log_path = daemon.stderr_path = (
            daemon.workdir / f"spindle.{number}.log")
        try:
            daemon.start()
        except daemons.DaemonError as e:
            report.failures.append(_restart_failure(e))
            return
        cycle = Cycle(number, t_kill - t_run, acked,
                      time.monotonic() - t_kill, lock_wait, early=early)
        report.cycles.append(cycle)
        early = number < config.cycles and rng.random() < config.early_kill
        if early:
            cycle.next_early = True
            log(cycle.line(config.cycles))
            continue
        time.sleep(max(0.0, t_kill + QUIET_AFTER_KILL_S - time.monotonic()))
        with state.cond:
            base = state.acked
        if state.wait(lambda: state.acked > base, config.hung_s):
            cycle.recover_s = state.progress_at - t_kill
        log(cycle.line(config.cycles))
        if cycle.recover_s is None:
            break
    # The last stretch: every writer writes and checks after the last
    # recovery (or, without cycles, at all) before the guest is stopped.
    if not (state.hung or state.finished) and not (
            report.cycles and report.cycles[-1].recover_s is None):
        state.wait(lambda: False, config.run_s[0])
    if state.hung:
        report.failures.append(f"hang: {state.hung[0]}")
    elif state.finished:
        report.failures.append("the guest ended before the cycles did")
    elif report.cycles and report.cycles[-1].recover_s is None and not early:
        report.failures.append(
            f"hang: the guest acknowledged no write for {config.hung_s:g} s "
            f"after restart {report.cycles[-1].number}")


def _restart_failure(error):
    text = f"spindle did not start again: {error}"
    if "Failed to get write lock" in str(error):
        text = ("spindle did not start again: the killed process's image "
                "lock was still held (" + LOCK_OUTLIVES_PROCESS + "); " + text)
    return text


# Why a killed spindle's image lock can outlive it (scripts/crash-soak and
# tests/functional/test_e2e_crash.py name it).
LOCK_OUTLIVES_PROCESS = (
    "with aio=io_uring, the default, the kernel tears a killed process's "
    "ring down in a worker after the process is reaped, and requests still "
    "in flight keep the image's open file description, and so its OFD lock, "
    "until then")


def _image_locked(path):
    """Whether someone holds spindle's lock byte of the image at path."""
    fd = os.open(path, os.O_RDWR)
    try:
        fl = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET,
                         SPINDLE_LOCK_BYTE, 1, 0)
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, fl)
        except OSError:
            return True
        return False
    finally:
        os.close(fd)            # and with it the lock just taken


def _wait_unlocked(exports, since):
    """Wait (at most LOCK_WAIT_MAX_S) until no one holds the lock of any
    image of `exports`; return how long after `since` that was, 0.0 if it
    was free at once."""
    images = [lun.image for exp in exports
              for lun in (exp.luns if isinstance(exp, daemons.ScsiExport)
                          else [exp])]
    waited = False
    while (any(_image_locked(p) for p in images) and
           time.monotonic() - since < LOCK_WAIT_MAX_S):
        waited = True
        time.sleep(0.001)
    return time.monotonic() - since if waited else 0.0


def _stop_guest(config, state, thread):
    """Type "stop" on the guest's console, wait for crashio's results and
    for QEMU to exit; kill QEMU if it does not, at once if crashio failed
    (a guest with a hung write cannot power off: it waits for that write)."""
    proc = state.proc
    if proc is not None and proc.poll() is None:
        try:
            proc.stdin.write(b"stop\n")
            proc.stdin.flush()
        except (OSError, ValueError):
            pass
    state.wait(lambda: state.verdict, config.hung_s + STOP_GRACE_S,
               until_hung=False)
    thread.join(POWEROFF_S if state.verdict == "ok" else 1)
    if thread.is_alive() and proc is not None:
        proc.kill()
        thread.join()


def _collect(config, layout, state, report, trace_log):
    run = state.run
    console = run.console if run else _read(report.workdir / "console.log")
    report.console_tail = guest.tail(console, 60)
    for line in console.splitlines():
        pos = line.find("qemu-system-x86_64: ")
        if pos >= 0:
            text = line[pos + len("qemu-system-x86_64: "):].strip()
            report.qemu_messages[text] = report.qemu_messages.get(text, 0) + 1
    if state.error is not None:
        report.failures.append(f"the guest failed: {state.error}")
    if run is not None:
        report.results = run.results
        report.warnings = [w for w in run.warnings if "insmod" not in w]
        if "crash.verdict" not in run.results:
            report.failures.append("the guest printed no crashio results")
        elif not run.finished:
            report.failures.append("the guest did not finish its script")
    add_crashio_failures(report)
    _check_images(config, layout, report)
    trace = _read(trace_log)
    for name, code in INFLIGHT_REQUESTS.items():
        report.qemu_requests[name] = len(
            re.findall(rf"vhost_user_write req:{code} ", trace))
    logs = "".join(_read(p) for p in sorted(report.workdir.glob("spindle.*.log")))
    report.spindle_inflight_lines = [
        line for line in logs.splitlines()
        if "INFLIGHT_FD" in line or "resubmitted" in line]
    report.resubmitted = sum(
        int(n) for n in re.findall(r"(\d+) requests? resubmitted", logs))
    sanitizer = [line for line in logs.splitlines()
                 if SANITIZER_REPORT.search(line)]
    if sanitizer:
        report.failures.append(f"a sanitizer report in spindle's output: "
                               f"{sanitizer[0]}")


def add_crashio_failures(report):
    """Add to report.failures what crashio's counters (report.results)
    say went wrong; also used by migrate.py."""
    for key in FAILURE_COUNTERS:
        if report.counter(key):
            report.failures.append(f"{report.counter(key)} {key.replace('_', ' ')}"
                                   " (crashio)")
    if report.results.get("crash.verdict") == "fail" and not any(
            "(crashio)" in f for f in report.failures):
        report.failures.append("crashio says fail")


def _check_images(config, layout, report):
    """Every block crashio vouches for (crash.final.wN) holds that version
    in the image file."""
    ndev = len(layout.images)
    images = [p.read_bytes() for p in layout.images]
    bad = []
    for w in range(config.writers):
        final = report.results.get(f"crash.final.w{w}")
        if final is None:
            continue
        image = images[w % ndev]
        first = FIRST_BLOCK + (w // ndev) * config.blocks
        for b, want in enumerate(final.split(",")):
            if want == "?":
                continue
            off = (first + b) * BLOCK
            magic, writer, block, seq, _, _ = HEADER.unpack_from(image, off)
            if want == "0":
                ok = image[off:off + BLOCK] == bytes(BLOCK)
            else:
                ok = (magic, writer, block, seq) == (MAGIC, w, b, int(want))
            report.host_checked += 1
            if not ok:
                bad.append(f"writer {w} block {b}: image has version {seq}, "
                           f"the guest's last acknowledged is {want}")
    if bad:
        report.failures.append(f"{len(bad)} blocks differ in the image "
                               f"file: {'; '.join(bad[:5])}")


def _read(path):
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""

"""Migrate a guest that writes and reads its Spindle disk between two QEMUs.

The live-migration test of the end-to-end harness (README.md beside it),
used by tests/functional/test_e2e_migrate.py:

    report = migrate.run_migrate(spindle, workdir, migrate.MigrateConfig())
    report.ok, report.failures, report.migrations

One spindle serves the raw image's node through two exports, each on its
own socket, each with `queues` queues over two IOThreads; the second has
allow-inactive=on, which lets it share the node with the first, and
spindle hands the image from one to the other at each migration (the
source's export releases the node when QEMU stops its rings with dirty
logging on, the destination's takes it when its rings start: docs/cli.md,
"Live migration").  With `cross_process`, two spindles serve it instead,
one export each, as two hosts sharing the storage would: the second opens
its node with active=off, and the image's lock passes from one process to
the other at each migration.  (qemu-storage-daemon, flavour "qsd", gets
two file nodes with locking=off instead.)  A guest (guest.qemu_command: TCG, RAM
in a shared memfd) boots on export 0 and runs crashio (crashio.c): `writers` threads
writing O_DIRECT blocks and reading their regions back after every
acknowledged write.  With `reader`, readloop (readloop.c) runs beside it:
it reads a region the host filled before the boot (region_pattern(): no
two blocks alike) with O_DIRECT, block after block, into a set of buffers
that only the device writes, buffer i getting another block at every pass,
and checks every buffer after each pass.  The data of those reads is
written into guest memory by the back-end, so a page it wrote after the
migration had copied it, and did not mark in the dirty log, reaches the
destination holding an earlier pass's block, and the check after the
migration fails.  Reads go on through every migration: each migration
counts the reads checked while it ran, and after each the test waits for
two passes' worth on the destination.

Each migration starts a destination QEMU with the same command line plus
`-incoming unix:SOCK` on the other export, sends `migrate` to the source
over QMP, waits for `completed`, records query-migrate's total time and
downtime, waits until the guest (now on the destination) acknowledges
writes again, and makes the source quit.  The next migration goes back to
the first export.  At the end the host types "stop" on the last QEMU's
console, crashio reports, and every block crashio vouches for is checked
in the image file.

With kind="scsi" the disk is a vhost-user-scsi one with two LUNs, each
over its own image (the second 1 MiB bigger, so that the guest can tell
its sdX apart), each image's node served by both exports the same way:
crashio's writers are spread over the two LUNs, the reader reads each
LUN's region in turn, and both images are checked.  qemu-storage-daemon has no vhost-user-scsi
export, so that is spindle only.

QEMU 7.2 (Debian 12's) cannot be used: under TCG its migration loses
pages the guest's CPU wrote in the last moments (a guest's timer counters,
its random pool, the virtio driver's state), so the destination's kernel
crashes or its virtio driver reports "id N is not a head!" within a
migration or two, on a Spindle disk, on qemu-storage-daemon and on QEMU's
own virtio-blk alike.  `compare_memory` shows it: the destination starts
paused, and once it has loaded everything both guests' memories are saved
and compared page by page (they must be equal), and `qemu_disk` runs the
same guest without vhost-user as a control.  QEMU 10.0 (scripts/
install-deps.sh unpacks one from bookworm-backports) keeps every page;
use_qemu_for_migration() picks it.

Only Python's standard library is used.
"""

import json
import os
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import crash
import daemons
import guest
from initramfs import build_initramfs, find_kernel

MiB = 1 << 20
U64 = (1 << 64) - 1
GUEST_CRASHIO = "/crashio"
GUEST_READLOOP = "/readloop"
READLOOP_SOURCE = Path(__file__).resolve().with_name("readloop.c")
# The region the reader reads: after crashio's regions (1 MiB in).
READ_OFFSET = 8 * MiB
READ_BLOCK = 64 * 1024
# The second SCSI LUN is this much bigger than the first, so that the guest
# can tell them apart.
SCSI_EXTRA = MiB
# Lines of spindle's log about dirty logging and the hand-over of the image
# (docs/cli.md, "Live migration").
LOG_LINES = re.compile(r"SET_LOG_BASE|dirty logging|LOG_FD|dirty log|"
                       r"released node|took node|rings not started")
MIGRATE_STATES_DONE = ("completed", "failed", "cancelled")


class MigrateSetupError(RuntimeError):
    """Something the migration test needs is missing; the message says what."""


@dataclass
class MigrateConfig:
    migrations: int = 3
    queues: int = 2
    iothreads: int = 2
    smp: int = 2
    writers: int = 4
    blocks: int = 16              # per writer
    reader: bool = True           # a read-verify loop beside crashio
    read_size: int = 4 * MiB
    run_s: float = 2.0            # guest I/O before each migration
    migrate_timeout_s: float = 60.0
    resume_timeout_s: float = 30.0
    hung_s: float = 20.0
    boot_timeout_s: float = 120.0
    image_size: int = 16 * MiB
    mem_mb: int = 512
    seed: int = 1
    qemu_disk: bool = False       # control: QEMU's own virtio-blk, no vhost-user
    accel: str = "tcg"            # "tcg,thread=single": one thread for all vCPUs
    flavour: str = "spindle"      # or "qsd": qemu-storage-daemon (one IOThread)
    kind: str = "blk"             # or "scsi": vhost-user-scsi, two LUNs
                                  # (spindle only)
    trace: bool = False           # QEMU's vhost_user_* trace in trace.N.log
    compare_memory: bool = False  # diagnosis: the destination starts paused
                                  # (-S), both memories are saved and compared
    cross_process: bool = False   # spindle: one daemon per export, as on two
                                  # hosts sharing the images


@dataclass
class Migration:
    number: int
    source: int                   # export index
    dest: int
    status: str = ""
    total_ms: int = None          # query-migrate's total-time
    downtime_ms: int = None
    setup_ms: int = None
    transferred: int = None       # bytes
    wall_s: float = 0.0           # migrate command -> completed, as seen here
    resume_s: float = None        # completed -> the guest writes again
    reads: int = 0                # reads the reader completed and checked
                                  # while the migration ran (as the console
                                  # told, so roughly)
    error: str = ""
    differing_pages: list = None  # compare_memory: guest pages that differ

    def line(self, total):
        if self.status != "completed":
            return (f"migration {self.number}/{total} export {self.source} -> "
                    f"{self.dest}: {self.status} {self.error}")
        resumed = (f"guest writing again {self.resume_s:.2f} s after"
                   if self.resume_s is not None else "the guest never wrote again")
        return (f"migration {self.number}/{total} export {self.source} -> "
                f"{self.dest}: completed, total {self.total_ms} ms, downtime "
                f"{self.downtime_ms} ms, setup {self.setup_ms} ms, "
                f"{(self.transferred or 0) / MiB:.1f} MiB sent, "
                f"{self.reads} reads checked during it; {resumed}")


@dataclass
class MigrateReport(crash.CrashioReport):
    migrations: list = field(default_factory=list)
    reads_ok: int = 0
    reads_bad: int = 0
    reads_after_migration: int = 0
    spindle_log_lines: list = field(default_factory=list)
    qemu_messages: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def reads_during_migrations(self):
        return sum(m.reads for m in self.migrations)


# --- QMP, the little that is needed ----------------------------------------------

class Qmp:
    """A QMP client over a UNIX socket: capabilities, then commands; events
    are skipped."""

    def __init__(self, path, timeout=30.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.file = self.sock.makefile("rb")
        self._read()                       # the greeting
        self.command("qmp_capabilities")

    def _read(self):
        line = self.file.readline()
        if not line:
            raise ConnectionError("QMP connection closed")
        return json.loads(line)

    def command(self, name, **arguments):
        msg = {"execute": name}
        if arguments:
            msg["arguments"] = arguments
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            reply = self._read()
            if "return" in reply:
                return reply["return"]
            if "error" in reply:
                raise RuntimeError(f"QMP {name}: {reply['error'].get('desc')}")

    def close(self):
        self.file.close()
        self.sock.close()


def _connect_qmp(path, qemu, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return Qmp(path)
        except (FileNotFoundError, ConnectionRefusedError):
            if qemu.finished or time.monotonic() > deadline:
                raise MigrateSetupError(f"QEMU's QMP socket {path} never "
                                        "answered") from None
            time.sleep(0.05)


# --- the guest ---------------------------------------------------------------

def _reader_script(config, devices, ndev):
    """Shell: readloop (readloop.c) in the background over the host's
    region of each device ("$D0,$D1" or "/dev/vda"), until /tmp/stop."""
    seeds = ",".join(str(_region_seed(config, d)) for d in range(ndev))
    return (f"chmod 755 {GUEST_READLOOP}\n"
            f"{GUEST_READLOOP} {devices} {seeds} {READ_OFFSET} "
            f"{config.read_size} {READ_BLOCK} {_max_s(config):.0f} "
            "</dev/null &\nREADER=$!\n")


def _max_s(config):
    """Longer than any run can take: the host stops the guest's programs."""
    return (config.boot_timeout_s + config.migrations *
            (config.run_s + config.migrate_timeout_s + config.resume_timeout_s)
            + 600)


def _script(config, run_id, images):
    if config.kind == "scsi":
        script, devices = crash.scsi_disks_script(
            [config.image_size + d * SCSI_EXTRA for d in range(len(images))])
        script += ('echo "SPINDLE-RESULT scsi.disks=$(ls -d /sys/block/sd* '
                   '| wc -l)"\n')
    else:
        devices = "/dev/vda"
        script = ("i=0\nwhile [ ! -b /dev/vda ] && [ $i -lt 100 ]; do "
                  "sleep 0.1; i=$((i + 1)); done\n"
                  'echo "SPINDLE-RESULT vda.hw_queues=$(ls /sys/block/vda/mq | '
                  'wc -l)"\n')
    if config.reader:
        script += _reader_script(config, devices, len(images))
    script += (f"chmod 755 {GUEST_CRASHIO}\n"
               f"{GUEST_CRASHIO} {devices} {config.writers} {config.blocks} "
               f"{_max_s(config):.0f} {run_id} {config.hung_s:g}\n"
               'echo "SPINDLE-RESULT crash.exit=$?"\n')
    if config.reader:
        script += "touch /tmp/stop\nwait $READER\n"
    return script


class _State(crash._GuestState):
    """What the guest's console said, whichever QEMU it came from: the
    crash test's, and the reader's counts."""

    def __init__(self):
        super().__init__()
        self.reads_ok = 0
        self.reads_bad = 0

    def on_line(self, line):
        m = re.search(r"SPINDLE-READS ok=(\d+) bad=(\d+)", line)
        if not m:
            return super().on_line(line)
        with self.cond:
            self.reads_ok, self.reads_bad = map(int, m.groups())
            self.cond.notify_all()

    def wait(self, predicate, timeout, qemu=None):
        """Wait until predicate() (under the lock), a writer hung or `qemu`
        ended; return predicate()."""
        with self.cond:
            self.cond.wait_for(
                lambda: predicate() or self.hung or (qemu and qemu.finished),
                timeout)
            return predicate()


class _Qemu:
    """One QEMU, run by its own thread (it dies with that thread)."""

    def __init__(self, number, cmd, state, workdir, timeout):
        self.number = number
        self.qmp_path = workdir / f"qmp{number}.sock"
        self.cmd = [*cmd, "-qmp", f"unix:{self.qmp_path},server=on,wait=off"]
        self.console_log = workdir / f"console.{number}.log"
        self.proc = None
        self.run = None
        self.error = None
        self.finished = False
        self._state = state
        self._thread = threading.Thread(target=self._main, args=(timeout,),
                                        name=f"qemu{number}")
        self._thread.start()

    def _main(self, timeout):
        try:
            self.run = guest._run(self.cmd, timeout, self.console_log, False,
                                  self._state.on_line, self._on_start)
        except Exception as e:       # reported by the main thread
            self.error = e
        finally:
            with self._state.cond:
                self.finished = True
                self._state.cond.notify_all()

    def _on_start(self, proc):
        self.proc = proc

    def type(self, text):
        try:
            self.proc.stdin.write(text.encode())
            self.proc.stdin.flush()
        except (OSError, ValueError, AttributeError):
            pass

    def quit(self, timeout=15):
        if not self.finished:
            try:
                qmp = Qmp(self.qmp_path, timeout=5)
                qmp.command("quit")
                qmp.close()
            except (OSError, RuntimeError, ValueError):
                pass
        self._thread.join(timeout)
        if self._thread.is_alive() and self.proc:
            self.proc.kill()
            self._thread.join()

    def console(self):
        try:
            return self.console_log.read_text(errors="replace")
        except OSError:
            return ""


# --- the run -----------------------------------------------------------------

def missing_prerequisites():
    return crash.missing_prerequisites()


# The first QEMU whose TCG migration was seen to keep every page (10.0);
# 7.2 loses some (the module's docstring).
MIN_QEMU = (8, 0)


def use_qemu_for_migration():
    """Make the guests of this process use a QEMU that migrates a TCG guest
    without losing pages: the default one if it is new enough, else the one
    install-deps unpacked from bookworm-backports (through $SPINDLE_QEMU).
    Returns None, or why there is none."""
    version = crash.qemu_version()
    if version is not None and version >= MIN_QEMU:
        return None
    backports = crash.BACKPORTS_QEMU_DIR / "usr" / "bin" / "qemu-system-x86_64"
    newer = crash.qemu_version(backports) if os.access(backports, os.X_OK) else None
    if newer is not None and newer >= MIN_QEMU:
        os.environ["SPINDLE_QEMU"] = str(backports)
        return None
    have = f"{version[0]}.{version[1]}" if version else "an unknown version"
    return (f"QEMU {have} loses guest pages when it migrates a TCG guest "
            f"(see tests/e2e/migrate.py); and no QEMU {MIN_QEMU[0]}.0 or later "
            f"in {crash.BACKPORTS_QEMU_DIR} (scripts/install-deps.sh unpacks "
            "one from bookworm-backports)")


def run_migrate(program, workdir, config, log=lambda text: None):
    """Run the migration test (see the module's docstring); return a
    MigrateReport.  `workdir` must have a short path (UNIX sockets)."""
    if config.kind == "scsi" and (config.flavour != "spindle" or
                                  config.qemu_disk):
        raise MigrateSetupError("a vhost-user-scsi disk needs spindle")
    start = time.monotonic()
    workdir = Path(workdir)
    report = MigrateReport(config, workdir)
    crashio = crash.build_crashio(guest.default_cache_dir())
    images = _images(config, workdir)
    image = images[0]
    iothreads = [f"iot{i}" for i in range(
        config.iothreads if config.flavour == "spindle" else 1)]
    if len(iothreads) == 1:
        iothreads = iothreads[0]
    sockets, daemon = _backend(program, workdir, config, images,
                               iothreads)
    kernel, version = find_kernel()
    run_id = (config.seed << 16) | 1
    files = {GUEST_CRASHIO: crashio}
    if config.reader:
        files[GUEST_READLOOP] = crash.build_crashio(guest.default_cache_dir(),
                                                    READLOOP_SOURCE)
    initrd = build_initramfs(guest.default_cache_dir(),
                             _script(config, run_id, images),
                             files=files, kernel_version=version,
                             out_dir=workdir)

    def command(export, incoming=None):
        extra = ("-incoming", f"unix:{incoming}") if incoming else ()
        if incoming and config.compare_memory:
            extra += ("-S",)
        if config.trace:
            extra += ("-trace", "vhost_user_*", "-D",
                      str(workdir / f"trace.{len(qemus)}.log"))
        cmd = guest.qemu_command(
            kernel, initrd, [guest.Disk(sockets[export],
                                        num_queues=config.queues,
                                        kind=config.kind)],
            smp=config.smp, mem_mb=config.mem_mb,
            append_extra=guest.NO_FIRMWARE_DISK_PROBE, qemu_args=extra)
        cmd[cmd.index("-accel") + 1] = config.accel
        if config.qemu_disk:
            i = cmd.index("-chardev")
            cmd[i:i + 4] = [
                "-drive", f"file={image},if=none,id=d0,format=raw,cache=none,"
                "file.locking=off",
                "-device", f"virtio-blk-pci,drive=d0,num-queues={config.queues}"]
            cmd = [a.replace(",share=on", ",share=off") for a in cmd]
        return cmd

    timeout = _qemu_timeout(config)
    state = _State()
    qemus = []
    try:
        daemon.start()
    except daemons.DaemonError as e:
        raise MigrateSetupError(f"spindle did not start: {e}") from None
    try:
        qemus.append(_Qemu(0, command(0), state, workdir, timeout))
        if not state.wait(lambda: state.writing and state.acked > 0,
                          config.boot_timeout_s, qemus[0]):
            report.failures.append("the guest did not start writing within "
                                   f"{config.boot_timeout_s:g} s")
        else:
            _migrations(config, command, state, qemus, report, workdir, log)
        if not state.hung and not qemus[-1].finished:
            state.wait(lambda: False, config.run_s)
        qemus[-1].type("stop\n")
        state.wait(lambda: state.verdict, config.hung_s + 60, qemus[-1])
        if state.verdict:
            # The guest reports the rest and powers itself off.
            state.wait(lambda: qemus[-1].finished, 30)
    finally:
        for q in qemus:
            if q is not qemus[-1]:
                q.quit()
        qemus[-1].quit(timeout=30)
        crash.stop_spindle(daemon, report)
    _collect(config, images, state, qemus, report)
    report.seconds = time.monotonic() - start
    return report


def _images(config, workdir):
    """The image files, [path]: one for blk, two for scsi (the second
    SCSI_EXTRA bigger), each with its own region_pattern() at
    READ_OFFSET."""
    ndev = 2 if config.kind == "scsi" else 1
    regions = -(-config.writers // ndev)
    if (crash.FIRST_BLOCK + regions * config.blocks) * crash.BLOCK > READ_OFFSET:
        raise MigrateSetupError("crashio's regions overlap the reader's")
    images = []
    for d in range(ndev):
        path = workdir / ("disk.img" if ndev == 1 else f"disk{d}.img")
        with open(path, "wb") as f:
            f.truncate(config.image_size + d * SCSI_EXTRA)
            f.seek(READ_OFFSET)
            f.write(region_pattern(config.read_size,
                                   _region_seed(config, d)))
        images.append(path)
    return images


def _region_seed(config, d):
    return config.seed * 16 + d


def _splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & U64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & U64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & U64
    return x ^ (x >> 31)


def region_pattern(size, seed):
    """The reader's region (readloop.c's readloop_fill()): little-endian
    word k is splitmix64(seed * 2**32 + k), so no two blocks are alike."""
    base = seed << 32
    return struct.pack(f"<{size // 8}Q",
                       *(_splitmix64(base + k) for k in range(size // 8)))


def _backend(program, workdir, config, images, iothreads):
    """The daemon serving the images on two sockets (see the module's
    docstring): (the sockets, the daemon, not started)."""
    sockets = [str(workdir / f"vu{i}.sock") for i in range(2)]
    if config.flavour != "spindle":
        exports = [daemons.Export(str(images[0]), sock,
                                  num_queues=config.queues,
                                  iothread=iothreads,
                                  node_opts=",cache.direct=on,locking=off")
                   for sock in sockets]
        return sockets, daemons.Daemon(program, exports, config.flavour,
                                       workdir,
                                       log_path=workdir / "spindle.log")
    iots = [iothreads] if isinstance(iothreads, str) else iothreads

    def nodes(extra=""):
        return [arg for d, path in enumerate(images) for arg in (
            "--blockdev", f"driver=file,node-name=d{d},filename={path},"
                          f"cache.direct=on{extra}")]

    exports = [_export_args(config, i, sock, iots, len(images))
               for i, sock in enumerate(sockets)]
    if not config.cross_process:
        return sockets, daemons.Daemon(
            program, [], config.flavour, workdir, iothreads=iots,
            extra_args=[*nodes(), *exports[0], *exports[1]],
            extra_sockets=sockets, log_path=workdir / "spindle.log")
    # The second spindle's nodes are inactive until its guest starts.
    return sockets, _SpindlePair(workdir / "spindle.log", [
        daemons.Daemon(program, [], config.flavour, workdir, iothreads=iots,
                       extra_args=[*nodes(extra), *exports[i]],
                       extra_sockets=[sockets[i]],
                       log_path=workdir / f"spindle-{i}.log")
        for i, extra in enumerate(("", ",active=off"))])


class _SpindlePair:
    """Two spindles started and stopped as one (cross_process); at the
    stop their logs go into log_path, one after the other."""

    def __init__(self, log_path, pair):
        self.log_path = log_path
        self.pair = pair

    def start(self):
        for d in self.pair:
            d.start()
        return self

    def stop(self):
        statuses = [d.stop() for d in self.pair]
        self.log_path.write_text("".join(d.stderr() for d in self.pair))
        return next((s for s in statuses if s != 0), 0)


def _export_args(config, i, socket, iots, ndev):
    """--export for spindle's export i (e{i}) on socket, serving nodes
    d0..: as its disk (blk) or its LUNs (scsi); the second one with
    allow-inactive=on, so that it may share them with the first."""
    opts = [f"type=vhost-user-{config.kind}", f"id=e{i}", "addr.type=unix",
            f"addr.path={socket}", f"num-queues={config.queues}"]
    opts += ([f"iothread={iots[0]}"] if len(iots) == 1 else
             [f"iothread.{n}={iot}" for n, iot in enumerate(iots)])
    if config.kind == "scsi":
        opts += [f"lun.{d}.{key}" for d in range(ndev)
                 for key in (f"node-name=d{d}", "writable=on")]
    else:
        opts += ["node-name=d0", "writable=on"]
    if i == 1:
        opts.append("allow-inactive=on")
    return ["--export", ",".join(opts)]


def _migrations(config, command, state, qemus, report, workdir, log):
    ndev = 2 if config.kind == "scsi" else 1
    pass_reads = ndev * config.read_size // READ_BLOCK
    for number in range(1, config.migrations + 1):
        state.wait(lambda: False, config.run_s)
        if state.hung or qemus[-1].finished:
            break
        source = qemus[-1]
        src_export = (number - 1) % 2
        dst_export = number % 2
        mig = Migration(number, src_export, dst_export)
        report.migrations.append(mig)
        incoming = workdir / f"mig{number}.sock"
        dest = _Qemu(number, command(dst_export, incoming), state, workdir,
                     _qemu_timeout(config))
        qemus.append(dest)
        with state.cond:
            reads = state.reads_ok + state.reads_bad
        try:
            _migrate(config, source, dest, incoming, mig)
        except (OSError, RuntimeError, ValueError) as e:
            mig.status = mig.status or "error"
            mig.error = str(e)
        with state.cond:
            mig.reads = state.reads_ok + state.reads_bad - reads
        if mig.status != "completed":
            log(mig.line(config.migrations))
            report.failures.append(f"migration {number}: {mig.status} "
                                   f"{mig.error}".strip())
            return
        done = time.monotonic()
        with state.cond:
            base = state.acked
        if state.wait(lambda: state.acked > base, config.resume_timeout_s, dest):
            mig.resume_s = state.progress_at - done
        log(mig.line(config.migrations))
        with state.cond:
            reads = state.reads_ok + state.reads_bad
        if config.reader:
            # Two passes more: the one under way at the switch-over, and
            # one wholly on the destination, which checks every buffer.
            state.wait(lambda: state.reads_ok + state.reads_bad >=
                       reads + 2 * pass_reads, config.resume_timeout_s, dest)
            if number == config.migrations:
                report.reads_after_migration = (state.reads_ok +
                                                state.reads_bad - reads)
        source.quit()
        if mig.resume_s is None:
            report.failures.append(f"migration {number}: the guest wrote "
                                   "nothing on the destination within "
                                   f"{config.resume_timeout_s:g} s")
            return


def _qemu_timeout(config):
    return (config.boot_timeout_s + config.migrations *
            (config.run_s + config.migrate_timeout_s +
             config.resume_timeout_s) + 2 * config.hung_s + 120)


def _migrate(config, source, dest, incoming, mig):
    """Migrate from `source` to `dest` (listening on `incoming`); fill
    `mig` from query-migrate."""
    dqmp = _connect_qmp(dest.qmp_path, dest)
    sqmp = _connect_qmp(source.qmp_path, source)
    try:
        deadline = time.monotonic() + 30
        while not incoming.exists():
            if dest.finished or time.monotonic() > deadline:
                raise RuntimeError("the destination QEMU never listened on "
                                   f"{incoming}: {guest.tail(dest.console(), 10)}")
            time.sleep(0.05)
        # QEMU 7.2 limits a migration to 32 MiB/s by default.
        sqmp.command("migrate-set-parameters", **{"max-bandwidth": 1 << 40})
        t0 = time.monotonic()
        sqmp.command("migrate", uri=f"unix:{incoming}")
        info = {}
        while time.monotonic() - t0 < config.migrate_timeout_s:
            info = sqmp.command("query-migrate")
            if info.get("status") in MIGRATE_STATES_DONE:
                break
            time.sleep(0.02)
        mig.wall_s = time.monotonic() - t0
        mig.status = info.get("status", "timeout")
        mig.total_ms = info.get("total-time")
        mig.downtime_ms = info.get("downtime")
        mig.setup_ms = info.get("setup-time")
        mig.transferred = info.get("ram", {}).get("transferred")
        if mig.status != "completed":
            mig.error = info.get("error-desc", "")
            return
        if config.compare_memory:
            # The source's "completed" comes before the destination has
            # loaded the last pages.
            while dqmp.command("query-status").get("status") == "inmigrate":
                time.sleep(0.02)
            mig.differing_pages = _compare_memory(config, sqmp, dqmp,
                                                  incoming.parent, mig.number)
            dqmp.command("cont")
        deadline = time.monotonic() + 10
        while dqmp.command("query-status").get("status") != "running":
            if time.monotonic() > deadline:
                raise RuntimeError("the destination did not run after the "
                                   "migration")
            time.sleep(0.02)
    finally:
        sqmp.close()
        dqmp.close()


def _compare_memory(config, sqmp, dqmp, workdir, number):
    """Save both guests' memories (pmemsave) and return the addresses of
    the 4 KiB pages that differ."""
    size = config.mem_mb * MiB
    paths = [workdir / f"mem{number}.{side}" for side in ("src", "dst")]
    for qmp, path in zip((sqmp, dqmp), paths):
        qmp.command("pmemsave", val=0, size=size, filename=str(path))
    pages = []
    with open(paths[0], "rb") as a, open(paths[1], "rb") as b:
        for addr in range(0, size, 4096):
            pa, pb = a.read(4096), b.read(4096)
            if pa != pb:
                pages.append(addr)
                diff = [i for i in range(4096) if pa[i] != pb[i]]
                with open(workdir / f"memdiff{number}.txt", "a") as out:
                    out.write(f"{addr:#x}: {len(diff)} bytes differ in "
                              f"[{diff[0]:#x}, {diff[-1]:#x}]; src "
                              f"{pa[diff[0] & ~15:(diff[0] & ~15) + 32].hex()} dst "
                              f"{pb[diff[0] & ~15:(diff[0] & ~15) + 32].hex()}\n")
    for path in paths:
        path.unlink()
    return pages


def _collect(config, images, state, qemus, report):
    report.reads_ok, report.reads_bad = state.reads_ok, state.reads_bad
    for q in qemus:
        for line in q.console().splitlines():
            pos = line.find("qemu-system-x86_64: ")
            if pos >= 0:
                report.qemu_messages.append(f"qemu{q.number}: {line[pos:].strip()}")
        if q.error is not None:
            report.failures.append(f"QEMU {q.number} failed: {q.error}")
    console = "".join(q.console() for q in qemus)
    report.results, report.warnings, _ = guest.parse_console(console)
    if state.hung:
        report.failures.append(f"hang: {state.hung[0]}")
    if "crash.verdict" not in report.results:
        report.failures.append("the guest printed no crashio results")
    crash.add_crashio_failures(report)
    if config.reader:
        bad = max(report.reads_bad, int(report.results.get("reader.bad", 0)))
        if bad:
            report.failures.append(f"{bad} reads of the host's region left "
                                   "other data in the guest's buffer")
        if report.results.get("reader.io_errors", "0") != "0":
            report.failures.append(
                f"{report.results['reader.io_errors']} reads of the host's "
                "region failed")
        if "reader.ok" not in report.results:
            report.failures.append("the reader printed no results")
        if config.migrations and not any(m.reads for m in report.migrations):
            report.failures.append("the reader read nothing while the "
                                   "guest was being migrated")
        if config.migrations and not report.reads_after_migration:
            report.failures.append("the reader read nothing after the last "
                                   "migration")
    crash_config = crash.CrashConfig(writers=config.writers, blocks=config.blocks)
    sub = crash.CrashReport(crash_config, report.workdir, results=report.results)
    crash._check_images(crash_config, crash._Layout(images, [], [], ""), sub)
    report.host_checked = sub.host_checked
    report.failures += sub.failures
    log = crash._read(report.workdir / "spindle.log")
    report.spindle_log_lines = [l for l in log.splitlines() if LOG_LINES.search(l)]
    sanitizer = [l for l in log.splitlines() if crash.SANITIZER_REPORT.search(l)]
    if sanitizer:
        report.failures.append(f"a sanitizer report in spindle's output: "
                               f"{sanitizer[0]}")

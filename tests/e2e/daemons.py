"""Start a vhost-user-blk back-end (spindle or qemu-storage-daemon) for a guest.

Both daemons take the same command line for a vhost-user-blk export
(docs/cli.md), so one function builds it for either:

    --object iothread,id=iot0[,poll-max-ns=N]
    --blockdev driver=file,node-name=d0,filename=IMG
    --export type=vhost-user-blk,id=e0,node-name=d0,addr.type=unix,
             addr.path=SOCK,writable=on,num-queues=N,iothread=iot0[,serial=S]

A ScsiExport (spindle only) gives, with LUN N = luns[N]:

    --blockdev driver=file,node-name=dIlN,filename=IMG   (for each LUN N)
    --export type=vhost-user-scsi,id=eI,addr.type=unix,addr.path=SOCK,
             num-queues=N,iothread=iot0,lun.N.node-name=dIlN[,lun.N.KEY=V]

`serial=` is Spindle's addition; qemu-storage-daemon 7.2 rejects it (its
vhost-user-blk serial is fixed), so it is only passed to spindle.  So is a
list of IOThreads (`iothread.0=a,iothread.1=b`: queue i runs in the i % n-th).

A Daemon is the functional tests' launcher (tests/functional/spindle_daemon.py)
given that command line: it is ready when every export's socket is
listening, which is read from /proc/net/unix, so readiness is checked
without connecting (a vhost-user-blk server serves one client at a time).
stop() sends SIGTERM, waits, and returns the exit status; stderr is kept
for the test to show or parse (IOThread statistics, for example).
"""

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

# The launcher is the functional tests' one (tests/functional/spindle_daemon.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "functional"))
from spindle_daemon import (  # noqa: E402,F401  (re-exported)
    Daemon as _Launcher, DaemonError, die_with_parent, is_listening,
    listening_unix_paths, wait_for)

QSD_NAME = "qemu-storage-daemon"


def find_qsd():
    """Path of qemu-storage-daemon ($SPINDLE_QSD overrides), or None."""
    env = os.environ.get("SPINDLE_QSD")
    if env:
        return Path(env) if os.access(env, os.X_OK) else None
    path = shutil.which(QSD_NAME)
    return Path(path) if path else None


@dataclass
class Export:
    """One vhost-user-blk export of an image file."""
    image: str
    socket: str
    num_queues: int = 1
    writable: bool = True
    serial: str = None
    logical_block_size: int = None
    iothread: str = "iot0"       # or a list of ids (spindle only)
    node_opts: str = ""          # more ",key=value" for --blockdev
    blockdev: str = None         # instead of the file node, e.g.
                                 # "driver=null-co,size=1G" (image unused)
    options: str = ""            # more ",key=value" for --export


@dataclass
class ScsiLun:
    """One LUN of a ScsiExport: an image file and its lun.N.* options."""
    image: str
    writable: bool = None        # None: the daemon's default (off)
    node_opts: str = ""          # more ",key=value" for --blockdev
    props: dict = None           # lun.N.KEY=VALUE: serial, vendor, wwn...
    blockdev: str = None         # instead of the file node, e.g.
                                 # "driver=null-co,size=1G" (image unused)


@dataclass
class ScsiExport:
    """A vhost-user-scsi export (spindle only); LUN N is luns[N]."""
    luns: list
    socket: str
    num_queues: int = 1
    iothread: str = "iot0"
    options: str = ""            # more ",key=value" for --export


def export_args(exports, flavour, iothread_props="", iothreads=()):
    """The command-line arguments (after the program name) for `exports`.

    `flavour` is "spindle" or "qsd"; it only decides whether serial= is
    passed.  Every IOThread in `iothreads` (ids) and every one the exports
    name is created once, with `iothread_props` (",poll-max-ns=..." for
    example) appended.
    """
    args = []
    seen = []
    for iot in [*iothreads, *(i for exp in exports for i in _iothreads(exp))]:
        if iot not in seen:
            seen.append(iot)
            args += ["--object", f"iothread,id={iot}{iothread_props}"]
    for i, exp in enumerate(exports):
        if isinstance(exp, ScsiExport):
            args += _scsi_export_args(exp, i)
            continue
        node = f"d{i}"
        args += _node_args(exp, node)
        opts = [
            "type=vhost-user-blk", f"id=e{i}", f"node-name={node}",
            "addr.type=unix", f"addr.path={exp.socket}",
            f"writable={'on' if exp.writable else 'off'}",
            f"num-queues={exp.num_queues}",
        ]
        opts += _iothread_opts(exp)
        if exp.logical_block_size:
            opts.append(f"logical-block-size={exp.logical_block_size}")
        if exp.serial is not None and flavour == "spindle":
            opts.append(f"serial={exp.serial}")
        args += ["--export", ",".join(opts) + exp.options]
    return args


def _scsi_export_args(exp, i):
    args = []
    opts = ["type=vhost-user-scsi", f"id=e{i}", "addr.type=unix",
            f"addr.path={exp.socket}", f"num-queues={exp.num_queues}"]
    opts += _iothread_opts(exp)
    for n, lun in enumerate(exp.luns):
        node = f"d{i}l{n}"
        args += _node_args(lun, node)
        opts.append(f"lun.{n}.node-name={node}")
        if lun.writable is not None:
            opts.append(f"lun.{n}.writable={'on' if lun.writable else 'off'}")
        opts += [f"lun.{n}.{k}={v}" for k, v in (lun.props or {}).items()]
    return args + ["--export", ",".join(opts) + exp.options]


def _node_args(src, node):
    """--blockdev for an Export or a ScsiLun: its own blockdev options, or
    a file node over its image."""
    if src.blockdev:
        return ["--blockdev", f"{src.blockdev},node-name={node}"]
    return ["--blockdev", f"driver=file,node-name={node},"
                          f"filename={src.image}{src.node_opts}"]


def _iothread_opts(exp):
    """iothread=ID, or iothread.N=ID for each of several."""
    iothreads = _iothreads(exp)
    if len(iothreads) == 1:
        return [f"iothread={iothreads[0]}"]
    return [f"iothread.{n}={iot}" for n, iot in enumerate(iothreads)]


def _iothreads(exp):
    if not exp.iothread:
        return []
    if isinstance(exp.iothread, str):
        return [exp.iothread]
    return list(exp.iothread)


class Daemon(_Launcher):
    """A back-end serving `exports` (and running `iothreads`, ids), started
    in `workdir`; ready when every export's socket (and every one of
    extra_sockets, a QMP monitor's for example) listens.  Output goes to
    log_path, by default WORKDIR/FLAVOUR.stderr."""

    def __init__(self, program, exports, flavour, workdir, iothread_props="",
                 extra_args=(), env=None, extra_sockets=(), iothreads=(),
                 log_path=None, pass_fds=()):
        self.exports = list(exports)
        self.flavour = flavour
        self.workdir = Path(workdir)
        self.stderr_path = Path(log_path or self.workdir / f"{flavour}.stderr")
        super().__init__(
            program, [*export_args(self.exports, flavour, iothread_props,
                                   iothreads),
                      *extra_args],
            log_path=self.stderr_path, name=flavour, cwd=self.workdir,
            env=env, pass_fds=pass_fds,
            ready=[*(e.socket for e in self.exports), *extra_sockets])

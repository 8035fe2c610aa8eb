"""Shared fixtures for Spindle's functional tests.

Functional tests start the programs a build produced and talk to them the way
a user or QEMU would.  They find the build through the SPINDLE_BUILD
environment variable (`make check-functional` sets it); without it they use
build/ at the top of the tree.

Fixtures:
    repo_root       the top of the source tree (pathlib.Path)
    build_dir       the meson build directory; the test is skipped if it is
                    missing
    binary          binary("name") -> path of a built program; skips if not
                    built
    spindle         the path of the built daemon
    client          the path of spindle-vu-client (tools/vu-client)
    workdir         a fresh directory with a short path (UNIX socket paths
                    are limited to 107 bytes), removed afterwards
    spindle_daemon  factory: spindle_daemon(args, exports=..., iothreads=N,
                    ready=[paths]) -> a started daemon; every daemon it
                    started is stopped at the end of the test
    ceph_cluster    (session) a single-node Ceph cluster for the rbd
                    tests (ceph_cluster.py), or a skip saying why

find_binary(build_dir, name) is the plain function behind `binary`, for
code that wants None instead of a skip.

The launcher and the wait helper live in spindle_daemon.py (Daemon,
launch, wait_for); the export command line in tests/e2e/daemons.py
(Export, ScsiExport, ScsiLun).

Helpers tests import (`from conftest import wait_for`):
    wait_for        poll for a condition while watching a daemon
                    (spindle_daemon.wait_for)
    start_on_listening_socket
                    start a daemon that inherits a listening socket
    run_spindle     run spindle to completion (--help, a bad command line)
    check_one_line_error
                    what spindle must do with a bad command line
    make_image      a sparse (or filled) image file
    bad_options, check_bad_option
                    a benchmark's bad options and what it must do with them
    pids_of         the pids of the processes running a program
    two_cpus, skip_without_two_cpus
                    two CPUs to pin to, or skip on a one-CPU machine
    vu, vu_ok       run spindle-vu-client --json (tools/vu-client) and read
                    its document; vu_argv builds its command line
"""

import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from spindle_daemon import DaemonError, launch, wait_for  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "e2e"))

import daemons  # noqa: E402

CLIENT = "tools/vu-client/spindle-vu-client"

# Where built programs live inside a build directory, most likely first.
# A name can also be given as a path relative to the build directory.
BINARY_DIRS = (
    ".",
    "daemon",
    "tools",
    "tools/frontend",
    "tools/vu-client",
    "tools/bench",
    "tests/unit",
    "tests/bench",
)


def _build_dir_path():
    env = os.environ.get("SPINDLE_BUILD")
    if env:
        return Path(env).resolve()
    return REPO_ROOT / "build"


def find_binary(build_dir, name):
    """Return the path of the executable `name` in build_dir, or None.

    `name` is a program name ("spindle", "test-aio") or a path relative to
    the build directory ("tests/bench/bench-aio").
    """
    build_dir = Path(build_dir)
    candidates = [build_dir / name]
    if "/" not in name:
        candidates += [build_dir / d / name for d in BINARY_DIRS]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


@pytest.fixture(scope="session")
def repo_root():
    return REPO_ROOT


@pytest.fixture(scope="session")
def build_dir():
    path = _build_dir_path()
    if not path.is_dir():
        pytest.skip(f"build directory {path} does not exist: run `make` "
                    "first, or point SPINDLE_BUILD at a build directory")
    if not (path / "build.ninja").is_file():
        pytest.skip(f"{path} is not a configured meson build directory "
                    "(no build.ninja): run ./configure --builddir=... first")
    return path


@pytest.fixture(scope="session")
def binary(build_dir):
    """Factory: binary("name") returns the built program's path, or skips."""
    def lookup(name):
        path = find_binary(build_dir, name)
        if path is None:
            pytest.skip(f"{name} is not built in {build_dir}")
        return path
    return lookup


@pytest.fixture
def spindle(binary):
    """The built daemon's path."""
    return binary("spindle")


@pytest.fixture
def client(binary):
    """spindle-vu-client's path."""
    return binary(CLIENT)


@pytest.fixture
def workdir():
    # UNIX socket paths are limited to 107 bytes: keep them short.
    path = Path(tempfile.mkdtemp(prefix="vu-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def spindle_daemon(spindle, tmp_path, tmp_path_factory):
    """Factory: start a daemon; each one started is stopped (SIGTERM, then
    SIGKILL) when the test ends, whatever happened.

        spindle_daemon(args=(), *, exports=(), iothreads=0, ready=(),
                       workdir=tmp_path, program=spindle, flavour="spindle",
                       start=True, **kw) -> daemons.Daemon

    args: more command-line arguments, after those of the exports.
    exports: daemons.Export / daemons.ScsiExport; their sockets are waited
    for.  iothreads: a number N (IOThreads iot0 .. iotN-1) or a list of
    ids, created besides those the exports name.  ready: more paths to wait
    for (a socket listening, a pid file existing).  The daemon runs in
    workdir; its output goes to a log file of its own, outside tmp_path (a
    test may check what is left there).
    program and flavour: another back-end (qemu-storage-daemon, "qsd").
    start=False returns it unstarted.  The rest goes to daemons.Daemon
    (iothread_props, env, pass_fds).
    """
    started = []
    count = itertools.count()
    logs = tmp_path_factory.mktemp("logs")

    def start(args=(), *, exports=(), iothreads=0, ready=(), workdir=None,
              program=None, flavour="spindle", start=True, **kw):
        if isinstance(iothreads, int):
            iothreads = [f"iot{i}" for i in range(iothreads)]
        d = daemons.Daemon(
            program or spindle, exports, flavour, workdir or tmp_path,
            extra_args=args, extra_sockets=ready, iothreads=iothreads,
            log_path=logs / f"{flavour}-{next(count)}.log", **kw)
        started.append(d)
        return d.start() if start else d

    yield start
    for d in started:
        d.stop()


def start_on_listening_socket(spindle_daemon, path, args_for_fd, **kw):
    """Start a daemon that inherits a socket listening at path: the
    arguments are args_for_fd(fd).  The test keeps no copy of the socket."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    fd = listener.fileno()
    try:
        return spindle_daemon(args_for_fd(fd), pass_fds=[fd], **kw)
    finally:
        listener.close()     # only the daemon holds it now


def run_spindle(spindle, args, cwd=None, timeout=30):
    """Run spindle with a command line that makes it exit by itself
    (--help, an error); returns the CompletedProcess, output as text."""
    return subprocess.run([str(spindle), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


def check_one_line_error(proc, option, text):
    """spindle refused its command line as docs/cli.md promises: exit
    status 1, nothing on stdout, one line on stderr that starts with
    "spindle: OPTION: " (just "spindle: " when option is None) and
    contains text."""
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, f"expected one line, got: {proc.stderr!r}"
    prefix = f"spindle: {option}: " if option else "spindle: "
    assert lines[0].startswith(prefix), lines[0]
    assert text in lines[0], lines[0]
    assert proc.stdout == ""


def bad_options(*cases):
    """pytest.mark.parametrize("args, option", ...) values from cases
    written "--option value": ((option, value), option) each."""
    return [(tuple(c.split(" ", 1)), c.split(" ", 1)[0]) for c in cases]


def check_bad_option(proc, option):
    """A benchmark refused a bad option: exit status 2, one line on stderr
    that names the option, nothing on stdout."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert option in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stdout == ""


def pids_of(program, orphans=False):
    """The pids of the processes whose program (argv[0]) contains `program`
    (not their arguments: a compiler building daemon/spindle.p/... is no
    daemon).  With orphans, only those whose parent died (now children of
    init): what a driver that exited left behind, not the daemons of tests
    running beside it."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0]
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue                    # gone meanwhile
        if program in argv0.decode(errors="replace") and \
                (not orphans or ppid == 1):
            pids.add(int(entry.name))
    return pids


def two_cpus(reason):
    """Two CPUs this process may use, as a --cpus value ("A,B"); skips
    with reason (why two are needed) where there are fewer."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip(reason)
    return f"{allowed[0]},{allowed[1]}"


def skip_without_two_cpus(what):
    """The benchmark drivers pin the daemon(s) and the bench to two CPUs."""
    two_cpus(f"{what} pins its daemons and the bench to two CPUs")


def make_image(path, size, fill=None):
    """An image file of size bytes at path: sparse, or fill (a bytes of
    length 1) repeated.  Returns path."""
    with open(path, "wb") as f:
        if fill is None:
            f.truncate(size)
        else:
            f.write(fill * size)
    return path


# spindle-vu-client's own time limit for its commands (--timeout), and the
# test's backstop for the whole run.
VU_RUN_TIMEOUT_S = 20
VU_CLIENT_TIMEOUT_S = 120


def vu_argv(client, sock, args, extra=()):
    """spindle-vu-client's command line: --json on sock, then the options
    in extra, then the commands and their arguments in args."""
    return [str(client), "--socket", str(sock), "--json", "--timeout",
            str(VU_RUN_TIMEOUT_S), "--connect-timeout", "10", *extra,
            *map(str, args)]


def vu(client, sock, *args, extra=(), timeout=VU_CLIENT_TIMEOUT_S):
    """Run spindle-vu-client --json; return (exit status, document)."""
    proc = subprocess.run(vu_argv(client, sock, args, extra),
                          capture_output=True, text=True, timeout=timeout)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"spindle-vu-client {' '.join(map(str, args))} printed no "
                    f"JSON (status {proc.returncode}):\n{proc.stdout}\n"
                    f"{proc.stderr}")


def vu_ok(client, sock, *args, extra=()):
    """Run the commands; all must succeed.  Returns the results list."""
    rc, doc = vu(client, sock, *args, extra=extra)
    assert rc == 0 and doc["ok"], f"{args}: {doc['error']}\n{doc['results']}"
    return doc["results"]


@pytest.fixture(scope="session")
def ceph_cluster(tmp_path_factory, build_dir):
    """A single-node Ceph cluster (tests/functional/ceph_cluster.py) for
    the whole run, started on first use and stopped at the end; skips,
    saying why, where it cannot start or spindle has no rbd driver to
    use it."""
    from ceph_cluster import CephCluster, CephUnavailable
    from remote_export import skip_unless_built_with

    skip_unless_built_with(build_dir, "librbd")
    cluster = CephCluster(tmp_path_factory.mktemp("ceph"))
    try:
        cluster.start()
    except CephUnavailable as e:
        cluster.stop()
        pytest.skip(f"no test Ceph cluster: {e}")
    yield cluster
    cluster.stop()

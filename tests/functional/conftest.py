"""Shared fixtures for Spindle's functional tests.

Functional tests start the programs a build produced and talk to them the way
a user or QEMU would.  They find the build through the SPINDLE_BUILD
environment variable (`make check-functional` sets it); without it they use
build/ at the top of the tree.

Fixtures:
    repo_root   the top of the source tree (pathlib.Path)
    build_dir   the meson build directory; the test is skipped if it is missing
    binary      binary("name") -> path of a built program; skips if not built

find_binary(build_dir, name) is the plain function behind `binary`, for
code that wants None instead of a skip.

Helpers tests import (`from conftest import wait_for`):
    wait_for        poll for a condition while watching a daemon
    make_image      a sparse (or filled) image file
    vu, vu_ok       run spindle-vu-client --json (tools/frontend) and read
                    its document; vu_argv builds its command line
"""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

# Where built programs live inside a build directory, most likely first.
# A name can also be given as a path relative to the build directory.
BINARY_DIRS = (
    ".",
    "daemon",
    "tools",
    "tools/frontend",
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


def wait_for(predicate, what, timeout=15.0, proc=None, stderr=None):
    """Poll predicate() until it is true; fail the test if time runs out.

    With proc (a subprocess.Popen), also fail as soon as it exits, naming
    its exit status and, if stderr is given, what stderr() returns.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            extra = f": {stderr()}" if stderr is not None else ""
            pytest.fail(f"spindle exited with {proc.returncode} while "
                        f"waiting for {what}{extra}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


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

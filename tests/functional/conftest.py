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
"""

import os
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

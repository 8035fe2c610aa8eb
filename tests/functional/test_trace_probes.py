"""The trace points each built program carries are the ones
include/util/trace-probes.h lists for it.

util/trace.h already refuses to compile a probe that is not listed; this
checks the other direction on the binaries themselves (readelf -n): a
listed probe that no code fires any more, or one that ended up in another
program than the list says, fails here.
"""

import re
import shutil
import subprocess

import pytest

PROBE_LINE = re.compile(
    r'^SPINDLE_PROBE\(\s*(\w+),\s*(\d+),\s*"([^"]*)",\s*"([^"]*)"\)\s*$')


def listed_probes(repo_root):
    """{program: {probe name: number of arguments}} from trace-probes.h."""
    programs = {}
    path = repo_root / "include" / "util" / "trace-probes.h"
    for line in path.read_text().splitlines():
        m = PROBE_LINE.match(line)
        if not m:
            assert not line.startswith("SPINDLE_PROBE("), \
                f"{path.name}: cannot read {line!r}"
            continue
        name, nargs, binaries, _args = m.groups()
        for prog in binaries.split():
            programs.setdefault(prog, {})[name] = int(nargs)
    return programs


def carried_probes(path):
    """{probe name: set of argument counts} of provider spindle in path."""
    out = subprocess.run(["readelf", "-n", str(path)], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    probes = {}
    provider = name = None
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Provider:"):
            provider = line.split(":", 1)[1].strip()
        elif line.startswith("Name:"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Arguments:") and provider == "spindle":
            args = line.split(":", 1)[1].split()
            probes.setdefault(name, set()).add(len(args))
        elif line.startswith("Location:") and provider == "spindle":
            # A probe without arguments prints no Arguments: line.
            probes.setdefault(name, set())
    return {n: (c or {0}) for n, c in probes.items()}


@pytest.fixture(scope="module")
def sdt_build(build_dir):
    # Generated into the build's include/ (include/meson.build).
    config = (build_dir / "include" / "config-host.h").read_text()
    if not re.search(r"^#define CONFIG_SDT\b", config, re.M):
        pytest.skip("this build has no trace points (sys/sdt.h was missing "
                    "at configure time: apt-get install systemtap-sdt-dev)")
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) is not installed")
    return build_dir


def test_list_is_well_formed(repo_root):
    programs = listed_probes(repo_root)
    assert set(programs) == {"spindle", "spindle-bench", "spindle-vu-client"}
    assert len(programs["spindle"]) >= 30


@pytest.mark.parametrize("program",
                         ["spindle", "spindle-bench", "spindle-vu-client"])
def test_program_carries_listed_probes(repo_root, sdt_build, binary,
                                       program):
    listed = listed_probes(repo_root)[program]
    carried = carried_probes(binary(program))
    missing = sorted(set(listed) - set(carried))
    unlisted = sorted(set(carried) - set(listed))
    assert not missing, f"{program} lacks listed probes {missing}"
    assert not unlisted, f"{program} carries unlisted probes {unlisted}"
    wrong = {n: sorted(carried[n]) for n in listed
             if carried[n] != {listed[n]}}
    assert not wrong, f"{program}: argument counts differ from the list: {wrong}"

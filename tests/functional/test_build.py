"""Smoke tests of the build itself: the scripts around meson work, and every
unit test program that meson registered was built and starts.

These run in seconds and need nothing but a build directory.
"""

import json
import os
import subprocess


def _registered_tests(build_dir):
    # meson writes what it knows about the build into meson-info/ at
    # configure time; intro-tests.json has one entry per test().
    with open(build_dir / "meson-info" / "intro-tests.json") as f:
        return json.load(f)


def test_configure_help_lists_features(repo_root):
    out = subprocess.run([str(repo_root / "configure"), "--help"],
                         capture_output=True, text=True, timeout=30,
                         check=True).stdout
    for switch in ("--prefix=", "--builddir=", "--enable-sanitizers",
                   "--disable-libaio",
                   "--disable-liburing", "--disable-sdt", "--disable-tests",
                   "--enable-fuzzing"):
        assert switch in out, f"./configure --help does not mention {switch}"


def test_configure_rejects_unknown_option(repo_root, tmp_path):
    proc = subprocess.run([str(repo_root / "configure"), "--no-such-option",
                           f"--builddir={tmp_path / 'b'}"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "--no-such-option" in proc.stderr
    assert not (tmp_path / "b").exists()


def test_unit_programs_list_their_cases(build_dir):
    """Every registered g_test program exists and lists its test paths (-l)."""
    tests = _registered_tests(build_dir)
    assert tests, "meson registered no tests (configured with -Dtests=false?)"
    problems = []
    for t in tests:
        prog = t["cmd"][0]
        if not os.access(prog, os.X_OK):
            problems.append(f"{t['name']}: {prog} is not built (run make)")
            continue
        env = dict(os.environ, **t.get("env", {}))
        proc = subprocess.run([prog, "-l"], capture_output=True, text=True,
                              env=env, timeout=60)
        cases = [line for line in proc.stdout.splitlines()
                 if line.startswith("/")]
        if proc.returncode != 0 or not cases:
            problems.append(f"{t['name']}: `{prog} -l` exited "
                            f"{proc.returncode} listing {len(cases)} cases; "
                            f"stderr: {proc.stderr.strip()[-500:]}")
    assert not problems, "\n".join(problems)


def _fuzz_harnesses(repo_root):
    fuzz = repo_root / "tests" / "fuzz"
    return sorted(p.stem for p in fuzz.glob("fuzz-*.c"))


def test_fuzz_harnesses_are_complete(repo_root):
    """Each harness (tests/fuzz/fuzz-NAME.c) is built and has seeds."""
    fuzz = repo_root / "tests" / "fuzz"
    harnesses = _fuzz_harnesses(repo_root)
    assert harnesses, "no fuzz harnesses in tests/fuzz"
    meson = (fuzz / "meson.build").read_text()
    for name in harnesses:
        assert f"'{name}'" in meson, f"{name} is not in tests/fuzz/meson.build"
        corpus = fuzz / "corpus" / name
        assert corpus.is_dir() and any(corpus.iterdir()), \
            f"{name} has no seed corpus in {corpus}"


def test_fuzz_run_help_names_the_harnesses(repo_root):
    out = subprocess.run([str(repo_root / "scripts" / "fuzz-run"), "--help"],
                         capture_output=True, text=True, timeout=30,
                         check=True).stdout
    for switch in ("--time", "--jobs", "--out"):
        assert switch in out
    for name in _fuzz_harnesses(repo_root):
        assert name in out, f"scripts/fuzz-run --help does not list {name}"

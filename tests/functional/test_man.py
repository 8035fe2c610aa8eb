"""The manual pages (docs/man/*.scd, built to roff by scdoc).

Each built page renders with `man -l` without a warning, and every long
option a program's --help prints appears in its page, so an option added
without documentation fails here.  `meson install` puts the pages in
MANDIR/man1.

Skipped with the reason where the build has no pages (configured without
scdoc: the `man` feature) or the machine has no man (man-db).
"""

import json
import os
import re
import shutil
import subprocess

import pytest

# Program (as built) and its page.
PAGES = {
    "daemon/spindle": "spindle.1",
    "tools/bench/spindle-bench": "spindle-bench.1",
    "tools/vu-client/spindle-vu-client": "spindle-vu-client.1",
    "tools/stat/spindle-stat": "spindle-stat.1",
    "tools/bench/spindle-cpuprobe": "spindle-cpuprobe.1",
}
# A long option as --help writes it: "--queue-size=N", "[--lun N]",
# "(--object help", but not the "--" of an arrow or a range.
LONG_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")
# groff may print a hyphen or a minus for "-" in a UTF-8 locale.
DASHES = str.maketrans({"\u2010": "-", "\u2212": "-", "\u00ad": ""})


@pytest.fixture
def man():
    path = shutil.which("man")
    if path is None:
        pytest.skip("man is not installed (apt-get install man-db)")
    return path


@pytest.fixture
def pages_dir(build_dir):
    d = build_dir / "docs" / "man"
    if not (d / "spindle.1").exists():
        pytest.skip(f"no manual pages in {d}: configured without scdoc "
                    "(the man feature; apt-get install scdoc)")
    return d


def render(man, page, *args, width=80):
    env = dict(os.environ, LC_ALL="C.UTF-8", MANWIDTH=str(width),
               MANPAGER="cat", PAGER="cat")
    env.pop("MAN_KEEP_FORMATTING", None)    # plain text, no overstriking
    return subprocess.run([man, *args, "-l", str(page)], capture_output=True,
                          text=True, env=env, timeout=60)


def help_options(program):
    out = subprocess.run([str(program), "--help"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return sorted(set(LONG_OPTION.findall(out.stdout)))


@pytest.mark.parametrize("page", sorted(PAGES.values()))
def test_page_renders_without_warnings(man, pages_dir, page):
    # groff's "w" is every warning; its "all" leaves out undefined macros.
    proc = render(man, pages_dir / page, "--warnings=w")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
    text = proc.stdout.translate(DASHES)
    name = page.rsplit(".", 1)[0]
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "EXIT STATUS",
                    "SEE ALSO"):
        assert re.search(rf"^{section}$", text, re.M), (page, section)
    assert re.search(rf"^\s+{re.escape(name)} - ", text, re.M), text[:300]


@pytest.mark.parametrize("program", sorted(PAGES))
def test_every_help_option_is_documented(man, pages_dir, binary, program):
    options = help_options(binary(program))
    # Every program has several; none found means the pattern broke.
    assert len(options) >= 4, options
    # No hyphenation, no justification, lines as long as they come: an
    # option is never split.
    proc = render(man, pages_dir / PAGES[program], "--nh", "--nj",
                  width=1000)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.translate(DASHES)
    missing = [o for o in options
               if not re.search(re.escape(o) + r"(?![\w-])", text)]
    assert not missing, (f"{PAGES[program]} does not document what "
                         f"{program} --help lists: {missing}")


def test_option_pattern():
    text = ("  --socket=PATH  x\n  -q, --queues=N\n"
            "  write OFF LEN [--pattern SEED] [--no-wait]\n"
            "  (--object help, --object iothread,help: ...)\n"
            "  a -- b, 2--3, ---x, --X\n")
    assert sorted(set(LONG_OPTION.findall(text))) == [
        "--no-wait", "--object", "--pattern", "--queues", "--socket"]


def test_meson_install_puts_pages_in_mandir(pages_dir, build_dir, tmp_path):
    meson = shutil.which("meson")
    if meson is None:
        pytest.skip("meson is not on PATH")
    opts = json.loads(subprocess.run(
        [meson, "introspect", "--buildoptions", str(build_dir)],
        capture_output=True, text=True, check=True, timeout=60).stdout)
    value = {o["name"]: o["value"] for o in opts}
    proc = subprocess.run(
        [meson, "install", "-C", str(build_dir), "--no-rebuild", "--tags",
         "man", "--destdir", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    man1 = tmp_path / os.path.join(value["prefix"], value["mandir"],
                                   "man1").lstrip("/")
    assert sorted(p.name for p in man1.iterdir()) == sorted(PAGES.values())
    for page in PAGES.values():
        assert (man1 / page).read_bytes() == (pages_dir / page).read_bytes()

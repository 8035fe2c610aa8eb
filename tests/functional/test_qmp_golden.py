"""QMP golden transcripts: what the monitor answers, byte for byte.

Each tests/functional/qmp-golden/NAME.txt is a transcript in the style of
QEMU's iotests: what a client sends, what the daemon sends back, in order.
The test replays the input lines against a fresh daemon over a plain UNIX
socket (not through a QMP library: the bytes matter), masks what changes from
run to run, and compares the result with the file.  Lines of a transcript:

    # text              a comment, kept as it is
    $ spindle ARGS      start the daemon (in the background, in $TMP) and
                        connect to its monitor at $TMP/qmp.sock
    $ PROGRAM ARGS      run another program to completion first (truncate)
    -> TEXT             send TEXT and a newline, exactly
    <- MESSAGE          a message the daemon sent (a reply, an event, the
                        greeting); continuation lines of a pretty-printed
                        message start with three spaces
    <- EOF              the daemon closed the connection
    exit N              the daemon's exit status at the end (after the
                        transcript; SIGTERM if it is still running)

`<-` and `exit` lines are output: they are produced by the run and compared.
After each input line the test reads as many messages as the file lists
there (each within a few seconds), so a missing reply shows as a diff and an
extra one shows up further down; at the end it reads whatever else comes.
With SPINDLE_GOLDEN_UPDATE=1 it rewrites the files instead, reading after
each input line until the daemon has been quiet for a moment: write the
input lines of a new transcript, run the update, and review the result.

Masked (volatile) values, and nothing else:
    the temporary directory              -> $TMP
    event timestamps                     -> "SECONDS", "MICROSECONDS"
    thread ids                           -> "THREAD-ID"
    the version in the greeting          -> "N" numbers, "spindle VERSION"
    IOThread poll counters and window    -> "N" (they count loop turns)
    the machine's last CPU in messages   -> LAST
Everything else -- member order, spacing, error classes and messages -- is
compared as sent, so a change to the protocol shows as a diff.
"""

import difflib
import json
import os
import re
import select
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import _build_dir_path, find_binary
from spindle_daemon import launch

GOLDEN_DIR = Path(__file__).resolve().parent / "qmp-golden"
UPDATE = os.environ.get("SPINDLE_GOLDEN_UPDATE") == "1"

MONITOR_SOCKET = "qmp.sock"          # in $TMP: every transcript's --chardev
REPLY_TIMEOUT_S = 5.0                # per expected message
QUIET_S = 0.3                        # update mode: "no more messages"
END_QUIET_S = 0.3                    # after the last line: extra messages

# The IOThread statistics of query-iothreads ("spindle-poll") count loop
# turns and time: they depend on timing, so their values are masked.
POLL_COUNTERS = (
    "window-ns", "turns", "poll-hits", "poll-misses", "wakeups",
    "poll-time-ns", "block-time-ns", "grows", "shrinks", "dispatches",
    "bhs", "timers", "naps", "cpu-ns", "block-cpu-ns", "wake-late-ns",
    "budget-ns",
)


def _int_mask(keys, placeholder):
    """(regex, replacement): the integer value of any member named in keys."""
    alt = "|".join(re.escape(k) for k in keys)
    return re.compile(r'("(?:%s)"\s*:\s*)-?\d+' % alt), r'\1"%s"' % placeholder


MASKS = (
    _int_mask(("seconds",), "SECONDS"),
    _int_mask(("microseconds",), "MICROSECONDS"),
    _int_mask(("thread-id",), "THREAD-ID"),
    _int_mask(("major", "minor", "micro"), "N"),
    (re.compile(r'("package"\s*:\s*)"spindle[^"]*"'), r'\1"spindle VERSION"'),
    _int_mask(POLL_COUNTERS, "N"),
    # cpu-affinity errors name the machine's last CPU.
    (re.compile(r"(with CPUs from 0 to )\d+"), r"\1LAST"),
)


def mask(text, tmp):
    text = text.replace(str(tmp), "$TMP")
    for regex, repl in MASKS:
        text = regex.sub(repl, text)
    return text


def _spindle_with_monitor_or_skip():
    build = _build_dir_path()
    path = find_binary(build, "spindle")
    if path is None:
        pytest.skip(f"spindle is not built in {build}")
    out = subprocess.run([str(path), "--help"], capture_output=True,
                         text=True, timeout=10)
    text = out.stdout + out.stderr
    if "--monitor" not in text or re.search(r"monitor.*not implemented", text):
        pytest.skip(f"{path} has no QMP monitor yet (`spindle --help`)")
    return path


# --- the transcript file -------------------------------------------------------------

def is_output(line):
    return (line.startswith("<- ") or line.startswith("   ")
            or line.startswith("exit "))


def parse(text):
    """[(input line, number of '<-' messages the file lists after it)]

    Input lines are comments, blank lines, '$ ...' and '-> ...'.  The
    messages listed before the first input line (none) count for nothing.
    """
    steps = []
    for line in text.splitlines():
        if line.startswith("<- "):
            if steps:
                steps[-1][1] += 1
        elif not is_output(line):
            steps.append([line, 0])
    return steps


# --- talking to the daemon -----------------------------------------------------------

class Connection:
    """A raw client: bytes out, whole JSON messages (as sent) in."""

    def __init__(self, path, timeout=10.0):
        deadline = time.monotonic() + timeout
        while True:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self.sock.connect(str(path))
                break
            except OSError:
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        self.buf = ""
        self.raw = b""               # bytes not yet decoded (a split UTF-8)
        self.eof = False
        self.eof_reported = False
        self.decoder = json.JSONDecoder()

    def send(self, text):
        self.sock.sendall(text.encode() + b"\n")

    def _split(self):
        """The next complete message in the buffer (its raw text), or None."""
        stripped = self.buf.lstrip()
        if not stripped:
            self.buf = ""
            return None
        try:
            _, end = self.decoder.raw_decode(stripped)
        except ValueError:
            return None              # incomplete (or not JSON: see next())
        self.buf = stripped[end:]
        return stripped[:end]

    def next(self, timeout):
        """The next message's text, "EOF" once the server closed, or None
        if nothing came within timeout seconds."""
        deadline = time.monotonic() + timeout
        while True:
            msg = self._split()
            if msg is not None:
                return msg
            if self.eof:
                if self.buf.strip():             # bytes that are not JSON
                    msg, self.buf = self.buf.strip(), ""
                    return msg
                if not self.eof_reported:
                    self.eof_reported = True
                    return "EOF"
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                if self.buf.strip():             # bytes that are not JSON
                    msg, self.buf = self.buf.strip(), ""
                    return msg
                return None
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                continue
            data = self.sock.recv(65536)
            if not data:
                self.eof = True
                data = b""
            self.raw += data
            try:
                text = self.raw.decode()
                self.raw = b""
            except UnicodeDecodeError as e:
                if e.start < len(self.raw) - 3 or self.eof:
                    text, self.raw = self.raw.decode(errors="replace"), b""
                else:                            # wait for the rest
                    text, self.raw = self.raw[:e.start].decode(), self.raw[e.start:]
            self.buf += text

    def close(self):
        self.sock.close()


class Run:
    """One replay of a transcript."""

    def __init__(self, program, tmp):
        self.program, self.tmp = program, Path(tmp)
        self.daemon = None
        self.conn = None
        self.out = []

    def expand(self, text):
        return text.replace("$TMP", str(self.tmp))

    def read(self, expected):
        """Read `expected` messages, or in update mode until quiet."""
        if self.conn is None:
            return
        if UPDATE:
            while True:
                msg = self.conn.next(QUIET_S)
                if msg is None:
                    return
                self.record(msg)
        for _ in range(expected):
            msg = self.conn.next(REPLY_TIMEOUT_S)
            if msg is None:
                return
            self.record(msg)

    def record(self, msg):
        lines = mask(msg, self.tmp).splitlines() or [""]
        self.out.append("<- " + lines[0])
        self.out += ["   " + l for l in lines[1:]]

    def command(self, line, expected):
        argv = shlex.split(self.expand(line[2:]))
        if argv[0] == "spindle":
            assert self.daemon is None, "one `$ spindle` per transcript"
            self.daemon = launch(self.program, argv[1:], cwd=self.tmp,
                                 log_path=self.tmp / "spindle.stderr")
            try:
                self.conn = Connection(self.tmp / MONITOR_SOCKET)
            except OSError as e:
                pytest.fail(f"cannot connect to the monitor: {e}; spindle "
                            f"exited {self.daemon.proc.poll()}"
                            f"{self.daemon.describe()}")
            self.read(expected)
        else:
            subprocess.run(argv, cwd=self.tmp, check=True, timeout=30)

    def finish(self):
        # Anything else the daemon sends (or its closing) comes last.
        if self.conn is not None:
            while True:
                msg = self.conn.next(END_QUIET_S)
                if msg is None:
                    break
                self.record(msg)
            self.conn.close()
        if self.daemon is not None:
            try:
                self.daemon.proc.wait(timeout=5 if self.conn.eof else 0.1)
            except subprocess.TimeoutExpired:
                pass        # not gone by itself: stop() sends SIGTERM
            self.out.append(f"exit {self.daemon.stop()}")

    def daemon_stderr(self):
        return self.daemon.stderr() if self.daemon is not None else ""

    def kill(self):
        if self.daemon is not None:
            self.daemon.kill()


def replay(program, text):
    """Run transcript `text`; return (the transcript it produced, stderr)."""
    tmp = tempfile.mkdtemp(prefix="spindle-golden-")
    run = Run(program, tmp)
    try:
        for line, expected in parse(text):
            run.out.append(line)
            if line.startswith("$ "):
                run.command(line, expected)
            elif line.startswith("-> "):
                assert run.conn is not None, f"{line!r} before `$ spindle`"
                run.conn.send(run.expand(line[3:]))
                run.read(expected)
        run.finish()
        return "\n".join(run.out) + "\n", run.daemon_stderr()
    finally:
        run.kill()
        shutil.rmtree(tmp, ignore_errors=True)


# --- the test ------------------------------------------------------------------------

def golden_files():
    return sorted(GOLDEN_DIR.glob("*.txt"))


@pytest.mark.parametrize("path", golden_files(), ids=lambda p: p.stem)
def test_transcript(path):
    program = _spindle_with_monitor_or_skip()
    want = path.read_text()
    got, stderr = replay(program, want)
    if UPDATE:
        if got != want:
            path.write_text(got)
            print(f"\nupdated {path.name}")
        return
    if got != want:
        diff = "".join(difflib.unified_diff(
            want.splitlines(True), got.splitlines(True),
            f"{path.name} (expected)", f"{path.name} (this run)"))
        pytest.fail(f"transcript {path.name} differs (SPINDLE_GOLDEN_UPDATE=1 "
                    f"rewrites it after review):\n{diff}\nspindle stderr:\n"
                    f"{stderr[-3000:]}", pytrace=False)


def test_masking_keeps_what_is_not_volatile():
    """The masks touch exactly the volatile values."""
    tmp = "/tmp/spindle-golden-abc"
    line = ('{"event": "BLOCK_EXPORT_DELETED", "data": {"id": "e0"}, '
            '"timestamp": {"seconds": 1712345678, "microseconds": 12345}}')
    assert mask(line, tmp) == (
        '{"event": "BLOCK_EXPORT_DELETED", "data": {"id": "e0"}, '
        '"timestamp": {"seconds": "SECONDS", "microseconds": "MICROSECONDS"}}')
    reply = ('{"return": [{"id": "iot0", "thread-id": 4242, "poll-max-ns": '
             '32768, "spindle-poll": {"window-ns": 4000, "turns": 17, '
             '"policy": "adaptive"}}]}')
    assert mask(reply, tmp) == (
        '{"return": [{"id": "iot0", "thread-id": "THREAD-ID", "poll-max-ns": '
        '32768, "spindle-poll": {"window-ns": "N", "turns": "N", '
        '"policy": "adaptive"}}]}')
    err = '{"error": {"class": "GenericError", "desc": "/tmp/spindle-golden-abc/x.img: 7"}}'
    assert mask(err, tmp) == '{"error": {"class": "GenericError", "desc": "$TMP/x.img: 7"}}'
    pretty = '{\n  "seconds" : 12,\n  "size" : 12\n}'
    assert mask(pretty, tmp) == '{\n  "seconds" : "SECONDS",\n  "size" : 12\n}'
    cpus = "expects a CPU list such as '0-1:3' with CPUs from 0 to 63; '0-99'"
    assert mask(cpus, tmp) == "expects a CPU list such as '0-1:3' with CPUs from 0 to LAST; '0-99'"


def test_parse_counts_the_messages_after_each_input_line():
    text = ("# c\n$ spindle x\n<- {\"QMP\": {}}\n-> {}\n<- {\"a\":\n   1}\n"
            "<- {}\n-> {}\nexit 0\n")
    assert parse(text) == [["# c", 0], ["$ spindle x", 1], ["-> {}", 2],
                           ["-> {}", 0]]

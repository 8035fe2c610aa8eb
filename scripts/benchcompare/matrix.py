"""The benchmark matrix: service times (or file engines), poll settings and loads.

A *pair* is what both daemons are started with (a service time of the
null-co node, or with --backend file the I/O engine of the file node, or
with --backend nbd|rbd the remote driver, and a poll setting); a *cell* is a pair plus a load.  Each cell is run
`repeats` times on each daemon, alternating between them.
"""

import re
from dataclasses import dataclass

# The matrix of the issue, and the reduced one of --quick.
FULL_SERVICES = "0,10us,50us,1ms"
QUICK_SERVICES = "0,50us"
FULL_LOADS = "qd1,qd32,1k,10k,50k"
QUICK_LOADS = "qd1,qd32,10k"
DEFAULT_POLLS = "default,off"
# --backend file: a preconditioned image, both engines, closed loops.
FILE_ENGINES = "native,io_uring"
ENGINES = ("native", "io_uring")
FILE_LOADS = "qd1,qd8,qd32,qd128"
QUICK_FILE_LOADS = "qd1,qd32"
FILE_REPEATS = 5
# --backend nbd|rbd: the two cells per driver.
REMOTE_LOADS = "qd1,qd32"
REMOTE_POLLS = "default"
REMOTE_DISK_SIZE = "256M"
# Even, so that each daemon runs first in a repeat as often as second: over
# rbd the first run of a repeat was seen 1.5x slower at QD1 for either
# daemon, and with 5 repeats the daemon that starts the odd ones took that
# in its median.
REMOTE_REPEATS = 6
# --backend qcow2: a raw reference, allocated reads, allocating writes.
QCOW2_CASES = "raw,qcow2,alloc"
CASES = ("raw", "qcow2", "alloc")
QCOW2_ENGINES = "native"
QCOW2_LOADS = "qd1,qd32"
QCOW2_POLLS = "default"
QCOW2_DISK_SIZE = "1G"

_TIME_UNITS = {"ns": 1, "us": 1000, "µs": 1000, "ms": 1000_000, "s": 1000_000_000}


@dataclass(frozen=True)
class Poll:
    """An IOThread poll setting: poll-max-ns=N, or left at the default."""
    name: str              # "default", "off", or the number of ns
    max_ns: int = None     # None: poll-max-ns is not passed

    def iothread_props(self):
        """The ",poll-max-ns=N" to append to --object iothread (or "")."""
        return "" if self.max_ns is None else f",poll-max-ns={self.max_ns}"


@dataclass(frozen=True)
class Load:
    """A closed loop at a queue depth, or an open loop at an arrival rate."""
    name: str              # "QD1", "QD32", "10k", "QD32x4" (4 queues), ...
    iodepth: int           # closed loop: the depth; open loop: the in-flight cap
    rate: int = 0          # open loop: arrivals per second; 0 for a closed loop
    queues: int = 1        # queues, each with iodepth (or rate) of its own

    @property
    def open_loop(self):
        return self.rate > 0

    def on_queues(self, n):
        """The same load on each of n queues ("QD32" -> "QD32x4")."""
        if n == 1:
            return self
        return Load(f"{self.name}x{n}", self.iodepth, self.rate, n)


@dataclass(frozen=True)
class Pair:
    """What both daemons are started with."""
    service_ns: int
    poll: Poll
    engine: str = None     # --backend file: aio= of the file node
    remote: str = None     # --backend nbd|rbd: the driver
    case: str = None       # --backend qcow2: raw, qcow2 or alloc

    @property
    def medium(self):
        """The service time ("0", "50us"), the file engine ("native"), the
        remote driver ("nbd") or the qcow2 case and engine ("alloc-native")."""
        if self.case:
            return f"{self.case}-{self.engine}"
        return self.engine or self.remote or format_service(self.service_ns)

    @property
    def label(self):
        if self.case:
            return f"{self.case}, engine {self.engine}, poll {self.poll.name}"
        if self.engine:
            return f"engine {self.engine}, poll {self.poll.name}"
        if self.remote:
            return f"driver {self.remote}, poll {self.poll.name}"
        return f"service {format_service(self.service_ns)}, poll {self.poll.name}"


@dataclass(frozen=True)
class Cell:
    """A pair and a load: one line of the table."""
    pair: Pair
    load: Load

    @property
    def key(self):
        """A stable string key for the JSON file."""
        return f"{self.pair.medium}/{self.pair.poll.name}/{self.load.name}"


@dataclass
class Matrix:
    services: list          # ns (null-co); [0] with engines
    polls: list             # [Poll]
    loads: list             # [Load]
    repeats: int
    engines: list = None    # --backend file: the file node's aio= values
    remote: str = None      # --backend nbd|rbd
    cases: list = None      # --backend qcow2: raw, qcow2, alloc

    def pairs(self):
        """Service time (or engine) outer, poll setting inner; with cases,
        the case outermost."""
        if self.cases:
            return [Pair(0, p, e, case=c) for c in self.cases
                    for e in self.engines for p in self.polls]
        if self.engines:
            return [Pair(0, p, e) for e in self.engines for p in self.polls]
        if self.remote:
            return [Pair(0, p, remote=self.remote) for p in self.polls]
        return [Pair(s, p) for s in self.services for p in self.polls]

    @property
    def media(self):
        """The pairs' media ("0", "50us", "native", "io_uring" or "nbd"), in
        order."""
        return _unique([p.medium for p in self.pairs()])

    @property
    def max_queues(self):
        return max(load.queues for load in self.loads)

    def cells(self):
        return [Cell(pair, load) for pair in self.pairs() for load in self.loads]

    def runs(self, daemons=2):
        """How many spindle-bench runs the matrix takes (without retries)."""
        return len(self.cells()) * self.repeats * daemons


def format_service(ns):
    """0 -> "0", 10000 -> "10us", 1000000 -> "1ms"."""
    if ns == 0:
        return "0"
    for unit, mult in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if ns % mult == 0:
            return f"{ns // mult}{unit}"
    return f"{ns}ns"


def parse_service(text):
    """A service time: a number with ns/us/µs/ms/s, a bare number being µs."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)?\s*", text)
    if not m:
        raise ValueError(f"bad service time '{text}' (examples: 0, 10us, 50us, 1ms)")
    ns = float(m.group(1)) * _TIME_UNITS[m.group(2) or "us"]
    if ns != int(ns):
        raise ValueError(f"service time '{text}' is not a whole number of ns")
    return int(ns)


def parse_size(text):
    """"1G" -> 1073741824 (k, M, G, T: powers of 1024)."""
    t = text.strip()
    mult = {"k": 1 << 10, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    n = t[:-1] if t and t[-1] in mult else t
    if not n.isdigit() or int(n) == 0:
        raise ValueError(f"bad size '{text}' (bytes, or a number with k, M, G, T)")
    return int(n) * mult.get(t[-1], 1)


def parse_services(text):
    return _unique([parse_service(t) for t in _split(text, "service times")])


def parse_poll(text):
    """"default" (poll-max-ns not given), "off" (0), or a number of ns."""
    t = text.strip().lower()
    if t == "default":
        return Poll("default", None)
    if t in ("off", "0"):
        return Poll("off", 0)
    if t.isdigit():
        return Poll(t, int(t))
    raise ValueError(f"bad poll setting '{text}' (default, off, or poll-max-ns in ns)")


def parse_polls(text):
    return _unique([parse_poll(t) for t in _split(text, "poll settings")])


def parse_load(text, open_iodepth):
    """"qdN" is a closed loop at depth N; "N", "Nk" or "NM" an open loop at N IOPS."""
    t = text.strip().lower()
    m = re.fullmatch(r"qd(\d+)", t)
    if m and int(m.group(1)) > 0:
        return Load(f"QD{int(m.group(1))}", int(m.group(1)))
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([km]?)", t)
    if m:
        rate = float(m.group(1)) * {"": 1, "k": 1000, "m": 1000_000}[m.group(2)]
        if rate >= 1 and rate == int(rate):
            return Load(format_rate(int(rate)), open_iodepth, int(rate))
    raise ValueError(f"bad load '{text}' (qdN for a closed loop at queue depth N, "
                     "or an arrival rate such as 1000, 10k, 1M)")


def parse_loads(text, open_iodepth, queues=(1,)):
    """Every load on every number of queues."""
    return _unique([parse_load(t, open_iodepth).on_queues(q)
                    for t in _split(text, "loads") for q in queues])


def parse_queues(text):
    """"1,2,4": numbers of queues, each from 1 to 16."""
    out = []
    for t in _split(text, "queue counts"):
        if not t.strip().isdigit() or not 1 <= int(t) <= 16:
            raise ValueError(f"bad queue count '{t}' (1 to 16)")
        out.append(int(t))
    return _unique(out)


def parse_engines(text):
    """"native,io_uring": the file node's aio= values."""
    return _parse_choices(text, "engine", ENGINES)


def parse_cases(text):
    """"raw,qcow2,alloc": the --backend qcow2 cases."""
    return _parse_choices(text, "case", CASES)


def _parse_choices(text, what, choices):
    """A list of some of `choices`, each once."""
    out = []
    for t in _split(text, f"{what}s"):
        if t.strip() not in choices:
            raise ValueError(f"bad {what} '{t}' ({', '.join(choices[:-1])} or "
                             f"{choices[-1]})")
        out.append(t.strip())
    return _unique(out)


def format_rate(rate):
    """1000 -> "1k", 50000 -> "50k", 1500 -> "1500"."""
    if rate % 1000_000 == 0:
        return f"{rate // 1000_000}M"
    if rate % 1000 == 0:
        return f"{rate // 1000}k"
    return str(rate)


def _split(text, what):
    items = [t for t in text.split(",") if t.strip()]
    if not items:
        raise ValueError(f"no {what} given")
    return items


def _unique(items):
    out = []
    for item in items:
        if item not in out:
            out.append(item)
    return out

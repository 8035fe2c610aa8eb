"""What poll-frontier compares: configurations, loads and cells.

A *config* is what the cell's IOThread is set to (over QMP) for one run:
a fixed window (poll-policy=fixed, poll-max-ns = W µs; W = 0 never polls)
or an adaptive policy with its poll-max-ns.  A *cell* is a service time
(the null-co node's latency-ns) and a load; every config runs in every
cell.  Loads are bench-compare's (benchcompare.matrix.parse_load: "qdN"
or an arrival rate) with an optional "-int" suffix: completions detected
by the interrupt (the call eventfd) instead of by polling the used ring.
"""

import re
from dataclasses import dataclass

from benchcompare import matrix as mx

FULL_SERVICES = "0,10us,50us,1ms"
QUICK_SERVICES = "0,50us"
FULL_LOADS = "qd1,qd1-int,1k,10k,50k,qd32"
QUICK_LOADS = "qd1,qd1-int,10k,50k"
DEFAULT_WINDOWS = "0,2,4,8,16,32"
DEFAULT_POLICIES = "qemu-classic,qemu-weighted,predictive"
KNOWN_POLICIES = ("predictive", "qemu-classic", "qemu-weighted")
DEFAULT_POLICY = "predictive"
POLICY_MAX_NS = 32768

FIXED = "fixed"


@dataclass(frozen=True)
class Config:
    """One setting of the IOThread: qom-set poll-policy, then poll-max-ns."""
    name: str          # "W0", "W8", "predictive", ...
    policy: str        # the poll-policy property
    max_ns: int        # the poll-max-ns property
    window_us: float = None   # fixed windows: W in µs; None for a policy

    @property
    def fixed(self):
        return self.policy == FIXED

    def as_json(self):
        return {"name": self.name, "policy": self.policy, "poll_max_ns": self.max_ns,
                "window_us": self.window_us}


def fixed_config(window_us):
    ns = round(window_us * 1000)
    return Config(f"W{window_us:g}", FIXED, ns, window_us)


def policy_config(name, max_ns=POLICY_MAX_NS):
    return Config(name, name, max_ns)


def parse_windows(text):
    """"0,2,4" -> [0, 2, 4] (µs, ascending, no repeats)."""
    out = []
    for item in _split(text, "windows"):
        try:
            w = float(item)
        except ValueError:
            raise ValueError(f"bad window '{item}' (a number of µs, e.g. 0,2,8)")
        if w < 0 or round(w * 1000) != w * 1000:
            raise ValueError(f"bad window '{item}': a whole number of ns, >= 0")
        w = int(w) if w == int(w) else w
        if w not in out:
            out.append(w)
    return sorted(out)


def parse_policies(text):
    out = []
    for item in _split(text, "policies", allow_empty=True):
        name = item.strip().lower()
        if name not in KNOWN_POLICIES:
            raise ValueError(f"unknown policy '{item}' (known: "
                             f"{', '.join(KNOWN_POLICIES)}; fixed windows: --windows)")
        if name not in out:
            out.append(name)
    return out


def make_configs(windows, policies, policy_max_ns):
    return ([fixed_config(w) for w in windows]
            + [policy_config(p, policy_max_ns) for p in policies])


@dataclass(frozen=True)
class Load:
    """A benchcompare load plus how spindle-bench detects completions."""
    base: mx.Load
    completion: str = "poll"

    @property
    def name(self):
        return self.base.name + ("-int" if self.completion == "interrupt" else "")

    @property
    def iodepth(self):
        return self.base.iodepth

    @property
    def rate(self):
        return self.base.rate

    @property
    def open_loop(self):
        return self.base.open_loop

    def describe(self):
        kind = (f"open loop, Poisson arrivals at {self.rate} IOPS" if self.open_loop
                else f"closed loop at depth {self.iodepth}")
        return f"{kind}, {self.completion} completion"

    def as_json(self):
        return {"name": self.name, "iodepth": self.iodepth, "rate": self.rate,
                "completion": self.completion}


def parse_load(text, open_iodepth):
    t = text.strip().lower()
    completion = "poll"
    m = re.fullmatch(r"(.+?)-?(int|interrupt)", t)
    if m:
        t, completion = m.group(1), "interrupt"
    return Load(mx.parse_load(t, open_iodepth), completion)


def parse_loads(text, open_iodepth):
    out = []
    for item in _split(text, "loads"):
        load = parse_load(item, open_iodepth)
        if load not in out:
            out.append(load)
    return out


@dataclass(frozen=True)
class FileMedium:
    """A real disk: the run's raw image, opened with aio=ENGINE and
    cache.direct=on (--file-dir), in place of a null-co service time."""
    engine: str

    def __str__(self):
        return f"file-{self.engine}"


def medium_label(medium):
    """"0", "50us" (a null-co service time in ns) or "file-native"."""
    return str(medium) if isinstance(medium, FileMedium) else mx.format_service(medium)


def medium_json(medium):
    """The service time in ns, or the file medium's label."""
    return str(medium) if isinstance(medium, FileMedium) else medium


def parse_file_engines(text):
    return [FileMedium(e) for e in mx.parse_engines(text)]


def iothread_id(service_ns):
    return f"iot-{medium_label(service_ns)}"


@dataclass(frozen=True)
class Cell:
    service_ns: object            # ns of null-co service, or a FileMedium
    load: Load

    @property
    def key(self):
        return f"{medium_label(self.service_ns)}/{self.load.name}"

    @property
    def iothread(self):
        return iothread_id(self.service_ns)

    def expected_iops(self):
        """An upper bound on the cell's request rate, or None if unknown:
        the arrival rate of an open loop, depth / service time of a closed
        loop on null-co (a real disk's service time is not known)."""
        if self.load.open_loop:
            return float(self.load.rate)
        if isinstance(self.service_ns, FileMedium) or not self.service_ns:
            return None
        return self.load.iodepth * 1e9 / self.service_ns

    def runtime_s(self, runtime, min_ios):
        """The measured seconds of one run: `runtime`, or longer where the
        expected rate would give fewer than `min_ios` requests in it."""
        rate = self.expected_iops()
        if not min_ios or not rate:
            return runtime
        return max(runtime, round(min_ios / rate, 1))

    def label(self):
        if isinstance(self.service_ns, FileMedium):
            what = f"a raw image, aio={self.service_ns.engine}, cache.direct=on"
            return f"{self.service_ns} ({what}), load {self.load.name} ({self.load.describe()})"
        return (f"service {mx.format_service(self.service_ns)}, load {self.load.name} "
                f"({self.load.describe()})")


def make_cells(services, loads):
    """Service time outer, load inner."""
    return [Cell(s, load) for s in services for load in loads]


def _split(text, what, allow_empty=False):
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items and not allow_empty:
        raise ValueError(f"no {what} given")
    return items

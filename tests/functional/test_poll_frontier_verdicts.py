"""The verdicts of scripts/poll-frontier (scripts/pollfrontier/verdicts.py),
with made-up medians: each verdict passing, missing and not applying, the
boundaries (exactly 10% better, exactly twice the CPU), and policies
dominated by QEMU's rules.

Points are (p50 µs, CPU µs per I/O).  W0 is the fixed window 0 (never
polls); fixed windows are keyed by W in µs.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from pollfrontier import cells as cl  # noqa: E402
from pollfrontier import verdicts as vd  # noqa: E402
from pollfrontier.verdicts import Point  # noqa: E402

MAX_NS = 32768


def fixed(**kw):
    """fixed(W0=(p50, cpu), W8=(...)) -> {0: Point, 8: Point}; None stays None."""
    return {float(k[1:]) if "." in k else int(k[1:]): (None if v is None else Point(*v))
            for k, v in kw.items()}


# A cell where polling pays: W0 slow and cheap-ish, W2 halves p50 at 1.5x CPU.
POLLING_PAYS = fixed(W0=(10.0, 2.0), W2=(4.0, 3.0), W8=(3.0, 5.0), W32=(2.9, 9.0))
# A cell where polling does not pay (a long service time).
NO_GAIN = fixed(W0=(100.0, 5.0), W2=(99.0, 5.5), W8=(98.0, 7.0), W32=(97.0, 12.0))


def status(v):
    return v["status"]


# -- 1 never dominated ---------------------------------------------------------

def test_never_dominated_pass():
    v = vd.never_dominated(POLLING_PAYS, Point(3.5, 3.2), MAX_NS)
    assert status(v) == "pass", v


def test_never_dominated_miss_names_the_window():
    v = vd.never_dominated(POLLING_PAYS, Point(5.0, 4.0), MAX_NS)
    assert status(v) == "MISS"
    assert v["by"] == ["W2"]
    assert "W2" in v["detail"]


def test_never_dominated_exactly_ten_percent_is_a_miss():
    fx = fixed(W0=(20.0, 1.0), W4=(9.0, 1.8))
    v = vd.never_dominated(fx, Point(10.0, 2.0), MAX_NS)
    assert status(v) == "MISS" and v["by"] == ["W4"]


def test_never_dominated_just_under_ten_percent_passes():
    fx = fixed(W0=(20.0, 1.0), W4=(9.01, 1.8))
    assert status(vd.never_dominated(fx, Point(10.0, 2.0), MAX_NS)) == "pass"
    fx = fixed(W0=(20.0, 1.0), W4=(9.0, 1.81))
    assert status(vd.never_dominated(fx, Point(10.0, 2.0), MAX_NS)) == "pass"


def test_never_dominated_ignores_windows_above_poll_max_ns():
    fx = fixed(W0=(20.0, 1.0), W64=(1.0, 0.5))
    assert status(vd.never_dominated(fx, Point(10.0, 2.0), MAX_NS)) == "pass"
    # ... but counts them when the policy may spin that long.
    assert status(vd.never_dominated(fx, Point(10.0, 2.0), 64000)) == "MISS"


def test_never_dominated_na_when_a_window_is_missing():
    fx = fixed(W0=(20.0, 1.0), W4=None, W8=(9.5, 5.0))
    v = vd.never_dominated(fx, Point(10.0, 2.0), MAX_NS)
    assert status(v) == "n/a" and "W4" in v["detail"]


def test_never_dominated_miss_despite_a_missing_window():
    fx = fixed(W0=(20.0, 1.0), W4=None, W8=(5.0, 1.0))
    assert status(vd.never_dominated(fx, Point(10.0, 2.0), MAX_NS)) == "MISS"


def test_never_dominated_na_without_the_policy():
    v = vd.never_dominated(POLLING_PAYS, None, MAX_NS, "predictive")
    assert status(v) == "n/a" and "predictive" in v["detail"]


# -- 2 no useless spinning -----------------------------------------------------

def test_no_useless_spinning_pass():
    v = vd.no_useless_spinning(NO_GAIN, Point(99.0, 5.4))
    assert status(v) == "pass", v


def test_no_useless_spinning_miss():
    v = vd.no_useless_spinning(NO_GAIN, Point(97.0, 8.0))
    assert status(v) == "MISS" and v["by"] == ["W0"]


def test_no_useless_spinning_boundary_exactly_ten_percent_more_cpu():
    assert status(vd.no_useless_spinning(NO_GAIN, Point(99.0, 5.5))) == "pass"
    assert status(vd.no_useless_spinning(NO_GAIN, Point(99.0, 5.51))) == "MISS"


def test_no_useless_spinning_na_when_polling_pays():
    v = vd.no_useless_spinning(POLLING_PAYS, Point(10.0, 50.0))
    assert status(v) == "n/a" and "pays" in v["detail"]


def test_no_useless_spinning_boundary_exactly_ten_percent_faster_means_polling_pays():
    fx = fixed(W0=(100.0, 5.0), W8=(90.0, 7.0))
    assert status(vd.no_useless_spinning(fx, Point(95.0, 9.0))) == "n/a"
    fx = fixed(W0=(100.0, 5.0), W8=(90.1, 7.0))
    assert status(vd.no_useless_spinning(fx, Point(95.0, 9.0))) == "MISS"


def test_no_useless_spinning_na_without_w0():
    fx = fixed(W2=(99.0, 5.5), W8=(98.0, 7.0))
    v = vd.no_useless_spinning(fx, Point(97.0, 8.0))
    assert status(v) == "n/a" and "W0" in v["detail"]
    fx = fixed(W0=None, W2=(99.0, 5.5))
    assert status(vd.no_useless_spinning(fx, Point(97.0, 8.0))) == "n/a"


# -- 3 latency where cheap -----------------------------------------------------

def test_latency_where_cheap_pass():
    v = vd.latency_where_cheap(POLLING_PAYS, Point(4.5, 3.0))
    # S = {W2 (4.0 <= 5, 3.0 <= 4)}: W8 and W32 cost more than 2x W0.
    assert status(v) == "pass", v
    assert "W2" in v["detail"]


def test_latency_where_cheap_miss_names_the_best_cheap_window():
    fx = fixed(W0=(10.0, 2.0), W2=(4.0, 3.0), W4=(3.0, 3.5), W32=(1.0, 9.0))
    v = vd.latency_where_cheap(fx, Point(3.7, 2.5))
    assert status(v) == "MISS" and v["by"] == ["W4"]


def test_latency_where_cheap_boundaries():
    # Exactly half the latency for exactly twice the CPU: cheap.
    fx = fixed(W0=(10.0, 2.0), W2=(5.0, 4.0))
    assert status(vd.latency_where_cheap(fx, Point(6.0, 3.0))) == "pass"   # 1.2 x 5
    assert status(vd.latency_where_cheap(fx, Point(6.01, 3.0))) == "MISS"
    # A little more than twice the CPU: not cheap, the verdict does not apply.
    fx = fixed(W0=(10.0, 2.0), W2=(5.0, 4.01))
    assert status(vd.latency_where_cheap(fx, Point(9.0, 3.0))) == "n/a"
    # A little more than half the latency: not cheap either.
    fx = fixed(W0=(10.0, 2.0), W2=(5.01, 3.0))
    assert status(vd.latency_where_cheap(fx, Point(9.0, 3.0))) == "n/a"


def test_latency_where_cheap_na_when_a_window_is_missing():
    fx = fixed(W0=(10.0, 2.0), W2=(4.0, 3.0), W4=None)
    v = vd.latency_where_cheap(fx, Point(4.5, 3.0))
    assert status(v) == "n/a" and "W4" in v["detail"]
    # A MISS against the windows that are there stands.
    assert status(vd.latency_where_cheap(fx, Point(9.0, 3.0))) == "MISS"


# -- 4 beats QEMU's rules ------------------------------------------------------

def test_beats_qemu_pass():
    pol = {"predictive": Point(5.0, 3.0), "qemu-classic": Point(4.0, 6.0),
           "qemu-weighted": Point(6.0, 2.0)}
    assert status(vd.beats_qemu(pol, "predictive")) == "pass"


@pytest.mark.parametrize("rival", ["qemu-classic", "qemu-weighted"])
def test_beats_qemu_miss(rival):
    pol = {"predictive": Point(5.0, 3.0), "qemu-classic": Point(5.0, 3.0),
           "qemu-weighted": Point(5.0, 3.0)}
    pol[rival] = Point(4.0, 2.0)
    v = vd.beats_qemu(pol, "predictive")
    assert status(v) == "MISS" and v["by"] == [rival]


def test_beats_qemu_exactly_ten_percent():
    pol = {"predictive": Point(10.0, 2.0), "qemu-classic": Point(9.0, 1.8),
           "qemu-weighted": Point(20.0, 1.0)}
    assert status(vd.beats_qemu(pol, "predictive")) == "MISS"
    pol["qemu-classic"] = Point(9.05, 1.8)
    assert status(vd.beats_qemu(pol, "predictive")) == "pass"


def test_beats_qemu_na():
    pol = {"predictive": Point(5.0, 3.0), "qemu-classic": Point(6.0, 6.0),
           "qemu-weighted": None}
    v = vd.beats_qemu(pol, "predictive")
    assert status(v) == "n/a" and "qemu-weighted" in v["detail"]
    v = vd.beats_qemu({"predictive": Point(5.0, 3.0)}, "predictive")
    assert status(v) == "n/a" and "not measured" in v["detail"]


# -- a whole cell, and the summary ---------------------------------------------

def test_judge_cell_and_summary():
    pol = {"predictive": Point(4.2, 3.0), "qemu-classic": Point(9.0, 2.1),
           "qemu-weighted": Point(3.0, 2.8)}
    out = vd.judge_cell(POLLING_PAYS, pol, "predictive", MAX_NS)
    assert [v["id"] for v in out["predictive"]] == [1, 2, 3, 4]
    assert [v["id"] for v in out["qemu-classic"]] == [1, 2, 3]
    assert [status(v) for v in out["predictive"]] == ["pass", "n/a", "pass", "pass"]
    # qemu-classic stays near W0's latency where W2 halves it cheaply.
    assert [status(v) for v in out["qemu-classic"]] == ["pass", "n/a", "MISS"]

    pol2 = dict(pol, predictive=Point(5.0, 3.5))      # dominated by W2 and weighted
    out2 = vd.judge_cell(POLLING_PAYS, pol2, "predictive", MAX_NS)
    assert [status(v) for v in out2["predictive"]] == ["MISS", "n/a", "MISS", "MISS"]
    assert vd.cell_status(out2["predictive"]) == "MISS"

    s = vd.summarize({"0/QD1": out, "50us/10k": out2})
    assert s["predictive"]["cells"] == 2 and s["predictive"]["pass"] == 1
    assert s["predictive"]["line"].startswith("predictive: 1/2 cells pass")
    assert "50us/10k: 1 never dominated (W2)" in s["predictive"]["line"]
    assert "50us/10k: 4 beats QEMU's rules (qemu-weighted)" in s["predictive"]["line"]
    assert s["qemu-classic"]["pass"] == 0


def test_cell_with_missing_configs_is_na_not_pass():
    fx = fixed(W0=None, W2=None)
    out = vd.judge_cell(fx, {"predictive": None}, "predictive", MAX_NS)
    assert all(status(v) == "n/a" for v in out["predictive"])
    assert vd.cell_status(out["predictive"]) == "n/a"
    assert "predictive" in out["predictive"][0]["detail"]


def test_min_ios_lengthens_only_slow_cells():
    loads = {l.name: l for l in cl.parse_loads("qd1,qd1-int,1k,10k,qd32", 256)}

    def runtime(service_ns, load, min_ios=3000, base=1.0):
        return cl.Cell(service_ns, loads[load]).runtime_s(base, min_ios)

    # About 1000 requests a second: 3 s for 3000 of them.
    assert runtime(0, "1k") == 3.0
    assert runtime(1_000_000, "QD1") == 3.0
    assert runtime(1_000_000, "QD1-int") == 3.0
    assert runtime(50_000, "1k") == 3.0
    # Fast enough for 3000 requests in the base runtime: unchanged.
    assert runtime(1_000_000, "QD32") == 1.0
    assert runtime(1_000_000, "10k") == 1.0
    assert runtime(50_000, "QD1") == 1.0
    assert runtime(10_000, "10k", base=0.2) == 0.3
    # No known rate (service 0 at a fixed depth, a real disk): unchanged.
    assert runtime(0, "QD1") == 1.0
    assert runtime(cl.FileMedium("native"), "QD1") == 1.0
    assert runtime(cl.FileMedium("native"), "1k") == 3.0
    # --min-ios 0 turns it off.
    assert runtime(1_000_000, "QD1", min_ios=0) == 1.0

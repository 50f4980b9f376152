"""Claim 8 (port_loss): the timeline arithmetic and the verdict, on synthetic runs."""

from __future__ import annotations

import math

import pytest

from lab.workloads.experiments import port_loss as pl

BIN = 0.25
CAP = 80e6


def flat(levels: list[tuple[float, float, float]]) -> list[list[float]]:
    """A timeline from (from_s, to_s, bps) pieces."""
    out = []
    for lo, hi, bps in levels:
        t = lo
        while t < hi - 1e-9:
            out.append([round(t, 4), bps])
            t += BIN
    return out


def test_window_mean_counts_missing_time_as_zero() -> None:
    tl = flat([(0, 2, 80e6)])
    assert pl.window_mean(tl, BIN, 0, 2) == pytest.approx(80e6)
    assert pl.window_mean(tl, BIN, 1, 3) == pytest.approx(40e6)  # ended at 2 s
    assert pl.window_mean(tl, BIN, 0.125, 0.375) == pytest.approx(80e6)  # straddling bins
    assert math.isnan(pl.window_mean(tl, BIN, 2, 2))


def test_stall_time() -> None:
    tl = flat([(0, 4, 80e6), (4, 8, 0.0)])
    assert pl.stall_time(tl, BIN, 3.0, 8.0) == pytest.approx(4.0)
    assert pl.stall_time(flat([(0, 8, 1e6)]), BIN, 3.0, 8.0) is None
    assert pl.stall_time(flat([(0, 2, 1e6)]), BIN, 3.0, 8.0) == pytest.approx(3.0)


def test_summarise_seven_of_eight() -> None:
    tl = flat([(0, 6, 0.95 * CAP), (6, 14, 0.95 * CAP * 7 / 8), (14, 20, 0.95 * CAP)])
    s = pl.summarise(tl, BIN, CAP, 6.0, 14.0, 20.0)
    assert s["kept"] == pytest.approx(7 / 8, abs=1e-3)
    assert s["back"] == pytest.approx(1.0, abs=1e-3)
    assert s["fraction_before"] == pytest.approx(0.95)
    assert s["stalled_at_s"] is None
    assert s["windows_s"]["down"] == [7.0, 14.0]


def test_summarise_write_that_died() -> None:
    tl = flat([(0, 6, CAP), (6, 8, 0.5 * CAP)])  # then a QP error ended the write
    s = pl.summarise(tl, BIN, CAP, 6.0, 14.0, 20.0)
    assert s["kept"] == pytest.approx(0.5 / 7, abs=1e-3)  # 1 s at half rate of a 7 s window
    assert s["stalled_at_s"] == pytest.approx(8.0)
    assert s["back"] == 0.0


def _mrc(kept: float, **kw: object) -> dict:
    return {"kept": kept, "fraction_before": 0.95, "back": 1.0, "verified": True,
            "qp_errors": 0, **kw}  # fmt: skip


def test_judge() -> None:
    roce = {"kept": 0.3, "qp_errors": 1, "stall_after_fault_s": 4.2}
    assert pl.judge(_mrc(0.86), roce, 8)[0] == "reproduced"
    assert pl.judge(_mrc(0.80), roce, 8)[0] == "partly"
    assert pl.judge(_mrc(0.98), roce, 8)[0] == "partly"  # not fabric-bound
    assert pl.judge(_mrc(0.86, qp_errors=2), roce, 8)[0] == "partly"
    assert pl.judge(_mrc(0.5), roce, 8)[0] == "not reproduced"
    assert pl.judge({"kept": None}, roce, 8)[0] == "not reproduced"
    why = pl.judge(_mrc(0.86), roce, 8)[1]
    assert "0.860" in why and "stopped moving 4.2 s" in why

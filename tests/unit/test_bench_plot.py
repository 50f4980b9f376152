"""mrc-bench --plot without a lab: the goodput-with-faults timeline of a write and the victim
plot of an incast from synthetic results (lab/views/benchplot.py), and the option's plumbing."""

from __future__ import annotations

import json

import pytest

from lab.bench_cli import build_parser
from lab.proc.analysis import Timeline
from lab.views import benchplot as P


def write_result(**kw) -> dict:
    tl = [[i * 0.1, 20e6 if not 14 <= i < 42 else 10e6] for i in range(60)]
    res = {
        "test": "write", "lab": "mrct1", "src": "h0", "dst": "h3", "qps": 1, "size": 262144,
        "transport": "mrc", "planes": 2, "port_rate_bps": 10e6, "switch_mode": "python",
        "capacity_bps": 20e6, "goodput_fraction": 0.78, "verified": True, "retransmissions": 5,
        "timeouts": 1, "qp_errors": 0, "timeline_ms": 100, "timeline": tl, "duration_s": 5.95,
        "msg_rate_pps": 40.0,
        "capacity_timeline": [[0.0, 20e6], [1.4, 10e6], [4.2, 20e6]],
    }  # fmt: skip
    res.update(kw)
    return res


def test_capacity_steps_and_fault_spans() -> None:
    steps = P.capacity_steps([[0.0, 20e6], [1.4, 10e6], [4.2, 20e6]], 6.0)
    assert steps == [(0.0, 1.4, 20e6), (1.4, 4.2, 10e6), (4.2, 6.0, 20e6)]
    assert P.fault_spans(steps) == [(1.4, 4.2, 10e6)]
    assert P.fault_spans(P.capacity_steps([[0.0, 8e8]], 3.0)) == []
    assert P.fault_spans([]) == []


def test_rebin_averages_over_the_time_covered() -> None:
    tl = Timeline(0.1, ((0.0, 10.0), (0.1, 30.0), (0.2, 50.0), (0.3, 70.0), (0.4, 90.0)))
    r = P.rebin(tl, 2)
    assert r.bin_s == pytest.approx(0.2)
    assert [t for t, _v in r.points] == pytest.approx([0.0, 0.2, 0.4])
    assert [v for _t, v in r.points] == pytest.approx([20.0, 60.0, 90.0])
    # the last bin covers 0.05 s of run only: it weighs half in its group
    r = P.rebin(Timeline(0.1, ((0.0, 10.0), (0.1, 40.0))), 2, end_s=0.15)
    assert r.points[0][1] == pytest.approx((10 * 0.1 + 40 * 0.05) / 0.15)
    assert P.rebin(tl, 1) is tl


def test_plot_bins() -> None:
    assert P.plot_bins(0.1, 10.0) == 4  # 1 message per 100 ms bin -> 4 bins
    assert P.plot_bins(0.1, 400.0) == 1
    assert P.plot_bins(0.1, None) == 1


def png(path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_write_png(tmp_path) -> None:
    out = P.plot_result(write_result(), tmp_path / "w.png")
    assert png(out) and out.stat().st_size > 10_000
    out = P.write_png(write_result(capacity_timeline=None, transport="rocev2"), tmp_path / "r.png")
    assert png(out)
    with pytest.raises(ValueError, match="no timeline"):
        P.write_png(write_result(timeline=None), tmp_path / "x.png")


def test_incast_png(tmp_path) -> None:
    tl = [[i * 0.1, 5e6] for i in range(30)]
    res = {"scenario": "incast", "transport": "mrc", "senders": ["h1", "h2"], "dst": "h0",
           "qps": 2, "lab": "mrct1", "verified": True, "trims_total": 40, "drops_total": 0,
           "pause_tx_total": 0,
           "victim": {"src": "h3", "dst": "h1", "ratio": 0.95, "timeline_ms": 100,
                      "timeline": tl, "alone_timeline": tl}}  # fmt: skip
    assert png(P.plot_result(res, tmp_path / "i.png"))
    res["victim"] = None
    with pytest.raises(ValueError, match="victim"):
        P.plot_result(res, tmp_path / "j.png")
    with pytest.raises(ValueError, match="no plot"):
        P.plot_result({"test": "allreduce"}, tmp_path / "k.png")


def test_module_main(tmp_path) -> None:
    src = tmp_path / "run.json"
    src.write_text(json.dumps(write_result()))
    assert P.main([str(src), str(tmp_path / "m.png")]) == 0 and png(tmp_path / "m.png")
    assert P.main([]) == 2


def test_cli_plot_option() -> None:
    a = build_parser().parse_args(["write", "--plot", "x.png"])
    assert a.plot == "x.png" and a.timeline_ms is None
    a = build_parser().parse_args(["incast", "--senders", "h1", "--dst", "h0", "--plot", "i.png"])
    assert a.plot == "i.png"

"""The lab's fault journal (lab/fabric/faultlog.py) and what a plot makes of it."""

from __future__ import annotations

from lab.fabric import faultlog
from lab.views import benchplot


def test_windows_pair_each_fault_with_its_undoing_on_the_runs_clock(tmp_path) -> None:
    faultlog.note(tmp_path, "link a-b down", True, now_unix=100.0)  # before the run: ended in it
    faultlog.note(tmp_path, "reboot p0-t1-0", True, now_unix=104.0)
    faultlog.note(tmp_path, "link a-b down", False, now_unix=103.0)
    faultlog.note(tmp_path, "reboot p0-t1-0", False, now_unix=105.5)
    faultlog.note(tmp_path, "loss a-b", True, now_unix=108.0)  # still applied at the end
    faultlog.note(tmp_path, "port h0 plane 1 down", True, now_unix=90.0)
    faultlog.note(tmp_path, "port h0 plane 1 down", False, now_unix=91.0)  # before: not shown
    (tmp_path / faultlog.FILE).open("a").write('{"t_unix": 1')  # a torn last line
    got = faultlog.windows(tmp_path, 102.0, 110.0)
    assert got == [
        {"label": "link a-b down", "start_s": 0.0, "end_s": 1.0},
        {"label": "reboot p0-t1-0", "start_s": 2.0, "end_s": 3.5},
        {"label": "loss a-b", "start_s": 6.0, "end_s": None},
    ]
    assert faultlog.windows(tmp_path / "none", 0, 1) == []


def test_a_write_plot_names_the_lab_faults(tmp_path) -> None:
    res = {"timeline": [[0.0, 1e8], [0.1, 5e7], [0.2, 1e8]], "timeline_ms": 100,
           "capacity_bps": 1e8, "transport": "mrc", "goodput_fraction": 0.8,
           "lab_faults": [{"label": "link p0-t0-0-p0-t1-0 down", "start_s": 0.1, "end_s": 0.2}]}  # fmt: skip
    path = benchplot.write_png(res, tmp_path / "w.png")
    assert path.stat().st_size > 5000


class _Ax:
    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self.texts: list[str] = []

    def axvspan(self, a: float, b: float, **_kw: object) -> None:
        self.spans.append((a, b))

    def annotate(self, text: str, *_a: object, **_kw: object) -> None:
        self.texts.append(text)


def test_every_journaled_fault_is_shaded_and_named() -> None:
    ax = _Ax()
    faults = [{"label": "reboot p1-t1-0", "start_s": 1.0, "end_s": 2.0},
              {"label": "loss a-b", "start_s": 3.0, "end_s": None}]  # fmt: skip
    benchplot.mark_lab_faults(ax, faults, end_s=5.0)
    assert ax.spans == [(1.0, 2.0), (3.0, 5.0)]
    assert ax.texts == [" reboot p1-t1-0", " loss a-b"]

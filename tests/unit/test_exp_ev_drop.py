"""Claim 6 (ev_drop): reading mrc-bench's EV log, the goodput phases and the verdict, on
synthetic logs."""

from __future__ import annotations

import pytest

from lab.workloads.experiments import ev_drop as ed

COLS = ["t_s", "qp", "ev", "plane", "t1", "old", "new", "cause", "active_on_plane",
        "backups_active_on_plane"]  # fmt: skip
POOL_COLS = ["qp", "ev", "plane", "t1", "backup", "state", "tx_packets", "timeouts"]
PLANES = 8


def ev(plane: int, k: int) -> int:
    """EV k of a plane, as the pool makes them: T1 = k % 2 (base 0)."""
    return k * PLANES + plane


def pool() -> list[list]:
    out = []
    for p in range(PLANES):
        for k in range(24):
            out.append([0, ev(p, k), p, k % 2, k >= 16, "GOOD", 100 if k % 2 else 60, 0])
    return out


def row(t: float, e: int, old: str, new: str, cause: str = "LOST", act: int = 16,
        back: int = 1) -> list:  # fmt: skip
    return [t, 0, e, e % PLANES, (e // PLANES) % 2, old, new, cause, act, back]


def log(events: list[list], dropped: int = 0) -> dict:
    return {"columns": COLS, "events": events, "dropped": dropped,
            "pool_columns": POOL_COLS, "pool": pool()}  # fmt: skip


def test_time_not_good_and_first_exit() -> None:
    trans = [
        {"t_s": 1.0, "old": "GOOD", "new": "ASSUMED_BAD", "cause": "LOST"},
        {"t_s": 1.5, "old": "ASSUMED_BAD", "new": "GOOD", "cause": "PROBE_OK"},
        {"t_s": 3.0, "old": "GOOD", "new": "ASSUMED_BAD", "cause": "LOST"},
    ]
    assert ed.time_not_good(trans, 0.0, 4.0) == pytest.approx(1.5)
    assert ed.time_not_good(trans, 1.2, 4.0) == pytest.approx(1.3)
    assert ed.time_not_good([], 0, 4) == 0
    assert ed.first_exit(trans, 0.0, 4.0)["t_s"] == 1.0
    assert ed.first_exit(trans, 1.1, 4.0)["t_s"] == 3.0
    assert ed.first_exit(trans, 3.5, 4.0) is None


def test_summarise_evs() -> None:
    lossy = [ev(0, k) for k in range(0, 16, 2)]  # the 8 sprayed EVs of plane 0 on T1 0
    events = []
    for n, e in enumerate(lossy):
        events.append(row(2.1 + 0.1 * n, e, "GOOD", "ASSUMED_BAD", back=min(n + 1, 4)))
        events.append(row(2.2 + 0.1 * n, e, "ASSUMED_BAD", "GOOD", "PROBE_OK", back=0))
    events.append(row(3.0, ev(3, 1), "GOOD", "ASSUMED_BAD", "TIMEOUT"))  # a healthy one
    events.append(row(3.0, ev(3, 1), "GOOD", "SKIP", "ECN_ECHO"))  # congestion: not counted
    s = ed.summarise_evs(log(events), 2.0, 6.0, 16)
    assert s["evs_on_path_sprayed"] == 8 and s["evs_on_path_backups"] == 4
    assert s["evs_left"] == 8 and s["left_share"] == 1.0
    assert s["delay_median_s"] == pytest.approx(0.45)
    assert s["delay_max_s"] == pytest.approx(0.8)
    assert s["first_exit_causes"] == {"LOST": 8}
    assert s["out_of_active_share"] == pytest.approx(0.1 / 4)
    assert s["exits_per_ev"] == 1 and s["out_episode_s"] == pytest.approx(0.1)
    assert s["plane_active_full"] is True and s["backups_active_max"] == 4
    assert s["healthy_evs_condemned"] == 1 and s["healthy_evs"] == 180
    assert s["path_share_of_plane_packets"] == pytest.approx(720 / (720 + 1200))


def test_summarise_evs_nothing_left() -> None:
    s = ed.summarise_evs(log([]), 2.0, 6.0, 16)
    assert s["evs_left"] == 0 and s["delay_median_s"] is None
    assert s["out_of_active_share"] == 0 and s["plane_active_full"] is None


def test_truncated_log_limits_the_window() -> None:
    e = ev(0, 0)
    events = [row(2.5, e, "GOOD", "ASSUMED_BAD"), row(3.0, ev(1, 0), "GOOD", "SKIP", "ECN_ECHO")]
    s = ed.summarise_evs(log(events, dropped=5), 2.0, 10.0, 16)
    assert s["log_dropped"] == 5
    # the window ends at the last logged event (3.0): the EV was out for 0.5 of 1.0 s
    assert s["out_of_active_share"] == pytest.approx(0.0)  # median over 8 EVs, 1 out
    trans = ed.transitions(ed.rows(log(events)))[e]
    assert ed.time_not_good(trans, 2.0, 3.0) == 0.5


def test_goodput_phases() -> None:
    tl = [[k * 0.25, 80.0 if k < 12 or k >= 20 else 40.0] for k in range(40)]
    f = ed.goodput_phases(tl, 0.25, 100.0, 3.0, 5.0, 10.0)
    assert f["fraction_before"] == pytest.approx(0.8)
    assert f["fraction_loss"] == pytest.approx(0.4)
    assert f["kept"] == pytest.approx(0.5)
    assert f["fraction_after"] == pytest.approx(0.8)
    assert ed.goodput_phases(tl, 0.25, 0.0, 3, 5, 10)["kept"] is None


def _m(**kw: object) -> dict:
    base = {"left_share": 1.0, "delay_median_s": 0.2, "out_of_active_share": 0.8,
            "kept": 0.97, "verified": True, "qp_errors": 0, "evs_left": 8,
            "evs_on_path_sprayed": 8, "plane_active_full": True}  # fmt: skip
    return {**base, **kw}


def test_judge() -> None:
    ro = {"on_path_runs": 1, "runs_n": 3, "kept_on_path": 0.3, "qp_errors": 0}
    assert ed.judge(_m(), ro, 16)[0] == "reproduced"
    assert ed.judge(_m(out_of_active_share=0.2), ro, 16)[0] == "partly"  # probes bring it back
    assert ed.judge(_m(delay_median_s=3.0), ro, 16)[0] == "partly"  # slow, goodput fine
    assert ed.judge(_m(delay_median_s=3.0, kept=0.5), ro, 16)[0] == "not reproduced"
    assert ed.judge(_m(left_share=None), ro, 16)[0] == "not reproduced"
    why = ed.judge(_m(), ro, 16)[1]
    assert "1 of 16 paths" in why and "200 ms" in why and "1 of 3 runs" in why
    assert "no run hashed" in ed.judge(_m(), {"on_path_runs": 0, "runs_n": 3}, 16)[1]

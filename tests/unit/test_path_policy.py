"""Path policies (mrcnic.transport.path_policy): MRC's path-aware active sets, plane shares,
the built-ins, user policies from a plugin file, and the C send engine dealing from what the
policy decided."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from mrcnic import plugins
from mrcnic.transport.ev import EvConfig, EvInput, EvState, EvTable
from mrcnic.transport.path_policy import (
    MAX_TURNS,
    EvView,
    arrange,
    make_path_policy,
    path_policies,
    register_path_policy,
    turns,
)
from tests.unit.test_tx_engine import _run, needs_c

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "one_path_per_plane.py"


def _table(evs: int = 128, t1: int = 8, **kw: object) -> EvTable:
    return EvTable(8, t1, EvConfig(ev_count=evs, **kw), seed=3)  # type: ignore[arg-type]


def _entries_per_path(t: EvTable, plane: int) -> Counter[int]:
    return Counter(t.path_of[s] for g in t._groups for s in g if t.plane_of[s] == plane)


def _fail_path(t: EvTable, path: int) -> None:
    for s in t.path_slots[path]:
        t._transition(s, EvInput.PORT_DOWN, 0.0)
    t._rebuild()


@pytest.mark.parametrize("evs", [128, 112])
def test_every_path_of_a_plane_carries_the_same_share(evs: int) -> None:
    """112 EVs over 8 planes x 8 paths is 14 per plane: not a multiple of the paths, so the
    first EVs in pool order used to give six paths two entries and two paths one."""
    t = _table(evs)
    for plane in range(8):
        per_path = _entries_per_path(t, plane)
        assert len(per_path) == 8 and len(set(per_path.values())) == 1, per_path


def test_a_failed_paths_share_is_spread_equally_over_the_planes_live_paths() -> None:
    t = _table()
    _fail_path(t, 0)  # plane 0, T1 0
    per_path = _entries_per_path(t, 0)
    assert 0 not in per_path
    assert sorted(per_path) == list(range(1, 8)) and set(per_path.values()) == {3}
    assert len(t._groups) == 8  # equal: each plane still takes its turn


def test_a_skipped_ev_sheds_load_to_a_different_path() -> None:
    """The first ECN echo on a path moves an entry off it (the old set promoted a backup of
    the same T1, so the congested path kept its share)."""
    t = _table()
    before = _entries_per_path(t, 0)
    slot = t._groups[0][0]
    path = t.path_of[slot]
    t.apply(slot, EvInput.ECN_ECHO, 0.0)
    assert t.state[slot] is EvState.SKIP
    after = _entries_per_path(t, 0)
    assert after[path] == before[path] - 1
    assert sum(after.values()) == sum(before.values())
    gained = [p for p in after if after[p] > before[p]]
    assert len(gained) == 1 and gained[0] != path


def test_a_retired_evs_share_stays_on_its_live_path() -> None:
    """One EV lost (random loss, or a false alarm) says nothing about its path: the path
    keeps its share on its other EVs until the path-strike rule retires the path."""
    t = _table()
    before = _entries_per_path(t, 0)
    slot = t._groups[0][0]
    t._transition(slot, EvInput.LOST, 0.0)
    t._rebuild()
    assert t.state[slot] is EvState.ASSUMED_BAD
    assert slot not in t._groups[0]
    assert _entries_per_path(t, 0) == before


def test_capacity_share_follows_the_surviving_paths() -> None:
    t = _table(plane_share="capacity")
    assert sorted(t._sched) == list(range(8))  # all paths alive: planes take equal turns
    _fail_path(t, 0)
    entries = [len(g) for g in t._groups]
    assert entries[0] * 8 == entries[1] * 7  # 7 of 8 paths: 7/8 of a full plane's entries
    turns = Counter(t._sched)
    assert turns[0] * 8 == turns[1] * 7 and all(turns[p] == turns[1] for p in range(1, 8))
    # spread: no plane takes two turns in a row (its NIC port would get a burst)
    assert all(a != b for a, b in zip(t._sched, t._sched[1:] + t._sched[:1], strict=True))


def test_turns_are_smooth_and_bounded() -> None:
    assert turns([[1], [2], [3]], capacity=False) == [0, 1, 2]
    assert Counter(turns([[1] * 2, [2] * 4], capacity=True)) == {0: 1, 1: 2}
    long = turns([[0] * 100, [1] * 99, [2] * 98], capacity=True)
    assert len(long) <= MAX_TURNS and set(long) == {0, 1, 2}


def test_oblivious_sprays_every_ev_whatever_its_state() -> None:
    t = _table(path_policy="oblivious")
    _fail_path(t, 0)
    assert sorted(s for g in t._groups for s in g) == list(range(len(t.ev_values)))


def test_reps_trades_a_congested_ev_for_another_and_drops_a_lost_one() -> None:
    t = _table(path_policy="reps")
    slot = t._groups[0][0]
    n = len(t._groups[0])
    t.apply(slot, EvInput.ECN_ECHO, 0.0)
    assert slot not in t._groups[0] and len(t._groups[0]) == n  # explored: a fresh EV
    other = t._groups[0][0]
    t.apply(other, EvInput.LOST, 0.0)
    assert other not in t._groups[0] and len(t._groups[0]) == n - 1  # frozen: no exploring


def test_ecmp_keeps_one_hashed_path_per_plane_through_congestion() -> None:
    """Per-flow hashing: each plane's entries all sit on one path, QPs hash to different
    paths, an ECN echo moves nothing (a hash ignores congestion), a dead path is rehashed."""
    t = _table(path_policy="ecmp")
    paths = [set(_entries_per_path(t, p)) for p in range(8)]
    assert all(len(p) == 1 for p in paths), paths
    hashed = {
        tuple(next(iter(_entries_per_path(q, p))) for p in range(8))
        for q in (EvTable(8, 8, EvConfig(path_policy="ecmp"), seed=s) for s in range(8))
    }
    assert len(hashed) > 1  # QPs (seeds) do not all hash alike
    slot = t._groups[0][0]
    t.apply(slot, EvInput.ECN_ECHO, 0.0)
    assert t.state[slot] is EvState.SKIP and slot in t._groups[0]
    (path,) = paths[0]
    _fail_path(t, path)
    (moved,) = set(_entries_per_path(t, 0))
    assert moved != path


def test_unknown_names_are_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known: ecmp, mrc, oblivious, reps"):
        make_path_policy("nope")
    with pytest.raises(ValueError, match="no path policy named 'nope'"):
        _table(path_policy="nope")
    with pytest.raises(ValueError, match="plane_share"):
        _table(plane_share="half")
    with pytest.raises(plugins.PluginError, match="does not exist"):
        plugins.QpChoice(plugins=("/nonexistent/p.py",)).check()


def test_a_plugin_file_registers_a_policy_both_engines_follow() -> None:
    plugins.load_plugin(str(EXAMPLE))
    assert "one-path" in path_policies()
    t = _table(path_policy="one-path")
    for plane in range(8):
        assert len(_entries_per_path(t, plane)) == 1  # one path per plane


class _FirstEv:
    """A user policy the C engine cannot know about: each plane's first EV, whatever."""

    name = "first-ev"

    def __init__(self, seed: int = 0) -> None:
        pass

    def groups(self, t: EvView) -> list[list[int]]:
        return arrange(t, [[] if t.plane_down[p] else [t.pool[p][0]] for p in range(t.planes)])

    def on_input(self, t: EvView, slot: int, inp: EvInput) -> bool:
        return False


@needs_c
@pytest.mark.parametrize(
    ("policy", "share"),
    [("first-ev", "equal"), ("one-path", "equal"), ("oblivious", "equal"), ("reps", "equal"),
     ("mrc", "capacity"), ("reps", "capacity"), ("ecmp", "equal")],
)  # fmt: skip
def test_the_c_engine_sends_only_where_the_policy_says(policy: str, share: str) -> None:
    """The C send engine deals from the groups Python's policy made (a subclass of EvTable
    used to be bypassed by it): each policy's seeded run gives the same frames, events and
    per-EV counters on both engines, and first-ev's QP sent data on each plane's first EV
    only."""
    register_path_policy("first-ev", _FirstEv)
    plugins.load_plugin(str(EXAMPLE))
    for seed in range(4):
        over = {"path_policy": policy, "plane_share": share}
        c = _run("c", seed, ev_overrides=over)
        py = _run("py", seed, ev_overrides=over)
        assert c["trace"] == py["trace"]
        assert c["ev"] == py["ev"]
        if policy == "first-ev":
            sent = [e for e in c["ev"] if e["tx_packets"]]
            assert sent, "nothing was sent"
            firsts = {}
            for e in c["ev"]:  # ev_stats lists each plane's pool in order
                firsts.setdefault(e["plane"], e["ev"])
            assert {e["ev"] for e in sent} <= set(firsts.values())


def test_mrc_sim_loads_a_plugin_and_reports_its_choices() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mrcnic.sim.transfer", "--planes", "2", "--paths-per-plane",
         "2", "--size", "256K", "--plugin", str(EXAMPLE), "--path-policy", "one-path",
         "--plane-share", "capacity", "--json"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    d = json.loads(out.stdout)
    assert d["verified"] and d["path_policy"] == "one-path" and d["plane_share"] == "capacity"
    assert len(d["path_packets"]) == 4
    assert sum(1 for n in d["path_packets"] if n) == 2  # one path of each plane


def test_mrc_sim_refuses_an_unknown_policy_or_cc_clearly() -> None:
    for flag, name in (("--path-policy", "nope"), ("--cc", "mymod")):
        r = subprocess.run(
            [sys.executable, "-m", "mrcnic.sim.transfer", flag, name],
            capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
        assert r.returncode == 2 and "known:" in r.stderr and "Traceback" not in r.stderr


def test_mrc_sim_and_its_incast_run_the_users_cc_from_its_file() -> None:
    cc_file = str(ROOT / "examples" / "ecn_loss_aimd.py")
    out = subprocess.run(
        [sys.executable, "-m", "mrcnic.sim.transfer", "--planes", "2", "--paths-per-plane",
         "2", "--size", "256K", "--plugin", cc_file, "--cc", "ecn-loss-aimd", "--json"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    d = json.loads(out.stdout)
    assert d["verified"] and d["cc"] == "ecn-loss-aimd" and d["path_policy"] == "mrc"
    out = subprocess.run(
        [sys.executable, "-m", "mrcnic.sim.incast", "--senders", "2", "--size", "256K",
         "--plugin", cc_file, "--cc", "ecn-loss-aimd", "--plugin", str(EXAMPLE),
         "--path-policy", "one-path", "--json"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    assert json.loads(out.stdout)["verified"]

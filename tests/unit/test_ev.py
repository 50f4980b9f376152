"""The EV state machine: the table is total, each transition, backups, rotation, probes."""

from __future__ import annotations

import pytest

from mrcnic.transport.ev import (
    FLAP_DOUBLINGS_MAX,
    TRANSITIONS,
    EvConfig,
    EvInput,
    EvState,
    EvTable,
    mermaid,
    next_state,
)

G, S, B, D = EvState.GOOD, EvState.SKIP, EvState.ASSUMED_BAD, EvState.DENIED


def table(**kw) -> EvTable:
    cfg = EvConfig(**{"ev_count": 8, "backup_per_plane": 2, **kw})
    return EvTable(planes=2, t1_count=2, config=cfg, seed=5)


def test_table_is_total():
    assert set(TRANSITIONS) == {(s, i) for s in EvState for i in EvInput}


@pytest.mark.parametrize(
    ("state", "inp", "new"),
    [
        (G, EvInput.ECN_ECHO, S),
        (G, EvInput.TRIMMED, S),
        (S, EvInput.ROTATION, G),
        (G, EvInput.TIMEOUT, B),
        (S, EvInput.TIMEOUT, B),
        (G, EvInput.ALWAYS_SKIP, B),
        (B, EvInput.PROBE_OK, G),
        (B, EvInput.PROBE_OK_ECN, S),
        (B, EvInput.ECN_ECHO, B),  # upgrades need a probe
        (B, EvInput.TRIMMED, B),
        (G, EvInput.DENY, D),
        (B, EvInput.DENY, D),
        (D, EvInput.PROBE_OK, D),
        (D, EvInput.TIMEOUT, D),
        (D, EvInput.ALLOW, G),
        (B, EvInput.ALLOW, G),
        (G, EvInput.PORT_DOWN, B),
    ],
)
def test_transition(state, inp, new):
    assert next_state(state, inp) is new


def test_evs_split_equally_and_map_to_their_plane():
    t = EvTable(planes=8, t1_count=4, config=EvConfig(), seed=1)
    assert len(t.active) == 128
    per_plane = [sum(1 for s in t.active if t.plane_of[s] == p) for p in range(8)]
    assert per_plane == [16] * 8
    assert all(ev % 8 == t.plane_of[s] for s, ev in enumerate(t.ev_values))
    t1s = {(ev // 8) % 4 for ev in t.ev_values}
    assert t1s == {0, 1, 2, 3}
    assert len(t.reverse) == 16 and {ev % 8 for ev in t.reverse} == set(range(8))
    other = EvTable(planes=8, t1_count=4, config=EvConfig(), seed=2)
    assert not set(other.ev_values) & set(t.ev_values)


def test_configurable_to_256_evs():
    t = EvTable(planes=8, t1_count=4, config=EvConfig(ev_count=256), seed=1)
    assert len(t.active) == 256


def test_retired_ev_is_replaced_from_the_same_plane():
    t = table()
    slot = t.active[0]
    plane = t.plane_of[slot]
    before = sorted(t.active)
    assert t.apply(slot, EvInput.TIMEOUT, 1.0)
    assert slot not in t.active and len(t.active) == len(before)
    assert sum(1 for s in t.active if t.plane_of[s] == plane) == 4
    ev = t.events.popleft()
    assert (ev.old, ev.new, ev.cause, ev.time_s) == (G, B, EvInput.TIMEOUT, 1.0)


def test_timeout_on_a_path_that_showed_life_is_not_a_downgrade():
    t = table()
    slot = t.active[0]
    t.note_delivered(slot, sent_s=2.0)
    assert not t.on_timeout(slot, sent_s=1.5, now_s=3.0)  # a later packet got through
    assert t.state[slot] is G
    assert t.on_timeout(slot, sent_s=2.5, now_s=3.0)
    assert t.state[slot] is B


def test_skip_lasts_one_rotation():
    t = table()
    slot = t.active[0]
    t.apply(slot, EvInput.ECN_ECHO, 0.0)
    assert t.state[slot] is S
    picks = [t.pick() for _ in range(len(t.active) - 1)]
    assert slot not in picks and t.state[slot] is S
    t.pick()
    assert t.state[slot] is G


def test_pick_spreads_over_planes_and_avoids_the_losing_plane():
    t = table()
    picks = [t.pick() for _ in range(400)]
    assert sum(1 for s in picks if t.plane_of[s] == 0) == 200
    assert set(picks) == set(t.active)
    for _ in range(50):
        lost = t.active[0]
        s = t.pick(avoid=lost)
        assert s != lost and t.plane_of[s] != t.plane_of[lost]


def test_probes_restore_only_when_answered_enough_times():
    t = table(probe_successes=2)
    slot = t.active[0]
    t.apply(slot, EvInput.TIMEOUT, 0.0)
    assert t.next_probe_s() == 0.0
    assert t.due_probes(0.0, 1e-3, ts_ns=10) == [slot]
    assert t.due_probes(0.5e-3, 1e-3, ts_ns=20) == []  # not due yet
    t.on_probe_answer(slot, ts_ns=999, ecn=False, now_s=0.1e-3)  # stale answer: ignored
    assert t.state[slot] is B
    t.on_probe_answer(slot, ts_ns=10, ecn=False, now_s=0.2e-3)
    assert t.state[slot] is B  # one success of two
    assert t.due_probes(0.3e-3, 1e-3, ts_ns=30) == [slot]
    t.on_probe_answer(slot, ts_ns=30, ecn=False, now_s=0.4e-3)
    assert t.state[slot] is G and slot not in t.probe_due


def _restore(t: EvTable, slot: int, now_s: float) -> int:
    """Answer probes of ``slot`` until it is back; returns how many it took."""
    n = 0
    while t.state[slot] is B:
        ts = int(now_s * 1e9) + n
        assert t.due_probes(now_s, 0.0, ts_ns=ts) == [slot]
        t.on_probe_answer(slot, ts_ns=ts, ecn=False, now_s=now_s)
        n += 1
    return n


def test_an_ev_that_fails_again_soon_after_coming_back_needs_more_probes():
    t = table(probe_successes=2, flap_memory_s=1.0)
    slot = t.active[0]
    t.apply(slot, EvInput.LOST, 0.0)
    assert _restore(t, slot, 0.01) == 2
    t.apply(slot, EvInput.LOST, 0.02)  # relapse 10 ms after coming back
    assert _restore(t, slot, 0.03) == 4
    t.apply(slot, EvInput.TIMEOUT, 0.04)
    assert _restore(t, slot, 0.05) == 8
    assert t.flaps_damped == 2
    t.apply(slot, EvInput.LOST, 2.0)  # up for longer than flap_memory_s: starts over
    assert _restore(t, slot, 2.01) == 2


def test_flap_damping_is_capped_and_can_be_turned_off():
    t = table(probe_successes=2, flap_memory_s=1.0)
    slot = t.active[0]
    for k in range(10):
        t.apply(slot, EvInput.LOST, k * 0.1)
        _restore(t, slot, k * 0.1 + 0.01)
    assert t.probe_successes_needed(slot, 1.0) == 2 << FLAP_DOUBLINGS_MAX
    t = table(probe_successes=2, flap_memory_s=0.0)
    slot = t.active[0]
    for k in range(4):
        t.apply(slot, EvInput.LOST, k * 0.1)
        assert _restore(t, slot, k * 0.1 + 0.01) == 2
    with pytest.raises(ValueError, match="flap_memory_s"):
        table(flap_memory_s=-1.0)


def test_damping_never_keeps_a_plane_out():
    t = table(probe_successes=2, flap_memory_s=1.0)
    slot = t.active[0]
    t.apply(slot, EvInput.LOST, 0.0)
    _restore(t, slot, 0.01)
    t.apply(slot, EvInput.LOST, 0.02)  # a relapse: 4 answers next time...
    for other in t.pool[t.plane_of[slot]]:
        t.apply(other, EvInput.PORT_DOWN, 0.03)  # ...unless nothing else of its plane is up
    assert t.probe_successes_needed(slot, 0.04) == 2


def test_a_port_down_is_no_relapse():
    t = table(probe_successes=2, flap_memory_s=1.0)
    slot = t.active[0]
    t.apply(slot, EvInput.LOST, 0.0)
    _restore(t, slot, 0.01)
    t.apply(slot, EvInput.LOST, 0.02)
    assert _restore(t, slot, 0.03) == 4
    t.apply(slot, EvInput.PORT_DOWN, 0.04)  # the port's own signal, not a lossy path
    assert t.probe_successes_needed(slot, 0.05) == 4


def test_unanswered_probes_back_off():
    t = table()
    slot = t.active[0]
    t.apply(slot, EvInput.TIMEOUT, 0.0)
    t.due_probes(0.0, 1.0, 1)
    t.due_probes(1.0, 1.0, 2)  # first one unanswered
    assert t.probe_due[slot] == pytest.approx(3.0)


@pytest.mark.parametrize("marks", [(True, True), (False, True), (True, False)])
def test_a_ce_marked_probe_answer_counts_like_a_clean_one(marks):
    """Issue 25: a CE-marked answer restored an EV after one answer where a clean one needs
    two. Now every answer counts once; the answer that completes the count decides SKIP
    (marked) or GOOD (clean), as the table says."""
    t = table(probe_successes=2)
    slot = t.active[0]
    t.apply(slot, EvInput.TIMEOUT, 0.0)
    t.due_probes(0.0, 0.0, 7)
    t.on_probe_answer(slot, 7, ecn=marks[0], now_s=1e-4)
    assert t.state[slot] is B  # one answer of two, marked or not
    t.due_probes(2e-4, 0.0, 8)
    t.on_probe_answer(slot, 8, ecn=marks[1], now_s=3e-4)
    assert t.state[slot] is (S if marks[1] else G)


def test_port_down_takes_the_plane_out_at_once_and_back_needs_probes():
    t = table()
    t.set_plane_down(1, True, 1.0)
    assert all(t.plane_of[s] == 0 for s in t.active)
    assert all(t.state[s] is B for s in t.pool[1])
    assert t.next_probe_s() is None  # no probing into a dead port
    assert all(ev % 2 == 0 for ev in (t.next_reverse_ev() for _ in range(10)))
    t.set_plane_down(1, False, 2.0)
    assert t.next_probe_s() == 2.0
    assert all(t.plane_of[s] == 0 for s in t.active)


def test_deny_and_allow_through_the_table():
    t = table()
    slot = t.active[0]
    t.apply(slot, EvInput.DENY, 0.0)
    t.apply(slot, EvInput.PROBE_OK, 0.0)
    assert t.state[slot] is D and slot not in t.active
    t.apply(slot, EvInput.ALLOW, 0.0)
    assert t.state[slot] is G


def test_nothing_good_falls_back_to_bad_evs_so_the_qp_keeps_trying():
    t = table()
    for s in range(len(t.ev_values)):
        t.apply(s, EvInput.TIMEOUT, 0.0)
    assert t.active and t.pick() >= 0


def test_mermaid_lists_every_real_transition():
    text = mermaid()
    assert "GOOD --> SKIP: ECN_ECHO" in text and "ASSUMED_BAD --> GOOD: PROBE_OK" in text


# -- spraying: the shuffled bag ---------------------------------------------------------------


def test_bag_deals_every_active_ev_once_per_round_in_a_random_order():
    t = EvTable(planes=2, t1_count=4, config=EvConfig(ev_count=16, backup_per_plane=2), seed=3)
    per_plane = len(t.active) // 2
    rounds = 5
    picks = [t.pick() for _ in range(2 * per_plane * rounds)]
    for plane in range(2):
        mine = [s for s in picks if t.plane_of[s] == plane]
        chunks = [mine[i : i + per_plane] for i in range(0, len(mine), per_plane)]
        assert all(sorted(c) == sorted(chunks[0]) for c in chunks)  # each EV once per round
        assert len({tuple(c) for c in chunks}) > 1  # the order is shuffled, not a fixed cycle
        paths = [t.path_of[s] for s in mine]
        assert len(set(paths)) == 4 and len({paths.count(p) for p in set(paths)}) == 1


def test_random_spray_is_still_available_and_drifts():
    t = EvTable(
        planes=1,
        t1_count=4,
        config=EvConfig(ev_count=16, backup_per_plane=2, spray="random"),
        seed=3,
    )
    counts = {}
    for _ in range(160):
        s = t.pick()
        counts[s] = counts.get(s, 0) + 1
    assert set(counts) == set(t.active) and len(set(counts.values())) > 1
    with pytest.raises(ValueError, match="spray"):
        EvTable(planes=1, t1_count=1, config=EvConfig(spray="sideways"), seed=1)


def test_bag_avoids_the_losing_ev_even_within_a_single_plane():
    t = EvTable(planes=1, t1_count=2, config=EvConfig(ev_count=4, backup_per_plane=1), seed=9)
    for _ in range(200):
        lost = t.pick()
        assert t.pick(avoid=lost) != lost


# -- timeouts: dead, lossy, or only queued ----------------------------------------------------


def test_timeout_on_a_path_still_draining_its_queue_is_not_a_downgrade():
    t = table()
    slot = t.active[0]
    # another EV on the same fabric path (same plane and T1) was acknowledged just now
    twin = next(
        s for s in t.pool[t.plane_of[slot]] if s != slot and t.path_of[s] == t.path_of[slot]
    )
    t.note_delivered(twin, sent_s=0.5, now_s=2.9)  # sent before ours: no proof by itself
    assert not t.on_timeout(slot, sent_s=1.0, now_s=3.0, quiet_s=0.5)  # queued, not dead
    assert t.state[slot] is G
    assert t.on_timeout(slot, sent_s=1.0, now_s=3.6, quiet_s=0.5)  # silent for too long
    assert t.state[slot] is B


def test_a_later_packet_on_the_same_path_proves_random_loss():
    def three(t: EvTable) -> tuple[int, int, int]:
        slot = t.active[0]
        same = [s for s in t.pool[t.plane_of[slot]] if s != slot]
        twin = next(s for s in same if t.path_of[s] == t.path_of[slot])
        other = next(s for s in same if t.path_of[s] != t.path_of[slot])
        return slot, twin, other

    t = table()
    slot, twin, other = three(t)
    t.note_delivered(other, sent_s=2.0, now_s=2.5)  # another path's success proves nothing
    assert t.on_timeout(slot, sent_s=1.0, now_s=3.0)
    t = table()
    slot, twin, other = three(t)
    t.note_delivered(twin, sent_s=2.0, now_s=2.5)  # sent later on the same path: it lives
    assert not t.on_timeout(slot, sent_s=1.5, now_s=3.0)
    assert t.state[slot] is G


def _same_path(t: EvTable) -> tuple[int, int, list[int]]:
    """Two EVs of one fabric path, and every slot of that path."""
    slot = t.active[0]
    path = t.path_of[slot]
    twin = next(s for s in t.active if s != slot and t.path_of[s] == path)
    return slot, twin, [s for s in range(len(t.ev_values)) if t.path_of[s] == path]


def _other_path_acked(t: EvTable, path_slots: list[int], now_s: float) -> None:
    """Another path delivers at ``now_s``: the QP is hearing from the fabric."""
    other = next(s for s in t.active if s not in path_slots)
    t.note_delivered(other, sent_s=now_s - 0.01, now_s=now_s)


def test_two_losses_on_one_path_with_no_ack_between_retire_the_path():
    t = table(ev_count=16)
    slot, twin, path_slots = _same_path(t)
    others = [s for s in range(len(t.ev_values)) if s not in path_slots]
    assert t.apply(slot, EvInput.LOST, 1.0)  # the first strike: that EV only
    assert [t.state[s] for s in path_slots].count(B) == 1
    _other_path_acked(t, path_slots, 1.1)
    assert t.apply(twin, EvInput.TIMEOUT, 1.2)  # another EV, nothing acknowledged between
    assert all(t.state[s] is B for s in path_slots)  # backups of that path too
    assert all(t.state[s] is G for s in others) and t.paths_retired == 1
    assert not set(path_slots) & set(t.active)
    causes = [e.cause for e in t.events]
    assert len(causes) == len(path_slots) and set(causes) == {EvInput.LOST, EvInput.TIMEOUT}


def test_an_ack_on_the_path_between_two_losses_keeps_it():
    t = table(ev_count=16)
    slot, twin, path_slots = _same_path(t)
    t.apply(slot, EvInput.LOST, 1.0)
    t.note_delivered(twin, sent_s=0.9, now_s=1.1)  # the path delivers: random loss
    t.apply(twin, EvInput.LOST, 1.2)
    assert [t.state[s] for s in path_slots].count(B) == 2 and t.paths_retired == 0


def test_a_path_acknowledged_within_half_an_rto_is_queued_not_dead():
    """Its whole queue looks lost to the reordering rule while it drains: strikes there do
    not retire it until it has been silent for path_quiet_s."""
    t = table(ev_count=16)
    t.path_quiet_s = 0.05
    slot, twin, path_slots = _same_path(t)
    t.note_delivered(twin, sent_s=0.95, now_s=0.99)
    t.apply(slot, EvInput.LOST, 1.0)
    _other_path_acked(t, path_slots, 1.01)
    t.apply(twin, EvInput.LOST, 1.02)  # no ack since the first strike, but one 30 ms ago
    assert [t.state[s] for s in path_slots].count(B) == 2 and t.paths_retired == 0
    third = next(s for s in path_slots if t.state[s] is G and s in t.active)
    _other_path_acked(t, path_slots, 1.05)
    t.apply(third, EvInput.LOST, 1.06)  # silent for 70 ms now
    assert all(t.state[s] is B for s in path_slots) and t.paths_retired == 1


def test_silence_on_every_path_retires_no_path():
    """Timeouts everywhere with no acknowledgment anywhere (the QP's first RTO, a stall of its
    own process) say nothing about one path: each EV goes alone, as before."""
    t = table(ev_count=16)
    slot, twin, path_slots = _same_path(t)
    t.apply(slot, EvInput.TIMEOUT, 1.0)
    t.apply(twin, EvInput.TIMEOUT, 1.2)
    assert [t.state[s] for s in path_slots].count(B) == 2 and t.paths_retired == 0


def test_the_same_ev_losing_twice_is_not_its_path():
    t = table(ev_count=16)
    slot, _twin, path_slots = _same_path(t)
    t.apply(slot, EvInput.LOST, 1.0)
    t.apply(slot, EvInput.LOST, 1.1)  # a bad EV (ev_drop's case), its path may be fine
    assert [t.state[s] for s in path_slots].count(B) == 1 and t.paths_retired == 0


def test_paths_follow_the_address_plan():
    t = EvTable(planes=8, t1_count=4, config=EvConfig(), seed=1)
    for s, ev in enumerate(t.ev_values):
        assert t.path_of[s] == (ev % 8) * 4 + (ev // 8) % 4


def test_a_plane_whose_evs_all_skip_keeps_its_share():
    """Congestion on every path of a plane does not move its share to the other planes
    (uneven planes look like incast to the receivers): its SKIP EVs carry it."""
    t = EvTable(planes=4, t1_count=2, config=EvConfig(ev_count=16, backup_per_plane=2), seed=9)
    for slot in t.pool[2]:
        t.apply(slot, EvInput.ECN_ECHO, 1.0)
    assert all(t.state[s] is S for s in t.pool[2])
    picks = [t.plane_of[t.pick()] for _ in range(400)]
    assert [picks.count(p) for p in range(4)] == [100, 100, 100, 100]


def test_a_plane_whose_evs_all_failed_is_out():
    t = EvTable(planes=4, t1_count=2, config=EvConfig(ev_count=16, backup_per_plane=2), seed=9)
    for slot in t.pool[1]:
        t.apply(slot, EvInput.TIMEOUT, 1.0)
    picks = [t.plane_of[t.pick()] for _ in range(300)]
    assert picks.count(1) == 0
    assert [picks.count(p) for p in (0, 2, 3)] == [100, 100, 100]


def test_ev_min_active_keeps_a_floor_of_paths():
    t = table(ev_min_active=3)
    for slot in range(len(t.ev_values)):
        t.apply(slot, EvInput.TIMEOUT, 1.0)
    assert len(t.active) >= 3  # every ASSUMED_BAD EV of a live plane is tried again
    assert all(t.state[s] is B for s in t.active)
    t0 = table(ev_min_active=0)
    for slot in range(len(t0.ev_values)):
        t0.apply(slot, EvInput.TIMEOUT, 1.0)
    assert t0.active == [] and t0.pick() == -1  # no floor: nothing to send on
    with pytest.raises(ValueError, match="ev_min_active"):
        table(ev_min_active=99)

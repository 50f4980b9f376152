"""The controller's model after OCP libmrc (mrcnic.profiles): the profile lifecycle table, EV
and CC profiles and their checks, QpOptions' unit mappings, EV statuses and events, and QPs
over SimNetwork created from profiles."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

import mrcnic
from mrcnic.profiles import (
    EV_BITS,
    LAB_TIME_SCALE,
    PROFILE_TRANSITIONS,
    CcProfile,
    EvEventQueue,
    EvField,
    EvMode,
    EvProfile,
    EvStatus,
    ProfileOp,
    ProfileState,
    ProfileStateError,
    QpOptions,
    ack_timeout_code,
    ack_timeout_s,
    capabilities,
    cc_option_names,
    ev_status,
    generate_evs,
    mermaid,
    scale_times,
)
from mrcnic.transport.ev import EvConfig, EvInput, EvState, EvStateChanged, EvTable
from mrcnic.transport.qp_types import QpConfig
from mrcnic.verbs import RemoteBuffer, SimNetwork, WcStatus

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
EXPLICIT = [0x100, 0x101, 0x102, 0x103, 0x104, 0x105, 0x106, 0x107]


def online_ev(evs=EXPLICIT, **kw) -> EvProfile:
    p = EvProfile(1)
    p.configure(EvMode.EXPLICIT, evs=evs, **kw)
    p.online()
    return p


def online_cc(algorithm="uet-1.0-nscc", options=None) -> CcProfile:
    p = CcProfile(2)
    p.configure(algorithm, options)
    p.online()
    return p


def write(net: SimNetwork, qp, mr, n=65536, wr_id=1):
    qp.post_write(wr_id, bytes(range(256)) * (n // 256), RemoteBuffer.of(mr))
    done = []
    net.run_until(lambda: bool(done.extend(qp.poll_cq()) or done))
    return done


def connected_pair(net: SimNetwork, **kw):
    a, b = net.devices
    qa, qb = a.create_qp(**kw), b.create_qp(**kw)
    qa.connect(qb.export())
    qb.connect(qa.export())
    return qa, qb


# -- the lifecycle -------------------------------------------------------------------------------


def _drive(profile, op: ProfileOp) -> None:
    if op is ProfileOp.CONFIGURE:
        profile.configure(EvMode.EXPLICIT, evs=EXPLICIT)
    elif op is ProfileOp.EDIT:
        profile.set_evs(EXPLICIT)
    elif op is ProfileOp.ONLINE:
        profile.online()
    elif op is ProfileOp.OFFLINE:
        profile.offline()
    elif op is ProfileOp.RESET:
        profile.reset()
    else:
        profile._attach()


def _profile_in(state: ProfileState) -> EvProfile:
    p = EvProfile(5)
    if state is not ProfileState.INIT:
        p.configure(EvMode.EXPLICIT, evs=EXPLICIT)
    if state is ProfileState.ONLINE:
        p.online()
    assert p.state is state
    return p


@pytest.mark.parametrize("state", list(ProfileState))
@pytest.mark.parametrize("op", list(ProfileOp))
def test_every_state_and_operation_follows_the_table(state, op) -> None:
    p = _profile_in(state)
    want = PROFILE_TRANSITIONS.get((state, op))
    if want is None:
        with pytest.raises(ProfileStateError, match=f"{op.name} is not allowed in {state.name}"):
            _drive(p, op)
        assert p.state is state
    else:
        _drive(p, op)
        assert p.state is want


def test_the_lifecycle_is_init_offline_online_and_back() -> None:
    p = EvProfile(3)
    assert p.state is ProfileState.INIT
    p.configure("AUTO", 16)
    assert p.state is ProfileState.OFFLINE
    p.online()
    p.offline()
    p.reset()
    assert p.state is ProfileState.INIT and p.mode is None and p.ev_count == 0
    d = mermaid()
    assert "INIT --> OFFLINE: CONFIGURE" in d and "ONLINE --> OFFLINE: OFFLINE" in d


def test_refusals_say_what_is_allowed() -> None:
    p = _profile_in(ProfileState.ONLINE)
    with pytest.raises(ProfileStateError, match=r"allowed: OFFLINE, USE"):
        p.set_evs(EXPLICIT)
    with pytest.raises(ProfileStateError, match="INIT: only ONLINE"):
        EvProfile().apply(QpConfig())
    with pytest.raises(ProfileStateError, match="OFFLINE: only ONLINE"):
        _profile_in(ProfileState.OFFLINE).apply(QpConfig())
    with pytest.raises(ValueError, match="profile_id"):
        EvProfile(-1)
    assert issubclass(ProfileStateError, mrcnic.MrcError)


def test_a_profile_in_use_cannot_go_offline() -> None:
    net = SimNetwork(seed=2)
    prof, cc = online_ev(), online_cc()
    qp = net.devices[0].create_qp(ev_profile=prof, cc_profile=cc)
    assert prof.users == 1 and cc.users == 1 and qp.ev_profile is prof and qp.cc_profile is cc
    with pytest.raises(ProfileStateError, match="in use by 1 QP"):
        prof.offline()
    with pytest.raises(ProfileStateError, match="in use by 1 QP"):
        cc.offline()
    net.devices[0].destroy_qp(qp)
    net.devices[0].destroy_qp(qp)  # twice: counted once
    assert prof.users == 0
    prof.offline()
    cc.offline()


# -- EV fields and generated EVs ------------------------------------------------------------------


def test_fields_expand_into_their_mask_bits() -> None:
    f = EvField(8, value=0b1010_0000, mask=0b0000_0101)
    assert [f.expand(n) for n in range(4)] == [0xA0, 0xA1, 0xA4, 0xA5]
    assert f.choices() == 4
    fixed = EvField(4, value=0x9, mask=0)
    assert fixed.choices() == 1 and fixed.expand(0) == 0x9
    ranged = EvField(4, lo=2, hi=4)
    assert [ranged.expand(n) for n in range(ranged.choices())] == [2, 3, 4]


def test_generated_evs_count_like_digits_last_field_fastest() -> None:
    layout = [EvField(4, value=0xA, mask=0), EvField(2, hi=2), EvField(1)]
    assert generate_evs(layout, 6) == (0x50, 0x51, 0x52, 0x53, 0x54, 0x55)
    with pytest.raises(ValueError, match="6 distinct EVs, fewer than ev_count 7"):
        generate_evs(layout, 7)
    with pytest.raises(ValueError, match=f"1 to {EV_BITS} bits"):
        generate_evs([EvField(32), EvField(1)], 1)
    with pytest.raises(ValueError, match="1 to 32 bits"):
        generate_evs([], 1)


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"width": 0}, "width must be 1..32"),
        ({"width": 33}, "width must be 1..32"),
        ({"width": 4, "value": 16}, "does not fit its 4 bits"),
        ({"width": 4, "mask": 0x10}, "bits outside its 4 bits"),
        ({"width": 4, "mask": 0b11, "hi": 4}, "hi 4 must be in 0..3"),
        ({"width": 4, "lo": 5, "hi": 4}, "lo 5 must be in 0..4"),
        ({"width": 4, "mask": 0, "lo": 1}, "lo 1 must be in 0..0"),
    ],
)
def test_field_checks(kw, msg) -> None:
    with pytest.raises(ValueError, match=msg):
        EvField(**kw)


# -- EV profiles ---------------------------------------------------------------------------------


def test_explicit_array_starts_empty_and_must_be_filled() -> None:
    p = EvProfile(9)
    p.configure(EvMode.EXPLICIT, ev_count=3)
    assert p.evs() == (None, None, None)
    with pytest.raises(ProfileStateError, match="3 of 3 EVs not set"):
        p.online()
    p.replace_ev(None, 0x10)
    p.replace_ev(None, 0x11)
    assert p.evs() == (0x10, 0x11, None)
    p.replace_ev(0x11, 0x13)
    with pytest.raises(ProfileStateError, match="1 of 3"):
        p.online()
    p.replace_ev(None, 0x12)
    with pytest.raises(ValueError, match="no empty entry left"):
        p.replace_ev(None, 0x14)
    with pytest.raises(ValueError, match="EV 0x99 is not in the array"):
        p.replace_ev(0x99, 0x14)
    with pytest.raises(ValueError, match="0x10 listed twice"):
        p.replace_ev(0x12, 0x10)
    p.online()
    assert p.evs() == (0x10, 0x13, 0x12)


@pytest.mark.parametrize(
    ("args", "kw", "msg"),
    [
        ((EvMode.EXPLICIT,), {}, "ev_count must be a positive integer, not 0"),
        ((EvMode.EXPLICIT, 3), {"evs": [1, 2]}, "2 EVs given for ev_count 3"),
        ((EvMode.EXPLICIT,), {"evs": [1, 1 << 32]}, "32-bit unsigned"),
        ((EvMode.EXPLICIT,), {"evs": [1, -1]}, "32-bit unsigned"),
        ((EvMode.EXPLICIT,), {"evs": [4, 5, 4]}, "0x4 listed twice"),
        ((EvMode.EXPLICIT,), {"evs": [1, 2], "layout": [EvField(4)]}, "layout is for GENERATED"),
        ((EvMode.GENERATED,), {"layout": [EvField(4)]}, "needs ev_count"),
        ((EvMode.GENERATED, 2), {"evs": [1, 2]}, "evs are for EXPLICIT"),
        ((EvMode.AUTO,), {"evs": [1]}, "AUTO profile takes no evs"),
        ((EvMode.AUTO, 8), {"ev_min_active": 9}, "ev_min_active must be in 0..ev_count"),
        ((EvMode.AUTO,), {"events": [EvStatus.UNKNOWN]}, "cannot report UNKNOWN"),
        ((EvMode.AUTO,), {"backup_per_plane": -1}, "backup_per_plane must be >= 0"),
        (("SIDEWAYS",), {}, "SIDEWAYS"),
    ],
)
def test_ev_profile_checks(args, kw, msg) -> None:
    p = EvProfile()
    with pytest.raises(ValueError, match=msg):
        p.configure(*args, **kw)
    assert p.state is ProfileState.INIT  # nothing changed


def test_edits_need_an_explicit_profile() -> None:
    p = EvProfile()
    p.configure(EvMode.AUTO, 8)
    with pytest.raises(ValueError, match="AUTO: only EXPLICIT"):
        p.set_evs([1, 2])
    with pytest.raises(ValueError, match="AUTO: only EXPLICIT"):
        p.replace_ev(None, 1)
    with pytest.raises(ValueError, match="8 EVs given for ev_count 2"):
        q = EvProfile()
        q.configure(EvMode.EXPLICIT, 2)
        q.set_evs(EXPLICIT)


def test_profiles_map_onto_ev_config() -> None:
    base = QpConfig(ev=EvConfig(ev_count=16, backup_per_plane=4, spray="random"))
    auto = EvProfile()
    auto.configure("AUTO", 32, ev_min_active=5, backup_per_plane=2)
    auto.online()
    ev = auto.apply(base).ev
    assert (ev.ev_count, ev.backup_per_plane, ev.ev_min_active, ev.values) == (32, 2, 5, ())
    assert ev.spray == "random"  # what the profile does not name stays
    default = EvProfile()
    default.configure("AUTO")
    default.online()
    assert default.apply(base).ev.ev_count == 16
    ex = online_ev(ev_min_active=3).apply(base).ev
    assert ex.values == tuple(EXPLICIT) and ex.ev_count == 8 and ex.backup_per_plane == 0
    assert ex.ev_min_active == 3
    gen = EvProfile()
    gen.configure("GENERATED", 4, layout=[EvField(3), EvField(1)], backup_per_plane=1)
    gen.online()
    assert gen.apply(base).ev.values == (0, 1, 2, 3) and gen.apply(base).ev.backup_per_plane == 1


def test_the_ev_table_uses_an_explicit_array_by_plane() -> None:
    vals = (0x10, 0x11, 0x12, 0x13, 0x14, 0x16)  # plane 0: 4 EVs, plane 1: 2
    t = EvTable(2, 2, EvConfig(values=vals, ev_count=6, backup_per_plane=1), seed=1)
    assert sorted(t.ev_values) == sorted(vals)
    assert [[t.ev_values[s] for s in pool] for pool in t.pool] == [
        [0x10, 0x12, 0x14, 0x16],
        [0x11, 0x13],
    ]
    assert t.active_per_plane == 1  # the smaller plane's 2, less one backup
    assert sorted(t.ev_values[s] for s in t.active) == [0x10, 0x11]
    assert t.reverse == [0x10, 0x11, 0x12, 0x13]  # each plane's first two, interleaved
    with pytest.raises(ValueError, match=r"plane\(s\) \[1\] without an EV"):
        EvTable(2, 2, EvConfig(values=(0x10, 0x12)), seed=1)
    with pytest.raises(ValueError, match="distinct"):
        EvTable(2, 2, EvConfig(values=(0x10, 0x11, 0x10)), seed=1)
    with pytest.raises(ValueError, match="32-bit"):
        EvTable(2, 2, EvConfig(values=(0x10, 1 << 32)), seed=1)


# -- CC profiles ---------------------------------------------------------------------------------


def test_cc_names_and_options_are_checked_against_the_registry() -> None:
    with pytest.raises(ValueError, match=r"unknown congestion control 'cubic'; available: .*fixed"):
        CcProfile().configure("cubic")
    with pytest.raises(ValueError, match=r"unknown option\(s\) 'gama'; valid: base_rtt_s, "):
        CcProfile().configure("uet-1.0-nscc", {"gama": 0.5})
    with pytest.raises(ValueError, match="disable_qa must be True or False"):
        CcProfile().configure("nscc", {"disable_qa": 1})
    with pytest.raises(ValueError, match="gamma must be a finite number"):
        CcProfile().configure("uet-1.0-nscc", {"gamma": float("nan")})
    with pytest.raises(ValueError, match="eta must be a finite number"):
        CcProfile().configure("uet-1.0-nscc", {"eta": "fast"})
    with pytest.raises(
        ValueError, match=r"fixed: unknown option\(s\) 'gamma'; valid: window_bytes"
    ):
        CcProfile().configure("fixed", {"gamma": 0.5})
    assert cc_option_names("fixed") == ("window_bytes",)
    assert "target_qdelay_s" in cc_option_names("nscc-2026.11")
    nscc = cc_option_names("uet-1.0-nscc")
    for libmrc_concept in (
        "base_rtt_s", "target_delay_s", "eta", "fi", "fi_scale", "gamma", "max_md_jump",
        "max_cwnd", "disable_qa", "qa_gate", "qa_threshold_s", "adjust_bytes_threshold",
        "adjust_period_threshold_s",
    ):  # fmt: skip
        assert libmrc_concept in nscc


def test_cc_profile_maps_onto_qp_config_and_edits_while_offline() -> None:
    p = CcProfile(4)
    with pytest.raises(ProfileStateError, match="EDIT is not allowed in INIT"):
        p.set_options(gamma=0.5)
    p.configure("uet-1.0-nscc", {"gamma": 0.5, "disable_qa": True, "max_cwnd": None})
    p.set_options(gamma=None, target_delay_s=2e-3)  # None: back to the default
    assert p.options == {"disable_qa": True, "target_delay_s": 2e-3}
    with pytest.raises(ValueError, match="unknown option"):
        p.set_options(nope=1)
    p.online()
    with pytest.raises(ProfileStateError):
        p.set_options(gamma=0.7)
    cfg = p.apply(QpConfig())
    assert cfg.cc == "uet-1.0-nscc"
    assert cfg.cc_options == (("disable_qa", True), ("target_delay_s", 2e-3))


def test_cc_values_that_depend_on_the_qp_are_checked_when_it_is_created() -> None:
    net = SimNetwork(seed=3)
    with pytest.raises(ValueError, match="gamma must be in"):
        net.devices[0].create_qp(cc_profile=online_cc(options={"gamma": 2.0}))
    qp = net.devices[0].create_qp(cc_profile=online_cc(options={"gamma": 0.5}))
    assert qp.core.cc.params.gamma == 0.5


def test_production_times_scale_to_the_lab() -> None:
    opts = scale_times({"target_delay_s": 6e-6, "max_cwnd": 150e3, "disable_qa": True})
    assert opts == {"target_delay_s": pytest.approx(6e-3), "max_cwnd": 150e3, "disable_qa": True}
    assert scale_times({"base_rtt_s": 1e-5}, time_scale=1) == {"base_rtt_s": 1e-5}


# -- QpOptions -----------------------------------------------------------------------------------


def test_ack_timeout_encoding() -> None:
    assert ack_timeout_s(0, time_scale=1) == pytest.approx(1.024e-6)
    assert ack_timeout_s(24, time_scale=1) == pytest.approx(17.18, abs=0.01)
    assert ack_timeout_s(0) == pytest.approx(1.024e-3)  # the lab: x1000
    assert LAB_TIME_SCALE == 1000
    for t in range(25):
        assert ack_timeout_code(ack_timeout_s(t)) == t
        assert ack_timeout_code(ack_timeout_s(t, 1), time_scale=1) == t
    assert ack_timeout_code(1e-3) == 0  # at or above
    assert ack_timeout_code(1.1e-3) == 1
    assert ack_timeout_code(2e-3) == 1
    with pytest.raises(ValueError, match="0..24"):
        ack_timeout_s(25)
    with pytest.raises(ValueError, match="beyond the largest"):
        ack_timeout_code(1e6)
    with pytest.raises(ValueError, match="positive"):
        ack_timeout_code(0)


def test_options_map_onto_qp_config() -> None:
    base = QpConfig()
    cfg = QpOptions(
        window_units=64, max_wimm_inflight=16, ack_timeout=3, linear_retries=2, exp_retries=9
    ).apply(base)
    assert cfg.window_psns == 8192
    assert cfg.max_wimm_inflight == 16
    assert cfg.min_rto_s == pytest.approx(8.192e-3)
    assert cfg.max_rto_s == base.max_rto_s
    assert cfg.retry_limit == 11
    assert QpOptions().apply(base) == base  # None leaves everything alone
    assert QpOptions(exp_retries=3).apply(base).retry_limit == 3
    assert QpOptions(linear_retries=3).apply(base).retry_limit == 3
    # a floor above max_rto lifts it
    slow = QpOptions(ack_timeout=12).apply(base)
    assert slow.min_rto_s == pytest.approx(4.194, abs=1e-3) and slow.max_rto_s == slow.min_rto_s
    prod = QpOptions(ack_timeout=12, time_scale=1).apply(base)
    assert prod.min_rto_s == pytest.approx(4.194e-3, abs=1e-6)
    back = QpOptions.of(cfg)
    assert (back.window_units, back.max_wimm_inflight, back.ack_timeout) == (64, 16, 3)
    assert back.linear_retries + back.exp_retries == 11
    assert QpOptions.of(replace(base, window_psns=64)).window_units is None  # half a unit


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"window_units": 0}, "power of two in 1..65536"),
        ({"window_units": 3}, "power of two"),
        ({"window_units": 131072}, "power of two in 1..65536"),
        ({"max_wimm_inflight": 0}, "1..32768"),
        ({"max_wimm_inflight": 0x8001}, "1..32768"),
        ({"ack_timeout": 25}, "0..24"),
        ({"ack_timeout": -1}, "0..24"),
        ({"linear_retries": 8}, "linear_retries must be in 0..7"),
        ({"exp_retries": 25}, "retrying forever is not supported"),
        ({"time_scale": 0}, "time_scale must be positive"),
    ],
)
def test_option_checks(kw, msg) -> None:
    with pytest.raises(ValueError, match=msg):
        QpOptions(**kw)


def test_capabilities_say_what_is_supported() -> None:
    caps = capabilities()
    assert caps.ev_modes == (EvMode.AUTO, EvMode.EXPLICIT, EvMode.GENERATED)
    assert "uet-1.0-nscc" in caps.cc_algorithms and caps.ev_bits == 32
    assert caps.window_unit_psns * caps.max_window_units == 1 << 23
    assert not caps.edit_online and not caps.replace_live_ev and caps.precise_drop_count


# -- statuses and events -------------------------------------------------------------------------


def test_skip_is_internal_and_shows_as_good() -> None:
    assert ev_status(EvState.GOOD) is EvStatus.GOOD
    assert ev_status(EvState.SKIP) is EvStatus.GOOD
    assert ev_status(EvState.ASSUMED_BAD) is EvStatus.ASSUMED_BAD
    assert ev_status(EvState.DENIED) is EvStatus.DENIED
    assert ev_status(None) is EvStatus.UNKNOWN


def _change(old, new, ev=5):
    return EvStateChanged(ev, ev % 2, old, new, EvInput.TIMEOUT, 1.0)


def test_event_queue_reports_controller_visible_changes_in_the_mask() -> None:
    G, S, B, D = EvState.GOOD, EvState.SKIP, EvState.ASSUMED_BAD, EvState.DENIED
    q = EvEventQueue()
    mask = frozenset({EvStatus.GOOD, EvStatus.ASSUMED_BAD})
    for old, new in [(G, S), (S, G), (S, B), (B, S), (G, D), (D, G)]:
        q.offer(0x10, 3, mask, _change(old, new))
    got = [(e.previous, e.status) for e in q.poll()]
    assert got == [
        (EvStatus.GOOD, EvStatus.ASSUMED_BAD),  # SKIP -> ASSUMED_BAD
        (EvStatus.ASSUMED_BAD, EvStatus.GOOD),  # probe answered with ECN: SKIP, alive
        (EvStatus.DENIED, EvStatus.GOOD),  # the controller allowed it again
    ]
    assert q.poll() == []


def test_a_full_queue_counts_what_it_dropped() -> None:
    q = EvEventQueue(capacity=2)
    mask = frozenset(EvStatus)
    for i in range(5):
        q.offer(0x10, None, mask, _change(EvState.GOOD, EvState.DENIED, ev=i))
    assert [(e.ev, e.dropped) for e in q.poll()] == [(0, 0), (1, 0)]
    q.offer(0x10, None, mask, _change(EvState.DENIED, EvState.GOOD, ev=9))
    (e,) = q.poll()
    assert (e.ev, e.dropped) == (9, 3)
    with pytest.raises(ValueError):
        EvEventQueue(capacity=0)


# -- over the simulated fabric -------------------------------------------------------------------


def test_an_explicit_profile_carries_a_write() -> None:
    net = SimNetwork(seed=4)
    prof = online_ev(ev_min_active=2)
    opts = QpOptions(window_units=64, max_wimm_inflight=8, ack_timeout=2, exp_retries=5)
    qa, qb = connected_pair(net, ev_profile=prof, cc_profile=online_cc(), options=opts)
    assert qa.core.config.window_psns == 8192 and qa.core.config.retry_limit == 5
    lim = qa.limits()
    assert (lim.window_psns, lim.max_wimm_inflight) == (8192, 8)
    assert (lim.peer_window_psns, lim.peer_max_wimm_inflight) == (8192, 8)
    target = bytearray(65536)
    mr = net.devices[1].register(target)
    done = write(net, qa, mr)
    assert [(wc.wr_id, wc.status) for wc in done] == [(1, WcStatus.SUCCESS)]
    assert target == bytearray(bytes(range(256)) * 256)
    used = {s.ev: s.tx_packets for s in qa.ev_stats()}
    assert set(used) == set(EXPLICIT)  # the QP's EVs are the profile's, and only those
    assert all(used.values())  # each one carried data
    assert qa.ev_statuses() == dict.fromkeys(EXPLICIT, EvStatus.GOOD)
    assert qa.ev_status(0x999) is EvStatus.UNKNOWN


def test_a_generated_profile_carries_a_write() -> None:
    net = SimNetwork(seed=5)
    prof = EvProfile(8)
    prof.configure(EvMode.GENERATED, 6, layout=[EvField(12, value=0xABC, mask=0), EvField(4)])
    prof.online()
    qa, _ = connected_pair(net, ev_profile=prof)
    mr = net.devices[1].register(bytearray(32768))
    assert write(net, qa, mr, 32768)[0].status is WcStatus.SUCCESS
    assert sorted(qa.ev_statuses()) == [0xABC0 + i for i in range(6)]


def test_a_profile_that_leaves_a_plane_without_evs_is_refused_by_the_qp() -> None:
    net = SimNetwork(seed=6)  # 2 planes: these EVs are all even, plane 0
    with pytest.raises(ValueError, match=r"plane\(s\) \[1\] without an EV"):
        net.devices[0].create_qp(ev_profile=online_ev([0x10, 0x12, 0x14]))


def test_a_controller_denies_an_ev_and_sees_the_event() -> None:
    net = SimNetwork(seed=7)
    dev = net.devices[0]
    prof = EvProfile(1)
    prof.configure(EvMode.EXPLICIT, evs=EXPLICIT, events=["GOOD", "ASSUMED_BAD", "DENIED"])
    prof.online()
    qa, _ = connected_pair(net, ev_profile=prof)
    other = dev.create_qp()  # not from the profile
    events = dev.ev_event_queue()
    assert dev.set_ev_status(0x103, EvStatus.DENIED, profile=prof) == 1
    (e,) = events.poll()
    assert (e.qpn, e.profile_id, e.ev, e.plane) == (qa.qpn, 1, 0x103, 1)
    assert (e.previous, e.status) == (EvStatus.GOOD, EvStatus.DENIED)
    assert qa.ev_status(0x103) is EvStatus.DENIED
    assert dev.ev_statuses(profile=prof) == {
        qa.qpn: {**dict.fromkeys(EXPLICIT, EvStatus.GOOD), 0x103: EvStatus.DENIED}
    }
    assert set(dev.ev_statuses()) == {qa.qpn, other.qpn}
    # a denied EV carries nothing
    before = {s.ev: s.tx_packets for s in qa.ev_stats()}
    write(net, qa, net.devices[1].register(bytearray(65536)))
    after = {s.ev: s.tx_packets for s in qa.ev_stats()}
    assert after[0x103] == before[0x103] and after[0x102] > before[0x102]
    # the application's own event stream still has the transport's view
    assert [(x.old, x.new) for x in qa.poll_events()][:1] == [(EvState.GOOD, EvState.DENIED)]
    qa.set_ev_status(0x103, "GOOD")
    assert [(x.ev, x.status) for x in events.poll()] == [(0x103, EvStatus.GOOD)]
    with pytest.raises(ValueError, match="DENIED or GOOD, not ASSUMED_BAD"):
        qa.set_ev_status(0x103, EvStatus.ASSUMED_BAD)
    with pytest.raises(ValueError, match="is not one of QP"):
        qa.set_ev_status(0x999, EvStatus.DENIED)
    with pytest.raises(ValueError, match="not held by any QP of EV profile 1"):
        dev.set_ev_status(0x999, EvStatus.DENIED, profile=prof)


def test_default_events_are_good_and_assumed_bad() -> None:
    net = SimNetwork(seed=8)
    dev = net.devices[0]
    qa, _ = connected_pair(net, ev_profile=online_ev())
    events = dev.ev_event_queue()
    dev.set_ev_status(0x101, EvStatus.DENIED)  # not reported: DENIED is not asked for
    dev.port_status(0, False, net.fabric.now)  # plane 0's EVs go ASSUMED_BAD
    got = events.poll()
    assert {(e.ev, e.status) for e in got} == {(ev, EvStatus.ASSUMED_BAD) for ev in EXPLICIT[::2]}
    dev.set_ev_status(0x101, EvStatus.GOOD)
    assert [(e.ev, e.previous, e.status) for e in events.poll()] == [
        (0x101, EvStatus.DENIED, EvStatus.GOOD)
    ]
    dev.ev_event_queues.remove(events)  # unsubscribe
    dev.set_ev_status(0x101, EvStatus.DENIED)
    dev.set_ev_status(0x101, EvStatus.GOOD)
    assert events.poll() == []


def test_profiles_are_for_mrc_qps() -> None:
    net = SimNetwork(seed=9)
    with pytest.raises(ValueError, match="MRC QPs only"):
        net.devices[0].create_qp(transport="rocev2", ev_profile=online_ev())
    with pytest.raises(ValueError, match="MRC QPs only"):
        net.devices[0].create_qp(transport="rocev2", options=QpOptions(exp_retries=3))


def test_names_are_at_the_front_door() -> None:
    for name in ("EvProfile", "CcProfile", "EvMode", "EvField", "EvStatus", "QpOptions"):
        assert getattr(mrcnic, name).__module__ == "mrcnic.profiles"


def test_the_api_doc_example_of_the_control_model_runs(capsys) -> None:
    text = DOC.read_text()
    section = text[text.index("## The OCP libmrc control model") :]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)[:1]
    exec(compile(block, str(DOC), "exec"), {})  # our own document
    assert "DENIED', 'GOOD'" in capsys.readouterr().out

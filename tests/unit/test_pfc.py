"""PFC (IEEE 802.1Qbb): the PAUSE frame format (golden bytes, scapy), the ingress XOFF/XON
hysteresis and its refresh, the pause timer at a port's rate, and the watchdog."""

from __future__ import annotations

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.l2 import Ether

from mrcnic.wire import WireError
from mrcnic.wire.pfc import (
    decode_pause,
    encode_pause,
    headroom_bytes,
    is_pfc,
    pause_s,
    quanta_for,
)
from mrcswitch.config import PfcConfig
from mrcswitch.pfc import (
    INGRESS_TABLE,
    Action,
    EgressPause,
    IngressPfc,
    IngressState,
    port_stats,
)

MAC = bytes.fromhex("026d72630001")
# priority 3 paused for 0xffff quanta, by hand from 802.1Qbb: dst 01:80:c2:00:00:01, src,
# ethertype 8808, opcode 0101, class-enable vector 0x0008, times c0..c7, zero padding to 60
GOLDEN = bytes.fromhex(
    "0180c2000001" "026d72630001" "8808" "0101" "0008"
    "0000" "0000" "0000" "ffff" "0000" "0000" "0000" "0000"
) + bytes(26)  # fmt: skip


def test_pause_frame_golden_bytes_and_round_trip():
    f = encode_pause(MAC, {3: 0xFFFF})
    assert f == GOLDEN and len(f) == 60 and is_pfc(f)
    pf = decode_pause(f)
    assert pf.src_mac == MAC and pf.quanta == {3: 0xFFFF} and pf.pauses(3)
    resume = decode_pause(encode_pause(MAC, {3: 0, 5: 7}))
    assert resume.quanta == {3: 0, 5: 7} and not resume.pauses(3)


def test_scapy_dissects_it_as_class_based_flow_control():
    p = Ether(encode_pause(MAC, {3: 1234, 0: 0}))
    c = p[MACControlClassBasedFlowControl]
    assert p.type == 0x8808 and p.dst == "01:80:c2:00:00:01"
    assert c.c3_enabled == 1 and c.c3_pause_time == 1234 and c.c0_enabled == 1
    assert c.c1_enabled == 0 and c.c0_pause_time == 0
    built = Ether(dst="01:80:c2:00:00:01", src="02:6d:72:63:00:01") / (
        MACControlClassBasedFlowControl(c3_enabled=1, c3_pause_time=0xFFFF)
    )
    assert bytes(built)[:60] == GOLDEN


def test_bad_input_is_refused_clearly():
    with pytest.raises(WireError, match="priority 8"):
        encode_pause(MAC, {8: 1})
    with pytest.raises(WireError, match="65535"):
        encode_pause(MAC, {3: 1 << 16})
    with pytest.raises(WireError, match="not a MAC Control"):
        decode_pause(bytes(60))
    with pytest.raises(WireError, match="bytes"):
        decode_pause(GOLDEN[:20])


def test_pause_time_is_quanta_of_512_bit_times():
    assert pause_s(0xFFFF, 100e6) == pytest.approx(0xFFFF * 512 / 100e6)  # 335.5 ms
    assert pause_s(1, 100e9) == pytest.approx(5.12e-9)
    assert quanta_for(0.001, 100e6) == 196  # 195.3 rounded up
    assert quanta_for(10.0, 100e6) == 0xFFFF


def test_ingress_hysteresis_pauses_above_xoff_resumes_at_xon():
    cfg = PfcConfig(xoff_bytes=10_000, xon_bytes=4_000, headroom_bytes=8_000)
    ing = IngressPfc(cfg, 100e6)
    acts = []
    for _ in range(10):  # 9000 bytes: below XOFF
        assert ing.admit(900)
        acts.append(ing.step(0.0))
    assert set(acts) == {Action.NONE} and ing.state is IngressState.XON
    assert ing.admit(1500) and ing.step(0.0) is Action.PAUSE  # 10,500 > XOFF
    assert ing.state is IngressState.XOFF
    ing.left(3000)  # 7,500: between XON and XOFF, nothing to say
    assert ing.step(0.001) is Action.NONE and ing.state is IngressState.XOFF
    ing.left(3500)  # 4,000: at XON
    assert ing.step(0.002) is Action.RESUME and ing.state is IngressState.XON
    assert ing.pause_tx == 2
    assert ing.frame(MAC, Action.PAUSE) == encode_pause(MAC, {3: 0xFFFF})
    assert ing.frame(MAC, Action.RESUME) == encode_pause(MAC, {3: 0})


def test_ingress_refreshes_a_pause_before_it_runs_out_and_headroom_bounds_it():
    cfg = PfcConfig(xoff_bytes=10_000, xon_bytes=4_000, headroom_bytes=5_000, pause_quanta=1000)
    ing = IngressPfc(cfg, 100e6)  # 1000 quanta = 5.12 ms at 100 Mb/s: refresh after 2.56 ms
    assert ing.admit(12_000) and ing.step(0.0) is Action.PAUSE
    assert ing.step(0.002) is Action.NONE
    assert ing.step(0.0026) is Action.PAUSE  # still congested: asked again
    assert ing.admit(3_000)  # 15,000 = XOFF + headroom: still fits
    assert not ing.admit(1)  # beyond the headroom: a lossless drop for the caller to count


def test_ingress_table_rows_that_matter():
    on, off = IngressState.XON, IngressState.XOFF
    # (state, above xoff, at or below xon, pause running out) -> (next, action)
    assert INGRESS_TABLE[(on, False, False, True)] == (on, Action.NONE)  # no refresh while XON
    assert INGRESS_TABLE[(on, True, False, False)] == (off, Action.PAUSE)
    assert INGRESS_TABLE[(off, True, False, False)] == (off, Action.NONE)  # paused: no repeat
    assert INGRESS_TABLE[(off, False, False, True)] == (off, Action.PAUSE)  # between: refresh
    assert INGRESS_TABLE[(off, False, True, True)] == (on, Action.RESUME)  # resume beats refresh


def test_egress_pause_timer_and_resume():
    cfg = PfcConfig()
    eg = EgressPause(cfg, 100e6)
    assert not eg.paused(0.0)
    assert eg.receive(encode_pause(MAC, {3: 1000}), 1.0)  # 5.12 ms
    assert eg.paused(1.001) and eg.paused(1.005)
    assert not eg.paused(1.0052)
    assert eg.paused_s == pytest.approx(0.00512, rel=1e-6)
    assert not eg.receive(encode_pause(MAC, {2: 1000}), 2.0)  # another priority: not ours
    assert not eg.paused(2.0)
    eg.receive(encode_pause(MAC, {3: 0xFFFF}), 3.0)
    assert eg.paused(3.01)
    eg.receive(encode_pause(MAC, {3: 0}), 3.02)  # resume at once
    assert not eg.paused(3.02)
    assert eg.pause_rx == 3 and eg.watchdog_trips == 0


def test_watchdog_breaks_a_pause_storm_and_counts_it():
    cfg = PfcConfig(watchdog_s=0.2, watchdog_restore_s=0.5)
    eg = EgressPause(cfg, 100e6)
    t = 0.0
    while t < 0.25:  # a peer that keeps refreshing its pause: never drains
        eg.receive(encode_pause(MAC, {3: 1000}), t)
        assert eg.paused(t + 0.001) == (t + 0.001 <= 0.2)
        t += 0.004
    assert eg.watchdog_trips == 1
    eg.receive(encode_pause(MAC, {3: 0xFFFF}), 0.3)  # within the restore period: ignored
    assert not eg.paused(0.31) and eg.ignored >= 1
    eg.receive(encode_pause(MAC, {3: 1000}), 1.0)  # honoured again afterwards
    assert eg.paused(1.001)
    st = port_stats(IngressPfc(cfg, 100e6), eg, lossless_drops=0)
    assert set(st) == {"pause_tx", "pause_rx", "paused_s", "lossless_drops", "watchdog_trips"}
    assert st["watchdog_trips"] == 1


def test_headroom_covers_a_round_trip_and_the_reaction():
    # 100 Mb/s, 2 ms for a software peer to react, 10 us one way, 9000-byte frames
    h = headroom_bytes(100e6, 2e-3, 10e-6, 9000)
    assert h == 25_250 + 18_000  # 12.5 MB/s x 2.02 ms, and a frame on the wire at each end
    with pytest.raises(ValueError, match="xon"):
        PfcConfig(xoff_bytes=1000, xon_bytes=2000)

"""mrc-switch's priority flow control on a real chain (hA -> wA [switch] wB -> hB), in both
event loops: a PAUSE received on wB holds the lossless class there and only there (other
classes keep flowing), the lossless bytes of in-port wA cross XOFF and the switch pauses hA,
a resume lets the held frames go in order and the switch resumes hA below XON; the watchdog
breaks a pause storm; lossless drops are counted when the upstream ignores the pause."""

from __future__ import annotations

import select
import time

import pytest
import switch_helpers as H
import waiting as W

from mrcnic.io.pfc import DEFAULT_PRIORITY
from mrcnic.wire import pfc as wire_pfc
from mrcnic.wire.layout import Dscp

RATE_BPS = 20_000_000
PAYLOAD = 1000
XOFF, XON = 8 << 10, 4 << 10
LOOPS = {"c-loop": None, "python-loop": {"MRC_SWITCH_C_LOOP": "0"}}


def chain(tmp_path, loop: str, **pfc):
    port = {"rate_mbit": RATE_BPS // 1_000_000, "buffer_bytes": 64 << 10}
    top = {"pfc": {"xoff_bytes": XOFF, "xon_bytes": XON, "headroom_bytes": 200 << 10,
                   "watchdog_s": 5.0, **pfc}}  # fmt: skip
    c = H.build_chain(
        "switch", tmp_path, switch_args={"port": port, "top": top}, switch_env=LOOPS[loop]
    )
    try:
        W.wait_for_json(  # carrier comes up late: PFC frames need the port up
            c.stats_path, lambda st: all(p["up"] for p in st["ports"].values()), 5, 0.1,
            what="ports up",
        )  # fmt: skip
    except BaseException:
        H.teardown(c)
        raise
    return c


def paused(c) -> None:
    """Until the switch has taken in the pause sent to wB."""
    W.wait_for_json(c.stats_path, lambda st: st["ports"]["wB"]["pfc"]["pause_rx"] >= 1, 5,
                    what="the pause received on wB")  # fmt: skip


def pause(quanta: int) -> bytes:
    return wire_pfc.encode_pause(H.MAC_HB, {DEFAULT_PRIORITY: quanta})


def frames(n: int, dscp: int, first: int = 0) -> list[bytes]:
    dst = H.usid_addr(H.OWN, H.USID_B)
    return [H.ipv6_frame(dst, payload=bytes(PAYLOAD), flow=first + i, dscp=dscp, ecn=0)
            for i in range(n)]  # fmt: skip


def collect(sock, seconds: float) -> list[bytes]:
    got: list[bytes] = []
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        select.select([sock], [], [], left)
        got += [f for f in H.drain(sock) if not H.is_chatter(f)]
    return got


def dscp_of(f: bytes) -> int:
    return ((f[14] & 0x0F) << 2) | (f[15] >> 6)


def flows(got: list[bytes], dscp: int) -> list[int]:
    return [int.from_bytes(f[15:18], "big") & 0xFFFFF for f in got
            if f[12:14] == b"\x86\xdd" and dscp_of(f) == dscp]  # fmt: skip


def pauses_seen(got: list[bytes]) -> list[int]:
    """The quanta of the lossless priority in the PFC frames among ``got``."""
    out = []
    for f in got:
        if wire_pfc.is_pfc(f):
            q = wire_pfc.decode_pause(f).quanta
            if DEFAULT_PRIORITY in q:
                out.append(q[DEFAULT_PRIORITY])
    return out


@pytest.mark.parametrize("loop", list(LOOPS))
def test_pause_holds_the_lossless_class_and_spreads_upstream(tmp_path, loop):
    c = chain(tmp_path, loop)
    try:
        ha = H.packet_socket(c.ns_s, c.ifname("hA"))
        hb = H.packet_socket(c.ns_r, c.ifname("hB"))
        H.drain_until_quiet(ha, hb)
        hb.send(pause(0xFFFF))  # 0xFFFF quanta at 20 Mbit/s: 1.68 s
        paused(c)
        n = 30  # 30 KiB of lossless frames: above XOFF (8 KiB) on in-port wA
        for f in frames(n, Dscp.LOSSLESS):
            ha.send(f)
        for f in frames(5, Dscp.NO_TRIM, first=1000):
            ha.send(f)
        got_b = collect(hb, 0.5)
        got_a = collect(ha, 0.1)
        assert flows(got_b, Dscp.LOSSLESS) == [], "lossless frames left a paused port"
        assert flows(got_b, Dscp.NO_TRIM) == list(range(1000, 1005)), "other classes held"
        assert pauses_seen(got_a)[:1] == [0xFFFF], "the switch did not pause its upstream"
        st = H.read_stats(c)
        assert st["ports"]["wB"]["pfc"]["pause_rx"] == 1
        assert st["ports"]["wA"]["pfc"]["pause_tx"] >= 1
        assert st["ports"]["wB"]["queue_bytes"] >= n * PAYLOAD
        hb.send(pause(0))  # resume
        got_b = collect(hb, 1.0)
        got_a = collect(ha, 0.2)
        assert flows(got_b, Dscp.LOSSLESS) == list(range(n)), "held frames lost or reordered"
        assert pauses_seen(got_a)[-1:] == [0], "no resume upstream once below XON"
        st = H.fresh_stats(c)
        wa, wb = st["ports"]["wA"]["pfc"], st["ports"]["wB"]["pfc"]
        assert wb["pause_rx"] == 2 and wb["paused_s"] > 0.3
        assert wa["pause_tx"] >= 2 and wb["lossless_drops"] == 0
        assert st["totals"]["pfc"]["lossless_drops"] == 0
        assert st["totals"]["drops"]["internal"] == 0
        assert st["ports"]["wB"]["drops"]["not_my_mac"] == 0  # PFC frames are not drops
    finally:
        H.teardown(c)


@pytest.mark.parametrize("loop", list(LOOPS))
def test_watchdog_breaks_a_pause_storm(tmp_path, loop):
    c = chain(tmp_path, loop, watchdog_s=0.3, watchdog_restore_s=1.0)
    try:
        ha = H.packet_socket(c.ns_s, c.ifname("hA"))
        hb = H.packet_socket(c.ns_r, c.ifname("hB"))
        H.drain_until_quiet(hb)
        t0 = time.monotonic()
        hb.send(pause(0xFFFF))
        for f in frames(10, Dscp.LOSSLESS):
            ha.send(f)
        got: list[bytes] = []
        first_at = None
        while time.monotonic() - t0 < 1.2:  # a storm: a fresh pause every 50 ms
            hb.send(pause(0xFFFF))
            new = flows([f for f in H.drain(hb) if not H.is_chatter(f)], Dscp.LOSSLESS)
            if new and first_at is None:
                first_at = time.monotonic() - t0
            got += new
            time.sleep(0.05)  # pacing the storm: waiting on time itself
        assert got == list(range(10)), "the watchdog did not release the storm's victims"
        assert first_at is not None and 0.25 <= first_at <= 0.9, first_at
        wb = H.fresh_stats(c)["ports"]["wB"]["pfc"]
        assert wb["watchdog_trips"] == 1 and wb["lossless_drops"] == 0
    finally:
        H.teardown(c)


def test_lossless_drops_are_counted_when_the_upstream_ignores_pauses(tmp_path):
    c = chain(tmp_path, "c-loop", headroom_bytes=4 << 10)  # room for XOFF + 4 KiB per in-port
    try:
        ha = H.packet_socket(c.ns_s, c.ifname("hA"))
        hb = H.packet_socket(c.ns_r, c.ifname("hB"))
        H.drain_until_quiet(ha, hb)
        hb.send(pause(0xFFFF))
        paused(c)
        for f in frames(40, Dscp.LOSSLESS):  # hA is a plain socket: it ignores the pause
            ha.send(f)
        st = H.fresh_stats(  # every frame queued or dropped
            c, lambda st: st["ports"]["wB"]["queue_packets"]
            + st["ports"]["wB"]["pfc"]["lossless_drops"] >= 40, what="all 40 frames accounted",
        )  # fmt: skip
        wb = st["ports"]["wB"]
        limit = XOFF + (4 << 10)
        frame_len = len(frames(1, Dscp.LOSSLESS)[0])
        kept = limit // frame_len
        assert wb["queue_packets"] == kept
        assert wb["pfc"]["lossless_drops"] == 40 - kept == wb["drops"]["queue_full"]
    finally:
        H.teardown(c)

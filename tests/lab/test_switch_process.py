"""The mrc-switch process on a real chain: random-bytes flood, link down/up, SIGTERM and reboot."""

from __future__ import annotations

import contextlib
import os
import random
import select

import pytest
import switch_helpers as H
import waiting as W

from mrcnic.io.batch import Sender


@pytest.fixture
def chain(tmp_path):
    c = H.build_chain("switch", tmp_path)
    try:
        yield c
    finally:
        H.teardown(c)


def tx_packets(c: H.Chain) -> int:
    r = H.nsrun(c.ns_s, "cat", f"/sys/class/net/{c.ifname('hA')}/statistics/tx_packets")
    return int(r.stdout)


def settle(c: H.Chain, timeout_s: float = 5.0) -> dict:
    """Stats once two consecutive refreshes agree (the switch has drained its input)."""
    keys: list[tuple[int, int, int]] = []

    def agreed() -> dict | None:
        st = H.fresh_stats(c)
        t = st["totals"]
        keys.append((t["rx_packets"], t["rx_socket_drops"], t["tx_packets"]))
        return st if keys[-2:] == [keys[-1]] * 2 else None

    with contextlib.suppress(AssertionError):  # unsettled: the test judges the last stats
        return W.wait_for(agreed, timeout_s, 0.25, what="two stats refreshes that agree")
    return H.read_stats(c)


def port_up(c: H.Chain, up: bool) -> None:
    """Until the switch's stats show wB up (or down)."""
    W.wait_for_json(c.stats_path, lambda st: st["ports"]["wB"]["up"] == up, 5,
                    what=f"wB up={up} in the stats")  # fmt: skip


def random_frames(n: int, rng: random.Random) -> list[bytes]:
    good = H.ipv6_frame(H.usid_addr(H.OWN, H.USID_B), payload=b"g" * 64)
    out = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.3:  # raw random bytes
            f = rng.randbytes(rng.randint(14, 1500))
        elif kind < 0.6:  # addressed to the switch, IPv6, random rest
            f = H.MAC_WA + H.MAC_HA + b"\x86\xdd" + rng.randbytes(rng.randint(0, 400))
        else:  # a valid frame with random bytes flipped and a random cut
            b = bytearray(good)
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(14, len(b))] = rng.randrange(256)
            f = bytes(b[: rng.randint(14, len(b))])
        out.append(f)
    return out


def test_random_flood_is_accounted_and_memory_stays_bounded(chain):
    c = chain
    rng = random.Random(4)
    s = H.packet_socket(c.ns_s, c.ifname("hA"))
    sender = Sender()
    rss = []
    sent_on_wire0 = tx_packets(c)
    for _round in range(3):
        frames = random_frames(20000, rng)
        for i in range(0, len(frames), 256):
            sender.send(s, frames[i : i + 256])
        st = settle(c)
        rss.append(st["rss_bytes"])
        assert c.proc.poll() is None, H.switch_log(c)
    sent = tx_packets(c) - sent_on_wire0
    t = st["totals"]
    # every frame that reached the switch port is either read (and then forwarded or dropped
    # with a reason) or counted as dropped by the kernel before the switch could read it
    assert t["rx_packets"] + t["rx_socket_drops"] == sent
    assert t["rx_packets"] == t["tx_packets"] + t["drops_total"]
    assert t["drops"]["internal"] == 0
    assert t["drops_total"] > 0.9 * t["rx_packets"]
    assert rss[-1] - rss[0] < 16 << 20, rss  # no growth with the number of frames
    s.close()


def send_and_count(c: H.Chain, n: int = 50) -> int:
    s = H.packet_socket(c.ns_s, c.ifname("hA"))
    r = H.packet_socket(c.ns_r, c.ifname("hB"))
    frame = H.ipv6_frame(H.usid_addr(H.OWN, H.USID_B), payload=b"k" * 32, flow=0x77)
    for _ in range(n):
        s.send(frame)
    got = 0
    while select.select([r], [], [], 0.2)[0]:  # until nothing came for 0.2 s
        got += sum(1 for f in H.drain(r) if len(f) > 21 and f[16:18] == b"\x00\x77")
    s.close()
    r.close()
    return got


def test_link_down_is_counted_and_recovered_without_restart(chain):
    c = chain
    assert send_and_count(c) == 50
    wb = c.ifname("wB")
    H.nsrun(c.ns_w, "ip", "link", "set", wb, "down")
    port_up(c, False)  # the switch probes links every 0.2 s
    assert send_and_count(c) == 0
    st = settle(c)["ports"]["wB"]
    assert not st["up"] and st["link_down_events"] == 1
    assert st["drops"]["port_down"] >= 50
    H.nsrun(c.ns_w, "ip", "link", "set", wb, "up")
    port_up(c, True)
    assert send_and_count(c) == 50
    assert H.read_stats(c)["ports"]["wB"]["up"]
    assert c.proc.poll() is None


def test_sigterm_stops_cleanly_and_restart_is_a_reboot(chain):
    c = chain
    assert send_and_count(c) == 50
    old_pid = c.proc.pid
    assert H.stop_switch(c) == 0
    st = H.read_stats(c)
    assert st["ready"] is False and st["pid"] == old_pid
    assert send_and_count(c) == 0  # switch down: nothing crosses
    H._start_switch(c, {})  # same config again
    assert c.proc.pid != old_pid
    assert send_and_count(c) == 50
    assert os.path.exists(c.stats_path)

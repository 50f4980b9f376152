"""Kernel-switch mode: an mrcnic frame crosses T0-T1-T0, shifted as expected at every hop."""

from __future__ import annotations

import secrets
import time

import lab_helpers as H

from mrcnic import wire
from mrcnic.wire import usid


def test_frame_crosses_t0_t1_t0_with_the_destination_shifted_at_every_hop() -> None:
    with H.running_lab(switch="kernel", planes=2, t0=2, t1=2, hosts_per_t0=2) as st:
        plan = st.plan
        src, dst = 0, plan.host_count - 1  # under different T0s
        ev = 3  # plane 1, T1 1
        plane, t1 = ev % 2, (ev // 2) % 2
        t0a, t0b = plan.shape.host_t0(src), plan.shape.host_t0(dst)
        k = plan.shape.host_downlink(dst)
        marker = secrets.token_bytes(12)
        frame, p = H.mrc_frame(st, src, dst, ev, marker)
        assert p == plane
        # Capture on every link of the path (at the receiving end of each hop).
        taps = {
            "T0a->T1": H.RingTap(st, plan.t1_name(plane, t1), plan.ifname(f"d{t0a}")),
            "T1->T0b": H.RingTap(st, plan.t0_name(plane, t0b), plan.ifname(f"u{t1}")),
            "T0b->host": H.RingTap(st, plan.host_name(dst), plan.ifname(f"p{plane}")),
        }
        tx = H.packet_socket(st, plan.host_name(src), plan.ifname(f"p{plane}"))
        tx.send(frame)
        seen = {}
        for hop, s in taps.items():
            got = s.marked(marker, time.monotonic() + 1.0)
            assert got, f"nothing seen on {hop}"
            seen[hop] = wire.parse_frame(got[0])
        for s in [*taps.values(), tx]:
            s.close()
        assert [len(f.raw) for f in seen.values()] == [len(frame)] * 3
        fmt = plan.fmt
        want = {
            "T0a->T1": [
                usid.t1_usid(plane, t1),
                usid.t0_usid(plane, t0b),
                usid.downlink_usid(plane, k),
            ],
            "T1->T0b": [usid.t0_usid(plane, t0b), usid.downlink_usid(plane, k)],
            "T0b->host": [usid.downlink_usid(plane, k)],
        }
        for i, (hop, f) in enumerate(seen.items()):
            assert usid.decode(f.ip6.dst, fmt) == want[hop], hop
            assert f.ip6.hop_limit == wire.DEFAULT_HOP_LIMIT - 1 - i, hop
        last = seen["T0b->host"]
        # Delivered to the host's port MAC, from its T0 downlink; the payload is intact and
        # the UDP checksum (over the final address) still holds.
        dport = plan.host_port(dst, plane)
        assert last.eth.dst == dport.mac and last.eth.src == dport.peer_mac
        assert last.ip6.dst == plan.final_address(dst, plane)
        assert bytes(last.mrc.payload) == marker
        assert wire.udp_flow_to_ev(last.udp.src_port, last.ip6.flow_label) == ev


def test_every_host_pair_and_plane_is_reachable() -> None:
    with H.running_lab(switch="kernel", planes=2, t0=2, t1=2, hosts_per_t0=2) as st:
        n = st.plan.host_count
        for src in range(n):
            for dst in range(n):
                if src != dst:
                    for ev in range(4):  # both planes, both T1s
                        assert H.crosses(st, src, dst, ev), (src, dst, ev)


def test_wrong_plane_and_unknown_usid_are_dropped() -> None:
    with H.running_lab(switch="kernel", planes=2) as st:
        plan = st.plan
        marker = secrets.token_bytes(12)
        frame, plane = H.mrc_frame(st, 0, 1, 0, marker)
        # Re-address: a T1 uSID that does not exist in this plane.
        bad = bytearray(frame)
        bogus = usid.encode(
            [
                usid.t0_usid(plane, 0),
                usid.t1_usid(plane, 9),
                usid.t0_usid(plane, 1),
                usid.downlink_usid(plane, 0),
            ],
            plan.fmt,
        )
        bad[38:54] = bogus
        rx = H.packet_socket(st, "h1", plan.ifname(f"p{plane}"))
        tx = H.packet_socket(st, "h0", plan.ifname(f"p{plane}"))
        tx.send(bytes(bad))
        assert H.receive_marked(rx, marker, time.monotonic() + 0.4) == []
        rx.close()
        tx.close()

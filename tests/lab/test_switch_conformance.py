"""mrc-switch vs the Linux kernel's seg6local End next-csid on the same chain and corpus.

For every packet of the corpus, both switches must forward it to the same port with the
same destination address, hop limit and length, or both must drop it.
"""

from __future__ import annotations

import time

import pytest
import switch_helpers as H

A = H.usid_addr
OWN, B, C, T1 = H.OWN, H.USID_B, H.USID_C, H.USID_T1
WINDOW_S = 0.03


def corpus() -> list[tuple[str, bytes]]:
    f = H.ipv6_frame
    good = f(A(OWN, B), payload=b"z" * 40)
    cases: list[tuple[str, dict | bytes]] = [
        ("1 uSID in table, unshifted", {"dst": A(B)}),
        ("1 uSID (T1) in table", {"dst": A(T1)}),
        ("2 uSIDs", {"dst": A(OWN, B)}),
        ("3 uSIDs", {"dst": A(OWN, C, 0x55)}),
        ("4 uSIDs", {"dst": A(OWN, T1, C, B)}),
        ("5 uSIDs", {"dst": A(OWN, C, 5, 6, 7)}),
        ("6 uSIDs", {"dst": A(OWN, B, 2, 3, 4, 5)}),
        ("6 uSIDs unshifted", {"dst": A(C, 2, 3, 4, 5, 6)}),
        ("own twice then B", {"dst": A(OWN, OWN, B)}),
        ("own, T1, own, B", {"dst": A(OWN, T1, OWN, B)}),
        ("end of carrier", {"dst": A(OWN)}),
        ("end of carrier after own twice", {"dst": A(OWN, OWN)}),
        ("hop limit 1", {"dst": A(OWN, B), "hop_limit": 1}),
        ("hop limit 2", {"dst": A(OWN, B), "hop_limit": 2}),
        ("hop limit 0", {"dst": A(OWN, B), "hop_limit": 0}),
        ("hop limit 255", {"dst": A(OWN, C), "hop_limit": 255}),
        ("hop limit 1 unshifted", {"dst": A(B), "hop_limit": 1}),
        ("hop limit 2 unshifted", {"dst": A(B), "hop_limit": 2}),
        ("hop limit 1 end of carrier", {"dst": A(OWN), "hop_limit": 1}),
        ("wrong block", {"dst": bytes.fromhex("fcbbbb01") + A(OWN, B)[4:]}),
        ("other prefix", {"dst": bytes.fromhex("20010db8000000000000000000000002")}),
        ("unknown first uSID", {"dst": A(0x4444, B)}),
        ("unknown next uSID", {"dst": A(OWN, 0x4444)}),
        ("zero uSID next", {"dst": A(OWN, 0, B)}),
        ("zero uSID first", {"dst": A(0, B)}),
        ("zero uSID in the middle, later", {"dst": A(OWN, B, 0, C)}),
        ("payload length short (trailing bytes)", {"dst": A(OWN, B), "plen": 20}),
        ("payload length zero", {"dst": A(OWN, B), "plen": 0}),
        ("payload length lies (long)", {"dst": A(OWN, B), "plen": 9000}),
        ("payload length lies by 1", {"dst": A(OWN, B), "plen": 49}),
        ("DSCP and ECN kept", {"dst": A(OWN, B), "dscp": 46, "ecn": 2}),
        ("wrong dst MAC", {"dst": A(OWN, B), "eth_dst": H.mac(0x77)}),
        ("broadcast dst MAC", {"dst": A(OWN, B), "eth_dst": b"\xff" * 6}),
        ("source link-local", {"dst": A(OWN, B), "src": bytes.fromhex("fe80" + "00" * 13 + "01")}),
        ("source multicast", {"dst": A(OWN, B), "src": bytes.fromhex("ff02" + "00" * 13 + "01")}),
        ("big payload", {"dst": A(OWN, C), "payload": bytes(4096)}),
        ("truncated to 14", good[:14]),
        ("truncated to 20", good[:20]),
        ("truncated to 53", good[:53]),
        ("truncated to 54", good[:54]),
        ("truncated to 70", good[:70]),
        ("truncated by 1", good[:-1]),
        ("IPv4 ethertype", H.MAC_WA + H.MAC_HA + b"\x08\x00" + bytes.fromhex("45") + bytes(39)),
        ("unknown ethertype", H.MAC_WA + H.MAC_HA + b"\x88\xb5" + bytes(50)),
        ("IPv6 ethertype, version 4", H.MAC_WA + H.MAC_HA + b"\x86\xdd" + b"\x40" + good[15:]),
    ]
    out = []
    for i, (name, spec) in enumerate(cases):
        if isinstance(spec, dict):
            kw = {"payload": b"z" * 40, **spec}
            frame = f(kw.pop("dst"), flow=i + 1, **kw)
        else:
            frame = spec
        out.append((name, frame))
    return out


def outcome(frames_by_port: dict[str, list[bytes]]) -> list[tuple]:
    res = []
    for port, frames in frames_by_port.items():
        for fr in frames:
            if H.is_chatter(fr):
                continue
            if len(fr) >= 54 and fr[12:14] == b"\x86\xdd":
                res.append((port, fr[38:54].hex(), fr[21], len(fr)))
            else:
                res.append((port, "non-ipv6", fr.hex()))
    return sorted(res)


# mrc-switch's receive paths: the C core with a PACKET_MMAP ring and the C event loop (the
# default), the same with the Python loop, the C core with recvmmsg, and the pure-Python
# twins (MRC_PURE_PYTHON=1) with the ring
VARIANTS = {
    "c-mmap": ({}, None),
    "c-mmap-python-loop": ({}, {"MRC_SWITCH_C_LOOP": "0"}),
    "c-recvmmsg": ({"rx_ring_frames": 0}, None),
    "python-mmap": ({}, {"MRC_PURE_PYTHON": "1"}),
}
FWD_PATH = {"c-mmap": "c_loop", "c-mmap-python-loop": "one_call", "c-recvmmsg": "batch",
            "python-mmap": "batch"}  # fmt: skip


def run_corpus(
    mode: str, workdir, top: dict | None = None, env: dict | None = None
) -> tuple[list[list[tuple]], dict | None]:
    c = H.build_chain(mode, workdir, switch_args={"top": top or {}}, switch_env=env)
    try:
        tx = H.packet_socket(c.ns_s, c.ifname("hA"))
        rx = {
            "B": H.packet_socket(c.ns_r, c.ifname("hB")),
            "C": H.packet_socket(c.ns_r, c.ifname("hC")),
        }
        H.drain_until_quiet(*rx.values())  # let link-up chatter pass
        results = []
        for _name, frame in corpus():
            tx.send(frame)
            time.sleep(WINDOW_S)  # a frame's window (a drop shows as silence): time itself
            results.append(outcome({p: H.drain(s) for p, s in rx.items()}))
        stats = None
        if c.proc is not None:
            stats = H.fresh_stats(c)
            assert c.proc.poll() is None, "mrc-switch died"
        for s in (tx, *rx.values()):
            s.close()
        return results, stats
    finally:
        H.teardown(c)


@pytest.fixture(scope="module")
def kernel_outcomes(tmp_path_factory):
    return run_corpus("kernel", tmp_path_factory.mktemp("kernel"))[0]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_switch_matches_kernel(tmp_path, kernel_outcomes, variant):
    kernel = kernel_outcomes
    top, env = VARIANTS[variant]
    switch, stats = run_corpus("switch", tmp_path, top, env)
    assert stats["io_backend"] == ("python" if variant == "python-mmap" else "c")
    assert stats["fwd_path"] == FWD_PATH[variant]
    assert stats["rx_path"] == ("recvmmsg" if top.get("rx_ring_frames") == 0 else "mmap")
    names = [n for n, _ in corpus()]
    mismatches = [
        f"{name}: kernel {k} vs mrc-switch {s}"
        for name, k, s in zip(names, kernel, switch, strict=True)
        if k != s
    ]
    assert not mismatches, "\n".join(mismatches)
    forwarded = sum(1 for k in kernel if k)
    assert 10 < forwarded < len(names) - 10  # the corpus exercises both outcomes
    # every frame the switch received is accounted for: forwarded or dropped with a reason
    t = stats["totals"]
    assert t["rx_packets"] == len(names)
    assert t["tx_packets"] == forwarded
    assert t["rx_packets"] == t["tx_packets"] + t["drops_total"]
    for reason in ("end_of_carrier", "hop_limit", "wrong_block", "not_mine", "zero_usid",
                   "no_route", "malformed", "not_ipv6", "not_my_mac", "bad_source"):  # fmt: skip
        assert t["drops"][reason] > 0, reason

"""One process serving several switches: the C loop over a group (mrc_sw_group_poll,
cloop.CGroup), the hosting process's control requests, and the lab's grouping (no root).

The group runs each switch's loop as mrc_sw_poll runs it alone: a group of one must give
exactly what mrc_sw_poll gives (frames out, counters, events), and a group of two keeps each
switch's queues, counters and events apart (``event.sw``). The receive path and the Python
twin (SwitchHost's Python loop) run on real veths in tests/lab/test_switch_host.py."""

from __future__ import annotations

import json
import os
import select
import socket
import time
from types import SimpleNamespace

import pytest
from test_switch_cloop import MAX_FRAME, R_FSIZE, _frame, _ip_frame, _port_cfg, _recv_all

from mrcswitch import cloop
from mrcswitch.fastpath import Planner
from mrcswitch.fcache import DecisionCache
from mrcswitch.pipeline import DropCounter, DropReason

pytestmark = pytest.mark.skipif(not cloop.available(), reason="C module without mrc_sw_poll")

REASONS = (DropReason.PORT_DOWN, DropReason.QUEUE_FULL, DropReason.TX_ERROR)


class _Switch:
    """Two ports sending into unix datagram sockets (as test_switch_cloop's rig)."""

    def __init__(self, epfd: int, tag: int) -> None:
        from mrcswitch.cqueue import CEgressQueue

        self.socks = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(2)]
        for a, b in self.socks:
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            b.setblocking(False)
        now = time.monotonic_ns()
        self.ports = [
            SimpleNamespace(
                index=i, ring=None, sock=None, tx_sock=self.socks[i][0], up=True,
                queue=CEgressQueue(_port_cfg(name=f"s{tag}p{i}"), 32, now, max_frame_bytes=MAX_FRAME),
                drops=DropCounter(), rx_packets=0, rx_bytes=0, tx_packets=0, tx_bytes=0,
            )
            for i in range(2)
        ]  # fmt: skip
        planner = Planner([bytes(12)] * 2, 4, 8, max(DropReason) + 1)
        self.loop = cloop.CLoop(
            epfd, self.ports, [DecisionCache(64) for _ in self.ports], planner, slots=8,
            cap=MAX_FRAME, hist_len=max(DropReason) + 1, batches_per_wake=2, timer_slack_ns=0,
            reasons=REASONS,
        )  # fmt: skip

    def close(self) -> None:
        for a, b in self.socks:
            a.close()
            b.close()


@pytest.fixture
def two():
    ep = select.epoll()
    r, w = os.pipe()
    ep.register(r, select.EPOLLIN)
    sws = [_Switch(ep.fileno(), k) for k in range(2)]
    group = cloop.CGroup(ep.fileno(), [s.loop for s in sws], timer_slack_ns=0)
    yield SimpleNamespace(ep=ep, sws=sws, group=group, pipe=(r, w))
    for s in sws:
        s.close()
    ep.close()
    os.close(r)
    os.close(w)


def _tags(frames: list[bytes]) -> list[int]:
    return [int.from_bytes(f[54:58], "big") for f in frames]


def test_each_switch_of_a_group_paces_its_own_queues(two):
    a, b = two.sws
    for i in range(6):
        a.ports[0].queue.enqueue(_frame(i), time.monotonic_ns())
        b.ports[1].queue.enqueue(_frame(100 + i), time.monotonic_ns())
    why = two.group.poll(time.monotonic_ns() + 100_000_000)
    assert why is cloop.Wake.DEADLINE
    assert _tags(_recv_all(a.socks[0][1])) == list(range(6))
    assert _tags(_recv_all(b.socks[1][1])) == list(range(100, 106))
    assert _recv_all(a.socks[1][1]) == [] and _recv_all(b.socks[0][1]) == []
    a.loop.fold()
    b.loop.fold()
    assert a.ports[0].tx_packets == 6 and b.ports[1].tx_packets == 6
    assert a.ports[1].tx_packets == 0 and b.ports[0].tx_packets == 0
    c = two.group.counters()
    assert c["timer_wakeups"] >= 1 and c["wakeups"] == 0 and c["holds"] == 0


def test_a_link_down_names_its_switch(two):
    a, b = two.sws
    b.socks[0][1].close()  # a send error that is not a link error: TX_ERROR, no event
    b.ports[0].queue.enqueue(_frame(1), time.monotonic_ns())
    b.ports[1].up = False
    b.loop.sync(b.ports[1])
    b.ports[1].queue.enqueue(_frame(2), time.monotonic_ns())
    assert two.group.poll(time.monotonic_ns() + 5_000_000) is cloop.Wake.DEADLINE
    b.loop.fold()
    assert b.ports[0].drops.by_reason[DropReason.TX_ERROR] == 1
    assert b.ports[1].drops.by_reason[DropReason.PORT_DOWN] == 1
    a.loop.fold()
    assert a.ports[0].drops.total == a.ports[1].drops.total == 0


def test_another_fd_hands_control_back_from_the_group(two):
    r, w = two.pipe
    os.write(w, b"x")
    t0 = time.monotonic_ns()
    assert two.group.poll(t0 + 5_000_000_000) is cloop.Wake.OTHER_FD
    assert two.group.event.fd == r
    assert time.monotonic_ns() - t0 < 4_000_000_000


def test_members_can_change(two):
    a, b = two.sws
    two.group.set_members([b.loop])
    a.ports[0].queue.enqueue(_frame(7), time.monotonic_ns())
    b.ports[0].queue.enqueue(_frame(8), time.monotonic_ns())
    two.group.poll(time.monotonic_ns() + 5_000_000)
    assert _recv_all(a.socks[0][1]) == []  # not a member: not served
    assert _tags(_recv_all(b.socks[0][1])) == [8]
    two.group.set_members([a.loop, b.loop])
    two.group.poll(time.monotonic_ns() + 5_000_000)
    assert _tags(_recv_all(a.socks[0][1])) == [7]


def test_bad_groups_are_refused(two):
    from mrcnic import _mrcfast

    ffi, lib = _mrcfast.ffi, _mrcfast.lib
    ev = ffi.new("struct mrc_sw_event *")
    g = ffi.new("struct mrc_sw_group *")
    assert lib.mrc_sw_group_poll(g, 0, ev) < 0  # no switches
    assert lib.mrc_sw_group_poll(ffi.NULL, 0, ev) < 0
    arr = ffi.new("struct mrc_sw *[]", [two.sws[0].loop.sw, ffi.new("struct mrc_sw *")])
    g.sw, g.n_sw, g.epfd = arr, 2, two.ep.fileno()
    assert lib.mrc_sw_group_poll(g, 0, ev) < 0  # the second switch has no ports
    g.n_sw = 1
    assert lib.mrc_sw_group_poll(g, 0, ev) == cloop.Wake.DEADLINE
    g.hold_ns = 2_000_000_000  # more than a second
    assert lib.mrc_sw_group_poll(g, 0, ev) < 0
    g.hold_ns, g.timer_slack_ns = 0, -1
    assert lib.mrc_sw_group_poll(g, 0, ev) < 0


# --- the receive path: a group of one is mrc_sw_poll; the second switch's events say so --------


def _rx_switch(epfd: int, r_fd: int, hold_ns: int = 0):
    """A switch whose port 0 receives from a synthetic ring (readable fd r_fd), port 1 sends."""
    from test_switch_cloop import _TP, R_BLOCK, R_NR

    from mrcnic import _mrcfast
    from mrcnic.io import batch as batch_io
    from mrcswitch.cqueue import CEgressQueue

    ffi = _mrcfast.ffi
    ptr = ffi.new("uint8_t[]", R_BLOCK * (R_NR * R_FSIZE // R_BLOCK))
    ring = SimpleNamespace(
        ptr=ptr, view=memoryview(ffi.buffer(ptr)), buf_len=len(ffi.buffer(ptr)),
        block_size=R_BLOCK, frame_size=R_FSIZE, frame_nr=R_NR, head=0, slots=4, cap=MAX_FRAME,
        c_offs=ffi.new("uint32_t[]", 4), c_lens=ffi.new("uint32_t[]", 4),
    )  # fmt: skip
    mac = batch_io.TP2_MAC_OFFSET

    def put(k: int, f: bytes) -> None:
        at = k * R_FSIZE
        _TP.pack_into(ring.view, at, 1, len(f), len(f), mac)
        ring.view[at + mac : at + mac + len(f)] = f

    tx = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(2)]
    for _, b in tx:
        b.setblocking(False)
    now = time.monotonic_ns()
    ports = [
        SimpleNamespace(
            index=i, ring=ring if i == 0 else None,
            sock=SimpleNamespace(fileno=lambda: r_fd) if i == 0 else None, tx_sock=tx[i][0],
            up=True, queue=CEgressQueue(_port_cfg(name=f"p{i}"), 32, now, max_frame_bytes=MAX_FRAME),
            drops=DropCounter(), rx_packets=0, rx_bytes=0, tx_packets=0, tx_bytes=0,
        )
        for i in range(2)
    ]  # fmt: skip
    caches = [DecisionCache(64) for _ in ports]
    planner = Planner([bytes(range(12))] * 2, 4, 4, max(DropReason) + 1)
    loop = cloop.CLoop(
        epfd, ports, caches, planner, slots=4, cap=MAX_FRAME, hist_len=max(DropReason) + 1,
        batches_per_wake=1, timer_slack_ns=0, reasons=REASONS, hold_ns=hold_ns,
    )  # fmt: skip
    return SimpleNamespace(loop=loop, ring=ring, put=put, cache=caches[0], tx=tx, ports=ports)


def _scenario(poll, sw, ev) -> list:
    """Miss, forward, punt (test_switch_cloop's sequence); what each step gave."""
    out = []
    f0, f1, f2, f3 = _ip_frame(1), _ip_frame(2), _ip_frame(3, hop=1), _ip_frame(4)
    sw.put(0, f0)
    sw.put(1, f1)
    out.append((int(poll(time.monotonic_ns() + 50_000_000)), ev.port, ev.frames, sw.ring.head))
    sw.cache.insert(f0[:54], 1)
    sw.cache.insert(f1[:54], 1)
    out.append((int(poll(time.monotonic_ns() + 20_000_000)), sw.ring.head))
    out.append([bytes(g) for g in _recv_all(sw.tx[1][1])])
    sw.put(2, f2)
    sw.put(3, f3)
    sw.cache.insert(f2[:54], -int(DropReason.HOP_LIMIT))
    sw.cache.insert(f3[:54], 7)
    out.append((int(poll(time.monotonic_ns() + 50_000_000)), ev.port, ev.frames, ev.n_punt))
    sw.loop.fold()
    p0, p1 = sw.ports
    out.append((p0.rx_packets, p0.drops.by_reason[DropReason.HOP_LIMIT], p1.tx_packets))
    return out


@pytest.mark.parametrize("hold_ns", [0, 300_000])
def test_a_group_of_one_gives_what_the_loop_alone_gives(hold_ns):
    results = []
    for kind in ("alone", "group"):
        ep = select.epoll()
        r, w = os.pipe()
        os.write(w, b"x")  # the port's "socket" stays readable
        ep.register(r, select.EPOLLIN)
        sw = _rx_switch(ep.fileno(), r, hold_ns)
        if kind == "alone":
            results.append(_scenario(sw.loop.poll, sw, sw.loop.event))
        else:
            g = cloop.CGroup(ep.fileno(), [sw.loop], timer_slack_ns=0, hold_ns=hold_ns)
            results.append(_scenario(g.poll, sw, g.event))
            assert g.event.sw == 0
            if hold_ns:
                assert g.counters()["holds"] >= 1
        for a, b in sw.tx:
            a.close()
            b.close()
        ep.close()
        os.close(r)
        os.close(w)
    assert results[0] == results[1]
    assert results[0][0] == (int(cloop.Wake.MISS), 0, 2, 0)
    assert results[0][3] == (int(cloop.Wake.PUNT), 0, 2, 1)


def test_the_second_switch_of_a_group_reports_its_index():
    ep = select.epoll()
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    ep.register(r1, select.EPOLLIN)
    ep.register(r2, select.EPOLLIN)
    a, b = _rx_switch(ep.fileno(), r1), _rx_switch(ep.fileno(), r2)
    g = cloop.CGroup(ep.fileno(), [a.loop, b.loop], timer_slack_ns=0)
    os.write(w2, b"x")  # only b's port is readable
    b.put(0, _ip_frame(9))
    assert g.poll(time.monotonic_ns() + 50_000_000) is cloop.Wake.MISS
    assert (g.event.sw, g.event.port, g.event.frames) == (1, 0, 1)
    assert b.loop.counters()["port_wakeups"] == 1 and a.loop.counters()["port_wakeups"] == 0
    assert g.counters()["wakeups"] == 1
    for s in (a, b):
        for x, y in s.tx:
            x.close()
            y.close()
    ep.close()
    for fd in (r1, w1, r2, w2):
        os.close(fd)


# --- the hosting process's control requests, the lab's grouping, the config's netns ---------


def _config(tmp_path, name: str, **extra) -> str:
    cfg = {
        "name": name, "ports": [{"interface": "mrcnoif0", "peer_mac": "02:00:00:00:00:01",
                                 "rate_mbit": 100, "buffer_bytes": 65536}],
        **extra,
    }  # fmt: skip
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(cfg))
    return str(p)


def test_host_control_requests_name_one_switch(tmp_path):
    from mrcswitch.host import SwitchHost

    host = SwitchHost([_config(tmp_path, "a"), _config(tmp_path, "b")])
    assert host.command({"op": "list"}) == {"ok": True, "switches": {"a": False, "b": False}}
    assert host.command({"op": "stop", "switch": "a"})["result"] == "not running"
    assert not host.command({"op": "stop", "switch": "zz"})["ok"]
    assert not host.command({"op": "reboot", "switch": "a"})["ok"]
    # starting opens its ports: an interface that does not exist is refused, nothing runs
    r = host.command({"op": "start", "switch": "b"})
    assert not r["ok"] and "interface" in r["error"]
    assert host.switches == {}
    host.close()


def test_host_refuses_a_name_given_twice(tmp_path):
    from mrcswitch.config import ConfigError
    from mrcswitch.host import SwitchHost

    a = _config(tmp_path, "a")
    with pytest.raises(ConfigError):
        SwitchHost([a, a])


def test_config_netns_is_a_name(tmp_path):
    from mrcswitch.config import ConfigError, load_config

    assert load_config(_config(tmp_path, "a", netns="mrc-p0-t0-0")).netns == "mrc-p0-t0-0"
    assert load_config(_config(tmp_path, "b")).netns == ""
    with pytest.raises(ConfigError, match="netns"):
        load_config(_config(tmp_path, "c", netns="../x"))
    with pytest.raises(ConfigError, match="netns"):
        load_config(_config(tmp_path, "d", netns=3))


def test_lab_groups_keep_planes_together():
    from lab.fabric.params import LabParams
    from lab.fabric.pyswitch import groups, switch_config
    from lab.fabric.topology import Plan

    plan = Plan(LabParams(name="mrct"))  # 8 planes x (2 T0 + 2 T1)
    for n in (1, 2, 4, 8):
        gs = groups(plan, n)
        assert len(gs) == n and sum(map(len, gs)) == plan.switch_count
        for g in gs:  # whole planes
            planes = {name.split("-")[0] for name in g}
            assert len(g) == 4 * len(planes)
    assert len(groups(plan, 100)) == plan.switch_count  # at most one switch each
    node = next(plan.switches())
    assert "netns" not in switch_config(plan, node, "/x")
    assert switch_config(plan, node, "/x", "mrct-p0-t0-0")["netns"] == "mrct-p0-t0-0"


def test_switches_of_one_process_spread_their_periodic_work(tmp_path):
    """32 switches' stats built at once stalled a shared process ~9 ms every 0.5 s (the
    NICs answered with spurious timeouts): each switch gets its own phase."""
    from mrcswitch.config import load_config
    from mrcswitch.links import LINK_PROBE_INTERVAL_S
    from mrcswitch.switch import Switch

    n = 4
    sws = [Switch(load_config(_config(tmp_path, f"s{k}"))) for k in range(n)]
    for k, sw in enumerate(sws):
        sw.set_phase(k / n)
    for attr, interval_s in (("_stats_due", 0.5), ("_probe_due", LINK_PROBE_INTERVAL_S)):
        dues = sorted(getattr(sw, attr) for sw in sws)
        gaps_s = [(b - a) / 1e9 for a, b in zip(dues, dues[1:], strict=False)]
        assert min(gaps_s) > 0.8 * interval_s / n, (attr, gaps_s)
    for sw in sws:
        sw.close()

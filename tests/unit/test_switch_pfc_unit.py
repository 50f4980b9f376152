"""The switch side of PFC without sockets: the config's ``pfc`` table, the pipeline's
hand-over of PFC frames, the twin queue's lossless class, and SwitchPfc's XOFF/XON over the
queues' per in-port bytes with the pause it applies and the watchdog."""

from __future__ import annotations

import pytest

from mrcnic.wire import pfc as wire_pfc
from mrcnic.wire.layout import Dscp
from mrcswitch.config import ConfigError, LosslessClass, PfcConfig, PortConfig, config_from_dict
from mrcswitch.pfc import Action, SwitchPfc
from mrcswitch.pipeline import TO_SWITCH, DropReason, Pipeline, ToSwitch
from mrcswitch.queue import EgressQueue, Verdict
from mrcswitch.table import build_table

MAC = [bytes([2, 0, 0, 0, 0, i]) for i in range(3)]


def base_config(**top) -> dict:
    ports = [{"name": f"p{i}", "interface": f"v{i}", "peer_mac": "02:00:00:00:01:0" + str(i),
              "rate_mbit": 100, "buffer_bytes": 65536} for i in range(2)]  # fmt: skip
    return {"name": "s", "own_usids": ["1100"], "ports": ports, "table": {"3001": "p1"}, **top}


def test_config_pfc_table_defaults_and_errors():
    assert config_from_dict(base_config()).pfc is None
    assert config_from_dict(base_config(pfc=True)).pfc == PfcConfig()
    cfg = config_from_dict(base_config(pfc={"xoff_bytes": 20000, "xon_bytes": 10000}))
    assert cfg.pfc is not None and cfg.pfc.in_limit_bytes == 20000 + cfg.pfc.headroom_bytes
    with pytest.raises(ConfigError, match="^pfc.xoff_bytes: unknown|^pfc.xofff"):
        config_from_dict(base_config(pfc={"xofff": 1}))
    with pytest.raises(ConfigError, match="^pfc: need 0 < xon_bytes < xoff_bytes"):
        config_from_dict(base_config(pfc={"xoff_bytes": 100, "xon_bytes": 500}))
    with pytest.raises(ConfigError, match="^pfc.watchdog_s"):
        config_from_dict(base_config(pfc={"watchdog_s": "1s"}))


def pipeline(mac_control: bool) -> Pipeline:
    cfg = config_from_dict(base_config())
    return Pipeline(build_table(cfg), MAC[:2], MAC[1:3], mac_control=mac_control)


def test_pfc_frames_go_to_the_switch_only_with_pfc():
    f = wire_pfc.encode_pause(MAC[2], {3: 100})
    assert pipeline(True).decide(bytearray(f), 0) == TO_SWITCH
    assert isinstance(pipeline(True).process(f, 0), ToSwitch)
    assert pipeline(False).decide(bytearray(f), 0) == -DropReason.NOT_MY_MAC
    assert pipeline(True).decide(bytearray(f[:20]), 0) == TO_SWITCH  # short: still PFC
    assert TO_SWITCH & 0xFFFF >= 1024  # no switch has this port: C refuses it to Python


def port_cfg() -> PortConfig:
    return config_from_dict(base_config()).ports[0]


def frame(dscp: int, n: int = 1000, ecn: int = 2) -> bytearray:
    f = bytearray(n)
    f[14] = 0x60 | dscp >> 2
    f[15] = (dscp & 3) << 6 | ecn << 4
    return f


def test_lossless_class_is_bounded_per_in_port_never_trimmed_and_paused():
    in_bytes = [0, 0, 0]
    q = EgressQueue(port_cfg(), 32, 0, LosslessClass(Dscp.LOSSLESS, 100_000, 3000), in_bytes)
    assert [q.enqueue(frame(Dscp.LOSSLESS), 0, 1) for _ in range(4)] == [Verdict.QUEUED] * 3 + [
        Verdict.DROPPED
    ]
    assert in_bytes == [0, 3000, 0] and q.lossless_drops == 1
    assert q.enqueue(frame(Dscp.LOSSLESS), 0, 2) is Verdict.QUEUED  # another in-port: room
    q.enqueue(frame(Dscp.NO_TRIM), 0, 0)
    q.paused_until_ns = 10**9
    out = q.dequeue(10**6, 64)
    assert [bytes(f) for f in out] == [bytes(frame(Dscp.NO_TRIM))]  # data flows, lossless held
    assert q.next_send_ns(10**6) == 10**9 and q.fast_budget(10**6) == -1
    assert len(q.dequeue(10**9, 64)) == 4 and in_bytes == [0, 0, 0]
    q.enqueue(frame(Dscp.LOSSLESS), 0, 1)
    assert q.flush() == 1 and in_bytes == [0, 0, 0]  # a flush gives the bytes back


def test_switch_pfc_xoff_xon_refresh_and_watchdog():
    cfg = PfcConfig(xoff_bytes=2000, xon_bytes=1000, headroom_bytes=5000, watchdog_s=0.3,
                    watchdog_restore_s=0.5)  # fmt: skip
    in_bytes, xoff = [0, 0], [0, 0]
    pfc = SwitchPfc(cfg, [1e8, 1e8], in_bytes, xoff)
    assert pfc.step(0) == [] and pfc.due_ns(0) is None
    in_bytes[1] = 2001
    assert pfc.step(1000) == [(1, Action.PAUSE)] and xoff == [0, 1]
    assert pfc.step(2000) == []  # asked already: nothing until the pause runs low
    half = int(pfc.ingress[1].pause_s / 2 * 1e9)
    assert pfc.step(1000 + half + 1) == [(1, Action.PAUSE)]  # refreshed while congested
    in_bytes[1] = 1000
    assert pfc.step(10**8) == [(1, Action.RESUME)] and xoff == [0, 0]
    assert pfc.ingress[1].pause_tx == 3
    # egress: a pause, then a storm the watchdog breaks
    f = wire_pfc.encode_pause(MAC[1], {cfg.priority: 0xFFFF})
    until = pfc.on_frame(0, f, 10**9)
    assert until == 10**9 + round(wire_pfc.pause_s(0xFFFF, 1e8) * 1e9)
    assert pfc.due_ns(10**9) is not None
    assert pfc.on_frame(0, wire_pfc.encode_pause(MAC[1], {5: 9}), 10**9) is None  # not ours
    assert pfc.paused_until_ns(0, 10**9 + 2 * 10**8) > 0
    assert pfc.paused_until_ns(0, 10**9 + 32 * 10**7) == 0  # > 0.3 s unbroken: released
    assert pfc.egress[0].watchdog_trips == 1 and pfc.paused_ports() == []
    assert pfc.on_frame(0, f, 10**9 + 5 * 10**8) == 0  # ignored while the watchdog holds it
    stats = pfc.port_stats(0, 7)
    assert stats["watchdog_trips"] == 1 and stats["lossless_drops"] == 7

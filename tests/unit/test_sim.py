"""mrc-sim: the JSON contract, determinism, failures (the RoCEv2 baseline: test_sim_rocev2.py)."""

from __future__ import annotations

import functools

import commands as C
import pytest

from mrcnic import wire
from mrcnic.sim import transfer as sim
from mrcnic.sim.fabric import FabricSpec, Link, LinkSpec
from mrcnic.transport.ev import EvConfig

CONTRACT = {
    "goodput_fraction",
    "completion_s",
    "verified",
    "qp_errors",
    "retransmissions",
    "ev_states",
    "recovery_s",
}
SMALL = ["--planes", "4", "--paths-per-plane", "2", "--size", "2M", "--msg-size", "256K"]


def test_json_contract_and_lossless_run(capsys):
    code, r = C.run_main_json(capsys, sim.main, *SMALL)
    assert code == 0 and set(r) >= CONTRACT
    assert r["verified"] is True and r["qp_errors"] == 0 and r["recovery_s"] is None
    assert 0.5 < r["goodput_fraction"] <= 1.0 and r["completion_s"] > 0
    assert r["ev_states"]["GOOD"] == sum(r["ev_states"].values())


def test_same_seed_same_run(capsys):
    _, r1 = C.run_main_json(capsys, sim.main, *SMALL, "--loss", "0.01", "--seed", "3")
    _, r2 = C.run_main_json(capsys, sim.main, *SMALL, "--loss", "0.01", "--seed", "3")
    _, r3 = C.run_main_json(capsys, sim.main, *SMALL, "--loss", "0.01", "--seed", "4")
    keep = lambda r: {k: v for k, v in r.items() if k not in ("wall_s", "cpu_s", "sim_pps")}  # noqa: E731
    assert keep(r1) == keep(r2) and keep(r1) != keep(r3)
    assert r1["retransmissions"] > 0 and r1["verified"]


def test_plane_failure_mid_transfer_recovers_without_error(capsys):
    code, r = C.run_main_json(
        capsys, sim.main, *SMALL, "--fail", "plane:1@5ms", "--heal", "plane:1@60ms"
    )
    assert code == 0 and r["verified"] and r["qp_errors"] == 0
    assert r["recovery_s"] is not None and r["recovery_s"] < 10 * r["base_rtt_s"]
    # the failure was real: packets were lost and EVs retired (SACKs find it before a timer)
    assert r["retransmissions"] > 0 and r["ev_states"]["ASSUMED_BAD"] + r["ev_transitions"] > 0


def test_losing_a_t1_per_plane_then_a_plane_does_not_stall(capsys):
    """Two planes of two T1s: one path per plane fails, then the last path of plane 0. Each
    failure retires its path's EVs together (two losses, no acknowledgment between), so
    goodput follows the surviving capacity. Retired one EV per loss, the window fell to a
    packet and every remaining EV of the dead paths cost a timeout: seconds near zero."""
    code, r = C.run_main_json(
        capsys, sim.main, *SMALL, "--planes", "2", "--paths-per-plane", "2", "--port-rate", "10Mbit",
        "--size", "8M", "--msg-size", "64K", "--fail", "path:0@0.5s", "--fail", "path:3@1s",
        "--fail", "path:1@1.5s", "--timeline", "250ms",
    )  # fmt: skip
    assert code == 0 and r["verified"] and r["qp_errors"] == 0
    bps = dict(r["timeline"])
    assert min(bps[t] for t in (0.75, 1.0, 1.25)) > 0.8 * 20e6  # a path per plane left: 20 Mb/s
    assert min(bps[t] for t in (1.75, 2.0, 2.25, 2.5, 2.75)) > 0.8 * 10e6  # one path: 10 Mb/s
    assert r["paths_retired"] == 3  # once per failed path (the run is deterministic)


def test_port_failure_and_path_failure(capsys):
    _, r = C.run_main_json(capsys, sim.main, *SMALL, "--fail", "port:2@3ms")
    assert r["verified"] and r["qp_errors"] == 0
    _, r = C.run_main_json(capsys, sim.main, *SMALL, "--fail", "3@3ms", "--timeline", "5ms")
    assert r["verified"] and r["timeline"] and r["ev_states"]["ASSUMED_BAD"] > 0


def test_congested_fabric_trims_and_marks(capsys):
    _, r = C.run_main_json(
        capsys, sim.main, *SMALL, "--path-rate", "20Mbit", "--queue", "16K", "--ecn", "8K"
    )
    assert r["verified"] and r["qp_errors"] == 0 and r["trims"] > 0 and r["ecn_marks"] > 0


def test_human_summary_and_bad_arguments(capsys):
    assert sim.main([*SMALL]) == 0
    out = capsys.readouterr().out
    assert "goodput" in out and "verified         yes" in out
    for bad in (["--fail", "99@1ms"], ["--size", "lots"], ["--fail", "plane:1"]):
        with pytest.raises(SystemExit):
            sim.main([*SMALL, *bad])


def test_parsers():
    assert sim.parse_size("256M") == 256 << 20 and sim.parse_size("4096") == 4096
    assert sim.parse_time("10ms") == pytest.approx(0.01) and sim.parse_time(
        "200us"
    ) == pytest.approx(2e-4)
    assert sim.parse_rate("100Mbit") == 100e6 and sim.parse_rate("1G") == 1e9
    f = sim.Fault.parse("plane:3@10ms", up=False)
    assert (f.kind, f.index, f.up) == ("plane", 3, False) and f.time_s == pytest.approx(0.01)


def test_link_queue_ecn_trim_and_priority():
    import random

    link = Link("l", LinkSpec(rate_bps=8e6, queue_bytes=3000, ecn_bytes=1000))  # 1 byte per us
    rng = random.Random(1)
    pkt = wire.MrcPacket(  # with a timestamp extension, as the QP sends: 102 bytes of headers
        wire.BTH(wire.Opcode.WRITE_ONLY, dest_qp=7, psn=1, ts_present=True),
        meth=wire.METH(1, 0), ts=wire.TimestampExt(5), reth=wire.RETH(0, 1, 1200 - 106),
        payload=bytes(1200 - 106),
    )  # fmt: skip
    frame = wire.build_frame(eth_src=bytes(6), eth_dst=bytes(6), ip_src=bytes(16),
                             ip_dst=bytes(16), final_dst=bytes(16), ev=1, mrc=wire.encode_mrc(pkt),
                             dscp=wire.Dscp.TRIMMABLE, ecn=wire.Ecn.ECT0)  # fmt: skip
    assert len(frame) == 1200
    t1, f1 = link.transmit(0.0, frame, rng)
    assert t1 == pytest.approx(1200e-6) and f1[15] & 0x30 == 0x20
    _, f2 = link.transmit(0.0, frame, rng)  # 1200 B backlog > 1000: CE
    assert f2[15] & 0x30 == 0x30
    t3, f3 = link.transmit(0.0, frame, rng)  # would exceed 3000 B: trimmed
    assert len(f3) == 102 and ((f3[14] & 0xF) << 2 | f3[15] >> 6) == 12
    assert link.trims == 1 and link.marks == 1
    # the header goes high priority: it does not wait behind the 2400 B of data queued
    assert t3 == pytest.approx(102e-6)
    t_hp, _ = link.transmit(0.0, f3, rng)  # nor does a header trimmed upstream
    assert t_hp == pytest.approx(102e-6)
    sack = bytearray(frame)
    sack[wire.layout.OFF_BTH] = wire.Opcode.SACK  # trimmable DSCP, not a data packet
    assert link.transmit(0.0, bytes(sack), rng) is None and link.drops == 1


def test_fabric_capacity():
    spec = FabricSpec(planes=8, paths_per_plane=4, port_rate_bps=100e6, path_rate_bps=20e6)
    assert spec.capacity_bps() == 8 * 80e6


def _lossy_path_run(monkeypatch, flap_memory_s: float) -> tuple[dict, int]:
    """8 planes x 2 paths, path 0 drops 20% of its data (the ev_drop experiment's fault):
    the result, and the data packets the requester sent on that path."""
    monkeypatch.setattr(sim, "EvConfig", functools.partial(EvConfig, flap_memory_s=flap_memory_s))
    args = ["--planes", "8", "--paths-per-plane", "2", "--size", "64M", "--path-loss", "0:0.2"]
    s = sim.Simulation(sim.config_from_args(sim.build_parser().parse_args(args)))
    r = s.run()
    evs = s.pairs[0][0].evs
    return r, sum(evs.tx_packets[k] for k in range(len(evs.ev_values)) if evs.path_of[k] == 0)


def test_flap_damping_keeps_a_lossy_path_out(monkeypatch):
    """Without damping, the lossy path's EVs answer two probes, come back within RTTs and
    lose again; with it (the default) they stay out and the path carries far less."""
    damped, on_path = _lossy_path_run(monkeypatch, 1.0)
    plain, on_path_plain = _lossy_path_run(monkeypatch, 0.0)
    assert damped["verified"] and plain["verified"]
    assert damped["path_loss"] == [[0, 0.2]]
    assert on_path < 0.5 * on_path_plain
    assert damped["retransmissions"] < 0.5 * plain["retransmissions"]
    assert damped["goodput_fraction"] > 0.9


def test_path_loss_is_checked():
    with pytest.raises(ValueError, match="does not exist"):
        sim.parse_path_loss("8:0.1", 8)
    with pytest.raises(ValueError, match="LOSS in 0..1"):
        sim.parse_path_loss("1:2", 8)
    assert sim.parse_path_loss("3:0.25", 8) == (3, 0.25)

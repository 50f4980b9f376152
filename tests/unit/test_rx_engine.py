"""The C receive engine (csrc/mrc_rxe.c) against its twin, the Python responder: the same
frames in, the same control frames, events, counters and memory out."""

from __future__ import annotations

import random
from dataclasses import asdict

import pytest

from mrcnic import wire
from mrcnic.sim.fabric import host_net
from mrcnic.transport.qp_types import QpAttributes, QpConfig
from mrcnic.transport.rx_engine import c_module as _c_module
from mrcnic.transport.rx_engine import engine_from_env
from mrcnic.verbs import Device, RemoteBuffer
from mrcnic.wire import layout, usid

needs_c = pytest.mark.skipif(_c_module() is None, reason="the C module is not built")
SHAPE = usid.ClosShape(planes=2, t0=2, t1=2, hosts_per_t0=2)


def _pair(engine: str, seed: int) -> tuple[Device, Device, object, object, object]:
    a = Device(host_net(SHAPE, 0), 100e6, seed=seed, engine="py")
    b = Device(host_net(SHAPE, 2), 100e6, seed=seed, engine=engine)
    cfg = QpConfig(base_rtt_s=1e-3, seed=seed, start_psn=(seed * 7919) & 0xFFFFFF)
    qa, qb = a.create_qp(cfg), b.create_qp(cfg)
    qa.connect(QpAttributes.from_json(qb.export()))
    qb.connect(QpAttributes.from_json(qa.export()))
    mr = b.register(bytearray(1 << 18))
    return a, b, qa, qb, mr


def _mutate(frame: bytes, rng: random.Random) -> list[bytes]:
    """What a fabric (or a forger) may do to a data frame."""
    r = rng.random()
    f = bytearray(frame)
    if r < 0.08:
        return []  # lost
    if r < 0.16:
        return [frame, frame]  # duplicated
    if r < 0.24:
        f[layout.OFF_TC_LO] |= 0x30  # CE
        return [bytes(f)]
    if r < 0.30:
        return [wire.trim_frame(frame, lasthop=rng.random() < 0.5)]
    if r < 0.34:
        f[-10] ^= 0x40  # a payload bit: the ICRC fails
        return [bytes(f)]
    if r < 0.37:
        f[layout.OFF_SRC + 15] ^= 1  # another host
        return [bytes(f)]
    if r < 0.40:
        return [frame[: rng.randrange(20, len(frame))]]  # cut short
    return [frame]


def _run(engine: str, seed: int) -> dict:
    rng = random.Random(seed)
    a, b, qa, qb, mr = _pair(engine, seed)
    rb = RemoteBuffer.of(mr)
    if rng.random() < 0.3:
        qa.post_write(99, b"y" * 64, RemoteBuffer(rb.va + 7, rb.rkey ^ 1, 64))  # bad R_Key
    for i in range(12):
        n = rng.choice([100, 4096, 9000, 20000])
        off = rng.randrange(0, (1 << 18) - n)
        imm = rng.randrange(1 << 32) if rng.random() < 0.4 else None
        data = bytes(rng.randrange(256) for _ in range(64)) * (n // 64) + b"x" * (n % 64)
        qa.post_write(i, data, RemoteBuffer(rb.va + off, rb.rkey, n), imm=imm)
    t = 1.0
    out: list = []
    frames = [f for _p, f in a.frames_to_send(t)]
    pending: list[bytes] = []
    for f in frames:
        pending += _mutate(f, rng)
    rng.shuffle(pending)  # sprayed: any order
    for f in pending:
        t += 1e-5
        b.receive_frame(f, t)
        out.append([bytes(x) for _p, x in b.control_frames_to_send()])
        if rng.random() < 0.2:
            t += 2e-3  # the delayed ACK fires
            b.handle_timer(t)
            out.append([bytes(x) for _p, x in b.control_frames_to_send()])
    return {
        "ctrl": out,
        "events": [repr(e) for e in qb.poll_events()] + [repr(e) for e in qb.poll_recv()],
        "stats": asdict(qb.core.stats),
        "memory": bytes(mr.buffer),
        "placed": mr.bytes_placed,
        "timer": qb.core.get_timer(),
    }


@needs_c
@pytest.mark.parametrize("seed", range(40))
def test_c_engine_matches_the_python_responder(seed: int) -> None:
    c, py = _run("c", seed), _run("py", seed)
    assert c["stats"] == py["stats"]
    assert c["events"] == py["events"]
    assert c["memory"] == py["memory"] and c["placed"] == py["placed"]
    assert c["ctrl"] == py["ctrl"]
    assert c["timer"] == py["timer"]


@needs_c
def test_the_parity_cases_reach_every_path() -> None:
    """The 40 cases above are not vacuous: between them they take every branch."""
    tot: dict[str, int] = {}
    events = 0
    for seed in range(40):
        r = _run("c", seed)
        for k, v in r["stats"].items():
            tot[k] = tot.get(k, 0) + v
        events += len(r["events"])
    for k in ("rx_duplicates", "rx_trimmed", "rx_ecn_marked", "tx_nacks", "rx_malformed",
              "rx_foreign", "rx_refused", "tx_sacks"):  # fmt: skip
        assert tot[k] > 0, k
    assert events > 0


@needs_c
def test_the_engines_are_really_different_code() -> None:
    _a, bc, _qa, qbc, _mr = _pair("c", 1)
    _a, bp, _qa, qbp, _mr = _pair("py", 1)
    assert qbc.core._rxe is not None and qbp.core._rxe is None
    assert bc.engine_name == "c" and bp.engine_name == "py"


def test_engine_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MRC_NIC_ENGINE", "py")
    assert engine_from_env() == "py"
    monkeypatch.setenv("MRC_NIC_ENGINE", "fast")
    with pytest.raises(ValueError, match="not an engine"):
        engine_from_env()
    with pytest.raises(ValueError, match="not an engine"):
        Device(host_net(SHAPE, 0), 100e6, engine="fast")

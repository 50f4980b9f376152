"""UET NSCC in C (csrc/mrc_nscc.c) against its twin, cc.py's UetNscc: the same inputs leave
both with the same state, every attribute to the bit, after every input; and the C send
engine runs it (not a subclass, which keeps every call in Python)."""

from __future__ import annotations

import math
import random

import pytest

from mrcnic.transport.cc import AckSample, CcParams, UetNscc
from mrcnic.transport.nscc_c import CNscc, runs_in_c
from mrcnic.transport.rx_engine import c_module
from tests.nscc_state import nscc_state

needs_c = pytest.mark.skipif(c_module() is None, reason="the C module is not built")


def _params(rng: random.Random) -> tuple[CcParams, dict]:
    planes = rng.choice([1, 2, 4, 8, 16])
    rate_bps, base_rtt_s = rng.choice([(25e6, 3e-3), (100e6, 1e-3), (800e6, 1e-3), (400e9, 20e-6)])
    p = CcParams(
        mtu_bytes=rng.choice([1024, 4096]),
        line_rate_bps=rate_bps,
        base_rtt_s=base_rtt_s,
        planes=planes,
        equal_shares=rng.random() < 0.7,
    )
    options = rng.choice([{}, {"disable_qa": True}, {"delay_md": False},
                          {"max_cwnd": 64 * 4096.0}, {"plane_aware": False}])  # fmt: skip
    return p, options


GRID_BASE_S = 2.0**-10  # a base RTT whose multiples by eighths are exact: see _drive's grid


def _drive(seed: int, steps: int = 600, grid: bool = False) -> None:
    """Random inputs into both; with ``grid``, times and RTTs on a grid of exact binary
    fractions of the base RTT, so that a delay equals the target, an ACK lands on an epoch's
    or a window's end, and planes tie, exactly (each comparison's boundary is tested)."""
    ffi = c_module().ffi
    lib = c_module().lib
    rng = random.Random(seed)
    p, options = _params(rng)
    if grid:
        p = CcParams(mtu_bytes=4096, line_rate_bps=2.0**27, base_rtt_s=GRID_BASE_S,
                     planes=p.planes, equal_shares=p.equal_shares)  # fmt: skip
        options = {k: v for k, v in options.items() if k != "max_cwnd"}
    py = UetNscc(p, **options)
    twin = UetNscc(p, **options)
    c = CNscc(ffi, twin)
    assert nscc_state(twin) == nscc_state(py)
    base = p.base_rtt_s
    now = 1.0
    slow_plane = rng.randrange(p.planes)
    for step in range(steps):
        steps_s = (
            [0.0, base / 8, base / 4, base, 2 * base]
            if grid
            else [0.0, base / 50, base / 4, base, 5 * base]
        )
        now += rng.choice(steps_s)
        r = rng.random()
        if r < 0.8:
            plane = rng.choice([-1, rng.randrange(p.planes), rng.randrange(p.planes)])
            if rng.random() < 0.1:
                rtt = None
            elif grid:  # delays of whole eighths of the base RTT: the target is six of them
                rtt = base + rng.randrange(0, 40 if plane == slow_plane else 12) * base / 8
            else:
                q = rng.expovariate(1 / base) * (4 if plane == slow_plane else 1)
                rtt = base * rng.uniform(0.6, 1.05) + q
            acked = rng.choice([0, p.mtu_bytes, 4 * p.mtu_bytes, rng.randrange(1, 70000)])
            ecn = rng.random() < 0.25
            py.on_ack(AckSample(acked, rtt, ecn, now, plane=plane))
            lib.mrc_nscc_on_ack(c.n, acked, rtt is not None, rtt or 0.0, ecn, plane, now)
        elif r < 0.9:
            last_hop = rng.random() < 0.5
            py.on_trim(last_hop, now)
            lib.mrc_nscc_on_trim(c.n, last_hop, now)
        elif r < 0.95:
            py.on_timeout(now)
            lib.mrc_nscc_on_timeout(c.n, now)
        else:
            pen = rng.choice([0, 1, 64, 127, 200])
            py.on_rcv_penalty(pen, now)
            lib.mrc_nscc_on_rcv_penalty(c.n, pen, now)
        c.pull()
        a, b = nscc_state(py), nscc_state(twin)
        assert a == b, f"seed {seed} step {step}: " + ", ".join(
            f"{k} py={a[k]} c={b[k]}" for k in a if a[k] != b[k]
        )


@needs_c
@pytest.mark.parametrize("seed", range(60))
def test_c_nscc_holds_the_twins_state_bit_for_bit(seed: int) -> None:
    _drive(seed)


@needs_c
@pytest.mark.parametrize("seed", range(60))
def test_c_nscc_matches_the_twin_on_every_boundary(seed: int) -> None:
    _drive(seed, grid=True)


@needs_c
def test_the_cases_reach_every_branch() -> None:
    """The inputs above reach what they are meant to test: every kind of decrease, quick
    adapt, fast increase, the plane mode engaging and releasing."""
    totals: dict[str, int] = {}
    ffi = c_module().ffi
    for seed in range(60):
        rng = random.Random(seed)
        p, options = _params(rng)
        a = UetNscc(p, **options)
        c = CNscc(ffi, a)
        lib = c_module().lib
        now, base = 1.0, p.base_rtt_s
        slow_plane = rng.randrange(p.planes)
        for _ in range(600):
            now += rng.choice([0.0, base / 50, base / 4, base, 5 * base])
            plane = rng.randrange(p.planes)
            q = rng.expovariate(1 / base) * (4 if plane == slow_plane else 1)
            lib.mrc_nscc_on_ack(c.n, p.mtu_bytes, True, base + q, rng.random() < 0.25, plane, now)
            if rng.random() < 0.05:
                lib.mrc_nscc_on_trim(c.n, 0, now)
        c.pull()
        for k in ("fast_increases", "ecn_decreases", "delay_decreases", "quick_adapts",
                  "plane_engagements"):  # fmt: skip
            totals[k] = totals.get(k, 0) + getattr(a, k)
    assert all(v > 0 for v in totals.values()), totals


def test_only_uet_nscc_itself_runs_in_c() -> None:
    p = CcParams(mtu_bytes=4096, line_rate_bps=100e6, base_rtt_s=1e-3)

    class Mine(UetNscc):
        pass

    assert runs_in_c(UetNscc(p))
    assert not runs_in_c(Mine(p))


@needs_c
def test_more_planes_than_c_holds_is_refused() -> None:
    p = CcParams(mtu_bytes=4096, line_rate_bps=100e6, base_rtt_s=1e-3, planes=17,
                 equal_shares=True)  # fmt: skip
    with pytest.raises(ValueError, match="at most 16 planes"):
        CNscc(c_module().ffi, UetNscc(p))
    assert math.isfinite(UetNscc(p).cwnd_bytes)


@needs_c
def test_the_c_engine_runs_uet_nscc_and_the_object_follows() -> None:
    """A QP of the default algorithm on the C engine: NSCC runs in C, and after a write the
    Python object reads what C holds (its RTT samples, its window, its quick-adapt window)."""
    from mrcnic.sim.fabric import host_net
    from mrcnic.transport.qp_types import QpAttributes, QpConfig
    from mrcnic.verbs import Device, RemoteBuffer
    from mrcnic.wire import usid

    shape = usid.ClosShape(planes=2, t0=2, t1=2, hosts_per_t0=2)
    a = Device(host_net(shape, 0), 100e6, seed=1, engine="c")
    b = Device(host_net(shape, 2), 100e6, seed=1, engine="py")
    cfg = QpConfig(base_rtt_s=1e-3)
    qa, qb = a.create_qp(cfg), b.create_qp(cfg)
    qa.connect(QpAttributes.from_json(qb.export()))
    qb.connect(QpAttributes.from_json(qa.export()))
    ncc = qa.core._txe._ncc
    assert ncc is not None and ncc.algorithm is qa.core.cc
    rb = RemoteBuffer.of(b.register(bytearray(1 << 20)))
    qa.post_write(1, b"x" * (1 << 20), rb)
    assert qa.core.cc._rtt_min_cur == math.inf  # (no RTT sample yet)
    t = 1.0
    for _ in range(400):
        t += 2e-4
        for _p, f in a.frames_to_send(t):
            b.receive_frame(bytes(f), t + 1e-4)
        for _p, f in b.frames_to_send(t + 1e-4):
            a.receive_frame(bytes(f), t + 2e-4)
        if qa.core.idle:
            break
    assert qa.core.idle
    assert ncc.n.gen > 0
    cc = qa.core.cc
    assert cc._rtt_min_cur == ncc.n.rtt_min_cur < math.inf  # sampled in C, read in Python
    assert cc.cwnd_bytes == ncc.n.cwnd_bytes and cc._win_end_s == ncc.n.win_end_s

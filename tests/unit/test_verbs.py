"""The user API over the simulated fabric: exchange records, write, poll, await, errors."""

from __future__ import annotations

import asyncio

import pytest

from mrcnic.sim.fabric import FabricSpec
from mrcnic.transport.qp_types import PeerPortStatus, QpAttributes, QpStateError
from mrcnic.verbs import RemoteBuffer, SimNetwork, WcStatus


def connected(spec: FabricSpec | None = None):
    net = SimNetwork(spec)
    a, b = net.devices
    qa, qb = a.create_qp(), b.create_qp()
    qa.connect(qb.export())
    qb.connect(QpAttributes.from_json(qa.export()))
    return net, a, b, qa, qb


def test_remote_buffer_record_roundtrip_and_validation():
    rb = RemoteBuffer(0x7F0000001000, 0xDEADBEEF, 4096)
    assert RemoteBuffer.from_json(rb.to_json()) == rb
    for bad in ("{}", '{"va": -1, "rkey": 1, "length": 1}', "[1,2]"):
        with pytest.raises(ValueError):
            RemoteBuffer.from_json(bad)


def test_bidirectional_writes_and_immediates():
    net, a, b, qa, qb = connected()
    buf_a, buf_b = bytearray(70_000), bytearray(90_000)
    ra, rb = RemoteBuffer.of(a.register(buf_a)), RemoteBuffer.of(b.register(buf_b))
    qa.post_write(1, b"\x01" * 90_000, rb, imm=11)
    qb.post_write(2, b"\x02" * 70_000, ra, imm=22)
    got: dict[str, list] = {"a": [], "b": [], "ia": [], "ib": []}

    def done() -> bool:
        got["a"] += qa.poll_cq()
        got["b"] += qb.poll_cq()
        got["ia"] += qa.poll_recv()
        got["ib"] += qb.poll_recv()
        return all(got.values())

    net.run_until(done)
    assert [w.status for w in got["a"] + got["b"]] == [WcStatus.SUCCESS] * 2
    assert [i.imm for i in got["ib"]] == [11] and [i.imm for i in got["ia"]] == [22]
    assert buf_b == b"\x01" * 90_000 and buf_a == b"\x02" * 70_000
    assert qa.stats().tx_data_packets == 22 and qa.ev_states()["GOOD"] == len(qa.ev_stats())


def test_post_checks_the_remote_buffer_bounds_locally():
    net, a, b, qa, qb = connected()
    rb = RemoteBuffer.of(b.register(bytearray(100)))
    with pytest.raises(ValueError, match="overflows"):
        qa.post_write(1, b"x" * 50, rb, offset=60)
    fresh = a.create_qp()
    with pytest.raises(QpStateError):
        fresh.post_write(1, b"x", rb)


def test_await_completion_with_asyncio():
    net, a, b, qa, qb = connected()
    rb = RemoteBuffer.of(b.register(bytearray(10_000)))

    async def main():
        fut = qa.completion(5)
        qa.post_write(5, b"z" * 10_000, rb)
        net.run_until(lambda: (qa.poll_cq(0), fut.done())[1])
        return await fut

    wc = asyncio.run(main())
    assert wc.wr_id == 5 and wc.status is WcStatus.SUCCESS


def test_device_port_down_reaches_the_peer():
    net, a, b, qa, qb = connected()
    a.port_status(1, False, net.fabric.now)
    net.run_until(lambda: any(isinstance(e, PeerPortStatus) for e in qb.poll_events()), max_s=1.0)
    assert qb.core.evs.plane_down[1] and qa.core.evs.plane_down[1]


def test_rocev2_qp_has_no_per_ev_stats():
    net = SimNetwork(seed=3)
    qp = net.devices[0].create_qp(transport="rocev2")
    assert qp.ev_stats() == []


def test_unseeded_devices_do_not_share_qp_numbers():
    # Two NIC processes on one host see each other's frames and demultiplex by QP number.
    from mrcnic.verbs import Device

    net = SimNetwork(seed=5).devices[0].net
    bases = {Device(net).create_qp().qpn for _ in range(8)}
    assert len(bases) == 8
    assert all(0x10 <= q <= 0xFFFFFF for q in bases)

"""Stated resource limits: QPs per device, regions, writes outstanding per QP (both engines),
each refused with ResourceLimitError that names the limit and changes nothing; and the memory
a QP holds, in its stats."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mrcnic.transport.qp_types import MAX_OUTSTANDING_WRITES
from mrcnic.transport.rx_engine import c_module as _c_module
from mrcnic.verbs import DeviceLimits, RemoteBuffer, ResourceLimitError, SimNetwork

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import bench_qp_memory

ENGINES = [
    "py",
    pytest.param(
        "c", marks=pytest.mark.skipif(_c_module() is None, reason="the C module is not built")
    ),
]


def _pair(net: SimNetwork):
    a, b = net.devices
    qa, qb = a.create_qp(), b.create_qp()
    qa.connect(qb.export())
    qb.connect(qa.export())
    return qa, qb


def test_qps_and_regions_per_device():
    net = SimNetwork(seed=1)
    dev = net.devices[0]
    dev.limits = DeviceLimits(max_qps=2, max_regions=3)
    dev.create_qp()
    dev.create_qp()
    with pytest.raises(ResourceLimitError, match="2 QPs"):
        dev.create_qp()
    assert len(dev.qps) == 2
    for _ in range(3):
        dev.register(bytearray(64))
    with pytest.raises(ResourceLimitError, match="3 regions"):
        dev.register(bytearray(64))
    assert len(dev.memory) == 3
    with pytest.raises(ValueError, match="max_regions"):
        DeviceLimits(max_regions=10**6)


@pytest.mark.parametrize("engine", ENGINES)
def test_writes_outstanding_per_qp(engine, monkeypatch):
    monkeypatch.setenv("MRC_NIC_ENGINE", engine)
    net = SimNetwork(seed=2)
    qa, _qb = _pair(net)
    mr = net.devices[1].register(bytearray(4096))
    rb = RemoteBuffer.of(mr)
    one = b"x"
    for i in range(MAX_OUTSTANDING_WRITES):
        qa.post_write(i, one, rb)
    with pytest.raises(ResourceLimitError, match=f"{MAX_OUTSTANDING_WRITES} writes"):
        qa.post_write(-1, one, rb)
    done: list = []
    net.run_until(lambda: (done.extend(qa.poll_cq(4096)), len(done) >= 100)[1], max_s=5.0)
    qa.post_write(-2, one, rb)  # room again once completions were polled


@pytest.mark.parametrize("engine", ENGINES)
def test_a_qp_reports_the_memory_it_holds(engine, monkeypatch):
    monkeypatch.setenv("MRC_NIC_ENGINE", engine)
    qa, qb = _pair(SimNetwork(seed=3))
    n = qa.stats().state_bytes
    assert n >= qa.core.config.window_psns // 8 > 0
    if engine == "c":  # sized by what it uses: small at rest (docs/api.md)
        assert n <= 64 * 1024
    assert qb.stats().state_bytes > 0


@pytest.mark.skipif(_c_module() is None, reason="the C module is not built")
def test_a_c_engine_qp_grows_with_what_is_in_flight_and_shrinks_back(monkeypatch):
    """On a fabric whose bandwidth-delay product is thousands of packets, 40 writes of
    400 KiB: the QP's rings grow to hold what is in flight (the records past the first 16,
    the ring of writes past 16), every byte arrives, and at rest the QP holds what it held
    before it sent anything."""
    monkeypatch.setenv("MRC_NIC_ENGINE", "c")
    got = bench_qp_memory.under_load(writes=40, size=400 << 10)  # the benchmark's scenario
    rest = got["state_bytes_before"]
    assert rest <= 64 * 1024
    assert got["completed"] == got["succeeded"] == 40
    assert got["verified"]
    assert got["peak_psns_in_flight"] > 1000  # (the test is not vacuous: the rings had to grow)
    assert got["peak_state_bytes"] > 10 * rest
    # (about 300 bytes per PSN in flight)
    assert got["peak_state_bytes"] < 400 * got["peak_psns_in_flight"]
    assert got["state_bytes_after"] == rest

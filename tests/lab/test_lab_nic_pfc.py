"""A running NIC honours PFC on a real wire: while its link partner pauses the lossless
priority, the RoCEv2 baseline's lossless data stops leaving the port and MRC's does not; on
resume the write completes, verified."""

from __future__ import annotations

import asyncio
import contextlib
import time

import waiting as W

from lab.workloads.fuzz.wire import RATE_BPS, Wire, _device
from mrcnic.io.aio import AioNic
from mrcnic.io.aio import run as aio_run
from mrcnic.transport.qp_types import QpConfig
from mrcnic.verbs import RemoteBuffer
from mrcnic.wire.pfc import encode_pause, quanta_for

SIZE = 8 << 20


def test_a_pause_stops_only_the_lossless_class_on_a_real_wire():
    wire = Wire()
    try:
        res = aio_run(_scenario(wire))
    finally:
        wire.close()
    assert res["roce_verified"] and res["mrc_verified"], res
    assert res["roce_during_pause"] == 0, res
    assert res["mrc_during_pause"] > 20, res
    assert res["roce_after_resume"] > 20, res
    assert res["pfc"]["pause_rx"] >= 3 and 0.08 < res["pfc"]["paused_s"] < 0.3, res


async def _scenario(wire: Wire) -> dict:
    a, b = _device(0), _device(1)
    # an ACK timeout longer than the pause, as deployments set it: with the lab's default
    # (milliseconds) every retry runs out while paused and the QP fails, RETRY_EXCEEDED,
    # which is one of PFC's pathologies
    roce = QpConfig(cc_options=(("lossless", True), ("dcqcn", False), ("ack_timeout_s", 0.4)))
    ra, rb = a.create_qp(roce, "rocev2"), b.create_qp(roce, "rocev2")
    ma, mb = a.create_qp(), b.create_qp()
    for x, y in ((ra, rb), (ma, mb)):
        x.connect(y.export())
        y.connect(x.export())
    regions = [bytearray(SIZE), bytearray(SIZE)]
    targets = [RemoteBuffer.of(b.register(r)) for r in regions]
    data = [bytes([7]) * SIZE, bytes([9]) * SIZE]
    pauser = wire.raw_socket(1)  # h1's side: PFC frames go to h0's port
    mac = bytes.fromhex("026d72637a01")
    done = {"roce": [], "mrc": []}
    async with (
        AioNic(a, [wire.ifs[0]], netns=wire.ns[0]) as na,
        AioNic(b, [wire.ifs[1]], netns=wire.ns[1]),
    ):
        chunk = 256 << 10
        for k, off in enumerate(range(0, SIZE, chunk)):
            ra.post_write(k, memoryview(data[0])[off : off + chunk], targets[0], offset=off)
            ma.post_write(k, memoryview(data[1])[off : off + chunk], targets[1], offset=off)
        await W.wait_for_async(  # both flowing
            lambda: rb.stats().rx_data_packets > 0 and mb.stats().rx_data_packets > 0, 10,
            0.005, what="both writes flowing",
        )  # fmt: skip
        q = quanta_for(0.04, RATE_BPS)
        pauser.send(encode_pause(mac, {3: q}))
        await asyncio.sleep(0.01)  # what was on its way arrives: time itself
        r0, m0 = rb.stats().rx_data_packets, mb.stats().rx_data_packets
        t_end = time.monotonic() + 0.14
        while time.monotonic() < t_end:  # paused for 150 ms in all, refreshed every 10 ms
            pauser.send(encode_pause(mac, {3: q}))
            await asyncio.sleep(0.01)  # pacing the refreshes: waiting on time itself
        r1, m1 = rb.stats().rx_data_packets, mb.stats().rx_data_packets
        pauser.send(encode_pause(mac, {3: 0}))
        with contextlib.suppress(AssertionError):  # the test's assert says what failed
            await W.wait_for_async(lambda: rb.stats().rx_data_packets - r1 > 20, 10, 0.005,
                                   what="RoCEv2 flowing again")  # fmt: skip
        r2 = rb.stats().rx_data_packets

        def finished() -> bool:
            done["roce"] += ra.poll_cq(256)
            done["mrc"] += ma.poll_cq(256)
            n = SIZE // chunk
            return len(done["roce"]) == n and len(done["mrc"]) == n

        await na.wait_for(finished, 30)
        pfc = na.ports[0].stats()["pfc"]
    pauser.close()
    ok = {k: all(wc.status.name == "SUCCESS" for wc in v) for k, v in done.items()}
    statuses = {k: sorted({wc.status.name for wc in v}) for k, v in done.items()}
    return {
        "roce_during_pause": r1 - r0,
        "mrc_during_pause": m1 - m0,
        "roce_after_resume": r2 - r1,
        "roce_verified": ok["roce"] and bytes(regions[0]) == data[0],
        "mrc_verified": ok["mrc"] and bytes(regions[1]) == data[1],
        "pfc": pfc,
        "statuses": statuses,
        "completions": {k: len(v) for k, v in done.items()},
    }

"""mrc-switch on a real chain with slow ports: frames sent at once from the receive buffer
and frames queued behind them leave in order, paced at the link rate, ECN-marked above the
threshold, and every frame is accounted for."""

from __future__ import annotations

import select
import time

import pytest
import switch_helpers as H
import waiting as W

from mrcnic.io.batch import Sender

RATE_BPS = 20_000_000
FRAME_PAYLOAD = 1000
N = 240
BURST = 12 << 10
BUFFER = 32 << 10
THRESHOLD = 8 << 10


# the switch's event loops: C (mrc_sw_poll, the default) and its Python twin
LOOPS = {"c-loop": None, "python-loop": {"MRC_SWITCH_C_LOOP": "0"}}


@pytest.fixture(params=list(LOOPS))
def slow_chain(tmp_path, request):
    port = {
        "rate_mbit": RATE_BPS // 1_000_000,
        "buffer_bytes": BUFFER,
        "ecn_threshold_bytes": THRESHOLD,
        "burst_bytes": BURST,
    }
    c = H.build_chain(
        "switch", tmp_path, switch_args={"port": port}, switch_env=LOOPS[request.param]
    )
    try:
        st = H.read_stats(c)
        want = "one_call" if request.param == "python-loop" else "c_loop"
        assert st["fwd_path"] == want or st["io_backend"] == "python", st["fwd_path"]
        yield c
    finally:
        H.teardown(c)


def test_burst_is_sent_then_queued_in_order_paced_and_accounted(slow_chain):
    c = slow_chain
    tx = H.packet_socket(c.ns_s, c.ifname("hA"))
    rx = H.packet_socket(c.ns_r, c.ifname("hB"))
    H.drain_until_quiet(rx)
    dst = H.usid_addr(H.OWN, H.USID_B)
    frames = [  # big and small frames, so that a small one could overtake a queued big one
        H.ipv6_frame(dst, payload=bytes(FRAME_PAYLOAD if i % 3 else 60), flow=i + 1, ecn=2)
        for i in range(N)
    ]
    t0 = time.monotonic()
    sender = Sender()
    for i in range(0, N, 8):  # far above 20 Mbit/s, in several receive batches
        sender.send(tx, frames[i : i + 8])
        time.sleep(0.0005)  # pacing the sender into batches: waiting on time itself
    got: list[bytes] = []
    last = t0
    deadline = t0 + 10
    while time.monotonic() < deadline:
        batch = [f for f in H.drain(rx) if not H.is_chatter(f)]
        if batch:
            got += batch
            last = time.monotonic()
        elif got and time.monotonic() - last > 0.5:
            break
        select.select([rx], [], [], 0.05)
    st = H.fresh_stats(c)  # one more stats refresh (every 0.2 s)
    assert c.proc.poll() is None, H.switch_log(c)
    wb = st["ports"]["wB"]
    seq = [int.from_bytes(f[15:18], "big") & 0xFFFFF for f in got]
    assert seq == sorted(seq), "frames left out of order"
    assert len(got) == wb["tx_packets"] and 0 < len(got) < N
    assert wb["drops"]["queue_full"] == N - len(got)
    assert wb["max_queue_bytes"] > THRESHOLD
    # paced: nothing beyond the bucket's burst may leave faster than the link rate
    sent_bytes = sum(len(f) for f in got)
    assert last - t0 >= (sent_bytes - BURST) * 8 / RATE_BPS * 0.9
    # ECN: marks only once the queue held more than the threshold; counted once each
    ce = sum(1 for f in got if (f[15] >> 4) & 3 == 3)
    assert 0 < ce == wb["ecn_marks"] < len(got)
    assert st["totals"]["drops"]["internal"] == 0
    tx.close()
    rx.close()


@pytest.mark.parametrize("loop", list(LOOPS))
def test_link_down_does_not_spin(tmp_path, loop):
    c = H.build_chain("switch", tmp_path, switch_env=LOOPS[loop])
    try:
        H.nsrun(c.ns_w, "ip", "link", "set", c.ifname("wB"), "down")
        before = W.wait_for_json(c.stats_path, lambda st: not st["ports"]["wB"]["up"], 5,
                                 what="wB down in the stats")  # fmt: skip
        after = W.wait_for_json(  # 1.5 s of the switch's life with the port down
            c.stats_path, lambda st: st["uptime_s"] - before["uptime_s"] >= 1.5, 10,
            what="1.5 s more uptime",
        )  # fmt: skip
        cpu = lambda s: s["cpu_user_s"] + s["cpu_system_s"]  # noqa: E731
        # an unread socket error (EPOLLERR) would wake a level-triggered epoll forever
        assert cpu(after) - cpu(before) < 0.5 * (after["uptime_s"] - before["uptime_s"])
        assert not after["ports"]["wB"]["up"]
    finally:
        H.teardown(c)

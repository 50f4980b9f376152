"""The processes of ``make bench-nic`` (``bench/bench_nic.py``): what one NIC costs per frame.

Two namespaces joined by one veth, no switches. Each role runs in its own process inside its
namespace, so its CPU (``getrusage``: user + system) is its own; each prints one JSON line:

- ``raw-send`` / ``raw-recv``: the physical limit, in C (``csrc/mrc_raw.c``): one prepared MRC
  data frame sent over and over with ``sendmmsg``, and a TPACKET_V3 ring drained and counted;
- ``send`` / ``recv``: the NIC (``mrcnic.io.aio.AioNic`` over a :class:`mrcnic.verbs.Device`,
  the engine ``MRC_NIC_ENGINE`` selects) writing 4 KiB-payload packets to the other side's
  registered region, acknowledged by the coalescing rule, as in the lab.

The engine pair talks through stdin/stdout (QP attributes and the region go one way, the
sender's attributes the other), the orchestrator relaying the lines.

    python -m lab.workloads.bench.nic raw-send --ifname mrcnb-a0 --seconds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from lab.proc.cpu import process_cpu_s
from lab.workloads.bench.floor import raw_loops
from mrcnic.cliflags import rate_with_unit
from mrcnic.io.afpacket import open_rx_socket, open_tx_socket
from mrcnic.io.aio import AioNic, run
from mrcnic.transport.qp_types import NetConfig, PortAddr, QpAttributes, QpConfig
from mrcnic.verbs import Device, RemoteBuffer, WcStatus
from mrcnic.wire import usid

#: h0 under T0 0, h1 under T0 1, one plane: every EV of plane 0 is a path between them
SHAPE = usid.ClosShape(planes=1, t0=2, t1=1, hosts_per_t0=1)
MTU = 4096
REGION_BYTES = 16 << 20
MSG_BYTES = 1 << 20
DEPTH = 4
#: the NIC's port rate: far above what a process moves, so the pacer never limits
PORT_RATE_BPS = 20e9
#: the QPs' base RTT: the NIC's default (QpConfig.base_rtt_s), so the delayed ACK waits
#: 125 us (base RTT / 8), shorter than the lab's (its base RTT is milliseconds). Until
#: 2026-11-24 this was 200 us (a 25 us delay, shorter than the time between two receive
#: wake-ups): the timer then fired after nearly every batch, and each batch's last packets
#: got a SACK and a wake-up of their own. ``--base-rtt-us 200`` (config c_rtt200) keeps that
#: case measured.
BASE_RTT_S = QpConfig().base_rtt_s


def _emit(d: dict[str, Any]) -> None:
    print(json.dumps(d), flush=True)


def _device(host: int, mac: bytes, peer_mac: bytes, rate_bps: float = PORT_RATE_BPS) -> Device:
    net = NetConfig(SHAPE, host, (PortAddr(mac, peer_mac),))
    return Device(net, rate_bps)


def _qp_config(base_rtt_s: float = BASE_RTT_S) -> QpConfig:
    return QpConfig(mtu_bytes=MTU, base_rtt_s=base_rtt_s)


def data_frame(mac: bytes, peer_mac: bytes) -> bytes:
    """One real MRC data frame of a full MTU (what the NIC sends), for the raw sender."""
    a = _device(0, mac, peer_mac)
    b = _device(1, peer_mac, mac)
    qa, qb = a.create_qp(_qp_config()), b.create_qp(_qp_config())
    qa.connect(QpAttributes.from_json(qb.export()))
    qb.connect(QpAttributes.from_json(qa.export()))
    mr = b.register(bytearray(2 * MTU))
    qa.post_write(1, bytes(range(256)) * (2 * MTU // 256), RemoteBuffer.of(mr))
    frames = a.frames_to_send(0.0)
    return frames[0][1]


# --- raw ----------------------------------------------------------------------------------------


def _raw_run(fn_name: str, sock: Any, cfg_fields: dict[str, Any]) -> dict[str, Any]:
    """Run one of csrc/mrc_raw.c's loops on ``sock`` (closed after) and time its CPU."""
    r = raw_loops(fn_name, [sock], [cfg_fields])
    if r["failed"]:
        raise OSError(-r["failed"][0], os.strerror(-r["failed"][0]))
    keys = ("frames", "bytes", "cpu_s", "elapsed_s", "calls", "errors")
    return {k: r[k] for k in keys}


def raw_send(ifname: str, seconds: float, frame: bytes, batch: int = 64) -> dict[str, Any]:
    # the C core only here: a pure-Python build (MRC_PURE_PYTHON, no compiler) has none
    from mrcnic import _mrcfast

    buf = _mrcfast.ffi.new("uint8_t[]", frame)  # alive until the loop returns
    fields = {"frame": buf, "frame_len": len(frame), "batch": batch,
              "duration_ns": int(seconds * 1e9)}  # fmt: skip
    return {"role": "raw-send", **_raw_run("mrc_raw_send", open_tx_socket(ifname), fields)}


def raw_recv(ifname: str, seconds: float, ring: bool = False) -> dict[str, Any]:
    rx = open_rx_socket(ifname)
    fields = {"duration_ns": int(seconds * 1e9), "block_size": 1 << 20,
              "block_nr": 16 if ring else 0, "batch": 64, "slot_len": 9216}  # fmt: skip
    _emit({"role": "raw-recv", "ready": True})
    return {
        "role": "raw-recv",
        "mechanism": "tpacket_v3 ring" if ring else "recvmmsg, 64 per call",
        **_raw_run("mrc_raw_recv", rx, fields),
    }


# --- the NIC ------------------------------------------------------------------------------------


def _read_line() -> dict[str, Any]:
    line = sys.stdin.readline()
    if not line:
        raise SystemExit("bench-nic: the orchestrator went away")
    return json.loads(line)


async def engine_recv(
    ifname: str,
    mac: bytes,
    peer_mac: bytes,
    transport: str = "mrc",
    base_rtt_s: float = BASE_RTT_S,
    rate_bps: float = PORT_RATE_BPS,
) -> dict[str, Any]:
    """Serve one writer: export the QP and region, count what arrives until told to stop."""
    dev = _device(1, mac, peer_mac, rate_bps)
    qp = dev.create_qp(_qp_config(base_rtt_s), transport)
    mr = dev.register(bytearray(REGION_BYTES))
    _emit({"role": "recv", "qp": json.loads(qp.export()), "region": json.loads(
        RemoteBuffer.of(mr).to_json())})  # fmt: skip
    peer = _read_line()
    qp.connect(QpAttributes.from_json(json.dumps(peer["qp"])))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_reader(sys.stdin.fileno(), stop.set)
    first: list[float] = []
    st = qp.core.stats

    async with AioNic(dev, [ifname]) as nic:

        def progress(_now: float) -> None:
            if not first and st.rx_data_packets:
                first.extend((process_cpu_s(), float(st.rx_data_packets), time.monotonic()))

        nic.on_progress = progress
        await stop.wait()
        c1, n1, t1 = process_cpu_s(), st.rx_data_packets, time.monotonic()
        nic_stats = nic.stats()
    loop.remove_reader(sys.stdin.fileno())
    c0, n0, t0 = first or (c1, float(n1), t1)
    return {
        "role": "recv",
        "engine": getattr(dev, "engine_name", "py"),
        "frames": n1 - int(n0),
        "cpu_s": c1 - c0,
        "elapsed_s": t1 - t0,
        "transport": transport,
        "sacks": qp.core.stats.tx_sacks + getattr(qp.core.stats, "tx_acks", 0),
        "probes_sent": qp.core.stats.probes_sent,
        "ev_states": qp.ev_states(),
        "rx_wakeups": nic_stats["rx_wakeups"],
        "pumps": nic_stats["pumps"],
    }


async def engine_send(
    ifname: str,
    mac: bytes,
    peer_mac: bytes,
    seconds: float,
    transport: str = "mrc",
    base_rtt_s: float = BASE_RTT_S,
    rate_bps: float = PORT_RATE_BPS,
) -> dict[str, Any]:
    """Write MSG_BYTES messages, DEPTH in flight, for ``seconds``; count data frames sent."""
    dev = _device(0, mac, peer_mac, rate_bps)
    qp = dev.create_qp(_qp_config(base_rtt_s), transport)
    _emit({"role": "send", "qp": json.loads(qp.export())})
    peer = _read_line()
    qp.connect(QpAttributes.from_json(json.dumps(peer["qp"])))
    rb = RemoteBuffer.from_json(json.dumps(peer["region"]))
    src = os.urandom(MSG_BYTES)
    nslots = max(1, rb.length // MSG_BYTES)
    st = qp.core.stats
    posted = done = 0

    def post(now: float) -> None:
        nonlocal posted, done
        for wc in qp.poll_cq():
            done += 1
            if wc.status is not WcStatus.SUCCESS:
                raise RuntimeError(f"bench-nic: write failed: {wc}")
        while posted - done < DEPTH and time.monotonic() < end:
            off = (posted % nslots) * MSG_BYTES
            qp.post_write(posted, src, RemoteBuffer(rb.va + off, rb.rkey, MSG_BYTES))
            posted += 1

    async with AioNic(dev, [ifname]) as nic:
        end = time.monotonic() + seconds
        # every data frame handed over, new or resent (the receiver counts every data frame it
        # gets): what the CPU paid for; a go-back-N sender resends a good share
        c0, n0, t0 = process_cpu_s(), st.tx_data_packets + st.retransmissions, time.monotonic()
        nic.on_progress = post
        post(t0)
        nic.kick()
        await nic.wait_for(lambda: time.monotonic() >= end, timeout_s=seconds + 5)
        c1, n1, t1 = process_cpu_s(), st.tx_data_packets + st.retransmissions, time.monotonic()
        nic.on_progress = None
        await nic.wait_for(lambda: posted == done or qp.core.state.name == "ERROR", 5)
        nic_stats = nic.stats()
    return {
        "role": "send",
        "engine": getattr(dev, "engine_name", "py"),
        "frames": n1 - n0,
        "cpu_s": c1 - c0,
        "elapsed_s": t1 - t0,
        "retransmissions": st.retransmissions,
        "probes_sent": st.probes_sent,
        "timeouts": st.timeouts,
        "spurious_timeouts": getattr(st, "spurious_timeouts", None),  # (MRC's QP counts them)
        "transport": transport,
        "sacks_received": st.rx_sacks + getattr(st, "rx_acks", 0),
        "ev_states": qp.ev_states(),
        "completed": done,
        "rx_wakeups": nic_stats["rx_wakeups"],
        "pumps": nic_stats["pumps"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lab.workloads.bench.nic", description=__doc__.split("\n")[0]
    )
    ap.add_argument("role", choices=["raw-send", "raw-recv", "send", "recv"])
    ap.add_argument("--ifname", required=True)
    ap.add_argument("--mac", default="02:00:00:00:00:01")
    ap.add_argument("--peer-mac", default="02:00:00:00:00:02")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--ring", action="store_true", help="raw-recv: a TPACKET_V3 ring")
    ap.add_argument(
        "--base-rtt-us", type=float, default=BASE_RTT_S * 1e6,
        help=f"send/recv: the QPs' base RTT, us (the delayed ACK waits 1/8 of it) "
        f"[{BASE_RTT_S * 1e6:g}]",
    )  # fmt: skip
    ap.add_argument(
        "--rate", type=rate_with_unit, default=PORT_RATE_BPS,
        help="send/recv: the NIC port's rate, which its pacer holds (e.g. 400Mbit) [20G: "
        "far above what a process moves]",
    )  # fmt: skip
    ap.add_argument("--transport", choices=["mrc", "rocev2"], default="mrc",
                    help="send/recv: the QP's transport (rocev2: the baseline's)")  # fmt: skip
    a = ap.parse_args(argv)
    mac, peer = bytes.fromhex(a.mac.replace(":", "")), bytes.fromhex(a.peer_mac.replace(":", ""))
    if a.role == "raw-send":
        out = raw_send(a.ifname, a.seconds, data_frame(mac, peer))
    elif a.role == "raw-recv":
        out = raw_recv(a.ifname, a.seconds, a.ring)
    elif a.role == "recv":
        out = run(engine_recv(a.ifname, mac, peer, a.transport, a.base_rtt_us * 1e-6, a.rate))
    else:
        out = run(engine_send(a.ifname, mac, peer, a.seconds, a.transport, a.base_rtt_us * 1e-6,
                              a.rate))  # fmt: skip
    if a.role in ("send", "recv"):
        out["base_rtt_s"] = a.base_rtt_us * 1e-6
        out["rate_bps"] = a.rate
    _emit(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

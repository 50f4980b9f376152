"""A capture read with scapy: every MRC packet dissected by the project's scapy layers
(mrcnic/wire/scapy_layers.py), counted by opcode, with the paths (IPv6 flow labels: the
entropy value's low 20 bits) the data packets took and the SACKs' cumulative ACKs.

    sudo .venv/bin/mrc-lab capture h0 -w /tmp/h0.pcapng --duration 2s   # while traffic runs
    .venv/bin/python examples/read_capture.py /tmp/h0.pcapng

Without a file it captures a write of the simulator itself (the frames the NICs send, written
as a pcap), so it runs anywhere:

    .venv/bin/python examples/read_capture.py
"""

import sys
import tempfile
from collections import Counter
from pathlib import Path

from scapy.all import IPv6, rdpcap, wrpcap
from scapy.layers.l2 import Ether

from mrcnic.wire import scapy_layers as mrc


def simulated_capture(path: Path) -> None:
    """A 64 KiB write between two simulated NICs, every frame either NIC sent."""
    from mrcnic.verbs import QpAttributes, RemoteBuffer, SimNetwork

    net = SimNetwork(seed=3)
    frames: list[bytes] = []
    for dev in net.devices:  # tap what each NIC hands to the fabric
        send = dev.frames_to_send

        def tap(now_s: float, send=send) -> list:
            out = send(now_s)
            frames.extend(bytes(f) for _port, f in out)
            return out

        dev.frames_to_send = tap
    client, server = net.devices
    mr = server.register(bytearray(64 << 10))
    cqp, sqp = client.create_qp(), server.create_qp()
    cqp.connect(QpAttributes.from_json(sqp.export()))
    sqp.connect(QpAttributes.from_json(cqp.export()))
    cqp.post_write(1, bytes(64 << 10), RemoteBuffer.of(mr))
    done: list = []
    net.run_until(lambda: done.extend(cqp.poll_cq()) or bool(done))
    wrpcap(str(path), [Ether(f) for f in frames])


def summary(path: Path) -> None:
    packets = rdpcap(str(path))
    kinds: Counter[str] = Counter()
    labels: Counter[int] = Counter()
    acks = []
    for p in packets:
        bth = p.getlayer(mrc.MRC_BTH)
        if bth is None:
            kinds["not MRC"] += 1
            continue
        kinds[bth.sprintf("%opcode%")] += 1
        if p.haslayer(mrc.MRC_RETH) and p.haslayer(IPv6):
            labels[p[IPv6].fl] += 1
        sack = p.getlayer(mrc.MRC_SACK)
        if sack is not None:
            acks.append(sack.cack_psn)
    print(f"{path}: {len(packets)} packets")
    for kind, n in kinds.most_common():
        print(f"  {n:6d}  {kind}")
    if labels:
        print(f"  data packets over {len(labels)} flow labels (paths); the busiest carried "
              f"{labels.most_common(1)[0][1]}")  # fmt: skip
    if acks:
        print(f"  cumulative ACK PSN from {acks[0]:#x} to {acks[-1]:#x} over {len(acks)} SACKs")
    first = next((p for p in packets if p.haslayer(mrc.MRC_RETH)), None)
    if first is not None:
        print("the first data packet, header by header:")
        layer = first[mrc.MRC_BTH]
        while layer and not isinstance(layer, mrc.MRC_Payload):
            fields = ", ".join(f"{k}={layer.sprintf(f'%{k}%')}" for k in layer.fields)
            print(f"  {layer.name}: {fields}")
            layer = layer.payload
        print(
            f"  {len(first[mrc.MRC_Payload].load)} bytes of payload, "
            f"ICRC {first[mrc.MRC_Payload].icrc:#010x}"
        )


def main(argv: list[str]) -> int:
    if argv:
        summary(Path(argv[0]))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "simulated-write.pcap"
        simulated_capture(path)
        summary(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

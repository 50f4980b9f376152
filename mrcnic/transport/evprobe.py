"""Connectionless EV probes: EP_REQUEST to the reserved QP 0x2, kind EV_PROBE.

Any MRC host answers one, with or without a QP to the prober: the answer (EP_RESPONSE to QP
0x2, echoing ``ident``, ``ev`` and ``ts_ns``) goes back on the probed EV's own path, so one
probe tests the path both ways. A QP uses them to refresh its reverse EV set (the EVs its
ACK/SACK/NACK traffic takes), which carries no data and so gets no other evidence; the
answer's ``ident`` names the prober's QP so its device can hand the answer back.

Both directions are built here from the wire codec (probes are rare: no hot path), and
:func:`answer_ev_probe` is what a device (``mrcnic.verbs.Device``) and the simulators call
for every frame addressed to QP 0x2.
"""

from __future__ import annotations

from mrcnic import wire
from mrcnic.transport.qp_types import NetConfig
from mrcnic.wire import layout, usid

EV_PROBE = int(layout.EndpointKind.EV_PROBE)
_EP_REQ = int(layout.Opcode.EP_REQUEST)
_EP_RESP = int(layout.Opcode.EP_RESPONSE)


def _frame(net: NetConfig, peer_host: int, op: int, ep: wire.EndpointMsg) -> tuple[int, bytes]:
    """An endpoint message to QP 0x2 of ``peer_host`` on the path of ``ep.ev``."""
    shape = net.shape
    plane = ep.ev % shape.planes
    dest = usid.DestTemplate(shape, net.host, peer_host)
    port = net.ports[plane]
    mrc = wire.encode_mrc(
        wire.MrcPacket(bth=wire.BTH(opcode=op, dest_qp=layout.EV_PROBE_QPN, psn=0), endpoint=ep)
    )
    frame = wire.build_frame(
        eth_src=port.mac,
        eth_dst=port.peer_mac,
        ip_src=usid.host_address(shape, net.host, plane),
        ip_dst=dest.address(ep.ev),
        final_dst=dest.final(ep.ev),
        ev=ep.ev,
        mrc=mrc,
        dscp=int(layout.Dscp.CONTROL),
    )
    return plane, frame


def ev_probe(net: NetConfig, peer_host: int, ev: int, ident: int, ts_ns: int) -> tuple[int, bytes]:
    """``(port, frame)``: a probe of ``ev``'s path to ``peer_host``; ``ident`` comes back."""
    return _frame(net, peer_host, _EP_REQ, wire.EndpointMsg(EV_PROBE, ident, ev, 0, ts_ns))


def answer_ev_probe(
    frame: bytes | bytearray | memoryview, net: NetConfig
) -> tuple[int, bytes] | None:
    """The answer to an EV probe addressed to this host, or None when the frame is not a
    well-formed EV probe from a host of this fabric (dropped: a probe is never fatal)."""
    try:
        f = wire.parse_frame(frame)
        pkt = f.mrc
        ep = pkt.endpoint if pkt is not None else None
        if pkt is None or pkt.bth.opcode != _EP_REQ or ep is None or ep.kind != EV_PROBE:
            return None
        if f.ev != ep.ev:
            return None  # the probe travels on the EV it tests
        prober, plane = usid.host_of_address(net.shape, f.ip6.src)
    except (wire.WireError, usid.UsidError):
        return None
    if prober == net.host or ep.ev % net.shape.planes != plane:
        return None  # the EV must name the plane the probe came in on
    return _frame(net, prober, _EP_RESP, wire.EndpointMsg(EV_PROBE, ep.ident, ep.ev, 0, ep.ts_ns))


def read_ev_probe_answer(frame: bytes | bytearray | memoryview) -> wire.EndpointMsg | None:
    """The echoed fields of an EV probe's answer (to route it by ``ident``), else None."""
    try:
        pkt = wire.parse_frame(frame).mrc
    except wire.WireError:
        return None
    ep = pkt.endpoint if pkt is not None else None
    if pkt is None or pkt.bth.opcode != _EP_RESP or ep is None or ep.kind != EV_PROBE:
        return None
    return ep


class EvProbeDesk:
    """QP 0x2 of one host, sans-I/O: answers every EV probe addressed to the host and hands
    each answer to the QP its ``ident`` names (``lookup(qpn)``, which has
    ``on_ev_probe_answer``). It has the endpoint surface the I/O layers drive
    (``receive_frame``, ``frames_to_send``, ``get_timer``...), with no timer and no events."""

    def __init__(self, net: NetConfig, lookup) -> None:
        self.net = net
        self.lookup = lookup
        self._out: list[tuple[int, bytes]] = []
        self.answered = 0  # probes answered
        self.routed = 0  # answers handed to a local QP
        self.dropped = 0  # anything else sent to QP 0x2

    def receive_frame(self, frame: bytes | bytearray | memoryview, now_s: float) -> None:
        answer = answer_ev_probe(frame, self.net)
        if answer is not None:
            self._out.append(answer)
            self.answered += 1
            return
        ep = read_ev_probe_answer(frame)
        qp = self.lookup(ep.ident) if ep is not None else None
        if ep is not None and qp is not None and hasattr(qp, "on_ev_probe_answer"):
            qp.on_ev_probe_answer(ep.ev, ep.ts_ns, now_s)
            self.routed += 1
            return
        self.dropped += 1

    def control_frames_to_send(self) -> list[tuple[int, bytes]]:
        out = self._out
        self._out = []
        return out

    def frames_to_send(self, now_s: float) -> list[tuple[int, bytes]]:
        return self.control_frames_to_send()

    def get_timer(self) -> float | None:
        return None

    def handle_timer(self, now_s: float) -> None:
        pass

    def next_event(self) -> None:
        return None

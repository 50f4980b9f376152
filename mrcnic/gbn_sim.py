"""A simple go-back-N, single-path baseline with the QueuePair interface, for ``mrc-sim``.

What RoCEv2 NICs do, reduced to its essentials: one EV (so one path) per QP, RC opcodes
(RETH only on the first packet of a message), NO_TRIM data (switches drop instead of
trimming), in-order acceptance only: the responder discards anything past a gap and sends one
NAK (PSN sequence error) per gap; the requester goes back to the NAK'd PSN and resends
everything from there; a timeout goes back to the oldest unacknowledged PSN; ``retry_limit``
timeouts without progress end in a QP error.  A fixed window of 1.5 x the path's BDP, no
congestion control, the same RTO estimator as MRC.  The full RoCEv2 transport for real ports
is ``mrcnic/rocev2.py`` (end-to-end issue); this one only has to be honest in the simulator.
"""

from __future__ import annotations

import struct
import zlib
from collections import deque
from dataclasses import dataclass

from mrcnic import fast, usid, wire
from mrcnic.memory import MemoryTable, PlaceStatus
from mrcnic.qp import (
    ImmReceived,
    NetConfig,
    QpAttributes,
    QpErrorEvent,
    QpStats,
    WcStatus,
    WriteCompleted,
)

PSN_MASK = 0xFFFFFF
_HALF = 1 << 23
_RC_FIRST, _RC_MIDDLE, _RC_LAST, _RC_LAST_IMM, _RC_ONLY, _RC_ONLY_IMM = range(0x06, 0x0C)
_RC_ACK = 0x11
_BTH = struct.Struct(">BBHII")
_RETH = struct.Struct(">QII")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_SYN_ACK, _SYN_NAK_SEQ, _SYN_NAK_ACCESS = 0x00, 0x60, 0x62


@dataclass(frozen=True, slots=True)
class GbnConfig:
    mtu_bytes: int = 4096
    base_rtt_s: float = 1e-3
    window_bdp: float = 1.5
    ack_every: int = 4
    retry_limit: int = 7
    min_rto_s: float | None = None  # default 2 x base RTT, as MRC
    max_rto_s: float = 1.0
    seed: int = 1


class _Msg:
    __slots__ = ("wr_id", "buf", "va", "rkey", "imm", "first_psn", "last_psn")

    def __init__(self, wr_id, buf, va, rkey, imm) -> None:  # noqa: ANN001
        self.wr_id, self.buf, self.va, self.rkey, self.imm = wr_id, buf, va, rkey, imm
        self.first_psn = self.last_psn = -1


class GbnQueuePair:
    """Same inputs/outputs as :class:`mrcnic.qp.QueuePair` (the subset the simulator uses)."""

    def __init__(
        self,
        qpn: int,
        net: NetConfig,
        memory: MemoryTable,
        path_rate_bps: float,
        config: GbnConfig | None = None,
        plane: int = 0,
    ) -> None:
        cfg = config or GbnConfig()
        self.qpn, self.net, self.memory, self.config = qpn, net, memory, cfg
        self.plane = plane
        # One EV, chosen like an ECMP hash of the flow: fixed for the QP's life.
        planes = net.shape.planes
        h = zlib.crc32(struct.pack(">II", qpn, cfg.seed))
        self.ev = (h // planes) * planes + plane & 0xFFFFFFFF
        self.ev -= self.ev % planes
        self.ev += plane
        self.mtu = cfg.mtu_bytes
        # 1.5 x BDP plus the packets a coalescing responder may hold its ACK for
        bdp = path_rate_bps / 8 * cfg.base_rtt_s
        self.window_bytes = cfg.window_bdp * bdp + cfg.ack_every * self.mtu
        self.stats = QpStats()
        self.start_psn = (qpn * 7919 + cfg.seed) & PSN_MASK
        self.peer: QpAttributes | None = None
        self.error = False
        self._events: deque = deque()
        self._ctrl: list[tuple[int, bytes]] = []
        # requester
        self._pkts: deque[tuple[int, _Msg, int, int, int]] = deque()  # psn, msg, off, n, op
        self._sendq: deque[_Msg] = deque()
        self._msgs: deque[_Msg] = deque()
        self._seg_off = 0
        self.snd_una = self.snd_nxt = self.snd_max = self.start_psn
        self._retries = 0
        self._deadline: float | None = None
        self._srtt: float | None = None
        self._rttvar = 0.0
        self._min_rto = cfg.min_rto_s if cfg.min_rto_s is not None else 2 * cfg.base_rtt_s
        self._rto = max(self._min_rto, 3 * cfg.base_rtt_s)
        self._sent_at: dict[int, float] = {}
        # responder
        self.epsn = 0
        self._nak_sent = False
        self._unacked = 0
        self._rx_va = 0
        self._rx_rkey = 0
        self._rx_msn = 0
        self._prefix = b""

    # -- setup and API ------------------------------------------------------------------------

    def local_attributes(self) -> QpAttributes:
        return QpAttributes(self.qpn, self.net.host, self.start_psn, 1 << 16, 1 << 16, self.mtu)

    def connect(self, remote: QpAttributes) -> None:
        self.peer = remote
        self.epsn = remote.start_psn
        shape = self.net.shape
        dest = usid.DestTemplate(shape, self.net.host, remote.host)
        port = self.net.ports[self.plane]
        sport, flow = wire.ev_to_udp_flow(self.ev)
        self._src = usid.host_address(shape, self.net.host, self.plane)
        self._final = dest.final(self.ev)
        self._prefix = (
            port.peer_mac
            + port.mac
            + b"\x86\xdd"
            + struct.pack(">IHBB", 0x60000000 | flow, 0, 17, 64)
            + self._src
            + dest.address(self.ev)
            + struct.pack(">HHHH", sport, wire.MRC_UDP_PORT, 0, 0)
        )

    def post_write(
        self, wr_id: int, local, remote_va: int, rkey: int, imm: int | None = None
    ) -> None:  # noqa: ANN001
        self._sendq.append(_Msg(wr_id, memoryview(local), remote_va, rkey, imm))

    def port_status(self, port: int, up: bool, now_s: float) -> None:
        pass  # a single-path QP has nowhere else to go

    def ev_states(self) -> dict[str, int]:
        return {"GOOD": 1}

    def next_event(self):  # noqa: ANN201
        return self._events.popleft() if self._events else None

    def get_timer(self) -> float | None:
        return self._deadline

    # -- frames ---------------------------------------------------------------------------------

    def _frame(self, dscp: int, mrc: bytes) -> bytes:
        buf = bytearray(self._prefix + mrc)
        ulen = len(mrc) + 8
        struct.pack_into(">IH", buf, 14, 0x60000000 | dscp << 22 | (self.ev & 0xFFFF), ulen)
        _U16.pack_into(buf, 58, ulen)
        _U16.pack_into(buf, 60, fast.udp6_checksum(self._src, self._final, memoryview(buf)[54:]))
        return bytes(buf)

    def _mrc(self, op: int, psn: int, parts: bytes) -> bytes:
        body = _BTH.pack(op, 0, 0xFFFF, self.peer.qpn, psn) + parts
        return body + _U32.pack(zlib.crc32(body))

    def _segment(self) -> bool:
        """Cut the next packet off the send queue into the packet list."""
        if not self._sendq:
            return False
        m = self._sendq[0]
        off = self._seg_off
        n = min(self.mtu, len(m.buf) - off)
        first, last = off == 0, off + n >= len(m.buf)
        if first and last:
            op = _RC_ONLY if m.imm is None else _RC_ONLY_IMM
        elif first:
            op = _RC_FIRST
        elif last:
            op = _RC_LAST if m.imm is None else _RC_LAST_IMM
        else:
            op = _RC_MIDDLE
        psn = (self.start_psn + self._count_segmented()) & PSN_MASK
        if first:
            m.first_psn = psn
            self._msgs.append(m)
        self._pkts.append((psn, m, off, n, op))
        self._seg_off = off + n
        if last:
            m.last_psn = psn
            self._sendq.popleft()
            self._seg_off = 0
        return True

    def _count_segmented(self) -> int:
        return self._nseg

    _nseg = 0

    def frames_to_send(self, now_s: float) -> list[tuple[int, bytes]]:
        out = self._ctrl
        self._ctrl = []
        if self.error or self.peer is None:
            return out
        while True:
            inflight = ((self.snd_nxt - self.snd_una) & PSN_MASK) * self.mtu
            if inflight >= self.window_bytes:
                break
            idx = (self.snd_nxt - self.snd_una) & PSN_MASK
            while idx >= len(self._pkts):
                if not self._segment():
                    break
                self._nseg += 1
            if idx >= len(self._pkts):
                break
            psn, m, off, n, op = self._pkts[idx]
            parts = b""
            if op in (_RC_FIRST, _RC_ONLY, _RC_ONLY_IMM):
                parts = _RETH.pack(m.va, m.rkey, len(m.buf))
            if op in (_RC_LAST_IMM, _RC_ONLY_IMM):
                parts += _U32.pack(m.imm)
            rtx = ((psn - self.snd_max) & PSN_MASK) >= _HALF
            if rtx:
                self.stats.retransmissions += 1
            else:
                self.stats.tx_data_packets += 1
                self.snd_max = (psn + 1) & PSN_MASK
                self._sent_at[psn] = now_s
            out.append(
                (
                    self.plane,
                    self._frame(0, self._mrc(op, psn, parts + bytes(m.buf[off : off + n]))),
                )
            )
            self.snd_nxt = (psn + 1) & PSN_MASK
            if self._deadline is None:
                self._deadline = now_s + self._rto * (1 << min(self._retries, 10))
        return out

    # -- receiving ------------------------------------------------------------------------------

    def receive_frame(self, data, now_s: float) -> None:  # noqa: ANN001
        if self.error or self.peer is None:
            return
        plen = _U16.unpack_from(data, 18)[0]
        end = 54 + plen
        if (
            end > len(data)
            or end < 62 + 16
            or zlib.crc32(memoryview(data)[62 : end - 4]) != _U32.unpack_from(data, end - 4)[0]
        ):
            self.stats.rx_malformed += 1
            return
        op, _, _, w1, w2 = _BTH.unpack_from(data, 62)
        psn = w2 & PSN_MASK
        if op == _RC_ACK:
            self._rx_ack(_U32.unpack_from(data, 74)[0] >> 24, psn, now_s)
        elif _RC_FIRST <= op <= _RC_ONLY_IMM:
            self._rx_data(data, end, op, psn, now_s)

    def _ack(self, syndrome: int, psn: int) -> None:
        self._ctrl.append(
            (
                self.plane,
                self._frame(46, self._mrc(_RC_ACK, psn, _U32.pack(syndrome << 24 | self._rx_msn))),
            )
        )
        self._unacked = 0

    def _rx_data(self, data, end: int, op: int, psn: int, now_s: float) -> None:  # noqa: ANN001
        d = (psn - self.epsn) & PSN_MASK
        if d >= _HALF:  # duplicate: re-ACK so a lost ACK is repaired
            self.stats.rx_duplicates += 1
            self._ack(_SYN_ACK, (self.epsn - 1) & PSN_MASK)
            return
        if d > 0:  # a gap: everything past it is discarded; one NAK per gap
            if not self._nak_sent:
                self._nak_sent = True
                self._ack(_SYN_NAK_SEQ, self.epsn)
            return
        off = 74
        if op in (_RC_FIRST, _RC_ONLY, _RC_ONLY_IMM):
            self._rx_va, self._rx_rkey, _ = _RETH.unpack_from(data, off)
            off += 16
        imm = None
        if op in (_RC_LAST_IMM, _RC_ONLY_IMM):
            imm = _U32.unpack_from(data, off)[0]
            off += 4
        payload = memoryview(data)[off : end - 4]
        if self.memory.place(self._rx_rkey, self._rx_va, payload) is not PlaceStatus.OK:
            self._ack(_SYN_NAK_ACCESS, psn)
            return
        self._rx_va += len(payload)
        self.stats.rx_placed_bytes += len(payload)
        self.stats.rx_data_packets += 1
        self.epsn = (psn + 1) & PSN_MASK
        self._nak_sent = False
        self._unacked += 1
        last = op in (_RC_LAST, _RC_LAST_IMM, _RC_ONLY, _RC_ONLY_IMM)
        if last:
            self._rx_msn = (self._rx_msn + 1) & 0xFFFFFF
            if imm is not None:
                self._events.append(ImmReceived(imm, 0, self._rx_msn, now_s))
        if last or self._unacked >= self.config.ack_every:
            self._ack(_SYN_ACK, psn)

    def _rx_ack(self, syndrome: int, psn: int, now_s: float) -> None:
        if syndrome == _SYN_NAK_ACCESS:
            self._fail(WcStatus.REMOTE_ACCESS_ERROR, f"remote access error at PSN {psn}", now_s)
            return
        acked_to = psn if syndrome == _SYN_ACK else (psn - 1) & PSN_MASK
        n = ((acked_to - self.snd_una) & PSN_MASK) + 1
        span = (self.snd_max - self.snd_una) & PSN_MASK
        if 0 < n <= span:
            sent = self._sent_at.pop(acked_to, None)
            if sent is not None:
                self._rtt(now_s - sent)
            for _ in range(n):
                p, _m, _o, _n, _op = self._pkts.popleft()
                self._sent_at.pop(p, None)
            self.snd_una = (acked_to + 1) & PSN_MASK
            if ((self.snd_nxt - self.snd_una) & PSN_MASK) >= _HALF:
                self.snd_nxt = self.snd_una
            self._retries = 0
            self._deadline = now_s + self._rto if self.snd_una != self.snd_max else None
            while (
                self._msgs
                and self._msgs[0].last_psn >= 0
                and 0 < ((self.snd_una - self._msgs[0].last_psn) & PSN_MASK) < _HALF
            ):
                m = self._msgs.popleft()
                self._events.append(WriteCompleted(m.wr_id, WcStatus.SUCCESS, len(m.buf), now_s))
        if syndrome == _SYN_NAK_SEQ:  # go back N
            self.snd_nxt = self.snd_una

    def _rtt(self, r: float) -> None:
        if self._srtt is None:
            self._srtt, self._rttvar = r, r / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self._srtt - r)
            self._srtt = 0.875 * self._srtt + 0.125 * r
        self._rto = min(max(self._srtt + 4 * self._rttvar, self._min_rto), self.config.max_rto_s)

    def handle_timer(self, now_s: float) -> None:
        if self._deadline is None or now_s < self._deadline or self.error:
            return
        if self.snd_una == self.snd_max:
            self._deadline = None
            return
        self._retries += 1
        self.stats.timeouts += 1
        if self._retries > self.config.retry_limit:
            self._fail(
                WcStatus.RETRY_EXCEEDED,
                f"PSN {self.snd_una} unacknowledged after {self.config.retry_limit} retries",
                now_s,
            )
            return
        self.snd_nxt = self.snd_una  # go back to the oldest unacknowledged packet
        self._deadline = None

    def _fail(self, status: WcStatus, reason: str, now_s: float) -> None:
        self.error = True
        self._deadline = None
        self._events.append(QpErrorEvent(self.qpn, status, reason, now_s))
        for m in list(self._msgs) + list(self._sendq):
            self._events.append(WriteCompleted(m.wr_id, WcStatus.FLUSHED, len(m.buf), now_s))

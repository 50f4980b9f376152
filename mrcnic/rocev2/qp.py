"""The RoCEv2 baseline: a sans-I/O RC queue pair that behaves as RoCEv2 NICs do, with exactly
:class:`mrcnic.transport.qp.QueuePair`'s interface, so ``verbs.Device``, ``mrc-sim`` and the asyncio
shell host it in place of MRC.  It is the reference the project's claims are measured
against; docs/design/rocev2.md records every constant and what it does and does not model.

As deployed:

- **One path per QP.**  The UDP source port comes from the QP numbers (Linux's
  ``rdma_calc_flow_label``), the port/plane is the one the QP is bound to (or a LAG-style
  hash), the T1 is an ECMP hash of the 5-tuple; the packet's EV encodes that one path.  QPs
  hash independently, so they collide as flows do under ECMP.
- **RC opcodes** 0x06-0x0B, RETH only on FIRST/ONLY, ImmDt on *_IMM, no METH, no timestamp.
- **In-order delivery.**  The responder accepts only the expected PSN; on a gap it sends one
  NAK (PSN sequence error) and silently drops everything until the expected PSN arrives;
  duplicates are re-ACKed.  The requester goes back to the NAKed PSN and resends everything
  from there (go-back-N).  No SACK.
- **Coalesced ACKs**: AETH ACK every ``ack_every`` packets, on AckReq (last packet of a
  message, or the packet that fills the window), or after ``ack_delay_s``.
- **Local ACK timeout** (IB encoding ``4.096 us x 2^n``, scaled to the lab), doubling per
  consecutive timeout.  Timeouts and NAKs (sequence errors) both use up ``retry_cnt`` (7)
  retries, which only a positive ACK restores; one more and the QP errors (RETRY_EXCEEDED).
- **No reaction to trimming**: data is DSCP NO_TRIM with ECT(0): switches drop, not trim.
- **DCQCN**: the responder returns a CNP (opcode 0x81) on CE, at most once per 4 us
  (scaled; ConnectX's ``min_time_between_cnps``); the requester cuts its rate with alpha and recovers in stages
  (``mrcnic.rocev2.dcqcn``, ConnectX's default constants); the QP paces itself at that
  rate.  No window beyond the PSN space: a NIC keeps none for writes.
- **No failover**: a port going down changes nothing; the QP retries until retry_cnt is
  exhausted (that is the real behaviour).
"""

from __future__ import annotations

import math
import struct
from collections import deque

from mrcnic import fast, wire
from mrcnic.rocev2.config import RoceConfig, RoceStats, RoceUnsupportedError
from mrcnic.rocev2.dcqcn import REFERENCE_PORT_BPS, Dcqcn, DcqcnParams, profile
from mrcnic.transport.memory import MemoryTable, PlaceStatus
from mrcnic.transport.qp_types import (
    Event,
    ImmReceived,
    NetConfig,
    Outbox,
    QpAttributes,
    QpConfig,
    QpErrorEvent,
    QpInput,
    QpState,
    WcStatus,
    WriteCompleted,
    check_peer,
    check_qp_args,
    checked_write,
    initial_psn,
    next_state,
    peek_dest_qp,
)
from mrcnic.wire import layout, usid
from mrcnic.wire.rocev2 import (
    CNP_RESERVED_SIZE,
    OP_CNP,
    SYN_ACK,
    SYN_NAK_INVALID_REQUEST,
    SYN_NAK_PSN_SEQ,
    SYN_NAK_REMOTE_ACCESS,
    SYN_NAK_REMOTE_OP,
    ecmp_hash,
    encode_cnp,
    ev_for_path,
    icrc,
    icrc_ok,
    lag_hash,
    rdma_flow_label,
    rdma_udp_sport,
)

PSN_MASK = layout.PSN_MASK
_HALF = 1 << 23
IB_TIMEOUT_UNIT_S = 4.096e-6  # IB local ACK timeout = 4.096 us x 2^n

# frame layout: the facts are mrcnic.wire.layout's
_OFF_IP = layout.OFF_IPV6
_OFF_UDP = layout.OFF_UDP
_OFF_ULEN = layout.OFF_UDP_LENGTH
_OFF_UCSUM = layout.OFF_UDP_CHECKSUM
_OFF_BTH = layout.OFF_BTH
_PREFIX = layout.FRAME_HEADERS_SIZE  # Ethernet + IPv6 + UDP: the per-QP template
_BTH_SIZE = layout.BTH_SIZE
_RETH_SIZE = layout.RETH_SIZE
_IMM_SIZE = layout.IMM_SIZE
_ICRC_SIZE = layout.ICRC_SIZE
_PKEY = layout.DEFAULT_PKEY
_BTH = struct.Struct(">BBHII")
_BTH_RETH = struct.Struct(">BBHIIQII")
_BTH_WORDS = struct.Struct(">II")  # at BTH + 4: flags|dest QP, AckReq|PSN
_RETH = struct.Struct(">QII")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_IPW0_PLEN = struct.Struct(">IH")
_RX_HEAD = struct.Struct(">HIHBB")

_O = layout.Opcode
_RC_FIRST, _RC_MIDDLE, _RC_LAST = (
    int(_O.RC_WRITE_FIRST),
    int(_O.RC_WRITE_MIDDLE),
    int(_O.RC_WRITE_LAST),
)
_RC_LAST_IMM, _RC_ONLY = int(_O.RC_WRITE_LAST_IMM), int(_O.RC_WRITE_ONLY)
_RC_ONLY_IMM, _RC_ACK = int(_O.RC_WRITE_ONLY_IMM), int(_O.RC_ACK)
del _O
# the receive path tests "_RC_FIRST <= op <= _RC_ONLY_IMM": hold it to the layout
assert frozenset(range(_RC_FIRST, _RC_ONLY_IMM + 1)) == layout.RC_DATA_OPS
_RETH_OPS = layout.RC_RETH_OPS
_IMM_OPS = layout.RC_IMM_OPS
_LAST_OPS = layout.RC_LAST_OPS
_ACKREQ = layout.BTH_ACKREQ
_IPV6_W0 = layout.IPV6_W0_VERSION
_DSCP_SHIFT = layout.DSCP_SHIFT
_ECN_SHIFT = layout.ECN_SHIFT
_DSCP_NO_TRIM = int(wire.Dscp.NO_TRIM)
_DSCP_LOSSLESS = int(wire.Dscp.LOSSLESS)
_DSCP_CONTROL = int(wire.Dscp.CONTROL)
_ECT0 = int(wire.Ecn.ECT0)
_CE = int(wire.Ecn.CE)
_OFF_ETHERTYPE = layout.OFF_ETHERTYPE
_ETHERTYPE_IPV6 = layout.ETHERTYPE_IPV6
_IPV6_VERSION = layout.IPV6_VERSION
_IPPROTO_UDP = layout.IPPROTO_UDP
_UDP_SIZE = layout.UDP_SIZE
_ACK_LEN = _BTH_SIZE + layout.AETH_SIZE + _ICRC_SIZE
#: the largest payload per packet: UDP's 16-bit length holds UDP, BTH, RETH, ImmDt and ICRC too
MAX_MTU_BYTES = 0xFFFF - (_UDP_SIZE + _BTH_SIZE + _RETH_SIZE + _IMM_SIZE + _ICRC_SIZE)
_CNP_LEN = _BTH_SIZE + CNP_RESERVED_SIZE + _ICRC_SIZE


#: why the responder refused a request (csrc/mrc_roce.h MRC_ROCE_WHY_*)
WHY_SEQUENCE, WHY_ACCESS, WHY_LENGTH, WHY_PLACE = 1, 2, 3, 4


def refusal_why(
    why: int, status: PlaceStatus = PlaceStatus.OK, rkey: int = 0, va: int = 0, length: int = 0
) -> str:
    """The words of a refusal, as the QP's error reason says them."""
    if why == WHY_SEQUENCE:
        return "opcode out of sequence"
    if why == WHY_ACCESS:
        return (
            f"incoming write refused ({status.name}: R_Key {rkey:#x}, VA {va:#x}, {length} bytes)"
        )
    if why == WHY_LENGTH:
        return "payload does not match the RETH length"
    return f"placement refused ({status.name})"


class _Msg:
    __slots__ = ("wr_id", "buf", "length", "va", "rkey", "imm", "next_off", "last_psn")

    def __init__(self, wr_id, buf, va, rkey, imm) -> None:
        self.wr_id = wr_id
        self.buf = buf
        self.length = len(buf)
        self.va = va
        self.rkey = rkey
        self.imm = imm
        self.next_off = 0
        self.last_psn: int | None = None


class RoceQueuePair(Outbox):
    """One RoCEv2 RC connection endpoint (requester + responder), sans-I/O."""

    transport = "rocev2"

    def __init__(
        self,
        qpn: int,
        net: NetConfig,
        memory: MemoryTable,
        line_rate_bps: float,
        config: QpConfig | RoceConfig | None = None,
    ) -> None:
        if config is None:
            cfg = RoceConfig()
        elif isinstance(config, RoceConfig):
            cfg = config
        else:
            cfg = RoceConfig.from_qp_config(config)
        check_qp_args(qpn, net)
        if cfg.port is not None and not 0 <= cfg.port < net.shape.planes:
            raise ValueError(f"port {cfg.port} does not exist (0..{net.shape.planes - 1})")
        if not 0 <= cfg.retry_cnt <= 7:
            raise ValueError("retry_cnt is a 3-bit IB field: 0..7")
        if not 1 <= cfg.local_ack_timeout <= 31:
            raise ValueError(
                "local_ack_timeout is the IB encoding 1..31 (0 = infinite: unsupported)"
            )
        if cfg.mtu_bytes < 1 or cfg.ack_every < 1 or line_rate_bps <= 0:
            raise ValueError("mtu_bytes, ack_every and line_rate_bps must be positive")
        if cfg.mtu_bytes > MAX_MTU_BYTES:
            raise ValueError(
                f"mtu_bytes {cfg.mtu_bytes}: at most {MAX_MTU_BYTES} (a packet's UDP length, "
                "headers and ICRC included, is 16 bits)"
            )
        self.qpn = qpn
        self.net = net
        self.config = cfg
        self.memory = memory
        self.state = QpState.INIT
        self.planes = net.shape.planes
        self.mtu = cfg.mtu_bytes
        # line_rate_bps is the sum of the rates of the ports the QP uses (as for MRC's
        # CcParams): for a one-path RoCEv2 QP, one port's rate (verbs.Device passes that).
        self.port_rate_bps = cfg.port_rate_bps or line_rate_bps
        self.lab_scale = cfg.lab_scale or REFERENCE_PORT_BPS / self.port_rate_bps
        hw_timeout = IB_TIMEOUT_UNIT_S * (1 << cfg.local_ack_timeout) * self.lab_scale
        self.ack_timeout_s = cfg.ack_timeout_s or max(hw_timeout, 4 * cfg.base_rtt_s)
        if cfg.max_outstanding_psns:
            self.window_psns = cfg.max_outstanding_psns
        elif cfg.bdp_window:  # the cap this baseline had before issue 25 (docs/design/rocev2.md)
            bdp_pkts = math.ceil(self.port_rate_bps / 8 * cfg.base_rtt_s / self.mtu)
            self.window_psns = max(16, 2 * bdp_pkts + cfg.ack_every)
        else:  # IBTA's only bound on a requester: half the PSN space
            self.window_psns = _HALF - 1
        if not 1 <= self.window_psns < _HALF:
            raise ValueError("max_outstanding_psns must be in 1..2^23-1")
        dc_profile = profile(cfg.dcqcn_profile)
        self.dcqcn: Dcqcn | None = None
        if cfg.dcqcn:
            params = DcqcnParams.scaled(
                self.port_rate_bps,
                self.lab_scale,
                cfg.dcqcn_profile,
                **dict(cfg.dcqcn_options),
            )
            self.dcqcn = Dcqcn(params)
        self.cnp_interval_s = cfg.cnp_interval_s or dc_profile.cnp_interval_s * self.lab_scale
        self._ack_delay = cfg.ack_delay_s if cfg.ack_delay_s is not None else cfg.base_rtt_s / 8
        self.start_psn = initial_psn(cfg.start_psn)
        self.stats = RoceStats()
        self._events: deque[Event] = deque()
        self._ctrl: list[tuple[int, bytes]] = []
        self._port_up = [True] * self.planes
        # requester
        self._sendq: deque[_Msg] = deque()  # not fully segmented
        self._msgs: deque[_Msg] = deque()  # segmented (partly), not completed
        self._pkts: deque[tuple[int, _Msg, int, int, int]] = deque()  # psn msg off n op
        self.snd_una = self.snd_nxt = self.snd_max = self.start_psn
        self._retries = 0  # of retry_cnt, used since the last positive ACK
        self._backoff = 0  # consecutive timeouts: the exponent of the timeout's doubling
        self._deadline: float | None = None
        self._nak_rewound: int | None = None  # PSN of the last NAK rewind, until progress
        self._next_tx_s = 0.0
        self._pace_blocked = False
        #: how far behind the clock the pacing may fall, in seconds at the current rate: the
        #: burst it may send at once (0: one packet, the sans-I/O default). An I/O shell that
        #: wakes at a coarser tick sets its tick here (verbs.Device.set_pace_burst), so a QP
        #: paced at line rate hands over a tick's frames per wake, not one frame per wake.
        self.pace_burst_s = 0.0
        # responder
        self._epsn = 0
        self._nak_outstanding = False
        self._rx_in_msg = False
        self._rx_va = 0
        self._rx_rkey = 0
        self._rx_len = 0
        self._rx_got = 0
        self._rx_msn = 0
        self._rx_rqmsn = 0
        self._unacked = 0
        self._ack_deadline: float | None = None
        self._last_cnp_s = float("-inf")
        # the path, fixed by connect()
        self.peer: QpAttributes | None = None
        self.ev = 0
        self.plane = cfg.port if cfg.port is not None else 0
        self.t1 = 0
        self.udp_sport = 0
        self._pre = b""
        self._w0 = 0
        # the data class: lossless (PFC) when configured, else dropped like any data
        self._data_dscp = _DSCP_LOSSLESS if cfg.lossless else _DSCP_NO_TRIM
        self._src = b""
        self._final = b""

    # -- setup ----------------------------------------------------------------------------------

    def local_attributes(self) -> QpAttributes:
        return QpAttributes(
            qpn=self.qpn,
            host=self.net.host,
            start_psn=self.start_psn,
            window_psns=_HALF,  # an RC responder accepts any in-order PSN: half the PSN space
            max_wimm_inflight=self.config.max_wimm_inflight,
            mtu_bytes=self.mtu,
        )

    def connect(self, remote: QpAttributes) -> None:
        """Connect to the peer ``remote`` describes; a record that does not fit this QP
        raises ValueError and leaves the QP unconnected (INIT)."""
        next_state(self.qpn, self.state, QpInput.CONNECT)  # allowed now? (raises if not)
        check_peer(self.net, self.mtu, remote)
        self._transition(QpInput.CONNECT)
        self.peer = remote
        self._epsn = remote.start_psn
        shape = self.net.shape
        cfg = self.config
        flow = rdma_flow_label(self.qpn, remote.qpn)
        sport = rdma_udp_sport(flow)
        if cfg.port is None:
            self.plane = lag_hash(self.net.host, remote.host, sport, cfg.ecmp_seed) % self.planes
        dest = usid.DestTemplate(shape, self.net.host, remote.host)
        src = usid.host_address(shape, self.net.host, self.plane)
        final = dest.final(self.plane)
        self.t1 = (
            ecmp_hash(src, final, sport, cfg.ecmp_seed) % shape.t1 if dest.crosses_spine else 0
        )
        self.udp_sport = sport
        self.ev = ev_for_path(shape, sport, flow, self.plane, self.t1)
        port = self.net.ports[self.plane]
        _, fl16 = wire.ev_to_udp_flow(self.ev)
        self._w0 = _IPV6_W0 | fl16
        self._src = src
        self._final = final
        self._pre = (
            port.peer_mac
            + port.mac
            + b"\x86\xdd"
            + struct.pack(">IHBB", self._w0, 0, wire.IPPROTO_UDP, wire.DEFAULT_HOP_LIMIT)
            + src
            + dest.address(self.ev)
            + struct.pack(">HHHH", sport, wire.MRC_UDP_PORT, 0, 0)
        )

    def _transition(self, inp: QpInput) -> None:
        self.state = next_state(self.qpn, self.state, inp)

    # -- the user API ---------------------------------------------------------------------------

    def post_write(
        self,
        wr_id: int,
        local: bytes | bytearray | memoryview,
        remote_va: int,
        rkey: int,
        imm: int | None = None,
    ) -> None:
        """Queue an RDMA Write (with immediate if ``imm`` is given) of ``local`` to the peer."""
        buf = checked_write(self.qpn, self.state, local, remote_va, rkey, imm)
        self._queue_write(_Msg(wr_id, buf, remote_va, rkey, imm))

    def _queue_write(self, msg: _Msg) -> None:
        self._sendq.append(msg)

    def port_status(self, port: int, up: bool, now_s: float) -> None:
        """Noted, nothing more: a RoCEv2 QP does not fail over.  If its port is down its
        packets are lost and it retries until ``retry_cnt`` runs out."""
        if not 0 <= port < self.planes:
            raise ValueError(f"port {port} does not exist")
        self._port_up[port] = up

    def deny_ev(self, ev: int, now_s: float) -> None:
        raise RoceUnsupportedError(
            "deny_ev: a RoCEv2 QP has one path fixed by the ECMP hash, no EV set to steer "
            "(EV control is MRC-only)"
        )

    def allow_ev(self, ev: int, now_s: float) -> None:
        raise RoceUnsupportedError(
            "allow_ev: a RoCEv2 QP has one path fixed by the ECMP hash, no EV set to steer "
            "(EV control is MRC-only)"
        )

    def ev_states(self) -> dict[str, int]:
        """Its one path, always GOOD: RoCEv2 keeps no path state (the shape of MRC's counts)."""
        return {"GOOD": 1, "SKIP": 0, "ASSUMED_BAD": 0, "DENIED": 0}

    def get_stats(self) -> RoceStats:
        s = self.stats
        s.cwnd_bytes = float(self.window_psns * self.mtu)
        s.srtt_s = 0.0  # RoCEv2 measures no RTT
        s.rto_s = self._current_timeout()
        dc = self.dcqcn
        s.rate_bps = dc.rate_bps if dc is not None else self.port_rate_bps
        s.min_rate_bps = dc.min_seen_bps if dc is not None else self.port_rate_bps
        s.alpha = dc.alpha if dc is not None else 0.0
        return s

    @property
    def idle(self) -> bool:
        """Nothing posted is unfinished."""
        return not self._sendq and not self._msgs

    # -- timers ---------------------------------------------------------------------------------

    def _current_timeout(self) -> float:
        t = self.ack_timeout_s * (1 << self._backoff)
        return t if t < self.config.max_ack_timeout_s else self.config.max_ack_timeout_s

    def get_timer(self) -> float | None:
        """The earliest deadline: local ACK timeout, delayed ACK, or pacing."""
        if self.state is not QpState.READY:
            return None
        t = self._deadline
        a = self._ack_deadline
        if a is not None and (t is None or a < t):
            t = a
        if self._pace_blocked:
            p = self._next_tx_s + self.pace_burst_s  # (a burst's worth of time at once)
            if t is None or p < t:
                t = p
        return t

    def handle_timer(self, now_s: float) -> None:
        if self._ack_deadline is not None and self._ack_deadline <= now_s:
            self._ack_deadline = None
            if self._unacked:
                self._send_ack(SYN_ACK, (self._epsn - 1) & PSN_MASK)
        if self.state is not QpState.READY:
            return
        d = self._deadline
        if d is None or d > now_s:
            return
        if self.snd_una == self.snd_max:
            self._deadline = None
            return
        if self._retries >= self.config.retry_cnt:
            self._fatal(
                WcStatus.RETRY_EXCEEDED,
                f"PSN {self.snd_una} unacknowledged after {self._retries} retries "
                f"(retry_cnt {self.config.retry_cnt}, local ACK timeout "
                f"{self.ack_timeout_s * 1e3:.3g} ms)",
                now_s,
                failed=self._oldest_msg(),
            )
            return
        self._retries += 1
        self._backoff += 1
        st = self.stats
        st.timeouts += 1
        st.timeout_rewind_psns += (self.snd_max - self.snd_una) & PSN_MASK
        self.snd_nxt = self.snd_una  # go back to the oldest unacknowledged PSN
        self._nak_rewound = None
        self._deadline = now_s + self._current_timeout()

    # -- sending --------------------------------------------------------------------------------

    def frames_to_send(self, now_s: float) -> list[tuple[int, bytes]]:
        """Control frames, then data while the window and the (DCQCN) rate allow.  Every data
        frame leaves on the QP's one port."""
        out = self._ctrl
        self._ctrl = []
        self._pace_blocked = False
        if self.state is not QpState.READY:
            return out
        rate = self._pace_rate_bps(now_s)
        dc = self.dcqcn
        pkts = self._pkts
        window = self.window_psns
        st = self.stats
        port = self.plane
        down = not self._port_up[port]
        sent_bytes = 0
        while True:
            idx = (self.snd_nxt - self.snd_una) & PSN_MASK
            if idx >= window:
                break
            if idx == len(pkts) and not self._segment():
                break
            if self._next_tx_s > now_s:
                self._pace_blocked = True
                break
            psn, msg, off, n, op = pkts[idx]
            ackreq = op in _LAST_OPS or idx + 1 >= window
            frame = self._data_frame(psn, msg, off, n, op, ackreq)
            out.append((port, frame))
            if down:
                st.tx_on_down_port += 1
            if psn == self.snd_max:
                self.snd_max = (psn + 1) & PSN_MASK
                st.tx_data_packets += 1
                st.tx_data_bytes += n
            else:
                st.retransmissions += 1
            self.snd_nxt = (psn + 1) & PSN_MASK
            if self._deadline is None:
                self._deadline = now_s + self._current_timeout()
            # pace at the current rate; a token bucket one packet (or pace_burst_s) deep
            tx_s = len(frame) * 8 / rate
            lag = tx_s if tx_s > self.pace_burst_s else self.pace_burst_s
            nxt = self._next_tx_s
            if nxt < now_s - lag:
                nxt = now_s - lag
            self._next_tx_s = nxt + tx_s
            sent_bytes += len(frame)
        # DCQCN's byte counter once per call (the C engine's way): the same events as per
        # frame, as every frame of the call has the same now_s and the rate used is the one
        # read above; bytes counted after an increase ended recovery are reset by the next cut
        if sent_bytes and dc is not None and dc.active:
            dc.on_sent(sent_bytes, now_s)
        return out

    def _pace_rate_bps(self, now_s: float) -> float:
        """The rate to pace at now: the port's, or DCQCN's below it."""
        rate = self.port_rate_bps
        dc = self.dcqcn
        if dc is not None and dc.active:
            dc.advance(now_s)
            if dc.rate_bps < rate:
                rate = dc.rate_bps
        return rate

    def _segment(self) -> bool:
        """Cut the next packet of the send queue (PSN ``snd_max``)."""
        sendq = self._sendq
        if not sendq:
            return False
        m = sendq[0]
        off = m.next_off
        n = min(self.mtu, m.length - off)
        first = off == 0
        last = off + n >= m.length
        if first and last:
            op = _RC_ONLY if m.imm is None else _RC_ONLY_IMM
        elif first:
            op = _RC_FIRST
        elif last:
            op = _RC_LAST if m.imm is None else _RC_LAST_IMM
        else:
            op = _RC_MIDDLE
        psn = (self.snd_una + len(self._pkts)) & PSN_MASK
        if first:
            self._msgs.append(m)
        self._pkts.append((psn, m, off, n, op))
        m.next_off = off + n
        if last:
            m.last_psn = psn
            sendq.popleft()
        return True

    def _data_frame(self, psn: int, m: _Msg, off: int, n: int, op: int, ackreq: bool) -> bytes:
        reth = op in _RETH_OPS
        imm = op in _IMM_OPS
        hdr = _BTH_SIZE + (_RETH_SIZE if reth else 0) + (_IMM_SIZE if imm else 0)
        total = _PREFIX + hdr + n + _ICRC_SIZE
        buf = bytearray(total)
        buf[:_PREFIX] = self._pre
        ulen = total - _OFF_UDP
        _IPW0_PLEN.pack_into(
            buf, _OFF_IP, self._w0 | self._data_dscp << _DSCP_SHIFT | _ECT0 << _ECN_SHIFT, ulen
        )
        _U16.pack_into(buf, _OFF_ULEN, ulen)
        w2 = (_ACKREQ | psn) if ackreq else psn
        assert self.peer is not None  # data is sent only when READY, i.e. connected
        qp = self.peer.qpn
        if reth:
            _BTH_RETH.pack_into(buf, _OFF_BTH, op, 0, _PKEY, qp, w2, m.va, m.rkey, m.length)
        else:
            _BTH.pack_into(buf, _OFF_BTH, op, 0, _PKEY, qp, w2)
        if imm:
            _U32.pack_into(buf, _PREFIX + hdr - _IMM_SIZE, m.imm)
        if n:
            buf[_PREFIX + hdr : _PREFIX + hdr + n] = m.buf[off : off + n]
        icrc_at = total - _ICRC_SIZE
        buf[icrc_at:total] = icrc(
            buf, icrc_at, self._final
        )  # (before the UDP checksum: it covers it)
        _U16.pack_into(
            buf, _OFF_UCSUM, fast.udp6_checksum(self._src, self._final, memoryview(buf)[_OFF_UDP:])
        )
        return bytes(buf)

    def _ctrl_frame(self, mrc: bytes) -> tuple[int, bytes]:
        """ACK/NAK/CNP on the QP's own path, CONTROL class (high priority), not ECN-capable
        (``mrc``: the part after UDP, its last 4 bytes room for the ICRC)."""
        total = _PREFIX + len(mrc)
        buf = bytearray(total)
        buf[:_PREFIX] = self._pre
        ulen = total - _OFF_UDP
        _IPW0_PLEN.pack_into(buf, _OFF_IP, self._w0 | _DSCP_CONTROL << _DSCP_SHIFT, ulen)
        _U16.pack_into(buf, _OFF_ULEN, ulen)
        buf[_PREFIX:] = mrc
        buf[total - _ICRC_SIZE :] = icrc(buf, total - _ICRC_SIZE, self._final)
        _U16.pack_into(
            buf, _OFF_UCSUM, fast.udp6_checksum(self._src, self._final, memoryview(buf)[_OFF_UDP:])
        )
        return (self.plane, bytes(buf))

    def _send_ack(self, syndrome: int, psn: int) -> None:
        if self.peer is None:
            return
        body = _BTH.pack(_RC_ACK, 0, _PKEY, self.peer.qpn, psn) + _U32.pack(
            syndrome << 24 | self._rx_msn
        )
        self._ctrl.append(self._ctrl_frame(body + bytes(_ICRC_SIZE)))
        self._unacked = 0
        self._ack_deadline = None
        if syndrome == SYN_ACK:
            self.stats.tx_acks += 1
        else:
            self.stats.tx_nacks += 1

    def _maybe_cnp(self, now_s: float) -> None:
        """Notification point: CE arrived; at most one CNP per ``cnp_interval_s``."""
        if now_s - self._last_cnp_s < self.cnp_interval_s:
            self.stats.cnps_suppressed += 1
            return
        self._last_cnp_s = now_s
        self.stats.tx_cnps += 1
        assert self.peer is not None  # receive_frame only handles frames once connected
        self._ctrl.append(self._ctrl_frame(encode_cnp(self.peer.qpn)))

    # -- receiving ------------------------------------------------------------------------------

    def receive_frame(self, data: bytes | bytearray | memoryview, now_s: float) -> None:
        """Process one received Ethernet frame addressed to this QP."""
        if self.peer is None or self.state is QpState.ERROR:
            return
        st = self.stats
        n = len(data)
        if n < _OFF_BTH + _BTH_SIZE + _ICRC_SIZE:
            st.rx_malformed += 1
            return
        ethertype, w0, plen, nh, _hop = _RX_HEAD.unpack_from(data, _OFF_ETHERTYPE)
        end = _OFF_UDP + plen
        if (
            ethertype != _ETHERTYPE_IPV6
            or w0 >> 28 != _IPV6_VERSION
            or nh != _IPPROTO_UDP
            or end > n
            or plen < _UDP_SIZE + _BTH_SIZE + _ICRC_SIZE
        ):
            st.rx_malformed += 1
            return
        if not icrc_ok(data, end):
            st.rx_malformed += 1  # also a trimmed frame: a trimmed RC packet has no ICRC
            return
        w1, w2 = _BTH_WORDS.unpack_from(data, _OFF_BTH + layout.BTH_OFF_FLAGS)
        if w1 & PSN_MASK != self.qpn:
            st.rx_malformed += 1
            return
        op = data[_OFF_BTH]
        if _RC_FIRST <= op <= _RC_ONLY_IMM:
            self._rx_data(data, end, w0, op, w2, now_s)
        elif op == _RC_ACK and end - _OFF_BTH == _ACK_LEN:
            self._rx_ack(w2 & PSN_MASK, _U32.unpack_from(data, _OFF_BTH + _BTH_SIZE)[0], now_s)
        elif op == OP_CNP and end - _OFF_BTH == _CNP_LEN:
            st.rx_cnps += 1
            if self.dcqcn is not None and self.dcqcn.on_cnp(now_s):
                st.rate_cuts += 1
        else:
            st.rx_malformed += 1

    def _rx_data(self, data, end: int, w0: int, op: int, w2: int, now_s: float) -> None:
        st = self.stats
        reth = op in _RETH_OPS
        imm_op = op in _IMM_OPS
        hdr = _BTH_SIZE + (_RETH_SIZE if reth else 0) + (_IMM_SIZE if imm_op else 0)
        if end < _PREFIX + hdr + _ICRC_SIZE:
            st.rx_malformed += 1
            return
        st.rx_data_packets += 1
        if (w0 >> _ECN_SHIFT) & 3 == _CE:
            st.rx_ecn_marked += 1
            if self.dcqcn is not None:
                self._maybe_cnp(now_s)
        psn = w2 & PSN_MASK
        d = (psn - self._epsn) & PSN_MASK
        if d:
            if d >= _HALF:  # duplicate: re-ACK (coalesced) so a lost ACK is repaired
                st.rx_duplicates += 1
                self._send_ack(SYN_ACK, (self._epsn - 1) & PSN_MASK)
            else:  # a gap: one NAK, then silence until the expected PSN arrives
                st.rx_out_of_order += 1
                if not self._nak_outstanding:
                    self._nak_outstanding = True
                    self._send_ack(SYN_NAK_PSN_SEQ, self._epsn)
            return
        first = reth
        last = op in _LAST_OPS
        if first == self._rx_in_msg:  # FIRST inside a message, or MIDDLE/LAST outside one
            self._refuse(SYN_NAK_INVALID_REQUEST, psn, refusal_why(WHY_SEQUENCE), now_s)
            return
        off = _PREFIX + _BTH_SIZE
        if first:
            va, rkey, length = _RETH.unpack_from(data, off)
            off += _RETH_SIZE
            status = self.memory.check(rkey, va, length)
            if status is not PlaceStatus.OK:
                why = refusal_why(WHY_ACCESS, status, rkey, va, length)
                self._refuse(SYN_NAK_REMOTE_ACCESS, psn, why, now_s)
                return
            self._rx_va, self._rx_rkey, self._rx_len, self._rx_got = va, rkey, length, 0
        imm = None
        if imm_op:
            imm = _U32.unpack_from(data, off)[0]
            off += _IMM_SIZE
        plen = end - _ICRC_SIZE - off
        got = self._rx_got + plen
        if got > self._rx_len or (last and got != self._rx_len):
            self._refuse(SYN_NAK_INVALID_REQUEST, psn, refusal_why(WHY_LENGTH), now_s)
            return
        if plen:
            status = self.memory.place(
                self._rx_rkey, self._rx_va + self._rx_got, memoryview(data)[off : end - _ICRC_SIZE]
            )
            if status is not PlaceStatus.OK:  # e.g. deregistered in the middle of a message
                self._refuse(SYN_NAK_REMOTE_ACCESS, psn, refusal_why(WHY_PLACE, status), now_s)
                return
        self._rx_got = got
        st.rx_placed_bytes += plen
        self._epsn = (psn + 1) & PSN_MASK
        self._nak_outstanding = False
        self._unacked += 1
        if last:
            self._rx_in_msg = False
            self._rx_msn = (self._rx_msn + 1) & PSN_MASK
            if imm is not None:  # in-order delivery: immediates complete in order
                self._events.append(ImmReceived(imm, self._rx_len, self._rx_rqmsn, now_s))
                self._rx_rqmsn = (self._rx_rqmsn + 1) & 0xFFFF
        else:
            self._rx_in_msg = True
        if w2 & _ACKREQ or self._unacked >= self.config.ack_every:
            self._send_ack(SYN_ACK, psn)
        elif self._ack_deadline is None:
            self._ack_deadline = now_s + self._ack_delay

    def _refuse(self, syndrome: int, psn: int, why: str, now_s: float) -> None:
        """A request the responder cannot execute: NAK it, nothing written; the QP goes to
        ERROR as an IB responder does (class C error)."""
        self.stats.rx_refused += 1
        self._send_ack(syndrome, psn)
        self._refused(syndrome, psn, why, now_s)

    def _refused(self, syndrome: int, psn: int, why: str, now_s: float) -> None:
        """The error of a refused request (its NAK is sent)."""
        status = (
            WcStatus.REMOTE_ACCESS_ERROR
            if syndrome == SYN_NAK_REMOTE_ACCESS
            else WcStatus.REMOTE_OP_ERROR
        )
        self._fatal(status, f"responder: {why} at PSN {psn}", now_s)

    def _rx_ack(self, psn: int, aeth: int, now_s: float) -> None:
        st = self.stats
        syn = aeth >> 24
        if syn & 0xE0 == SYN_ACK:
            st.rx_acks += 1
            if not self._ack_to(psn, now_s):
                st.rx_stale += 1
        elif syn == SYN_NAK_PSN_SEQ:
            st.rx_nacks += 1
            self._rx_nak_seq(psn, now_s)
        elif syn in (SYN_NAK_INVALID_REQUEST, SYN_NAK_REMOTE_ACCESS, SYN_NAK_REMOTE_OP):
            st.rx_nacks += 1
            d = (psn - self.snd_una) & PSN_MASK
            if d >= ((self.snd_max - self.snd_una) & PSN_MASK):
                st.rx_stale += 1
                return
            if d:
                self._ack_to((psn - 1) & PSN_MASK, now_s)  # a NAK acknowledges what precedes
            m = self._oldest_msg()
            assert m is not None  # (d < snd_max - snd_una: a packet is outstanding)
            if syn == SYN_NAK_REMOTE_ACCESS:
                status, what = WcStatus.REMOTE_ACCESS_ERROR, "remote access error"
            else:
                status, what = WcStatus.REMOTE_OP_ERROR, f"NAK syndrome {syn:#x}"
            self._fatal(
                status,
                f"peer refused write wr_id={m.wr_id} (R_Key {m.rkey:#x}, VA {m.va:#x}, "
                f"{m.length} bytes) at PSN {psn}: {what}",
                now_s,
                failed=m,
            )
        else:
            st.rx_malformed += 1  # RNR NAK and reserved codes: never sent by this responder

    def _ack_to(self, psn: int, now_s: float, positive: bool = True) -> bool:
        """Cumulative ACK of every PSN up to ``psn``; False if it acknowledges nothing new.
        ``positive`` False: the implicit acknowledgement of a NAK, which restores the retry
        count only if it completes a write (as Soft-RoCE's completer does)."""
        una = self.snd_una
        n = ((psn - una) & PSN_MASK) + 1
        if n > ((self.snd_max - una) & PSN_MASK):
            return False
        pkts = self._pkts
        for _ in range(n):
            pkts.popleft()
        una = self.snd_una = (psn + 1) & PSN_MASK
        if ((self.snd_nxt - una) & PSN_MASK) >= _HALF:
            self.snd_nxt = una  # acknowledged beyond a rewind point
        self._backoff = 0
        if positive or not self.config.nak_retries:
            self._retries = 0
        self._nak_rewound = None
        self._deadline = now_s + self.ack_timeout_s if una != self.snd_max else None
        msgs = self._msgs
        while msgs:
            m = msgs[0]
            if m.last_psn is None or not 0 < ((una - m.last_psn) & PSN_MASK) < _HALF:
                break
            msgs.popleft()
            self._retries = 0  # a completed write is progress
            self.stats.completions += 1
            self._events.append(WriteCompleted(m.wr_id, WcStatus.SUCCESS, m.length, now_s))
        return True

    def _rx_nak_seq(self, psn: int, now_s: float) -> None:
        """Go-back-N: everything before ``psn`` arrived; resend everything from ``psn``."""
        st = self.stats
        d = (psn - self.snd_una) & PSN_MASK
        if d >= ((self.snd_max - self.snd_una) & PSN_MASK):
            st.rx_stale += 1  # about PSNs already acknowledged (or never sent)
            return
        if d:
            self._ack_to((psn - 1) & PSN_MASK, now_s, positive=False)
        elif self._nak_rewound == psn:
            st.rx_stale += 1  # the same NAK again (duplicated in the fabric): already rewound
            return
        if self.config.nak_retries:  # a retry like a timeout's, as Soft-RoCE's rxe_comp.c
            if self._retries >= self.config.retry_cnt:
                self._fatal(
                    WcStatus.RETRY_EXCEEDED,
                    f"PSN {psn} NAKed (sequence error) after {self._retries} retries "
                    f"(retry_cnt {self.config.retry_cnt})",
                    now_s,
                    failed=self._oldest_msg(),
                )
                return
            self._retries += 1
            st.nak_retries += 1
        st.gbn_rewinds += 1
        st.gbn_rewind_psns += (self.snd_max - psn) & PSN_MASK
        self.snd_nxt = psn
        self._nak_rewound = psn
        self._deadline = now_s + self._current_timeout()

    # -- errors ---------------------------------------------------------------------------------

    def _oldest_msg(self) -> _Msg | None:
        """The write of the oldest unacknowledged packet, if one is cut."""
        return self._pkts[0][1] if self._pkts else None

    def _flush_writes(self) -> list[_Msg]:
        """Every write posted and not completed, oldest first, forgotten."""
        msgs = list(self._msgs) + [m for m in self._sendq if m.next_off == 0]
        self._msgs.clear()
        self._sendq.clear()
        self._pkts.clear()
        return msgs

    def _fatal(
        self, status: WcStatus, reason: str, now_s: float, failed: _Msg | None = None
    ) -> None:
        if self.state is QpState.ERROR:
            return
        self._transition(QpInput.FATAL)
        self._events.append(QpErrorEvent(self.qpn, status, reason, now_s))
        for m in self._flush_writes():
            s = status if m is failed else WcStatus.FLUSHED
            self._events.append(WriteCompleted(m.wr_id, s, m.length, now_s))
        self.snd_nxt = self.snd_max = self.snd_una
        self._deadline = None
        self._ack_deadline = None
        self._pace_blocked = False

    def __repr__(self) -> str:
        return (
            f"<RoceQueuePair qpn={self.qpn} host={self.net.host} plane={self.plane} "
            f"t1={self.t1} {self.state.name}>"
        )


__all__ = [
    "IB_TIMEOUT_UNIT_S",
    "RoceConfig",
    "RoceQueuePair",
    "RoceStats",
    "RoceUnsupportedError",
    "peek_dest_qp",
]

"""The sans-I/O MRC queue pair: requester and responder in one object, like a connection.

Inputs: :meth:`QueuePair.receive_frame` (a whole Ethernet frame), :meth:`handle_timer`, the
API calls (:meth:`post_write`, :meth:`port_status`, :meth:`deny_ev`, ...).  Outputs:
:meth:`frames_to_send` (``(port_index, frame)`` pairs, honouring the congestion window),
:meth:`get_timer` (the one deadline the I/O layer must arm) and :meth:`next_event`
(completions, EV transitions, errors).  No sockets, no clocks: time is always passed in, so
the simulator (``mrcnic.sim``) and the asyncio shell drive exactly this code.

Hot paths avoid dataclasses: each EV has a precomputed Ethernet+IPv6+UDP prefix and data
headers are written with one ``struct.pack_into``; ``tests/unit/test_qp_frames.py`` checks
the bytes against ``mrcnic.wire``.  Constants and their reasons: docs/transport.md.
"""

from __future__ import annotations

import enum
import json
import struct
import zlib
from collections import deque
from dataclasses import asdict, dataclass, field

from mrcnic import fast, usid, wire
from mrcnic.cc import AckSample, CcParams, CongestionControl, make_cc
from mrcnic.ev import EvConfig, EvInput, EvState, EvStateChanged, EvTable
from mrcnic.memory import MemoryTable, PlaceStatus
from mrcnic.sack import MARK_DUP, MARK_NEW, MARK_OOR, ResponderWindow, Scoreboard, TxRecord

PSN_MASK = 0xFFFFFF
#: the RTT peak tracker follows a higher sample at once and decays towards lower ones by this
#: fraction per sample (about 64 SACKs: a few RTTs), so it remembers the recent tail
RTT_PEAK_RELEASE = 1 / 64
#: the RTO is at least this multiple of the recent RTT peak
RTO_PEAK_GAIN = 1.5
#: RTO before the first RTT sample, in configured base RTTs (the first window is a whole BDP
#: sent at once, and an incast multiplies the queue it meets)
INITIAL_RTO_RTTS = 8
#: an acknowledgment this soon (x min RTT) after a retransmission was caused by the original
SPURIOUS_RTT_FRACTION = 0.5
_HALF = 1 << 23

# -- frame layout (offsets in a whole Ethernet frame) -----------------------------------------
_OFF_IP = 14
_OFF_PLEN = 18
_OFF_UDP = 54
_OFF_ULEN = 58
_OFF_UCSUM = 60
_OFF_BTH = 62
_PREFIX = 62  # Ethernet + IPv6 + UDP
_DATA_HDR = struct.Struct(">BBHIIHHQQII")  # BTH METH TS RETH (40 bytes)
_IMM = struct.Struct(">I")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_IPW0_PLEN = struct.Struct(">IH")
_BTH = struct.Struct(">BBHII")
_SACK = struct.Struct(">IHBxQIH2xQQ")
_NACK = struct.Struct(">IIIQ")
_RPROBE = struct.Struct(">IIQ")
_ENDPOINT = struct.Struct(">B3xIIIQ")
_RX_HEAD = struct.Struct(">HIHBB")  # at 12: ethertype, ip w0, payload length, next header, hop
_RX_DATA = struct.Struct(">BBHIIHHQQII")

_TS_BIT = 0x10
_RTX_BIT = 0x20
_ACKREQ = 0x80000000
_OP_FIRST, _OP_MIDDLE, _OP_LAST, _OP_LAST_IMM, _OP_ONLY, _OP_ONLY_IMM = range(0xC6, 0xCC)
_OP_ACK, _OP_EP_REQ, _OP_EP_RESP, _OP_SACK, _OP_NACK, _OP_RPROBE = (
    0xD1,
    0xD8,
    0xD9,
    0xDC,
    0xDD,
    0xDE,
)
_DATA_OVERHEAD = _PREFIX + _DATA_HDR.size + 4  # + ICRC (ImmDt extra on imm packets)
_DSCP_TRIMMED = int(wire.Dscp.TRIMMED)
_DSCP_TRIMMED_LH = int(wire.Dscp.TRIMMED_LASTHOP)


class QpState(enum.Enum):
    INIT = "INIT"  # created; attributes can be exported
    READY = "READY"  # connected to its peer (ibverbs RTS)
    ERROR = "ERROR"  # fatal: outstanding work flushed, nothing more sent


class QpInput(enum.Enum):
    CONNECT = "CONNECT"
    FATAL = "FATAL"


QP_TRANSITIONS: dict[tuple[QpState, QpInput], QpState] = {
    (QpState.INIT, QpInput.CONNECT): QpState.READY,
    (QpState.INIT, QpInput.FATAL): QpState.ERROR,
    (QpState.READY, QpInput.FATAL): QpState.ERROR,
    (QpState.ERROR, QpInput.FATAL): QpState.ERROR,
}


class WcStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    REMOTE_ACCESS_ERROR = "REMOTE_ACCESS_ERROR"  # peer refused: bad R_Key, bounds, permission
    RETRY_EXCEEDED = "RETRY_EXCEEDED"  # a packet timed out retry_limit times
    REMOTE_OP_ERROR = "REMOTE_OP_ERROR"  # peer reported a fatal protocol error (UNEXP_EVENT)
    FLUSHED = "FLUSHED"  # the QP went to ERROR before this work request finished


class QpStateError(RuntimeError):
    """An API call the QP's state does not allow (e.g. post before connect)."""


# -- events -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteCompleted:
    """Requester completion: every PSN of the write is acknowledged (or it failed)."""

    wr_id: int
    status: WcStatus
    byte_len: int
    time_s: float


@dataclass(frozen=True, slots=True)
class ImmReceived:
    """Responder completion of a write-with-immediate, delivered in the sender's order."""

    imm: int
    byte_len: int
    rqmsn: int
    time_s: float


@dataclass(frozen=True, slots=True)
class QpErrorEvent:
    """The QP entered ERROR; ``reason`` says why in words."""

    qpn: int
    status: WcStatus
    reason: str
    time_s: float


@dataclass(frozen=True, slots=True)
class PeerPortStatus:
    """The peer reported its port up/down mask (bit p = port p up)."""

    port_mask: int
    time_s: float


Event = WriteCompleted | ImmReceived | QpErrorEvent | PeerPortStatus | EvStateChanged


# -- configuration and attributes ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QpConfig:
    """Per-QP knobs.  Times are seconds; defaults suit the 1/1000-scale lab (ms RTTs)."""

    mtu_bytes: int = 4096
    ev: EvConfig = field(default_factory=EvConfig)
    cc: str = "nscc"
    cc_options: tuple[tuple[str, object], ...] = ()
    window_psns: int = 65536  # responder tracking window (power of two)
    ack_every: int = 4
    ack_delay_s: float | None = None  # default base_rtt_s / 8
    base_rtt_s: float = 1e-3  # unloaded RTT estimate (CC target and first RTO)
    min_rto_s: float | None = None  # default 2 * base_rtt_s
    max_rto_s: float = 1.0
    retry_limit: int = 7
    probe_interval_s: float | None = None  # default: the current RTO
    max_wimm_inflight: int = 64
    seed: int = 1
    start_psn: int | None = None  # default: random from the seed


@dataclass(frozen=True, slots=True)
class PortAddr:
    """One local port (= one plane): its MAC and the MAC of the T0 port it is wired to."""

    mac: bytes
    peer_mac: bytes


@dataclass(frozen=True, slots=True)
class NetConfig:
    """Where this QP's host sits in the fabric: the Clos shape, its host index, its ports."""

    shape: usid.ClosShape
    host: int
    ports: tuple[PortAddr, ...]


@dataclass(frozen=True, slots=True)
class QpAttributes:
    """What a peer needs to connect (exchanged out of band; see :meth:`to_json`)."""

    qpn: int
    host: int
    start_psn: int
    window_psns: int
    max_wimm_inflight: int
    mtu_bytes: int

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> QpAttributes:
        d = json.loads(text)
        try:
            attrs = cls(**{k: int(d[k]) for k in cls.__dataclass_fields__})
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"bad QP attributes: {e}") from None
        if not 0 < attrs.qpn <= PSN_MASK or not 0 <= attrs.start_psn <= PSN_MASK:
            raise ValueError("bad QP attributes: qpn/start_psn out of range")
        if attrs.window_psns < 64 or attrs.max_wimm_inflight < 1 or attrs.mtu_bytes < 1:
            raise ValueError("bad QP attributes: window/max_wimm_inflight/mtu out of range")
        return attrs


@dataclass(slots=True)
class QpStats:
    tx_data_packets: int = 0
    tx_data_bytes: int = 0
    retransmissions: int = 0
    rx_data_packets: int = 0
    rx_duplicates: int = 0
    rx_trimmed: int = 0
    rx_ecn_marked: int = 0
    rx_placed_bytes: int = 0
    tx_sacks: int = 0
    tx_nacks: int = 0
    rx_sacks: int = 0
    rx_nacks: int = 0
    timeouts: int = 0
    spurious_timeouts: int = 0  # timed out, but the original transmission was acknowledged
    probes_sent: int = 0
    rx_malformed: int = 0
    rx_refused: int = 0
    completions: int = 0
    cwnd_bytes: float = 0.0
    srtt_s: float = 0.0
    rto_s: float = 0.0


class _Message:
    __slots__ = (
        "wr_id",
        "buf",
        "length",
        "remote_va",
        "rkey",
        "imm",
        "msn",
        "rqmsn",
        "next_off",
        "last_psn",
        "done",
    )

    def __init__(self, wr_id, buf, remote_va, rkey, imm, msn, rqmsn) -> None:  # noqa: ANN001
        self.wr_id = wr_id
        self.buf = buf
        self.length = len(buf)
        self.remote_va = remote_va
        self.rkey = rkey
        self.imm = imm
        self.msn = msn
        self.rqmsn = rqmsn
        self.next_off = 0
        self.last_psn = -1  # set when the last packet is built
        self.done = False


def peek_dest_qp(frame: bytes | memoryview) -> int | None:
    """Destination QP number of an MRC frame (for demultiplexing), or None if not MRC."""
    if len(frame) < _OFF_BTH + 12 or frame[12] != 0x86 or frame[13] != 0xDD:
        return None
    if frame[20] != 17 or frame[56] != 0x12 or frame[57] != 0xB7:  # UDP to port 4791
        return None
    return int.from_bytes(frame[_OFF_BTH + 5 : _OFF_BTH + 8], "big")


class QueuePair:
    """One MRC connection endpoint (requester + responder)."""

    def __init__(
        self,
        qpn: int,
        net: NetConfig,
        memory: MemoryTable,
        line_rate_bps: float,
        config: QpConfig | None = None,
    ) -> None:
        cfg = config or QpConfig()
        if not 0 < qpn <= PSN_MASK or qpn == wire.EV_PROBE_QPN:
            raise ValueError(f"qpn {qpn} is not a usable QP number")
        if len(net.ports) != net.shape.planes:
            raise ValueError(f"need one port per plane: {len(net.ports)} != {net.shape.planes}")
        self.qpn = qpn
        self.net = net
        self.config = cfg
        self.memory = memory
        self.state = QpState.INIT
        self.planes = net.shape.planes
        self.mtu = cfg.mtu_bytes
        self.evs = EvTable(net.shape.planes, net.shape.t1, cfg.ev, seed=cfg.seed * 7919 + qpn)
        self.cc: CongestionControl = make_cc(
            cfg.cc,
            CcParams(cfg.mtu_bytes, line_rate_bps, cfg.base_rtt_s, line_rate_bps / self.planes),
            **dict(cfg.cc_options),
        )
        start = cfg.start_psn
        if start is None:
            start = (cfg.seed * 2654435761 + qpn * 40503) & PSN_MASK
        self.start_psn = start
        self.rxwin = ResponderWindow(cfg.window_psns, 0, cfg.ack_every)  # reset on connect
        self.sb = Scoreboard(start)
        self.stats = QpStats()
        self._events: deque[Event] = deque()
        self._ctrl: list[tuple[int, bytes]] = []
        self._rtxq: deque[TxRecord] = deque()
        self._sendq: deque[_Message] = deque()  # not fully segmented yet
        self._inflight_msgs: deque[_Message] = deque()  # segmented (partly), not completed
        self._msn = 0
        self._rqmsn = 0
        self._wimm_outstanding = 0
        self._min_rto = cfg.min_rto_s if cfg.min_rto_s is not None else 2 * cfg.base_rtt_s
        self._srtt: float | None = None
        self._rttvar = 0.0
        self._rtt_peak = 0.0  # recent RTT tail (fast attack, slow release)
        self._min_rtt = cfg.base_rtt_s  # smallest data RTT measured (configured until then)
        self._rtt_measured = False
        self._rto = max(self._min_rto, INITIAL_RTO_RTTS * cfg.base_rtt_s)
        self._ack_delay = cfg.ack_delay_s if cfg.ack_delay_s is not None else cfg.base_rtt_s / 8
        self._ack_deadline: float | None = None
        self._ack_trigger = (0, 0, 0, False)  # psn, ev, ts, ce of the last unacked packet
        self._ce_run: dict[int, int] = {}  # responder: consecutive CE-marked packets per EV
        self._local_down = [False] * self.planes
        self._peer_down = [False] * self.planes
        self._port_seq = 0
        # responder message state
        self._rx_msg_bytes: dict[int, int] = {}  # msn -> bytes placed so far
        self._rx_imm_done: dict[int, tuple[int, int]] = {}  # rqmsn -> (imm, length), held back
        self._rx_imm_pending: dict[int, tuple[int, int, int]] = {}  # msn -> (rqmsn, imm, length)
        self._rx_rqmsn = 0
        # peer, filled by connect()
        self.peer: QpAttributes | None = None
        self._dest: usid.DestTemplate | None = None
        self._prefix: dict[int, tuple[bytes, int, bytes, bytes]] = {}
        self._slot_prefix: list[tuple[bytes, int, bytes, bytes]] = []
        self._ip_src = [usid.host_address(net.shape, net.host, p) for p in range(self.planes)]

    # -- setup --------------------------------------------------------------------------------

    def local_attributes(self) -> QpAttributes:
        return QpAttributes(
            qpn=self.qpn,
            host=self.net.host,
            start_psn=self.start_psn,
            window_psns=self.config.window_psns,
            max_wimm_inflight=self.config.max_wimm_inflight,
            mtu_bytes=self.mtu,
        )

    def connect(self, remote: QpAttributes) -> None:
        self._transition(QpInput.CONNECT)
        if remote.host == self.net.host:
            raise ValueError("loopback QPs (same host) are not supported")
        self.peer = remote
        self.rxwin = ResponderWindow(
            self.config.window_psns, remote.start_psn, self.config.ack_every
        )
        self._dest = usid.DestTemplate(self.net.shape, self.net.host, remote.host)
        self._slot_prefix = [self._make_prefix(ev) for ev in self.evs.ev_values]

    def _transition(self, inp: QpInput) -> None:
        try:
            self.state = QP_TRANSITIONS[(self.state, inp)]
        except KeyError:
            raise QpStateError(
                f"QP {self.qpn}: {inp.name} not allowed in {self.state.name}"
            ) from None

    def _make_prefix(self, ev: int) -> tuple[bytes, int, bytes, bytes]:
        """(Ethernet+IPv6+UDP prefix, flow-label word, ip_src, final_dst) for one EV."""
        cached = self._prefix.get(ev)
        if cached is not None:
            return cached
        assert self._dest is not None
        plane = ev % self.planes
        port = self.net.ports[plane]
        sport, flow = wire.ev_to_udp_flow(ev)
        dst = self._dest.address(ev)
        final = self._dest.final(ev)
        src = self._ip_src[plane]
        pre = (
            port.peer_mac
            + port.mac
            + b"\x86\xdd"
            + struct.pack(">IHBB", 0x60000000 | flow, 0, 17, wire.DEFAULT_HOP_LIMIT)
            + src
            + dst
            + struct.pack(">HHHH", sport, wire.MRC_UDP_PORT, 0, 0)
        )
        out = (pre, 0x60000000 | flow, src, final)
        self._prefix[ev] = out
        return out

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
        if self.state is not QpState.READY:
            raise QpStateError(f"QP {self.qpn} is {self.state.name}: cannot post")
        if imm is not None and not 0 <= imm <= 0xFFFFFFFF:
            raise ValueError("imm must be a 32-bit unsigned value")
        if not 0 <= remote_va < 1 << 64 or not 0 <= rkey <= 0xFFFFFFFF:
            raise ValueError("remote_va must fit 64 bits and rkey 32 bits")
        buf = memoryview(local).cast("B") if not isinstance(local, bytes) else memoryview(local)
        if len(buf) >= 1 << 32:
            raise ValueError("a single write is limited to 4 GiB - 1 (RETH length is 32 bits)")
        msg = _Message(wr_id, buf, remote_va, rkey, imm, self._msn, self._rqmsn)
        self._msn = (self._msn + 1) & 0xFFFF
        if imm is not None:
            self._rqmsn = (self._rqmsn + 1) & 0xFFFF
        self._sendq.append(msg)

    def port_status(self, port: int, up: bool, now_s: float) -> None:
        """A local port went down or came back: take the plane out at once, tell the peer."""
        if self._local_down[port] == (not up):
            return
        self._local_down[port] = not up
        self.evs.now_s = now_s
        self._update_plane(port, now_s)
        if not up:  # everything in flight on that port is gone: repair it now
            for rec in list(self.sb.records.values()):
                if not rec.lost and self.evs.plane_of[rec.slot] == port:
                    self.sb.mark_lost(rec)
                    self._rtxq.append(rec)
        self._drain_ev_events()
        if self.state is QpState.READY:
            self._port_seq += 1
            mask = sum(1 << p for p in range(self.planes) if not self._local_down[p])
            body = _ENDPOINT.pack(int(wire.EndpointKind.PORT_STATUS), self._port_seq, 0, mask, 0)
            for _ in range(2):  # twice, on two different planes: it must get through
                self._queue_ctrl(_OP_EP_REQ, 0, body)

    def _update_plane(self, plane: int, now_s: float) -> None:
        self.evs.set_plane_down(plane, self._local_down[plane] or self._peer_down[plane], now_s)

    def deny_ev(self, ev: int, now_s: float) -> None:
        self._api_ev(ev, EvInput.DENY, now_s)

    def allow_ev(self, ev: int, now_s: float) -> None:
        self._api_ev(ev, EvInput.ALLOW, now_s)

    def _api_ev(self, ev: int, inp: EvInput, now_s: float) -> None:
        slot = self.evs.slot_of.get(ev)
        if slot is None:
            raise ValueError(f"EV {ev:#x} is not one of QP {self.qpn}'s EVs")
        self.evs.now_s = now_s
        self.evs.apply(slot, inp, now_s)
        self._drain_ev_events()

    def ev_states(self) -> dict[str, int]:
        return self.evs.counts()

    def get_stats(self) -> QpStats:
        s = self.stats
        s.cwnd_bytes = self.cc.cwnd_bytes
        s.srtt_s = self._srtt or 0.0
        s.rto_s = self._rto
        return s

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    @property
    def idle(self) -> bool:
        """Nothing posted is unfinished."""
        return not self._sendq and not self._inflight_msgs

    # -- timers -------------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """The earliest deadline (retransmission, delayed ACK, probe), or None."""
        if self.state is not QpState.READY:
            return None
        t = self.sb.next_deadline()
        a = self._ack_deadline
        if a is not None and (t is None or a < t):
            t = a
        p = self.evs.next_probe_s()
        if p is not None and (t is None or p < t):
            t = p
        return t

    def handle_timer(self, now_s: float) -> None:
        self.evs.now_s = now_s
        if self._ack_deadline is not None and self._ack_deadline <= now_s:
            self._ack_deadline = None
            psn, ev, ts, ce = self._ack_trigger
            if self.rxwin.pending:
                self._send_sack(psn, ev, ts, ce, ev % self.planes)
        if self.state is not QpState.READY:
            return
        max_rto = self.config.max_rto_s
        for rec in self.sb.expired(now_s):
            # the deadline was set with the RTO of its send time: if the RTO has grown since
            # (the queues grew), the packet gets the current one
            rto = self._rto * (1 << rec.retries)
            deadline = rec.sent_s + (rto if rto < max_rto else max_rto)
            if deadline > now_s:
                self.sb.arm(rec, deadline)
                continue
            if rec.retries >= self.config.retry_limit:
                self._fatal(
                    WcStatus.RETRY_EXCEEDED,
                    f"PSN {rec.psn} unacknowledged after {rec.retries} retransmissions "
                    f"(retry_limit {self.config.retry_limit})",
                    now_s,
                    failed=rec.msg,
                )
                return
            self.stats.timeouts += 1
            # a path that acknowledged anything in the last half RTO is queued, not dead
            self.evs.on_timeout(rec.slot, rec.sent_s, now_s, 0.5 * self._rto)
            rec.to_sent_s = rec.sent_s
            rec.to_slot = rec.slot
            rec.to_ts_ns = rec.tx_ts_ns
            rec.retries += 1
            self.sb.mark_lost(rec)
            self._rtxq.append(rec)
            self.cc.on_timeout(now_s)
        interval = self.config.probe_interval_s or self._rto
        ts_ns = int(now_s * 1e9)
        for slot in self.evs.due_probes(now_s, interval, ts_ns):
            ev = self.evs.ev_values[slot]
            body = _RPROBE.pack(slot, ev, ts_ns)
            self._ctrl.append(self._ctrl_frame(_OP_RPROBE, 0, body, ev))
            self.stats.probes_sent += 1
        self._drain_ev_events()

    # -- sending --------------------------------------------------------------------------------

    def frames_to_send(self, now_s: float) -> list[tuple[int, bytes]]:
        """Everything that may leave now: control first, then retransmissions, then new data
        while the window allows.  The port index is the plane of the frame's EV."""
        out = self._ctrl
        self._ctrl = []
        if self.state is not QpState.READY:
            return out
        self.evs.now_s = now_s
        sb = self.sb
        cc = self.cc
        mtu = self.mtu
        window = self.peer.window_psns if self.peer else 0
        rtxq = self._rtxq
        deferred: list[TxRecord] = []
        while rtxq and sb.inflight_bytes < cc.cwnd_bytes:
            rec = rtxq.popleft()
            if rec.psn not in sb.records or not rec.lost:
                continue
            if ((rec.psn - sb.snd_una) & PSN_MASK) >= window:
                deferred.append(rec)  # beyond the peer's tracking window (PSN_OOR_WINDOW): later
                continue
            frame = self._send_record(rec, now_s, rtx=True)
            if frame is None:
                rtxq.appendleft(rec)
                break
            out.append(frame)
        if deferred:
            rtxq.extendleft(reversed(deferred))
        sendq = self._sendq
        wimm_max = self.peer.max_wimm_inflight if self.peer else 0
        while sendq and sb.inflight_bytes < cc.cwnd_bytes and sb.outstanding() < window - 1:
            msg = sendq[0]
            if msg.next_off == 0:
                if msg.imm is not None:
                    if self._wimm_outstanding >= wimm_max:
                        break
                    self._wimm_outstanding += 1
                self._inflight_msgs.append(msg)
            off = msg.next_off
            n = min(mtu, msg.length - off)
            first = off == 0
            last = off + n >= msg.length
            if first and last:
                op = _OP_ONLY if msg.imm is None else _OP_ONLY_IMM
            elif first:
                op = _OP_FIRST
            elif last:
                op = _OP_LAST if msg.imm is None else _OP_LAST_IMM
            else:
                op = _OP_MIDDLE
            rec = TxRecord(sb.snd_nxt, msg, off, n, op)
            frame = self._send_record(rec, now_s, rtx=False)
            if frame is None:
                if first:  # undo the start bookkeeping; retry later
                    self._inflight_msgs.pop()
                    if msg.imm is not None:
                        self._wimm_outstanding -= 1
                break
            sb.add(rec)
            out.append(frame)
            msg.next_off = off + n
            if last:
                msg.last_psn = rec.psn
                sendq.popleft()
        return out

    def _send_record(self, rec: TxRecord, now_s: float, rtx: bool) -> tuple[int, bytes] | None:
        evs = self.evs
        slot = evs.pick(rec.slot if rtx else -1)
        if slot < 0:
            return None
        ts_ns = int(now_s * 1e9) or 1  # 0 means "no timestamp" in a SACK: a clock at 0 is 1 ns
        frame = self._data_frame(rec, slot, ts_ns, rtx)
        rec.slot = slot
        rec.sent_s = now_s
        rec.tx_ts_ns = ts_ns
        evs.tx_packets[slot] += 1
        st = self.stats
        if rtx:
            self.sb.resent(rec)
            rec.ever_rtx = True
            st.retransmissions += 1
        else:
            st.tx_data_packets += 1
            st.tx_data_bytes += rec.length
        rto = self._rto * (1 << rec.retries)
        self.sb.arm(rec, now_s + (rto if rto < self.config.max_rto_s else self.config.max_rto_s))
        return (evs.plane_of[slot], frame)

    def _data_frame(self, rec: TxRecord, slot: int, ts_ns: int, rtx: bool) -> bytes:
        msg = rec.msg
        pre, w0, src, final = self._slot_prefix[slot]
        n = rec.length
        op = rec.opcode
        imm = op in (_OP_LAST_IMM, _OP_ONLY_IMM)
        hdr_end = _PREFIX + 40 + (4 if imm else 0)
        total = hdr_end + n + 4
        mrc_len = total - _PREFIX
        buf = bytearray(total)
        buf[:_PREFIX] = pre
        dscp = 8 if rtx else 4  # TRIMMABLE_RETX / TRIMMABLE
        _IPW0_PLEN.pack_into(buf, _OFF_IP, w0 | dscp << 22 | 2 << 20, mrc_len + 8)  # ECT0
        _U16.pack_into(buf, _OFF_ULEN, mrc_len + 8)
        last = op != _OP_FIRST and op != _OP_MIDDLE
        _DATA_HDR.pack_into(
            buf,
            _OFF_BTH,
            op,
            0,
            0xFFFF,
            (_TS_BIT | _RTX_BIT if rtx else _TS_BIT) << 24 | self.peer.qpn,
            (_ACKREQ if last else 0) | rec.psn,
            msg.msn,
            msg.rqmsn,
            ts_ns,
            msg.remote_va + rec.offset,
            msg.rkey,
            msg.length,
        )
        if imm:
            _IMM.pack_into(buf, _PREFIX + 40, msg.imm)
        if n:
            buf[hdr_end : hdr_end + n] = msg.buf[rec.offset : rec.offset + n]
        _U32.pack_into(buf, total - 4, zlib.crc32(memoryview(buf)[_OFF_BTH : total - 4]))
        _U16.pack_into(buf, _OFF_UCSUM, fast.udp6_checksum(src, final, memoryview(buf)[_OFF_UDP:]))
        return bytes(buf)

    def _ctrl_frame(self, op: int, psn: int, body: bytes, ev: int) -> tuple[int, bytes]:
        pre, w0, src, final = self._make_prefix(ev)
        total = _PREFIX + 12 + len(body) + 4
        buf = bytearray(total)
        buf[:_PREFIX] = pre
        _IPW0_PLEN.pack_into(buf, _OFF_IP, w0 | 46 << 22 | 2 << 20, total - _OFF_UDP)  # CONTROL
        _U16.pack_into(buf, _OFF_ULEN, total - _OFF_UDP)
        _BTH.pack_into(buf, _OFF_BTH, op, 0, 0xFFFF, self.peer.qpn, psn)
        buf[_OFF_BTH + 12 : total - 4] = body
        _U32.pack_into(buf, total - 4, zlib.crc32(memoryview(buf)[_OFF_BTH : total - 4]))
        _U16.pack_into(buf, _OFF_UCSUM, fast.udp6_checksum(src, final, memoryview(buf)[_OFF_UDP:]))
        return (ev % self.planes, bytes(buf))

    def _queue_ctrl(self, op: int, psn: int, body: bytes, plane: int = -1) -> None:
        """Queue a control frame: on ``plane`` (the plane the packet being answered came in
        on) or, with -1, round robin over the reverse EVs of every live plane."""
        if self.peer is None:
            return
        evs = self.evs
        ev = evs.next_reverse_ev() if plane < 0 else evs.reverse_ev_on(plane)
        self._ctrl.append(self._ctrl_frame(op, psn, body, ev))

    # -- receiving ------------------------------------------------------------------------------

    def receive_frame(self, data: bytes | bytearray | memoryview, now_s: float) -> None:
        """Process one received Ethernet frame addressed to this QP."""
        if self.peer is None or self.state is QpState.ERROR:
            return
        n = len(data)
        if n < _OFF_BTH + 12:
            self.stats.rx_malformed += 1
            return
        ethertype, w0, plen, nh, _hop = _RX_HEAD.unpack_from(data, 12)
        end = _OFF_UDP + plen
        if ethertype != 0x86DD or w0 >> 28 != 6 or nh != 17 or end > n or plen < 20:
            self.stats.rx_malformed += 1
            return
        self.evs.now_s = now_s
        op = data[_OFF_BTH]
        if _OP_FIRST <= op <= _OP_ONLY_IMM:
            self._rx_data(data, end, w0, op, now_s)
        else:
            self._rx_control(data, end, w0, now_s)
        if self.evs.events:
            self._drain_ev_events()

    def _rx_data(self, data, end: int, w0: int, op: int, now_s: float) -> None:  # noqa: ANN001
        st = self.stats
        dscp = (w0 >> 22) & 0x3F
        trimmed = dscp in (_DSCP_TRIMMED, _DSCP_TRIMMED_LH)
        imm = op in (_OP_LAST_IMM, _OP_ONLY_IMM)
        hdr_end = _PREFIX + 40 + (4 if imm else 0)
        if end < hdr_end + (0 if trimmed else 4):
            st.rx_malformed += 1
            return
        if not trimmed:
            icrc = _U32.unpack_from(data, end - 4)[0]
            if zlib.crc32(memoryview(data)[_OFF_BTH : end - 4]) != icrc:
                st.rx_malformed += 1
                return
        (_op, _b1, _pkey, w1, w2, msn, rqmsn, ts_ns, va, rkey, length) = _RX_DATA.unpack_from(
            data, _OFF_BTH
        )
        if w1 & 0xFFFFFF != self.qpn:
            st.rx_malformed += 1
            return
        psn = w2 & PSN_MASK
        ev = _U16.unpack_from(data, _OFF_UDP)[0] << 16 | (w0 & 0xFFFF)
        ce = (w0 >> 20) & 3 == 3
        st.rx_data_packets += 1
        if ce:
            st.rx_ecn_marked += 1
        rxw = self.rxwin
        win = rxw.win
        if trimmed:
            st.rx_trimmed += 1
            reason = (
                wire.NackReason.TRIMMED
                if dscp == _DSCP_TRIMMED
                else wire.NackReason.TRIMMED_LASTHOP
            )
            if not win.test(psn):
                self._send_nack(int(reason), psn, ev, ts_ns, ev % self.planes)
            return
        d = (psn - win.expected_psn) & PSN_MASK
        if d < _HALF and d >= rxw.size:
            self._send_nack(int(wire.NackReason.PSN_OOR_WINDOW), psn, ev, ts_ns, ev % self.planes)
            return
        if d >= _HALF or win.test(psn):
            st.rx_duplicates += 1
            self._send_sack(psn, ev, ts_ns, ce, ev % self.planes, twice=True)  # rule 2
            return
        payload = memoryview(data)[hdr_end : end - 4]
        status = self.memory.place(rkey, va, payload)
        if status is not PlaceStatus.OK:
            st.rx_refused += 1
            self._send_nack(int(wire.NackReason.REMOTE_ACCESS_ERROR), psn, ev, ts_ns, -1)
            return
        mark = rxw.receive(psn)
        assert mark == MARK_NEW
        plen = end - 4 - hdr_end
        st.rx_placed_bytes += plen
        rxw.received_bytes += plen
        # message accounting: completion when every byte of the message is placed
        got = self._rx_msg_bytes.get(msn, 0) + plen
        if imm:
            if self._rx_imm_check(rqmsn, now_s):
                return
            self._rx_imm_pending[msn] = (rqmsn, _IMM.unpack_from(data, _PREFIX + 40)[0], length)
        if got >= length:
            self._rx_msg_bytes.pop(msn, None)
            pend = self._rx_imm_pending.pop(msn, None)
            if pend is not None:
                self._rx_imm_complete(pend, now_s)
        else:
            self._rx_msg_bytes[msn] = got
        # the ALWAYS_SKIP heuristic: a run of CE marks on one EV
        if ce:
            run = self._ce_run.get(ev, 0) + 1
            self._ce_run[ev] = run
            rxw.ece_pending = True
        elif self._ce_run:
            self._ce_run.pop(ev, None)
        rtx = bool(w1 & (_RTX_BIT << 24))
        if rxw.wants_ack(MARK_NEW, ce, bool(w2 & _ACKREQ), rtx):
            self._send_sack(psn, ev, ts_ns, ce, ev % self.planes, twice=rtx)
        else:
            self._ack_trigger = (psn, ev, ts_ns, ce)
            if self._ack_deadline is None:
                self._ack_deadline = now_s + self._ack_delay

    def _rx_imm_check(self, rqmsn: int, now_s: float) -> bool:
        """A write-with-immediate beyond max_wimm_inflight is a protocol violation: fatal."""
        ahead = (rqmsn - self._rx_rqmsn) & 0xFFFF
        if ahead >= self.config.max_wimm_inflight and ahead < 0x8000:
            self._send_nack(int(wire.NackReason.UNEXP_EVENT), 0, 0, 0, -1)
            self._fatal(
                WcStatus.REMOTE_OP_ERROR,
                f"peer has {ahead + 1} write-with-immediate messages in flight, "
                f"max_wimm_inflight is {self.config.max_wimm_inflight}",
                now_s,
            )
            return True
        return False

    def _rx_imm_complete(self, pend: tuple[int, int, int], now_s: float) -> None:
        rqmsn, imm, length = pend
        self._rx_imm_done[rqmsn] = (imm, length)
        done = self._rx_imm_done
        while self._rx_rqmsn in done:  # deliver in sender order, holding early ones back
            imm, length = done.pop(self._rx_rqmsn)
            self._events.append(ImmReceived(imm, length, self._rx_rqmsn, now_s))
            self._rx_rqmsn = (self._rx_rqmsn + 1) & 0xFFFF

    def _send_sack(
        self,
        psn: int,
        ev: int,
        ts_ns: int,
        ce: bool,
        plane: int,
        op: int = _OP_SACK,
        twice: bool = False,
    ) -> None:
        """Queue a SACK about ``psn`` on ``plane`` (-1: round robin).  ``twice`` (for
        duplicates and retransmissions: the requester is repairing, maybe because our ACKs
        are lost) sends a copy on another live plane too: the arrival plane is alive one
        way, and the other copy survives a failure of its way back."""
        rxw = self.rxwin
        ece = ce or rxw.ece_pending
        f = rxw.sack_fields(psn)
        if ce and self._ce_run.get(ev, 0) >= 8:
            mark = int(wire.SackMark.ALWAYS_SKIP)
        elif ce:
            mark = int(wire.SackMark.SKIP_ONCE)
        else:
            mark = 0
        w0 = mark << 30 | (0x20000000 if ece else 0) | f.cack_psn
        body = _SACK.pack(
            w0, f.sack_offset, rxw.penalty(), f.bitmap, ev, f.ooo_count, ts_ns, f.received_bytes
        )
        self._ack_deadline = None
        self.stats.tx_sacks += 1
        self._queue_ctrl(op, f.cack_psn, body, plane)
        if twice and plane >= 0:
            evs = self.evs
            for _ in range(len(evs.reverse)):
                other = evs.next_reverse_ev()
                if other % self.planes != plane:
                    self._ctrl.append(self._ctrl_frame(op, f.cack_psn, body, other))
                    break

    def _send_nack(self, reason: int, psn: int, ev: int, ts_ns: int, plane: int) -> None:
        body = _NACK.pack(reason << 24 | psn, ev, self.rxwin.win.cack_psn, ts_ns)
        self.stats.tx_nacks += 1
        self._queue_ctrl(_OP_NACK, psn, body, plane)

    def _rx_control(self, data, end: int, w0: int, now_s: float) -> None:  # noqa: ANN001
        try:
            pkt = wire.decode_mrc(memoryview(data)[_OFF_BTH:end])
        except wire.WireError:
            self.stats.rx_malformed += 1
            return
        if pkt.bth.dest_qp != self.qpn:
            self.stats.rx_malformed += 1
            return
        op = pkt.bth.opcode
        if op in (_OP_SACK, _OP_ACK):
            self._rx_sack(pkt.sack, op == _OP_ACK, now_s)
        elif op == _OP_NACK:
            self._rx_nack(pkt.nack, now_s)
        elif op == _OP_RPROBE:
            # answer with an ACK (0xD1, the SACK body) echoing the probed EV and timestamp
            ce = (w0 >> 20) & 3 == 3
            probe = pkt.probe
            plane = probe.ev % self.planes
            self._send_sack(self.rxwin.win.cack_psn, probe.ev, probe.tx_ts_ns, ce, plane, _OP_ACK)
        elif op == _OP_EP_REQ and pkt.endpoint.kind == wire.EndpointKind.PORT_STATUS:
            mask = pkt.endpoint.port_mask
            for p in range(self.planes):
                down = not (mask >> p) & 1
                if self._peer_down[p] != down:
                    self._peer_down[p] = down
                    self._update_plane(p, now_s)
            self._events.append(PeerPortStatus(mask, now_s))
        else:
            self.stats.rx_malformed += 1

    def _rx_sack(self, s: wire.SACK, is_probe_answer: bool, now_s: float) -> None:
        st = self.stats
        st.rx_sacks += 1
        evs = self.evs
        acked = self.sb.on_sack(s.cack_psn, s.sack_offset, s.bitmap)
        acked_bytes = 0
        for rec in acked:
            if rec.to_sent_s >= 0 and self._spurious(rec, s, now_s):
                # the timed-out original got through, not the retransmission: credit its path
                evs.note_delivered(rec.to_slot, rec.to_sent_s)
            else:
                evs.note_delivered(rec.slot, rec.sent_s)
            acked_bytes += rec.length
        rtt = None
        # A probe's answer times a small high-priority packet, not data: it would drag the
        # base RTT (NSCC's queueing delay, the RTO) far below what data packets see.
        if s.reflected_ts_ns and not is_probe_answer:
            rtt = now_s - s.reflected_ts_ns * 1e-9
            if rtt > 0:
                self._rtt_sample(rtt)
            else:
                rtt = None
        slot = evs.slot_of.get(s.ev, -1)
        if is_probe_answer:
            if slot >= 0:
                evs.on_probe_answer(slot, s.reflected_ts_ns, s.mark != wire.SackMark.NONE, now_s)
        elif slot >= 0:
            if s.mark == wire.SackMark.SKIP_ONCE:
                evs.ecn_echoes[slot] += 1
                evs.apply(slot, EvInput.ECN_ECHO, now_s)
            elif s.mark == wire.SackMark.ALWAYS_SKIP:
                evs.ecn_echoes[slot] += 1
                evs.apply(slot, EvInput.ALWAYS_SKIP, now_s)
        if acked_bytes or s.ece:
            self.cc.on_ack(AckSample(acked_bytes, rtt, s.ece, now_s))
        if s.rcv_cwnd_pen:
            self.cc.on_rcv_penalty(s.rcv_cwnd_pen, now_s)
        if acked:
            self._complete_messages(now_s)

    def _rtt_sample(self, r: float) -> None:
        # RFC 6298 estimator; the reflected timestamp names one transmission, so no Karn issue.
        if self._srtt is None:
            self._srtt = r
            self._rttvar = r / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self._srtt - r)
            self._srtt = 0.875 * self._srtt + 0.125 * r
        if r < self._min_rtt or not self._rtt_measured:
            self._min_rtt = r
            self._rtt_measured = True
        peak = self._rtt_peak
        self._rtt_peak = r if r > peak else peak + (r - peak) * RTT_PEAK_RELEASE
        self._update_rto()

    def _update_rto(self) -> None:
        # Spraying makes RTTs heavy-tailed (each packet sees its own path's queue): srtt +
        # 4 rttvar alone is overtaken by the tail; the recent peak keeps the RTO above it.
        srtt = self._srtt if self._srtt is not None else 0.0
        rto = max(srtt + 4 * self._rttvar, RTO_PEAK_GAIN * self._rtt_peak)
        self._rto = min(max(rto, self._min_rto), self.config.max_rto_s)

    def _spurious(self, rec: TxRecord, s: wire.SACK, now_s: float) -> bool:
        """A PSN that timed out is acknowledged: if the SACK was triggered by the very
        transmission that timed out (its EV and timestamp), or the retransmission cannot have
        caused it (not sent yet, or sent less than half a min RTT ago), the original made it
        and the timeout was spurious.  Its delay is an RTT the estimator missed: feed it to
        the peak so the RTO covers it next time (the Eifel idea, RFC 3522)."""
        by_original = s.reflected_ts_ns == rec.to_ts_ns and s.ev == self.evs.ev_values[rec.to_slot]
        if (
            not by_original
            and not rec.lost
            and now_s - rec.sent_s >= SPURIOUS_RTT_FRACTION * self._min_rtt
        ):
            return False
        self.stats.spurious_timeouts += 1
        delay = now_s - rec.to_sent_s
        if delay > self._rtt_peak:
            self._rtt_peak = delay
            self._update_rto()
        return True

    def _complete_messages(self, now_s: float) -> None:
        msgs = self._inflight_msgs
        una = self.sb.snd_una
        while msgs:
            m = msgs[0]
            if m.last_psn < 0 or not 0 < ((una - m.last_psn) & PSN_MASK) < _HALF:
                break  # not fully sent, or its last PSN is not behind snd_una yet
            msgs.popleft()
            m.done = True
            if m.imm is not None:
                self._wimm_outstanding -= 1
            self.stats.completions += 1
            self._events.append(WriteCompleted(m.wr_id, WcStatus.SUCCESS, m.length, now_s))

    def _rx_nack(self, n: wire.NACK, now_s: float) -> None:
        st = self.stats
        st.rx_nacks += 1
        reason = n.reason
        R = wire.NackReason
        if reason == R.UNEXP_EVENT:
            self._fatal(
                WcStatus.REMOTE_OP_ERROR, "peer reported an unexpected event (UNEXP_EVENT)", now_s
            )
            return
        rec = self.sb.records.get(n.psn)
        if rec is None:
            return  # already acknowledged: stale
        if reason == R.REMOTE_ACCESS_ERROR:
            m = rec.msg
            self._fatal(
                WcStatus.REMOTE_ACCESS_ERROR,
                f"peer refused write wr_id={m.wr_id} (R_Key {m.rkey:#x}, VA {m.remote_va:#x}, "
                f"{m.length} bytes): remote access error",
                now_s,
                failed=m,
            )
            return
        if rec.lost or rec.tx_ts_ns != n.reflected_ts_ns:
            return  # about an older transmission of this PSN: already being repaired
        evs = self.evs
        if reason == R.TRIMMED or reason == R.TRIMMED_LASTHOP:
            evs.trims[rec.slot] += 1
            evs.note_delivered(rec.slot, rec.sent_s)  # a trimmed header proves the path alive
            evs.acked_packets[rec.slot] -= 1
            if reason == R.TRIMMED:
                evs.apply(rec.slot, EvInput.TRIMMED, now_s)
            self.cc.on_trim(reason == R.TRIMMED_LASTHOP, now_s)
            self.sb.mark_lost(rec)
            self._rtxq.appendleft(rec)  # repair at once, on another EV
        else:  # PSN_OOR_WINDOW, NO_BITMAP, NO_PKT_BUFFER: resend once the window allows
            if reason == R.PSN_OOR_WINDOW and self.peer is not None:
                span = (n.psn - n.cack_psn) & PSN_MASK
                if 64 <= span < self.peer.window_psns:
                    self.peer = QpAttributes(**{**asdict(self.peer), "window_psns": span})
            self.sb.mark_lost(rec)
            self._rtxq.append(rec)

    # -- errors ---------------------------------------------------------------------------------

    def _fatal(
        self, status: WcStatus, reason: str, now_s: float, failed: _Message | None = None
    ) -> None:
        if self.state is QpState.ERROR:
            return
        self._transition(QpInput.FATAL)
        self._events.append(QpErrorEvent(self.qpn, status, reason, now_s))
        seen = set()
        for m in list(self._inflight_msgs) + list(self._sendq):
            if id(m) in seen:
                continue
            seen.add(id(m))
            s = status if m is failed else WcStatus.FLUSHED
            self._events.append(WriteCompleted(m.wr_id, s, m.length, now_s))
        self._inflight_msgs.clear()
        self._sendq.clear()
        self._rtxq.clear()
        self.sb.records.clear()
        self.sb.inflight_bytes = 0

    def _drain_ev_events(self) -> None:
        evq = self.evs.events
        while evq:
            self._events.append(evq.popleft())

    def __repr__(self) -> str:
        return f"<QueuePair qpn={self.qpn} host={self.net.host} {self.state.name}>"


__all__ = [
    "Event",
    "EvState",
    "ImmReceived",
    "NetConfig",
    "PeerPortStatus",
    "PortAddr",
    "QpAttributes",
    "QpConfig",
    "QpErrorEvent",
    "QpState",
    "QpStats",
    "QueuePair",
    "WcStatus",
    "WriteCompleted",
    "peek_dest_qp",
    "MARK_DUP",
    "MARK_OOR",
]

"""The sans-I/O MRC queue pair: requester and responder in one object, like a connection.

Inputs: :meth:`QueuePair.receive_frame` (a whole Ethernet frame), :meth:`handle_timer`, the
API calls (:meth:`post_write`, :meth:`port_status`, :meth:`deny_ev`, ...).  Outputs:
:meth:`frames_to_send` (``(port_index, frame)`` pairs, honouring the congestion window),
:meth:`get_timer` (the one deadline the I/O layer must arm) and :meth:`next_event`
(completions, EV transitions, errors).  No sockets, no clocks: time is always passed in, so
the simulator (``mrcnic.sim.transfer``) and the asyncio shell drive exactly this code.

Hot paths avoid dataclasses: each EV has a precomputed template (MACs, addresses, UDP
source port, the checksum's pseudo-header sum), a frame's headers are written with one
``struct.pack_into`` into a reusable scratch buffer, and the payload is copied once, from
the caller's buffer straight into the frame (``bytes.join``).  The ICRC and the UDP
checksum are chained over header and payload (``zlib.crc32``'s running value; the one's
complement sum, which is the byte string's value modulo 0xFFFF, plus ``fast.csum_partial``
over the payload), so the frame never exists as an intermediate buffer.  Received SACKs are
decoded with ``struct.unpack_from`` at fixed offsets.  ``tests/unit/test_qp_frames.py``
checks the bytes against ``mrcnic.wire``.  Constants and their reasons: docs/transport.md.
"""

from __future__ import annotations

import enum
import json
import struct
import zlib
from collections import deque
from dataclasses import asdict, dataclass, field
from heapq import heappush

from mrcnic import fast, wire
from mrcnic.errors import MrcError
from mrcnic.transport.cc import CcParams, CongestionControl, make_cc, new_ack_sample
from mrcnic.transport.ev import EvConfig, EvInput, EvState, EvStateChanged, EvTable
from mrcnic.transport.memory import MemoryTable, PlaceStatus
from mrcnic.transport.sack import (
    MARK_DUP,
    MARK_NEW,
    MARK_OOR,
    ResponderWindow,
    Scoreboard,
    TxRecord,
)
from mrcnic.wire import layout, usid

PSN_MASK = layout.PSN_MASK
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

# -- frame layout (offsets in a whole Ethernet frame; the facts are mrcnic.wire.layout's) ------
_OFF_UDP = layout.OFF_UDP
_OFF_UCSUM = layout.OFF_UDP_CHECKSUM
_OFF_BTH = layout.OFF_BTH
# Ethernet, IPv6, UDP, BTH, METH, TS, RETH (102 bytes), and the same + ImmDt (106 bytes)
_FRAME_DATA = struct.Struct(">6s6sHIHBB16s16sHHHHBBHIIHHQQII")
_FRAME_DATA_IMM = struct.Struct(">6s6sHIHBB16s16sHHHHBBHIIHHQQIII")
_FRAME_CTRL = struct.Struct(">6s6sHIHBB16s16sHHHHBBHII")  # Ethernet .. BTH (74 bytes)
_SACK_BODY = "IHBxQIH2xQQ"  # wire.SACK (40 bytes)
_FRAME_SACK = struct.Struct(_FRAME_CTRL.format + _SACK_BODY)  # Ethernet .. SACK body
_CTRL_MAX_BODY = layout.SACK_SIZE  # the largest control body
_IMM = struct.Struct(">I")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_NACK = struct.Struct(">IIIQ")
_RPROBE = struct.Struct(">IIQ")
_ENDPOINT = struct.Struct(">B3xIIIQ")
_RX_HEAD = struct.Struct(">HIHBB")  # at 12: ethertype, ip w0, payload length, next header, hop
_RX_DATA = struct.Struct(">IIHHQQII")  # at 66: BTH words 1-2, METH, TS, RETH
_RX_SACK = struct.Struct(">IIIHBxQIH2xQQ")  # at 66: BTH words 1-2, the SACK body
_SACK_FRAME_END = _OFF_BTH + layout.BTH_SIZE + layout.SACK_SIZE + layout.ICRC_SIZE

_TS_BIT = layout.BTH_FLAG_TS
_RTX_BIT = layout.BTH_FLAG_RTX
_ACKREQ = layout.BTH_ACKREQ
_O = layout.Opcode
_OP_FIRST, _OP_MIDDLE, _OP_LAST = int(_O.WRITE_FIRST), int(_O.WRITE_MIDDLE), int(_O.WRITE_LAST)
_OP_LAST_IMM, _OP_ONLY, _OP_ONLY_IMM = (
    int(_O.WRITE_LAST_IMM), int(_O.WRITE_ONLY), int(_O.WRITE_ONLY_IMM)
)  # fmt: skip
_OP_ACK, _OP_EP_REQ, _OP_EP_RESP = int(_O.ACK), int(_O.EP_REQUEST), int(_O.EP_RESPONSE)
_OP_SACK, _OP_NACK, _OP_RPROBE = int(_O.SACK), int(_O.NACK), int(_O.RPROBE)
del _O
# the hot paths test "op in [first, only_imm]" and "op < last" on these: hold them to the layout
assert frozenset(range(_OP_FIRST, _OP_ONLY_IMM + 1)) == layout.MRC_DATA_OPS
_DSCP_DATA_ECT0 = (
    int(wire.Dscp.TRIMMABLE) << layout.DSCP_SHIFT | int(wire.Ecn.ECT0) << layout.ECN_SHIFT
)
_DSCP_CTRL_ECT0 = (
    int(wire.Dscp.CONTROL) << layout.DSCP_SHIFT | int(wire.Ecn.ECT0) << layout.ECN_SHIFT
)
_PLACE_OK = PlaceStatus.OK
_MARK_SKIP_ONCE = int(wire.SackMark.SKIP_ONCE)
_MARK_ALWAYS_SKIP = int(wire.SackMark.ALWAYS_SKIP)
_crc32 = zlib.crc32
_from_bytes = int.from_bytes
_csum_partial = fast.csum_partial
_DSCP_TRIMMED = int(wire.Dscp.TRIMMED)
_DSCP_TRIMMED_LH = int(wire.Dscp.TRIMMED_LASTHOP)
_DSCPS_TRIMMED = layout.TRIMMED_DSCPS
_IMM_OPS = layout.MRC_IMM_OPS


#: see QueuePair._make_tmpl
_Template = tuple[bytes, bytes, int, bytes, bytes, int, int]


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


class QpStateError(MrcError, RuntimeError):
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


def check_qp_args(qpn: int, net: NetConfig) -> None:
    """What every transport checks of a new QP's number and ports."""
    if not 0 < qpn <= PSN_MASK or qpn == wire.EV_PROBE_QPN:
        raise ValueError(f"qpn {qpn} is not a usable QP number")
    if len(net.ports) != net.shape.planes:
        raise ValueError(f"need one port per plane: {len(net.ports)} != {net.shape.planes}")


def default_start_psn(seed: int, qpn: int) -> int:
    """The first PSN when the config gives none: spread over the PSN space by seed and QPN."""
    return (seed * 2654435761 + qpn * 40503) & PSN_MASK


def next_state(qpn: int, state: QpState, inp: QpInput) -> QpState:
    """The QP state after ``inp`` (QP_TRANSITIONS), or QpStateError if it is not allowed."""
    try:
        return QP_TRANSITIONS[(state, inp)]
    except KeyError:
        raise QpStateError(f"QP {qpn}: {inp.name} not allowed in {state.name}") from None


def checked_write(
    qpn: int,
    state: QpState,
    local: bytes | bytearray | memoryview,
    remote_va: int,
    rkey: int,
    imm: int | None,
) -> memoryview:
    """What every transport checks before queueing a write: the QP is READY, the fields fit
    their headers; returns the payload as a byte view (read when packets are built)."""
    if state is not QpState.READY:
        raise QpStateError(f"QP {qpn} is {state.name}: cannot post")
    if imm is not None and not 0 <= imm <= 0xFFFFFFFF:
        raise ValueError("imm must be a 32-bit unsigned value")
    if not 0 <= remote_va < 1 << 64 or not 0 <= rkey <= 0xFFFFFFFF:
        raise ValueError("remote_va must fit 64 bits and rkey 32 bits")
    buf = memoryview(local).cast("B") if not isinstance(local, bytes) else memoryview(local)
    if len(buf) >= 1 << 32:
        raise ValueError("a single write is limited to 4 GiB - 1 (RETH length is 32 bits)")
    return buf


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
        check_qp_args(qpn, net)
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
            start = default_start_psn(cfg.seed, qpn)
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
        self._tmpl: dict[int, _Template] = {}  # EV -> frame template (see _make_tmpl)
        self._slot_tmpl: list[_Template] = []  # the same, per EV slot of self.evs
        self._ip_src = [usid.host_address(net.shape, net.host, p) for p in range(self.planes)]
        # Scratch buffers the headers are packed into; every frame copies them out at once,
        # so one per QP serves every frame.
        self._scratch = bytearray(_FRAME_DATA_IMM.size)
        sv = memoryview(self._scratch)
        # (headers, headers from BTH for the ICRC, headers from UDP for the checksum)
        self._views = (
            (
                sv[: _FRAME_DATA.size],
                sv[_OFF_BTH : _FRAME_DATA.size],
                sv[_OFF_UDP : _FRAME_DATA.size],
            ),
            (sv, sv[_OFF_BTH:], sv[_OFF_UDP:]),
        )
        self._ctrl_scratch = bytearray(_FRAME_CTRL.size + _CTRL_MAX_BODY + 4)
        self._ctrl_view = memoryview(self._ctrl_scratch)
        # a SACK frame's (BTH..body for the ICRC, UDP..ICRC for the checksum, whole frame)
        self._sack_views = (
            self._ctrl_view[_OFF_BTH : _FRAME_SACK.size],
            self._ctrl_view[_OFF_UDP : _FRAME_SACK.size + 4],
            self._ctrl_view[: _FRAME_SACK.size + 4],
        )

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
        self._slot_tmpl = [self._make_tmpl(ev) for ev in self.evs.ev_values]
        evs, sb = self.evs, self.sb
        # what _send_new needs that never changes after connect (the objects, not their
        # contents): one tuple unpack instead of a score of attribute loads per call
        self._tx_ctx = (
            self._sendq, sb, self.cc, evs.pick, evs.plane_of, evs.tx_packets, self._slot_tmpl,
            sb.records, sb.heap, self.mtu, _TS_BIT << 24 | remote.qpn, self._scratch,
            *self._views[0], *self._views[1],
        )  # fmt: skip

    def _transition(self, inp: QpInput) -> None:
        self.state = next_state(self.qpn, self.state, inp)

    def _make_tmpl(self, ev: int) -> _Template:
        """The per-EV constants of a frame: (Ethernet destination, source, IPv6 word 0 with
        the flow label, source address, destination address, UDP source port, the UDP
        checksum's pseudo-header sum over the source and the *final* destination address
        and next header 17, modulo 0xFFFF)."""
        cached = self._tmpl.get(ev)
        if cached is not None:
            return cached
        assert self._dest is not None
        plane = ev % self.planes
        port = self.net.ports[plane]
        sport, flow = wire.ev_to_udp_flow(ev)
        src = self._ip_src[plane]
        psum = int.from_bytes(src + self._dest.final(ev), "big") % 0xFFFF + wire.IPPROTO_UDP
        out = (
            bytes(port.peer_mac),
            bytes(port.mac),
            0x60000000 | flow,
            src,
            self._dest.address(ev),
            sport,
            psum,
        )
        self._tmpl[ev] = out
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
        buf = checked_write(self.qpn, self.state, local, remote_va, rkey, imm)
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
        if self.evs.probe_due:
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
        window = self.peer.window_psns if self.peer else 0
        rtxq = self._rtxq
        if rtxq:
            deferred: list[TxRecord] = []
            while rtxq and sb.inflight_bytes < cc.cwnd_bytes:
                rec = rtxq.popleft()
                if rec.psn not in sb.records or not rec.lost:
                    continue
                if ((rec.psn - sb.snd_una) & PSN_MASK) >= window:
                    deferred.append(rec)  # beyond the peer's tracking window: later
                    continue
                frame = self._send_record(rec, now_s, rtx=True)
                if frame is None:
                    rtxq.appendleft(rec)
                    break
                out.append(frame)
            if deferred:
                rtxq.extendleft(reversed(deferred))
        # (the window test here too: a window-limited QP is asked often, and answers cheaply)
        if self._sendq and self.peer is not None and sb.inflight_bytes < cc.cwnd_bytes:
            self._send_new(out, now_s, window)
        return out

    def _send_new(self, out: list[tuple[int, bytes]], now_s: float, window: int) -> None:
        """Segment posted writes into new packets while the window allows.  The hot path:
        what _send_record, _data_frame, Scoreboard.add and Scoreboard.arm do, inline, with
        the per-message and per-call values hoisted out of the per-packet loop."""
        (
            sendq, sb, cc, pick, plane_of, tx_packets, tmpls, records, heap, mtu, w1, scratch,
            head, mrc, udp, head_imm, mrc_imm, udp_imm,
        ) = self._tx_ctx  # fmt: skip
        seq = sb.seq
        nxt = sb.snd_nxt
        una = sb.snd_una
        inflight = sb.inflight_bytes
        limit = window - 1
        wimm_max = self.peer.max_wimm_inflight
        ts_ns = int(now_s * 1e9) or 1  # 0 means "no timestamp" in a SACK: a clock at 0 is 1 ns
        rto = self._rto  # a new packet has no retries yet
        max_rto = self.config.max_rto_s
        deadline = now_s + (rto if rto < max_rto else max_rto)
        fifo = sb.fifo
        in_order = not fifo or fifo[-1][0] <= deadline  # every packet here has this deadline
        fifo_append = fifo.append
        pack, pack_imm = _FRAME_DATA.pack_into, _FRAME_DATA_IMM.pack_into
        crc32 = _crc32
        from_bytes = _from_bytes
        csum_partial = _csum_partial
        u16_into = _U16.pack_into
        u32 = _U32.pack
        join = b"".join
        sent = sent_bytes = 0
        cur = None
        while sendq and inflight < cc.cwnd_bytes and ((nxt - una) & PSN_MASK) < limit:
            msg = sendq[0]
            off = msg.next_off
            if off == 0:
                if msg.imm is not None:
                    if self._wimm_outstanding >= wimm_max:
                        break
                    self._wimm_outstanding += 1
                self._inflight_msgs.append(msg)
            if msg is not cur:
                cur = msg
                length = msg.length
                imm = msg.imm
                mbuf = msg.buf
                msn = msg.msn
                rqmsn = msg.rqmsn
                rkey = msg.rkey
                va = msg.remote_va
            n = length - off
            if n > mtu:
                n = mtu
            first = off == 0
            last = off + n >= length
            if first and last:
                op = _OP_ONLY if imm is None else _OP_ONLY_IMM
            elif first:
                op = _OP_FIRST
            elif last:
                op = _OP_LAST if imm is None else _OP_LAST_IMM
            else:
                op = _OP_MIDDLE
            slot = pick(-1)
            if slot < 0:
                if first:  # undo the start bookkeeping; retry later
                    self._inflight_msgs.pop()
                    if imm is not None:
                        self._wimm_outstanding -= 1
                break
            # the frame (see _data_frame)
            eth_dst, eth_src, w0, src, dst, sport, psum = tmpls[slot]
            payload = mbuf[off : off + n]
            w0 |= _DSCP_DATA_ECT0
            if last:
                w2 = _ACKREQ | nxt
                if imm is not None:
                    ulen = n + 56
                    pack_imm(
                        scratch, 0, eth_dst, eth_src, 0x86DD, w0, ulen, 17, 64, src, dst, sport,
                        4791, ulen, 0, op, 0, 0xFFFF, w1, w2, msn, rqmsn, ts_ns, va + off, rkey,
                        length, imm,
                    )  # fmt: skip
                    icrc = crc32(payload, crc32(mrc_imm))
                    total = psum + ulen + from_bytes(udp_imm, "big")
                    hdr = head_imm
                else:
                    ulen = n + 52
                    pack(
                        scratch, 0, eth_dst, eth_src, 0x86DD, w0, ulen, 17, 64, src, dst, sport,
                        4791, ulen, 0, op, 0, 0xFFFF, w1, w2, msn, rqmsn, ts_ns, va + off, rkey,
                        length,
                    )  # fmt: skip
                    icrc = crc32(payload, crc32(mrc))
                    total = psum + ulen + from_bytes(udp, "big")
                    hdr = head
                total += icrc << 8 if n & 1 else icrc
            else:  # a full MTU: never empty
                ulen = n + 52
                pack(
                    scratch, 0, eth_dst, eth_src, 0x86DD, w0, ulen, 17, 64, src, dst, sport,
                    4791, ulen, 0, op, 0, 0xFFFF, w1, nxt, msn, rqmsn, ts_ns, va + off, rkey,
                    length,
                )  # fmt: skip
                icrc = crc32(payload, crc32(mrc))
                total = psum + ulen + from_bytes(udp, "big") + (icrc << 8 if n & 1 else icrc)
                hdr = head
            if n:
                total += csum_partial(payload)
            u16_into(scratch, _OFF_UCSUM, 0xFFFF - total % 0xFFFF)
            frame = join((hdr, payload, u32(icrc)))
            # the record and its timer
            rec = TxRecord(nxt, msg, off, n, op)
            rec.slot = slot
            rec.sent_s = now_s
            rec.tx_ts_ns = ts_ns
            seq += 1
            rec.timer_seq = seq
            if in_order:  # Scoreboard.arm
                fifo_append((deadline, seq, nxt))
            else:
                heappush(heap, (deadline, seq, nxt))
            records[nxt] = rec
            tx_packets[slot] += 1
            sent += 1
            sent_bytes += n
            inflight += n
            out.append((plane_of[slot], frame))
            if last:
                msg.next_off = length
                msg.last_psn = nxt
                sendq.popleft()
            else:
                msg.next_off = off + n
            nxt = (nxt + 1) & PSN_MASK
        sb.seq = seq
        sb.snd_nxt = nxt
        sb.inflight_bytes = inflight
        st = self.stats
        st.tx_data_packets += sent
        st.tx_data_bytes += sent_bytes

    def _send_record(self, rec: TxRecord, now_s: float, rtx: bool) -> tuple[int, bytes] | None:
        evs = self.evs
        slot = evs.pick(rec.slot if rtx else -1)
        if slot < 0:
            return None
        ts_ns = int(now_s * 1e9) or 1  # 0 means "no timestamp" in a SACK: a clock at 0 is 1 ns
        frame = self._data_frame(
            self._slot_tmpl[slot], rec.opcode, rec.psn, rec.msg, rec.offset, rec.length, ts_ns, rtx
        )
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

    def _data_frame(
        self,
        t: _Template,
        op: int,
        psn: int,
        msg: _Message,
        off: int,
        n: int,
        ts_ns: int,
        rtx: bool,
    ) -> bytes:
        """One data frame: headers packed into the scratch buffer, the payload copied once
        (by the join) from the message's buffer, ICRC and UDP checksum chained over both."""
        eth_dst, eth_src, w0, src, dst, sport, psum = t
        payload = msg.buf[off : off + n]
        w1 = (_TS_BIT | _RTX_BIT if rtx else _TS_BIT) << 24 | self.peer.qpn
        w2 = psn if op < _OP_LAST else _ACKREQ | psn  # the last packet asks for an ACK
        w0 |= (8 if rtx else 4) << 22 | 2 << 20  # TRIMMABLE_RETX / TRIMMABLE, ECT0
        if op in (_OP_LAST_IMM, _OP_ONLY_IMM):
            ulen = n + 56  # UDP 8 + BTH..RETH 40 + ImmDt 4 + ICRC 4
            _FRAME_DATA_IMM.pack_into(
                self._scratch, 0, eth_dst, eth_src, 0x86DD, w0, ulen, 17, 64, src, dst,
                sport, 4791, ulen, 0, op, 0, 0xFFFF, w1, w2, msg.msn, msg.rqmsn, ts_ns,
                msg.remote_va + off, msg.rkey, msg.length, msg.imm,
            )  # fmt: skip
            head, mrc, udp = self._views[1]
        else:
            ulen = n + 52  # UDP 8 + BTH..RETH 40 + ICRC 4
            _FRAME_DATA.pack_into(
                self._scratch, 0, eth_dst, eth_src, 0x86DD, w0, ulen, 17, 64, src, dst,
                sport, 4791, ulen, 0, op, 0, 0xFFFF, w1, w2, msg.msn, msg.rqmsn, ts_ns,
                msg.remote_va + off, msg.rkey, msg.length,
            )  # fmt: skip
            head, mrc, udp = self._views[0]
        icrc = _crc32(payload, _crc32(mrc))
        # One's complement sum of the UDP datagram = its value modulo 0xFFFF (2^16 = 1 mod
        # 0xFFFF): the headers' bytes as one integer, the payload's sum from the C core, the
        # ICRC one byte up when the payload length is odd; plus the pseudo-header (psum, ulen).
        total = psum + ulen + _from_bytes(udp, "big") + (icrc << 8 if n & 1 else icrc)
        if n:
            total += _csum_partial(payload)
        _U16.pack_into(self._scratch, _OFF_UCSUM, 0xFFFF - total % 0xFFFF)
        return b"".join((head, payload, _U32.pack(icrc)))

    def _ctrl_frame(self, op: int, psn: int, body: bytes, ev: int) -> tuple[int, bytes]:
        eth_dst, eth_src, w0, src, dst, sport, psum = self._tmpl.get(ev) or self._make_tmpl(ev)
        scr = self._ctrl_scratch
        mv = self._ctrl_view
        end = _FRAME_CTRL.size + len(body)
        ulen = end + 4 - _OFF_UDP
        _FRAME_CTRL.pack_into(
            scr,
            0,
            eth_dst,
            eth_src,
            0x86DD,
            w0 | 46 << 22 | 2 << 20,
            ulen,
            17,
            64,
            src,
            dst,
            sport,
            4791,
            ulen,
            0,
            op,
            0,
            0xFFFF,
            self.peer.qpn,
            psn,
        )  # fmt: skip  (DSCP CONTROL, ECT0)
        scr[_FRAME_CTRL.size : end] = body
        _U32.pack_into(scr, end, _crc32(mv[_OFF_BTH:end]))
        udp = _from_bytes(mv[_OFF_UDP : end + 4], "big")
        if ulen & 1:  # an odd datagram is summed as if padded with a zero byte
            udp <<= 8
        _U16.pack_into(scr, _OFF_UCSUM, 0xFFFF - (psum + ulen + udp) % 0xFFFF)
        return (ev % self.planes, bytes(mv[: end + 4]))

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
        evs = self.evs
        evs.now_s = now_s
        op = data[_OFF_BTH]
        if _OP_FIRST <= op <= _OP_ONLY_IMM:
            # The common case inline: a new, untrimmed data packet without an immediate, in
            # the window, accepted by the memory table.  Everything up to the placement only
            # looks; anything else (even a bad ICRC) goes to _rx_data, which starts over.
            mv = memoryview(data)
            if (
                op not in _IMM_OPS
                and (w0 >> 22) & 0x3F not in _DSCPS_TRIMMED
                and end >= _OFF_BTH + 44
                and _crc32(mv[_OFF_BTH : end - 4]) == _U32.unpack_from(data, end - 4)[0]
            ):
                w1, w2, msn, _rqmsn, ts_ns, va, rkey, length = _RX_DATA.unpack_from(
                    data, _OFF_BTH + 4
                )
                psn = w2 & PSN_MASK
                rxw = self.rxwin
                d = (psn - rxw.expected) & PSN_MASK
                # d == 0 is the cumulative ack's next PSN, never marked (receive() advances
                # past it at once): no need to ask the window
                if (
                    w1 & 0xFFFFFF == self.qpn
                    and d < rxw.size
                    and not (d and rxw.win.test(psn))
                    and self.memory.place(rkey, va, mv[_OFF_BTH + 40 : end - 4]) is _PLACE_OK
                ):
                    self._rx_new_data(data, end, w0, w1, w2, psn, msn, ts_ns, length, now_s)
                    return
            self._rx_data(data, end, w0, op, now_s)
        elif op in (_OP_SACK, _OP_ACK) and end == _SACK_FRAME_END:
            self._rx_sack_frame(data, op, now_s)
        else:
            self._rx_control(data, end, w0, now_s)
        if evs.events:
            self._drain_ev_events()

    def _rx_new_data(
        self,
        data,  # noqa: ANN001
        end: int,
        w0: int,
        w1: int,
        w2: int,
        psn: int,
        msn: int,
        ts_ns: int,
        length: int,
        now_s: float,
    ) -> None:
        """The rest of receive_frame's common case, once the payload is placed: exactly what
        _rx_data does for a new packet without an immediate."""
        rxw = self.rxwin
        ev = (data[_OFF_UDP] << 24) | (data[_OFF_UDP + 1] << 16) | (w0 & 0xFFFF)
        ce = (w0 >> 20) & 3 == 3
        st = self.stats
        st.rx_data_packets += 1
        if ce:
            st.rx_ecn_marked += 1
        rxw.receive(psn)
        plen = end - 4 - _OFF_BTH - 40
        st.rx_placed_bytes += plen
        rxw.received_bytes += plen
        self._rx_placed(psn, msn, length, plen, ev, ts_ns, ce, w1, w2, now_s)

    def _rx_data(self, data, end: int, w0: int, op: int, now_s: float) -> None:  # noqa: ANN001
        st = self.stats
        dscp = (w0 >> 22) & 0x3F
        trimmed = dscp in (_DSCP_TRIMMED, _DSCP_TRIMMED_LH)
        imm = op in (_OP_LAST_IMM, _OP_ONLY_IMM)
        hdr_end = _OFF_BTH + 44 if imm else _OFF_BTH + 40
        if end < hdr_end + (0 if trimmed else 4):
            st.rx_malformed += 1
            return
        mv = memoryview(data)
        if not trimmed and _crc32(mv[_OFF_BTH : end - 4]) != _U32.unpack_from(data, end - 4)[0]:
            st.rx_malformed += 1
            return
        w1, w2, msn, rqmsn, ts_ns, va, rkey, length = _RX_DATA.unpack_from(data, _OFF_BTH + 4)
        if w1 & 0xFFFFFF != self.qpn:
            st.rx_malformed += 1
            return
        psn = w2 & PSN_MASK
        ev = (data[_OFF_UDP] << 24) | (data[_OFF_UDP + 1] << 16) | (w0 & 0xFFFF)
        ce = (w0 >> 20) & 3 == 3
        st.rx_data_packets += 1
        if ce:
            st.rx_ecn_marked += 1
        rxw = self.rxwin
        if trimmed:
            st.rx_trimmed += 1
            reason = (
                wire.NackReason.TRIMMED
                if dscp == _DSCP_TRIMMED
                else wire.NackReason.TRIMMED_LASTHOP
            )
            if not rxw.win.test(psn):
                self._send_nack(int(reason), psn, ev, ts_ns, ev % self.planes)
            return
        d = (psn - rxw.expected) & PSN_MASK
        if d < _HALF and d >= rxw.size:
            self._send_nack(int(wire.NackReason.PSN_OOR_WINDOW), psn, ev, ts_ns, ev % self.planes)
            return
        # d == 0 is the cumulative ack's next PSN, which is never marked (receive() advances
        # past it at once): no need to ask the window
        if d >= _HALF or (d and rxw.win.test(psn)):
            st.rx_duplicates += 1
            self._send_sack(psn, ev, ts_ns, ce, ev % self.planes, twice=True)  # rule 2
            return
        payload = mv[hdr_end : end - 4]
        if self.memory.place(rkey, va, payload) is not _PLACE_OK:
            st.rx_refused += 1
            self._send_nack(int(wire.NackReason.REMOTE_ACCESS_ERROR), psn, ev, ts_ns, -1)
            return
        mark = rxw.receive(psn)
        assert mark == MARK_NEW
        plen = end - 4 - hdr_end
        st.rx_placed_bytes += plen
        rxw.received_bytes += plen
        if imm:
            if self._rx_imm_check(rqmsn, now_s):
                return
            self._rx_imm_pending[msn] = (rqmsn, _IMM.unpack_from(data, _OFF_BTH + 40)[0], length)
        self._rx_placed(psn, msn, length, plen, ev, ts_ns, ce, w1, w2, now_s)

    def _rx_placed(
        self,
        psn: int,
        msn: int,
        length: int,
        plen: int,
        ev: int,
        ts_ns: int,
        ce: bool,
        w1: int,
        w2: int,
        now_s: float,
    ) -> None:
        """After a new packet's payload is placed (both receive paths): message accounting,
        the CE-run heuristic, and whether to acknowledge now."""
        rxw = self.rxwin
        # message accounting: completion when every byte of the message is placed
        msg_bytes = self._rx_msg_bytes
        got = msg_bytes.get(msn, 0) + plen
        if got >= length:
            msg_bytes.pop(msn, None)
            if self._rx_imm_pending:
                pend = self._rx_imm_pending.pop(msn, None)
                if pend is not None:
                    self._rx_imm_complete(pend, now_s)
        else:
            msg_bytes[msn] = got
        # the ALWAYS_SKIP heuristic: a run of CE marks on one EV
        if ce:
            self._ce_run[ev] = self._ce_run.get(ev, 0) + 1
            rxw.ece_pending = True
        elif self._ce_run:
            self._ce_run.pop(ev, None)
        rtx = w1 & (_RTX_BIT << 24) != 0
        # the coalescing rule (ResponderWindow.wants_ack) for a new packet
        if ce or rtx or w2 & _ACKREQ or rxw.pending >= rxw.ack_every:
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
        cack, offset, bitmap, ooo, received, pen = rxw.sack_values(psn)
        if ce:
            mark = _MARK_ALWAYS_SKIP if self._ce_run.get(ev, 0) >= 8 else _MARK_SKIP_ONCE
            w0 = mark << 30 | 0x20000000 | cack
        else:
            w0 = 0x20000000 | cack if ece else cack
        self._ack_deadline = None
        self.stats.tx_sacks += 1
        if self.peer is None:
            return
        evs = self.evs
        ctrl = self._ctrl
        # _queue_ctrl, with the SACK's fields packed straight into the frame
        out_ev = evs.next_reverse_ev() if plane < 0 else evs.reverse_ev_on(plane)
        ctrl.append(
            self._sack_frame(op, cack, w0, offset, pen, bitmap, ev, ooo, ts_ns, received, out_ev)
        )
        if twice and plane >= 0:
            for _ in range(len(evs.reverse)):
                other = evs.next_reverse_ev()
                if other % self.planes != plane:
                    ctrl.append(
                        self._sack_frame(
                            op, cack, w0, offset, pen, bitmap, ev, ooo, ts_ns, received, other
                        )
                    )
                    break

    def _sack_frame(
        self,
        op: int,
        cack: int,
        w0: int,
        offset: int,
        pen: int,
        bitmap: int,
        ev: int,
        ooo: int,
        ts_ns: int,
        received: int,
        out_ev: int,
    ) -> tuple[int, bytes]:
        """A SACK/ACK frame on ``out_ev``: what _ctrl_frame builds from the packed SACK body
        (fields in wire order: ``w0`` = mark, ece and cack_psn), with one pack_into for the
        headers and the body."""
        tmpl = self._tmpl.get(out_ev) or self._make_tmpl(out_ev)
        eth_dst, eth_src, w0_ip, src, dst, sport, psum = tmpl
        ulen = _FRAME_SACK.size + 4 - _OFF_UDP
        _FRAME_SACK.pack_into(
            self._ctrl_scratch, 0, eth_dst, eth_src, 0x86DD, w0_ip | _DSCP_CTRL_ECT0, ulen, 17,
            64, src, dst, sport, 4791, ulen, 0, op, 0, 0xFFFF, self.peer.qpn, cack, w0, offset,
            pen, bitmap, ev, ooo, ts_ns, received,
        )  # fmt: skip
        mrc, udp, whole = self._sack_views
        _U32.pack_into(self._ctrl_scratch, _FRAME_SACK.size, _crc32(mrc))
        csum = 0xFFFF - (psum + ulen + _from_bytes(udp, "big")) % 0xFFFF
        _U16.pack_into(self._ctrl_scratch, _OFF_UCSUM, csum)
        return (out_ev % self.planes, bytes(whole))

    def _send_nack(self, reason: int, psn: int, ev: int, ts_ns: int, plane: int) -> None:
        body = _NACK.pack(reason << 24 | psn, ev, (self.rxwin.expected - 1) & PSN_MASK, ts_ns)
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
            sk = pkt.sack
            self._rx_sack(
                sk.cack_psn, sk.sack_offset, sk.bitmap, sk.ev, int(sk.mark), sk.ece,
                sk.rcv_cwnd_pen, sk.reflected_ts_ns, op == _OP_ACK, now_s,
            )  # fmt: skip
        elif op == _OP_NACK:
            self._rx_nack(pkt.nack, now_s)
        elif op == _OP_RPROBE:
            # answer with an ACK (0xD1, the SACK body) echoing the probed EV and timestamp
            ce = (w0 >> 20) & 3 == 3
            probe = pkt.probe
            plane = probe.ev % self.planes
            cack = (self.rxwin.expected - 1) & PSN_MASK
            self._send_sack(cack, probe.ev, probe.tx_ts_ns, ce, plane, _OP_ACK)
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

    def _rx_sack_frame(self, data, op: int, now_s: float) -> None:  # noqa: ANN001
        """A SACK or probe answer of the right length: decoded at fixed offsets (what
        wire.decode_mrc would check: the ICRC and a defined mark; then our QP number)."""
        if (
            _crc32(memoryview(data)[_OFF_BTH : _SACK_FRAME_END - 4])
            != _U32.unpack_from(data, _SACK_FRAME_END - 4)[0]
        ):
            self.stats.rx_malformed += 1
            return
        w1, _w2, w0, offset, pen, bitmap, ev, _ooo, ts_ns, _rb = _RX_SACK.unpack_from(
            data, _OFF_BTH + 4
        )
        mark = w0 >> 30
        if mark == 3 or w1 & 0xFFFFFF != self.qpn:
            self.stats.rx_malformed += 1
            return
        self._rx_sack(
            w0 & PSN_MASK, offset, bitmap, ev, mark, w0 & 0x20000000 != 0, pen & 0x7F, ts_ns,
            op == _OP_ACK, now_s,
        )  # fmt: skip

    def _rx_sack(
        self,
        cack_psn: int,
        offset: int,
        bitmap: int,
        ev: int,
        mark: int,
        ece: bool,
        rcv_cwnd_pen: int,
        reflected_ts_ns: int,
        is_probe_answer: bool,
        now_s: float,
    ) -> None:
        """Apply one SACK (or probe answer; ``mark`` is the wire value of wire.SackMark)."""
        self.stats.rx_sacks += 1
        evs = self.evs
        acked = self.sb.on_sack(cack_psn, offset, bitmap)
        acked_bytes = 0
        if acked:
            # EvTable.note_delivered, inline: the path of each acknowledged packet is alive
            acked_packets = evs.acked_packets
            evidence_s = evs.evidence_s
            path_of = evs.path_of
            path_evidence_s = evs.path_evidence_s
            path_ack_s = evs.path_ack_s
            t_ack = evs.now_s
            for rec in acked:
                if rec.to_sent_s >= 0 and self._spurious(rec, ev, reflected_ts_ns, now_s):
                    # the timed-out original got through, not the retransmission: credit its
                    # path
                    slot = rec.to_slot
                    sent_s = rec.to_sent_s
                else:
                    slot = rec.slot
                    sent_s = rec.sent_s
                acked_packets[slot] += 1
                if sent_s > evidence_s[slot]:
                    evidence_s[slot] = sent_s
                path = path_of[slot]
                if sent_s > path_evidence_s[path]:
                    path_evidence_s[path] = sent_s
                path_ack_s[path] = t_ack
                acked_bytes += rec.length
        rtt = None
        # A probe's answer times a small high-priority packet, not data: it would drag the
        # base RTT (NSCC's queueing delay, the RTO) far below what data packets see.
        if reflected_ts_ns and not is_probe_answer:
            rtt = now_s - reflected_ts_ns * 1e-9
            if rtt > 0:
                self._rtt_sample(rtt)
            else:
                rtt = None
        if is_probe_answer:
            slot = evs.slot_of.get(ev, -1)
            if slot >= 0:
                evs.on_probe_answer(slot, reflected_ts_ns, mark != 0, now_s)
        elif mark:
            slot = evs.slot_of.get(ev, -1)
            if slot >= 0:
                evs.ecn_echoes[slot] += 1
                inp = EvInput.ECN_ECHO if mark == _MARK_SKIP_ONCE else EvInput.ALWAYS_SKIP
                evs.apply(slot, inp, now_s)
        if acked_bytes or ece:
            self.cc.on_ack(new_ack_sample(acked_bytes, rtt, ece, now_s))
        if rcv_cwnd_pen:
            self.cc.on_rcv_penalty(rcv_cwnd_pen, now_s)
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

    def _spurious(self, rec: TxRecord, ev: int, reflected_ts_ns: int, now_s: float) -> bool:
        """A PSN that timed out is acknowledged: if the SACK was triggered by the very
        transmission that timed out (its EV and timestamp), or the retransmission cannot have
        caused it (not sent yet, or sent less than half a min RTT ago), the original made it
        and the timeout was spurious.  Its delay is an RTT the estimator missed: feed it to
        the peak so the RTO covers it next time (the Eifel idea, RFC 3522)."""
        by_original = reflected_ts_ns == rec.to_ts_ns and ev == self.evs.ev_values[rec.to_slot]
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

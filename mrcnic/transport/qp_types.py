"""The queue pair's vocabulary: its states, the events it emits, its configuration, the
attributes peers exchange, its statistics, and the checks every transport shares
(the RoCEv2 baseline uses them too)."""

from __future__ import annotations

import enum
import json
import secrets
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from typing import TypeVar

from mrcnic.errors import MrcError
from mrcnic.transport.ev import EvConfig, EvStateChanged
from mrcnic.transport.frames import OFF_BTH, PSN_MASK
from mrcnic.wire import layout, usid

_C = TypeVar("_C")


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


class ResourceLimitError(MrcError, RuntimeError):
    """A stated limit is reached (QPs per device, regions, writes outstanding per QP): the
    message names the limit and what to do; nothing was changed."""


#: writes posted and not completed per QP, on both engines (the C send engine's ring of
#: messages is this long: a power of two, more than the responder's MSN window)
MAX_OUTSTANDING_WRITES = 32768
#: QPs a device holds by default (verbs.DeviceLimits.max_qps; mrc-sim's --qps at most)
DEFAULT_MAX_QPS = 1024


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
    start_psn: int | None = None  # default: random (qp_types.initial_psn)


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
        problem = attrs.problem()
        if problem:
            raise ValueError(f"bad QP attributes: {problem}")
        return attrs

    def problem(self) -> str:
        """What is wrong with these attributes on their own ("" when nothing is)."""
        if not 0 < self.qpn <= PSN_MASK or self.qpn == layout.EV_PROBE_QPN:
            return f"qpn {self.qpn} is not a usable QP number"
        if not 0 <= self.start_psn <= PSN_MASK:
            return f"start_psn {self.start_psn} is not a 24-bit PSN"
        w = self.window_psns
        if not 64 <= w <= 1 << 23 or w & (w - 1):
            return f"window_psns {w} is not a power of two in 64..2^23"
        if not 1 <= self.max_wimm_inflight <= 0x8000:
            return f"max_wimm_inflight {self.max_wimm_inflight} is not in 1..32768"
        if not 1 <= self.mtu_bytes <= 0xFFFF:
            return f"mtu_bytes {self.mtu_bytes} is not in 1..65535"
        return ""


def check_peer(net: NetConfig, mtu_bytes: int, remote: QpAttributes) -> None:
    """What every transport checks of a peer's record before connecting to it: the record is
    sound, names another host of this fabric, and agrees on the path MTU. Raises ValueError
    (the QP stays unconnected)."""
    problem = remote.problem()
    if problem:
        raise ValueError(f"bad peer attributes: {problem}")
    hosts = net.shape.host_count
    if not 0 <= remote.host < hosts:
        raise ValueError(f"peer host {remote.host} is not in this fabric (hosts 0..{hosts - 1})")
    if remote.host == net.host:
        raise ValueError("loopback QPs (same host) are not supported")
    if remote.mtu_bytes != mtu_bytes:
        raise ValueError(
            f"peer mtu_bytes {remote.mtu_bytes} differs from ours ({mtu_bytes}): "
            "both ends of a QP must use the same path MTU"
        )


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
    sack_losses: int = 0  # packets found lost from SACKs (per-EV order or RACK), not by timeout
    spurious_retransmissions: int = 0  # found lost from SACKs, but the original got through
    probes_sent: int = 0
    ev_probes_sent: int = 0  # connectionless EV probes (QP 0x2) over the reverse EV set
    ev_probes_answered: int = 0
    reverse_evs_retired: int = 0  # reverse EVs taken out: their probes went unanswered
    reverse_evs_restored: int = 0
    port_status_sent: int = 0  # PORT_STATUS updates sent (each twice), retries included
    rx_stale_port_status: int = 0  # older than the last one applied: acknowledged, ignored
    port_status_unacked: int = 0  # updates given up after retry_limit unacknowledged sends
    rx_malformed: int = 0
    rx_foreign: int = 0  # from an address that is not the connected peer's: dropped
    rx_stale_nacks: int = 0  # NACKs about no outstanding packet: dropped, never fatal
    rx_refused: int = 0
    rx_msn_out_of_range: int = 0  # data whose MSN is MSN_WINDOW or more ahead: dropped
    # rx_refused by cause (the memory table's PlaceStatus); each is NACKed REMOTE_ACCESS_ERROR
    rx_bad_rkey: int = 0  # no region has that R_Key (guessed, or deregistered)
    rx_no_permission: int = 0  # the region does not allow remote writes
    rx_out_of_bounds: int = 0  # a byte outside the region
    rx_psn_out_of_window: int = 0  # data beyond the tracking window: NACKed, not placed
    rx_placed_packets: int = 0  # data packets placed (the one fate that changes memory)
    rx_unmatched_nacks: int = 0  # fatal NACKs not echoing the transmission named: ignored
    rx_probes: int = 0  # retransmission probes (RPROBE) answered
    rx_port_status: int = 0  # PORT_STATUS requests (copies included), acknowledged
    rx_port_status_acks: int = 0  # PORT_STATUS responses
    rx_closed: int = 0  # frames to a QP not yet connected or in error: dropped
    state_bytes: int = 0  # memory this QP holds for its protocol state (QueuePair.state_bytes)
    completions: int = 0
    cwnd_bytes: float = 0.0
    srtt_s: float = 0.0
    rto_s: float = 0.0


class TxMessage:
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

    def __init__(self, wr_id, buf, remote_va, rkey, imm, msn, rqmsn) -> None:
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


class Outbox:
    """What a queue pair hands the I/O layer besides data: its control frames and its
    events: the base of both queue pairs, which own ``_ctrl`` and ``_events``."""

    _ctrl: list[tuple[int, bytes]]
    _events: deque

    def control_frames_to_send(self) -> list[tuple[int, bytes]]:
        """Only the control frames waiting (acknowledgments, NACKs, probes, port status): what
        the I/O shell takes even when every port's data queue is full, so control never waits
        behind data."""
        out = self._ctrl
        self._ctrl = []
        return out

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None


def check_qp_args(qpn: int, net: NetConfig) -> None:
    """What every transport checks of a new QP's number and ports."""
    if not 0 < qpn <= PSN_MASK or qpn == layout.EV_PROBE_QPN:
        raise ValueError(f"qpn {qpn} is not a usable QP number")
    if len(net.ports) != net.shape.planes:
        raise ValueError(f"need one port per plane: {len(net.ports)} != {net.shape.planes}")


def initial_psn(start_psn: int | None) -> int:
    """A QP's first PSN: the configured one, else random. A predictable start would let a
    third host guess PSNs inside the responder's window (RFC 6528's argument for TCP's
    initial sequence numbers); simulators that must be reproducible configure
    :func:`seeded_psn` instead."""
    if start_psn is None:
        return secrets.randbits(24)
    if not 0 <= start_psn <= PSN_MASK:
        raise ValueError(f"start_psn {start_psn} is not a 24-bit PSN")
    return start_psn


def seeded_psn(seed: int, qpn: int) -> int:
    """A reproducible first PSN for simulations: spread over the PSN space by seed and QPN."""
    return (seed * 2654435761 + qpn * 40503) & PSN_MASK


def seeded(config: _C, qpn: int) -> _C:
    """``config`` (a QpConfig or RoceConfig) with a reproducible first PSN from its seed, unless
    it names one: what simulators use so a seed reproduces a run."""
    if config.start_psn is not None:  # type: ignore[attr-defined]
        return config
    return replace(config, start_psn=seeded_psn(config.seed, qpn))  # type: ignore[attr-defined, type-var]  # any config dataclass with seed and start_psn


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
    if len(frame) < OFF_BTH + 12 or frame[12] != 0x86 or frame[13] != 0xDD:
        return None
    if frame[20] != 17 or frame[56] != 0x12 or frame[57] != 0xB7:  # UDP to port 4791
        return None
    return int.from_bytes(frame[OFF_BTH + 5 : OFF_BTH + 8], "big")

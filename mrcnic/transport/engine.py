"""One engine interface per hot path: what a queue pair asks of its send engine and its
receive engine, and how it gets them.

A QP holds one :class:`SendEngine` (``qp.tx``) and one :class:`RecvEngine` (``qp.rx``) and
never asks which kind they are. Each has a C implementation (``tx_engine.CTxEngine``,
``rx_engine.CRxEngine``: the per-packet work in ``csrc/``, called per batch) and a Python
twin (``requester.PySendEngine``, ``responder.PyRecvEngine``: the protocol's reference,
what the simulator runs) that makes the same decisions and the same frames; the parity
tests (tests/unit/test_tx_engine.py, test_rx_engine.py) hold them to that.

The choice is made once: an :class:`EngineChoice` given to the QP when it is made
(:mod:`mrcnic.transport.engine_choice`: ``verbs.Device`` passes ``CEngines`` under
``MRC_NIC_ENGINE=c``; the default is ``PY_ENGINES``) builds both engines when the QP connects.
This module holds only the interfaces, so every engine can name them without a circle. Policy stays in the QP: the
engines call its EV table and congestion control per decision and report completions,
events and errors back to it (docs/design/architecture.md, "Engines").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections import deque

    from mrcnic.transport.cc import CongestionControl
    from mrcnic.transport.ev import EvTable
    from mrcnic.transport.frames import Template
    from mrcnic.transport.memory import MemoryTable
    from mrcnic.transport.qp_types import (
        Event,
        NetConfig,
        QpAttributes,
        QpConfig,
        QpState,
        QpStats,
        TxMessage,
        WcStatus,
    )
    from mrcnic.transport.sack import ResponderWindow, Scoreboard

Frames = list[tuple[int, Any]]


class SendHost(Protocol):
    """What a send engine sees of its QP (the QueuePair is one): the policy objects it
    consults per decision, the settings, the RTT estimator's values the QP's timers read
    (the engine keeps them current), and the QP's calls for events and errors."""

    qpn: int
    net: NetConfig
    planes: int
    mtu: int
    config: QpConfig
    peer: QpAttributes | None  # (a NACK or the C feedback may shrink its window)
    evs: EvTable
    cc: CongestionControl
    stats: QpStats
    sb: Scoreboard
    _slot_tmpl: list[Template]
    _peer_srcs: frozenset[bytes]
    _events: deque[Event]
    _rto: float
    _min_rto: float
    _srtt: float | None
    _rttvar: float
    _rtt_peak: float
    _rto_peak: float
    _rto_peak_at_s: float
    _host_stall_s: float
    _host_stall_at_s: float
    _min_rtt: float
    _rtt_measured: bool

    def _accept(self, data: Any) -> int: ...

    def _drain_ev_events(self) -> None: ...

    def _nack_fatal(self, reason: int, psn: int, m: TxMessage, now_s: float) -> None: ...

    def _retry_exceeded(self, psn: int, retries: int, m: TxMessage, now_s: float) -> None: ...


class RecvHost(Protocol):
    """What a receive engine sees of its QP (the QueuePair is one): its receive window,
    memory, settings and templates, where control frames and events go, and its calls for
    NACKs and errors."""

    qpn: int
    planes: int
    mtu: int  # (the peer's too: both ends of a QP agree on it)
    state: QpState
    config: QpConfig
    peer: QpAttributes | None
    evs: EvTable
    memory: MemoryTable
    rxwin: ResponderWindow
    stats: QpStats
    tx: SendEngine  # (a receive batch hands the send engine its SACKs' feedback)
    _peer_srcs: frozenset[bytes]
    _ctrl: list[tuple[int, bytes]]
    _events: deque[Event]
    _tmpl: dict[int, Template]
    _ack_delay: float
    _rto: float
    _rev_probe_at: float | None  # (the first SACK of a burst schedules reverse-EV probes)

    def _accept(self, data: Any) -> int: ...

    def _drain_ev_events(self) -> None: ...

    def _make_tmpl(self, ev: int) -> Template: ...

    def _send_nack(self, reason: int, psn: int, ev: int, ts_ns: int, plane: int) -> None: ...

    def _fatal(
        self, status: WcStatus, reason: str, now_s: float, failed: TxMessage | None = None
    ) -> None: ...


@runtime_checkable
class SendEngine(Protocol):
    """A connected QP's send side: posted writes, data frames, the scoreboard and its
    retransmission timers, and what acknowledgments say about them."""

    def post(self, msg: TxMessage) -> None:
        """Queue a write (raises ResourceLimitError at the engine's limit, changing nothing)."""

    def send(self, now_s: float, out: Frames) -> None:
        """Retransmissions, then new data, as the window and the EVs allow: appended to
        ``out`` as ``(port, frame)``."""

    def frame(self, data: Any, now_s: float) -> bool:
        """A SACK or ACK frame: True when taken, False for the QP's control path."""

    def sack(
        self, cack_psn: int, offset: int, bitmap: int, ev: int, mark: int, ece: bool,
        rcv_cwnd_pen: int, reflected_ts_ns: int, is_probe_answer: bool, now_s: float,
    ) -> None:  # fmt: skip
        """Apply one decoded SACK or probe answer."""

    def nack(self, reason: int, psn: int, cack_psn: int, ts_ns: int, now_s: float) -> None:
        """Apply one decoded NACK."""

    def expire(self, now_s: float) -> None:
        """Serve the retransmission timers due by ``now_s``."""

    def next_deadline(self) -> float | None: ...

    def port_down(self, plane: int) -> None:
        """A local port went down: what is in flight on it is lost."""

    def after_batch(self, now_s: float) -> None:
        """After a receive batch: apply what the batch handed this engine."""

    def messages(self) -> list[TxMessage]:
        """The writes posted and not completed, oldest first."""

    def first_message(self) -> TxMessage | None: ...

    def reset(self) -> None:
        """Drop everything (the QP failed: it flushes :meth:`messages` first)."""

    def loss_recovery_s(self) -> list[float]: ...

    def reo_window_s(self) -> float: ...

    def state_bytes(self) -> int: ...

    def release(self) -> None:
        """Fold what it counted into the QP's stats and let its buffers go."""

    @property
    def work_waiting(self) -> bool:
        """Retransmissions or unsent writes are waiting."""

    @property
    def outstanding(self) -> int:
        """Packets sent and not acknowledged."""

    @property
    def idle(self) -> bool:
        """Nothing posted is unfinished."""

    @property
    def snd_una(self) -> int: ...


@runtime_checkable
class RecvEngine(Protocol):
    """A connected QP's receive side: data frames placed, messages completed in order, and
    the SACKs and NACKs they call for."""

    def frame(self, data: Any, now_s: float) -> bool:
        """A data frame: True when taken, False for the QP's control path."""

    def timer(self, now_s: float) -> None:
        """The delayed acknowledgment, when due."""

    def deadline(self) -> float | None: ...

    def ack(self, op: int, ev: int, ts_ns: int, ce: bool, plane: int) -> None:
        """Acknowledge now with ``op`` (an EV probe's answer)."""

    def reverse_ev(self, plane: int) -> int:
        """The reverse EV for a control frame on ``plane`` (-1: round robin)."""

    def state_bytes(self) -> int: ...

    def release(self) -> None: ...


class Detached:
    """Both engines of a released QP (``QueuePair.release``): nothing to send, receive or
    hold, and no reference to the QP, so a destroyed QP is freed by reference counting at
    once (the engines and their QP refer to each other)."""

    work_waiting = False
    outstanding = 0
    idle = True
    snd_una = 0

    def post(self, msg: TxMessage) -> None:
        raise RuntimeError("the QP's engines were released")

    def send(self, now_s: float, out: Frames) -> None:
        pass

    def frame(self, data: Any, now_s: float) -> bool:
        return True  # (a released QP is in ERROR: receive_frame takes nothing before this)

    def sack(self, *fields: Any) -> None:
        pass

    def nack(self, reason: int, psn: int, cack_psn: int, ts_ns: int, now_s: float) -> None:
        pass

    def expire(self, now_s: float) -> None:
        pass

    def next_deadline(self) -> float | None:
        return None

    def port_down(self, plane: int) -> None:
        pass

    def after_batch(self, now_s: float) -> None:
        pass

    def messages(self) -> list[TxMessage]:
        return []

    def first_message(self) -> TxMessage | None:
        return None

    def reset(self) -> None:
        pass

    def loss_recovery_s(self) -> list[float]:
        return []

    def reo_window_s(self) -> float:
        return 0.0

    def state_bytes(self) -> int:
        return 0

    def release(self) -> None:
        pass

    def timer(self, now_s: float) -> None:
        pass

    def deadline(self) -> float | None:
        return None

    def ack(self, op: int, ev: int, ts_ns: int, ce: bool, plane: int) -> None:
        pass

    def reverse_ev(self, plane: int) -> int:
        raise RuntimeError("the QP's engines were released")


DETACHED = Detached()


class EngineHost(SendHost, RecvHost, Protocol):
    """A QP as both of its engines see it (the QueuePair is one)."""


class EngineChoice(Protocol):
    """Builds a QP's two engines when it connects."""

    name: str

    def make(self, qp: EngineHost) -> tuple[SendEngine, RecvEngine]: ...

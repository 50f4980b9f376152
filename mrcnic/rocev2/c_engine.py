"""The RoCEv2 baseline's QP on the C data path: :class:`CRoceQueuePair`.

The same QP as :class:`mrcnic.rocev2.qp.RoceQueuePair` (its twin and the protocol's reference),
with the per-packet work in ``csrc/mrc_roce.c``: data frames built, paced and resent from there;
data frames received, placed and acknowledged there, and the requester's cumulative ACKs
applied there, whole receive batches at a time through the device's dispatch
(:class:`mrcnic.transport.rx_engine.RxEngines`, where a RoCEv2 QP has an entry beside the MRC
QPs); the delayed ACK is built there when its deadline passes, and the QP's next deadline is
read there. What stays in Python is what the twin decides rarely: NAKs and CNPs received, the
local ACK timeout, retries and errors, and DCQCN, which gets the bytes each call sent. The QP's
state lives in one C struct, and the twin's methods that run here read and write it through
properties of the same names, so there is one copy of each rule.
tests/unit/test_rocev2_engine.py holds both to the same frames, events and counters.

``verbs.Device`` makes RoCEv2 QPs of this class when its engine is C (``MRC_NIC_ENGINE``).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from mrcnic import wire
from mrcnic.rocev2.qp import RoceQueuePair, _Msg, refusal_why
from mrcnic.transport.frames import PSN_MASK
from mrcnic.transport.memory import MemoryTable, PlaceStatus
from mrcnic.transport.qp_types import (
    ImmReceived,
    NetConfig,
    QpAttributes,
    QpConfig,
    QpState,
    WcStatus,
    WriteCompleted,
)
from mrcnic.transport.rx_engine import CounterSink, RxEngines, c_module, raw_pointer
from mrcnic.wire import layout

from .config import RoceConfig

#: the posted-writes ring's first size: it doubles when full (a QP holds what it uses)
FIRST_MSG_CAP = 16
_NONE = float("-inf")


def _field(name: str) -> property:
    """A twin attribute kept in the C struct's field ``name``."""

    def get(self: CRoceQueuePair) -> Any:
        return getattr(self._c, name)

    def put(self: CRoceQueuePair, v: Any) -> None:
        setattr(self._c, name, v)

    return property(get, put)


def _flag(name: str) -> property:
    def get(self: CRoceQueuePair) -> bool:
        return bool(getattr(self._c, name))

    def put(self: CRoceQueuePair, v: bool) -> None:
        setattr(self._c, name, 1 if v else 0)

    return property(get, put)


def _timer_field(armed: str, at: str) -> property:
    """A twin deadline (None: not armed) as the C struct's flag and time."""

    def get(self: CRoceQueuePair) -> float | None:
        c = self._c
        return getattr(c, at) if getattr(c, armed) else None

    def put(self: CRoceQueuePair, v: float | None) -> None:
        c = self._c
        setattr(c, armed, 0 if v is None else 1)
        setattr(c, at, 0.0 if v is None else v)

    return property(get, put)


def _nak_rewound_get(self: CRoceQueuePair) -> int | None:
    v = self._c.nak_rewound
    return None if v < 0 else v


def _nak_rewound_put(self: CRoceQueuePair, v: int | None) -> None:
    self._c.nak_rewound = -1 if v is None else v


class CRoceQueuePair(RoceQueuePair):
    """A RoCEv2 RC QP whose data path runs in C (the twin's interface and behaviour)."""

    # the twin's state, kept in C
    snd_una = _field("snd_una")
    snd_nxt = _field("snd_nxt")
    snd_max = _field("snd_max")
    _retries = _field("retries")
    _backoff = _field("backoff")
    _deadline = _timer_field("deadline_armed", "deadline_s")
    _nak_rewound = property(_nak_rewound_get, _nak_rewound_put)
    _next_tx_s = _field("next_tx_s")
    pace_burst_s = _field("pace_burst_s")
    _pace_blocked = _flag("pace_blocked")
    _epsn = _field("epsn")
    _nak_outstanding = _flag("nak_outstanding")
    _rx_in_msg = _flag("rx_in_msg")
    _rx_va = _field("rx_va")
    _rx_rkey = _field("rx_rkey")
    _rx_len = _field("rx_len")
    _rx_got = _field("rx_got")
    _rx_msn = _field("rx_msn")
    _rx_rqmsn = _field("rx_rqmsn")
    _unacked = _field("unacked")
    _ack_deadline = _timer_field("ack_armed", "ack_deadline_s")
    _last_cnp_s = _field("last_cnp_s")

    def __init__(
        self,
        qpn: int,
        net: NetConfig,
        memory: MemoryTable,
        line_rate_bps: float,
        config: QpConfig | RoceConfig | None = None,
        *,
        engines: RxEngines,
    ) -> None:
        m = c_module()
        if m is None:
            raise ValueError("the C module mrcnic._mrcfast is not built: run `make setup`")
        self._ffi, self._lib = m.ffi, m.lib
        self._at = self._ffi.new("double[1]")  # (get_timer's answer)
        self._c = self._ffi.new("struct mrc_roce_qp *")
        self._c.nak_rewound = -1
        self._c.last_cnp_s = _NONE
        self._engines = engines
        self._cmsgs: deque[_Msg] = deque()  # the ring's writes [m_done, m_tail), by order
        self._views: deque[memoryview] = deque()  # what their C pointers point into
        self._ring: Any = None
        self._registered = False
        self._counters = CounterSink(self._ffi, "struct mrc_roce_stats")
        self._st_buf = self._ffi.buffer(self._ffi.addressof(self._c.st))
        super().__init__(qpn, net, memory, line_rate_bps, config)

    # -- setup ----------------------------------------------------------------------------------

    def connect(self, remote: QpAttributes) -> None:
        super().connect(remote)
        c, ffi = self._c, self._ffi
        c.qpn, c.peer_qpn, c.mtu, c.plane = self.qpn, remote.qpn, self.mtu, self.plane
        c.window_psns, c.ack_every = self.window_psns, self.config.ack_every
        ffi.memmove(c.hdr, self._pre, len(self._pre))
        ffi.memmove(c.src, self._src, 16)
        ffi.memmove(c.final, self._final, 16)
        w0 = self._w0
        c.data_w0 = (
            w0 | self._data_dscp << layout.DSCP_SHIFT | int(wire.Ecn.ECT0) << layout.ECN_SHIFT
        )
        c.ctrl_w0 = w0 | int(wire.Dscp.CONTROL) << layout.DSCP_SHIFT
        c.nak_retries = 1 if self.config.nak_retries else 0
        c.dcqcn = 1 if self.dcqcn is not None else 0
        c.ack_timeout_s = self.ack_timeout_s
        c.max_ack_timeout_s = self.config.max_ack_timeout_s
        c.ack_delay_s = self._ack_delay
        c.cnp_interval_s = self.cnp_interval_s
        c.seg_psn = self.snd_una
        c.port_down = 0 if self._port_up[self.plane] else 1
        self._grow(FIRST_MSG_CAP)
        self._fo = self._engines.frames_out(self.mtu)
        self._registered = self._engines.add(RoceEngine(self))

    def _grow(self, cap: int) -> None:
        """A ring of ``cap`` writes holding the ones posted and not completed."""
        c = self._c
        ring = self._ffi.new("struct mrc_roce_msg[]", cap)
        old, old_cap = self._ring, c.msg_cap
        for k in range(c.m_done, c.m_tail):
            ring[k & (cap - 1)] = old[k & (old_cap - 1)]
        self._ring, c.msgs, c.msg_cap = ring, ring, cap

    # -- the user API ---------------------------------------------------------------------------

    def _queue_write(self, msg: _Msg) -> None:
        """A write checked by ``post_write`` joins the C ring (the twin's send queue)."""
        c = self._c
        if c.m_tail - c.m_done >= c.msg_cap:
            self._grow(2 * c.msg_cap)
        view = memoryview(msg.buf)
        e = self._ring[c.m_tail & (c.msg_cap - 1)]
        e.buf = raw_pointer(self._ffi, view) if len(view) else self._ffi.NULL
        e.va, e.rkey, e.length = msg.va, msg.rkey, msg.length
        e.imm, e.has_imm = msg.imm or 0, msg.imm is not None
        e.next_off = e.has_last = e.cut = 0
        self._cmsgs.append(msg)
        self._views.append(view)
        c.m_tail += 1

    def port_status(self, port: int, up: bool, now_s: float) -> None:
        super().port_status(port, up, now_s)
        self._c.port_down = 0 if self._port_up[self.plane] else 1

    @property
    def idle(self) -> bool:
        return self._c.m_done == self._c.m_tail

    def get_stats(self) -> Any:
        self.fold_counters()
        s = super().get_stats()
        s.state_bytes = self.state_bytes()
        return s

    def state_bytes(self) -> int:
        """Bytes of the C state this QP holds: its struct and its ring of writes."""
        ffi = self._ffi
        ring = ffi.sizeof(self._ring) if self._ring is not None else 0
        return ffi.sizeof(self._c[0]) + ring

    # -- sending --------------------------------------------------------------------------------

    def frames_to_send(self, now_s: float) -> list[tuple[int, Any]]:
        out = self._ctrl
        self._ctrl = []
        c = self._c
        c.pace_blocked = 0
        if self.state is not QpState.READY:
            return out
        rate = self._pace_rate_bps(now_s)  # (DCQCN's increase timers run even when idle)
        nxt = c.snd_nxt
        if nxt == c.seg_psn and c.m_seg == c.m_tail:
            return out  # nothing to resend and nothing posted left to cut: no C call
        # mrc_roce_send's first pass when it would send nothing, without the call: a dead QP,
        # a full window, or a packet already cut that the pacing holds back (the usual answer
        # when the shell asks each of a device's QPs on every pump)
        if c.dead or (nxt - c.snd_una) & PSN_MASK >= c.window_psns:
            return out
        if nxt != c.seg_psn and c.next_tx_s > now_s:
            c.pace_blocked = 1
            return out
        dc = self.dcqcn
        # (lossless data goes back as bytes: the pacer keeps it in the class PFC pauses, which
        # the ports' C queues do not know)
        fo = self._fo
        o = fo.aim(self._engines.port_queues, self.planes, not self.config.lossless)
        lib = self._lib
        while True:
            r = lib.mrc_roce_send(c, now_s, rate, o)
            fo.take(out)
            o.n = 0
            if r != lib.MRC_TXE_OUT_FULL:
                break
        sent = c.sent_bytes
        if sent:
            c.sent_bytes = 0
            if dc is not None and dc.active:
                dc.on_sent(sent, now_s)
            self.fold_counters()
        return out

    # -- receiving ------------------------------------------------------------------------------

    def receive_frame(self, data: bytes | bytearray | memoryview, now_s: float) -> None:
        if self.peer is None or self.state is QpState.ERROR:
            return
        eng = self._engines
        eng.sync()
        lib = self._lib
        with self._ffi.from_buffer(data) as buf:
            while (r := lib.mrc_roce_frame(self._c, eng.c, buf, len(data), now_s,
                                           eng.out_struct)) < 0:  # fmt: skip
                self._flush_all()
        self._flush_all()
        if r == 0:
            super().receive_frame(data, now_s)  # NAKs, CNPs: the twin's path

    def get_timer(self) -> float | None:
        # the twin's rule in one C call: the shell asks every QP on every pump
        if self.state is not QpState.READY:
            return None
        at = self._at
        return at[0] if self._lib.mrc_roce_next_timer(self._c, at) else None

    def handle_timer(self, now_s: float) -> None:
        # the delayed ACK, built in C into the device's control output when its deadline has
        # passed (the twin builds it in Python: at the lab's rates nearly every ACK is a
        # delayed one, and each was a Python frame through the shell's Python send path)
        eng = self._engines
        while (r := self._lib.mrc_roce_ack_timer(self._c, now_s, eng.out_struct)) < 0:
            eng.drain_out()
        if r:
            eng.drain_out()  # (an ACK: this QP's counters move, no other engine's state)
            self.fold_counters()
        super().handle_timer(now_s)  # (the ACK's deadline is disarmed: the rest of it)

    def _flush_all(self) -> None:
        if self._registered:
            self._engines.flush()
        else:
            self._engines.drain_out()
            self.flush()

    def _ack_to(self, psn: int, now_s: float, positive: bool = True) -> bool:
        r = self._lib.mrc_roce_ack_to(self._c, psn, now_s, 1 if positive else 0)
        self._complete()
        return bool(r)

    def _complete(self) -> None:
        """The writes C completed since the last call, in order."""
        c = self._c
        done = c.m_done - (c.m_tail - len(self._cmsgs))
        if done <= 0:
            return
        events = self._events
        t = c.last_ack_s
        for _ in range(done):
            m = self._cmsgs.popleft()
            self._views.popleft()
            events.append(WriteCompleted(m.wr_id, WcStatus.SUCCESS, m.length, t))

    def flush(self) -> None:
        """Hand what the C side produced to the QP: completions, events, counters."""
        self._complete()
        c = self._c
        if c.n_events:
            lib = self._lib
            for i in range(c.n_events):
                e = c.events[i]
                if e.kind == lib.MRC_ROCE_EV_IMM:
                    self._events.append(ImmReceived(e.a, e.b, e.c, e.t_s))
                elif e.kind == lib.MRC_ROCE_EV_REFUSED:
                    why = refusal_why(e.c, PlaceStatus(e.d), e.rkey, e.va, e.length)
                    self._refused(e.a, e.b, why, e.t_s)
            c.n_events = 0
        if c.st.rx_placed_bytes:
            self._engines.harvest()  # (the regions' bytes_placed: only placement adds to them)
        self.fold_counters()

    def fold_counters(self) -> None:
        self._counters.add_buffer(self._st_buf, self.stats)

    # -- errors ---------------------------------------------------------------------------------

    def _oldest_msg(self) -> _Msg | None:
        c = self._c
        if c.seg_psn == c.snd_una or not self._cmsgs:
            return None
        k = self._lib.mrc_roce_msg_of(c, c.snd_una)
        return self._cmsgs[k - c.m_done]

    def _flush_writes(self) -> list[_Msg]:
        c = self._c
        msgs = list(self._cmsgs)  # (the twin's started writes, then the rest: ring order)
        self._cmsgs.clear()
        self._views.clear()
        c.m_done = c.m_seg = c.m_tail
        c.cur = c.m_tail
        c.seg_psn = c.snd_una
        c.dead = 1
        return msgs

    def release(self) -> None:
        """Count what C counted and let the buffers go (the device drops the entry)."""
        self.fold_counters()
        self._c.dead = 1
        self._cmsgs.clear()
        self._views.clear()


class RoceEngine:
    """A RoCEv2 QP's entry in its device's C dispatch (:class:`RxEngines`)."""

    q: Any = None  # (no MRC receive engine)
    txq: Any = None  # (no MRC send engine)

    def __init__(self, qp: CRoceQueuePair) -> None:
        self.qp = qp
        self.roce = qp._c
        self.q = self.txq = qp._ffi.NULL

    def prepare(self, now_s: float) -> None:
        if self.qp.state is QpState.ERROR:
            self.roce.dead = 1

    def after_batch(self, now_s: float) -> None:
        pass

    def flush(self) -> None:
        self.qp.flush()


__all__ = ["FIRST_MSG_CAP", "CRoceQueuePair", "RoceEngine"]

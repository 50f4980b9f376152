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

The object is assembled from two halves, each in its own module:
:class:`~mrcnic.transport.requester.Requester` (sending, retransmission, reading SACKs) and
:class:`~mrcnic.transport.responder.Responder` (placing data, completions, sending SACKs);
the types it speaks are in ``mrcnic.transport.qp_types``, the frame layouts in
``mrcnic.transport.frames``. This module holds set-up, the API, timers, the receive
dispatch and errors.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from mrcnic import wire
from mrcnic.transport.cc import CcParams, CongestionControl, make_cc
from mrcnic.transport.ev import EvInput, EvState, EvTable
from mrcnic.transport.frames import (
    CTRL_MAX_BODY,
    DSCPS_TRIMMED,
    ENDPOINT,
    FRAME_CTRL,
    FRAME_DATA,
    FRAME_DATA_IMM,
    FRAME_SACK,
    IMM_OPS,
    MSN_MASK,
    MSN_WINDOW,
    OFF_BTH,
    OFF_DST,
    OFF_SRC,
    OFF_UCSUM,
    OFF_UDP,
    OP_ACK,
    OP_EP_REQ,
    OP_EP_RESP,
    OP_FIRST,
    OP_NACK,
    OP_ONLY_IMM,
    OP_RPROBE,
    OP_SACK,
    PLACE_OK,
    PSN_MASK,
    RPROBE,
    RX_DATA,
    RX_HEAD,
    SACK_FRAME_END,
    TS_BIT,
    U16,
    U32,
    Template,
    crc32,
    from_bytes,
)
from mrcnic.transport.memory import MemoryTable
from mrcnic.transport.qp_types import (
    Event,
    ImmReceived,
    NetConfig,
    Outbox,
    PeerPortStatus,
    PortAddr,
    QpAttributes,
    QpConfig,
    QpErrorEvent,
    QpInput,
    QpState,
    QpStats,
    TxMessage,
    WcStatus,
    WriteCompleted,
    check_peer,
    check_qp_args,
    initial_psn,
    next_state,
    peek_dest_qp,
)
from mrcnic.transport.requester import Requester
from mrcnic.transport.responder import Responder
from mrcnic.transport.rx_engine import CRxEngine, RxEngines
from mrcnic.transport.sack import LOST_BY_TIMEOUT, ResponderWindow, Scoreboard, TxRecord
from mrcnic.transport.tx_engine import CTxEngine
from mrcnic.wire import usid

# what a live record costs on the Python engine: the object (its slots) plus its entries in
# the scoreboard's dict and heap (about 100 bytes on CPython 3.11)
_RECORD_BYTES = TxRecord.__basicsize__ + 100
_MESSAGE_BYTES = TxMessage.__basicsize__

#: a round of EV probes over the reverse EV set every this many RTOs (while acknowledging)
REVERSE_PROBE_RTOS = 16
#: rounds unanswered in a row that take a reverse EV out of use
REVERSE_MISSES_BAD = 2
#: RTO before the first RTT sample, in configured base RTTs (the first window is a whole BDP
#: sent at once, and an incast multiplies the queue it meets)
INITIAL_RTO_RTTS = 8


class QueuePair(Requester, Responder, Outbox):
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
        self.start_psn = initial_psn(cfg.start_psn)
        self.rxwin = ResponderWindow(cfg.window_psns, 0, cfg.ack_every)  # reset on connect
        self.sb = Scoreboard(self.start_psn)
        self.stats = QpStats()
        self._events: deque[Event] = deque()
        self._ctrl: list[tuple[int, bytes]] = []
        self._rtxq: deque[TxRecord] = deque()
        self._sendq: deque[TxMessage] = deque()  # not fully segmented yet
        self._inflight_msgs: deque[TxMessage] = deque()  # segmented (partly), not completed
        self._msn = 0
        self._rqmsn = 0
        self._wimm_outstanding = 0
        self._min_rto = cfg.min_rto_s if cfg.min_rto_s is not None else 2 * cfg.base_rtt_s
        self._srtt: float | None = None
        self._rttvar = 0.0
        self._rtt_peak = 0.0  # recent RTT tail (fast attack, slow release)
        self._min_rtt = cfg.base_rtt_s  # smallest data RTT measured (configured until then)
        self._rtt_measured = False
        # loss detection from SACKs (Requester._find_losses)
        self._rack_sent_s = -1.0  # newest send time among acknowledged packets
        self._ev_acked_sent_s = [-1.0] * len(self.evs.ev_values)  # the same, per EV slot
        self._reo_mult = 1  # reordering window, in quarters of the min RTT
        self._reo_quiet = 0  # losses found since the last spurious one
        self._ev_order_ok = True  # per-EV order holds on this fabric (until shown otherwise)
        self._ev_order_spurious = 0
        self._recoveries: deque[list] = deque(maxlen=65536)  # [delay_s, spurious] each
        self._rto = max(self._min_rto, INITIAL_RTO_RTTS * cfg.base_rtt_s)
        self.evs.path_quiet_s = 0.5 * self._rto  # (kept in step with the RTO by its owners)
        self._ack_delay = cfg.ack_delay_s if cfg.ack_delay_s is not None else cfg.base_rtt_s / 8
        self._ack_deadline: float | None = None
        # the C receive engine: Device sets _rx_engines (MRC_NIC_ENGINE=c), connect makes _rxe
        self._rx_engines: RxEngines | None = None
        self._rxe: CRxEngine | None = None
        # the C send engine: Device sets _tx_c (the C module), connect makes _txe
        self._tx_c: Any = None
        self._txe: CTxEngine | None = None
        self._ack_trigger = (0, 0, 0, False)  # psn, ev, ts, ce of the last unacked packet
        self._ce_run: dict[int, int] = {}  # responder: consecutive CE-marked packets per EV
        self._local_down = [False] * self.planes
        self._peer_down = [False] * self.planes
        self._port_seq = 0  # PORT_STATUS sequence number of our last update (32 bits)
        self._ps_pending: tuple[int, bytes] | None = None  # (seq, body) until acknowledged
        self._ps_deadline: float | None = None  # its next retransmission
        self._ps_tries = 0
        self._peer_port_seq: int | None = None  # the newest PORT_STATUS the peer sent
        # the reverse EV set, refreshed by EV probes (QP 0x2) while this QP acknowledges data
        self._rev_probe_at: float | None = None  # the next round of probes
        self._rev_pending: dict[int, int] = {}  # reverse EV -> timestamp of its probe
        self._rev_misses: dict[int, int] = {}  # reverse EV -> rounds unanswered in a row
        self._rev_sacks_seen = 0  # tx_sacks at the last round (no SACKs since: stop probing)
        # liveness: work to do and no EV to send it on
        self._stall_deadline: float | None = None
        self._stall_tries = 0
        self._stall_since_s = 0.0
        # responder message state
        # Messages complete in MSN order: a write-with-immediate's completion means every
        # earlier write of the QP is placed (the "data, then the flag" pattern). All three
        # tables are keyed by MSNs within MSN_WINDOW of _rx_msn, so they stay bounded.
        self._rx_msg_bytes: dict[int, int] = {}  # msn -> bytes placed so far (under way)
        self._rx_imm: dict[int, tuple[int, int]] = {}  # msn -> (rqmsn, imm) of a write-with-imm
        self._rx_done: dict[int, tuple[int, int, int] | None] = {}  # msn -> (rqmsn, imm,
        # length) for a write-with-imm, None for a plain write: placed, earlier ones not yet
        self._rx_msn = 0  # the next message to complete
        self._rx_rqmsn = 0  # the next write-with-immediate to deliver
        # peer, filled by connect()
        self.peer: QpAttributes | None = None
        self._dest: usid.DestTemplate | None = None
        self._peer_srcs: frozenset[bytes] = frozenset()  # the peer's address on each plane
        self._tmpl: dict[int, Template] = {}  # EV -> frame template (see _make_tmpl)
        self._slot_tmpl: list[Template] = []  # the same, per EV slot of self.evs
        self._ip_src = [usid.host_address(net.shape, net.host, p) for p in range(self.planes)]
        # Scratch buffers the headers are packed into; every frame copies them out at once,
        # so one per QP serves every frame.
        self._scratch = bytearray(FRAME_DATA_IMM.size)
        sv = memoryview(self._scratch)
        # (headers, headers from BTH for the ICRC, headers from UDP for the checksum)
        self._views = (
            (
                sv[: FRAME_DATA.size],
                sv[OFF_BTH : FRAME_DATA.size],
                sv[OFF_UDP : FRAME_DATA.size],
            ),
            (sv, sv[OFF_BTH:], sv[OFF_UDP:]),
        )
        self._ctrl_scratch = bytearray(FRAME_CTRL.size + CTRL_MAX_BODY + 4)
        self._ctrl_view = memoryview(self._ctrl_scratch)
        # a SACK frame's (BTH..body for the ICRC, UDP..ICRC for the checksum, whole frame)
        self._sack_views = (
            self._ctrl_view[OFF_BTH : FRAME_SACK.size],
            self._ctrl_view[OFF_UDP : FRAME_SACK.size + 4],
            self._ctrl_view[: FRAME_SACK.size + 4],
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
        """Connect to the peer ``remote`` describes; a record that does not fit this QP
        raises ValueError and leaves the QP unconnected (INIT)."""
        next_state(self.qpn, self.state, QpInput.CONNECT)  # allowed now? (raises if not)
        check_peer(self.net, self.mtu, remote)
        self._transition(QpInput.CONNECT)
        self.peer = remote
        shape = self.net.shape
        self._peer_srcs = frozenset(
            usid.host_address(shape, remote.host, p) for p in range(self.planes)
        )
        self.rxwin = ResponderWindow(
            self.config.window_psns, remote.start_psn, self.config.ack_every
        )
        self._dest = usid.DestTemplate(self.net.shape, self.net.host, remote.host)
        self._slot_tmpl = [self._make_tmpl(ev) for ev in self.evs.ev_values]
        if self._tx_c is not None and self.evs._bag_mode:  # the C send engine (tx_engine)
            self._txe = CTxEngine(self, self._tx_c)
        if self._rx_engines is not None:  # the C receive engine (mrcnic.transport.rx_engine)
            eng = CRxEngine(self, self._rx_engines)
            if self._rx_engines.add(eng):
                self._rxe = eng
        evs, sb = self.evs, self.sb
        # what _send_new needs that never changes after connect (the objects, not their
        # contents): one tuple unpack instead of a score of attribute loads per call
        self._tx_ctx = (
            self._sendq, sb, self.cc, evs.pick, evs.plane_of, evs.tx_packets, self._slot_tmpl,
            sb.records, sb.heap, self.mtu, TS_BIT << 24 | remote.qpn, self._scratch,
            *self._views[0], *self._views[1],
        )  # fmt: skip

    def _transition(self, inp: QpInput) -> None:
        self.state = next_state(self.qpn, self.state, inp)

    def _make_tmpl(self, ev: int) -> Template:
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

    def port_status(self, port: int, up: bool, now_s: float) -> None:
        """A local port went down or came back: take the plane out at once, tell the peer."""
        if self._local_down[port] == (not up):
            return
        self._local_down[port] = not up
        self.evs.now_s = now_s
        self._update_plane(port, now_s)
        if not up and self._txe is not None:
            self._txe.port_down(port)
        elif not up:  # everything in flight on that port is gone: repair it now
            for rec in list(self.sb.records.values()):
                if not rec.lost and self.evs.plane_of[rec.slot] == port:
                    self.sb.mark_lost(rec)
                    self._rtxq.append(rec)
        self._drain_ev_events()
        if self.state is QpState.READY:
            self._port_seq = (self._port_seq + 1) & 0xFFFFFFFF
            mask = sum(1 << p for p in range(self.planes) if not self._local_down[p])
            ts_ns = int(now_s * 1e9)
            body = ENDPOINT.pack(int(wire.EndpointKind.PORT_STATUS), self._port_seq, 0, mask, ts_ns)
            self._ps_pending = (self._port_seq, body)  # supersedes any update not yet acked
            self._ps_tries = 0
            self._send_port_status(now_s)

    def _send_port_status(self, now_s: float) -> None:
        """Send the pending PORT_STATUS, twice (on two planes: it must get through), and arm
        its retransmission: it is repeated, backing off, until the peer acknowledges it
        (EP_RESPONSE with its sequence number) or a newer update supersedes it."""
        assert self._ps_pending is not None
        body = self._ps_pending[1]
        for _ in range(2):
            self._queue_ctrl(OP_EP_REQ, 0, body)
        wait = self._rto * (1 << min(self._ps_tries, 16))
        self._ps_deadline = now_s + min(wait, self.config.max_rto_s)
        self.stats.port_status_sent += 1

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

    def release(self) -> None:
        """Let the C engines go (``Device.destroy_qp``), their counters added to the stats
        first. The engines and this QP refer to each other: without this their buffers
        (megabytes per QP) would wait for Python's cyclic collector, which large C buffers
        do not prompt."""
        if self._rxe is not None:
            self._rxe.fold_counters()
        if self._txe is not None:
            self._txe._stats()
            self._txe.pull_stats()  # ev_stats() stays right after the engine is gone
            self.evs.picker = None
        self._rxe = self._txe = None
        self._rx_engines = self._tx_c = None
        # destroyed: no timer, no frame, no connect acts on the Python state left behind
        self.state = QpState.ERROR

    def state_bytes(self) -> int:
        """Memory this QP holds for its protocol state: the C engines' structs and arrays (the
        send engine's ring of MAX_OUTSTANDING_WRITES messages and per-PSN records dominate),
        the PSN tracking window's bitmap, and on the Python engine its live records (counted
        at their object size). Buffers the user registered or posted are not counted."""
        n = self.config.window_psns // 8
        if self._txe is not None:
            n += self._txe.state_bytes()
        else:
            n += len(self.sb.records) * _RECORD_BYTES + len(self._sendq) * _MESSAGE_BYTES
        if self._rxe is not None:
            n += self._rxe.state_bytes()
        return n

    def get_stats(self) -> QpStats:
        s = self.stats
        s.state_bytes = self.state_bytes()
        s.cwnd_bytes = self.cc.cwnd_bytes
        s.srtt_s = self._srtt or 0.0
        s.rto_s = self._rto
        return s

    @property
    def idle(self) -> bool:
        """Nothing posted is unfinished."""
        if self._txe is not None:
            return self._txe.idle
        return not self._sendq and not self._inflight_msgs

    # -- timers -------------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """The earliest deadline (retransmission, delayed ACK, probe), or None."""
        if self.state is not QpState.READY:
            return None
        t = self.sb.next_deadline() if self._txe is None else self._txe.next_deadline()
        a = self._ack_deadline if self._rxe is None else self._rxe.deadline()
        if a is not None and (t is None or a < t):
            t = a
        if self.evs.probe_due:
            p = self.evs.next_probe_s()
            if p is not None and (t is None or p < t):
                t = p
        for d in (self._ps_deadline, self._stall_deadline, self._rev_probe_at):
            if d is not None and (t is None or d < t):
                t = d
        return t

    def handle_timer(self, now_s: float) -> None:
        self.evs.now_s = now_s
        if self._rxe is not None:
            self._rxe.timer(now_s)
        elif self._ack_deadline is not None and self._ack_deadline <= now_s:
            self._ack_deadline = None
            psn, ev, ts, ce = self._ack_trigger
            if self.rxwin.pending:
                self._send_sack(psn, ev, ts, ce, ev % self.planes)
        if self.state is not QpState.READY:
            return
        if self._ps_deadline is not None and self._ps_deadline <= now_s:
            self._ps_tries += 1
            if self._ps_tries > self.config.retry_limit:
                # the peer never acknowledged it (gone, or in ERROR): stop, and say so
                self._ps_pending = None
                self._ps_deadline = None
                self.stats.port_status_unacked += 1
            else:
                self._send_port_status(now_s)
        if self._stall_deadline is not None and self._stall_deadline <= now_s:
            self._check_stall(now_s)
            if self.state is not QpState.READY:
                return
        if self._rev_probe_at is not None and self._rev_probe_at <= now_s:
            self._reverse_probe_round(now_s)
        if self._txe is not None:  # the same loop, in C
            self._txe.expire(now_s)
            if self.state is not QpState.READY:
                return
        max_rto = self.config.max_rto_s
        for rec in self.sb.expired(now_s) if self._txe is None else ():
            # the deadline was set with the RTO of its send time: if the RTO has grown since
            # (the queues grew), the packet gets the current one
            rto = self._rto * (1 << min(rec.retries, 30))  # (capped: max_rto_s caps the result)
            deadline = rec.sent_s + (rto if rto < max_rto else max_rto)
            if deadline > now_s:
                self.sb.arm(rec, deadline)
                continue
            if rec.retries >= self.config.retry_limit:
                self._retry_exceeded(rec.psn, rec.retries, rec.msg, now_s)
                return
            self.stats.timeouts += 1
            # a path that acknowledged anything in the last half RTO is queued, not dead
            self.evs.on_timeout(rec.slot, rec.sent_s, now_s, 0.5 * self._rto)
            rec.to_sent_s = rec.sent_s
            rec.to_slot = rec.slot
            rec.to_ts_ns = rec.tx_ts_ns
            rec.lost_by = LOST_BY_TIMEOUT
            rec.losses += 1
            rec.retries += 1
            self.sb.mark_lost(rec)
            self._rtxq.append(rec)
            self.cc.on_timeout(now_s)
        interval = self.config.probe_interval_s or self._rto
        ts_ns = int(now_s * 1e9)
        for slot in self.evs.due_probes(now_s, interval, ts_ns):
            ev = self.evs.ev_values[slot]
            body = RPROBE.pack(slot, ev, ts_ns)
            self._ctrl.append(self._ctrl_frame(OP_RPROBE, 0, body, ev))
            self.stats.probes_sent += 1
        self._drain_ev_events()

    # -- sending --------------------------------------------------------------------------------

    def _ctrl_frame(
        self, op: int, psn: int, body: bytes, ev: int, dest_qp: int = -1
    ) -> tuple[int, bytes]:
        eth_dst, eth_src, w0, src, dst, sport, psum = self._tmpl.get(ev) or self._make_tmpl(ev)
        scr = self._ctrl_scratch
        mv = self._ctrl_view
        end = FRAME_CTRL.size + len(body)
        ulen = end + 4 - OFF_UDP
        FRAME_CTRL.pack_into(
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
            self.peer.qpn if dest_qp < 0 else dest_qp,
            psn,
        )  # fmt: skip  (DSCP CONTROL, ECT0)
        scr[FRAME_CTRL.size : end] = body
        U32.pack_into(scr, end, crc32(mv[OFF_BTH:end]))
        udp = from_bytes(mv[OFF_UDP : end + 4], "big")
        if ulen & 1:  # an odd datagram is summed as if padded with a zero byte
            udp <<= 8
        U16.pack_into(scr, OFF_UCSUM, 0xFFFF - (psum + ulen + udp) % 0xFFFF)
        return (ev % self.planes, bytes(mv[: end + 4]))

    def _queue_ctrl(self, op: int, psn: int, body: bytes, plane: int = -1) -> None:
        """Queue a control frame: on ``plane`` (the plane the packet being answered came in
        on) or, with -1, round robin over the reverse EVs of every live plane."""
        if self.peer is None:
            return
        evs = self.evs
        rxe = self._rxe
        if rxe is not None:  # one round robin over the reverse EVs: the C engine's
            rxe.pull_reverse()
        ev = evs.next_reverse_ev() if plane < 0 else evs.reverse_ev_on(plane)
        if rxe is not None:
            rxe.push_reverse()
        self._ctrl.append(self._ctrl_frame(op, psn, body, ev))

    # -- receiving ------------------------------------------------------------------------------

    def receive_frame(self, data: bytes | bytearray | memoryview, now_s: float) -> None:
        """Process one received Ethernet frame addressed to this QP."""
        if self.peer is None or self.state is QpState.ERROR:
            self.stats.rx_closed += 1
            return
        rxe = self._rxe
        if rxe is not None and len(data) > OFF_BTH:
            op = data[OFF_BTH]
            if OP_FIRST <= op <= OP_ONLY_IMM and rxe.frame(data, now_s):
                return  # a data frame: the C engine placed, refused or counted it
            txe = self._txe
            if txe is not None and op in (OP_SACK, OP_ACK) and txe.frame(data, now_s):
                return  # a SACK: the C send engine applied or counted it
        n = len(data)
        if n < OFF_BTH + 12:
            self.stats.rx_malformed += 1
            return
        ethertype, w0, plen, nh, _hop = RX_HEAD.unpack_from(data, 12)
        end = OFF_UDP + plen
        if ethertype != 0x86DD or w0 >> 28 != 6 or nh != 17 or end > n or plen < 20:
            self.stats.rx_malformed += 1
            return
        # The first acceptance rule: only the connected peer's addresses may speak to this QP
        # (a third host that guessed the QP number is dropped and counted, whatever it sends)
        if bytes(data[OFF_SRC:OFF_DST]) not in self._peer_srcs:
            self.stats.rx_foreign += 1
            return
        evs = self.evs
        evs.now_s = now_s
        op = data[OFF_BTH]
        if OP_FIRST <= op <= OP_ONLY_IMM:
            # The common case inline: a new, untrimmed data packet without an immediate, in
            # the window, accepted by the memory table.  Everything up to the placement only
            # looks; anything else (even a bad ICRC) goes to _rx_data, which starts over.
            mv = memoryview(data)
            if (
                op not in IMM_OPS
                and (w0 >> 22) & 0x3F not in DSCPS_TRIMMED
                and end >= OFF_BTH + 44
                and crc32(mv[OFF_BTH : end - 4]) == U32.unpack_from(data, end - 4)[0]
            ):
                w1, w2, msn, _rqmsn, ts_ns, va, rkey, length = RX_DATA.unpack_from(
                    data, OFF_BTH + 4
                )
                psn = w2 & PSN_MASK
                rxw = self.rxwin
                d = (psn - rxw.expected) & PSN_MASK
                # d == 0 is the cumulative ack's next PSN, never marked (receive() advances
                # past it at once): no need to ask the window
                if (
                    w1 & 0xFFFFFF == self.qpn
                    and d < rxw.size
                    and (msn - self._rx_msn) & MSN_MASK < MSN_WINDOW
                    and not (d and rxw.win.test(psn))
                    and self.memory.place(rkey, va, mv[OFF_BTH + 40 : end - 4]) is PLACE_OK
                ):
                    self._rx_new_data(data, end, w0, w1, w2, psn, msn, ts_ns, length, now_s)
                    return
            self._rx_data(data, end, w0, op, now_s)
        elif op in (OP_SACK, OP_ACK) and end == SACK_FRAME_END:
            self._rx_sack_frame(data, op, now_s)
        else:
            self._rx_control(data, end, w0, now_s)
        if evs.events:
            self._drain_ev_events()

    def _rx_control(self, data, end: int, w0: int, now_s: float) -> None:  # noqa: ANN001
        try:
            pkt = wire.decode_mrc(memoryview(data)[OFF_BTH:end])
        except wire.WireError:
            self.stats.rx_malformed += 1
            return
        if pkt.bth.dest_qp != self.qpn:
            self.stats.rx_malformed += 1
            return
        op = pkt.bth.opcode
        if op in (OP_SACK, OP_ACK):
            sk = pkt.sack
            self._rx_sack(
                sk.cack_psn, sk.sack_offset, sk.bitmap, sk.ev, int(sk.mark), sk.ece,
                sk.rcv_cwnd_pen, sk.reflected_ts_ns, op == OP_ACK, now_s,
            )  # fmt: skip
        elif op == OP_NACK:
            self._rx_nack(pkt.nack, now_s)
        elif op == OP_RPROBE:
            self.stats.rx_probes += 1
            # answer with an ACK (0xD1, the SACK body) echoing the probed EV and timestamp
            ce = (w0 >> 20) & 3 == 3
            probe = pkt.probe
            plane = probe.ev % self.planes
            if self._rxe is not None:
                self._rxe.ack(OP_ACK, probe.ev, probe.tx_ts_ns, ce, plane)
            else:
                cack = (self.rxwin.expected - 1) & PSN_MASK
                self._send_sack(cack, probe.ev, probe.tx_ts_ns, ce, plane, OP_ACK)
        elif op == OP_EP_REQ and pkt.endpoint.kind == wire.EndpointKind.PORT_STATUS:
            ep = pkt.endpoint
            self.stats.rx_port_status += 1
            # acknowledge every copy (the sender retries until it hears this), apply only
            # what is newer than the last update applied: a stale "down" that arrives after
            # an "up" must not take a plane out for good
            answer = ENDPOINT.pack(int(ep.kind), ep.ident, 0, ep.port_mask, ep.ts_ns)
            self._queue_ctrl(OP_EP_RESP, 0, answer)
            last = self._peer_port_seq
            if last is not None:
                diff = (ep.ident - last) & 0xFFFFFFFF
                if diff == 0:
                    return  # the second copy of the update just applied
                if diff >= 1 << 31:
                    self.stats.rx_stale_port_status += 1
                    return
            self._peer_port_seq = ep.ident
            mask = ep.port_mask
            for p in range(self.planes):
                down = not (mask >> p) & 1
                if self._peer_down[p] != down:
                    self._peer_down[p] = down
                    self._update_plane(p, now_s)
            self._events.append(PeerPortStatus(mask, now_s))
        elif op == OP_EP_RESP and pkt.endpoint.kind == wire.EndpointKind.PORT_STATUS:
            self.stats.rx_port_status_acks += 1
            pending = self._ps_pending
            if pending is not None and pkt.endpoint.ident == pending[0]:
                self._ps_pending = None
                self._ps_deadline = None
        else:
            self.stats.rx_malformed += 1

    # -- the reverse EV set ---------------------------------------------------------------------

    def _reverse_probe_round(self, now_s: float) -> None:
        """Every REVERSE_PROBE_RTOS RTOs while this QP sends acknowledgments: an EV probe
        (connectionless, to the peer host's QP 0x2, answered on the same path) on each
        reverse EV of a live plane. A reverse EV that leaves REVERSE_MISSES_BAD rounds in a
        row unanswered is taken out of the reverse set (its plane's other reverse EVs, or
        other planes, carry the acknowledgments) and probed on; an answer brings it back."""
        evs = self.evs
        st = self.stats
        for ev in self._rev_pending:
            misses = self._rev_misses.get(ev, 0) + 1
            self._rev_misses[ev] = misses
            if misses >= REVERSE_MISSES_BAD and ev not in evs.reverse_bad:
                evs.reverse_bad.add(ev)
                st.reverse_evs_retired += 1
        self._rev_pending = {}
        if st.tx_sacks == self._rev_sacks_seen and not evs.reverse_bad:
            self._rev_probe_at = None  # not acknowledging anything: no reverse traffic to guard
            return
        self._rev_sacks_seen = st.tx_sacks
        ts_ns = int(now_s * 1e9) or 1
        kind = int(wire.EndpointKind.EV_PROBE)
        for ev in evs.reverse:
            if evs.plane_down[ev % self.planes]:
                continue
            body = ENDPOINT.pack(kind, self.qpn, ev, 0, ts_ns)
            self._ctrl.append(self._ctrl_frame(OP_EP_REQ, 0, body, ev, wire.EV_PROBE_QPN))
            self._rev_pending[ev] = ts_ns
            st.ev_probes_sent += 1
        self._rev_probe_at = now_s + REVERSE_PROBE_RTOS * self._rto

    def on_ev_probe_answer(self, ev: int, ts_ns: int, now_s: float) -> None:
        """The answer to one of our EV probes (routed here by the host's QP 0x2)."""
        if self._rev_pending.get(ev) != ts_ns:
            return  # stale, or not ours
        del self._rev_pending[ev]
        self._rev_misses[ev] = 0
        self.stats.ev_probes_answered += 1
        if ev in self.evs.reverse_bad:
            self.evs.reverse_bad.discard(ev)
            self.stats.reverse_evs_restored += 1

    # -- liveness -------------------------------------------------------------------------------

    def _note_stall(self, now_s: float) -> None:
        """Called by the send path: work is waiting and no EV can carry it (every plane down,
        locally or as the peer reported, or every EV denied). The retransmission timer keeps
        running, backing off as for a lost packet: a path back within the retry budget
        resumes the transfer; otherwise the QP ends with RETRY_EXCEEDED and says why."""
        if self._stall_deadline is None:
            self._stall_since_s = now_s
            self._stall_tries = 0
            self._stall_deadline = now_s + self._rto

    def _check_stall(self, now_s: float) -> None:
        txe = self._txe
        if txe is not None:
            work = txe.work_waiting or txe.outstanding > 0
        else:
            work = bool(self._rtxq or self._sendq or self.sb.records)
        if self.evs.active or not work:
            self._stall_deadline = None
            return
        if self._stall_tries >= self.config.retry_limit:
            local = [p for p in range(self.planes) if self._local_down[p]]
            peer = [p for p in range(self.planes) if self._peer_down[p]]
            counts = self.evs.counts()
            self._fatal(
                WcStatus.RETRY_EXCEEDED,
                f"no usable path for {now_s - self._stall_since_s:.3f} s "
                f"({self._stall_tries} retries, retry_limit {self.config.retry_limit}): "
                f"local ports down {local}, peer ports down {peer}, "
                f"EVs {counts['ASSUMED_BAD']} ASSUMED_BAD and {counts['DENIED']} DENIED",
                now_s,
                failed=txe.first_message()
                if txe is not None
                else self._inflight_msgs[0]
                if self._inflight_msgs
                else (self._sendq[0] if self._sendq else None),
            )
            return
        self._stall_tries += 1
        self.stats.timeouts += 1
        wait = self._rto * (1 << min(self._stall_tries, 30))
        self._stall_deadline = now_s + min(wait, self.config.max_rto_s)

    # -- errors ---------------------------------------------------------------------------------

    def _fatal(
        self, status: WcStatus, reason: str, now_s: float, failed: TxMessage | None = None
    ) -> None:
        if self.state is QpState.ERROR:
            return
        self._transition(QpInput.FATAL)
        self._events.append(QpErrorEvent(self.qpn, status, reason, now_s))
        seen = set()
        txe = self._txe
        msgs = txe.messages() if txe is not None else list(self._inflight_msgs) + list(self._sendq)
        if txe is not None:
            txe.reset()
        for m in msgs:
            if id(m) in seen:
                continue
            seen.add(id(m))
            s = status if m is failed else WcStatus.FLUSHED
            self._events.append(WriteCompleted(m.wr_id, s, m.length, now_s))
        self._inflight_msgs.clear()
        self._sendq.clear()
        self._rtxq.clear()
        self.sb.order.clear()
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
]

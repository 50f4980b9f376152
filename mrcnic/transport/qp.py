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
checks the bytes against ``mrcnic.wire``.  Constants and their reasons: docs/design/transport.md.

The QP composes two engines, the per-packet work (``mrcnic.transport.engine``): a send
engine (``self.tx``: segmenting, retransmission, reading SACKs) and a receive engine
(``self.rx``: placing data, completions, sending SACKs), each C or its Python twin, chosen
once (an :class:`~mrcnic.transport.engine.EngineChoice`) and built when the QP connects. The
types it speaks are in ``mrcnic.transport.qp_types``, the frame layouts in
``mrcnic.transport.frames``. This module holds the policy: set-up, the API, the EV table and
congestion control the engines consult, timers, the control frames, the receive dispatch,
completions' and errors' events.
"""

from __future__ import annotations

from collections import deque

from mrcnic import wire
from mrcnic.transport.cc import CcParams, CongestionControl, make_cc
from mrcnic.transport.engine import DETACHED, EngineChoice, RecvEngine, SendEngine
from mrcnic.transport.engine_choice import PY_ENGINES
from mrcnic.transport.ev import EvInput, EvState, EvTable
from mrcnic.transport.frames import (
    CTRL_MAX_BODY,
    ENDPOINT,
    FRAME_CTRL,
    NACK,
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
    PSN_MASK,
    RPROBE,
    RX_HEAD,
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
    checked_write,
    initial_psn,
    next_state,
    peek_dest_qp,
)
from mrcnic.transport.rx_engine import CRxEngine
from mrcnic.transport.sack import ResponderWindow, Scoreboard
from mrcnic.transport.tx_engine import CTxEngine
from mrcnic.wire import usid

#: a round of EV probes over the reverse EV set every this many RTOs (while acknowledging)
REVERSE_PROBE_RTOS = 16
#: rounds unanswered in a row that take a reverse EV out of use
REVERSE_MISSES_BAD = 2
#: RTO before the first RTT sample, in configured base RTTs (the first window is a whole BDP
#: sent at once, and an incast multiplies the queue it meets)
INITIAL_RTO_RTTS = 8
#: a QP with work under way fails when nothing of it is acknowledged for this many
#: max_rto_s past its retry limit: longer than the retry rule itself can take (every retry
#: waits at most max_rto_s), so the rule only catches what the retry rule cannot, e.g.
#: repairs that never time out because other frames keep answering them
NO_PROGRESS_EXTRA_RTOS = 1

PORT_STATUS = wire.EndpointKind.PORT_STATUS


class QueuePair(Outbox):
    """One MRC connection endpoint: the policy, over a send and a receive engine."""

    def __init__(
        self,
        qpn: int,
        net: NetConfig,
        memory: MemoryTable,
        line_rate_bps: float,
        config: QpConfig | None = None,
        engines: EngineChoice = PY_ENGINES,
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
            CcParams(
                cfg.mtu_bytes,
                line_rate_bps,
                cfg.base_rtt_s,
                line_rate_bps / self.planes,
                planes=self.planes,
                equal_shares=cfg.ev.plane_share == "equal",
            ),
            **dict(cfg.cc_options),
        )
        self.start_psn = initial_psn(cfg.start_psn)
        self.rxwin = ResponderWindow(cfg.window_psns, 0, cfg.ack_every)  # reset on connect
        self.sb = Scoreboard(self.start_psn)
        self.stats = QpStats()
        self._events: deque[Event] = deque()
        self._ctrl: list[tuple[int, bytes]] = []
        self._msn = 0
        self._rqmsn = 0
        self._min_rto = cfg.min_rto_s if cfg.min_rto_s is not None else 2 * cfg.base_rtt_s
        self._srtt: float | None = None
        self._rttvar = 0.0
        self._rtt_peak = 0.0  # recent RTT tail (fast attack, slow release per SACK): _rto's
        self._rto_peak = 0.0  # the same, released per RTT of time: the retransmission timer's
        self._rto_peak_at_s = 0.0  # when _rto_peak was last updated (its release is per time)
        self._host_stall_s = 0.0  # the longest delay a spurious timeout revealed: the timer's
        self._host_stall_at_s = 0.0  # when it was set (it fades from then: host_stall_s)
        self._min_rtt = cfg.base_rtt_s  # smallest data RTT measured (configured until then)
        self._rtt_measured = False
        self._rto = max(self._min_rto, INITIAL_RTO_RTTS * cfg.base_rtt_s)
        self.evs.path_quiet_s = 0.5 * self._rto  # (kept in step with the RTO by its owners)
        self._ack_delay = cfg.ack_delay_s if cfg.ack_delay_s is not None else cfg.base_rtt_s / 8
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
        # liveness: work under way and nothing acknowledged (_check_progress)
        self._progress_mark: tuple[int, int] | None = None  # (snd_una, completions) seen
        self._progress_s = 0.0  # when the mark last changed
        self._progress_rtx = 0  # retransmissions then
        self._progress_budget_s = (cfg.retry_limit + 1 + NO_PROGRESS_EXTRA_RTOS) * cfg.max_rto_s
        # liveness: work to do and no EV to send it on
        self._stall_deadline: float | None = None
        self._stall_tries = 0
        self._stall_since_s = 0.0
        # peer, filled by connect()
        self.peer: QpAttributes | None = None
        self._dest: usid.DestTemplate | None = None
        self._peer_srcs: frozenset[bytes] = frozenset()  # the peer's address on each plane
        self._tmpl: dict[int, Template] = {}  # EV -> frame template (see _make_tmpl)
        self._slot_tmpl: list[Template] = []  # the same, per EV slot of self.evs
        self._ip_src = [usid.host_address(net.shape, net.host, p) for p in range(self.planes)]
        self._ctrl_scratch = bytearray(FRAME_CTRL.size + CTRL_MAX_BODY + 4)
        self._ctrl_view = memoryview(self._ctrl_scratch)
        # the engines: chosen now, built by connect (until then DETACHED: nothing in them)
        self.engines = engines
        self.tx: SendEngine = DETACHED
        self.rx: RecvEngine = DETACHED

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
        self.tx, self.rx = self.engines.make(self)

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
        msg = TxMessage(wr_id, buf, remote_va, rkey, imm, self._msn, self._rqmsn)
        self.tx.post(msg)  # (raises at the engine's limit: nothing changed yet)
        self._msn = (self._msn + 1) & 0xFFFF
        if imm is not None:
            self._rqmsn = (self._rqmsn + 1) & 0xFFFF

    def frames_to_send(self, now_s: float) -> list[tuple[int, bytes]]:
        """Everything that may leave now: control first, then retransmissions, then new data
        while the window allows.  The port index is the plane of the frame's EV."""
        out = self._ctrl
        self._ctrl = []
        if self.state is not QpState.READY:
            return out
        self.evs.now_s = now_s
        tx = self.tx
        tx.send(now_s, out)
        if self._progress_mark is None and (tx.outstanding or tx.work_waiting):
            self._note_progress(now_s)  # work under way: the no-progress rule watches
        if not self.evs.active and tx.work_waiting:
            self._note_stall(now_s)  # nothing can carry the work: keep a timer running
        elif self._stall_deadline is not None and self.evs.active:
            self._stall_deadline = None
        return out

    def loss_recovery_s(self) -> list[float]:
        """For each packet retransmitted because it was lost (not spuriously), the time from
        its first transmission to its first retransmission (the last 65536 such packets)."""
        return self.tx.loss_recovery_s()

    def port_status(self, port: int, up: bool, now_s: float) -> None:
        """A local port went down or came back: take the plane out at once, tell the peer."""
        if self._local_down[port] == (not up):
            return
        self._local_down[port] = not up
        self.evs.now_s = now_s
        self._update_plane(port, now_s)
        if not up:  # everything in flight on that port is gone: repair it now
            self.tx.port_down(port)
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
        """Let the engines go (``Device.destroy_qp``), their counters added to the stats
        first. The engines and this QP refer to each other: without this the QP and the C
        engines' buffers (megabytes per QP) would wait for Python's cyclic collector, which
        large C buffers do not prompt."""
        self.rx.release()
        self.tx.release()
        self.tx = self.rx = DETACHED
        # destroyed: no timer, no frame, no connect acts on the Python state left behind
        self.state = QpState.ERROR

    def state_bytes(self) -> int:
        """Memory this QP holds for its protocol state: the C engines' structs and arrays (the
        send engine's ring of MAX_OUTSTANDING_WRITES messages and per-PSN records dominate),
        the PSN tracking window's bitmap, and on the Python engine its live records (counted
        at their object size). Buffers the user registered or posted are not counted."""
        return self.config.window_psns // 8 + self.tx.state_bytes() + self.rx.state_bytes()

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
        return self.tx.idle

    # -- timers -------------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """The earliest deadline (retransmission, delayed ACK, probe), or None."""
        if self.state is not QpState.READY:
            return None
        t = self.tx.next_deadline()
        a = self.rx.deadline()
        if a is not None and (t is None or a < t):
            t = a
        if self.evs.probe_due:
            p = self.evs.next_probe_s()
            if p is not None and (t is None or p < t):
                t = p
        for d in (self._ps_deadline, self._stall_deadline, self._rev_probe_at):
            if d is not None and (t is None or d < t):
                t = d
        if self._progress_mark is not None:
            d = self._progress_s + self._progress_budget_s
            if t is None or d < t:
                t = d
        return t

    def handle_timer(self, now_s: float) -> None:
        self.evs.now_s = now_s
        self.rx.timer(now_s)
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
        if self._progress_mark is not None and self._progress_s + self._progress_budget_s <= now_s:
            self._check_progress(now_s)
            if self.state is not QpState.READY:
                return
        if self._rev_probe_at is not None and self._rev_probe_at <= now_s:
            self._reverse_probe_round(now_s)
        self.tx.expire(now_s)  # the retransmission timers
        if self.state is not QpState.READY:
            return
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
            self.peer.qpn if dest_qp < 0 else dest_qp,  # type: ignore[union-attr]  # connected
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
        # (one round robin over the reverse EVs: the receive engine's)
        self._ctrl.append(self._ctrl_frame(op, psn, body, self.rx.reverse_ev(plane)))

    def _send_nack(self, reason: int, psn: int, ev: int, ts_ns: int, plane: int) -> None:
        body = NACK.pack(reason << 24 | psn, ev, (self.rxwin.expected - 1) & PSN_MASK, ts_ns)
        self.stats.tx_nacks += 1
        self._queue_ctrl(OP_NACK, psn, body, plane)

    # -- receiving ------------------------------------------------------------------------------

    def receive_frame(self, data: bytes | bytearray | memoryview, now_s: float) -> None:
        """Process one received Ethernet frame addressed to this QP."""
        if self.peer is None or self.state is QpState.ERROR:
            self.stats.rx_closed += 1
            return
        if len(data) > OFF_BTH:
            op = data[OFF_BTH]
            if OP_FIRST <= op <= OP_ONLY_IMM:
                if self.rx.frame(data, now_s):
                    return  # a data frame: the receive engine placed, refused or counted it
            elif op in (OP_SACK, OP_ACK) and self.tx.frame(data, now_s):
                return  # a SACK: the send engine applied or counted it
        end = self._accept(data)
        if end == 0:
            return
        evs = self.evs
        evs.now_s = now_s
        self._rx_control(data, end, U32.unpack_from(data, 14)[0], now_s)
        if evs.events:
            self._drain_ev_events()

    def _accept(self, data: bytes | bytearray | memoryview) -> int:
        """The checks every frame passes first (an IPv6/UDP frame, whole; from the peer):
        the end of its UDP datagram, or 0 when it is dropped (counted)."""
        n = len(data)
        if n < OFF_BTH + 12:
            self.stats.rx_malformed += 1
            return 0
        ethertype, w0, plen, nh, _hop = RX_HEAD.unpack_from(data, 12)
        end = OFF_UDP + plen
        if ethertype != 0x86DD or w0 >> 28 != 6 or nh != 17 or end > n or plen < 20:
            self.stats.rx_malformed += 1
            return 0
        # The first acceptance rule: only the connected peer's addresses may speak to this QP
        # (a third host that guessed the QP number is dropped and counted, whatever it sends)
        if bytes(data[OFF_SRC:OFF_DST]) not in self._peer_srcs:
            self.stats.rx_foreign += 1
            return 0
        return end

    def _rx_control(self, data, end: int, w0: int, now_s: float) -> None:
        try:
            pkt = wire.decode_mrc(memoryview(data)[OFF_BTH:end])
        except wire.WireError:
            self.stats.rx_malformed += 1
            return
        if pkt.bth.dest_qp != self.qpn:
            self.stats.rx_malformed += 1
            return
        op = pkt.bth.opcode
        # decode_mrc refuses a frame whose opcode's body is missing: the body is there
        if op in (OP_SACK, OP_ACK):
            sk = pkt.sack
            assert sk is not None
            self.tx.sack(
                sk.cack_psn, sk.sack_offset, sk.bitmap, sk.ev, int(sk.mark), sk.ece,
                sk.rcv_cwnd_pen, sk.reflected_ts_ns, op == OP_ACK, now_s,
            )  # fmt: skip
        elif op == OP_NACK:
            assert pkt.nack is not None
            self._rx_nack(pkt.nack, now_s)
        elif op == OP_RPROBE:
            self.stats.rx_probes += 1
            # answer with an ACK (0xD1, the SACK body) echoing the probed EV and timestamp
            ce = (w0 >> 20) & 3 == 3
            probe = pkt.probe
            assert probe is not None
            self.rx.ack(OP_ACK, probe.ev, probe.tx_ts_ns, ce, probe.ev % self.planes)
        elif op == OP_EP_REQ and pkt.endpoint is not None and pkt.endpoint.kind == PORT_STATUS:
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
        elif op == OP_EP_RESP and pkt.endpoint is not None and pkt.endpoint.kind == PORT_STATUS:
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
        tx = self.tx
        if self.evs.active or not (tx.work_waiting or tx.outstanding > 0):
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
                failed=tx.first_message(),
            )
            return
        self._stall_tries += 1
        self.stats.timeouts += 1
        wait = self._rto * (1 << min(self._stall_tries, 30))
        self._stall_deadline = now_s + min(wait, self.config.max_rto_s)

    def _note_progress(self, now_s: float) -> None:
        self._progress_mark = (self.tx.snd_una, self.stats.completions)
        self._progress_s = now_s
        self._progress_rtx = self.stats.retransmissions

    def _check_progress(self, now_s: float) -> None:
        """The no-progress rule, when its deadline is due: a QP with work under way (packets
        outstanding, or writes waiting to be sent) of which nothing was acknowledged
        (``snd_una`` and the completions unchanged) for its retry budget fails with
        RETRY_EXCEEDED, whatever frames keep arriving. The retry limit counts timeouts of
        one packet, and the no-path rule (_check_stall) a stall without a break; repairs
        that other frames set off before a timer fires (trim NACKs, SACK-found losses, a
        port going down), and port status updates that take the planes out and back in
        turn, start both over, so frames forged under the peer's address (on a fabric
        without a source guard) kept a QP retransmitting with no progress and no error."""
        tx = self.tx
        if not (tx.outstanding or tx.work_waiting):
            self._progress_mark = None  # idle: watched again from its next send
            return
        if (tx.snd_una, self.stats.completions) != self._progress_mark:
            self._note_progress(now_s)
            return
        st = self.stats
        why = (
            "the peer acknowledges nothing we send, or frames we did not cause keep the "
            "repairs going (forged under the peer's address?)"
        )
        if not self.evs.active:
            local = [p for p in range(self.planes) if self._local_down[p]]
            peer = [p for p in range(self.planes) if self._peer_down[p]]
            why = f"no usable path now (local ports down {local}, peer ports down {peer})"
        self._fatal(
            WcStatus.RETRY_EXCEEDED,
            f"no progress for {now_s - self._progress_s:.3f} s: PSN {tx.snd_una} and "
            f"{tx.outstanding} packets unacknowledged, {st.retransmissions - self._progress_rtx}"
            f" retransmissions meanwhile (budget (retry_limit {self.config.retry_limit} + "
            f"{1 + NO_PROGRESS_EXTRA_RTOS}) x max_rto_s = {self._progress_budget_s:.3f} s): " + why,
            now_s,
            failed=tx.first_message(),
        )

    # -- errors ---------------------------------------------------------------------------------

    def _fatal(
        self, status: WcStatus, reason: str, now_s: float, failed: TxMessage | None = None
    ) -> None:
        if self.state is QpState.ERROR:
            return
        self._transition(QpInput.FATAL)
        self._events.append(QpErrorEvent(self.qpn, status, reason, now_s))
        msgs = self.tx.messages()
        self.tx.reset()
        # The write that failed completes first, with the real status: a verbs user takes
        # the first error completion of a QP for the cause (an earlier write still being
        # repaired is flushed after it, not before)
        if failed is not None:
            self._events.append(WriteCompleted(failed.wr_id, status, failed.length, now_s))
        seen = {id(failed)}
        for m in msgs:
            if id(m) in seen:
                continue
            seen.add(id(m))
            self._events.append(WriteCompleted(m.wr_id, WcStatus.FLUSHED, m.length, now_s))

    def _nack_fatal(self, reason: int, psn: int, m: TxMessage, now_s: float) -> None:
        """A NACK that ends the QP: UNEXP_EVENT or REMOTE_ACCESS_ERROR about PSN ``psn`` of
        write ``m``."""
        if reason == wire.NackReason.UNEXP_EVENT:
            self._fatal(
                WcStatus.REMOTE_OP_ERROR,
                f"peer reported an unexpected event (UNEXP_EVENT) at PSN {psn}",
                now_s,
            )
            return
        self._fatal(
            WcStatus.REMOTE_ACCESS_ERROR,
            f"peer refused write wr_id={m.wr_id} (R_Key {m.rkey:#x}, VA {m.remote_va:#x}, "
            f"{m.length} bytes): remote access error",
            now_s,
            failed=m,
        )

    def _retry_exceeded(self, psn: int, retries: int, m: TxMessage, now_s: float) -> None:
        self._fatal(
            WcStatus.RETRY_EXCEEDED,
            f"PSN {psn} unacknowledged after {retries} retransmissions "
            f"(retry_limit {self.config.retry_limit})",
            now_s,
            failed=m,
        )

    def _drain_ev_events(self) -> None:
        evq = self.evs.events
        while evq:
            self._events.append(evq.popleft())

    # -- for tests and tools that look inside ---------------------------------------------------

    def _rx_sack(self, *fields: int | bool | float) -> None:
        """A decoded SACK's fields (SendEngine.sack's), as if it had arrived."""
        self.tx.sack(*fields)  # type: ignore[arg-type]

    def _rx_nack(self, n: wire.NACK, now_s: float) -> None:
        self.tx.nack(int(n.reason), n.psn, n.cack_psn, n.reflected_ts_ns, now_s)

    def _reo_window_s(self) -> float:
        return self.tx.reo_window_s()

    @property
    def _txe(self) -> CTxEngine | None:
        """The C send engine, or None when the QP sends with the Python twin."""
        tx = self.tx
        return tx if isinstance(tx, CTxEngine) else None

    @property
    def _rxe(self) -> CRxEngine | None:
        """The C receive engine, or None when the QP receives with the Python twin."""
        rx = self.rx
        return rx if isinstance(rx, CRxEngine) else None

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

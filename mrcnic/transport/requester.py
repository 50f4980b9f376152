"""The Python send engine: an MRC requester's per-packet work, the twin of the C one
(``mrcnic.transport.tx_engine.CTxEngine``, ``csrc/mrc_txe.c``) behind the same interface
(:class:`mrcnic.transport.engine.SendEngine`): segmenting posted writes into data frames on
sprayed EVs, the scoreboard and retransmission timers, and everything a SACK or NACK tells
the sender (loss detection, RTT samples and the RTO, spurious timeouts, completions).

It makes the same decisions and the same frames as the C engine, and the same calls into the
QP's policy (the EV table, congestion control, errors); tests/unit/test_tx_engine.py holds
both to that. It is also the protocol's reference, and what the simulator runs."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict
from typing import TYPE_CHECKING

from mrcnic import wire
from mrcnic.transport.cc import (
    LOSS_SACK,
    LOSS_TIMEOUT,
    LOSS_TRIM,
    LOSS_TRIM_LAST_HOP,
    LossSample,
    new_ack_sample,
    new_loss_sample,
)
from mrcnic.transport.ev import EvInput
from mrcnic.transport.frames import (
    ACKREQ,
    FRAME_DATA,
    FRAME_DATA_IMM,
    MARK_SKIP_ONCE,
    MSN_WINDOW,
    OFF_BTH,
    OFF_UCSUM,
    OFF_UDP,
    OP_ACK,
    OP_FIRST,
    OP_LAST,
    OP_LAST_IMM,
    OP_MIDDLE,
    OP_ONLY,
    OP_ONLY_IMM,
    PSN_HALF,
    PSN_MASK,
    RTX_BIT,
    RX_SACK,
    SACK_FRAME_END,
    TS_BIT,
    U16,
    U32,
    Template,
    crc32,
    csum_partial,
    from_bytes,
)
from mrcnic.transport.qp_types import MAX_OUTSTANDING_WRITES as _MAX_OUT
from mrcnic.transport.qp_types import (
    QpAttributes,
    ResourceLimitError,
    TxMessage,
    WcStatus,
    WriteCompleted,
)
from mrcnic.transport.sack import (
    LOSS_CAUSES,
    LOST_BY_EV_ORDER,
    LOST_BY_SACK,
    LOST_BY_TIMEOUT,
    LOST_BY_TRIM,
    TxRecord,
)

if TYPE_CHECKING:
    from mrcnic.transport.engine import SendHost

#: the RTT peak tracker follows a higher sample at once and decays towards lower ones by this
#: fraction per sample (about 64 SACKs: a few RTTs), so it remembers the recent tail
RTT_PEAK_RELEASE = 1 / 64
#: the RTO is at least this multiple of the recent RTT peak
RTO_PEAK_GAIN = 1.5
#: the retransmission timer's own peak tracker (rtx_rto_s) releases this fraction per
#: smoothed RTT of time (halved in ~5 RTTs), not per sample. The per-sample rule forgot a
#: peak within one RTT when a QP hears ~100 SACKs an RTT, and every scheduling stall of its
#: peer became a burst of spurious timeouts (thousands a second in bench-nic), each retiring
#: an EV. The RTO that paces probes and the reordering window keep the per-sample peak: in
#: the simulator, with nothing stalling, a slower probe or a wider window only found failed
#: paths later.
RTO_PEAK_RELEASE = 1 / 8
#: the longest delay a spurious timeout revealed (``host_stall_s``) also floors the
#: retransmission timer (x RTO_PEAK_GAIN), fading by exp(-elapsed / this): the stall of a
#: busy host (a process, or the softirq delivering its frames, waiting for a CPU) recurs on
#: the scheduler's time scale, seconds apart, not the RTT's. Only spurious timeouts set it
#: (a slow path's too); RACK, trims and probes find failed paths without the timer.
STALL_MEMORY_S = 10.0
#: an acknowledgment this soon (x min RTT) after a retransmission was caused by the original
SPURIOUS_RTT_FRACTION = 0.5
#: the reordering window grows by a quarter min RTT per spurious retransmission, up to this
#: many quarters (and never past the smoothed RTT), and shrinks by one quarter after this
#: many losses found without a spurious one (RFC 8985 section 6.2)
REO_MULT_MAX = 16
REO_QUIET_RESET = 16
#: spurious retransmissions from the per-EV rule after which a QP stops using it: packets of
#: one EV overtake each other on this fabric (MRC's paths never reorder; a test wire may)
EV_ORDER_SPURIOUS_MAX = 4
#: how many recoveries loss_recovery_s remembers (the C engine's RECOVERY_LOG)
RECOVERY_LOG = 65536
# what a live record costs: the object (its slots) plus its entries in the scoreboard's dict
# and heap (about 100 bytes on CPython 3.11)
_RECORD_BYTES = TxRecord.__basicsize__ + 100
_MESSAGE_BYTES = TxMessage.__basicsize__


def host_stall_s(qp: SendHost, now_s: float) -> float:
    """The longest delay a spurious timeout revealed, faded to ``now_s`` (by
    exp(-elapsed / STALL_MEMORY_S): it covers a like stall, x RTO_PEAK_GAIN, for about 4 s)."""
    s = qp._host_stall_s
    if s <= 0.0:
        return 0.0
    dt = now_s - qp._host_stall_at_s
    return s * math.exp(-dt / STALL_MEMORY_S) if dt > 0.0 else s


def note_host_stall(qp: SendHost, delay_s: float, now_s: float) -> None:
    """A spurious timeout showed a delay of ``delay_s``: the stall memory keeps the larger of
    it and what it holds, faded to now."""
    if delay_s > host_stall_s(qp, now_s):
        qp._host_stall_s = delay_s
        qp._host_stall_at_s = now_s


def rtx_rto_s(qp: SendHost, now_s: float) -> float:
    """The retransmission timer's RTO at ``now_s``: the QP's RTO, or RTO_PEAK_GAIN x the
    larger of its timer peak and its host stall when that is higher (never above max_rto_s).
    Either engine's QP (the C engine's state is read back into the QP per batch)."""
    peak = qp._rto_peak
    stall = host_stall_s(qp, now_s)
    b = RTO_PEAK_GAIN * (peak if peak > stall else stall)
    max_rto = qp.config.max_rto_s
    b = b if b < max_rto else max_rto
    return qp._rto if qp._rto > b else b


class PySendEngine:
    """One connected MRC QP's send side in Python (see the module docstring).

    ``qp`` is its QP, seen through :class:`~mrcnic.transport.engine.SendHost`: it reads the QP's policy objects and settings
    (``evs``, ``cc``, ``config``, ``peer``, ``stats``, the frame templates ``_slot_tmpl``),
    keeps the RTT estimator's values the QP's timers use (``_rto``, ``_srtt``, ``_min_rtt``,
    ... : the C engine copies its own there after every call) and calls the QP back for
    events and errors (``_events``, ``_drain_ev_events``, ``_nack_fatal``,
    ``_retry_exceeded``). Everything else is its own: the send and retransmission queues,
    the writes in flight, loss detection's state."""

    def __init__(self, qp: SendHost) -> None:
        self.qp = qp
        self.sb = qp.sb
        assert qp.peer is not None  # built when the QP connects
        self._peer_qpn = qp.peer.qpn  # in every data frame; a peer keeps its QP number
        self._rtxq: deque[TxRecord] = deque()
        self._sendq: deque[TxMessage] = deque()  # not fully segmented yet
        self._inflight_msgs: deque[TxMessage] = deque()  # segmented (partly), not completed
        self._wimm_outstanding = 0
        # loss detection from SACKs (_find_losses)
        self._rack_sent_s = -1.0  # newest send time among acknowledged packets
        self._ev_acked_sent_s = [-1.0] * len(qp.evs.ev_values)  # the same, per EV slot
        self._reo_mult = 1  # reordering window, in quarters of the min RTT
        self._reo_quiet = 0  # losses found since the last spurious one
        self._ev_order_ok = True  # per-EV order holds on this fabric (until shown otherwise)
        self._ev_order_spurious = 0
        self._recoveries: deque[list] = deque(maxlen=RECOVERY_LOG)  # [delay_s, spurious] each
        # Scratch buffers the headers are packed into; every frame copies them out at once,
        # so one per QP serves every frame.
        self._scratch = bytearray(FRAME_DATA_IMM.size)
        sv = memoryview(self._scratch)
        # (headers, headers from BTH for the ICRC, headers from UDP for the checksum)
        self._views = (
            (sv[: FRAME_DATA.size], sv[OFF_BTH : FRAME_DATA.size], sv[OFF_UDP : FRAME_DATA.size]),
            (sv, sv[OFF_BTH:], sv[OFF_UDP:]),
        )

    # -- the interface (mrcnic.transport.engine.SendEngine) ------------------------------------

    def post(self, msg: TxMessage) -> None:
        sendq = self._sendq  # (its head, once partly sent, is in _inflight_msgs too)
        both = 1 if sendq and sendq[0].next_off else 0
        if len(sendq) + len(self._inflight_msgs) - both >= _MAX_OUT:
            raise ResourceLimitError(
                f"QP {self.qp.qpn}: {_MAX_OUT} writes posted and not completed (the limit per "
                "QP); poll completions before posting more"
            )
        sendq.append(msg)

    def send(self, now_s: float, out: list[tuple[int, bytes]]) -> None:
        """Retransmissions, then new data while the window allows: frames appended to
        ``out``."""
        qp = self.qp
        sb = self.sb
        cc = qp.cc
        window = qp.peer.window_psns if qp.peer else 0
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
        if self._sendq and qp.peer is not None and sb.inflight_bytes < cc.cwnd_bytes:
            self._segment_writes(out, now_s, window)

    @property
    def work_waiting(self) -> bool:
        return bool(self._rtxq or self._sendq)

    @property
    def outstanding(self) -> int:
        return len(self.sb.records)

    @property
    def idle(self) -> bool:
        return not self._sendq and not self._inflight_msgs

    @property
    def snd_una(self) -> int:
        return self.sb.snd_una

    def messages(self) -> list[TxMessage]:
        return list(self._inflight_msgs) + list(self._sendq)

    def first_message(self) -> TxMessage | None:
        if self._inflight_msgs:
            return self._inflight_msgs[0]
        return self._sendq[0] if self._sendq else None

    def reset(self) -> None:
        self._inflight_msgs.clear()
        self._sendq.clear()
        self._rtxq.clear()
        sb = self.sb
        sb.order.clear()
        sb.records.clear()
        sb.inflight_bytes = 0

    def port_down(self, plane: int) -> None:
        """Everything in flight on that port is gone: repair it now."""
        plane_of = self.qp.evs.plane_of
        for rec in list(self.sb.records.values()):
            if not rec.lost and plane_of[rec.slot] == plane:
                self.sb.mark_lost(rec)
                self._rtxq.append(rec)

    def next_deadline(self) -> float | None:
        return self.sb.next_deadline()

    def expire(self, now_s: float) -> None:
        """The retransmission timers due by ``now_s``."""
        qp = self.qp
        sb = self.sb
        max_rto = qp.config.max_rto_s
        for rec in sb.expired(now_s):
            # the deadline was set with the RTO of its send time: if the RTO has grown since
            # (the queues grew), the packet gets the current one
            rto = rtx_rto_s(qp, now_s) * (1 << min(rec.retries, 30))  # (max_rto_s caps it)
            deadline = rec.sent_s + (rto if rto < max_rto else max_rto)
            if deadline > now_s:
                sb.arm(rec, deadline)
                continue
            if rec.retries >= qp.config.retry_limit:
                qp._retry_exceeded(rec.psn, rec.retries, rec.msg, now_s)
                return
            qp.stats.timeouts += 1
            # a path that acknowledged anything in the last half RTO is queued, not dead
            qp.evs.on_timeout(rec.slot, rec.sent_s, now_s, 0.5 * qp._rto)
            rec.to_sent_s = rec.sent_s
            rec.to_slot = rec.slot
            rec.to_ts_ns = rec.tx_ts_ns
            rec.lost_by = LOST_BY_TIMEOUT
            rec.losses += 1
            rec.retries += 1
            sb.mark_lost(rec)
            self._rtxq.append(rec)
            cc = qp.cc
            cc.on_timeout(now_s)
            on_loss = getattr(cc, "on_loss", None)
            if on_loss is not None:
                on_loss(self._loss_sample(LOSS_TIMEOUT, rec, now_s))

    def frame(self, data: bytes | bytearray | memoryview, now_s: float) -> bool:
        """A SACK or ACK frame: True when taken (applied, or dropped and counted), False when
        it is not of a SACK's length (the QP's control path decodes it)."""
        qp = self.qp
        end = qp._accept(data)
        if end == 0:
            return True
        if end != SACK_FRAME_END:
            return False
        qp.evs.now_s = now_s
        self._sack_frame(data, data[OFF_BTH], now_s)
        if qp.evs.events:
            qp._drain_ev_events()
        return True

    def after_batch(self, now_s: float) -> None:
        """(A receive batch hands this engine nothing: the QP's receive_frame did.)"""

    def loss_recovery_s(self) -> list[float]:
        return [d for d, spurious in self._recoveries if not spurious]

    def state_bytes(self) -> int:
        """Its live records (counted at their object size) and queued writes."""
        return len(self.sb.records) * _RECORD_BYTES + len(self._sendq) * _MESSAGE_BYTES

    def release(self) -> None:
        """(Nothing outside Python to let go.)"""

    # -- internals ---------------------------------------------------------------------------

    def _segment_writes(self, out: list[tuple[int, bytes]], now_s: float, window: int) -> None:
        """Segment posted writes into new packets while the window allows: each one's
        record, frame and timer through :meth:`_send_record`, as a retransmission's."""
        qp = self.qp
        sb = self.sb
        cc = qp.cc
        sendq = self._sendq
        msgs = self._inflight_msgs
        mtu = qp.mtu
        limit = window - 1
        peer = qp.peer
        assert peer is not None  # an engine exists only while its QP is connected
        wimm_max = peer.max_wimm_inflight
        while (
            sendq
            and sb.inflight_bytes < cc.cwnd_bytes
            and ((sb.snd_nxt - sb.snd_una) & PSN_MASK) < limit
        ):
            msg = sendq[0]
            off = msg.next_off
            first = off == 0
            imm = msg.imm
            if first:
                if len(msgs) >= MSN_WINDOW - 1:
                    break  # the responder tracks no more messages than this
                if imm is not None:
                    if self._wimm_outstanding >= wimm_max:
                        break
                    self._wimm_outstanding += 1
                msgs.append(msg)
            length = msg.length
            n = length - off
            if n > mtu:
                n = mtu
            last = off + n >= length
            if first and last:
                op = OP_ONLY if imm is None else OP_ONLY_IMM
            elif first:
                op = OP_FIRST
            elif last:
                op = OP_LAST if imm is None else OP_LAST_IMM
            else:
                op = OP_MIDDLE
            rec = TxRecord(sb.snd_nxt, msg, off, n, op)
            frame = self._send_record(rec, now_s, rtx=False)
            if frame is None:  # no EV can carry it
                if first:  # undo the start bookkeeping; retry later
                    msgs.pop()
                    if imm is not None:
                        self._wimm_outstanding -= 1
                break
            sb.add(rec)
            out.append(frame)
            if last:
                msg.next_off = length
                msg.last_psn = rec.psn
                sendq.popleft()
            else:
                msg.next_off = off + n

    def _send_record(self, rec: TxRecord, now_s: float, rtx: bool) -> tuple[int, bytes] | None:
        """Send ``rec`` (a new packet, or with ``rtx`` its retransmission) on the EV the
        table picks: its frame, its record's send state and timer, the counters; None when
        no EV can carry it."""
        qp = self.qp
        evs = qp.evs
        slot = evs.pick(rec.slot if rtx else -1)
        if slot < 0:
            return None
        ts_ns = int(now_s * 1e9) or 1  # 0 means "no timestamp" in a SACK: a clock at 0 is 1 ns
        frame = self._data_frame(
            qp._slot_tmpl[slot], rec.opcode, rec.psn, rec.msg, rec.offset, rec.length, ts_ns, rtx
        )
        if rtx and not rec.ever_rtx and rec.lost_by in LOSS_CAUSES:
            entry = [now_s - rec.first_sent_s, False]
            rec.recovery = entry
            self._recoveries.append(entry)
        rec.slot = slot
        rec.sent_s = now_s
        rec.tx_ts_ns = ts_ns
        sb = self.sb
        sb.order.append((rec, ts_ns))
        evs.tx_packets[slot] += 1
        st = qp.stats
        if rtx:
            sb.resent(rec)
            rec.ever_rtx = True
            st.retransmissions += 1
        else:
            rec.first_sent_s = now_s
            st.tx_data_packets += 1
            st.tx_data_bytes += rec.length
        rto = rtx_rto_s(qp, now_s) * (1 << min(rec.retries, 30))
        max_rto = qp.config.max_rto_s
        sb.arm(rec, now_s + (rto if rto < max_rto else max_rto))
        return (evs.plane_of[slot], frame)

    def _data_frame(
        self,
        t: Template,
        op: int,
        psn: int,
        msg: TxMessage,
        off: int,
        n: int,
        ts_ns: int,
        rtx: bool,
    ) -> bytes:
        """One data frame: headers packed into the scratch buffer, the payload copied once
        (by the join) from the message's buffer, ICRC and UDP checksum chained over both."""
        eth_dst, eth_src, w0, src, dst, sport, psum = t
        payload = msg.buf[off : off + n]
        w1 = (TS_BIT | RTX_BIT if rtx else TS_BIT) << 24 | self._peer_qpn
        w2 = psn if op < OP_LAST else ACKREQ | psn  # the last packet asks for an ACK
        w0 |= (8 if rtx else 4) << 22 | 2 << 20  # TRIMMABLE_RETX / TRIMMABLE, ECT0
        if op in (OP_LAST_IMM, OP_ONLY_IMM):
            ulen = n + 56  # UDP 8 + BTH..RETH 40 + ImmDt 4 + ICRC 4
            FRAME_DATA_IMM.pack_into(
                self._scratch, 0, eth_dst, eth_src, 0x86DD, w0, ulen, 17, 64, src, dst,
                sport, 4791, ulen, 0, op, 0, 0xFFFF, w1, w2, msg.msn, msg.rqmsn, ts_ns,
                msg.remote_va + off, msg.rkey, msg.length, msg.imm,
            )  # fmt: skip
            head, mrc, udp = self._views[1]
        else:
            ulen = n + 52  # UDP 8 + BTH..RETH 40 + ICRC 4
            FRAME_DATA.pack_into(
                self._scratch, 0, eth_dst, eth_src, 0x86DD, w0, ulen, 17, 64, src, dst,
                sport, 4791, ulen, 0, op, 0, 0xFFFF, w1, w2, msg.msn, msg.rqmsn, ts_ns,
                msg.remote_va + off, msg.rkey, msg.length,
            )  # fmt: skip
            head, mrc, udp = self._views[0]
        icrc = crc32(payload, crc32(mrc))
        # One's complement sum of the UDP datagram = its value modulo 0xFFFF (2^16 = 1 mod
        # 0xFFFF): the headers' bytes as one integer, the payload's sum from the C core, the
        # ICRC one byte up when the payload length is odd; plus the pseudo-header (psum, ulen).
        total = psum + ulen + from_bytes(udp, "big") + (icrc << 8 if n & 1 else icrc)
        if n:
            total += csum_partial(payload)
        U16.pack_into(self._scratch, OFF_UCSUM, 0xFFFF - total % 0xFFFF)
        return b"".join((head, payload, U32.pack(icrc)))

    def _sack_frame(self, data, op: int, now_s: float) -> None:
        """A SACK or probe answer of the right length: decoded at fixed offsets (what
        wire.decode_mrc would check: the ICRC and a defined mark; then our QP number)."""
        if (
            crc32(memoryview(data)[OFF_BTH : SACK_FRAME_END - 4])
            != U32.unpack_from(data, SACK_FRAME_END - 4)[0]
        ):
            self.qp.stats.rx_malformed += 1
            return
        w1, _w2, w0, offset, pen, bitmap, ev, _ooo, ts_ns, _rb = RX_SACK.unpack_from(
            data, OFF_BTH + 4
        )
        mark = w0 >> 30
        if mark == 3 or w1 & 0xFFFFFF != self.qp.qpn:
            self.qp.stats.rx_malformed += 1
            return
        self.sack(
            w0 & PSN_MASK, offset, bitmap, ev, mark, w0 & 0x20000000 != 0, pen & 0x7F, ts_ns,
            op == OP_ACK, now_s,
        )  # fmt: skip

    def sack(
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
        self.qp.stats.rx_sacks += 1
        evs = self.qp.evs
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
            self._find_losses(acked, cack_psn, offset, bitmap, now_s)
        rtt = None
        # A probe's answer times a small high-priority packet, not data: it would drag the
        # base RTT (NSCC's queueing delay, the RTO) far below what data packets see.
        if reflected_ts_ns and not is_probe_answer:
            rtt = now_s - reflected_ts_ns * 1e-9
            if rtt > 0:
                self._rtt_sample(rtt, now_s)
            else:
                rtt = None
        slot = evs.slot_of.get(ev, -1)  # the EV of the packet that triggered this SACK
        if is_probe_answer:
            if slot >= 0:
                evs.on_probe_answer(slot, reflected_ts_ns, mark != 0, now_s)
        elif mark and slot >= 0:
            evs.ecn_echoes[slot] += 1
            inp = EvInput.ECN_ECHO if mark == MARK_SKIP_ONCE else EvInput.ALWAYS_SKIP
            evs.apply(slot, inp, now_s)
        if acked_bytes or ece:
            if slot >= 0:
                ev, plane, path = evs.ev_values[slot], evs.plane_of[slot], evs.path_of[slot]
            else:
                ev = plane = path = -1
            inflight = self.sb.inflight_bytes
            sample = new_ack_sample(acked_bytes, rtt, ece, now_s, ev, plane, path, inflight)
            self.qp.cc.on_ack(sample)
        if rcv_cwnd_pen:
            self.qp.cc.on_rcv_penalty(rcv_cwnd_pen, now_s)
        if acked:
            self._complete_messages(now_s)

    def _rtt_sample(self, r: float, now_s: float) -> None:
        # RFC 6298 estimator; the reflected timestamp names one transmission, so no Karn issue.
        qp = self.qp
        srtt = qp._srtt
        if srtt is None:
            srtt = r
            qp._rttvar = r / 2
        else:
            qp._rttvar = 0.75 * qp._rttvar + 0.25 * abs(srtt - r)
            srtt = 0.875 * srtt + 0.125 * r
        qp._srtt = srtt
        if r < qp._min_rtt or not qp._rtt_measured:
            qp._min_rtt = r
            qp._rtt_measured = True
        peak = qp._rtt_peak
        qp._rtt_peak = r if r > peak else peak + (r - peak) * RTT_PEAK_RELEASE
        peak = qp._rto_peak
        if r > peak:
            qp._rto_peak = r
        else:
            f = (now_s - qp._rto_peak_at_s) / srtt
            qp._rto_peak = peak + (r - peak) * RTO_PEAK_RELEASE * (min(f, 1.0) if f > 0 else 0.0)
        qp._rto_peak_at_s = now_s
        self._update_rto()

    def _update_rto(self) -> None:
        # Spraying makes RTTs heavy-tailed (each packet sees its own path's queue): srtt +
        # 4 rttvar alone is overtaken by the tail; the recent peak keeps the RTO above it.
        srtt = self.qp._srtt if self.qp._srtt is not None else 0.0
        rto = max(srtt + 4 * self.qp._rttvar, RTO_PEAK_GAIN * self.qp._rtt_peak)
        self.qp._rto = min(max(rto, self.qp._min_rto), self.qp.config.max_rto_s)
        self.qp.evs.path_quiet_s = 0.5 * self.qp._rto

    def _spurious(self, rec: TxRecord, ev: int, reflected_ts_ns: int, now_s: float) -> bool:
        """A PSN that timed out is acknowledged: if the SACK was triggered by the very
        transmission that timed out (its EV and timestamp), or the retransmission cannot have
        caused it (not sent yet, or sent less than half a min RTT ago), the original made it
        and the timeout was spurious.  Its delay is an RTT the estimator missed: feed it to
        the peak so the RTO covers it next time (the Eifel idea, RFC 3522)."""
        by_original = reflected_ts_ns == rec.to_ts_ns and ev == self.qp.evs.ev_values[rec.to_slot]
        if (
            not by_original
            and not rec.lost
            and now_s - rec.sent_s >= SPURIOUS_RTT_FRACTION * self.qp._min_rtt
        ):
            return False
        rec.spurious = True
        if rec.recovery is not None and rec.losses == 1:
            rec.recovery[1] = True  # its one retransmission was not needed
        if rec.lost_by == LOST_BY_EV_ORDER:
            # packets of one EV overtook each other: this fabric does not keep a path in
            # order, so the per-EV rule is not safe here (the time rule still is)
            self.qp.stats.spurious_retransmissions += 1
            self._ev_order_spurious += 1
            if self._ev_order_spurious >= EV_ORDER_SPURIOUS_MAX:
                self._ev_order_ok = False
            return True
        if rec.lost_by == LOST_BY_SACK:
            # reordering beyond the window, not loss: widen the window (RFC 8985's DSACK rule)
            self.qp.stats.spurious_retransmissions += 1
            if self._reo_mult < REO_MULT_MAX:
                self._reo_mult += 1
            self._reo_quiet = 0
            return True
        self.qp.stats.spurious_timeouts += 1
        delay = now_s - rec.to_sent_s
        qp = self.qp
        if delay > qp._rtt_peak:
            qp._rtt_peak = delay
        if delay > qp._rto_peak:
            qp._rto_peak = delay
            qp._rto_peak_at_s = now_s
        note_host_stall(qp, delay, now_s)
        self._update_rto()
        return True

    def _find_losses(
        self, acked: list[TxRecord], cack_psn: int, offset: int, bitmap: int, now_s: float
    ) -> None:
        """Loss detection from a SACK, without waiting for a timeout. Two rules:

        - per-EV order: packets sent on one EV follow one path and arrive in order, so a hole
          this SACK reports is lost when a packet sent later on the same EV was acknowledged;
        - time (RACK, RFC 8985): a packet is lost once a packet sent more than a reordering
          window after it has been acknowledged. With 128 EVs the next packet on the same EV
          can be a hundred packets behind, so this rule does most of the work. The window
          (:meth:`_reo_window_s`) is the delay spread between paths plus a quarter of the min
          RTT, widened by each spurious retransmission and narrowed after quiet recoveries.

        A lost packet is queued for retransmission at once (on another EV) and its EV is
        retired (ASSUMED_BAD) as MRC does; the RTO stays the last resort."""
        newest = self._rack_sent_s
        min_rtt = self.qp._min_rtt
        ev_acked = self._ev_acked_sent_s
        for rec in acked:
            t = rec.sent_s
            # a retransmission acknowledged sooner than a min RTT after it left: maybe the
            # original was acknowledged, so its send time says nothing
            if rec.ever_rtx and now_s - t < min_rtt:
                continue
            if t > newest:
                newest = t
            if t > ev_acked[rec.slot]:
                ev_acked[rec.slot] = t
        self._rack_sent_s = newest
        sb = self.sb
        lost = sb.lost_by_time(newest - self.reo_window_s()) if newest > 0 else []
        n_time = len(lost)
        if bitmap & (bitmap + 1) and self._ev_order_ok:  # (a run from bit 0 has no hole)
            holes = ~bitmap & ((1 << (bitmap.bit_length() - 1)) - 1)
            if holes:
                base = cack_psn + 1 + offset
                records = sb.records
                while holes:
                    low = holes & -holes
                    hole = records.get((base + low.bit_length() - 1) & PSN_MASK)
                    if hole is not None and not hole.lost and ev_acked[hole.slot] > hole.sent_s:
                        lost.append(hole)
                    holes ^= low
        if not lost:
            return
        evs = self.qp.evs
        st = self.qp.stats
        on_loss = getattr(self.qp.cc, "on_loss", None)
        for i, rec in enumerate(lost):
            if rec.lost:
                continue  # found by both rules
            st.sack_losses += 1
            rec.to_sent_s = rec.sent_s
            rec.to_slot = rec.slot
            rec.to_ts_ns = rec.tx_ts_ns
            rec.lost_by = LOST_BY_SACK if i < n_time else LOST_BY_EV_ORDER
            rec.losses += 1
            rec.spurious = False
            sb.mark_lost(rec)
            self._rtxq.append(rec)
            evs.apply(rec.slot, EvInput.LOST, now_s)
            if on_loss is not None:
                on_loss(self._loss_sample(LOSS_SACK, rec, now_s))
            self._reo_quiet += 1
            if self._reo_quiet >= REO_QUIET_RESET and self._reo_mult > 1:
                self._reo_mult -= 1
                self._reo_quiet = 0

    def _loss_sample(self, cause: str, rec: TxRecord, now_s: float) -> LossSample:
        """What ``cc.on_loss`` is told of ``rec``, just declared lost (and out of the count of
        bytes in flight)."""
        evs = self.qp.evs
        s = rec.slot
        return new_loss_sample(
            cause, rec.length, evs.ev_values[s], evs.plane_of[s], evs.path_of[s],
            self.sb.inflight_bytes, now_s,
        )  # fmt: skip

    def reo_window_s(self) -> float:
        """How much later than another packet a packet may arrive without being lost: the
        spread of one-way delays between the paths (sprayed packets differ by at most the
        recent queueing delay, the RTT peak above the min RTT) plus RACK's quarter min RTT,
        widened by spurious retransmissions; never more than the RTO (beyond it the timer fires first)."""
        min_rtt = self.qp._min_rtt
        spread = self.qp._rtt_peak - min_rtt
        w = self._reo_mult * min_rtt * 0.25 + (spread if spread > 0 else 0.0)
        cap = self.qp._rto
        return w if w < cap else cap

    def _complete_messages(self, now_s: float) -> None:
        msgs = self._inflight_msgs
        una = self.sb.snd_una
        while msgs:
            m = msgs[0]
            if m.last_psn < 0 or not 0 < ((una - m.last_psn) & PSN_MASK) < PSN_HALF:
                break  # not fully sent, or its last PSN is not behind snd_una yet
            msgs.popleft()
            m.done = True
            if m.imm is not None:
                self._wimm_outstanding -= 1
            self.qp.stats.completions += 1
            self.qp._events.append(WriteCompleted(m.wr_id, WcStatus.SUCCESS, m.length, now_s))

    def nack(self, reason: int, psn: int, cack_psn: int, ts_ns: int, now_s: float) -> None:
        """Apply one NACK (its fields; ``reason`` is the wire value of wire.NackReason)."""
        st = self.qp.stats
        st.rx_nacks += 1
        R = wire.NackReason
        rec = self.sb.records.get(psn)
        if rec is None:
            # about no packet we have outstanding: stale, or forged (a NACK is fatal only
            # when it names a packet this QP is waiting on)
            st.rx_stale_nacks += 1
            return
        if reason in (R.UNEXP_EVENT, R.REMOTE_ACCESS_ERROR):
            ts = ts_ns
            if ts != rec.tx_ts_ns and not (rec.to_ts_ns and ts == rec.to_ts_ns):
                # a fatal NACK must echo the transmission it names: one that does not was
                # made by someone who never saw the packet (a forged data frame under a
                # spoofed address, refused by the responder): ignored, counted
                st.rx_unmatched_nacks += 1
                return
            self.qp._nack_fatal(reason, psn, rec.msg, now_s)
            return
        if rec.lost or rec.tx_ts_ns != ts_ns:
            return  # about an older transmission of this PSN: already being repaired
        evs = self.qp.evs
        if reason == R.TRIMMED or reason == R.TRIMMED_LASTHOP:
            evs.trims[rec.slot] += 1
            evs.note_delivered(rec.slot, rec.sent_s)  # a trimmed header proves the path alive
            evs.acked_packets[rec.slot] -= 1
            if reason == R.TRIMMED:
                evs.apply(rec.slot, EvInput.TRIMMED, now_s)
            rec.lost_by = LOST_BY_TRIM  # certain: no spurious test, not a loss to report
            rec.to_sent_s = -1.0
            self.sb.mark_lost(rec)
            self._rtxq.appendleft(rec)  # repair at once, on another EV
            cc = self.qp.cc
            last_hop = reason == R.TRIMMED_LASTHOP
            cc.on_trim(last_hop, now_s)
            on_loss = getattr(cc, "on_loss", None)
            if on_loss is not None:
                cause = LOSS_TRIM_LAST_HOP if last_hop else LOSS_TRIM
                on_loss(self._loss_sample(cause, rec, now_s))
        else:  # PSN_OOR_WINDOW, NO_BITMAP, NO_PKT_BUFFER: resend once the window allows
            peer = self.qp.peer
            if reason == R.PSN_OOR_WINDOW and peer is not None:
                span = (psn - cack_psn) & PSN_MASK
                if 64 <= span < peer.window_psns:
                    self.qp.peer = QpAttributes(**{**asdict(peer), "window_psns": span})
            self.sb.mark_lost(rec)
            self._rtxq.append(rec)

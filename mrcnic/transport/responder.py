"""The Python receive engine: an MRC responder's per-packet work, the twin of the C one
(``mrcnic.transport.rx_engine.CRxEngine``, ``csrc/mrc_rxe.c``) behind the same interface
(:class:`mrcnic.transport.engine.RecvEngine`): accepting and placing data packets, message
accounting and write-with-immediate delivery in MSN order, and the SACKs and NACKs it sends
back by the coalescing rule (``mrcnic.transport.sack``).

tests/unit/test_rx_engine.py drives both with the same frames and compares the control
frames, events and counters they produce; this one is also the protocol's reference."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mrcnic import wire
from mrcnic.transport.frames import (
    ACKREQ,
    CTRL_MAX_BODY,
    DSCP_CTRL_ECT0,
    DSCP_TRIMMED,
    DSCP_TRIMMED_LH,
    DSCPS_TRIMMED,
    FRAME_CTRL,
    FRAME_SACK,
    IMM,
    IMM_OPS,
    MARK_ALWAYS_SKIP,
    MARK_SKIP_ONCE,
    MSN_MASK,
    MSN_WINDOW,
    OFF_BTH,
    OFF_UCSUM,
    OFF_UDP,
    OP_LAST_IMM,
    OP_ONLY_IMM,
    OP_SACK,
    PLACE_OK,
    PSN_HALF,
    PSN_MASK,
    RTX_BIT,
    RX_DATA,
    RX_DATA_NO_TS,
    TS_BIT,
    TS_SIZE,
    U16,
    U32,
    crc32,
    from_bytes,
)
from mrcnic.transport.memory import PlaceStatus
from mrcnic.transport.qp_types import ImmReceived, WcStatus
from mrcnic.transport.sack import MARK_NEW

if TYPE_CHECKING:
    from mrcnic.transport.engine import RecvHost

#: EVs the responder tracks CE runs for (the ALWAYS_SKIP heuristic); more means a sender
#: that sprays over more EVs than any QP has, or a forger: the table starts over
CE_RUN_EVS_MAX = 4096
#: the first round of reverse-EV probes, this many RTOs after the first SACK of a burst
REVERSE_PROBE_RTOS_FIRST = 4
#: why a write was refused, by PlaceStatus value (the responder's error reason)
REFUSAL_WORDS = {
    int(PlaceStatus.BAD_RKEY): "no region has that R_Key",
    int(PlaceStatus.NO_PERMISSION): "the region does not allow remote writes",
    int(PlaceStatus.OUT_OF_BOUNDS): "the write does not fit the region",
}


def refusal_reason(psn: int, rkey: int, cause: int) -> str:
    """The responder's QpErrorEvent reason for a refused write (both engines)."""
    return (
        f"refused the peer's write at PSN {psn} (R_Key {rkey:#x}): "
        f"{REFUSAL_WORDS.get(cause, 'refused')}; "
        "the QP stops placing data, as an RC responder does after a remote access error"
    )


class PyRecvEngine:
    """One connected MRC QP's receive side in Python (see the module docstring).

    ``qp`` is its QP, seen through :class:`~mrcnic.transport.engine.RecvHost`: it reads the QP's receive window (``rxwin``), memory
    table, settings and frame templates, queues control frames in ``qp._ctrl``, events in
    ``qp._events``, NACKs through ``qp._send_nack``, and reports a write-with-immediate
    protocol violation with ``qp._fatal``. Message accounting and the acknowledgment
    trigger are its own."""

    def __init__(self, qp: RecvHost) -> None:
        self.qp = qp
        assert qp.peer is not None  # built when the QP connects
        self._peer_qpn = qp.peer.qpn  # in every SACK; a peer keeps its QP number
        self._ack_deadline: float | None = None
        self._ack_trigger = (0, 0, 0, False)  # psn, ev, ts, ce of the last unacked packet
        self._ce_run: dict[int, int] = {}  # consecutive CE-marked packets per EV
        # Messages complete in MSN order: a write-with-immediate's completion means every
        # earlier write of the QP is placed (the "data, then the flag" pattern). All three
        # tables are keyed by MSNs within MSN_WINDOW of _rx_msn, so they stay bounded.
        self._rx_msg_bytes: dict[int, int] = {}  # msn -> bytes placed so far (under way)
        self._rx_imm: dict[int, tuple[int, int]] = {}  # msn -> (rqmsn, imm) of a write-with-imm
        self._rx_done: dict[int, tuple[int, int, int] | None] = {}  # msn -> (rqmsn, imm,
        # length) for a write-with-imm, None for a plain write: placed, earlier ones not yet
        self._rx_msn = 0  # the next message to complete
        self._rx_rqmsn = 0  # the next write-with-immediate to deliver
        self._scratch = bytearray(FRAME_CTRL.size + CTRL_MAX_BODY + 4)
        mv = memoryview(self._scratch)
        # a SACK frame's (BTH..body for the ICRC, UDP..ICRC for the checksum, whole frame)
        self._sack_views = (
            mv[OFF_BTH : FRAME_SACK.size],
            mv[OFF_UDP : FRAME_SACK.size + 4],
            mv[: FRAME_SACK.size + 4],
        )

    # -- the interface (mrcnic.transport.engine.RecvEngine) ------------------------------------

    def frame(self, data: bytes | bytearray | memoryview, now_s: float) -> bool:
        """One data frame: placed, refused or counted (always taken)."""
        qp = self.qp
        end = qp._accept(data)
        if end == 0:
            return True
        evs = qp.evs
        evs.now_s = now_s
        op = data[OFF_BTH]
        w0 = U32.unpack_from(data, 14)[0]
        # The common case inline: a new, untrimmed data packet without an immediate, in
        # the window, accepted by the memory table.  Everything up to the placement only
        # looks; anything else (even a bad ICRC) goes to _rx_data, which starts over.
        mv = memoryview(data)
        if (
            op not in IMM_OPS
            and data[OFF_BTH + 4] & TS_BIT
            and (w0 >> 22) & 0x3F not in DSCPS_TRIMMED
            and end >= OFF_BTH + 44
            and crc32(mv[OFF_BTH : end - 4]) == U32.unpack_from(data, end - 4)[0]
        ):
            w1, w2, msn, _rqmsn, ts_ns, va, rkey, length = RX_DATA.unpack_from(data, OFF_BTH + 4)
            psn = w2 & PSN_MASK
            rxw = qp.rxwin
            d = (psn - rxw.expected) & PSN_MASK
            # d == 0 is the cumulative ack's next PSN, never marked (receive() advances
            # past it at once): no need to ask the window
            if (
                w1 & 0xFFFFFF == qp.qpn
                and d < rxw.size
                and (msn - self._rx_msn) & MSN_MASK < MSN_WINDOW
                and not (d and rxw.win.test(psn))
                and qp.memory.place(rkey, va, mv[OFF_BTH + 40 : end - 4], op, length, qp.mtu)
                is PLACE_OK
            ):
                self._rx_new_data(data, end, w0, w1, w2, psn, msn, ts_ns, length, now_s)
                if evs.events:
                    qp._drain_ev_events()
                return True
        self._rx_data(data, end, w0, op, now_s)
        if evs.events:
            qp._drain_ev_events()
        return True

    def timer(self, now_s: float) -> None:
        """The delayed acknowledgment, when due."""
        if self._ack_deadline is not None and self._ack_deadline <= now_s:
            self._ack_deadline = None
            psn, ev, ts, ce = self._ack_trigger
            if self.qp.rxwin.pending:
                self._send_sack(psn, ev, ts, ce, ev % self.qp.planes)

    def deadline(self) -> float | None:
        return self._ack_deadline

    def ack(self, op: int, ev: int, ts_ns: int, ce: bool, plane: int) -> None:
        """Acknowledge now (an EV probe's answer, ``op`` ACK): the cumulative ack's SACK."""
        cack = (self.qp.rxwin.expected - 1) & PSN_MASK
        self._send_sack(cack, ev, ts_ns, ce, plane, op)

    def reverse_ev(self, plane: int) -> int:
        """The reverse EV a control frame takes: on ``plane``, or with -1 round robin over
        the reverse EVs of every live plane."""
        evs = self.qp.evs
        return evs.next_reverse_ev() if plane < 0 else evs.reverse_ev_on(plane)

    def state_bytes(self) -> int:
        return 0  # (its tables are bounded by MSN_WINDOW and small in practice)

    def release(self) -> None:
        """(Nothing outside Python to let go.)"""

    # -- internals ---------------------------------------------------------------------------

    def _rx_new_data(
        self,
        data,
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
        rxw = self.qp.rxwin
        ev = (data[OFF_UDP] << 24) | (data[OFF_UDP + 1] << 16) | (w0 & 0xFFFF)
        ce = (w0 >> 20) & 3 == 3
        st = self.qp.stats
        st.rx_data_packets += 1
        if ce:
            st.rx_ecn_marked += 1
        rxw.receive(psn)
        plen = end - 4 - OFF_BTH - 40
        st.rx_placed_packets += 1
        st.rx_placed_bytes += plen
        rxw.received_bytes += plen
        self._rx_placed(psn, msn, length, plen, ev, ts_ns, ce, w1, w2, now_s)

    def _rx_data(self, data, end: int, w0: int, op: int, now_s: float) -> None:
        st = self.qp.stats
        dscp = (w0 >> 22) & 0x3F
        trimmed = dscp in (DSCP_TRIMMED, DSCP_TRIMMED_LH)
        imm = op in (OP_LAST_IMM, OP_ONLY_IMM)
        has_ts = data[OFF_BTH + 4] & TS_BIT  # the timestamp extension is optional (T flag)
        hdr_end = (OFF_BTH + 44 if imm else OFF_BTH + 40) - (0 if has_ts else TS_SIZE)
        if end < hdr_end + (0 if trimmed else 4):
            st.rx_malformed += 1
            return
        mv = memoryview(data)
        if not trimmed and crc32(mv[OFF_BTH : end - 4]) != U32.unpack_from(data, end - 4)[0]:
            st.rx_malformed += 1
            return
        if has_ts:
            w1, w2, msn, rqmsn, ts_ns, va, rkey, length = RX_DATA.unpack_from(data, OFF_BTH + 4)
        else:
            w1, w2, msn, rqmsn, va, rkey, length = RX_DATA_NO_TS.unpack_from(data, OFF_BTH + 4)
            ts_ns = 0  # none to reflect
        if w1 & 0xFFFFFF != self.qp.qpn:
            st.rx_malformed += 1
            return
        psn = w2 & PSN_MASK
        ev = (data[OFF_UDP] << 24) | (data[OFF_UDP + 1] << 16) | (w0 & 0xFFFF)
        ce = (w0 >> 20) & 3 == 3
        st.rx_data_packets += 1
        if ce:
            st.rx_ecn_marked += 1
        rxw = self.qp.rxwin
        if trimmed:
            st.rx_trimmed += 1
            if dscp == DSCP_TRIMMED_LH:
                rxw.lasthop_trims += 1  # the receiver's own port is overloaded: rcv_cwnd_pen
            reason = (
                wire.NackReason.TRIMMED if dscp == DSCP_TRIMMED else wire.NackReason.TRIMMED_LASTHOP
            )
            if not rxw.win.test(psn):
                self.qp._send_nack(int(reason), psn, ev, ts_ns, ev % self.qp.planes)
            return
        d = (psn - rxw.expected) & PSN_MASK
        if d < PSN_HALF and d >= rxw.size:
            st.rx_psn_out_of_window += 1
            self.qp._send_nack(
                int(wire.NackReason.PSN_OOR_WINDOW), psn, ev, ts_ns, ev % self.qp.planes
            )
            return
        # d == 0 is the cumulative ack's next PSN, which is never marked (receive() advances
        # past it at once): no need to ask the window
        if d >= PSN_HALF or (d and rxw.win.test(psn)):
            st.rx_duplicates += 1
            self._send_sack(psn, ev, ts_ns, ce, ev % self.qp.planes, twice=True)  # rule 2
            return
        if (msn - self._rx_msn) & MSN_MASK >= MSN_WINDOW:
            st.rx_msn_out_of_range += 1  # no requester has that many messages under way
            return
        payload = mv[hdr_end : end - 4]
        # (the whole message must fit: memory.message_fits)
        refused = self.qp.memory.place(rkey, va, payload, op, length, self.qp.mtu)
        if refused is not PLACE_OK:
            st.rx_refused += 1
            if refused is PlaceStatus.BAD_RKEY:
                st.rx_bad_rkey += 1
            elif refused is PlaceStatus.NO_PERMISSION:
                st.rx_no_permission += 1
            else:
                st.rx_out_of_bounds += 1
            self.qp._send_nack(int(wire.NackReason.REMOTE_ACCESS_ERROR), psn, ev, ts_ns, -1)
            # as an RC responder: a refused write ends the QP, so nothing of this write or
            # of any later one lands (packets already on the wire included)
            self.qp._fatal(
                WcStatus.REMOTE_ACCESS_ERROR, refusal_reason(psn, rkey, int(refused)), now_s
            )
            return
        mark = rxw.receive(psn)
        assert mark == MARK_NEW
        plen = end - 4 - hdr_end
        st.rx_placed_packets += 1
        st.rx_placed_bytes += plen
        rxw.received_bytes += plen
        if imm:
            if self._rx_imm_check(rqmsn, psn, ev, ts_ns, now_s):
                return
            self._rx_imm[msn] = (rqmsn, IMM.unpack_from(data, hdr_end - 4)[0])
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
        rxw = self.qp.rxwin
        # message accounting: complete when every byte is placed, delivered in MSN order
        msg_bytes = self._rx_msg_bytes
        got = msg_bytes.get(msn, 0) + plen
        if got >= length:
            if got > plen:
                del msg_bytes[msn]
            if msn == self._rx_msn and not self._rx_imm:
                self._rx_msn = (msn + 1) & MSN_MASK  # the common case: in order, no immediate
                if self._rx_done:
                    self._rx_deliver(now_s)
            else:
                imm = self._rx_imm.pop(msn, None)
                self._rx_done[msn] = None if imm is None else (imm[0], imm[1], length)
                self._rx_deliver(now_s)
        else:
            msg_bytes[msn] = got
        # the ALWAYS_SKIP heuristic: a run of CE marks on one EV
        if ce:
            ce_run = self._ce_run
            if len(ce_run) >= CE_RUN_EVS_MAX and ev not in ce_run:
                ce_run.clear()  # keyed by an EV from the wire: bounded (a sender has ~256)
            ce_run[ev] = ce_run.get(ev, 0) + 1
            rxw.ece_pending = True
        elif self._ce_run:
            self._ce_run.pop(ev, None)
        rtx = w1 & (RTX_BIT << 24) != 0
        # the coalescing rule (ResponderWindow.wants_ack) for a new packet
        if ce or rtx or w2 & ACKREQ or rxw.pending >= rxw.ack_every:
            self._send_sack(psn, ev, ts_ns, ce, ev % self.qp.planes, twice=rtx)
        else:
            self._ack_trigger = (psn, ev, ts_ns, ce)
            if self._ack_deadline is None:
                self._ack_deadline = now_s + self.qp._ack_delay

    def _rx_imm_check(self, rqmsn: int, psn: int, ev: int, ts_ns: int, now_s: float) -> bool:
        """A write-with-immediate beyond max_wimm_inflight is a protocol violation: fatal
        (the NACK names the offending packet, which the requester is waiting on, and echoes
        its transmission, as the requester requires of a fatal NACK)."""
        ahead = (rqmsn - self._rx_rqmsn) & 0xFFFF
        if ahead >= self.qp.config.max_wimm_inflight and ahead < 0x8000:
            self.qp._send_nack(int(wire.NackReason.UNEXP_EVENT), psn, ev, ts_ns, -1)
            self.qp._fatal(
                WcStatus.REMOTE_OP_ERROR,
                f"peer has {ahead + 1} write-with-immediate messages in flight, "
                f"max_wimm_inflight is {self.qp.config.max_wimm_inflight}",
                now_s,
            )
            return True
        return False

    def _rx_deliver(self, now_s: float) -> None:
        """Complete the placed messages that no earlier message holds back, in MSN order;
        a write-with-immediate raises ImmReceived then, so it never overtakes earlier data."""
        done = self._rx_done
        msn = self._rx_msn
        while msn in done:
            item = done.pop(msn)
            if item is not None:
                rqmsn, imm, length = item
                self.qp._events.append(ImmReceived(imm, length, rqmsn, now_s))
                self._rx_rqmsn = (rqmsn + 1) & MSN_MASK
            msn = (msn + 1) & MSN_MASK
        self._rx_msn = msn

    def _send_sack(
        self,
        psn: int,
        ev: int,
        ts_ns: int,
        ce: bool,
        plane: int,
        op: int = OP_SACK,
        twice: bool = False,
    ) -> None:
        """Queue a SACK about ``psn`` on ``plane`` (-1: round robin).  ``twice`` (for
        duplicates and retransmissions: the requester is repairing, maybe because our ACKs
        are lost) sends a copy on another live plane too: the arrival plane is alive one
        way, and the other copy survives a failure of its way back."""
        rxw = self.qp.rxwin
        ece = ce or rxw.ece_pending
        cack, offset, bitmap, ooo, received, pen = rxw.sack_values(psn)
        if ce:
            mark = MARK_ALWAYS_SKIP if self._ce_run.get(ev, 0) >= 8 else MARK_SKIP_ONCE
            w0 = mark << 30 | 0x20000000 | cack
        else:
            w0 = 0x20000000 | cack if ece else cack
        self._ack_deadline = None
        self.qp.stats.tx_sacks += 1
        if self.qp._rev_probe_at is None and self.qp.peer is not None:
            # acknowledging: keep the reverse EVs those acknowledgments take under probes
            self.qp._rev_probe_at = self.qp.evs.now_s + REVERSE_PROBE_RTOS_FIRST * self.qp._rto
        if self.qp.peer is None:
            return
        evs = self.qp.evs
        ctrl = self.qp._ctrl
        # _queue_ctrl, with the SACK's fields packed straight into the frame
        out_ev = evs.next_reverse_ev() if plane < 0 else evs.reverse_ev_on(plane)
        ctrl.append(
            self._sack_frame(op, cack, w0, offset, pen, bitmap, ev, ooo, ts_ns, received, out_ev)
        )
        if twice and plane >= 0:
            for _ in range(len(evs.reverse)):
                other = evs.next_reverse_ev()
                if other % self.qp.planes != plane:
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
        tmpl = self.qp._tmpl.get(out_ev) or self.qp._make_tmpl(out_ev)
        eth_dst, eth_src, w0_ip, src, dst, sport, psum = tmpl
        ulen = FRAME_SACK.size + 4 - OFF_UDP
        FRAME_SACK.pack_into(
            self._scratch, 0, eth_dst, eth_src, 0x86DD, w0_ip | DSCP_CTRL_ECT0, ulen, 17,
            64, src, dst, sport, 4791, ulen, 0, op, 0, 0xFFFF, self._peer_qpn, cack, w0, offset,
            pen, bitmap, ev, ooo, ts_ns, received,
        )  # fmt: skip
        mrc, udp, whole = self._sack_views
        U32.pack_into(self._scratch, FRAME_SACK.size, crc32(mrc))
        csum = 0xFFFF - (psum + ulen + from_bytes(udp, "big")) % 0xFFFF
        U16.pack_into(self._scratch, OFF_UCSUM, csum)
        return (out_ev % self.qp.planes, bytes(whole))

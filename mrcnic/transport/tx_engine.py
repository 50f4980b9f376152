"""The C send engine's shell: an MRC requester's per-packet work in ``csrc/mrc_txe.c``.

With the C engine (``MRC_NIC_ENGINE=c``, the default when the C module is built) a connected
MRC QP segments its writes, sprays them over its EVs, builds the data frames, keeps its
scoreboard and timers and reads SACKs in C, called per batch (``mrc_txe_send``, the receive
batch's ``mrc_rxe_dispatch``, ``mrc_txe_expire``). Python keeps the policy: the EV state
machine (``EvTable.apply``, probes, the active set), a congestion control of its own
(``cc.on_ack`` per SACK), errors and completions, which the C side lists in its feedback array
in the order the Python requester would have made those calls; :meth:`CTxEngine.flush` makes
them. UET's NSCC, the default, runs in C (``csrc/mrc_nscc.c``, ``mrcnic.transport.nscc_c``).

The Python requester (``mrcnic.transport.requester``) is the twin: tests/unit/test_tx_engine.py
drives both with the same writes, SACKs, NACKs, losses and timers and compares the frames,
events and counters. Limits of the C engine (the QP runs the Python requester beyond them):
``spray="bag"`` (the default) only; per QP at most REC_CAP - 1 PSNs outstanding and
MSG_CAP writes posted and not completed (a post beyond raises).

A QP's rings are sized by what it uses: they start small (FIRST_REC_CAP records and the
queues that go with them, FIRST_MSG_CAP writes, FIRST_RECOVERY_LOG repairs), double when the
engine asks (MRC_TXE_GROW), a post finds the ring full or the recovery log would wrap, and
the records and writes go back to their first size when the QP is at rest
(``mrc_txe_move`` re-indexes what is live). The data frames' output slots are the device's,
shared by its QPs (``RxEngines.frames_out``).
"""

from __future__ import annotations

import errno
import os
import struct
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from mrcnic.transport.cc import (
    LOSS_SACK,
    LOSS_TIMEOUT,
    LOSS_TRIM,
    LOSS_TRIM_LAST_HOP,
    new_ack_sample,
    new_loss_sample,
)
from mrcnic.transport.ev import EvInput
from mrcnic.transport.nscc_c import CNscc, runs_in_c
from mrcnic.transport.qp_types import (
    MAX_OUTSTANDING_WRITES,
    QpAttributes,
    ResourceLimitError,
    TxMessage,
    WcStatus,
    WriteCompleted,
)
from mrcnic.transport.rx_engine import CounterSink, RxEngines, raw_pointer, zeroed

if TYPE_CHECKING:
    from mrcnic.transport.engine import SendHost

REC_CAP = 8192  # PSNs in flight + 1, at most (a power of two)
MSG_CAP = MAX_OUTSTANDING_WRITES  # writes posted and not completed, at most (a power of two)
RECOVERY_LOG = 65536  # PySendEngine._recoveries' length
FIRST_REC_CAP = 16  # the rings' sizes at rest (powers of two)
FIRST_MSG_CAP = 16
FIRST_RECOVERY_LOG = 16
_HDR = struct.Struct(">6s6sHIHBB16s16sHHHH")  # Ethernet, IPv6, UDP: a template's 62 bytes


# struct mrc_txe_qp's srtt, rttvar, min_rtt, rtt_peak, rto, rto_peak, rto_peak_at_s, host_stall_s,
# host_stall_at_s, has_srtt, rtt_measured (in order)
_RTT = struct.Struct("=9d2B")


_RTT_FIELDS = (
    "srtt", "rttvar", "min_rtt", "rtt_peak", "rto", "rto_peak", "rto_peak_at_s", "host_stall_s",
    "host_stall_at_s", "has_srtt", "rtt_measured",
)  # fmt: skip


def _check_rtt_block(ffi: Any) -> None:
    """``_RTT`` reads those fields of struct mrc_txe_qp as one block: they must lie in that
    order with nothing between them (csrc/mrc_txe.h)."""
    fields = dict(ffi.typeof("struct mrc_txe_qp").fields)
    offs = [fields[n].offset - fields["srtt"].offset for n in _RTT_FIELDS]
    if offs != [0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 73]:
        raise RuntimeError(f"struct mrc_txe_qp's RTT fields moved ({offs}): update _RTT")


class TxLimitError(ResourceLimitError):
    """A QP has as many writes posted and not completed as it can hold (either engine)."""


def _inputs(lib: Any) -> dict[int, EvInput]:
    return {
        lib.MRC_TXE_IN_ECN_ECHO: EvInput.ECN_ECHO,
        lib.MRC_TXE_IN_ALWAYS_SKIP: EvInput.ALWAYS_SKIP,
        lib.MRC_TXE_IN_LOST: EvInput.LOST,
        lib.MRC_TXE_IN_TRIMMED: EvInput.TRIMMED,
        lib.MRC_TXE_IN_TIMEOUT: EvInput.TIMEOUT,
    }


class CTxEngine:
    """The C send path of one connected MRC QP (the twin of
    :class:`mrcnic.transport.requester.PySendEngine`, behind the same interface; ``qp``: its
    QP as a :class:`~mrcnic.transport.engine.SendHost`; ``dev``: the device's C state)."""

    def __init__(self, qp: SendHost, dev: RxEngines) -> None:
        m = dev.module
        ffi = self._ffi = m.ffi
        lib = self._lib = m.lib
        self.qp = qp
        self._engines = dev  # the device's C state (its port queues)
        self._counters = CounterSink(ffi, "struct mrc_txe_stats")
        self._inputs = _inputs(lib)
        self._fb_kinds = (lib.MRC_TXE_FB_EV, lib.MRC_TXE_FB_ACK, lib.MRC_TXE_FB_COMPLETE,
                          lib.MRC_TXE_FB_DRAIN)  # fmt: skip
        evs = qp.evs
        n = len(evs.ev_values)
        npaths = qp.planes * qp.net.shape.t1
        keep: list[Any] = []  # every array the C struct points into

        new = zeroed(m)

        def arr(ctype: str, init: Any) -> Any:
            a = new(ctype, init)
            keep.append(a)
            return a

        self.arrays = keep  # (state_bytes, with the rings and the groups)

        q = self.q = ffi.new("struct mrc_txe_qp *")
        self._st_buf = ffi.buffer(ffi.addressof(q.st))  # (the counters, read per batch)
        # the RTT estimator's fields, read per batch as one block (srtt .. rtt_measured)
        _check_rtt_block(ffi)
        self._rtt_buf = ffi.buffer(ffi.addressof(q, "srtt"), _RTT.size)
        cfg = qp.config
        peer = qp.peer
        assert peer is not None  # engines are built when the QP connects
        q.qpn, q.peer_qpn, q.planes, q.mtu, q.nslots = (
            qp.qpn, peer.qpn, qp.planes, qp.mtu, n
        )  # fmt: skip
        q.retry_limit = cfg.retry_limit
        q.max_wimm_inflight = peer.max_wimm_inflight
        q.window_psns = peer.window_psns
        q.max_rto_s, q.min_rto_s = cfg.max_rto_s, qp._min_rto
        srcs = sorted(qp._peer_srcs)
        q.n_srcs = len(srcs)
        for i, s in enumerate(srcs):
            ffi.memmove(q.srcs[i], s, 16)
        tmpl = arr("struct mrc_txe_tmpl[]", n)
        for i, t in enumerate(qp._slot_tmpl):
            eth_dst, eth_src, w0, src, dst, sport, psum = t
            hdr = _HDR.pack(eth_dst, eth_src, 0x86DD, w0, 0, 17, 64, src, dst, sport, 4791, 0, 0)
            ffi.memmove(tmpl[i].hdr, hdr, len(hdr))
            tmpl[i].psum = psum
        q.tmpl = tmpl
        q.ev_values = arr("uint32_t[]", evs.ev_values)
        q.plane_of = arr("uint32_t[]", evs.plane_of)
        q.path_of = arr("uint32_t[]", evs.path_of)
        self._slot_arrays = {}
        for name in ("tx_packets", "acked_packets", "timeouts", "trims", "ecn_echoes"):
            self._slot_arrays[name] = a = arr("int64_t[]", getattr(evs, name))
            setattr(q, name, a)
        for name, src_list in (
            ("evidence_s", evs.evidence_s),
            ("ev_acked_sent_s", [-1.0] * n),  # (loss detection's: newest acked send, per EV)
            ("path_evidence_s", evs.path_evidence_s),
            ("path_ack_s", evs.path_ack_s),
        ):
            self._slot_arrays[name] = a = arr("double[]", src_list)
            setattr(q, name, a)
        assert len(evs.path_evidence_s) == npaths
        # spraying: the groups and bags as the EV table has them, its RNG's state
        self._grp = self._bag = ffi.NULL  # (room for the groups there are: push_groups)
        self._new = new
        q.rr, q.tx_count = evs._rr, evs.tx_count
        state = evs._rng.getstate()[1]
        lib.mrc_txe_mt_load(q, arr("uint32_t[]", state[:624]), state[624])
        self._groups_ref: Any = None
        self.push_groups()
        # messages, scoreboard, queues, logs, feedback: rings that grow and shrink (_move)
        self._rings: dict[str, Any] = {}
        self._move(FIRST_REC_CAP, FIRST_MSG_CAP, FIRST_RECOVERY_LOG)  # (from none: caps 0)
        q.rec_max = REC_CAP
        # the posted writes not completed, by number (a dict: a list of MSG_CAP slots was
        # 256 KiB resident per QP, idle or not)
        self._objs: dict[int, TxMessage] = {}
        sb = qp.sb
        q.snd_una = q.snd_nxt = sb.snd_nxt
        q.rto, q.min_rtt, q.rtt_peak = qp._rto, qp._min_rtt, qp._rtt_peak
        q.rttvar, q.rtt_measured = qp._rttvar, qp._rtt_measured
        q.rto_peak, q.rto_peak_at_s = qp._rto_peak, qp._rto_peak_at_s
        q.host_stall_s, q.host_stall_at_s = qp._host_stall_s, qp._host_stall_at_s
        q.has_srtt = qp._srtt is not None
        q.srtt = qp._srtt or 0.0
        q.ev_order_ok, q.reo_mult, q.rack_sent_s = 1, 1, -1.0  # (PySendEngine's first values)
        # data frames out: the device's slots
        self._fo = dev.frames_out(qp.mtu)
        self.out = self._fo.out
        self._deadline = ffi.new("double *")
        #: where the data frames go instead of back to the caller as bytes, when set (the
        #: simulator's C fabric: ``sink.frames(list)`` for frames already in ``out``, then
        #: ``sink.engine_out(out_struct)`` per batch, each frame copied once, no Python object)
        self.sink: Any = None
        evs.picker = self
        # UET's NSCC runs in C, per SACK; another algorithm hears each input from _replay
        self._ncc = CNscc(ffi, qp.cc) if runs_in_c(qp.cc) else None  # type: ignore[arg-type]
        q.cc = self._ncc.n if self._ncc is not None else ffi.NULL

    # -- the EV table's spraying state ------------------------------------------------------

    def push_groups(self) -> None:
        """EvTable._rebuild made new groups (and kept each plane's bag): hand them to C."""
        evs = self.qp.evs
        q = self.q
        n = q.nslots
        room = max(1, len(evs._groups)) * n
        if self._grp == self._ffi.NULL or len(self._grp) < room:  # group g at g * n
            q.grp = self._grp = self._new("int32_t[]", room)
            q.bag = self._bag = self._new("int32_t[]", room)
        grp, bag = self._grp, self._bag
        for g, (slots, b) in enumerate(zip(evs._groups, evs._bags, strict=True)):
            q.grp_n[g] = len(slots)
            q.bag_n[g] = len(b)
            base = g * n
            for k, s in enumerate(slots):
                grp[base + k] = s
            for k, s in enumerate(b):
                bag[base + k] = s
        q.n_groups = len(evs._groups)
        sched = evs._sched
        assert len(sched) <= len(q.sched)  # (path_policy.MAX_TURNS)
        for k, g in enumerate(sched):
            q.sched[k] = g
        q.n_sched = len(sched)
        self._groups_ref = evs._groups

    def pull_bags(self) -> None:
        """Before EvTable._rebuild: the bags as C dealt them."""
        evs = self.qp.evs
        q = self.q
        n = q.nslots
        bag = self._bag
        evs._bags = [[bag[g * n + k] for k in range(q.bag_n[g])] for g in range(q.n_groups)]
        evs._rr = q.rr
        evs.tx_count = q.tx_count

    def path_ack(self, path: int) -> float:
        """EvTable.path_ack_s[path] as C keeps it: when anything sent on ``path`` was last
        acknowledged."""
        return float(self._slot_arrays["path_ack_s"][path])

    def pull_stats(self) -> None:
        """The per-EV and per-path arrays as C has them (for EvTable.stats)."""
        evs = self.qp.evs
        for name, a in self._slot_arrays.items():
            if name != "ev_acked_sent_s":  # (the engine's own)
                target = getattr(evs, name)
                target[:] = list(a[0 : len(target)])

    # -- messages ------------------------------------------------------------------------------

    def state_bytes(self) -> int:
        """Bytes of the C state this engine holds for its QP now (its rings as they are)."""
        ffi = self._ffi
        arrays = (*self.arrays, *self._rings.values(), self._grp, self._bag)
        return ffi.sizeof(self.q[0]) + sum(ffi.sizeof(a) for a in arrays)

    def _move(self, rec_cap: int, msg_cap: int, recov_cap: int) -> bool:
        """Give the QP rings of these sizes (``mrc_txe_move`` re-indexes what is live into
        them); False when what is live does not fit (nothing changed then)."""
        q = self.q
        new = self._new
        was = self._rings
        rings = dict(was)
        if rec_cap != q.rec_cap:
            rings.update(
                recs=new("struct mrc_txe_rec[]", rec_cap),
                work=new("uint32_t[]", 2 * rec_cap),
                fifo=new("struct mrc_txe_timer[]", 2 * rec_cap),
                heap=new("struct mrc_txe_timer[]", rec_cap),
                ord=new("struct mrc_txe_ord[]", 2 * rec_cap),
                rtxq=new("uint32_t[]", 2 * rec_cap),
                fb=new("struct mrc_txe_fb[]", 2 * rec_cap + 16),  # (mrc_txe.c room(): 2 x + 8)
            )
        if msg_cap != q.msg_cap:
            rings["msgs"] = new("struct mrc_txe_msg[]", msg_cap)
        if recov_cap != q.recov_cap:
            rings["recov_delay"] = new("double[]", recov_cap)
            rings["recov_spur"] = new("uint8_t[]", recov_cap)
        to = self._ffi.new("struct mrc_txe_mem *", {
            "msgs": rings["msgs"], "msg_cap": len(rings["msgs"]),
            "recs": rings["recs"], "rec_cap": len(rings["recs"]), "work": rings["work"],
            "fifo": rings["fifo"], "fifo_cap": len(rings["fifo"]),
            "heap": rings["heap"], "heap_cap": len(rings["heap"]),
            "ord": rings["ord"], "ord_cap": len(rings["ord"]),
            "rtxq": rings["rtxq"], "rtxq_cap": len(rings["rtxq"]),
            "fb": rings["fb"], "fb_cap": len(rings["fb"]),
            "recov_delay": rings["recov_delay"], "recov_spur": rings["recov_spur"],
            "recov_cap": len(rings["recov_delay"]),
        })  # fmt: skip
        r = self._lib.mrc_txe_move(q, to)
        if r == 0:
            self._rings = rings  # (the old arrays go with their last reference)
            return True
        if r != -errno.ENOSPC:
            raise RuntimeError(f"mrc_txe_move refused the rings: {os.strerror(-r)}")
        return False

    def _grow(self, rec_cap: int, msg_cap: int, recov_cap: int) -> None:
        """Bigger rings: what is live always fits, unless the engine's state is broken; then
        stop loudly rather than ask again forever."""
        if not self._move(rec_cap, msg_cap, recov_cap):
            q = self.q
            raise RuntimeError(
                f"QP {self.qp.qpn}: the C send engine's live entries do not fit bigger rings "
                f"({q.n_live} records live, PSNs {q.snd_una}..{q.snd_nxt}): a bug, please report"
            )

    def _at_rest(self) -> None:
        """Nothing outstanding and nothing posted: back to the first sizes (the recovery
        log is history the QP reports, loss_recovery_s: it keeps its length)."""
        q = self.q
        if q.m_done == q.m_tail and not q.n_live and not q.rtxq_n and not q.n_fb:
            self._move(FIRST_REC_CAP, FIRST_MSG_CAP, q.recov_cap)

    def post(self, msg: TxMessage) -> None:
        q = self.q
        i = q.m_tail
        if i - q.m_done >= q.msg_cap:
            if q.msg_cap >= MSG_CAP:
                raise TxLimitError(
                    f"QP {self.qp.qpn}: {MSG_CAP} writes posted and not completed (the C "
                    "engine's limit); poll completions before posting more"
                )
            self._grow(q.rec_cap, 2 * q.msg_cap, q.recov_cap)
        e = q.msgs[i & (q.msg_cap - 1)]
        e.buf = raw_pointer(self._ffi, msg.buf)
        e.va, e.rkey, e.length = msg.remote_va, msg.rkey, msg.length
        e.has_imm = msg.imm is not None
        e.imm = msg.imm or 0
        e.next_off, e.last_psn = 0, -1
        e.msn, e.rqmsn = msg.msn, msg.rqmsn
        self._objs[i] = msg  # its buf (a memoryview) keeps the bytes alive and in place
        q.m_tail = i + 1

    def messages(self) -> list[TxMessage]:
        """Every write posted and not completed, oldest first (QueuePair._fatal's list)."""
        q = self.q
        out = []
        for i in range(q.m_done, q.m_tail):
            m = self._objs.get(i)
            if m is not None:
                out.append(m)
        return out

    def first_message(self) -> TxMessage | None:
        q = self.q
        return self._objs.get(q.m_done) if q.m_done != q.m_tail else None

    @property
    def idle(self) -> bool:
        return self.q.m_done == self.q.m_tail

    @property
    def work_waiting(self) -> bool:
        """Retransmissions or unsent writes (QueuePair's stall test: ``rtxq or sendq``)."""
        q = self.q
        return bool(q.rtxq_n) or q.m_seg != q.m_tail

    @property
    def outstanding(self) -> int:
        return self.q.n_live

    # -- per batch -----------------------------------------------------------------------------

    def send(self, now_s: float, out: list[tuple[int, bytes]]) -> None:
        """PySendEngine.send's twin: frames appended to ``out``."""
        q = self.q
        if q.m_seg == q.m_tail and not q.rtxq_n and not q.dead:
            # nothing to send: all mrc_txe_send would do is forget a release's resume point
            # (an acknowledgment's pump, most of the time, once a QP has sent its last write)
            q.resume_new = 0
            sink = self.sink
            if sink is not None and out:
                sink.frames(out)
                out.clear()
            return
        qp = self.qp
        evs = qp.evs
        lib = self._lib
        if evs._groups is not self._groups_ref:
            self.push_groups()
        rel = evs._skip_release
        q.rel_head = rel[0][0] if rel else -1
        cc = qp.cc
        fo = self._fo
        o = fo.aim(self._engines.port_queues, qp.planes)
        sink = self.sink
        if sink is not None and out:
            sink.frames(out)  # (what came first leaves first)
            out.clear()
        # each repair this call may send can add to the recovery log: never let it wrap early
        while q.recov_count + q.rtxq_n > q.recov_cap and q.recov_cap < RECOVERY_LOG:
            self._grow(q.rec_cap, q.msg_cap, 2 * q.recov_cap)
        while True:
            r = lib.mrc_txe_send(q, now_s, cc.cwnd_bytes, o)
            if sink is not None:
                if o.n:
                    sink.engine_out(o)
            else:
                fo.take(out)
            o.n = 0
            if r == lib.MRC_TXE_OUT_FULL:
                continue  # (PORT_FULL: the pacer lets frames go first)
            if r == lib.MRC_TXE_GROW:  # twice the records (and the queues that go with them)
                self._grow(2 * q.rec_cap, q.msg_cap, q.recov_cap)
                continue
            if r == lib.MRC_TXE_RELEASE:
                evs.tx_count = q.tx_count
                evs.now_s = now_s
                evs._release_skips()
                if evs._groups is not self._groups_ref:
                    self.push_groups()
                q.rel_head = rel[0][0] if rel else -1
                continue
            break
        evs.tx_count = q.tx_count
        st = q.st
        if st.tx_data_packets or st.retransmissions:
            self._stats()

    def frame(self, data: Any, now_s: float) -> bool:
        """A SACK or ACK handed to the QP itself (not through a receive batch): True when C
        took it, False when the control path must decode it."""
        lib = self._lib
        with self._ffi.from_buffer(data) as buf:
            while (r := lib.mrc_txe_frame(self.q, buf, len(data), now_s)) < 0:
                self.flush(now_s)
        self.flush(now_s)
        return r == 1

    def sack(self, *fields: Any) -> None:
        now_s = fields[-1]
        while self._lib.mrc_txe_sack(self.q, *fields) < 0:
            self.flush(now_s)
        self.flush(now_s)

    def nack(self, reason: int, psn: int, cack_psn: int, ts_ns: int, now_s: float) -> None:
        while self._lib.mrc_txe_nack(self.q, reason, psn, cack_psn, ts_ns, now_s) < 0:
            self.flush(now_s)
        self.flush(now_s)

    def expire(self, now_s: float) -> None:
        while self._lib.mrc_txe_expire(self.q, now_s) < 0:
            self.flush(now_s)
        self.flush(now_s)

    def next_deadline(self) -> float | None:
        d = self._deadline
        return d[0] if self._lib.mrc_txe_next_deadline(self.q, d) else None

    def port_down(self, plane: int) -> None:
        self._lib.mrc_txe_port_down(self.q, plane)

    def reset(self) -> None:
        self._lib.mrc_txe_reset(self.q)
        self._objs = {}  # (the rings shrink at the next flush: this may run inside one)

    def after_batch(self, now_s: float) -> None:
        """After a receive batch: the SACKs it handed this engine leave their feedback."""
        self.flush(now_s, batch=True)

    def release(self) -> None:
        """Fold the counters and the per-EV arrays into the QP (its ev_stats() stays right
        after the engine is gone) and stop picking its EVs."""
        self._stats()
        self.pull_stats()
        self.qp.evs.picker = None

    @property
    def snd_una(self) -> int:
        return self.q.snd_una

    def reo_window_s(self) -> float:
        """PySendEngine.reo_window_s, from the C state."""
        q = self.q
        spread = q.rtt_peak - q.min_rtt
        w = q.reo_mult * q.min_rtt * 0.25 + (spread if spread > 0 else 0.0)
        return w if w < q.rto else q.rto

    def loss_recovery_s(self) -> list[float]:
        q = self.q
        cap = q.recov_cap
        n = q.recov_count
        return [
            q.recov_delay[i % cap] for i in range(max(0, n - cap), n) if not q.recov_spur[i % cap]
        ]

    def flush(self, now_s: float, batch: bool = False) -> None:
        """Make the Python calls the C side listed (in its order), then the counters and the
        RTT estimator's state. ``batch``: after a receive batch, where every SACK leaves
        feedback and only the frame checks count without it."""
        q = self.q
        n = q.n_fb
        if n:
            q.n_fb = 0
            self._replay(n, now_s)
            if q.m_done == q.m_tail and q.rec_cap + q.msg_cap > FIRST_REC_CAP + FIRST_MSG_CAP:
                self._at_rest()
        elif batch and not (q.st.rx_malformed or q.st.rx_foreign or q.st.rx_closed):
            return
        self._stats()

    def _replay(self, n: int, now_s: float) -> None:
        q = self.q
        qp = self.qp
        evs = qp.evs
        cc = qp.cc
        c_cc = self._ncc  # (None: the algorithm is Python's and hears every input here)
        lib = self._lib
        inputs = self._inputs
        in_lost = lib.MRC_TXE_IN_LOST
        fb_ev, fb_ack, fb_complete, fb_drain = self._fb_kinds  # (the common ones, as locals)
        evs.now_s = now_s
        evs.tx_count = q.tx_count
        fbs = q.fb
        for i in range(n):
            f = fbs[i]
            k = f.kind
            if k == fb_ack:
                x = f.x
                s = f.slot  # the EV of the SACK, or -1
                if s >= 0:
                    ev, plane, path = evs.ev_values[s], evs.plane_of[s], evs.path_of[s]
                else:
                    ev = plane = path = -1
                rtt = x if x >= 0 else None
                cc.on_ack(new_ack_sample(f.a, rtt, bool(f.b), now_s, ev, plane, path, f.ts))
            elif k == fb_drain:
                if evs.events:
                    qp._drain_ev_events()
            elif k == fb_complete:
                m = self._objs.pop(f.ts, None)
                if m is not None:
                    m.done = True
                    qp._events.append(WriteCompleted(m.wr_id, WcStatus.SUCCESS, m.length, now_s))
            elif k == fb_ev:
                a = f.a
                evs.apply(f.slot, inputs[a], now_s)
                if a == in_lost:
                    self._loss(cc, LOSS_SACK, f, now_s)
            elif k == lib.MRC_TXE_FB_PENALTY:
                if c_cc is None:
                    cc.on_rcv_penalty(f.a, now_s)
            elif k == lib.MRC_TXE_FB_PROBE:
                evs.on_probe_answer(f.slot, f.ts, bool(f.b), now_s)
            elif k == lib.MRC_TXE_FB_TRIM:
                if c_cc is None:
                    cc.on_trim(bool(f.b), now_s)
                self._loss(cc, LOSS_TRIM_LAST_HOP if f.b else LOSS_TRIM, f, now_s)
            elif k == lib.MRC_TXE_FB_TIMEOUT:
                if c_cc is None:
                    cc.on_timeout(now_s)
                self._loss(cc, LOSS_TIMEOUT, f, now_s)
            elif k == lib.MRC_TXE_FB_WINDOW:
                qp.peer = QpAttributes(**{**asdict(qp.peer), "window_psns": f.a})  # type: ignore[arg-type]  # connected
            elif k == lib.MRC_TXE_FB_NACK_FATAL:
                self._stats()
                qp._nack_fatal(f.a, f.b, self._objs[f.ts], now_s)
            elif k == lib.MRC_TXE_FB_RETRY:
                self._stats()
                qp._retry_exceeded(f.a, f.b, self._objs[f.ts], now_s)

    def _loss(self, cc: Any, cause: str, f: Any, now_s: float) -> None:
        """``cc.on_loss`` for the lost packet of feedback record ``f`` (its slot; ``b`` the
        bytes of a LOST input, ``a`` those of a trim or timeout; ``ts`` the bytes in flight),
        when the algorithm has that method."""
        on_loss = getattr(cc, "on_loss", None)
        if on_loss is None:
            return
        evs = self.qp.evs
        s = f.slot
        nbytes = f.b if cause == LOSS_SACK else f.a
        on_loss(
            new_loss_sample(
                cause, nbytes, evs.ev_values[s], evs.plane_of[s], evs.path_of[s], f.ts, now_s
            )
        )

    def _stats(self) -> None:
        qp = self.qp
        self._counters.add_buffer(self._st_buf, qp.stats)
        if self._ncc is not None:
            self._ncc.pull()
        (srtt, qp._rttvar, qp._min_rtt, qp._rtt_peak, rto, qp._rto_peak, qp._rto_peak_at_s,
         qp._host_stall_s, qp._host_stall_at_s, has_srtt, measured) = _RTT.unpack(self._rtt_buf)  # fmt: skip
        qp._rto = rto
        qp.evs.path_quiet_s = 0.5 * rto
        qp._srtt = srtt if has_srtt else None
        qp._rtt_measured = bool(measured)

"""The receive engine: which code runs a responder's data path, and the C one's shell.

``MRC_NIC_ENGINE`` picks it for every QP a :class:`mrcnic.verbs.Device` creates:

- ``c`` (the default when the C module is built): ``csrc/mrc_rxe.c`` takes each data frame of
  an MRC QP (acceptance rules, ICRC, placement, PSN bitmap, CE accounting, completion in MSN
  order, SACK/NACK by the coalescing rule) and the I/O shell hands it whole receive batches
  (:meth:`RxEngines.dispatch`, through ``Device.receive_batch``); Python is called per batch,
  for the QP's control frames, events and timers;
- ``py``: the Python responder (``mrcnic.transport.responder``), the engine's twin and the
  protocol's reference. tests/unit/test_rx_engine.py drives both with the same frames and
  compares the control frames, events and counters they produce.

The send side has its own C engine (``mrcnic.transport.tx_engine``); this module's
:meth:`RxEngines.dispatch` hands it the SACKs of a receive batch.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable, Iterable
from itertools import compress
from typing import TYPE_CHECKING, Any

from mrcnic.transport.frames import DSCP_CTRL_ECT0, MSN_WINDOW
from mrcnic.transport.frames_out import FramesOut
from mrcnic.transport.memory import Access, MemoryTable
from mrcnic.transport.qp_types import ImmReceived, QpState, WcStatus
from mrcnic.transport.responder import REVERSE_PROBE_RTOS_FIRST, refusal_reason

if TYPE_CHECKING:
    from mrcnic.transport.engine import RecvHost

ENGINES = ("c", "py")
_CTRL_SLOT = 128  # bytes per control frame slot (a SACK frame is 118)
_OUT_CAP = 256
FIRST_RX_MSGS = 64  # a receive engine's tables at rest: messages in progress (a power of two)
FIRST_CE_EVS = 16  # and EVs marking CE
_HDR = struct.Struct(">6s6sHIHBB16s16sHHHH")  # Ethernet, IPv6, UDP: a template's 62 bytes


def c_module() -> Any:
    from mrcnic import fast

    if fast.BACKEND != "c":
        return None
    try:
        from mrcnic import _mrcfast
    except ImportError:
        return None
    return _mrcfast if hasattr(_mrcfast.lib, "mrc_rxe_frame") else None


_ZEROED: dict[int, Any] = {}


def zeroed(m: Any) -> Any:
    """``m.ffi.new``'s twin for the engines' big arrays (``zeroed(m)("int32_t[]", n)``): zeroed
    memory from calloc (csrc/mrc_mem.c), whose untouched pages cost no resident memory; cffi's
    own allocator clears every byte, which made a QP's whole rings resident at once."""
    got = _ZEROED.get(id(m))
    if got is None:
        got = _ZEROED[id(m)] = m.ffi.new_allocator(
            alloc=m.lib.mrc_mem_zalloc, free=m.lib.mrc_mem_free, should_clear_after_alloc=False
        )
    return got


def raw_pointer(ffi: Any, view: Any, writable: bool = False) -> Any:
    """A raw ``uint8_t *`` into ``view``'s bytes that holds no buffer export: the caller keeps
    ``view`` (a memoryview, whose own export keeps a bytearray from being resized) alive as
    long as C may use the pointer. A cffi buffer object kept instead would hold an export on
    the view, and when both end up in a reference cycle the garbage collector's clear of the
    view fails (BufferError) and frees memory still in use."""
    tmp = ffi.from_buffer("uint8_t[]", view, require_writable=writable)
    try:
        return ffi.cast("uint8_t *", tmp)
    finally:
        ffi.release(tmp)


#: regions the C engines' memory table holds: a device registers no more (verbs.DeviceLimits),
#: so both engines accept the same keys
MAX_REGIONS = 1024


class CounterSink:
    """Adds a C struct of int64 counters (``struct_name``) to the QpStats fields of the same
    names and zeroes them in C: the struct is read and cleared as one buffer (per batch, a
    getattr per field was a visible share of the receive path's Python)."""

    __slots__ = ("names", "_fmt", "_zero")

    def __init__(self, ffi: Any, struct_name: str) -> None:
        fields = ffi.typeof(struct_name).fields
        if any(f.type.cname != "int64_t" for _n, f in fields):
            raise TypeError(f"{struct_name}: every counter must be int64_t")
        self.names = [name for name, _f in fields]
        self._fmt = struct.Struct(f"={len(fields)}q")
        self._zero = bytes(self._fmt.size)

    def add(self, ffi: Any, st: Any, stats: Any) -> None:
        self.add_buffer(ffi.buffer(ffi.addressof(st)), stats)

    def add_buffer(self, buf: Any, stats: Any) -> None:
        """:meth:`add` from the struct's buffer (``ffi.buffer(ffi.addressof(st))``, which an
        engine makes once: its struct does not move)."""
        values = self._fmt.unpack(buf)
        if not any(values):
            return
        names = self.names
        for i in compress(range(len(values)), values):  # (the few that moved, in C's loop)
            name = names[i]
            setattr(stats, name, getattr(stats, name) + values[i])
        buf[:] = self._zero


def engine_from_env() -> str:
    """The engine ``MRC_NIC_ENGINE`` asks for (``c`` when unset and the C module is built,
    else ``py``); a value that is not an engine raises ValueError."""
    want = os.environ.get("MRC_NIC_ENGINE", "").strip().lower()
    if want and want not in ENGINES:
        raise ValueError(f"MRC_NIC_ENGINE={want!r}: not an engine (c, py)")
    if want == "py":
        return "py"
    if c_module() is None:
        if want == "c":
            raise ValueError(
                "MRC_NIC_ENGINE=c but the C module mrcnic._mrcfast is not built (or "
                "MRC_PURE_PYTHON=1): run `make setup`"
            )
        return "py"
    return "c"


class RxEngines:
    """A device's C data paths: its QPs' engines by QP number, the C copy of its
    :class:`MemoryTable` that placement reads (rebuilt when a region is registered or
    withdrawn or its access changes, checked once per batch), and the control frames the
    engines made, waiting for the shell (:attr:`ctrl`)."""

    MAX_QPS = 1024  # csrc/mrc_rxe.h MRC_RXE_MAX_QPS (struct mrc_rxe_dev)

    def __init__(self, memory: MemoryTable, cap: int = MAX_REGIONS) -> None:
        m = self.module = c_module()
        ffi = self._ffi = m.ffi
        self._lib = m.lib
        self.memory = memory
        self.cap = cap
        self._arr = ffi.new("struct mrc_rxe_region[]", cap)
        self.c = ffi.new("struct mrc_rxe_regions *", {"r": self._arr, "n": 0, "cap": cap})
        self._sig: tuple = ()
        self._regions: list = []
        self._out_buf = ffi.new("uint8_t[]", _OUT_CAP * _CTRL_SLOT)
        self._out_len = ffi.new("uint32_t[]", _OUT_CAP)
        self._out_plane = ffi.new("uint8_t[]", _OUT_CAP)
        self.out_struct = ffi.new(
            "struct mrc_rxe_out *",
            {"buf": self._out_buf, "slot_len": _CTRL_SLOT, "cap": _OUT_CAP, "n": 0,
             "len": self._out_len, "plane": self._out_plane},
        )  # fmt: skip
        self._out_view = ffi.buffer(self._out_buf)
        self.dev = ffi.new("struct mrc_rxe_dev *", {"mem": self.c, "out": self.out_struct})
        self._lib.mrc_rxe_dev_index(self.dev)
        if self._lib.MRC_RXE_MAX_QPS != self.MAX_QPS:
            raise RuntimeError("csrc/mrc_rxe.h's MRC_RXE_MAX_QPS and RxEngines.MAX_QPS differ")
        self.engines: dict[int, CRxEngine] = {}
        #: the I/O shell's per-port queues of C-built data frames (Device.attach_port_queues)
        self.port_queues: Any = None
        self.ctrl: list[tuple[int, bytes]] = []
        self._done = ffi.new("int8_t[]", 256)
        self._frames_out: dict[int, Any] = {}
        self._entries: list[Any] = []

    def frames_out(self, mtu: int) -> Any:
        """The send engines' output slots for frames of ``mtu`` payload bytes
        (``FramesOut``): one per size for the whole device, since a send call hands
        its frames over before it returns (about 270 KB at a 4 KiB MTU, which per QP was most
        of an idle QP's state)."""
        fo = self._frames_out.get(mtu)
        if fo is None:
            fo = self._frames_out[mtu] = FramesOut(self._ffi, mtu, self._ffi.new)
        return fo

    def add(self, eng: Any) -> bool:
        """Serve ``eng``'s QP (a :class:`CRxEngine`, or a RoCEv2 QP's entry,
        ``mrcnic.rocev2.c_engine.RoceEngine``); False when the device already serves MAX_QPS
        (an MRC QP then runs the Python path, a RoCEv2 QP takes its frames one by one)."""
        if len(self.engines) >= self.MAX_QPS:
            return False
        self.engines[eng.qp.qpn] = eng
        self._rebuild()
        return True

    def remove(self, qpn: int) -> None:
        if self.engines.pop(qpn, None) is not None:
            self._rebuild()

    def _rebuild(self) -> None:
        d = self.dev
        self._entries = list(self.engines.values())  # (by the dispatch's entry index)
        for i, (qpn, eng) in enumerate(self.engines.items()):
            d.qpn[i] = qpn
            d.qp[i] = eng.q
            d.txq[i] = eng.txq
            d.roce[i] = eng.roce
        d.n = len(self.engines)
        self._lib.mrc_rxe_dev_index(d)

    def drain_out(self) -> None:
        out = self.out_struct
        n = out.n
        if n and self.port_queues is not None:  # straight to the ports' C queues
            self.port_queues.push_high(self._out_buf, _CTRL_SLOT, self._out_len,
                                       self._out_plane, n)  # fmt: skip
            out.n = 0
        elif n:
            view = self._out_view
            lens, planes = self._out_len, self._out_plane
            ctrl = self.ctrl
            for i in range(n):
                off = i * _CTRL_SLOT
                ctrl.append((planes[i], view[off : off + lens[i]]))
            out.n = 0

    def prepare(self, now_s: float, engines: Iterable[Any] | None = None) -> None:
        """Before a batch: regions, reverse-EV states, QP states and the clock as Python has
        them (of ``engines``; default: every engine)."""
        self.sync()
        for eng in self.engines.values() if engines is None else engines:
            eng.prepare(now_s)

    def dispatch(
        self,
        ptr: Any,
        offs: Any,
        lens: Any,
        n: int,
        slot_len: int,
        now_s: float,
        in_order: Callable[[int], None],
    ) -> memoryview | None:
        """Run a receive batch through the engines; returns ``done`` (per frame: 1 taken, 0
        for the per-frame path, 2 cut, 3 taken in order by ``in_order(i)``), or None when
        the engines took every frame. Everything the engines produced is handed over."""
        lib = self._lib
        dev = self.dev
        # the QPs this batch names, and only they, are prepared and served: per batch, the
        # Python work follows the QPs that had traffic, not the number of QPs
        lib.mrc_rxe_scan(dev, ptr, offs, lens, n, slot_len)
        entries = self._entries
        named = [entries[dev.touched[t]] for t in range(dev.n_touched)]
        self.prepare(now_s, named)
        done = self._done
        start = rest = 0
        while start < n:
            k = lib.mrc_rxe_dispatch(
                dev, ptr, offs + start, lens + start, n - start, slot_len, now_s, done + start
            )
            rest += dev.n_rest
            self.flush(named)  # (the engines the batch does not name produced nothing)
            if dev.grow:  # an engine's table was too small for the frame it stopped at
                entries[dev.grow - 1].grow()
                dev.grow = 0
            for eng in named:  # what the send engines read (SACKs)
                eng.after_batch(now_s)
            start += k
            if dev.stopped:  # a control frame of an engine's QP: its turn is now
                dev.stopped = 0
                in_order(start - 1)
                done[start - 1] = 3
                self.prepare(now_s, named)  # (the frame Python took may have changed it)
        if not rest:
            return None
        return memoryview(self._ffi.buffer(done, n)).cast("b")

    def flush(self, engines: Iterable[Any] | None = None) -> None:
        """Hand everything the engines produced (of ``engines``; default: every engine) to
        their QPs and the shell."""
        self.drain_out()
        for eng in self.engines.values() if engines is None else engines:
            eng.flush()

    def sync(self) -> None:
        regions = list(self.memory._by_rkey.values())
        sig = tuple((mr.rkey, mr.access, id(mr.buffer)) for mr in regions)
        if sig == self._sig:
            return
        self.harvest()
        ffi = self._ffi
        n = 0
        for mr in regions[: self.cap]:
            r = self._arr[n]
            buf = raw_pointer(ffi, mr.buffer, writable=True)
            r.rkey, r.base_va, r.length, r.ptr = mr.rkey, mr.base_va, len(mr.buffer), buf
            r.remote_write = 1 if mr.access & Access.REMOTE_WRITE else 0
            r.bytes_placed = 0
            n += 1
        self.c.n = n
        self._regions = regions[:n]  # the C table points into their buffers: keep them
        self._sig = sig

    def harvest(self) -> None:
        """Add what C placed to each region's ``bytes_placed``."""
        for i, mr in enumerate(self._regions):
            r = self._arr[i]
            if r.bytes_placed:
                mr.bytes_placed += r.bytes_placed
                r.bytes_placed = 0


class CRxEngine:
    """The C data path of one connected MRC QP (the twin of
    :class:`mrcnic.transport.responder.PyRecvEngine`, behind the same interface)."""

    def state_bytes(self) -> int:
        """Bytes of the C state this engine holds for its QP now (its tables as they are)."""
        ffi = self._ffi
        return sum(ffi.sizeof(a) for a in (self.q[0], self._msgs, self._ce, self._tmpl))

    def fold_counters(self) -> None:
        """Add what the C side counted since the last batch to the QP's stats."""
        self._counters.add_buffer(self._st_buf, self.qp.stats)

    def __init__(self, qp: RecvHost, dev: RxEngines, txq: Any = None) -> None:
        m = c_module()
        ffi = self._ffi = m.ffi
        self._lib = m.lib
        self.qp = qp
        self.dev = dev
        #: the QP's C send engine's struct, which the receive batch hands SACKs to (NULL:
        #: the QP sends with the Python twin, which takes its SACKs through receive_frame)
        self.txq = txq or ffi.NULL
        self.roce = ffi.NULL  # (an MRC QP: no RoCEv2 engine)
        # the C counters, by the QpStats field each one adds to (the same names)
        self._counters = CounterSink(ffi, "struct mrc_rxe_stats")
        evs = qp.evs
        q = self.q = ffi.new("struct mrc_rxe_qp *")
        self._st_buf = ffi.buffer(ffi.addressof(q.st))  # (the counters, read per batch)
        peer = qp.peer
        assert peer is not None  # engines are built when the QP connects
        q.qpn, q.peer_qpn, q.planes = qp.qpn, peer.qpn, qp.planes
        q.reverse_per_plane = evs.config.reverse_per_plane
        q.ack_every = qp.config.ack_every
        q.max_wimm_inflight = qp.config.max_wimm_inflight
        q.mtu = qp.mtu
        q.ack_delay_s = qp._ack_delay
        srcs = sorted(qp._peer_srcs)
        q.n_srcs = len(srcs)
        for i, s in enumerate(srcs):
            ffi.memmove(q.srcs[i], s, 16)
        q.win = qp.rxwin.win._w  # type: ignore[attr-defined]  # the C build's window; the same window object the Python responder would use
        self._new = zeroed(m)
        self._msgs = self._ce = ffi.NULL  # (the tables: _move, sized by what is in flight)
        self._move(FIRST_RX_MSGS, FIRST_CE_EVS)
        self._rest_msn = -1  # rx_msn when the tables last tried to shrink
        rev = list(evs.reverse)
        self._tmpl = ffi.new("struct mrc_rxe_tmpl[]", max(1, len(rev)))
        for i, ev in enumerate(rev):
            eth_dst, eth_src, w0, src, dst, sport, psum = qp._make_tmpl(ev)
            hdr = _HDR.pack(
                eth_dst, eth_src, 0x86DD, w0 | DSCP_CTRL_ECT0, 0, 17, 64, src, dst, sport,
                4791, 0, 0,
            )  # fmt: skip
            t = self._tmpl[i]
            ffi.memmove(t.hdr, hdr, len(hdr))
            t.ev, t.psum = ev, psum
        q.tmpl, q.n_reverse = self._tmpl, len(rev)
        self._rev = rev
        self.push_reverse()
        q.pending_lo = -1
        q.rx_msn, q.rx_rqmsn = 0, 0  # (a new connection's, as PyRecvEngine's)
        self._rev_sig: tuple = ()
        self.sync_reverse()
        self.out = dev.out_struct

    def _move(self, msg_cap: int, ce_cap: int) -> bool:
        """Tables of these lengths for the messages in progress and the EVs marking CE
        (``mrc_rxe_move``); False when what is in them does not fit."""
        q = self.q
        msgs = self._msgs if msg_cap == q.msg_cap else self._new("struct mrc_rxe_msg[]", msg_cap)
        ce = self._ce if ce_cap == q.ce_cap else self._new("struct mrc_rxe_ce[]", ce_cap)
        to = self._ffi.new("struct mrc_rxe_mem *", {"msgs": msgs, "msg_cap": msg_cap, "ce": ce,
                                                    "ce_cap": ce_cap})  # fmt: skip
        r = self._lib.mrc_rxe_move(q, to)
        if r == 0:
            self._msgs, self._ce = msgs, ce
            return True
        if r != -errno.ENOSPC:
            raise RuntimeError(f"mrc_rxe_move refused the tables: {os.strerror(-r)}")
        return False

    def grow(self) -> None:
        """A frame found a table too small (``q.want``): twice that table."""
        q = self.q
        lib = self._lib
        msg_cap, ce_cap = q.msg_cap, q.ce_cap
        if q.want & lib.MRC_RXE_WANT_MSGS:
            msg_cap = min(2 * msg_cap, MSN_WINDOW)
        if q.want & lib.MRC_RXE_WANT_CE:
            ce_cap = min(2 * ce_cap, lib.MRC_RXE_CE_EVS)
        if not self._move(msg_cap, ce_cap):  # (what is in them always fits bigger ones)
            raise RuntimeError(f"QP {self.qp.qpn}: the C receive engine's tables did not grow")

    def _at_rest(self) -> None:
        """Messages completed since the last look: the first sizes again when what is in
        progress fits them (asked of C first, which stops at the first message beyond: cheap
        under load, and nothing allocated in vain)."""
        q = self.q
        self._rest_msn = q.rx_msn
        msg_cap = FIRST_RX_MSGS if self._lib.mrc_rxe_fits(q, FIRST_RX_MSGS) else q.msg_cap
        ce_cap = FIRST_CE_EVS if q.n_ce <= FIRST_CE_EVS else q.ce_cap
        if (msg_cap, ce_cap) != (q.msg_cap, q.ce_cap):
            self._move(msg_cap, ce_cap)

    def prepare(self, now_s: float) -> None:
        """Before a batch: the clock, reverse-EV states and QP state as Python has them."""
        self.qp.evs.now_s = now_s
        self.sync_reverse()
        if self.qp.state is QpState.ERROR:
            self.q.dead = 1

    def after_batch(self, now_s: float) -> None:
        self.qp.tx.after_batch(now_s)

    def reverse_ev(self, plane: int) -> int:
        """The reverse EV for a control frame Python sends: one round robin, the C side's."""
        self.pull_reverse()
        evs = self.qp.evs
        ev = evs.next_reverse_ev() if plane < 0 else evs.reverse_ev_on(plane)
        self.push_reverse()
        return ev

    def release(self) -> None:
        """Add what C counted to the QP's stats (the device drops the engine itself)."""
        self.fold_counters()

    def pull_reverse(self) -> None:
        """The reverse-EV round robin as C has it, for a control frame Python sends."""
        evs = self.qp.evs
        q = self.q
        evs._reverse_next = q.reverse_next
        evs._reverse_k[:] = [q.reverse_k[p] for p in range(self.qp.planes)]

    def push_reverse(self) -> None:
        evs = self.qp.evs
        q = self.q
        q.reverse_next = evs._reverse_next
        for p in range(self.qp.planes):
            q.reverse_k[p] = evs._reverse_k[p]

    def sync_reverse(self) -> None:
        """The reverse EVs' states as the Python EV table has them (probes, planes down)."""
        evs = self.qp.evs
        sig = (tuple(evs.plane_down), frozenset(evs.reverse_bad))
        if sig == self._rev_sig:
            return
        self._rev_sig = sig
        q = self.q
        for p, down in enumerate(evs.plane_down):
            q.plane_down[p] = 1 if down else 0
        bad = evs.reverse_bad
        for i, ev in enumerate(self._rev):
            q.reverse_bad[i] = 1 if ev in bad else 0

    # -- per batch -------------------------------------------------------------------------

    def _run(self, call: Any, *args: Any) -> int:
        """A C call that may find the output full (drain) or a table too small (grow): call
        again, then hand over."""
        while (r := call(*args)) < 0:
            if self.q.want:
                self.grow()
            else:
                self.dev.flush()
        self.dev.flush()
        return r

    def frame(self, data: Any, now_s: float) -> bool:
        """One frame (the per-frame path: a frame handed to the QP itself): True when the
        engine took it, False when it is the QP's control path's."""
        dev = self.dev
        dev.prepare(now_s)
        with self._ffi.from_buffer(data) as buf:
            r = self._run(self._lib.mrc_rxe_frame, self.q, dev.c, buf, len(data), now_s, self.out)
        return r == 1

    def timer(self, now_s: float) -> None:
        self._run(self._lib.mrc_rxe_ack_timer, self.q, now_s, self.out)

    def ack(self, op: int, ev: int, ts_ns: int, ce: bool, plane: int) -> None:
        """Acknowledge now (an EV probe's answer): PyRecvEngine.ack's twin."""
        self.sync_reverse()
        self._run(self._lib.mrc_rxe_ack, self.q, op, ev, ts_ns, ce, plane, self.out)

    def deadline(self) -> float | None:
        q = self.q
        return q.ack_deadline_s if q.ack_armed else None

    def flush(self) -> None:
        """Hand what the C side produced to the QP: events, counters (the control frames are
        the device's: RxEngines.drain_out)."""
        q = self.q
        qp = self.qp
        lib = self._lib
        while q.n_events:  # (more, when completed messages waited for room in them)
            for i in range(q.n_events):
                e = q.events[i]
                if e.kind == lib.MRC_RXE_EV_IMM:
                    qp._events.append(ImmReceived(e.a, e.b, e.c, e.t_s))
                elif e.kind == lib.MRC_RXE_EV_WIMM_FATAL:
                    qp._fatal(
                        WcStatus.REMOTE_OP_ERROR,
                        f"peer has {e.a} write-with-immediate messages in flight, "
                        f"max_wimm_inflight is {qp.config.max_wimm_inflight}",
                        e.t_s,
                    )
                elif e.kind == lib.MRC_RXE_EV_REFUSED:
                    qp._fatal(WcStatus.REMOTE_ACCESS_ERROR, refusal_reason(e.a, e.b, e.c), e.t_s)
            q.n_events = 0
            if q.deliver_pending:
                lib.mrc_rxe_resume(q)
        if q.sacked:
            q.sacked = 0
            if qp._rev_probe_at is None and qp.peer is not None:
                qp._rev_probe_at = qp.evs.now_s + REVERSE_PROBE_RTOS_FIRST * qp._rto
        st = q.st
        if st.rx_data_packets or st.rx_malformed or st.rx_foreign or st.tx_sacks or st.rx_closed:
            placed = st.rx_placed_bytes
            self._counters.add_buffer(self._st_buf, qp.stats)
            if placed:
                self.dev.harvest()  # (the regions' bytes_placed: only placement adds to them)
        if (q.msg_cap + q.ce_cap > FIRST_RX_MSGS + FIRST_CE_EVS and q.rx_msn != self._rest_msn
                and not q.want):  # fmt: skip
            self._at_rest()
        if qp.state is QpState.ERROR:
            q.dead = 1

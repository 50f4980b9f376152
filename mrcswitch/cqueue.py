"""An egress port's queue in C (csrc/mrc_equeue.c), with the API of queue.EgressQueue.

:class:`CEgressQueue` keeps its frames in byte rings inside one memory block; the block and
the ``struct mrc_equeue`` are allocated here and live as long as the object, so the switch's
C loop (given ``ptr``) can enqueue, pace and send (``send``: sendmmsg straight from the
rings) without Python. Verdicts, frames out, counters and token arithmetic are queue.EgressQueue's
(tests/unit/test_switch_cqueue.py checks them step by step), with two differences that
cannot reach it from the switch: a frame shorter than 16 bytes or longer than
``max_frame_bytes`` is DROPPED (the twin raises / queues it; the switch drops such frames
on receive), and the classes are not exposed as ``high`` / ``data`` deques.

:func:`make_egress_queue` picks the C queue unless MRC_PURE_PYTHON=1 or the C module is
missing (as batch_io does).
"""

from __future__ import annotations

from mrcnic.io import batch as batch_io
from mrcnic.wire import layout

from .config import MAX_FRAME_BYTES, LosslessClass, PortConfig
from .queue import NS_PER_S, EgressQueue, Verdict

SEND_BATCH = 64  # csrc/mrc_equeue.h MRC_EQ_SEND_BATCH
_VERDICTS = tuple(Verdict)  # indexed by MRC_EQ_* (the same numbers)
_MARKED = int(Verdict.MARKED)  # a plain int: comparing with an IntEnum member is slow
_MIN_OUT_BYTES = 64 * 1024


_mod = batch_io.c_module_with("mrc_eq_init")
BACKEND = "c" if _mod is not None else "python"


class CEgressQueue:
    """One port's paced two-class egress queue, in C. ``ptr`` is the ``struct mrc_equeue *``."""

    __slots__ = (
        "cfg",
        "lblen",
        "max_frame_bytes",
        "ptr",
        "_mem",
        "_out",
        "_out_view",
        "_out_len",
        "_lens",
        "_io",
        "_from_buffer",
        "_enqueue",
        "_dequeue",
        "_send",
        "_keep_in",
        "_wire_mem",
    )

    def __init__(
        self,
        cfg: PortConfig,
        lblen: int = 32,
        now_ns: int = 0,
        *,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        lossless: LosslessClass | None = None,
        in_bytes=None,
    ) -> None:
        if _mod is None:
            raise RuntimeError("the C module mrcnic._mrcfast with mrc_equeue is not available")
        ffi, lib = _mod.ffi, _mod.lib
        self.cfg = cfg
        self.lblen = lblen
        self.max_frame_bytes = max_frame_bytes
        q = ffi.new("struct mrc_equeue *")
        q.rate_per_ns = cfg.rate_bps / 8 / NS_PER_S  # the twin's very expression
        q.burst_bytes = float(cfg.burst_bytes)
        q.buffer_bytes = cfg.buffer_bytes
        q.high_buffer_bytes = cfg.high_buffer_bytes
        q.ecn_threshold_bytes = cfg.ecn_threshold_bytes
        q.max_frame_bytes = max_frame_bytes
        q.ecn_on = int(cfg.ecn)
        q.trim_on = int(cfg.trimming)
        q.last_hop = int(cfg.last_hop)
        q.trim_bytes = cfg.trim_bytes
        q.lblen = lblen
        mem_len = lib.mrc_eq_mem_bytes(cfg.buffer_bytes, cfg.high_buffer_bytes, max_frame_bytes)
        if mem_len == 0:
            raise ValueError(f"mrc_equeue: unusable bounds for port {cfg.name!r}")
        if lossless is not None:
            ll_len = lib.mrc_eq_lossless_mem_bytes(lossless.buffer_bytes, max_frame_bytes)
            if ll_len == 0:
                raise ValueError(f"mrc_equeue: unusable lossless bound for port {cfg.name!r}")
            mem_len += ll_len
            q.lossless_buffer_bytes = lossless.buffer_bytes
            q.in_limit_bytes = lossless.in_limit_bytes
            q.lossless_dscp = lossless.dscp
            q.lossless_ecn = int(lossless.ecn)
            if in_bytes is not None:  # a C int64_t array (new_in_bytes), shared by a switch
                q.in_bytes = in_bytes
                q.n_in = len(in_bytes)
        self._mem = ffi.new("uint8_t[]", mem_len)
        if lib.mrc_eq_init(q, self._mem, mem_len, now_ns) != 0:
            raise ValueError(f"mrc_equeue: bad configuration for port {cfg.name!r}")
        self.ptr = q
        self._keep_in = in_bytes  # the array must outlive the struct that points at it
        # dequeue's copy-out buffer: at least two of the longest frames per C call
        self._out_len = max(_MIN_OUT_BYTES, 2 * max_frame_bytes)
        self._out = ffi.new("uint8_t[]", self._out_len)
        self._out_view = memoryview(ffi.buffer(self._out))
        self._lens = ffi.new("uint32_t[]", SEND_BATCH)
        self._io = ffi.new("int64_t[4]")
        self._from_buffer = ffi.from_buffer
        self._enqueue = lib.mrc_eq_enqueue_in
        self._dequeue = lib.mrc_eq_dequeue
        self._send = lib.mrc_eq_send
        self._wire_mem = None  # the wire's block (mrc_eq_set_delay), kept alive here
        if cfg.delay_ns:
            self.set_delay(cfg.delay_ns)

    # --- the twin's API -------------------------------------------------------------------

    @property
    def depth_bytes(self) -> int:
        q = self.ptr
        return q.high_bytes + q.data_bytes + q.lossless_bytes

    def __len__(self) -> int:
        q = self.ptr
        return q.high_frames + q.data_frames + q.lossless_frames + q.wire_frames

    # --- the wire (link propagation delay) ------------------------------------------------

    def wire_bound(self, delay_ns: int) -> int:
        """The wire bound a delay gives (EgressQueue.wire_bound)."""
        b = _mod.lib.mrc_eq_wire_bound(self.ptr, delay_ns)
        if b < 0:
            raise ValueError(f"delay_ns {delay_ns}: must be 0..{_mod.lib.MRC_EQ_MAX_DELAY_NS}")
        return b

    def set_delay(self, delay_ns: int) -> None:
        """The link's one-way delay from now on (EgressQueue.set_delay): a new wire block
        for a delay > 0, the frames in flight moved to it by C."""
        lib, ffi = _mod.lib, _mod.ffi
        self.wire_bound(delay_ns)  # the range check, with the twin's message
        mem = ffi.NULL
        need = lib.mrc_eq_wire_mem_bytes(self.ptr, delay_ns) if delay_ns else 0
        if need:
            mem = ffi.new("uint8_t[]", need)
        if lib.mrc_eq_set_delay(self.ptr, delay_ns, mem, need) != 0:
            raise ValueError(f"mrc_equeue: cannot set a delay of {delay_ns} ns")
        if need:
            self._wire_mem = mem

    @property
    def delay_ns(self) -> int:
        return self.ptr.delay_ns

    @property
    def wire_bytes(self) -> int:
        return self.ptr.wire_bytes

    @property
    def wire_bound_bytes(self) -> int:
        return self.ptr.wire_bound_bytes

    @property
    def wire_stalls(self) -> int:
        return self.ptr.wire_stalls

    @property
    def lossless_bytes(self) -> int:
        return self.ptr.lossless_bytes

    @property
    def lossless_drops(self) -> int:
        return self.ptr.lossless_drops

    @property
    def paused_until_ns(self) -> int:
        return self.ptr.paused_until_ns

    @paused_until_ns.setter
    def paused_until_ns(self, t_ns: int) -> None:
        self.ptr.paused_until_ns = t_ns

    @property
    def high_bytes(self) -> int:
        return self.ptr.high_bytes

    @property
    def data_bytes(self) -> int:
        return self.ptr.data_bytes

    @property
    def max_depth_bytes(self) -> int:
        return self.ptr.max_depth_bytes

    @property
    def ecn_marks(self) -> int:
        return self.ptr.ecn_marks

    @property
    def trims(self) -> int:
        return self.ptr.trims

    def enqueue(self, frame: bytes | bytearray, now_ns: int = 0, in_port: int = -1) -> Verdict:
        """Admit one forwarded frame that came in on ``in_port`` (copied in; see the module
        doc for the length limits)."""
        buf = frame if type(frame) is bytes else self._from_buffer(frame)
        v = self._enqueue(self.ptr, buf, len(frame), in_port)
        if v < 0:
            raise RuntimeError(f"mrc_eq_enqueue: error {v}")
        if v == _MARKED and isinstance(frame, bytearray):
            layout.set_ce(frame)  # the twin marks the caller's frame itself
        return _VERDICTS[v]

    def dequeue(self, now_ns: int, max_frames: int = 64) -> list[bytearray]:
        """Frames the link may carry by now: high class first, within the token bucket."""
        out: list[bytearray] = []
        left = max(0, max_frames)
        q, view, out_len, lens = self.ptr, self._out_view, self._out_len, self._lens
        room = out_len - self.max_frame_bytes
        while True:
            k = left if left < SEND_BATCH else SEND_BATCH
            # repeated calls at the same now_ns continue exactly where the last one stopped
            n = self._dequeue(q, now_ns, k, self._out, out_len, lens)
            if n < 0:
                raise RuntimeError(f"mrc_eq_dequeue: error {n}")
            at = 0
            for i in range(n):
                ln = lens[i]
                out.append(bytearray(view[at : at + ln]))
                at += ln
            left -= n
            # stop unless the batch was full or the copy-out buffer (not tokens) ended it
            if left == 0 or n == 0 or (n < k and at <= room):
                return out

    def fast_budget(self, now_ns: int) -> int:
        """Bytes that may leave at once without queueing (see EgressQueue.fast_budget)."""
        return _mod.lib.mrc_eq_fast_budget(self.ptr, now_ns)

    @property
    def rate_per_ns(self) -> float:
        return self.ptr.rate_per_ns

    @property
    def burst_bytes(self) -> int:
        return int(self.ptr.burst_bytes)

    @property
    def refilled_ns(self) -> int:
        return self.ptr.last_ns

    def consume(self, nbytes: int) -> None:
        _mod.lib.mrc_eq_consume(self.ptr, nbytes)

    def next_send_ns(self, now_ns: int) -> int | None:
        """When the head frame may leave (now_ns if already), or None if the queue is empty."""
        q = self.ptr
        if q.high_frames + q.data_frames + q.lossless_frames + q.wire_frames == 0:
            return None
        return _mod.lib.mrc_eq_next_send_ns(q, now_ns)

    def flush(self) -> int:
        """Drop everything queued and on the wire (the link went down); returns how many
        frames."""
        return _mod.lib.mrc_eq_flush(self.ptr)

    # --- C only ---------------------------------------------------------------------------

    def send(self, fd: int, now_ns: int) -> tuple[int, int, int, int, int]:
        """dequeue(now_ns, SEND_BATCH) + sendmmsg on fd, repeated while a batch is full and
        fully sent: (dequeued, sent, failed, errno of the last failure, bytes sent). A
        frame the kernel refused is gone all the same (fd < 0: every frame fails, EBADF)."""
        io = self._io
        n = self._send(self.ptr, fd, now_ns, io)
        if n < 0:
            raise RuntimeError(f"mrc_eq_send: error {n}")
        return n, io[0], io[1], io[2], io[3]


def new_in_bytes(n_ports: int, *, c: bool | None = None):
    """The per in-port lossless byte counters a switch's queues share: a C ``int64_t``
    array for C queues (``c`` None: whenever the C module is in use), else a list."""
    if c if c is not None else _mod is not None:
        return _mod.ffi.new("int64_t[]", n_ports)
    return [0] * n_ports


def new_flags(n_ports: int, *, c: bool | None = None):
    """Per-port 0/1 flags the C loop reads (PFC's XOFF states): ``int32_t`` array or list."""
    if c if c is not None else _mod is not None:
        return _mod.ffi.new("int32_t[]", n_ports)
    return [0] * n_ports


def make_egress_queue(
    cfg: PortConfig, lblen: int, now_ns: int, max_frame_bytes: int,
    lossless: LosslessClass | None = None, in_bytes=None,
) -> CEgressQueue | EgressQueue:  # fmt: skip
    """The C queue when the C module is in use, else the Python twin (also for bounds the C
    queue does not take: a buffer above 512 MiB, frames above 1 MiB). ``in_bytes``: from
    :func:`new_in_bytes` (a list makes it the twin)."""
    if (
        _mod is not None
        and not isinstance(in_bytes, list)
        and _mod.lib.mrc_eq_mem_bytes(cfg.buffer_bytes, cfg.high_buffer_bytes, max_frame_bytes)
        and (lossless is None
             or _mod.lib.mrc_eq_lossless_mem_bytes(lossless.buffer_bytes, max_frame_bytes))
    ):  # fmt: skip
        return CEgressQueue(
            cfg, lblen, now_ns, max_frame_bytes=max_frame_bytes, lossless=lossless,
            in_bytes=in_bytes,
        )  # fmt: skip
    return EgressQueue(cfg, lblen, now_ns, lossless, in_bytes, max_frame_bytes)

"""The ports' pacers served in C, all ports in one call (``csrc/mrc_pace.c``).

With the C engines, what a NIC sends waits in the ports' C queues (``mrcnic.transport.
port_queues``), and on most pumps no port holds a Python frame. Serving eight pacers one by
one in Python (a length, a take, a send and a due time each) was the larger part of a pump's
cost at the lab's rates, where a NIC pumps once or twice per frame (docs/design/core.md,
"The pacers in C"). :class:`CPacers` serves them in C instead while no pacer holds a Python
frame; :class:`mrcnic.io.pacing.PortPacer` stays the twin, and keeps its token bucket in the
same C struct, so the two serve a port by turns without copying anything.

Each port's counters of what C sent add to its :class:`mrcnic.io.aio.NicPort` counters.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from mrcnic.io.pacing import Bucket, PortPacer
from mrcnic.transport.rx_engine import c_module


class CPacers:
    """The C side of ``pacers`` (each with its C queues attached): ``room``, ``serve`` and
    ``next_due`` are the I/O shell's per-port loops, for the C queues only. Make it with
    :meth:`make` (None without the C module); :meth:`detach` gives the buckets back to
    Python before the C memory goes.

    Ownership: the ports' structs (``arr``) belong to this object, which the pacers
    (``PortPacer._b_owner``) and the shell keep alive; the structs point into the C queues,
    which ``queues`` keeps alive (a pacer drops its queues when the shell closes)."""

    __slots__ = ("pacers", "queues", "arr", "ps", "room", "serve", "_next", "_at")

    def __init__(self, pacers: Sequence[PortPacer], module: Any) -> None:
        ffi, lib = module.ffi, module.lib
        n = len(pacers)
        self.pacers = list(pacers)
        self.queues = [(p.cq, p.chq) for p in pacers]
        self.arr = ffi.new("struct mrc_pace_port[]", n)
        self.ps = ffi.new("struct mrc_pace *", {"port": self.arr, "n": n})
        for i, p in enumerate(pacers):
            c = self.arr[i]
            p.move_bucket(c, owner=self)
            c.chq, c.cq = p.chq.q, p.cq.q  # (make() takes only pacers with both)
            c.data_limit = p.data_limit
            c.fd = -1
        # bound C functions (partial: no Python frame per call on the pump's path)
        #: room(): 1 every live port's C data queue has room, 0 one is full, -1 none is live
        self.room = partial(lib.mrc_pace_room, self.ps)
        #: serve(now_s): let each port's C queues go as its tokens allow, and send them;
        #: how many ports still hold data frames (``errors()``: did a send fail)
        self.serve = partial(lib.mrc_pace_serve, self.ps)
        self._at = ffi.new("double[1]")
        self._next = partial(lib.mrc_pace_next, self.ps)

    @classmethod
    def make(cls, pacers: Sequence[PortPacer]) -> CPacers | None:
        m = c_module()
        if m is None or any(p.cq is None or p.chq is None for p in pacers):
            return None
        return cls(pacers, m)

    def port(self, i: int) -> Any:
        """Port ``i``'s struct: ``fd``, ``up``, counters, ``netdown``, ``last_errno``."""
        return self.arr[i]

    def next_due(self, now_s: float, tick_s: float) -> float | None:
        """When a port next may send (a port with only data: not before ``now_s + tick_s``);
        None when every C queue is empty."""
        at = self._at
        return at[0] if self._next(now_s, tick_s, at) else None

    def errors(self) -> int:
        """Failed sends and drops since the last call (then zero)."""
        ps = self.ps
        n = ps.errs
        if n:
            ps.errs = 0
        return n

    def detach(self) -> None:
        """Give every pacer its bucket back as a Python :class:`Bucket`."""
        for p in self.pacers:
            if p._b_owner is self:
                p.move_bucket(Bucket())

"""The C send engines' output (``struct mrc_txe_out``): the slots a send call builds data
frames in, or the ports' C queues it writes into instead. One per frame size per device
(``RxEngines.frames_out``): a send call hands its frames over before it returns."""

from __future__ import annotations

from typing import Any

OUT_FRAMES = 64  # data frames per mrc_txe_send call before the shell drains them


class FramesOut:
    """A send engine's data output (``struct mrc_txe_out``): OUT_FRAMES slots the shell takes
    back as bytes, or, when the I/O shell has them, the ports' C queues. ``alloc(ctype, n)``
    makes its arrays."""

    def __init__(self, ffi: Any, mtu: int, alloc: Any) -> None:
        self._ffi = ffi
        self.slot_len = slot = (mtu + 112 + 63) & ~63  # (headers and extensions: 112 at most)
        self.buf = alloc("uint8_t[]", OUT_FRAMES * slot)
        self.lens = alloc("uint32_t[]", OUT_FRAMES)
        self.planes = alloc("uint8_t[]", OUT_FRAMES)
        self.out = ffi.new(
            "struct mrc_txe_out *",
            {"buf": self.buf, "slot_len": slot, "cap": OUT_FRAMES, "n": 0, "len": self.lens,
             "plane": self.planes},
        )  # fmt: skip
        self.view = ffi.buffer(self.buf)

    def aim(self, pq: Any, planes: int, queues_ok: bool = True) -> Any:
        """The output for the next send: straight into the ports' queues ``pq`` when there are
        as many as ``planes``, their slots hold a frame and ``queues_ok``; else the slots."""
        o = self.out
        if queues_ok and pq is not None and pq.slot_len >= self.slot_len and pq.n == planes:
            o.ports, o.n_ports = pq.array, pq.n
        else:
            o.ports, o.n_ports = self._ffi.NULL, 0
        return o

    def take(self, frames: list[tuple[int, Any]]) -> None:
        """Append the frames in the slots to ``frames`` as ``(port, bytes)``."""
        view, slot, lens, planes = self.view, self.slot_len, self.lens, self.planes
        for i in range(self.out.n):
            off = i * slot
            frames.append((planes[i], view[off : off + lens[i]]))


__all__ = ["OUT_FRAMES", "FramesOut"]

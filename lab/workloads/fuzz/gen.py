"""Frame generators for ``make fuzz`` (lab/workloads/fuzz/run.py): hostile frames that know the formats.

A :class:`Forge` starts from real frames of a live exchange (captured data frames, SACKs,
NACKs...: their addresses, QP numbers, R_Keys and PSNs are the live ones) and makes, per
call, one frame of a kind chosen at random:

- ``random_bytes``: any length, any content;
- ``truncated``: a captured frame cut short;
- ``lying_length``: the IPv6 payload length or the UDP length claims another size;
- ``any_opcode``: every opcode 0-255 with random header fields and a valid ICRC;
- ``control``: SACK, ACK, NACK, RPROBE and endpoint (PORT_STATUS) messages with random and
  near-live PSNs, bitmaps, reasons and port masks, valid ICRC;
- ``data``: write packets with random or stolen R_Keys, VAs in and out of the region, lengths,
  PSNs in and out of the window, MSNs, immediates, trimmed and CE-marked, valid ICRC;
- ``replay``: a captured frame again, byte for byte;
- ``bitflip``: a captured frame with a few bits flipped (ICRC left as it was).

Each frame keeps the captured source address (the peer's: a spoofing host) three times in
four, else a random one, so the generators reach the checks behind the address check too.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections import deque
from collections.abc import Sequence

from mrcnic.wire import layout

OFF_BTH = layout.OFF_BTH
OFF_UDP = layout.OFF_UDP
OFF_SRC = layout.OFF_SRC
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_U64 = struct.Struct("!Q")
MAX_FRAME = 9100  # a little above the lab's MTU 9000 + Ethernet: too-long frames too

_O = layout.Opcode
DATA_OPS = sorted(int(o) for o in layout.MRC_DATA_OPS)
CONTROL_BODY = {  # opcode -> body bytes after BTH
    int(_O.ACK): layout.SACK_SIZE,
    int(_O.SACK): layout.SACK_SIZE,
    int(_O.NACK): layout.NACK_SIZE,
    int(_O.RPROBE): layout.RPROBE_SIZE,
    int(_O.EP_REQUEST): layout.ENDPOINT_SIZE,
    int(_O.EP_RESPONSE): layout.ENDPOINT_SIZE,
}
KINDS = (
    "random_bytes",
    "truncated",
    "lying_length",
    "any_opcode",
    "control",
    "data",
    "replay",
    "bitflip",
)
# how often each kind is drawn: the structured kinds, which reach deepest, most often
WEIGHTS = (1, 1, 1, 2, 3, 4, 1, 1)


def fix_icrc(f: bytearray) -> None:
    """The ICRC over BTH..end-4 of a frame whose IPv6 payload length is right."""
    end = OFF_UDP + _U16.unpack_from(f, layout.OFF_PAYLOAD_LENGTH)[0]
    if OFF_BTH + 4 <= end <= len(f):
        _U32.pack_into(f, end - 4, zlib.crc32(memoryview(f)[OFF_BTH : end - 4]))


def with_mrc(template: bytes, mrc: bytes) -> bytearray:
    """``template``'s Ethernet, IPv6 and UDP headers around another MRC part (lengths set)."""
    f = bytearray(template[:OFF_BTH]) + mrc
    n = len(f) - OFF_UDP
    _U16.pack_into(f, layout.OFF_PAYLOAD_LENGTH, n)
    _U16.pack_into(f, layout.OFF_UDP_LENGTH, n)
    return f


class Forge:
    """Hostile frames from captured ones (``captured``: a few real frames, data and control,
    all addressed to the target).  ``rkeys`` and ``regions`` ((va, length) pairs) are what a
    thief would have stolen; ``seed`` makes a run reproducible."""

    def __init__(
        self,
        captured: Sequence[bytes],
        *,
        seed: int,
        rkeys: Sequence[int] = (),
        regions: Sequence[tuple[int, int]] = (),
    ) -> None:
        if not captured:
            raise ValueError("a forge needs at least one captured frame to start from")
        self.rng = random.Random(seed)
        self.captured = [bytes(f) for f in captured if len(f) > OFF_BTH + 12]
        if not self.captured:
            raise ValueError("no captured frame is long enough to carry a BTH")
        self.rkeys = list(rkeys)
        self.regions = list(regions)
        self.counts = dict.fromkeys(KINDS, 0)
        # the latest PSNs the target sent: what it may still be waiting on
        self.sent_psns: deque[int] = deque(maxlen=16)

    def learn(self, frame: bytes) -> None:
        """Keep a recent real frame (a bounded reservoir: live PSNs stay near)."""
        if len(frame) <= OFF_BTH + 12:
            return
        if len(self.captured) < 64:
            self.captured.append(bytes(frame))
        else:
            self.captured[self.rng.randrange(64)] = bytes(frame)

    def renew(self, captured: Sequence[bytes], sent: Sequence[bytes] = ()) -> None:
        """Start over from new real frames (new QPs): ``captured`` to the target, ``sent``
        by it (their PSNs are hints)."""
        fresh = [bytes(f) for f in captured if len(f) > OFF_BTH + 12]
        if fresh:
            self.captured = fresh
        self.sent_psns.clear()
        for f in sent:
            self.hint(f)

    def hint(self, frame: bytes) -> None:
        """A frame the target sent: its PSN is one the target may be waiting on."""
        if len(frame) <= OFF_BTH + 12:
            return
        if frame[OFF_BTH] in layout.MRC_DATA_OPS:
            self.sent_psns.append(_U32.unpack_from(frame, OFF_BTH + 8)[0] & layout.PSN_MASK)

    def frames(self, n: int) -> list[bytes]:
        kinds = self.rng.choices(KINDS, WEIGHTS, k=n)
        out = []
        for k in kinds:
            self.counts[k] += 1
            out.append(bytes(getattr(self, k)()))
        return out

    # -- helpers ---------------------------------------------------------------------------

    def _template(self) -> bytearray:
        f = bytearray(self.rng.choice(self.captured))
        if self.rng.random() < 0.25:  # not the peer's address: a third host
            f[OFF_SRC + self.rng.randrange(16)] ^= 1 << self.rng.randrange(8)
        return f

    def _live_psn(self) -> int:
        if self.sent_psns and self.rng.random() < 0.5:
            return self.rng.choice(self.sent_psns)
        f = self.rng.choice(self.captured)
        return _U32.unpack_from(f, OFF_BTH + 8)[0] & layout.PSN_MASK

    def _psn(self) -> int:
        r = self.rng.random()
        if r < 0.3 and self.sent_psns:  # exactly one the target may be waiting on
            return self.rng.choice(self.sent_psns)
        if r < 0.6:  # near what flows: in the window, just behind it, just beyond it
            return (self._live_psn() + self.rng.randint(-300, 3000)) & layout.PSN_MASK
        if r < 0.8:
            return (self._live_psn() + self.rng.choice((-1, 1)) * (1 << 23)) & layout.PSN_MASK
        return self.rng.getrandbits(24)

    def _bth(self, f: bytearray, op: int) -> None:
        f[OFF_BTH] = op
        if self.rng.random() < 0.1:
            f[OFF_BTH + 5 : OFF_BTH + 8] = self.rng.randbytes(3)  # another QP number
        flags_psn = (self.rng.getrandbits(8) << 24) | self._psn()
        _U32.pack_into(f, OFF_BTH + 8, flags_psn)

    # -- the kinds -----------------------------------------------------------------------------

    def random_bytes(self) -> bytes:
        return self.rng.randbytes(self.rng.randint(0, MAX_FRAME))

    def truncated(self) -> bytes:
        f = self.rng.choice(self.captured)
        return f[: self.rng.randrange(len(f))]

    def lying_length(self) -> bytearray:
        f = self._template()
        which = self.rng.random()
        if which < 0.5:
            _U16.pack_into(f, layout.OFF_PAYLOAD_LENGTH, self.rng.getrandbits(16))
        elif which < 0.8:
            _U16.pack_into(f, layout.OFF_UDP_LENGTH, self.rng.getrandbits(16))
        else:
            _U16.pack_into(f, layout.OFF_PAYLOAD_LENGTH, self.rng.randint(0, 60))
        if self.rng.random() < 0.5:
            fix_icrc(f)
        return f

    def any_opcode(self) -> bytearray:
        body = self.rng.randbytes(self.rng.choice((0, 4, 12, 20, 24, 40, 44, 100, 1000)))
        f = with_mrc(self._template(), bytes(12) + body + bytes(4))
        f[OFF_BTH : OFF_BTH + 12] = self.rng.randbytes(12)
        self._bth(f, self.rng.randrange(256))
        fix_icrc(f)
        return f

    def control(self) -> bytearray:
        op = self.rng.choice(list(CONTROL_BODY))
        body = bytearray(self.rng.randbytes(CONTROL_BODY[op]))
        rng = self.rng
        if op in (_O.ACK, _O.SACK) and rng.random() < 0.7:
            # mark 0-2, a cumulative ack near the live PSNs, any bitmap and offset
            _U32.pack_into(body, 0, rng.randrange(3) << 30 | self._psn())
        elif op == _O.NACK and rng.random() < 0.7:
            _U32.pack_into(body, 0, rng.randint(0, 8) << 24 | self._psn())
            _U32.pack_into(body, 8, self._psn())
        elif op in (_O.EP_REQUEST, _O.EP_RESPONSE) and rng.random() < 0.7:
            body[0] = rng.choice((1, 2, rng.randrange(256)))  # PORT_STATUS, EV_PROBE, other
        f = with_mrc(self._template(), bytes(12) + bytes(body) + bytes(4))
        f[OFF_BTH : OFF_BTH + 12] = self.rng.choice(self.captured)[OFF_BTH : OFF_BTH + 12]
        self._bth(f, op)
        fix_icrc(f)
        return f

    def data(self) -> bytearray:
        rng = self.rng
        op = rng.choice(DATA_OPS)
        imm = op in layout.MRC_IMM_OPS
        payload = rng.randbytes(rng.choice((0, 1, 64, 1024, 4096, 8000)))
        hdr = bytearray(rng.randbytes(40 + (4 if imm else 0)))
        f = with_mrc(self._template(), bytes(hdr) + payload + bytes(4))
        base = OFF_BTH
        f[base : base + 12] = rng.choice(self.captured)[base : base + 12]
        self._bth(f, op)
        # the header bytes below are laid out with the timestamp extension: say it is there
        # (the BTH may come from a control frame), but now and then leave a frame without it
        if rng.random() < 0.9:
            f[base + 4] |= layout.BTH_FLAG_TS
        else:
            f[base + 4] &= ~layout.BTH_FLAG_TS & 0xFF
        r = rng.random()
        if r < 0.4 and self.rkeys:  # a stolen key
            _U32.pack_into(f, base + 32, rng.choice(self.rkeys))
        elif r < 0.6:
            _U32.pack_into(f, base + 32, 0)
        if rng.random() < 0.6 and self.regions:
            va, length = rng.choice(self.regions)
            off = rng.choice((0, rng.randrange(length), length - 1, length, -1, -(1 << 20)))
            _U64.pack_into(f, base + 24, (va + off) & (1 << 64) - 1)
        msn = rng.choice((0, 1, rng.getrandbits(16)))
        _U16.pack_into(f, base + 12, msn)
        _U32.pack_into(f, base + 36, rng.choice((len(payload), 0, rng.getrandbits(32))))
        if rng.random() < 0.15:  # trimmed (header only, no ICRC) or CE-marked
            tc = rng.choice((int(layout.Dscp.TRIMMED), int(layout.Dscp.TRIMMED_LASTHOP)))
            w0 = _U32.unpack_from(f, layout.OFF_IPV6)[0]
            w0 = (w0 & ~(0x3F << layout.DSCP_SHIFT)) | tc << layout.DSCP_SHIFT
            _U32.pack_into(f, layout.OFF_IPV6, w0)
            f = with_mrc(bytes(f), bytes(f[OFF_BTH : OFF_BTH + len(hdr)]))
            return f
        if rng.random() < 0.15:
            f[layout.OFF_TC_LO] |= layout.TC_LO_ECN_MASK
        fix_icrc(f)
        return f

    def replay(self) -> bytes:
        return self.rng.choice(self.captured)

    def bitflip(self) -> bytearray:
        f = bytearray(self.rng.choice(self.captured))
        for _ in range(self.rng.randint(1, 8)):
            f[self.rng.randrange(len(f))] ^= 1 << self.rng.randrange(8)
        return f

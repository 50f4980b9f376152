"""Priority flow control in the whole-fabric simulator: RoCEv2 as deployed (``mrc-sim
--pfc``; the lab's PFC is ``mrcswitch.pfc``, docs/design/pfc.md).

The lossless class is the frames of DSCP LOSSLESS (RoCEv2's data when ``RoceConfig.lossless``
is set; MRC never sends it).  The model, per switch in-port (:class:`Ingress`):

- the in-port counts the lossless bytes that came in through it and still wait in any of its
  switch's egress queues (the lab's ingress, shared-buffer accounting);
- above ``xoff_bytes`` it sends a PAUSE for the full ``pause_quanta`` to its upstream
  transmitter (the upstream switch's egress link, or the sending host's NIC port), and sends
  it again at half of that time while still above XON; at or below ``xon_bytes`` it sends the
  resume.  A PFC frame reaches the upstream after its own serialisation, the link's
  propagation and the upstream's reaction time (:data:`REACTION_S`, silicon's);
- a paused transmitter (:class:`Paused`) finishes the frame it is sending and then serves no
  lossless frame until the resume arrives or the pause runs out; its other classes keep
  flowing.  Pauses spread hop by hop: a paused link's queue grows, its own in-port crosses
  XOFF, and so on back to the senders' NICs;
- a lossless frame that would take its in-port above ``xoff_bytes + headroom_bytes`` is
  dropped and counted (``lossless_drops``); with the headroom sized as the lab sizes it
  (:meth:`PfcSpec.derive`) that stays 0.  Lossless frames are never trimmed, and their
  egress class has no other bound (the lab's: only the per-in-port bound refuses a frame);
- lossless frames are marked CE above a port's ECN threshold of lossless bytes queued, on
  every hop including the last (DCQCN's marks, the lab's ``pfc.ecn``).

An egress link under PFC (:class:`PfcLink`) is an event-driven queue of three classes served
in strict priority, non-preemptively: high (control, trimmed headers), lossless, then lossy
data (trimmed or dropped over ``queue_bytes`` and ECN-marked as :class:`fabric.Link` does).
A host's NIC port (:class:`PfcHostPort`) keeps its lossless frames in a queue of their own
that a pause holds; control frames still go first.  Hosts never send PAUSE (as in the lab).

Left out (docs/sim.md): the watchdog (no storm scenario here), PFC frames' own place in the
reverse link's queue (they go at once), other priorities, and deadlock (up-down routing on a
two-tier Clos has no cyclic buffer dependency).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from functools import partial
from heapq import heappush
from typing import TYPE_CHECKING, Any

from mrcnic.wire import layout
from mrcnic.wire import pfc as wire_pfc
from mrcnic.wire.trim import TrimRule, overflows

from .fabric import HostPort

if TYPE_CHECKING:
    from .fabric import EventLoop, LinkSpec

LOSSLESS_DSCP = int(layout.Dscp.LOSSLESS)
_HIGH = layout.HIGH_PRIORITY_DSCPS
_OFF_TC_HI, _OFF_TC_LO = layout.OFF_TC_HI, layout.OFF_TC_LO
_DSCP_HI, _ECN_BITS = layout.TC_HI_DSCP_MASK, layout.TC_LO_ECN_MASK
#: a PFC frame on the wire: 60 bytes and the FCS
PAUSE_FRAME_BYTES = layout.MIN_FRAME_BYTES + 4
#: how long a transmitter takes to act on a PAUSE that reached it: silicon's (docs/design/pfc.md),
#: not the lab's software loop's
REACTION_S = 1e-6


def _dscp(frame: bytes) -> int:
    return (frame[_OFF_TC_HI] & _DSCP_HI) << 2 | frame[_OFF_TC_LO] >> 6


@dataclass(frozen=True, slots=True)
class PfcSpec:
    """A fabric's lossless class: per in-port thresholds (bytes), the pause asked for."""

    xoff_bytes: int
    xon_bytes: int
    headroom_bytes: int
    pause_quanta: int = wire_pfc.MAX_QUANTA
    reaction_s: float = REACTION_S

    @classmethod
    def derive(
        cls, buffer_bytes: int, frame_bytes: int, rate_bps: float, one_way_s: float
    ) -> PfcSpec:
        """As the lab derives its switches' (``lab.fabric.pyswitch.pfc_config``): XOFF at half
        the port buffer (at least four full frames), XON at half of XOFF, headroom for a round
        trip of the longest link and the reaction time at the fastest rate, plus a frame at
        each end (no token-bucket burst: the simulator's links have none)."""
        xoff, xon = wire_pfc.xoff_xon_bytes(buffer_bytes, frame_bytes)
        head = wire_pfc.headroom_bytes(rate_bps, REACTION_S, one_way_s, frame_bytes)
        return cls(xoff, xon, head)

    def check(self) -> None:
        if not 0 < self.xon_bytes < self.xoff_bytes:
            raise ValueError("pfc: need 0 < xon_bytes < xoff_bytes")
        if self.headroom_bytes <= 0:
            raise ValueError("pfc: headroom_bytes must be > 0")


class Paused:
    """A transmitter's pause of its lossless class, from the PFC frames that reach it: until
    the resume, or until the pause asked for runs out.  ``pause_rx`` counts the frames
    (pauses, refreshes, resumes), ``paused_s`` the time spent paused."""

    __slots__ = ("loop", "pause_rx", "paused_s", "paused_until", "since", "kick")

    def __init__(self, loop: EventLoop, kick: Any) -> None:
        self.loop = loop
        self.kick = kick  # serve the transmitter's queue (when it is idle) once released
        self.pause_rx = 0
        self.paused_s = 0.0
        self.paused_until = 0.0
        self.since: float | None = None  # start of the pause in force, None: not paused

    def pause(self, until_s: float) -> None:
        now = self.loop.now
        self.pause_rx += 1
        if self.since is None:
            self.since = now
        self.paused_until = until_s
        self.loop.at(until_s, self._expire)

    def resume(self) -> None:
        self.pause_rx += 1
        self._end(self.loop.now)

    def _expire(self) -> None:
        if self.since is not None and self.paused_until <= self.loop.now:
            self._end(self.loop.now)  # not refreshed: it ran out

    def _end(self, now: float) -> None:
        if self.since is None:
            return
        self.paused_s += now - self.since
        self.since = None
        self.kick(now)

    def total_s(self, now: float) -> float:
        """Time paused until ``now``, the pause in force included."""
        return self.paused_s + (now - self.since if self.since is not None else 0.0)


class Ingress:
    """One switch in-port: the lossless bytes that came in through it and wait in its
    switch's egress queues, and the pause it asks of ``upstream`` (module doc)."""

    __slots__ = (
        "spec",
        "loop",
        "upstream",
        "delay_s",
        "pause_s",
        "queued_bytes",
        "xoff",
        "pause_tx",
        "resume_tx",
        "lossless_drops",
        "_gen",
    )

    def __init__(
        self, spec: PfcSpec, loop: EventLoop, upstream: Paused, rate_bps: float, prop_s: float
    ) -> None:
        self.spec = spec
        self.loop = loop
        self.upstream = upstream
        # a PFC frame acts this long after it is sent: its bits, the wire, the reaction
        self.delay_s = PAUSE_FRAME_BYTES * 8 / rate_bps + prop_s + spec.reaction_s
        self.pause_s = wire_pfc.pause_s(spec.pause_quanta, rate_bps)
        self.queued_bytes = 0
        self.xoff = False
        self.pause_tx = 0  # PAUSE frames sent, refreshes included
        self.resume_tx = 0
        self.lossless_drops = 0
        self._gen = 0  # bumped at every XOFF/XON change: stale refreshes do nothing

    def admit(self, nbytes: int) -> bool:
        """A lossless frame that came in here wants an egress queue: False (a lossless drop)
        if even the headroom is full."""
        q = self.queued_bytes + nbytes
        spec = self.spec
        if q > spec.xoff_bytes + spec.headroom_bytes:
            self.lossless_drops += 1
            return False
        self.queued_bytes = q
        if q > spec.xoff_bytes and not self.xoff:
            self.xoff = True
            self._gen += 1
            self._send_pause(self._gen)
        return True

    def left(self, nbytes: int) -> None:
        """A lossless frame that came in here left its egress queue."""
        self.queued_bytes -= nbytes
        if self.xoff and self.queued_bytes <= self.spec.xon_bytes:
            self.xoff = False
            self._gen += 1
            self.resume_tx += 1
            self.loop.at(self.loop.now + self.delay_s, self.upstream.resume)

    def _send_pause(self, gen: int) -> None:
        if gen != self._gen:
            return  # resumed since (and maybe paused again: that pause refreshes itself)
        loop = self.loop
        now = loop.now
        self.pause_tx += 1
        at = now + self.delay_s
        loop.at(at, partial(self.upstream.pause, at + self.pause_s))
        loop.at(now + self.pause_s / 2, partial(self._send_pause, gen))  # ask again at half


class Hop:
    """One stage of a frame's route under PFC: the egress link it joins and the in-port it
    came in through.  ``transmit`` is what :meth:`EventLoop.run` calls on a stage; the link
    then puts the frame on ``stages[index + 1]`` itself when it has sent it."""

    __slots__ = ("link", "ingress", "stages", "index", "dst", "port")

    def __init__(self, link: PfcLink, ingress: Ingress, index: int, dst: int, port: int) -> None:
        self.link = link
        self.ingress = ingress
        self.stages: tuple[Hop, ...] = ()  # set once the route's tuple exists
        self.index = index
        self.dst = dst
        self.port = port

    def transmit(self, t: float, frame: bytes, rng: random.Random) -> None:
        self.link.enqueue(t, frame, rng, self)


def route(hops: list[Hop]) -> tuple[Hop, ...]:
    stages = tuple(hops)
    for h in stages:
        h.stages = stages
    return stages


_Entry = tuple[bytes, Hop]


class PfcLink:
    """A switch's egress link with a lossless class (module doc): counters as
    :class:`fabric.Link`'s, ``pfc`` its :class:`Paused`, ``far`` the :class:`Ingress` at its
    far end (None into a host: hosts never pause)."""

    __slots__ = (
        "name",
        "spec",
        "bytes_per_s",
        "up",
        "tx_packets",
        "tx_bytes",
        "drops",
        "trims",
        "marks",
        "losses",
        "max_backlog",
        "loss",
        "lossless_ecn_bytes",
        "high",
        "lossless",
        "data",
        "lossy_bytes",
        "lossless_bytes",
        "busy",
        "pfc",
        "far",
        "_trim",
        "_loop",
    )

    def __init__(
        self, name: str, spec: LinkSpec, loop: EventLoop, lossless_ecn_bytes: int | None
    ) -> None:
        self.name = name
        self.spec = spec
        self.bytes_per_s = spec.rate_bps / 8.0
        self.up = True
        self.tx_packets = self.drops = self.trims = self.marks = self.losses = 0
        self.tx_bytes = 0
        self.max_backlog = 0
        self.loss = spec.loss
        self.lossless_ecn_bytes = lossless_ecn_bytes  # the lab marks lossless on every hop
        self.high: deque[_Entry] = deque()
        self.lossless: deque[_Entry] = deque()
        self.data: deque[_Entry] = deque()
        self.lossy_bytes = 0  # high and data bytes queued (the lossy buffer)
        self.lossless_bytes = 0
        self.busy = False
        self.pfc = Paused(loop, self._kick)
        self.far: Ingress | None = None
        self._trim = TrimRule(spec.trim, spec.last_hop)
        self._loop = loop

    def enqueue(self, t: float, frame: bytes, rng: random.Random, hop: Hop) -> None:
        if not self.up:
            self.drops += 1
            return
        if self.loss and rng.random() < self.loss:
            self.losses += 1
            return
        n = len(frame)
        dscp = _dscp(frame)
        if dscp == LOSSLESS_DSCP:
            if not hop.ingress.admit(n):
                self.drops += 1
                return
            ecn = self.lossless_ecn_bytes
            if ecn is not None and self.lossless_bytes > ecn and frame[_OFF_TC_LO] & _ECN_BITS:
                frame = self._mark(frame)
            self.lossless.append((frame, hop))
            self.lossless_bytes += n
        else:
            high = dscp in _HIGH
            spec = self.spec
            if not high:
                cap = spec.queue_bytes
                if cap is not None and overflows(self.lossy_bytes, n, cap):
                    trimmed = self._trim.overflow(frame)
                    if trimmed is None:
                        self.drops += 1
                        return
                    frame, n, high = trimmed, len(trimmed), True
                    self.trims += 1
                elif (
                    spec.ecn_bytes is not None
                    and self.lossy_bytes > spec.ecn_bytes
                    and frame[_OFF_TC_LO] & _ECN_BITS
                ):
                    frame = self._mark(frame)
            (self.high if high else self.data).append((frame, hop))
            self.lossy_bytes += n
        backlog = self.lossy_bytes + self.lossless_bytes
        if backlog > self.max_backlog:
            self.max_backlog = backlog
        if not self.busy:
            self._serve(t)

    def _mark(self, frame: bytes) -> bytes:
        self.marks += 1
        b = bytearray(frame)
        layout.set_ce(b)
        return bytes(b)

    def _serve(self, t: float) -> None:
        if self.high:
            frame, hop = self.high.popleft()
            self.lossy_bytes -= len(frame)
        elif self.lossless and self.pfc.since is None:
            frame, hop = self.lossless.popleft()
            self.lossless_bytes -= len(frame)
            hop.ingress.left(len(frame))
        elif self.data:
            frame, hop = self.data.popleft()
            self.lossy_bytes -= len(frame)
        else:
            self.busy = False
            return
        self.busy = True
        self.tx_packets += 1
        self.tx_bytes += len(frame)
        done = t + len(frame) / self.bytes_per_s
        loop = self._loop
        loop._seq += 1
        heappush(
            loop._heap,
            (done + self.spec.prop_s, loop._seq, hop.stages, hop.index + 1,
             (hop.dst, hop.port, frame)),
        )  # fmt: skip
        loop.at(done, self._done)

    def _done(self) -> None:
        self._serve(self._loop.now)

    def _kick(self, now: float) -> None:
        if not self.busy:
            self._serve(now)


class PfcHostPort(HostPort):
    """A host's NIC port that honours PAUSE (the lab's ``mrcnic.io.pfc`` at the pacer): its
    lossless frames wait in a queue of their own, served after control frames and before
    other data, and held while paused; ``far`` is the :class:`Ingress` at its T0."""

    __slots__ = ("lossless", "pfc", "far")

    def __init__(self, name: str, rate_bps: float, fabric: EventLoop) -> None:
        super().__init__(name, rate_bps, fabric)
        self.lossless: deque[tuple[bytes, tuple, int, int]] = deque()
        self.pfc = Paused(fabric, self._kick)
        self.far: Ingress | None = None

    def enqueue(self, t: float, frame: bytes, stages: tuple, dst: int, port: int) -> None:
        if not self.up:
            self.drops += 1
            return
        dscp = _dscp(frame)
        q = self.high if dscp in _HIGH else self.lossless if dscp == LOSSLESS_DSCP else self.data
        q.append((frame, stages, dst, port))
        self.backlog += len(frame)  # here: every byte queued, none in service
        if self.backlog > self.max_backlog:
            self.max_backlog = self.backlog
        if not self.busy:
            self._serve(t)

    def set_up(self, up: bool) -> None:
        self.up = up
        if not up:
            self.drops += len(self.high) + len(self.lossless) + len(self.data)
            for q in (self.high, self.lossless, self.data):
                q.clear()
            self.backlog = 0

    def _serve(self, t: float) -> None:
        if self.high:
            q = self.high
        elif self.lossless and self.pfc.since is None:
            q = self.lossless
        elif self.data:
            q = self.data
        else:
            self.busy = False
            return
        frame, stages, dst, port = q.popleft()
        self.backlog -= len(frame)
        self.busy = True
        self.tx_packets += 1
        if self.on_depart is not None:
            self.on_depart(t, frame)
        done = t + len(frame) / self.bytes_per_s
        fab = self._fabric
        fab._seq += 1
        heappush(fab._heap, (done, fab._seq, stages, 0, (dst, port, frame)))
        fab.at(done, self._done)

    def _kick(self, now: float) -> None:
        if not self.busy:
            self._serve(now)


Transmitter = PfcHostPort | PfcLink


def attach(spec: PfcSpec, loop: EventLoop, upstream: Transmitter, prop_s: float) -> Ingress:
    """The in-port at ``upstream``'s far end (a switch), which pauses ``upstream``."""
    ing = Ingress(spec, loop, upstream.pfc, upstream.bytes_per_s * 8, prop_s)
    upstream.far = ing
    return ing


def counters(transmitters: list[Transmitter], now: float) -> dict[str, Any]:
    """The run's PFC keys: ``pfc`` (true), ``pfc_pauses`` (PAUSE frames the switches sent,
    refreshes included), ``pfc_resumes``, ``pfc_paused_s`` (the transmitters' paused time,
    summed), ``pfc_paused_nic_s`` (its share on the hosts' NIC ports), ``pfc_lossless_drops``
    (0 while the headroom holds), ``pfc_paused_links`` (each transmitter ever paused:
    ``name``, ``pause_rx``, ``paused_s``)."""
    ings = [x.far for x in transmitters if x.far is not None]
    paused = [x for x in transmitters if x.pfc.pause_rx]
    return {
        "pfc": True,
        "pfc_pauses": sum(i.pause_tx for i in ings),
        "pfc_resumes": sum(i.resume_tx for i in ings),
        "pfc_paused_s": round(sum(x.pfc.total_s(now) for x in paused), 9),
        "pfc_paused_nic_s": round(
            sum(x.pfc.total_s(now) for x in paused if isinstance(x, PfcHostPort)), 9
        ),
        "pfc_lossless_drops": sum(i.lossless_drops for i in ings),
        "pfc_paused_links": [
            {"name": x.name, "pause_rx": x.pfc.pause_rx, "paused_s": round(x.pfc.total_s(now), 9)}
            for x in paused
        ],
    }

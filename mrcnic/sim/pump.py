"""The one loop that drives sans-I/O endpoints over a virtual-time network.

An endpoint is anything with the sans-I/O surface of :class:`mrcnic.transport.qp.QueuePair`
(``frames_to_send(t)``, ``next_event()``, ``get_timer()``, ``handle_timer(t)``): a QP of
either transport, or a :class:`mrcnic.verbs.Device` holding several.  A network is anything
with ``now``, ``send(host, port, frame, t)`` and ``at(t, fn)``: the fabrics of
``mrcnic.sim.fabric`` and ``mrcnic.sim.incast``, or a test's chaos wire.

After anything happens to an endpoint (a frame arrived, a timer fired, a write was posted,
a port went down), :meth:`Pump.pump` hands its frames to the network, its events to the
owner's ``on_event`` and arms its next timer, once per distinct deadline: a timer that the
endpoint has since moved is ignored when it comes due.  Delivery (which endpoint a frame is
for, what to record on the way) stays with the owner, who calls ``pump`` after delivering.

``on_pumped(host, endpoint, t)``, when set, is called at the end of every pump: every change
of an endpoint's counters is followed by a pump at the virtual time it happened, so an
observer there sees each change at its time (:class:`mrcnic.sim.loss_clock.LossClock`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Network(Protocol):
    now: float

    def send(self, host: int, port: int, frame: bytes, t: float) -> None: ...

    def at(self, t: float, fn: Callable[[], None]) -> None: ...


# on_event(host, event, t): what the owner does with each event an endpoint reports
OnEvent = Callable[[int, Any, float], None]
# on_pumped(host, endpoint, t): after each pump, what an observer reads off the endpoint
OnPumped = Callable[[int, Any, float], None]


class Pump:
    """Moves frames, events and timers between endpoints and a network (module doc).

    With ``on_event`` None, events stay queued in the endpoint for its owner to poll (the
    verbs API's ``poll_cq``)."""

    def __init__(
        self,
        network: Network,
        on_event: OnEvent | None = None,
        on_pumped: OnPumped | None = None,
    ) -> None:
        self.network = network
        self.on_event = on_event
        self.on_pumped = on_pumped
        self._timers: dict[int, float] = {}  # id(endpoint) -> the deadline armed

    def receive(self, host: int, ep: Any, frame: bytes, t: float) -> None:
        """Hand ``frame`` to ``ep`` (on ``host``) at ``t``, then pump it."""
        ep.receive_frame(frame, t)
        self.pump(host, ep, t)

    def pump(self, host: int, ep: Any, t: float) -> None:
        """Send what ``ep`` (on ``host``) has to send at ``t``, report its events, arm its
        timer."""
        net = self.network
        for port, frame in ep.frames_to_send(t):
            net.send(host, port, frame, t)
        on_event = self.on_event
        if on_event is not None:
            while (e := ep.next_event()) is not None:
                on_event(host, e, t)
        nt = ep.get_timer()
        key = id(ep)
        if nt is not None and self._timers.get(key) != nt:
            self._timers[key] = nt

            def fire() -> None:
                if self._timers.get(key) != nt:
                    return  # superseded by a later pump
                del self._timers[key]
                now = net.now
                ep.handle_timer(now)
                self.pump(host, ep, now)

            net.at(max(nt, t), fire)
        if self.on_pumped is not None:
            self.on_pumped(host, ep, t)

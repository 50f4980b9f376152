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

When the network has ``gates`` (one ``mrcnic.sim.fabric.NicGate`` per host: the fabrics whose
NIC ports are ``HostPort`` s), the pump takes data as the I/O shell does: an endpoint's
control frames always, its data (``frames_to_send``) only while the host's ports have room;
otherwise the endpoint waits at the gate, its data unsent and untimed, until a port drains.

``on_pumped(host, endpoint, t)``, when set, is called at the end of every pump: every change
of an endpoint's counters is followed by a pump at the virtual time it happened, so an
observer there sees each change at its time (:class:`mrcnic.sim.loss_clock.LossClock`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from mrcnic.transport.qp_types import peek_dest_qp
from mrcnic.wire.layout import EV_PROBE_QPN


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
        # per host, the NIC's rule for taking data (None: every frame goes at once)
        self._gates: list[Any] | None = getattr(network, "gates", None)
        # a network that runs QPs' engines itself (mrcnic.sim.cfabric) hears of every pump
        # and brings a host's engine state up to date before a timer is handled
        self._after_pump: OnPumped | None = getattr(network, "after_pump", None)
        self._before_timer: Callable[[int], None] | None = getattr(network, "flush_engines", None)

    def receive(self, host: int, ep: Any, frame: bytes, t: float) -> None:
        """Hand ``frame`` to ``ep`` (on ``host``) at ``t``, then pump it."""
        ep.receive_frame(frame, t)
        self.pump(host, ep, t)

    def pump(self, host: int, ep: Any, t: float, timer_fired: bool = False) -> None:
        """Send what ``ep`` (on ``host``) has to send at ``t``, report its events, arm its
        timer (``timer_fired``: its timer was just handled)."""
        net = self.network
        gates = self._gates
        gate = gates[host] if gates is not None else None
        shut = False
        if gate is not None and gate.full:  # the host's ports are full: control only, the
            shut = True  # data waits in the endpoint (unsent, untimed) until one drains
            frames = ep.control_frames_to_send()
            gate.wait(id(ep), lambda now: self.pump(host, ep, now))
        else:
            frames = ep.frames_to_send(t)
        for port, frame in frames:
            net.send(host, port, frame, t)
        on_event = self.on_event
        if on_event is not None:
            while (e := ep.next_event()) is not None:
                on_event(host, e, t)
        nt = ep.get_timer()
        key = id(ep)
        # still due after it was handled: data waiting to be sent (a paced QP's next frame),
        # which the gate pumps when there is room; armed again, it would spin
        spin = shut and timer_fired and nt is not None and nt <= t
        if nt is not None and not spin and self._timers.get(key) != nt:
            self._timers[key] = nt

            def fire() -> None:
                if self._timers.get(key) != nt:
                    return  # superseded by a later pump
                del self._timers[key]
                now = net.now
                if self._before_timer is not None:
                    self._before_timer(host)
                ep.handle_timer(now)
                self.pump(host, ep, now, True)

            net.at(max(nt, t), fire)
        if self._after_pump is not None:
            self._after_pump(host, ep, t)
        if self.on_pumped is not None:
            self.on_pumped(host, ep, t)


def endpoint_for(
    endpoints: dict[int, Any], desk: Any, pump: Pump, host: int, frame: bytes, t: float
) -> Any | None:
    """The endpoint of ``endpoints`` (QP number -> endpoint on ``host``) a frame arriving at
    ``host`` is for, or None: an EV probe or its answer (QP 0x2) goes to the host's probe
    ``desk`` through ``pump`` here, anything else for no endpoint is dropped.  The simulators'
    delivery starts with it, then does its own receive and recording."""
    qpn = peek_dest_qp(frame)
    ep = endpoints.get(qpn) if qpn is not None else None
    if ep is None and qpn == EV_PROBE_QPN:  # the host's QP 0x2: EV probes and their answers
        pump.receive(host, desk, frame, t)
    return ep

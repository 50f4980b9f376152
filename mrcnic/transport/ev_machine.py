"""The EV state machine: states, inputs and the transition table (h11 style).

Every (state, input) pair is listed in :data:`TRANSITIONS`, either moving to a new state or
explicitly ignored; a pair that is not listed is a bug and raises :class:`EvTransitionError`.
Every real transition produces an :class:`EvStateChanged` event.  The per-QP table that runs
it is :class:`mrcnic.transport.ev.EvTable`; ``python -m mrcnic.transport.ev`` prints the table
as a Mermaid diagram.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from mrcnic.errors import MrcError


class EvState(enum.Enum):
    GOOD = "GOOD"  # sprayed on
    SKIP = "SKIP"  # not sent on for one rotation (ECN echo or trim: congestion, path alive)
    ASSUMED_BAD = "ASSUMED_BAD"  # not sent on; probed; restored only when probes are answered
    DENIED = "DENIED"  # not sent on until the controller (API) allows it


class EvInput(enum.Enum):
    ECN_ECHO = "ECN_ECHO"  # SACK with mark SKIP_ONCE (CE seen mid-fabric on this EV)
    TRIMMED = "TRIMMED"  # NACK TRIMMED (not TRIMMED_LASTHOP: that is the receiver's port)
    ROTATION = "ROTATION"  # one rotation since entering SKIP
    TIMEOUT = "TIMEOUT"  # RTO fired with neither a SACK nor a trim seen on this EV since
    LOST = "LOST"  # a packet on this EV was lost, not trimmed (found from SACKs): MRC retires
    # the EV at once; background probes bring it back
    ALWAYS_SKIP = "ALWAYS_SKIP"  # SACK with mark ALWAYS_SKIP
    PROBE_OK = "PROBE_OK"  # enough probes answered with mark NONE
    PROBE_OK_ECN = "PROBE_OK_ECN"  # a probe answered with mark SKIP_ONCE
    PORT_DOWN = "PORT_DOWN"  # the local port of this EV's plane went down, or the peer's did
    DENY = "DENY"  # API / controller
    ALLOW = "ALLOW"  # API / controller: force GOOD


#: the inputs that condemn an EV for losing packets (flap damping counts these)
_LOSS_INPUTS = frozenset({EvInput.LOST, EvInput.TIMEOUT, EvInput.ALWAYS_SKIP})

G, S, B, D = EvState.GOOD, EvState.SKIP, EvState.ASSUMED_BAD, EvState.DENIED
I = EvInput  # noqa: E741 - short alias keeps the table readable

#: (state, input) -> next state.  Entries mapping a state to itself are "ignored" inputs (late
#: feedback about an EV already out of use); SKIP -> SKIP on new congestion restarts the rotation.
TRANSITIONS: dict[tuple[EvState, EvInput], EvState] = {
    # GOOD: downgrades are automatic
    (G, I.ECN_ECHO): S,
    (G, I.TRIMMED): S,
    (G, I.ROTATION): G,
    (G, I.TIMEOUT): B,
    (G, I.LOST): B,
    (G, I.ALWAYS_SKIP): B,
    (G, I.PROBE_OK): G,
    (G, I.PROBE_OK_ECN): G,
    (G, I.PORT_DOWN): B,
    (G, I.DENY): D,
    (G, I.ALLOW): G,
    # SKIP: back after one rotation
    (S, I.ECN_ECHO): S,
    (S, I.TRIMMED): S,
    (S, I.ROTATION): G,
    (S, I.TIMEOUT): B,
    (S, I.LOST): B,
    (S, I.ALWAYS_SKIP): B,
    (S, I.PROBE_OK): S,
    (S, I.PROBE_OK_ECN): S,
    (S, I.PORT_DOWN): B,
    (S, I.DENY): D,
    (S, I.ALLOW): G,
    # ASSUMED_BAD: upgrades need a probe
    (B, I.ECN_ECHO): B,
    (B, I.TRIMMED): B,
    (B, I.ROTATION): B,
    (B, I.TIMEOUT): B,
    (B, I.LOST): B,
    (B, I.ALWAYS_SKIP): B,
    (B, I.PROBE_OK): G,
    (B, I.PROBE_OK_ECN): S,
    (B, I.PORT_DOWN): B,
    (B, I.DENY): D,
    (B, I.ALLOW): G,
    # DENIED: only the controller moves it
    (D, I.ECN_ECHO): D,
    (D, I.TRIMMED): D,
    (D, I.ROTATION): D,
    (D, I.TIMEOUT): D,
    (D, I.LOST): D,
    (D, I.ALWAYS_SKIP): D,
    (D, I.PROBE_OK): D,
    (D, I.PROBE_OK_ECN): D,
    (D, I.PORT_DOWN): D,
    (D, I.DENY): D,
    (D, I.ALLOW): G,
}
del G, S, B, D, I


class EvTransitionError(MrcError, RuntimeError):
    """A (state, input) pair missing from :data:`TRANSITIONS` (a bug, never peer input)."""


def next_state(state: EvState, inp: EvInput) -> EvState:
    try:
        return TRANSITIONS[(state, inp)]
    except KeyError:
        raise EvTransitionError(f"no transition from {state.name} on {inp.name}") from None


@dataclass(frozen=True, slots=True)
class EvStateChanged:
    """An EV changed state (emitted for every real transition)."""

    ev: int
    plane: int
    old: EvState
    new: EvState
    cause: EvInput
    time_s: float


def mermaid() -> str:
    """The transition table as a Mermaid state diagram (self-loops omitted)."""
    lines = ["stateDiagram-v2", "    [*] --> GOOD"]
    for (src, inp), dst in TRANSITIONS.items():
        if src is not dst:
            lines.append(f"    {src.name} --> {dst.name}: {inp.name}")
    return "\n".join(lines)

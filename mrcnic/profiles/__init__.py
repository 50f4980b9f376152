"""The controller's model, after OCP libmrc's: EV profiles, CC profiles and per-QP options.

A *profile* is configuration a controller prepares once and QPs are created from: an
:class:`EvProfile` says which entropy values (EVs, paths) a QP sprays over, a
:class:`CcProfile` which congestion control it runs and with what parameters.  Both live
through the same small lifecycle (:data:`PROFILE_TRANSITIONS`, h11 style: an operation not in
the table raises :class:`ProfileStateError`)::

    INIT --configure--> OFFLINE --online--> ONLINE --offline--> OFFLINE --reset--> INIT

A profile is edited only while OFFLINE, and used (``Device.create_qp(ev_profile=...,
cc_profile=...)`` or :meth:`EvProfile.apply`) only while ONLINE; a profile QPs are using
cannot go OFFLINE.  :class:`QpOptions` carries libmrc's per-QP attributes in their units
(PSN tracking window in units of 128 PSNs, the ACK timeout exponent, linear and exponential
retry counts) and maps them onto :class:`~mrcnic.transport.qp_types.QpConfig`.  At run time
a controller reads and sets EV states as :class:`EvStatus` (GOOD, ASSUMED_BAD, DENIED,
UNKNOWN: the transport's SKIP shows as GOOD) and receives :class:`EvEvent` records from an
:class:`EvEventQueue` (``Device.ev_event_queue()``).  docs/api.md, "The OCP libmrc control
model", maps every libmrc call and field to these names and says what is left out and why.

Everything here is pure data and checks: no I/O, no clock.
"""

from __future__ import annotations

from mrcnic.profiles.cc import CcProfile, cc_option_names
from mrcnic.profiles.events import Capabilities, EvEvent, EvEventQueue, capabilities
from mrcnic.profiles.evs import (
    DEFAULT_EVENTS,
    EvField,
    EvMode,
    EvProfile,
    EvStatus,
    ev_status,
    generate_evs,
)
from mrcnic.profiles.lifecycle import (
    PROFILE_TRANSITIONS,
    ProfileOp,
    ProfileState,
    ProfileStateError,
    mermaid,
)
from mrcnic.profiles.limits import EV_BITS, LAB_TIME_SCALE, WINDOW_UNIT_PSNS
from mrcnic.profiles.qp import QpLimits, QpOptions, ack_timeout_code, ack_timeout_s, scale_times

__all__ = [
    "DEFAULT_EVENTS",
    "EV_BITS",
    "LAB_TIME_SCALE",
    "PROFILE_TRANSITIONS",
    "WINDOW_UNIT_PSNS",
    "Capabilities",
    "CcProfile",
    "EvEvent",
    "EvEventQueue",
    "EvField",
    "EvMode",
    "EvProfile",
    "EvStatus",
    "ProfileOp",
    "ProfileState",
    "ProfileStateError",
    "QpLimits",
    "QpOptions",
    "ack_timeout_code",
    "ack_timeout_s",
    "capabilities",
    "cc_option_names",
    "ev_status",
    "generate_evs",
    "mermaid",
    "scale_times",
]

# The public home of these names is this package (what users import, what reprs and the API
# document show); the modules below it are how the code is kept, not an address to import from.
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) or callable(_obj):
        _obj.__module__ = __name__
del _name, _obj

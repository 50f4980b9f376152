"""mrcnic: the software MRC NIC; the user API at the top (``from mrcnic import Device, ...``).

The layers underneath, each a subpackage, from the bottom up:

- ``mrcnic.fast``: the C core (``mrcnic._mrcfast``, built from ``csrc/``) and its Python twin;
- ``mrcnic.wire``: every header and frame on the wire, the uSID codec, the RoCEv2 headers;
- ``mrcnic.transport``: the sans-I/O MRC queue pair (memory, EVs, SACK, congestion control);
- ``mrcnic.rocev2``: the RoCEv2 baseline on the same sans-I/O surface;
- ``mrcnic.sim``: ``mrc-sim``, the queue pairs over a virtual-time fabric;
- ``mrcnic.verbs``: the user API (``Device``, ``QP``, ``SimNetwork``);
- ``mrcnic.profiles``: the controller's model after OCP libmrc (EV and CC profiles, QP options);
- ``mrcnic.io``: the I/O shell (AF_PACKET, namespaces, link state, pacing, ``AioNic``).

The names below load on first use, so ``import mrcnic.wire`` does not pull in the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> module that defines it (one source: the module; this is only the front door)
_API = {
    "MrcError": "mrcnic.errors",
    "Access": "mrcnic.transport.memory",
    "MemoryRegion": "mrcnic.transport.memory",
    "EvConfig": "mrcnic.transport.ev",
    "EvState": "mrcnic.transport.ev",
    "EvStateChanged": "mrcnic.transport.ev",
    "NetConfig": "mrcnic.transport.qp_types",
    "PortAddr": "mrcnic.transport.qp_types",
    "QpConfig": "mrcnic.transport.qp_types",
    "QpAttributes": "mrcnic.transport.qp_types",
    "QpErrorEvent": "mrcnic.transport.qp_types",
    "QpStateError": "mrcnic.transport.qp_types",
    "ImmReceived": "mrcnic.transport.qp_types",
    "WriteCompleted": "mrcnic.transport.qp_types",
    "PeerPortStatus": "mrcnic.transport.qp_types",
    "WcStatus": "mrcnic.transport.qp_types",
    "Device": "mrcnic.verbs",
    "QP": "mrcnic.verbs",
    "RemoteBuffer": "mrcnic.verbs",
    "SimNetwork": "mrcnic.verbs",
    "CcProfile": "mrcnic.profiles",
    "EvEvent": "mrcnic.profiles",
    "EvField": "mrcnic.profiles",
    "EvMode": "mrcnic.profiles",
    "EvProfile": "mrcnic.profiles",
    "EvStatus": "mrcnic.profiles",
    "ProfileState": "mrcnic.profiles",
    "ProfileStateError": "mrcnic.profiles",
    "QpOptions": "mrcnic.profiles",
    "AioNic": "mrcnic.io.aio",
}

__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'mrcnic' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, eagerly
    from mrcnic.errors import MrcError  # noqa: F401
    from mrcnic.io.aio import AioNic  # noqa: F401
    from mrcnic.profiles import (  # noqa: F401
        CcProfile,
        EvEvent,
        EvField,
        EvMode,
        EvProfile,
        EvStatus,
        ProfileState,
        ProfileStateError,
        QpOptions,
    )
    from mrcnic.transport.ev import EvConfig, EvState, EvStateChanged  # noqa: F401
    from mrcnic.transport.memory import Access, MemoryRegion  # noqa: F401
    from mrcnic.transport.qp_types import (  # noqa: F401
        ImmReceived,
        NetConfig,
        PeerPortStatus,
        PortAddr,
        QpAttributes,
        QpConfig,
        QpErrorEvent,
        QpStateError,
        WcStatus,
        WriteCompleted,
    )
    from mrcnic.verbs import QP, Device, RemoteBuffer, SimNetwork  # noqa: F401

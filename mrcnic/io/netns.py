"""Entering a network namespace by name: the one primitive the NIC and the switch need.

``setns(2)`` switches only the calling thread, so sockets opened in the body live in the
target namespace and the thread comes back afterwards. The lab builds on this
(``lab.fabric.netns``); nothing here knows about labs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

from mrcnic.errors import MrcError

NETNS_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000

_libc = ctypes.CDLL(None, use_errno=True)


class NetnsError(MrcError, OSError):
    """A namespace that does not exist, or a ``setns`` the kernel refused."""


def netns_path(name: str) -> str:
    return os.path.join(NETNS_DIR, name)


@contextlib.contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Run the body with this thread inside namespace ``name`` (then switch back)."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(netns_path(name), os.O_RDONLY)
    except FileNotFoundError:
        os.close(own)
        raise NetnsError(f"network namespace {name} does not exist") from None
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise NetnsError(f"setns({name}): {os.strerror(err)}")
        try:
            yield
        finally:
            if _libc.setns(own, CLONE_NEWNET) != 0:  # pragma: no cover - cannot really fail
                raise NetnsError("could not return to the original network namespace")
    finally:
        os.close(target)
        os.close(own)

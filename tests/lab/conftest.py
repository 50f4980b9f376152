"""Lab tests need real namespaces: root (CAP_NET_ADMIN) and iproute2.

Every test under tests/lab is marked ``lab``; without the privileges it is skipped with a
reason saying exactly what is missing (never silently).
"""

import os
import shutil

import pytest


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "lab tests need root (CAP_NET_ADMIN) to create network namespaces"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "lab tests need iproute2 (ip, tc) on PATH"
    if not os.path.isdir("/proc/self/ns") or not os.path.exists("/proc/self/ns/net"):
        return "this kernel has no network namespaces"
    return None


_REASON = _missing()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/lab/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.lab)
            if _REASON:
                item.add_marker(pytest.mark.skip(reason=_REASON))

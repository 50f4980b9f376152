"""Lab tests need real namespaces: root (CAP_NET_ADMIN + CAP_SYS_ADMIN) and iproute2.

This is the one place that decides whether they can run: every test under tests/lab is
marked ``lab`` here, and without the privileges it is skipped with a reason saying exactly
what is missing (never silently: the reason is in pytest's header and, with ``-rs`` from
pyproject.toml's addopts, in its summary). Test files add no skip of their own for it.
"""

import os
import shutil

import pytest

from lab.fabric.netns import have_net_admin


def _missing() -> str | None:
    if not have_net_admin():
        return "lab tests need root (CAP_NET_ADMIN + CAP_SYS_ADMIN) to create network namespaces"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "lab tests need iproute2 (ip, tc) on PATH"
    if not os.path.isdir("/proc/self/ns") or not os.path.exists("/proc/self/ns/net"):
        return "this kernel has no network namespaces"
    return None


_REASON = _missing()


def pytest_report_header(config) -> str:
    return f"lab tests: {'SKIPPED, ' + _REASON if _REASON else 'run (root, iproute2, netns)'}"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/lab/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.lab)
            if _REASON:
                item.add_marker(pytest.mark.skip(reason=_REASON))

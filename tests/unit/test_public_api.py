"""The front door: ``from mrcnic import Device, ...`` resolves every advertised name, lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

import mrcnic


@pytest.mark.parametrize("name", mrcnic.__all__)
def test_every_advertised_name_resolves(name: str) -> None:
    obj = getattr(mrcnic, name)
    assert getattr(obj, "__name__", name) == name


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        _ = mrcnic.NoSuchThing  # type: ignore[attr-defined]


def test_importing_a_low_layer_does_not_load_the_top() -> None:
    """``import mrcnic.wire`` must not drag in the transport, the simulator or asyncio."""
    code = (
        "import sys, mrcnic.wire\n"
        "heavy = [m for m in ('mrcnic.verbs', 'mrcnic.io.aio', 'mrcnic.transport.qp', 'asyncio')"
        " if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_all_errors_share_the_base() -> None:
    from lab.fabric.netns import LabError
    from lab.fabric.params import ParamError
    from mrcnic.transport.memory import MemoryRegionError
    from mrcnic.transport.qp_types import QpStateError
    from mrcnic.wire import WireError
    from mrcnic.wire.usid import UsidError
    from mrcswitch.config import ConfigError

    for cls in (
        LabError,
        ParamError,
        MemoryRegionError,
        QpStateError,
        WireError,
        UsidError,
        ConfigError,
    ):
        assert issubclass(cls, mrcnic.MrcError), cls

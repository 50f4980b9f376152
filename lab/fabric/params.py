"""The parameters of a lab: flags, defaults, and the YAML/TOML topology file.

The flag names and defaults are a contract (scripts rely on them): ``--planes 8 --t0 2
--t1 2 --hosts-per-t0 2 --rate-mbit 100 --buffer-kb 64 --mtu 4200 --block fcbb:bb00::/32``.
A topology file holds the same keys (dashes or underscores both accepted), e.g.::

    # examples/topologies/default.yaml
    planes: 8
    t0: 2
    t1: 2
    hosts_per_t0: 2
    rate_mbit: 100

Rates, buffer sizes and times read like everywhere else in mrc (``mrcnic.units``): a plain
number is in the key's unit (Mbit/s, KiB, us), a spelled-out one is converted: ``rate_mbit:
1G`` is 1000, ``buffer_kb: 1.5M`` is 1536, ``delay_us: 2ms`` is 2000, and the flags
``--rate-mbit`` and ``--buffer-kb`` take the same (``--delay`` takes a time: ``2ms``, or plain
seconds as mrc-sim's ``--delay``).
Command-line flags given explicitly win over the file.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from lab.fabric.netns import LabError
from mrcnic.units import UnitsError, in_unit
from mrcnic.wire.usid import MAX_INDEX, MAX_PLANES, UsidError, UsidFormat
from mrcswitch.config import MAX_DELAY_NS

# Every namespace of a lab is "<name>-<node>"; every interface "<name>-<suffix>" (<= 15
# characters), every nft table "<name>-...". A name is "mrc" + up to 6 lowercase letters or
# digits and never holds a dash, so "<name>-" can never be the prefix of another lab's names.
NAME_RE = re.compile(r"^mrc[a-z0-9]{0,6}$")
DEFAULT_NAME = "mrc"

# IPv6 40 + UDP 8 + BTH 12 + METH 4 + TS 8 + RETH 16 + ImmDt 4 + 4096 payload + ICRC 4 = 4192.
MIN_MTU = 4192
SWITCH_MODES = ("python", "kernel")
MAX_DELAY_US = MAX_DELAY_NS // 1000


class ParamError(LabError, ValueError):
    """A lab parameter (or a name on the command line) that cannot be used; the message names
    it. A LabError too, so that what caught lab errors before still does; the command lines
    exit 2 for it, 1 for other lab errors (docs/cli.md)."""


MIN_RATE_MBIT = 0.5  # a lab's link rate, at least (rate_mbit)


@dataclass(frozen=True, slots=True)
class LabParams:
    name: str = DEFAULT_NAME
    planes: int = 8
    t0: int = 2
    t1: int = 2
    hosts_per_t0: int = 2
    rate_mbit: float = 100.0
    buffer_kb: int = 64
    # python switches: a port marks ECN-capable data CE above this many KiB queued (None:
    # half the buffer). At the lab's low rates and small buffers the queue is a few 4 KiB
    # frames deep; spraying at full load makes queues of several frames, which a mark
    # threshold of 4 frames (a quarter of 64 KiB) took for congestion (docs/lab.md).
    ecn_kb: int | None = None
    mtu: int = 4200
    block: str = "fcbb:bb00::/32"
    switch: str = "python"
    # python switches: a lossless class with priority flow control (802.1Qbb) for RoCEv2's
    # data (docs/design/pfc.md); veth has no PFC, so the kernel mode cannot have it
    pfc: bool = False
    # python switches: one-way propagation delay of every switch-to-switch link, both
    # directions (T0 -> T1 and T1 -> T0), in microseconds; a path's round trip gains 4x it.
    # The kernel here has no netem, so it is mrc-switch that holds frames (docs/lab.md)
    delay_us: float = 0.0
    # python switches: the lab's switch and NIC processes run SCHED_FIFO and idle CPUs poll
    # while it is up (mrcnic/io/realtime.py): a wake-up waits microseconds for a CPU, not
    # tens, at a cost in CPU (docs/lab.md, "Real-time")
    realtime: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_RE.match(self.name):
            raise ParamError(
                f"name {self.name!r}: a lab name is 'mrc' followed by at most 6 lowercase "
                "letters or digits (e.g. mrc, mrc2, mrcdemo); it prefixes every namespace, "
                "interface and nft table of the lab"
            )
        if not 1 <= _as_int("planes", self.planes) <= MAX_PLANES:
            raise ParamError(f"planes must be 1..{MAX_PLANES}, not {self.planes}")
        for key in ("t0", "t1", "hosts_per_t0"):
            value = _as_int(key, getattr(self, key))
            if not 1 <= value <= MAX_INDEX + 1:
                raise ParamError(f"{key} must be 1..{MAX_INDEX + 1}, not {value}")
        if isinstance(self.rate_mbit, bool) or not isinstance(self.rate_mbit, int | float):
            raise ParamError(f"rate_mbit must be a number, not {self.rate_mbit!r}")
        if not MIN_RATE_MBIT <= self.rate_mbit <= 100_000:
            raise ParamError(
                f"link rate {self.rate_mbit:g} Mb/s (--rate, rate_mbit): must be in "
                f"[{MIN_RATE_MBIT:g}, 100000] Mb/s (below, a 4 KiB frame takes over "
                f"{frame_time_s(MIN_RATE_MBIT) * 1e3:.0f} ms a hop); k is 1,000 bit/s, M 1,000,000"
            )
        if _as_int("mtu", self.mtu) < MIN_MTU or self.mtu > 65535:
            raise ParamError(
                f"mtu {self.mtu}: must be {MIN_MTU}..65535 (a 4096-byte payload plus "
                "IPv6/UDP/BTH/METH/TS/RETH/ImmDt/ICRC needs 4192)"
            )
        # A buffer must hold at least one full frame (MTU + Ethernet header).
        if _as_int("buffer_kb", self.buffer_kb) * 1024 < self.mtu + 14:
            raise ParamError(
                f"buffer_kb {self.buffer_kb}: must hold one frame of {self.mtu + 14} bytes"
            )
        if self.ecn_kb is not None and not (
            _as_int("ecn_kb", self.ecn_kb) >= 1 and self.ecn_kb * 1024 <= self.buffer_bytes
        ):
            raise ParamError(
                f"ecn_kb {self.ecn_kb}: must be 1..buffer_kb ({self.buffer_kb}): marks start "
                "at that many KiB queued, inside the buffer"
            )
        try:
            fmt = UsidFormat.from_prefix(self.block)
        except UsidError as e:
            raise ParamError(f"block: {e}") from None
        if fmt.max_usids < 4:
            raise ParamError(f"block {self.block}: leaves room for fewer than 4 uSIDs")
        if self.switch not in SWITCH_MODES:
            raise ParamError(
                f"switch must be one of {', '.join(SWITCH_MODES)}, not {self.switch!r}"
            )
        if not isinstance(self.pfc, bool):
            raise ParamError(f"pfc must be true or false, not {self.pfc!r}")
        if not isinstance(self.realtime, bool):
            raise ParamError(f"realtime must be true or false, not {self.realtime!r}")
        if self.realtime and self.switch == "kernel":
            raise ParamError(
                "realtime needs python switches: it is their processes (and the NICs') that "
                "run real-time; the kernel's switches already forward in the sender's "
                "context; drop --switch kernel or --realtime"
            )
        if self.pfc and self.switch == "kernel":
            raise ParamError(
                "pfc needs python switches: the kernel's veth has no priority flow control "
                "(no PAUSE frames, no lossless class); drop --switch kernel or --pfc"
            )
        d = self.delay_us
        if isinstance(d, bool) or not isinstance(d, int | float) or not 0 <= d <= MAX_DELAY_US:
            raise ParamError(f"delay_us must be a time in [0, 1 s], not {d!r}")
        if d and self.switch == "kernel":
            raise ParamError(
                "a link delay needs python switches: this kernel has no netem to hold frames "
                "on a veth, mrc-switch holds them on its egress; drop --switch kernel or --delay"
            )

    @property
    def rate_bps(self) -> int:
        return round(self.rate_mbit * 1_000_000)

    @property
    def buffer_bytes(self) -> int:
        return self.buffer_kb * 1024

    @property
    def ecn_threshold_bytes(self) -> int:
        """Where python switches start marking CE (ecn_kb, or half the buffer)."""
        return self.ecn_kb * 1024 if self.ecn_kb is not None else self.buffer_bytes // 2

    @property
    def delay_ns(self) -> int:
        """The switch-to-switch links' one-way delay in ns (mrc-switch's ``delay_ns``)."""
        return round(self.delay_us * 1000)

    @property
    def host_count(self) -> int:
        return self.t0 * self.hosts_per_t0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LabParams:
        return cls(**_normalise(data, "parameters"))

    def with_overrides(self, **changes: Any) -> LabParams:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def _as_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParamError(f"{key} must be an integer, not {value!r}")
    return value


_KEYS = {f.name for f in fields(LabParams)}
# keys holding a rate or a size: (kind, unit of a plain number, whole units only)
UNIT_KEYS = {
    "rate_mbit": ("rate", 1e6, False),
    "buffer_kb": ("size", 1024, True),
    "ecn_kb": ("size", 1024, True),
    "delay_us": ("time", 1e-6, False),
}


def _with_units(values: dict[str, Any], where: str) -> dict[str, Any]:
    """Spelled-out rates and sizes (``"1G"``, ``"1.5M"``) converted to the keys' units."""
    out = dict(values)
    for key, (kind, unit, whole) in UNIT_KEYS.items():
        value = out.get(key)
        if isinstance(value, str):
            try:
                out[key] = in_unit(kind, value, unit, whole)
            except UnitsError as e:
                raise ParamError(f"{where}{key}: {e}") from None
    return out


def _normalise(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ParamError(f"{where}: must be a mapping of parameter -> value")
    out: dict[str, Any] = {}
    for key, value in data.items():
        k = str(key).replace("-", "_")
        if k not in _KEYS:
            raise ParamError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(_KEYS))})")
        out[k] = value
    return _with_units(out, f"{where}: ")


def load_topology_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML (.yaml/.yml), TOML (.toml) or JSON (.json) topology file -> overrides."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ParamError(f"topology file {p}: {e.strerror}") from None
    suffix = p.suffix.lower()
    try:
        if suffix == ".toml":
            data = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        elif suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text)
        else:
            raise ParamError(f"topology file {p}: use a .yaml, .yml, .toml or .json name")
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, yaml.YAMLError) as e:
        raise ParamError(f"topology file {p} does not parse: {e}") from None
    if data is None:
        return {}
    # Allow the keys at the top level or under a "topology" table.
    if isinstance(data, dict) and set(data) == {"topology"}:
        data = data["topology"]
    return _normalise(data, f"topology file {p}")


def resolve(topology_file: str | None = None, **flags: Any) -> LabParams:
    """Defaults, then the file, then the flags given explicitly (None = not given)."""
    base: dict[str, Any] = {}
    if topology_file:
        base.update(load_topology_file(topology_file))
    base.update(_with_units({k: v for k, v in flags.items() if v is not None}, ""))
    try:
        return LabParams(**base)
    except TypeError as e:  # an unknown keyword reached the constructor
        raise ParamError(str(e)) from None


#: bytes a full data frame adds to its payload on the wire (Ethernet, IPv6, SRH, UDP, BTH...)
DATA_FRAME_OVERHEAD_BYTES = 106


def frame_time_s(rate_mbit: float, mtu_bytes: int = 4096) -> float:
    """The time a full data frame takes on a link of ``rate_mbit`` (its serialisation)."""
    return (mtu_bytes + DATA_FRAME_OVERHEAD_BYTES) * 8 / (rate_mbit * 1e6)

"""The static configuration of one mrc-switch: loaded once at start, validated, never changed.

A config file is TOML (any name) or JSON (name ending in ``.json``); docs/switch.md is the
field reference. Every problem raises :class:`ConfigError` whose message starts with the
dotted path of the offending field (``ports[1].rate_mbit: must be > 0``), so a refused
start tells the operator exactly what to fix.
"""

from __future__ import annotations

import ipaddress
import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from mrcnic.errors import MrcError
from mrcnic.io.pfc import DEFAULT_PRIORITY, DEFAULT_WATCHDOG_S
from mrcnic.wire import layout
from mrcnic.wire import pfc as wire_pfc
from mrcnic.wire.layout import Dscp

# Eth + IPv6 + UDP + BTH + METH + timestamp ext + RETH: the smallest legal trim (MRC-BRIEF).
MIN_TRIM_BYTES = layout.FRAME_HEADERS_SIZE + layout.MRC_DATA_HEADERS_SIZE  # 102
DEFAULT_BLOCK = "fcbb:bb00::/32"
USID_BITS = 16
MAX_FRAME_BYTES = 65535
# The longest one-way link delay a port takes (csrc/mrc_equeue.h MRC_EQ_MAX_DELAY_NS).
MAX_DELAY_NS = 1_000_000_000
IFNAMSIZ = 16  # Linux interface names hold at most 15 characters
# Receive ring per port, when rx_ring_frames is not given: RX_RING_BURST_S of traffic at the
# fastest port's rate, within [MIN, DEFAULT] bytes. A lab of 96 ports at 100 Mb/s then holds
# 96 MiB of rings rather than 768 MiB, while a 100 Gb/s bench port still gets 8 MiB.
DEFAULT_RX_RING_BYTES = 8 << 20
MIN_RX_RING_BYTES = 1 << 20
RX_RING_BURST_S = 0.002
MAX_RX_RING_FRAMES = 65536


class ConfigError(MrcError, ValueError):
    """A config that cannot be used; ``field`` names where the problem is."""

    def __init__(self, field_path: str, reason: str) -> None:
        super().__init__(f"{field_path}: {reason}")
        self.field = field_path
        self.reason = reason


@dataclass(frozen=True, slots=True)
class PortConfig:
    """One switch port: an interface owned through AF_PACKET and its paced egress queue."""

    name: str  # logical name used by the table ("dl0", "up1"); defaults to the interface
    interface: str
    peer: str  # the node at the other end (for humans and for mrc-lab stats)
    peer_mac: bytes  # 6 bytes: destination MAC of every frame sent out of this port
    mac: bytes | None  # 6 bytes, or None: read from the interface at start
    rate_bps: int  # link rate the egress is paced at
    buffer_bytes: int  # data-class buffer
    high_buffer_bytes: int  # high-priority class buffer (control + trimmed headers)
    burst_bytes: int  # token bucket depth
    ecn: bool  # mark CE on ECN-capable data above ecn_threshold_bytes
    ecn_threshold_bytes: int
    trimming: bool  # trim trimmable data on overflow instead of dropping it
    last_hop: bool  # a T0 downlink: trimmed DSCP is TRIMMED_LASTHOP, ECN off by default
    trim_bytes: int  # bytes kept from the start of the frame; 0 = exactly the MRC headers
    # source guard: frames in through this port must come from this prefix (a T0's host
    # port: the host's own addresses), else dropped as spoofed_source; None: no guard
    source_prefix: tuple[int, int] | None = None  # (network as a 128-bit int, length)
    # one-way propagation delay of the link out of this port (frames leave the queue at the
    # paced rate, then arrive this much later); 0: none
    delay_ns: int = 0


@dataclass(frozen=True, slots=True)
class LosslessClass:
    """A port's lossless class (priority flow control): its DSCP, its bound in this queue,
    the bound per in-port (XOFF + headroom), and whether ECT frames get CE above the port's
    ECN threshold of lossless bytes (DCQCN's marks, on every hop, last hop included)."""

    dscp: int
    buffer_bytes: int
    in_limit_bytes: int
    ecn: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.dscp < 64 or self.buffer_bytes <= 0 or self.in_limit_bytes <= 0:
            raise ValueError("lossless class: dscp 0..63, bounds > 0")


@dataclass(frozen=True, slots=True)
class PfcConfig:
    """The lossless class of a switch (config key ``pfc``; docs/switch.md)."""

    priority: int = DEFAULT_PRIORITY  # the lossless class's 802.1p priority (RoCEv2's data)
    xoff_bytes: int = 96 << 10  # per ingress port: ask upstream to pause above this
    xon_bytes: int = 48 << 10  # ... and to resume at or below this
    headroom_bytes: int = 256 << 10  # room above XOFF for what arrives before the pause acts
    pause_quanta: int = 0xFFFF  # the pause time asked for (refreshed while above XON)
    watchdog_s: float = DEFAULT_WATCHDOG_S  # paused this long without a break: released
    watchdog_restore_s: float = DEFAULT_WATCHDOG_S  # ... and PFC ignored on the port this long
    dscp: int = Dscp.LOSSLESS  # the IP class of the lossless priority's frames
    ecn: bool = True  # lossless frames get CE above a port's ECN threshold (DCQCN)

    def __post_init__(self) -> None:
        if not 0 <= self.priority < 8:
            raise ValueError(f"pfc.priority {self.priority}: must be 0..7")
        if not 0 < self.xon_bytes < self.xoff_bytes:
            raise ValueError("pfc: need 0 < xon_bytes < xoff_bytes")
        if self.headroom_bytes <= 0:
            raise ValueError("pfc.headroom_bytes must be > 0")
        if not 0 < self.pause_quanta <= wire_pfc.MAX_QUANTA:
            raise ValueError("pfc.pause_quanta must be 1..65535")
        if self.watchdog_s <= 0 or self.watchdog_restore_s < 0:
            raise ValueError("pfc.watchdog_s must be > 0, watchdog_restore_s >= 0")
        if not 0 <= self.dscp < 64:
            raise ValueError(f"pfc.dscp {self.dscp}: must be 0..63")

    @property
    def in_limit_bytes(self) -> int:
        """What one in-port may have queued in the lossless class: XOFF + headroom."""
        return self.xoff_bytes + self.headroom_bytes

    def lossless_class(self, n_ports: int) -> LosslessClass:
        """The egress queues' lossless class: room for every in-port's limit at once, so
        only the per in-port bound (the headroom) ever refuses a frame."""
        lim = self.in_limit_bytes
        return LosslessClass(self.dscp, n_ports * lim, lim, self.ecn)


@dataclass(frozen=True, slots=True)
class SwitchConfig:
    name: str
    block: bytes  # the locator block, lblen/8 bytes
    lblen: int  # block length in bits (multiple of 16, 16..96)
    own_usids: tuple[int, ...]
    ports: tuple[PortConfig, ...]
    table: Mapping[int, str]  # uSID -> port name (read-only)
    stats_path: str | None
    stats_interval_s: float
    control_socket: str | None
    batch_size: int  # frames per recvmmsg/sendmmsg
    max_frame_bytes: int  # receive slot size; longer frames are dropped as too_big
    # PACKET_MMAP receive ring slots per port (0: recvmmsg instead); config_from_dict's
    # default is as many max_frame_bytes slots as DEFAULT_RX_RING_BYTES hold
    rx_ring_frames: int = 512
    # network namespace (a name under /run/netns) the ports are opened in; "" = the
    # process's own (a process serving several switches opens each in its own namespace)
    netns: str = ""
    # priority flow control: the lossless class (None: no PFC; docs/switch.md "pfc")
    pfc: PfcConfig | None = None
    _port_index: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)

    def port_index(self, name: str) -> int:
        return self._port_index[name]


_TOP_FIELDS = {
    "name",
    "block",
    "own_usids",
    "own_usid",
    "ports",
    "table",
    "stats_path",
    "stats_interval_s",
    "control_socket",
    "batch_size",
    "max_frame_bytes",
    "rx_ring_frames",
    "netns",
    "pfc",
}
_PFC_FIELDS = {
    "priority",
    "xoff_bytes",
    "xon_bytes",
    "headroom_bytes",
    "pause_quanta",
    "watchdog_s",
    "watchdog_restore_s",
    "dscp",
    "ecn",
}


def _pfc(raw: Any) -> PfcConfig | None:
    """The ``pfc`` table: absent or false: no PFC; true or a table: PFC with these fields
    (the rest default)."""
    if raw is None or raw is False:
        return None
    if raw is True:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError("pfc", "must be true/false or a table of PFC fields")
    _unknown("pfc.", raw, _PFC_FIELDS)
    kw: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "ecn":
            kw[key] = _bool(raw, key, "pfc.", default=True)
        elif key in ("watchdog_s", "watchdog_restore_s"):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"pfc.{key}", f"must be a number of seconds, got {value!r}")
            kw[key] = float(value)
        else:
            kw[key] = _int(raw, key, "pfc.")
    try:
        return PfcConfig(**kw)
    except ValueError as exc:
        raise ConfigError("pfc", str(exc).removeprefix("pfc: ").removeprefix("pfc.")) from None


_PORT_FIELDS = {
    "name",
    "interface",
    "peer",
    "peer_mac",
    "mac",
    "rate_mbit",
    "rate_bps",
    "buffer_bytes",
    "high_buffer_bytes",
    "burst_bytes",
    "ecn",
    "ecn_threshold_bytes",
    "trimming",
    "last_hop",
    "trim_bytes",
    "source_prefix",
    "delay_ns",
}


def _unknown(where: str, data: Mapping[str, Any], allowed: set[str]) -> None:
    for key in data:
        if key not in allowed:
            raise ConfigError(f"{where}{key}", "unknown field (typo?)")


def _str(data: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = data.get(key, default)
    if value is None:
        raise ConfigError(where + key, "required")
    if not isinstance(value, str) or not value:
        raise ConfigError(where + key, "must be a non-empty string")
    return value


#: the largest values a port takes: a rate of 10 Tb/s and a buffer of 1 GiB are beyond any
#: switch port, and keep the C queue's byte and nanosecond arithmetic far from overflow
MAX_RATE_BPS = 10**13
MAX_BUFFER_BYTES = 1 << 30


def _int(
    data: Mapping[str, Any],
    key: str,
    where: str,
    default: int | None = None,
    minimum: int = 0,
    maximum: int | None = None,
) -> int:
    value = data.get(key, default)
    if value is None:
        raise ConfigError(where + key, "required")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(where + key, f"must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(where + key, f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(where + key, f"must be <= {maximum}, got {value}")
    return value


def _bool(data: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(where + key, f"must be true or false, got {value!r}")
    return value


def parse_usid(value: Any, where: str) -> int:
    """A uSID: an integer, or a hex string with or without 0x ("1001" is 0x1001, as in addresses)."""
    if isinstance(value, bool):
        raise ConfigError(where, f"not a uSID: {value!r}")
    if isinstance(value, str):
        text = value.lower().removeprefix("0x")
        try:
            value = int(text, 16)
        except ValueError:
            raise ConfigError(where, f"not a hex uSID: {value!r}") from None
    if not isinstance(value, int):
        raise ConfigError(where, f"not a uSID: {value!r}")
    if not 0 < value < 1 << USID_BITS:
        raise ConfigError(where, f"uSID must be 1..0xffff (0 ends the carrier), got {value:#x}")
    return value


def parse_mac(value: Any, where: str) -> bytes:
    if not isinstance(value, str):
        raise ConfigError(where, f"must be a MAC string like 02:00:00:00:00:01, got {value!r}")
    parts = value.replace("-", ":").split(":")
    try:
        raw = bytes(int(p, 16) for p in parts)
    except ValueError:
        raise ConfigError(where, f"not a MAC address: {value!r}") from None
    if len(parts) != 6 or any(len(p) != 2 for p in parts):
        raise ConfigError(where, f"not a MAC address: {value!r}")
    return raw


def parse_block(value: Any, where: str = "block") -> tuple[bytes, int]:
    if not isinstance(value, str):
        raise ConfigError(where, f"must be a prefix string like {DEFAULT_BLOCK}, got {value!r}")
    try:
        net = ipaddress.IPv6Network(value, strict=True)
    except ValueError as exc:
        raise ConfigError(where, f"not an IPv6 prefix with zero host bits: {exc}") from None
    lblen = net.prefixlen
    if lblen % 16 or not 16 <= lblen <= 96:
        raise ConfigError(where, f"block length must be a multiple of 16 in 16..96, got /{lblen}")
    return net.network_address.packed[: lblen // 8], lblen


def _port(raw: Any, i: int, max_frame: int) -> PortConfig:
    where = f"ports[{i}]."
    if not isinstance(raw, Mapping):
        raise ConfigError(f"ports[{i}]", "must be a table/object")
    _unknown(where, raw, _PORT_FIELDS)
    interface = _str(raw, "interface", where)
    if len(interface) >= IFNAMSIZ or "/" in interface or " " in interface:
        raise ConfigError(where + "interface", f"not a Linux interface name: {interface!r}")
    name = _str(raw, "name", where, default=interface)
    peer = raw.get("peer", "")
    if not isinstance(peer, str):
        raise ConfigError(where + "peer", f"must be a string, got {peer!r}")
    if "peer_mac" not in raw:
        raise ConfigError(where + "peer_mac", "required")
    peer_mac = parse_mac(raw["peer_mac"], where + "peer_mac")
    mac = parse_mac(raw["mac"], where + "mac") if "mac" in raw else None
    if "rate_bps" in raw and "rate_mbit" in raw:
        raise ConfigError(where + "rate_bps", "give rate_bps or rate_mbit, not both")
    if "rate_bps" in raw:
        rate_bps = _int(raw, "rate_bps", where, minimum=1, maximum=MAX_RATE_BPS)
    else:
        mbit = raw.get("rate_mbit")
        if mbit is None:
            raise ConfigError(where + "rate_mbit", "required (or rate_bps)")
        if (
            isinstance(mbit, bool)
            or not isinstance(mbit, int | float)
            or not 0 < mbit <= MAX_RATE_BPS / 1e6
        ):
            raise ConfigError(
                where + "rate_mbit",
                f"must be a number in (0, {MAX_RATE_BPS / 1e6:g}], got {mbit!r}",
            )
        rate_bps = round(mbit * 1_000_000)
    buffer_bytes = _int(raw, "buffer_bytes", where, minimum=1, maximum=MAX_BUFFER_BYTES)
    if buffer_bytes < max_frame:
        raise ConfigError(
            where + "buffer_bytes", f"must hold one frame of max_frame_bytes ({max_frame})"
        )
    high = _int(raw, "high_buffer_bytes", where, default=max(buffer_bytes // 4, max_frame))
    if high < max_frame:
        raise ConfigError(
            where + "high_buffer_bytes", f"must hold one frame of max_frame_bytes ({max_frame})"
        )
    # Half a millisecond of line rate absorbs the event loop's wake-up jitter without letting
    # a long burst through; never less than two full frames so a big frame can always leave.
    burst = _int(raw, "burst_bytes", where, default=max(2 * max_frame, rate_bps // 16000))
    if burst < max_frame:
        raise ConfigError(where + "burst_bytes", f"must be >= max_frame_bytes ({max_frame})")
    last_hop = _bool(raw, "last_hop", where, default=False)
    ecn = _bool(raw, "ecn", where, default=not last_hop)
    threshold = _int(raw, "ecn_threshold_bytes", where, default=buffer_bytes // 4)
    if threshold > buffer_bytes:
        raise ConfigError(where + "ecn_threshold_bytes", "must not exceed buffer_bytes")
    trimming = _bool(raw, "trimming", where, default=True)
    trim_bytes = _int(raw, "trim_bytes", where, default=0)
    if trim_bytes and trim_bytes < MIN_TRIM_BYTES:
        raise ConfigError(
            where + "trim_bytes",
            f"must be 0 (exactly the MRC headers) or >= {MIN_TRIM_BYTES} "
            "(Eth+IPv6+UDP+BTH+METH+TS+RETH)",
        )
    guard = None
    if "source_prefix" in raw:
        try:
            net = ipaddress.IPv6Network(raw["source_prefix"], strict=True)
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                where + "source_prefix", f"not an IPv6 prefix with zero host bits: {exc}"
            ) from None
        guard = (int(net.network_address), net.prefixlen)
    delay_ns = _int(raw, "delay_ns", where, default=0)
    if delay_ns > MAX_DELAY_NS:
        raise ConfigError(where + "delay_ns", f"must be <= {MAX_DELAY_NS} (1 s), got {delay_ns}")
    return PortConfig(
        name=name,
        interface=interface,
        peer=peer,
        peer_mac=peer_mac,
        mac=mac,
        rate_bps=rate_bps,
        buffer_bytes=buffer_bytes,
        high_buffer_bytes=high,
        burst_bytes=burst,
        ecn=ecn,
        ecn_threshold_bytes=threshold,
        trimming=trimming,
        last_hop=last_hop,
        trim_bytes=trim_bytes,
        source_prefix=guard,
        delay_ns=delay_ns,
    )


def config_from_dict(data: Any) -> SwitchConfig:
    """Validate a parsed TOML/JSON document and build the frozen config."""
    if not isinstance(data, Mapping):
        raise ConfigError("(top level)", "must be a table/object")
    _unknown("", data, _TOP_FIELDS)
    name = _str(data, "name", "")
    block, lblen = parse_block(data.get("block", DEFAULT_BLOCK))
    if "own_usids" in data and "own_usid" in data:
        raise ConfigError("own_usid", "give own_usids or own_usid, not both")
    if "own_usid" in data:
        own_raw: Any = [data["own_usid"]]
        own_where = "own_usid"
    else:
        own_raw = data.get("own_usids", [])
        own_where = "own_usids"
    if not isinstance(own_raw, list):
        raise ConfigError(own_where, "must be a list of uSIDs")
    own = tuple(parse_usid(u, f"{own_where}[{i}]") for i, u in enumerate(own_raw))
    if len(set(own)) != len(own):
        raise ConfigError(own_where, "duplicate uSID")
    max_frame = _int(data, "max_frame_bytes", "", default=9216, minimum=64)
    if max_frame > MAX_FRAME_BYTES:
        raise ConfigError("max_frame_bytes", f"must be <= {MAX_FRAME_BYTES}")
    ports_raw = data.get("ports")
    if not isinstance(ports_raw, list) or not ports_raw:
        raise ConfigError("ports", "required: a non-empty list of ports")
    ports = tuple(_port(p, i, max_frame) for i, p in enumerate(ports_raw))
    index: dict[str, int] = {}
    seen_if: set[str] = set()
    for i, p in enumerate(ports):
        if p.name in index:
            raise ConfigError(f"ports[{i}].name", f"duplicate port name {p.name!r}")
        if p.interface in seen_if:
            raise ConfigError(f"ports[{i}].interface", f"duplicate interface {p.interface!r}")
        index[p.name] = i
        seen_if.add(p.interface)
    table_raw = data.get("table", {})
    if not isinstance(table_raw, Mapping):
        raise ConfigError("table", "must be a table/object mapping uSID -> port name")
    table: dict[int, str] = {}
    for key, port in table_raw.items():
        where = f"table.{key}"
        usid = parse_usid(key, where)
        if usid in table:
            raise ConfigError(where, f"duplicate uSID {usid:#x}")
        if usid in own:
            raise ConfigError(where, f"uSID {usid:#x} is the switch's own uSID")
        if not isinstance(port, str) or port not in index:
            raise ConfigError(where, f"unknown port {port!r} (ports: {', '.join(index)})")
        table[usid] = port
    stats_path = data.get("stats_path")
    if stats_path is not None and (not isinstance(stats_path, str) or not stats_path):
        raise ConfigError("stats_path", "must be a file path string")
    interval = data.get("stats_interval_s", 0.5)
    if isinstance(interval, bool) or not isinstance(interval, int | float):
        raise ConfigError("stats_interval_s", f"must be a number, got {interval!r}")
    if not 0 < interval <= 1.0:
        raise ConfigError(
            "stats_interval_s", "must be in (0, 1] (stats refresh at least every second)"
        )
    control = data.get("control_socket")
    if control is not None and (not isinstance(control, str) or not control):
        raise ConfigError("control_socket", "must be a unix socket path string")
    batch = _int(data, "batch_size", "", default=64, minimum=1)
    if batch > 1024:
        raise ConfigError("batch_size", "must be <= 1024")
    fastest_bps = max(p.rate_bps for p in ports)
    ring_bytes = min(
        DEFAULT_RX_RING_BYTES, max(MIN_RX_RING_BYTES, int(fastest_bps * RX_RING_BURST_S / 8))
    )
    auto_frames = max(batch, min(MAX_RX_RING_FRAMES, ring_bytes // (max_frame + 80)))
    ring_frames = _int(data, "rx_ring_frames", "", default=auto_frames, minimum=0)
    if ring_frames > MAX_RX_RING_FRAMES:
        raise ConfigError("rx_ring_frames", f"must be <= {MAX_RX_RING_FRAMES}")
    netns = data.get("netns", "")
    if not isinstance(netns, str) or "/" in netns or netns in (".", ".."):
        raise ConfigError(
            "netns", f"must be a namespace name (as `ip netns` lists it), got {netns!r}"
        )
    return SwitchConfig(
        name=name,
        block=block,
        lblen=lblen,
        own_usids=own,
        ports=ports,
        table=MappingProxyType(table),
        stats_path=stats_path,
        stats_interval_s=float(interval),
        control_socket=control,
        batch_size=batch,
        max_frame_bytes=max_frame,
        rx_ring_frames=ring_frames,
        netns=netns,
        pfc=_pfc(data.get("pfc")),
        _port_index=MappingProxyType(index),
    )


def load_config(path: str | Path) -> SwitchConfig:
    """Read and validate a config file (JSON if it ends in .json, TOML otherwise)."""
    p = Path(path)
    try:
        text = p.read_bytes()
    except OSError as exc:
        raise ConfigError("(file)", f"cannot read {p}: {exc.strerror}") from None
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            data = tomllib.loads(text.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError("(file)", f"{p} does not parse: {exc}") from None
    return config_from_dict(data)

"""docs/design/wire.md cannot drift from mrcnic/wire.py.

Every ```hex wire:<NAME>``` block of the doc is decoded with mrcnic.wire and compared with
the ```fields wire:<NAME>``` block that follows it (every field must be written there), then
the written values are encoded back and must give the same bytes.
"""

from __future__ import annotations

import ast
import dataclasses
import ipaddress
import re
from pathlib import Path

import pytest

from mrcnic import wire as w

DOC = Path(__file__).resolve().parents[2] / "docs" / "design" / "wire.md"
BLOCK = re.compile(r"^```(hex|fields) wire:(\S+)\n(.*?)^```$", re.M | re.S)
FIELD_LINE = re.compile(r"^([\w.]+)\s*=\s*(.+?)\s*(#.*)?$")

# kind -> (dataclass, encoder, decoder)
HEADERS = {
    "Ethernet": (w.Ethernet, w.encode_ethernet, w.decode_ethernet),
    "IPv6": (w.IPv6, w.encode_ipv6, w.decode_ipv6),
    "UDP": (w.UDP, w.encode_udp, w.decode_udp),
    "BTH": (w.BTH, w.encode_bth, w.decode_bth),
    "METH": (w.METH, w.encode_meth, w.decode_meth),
    "TS": (w.TimestampExt, w.encode_ts, w.decode_ts),
    "RETH": (w.RETH, w.encode_reth, w.decode_reth),
    "ImmDt": (w.ImmDt, w.encode_imm, w.decode_imm),
    "SACK": (w.SACK, w.encode_sack, w.decode_sack),
    "NACK": (w.NACK, w.encode_nack, w.decode_nack),
    "RPROBE": (w.ReliabilityProbe, w.encode_rprobe, w.decode_rprobe),
    "EndpointMsg": (w.EndpointMsg, w.encode_endpoint, w.decode_endpoint),
    "AETH": (w.AETH, w.encode_aeth, w.decode_aeth),
}
MRC_PARTS = {
    "bth": w.BTH,
    "meth": w.METH,
    "ts": w.TimestampExt,
    "reth": w.RETH,
    "imm": w.ImmDt,
    "sack": w.SACK,
    "nack": w.NACK,
    "probe": w.ReliabilityProbe,
    "endpoint": w.EndpointMsg,
    "aeth": w.AETH,
}
FRAME_PARTS = {"eth": w.Ethernet, "ip6": w.IPv6, "udp": w.UDP}
# every header and both whole-frame examples the doc must show
REQUIRED_TAGS = {*HEADERS, "frame/data", "frame/sack", "frame/trimmed"}


def _examples() -> dict[str, tuple[bytes, dict[str, object]]]:
    text = DOC.read_text()
    hexes: dict[str, str] = {}
    fields: dict[str, str] = {}
    for kind, tag, body in BLOCK.findall(text):
        target = hexes if kind == "hex" else fields
        assert tag not in target, f"duplicate {kind} block wire:{tag}"
        target[tag] = body
    assert hexes.keys() == fields.keys(), "every hex block needs its fields block and back"
    out = {}
    for tag, body in hexes.items():
        assert re.fullmatch(r"([0-9a-f]{2}( [0-9a-f]{2})*\n)+", body), f"wire:{tag} hex layout"
        values: dict[str, object] = {}
        for line in fields[tag].splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            m = FIELD_LINE.match(line)
            assert m, f"wire:{tag}: cannot read {line!r}"
            assert m.group(1) not in values, f"wire:{tag}: {m.group(1)} written twice"
            values[m.group(1)] = ast.literal_eval(m.group(2))
        out[tag] = (bytes.fromhex(body), values)
    return out


EXAMPLES = _examples()


def _kind(tag: str) -> str:
    return tag.split("/", 1)[0]


def _as_field(written: object, actual: object) -> object:
    """The doc writes addresses as text; turn them into the bytes the dataclass holds."""
    if isinstance(written, str):
        if isinstance(actual, bytes) and len(actual) == 16:
            return ipaddress.IPv6Address(written).packed
        if isinstance(actual, bytes) and len(actual) == 6:
            return bytes.fromhex(written.replace(":", ""))
    return written


def _check_value(tag: str, path: str, written: object, actual: object) -> None:
    if isinstance(actual, memoryview):
        actual = bytes(actual)
    want = _as_field(written, actual)
    if isinstance(actual, bool):
        assert type(want) is bool, f"wire:{tag} {path}: write True/False"
    assert actual == want, f"wire:{tag} {path}: doc says {written!r}, code decodes {actual!r}"


def _paths(obj: object, prefix: str) -> dict[str, object]:
    """Every leaf field of a decoded dataclass tree (None parts are skipped)."""
    out: dict[str, object] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if value is None and f.name != "icrc":
            continue
        if f.name == "raw":
            continue
        if dataclasses.is_dataclass(value):
            out.update(_paths(value, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = value
    return out


def _build(cls, values: dict[str, object], prefix: str, decoded: object):
    kw = {
        f.name: _as_field(values[prefix + f.name], getattr(decoded, f.name))
        for f in dataclasses.fields(cls)
    }
    return cls(**kw)


def _build_mrc(values: dict[str, object], prefix: str, decoded: w.MrcPacket) -> w.MrcPacket:
    parts = {
        name: _build(cls, values, f"{prefix}{name}.", getattr(decoded, name))
        for name, cls in MRC_PARTS.items()
        if any(k.startswith(f"{prefix}{name}.") for k in values)
    }
    return w.MrcPacket(**parts, payload=values[prefix + "payload"])


def test_doc_has_every_required_example():
    assert {t if t.startswith("frame/") else _kind(t) for t in EXAMPLES} >= REQUIRED_TAGS, (
        "docs/design/wire.md lacks an example"
    )


@pytest.mark.parametrize("tag", sorted(EXAMPLES))
def test_doc_example(tag):
    raw, values = EXAMPLES[tag]
    kind = _kind(tag)
    if kind in HEADERS:
        cls, enc, dec = HEADERS[kind]
        decoded = dec(raw)
        assert len(raw) == len(enc(decoded)), f"wire:{tag}: bytes beyond the header"
        paths = _paths(decoded, "")
        assert set(values) == set(paths), f"wire:{tag}: fields written != fields of {cls.__name__}"
        for path, actual in paths.items():
            _check_value(tag, path, values[path], actual)
        assert enc(_build(cls, values, "", decoded)) == raw
    elif kind == "MRC":
        decoded = w.decode_mrc(raw)
        paths = _paths(decoded, "")
        assert set(values) == set(paths), f"wire:{tag}: fields written != fields decoded"
        for path, actual in paths.items():
            _check_value(tag, path, values[path], actual)
        assert w.encode_mrc(_build_mrc(values, "", decoded)) == raw
    elif kind == "frame":
        frame = w.parse_frame(raw)
        paths = _paths(frame, "")
        paths["ev"] = frame.ev
        assert set(values) - {"final_dst"} == set(paths), f"wire:{tag}: fields written != decoded"
        for path, actual in paths.items():
            _check_value(tag, path, values[path], actual)
        final_dst = frame.ip6.dst
        if "final_dst" in values:
            final_dst = _as_field(values["final_dst"], final_dst)
        assert w.verify_udp_checksum(frame, final_dst), f"wire:{tag}: UDP checksum"
        ip6 = _build(w.IPv6, values, "ip6.", frame.ip6)
        eth = _build(w.Ethernet, values, "eth.", frame.eth)
        pkt = _build_mrc(values, "mrc.", frame.mrc)
        rebuilt = w.build_frame(
            eth_src=eth.src,
            eth_dst=eth.dst,
            ip_src=ip6.src,
            ip_dst=ip6.dst,
            final_dst=final_dst,
            ev=values["ev"],
            mrc=w.encode_mrc(pkt, trimmed=frame.trimmed),
            dscp=ip6.dscp,
            ecn=ip6.ecn,
            hop_limit=ip6.hop_limit,
        )
        assert rebuilt == raw
    else:
        pytest.fail(f"unknown example kind wire:{tag}")

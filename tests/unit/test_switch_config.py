"""mrcswitch.config: a valid config loads; every bad one is refused naming the field."""

from __future__ import annotations

import copy
import json

import pytest

from mrcswitch.config import (
    DEFAULT_RX_RING_BYTES,
    MIN_RX_RING_BYTES,
    MIN_TRIM_BYTES,
    RX_RING_BURST_S,
    ConfigError,
    config_from_dict,
    load_config,
)

GOOD = {
    "name": "p0-t0-0",
    "block": "fcbb:bb00::/32",
    "own_usids": ["1001"],
    "stats_path": "/tmp/x.json",
    "ports": [
        {"name": "dl0", "interface": "v0", "peer_mac": "02:00:00:00:00:01", "rate_mbit": 100,
         "buffer_bytes": 262144, "last_hop": True},
        {"name": "up0", "interface": "v1", "peer_mac": "02:00:00:00:00:02", "rate_bps": 10**9,
         "buffer_bytes": 262144, "trim_bytes": 128},
    ],
    "table": {"3000": "dl0", "0x2001": "up0"},
}  # fmt: skip


def bad(path: str, value, *, delete: bool = False) -> dict:
    d = copy.deepcopy(GOOD)
    parts = path.replace("]", "").replace("[", ".").split(".")
    node = d
    for p in parts[:-1]:
        node = node[int(p)] if p.isdigit() else node[p]
    last = parts[-1]
    if delete:
        del node[int(last) if last.isdigit() else last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return d


def test_good_config_loads_with_defaults():
    cfg = config_from_dict(GOOD)
    assert cfg.own_usids == (0x1001,)
    assert cfg.block == bytes.fromhex("fcbbbb00") and cfg.lblen == 32
    dl, up = cfg.ports
    assert dl.rate_bps == 100_000_000 and up.rate_bps == 10**9
    assert dl.last_hop and not dl.ecn  # ECN off by default on last-hop ports
    assert up.ecn and not up.last_hop
    assert dl.trimming and dl.trim_bytes == 0 and up.trim_bytes == 128
    assert dict(cfg.table) == {0x3000: "dl0", 0x2001: "up0"}
    assert cfg.port_index("up0") == 1
    assert dl.peer_mac == bytes.fromhex("020000000001")


def test_receive_ring_defaults_to_a_memory_budget_and_0_means_recvmmsg():
    cfg = config_from_dict(GOOD)  # max_frame_bytes 9216 by default
    fastest = max(p.rate_bps for p in cfg.ports)
    budget = min(DEFAULT_RX_RING_BYTES, max(MIN_RX_RING_BYTES, fastest * RX_RING_BURST_S / 8))
    slots = cfg.rx_ring_frames
    assert slots * (9216 + 80) <= budget < (slots + 1) * (9216 + 80)
    fast_ports = [
        {**{k: v for k, v in p.items() if k != "rate_mbit"}, "rate_bps": 10**11}
        for p in GOOD["ports"]
    ]
    fast = config_from_dict({**GOOD, "ports": fast_ports}).rx_ring_frames
    assert fast * (9216 + 80) <= DEFAULT_RX_RING_BYTES < (fast + 1) * (9216 + 80)
    small = config_from_dict({**GOOD, "max_frame_bytes": 1518})
    assert small.rx_ring_frames > 4 * slots  # smaller frames: more of them in the budget
    assert config_from_dict({**GOOD, "rx_ring_frames": 0}).rx_ring_frames == 0
    assert config_from_dict({**GOOD, "rx_ring_frames": 4096}).rx_ring_frames == 4096


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("name", "", "name"),
        ("block", "fcbb:bb00::/33", "block"),
        ("block", "fcbb:bb00::1/32", "block"),
        ("own_usids", ["0"], "own_usids[0]"),
        ("own_usids", ["zz"], "own_usids[0]"),
        ("own_usids", "1001", "own_usids"),
        ("ports", [], "ports"),
        ("ports[0].rate_mbit", 0, "ports[0].rate_mbit"),
        ("ports[0].rate_mbit", "fast", "ports[0].rate_mbit"),
        ("ports[1].buffer_bytes", 10, "ports[1].buffer_bytes"),
        ("ports[1].peer_mac", "02:00", "ports[1].peer_mac"),
        ("ports[0].interface", "x" * 16, "ports[0].interface"),
        ("ports[0].ecn", "yes", "ports[0].ecn"),
        ("ports[1].trim_bytes", MIN_TRIM_BYTES - 1, "ports[1].trim_bytes"),
        ("ports[0].ecn_threshold_bytes", 10**9, "ports[0].ecn_threshold_bytes"),
        ("ports[0].colour", "red", "ports[0].colour"),
        ("ports[0].delay_ns", -1, "ports[0].delay_ns"),
        ("ports[0].delay_ns", 10**9 + 1, "ports[0].delay_ns"),
        ("ports[0].delay_ns", 1.5, "ports[0].delay_ns"),
        ("ports[1].name", "dl0", "ports[1].name"),
        ("ports[1].interface", "v0", "ports[1].interface"),
        ("table", {"3000": "nope"}, "table.3000"),
        ("table", {"1001": "dl0"}, "table.1001"),
        ("stats_interval_s", 5, "stats_interval_s"),
        ("batch_size", 0, "batch_size"),
        ("rx_ring_frames", -1, "rx_ring_frames"),
        ("rx_ring_frames", 65537, "rx_ring_frames"),
        ("rx_ring_frames", "big", "rx_ring_frames"),
        ("typo", 1, "typo"),
    ],
)
def test_bad_field_is_named(path, value, field):
    with pytest.raises(ConfigError) as ei:
        config_from_dict(bad(path, value))
    assert ei.value.field == field
    assert str(ei.value).startswith(field + ":")


@pytest.mark.parametrize("path", ["name", "ports[0].interface", "ports[0].peer_mac",
                                  "ports[0].rate_mbit", "ports[1].buffer_bytes"])  # fmt: skip
def test_missing_required_field_is_named(path):
    with pytest.raises(ConfigError) as ei:
        config_from_dict(bad(path, None, delete=True))
    assert ei.value.field == path
    assert "required" in ei.value.reason


def test_toml_and_json_files_load_the_same(tmp_path):
    j = tmp_path / "s.json"
    j.write_text(json.dumps(GOOD))
    t = tmp_path / "s.toml"
    t.write_text(
        'name = "p0-t0-0"\nblock = "fcbb:bb00::/32"\nown_usids = ["1001"]\n'
        'stats_path = "/tmp/x.json"\n'
        '[[ports]]\nname = "dl0"\ninterface = "v0"\npeer_mac = "02:00:00:00:00:01"\n'
        "rate_mbit = 100\nbuffer_bytes = 262144\nlast_hop = true\n"
        '[[ports]]\nname = "up0"\ninterface = "v1"\npeer_mac = "02:00:00:00:00:02"\n'
        "rate_bps = 1000000000\nbuffer_bytes = 262144\ntrim_bytes = 128\n"
        '[table]\n"3000" = "dl0"\n"0x2001" = "up0"\n'
    )
    assert load_config(j) == load_config(t)


def test_unparsable_file_is_refused(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text("name = [")
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert ei.value.field == "(file)"
    with pytest.raises(ConfigError):
        load_config(tmp_path / "missing.toml")

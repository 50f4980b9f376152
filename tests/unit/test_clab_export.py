"""``mrc-lab export --format containerlab`` against containerlab's documented topology schema.

The checks below are our own, written from the fields of ``schemas/clab.schema.json``
(srl-labs/containerlab at 39ff2b7, read 2026-11-29): top-level and ``topology`` keys, a
node's properties (``additionalProperties: false``: an unknown key is an error there and in
containerlab's strict YAML parsing), the ``linux`` kind, the extended ``veth`` link and the
``vxlan-stitch`` link with their required fields. Then what makes the files one lab: every
node in exactly one file, every link once (a veth) or twice (the two halves of a VXLAN
with the same VNI, each pointing at the other machine).
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path

import pytest
import yaml

from lab.cli import main
from lab.fabric.clab import IMAGE, export, file_name
from lab.fabric.params import LabParams
from lab.fabric.partition import Partition, parse_underlay
from lab.fabric.topology import IFNAME_MAX, Plan

TOP_KEYS = {"name", "prefix", "mgmt", "topology", "settings", "debug"}
TOPOLOGY_KEYS = {"nodes", "groups", "kinds", "defaults", "links"}
NODE_KEYS = set(
    [
        "image",
        "image-pull-policy",
        "restart-policy",
        "kind",
        "license",
        "type",
        "group",
        "startup-config",
        "startup-delay",
        "enforce-startup-config",
        "suppress-startup-config",
        "auto-remove",
        "exec",
        "binds",
        "volumes",
        "ports",
        "env",
        "credentials",
        "env-files",
        "user",
        "hostname",
        "entrypoint",
        "cmd",
        "labels",
        "runtime",
        "mgmt-ipv4",
        "mgmt-ipv6",
        "network-mode",
        "link-apply-mode",
        "cpu",
        "memory",
        "cpu-set",
        "extras",
        "config",
        "stages",
        "dns",
        "certificate",
        "healthcheck",
        "components",
        "aliases",
        "shm-size",
        "cap-add",
        "privileged",
        "cgroupns-mode",
        "cgroup-parent",
        "pid-mode",
        "tmpfs",
        "security-opts",
        "sysctls",
        "devices",
    ]
)
ENDPOINT_KEYS = {"node", "interface", "mac", "ipv4", "ipv6", "vars"}
VETH_KEYS = {"type", "endpoints", "mtu", "ipv4", "ipv6", "vars", "labels"}
VXLAN_KEYS = {"type", "endpoint", "remote", "vni", "dst-port", "src-port", "mtu", "vars", "labels"}
VXLAN_REQUIRED = {"type", "endpoint", "remote", "vni", "dst-port"}
NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9-._]*$")
NODE_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9-._|]*$")
MAC_RE = re.compile(r"^(?:[0-9A-Fa-f]{2}[:-]){5}(?:[0-9A-Fa-f]{2})$")


def _check_schema(doc: dict, out_dir: Path) -> None:
    """One topology file against the schema's fields (raises AssertionError)."""
    assert set(doc) <= TOP_KEYS and {"name", "topology"} <= set(doc)
    assert NAME_RE.match(doc["name"])
    topo = doc["topology"]
    assert set(topo) <= TOPOLOGY_KEYS and "nodes" in topo
    assert topo["links"], "links: minItems 1"
    for name, node in topo["nodes"].items():
        assert NODE_NAME_RE.match(name), name
        assert set(node) <= NODE_KEYS, set(node) - NODE_KEYS
        assert node["kind"] == "linux" and node["image"] == IMAGE
        assert all(isinstance(x, str) for x in node.get("exec", []))
        binds = node.get("binds", [])
        assert len(set(binds)) == len(binds)
        for b in binds:  # relative to the topology file, as containerlab resolves them
            assert (out_dir / b.split(":")[0]).is_file(), b
    for link in topo["links"]:
        if link["type"] == "veth":
            assert set(link) <= VETH_KEYS and len(link["endpoints"]) == 2
            ends = link["endpoints"]
        else:
            assert link["type"] == "vxlan-stitch"
            assert VXLAN_REQUIRED <= set(link) <= VXLAN_KEYS
            assert 1 <= link["vni"] <= 16_777_215 and 1 <= link["dst-port"] <= 65_535
            ipaddress.ip_address(link["remote"])
            ends = [link["endpoint"]]
        for e in ends:
            assert set(e) <= ENDPOINT_KEYS and {"node", "interface"} <= set(e)
            assert MAC_RE.match(e["mac"])
            assert e["node"] in topo["nodes"], f"{e['node']} is not a node of {doc['name']}"
            assert len(e["interface"]) <= IFNAME_MAX


@pytest.mark.parametrize("machines", [2, 4])
def test_export_passes_the_schema_and_is_one_lab(tmp_path: Path, machines: int) -> None:
    plan = Plan(LabParams(name="mrc"))
    part = Partition(plan, machines)
    underlay = parse_underlay(",".join(f"10.0.0.{k + 1}=eth1" for k in range(machines)))
    files = export(part, tmp_path, underlay)
    assert [f.name for f in files] == [file_name("mrc", k) for k in range(machines)]
    docs = [yaml.safe_load(f.read_text()) for f in files]
    for doc in docs:
        _check_schema(doc, tmp_path)
    nodes = [n for d in docs for n in d["topology"]["nodes"]]
    assert sorted(nodes) == sorted(n.name for n in plan.nodes())
    veths, halves = set(), {}
    for k, doc in enumerate(docs):
        for link in doc["topology"]["links"]:
            if link["type"] == "veth":
                key = frozenset((e["node"], e["interface"]) for e in link["endpoints"])
                assert key not in veths
                veths.add(key)
            else:
                halves.setdefault(link["vni"], []).append((k, link))
    for vni, pair in halves.items():
        assert len(pair) == 2, f"VNI {vni} has {len(pair)} halves"
        (ka, la), (kb, lb) = pair
        assert la["remote"] == str(underlay[kb].address) and lb["remote"] == underlay[ka].address
        assert la["dst-port"] == lb["dst-port"] == part.vxlan_port
    assert len(veths) + len(halves) == len(list(plan.links()))
    # the MACs are the plan's: the switches check them (not_my_mac)
    macs = {(e["node"], e["interface"]): e["mac"] for d in docs for lk in d["topology"]["links"]
            for e in lk.get("endpoints", [lk.get("endpoint")])}  # fmt: skip
    port = plan.host_port(0, 0)
    assert macs[(port.node, port.ifname)] == ":".join(f"{b:02x}" for b in port.mac)
    # the switch configs and the plan for mrc-bench are there
    cfg = json.loads((tmp_path / "config" / "switches" / "p0-t0-0.json").read_text())
    assert cfg["ports"] and "netns" not in cfg
    st = json.loads((tmp_path / "config" / "mrc.json").read_text())
    assert st["params"]["planes"] == 8 and st["split"]["machines"] == machines


def test_export_cli_placeholder_and_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "clab"
    assert main(["export", "--machines", "2", "-o", str(out)]) == 0
    text = (out / "mrc-m0.clab.yml").read_text()
    assert "placeholders" in text and "192.0.2.2" in text
    assert "placeholders" in capsys.readouterr().out
    assert main(["export", "-o", str(out)]) == 2
    assert "--machines" in capsys.readouterr().err
    assert main(["export", "--machines", "2", "-o", str(tmp_path / "no" / "such")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["export", "--machines", "3", "--underlay", "10.0.0.1=e,10.0.0.2=e", "-o",
                 str(out)]) == 2  # fmt: skip
    assert "names 2 machines" in capsys.readouterr().err

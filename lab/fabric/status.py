"""What a lab really looks like now: read from the kernel and /proc, never from the state file.

The state file says what *should* exist; status asks each namespace (``ip -j link``,
``tc -j qdisc``, ``nft -j list tables``) what *does*, so a link taken down, a loss rule or a
shaper shows up exactly as it is, whoever made it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lab.fabric.netns import in_netns, netns_exists
from lab.fabric.pyswitch import is_ready
from lab.fabric.state import LabState
from lab.fabric.topology import KIND_HOST, KIND_MGMT, Link, Plan


@dataclass
class NsView:
    """One namespace as the kernel sees it."""

    exists: bool
    links: dict[str, dict[str, Any]] = field(default_factory=dict)  # ifname -> ip -j -s link
    qdiscs: dict[str, dict[str, Any]] = field(default_factory=dict)  # ifname -> root qdisc
    nft_tables: list[str] = field(default_factory=list)


def _json(argv: list[str]) -> Any:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return None


def read_namespace(ns: str, *, with_faults: bool = True) -> NsView:
    if not netns_exists(ns):
        return NsView(exists=False)
    view = NsView(exists=True)
    # Children inherit the thread's namespace: no `ip netns exec` mount dance needed.
    with in_netns(ns):
        for entry in _json(["ip", "-j", "-s", "link", "show"]) or []:
            view.links[entry["ifname"]] = entry
        if with_faults:
            for q in _json(["tc", "-j", "-s", "qdisc", "show"]) or []:
                if q.get("root"):
                    view.qdiscs[q["dev"]] = q
            if shutil.which("nft"):
                data = _json(["nft", "-j", "list", "tables"]) or {}
                for item in data.get("nftables", []):
                    if "table" in item:
                        view.nft_tables.append(item["table"]["name"])
    return view


def read_lab(state: LabState, *, with_faults: bool = True) -> dict[str, NsView]:
    names = list(state.namespaces)
    with ThreadPoolExecutor(max_workers=8) as pool:
        views = pool.map(lambda ns: read_namespace(ns, with_faults=with_faults), names)
    return dict(zip(names, views, strict=True))


@dataclass(frozen=True, slots=True)
class EndState:
    """One interface as the kernel reports it: present, admin state ("up", "down"; "absent"
    when not present), carrier, and the operational state (None when not present)."""

    present: bool
    admin: str
    carrier: bool
    operstate: str | None = None

    @property
    def up(self) -> bool:
        """Administratively up with a carrier: it carries frames."""
        return self.admin == "up" and self.carrier

    def to_json(self) -> dict[str, Any]:
        """``mrc-lab status --json``'s ``a_end``/``b_end`` keys, in their order."""
        out: dict[str, Any] = {
            "present": self.present,
            "admin": self.admin,
            "carrier": self.carrier,
        }
        if self.present:
            out["operstate"] = self.operstate
        return out


def end_state(view: NsView, ifname: str) -> EndState:
    """admin (up/down), carrier (bool), present (bool) of one interface."""
    entry = view.links.get(ifname)
    if entry is None:
        return EndState(present=False, admin="absent", carrier=False)
    flags = entry.get("flags", [])
    return EndState(
        present=True,
        admin="up" if "UP" in flags else "down",
        carrier="LOWER_UP" in flags,
        operstate=entry.get("operstate", "UNKNOWN"),
    )


def loss_table(plan: Plan, ifname: str) -> str:
    """The nft table (family netdev) a loss fault on ``ifname`` lives in."""
    return f"{plan.params.name}-loss-{ifname.removeprefix(plan.prefix)}"


def end_faults(state: LabState, node: str, view: NsView, ifname: str) -> list[str]:
    plan = state.plan
    faults = []
    if loss_table(plan, ifname) in view.nft_tables:
        faults.append("loss")
    q = view.qdiscs.get(ifname)
    if q and q.get("kind") == "tbf":
        rate = q.get("options", {}).get("rate")
        is_switch = plan.parse_node(node).kind not in (KIND_HOST, KIND_MGMT)
        base = state.switch_mode == "kernel" and is_switch
        if not (base and rate == plan.params.rate_bps // 8):  # tc -j reports bytes/s
            faults.append(f"shaped {_rate_text(rate)}" if rate else "shaped")
    return faults


def _rate_text(rate_bytes: int | None) -> str:
    if not rate_bytes:
        return "?"
    bits = rate_bytes * 8
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits >= scale:
            return f"{bits / scale:g}{unit}"
    return f"{bits}bit"


REMOTE_END = EndState(present=False, admin="remote", carrier=False)


def link_status(state: LabState, link: Link, views: dict[str, NsView]) -> dict[str, Any]:
    """A link as the kernel shows its two ends (of a split lab: an end on another machine is
    ``admin: remote``, and the link is up when the end here is)."""
    plan = state.plan
    va = views.get(plan.namespace(link.a.node), NsView(False))
    vb = views.get(plan.namespace(link.b.node), NsView(False))
    a_here, b_here = state.is_local(link.a.node), state.is_local(link.b.node)
    a = end_state(va, link.a.ifname) if a_here else REMOTE_END
    b = end_state(vb, link.b.ifname) if b_here else REMOTE_END
    up = (a.up or not a_here) and (b.up or not b_here)
    faults = end_faults(state, link.a.node, va, link.a.ifname) + end_faults(
        state, link.b.node, vb, link.b.ifname
    )
    return {
        "kind": link.kind,
        "a": link.a.node,
        "a_ifname": link.a.ifname,
        "b": link.b.node,
        "b_ifname": link.b.ifname,
        "state": "up" if up else "down",
        "a_end": a.to_json(),
        "b_end": b.to_json(),
        "faults": sorted(set(faults)),
    }


def node_status(state: LabState, node, views: dict[str, NsView]) -> dict[str, Any]:
    plan = state.plan
    ns = plan.namespace(node.name)
    view = views.get(ns, NsView(False))
    out: dict[str, Any] = {
        "name": node.name,
        "kind": node.kind,
        "namespace": ns,
        "exists": view.exists,
        "pid": None,
    }
    if node.kind in (KIND_HOST, KIND_MGMT):
        out["up"] = view.exists
        return out
    ports = [end_state(view, p.ifname) for p in plan.switch_ports(node)]
    if state.switch_mode == "kernel":
        sid = end_state(view, plan.ifname("sid"))
        out["up"] = view.exists and sid.admin == "up" and any(p.admin == "up" for p in ports)
    else:
        rec = state.processes.get(node.name)
        alive = bool(rec and rec.is_alive())
        if alive and rec is not None and rec.control is not None:
            # a switch of a shared process: its process runs, but is the switch running?
            alive = is_ready(rec)
        out["pid"] = rec.pid if rec else None
        out["up"] = view.exists and alive
    out["ports_up"] = sum(1 for p in ports if p.up)
    out["ports"] = len(ports)
    return out


def status(state: LabState, *, with_faults: bool = True) -> dict[str, Any]:
    views = read_lab(state, with_faults=with_faults)
    # a part of a split lab: the nodes on this machine, the links with an end here
    nodes = [node_status(state, n, views) for n in state.nodes()]
    links = [link_status(state, link, views) for link in state.links()]
    out = {
        "name": state.name,
        "phase": state.phase,
        "switch_mode": state.switch_mode,
        "params": state.params.to_dict(),
        "state_file": str(state.path),
        "nodes": nodes,
        "links": links,
        "counts": {
            "nodes": len(nodes),
            "nodes_up": sum(1 for n in nodes if n["up"]),
            "links": len(links),
            "links_up": sum(1 for x in links if x["state"] == "up"),
            "links_with_faults": sum(1 for x in links if x["faults"]),
        },
    }
    if state.partition is not None:
        out["machines"] = state.partition.machines
        out["here"] = state.here
    return out


def format_status(st: dict[str, Any], verbose: bool = False) -> str:
    c = st["counts"]
    lines = [
        f"lab {st['name']} ({st['switch_mode']} switches, {st['phase']}): "
        f"{c['nodes_up']}/{c['nodes']} nodes up, {c['links_up']}/{c['links']} links up"
        + (f", {c['links_with_faults']} with faults" if c["links_with_faults"] else ""),
        "",
        f"{'NODE':<14} {'KIND':<5} {'NAMESPACE':<22} {'PID':>8} {'PORTS':>7}  STATE",
    ]
    for n in st["nodes"]:
        if not verbose and n["up"] and n["kind"] in (KIND_HOST, KIND_MGMT):
            continue
        ports = f"{n['ports_up']}/{n['ports']}" if "ports" in n else ""
        pid = str(n["pid"]) if n["pid"] else "-"
        lines.append(
            f"{n['name']:<14} {n['kind']:<5} {n['namespace']:<22} {pid:>8} {ports:>7}  "
            + ("up" if n["up"] else "DOWN")
        )
    if not verbose:
        lines.append("(hosts and mgmt that are up are hidden; -v shows every node)")
    lines += ["", f"{'LINK':<28} {'KIND':<8} STATE"]
    shown = 0
    for x in st["links"]:
        if not verbose and x["state"] == "up" and not x["faults"]:
            continue
        shown += 1
        why = ""
        if x["state"] == "down":
            ends = []
            for side in ("a", "b"):
                e = x[f"{side}_end"]
                if e["admin"] != "up":
                    ends.append(f"{x[side]} {x[side + '_ifname']} admin {e['admin']}")
                elif not e["carrier"]:
                    ends.append(f"{x[side]} {x[side + '_ifname']} no carrier")
            why = " (" + "; ".join(ends) + ")" if ends else ""
        faults = (" [" + ", ".join(x["faults"]) + "]") if x["faults"] else ""
        name = f"{x['a']} -- {x['b']}"
        lines.append(f"{name:<28} {x['kind']:<8} {x['state'].upper()}{why}{faults}")
    if not verbose:
        lines.append(
            "(all links up, no faults)" if shown == 0 else "(healthy links hidden; -v shows all)"
        )
    return "\n".join(lines)


# --- counters ----------------------------------------------------------------------------


def switch_stats(state: LabState, node_name: str) -> dict[str, Any]:
    """Counters of one switch: the mrc-switch stats file (python) or the kernel's."""
    plan = state.plan
    node = plan.parse_node(node_name)
    ns = state.namespace(node_name)  # of a split lab: LabError naming its machine if not here
    if state.switch_mode == "python":
        rec = state.processes.get(node_name)
        data: dict[str, Any] = {"node": node_name, "source": "mrc-switch"}
        if rec and rec.stats and os.path.exists(rec.stats):
            with open(rec.stats) as f:
                try:
                    data["stats"] = json.load(f)
                except ValueError:
                    data["stats"] = None  # caught mid-write: the next refresh is whole
        else:
            data["stats"] = None
        return data
    view = read_namespace(ns)
    ports = {}
    names = (
        [p.ifname for p in plan.switch_ports(node)]
        if node.kind
        not in (
            KIND_HOST,
            KIND_MGMT,
        )
        else list(view.links)
    )
    for ifname in names:
        entry = view.links.get(ifname, {})
        s64 = entry.get("stats64", {})
        q = view.qdiscs.get(ifname, {})
        ports[ifname] = {
            "rx_packets": s64.get("rx", {}).get("packets"),
            "rx_bytes": s64.get("rx", {}).get("bytes"),
            "tx_packets": s64.get("tx", {}).get("packets"),
            "tx_bytes": s64.get("tx", {}).get("bytes"),
            "tx_dropped": s64.get("tx", {}).get("dropped"),
            "qdisc": q.get("kind"),
            "qdisc_drops": q.get("drops"),
            "qdisc_backlog_bytes": q.get("backlog"),
        }
    return {"node": node_name, "source": "kernel", "ports": ports}


def format_stats(data: dict[str, Any]) -> str:
    if data["source"] == "kernel":
        lines = [f"{data['node']} (kernel switch counters: ip -s link, tc -s qdisc)"]
        lines.append(
            f"  {'PORT':<12} {'RX PKTS':>10} {'RX BYTES':>12} {'TX PKTS':>10} {'TX BYTES':>12}"
            f" {'QDISC DROPS':>11} {'BACKLOG':>8}"
        )
        for name, p in data["ports"].items():
            lines.append(
                f"  {name:<12} {_n(p['rx_packets']):>10} {_n(p['rx_bytes']):>12} "
                f"{_n(p['tx_packets']):>10} {_n(p['tx_bytes']):>12} {_n(p['qdisc_drops']):>11} "
                f"{_n(p['qdisc_backlog_bytes']):>8}"
            )
        return "\n".join(lines)
    if data["stats"] is None:
        return f"{data['node']}: no stats yet (switch not running or not ready)"
    st = data["stats"]
    head = (
        f"{data['node']} (mrc-switch pid {st.get('pid')}, up {st.get('uptime_s', 0):.0f} s, "
        f"{st.get('table_entries')} routes, CPU {st.get('cpu_user_s', 0) + st.get('cpu_system_s', 0):.1f} s; "
        "--json: the whole stats file)\n"
    )
    return head + _port_table(st) + _pfc_table(st)


def _port_table(st: dict[str, Any]) -> str:
    """One line per port and a total: link, traffic, queue, ECN marks, trims and drops with
    their reasons (the counters a reader compares; docs/switch.md names each)."""
    cols = f"  {'PORT':<8} {'PEER':<10} {'LINK':<5} {'RX PKTS':>9} {'TX PKTS':>9} {'TX BYTES':>12} " \
        f"{'QUEUE':>7} {'MAX Q':>7} {'ECN':>7} {'TRIMS':>7} {'DROPS':>7}  REASONS"  # fmt: skip
    lines = [cols]
    rows = [(n, p) for n, p in st.get("ports", {}).items()]
    tot = dict(st.get("totals", {}), peer="", up=None, queue_bytes=None, max_queue_bytes=None)
    for name, p in [*rows, ("total", tot)]:
        reasons = ", ".join(f"{k} {v}" for k, v in (p.get("drops") or {}).items() if v)
        link = "" if p.get("up") is None else ("up" if p["up"] else "DOWN")
        lines.append(
            f"  {name:<8} {p.get('peer') or '':<10} {link:<5} {_n(p.get('rx_packets')):>9} "
            f"{_n(p.get('tx_packets')):>9} {_n(p.get('tx_bytes')):>12} "
            f"{_n(p.get('queue_bytes')):>7} {_n(p.get('max_queue_bytes')):>7} "
            f"{_n(p.get('ecn_marks')):>7} {_n(p.get('trims')):>7} {_n(p.get('drops_total')):>7}  "
            f"{reasons}"
        )
    return "\n".join(lines) + "\n"


def _pfc_table(st: dict[str, Any]) -> str:
    """Priority flow control per port, first (a switch with PFC only): what a reader looks
    for when a lossless flow stalls."""
    if not (st.get("totals") or {}).get("pfc"):
        return ""
    keys = ("pause_tx", "pause_rx", "paused_s", "lossless_drops", "watchdog_trips")
    lines = [f"  {'PFC PORT':<12} {'PEER':<10} " + " ".join(f"{k.upper():>14}" for k in keys)]
    rows = [(n, p.get("peer", ""), p.get("pfc") or {}) for n, p in st.get("ports", {}).items()]
    rows.append(("total", "", st["totals"]["pfc"]))
    for name, peer, pfc in rows:
        lines.append(f"  {name:<12} {peer:<10} " + " ".join(f"{_n(pfc.get(k)):>14}" for k in keys))
    return "\n".join(lines) + "\n"


def _n(v: Any) -> str:
    return "-" if v is None else str(v)

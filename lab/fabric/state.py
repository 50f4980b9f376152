"""The state file of a lab: what it created, so that ``down`` removes exactly that.

``/run/mrc-lab/<name>.json`` is written *before* anything is created (listing every
namespace the lab is about to create) and rewritten as things are created (switch process
PIDs with their command lines), so ``mrc-lab down`` works after a crash at any point.
``/run`` is a tmpfs: after a reboot both the namespaces and the state files are gone.

Other tools (the benchmarks, the NIC) read a running lab through :func:`load`::

    from lab.fabric import state
    lab = state.load("mrc")
    lab.plan.host_info(0)            # ports, MACs, peer switch MACs, addresses of h0
    lab.plan.dest_template(0, 3)     # mrcnic.wire.usid.DestTemplate h0 -> h3
    lab.namespace("h0")              # "mrc-h0"
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from lab.fabric.netns import LabError
from lab.fabric.params import NAME_RE, LabParams, ParamError
from lab.fabric.partition import Partition
from lab.fabric.topology import Link, Node, Plan

STATE_VERSION = 1


class NoSuchLab(LabError):
    """No state file for that name: the command line names a lab that is not up here."""


def state_dir() -> Path:
    """``/run/mrc-lab`` (``MRC_LAB_STATE_DIR`` overrides it, e.g. for tests without root)."""
    return Path(os.environ.get("MRC_LAB_STATE_DIR", "/run/mrc-lab"))


def state_path(name: str) -> Path:
    return state_dir() / f"{name}.json"


def run_dir(name: str) -> Path:
    """Per-lab directory for switch configs, stats files and logs (removed by ``down``)."""
    return state_dir() / name


@dataclass
class ProcessRecord:
    """A process the lab started: ``down`` signals it only if /proc/PID/cmdline still matches."""

    node: str
    pid: int
    argv: list[str]
    config: str
    stats: str | None = None
    log: str | None = None
    started_at: float = 0.0
    # a process serving several switches (mrc-lab up --switch-procs N): its control socket,
    # through which one switch is stopped and started (several records share the PID)
    control: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {
            "node": self.node,
            "pid": self.pid,
            "argv": self.argv,
            "config": self.config,
            "stats": self.stats,
            "log": self.log,
            "started_at": self.started_at,
        }
        if self.control is not None:
            d["control"] = self.control
        return d

    def is_alive(self) -> bool:
        """The PID exists and still runs the command we started (PIDs get reused)."""
        try:
            with open(f"/proc/{self.pid}/cmdline", "rb") as f:
                raw = f.read()
        except OSError:
            return False
        args = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
        # The interpreter may prefix the script ("python .../mrc-switch --config F"): require
        # the recorded arguments from --config on, in order, at the end of the command line.
        tail = self.argv[self.argv.index("--config") :] if "--config" in self.argv else self.argv
        return len(args) >= len(tail) and args[-len(tail) :] == tail


@dataclass
class LabState:
    name: str
    params: LabParams
    phase: str = "creating"  # creating -> up; "failed" if bring-up stopped half way
    namespaces: list[str] = field(default_factory=list)  # planned, in creation order
    processes: dict[str, ProcessRecord] = field(default_factory=dict)
    created_at: float = 0.0
    up_s: float | None = None
    error: str | None = None
    # a part of a lab split over machines (mrc-lab up --machine K / --machines N):
    # {"machines": N, "here": [K, ...], "underlay": [{address, iface}, ...], "vxlan_port",
    #  "vni_base", "stitch_netns": {"K": namespace or None (the root namespace)},
    #  "simulated": bool}; None for a lab on one machine
    split: dict[str, Any] | None = None
    # interfaces made outside the lab's namespaces ([namespace or None, ifname]): the stitch
    # ends and VXLAN devices in a machine's root namespace; `down` deletes exactly these
    outside: list[list[Any]] = field(default_factory=list)

    @cached_property
    def plan(self) -> Plan:
        return Plan(self.params)

    @cached_property
    def partition(self) -> Partition | None:
        if self.split is None:
            return None
        return Partition(
            self.plan, int(self.split["machines"]), int(self.split["vxlan_port"]),
            int(self.split["vni_base"]),
        )  # fmt: skip

    @property
    def here(self) -> list[int]:
        """The machines whose parts this state file holds ([0] for a lab on one machine)."""
        return [int(k) for k in self.split["here"]] if self.split else [0]

    def is_local(self, node: str) -> bool:
        part = self.partition
        return part is None or part.machine_of(node) in self.here

    def require_local(self, node: str) -> None:
        """LabError saying where ``node`` lives when its part is on another machine."""
        part = self.partition
        if part is None or self.is_local(node):
            return
        k = part.machine_of(node)
        u = self.split["underlay"][k] if self.split else {}
        raise ParamError(
            f"{node} is on machine {k} of lab {self.name} (underlay {u.get('address')}); this "
            f"machine holds part {', '.join(map(str, self.here))}: run the command on machine {k}"
        )

    def switches(self) -> list[Node]:
        """The switches whose namespaces are on this machine."""
        return [n for n in self.plan.switches() if self.is_local(n.name)]

    def links(self) -> list[Link]:
        """The links with at least one end on this machine."""
        return [
            lk for lk in self.plan.links() if self.is_local(lk.a.node) or self.is_local(lk.b.node)
        ]

    def nodes(self) -> list[Node]:
        return [n for n in self.plan.nodes() if self.is_local(n.name)]

    @property
    def switch_mode(self) -> str:
        return self.params.switch

    @property
    def path(self) -> Path:
        return state_path(self.name)

    @property
    def run_dir(self) -> Path:
        return run_dir(self.name)

    def namespace(self, node: str) -> str:
        self.plan.parse_node(node)  # ParamError for a node that is not in this lab
        self.require_local(node)
        return self.plan.namespace(node)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "name": self.name,
            "params": self.params.to_dict(),
            "phase": self.phase,
            "namespaces": self.namespaces,
            "processes": {k: v.to_dict() for k, v in self.processes.items()},
            "run_dir": str(self.run_dir),
            "created_at": self.created_at,
            "up_s": self.up_s,
            "error": self.error,
            **({"split": self.split, "outside": self.outside} if self.split else {}),
        }

    def save(self) -> None:
        """Atomic rewrite (write a temporary file, then rename over the old one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".json.tmp{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump(self.to_dict(), f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LabState:
        if data.get("version") != STATE_VERSION:
            raise LabError(f"state file version {data.get('version')!r} is not {STATE_VERSION}")
        procs = {k: ProcessRecord(**v) for k, v in data.get("processes", {}).items()}
        return cls(
            name=data["name"],
            params=LabParams.from_dict(data["params"]),
            phase=data.get("phase", "creating"),
            namespaces=list(data.get("namespaces", [])),
            processes=procs,
            created_at=data.get("created_at", 0.0),
            up_s=data.get("up_s"),
            error=data.get("error"),
            split=data.get("split"),
            outside=[list(x) for x in data.get("outside", [])],
        )


def new_state(params: LabParams) -> LabState:
    return LabState(name=params.name, params=params, created_at=time.time())


def load(name: str) -> LabState:
    """The state of a running (or half-built) lab; LabError when there is none."""
    if not NAME_RE.match(name):
        raise NoSuchLab(f"{name!r} is not a lab name ('mrc' + up to 6 [a-z0-9])")
    path = state_path(name)
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise NoSuchLab(
            f"no lab named {name!r} (no state file {path}); start one with `mrc-lab up --lab {name}`"
        ) from None
    except (OSError, ValueError) as e:
        raise LabError(f"cannot read state file {path}: {e}") from None
    return LabState.from_dict(data)


def exists(name: str) -> bool:
    return state_path(name).exists()


def list_labs() -> list[str]:
    d = state_dir()
    if not d.is_dir():
        return []
    return sorted(p.stem for p in d.glob("*.json") if NAME_RE.match(p.stem))

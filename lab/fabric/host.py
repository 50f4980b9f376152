"""A host of a running lab, as a NIC process sees it: its Device, ports, namespace and the
QP configuration that suits the lab (base RTT, RoCEv2 port binding).

Lab and transport policy lives here, not in the asyncio shell (:mod:`mrcnic.io.aio`), which
only moves bytes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from lab.fabric import state as lab_state
from lab.fabric.netns import LabError
from lab.fabric.nicstats import PublishingNic
from lab.fabric.params import frame_time_s
from mrcnic import plugins
from mrcnic.io.aio import AioNic
from mrcnic.io.realtime import RealtimeError, enter_realtime, is_realtime
from mrcnic.transport.qp_types import NetConfig, PortAddr, QpConfig
from mrcnic.verbs import Device


def lab_frame_time_s(params: Any, mtu_bytes: int = 4096) -> float:
    """The time a full data frame takes on one of the lab's links."""
    return frame_time_s(params.rate_mbit, mtu_bytes)


def lab_base_rtt_s(params: Any, mtu_bytes: int = 4096, software_s: float = 0.6e-3) -> float:
    """Unloaded RTT between hosts under different T0s of a lab: a full data frame and a
    control frame, store-and-forward over four links each way, plus ``software_s`` for the
    software switches and NICs on the way (measured: ``mrc-bench lat``), plus the
    propagation delay of the two switch-to-switch links each way (``delay_us``)."""
    rate = params.rate_mbit * 1e6
    ctrl_bits = 140 * 8
    propagation_s = 4 * getattr(params, "delay_us", 0.0) * 1e-6
    return (
        4 * lab_frame_time_s(params, mtu_bytes) + 4 * ctrl_bits / rate + software_s + propagation_s
    )


@dataclass
class LabHost:
    """What a NIC on host ``h`` of a running lab needs, read from the lab's state file."""

    lab: Any  # lab.fabric.state.LabState
    host: int
    device: Device
    ifnames: list[str]
    namespace: str
    base_rtt_s: float

    @classmethod
    def load(cls, lab_name: str, host: int | str, seed: int | None = None) -> LabHost:
        return cls.from_state(lab_state.load(lab_name), host, seed)

    @classmethod
    def from_state(cls, st: Any, host: int | str, seed: int | None = None) -> LabHost:
        plan = st.plan
        h = host if isinstance(host, int) else plan.parse_node(host).index
        if not 0 <= h < plan.host_count:
            raise ValueError(f"host {host} is not in lab {st.name} (h0..h{plan.host_count - 1})")
        st.require_local(plan.host_name(h))  # a split lab: run this side on the host's machine
        ports = [plan.host_port(h, p) for p in range(plan.params.planes)]
        net = NetConfig(plan.shape, h, tuple(PortAddr(pt.mac, pt.peer_mac) for pt in ports))
        rate = plan.params.rate_mbit * 1e6
        software = 0.25e-3 if st.params.switch == "kernel" else 0.8e-3
        dev = Device(net, rate, seed=seed)
        return cls(
            lab=st,
            host=h,
            device=dev,
            ifnames=[pt.ifname for pt in ports],
            namespace=plan.namespace(plan.host_name(h)),
            base_rtt_s=lab_base_rtt_s(plan.params, software_s=software),
        )

    def qp_config(self, seed: int | None = None, *, mrc: bool = True, **overrides: Any) -> QpConfig:
        """A QP config for this host; an MRC QP's takes the path policy, plane share and CC
        the command chose (``--path-policy``, ``--plane-share``, ``--cc``, ``--plugin``,
        exported to the environment by mrc-bench and mrc-lab: mrcnic.plugins)."""
        kw: dict[str, Any] = {"base_rtt_s": self.base_rtt_s}
        if seed is not None:
            kw["seed"] = seed
        kw.update(overrides)
        cfg = QpConfig(**kw)
        return plugins.choice_from_env().apply(cfg) if mrc else cfg

    def transport_qp_config(self, transport: str, index: int, seed: int | None = None) -> QpConfig:
        """The config of this host's ``index``-th QP of ``transport``.  RoCEv2 QPs are bound
        to port ``index mod planes``, as multi-port RoCEv2 NICs are deployed (one rail per QP;
        the fabric's ECMP hash then picks the T1); MRC QPs spray over every port."""
        if transport == "rocev2":
            opts: tuple[tuple[str, object], ...] = (("port", index % len(self.ifnames)),)
            if getattr(self.lab.params, "pfc", False):  # the lab has a lossless class
                opts += (("lossless", True),)
            return self.qp_config(seed=seed, mrc=False, cc_options=opts)
        return self.qp_config(seed=seed)

    def nic(self, in_namespace: bool | None = None, **kw: Any) -> AioNic:
        """An :class:`AioNic` on this host's ports.  Sockets are opened in the host's namespace
        unless this process already runs there (``in_namespace`` None: detected).  While open
        it publishes its QPs into the lab's run directory (:mod:`lab.fabric.nicstats`)."""
        if in_namespace is None:
            # a lab deployed by containerlab (mrc-lab export): the node is this container,
            # its ports are in the namespace we run in; no /run/netns names them
            split = getattr(self.lab, "split", None) or {}
            in_namespace = bool(split.get("containerlab")) or _current_netns_is(self.namespace)
        # it publishes its QPs for `mrc-lab top` while open (lab/fabric/nicstats.py)
        run_dir = getattr(self.lab, "run_dir", None)
        pub = None
        if run_dir is not None:
            pub = {"run_dir": str(run_dir), "lab": getattr(self.lab, "name", None),
                   "host": f"h{self.host}", "planes": len(self.ifnames)}  # fmt: skip
        netns = None if in_namespace else self.namespace
        params = getattr(self.lab, "params", None)
        if getattr(params, "realtime", False) and not is_realtime():
            try:
                enter_realtime()  # a real-time lab: its NICs as its switches (up --realtime)
            except RealtimeError as e:
                raise LabError(f"lab {getattr(self.lab, 'name', '?')} is real-time: {e}") from e
        return PublishingNic(self.device, self.ifnames, netns=netns, publish=pub, **kw)


def _current_netns_is(name: str) -> bool:
    try:
        return os.stat("/proc/thread-self/ns/net").st_ino == os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return False

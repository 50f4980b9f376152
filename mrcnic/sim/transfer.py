"""mrc-sim: the real MRC queue pairs over a deterministic, virtual-time simulated fabric.

No root, no sockets: ``mrcnic.sim.fabric`` models the planes, paths and queues; this module
sets up two hosts, their queue pairs (MRC, or the RoCEv2 baseline of ``mrcnic.rocev2.qp``),
runs one transfer with the scheduled failures, verifies the destination bytes and reports.
The manual (every flag, the JSON keys) is docs/sim.md.

    mrc-sim --planes 8 --t1 4 --size 256M --loss 0.001 \\
            --fail 3@10ms --heal 3@200ms --seed 7 --json
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import random
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import cast

from mrcnic import plugins
from mrcnic.cliflags import deprecated, loss_arg, rate_with_unit
from mrcnic.faultplan import parse_steps
from mrcnic.optional import MissingExtra
from mrcnic.rocev2.dcqcn import REFERENCE_PORT_BPS
from mrcnic.rocev2.qp import IB_TIMEOUT_UNIT_S, RoceConfig, RoceQueuePair
from mrcnic.sim import workload_cli
from mrcnic.sim.clos import WORKLOADS, ClosSpec, run_permutation
from mrcnic.sim.fabric import (
    CTRL_FRAME_BYTES,
    DATA_OVERHEAD_BYTES,
    Fabric,
    FabricSpec,
    host_net,
)
from mrcnic.sim.pump import Pump, endpoint_for
from mrcnic.sim.scale import SCALES, default_scale
from mrcnic.transport.ev import EvConfig, EvStateChanged
from mrcnic.transport.evprobe import EvProbeDesk
from mrcnic.transport.memory import MemoryTable
from mrcnic.transport.qp import QueuePair
from mrcnic.transport.qp_types import (
    DEFAULT_MAX_QPS,
    ImmReceived,
    QpConfig,
    QpErrorEvent,
    WcStatus,
    WriteCompleted,
    seeded,
)
from mrcnic.units import parse_rate as parse_rate  # re-exported: mrcnic.sim.transfer.parse_*
from mrcnic.units import parse_size as parse_size
from mrcnic.units import parse_time, rate_arg, size_arg, size_text, time_arg

TRANSPORTS = ("mrc", "rocev2")
ROCEV2_PORT_POLICIES = ("rail", "hash")
# a queue pair of either transport (they share the sans-I/O surface mrcnic.sim.pump drives)
Endpoint = QueuePair | RoceQueuePair


@dataclass(frozen=True, slots=True)
class Fault:
    """``kind`` path|plane|port, ``index`` (path = plane * paths_per_plane + t1), ``time_s``."""

    kind: str
    index: int
    time_s: float
    up: bool

    @classmethod
    def parse(cls, text: str, up: bool) -> Fault:
        m = re.fullmatch(r"\s*(?:(path|plane|port):)?(\d+)@(.+)", text)
        if not m:
            raise ValueError(f"bad fault {text!r} (examples: 3@10ms, plane:3@10ms, port:3@10ms)")
        return cls(m.group(1) or "path", int(m.group(2)), parse_time(m.group(3)), up)


@dataclass(frozen=True, slots=True)
class SimConfig:
    fabric: FabricSpec = field(default_factory=FabricSpec)
    size: int = 16 << 20
    msg_size: int = 1 << 20
    transport: str = "mrc"  # mrc | rocev2
    qps: int | None = None  # default: 1 for mrc, one per plane for rocev2
    rocev2_ports: str = "rail"  # rocev2: QP i on port i % planes (rail) or hashed (hash)
    rocev2_timeout: int | None = None  # rocev2: IB local ACK timeout exponent; None: auto
    rocev2_options: tuple[tuple[str, object], ...] = ()  # rocev2: RoceConfig fields by name
    mtu: int = 4096
    cc: str = "nscc"
    evs: int = 128
    path_policy: str = "mrc"  # mrcnic.transport.path_policy: mrc, oblivious, reps, ecmp, ...
    plane_share: str = "equal"  # equal | capacity
    faults: tuple[Fault, ...] = ()
    max_time_s: float = 60.0
    timeline_s: float | None = None  # bin width of the goodput timeline in the result
    seed: int = 1


def worst_rtt_s(spec: FabricSpec, mtu: int) -> float:
    """The RTT with every data queue on the way full (fabric path and last hop; ACKs travel
    in the high-priority class and never queue behind data)."""
    q = spec.queue_bytes * 8
    return base_rtt_s(spec, mtu) + q / spec.path_rate + q / spec.port_rate_bps


def rocev2_auto_timeout(spec: FabricSpec, mtu: int) -> int:
    """The IB local ACK timeout exponent an operator would pick for this fabric at its most
    aggressive: the smallest one whose lab-scaled value exceeds the worst-case RTT (a
    shorter one fires spuriously whenever the buffers fill; docs/design/rocev2.md)."""
    scale = REFERENCE_PORT_BPS / spec.port_rate_bps
    worst = worst_rtt_s(spec, mtu)
    n = 1
    while n < 31 and IB_TIMEOUT_UNIT_S * (1 << n) * scale <= worst:
        n += 1
    return n


def rocev2_config(base: RoceConfig, options: Sequence[tuple[str, object]]) -> RoceConfig:
    """``base`` with RoceConfig fields set by name (``--rocev2-option``); an unknown name is
    a ValueError."""
    types = {f.name: str(f.type) for f in fields(RoceConfig)}
    for k, v in options:
        if k not in types:
            raise ValueError(
                f"unknown RoCEv2 option {k!r} (a RoceConfig field, docs/design/rocev2.md)"
            )
        _check_option_type(k, v, types[k])
    return replace(base, **dict(options))  # type: ignore[arg-type]


def _check_option_type(name: str, value: object, annotation: str) -> None:
    """A ValueError when ``value`` is not of the kind RoceConfig's field ``name`` holds."""
    kinds = {k.strip() for k in annotation.split("|")}
    if "bool" in kinds:
        ok, want = isinstance(value, bool), "true or false"
    elif "int" in kinds:
        ok, want = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif "float" in kinds:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        ok = ok and math.isfinite(value)  # type: ignore[arg-type]
        want = "a finite number"
    elif "str" in kinds:
        ok, want = isinstance(value, str), "a word"
    else:
        ok, want = False, "set from Python (it is not a plain value)"
    if not ok:
        raise ValueError(f"--rocev2-option {name}={value!r}: {name} is {want}")


def parse_rocev2_option(text: str) -> tuple[str, object]:
    """``NAME=VALUE`` -> (name, value): true/false, an int, a float, or else the string."""
    name, sep, raw = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"bad --rocev2-option {text!r}: NAME=VALUE (example: bdp_window=true)")
    v = raw.strip()
    value: object
    if v.lower() in ("true", "false"):
        value = v.lower() == "true"
    else:
        try:
            value = int(v)
        except ValueError:
            try:
                value = float(v)
            except ValueError:
                value = v
    return name.strip(), value


def base_rtt_s(spec: FabricSpec, mtu: int) -> float:
    """Unloaded RTT of a full data packet and its ACK (three store-and-forward links)."""
    data = (mtu + DATA_OVERHEAD_BYTES) * 8
    ctrl = CTRL_FRAME_BYTES * 8
    return (
        2 * (data / spec.port_rate_bps)
        + data / spec.path_rate
        + 2 * (ctrl / spec.port_rate_bps)
        + ctrl / spec.path_rate
        + 2 * spec.prop_s
    )


class Simulation:
    """One transfer from h0 to h1 over the simulated fabric."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        spec = cfg.fabric
        self.fabric = Fabric(spec, self._deliver)
        shape = spec.shape
        self.base_rtt_s = base_rtt_s(spec, cfg.mtu)
        self.memories = [MemoryTable(cfg.seed * 2 + 1), MemoryTable(cfg.seed * 2 + 2)]
        self.endpoints: list[dict[int, Endpoint]] = [{}, {}]
        self.pump = Pump(self.fabric, self._on_event)
        nets = [host_net(shape, h) for h in range(2)]
        # each host's QP 0x2 (EV probes), which finds the QP an answer names in endpoints
        self.desks = [EvProbeDesk(n, eps.get) for n, eps in zip(nets, self.endpoints, strict=True)]
        line = spec.capacity_bps()
        if cfg.transport not in TRANSPORTS:
            raise ValueError(
                f"unknown transport {cfg.transport!r} (one of {', '.join(TRANSPORTS)})"
            )
        if cfg.rocev2_ports not in ROCEV2_PORT_POLICIES:
            raise ValueError(f"unknown rocev2 port policy {cfg.rocev2_ports!r} (rail or hash)")
        qps = cfg.qps or (1 if cfg.transport == "mrc" else spec.planes)
        self.rocev2_timeout = cfg.rocev2_timeout or rocev2_auto_timeout(spec, cfg.mtu)
        pairs: list[tuple[Endpoint, Endpoint]] = []
        for i in range(qps):
            qa, qb = 0x100 + i, 0x200 + i
            if cfg.transport == "mrc":
                qcfg = QpConfig(
                    mtu_bytes=cfg.mtu,
                    ev=EvConfig(
                        ev_count=max(cfg.evs, spec.planes),
                        path_policy=cfg.path_policy,
                        plane_share=cfg.plane_share,
                    ),
                    cc=cfg.cc,
                    base_rtt_s=self.base_rtt_s,
                    seed=cfg.seed + i,
                )
                a: Endpoint = QueuePair(qa, nets[0], self.memories[0], line / qps, seeded(qcfg, qa))
                b: Endpoint = QueuePair(qb, nets[1], self.memories[1], line / qps, seeded(qcfg, qb))
            else:  # rocev2: one QP per rail as deployed, or ports by hash; T1 by ECMP hash
                rcfg = RoceConfig(
                    mtu_bytes=cfg.mtu,
                    base_rtt_s=self.base_rtt_s,
                    port=i % spec.planes if cfg.rocev2_ports == "rail" else None,
                    ecmp_seed=cfg.seed,
                    local_ack_timeout=self.rocev2_timeout,
                    seed=cfg.seed + i,
                )
                if cfg.rocev2_options:
                    rcfg = rocev2_config(rcfg, cfg.rocev2_options)
                port = spec.port_rate_bps  # a one-path QP's line rate: its port's
                a = RoceQueuePair(qa, nets[0], self.memories[0], port, seeded(rcfg, qa))
                b = RoceQueuePair(qb, nets[1], self.memories[1], port, seeded(rcfg, qb))
            a.connect(b.local_attributes())
            b.connect(a.local_attributes())
            self.endpoints[0][qa] = a
            self.endpoints[1][qb] = b
            pairs.append((a, b))
        self.pairs = pairs
        # workload: random source, split into messages round-robin over the QPs
        rng = random.Random(cfg.seed)
        chunk = 1 << 20
        self.src = b"".join(
            rng.randbytes(min(chunk, cfg.size - o)) for o in range(0, cfg.size, chunk)
        )
        self.dst = bytearray(cfg.size)
        self.mr = self.memories[1].register(self.dst)
        self.messages = 0
        view = memoryview(self.src)
        for k, off in enumerate(range(0, cfg.size, cfg.msg_size)):
            n = min(cfg.msg_size, cfg.size - off)
            a, _ = pairs[k % qps]
            last = off + n >= cfg.size
            a.post_write(
                k, view[off : off + n], self.mr.base_va + off, self.mr.rkey, imm=k if last else None
            )
            self.messages += 1
        self.completed: dict[int, WcStatus] = {}
        self.completion_s: float | None = None
        self.qp_errors: list[str] = []
        self.imm_received: list[int] = []
        self.ev_transitions = 0
        self.placed: list[tuple[float, int]] = [(0.0, 0)]
        self.capacity: list[tuple[float, float]] = [(0.0, self.fabric.surviving_capacity_bps())]
        self._done = False
        for f in cfg.faults:
            self.fabric.at(f.time_s, self._fault_fn(f))

    # -- driving -------------------------------------------------------------------------------

    def _fault_fn(self, f: Fault) -> Callable[[], None]:
        def apply() -> None:
            fab = self.fabric
            P = self.cfg.fabric.paths_per_plane
            if f.kind == "path":
                fab.set_path(f.index // P, f.index % P, f.up)
            elif f.kind == "plane":
                fab.set_plane(f.index, f.up)
            else:  # port of h0: the NIC sees its link go down/up at once
                fab.set_port(0, f.index, f.up)
                for ep in self.endpoints[0].values():
                    ep.port_status(f.index, f.up, fab.now)
                self._pump(0, fab.now)
            self.capacity.append((fab.now, fab.surviving_capacity_bps()))

        return apply

    def _deliver(self, host: int, port: int, frame: bytes, t: float) -> None:
        ep = endpoint_for(self.endpoints[host], self.desks[host], self.pump, host, frame, t)
        if ep is None:
            return
        ep.receive_frame(frame, t)
        if host == 1:
            total = sum(e.stats.rx_placed_bytes for e in self.endpoints[1].values())
            if total != self.placed[-1][1]:
                self.placed.append((t, total))
        self.pump.pump(host, ep, t)

    def _pump(self, host: int, t: float) -> None:
        for ep in self.endpoints[host].values():
            self.pump.pump(host, ep, t)

    def _on_event(self, _host: int, e: object, t: float) -> None:
        if isinstance(e, WriteCompleted):
            self.completed[e.wr_id] = e.status
            if len(self.completed) == self.messages:
                self.completion_s = t
                self._done = True
        elif isinstance(e, QpErrorEvent):
            self.qp_errors.append(f"QP {e.qpn:#x}: {e.status.value}: {e.reason}")
            self._done = True
        elif isinstance(e, ImmReceived):
            self.imm_received.append(e.imm)
        elif isinstance(e, EvStateChanged):
            self.ev_transitions += 1

    def run(self) -> dict:
        t0 = time.perf_counter()
        c0 = time.process_time()
        for h in range(2):
            self._pump(h, 0.0)
        self.fabric.run(self.cfg.max_time_s, lambda: self._done)
        wall = time.perf_counter() - t0
        cpu = time.process_time() - c0
        return self._result(wall, cpu)

    # -- results -------------------------------------------------------------------------------

    def _placed_at(self, t: float) -> float:
        times = [p[0] for p in self.placed] if not hasattr(self, "_ptimes") else self._ptimes
        self._ptimes: list[float] = times
        i = bisect.bisect_right(times, t) - 1
        return self.placed[max(i, 0)][1]

    def _capacity_at(self, t: float) -> float:
        cap = self.capacity[0][1]
        for tc, c in self.capacity:
            if tc <= t:
                cap = c
        return cap

    def recovery_s(self, end_s: float) -> float | None:
        """Time from the first failure until goodput, over a window of 4 base RTTs (at least 10
        packet times), is back to >= 90% of the capacity that survives at that moment."""
        downs = [f.time_s for f in self.cfg.faults if not f.up and f.time_s < end_s]
        if not downs:
            return None
        t_fail = min(downs)
        spec = self.cfg.fabric
        pkt_s = (self.cfg.mtu + DATA_OVERHEAD_BYTES) * 8 / spec.capacity_bps()
        win = max(4 * self.base_rtt_s, 10 * pkt_s)
        step = win / 8
        t = t_fail
        while t + win <= end_s:
            cap = self._capacity_at(t)
            got = (self._placed_at(t + win) - self._placed_at(t)) * 8 / win
            if cap > 0 and got >= 0.9 * cap:
                return t - t_fail
            t += step
        return end_s - t_fail

    def _result(self, wall_s: float, cpu_s: float) -> dict:
        cfg = self.cfg
        spec = cfg.fabric
        end = self.completion_s if self.completion_s is not None else self.fabric.now
        capacity = spec.capacity_bps()
        ok = self.completion_s is not None and all(
            s is WcStatus.SUCCESS for s in self.completed.values()
        )
        goodput = cfg.size * 8 / self.completion_s if ok and self.completion_s else 0.0
        ev_states: dict[str, int] = {}
        retrans = timeouts = packets = spurious = 0
        recoveries: list[float] = []
        for a, _ in self.pairs:
            for k, v in a.ev_states().items():
                ev_states[k] = ev_states.get(k, 0) + v
            retrans += a.stats.retransmissions
            timeouts += a.stats.timeouts
            packets += a.stats.tx_data_packets
            if hasattr(a, "loss_recovery_s"):  # MRC; go-back-N has no per-packet repair
                recoveries += a.loss_recovery_s()
                spurious += a.stats.spurious_retransmissions + a.stats.spurious_timeouts
        links = self.fabric.links()
        result = {
            "transport": cfg.transport,
            "goodput_fraction": round(goodput / capacity, 4),
            # a write completed with an error is not a completed transfer
            "completion_s": (
                round(self.completion_s, 6) if ok and self.completion_s is not None else None
            ),
            "verified": bytes(self.dst) == self.src,
            "qp_errors": len(self.qp_errors),
            "qp_error_reasons": self.qp_errors,
            "retransmissions": retrans,
            # median time from a lost packet's first transmission to its retransmission, in
            # base RTTs (None: nothing was lost, or the transport does not say)
            "loss_recovery_rtts": (
                round(statistics.median(recoveries) / self.base_rtt_s, 3) if recoveries else None
            ),
            "spurious_retransmissions": spurious,
            "ev_states": ev_states,
            "recovery_s": (round(r, 6) if (r := self.recovery_s(end)) is not None else None),
            "goodput_bps": round(goodput),
            "capacity_bps": capacity,
            "bytes": cfg.size,
            "messages": self.messages,
            "qps": len(self.pairs),
            "planes": spec.planes,
            "paths_per_plane": spec.paths_per_plane,
            "port_rate_bps": spec.port_rate_bps,
            "loss": spec.loss,
            "path_loss": [list(x) for x in spec.path_loss],
            "seed": cfg.seed,
            "base_rtt_s": self.base_rtt_s,
            "timeouts": timeouts,
            "data_packets": packets,
            "trims": sum(link.trims for link in links),
            "ecn_marks": sum(link.marks for link in links),
            "drops": sum(link.drops for link in links),
            "random_losses": sum(link.losses for link in links),
            "ev_transitions": self.ev_transitions,
            "path_policy": cfg.path_policy if cfg.transport == "mrc" else None,
            "cc": cfg.cc if cfg.transport == "mrc" else None,
            "plane_share": cfg.plane_share if cfg.transport == "mrc" else None,
            # data-direction packets each fabric path carried (plane * paths_per_plane + t1)
            "path_packets": [link.tx_packets for plane in self.fabric.path[0] for link in plane],
            "paths_retired": sum(
                getattr(getattr(a, "evs", None), "paths_retired", 0) for a, _ in self.pairs
            ),
            "faults": [
                f"{'heal' if f.up else 'fail'} {f.kind}:{f.index}@{f.time_s}s" for f in cfg.faults
            ],
            "stopped": None if ok else self._why_stopped(end),
            "wall_s": round(wall_s, 3),
            "cpu_s": round(cpu_s, 3),
            "sim_pps": round((packets + retrans) / cpu_s) if cpu_s > 0 else None,
        }
        if cfg.transport == "rocev2":
            result["rocev2"] = self._rocev2_summary()
        if cfg.timeline_s:
            step = cfg.timeline_s
            if end / step > MAX_TIMELINE_BINS:  # a run far longer than the transfer at line rate
                step = end / MAX_TIMELINE_BINS  # (the CLI says so: widened_note)
            result["timeline_bin_s"] = step
            tl = []
            t = 0.0
            while t < end:
                got = (self._placed_at(t + step) - self._placed_at(t)) * 8 / step
                tl.append([round(t, 6), round(got)])
                t += step
            result["timeline"] = tl
        return result

    def _why_stopped(self, end_s: float) -> str:
        """Why a run that did not complete stopped, for the summary and ``stopped``."""
        if self.qp_errors:
            return f"a QP error: {self.qp_errors[0]}"
        placed = self._placed_at(end_s)
        return (
            f"--max-time {self.cfg.max_time_s:g}s of virtual time ran out with {placed:,} of "
            f"{self.cfg.size:,} bytes placed (raise --max-time, or give a smaller --size)"
        )

    def _rocev2_summary(self) -> dict:
        """What only the baseline has: its paths, go-back-N and DCQCN counters."""
        # a rocev2 run's pairs are all RoceQueuePairs
        pairs = cast(list[tuple[RoceQueuePair, RoceQueuePair]], self.pairs)
        req = [a.get_stats() for a, _ in pairs]
        rsp = [b.get_stats() for _, b in pairs]
        return {
            "ports": self.cfg.rocev2_ports,
            "paths": [[a.plane, a.t1] for a, _ in pairs],
            "distinct_paths": len({(a.plane, a.t1) for a, _ in pairs}),
            "gbn_rewinds": sum(s.gbn_rewinds for s in req),
            "gbn_rewind_psns": sum(s.gbn_rewind_psns for s in req),
            "timeout_rewind_psns": sum(s.timeout_rewind_psns for s in req),
            "out_of_order_drops": sum(s.rx_out_of_order for s in rsp),
            "naks": sum(s.tx_nacks for s in rsp),
            "cnps": sum(s.tx_cnps for s in rsp),
            "rate_cuts": sum(s.rate_cuts for s in req),
            "min_rate_bps": min(s.min_rate_bps for s in req),
            "local_ack_timeout": self.rocev2_timeout,
            "ack_timeout_s": pairs[0][0].ack_timeout_s,
            "window_psns": pairs[0][0].window_psns,
            "nak_retries": sum(s.nak_retries for s in req),
            "dcqcn_profile": pairs[0][0].config.dcqcn_profile,
            "options": {k: v for k, v in self.cfg.rocev2_options},
        }


def run(cfg: SimConfig) -> dict:
    """Run one simulation; returns the JSON-able result (keys in docs/sim.md)."""
    return Simulation(cfg).run()


def widened_note(cfg: SimConfig, r: dict) -> str | None:
    """The CLI's note when the run outlasted MAX_TIMELINE_BINS bins of ``cfg.timeline_s`` and
    the timeline's bin was widened (None: it was not)."""
    step = r.get("timeline_bin_s")
    if not cfg.timeline_s or step is None or step == cfg.timeline_s:
        return None
    return (f"mrc-sim: the timeline's bin widened to {step:.3g}s (the run lasted "
            f"{step * MAX_TIMELINE_BINS:.3g}s; at most {MAX_TIMELINE_BINS:,} bins)")  # fmt: skip


def summary(r: dict) -> str:
    gp = r["goodput_bps"] / 1e6
    cap = r["capacity_bps"] / 1e6
    rec = "n/a (no failure)" if r["recovery_s"] is None else f"{r['recovery_s'] * 1e3:.2f} ms"
    comp = (
        f"did not complete: {r['stopped']}"
        if r["completion_s"] is None
        else f"{r['completion_s'] * 1e3:.2f} ms"
    )
    lines = [
        f"mrc-sim: {r['transport']} over {r['planes']} planes x {r['paths_per_plane']} paths, "
        f"{r['qps']} QP(s), {r['bytes']} bytes, loss {r['loss']}, seed {r['seed']}",
        f"  completion       {comp} (virtual)",
        f"  goodput          {gp:.1f} Mb/s of {cap:.1f} Mb/s capacity = {r['goodput_fraction']:.3f}",
        f"  verified         {'yes' if r['verified'] else 'NO'}",
        f"  qp errors        {r['qp_errors']}"
        + "".join(f"\n    {e}" for e in r["qp_error_reasons"]),
        f"  retransmissions  {r['retransmissions']} (timeouts {r['timeouts']}, trims {r['trims']}, "
        f"ECN marks {r['ecn_marks']}, random losses {r['random_losses']}, drops {r['drops']})",
        "  EV states        " + ", ".join(f"{k} {v}" for k, v in r["ev_states"].items()),
        f"  recovery         {rec}",
        f"  simulator        {r['wall_s']} s wall, {r['sim_pps']} data packets per CPU second",
    ]
    rv = r.get("rocev2")
    if rv:
        lines.append(
            f"  rocev2           {rv['distinct_paths']} distinct paths for {r['qps']} QPs "
            f"({rv['ports']}), go-back-N rewinds {rv['gbn_rewinds']} "
            f"({rv['gbn_rewind_psns']} PSNs), out-of-order drops {rv['out_of_order_drops']}, "
            f"CNPs {rv['cnps']}, rate cuts {rv['rate_cuts']}, "
            f"ACK timeout {rv['ack_timeout_s'] * 1e3:.3g} ms"
        )
    for f in r["faults"]:
        lines.append(f"  fault            {f}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mrc-sim",
        description="Run MRC queue pairs over a deterministic simulated multi-plane fabric.",
        epilog="Units (mrcnic.units): BYTES 4096, 64K, 1.5M, 1GiB (binary: 1K = 1024); RATE in "
        "bit/s 800M, 100Mbit, 1gbit, 25Gbps (decimal); TIME 20us, 10ms, 1.5s, or plain seconds.  "
        "Manual: docs/sim.md.  Example: mrc-sim --planes 8 --t1 4 --size 256M "
        "--loss 0.001 --fail 3@10ms --heal 3@200ms --seed 7 --json",
    )
    d = FabricSpec()
    p.add_argument(
        "--planes", type=int, default=d.planes, help="network planes = NIC ports (default 8)"
    )
    p.add_argument(
        "--t1",
        type=int,
        dest="paths_per_plane",
        default=d.paths_per_plane,
        help="T1 switches per plane = paths per plane (default 4)",
    )
    deprecated(p, "--paths-per-plane", "--t1", dest="paths_per_plane", type=int)
    p.add_argument(
        "--workload",
        default="p2p",
        choices=WORKLOADS,
        help="p2p: h0 writes to h1 (default); permutation: every host of a whole Clos "
        "(--t0 x --hosts-per-t0) writes --size to another, all at once; allreduce, alltoall, "
        "incast: mrc-bench's workloads on that Clos (docs/sim.md)",
    )
    p.add_argument(
        "--t0",
        type=int,
        default=4,
        help="whole-fabric workloads: T0 switches per plane (default 4)",
    )
    p.add_argument(
        "--hosts-per-t0",
        type=int,
        default=2,
        help="whole-fabric workloads: hosts under each T0 (default 2)",
    )
    p.add_argument(
        "--size",
        type=size_arg,
        metavar="BYTES",
        default=None,
        help="bytes to write (e.g. 256M, 1.5M; default 16M); allreduce, alltoall: per rank "
        "(default 4M); incast: per write (default 256K), as mrc-bench's --size",
    )
    p.add_argument(
        "--msg-size",
        type=size_arg,
        metavar="BYTES",
        default=None,
        help="bytes per RDMA write (default 1M, or --size when that is smaller)",
    )
    p.add_argument("--mtu", type=int, default=4096, help="payload bytes per packet (default 4096)")
    p.add_argument(
        "--rate",
        type=rate_with_unit,
        dest="port_rate",
        metavar="RATE",
        default=None,
        help="NIC port rate with its unit: 100Mbit, 100G (default: the --scale's, 100Mbit "
        "or 100Gbit)",
    )
    deprecated(p, "--port-rate", "--rate", dest="port_rate", type=rate_arg)
    p.add_argument(
        "--path-rate",
        type=rate_arg,
        metavar="RATE",
        default=None,
        help="fabric path rate (default: the port rate)",
    )
    p.add_argument(
        "--delay",
        type=time_arg,
        metavar="TIME",
        default=None,
        help="one-way propagation delay per path (default: the --scale's, 20us or 4us)",
    )
    p.add_argument(
        "--buffer",
        type=size_arg,
        dest="queue",
        metavar="BYTES",
        default=None,
        help="switch buffer per port (default: the --scale's, 64K or 1M)",
    )
    deprecated(p, "--queue", "--buffer", dest="queue", type=size_arg)
    p.add_argument(
        "--ecn",
        type=size_arg,
        metavar="BYTES",
        default=None,
        help="ECN marking threshold in bytes (default: the --scale's, 16K or 200K)",
    )
    p.add_argument(
        "--scale",
        choices=sorted(SCALES),
        default=None,
        help="the defaults of --rate, --delay, --buffer and --ecn: lab (the namespace "
        "lab's 1/1000 scale: 100Mbit, 20us, 64K, 16K) or paper (100Gbit, 4us, 1M, 200K); "
        "default lab for --workload p2p, paper for the whole-fabric workloads",
    )
    p.add_argument("--no-ecn", action="store_true", help="disable ECN marking")
    p.add_argument("--no-trim", action="store_true", help="drop instead of trimming on overflow")
    p.add_argument(
        "--loss",
        type=loss_arg(),
        default=0.0,
        metavar="P|X%",
        help="random loss per packet per fabric path: a probability below 1 (0.001) or a "
        "percent (0.1%%) [0]",
    )
    p.add_argument(
        "--path-loss",
        action="append",
        default=[],
        metavar="N:LOSS",
        help="random loss probability on path N only (plane*paths_per_plane+t1), data "
        "direction; repeatable (e.g. 0:0.2, as the ev_drop experiment)",
    )
    p.add_argument(
        "--fail",
        action="append",
        default=[],
        metavar="[path:|plane:|port:]N@TIME",
        help="take a path (plane*paths_per_plane+t1), a plane or h0's port N down at TIME",
    )
    p.add_argument(
        "--heal",
        action="append",
        default=[],
        metavar="[path:|plane:|port:]N@TIME",
        help="bring it back",
    )
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="SPEC",
        help="permutation, allreduce: a fault on the lab's schedule syntax, in virtual time; "
        "repeatable "
        "(link:p0-t0-1,p0-t1-2@1s-2s, reboot:p0-t1-0@1s+500ms, port:h0,3@1s-2s, "
        "loss:p0-t0-0,p0-t1-1=1%%@1s-2s, flap:p0-t0-0,p0-t1-1,5x100ms@1s; docs/sim.md)",
    )
    p.add_argument(
        "--pfc",
        action="store_true",
        help="whole-fabric workloads: RoCEv2 as deployed, its data on a lossless class with "
        "priority flow control (XOFF/XON per switch in-port, pauses hop by hop; MRC is never "
        "paused; docs/sim.md)",
    )
    p.add_argument(
        "--engine",
        choices=("auto", "c", "py"),
        default="auto",
        help="whole-fabric workloads: the MRC QPs' per-packet work on the C engines the lab's "
        "NICs run, or on their Python twins (the same output, byte for byte, slower); auto "
        "(default): C when the C module is built (docs/sim.md, Speed)",
    )
    p.add_argument(
        "--fabric",
        choices=("auto", "c", "py"),
        default="auto",
        help="whole-fabric workloads: the links, queues and event loop in C or in Python (the "
        "same output); auto (default): C when built, Python for RoCEv2 with --pfc",
    )
    p.add_argument(
        "--transport",
        default="mrc",
        metavar="{mrc,rocev2}",
        help="mrc, or the RoCEv2 baseline (docs/design/rocev2.md)",
    )
    p.add_argument(
        "--qps",
        type=int,
        default=None,
        help="queue pairs (default 1 for mrc, one per plane for rocev2)",
    )
    p.add_argument(
        "--rocev2-ports",
        choices=ROCEV2_PORT_POLICIES,
        default=None,
        help="rocev2: QP i bound to port i %% planes (rail, as deployed) or ports by hash",
    )
    p.add_argument(
        "--rocev2-timeout",
        default=None,
        metavar="N|auto",
        help="rocev2: IB local ACK timeout 4.096us x 2^N of hardware time, scaled to the lab; "
        "auto (default): the smallest N above the fabric's worst-case RTT (deployments: 14-20)",
    )
    p.add_argument(
        "--rocev2-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="rocev2: set a RoceConfig field (docs/design/rocev2.md), e.g. dcqcn_profile=paper, "
        "bdp_window=true, nak_retries=false; repeatable",
    )
    plugins.add_arguments(p)
    p.add_argument(
        "--evs", type=int, default=128, help="EVs per QP, split across planes (default 128)"
    )
    p.add_argument("--seed", type=int, default=1, help="seed for everything random (default 1)")
    p.add_argument(
        "--max-time",
        type=time_arg,
        metavar="TIME",
        default=60.0,
        help="stop after this much virtual time (default 60s)",
    )
    p.add_argument(
        "--timeline",
        type=time_arg,
        default=None,
        metavar="BIN",
        help="add a goodput timeline with this bin width",
    )
    workload_cli.add_arguments(p)
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return p


DEFAULT_MSG_SIZE = 1 << 20
MAX_LINK_DELAY_S = 0.1  # --delay, at most (4 crossings a round trip, under max_rto_s 1 s)
MIN_TIMELINE_S = 1e-6  # --timeline, at least
MAX_TIMELINE_BINS = 1_000_000  # a goodput timeline's bins, at most (each a JSON pair)


def memory_available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_args(a: argparse.Namespace, workload: str) -> None:
    """Every value checked before any work, each error naming the flag, the range and the
    fix (ValueError; main turns it into a usage error)."""
    for flag, value in (("--planes", a.planes), ("--t1", a.paths_per_plane),
                        ("--t0", getattr(a, "t0", 1)), ("--hosts-per-t0", getattr(a, "hosts_per_t0", 1)),
                        ("--size", a.size), ("--qps", a.qps if a.qps is not None else 1)):  # fmt: skip
        if value < 1:
            raise ValueError(f"{flag} {value}: must be 1 or more")
    if a.msg_size is not None and a.msg_size < 1:
        raise ValueError(f"--msg-size {a.msg_size}: must be 1 byte or more")
    for flag, value in (("--rate", a.port_rate), ("--path-rate", a.path_rate)):
        if value is not None and not value > 0:
            raise ValueError(f"{flag} {value:g}: a rate above 0 (e.g. 100Mbit)")
    if a.delay is not None and a.delay < 0:
        raise ValueError(f"--delay {a.delay:g}: a time of 0 or more (e.g. 20us)")
    if a.delay is not None and a.delay > MAX_LINK_DELAY_S:
        raise ValueError(
            f"--delay {a.delay:g}s: a link's one-way delay of at most {MAX_LINK_DELAY_S:g}s "
            "(a round trip crosses it four times, and the QPs' retransmission timer stops "
            "growing at 1 s: a longer one could only time out); data-centre links are us"
        )
    if not a.max_time > 0:
        raise ValueError(f"--max-time {a.max_time:g}: a time above 0 (e.g. 60s)")
    if a.timeline is not None and not a.timeline > 0:
        raise ValueError(f"--timeline {a.timeline:g}: a bin width above 0 (e.g. 10ms)")
    if a.timeline is not None and a.timeline < MIN_TIMELINE_S:
        raise ValueError(
            f"--timeline {a.timeline:g}s: a bin of at least {MIN_TIMELINE_S:g}s (a few packets' "
            "time at the simulator's rates; e.g. 10us, 10ms)"
        )
    if a.mtu < 256 or a.mtu > 9000:
        raise ValueError(f"--mtu {a.mtu}: payload bytes per packet, 256..9000 (default 4096)")
    frame = a.mtu + DATA_OVERHEAD_BYTES
    if a.queue is not None and a.queue < frame:
        raise ValueError(
            f"--buffer {size_text(a.queue)}: below one full data frame ({frame} bytes with --mtu {a.mtu}), "
            "so every packet would be trimmed; give at least that (the lab's is 64K)"
        )
    if not a.no_ecn and a.ecn is not None:
        if a.ecn < 1:
            raise ValueError(
                f"--ecn {a.ecn}: a threshold above 0 bytes (--no-ecn turns marking off)"
            )
        if a.queue is not None and a.ecn >= a.queue:
            raise ValueError(
                f"--ecn {size_text(a.ecn)} is not below --buffer {size_text(a.queue)}: nothing would ever be marked; "
                "give a threshold below the queue, or --no-ecn"
            )
    if a.evs < a.planes or a.evs % a.planes:
        raise ValueError(
            f"--evs {a.evs}: EVs are split equally across the {a.planes} planes, so a multiple "
            f"of {a.planes}, at least {a.planes} (default 128)"
        )
    if a.msg_size is None:
        a.msg_size = min(DEFAULT_MSG_SIZE, a.size)
    elif workload == "p2p" and a.msg_size > a.size:
        raise ValueError(
            f"--msg-size {size_text(a.msg_size)} is larger than --size {size_text(a.size)}: one write is at most "
            "the whole transfer"
        )
    if a.transport != "rocev2":
        for flag, given in (("--rocev2-ports", a.rocev2_ports is not None),
                            ("--rocev2-timeout", a.rocev2_timeout is not None),
                            ("--rocev2-option", bool(a.rocev2_option))):  # fmt: skip
            if given:
                raise ValueError(f"{flag}: for --transport rocev2 only (this run is {a.transport})")
    if a.rocev2_ports is None:  # (None until here: given, even as the default, is checked)
        a.rocev2_ports = "rail"
    if a.rocev2_timeout is None:
        a.rocev2_timeout = "auto"
    hosts = 2 if workload == "p2p" else a.t0 * a.hosts_per_t0
    need = a.size * (2 if workload == "p2p" else 2 * hosts)
    have = memory_available_bytes()
    if have is not None and need > 0.8 * have:
        raise ValueError(
            f"--size {size_text(a.size)}: this run holds about {need / 2**30:.1f} GiB of source and "
            f"destination buffers, more than this machine has free ({have / 2**30:.1f} GiB "
            "available): give a smaller --size"
        )
    failed: dict[tuple[str, int], float] = {}
    steps = sorted(
        [(Fault.parse(t, up=False), t) for t in a.fail]
        + [(Fault.parse(t, up=True), t) for t in a.heal],
        key=lambda ft: ft[0].time_s,
    )
    for f, text in steps:
        key = (f.kind, f.index)
        if not f.up:
            failed[key] = f.time_s
        elif key not in failed:
            raise ValueError(
                f"--heal {text}: {f.kind} {f.index} was not failed before {f.time_s:g} s "
                "(a --fail of the same path, plane or port must come first)"
            )
        else:
            del failed[key]


def parse_path_loss(text: str, paths: int) -> tuple[int, float]:
    """``N:LOSS`` -> (path, loss)."""
    m = re.fullmatch(r"\s*(\d+):([0-9.eE+-]+)\s*", text)
    loss = float(m.group(2)) if m else -1.0
    if not m or not 0.0 <= loss <= 1.0:
        raise ValueError(f"bad --path-loss {text!r}: N:LOSS, LOSS in 0..1 (example: 0:0.2)")
    path = int(m.group(1))
    if path >= paths:
        raise ValueError(f"path {path} does not exist (0..{paths - 1})")
    return path, loss


def config_from_args(a: argparse.Namespace) -> SimConfig:
    workload = getattr(a, "workload", "p2p")
    if a.size is None:  # the workload's default size (mrc-bench's for the collectives)
        a.size = workload_cli.DEFAULT_SIZE.get(workload, 16 << 20)
    scale = SCALES[a.scale] if getattr(a, "scale", None) else default_scale(workload)
    for name, value in (("port_rate", scale.port_rate_bps), ("delay", scale.prop_s),
                        ("queue", scale.queue_bytes), ("ecn", scale.ecn_bytes)):  # fmt: skip
        if getattr(a, name, None) is None:
            setattr(a, name, value)
    check_args(a, workload)
    fabric = FabricSpec(
        planes=a.planes,
        paths_per_plane=a.paths_per_plane,
        port_rate_bps=a.port_rate,
        path_rate_bps=a.path_rate,
        prop_s=a.delay,
        queue_bytes=a.queue,
        ecn_bytes=None if a.no_ecn else a.ecn,
        trim=not a.no_trim,
        loss=a.loss,
        path_loss=tuple(parse_path_loss(t, a.planes * a.paths_per_plane) for t in a.path_loss),
        seed=a.seed,
    )
    least_s = a.size * 8 / fabric.capacity_bps()  # (p2p: the transfer at line rate)
    if workload == "p2p" and a.timeline is not None and least_s / a.timeline > MAX_TIMELINE_BINS:
        raise ValueError(
            f"--timeline {a.timeline:g}s: the transfer takes at least {least_s:.3g}s, more than "
            f"{MAX_TIMELINE_BINS:,} bins: give a bin of at least {least_s / MAX_TIMELINE_BINS:.3g}s"
        )
    if workload == "p2p" and least_s > a.max_time:
        raise ValueError(
            f"--size {size_text(a.size)} takes at least {least_s:.3g}s "
            f"at the fabric's {fabric.capacity_bps() / 1e6:g} Mb/s (--rate x --planes), more than "
            f"--max-time {a.max_time:g}s: raise --max-time or --rate, or give a smaller --size"
        )
    if a.transport == "gbn":
        raise ValueError(
            "--transport gbn was retired: use --transport rocev2, the full RoCEv2 baseline "
            "(go-back-N, DCQCN, ECMP-hashed single path; docs/design/rocev2.md)"
        )
    if a.transport not in TRANSPORTS:
        raise ValueError(f"unknown transport {a.transport!r} (one of {', '.join(TRANSPORTS)})")
    timeout = None if a.rocev2_timeout == "auto" else a.rocev2_timeout
    if timeout is not None:
        try:
            timeout = int(timeout)
        except ValueError:
            raise ValueError("--rocev2-timeout is auto or the IB exponent 1..31") from None
        if not 1 <= timeout <= 31:
            raise ValueError("--rocev2-timeout is auto or the IB exponent 1..31")
    rocev2_options = tuple(parse_rocev2_option(t) for t in a.rocev2_option)
    if rocev2_options:
        rocev2_config(RoceConfig(), rocev2_options)  # names checked before the run
    if getattr(a, "pfc", False) and getattr(a, "workload", "p2p") == "p2p":
        raise ValueError(
            "--pfc: whole-fabric workloads only (--workload permutation|allreduce|alltoall|"
            "incast); p2p has no switch to pause"
        )
    if getattr(a, "fault", None) and getattr(a, "workload", "p2p") == "p2p":
        raise ValueError(
            "--fault: whole-fabric workloads only (--workload permutation, allreduce); p2p "
            "takes --fail/--heal"
        )
    if workload == "p2p" and "c" in (getattr(a, "engine", "auto"), getattr(a, "fabric", "auto")):
        raise ValueError(
            "--engine c / --fabric c: whole-fabric workloads only (--workload permutation|"
            "allreduce|alltoall|incast); p2p runs its QPs' Python twins on the two-host fabric"
        )
    if getattr(a, "iters", 1) != 1 and getattr(a, "workload", "p2p") != "allreduce":
        raise ValueError("--iters: --workload allreduce only")
    if hasattr(a, "senders"):  # (the incast flags: mrc-sim's parser has them)
        workload_cli.check_workload_flags(a, workload)
    if a.qps is not None and a.qps > DEFAULT_MAX_QPS:
        raise ValueError(f"--qps {a.qps}: at most {DEFAULT_MAX_QPS} (a device's QPs by default)")
    choice = plugins.choice_from_args(a)
    faults = [Fault.parse(s, up=False) for s in a.fail] + [Fault.parse(s, up=True) for s in a.heal]
    for f in faults:
        limit = {"path": a.planes * a.paths_per_plane, "plane": a.planes, "port": a.planes}[f.kind]
        if not 0 <= f.index < limit:
            raise ValueError(f"{f.kind} {f.index} does not exist (0..{limit - 1})")
    return SimConfig(
        fabric=fabric,
        size=a.size,
        msg_size=a.msg_size,
        transport=a.transport,
        qps=a.qps,
        rocev2_ports=a.rocev2_ports,
        rocev2_timeout=timeout,
        rocev2_options=rocev2_options,
        mtu=a.mtu,
        cc=choice.cc or "nscc",
        evs=a.evs,
        path_policy=choice.path_policy or "mrc",
        plane_share=choice.plane_share or "equal",
        faults=tuple(sorted(faults, key=lambda f: f.time_s)),
        max_time_s=a.max_time,
        timeline_s=a.timeline,
        seed=a.seed,
    )


def clos_from_args(a: argparse.Namespace, cfg: SimConfig) -> ClosSpec:
    """``--workload permutation``: the whole-Clos run the same flags describe."""
    f = cfg.fabric
    unsupported = [
        flag
        for flag, given in (
            ("--fail/--heal (use --fault)", bool(cfg.faults)),
            ("--path-loss", bool(f.path_loss)),
            ("--qps", cfg.qps is not None),
            ("--rocev2-ports", cfg.rocev2_ports != "rail"),
            ("--rocev2-timeout", cfg.rocev2_timeout is not None),
            ("--rocev2-option", bool(cfg.rocev2_options)),
        )
        if given
    ]
    if unsupported:
        raise ValueError(
            f"{', '.join(unsupported)}: not supported by --workload permutation yet "
            "(p2p only; docs/sim.md)"
        )
    ev = EvConfig(
        ev_count=max(cfg.evs, f.planes), path_policy=cfg.path_policy, plane_share=cfg.plane_share
    )
    return ClosSpec(
        planes=f.planes,
        t0=a.t0,
        t1=f.paths_per_plane,
        hosts_per_t0=a.hosts_per_t0,
        port_rate_bps=f.port_rate_bps,
        path_rate_bps=f.path_rate_bps,
        prop_s=f.prop_s,
        queue_bytes=f.queue_bytes,
        ecn_bytes=f.ecn_bytes,
        trim=f.trim,
        loss=f.loss,
        size=cfg.size,
        msg_size=cfg.msg_size,
        mtu=cfg.mtu,
        transport=cfg.transport,
        qp=QpConfig(ev=ev, cc=cfg.cc),
        max_time_s=cfg.max_time_s,
        faults=tuple(step for text in a.fault for step in parse_steps(text)),
        timeline_s=cfg.timeline_s,
        pfc=getattr(a, "pfc", False),
        seed=cfg.seed,
        fabric=getattr(a, "fabric", "auto"),
        engine=getattr(a, "engine", "auto"),
    )


def clos_summary(r: dict) -> str:
    fct = (
        "n/a"
        if r["fct_p50_s"] is None
        else f"{r['fct_p50_s'] * 1e3:.2f} / {r['fct_p99_s'] * 1e3:.2f} ms"
    )
    return "\n".join(
        [
            f"permutation of {r['hosts']} hosts ({r['t0']} T0 x {r['hosts_per_t0']}, {r['t1']} T1, "
            f"{r['planes']} planes), {r['transport']}",
            f"utilisation    {r['utilisation']:.3f} of the hosts' capacity",
            f"flow FCT       p50 / p99 {fct}; Jain {r['jain']:.3f}",
            f"T0-T1 load     max/mean {r['link_imbalance']}",
            f"verified       {r['verified']}; QP errors {r['qp_errors']}; "
            f"retransmissions {r['retransmissions']}, timeouts {r['timeouts']}",
            *([workload_cli.pfc_line(r)] if r.get("pfc") else []),
            *(f"fault          {f}" for f in r["faults"]),
            *([f"lost in flight {r['lost_in_flight']} frames on cut links"] if r["faults"] else []),
            *(
                [f"recovery       {r['recovery_s']} s (first bin back to 90% of before)"]
                if r.get("recovery_s") is not None
                else []
            ),
        ]
    )


def _run_collective(parser: argparse.ArgumentParser, a: argparse.Namespace, cfg: SimConfig) -> int:
    """``--workload allreduce|alltoall|incast`` (mrcnic.sim.workload_cli)."""
    try:
        # flags these workloads do not honour, whatever the permutation accepts
        for flag, given in (
            ("--fail/--heal", bool(cfg.faults)),
            ("--path-loss", bool(cfg.fabric.path_loss)),
            ("--timeline", cfg.timeline_s is not None and a.workload != "allreduce"),
            ("--fault", bool(a.fault) and a.workload != "allreduce"),
            ("--qps", cfg.qps is not None and a.workload != "incast"),
            ("--rocev2-option", bool(cfg.rocev2_options)),
        ):
            if given:
                raise ValueError(f"{flag}: not supported by --workload {a.workload} yet")
        spec = clos_from_args(a, replace(cfg, qps=None))
        r = workload_cli.run(a, spec, cfg.qps)
    except ValueError as e:
        parser.error(str(e))
    print(json.dumps(r) if a.json else workload_cli.summary(r))
    errors = r["qp_errors"] if "qp_errors" in r else r["qp_errors_total"]
    return 0 if r["verified"] and not errors else 1


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except MissingExtra as e:  # an optional package (mrcnic.optional)
        print(f"mrc-sim: {e}", file=sys.stderr)
        return 1


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    try:
        cfg = config_from_args(a)
    except ValueError as e:
        parser.error(str(e))
    if a.workload in workload_cli.COLLECTIVES:
        return _run_collective(parser, a, cfg)
    if a.workload == "permutation":
        try:
            r = run_permutation(clos_from_args(a, cfg))
        except ValueError as e:
            parser.error(str(e))
        print(json.dumps(r) if a.json else clos_summary(r))
        return 0 if r["verified"] and not r["qp_errors"] else 1
    try:
        result = run(cfg)
    except ValueError as e:
        parser.error(str(e))
    note = widened_note(cfg, result)
    if note:
        print(note, file=sys.stderr)
    if a.json:
        print(json.dumps(result))
    else:
        print(summary(result))
    return 0 if result["verified"] and not result["qp_errors"] else 1


if __name__ == "__main__":
    sys.exit(main())

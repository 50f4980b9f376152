"""The simulator's twin of a lab run: ``mrc-sim``'s command line for a lab's shape, link rate,
buffer and ECN threshold, and the figures both are compared on (docs/sim.md, "The simulator
against the lab"; ``tests/lab/test_sim_vs_lab.py``).

A lab write between two hosts under different T0s is ``mrc-sim``'s two-host fabric
(``--workload p2p``: one path per plane and T1); a lab permutation is ``--workload
permutation`` on the lab's whole Clos, with the seed whose derangement is the lab's pairs.
The lab's faults become the simulator's at the same offset from the first post. Pure
(no root): the caller runs the lab side.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from statistics import median
from typing import Any

from lab.fabric.params import LabParams
from lab.proc.schedule import Step
from mrcnic.faultplan import SWITCH_NAME
from mrcnic.sim.clos import derangement

# A lab frame carries 4096 payload bytes (MIN_MTU's arithmetic); so does the simulator's.
PAYLOAD_BYTES = 4096
# Recovery: goodput back to this share of its level before the fault (mrc-sim's rule too).
RECOVERED = 0.9


class TwinError(ValueError):
    """A lab run the simulator cannot mirror; the message says what differs."""


def sim_argv() -> list[str]:
    """How to start mrc-sim: the venv's script beside this interpreter, else the module."""
    exe = Path(sys.executable).with_name("mrc-sim")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("mrc-sim")
    return [found] if found else [sys.executable, "-m", "mrcnic.sim.transfer"]


def fabric_args(params: LabParams) -> list[str]:
    """The link flags: planes, rate, buffer, ECN as the lab's switches run them."""
    if params.pfc:
        raise TwinError("the simulator has no PFC: compare a lab without --pfc")
    # --scale lab: the lab's propagation (the whole-fabric workloads default to the paper's)
    args = [
        "--scale",
        "lab",
        "--planes",
        str(params.planes),
        "--rate",
        f"{params.rate_bps}bit",
    ]
    args += ["--buffer", str(params.buffer_bytes)]
    # the kernel's switches mark nothing; python switches mark above ecn_threshold_bytes
    if params.switch == "kernel":
        return [*args, "--no-ecn"]
    return [*args, "--ecn", str(params.ecn_threshold_bytes)]


def _host(name: str) -> int:
    if not (name.startswith("h") and name[1:].isdigit()):
        raise TwinError(f"{name!r} is not a host name (h0, h1, ...)")
    return int(name[1:])


def p2p_fault_args(params: LabParams, src: int, dst: int, steps: Sequence[Step]) -> list[str]:
    """The lab's faults as ``--fail``/``--heal`` of the two-host fabric, where a path is
    (plane, T1) both ways: a T0-T1 link on the pair's way, or a T1 rebooted, is that path;
    the source's NIC port on a plane is ``port:``. Anything else has no twin there."""
    t0s = {src // params.hosts_per_t0, dst // params.hosts_per_t0}
    out: list[str] = []
    for s in steps:
        if s.kind == "port" and _host(s.a) == src:
            spec, up_at = f"port:{s.plane}", s.undo_s
        elif s.kind in ("link", "reboot"):
            ends = [SWITCH_NAME.fullmatch(x) for x in (s.a, s.b) if x]
            t1 = [m for m in ends if m and m.group(2) == "1"]
            t0 = [m for m in ends if m and m.group(2) == "0"]
            if len(t1) != 1 or (s.kind == "link" and (len(t0) != 1 or int(t0[0][3]) not in t0s)):
                raise TwinError(f"{s.text}: only a T0-T1 link on the pair's way or a T1 maps")
            plane, j = int(t1[0][1]), int(t1[0][3])
            spec = f"path:{plane * params.t1 + j}"
            up_at = s.undo_s if s.kind == "link" else s.at_s + s.down_ms / 1e3
        else:
            raise TwinError(f"{s.text}: no two-host twin")
        out += ["--fail", f"{spec}@{s.at_s * 1e3:g}ms"]
        if up_at is not None:
            out += ["--heal", f"{spec}@{up_at * 1e3:g}ms"]
    return out


def p2p_command(
    params: LabParams,
    src: str,
    dst: str,
    size: int,
    msg_size: int,
    steps: Sequence[Step] = (),
    timeline_s: float | None = None,
    seed: int = 1,
) -> list[str]:
    """``mrc-sim`` for ``mrc-bench write --src SRC --dst DST --size MSG_SIZE`` of ``size``
    bytes in all, with ``steps`` at their offsets from the first post."""
    a, b = _host(src), _host(dst)
    if a // params.hosts_per_t0 == b // params.hosts_per_t0:
        raise TwinError(f"{src} and {dst} share a T0: the two-host fabric crosses a T1")
    argv = [*sim_argv(), "--workload", "p2p", *fabric_args(params)]
    argv += ["--t1", str(params.t1), "--size", str(size), "--msg-size", str(msg_size)]
    argv += [*p2p_fault_args(params, a, b, steps), "--seed", str(seed)]
    if timeline_s:
        argv += ["--timeline", f"{timeline_s * 1e3:g}ms"]
    return [*argv, "--json"]


def permutation_seed(hosts: int, pairs: Sequence[tuple[int, int]], tries: int = 10_000) -> int:
    """The smallest seed whose derangement (``mrcnic.sim.clos``: the first draw of the run's
    generator) is ``pairs``: the simulator then runs the lab's flows."""
    want = dict(pairs)
    if sorted(want) != list(range(hosts)) or sorted(want.values()) != list(range(hosts)):
        raise TwinError("the simulator's permutation has every host write and be written once")
    perm = [want[h] for h in range(hosts)]
    for seed in range(1, tries + 1):
        if derangement(hosts, random.Random(seed)) == perm:
            return seed
    raise TwinError(f"no seed up to {tries} gives the permutation {perm}")


def permutation_command(
    params: LabParams,
    pairs: Sequence[tuple[int, int]],
    size: int,
    msg_size: int,
    timeline_s: float | None = None,
) -> list[str]:
    """``mrc-sim --workload permutation`` on the lab's Clos, the lab's ``pairs`` (src, dst)
    each writing ``size`` bytes in ``msg_size`` writes."""
    argv = [*sim_argv(), "--workload", "permutation", *fabric_args(params)]
    argv += ["--t0", str(params.t0), "--hosts-per-t0", str(params.hosts_per_t0)]
    argv += ["--t1", str(params.t1), "--size", str(size), "--msg-size", str(msg_size)]
    argv += ["--seed", str(permutation_seed(params.host_count, pairs))]
    if timeline_s:
        argv += ["--timeline", f"{timeline_s * 1e3:g}ms"]
    return [*argv, "--json"]


def run(argv: Sequence[str], timeout_s: float = 300.0) -> dict[str, Any]:
    """Run one mrc-sim command; its JSON (exit status 1 is a run that was not clean, which
    the JSON says: the caller judges it)."""
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
    if p.returncode not in (0, 1) or not p.stdout.strip():
        raise RuntimeError(f"mrc-sim failed ({p.returncode}): {p.stderr.strip()[-1000:]}")
    data = json.loads(p.stdout)
    assert isinstance(data, dict)
    return data


# --- the figures both sides are read on (pure) ----------------------------------------------


def level_before(
    timeline: Sequence[Sequence[float]], bin_s: float, lo_s: float, hi_s: float
) -> float | None:
    """The median goodput of the bins lying wholly in [lo_s, hi_s); None without any."""
    got = [g for t, g in timeline if t >= lo_s - 1e-9 and t + bin_s <= hi_s + 1e-9]
    return median(got) if got else None


def recovery_s(
    timeline: Sequence[Sequence[float]], bin_s: float, fault_s: float, warmup_s: float
) -> float | None:
    """From the fault to the start of the first bin from then on whose goodput is back to
    RECOVERED of the median bin between ``warmup_s`` and the fault (the rule of ``mrc-sim
    --workload permutation --timeline``, applied to both sides' timelines alike); the time to
    the last bin's end if never; None without a whole bin before the fault. Bin-coarse: a
    dip shorter than a bin can read as 0."""
    before = level_before(timeline, bin_s, warmup_s, fault_s)
    if not before:
        return None
    # the last bin of a write is partial (its tail): it never counts as back or not
    after = [(t, g) for t, g in timeline[:-1] if t >= fault_s - 1e-9]
    for t, g in after:
        if g >= RECOVERED * before:
            return t - fault_s
    end = timeline[-1][0] + bin_s if timeline else fault_s
    return max(0.0, end - fault_s)


def rebin(timeline: Sequence[Sequence[float]], bin_s: float, factor: int) -> list[list[float]]:
    """``factor`` consecutive bins as one (mean goodput); a last incomplete group is dropped."""
    out = []
    for k in range(0, len(timeline) - factor + 1, factor):
        group = timeline[k : k + factor]
        out.append([group[0][0], sum(g for _t, g in group) / factor])
    return out

#!/usr/bin/env python3
"""NSCC benchmark -> results/bench-nscc.json: UET 1.0 NSCC against the previous NSCC.

Runs, for each congestion control named in ``--algos`` (registry names; default
``uet-1.0-nscc`` and ``nscc-2026.11``, the algorithm ``nscc`` named until 2026-11), the same
simulated scenarios over several seeds, alternating the algorithms within each seed, and
reports medians:

* mrc-sim fabrics (8 planes x 4 paths, 100 Mb/s ports: the lab's 1/1000 scale): lossless,
  lossy, a failed plane, and *oversubscribed* ones (20 Mb/s paths: 32 paths sharing a
  permutation's worth of fabric, every path a bottleneck) - goodput fraction, retransmissions,
  timeouts and *spurious* timeouts, recovery in base RTTs for the plane failure;
* N-to-1 incasts (``mrcnic.sim.incast``, 8->1 and 32->1, plus 4->1): goodput fraction, Jain's
  fairness of per-sender goodput, and the queueing delay at the bottleneck (the receiver's
  last-hop ports; each data packet's wait on entering them) beside UET NSCC's target delay.

A spurious timeout is counted from outside the QP (a timed-out transmission that the responder
did receive intact), so the same count works on any algorithm and revision.  The simulator is
deterministic: a run's figures depend on the seed only, CPU time aside.

With ``--baseline-rev REV`` the default algorithm (``nscc``) also runs on the transport of git
revision REV (``git archive``, read-only; the current incast module and C module are copied
in), in its own subprocess.

    .venv/bin/python bench/bench_nscc.py --out results/bench-nscc.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FABRIC = ["--planes", "8", "--t1", "4", "--size", "64M"]
ALGOS = ("uet-1.0-nscc", "nscc-2026.11", "uet-1.0-nscc@max_cwnd=2bdp")
SCENARIOS: dict[str, dict] = {
    "oversubscribed": {"sim": ["--path-rate", "20Mbit"]},
    "oversub_1pct_loss": {"sim": ["--path-rate", "20Mbit", "--loss", "0.01"]},
    "oversub_1ms_delay": {"sim": ["--path-rate", "20Mbit", "--delay", "1ms"]},
    "oversub_small_queues": {"sim": ["--path-rate", "20Mbit", "--buffer", "16K", "--ecn", "8K"]},
    "lossless": {"sim": [], "target": 0.95},
    "loss_0.1pct": {"sim": ["--loss", "0.001"], "target": 0.9},
    "loss_1pct": {"sim": ["--loss", "0.01"], "target": 0.8},
    "plane_failed": {"sim": ["--fail", "plane:3@50ms"], "target": 0.95 * 7 / 8},
    "incast_4to1": {"incast": {"senders": 4, "size": 8 << 20}},
    "incast_8to1": {"incast": {"senders": 8, "size": 4 << 20}, "jain": 0.95},
    "incast_32to1": {"incast": {"senders": 32, "size": 1 << 20}, "jain": 0.95},
}
METRICS = (
    "goodput_fraction",
    "retransmissions",
    "timeouts",
    "spurious_timeouts",
    "timeout_downgrades",
)
INCAST_METRICS = (
    "jain_fairness",
    "queue_delay_mean_ms",
    "queue_delay_p50_ms",
    "queue_delay_p99_ms",
    "queue_p50_over_target",
    "lasthop_trims",
    "trims",
)
#: counters UetNscc keeps (summed over a run's senders)
CC_COUNTERS = (
    "fast_increases",
    "ecn_decreases",
    "delay_decreases",
    "quick_adapts",
    "penalty_cuts",
)


# -- worker: runs inside a subprocess whose sys.path starts with the tree under test ---------


def _instrument(sender: object, receiver: object) -> dict:
    """Count spurious timeouts of ``sender`` from outside: wrap its EV table's on_timeout (one
    call per timeout, in every revision) and the receiver's receive_frame."""
    timed_out: set[tuple[int, int]] = set()
    delivered: set[tuple[int, int]] = set()
    downgrades = [0]
    evs = sender.evs
    on_timeout = evs.on_timeout

    def wrapped_timeout(slot, sent_s, now_s, *rest):
        for rec in sender.sb.records.values():
            if rec.slot == slot and rec.sent_s == sent_s and not rec.lost:
                timed_out.add((rec.psn, rec.tx_ts_ns))
                break
        down = on_timeout(slot, sent_s, now_s, *rest)
        downgrades[0] += bool(down)
        return down

    evs.on_timeout = wrapped_timeout
    receive = receiver.receive_frame

    def wrapped_receive(frame, now_s):
        if len(frame) > 86 and 0xC6 <= frame[62] <= 0xCB:
            dscp = (frame[14] & 0x0F) << 2 | frame[15] >> 6
            if dscp not in (12, 16):  # a trimmed header delivers nothing
                psn = int.from_bytes(frame[71:74], "big")
                delivered.add((psn, int.from_bytes(frame[78:86], "big")))
        return receive(frame, now_s)

    receiver.receive_frame = wrapped_receive
    return {"timed_out": timed_out, "delivered": delivered, "downgrades": downgrades}


def _spurious(probes: list[dict]) -> int:
    return sum(len(p["timed_out"] & p["delivered"]) for p in probes)


def _downgrades(probes: list[dict]) -> int:
    return sum(p["downgrades"][0] for p in probes)


class _QueueProbe:
    """Stands in for one last-hop link of the receiver: records, for every data packet that
    enters it, how long it will wait behind the packets already queued (the link's backlog
    over its rate), then lets the link do the rest."""

    def __init__(self, link: object, waits: list[float]) -> None:
        self._link = link
        self._waits = waits

    def __getattr__(self, name: str) -> object:
        return getattr(self._link, name)

    def transmit(self, t, frame, rng):
        link = self._link
        if len(frame) > 1000:  # data, not control or trimmed headers
            busy = link.busy_until
            self._waits.append(busy - t if busy > t else 0.0)
        return link.transmit(t, frame, rng)


def _cc_counters(qps: list) -> dict:
    out = {}
    for k in CC_COUNTERS:
        vals = [getattr(q.cc, k, None) for q in qps]
        if all(v is not None for v in vals):
            out[k] = sum(vals)
    return out


def _registered(algo: str) -> str:
    """The registry name to run ``algo`` as.  ``NAME@OPT=VALUE,...`` is NAME with
    ``cc_options`` (a VALUE ending in ``bdp`` is that many of the QP's line rate x base RTT),
    registered here under a name of its own, e.g. ``uet-1.0-nscc@max_cwnd=2bdp``."""
    if "@" not in algo:
        return algo
    # mrcnic is imported in the worker, after --tree is first on sys.path (see the header above)
    from mrcnic.transport import cc

    base, _, spec = algo.partition("@")
    opts: dict[str, str] = dict(kv.split("=", 1) for kv in spec.split(";"))

    def factory(p, **o):
        kw: dict[str, object] = {}
        for k, v in opts.items():
            if v.endswith("bdp"):
                kw[k] = float(v[:-3]) * p.line_rate_bps / 8 * p.base_rtt_s
            elif v in ("True", "False"):
                kw[k] = v == "True"
            else:
                kw[k] = float(v)
        return cc.make_cc(base, p, **{**kw, **o})

    name = "bench-" + "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in algo)
    cc.register_cc(name, factory)
    return name


def run_scenario(name: str, seed: int, algo: str, spray: str | None) -> dict:
    # mrcnic's modules are imported here, in the worker, from the tree under test (see _registered)
    algo = _registered(algo)
    if spray is not None:
        import dataclasses

        from mrcnic.transport import ev

        fields = {f.name for f in dataclasses.fields(ev.EvConfig)}
        if "spray" in fields:  # older revisions have only the random choice
            base = ev.EvConfig

            def patched(*a, **k):
                k.setdefault("spray", spray)
                return base(*a, **k)

            import mrcnic.sim.incast
            import mrcnic.sim.transfer

            mrcnic.sim.transfer.EvConfig = patched
            mrcnic.sim.incast.EvConfig = patched
    sc = SCENARIOS[name]
    if "sim" in sc:
        from mrcnic.sim import transfer as sim

        argv = [*FABRIC, *sc["sim"], "--seed", str(seed), "--cc", algo]
        args = sim.build_parser().parse_args(argv)
        s = sim.Simulation(sim.config_from_args(args))
        probes = [_instrument(a, b) for a, b in s.pairs]
        r = s.run()
        rec = r["recovery_s"]
        recovery_rtts = None if rec is None else round(rec / r["base_rtt_s"], 2)
        extra = {"recovery_rtts": recovery_rtts, **_cc_counters([a for a, _ in s.pairs])}
        return _row(r, probes, extra, r["cpu_s"])
    from mrcnic.sim import incast as sim_incast

    cfg = sim_incast.IncastConfig(seed=seed, cc=algo, **sc["incast"])
    inc = sim_incast.Incast(cfg)
    probes = [_instrument(a, b) for a, b in zip(inc.senders, inc.receivers, strict=True)]
    waits: list[float] = []
    rx = inc.fabric.receiver
    inc.fabric.last[rx] = [_QueueProbe(link, waits) for link in inc.fabric.last[rx]]
    c0 = time.process_time()
    r = inc.run()
    cpu_s = round(time.process_time() - c0, 3)
    waits.sort()
    cc0 = inc.senders[0].cc
    params = getattr(cc0, "params", None)
    # UET NSCC's target delay for this fabric (the default: 0.75 base RTT), for every algorithm
    target = params.target_delay_s if params is not None else 0.75 * cfg.base_rtt_s
    p50 = waits[len(waits) // 2] if waits else 0.0
    extra = {
        "jain_fairness": r["jain_fairness"],
        "queue_delay_mean_ms": round(statistics.fmean(waits) * 1e3, 4) if waits else 0.0,
        "queue_delay_p50_ms": round(p50 * 1e3, 4),
        "queue_delay_p99_ms": round(waits[int(0.99 * (len(waits) - 1))] * 1e3, 4) if waits else 0,
        "queue_p50_over_target": round(p50 / target, 3),
        "target_delay_ms": round(target * 1e3, 4),
        "base_rtt_ms": round(cfg.base_rtt_s * 1e3, 4),
        "lasthop_trims": r["lasthop_trims"],
        **_cc_counters(inc.senders),
    }
    return _row(r, probes, extra, cpu_s)


def _row(r: dict, probes: list, extra: dict, cpu_s: float) -> dict:
    """One scenario's result; ``extra`` holds the simulator-specific keys (kept in this order)."""
    return {
        "goodput_fraction": r["goodput_fraction"],
        "retransmissions": r["retransmissions"],
        "timeouts": r["timeouts"],
        "spurious_timeouts": _spurious(probes),
        "timeout_downgrades": _downgrades(probes),
        **extra,
        "ok": bool(r["verified"] and not r["qp_errors"]),
        "trims": r["trims"],
        "ecn_marks": r["ecn_marks"],
        "ev_states": r["ev_states"],
        "cpu_s": cpu_s,
    }


def worker(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--tree", required=True)
    p.add_argument("--scenarios", required=True)
    p.add_argument("--seeds", required=True)
    p.add_argument("--algos", required=True)
    p.add_argument("--spray", default=None)
    a = p.parse_args(argv)
    sys.path.insert(0, a.tree)
    algos = a.algos.split(",")
    for i, seed in enumerate(int(s) for s in a.seeds.split(",")):
        order = algos if i % 2 == 0 else algos[::-1]  # alternate who goes first
        for name in a.scenarios.split(","):
            for algo in order:
                r = run_scenario(name, seed, algo, a.spray)
                print(json.dumps({"algo": algo, "scenario": name, "seed": seed, **r}), flush=True)
    return 0


# -- driver ---------------------------------------------------------------------------------


def baseline_tree(rev: str, dest: Path) -> Path:
    """The ``mrcnic`` package of git revision ``rev`` (read-only ``git archive``), plus the
    current incast module and compiled C core, which it lacks."""
    tar = dest / "rev.tar"
    with open(tar, "wb") as f:
        subprocess.run(["git", "archive", rev, "mrcnic"], cwd=ROOT, check=True, stdout=f)
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="data")
    for extra in ["sim/incast.py", *(p.name for p in (ROOT / "mrcnic").glob("_mrcfast*"))]:
        if not (dest / "mrcnic" / extra).exists():
            shutil.copy2(ROOT / "mrcnic" / extra, dest / "mrcnic" / extra)
    return dest


def _median(rs: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def collect(
    tree: Path, scenarios: list[str], seeds: list[int], algos: list[str], spray: str | None
) -> dict:
    """{algo: {scenario: {"median": ..., "runs": [...]}}} from one worker subprocess."""
    cmd = [sys.executable, __file__, "--worker", "--tree", str(tree)]
    cmd += ["--scenarios", ",".join(scenarios), "--seeds", ",".join(map(str, seeds))]
    cmd += ["--algos", ",".join(algos)]
    if spray:
        cmd += ["--spray", spray]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    runs: dict[str, dict[str, list[dict]]] = {}
    for line in proc.stdout.splitlines():
        r = json.loads(line)
        runs.setdefault(r.pop("algo"), {}).setdefault(r.pop("scenario"), []).append(r)
    out: dict[str, dict] = {}
    for algo in algos:
        out[algo] = {}
        for name in scenarios:
            rs = runs[algo][name]
            med = {m: statistics.median(r[m] for r in rs) for m in METRICS}
            for k in ("recovery_rtts", *INCAST_METRICS, *CC_COUNTERS):
                if k in rs[0] and (v := _median(rs, k)) is not None:
                    med[k] = v
            for k in ("target_delay_ms", "base_rtt_ms"):
                if k in rs[0]:
                    med[k] = rs[0][k]
            med["all_ok"] = all(r["ok"] for r in rs)
            med["cpu_s_median"] = statistics.median(r["cpu_s"] for r in rs)
            sc = SCENARIOS[name]
            if sc.get("target") is not None:
                med["target"] = round(sc["target"], 4)
                med["meets_target"] = med["goodput_fraction"] >= sc["target"] and (
                    name != "plane_failed" or med.get("recovery_rtts", 1e9) < 10
                )
            if sc.get("jain") is not None:
                med["meets_jain"] = med["jain_fairness"] >= sc["jain"]
            out[algo][name] = {"median": med, "runs": rs}
    return out


def _machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "system": f"{platform.system()} {platform.release()}",
    }


def _ratios(new: dict, old: dict, scenarios: list[str]) -> dict:
    keys = ("goodput_fraction", "jain_fairness", "queue_delay_p50_ms", "retransmissions")
    out = {}
    for name in scenarios:
        a, b = new[name]["median"], old[name]["median"]
        out[name] = {
            k: (round(a[k] / b[k], 3) if b.get(k) else None) for k in keys if k in a and k in b
        }
    return out


def _print(label: str, res: dict) -> None:
    print(f"== {label}")
    for name, v in res.items():
        m = v["median"]
        extra = ""
        if "recovery_rtts" in m:
            extra += f" recovery {m['recovery_rtts']} RTTs"
        if "jain_fairness" in m:
            extra += (
                f" jain {m['jain_fairness']} queue p50 {m['queue_delay_p50_ms']} ms"
                f" ({m['queue_p50_over_target']} x target {m['target_delay_ms']} ms)"
                f" p99 {m['queue_delay_p99_ms']} ms"
            )
        if "meets_target" in m:
            extra += f" target {m['target']} {'met' if m['meets_target'] else 'MISSED'}"
        print(
            f"  {name:20s} goodput {m['goodput_fraction']:.4f} rtx {m['retransmissions']:6g}"
            f" timeouts {m['timeouts']:5g} spurious {m['spurious_timeouts']:5g}"
            f" ->BAD {m['timeout_downgrades']:4g} ok {m['all_ok']}{extra}"
        )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "results" / "bench-nscc.json"))
    p.add_argument("--seeds", default="1,2,3,4,5")
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument(
        "--algos", default=",".join(ALGOS), help="registry names; the first is the new one"
    )
    p.add_argument("--baseline-rev", default=None, help="also run 'nscc' at git revision REV")
    p.add_argument("--random-spray", action="store_true", help="also run spray='random'")
    a = p.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    scenarios = a.scenarios.split(",")
    algos = a.algos.split(",")
    result: dict = {
        "bench": "nscc",
        "date": datetime.date.today().isoformat(),
        "machine": _machine(),
        "fabric": "8 planes x 4 paths, 100 Mb/s ports, 20 us, 64 KiB queues, ECN 16 KiB "
        "(last hops: no ECN); 64 MiB per sim run, incast: per-sender size",
        "seeds": seeds,
        "algorithms": algos,
        "scenarios": {k: dict(v) for k, v in SCENARIOS.items()},
    }
    t0 = time.time()
    result["by_algorithm"] = collect(ROOT, scenarios, seeds, algos, None)
    if len(algos) >= 2:
        new, old = algos[0], algos[1]
        result[f"ratio_{new}_over_{old}"] = _ratios(
            result["by_algorithm"][new], result["by_algorithm"][old], scenarios
        )
    if a.random_spray:
        result["random_spray"] = collect(ROOT, scenarios, seeds, algos[:1], "random")
    if a.baseline_rev:
        with tempfile.TemporaryDirectory() as d:
            tree = baseline_tree(a.baseline_rev, Path(d))
            result["baseline_rev"] = a.baseline_rev
            result["baseline"] = collect(tree, scenarios, seeds, ["nscc"], None)["nscc"]
    result["wall_s"] = round(time.time() - t0, 1)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    for algo in algos:
        _print(algo, result["by_algorithm"][algo])
    if "random_spray" in result:
        _print(f"{algos[0]}, spray=random", result["random_spray"][algos[0]])
    if "baseline" in result:
        _print(f"nscc at {a.baseline_rev}", result["baseline"])
    print(f"wrote {a.out} in {result['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""NSCC / RTO robustness benchmark -> results/bench-nscc.json.

Runs mrc-sim scenarios (8 planes x 4 paths, 100 Mb/s ports: the lab's 1/1000 scale) and an
N-to-1 incast (``mrcnic.sim.incast``) and reports, per scenario, the median over seeds of the
goodput fraction, retransmissions, timeouts and *spurious* timeouts, plus recovery in base
RTTs for the plane failure.  A spurious timeout is counted from outside the QP, so the same
count works on any revision: a timed-out transmission (PSN, timestamp) that the responder
did receive intact.

With ``--baseline-rev REV`` the same scenarios also run on the transport of git revision REV
(``git archive``, read-only; the current ``sim_incast.py`` and C module are copied in), each
in its own subprocess, and the JSON gets before/after ratios.

    .venv/bin/python bench/bench_nscc.py --baseline-rev 1bf5f44 --out results/bench-nscc.json
"""

from __future__ import annotations

import argparse
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
FABRIC = ["--planes", "8", "--paths-per-plane", "4", "--size", "64M"]
SCENARIOS: dict[str, dict] = {
    "oversubscribed": {"sim": ["--path-rate", "20Mbit"]},
    "oversub_1pct_loss": {"sim": ["--path-rate", "20Mbit", "--loss", "0.01"]},
    "oversub_1ms_delay": {"sim": ["--path-rate", "20Mbit", "--delay", "1ms"]},
    "oversub_small_queues": {"sim": ["--path-rate", "20Mbit", "--queue", "16K", "--ecn", "8K"]},
    "lossless": {"sim": [], "target": 0.95},
    "loss_0.1pct": {"sim": ["--loss", "0.001"], "target": 0.9},
    "loss_1pct": {"sim": ["--loss", "0.01"], "target": 0.8},
    "plane_failed": {"sim": ["--fail", "plane:3@50ms"], "target": 0.95 * 7 / 8},
    "incast_4to1": {"incast": {"senders": 4, "size": 8 << 20}},
    "incast_8to1": {"incast": {"senders": 8, "size": 4 << 20}},
}
METRICS = (
    "goodput_fraction",
    "retransmissions",
    "timeouts",
    "spurious_timeouts",
    "timeout_downgrades",
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

    def wrapped_timeout(slot, sent_s, now_s, *rest):  # noqa: ANN001, ANN202
        for rec in sender.sb.records.values():
            if rec.slot == slot and rec.sent_s == sent_s and not rec.lost:
                timed_out.add((rec.psn, rec.tx_ts_ns))
                break
        down = on_timeout(slot, sent_s, now_s, *rest)
        downgrades[0] += bool(down)
        return down

    evs.on_timeout = wrapped_timeout
    receive = receiver.receive_frame

    def wrapped_receive(frame, now_s):  # noqa: ANN001, ANN202
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


def run_scenario(name: str, seed: int, spray: str | None) -> dict:
    if spray is not None:
        import dataclasses

        from mrcnic.transport import ev

        fields = {f.name for f in dataclasses.fields(ev.EvConfig)}
        if "spray" in fields:  # older revisions have only the random choice
            base = ev.EvConfig

            def patched(*a, **k):  # noqa: ANN002, ANN003, ANN202
                k.setdefault("spray", spray)
                return base(*a, **k)

            import mrcnic.sim.incast
            import mrcnic.sim.transfer

            mrcnic.sim.transfer.EvConfig = patched
            mrcnic.sim.incast.EvConfig = patched
    sc = SCENARIOS[name]
    if "sim" in sc:
        from mrcnic.sim import transfer as sim

        args = sim.build_parser().parse_args([*FABRIC, *sc["sim"], "--seed", str(seed)])
        s = sim.Simulation(sim.config_from_args(args))
        probes = [_instrument(a, b) for a, b in s.pairs]
        r = s.run()
        rec = r["recovery_s"]
        recovery_rtts = None if rec is None else round(rec / r["base_rtt_s"], 2)
        out = _row(r, probes, {"recovery_rtts": recovery_rtts}, r["cpu_s"])
    else:
        from mrcnic.sim import incast as sim_incast

        cfg = sim_incast.IncastConfig(seed=seed, **sc["incast"])
        inc = sim_incast.Incast(cfg)
        probes = [_instrument(a, b) for a, b in zip(inc.senders, inc.receivers, strict=True)]
        c0 = time.process_time()
        r = inc.run()
        cpu_s = round(time.process_time() - c0, 3)
        out = _row(r, probes, {"jain_fairness": r["jain_fairness"]}, cpu_s)
    return out


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
    p.add_argument("--spray", default=None)
    a = p.parse_args(argv)
    sys.path.insert(0, a.tree)
    for name in a.scenarios.split(","):
        for seed in (int(s) for s in a.seeds.split(",")):
            r = run_scenario(name, seed, a.spray)
            print(json.dumps({"scenario": name, "seed": seed, **r}), flush=True)
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


def collect(tree: Path, scenarios: list[str], seeds: list[int], spray: str | None) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--tree", str(tree)]
    cmd += ["--scenarios", ",".join(scenarios), "--seeds", ",".join(map(str, seeds))]
    if spray:
        cmd += ["--spray", spray]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    runs: dict[str, list[dict]] = {}
    for line in proc.stdout.splitlines():
        r = json.loads(line)
        runs.setdefault(r.pop("scenario"), []).append(r)
    out = {}
    for name, rs in runs.items():
        med = {m: statistics.median(r[m] for r in rs) for m in METRICS}
        if rs[0].get("recovery_rtts") is not None:
            med["recovery_rtts"] = statistics.median(r["recovery_rtts"] for r in rs)
        if "jain_fairness" in rs[0]:
            med["jain_fairness"] = statistics.median(r["jain_fairness"] for r in rs)
        med["all_ok"] = all(r["ok"] for r in rs)
        med["cpu_s_median"] = statistics.median(r["cpu_s"] for r in rs)
        target = SCENARIOS[name].get("target")
        if target is not None:
            med["target"] = round(target, 4)
            med["meets_target"] = med["goodput_fraction"] >= target and (
                name != "plane_failed" or med.get("recovery_rtts", 1e9) < 10
            )
        out[name] = {"median": med, "runs": rs}
    return out


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "results" / "bench-nscc.json"))
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--baseline-rev", default=None, help="also run git revision REV (e.g. HEAD)")
    p.add_argument("--random-spray", action="store_true", help="also run spray='random'")
    a = p.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    scenarios = a.scenarios.split(",")
    result: dict = {
        "bench": "nscc",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "fabric": "8 planes x 4 paths, 100 Mb/s ports, 20 us, 64 KiB queues, ECN 16 KiB; "
        "64 MiB per sim run, incast: per-sender size",
        "seeds": seeds,
        "scenarios": {k: {kk: vv for kk, vv in v.items()} for k, v in SCENARIOS.items()},
    }
    t0 = time.time()
    result["after"] = collect(ROOT, scenarios, seeds, None)
    if a.random_spray:
        result["after_random_spray"] = collect(ROOT, scenarios, seeds, "random")
    if a.baseline_rev:
        with tempfile.TemporaryDirectory() as d:
            tree = baseline_tree(a.baseline_rev, Path(d))
            result["baseline_rev"] = a.baseline_rev
            result["before"] = collect(tree, scenarios, seeds, None)
        result["ratio_after_over_before"] = {
            name: {
                m: (
                    round(result["after"][name]["median"][m] / b, 3)
                    if (b := result["before"][name]["median"][m])
                    else None
                )
                for m in METRICS
            }
            for name in scenarios
        }
    result["wall_s"] = round(time.time() - t0, 1)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    for label in ("before", "after", "after_random_spray"):
        if label not in result:
            continue
        print(f"== {label}")
        for name, v in result[label].items():
            m = v["median"]
            extra = ""
            if "recovery_rtts" in m:
                extra += f" recovery {m['recovery_rtts']} RTTs"
            if "jain_fairness" in m:
                extra += f" jain {m['jain_fairness']}"
            if "meets_target" in m:
                extra += f" target {m['target']} {'met' if m['meets_target'] else 'MISSED'}"
            print(
                f"  {name:15s} goodput {m['goodput_fraction']:.4f} rtx {m['retransmissions']:6g}"
                f" timeouts {m['timeouts']:5g} spurious {m['spurious_timeouts']:5g}"
                f" ->BAD {m['timeout_downgrades']:4g}"
                f" ok {m['all_ok']}{extra}"
            )
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``make fuzz``: hostile frames into a running switch and into NICs with live QPs.

    python -m lab.fuzz                      # 1,000,000 frames per target -> results/fuzz.json
    python -m lab.fuzz --frames 30000 --targets nic-c,nic-py

Targets (each in a process of its own, so a crash is counted, not fatal to the run):

- ``nic-c``, ``nic-py``: two devices writing to each other with the C or the Python engine
  over the simulated fabric, the frames handed to their receive path (:mod:`lab.workloads.fuzz.nic`),
  no root needed;
- ``wire-c``, ``wire-py``: two running NICs (AF_PACKET, the asyncio shell) in two namespaces
  joined by a veth, the frames sent over the wire by a third socket (:mod:`lab.workloads.fuzz.wire`),
  root;
- ``switch``: an mrc-switch process on a veth chain (:mod:`lab.workloads.fuzz.switch`), root.

The report: ``frames``, ``crashes`` (must be 0), ``rss_growth_bytes`` (the largest growth of
a target's resident memory from the end of its warm-up, a tenth of its frames, to its end;
bounded by ``rss_bound_bytes``), ``accounted`` and ``every_frame_accounted``, and per target
the counters under which every frame was dropped, placed or forwarded. Exit status 1 when a
target crashed, lost count of a frame, or grew beyond the bound.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TARGETS = ("nic-c", "nic-py", "wire-c", "wire-py", "switch")
ROOT_TARGETS = ("wire-c", "wire-py", "switch")
RSS_BOUND_BYTES = 32 << 20  # growth after warm-up; a leak per frame or per QP pair exceeds it


def _worker(target: str, frames: int, seed: int) -> dict[str, Any]:
    # a worker imports its own target only: its memory growth is what the fuzz watches
    if target == "switch":
        from lab.workloads.fuzz import switch as fuzz_switch

        return fuzz_switch.run(frames, seed)
    if target.startswith("wire-"):
        from lab.workloads.fuzz import wire as fuzz_wire

        return fuzz_wire.run(frames, seed)
    from lab.workloads.fuzz import nic as fuzz_nic

    return fuzz_nic.run(frames, seed)


def run_target(target: str, frames: int, seed: int, timeout_s: float) -> dict[str, Any]:
    """One target in a child process; a child that dies or hangs is a crash."""
    env = dict(os.environ)
    if target.startswith(("nic-", "wire-")):
        env["MRC_NIC_ENGINE"] = target.split("-", 1)[1]
    argv = [sys.executable, "-m", "lab.fuzz", "--worker", target, "--frames", str(frames)]
    argv += ["--seed", str(seed)]
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"frames": 0, "crashes": 1, "error": f"no answer within {timeout_s:.0f} s"}
    if p.returncode != 0:
        return {
            "frames": 0,
            "crashes": 1,
            "error": f"exit status {p.returncode}",
            "stderr_tail": p.stderr[-3000:],
        }
    res = json.loads(p.stdout)
    res["target_wall_s"] = round(time.monotonic() - t0, 1)
    return res


def summarize(results: dict[str, dict[str, Any]], seed: int) -> dict[str, Any]:
    frames = sum(r.get("frames", 0) for r in results.values())
    growth = max((r.get("rss_growth_bytes", 0) for r in results.values()), default=0)
    return {
        "frames": frames,
        "crashes": sum(r.get("crashes", 0) for r in results.values()),
        "rss_growth_bytes": growth,
        "rss_bound_bytes": RSS_BOUND_BYTES,
        "rss_bounded": growth <= RSS_BOUND_BYTES,
        "accounted": sum(r.get("accounted", 0) for r in results.values()),
        "every_frame_accounted": all(r.get("every_frame_accounted") for r in results.values()),
        "seed": seed,
        "targets": results,
        "machine": {
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
        },
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"),
    }


def ok(report: dict[str, Any]) -> bool:
    return report["crashes"] == 0 and report["every_frame_accounted"] and report["rss_bounded"]


def _line(name: str, r: dict[str, Any]) -> str:
    if "error" in r:
        return f"  {name:7s} CRASHED: {r['error']}"
    acct = "every frame accounted" if r.get("every_frame_accounted") else "FRAMES UNACCOUNTED"
    return (
        f"  {name:7s} {r['frames']:>9,} frames, {r['crashes']} crashes, {acct}, "
        f"rss +{r['rss_growth_bytes'] / 2**20:.1f} MiB, {r.get('target_wall_s', 0):.0f} s"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lab.fuzz",
        description="Hostile frames (random, cut, lying lengths, every opcode with a valid "
        "ICRC, forged SACK/NACK/probe/PORT_STATUS, data with stolen and guessed R_Keys, "
        "replays) into NICs with live QPs (C and Python engines) and a running mrc-switch; "
        "checks that nothing crashes, memory stays bounded and every frame is counted.",
        epilog="The wire and switch targets need root (namespaces). A full run takes about "
        "six minutes on a 2-core machine.",
    )
    ap.add_argument("--frames", type=int, default=1_000_000, help="per target (default 1e6)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--targets",
        default=",".join(TARGETS),
        help=f"comma-separated, of {', '.join(TARGETS)} (default all)",
    )
    ap.add_argument("--out", default="results/fuzz.json", help="the JSON report ('-': none)")
    ap.add_argument("--worker", choices=TARGETS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.frames <= 0:
        ap.error("--frames must be positive")
    if args.worker:
        print(json.dumps(_worker(args.worker, args.frames, args.seed)))
        return 0
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        ap.error(f"unknown target(s) {', '.join(unknown)}: choose from {', '.join(TARGETS)}")
    need_root = [t for t in targets if t in ROOT_TARGETS]
    if need_root and os.geteuid() != 0:
        ap.error(
            f"{', '.join(need_root)} need root (network namespaces): sudo, or --targets "
            "nic-c,nic-py"
        )
    results = {}
    for t in targets:
        print(f"fuzz: {t}: {args.frames:,} frames (seed {args.seed}) ...", flush=True)
        results[t] = run_target(t, args.frames, args.seed, timeout_s=60 + args.frames / 2000)
        print(_line(t, results[t]), flush=True)
    report = summarize(results, args.seed)
    if args.out != "-":
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
        print(f"fuzz: report in {args.out}")
    verdict = "passed" if ok(report) else "FAILED"
    print(
        f"fuzz: {verdict}: {report['frames']:,} frames, {report['crashes']} crashes, "
        f"largest memory growth {report['rss_growth_bytes'] / 2**20:.1f} MiB "
        f"(bound {RSS_BOUND_BYTES >> 20} MiB)"
    )
    return 0 if ok(report) else 1


if __name__ == "__main__":
    sys.exit(main())

"""A lab split over two machines against the same lab on one, at the same link rate: one QP's
verified writes h0 -> h3, whose every frame crosses the split once (docs/multihost.md).

    .venv/bin/python bench/bench_split.py [--rate-mbit 5] [--size 64M] [--reps 3]
        [--out results/bench-split.json]

Each repetition brings up the lab (``mrc-lab up``), runs ``mrc-bench write``, and takes it
down again, unsplit and split (``--machines 2``: both parts here, the machines stood in for
by namespaces on a bridged underlay) in alternating order; the JSON holds every run and the
medians (``goodput_fraction_unsplit``, ``goodput_fraction_split``, ``difference``). Root.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from mrcnic.cliflags import rate_with_unit, renamed

VENV_BIN = Path(sys.executable).parent
KEYS = ("goodput_fraction", "verified", "cpu_bound", "cpu_wait_per_frame_time", "retransmissions",
        "spurious_timeouts", "machine_busy_fraction")  # fmt: skip


def _tool(name: str) -> str:
    exe = VENV_BIN / name
    return str(exe) if exe.exists() else name


def _commit() -> str | None:
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or None


def one_run(lab: str, split: bool, rate_mbit: float, size: str) -> dict[str, Any]:
    up = [_tool("mrc-lab"), "up", "--lab", lab, "--rate", f"{rate_mbit:g}Mbit", "-q"]
    if split:
        up += ["--machines", "2"]
    subprocess.run(up, check=True, stdout=subprocess.DEVNULL)
    try:
        w = subprocess.run(
            [_tool("mrc-bench"), "write", "--lab", lab, "--src", "h0", "--dst", "h3", "--size",
             size, "--iters", "1", "--json"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    finally:
        subprocess.run([_tool("mrc-lab"), "down", "--lab", lab, "-q"], stdout=subprocess.DEVNULL)
    if w.returncode != 0:
        return {"split": split, "error": w.stderr.strip().splitlines()[-3:]}
    res = json.loads(w.stdout)
    return {"split": split, **{k: res.get(k) for k in KEYS}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lab", default="mrcsplt")
    renamed(ap, "--rate", "--rate-mbit", dest="rate_bps", type=rate_with_unit,
            old_type=lambda t: float(t) * 1e6, default=5e6,
            help="every link's rate, with its unit (5Mbit) [5Mbit]")  # fmt: skip
    ap.add_argument("--size", default="64M")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("results/bench-split.json"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_split: needs root (it brings labs up)", file=sys.stderr)
        return 2
    runs = []
    for rep in range(args.reps):
        order = (False, True) if rep % 2 == 0 else (True, False)
        for split in order:
            r = one_run(args.lab, split, args.rate_bps / 1e6, args.size)
            r["rep"] = rep
            runs.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)

    def med(split: bool) -> float | None:
        xs = [r["goodput_fraction"] for r in runs if r["split"] == split and "error" not in r]
        return round(statistics.median(xs), 4) if xs else None

    uns, spl = med(False), med(True)
    out = {
        "bench": "split",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cores": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
        },  # fmt: skip
        "commit": _commit(),
        "rate_mbit": args.rate_bps / 1e6,
        "size": args.size,
        "reps": args.reps,
        "goodput_fraction_unsplit": uns,
        "goodput_fraction_split": spl,
        "difference": None if uns is None or spl is None else round(spl - uns, 4),
        "all_verified": all(r.get("verified") for r in runs),
        "any_cpu_bound": any(r.get("cpu_bound") for r in runs),
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}))
    return 0 if out["all_verified"] else 1


if __name__ == "__main__":
    sys.exit(main())

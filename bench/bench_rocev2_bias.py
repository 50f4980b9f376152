#!/usr/bin/env python3
"""RoCEv2 baseline biases (issue 25) -> results/bench-rocev2-bias.json.

Three behaviours of the baseline were suspected of favouring or hurting it against RoCEv2 as
deployed on ConnectX-class NICs; each can be turned back on with a ``RoceConfig`` field, so
this script runs mrc-sim's RoCEv2 baseline with all of them old ("before"), each new one
alone on top of that, none old ("after", today's defaults), and each old one alone on top of
"after":

(a) ``nak_retries``: NAK sequence errors use up ``retry_cnt`` (before: they never did);
(b) ``bdp_window``: the cap of max(16, 2 x BDP + 4) unacknowledged PSNs (now: none);
(c) ``dcqcn_profile``: ConnectX's default DCQCN constants (before: the paper's), and the
    paper's constants with only ConnectX's 4 us CNP interval, to separate the two.

Scenarios where they can show: eight QPs of one host hashed onto four 200 Mb/s paths behind
an 800 Mb/s port (ECMP collisions, a 2:1 bottleneck), every path slower than the port
(20 Mb/s paths, one QP per plane), and 1% random loss.  Median over seeds 1-3 (deterministic
virtual time: the figures depend on the seed only).  mrc-sim command lines are in the output.

    .venv/bin/python bench/bench_rocev2_bias.py --out results/bench-rocev2-bias.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from dataclasses import replace
from pathlib import Path

from mrcnic.rocev2.dcqcn import PROFILES, REFERENCE_PORT_BPS
from mrcnic.sim import transfer as sim

BEFORE = ("bdp_window=true", "nak_retries=false", "dcqcn_profile=paper")
SCENARIOS: dict[str, list[str]] = {
    "collide_2to1": [
        *("--planes", "1", "--t1", "4", "--rate", "800M"),
        *("--path-rate", "200M", "--qps", "8", "--size", "16M"),
    ],
    "paths_5x_slower": ["--path-rate", "20Mbit", "--size", "16M"],
    "loss_1pct": ["--loss", "0.01", "--size", "64M"],
}
#: docs/design/rocev2.md's figures and sensitivities, and heavy loss for (a): before and after only
STANDARD: dict[str, list[str]] = {
    "lossless": ["--size", "64M"],
    "loss_0.1pct": ["--loss", "0.001", "--size", "64M"],
    "plane_failed": ["--fail", "plane:3@50ms", "--size", "64M"],
    "loss_1pct_delay_2ms": ["--loss", "0.01", "--delay", "2ms", "--size", "64M"],
    "loss_1pct_timeout_14": [
        *("--loss", "0.01", "--rocev2-timeout", "14", "--max-time", "2000s", "--size", "64M")
    ],
    "one_qp_one_plane": [*SCENARIOS["collide_2to1"][:8], "--qps", "1", "--size", "16M"],
    "loss_10pct": ["--loss", "0.1", "--size", "16M"],
}


def cnp_4us(args: list[str]) -> str:
    """ConnectX's 4 us CNP interval in this scenario's lab time."""
    rate = sim.build_parser().parse_args(args).port_rate
    return f"cnp_interval_s={PROFILES['connectx'].cnp_interval_s * REFERENCE_PORT_BPS / rate:g}"


def variants(args: list[str]) -> dict[str, tuple[str, ...]]:
    """name -> the --rocev2-option values of each variant."""
    return {
        "before": BEFORE,
        "a_nak_retries_only": ("bdp_window=true", "dcqcn_profile=paper"),
        "b_no_window_only": ("nak_retries=false", "dcqcn_profile=paper"),
        "c_connectx_dcqcn_only": ("bdp_window=true", "nak_retries=false"),
        "c_paper_with_4us_cnps": (*BEFORE, cnp_4us(args)),
        "after": (),
        # and each one old again on top of today's defaults
        "after_but_a_old": ("nak_retries=false",),
        "after_but_b_old": ("bdp_window=true",),
        "after_but_c_old": ("dcqcn_profile=paper",),
    }


def run_seeds(args: list[str], options: tuple[str, ...], seeds: list[int], extra=()) -> dict:
    runs = []
    opt_args = [x for o in options for x in ("--rocev2-option", o)]
    for seed in seeds:
        a = sim.build_parser().parse_args(
            [*args, "--transport", "rocev2", "--seed", str(seed), *opt_args]
        )
        cfg = sim.config_from_args(a)
        if extra:
            cfg = replace(cfg, rocev2_options=cfg.rocev2_options + tuple(extra))
        runs.append(sim.run(cfg))
    med = statistics.median
    command = f"mrc-sim --transport rocev2 {' '.join(args + opt_args)} --seed {{1,2,3}}"
    return {
        "command": command + (f" (script only: {dict(extra)})" if extra else ""),
        "goodput_fraction": med(r["goodput_fraction"] for r in runs),
        "goodput_fraction_runs": [r["goodput_fraction"] for r in runs],
        "qp_errors_runs": [r["qp_errors"] for r in runs],
        "qp_error_kinds": sorted(
            {
                "NAKed" if "NAKed" in e else "unacknowledged"
                for r in runs
                for e in r["qp_error_reasons"]
            }
        ),
        "retransmissions_median": med(r["retransmissions"] for r in runs),
        "timeouts_median": med(r["timeouts"] for r in runs),
        "drops_median": med(r["drops"] for r in runs),
        "ecn_marks_median": med(r["ecn_marks"] for r in runs),
        "cnps_median": med(r["rocev2"]["cnps"] for r in runs),
        "gbn_rewinds_median": med(r["rocev2"]["gbn_rewinds"] for r in runs),
        "nak_retries_median": med(r["rocev2"]["nak_retries"] for r in runs),
        "window_psns": runs[0]["rocev2"]["window_psns"],
        "sim_wall_s": round(sum(r["wall_s"] for r in runs), 1),
    }


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", default="results/bench-rocev2-bias.json")
    p.add_argument("--seeds", default="1,2,3")
    a = p.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    t0 = time.perf_counter()
    results: dict[str, dict] = {}
    for name, args in SCENARIOS.items():
        per = {v: run_seeds(args, opts, seeds) for v, opts in variants(args).items()}
        # rpg_byte_reset read in 64-byte units (2 MiB), as one open ConnectX model does
        per["after_byte_counter_2MiB"] = run_seeds(
            args, (), seeds, extra=(("dcqcn_options", (("byte_counter_bytes", 32767 * 64),)),)
        )
        results[name] = per
        print(name, {v: r["goodput_fraction"] for v, r in per.items()}, flush=True)
    for name, args in STANDARD.items():
        per = {v: run_seeds(args, opts, seeds) for v, opts in (("before", BEFORE), ("after", ()))}
        results[name] = per
        print(name, {v: r["goodput_fraction"] for v, r in per.items()}, flush=True)
    out = {
        "benchmark": "rocev2-bias",
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
        "host": {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "fabric": "mrc-sim defaults unless the command says otherwise: 8 planes x 4 paths, "
        "100 Mb/s ports and paths, 20 us propagation, 64 KiB queues, ECN at 16 KiB, lossy",
        "seeds": seeds,
        "results": results,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

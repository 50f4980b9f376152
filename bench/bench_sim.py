#!/usr/bin/env python3
"""How fast mrc-sim simulates a whole fabric: ``make bench-sim`` -> results/bench-sim.json.

One permutation per host count (``mrc-sim --workload permutation``, MRC, 8 planes, the
lab's 100 Mb/s, ``--size`` per flow), each in its own process so its peak memory is its own
(``os.wait4``'s rusage). Reported per run, keyed by host count (contract keys
``data_packets_per_wall_s`` and ``peak_rss_bytes``): simulated data packets per wall-second
(the run's own ``data_packets`` over its own ``wall_s``, building the fabric excluded), peak
RSS, wall and CPU seconds, and the run's utilisation and verification. A figure of
simulator speed depends on the machine: quote it with the machine and date it records.

    .venv/bin/python bench/bench_sim.py --out results/bench-sim.json
    .venv/bin/python bench/bench_sim.py --hosts 16,128 --size 1M    # a shorter run
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: hosts -> (T0s per plane, hosts per T0, T1s per plane): non-blocking two-tier Closes
SHAPES = {16: (4, 4, 4), 128: (16, 8, 8), 1024: (64, 16, 16)}


def run_one(hosts: int, size: str, transport: str) -> dict[str, Any]:
    t0, hpt, t1 = SHAPES[hosts]
    cmd = [sys.executable, "-m", "mrcnic.sim.transfer", "--workload", "permutation",
           "--t0", str(t0), "--hosts-per-t0", str(hpt), "--t1", str(t1), "--size", size,
           "--transport", transport, "--json"]  # fmt: skip
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        assert proc.stderr is not None
        err = proc.stderr.read()
        out.seek(0)
        text = out.read()
    if not text.strip():
        raise SystemExit(f"{hosts} hosts: mrc-sim printed nothing (exit {proc.returncode}): {err}")
    r = json.loads(text)
    return {
        "hosts": r["hosts"],
        "shape": {"t0": t0, "hosts_per_t0": hpt, "t1": t1, "planes": r["planes"]},
        "transport": transport,
        "bytes_per_flow": r["bytes_per_flow"],
        "data_packets": r["data_packets"],
        "data_packets_per_wall_s": round(r["data_packets"] / r["wall_s"]) if r["wall_s"] else None,
        "peak_rss_bytes": usage.ru_maxrss * 1024,  # (Linux reports KiB)
        "wall_s": r["wall_s"],
        "cpu_s": r["cpu_s"],
        "utilisation": r["utilisation"],
        "verified": r["verified"],
        "qp_errors": r["qp_errors"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="16,128,1024", help="host counts [16,128,1024]")
    ap.add_argument("--size", default="1M", help="bytes per flow [1M]")
    ap.add_argument("--transport", default="mrc", choices=("mrc", "rocev2"))
    ap.add_argument("--out", default=None, help="write the JSON here")
    a = ap.parse_args(argv)
    counts = [int(x) for x in a.hosts.split(",") if x]
    bad = [n for n in counts if n not in SHAPES]
    if bad:
        ap.error(f"--hosts: {bad} not among {sorted(SHAPES)}")
    runs: dict[str, Any] = {}
    for n in counts:
        r = run_one(n, a.size, a.transport)
        runs[str(n)] = r
        print(f"{n:5d} hosts: {r['data_packets_per_wall_s']:>7} data packets per wall-second, "
              f"peak RSS {r['peak_rss_bytes'] / 2**20:.0f} MiB, {r['wall_s']:.1f} s wall, "
              f"utilisation {r['utilisation']}, verified {r['verified']}", flush=True)  # fmt: skip
    doc = {
        "runs": runs,
        "command": " ".join(["bench/bench_sim.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "load_avg": [round(x, 2) for x in os.getloadavg()],
        },
        "notes": "One process, one core: every packet of every QP and link is Python work "
        "(QPs on the Python engines, links in mrcnic.sim.fabric); the C engines do not run "
        "in the simulator yet.",
    }
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if all(r["verified"] and not r["qp_errors"] for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""How fast mrc-sim simulates a whole fabric: ``make bench-sim`` -> results/bench-sim.json.

One permutation per host count (``mrc-sim --workload permutation``, MRC, 8 planes, ``--size``
per flow), each in its own process so its peak memory is its own (``os.wait4``'s rusage).
Reported per run, keyed by host count (contract keys ``data_packets_per_wall_s`` and
``peak_rss_bytes``): simulated data packets per wall-second (the run's own ``data_packets``
over its own ``wall_s``, building the fabric excluded), peak RSS, wall and CPU seconds, and
the run's utilisation and verification. A figure of simulator speed depends on the machine:
quote it with the machine and date it records.

The scale (``--scale``, recorded as ``scale``) is passed to mrc-sim explicitly. The default,
``paper`` (100 Gb/s links, 4 us one way across a T1, 1 MiB buffers), is also the one htsim
can run: its defaults are 100 Gb/s links and 1 us per link, which on a two-tier fabric is the
same 4 us host -> T0 -> T1 -> T0 -> host, and its topology files take whole Gb/s, so the lab's
100 Mb/s has no htsim twin (``--scale lab`` runs without ``--htsim`` only).

With ``--htsim PATH`` (UEC's htsim_uec, built from source: docs/sim.md, Speed) each host
count is also run through htsim, in its own process: the same hosts, T0s, T1s, flow size,
permutation (mrc-sim's seeded derangement), link rate, per-hop delay, MTU payload and
buffer, with htsim's own congestion control (NSCC), ECN thresholds and spraying (its default
load balancing over 64 entropies). Its data packets are its own count of first sends
(``New``, as mrc-sim's ``data_packets`` counts them; its retransmissions, ``Rtx``, are
recorded beside), its wall time runs from its ``Starting simulation`` line to its ``Done``
(building excluded, like ours), and each run gets ``htsim`` and ``ratio_vs_htsim`` (ours /
htsim, data packets per wall-second); the top-level ``htsim`` says what differs between the
two runs.

    .venv/bin/python bench/bench_sim.py --out results/bench-sim.json
    .venv/bin/python bench/bench_sim.py --hosts 16,128 --size 1M    # a shorter run
    .venv/bin/python bench/bench_sim.py --hosts 16,128 --htsim /tmp/htsim-build/datacenter/htsim_uec
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from mrcnic.sim.clos import derangement, simulated
from mrcnic.sim.scale import PAPER, SCALES, Scale
from mrcnic.units import parse_size

#: hosts -> (T0s per plane, hosts per T0, T1s per plane): non-blocking two-tier Closes
SHAPES = {16: (4, 4, 4), 128: (16, 8, 8), 1024: (64, 16, 16)}
MTU_PAYLOAD_BYTES = 4096  # mrc-sim's default --mtu
HTSIM_HEADER_BYTES = 64  # htsim's UecSrc::_hdr_size: its -mtu is payload + this
#: what differs between an mrc-sim run and its htsim twin, recorded with every --htsim run
HTSIM_DIFFERENCES = (
    "mrc-sim runs the real protocol code (mrcnic's QueuePair: wire format, NSCC, SACK, "
    "retransmission, memory placement, verified end to end); htsim runs its model of UEC's "
    "transport (NSCC, REPS/bitmap load balancing) on packet objects, no payload",
    "planes: mrc-sim 8 (every NIC has a port in each), htsim_uec 1 (it refuses -planes > 1), "
    "so mrc-sim simulates 8x the switches and links for the same hosts and data packets",
    "per-link delay: mrc-sim puts the scale's one-way delay on the T0-T1 and T1-T0 links (half "
    "each) and none on host links; htsim a quarter of it on each of its four links, so across a "
    "T1 both take the same time and under one T0 htsim takes half of it, mrc-sim none",
    "the NIC: mrc-sim 8 ports of the scale's rate (one per plane), htsim one of the same rate",
    "ECN: mrc-sim marks above the scale's threshold; htsim keeps its own thresholds "
    "(0.2 and 0.8 of its BDP)",
    "packets: the same payload per packet (4096 B); mrc-sim's frames carry 110 B of headers, "
    "htsim's 64 B",
    "wall time: mrc-sim's own (building the fabric excluded); htsim's from its 'Starting "
    "simulation' line to its 'Done' (building excluded); htsim runs to its -end time, which "
    "costs nothing after the flows finish but its clock's few events",
)


#: where a run's per-packet work runs: the C fabric with the QPs on the C engines (mrc-sim's
#: default), and the Python twins of both, the reference that gives the same output
CORES = {"c": ("c", "c"), "python": ("py", "py")}


def run_one(
    hosts: int, size: str, transport: str, scale: str, cores: str = "c"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One permutation in its own process: (the bench's record, mrc-sim's whole output)."""
    t0, hpt, t1 = SHAPES[hosts]
    fabric, engine = CORES[cores]
    cmd = [sys.executable, "-m", "mrcnic.sim.transfer", "--workload", "permutation",
           "--t0", str(t0), "--hosts-per-t0", str(hpt), "--t1", str(t1), "--size", size,
           "--transport", transport, "--scale", scale, "--fabric", fabric, "--engine", engine,
           "--json"]  # fmt: skip
    began = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        assert proc.stderr is not None
        err = proc.stderr.read()
        out.seek(0)
        text = out.read()
    process_wall_s = time.perf_counter() - began
    if not text.strip():
        raise SystemExit(f"{hosts} hosts: mrc-sim printed nothing (exit {proc.returncode}): {err}")
    r = json.loads(text)
    return {
        "hosts": r["hosts"],
        "shape": {"t0": t0, "hosts_per_t0": hpt, "t1": t1, "planes": r["planes"]},
        "transport": transport,
        "fabric": r["fabric"],
        "engine": r["engine"],
        "bytes_per_flow": r["bytes_per_flow"],
        "data_packets": r["data_packets"],
        "data_packets_per_wall_s": round(r["data_packets"] / r["wall_s"]) if r["wall_s"] else None,
        "peak_rss_bytes": usage.ru_maxrss * 1024,  # (Linux reports KiB)
        "wall_s": r["wall_s"],
        "cpu_s": r["cpu_s"],
        # the whole process: start-up, building the fabric and the flows' memory, the run
        "process_wall_s": round(process_wall_s, 3),
        "utilisation": r["utilisation"],
        "verified": r["verified"],
        "qp_errors": r["qp_errors"],
        "seed": r["seed"],
        **({"sim_core": r["sim_core"]} if "sim_core" in r else {}),
    }, r


def measure(hosts: int, size: str, transport: str, scale: str, reps: int, twin: bool) -> dict:
    """``reps`` runs of mrc-sim's default cores, alternating with as many of the Python twins
    when ``twin``: the record of the median run, each run's rate, and the twin's beside it
    (its median, the ratio of medians, and whether every run gave the same output)."""
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    outputs: list[Any] = []
    for _ in range(reps):
        rec, out = run_one(hosts, size, transport, scale, "c")
        ours.append(rec)
        outputs.append(simulated(out))
        if twin:
            rec, out = run_one(hosts, size, transport, scale, "python")
            theirs.append(rec)
            outputs.append(simulated(out))
    rates = [r["data_packets_per_wall_s"] for r in ours]
    best = sorted(ours, key=lambda r: r["data_packets_per_wall_s"])[len(ours) // 2]
    rec = dict(best)
    rec["reps"] = reps
    rec["data_packets_per_wall_s_runs"] = rates
    rec["peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in ours)
    if twin:
        t_rates = [r["data_packets_per_wall_s"] for r in theirs]
        t_med = statistics.median(t_rates)
        rec["python_twin"] = {
            "data_packets_per_wall_s": round(t_med),
            "data_packets_per_wall_s_runs": t_rates,
            "peak_rss_bytes": max(r["peak_rss_bytes"] for r in theirs),
            "wall_s": statistics.median(r["wall_s"] for r in theirs),
        }
        rec["ratio_vs_python_twin"] = round(statistics.median(rates) / t_med, 3)
    rec["same_output_every_run"] = all(o == outputs[0] for o in outputs)
    return rec


NOTES = (
    "One process, one core. mrc-sim's default: the fabric (event queue, links, queues, routes) "
    "in C (csrc/mrc_simnet.c) and every MRC QP on the C engines the lab's NICs run "
    "(csrc/mrc_txe.c, mrc_rxe.c), Python woken only for the QPs' policy (NSCC per SACK, EV "
    "states, timers, completions); python_twin: the same permutations with the fabric and the "
    "QPs' engines in Python, which give the same output byte for byte "
    "(same_output_every_run). Wall time is the run's own: building the fabric, its frame "
    "pool and the flows' memory is excluded (process_wall_s includes it)."
)


# --- htsim -----------------------------------------------------------------------------------


def check_htsim(path: str) -> Path:
    """The htsim binary, or a clear exit: a path that is not an executable file is refused
    before anything runs."""
    p = Path(path)
    if not p.is_file() or not os.access(p, os.X_OK):
        raise SystemExit(
            f"--htsim {path}: not an executable file; build htsim_uec from source "
            "(docs/sim.md, Speed) and give its path, e.g. /tmp/htsim-build/datacenter/htsim_uec"
        )
    return p.resolve()


def htsim_topology(hosts: int, scale: Scale) -> str:
    """A two-tier htsim topology file of SHAPES[hosts] at ``scale``'s rate, the scale's one-way
    delay spread over its four links (host -> T0 -> T1 -> T0 -> host)."""
    t0, hpt, t1 = SHAPES[hosts]
    gbps = scale.port_rate_bps / 1e9
    if gbps != int(gbps):
        raise SystemExit(
            f"--htsim: htsim's topology files take whole Gb/s; the {scale.name} scale's "
            f"{scale.port_rate_bps:g} bit/s is not (use --scale paper)"
        )
    hop_ns = round(scale.prop_s / 4 * 1e9)
    tier = f"Downlink_speed_Gbps {int(gbps)}\nDownlink_Latency_ns {hop_ns}\nSwitch_Latency_ns 0\n"
    return (f"Nodes {hosts}\nTiers 2\nPodsize {hosts}\n\n"
            f"Tier 0\nRadix_Down {hpt}\nRadix_Up {t1}\n{tier}\n"
            f"Tier 1\nRadix_Down {t0}\n{tier}")  # fmt: skip


def htsim_matrix(hosts: int, size_bytes: int, seed: int) -> str:
    """htsim's connection matrix for mrc-sim's permutation: the same seeded derangement."""
    perm = derangement(hosts, random.Random(seed))
    lines = [f"Nodes {hosts}", f"Connections {hosts}"]
    lines += [f"{h}->{d} id {h + 1} start 0 size {size_bytes}" for h, d in enumerate(perm)]
    return "\n".join(lines) + "\n"


def htsim_end_us(size_bytes: int, scale: Scale) -> int:
    """htsim stops at -end (virtual microseconds), finished or not: 50 times a flow's time
    alone at line rate, and at least 2 ms, so a permutation's flows all finish first."""
    alone_us = size_bytes * 8 / scale.port_rate_bps * 1e6
    return max(2000, round(50 * alone_us))


_SUMMARY = re.compile(r"New: (\d+) Rtx: (\d+) RTS: (\d+) Bounced: (\d+) ACKs: (\d+) NACKs: (\d+)")
# htsim's clock prints '.' and '|' without a newline, so either line may follow some
_FINISHED = re.compile(r"Flow \S+ flowId \d+ .* finished at ([0-9.eE+-]+) ")
_DONE = re.compile(r"^[.|]*Done$")


def parse_htsim_output(lines: list[str]) -> dict[str, Any]:
    """htsim_uec's counters from its stdout: the summary line after ``Done`` (``New: .. Rtx:
    ..``) and one ``Flow .. finished at <us>`` line per finished flow."""
    summary = None
    finished: list[float] = []
    for line in lines:
        if m := _FINISHED.search(line):
            finished.append(float(m.group(1)))
        elif m := _SUMMARY.search(line):
            summary = [int(g) for g in m.groups()]
    if summary is None:
        raise ValueError("no 'New: .. Rtx: ..' summary line (did htsim finish?)")
    new, rtx, rts, bounced, acks, nacks = summary
    return {
        "data_packets": new,  # first sends, as mrc-sim counts them
        "new_packets": new,
        "rtx_packets": rtx,
        "rts_packets": rts,
        "bounced": bounced,
        "acks": acks,
        "nacks": nacks,
        "flows_finished": len(finished),
        "last_finish_us": max(finished) if finished else None,
    }


def _vm_hwm_bytes(pid: int) -> int:
    """A live process's peak RSS since its exec (``VmHWM``), 0 once it has exited."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_htsim(binary: Path, hosts: int, size_bytes: int, scale: Scale, seed: int) -> dict[str, Any]:
    """One htsim permutation in its own process, in a scratch directory (htsim writes its log
    file to the working directory): its counters, wall time and peak RSS.

    Peak RSS: Linux's ``ru_maxrss`` (``os.wait4``, as for mrc-sim) is at least the spawning
    process's own RSS (the exec'd-over image counts), and htsim can be smaller than this
    bench; then the figure is htsim's own ``VmHWM`` (its peak since its exec), sampled every
    few milliseconds while it runs and at its ``Done``, and ``peak_rss_from`` says which."""
    with tempfile.TemporaryDirectory(prefix="bench-sim-htsim-") as tmp:
        d = Path(tmp)
        (d / "perm.cm").write_text(htsim_matrix(hosts, size_bytes, seed))
        (d / "fabric.topo").write_text(htsim_topology(hosts, scale))
        mtu = MTU_PAYLOAD_BYTES + HTSIM_HEADER_BYTES
        args = ["-tm", "perm.cm", "-topo", "fabric.topo", "-mtu", str(mtu),
                "-q", str(scale.queue_bytes // mtu), "-end", str(htsim_end_us(size_bytes, scale)),
                "-seed", str(seed), "-o", "htsim.log"]  # fmt: skip
        lines: list[str] = []
        t_start = t_done = None
        hwm = [0]
        stop = threading.Event()
        begun = time.monotonic()
        proc = subprocess.Popen([str(binary), *args], cwd=d, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)  # fmt: skip

        def sample() -> None:  # unreaped until wait4 below, so the pid stays htsim's
            while not stop.wait(0.005):
                hwm[0] = max(hwm[0], _vm_hwm_bytes(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        assert proc.stdout is not None
        for line in proc.stdout:  # htsim flushes each line (endl): timestamps are live
            line = line.rstrip("\n")
            if line == "Starting simulation":
                t_start = time.monotonic()
            elif _DONE.match(line):
                t_done = time.monotonic()
                hwm[0] = max(hwm[0], _vm_hwm_bytes(proc.pid))
            lines.append(line)
        stop.set()
        sampler.join()
        _, status, usage = os.wait4(proc.pid, 0)
        ended = time.monotonic()
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        # our own peak now is at least what we were at the spawn: htsim's floor
        floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tail = "\n".join(lines[-15:])
    if code != 0 or t_start is None or t_done is None:
        raise SystemExit(f"{hosts} hosts: htsim failed (exit {code}): {binary} {' '.join(args)}\n"
                         f"{tail}")  # fmt: skip
    try:
        counts = parse_htsim_output(lines)
    except ValueError as e:
        raise SystemExit(f"{hosts} hosts: htsim's output: {e}\n{tail}") from None
    wall_s = t_done - t_start
    cpu_s = usage.ru_utime + usage.ru_stime
    maxrss = usage.ru_maxrss * 1024
    if maxrss > floor:
        peak, peak_from = maxrss, "wait4"
    elif hwm[0]:
        peak, peak_from = hwm[0], "VmHWM sampled (wait4's is this bench's own RSS)"
    else:
        peak, peak_from = maxrss, "wait4: a ceiling, this bench's own RSS (htsim is smaller)"
    return {
        **counts,
        "flows": hosts,
        "data_packets_per_wall_s": round(counts["data_packets"] / wall_s) if wall_s else None,
        "data_packets_counted_as": "htsim's own counter New: data packets its senders sent "
        "first (as mrc-sim's data_packets; retransmissions apart, rtx_packets)",
        "peak_rss_bytes": peak,
        "peak_rss_from": peak_from,
        "wall_s": round(wall_s, 3),
        "process_wall_s": round(ended - begun, 3),
        "cpu_s": round(cpu_s, 3),  # the whole process, building included
        "data_packets_per_cpu_s": round(counts["data_packets"] / cpu_s) if cpu_s else None,
        "command": " ".join([str(binary), *args]),
        "topology": htsim_topology(hosts, scale),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="16,128,1024", help="host counts [16,128,1024]")
    ap.add_argument("--size", default="1M", help="bytes per flow [1M]")
    ap.add_argument("--transport", default="mrc", choices=("mrc", "rocev2"))
    ap.add_argument(
        "--scale",
        default=PAPER.name,
        choices=sorted(SCALES),
        help="mrc-sim's --scale [paper: the one htsim can run]",
    )
    ap.add_argument(
        "--htsim",
        default=None,
        metavar="PATH",
        help="also run each permutation through htsim_uec at PATH (docs/sim.md)",
    )
    ap.add_argument(
        "--reps",
        type=int,
        default=3,
        help="runs per host count, alternating with the Python twins' (medians) [3]",
    )
    ap.add_argument(
        "--twin-hosts",
        default="16,128",
        help="host counts the Python twins also run at, the baseline in this script "
        "(the 1,024-host twin takes minutes) [16,128]; '' for none",
    )
    ap.add_argument("--out", default=None, help="write the JSON here")
    a = ap.parse_args(argv)
    if a.reps < 1:
        ap.error("--reps must be >= 1")
    twin_hosts = {int(x) for x in a.twin_hosts.split(",") if x}
    counts = [int(x) for x in a.hosts.split(",") if x]
    bad = [n for n in counts if n not in SHAPES]
    if bad:
        ap.error(f"--hosts: {bad} not among {sorted(SHAPES)}")
    scale = SCALES[a.scale]
    htsim = check_htsim(a.htsim) if a.htsim else None
    if htsim:
        htsim_topology(counts[0], scale)  # refuses a scale htsim cannot run, before any run
    size_bytes = parse_size(a.size)
    runs: dict[str, Any] = {}
    for n in counts:
        r = measure(n, a.size, a.transport, scale.name, a.reps, n in twin_hosts)
        runs[str(n)] = r
        print(f"{n:5d} hosts: {r['data_packets_per_wall_s']:>7} data packets per wall-second "
              f"(runs {r['data_packets_per_wall_s_runs']}), peak RSS "
              f"{r['peak_rss_bytes'] / 2**20:.0f} MiB, {r['wall_s']:.1f} s wall, "
              f"utilisation {r['utilisation']}, verified {r['verified']}", flush=True)  # fmt: skip
        if "python_twin" in r:
            tw = r["python_twin"]
            print(f"{'':5s}  Python twins: {tw['data_packets_per_wall_s']:>7} data packets per "
                  f"wall-second; ours / twins {r['ratio_vs_python_twin']}; same output "
                  f"{r['same_output_every_run']}", flush=True)  # fmt: skip
        if htsim:
            h = run_htsim(htsim, n, size_bytes, scale, r["seed"])
            r["htsim"] = h
            ours, theirs = r["data_packets_per_wall_s"], h["data_packets_per_wall_s"]
            r["ratio_vs_htsim"] = round(ours / theirs, 4) if ours and theirs else None
            print(f"{'':5s}  htsim: {theirs:>7} data packets per wall-second, peak RSS "
                  f"{h['peak_rss_bytes'] / 2**20:.0f} MiB, {h['wall_s']:.2f} s wall, "
                  f"{h['flows_finished']}/{h['flows']} flows finished; ours / htsim "
                  f"{r['ratio_vs_htsim']}", flush=True)  # fmt: skip
    doc: dict[str, Any] = {
        "runs": runs,
        "scale": {
            "name": scale.name,
            "port_rate_bps": scale.port_rate_bps,
            "prop_s": scale.prop_s,
            "queue_bytes": scale.queue_bytes,
            "ecn_bytes": scale.ecn_bytes,
        },
        "command": " ".join(["bench/bench_sim.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "load_avg": [round(x, 2) for x in os.getloadavg()],
        },
        "notes": NOTES,
    }
    if htsim:
        doc["htsim"] = {"binary": str(htsim), "differences": list(HTSIM_DIFFERENCES)}
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    ok = all(
        r["verified"] and not r["qp_errors"] and r["same_output_every_run"] for r in runs.values()
    )
    unfinished = [
        n for n, r in runs.items() if "htsim" in r and r["htsim"]["flows_finished"] < r["hosts"]
    ]
    if unfinished:
        print(f"htsim left flows unfinished at its -end time: {unfinished} hosts", file=sys.stderr)
    return 0 if ok and not unfinished else 1


if __name__ == "__main__":
    sys.exit(main())

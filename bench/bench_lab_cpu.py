#!/usr/bin/env python3
"""The lab's CPU per delivered frame: python switches against kernel switches (root).

    .venv/bin/python bench/bench_lab_cpu.py [--reps 3] [--out results/bench-lab-cpu.json]

One MRC write h0 -> h3 (``mrc-bench write --size 1M --duration D --json``; h3 is under the
other T0, so every frame crosses T0-T1-T0) on the default lab (name ``mrcswc``), once per
configuration and repetition, configurations alternating (forward, then backward order),
each run on a lab brought up for it and taken down after it:

- ``kernel``: kernel switches (``seg6local``);
- ``python``: python switches as the lab runs them by default (``mrc-lab up``'s
  ``--switch-procs`` default: shared processes, see docs/switch.md);
- ``python_per_process``: one mrc-switch process per switch (``--switch-procs 0``);
- ``python_hold``: shared processes with receive coalescing (``MRC_SWITCH_HOLD_US``);
- ``kernel_rocev2`` / ``python_rocev2``: the RoCEv2 baseline's write instead (8 QPs, one per
  plane, as the demo runs it) on kernel / default python switches;
- ``floor``: the machine's floor for the same frames over the same topology: kernel switches,
  no NIC and no switch process; a minimal C sender in h0 sends one full-MTU data frame per
  plane over and over, paced at 0.95 of the link rate and woken at most once per millisecond
  (as the NIC's pacer), and a minimal C receiver in h3 counts (``lab/workloads/bench/floor.py``,
  ``csrc/mrc_raw.c``). Every other row's ``ratio_vs_floor`` is its machine CPU per delivered
  frame over the floor's (contract key).

Per run: the machine's CPU-seconds (``/proc/stat``, every process on the machine, over the
write as mrc-bench measures it) per delivered data frame (the receiving NIC's frames), the
switch processes' own CPU (``/proc/PID/stat``) per data frame and hop, goodput_fraction,
the switch processes' wake-ups per data frame (their stats files' ``c_loop`` counters),
then ``mrc-bench lat`` (64 B writes) for the latency. Medians per configuration; the
headline ``machine_cpu_ratio_python_vs_kernel`` (goal <= 2.0) and the added latency per
hop of each python configuration against the one-process-per-switch mode.

The kernel charges much of its forwarding to whichever process sent the frame (the NICs'
softirqs), so only the whole machine's CPU compares the two modes fairly; the switches'
own CPU is reported beside it. The machine is shared: the load average before and after is
recorded, and runs wait (up to 20 s) for a mostly idle machine before they start.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lab.fabric import lifecycle
from lab.fabric.host import LabHost
from lab.fabric.netns import LabError, have_net_admin
from lab.fabric.params import LabParams, resolve
from lab.fabric.state import LabState, exists
from lab.proc.benchrun import WriteSpec, bench_argv, run_write
from lab.proc.cpu import machine_busy_ticks
from lab.proc.env import env_added
from mrcnic.cliflags import rate_with_unit, renamed
from mrcnic.verbs import RemoteBuffer

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
HOPS = 3  # h0 -> h3: T0, T1, T0
CONFIGS = (
    "floor",
    "kernel",
    "python",
    "python_per_process",
    "python_hold",
    "kernel_rocev2",
    "python_rocev2",
)
ROCEV2_QPS = 8  # the baseline's writes: one QP per plane
FLOOR_RATE_FRACTION = 0.95  # the floor's senders pace at this share of the link rate


def say(text: str) -> None:
    print(text, flush=True)


def _median(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return statistics.median(v) if v else None


def machine_idle_fraction(seconds: float = 1.0) -> float:
    def ticks() -> tuple[int, int]:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v[:8])

    i0, t0 = ticks()
    time.sleep(seconds)
    i1, t1 = ticks()
    return (i1 - i0) / (t1 - t0) if t1 > t0 else 0.0


def wait_quiet(max_s: float = 20.0, idle: float = 0.8) -> float:
    """Wait (up to max_s) for the machine to be at least ``idle`` idle; the last sample."""
    deadline = time.monotonic() + max_s
    while True:
        f = machine_idle_fraction(1.0)
        if f >= idle or time.monotonic() > deadline:
            return round(f, 3)


def stats_files(state: LabState) -> dict[int, dict[str, Any]]:
    """One stats document per switch process (pid -> the last switch's file: a shared
    process's ``c_loop`` counters are the process's)."""
    out: dict[int, dict[str, Any]] = {}
    for rec in state.processes.values():
        if not rec.stats:
            continue
        with contextlib.suppress(OSError, ValueError):
            out[rec.pid] = json.loads(Path(rec.stats).read_text())
    return out


def wakeups(docs: dict[int, dict[str, Any]]) -> dict[str, int]:
    tot = {"wakeups": 0, "timer_wakeups": 0, "holds": 0}
    for d in docs.values():
        c = d.get("c_loop") or {}
        for k in tot:
            tot[k] += int(c.get(k) or 0)
    return tot


def config_env(name: str, a: argparse.Namespace) -> tuple[str, int, dict[str, str]]:
    """-> (switch mode, switch_procs, environment for the switch processes)."""
    if name in ("kernel", "kernel_rocev2", "floor"):
        return "kernel", 0, {}
    if name in ("python", "python_rocev2"):
        return "python", lifecycle.switch_procs_default(), {}
    if name == "python_per_process":
        return "python", 0, {"MRC_SWITCH_HOLD_US": "0"}
    if name == "python_hold":
        return (
            "python",
            max(1, lifecycle.switch_procs_default()),
            {"MRC_SWITCH_HOLD_US": f"{a.hold_us:g}"},
        )
    raise ValueError(name)


def lat_run(state: LabState, a: argparse.Namespace) -> dict[str, Any] | None:
    argv = [*bench_argv(), "lat", "--lab", state.name, "--src", "h0", "--dst", "h3"]
    argv += ["--size", "64", "--iters", str(a.lat_iters), "--json"]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None
    try:
        return json.loads(p.stdout)
    except ValueError:
        say(f"    lat failed: {p.stderr.strip()[-300:]}")
        return None


def floor_frames(src: LabHost, dst: LabHost) -> list[bytes]:
    """One full-MTU data frame per plane from ``src`` to ``dst``, as the RoCEv2 baseline's QP
    bound to that plane builds it (its plane's kernel switches route it to ``dst``)."""
    frames = []
    for plane in range(len(src.ifnames)):
        qa = src.device.create_qp(src.transport_qp_config("rocev2", plane), "rocev2")
        qb = dst.device.create_qp(dst.transport_qp_config("rocev2", plane), "rocev2")
        qa.connect(qb.export())
        qb.connect(qa.export())
        mtu = qa.core.mtu
        qa.post_write(0, bytes(mtu), RemoteBuffer.of(dst.device.register(bytearray(mtu))))
        port, frame = qa.core.frames_to_send(1.0)[0]
        if port != plane:
            raise RuntimeError(f"bench_lab_cpu: the floor's frame for plane {plane} left on {port}")
        frames.append(bytes(frame))
    return frames


def floor_run(a: argparse.Namespace) -> dict[str, Any]:
    """The floor: kernel switches, a paced C sender in h0 and a C receiver in h3."""
    params = resolve(None, name=a.name, switch="kernel", rate_mbit=a.rate_mbit)
    if exists(a.name):
        lifecycle.down(a.name)
    idle_before = wait_quiet()
    state = lifecycle.up(params, switch_procs=0)
    procs: list[subprocess.Popen[str]] = []
    try:
        time.sleep(1.0)
        src, dst = LabHost.from_state(state, "h0"), LabHost.from_state(state, "h3")
        frames = floor_frames(src, dst)
        # a little under the link rate: tbf's accounting differs from the frame's length by a
        # little, and at exactly the rate its queue would only grow (14% lost at 100 Mb/s)
        rate_fps = FLOOR_RATE_FRACTION * params.rate_mbit * 1e6 / (8 * len(frames[0]))
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump([fr.hex() for fr in frames], f)
        mod = [sys.executable, "-m", "lab.workloads.bench.floor"]
        rx = subprocess.Popen(
            ["ip", "netns", "exec", dst.namespace, *mod, "recv", "--ifnames",
             ",".join(dst.ifnames), "--seconds", str(a.duration)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        procs.append(rx)
        assert rx.stdout is not None
        json.loads(rx.stdout.readline())  # ready
        busy0 = machine_busy_ticks()
        tx = subprocess.Popen(
            ["ip", "netns", "exec", src.namespace, *mod, "send", "--ifnames",
             ",".join(src.ifnames), "--frames", f.name, "--rate-fps", f"{rate_fps:.3f}",
             "--seconds", str(a.duration)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        procs.append(tx)
        out, _ = tx.communicate(timeout=a.duration + 30)
        busy1 = machine_busy_ticks()
        sent = json.loads(out.strip().splitlines()[-1])
        rout, _ = rx.communicate(timeout=2 * a.duration + 30)
        got = json.loads(rout.strip().splitlines()[-1])
        os.unlink(f.name)
    finally:
        for p in procs:  # (ours, by PID: a side still running after an error)
            if p.poll() is None:
                p.kill()
                p.wait(5)
        lifecycle.down(a.name)
    hz = os.sysconf("SC_CLK_TCK")
    machine_s = (busy1[0] - busy0[0]) / hz
    delivered = got["frames"]
    capacity = rate_fps * len(frames) * sent["elapsed_s"]
    out_row = {
        "config": "floor",
        "switch": "kernel",
        "switch_procs": None,
        "switch_processes": 0,
        "env": {},
        "idle_before": idle_before,
        "error": None if delivered else "the floor's receiver got nothing",
        "goodput_fraction": round(delivered / capacity, 4) if capacity else None,
        "verified": None,
        "cpu_bound": None,
        "duration_s": sent["elapsed_s"],
        "machine_cpu_percent": round(100 * (busy1[0] - busy0[0]) / (busy1[1] - busy0[1]), 1)
        if busy1[1] > busy0[1]
        else None,
        "machine_cpu_s": round(machine_s, 3),
        "delivered_frames": delivered,
        "data_frames_sent": sent["frames"],
        "machine_cpu_s_per_frame": machine_s / delivered if delivered else None,
        "nic_cpu_percent": [
            round(100 * sent["cpu_s"] / max(sent["elapsed_s"], 1e-9), 1),
            round(100 * got["cpu_s"] / max(got["elapsed_s"], 1e-9), 1),
        ],
        "switch_cpu_s": None,
        "switch_us_per_frame_hop": None,
        "switch_wakeups": None,
        "wakeups_per_frame": None,
        "lat_us_typical": None,
        "lat_us_p99": None,
        "rate_fps_per_port": round(rate_fps, 3),
        "frame_bytes": len(frames[0]),
    }
    m = out_row["machine_cpu_s_per_frame"]
    say(f"    floor: delivered {delivered} of {sent['frames']} sent, machine "
        f"{m * 1e6 if m else float('nan'):.1f} us/frame")  # fmt: skip
    return out_row


def one_run(name: str, a: argparse.Namespace) -> dict[str, Any]:
    if name == "floor":
        return floor_run(a)
    mode, procs, env = config_env(name, a)
    params = resolve(None, name=a.name, switch=mode, rate_mbit=a.rate_mbit)
    with env_added(env):
        if exists(a.name):
            lifecycle.down(a.name)
        idle_before = wait_quiet()
        state = lifecycle.up(params, switch_procs=procs)
    try:
        time.sleep(1.0)
        docs0 = stats_files(state)
        rocev2 = name.endswith("_rocev2")
        spec = WriteSpec("h0", "h3", a.size, a.duration, None, ROCEV2_QPS if rocev2 else 1,
                         "rocev2" if rocev2 else "mrc", None)  # fmt: skip
        run = run_write(state, spec, echo=say)
        time.sleep(0.7)  # the stats files are rewritten every 0.5 s
        docs1 = stats_files(state)
        r = run.result or {}
        lat = lat_run(state, a) if a.lat_iters else None
    finally:
        lifecycle.down(a.name)
    cpus = r.get("cpus") or os.cpu_count() or 1
    dur = r.get("duration_s") or 0.0
    mpct = r.get("machine_cpu_percent")
    machine_s = mpct / 100 * cpus * dur if mpct is not None else None
    srv = ((r.get("nic") or {}).get("server")) or {}
    delivered = sum(p.get("rx_frames", 0) for p in srv.get("ports", []))
    sent = sum(q.get("tx_data_packets", 0) for q in r.get("qp_stats") or [])
    sw_s = run.cpu.switch_cpu_s if mode == "python" and run.cpu else None
    w0, w1 = wakeups(docs0), wakeups(docs1)
    dw = {k: w1[k] - w0[k] for k in w0}
    # process wake-ups: by events, by paced-send timers, and the sleeps of hold_ns
    wk = dw["wakeups"] + dw["timer_wakeups"] + dw["holds"] if mode == "python" else None
    lat_s = (lat or {}).get("latency_us") or {}
    lat_us = lat_s.get("t_typical")
    out = {
        "config": name,
        "switch": mode,
        "switch_procs": procs if mode == "python" else None,
        "switch_processes": len({rec.pid for rec in state.processes.values()}),
        "env": env,
        "idle_before": idle_before,
        "error": run.error,
        "goodput_fraction": r.get("goodput_fraction"),
        "verified": r.get("verified"),
        "cpu_bound": r.get("cpu_bound"),
        "duration_s": dur,
        "machine_cpu_percent": mpct,
        "machine_cpu_s": round(machine_s, 3) if machine_s is not None else None,
        "delivered_frames": delivered,
        "data_frames_sent": sent,
        "machine_cpu_s_per_frame": (machine_s / delivered) if machine_s and delivered else None,
        "nic_cpu_percent": [r.get("cpu_percent_client"), r.get("cpu_percent_server")],
        "switch_cpu_s": sw_s,
        "switch_us_per_frame_hop": round(sw_s / (sent * HOPS) * 1e6, 3)
        if sw_s is not None and sent
        else None,
        "switch_wakeups": dw if mode == "python" else None,
        "wakeups_per_frame": round(wk / sent, 3) if wk is not None and sent else None,
        "lat_us_typical": lat_us,
        "lat_us_p99": lat_s.get("p99"),
    }
    m = out["machine_cpu_s_per_frame"]
    say(
        f"    {name}: goodput {out['goodput_fraction']}, machine {m * 1e6 if m else float('nan'):.1f}"
        f" us/frame, switches {out['switch_us_per_frame_hop']} us/frame/hop, wakeups/frame "
        f"{out['wakeups_per_frame']}, lat {lat_us} us"
    )
    return out


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A configuration's medians, over its runs that were not CPU-bound only (a CPU-bound
    run measures the machine, not the lab: it stays in the ``*_runs`` lists and counts in
    ``cpu_bound_runs``, never in a median, a ratio or ``meets_goal``)."""
    fair = [r for r in runs if not r.get("cpu_bound")]

    def med(k: str, nd: int = 4) -> float | None:
        m = _median([r.get(k) for r in fair])
        return round(m, nd) if m is not None else None

    m = _median([r.get("machine_cpu_s_per_frame") for r in fair])
    return {
        "switch": runs[0]["switch"],
        "switch_procs": runs[0]["switch_procs"],
        "switch_processes": runs[0]["switch_processes"],
        "env": runs[0]["env"],
        "runs": len(runs),
        "machine_cpu_s_per_frame_median": round(m, 9) if m is not None else None,
        "machine_us_per_frame_median": round(m * 1e6, 2) if m is not None else None,
        "machine_us_per_frame_runs": [
            round(r["machine_cpu_s_per_frame"] * 1e6, 2) if r["machine_cpu_s_per_frame"] else None
            for r in runs
        ],
        "switch_us_per_frame_hop_median": med("switch_us_per_frame_hop"),
        "switch_us_per_frame_hop_runs": [r["switch_us_per_frame_hop"] for r in runs],
        "goodput_fraction_median": med("goodput_fraction"),
        "goodput_fraction_runs": [r["goodput_fraction"] for r in runs],
        "wakeups_per_frame_median": med("wakeups_per_frame"),
        "machine_cpu_percent_median": med("machine_cpu_percent"),
        "lat_us_typical_median": med("lat_us_typical", 2),
        "lat_us_typical_runs": [r["lat_us_typical"] for r in runs],
        "lat_us_p99_median": med("lat_us_p99", 2),
        "verified_all": all(bool(r.get("verified")) for r in runs if r.get("verified") is not None)
        if any(r.get("verified") is not None for r in runs)
        else None,  # (the floor verifies nothing: None)
        "cpu_bound_runs": len(runs) - len(fair),
    }


def derive(out: dict[str, Any], configs: list[str]) -> None:
    """The ratios and verdicts of ``out`` from its configurations' medians (in place)."""
    cs = out["configs"]
    k = (cs.get("kernel") or {}).get("machine_cpu_s_per_frame_median")
    for c in configs:
        m = cs[c]["machine_cpu_s_per_frame_median"]
        cs[c]["machine_cpu_ratio_vs_kernel"] = round(m / k, 3) if m and k else None
    ratio = (cs.get("python") or {}).get("machine_cpu_ratio_vs_kernel")
    out["machine_cpu_ratio_python_vs_kernel"] = ratio
    out["meets_goal"] = None if ratio is None else ratio <= 2.0  # (None: no fair runs)
    base = (cs.get("python_per_process") or {}).get("lat_us_typical_median")
    out["added_latency_per_hop_us"] = {
        c: round((cs[c]["lat_us_typical_median"] - base) / (2 * HOPS), 2)
        if base is not None and cs[c]["lat_us_typical_median"] is not None
        else None
        for c in configs
        if c.startswith("python") and c != "python_per_process" and not c.endswith("_rocev2")
    }
    fl = (cs.get("floor") or {}).get("machine_cpu_s_per_frame_median")
    for c in configs:  # contract key: machine CPU per delivered frame over the floor's
        m = cs[c]["machine_cpu_s_per_frame_median"]
        cs[c]["ratio_vs_floor"] = round(m / fl, 3) if m and fl else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--name", default="mrcswc", help="lab name (default mrcswc)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per configuration (>= 1)")
    ap.add_argument("--size", type=int, default=1 << 20, help="message size (bytes)")
    ap.add_argument("--duration", type=float, default=6.0, help="seconds per write")
    ap.add_argument("--lat-iters", type=int, default=1000, help="mrc-bench lat writes; 0: none")
    ap.add_argument("--hold-us", type=float, default=100.0, help="python_hold's hold (us)")
    renamed(
        ap, "--rate", "--rate-mbit", dest="rate_mbit", type=lambda t: rate_with_unit(t) / 1e6,
        old_type=float, default=None, metavar="RATE",
        help="link rate with its unit, e.g. 10Mbit (default: the lab's, 100Mbit); a rate the "
        "machine carries keeps the runs fabric-bound (mrc-lab calibrate)",
    )  # fmt: skip
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"subset of {CONFIGS}")
    ap.add_argument("--out", default=str(RESULTS / "bench-lab-cpu.json"))
    a = ap.parse_args(argv)
    if not have_net_admin():
        print("bench_lab_cpu: needs root (CAP_NET_ADMIN)", file=sys.stderr)
        return 2
    configs = [c for c in a.configs.split(",") if c]
    bad = [c for c in configs if c not in CONFIGS]
    if bad or a.reps < 1:
        print(f"bench_lab_cpu: unknown configs {bad} or reps < 1", file=sys.stderr)
        return 2
    # Ctrl-C or SIGTERM: the finally clauses take the lab down
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    load_before = [round(x, 2) for x in os.getloadavg()]
    t0 = time.monotonic()
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    try:
        for rep in range(a.reps):
            order = configs if rep % 2 == 0 else configs[::-1]
            for c in order:
                say(f"rep {rep + 1}/{a.reps}: {c}")
                runs[c].append(one_run(c, a))
    except KeyboardInterrupt:
        say("interrupted: lab taken down")
        return 130
    finally:
        with contextlib.suppress(LabError):
            lifecycle.down(a.name)
    out: dict[str, Any] = {
        "benchmark": "lab-cpu",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "what": "one MRC write h0 -> h3 on the default lab: the machine's CPU per delivered "
        "data frame, python switches against kernel switches; medians of alternating reps",
        "command": f"mrc-bench write --lab {a.name} --src h0 --dst h3 --size {a.size} "
        f"--duration {a.duration:g} --qps 1 --transport mrc --json; mrc-bench lat --lab "
        f"{a.name} --src h0 --dst h3 --size 64 --iters {a.lat_iters} --json",
        "machine": {
            "cores": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "loadavg_before": load_before,
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        },
        "nic_engine": os.environ.get("MRC_NIC_ENGINE", "default"),
        "switch_procs_default": lifecycle.switch_procs_default(),
        "hold_us": a.hold_us,
        "reps": a.reps,
        "hops": HOPS,
        "rate_mbit": a.rate_mbit if a.rate_mbit is not None else LabParams().rate_mbit,
        "wall_s": round(time.monotonic() - t0, 1),
        "goal": {"machine_cpu_ratio_python_vs_kernel": 2.0},
        "configs": {c: summarise(rs) for c, rs in runs.items()},
        "runs": runs,
    }
    derive(out, configs)
    cs = out["configs"]
    ratio = out["machine_cpu_ratio_python_vs_kernel"]
    out["added_latency_note"] = (
        "(median 64 B write latency - that of python_per_process) / 6: a write's latency "
        "crosses 3 switches each way (data, then its ACK)"
    )
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    say(f"wrote {a.out}")
    for c in configs:
        s = cs[c]
        say(
            f"  {c:20s} machine {s['machine_us_per_frame_median']} us/frame "
            f"(x{s['machine_cpu_ratio_vs_kernel']} kernel), switches "
            f"{s['switch_us_per_frame_hop_median']} us/frame/hop, goodput "
            f"{s['goodput_fraction_median']}, wakeups/frame {s['wakeups_per_frame_median']}, "
            f"lat {s['lat_us_typical_median']} us, x{s['ratio_vs_floor']} the floor"
        )
    say(f"machine_cpu_ratio_python_vs_kernel = {ratio} (goal <= 2.0)")
    say(f"added latency per hop (us): {out['added_latency_per_hop_us']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

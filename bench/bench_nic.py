"""What the NIC costs per frame, against what moving the frames costs: ``make bench-nic``.

Two namespaces (``mrcnb-a``, ``mrcnb-b``) joined by one veth, no switches. Configs, each a
sender in ``a`` and a receiver in ``b`` (processes of ``lab/workloads/bench/nic.py``, the sender pinned to
CPU 0 and the receiver to CPU 1), run in alternating order for ``--reps`` repetitions:

- ``raw``: a minimal C AF_PACKET sender (one prepared 4 KiB-payload MRC data frame, sendmmsg)
  and a minimal C receiver that only counts (``csrc/mrc_raw.c``: recvmmsg);
- ``c``: the NIC with the C engine (``MRC_NIC_ENGINE=c``): one MRC QP writing 1 MiB messages,
  4 in flight, acknowledged by the coalescing rule (the QPs' base RTT is the NIC's default,
  1 ms: SACKs every 4 packets, or 125 us after the last unacknowledged one);
- ``py``: the same with the Python engine, its twin (``MRC_NIC_ENGINE=py``);
- ``rocev2``: the same writes on the RoCEv2 baseline's QP (go-back-N; on the C engine its data
  path is csrc/mrc_roce.c, since 2026-11-29): what a baseline frame costs beside an MRC one;
- ``c_rtt200``: ``c`` with a 200 us base RTT (the setting until 2026-11-24): a 25 us delayed
  ACK, shorter than the time between two receive wake-ups, so each batch's last packets get a
  SACK and a wake-up of their own; kept to show what that costs;
- ``c_paced``: ``c`` with the NIC's port paced at ``PACED_RATE`` (400 Mb/s: 11,900 data frames
  a second, what one NIC of the default lab carries at 50 Mb/s links over its 8 planes), so a
  wake-up finds one or two frames, as in the lab: what a frame costs when nothing amortises
  the wake-up. Its keys are CPU microseconds per frame (``c_paced_send_us_per_frame``,
  ``c_paced_recv_us_per_frame``), ``c_paced_<side>_cost_vs_c`` (over the unpaced ``c`` run's,
  same run) and ``c_paced_recv_frames_per_wakeup``;
- ``ring`` (not by default): the raw receiver on a TPACKET_V3 ring.

Each side reports data frames (the sender every data frame it handed over, new or resent, as the
receiver counts every one it got; until 2026-11-29 the sender counted new ones only, which a
go-back-N sender resending half its frames made look half as fast) and its own CPU-seconds
(user + system); the figure is frames per
CPU-second, the median over repetitions. Contract keys: ``send_ratio_vs_raw`` and
``recv_ratio_vs_raw`` (C engine / raw C, same run); ``py_send_ratio_vs_raw``,
``py_recv_ratio_vs_raw``, ``rocev2_send_ratio_vs_raw``, ``rocev2_recv_ratio_vs_raw``,
``c_rtt200_send_ratio_vs_raw`` and ``c_rtt200_recv_ratio_vs_raw`` beside them.

The raw baseline brackets every engine run: raw, engine, raw, engine, ..., raw. An engine
run's ratio is its rate over the mean of the raw runs just before and just after it, so the
machine's drift between runs (raw alone moved 313k-425k frames per CPU-second between runs of
one day) divides out; a ratio key is the median of its runs' ratios, and
``<key>_runs`` and ``<key>_spread`` (max - min) give them.

    make bench-nic        # = .venv/bin/python bench/bench_nic.py --out results/bench-nic.json

Needs root.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from lab.proc import children, provenance

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
NS_A, NS_B = "mrcnb-a", "mrcnb-b"
IF_A, IF_B = "mrcnb-a0", "mrcnb-b0"
MAC_A, MAC_B = "02:00:6e:62:00:01", "02:00:6e:62:00:02"
SEND_CPU, RECV_CPU = 0, 1
CONFIGS = ("raw", "c", "py", "rocev2", "c_rtt200", "c_paced", "ring")
PACED_RATE = "400Mbit"  # c_paced: the NIC port's rate (see the docstring)


#: a side still running after the test (it failed): killed, by PID
KILL = ((signal.SIGKILL, 5.0),)


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


def setup() -> None:
    teardown()
    sh("ip", "netns", "add", NS_A)
    sh("ip", "netns", "add", NS_B)
    sh("ip", "link", "add", IF_A, "netns", NS_A, "type", "veth", "peer", "name", IF_B,
       "netns", NS_B)  # fmt: skip
    for ns, ifn, mac in ((NS_A, IF_A, MAC_A), (NS_B, IF_B, MAC_B)):
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{ifn}.disable_ipv6=1")
        sh("ip", "-n", ns, "link", "set", ifn, "address", mac, "mtu", "9000", "up")
    # The carrier shows a moment after both ends are up (the kernel's link watch): a NIC
    # opened before would take its port for down and start by probing its way back.
    deadline = time.monotonic() + 5.0
    for ns, ifn in ((NS_A, IF_A), (NS_B, IF_B)):
        while True:
            out = subprocess.run(["ip", "-n", ns, "-o", "link", "show", ifn],
                                 capture_output=True, text=True).stdout  # fmt: skip
            if "LOWER_UP" in out and "state UP" in out:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"bench-nic: {ifn} in {ns} never came up: {out.strip()}")
            time.sleep(0.02)


def teardown() -> None:
    for ns in (NS_A, NS_B):
        if os.path.exists(f"/run/netns/{ns}"):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _spawn(ns: str, cpu: int, args: list[str], engine: str | None) -> subprocess.Popen[str]:
    env = dict(os.environ)
    if engine is not None:
        env["MRC_NIC_ENGINE"] = engine
    argv = [
        "ip",
        "netns",
        "exec",
        ns,
        "taskset",
        "-c",
        str(cpu),
        PY,
        "-m",
        "lab.workloads.bench.nic",
        *args,
    ]
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _line(p: subprocess.Popen[str], what: str) -> dict[str, Any]:
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line:
        p.wait(5)
        raise RuntimeError(f"bench-nic: {what} exited ({p.returncode}) without a result")
    return json.loads(line)


def run_raw(seconds: float, ring: bool = False) -> dict[str, Any]:
    args = ["raw-recv", "--ifname", IF_B, "--seconds", str(seconds)] + (["--ring"] if ring else [])
    rx = _spawn(NS_B, RECV_CPU, args, None)
    try:
        _line(rx, "raw receiver")  # ready
        tx = _spawn(NS_A, SEND_CPU, ["raw-send", "--ifname", IF_A, "--mac", MAC_A, "--peer-mac",
                                     MAC_B, "--seconds", str(seconds)], None)  # fmt: skip
        send = _line(tx, "raw sender")
        tx.wait(10)
        recv = _line(rx, "raw receiver")
        rx.wait(10)
    finally:
        children.stop_one(rx, KILL, group=False)
    return {"send": send, "recv": recv}


def run_engine(
    engine: str,
    seconds: float,
    transport: str = "mrc",
    base_rtt_us: float | None = None,
    rate: str | None = None,
) -> dict[str, Any]:
    extra = ["--base-rtt-us", str(base_rtt_us)] if base_rtt_us is not None else []
    extra += ["--rate", rate] if rate is not None else []
    rx = _spawn(NS_B, RECV_CPU, ["recv", "--ifname", IF_B, "--mac", MAC_B, "--peer-mac", MAC_A,
                                 "--transport", transport, *extra], engine)  # fmt: skip
    tx = None
    try:
        hello_rx = _line(rx, "receiver")
        tx = _spawn(NS_A, SEND_CPU, ["send", "--ifname", IF_A, "--mac", MAC_A, "--peer-mac",
                                     MAC_B, "--seconds", str(seconds), "--transport", transport,
                                     *extra], engine)  # fmt: skip
        hello_tx = _line(tx, "sender")
        assert tx.stdin is not None and rx.stdin is not None
        tx.stdin.write(json.dumps(hello_rx) + "\n")
        tx.stdin.flush()
        rx.stdin.write(json.dumps(hello_tx) + "\n")
        rx.stdin.flush()
        send = _line(tx, "sender")
        tx.wait(10)
        rx.stdin.write("stop\n")
        rx.stdin.flush()
        recv = _line(rx, "receiver")
        rx.wait(10)
    finally:
        children.stop([p for p in (tx, rx) if p is not None], KILL, group=False)
    return {"send": send, "recv": recv}


def per_cpu_s(side: dict[str, Any]) -> float:
    return side["frames"] / side["cpu_s"] if side["cpu_s"] > 0 else 0.0


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cfg, rs in runs.items():
        if not rs:
            continue
        send = [per_cpu_s(r["send"]) for r in rs]
        recv = [per_cpu_s(r["recv"]) for r in rs]
        out[cfg] = {
            "send_frames_per_cpu_s": round(statistics.median(send)),
            "recv_frames_per_cpu_s": round(statistics.median(recv)),
            "send_frames_per_cpu_s_runs": [round(x) for x in send],
            "recv_frames_per_cpu_s_runs": [round(x) for x in recv],
            "send_frames_per_s": round(
                statistics.median(r["send"]["frames"] / r["send"]["elapsed_s"] for r in rs)
            ),
            "send_core_fraction": round(
                statistics.median(r["send"]["cpu_s"] / r["send"]["elapsed_s"] for r in rs), 3
            ),
            "recv_core_fraction": round(
                statistics.median(
                    r["recv"]["cpu_s"] / max(r["recv"]["elapsed_s"], 1e-9) for r in rs
                ),
                3,
            ),  # fmt: skip
        }
        wakes = [r["recv"].get("rx_wakeups") for r in rs]
        if all(wakes):  # (the NIC's runs: raw has no wake-up count)
            out[cfg]["recv_frames_per_wakeup"] = round(
                statistics.median(r["recv"]["frames"] / w for r, w in zip(rs, wakes, strict=True)),
                2,
            )
        for key in ("timeouts", "spurious_timeouts"):  # (the NIC's runs; RoCEv2 has no spurious)
            counts = [r["send"].get(key) for r in rs]
            if all(c is not None for c in counts):
                out[cfg][f"send_{key}_runs"] = counts
    return out


def paced_keys(summary: dict[str, Any]) -> dict[str, float]:
    """c_paced's figures: CPU microseconds per frame, and over the unpaced c run's."""
    paced = summary.get("c_paced")
    if not paced:
        return {}
    out: dict[str, float] = {}
    for side in ("send", "recv"):
        rate = paced[f"{side}_frames_per_cpu_s"]
        if rate > 0:
            out[f"c_paced_{side}_us_per_frame"] = round(1e6 / rate, 1)
        full = summary.get("c", {}).get(f"{side}_frames_per_cpu_s", 0)
        if rate > 0 and full > 0:
            out[f"c_paced_{side}_cost_vs_c"] = round(full / rate, 2)
    out["c_paced_recv_frames_per_wakeup"] = paced["recv_frames_per_wakeup"]
    return out


def paired_ratios(
    runs: dict[str, list[dict[str, Any]]], pairs: list[tuple[str, int, int, int]], eng: str,
    side: str,
) -> list[float]:  # fmt: skip
    """Each run of ``eng``: its ``side``'s frames per CPU-second over the mean of the raw runs
    just before and after it."""
    out = []
    raws = runs.get("raw", [])
    for cfg, i, before, after in pairs:
        if cfg != eng or after >= len(raws):
            continue
        base = (per_cpu_s(raws[before][side]) + per_cpu_s(raws[after][side])) / 2
        if base > 0:
            out.append(per_cpu_s(runs[eng][i][side]) / base)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0, help="per run [3]")
    ap.add_argument(
        "--configs", default="raw,c,py,rocev2,c_rtt200,c_paced",
        help="subset of raw,c,py,rocev2,c_rtt200,c_paced,ring [raw,c,py,rocev2,c_rtt200,"
        "c_paced]; rocev2: the RoCEv2 baseline's QP on the default engine; c_rtt200: the C "
        "engine with a 200 us base RTT (a 25 us delayed ACK: the setting before 2026-11-24); "
        f"c_paced: the C engine with its port paced at {PACED_RATE} (a lab's frames per "
        "wake-up); ring: the raw receiver on a TPACKET_V3 ring",
    )  # fmt: skip
    ap.add_argument("--out", default=None, help="write the JSON here")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench-nic: needs root (network namespaces)", file=sys.stderr)
        return 2
    configs = [c for c in a.configs.split(",") if c]
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        print(f"bench-nic: unknown config {bad[0]!r} ({', '.join(CONFIGS)})", file=sys.stderr)
        return 2
    started = time.time()
    load0 = os.getloadavg()[0]
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    # each engine run with the raw runs around it: (config, index in runs[config], raw before,
    # raw after) as indices in runs["raw"]
    pairs: list[tuple[str, int, int, int]] = []
    engines = [c for c in configs if c not in ("raw", "ring")]
    setup()
    try:
        for rep in range(a.reps):
            order = engines if rep % 2 == 0 else list(reversed(engines))
            if "raw" in configs:  # raw before and after every engine run
                order = ["raw", *(x for cfg in order for x in (cfg, "raw"))]
            if "ring" in configs:
                order.append("ring")
            for cfg in order:
                if cfg in ("raw", "ring"):
                    r = run_raw(a.seconds, ring=cfg == "ring")
                elif cfg == "rocev2":
                    r = run_engine("c", a.seconds, transport="rocev2")
                elif cfg == "c_rtt200":
                    r = run_engine("c", a.seconds, base_rtt_us=200)
                elif cfg == "c_paced":
                    r = run_engine("c", a.seconds, rate=PACED_RATE)
                else:
                    r = run_engine(cfg, a.seconds)
                runs[cfg].append(r)
                if cfg in engines and "raw" in configs:
                    k = len(runs["raw"]) - 1  # the raw run before it; the next is after it
                    pairs.append((cfg, len(runs[cfg]) - 1, k, k + 1))
                print(
                    f"rep {rep + 1}/{a.reps} {cfg:>3}: send {per_cpu_s(r['send']):>9,.0f} "
                    f"frames/CPU-s ({r['send']['frames']:,} frames), recv "
                    f"{per_cpu_s(r['recv']):>9,.0f} frames/CPU-s ({r['recv']['frames']:,})",
                    flush=True,
                )
    finally:
        teardown()
    summary = summarise(runs)
    result: dict[str, Any] = {
        "bench": "bench-nic",
        "command": "bench/bench_nic.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "timestamp_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": provenance.machine(load0),
        "method": {
            "payload_bytes": 4096,
            "seconds_per_run": a.seconds,
            "reps": a.reps,
            "statistic": "median over repetitions of data frames per CPU-second of the process; "
            "a ratio: the median over an engine's runs of its rate over the mean of the raw runs "
            "just before and after it",
            "order": "raw, then each engine followed by raw; engines forward, then reversed",
            "elapsed_s": round(time.time() - started, 1),
        },
        "configs": summary,
        "runs": runs,
    }
    for eng, prefix in (("c", ""), ("py", "py_"), ("rocev2", "rocev2_"), ("c_rtt200", "c_rtt200_")):
        for side in ("send", "recv"):
            ratios = paired_ratios(runs, pairs, eng, side)
            if ratios:
                key = f"{prefix}{side}_ratio_vs_raw"
                result[key] = round(statistics.median(ratios), 3)
                result[f"{key}_runs"] = [round(x, 3) for x in ratios]
                result[f"{key}_spread"] = round(max(ratios) - min(ratios), 3)
    result.update(paced_keys(summary))
    for k in ("send_ratio_vs_raw", "recv_ratio_vs_raw", "py_send_ratio_vs_raw",
              "py_recv_ratio_vs_raw", "rocev2_send_ratio_vs_raw",
              "rocev2_recv_ratio_vs_raw", "c_rtt200_send_ratio_vs_raw",
              "c_rtt200_recv_ratio_vs_raw", "c_paced_send_us_per_frame",
              "c_paced_recv_us_per_frame", "c_paced_send_cost_vs_c", "c_paced_recv_cost_vs_c",
              "c_paced_recv_frames_per_wakeup"):  # fmt: skip
        if k in result:
            print(f"{k}: {result[k]}")
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())

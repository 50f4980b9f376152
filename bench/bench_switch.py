"""Forwarding rate host -> switch -> host: mrc-switch vs the kernel's seg6local next-csid.

Builds the three-namespace chain of lab/workloads/bench/switch_chain.py twice, side by side: one
with mrc-switch in the middle, one with the Linux kernel (``seg6local End flavors
next-csid``). Both are offered load by the same sender (one process, one valid uSID frame
laid out once in a buffer and blasted with sendmmsg through the C core as fast as it can go,
for --duration-s seconds, pinned to CPU 0) and the runs alternate (switch, kernel, kernel,
switch, ...) so that the noise of a shared machine falls on both alike. What counts is what
reaches the far host: the far veth's rx_packets (frames handed to the receiving host), per
second of sending. Before the timed runs, a verification run per side counts, with a
filtered AF_PACKET socket on the far host, the frames that arrive correctly forwarded
(destination shifted, hop limit decremented, MACs rewritten): it must equal the far veth's
count, so the rate measures forwarding, not something else.

Beside each rate: the sender's own rate and CPU, the switch process's CPU (user + system,
% of one core), every CPU's busy and softirq share, the machine's idle share just before
the run (other users' load), and the switch's own counters (kernel socket drops = frames
the switch was too slow to read). Medians over --reps runs.

    make bench-switch   # bench/bench_switch.py --out results/bench-switch.json

Needs root (network namespaces).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import platform
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab.workloads.bench import switch_chain as H
from mrcnic.cliflags import renamed
from mrcnic.units import UnitsError, parse_size, time_arg

ROOT = Path(__file__).resolve().parents[1]
BATCH = 256  # frames per receive/send batch in the switch
SENDER_CPU = 0
SWITCH_CPU = 1

# The sender: the frame is laid out BATCH times in one buffer once, so that each system call
# costs only the kernel's work (no per-call copy in user space that would slow one side).
SENDER = r"""
import json, os, resource, socket, sys, time
from mrcnic import _mrcfast
ffi, lib = _mrcfast.ffi, _mrcfast.lib
ifname, duration, cpu, frame_hex, nice, rate = sys.argv[1:7]
duration, cpu, nice, rate = float(duration), int(cpu), int(nice), float(rate)
frame = bytes.fromhex(frame_hex)
if cpu >= 0:
    os.sched_setaffinity(0, {cpu})
os.setpriority(os.PRIO_PROCESS, 0, nice)
with open("/proc/self/autogroup", "w") as fh:  # see set_priority in bench_switch.py
    fh.write(str(nice))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((ifname, 3))
n = 64 if rate > 0 else 256  # paced: smaller bursts
buf = ffi.new("uint8_t[]", frame * n)
lens = ffi.new("uint32_t[]", [len(frame)] * n)
err = ffi.new("int32_t[2]")
fd, size = s.fileno(), len(frame) * n
sent = failed = 0
interval = n / rate if rate > 0 else 0.0
clock = time.monotonic
r0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = clock()
end = t0 + duration
due = t0
while True:
    now = clock()
    if now >= end:
        break
    if interval:
        if now < due:
            continue  # spin: this CPU is the sender's anyway
        due = max(due + interval, now - 8 * interval)  # no catch-up bursts after a stall
    sent += lib.mrc_io_send_batch(fd, buf, size, lens, n, err)
    failed += err[0]
elapsed = clock() - t0
r1 = resource.getrusage(resource.RUSAGE_SELF)
cpu_s = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
print(json.dumps({"sent": sent, "failed": failed, "elapsed_s": elapsed, "cpu_s": cpu_s}))
"""


def set_priority(pid: int, nice: int) -> None:
    """Niceness of a process that leads a session of its own. With sched_autogroup (on
    here) niceness only orders tasks within one session's group and every group gets an
    equal share, so the group's own niceness is what counts against other users' load."""
    pid = pid or os.getpid()
    os.setpriority(os.PRIO_PROCESS, pid, nice)
    with contextlib.suppress(OSError), open(f"/proc/{pid}/autogroup", "w") as fh:
        fh.write(str(nice))


def _read_counter(ns: str, ifname: str, name: str) -> int:
    return int(H.nsrun(ns, "cat", f"/sys/class/net/{ifname}/statistics/{name}").stdout)


def cpu_times() -> dict[str, list[int]]:
    """Per-CPU jiffies from /proc/stat: cpuN -> [user nice system idle iowait irq softirq...]."""
    out = {}
    with open("/proc/stat") as fh:
        for line in fh:
            if line.startswith("cpu") and line[3].isdigit():
                name, *vals = line.split()
                out[name] = [int(v) for v in vals]
    return out


def cpu_shares(t0: dict[str, list[int]], t1: dict[str, list[int]]) -> dict[str, dict]:
    res = {}
    for cpu in t0:
        d = [b - a for a, b in zip(t0[cpu], t1[cpu], strict=False)]
        total = sum(d[:8]) or 1
        idle = d[3] + d[4]
        res[cpu] = {"busy_pct": round(100 * (total - idle) / total, 1),
                    "softirq_pct": round(100 * d[6] / total, 1),
                    "steal_pct": round(100 * d[7] / total, 1)}  # fmt: skip
    return res


def idle_pct(window_s: float = 0.5) -> float:
    """The machine's idle share (all CPUs) over a short window: the load of other users."""
    t0 = cpu_times()
    time.sleep(window_s)
    t1 = cpu_times()
    idle = total = 0
    for cpu in t0:
        d = [b - a for a, b in zip(t0[cpu], t1[cpu], strict=False)]
        idle += d[3] + d[4]
        total += sum(d[:8])
    return 100.0 * idle / (total or 1)


def wait_quiet(min_idle_pct: float, max_wait_s: float) -> float:
    """Wait (up to max_wait_s) until the machine is mostly idle; returns the idle share."""
    deadline = time.monotonic() + max_wait_s
    idle = idle_pct()
    while idle < min_idle_pct and time.monotonic() < deadline:
        idle = idle_pct()
    return idle


def proc_cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14, 15 of stat)


def forwarded_filter(frame: bytes) -> list[tuple[int, int, int, int]]:
    """A classic BPF program accepting only frames that are ``frame`` correctly forwarded by
    the chain's switch: Ethernet hB <- wB, IPv6, hop limit - 1, destination shifted once."""
    dst = H.usid_addr(H.USID_B)
    words = [
        (0, int.from_bytes(H.MAC_HB[0:4], "big")),
        (4, int.from_bytes(H.MAC_HB[4:6] + H.MAC_WB[0:2], "big")),
        (8, int.from_bytes(H.MAC_WB[2:6], "big")),
        (38, int.from_bytes(dst[0:4], "big")),
        (42, int.from_bytes(dst[4:8], "big")),
        (46, int.from_bytes(dst[8:12], "big")),
        (50, int.from_bytes(dst[12:16], "big")),
    ]
    checks = [(0x20, off, val) for off, val in words]  # BPF_LD|BPF_W|BPF_ABS
    checks.append((0x28, 12, 0x86DD))  # BPF_LD|BPF_H|BPF_ABS: ethertype
    checks.append((0x30, 21, frame[21] - 1))  # BPF_LD|BPF_B|BPF_ABS: hop limit
    prog = []
    n = len(checks)
    for i, (ld, off, val) in enumerate(checks):
        prog.append((ld, 0, 0, off))
        # BPF_JMP|BPF_JEQ|BPF_K: on mismatch jump to the final "reject"
        prog.append((0x15, 0, 2 * (n - i - 1) + 1, val))
    prog.append((0x06, 0, 0, 0xFFFF))  # BPF_RET: accept
    prog.append((0x06, 0, 0, 0))  # BPF_RET: reject
    return prog


def tap_socket(c: H.Chain, frame: bytes) -> socket.socket:
    """An AF_PACKET socket on the far host that counts correctly forwarded frames (read
    with PACKET_STATISTICS, never drained: its buffer is tiny and the count still runs)."""
    s = H.packet_socket(c.ns_r, c.ifname("hB"), rcvbuf=4096)
    prog = forwarded_filter(frame)
    raw = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    cbuf = ctypes.create_string_buffer(raw, len(raw))
    fprog = struct.pack("HL", len(prog), ctypes.addressof(cbuf))
    s.setsockopt(socket.SOL_SOCKET, 26, fprog)  # SO_ATTACH_FILTER (copied by the kernel)
    s.getsockopt(263, 6, 8)  # PACKET_STATISTICS: reading resets it
    return s


def tap_count(s: socket.socket) -> int:
    packets, _drops = struct.unpack("II", s.getsockopt(263, 6, 8))
    return packets  # tp_packets includes the frames dropped for lack of buffer


def one_run(
    c: H.Chain, frame: bytes, duration_s: float, cpu: int, nice: int, rate_pps: float = 0.0
) -> dict:
    hb, ha = c.ifname("hB"), c.ifname("hA")
    idle_before = idle_pct(0.3)
    before = _read_counter(c.ns_r, hb, "rx_packets")
    wire_before = _read_counter(c.ns_s, ha, "tx_packets")
    ticks0 = proc_cpu_ticks(c.proc.pid) if c.proc else 0
    st0 = H.read_stats(c)["totals"] if c.proc else None
    cpus0 = cpu_times()
    t0 = time.monotonic()
    argv = ["ip", "netns", "exec", c.ns_s, sys.executable, "-c", SENDER]
    argv += [ha, str(duration_s), str(cpu), frame.hex(), str(nice), str(rate_pps)]
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        start_new_session=True,  # its own autogroup (see set_priority)
    )
    sender = json.loads(out.stdout)
    cpus1 = cpu_times()
    time.sleep(0.3)  # let the switch drain what it has read
    wall = time.monotonic() - t0
    got = _read_counter(c.ns_r, hb, "rx_packets") - before
    res = {
        "target_pps": rate_pps or None,
        "idle_before_pct": round(idle_before, 1),
        "sent": sender["sent"],
        "on_wire": _read_counter(c.ns_s, ha, "tx_packets") - wire_before,
        "offered_pps": sender["sent"] / sender["elapsed_s"],
        "sender_cpu_pct": 100.0 * sender["cpu_s"] / sender["elapsed_s"],
        "delivered": got,
        "pps": got / sender["elapsed_s"],
        "cpus": cpu_shares(cpus0, cpus1),
    }
    if c.proc:
        hz = os.sysconf("SC_CLK_TCK")
        res["switch_cpu_pct"] = 100.0 * (proc_cpu_ticks(c.proc.pid) - ticks0) / hz / wall
        time.sleep(0.25)  # one more stats refresh (every 0.2 s)
        st1 = H.read_stats(c)["totals"]
        res["switch_counters"] = {
            k: st1[k] - st0[k] for k in ("rx_packets", "rx_socket_drops", "tx_packets")
        }
        res["switch_counters"]["drops_total"] = st1["drops_total"] - st0["drops_total"]
    return res


def verify(c: H.Chain, frame: bytes, duration_s: float, cpu: int, nice: int) -> dict:
    """A short run with the counting tap on: every delivered frame must be a correctly
    forwarded one."""
    tap = tap_socket(c, frame)
    try:
        before = _read_counter(c.ns_r, c.ifname("hB"), "rx_packets")
        r = one_run(c, frame, duration_s, cpu, nice)
        delivered = _read_counter(c.ns_r, c.ifname("hB"), "rx_packets") - before
        good = tap_count(tap)
    finally:
        tap.close()
    return {"delivered": delivered, "correctly_forwarded": good, "pps": round(r["pps"])}


def start_chains(wd: Path, pin: bool, nice: int, ring: int | None) -> dict[str, H.Chain]:
    chains: dict[str, H.Chain] = {}
    top: dict = {"batch_size": BATCH}
    if ring is not None:
        top["rx_ring_frames"] = ring
    try:
        chains["switch"] = H.build_chain("switch", wd, switch_args={"top": top}, new_session=True)
        chains["kernel"] = H.build_chain("kernel", wd)
    except BaseException:
        for c in chains.values():
            H.teardown(c)
        raise
    sw = chains["switch"].proc
    if sw is not None:
        if pin:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(sw.pid, {SWITCH_CPU})
        set_priority(sw.pid, nice)
    return chains


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def run_phase(
    chains: dict[str, H.Chain],
    frame: bytes,
    args: argparse.Namespace,
    cpu: int,
    rates: dict[str, float],
    label: str,
) -> dict[str, list[dict]]:
    """args.reps runs per side, alternating sides (switch first on even reps)."""
    out: dict[str, list[dict]] = {m: [] for m in rates}
    for rep in range(args.reps):
        order = list(rates) if rep % 2 == 0 else list(reversed(rates))
        for mode in order:
            wait_quiet(args.min_idle_pct, args.max_wait_s)
            r = one_run(chains[mode], frame, args.duration_s, cpu, args.nice, rates[mode])
            out[mode].append(r)
            print(f"{label} rep {rep} {len(frame):5d} B {mode:6s}: {r['pps']:>10,.0f} pps "
                  f"delivered of {r['offered_pps']:,.0f} offered "
                  f"(idle before {r['idle_before_pct']:.0f}%)", file=sys.stderr)  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="results/bench-switch.json")
    ap.add_argument("--sizes", default="64,4096", help="UDP payload sizes in bytes (64,4K)")
    ap.add_argument("--reps", type=int, default=5)
    renamed(ap, "--duration", "--duration-s", dest="duration_s", type=time_arg, default=2.0,
            metavar="TIME", help="per run [2s]")  # fmt: skip
    ap.add_argument("--no-pin", action="store_true",
                    help="do not pin the sender to CPU 0 and mrc-switch to CPU 1")  # fmt: skip
    ap.add_argument("--min-idle-pct", type=float, default=80.0,
                    help="before each run, wait (up to --max-wait) for this much idle CPU")  # fmt: skip
    renamed(ap, "--max-wait", "--max-wait-s", dest="max_wait_s", type=time_arg, default=10.0,
            metavar="TIME", help="per run [10s]")  # fmt: skip
    ap.add_argument("--nice", type=int, default=-10,
                    help="niceness of the sender and of mrc-switch (the same for both; other "
                    "users' processes on a shared machine keep 0)")  # fmt: skip
    ap.add_argument("--rx-ring-frames", type=int, default=None,
                    help="mrc-switch's rx_ring_frames (default: its default; 0: recvmmsg)")  # fmt: skip
    args = ap.parse_args(argv)
    why = H.have_netadmin()
    if why:
        print(f"bench-switch: skipped: {why}", file=sys.stderr)
        return 1
    pin = not args.no_pin and (os.cpu_count() or 1) >= 2
    cpu = SENDER_CPU if pin else -1
    try:
        sizes = [parse_size(s) for s in args.sizes.split(",")]
    except UnitsError as e:
        ap.error(f"--sizes: {e}")
    frames = {
        s: H.ipv6_frame(H.usid_addr(H.OWN, H.USID_B), payload=bytes(s), flow=1) for s in sizes
    }
    maxed: dict[int, dict[str, list[dict]]] = {}
    paced: dict[int, dict[str, list[dict]]] = {}
    checks: dict[int, dict[str, dict]] = {s: {} for s in sizes}
    with tempfile.TemporaryDirectory(prefix="mrcsw-bench-") as tmp:
        chains = start_chains(Path(tmp), pin, args.nice, args.rx_ring_frames)
        try:
            for s in sizes:
                for mode, c in chains.items():
                    checks[s][mode] = verify(c, frames[s], 0.5, cpu, args.nice)
            for s in sizes:
                # phase 1: the sender at full speed; the kernel's rate is its capacity here
                maxed[s] = run_phase(chains, frames[s], args, cpu,
                                     {"switch": 0.0, "kernel": 0.0}, "max  ")  # fmt: skip
                # phase 2: both offered exactly the kernel's rate
                target = median(maxed[s]["kernel"], "pps")
                paced[s] = run_phase(chains, frames[s], args, cpu,
                                     {"switch": target, "kernel": target}, "paced")  # fmt: skip
            st = H.read_stats(chains["switch"])
        finally:
            for c in chains.values():
                H.teardown(c)
    result: dict = {
        "bench": "switch",
        "what": "forwarding rate host -> switch -> host, frames of one valid uSID path",
        "chain": "3 netns, veth, MTU 9000; one sender process (sendmmsg of a prebuilt batch); "
        "rate = far veth rx_packets per second of sending",
        "method": {
            "duration_s": args.duration_s,
            "reps": args.reps,
            "statistic": "median over reps; switch and kernel runs alternate",
            "phases": "1: sender at full speed (kernel_max_pps, switch_max_pps); 2: both "
            "offered the kernel's max rate (paced sender): switch_pps, kernel_pps, ratio",
            "pinned": {"sender_cpu": SENDER_CPU, "switch_cpu": SWITCH_CPU} if pin else None,
            "niceness_sender_and_switch": args.nice,
            "priority_note": "sender and switch each lead a session; their autogroups get the "
            "same niceness",
            "min_idle_pct_before_run": args.min_idle_pct,
            "switch_batch": BATCH,
            "switch_rx_path": st.get("rx_path"),
            "switch_rx_ring_frames": args.rx_ring_frames,
            "kernel_note": "veth: the kernel forwards in the sender's softirq, on the "
            "sender's CPU, so its rate is the sender's; mrc-switch runs on the other CPU",
        },
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
        "payloads": {},
        "switch_totals": st["totals"],
    }
    for s in sizes:
        sw, k = paced[s]["switch"], paced[s]["kernel"]
        s_pps, k_pps = median(sw, "pps"), median(k, "pps")
        swm, km = maxed[s]["switch"], maxed[s]["kernel"]
        result["payloads"][str(s)] = {
            "payload_bytes": s,
            "frame_bytes": len(frames[s]),
            "switch_pps": round(s_pps),
            "kernel_pps": round(k_pps),
            "ratio_vs_kernel": round(s_pps / k_pps, 3) if k_pps else None,
            "offered_pps": round(median(k, "target_pps")),
            "offered_pps_switch_run": round(median(sw, "offered_pps")),
            "offered_pps_kernel_run": round(median(k, "offered_pps")),
            "switch_cpu_pct": round(median(sw, "switch_cpu_pct"), 1),
            "sender_cpu_pct_switch_run": round(median(sw, "sender_cpu_pct"), 1),
            "sender_cpu_pct_kernel_run": round(median(k, "sender_cpu_pct"), 1),
            "kernel_max_pps": round(median(km, "pps")),
            "switch_max_pps": round(median(swm, "pps")),
            "switch_max_offered_pps": round(median(swm, "offered_pps")),
            "switch_max_cpu_pct": round(median(swm, "switch_cpu_pct"), 1),
            "verification": checks[s],
            "runs": {"paced": paced[s], "max": maxed[s]},
        }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for s in sizes:
        p = result["payloads"][str(s)]
        print(
            f"payload {s:5d} B at {p['offered_pps']:,} pps offered: switch "
            f"{p['switch_pps']:>9,} pps ({p['switch_cpu_pct']:.0f}% CPU)  kernel "
            f"{p['kernel_pps']:>9,} pps  ratio {p['ratio_vs_kernel']}  |  full speed: "
            f"switch {p['switch_max_pps']:,} of {p['switch_max_offered_pps']:,}, "
            f"kernel {p['kernel_max_pps']:,}"
        )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

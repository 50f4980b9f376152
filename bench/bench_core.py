"""Benchmark of the C core against its pure-Python twin: ns per operation, through the Python
API users get (mrcnic.fast with BACKEND "c" vs mrcnic.fast.twin), plus the raw cffi call cost.

    .venv/bin/python bench/bench_core.py --out results/bench-core.json   (or: make bench-core)

Each figure is the median over --repeats runs of N calls (time.perf_counter_ns, gc disabled
while timing; C and Python runs interleaved so background load hits both alike). Process CPU
time per operation is recorded beside wall time: CPU well below wall means the run was
preempted and the figure is noisy. The per-iteration loop overhead is measured and reported,
not subtracted. See docs/design/core.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import cffi

from mrcnic import fast
from mrcnic.fast import twin as fast_twin

MASK = 0xFFFFFF
SRC = bytes.fromhex("fcbb0bb0010010000000000000000002")
DST = bytes.fromhex("fcbbbb00300500000000000000000000")

# A run times n calls and returns (wall ns, process CPU ns).
Run = Callable[[int], tuple[int, int]]


@dataclass(frozen=True, slots=True)
class OpResult:
    name: str
    n_per_repeat: int
    c_ns_per_op: float
    python_ns_per_op: float
    python_over_c: float  # how many times slower the twin is
    c_cpu_ns_per_op: float
    python_cpu_ns_per_op: float
    c_ns_min: float
    c_ns_max: float
    python_ns_min: float
    python_ns_max: float


@dataclass(frozen=True, slots=True)
class RawResult:
    name: str
    ns_per_call: float
    cpu_ns_per_call: float


@dataclass(frozen=True, slots=True)
class BenchResult:
    ops: list[OpResult]
    raw: list[RawResult]
    loop_overhead_ns: float


def _timed(body: Callable[[], None]) -> tuple[int, int]:
    gc.disable()
    try:
        c0, t0 = time.process_time_ns(), time.perf_counter_ns()
        body()
        t1, c1 = time.perf_counter_ns(), time.process_time_ns()
    finally:
        gc.enable()
    return t1 - t0, c1 - c0


def _timed_mark_advance(w: Any, psns: list[int]) -> tuple[int, int]:
    # one loop for both mark+advance runs, so their figures stay comparable
    def body() -> None:
        for p in psns:
            w.mark(p)
            w.advance()

    return _timed(body)


# --- one run maker per operation; each takes the implementation module -------------------------


def run_mark_advance(m: ModuleType) -> Run:
    # in order except that every pair arrives swapped, starting just before the 24-bit wrap
    def run(n: int) -> tuple[int, int]:
        w = m.PsnWindow(65536, 0xFFFF00)
        psns = [(0xFFFF00 + (i ^ 1)) & MASK for i in range(n)]
        return _timed_mark_advance(w, psns)

    return run


def _lossy_window(m: ModuleType, in_flight: int) -> Any:
    # in_flight PSNs past a hole at the cumulative ack, every 7th of them lost too
    w = m.PsnWindow(65536, 0xFFFE00)
    for i in range(1, in_flight + 1):
        if i % 7:
            w.mark((0xFFFE00 + i) & MASK)
    return w


def run_mark_advance_hole(m: ModuleType, in_flight: int) -> Run:
    # the PSN at the cumulative ack is lost, so nothing advances while the window fills
    def run(n: int) -> tuple[int, int]:
        w = m.PsnWindow(65536, 0)
        for psn in range(1, in_flight + 1):
            w.mark(psn)
        psns = [in_flight + 1 + i for i in range(n)]
        return _timed_mark_advance(w, psns)

    return run


def run_sack_bitmap(m: ModuleType, in_flight: int) -> Run:
    def run(n: int) -> tuple[int, int]:
        w = _lossy_window(m, in_flight)
        offsets = [(i * 64) % 1024 for i in range(n)]

        def body() -> None:
            for off in offsets:
                w.sack_bitmap(off)

        return _timed(body)

    return run


def run_holes(m: ModuleType, in_flight: int) -> Run:
    def run(n: int) -> tuple[int, int]:
        w = _lossy_window(m, in_flight)
        rng = range(n)

        def body() -> None:
            for _ in rng:
                w.holes()

        return _timed(body)

    return run


def run_place(m: ModuleType, size: int) -> Run:
    def run(n: int) -> tuple[int, int]:
        region = bytearray(1 << 20)
        payload = bytes(range(256)) * (size // 256)
        base = 0x7F00_0000_0000
        vas = [base + (i % 256) * size for i in range(n)]
        place = m.place

        def body() -> None:
            for va in vas:
                place(region, base, va, payload)

        return _timed(body)

    return run


def run_udp6(m: ModuleType, size: int) -> Run:
    def run(n: int) -> tuple[int, int]:
        udp = bytes((i * 131 + 7) & 0xFF for i in range(size))
        rng = range(n)
        udp6 = m.udp6_checksum

        def body() -> None:
            for _ in rng:
                udp6(SRC, DST, udp)

        return _timed(body)

    return run


def run_loop_overhead(n: int) -> tuple[int, int]:
    rng = range(n)

    def body() -> None:
        for _ in rng:
            pass

    return _timed(body)


def _raw_runs() -> dict[str, Run]:
    """Direct cffi calls, no Python wrapper: the floor the wrappers add to."""
    # the C core only here: a pure-Python build (MRC_PURE_PYTHON, no compiler) has none
    from mrcnic._mrcfast import ffi, lib

    def mark_advance(n: int) -> tuple[int, int]:
        bits = ffi.new("uint64_t[]", 1024)
        w = ffi.new("mrc_psnwin_t *")
        lib.mrc_psnwin_init(w, bits, 1024, 65536, 0xFFFF00)
        psns = [(0xFFFF00 + (i ^ 1)) & MASK for i in range(n)]
        mark, adv = lib.mrc_psnwin_mark, lib.mrc_psnwin_advance

        def body() -> None:
            for p in psns:
                mark(w, p)
                adv(w)

        return _timed(body)

    def sack_bitmap(n: int) -> tuple[int, int]:
        w = _lossy_window(fast, 1000)
        rng, f, p = range(n), lib.mrc_psnwin_sack_bitmap, w._w

        def body() -> None:
            for _ in rng:
                f(p, 64)

        return _timed(body)

    def holes(n: int) -> tuple[int, int]:
        w = _lossy_window(fast, 1000)
        rng, f, p = range(n), lib.mrc_psnwin_holes, w._w

        def body() -> None:
            for _ in rng:
                f(p)

        return _timed(body)

    def csum_fold(n: int) -> tuple[int, int]:
        rng, fold = range(n), lib.mrc_csum_fold

        def body() -> None:
            for _ in rng:
                fold(0x1234)

        return _timed(body)

    def udp6_64(n: int) -> tuple[int, int]:
        udp = bytes(64)
        rng, f = range(n), lib.mrc_udp6_checksum

        def body() -> None:
            for _ in rng:
                f(SRC, 16, DST, 16, udp, 64)

        return _timed(body)

    def place_4096(n: int) -> tuple[int, int]:
        region = ffi.from_buffer(bytearray(1 << 20), require_writable=True)
        payload = bytes(4096)
        vas = [(i % 256) * 4096 for i in range(n)]
        f = lib.mrc_place

        def body() -> None:
            for va in vas:
                f(region, 1 << 20, 0, va, payload, 4096)

        return _timed(body)

    return {
        "mrc_psnwin_mark + mrc_psnwin_advance": mark_advance,
        "mrc_psnwin_sack_bitmap": sack_bitmap,
        "mrc_psnwin_holes": holes,
        "mrc_csum_fold (call floor)": csum_fold,
        "mrc_udp6_checksum 64 B (bytes)": udp6_64,
        "mrc_place 4096 B (region view made once)": place_4096,
    }


OPERATIONS: list[tuple[str, Callable[[ModuleType], Run], int]] = [
    ("psn window mark+advance", run_mark_advance, 20000),
    ("mark+advance, hole at ack, 32K in flight", lambda m: run_mark_advance_hole(m, 32768), 5000),
    ("sack_bitmap, 1K in flight", lambda m: run_sack_bitmap(m, 1000), 20000),
    ("sack_bitmap, 32K in flight", lambda m: run_sack_bitmap(m, 32768), 5000),
    ("holes, 1K in flight", lambda m: run_holes(m, 1000), 20000),
    ("holes, 32K in flight", lambda m: run_holes(m, 32768), 5000),
    ("place 4096 B", lambda m: run_place(m, 4096), 10000),
    ("udp6_checksum 4096 B", lambda m: run_udp6(m, 4096), 10000),
    ("udp6_checksum 64 B", lambda m: run_udp6(m, 64), 20000),
]


def _check_agreement() -> None:
    """The two sides must compute the same thing, or the comparison means nothing."""
    for in_flight in (1000, 32768):
        wc, wp = _lossy_window(fast, in_flight), _lossy_window(fast_twin, in_flight)
        for off in (0, 64, 960):
            assert wc.sack_bitmap(off) == wp.sack_bitmap(off)
        assert wc.holes() == wp.holes() > 0
    for size in (64, 4096):
        udp = bytes((i * 131 + 7) & 0xFF for i in range(size))
        assert fast.udp6_checksum(SRC, DST, udp) == fast_twin.udp6_checksum(SRC, DST, udp)


def _measure(run: Run, n: int, repeats: int) -> tuple[list[float], list[float]]:
    run(max(n // 10, 1))  # warm up
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = run(n)
        walls.append(wall / n)
        cpus.append(cpu / n)
    return walls, cpus


def bench(repeats: int, scale: float) -> BenchResult:
    if fast.BACKEND != "c":
        sys.exit("bench_core: the C core is not loaded (MRC_PURE_PYTHON=1 or build failed)")
    _check_agreement()
    ops: list[OpResult] = []
    for name, make, n0 in OPERATIONS:
        n = max(int(n0 * scale), 10)
        run_c, run_py = make(fast), make(fast_twin)
        run_c(max(n // 10, 1))
        run_py(max(n // 10, 1))
        c_w, c_cpu, p_w, p_cpu = [], [], [], []
        for i in range(repeats):
            # alternate which side goes first, so drifting load does not favour one
            order = [(run_c, c_w, c_cpu), (run_py, p_w, p_cpu)]
            for run, walls, cpus in order if i % 2 == 0 else reversed(order):
                wall, cpu = run(n)
                walls.append(wall / n)
                cpus.append(cpu / n)
        c_med, p_med = statistics.median(c_w), statistics.median(p_w)
        ops.append(
            OpResult(
                name=name,
                n_per_repeat=n,
                c_ns_per_op=round(c_med, 1),
                python_ns_per_op=round(p_med, 1),
                python_over_c=round(p_med / c_med, 2),
                c_cpu_ns_per_op=round(statistics.median(c_cpu), 1),
                python_cpu_ns_per_op=round(statistics.median(p_cpu), 1),
                c_ns_min=round(min(c_w), 1),
                c_ns_max=round(max(c_w), 1),
                python_ns_min=round(min(p_w), 1),
                python_ns_max=round(max(p_w), 1),
            )
        )
    raw: list[RawResult] = []
    n_raw = max(int(20000 * scale), 10)
    for name, run in _raw_runs().items():
        walls, cpus = _measure(run, n_raw, repeats)
        raw.append(
            RawResult(name, round(statistics.median(walls), 1), round(statistics.median(cpus), 1))
        )
    loop_w, _ = _measure(run_loop_overhead, max(int(200000 * scale), 10), repeats)
    return BenchResult(ops, raw, round(statistics.median(loop_w), 1))


def machine_info() -> dict[str, object]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": model,
        "machine": platform.machine(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "cffi": cffi.__version__,
        "loadavg_1m_before": os.getloadavg()[0],
    }


def format_table(result: BenchResult) -> str:
    lines = [
        f"{'operation':<42} {'C ns/op':>10} {'Python ns/op':>13} {'Python/C':>9} "
        f"{'C cpu/wall':>10} {'Py cpu/wall':>11}",
        "-" * 100,
    ]
    for op in result.ops:
        lines.append(
            f"{op.name:<42} {op.c_ns_per_op:>10.1f} {op.python_ns_per_op:>13.1f} "
            f"{op.python_over_c:>8.2f}x {op.c_cpu_ns_per_op / op.c_ns_per_op:>10.2f} "
            f"{op.python_cpu_ns_per_op / op.python_ns_per_op:>11.2f}"
        )
    lines.append("")
    lines.append(f"{'raw cffi call (no wrapper)':<44} {'ns/call':>10}")
    for r in result.raw:
        lines.append(f"{r.name:<44} {r.ns_per_call:>10.1f}")
    lines.append("")
    lines.append(f"loop overhead per iteration (included above): {result.loop_overhead_ns} ns")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/bench-core.json"))
    ap.add_argument("--repeats", type=int, default=9, help="runs per figure (median taken)")
    ap.add_argument(
        "--scale", type=float, default=1.0, help="multiply the calls per run (0.1 = quick look)"
    )
    args = ap.parse_args(argv)
    info = machine_info()
    t0 = time.perf_counter()
    result = bench(args.repeats, args.scale)
    info["loadavg_1m_after"] = os.getloadavg()[0]
    print(format_table(result))
    doc = {
        "bench": "bench-core",
        "command": "bench/bench_core.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "timestamp_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": info,
        "method": {
            "statistic": "median over repeats of wall ns per operation (min and max kept)",
            "clock": "time.perf_counter_ns; cpu = time.process_time_ns",
            "repeats": args.repeats,
            "gc": "disabled while timing",
            "api": "mrcnic.fast (BACKEND c) vs mrcnic.fast.twin, called as users call them",
            "loop_overhead_ns": result.loop_overhead_ns,
            "elapsed_s": round(time.perf_counter() - t0, 2),
        },
        "operations": [asdict(op) for op in result.ops],
        "raw_cffi": [asdict(r) for r in result.raw],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

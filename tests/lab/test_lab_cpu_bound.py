"""mrc-bench's ``cpu_bound`` on runs made CPU-limited on purpose, and on one that is not
(root): a lab whose links ask for several times what the machine can carry through its
processes (2 planes at 10 Gb/s: ~20 Gb/s from one NIC, where the project's 2-core machines
carry 0.3-1.5 Gb/s through the lab; at 1 Gb/s a fast day's run reached 0.73 of capacity on
2026-11-30) gets far less than capacity and must say cpu_bound;
the same shape at 2 Mb/s (4 Mb/s in all) gets its capacity and must not. The rule and the
measurements behind its thresholds: lab/proc/cpu.py, docs/bench.md (CPU-BOUND)."""

from __future__ import annotations

import commands as C
import lab_helpers as H

from lab.proc.cpu import CPU_BOUND_WAIT


def write(lab: str, size: str) -> dict:
    return C.bench_json("write", "--lab", lab, "--src", "h0", "--dst", "h1", "--size", size,
                        "--iters", "4", "-q", timeout=180)  # fmt: skip


def test_a_run_the_cpu_limits_says_so_and_its_figures_show_why():
    with H.running_lab(rate_mbit=10000) as st:
        d = write(st.name, "16M")
    assert d["verified"]
    assert d["goodput_fraction"] < 0.6  # the CPU, not the links, set the pace
    assert d["cpu_bound"] is True, d
    figures = (d["machine_busy_fraction"], d["cpu_pressure_fraction"],
               d["nic_core_fraction_max"], d["switch_core_fraction_max"])  # fmt: skip
    assert all(x is not None for x in figures), figures  # every piece of evidence measured
    # the processes were late for the fabric: their waits, against a 3.4 us frame time
    assert d["cpu_wait_per_frame_time"] >= CPU_BOUND_WAIT, d["cpu_wait_us_per_wake_each"]


def test_a_run_the_fabric_limits_is_not_cpu_bound():
    with H.running_lab(rate_mbit=2) as st:
        d = write(st.name, "1M")
    assert d["verified"] and d["goodput_fraction"] > 0.9
    assert d["cpu_bound"] is False, d
    assert d["cpu_wait_per_frame_time"] is not None  # measured, and small against 17 ms frames

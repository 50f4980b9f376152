"""bench_e2e's report: markdown tables from results/bench-e2e-*.json (docs/results/performance.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from e2e_stats import fmt_num, median


def _dip_cell(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    if not d.get("observed", True):
        return "write had ended"
    if d["duration_s"] == 0:
        return f"none (lowest {d['lowest_fraction']:.2f})"
    tail = "" if d["recovered"] else ", not recovered"
    return f"{d['lowest_fraction']:.2f} for {d['duration_s']:.2f} s{tail}"


def _rate_lines(d: dict[str, Any]) -> list[str]:
    """The link rate's why, as the benchmark printed it (nothing for older JSON)."""
    line = (d.get("rate_choice") or {}).get("line")
    return [f"Link rate: {line}.", ""] if line else []


def report(out_dir: Path) -> str:
    """Markdown tables of every results/bench-e2e-*.json there is (docs/results/performance.md)."""
    parts: list[str] = []

    def load(name: str) -> dict[str, Any] | None:
        p = out_dir / f"bench-e2e-{name}.json"
        return json.loads(p.read_text()) if p.exists() else None

    if (d := load("single")) is not None:
        parts += [
            f"### 1. One QP, idle lab ({d['written_at']}, load {d['machine']['load_avg_at_start']})",
            "",
            *_rate_lines(d),
            "| config | switches | goodput_fraction median | runs | steady | verified | QP errors | CPU NICs % | CPU switches (cores) | switch CPU per frame and hop (us) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for k, c in d["configs"].items():
            sw = [x.get("switch_cores") for x in c.get("lab_cpu") or [] if x]
            parts.append(
                f"| {k} | {c.get('switch', 'python')} | {fmt_num(c['goodput_fraction_median'])} | "
                f"{', '.join(f'{g:.3f}' for g in c['goodput_fraction_runs'])} | "
                f"{fmt_num(c['steady_fraction_median'])} | {c['verified_all']} | {c['qp_errors_total']} | "
                f"{fmt_num(c['cpu_percent_median'], 0)} | {fmt_num(median(sw), 2)} | "
                f"{fmt_num(c.get('switch_us_per_frame_hop_median'), 1)} |"
            )
        parts.append("")
    perm = load("permutation")
    for d in (perm.get("modes") or {"": perm}).values() if perm is not None else ():
        fm, fs = d["fabric_multi_plane"], d["fabric_single_plane"]
        parts += [
            f"### 2. Permutation ({d.get('mode', 'full')}), {d['hosts']} hosts, "
            f"{d.get('writers', d['hosts'])} writers, {fm['switch']} switches "
            f"({d.get('written_at', perm['written_at'])}, load "
            f"{d.get('machine', perm['machine'])['load_avg_at_start']})",
            "",
            f"Multi-plane: {fm['planes']} planes x ({fm['t0']} T0 + {fm['t1']} T1) at "
            f"{fm['rate_mbit']:g} Mb/s; single-plane: 1 plane at {fs['rate_mbit']:g} Mb/s; "
            f"{fm['switch']} switches. Pairs: " + ", ".join(f"{s}->{t}" for s, t in d["pairs"]),
            "",
            *_rate_lines(d),
            "| config | QPs per pair | aggregate goodput_fraction median | runs | MRC / this | verified | QP errors | machine CPU % | lab processes (cores) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for k, c in d["configs"].items():
            parts.append(
                f"| {k} | {c['qps_per_pair']} | {fmt_num(c['goodput_fraction_median'])} | "
                f"{', '.join(f'{g:.3f}' for g in c['goodput_fraction_runs'])} | "
                f"{fmt_num(d['ratios'].get(k), 2) if k in d['ratios'] else '1'} | {c['verified_all']} | "
                f"{c['qp_errors_total']} | {fmt_num(c['machine_busy_percent_median'], 0)} | "
                f"{fmt_num(c['lab_cores_median'], 2)} |"
            )
        parts.append("")
    if (d := load("failures")) is not None:
        parts += [
            f"### 3. Failures during one write ({d['written_at']}, load "
            f"{d['machine']['load_avg_at_start']})",
            "",
            d["what"],
            "",
        ]
        for mode, transports in (d.get("modes") or {"python": d.get("transports", {})}).items():
            parts += [
                f"**{mode} switches**",
                "",
                "| fault | transport | dip: lowest fraction, time below | repair | threshold | goodput_fraction | bytes vs no fault | completed | verified | QP errors |",
                "|---|---|---|---|---|---|---|---|---|---|",
            ]
            names = list(next(iter(transports.values())).keys())
            for name in names:
                for t, per in transports.items():
                    e = per.get(name) or {}
                    ana = e.get("analysis") or {}
                    dips = ana.get("dips") or []
                    fault = next((x for x in dips if x["kind"] == "fault"), None)
                    repair = next((x for x in dips if x["kind"] == "repair"), None)
                    parts.append(
                        f"| {name} | {t} | {_dip_cell(fault)} | {_dip_cell(repair)} | "
                        f"{fmt_num(ana.get('threshold_fraction'), 2)} | {fmt_num(e.get('goodput_fraction'))} | "
                        f"{fmt_num(e.get('bytes_vs_no_fault'))} | {e.get('completed')} | "
                        f"{e.get('verified')} | {e.get('qp_errors')} |"
                    )
            parts.append("")
    if (d := load("cpu")) is not None:
        parts += [
            f"### 4. NIC packets per CPU-second ({d['written_at']})",
            "",
            "| switches | send path: data frames / client CPU-s | all frames | receive path: data frames / server CPU-s | all frames | mrc-bench pps_per_core client / server | runs |",
            "|---|---|---|---|---|---|---|",
        ]
        for mode, m in d.get("modes", {}).items():
            parts.append(
                f"| {mode} | {fmt_num(m['send_pps_per_core_median'], 0)} | "
                f"{fmt_num(m['send_all_frames_per_core_median'], 0)} | "
                f"{fmt_num(m['receive_pps_per_core_median'], 0)} | "
                f"{fmt_num(m['receive_all_frames_per_core_median'], 0)} | "
                f"{fmt_num(m['bench_pps_per_core_client_median'], 0)} / "
                f"{fmt_num(m['bench_pps_per_core_server_median'], 0)} | {m['runs']} |"
            )
        parts.append("")
    return "\n".join(parts)

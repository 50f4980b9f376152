"""bench_e2e's arithmetic on mrc-bench results (pure): numbers from JSON, medians, the steady
fraction of a timeline, the summary of repeated runs, NIC packets per CPU-second."""

from __future__ import annotations

import statistics
from typing import Any


def num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def median(values) -> float | None:
    vals = [v for v in values if v is not None]
    return round(statistics.median(vals), 3) if vals else None


def steady_fraction(res: dict[str, Any], skip_s: float = 1.0) -> float | None:
    """Median goodput/capacity of the timeline bins after the first ``skip_s`` of traffic."""
    tl = res.get("timeline") or []
    cap = num(res.get("capacity_bps"))
    if not tl or not cap:
        return None
    start = next((t for t, g in tl if g > 0), None)
    if start is None:
        return 0.0
    vals = [g / cap for t, g in tl if t >= start + skip_s]
    return round(statistics.median(vals), 4) if vals else None


def summarise_runs(results: list[dict[str, Any] | None]) -> dict[str, Any]:
    """Median and spread of goodput_fraction over repetitions, plus the rest."""
    ok = [r for r in results if r]
    gf = [num(r.get("goodput_fraction")) for r in ok]
    gf = [g for g in gf if g is not None]
    steady = [s for r in ok if (s := steady_fraction(r)) is not None]
    cpu = [c for r in ok if (c := num(r.get("cpu_percent"))) is not None]
    bound = [r.get("cpu_bound") for r in ok]
    return {
        "runs": len(results),
        "runs_with_result": len(ok),
        "goodput_fraction_median": round(statistics.median(gf), 4) if gf else None,
        "goodput_fraction_runs": [round(g, 4) for g in gf],
        "steady_fraction_median": round(statistics.median(steady), 4) if steady else None,
        "goodput_bps_median": round(statistics.median(num(r.get("goodput_bps")) or 0 for r in ok))
        if ok
        else None,
        "capacity_bps": num(ok[0].get("capacity_bps")) if ok else None,
        "verified_all": bool(ok) and all(bool(r.get("verified")) for r in ok),
        "qp_errors_total": sum(int(r.get("qp_errors") or 0) for r in ok),
        "cpu_percent_median": round(statistics.median(cpu), 1) if cpu else None,
        "cpu_bound_runs": bound,
        "cpu_bound_any": any(bool(b) for b in bound),
    }


def _port_sum(nic: dict[str, Any] | None, key: str) -> int:
    return sum(int(p.get(key) or 0) for p in (nic or {}).get("ports", []))


def pps_per_core(r: dict[str, Any]) -> dict[str, Any]:
    """Packets per CPU second of each NIC process of one mrc-bench write result: the client
    (the send path: data frames out, SACKs in) and the server (the receive path: data frames
    in, SACKs out). CPU seconds = ``cpu_percent_client|server`` x ``duration_s`` (mrc-bench
    measures both over the timed run); frames from the NICs' per-port counters."""
    dur = num(r.get("duration_s")) or 0.0
    nic = r.get("nic") or {}
    out: dict[str, Any] = {
        "duration_s": dur,
        # mrc-bench's own figures: frames sent + received per CPU-second of each side
        "bench_pps_per_core_client": num(r.get("pps_per_core_client")),
        "bench_pps_per_core_server": num(r.get("pps_per_core_server")),
    }
    for side, pct_key, main, other in (
        ("send", "cpu_percent_client", "tx_frames", "rx_frames"),
        ("receive", "cpu_percent_server", "rx_frames", "tx_frames"),
    ):
        who = "client" if side == "send" else "server"
        pct = num(r.get(pct_key))
        cpu_s = pct / 100 * dur if pct else None
        n_main = _port_sum(nic.get(who), main)
        n_other = _port_sum(nic.get(who), other)
        out[f"{side}_cpu_s"] = round(cpu_s, 3) if cpu_s else None
        out[f"{side}_frames"] = n_main
        out[f"{side}_pps_per_core"] = round(n_main / cpu_s) if cpu_s and n_main else None
        out[f"{side}_all_frames_per_core"] = (
            round((n_main + n_other) / cpu_s) if cpu_s and n_main else None
        )
        out[f"{side}_gbps_per_core"] = (
            round(_port_sum(nic.get(who), main.replace("frames", "bytes")) * 8 / cpu_s / 1e9, 3)
            if cpu_s and n_main
            else None
        )
    return out


def pps_summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    per = [pps_per_core(r) for r in results]
    out: dict[str, Any] = {"runs": len(per)}
    for key in (
        "send_pps_per_core",
        "receive_pps_per_core",
        "send_all_frames_per_core",
        "receive_all_frames_per_core",
        "send_gbps_per_core",
        "receive_gbps_per_core",
        "bench_pps_per_core_client",
        "bench_pps_per_core_server",
    ):
        vals = [p[key] for p in per if p.get(key)]
        out[f"{key}_median"] = median(vals)
    out["goodput_fraction_runs"] = [r.get("goodput_fraction") for r in results]
    out["machine_cpu_percent_runs"] = [r.get("machine_cpu_percent") for r in results]
    out["per_run"] = per
    return out


def fmt_num(x: Any, nd: int = 3) -> str:
    """A number with ``nd`` decimals, "-" when there is none."""
    v = num(x)
    return "-" if v is None else f"{v:.{nd}f}"

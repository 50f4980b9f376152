"""The soak's document, closing screen and plot: what ran where (machine, code), the
verdict, the summary screen (pure) and the PNG of step times."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
from pathlib import Path
from typing import Any

from lab.proc.cpu import CPU_BOUND_LABEL
from lab.proc.provenance import git_head, stamp
from lab.proc.schedule import Step
from lab.workloads import calibrate
from lab.workloads.soak.config import TITLES
from lab.workloads.soak.schedule import fault_kind


def machine_info() -> dict[str, Any]:
    """What the figures depend on: CPU model and count, memory, kernel, Python, load."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem_kb = int(Path("/proc/meminfo").read_text().split("\n")[0].split()[1])
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "mem_gib": round(mem_kb / (1 << 20), 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def code_info() -> dict[str, Any]:
    """Which code ran: the git commit and how many tracked code files differed from it (None
    outside a git checkout, e.g. an exported tree), and the calibration's hash of the code a
    frame's cost depends on."""
    head, dirty = git_head()
    return {"git_head": head, "modified_files": dirty, "code_hash": calibrate.code_hash()}


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def verdict(doc: dict[str, Any]) -> tuple[bool, list[str]]:
    """The exit status's reasons: MRC must have no QP error, no failed step and at least one
    step; no transport may have a step whose result was wrong."""
    reasons = []
    runs: dict[str, dict[str, Any]] = doc["transports"]
    mrc = runs.get("mrc")
    if mrc is not None:
        if mrc["qp_errors"]:
            reasons.append(f"MRC had {mrc['qp_errors']} QP errors")
        if mrc["failed_steps"]:
            reasons.append(f"MRC had {mrc['failed_steps']} failed steps")
        if not mrc["steps"]:
            reasons.append("MRC completed no step")
    for key, r in runs.items():
        if r["verification_failures"]:
            reasons.append(
                f"{TITLES.get(key, key)}: {r['verification_failures']} steps failed verification"
            )
    return not reasons, reasons


def _ms(d: dict[str, Any], key: str) -> str:
    return f"{d[key] * 1e3:.0f}" if d.get("count") else "-"


def _dist_cell(d: dict[str, Any]) -> str:
    if not d.get("count"):
        return "-"
    return "/".join(_ms(d, k) for k in ("p50_s", "p90_s", "p99_s", "max_s")) + f" (n={d['count']})"


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def render_summary(doc: dict[str, Any]) -> str:
    """The closing screen, from the JSON document (pure)."""
    lab = doc["lab"]
    runs: dict[str, dict[str, Any]] = doc["transports"]
    kinds: dict[str, int] = {}
    for s in doc["schedule"]:
        k = fault_kind(Step.from_dict(s))
        kinds[k] = kinds.get(k, 0) + 1
    lines = [
        f"mrc soak: {doc['minutes']:g} min per transport, seed {doc['seed']}, "
        f"{doc['events_per_min']:g} faults/min planned ({len(doc['schedule'])}: "
        + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
        + ")",
        f"ring {','.join(doc['hosts'])}, {doc['size']} B per rank; {lab['planes']} planes x "
        f"{lab['rate_mbit']:g} Mb/s, {lab['switch']} switches; {doc['started_at']}",
    ]
    keys = list(runs)
    w = 34

    def row(label: str, cells: list[str]) -> str:
        return f"{label:<34}" + "".join(f"{c:<{w}}" for c in cells).rstrip()

    lines.append(row("", [TITLES.get(k, k) for k in keys]))
    r = [runs[k] for k in keys]
    lines.append(row("steps verified", [f"{x['steps']} ({x['steps_per_min']:g}/min)" for x in r]))
    lines.append(row("bytes verified", [_gb(x["bytes_verified"]) for x in r]))
    lines.append(row("QP errors", [str(x["qp_errors"]) for x in r]))
    lines.append(
        row("failed steps / restarts", [f"{x['failed_steps']} / {x['restarts']}" for x in r])
    )
    lines.append(row("wrong results (verification)", [str(x["verification_failures"]) for x in r]))
    lines.append(
        row(
            "faults applied (late or cut short)",
            [f"{x['faults_applied']} ({len(x.get('faults_late', []))})" for x in r],
        )
    )
    lines.append("step time, ms: p50/p90/p99/max")
    for part, label in (
        ("all", "  all steps"),
        ("clean", "  clean steps"),
        ("fault", "  fault steps"),
    ):
        lines.append(row(label, [_dist_cell(x["step_time_s"][part]) for x in r]))
    lines.append(
        row(
            CPU_BOUND_LABEL,
            [
                f"{'YES' if x.get('cpu_bound') else 'no'} ({x.get('machine_cpu_percent')}% busy)"
                for x in r
            ],
        )
    )
    for key, x in runs.items():
        for e in x.get("fault_errors", [])[:3]:
            lines.append(f"  {TITLES.get(key, key)} fault error: {e}")
    ok, reasons = doc["verdict"]["ok"], doc["verdict"]["reasons"]
    lines.append("verdict: " + ("OK" if ok else "FAILED: " + "; ".join(reasons)))
    out = doc.get("outputs") or {}
    if out:
        lines.append("  ".join(f"{k}: {v}" for k, v in out.items()))
    return "\n".join(lines)


def _points(r: dict[str, Any], which: str) -> tuple[list[float], list[float]]:
    """(start_s, step time in ms) of a run's clean, fault or failed steps."""
    cols = {c: i for i, c in enumerate(r["step_columns"])}
    ok, fault, t0, t1 = cols["ok"], cols["faults"], cols["start_s"], cols["end_s"]
    keep = {
        "clean": lambda x: x[ok] and not x[fault],
        "fault": lambda x: x[ok] and bool(x[fault]),
        "failed": lambda x: not x[ok],
    }[which]
    rows = [x for x in r["step_log"] if keep(x)]
    return [x[t0] for x in rows], [max(1e-3, (x[t1] - x[t0]) * 1e3) for x in rows]


def _plot_panel(ax: Any, key: str, r: dict[str, Any], settle_s: float) -> None:
    for f in r["fault_log"]:
        end = f["end_s"] if f["end_s"] is not None else f["start_s"]
        ax.axvspan(f["start_s"], end + settle_s, color="tab:red", alpha=0.08, lw=0)
    ax.scatter(*_points(r, "clean"), s=3, c="tab:blue", label="clean step")
    ax.scatter(*_points(r, "fault"), s=5, c="tab:red", label="fault step")
    ax.scatter(*_points(r, "failed"), s=30, c="black", marker="x", label="failed step")
    ax.set_yscale("log")
    ax.set_ylabel("step time, ms")
    ax.set_title(
        f"{TITLES.get(key, key)}: {r['steps']} steps verified, QP errors {r['qp_errors']}, "
        f"failed steps {r['failed_steps']}",
        fontsize=10,
        loc="left",
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=7, markerscale=2)


def plot(doc: dict[str, Any], path: str) -> str:
    """A PNG: per transport, step time against time (log scale), fault steps in red, failed
    steps as black crosses, fault windows (with the settle time) shaded."""
    from mrcnic.optional import agg_pyplot

    plt = agg_pyplot("the soak's plot")

    runs: dict[str, dict[str, Any]] = doc["transports"]
    n = max(1, len(runs))
    fig, axes = plt.subplots(n, 1, figsize=(11, 3.0 * n + 0.6), sharex=True, squeeze=False)
    for ax, (key, r) in zip(axes[:, 0], runs.items(), strict=False):
        _plot_panel(ax, key, r, doc["settle_s"])
    axes[-1, 0].set_xlabel("seconds since the transport's run started (shaded: faults)")
    fig.suptitle(
        f"soak, seed {doc['seed']}: all-reduce step times while links flap, switches reboot, "
        "NIC ports go down and links lose packets",
        fontsize=10,
    )
    fig.tight_layout()
    stamp(fig)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

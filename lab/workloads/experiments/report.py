"""``results/REPORT.md`` from ``results/experiments/*.json``: per claim the paper's figure,
ours for both transports, the plot, the verdict and what the lab's scale changes; and beside
the lab's, the simulated form's (``results/experiments/sim/*.json``, ``--sim``) where it ran.

``metrics`` in an experiment's JSON is ``{"headline": {...}, "mrc": {...}, "rocev2":
{...}}``: the headline names the one figure that answers the claim (``name``, ``unit``,
``mrc``, ``rocev2``, ``paper_mrc``, ``paper_rocev2``); the per-transport dicts hold the BMWG
set where it applies (``jct_s``, ``busbw_gbps``, ``p99_step_s``, ``jain``,
``link_imbalance``, ``ooo_rate``, ``retx_rate``, ``cv``, ...).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from lab.workloads.experiments.base import DEFAULT_OUT

REPORT = Path("results/REPORT.md")


def load_all(out_dir: Path = DEFAULT_OUT) -> list[dict[str, Any]]:
    out = []
    for p in sorted(out_dir.glob("*.json")):
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda d: (d.get("number", 99), d.get("name", "")))


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _metric_table(metrics: dict[str, Any]) -> list[str]:
    m, r = metrics.get("mrc") or {}, metrics.get("rocev2") or {}
    keys = [k for k in dict.fromkeys([*m, *r]) if not isinstance(m.get(k, r.get(k)), dict | list)]
    if not keys:
        return []
    lines = ["| metric | MRC | RoCEv2 |", "|---|---|---|"]
    lines += [f"| {k} | {_fmt(m.get(k))} | {_fmt(r.get(k))} |" for k in keys]
    return lines


def _plot_link(plot: Path, out_dir: Path) -> str:
    """The PNG's path as the report (in results/, or beside the JSON) reaches it."""
    base = REPORT.parent if Path(out_dir) == DEFAULT_OUT else Path(out_dir)
    try:
        return str(plot.relative_to(base))
    except ValueError:
        return plot.name if plot.parent == Path(out_dir) else str(plot)


def _setup_line(s: dict[str, Any]) -> str:
    return (
        f"{s.get('hosts', '-')} hosts, {s.get('planes', '-')} planes, "
        f"{s.get('paths_between_t0s', '-')} paths between T0s, links "
        f"{_fmt(s.get('link_rate_mbit'))} Mb/s, BDP {_fmt(s.get('bdp_packets_per_path'))} "
        f"packets per path, buffer {_fmt(s.get('buffer_packets'))} packets"
    )


def _headline(h: dict[str, Any]) -> str:
    return (
        f"Headline ({h.get('name')}, {h.get('unit', '')}): MRC {_fmt(h.get('mrc'))}, "
        f"RoCEv2 {_fmt(h.get('rocev2'))}"
        + (f"; paper MRC {_fmt(h['paper_mrc'])}" if h.get("paper_mrc") is not None else "")
        + (f", RoCEv2 {_fmt(h['paper_rocev2'])}" if h.get("paper_rocev2") is not None else "")
        + "."
    )


def _sim_section(d: dict[str, Any]) -> list[str]:
    """A claim's simulated form, under its lab form."""
    h = (d.get("metrics") or {}).get("headline") or {}
    s = d.get("setup") or {}
    kind = "quick" if d.get("quick") else "full"
    lines = [
        "",
        f"**Simulated at the paper's proportions ({kind}, "
        f"{time.strftime('%Y-%m-%d', time.gmtime(d.get('started_unix', 0)))}): "
        f"{d.get('verdict')}.** {d.get('why', '')}",
        "",
    ]
    if h:
        lines += [_headline(h), ""]
    lines += _metric_table(d.get("metrics") or {})
    lines += ["", f"**Simulated setup:** {_setup_line(s)}. {s.get('scale_note', '')}"]
    if d.get("commands"):
        lines += ["", "```", *d["commands"], "```"]
    if (d.get("extra") or {}).get("error"):
        lines += ["", f"**Error:** `{d['extra']['error']}`"]
    return lines


def render(
    results: list[dict[str, Any]],
    out_dir: Path = DEFAULT_OUT,
    sims: list[dict[str, Any]] | None = None,
) -> str:
    sim_by = {d.get("name"): d for d in sims or []}
    lines = [
        "# MRC's published claims, reproduced on the namespace lab and in the simulator",
        "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `mrc-lab "
        f"experiment report` from `{out_dir}/*.json` (docs/results/experiments.md says how each is "
        "measured). A claim that does not reproduce is reported as such, with the measured "
        "reason.",
        "",
        "The simulated columns come from each claim's simulated form (`mrc-lab experiment NAME "
        "--sim`: the real QPs over `mrc-sim`'s whole fabric at the paper's proportions, in "
        "virtual time); '-' where a claim has none yet.",
        "",
        "| # | claim | verdict | MRC | RoCEv2 | paper | run | simulated: verdict | MRC | baseline |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in results:
        h = (d.get("metrics") or {}).get("headline") or {}
        unit = h.get("unit", "")
        paper = " / ".join(
            _fmt(h.get(k)) for k in ("paper_mrc", "paper_rocev2") if h.get(k) is not None
        )
        kind = "quick" if d.get("quick") else "full"
        tried = (d.get("extra") or {}).get("cpu_bound_repeats") or []
        if tried:
            kind += f", run {len(tried)} times for CPU-bound runs"
        err = " (ERROR)" if (d.get("extra") or {}).get("error") else ""
        lines.append(
            f"| {d.get('number')} | [{d.get('name')}](#claim-{d.get('number')}) | "
            f"**{d.get('verdict')}**{err} | {_fmt(h.get('mrc'))} {unit} | "
            f"{_fmt(h.get('rocev2'))} {unit} | {paper or '-'} | {kind}, "
            f"{time.strftime('%Y-%m-%d', time.gmtime(d.get('started_unix', 0)))} | "
            + _sim_cells(sim_by.get(d.get("name")))
        )
    for d in results:
        s = d.get("setup") or {}
        lines += [
            "",
            f'<a id="claim-{d.get("number")}"></a>',
            f"## {d.get('number')}. {d.get('name')}: {d.get('claim')}",
            "",
            f"**Paper:** {(d.get('paper') or {}).get('text', '-')}",
            "",
            f"**Verdict: {d.get('verdict')}.** {d.get('why', '')}",
            "",
        ]
        h = (d.get("metrics") or {}).get("headline")
        if h:
            lines += [_headline(h), ""]
        lines += _metric_table(d.get("metrics") or {})
        if d.get("plot"):
            lines += ["", f"![{d.get('name')}]({_plot_link(Path(d['plot']), out_dir)})"]
        lines += [
            "",
            f"**Setup:** {_setup_line(s)}, "
            f"{s.get('switch', '-')} switches{', PFC' if s.get('pfc') else ''}; the paper's "
            f"scale: {json.dumps(s.get('paper_scale', {}))}. "
            f"{s.get('scale_note', '')}",
        ]
        if d.get("commands"):
            lines += ["", "```", *d["commands"], "```"]
        if (d.get("extra") or {}).get("error"):
            lines += ["", f"**Error:** `{d['extra']['error']}`"]
        tried = (d.get("extra") or {}).get("cpu_bound_repeats") or []
        if tried:
            steps = "; ".join(f"{t['rate_mbit']:g} Mb/s: {t['cpu_bound_runs']} CPU-bound run(s), "
                              f"{t['verdict']}{' (this verdict)' if t.get('chosen') else ''}"
                              for t in tried)  # fmt: skip
            lines += ["", f"**Run again for CPU-bound runs:** {steps}."]
        if d.get("name") in sim_by:
            lines += _sim_section(sim_by[d["name"]])
    return "\n".join(lines) + "\n"


def _sim_cells(d: dict[str, Any] | None) -> str:
    if d is None:
        return "- | - | - |"
    h = (d.get("metrics") or {}).get("headline") or {}
    unit = h.get("unit", "")
    err = " (ERROR)" if (d.get("extra") or {}).get("error") else ""
    return (
        f"**{d.get('verdict')}**{err} | {_fmt(h.get('mrc'))} {unit} | "
        f"{_fmt(h.get('rocev2'))} {unit} |"
    )


def write(out_dir: Path = DEFAULT_OUT, path: Path | None = None) -> Path:
    """Write the report: results/REPORT.md for the default results, else REPORT.md beside
    the JSON files (a test's or a user's own directory never overwrites the project's)."""
    if path is None:
        path = REPORT if Path(out_dir) == DEFAULT_OUT else Path(out_dir) / "REPORT.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(load_all(out_dir), out_dir, load_all(Path(out_dir) / "sim")))
    return path

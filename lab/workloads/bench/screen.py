"""mrc-bench's screens of the pair tests (write, lat) and the collectives (all-reduce,
all-to-all): perftest's and nccl-tests' tables under one header, the verification and CPU
lines."""

from __future__ import annotations

from typing import Any

from lab.proc import cpu

_LINE = "-" * 94


def bytes_rate_unit(*bps: float) -> tuple[str, float]:
    """The unit nccl-tests and perftest print bandwidth in (bytes per second, decimal:
    GB/s = 1e9 bytes/s), or MB/s when every value is below 1 GB/s, as at lab rates: -> (name,
    bits per unit). Bits would be an 8x trap beside a real nccl-tests or perftest log."""
    if max(bps, default=0.0) >= 8e9:
        return "GB/s", 8e9
    return "MB/s", 8e6


def nccl_bw(bps: float) -> str:
    """A bandwidth as nccl-tests prints algbw and busbw: GB/s (1e9 bytes/s) always, whatever
    the magnitude, so a lab's figures sit beside a real log's; below 1 GB/s (lab rates) with
    five decimals instead of two, so they are not all 0.00."""
    v = bps / 8e9
    return f"{v:.2f}" if v >= 1 else f"{v:.5f}"


def msg_rate_unit(pps: float) -> tuple[str, float]:
    """perftest's Mpps, or kpps below 0.01 Mpps (lab rates): -> (name, packets per unit)."""
    return ("Mpps", 1e6) if pps >= 1e4 else ("kpps", 1e3)


def _cpu_line(res: dict[str, Any], sides: str) -> str:
    parts = [f" CPU (% of one core): {sides}"]
    if res.get("switch_cpu_percent") is not None:
        parts.append(f"switches {res['switch_cpu_percent']:.0f}")
    if res.get("machine_cpu_percent") is not None:
        parts.append(f"machine {res['machine_cpu_percent']:.0f}% of {res.get('cpus')} CPUs busy")
    return "   ".join(parts)


def _header(res: dict[str, Any], title: str) -> list[str]:
    mode = res["switch_mode"]
    return [
        _LINE,
        f"{title:^94}",
        f" lab {res['lab']}: {res['planes']} planes x {res['port_rate_bps'] / 1e6:g} Mb/s, {mode} switches"
        f"   transport {res['transport']}",
    ]


def _verify_line(res: dict[str, Any]) -> str:
    if res["verified"]:
        v = res.get("verify", {})
        region = v.get("region_bytes")
        how = f"{region} B region compared byte for byte" if region else "checked"
        text = f"yes ({how})"
    else:
        text = "NO"
    return f" verified: {text}   QP errors: {res['qp_errors']}"


def format_pair(res: dict[str, Any], report_gbits: bool = False) -> str:
    """perftest's screen; ``report_gbits``: bandwidth in Gb/sec (perftest's --report_gbits)."""
    lat = res["test"] == "lat"
    where = "same T0" if res["same_t0"] else "another T0"
    title = "RDMA_Write Latency Test (mrc-bench)" if lat else "RDMA_Write BW Test (mrc-bench)"
    out = _header(res, title)
    out.append(
        f" {res['src']} -> {res['dst']} ({where})   QPs {res['qps']}   outstanding {res['depth']}"
        f"   capacity {res['capacity_bps'] / 1e6:.1f} Mb/s"
    )
    out.append(_LINE)
    if lat:
        lu = res.get("latency_us", {})
        out.append(
            f" {'#bytes':<8}{'#iterations':<13}{'t_min[usec]':>12}{'t_max[usec]':>12}{'t_typical[usec]':>16}"
            f"{'t_avg[usec]':>12}{'t_stdev[usec]':>14}{'99% percentile[usec]':>22}{'99.9% percentile[usec]':>24}"
        )
        if lu:
            out.append(
                f" {res['size']:<8}{res['iterations']:<13}{lu['t_min']:>12.2f}{lu['t_max']:>12.2f}"
                f"{lu['t_typical']:>16.2f}{lu['t_avg']:>12.2f}{lu['t_stdev']:>14.2f}{lu['p99']:>22.2f}"
                f"{lu['p99_9']:>24.2f}"
            )
    else:
        bw, per = (
            ("Gb/s", 1e9) if report_gbits else bytes_rate_unit(res["peak_bps"], res["goodput_bps"])
        )
        rate, pper = msg_rate_unit(res["msg_rate_pps"])
        bw_u = bw.replace("/s", "/sec")  # perftest's spelling
        out.append(
            f" {'#bytes':<10}{'#iterations':<14}{f'BW peak[{bw_u}]':<17}{f'BW average[{bw_u}]':<20}"
            f"{f'MsgRate[{rate}]':<14}"
        )
        out.append(
            f" {res['size']:<10}{res['iterations']:<14}{res['peak_bps'] / per:<17.3f}"
            f"{res['goodput_bps'] / per:<20.3f}{res['msg_rate_pps'] / pper:<14.3f}"
        )
    out.append(_LINE)
    if not lat:
        out.append(
            f" goodput {res['goodput_bps'] / 1e6:.1f} Mb/s = {res['goodput_fraction']:.3f} of capacity"
            f" in {res['duration_s']:.2f} s   retransmissions {res['retransmissions']}"
            f"   timeouts {res['timeouts']}"
        )
    out.append(_verify_line(res))
    for e in res.get("errors", [])[:5]:
        out.append(f"   error: {e}")
    out.append(
        _cpu_line(
            res,
            f"client {res['cpu_percent_client'] or 0:.0f}   server {res['cpu_percent_server'] or 0:.0f}",
        )
    )
    if warn := cpu.cpu_warning(res):
        out.append(warn)
    return "\n".join(out)


def format_allreduce(res: dict[str, Any]) -> str:
    out = _header(res, "Ring all-reduce (mrc-bench, reduce-scatter + all-gather)")
    out.append(
        f" ranks {res['ranks']}: {','.join(res['hosts'])}   capacity per NIC {res['capacity_bps'] / 1e6:.1f} Mb/s"
    )
    out.append(_LINE)
    out.append(
        f" {'size(B)':>12}{'count':>12}{'type':>8}{'redop':>7}{'time(us)':>12}{'algbw(GB/s)':>13}"
        f"{'busbw(GB/s)':>13}{'#wrong':>8}"
    )
    wrong = 0 if res["verified"] else "yes"
    out.append(
        f" {res['size']:>12}{res['elements']:>12}{res['type']:>8}{res['redop']:>7}"
        f"{res['time_s'] * 1e6:>12.0f}{nccl_bw(res['algbw_bps']):>13}{nccl_bw(res['busbw_bps']):>13}{wrong!s:>8}"
    )
    out.append(_LINE)
    out.append(
        f" busbw = {res['goodput_fraction']:.3f} of capacity   iterations {res['iterations']}"
        f"   retransmissions {res['retransmissions']}   timeouts {res['timeouts']}"
    )
    steps = ", ".join(
        f"{name.replace('reduce-scatter', 'RS').replace('all-gather', 'AG')} {t * 1e3:.2f}"
        for name, t in zip(res["step_names"], res["step_times_s"], strict=False)
    )
    out.append(f" step times (ms, slowest rank, mean over iterations): {steps}")
    out.append(_verify_line(res))
    for e in res.get("errors", [])[:5]:
        out.append(f"   error: {e}")
    ranks = "  ".join(f"r{i} {c or 0:.0f}" for i, c in enumerate(res["cpu_percent_ranks"]))
    out.append(_cpu_line(res, ranks))
    if warn := cpu.cpu_warning(res):
        out.append(warn)
    return "\n".join(out)


def format_alltoall(res: dict[str, Any]) -> str:
    """nccl-tests' table, one line per size, under mrc-bench's header."""
    out = _header(res, "All-to-all (mrc-bench, one write per peer)")
    out.append(
        f" ranks {res['ranks']}: {','.join(res['hosts'])}   QPs per rank {res['qps_per_rank']}"
        f"   capacity per NIC {res['capacity_bps'] / 1e6:.1f} Mb/s"
    )
    out.append(_LINE)
    out.append(
        f" {'size(B)':>12}{'count':>12}{'type':>8}{'redop':>7}{'time(us)':>12}{'algbw(GB/s)':>13}"
        f"{'busbw(GB/s)':>13}{'#wrong':>8}"
    )
    for r in res["rows"]:
        wrong = 0 if r["verified"] else "yes"
        out.append(
            f" {r['size']:>12}{r['elements']:>12}{res['type']:>8}{res['redop']:>7}"
            f"{r['time_s'] * 1e6:>12.0f}{nccl_bw(r['algbw_bps']):>13}"
            f"{nccl_bw(r['busbw_bps']):>13}{wrong!s:>8}"
        )
    out.append(_LINE)
    out.append(
        f" Avg bus bandwidth {nccl_bw(res['avg_busbw_bps'])} GB/s   largest size: busbw = "
        f"{res['goodput_fraction']:.3f} of capacity   retransmissions {res['retransmissions']}"
        f"   timeouts {res['timeouts']}"
    )
    out.append(_verify_line(res))
    for e in res.get("errors", [])[:5]:
        out.append(f"   error: {e}")
    ranks = "  ".join(f"r{i} {c or 0:.0f}" for i, c in enumerate(res["cpu_percent_ranks"]))
    out.append(_cpu_line(res, ranks))
    if warn := cpu.cpu_warning(res):
        out.append(warn)
    return "\n".join(out)

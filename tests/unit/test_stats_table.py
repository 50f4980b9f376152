"""`mrc-lab stats` of a python switch: a table per port and a total, not the raw file
(`--json` keeps the whole document)."""

from __future__ import annotations

from lab.fabric.status import format_stats


def _port(**kw):
    base = {"interface": "mrc-d0", "peer": "h0", "up": True, "rx_packets": 10, "rx_bytes": 42_000,
            "rx_socket_drops": 0, "tx_packets": 9, "tx_bytes": 37_800, "queue_bytes": 0,
            "queue_packets": 0, "max_queue_bytes": 8400, "ecn_marks": 2, "trims": 1,
            "drops": {"not_my_mac": 0, "no_route": 3}, "drops_total": 3}  # fmt: skip
    base.update(kw)
    return base


def test_stats_table_has_a_row_per_port_and_the_totals() -> None:
    ports = {"d0": _port(), "u1": _port(peer="p0-t1-1", up=False, drops={}, drops_total=0)}
    st = {"pid": 42, "uptime_s": 12.0, "table_entries": 4, "cpu_user_s": 0.5,
          "cpu_system_s": 0.25, "ports": ports,
          "totals": {"rx_packets": 20, "tx_packets": 18, "tx_bytes": 75_600, "ecn_marks": 4,
                     "trims": 2, "drops": {"no_route": 3}, "drops_total": 3}}  # fmt: skip
    text = format_stats({"node": "p0-t0-0", "source": "mrc-switch", "stats": st})
    lines = text.splitlines()
    assert lines[0].startswith("p0-t0-0 (mrc-switch pid 42, up 12 s, 4 routes, CPU 0.8 s")
    assert "--json" in lines[0] and "{" not in text  # no raw JSON dumped
    d0 = next(ln for ln in lines if ln.split()[:1] == ["d0"])
    assert "h0" in d0 and " up " in d0 and "no_route 3" in d0
    u1 = next(ln for ln in lines if ln.split()[:1] == ["u1"])
    assert "DOWN" in u1
    total = next(ln for ln in lines if ln.split()[:1] == ["total"])
    assert "75600" in total and "no_route 3" in total
    assert len(lines) == 5  # header, column names, two ports, total

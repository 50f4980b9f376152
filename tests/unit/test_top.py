"""mrc-lab top without a lab: rates, rows, order, faults and the rendered frame from synthetic
stats files and NIC documents; what a NIC publishes (lab/fabric/nicstats.py) from QPs over the
simulated fabric."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import time

import pytest
import waiting as W

from lab.fabric import nicstats
from lab.views import top as T
from mrcnic.verbs import RemoteBuffer, SimNetwork

DROPS = ("malformed", "port_down", "queue_full", "no_route")


def port_doc(peer: str, *, up: bool = True, tx: int = 0, trims: int = 0, ecn: int = 0,
             drops: dict[str, int] | None = None, queue: int = 0) -> dict:  # fmt: skip
    d = {k: 0 for k in DROPS}
    d.update(drops or {})
    return {"interface": "x", "peer": peer, "up": up, "tx_bytes": tx, "tx_packets": tx // 4000,
            "queue_bytes": queue, "ecn_marks": ecn, "trims": trims, "drops": d,
            "drops_total": sum(d.values())}  # fmt: skip


def switch_doc(t: float, ports: dict[str, dict], ready: bool = True) -> dict:
    return {"name": "sw", "pid": 1, "ready": ready, "updated_unix": t, "ports": ports}


def two_samples() -> tuple[dict, dict]:
    """Four switches, two samples 0.5 s apart: a T0 downlink trimming, an uplink taken down,
    a T1 stopped (rebooting)."""
    a = {
        "p0-t0-0": switch_doc(100.0, {
            "d0": port_doc("h0", tx=1_000_000, trims=10, ecn=4, queue=49152),
            "u0": port_doc("p0-t1-0", tx=500_000),
            "u1": port_doc("p0-t1-1", tx=500_000),
        }),
        "p0-t0-1": switch_doc(100.1, {"d0": port_doc("h1", tx=0)}),
        "p0-t1-0": switch_doc(100.2, {"d0": port_doc("p0-t0-0", tx=200_000)}),
        "p0-t1-1": None,
    }  # fmt: skip
    b = copy.deepcopy(a)
    b["p0-t0-0"]["updated_unix"] = 100.5
    d0 = b["p0-t0-0"]["ports"]["d0"]
    d0.update(tx_bytes=1_625_000, trims=30, ecn_marks=9)  # 10 Mb/s, 40 trims/s, 10 marks/s
    u1 = b["p0-t0-0"]["ports"]["u1"]
    u1.update(up=False, drops={**u1["drops"], "port_down": 7}, drops_total=7)
    b["p0-t0-1"]["updated_unix"] = 100.6
    b["p0-t1-0"]["updated_unix"] = 100.7
    b["p0-t1-0"]["ports"]["d0"]["tx_bytes"] = 262_500  # 1 Mb/s
    return a, b


def nic_doc(now: float, host: str = "h1", pid: int | None = None, tx: int = 0) -> dict:
    return {
        "version": 1, "pid": pid or os.getpid(), "lab": "mrct", "host": host,
        "argv": ["write", "--client", "h0"], "updated_unix": now, "interval_s": 0.5,
        "planes": 2,
        "qps": [
            {"qpn": 0x11, "transport": "mrc", "state": "READY", "peer_host": "h0",
             "peer_qpn": 0x12, "ev_states": {"GOOD": 120, "SKIP": 2, "ASSUMED_BAD": 6, "DENIED": 0},
             "ev_planes": [[58, 0, 6, 0], [62, 2, 0, 0]], "cwnd_bytes": 9216.0,
             "srtt_s": 0.0305, "rto_s": 0.1, "retransmissions": 25, "timeouts": 19,
             "tx_data_bytes": tx, "tx_data_packets": tx // 4096, "rx_placed_bytes": 0,
             "rx_trimmed": 0, "rx_ecn_marked": 0, "rate_bps": None},
            {"qpn": 0x21, "transport": "rocev2", "state": "READY", "peer_host": "h0",
             "peer_qpn": 0x22, "ev_states": {"GOOD": 1, "SKIP": 0, "ASSUMED_BAD": 0, "DENIED": 0},
             "ev_planes": [[0, 0, 0, 0], [1, 0, 0, 0]], "cwnd_bytes": 65536.0, "srtt_s": 0.0,
             "rto_s": 0.5, "retransmissions": 0, "timeouts": 0, "tx_data_bytes": 0,
             "tx_data_packets": 0, "rx_placed_bytes": 0, "rx_trimmed": 0, "rx_ecn_marked": 0,
             "rate_bps": 5e6},
        ],
    }  # fmt: skip


NO_FAULTS = T.Faults(read_unix=100.3)


def frame(ports: list[T.PortRow], qps: list[T.QpRow], faults: T.Faults | None = NO_FAULTS,
          now: float = 100.7) -> T.Frame:  # fmt: skip
    return T.Frame("mrct1", "python", 2, 10.0, 4, now, 0.5, ports, qps, 1, faults)


# --- rates and rows ---------------------------------------------------------------------------


def test_rates_from_samples() -> None:
    r = T.Rates()
    assert r.update("k", 1.0, 100) is None  # one sample: no rate yet
    assert r.update("k", 1.5, 150) == pytest.approx(100.0)
    assert r.update("k", 1.5, 150) == pytest.approx(100.0)  # file not rewritten: same rate
    assert r.update("k", 2.0, 10) is None  # the counter went down: a restarted switch
    assert r.update("k", 2.5, 60) == pytest.approx(100.0)
    assert r.update("k", None, 60) is None
    r.forget_missing([])
    assert r.update("k", 3.0, 100) is None


def test_switch_port_rows_rates_and_order() -> None:
    a, b = two_samples()
    rates = T.Rates()
    T.switch_port_rows(a, rates)
    rows = T.switch_port_rows(b, rates)
    by = {(r.switch, r.port): r for r in rows}
    d0 = by[("p0-t0-0", "d0")]
    assert d0.tx_bps == pytest.approx(10e6)
    assert d0.trims == 30 and d0.trims_rate == pytest.approx(40.0)
    assert d0.ecn_rate == pytest.approx(10.0) and d0.queue_bytes == 49152
    u1 = by[("p0-t0-0", "u1")]
    assert u1.up is False and u1.drops == {"port_down": 7} and u1.drops_rate == pytest.approx(14)
    assert by[("p0-t1-0", "d0")].tx_bps == pytest.approx(1e6)
    assert by[("p0-t1-1", "-")].running is False
    order = [(r.switch, r.port) for r in sorted(rows, key=T.PortRow.order)]
    # a switch down, then a port down, then the port trimming now, then by rate
    assert order[:4] == [("p0-t1-1", "-"), ("p0-t0-0", "u1"), ("p0-t0-0", "d0"), ("p0-t1-0", "d0")]
    t = T.totals(rows)
    assert t.trims == 30 and t.ports_down == 1 and t.switches_down == 1
    assert t.drops == {"port_down": 7} and t.pauses is None


def test_pfc_pauses_summed_when_the_switch_has_pfc() -> None:
    a, b = two_samples()
    for doc, n in ((a, 2), (b, 5)):
        doc["p0-t0-0"]["ports"]["u0"]["pfc"] = {"pause_tx": n, "pause_rx": 1}
    rates = T.Rates()
    T.switch_port_rows(a, rates)
    rows = T.switch_port_rows(b, rates)
    u0 = next(r for r in rows if (r.switch, r.port) == ("p0-t0-0", "u0"))
    assert u0.pauses == 6 and u0.pauses_rate == pytest.approx(6.0)
    assert T.totals(rows).pauses == 6
    text = T.render_text(frame(rows, []), 100)
    assert "PAUSES" in text and "PFC pauses 6" in text


def test_kernel_rows() -> None:
    rates = T.Rates()
    ports = {"p0-t0-0": {"u0": {"peer": "p0-t1-0", "up": True, "tx_bytes": 0, "qdisc_drops": 0,
                                "qdisc_backlog_bytes": 0}}}  # fmt: skip
    T.kernel_port_rows(ports, 10.0, rates)
    ports["p0-t0-0"]["u0"].update(tx_bytes=2_500_000, qdisc_drops=3)
    (row,) = T.kernel_port_rows(ports, 12.0, rates)
    assert row.tx_bps == pytest.approx(10e6) and row.drops == {"qdisc": 3} and row.trims is None


def test_qp_rows_and_plane_strip() -> None:
    now = time.time()
    rates = T.Rates()
    T.qp_rows([nic_doc(now - 0.5, tx=0)], rates, now - 0.5)
    rows = T.qp_rows([nic_doc(now, tx=1_250_000)], rates, now)
    mrc, roce = rows
    assert mrc.tx_bps == pytest.approx(20e6) and mrc.test == "write" and mrc.peer == "h0"
    assert T.plane_strip(mrc.ev_planes) == "Bs"
    assert T.plane_strip(roce.ev_planes) == "-."
    assert T.plane_strip([[1, 0, 0, 1], [4, 0, 0, 0]]) == "D."
    assert sorted(rows, key=T.QpRow.order)[0] is mrc  # EVs not GOOD first
    old = T.qp_rows([nic_doc(now - 10)], T.Rates(), now)
    assert old[0].stale


def test_faults_from_status() -> None:
    st = {
        "nodes": [{"name": "p0-t1-1", "kind": "t1", "up": False},
                  {"name": "p0-t0-0", "kind": "t0", "up": True},
                  {"name": "h0", "kind": "host", "up": True}],
        "links": [
            {"a": "p0-t0-0", "b": "p0-t1-0", "state": "down", "faults": [],
             "a_end": {"admin": "up"}, "b_end": {"admin": "down"}},
            {"a": "h0", "b": "p0-t0-0", "state": "up", "faults": ["loss", "shaped 5mbit"],
             "a_end": {"admin": "up"}, "b_end": {"admin": "up"}},
            {"a": "h1", "b": "p1-t0-0", "state": "down", "faults": [],
             "a_end": {"admin": "up"}, "b_end": {"admin": "up"}},
        ],
    }  # fmt: skip
    f = T.faults_from_status(st)
    assert f.switches_down == ["p0-t1-1"]
    assert f.links_down == ["p0-t0-0 -- p0-t1-0 (p0-t1-0 admin down)", "h1 -- p1-t0-0 (no carrier)"]
    assert f.loss == ["h0 -- p0-t0-0"] and f.shaped == ["h0 -- p0-t0-0 5mbit"]
    assert f.count == 5
    assert f.items()[0] == "switch DOWN p0-t1-1"


# --- the screen -------------------------------------------------------------------------------


def rows_for_screen() -> tuple[list[T.PortRow], list[T.QpRow]]:
    a, b = two_samples()
    rates = T.Rates()
    T.switch_port_rows(a, rates)
    ports = T.switch_port_rows(b, rates)
    # many quiet ports, so that the screen has to cut
    ports += [T.PortRow(f"p1-t0-{i}", f"d{k}", f"h{k}") for i in range(4) for k in range(4)]
    now = time.time()
    qr = T.Rates()
    T.qp_rows([nic_doc(now - 0.5)], qr, now - 0.5)
    qps = T.qp_rows([nic_doc(now, tx=1_250_000)], qr, now)
    qps += T.qp_rows([nic_doc(now, host=f"h{i}", pid=10_000 + i) for i in range(2, 6)], qr, now)
    return ports, qps


def test_render_fits_80x24_and_shows_what_matters() -> None:
    ports, qps = rows_for_screen()
    faults = T.Faults(links_down=["p0-t0-0 -- p0-t1-1 (p0-t1-1 admin down)"], read_unix=100.3)
    text = T.render_text(frame(ports, qps, faults), 80, 24)
    lines = text.splitlines()
    assert len(lines) <= 24, text
    assert all(len(ln) <= 80 for ln in lines), text
    assert "lab mrct1: python switches, 2 planes x 10 Mb/s" in lines[0]
    assert "FAULTS  1" in text and "link DOWN p0-t0-0 -- p0-t1-1" in text
    assert "switch not running" in text  # the stopped T1, first
    assert lines[4].startswith("p0-t1-1") and "stopped DOWN" in lines[4]
    assert "p0-t0-0 u1" in text and "DOWN" in text
    row = next(ln for ln in lines if ln.startswith("p0-t0-0 d0"))
    assert " 30 +40 " in row and "10.0" in row and " 9 +10 " in row  # trims, ECN, 10 Mb/s
    assert "more ports" in text
    assert "trims 30 +40/s" in text and "drops 7 +14/s port_down" in text
    assert "DOWN: 1 port, 1 switch" in text
    qrow = next(ln for ln in lines if ln.startswith(f"h1 {os.getpid()}"))
    assert "0x11" in qrow and " Bs " in qrow and "120/2/6/0" in qrow and "30.5" in qrow
    for head in ("SWITCH PORT", "TRIMS", "DROPS", "PLANES", "G/S/B/D", "CWND KiB", "RTT ms"):
        assert head in text, head


def test_render_larger_terminal_shows_more_and_no_limit_shows_all() -> None:
    ports, qps = rows_for_screen()
    small = T.render_text(frame(ports, qps), 80, 24)
    big = T.render_text(frame(ports, qps), 140, 50)
    full = T.render_text(frame(ports, qps), 120, None)
    assert len(big.splitlines()) > len(small.splitlines())
    assert len(big.splitlines()) <= 50
    assert "more" not in full
    assert sum(1 for ln in full.splitlines() if ln.startswith(("p0-", "p1-"))) == len(ports)


def test_render_with_nothing_running() -> None:
    text = T.render_text(frame([], [], None), 80, 24)
    assert "FAULTS  (reading" in text and "no NIC process is publishing" in text
    text = T.render_text(frame([], [], T.Faults(read_unix=100.0)), 80, 24)
    assert "FAULTS  none" in text
    text = T.render_text(frame([], [], T.Faults(error="boom")), 80, 24)
    assert "could not read: boom" in text


def test_many_faults_are_cut() -> None:
    f = T.Faults(links_down=[f"p0-t0-{i} -- p0-t1-0 (p0-t1-0 admin down)" for i in range(20)],
                 read_unix=100.0)  # fmt: skip
    lines = T.fault_lines(frame([], [], f), 80, 2)
    assert len(lines) == 2 and "20 faults in all" in lines[-1]


def test_layout_rows() -> None:
    assert T.layout_rows(None, 50, 9, 12) == (50, 9)
    p, q = T.layout_rows(24, 50, 9, 12)
    assert p + q == 12 and q >= 2 and p >= 1
    assert T.layout_rows(24, 3, 0, 12) == (3, 0)
    assert T.layout_rows(60, 4, 30, 12) == (4, 30)  # room the ports leave goes to the QPs
    assert T.layout_rows(60, 80, 2, 12) == (46, 2)


def test_pack() -> None:
    assert T.pack(["aaaa", "bbbb", "cccc"], 10) == ["aaaa  bbbb", "  cccc"]
    assert T.pack(["x" * 30], 10) == ["x" * 10]


def test_read_nic_docs_skips_dead_processes(tmp_path) -> None:
    d = nicstats.nics_dir(tmp_path)
    d.mkdir()
    (d / "h1-1.json").write_text(json.dumps(nic_doc(time.time())))
    (d / "h2-2.json").write_text(json.dumps(nic_doc(time.time(), pid=2**22 + 12345)))
    (d / "h3-3.json").write_text("{half")
    docs = T.read_nic_docs(tmp_path)
    assert [x["host"] for x in docs] == ["h1"]
    assert T.read_nic_docs(tmp_path / "nope") == []


def test_rich_is_imported_only_to_draw() -> None:
    import subprocess
    import sys

    code = "import sys, lab.views.top, lab.cli, lab.fabric.nicstats; print('rich' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_cli_has_top() -> None:
    from lab.cli import COMMANDS, build_parser

    a = build_parser().parse_args(["top", "--name", "mrct1", "--once", "--interval", "250ms"])
    assert a.cmd == "top" and a.once and a.interval == 0.25 and a.faults_s == 1.0
    assert "top" in COMMANDS


# --- the publishing side ----------------------------------------------------------------------


def connected_pair():
    net = SimNetwork()
    a, b = net.devices
    qa, qb = a.create_qp(), b.create_qp()
    qa.connect(qb.export())
    qb.connect(qa.export())
    return net, a, b, qa, qb


def test_qp_row_from_real_qps() -> None:
    net, a, b, qa, qb = connected_pair()
    rb = RemoteBuffer.of(b.register(bytearray(1 << 16)))
    qa.post_write(1, b"\x07" * 60_000, rb)
    net.run_until(lambda: bool(qa.poll_cq()), 5.0)
    planes = 2
    ev = next(iter(qa.ev_statuses()))
    qa.deny_ev(ev)
    row = nicstats.qp_row(qa, planes)
    assert row["transport"] == "mrc" and row["state"] == "READY"
    assert row["peer_host"] == "h1" and row["peer_qpn"] == qb.qpn
    assert row["tx_data_bytes"] >= 60_000 and row["cwnd_bytes"] > 0 and row["srtt_s"] > 0
    assert sum(map(sum, row["ev_planes"])) == sum(row["ev_states"].values())
    assert row["ev_states"] == qa.ev_states()  # the totals QP.ev_states() gives
    assert row["ev_states"]["DENIED"] == 1
    assert sum(r[3] for r in row["ev_planes"]) == 1
    json.dumps(row)


def test_qp_row_rocev2_one_plane() -> None:
    from mrcnic.transport.qp_types import QpConfig

    net = SimNetwork()
    a, _b = net.devices
    q = a.create_qp(QpConfig(cc_options=(("port", 1),)), "rocev2")
    row = nicstats.qp_row(q, 2)
    assert row["ev_planes"] == [[0, 0, 0, 0], [1, 0, 0, 0]] and row["transport"] == "rocev2"
    assert row["peer_host"] is None


def test_publisher_writes_atomically_then_removes(tmp_path) -> None:
    net, a, _b, _qa, _qb = connected_pair()
    path = tmp_path / "h0-1.json"

    async def main() -> dict:
        pub = nicstats.NicPublisher(path, a, None, {"pid": 1, "host": "h0"}, 2, interval_s=0.05)
        pub.start(asyncio.get_running_loop())
        # a few publishes, and the writer thread (behind the loop by a moment) wrote one
        await W.wait_for_async(lambda: pub.publishes >= 4 and path.exists(), 10, 0.01,
                               what="4 publishes and the file")  # fmt: skip
        doc = json.loads(path.read_text())
        n = pub.publishes
        pub.close()
        assert not path.exists()
        assert n >= 4
        return doc

    doc = asyncio.run(main())
    assert doc["version"] == 1 and doc["host"] == "h0" and len(doc["qps"]) == 1
    assert doc["publish_cost_us"] is not None and doc["publish_cost_us"] < 50_000
    assert not list(tmp_path.glob("*.tmp.*"))


def test_publishing_nic_off_without_a_run_dir(tmp_path, monkeypatch) -> None:
    """No run directory (the lab is down) or MRC_NIC_PUBLISH=0: nothing is written."""

    class FakeLoopNic(nicstats.PublishingNic):
        def __init__(self, publish):  # no sockets: only the publishing half
            self._publish = publish
            self.publisher = None
            self.device = None
            self._loop = None

    monkeypatch.setattr(nicstats.AioNic, "open", lambda self: None)
    nic = FakeLoopNic({"run_dir": str(tmp_path / "gone"), "host": "h0", "planes": 2})
    nic.open()
    assert nic.publisher is None and not (tmp_path / "gone").exists()
    monkeypatch.setenv("MRC_NIC_PUBLISH", "0")
    nic._publish = {"run_dir": str(tmp_path), "host": "h0", "planes": 2}
    nic.open()
    assert nic.publisher is None and not (tmp_path / "nics").exists()


def test_render_kernel_switches() -> None:
    rates = T.Rates()
    ports = {"p0-t0-0": {"u0": {"peer": "p0-t1-0", "up": False, "tx_bytes": 0, "qdisc_drops": 2,
                                "qdisc_backlog_bytes": 4200}}}  # fmt: skip
    rows = T.kernel_port_rows(ports, 1.0, rates)
    fr = T.Frame("mrct1", "kernel", 2, 10.0, 4, 2.0, 0.5, rows, [], 0, NO_FAULTS)
    text = T.render_text(fr, 80, 24)
    assert "counters from ip -s link and tc" in text and "TRIMS" not in text
    row = next(ln for ln in text.splitlines() if ln.startswith("p0-t0-0 u0"))
    assert "DOWN" in row and "2 qdisc" in row
    assert "ALL PORTS  tx 0.0 Mb/s  drops 2 qdisc" in text


def test_publisher_stops_when_the_lab_goes(tmp_path) -> None:
    net, a, _b, _qa, _qb = connected_pair()
    d = tmp_path / "nics"
    d.mkdir()

    async def main() -> nicstats.NicPublisher:
        pub = nicstats.NicPublisher(d / "h0-1.json", a, None, {"pid": 1}, 2, interval_s=0.02)
        pub.start(asyncio.get_running_loop())
        await W.wait_for_async(lambda: pub.publishes >= 1, 10, 0.01, what="a publish")
        pub.close()  # what mrc-lab down's rmtree leaves: no directory
        (d / "h0-1.json").unlink(missing_ok=True)
        d.rmdir()
        pub2 = nicstats.NicPublisher(tmp_path / "gone" / "x.json", a, None, {}, 2, 0.02)
        pub2._loop = asyncio.get_running_loop()
        pub2._tick()
        return pub2

    pub2 = asyncio.run(main())
    assert pub2._closed and pub2.publishes == 0

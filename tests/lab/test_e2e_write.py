"""End to end on real sockets: the asyncio NIC (mrcnic.io.aio) on both hosts of a small lab of
python switches, RDMA Writes across T0-T1-T0, with faults injected mid-transfer.

Lab: 2 planes x (2 T0 + 2 T1), one host per T0, so h0 -> h1 crosses a T1 on every path (4
paths). Both NICs run in this process, each with its sockets in its host's namespace, on one
uvloop loop; faults run in a thread (they are blocking commands) while the loop carries on.
The last tests drive the mrc-bench CLI (two processes in the hosts' namespaces).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import commands as C
import lab_helpers as H
import pytest

from lab.fabric.faults import Faults
from lab.fabric.host import LabHost
from mrcnic.io.aio import run
from mrcnic.transport.qp_types import QpErrorEvent, QpState
from mrcnic.verbs import RemoteBuffer, WcStatus

SIZE = 8 << 20
CHUNK = 256 << 10


@pytest.fixture(scope="module")
def elab():
    with H.running_lab(switch="python") as st:
        yield st


def pattern(n: int, salt: int) -> bytes:
    import random

    return random.Random(salt).randbytes(n)


def _qp_pair(a: LabHost, b: LabHost, cfg_a=None, cfg_b=None):
    """A QP on each host, connected to each other (default QP configs unless given)."""
    qa = a.device.create_qp(cfg_a if cfg_a is not None else a.qp_config())
    qb = b.device.create_qp(cfg_b if cfg_b is not None else b.qp_config())
    qa.connect(qb.export())
    qb.connect(qa.export())
    return qa, qb


async def _transfer(st, fault=None, after_bytes: int = CHUNK, size: int = SIZE, seed: int = 1):
    """h0 writes ``size`` bytes into h1 in CHUNK writes (all posted at once); ``fault`` (a
    blocking callable) runs in a thread once ``after_bytes`` have completed."""
    a, b = LabHost.from_state(st, "h0", seed=seed), LabHost.from_state(st, "h1", seed=seed + 1)
    async with a.nic() as na, b.nic():
        qa, qb = _qp_pair(a, b, a.qp_config(seed=seed), b.qp_config(seed=seed + 7))
        target = bytearray(size)
        rb = RemoteBuffer.of(b.device.register(target))
        src = pattern(size, seed)
        view = memoryview(src)
        for k, off in enumerate(range(0, size, CHUNK)):
            qa.post_write(k, view[off : off + CHUNK], rb, offset=off)
        wcs = []
        fault_task = None
        t0 = time.monotonic()

        def progress() -> bool:
            nonlocal fault_task
            wcs.extend(qa.poll_cq(256))
            if fault is not None and fault_task is None and len(wcs) * CHUNK >= after_bytes:
                fault_task = asyncio.ensure_future(asyncio.to_thread(fault))
            return len(wcs) == size // CHUNK

        ok = await na.wait_for(progress, 60)
        t_done = time.monotonic() - t0
        if fault_task is not None:
            await fault_task
        events = qa.poll_events() + qb.poll_events()
        return {
            "ok": ok,
            "wcs": wcs,
            "identical": bytes(target) == src,
            "errors": [e for e in events if isinstance(e, QpErrorEvent)],
            "stats": qa.stats(),
            "ev_events": [e for e in events if type(e).__name__ == "EvStateChanged"],
            "nic": na.stats(),
            "t_done": t_done,
            "fault_ran": fault_task is not None,
        }


def assert_clean(r: dict) -> None:
    assert r["ok"], "the transfer did not finish"
    assert [w.status for w in r["wcs"]] == [WcStatus.SUCCESS] * (SIZE // CHUNK)
    assert [w.wr_id for w in r["wcs"]] == list(range(SIZE // CHUNK))  # posting order
    assert r["identical"], "the target differs from the source"
    assert r["errors"] == []


def test_write_no_fault(elab) -> None:
    r = run(_transfer(elab))
    assert_clean(r)
    nic = r["nic"]
    assert all(p["tx_frames"] > 0 for p in nic["ports"])  # sprayed over both planes


def test_write_through_t1_reboot(elab) -> None:
    f = Faults(elab, echo=None)
    r = run(_transfer(elab, fault=lambda: f.reboot("p0-t1-0", down_ms=400)))
    assert r["fault_ran"]
    assert_clean(r)
    # The dead T1 cost packets that were repaired on other paths.
    assert r["stats"].retransmissions > 0


def test_write_through_link_down(elab) -> None:
    f = Faults(elab, echo=None)
    try:
        r = run(_transfer(elab, fault=lambda: f.link_down("p1-t0-0", "p1-t1-1")))
    finally:
        f.link_up("p1-t0-0", "p1-t1-1")
    assert r["fault_ran"]
    assert_clean(r)
    assert r["stats"].retransmissions > 0


def test_write_with_one_percent_loss(elab) -> None:
    f = Faults(elab, echo=None)
    f.loss("p0-t0-0", "p0-t1-0", 1)
    try:
        r = run(_transfer(elab, seed=3))
    finally:
        f.loss_clear("p0-t0-0", "p0-t1-0")
    assert_clean(r)
    assert r["stats"].retransmissions > 0  # the loss was real and repaired


def test_write_through_nic_port_down(elab) -> None:
    f = Faults(elab, echo=None)
    try:
        r = run(_transfer(elab, fault=lambda: f.port("h0", 1, False), seed=5))
    finally:
        f.port("h0", 1, True)
    assert r["fault_ran"]
    assert_clean(r)
    port1 = r["nic"]["ports"][1]
    assert port1["up"] is False and port1["link_changes"] >= 1
    # The core took the whole plane out at once.
    assert any(e.plane == 1 and e.new.name == "ASSUMED_BAD" for e in r["ev_events"])


def test_nic_port_back_up_is_used_again(elab) -> None:
    """Down, then up: the NIC reopens its receive socket, the probes restore the plane's EVs
    and writes use the port again."""
    f = Faults(elab, echo=None)

    async def go():
        a, b = LabHost.from_state(elab, "h0", seed=31), LabHost.from_state(elab, "h1", seed=32)
        async with a.nic() as na, b.nic():
            qa, qb = _qp_pair(a, b)
            await asyncio.to_thread(f.port, "h0", 1, False)
            assert await na.wait_for(lambda: qa.ev_states()["ASSUMED_BAD"] > 0, 5)
            await asyncio.to_thread(f.port, "h0", 1, True)
            assert await na.wait_for(lambda: qa.ev_states()["ASSUMED_BAD"] == 0, 5)
            target = bytearray(2 << 20)
            src = pattern(len(target), 8)
            rx0, tx0 = na.ports[1].rx_frames, na.ports[1].tx_frames
            qa.post_write(1, src, RemoteBuffer.of(b.device.register(target)))
            wcs = []
            assert await na.wait_for(lambda: bool(wcs.extend(qa.poll_cq()) or wcs), 20)
            port = na.ports[1]
            return wcs, bytes(target) == src, port.tx_frames - tx0, port.rx_frames - rx0, port.up

    try:
        wcs, same, tx, rx, up = run(go())
    finally:
        f.port("h0", 1, True)
    assert wcs[0].status is WcStatus.SUCCESS and same
    assert up and tx > 100 and rx > 0  # data out and SACKs in on the restored port


def test_write_with_immediate_in_order(elab) -> None:
    async def go():
        a, b = LabHost.from_state(elab, "h0", seed=11), LabHost.from_state(elab, "h1", seed=12)
        async with a.nic() as na, b.nic():
            qa, qb = _qp_pair(a, b)
            target = bytearray(4 << 20)
            rb = RemoteBuffer.of(b.device.register(target))
            sizes = [1, 4096, 4097, 200_000, 17, 65536, 300_000, 3] * 6  # 48 writes
            src = pattern(sum(sizes), 9)
            off = 0
            for k, n in enumerate(sizes):
                qa.post_write(k, src[off : off + n], rb, offset=off, imm=0xA000 + k)
                off += n
            imms, wcs = [], []

            def done() -> bool:
                imms.extend(qb.poll_recv(256))
                wcs.extend(qa.poll_cq(256))
                return len(imms) == len(sizes) and len(wcs) == len(sizes)

            assert await na.wait_for(done, 30)
            return sizes, src, target, imms, wcs

    sizes, src, target, imms, wcs = run(go())
    assert [i.imm for i in imms] == [0xA000 + k for k in range(len(sizes))]
    assert [i.byte_len for i in imms] == sizes
    assert all(w.status is WcStatus.SUCCESS for w in wcs)
    assert bytes(target[: len(src)]) == src


def test_wrong_rkey_fails_cleanly(elab) -> None:
    async def go():
        a, b = LabHost.from_state(elab, "h0", seed=21), LabHost.from_state(elab, "h1", seed=22)
        async with a.nic() as na, b.nic():
            qa, qb = _qp_pair(a, b)
            target = bytearray(pattern(1 << 20, 4))
            before = bytes(target)
            rb = RemoteBuffer.of(b.device.register(target))
            bad = RemoteBuffer(rb.va, rb.rkey ^ 0x5A5A, rb.length)
            qa.post_write(1, b"\xee" * 300_000, bad)
            qa.post_write(2, b"\xdd" * 1000, rb)  # behind the failing one: flushed
            wcs = []
            assert await na.wait_for(lambda: (wcs.extend(qa.poll_cq()), len(wcs) == 2)[1], 20)
            await asyncio.sleep(0.05)  # in-flight frames land (or not): time itself
            return wcs, qa, before, target

    wcs, qa, before, target = run(go())
    assert [(w.wr_id, w.status) for w in wcs] == [
        (1, WcStatus.REMOTE_ACCESS_ERROR),
        (2, WcStatus.FLUSHED),
    ]
    assert qa.state is QpState.ERROR
    errs = [e for e in qa.poll_events() if isinstance(e, QpErrorEvent)]
    assert len(errs) == 1 and "remote access error" in errs[0].reason
    assert bytes(target) == before  # not one byte written


# --- the CLI -------------------------------------------------------------------------------------


def test_cli_write_json(elab) -> None:
    p = C.bench("write", "--lab", elab.name, "--src", "h0", "--dst", "h1", "--size", "64K",
              "--iters", "100", "--timeline-ms", "50", "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    for key in ("goodput_bps", "capacity_bps", "goodput_fraction", "verified", "qp_errors",
                "bytes", "duration_s", "cpu_percent", "timeline"):  # fmt: skip
        assert key in res, key
    assert res["verified"] is True and res["qp_errors"] == 0
    assert res["bytes"] == 100 * 65536 and res["iterations"] == 100
    assert res["capacity_bps"] == 2 * 100e6  # both planes live, 100 Mb/s each
    assert 0 < res["goodput_fraction"] <= 1
    tl = res["timeline"]
    assert len(tl) >= 2 and all(len(row) == 2 for row in tl)
    assert sum(r[1] for r in tl[:-1]) * 0.05 <= res["bytes"] * 8


def test_cli_lat_table(elab) -> None:
    p = C.bench("lat", "--lab", elab.name, "--src", "h1", "--dst", "h0", "--iters", "50")
    assert p.returncode == 0, p.stderr
    assert "t_typical[usec]" in p.stdout and "99.9% percentile[usec]" in p.stdout
    assert "verified: yes" in p.stdout


def test_cli_allreduce(elab) -> None:
    p = C.bench("allreduce", "--lab", elab.name, "--hosts", "h0,h1", "--size", "1M",
              "--iters", "2", "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["verified"] is True and res["ranks"] == 2 and res["iterations"] == 2
    assert res["busbw_bps"] == pytest.approx(res["algbw_bps"] * 2 * (2 - 1) / 2, rel=1e-6)
    assert len(res["step_times_s"]) == 2


def test_cli_rocev2_missing_or_works(elab) -> None:
    p = C.bench("write", "--lab", elab.name, "--iters", "20", "--transport", "rocev2", "--json")
    try:
        import mrcnic.rocev2.qp  # noqa: F401
    except ImportError:
        assert p.returncode == 2 and "rocev2" in p.stderr
        return
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["verified"] is True


def test_every_frame_names_its_path_and_planes_are_even(elab) -> None:
    """Captured at the destination's ports during a write: every MRC frame's EV names the
    plane it travelled on (so a SACK blames the right path), and the data frames per plane
    are within a few percent of each other (issue 11, findings 4 and 5)."""
    import socket
    import threading

    from mrcnic.io.netns import in_netns
    from mrcnic.wire import layout

    ns = elab.plan.namespace("h1")
    with in_netns(ns):
        names = sorted(n for _, n in socket.if_nameindex() if n[-2:-1] == "p" and n[-1].isdigit())
    planes = elab.plan.params.planes
    assert len(names) == planes
    counts = {n: {"data": 0, "mismatch": 0} for n in names}
    stop = threading.Event()

    def tap(name: str) -> None:
        s = H.packet_socket(elab, "h1", name, timeout_s=0.1)
        plane = int(name[-1])
        try:
            while not stop.is_set():
                try:
                    f = s.recv(65535)
                except TimeoutError:
                    continue
                if len(f) < layout.OFF_BTH + 12 or f[56:58] != b"\x12\xb7":
                    continue  # not MRC
                ev = int.from_bytes(f[54:56], "big") << 16 | int.from_bytes(f[16:18], "big")
                if ev % planes != plane:
                    counts[name]["mismatch"] += 1
                if f[layout.OFF_BTH] in layout.MRC_DATA_OPS:
                    counts[name]["data"] += 1
        finally:
            s.close()

    threads = [threading.Thread(target=tap, args=(n,)) for n in names]
    for t in threads:
        t.start()
    try:
        r = run(_transfer(elab, seed=5))
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert_clean(r)
    assert sum(c["mismatch"] for c in counts.values()) == 0, counts
    data = [c["data"] for c in counts.values()]
    assert min(data) > 0 and max(data) / (sum(data) / len(data)) <= 1.05, data


def test_mrc_bench_runs_a_users_path_policy_and_cc_from_their_files(elab):
    """Both examples of docs/extending.md, loaded by flag into mrc-bench's NIC processes on
    real sockets: the QP sprays on one path per plane only (the C send engine, the lab's
    default, deals from what the Python policy decided) and runs the user's CC."""
    root = Path(__file__).resolve().parents[2]
    d = C.bench_json(
        "write", "--lab", elab.name, "--src", "h0", "--dst", "h1", "--size", "64K",
        "--iters", "64", "--ev-log", "100",
        "--plugin", str(root / "examples" / "one_path_per_plane.py"), "--path-policy", "one-path",
        "--plugin", str(root / "examples" / "ecn_loss_aimd.py"), "--cc", "ecn-loss-aimd",
    )  # fmt: skip
    assert d["verified"] and d["path_policy"] == "one-path" and d["cc"] == "ecn-loss-aimd"
    cols = d["ev_log"]["pool_columns"]
    used = {
        (row[cols.index("plane")], row[cols.index("t1")])
        for row in d["ev_log"]["pool"]
        if row[cols.index("tx_packets")] > 0
    }
    planes = {p for p, _ in used}
    assert planes == {0, 1}, used  # every plane carried data ...
    assert len(used) == len(planes), used  # ... on one of its paths only


def test_mrc_bench_refuses_an_unknown_path_policy_before_the_lab(elab):
    p = C.bench("write", "--lab", elab.name, "--path-policy", "nope")
    assert p.returncode == 2 and "known: ecmp, mrc, oblivious, reps" in p.stderr


def test_the_lab_example_writes_between_two_hosts(elab) -> None:
    """examples/lab_two_qps.py, as a user runs it against a running lab."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    argv = [sys.executable, "examples/lab_two_qps.py", "--lab", elab.name, "--src", "h0",
            "--dst", "h1", "--size", "2M"]  # fmt: skip
    p = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "h0 -> h1: 2,097,152 bytes verified" in p.stdout, p.stdout
    bad = subprocess.run([*argv[:3], "mrcnosuch"], cwd=root, capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr


def test_the_api_doc_real_ports_block_runs(elab, capsys) -> None:
    """docs/api.md, "On real ports": its block runs against this lab (h1: its last host)."""
    import re

    doc = Path(__file__).resolve().parents[2] / "docs" / "api.md"
    text = doc.read_text()
    section = text[text.index("## On real ports") : text.index("## Coming from ibverbs")]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    block = block.replace('"h3"', '"h1"').replace(
        "run(write())", f"run(write({elab.name!r}, 1 << 20))"
    )
    exec(compile(block, str(doc), "exec"), {})  # our own document
    assert "SUCCESS" in capsys.readouterr().out

"""make fuzz, short: hostile frames into a running mrc-switch (its own process, real veths),
and the command's report over the switch and both NIC engines."""

from __future__ import annotations

import json

from lab.workloads.fuzz import run as fuzz
from lab.workloads.fuzz import switch as fuzz_switch


def test_switch_counts_every_hostile_frame_and_survives(tmp_path):
    r = fuzz_switch.run(30_000, seed=3, workdir=tmp_path)
    assert r["switch_alive"] and r["crashes"] == 0, r["log_tail"]
    assert r["every_frame_accounted"], r
    assert r["frames_on_wire"] > 0.95 * r["frames"]
    # small paced bursts, slowed down when the kernel drops before the switch reads
    assert r["rx_socket_drops"] < 0.05 * r["frames_on_wire"]
    # the generators reach every check of the pipeline and the queues' marks and trims
    for reason in ("malformed", "not_ipv6", "not_my_mac", "bad_source", "wrong_block",
                   "not_mine", "end_of_carrier", "zero_usid", "hop_limit",
                   "spoofed_source"):  # fmt: skip
        assert r["drops"][reason] > 0, reason
    assert r["drops"]["internal"] == 0
    assert r["forwarded"] > 0 and r["trims"] > 0
    assert r["rss_growth_bytes"] < fuzz.RSS_BOUND_BYTES


def test_make_fuzz_writes_its_report(tmp_path, capsys):
    out = tmp_path / "fuzz.json"
    rc = fuzz.main(["--frames", "4000", "--seed", "2", "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    rep = json.loads(out.read_text())
    assert set(fuzz.TARGETS) == set(rep["targets"])
    assert rep["frames"] == len(fuzz.TARGETS) * 4000 and rep["crashes"] == 0
    assert rep["every_frame_accounted"] and rep["rss_bounded"]
    assert rep["accounted"] >= rep["frames"]  # the NICs count the fabric's frames too
    assert "fuzz: passed" in printed


def test_nics_on_a_real_wire_count_every_hostile_frame(monkeypatch):
    from lab.workloads.fuzz import wire as fuzz_wire

    for engine in ("c", "py"):
        monkeypatch.setenv("MRC_NIC_ENGINE", engine)
        r = fuzz_wire.run(12_000, seed=4, pair_every=5_000)
        assert r["engine"] == engine and r["crashes"] == 0, r["crash_tracebacks"]
        assert r["frames"] == 12_000 and r["every_frame_accounted"], r
        assert r["every_data_frame_accounted"] and r["every_refusal_named"]
        assert r["qp_pairs"] >= 3 and r["writes_completed"] > 0
        c = r["counters"]
        for k in ("rx_malformed", "rx_foreign", "rx_placed_packets", "rx_bad_rkey",
                  "device_rx_unknown_qp", "device_rx_not_mrc", "rx_nacks"):  # fmt: skip
            assert c[k] > 0, k

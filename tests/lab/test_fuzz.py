"""make fuzz, short: hostile frames into a running mrc-switch (its own process, real veths),
and the command's report over the switch and both NIC engines."""

from __future__ import annotations

import json

from lab import fuzz, fuzz_switch


def test_switch_counts_every_hostile_frame_and_survives(tmp_path):
    r = fuzz_switch.run(30_000, seed=3, workdir=tmp_path)
    assert r["switch_alive"] and r["crashes"] == 0, r["log_tail"]
    assert r["every_frame_accounted"], r
    assert r["frames_on_wire"] > 0.95 * r["frames"]
    assert r["rx_socket_drops"] < 0.05 * r["frames_on_wire"]  # the pace lets the switch read
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
    assert rep["frames"] == 3 * 4000 and rep["crashes"] == 0
    assert rep["every_frame_accounted"] and rep["rss_bounded"]
    assert rep["accounted"] >= rep["frames"]  # the NICs count the fabric's frames too
    assert "fuzz: passed" in printed

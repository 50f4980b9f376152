"""Forged writes from a third host while a verified write runs (mrc-bench forge): the peer's
address, the R_Key and the PSN window hold, the T0s' source guard stops spoofing, and every
forged frame is counted under the reason that names it."""

from __future__ import annotations

import asyncio

import lab_helpers as H
import pytest

from lab.bench_cli import main as bench_main
from lab.workloads.bench.forge import ForgeParams, run_forge


@pytest.fixture(scope="module")
def flab():
    with H.running_lab(switch="python", hosts_per_t0=2) as st:
        yield st


def test_forged_writes_change_nothing_and_are_all_counted(flab):
    res = asyncio.run(run_forge(flab, ForgeParams(size=2 << 20, per_kind=24, seed=3)))
    assert res["write_verified"] and res["qp_errors"] == 0, res
    assert res["bytes_changed_outside_the_write"] == 0
    kinds = res["forged_by_kind"]
    for k in ("at_target/stolen_rkey_psn_in_window", "at_target/guessed_rkey",
              "at_target/psn_beyond_window", "at_target/trimmed_header",
              "at_target/unknown_qp", "at_writer/nack", "at_writer/port_status_down"):  # fmt: skip
        assert kinds[f"{k}/own_address"] > 0 and kinds[f"{k}/spoofed"] > 0, k
    for name, v in res["counted"].items():
        assert v["sent"] > 0 and v["counted"] == v["sent"], (name, v)
    assert res["passed"]


def test_mrc_bench_forge_command(flab, capsys):
    rc = bench_main(["forge", "--lab", flab.name, "--size", "1M", "--per-kind", "8"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "PASSED" in out and "bytes changed outside the write: 0" in out

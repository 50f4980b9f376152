"""examples/ecn_loss_aimd.py, a user's congestion control in its own file: it registers itself,
runs in the simulator, and reacts to what only the new signals tell it (packets found lost
from SACKs when the fabric drops instead of trimming, and the path of each)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from mrcnic.sim.fabric import FabricSpec
from mrcnic.sim.transfer import SimConfig, Simulation
from mrcnic.transport import cc

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ecn_loss_aimd.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ecn_loss_aimd", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(fabric: FabricSpec, seed: int) -> tuple[dict, object]:
    _load()
    sim = Simulation(SimConfig(fabric=fabric, size=2 << 20, cc="ecn-loss-aimd", seed=seed))
    result = sim.run()
    return result, sim.pairs[0][0].cc


def test_the_example_is_short_and_registers_itself() -> None:
    # the CC itself is short; the program after it (``main``) runs it beside NSCC
    cc_part = EXAMPLE.read_text().split("\ndef main(")[0]
    assert len(cc_part.splitlines()) <= 50
    mod = _load()
    assert "ecn-loss-aimd" in cc.available()
    assert cc.factory("ecn-loss-aimd") is mod.EcnLossAimd


def test_it_backs_off_on_congestion_drops_with_trimming_and_ecn_off() -> None:
    """Slow paths, short queues, no trimming, no ECN: the fabric drops, and the only way the
    algorithm can learn of it is the scoreboard declaring packets lost (``on_loss``)."""
    fabric = FabricSpec(trim=False, ecn_bytes=None, path_rate_bps=5e6, queue_bytes=12 * 1024)
    for seed in (1, 2):
        r, alg = _run(fabric, seed)
        assert r["verified"] and not r["qp_errors"]
        assert r["drops"] > 0 and r["trims"] == 0 and r["ecn_marks"] == 0
        assert alg.loss_decreases > 0  # type: ignore[attr-defined]
        assert alg.decreases == alg.loss_decreases  # type: ignore[attr-defined]  # no ECN


def test_each_loss_names_the_path_that_lost_it() -> None:
    """One lossy path, no congestion: every loss the algorithm hears of is on that path."""
    r, alg = _run(FabricSpec(path_loss=((5, 0.05),)), seed=1)
    assert r["verified"]
    losses = alg.losses_by_path  # type: ignore[attr-defined]
    assert sum(losses.values()) > 0 and set(losses) == {5}

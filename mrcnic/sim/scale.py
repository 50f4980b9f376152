"""The two scales the simulator runs at, named (``mrc-sim --scale lab|paper``): one source for
the link rate, propagation delay, buffer and ECN threshold each stands for.

- ``lab``: the namespace lab's 1/1000 scale (100 Mb/s links, 20 us of propagation, 64 KiB
  buffers, ECN at 16 KiB): a path holds a few packets and the RTT is mostly serialisation.
  The default of the two-host run (``--workload p2p``), so its figures compare with the lab.
- ``paper``: the paper's proportions (8 x 100 Gb/s NICs, 6.54 us one way across a T1, deep
  switch buffers with ECN well below them): 100 Gb/s links, 4 us of propagation, 1 MiB
  buffers, ECN at 200 KiB, so a path's BDP is tens of packets. The default of the
  whole-fabric workloads, and of the claims' simulated forms.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Scale:
    name: str
    port_rate_bps: float
    prop_s: float  # one way, T0 -> T1 -> T0
    queue_bytes: int
    ecn_bytes: int


LAB = Scale("lab", 100e6, 20e-6, 64 * 1024, 16 * 1024)
PAPER = Scale("paper", 100e9, 4e-6, 1 << 20, 200 << 10)
SCALES = {s.name: s for s in (LAB, PAPER)}


def default_scale(workload: str) -> Scale:
    """The two-host run keeps the lab's scale; a whole fabric runs at the paper's."""
    return LAB if workload == "p2p" else PAPER

"""What an MRC QP holds in memory on the C engines (docs/api.md): ``stats().state_bytes`` at
rest, at the peak of a high-BDP transfer and at rest after it, and what is resident per idle
connected QP (Python objects included). No root, no lab: QPs of ``SimNetwork``.

    .venv/bin/python bench/bench_qp_memory.py [--pairs 512] [--out results/bench-qp-memory.json]

- ``at_rest``: one connected QP of ``SimNetwork()`` (the default fabric) and of a 10 Gb/s,
  2 ms fabric (more EVs), before anything is posted;
- ``under_load``: on the 10 Gb/s fabric, 40 writes of 400 KiB posted at once: the most PSNs in
  flight and the most ``state_bytes`` seen while they ran, and ``state_bytes`` after the last
  completion (every byte checked);
- ``resident``: ``--pairs`` connected QP pairs between two devices, VmRSS before and after
  (after a garbage collection), per QP.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import platform
import sys
from pathlib import Path
from typing import Any

from mrcnic.sim.fabric import FabricSpec
from mrcnic.verbs import RemoteBuffer, SimNetwork


def _pair(net: SimNetwork) -> tuple[Any, Any]:
    a, b = net.devices
    qa, qb = a.create_qp(), b.create_qp()
    qa.connect(qb.export())
    qb.connect(qa.export())
    return qa, qb


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _load_spec() -> FabricSpec:
    return FabricSpec(prop_s=2e-3, port_rate_bps=10e9)


def at_rest() -> dict[str, Any]:
    out = {}
    for name, spec in (("default", None), ("10gbps_2ms", _load_spec())):
        net = SimNetwork(spec, seed=3) if spec else SimNetwork(seed=3)
        qa, _qb = _pair(net)
        out[name] = {"evs": len(qa.core.evs.ev_values), "state_bytes": qa.stats().state_bytes}
    return out


def under_load(writes: int = 40, size: int = 400 << 10) -> dict[str, Any]:
    net = SimNetwork(_load_spec(), seed=3)
    qa, _qb = _pair(net)
    rest = qa.stats().state_bytes
    buf = bytearray(size * writes)
    rb = RemoteBuffer.of(net.devices[1].register(buf))
    want = b"".join(bytes([i + 1]) * size for i in range(writes))
    for i in range(writes):
        qa.post_write(
            i, want[i * size : (i + 1) * size], RemoteBuffer(rb.va + i * size, rb.rkey, size)
        )
    q = qa.core.tx.q
    peak = {"state_bytes": 0, "psns_in_flight": 0}
    got: list = []

    def done() -> bool:
        peak["state_bytes"] = max(peak["state_bytes"], qa.stats().state_bytes)
        peak["psns_in_flight"] = max(peak["psns_in_flight"], (q.snd_nxt - q.snd_una) & 0xFFFFFF)
        got.extend(qa.poll_cq())
        return len(got) == writes

    net.run_until(done, max_s=30.0)
    return {
        "writes": writes,
        "write_bytes": size,
        "completed": len(got),
        "succeeded": sum(1 for w in got if w.status.name == "SUCCESS"),
        "verified": bytes(buf) == want,
        "state_bytes_before": rest,
        "peak_state_bytes": peak["state_bytes"],
        "peak_psns_in_flight": peak["psns_in_flight"],
        "state_bytes_after": qa.stats().state_bytes,
    }


def resident(pairs: int) -> dict[str, Any]:
    net = SimNetwork(seed=7)
    gc.collect()
    before = _rss_bytes()
    qps = [_pair(net) for _ in range(pairs)]
    gc.collect()
    after = _rss_bytes()
    return {
        "pairs": pairs,
        "resident_bytes_per_qp": (after - before) // (2 * pairs),
        "state_bytes_per_qp": sum(q.stats().state_bytes for p in qps for q in p) // (2 * pairs),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pairs", type=int, default=512, help="QP pairs for the resident figure [512]")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    a = ap.parse_args(argv)
    if a.pairs < 1:
        ap.error("--pairs must be at least 1")
    probe = SimNetwork(seed=1)
    if probe.devices[0].engine_name != "c":
        print("bench_qp_memory: the C engines are not built (make setup)", file=sys.stderr)
        return 2
    res = {
        "bench": "qp_memory",
        "command": " ".join(["bench/bench_qp_memory.py", *(argv or sys.argv[1:])]),
        "timestamp_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"node": platform.node(), "python": platform.python_version()},
        "at_rest": at_rest(),
        "under_load": under_load(),
        "resident": resident(a.pairs),
    }
    text = json.dumps(res, indent=1)
    print(text)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

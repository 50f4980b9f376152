"""``make fuzz``'s NIC target: hostile frames into two devices whose QPs are writing.

Two :class:`mrcnic.verbs.Device` s (h0 writes to h1, h1 to h0) run over the simulated fabric
of :class:`mrcnic.verbs.SimNetwork` in virtual time, with the engine ``MRC_NIC_ENGINE`` asks
for. Between slices of that exchange, batches of :mod:`lab.workloads.fuzz.gen` frames enter each device
through the receive path the I/O shell uses (``Device.receive_batch`` over a receive ring:
the C engines' batch dispatcher, or the Python path), built from the frames the devices
really exchange. Every ``pair_every`` frames (and whenever a QP has failed) the QP pair is
replaced, so the frames keep meeting live QPs.

Accounting (:func:`fates`): every frame a device was given (the fabric's and ours) must be
counted exactly once, by the device (not MRC, unknown QP, too long), by the EV-probe QP, or by
the QP it named under one fate (closed, malformed, foreign, data, SACK, NACK, probe, port
status); and every data frame under one outcome (trimmed, duplicate, beyond the window, MSN
out of range, refused by cause, placed).
"""

from __future__ import annotations

import os
import random
import resource
import time
import traceback
from collections import Counter
from typing import Any

from lab.workloads.fuzz.gen import Forge
from mrcnic.io.batch import RecvRing
from mrcnic.sim.fabric import FabricSpec
from mrcnic.transport.qp_types import QpStats
from mrcnic.verbs import QP, Access, Device, RemoteBuffer, SimNetwork

SLOT_BYTES = 9216  # the NIC shell's receive slots (mrcnic.io.aio)
BATCH = 64
REGION_BYTES = 256 << 10
# fates of a frame a QP was given: each frame is counted under exactly one
QP_FATES = (
    "rx_closed",
    "rx_malformed",
    "rx_foreign",
    "rx_data_packets",
    "rx_sacks",
    "rx_nacks",
    "rx_probes",
    "rx_port_status",
    "rx_port_status_acks",
)
# outcomes of a data frame (rx_data_packets): each under exactly one
DATA_OUTCOMES = (
    "rx_trimmed",
    "rx_duplicates",
    "rx_psn_out_of_window",
    "rx_msn_out_of_range",
    "rx_refused",
    "rx_placed_packets",
)
REFUSAL_CAUSES = ("rx_bad_rkey", "rx_no_permission", "rx_out_of_bounds")
# what else a QP counts about forged input, reported beside the fates
ALSO = ("rx_stale_nacks", "rx_unmatched_nacks", "rx_stale_port_status", "rx_ecn_marked")


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Net(SimNetwork):
    """The fabric's deliveries counted per device, and the last frames kept for the forges."""

    def __init__(self, spec: FabricSpec, seed: int) -> None:
        super().__init__(spec, seed)
        self.delivered = [0, 0]
        self.recent: list[list[bytes]] = [[], []]

    def _deliver(self, host: int, port: int, frame: bytes, t: float) -> None:
        self.delivered[host] += 1
        keep = self.recent[host]
        if len(keep) < 256:
            keep.append(frame)
        super()._deliver(host, port, frame, t)


class LivePair:
    """A connected QP pair writing both ways (``sizes``: the writes' sizes, some with an
    immediate), replaced on demand; ``retired`` keeps what the replaced QPs counted."""

    def __init__(
        self, devices: list[Device], regions: list[Any], rng: random.Random, sizes: tuple
    ) -> None:
        self.devices, self.regions, self.rng, self.sizes = devices, regions, rng, sizes
        self.retired: list[QpStats] = []
        self.pairs = 0
        self.posted = self.completed = 0
        self.qps: list[QP] = []
        self._connect()

    def _connect(self) -> None:
        a, b = self.devices
        self.qps = [a.create_qp(), b.create_qp()]
        self.qps[0].connect(self.qps[1].export())
        self.qps[1].connect(self.qps[0].export())
        self.remote = [RemoteBuffer.of(self.regions[1]), RemoteBuffer.of(self.regions[0])]
        self.pairs += 1
        self.posted = self.completed  # nothing of the new pair is outstanding

    def replace(self) -> None:
        """Destroy the pair (its counts go to ``retired``) and connect a new one."""
        self.retired += [q.stats() for q in self.qps]
        for d, q in zip(self.devices, self.qps, strict=True):
            d.destroy_qp(q)
        self._connect()

    def keep_writing(self) -> None:
        for side, qp in enumerate(self.qps):
            self.completed += sum(1 for wc in qp.poll_cq() if wc.status.name == "SUCCESS")
            qp.poll_recv()
            qp.poll_events()
            if self.posted - self.completed < 4 and qp.state.name != "ERROR":
                self.posted += 1
                data = self.rng.randbytes(self.rng.choice(self.sizes))
                imm = self.posted if self.rng.random() < 0.3 else None
                qp.post_write(self.posted, data, self.remote[side], imm=imm)

    def failed(self) -> bool:
        return any(q.state.name == "ERROR" for q in self.qps)


def _fill(ring: RecvRing, frames: list[bytes]) -> None:
    cap = ring.cap
    view = ring.view
    for i, f in enumerate(frames):
        n = min(len(f), cap)
        view[i * cap : i * cap + n] = f[:n]
        ring.lens[i] = len(f)  # longer than a slot: as a truncated receive reports it


def fates(devices: list[Device], retired: list[QpStats]) -> dict[str, Any]:
    """Every frame's fate, summed over the devices and their live and retired QPs."""
    c: Counter = Counter()
    for dev in devices:
        for k, v in dev.stats.as_dict().items():
            c["device_" + k] += v
        desk = dev.ev_probes
        c["ev_probe_answered"] += desk.answered
        c["ev_probe_routed"] += desk.routed
        c["ev_probe_dropped"] += desk.dropped
    stats = [q.stats() for d in devices for q in d.qps.values()] + retired
    for st in stats:
        for k in (*QP_FATES, *DATA_OUTCOMES, *REFUSAL_CAUSES, *ALSO):
            c[k] += getattr(st, k)
    accounted = sum(c[k] for k in QP_FATES) + sum(
        v for k, v in c.items() if k.startswith(("device_", "ev_probe_"))
    )
    return {
        "accounted": accounted,
        "data_outcomes_sum": sum(c[k] for k in DATA_OUTCOMES),
        "refusal_causes_sum": sum(c[k] for k in REFUSAL_CAUSES),
        "counters": dict(sorted(c.items())),
    }


def outcome_report(
    acct: dict[str, Any], forges: list[Forge], pairs: int, completed: int, rss0: int | None
) -> dict[str, Any]:
    """The keys both NIC targets report beside their own: the fates' checks and counters,
    the kinds of frames made, the QP pairs, and the memory."""
    c = acct["counters"]
    return {
        "every_data_frame_accounted": acct["data_outcomes_sum"] == c["rx_data_packets"],
        "every_refusal_named": acct["refusal_causes_sum"] == c["rx_refused"],
        "counters": c,
        "kinds": {"to_h0": forges[0].counts, "to_h1": forges[1].counts},
        "qp_pairs": pairs,
        "writes_completed": completed,
        "rss_growth_bytes": rss_bytes() - (rss0 or rss_bytes()),
        "rss_bytes": rss_bytes(),
    }


def run(frames: int, seed: int, pair_every: int = 20_000) -> dict[str, Any]:
    """Give the two devices ``frames`` hostile frames in all (half each); returns the
    report (the key ``crashes``: batches whose processing raised)."""
    rng = random.Random(seed)
    net = _Net(FabricSpec(planes=2, paths_per_plane=2, seed=seed, loss=0.002), seed)
    devices = net.devices
    buffers = [bytearray(REGION_BYTES), bytearray(REGION_BYTES)]
    regions = [devices[i].register(buffers[i]) for i in (0, 1)]
    # a region the peer may not write (LOCAL_WRITE only): its key refused as no_permission
    local_only = [devices[i].register(bytearray(4096), Access.LOCAL_WRITE) for i in (0, 1)]
    pair = LivePair(devices, regions, rng, (4096, 65536, REGION_BYTES))
    ring = RecvRing(SLOT_BYTES, BATCH)
    pair.keep_writing()
    net.run_until(lambda: min(len(r) for r in net.recent) >= 8, max_s=1.0, strict=False)
    forges = [
        Forge(
            net.recent[h],
            seed=seed * 2 + h,
            rkeys=[regions[h].rkey, local_only[h].rkey, rng.getrandbits(32)],
            regions=[(regions[h].base_va, REGION_BYTES)],
        )
        for h in (0, 1)
    ]
    sent = 0
    next_pair_at = pair_every
    crashes: list[str] = []
    rss0 = None
    t0 = time.monotonic()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    while sent < frames:
        if rss0 is None and sent >= frames // 10:
            rss0 = rss_bytes()  # after warm-up: the QPs, rings and caches exist
        renew = False
        if sent >= next_pair_at or pair.failed():
            # (a refused write ends a pair: the responder goes to ERROR, as in RC)
            next_pair_at = sent + pair_every
            pair.replace()
            renew = True
        pair.keep_writing()
        net.run_until(lambda: False, max_s=500e-6, strict=False)
        for h in (0, 1):
            if renew and net.recent[h]:
                forges[h].renew(net.recent[h])  # the new pair's frames: templates from now on
            for f in net.recent[h]:
                forges[h].learn(f)  # a frame to h: a template
                forges[1 - h].hint(f)  # a frame from 1 - h: a PSN it waits on
            net.recent[h].clear()
            n = min(BATCH, frames - sent)
            if n <= 0:
                break
            batch = forges[h].frames(n)
            _fill(ring, batch)
            try:
                devices[h].receive_batch(ring, n, net.fabric.now)
            except Exception:  # a bug: counted, and the next batch goes on
                if len(crashes) < 5:
                    crashes.append(traceback.format_exc())
                else:
                    crashes.append("(more)")
            sent += n
            net.delivered[h] += n
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    acct = fates(devices, pair.retired)
    delivered = sum(net.delivered)
    return {
        "engine": devices[0].engine_name,
        "frames": sent,
        "frames_from_fabric": delivered - sent,
        "frames_total": delivered,
        "crashes": len(crashes),
        "crash_tracebacks": crashes[:5],
        "accounted": acct["accounted"],
        "every_frame_accounted": acct["accounted"] == delivered,
        **outcome_report(acct, forges, pair.pairs, pair.completed, rss0),
        "wall_s": round(time.monotonic() - t0, 2),
        "cpu_s": round(
            cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime,
            2,
        ),
    }

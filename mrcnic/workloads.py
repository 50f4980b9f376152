"""What each workload shared by the lab (``mrc-bench``) and the simulator (``mrc-sim
--workload``) is: one definition, used by both sides.

- **ring all-reduce** (nccl-tests' ``all_reduce_perf``): ``n`` ranks, ``S`` bytes each
  (``S / 4`` uint32 elements, summed modulo 2^32) cut into ``n`` chunks of ``c = S / n``.
  Rank ``r`` writes only to rank ``r + 1``.  Reduce-scatter steps ``s = 0 .. n-2``: write
  data chunk ``(r - s) mod n`` into the next rank's receive slot ``s``; the arrival of step
  ``s`` adds slot ``s`` into data chunk ``(r - 1 - s) mod n``, then step ``s + 1`` goes.
  All-gather steps ``s = 0 .. n-2``: write data chunk ``(r + 1 - s) mod n`` straight into the
  same place of the next rank's data; each arrival is forwarded.  Every write carries the
  immediate :func:`imm_tag` ``(iteration, phase, step)``.
- **all-to-all** (``alltoall_perf``): rank ``r`` writes its chunk ``j`` into chunk ``r`` of
  rank ``j``'s receive buffer, peers in :func:`peer_order`, one QP per pair (:func:`rail`).
- **incast**: senders write to one host at once; the victim (:func:`incast_victim`) shares
  the senders' uplinks and the downlinks towards the destination's T0, not its last hop.
- **bandwidth** as nccl-tests reports it: ``algbw = S / time``, ``busbw = algbw x 2 (n-1)/n``
  (all-reduce) or ``algbw x (n-1)/n`` (all-to-all).

Pure functions; the lab drives them over real sockets (``lab.workloads.bench``), the
simulator over a virtual Clos (``mrcnic.sim.collectives``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from mrcnic.optional import load

if TYPE_CHECKING:
    from numpy import ndarray

np = load("numpy", "the collectives' data (all-reduce, all-to-all)")  # (the 'collectives' extra)


RS, AG, A2A = 0, 1, 2  # the immediate's phase byte: reduce-scatter, all-gather, all-to-all


def imm_tag(it: int, phase: int, step: int) -> int:
    """The immediate of a collective's write: iteration, phase and step (or sender rank)."""
    return (it & 0xFFFF) << 16 | phase << 8 | step


def rank_data(seed: int, rank: int, elements: int) -> ndarray:
    """Rank ``rank``'s input: ``elements`` seeded uint32 values."""
    return np.random.default_rng([seed, rank]).integers(0, 1 << 32, size=elements, dtype=np.uint32)


# --- ring all-reduce -----------------------------------------------------------------------------


def allreduce_size(size: int, n: int) -> int:
    """Bytes per rank really reduced: ``size`` rounded down to a multiple of 4 x ``n``
    (uint32 elements, equal chunks); ValueError when nothing is left."""
    if n < 2:
        raise ValueError("an all-reduce needs at least 2 hosts")
    usable = size - size % (4 * n)
    if usable <= 0:
        raise ValueError(f"--size must be at least {4 * n} bytes for {n} ranks (4-byte elements)")
    return usable


def ring_steps(n: int) -> list[tuple[int, int]]:
    """Every (phase, step) of one all-reduce in order: the immediates a rank receives."""
    return [(RS, s) for s in range(n - 1)] + [(AG, s) for s in range(n - 1)]


@dataclass(frozen=True, slots=True)
class RingWrite:
    """What rank ``r`` writes at one step: its data ``chunk``, into the next rank's receive
    buffer (``to_recv``, reduce-scatter) or its data, at chunk index ``slot`` there."""

    chunk: int
    to_recv: bool
    slot: int


def ring_write(phase: int, s: int, r: int, n: int) -> RingWrite:
    if phase == RS:
        return RingWrite((r - s) % n, True, s)
    k = (r + 1 - s) % n
    return RingWrite(k, False, k)


def ring_reduce_chunk(s: int, r: int, n: int) -> int:
    """The data chunk into which rank ``r`` adds receive slot ``s`` (reduce-scatter step ``s``)."""
    return (r - 1 - s) % n


def ring_next(phase: int, s: int, n: int) -> tuple[int, int] | None:
    """The step a rank sends once step ``(phase, s)`` arrived from the previous rank."""
    if phase == RS:
        return (RS, s + 1) if s + 1 < n - 1 else (AG, 0)
    return (AG, s + 1) if s + 1 < n - 1 else None


def ring_step_names(n: int) -> list[str]:
    return [f"reduce-scatter {s}" for s in range(n - 1)] + [f"all-gather {s}" for s in range(n - 1)]


def allreduce_expected(seed: int, n: int, elements: int) -> ndarray:
    """What every rank holds after the all-reduce: the sum of every rank's data mod 2^32."""
    return sum(
        (rank_data(seed, r, elements) for r in range(n)), start=np.zeros(elements, np.uint32)
    )


def allreduce_busbw_bps(algbw_bps: float, n: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: ``algbw x 2 (n - 1) / n``."""
    return algbw_bps * 2 * (n - 1) / n


def step_durations(start: float, step_times: Sequence[float]) -> list[float]:
    """One rank's time for each step: from the previous step's arrival (the start for the
    first) to this one's."""
    return [t - (step_times[s - 1] if s else start) for s, t in enumerate(step_times)]


def slowest_steps(reports: Sequence[dict[str, Any]], n: int) -> list[float]:
    """Per step of one iteration, the slowest rank's duration (NaN when no rank got there);
    each report has ``start`` and ``steps`` (arrival times)."""
    durs = [step_durations(rep["start"], rep["steps"]) for rep in reports]
    out = []
    for s in range(2 * (n - 1)):
        col = [d[s] for d in durs if len(d) > s]
        out.append(max(col) if col else float("nan"))
    return out


# --- all-to-all ----------------------------------------------------------------------------------


def alltoall_size(size: int, n: int) -> int:
    """Bytes per rank really exchanged: a multiple of 4 x ranks (uint32 elements, equal
    chunks), as the all-reduce rounds its size."""
    return size - size % (4 * n)


def check_alltoall_sizes(sizes: list[int], n: int) -> list[int]:
    """The sizes rounded to what ``n`` ranks exchange; ValueError for one that is too small
    or whose chunk does not fit one RDMA Write."""
    if n < 2:
        raise ValueError("an all-to-all needs at least 2 hosts")
    if not sizes:
        raise ValueError("no message size")
    out = []
    for s in sizes:
        u = alltoall_size(s, n)
        if u <= 0:
            raise ValueError(f"size {s} must be at least {4 * n} bytes for {n} ranks")
        if u // n >= 1 << 32:
            raise ValueError(f"size {s}: a chunk of {u // n} bytes exceeds one RDMA Write")
        out.append(u)
    return out


def peer_order(r: int, n: int) -> list[int]:
    """The peers rank ``r`` writes to, in posting order: ``r+1, r+2, ...`` (mod n), so that
    the ranks do not all write to rank 0 first."""
    return [(r + k) % n for k in range(1, n)]


def rail(i: int, j: int, n: int) -> int:
    """The QP index (RoCEv2: the port, mod planes) of the connection between ranks ``i`` and
    ``j`` of ``n``: the pair's number in the list (0,1), (0,2), ..., (n-2,n-1), the same at
    both ends. While n (n - 1) / 2 <= planes every connection has a rail of its own, so the
    baseline's lossless all-to-all suffers no collision of two QPs on one plane (its best
    case; beyond that they share rails, as a port hash would make them)."""
    a, b = min(i, j), max(i, j)
    if a == b or not 0 <= a < b < n:
        raise ValueError(f"no connection between ranks {i} and {j} of {n}")
    return a * n - a * (a + 1) // 2 + (b - a - 1)


def alltoall_expected(seed: int, r: int, n: int, sizes: list[int]) -> list[ndarray]:
    """What rank ``r``'s receive buffer holds after an iteration of each size: chunk ``j`` is
    rank ``j``'s chunk ``r`` (its own included)."""
    top = max(sizes) // 4
    peers = [rank_data(seed, j, top) for j in range(n)]
    out = []
    for s in sizes:
        e = s // n // 4
        out.append(np.concatenate([peers[j][r * e : (r + 1) * e] for j in range(n)]))
    return out


def alltoall_busbw_factor(n: int) -> float:
    """nccl-tests' all-to-all bus bandwidth factor: busbw = algbw x (n - 1) / n."""
    return (n - 1) / n


def iteration_time(reports: Sequence[dict[str, Any]]) -> float:
    """An iteration's time: the first rank's start to the last rank's end (one clock)."""
    return max(r["end"] for r in reports) - min(r["start"] for r in reports)


def alltoall_row(
    size: int, n: int, iters: int, its: list[list[dict]], capacity_bps: float
) -> dict[str, Any]:
    """One line of the nccl-tests table: a size's timed iterations (each a list of the
    ranks' reports: ``start``, ``end``, ``ok``)."""
    times = [iteration_time(reps) for reps in its]
    t_avg = statistics.fmean(times) if times else 0.0
    algbw = size * 8 / t_avg if t_avg > 0 else 0.0
    busbw = algbw * alltoall_busbw_factor(n)
    ok = len(its) == iters and all(rep["ok"] for reps in its for rep in reps)
    return {
        "size": size,
        "elements": size // 4,
        "iterations": len(times),
        "time_s": round(t_avg, 6),
        "iteration_times_s": [round(t, 6) for t in times],
        "algbw_bps": round(algbw, 1),
        "busbw_bps": round(busbw, 1),
        "goodput_fraction": round(busbw / capacity_bps, 4) if capacity_bps else 0.0,
        "verified": ok,
    }


def arrival_matrix(its: list[list[dict]], n: int) -> list[list[float | None]]:
    """``m[dst][src]``: mean seconds from ``dst``'s start until ``src``'s chunk arrived there."""
    m: list[list[float | None]] = [[None] * n for _ in range(n)]
    for dst in range(n):
        for src in range(n):
            v = [
                reps[dst]["arrival"][src]
                for reps in its
                if len(reps) > dst and reps[dst]["arrival"][src] is not None
            ]
            m[dst][src] = round(statistics.fmean(v), 6) if v else None
    return m


# --- incast --------------------------------------------------------------------------------------


class _Shape(Protocol):
    """What the victim choice reads of a Clos (``mrcnic.wire.usid.ClosShape``)."""

    @property
    def host_count(self) -> int: ...

    def host_t0(self, host: int) -> int: ...


def hosts_under(shape: _Shape, t0: int) -> list[int]:
    return [h for h in range(shape.host_count) if shape.host_t0(h) == t0]


def incast_victim(shape: _Shape, senders: Sequence[int], dst: int) -> tuple[int, int] | None:
    """The victim of the congestion-spreading scenario: a host under the T0 of most senders
    (ties: the lowest T0 index) that is neither a sender nor ``dst``, writing to a host under
    ``dst``'s T0 that is not ``dst`` (a host that is no sender preferred). It shares the
    senders' T0 -> T1 links and the T1 -> T0 links towards ``dst``'s T0 with the incast, but
    not ``dst``'s own links. None when the fabric has no such pair (then it needs more hosts
    per T0) or when most senders sit under ``dst``'s T0 (no shared uplink)."""
    counts: dict[int, int] = {}
    for s in senders:
        t = shape.host_t0(s)
        counts[t] = counts.get(t, 0) + 1
    if not counts:
        return None
    t0 = min(counts, key=lambda t: (-counts[t], t))
    dst_t0 = shape.host_t0(dst)
    if t0 == dst_t0:
        return None
    busy = set(senders) | {dst}
    srcs = [h for h in hosts_under(shape, t0) if h not in busy]
    dsts = [h for h in hosts_under(shape, dst_t0) if h != dst]
    if not srcs or not dsts:
        return None
    dsts.sort(key=lambda h: (h in busy, h))
    return srcs[0], dsts[0]


def skip_for(duration_s: float) -> float:
    """Ramp-up left out of an incast's window goodput: 1 s, or a quarter of a short run."""
    return min(1.0, duration_s / 4)


def incast_senders(shape: _Shape, count: int, dst: int) -> list[int]:
    """``count`` senders for ``dst`` when only their number is given (``mrc-sim --senders
    N``): hosts under other T0s than ``dst``'s, one per T0 in turn (the first host of each,
    then the second, ...), so the incast crosses the fabric from as many T0s as it can; then,
    if it needs more, the others under ``dst``'s T0.  ValueError if the fabric is too small."""
    if not 1 <= count <= shape.host_count - 1:
        raise ValueError(f"--senders {count}: 1 .. {shape.host_count - 1} (the hosts but --dst)")
    t0s = sorted({shape.host_t0(h) for h in range(shape.host_count)})
    under = {t: hosts_under(shape, t) for t in t0s}
    dst_t0 = shape.host_t0(dst)
    order = [
        under[t][k]
        for k in range(max(len(v) for v in under.values()))
        for t in t0s
        if t != dst_t0 and k < len(under[t])
    ]
    order += [h for h in under[dst_t0] if h != dst]
    return order[:count]

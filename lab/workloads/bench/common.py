"""Pieces every ``mrc-bench`` test shares: the verified data pattern, CPU meters, the
fabric capacity of a pair of hosts, timelines, and finding which lab host we run on.

**The pattern.** The client writes message ``m`` (message size ``size``) into chunk
``k = m % nchunks`` of the server's region, taking its bytes from a seeded random source at
``k * size + shift(p)`` with ``p = m // nchunks`` (the pass over the region) and
``shift(p) = (p % 16) * 64``: consecutive passes over a chunk write different bytes, so a
write that never landed leaves the previous pass's bytes and the check fails.  The server
rebuilds the expected region from the seed and the number of messages and compares every byte
(:func:`expected_region`); message ``m`` is only posted after message ``m - nchunks`` (same
chunk) completed, so the last write of each chunk is well defined even over several QPs.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import subprocess
import sys
import time
from typing import IO, Any

from lab.proc import control
from mrcnic.units import parse_size as parse_size  # the one size parser (mrcnic.units)

SHIFT_STEP = 64
SHIFTS = 16


# --- the verified pattern ----------------------------------------------------------------------


def source_pattern(seed: int, region_bytes: int) -> bytes:
    """The client's source bytes (region plus room for the per-pass shifts)."""
    return random.Random(seed).randbytes(region_bytes + SHIFT_STEP * (SHIFTS - 1))


def shift_of(pass_: int) -> int:
    return (pass_ % SHIFTS) * SHIFT_STEP


def message_slice(m: int, size: int, nchunks: int) -> tuple[int, int]:
    """(offset in the source, offset in the region) of message ``m``."""
    k = m % nchunks
    return k * size + shift_of(m // nchunks), k * size


def expected_region(src: bytes, size: int, nchunks: int, messages: int) -> bytearray:
    """The server's region after ``messages`` completed messages (chunks never written: 0)."""
    out = bytearray(size * nchunks)
    view = memoryview(src)
    for k in range(min(nchunks, messages)):
        last = k + ((messages - 1 - k) // nchunks) * nchunks  # the last message into chunk k
        so, ro = message_slice(last, size, nchunks)
        out[ro : ro + size] = view[so : so + size]
    return out


def digest(data: bytes | bytearray | memoryview) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def first_difference(a: bytes | bytearray, b: bytes | bytearray) -> int:
    """Index of the first differing byte (len if equal up to the shorter one)."""
    n = min(len(a), len(b))
    lo, hi = 0, n
    ma, mb = memoryview(a), memoryview(b)
    while hi - lo > 4096:  # bisect on chunks, then scan: fast for large equal prefixes
        mid = (lo + hi) // 2
        if ma[lo:mid] == mb[lo:mid]:
            lo = mid
        else:
            hi = mid
    for i in range(lo, hi):
        if a[i] != b[i]:
            return i
    return n


def plan_region(size: int, iters: int | None, depth: int, region_cap: int) -> tuple[int, int]:
    """(nchunks, depth): the region holds ``nchunks`` messages (at most ``region_cap`` bytes
    unless one message is bigger, never more than the run writes) and ``depth`` (outstanding
    messages) never exceeds ``nchunks``."""
    nchunks = max(1, region_cap // max(size, 1))
    if iters is not None:
        nchunks = max(1, min(nchunks, iters))
    return nchunks, max(1, min(depth, nchunks))


# --- CPU ----------------------------------------------------------------------------------------

# --- capacity ------------------------------------------------------------------------------------


def pair_capacity_bps(
    plan: Any, src: int, dst: int, src_up: list[bool], dst_up: list[bool]
) -> float:
    """What the fabric can carry from ``src`` to ``dst``: per plane whose ports are up at both
    ends, the smaller of the two NIC port rates and (hosts under different T0s) of the T0->T1
    uplinks of that plane; summed over planes.  Frame bytes on the wire, as the links count."""
    rate = plan.params.rate_mbit * 1e6
    same_t0 = plan.shape.host_t0(src) == plan.shape.host_t0(dst)
    per_plane = rate if same_t0 else min(rate, plan.params.t1 * rate)
    return sum(per_plane for p in range(plan.params.planes) if src_up[p] and dst_up[p])


# --- timeline ------------------------------------------------------------------------------------


def timeline(
    events: list[tuple[float, int]], t0: float, t_end: float, bin_s: float
) -> list[list[float]]:
    """[[t_s, goodput_bps], ...]: bytes of writes completed in each bin (t_s = bin start,
    relative to ``t0``); the last partial bin is scaled by its real length."""
    if bin_s <= 0:
        raise ValueError("bin width must be > 0")
    span = max(t_end - t0, 0.0)
    nbins = max(1, int(span / bin_s + 0.999999))
    acc = [0] * nbins
    for t, n in events:
        i = int((t - t0) / bin_s)
        if 0 <= i < nbins:
            acc[i] += n
        elif i >= nbins and t <= t_end + 1e-9:  # exactly at the end of the last bin
            acc[-1] += n
    out = []
    for i, n in enumerate(acc):
        width = min(bin_s, span - i * bin_s) if i == nbins - 1 else bin_s
        width = max(width, 1e-9)
        out.append([round(i * bin_s, 6), round(n * 8 / width, 1)])
    return out


def peak_bps(events: list[tuple[float, int]], t0: float, t_end: float, window_s: float) -> float:
    """Highest goodput over any full ``window_s`` bin (0 when the run is shorter)."""
    if t_end - t0 < window_s:
        return 0.0
    full = int((t_end - t0) / window_s)
    rows = timeline(events, t0, t0 + full * window_s, window_s)
    return max((r[1] for r in rows), default=0.0)


# --- where am I ----------------------------------------------------------------------------------


def netns_inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def detect_host(lab_state: Any) -> int | None:
    """The host of the lab whose namespace this process runs in, or None."""
    me = netns_inode("/proc/thread-self/ns/net")
    plan = lab_state.plan
    for h in range(plan.host_count):
        if netns_inode(f"/run/netns/{plan.namespace(plan.host_name(h))}") == me:
            return h
    return None


def parse_host(plan: Any, text: str) -> int:
    """A host given as ``h3``, ``3`` or its management address."""
    t = text.strip()
    if t.isdigit():
        h = int(t)
    elif t.startswith("h") and t[1:].isdigit():
        h = int(t[1:])
    else:
        for h in range(plan.host_count):
            if plan.mgmt_address(h) == t:
                return h
        raise ValueError(
            f"{text!r} is neither a host (h0..h{plan.host_count - 1}) nor a host's management address"
        )
    if not 0 <= h < plan.host_count:
        raise ValueError(f"host {text} is not in the lab (h0..h{plan.host_count - 1})")
    return h


# --- control channel ----------------------------------------------------------------------------


#: the line :func:`listen_announced` prints; group 1 is the port
LISTENING = re.compile(r"listening on \[[^\]]*\]:(\d+)")


def announced_port(p: subprocess.Popen[Any], err: IO[str], timeout_s: float) -> int | None:
    """The port process ``p`` announced on its stderr (``err``, a file it writes to), or None
    when it ended first or said nothing within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        err.seek(0)
        m = LISTENING.search(err.read())
        if m:
            return int(m.group(1))
        if p.poll() is not None:
            break
        time.sleep(0.02)
    return None


async def listen_announced(addr: str, port: int, who: str) -> control.Listener:
    """Listen on ``[addr]:port`` and say so on stderr; ``mrc-bench`` run parses this line
    ("listening on [addr]:port") to learn the port when it was 0."""
    listener = await control.listen(addr, port)
    print(
        f"mrc-bench {who} listening on [{addr}]:{listener.port}",
        file=sys.stderr,
        flush=True,
    )
    return listener

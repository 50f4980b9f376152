"""Wire counters of a write, sampled without a process.

- :class:`NetDev` reads a namespace's ``/proc/net/dev`` without a process: the file is opened
  once from inside the namespace (``setns`` in this thread), and a ``/proc/net`` file keeps
  the namespace it was opened in.
- :class:`Watch` samples the source host's NIC transmit bytes and the destination's receive
  bytes every ``poll_s`` in a thread. The first sample at which the source has sent more
  than ``START_BYTES`` since the previous one marks the start of the write on this
  process's clock (the fault schedule counts from it): QP set-up over the management
  network sends nothing on the NIC ports, so that is when data starts to flow.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from lab.fabric.netns import in_netns
from lab.fabric.state import LabState

START_BYTES = 64 * 1024  # > this much sent on the NIC ports within one poll = data flows


class NetDev:
    """Byte counters of the interfaces of one namespace, read from an fd opened inside it."""

    def __init__(self, netns: str) -> None:
        with in_netns(netns):
            self._fd = os.open("/proc/thread-self/net/dev", os.O_RDONLY)

    def read(self) -> dict[str, tuple[int, int]]:
        """{ifname: (rx_bytes, tx_bytes)}"""
        os.lseek(self._fd, 0, os.SEEK_SET)
        chunks = []
        while True:
            b = os.read(self._fd, 65536)
            if not b:
                break
            chunks.append(b)
        return parse_net_dev(b"".join(chunks).decode())

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


def parse_net_dev(text: str) -> dict[str, tuple[int, int]]:
    """``/proc/net/dev`` -> {ifname: (rx_bytes, tx_bytes)}."""
    out = {}
    for line in text.splitlines()[2:]:
        if ":" not in line:
            continue
        name, rest = line.split(":", 1)
        f = rest.split()
        if len(f) >= 9:
            out[name.strip()] = (int(f[0]), int(f[8]))
    return out


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of the watch: when (both clocks), the source's NIC bytes sent and the
    destination's received."""

    t_mono: float
    t_unix: float
    src_tx: int
    dst_rx: int


class Watch:
    """Samples src tx / dst rx bytes on the NIC ports; detects the start of the write."""

    def __init__(self, state: LabState, src: str, dst: str, poll_s: float = 0.05) -> None:
        prefix = f"{state.name}-p"  # NIC ports: <name>-p<plane>
        self.prefix = prefix
        self.src = NetDev(state.namespace(src))
        self.dst = NetDev(state.namespace(dst))
        self.poll_s = poll_s
        self.samples: list[Sample] = []
        self.started = threading.Event()
        self.start_mono: float | None = None
        self.start_unix: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mrc-watch", daemon=True)

    def _sum(self, dev: NetDev, which: int) -> int:
        return sum(v[which] for k, v in dev.read().items() if k.startswith(self.prefix))

    def sample(self) -> Sample:
        return Sample(time.monotonic(), time.time(), self._sum(self.src, 1), self._sum(self.dst, 0))

    def __enter__(self) -> Watch:
        self.samples.append(self.sample())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.src.close()
        self.dst.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            s = self.sample()
            prev = self.samples[-1]
            self.samples.append(s)
            if self.start_mono is None and s.src_tx - prev.src_tx > START_BYTES:
                # Data began somewhere in (prev, s]: take the middle.
                self.start_mono = (prev.t_mono + s.t_mono) / 2
                self.start_unix = (prev.t_unix + s.t_unix) / 2
                self.started.set()

    def rate_bps(self, window_s: float = 1.0) -> float:
        """Destination receive rate on the wire over the last ``window_s`` (headers included)."""
        if len(self.samples) < 2:
            return 0.0
        last = self.samples[-1]
        first = next(
            (s for s in self.samples if s.t_mono >= last.t_mono - window_s), self.samples[0]
        )
        dt = last.t_mono - first.t_mono
        return (last.dst_rx - first.dst_rx) * 8 / dt if dt > 0 else 0.0

    def wire_timeline(self, t0_unix: float, bin_s: float) -> list[list[float]]:
        """Destination wire receive rate per bin (headers, retransmissions and control included):
        ``[t_s, bps]`` with t on the bench's timeline clock."""
        out: list[list[float]] = []
        if not self.samples:
            return out
        t_end = self.samples[-1].t_unix - t0_unix
        k = 0
        t = 0.0
        while t + bin_s <= t_end:
            a = _interp(self.samples, t0_unix + t)
            b = _interp(self.samples, t0_unix + t + bin_s)
            out.append([round(t, 4), round((b - a) * 8 / bin_s)])
            k += 1
            t = k * bin_s
        return out


def _interp(samples: Sequence[Sample], t_unix: float) -> float:
    """dst rx bytes at t_unix, linear between samples."""
    if t_unix <= samples[0].t_unix:
        return samples[0].dst_rx
    for a, b in zip(samples, samples[1:], strict=False):
        if a.t_unix <= t_unix <= b.t_unix:
            f = (t_unix - a.t_unix) / (b.t_unix - a.t_unix) if b.t_unix > a.t_unix else 0.0
            return a.dst_rx + f * (b.dst_rx - a.dst_rx)
    return samples[-1].dst_rx

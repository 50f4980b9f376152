"""Congestion control: a small plug-in interface, NSCC (Ultra Ethernet's window rule) and a
fixed window, and a registry so a user can plug an algorithm in by name.

An algorithm owns ``cwnd_bytes``; the QP sends while ``inflight < cwnd_bytes`` and feeds the
algorithm one :class:`AckSample` per acknowledgment, plus trims (NACK TRIMMED /
TRIMMED_LASTHOP), timeouts and the receiver's window penalty.

NSCC (see docs/transport.md for the constants and why): with ``qdelay = rtt - min_rtt``
(``min_rtt``: the smallest RTT measured, starting from the configured base RTT),

=====  ===================  ==========================================================
ECN    qdelay vs target      action
=====  ===================  ==========================================================
no     below                 proportional increase: ``+ pi_gain * (1 - qdelay/target) * acked``
no     above                 fair increase: ``+ fi_mtus * mtu * acked / cwnd`` (~fi_mtus MTU/RTT)
yes    above                 multiplicative decrease: ``* (1 - min(md_max, md_gain*(q-t)/q))``,
                             at most once per base RTT
yes    below                 no change
=====  ===================  ==========================================================

The target queueing delay is ``max(target_rtt_frac * min_rtt, target_pkts * s_b)``, where
``s_b`` is one packet's serialisation time at the path's bottleneck (``bottleneck_bps``, or
bounded from the measured base RTT).  Under spraying every path holds its own queue, counted
in whole packets: a target shorter than a few packet times at a slow path would call a
queue of one packet "too long" and cut the window on every ECN mark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from mrcnic.wire import fast_constructor

#: wire bytes of a data packet besides its payload: Ethernet 14 + IPv6 40 + UDP 8 +
#: BTH/METH/timestamp/RETH 40 + ICRC 4
HEADER_BYTES = 106


@dataclass(frozen=True, slots=True)
class CcParams:
    """What every algorithm is told about its QP at creation."""

    mtu_bytes: int  # payload bytes per packet
    line_rate_bps: float  # sum of the QP's port rates
    base_rtt_s: float  # unloaded fabric RTT (configured estimate; refined by measurement)
    port_rate_bps: float | None = None  # one NIC port's rate (default: line_rate_bps)


@dataclass(frozen=True, slots=True)
class AckSample:
    acked_bytes: int  # newly acknowledged payload bytes
    rtt_s: float | None  # RTT of the packet that triggered the ACK (None if unknown)
    ecn: bool  # the ACK echoes a CE mark
    now_s: float


#: ``new_ack_sample(acked_bytes, rtt_s, ecn, now_s)``: an AckSample, built fast (the QP calls
#: this once per SACK)
new_ack_sample = fast_constructor(AckSample)


class CongestionControl(Protocol):
    name: str
    cwnd_bytes: float

    def on_ack(self, s: AckSample) -> None: ...
    def on_trim(self, last_hop: bool, now_s: float) -> None: ...
    def on_timeout(self, now_s: float) -> None: ...
    def on_rcv_penalty(self, penalty: int, now_s: float) -> None: ...


class FixedWindow:
    """A constant window (default: 1.5 x BDP).  The baseline and a debugging aid."""

    name = "fixed"

    def __init__(self, p: CcParams, window_bytes: float | None = None) -> None:
        bdp = p.line_rate_bps / 8 * p.base_rtt_s
        self.cwnd_bytes = float(
            window_bytes if window_bytes is not None else max(1.5 * bdp, p.mtu_bytes)
        )

    def on_ack(self, s: AckSample) -> None:
        pass

    def on_trim(self, last_hop: bool, now_s: float) -> None:
        pass

    def on_timeout(self, now_s: float) -> None:
        pass

    def on_rcv_penalty(self, penalty: int, now_s: float) -> None:
        pass


class Nscc:
    """NSCC's four-quadrant window rule (Ultra Ethernet network-signal congestion control)."""

    name = "nscc"

    def __init__(
        self,
        p: CcParams,
        *,
        target_qdelay_s: float | None = None,
        target_rtt_frac: float = 0.5,
        target_pkts: float = 4.0,
        bottleneck_bps: float | None = None,
        pi_gain: float = 0.5,
        fi_mtus: float = 1.0,
        md_gain: float = 1.0,
        md_max: float = 0.5,
        trim_md: float = 0.2,
        init_bdp: float = 1.0,
        max_bdp: float = 2.0,
        min_mtus: float = 1.0,
    ) -> None:
        self.mtu = p.mtu_bytes
        self.base_rtt_s = p.base_rtt_s
        self.line_rate_bps = p.line_rate_bps
        bdp = p.line_rate_bps / 8 * p.base_rtt_s
        port = p.port_rate_bps if p.port_rate_bps else p.line_rate_bps
        self.pkt_bits = (p.mtu_bytes + HEADER_BYTES) * 8
        self.port_pkt_s = self.pkt_bits / port  # one packet's serialisation on a NIC port
        self.bottleneck_bps = bottleneck_bps
        self.target_rtt_frac = target_rtt_frac
        self.target_pkts = target_pkts
        self._fixed_target = target_qdelay_s  # None: derived, and refreshed as min_rtt falls
        self.target_qdelay_s = 0.0
        self.pi_gain = pi_gain
        self.fi_mtus = fi_mtus
        self.md_gain = md_gain
        self.md_max = md_max
        self.trim_md = trim_md
        self.max_cwnd = max(max_bdp * bdp, 2 * p.mtu_bytes)
        self.min_cwnd = min_mtus * p.mtu_bytes
        self.cwnd_bytes = min(max(init_bdp * bdp, self.min_cwnd), self.max_cwnd)
        self._last_md_s = -1e30
        self.min_rtt_s = p.base_rtt_s
        # smoothed RTT (RFC 6298 gain): a decrease shows in the feedback one *current* RTT
        # later, so decreases are spaced by it, not by the unloaded min RTT
        self.srtt_s = p.base_rtt_s
        self.decreases = 0
        self._retarget()

    def bottleneck_pkt_s(self) -> float:
        """One packet's serialisation time at the path's bottleneck: from ``bottleneck_bps``
        when configured, else bounded from the base RTT (a store-and-forward path serialises a
        data packet on the sending port, at the bottleneck and on the receiving port, so
        ``min_rtt - 2 * port_pkt_s`` is an upper bound of the bottleneck's share)."""
        if self.bottleneck_bps:
            return max(self.pkt_bits / self.bottleneck_bps, self.port_pkt_s)
        return max(self.port_pkt_s, self.min_rtt_s - 2 * self.port_pkt_s)

    def _retarget(self) -> None:
        if self._fixed_target is not None:
            self.target_qdelay_s = self._fixed_target
        else:
            self.target_qdelay_s = max(
                self.target_rtt_frac * self.min_rtt_s, self.target_pkts * self.bottleneck_pkt_s()
            )

    def _clamp(self) -> None:
        c = self.cwnd_bytes
        if c > self.max_cwnd:
            self.cwnd_bytes = self.max_cwnd
        elif c < self.min_cwnd:
            self.cwnd_bytes = self.min_cwnd

    def on_ack(self, s: AckSample) -> None:
        rtt = s.rtt_s
        if rtt is None:
            return
        if rtt < self.min_rtt_s:
            self.min_rtt_s = rtt
            self._retarget()
        self.srtt_s += 0.125 * (rtt - self.srtt_s)
        qdelay = rtt - self.min_rtt_s
        target = self.target_qdelay_s
        if not s.ecn:
            if qdelay < target:  # proportional increase: faster the emptier the queue
                self.cwnd_bytes += self.pi_gain * (1.0 - qdelay / target) * s.acked_bytes
            else:  # fair increase: about fi_mtus MTU per RTT
                self.cwnd_bytes += self.fi_mtus * self.mtu * s.acked_bytes / self.cwnd_bytes
        elif qdelay >= target and s.now_s - self._last_md_s >= self.srtt_s:
            # multiplicative decrease, at most once per RTT: with spraying some packet sees
            # a queue in nearly every RTT, and decreases spaced by the unloaded RTT (before
            # the first one can show) stacked up to a collapse (measured on the lab's
            # permutation: ~one per min RTT, goodput 0.86 of capacity; 0.88-0.89 spaced
            # by the current RTT)
            cut = min(self.md_max, self.md_gain * (qdelay - target) / max(qdelay, 1e-12))
            self.cwnd_bytes *= 1.0 - cut
            self._last_md_s = s.now_s
            self.decreases += 1
        # ECN with a short queue: transient, no change
        self._clamp()

    def on_trim(self, last_hop: bool, now_s: float) -> None:
        # A trim is a queue overflow: a firmer signal than ECN; decrease once per min RTT
        # (faster than ECN's once per RTT: an incast's last hop marks nothing and trims)
        if now_s - self._last_md_s >= self.min_rtt_s:
            self.cwnd_bytes *= 1.0 - self.trim_md
            self._last_md_s = now_s
            self.decreases += 1
            self._clamp()

    def on_timeout(self, now_s: float) -> None:
        # In MRC a timeout means a dead path (congestion trims, it does not drop): the EV
        # state machine handles it; the window is left alone.
        pass

    def on_rcv_penalty(self, penalty: int, now_s: float) -> None:
        # rcv_cwnd_pen (0-127) from the receiver: cap the window at (1 - pen/128) of its max.
        if penalty > 0:
            cap = self.max_cwnd * (1.0 - penalty / 128.0)
            if self.cwnd_bytes > cap:
                self.cwnd_bytes = cap
                self._clamp()


CcFactory = Callable[..., CongestionControl]
_REGISTRY: dict[str, CcFactory] = {}


def register_cc(name: str, factory: CcFactory) -> None:
    """Make an algorithm available by name: ``factory(params, **options) -> CongestionControl``."""
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"bad congestion control name {name!r}")
    _REGISTRY[name] = factory


def make_cc(name: str, params: CcParams, **options: object) -> CongestionControl:
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown congestion control {name!r}; available: {', '.join(sorted(_REGISTRY))}"
        ) from None
    return factory(params, **options)


def available() -> list[str]:
    return sorted(_REGISTRY)


register_cc("nscc", Nscc)
register_cc("fixed", FixedWindow)

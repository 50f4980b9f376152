"""The RoCEv2 baseline's configuration (``RoceConfig``, mapped from MRC's ``QpConfig``), its
statistics, and the error for MRC-only operations. Constants and their sources:
docs/design/rocev2.md."""

from __future__ import annotations

from dataclasses import dataclass, fields

from mrcnic.errors import MrcError
from mrcnic.transport.qp_types import QpConfig, QpStats


class RoceUnsupportedError(MrcError, NotImplementedError):
    """An MRC-only operation (EV control) asked of a RoCEv2 QP."""


@dataclass(frozen=True, slots=True)
class RoceConfig:
    """Per-QP knobs of the baseline.  Times are seconds in *lab* time; hardware times are
    scaled by ``lab_scale`` (docs/design/rocev2.md)."""

    mtu_bytes: int = 4096
    base_rtt_s: float = 1e-3  # unloaded RTT (the floor of the ACK timeout, the window)
    port: int | None = None  # bind the QP to this port/plane (ibverbs port_num); None: hash
    port_rate_bps: float | None = None  # default: line_rate_bps (the QP's one port)
    ecmp_seed: int = 0  # the switches' hash seed
    ack_every: int = 4  # coalesce: one ACK per this many in-order packets
    ack_delay_s: float | None = None  # default base_rtt_s / 8
    # unacknowledged PSNs: None = the PSN space (2^23 - 1), as a NIC has no write window;
    # bdp_window=True restores the old cap, max(16, 2 x port BDP + ack_every)
    max_outstanding_psns: int | None = None
    bdp_window: bool = False
    local_ack_timeout: int = 1  # IB encoding n: 4.096 us x 2^n of hardware time (1..31)
    ack_timeout_s: float | None = None  # override: the timeout in lab seconds
    max_ack_timeout_s: float = 1.0  # cap of the exponential backoff
    retry_cnt: int = 7  # IB retry_cnt (3 bits): retries (timeouts, NAKs) before RETRY_EXCEEDED
    nak_retries: bool = True  # a NAK (PSN sequence error) uses a retry; False: only timeouts
    lab_scale: float | None = None  # default REFERENCE_PORT_BPS / port rate (1000 at 100 Mb/s)
    dcqcn: bool = True  # CNPs on CE (NP) and rate control on CNPs (RP)
    lossless: bool = False  # data on DSCP LOSSLESS (the PFC class) instead of NO_TRIM
    dcqcn_profile: str = "connectx"  # DCQCN constants: connectx (shipped defaults) or paper
    cnp_interval_s: float | None = None  # default: the profile's (4 us; paper 50 us) x lab_scale
    dcqcn_options: tuple[tuple[str, object], ...] = ()  # DcqcnParams overrides (lab time)
    max_wimm_inflight: int = 64  # advertised only (RC has receive WQEs, not this limit)
    seed: int = 1
    start_psn: int | None = None  # default: random (qp_types.initial_psn)

    @classmethod
    def from_qp_config(cls, cfg: QpConfig) -> RoceConfig:
        """Map the fields MRC's :class:`QpConfig` shares with RoCEv2; ``cc`` ``fixed`` or
        ``none`` turns DCQCN off; ``cc_options`` may set any RoceConfig field by name."""
        kw: dict[str, object] = {
            "mtu_bytes": cfg.mtu_bytes,
            "base_rtt_s": cfg.base_rtt_s,
            "ack_every": cfg.ack_every,
            "ack_delay_s": cfg.ack_delay_s,
            "max_ack_timeout_s": cfg.max_rto_s,
            "retry_cnt": cfg.retry_limit,
            "max_wimm_inflight": cfg.max_wimm_inflight,
            "seed": cfg.seed,
            "start_psn": cfg.start_psn,
            "dcqcn": cfg.cc not in ("fixed", "none"),
        }
        names = {f.name for f in fields(cls)}
        for k, v in cfg.cc_options:
            if k not in names:
                raise ValueError(f"unknown RoCEv2 option {k!r} in cc_options (see RoceConfig)")
            kw[k] = v
        return cls(**kw)  # type: ignore[arg-type]


@dataclass(slots=True)
class RoceStats(QpStats):
    """QpStats plus what only RoCEv2 has.  (``tx_sacks``/``rx_sacks`` stay 0: no SACK.)"""

    tx_acks: int = 0
    rx_acks: int = 0
    rx_out_of_order: int = 0  # dropped at the responder: PSN past the expected one
    rx_stale: int = 0  # ACK/NAK about PSNs already acknowledged, or duplicate NAKs
    nak_retries: int = 0  # NAK rewinds that used one of retry_cnt's retries
    gbn_rewinds: int = 0  # go-back-N on a NAK
    gbn_rewind_psns: int = 0  # PSNs those rewinds committed to resend (snd_max - NAKed PSN)
    timeout_rewind_psns: int = 0  # the same for timeouts (snd_max - snd_una)
    tx_cnps: int = 0
    cnps_suppressed: int = 0  # CE seen within the CNP interval: no CNP
    rx_cnps: int = 0
    rate_cuts: int = 0
    rate_bps: float = 0.0
    min_rate_bps: float = 0.0
    alpha: float = 0.0
    tx_on_down_port: int = 0  # frames handed to a port that is down (lost)

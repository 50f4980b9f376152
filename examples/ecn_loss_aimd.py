"""A user congestion control for MRC in one file: AIMD on ECN echoes and lost packets.

Importing this file registers it as ``"ecn-loss-aimd"``; a QP then runs it with
``QpConfig(cc="ecn-loss-aimd")`` (docs/transport.md, "Writing a congestion control")."""

from collections import Counter

from mrcnic.transport.cc import AckSample, CcBase, CcParams, LossSample, register_cc


class EcnLossAimd(CcBase):
    name = "ecn-loss-aimd"

    def __init__(self, p: CcParams, beta: float = 0.5) -> None:
        self.mtu, self.beta, self.rtt_s = p.mtu_bytes, beta, p.base_rtt_s
        self.cwnd_bytes = max(p.line_rate_bps / 8 * p.base_rtt_s, float(p.mtu_bytes))  # 1 BDP
        self.last_cut_s = -1.0
        self.decreases = self.loss_decreases = 0
        self.losses_by_path: Counter[int] = Counter()  # which fabric paths lose packets

    def on_ack(self, s: AckSample) -> None:
        self.rtt_s = s.rtt_s or self.rtt_s
        if s.ecn:
            self._cut(s.now_s)
        elif s.inflight_bytes + self.mtu >= self.cwnd_bytes:  # grow only while window-limited
            self.cwnd_bytes += self.mtu * s.acked_bytes / self.cwnd_bytes  # +1 MTU per RTT

    def on_loss(self, s: LossSample) -> None:  # found from SACKs, trimmed or timed out
        self.losses_by_path[s.path] += 1
        self.loss_decreases += self._cut(s.now_s)

    def _cut(self, now_s: float) -> bool:
        if now_s - self.last_cut_s < self.rtt_s:  # once per RTT: one congestion event
            return False
        self.cwnd_bytes = max(self.cwnd_bytes * self.beta, float(self.mtu))
        self.last_cut_s, self.decreases = now_s, self.decreases + 1
        return True


register_cc("ecn-loss-aimd", EcnLossAimd)

"""A user congestion control for MRC in one file: AIMD on ECN echoes and lost packets.

Importing this file registers it as ``"ecn-loss-aimd"``; a QP then runs it with
``QpConfig(cc="ecn-loss-aimd")`` (docs/design/transport.md, "Writing a congestion control"), and
any command with ``--plugin examples/ecn_loss_aimd.py --cc ecn-loss-aimd``. Run as a program,
it puts itself beside NSCC on a simulated permutation with a congested, lossy fabric:

    .venv/bin/python examples/ecn_loss_aimd.py
"""

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


def main() -> None:
    from mrcnic.sim.clos import ClosSpec, run_permutation
    from mrcnic.transport.qp_types import QpConfig

    # 8 hosts on 4 planes, the T0-T1 links at half the hosts' rate (2:1 oversubscribed) and
    # 0.1% random loss on every uplink: ECN marks and losses for the CC to answer
    for cc in ("nscc", "ecn-loss-aimd"):
        spec = ClosSpec(planes=4, t0=4, t1=2, hosts_per_t0=2, size=2 << 20, loss=0.001,
                        path_rate_bps=50e6, qp=QpConfig(cc=cc))  # fmt: skip
        r = run_permutation(spec)
        print(f"{cc:>14}: goodput {r['goodput_fraction']:.3f} of the hosts' capacity, "
              f"p99 completion {r['fct_p99_s'] * 1e3:.0f} ms, {r['retransmissions']} "
              f"retransmissions, {r['ecn_marks']} ECN marks, verified {r['verified']}")  # fmt: skip


if __name__ == "__main__":
    main()

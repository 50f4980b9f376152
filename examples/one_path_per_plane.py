"""A user path policy: spray each plane's EVs over its least-used healthy path only.

Load it into any command with ``--plugin examples/one_path_per_plane.py --path-policy
one-path``; both engines (the C send engine too) deal from the groups it returns. Run as a
program, it puts itself beside MRC's own policy on a simulated permutation:

    .venv/bin/python examples/one_path_per_plane.py
"""

from mrcnic.transport.ev_machine import EvState
from mrcnic.transport.path_policy import arrange, register_path_policy


class OnePathPerPlane:
    name = "one-path"

    def __init__(self, seed: int = 0) -> None:
        self.picks = 0  # how often the table asked (a test reads it)

    def groups(self, t):
        self.picks += 1
        per_plane = []
        for plane, paths in enumerate(t.plane_paths):
            good = {
                p: [s for s in slots if t.state[s] is EvState.GOOD] for p, slots in paths.items()
            }
            usable = [p for p in sorted(good, key=t.tiebreak.__getitem__) if good[p]]
            down = t.plane_down[plane] or not usable
            per_plane.append([] if down else good[usable[0]])
        return arrange(t, per_plane)

    def on_input(self, t, slot, inp) -> bool:
        return False  # new groups come with every state change anyway


register_path_policy("one-path", OnePathPerPlane)


def main() -> None:
    from mrcnic.sim.clos import ClosSpec, run_permutation
    from mrcnic.transport.ev import EvConfig
    from mrcnic.transport.qp_types import QpConfig

    # 8 hosts, 4 planes of 4 T1s: MRC sprays every path, this policy one path per plane
    for policy in ("mrc", "one-path"):
        qp = QpConfig(ev=EvConfig(path_policy=policy))
        r = run_permutation(ClosSpec(planes=4, t0=4, t1=4, hosts_per_t0=2, size=2 << 20, qp=qp))
        print(f"{policy:>8}: goodput {r['goodput_fraction']:.3f}, the busiest T0-T1 link "
              f"{r['link_imbalance']:.2f}x the mean, verified {r['verified']}")  # fmt: skip


if __name__ == "__main__":
    main()

"""A fault schedule: the same steps the lab plays with `mrc-lab` and `mrc-sim --fault` plays
in virtual time, here on a simulated permutation, MRC beside the RoCEv2 baseline.

    .venv/bin/python examples/fault_schedule.py
    .venv/bin/python examples/fault_schedule.py "reboot:p1-t1-0@20ms+100ms" "port:h0,2@30ms"

One fault per argument, in the text form of ``mrc-sim --fault`` (mrcnic/faultplan.py):
``link:A,B@START-END`` or ``@START+FOR``, ``reboot:SWITCH@START+DOWN``, ``port:HOST,PLANE@...``,
``loss:A,B=1%@...``, ``flap:A,B,5x10ms@START``.
"""

import sys

from mrcnic.faultplan import parse_steps
from mrcnic.sim.clos import ClosSpec, run_permutation

DEFAULT = ("link:p0-t0-0,p0-t1-0@20ms+60ms", "flap:p1-t0-1,p1-t1-1,3x10ms@40ms")


def main(schedule: tuple[str, ...] = DEFAULT) -> None:
    steps = tuple(step for text in schedule for step in parse_steps(text))
    print("schedule:", ", ".join(s.text for s in steps))
    for transport in ("mrc", "rocev2"):
        spec = ClosSpec(planes=4, t0=2, t1=2, hosts_per_t0=2, size=4 << 20, faults=steps,
                        transport=transport, timeline_s=0.01)  # fmt: skip
        r = run_permutation(spec)
        capacity_bps = r["hosts"] * r["host_capacity_bps"]  # the timeline is the aggregate
        bins = " ".join(f"{g / capacity_bps:.2f}" for _t, g in r["timeline"][:12])
        recovery = r["recovery_s"]
        print(f"{transport:>6}: goodput {r['goodput_fraction']:.3f}, QP errors {r['qp_errors']}, "
              f"recovered in {'-' if recovery is None else f'{recovery * 1e3:.0f} ms'}, "
              f"verified {r['verified']}")  # fmt: skip
        print(f"        goodput per 10 ms, of the hosts' capacity: {bins}")


if __name__ == "__main__":
    main(tuple(sys.argv[1:]) or DEFAULT)

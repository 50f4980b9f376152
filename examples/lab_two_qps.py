"""Two QPs between lab hosts, on real ports: the same calls as examples/sim_two_qps.py, with
each Device bound to its host's veths (one AF_PACKET socket pair per plane, opened in the
host's namespace) by the NIC's asyncio shell. Both NICs run in this one process.

    sudo .venv/bin/mrc-lab up --lab mrcdemo --rate 20Mbit
    sudo .venv/bin/python examples/lab_two_qps.py --lab mrcdemo --src h0 --dst h3 --size 8M
    sudo .venv/bin/mrc-lab down --lab mrcdemo

(`mrc-bench write` does the same with a process per host and a control channel between them.)
"""

import argparse
import os
import sys
import time

from lab.fabric.host import LabHost
from lab.fabric.netns import LabError
from mrcnic.io.aio import run
from mrcnic.units import parse_size
from mrcnic.verbs import QpAttributes, RemoteBuffer, WcStatus


async def write(lab: str, src: str, dst: str, size: int) -> int:
    a, b = LabHost.load(lab, src), LabHost.load(lab, dst)
    target = bytearray(size)
    mr = b.device.register(target)
    qa, qb = a.device.create_qp(a.qp_config()), b.device.create_qp(b.qp_config())
    qa.connect(QpAttributes.from_json(qb.export()))
    qb.connect(QpAttributes.from_json(qa.export()))
    data = os.urandom(size)
    async with a.nic() as nic_a, b.nic():  # sockets opened in h0's and h3's namespaces
        t0 = time.monotonic()
        qa.post_write(1, data, RemoteBuffer.of(mr))
        done: list = []
        ok = await nic_a.wait_for(lambda: bool(done.extend(qa.poll_cq()) or done), timeout_s=60)
        elapsed_s = time.monotonic() - t0
    if not ok or done[0].status is not WcStatus.SUCCESS:
        print(f"the write did not complete: {done or 'timed out'}", file=sys.stderr)
        return 1
    if bytes(target) != data:
        print("the bytes at the server differ from those sent", file=sys.stderr)
        return 1
    capacity_bps = sum(nic_a.ports[p].rate_bps for p in range(len(nic_a.ports)))
    st = qa.stats()
    print(f"{src} -> {dst}: {size:,} bytes verified in {elapsed_s:.2f} s, "
          f"{size * 8 / elapsed_s / 1e6:.1f} Mb/s ({size * 8 / elapsed_s / capacity_bps:.2f} of "
          f"{len(nic_a.ports)} ports' capacity), {st.retransmissions} retransmissions")  # fmt: skip
    print("paths (EVs) by state:", qa.ev_states())
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lab", default="mrc", help="the lab's name [mrc]")
    ap.add_argument("--src", default="h0", help="the writing host [h0]")
    ap.add_argument("--dst", default="h3", help="the host written to [h3]")
    ap.add_argument("--size", type=parse_size, default=8 << 20, help="bytes, e.g. 8M [8M]")
    a = ap.parse_args(argv)
    if a.size < 1:
        ap.error(f"--size {a.size}: at least 1 byte")
    try:
        return run(write(a.lab, a.src, a.dst, a.size))
    except (LabError, ValueError) as e:  # no such lab or host: say so, no traceback
        print(f"lab_two_qps: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

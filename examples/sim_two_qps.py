"""Two QPs in the simulator: a write, a write-with-immediate, the statistics, a path taken
out of use and given back, and a write the server does not allow (docs/api.md walks through
the same steps). Virtual time, no root, no sockets:

    .venv/bin/python examples/sim_two_qps.py
"""

from mrcnic.verbs import QpAttributes, RemoteBuffer, SimNetwork, WcStatus


def main() -> None:
    net = SimNetwork(seed=7)  # two hosts, 2 planes x 2 paths
    client, server = net.devices

    target = bytearray(256 * 1024)
    mr = server.register(target)  # the server offers a buffer (R_Key, VA, length)
    offer = RemoteBuffer.of(mr).to_json()

    cqp, sqp = client.create_qp(), server.create_qp()  # attributes exchanged out of band
    cqp.connect(QpAttributes.from_json(sqp.export()))
    sqp.connect(QpAttributes.from_json(cqp.export()))

    remote = RemoteBuffer.from_json(offer)
    data = bytes(range(256)) * 1024
    cqp.post_write(1, data[:200_000], remote)
    cqp.post_write(2, data[200_000:], remote, offset=200_000, imm=0xC0FFEE)

    done, imms = [], []

    def client_has(n: int) -> bool:
        done.extend(cqp.poll_cq())
        return len(done) >= n

    def server_has(n: int) -> bool:
        imms.extend(sqp.poll_recv())
        return len(imms) >= n

    net.run_until(lambda: client_has(2))
    net.run_until(lambda: server_has(1))
    assert [wc.status for wc in done] == [WcStatus.SUCCESS, WcStatus.SUCCESS]
    assert imms[0].imm == 0xC0FFEE and target == bytearray(data)
    st = cqp.stats()
    print(f"wrote {len(data):,} bytes in {st.tx_data_packets} packets "
          f"({st.retransmissions} retransmitted), srtt {st.srtt_s * 1e3:.2f} ms, "
          f"immediate 0x{imms[0].imm:X} at the server")  # fmt: skip
    print("paths (EVs) by state:", cqp.ev_states())

    ev = cqp.ev_stats()[0].ev  # a controller takes one path out of use, then gives it back
    cqp.deny_ev(ev)
    cqp.allow_ev(ev)
    changes = [f"{e.old.name} -> {e.new.name}" for e in cqp.poll_events()]
    print(f"EV {ev:#x}: {', '.join(changes)}")

    bad = RemoteBuffer(remote.va, remote.rkey ^ 1, remote.length)  # a wrong R_Key
    cqp.post_write(3, b"x" * 100, bad)
    net.run_until(lambda: client_has(3))
    print(f"a write with a wrong R_Key: {done[2].status.name}, QP now {cqp.state.name}")


if __name__ == "__main__":
    main()

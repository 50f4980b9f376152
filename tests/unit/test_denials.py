"""lab/fabric/denials.py: which links an EV's path crosses, and a NIC's Denier setting DENIED exactly
the EVs over a listed link (and GOOD again when it is no longer listed), never all of a
QP's EVs, never a RoCEv2 QP's."""

from __future__ import annotations

from types import SimpleNamespace

from lab.fabric import denials
from mrcnic.wire import usid

SHAPE = usid.ClosShape(planes=2, t0=2, t1=2, hosts_per_t0=2)


def test_ev_links_follow_the_address_plan():
    ev = 3  # plane 1, T1 1
    assert (usid.ev_plane(SHAPE, ev), usid.ev_t1(SHAPE, ev)) == (1, 1)
    assert denials.ev_links(SHAPE, 0, 3, ev) == {
        denials.link("h0", "p1-t0-0"), denials.link("h3", "p1-t0-1"),
        denials.link("p1-t0-0", "p1-t1-1"), denials.link("p1-t0-1", "p1-t1-1"),
    }  # fmt: skip
    assert denials.ev_links(SHAPE, 0, 1, ev) == {  # same T0: no T1
        denials.link("h0", "p1-t0-0"), denials.link("h1", "p1-t0-0")}  # fmt: skip


class FakeQp:
    def __init__(self, peer_host: int, evs: list[int], transport: str = "mrc") -> None:
        self.core = SimpleNamespace(peer=SimpleNamespace(host=peer_host))
        self.transport = transport
        self.state = dict.fromkeys(evs, "GOOD")

    def ev_statuses(self):
        return dict(self.state)

    def deny_ev(self, ev):
        self.state[ev] = "DENIED"

    def allow_ev(self, ev):
        self.state[ev] = "GOOD"


def test_denier_denies_then_restores(tmp_path):
    qp = FakeQp(3, list(range(8)))
    roce = FakeQp(3, [0], transport="rocev2")
    dev = SimpleNamespace(net=SimpleNamespace(shape=SHAPE, host=0), qps={7: qp, 8: roce})
    d = denials.Denier(tmp_path)
    d.apply(dev)
    assert set(qp.state.values()) == {"GOOD"}
    denials.write(tmp_path, [("p0-t0-0", "p0-t1-1")])  # plane 0, T1 1: EVs 2 and 6
    d.apply(dev)
    assert sorted(ev for ev, s in qp.state.items() if s == "DENIED") == [2, 6]
    assert roce.state == {0: "GOOD"} and d.denials == 2
    denials.clear(tmp_path)
    d.apply(dev)
    assert set(qp.state.values()) == {"GOOD"} and d.restored == 2


def test_denier_never_denies_every_path(tmp_path):
    qp = FakeQp(3, list(range(8)))
    dev = SimpleNamespace(net=SimpleNamespace(shape=SHAPE, host=0), qps={7: qp})
    denials.write(tmp_path, [("h0", "p0-t0-0"), ("h0", "p1-t0-0")])  # both of h0's ports
    denials.Denier(tmp_path).apply(dev)
    assert set(qp.state.values()) == {"GOOD"}

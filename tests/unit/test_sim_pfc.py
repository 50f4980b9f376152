"""Priority flow control in the whole-fabric simulator (mrcnic.sim.pfc, ``mrc-sim --pfc``):
the lossless class on one link and one switch, and RoCEv2 as deployed on a whole Clos."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest

from mrcnic.sim import collectives as co
from mrcnic.sim import transfer
from mrcnic.sim.clos import ClosFabric, ClosSpec, run_permutation
from mrcnic.sim.fabric import EventLoop, LinkSpec
from mrcnic.sim.pfc import (
    LOSSLESS_DSCP,
    REACTION_S,
    Hop,
    Ingress,
    Paused,
    PfcHostPort,
    PfcLink,
    PfcSpec,
    attach,
    route,
)
from mrcnic.wire import layout
from mrcnic.wire import pfc as wire_pfc

VOLATILE = ("wall_s", "cpu_s", "sim_pps")
MRC_DSCP = int(layout.Dscp.TRIMMABLE)


def _frame(dscp: int, tag: int, n: int = 1000) -> bytes:
    b = bytearray(n)
    layout.set_dscp(b, dscp)
    b[-1] = tag
    return bytes(b)


class _Switch:
    """Link ``a`` (1 GB/s) into a switch whose egress ``b`` drains at a tenth of that: the
    in-port of ``a`` at the switch pauses ``a``."""

    def __init__(self, spec: PfcSpec) -> None:
        self.got: list[tuple[float, bytes]] = []
        self.loop = EventLoop(lambda _h, _p, f, t: self.got.append((t, f)), seed=1)
        self.a = PfcLink("a", LinkSpec(8e9, 1e-6), self.loop, None)
        self.b = PfcLink("b", LinkSpec(0.8e9, 1e-6), self.loop, None)
        self.ingress = attach(spec, self.loop, self.a, 1e-6)
        never = PfcSpec(1 << 40, 1, 1 << 40)  # the in-port before a: never pauses
        src = Ingress(never, self.loop, Paused(self.loop, lambda _t: None), 8e9, 0.0)
        self.hops = route([Hop(self.a, src, 0, 0, 0), Hop(self.b, self.ingress, 1, 0, 0)])

    def send(self, frames: list[bytes], at_s: float = 0.0) -> None:
        for f in frames:
            self.loop.at(at_s, lambda f=f: self.hops[0].transmit(at_s, f, self.loop.rng))


class _Recorder:
    """Stands between an in-port and the :class:`Paused` it acts on: what each PFC frame
    found when it arrived (time, the in-port's bytes, frames the upstream had sent)."""

    def __init__(self, sw: _Switch) -> None:
        self.sw, self.inner = sw, sw.a.pfc
        self.seen: list[tuple[str, float, int, int]] = []

    def _note(self, kind: str) -> None:
        sw = self.sw
        self.seen.append((kind, sw.loop.now, sw.ingress.queued_bytes, sw.a.tx_packets))

    def pause(self, until_s: float) -> None:
        self._note("pause")
        self.inner.pause(until_s)

    def resume(self) -> None:
        self._note("resume")
        self.inner.resume()


def test_a_pause_holds_the_upstream_lossless_class_and_xon_releases_it() -> None:
    spec = PfcSpec(xoff_bytes=4000, xon_bytes=2000, headroom_bytes=20_000)
    sw = _Switch(spec)
    rec = _Recorder(sw)
    ing = sw.ingress
    ing.upstream = rec  # type: ignore[assignment]
    frames = [_frame(LOSSLESS_DSCP, i) for i in range(40)]
    sw.send(frames)
    peak = 0

    def watch() -> None:
        nonlocal peak
        peak = max(peak, ing.queued_bytes)
        if sw.loop.pending:
            sw.loop.at(sw.loop.now + 1e-7, watch)

    sw.loop.at(0.0, watch)
    sw.loop.run(1.0)
    assert [f for _t, f in sw.got] == frames  # all delivered, in order, none dropped
    assert ing.lossless_drops == 0 and sw.a.drops == sw.b.drops == 0
    assert [k for k, *_ in rec.seen[:2]] == ["pause", "resume"]
    assert ing.pause_tx >= 1 and ing.resume_tx >= 1 and sw.a.pfc.paused_s > 0
    (_, t_pause, _, sent_pause), (_, t_resume, at_xon, sent_resume) = rec.seen[:2]
    # a sends a frame a microsecond: unpaused it would have sent ~20 in this time; paused, it
    # only finished the one it was sending
    assert t_resume - t_pause > 15e-6 and sent_resume - sent_pause <= 1
    assert at_xon <= spec.xon_bytes  # resumed at XON
    # above XOFF by at most what the headroom is sized for: a's round trip and reaction
    # at its rate, a frame at each end
    room = wire_pfc.headroom_bytes(8e9, REACTION_S, 1e-6, 1000)
    assert spec.xoff_bytes < peak <= spec.xoff_bytes + room


def test_mrc_frames_pass_a_paused_link_and_lossless_ones_wait() -> None:
    sw = _Switch(PfcSpec(1 << 30, 1 << 29, 1 << 30))
    sw.a.pfc.pause(until_s=1.0)  # paused until 1 s, or the resume at 0.5 s
    lossless = [_frame(LOSSLESS_DSCP, i) for i in range(3)]
    mrc = [_frame(MRC_DSCP, 10 + i) for i in range(3)]
    sw.send(lossless + mrc)
    sw.loop.run(0.4)
    assert [f for _t, f in sw.got] == mrc
    sw.loop.at(0.5, sw.a.pfc.resume)
    sw.loop.run(1.0)
    assert [f for _t, f in sw.got] == mrc + lossless
    assert all(t > 0.5 for t, f in sw.got[3:])
    assert sw.a.pfc.paused_s == pytest.approx(0.5)


def test_a_pause_that_is_not_refreshed_runs_out() -> None:
    sw = _Switch(PfcSpec(1 << 30, 1 << 29, 1 << 30))
    sw.a.pfc.pause(until_s=0.2)
    sw.send([_frame(LOSSLESS_DSCP, 1)])
    sw.loop.run(1.0)
    assert len(sw.got) == 1 and sw.got[0][0] > 0.2


def test_a_nic_port_holds_lossless_frames_while_paused_and_sends_the_rest() -> None:
    got: list[bytes] = []
    loop = EventLoop(lambda _h, _p, f, _t: got.append(f), seed=1)
    port = PfcHostPort("h0-p0-nic", 8e9, loop)
    port.pfc.pause(until_s=1.0)
    ctrl = _frame(int(layout.Dscp.CONTROL), 1, 100)
    data = _frame(LOSSLESS_DSCP, 2)
    mrc = _frame(MRC_DSCP, 3)
    for f in (data, ctrl, mrc):
        port.enqueue(0.0, f, (), 0, 0)  # no stages: delivered as it leaves the port
    loop.run(0.5)
    assert got == [ctrl, mrc]
    loop.at(0.5, port.pfc.resume)
    loop.run(1.0)
    assert got == [ctrl, mrc, data]


# --- on the whole fabric ------------------------------------------------------------------------


def _spec(pfc: bool, transport: str = "rocev2", **kw) -> ClosSpec:
    """8 hosts: 4 T0 x 2, 2 T1, 2 planes."""
    base = dict(planes=2, t0=4, t1=2, hosts_per_t0=2, size=32 << 10, transport=transport, seed=3)
    return ClosSpec(**{**base, **kw}, pfc=pfc)


INCAST = co.IncastParams(senders=(0, 2, 4), dst=7, victim=(1, 6), qps=2, duration_s=0.01)


def test_rocev2_incast_with_pfc_pauses_and_drops_nothing() -> None:
    lossy = co.Incast(_spec(False), INCAST).run()
    assert lossy["drops"] > 0 and "pfc" not in lossy  # the baseline this fixes
    r = co.Incast(_spec(True), INCAST).run()
    assert r["verified"] and r["qp_errors_total"] == 0, r["qp_error_reasons"]
    assert r["pfc"] is True and r["drops"] == 0 and r["pfc_lossless_drops"] == 0
    assert r["pfc_pauses"] > 0 and r["pfc_resumes"] > 0 and r["pfc_paused_s"] > 0
    # pauses spread back to the senders' NIC ports
    assert r["pfc_paused_nic_s"] > 0
    assert any(x["name"].endswith("-nic") for x in r["pfc_paused_links"])
    assert r["retransmissions"] == 0 and r["timeouts"] == 0


def test_mrc_is_never_paused() -> None:
    # one T1 for two hosts per T0, small queues: congested, trimmed
    kw = dict(t1=1, size=256 << 10, queue_bytes=16 << 10)
    spec = _spec(True, "mrc", **kw)
    r = run_permutation(spec)
    assert r["verified"] and r["trims"] > 0
    assert r["pfc"] is True and r["pfc_pauses"] == 0 and r["pfc_paused_s"] == 0
    plain = run_permutation(_spec(False, "mrc", **kw))
    keep = {k: v for k, v in r.items() if not k.startswith("pfc") and k not in VOLATILE}
    assert keep == {k: v for k, v in plain.items() if k not in VOLATILE}
    fab = ClosFabric(spec, lambda *_: None)
    assert not fab.pfc  # nothing lossless to pause: MRC keeps the plain links


def test_same_seed_same_result_with_pfc() -> None:
    def run() -> str:
        r = co.Incast(_spec(True), INCAST).run()
        return json.dumps({k: v for k, v in r.items() if k not in VOLATILE})

    assert run() == run()


def test_derived_thresholds_are_the_labs_rule() -> None:
    s = _spec(True, queue_bytes=1 << 20, port_rate_bps=100e9, prop_s=4e-6)
    ps = s.pfc_spec
    assert (ps.xoff_bytes, ps.xon_bytes) == (512 << 10, 256 << 10)
    # a round trip of a 2 us link and 1 us of reaction at 100 Gb/s, a frame at each end
    assert ps.headroom_bytes == int(12.5e9 * 5e-6 + 2 * (4096 + 110))
    small = _spec(True, queue_bytes=8 << 10).pfc_spec
    assert small.xoff_bytes == 4 * (4096 + 110)  # never under four full frames
    given = _spec(True, pfc_xoff_bytes=9000, pfc_xon_bytes=3000).pfc_spec
    assert (given.xoff_bytes, given.xon_bytes) == (9000, 3000)


def _cli(*argv: str) -> tuple[int, dict]:
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = transfer.main([*argv, "--json"])
    return rc, json.loads(buf.getvalue())


def test_the_cli_runs_pfc_and_p2p_refuses_it() -> None:
    rc, r = _cli(
        *("--workload", "incast", "--transport", "rocev2", "--pfc", "--t0", "2"),
        *("--hosts-per-t0", "4", "--planes", "2", "--paths-per-plane", "2"),
        *("--senders", "h0,h1,h2", "--dst", "h4", "--size", "32K", "--duration", "5ms"),
        *("--scale", "lab"),
    )
    assert rc == 0 and r["pfc"] is True and r["drops"] == 0 and r["pfc_pauses"] > 0
    for argv in (
        ("--pfc", "--size", "16K"),  # p2p
        ("--workload", "permutation", "--pfc", "--fault", "link:p0-t0-0,p0-t1-0@1ms"),
    ):
        err = io.StringIO()
        with (
            pytest.raises(SystemExit) as e,
            redirect_stdout(io.StringIO()),
            redirect_stderr(err),
        ):
            transfer.main(list(argv))
        assert e.value.code == 2 and ("--pfc" in err.getvalue() or "PFC" in err.getvalue())

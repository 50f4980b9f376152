"""Fault injection with the plain Linux tools, each printing the exact command it runs.

Every fault has an inverse that restores the lab's static configuration:

============================  =============================================================
fault                         command(s)
============================  =============================================================
link down A B                 ``ip -n NS link set dev IF down`` on the *switch* end (the upper
                              tier: the T0 of a host link, the T1 of a fabric link), so host
                              configuration is never touched
link up A B                   ``ip -n NS link set dev IF up``; kernel mode then re-adds that
                              port's neighbour entry and routes (the kernel flushed them)
flap A B                      down/up ``--count`` times, each half of ``--period``
loss A B --loss X%            ``ip netns exec NS nft '...numgen random mod 100 < X drop'`` in
                              a netdev *egress* chain on both ends (both directions)
loss A B --clear              ``ip netns exec NS nft 'add table ...; delete table ...'``
shape A B --rate R            ``tc -n NS qdisc replace dev IF root tbf rate R ...`` both ends
shape A B --clear             back to the link-rate tbf (kernel switch ports) or no qdisc
reboot SWITCH                 python: SIGTERM the recorded PID, wait, start it again with the
                              same config; kernel: every port down, wait, ports up + tables
port down|up HOST PLANE       ``ip -n NS link set dev IF down|up`` on the host's NIC port
delay A B TIME                ``mrc-switch --control SOCK --request '{"op": "delay", ...}'``
                              at each switch end (python switches: they hold the frames)
delay A B --clear             the same request with the lab's own delay (``--delay`` of up)
============================  =============================================================
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
from collections.abc import Callable, Sequence

from lab.fabric import faultlog, kernel_switch, pyswitch
from lab.fabric.netns import LabError, argv_text, run, sleep_until
from lab.fabric.params import ParamError
from lab.fabric.state import LabState
from lab.fabric.status import loss_table, read_namespace
from lab.fabric.switchmode import switch_mode
from lab.fabric.topology import KIND_HOST, KIND_T0, KIND_T1, Link, Port
from mrcnic import units
from mrcswitch.config import MAX_DELAY_NS

Printer = Callable[[str], None]


def _print(text: str) -> None:
    print(text, flush=True)


class Faults:
    """Fault operations on one lab; ``echo`` receives every command before it runs."""

    def __init__(self, state: LabState, echo: Printer | None = _print) -> None:
        self.state = state
        self.plan = state.plan
        self.echo = echo or (lambda _t: None)
        self.mode = switch_mode(state.switch_mode)

    # --- plumbing ------------------------------------------------------------------------
    def _note(self, label: str, on: bool) -> None:
        """The fault journal (lab/fabric/faultlog.py): what a run's plot marks."""
        faultlog.note(self.state.run_dir, label, on)

    @staticmethod
    def _name(ends: tuple[Port, Port]) -> str:
        """A link's name in the journal (its ends as the plan orders them, whichever the
        command named first)."""
        return f"{ends[0].node}-{ends[1].node}"

    def _run(self, argv: Sequence[str], check: bool = True) -> str:
        self.echo(argv_text(argv))
        return run(argv, check=check)

    def _ip(self, node: str, *args: str) -> str:
        return self._run(["ip", "-n", self.state.namespace(node), *args])

    def _ip_lines(self, node: str, lines: list[str]) -> None:
        # Printed as the individual commands they are; run one by one (they are few).
        for line in lines:
            self._ip(node, *line.split())

    def link(self, a: str, b: str) -> Link:
        link = self.plan.link_between(a, b)
        if link.kind == "mgmt":
            raise ParamError("faults act on fabric links only; the management network is not MRC's")
        return link

    # --- link down / up / flap -----------------------------------------------------------
    def link_down(self, a: str, b: str) -> None:
        link = self.link(a, b)
        end = link.switch_end
        self.state.require_local(end.node)
        self._ip(end.node, "link", "set", "dev", end.ifname, "down")
        self._far_stitch(link, "down")
        self._note(f"link {self._name((link.a, link.b))} down", True)

    def link_up(self, a: str, b: str) -> None:
        link = self.link(a, b)
        end = link.switch_end
        self.state.require_local(end.node)
        self._far_stitch(link, "up")
        self._ip(end.node, "link", "set", "dev", end.ifname, "up")
        self._ip_lines(end.node, self.mode.port_up_lines(self.plan, end))
        self._note(f"link {self._name((link.a, link.b))} down", False)

    def _far_stitch(self, link: Link, updown: str) -> None:
        """A link that crosses machines: the lower end's carrier follows the switch end as
        on a veth pair, by setting the stitch end on the lower end's machine down (or up).
        When that machine is another one, its end keeps its carrier, as across any tunnel,
        and the transport finds the failure by itself: say so."""
        part = self.state.partition
        crossing = part.crossing_of(link) if part is not None else None
        if part is None or crossing is None:
            return
        k = crossing.a_machine
        x = part.stitch_ifname(crossing)
        if k not in self.state.here:
            self.echo(
                f"# {link.a.node}'s end is on machine {k}: it keeps its carrier (on machine "
                f"{k}: ip link set dev {x} {updown})"
            )
            return
        assert self.state.split is not None
        ns = self.state.split["stitch_netns"].get(str(k))
        self._run(["ip", *(["-n", ns] if ns else []), "link", "set", "dev", x, updown])

    def flap(self, a: str, b: str, period_ms: float, count: int) -> None:
        if period_ms <= 0 or count < 1:
            raise ParamError("flap needs --period > 0 and --count >= 1")
        half = period_ms / 2000.0
        for i in range(count):
            self.echo(f"# flap {i + 1}/{count}: down {half * 1000:.0f} ms, up {half * 1000:.0f} ms")
            t = time.monotonic()
            self.link_down(a, b)
            sleep_until(t + half)
            self.link_up(a, b)
            sleep_until(t + 2 * half)

    # --- loss (nft) ----------------------------------------------------------------------
    def _ends(self, a: str, b: str, verb: str, opts: str) -> tuple[tuple[Port, Port], list[Port]]:
        """A link's ends (for the journal) and those this machine sets. Both, on one machine;
        of a link between two machines of a split lab (a host's link to a plane elsewhere),
        each machine sets its own end's egress, and this says so and what the other runs
        (the same command, so either order works); a link with no end here is refused,
        naming its machine, before anything is touched."""
        link = self.link(a, b)
        ends = (link.a, link.b)
        local = [e for e in ends if self.state.is_local(e.node)]
        if not local:
            self.state.require_local(link.a.node)
        if len(local) == 1:
            far = link.b if local[0] is link.a else link.a
            k = self.state.partition.machine_of(far.node)  # type: ignore[union-attr]
            self.echo(
                f"# {link.a.node} -- {link.b.node} crosses machines: this machine sets "
                f"{local[0].node}'s end; for {far.node}'s, run on machine {k}: "
                f"mrc-lab {verb} --lab {self.state.name} {a} {b} {opts}"
            )
        return ends, local

    def loss(self, a: str, b: str, percent: float) -> None:
        if not 0 < percent <= 100:
            raise ParamError("--loss must be above 0 and at most 100% (--clear removes it)")
        ensure_nft()
        ends, local = self._ends(a, b, "loss", f"--loss {percent:g}%")
        for end in local:
            table = loss_table(self.plan, end.ifname)
            chain = (
                f"add chain netdev {table} loss {{ type filter hook egress device "
                f'"{end.ifname}" priority 0; }}'
            )
            script = (
                f"add table netdev {table}; delete table netdev {table}; "
                f"add table netdev {table}; {chain}; "
                f"add rule netdev {table} loss {_numgen(percent)} counter drop"
            )
            self._run(["ip", "netns", "exec", self.state.namespace(end.node), "nft", script])
        self._note(f"loss {self._name(ends)}", True)

    def loss_clear(self, a: str, b: str) -> None:
        if not shutil.which("nft"):
            self.echo("# nft is not installed: there can be no loss rule to clear")
            return
        ends, local = self._ends(a, b, "loss", "--clear")
        for end in local:
            table = loss_table(self.plan, end.ifname)
            script = f"add table netdev {table}; delete table netdev {table}"
            self._run(["ip", "netns", "exec", self.state.namespace(end.node), "nft", script])
        self._note(f"loss {self._name(ends)}", False)

    # --- shaping (tc tbf) ----------------------------------------------------------------
    def shape(self, a: str, b: str, rate: str | int) -> None:
        rate_bps = parse_rate(rate)
        ends, local = self._ends(a, b, "shape", f"--rate {rate_bps}bit")
        for end in local:
            line = kernel_switch.tbf_line(self.plan, end.ifname, rate_bps)
            self._run(["tc", "-n", self.state.namespace(end.node), *line.split()])
        self._note(f"shape {self._name(ends)}", True)

    def shape_clear(self, a: str, b: str) -> None:
        ends, local = self._ends(a, b, "shape", "--clear")
        for end in local:
            ns = self.state.namespace(end.node)
            kind = self.plan.parse_node(end.node).kind
            line = (
                self.mode.rate_line(self.plan, end.ifname) if kind in (KIND_T0, KIND_T1) else None
            )
            if line is not None:  # back to the link rate
                self._run(["tc", "-n", ns, *line.split()])
            elif read_namespace(ns).qdiscs.get(end.ifname, {}).get("kind") == "tbf":
                self._run(["tc", "-n", ns, "qdisc", "del", "dev", end.ifname, "root"])
            else:
                self.echo(f"# {end.node} {end.ifname}: not shaped, nothing to clear")
        self._note(f"shape {self._name(ends)}", False)

    # --- switch reboot -------------------------------------------------------------------
    def reboot(self, switch: str, down_ms: float = 1000.0) -> None:
        node = self.plan.parse_node(switch)
        if node.kind not in (KIND_T0, KIND_T1):
            raise ParamError(f"{switch} is not a switch")
        self.state.require_local(switch)  # of a split lab: say which machine holds it
        self._note(f"reboot {switch}", True)
        try:
            self.mode.reboot(self.state, node, down_ms, self.echo, self._ip_lines)
        finally:
            self._note(f"reboot {switch}", False)

    # --- propagation delay (mrc-switch) ----------------------------------------------------
    def delay(self, a: str, b: str, delay_s: float | None) -> None:
        """One-way delay ``delay_s`` (None: back to the lab's own) on the link a-b, in each
        direction a switch sends: both ends of a switch-to-switch link, the T0's end of a
        host link (the host's NIC sends straight into its veth)."""
        if self.state.switch_mode != "python":
            raise LabError(
                "a link delay needs python switches (mrc-switch holds the frames; this kernel "
                "has no netem to do it on a veth): bring the lab up without --switch kernel"
            )
        if delay_s is not None and not 0 <= delay_s <= MAX_DELAY_NS / 1e9:
            raise ParamError(f"delay {delay_s} s: must be in [0, {MAX_DELAY_NS / 1e9:g} s]")
        link = self.link(a, b)
        switch_ends = [
            e for e in (link.a, link.b) if self.plan.parse_node(e.node).kind in (KIND_T0, KIND_T1)
        ]
        for end in switch_ends:
            self.state.require_local(end.node)
        for end in (link.a, link.b):
            if end not in switch_ends:
                self.echo(f"# {end.node} {end.ifname}: a host's own port, no delay there")
                continue
            rec = self.state.processes.get(end.node)
            if rec is None or rec.control is None:
                raise LabError(
                    f"{end.node} runs in a process of its own, without a control socket "
                    "(mrc-lab up --switch-procs 0): its delay is only the lab's --delay"
                )
            lab_ns = pyswitch.port_delay_ns(self.plan.params, last_hop=link.kind == "host-t0")
            ns = lab_ns if delay_s is None else round(delay_s * 1e9)
            port = end.ifname.removeprefix(self.plan.prefix)
            self.echo(argv_text(pyswitch.control_command(rec, "delay", port=port, delay_ns=ns)))
            pyswitch.hosted_request(rec, "delay", port=port, delay_ns=ns)
        self._note(f"delay {self._name((link.a, link.b))}", delay_s is not None)

    def delay_clear(self, a: str, b: str) -> None:
        self.delay(a, b, None)

    # --- NIC port ------------------------------------------------------------------------
    def port(self, host: str, plane: int, up: bool) -> None:
        node = self.plan.parse_node(host)
        if node.kind != KIND_HOST:
            raise ParamError(f"{host} is not a host (port down|up HOST PLANE)")
        if not 0 <= plane < self.plan.params.planes:
            raise ParamError(f"plane {plane} out of range 0..{self.plan.params.planes - 1}")
        port = self.plan.host_port(node.index, plane)
        self._ip(host, "link", "set", "dev", port.ifname, "up" if up else "down")
        self._note(f"port {host} plane {plane} down", not up)


def _numgen(percent: float) -> str:
    """The nft match for "this packet is lost": ``numgen random mod 100 < X`` for whole
    percents, parts per million otherwise (0.1% -> mod 1000000 < 1000)."""
    if percent >= 100:
        return ""
    if float(percent).is_integer():
        return f"numgen random mod 100 < {int(percent)}"
    ppm = round(percent * 10_000)
    if ppm < 1:
        raise ParamError("--loss below 0.0001% cannot be expressed")
    return f"numgen random mod 1000000 < {ppm}"


def parse_rate(text: str | float) -> int:
    """A ``shape`` rate -> bit/s: what ``mrcnic.units.parse_rate`` reads (``10mbit``,
    ``500kbit``, ``1gbit``, ``2.5M``, ``2000000``) except the ``bps`` spellings, which tc reads
    as *bytes* per second (``10mbps`` is 80 Mbit/s to tc): refused rather than guessed."""
    if re.search(r"bps\s*$", str(text), re.IGNORECASE):
        raise LabError(
            f"rate {text!r}: to tc, 'bps' means bytes per second; give bits: 10mbit, 500kbit, 1gbit"
        )
    try:
        value = units.parse_rate(text)
    except units.UnitsError:
        raise LabError(
            f"rate {text!r}: use bits per second with decimal multiples, as tc does: "
            "10mbit, 500kbit, 1gbit, 2.5M, 2000000"
        ) from None
    if value < 8000:
        raise LabError(f"rate {text!r}: below 8kbit cannot carry a frame in reasonable time")
    return round(value)


def tc_rate_arg(text: str) -> int:
    """argparse ``type=`` for ``mrc-lab shape --rate``. A bare number is bit/s, as tc reads
    it; taken (scripts use it) with one line asking for the unit, as every other rate has."""
    try:
        value = parse_rate(text)
    except LabError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if text.strip().replace(".", "", 1).isdigit():
        print(f"mrc-lab shape: --rate {text.strip()} read as bit/s, as tc reads it; write "
              f"{text.strip()}bit or with k/M/G (docs/cli.md)", file=sys.stderr)  # fmt: skip
    return value


def ensure_nft() -> None:
    """LabError naming the package and the command that installs it when nft is missing:
    the lab installs nothing on the machine by itself (`make setup` does, saying so)."""
    if shutil.which("nft"):
        return
    raise LabError(
        "loss injection needs nft (Debian package nftables), which is not installed: "
        "install it with `apt-get install -y nftables` (or `make setup`), then run this again"
    )

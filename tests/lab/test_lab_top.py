"""mrc-lab top on a real lab, in a real terminal (tmux at 80x24): a 3:1 incast into a small
buffer makes trims, and the trims counter on screen grows; a fabric link taken down shows as a
fault and as a port DOWN; the NIC processes' QPs appear with their EV states per plane; q and
Ctrl-C quit; the NIC files go when the processes do.

Lab: 2 planes x (2 T0 + 2 T1), 2 hosts per T0 (h0 h1 | h2 h3), 10 Mb/s links, 16 KiB port
buffers; h1, h2, h3 write to h0 (2 QPs each). The tmux server is private to the test
(``tmux -L <session>``) and its session is killed by name at the end, whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import lab_helpers as H
import pytest
import waiting as W

from lab.fabric.nicstats import nics_dir

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="needs tmux (apt-get install tmux)"
)

REPO = Path(__file__).resolve().parents[2]


class Pane:
    """A tmux session of its own server (``-L``), one pane running a command."""

    def __init__(self, name: str, argv: list[str], width: int = 80, height: int = 24) -> None:
        self.name = name
        cmd = " ".join(argv)
        self._tmux("new-session", "-d", "-s", name, "-x", str(width), "-y", str(height),
                   f"cd {REPO} && {cmd}")  # fmt: skip

    def _tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", "-L", self.name, *args], capture_output=True, text=True,
                              check=check, timeout=10)  # fmt: skip

    def text(self) -> str:
        p = self._tmux("capture-pane", "-p", "-t", self.name, check=False)
        return p.stdout

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", self.name, *keys)

    def alive(self) -> bool:
        return self._tmux("has-session", "-t", self.name, check=False).returncode == 0

    def wait(self, pred: Callable[[str], bool], timeout_s: float, what: str) -> str:
        text = ""

        def shown() -> bool:
            nonlocal text
            text = self.text()
            return pred(text)

        try:
            W.wait_for(shown, timeout_s, 0.25, what=what)
        except AssertionError:
            raise AssertionError(
                f"top never showed {what} in {timeout_s:g} s; last screen:\n{text}"
            ) from None
        return text

    def kill(self) -> None:
        """Our session, by its name; then the private server's socket file, which tmux leaves
        behind when its last session ends."""
        self._tmux("kill-session", "-t", self.name, check=False)
        if not self.alive():
            tmp = os.environ.get("TMUX_TMPDIR", "/tmp")
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(tmp, f"tmux-{os.getuid()}", self.name))


def count(text: str, what: str) -> int | None:
    """The total of ``what`` on the ALL PORTS line (12.3k and 1.2M read back)."""
    m = re.search(rf"\b{what} (\d+(?:\.\d+)?)([kM]?)", text)
    if not m:
        return None
    return int(float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6}[m.group(2)])


def top_argv(lab: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "lab.cli", "top", "--name", lab, *extra]


@pytest.mark.slow  # ~30 s
def test_top_shows_trims_growing_and_a_link_down() -> None:
    name = H.lab_name()
    session = f"{name}top"
    incast: subprocess.Popen | None = None
    panes: list[Pane] = []
    with H.running_lab(name=name, planes=2, t0=2, t1=2, hosts_per_t0=2, rate_mbit=10,
                       buffer_kb=16) as st:  # fmt: skip
        try:
            pane = Pane(session, top_argv(name, "--interval", "0.5", "--faults-s", "1"))
            panes.append(pane)
            first = pane.wait(lambda t: "FAULTS  none" in t and "ALL PORTS" in t, 20, "a frame")
            lines = first.splitlines()
            assert len(lines) <= 24 and all(len(ln) <= 80 for ln in lines), first
            assert f"lab {name}: python switches, 2 planes x 10 Mb/s" in first
            assert "no NIC process is publishing" in first

            incast = subprocess.Popen(
                [sys.executable, "-m", "lab.bench_cli", "incast", "--lab", name, "--senders",
                 "h1,h2,h3", "--dst", "h0", "--qps", "2", "--duration", "14", "--size", "64K",
                 "--json", "-q"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            # the trims counter on screen, growing while the incast runs
            seen = pane.wait(lambda t: (count(t, "trims") or 0) > 0, 30, "trims")
            t0 = count(seen, "trims") or 0
            grown = pane.wait(lambda t: (count(t, "trims") or 0) > t0, 15, "the trims grow")
            assert (count(grown, "trims") or 0) > t0
            # the port that trims is at the top of the table: h0's T0 downlink on a plane
            trim_row = re.search(r"^p[01]-t0-0 d0 +h0 +up .* \d+ \+\d+", grown, re.M)
            assert trim_row, grown
            # QPs of the incast's NIC processes: the senders' 2 QPs each, EV states per plane.
            # A sender's rate needs two of its snapshots; until then the busiest-first order
            # can list h0's receiving QPs ahead of it, so wait for the frame that ranks it.
            sender_qp = re.compile(r"^h[123] \d+ +0x[0-9a-f]+ +mrc +h0 +[.sBD]{2} ", re.M)
            ranked = pane.wait(lambda t: bool(sender_qp.search(t)), 15, "a sender's QP row")
            assert sender_qp.search(ranked), ranked

            once = subprocess.run(top_argv(name, "--once", "--width", "100"), capture_output=True,
                                  text=True, timeout=60)  # fmt: skip
            assert once.returncode == 0, once.stderr
            m = re.search(r"QPS (\d+) in (\d+) NIC processes", once.stdout)
            assert m and int(m.group(1)) >= 6 and int(m.group(2)) >= 3, once.stdout
            assert len(once.stdout.splitlines()) > 24  # not a terminal: every row

            # a fabric link down: a fault, and both its ports DOWN at the top of the table
            down = subprocess.run([sys.executable, "-m", "lab.cli", "link", "down", "--name", name,
                                   "p0-t0-1", "p0-t1-0"], capture_output=True, text=True,
                                  timeout=30)  # fmt: skip
            assert down.returncode == 0, down.stderr
            shown = pane.wait(
                lambda t: (
                    "link DOWN p0-t0-1 -- p0-t1-0" in t
                    and re.search(r"^p0-t1-0 d1 +p0-t0-1 +DOWN", t, re.M) is not None
                ),
                15,
                "the link down",
            )
            assert "FAULTS  1" in shown
            assert re.search(r"DOWN: \d+ port", shown), shown

            pane.keys("q")
            with contextlib.suppress(AssertionError):  # the assert below says what failed
                W.wait_for(lambda: not pane.alive(), 5, 0.1, what="top to end")
            assert not pane.alive(), "q did not end mrc-lab top"

            out, err = incast.communicate(timeout=90)
            res = json.loads(out)
            assert res["verified"], err[-2000:]
            assert res["trims_total"] > 0
            assert not list(nics_dir(st.run_dir).glob("*.json"))  # each NIC removed its file

            # Ctrl-C ends it too
            pane2 = Pane(session + "c", top_argv(name, "--interval", "250ms"))
            panes.append(pane2)
            shown = pane2.wait(lambda t: "ALL PORTS" in t, 20, "a frame")
            assert "link DOWN p0-t0-1 -- p0-t1-0" in pane2.wait(
                lambda t: "link DOWN" in t, 10, "the fault"
            )
            pane2.keys("C-c")
            with contextlib.suppress(AssertionError):  # the assert below says what failed
                W.wait_for(lambda: not pane2.alive(), 5, 0.1, what="top to end")
            assert not pane2.alive(), "Ctrl-C did not end mrc-lab top"
        finally:
            for p in panes:
                p.kill()
            if incast is not None and incast.poll() is None:
                incast.send_signal(signal.SIGINT)  # it stops its writes on the way out
                with contextlib.suppress(subprocess.TimeoutExpired):
                    incast.wait(timeout=10)
                if incast.poll() is None:
                    incast.kill()
                    incast.wait()
    assert not H.lab_leftovers(name)["namespaces"]


def test_netlink_view_judges_faults_as_status_does() -> None:
    """lab/fabric/nlview.py (netlink, in-process) against lab/fabric/status.py (ip, tc, nft): the same link
    flags, root qdiscs with their tbf rates, nft tables, and so the same faults, for a link
    down, a loss rule and a shaped link."""
    from lab.fabric import nlview, status
    from lab.fabric.faults import Faults
    from lab.views import top as T

    with H.running_lab(rate_mbit=10) as st:
        f = Faults(st, echo=None)
        f.link_down("p0-t0-0", "p0-t1-1")
        f.loss("h0", "p1-t0-0", 1.0)
        f.shape("p1-t0-1", "p1-t1-0", "5mbit")
        a, b = status.read_lab(st), nlview.read_lab(st)
        assert set(a) == set(b)
        for ns, va in a.items():
            vb = b[ns]
            assert va.exists == vb.exists, ns
            assert set(va.links) == set(vb.links), ns
            for ifname, e in va.links.items():
                for flag in ("UP", "LOWER_UP"):
                    assert (flag in e["flags"]) == (flag in vb.links[ifname]["flags"]), ifname
                assert e.get("operstate") == vb.links[ifname]["operstate"], ifname
            qa = {k: (q.get("kind"), (q.get("options") or {}).get("rate"))
                  for k, q in va.qdiscs.items()}  # fmt: skip
            qb = {k: (q["kind"], q["options"].get("rate")) for k, q in vb.qdiscs.items()}
            assert qa == qb, ns
            assert sorted(va.nft_tables) == sorted(vb.nft_tables), ns

        def faults(views):
            plan = st.plan
            return T.faults_from_status({
                "nodes": [status.node_status(st, n, views) for n in plan.switches()],
                "links": [status.link_status(st, x, views) for x in plan.links()],
            }).items()  # fmt: skip

        got = faults(b)
        assert got == faults(a)
        assert any(x.startswith("link DOWN p0-t0-0 -- p0-t1-1") for x in got), got
        assert "loss h0 -- p1-t0-0" in got and "shaped p1-t0-1 -- p1-t1-0 5mbit" in got

"""Probe findings handed to the NICs as DENIED EVs (``mrc-lab probe --deny``).

The prober (lab/fabric/probe.py) writes the links it finds down or lossy to
``<run_dir>/denied_links.json`` (atomically; an empty list, or no file, means none). Every
NIC process of the lab (lab/fabric/nicstats.py's publisher, on its own event loop every 0.5 s)
reads it and, through the control API (``QP.set_ev_status``: the OCP libmrc controller
model, docs/api.md), sets DENIED each EV of its MRC QPs whose path crosses such a link, and
GOOD again the EVs it denied once their link is no longer listed. An EV's path follows from
the EV alone (docs/design/architecture.md, "EV -> path"): its plane and T1, between this host's T0
and the peer's. RoCEv2 QPs have no EV to steer and are left alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mrcnic.wire import usid

DENIED_FILE = "denied_links.json"

Link = frozenset[str]


def link(a: str, b: str) -> Link:
    return frozenset((a, b))


def path(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / DENIED_FILE


def write(run_dir: str | os.PathLike[str], links: Iterable[tuple[str, str]]) -> None:
    """The prober's side: the links to avoid now (atomic: temp file + rename)."""
    p = path(run_dir)
    tmp = p.with_suffix(".tmp")
    doc = {"links": sorted([sorted(lk) for lk in links]), "updated_unix": time.time()}
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, p)


def clear(run_dir: str | os.PathLike[str]) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path(run_dir))


def read(run_dir: str | os.PathLike[str]) -> set[Link]:
    """The links listed now (none when there is no file or it does not parse)."""
    try:
        doc = json.loads(path(run_dir).read_text())
        return {link(a, b) for a, b in doc.get("links", [])}
    except (OSError, ValueError, TypeError):
        return set()


def ev_links(shape: usid.ClosShape, src: int, dst: int, ev: int) -> set[Link]:
    """The links the path of ``ev`` from host ``src`` to host ``dst`` crosses."""
    plane, t1 = usid.ev_plane(shape, ev), usid.ev_t1(shape, ev)
    st0, dt0 = shape.host_t0(src), shape.host_t0(dst)
    out = {link(f"h{src}", f"p{plane}-t0-{st0}"), link(f"h{dst}", f"p{plane}-t0-{dt0}")}
    if st0 != dt0:
        out.add(link(f"p{plane}-t0-{st0}", f"p{plane}-t1-{t1}"))
        out.add(link(f"p{plane}-t0-{dt0}", f"p{plane}-t1-{t1}"))
    return out


class Denier:
    """One NIC process's side: applies the listed links to its device's MRC QPs."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = run_dir
        self.denied: dict[int, set[int]] = {}  # qpn -> the EVs this process denied
        self.denials = 0  # EVs set DENIED so far
        self.restored = 0  # EVs set GOOD again

    def apply(self, device: Any) -> None:
        links = read(self.run_dir)
        shape, me = device.net.shape, device.net.host
        live = set()
        for qpn, qp in list(device.qps.items()):
            core = qp.core
            peer = getattr(core, "peer", None)
            statuses = getattr(qp, "ev_statuses", None)
            if peer is None or statuses is None or getattr(qp, "transport", "mrc") != "mrc":
                continue
            live.add(qpn)
            want = set()
            if links:
                evs = list(statuses())
                want = {ev for ev in evs if ev_links(shape, me, peer.host, ev) & links}
                if len(want) == len(evs):  # every path is listed: denying all would stop the QP
                    want = set()
            have = self.denied.setdefault(qpn, set())
            for ev in want - have:
                with contextlib.suppress(ValueError, KeyError):
                    qp.deny_ev(ev)
                    self.denials += 1
            for ev in have - want:
                with contextlib.suppress(ValueError, KeyError):
                    qp.allow_ev(ev)
                    self.restored += 1
            self.denied[qpn] = want
        for qpn in list(self.denied):
            if qpn not in live:
                del self.denied[qpn]

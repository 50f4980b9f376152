"""``mrc-lab top``'s readers: the NIC documents and switch stats files the lab's processes publish,
and the faults in effect, read in a thread every few seconds."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from lab.fabric import nlview
from lab.fabric.nicstats import nics_dir
from lab.fabric.status import NsView, end_state, link_status, node_status, read_lab
from lab.views.top.rows import (
    DEFAULT_FAULTS_S,
    Faults,
    Frame,
    Rates,
    faults_from_status,
    kernel_port_rows,
    qp_rows,
    switch_port_rows,
)

# --- reading the lab --------------------------------------------------------------------------


def read_json(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def pid_alive(pid: Any) -> bool:
    try:
        return isinstance(pid, int) and pid > 0 and os.path.exists(f"/proc/{pid}")
    except OSError:
        return False


def read_nic_docs(run_dir: Path) -> list[dict[str, Any]]:
    """The NIC documents of processes still running (a killed process's file is skipped)."""
    d = nics_dir(run_dir)
    out = []
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return out
    for n in names:
        if not n.endswith(".json"):
            continue
        doc = read_json(d / n)
        if doc and pid_alive(doc.get("pid")):
            out.append(doc)
    return out


class FaultReader:
    """Reads the faults (and, for kernel switches, their counters) in a thread every
    ``every_s``: over netlink in-process (:mod:`lab.fabric.nlview`, about 0.15 ms per namespace),
    or for kernel switches with ``ip``/``tc``/``nft`` per namespace (their counters; tens of
    milliseconds of CPU per read)."""

    def __init__(self, state: Any, every_s: float = DEFAULT_FAULTS_S) -> None:
        self.state = state
        self.every_s = every_s
        self.faults: Faults | None = None
        self.kernel_ports: dict[str, dict[str, dict[str, Any]]] = {}
        self.kernel_t: float | None = None
        self.reads = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cv = threading.Condition()

    def read_once(self) -> None:

        st = self.state
        t0 = time.perf_counter()
        try:
            if st.switch_mode == "kernel":
                views = read_lab(st)  # with the counters (ip -s link, tc -s qdisc)
            else:
                try:  # netlink, in-process: no ip/tc/nft processes (lab/fabric/nlview.py)
                    views = nlview.read_lab(st)
                except OSError:
                    views = read_lab(st)
            plan = st.plan
            nodes = [node_status(st, n, views) for n in st.switches()]
            links = [link_status(st, x, views) for x in st.links()]
            f = faults_from_status({"nodes": nodes, "links": links})
            kports: dict[str, dict[str, dict[str, Any]]] = {}
            if st.switch_mode == "kernel":
                for n in st.switches():
                    view = views.get(plan.namespace(n.name), NsView(False))
                    pmap = {}
                    for sp in plan.switch_ports(n):
                        entry = view.links.get(sp.ifname, {})
                        s64 = entry.get("stats64", {})
                        q = view.qdiscs.get(sp.ifname, {})
                        es = end_state(view, sp.ifname)
                        pmap[sp.ifname.removeprefix(plan.prefix)] = {
                            "peer": getattr(sp, "peer", ""),
                            "up": es.up,
                            "tx_bytes": s64.get("tx", {}).get("bytes"),
                            "qdisc_drops": q.get("drops"),
                            "qdisc_backlog_bytes": q.get("backlog"),
                        }
                    kports[n.name] = pmap
        except Exception as e:
            f = Faults(error=f"{type(e).__name__}: {e}")
            kports = {}
        f.read_unix = time.time()
        f.read_s = time.perf_counter() - t0
        with self._cv:
            self.faults = f
            self.kernel_ports = kports
            self.kernel_t = f.read_unix
            self.reads += 1
            self._cv.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.read_once()
            self._stop.wait(self.every_s)

    def start(self) -> FaultReader:
        self._thread = threading.Thread(target=self._run, name="top-faults", daemon=True)
        self._thread.start()
        return self

    def wait_reads(self, n: int = 1, timeout_s: float = 10.0) -> None:
        with self._cv:
            self._cv.wait_for(lambda: self.reads >= n, timeout_s)

    def stop(self) -> None:
        self._stop.set()


class Top:
    """Samples a lab and builds frames (the I/O side of ``mrc-lab top``)."""

    def __init__(self, state: Any, interval_s: float, faults_s: float = DEFAULT_FAULTS_S) -> None:
        self.state = state
        self.interval_s = interval_s
        self.plan = state.plan
        self.switch_names = [n.name for n in state.switches()]
        self.port_rates = Rates()
        self.qp_rates = Rates()
        self.faults = FaultReader(state, faults_s)

    def switch_docs(self) -> dict[str, dict[str, Any] | None]:
        out: dict[str, dict[str, Any] | None] = {}
        for name in self.switch_names:
            rec = self.state.processes.get(name)
            doc = read_json(rec.stats) if rec is not None and rec.stats else None
            out[name] = doc
        return out

    def frame(self) -> Frame:
        st = self.state
        now = time.time()
        notes = []
        if not st.path.exists():
            notes.append(f"lab {st.name} has no state file any more (brought down?)")
        if st.switch_mode == "kernel":
            with self.faults._cv:
                kp, kt = self.faults.kernel_ports, self.faults.kernel_t
            ports = kernel_port_rows(kp, kt, self.port_rates)
        else:
            ports = switch_port_rows(self.switch_docs(), self.port_rates, now)
        docs = read_nic_docs(st.run_dir)
        qps = qp_rows(docs, self.qp_rates, now)
        p = st.params
        return Frame(
            lab=st.name,
            switch_mode=st.switch_mode,
            planes=p.planes,
            rate_mbit=float(p.rate_mbit),
            switches=len(self.switch_names),
            now_unix=now,
            interval_s=self.interval_s,
            ports=ports,
            qps=qps,
            processes=len(docs),
            faults=self.faults.faults,
            notes=notes,
        )

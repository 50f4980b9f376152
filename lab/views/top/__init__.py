"""``mrc-lab top``: a live terminal view of a running lab, refreshed a few times a second.

What it shows, all read from what the lab's processes already publish (it never asks a switch
or a NIC for anything, so it cannot slow them):

- **ports**: per switch port its link state, queue depth, transmit rate, ECN marks, trims,
  drops by reason and PFC pauses, from the python switches' stats files (rewritten every
  0.5 s; rates from the change between two files); kernel switches: ``ip -s link`` and ``tc``
  counters (bytes, qdisc drops and backlog), read with the faults;
- **QPs**: per QP of every running NIC process (``mrc-bench``: :mod:`lab.fabric.nicstats`) its EV
  states per plane (GOOD / SKIP / ASSUMED_BAD / DENIED), congestion window, smoothed RTT,
  retransmissions, timeouts and rate;
- **faults in effect**: links down, loss rules, shaped links, switches down, as the kernel
  reports them, judged by ``mrc-lab status``'s own functions (:mod:`lab.fabric.status`) on a view
  read over netlink in-process (:mod:`lab.fabric.nlview`: no ``ip``/``tc``/``nft`` process), in a
  thread every ``--faults-s`` seconds (1).

A package, from the bottom up: ``rows`` (the pure model: rates, rows, order, the frame),
``screen`` (the frame drawn; rich is imported only when a frame is drawn), ``reader`` (what the
lab publishes, the faults thread) and ``terminal`` (the live loop). Its public names are here.
"""

from lab.views.top.reader import (
    FaultReader,
    Top,
    pid_alive,
    read_json,
    read_nic_docs,
)
from lab.views.top.rows import (
    DEFAULT_FAULTS_S,
    DEFAULT_INTERVAL_S,
    STALE_INTERVALS,
    Faults,
    Frame,
    PortRow,
    QpRow,
    Rates,
    Totals,
    faults_from_status,
    kernel_port_rows,
    plane_strip,
    qp_rows,
    switch_port_rows,
    totals,
)
from lab.views.top.screen import (
    fault_lines,
    fmt_age,
    fmt_count,
    fmt_drops,
    fmt_kib,
    fmt_mbps,
    fmt_n,
    header_line,
    layout_rows,
    pack,
    render,
    render_text,
    totals_parts,
)
from lab.views.top.terminal import (
    run,
)

__all__ = [
    "DEFAULT_FAULTS_S",
    "DEFAULT_INTERVAL_S",
    "FaultReader",
    "Faults",
    "Frame",
    "PortRow",
    "QpRow",
    "Rates",
    "STALE_INTERVALS",
    "Top",
    "Totals",
    "fault_lines",
    "faults_from_status",
    "fmt_age",
    "fmt_count",
    "fmt_drops",
    "fmt_kib",
    "fmt_mbps",
    "fmt_n",
    "header_line",
    "kernel_port_rows",
    "layout_rows",
    "pack",
    "pid_alive",
    "plane_strip",
    "qp_rows",
    "read_json",
    "read_nic_docs",
    "render",
    "render_text",
    "run",
    "switch_port_rows",
    "totals",
    "totals_parts",
]

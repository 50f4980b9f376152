"""The two switch modes behind one interface: what bringing a lab up and breaking it need to
know of how its switches forward (:mod:`lab.fabric.pyswitch`: mrc-switch processes;
:mod:`lab.fabric.kernel_switch`: the Linux kernel's seg6local routes), so that
:mod:`lab.fabric.lifecycle` and :mod:`lab.fabric.faults` ask the mode instead of branching on
its name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from lab.fabric.kernel_switch import KernelSwitch
from lab.fabric.progress import Progress
from lab.fabric.pyswitch import PythonSwitch
from lab.fabric.state import LabState
from lab.fabric.topology import Node, Plan, Port

#: prints a command (or a comment line) before it runs
Printer = Callable[[str], None]
#: runs ``ip -n NS`` lines in a node's namespace one by one, each printed first
IpLines = Callable[[str, list[str]], None]


class SwitchMode(Protocol):
    """One way of making the switches of a lab forward."""

    name: str
    #: sysctls of a switch namespace
    sysctls: dict[str, int]

    def switch_lines(self, plan: Plan, node: Node) -> list[str]:
        """``ip -batch`` lines that configure a switch's namespace (its ports up, and what
        else the mode needs there)."""
        ...

    def start(self, state: LabState, progress: Progress, switch_procs: int) -> None:
        """Once every link is up: make the switches forward (queues, or processes)."""
        ...

    def port_up_lines(self, plan: Plan, port: Port) -> list[str]:
        """``ip`` lines to run after a switch port came back up (none: nothing was lost)."""
        ...

    def rate_line(self, plan: Plan, ifname: str) -> str | None:
        """The ``tc`` line that puts a switch port back at the link rate after shaping; None:
        the port has no qdisc of its own (the switch paces it), so a shaping tbf is deleted."""
        ...

    def reboot(
        self, state: LabState, node: Node, down_ms: float, echo: Printer, ip_lines: IpLines
    ) -> None:
        """Switch ``node`` off for ``down_ms`` and on again with its unchanged static config."""
        ...


MODES: dict[str, SwitchMode] = {"kernel": KernelSwitch(), "python": PythonSwitch()}


def switch_mode(name: str) -> SwitchMode:
    """The mode of ``LabParams.switch`` / ``LabState.switch_mode``."""
    return MODES[name]

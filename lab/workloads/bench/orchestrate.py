"""mrc-bench's sides as processes: each ``ip netns exec <host namespace> mrc-bench ...``,
listeners first (the port a listener reports replaces PORT_SLOT in the later sides'
arguments), the result side's JSON read back."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from lab.proc import children, control
from lab.proc.benchrun import bench_command
from lab.workloads.bench import common as bc

#: the sides share the terminal's process group (Ctrl-C reaches them too): stopped by PID
STOP_STEPS = ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0))
PORT_SLOT = "{port}"  # replaced by the port the listening side reports


def listen_port(port: int) -> str:
    """The port a child that listens is given: the user's, or 0 (any free port) for the
    default, so that several benchmarks can run at once against the same host."""
    return "0" if port == control.DEFAULT_PORT else str(port)


@dataclass
class Side:
    """One child process: its host, its arguments, whether it listens (its stderr then
    names the port, which replaces PORT_SLOT in the later sides' arguments) and whether it
    prints the result JSON on stdout."""

    host: int
    argv: list[str]
    listens: bool = False
    result: bool = False


def wait_port(p: subprocess.Popen, errf: Any, timeout_s: float = 30.0) -> int:
    port = bc.announced_port(p, errf, timeout_s)
    if port is None:
        raise control.ControlError("the listening side did not start (see its messages above)")
    return port


def stop_sides(procs: list[tuple[subprocess.Popen, Any, str]]) -> None:
    """SIGTERM the children we started (by PID), then SIGKILL what is left after 5 s."""
    children.stop([p for p, _e, _n in procs], STOP_STEPS, group=False)


def orchestrate(st: Any, sides: list[Side]) -> tuple[dict[str, Any], list[int]]:
    """Start one process per side (``ip netns exec NS mrc-bench ...``), listeners first; the
    result side prints the result JSON, returned with every side's exit status.  Children are
    stopped by PID if anything fails; the others' stderr is shown only when they fail (the
    result side's passes through)."""
    plan = st.plan
    for side in sides:  # a part of a split lab: every side's host must be here
        st.require_local(plan.host_name(side.host))
    procs: list[tuple[subprocess.Popen, Any, str]] = []
    result_text = ""
    codes: list[int] = []
    port = ""
    with contextlib.ExitStack() as stack:
        try:
            for side in sides:
                name = plan.host_name(side.host)
                argv = [port if a == PORT_SLOT else a for a in side.argv]
                full = ["ip", "netns", "exec", plan.namespace(name), *bench_command(), *argv]
                capture = side.listens or not side.result
                errf = stack.enter_context(tempfile.TemporaryFile("w+")) if capture else None
                out = subprocess.PIPE if side.result else subprocess.DEVNULL
                p = subprocess.Popen(full, stdout=out, stderr=errf, text=True)
                procs.append((p, errf, name))
                if side.listens:
                    port = str(wait_port(p, errf))
            for (p, _e, _n), side in zip(procs, sides, strict=True):
                if side.result:
                    result_text, _ = p.communicate()
            for p, _e, _n in procs:
                try:
                    codes.append(p.wait(timeout=30))
                except subprocess.TimeoutExpired:
                    p.terminate()
                    codes.append(p.wait(timeout=5))
        except BaseException:
            stop_sides(procs)
            raise
        finally:
            for p, errf, name in procs:
                if errf is not None and p.returncode not in (0, None):
                    errf.seek(0)
                    for ln in errf.read().splitlines()[-20:]:
                        if "listening on" not in ln:
                            print(f"[{name}] {ln}", file=sys.stderr)
    try:
        res = json.loads(result_text)
    except ValueError:
        raise control.ControlError(
            f"no result from the benchmark processes (exit statuses {codes})"
        ) from None
    return res, codes

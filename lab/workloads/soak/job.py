"""One all-reduce job of the soak: a process per rank, their stdout lines on one queue."""

from __future__ import annotations

import contextlib
import json
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any

from lab.fabric.netns import LabError
from lab.fabric.paths import REPO
from lab.fabric.state import LabState
from lab.proc import children
from lab.workloads.bench import common as bc
from lab.workloads.soak.config import START_TIMEOUT_S, SoakConfig

#: how a job's ranks are stopped (lab.proc.children.stop): 3 s after each signal
STOP_STEPS = ((signal.SIGINT, 3.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0))


class Job:
    """The rank processes of one all-reduce (``ip netns exec NS python -m lab.soak rank``),
    each in its own session so that it is stopped by its PID's group and nothing else.  Their
    stdout lines (rank 0's steps and result, any rank's error) arrive on :attr:`lines`, each
    with its ``rank``, from one reader thread per rank."""

    def __init__(
        self, state: LabState, cfg: SoakConfig, transport: str, duration_s: float, n: int
    ) -> None:
        self.state, self.cfg, self.transport, self.n = state, cfg, transport, n
        self.duration_s = duration_s
        self.procs: list[tuple[str, subprocess.Popen[str], IO[str]]] = []
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.result: dict[str, Any] | None = None
        self.failed = False  # a rank reported an error: the job is over (as a launcher would)
        self._readers: list[threading.Thread] = []

    def _argv(self, rank: int, port: int) -> list[str]:
        host = self.cfg.hosts[rank]
        args = ["rank", "--lab", self.state.name, "--rank", str(rank)]
        args += ["--hosts", ",".join(self.cfg.hosts), "--size", str(self.cfg.size)]
        args += ["--seed", str(self.cfg.seed), "--transport", self.transport]
        args += ["--duration-s", f"{self.duration_s:.3f}", "--port", str(port)]
        args += ["--timeout-s", f"{self.cfg.step_timeout_s:g}"]
        ns = self.state.plan.namespace(host)
        return ["ip", "netns", "exec", ns, sys.executable, "-m", "lab.soak", *args]

    def _spawn(self, rank: int, port: int) -> subprocess.Popen[str]:
        # kept open for the job's life (rank 0's names its port; failures show their tail);
        # Job.close closes it
        err = tempfile.TemporaryFile("w+")  # noqa: SIM115
        p = children.spawn(
            self._argv(rank, port), stdout=subprocess.PIPE, stderr=err, text=True, cwd=REPO
        )
        self.procs.append((self.cfg.hosts[rank], p, err))
        reader = threading.Thread(target=self._read, args=(rank, p), daemon=True)
        reader.start()
        self._readers.append(reader)
        return p

    def start(self) -> None:
        rank0 = self._spawn(0, 0)
        port = self._wait_port(rank0, self.procs[0][2])
        for r in range(1, len(self.cfg.hosts)):
            self._spawn(r, port)

    def _wait_port(self, p: subprocess.Popen[str], err: IO[str]) -> int:
        port = bc.announced_port(p, err, START_TIMEOUT_S)
        if port is None:
            raise LabError(f"rank 0 did not start listening: {self.stderr_tail(0)}")
        return port

    def _read(self, rank: int, p: subprocess.Popen[str]) -> None:
        assert p.stdout is not None
        for line in p.stdout:
            with contextlib.suppress(ValueError):
                msg = json.loads(line)
                if isinstance(msg, dict):
                    self.lines.put({**msg, "rank": rank})

    def running(self) -> bool:
        return any(p.poll() is None for _h, p, _e in self.procs)

    def rank0_done(self) -> bool:
        return bool(self.procs) and self.procs[0][1].poll() is not None

    def drain_readers(self, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        for t in self._readers:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        """SIGINT, then SIGTERM, then SIGKILL to every rank's own process group (by PID),
        each signal to all ranks at once."""
        children.stop([p for _h, p, _e in self.procs], STOP_STEPS)

    def returncodes(self) -> list[int | None]:
        return [p.returncode for _h, p, _e in self.procs]

    def stderr_tail(self, rank: int, lines: int = 6) -> str:
        if rank >= len(self.procs):
            return ""
        err = self.procs[rank][2]
        with contextlib.suppress(OSError, ValueError):
            err.seek(0)
            text = [ln for ln in err.read().splitlines() if "listening on" not in ln]
            return " | ".join(text[-lines:])
        return ""

    def close(self) -> None:
        for _h, _p, err in self.procs:
            with contextlib.suppress(OSError):
                err.close()

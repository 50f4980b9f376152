"""Namespaces, veths, sysctls: the few primitives the lab is built from.

Every command is an argv list (never a shell string). Bulk configuration goes through
``ip -batch -`` / ``tc -batch -`` (one process per namespace, commands on stdin), which is
what makes a 36-namespace lab come up in about a second. Sysctls are written in-process
after ``setns(2)`` into the namespace: ``/proc/sys/net`` shows the namespace of the thread
that opens it, so no ``ip netns exec sysctl`` fork per setting is needed.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mrcnic.errors import MrcError
from mrcnic.io.netns import NETNS_DIR, in_netns, netns_path  # the lab's names too


class LabError(MrcError, RuntimeError):
    """A lab operation that failed; the message says which command and why."""


def have_net_admin() -> bool:
    """True when this process may create namespaces (root / CAP_NET_ADMIN + CAP_SYS_ADMIN)."""
    if os.geteuid() == 0:
        return True
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    caps = int(line.split()[1], 16)
                    return bool(caps & (1 << 12)) and bool(caps & (1 << 21))
    except OSError:
        pass
    return False


def sleep_until(t_mono: float) -> None:
    """Sleep until ``time.monotonic()`` reaches ``t_mono`` (a fault's timed steps)."""
    delay = t_mono - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def argv_text(argv: Sequence[str]) -> str:
    """How a user would type the command (for printing faults and errors)."""
    return shlex.join(argv)


def run(argv: Sequence[str], *, input_text: str | None = None, check: bool = True) -> str:
    """Run one command; return stdout; LabError (with stderr) when it fails and check."""
    try:
        proc = subprocess.run(
            list(argv), input=input_text, capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        raise LabError(f"{argv[0]}: command not found (needed for: {argv_text(argv)})") from None
    if check and proc.returncode != 0:
        raise LabError(f"`{argv_text(argv)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


@dataclass(frozen=True, slots=True)
class Batch:
    """One ``ip``/``tc`` batch: a tool, an optional namespace, and its command lines."""

    tool: str  # "ip" or "tc"
    netns: str | None
    lines: tuple[str, ...]
    force: bool = False  # go on past failing lines (teardown)

    @property
    def argv(self) -> list[str]:
        ns = ["-n", self.netns] if self.netns else []
        force = ["-force"] if self.force else []
        return [self.tool, *ns, *force, "-batch", "-"]


def _batch_error(batch: Batch, stderr: str, code: int) -> LabError:
    # ip/tc report "Command failed -:N": show the failing line itself.
    failing = ""
    for token in stderr.split():
        if token.startswith("-:") and token[2:].isdigit():
            n = int(token[2:])
            if 1 <= n <= len(batch.lines):
                failing = f"\n  failing line {n}: {batch.tool} {batch.lines[n - 1]}"
    where = f" in {batch.netns}" if batch.netns else ""
    return LabError(f"`{argv_text(batch.argv)}`{where} failed ({code}): {stderr.strip()}{failing}")


def run_batches(batches: Iterable[Batch], *, parallel: int = 8) -> None:
    """Run batches, up to ``parallel`` at a time; raise the first failure."""
    pending = [b for b in batches if b.lines]
    running: list[tuple[Batch, subprocess.Popen[bytes]]] = []
    errors: list[LabError] = []

    def reap(entry: tuple[Batch, subprocess.Popen[bytes]]) -> None:
        batch, proc = entry
        _, err = proc.communicate()
        if proc.returncode != 0:
            errors.append(_batch_error(batch, err.decode(errors="replace"), proc.returncode))

    while pending or running:
        while pending and len(running) < parallel:
            batch = pending.pop(0)
            # The commands go in through a temporary file: no pipe to fill, no deadlock.
            with tempfile.TemporaryFile() as script:
                script.write(("\n".join(batch.lines) + "\n").encode())
                script.seek(0)
                proc = subprocess.Popen(
                    batch.argv, stdin=script, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
                )
            running.append((batch, proc))
        reap(running.pop(0))
    if errors:
        raise errors[0]


# --- namespaces ------------------------------------------------------------------------


def netns_exists(name: str) -> bool:
    return os.path.exists(netns_path(name))


def list_netns() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def write_sysctls(netns: str | None, settings: dict[str, str | int]) -> None:
    """Write ``net.*`` sysctls (dotted names, e.g. ``net.ipv6.conf.all.forwarding``) in
    ``netns`` (None: this thread's own namespace)."""
    with in_netns(netns) if netns else contextlib.nullcontext():
        for key, value in settings.items():
            # Interface names may hold dots: only the first parts are path separators.
            path = _sysctl_path(key)
            try:
                with open(path, "w") as f:
                    f.write(str(value))
            except OSError as e:
                raise LabError(f"sysctl {key}={value} in {netns}: {e.strerror}") from None


def read_sysctl(netns: str, key: str) -> str:
    with in_netns(netns), open(_sysctl_path(key)) as f:
        return f.read().strip()


def _sysctl_path(key: str) -> str:
    parts = key.split(".")
    if parts[:3] in (["net", "ipv6", "conf"], ["net", "ipv4", "conf"]) and len(parts) > 5:
        # net.ipv6.conf.<ifname>.<key>: an interface name may itself hold dots.
        parts = [*parts[:3], ".".join(parts[3:-1]), parts[-1]]
    return "/proc/sys/" + "/".join(parts)


def ns_argv(netns: str, argv: Sequence[str]) -> list[str]:
    """``ip netns exec NS argv...``: how a command runs inside a namespace."""
    return ["ip", "netns", "exec", netns, *argv]

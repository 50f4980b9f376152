"""Which code ran where and when: the git commit (and how many tracked files differed from
it), the machine, and the one-line stamp every PNG carries in its corner."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import subprocess

from lab.fabric.paths import REPO


def git_head() -> tuple[str | None, int | None]:
    """(the commit checked out, tracked code files modified since: results/ and docs/ not
    counted) or (None, None) outside a git checkout (an exported tree, a container image)."""
    head: str | None = None
    dirty: int | None = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        git = ["git", "-C", str(REPO)]
        r = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if r.returncode == 0:
            head = r.stdout.strip()
            # the code's files only: results and docs a run rewrites are not the code it ran
            st = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no", "--",
                                 ".", ":!results", ":!docs"],
                                capture_output=True, text=True, timeout=10)  # fmt: skip
            dirty = len(st.stdout.splitlines()) if st.returncode == 0 else None
    return head, dirty


def machine(loadavg_before: float) -> dict[str, object]:
    """A benchmark JSON's ``machine`` (keys of a contract): CPUs, kernel, Python, and the
    1-minute load average before (the caller took it at its start) and now."""
    return {
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_1m_before": round(loadavg_before, 2),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
    }


def stamp_text(now: dt.datetime | None = None) -> str:
    """``2026-11-29 17:45 UTC · 2 CPUs, kernel 6.18.44 · mrc 1ead3d7 (+3 modified)``."""
    t = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d %H:%M UTC")
    head, dirty = git_head()
    code = "mrc (no git)" if head is None else f"mrc {head[:7]}"
    if dirty:
        code += f" (+{dirty} modified)"
    return f"{t} · {os.cpu_count()} CPUs, kernel {platform.release()} · {code}"


def stamp(fig: object) -> None:
    """The stamp, small and grey, in the figure's bottom right corner (a footnote goes on the
    lines above it: lab/views/plot.py)."""
    fig.text(0.995, 0.004, stamp_text(), fontsize=6, color="#777777", ha="right", va="bottom")  # type: ignore[attr-defined]

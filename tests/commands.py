"""The project's command lines as the tests run them (``import commands as C``).

Subprocesses: ``mrc-bench`` (``python -m lab.bench_cli``), ``mrc-lab`` (``python -m lab.cli``)
and its ``experiment`` command, run with this interpreter, output captured as text and a
timeout that bounds a hung run. In-process: a ``main(argv)`` called with pytest's ``capsys``,
for the command lines whose tests need no subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

BENCH = [sys.executable, "-m", "lab.bench_cli"]
LAB = [sys.executable, "-m", "lab.cli"]


def run(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def bench(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``mrc-bench ARGS``."""
    return run([*BENCH, *args], timeout)


def bench_json(*args: str, timeout: float = 120) -> dict:
    """``mrc-bench ARGS --json``'s document (fails with its stderr when it printed none)."""
    p = bench(*args, "--json", timeout=timeout)
    assert p.stdout.strip(), p.stderr[-3000:]
    return json.loads(p.stdout)


def bench_background(*args: str) -> subprocess.Popen:
    """``mrc-bench ARGS`` started in the background, stdout and stderr piped as text."""
    return subprocess.Popen(
        [*BENCH, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def lab_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``mrc-lab ARGS``."""
    return run([*LAB, *args], timeout)


def experiment(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """``mrc-lab experiment ARGS``."""
    return lab_cli("experiment", *args, timeout=timeout)


def run_main(capsys, main: Callable[[list[str]], int], *argv: str) -> tuple[int, str, str]:
    """``main(argv)`` in this process -> (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_main_json(capsys, main: Callable[[list[str]], int], *argv: str) -> tuple[int, Any]:
    """``main([*argv, "--json"])`` in this process -> (exit code, the JSON it printed)."""
    code, out, _ = run_main(capsys, main, *argv, "--json")
    return code, json.loads(out)

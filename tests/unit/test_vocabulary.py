"""Every tool held to the vocabulary of docs/cli.md: the table there is read, and each tool's
parsers (every subcommand) must show only the new names, keep each old name as a hidden
alias of the new one in the same parser (same destination), and say once what to use."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from pathlib import Path

import pytest

from lab import bench_cli
from lab import cli as lab_cli
from lab.workloads import demo
from lab.workloads.soak.main import build_parser as soak_parser
from mrcnic.cliflags import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from mrcnic.sim import incast, transfer

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def _table() -> list[tuple[str, list[str]]]:
    """(new flag, [old flags]) of each row of docs/cli.md's first table."""
    rows = []
    text = DOC.read_text()
    body = text[text.index("| idea | flag |") :].split("\n\n")[0]
    for line in body.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        new = re.findall(r"`(--[a-z0-9-]+)`", cells[1])
        old = re.findall(r"`(--[a-z0-9-]+)`", cells[3])
        assert len(new) == 1, line
        rows.append((new[0], old))
    return rows


TABLE = _table()
OLD = {o: new for new, olds in TABLE for o in olds}


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    roots = [
        ("mrc-lab", lab_cli.build_parser()),
        ("mrc-bench", bench_cli.build_parser()),
        ("mrc-sim", transfer.build_parser()),
        ("mrc-sim incast", incast.build_parser()),
        ("make demo", demo.build_parser()),
        ("make soak", soak_parser()),
    ]
    out = []
    while roots:
        name, p = roots.pop()
        out.append((name, p))
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                roots += [(f"{name} {k}", sp) for k, sp in a.choices.items()]
    return out


def test_the_table_is_read() -> None:
    assert ("--lab", ["--name"]) in TABLE and OLD["--rate-mbit"] == "--rate"
    assert len(TABLE) >= 8


@pytest.mark.parametrize(
    ("tool", "parser"), _parsers(), ids=lambda x: x if isinstance(x, str) else ""
)
def test_tool_shows_the_new_names_only(tool: str, parser: argparse.ArgumentParser) -> None:
    by_flag = {s: a for a in parser._actions for s in a.option_strings}
    for flag, action in by_flag.items():
        if flag not in OLD:
            continue
        # an old name: hidden, and an alias of the new one in this same parser
        assert action.help == argparse.SUPPRESS, f"{tool}: {flag} is shown in --help"
        new = OLD[flag]
        assert new in by_flag, f"{tool}: has the old {flag} but not {new}"
        assert by_flag[new].dest == action.dest, f"{tool}: {flag} and {new} store apart"


@pytest.mark.parametrize(
    ("parse", "old", "new", "dest"),
    [
        (lab_cli.build_parser().parse_args, ["up", "--name", "mrcx"], ["up", "--lab", "mrcx"], "name"),
        (lab_cli.build_parser().parse_args, ["up", "--rate-mbit", "25"], ["up", "--rate", "25Mbit"], "rate_mbit"),
        (lab_cli.build_parser().parse_args, ["up", "--buffer-kb", "128"], ["up", "--buffer", "128K"], "buffer_kb"),
        (lab_cli.build_parser().parse_args, ["up", "--ecn-kb", "16"], ["up", "--ecn", "16K"], "ecn_kb"),
        (lab_cli.build_parser().parse_args, ["loss", "a", "b", "--percent", "1"], ["loss", "a", "b", "--loss", "1%"], "loss_fraction"),
        (lab_cli.build_parser().parse_args, ["probe", "--seconds", "3"], ["probe", "--duration", "3s"], "seconds"),
        (lab_cli.build_parser().parse_args, ["calibrate", "--cap-mbit", "50"], ["calibrate", "--cap", "50Mbit"], "cap_mbit"),
        (bench_cli.build_parser().parse_args, ["write", "--timeline-ms", "100"], ["write", "--timeline", "100ms"], "timeline_ms"),
        (bench_cli.build_parser().parse_args, ["pause-storm", "--stuck", "h1", "--seconds", "2"], ["pause-storm", "--stuck", "h1", "--duration", "2s"], "seconds"),
        (transfer.build_parser().parse_args, ["--port-rate", "100Mbit"], ["--rate", "100Mbit"], "port_rate"),
        (transfer.build_parser().parse_args, ["--queue", "64K"], ["--buffer", "64K"], "queue"),
        (transfer.build_parser().parse_args, ["--paths-per-plane", "2"], ["--t1", "2"], "paths_per_plane"),
        (demo.build_parser().parse_args, ["--timeline-ms", "100"], ["--timeline", "100ms"], "timeline_ms"),
    ],
)  # fmt: skip
def test_an_old_name_stores_what_the_new_one_does_and_says_so_once(parse, old, new, dest) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        a_old = parse(old)
    quiet = io.StringIO()
    with contextlib.redirect_stderr(quiet):
        a_new = parse(new)
    assert getattr(a_old, dest) == pytest.approx(getattr(a_new, dest)), (old, new)
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and "is an old name" in lines[0] and "docs/cli.md" in lines[0], lines
    assert quiet.getvalue() == ""


def test_a_rate_needs_its_unit() -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as e:
        lab_cli.build_parser().parse_args(["up", "--rate", "100"])
    assert e.value.code == EXIT_USAGE and "give the unit" in err.getvalue()


def test_exit_statuses_are_the_table() -> None:
    assert (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED) == (0, 1, 2, 130)
    assert bench_cli.EXIT_USAGE == EXIT_USAGE
    text = DOC.read_text()
    for code in (0, 1, 2, 130):
        assert f"| {code} |" in text
    # "no such lab" is a usage error in both mrc-lab and mrc-bench
    out = io.StringIO()
    with contextlib.redirect_stderr(out):
        assert lab_cli.main(["status", "--lab", "mrcnolab"]) == EXIT_USAGE
        assert bench_cli.main(["write", "--lab", "mrcnolab"]) == EXIT_USAGE

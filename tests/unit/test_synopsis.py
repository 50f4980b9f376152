"""Every console script of pyproject.toml that has subcommands keeps its manual page's
SYNOPSIS whole: each subcommand its ``--help`` lists appears there as ``COMMAND SUBCOMMAND``
(``mrc-lab capture``).  The subcommands are read from the argparse parser itself
(``build_parser()`` of the entry point's module; otherwise ``COMMAND --help`` run with this
python, its ``{a,b,c}`` positional choices).  Hidden subcommands (no help line) need not be
listed.  The page is the ``docs/*.md`` titled ``# COMMAND(1)``, else the one whose SYNOPSIS
names COMMAND.  No root, no network."""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _scripts() -> dict[str, str]:
    """{command: "module:function"} of [project.scripts]."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        return dict(tomllib.load(f)["project"]["scripts"])


def _from_parser(parser: argparse.ArgumentParser) -> list[str]:
    """The subcommands --help lists: one help line each (aliases and hidden ones left out)."""
    out: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            out += [a.dest for a in action._choices_actions if a.help != argparse.SUPPRESS]
    return out


def _from_help(command: str, target: str) -> list[str]:
    """The subcommands of ``command --help`` (a main without a parser function to import):
    the ``{a,b,c}`` choices of its positional arguments."""
    module, func = target.split(":")
    code = f"import sys; from {module} import {func}; sys.argv[0] = {command!r}; sys.exit({func}())"
    r = subprocess.run(
        [sys.executable, "-c", code, "--help"],
        capture_output=True, text=True, timeout=30, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 0, f"{command} --help exited {r.returncode}: {r.stderr}"
    m = re.search(r"^positional arguments:\n((?:[ \t]+.*\n|\n)*)", r.stdout, re.MULTILINE)
    if m is None:
        return []
    out: list[str] = []
    for choices in re.findall(r"^[ \t]+\{([^}]*)\}", m.group(1), re.MULTILINE):
        out += [c.strip() for c in choices.split(",")]
    return out


def _subcommands(command: str, target: str) -> list[str]:
    module = importlib.import_module(target.split(":")[0])
    build = getattr(module, "build_parser", None)
    if callable(build):
        return _from_parser(build())
    return _from_help(command, target)


def _synopsis(page: Path) -> str | None:
    """The text between ``## SYNOPSIS`` and the next ``## `` heading, None without one."""
    m = re.search(r"^## SYNOPSIS[ \t]*\n(.*?)(?=^## |\Z)", page.read_text(), re.M | re.S)
    return m.group(1) if m else None


def _page(command: str) -> Path:
    pages = sorted(DOCS.glob("*.md"))
    titled = [p for p in pages if p.read_text().startswith(f"# {command}(")]
    if titled:
        assert len(titled) == 1, f"{command}: several manual pages: {titled}"
        return titled[0]
    named = [p for p in pages if re.search(_mention(command), _synopsis(p) or "")]
    assert len(named) == 1, (
        f"{command}: want one docs/*.md titled '# {command}(1)' or whose SYNOPSIS names it, "
        f"found {[p.name for p in named]}"
    )
    return named[0]


def _mention(*words: str) -> str:
    """A regex for the words in a row on one line, not part of a longer word."""
    return r"(?<![\w-])" + r"[ \t]+".join(map(re.escape, words)) + r"(?![\w-])"


COMMANDS = [(cmd, subs) for cmd, t in _scripts().items() if (subs := _subcommands(cmd, t))]


def test_commands_found() -> None:
    """The discovery itself: the two known commands with subcommands are among those held."""
    found = {cmd: subs for cmd, subs in COMMANDS}
    assert {"mrc-lab", "mrc-bench"} <= set(found), found
    assert {"up", "down", "capture", "probe", "experiment"} <= set(found["mrc-lab"])
    assert {"write", "lat", "allreduce"} <= set(found["mrc-bench"])


@pytest.mark.parametrize(("command", "subcommands"), COMMANDS, ids=[c for c, _ in COMMANDS])
def test_synopsis_lists_every_subcommand(command: str, subcommands: list[str]) -> None:
    page = _page(command)
    where = page.relative_to(ROOT)
    synopsis = _synopsis(page)
    assert synopsis is not None, f"{command}: {where} has no '## SYNOPSIS' section"
    missing = [s for s in subcommands if not re.search(_mention(command, s), synopsis)]
    assert not missing, (
        f"{command}: the SYNOPSIS of {where} lacks {len(missing)} subcommand(s) that "
        f"`{command} --help` lists: {', '.join(f'{command} {s}' for s in missing)}"
    )

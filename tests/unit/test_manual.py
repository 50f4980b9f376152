"""The user's part of the manual (README.md and the pages in docs/, not docs/design/ or
docs/results/) stays short enough to read in an evening and holds no history: issue numbers,
"until <date>" and "it used to" belong to the design notes and the results."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
USER_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MAX_WORDS = 15_000
HISTORY = re.compile(r"\bissue #?\d+|\buntil 20\d\d-|\bit used to\b", re.I)


def test_the_users_part_is_under_its_word_budget() -> None:
    words = {p.name: len(p.read_text().split()) for p in USER_PAGES}
    assert sum(words.values()) < MAX_WORDS, words


def test_the_users_part_holds_no_history() -> None:
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in USER_PAGES
             for n, line in enumerate(p.read_text().splitlines(), 1) if HISTORY.search(line)]  # fmt: skip
    assert not found, "\n".join(found)

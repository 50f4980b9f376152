"""Every relative link of the manual (README.md, docs/**) points at a file that exists, and
every #anchor into a page at one of its headings (GitHub's slugs) or an explicit <a id>: the
manual is in two parts (the user's pages in docs/, design notes in docs/design/,
measurements in docs/results/) and text moves between them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def anchors(text: str) -> set[str]:
    """The fragments a page answers to: its headings as GitHub slugs them (lower case, no
    punctuation but - and _, spaces to -, -1, -2... for repeats) and its <a id="...">."""
    out: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m[1].strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
        out.update(re.findall(r'<a (?:id|name)="([^"]+)"', line))
    return out


def _links() -> list[tuple[Path, str]]:
    out = []
    for page in PAGES:
        for m in LINK.finditer(page.read_text()):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", m[1]):  # not a URL
                out.append((page, m[1]))
    return out


def test_every_relative_link_resolves() -> None:
    broken = [f"{p.relative_to(ROOT)}: {t}" for p, t in _links()
              if not t.startswith("#") and not (p.parent / t.split("#")[0]).exists()]  # fmt: skip
    assert not broken, "\n".join(broken)


def test_every_anchor_names_a_heading() -> None:
    cache: dict[Path, set[str]] = {}
    broken = []
    for page, target in _links():
        if "#" not in target:
            continue
        name, frag = target.split("#", 1)
        dest = page.parent / name if name else page
        if dest.suffix != ".md" or not dest.exists():
            continue
        if dest not in cache:
            cache[dest] = anchors(dest.read_text())
        if frag not in cache[dest]:
            broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, "\n".join(broken)

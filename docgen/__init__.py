"""The docs site's generated blocks, from the declarations they describe.

    python -m docgen           # rewrite every marked block under docs/ (make docs-gen)
    python -m docgen --check   # fail, naming the pages, when a block differs (the tests run it)

A page marks a block `<!-- gen:NAME -->` … `<!-- /gen:NAME -->`; NAME is one of `SOURCES`
(docgen/sources.py). Nothing between the markers is written by hand.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
BLOCK = re.compile(r"(<!-- gen:([a-z0-9-]+) -->\n)(.*?)(<!-- /gen:\2 -->)", re.S)


def regenerate(text: str, sources: dict[str, Callable[[], str]]) -> str:
    """`text` with each marked block's content made anew by its source."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in sources:
            raise KeyError(f"unknown generated block {name!r}: one of {sorted(sources)}")
        return f"{match.group(1)}{sources[name]().rstrip()}\n{match.group(4)}"

    return BLOCK.sub(fill, text)


def pages(root: Path = DOCS) -> Iterator[Path]:
    yield from sorted(root.rglob("*.md"))


def stale(sources: dict[str, Callable[[], str]], root: Path = DOCS) -> list[Path]:
    """The pages whose generated blocks differ from what their sources say now."""
    found = []
    for page in pages(root):
        text = page.read_text(encoding="utf-8")
        if BLOCK.search(text) and regenerate(text, sources) != text:
            found.append(page)
    return found


def write(sources: dict[str, Callable[[], str]], root: Path = DOCS) -> list[Path]:
    """Rewrite the stale pages; returns them."""
    changed = stale(sources, root)
    for page in changed:
        text = page.read_text(encoding="utf-8")
        page.write_text(regenerate(text, sources), encoding="utf-8")
    return changed


def used(root: Path = DOCS) -> set[str]:
    """The names of the blocks the pages mark."""
    return {m.group(2) for page in pages(root) for m in BLOCK.finditer(page.read_text("utf-8"))}

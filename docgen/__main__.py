"""python -m docgen [--check]: see docgen/__init__.py."""

from __future__ import annotations

import sys

from docgen import ROOT, stale, write
from docgen.sources import SOURCES


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        found = stale(SOURCES)
        for page in found:
            print(f"{page.relative_to(ROOT)}: generated blocks differ; run make docs-gen")
        return 1 if found else 0
    if argv:
        print("usage: python -m docgen [--check]", file=sys.stderr)
        return 2
    for page in write(SOURCES):
        print(f"rewrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

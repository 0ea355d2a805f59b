"""The docs a user reads stay current with the code: every server variable is documented, and
the README keeps the two commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
VARIABLES = sorted(f"FINISHLINE_{name.upper()}" for name in Settings.model_fields)


@pytest.mark.parametrize("document", [".env.example", "docs/reference/settings.md", "Dockerfile"])
def test_every_server_variable_is_documented(document: str) -> None:
    text = (ROOT / document).read_text(encoding="utf-8")
    assert [v for v in VARIABLES if v not in text] == []


def test_readme_shows_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make run" in text
    assert "make test" in text


def test_the_readme_stays_a_front_door() -> None:
    """Short: what it is, the two commands, the tour, a real model, the container, links. The
    rest is a page of the docs site (docs/)."""
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_every_link_of_the_readme_leads_somewhere() -> None:
    """The README is not part of the site's strict build: its links to files and their
    headings are checked here (a heading's anchor as the site makes it)."""
    from markdown.extensions.toc import slugify

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        page = ROOT / path
        if not page.exists():
            broken.append(target)
            continue
        if anchor:
            headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)
            if anchor not in {slugify(h.replace("`", ""), "-") for h in headings}:
                broken.append(target)
    assert broken == []

"""The docs a user reads stay current with the code: every server variable is documented, and
the README keeps the two commands."""

from __future__ import annotations

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

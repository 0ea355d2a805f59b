"""Nothing generated is copied by hand: every generated block of docs/ is what its declaration
says now (settings, events, stop reasons, interventions, the API), and the check catches a
block that drifted."""

from __future__ import annotations

from pathlib import Path

import pytest

from docgen import regenerate, stale, used
from docgen.__main__ import main
from docgen.sources import SOURCES, member_docs


def test_every_generated_block_is_what_its_declaration_says() -> None:
    # on a new setting, event or endpoint: run `make docs-gen` and commit docs/
    assert [str(page) for page in stale(SOURCES)] == []


def test_every_source_has_its_page() -> None:
    assert used() == set(SOURCES)


def test_a_block_edited_by_hand_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# t\n\n<!-- gen:s -->\nby hand\n<!-- /gen:s -->\n", encoding="utf-8")
    sources = {"s": lambda: "| a |"}
    assert stale(sources, tmp_path) == [page]
    assert (
        regenerate(page.read_text(), sources) == "# t\n\n<!-- gen:s -->\n| a |\n<!-- /gen:s -->\n"
    )


def test_the_check_command_fails_on_a_stale_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import docgen.__main__ as cli

    (tmp_path / "p.md").write_text("<!-- gen:events -->\nold\n<!-- /gen:events -->\n")
    monkeypatch.setattr(cli, "stale", lambda sources: stale(sources, tmp_path))
    monkeypatch.setattr(cli, "ROOT", tmp_path)
    assert main(["--check"]) == 1


def test_an_undescribed_member_is_refused() -> None:
    from enum import StrEnum

    class Bare(StrEnum):
        DESCRIBED = "described"  # says what it is
        SILENT = "silent"

    with pytest.raises(ValueError, match="SILENT"):
        member_docs(Bare)

"""The docs site builds in strict mode (a broken link or anchor fails it), from a fresh tree,
and the container does not carry it."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.docs.site import ROOT, build


def test_the_site_builds_in_strict_mode_with_no_warning(tmp_path: Path) -> None:
    done = build(tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stdout + done.stderr
    built = {
        p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("*.html")
    }
    assert {"index.html", "guides/first-run.html", "reference/settings.html"} <= built


def test_a_broken_anchor_fails_the_build(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    guide = tmp_path / "docs" / "guides" / "first-run.md"
    guide.write_text(guide.read_text() + "\nSee [nowhere](approvals.md#no-such-heading).\n")
    done = build(tmp_path / "site", tmp_path / "mkdocs.yml")
    assert done.returncode != 0
    assert "no-such-heading" in done.stdout + done.stderr


def test_the_theme_fetches_no_font_from_the_network() -> None:
    text = (ROOT / "mkdocs.yml").read_text()
    assert "\n  font: false\n" in text


def test_the_container_does_not_carry_the_docs() -> None:
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignored  # everything is left out but what is listed
    assert not [line for line in ignored if line.startswith("!") and "docs" in line]
    assert "mkdocs" not in (ROOT / "Dockerfile").read_text()
    assert "COPY docs" not in (ROOT / "Dockerfile").read_text()

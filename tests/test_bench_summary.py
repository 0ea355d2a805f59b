"""The performance page's "where it stands" table (docs/performance.md) is what the committed
bench results say (issues #10, #29, #36, #40, #42): nobody edits a figure or a verdict by hand, and
a figure without a result says so."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from bench import summary


def _block(text: str, name: str) -> str:
    found = re.search(rf"<!-- bench-{name}:start -->\n(.*?)\n<!-- bench-{name}:end -->", text, re.S)
    assert found, f"no bench-{name} block"
    return found.group(1)


def test_readmes_hold_the_tables_generated_from_the_results() -> None:
    generated = summary.blocks(quick=False)
    for readme in (summary.README, summary.BENCH_README):
        text = readme.read_text(encoding="utf-8")
        for name, body in generated.items():
            if f"<!-- bench-{name}:start -->" in text:
                assert _block(text, name) == body, (
                    f"{readme.name}: bench-{name} differs from bench/results: "
                    "run python -m bench --summary --readme"
                )
    assert "<!-- bench-summary:start -->" in summary.README.read_text(encoding="utf-8")


def test_every_target_has_a_verdict_from_the_committed_results() -> None:
    rows = summary.rows(quick=False)
    assert len(rows) == len(summary.FIGURES) == 24
    for _issue, text, _now, target, verdict in rows:
        if target == "–":
            assert verdict == "reported", text
        else:
            assert verdict in {"met", "**missed**"}, text


def test_a_figure_without_results_is_not_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(summary.RESULTS / "engine.json", tmp_path / "engine.json")
    monkeypatch.setattr(summary, "RESULTS", tmp_path)
    verdicts = {row[1]: row[4] for row in summary.rows(quick=False)}
    engine = next(text for text in verdicts if text.startswith("engine overhead"))
    assert verdicts.pop(engine) in {"met", "**missed**"}
    assert set(verdicts.values()) == {"not measured"}

"""The layers stay apart: the engine knows nothing of HTTP or storage, runs nothing of HTTP."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parent.parent / "app"

FORBIDDEN = {
    "engine": (
        "fastapi",
        "starlette",
        "httpx",
        "sse_starlette",
        "uvicorn",
        "sqlite3",
        "app.runs",
        "app.api",
        "app.llm",
        "app.tools",
        "app.settings",
        "opentelemetry",
        "app.tracing",
    ),
    # traces are an observer port (app.runs.observer) that app.tracing implements
    "runs": (
        "fastapi",
        "starlette",
        "sse_starlette",
        "uvicorn",
        "app.api",
        "opentelemetry",
        "app.tracing",
    ),
    "llm": ("fastapi", "starlette", "app.runs", "app.api", "app.settings", "opentelemetry"),
    "tools": (
        "fastapi",
        "starlette",
        "app.runs",
        "app.api",
        "app.settings",
        "app.llm",
        "opentelemetry",
    ),
    # the CLI is an HTTP client of the service (only `serve` reads app.settings, lazily)
    "cli": ("fastapi", "starlette", "app.runs", "app.api", "app.llm", "app.tools", "app.main"),
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def violations(layer: str) -> list[str]:
    found = []
    for path in sorted((APP / layer).rglob("*.py")):
        for module in imported_modules(path):
            for banned in FORBIDDEN[layer]:
                if module == banned or module.startswith(banned + "."):
                    found.append(f"{path.relative_to(APP.parent)} imports {module}")
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_nothing_it_must_not(layer: str) -> None:
    assert violations(layer) == []


def test_the_check_catches_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import httpx\nfrom app.runs.store import RunStore\n", encoding="utf-8")
    assert imported_modules(bad) >= {"httpx", "app.runs.store"}


def test_engine_modules_stay_small() -> None:
    too_long = [
        p.name for p in (APP / "engine").glob("*.py") if len(p.read_text().splitlines()) > 400
    ]
    assert too_long == []

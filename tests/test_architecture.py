"""The layers stay apart: the engine knows nothing of HTTP or storage, runs nothing of HTTP,
settings, tools or models (only the engine and itself), and no module imports itself back
(imports under TYPE_CHECKING and inside functions count)."""

from __future__ import annotations

import ast
import re
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
    # HTTP only: the API reaches runs through `RunManager`, never a store (nor the thread index
    # a store keeps, which `Threads` reads for it), a backend or Redis itself
    "api": (
        "app.runs.store",
        "app.runs.stores",
        "app.runs.backends",
        "app.runs.replicas",
        "app.runs.threads.index",
        "redis",
        "sqlite3",
    ),
    # who is calling: credentials to a Caller, knowing no HTTP framework, store or settings
    # module (app.settings inherits its settings from it)
    "identity": (
        "fastapi",
        "starlette",
        "app.runs",
        "app.api",
        "app.llm",
        "app.settings",
        "app.main",
        "opentelemetry",
    ),
    # the CLI is an HTTP client of the service (only `serve` reads app.settings, lazily)
    "cli": ("fastapi", "starlette", "app.runs", "app.api", "app.llm", "app.tools", "app.main"),
}


ONLY = {
    # the runs layer depends on the engine and on nothing else of the app; what it needs from
    # settings, tools and models comes through `app.runs.ports`, implemented by app.assembly
    "runs": ("app.engine", "app.runs"),
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


@pytest.mark.parametrize("layer", sorted(ONLY))
def test_layer_imports_only_what_it_may_of_the_app(layer: str) -> None:
    allowed = ONLY[layer]
    found = [
        f"{path.relative_to(APP.parent)} imports {module}"
        for path in sorted((APP / layer).rglob("*.py"))
        for module in imported_modules(path)
        if (module == "app" or module.startswith("app."))
        and not any(module == a or module.startswith(a + ".") for a in allowed)
    ]
    assert found == []


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the app it imports (`from a import b` counts a.b if b is one)."""
    modules = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                candidates = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                continue
            targets.update(c for c in candidates if c in modules and c != name)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    assert cycles(import_graph(APP)) == []


def test_the_cycle_check_catches_a_cycle_under_type_checking(tmp_path: Path) -> None:
    package = tmp_path / "app"
    package.mkdir()
    (package / "a.py").write_text("from app.b import B\n", encoding="utf-8")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app import a\n",
        encoding="utf-8",
    )
    (package / "c.py").write_text("import app.a\n", encoding="utf-8")
    assert cycles(import_graph(package)) == [["app.a", "app.b"]]


def test_the_check_catches_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import httpx\nfrom app.runs.store import RunStore\n", encoding="utf-8")
    assert imported_modules(bad) >= {"httpx", "app.runs.store"}


@pytest.mark.parametrize("layer", ["engine", "runs"])
def test_modules_stay_small(layer: str) -> None:
    """No module over 400 lines, sub-packages included (app/runs/stores, app/runs/replicas)."""
    too_long = [
        str(p.relative_to(APP))
        for p in (APP / layer).rglob("*.py")
        if len(p.read_text().splitlines()) > 400
    ]
    assert too_long == []


def test_the_runs_layer_keeps_its_rooms() -> None:
    """Store implementations live in app/runs/stores, replica coordination in
    app/runs/replicas: the top level of app/runs holds the lifecycle, at most 24 modules."""
    top = sorted(p.name for p in (APP / "runs").glob("*.py"))
    assert len(top) <= 24, top
    assert not [name for name in top if name.startswith(("redis", "sqlite", "memory"))]


ARCHITECTURE = APP.parent / "docs" / "architecture.md"


def _block(name: str) -> list[str]:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index(f"<!-- {name}:start -->\n") + len(f"<!-- {name}:start -->\n")
    return text[start : text.index(f"<!-- {name}:end -->", start)].strip().splitlines()[2:]


def import_rows() -> list[str]:
    """The import rules above as docs/architecture.md's table shows them."""

    def names(modules: tuple[str, ...]) -> str:
        return ", ".join(f"`{m}`" for m in modules) if modules else "–"

    return [
        f"| `app/{layer}` | {names(ONLY.get(layer, ()))} | {names(FORBIDDEN[layer])} |"
        for layer in sorted(FORBIDDEN)
    ]


def test_the_architecture_page_shows_the_import_rules_the_test_enforces() -> None:
    # on a new rule: paste the expected rows (the assertion shows them) into the page
    assert _block("imports") == import_rows()


def test_the_architecture_page_maps_every_room_of_app() -> None:
    """Every module and package at the top of app/, and every sub-package of a package
    there, is a row of the rooms table (a new room is mapped in the commit that makes it)."""
    rooms = {line.split("|")[1].strip().strip("`") for line in _block("rooms")}
    packages = [p for p in APP.iterdir() if (p / "__init__.py").exists()]
    expected = {
        *(f"app/{p.name}" for p in APP.glob("*.py") if p.name != "__init__.py"),
        *(f"app/{p.name}/" for p in packages),
        *(
            f"app/{p.name}/{sub.name}/"
            for p in packages
            for sub in p.iterdir()
            if (sub / "__init__.py").exists()
        ),
    }
    assert sorted(expected - rooms) == []
    assert sorted(rooms - expected) == []


def test_every_path_the_architecture_page_names_exists() -> None:
    named = set(re.findall(r"`(app/[\w/.]+)`", ARCHITECTURE.read_text(encoding="utf-8")))
    assert named
    assert sorted(p for p in named if not (APP.parent / p).exists()) == []

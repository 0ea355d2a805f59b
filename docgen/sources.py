"""Where each generated block comes from: the one declaration of what it describes.

- run-settings: the engine's `Limits` (app/engine/policies.py, each field a `setting()`)
- server-settings: `Settings` (app/settings.py), its fields that are not a per-run default/cap
- events, stop-reasons, interventions: `EventType`, `StopReason` (with the status each ends a
  run with, `status_for`), `InterventionKind`, each member described by its attribute
  docstring or its trailing comment
- api-operations: the OpenAPI document a server with the default settings serves
- metrics: `RunMetrics` (app/runs/metrics.py), every metric of runs `/metrics` serves
- errors: the error map (`RUNS_ERRORS`, `IDENTITY_ERRORS`, `STATUS_TYPES` in app/api/errors.py)
"""

from __future__ import annotations

import ast
import inspect
import os
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from typing import Any

from app.engine.declarations import declared
from app.engine.events import TERMINAL_EVENT_TYPES, EventType
from app.engine.policies import InterventionKind, Limits, StopReason
from app.runs.records import status_for
from app.settings import CAPS, RUN_SETTINGS, Settings


def _value(value: Any) -> str:
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def run_settings() -> str:
    rows = ["| setting | default, set by | cap, set by | meaning |", "|---|---|---|---|"]
    for item in declared(Limits).values():
        variable = f"`FINISHLINE_{item.name.upper()}`"
        cap = "–"
        if item.spec.capped:
            shown = "none" if item.spec.cap is None else _value(item.spec.cap)
            cap = f"{shown}, `FINISHLINE_{item.spec.cap_name(item.name).upper()}`"
        meaning = item.spec.description.removesuffix(".")
        rows.append(f"| `{item.name}` | {_value(item.default)}, {variable} | {cap} | {meaning} |")
    return "\n".join(rows)


def _default(field: Any) -> str:
    if field.is_required() or field.default in (None, [], {}, ()):
        return "(unset)"
    if field.default_factory is not None:
        return "(unset)"
    default = field.default
    if hasattr(default, "get_secret_value"):
        return "(unset)"
    return f"`{_value(default)}`"


def server_settings() -> str:
    per_run = set(RUN_SETTINGS) | set(CAPS.values())
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        if name in per_run:
            continue
        if not field.description:
            raise ValueError(f"Settings.{name} has no description")
        meaning = field.description.replace("|", "\\|")
        rows.append(f"| `FINISHLINE_{name.upper()}` | {_default(field)} | {meaning} |")
    return "\n".join(rows)


def member_docs(enum: type[Enum]) -> dict[str, str]:
    """Each member's description: the docstring under it, else its line's trailing comment."""
    source = textwrap.dedent("".join(inspect.getsourcelines(enum)[0])).splitlines()
    body = ast.parse("\n".join(source))
    cls = body.body[0]
    assert isinstance(cls, ast.ClassDef)
    docs: dict[str, str] = {}
    statements = cls.body
    for i, node in enumerate(statements):
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        after = statements[i + 1] if i + 1 < len(statements) else None
        if (
            isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[name] = " ".join(after.value.value.split())
            continue
        line = source[node.lineno - 1]
        if "  # " in line:
            docs[name] = line.split("  # ", 1)[1].strip()
    missing = [m.name for m in enum if m.name not in docs]
    if missing:
        raise ValueError(f"{enum.__name__}: describe {missing} (a docstring or a # comment)")
    return docs


def _enum_table(enum: type[Enum], header: str, mark: Callable[[Any], str] | None = None) -> str:
    docs = member_docs(enum)
    rows = [f"| {header} | meaning |", "|---|---|"]
    for member in enum:  # type: ignore[var-annotated]
        text = docs[member.name] + (mark(member) if mark else "")
        rows.append(f"| `{member.value}` | {text.replace('|', chr(92) + '|')} |")
    return "\n".join(rows)


def events() -> str:
    return _enum_table(
        EventType, "type", lambda m: " **Terminal.**" if m in TERMINAL_EVENT_TYPES else ""
    )


def stop_reasons() -> str:
    docs = member_docs(StopReason)
    rows = ["| reason | the run ends | meaning |", "|---|---|---|"]
    for reason in StopReason:
        rows.append(f"| `{reason.value}` | `{status_for(reason).value}` | {docs[reason.name]} |")
    return "\n".join(rows)


def interventions() -> str:
    return _enum_table(InterventionKind, "kind")


@contextmanager
def _no_environment() -> Iterator[None]:
    """The server's defaults: no FINISHLINE_ or OPENAI_ variable of this shell reaches them."""
    saved = {k: v for k, v in os.environ.items() if k.startswith(("FINISHLINE_", "OPENAI_"))}
    for key in saved:
        del os.environ[key]
    try:
        yield
    finally:
        os.environ.update(saved)


def api_operations() -> str:
    from app.main import create_app

    with _no_environment():
        settings = Settings(_env_file=None, store_url="memory://")  # type: ignore[call-arg]
        document = create_app(settings).openapi()
    rows = ["| operation | what it does | answers |", "|---|---|---|"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            statuses = ", ".join(sorted(operation.get("responses", {})))
            summary = operation.get("summary", "").replace("|", "\\|")
            rows.append(f"| `{method.upper()} {path}` | {summary} | {statuses} |")
    return "\n".join(rows)


def metrics() -> str:
    """Every metric `/metrics` serves of runs (per-key ones included), as `RunMetrics` declares
    it: name (a counter's with `_total`), type, labels, help."""
    from prometheus_client import CollectorRegistry

    from app.runs.metrics import RunMetrics

    registry = CollectorRegistry(auto_describe=True)
    RunMetrics(registry, per_key=True)
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for family in registry.collect():
        name = f"{family.name}_total" if family.type == "counter" else family.name
        described = registry._names_to_collectors[name]  # the collector: its label names
        labels = ", ".join(f"`{n}`" for n in described._labelnames) or "–"
        rows.append(f"| `{name}` | {family.type} | {labels} | {family.documentation} |")
    return "\n".join(rows)


def errors() -> str:
    """The error map (app/api/errors.py): each refusal of the runs layer and of identity with
    its status and type, described by its exception's docstring; then the type a status has
    when nothing more specific says."""
    from app.api.errors import IDENTITY_ERRORS, RUNS_ERRORS, STATUS_TYPES
    from app.runs.errors import RunsError

    rows = ["| status | type | when |", "|---|---|---|"]
    seen: set[tuple[int, str]] = set()
    for klass, (status, type_) in sorted(
        {**RUNS_ERRORS, **IDENTITY_ERRORS}.items(), key=lambda item: item[1][0]
    ):
        if klass is RunsError or (status, type_) in seen:
            continue
        seen.add((status, type_))
        doc = inspect.getdoc(klass) or ""
        when = " ".join(doc.split("\n\n")[0].split()).replace("|", "\\|")
        rows.append(f"| {status} | `{type_}` | {when} |")
    rows += ["", "| status | type of any other refusal |", "|---|---|"]
    rows += [f"| {status} | `{type_}` |" for status, type_ in sorted(STATUS_TYPES.items())]
    return "\n".join(rows)


SOURCES: dict[str, Callable[[], str]] = {
    "run-settings": run_settings,
    "server-settings": server_settings,
    "events": events,
    "stop-reasons": stop_reasons,
    "interventions": interventions,
    "api-operations": api_operations,
    "metrics": metrics,
    "errors": errors,
}

"""Each per-run setting is declared once, on the engine's `Limits`: the request model, the
server's defaults and caps, the OpenAPI text and .env.example cannot drift from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.engine.declarations import Declared, declared
from app.engine.policies import Limits
from app.main import create_app
from app.runs.spec import RunSettingsIn
from app.settings import CAPS, RUN_SETTINGS, Settings
from tests.api.kit import error_of, finishing, settings
from tests.fakes.service import api_client, service_settings

ROOT = Path(__file__).resolve().parent.parent
DECLARED = list(declared(Limits).values())
SECTION = "# --- Per-run defaults (DESIGN §2) and their caps"


def bounds(metadata: list[Any]) -> dict[str, Any]:
    return {n: getattr(m, n) for m in metadata for n in ("ge", "gt") if hasattr(m, n)}


def declared_bounds(item: Declared) -> dict[str, Any]:
    return {n: v for n, v in (("ge", item.spec.ge), ("gt", item.spec.gt)) if v is not None}


def env_value(value: Any) -> str:
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def env_section() -> str:
    """What .env.example says of the per-run settings, from their declarations."""
    lines = [
        SECTION + " " + "-" * (76 - len(SECTION)),
        "# A request's `settings` may override each default, up to the cap.",
    ]
    for item in DECLARED:
        lines.append(f"# {item.description}")
        lines.append(f"# FINISHLINE_{item.name.upper()}={env_value(item.default)}")
        if item.spec.capped:
            cap = item.spec.cap_name(item.name)
            lines.append(f"# FINISHLINE_{cap.upper()}={env_value(item.spec.cap)}")
    return "\n".join(lines) + "\n"


def test_the_request_model_has_one_field_per_setting_with_its_type_bounds_and_text() -> None:
    fields = RunSettingsIn.model_fields
    assert list(fields) == [item.name for item in DECLARED]
    for item in DECLARED:
        field = fields[item.name]
        assert field.annotation == item.type | None, item.name
        assert field.default is None, item.name
        assert bounds(field.metadata) == declared_bounds(item), item.name
        assert field.description == item.description, item.name


def test_the_server_has_a_default_and_a_cap_per_setting_as_declared() -> None:
    fields = Settings.model_fields
    for item in DECLARED:
        default = fields[item.name]
        assert default.annotation == item.type, item.name
        assert default.default == item.default, item.name
        assert bounds(default.metadata) == declared_bounds(item), item.name
        cap_name = item.spec.cap_name(item.name)
        assert (cap_name in fields) == item.spec.capped, cap_name
        if item.spec.capped:
            assert fields[cap_name].default == item.spec.cap, cap_name
            assert bounds(fields[cap_name].metadata) == declared_bounds(item), cap_name
    assert set(CAPS) == {item.name for item in DECLARED if item.spec.capped}
    assert Settings().run_defaults() == Limits()
    assert declared(Limits) == RUN_SETTINGS


def test_the_openapi_text_of_each_setting_is_its_declaration() -> None:
    schema = create_app(service_settings()).openapi()["components"]["schemas"]["RunSettingsIn"]
    described = {name: prop["description"] for name, prop in schema["properties"].items()}
    assert described == {item.name: item.description for item in DECLARED}


def test_env_example_lists_every_setting_as_declared() -> None:
    text = (ROOT / ".env.example").read_text(encoding="utf-8")
    start = text.index(SECTION)
    # on a new setting: paste the expected section (the assertion shows it) into .env.example
    assert text[start:] == env_section()


def readme_value(value: Any) -> str:
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def readme_row(item: Declared) -> str:
    variable = f"`FINISHLINE_{item.name.upper()}`"
    cap = "–"
    if item.spec.capped:
        shown = "none" if item.spec.cap is None else readme_value(item.spec.cap)
        cap = f"{shown}, `FINISHLINE_{item.spec.cap_name(item.name).upper()}`"
    meaning = item.spec.description.removesuffix(".")
    return f"| `{item.name}` | {readme_value(item.default)}, {variable} | {cap} | {meaning} |"


def test_the_settings_page_lists_every_setting_as_declared() -> None:
    text = (ROOT / "docs" / "reference" / "settings.md").read_text(encoding="utf-8")
    header = "| setting | default, set by | cap, set by | meaning |\n|---|---|---|---|\n"
    start = text.index(header) + len(header)
    rows = text[start : text.index("\n<!-- /gen:run-settings -->", start)].splitlines()
    # on a new setting: `make docs-gen` rewrites the page's table (docgen)
    assert rows == [readme_row(item) for item in DECLARED]


@pytest.mark.parametrize("name", [i.name for i in DECLARED if not i.nullable])
async def test_null_for_a_setting_that_takes_no_null_is_refused(name: str) -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json=finishing(settings={name: None}))
    error = error_of(response, 422, "validation_error")
    assert error["details"]["field"] == f"settings.{name}"
    assert "must not be null" in error["message"]

"""The OpenAPI document declares what the server enforces, with this server's caps, so a
request a client builds from the schema is not refused by a check the schema hides."""

from __future__ import annotations

import re
from typing import Any

from app.main import create_app
from tests.api.kit import settings


def _document(**overrides: Any) -> dict[str, Any]:
    return create_app(settings(**overrides)).openapi()


def _parameter(document: dict[str, Any], path: str, name: str) -> dict[str, Any]:
    operation = document["paths"][path]["get"]
    return next(p for p in operation["parameters"] if p["name"] == name)["schema"]


def _branch(prop: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(b for b in prop.get("anyOf", [prop]) if b.get("type") == kind)


def test_query_and_header_bounds_are_declared() -> None:
    document = _document(max_wait_s=42)

    assert (
        _branch(_parameter(document, "/runs/{run_id}/wait", "timeout_s"), "number")["maximum"] == 42
    )
    after = _branch(_parameter(document, "/runs/{run_id}/events", "after"), "integer")
    assert after["maximum"] == 10**18 - 1
    last_event_id = _branch(
        _parameter(document, "/runs/{run_id}/events", "last-event-id"), "string"
    )
    assert last_event_id["pattern"] == r"^[0-9]{1,18}$"
    assert not re.fullmatch(last_event_id["pattern"], "")
    status = _branch(_parameter(document, "/runs", "status"), "array")["items"]["pattern"]
    assert re.fullmatch(status, "completed, failed")
    assert not re.fullmatch(status, "a")


def test_the_body_declares_this_servers_caps_and_its_size_answer() -> None:
    document = _document(max_task_chars=500, max_steps=5, max_steps_limit=7, max_tools=3)
    schemas = document["components"]["schemas"]
    run = schemas["RunCreate"]["properties"]

    assert run["task"]["maxLength"] == 500
    assert _branch(run["system_prompt"], "string")["maxLength"] == 100_000
    assert run["tools"]["maxItems"] == 3
    assert _branch(schemas["RunSettingsIn"]["properties"]["max_steps"], "integer")["maximum"] == 7
    assert "413" in document["paths"]["/runs"]["post"]["responses"]


def test_a_created_run_links_to_the_operations_on_it() -> None:
    links = _document()["paths"]["/runs"]["post"]["responses"]["202"]["links"]
    operations = {
        op["operationId"] for path in _document()["paths"].values() for op in path.values()
    }

    assert {link["operationId"] for link in links.values()} <= operations
    assert len(links) == 6

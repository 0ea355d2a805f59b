"""Expensive work on a POST /runs body is bounded or kept off the event loop: the number of
JSON values is counted in the raw bytes before parsing, parsing and validation run in a
worker thread, each tool schema is checked against the metaschema and its validator built
once, in a worker thread, and reused at creation, at start and for every call.

What the event loop still does for the heaviest request within the caps is measured, not
asserted here (bench/loop_stall.py); these tests pin down where the costly work runs, which
does not depend on how busy the machine is."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest
from jsonschema import Draft202012Validator

from app.api import runbody
from app.tools import base
from tests.api.kit import error_of, finish, finishing, run_to_end, scripted, settings
from tests.fakes.service import api_client


async def test_a_body_with_too_many_json_values_is_refused_before_it_is_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class NotParsed:
        @staticmethod
        def model_validate(data: Any) -> None:
            raise AssertionError("the body was parsed and validated")

    async with api_client(settings(max_body_json_values=1000)) as client:
        monkeypatch.setattr(runbody, "RunCreate", NotParsed)
        response = await client.post("/runs", json=finishing(metadata={"a": [[]] * 2000}))

        error = error_of(response, 422, "validation_error")
        assert error["details"]["field"] == "body"
        assert error["details"]["cap"] == 1000
        monkeypatch.undo()
        assert (await client.post("/runs", json=finishing())).status_code == 202


async def test_each_tool_schema_is_checked_against_the_metaschema_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checked: list[Any] = []
    real = Draft202012Validator.check_schema

    def counting(schema: Any, **options: Any) -> None:
        checked.append(schema)
        real(schema, **options)

    monkeypatch.setattr(Draft202012Validator, "check_schema", counting)
    base._COMPILED.clear()
    tools = [
        {
            "name": f"lookup_{i}",
            "description": "Look up.",
            "url": "https://api.example.com/lookup",
            "parameters": {"type": "object", "properties": {f"p{i}": {"type": "string"}}},
        }
        for i in range(3)
    ]
    async with api_client(settings(http_tool_allow_hosts=["api.example.com"])) as client:
        run = await run_to_end(client, finishing(http_tools=tools))

        assert run["status"] == "completed"
        assert len([s for s in checked if "p0" in s.get("properties", {})]) == 1
        assert len([s for s in checked if "p2" in s.get("properties", {})]) == 1


async def test_an_invalid_tool_schema_is_still_422_naming_it() -> None:
    tool = {
        "name": "lookup",
        "description": "Look up.",
        "url": "https://api.example.com/lookup",
        "parameters": {"type": "object", "properties": {"a": {"type": "no-such-type"}}},
    }
    async with api_client(settings(http_tool_allow_hosts=["api.example.com"])) as client:
        response = await client.post("/runs", json=finishing(http_tools=[tool]))

        error = error_of(response, 422, "validation_error")
        assert error["details"]["field"] == "http_tools[0].parameters"


def _heavy_tools(count: int, properties: int) -> list[dict[str, Any]]:
    """Distinct schemas, as many properties as fit the caps: the most metaschema work."""
    return [
        {
            "name": f"lookup_{i}",
            "description": "Look up.",
            "url": "https://api.example.com/lookup",
            "parameters": {
                "type": "object",
                "properties": {
                    f"p{i}_{j}": {"type": "string", "maxLength": 100} for j in range(properties)
                },
                "required": [f"p{i}_0"],
            },
        }
        for i in range(count)
    ]


async def test_tool_schemas_are_compiled_off_the_event_loop_even_when_nothing_is_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop_thread = threading.get_ident()
    on_loop: list[Any] = []
    checked: list[Any] = []
    real = Draft202012Validator.check_schema

    def recording(schema: Any, **options: Any) -> None:
        checked.append(schema)
        if threading.get_ident() == loop_thread:
            on_loop.append(schema)
        real(schema, **options)

    monkeypatch.setattr(Draft202012Validator, "check_schema", recording)
    monkeypatch.setattr(base, "COMPILED_SCHEMAS", 0)  # every check a miss: parse, create, start
    tools = _heavy_tools(64, 12)
    bad_call = {"tool_calls": [{"name": "lookup_3", "arguments": {"p3_0": 7}}]}
    body = scripted(bad_call, finish(), http_tools=tools)
    async with api_client(settings(http_tool_allow_hosts=["api.example.com"])) as client:
        run = await run_to_end(client, body)
        events = (
            await client.get(f"/runs/{run['id']}/events", headers={"Accept": "application/json"})
        ).json()["events"]

    assert run["status"] == "completed"
    (observation,) = [e for e in events if e["type"] == "observation" and e["step"] == 1]
    assert observation["is_error"] is True
    assert "p3_0" in observation["content"]
    assert len(checked) >= 3 * len(tools)  # at parsing, at creation and at start
    assert on_loop == []


def test_tools_with_the_same_schema_share_one_compiled_validator() -> None:
    first = {"type": "object", "properties": {"q": {"type": "string"}}}
    same = {"properties": {"q": {"type": "string"}}, "type": "object"}  # another key order

    one, two = base.compiled_schema(first), base.compiled_schema(same)

    assert one is two
    assert one.validator is not None
    first["properties"]["q"]["type"] = "integer"  # the caller's dict is not the one kept
    assert one.schema["properties"]["q"]["type"] == "string"


async def test_heavy_requests_at_once_check_their_schemas_one_thread_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # eight threads checking schemas at once took turns with the event loop for the
    # interpreter and stalled it 250-590 ms; one at a time, the loop shares it with one
    active: list[int] = []
    most = 0
    lock = threading.Lock()
    real = Draft202012Validator.check_schema

    def counting(schema: Any, **options: Any) -> None:
        nonlocal most
        with lock:
            active.append(1)
            most = max(most, len(active))
        try:
            real(schema, **options)
        finally:
            with lock:
                active.pop()

    monkeypatch.setattr(Draft202012Validator, "check_schema", counting)
    monkeypatch.setattr(base, "COMPILED_SCHEMAS", 0)
    async with (
        api_client(settings(http_tool_allow_hosts=["api.example.com"])) as client,
        anyio.create_task_group() as group,
    ):
        for index in range(6):
            tools = [{**t, "name": f"t{index}_{n}"} for n, t in enumerate(_heavy_tools(8, 12))]
            group.start_soon(run_to_end, client, finishing(http_tools=tools))

    assert most == 1


async def test_an_output_schema_is_checked_and_compiled_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop_thread = threading.get_ident()
    on_loop: list[Any] = []
    checked: list[Any] = []
    real = Draft202012Validator.check_schema

    def recording(schema: Any, **options: Any) -> None:
        if "p199" in schema.get("properties", {}):  # the run's (not the built-in tools')
            checked.append(schema)
            if threading.get_ident() == loop_thread:
                on_loop.append(schema)
        real(schema, **options)

    monkeypatch.setattr(Draft202012Validator, "check_schema", recording)
    monkeypatch.setattr(base, "COMPILED_SCHEMAS", 0)  # every check a miss: creation and start
    schema = {
        "type": "object",
        "properties": {f"p{j}": {"type": "string", "maxLength": 100} for j in range(200)},
    }
    answer = {"tool_calls": [{"name": "task_finished", "arguments": {"answer": {"p0": "x"}}}]}
    async with api_client(settings()) as client:
        run = await run_to_end(client, scripted(answer, output_schema=schema))

    assert run["result"]["output"] == {"p0": "x"}
    assert len(checked) >= 2  # at creation and at start
    assert on_loop == []

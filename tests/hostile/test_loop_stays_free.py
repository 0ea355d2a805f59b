"""Expensive work on a POST /runs body is bounded or kept off the event loop: the number of
JSON values is counted in the raw bytes before parsing, parsing and validation run in a
worker thread, and each tool schema is checked against the metaschema once."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from app.api import runbody
from app.tools import base
from tests.api.kit import error_of, finishing, run_to_end, settings
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

    def counting(schema: Any) -> None:
        checked.append(schema)
        real(schema)

    monkeypatch.setattr(Draft202012Validator, "check_schema", counting)
    base._CHECKED.clear()
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

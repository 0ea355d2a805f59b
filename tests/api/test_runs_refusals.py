"""POST /runs refusals: every malformed, unknown or not-allowed part of a request
is a 4xx naming the field (DESIGN §2, §5), never a 5xx."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.kit import error_of, finishing, scripted, settings
from tests.fakes.service import api_client

# -- refused: the shape of the body -----------------------------------------------------------


async def test_unknown_top_level_field_is_422_naming_it() -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json={**finishing(), "max_steps": 3})

        error = error_of(response, 422, "validation_error")
        assert "max_steps: unknown field" in error["message"]
        assert error["details"]["errors"][0]["field"] == "max_steps"


async def test_unknown_setting_is_422_naming_settings_field() -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json=finishing(settings={"max_stepz": 3}))

        error = error_of(response, 422, "validation_error")
        assert "settings.max_stepz: unknown field" in error["message"]


async def test_unknown_field_in_a_script_reply_is_422_naming_its_path() -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json=scripted({"content": "x", "tool": "y"}))

        assert "model_script[0].tool" in error_of(response, 422)["message"]


@pytest.mark.parametrize(
    "body",
    [
        {"model": "scripted"},
        {"task": ""},
        {"task": None},
        {"task": 42},
        {"task": "x", "tools": "calculator"},
        {"task": "x", "metadata": []},
        {"task": "x", "stream": "yes please"},
        {"task": "x", "on_disconnect": "explode"},
    ],
    ids=[
        "missing-task",
        "empty-task",
        "null-task",
        "number-task",
        "tools-not-a-list",
        "metadata-not-an-object",
        "stream-not-a-bool",
        "bad-on-disconnect",
    ],
)
async def test_ill_typed_body_is_422(body: dict[str, Any]) -> None:
    async with api_client(settings()) as client:
        error_of(await client.post("/runs", json=body), 422, "validation_error")


async def test_empty_task_is_422_naming_task() -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json={"task": ""})
        assert error_of(response, 422)["details"]["errors"][0]["field"] == "task"


@pytest.mark.parametrize(
    "body",
    [
        b"{bad json",
        b'{"task": "x",}',
        b"",
        b"[]",
        b"null",
        b'"a string"',
        b"\xff\xfe\x00not utf-8",
        b"\xe9t\xe9",
        b'{"task": "\\ud800"}',
        b"[" * 100_000 + b"]" * 100_000,
    ],
    ids=[
        "garbage",
        "trailing-comma",
        "empty",
        "array",
        "null",
        "string",
        "utf16-bom",
        "latin1",
        "lone-surrogate",
        "nested-too-deep-to-parse",
    ],
)
async def test_malformed_json_is_422_never_5xx(body: bytes) -> None:
    async with api_client(settings()) as client:
        response = await client.post(
            "/runs", content=body, headers={"Content-Type": "application/json"}
        )
        error_of(response, 422, "validation_error")


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None]
)
async def test_body_not_sent_as_json_is_415(content_type: str | None) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    async with api_client(settings()) as client:
        response = await client.post("/runs", content=b'{"task": "x"}', headers=headers)
        error_of(response, 415, "unsupported_media_type")


async def test_json_content_type_with_a_charset_is_accepted() -> None:
    async with api_client(settings()) as client:
        response = await client.post(
            "/runs",
            content=b'{"task": "x", "model": "demo"}',
            headers={"Content-Type": "application/json; charset=utf-8"},
        )
        assert response.status_code == 202


# -- refused: tools, hosts, models ------------------------------------------------------------


async def test_unknown_tool_is_422_listing_the_available_ones() -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json=finishing(tools=["calculator", "teleport"]))

        error = error_of(response, 422, "validation_error")
        assert error["details"]["field"] == "tools"
        assert error["details"]["unknown"] == ["teleport"]
        assert set(error["details"]["available"]) >= {"calculator", "current_time"}
        assert "calculator" in error["message"]


def http_tool(**fields: Any) -> dict[str, Any]:
    return {
        "name": "lookup_order",
        "description": "Look up an order.",
        "url": "https://tools.example.com/orders",
        **fields,
    }


async def test_http_tool_on_a_host_not_allow_listed_is_422() -> None:
    async with api_client(settings(http_tool_allow_hosts=["tools.example.com"])) as client:
        body = finishing(http_tools=[http_tool(url="https://evil.example.net/x")])

        error = error_of(await client.post("/runs", json=body), 422, "validation_error")

        assert error["details"]["field"] == "http_tools[0].url"
        assert "evil.example.net" in error["message"]


async def test_http_tool_is_422_when_the_server_allows_no_host() -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json=finishing(http_tools=[http_tool()]))
        assert error_of(response, 422)["details"]["field"] == "http_tools[0].url"


@pytest.mark.parametrize(
    ("tools", "http_tools", "field"),
    [
        (["calculator"], [http_tool(name="calculator")], "http_tools[0].name"),
        ([], [http_tool(name="task_finished")], "http_tools[0].name"),
        ([], [http_tool(), http_tool()], "http_tools[1].name"),
    ],
    ids=["registered-tool", "finish-tool", "each-other"],
)
async def test_http_tool_name_clash_is_422(
    tools: list[str], http_tools: list[dict[str, Any]], field: str
) -> None:
    async with api_client(settings(http_tool_allow_hosts=["tools.example.com"])) as client:
        body = finishing(tools=tools, http_tools=http_tools)

        error = error_of(await client.post("/runs", json=body), 422, "validation_error")

        assert error["details"]["field"] == field


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "array", "items": {"type": "string"}},
        {"type": "object", "properties": {"n": {"type": "no-such-type"}}},
        {"type": "object", "required": "n"},
    ],
    ids=["not-an-object", "bad-type", "bad-required"],
)
async def test_http_tool_with_an_invalid_parameters_schema_is_422(
    parameters: dict[str, Any],
) -> None:
    async with api_client(settings(http_tool_allow_hosts=["tools.example.com"])) as client:
        body = finishing(http_tools=[http_tool(parameters=parameters)])

        error = error_of(await client.post("/runs", json=body), 422, "validation_error")

        assert error["details"]["field"] == "http_tools[0].parameters"


async def test_http_tool_timeout_over_the_tool_timeout_cap_is_422() -> None:
    app_settings = settings(
        http_tool_allow_hosts=["tools.example.com"], tool_timeout_s=10, tool_timeout_limit_s=10
    )
    async with api_client(app_settings) as client:
        body = finishing(http_tools=[http_tool(timeout_s=11)])

        error = error_of(await client.post("/runs", json=body), 422)

        assert error["details"] == {"field": "http_tools[0].timeout_s", "cap": 10}


async def test_http_tool_with_a_bad_name_is_422() -> None:
    async with api_client(settings(http_tool_allow_hosts=["tools.example.com"])) as client:
        body = finishing(http_tools=[http_tool(name="has spaces")])
        error = error_of(await client.post("/runs", json=body), 422)
        assert error["details"]["errors"][0]["field"] == "http_tools[0].name"


async def test_webhook_on_a_host_not_allowed_is_422() -> None:
    async with api_client(settings(http_tool_allow_hosts=["hooks.example.com"])) as client:
        body = finishing(webhook="https://elsewhere.example.org/hook")

        error = error_of(await client.post("/runs", json=body), 422, "validation_error")

        assert error["details"]["field"] == "webhook"


async def test_model_without_a_configured_endpoint_is_422() -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json={"task": "x", "model": "gpt-4o"})

        error = error_of(response, 422, "validation_error")
        assert error["details"]["field"] == "model"
        assert "'gpt-4o' is unavailable" in error["message"]


async def test_scripted_model_without_a_script_is_422() -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json={"task": "x", "model": "scripted"})

        error = error_of(response, 422)
        assert error["details"]["field"] == "model"
        assert "needs a model_script" in error["message"]


async def test_model_script_with_another_model_is_422() -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json={**finishing(), "model": "demo"})

        assert error_of(response, 422)["details"]["field"] == "model_script"


async def test_scripted_model_is_422_when_the_server_disables_it() -> None:
    async with api_client(settings(scripted_model_enabled=False)) as client:
        response = await client.post("/runs", json=finishing())

        error = error_of(response, 422)
        assert error["details"]["field"] == "model"
        assert "disabled" in error["message"]

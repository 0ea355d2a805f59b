"""POST /runs refusals of settings and sizes (DESIGN §2): over a server cap is 422 naming the
field and the cap, nothing silently clamped; below a minimum, out of range or nested too
deeply is 422 naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.kit import create, error_of, finishing, scripted, settings
from tests.fakes.service import api_client

# -- refused: settings over a cap or below a minimum ------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "server", "cap"),
    [
        ("max_steps", 6, {"max_steps": 5, "max_steps_limit": 5}, 5),
        ("max_time_s", 30.5, {"max_time_s": 30, "max_time_limit_s": 30}, 30),
        ("tool_timeout_s", 11, {"tool_timeout_s": 10, "tool_timeout_limit_s": 10}, 10),
        ("llm_timeout_s", 21, {"llm_timeout_s": 20, "llm_timeout_limit_s": 20}, 20),
        (
            "final_answer_timeout_s",
            6,
            {"final_answer_timeout_s": 5, "final_answer_timeout_limit_s": 5},
            5,
        ),
        ("max_nudges", 3, {"max_nudges": 2, "max_nudges_limit": 2}, 2),
        ("llm_retries", 2, {"llm_retries": 1, "llm_retries_limit": 1}, 1),
        ("llm_retry_delay_s", 2, {"llm_retry_delay_s": 1, "llm_retry_delay_limit_s": 1}, 1),
        (
            "repetition_threshold",
            4,
            {"repetition_threshold": 3, "repetition_threshold_limit": 3},
            3,
        ),
        (
            "max_tool_result_chars",
            501,
            {"max_tool_result_chars": 500, "max_tool_result_chars_limit": 500},
            500,
        ),
        (
            "max_total_tokens",
            1001,
            {"max_total_tokens": 1000, "max_total_tokens_limit": 1000},
            1000,
        ),
        (
            "max_context_tokens",
            801,
            {"max_context_tokens": 800, "max_context_tokens_limit": 800},
            800,
        ),
        ("max_cost_usd", 2.5, {"max_cost_usd": 1, "max_cost_usd_limit": 2}, 2),
    ],
)
async def test_setting_over_its_server_cap_is_422_naming_field_and_cap(
    name: str, value: float, server: dict[str, Any], cap: float
) -> None:
    async with api_client(settings(**server)) as client:
        response = await client.post("/runs", json=finishing(settings={name: value}))

        error = error_of(response, 422, "validation_error")
        assert error["message"].startswith(f"settings.{name}: ")
        assert f"cap of {cap:g}" in error["message"]
        assert error["details"]["field"] == f"settings.{name}"
        assert error["details"]["cap"] == cap
        assert error["details"]["value"] == value


@pytest.mark.parametrize("name", ["max_total_tokens", "max_context_tokens", "max_cost_usd"])
async def test_explicit_null_budget_is_422_when_the_server_caps_it(name: str) -> None:
    server = {name: 1000, f"{name}_limit": 1000}
    async with api_client(settings(**server)) as client:
        response = await client.post("/runs", json=finishing(settings={name: None}))

        error = error_of(response, 422, "validation_error")
        assert error["details"]["field"] == f"settings.{name}"
        assert "null (unbounded) exceeds the server cap of 1000" in error["message"]


async def test_omitted_budget_takes_the_server_default_under_a_cap() -> None:
    server = {"max_total_tokens": 1000, "max_total_tokens_limit": 5000}
    async with api_client(settings(**server)) as client:
        run = await create(client, finishing())
        assert run["settings"]["max_total_tokens"] == 1000


async def test_no_truncation_is_422_when_the_server_caps_tool_results() -> None:
    async with api_client(settings(max_tool_result_chars_limit=4000)) as client:
        response = await client.post("/runs", json=finishing(settings={"max_tool_result_chars": 0}))

        error = error_of(response, 422, "validation_error")
        assert error["details"]["field"] == "settings.max_tool_result_chars"
        assert "0 (no truncation) exceeds the server cap of 4000" in error["message"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max_steps", 0),
        ("max_time_s", 0),
        ("tool_timeout_s", -1),
        ("llm_timeout_s", 0),
        ("final_answer_timeout_s", 0),
        ("max_nudges", -1),
        ("llm_retries", -1),
        ("llm_retry_delay_s", -0.5),
        ("repetition_threshold", -1),
        ("max_tool_result_chars", -1),
        ("max_total_tokens", 0),
        ("max_context_tokens", 0),
        ("max_cost_usd", 0),
        ("max_cost_usd", -0.01),
        ("max_cost_usd", "1"),
        ("prompt_language", "fr"),
        ("stop_tool", "sometimes"),
        ("stop_tool", 1),
        ("tool_timeout_s", True),
        ("max_steps", "3"),
        ("max_steps", 2.5),
    ],
)
async def test_setting_below_its_minimum_out_of_range_or_of_another_type_is_422(
    name: str, value: Any
) -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json=finishing(settings={name: value}))

        error = error_of(response, 422, "validation_error")
        assert error["details"]["errors"][0]["field"] == f"settings.{name}"


@pytest.mark.parametrize("field", ["metadata", "http_tools", "model_script"])
async def test_json_nested_too_deeply_is_422_naming_the_field(field: str) -> None:
    deep: Any = "bottom"
    for _ in range(300):
        deep = {"a": deep}
    body = {
        "metadata": {**finishing(), "metadata": deep},
        "http_tools": {**finishing(), "http_tools": [{"parameters": deep}]},
        "model_script": scripted({"tool_calls": [{"name": "x", "arguments": deep}]}),
    }[field]
    async with api_client(settings()) as client:
        error = error_of(await client.post("/runs", json=body), 422, "validation_error")
        assert error["details"]["errors"][0]["field"] == field
        assert "nests deeper than 32 levels" in error["message"]


async def test_task_over_the_server_cap_is_422() -> None:
    async with api_client(settings(max_task_chars=10)) as client:
        response = await client.post("/runs", json=finishing(task="x" * 11))

        error = error_of(response, 422, "validation_error")
        assert error["details"] == {"field": "task", "cap": 10}


async def test_metadata_over_the_server_cap_is_422() -> None:
    async with api_client(settings(max_metadata_bytes=20)) as client:
        response = await client.post("/runs", json=finishing(metadata={"note": "x" * 20}))

        assert error_of(response, 422)["details"]["field"] == "metadata"

"""Model output never ends a run as `internal` (issue #34, item 3): JSON a model writes (an
answer checked against `output_schema`, a tool call's arguments, task_finished's) that cannot
be parsed, or nests deeper than 64 levels, is an `invalid_output` answer or an `is_error`
observation the model sees and can fix, never a `RecursionError` failing the run. Through the
scripted model and the fake OpenAI-compatible server over loopback HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api.kit import create, json_events, run_to_end, scripted, settings, wait_ended
from tests.fakes.llm_replies import FakeReply, FakeToolCall
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.service import api_client

BRACKETS = "[" * 5000
DEEP_ARRAY = "[" * 100 + "]" * 100  # valid JSON, 100 levels
DEEP_OBJECT = '{"a":' * 100 + "1" + "}" * 100
TOO_DEEP = "nests deeper than 64 levels of arrays and objects"
NO_STOP_TOOL = {"stop_tool": False, "max_output_retries": 3}


def _call(name: str, arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def _events(client: Any, run_id: str) -> list[dict[str, Any]]:
    return list((await json_events(client, run_id, limit=1000))["events"])


@pytest.mark.parametrize(
    ("text", "seen"),
    [
        (BRACKETS, TOO_DEEP),
        (DEEP_ARRAY, TOO_DEEP),
        ("[1, 2", "is not JSON: Expecting"),
    ],
    ids=["5000-brackets", "100-levels", "unterminated"],
)
async def test_an_answer_too_deep_or_broken_is_shown_to_the_model_then_a_good_one_ends_it(
    text: str, seen: str
) -> None:
    body = scripted(
        {"content": text},
        {"content": "[1]"},
        output_schema={"type": "array"},
        settings=NO_STOP_TOOL,
    )
    async with api_client(settings()) as client:
        run = await run_to_end(client, body)

    assert run["status"] == "completed", run
    assert run["result"]["output"] == [1]


async def test_answers_that_stay_too_deep_end_the_run_invalid_output_not_internal() -> None:
    body = scripted(
        *[{"content": BRACKETS}] * 4, output_schema={"type": "array"}, settings=NO_STOP_TOOL
    )
    async with api_client(settings()) as client:
        run = await run_to_end(client, body)

    assert run["status"] == "incomplete", run
    assert run["result"]["reason"] == "invalid_output"
    assert run["result"]["output_errors"] == [{"path": "$", "message": TOO_DEEP}]


@pytest.mark.parametrize(
    ("arguments", "seen"),
    [
        (BRACKETS, TOO_DEEP),
        (DEEP_OBJECT, TOO_DEEP),
        ('{"expression": [' + DEEP_ARRAY + "]}", TOO_DEEP),
        ('{"expression": "1+1"', "Expecting ',' delimiter"),
    ],
    ids=["5000-brackets", "100-levels", "deep-value", "unterminated"],
)
@pytest.mark.parametrize("tool", ["calculator", "task_finished"])
async def test_arguments_too_deep_or_broken_are_an_is_error_observation(
    arguments: str, seen: str, tool: str
) -> None:
    body = scripted(
        _call(tool, arguments),
        _call("task_finished", {"answer": "recovered"}),
        tools=["calculator"],
    )
    async with api_client(settings()) as client:
        run = await run_to_end(client, body)
        events = await _events(client, run["id"])

    assert run["status"] == "completed", run
    assert run["result"]["answer"] == "recovered"
    (observation, *_) = [e for e in events if e["type"] == "observation"]
    assert observation["is_error"] is True
    assert seen in observation["content"]


async def test_deep_arguments_from_a_real_http_model_are_an_is_error_observation() -> None:
    replies = [
        FakeReply(tool_calls=[FakeToolCall("calculator", BRACKETS)]),
        FakeReply(tool_calls=[FakeToolCall("calculator", DEEP_OBJECT)]),
        FakeReply.finish("recovered"),
    ]
    async with FakeLLMServer(replies) as llm:
        config = settings(llm_base_url=llm.base_url, llm_model="fake-model")
        async with api_client(config) as client:
            created = await create(client, {"task": "Add.", "tools": ["calculator"]})
            run = await wait_ended(client, created["id"])
            events = await _events(client, run["id"])

    assert run["status"] == "completed", run
    observations = [e for e in events if e["type"] == "observation"]
    assert [o["is_error"] for o in observations] == [True, True]
    assert all(TOO_DEEP in o["content"] for o in observations)


async def test_a_deep_answer_from_a_real_http_model_is_invalid_output_not_internal() -> None:
    replies = [FakeReply(content=BRACKETS), FakeReply(content=json.dumps({"ok": True}))]
    async with FakeLLMServer(replies) as llm:
        config = settings(llm_base_url=llm.base_url, llm_model="fake-model")
        async with api_client(config) as client:
            body = {
                "task": "Answer.",
                "output_schema": {"type": "object"},
                "settings": NO_STOP_TOOL,
            }
            created = await create(client, body)
            run = await wait_ended(client, created["id"])

    assert run["status"] == "completed", run
    assert run["result"]["output"] == {"ok": True}


async def test_a_response_body_nested_too_deep_is_an_llm_error_not_internal() -> None:
    replies = [FakeReply(body="[" * 5000), FakeReply(body='{"choices": ' + "[" * 5000)]
    async with FakeLLMServer(replies * 4) as llm:
        config = settings(llm_base_url=llm.base_url, llm_model="fake-model")
        async with api_client(config) as client:
            created = await create(client, {"task": "Answer."})
            run = await wait_ended(client, created["id"])

    assert run["status"] == "failed", run
    assert run["error"]["type"] != "internal"
    assert "not JSON" in run["error"]["message"]

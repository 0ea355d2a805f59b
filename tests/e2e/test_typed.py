"""Typed answers end to end (DESIGN §12): the service over real HTTP, the model an
OpenAI-compatible endpoint (the fake LLM). What the model is sent (task_finished's answer
parameter as the schema, the errors of an invalid answer, `response_format` where the stop tool
is off and at the final call, and again without it when the endpoint refuses it), what the
run, its webhook and a follow-up carry (`result.output`; the structured answer as the
assistant's last message)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.kit import LocalEndpoints, e2e_settings, follow, start_run, wait_for_run
from tests.fakes.llm_server import FakeLLMServer, FakeReply
from tests.fakes.service import served_app

pytestmark = pytest.mark.e2e

SCHEMA = {
    "type": "object",
    "properties": {
        "product": {"type": "string"},
        "price": {"type": "number", "exclusiveMinimum": 0},
    },
    "required": ["product", "price"],
    "additionalProperties": False,
}
VALID = {"product": "kettle", "price": 24.5}
FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "output", "schema": SCHEMA, "strict": False},
}


def finish_tool(request: dict[str, Any]) -> dict[str, Any]:
    (tool,) = [t for t in request["tools"] if t["function"]["name"] == "task_finished"]
    parameters: dict[str, Any] = tool["function"]["parameters"]
    return parameters


async def test_a_typed_run_is_sent_the_schema_shown_its_errors_and_followed_up_with_its_output(
    store_url: str,
) -> None:
    replies = [
        FakeReply.call("task_finished", {"answer": {"product": "kettle", "price": "cheap"}}),
        FakeReply.call("task_finished", {"answer": VALID}),
        FakeReply.finish("It costs 24.5."),
    ]
    hooks = {"http_tool_allow_hosts": ["127.0.0.1"], "webhook_backoff_s": 0.05}
    async with (
        FakeLLMServer(replies) as llm,
        LocalEndpoints() as receiver,
        served_app(e2e_settings(llm, store_url=store_url, **hooks)) as (_, client),
    ):
        body = {
            "task": "Extract the product and its price: 'The kettle costs 24.50.'",
            "model": "gpt-test",
            "output_schema": SCHEMA,
            "webhook": receiver.url("/hook/typed"),
        }
        run_id = await start_run(client, body)
        streamed = await follow(client, run_id)
        await receiver.wait_for_hooks("typed", 1)
        run = await wait_for_run(client, run_id, lambda r: bool(r["webhook"]["delivered"]))
        second_id = await start_run(
            client, {"task": "And in words?", "model": "gpt-test", "previous_run_id": run_id}
        )
        await follow(client, second_id)

    # the model was offered the schema as task_finished's answer, and no response_format
    first, retried, followed = llm.requests
    answer = finish_tool(first)["properties"]["answer"]
    assert {k: v for k, v in answer.items() if k != "description"} == SCHEMA
    assert "response_format" not in first
    # it was shown its answer's errors as the result of its call
    told = retried["messages"][-1]
    assert told["role"] == "tool"
    assert "- $.price: 'cheap' is not of type 'number'" in told["content"]
    # the run: its output, on the record, the terminal event and the webhook
    assert run["status"] == "completed"
    assert (run["result"]["output"], run["result"]["output_errors"]) == (VALID, None)
    assert json.loads(run["result"]["answer"]) == VALID
    assert streamed[-1].data["result"] == run["result"]
    (hooked,) = receiver.hooks["typed"]
    assert hooked["result"]["output"] == VALID
    assert hooked["output_schema"] == SCHEMA
    # the follow-up starts from the structured answer, as the assistant's last message
    *history, task = followed["messages"]
    assert task == {"role": "user", "content": "And in words?"}
    assert history[-1] == {"role": "assistant", "content": json.dumps(VALID)}


def refusing_response_format(request: dict[str, Any]) -> FakeReply:
    """An endpoint that does not take response_format: 400 naming it; otherwise a reply by
    what was asked (the final call has no tools)."""
    if "response_format" in request:
        return FakeReply(status=400, error="Unsupported parameter: 'response_format'")
    if request.get("tools"):
        return FakeReply(content="Let me think about it.")
    return FakeReply(content="```json\n" + json.dumps(VALID) + "\n```")


async def test_without_the_stop_tool_the_reply_is_asked_for_as_json_where_it_can_be() -> None:
    body = {
        "task": "Extract the product and its price.",
        "model": "gpt-test",
        "tools": ["calculator"],
        "output_schema": SCHEMA,
        "settings": {"stop_tool": False, "max_steps": 1},
    }
    async with (
        FakeLLMServer([FakeReply(content=json.dumps(VALID))]) as llm,
        served_app(e2e_settings(llm)) as (_, client),
    ):
        run_id = await start_run(client, body)
        await follow(client, run_id)
        run = (await client.get(f"/runs/{run_id}")).json()
    (request,) = llm.requests
    assert request["response_format"] == FORMAT
    assert json.dumps(SCHEMA, separators=(",", ":")) in request["messages"][0]["content"]
    assert (run["result"]["reason"], run["result"]["output"]) == ("answered", VALID)

    async with (
        FakeLLMServer(handler=refusing_response_format) as llm,
        served_app(e2e_settings(llm)) as (_, client),
    ):
        run_id = await start_run(client, body)
        await follow(client, run_id)
        run = (await client.get(f"/runs/{run_id}")).json()
    # asked with it, refused, asked again without it, never with it after
    assert ["response_format" in r for r in llm.requests] == [True, False, False]
    # a plain reply that is not JSON: an invalid answer; at max_steps the final call asks for
    # JSON matching the schema in its prompt, and gets it
    final = llm.requests[-1]
    assert "tools" not in final
    assert json.dumps(SCHEMA, separators=(",", ":")) in final["messages"][-1]["content"]
    result = run["result"]
    assert (result["reason"], result["degraded"], result["output"]) == ("max_steps", True, VALID)

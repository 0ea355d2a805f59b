"""Asking for an answer as JSON matching a schema (a run's output_schema): OpenAI's
`response_format: json_schema` over real loopback HTTP, the fallback when an endpoint refuses
it (remembered for the model, or for that schema alone), and the demo model's typed answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.engine.errors import LLMStatusError
from app.engine.ports import ToolSpec
from app.engine.prompts import EN
from app.engine.typed import finish_parameters
from app.llm.demo import DemoModel
from app.llm.demo_values import example
from app.llm.models import ModelFactory
from app.llm.openai import OpenAIChatModel
from app.output import output_schema
from tests.fakes.llm_server import FakeLLMServer, FakeReply
from tests.llm.test_openai import MESSAGES, SEARCH, Deltas

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer", "minimum": 1}},
    "required": ["city", "population"],
}
FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "output", "schema": SCHEMA, "strict": False},
}


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer() as server:
        yield server


@pytest.fixture
async def model(llm: FakeLLMServer) -> AsyncIterator[OpenAIChatModel]:
    async with OpenAIChatModel(base_url=llm.base_url, model="m") as chat_model:
        yield chat_model


def refusing(request: dict[str, Any]) -> FakeReply:
    """An endpoint that does not take response_format, as some servers answer."""
    if "response_format" in request:
        return FakeReply(status=400, error="response_format is not supported by this model")
    return FakeReply(content='{"city": "Paris", "population": 2100000}')


async def test_an_answer_schema_is_sent_as_response_format_and_only_then(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(FakeReply(content="{}"), FakeReply(content="b"))
    await model.complete(MESSAGES, [SEARCH], answer_schema=SCHEMA)
    await model.complete(MESSAGES, [SEARCH])
    typed, free = llm.requests
    assert typed["response_format"] == FORMAT
    assert typed["tools"]  # beside the tools: the model may still call them
    assert "response_format" not in free


async def test_a_streamed_call_asks_for_it_too(llm: FakeLLMServer, model: OpenAIChatModel) -> None:
    llm.enqueue(FakeReply(content='{"city": "Rome", "population": 1}'))
    reply = await model.complete(MESSAGES, [], on_delta=Deltas(), answer_schema=SCHEMA)
    assert json.loads(reply.content or "") == {"city": "Rome", "population": 1}
    (request,) = llm.requests
    assert (request["stream"], request["response_format"]) == (True, FORMAT)


async def test_an_endpoint_refusing_response_format_is_asked_again_without_it_and_never_again() -> (
    None
):
    async with FakeLLMServer(handler=refusing) as llm:
        factory = ModelFactory(base_url=llm.base_url, api_key=None, default_model="m")
        try:
            for _ in range(2):  # two runs, each with a model of its own
                model = factory.create("m")
                reply = await model.complete(MESSAGES, [], answer_schema=SCHEMA)
                assert json.loads(reply.content or "")["city"] == "Paris"
        finally:
            await factory.aclose()
    assert ["response_format" in r for r in llm.requests] == [True, False, False]


async def test_a_schema_the_endpoint_cannot_take_is_not_sent_again_but_others_are() -> None:
    def picky(request: dict[str, Any]) -> FakeReply:
        schema = (request.get("response_format") or {}).get("json_schema", {}).get("schema", {})
        if schema.get("type") == "array":
            return FakeReply(
                status=400,
                error="Invalid schema for response_format 'output': schema must be a JSON "
                "Schema of 'type: \"object\"', got 'type: \"array\"'.",
            )
        return FakeReply(content="[]")

    listed = {"type": "array", "items": {"type": "string"}}
    async with FakeLLMServer(handler=picky) as llm:
        unstructured: set[str] = set()
        async with OpenAIChatModel(
            base_url=llm.base_url, model="m", unstructured=unstructured
        ) as model:
            await model.complete(MESSAGES, [], answer_schema=listed)
            await model.complete(MESSAGES, [], answer_schema=listed)
            await model.complete(MESSAGES, [], answer_schema=SCHEMA)
    assert ["response_format" in r for r in llm.requests] == [True, False, False, True]
    assert "m" not in unstructured


async def test_a_refused_tool_choice_and_response_format_are_both_dropped_in_one_call() -> None:
    def strict(request: dict[str, Any]) -> FakeReply:
        for name in ("tool_choice", "response_format"):
            if name in request:
                return FakeReply(status=422, error=f"unsupported parameter: {name}")
        return FakeReply(content="{}")

    plan = ToolSpec("update_plan", "Record your plan.", {"type": "object", "properties": {}})
    async with (
        FakeLLMServer(handler=strict) as llm,
        OpenAIChatModel(base_url=llm.base_url, model="m") as model,
    ):
        await model.complete(MESSAGES, [plan], force_tool="update_plan", answer_schema=SCHEMA)
        assert (model.unforced, model.unstructured) == ({"m"}, {"m"})
    sent = [("tool_choice" in r, "response_format" in r) for r in llm.requests]
    assert sent == [(True, True), (False, True), (False, False)]


async def test_another_client_error_is_not_taken_for_a_refusal(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(FakeReply(status=400, error="context length exceeded"))
    with pytest.raises(LLMStatusError, match="context length exceeded"):
        await model.complete(MESSAGES, [], answer_schema=SCHEMA)
    assert len(llm.requests) == 1
    assert model.unstructured == set()


# -- the demo model ------------------------------------------------------------------------------


async def test_the_demo_model_finishes_with_an_answer_that_validates_against_the_schema() -> None:
    demo = DemoModel(delay_s=0)
    schema = {
        "type": "object",
        "properties": {
            "result": {"type": "number"},
            "steps": {"type": "array", "items": {"$ref": "#/$defs/step"}, "minItems": 2},
            "checked_at": {"type": "string", "format": "date-time"},
            "confidence": {"enum": ["low", "high"]},
        },
        "required": ["result", "steps", "confidence"],
        "additionalProperties": False,
        "$defs": {"step": {"type": "string", "maxLength": 40}},
    }
    finish = ToolSpec("task_finished", "Finish.", finish_parameters(schema, EN))
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "What is 17 * 23?"},
        {"role": "tool", "tool_call_id": "c", "content": "391"},
    ]
    reply = await demo.complete(messages, [finish])
    (call,) = reply.tool_calls
    answer = json.loads(call.arguments)["answer"]
    assert output_schema(schema).errors(answer) == []
    assert answer["result"] == 391  # what its calculator returned


async def test_the_demo_model_answers_json_when_asked_for_it() -> None:
    demo = DemoModel(delay_s=0)
    reply = await demo.complete([{"role": "user", "content": "hi"}], [], answer_schema=SCHEMA)
    assert output_schema(SCHEMA).errors(json.loads(reply.content or "")) == []


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "minLength": 3, "maxLength": 5},
        {"type": "integer", "exclusiveMinimum": 10, "maximum": 20},
        {"type": "number", "minimum": 0.5},
        {"type": ["null", "boolean"]},
        {"const": {"a": 1}},
        {"anyOf": [{"type": "object", "properties": {"n": {"type": "integer"}}}, {"type": "null"}]},
        {"allOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]}, {"required": []}]},
        {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "maxItems": 2},
        {"type": "object", "properties": {"tags": {"type": "array", "maxItems": 0}}},
    ],
)
def test_the_demo_values_fit_common_schemas(schema: dict[str, Any]) -> None:
    assert output_schema(schema).errors(example(schema)) == []

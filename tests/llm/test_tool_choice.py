"""Forcing a tool (a planning call's update_plan): OpenAI's `tool_choice` over real loopback
HTTP, the fallback when an endpoint refuses it (remembered), and the demo model's plan."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.engine.errors import LLMStatusError
from app.engine.ports import ToolSpec
from app.llm.demo import DemoModel
from app.llm.models import ModelFactory
from app.llm.openai import OpenAIChatModel
from app.tools.calculator import CalculatorTool
from app.tools.plan import PARAMETERS, UpdatePlanTool
from tests.fakes.llm_server import FakeLLMServer, FakeReply
from tests.llm.test_openai import MESSAGES, SEARCH, Deltas

PLAN = ToolSpec("update_plan", "Record your plan.", PARAMETERS)
FORCED = {"type": "function", "function": {"name": "update_plan"}}


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer() as server:
        yield server


@pytest.fixture
async def model(llm: FakeLLMServer) -> AsyncIterator[OpenAIChatModel]:
    async with OpenAIChatModel(base_url=llm.base_url, model="m") as chat_model:
        yield chat_model


def refusing(request: dict[str, Any]) -> FakeReply:
    """An endpoint that does not take tool_choice, as llama.cpp-style servers answer."""
    if "tool_choice" in request:
        return FakeReply(status=400, error="Unsupported param: tool_choice")
    return FakeReply.call("update_plan", {"plan": []})


async def test_a_forced_tool_is_sent_as_tool_choice_and_only_then(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(FakeReply(content="a"), FakeReply(content="b"))
    await model.complete(MESSAGES, [SEARCH, PLAN], force_tool="update_plan")
    await model.complete(MESSAGES, [SEARCH, PLAN])
    forced, free = llm.requests
    assert forced["tool_choice"] == FORCED
    assert "tool_choice" not in free


async def test_a_streamed_call_is_forced_too(llm: FakeLLMServer, model: OpenAIChatModel) -> None:
    llm.enqueue(FakeReply(content="planned"))
    reply = await model.complete(MESSAGES, [PLAN], on_delta=Deltas(), force_tool="update_plan")
    assert reply.content == "planned"
    (request,) = llm.requests
    assert (request["stream"], request["tool_choice"]) == (True, FORCED)


async def test_an_endpoint_that_refuses_tool_choice_is_asked_again_without_it_and_never_again() -> (
    None
):
    async with FakeLLMServer(handler=refusing) as llm:
        unforced: set[str] = set()
        async with OpenAIChatModel(base_url=llm.base_url, model="m", unforced=unforced) as model:
            reply = await model.complete(MESSAGES, [PLAN], force_tool="update_plan")
            assert [c.name for c in reply.tool_calls] == ["update_plan"]
            # another adapter sharing the memory (the next run of the same model) does not try
            async with OpenAIChatModel(
                base_url=llm.base_url, model="m", unforced=unforced
            ) as again:
                await again.complete(MESSAGES, [PLAN], force_tool="update_plan")
    assert ["tool_choice" in r for r in llm.requests] == [True, False, False]
    assert unforced == {"m"}


async def test_another_client_error_is_not_taken_for_a_refused_tool_choice(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(FakeReply(status=400, error="context length exceeded"))
    with pytest.raises(LLMStatusError, match="context length exceeded"):
        await model.complete(MESSAGES, [PLAN], force_tool="update_plan")
    assert len(llm.requests) == 1
    assert model.unforced == set()


async def test_no_tool_choice_without_tools_to_choose_from(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(FakeReply(content="x"))
    await model.complete(MESSAGES, [], force_tool="update_plan")
    assert "tool_choice" not in llm.requests[0]


async def test_the_models_of_one_factory_share_what_the_endpoint_refused() -> None:
    async with FakeLLMServer(handler=refusing) as llm:
        factory = ModelFactory(base_url=llm.base_url, api_key=None, default_model="m")
        try:
            for _ in range(2):  # two runs, each with a model of its own
                model = factory.create("m")
                await model.complete(MESSAGES, [PLAN], force_tool="update_plan")
        finally:
            await factory.aclose()
    assert ["tool_choice" in r for r in llm.requests] == [True, False, False]


async def test_the_demo_model_answers_a_planning_call_with_its_plan_alone() -> None:
    demo = DemoModel(delay_s=0)
    specs = [
        ToolSpec(t.name, t.description, t.parameters) for t in (UpdatePlanTool(), CalculatorTool())
    ]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 6 * 7?"}]

    def statuses(reply: Any) -> list[str]:
        (call,) = reply.tool_calls
        assert call.name == "update_plan"
        arguments = json.loads(call.arguments)
        assert UpdatePlanTool().validate(arguments) is None
        return [item["status"] for item in arguments["plan"]]

    planned = await demo.complete(messages, specs, force_tool="update_plan")
    assert statuses(planned) == ["in_progress", "pending", "pending"]
    assert "demo model" in (planned.content or "")
    # not asked to plan, it does its work: the calculator first
    worked = await demo.complete(messages, specs)
    assert "calculator" in [c.name for c in worked.tool_calls]
    messages.append(
        {
            "role": "assistant",
            "content": worked.content,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": "{}"}}
                for c in worked.tool_calls
            ],
        }
    )
    # asked again, its plan says how far it has got
    replanned = await demo.complete(messages, specs, force_tool="update_plan")
    assert statuses(replanned) == ["completed", "in_progress", "pending"]
    assert replanned.tool_calls[0].id != planned.tool_calls[0].id

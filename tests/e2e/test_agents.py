"""A planned run of an agent profile end to end: the service on loopback, the model the fake
OpenAI-compatible server over real HTTP. The planning calls are forced with `tool_choice`;
an endpoint that refuses it gets the plan asked for in the prompt, and is not sent it again."""

from __future__ import annotations

from typing import Any

import pytest

from app.engine.prompts import EN
from tests.e2e.kit import e2e_settings, follow, start_run
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeToolCall
from tests.fakes.service import served_app

pytestmark = pytest.mark.e2e

FORCED = {"type": "function", "function": {"name": "update_plan"}}
AGENTS = {
    "researcher": {
        "description": "Plans, then computes.",
        "tools": ["calculator"],
        "settings": {"planning_interval": 2, "max_steps": 5},
    },
    "quick": {"description": "Computes at once.", "tools": ["calculator"]},
}


def plan(*done: bool) -> FakeReply:
    steps = [("compute", done[0] if done else False), ("answer", False)]
    items = [{"step": s, "status": "completed" if d else "pending"} for s, d in steps]
    return FakeReply(tool_calls=[FakeToolCall("update_plan", {"plan": items})])


def compute(expression: str) -> FakeReply:
    return FakeReply(tool_calls=[FakeToolCall("calculator", {"expression": expression})])


def last_user_text(request: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")


async def test_a_planning_profile_forces_update_plan_on_the_first_call_and_every_nth_step(
    store_url: str,
) -> None:
    replies = [
        plan(),  # the planning call before step 1
        compute("6*7"),  # step 1
        compute("42+1"),  # step 2
        plan(True),  # the planning call before step 3
        FakeReply.finish("43"),  # step 3
    ]
    async with (
        FakeLLMServer(replies) as llm,
        served_app(e2e_settings(llm, store_url=store_url, agents=AGENTS)) as (_, client),
    ):
        run_id = await start_run(client, {"task": "What is 6*7+1?", "agent": "researcher"})
        events = await follow(client, run_id)
        run = (await client.get(f"/runs/{run_id}")).json()

    assert [r.get("tool_choice") for r in llm.requests] == [FORCED, None, None, FORCED, None]
    assert last_user_text(llm.requests[0]) == EN.planning_prompt
    assert "Review your plan" in last_user_text(llm.requests[3])
    planning = [e for e in events if e.event == "intervention" and e.data["kind"] == "planning"]
    assert [e.data["step"] for e in planning] == [1, 3]
    assert (run["status"], run["result"]["answer"], run["agent"]) == (
        "completed",
        "43",
        "researcher",
    )
    assert (run["usage"]["steps"], run["usage"]["llm_calls"]) == (3, 5)
    calls = [e for e in events if e.event == "llm.call"]
    assert len(calls) == 5


async def test_a_profile_that_does_not_plan_sends_no_tool_choice() -> None:
    replies = [compute("6*7"), FakeReply.finish("42")]
    async with (
        FakeLLMServer(replies) as llm,
        served_app(e2e_settings(llm, agents=AGENTS)) as (_, client),
    ):
        run_id = await start_run(client, {"task": "What is 6*7?", "agent": "quick"})
        await follow(client, run_id)
    assert all("tool_choice" not in r for r in llm.requests)
    assert ["update_plan" in str(r["tools"]) for r in llm.requests] == [False, False]


async def test_an_endpoint_that_refuses_tool_choice_gets_the_plan_asked_for_in_the_prompt() -> None:
    def endpoint(request: dict[str, Any]) -> FakeReply:
        if "tool_choice" in request:
            return FakeReply(status=400, error="tool_choice is not supported by this server")
        last = request["messages"][-1]
        if last["role"] == "user" and last["content"] == EN.planning_prompt:
            return plan()  # it reads the prompt: a plan
        return FakeReply.finish("done")

    body = {"task": "Plan, then finish.", "agent": "researcher"}
    async with (
        FakeLLMServer(handler=endpoint) as llm,
        served_app(e2e_settings(llm, agents=AGENTS)) as (_, client),
    ):
        first = await start_run(client, body)
        await follow(client, first)
        second = await start_run(client, body)
        await follow(client, second)
        runs = [(await client.get(f"/runs/{i}")).json() for i in (first, second)]

    # the first planning call was refused and asked again at once without tool_choice; the
    # endpoint is then known not to take it: no later call sends it, in that run or the next
    assert ["tool_choice" in r for r in llm.requests] == [True, False, False, False, False]
    assert [r["status"] for r in runs] == ["completed", "completed"]
    assert [r["usage"]["llm_calls"] for r in runs] == [2, 2]  # the refused attempt is no call

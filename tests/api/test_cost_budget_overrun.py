"""`max_cost_usd` passes by one call at most, the final answer's included (DESIGN §13, §15):
over real HTTP to the fake OpenAI-compatible server, its calls priced by
`FINISHLINE_MODEL_PRICES` at exact figures. Before a step the run makes its final call instead
when the step's call is expected to pass the budget (the next prompt at the input rate, and no
less than the last call cost); no call starts once the spend has passed it; a sub-agent's
share leaves room for its parent's final call."""

from __future__ import annotations

from typing import Any

from tests.api.kit import json_events, run_to_end, settings
from tests.api.subagent_kit import children
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeUsage
from tests.fakes.service import api_client

PRICES = {"fake-model": {"input_per_mtok": 1.0, "output_per_mtok": 10.0}}
DOLLAR = FakeUsage(500_000, 50_000)
"""$0.50 of prompt and $0.50 of completion: one dollar a call."""
TWO_DOLLARS = FakeUsage(1_000_000, 100_000)


def calc(expression: str, usage: FakeUsage = DOLLAR) -> FakeReply:
    return FakeReply.call("calculator", {"expression": expression}, usage=usage)


def best(text: str, usage: FakeUsage = DOLLAR) -> FakeReply:
    return FakeReply(content=text, usage=usage)


def priced(llm: FakeLLMServer) -> Any:
    return settings(llm_base_url=llm.base_url, llm_model="fake-model", model_prices=PRICES)


async def calls_of(client: Any, run_id: str) -> list[dict[str, Any]]:
    events = (await json_events(client, run_id))["events"]
    return [e for e in events if e["type"] == "llm.call"]


async def test_the_step_that_would_pass_the_budget_gives_way_to_the_final_answer() -> None:
    """$1 calls, a $2.50 budget: two steps ($2.00), then the third step's call would pass it,
    so the final call comes instead: $3.00, one call past (was $4.00: the crossing call,
    then the final one)."""
    replies = [calc("6*7"), calc("7*6"), best("42, as far as I got"), calc("1"), calc("2")]
    async with FakeLLMServer(replies) as llm, api_client(priced(llm)) as client:
        body = {"task": "6*7?", "tools": ["calculator"], "settings": {"max_cost_usd": 2.5}}
        run = await run_to_end(client, body)
        calls = await calls_of(client, run["id"])

    assert run["status"] == "incomplete"
    assert run["result"] == {
        "answer": "42, as far as I got",
        "reason": "cost_budget",
        "degraded": True,
    }
    assert [c["cost_usd"] for c in calls] == [1.0, 1.0, 1.0]
    assert [c["final"] for c in calls] == [False, False, True]
    assert run["usage"]["cost_usd"] == 3.0
    assert run["usage"]["steps"] == 2
    assert len(llm.requests) == 3


async def test_a_call_that_passed_the_budget_is_the_last_the_run_makes() -> None:
    """The second call cost $2, not the $1 expected of it: the spend ($3.00) passed the $2.50
    budget, so no final call follows (it would be a second call past the budget)."""
    replies = [calc("6*7"), calc("7*6", TWO_DOLLARS), best("never asked")]
    async with FakeLLMServer(replies) as llm, api_client(priced(llm)) as client:
        body = {"task": "6*7?", "tools": ["calculator"], "settings": {"max_cost_usd": 2.5}}
        run = await run_to_end(client, body)
        calls = await calls_of(client, run["id"])
        events = (await json_events(client, run["id"]))["events"]

    assert run["status"] == "incomplete"
    assert run["result"] == {"answer": None, "reason": "cost_budget", "degraded": False}
    assert [c["cost_usd"] for c in calls] == [1.0, 2.0]
    assert run["usage"]["cost_usd"] == 3.0
    assert len(llm.requests) == 2
    assert [e["kind"] for e in events if e["type"] == "intervention"] == []  # no limit prompt


async def test_a_spend_exactly_at_the_budget_still_gets_its_final_answer() -> None:
    replies = [calc("6*7"), calc("7*6"), best("at the budget")]
    async with FakeLLMServer(replies) as llm, api_client(priced(llm)) as client:
        body = {"task": "6*7?", "tools": ["calculator"], "settings": {"max_cost_usd": 2.0}}
        run = await run_to_end(client, body)

    assert run["result"]["answer"] == "at the budget"
    assert run["usage"]["cost_usd"] == 3.0  # $2.00 at the budget, then the final call


async def test_a_trees_spend_passes_its_budget_by_one_call_at_most() -> None:
    """The parent ($1 a call) delegates with $1.50 left of $2.50: its child gets $0.50, the
    rest being room for the parent's own final call. The child's first call ($1) passes its
    share, so it ends there without a final call; the parent's final call is the one call past
    the tree's budget: $3.00 (was $5.00)."""
    replies = [
        FakeReply.call("w", {"task": "compute 6*7"}, usage=DOLLAR),  # the parent's step 1
        calc("6*7"),  # the child's step 1
        best("the worker ran out; 42 is my guess"),  # the parent's final call
        best("unused"),
    ]
    worker = {"description": "A worker.", "tools": ["calculator"]}
    async with FakeLLMServer(replies) as llm, api_client(priced(llm)) as client:
        body = {"task": "6*7?", "agents": {"w": worker}, "settings": {"max_cost_usd": 2.5}}
        parent = await run_to_end(client, body)
        (child,) = await children(client, parent["id"])

    assert child["settings"]["max_cost_usd"] == 0.5
    assert (child["status"], child["result"]["reason"]) == ("incomplete", "cost_budget")
    assert child["result"]["answer"] is None
    assert child["usage"]["cost_usd"] == 1.0
    assert (parent["status"], parent["result"]["reason"]) == ("incomplete", "cost_budget")
    assert parent["result"]["answer"] == "the worker ran out; 42 is my guess"
    assert parent["usage"]["cost_usd"] == 3.0
    assert parent["usage"]["children"]["cost_usd"] == 1.0
    assert len(llm.requests) == 3

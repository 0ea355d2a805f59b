"""What a run costs, over HTTP (DESIGN §13): `usage.cost_usd` on the run, its terminal event,
each `llm.call` and the rows of GET /runs; `max_cost_usd` ending a run with `cost_budget`;
and a cost budget for a model without a price refused with 422 naming the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.api.kit import (
    create,
    error_of,
    finish,
    json_events,
    run_to_end,
    scripted,
    settings,
)
from tests.fakes.service import api_client

PRICED = {"scripted": {"input_per_mtok": 2.0, "output_per_mtok": 10.0}}
"""The scripted model priced as a deployment prices a model genai-prices does not know."""


def calc(prompt: int, completion: int, expression: str = "6*7") -> dict[str, Any]:
    return {
        "tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
    }


def done(prompt: int, completion: int) -> dict[str, Any]:
    return {**finish("42"), "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


async def test_usage_cost_is_on_the_run_its_terminal_event_each_call_and_the_list() -> None:
    async with api_client(settings(model_prices=PRICED)) as client:
        body = scripted(calc(1000, 100), done(2000, 50), tools=["calculator"])
        run = await run_to_end(client, body)
        events = (await json_events(client, run["id"]))["events"]
        listed = (await client.get("/runs")).json()["runs"]

    assert run["status"] == "completed"
    assert run["usage"]["cost_usd"] == 0.0075  # (2000 + 1000) + (4000 + 500) µ$
    calls = [e for e in events if e["type"] == "llm.call"]
    assert [(c["cost_usd"], c["cached_tokens"]) for c in calls] == [(0.003, 0), (0.0045, 0)]
    assert events[-1]["type"] == "run.completed"
    assert events[-1]["usage"]["cost_usd"] == 0.0075
    assert [r["usage"]["cost_usd"] for r in listed if r["id"] == run["id"]] == [0.0075]


async def test_an_unpriced_scripted_run_costs_nothing() -> None:
    async with api_client(settings()) as client:
        run = await run_to_end(client, scripted(done(1000, 100)))
    assert run["usage"]["cost_usd"] == 0.0


async def test_a_run_ends_incomplete_with_cost_budget_and_a_degraded_answer() -> None:
    final = {"content": "about 42", "usage": {"prompt_tokens": 1000, "completion_tokens": 10}}
    replies = [calc(1000, 100), final, calc(1000, 100, "7*6")]
    async with api_client(settings(model_prices=PRICED)) as client:
        body = scripted(*replies, tools=["calculator"], settings={"max_cost_usd": 0.005})
        run = await run_to_end(client, body)
        events = (await json_events(client, run["id"]))["events"]

    assert run["status"] == "incomplete"
    assert run["result"] == {"answer": "about 42", "reason": "cost_budget", "degraded": True}
    assert run["settings"]["max_cost_usd"] == 0.005
    kinds = [e["kind"] for e in events if e["type"] == "intervention"]
    assert kinds == ["cost_budget"]
    assert events[-1]["type"] == "run.incomplete"
    assert events[-1]["result"]["reason"] == "cost_budget"
    # $0.003 spent; the next call, expected to cost as much, would pass $0.005: the final
    # call ($0.0021) comes instead, counted, the one call past the budget
    assert run["usage"]["steps"] == 1
    assert run["usage"]["cost_usd"] == 0.0051


async def test_a_cost_budget_for_a_model_without_a_price_is_422_naming_the_model() -> None:
    server = settings(llm_base_url="http://127.0.0.1:9/v1")  # never called: refused first
    async with api_client(server) as client:
        body = {"task": "t", "model": "my-local-llama", "settings": {"max_cost_usd": 1}}
        response = await client.post("/runs", json=body)
        unbudgeted = await client.post("/runs", json={**body, "settings": {}})

    error = error_of(response, 422, "validation_error")
    assert error["details"]["field"] == "settings.max_cost_usd"
    assert error["details"]["model"] == "my-local-llama"
    assert "model 'my-local-llama' has no known price" in error["message"]
    assert "FINISHLINE_MODEL_PRICES" in error["message"]
    assert unbudgeted.status_code == 202  # without a budget, an unpriced model runs (cost null)


async def test_the_server_default_budget_refuses_an_unpriced_model_too() -> None:
    server = settings(llm_base_url="http://127.0.0.1:9/v1", max_cost_usd=1)
    async with api_client(server) as client:
        unpriced = await client.post("/runs", json={"task": "t", "model": "my-local-llama"})
        priced = await client.post("/runs", json={"task": "t", "model": "gpt-4o-mini"})
    assert error_of(unpriced, 422)["details"]["model"] == "my-local-llama"
    assert priced.status_code == 202, priced.text  # genai-prices knows it


@pytest.mark.parametrize("model", ["gpt-4o-mini", "my-local-llama"])
async def test_a_model_priced_by_the_deployment_takes_a_budget(model: str) -> None:
    prices = {model: {"input_per_mtok": 0.1, "output_per_mtok": 0.2}}
    server = settings(llm_base_url="http://127.0.0.1:9/v1", model_prices=prices)
    async with api_client(server) as client:
        run = await create(client, {"task": "t", "model": model, "settings": {"max_cost_usd": 1}})
    assert run["settings"]["max_cost_usd"] == 1


async def test_a_waiting_run_shows_what_it_spent_and_its_resume_goes_on_from_there(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"  # the spend is stored, and read back on resume
    body = scripted(
        calc(1000, 100),
        done(2000, 50),
        tools=["calculator"],
        approval={"tools": ["calculator"]},
    )
    async with api_client(settings(model_prices=PRICED, store_url=store)) as client:
        run = await create(client, body)
        waiting = (await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})).json()
        (pending,) = waiting["pending_approvals"]
        decided = await client.post(
            f"/runs/{run['id']}/approvals",
            json={"decisions": [{"call_id": pending["call_id"], "approve": True}]},
        )
        assert decided.status_code == 202, decided.text
        ended = (await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})).json()

    assert waiting["status"] == "requires_action"
    assert waiting["usage"]["cost_usd"] == 0.003  # from the checkpoint, before the run ended
    assert ended["status"] == "completed", ended
    assert ended["usage"]["cost_usd"] == 0.0075

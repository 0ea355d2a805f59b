"""Quotas per API key over HTTP (DESIGN §13), on SQLite and on Redis: past a quota POST /runs
answers 429 `quota_exceeded` naming the quota, its limit and use, with Retry-After; a key's
quotas are its own; a spent day ends the key's running runs like a budget; the counts
survive a restart; GET /usage shows the caller its own figures only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from app.api.auth import owner_of
from tests.api.kit import (
    cancel,
    create,
    error_of,
    finish,
    hanging,
    run_to_end,
    scripted,
    settings,
    wait_ended,
    wait_for_status,
)
from tests.api.subagent_kit import call, children, events, of_type, worker
from tests.fakes.service import api_client

KEY_A, KEY_B = "first-key-6f1d2c9a8b7e", "second-key-3a4b5c6d7e8f"
A = {"Authorization": f"Bearer {KEY_A}"}
B = {"Authorization": f"Bearer {KEY_B}"}
PRICED = {"scripted": {"input_per_mtok": 2.0, "output_per_mtok": 10.0}}
"""$0.002 per 1,000 prompt tokens, $0.001 per 100 completion tokens."""


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        return url
    return f"sqlite:///{tmp_path / 'runs.db'}"


def keyed(store_url: str, **overrides: Any) -> Any:
    return settings(store_url=store_url, api_keys=[KEY_A, KEY_B], **overrides)


def used(prompt: int, completion: int = 0, **reply: Any) -> dict[str, Any]:
    return {**reply, "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


def spending(prompt: int, completion: int = 0) -> dict[str, Any]:
    """A run that finishes at once, its one call reporting this usage."""
    return scripted(used(prompt, completion, **finish("done")))


async def refused(client: httpx.AsyncClient, quota: str, **kw: Any) -> dict[str, Any]:
    response = await client.post("/runs", json=spending(1), **kw)
    error = error_of(response, 429, "quota_exceeded")
    assert error["details"]["quota"] == quota
    assert response.headers["retry-after"] == str(error["details"]["retry_after_s"])
    return error


# -- each quota ---------------------------------------------------------------------------------


async def test_concurrent_runs_refuses_a_keys_next_run_while_it_holds_its_quota(
    store_url: str,
) -> None:
    async with api_client(keyed(store_url, quota_concurrent_runs=1)) as client:
        busy = await create(client, hanging(), headers=A)
        error = await refused(client, "concurrent_runs", headers=A)
        other = await create(client, spending(1), headers=B)  # another key's quota is its own
        await cancel(client, busy["id"], headers=A)
        await wait_ended(client, busy["id"], headers=A)
        again = await create(client, spending(1), headers=A)  # the ended run freed its place
        await wait_ended(client, again["id"], headers=A)
        await wait_ended(client, other["id"], headers=B)

    assert error["details"] == {
        "quota": "concurrent_runs",
        "limit": 1,
        "used": 1,
        "retry_after_s": 5,
    }
    assert "concurrent_runs" in error["message"]


async def test_runs_per_minute_refuses_past_its_window_and_says_when_to_retry(
    store_url: str,
) -> None:
    async with api_client(keyed(store_url, quota_runs_per_minute=2)) as client:
        for _ in range(2):
            await run_to_end(client, spending(1), headers=A)
        error = await refused(client, "runs_per_minute", headers=A)
        await run_to_end(client, spending(1), headers=B)

    assert (error["details"]["limit"], error["details"]["used"]) == (2, 2)
    assert 1 <= error["details"]["retry_after_s"] <= 60


async def test_a_spent_days_tokens_refuse_new_runs_until_midnight_utc(store_url: str) -> None:
    async with api_client(keyed(store_url, quota_tokens_per_day=1000)) as client:
        await run_to_end(client, spending(900, 100), headers=A)
        error = await refused(client, "tokens_per_day", headers=A)
        await run_to_end(client, spending(1), headers=B)

    assert (error["details"]["limit"], error["details"]["used"]) == (1000, 1000)
    assert 1 <= error["details"]["retry_after_s"] <= 86_400


async def test_a_spent_days_cost_refuses_new_runs(store_url: str) -> None:
    config = keyed(store_url, quota_cost_usd_per_day=0.003, model_prices=PRICED)
    async with api_client(config) as client:
        await run_to_end(client, spending(1000, 100), headers=A)  # $0.003
        error = await refused(client, "cost_usd_per_day", headers=A)

    assert error["details"]["limit"] == 0.003
    assert error["details"]["used"] == pytest.approx(0.003, rel=1e-9)


# -- a spent day ends running runs ------------------------------------------------------------


def approving(*replies: dict[str, Any]) -> dict[str, Any]:
    return scripted(*replies, tools=["calculator"], approval={"tools": ["calculator"]})


def calc(prompt: int, call_id: str) -> dict[str, Any]:
    call = {"name": "calculator", "arguments": {"expression": "6*7"}, "id": call_id}
    return used(prompt, tool_calls=[call])


async def test_a_spent_day_ends_the_keys_running_runs_with_token_budget(store_url: str) -> None:
    config = keyed(store_url, quota_tokens_per_day=1000)
    async with api_client(config) as client:
        # the first run spends 400 and waits for a person; the second spends the day
        waiting = await create(client, approving(calc(400, "c1"), used(5, content="A")), headers=A)
        await wait_for_status(client, waiting["id"], "requires_action", headers=A)
        spender = scripted(calc(700, "c2"), used(5, content="B"), tools=["calculator"])
        second = await run_to_end(client, spender, headers=A)
        decided = await client.post(
            f"/runs/{waiting['id']}/approvals",
            json={"decisions": [{"call_id": "c1", "approve": True}]},
            headers=A,
        )
        assert decided.status_code == 202, decided.text
        first = await wait_ended(client, waiting["id"], headers=A)
        usage = (await client.get("/usage", headers=A)).json()

    # the second run ended after the step that spent the day, its final call allowed
    assert (second["status"], second["result"]["reason"]) == ("incomplete", "token_budget")
    assert (second["result"]["answer"], second["result"]["degraded"]) == ("B", True)
    # the first, resumed after the day was spent, ended before its next step
    assert (first["status"], first["result"]["reason"]) == ("incomplete", "token_budget")
    assert first["result"]["answer"] == "A"
    assert usage["total_tokens"] == 400 + 700 + 5 + 5
    assert usage["quotas"]["tokens_per_day"] == {"limit": 1000, "used": 1110, "left": 0}


async def test_a_spent_day_cost_ends_a_running_run_with_cost_budget(store_url: str) -> None:
    config = keyed(store_url, quota_cost_usd_per_day=0.005, model_prices=PRICED)
    body = scripted(
        *[calc(1000, f"c{i}") for i in range(5)],  # $0.002 a call
        used(10, content="best so far"),
        tools=["calculator"],
    )
    async with api_client(config) as client:
        run = await run_to_end(client, body, headers=A)
    assert (run["status"], run["result"]["reason"]) == ("incomplete", "cost_budget")
    assert run["usage"]["llm_calls"] == 3 + 1  # 0.002, 0.004, 0.006 >= 0.005: the final call


# -- exact under concurrency ---------------------------------------------------------------------


async def forty_at_once(clients: list[httpx.AsyncClient]) -> list[httpx.Response]:
    answers: list[httpx.Response] = []

    async def post(client: httpx.AsyncClient) -> None:
        answers.append(await client.post("/runs", json=hanging(), headers=A))

    with anyio.fail_after(60):  # a failure bound: seconds, even on a loaded 2-core machine
        async with anyio.create_task_group() as tg:
            for index in range(40):
                tg.start_soon(post, clients[index % len(clients)])
    return answers


async def test_forty_posts_at_once_never_let_a_fourth_run_past_a_quota_of_three(
    tmp_path: Path,
) -> None:
    config = keyed(f"sqlite:///{tmp_path / 'runs.db'}", quota_concurrent_runs=3)
    async with api_client(config) as client:
        answers = await forty_at_once([client])
        made = [r.json()["id"] for r in answers if r.status_code == 202]
        for run_id in made:
            await cancel(client, run_id, headers=A)

    assert sorted(r.status_code for r in answers) == [202] * 3 + [429] * 37
    refusals = {r.json()["error"]["details"]["quota"] for r in answers if r.status_code == 429}
    assert refusals == {"concurrent_runs"}


async def test_forty_posts_at_once_on_two_replicas_admit_exactly_three(redis_url: str) -> None:
    config = keyed(redis_url, quota_concurrent_runs=3)
    async with api_client(config) as one, api_client(config) as other:
        answers = await forty_at_once([one, other])
        made = [r.json()["id"] for r in answers if r.status_code == 202]
        for run_id in made:
            await cancel(one, run_id, headers=A)

    assert sorted(r.status_code for r in answers) == [202] * 3 + [429] * 37
    assert {r.json()["error"]["type"] for r in answers if r.status_code == 429} == {
        "quota_exceeded"
    }


# -- a restart -----------------------------------------------------------------------------------


async def test_the_counts_survive_a_restart(store_url: str) -> None:
    config = keyed(store_url, quota_runs_per_minute=2, quota_tokens_per_day=10_000)
    async with api_client(config) as client:
        await run_to_end(client, spending(300, 30), headers=A)
        await run_to_end(client, spending(200, 20), headers=A)

    async with api_client(config) as client:  # the service again, on the same store
        await refused(client, "runs_per_minute", headers=A)
        usage = (await client.get("/usage", headers=A)).json()

    assert (usage["runs"], usage["llm_calls"], usage["total_tokens"]) == (2, 2, 550)
    assert usage["quotas"]["runs_per_minute"] == {"limit": 2, "used": 2, "left": 0}
    assert usage["quotas"]["tokens_per_day"] == {"limit": 10_000, "used": 550, "left": 9450}


# -- GET /usage ----------------------------------------------------------------------------------


async def test_usage_shows_the_caller_its_own_figures_only(store_url: str) -> None:
    config = keyed(store_url, quota_concurrent_runs=5, model_prices=PRICED)
    async with api_client(config) as client:
        await run_to_end(client, spending(1000, 100), headers=A)
        await run_to_end(client, spending(2000, 50), headers=A)
        await run_to_end(client, spending(7, 7), headers=B)
        mine = (await client.get("/usage", headers=A)).json()
        theirs = (await client.get("/usage", headers=B)).json()
        anonymous = await client.get("/usage")

    assert mine["runs"] == 2
    assert (mine["prompt_tokens"], mine["completion_tokens"], mine["total_tokens"]) == (
        3000,
        150,
        3150,
    )
    assert mine["cost_usd"] == pytest.approx(0.0075, rel=1e-9)  # 0.003 + 0.0045
    assert (mine["llm_calls"], mine["unpriced_calls"]) == (2, 0)
    assert mine["key_id"] == owner_of(KEY_A)[:12]
    assert mine["quotas"] == {"concurrent_runs": {"limit": 5, "used": 0, "left": 5}}
    assert len(mine["day"]) == 10
    assert (theirs["runs"], theirs["total_tokens"], theirs["key_id"]) == (
        1,
        14,
        owner_of(KEY_B)[:12],
    )
    error_of(anonymous, 401, "unauthorized")


async def test_without_auth_the_deployment_is_one_tenant() -> None:
    async with api_client(settings(quota_concurrent_runs=1)) as client:
        busy = await create(client, hanging())
        await refused(client, "concurrent_runs")
        usage = (await client.get("/usage")).json()
        await cancel(client, busy["id"])
    assert (usage["key_id"], usage["runs"], usage["quotas"]["concurrent_runs"]["used"]) == (
        "none",
        1,
        1,
    )


async def test_usage_counts_calls_without_a_price_apart() -> None:
    async with api_client(settings()) as client:
        await run_to_end(client, {"task": "t", "model": "demo"})
        usage = (await client.get("/usage")).json()
    assert usage["llm_calls"] >= 1
    assert usage["unpriced_calls"] == 0  # the demo model is free, not unpriced
    assert usage["quotas"] == {}


# -- metrics -------------------------------------------------------------------------------------


async def test_per_key_metrics_are_counted_only_when_asked_for() -> None:
    async with api_client(settings(api_keys=[KEY_A])) as client:
        await run_to_end(client, spending(10, 1), headers=A)
        plain = (await client.get("/metrics")).text
    async with api_client(settings(api_keys=[KEY_A], usage_metrics_by_key=True)) as client:
        await run_to_end(client, spending(10, 1), headers=A)
        counted = (await client.get("/metrics")).text

    assert "finishline_key_" not in plain
    label = f'key="{owner_of(KEY_A)[:12]}"'
    assert f"finishline_key_runs_accepted_total{{{label}}} 1.0" in counted
    assert f'finishline_key_tokens_total{{{label},kind="prompt"}} 10.0' in counted
    assert f'finishline_key_tokens_total{{{label},kind="completion"}} 1.0' in counted
    assert KEY_A not in counted


# -- sub-agents ----------------------------------------------------------------------------------


async def test_a_sub_agents_child_run_is_admitted_through_its_keys_quotas(store_url: str) -> None:
    body = scripted(
        call("w", "help"),
        finish("went on without it"),
        agents={"w": worker(finish("helped"))},
    )
    async with api_client(keyed(store_url, quota_concurrent_runs=1), headers=A) as client:
        parent = await run_to_end(client, body)
        seen = await events(client, parent["id"])
        kids = await children(client, parent["id"])

    assert parent["status"] == "completed"
    assert kids == []  # the parent holds the key's one place: no child was made
    (refused,) = [e for e in of_type(seen, "observation") if e["tool"] == "w"]
    assert refused["is_error"]
    assert "quota concurrent_runs exceeded" in refused["content"]


async def test_a_childs_calls_count_in_its_keys_day(store_url: str) -> None:
    body = scripted(
        used(100, **call("w", "help")),
        used(10, **finish("done")),
        agents={"w": worker(used(1000, 50, **finish("helped")))},
    )
    async with api_client(keyed(store_url, quota_concurrent_runs=2)) as client:
        await run_to_end(client, body, headers=A)
        usage = (await client.get("/usage", headers=A)).json()
    assert (usage["runs"], usage["llm_calls"], usage["total_tokens"]) == (2, 3, 1160)

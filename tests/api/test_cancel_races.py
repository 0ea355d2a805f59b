"""A cancel racing a run's end or a decision (issue 30), on each store: once a cancel
answers 202 the run ends `cancelled`; a cancel that comes too late (the run ended first) is
409 `run_already_ended`, never a 202 over a completed run. A decision that lost to the
cancel is refused, and the call it would have approved never runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.api.kit import finish, json_events, scripted, settings, wait_ended
from tests.fakes.service import api_client

ROUNDS = 12


def calc(expression: str, call_id: str) -> dict[str, object]:
    return {"name": "calculator", "arguments": {"expression": expression}, "id": call_id}


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        return url
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


async def test_a_cancel_racing_an_approval_either_cancels_the_run_or_is_refused(
    store_url: str,
) -> None:
    body = scripted(
        {"tool_calls": [calc("6*7", "c1")]},
        finish("42"),
        tools=["calculator"],
        approval={"tools": ["calculator"]},
    )
    outcomes = []
    async with api_client(settings(store_url=store_url)) as client:
        for _ in range(ROUNDS):
            run = (await client.post("/runs", json=body)).json()
            waited = await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})
            assert waited.json()["status"] == "requires_action", waited.text
            decision = {"decisions": [{"call_id": "c1", "approve": True}]}
            decided, cancelled = await asyncio.gather(
                client.post(f"/runs/{run['id']}/approvals", json=decision),
                client.post(f"/runs/{run['id']}/cancel"),
            )
            final = await wait_ended(client, run["id"])
            events = (await json_events(client, run["id"]))["events"]
            ran = [e for e in events if e["type"] == "observation" and not e["is_error"]]
            outcomes.append((decided.status_code, cancelled.status_code, final["status"]))
            assert cancelled.status_code in (202, 409), cancelled.text
            if cancelled.status_code == 202:
                assert final["status"] == "cancelled", (decided.text, cancelled.text, final)
            else:
                assert cancelled.json()["error"]["type"] == "run_already_ended"
                assert final["status"] == "completed"
            if decided.status_code != 202:  # the cancel came first: the call never ran
                assert ran == [], events
    assert {o[1] for o in outcomes} <= {202, 409}


async def test_a_cancel_arriving_as_the_run_ends_is_202_cancelled_or_409(store_url: str) -> None:
    body = scripted({"content": "one thought", "delay_s": 0.05}, finish("done"))
    async with api_client(settings(store_url=store_url)) as client:
        for _ in range(ROUNDS):
            run = (await client.post("/runs", json=body)).json()
            await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 0.05})
            cancelled = await client.post(f"/runs/{run['id']}/cancel")
            final = await wait_ended(client, run["id"])
            if cancelled.status_code == 202:
                assert cancelled.json()["status"] == "cancelled", cancelled.text
                assert final["status"] == "cancelled"
            else:
                assert cancelled.status_code == 409, cancelled.text
                assert final["status"] == "completed"

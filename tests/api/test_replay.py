"""POST /runs/{id}/replay (DESIGN §20) on every store: runs made against the fake LLM over
HTTP replay identically with no call to the model and nothing stored; a lower max_steps
shows where the run would have ended; a run not ended, not the caller's or a bad body is
refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.kit import cancel, create, hanging, settings
from tests.fakes.llm_server import FakeLLMServer, FakeReply
from tests.fakes.service import api_client

KEY_A, KEY_B = "key-a-" + "a" * 20, "key-b-" + "b" * 20
A = {"Authorization": f"Bearer {KEY_A}"}
B = {"Authorization": f"Bearer {KEY_B}"}


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param in ("redis", "postgres"):
        url: str = request.getfixturevalue(f"{request.param}_url")
        return url
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


def calc(expression: str) -> FakeReply:
    return FakeReply.call("calculator", {"expression": expression}, content="Let me compute.")


async def ended(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    run = await create(client, body, A)
    response = await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10}, headers=A)
    assert response.json()["status"] in ("completed", "incomplete"), response.text
    return dict(response.json())


async def replay(client: httpx.AsyncClient, run_id: str, body: Any = None) -> httpx.Response:
    return await client.post(f"/runs/{run_id}/replay", json=body, headers=A)


async def test_recorded_runs_replay_identically_calling_nothing_and_storing_nothing(
    store_url: str,
) -> None:
    replies = [
        calc("6*7"),
        FakeReply(content="The answer is 42."),  # a plain reply: a stop prompt follows
        FakeReply.finish("42"),
        calc("1/0"),  # a tool error, shown to the model
        calc("6*7"),
        calc("6*7"),  # the same call again: a repetition hint
        FakeReply(content="my best answer"),  # max_steps: the final call's
    ]
    async with FakeLLMServer(replies) as llm:
        config = settings(store_url=store_url, api_keys=[KEY_A, KEY_B], llm_base_url=llm.base_url)
        async with api_client(config) as client:
            tools = {"task": "What is 6*7?", "model": "fake-model", "tools": ["calculator"]}
            first = await ended(client, tools)
            second = await ended(client, {**tools, "settings": {"max_steps": 3}})
            assert first["result"]["reason"] == "finished"
            assert second["result"]["reason"] == "max_steps"
            calls = len(llm.requests)
            listed = (await client.get("/runs", headers=A)).json()["runs"]
            for run in (first, second):
                events = await client.get(
                    f"/runs/{run['id']}/events", headers={**A, "Accept": "application/json"}
                )
                response = await replay(client, run["id"])
                assert response.status_code == 200, response.text
                assert response.json() == {
                    "identical": True,
                    "events": response.json()["events"],
                    "first_divergence": None,
                }
                again = await client.get(
                    f"/runs/{run['id']}/events", headers={**A, "Accept": "application/json"}
                )
                assert again.json()["events"] == events.json()["events"]  # nothing stored
            assert len(llm.requests) == calls  # no model call
            assert (await client.get("/runs", headers=A)).json()["runs"] == listed

            lower = await replay(client, first["id"], {"settings": {"max_steps": 1}})
            assert lower.status_code == 200, lower.text
            view = lower.json()
            assert view["identical"] is False
            divergence = view["first_divergence"]
            assert divergence["recorded"]["type"] == "step.started"
            assert divergence["recorded"]["step"] == 2
            assert divergence["replayed"] == {
                "type": "intervention",
                "step": 1,
                "data": divergence["replayed"]["data"],
            }
            assert divergence["replayed"]["data"]["kind"] == "max_steps"

            foreign = await client.post(f"/runs/{first['id']}/replay", headers=B)
            assert foreign.status_code == 404, foreign.text
            bad = await replay(client, first["id"], {"settings": {"max_steps": 0}})
            assert bad.status_code == 422, bad.text
            unknown = await replay(client, first["id"], {"model": "other"})
            assert unknown.status_code == 422, unknown.text


async def test_a_run_that_has_not_ended_is_not_replayed() -> None:
    async with api_client(settings()) as client:
        run = await create(client, hanging())
        response = await client.post(f"/runs/{run['id']}/replay")
        assert response.status_code == 409, response.text
        assert response.json()["error"]["type"] == "run_not_ended"
        await cancel(client, run["id"])

"""POST /runs/{id}/fork (DESIGN §20) on every store: the fork's first model call is sent
exactly the messages the run sent at that step (nothing called again before it), then it
goes on live with its changes; `forked_from` on the run and its run.queued event."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.kit import cancel, create, hanging, settings
from tests.fakes.llm_server import FakeLLMServer, FakeReply
from tests.fakes.service import api_client


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param in ("redis", "postgres"):
        url: str = request.getfixturevalue(f"{request.param}_url")
        return url
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


async def wait(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    response = await client.get(f"/runs/{run_id}/wait", params={"timeout_s": 10})
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_a_fork_starts_from_the_recorded_conversation_then_goes_on_live(
    store_url: str,
) -> None:
    replies = [
        FakeReply.call("calculator", {"expression": "6*7"}, content="Let me compute."),
        FakeReply(content="It is 42."),  # a plain reply: a stop prompt follows
        FakeReply.finish("42"),
    ]
    async with FakeLLMServer(replies) as llm:
        config = settings(store_url=store_url, llm_base_url=llm.base_url)
        async with api_client(config) as client:
            body = {"task": "What is 6*7?", "model": "model-a", "tools": ["calculator"]}
            original = await wait(client, (await create(client, body))["id"])
            assert original["usage"]["steps"] == 3
            sent = llm.requests
            llm.enqueue(FakeReply.finish("forty-two"))

            response = await client.post(
                f"/runs/{original['id']}/fork", json={"at_step": 2, "model": "model-b"}
            )
            assert response.status_code == 202, response.text
            fork = await wait(client, response.json()["id"])
            assert fork["forked_from"] == {"run_id": original["id"], "step": 2}
            assert fork["model"] == "model-b"
            assert fork["result"]["answer"] == "forty-two"
            first = llm.requests[len(sent)]
            assert first["model"] == "model-b"
            assert first["messages"] == sent[1]["messages"]  # exactly what step 2 was sent
            assert len(llm.requests) == len(sent) + 1  # nothing before it was called again
            events = await client.get(
                f"/runs/{fork['id']}/events", headers={"Accept": "application/json"}
            )
            queued = events.json()["events"][0]
            assert queued["type"] == "run.queued"
            assert queued["forked_from"] == {"run_id": original["id"], "step": 2}


async def test_a_fork_at_step_one_is_the_task_from_the_start_with_its_changes() -> None:
    replies = [FakeReply.finish("one"), FakeReply.finish("two")]
    async with (
        FakeLLMServer(replies) as llm,
        api_client(settings(llm_base_url=llm.base_url)) as client,
    ):
        body = {"task": "first task", "model": "model-a"}
        original = await wait(client, (await create(client, body))["id"])
        response = await client.post(
            f"/runs/{original['id']}/fork",
            json={"at_step": 1, "task": "second task", "settings": {"max_steps": 2}},
        )
        assert response.status_code == 202, response.text
        fork = await wait(client, response.json()["id"])
        assert fork["task"] == "second task"
        assert fork["settings"]["max_steps"] == 2
        assert llm.requests[1]["messages"][-1] == {"role": "user", "content": "second task"}


async def test_forks_that_cannot_be_are_refused_by_name() -> None:
    async with (
        FakeLLMServer([FakeReply.finish("one")]) as llm,
        api_client(settings(llm_base_url=llm.base_url)) as client,
    ):
        done = await wait(client, (await create(client, {"task": "t", "model": "m"}))["id"])
        url = f"/runs/{done['id']}/fork"
        beyond = await client.post(url, json={"at_step": 2})
        assert beyond.status_code == 422, beyond.text
        assert "at_step" in beyond.text
        prompt = await client.post(url, json={"at_step": 1, "task": ""})
        assert prompt.status_code == 422, prompt.text
        extra = await client.post(url, json={"at_step": 1, "colour": "red"})
        assert extra.status_code == 422, extra.text
        running = await create(client, hanging())
        response = await client.post(f"/runs/{running['id']}/fork", json={"at_step": 1})
        assert response.status_code == 409, response.text
        await cancel(client, running["id"])


async def test_system_prompt_and_task_change_only_at_step_one() -> None:
    replies = [FakeReply(content="hmm"), FakeReply.finish("42")]
    async with (
        FakeLLMServer(replies) as llm,
        api_client(settings(llm_base_url=llm.base_url)) as client,
    ):
        done = await wait(client, (await create(client, {"task": "t", "model": "m"}))["id"])
        for field in ("system_prompt", "task"):
            response = await client.post(
                f"/runs/{done['id']}/fork", json={"at_step": 2, field: "other"}
            )
            assert response.status_code == 422, response.text
            assert field in response.json()["error"]["message"]

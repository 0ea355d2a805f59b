"""Human approval and steering across replicas (DESIGN §9, §10 with §8): two uvicorn
processes on one real redis-server. A run waiting for a person is served by either: of two
decisions on one call posted at once to both, one wins (202) and the other is 409; a run
started on one replica is decided on the other, even once the first is dead, and its
approved tool runs exactly once; the approval timeout fires with the starting replica dead;
a steering message posted on one replica reaches the run executing on the other; a waiting
run is cancelled on one replica (its held message logged undelivered) and deleted on the
other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.e2e.kit import (
    LocalEndpoints,
    assert_one_terminal_at_the_end,
    follow,
    http_tool,
    seqs,
    start_run,
    stored_events,
)
from tests.e2e.test_replicas import executor, finish, replicas, scripted, wait_status
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeToolCall

pytestmark = pytest.mark.e2e

HOSTS = {"FINISHLINE_HTTP_TOOL_ALLOW_HOSTS": "127.0.0.1"}


def deploying(endpoints: LocalEndpoints, name: str, **fields: Any) -> dict[str, Any]:
    """A scripted run whose one call of `deploy` (an HTTP tool counting its calls at
    /count/{name}) waits for approval; then it finishes with the tool's answer."""
    call = {"name": "deploy", "arguments": {"key": "prod"}, "id": "c1"}
    return scripted(
        {"content": "deploying", "tool_calls": [call]},
        finish("deployed"),
        http_tools=[http_tool("deploy", endpoints.url(f"/count/{name}"), requires_approval=True)],
        **fields,
    )


async def waiting(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    response = await client.get(f"/runs/{run_id}/wait", params={"timeout_s": 10})
    run: dict[str, Any] = response.json()
    assert run["status"] == "requires_action", run
    return run


def decision(approve: bool) -> dict[str, Any]:
    return {"decisions": [{"call_id": "c1", "approve": approve, "message": f"said {approve}"}]}


async def decide(
    answers: dict[bool, httpx.Response], client: httpx.AsyncClient, run_id: str, approve: bool
) -> None:
    answers[approve] = await client.post(f"/runs/{run_id}/approvals", json=decision(approve))


async def test_of_two_decisions_posted_at_once_to_two_replicas_one_wins_and_the_tool_runs_once(
    tmp_path: Path, shared_url: str
) -> None:
    async with LocalEndpoints() as endpoints, replicas(tmp_path, shared_url, **HOSTS) as started:
        (_, a), (_, b) = started
        for attempt in range(3):  # a few races, each on its own run
            name = f"race{attempt}"
            run_id = await start_run(a, deploying(endpoints, name))
            await waiting(b, run_id)
            answers: dict[bool, httpx.Response] = {}

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(decide, answers, a, run_id, True)
                    tg.start_soon(decide, answers, b, run_id, False)
            codes = sorted(r.status_code for r in answers.values())
            assert codes == [202, 409], {k: r.text for k, r in answers.items()}
            (winner,) = [k for k, r in answers.items() if r.status_code == 202]
            assert answers[not winner].json()["error"]["type"] == "run_not_waiting"

            streamed = await follow(b, run_id)
            assert_one_terminal_at_the_end(streamed, "run.completed")
            assert seqs(streamed) == list(range(1, len(streamed) + 1))
            decided = [e for e in streamed if e.event == "approval.decided"]
            assert [e.data["approved"] for e in decided] == [winner]
            assert [e.event for e in streamed].count("run.started") == 2
            assert endpoints.counts[name] == (1 if winner else 0)
            (observation,) = [e for e in streamed if e.event == "observation"]
            assert observation.data["is_error"] is not winner


async def test_a_run_started_on_a_dead_replica_is_approved_on_the_other_and_ends_there(
    tmp_path: Path, shared_url: str
) -> None:
    async with LocalEndpoints() as endpoints, replicas(tmp_path, shared_url, **HOSTS) as started:
        apps = [app for app, _ in started]
        run_id = await start_run(started[0][1], deploying(endpoints, "once"))
        index = await executor(apps, run_id)
        survivor = started[1 - index][1]
        run = await waiting(survivor, run_id)
        assert [p["call_id"] for p in run["pending_approvals"]] == ["c1"]
        apps[index].kill()  # it holds nothing of the waiting run: no lease, no slot, no task
        await apps[index].wait_exit(timeout_s=10)

        response = await survivor.post(f"/runs/{run_id}/approvals", json=decision(True))
        assert response.status_code == 202, response.text

        streamed = await follow(survivor, run_id)
        assert_one_terminal_at_the_end(streamed, "run.completed")
        assert streamed[-1].data["result"]["answer"] == "deployed"
        (observation,) = [e for e in streamed if e.event == "observation"]
        assert observation.data["content"] == "call 1 of prod"
        assert endpoints.counts["once"] == 1
        assert [e.event for e in streamed].count("run.recovered") == 0
        assert [e["seq"] for e in await stored_events(survivor, run_id)] == seqs(streamed)


async def test_the_approval_timeout_fires_when_the_replica_that_ran_the_run_is_dead(
    tmp_path: Path, shared_url: str
) -> None:
    async with LocalEndpoints() as endpoints, replicas(tmp_path, shared_url, **HOSTS) as started:
        apps = [app for app, _ in started]
        body = deploying(endpoints, "late", settings={"approval_timeout_s": 2})
        run_id = await start_run(started[0][1], body)
        index = await executor(apps, run_id)
        survivor = started[1 - index][1]
        await waiting(survivor, run_id)
        apps[index].kill()

        streamed = await follow(survivor, run_id, timeout_s=20)

        assert_one_terminal_at_the_end(streamed, "run.completed")
        (decided,) = [e for e in streamed if e.event == "approval.decided"]
        assert (decided.data["approved"], decided.data["message"]) == (
            False,
            "no decision within 2 s",
        )
        assert endpoints.counts["late"] == 0


async def test_a_message_posted_on_one_replica_reaches_the_run_executing_on_the_other(
    tmp_path: Path, shared_url: str
) -> None:
    replies = [
        FakeReply(
            content="compute 2+3",
            tool_calls=[FakeToolCall("calculator", {"expression": "2+3"})],
            hang=True,  # the run is in its first LLM call when the message is posted
        ),
        FakeReply.finish("5"),
    ]
    async with (
        FakeLLMServer(replies) as llm,
        replicas(tmp_path, shared_url, FINISHLINE_LLM_BASE_URL=llm.base_url) as started,
    ):
        apps = [app for app, _ in started]
        run_id = await start_run(started[0][1], {"task": "add", "tools": ["calculator"]})
        await llm.wait_for_requests(1, timeout_s=10)
        index = await executor(apps, run_id)
        other = started[1 - index][1]
        await wait_status(other, run_id, "running")

        response = await other.post(f"/runs/{run_id}/messages", json={"content": "show work"})
        assert response.status_code == 202, response.text
        await apps[index].wait_for_log("user_messages_taken", timeout_s=10)
        llm.release()

        streamed = await follow(other, run_id)
        assert_one_terminal_at_the_end(streamed, "run.completed")
        (said,) = [e for e in streamed if e.event == "user.message"]
        assert (said.data["content"], said.data["delivered"]) == ("show work", True)
        second = llm.requests[1]["messages"]
        assert second[-1] == {"role": "user", "content": "show work"}
        late = await other.post(f"/runs/{run_id}/messages", json={"content": "too late"})
        assert late.status_code == 409, late.text


async def test_a_waiting_run_is_cancelled_on_one_replica_and_deleted_on_the_other(
    tmp_path: Path, shared_url: str
) -> None:
    async with LocalEndpoints() as endpoints, replicas(tmp_path, shared_url, **HOSTS) as started:
        apps = [app for app, _ in started]
        run_id = await start_run(started[0][1], deploying(endpoints, "never"))
        index = await executor(apps, run_id)
        other, owner = started[1 - index][1], started[index][1]
        await waiting(other, run_id)
        said = await owner.post(f"/runs/{run_id}/messages", json={"content": "wait"})
        assert said.status_code == 202, said.text

        assert (await owner.delete(f"/runs/{run_id}")).status_code == 409
        cancelled = await other.post(f"/runs/{run_id}/cancel")
        assert cancelled.status_code == 202, cancelled.text
        assert cancelled.json()["status"] == "cancelled"
        streamed = await follow(owner, run_id)
        assert_one_terminal_at_the_end(streamed, "run.cancelled")
        (unseen,) = [e for e in streamed if e.event == "user.message"]
        assert (unseen.data["content"], unseen.data["delivered"]) == ("wait", False)
        late = await other.post(f"/runs/{run_id}/approvals", json=decision(True))
        assert late.status_code == 409, late.text

        assert (await owner.delete(f"/runs/{run_id}")).status_code == 204
        assert (await other.get(f"/runs/{run_id}")).status_code == 404
        assert endpoints.counts["never"] == 0

"""Several replicas, one service (DESIGN §8): two uvicorn processes on one real redis-server,
or one real Postgres (DESIGN §18).
A run posted on one is executed by whichever has a free slot and served by both: its stream,
GET, list, wait, cancel and stream token work on either; the queue cap is the cluster's; one
Idempotency-Key makes one run across replicas; a replica without the shared token secret
refuses to start."""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.e2e.kit import (
    LocalEndpoints,
    assert_one_terminal_at_the_end,
    follow,
    seqs,
    start_run,
    stored_events,
    wait_for_run,
)
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeToolCall
from tests.fakes.process import AppProcess, AppProcessError
from tests.fakes.service import SSE, sse_events

pytestmark = pytest.mark.e2e

SECRET = "a secret every replica shares"


def replica_env(shared_url: str, **extra: str) -> dict[str, str]:
    return {
        "FINISHLINE_STORE_URL": shared_url,
        "FINISHLINE_TOKEN_SECRET": SECRET,
        "FINISHLINE_SHUTDOWN_GRACE_S": "0",
        "FINISHLINE_LOG_LEVEL": "INFO",
        **extra,
    }


@contextlib.asynccontextmanager
async def replicas(
    tmp_path: Path, shared_url: str, count: int = 2, **extra: str
) -> AsyncIterator[list[tuple[AppProcess, httpx.AsyncClient]]]:
    """`count` replicas on one shared store, started at once (each waits for its own start-up)."""
    apps = []
    for index in range(count):
        cwd = tmp_path / f"replica{index}"
        cwd.mkdir()
        apps.append(AppProcess(cwd, replica_env(shared_url, **extra)))
    async with contextlib.AsyncExitStack() as stack:

        async def start(app: AppProcess) -> None:
            stack.push_async_exit(app.__aexit__)
            await app.__aenter__()

        async with anyio.create_task_group() as tg:
            for app in apps:
                tg.start_soon(start, app)
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=app.url(), timeout=10))
            for app in apps
        ]
        yield list(zip(apps, clients, strict=True))


def scripted(*replies: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"task": "a scripted task", "model": "scripted", "model_script": list(replies), **fields}


def calculator(expression: str) -> dict[str, Any]:
    return {
        "content": f"compute {expression}",
        "tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}],
    }


def finish(answer: str, **extra: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "task_finished", "arguments": {"answer": answer}}], **extra}


HANGING = scripted({"content": "thinking it over", "delay_s": 600})


async def wait_status(client: httpx.AsyncClient, run_id: str, status: str) -> dict[str, Any]:
    """GET the run until it has `status` (no event says a run was claimed by a replica)."""
    with anyio.fail_after(10):
        while True:
            run: dict[str, Any] = (await client.get(f"/runs/{run_id}")).json()
            if run["status"] == status:
                return run
            await anyio.sleep(0.02)


async def replica_logging(apps: Sequence[AppProcess], event: str, run_id: str) -> int:
    """The index of the one replica whose log has a line `event` for the run (the line may
    come a moment after the state it reports shows through the API: wait for it)."""

    def matches(line: str) -> bool:
        with contextlib.suppress(ValueError):
            parsed = json.loads(line)
            return (
                isinstance(parsed, dict)
                and parsed.get("event") == event
                and parsed.get("run_id") == run_id
            )
        return False

    found: list[int] = []
    async with anyio.create_task_group() as tg:

        async def watch(index: int, app: AppProcess) -> None:
            await app.wait_for_line(matches, timeout_s=10)
            found.append(index)
            tg.cancel_scope.cancel()

        for index, app in enumerate(apps):
            tg.start_soon(watch, index, app)
    assert len(found) == 1, found
    return found[0]


async def executor(apps: Sequence[AppProcess], run_id: str) -> int:
    """The index of the replica whose log says it started the run."""
    return await replica_logging(apps, "run_started", run_id)


async def test_a_run_posted_on_one_replica_streams_whole_from_the_other(
    tmp_path: Path, shared_url: str
) -> None:
    body = scripted(
        calculator("2+3"), calculator("5*7"), finish("35", delay_s=0.3), tools=["calculator"]
    )
    async with replicas(tmp_path, shared_url) as [(_, a), (_, b)]:
        run_id = await start_run(a, body)
        streamed = await follow(b, run_id)
        assert seqs(streamed) == list(range(1, len(streamed) + 1))
        assert_one_terminal_at_the_end(streamed, "run.completed")
        assert streamed[-1].data["result"]["answer"] == "35"
        assert [e.event for e in streamed].count("observation") == 2
        for client in (a, b):
            assert [e["seq"] for e in await stored_events(client, run_id)] == seqs(streamed)
            waited = (await client.get(f"/runs/{run_id}/wait", params={"timeout_s": 5})).json()
            assert waited["status"] == "completed"
            listed = (await client.get("/runs")).json()["runs"]
            assert [r["id"] for r in listed] == [run_id]


async def test_wait_on_another_replica_returns_when_the_run_ends(
    tmp_path: Path, shared_url: str
) -> None:
    """The wait is on the replica that does not execute the run, begun while the run is
    still running (its LLM call hangs until the wait has started), so it can only return
    `completed` by following the run through the shared store."""
    replies = [FakeReply.finish("late", hang=True)]
    async with (
        FakeLLMServer(replies) as llm,
        replicas(tmp_path, shared_url, FINISHLINE_LLM_BASE_URL=llm.base_url) as started,
    ):
        apps = [app for app, _ in started]
        run_id = await start_run(started[0][1], {"task": "answer late"})
        await llm.wait_for_requests(1, timeout_s=10)  # running, its one LLM call in flight
        index = await executor(apps, run_id)
        waiter, other = apps[1 - index], started[1 - index][1]
        waited: list[dict[str, Any]] = []
        async with anyio.create_task_group() as tg:

            async def wait() -> None:
                response = await other.get(f"/runs/{run_id}/wait", params={"timeout_s": 30})
                waited.append(response.json())

            tg.start_soon(wait)
            await waiter.wait_for_line(
                lambda line: '"run_wait_started"' in line and run_id in line, timeout_s=10
            )
            assert not waited  # it waits: the run has not ended
            llm.release()
        assert waited[0]["status"] == "completed"
        assert waited[0]["result"]["answer"] == "late"
        here = await started[index][1].get(f"/runs/{run_id}/wait", params={"timeout_s": 10})
        assert here.json()["status"] == "completed"


async def test_cancel_on_the_replica_that_does_not_execute_the_run_stops_it_within_2_s(
    tmp_path: Path, shared_url: str
) -> None:
    async with replicas(tmp_path, shared_url) as started:
        apps = [app for app, _ in started]
        run_id = await start_run(started[0][1], HANGING)
        await wait_status(started[1][1], run_id, "running")
        other = started[1 - await executor(apps, run_id)][1]
        with anyio.fail_after(2):
            response = await other.post(f"/runs/{run_id}/cancel")
            assert response.status_code == 202, response.text
            assert response.json()["status"] == "cancelled"
        streamed = await follow(other, run_id)
        assert_one_terminal_at_the_end(streamed, "run.cancelled")
        assert seqs(streamed) == list(range(1, len(streamed) + 1))


async def test_a_queued_run_is_cancelled_from_either_replica_at_once(
    tmp_path: Path, shared_url: str
) -> None:
    limits = {"FINISHLINE_MAX_CONCURRENT_RUNS": "1"}
    async with replicas(tmp_path, shared_url, **limits) as [(_, a), (_, b)]:
        busy = [await start_run(a, HANGING), await start_run(b, HANGING)]
        for run_id in busy:
            await wait_status(a, run_id, "running")
        queued = await start_run(a, HANGING)
        assert (await b.get(f"/runs/{queued}")).json()["status"] == "queued"
        response = await b.post(f"/runs/{queued}/cancel")
        assert response.status_code == 202
        assert response.json()["status"] == "cancelled"
        assert_one_terminal_at_the_end(await follow(a, queued), "run.cancelled")
        for run_id in busy:
            assert (await b.post(f"/runs/{run_id}/cancel")).json()["status"] == "cancelled"


async def test_the_queue_cap_counts_the_whole_cluster(tmp_path: Path, shared_url: str) -> None:
    limits = {"FINISHLINE_MAX_CONCURRENT_RUNS": "1", "FINISHLINE_MAX_QUEUED_RUNS": "1"}
    async with replicas(tmp_path, shared_url, **limits) as [(_, a), (_, b)]:
        busy = []
        for client in (a, b):  # each claimed before the next is posted: the queue is empty
            busy.append(await start_run(client, HANGING))
            await wait_status(a, busy[-1], "running")  # one on each replica: no slot is free
        queued = await start_run(a, HANGING)
        refused = await b.post("/runs", json=HANGING)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["type"] == "queue_full"
        await a.post(f"/runs/{busy[0]}/cancel")  # a slot frees: the queued run is claimed
        await wait_status(b, queued, "running")
        for run_id in (busy[1], queued):
            assert (await b.post(f"/runs/{run_id}/cancel")).json()["status"] == "cancelled"


async def test_one_idempotency_key_posted_concurrently_to_both_replicas_makes_one_run(
    tmp_path: Path, shared_url: str
) -> None:
    body = scripted(finish("once"))
    async with replicas(tmp_path, shared_url) as [(_, a), (_, b)]:
        answers: list[httpx.Response] = []

        async def post(client: httpx.AsyncClient) -> None:
            answers.append(await client.post("/runs", json=body, headers={"Idempotency-Key": "k"}))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for index in range(10):
                    tg.start_soon(post, (a, b)[index % 2])
        assert {r.status_code for r in answers} <= {200, 202}, [r.text for r in answers]
        assert len({r.json()["id"] for r in answers}) == 1
        assert len((await b.get("/runs")).json()["runs"]) == 1


async def test_a_stream_token_made_on_one_replica_works_on_the_other(
    tmp_path: Path, shared_url: str
) -> None:
    keys = {"FINISHLINE_API_KEYS": "key-1"}
    auth = {"Authorization": "Bearer key-1"}
    async with replicas(tmp_path, shared_url, **keys) as [(_, a), (_, b)]:
        run_id = await start_run(a, scripted(finish("ok")), headers=auth)
        token = (await a.post(f"/runs/{run_id}/stream-token", headers=auth)).json()["token"]
        streamed = await follow(b, run_id, query=f"?token={token}")
        assert_one_terminal_at_the_end(streamed, "run.completed")


async def test_a_replica_on_a_shared_store_without_a_token_secret_refuses_to_start(
    tmp_path: Path, shared_url: str
) -> None:
    env = replica_env(shared_url)
    del env["FINISHLINE_TOKEN_SECRET"]
    with pytest.raises(AppProcessError) as failed:
        async with AppProcess(tmp_path, env):
            pass
    assert "FINISHLINE_TOKEN_SECRET" in str(failed.value)


async def test_a_runs_webhook_is_delivered_once_by_one_replica(
    tmp_path: Path, shared_url: str
) -> None:
    hosts = {"FINISHLINE_HTTP_TOOL_ALLOW_HOSTS": "127.0.0.1"}
    async with LocalEndpoints() as receiver, replicas(tmp_path, shared_url, **hosts) as started:
        (_, a), (_, b) = started
        body = scripted(finish("hooked"), webhook=receiver.url("/hook/once"))
        run_id = await start_run(a, body)
        await receiver.wait_for_hooks("once", 1, timeout_s=10)
        run = await wait_for_run(b, run_id, lambda r: bool(r["webhook"]["delivered"]))
        (attempt,) = run["webhook"]["attempts"]
        assert attempt["status_code"] == 200
        (delivered,) = receiver.hooks["once"]
        assert (delivered["id"], delivered["status"]) == (run_id, "completed")


# -- leases and takeover --------------------------------------------------------------------

LEASE_S = 2.0


def calculator_reply(expression: str) -> FakeReply:
    return FakeReply(
        content=f"compute {expression}",
        tool_calls=[FakeToolCall("calculator", {"expression": expression})],
    )


async def test_a_run_whose_replica_is_killed_is_taken_over_and_ends_normally(
    tmp_path: Path, shared_url: str
) -> None:
    replies = [
        calculator_reply("2+3"),
        FakeReply(content="thinking it over", hang=True),  # in flight when its replica dies
        FakeReply.finish("5"),
    ]
    async with (
        FakeLLMServer(replies) as llm,
        replicas(
            tmp_path, shared_url, FINISHLINE_LLM_BASE_URL=llm.base_url, FINISHLINE_LEASE_S="2"
        ) as started,
    ):
        apps = [app for app, _ in started]
        run_id = await start_run(started[0][1], {"task": "add", "tools": ["calculator"]})
        await llm.wait_for_requests(2, timeout_s=10)  # step 2's LLM call is in flight
        index = await executor(apps, run_id)
        survivor = started[1 - index][1]
        before: list[SSE] = []
        with anyio.fail_after(10):
            async for event in sse_events(survivor, f"/runs/{run_id}/events"):
                before.append(event)
                if event.event == "observation":
                    break
        apps[index].kill()
        killed = anyio.current_time()
        after = await follow(
            survivor, run_id, headers={"Last-Event-ID": str(before[-1].id)}, timeout_s=20
        )
        recovered = [e for e in after if e.event == "run.recovered"]
        assert len(recovered) == 1, [e.event for e in after]
        assert recovered[0].data["attempt"] == 1
        assert anyio.current_time() - killed < LEASE_S + 5
        streamed = before + after
        assert seqs(streamed) == list(range(1, len(streamed) + 1))
        assert_one_terminal_at_the_end(streamed, "run.completed")
        assert streamed[-1].data["result"]["answer"] == "5"
        assert [e["seq"] for e in await stored_events(survivor, run_id)] == seqs(streamed)


async def test_a_replica_paused_past_its_lease_cannot_write_once_it_resumes(
    tmp_path: Path, shared_url: str
) -> None:
    replies = [FakeReply(content="slow", hang=True), FakeReply.finish("done")]
    async with (
        FakeLLMServer(replies) as llm,
        replicas(
            tmp_path, shared_url, FINISHLINE_LLM_BASE_URL=llm.base_url, FINISHLINE_LEASE_S="2"
        ) as started,
    ):
        apps = [app for app, _ in started]
        run_id = await start_run(started[0][1], {"task": "wait"})
        await llm.wait_for_requests(1, timeout_s=10)
        index = await executor(apps, run_id)
        paused, survivor = apps[index], started[1 - index][1]
        paused.send_signal(signal.SIGSTOP)
        try:
            streamed = await follow(survivor, run_id, timeout_s=20)  # taken over, ended
        finally:
            paused.send_signal(signal.SIGCONT)
        assert_one_terminal_at_the_end(streamed, "run.completed")
        llm.release()  # the paused replica's call answers now: it must not write
        await paused.wait_for_log("run_given_up", timeout_s=10)
        assert [e["seq"] for e in await stored_events(survivor, run_id)] == seqs(streamed)
        run = (await survivor.get(f"/runs/{run_id}")).json()
        assert (run["status"], run["result"]["answer"]) == ("completed", "done")

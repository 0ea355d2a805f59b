"""A2A across replicas (DESIGN §17 with §8): two uvicorn processes on one real redis-server.
The task store is the run store: a task sent on one replica is read, streamed, decided,
continued and cancelled on the other."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from a2a.types import CancelTaskRequest, GetTaskRequest, ListTasksRequest, SubscribeToTaskRequest

from tests.a2a.kit import (
    AGENTS,
    HANGING,
    TIMEOUT_S,
    calculate,
    data_parts,
    decisions,
    finish,
    finishline_of,
    open_client,
    resolve_card,
    scripted,
    send,
    state_name,
    states,
    stream,
    text,
)
from tests.e2e.test_replicas import replica_env
from tests.fakes.process import AppProcess

pytestmark = pytest.mark.e2e

START_TIMEOUT_S = 60
"""A replica with agent profiles imports the A2A SDK as it starts: on the loaded 2-core CI
machine, two starting at once take longer than the usual bound."""


@asynccontextmanager
async def replicas(
    tmp_path: Path, redis_url: str
) -> AsyncIterator[list[tuple[AppProcess, httpx.AsyncClient]]]:
    """Two replicas with the test profiles on one Redis, started at once."""
    env = replica_env(redis_url, FINISHLINE_AGENTS=json.dumps(AGENTS))
    apps = []
    for index in range(2):
        (tmp_path / f"replica{index}").mkdir()
        apps.append(AppProcess(tmp_path / f"replica{index}", env, start_timeout_s=START_TIMEOUT_S))
    async with AsyncExitStack() as stack:

        async def start(app: AppProcess) -> None:
            stack.push_async_exit(app.__aexit__)
            await app.__aenter__()

        async with anyio.create_task_group() as tg:
            for app in apps:
                tg.start_soon(start, app)
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(timeout=TIMEOUT_S)) for _ in apps
        ]
        yield list(zip(apps, clients, strict=True))


async def test_a_task_sent_on_one_replica_is_read_followed_and_cancelled_on_the_other(
    tmp_path: Path, redis_url: str
) -> None:
    async with (
        replicas(tmp_path, redis_url) as [(a, http_a), (b, http_b)],
        AsyncExitStack() as stack,
    ):
        on_a = await open_client(
            stack, await resolve_card(http_a, a.url("/a2a/calc")), streaming=False, polling=True
        )
        card_b = await resolve_card(http_b, b.url("/a2a/calc"))
        on_b = await open_client(stack, card_b, streaming=False)
        watching_b = await open_client(stack, card_b)

        sent = await send(on_a, text("hang"), finishline=scripted(HANGING))
        watched = watching_b.subscribe(SubscribeToTaskRequest(id=sent.id))
        with anyio.fail_after(TIMEOUT_S):
            first = await anext(watched)
            if state_name(first.task.status.state) != "TASK_STATE_WORKING":
                async for response in watched:  # until a replica has started it
                    if states([response]) == ["TASK_STATE_WORKING"]:
                        break
            got = await on_b.get_task(GetTaskRequest(id=sent.id))
            listed = await on_b.list_tasks(ListTasksRequest())
            cancelled = await on_b.cancel_task(CancelTaskRequest(id=sent.id))
            rest = [r async for r in watched]
        seen_on_a = await on_a.get_task(GetTaskRequest(id=sent.id))

    assert first.task.id == sent.id
    assert got.id == sent.id
    assert [t.id for t in listed.tasks] == [sent.id]
    assert state_name(cancelled.status.state) == "TASK_STATE_CANCELED"
    assert states(rest)[-1] == "TASK_STATE_CANCELED"
    assert state_name(seen_on_a.status.state) == "TASK_STATE_CANCELED"


async def test_a_task_waits_on_one_replica_is_decided_and_continued_on_the_other(
    tmp_path: Path, redis_url: str
) -> None:
    async with (
        replicas(tmp_path, redis_url) as [(a, http_a), (b, http_b)],
        AsyncExitStack() as stack,
    ):
        on_a = await open_client(
            stack, await resolve_card(http_a, a.url("/a2a/ops")), streaming=False
        )
        on_b = await open_client(stack, await resolve_card(http_b, b.url("/a2a/ops")))
        waiting = await send(on_a, text("2+3?"), finishline=scripted(calculate("2+3"), finish("5")))
        (call,) = data_parts(waiting.status.message.parts)[0]["pending_approvals"]
        resumed = await stream(
            on_b, decisions({"call_id": call["call_id"], "approve": True}, task_id=waiting.id)
        )
        follow_up = await send(
            on_a, text("and 3+4?", context_id=waiting.context_id), finishline=scripted(finish("7"))
        )

    assert state_name(waiting.status.state) == "TASK_STATE_INPUT_REQUIRED"
    assert states(resumed)[-1] == "TASK_STATE_COMPLETED"
    assert finishline_of(follow_up)["previous_run_id"] == waiting.id
    assert state_name(follow_up.status.state) == "TASK_STATE_COMPLETED"

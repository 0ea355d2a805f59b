"""A run's wait is an event, and one follow loop reads it (DESIGN §19), on every store: a
follower that stops at a wait (`Until.WAIT`) stops at the run's `run.waiting`, live; a native
stream (`GET /runs/{id}/events`) carries it and goes on to the terminal event; a follower
that joins a run waiting already gets that wait again (`Until.WAIT`) or follows it past it
(`Until.NEXT_WAIT`); a run stored waiting by a version before waits were events is followed
as well (start-up logs its wait)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from app.engine.events import EventType
from app.runs.follow.follower import Until
from app.runs.manager import RunManager
from app.runs.records import Event, RunStatus
from app.runs.stores.sqlite import SqliteRunStore
from tests.api.kit import app_with_state, create, scripted, settings, wait_ended
from tests.fakes.service import read_sse, served_app

BOUND_S = 20  # a failure bound, not a wait

CALL = {
    "content": "computing",
    "delay_s": 0.3,  # the follower is attached while the run is in its first LLM call
    "tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "6*7"}}],
}
FINISH = {"tool_calls": [{"name": "task_finished", "arguments": {"answer": "42"}}]}


def approving(*replies: dict[str, Any]) -> dict[str, Any]:
    return scripted(*replies, tools=["calculator"], approval={"tools": ["calculator"]})


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        return url
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


async def followed(manager: RunManager, run_id: str, after: int = 0, **kw: Any) -> list[Event]:
    events: list[Event] = []
    with anyio.fail_after(BOUND_S):
        async for batch in manager.follow(run_id, None, after, **kw):
            events += batch
    return events


async def decide(client: httpx.AsyncClient, run_id: str) -> None:
    body = {"decisions": [{"call_id": "c1", "approve": True}]}
    answer = await client.post(f"/runs/{run_id}/approvals", json=body)
    assert answer.status_code == 202, answer.text


async def test_a_waiting_run_followed_live_stops_at_its_run_waiting(store_url: str) -> None:
    async with app_with_state(settings(store_url=store_url)) as (client, state):
        manager: RunManager = state["manager"]
        run = await create(client, approving(CALL, FINISH))
        events = await followed(manager, run["id"], until=Until.WAIT)
        stored = (await client.get(f"/runs/{run['id']}")).json()

    types = [e.type for e in events]
    assert types[-1] == EventType.RUN_WAITING
    assert types.index(EventType.APPROVAL_REQUESTED) < types.index(EventType.RUN_WAITING)
    (pending,) = events[-1].data["pending"]
    assert pending["call_id"] == "c1"
    assert pending["tool"] == "calculator"
    assert pending["arguments"] == {"expression": "6*7"}
    assert stored["status"] == "requires_action"  # the record first, then its event


async def test_the_native_stream_carries_the_wait_and_goes_on_to_the_end(store_url: str) -> None:
    async with served_app(settings(store_url=store_url)) as (_, client):  # a live stream
        run = await create(client, approving(CALL, FINISH))
        seen: list[str] = []
        with anyio.fail_after(BOUND_S):
            async with client.stream("GET", f"/runs/{run['id']}/events") as response:
                async for event in read_sse(response):
                    seen.append(str(event.event))
                    if event.event == "run.waiting":
                        waiting = (await client.get(f"/runs/{run['id']}")).json()
                        assert waiting["status"] == "requires_action"
                        await decide(client, run["id"])

    assert "run.waiting" in seen
    assert seen[-1] == "run.completed"
    assert seen.index("run.waiting") < seen.index("approval.decided")


async def test_a_follower_joining_a_waiting_run_gets_its_wait_or_follows_it_past(
    store_url: str,
) -> None:
    async with app_with_state(settings(store_url=store_url)) as (client, state):
        manager: RunManager = state["manager"]
        run = await create(client, approving(CALL, FINISH))
        waited = (await followed(manager, run["id"], until=Until.WAIT))[-1]
        again = await followed(manager, run["id"], waited.seq, until=Until.WAIT)
        past: list[Event] = []

        async def follow_past() -> None:
            past.extend(await followed(manager, run["id"], waited.seq, until=Until.NEXT_WAIT))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(follow_past)
            await decide(client, run["id"])
        await wait_ended(client, run["id"])

    assert again == [waited]
    assert past[0].type == EventType.APPROVAL_DECIDED
    assert past[-1].type == EventType.RUN_COMPLETED


async def test_a_run_stored_waiting_before_waits_were_events_is_followed_to_its_wait(
    tmp_path: Path,
) -> None:
    """A SQLite file a version before issue #35 left with a waiting run (its log has no
    `run.waiting`): after the restart the follower stops at the wait start-up logged, and a
    decision resumes the run as ever."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with app_with_state(settings(store_url=url)) as (client, state):
        manager: RunManager = state["manager"]
        run = await create(client, approving(CALL, FINISH))
        await followed(manager, run["id"], until=Until.WAIT)
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    await store.open()
    try:  # as the older version stored it: the wait not logged
        await store._write(
            lambda conn: conn.execute(
                "DELETE FROM events WHERE run_id = ? AND type = ?",
                (run["id"], EventType.RUN_WAITING.value),
            )
        )
        assert EventType.RUN_WAITING not in [e.type for e in await store.read(run["id"])]
    finally:
        await store.close()

    async with app_with_state(settings(store_url=url)) as (client, state):
        manager = state["manager"]
        events = await followed(manager, run["id"], until=Until.WAIT)
        assert events[-1].type == EventType.RUN_WAITING
        assert [p["call_id"] for p in events[-1].data["pending"]] == ["c1"]
        await decide(client, run["id"])
        ended = await wait_ended(client, run["id"])

    assert ended["status"] == RunStatus.COMPLETED


async def test_a_wait_that_is_over_does_not_stop_a_follower(store_url: str) -> None:
    """A replay from the start of a run that waited and went on passes its wait to its end;
    so does a follower that reaches a wait decided meanwhile."""
    async with app_with_state(settings(store_url=store_url)) as (client, state):
        manager: RunManager = state["manager"]
        run = await create(client, approving(CALL, FINISH))
        waited = (await followed(manager, run["id"], until=Until.WAIT))[-1]
        await decide(client, run["id"])  # decided before the next follower reaches the wait
        passed = await followed(manager, run["id"], waited.seq - 1, until=Until.WAIT)
        await wait_ended(client, run["id"])
        replayed = await followed(manager, run["id"], until=Until.WAIT)

    assert passed[0] == waited
    assert passed[-1].type == EventType.RUN_COMPLETED
    assert [e.type for e in replayed].count(EventType.RUN_WAITING) == 1
    assert replayed[-1].type == EventType.RUN_COMPLETED

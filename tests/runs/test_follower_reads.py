"""`RunFollower.follow` given the run as its caller just read it (`seen`: the events route and
a streamed POST read it to answer 404 first) reads the record no more: a run not running here
is followed live while it has not ended, its stored log once it has."""

from __future__ import annotations

from typing import Any

from app.engine.events import EventType
from app.runs.follow.follower import RunFollower
from app.runs.live import LiveRuns
from app.runs.records import RunRecord, RunStatus
from app.runs.stores.memory import MemoryRunStore
from tests.runs.test_store_contract import record


async def follow_counting(seen_status: RunStatus) -> tuple[list[int], int]:
    """The seqs a follower given the run gets, and the reads of its record meanwhile."""
    store = MemoryRunStore()
    await store.open()
    run = record()
    await store.create(run)
    await store.append(run.id, EventType.THOUGHT, 1, {"content": "x"})
    await store.append(run.id, EventType.RUN_COMPLETED, 1, {"answer": "a"})
    reads = 0
    get = store.get

    async def counted(run_id: str) -> RunRecord | None:
        nonlocal reads
        reads += 1
        return await get(run_id)

    store.get = counted  # type: ignore[method-assign]

    async def visible(run_id: str, owner: str | None, **_: Any) -> RunRecord:
        found = await store.get(run_id)
        assert found is not None
        return found

    follower = RunFollower(store=store, live=LiveRuns(1), visible=visible)
    seen = run.model_copy(update={"status": seen_status})
    seqs = [e.seq async for batch in follower.follow(run.id, None, seen=seen) for e in batch]
    return seqs, reads


async def test_a_follower_given_a_run_not_ended_follows_it_without_reading_it() -> None:
    assert await follow_counting(RunStatus.QUEUED) == ([1, 2], 0)


async def test_a_follower_given_an_ended_run_reads_its_log_and_not_its_record() -> None:
    assert await follow_counting(RunStatus.COMPLETED) == ([1, 2], 0)

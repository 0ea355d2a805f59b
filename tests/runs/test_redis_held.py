"""A run held behind another in the cluster (a thread's enqueued run, DESIGN §19) is released
into the queue once, by the replica that ends the run it waits for, or, if that replica died
first, by any replica's sweep once it sees that run ended."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.runs.records import RunRecord, RunStatus, new_run_id
from app.runs.replicas.redis_cluster import RedisCoordinator
from app.runs.stores.redis_store import RedisRunStore


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisRunStore]:
    made = RedisRunStore(redis_url)
    await made.open()
    try:
        yield made
    finally:
        await made.close()


def record(status: RunStatus) -> RunRecord:
    return RunRecord.model_validate(
        {
            "id": new_run_id(),
            "status": status,
            "request": {"task": "t"},
            "model": "scripted",
            "settings": {},
        }
    )


async def queued_runs(store: RedisRunStore) -> list[str]:
    entries = await store.redis.xrange(store.prefix + "queue")
    return [fields["run"] for _, fields in entries]


async def test_the_sweep_releases_a_run_held_behind_one_that_ended_once(
    store: RedisRunStore,
) -> None:
    coordinator = RedisCoordinator(store, replica="r1")
    before, held = record(RunStatus.RUNNING), record(RunStatus.QUEUED)
    for run in (before, held):
        await store.create(run)
    await coordinator.hold(held.id, before.id)
    await coordinator._release_stale_holds()
    assert await queued_runs(store) == []  # the run it waits for still runs

    before.status = RunStatus.COMPLETED  # ended by a replica that died before releasing
    await store.save(before)
    await coordinator._release_stale_holds()
    await coordinator._release_stale_holds()
    await coordinator.release_held(before.id)  # (the ending replica, late)
    assert await queued_runs(store) == [held.id]


async def test_a_run_held_behind_one_that_is_gone_is_released(store: RedisRunStore) -> None:
    coordinator = RedisCoordinator(store, replica="r1")
    held = record(RunStatus.QUEUED)
    await store.create(held)
    await coordinator.hold(held.id, "run_01GONE0000000000000000000")
    await coordinator._release_stale_holds()
    assert await queued_runs(store) == [held.id]

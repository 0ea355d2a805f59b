"""A run held behind another in the cluster (a thread's enqueued run, DESIGN §19) is released
into the queue once, by the replica that ends the run it waits for, or, if that replica died
first, by any replica's sweep once it sees that run ended. A replica's sweep never takes over a
run it holds itself. A run made but in no queue (its POST's replica died between the two
writes, or its claimer before starting it) is queued by a sweep once older than a POST. A
run's queueing takes its POST's place in the same step."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from app.runs.records import RunRecord, RunStatus, new_run_id, run_id_at
from app.runs.replicas.redis_cluster import ADMIT_HOLD_MS, RedisCoordinator
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


class Member:
    """A replica with free slots that records the runs it was handed to take over."""

    def __init__(self) -> None:
        self.slot_freed = asyncio.Event()
        self.taken: list[tuple[str, int]] = []

    def free_slots(self) -> int:
        return 4

    async def claimed(self, run_id: str) -> None:
        return None

    def cancel_asked(self, run_id: str) -> None:
        return None

    async def taken_over(self, run_id: str, attempt: int) -> None:
        self.taken.append((run_id, attempt))

    async def deliver_webhook(self, run_id: str) -> None:
        return None


async def test_a_replica_whose_own_lease_lapsed_never_takes_its_run_over_itself(
    store: RedisRunStore,
) -> None:
    # the replica executing a run lost its lease key (Redis was away, or it paused, past the
    # lease): its own sweep must not take the run over (a second execution in one process,
    # under a token the first one's writes would pass too); another replica's does
    running = record(RunStatus.RUNNING)
    await store.create(running)
    executing, other = RedisCoordinator(store, replica="r1"), RedisCoordinator(store, replica="r2")
    assert await executing.claim(running.id)
    await store.redis.delete(store.prefix + "owner:" + running.id)  # the lease lapsed
    mine, theirs = Member(), Member()

    await executing._take_over_lapsed(mine)
    assert mine.taken == []
    await other._take_over_lapsed(theirs)
    assert theirs.taken == [(running.id, 1)]


def made_at(status: RunStatus, seconds_ago: float) -> RunRecord:
    run = record(status)
    run.id = run_id_at(time.time() - seconds_ago)[:-4] + run.id[-4:]  # (made then)
    return run


async def test_a_run_made_but_in_no_queue_is_queued_once_older_than_a_post_takes(
    store: RedisRunStore,
) -> None:
    # a POST stores the run, then queues it: its replica died (or Redis went away) between,
    # or a replica claimed it (its lease key set, the entry gone) and died before starting it
    coordinator = RedisCoordinator(store, replica="r1", lease_s=60)
    old = ADMIT_HOLD_MS / 1000 + 5
    stranded, claimed, _fresh, held, queued, running = runs = [
        made_at(RunStatus.QUEUED, old),
        made_at(RunStatus.QUEUED, old),
        made_at(RunStatus.QUEUED, 0),  # its POST is under way
        made_at(RunStatus.QUEUED, old),
        made_at(RunStatus.QUEUED, old),
        made_at(RunStatus.RUNNING, old),
    ]
    for run in runs:
        await store.create(run)
    await coordinator.enqueue(queued.id)
    await coordinator.hold(held.id, running.id)
    assert await coordinator.claim(claimed.id)  # its lease key: it starts here
    assert await queued_runs(store) == [queued.id]

    await coordinator._queue_stranded()
    assert await queued_runs(store) == [queued.id, stranded.id]

    await store.redis.delete(store.prefix + "owner:" + claimed.id)  # its claimer died
    coordinator._stranded_at = 0.0  # (the next sweep looks again)
    await coordinator._queue_stranded()
    assert await queued_runs(store) == [queued.id, stranded.id, claimed.id]


async def test_a_runs_queueing_takes_its_posts_place_in_one_step(store: RedisRunStore) -> None:
    coordinator = RedisCoordinator(store, replica="r1")
    ticket, queued = await coordinator.reserve(cap=10, busy=True)
    assert ticket is not None
    assert queued == 0
    run = record(RunStatus.QUEUED)
    await store.create(run)

    await coordinator.enqueue(run.id, ticket)

    assert await store.redis.zrange(store.prefix + "admitting", 0, -1) == []
    assert await queued_runs(store) == [run.id]
    _, counted = await coordinator.reserve(cap=10, busy=True)
    assert counted == 1  # once: the run, not its place too

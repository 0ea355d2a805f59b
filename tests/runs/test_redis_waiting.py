"""Waiting runs on Redis (app/runs/redis_waiting.py), on a real redis-server: a change is a
compare-and-set, so a change that raced another is worked out again on the record the other
wrote (the race is made deterministic: the first round's changer writes the record through a
second connection between the read and the write); a suspension gives the lease up; the last
decision queues the run in the cluster's stream, once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from app.runs.records import (
    ApprovalDecision,
    ApprovalState,
    PendingApproval,
    RunRecord,
    RunStatus,
    new_run_id,
    utcnow,
)
from app.runs.replicas.redis_waiting import RedisWaitingRuns
from app.runs.stores.redis_store import RedisRunStore
from app.runs.waiting import Changer, WaitChange, waiting_event
from tests.fakes.redis_server import RedisServer


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisRunStore]:
    made = RedisRunStore(redis_url)
    await made.open()
    try:
        yield made
    finally:
        await made.close()


def waiting_record(*calls: str) -> RunRecord:
    now = utcnow()
    return RunRecord.model_validate(
        {
            "id": new_run_id(),
            "request": {"task": "t", "model": "scripted", "model_script": []},
            "model": "scripted",
            "settings": {"approval_timeout_s": 1},
            "status": RunStatus.RUNNING,
            "approval": ApprovalState(
                pending=[
                    PendingApproval(call_id=c, tool="deploy", arguments={}, requested_at=now)
                    for c in calls
                ],
                waiting_since=now - timedelta(seconds=10),
            ),
        }
    )


def decide(call_id: str, approved: bool) -> Changer:
    def changer(record: RunRecord | None, held: list[str]) -> WaitChange:
        assert record is not None
        assert record.approval is not None
        if call_id not in {p.call_id for p in record.approval.undecided()}:
            raise LookupError(f"{call_id} is decided already")
        record.approval.decided.append(ApprovalDecision(call_id=call_id, approved=approved))
        if record.approval.undecided():
            return WaitChange(record)
        record.status = RunStatus.QUEUED
        return WaitChange(record, requeue=True)

    return changer


async def suspended(store: RedisRunStore, waiting: RedisWaitingRuns, *calls: str) -> RunRecord:
    record = waiting_record(*calls)
    await store.create(record)
    await store.redis.set(store.prefix + "owner:" + record.id, "token-a")
    store.hold(record.id, "token-a")
    record.status = RunStatus.REQUIRES_ACTION
    await waiting.suspend(record, ["held one", "held two"], waiting_event(record, 1))
    return record


async def test_suspending_gives_the_lease_up_and_arms_the_deadline(
    store: RedisRunStore,
) -> None:
    waiting = RedisWaitingRuns(store, queue_key=store.prefix + "queue", poll_s=0)
    record = await suspended(store, waiting, "c1")

    assert not await store.redis.exists(store.prefix + "owner:" + record.id)
    assert store.fence_of(record.id) == ""
    stored = await store.get(record.id)
    assert stored is not None
    assert stored.status == RunStatus.REQUIRES_ACTION
    assert await store.redis.lrange(store.prefix + "inbox:" + record.id, 0, -1) == [
        "held one",
        "held two",
    ]
    assert await waiting.due() == [record.id]  # its 1 s approval timeout passed


async def test_a_change_that_raced_another_is_worked_out_again_on_the_new_record(
    store: RedisRunStore, redis_server: RedisServer, redis_url: str
) -> None:
    waiting = RedisWaitingRuns(store, queue_key=store.prefix + "queue")
    record = await suspended(store, waiting, "c1", "c2")
    rounds: list[int] = []
    rival = decide("c1", False)

    def racing(current: RunRecord | None, held: list[str]) -> WaitChange:
        rounds.append(1)
        if len(rounds) == 1:  # another replica decides c1 between this read and this write
            assert current is not None
            other = rival(current.model_copy(deep=True), held).record
            with redis_server.client() as client:
                key = store.prefix + "run:" + record.id
                client.hset(key, "record", other.model_dump_json())
        return decide("c1", True)(current, held)

    with pytest.raises(LookupError, match="c1 is decided already"):
        await waiting.change(record.id, racing)

    assert len(rounds) == 2
    stored = await store.get(record.id)
    assert stored is not None
    assert stored.approval is not None
    assert [(d.call_id, d.approved) for d in stored.approval.decided] == [("c1", False)]


async def test_the_last_decision_queues_the_run_in_the_cluster_stream_once(
    store: RedisRunStore,
) -> None:
    queue = store.prefix + "queue"
    waiting = RedisWaitingRuns(store, queue_key=queue)
    record = await suspended(store, waiting, "c1", "c2")

    await waiting.change(record.id, decide("c1", True))
    assert await store.redis.xlen(queue) == 0
    await waiting.change(record.id, decide("c2", True))
    with pytest.raises(LookupError):  # not waiting any more: nothing is written
        await waiting.change(record.id, decide("c2", True))

    entries = await store.redis.xrange(queue)
    assert [fields for _, fields in entries] == [{"run": record.id}]
    assert await store.redis.zscore(store.prefix + "approvals", record.id) is None
    stored = await store.get(record.id)
    assert stored is not None
    assert stored.status == RunStatus.QUEUED

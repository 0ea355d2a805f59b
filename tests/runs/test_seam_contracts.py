"""The contracts of the seams with two sides (`app.runs.backends.open_backend`), run against
each: this process's own (a memory store) and the replicas' (a real redis-server, a real
Postgres). Where a
run waits for a slot and starts (`Placement`), where its steering messages are kept
(`Inbox`), and where a run waiting for a person is (`WaitingRuns`): what the manager relies
on whichever side a deployment has. The runs execute in a `Runner` that records what it was
asked (a fake with the real interface: the placement cannot tell)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from app.engine.events import EventType
from app.engine.policies import StopReason
from app.engine.steps import RunError
from app.runs.backends import Backend, Capacity, ReplicaOptions, open_backend
from app.runs.errors import QueueFullError, RunAlreadyEndedError, TooManyMessagesError
from app.runs.live import ActiveRun
from app.runs.metrics import RunMetrics
from app.runs.recorder import RunRecorder
from app.runs.records import (
    ApprovalDecision,
    ApprovalState,
    PendingApproval,
    RunRecord,
    RunStatus,
    new_run_id,
    utcnow,
)
from app.runs.stores.memory import MemoryRunStore
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.redis_store import RedisRunStore
from app.runs.waiting import WaitChange, waiting_event

BOUND_S = 10  # a failure bound, not a wait


class RecordingRunner:
    """Starts nothing: marks the run executing, and remembers it."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.recorder = RunRecorder(
            store=backend.store,
            metrics=RunMetrics(),
            quotas=backend.quotas,
            max_event_content_chars=10_000,
            on_ended=lambda record: None,
        )
        self.started: list[str] = []
        self._changed = asyncio.Event()

    def start(self, active: ActiveRun) -> None:
        self.backend.live.executing(active)
        self.started.append(active.record.id)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def end_cancelled(self, active: ActiveRun) -> None:
        await self.recorder.end(active.record, StopReason.CANCELLED)

    async def fail(self, record: RunRecord, error: RunError) -> None:
        await self.recorder.end(record, StopReason.ERROR, error=error)

    def notify(self, record: RunRecord, event: str) -> None:
        return None

    async def deliver_webhook(self, run_id: str) -> None:
        return None

    async def until_started(self, run_id: str) -> None:
        with anyio.fail_after(BOUND_S):
            while run_id not in self.started:
                await self._changed.wait()

    def finish(self, run_id: str) -> None:
        """The run's task is over (as `Execution` ends one)."""
        active = self.backend.live.get(run_id)
        assert active is not None
        self.backend.live.drop(active)
        active.done.set()
        self.backend.placement.release(run_id)


@dataclass
class Side:
    backend: Backend
    runner: RecordingRunner

    @property
    def store(self) -> MemoryRunStore | RedisRunStore | PostgresRunStore:
        store = self.backend.store
        assert isinstance(store, MemoryRunStore | RedisRunStore | PostgresRunStore)
        return store

    async def admitted(self, **fields: object) -> RunRecord:
        """A new run, stored and queued as admission does it."""
        async with self.backend.placement.reserve():
            run = record(**fields)
            await self.store.create(run)
            return await self.backend.placement.enqueue(run)


def record(**fields: object) -> RunRecord:
    return RunRecord.model_validate(
        {
            "id": new_run_id(),
            "request": {"task": "t", "model": "scripted", "model_script": []},
            "model": "scripted",
            "settings": {"approval_timeout_s": 1},
            **fields,
        }
    )


def waiting(*calls: str, past_deadline: bool = False) -> RunRecord:
    now = utcnow()
    since = now - timedelta(seconds=10) if past_deadline else now
    return record(
        status=RunStatus.RUNNING,
        approval=ApprovalState(
            pending=[
                PendingApproval(call_id=c, tool="deploy", arguments={}, requested_at=now)
                for c in calls
            ],
            waiting_since=since,
        ),
    )


@pytest.fixture(params=["local", "replica", "postgres"])
async def side(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Side]:
    """A backend with one slot and a queue of two, its placement serving a runner."""
    store: MemoryRunStore | RedisRunStore | PostgresRunStore
    if request.param == "local":
        store = MemoryRunStore()
    elif request.param == "postgres":  # the replicas' side on a real Postgres
        store = PostgresRunStore(request.getfixturevalue("postgres_url"))
    else:
        store = RedisRunStore(request.getfixturevalue("redis_url"))
    await store.open()
    backend = open_backend(
        store,
        capacity=Capacity(max_concurrent_runs=1, max_queued_runs=2, max_pending_messages=2),
        metrics=RunMetrics(),
        replica=ReplicaOptions("replica-under-test"),
    )
    runner = RecordingRunner(backend)
    try:
        async with asyncio.TaskGroup() as tasks:
            backend.placement.serve(runner, tasks)
            listening = tasks.create_task(backend.inbox.listen())
            try:
                yield Side(backend, runner)
            finally:
                backend.live.draining = True
                await backend.placement.drain()
                backend.placement.stop()
                listening.cancel()
    finally:
        await store.close()


async def suspended(side: Side, run: RunRecord, held: list[str]) -> None:
    """Stored, then stored waiting for a person (as `ApprovalDesk.suspend` does it)."""
    await side.store.create(run)
    run.status = RunStatus.REQUIRES_ACTION
    await side.backend.waiting.suspend(run, held, waiting_event(run, 3))


# -- placement ----------------------------------------------------------------------------


async def test_a_run_starts_when_a_slot_is_free_and_the_next_when_it_is_released(
    side: Side,
) -> None:
    first = await side.admitted()
    await side.runner.until_started(first.id)
    second = await side.admitted()
    assert side.runner.started == [first.id]  # the one slot is taken
    side.runner.finish(first.id)
    await side.runner.until_started(second.id)
    assert side.runner.started == [first.id, second.id]


async def test_reserve_refuses_a_run_once_the_slots_and_the_queue_are_full(side: Side) -> None:
    first = await side.admitted()
    await side.runner.until_started(first.id)
    await side.admitted()
    await side.admitted()
    with pytest.raises(QueueFullError):
        async with side.backend.placement.reserve():
            pass


async def test_a_run_waiting_for_a_slot_is_cancelled_and_never_starts(side: Side) -> None:
    first = await side.admitted()
    await side.runner.until_started(first.id)
    queued = await side.admitted()
    active = side.backend.live.get(queued.id)
    if active is not None:  # queued in this process
        assert await side.backend.placement.cancel_waiting(active)
    else:  # queued in the cluster
        assert await side.backend.placement.cancel_elsewhere(queued) is not None
    stored = await side.store.get(queued.id)
    assert stored is not None
    assert stored.status == RunStatus.CANCELLED
    side.runner.finish(first.id)
    later = await side.admitted()
    await side.runner.until_started(later.id)
    assert queued.id not in side.runner.started


async def test_a_run_executing_here_is_not_cancelled_as_waiting(side: Side) -> None:
    run = await side.admitted()
    await side.runner.until_started(run.id)
    active = side.backend.live.get(run.id)
    assert active is not None
    assert not await side.backend.placement.cancel_waiting(active)


async def test_wait_returns_a_run_that_ended_or_waits_for_a_person_at_once(side: Side) -> None:
    ended = record(status=RunStatus.COMPLETED)
    asked = record(status=RunStatus.REQUIRES_ACTION)
    for run in (ended, asked):
        await side.store.create(run)
        with anyio.fail_after(BOUND_S):
            assert (await side.backend.placement.wait(run, timeout_s=60)).status == run.status


# -- inbox --------------------------------------------------------------------------------


async def test_messages_to_a_run_executing_here_reach_it_in_order(side: Side) -> None:
    run = await side.admitted()
    await side.runner.until_started(run.id)
    active = side.backend.live.get(run.id)
    assert active is not None
    for content in ("first", "second"):
        await side.backend.inbox.post(active.record, content)
    await side.backend.inbox.pull(active)
    assert active.take_messages() == ["first", "second"]


async def test_a_queued_run_holds_at_most_max_pending_messages(side: Side) -> None:
    first = await side.admitted()
    await side.runner.until_started(first.id)
    queued = await side.admitted()  # no slot: its messages wait with it
    await side.backend.inbox.post(queued, "one")
    await side.backend.inbox.post(queued, "two")
    with pytest.raises(TooManyMessagesError):
        await side.backend.inbox.post(queued, "three")


async def test_no_message_joins_a_run_that_took_its_last_or_ended(side: Side) -> None:
    run = await side.admitted()
    await side.runner.until_started(run.id)
    active = side.backend.live.get(run.id)
    assert active is not None
    await side.backend.inbox.post(active.record, "kept")
    active.inbox_closed = True
    left = [*active.take_messages(), *await side.backend.inbox.close(run.id)]
    assert left == ["kept"]
    with pytest.raises(RunAlreadyEndedError):
        await side.backend.inbox.post(active.record, "too late")
    ended = record(status=RunStatus.COMPLETED)
    await side.store.create(ended)
    with pytest.raises(RunAlreadyEndedError):
        await side.backend.inbox.post(ended, "after the end")


async def test_a_message_to_a_waiting_run_is_held_for_its_resume(side: Side) -> None:
    run = waiting("call-1")
    await suspended(side, run, ["before"])
    asked = await side.store.get(run.id)
    assert asked is not None
    assert asked.status == RunStatus.REQUIRES_ACTION
    await side.backend.inbox.post(asked, "while it waits")
    seen: list[list[str]] = []

    def look(found: RunRecord | None, held: list[str]) -> WaitChange | None:
        seen.append(held)
        return None

    await side.backend.waiting.change(run.id, look)
    assert seen == [["before", "while it waits"]]


# -- waiting runs -------------------------------------------------------------------------


def decide(call_id: str) -> object:
    def changer(found: RunRecord | None, held: list[str]) -> WaitChange | None:
        assert found is not None
        assert found.approval is not None
        if any(d.call_id == call_id for d in found.approval.decided):
            return None  # decided already
        found.approval.decided.append(ApprovalDecision(call_id=call_id, approved=True))
        return WaitChange(found)

    return changer


async def test_of_two_concurrent_decisions_on_one_call_one_is_written(side: Side) -> None:
    run = waiting("call-1", "call-2")
    await suspended(side, run, [])
    outcomes = await asyncio.gather(
        side.backend.waiting.change(run.id, decide("call-1")),  # type: ignore[arg-type]
        side.backend.waiting.change(run.id, decide("call-1")),  # type: ignore[arg-type]
    )
    assert sorted(o is None for o in outcomes) == [False, True]
    stored = await side.store.get(run.id)
    assert stored is not None
    assert stored.approval is not None
    assert [d.call_id for d in stored.approval.decided] == ["call-1"]


async def test_a_run_whose_calls_are_all_decided_is_queued_again_and_starts(side: Side) -> None:
    run = waiting("call-1")
    await suspended(side, run, ["held"])

    def decided(found: RunRecord | None, held: list[str]) -> WaitChange:
        assert found is not None
        assert found.approval is not None
        found.approval.decided.append(ApprovalDecision(call_id="call-1", approved=True))
        found.status = RunStatus.QUEUED
        found.approval.requeued_at = utcnow()
        return WaitChange(found, requeue=True)

    await side.backend.waiting.change(run.id, decided)
    await side.runner.until_started(run.id)
    assert side.runner.started.count(run.id) == 1


async def test_a_run_past_its_approval_deadline_is_due_and_counted_at_start_up(
    side: Side,
) -> None:
    run = waiting("call-1", past_deadline=True)
    await suspended(side, run, [])
    with anyio.fail_after(BOUND_S):
        assert await side.backend.waiting.due() == [run.id]
    assert await side.backend.waiting.rearm() == 1


# -- a wait is an event (DESIGN §19) --------------------------------------------------------


async def test_a_suspended_run_logs_its_wait_after_its_record_is_stored_waiting(
    side: Side,
) -> None:
    run = waiting("call-1", "call-2")
    await side.store.create(run)
    seen: list[RunStatus | None] = []

    async def watch() -> None:  # the record as a follower reads it once it sees the event
        async for event in side.store.subscribe(run.id):
            if event.type == EventType.RUN_WAITING:
                stored = await side.store.get(run.id)
                seen.append(stored.status if stored is not None else None)
                return

    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watch)
            run.status = RunStatus.REQUIRES_ACTION
            await side.backend.waiting.suspend(run, [], waiting_event(run, 3))
    (event,) = await side.store.read(run.id)
    assert event.type == EventType.RUN_WAITING
    assert event.step == 3
    assert [p["call_id"] for p in event.data["pending"]] == ["call-1", "call-2"]
    assert {"tool", "arguments", "requested_at"} <= set(event.data["pending"][0])
    assert seen == [RunStatus.REQUIRES_ACTION]


async def test_a_run_stored_waiting_without_its_wait_in_its_log_has_it_logged_once(
    side: Side,
) -> None:
    """A run a version before issue #35 stored waiting: start-up logs its wait, once, however
    many processes start together; a run whose wait is logged is left alone."""
    legacy = waiting("call-1")
    legacy.status = RunStatus.REQUIRES_ACTION
    await side.store.create(legacy)
    await side.store.append(legacy.id, EventType.RUN_STARTED, 0, {})
    await side.store.append(legacy.id, EventType.APPROVAL_REQUESTED, 1, {"call_id": "call-1"})
    logged = waiting("call-2")
    await suspended(side, logged, [])
    await asyncio.gather(side.backend.waiting.rearm(), side.backend.waiting.rearm())
    types = [e.type for e in await side.store.read(legacy.id)]
    assert types == [
        EventType.RUN_STARTED,
        EventType.APPROVAL_REQUESTED,
        EventType.RUN_WAITING,
    ]
    (waited,) = [e for e in await side.store.read(legacy.id) if e.type == EventType.RUN_WAITING]
    assert [p["call_id"] for p in waited.data["pending"]] == ["call-1"]
    assert [e.type for e in await side.store.read(logged.id)] == [EventType.RUN_WAITING]


# -- runs held behind another (a thread's enqueued run, DESIGN §19) ---------------------------


async def elsewhere(side: Side) -> RunRecord:
    """A run stored running that no slot here holds: what a held run waits for."""
    run = record(status=RunStatus.RUNNING)
    await side.store.create(run)
    return run


async def ended(side: Side, run: RunRecord) -> None:
    """The run ends (as the recorder ends one): stored terminal, then the placement told."""
    run.status = RunStatus.COMPLETED
    await side.store.save(run)
    side.backend.placement.ended(run)


async def held_behind(side: Side, behind: RunRecord) -> RunRecord:
    async with side.backend.placement.reserve():
        run = record()
        await side.store.create(run)
        return await side.backend.placement.hold(run, behind.id)


async def test_a_held_run_starts_once_the_run_it_waits_for_has_ended(side: Side) -> None:
    first = await elsewhere(side)
    held = await held_behind(side, first)
    probe = await side.admitted()  # queued after it: it starts, the held run does not
    await side.runner.until_started(probe.id)
    assert held.id not in side.runner.started
    side.runner.finish(probe.id)
    await ended(side, first)
    await side.runner.until_started(held.id)
    assert side.runner.started.count(held.id) == 1


async def test_a_run_held_behind_a_run_that_ended_starts_at_once(side: Side) -> None:
    first = await elsewhere(side)
    first.status = RunStatus.COMPLETED
    await side.store.save(first)
    held = await held_behind(side, first)
    await side.runner.until_started(held.id)


async def test_a_held_run_is_cancelled_where_it_waits_and_never_starts(side: Side) -> None:
    first = await elsewhere(side)
    held = await held_behind(side, first)
    active = side.backend.live.get(held.id)
    if active is not None:  # held in this process
        assert await side.backend.placement.cancel_waiting(active)
    else:  # held in the cluster
        assert await side.backend.placement.cancel_elsewhere(held) is not None
    stored = await side.store.get(held.id)
    assert stored is not None
    assert stored.status == RunStatus.CANCELLED
    await ended(side, first)
    probe = await side.admitted()
    await side.runner.until_started(probe.id)
    assert held.id not in side.runner.started


async def test_held_runs_count_as_queued(side: Side) -> None:
    """One slot and a queue of two: held runs (each behind a run elsewhere) fill it as queued
    ones do (one process: slots and queue; the cluster's queue: the queue)."""
    made = 0
    refused: QueueFullError | None = None
    for _ in range(4):
        try:
            await held_behind(side, await elsewhere(side))
        except QueueFullError as exc:
            refused = exc
            break
        made += 1
    assert refused is not None
    assert made in (2, 3)

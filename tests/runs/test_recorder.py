"""The recorder queues a run's events and goes on while the store makes them durable; it
waits for them where it matters: before a call that must not run twice can run (its action),
at a checkpoint, before the run waits for a person, at the end (its closing write queued
behind them, refused if one failed), and when too many are in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry

from app.engine.events import EventType
from app.engine.policies import StopReason
from app.engine.steps import Action, Checkpoint, Suspended, Thought, TokenDelta
from app.runs.metrics import RunMetrics
from app.runs.quotas.local import LocalQuotas
from app.runs.quotas.seam import QuotaLimits
from app.runs.recorder import MAX_UNSETTLED, RunRecorder
from app.runs.records import Event, RunRecord, RunStatus, new_run_id
from app.runs.store import WritesFailedError
from app.runs.stores.memory import MemoryRunStore

BOUND_S = 10  # a failure bound, not a wait


class HeldWrite:
    """A queued append's outcome that tells the store when somebody waits for it."""

    def __init__(self, future: asyncio.Future[Event], awaited: asyncio.Event) -> None:
        self.future, self.awaited = future, awaited

    def __await__(self) -> Generator[Any, None, Event]:
        self.awaited.set()
        return self.future.__await__()


class HeldStore:
    """A store whose queued appends stay pending until the test settles them."""

    def __init__(self) -> None:
        self.queued: list[tuple[str, asyncio.Future[Event]]] = []
        self.written: list[str] = []  # what was written at once (append, save_checkpoint)
        self.awaited = asyncio.Event()  # set when a queued append is waited for
        self.failures = 0  # queued writes failed (`fail`)
        self.closing: list[tuple[str, int]] = []  # closing writes queued: type, failures
        self.closed: list[str] = []  # closing writes made (`settle_all`)

    def write_failures(self) -> int:
        return self.failures

    async def append_closing(
        self,
        run_id: str,
        type: EventType,
        step: int,
        data: dict[str, Any],
        *,
        record: RunRecord,
        failures: int,
    ) -> Awaitable[Event]:
        future: asyncio.Future[Event] = asyncio.get_running_loop().create_future()
        self.queued.append((type, future))
        self.closing.append((type, failures))
        return HeldWrite(future, self.awaited)

    def fail(self, index: int, exc: Exception) -> None:
        self.queued[index][1].set_exception(exc)
        self.failures += 1

    async def append_soon(
        self, run_id: str, type: EventType, step: int, data: dict[str, Any]
    ) -> Awaitable[Event]:
        future: asyncio.Future[Event] = asyncio.get_running_loop().create_future()
        self.queued.append((type, future))
        return HeldWrite(future, self.awaited)

    async def waited_on(self) -> None:
        """Until the recorder waits for a queued append (then clear, for the next one)."""
        with anyio.fail_after(BOUND_S):
            await self.awaited.wait()
        self.awaited.clear()

    async def append(
        self, run_id: str, type: EventType, step: int, data: dict[str, Any], **_: Any
    ) -> Event:
        self.written.append(type)
        return Event(run_id, 0, type, 0.0, step, data)

    async def save_checkpoint(self, run_id: str, step: int, state: dict[str, Any]) -> None:
        self.written.append("checkpoint")

    async def save_checkpoint_soon(
        self, run_id: str, step: int, state: dict[str, Any]
    ) -> Awaitable[None]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.queued.append(("checkpoint", future))
        return HeldWrite(future, self.awaited)

    def settle_all(self) -> None:
        """Store every queued write; a closing one only if no write failed since the run's
        pending writes began (else refused, as a store does)."""
        closing = dict(self.closing)
        for type, future in self.queued:
            if future.done():
                continue
            if type in closing and self.failures > closing[type]:
                future.set_exception(WritesFailedError("refused"))
                continue
            if type in closing:
                self.closed.append(type)
            done = None if type == "checkpoint" else Event("r", 0, EventType(type), 0.0, 1, {})
            future.set_result(done)


def recorder(store: HeldStore) -> RunRecorder:
    return RunRecorder(
        store=store,  # type: ignore[arg-type]  # the part of the protocol the recorder uses
        metrics=RunMetrics(CollectorRegistry()),
        quotas=LocalQuotas(MemoryRunStore(), QuotaLimits()),
        max_event_content_chars=1000,
        on_ended=lambda record: None,
    )


def run_record() -> RunRecord:
    return RunRecord.model_validate(
        {
            "id": new_run_id(),
            "request": {"task": "t"},
            "model": "scripted",
            "settings": {"max_steps": 10},
            "status": RunStatus.RUNNING,
        }
    )


STATE = {
    "step": 1,
    "llm_calls": 1,
    "tool_calls": 0,
    "prompt_tokens": 0,
    "completion_tokens": 0,
    "cost_usd": 0.0,
    "unpriced_calls": 0,
}


async def test_an_event_is_queued_and_the_run_goes_on_before_it_is_stored() -> None:
    store, run = HeldStore(), run_record()
    rec = recorder(store)
    with anyio.fail_after(BOUND_S):  # returns with its write still pending
        await rec.record(run, Thought(1, "thinking"))
        await rec.record(run, TokenDelta(1, "tok"))
    assert [(t, f.done()) for t, f in store.queued] == [("thought", False), ("token", False)]


async def test_an_action_returns_only_once_everything_queued_before_it_is_stored() -> None:
    store, run = HeldStore(), run_record()
    rec = recorder(store)
    await rec.record(run, Thought(1, "thinking"))
    acting = asyncio.create_task(rec.record(run, Action(1, "c1", "calculator", {})))
    await store.waited_on()  # the thought's write
    thought, _ = (f for _, f in store.queued)
    thought.set_result(Event(run.id, 1, EventType.THOUGHT, 0.0, 1, {}))
    await store.waited_on()  # the action's own write: the call may not run yet
    assert not acting.done()
    store.settle_all()
    with anyio.fail_after(BOUND_S):
        await acting


async def test_an_action_whose_call_may_repeat_is_queued_and_not_waited_for() -> None:
    store, run = HeldStore(), run_record()
    rec = recorder(store)
    await rec.record(run, Thought(1, "thinking"))
    with anyio.fail_after(BOUND_S):  # an idempotent tool's call: nothing orders the commit first
        await rec.record(run, Action(1, "c1", "calculator", {}, repeatable=True))
    assert [(t, f.done()) for t, f in store.queued] == [("thought", False), ("action", False)]
    assert store.written == []


@pytest.mark.parametrize(
    "step",
    [Checkpoint(1, {**STATE, "acting": True}), Suspended(1, ())],
    ids=["checkpoint-with-calls-in-flight", "suspended"],
)
async def test_a_checkpoint_before_calls_run_and_a_suspension_wait_for_the_queued_writes(
    step: Any,
) -> None:
    store, run = HeldStore(), run_record()
    rec = recorder(store)
    await rec.record(run, Thought(1, "thinking"))
    waiting = asyncio.create_task(rec.record(run, step))
    await store.waited_on()
    assert not waiting.done()
    store.settle_all()
    with anyio.fail_after(BOUND_S):
        await waiting


async def test_a_checkpoint_between_steps_is_queued_behind_the_events_and_not_waited_for() -> None:
    store, run = HeldStore(), run_record()
    rec = recorder(store)
    await rec.record(run, Thought(1, "thinking"))
    with anyio.fail_after(BOUND_S):  # returns with both writes pending: the next call goes
        await rec.record(run, Checkpoint(1, STATE))
    assert [(t, f.done()) for t, f in store.queued] == [("thought", False), ("checkpoint", False)]
    assert store.written == []
    assert run.usage.steps == STATE["step"]
    acting = asyncio.create_task(rec.record(run, Action(2, "c1", "calculator", {})))
    await store.waited_on()  # the next action waits for the checkpoint too
    assert not acting.done()
    store.settle_all()
    with anyio.fail_after(BOUND_S):
        await acting


async def test_a_failed_queued_checkpoint_fails_the_next_wait() -> None:
    store, run = HeldStore(), run_record()
    rec = recorder(store)
    await rec.record(run, Checkpoint(1, STATE))
    store.queued[0][1].set_exception(OSError("disk I/O error"))
    with pytest.raises(OSError, match="disk I/O error"), anyio.fail_after(BOUND_S):
        await rec.record(run, Action(2, "c1", "calculator", {}))


async def test_a_failed_queued_write_fails_the_next_wait_once() -> None:
    store, run = HeldStore(), run_record()
    rec = recorder(store)
    await rec.record(run, Thought(1, "thinking"))
    store.fail(0, OSError("disk I/O error"))
    with pytest.raises(OSError, match="disk I/O error"), anyio.fail_after(BOUND_S):
        await rec.record(run, Action(1, "c1", "calculator", {}))
    # the failure was reported: ending the run (failed, by the manager) is not refused again
    store.settle_all()
    with anyio.fail_after(BOUND_S):
        await rec.end(run, StopReason.ERROR)
    assert run.status is RunStatus.FAILED
    assert store.written == ["run.failed"]


async def test_the_end_with_nothing_queued_stores_the_terminal_record_and_event_at_once() -> None:
    store, run = HeldStore(), run_record()
    rec = recorder(store)
    with anyio.fail_after(BOUND_S):
        await rec.end(run, StopReason.FINISHED, "42")
    assert store.written == ["run.completed"]
    assert run.status is RunStatus.COMPLETED


async def end_behind_a_thought(rec: RunRecorder, store: HeldStore, run: RunRecord) -> Any:
    """Queue a thought of the run, then ask for its end: once it waits for the thought."""
    await rec.record(run, Thought(1, "thinking"))
    ending = asyncio.create_task(rec.end(run, StopReason.FINISHED, "42"))
    await store.waited_on()
    return ending


async def test_the_end_queues_its_closing_write_behind_the_runs_queued_writes() -> None:
    store, run = HeldStore(), run_record()
    rec = recorder(store)
    ending = await end_behind_a_thought(rec, store, run)  # with its closing write queued
    assert [t for t, _ in store.queued] == ["thought", "run.completed"]
    assert store.closing == [("run.completed", 0)]
    assert not ending.done()
    store.settle_all()  # one commit for both
    with anyio.fail_after(BOUND_S):
        await ending
    assert store.written == []
    assert store.closed == ["run.completed"]
    assert run.status is RunStatus.COMPLETED


async def test_a_closing_write_behind_a_failed_one_is_refused_and_the_record_put_back() -> None:
    store, run = HeldStore(), run_record()
    rec = recorder(store)
    ending = await end_behind_a_thought(rec, store, run)
    store.fail(0, OSError("disk I/O error"))
    store.settle_all()
    with pytest.raises(OSError, match="disk I/O error"), anyio.fail_after(BOUND_S):
        await ending
    assert (store.closed, store.written) == ([], [])
    assert (run.status, run.result, run.ended_at) == (RunStatus.RUNNING, None, None)
    with anyio.fail_after(BOUND_S):  # the manager fails the run: its one terminal write
        await rec.end(run, StopReason.ERROR)
    assert store.written == ["run.failed"]
    assert run.status is RunStatus.FAILED


async def test_a_closing_write_refused_for_another_runs_failure_is_made_again() -> None:
    store, run = HeldStore(), run_record()
    rec = recorder(store)
    ending = await end_behind_a_thought(rec, store, run)
    store.failures += 1  # a write of another run failed meanwhile
    store.settle_all()
    with anyio.fail_after(BOUND_S):
        await ending
    assert (store.closed, store.written) == ([], ["run.completed"])
    assert run.status is RunStatus.COMPLETED


async def test_a_run_waits_once_it_has_max_unsettled_writes_in_flight() -> None:
    store, run = HeldStore(), run_record()
    rec = recorder(store)
    with anyio.fail_after(BOUND_S):
        for _ in range(MAX_UNSETTLED - 1):
            await rec.record(run, TokenDelta(1, "t"))
    full = asyncio.create_task(rec.record(run, TokenDelta(1, "t")))
    await store.waited_on()
    assert not full.done()
    store.settle_all()
    with anyio.fail_after(BOUND_S):
        await full


async def test_a_queued_write_that_failed_uncounted_after_the_end_was_stored_ends_it_once() -> None:
    """A failure the store did not count (none of ours should exist): the closing write was
    made, so the run has ended, once; the failure is logged, not turned into a second end."""
    store, run = HeldStore(), run_record()
    rec = recorder(store)
    ending = await end_behind_a_thought(rec, store, run)
    store.queued[0][1].set_exception(OSError("disk I/O error"))  # not counted
    store.settle_all()
    with anyio.fail_after(BOUND_S):
        await ending
    assert (store.closed, store.written) == (["run.completed"], [])
    assert run.status is RunStatus.COMPLETED

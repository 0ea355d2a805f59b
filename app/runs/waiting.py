"""Where runs waiting for a person are kept (DESIGN §9): the `WaitingRuns` port, and its
one-process implementation.

The approvals desk (`app/runs/approvals.py`) decides what a change to a waiting run is (a
decision, a timeout, a held message, a cancel); a `WaitingRuns` writes it so that two
changes never overwrite each other, and watches the approval deadlines:
- `LocalWaitingRuns` (memory, SQLite: one process) under one lock, with a heap of deadlines,
  the steering messages sent meanwhile on the record, and the local placement's queue for a
  run whose calls are all decided;
- `RedisWaitingRuns` (`app/runs/replicas/redis_waiting.py`, replicas) as a compare-and-set on the
  stored record, with the deadlines in a sorted set every replica polls, and the cluster's
  queue for the decided run.

A run's wait is an event (DESIGN §19): `suspend` stores the record waiting and appends its
`run.waiting {pending}` in one write, the record first (as a run's end), so whoever sees the
event reads the run waiting. `rearm` logs the wait of a run a version before that stored
waiting without one, so every follower can stop at the event.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from app.engine.events import EventType
from app.runs.errors import TooManyMessagesError
from app.runs.follow.log import wait_logged
from app.runs.records import RunRecord, RunStatus
from app.runs.store import RunStore

log = structlog.get_logger("finishline.runs")


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event a change appends: its type, step and payload."""

    type: EventType
    step: int
    data: dict[str, Any]


@dataclass(slots=True)
class WaitChange:
    """One change to a waiting run, written as one: `events` are appended, then `record`
    saved, then `final` (the terminal event of a run the change ends) appended."""

    record: RunRecord
    events: list[NewEvent] = field(default_factory=list)
    final: NewEvent | None = None
    requeue: bool = False
    """Every pending call is decided: the run is queued again to resume."""


def waiting_event(record: RunRecord, step: int) -> NewEvent:
    """The `run.waiting` event of a run that begins to wait: the calls it waits on (as its
    `pending_approvals` lists them)."""
    assert record.approval is not None
    pending = [p.model_dump(mode="json", exclude_none=True) for p in record.approval.undecided()]
    return NewEvent(EventType.RUN_WAITING, step, {"pending": pending})


def unlogged_wait(record: RunRecord | None) -> bool:
    """Whether the run waits on calls still undecided (so its wait must be in its log)."""
    return (
        record is not None
        and record.status == RunStatus.REQUIRES_ACTION
        and record.approval is not None
        and bool(record.approval.undecided())
    )


Changer = Callable[[RunRecord | None, list[str]], WaitChange | None]
"""Given the stored record (None: gone) and the steering messages it holds, the change to
write, or None for none; it may raise to refuse the request. Called again when the record
changed before the write (so: no side effects)."""


class WaitingRuns(Protocol):
    async def suspend(self, record: RunRecord, held: list[str], waited: NewEvent) -> None:
        """Store the (live, executing) run waiting, with the messages sent to it it has not
        seen (`held`), then its `run.waiting` event (`waited`), in one write; watch its
        approval deadline; on a shared store, give its lease up in the same write."""

    async def change(self, run_id: str, changer: Changer) -> WaitChange | None:
        """Apply `changer` to the run as stored and write its change: exactly one of
        concurrent changes of one run is written against each version of the record."""

    async def due(self) -> list[str]:
        """Block until runs may be past their approval deadline; their ids."""

    async def rearm(self) -> int:
        """At start-up: watch the deadlines of the runs the store holds waiting, and log the
        wait of each that has none in its log (stored waiting before waits were events)."""


def deadline_of(record: RunRecord) -> float:
    """When the run's undecided calls count as rejected (epoch seconds)."""
    assert record.approval is not None
    return record.approval.waiting_since.timestamp() + record.settings.approval_timeout_s


class LocalWaitingRuns:
    """One process: every change under one lock; a heap of deadlines; decided runs go to
    the manager's queue (`requeue`, with the messages the run held)."""

    def __init__(
        self,
        store: RunStore,
        requeue: Callable[[RunRecord, list[str]], Awaitable[None]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.requeue = requeue
        self.clock = clock
        self._lock = asyncio.Lock()
        self._timeouts: list[tuple[float, str]] = []
        self._wake = asyncio.Event()

    async def suspend(self, record: RunRecord, held: list[str], waited: NewEvent) -> None:
        assert record.approval is not None
        async with self._lock:
            record.approval.held_messages = held
            await self.store.append(record.id, waited.type, waited.step, waited.data, record=record)
        self.arm(record)

    async def change(self, run_id: str, changer: Changer) -> WaitChange | None:
        async with self._lock:
            record = await self.store.get(run_id)
            approval = record.approval if record is not None else None
            waiting = record is not None and record.status == RunStatus.REQUIRES_ACTION
            held = list(approval.held_messages) if waiting and approval is not None else []
            change = changer(record, held)
            if change is None:
                return None
            for event in change.events:
                await self.store.append(run_id, event.type, event.step, event.data)
            approval = change.record.approval
            taken: list[str] = []
            if change.requeue and approval is not None:
                taken, approval.held_messages = approval.held_messages, []
            await self.store.save(change.record)
            if change.final is not None:
                final = change.final
                await self.store.append(run_id, final.type, final.step, final.data)
            if change.requeue:
                await self.requeue(change.record, taken)
            return change

    async def hold(self, run_id: str, content: str, *, max_pending: int) -> RunRecord | None:
        """Keep a steering message on the waiting run's record, for its resume (the
        `LocalInbox` of a waiting run); None when the run is not waiting."""

        def changer(record: RunRecord | None, held: list[str]) -> WaitChange | None:
            if record is None or record.status != RunStatus.REQUIRES_ACTION:
                return None
            assert record.approval is not None
            if len(held) >= max_pending:
                raise TooManyMessagesError(
                    f"run {run_id!r} already holds {len(held)} undelivered messages",
                    run_id=run_id,
                    cap=max_pending,
                )
            record.approval.held_messages = [*held, content]
            return WaitChange(record)

        change = await self.change(run_id, changer)
        if change is None:
            return None
        log.info("user_message_held", run_id=run_id, chars=len(content))
        return change.record

    async def log_wait(self, run_id: str) -> bool:
        """Append the `run.waiting` of a run stored waiting without it in its log; whether it
        was appended (a run that waits on no undecided call, or logged it, is left)."""
        async with self._lock:
            record = await self.store.get(run_id)
            if not unlogged_wait(record) or await wait_logged(self.store, run_id):
                return False
            assert record is not None
            waited = waiting_event(record, record.usage.steps)
            await self.store.append(run_id, waited.type, waited.step, waited.data)
            log.info("run_wait_logged", run_id=run_id)
            return True

    def arm(self, record: RunRecord) -> None:
        """Watch the run's approval deadline; a run with every call decided already (a
        shutdown came before it could resume) is due at once."""
        assert record.approval is not None
        due = deadline_of(record) if record.approval.undecided() else self.clock()
        heapq.heappush(self._timeouts, (due, record.id))
        if self._timeouts[0][1] == record.id:
            self._wake.set()

    async def due(self) -> list[str]:
        while True:
            self._wake.clear()
            if not self._timeouts:
                await self._wake.wait()
                continue
            delay = self._timeouts[0][0] - self.clock()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
                continue
            _, run_id = heapq.heappop(self._timeouts)
            return [run_id]

    async def rearm(self) -> int:
        count, cursor = 0, None
        while True:
            page = await self.store.list_runs(
                owner=None,
                statuses=(RunStatus.REQUIRES_ACTION,),
                limit=200,
                before_id=cursor,
                any_owner=True,
            )
            for record in page:
                if record.approval is not None:
                    await self.log_wait(record.id)
                    self.arm(record)
                    count += 1
            if len(page) < 200:
                return count
            cursor = page[-1].id

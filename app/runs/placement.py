"""Where a run waits for a slot and where it executes: the `Placement` seam, and its
one-process side.

Two sides, chosen once where the backend is opened (`app.runs.backends.open_backend`):
- `LocalPlacement` (memory, SQLite): a FIFO queue of bounded length in this process; a run
  starts as soon as one of this process's slots is free;
- `ReplicaPlacement` (`app/runs/replicas/placement.py`, Redis): the cluster's queue, from
  which whichever replica has a free slot claims the run; a run executing on another replica
  is cancelled and waited for through the shared store.

A placement hands the runs it places to a `Runner` (this process's `Execution`), which
executes each in a task of its own and tells the placement when the task is over
(`release`). Neither side ever asks which one it is.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

import structlog

from app.engine.steps import RunError
from app.runs.errors import QueueFullError, RunUnreadableError
from app.runs.live import ActiveRun, LiveRuns
from app.runs.metrics import RunMetrics
from app.runs.records import ACTIVE_STATUSES, RunRecord, RunStatus
from app.runs.store import RunStore

log = structlog.get_logger("finishline.runs")


class Runner(Protocol):
    """What a placement asks of the process it places runs in (`app.runs.execution`)."""

    def start(self, active: ActiveRun) -> None:
        """Execute the run in a task of its own; `Placement.release` once the task is over."""

    async def end_cancelled(self, active: ActiveRun) -> None:
        """End a run that never started (or stopped) here cancelled, with its messages."""

    async def fail(self, record: RunRecord, error: RunError) -> None:
        """End a run failed, its terminal record and event in one write."""

    def notify(self, record: RunRecord, event: str) -> None:
        """Call the run's webhook for `event` in the background (if it asked for it)."""

    async def deliver_webhook(self, run_id: str) -> None:
        """Deliver the ended run's webhook now (all its attempts)."""


class Placement(Protocol):
    resumes_elsewhere: bool
    """A run executing here may be resumed by another process (its lease lost): it takes
    checkpoints while a step's calls are in flight too."""

    def serve(self, runner: Runner, tasks: asyncio.TaskGroup) -> None:
        """Hand runs to `runner` from now on (replicas: in a task of `tasks`, which claims
        queued runs, relays cancels, renews leases and takes over runs of stopped replicas)."""

    def reserve(self) -> AbstractAsyncContextManager[str | None]:
        """A place for a new run, checked and taken in one step (`QueueFullError` when there
        is none); held while the run is stored, given back on leaving unless `enqueue` took
        it. Entered, the place's ticket (None when it has none to hand on)."""

    async def enqueue(self, record: RunRecord, place: str | None = None) -> RunRecord:
        """Queue a stored run to execute, taking `place` (from `reserve`); the live record."""

    async def hold(self, record: RunRecord, behind: str) -> RunRecord:
        """Queue a stored run to execute once run `behind` has ended (at once if it has):
        a thread's run enqueued behind the thread's latest (DESIGN §19). It counts as queued
        until then; a cancel ends it where it waits. The live record."""

    async def cancel_waiting(self, active: ActiveRun) -> bool:
        """Cancel a live run still waiting here for a slot; False when it is executing."""

    async def cancel_elsewhere(self, record: RunRecord) -> RunRecord | None:
        """Cancel a run neither live here nor waiting for a person: end it if it is queued,
        else stop it where it executes, and wait for its end; None when no other process
        can hold it (the run has ended)."""

    async def wait(self, record: RunRecord, timeout_s: float) -> RunRecord:
        """A run not live here: as it is once it ended or waits for a person, or when
        `timeout_s` runs out (at once when no other process can hold it)."""

    def release(self, run_id: str) -> None:
        """The run's task here is over: its slot is free."""

    def wake(self) -> None:
        """A slot may be free (a run lent its own while it waits on its children): place
        the next run."""

    def ended(self, record: RunRecord) -> None:
        """The run ended here: what it is owed after (one process: its webhook, now), and
        the run held behind it, if any, queued."""

    async def recover(self) -> list[str]:
        """At start-up: end the runs a crash of this process interrupted; their ids."""

    async def drain(self) -> None:
        """Stop placing runs here (shutdown): those waiting for a slot here are cancelled."""

    def stop(self) -> None:
        """The runs executing here have ended (drained): stop serving."""


class LocalPlacement:
    """One process: a FIFO queue of at most `max_queued` runs, started while a slot is free."""

    resumes_elsewhere = False

    def __init__(
        self, *, store: RunStore, live: LiveRuns, metrics: RunMetrics, max_queued: int
    ) -> None:
        self.store = store
        self.live = live
        self.metrics = metrics
        self.max_queued = max_queued
        self._queue: deque[str] = deque()
        self._held: dict[str, str] = {}  # a run -> the run held to start once it has ended
        self._admitting = 0  # runs past the queue check, being stored
        self._runner: Runner | None = None

    @property
    def runner(self) -> Runner:
        assert self._runner is not None, "RunManager.start() was not called"
        return self._runner

    def serve(self, runner: Runner, tasks: asyncio.TaskGroup) -> None:
        self._runner = runner

    @property
    def queued(self) -> int:
        return len(self._queue)

    def reserve(self) -> AbstractAsyncContextManager[str | None]:
        return self._reserve()

    @asynccontextmanager
    async def _reserve(self) -> AsyncIterator[str | None]:
        # check for room and take it in one step (no await between): a run being stored
        # holds its place, so concurrent requests cannot all pass the check
        queued = len(self._queue) + len(self._held) + self._admitting
        if self.live.running + queued >= self.live.slots + self.max_queued:
            raise QueueFullError(
                f"{self.live.running} runs are running here and {queued} are queued; "
                "try again later",
                retry_after_s=5,
            )
        self._admitting += 1
        try:
            yield None
        finally:
            self._admitting -= 1

    async def enqueue(self, record: RunRecord, place: str | None = None) -> RunRecord:
        active = ActiveRun(record)
        self.live.hold(active)
        self._queue.append(record.id)
        self._start_next()
        return active.record

    async def hold(self, record: RunRecord, behind: str) -> RunRecord:
        active = ActiveRun(record)
        self.live.hold(active)
        self._held[behind] = record.id
        before = self.live.get(behind)
        found = before.record if before is not None else await self.store.get(behind)
        if found is None or found.status.terminal:  # it ended before the hold: no wait
            self._release(behind)
        return active.record

    def _release(self, behind: str) -> None:
        """Queue the run held behind `behind` (which ended), if any is."""
        run_id = self._held.pop(behind, None)
        if run_id is not None and run_id in self.live:
            self._queue.append(run_id)
            log.info("run_released", run_id=run_id, behind=behind)
            self._start_next()

    async def requeue(self, record: RunRecord, held: list[str]) -> None:
        """Every pending call of a waiting run is decided (`LocalWaitingRuns`): queue it to
        resume (admitted once already: no queue cap), with the messages it was sent
        meanwhile. While the server drains, it stays waiting (decided), to resume after the
        restart."""
        if self.live.draining:
            assert record.approval is not None
            record.status = RunStatus.REQUIRES_ACTION
            record.approval.held_messages = held
            await self.store.save(record)
            return
        active = ActiveRun(record, inbox=held, step=record.usage.steps)
        self.live.hold(active)
        self._queue.append(record.id)
        log.info("run_requeued", run_id=record.id)
        self._start_next()

    def _start_next(self) -> None:
        while self._queue and self.live.free_slots() > 0:
            active = self.live.get(self._queue.popleft())
            assert active is not None
            self.runner.start(active)
        self.metrics.set_load(running=self.live.running, queued=len(self._queue))

    async def cancel_waiting(self, active: ActiveRun) -> bool:
        run_id = active.record.id
        behind = next((b for b, held in self._held.items() if held == run_id), None)
        if behind is not None:
            del self._held[behind]
        elif run_id in self._queue:
            self._queue.remove(run_id)
        else:
            return False
        self.live.drop(active)
        try:
            await self.runner.end_cancelled(active)
        finally:
            active.done.set()
            self.metrics.set_load(running=self.live.running, queued=len(self._queue))
        return True

    async def cancel_elsewhere(self, record: RunRecord) -> RunRecord | None:
        return None  # no other process serves this store

    async def wait(self, record: RunRecord, timeout_s: float) -> RunRecord:
        return record  # ended, or waiting for a person: nothing here will change it

    def release(self, run_id: str) -> None:
        self._start_next()

    def wake(self) -> None:
        self._start_next()

    def ended(self, record: RunRecord) -> None:
        self._release(record.id)
        self.runner.notify(record, "ended")

    async def recover(self) -> list[str]:
        """Fail the runs a crash left queued or running (they cannot resume elsewhere).
        A decided run the server stopped before it resumed waits again (and resumes once
        the approval timer runs). A run that does not read back is left as it is and
        reported (`run_not_recovered`): it answers 409 run_unreadable until an operator
        repairs it, and start-up goes on."""
        found: list[str] = []
        reported: set[str] = set()
        while True:
            unreadable: list[RunUnreadableError] = []
            stale = await self.store.list_runs(
                owner=None,
                statuses=ACTIVE_STATUSES,
                limit=200,
                any_owner=True,
                unreadable=unreadable,
            )
            for bad in unreadable:  # left as it is, for an operator: start-up goes on
                if bad.run_id not in reported:
                    reported.add(bad.run_id)
                    log.warning("run_not_recovered", run_id=bad.run_id, problem=bad.problem)
            if not stale:
                return found
            for record in stale:
                if record.status == RunStatus.QUEUED and record.approval is not None:
                    record.status = RunStatus.REQUIRES_ACTION
                    await self.store.save(record)
                    continue
                message = f"the server stopped while this run was {record.status.value}"
                await self.runner.fail(record, RunError("interrupted", message))
                found.append(record.id)
                log.warning("run_interrupted", run_id=record.id)

    async def drain(self) -> None:
        while self._queue or self._held:
            waiting = self._queue[0] if self._queue else next(iter(self._held.values()))
            active = self.live.get(waiting)
            assert active is not None
            await self.cancel_waiting(active)

    def stop(self) -> None:
        return None

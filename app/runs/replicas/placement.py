"""RunManager's part for a store several replicas share (DESIGN §8): what it does when its
coordinator hands it a queued run, a run to take over, a cancel request or a lost lease, and
how it cancels a run another replica executes. Without a coordinator none of this runs.
`_Active` (a run executing in this process) lives here so both halves can make one."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import structlog

from app.engine.events import EventType
from app.engine.policies import StopReason
from app.engine.state import RunState
from app.engine.steps import RunError
from app.runs.metrics import RunMetrics
from app.runs.recorder import RunRecorder
from app.runs.records import RunRecord, RunStatus, utcnow
from app.runs.replicas.cluster import RunCoordinator, wait_for_end
from app.runs.store import RunStore

log = structlog.get_logger("finishline.runs")

CANCEL_SETTLE_S = 5.0  # how long a cancel waits for the run's end before answering


@dataclass(eq=False)
class _Active:
    record: RunRecord
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    attempt: int = 0  # takeovers so far (Redis store): > 0 resumes from `checkpoint`
    checkpoint: dict[str, Any] | None = None
    inbox: list[str] = field(default_factory=list)
    """Steering messages not yet in the conversation, oldest first."""
    inbox_closed: bool = False
    """Set once the run's last LLM call is behind it: no message can join any more."""
    step: int = 0
    """The step the run is in (0 before its first)."""

    def take_messages(self) -> list[str]:
        taken, self.inbox = self.inbox, []
        return taken


class ClusterRuns:
    """Mixed into `RunManager`, whose attributes these are."""

    store: RunStore
    recorder: RunRecorder
    metrics: RunMetrics
    coordinator: RunCoordinator | None
    draining: bool
    max_concurrent_runs: int
    _active: dict[str, _Active]
    _running: set[str]
    _tasks: asyncio.TaskGroup | None

    async def _execute(self, active: _Active) -> None:
        raise NotImplementedError("RunManager executes runs")

    async def _undelivered(self, active: _Active) -> None:
        raise NotImplementedError("RunManager logs a run's undelivered messages")

    def _free_slots(self) -> int:
        """Slots free for claimed runs; -1 once draining (the coordinator then stops)."""
        return -1 if self.draining else self.max_concurrent_runs - len(self._running)

    async def _claimed(self, run_id: str) -> None:
        """A queued run the cluster handed to this replica: execute it, unless it ended (a
        cancel took it first) or another replica owns it."""
        record = await self.store.get(run_id)
        if record is None or record.status != RunStatus.QUEUED:
            return
        assert self.coordinator is not None
        if not await self.coordinator.claim(run_id):
            return
        await self._run_here(_Active(record))

    async def _taken_over(self, run_id: str, attempt: int) -> None:
        """A running run whose replica lost its lease (died, hung): resume it here from its
        checkpoint, or fail it once it was taken over `max_attempts` times."""
        assert self.coordinator is not None
        record = await self.store.get(run_id)
        if record is None or record.status != RunStatus.RUNNING:
            self.coordinator.release(run_id)
            return
        if attempt > self.coordinator.max_attempts:
            message = f"the run was interrupted {attempt} times (its replica stopped)"
            try:
                await self.recorder.end(
                    record, StopReason.ERROR, error=RunError("interrupted", message)
                )
            finally:
                self.coordinator.release(run_id)
            return
        checkpoint = await self.store.load_checkpoint(run_id)
        await self._run_here(_Active(record, attempt=attempt, checkpoint=checkpoint))

    async def _run_here(self, active: _Active) -> None:
        assert self.coordinator is not None
        run_id = active.record.id
        self._active[run_id] = active
        self._running.add(run_id)
        assert self._tasks is not None, "RunManager.start() was not called"
        active.task = self._tasks.create_task(self._execute(active), name=run_id)
        self.metrics.set_load(running=len(self._running), queued=0)
        if await self.coordinator.cancel_requested(run_id):  # asked while it was claimed
            active.cancel.set()

    def _resumed_state(self, active: _Active) -> RunState | None:
        """After a takeover: the checkpoint's state (none: from the start), its clock set to
        the time since the run first started, so a takeover does not extend the deadline."""
        if active.attempt == 0:
            return None
        checkpoint = active.checkpoint
        state = RunState.from_checkpoint(checkpoint["state"]) if checkpoint else RunState()
        started = active.record.started_at
        if started is not None:
            state.elapsed_s = max(state.elapsed_s, (utcnow() - started).total_seconds())
        return state

    async def _recovered(self, active: _Active) -> None:
        assert self.coordinator is not None
        step = active.checkpoint["step"] if active.checkpoint else 0
        data = {"replica": self.coordinator.replica, "attempt": active.attempt}
        await self.store.append(active.record.id, EventType.RUN_RECOVERED, step, data)
        log.warning("run_recovered", attempt=active.attempt, from_step=step)

    def _cancel_asked(self, run_id: str) -> None:
        active = self._active.get(run_id)
        if active is not None:
            active.cancel.set()

    async def _cancel_elsewhere(self, record: RunRecord) -> RunRecord:
        """Cancel a run this replica does not execute: end it here if it is still queued
        (taking it before any replica does), else ask its owner; then wait for its end."""
        assert self.coordinator is not None
        if record.status == RunStatus.QUEUED and await self.coordinator.claim(record.id):
            try:
                await self._undelivered(_Active(record))  # the messages it was sent
                await self.recorder.end(record, StopReason.CANCELLED)
            finally:
                self.coordinator.release(record.id)
            return record
        await self.coordinator.request_cancel(record.id)
        return await wait_for_end(self.store, record, CANCEL_SETTLE_S)

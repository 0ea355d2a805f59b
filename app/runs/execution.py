"""Execution: a run's task, from its slot in the queue to its end (`RunManager._execute`).

`_start_next` starts queued runs while a slot is free. A run's task marks the run running (or,
taken over from a replica that stopped, resumes it from its checkpoint), passes the engine's
steps to the recorder, stores the run waiting when it asks a person, and ends it on a cancel,
on a deleted previous run or on our bug; its `finally` frees the slot and starts the next.
What follows a run's end is here too: its trace ends and its webhook is called
(`_on_ended`), and a waiting run whose calls were all decided is queued again (`_requeue`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import structlog

from app.engine.events import EventType
from app.engine.history import PreviousRun
from app.engine.loop import run_react
from app.engine.policies import StopReason
from app.engine.state import RunState
from app.engine.steps import Finished, RunError, Suspended, UserMessage
from app.engine.toolcalls import CallResult
from app.runs.approvals import ApprovalDesk, resumed_state, retaken_state
from app.runs.inbox import SharedInbox
from app.runs.metrics import RunMetrics
from app.runs.observer import RunTrace
from app.runs.ports import RunAssembler
from app.runs.recorder import RunRecorder
from app.runs.records import RunRecord, RunStatus, utcnow
from app.runs.replicas.cluster import RunCoordinator
from app.runs.replicas.placement import _Active
from app.runs.resume import recorded_results
from app.runs.store import LeaseLostError, RunStore
from app.runs.webhooks import WebhookSender

log = structlog.get_logger("finishline.runs")


class _PreviousRunGoneError(Exception):
    """A follow-up's previous run was deleted between its creation and its start."""


class ExecutingRuns:
    """Mixed into `RunManager`, whose attributes these are: executing runs. First among its
    bases: it implements what `AdmissionRuns` and `ClusterRuns` declare."""

    store: RunStore
    assembler: RunAssembler
    recorder: RunRecorder
    approvals: ApprovalDesk
    webhooks: WebhookSender
    metrics: RunMetrics
    messages: SharedInbox | None
    coordinator: RunCoordinator | None
    draining: bool
    max_concurrent_runs: int
    _traces: dict[str, RunTrace]
    _active: dict[str, _Active]
    _running: set[str]
    _queue: deque[str]
    _tasks: asyncio.TaskGroup | None
    _webhook_tasks: set[asyncio.Task[None]]
    _slot_freed: asyncio.Event

    # `ClusterRuns`' and `SharedInboxRuns`', which follow this class in RunManager's bases:
    # declared for the type checker only, as a stub here would hide them
    if TYPE_CHECKING:

        async def _recovered(self, active: _Active) -> None: ...

        def _resumed_state(self, active: _Active) -> RunState | None: ...

        async def _pull_messages(self, active: _Active) -> None: ...

    def _start_next(self) -> None:
        while self._queue and len(self._running) < self.max_concurrent_runs and not self.draining:
            run_id = self._queue.popleft()
            self._running.add(run_id)
            active = self._active[run_id]
            assert self._tasks is not None, "RunManager.start() was not called"
            active.task = self._tasks.create_task(self._execute(active), name=run_id)
        self.metrics.set_load(running=len(self._running), queued=len(self._queue))

    async def _execute(self, active: _Active) -> None:
        record = active.record
        structlog.contextvars.bind_contextvars(run_id=record.id)
        trace = self._traces.get(record.id)
        suspended: Suspended | None = None
        recorded: dict[str, CallResult] = {}
        try:
            if active.attempt == 0:
                state, decisions = await resumed_state(self.store, record)
                record.status = RunStatus.RUNNING
                record.started_at = record.started_at or utcnow()
                started: dict[str, Any] = {"trace_id": record.trace_id} if record.trace_id else {}
                if state is not None:
                    started["resumed"] = True
                # the record running and its event in one write
                await self.store.append(record.id, EventType.RUN_STARTED, 0, started, record=record)
                log.info("run_started", resumed=state is not None)
            else:  # taken over from a replica that stopped: from its last checkpoint
                await self._recovered(active)
                state = self._resumed_state(active)
                decisions = retaken_state(record, state)  # a run that waited for a person
                if state is not None:  # the calls in flight then, and their logged results
                    recorded = await recorded_results(self.store, record.id, state)
            if trace is not None:
                trace.started()  # again on a resume: this task's outbound calls carry it
            await self._pull_messages(active)  # with replicas: those sent before it started
            fresh = state is None or not state.messages
            previous = await self._previous_conversation(record) if fresh else None
            inputs = await self.assembler.inputs(record)
            try:
                async for step in run_react(
                    task=record.request.task,
                    system_prompt=record.system_prompt,
                    model=inputs.model,
                    tools=inputs.tools,
                    limits=inputs.limits,
                    prompts=inputs.prompts,
                    run_id=record.id,
                    cancel=active.cancel,
                    previous=previous,
                    inbox=active.take_messages,
                    approval=inputs.approval,
                    state=state,
                    decisions=decisions,
                    recorded=recorded,
                ):
                    active.step = step.step
                    if isinstance(step, Suspended):
                        suspended = step
                    if isinstance(step, Finished):
                        await self._undelivered(active)
                    await self.recorder.record(record, step)
                    if trace is not None:
                        trace.step(step)
            finally:
                await inputs.aclose()
            if suspended is not None:
                # no await between this and the `finally` below once the run is stored
                # waiting: a decision can resume it only after it left `_active`
                await self.approvals.suspend(record, suspended, active.take_messages)
                self._webhook_task(record, "requires_action", self.webhooks.notify_waiting)
        except asyncio.CancelledError:
            if not record.status.terminal:
                with contextlib.suppress(LeaseLostError):
                    await asyncio.shield(self._end_cancelled(active))
            raise
        except LeaseLostError:  # another replica took the run over: it is not ours to end
            log.warning("run_given_up", reason="lease lost")
        except _PreviousRunGoneError as exc:
            if record.status.terminal:
                raise
            await self._undelivered(active)
            await self.recorder.end(
                record, StopReason.ERROR, error=RunError("previous_run_gone", str(exc))
            )
        except Exception as exc:  # our bug: log once with the traceback, fail the run
            log.exception("run_crashed")
            if not record.status.terminal:
                with contextlib.suppress(LeaseLostError):
                    await self._undelivered(active)
                    await self.recorder.end(
                        record,
                        StopReason.ERROR,
                        error=RunError("internal", f"internal error: {type(exc).__name__}"),
                    )
        finally:
            self.recorder.forget(record.id)  # a run given up (lease lost) left some queued
            if self.coordinator is not None:
                self.coordinator.release(record.id)
            self._running.discard(record.id)
            self._active.pop(record.id, None)
            active.done.set()
            self._slot_freed.set()
            self._start_next()

    async def _previous_conversation(self, record: RunRecord) -> PreviousRun | None:
        if record.previous_run_id is None:
            return None
        previous = await self.store.get(record.previous_run_id)
        checkpoint = await self.store.load_checkpoint(record.previous_run_id)
        if previous is None:
            raise _PreviousRunGoneError(f"the previous run {record.previous_run_id} was deleted")
        messages = RunState.from_checkpoint(checkpoint["state"]).messages if checkpoint else []
        if not messages:  # it ended before its first step: its task is all there was
            messages = [{"role": "user", "content": previous.request.task}]
        result = previous.result
        return PreviousRun(
            messages=messages,
            answer=result.answer if result is not None else None,
            reason=result.reason.value if result is not None else previous.status.value,
        )

    def _on_ended(self, record: RunRecord) -> None:
        trace = self._traces.pop(record.id, None)
        if trace is not None:
            trace.ended(record)
        self._deliver_webhook(record)

    async def _requeue(self, record: RunRecord, held: list[str]) -> None:
        """Every pending call of a waiting run is decided: queue it to resume (it was
        admitted once already: no queue cap), with the messages it was sent meanwhile. While
        the server drains, it stays waiting (decided), to resume after the restart."""
        if self.draining:
            assert record.approval is not None
            record.status = RunStatus.REQUIRES_ACTION
            record.approval.held_messages = held
            await self.store.save(record)
            return
        active = self._active[record.id] = _Active(record, inbox=held)
        active.step = record.usage.steps
        self._queue.append(record.id)
        log.info("run_requeued", run_id=record.id)
        self._start_next()

    def _deliver_webhook(self, record: RunRecord) -> None:
        if self.coordinator is not None:  # the store's outbox has it: one replica delivers
            return
        self._webhook_task(record, "ended", self.webhooks.deliver)

    def _webhook_task(
        self, record: RunRecord, event: str, send: Callable[[str], Coroutine[Any, Any, None]]
    ) -> None:
        """Call the run's webhook for `event` if the run asked for it (default: ended)."""
        wanted = record.request.webhook_events or ["ended"]
        if record.webhook is not None and event in wanted and self._tasks is not None:
            task = self._tasks.create_task(send(record.id))
            self._webhook_tasks.add(task)
            task.add_done_callback(self._webhook_tasks.discard)

    async def _end_cancelled(self, active: _Active) -> None:
        await self._undelivered(active)
        await self.recorder.end(active.record, StopReason.CANCELLED)

    async def _undelivered(self, active: _Active) -> None:
        """Close the run's inbox and log what it still held: accepted, never seen."""
        active.inbox_closed = True
        if self.messages is not None:
            active.inbox.extend(await self.messages.close(active.record.id))
        for content in active.take_messages():
            message = UserMessage(active.step, content, delivered=False)
            await self.recorder.record(active.record, message)

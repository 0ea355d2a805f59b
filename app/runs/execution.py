"""Execution: a run's task in this process, from its slot to its end. It is the placement's
`Runner`: the placement decides when a run starts here (`start`), this runs it.

A run's task marks the run running (or, taken over from a replica that stopped, resumes it
from its checkpoint), passes the engine's steps to the recorder, stores the run waiting when
it asks a person, and ends it on a cancel, on a deleted previous run or on our bug; what
becomes of a task that fails is decided in one place (`_execute`'s handlers). Its `finally`
frees the slot (`Placement.release`). What follows a run's end is here too: its trace ends
and the placement is told (`ended`: in one process, its webhook is called).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from app.engine.events import EventType
from app.engine.history import PreviousRun
from app.engine.loop import react
from app.engine.policies import StopReason
from app.engine.state import RunState
from app.engine.steps import Finished, RunError, Suspended, UserMessage
from app.engine.toolcalls import CallResult
from app.runs.approvals import ApprovalDesk, resumed_state, retaken_state
from app.runs.errors import StoreUnavailableError
from app.runs.inbox import Inbox
from app.runs.live import CANCEL_SETTLE_S, ActiveRun, LiveRuns
from app.runs.observer import RunTraces
from app.runs.placement import Placement
from app.runs.ports import RunAssembler
from app.runs.quotas.seam import Quotas
from app.runs.recorder import RunRecorder
from app.runs.records import RunRecord, RunStatus, utcnow
from app.runs.resume import recorded_results
from app.runs.store import LeaseLostError, RunGoneError, RunStore
from app.runs.trees.children import RunTree
from app.runs.webhooks import WebhookSender

log = structlog.get_logger("finishline.runs")

GIVEN_UP = (LeaseLostError, StoreUnavailableError, RunGoneError)
"""What makes a run's task here stop without ending the run: another replica took it over,
the store (Redis) went away, so that nothing of the run can be written, or came back without
the run. The task frees its slot and drops the run's lease, which lapses; once Redis is back
with the run, a replica takes it over and resumes it from its checkpoint (DESIGN §8). On a
one-process store none of these happens."""


class _PreviousRunGoneError(Exception):
    """A follow-up's previous run was deleted between its creation and its start."""


class Execution:
    def __init__(
        self,
        *,
        store: RunStore,
        assembler: RunAssembler,
        recorder: RunRecorder,
        approvals: ApprovalDesk,
        webhooks: WebhookSender,
        inbox: Inbox,
        placement: Placement,
        quotas: Quotas,
        live: LiveRuns,
        traces: RunTraces,
        tree: RunTree,
    ) -> None:
        self.tree = tree
        self.store = store
        self.quotas = quotas
        self.assembler = assembler
        self.recorder = recorder
        self.approvals = approvals
        self.webhooks = webhooks
        self.inbox = inbox
        self.placement = placement
        self.live = live
        self.traces = traces
        self._tasks: asyncio.TaskGroup | None = None
        self._webhook_tasks: set[asyncio.Task[None]] = set()

    def open(self, tasks: asyncio.TaskGroup) -> None:
        """Runs' tasks (and webhook deliveries) go into `tasks` from now on."""
        self._tasks = tasks
        self.tree.open(tasks)

    # -- the placement's `Runner` ---------------------------------------------------------

    def start(self, active: ActiveRun) -> None:
        assert self._tasks is not None, "RunManager.start() was not called"
        self.live.executing(active)
        active.task = self._tasks.create_task(self._execute(active), name=active.record.id)

    async def end_cancelled(self, active: ActiveRun) -> None:
        await self._undelivered(active)
        await self.recorder.end(active.record, StopReason.CANCELLED)

    async def fail(self, record: RunRecord, error: RunError) -> None:
        await self.recorder.end(record, StopReason.ERROR, error=error)

    def notify(self, record: RunRecord, event: str) -> None:
        """Call the run's webhook for `event` if the run asked for it (default: ended)."""
        sends: dict[str, Callable[[str], Coroutine[Any, Any, None]]] = {
            "ended": self.webhooks.deliver,
            "requires_action": self.webhooks.notify_waiting,
        }
        wanted = record.request.webhook_events or ["ended"]
        if record.webhook is not None and event in wanted and self._tasks is not None:
            task = self._tasks.create_task(_logged(sends[event](record.id), record.id))
            self._webhook_tasks.add(task)
            task.add_done_callback(self._webhook_tasks.discard)

    async def deliver_webhook(self, run_id: str) -> None:
        await self.webhooks.deliver(run_id)

    # -- a run's end, and the process's ----------------------------------------------------

    def ended(self, record: RunRecord) -> None:
        """The recorder stored the run's end (`RunRecorder.on_ended`)."""
        self.traces.ended(record)
        self.placement.ended(record)
        self.tree.ended(record)  # its children still going are stopped

    async def drain(self, grace_s: float) -> None:
        """Let the runs executing here end within `grace_s`; cancel the rest, each with its
        terminal event; then the ones that ignored their cancel, hard."""
        await self.live.wait_for(self.live.executing_ids(), grace_s)
        for run_id in self.live.executing_ids():
            active = self.live.get(run_id)
            if active is not None:
                active.cancel.set()
        await self.live.wait_for(self.live.executing_ids(), CANCEL_SETTLE_S)
        for run_id in self.live.executing_ids():  # a run that ignored its cancel
            active = self.live.get(run_id)
            if active is not None and active.task is not None:
                active.task.cancel()
        await self.live.wait_for(self.live.executing_ids(), CANCEL_SETTLE_S)

    def abandon_webhooks(self) -> None:
        for task in list(self._webhook_tasks):
            task.cancel()

    # -- a run's task ---------------------------------------------------------------------

    async def _execute(self, active: ActiveRun) -> None:
        record = active.record
        structlog.contextvars.bind_contextvars(run_id=record.id)
        trace = self.traces.get(record.id)
        suspended: Suspended | None = None
        recorded: dict[str, CallResult] = {}
        try:
            if active.takeover is None:
                state, decisions = await resumed_state(self.store, record)
                record.status = RunStatus.RUNNING
                record.started_at = record.started_at or utcnow()
                started: dict[str, Any] = {"trace_id": record.trace_id} if record.trace_id else {}
                if state is not None:
                    started["resumed"] = True
                elif record.tree is not None:  # a child's deadline: its parent's at the latest
                    state = RunState(elapsed_s=_queued_s(record))
                # the record running and its event in one write, queued: the first model
                # call need not wait for its commit (its error fails the run where it waits)
                queued = self.recorder.pending(record.id)  # before the write is queued
                queued.append(
                    await self.store.append_soon(
                        record.id, EventType.RUN_STARTED, 0, started, record=record
                    )
                )
                log.info("run_started", resumed=state is not None)
            else:  # taken over from a replica that stopped: from its last checkpoint
                state = await self._recovered(active)
                decisions = retaken_state(record, state)  # a run that waited for a person
                if state is not None:  # the calls in flight then, and their logged results
                    recorded = await recorded_results(self.store, record.id, state)
            if trace is not None:
                trace.started()  # again on a resume: this task's outbound calls carry it
            await self.inbox.pull(active)  # with replicas: those sent before it started
            fresh = state is None or not state.messages
            previous = await self._previous_conversation(record) if fresh else None
            allowance = await self.quotas.allowance(record.owner)  # its key's day quotas
            inputs = await self.assembler.inputs(record)
            try:
                async for step in react(
                    inputs,
                    run_id=record.id,
                    cancel=active.cancel,
                    inbox=active.take_messages,
                    state=state,
                    previous=previous,
                    decisions=decisions,
                    recorded=recorded,
                    subagents=self.tree.port(record),
                    allowance=allowance,
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
                # waiting: a decision can resume it only after it left the live runs
                await self.approvals.suspend(record, suspended, active.take_messages)
                self.notify(record, "requires_action")
        except asyncio.CancelledError:
            if not record.status.terminal:
                with contextlib.suppress(*GIVEN_UP):
                    await asyncio.shield(self.end_cancelled(active))
            raise
        except LeaseLostError:  # another replica took the run over: it is not ours to end
            log.warning("run_given_up", reason="lease lost")
        except StoreUnavailableError as exc:  # nothing can be written: see GIVEN_UP
            log.warning("run_given_up", reason="store unavailable", error=exc.message)
        except RunGoneError:  # Redis came back without it
            log.warning("run_given_up", reason="no longer stored")
        except _PreviousRunGoneError as exc:
            if record.status.terminal:
                raise
            with contextlib.suppress(*GIVEN_UP):
                await self._undelivered(active)
                await self.fail(record, RunError("previous_run_gone", str(exc)))
        except Exception as exc:  # our bug: log once with the traceback, fail the run
            log.exception("run_crashed")
            if not record.status.terminal:
                with contextlib.suppress(*GIVEN_UP):
                    await self._undelivered(active)
                    await self.fail(
                        record, RunError("internal", f"internal error: {type(exc).__name__}")
                    )
        finally:
            self.recorder.forget(record.id)  # a run given up (lease lost) left some queued
            self.live.drop(active)
            active.done.set()
            self.placement.release(record.id)

    async def _recovered(self, active: ActiveRun) -> RunState | None:
        """After a takeover: log it, and give the checkpoint's state (none: from the
        start), its clock set to the time since the run first started, so a takeover does
        not extend the deadline."""
        takeover = active.takeover
        assert takeover is not None
        checkpoint = takeover.checkpoint
        step = checkpoint.step if checkpoint else 0
        data = {"replica": takeover.replica, "attempt": takeover.attempt}
        await self.store.append(active.record.id, EventType.RUN_RECOVERED, step, data)
        log.warning("run_recovered", attempt=takeover.attempt, from_step=step)
        state = checkpoint.run_state() if checkpoint else RunState()
        started = active.record.started_at
        if started is not None:
            state.elapsed_s = max(state.elapsed_s, (utcnow() - started).total_seconds())
        return state

    async def _previous_conversation(self, record: RunRecord) -> PreviousRun | None:
        if record.previous_run_id is None:
            return None
        previous = await self.store.get(record.previous_run_id)
        checkpoint = await self.store.load_checkpoint(record.previous_run_id)
        if previous is None:
            raise _PreviousRunGoneError(f"the previous run {record.previous_run_id} was deleted")
        messages = checkpoint.run_state().messages if checkpoint else []
        if not messages:  # it ended before its first step: its task is all there was
            messages = [{"role": "user", "content": previous.request.task}]
        result = previous.result
        return PreviousRun(
            messages=messages,
            answer=result.answer if result is not None else None,
            reason=result.reason.value if result is not None else previous.status.value,
        )

    async def _undelivered(self, active: ActiveRun) -> None:
        """Close the run's inbox and log what it still held: accepted, never seen."""
        active.inbox_closed = True
        active.inbox.extend(await self.inbox.close(active.record.id))
        for content in active.take_messages():
            message = UserMessage(active.step, content, delivered=False)
            await self.recorder.record(active.record, message)


async def _logged(delivery: Coroutine[Any, Any, None], run_id: str) -> None:
    """A webhook delivery, a task of the app's task group: its failure is logged, never
    raised into the group (which would stop the service)."""
    try:
        await delivery
    except Exception:
        log.exception("webhook_failed", run_id=run_id)


def _queued_s(record: RunRecord) -> float:
    """How long a child run waited for a slot: its time counts from its creation, so its
    deadline is no later than the one its parent gave it (`trees.children.bounded`)."""
    return max(0.0, (utcnow() - record.created_at).total_seconds())

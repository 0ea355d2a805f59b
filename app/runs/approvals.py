"""Runs waiting for a person (DESIGN §9): suspend, decide, time out, cancel.

A waiting run holds no task and no execution slot: its state is its record (status
`requires_action`, `approval`) and its checkpoint, both in the store. Every change to a
waiting record goes through this desk under one lock (decisions, the approval timeout, cancel,
steering messages), so two requests never overwrite each other's change. One timer task
watches every waiting run's approval timeout (a heap, re-armed at start-up): thousands of
waiting runs cost a heap entry each. Once every pending call is decided the desk hands the
run back to the manager (`requeue`), which resumes it from its checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from app.engine.events import EventType
from app.engine.pending import Decision
from app.engine.policies import StopReason
from app.engine.state import RunState
from app.engine.steps import Suspended, UserMessage
from app.runs.errors import InvalidRunError, RunNotWaitingError, TooManyMessagesError
from app.runs.ports import RunAssembler
from app.runs.recorder import RunRecorder
from app.runs.records import (
    ApprovalDecision,
    ApprovalState,
    PendingApproval,
    RunRecord,
    RunStatus,
    utcnow,
)
from app.runs.store import RunStore

log = structlog.get_logger("finishline.runs")


async def resumed_state(
    store: RunStore, record: RunRecord
) -> tuple[RunState | None, list[Decision]]:
    """A run decided after waiting: its checkpoint and the decisions, for the engine (else
    None, []). The time it spent queued again after the last decision counts (max_time_s)."""
    approval = record.approval
    if approval is None:
        return None, []
    checkpoint = await store.load_checkpoint(record.id)
    if checkpoint is None:
        raise RuntimeError(f"run {record.id} waited without a checkpoint")
    state = RunState.from_checkpoint(checkpoint["state"])
    if approval.requeued_at is not None:
        state.elapsed_s += max(0.0, (utcnow() - approval.requeued_at).total_seconds())
    record.approval = None
    decided = approval.decided
    return state, [Decision(d.call_id, d.approved, d.message, d.arguments) for d in decided]


class ApprovalDesk:
    def __init__(
        self,
        *,
        store: RunStore,
        recorder: RunRecorder,
        assembler: RunAssembler,
        requeue: Callable[[RunRecord, list[str]], Awaitable[None]],
        max_pending_messages: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.recorder = recorder
        self.assembler = assembler
        self.requeue = requeue
        self.max_pending_messages = max_pending_messages
        self.clock = clock
        self._lock = asyncio.Lock()
        self._timeouts: list[tuple[float, str]] = []
        self._wake = asyncio.Event()

    # -- a run begins to wait -----------------------------------------------------------------

    async def suspend(
        self, record: RunRecord, suspended: Suspended, take_held: Callable[[], list[str]]
    ) -> None:
        """The engine suspended the run (its live `record`): store it waiting, with the
        steering messages it was sent and has not seen (`take_held`). From the moment its
        status says so, new messages and cancels come here and wait for the lock."""
        record.status = RunStatus.REQUIRES_ACTION
        async with self._lock:
            await self._store_waiting(record, suspended, take_held())
        self.arm(record)
        log.info("run_waiting", run_id=record.id, pending=len(suspended.pending))

    async def _store_waiting(
        self, record: RunRecord, suspended: Suspended, held: list[str]
    ) -> None:
        now = utcnow()
        record.approval = ApprovalState(
            pending=[
                PendingApproval(
                    call_id=c.call_id, tool=c.tool, arguments=c.arguments, requested_at=now
                )
                for c in suspended.pending
            ],
            waiting_since=now,
            held_messages=held,
        )
        await self.store.save(record)

    def arm(self, record: RunRecord) -> None:
        """Watch the run's approval timeout (from when it began waiting); a run with every
        call decided already (a shutdown came before it could resume) is due at once."""
        assert record.approval is not None
        due = record.approval.waiting_since.timestamp() + record.settings.approval_timeout_s
        if not record.approval.undecided():
            due = self.clock()
        heapq.heappush(self._timeouts, (due, record.id))
        if self._timeouts[0][1] == record.id:
            self._wake.set()

    async def rearm(self) -> int:
        """At start-up: watch the timeouts of every run the store holds waiting."""
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
                    self.arm(record)
                    count += 1
            if len(page) < 200:
                return count
            cursor = page[-1].id

    # -- requests on a waiting run --------------------------------------------------------------

    async def decide(self, run_id: str, decisions: Sequence[ApprovalDecision]) -> RunRecord:
        """Record decisions (all valid, or none); resume the run once none is pending."""
        async with self._lock:
            record = await self._waiting(run_id)
            state = record.approval
            assert state is not None
            undecided = {p.call_id: p for p in state.undecided()}
            seen: set[str] = set()
            for index, decision in enumerate(decisions):
                if decision.call_id in seen:
                    raise InvalidRunError(
                        f"decisions[{index}].call_id", f"{decision.call_id!r} is decided twice"
                    )
                seen.add(decision.call_id)
                pending = undecided.get(decision.call_id)
                if pending is None:
                    raise RunNotWaitingError(
                        f"run {run_id!r} is not waiting on call {decision.call_id!r}",
                        run_id=run_id,
                        call_id=decision.call_id,
                        pending=sorted(undecided),
                    )
                if decision.arguments is not None:
                    problem = await self.assembler.check_arguments(
                        record, pending.tool, decision.arguments
                    )
                    if problem is not None:
                        raise InvalidRunError(f"decisions[{index}].arguments", problem)
            await self._record(record, list(decisions))
            return record

    async def hold_message(self, run_id: str, content: str) -> RunRecord | None:
        """Keep a steering message for the resume; None when the run is not waiting."""
        async with self._lock:
            record = await self.store.get(run_id)
            if record is None or record.status != RunStatus.REQUIRES_ACTION:
                return None
            assert record.approval is not None
            held = record.approval.held_messages
            if len(held) >= self.max_pending_messages:
                raise TooManyMessagesError(
                    f"run {run_id!r} already holds {len(held)} undelivered messages",
                    run_id=run_id,
                    cap=self.max_pending_messages,
                )
            held.append(content)
            await self.store.save(record)
            log.info("user_message_held", run_id=run_id, chars=len(content))
            return record

    async def cancel(self, run_id: str) -> RunRecord | None:
        """End a waiting run cancelled; None when it is not waiting."""
        async with self._lock:
            record = await self.store.get(run_id)
            if record is None or record.status != RunStatus.REQUIRES_ACTION:
                return None
            state, record.approval = record.approval, None
            for content in state.held_messages if state is not None else ():
                message = UserMessage(record.usage.steps, content, delivered=False)
                await self.recorder.record(record, message)
            await self.recorder.end(record, StopReason.CANCELLED)
            return record

    async def _waiting(self, run_id: str) -> RunRecord:
        record = await self.store.get(run_id)
        if record is None or record.status != RunStatus.REQUIRES_ACTION:
            status = record.status.value if record is not None else "gone"
            raise RunNotWaitingError(
                f"run {run_id!r} is {status}: it waits on no decision", run_id=run_id
            )
        return record

    async def _record(self, record: RunRecord, decisions: list[ApprovalDecision]) -> None:
        state = record.approval
        assert state is not None
        for decision in decisions:
            data: dict[str, Any] = {
                "call_id": decision.call_id,
                "approved": decision.approved,
                "message": decision.message,
            }
            if decision.arguments is not None:
                data["arguments"] = decision.arguments
            await self.store.append(record.id, EventType.APPROVAL_DECIDED, record.usage.steps, data)
            state.decided.append(decision)
            log.info(
                "approval_decided",
                run_id=record.id,
                call_id=decision.call_id,
                approved=decision.approved,
            )
        if state.undecided():
            await self.store.save(record)
            return
        record.status = RunStatus.QUEUED
        state.requeued_at = state.requeued_at or utcnow()  # (set: a restart came between)
        held, state.held_messages = state.held_messages, []
        await self.store.save(record)
        await self.requeue(record, held)

    # -- the approval timeout -------------------------------------------------------------------

    async def watch(self) -> None:
        """The one timer task: rejects undecided calls of runs past their approval timeout."""
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
            try:
                await self._expire(run_id)
            except Exception:  # one bad record must not stop the timer of every other
                log.exception("approval_timeout_failed", run_id=run_id)

    async def _expire(self, run_id: str) -> None:
        async with self._lock:
            record = await self.store.get(run_id)
            if record is None or record.status != RunStatus.REQUIRES_ACTION:
                return  # decided, cancelled or deleted meanwhile
            state = record.approval
            assert state is not None
            timeout_s = record.settings.approval_timeout_s
            undecided = state.undecided()
            if undecided and state.waiting_since.timestamp() + timeout_s > self.clock():
                return  # an older wait of a run that waits again: its own entry is armed
            message = f"no decision within {timeout_s:g} s"
            log.info("approval_timed_out", run_id=run_id, undecided=len(undecided))
            decisions = [
                ApprovalDecision(call_id=p.call_id, approved=False, message=message)
                for p in undecided
            ]
            await self._record(record, decisions)

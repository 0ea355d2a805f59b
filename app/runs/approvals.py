"""Runs waiting for a person (DESIGN §9): suspend, decide, time out, cancel.

A waiting run holds no task and no execution slot: its state is its record (status
`requires_action`, `approval`) and its checkpoint, both in the store. Every change to a
waiting record (decisions, the approval timeout, cancel, steering messages) is worked out
here and written by a `WaitingRuns` (`app/runs/waiting.py`): under one lock in one process,
as a compare-and-set with replicas, so two requests never overwrite each other's change and
one of two concurrent decisions on a call wins. One timer task watches the approval
timeouts (`WaitingRuns.due`). Once every pending call is decided the run is queued again
(the manager's queue, or the cluster's) and resumes from its checkpoint.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from app.engine.events import EventType
from app.engine.pending import Decision
from app.engine.policies import StopReason
from app.engine.state import RunState
from app.engine.steps import Suspended, UserMessage
from app.runs.errors import InvalidRunError, RunNotWaitingError
from app.runs.ports import RunAssembler
from app.runs.recorder import RunRecorder
from app.runs.records import (
    ApprovalDecision,
    ApprovalState,
    RunRecord,
    RunStatus,
    utcnow,
)
from app.runs.store import RunStore
from app.runs.trees.approvals import pending_of, split, upward
from app.runs.waiting import NewEvent, WaitChange, WaitingRuns, waiting_event

log = structlog.get_logger("finishline.runs")


async def resumed_state(
    store: RunStore, record: RunRecord
) -> tuple[RunState | None, list[Decision]]:
    """A run decided after waiting: its checkpoint and the decisions, for the engine (else
    None, []). The time it spent queued again after the last decision counts (max_time_s).
    A fork (DESIGN §20) starts from the checkpoint it was made with, if any."""
    approval = record.approval
    if approval is None:
        forked = await store.load_checkpoint(record.id) if record.forked_from else None
        return (forked.run_state() if forked is not None else None), []
    checkpoint = await store.load_checkpoint(record.id)
    if checkpoint is None:
        raise RuntimeError(f"run {record.id} waited without a checkpoint")
    state = checkpoint.run_state()
    if approval.requeued_at is not None:
        state.elapsed_s += max(0.0, (utcnow() - approval.requeued_at).total_seconds())
    # kept on the record (not shown: it is not waiting) for a takeover (`retaken_state`)
    return state, _decisions(approval)


def retaken_state(record: RunRecord, state: RunState | None) -> list[Decision]:
    """A run taken over (replicas) after it waited for a person and was decided: its clock
    counts the time since the last decision, not the wait, and if it is taken over before it
    settled the calls it waited on (its checkpoint still holds them), their decisions."""
    approval = record.approval
    if state is None or approval is None or approval.requeued_at is None:
        return []
    since = max(0.0, (utcnow() - approval.requeued_at).total_seconds())
    state.elapsed_s = approval.elapsed_s + since
    return _decisions(approval) if state.pending else []


def _decisions(approval: ApprovalState) -> list[Decision]:
    """The engine's decisions: on the run's own calls (a sub-agent call whose child waited
    re-attaches to it, whatever was decided below)."""
    return [
        Decision(d.call_id, d.approved, d.message, d.arguments, d.result)
        for d in approval.decided
        if d.run_id is None
    ]


class ApprovalDesk:
    def __init__(
        self,
        *,
        store: RunStore,
        recorder: RunRecorder,
        assembler: RunAssembler,
        waiting: WaitingRuns,
        max_argument_chars: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.recorder = recorder
        self.assembler = assembler
        self.waiting = waiting
        self.max_argument_chars = max_argument_chars
        """The longest edited arguments (as JSON text) a decision may carry, as a model's
        arguments (`FINISHLINE_MAX_REPLY_CHARS`); 0: no cap."""
        self.clock = clock

    # -- a run begins to wait -----------------------------------------------------------------

    async def suspend(
        self, record: RunRecord, suspended: Suspended, take_held: Callable[[], list[str]]
    ) -> None:
        """The engine suspended the run (its live `record`): store it waiting, with the
        steering messages it was sent and has not seen (`take_held`). From the moment its
        status says so, new messages, decisions and cancels change the stored record."""
        now = utcnow()
        record.status = RunStatus.REQUIRES_ACTION
        record.approval = ApprovalState(
            pending=pending_of(suspended, now),
            waiting_since=now,
            elapsed_s=await self._elapsed(record.id),
        )
        # the record waiting, then the wait's event (DESIGN §19), in one write
        await self.waiting.suspend(record, take_held(), waiting_event(record, suspended.step))
        log.info("run_waiting", run_id=record.id, pending=len(suspended.pending))
        for call in suspended.pending:  # a child that went on meanwhile: this run goes on too
            child = await self.store.get(call.child_run_id) if call.child_run_id else None
            if child is not None and child.status != RunStatus.REQUIRES_ACTION:
                await self.went_on(child)

    async def _elapsed(self, run_id: str) -> float:
        """The running time of the checkpoint the engine saved just before it suspended."""
        checkpoint = await self.store.load_checkpoint(run_id)
        return checkpoint.run_state().elapsed_s if checkpoint else 0.0

    async def rearm(self) -> int:
        """At start-up: watch the timeouts of every run the store holds waiting."""
        return await self.waiting.rearm()

    # -- requests on a waiting run --------------------------------------------------------------

    async def decide(self, run_id: str, decisions: Sequence[ApprovalDecision]) -> RunRecord:
        """Record decisions (all valid, or none); resume the run once none is pending. Of
        concurrent decisions on one call, one is recorded; the others find it decided (409)."""
        self._check_sizes(decisions)
        # a call a child run waits on is decided there (DESIGN §15), then here
        own, forwarded = split(run_id, await self.store.get(run_id), decisions)
        for child_id, theirs in forwarded.items():
            await self.decide(child_id, theirs)
        if forwarded and not own:
            fresh = await self.store.get(run_id)
            assert fresh is not None
            return fresh
        decisions = own
        # edited arguments are checked against the tool's schema first, off the event loop
        # (the change below is applied synchronously, perhaps more than once)
        problems = await self._argument_problems(run_id, decisions)

        def changer(record: RunRecord | None, held: list[str]) -> WaitChange:
            record = _waiting(run_id, record)
            state = record.approval
            assert state is not None
            undecided = {p.call_id: p for p in state.undecided() if p.run_id is None}
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
                client = pending.tool in {t.name for t in record.request.client_tools}
                where = f"decisions[{index}]"
                if decision.result is not None and not (client and decision.approved):
                    what = "approved client tool call" if client else "client tool call"
                    raise InvalidRunError(
                        f"{where}.result", f"is the answer of an {what}; this call is not one"
                    )
                if client and decision.approved and decision.result is None:
                    raise InvalidRunError(
                        f"{where}.result",
                        f"{pending.tool!r} runs in the client: approve it with its result",
                    )
                if decision.arguments is not None:
                    if decision.call_id not in problems:  # began to wait on it meanwhile
                        raise RunNotWaitingError(
                            f"run {run_id!r} changed while the decision was checked; send it again",
                            run_id=run_id,
                            call_id=decision.call_id,
                        )
                    problem = problems[decision.call_id]
                    if problem is not None:
                        raise InvalidRunError(f"decisions[{index}].arguments", problem)
            return _decided(record, list(decisions))

        change = await self.waiting.change(run_id, changer)
        assert change is not None
        _log_decided(change)
        await self._upward(change, list(decisions))
        return change.record

    # -- a tree of runs (DESIGN §15) --------------------------------------------------------

    async def went_on(self, child: RunRecord) -> None:
        """A child run went on (queued again) or ended: a parent waiting on it goes on too."""
        if child.parent_run_id is not None:
            await self._climb(child, [], went_on=True)

    async def _upward(self, change: WaitChange, decided: list[ApprovalDecision]) -> None:
        """Decisions recorded on a child run: recorded by the ancestors listing its calls."""
        child = change.record
        if child.parent_run_id is not None:
            mirrored = [d.model_copy(update={"run_id": child.id}) for d in decided]
            await self._climb(child, mirrored, went_on=change.requeue)

    async def _climb(
        self, child: RunRecord, decided: list[ApprovalDecision], *, went_on: bool
    ) -> None:
        while child.parent_run_id is not None:
            changer = functools.partial(_upward_change, child, decided, went_on)
            change = await self.waiting.change(child.parent_run_id, changer)
            if change is None:
                return
            _log_decided(change)
            went_on, child = change.requeue, change.record

    def _check_sizes(self, decisions: Sequence[ApprovalDecision]) -> None:
        """Edited arguments are capped as a model's are: a call whose arguments are longer
        than a model may send never runs, whoever wrote them (InvalidRunError, the cap)."""
        cap = self.max_argument_chars
        for index, decision in enumerate(decisions):
            if decision.arguments is None or cap <= 0:
                continue
            size = len(json.dumps(decision.arguments, ensure_ascii=False, separators=(",", ":")))
            if size > cap:
                raise InvalidRunError(
                    f"decisions[{index}].arguments",
                    f"{size:,} characters of JSON exceeds the server cap of {cap:,} "
                    "(FINISHLINE_MAX_REPLY_CHARS, as a model's arguments)",
                    cap=cap,
                )

    async def _argument_problems(
        self, run_id: str, decisions: Sequence[ApprovalDecision]
    ) -> dict[str, str | None]:
        """Why each edited call's arguments do not fit its tool (None: they do), by call id,
        for the calls the run waits on now."""
        edited = {d.call_id: d.arguments for d in decisions if d.arguments is not None}
        record = await self.store.get(run_id) if edited else None
        if record is None or record.approval is None:
            return {}
        tools = {p.call_id: p.tool for p in record.approval.undecided()}
        return {
            call_id: await self.assembler.check_arguments(record, tools[call_id], arguments)
            for call_id, arguments in edited.items()
            if call_id in tools and arguments is not None
        }

    async def cancel(self, run_id: str) -> RunRecord | None:
        """End a waiting run cancelled; None when it is not waiting."""

        def changer(record: RunRecord | None, held: list[str]) -> WaitChange | None:
            if record is None or record.status != RunStatus.REQUIRES_ACTION:
                return None
            record.approval = None
            step = record.usage.steps
            unseen = [UserMessage(step, content, delivered=False) for content in held]
            events = [NewEvent(m.type, m.step, m.payload()) for m in unseen]
            final = NewEvent(*self.recorder.ending(record, StopReason.CANCELLED))
            return WaitChange(record, events, final=final)

        change = await self.waiting.change(run_id, changer)
        if change is None:
            return None
        self.recorder.ended(change.record)
        return change.record

    # -- the approval timeout -------------------------------------------------------------------

    async def watch(self) -> None:
        """The one timer task: rejects undecided calls of runs past their approval timeout."""
        while True:
            for run_id in await self.waiting.due():
                try:
                    await self._expire(run_id)
                except Exception:  # one bad record must not stop the timer of every other
                    log.exception("approval_timeout_failed", run_id=run_id)

    async def _expire(self, run_id: str) -> None:
        def changer(record: RunRecord | None, held: list[str]) -> WaitChange | None:
            if record is None or record.status != RunStatus.REQUIRES_ACTION:
                return None  # decided, cancelled or deleted meanwhile
            state = record.approval
            assert state is not None
            timeout_s = record.settings.approval_timeout_s
            undecided = [p for p in state.undecided() if p.run_id is None]  # (a child's: its own)
            if undecided and state.waiting_since.timestamp() + timeout_s > self.clock():
                return None  # an older wait of a run that waits again: its own entry is armed
            if not undecided and state.undecided():
                return None  # it waits on its children's calls alone: they time out there
            message = f"no decision within {timeout_s:g} s"
            decisions = [
                ApprovalDecision(call_id=p.call_id, approved=False, message=message)
                for p in undecided
            ]
            return _decided(record, decisions)

        change = await self.waiting.change(run_id, changer)
        if change is not None:
            log.info("approval_timed_out", run_id=run_id, undecided=len(change.events))
            _log_decided(change)
            approval = change.record.approval
            decided = approval.decided[-len(change.events) :] if approval and change.events else []
            await self._upward(change, decided)


def _upward_change(
    child: RunRecord,
    decided: list[ApprovalDecision],
    went_on: bool,
    parent: RunRecord | None,
    held: list[str],
) -> WaitChange | None:
    return upward(parent, child, decided, went_on)


def _waiting(run_id: str, record: RunRecord | None) -> RunRecord:
    if record is None or record.status != RunStatus.REQUIRES_ACTION:
        status = record.status.value if record is not None else "gone"
        raise RunNotWaitingError(
            f"run {run_id!r} is {status}: it waits on no decision", run_id=run_id
        )
    return record


def _decided(record: RunRecord, decisions: list[ApprovalDecision]) -> WaitChange:
    """The change that records `decisions`; the run is queued again once none is pending."""
    state = record.approval
    assert state is not None
    events = []
    for decision in decisions:
        data: dict[str, Any] = {
            "call_id": decision.call_id,
            "approved": decision.approved,
            "message": decision.message,
        }
        if decision.arguments is not None:
            data["arguments"] = decision.arguments
        if decision.result is not None:
            data["result"] = decision.result
        events.append(NewEvent(EventType.APPROVAL_DECIDED, record.usage.steps, data))
        state.decided.append(decision)
    if state.undecided():
        return WaitChange(record, events)
    record.status = RunStatus.QUEUED
    state.requeued_at = state.requeued_at or utcnow()  # (set: a restart came between)
    return WaitChange(record, events, requeue=True)


def _log_decided(change: WaitChange) -> None:
    for event in change.events:
        log.info(
            "approval_decided",
            run_id=change.record.id,
            call_id=event.data["call_id"],
            approved=event.data["approved"],
        )
    if change.requeue:
        log.info("run_requeued", run_id=change.record.id)

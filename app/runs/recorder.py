"""Writing a run down as it goes: each engine step becomes an event in the run's log (or its
checkpoint), and the run's end makes the record terminal with its terminal event.

Events are queued to the store (`append_soon`) and the run goes on while they are made
durable, many in one commit; a subscriber sees each only once it is durable. The run waits
for everything it queued (and fails if a write failed) where it matters: before a call that
must not run twice can run (the `action` of a non-idempotent tool or of a sub-agent; an
idempotent tool's action is queued like any event, issue #42), at a checkpoint taken while a
step's calls are in flight (a resume elsewhere must find it before a non-idempotent call
runs), before it waits for a person, at its end (its closing write queued behind them:
`RunStore.append_closing`), and when `MAX_UNSETTLED` writes are in flight. Every other
checkpoint is queued too (`save_checkpoint_soon`): it commits with the run's next events,
and the run goes on to its next model call without waiting for a commit."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from app.engine.events import EventType
from app.engine.policies import StopReason
from app.engine.ports import OutputError
from app.engine.state import checkpoint_usage
from app.engine.steps import (
    Action,
    Checkpoint,
    Finished,
    Observation,
    RunError,
    Step,
    Suspended,
)
from app.runs.metrics import RunMetrics
from app.runs.quotas.seam import Quotas
from app.runs.records import (
    TERMINAL_EVENTS,
    RunErrorInfo,
    RunRecord,
    RunResult,
    RunStatus,
    Usage,
    status_for,
    utcnow,
)
from app.runs.store import DayUsage, RunStore, WritesFailedError

log = structlog.get_logger("finishline.runs")


def spent(llm_call: dict[str, Any]) -> DayUsage:
    """What an `llm.call` event's call adds to its API key's day."""
    cost = llm_call["cost_usd"]
    return DayUsage(  # runs, llm_calls, unpriced_calls, prompt, completion tokens, USD
        0,
        1,
        int(cost is None),
        llm_call["prompt_tokens"],
        llm_call["completion_tokens"],
        cost or 0.0,
    )


MAX_UNSETTLED = 256
"""Queued appends of one run at most before it waits for them (a model streaming tokens
faster than the disk takes them slows down instead of queueing without bound)."""


class RunRecorder:
    def __init__(
        self,
        *,
        store: RunStore,
        metrics: RunMetrics,
        quotas: Quotas,
        max_event_content_chars: int,
        on_ended: Callable[[RunRecord], None],
        max_answer_chars: int = 100_000,
        in_flight_checkpoints: bool = True,
    ) -> None:
        self.store = store
        self.quotas = quotas
        self.in_flight_checkpoints = in_flight_checkpoints
        """False: skip the checkpoints taken while a step's calls are in flight (`acting`),
        which only a resume in another process reads (a store no other process serves
        never resumes a run that way: it fails runs a crash interrupted)."""
        self.metrics = metrics
        self.max_event_content_chars = max_event_content_chars
        self.on_ended = on_ended
        self.max_answer_chars = max_answer_chars
        self._unsettled: dict[str, list[Awaitable[Any]]] = {}
        """Per run, the appends queued and not yet known stored (see the module's doc)."""
        self._failures_before: dict[str, int] = {}
        """Per run with writes queued, the store's `write_failures()` before the first."""

    async def settle(self, run_id: str) -> None:
        """Wait until every append queued for the run is stored; raise the first error."""
        queued = self._unsettled.pop(run_id, None)
        self._failures_before.pop(run_id, None)
        if queued is not None:
            for outcome in queued:
                await outcome

    def forget(self, run_id: str) -> None:
        """The run is no longer this process's (ended, or taken over): drop what it queued."""
        self._unsettled.pop(run_id, None)
        self._failures_before.pop(run_id, None)

    async def record(self, record: RunRecord, step: Step) -> None:
        """Store one step of the engine: an event, the checkpoint, or the run's end."""
        if isinstance(step, Checkpoint):
            state = step.state
            if state.get("acting") and not self.in_flight_checkpoints:
                return
            record.usage = Usage(**checkpoint_usage(state).to_dict())
            if state.get("acting"):  # a resume elsewhere may not run a non-idempotent call
                await self.store.save_checkpoint(record.id, step.step, state)  # twice: stored
                await self.settle(record.id)  # before the step's calls run
                return
            queued = self.pending(record.id)
            queued.append(await self.store.save_checkpoint_soon(record.id, step.step, state))
            if len(queued) >= MAX_UNSETTLED:  # else no wait: it commits with the run's next
                await self.settle(record.id)  # events
            return
        if isinstance(step, Suspended):  # the manager's (app.runs.approvals); not an event
            await self.settle(record.id)
            return
        if isinstance(step, Finished):
            usage = step.usage.to_dict()
            await self.end(
                record,
                step.reason,
                step.answer,
                step.degraded,
                usage,
                step.error,
                output=step.output,
                output_errors=step.output_errors,
            )
            return
        data = step.payload()
        self.metrics.step_recorded(step.type, data)
        call: DayUsage | None = None
        if isinstance(step, Observation):
            self.metrics.tool_call(step.tool, step.duration_ms, timed_out=step.timed_out)
            if len(step.content) > self.max_event_content_chars:
                data["content"] = step.content[: self.max_event_content_chars]
                data["content_capped"] = True
        elif step.type == EventType.LLM_CALL:
            call = spent(data)
            self.metrics.llm_call(data["duration_ms"], data["model"], data["cost_usd"])
            self.metrics.key_spent(
                record.owner, call.prompt_tokens, call.completion_tokens, call.cost_usd
            )
        queued = self.pending(record.id)
        queued.append(await self.store.append_soon(record.id, step.type, step.step, data))
        if call is not None:  # the key's day (DESIGN §13): before the run's next budget check
            queued.append(await self.quotas.spend(record.owner, call))
        if (isinstance(step, Action) and not step.repeatable) or len(queued) >= MAX_UNSETTLED:
            await self.settle(record.id)  # stored before a call that must not repeat runs

    def pending(self, run_id: str) -> list[Awaitable[Any]]:
        """The run's queued writes, to add the outcome of the next one to (as `append_soon`
        returns it): waited for, and its error raised, where the run waits next. Ask before
        queuing the write: a new list notes the store's `write_failures()` first, which the
        run's closing write is made against (`end`)."""
        queued = self._unsettled.get(run_id)
        if queued is None:
            queued = self._unsettled[run_id] = []
            self._failures_before[run_id] = self.store.write_failures()
        return queued

    async def end(
        self,
        record: RunRecord,
        reason: StopReason,
        answer: str | None = None,
        degraded: bool = False,
        usage: dict[str, Any] | None = None,
        error: RunError | None = None,
        *,
        output: Any = None,
        output_errors: Sequence[OutputError] | None = None,
    ) -> None:
        """Store the record terminal and the terminal event in one write, after everything
        queued before; then `on_ended`. With writes of the run still queued, the closing
        write is queued behind them (one commit for both, `RunStore.append_closing`), and
        refused if one of them fails: the record is then put back as it was, and the failed
        write's error raised (the caller fails the run)."""
        failures = self._failures_before.get(record.id)
        before = record.model_copy()
        terminal = self.ending(
            record,
            reason,
            answer,
            degraded,
            usage,
            error,
            output=output,
            output_errors=output_errors,
        )
        if failures is None:  # nothing queued: the closing write alone
            await self.store.append(record.id, *terminal, record=record)
        else:
            await self._close_behind_queued(record, before, terminal, failures)
        self.ended(record)

    async def _close_behind_queued(
        self,
        record: RunRecord,
        before: RunRecord,
        terminal: tuple[EventType, int, dict[str, Any]],
        failures: int,
    ) -> None:
        closing = await self.store.append_closing(
            record.id, *terminal, record=record, failures=failures
        )
        try:
            await self.settle(record.id)
        except Exception as exc:
            if not await _stored(closing):  # refused, as it must be: the run is not over
                _put_back(record, before)
                raise
            # a write no store failure counted failed: the run has ended all the same
            log.error("run_write_failed_after_end", run_id=record.id, error=repr(exc))
        else:
            try:
                await closing
            except WritesFailedError:  # another run's write failed meanwhile, none of this one's
                await self.store.append(record.id, *terminal, record=record)

    def ending(
        self,
        record: RunRecord,
        reason: StopReason,
        answer: str | None = None,
        degraded: bool = False,
        usage: dict[str, Any] | None = None,
        error: RunError | None = None,
        *,
        output: Any = None,
        output_errors: Sequence[OutputError] | None = None,
    ) -> tuple[EventType, int, dict[str, Any]]:
        """Make the record terminal (in memory) and give its terminal event (type, step,
        data), for a caller that stores both itself (in one transaction); then `ended`.
        A run with an output schema gets its `output` and `output_errors` in its result."""
        status = status_for(reason)
        record.status = status
        record.ended_at = utcnow()
        if answer is not None and len(answer) > self.max_answer_chars:
            cap = self.max_answer_chars
            answer = f"{answer[:cap]}\n\n[Answer cut at {cap:,} characters of {len(answer):,}.]"
        typed: dict[str, Any] = {}
        if record.request.output_schema is not None:
            errors = [e.to_dict() for e in output_errors] if output_errors is not None else None
            typed = {"output": output, "output_errors": errors}
        record.result = RunResult(answer=answer, reason=reason, degraded=degraded, **typed)
        record.error = RunErrorInfo(type=error.type, message=error.message) if error else None
        if usage is not None:
            record.usage = Usage(**usage)
        data: dict[str, Any] = {"usage": record.usage.model_dump()}
        if status in (RunStatus.COMPLETED, RunStatus.INCOMPLETE):
            data["result"] = record.result.model_dump(mode="json")
        elif status == RunStatus.FAILED:
            data["error"] = record.error.model_dump() if record.error else None
        return TERMINAL_EVENTS[status], record.usage.steps, data

    def ended(self, record: RunRecord) -> None:
        """The run's terminal record and event are stored: log, count, tell `on_ended`."""
        assert record.result is not None
        log.info(
            "run_ended",
            run_id=record.id,
            status=record.status.value,
            reason=record.result.reason.value,
        )
        self.metrics.run_ended(record)
        self.on_ended(record)


async def _stored(outcome: Awaitable[Any]) -> bool:
    try:
        await outcome
    except Exception:
        return False
    return True


def _put_back(record: RunRecord, before: RunRecord) -> None:
    """Undo `RunRecorder.ending` (what it set on the record)."""
    for name in ("status", "ended_at", "result", "error", "usage"):
        setattr(record, name, getattr(before, name))

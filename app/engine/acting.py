"""The acting half of a step: one reply's tool calls, run concurrently, observed in the log
as each ends and appended to the conversation in call order.

`task_finished` is handled here: alone and valid, it ends the run (`ToolStep.finished`);
beside other calls, the others run and the model is told to call it alone afterwards.

A step redone after an interruption (its run resumed from a checkpoint taken while its calls
were in flight, DESIGN §8) is given `redo`, the results recorded before the interruption: a
call with a recorded result is not run again (its observation is in the log already); an
idempotent tool runs again; a call of another tool gets an `is_error` observation saying its
outcome is unknown, and the model decides what to do.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from app.engine.children import Delegation, outcome_of
from app.engine.context import RunContext
from app.engine.delegating import AgentTool, ChildOutcome
from app.engine.guard import CancelRequestedError, DeadlineError, abandon
from app.engine.pending import PendingCall
from app.engine.policies import InterventionKind, StopReason
from app.engine.ports import Reply, ToolCall
from app.engine.prompts import TASK_FINISHED
from app.engine.specs import only_finish
from app.engine.steps import Action, ApprovalRequested, Intervention, Observation, Step
from app.engine.toolcalls import (
    CallResult,
    PreparedCall,
    execute,
    execute_within,
    parse_arguments,
    prepare,
    timed_out,
)
from app.engine.truncate import truncate
from app.engine.typed import (
    CheckedAnswer,
    check_argument,
    invalid_answer_text,
    rejected,
)

_NONE: frozenset[str] = frozenset()
_NONE_REJECTED: frozenset[int] = frozenset()


class ToolStep:
    """The reply's calls; the reply's assistant message is the conversation's last already."""

    def __init__(
        self,
        run: RunContext,
        reply: Reply,
        redo: Mapping[str, CallResult] | None = None,
        forced: str | None = None,
    ) -> None:
        self.run = run
        self.reply = reply
        self.redo = redo
        self.forced = forced
        """The tool the reply had to call (a planning call's `update_plan`): its calls of it
        are what was asked, never repetitions."""
        self.finished: str | None = None
        """The answer, when the model called task_finished alone with valid arguments (with
        an output schema: an answer that validates, as JSON text; its value is `output`)."""
        self.output: Any = None
        self.invalid: CheckedAnswer | None = None
        """With an output schema: the reply's answer that failed it, when none validated."""
        self.invalid_ends = False
        """The invalid answer was the model's last try (`max_output_retries`)."""
        self._rejected: list[tuple[PreparedCall, CheckedAnswer]] = []
        self._shown: dict[int, str] = {}
        self.pending: list[PendingCall] = []
        """Calls of tools that need approval: not executed, waiting for a person."""

    def __aiter__(self) -> AsyncIterator[Step]:
        return self._steps()

    async def _steps(self) -> AsyncIterator[Step]:
        run, st = self.run, self.run.state
        calls = self.reply.tool_calls
        finishing = run.limits.stop_tool and only_finish(calls)
        prepared: list[PreparedCall] = []
        counted = 0
        for call in calls:
            counted += call.name != TASK_FINISHED
            item = self._prepare(call, finishing)
            prepared.append(item)
            self.run.log.info("tool_called", tool=call.name, call_id=call.id)
            yield Action(st.step, call.id, call.name, item.arguments, _repeatable(item))
            if item.runnable and call.name in run.approval and isinstance(item.arguments, dict):
                self.pending.append(PendingCall(call.id, call.name, item.arguments))
                self.run.log.info("approval_requested", tool=call.name, call_id=call.id)
                yield ApprovalRequested(st.step, call.id, call.name, item.arguments)
        if self.finished is not None:
            return
        rejected = self._rejection() if self._rejected else _NONE_REJECTED
        waiting = {p.call_id for p in self.pending} if self.pending else _NONE
        st.pending = list(self.pending)
        st.tool_calls += counted

        runnable: list[int] = []
        children: Delegation | None = None
        try:
            for index, item in enumerate(prepared):
                if not item.runnable:
                    if item.repeated:
                        self.run.log.info("intervened", kind=InterventionKind.REPETITION.value)
                        yield Intervention(st.step, InterventionKind.REPETITION, item.reply or "")
                    elif id(item) in rejected:
                        yield run.intervention(InterventionKind.INVALID_OUTPUT, item.reply or "")
                    yield self._observe(index, item, CallResult(item.reply or "", item.is_error, 0))
                    continue
                if item.call.id in waiting:
                    continue
                if self.redo is not None:
                    observation = self._redone(index, item, self.redo)
                    if observation is not None:
                        yield observation
                if index not in self._shown:
                    runnable.append(index)
            try:
                agents = {
                    i: (prepared[i].call, tool)
                    for i in runnable
                    if isinstance(tool := prepared[i].tool, AgentTool)
                }
                if agents:  # sub-agents: their child runs start first (DESIGN §15)
                    children = Delegation(run, agents)
                    async for index, started in children.start():
                        if isinstance(started, CallResult):  # not started: the model is told
                            runnable.remove(index)
                            yield self._observe(index, prepared[index], started)
                        else:
                            yield started
                if len(runnable) == 1 and children is not None and runnable[0] in children.handles:
                    index = runnable[0]
                    outcome = await children.wait_alone(index)
                    for step in self._child_ended(children, index, prepared[index], outcome):
                        yield step
                elif len(runnable) == 1:  # the common case: no task needed
                    index = runnable[0]
                    result = await self._execute_alone(prepared[index])
                    yield self._observe(index, prepared[index], result)
                elif runnable:
                    async for step in self._execute_concurrently(prepared, runnable, children):
                        yield step
            except (CancelRequestedError, DeadlineError) as exc:
                if children is not None:
                    children.stop_unfinished()
                cancelled = isinstance(exc, CancelRequestedError)
                reason = StopReason.CANCELLED if cancelled else StopReason.TIMEOUT
                for index in runnable:
                    if index not in self._shown and not self._waits(prepared[index]):
                        item = prepared[index]
                        text = run.prompts.call_interrupted.format(
                            tool=item.call.name, reason=reason.value
                        )
                        yield self._observe(index, item, CallResult(text, True, 0))
                raise
        finally:
            for index, item in enumerate(prepared):
                if index in self._shown:
                    st.append(
                        {
                            "role": "tool",
                            "tool_call_id": item.call.id,
                            "content": self._shown[index],
                        }
                    )

    def _rejection(self) -> set[int]:
        """The reply's answers all failed the output schema: one more invalid answer for the
        run; each call is told its errors and the tries left (0: the run ends)."""
        self.invalid = self._rejected[-1][1]
        left, self.invalid_ends = rejected(self.run, self.invalid)
        for item, checked in self._rejected:
            item.reply = invalid_answer_text(self.run.prompts.invalid_output, checked, left)
        return {id(item) for item, _ in self._rejected}

    def _waits(self, item: PreparedCall) -> bool:
        """Whether the call waits on a child that waits for a person (no result yet)."""
        return any(p.call_id == item.call.id for p in self.pending)

    def _child_ended(
        self, children: Delegation, index: int, item: PreparedCall, outcome: ChildOutcome
    ) -> list[Step]:
        """A sub-agent call's child is done for now: ended (its `agent.finished` and the
        observation), or waiting for a person (the run will wait on the call too)."""
        steps, result = children.finish(index, outcome)
        if result is None:
            self.pending.append(children.waiting_call(index, outcome, item.arguments))
            self.run.state.pending = list(self.pending)
            return steps
        return [*steps, self._observe(index, item, result)]

    def _redone(
        self, index: int, item: PreparedCall, recorded: Mapping[str, CallResult]
    ) -> Observation | None:
        """A call of a step redone after an interruption: its recorded result (not logged
        again: None), nothing for an idempotent tool (it runs again) or a sub-agent (its
        child is found again: its usage counts, its end is logged again), else outcome
        unknown."""
        if isinstance(item.tool, AgentTool):  # re-attaches to its child: never a second one
            return None
        result = recorded.get(item.call.id)
        if result is not None:
            self._observe(index, item, result)
            self.run.log.info("tool_result_recovered", tool=item.call.name, call_id=item.call.id)
            return None
        if item.tool is None or item.tool.idempotent:
            return None
        text = self.run.prompts.outcome_unknown.format(tool=item.call.name)
        self.run.log.warning("tool_outcome_unknown", tool=item.call.name, call_id=item.call.id)
        return self._observe(index, item, CallResult(text, True, 0))

    async def _execute_alone(self, item: PreparedCall) -> CallResult:
        """One call, awaited in the run's own task under one scope for both the per-tool
        timeout and the run's deadline and cancel."""
        run = self.run
        tool_deadline = run.clock() + run.limits.tool_timeout_s
        try:
            with run.guard.scope(min(tool_deadline, run.deadline)):
                return await execute(item, run.tool_ctx, run.prompts)
        except DeadlineError:
            if tool_deadline >= run.deadline:
                raise
            return timed_out(item, run.limits.tool_timeout_s, run.prompts)

    async def _execute_concurrently(
        self, prepared: list[PreparedCall], runnable: list[int], children: Delegation | None
    ) -> AsyncIterator[Step]:
        """Run the calls in tasks of their own (a sub-agent call awaits its child, bounded
        by the run's deadline alone); observe each as it ends. While only children are left,
        the run's slot is lent. On a cancel or the deadline, the unfinished ones are abandoned
        (the caller reports them interrupted)."""
        limits, ctx, prompts = self.run.limits, self.run.tool_ctx, self.run.prompts
        handles = children.handles if children is not None else {}
        tasks: dict[asyncio.Future[CallResult | ChildOutcome], int] = {}
        for i in runnable:
            work = (
                outcome_of(handles[i])
                if i in handles
                else execute_within(prepared[i], ctx, limits.tool_timeout_s, prompts)
            )
            tasks[asyncio.ensure_future(work)] = i
        pending = set(tasks)
        try:
            while pending:
                idle = children is not None and children.only_children(tasks[t] for t in pending)
                done = await self._wait(pending, idle)
                for task in sorted(done, key=tasks.__getitem__):
                    pending.discard(task)
                    index = tasks[task]
                    result = task.result()
                    if isinstance(result, ChildOutcome):
                        assert children is not None
                        for step in self._child_ended(children, index, prepared[index], result):
                            yield step
                    else:
                        yield self._observe(index, prepared[index], result)
        finally:
            for task in pending:
                abandon(task)

    async def _wait(
        self, pending: set[asyncio.Future[CallResult | ChildOutcome]], idle: bool
    ) -> set[asyncio.Future[CallResult | ChildOutcome]]:
        """Until one of `pending` is done; `idle` (children alone): the run's slot is lent."""
        port = self.run.subagents if idle else None
        if port is not None:
            port.lend()
        try:
            return await self.run.guard.wait_any(pending, self.run.deadline)
        finally:
            if port is not None:
                port.reclaim()

    def _prepare(self, call: ToolCall, finishing: bool) -> PreparedCall:
        run = self.run
        if call.oversize:  # arguments over the cap: dropped (app.engine.replycap), never run
            text = run.prompts.arguments_too_long.format(tool=call.name, chars=call.oversize)
            shown = f"[{call.oversize:,} characters of arguments, over the cap: not kept]"
            return PreparedCall(call=call, arguments=shown, reply=text, is_error=True)
        if not (run.limits.stop_tool and call.name == TASK_FINISHED):
            tools, forced = run.tools, call.name == self.forced
            return prepare(
                call, tools, run.state, run.limits, run.prompts, run.available_tools, forced
            )
        arguments, shown, error = parse_arguments(call.arguments)
        item = PreparedCall(call=call, arguments=shown, is_error=True)
        if not finishing:
            item.reply = run.prompts.finish_beside_others
        elif arguments is None:
            item.reply = run.prompts.bad_json.format(tool=call.name, error=error)
        elif run.output is not None:
            if "answer" not in arguments:
                problem = "'answer' is a required property"
                item.reply = run.prompts.bad_arguments.format(tool=call.name, error=problem)
            elif self.finished is None:
                checked = check_argument(run.output, arguments["answer"])
                if checked.valid:
                    self.finished, self.output = checked.text, checked.output
                    item.reply, item.is_error = "", False
                else:
                    self._rejected.append((item, checked))
        elif not isinstance(arguments.get("answer"), str):
            problem = "'answer' is a required property and must be a string"
            item.reply = run.prompts.bad_arguments.format(tool=call.name, error=problem)
        elif self.finished is None:
            self.finished = arguments["answer"]
            item.reply, item.is_error = "", False
        return item

    def _observe(self, index: int, item: PreparedCall, result: CallResult) -> Observation:
        run = self.run
        shown = truncate(result.text, run.limits.max_tool_result_chars, run.prompts.truncation_note)
        self._shown[index] = shown.text
        if item.runnable and item.key is not None:
            run.state.earlier_results[item.key] = shown.text
        self.run.log.info(
            "tool_returned",
            tool=item.call.name,
            call_id=item.call.id,
            is_error=result.is_error,
            duration_ms=result.duration_ms,
            truncated=shown.truncated,
            repeated=item.repeated,
        )
        return Observation(  # positional, in field order: 12 keywords cost 0.35 us to match
            run.state.step,
            item.call.id,
            item.call.name,
            result.text,  # content
            result.is_error,
            shown.truncated,
            shown.original_chars,
            shown.shown_chars,
            result.duration_ms,
            item.repeated,
            result.timed_out,
            shown.text if shown.truncated else None,  # model_content
        )


def _repeatable(item: PreparedCall) -> bool:
    """Whether the call may run again without harm, or will not run: its action need not be
    stored before it runs (a non-idempotent tool's and a sub-agent's must be)."""
    if not item.runnable or item.tool is None:
        return True
    return item.tool.idempotent and not isinstance(item.tool, AgentTool)

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
import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from app.engine.context import RunContext
from app.engine.guard import CancelRequestedError, DeadlineError, abandon
from app.engine.pending import PendingCall
from app.engine.policies import InterventionKind, StopReason
from app.engine.ports import Message, OutputSchema, Reply, Tool, ToolCall, ToolSpec
from app.engine.prompts import TASK_FINISHED, Prompts
from app.engine.replycap import restored_call
from app.engine.steps import Action, ApprovalRequested, Intervention, Observation, Step
from app.engine.tokens import estimate_tokens
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
    finish_spec,
    invalid_answer_text,
    rejected,
)


@functools.lru_cache(maxsize=32)  # prompt sets are made at start-up: a handful
def task_finished_spec(prompts: Prompts) -> ToolSpec:
    """The stop tool's spec in `prompts`' language: made once per prompt set, shared."""
    return ToolSpec(
        name=TASK_FINISHED,
        description=prompts.task_finished_description,
        parameters={
            "type": "object",
            "properties": {
                "answer": {"type": "string", "description": prompts.task_finished_answer}
            },
            "required": ["answer"],
            "additionalProperties": False,
        },
    )


@functools.lru_cache(maxsize=32)  # prompt sets are made at start-up: a handful
def _finish_spec_tokens(prompts: Prompts) -> int:
    return _estimate_specs([task_finished_spec(prompts)])


def _estimate_specs(specs: Sequence[ToolSpec]) -> int:
    return estimate_tokens([{"content": str(s.to_openai())} for s in specs])


def tool_specs(
    tools: Sequence[Tool],
    stop_tool: bool,
    prompts: Prompts,
    output: OutputSchema | None = None,
) -> tuple[list[ToolSpec], int]:
    """The specs sent with each LLM call (the tools', then task_finished's when the stop
    tool is on, its `answer` the output schema when the run has one) and their estimated
    tokens; the plain task_finished's estimate is made once."""
    specs = [ToolSpec(t.name, t.description, t.parameters) for t in tools]
    tokens = _estimate_specs(specs)
    if stop_tool and output is not None:
        finish, finish_tokens = _typed_finish(output.schema, prompts)
        specs.append(finish)
        tokens += finish_tokens
    elif stop_tool:
        specs.append(task_finished_spec(prompts))
        tokens += _finish_spec_tokens(prompts)
    return specs, tokens


_TYPED_FINISHES: dict[tuple[int, int], tuple[Any, Prompts, ToolSpec, int]] = {}
"""The typed stop tool's spec and its tokens, by the identity of the schema and prompt set
(kept in the entry, so that an id cannot be reused while it is here): a schema compiled once
(`app.output`, remembered by content) is one object, shared by the runs that give it."""
TYPED_FINISHES = 256


def _typed_finish(schema: Mapping[str, Any], prompts: Prompts) -> tuple[ToolSpec, int]:
    key = (id(schema), id(prompts))
    found = _TYPED_FINISHES.get(key)
    if found is not None and found[0] is schema and found[1] is prompts:
        return found[2], found[3]
    spec = finish_spec(schema, prompts)
    tokens = _estimate_specs([spec])
    if len(_TYPED_FINISHES) >= TYPED_FINISHES:
        del _TYPED_FINISHES[next(iter(_TYPED_FINISHES))]  # the oldest
    _TYPED_FINISHES[key] = (schema, prompts, spec, tokens)
    return spec, tokens


_NONE: frozenset[str] = frozenset()
_NONE_REJECTED: frozenset[int] = frozenset()


def only_finish(calls: tuple[ToolCall, ...]) -> bool:
    """Whether every call is of task_finished (`all(...)` without a generator: per step)."""
    for call in calls:  # noqa: SIM110 (a generator per step costs more than this loop)
        if call.name != TASK_FINISHED:
            return False
    return True


def assistant_message(reply: Reply) -> Message:
    return {
        "role": "assistant",
        "content": reply.content,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ],
    }


def reply_of(message: Message) -> Reply:
    """The reply an assistant message with tool calls came from (`assistant_message`'s
    inverse), for a step redone after an interruption."""
    calls = tuple(
        restored_call(ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"]))
        for c in message.get("tool_calls") or ()
    )
    return Reply(content=message.get("content"), tool_calls=calls)


class ToolStep:
    """The reply's calls; the reply's assistant message is the conversation's last already."""

    def __init__(
        self, run: RunContext, reply: Reply, redo: Mapping[str, CallResult] | None = None
    ) -> None:
        self.run = run
        self.reply = reply
        self.redo = redo
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
            yield Action(st.step, call.id, call.name, item.arguments)
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
                if len(runnable) == 1:  # the common case: no task needed
                    index = runnable[0]
                    result = await self._execute_alone(prepared[index])
                    yield self._observe(index, prepared[index], result)
                elif runnable:
                    async for observation in self._execute_concurrently(prepared, runnable):
                        yield observation
            except (CancelRequestedError, DeadlineError) as exc:
                cancelled = isinstance(exc, CancelRequestedError)
                reason = StopReason.CANCELLED if cancelled else StopReason.TIMEOUT
                for index in runnable:
                    if index not in self._shown:
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

    def _redone(
        self, index: int, item: PreparedCall, recorded: Mapping[str, CallResult]
    ) -> Observation | None:
        """A call of a step redone after an interruption: its recorded result (not logged
        again: None), nothing for an idempotent tool (it runs again), else outcome unknown."""
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
        self, prepared: list[PreparedCall], runnable: list[int]
    ) -> AsyncIterator[Observation]:
        """Run the calls in tasks of their own; observe each as it ends. On a cancel or the
        deadline, the unfinished ones are abandoned (the caller reports them interrupted)."""
        limits, ctx, prompts = self.run.limits, self.run.tool_ctx, self.run.prompts
        tasks = {
            asyncio.ensure_future(
                execute_within(prepared[i], ctx, limits.tool_timeout_s, prompts)
            ): i
            for i in runnable
        }
        pending = set(tasks)
        try:
            while pending:
                done = await self.run.guard.wait_any(pending, self.run.deadline)
                for task in sorted(done, key=tasks.__getitem__):
                    pending.discard(task)
                    index = tasks[task]
                    yield self._observe(index, prepared[index], task.result())
        finally:
            for task in pending:
                abandon(task)

    def _prepare(self, call: ToolCall, finishing: bool) -> PreparedCall:
        run = self.run
        if call.oversize:  # arguments over the cap: dropped (app.engine.replycap), never run
            text = run.prompts.arguments_too_long.format(tool=call.name, chars=call.oversize)
            shown = f"[{call.oversize:,} characters of arguments, over the cap: not kept]"
            return PreparedCall(call=call, arguments=shown, reply=text, is_error=True)
        if not (run.limits.stop_tool and call.name == TASK_FINISHED):
            return prepare(call, run.tools, run.state, run.limits, run.prompts, run.available_tools)
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

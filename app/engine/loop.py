"""The ReAct loop of DESIGN.md §1: the only control flow of a run.

`run_react(...)` yields typed steps (`app.engine.steps`) and always ends with exactly one
`Finished`. Every limit is checked at a named point: the top of a step (cancel, deadline,
max_steps, nudges, the step's calls' expected cost, the key's day), around each await (deadline
and cancel interrupt in-flight calls through `Guard`), and after the step (token and cost budgets).
With an output schema, every answer is checked against it (`app.engine.typed`).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Collection, Sequence
from typing import Unpack

import structlog

from app.engine.acting import ToolStep
from app.engine.approving import settle_pending
from app.engine.asking import ask, budget_spent
from app.engine.context import RunContext
from app.engine.ending import Ending
from app.engine.errors import LLMError
from app.engine.grading import Outcome
from app.engine.guard import CancelRequestedError, DeadlineError, Guard
from app.engine.history import open_conversation
from app.engine.inputs import RunHandles, RunInputs
from app.engine.planning import planning_turns
from app.engine.policies import (
    InterventionKind,
    Limits,
    StopReason,
    nudges_exhausted,
    over_budget,
    past_deadline,
    planning_due,
)
from app.engine.ports import ChatModel, OutputSchema, Reply, Tool, ToolContext
from app.engine.ports import system_clock as _system_clock
from app.engine.progress import progress_text
from app.engine.prompts import BUILTIN, TASK_FINISHED, UPDATE_PLAN, Prompts
from app.engine.specs import assistant_message, only_finish, reply_of, tool_specs
from app.engine.specs import task_finished_spec as task_finished_spec  # re-exported
from app.engine.state import RunState
from app.engine.steps import Checkpoint, Finished, Step, StepStarted, Suspended, UserMessage
from app.engine.trim import trim_notice
from app.engine.typed import check_text, invalid_answer_text, rejected

log = structlog.get_logger("finishline.engine")


def run_react(
    *,
    task: str,
    model: ChatModel,
    tools: Sequence[Tool] = (),
    limits: Limits | None = None,
    system_prompt: str | None = None,
    prompts: Prompts | None = None,
    approval: Collection[str] = (),
    output: OutputSchema | None = None,
    outcome: Outcome | None = None,
    **handles: Unpack[RunHandles],
) -> AsyncIterator[Step]:
    """`react` with its inputs as keywords, defaults for all but the task and the model."""
    limits = limits or Limits()
    prompts = prompts or BUILTIN[limits.prompt_language]
    inputs = RunInputs(model, list(tools), limits, prompts, frozenset(approval))
    inputs.task, inputs.system_prompt, inputs.output = task, system_prompt, output
    inputs.outcome = outcome
    return react(inputs, **handles)


def react(inputs: RunInputs, **handles: Unpack[RunHandles]) -> AsyncIterator[Step]:
    """Run one ReAct agent to its end, yielding every step; resumes from `state` if given.

    Setting `cancel` ends the run with `cancelled` at once, interrupting in-flight calls.
    A follow-up starts from `previous`'s conversation, then the task. `inbox` is polled right
    before each LLM call: what it returns joins the conversation as user messages.

    A call of a tool named in `inputs.approval` is not executed: the step's other calls run,
    then the run checkpoints and yields `Suspended` (its last step; not an end). Resuming with
    that checkpoint as `state` and the person's `decisions` settles those calls first (§9).

    Between the model's reply with tool calls and their results the run checkpoints with
    `state.acting` set. Resumed from such a checkpoint (its process stopped mid-step), the
    run redoes that step's calls first, under the same step number: `recorded` holds the
    results logged before the interruption, by call id; see `acting.ToolStep` for the rule.
    """
    return ReactRun(inputs, handles).steps()


class ReactRun(Ending):
    """One run of the loop; what the parts of a step need is held once, in `self.run`. How
    it ends (an answer graded, a limit, an interruption) is `app.engine.ending.Ending`."""

    def __init__(self, inputs: RunInputs, handles: RunHandles) -> None:
        self.task, self.system_prompt = inputs.task, inputs.system_prompt
        self.outcome = inputs.outcome
        self.recorded = handles.get("recorded") or {}
        self.decisions = {d.call_id: d for d in handles.get("decisions", ())}
        self.suspended: Suspended | None = None
        self.ended = False
        self.previous = handles.get("previous")
        self.inbox = handles.get("inbox")
        limits, prompts, tools = inputs.limits, inputs.prompts, inputs.tools
        by_name = {t.name: t for t in tools}
        if len(by_name) != len(tools) or (limits.stop_tool and TASK_FINISHED in by_name):
            raise ValueError("tool names must be unique and must not shadow task_finished")
        if limits.planning_interval is not None and UPDATE_PLAN not in by_name:
            raise ValueError("planning_interval needs the update_plan tool among the tools")
        self.specs, spec_tokens = tool_specs(tools, limits.stop_tool, prompts, inputs.output)
        self.started = 0.0
        state = handles.get("state") or RunState()
        clock = handles.get("clock", _system_clock)
        self.run = RunContext(
            state=state,
            limits=limits,
            prompts=prompts,
            model=inputs.model,
            tools=by_name,
            available_tools=", ".join(spec.name for spec in self.specs) or "none",
            spec_tokens=spec_tokens,
            clock=clock,
            jitter=handles.get("jitter", random.random),
            guard=Guard(handles.get("cancel"), clock),
            log=log.bind(),  # resolved once per run, with the logging config of the moment
            tool_ctx=ToolContext(run_id=handles.get("run_id", ""), plan=state.plan),
            approval=frozenset(inputs.approval),
            price=inputs.model.price,
            output=inputs.output,
            subagents=handles.get("subagents"),
            allowance=handles.get("allowance"),
        )

    # -- the loop -----------------------------------------------------------------------

    async def steps(self) -> AsyncIterator[Step]:
        """The run, in one generator: no wrapper for every item of every step to pass."""
        st, limits = self.run.state, self.run.limits
        if not st.messages:  # a fresh run; else a resumed one, whose model goes on where it was
            previous, prompts = self.previous, self.run.prompts
            output = self.run.output
            open_conversation(st, self.system_prompt, self.task, prompts, limits, previous, output)
        st.resume_model(self.run.resumable)
        if self.run.tool_ctx.run_id:
            structlog.contextvars.bind_contextvars(run_id=self.run.tool_ctx.run_id)
        self.started = self.run.clock() - st.elapsed_s
        self.run.deadline = self.started + limits.max_time_s
        self.checkpointed: tuple[int, int] | None = (st.step, len(st.messages))
        item: Step
        try:
            if st.pending:  # resumed after a person decided: settle the waiting calls first
                try:
                    async for item in settle_pending(self.run, self.decisions):
                        yield item
                except (CancelRequestedError, DeadlineError, LLMError) as exc:
                    async for item in self._stopped(exc):
                        yield item
                    return
                yield self._checkpoint()
                if st.pending:  # a sub-agent's child waits for a person again
                    yield Suspended(st.step, tuple(st.pending))
                    return
                if st.tree_stop is not None:
                    async for item in self._final_answer(StopReason(st.tree_stop)):
                        yield item
                    return
            redo = st.mid_step(limits.stop_tool)  # resumed before its last reply's calls ended
            while True:
                if redo:  # that step again, under its own number, from its calls
                    yield StepStarted(st.step, limits.max_steps)
                else:
                    begun = self._begin_step()
                    if isinstance(begun, StopReason):
                        async for item in self._final_answer(begun):
                            yield item
                        return
                    for item in begun:
                        yield item
                    if isinstance(begun[-1], Finished):
                        return

                try:  # no wrapping generator: one fewer per step
                    if not redo and planning_due(st.step, limits):  # plan-then-execute
                        async for item in planning_turns(self.run, self._turn):
                            yield item
                    if not self.ended and self.suspended is None:
                        async for item in self._turn(redo):  # run out: no finalizer task
                            yield item
                except (CancelRequestedError, DeadlineError, LLMError) as exc:
                    async for item in self._stopped(exc):
                        yield item
                    return
                if self.ended:
                    return
                redo = False
                if self.suspended is not None:
                    yield self._checkpoint()
                    self.run.log.info("run_suspended", pending=len(self.suspended.pending))
                    yield self.suspended
                    return
                budget = over_budget(st.tree_tokens, st.tree_cost_usd, limits, st.tree_stop)
                if budget is not None:
                    async for item in self._final_answer(budget):
                        yield item
                    return
                yield self._checkpoint()
        finally:
            self.run.guard.close()

    def _checkpoint(self) -> Checkpoint:
        st, run = self.run.state, self.run
        self.checkpointed = (st.step, len(st.messages))
        return Checkpoint(st.step, st.to_checkpoint(run.clock() - self.started, run.resumable))

    def _begin_step(self) -> list[Step] | StopReason:
        """The top of a step (a plain call: nothing here awaits): the limit that ends the run
        with a final answer, or the steps: a `Finished` alone, or the step's start and the
        messages injected before its LLM call."""
        st, limits = self.run.state, self.run.limits
        if self.run.guard.cancelled:
            return self._end(StopReason.CANCELLED)
        limit = past_deadline(self.run.clock(), self.run.deadline) or (
            StopReason.MAX_STEPS if st.step >= limits.max_steps else budget_spent(self.run)
        )
        if limit is not None:
            return limit
        said = self.inbox() if self.inbox is not None else []
        last = st.messages[-1]
        nudge = (
            not said
            and limits.stop_tool
            and last["role"] == "assistant"
            and not last.get("tool_calls")
        )
        if nudge and nudges_exhausted(st.nudges_in_row, limits):
            return self._end(StopReason.NUDGE_LIMIT, last.get("content") or None, degraded=True)

        st.step += 1
        st.verdict = None  # a verdict holds for the answer it judged, which is behind us
        inject = self.run.inject
        self.run.enter_step()
        steps: list[Step] = [StepStarted(st.step, limits.max_steps)]
        if said:  # a person spoke: that replaces the stop prompt of this step
            st.nudges_in_row = 0
            for content in said:
                st.append({"role": "user", "content": content})
                self.run.log.info("user_message_added", chars=len(content))
                steps.append(UserMessage(st.step, content))
        elif nudge:
            st.nudges_in_row += 1
            steps.append(inject(InterventionKind.STOP_PROMPT, self.run.prompts.stop_tool_prompt))
        if limits.progress and st.step > 1:
            text = progress_text(st, limits, self.run.prompts, self.run.clock() - self.started)
            steps.append(inject(InterventionKind.PROGRESS, text))
        return steps

    async def _turn(self, redo: bool = False, force_tool: str | None = None) -> AsyncIterator[Step]:
        """One LLM call (the context trimmed first if capped) and what follows from it; yields
        `Finished` when the model finished (or answered, with stop_tool off). Cancel, the
        deadline and a failing model surface as exceptions for the loop to end the run with.
        The reply's calls checkpoint with `acting` set before they run; `redo` takes the
        reply of that checkpoint instead. `force_tool`: the tool the reply must call."""
        st, limits = self.run.state, self.run.limits
        if redo:
            self.run.enter_step()
            reply = reply_of(st.messages[-1])
            self.run.log.warning("step_redone", calls=len(reply.tool_calls))
        else:
            if limits.max_context_tokens is not None:
                spec_tokens, prompts = self.run.spec_tokens, self.run.prompts
                notice = trim_notice(st, limits.max_context_tokens, spec_tokens, prompts)
                if notice is not None:
                    yield self.run.intervention(InterventionKind.CONTEXT_TRIM, notice)
            answer: Reply | None = None
            async for item in ask(self.run, self.specs, self.run.deadline, force_tool=force_tool):
                if isinstance(item, Reply):
                    answer = item
                else:
                    yield item
            assert answer is not None
            reply = answer
            if not reply.tool_calls:
                st.append({"role": "assistant", "content": reply.content or ""})
                if not limits.stop_tool:
                    async for item in self._answered(reply.content or ""):
                        yield item
                return
            st.nudges_in_row = 0
            st.append(assistant_message(reply))
            if not (limits.stop_tool and only_finish(reply.tool_calls)):  # calls to run
                st.acting = True
                yield self._checkpoint()
        acting = ToolStep(self.run, reply, self.recorded if redo else None, force_tool)
        try:
            async for item in acting:
                yield item
        finally:
            st.acting = False
        if acting.finished is not None:
            calls = tuple(call.id for call in reply.tool_calls)
            finished = self._accept(StopReason.FINISHED, acting.finished, acting.output, calls)
            async for item in finished:
                yield item
        elif acting.invalid is not None and acting.invalid_ends:
            for ending in self._invalid_output(acting.invalid):
                yield ending
        elif acting.pending:
            self.suspended = Suspended(st.step, tuple(acting.pending))

    async def _answered(self, text: str) -> AsyncIterator[Step]:
        """A plain reply with the stop tool off: the answer; with an output schema, only JSON
        that validates (the conversation keeps its JSON text), else an invalid answer."""
        run, st = self.run, self.run.state
        if run.output is None:
            async for item in self._accept(StopReason.ANSWERED, text):
                yield item
            return
        checked = check_text(run.output, text)
        if checked.valid:
            st.replace(len(st.messages) - 1, {"role": "assistant", "content": checked.text})
            async for item in self._accept(StopReason.ANSWERED, checked.text, checked.output):
                yield item
            return
        left, ended = rejected(run, checked)
        if ended:
            for item in self._invalid_output(checked):
                yield item
            return
        told = invalid_answer_text(run.prompts.invalid_output_reply, checked, left)
        yield run.inject(InterventionKind.INVALID_OUTPUT, told)

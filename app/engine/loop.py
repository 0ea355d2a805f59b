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
from typing import Any, Unpack

import structlog

from app.engine.acting import ToolStep
from app.engine.approving import settle_pending
from app.engine.asking import ask, budget_spent
from app.engine.context import RunContext
from app.engine.errors import LLMError
from app.engine.guard import CancelRequestedError, DeadlineError, Guard
from app.engine.history import open_conversation
from app.engine.inputs import RunHandles, RunInputs
from app.engine.planning import planning_turns
from app.engine.policies import (
    LIMIT_INTERVENTIONS,
    InterventionKind,
    Limits,
    StopReason,
    final_call_allowed,
    nudges_exhausted,
    over_budget,
    past_deadline,
    planning_due,
)
from app.engine.ports import ChatModel, OutputError, OutputSchema, Reply, Tool, ToolContext
from app.engine.ports import system_clock as _system_clock
from app.engine.progress import progress_text
from app.engine.prompts import BUILTIN, TASK_FINISHED, UPDATE_PLAN, Prompts
from app.engine.specs import assistant_message, only_finish, reply_of, tool_specs
from app.engine.specs import task_finished_spec as task_finished_spec  # re-exported
from app.engine.state import RunState
from app.engine.steps import (
    Checkpoint,
    Finished,
    RunError,
    Step,
    StepStarted,
    Suspended,
    UserMessage,
)
from app.engine.trim import trim_notice
from app.engine.typed import CheckedAnswer, check_text, invalid_answer_text, limit_text, rejected

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
    **handles: Unpack[RunHandles],
) -> AsyncIterator[Step]:
    """`react` with its inputs as keywords, defaults for all but the task and the model."""
    limits = limits or Limits()
    prompts = prompts or BUILTIN[limits.prompt_language]
    inputs = RunInputs(model, list(tools), limits, prompts, frozenset(approval))
    inputs.task, inputs.system_prompt, inputs.output = task, system_prompt, output
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


class ReactRun:
    """One run of the loop; what the parts of a step need is held once, in `self.run`."""

    def __init__(self, inputs: RunInputs, handles: RunHandles) -> None:
        self.task, self.system_prompt = inputs.task, inputs.system_prompt
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
        self.checkpointed = (st.step, len(st.messages))
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
                    for item in self._answered(reply.content or ""):
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
            for ending in self._end(StopReason.FINISHED, acting.finished, output=acting.output):
                yield ending
        elif acting.invalid is not None and acting.invalid_ends:
            for ending in self._invalid_output(acting.invalid):
                yield ending
        elif acting.pending:
            self.suspended = Suspended(st.step, tuple(acting.pending))

    def _answered(self, text: str) -> list[Step]:
        """A plain reply with the stop tool off: the answer; with an output schema, only JSON
        that validates (the conversation keeps its JSON text), else an invalid answer."""
        run, st = self.run, self.run.state
        if run.output is None:
            return self._end(StopReason.ANSWERED, text)
        checked = check_text(run.output, text)
        if checked.valid:
            st.replace(len(st.messages) - 1, {"role": "assistant", "content": checked.text})
            return self._end(StopReason.ANSWERED, checked.text, output=checked.output)
        left, ended = rejected(run, checked)
        if ended:
            return self._invalid_output(checked)
        told = invalid_answer_text(run.prompts.invalid_output_reply, checked, left)
        return [run.inject(InterventionKind.INVALID_OUTPUT, told)]

    def _invalid_output(self, checked: CheckedAnswer) -> list[Step]:
        """The answers kept failing the schema: the run ends with the last one's errors."""
        errors = checked.errors
        return self._end(StopReason.INVALID_OUTPUT, checked.text, degraded=True, invalid=errors)

    async def _stopped(self, exc: Exception) -> AsyncIterator[Step]:
        """The end of a run that cancel, the deadline or a failing model interrupted."""
        if isinstance(exc, DeadlineError):
            async for step in self._final_answer(StopReason.TIMEOUT):
                yield step
        else:  # a failing model ends it with error, a cancel with cancelled
            error = RunError(exc.kind, exc.message) if isinstance(exc, LLMError) else None
            reason = StopReason.ERROR if error else StopReason.CANCELLED
            for ending in self._end(reason, error=error):
                yield ending

    async def _final_answer(self, reason: StopReason) -> AsyncIterator[Step]:
        """Graceful degradation at a limit: one more call, without tools, for a best answer."""
        if not final_call_allowed(self.run.state.tree_cost_usd, self.run.limits):
            for ending in self._end(reason):
                yield ending
            return
        prompt = limit_text(self.run.prompts, reason.value, self.run.output)
        yield self.run.inject(LIMIT_INTERVENTIONS[reason], prompt)
        reply: Reply | None = None
        try:
            deadline = self.run.clock() + self.run.limits.final_answer_timeout_s
            async for item in ask(self.run, (), deadline, final=True):
                if isinstance(item, Reply):
                    reply = item
                else:
                    yield item
        except CancelRequestedError:
            for ending in self._end(StopReason.CANCELLED):
                yield ending
            return
        except (DeadlineError, LLMError) as exc:
            self.run.log.warning(
                "final_answer_failed", reason=reason.value, error=str(exc) or "deadline"
            )
        answer = reply.content if reply is not None and reply.content else None
        if answer is not None:
            self.run.state.append({"role": "assistant", "content": answer})
        for ending in self._end(reason, answer, degraded=answer is not None):
            yield ending

    def _end(
        self,
        reason: StopReason,
        answer: str | None = None,
        *,
        degraded: bool = False,
        error: RunError | None = None,
        output: Any = None,
        invalid: tuple[OutputError, ...] | None = None,
    ) -> list[Step]:
        """The run's last steps: its final conversation, for a follow-up to start from (when
        not checkpointed as it is already), then the one `Finished`. With an output schema, a
        degraded answer (at a limit, at nudge_limit) is checked here: its value, or why not."""
        st = self.run.state
        if degraded and answer is not None and self.run.output is not None and invalid is None:
            checked = check_text(self.run.output, answer)
            answer, output, invalid = checked.text, checked.output, checked.errors or None
        usage = st.usage()
        self.ended = True
        self.run.log.info("run_finished", reason=reason.value, degraded=degraded, **usage.to_dict())
        last: list[Step] = []
        if self.checkpointed != (st.step, len(st.messages)):
            last.append(self._checkpoint())
        last.append(Finished(st.step, reason, answer, degraded, usage, error, output, invalid))
        return last

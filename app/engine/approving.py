"""Resuming a run that waited for a person (DESIGN §9): each pending call of its last step is
settled as decided, in call order, before the loop goes on. An approved call runs (with the
person's edited arguments, if any, checked against the tool's schema); a rejected or
undecided one gives the model an `is_error` observation carrying the person's message. A client
tool's call (DESIGN §16) is answered with the client's `result`, not run."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace

from app.engine.children import begin, ended, wait_for
from app.engine.context import RunContext
from app.engine.delegating import AgentTool, ChildCall, ChildOutcome, ChildRefusedError
from app.engine.guard import CancelRequestedError, DeadlineError
from app.engine.pending import Decision, PendingCall
from app.engine.policies import StopReason
from app.engine.ports import ToolCall
from app.engine.steps import AgentFinished, Observation
from app.engine.toolcalls import CallResult, PreparedCall, execute, timed_out
from app.engine.truncate import truncate

NO_DECISION = "no decision was given"


async def settle_pending(
    run: RunContext, decisions: Mapping[str, Decision]
) -> AsyncIterator[Observation | AgentFinished]:
    """Settle `run.state.pending`; every pending call gets its tool message, even when the
    run is cancelled or passes its deadline meanwhile (then the exception propagates). A
    sub-agent call waits on its child again (it was waiting for a person, DESIGN §15): one
    whose child waits again stays pending (`run.state.pending`), without a tool message."""
    st = run.state
    pending, st.pending = st.pending, []
    shown: dict[str, str] = {}
    again: list[PendingCall] = []
    try:
        for call in pending:
            try:
                if call.child_run_id is not None:
                    began = time.perf_counter()
                    outcome = await _rejoin(run, call)
                    if outcome.waiting:
                        again.append(replace(call, waits_on=outcome.waits_on))
                        continue
                    waited = time.perf_counter() - began
                    steps, result = ended(
                        run, call.call_id, call.tool, call.child_run_id, outcome, waited
                    )
                    for step in steps:
                        yield step  # type: ignore[misc]  # (agent.finished)
                else:
                    result = await _settle(run, call, decisions.get(call.call_id))
            except (CancelRequestedError, DeadlineError) as exc:
                reason = (
                    StopReason.CANCELLED
                    if isinstance(exc, CancelRequestedError)
                    else StopReason.TIMEOUT
                )
                for rest in pending:
                    if rest.call_id not in shown:
                        text = run.prompts.call_interrupted.format(
                            tool=rest.tool, reason=reason.value
                        )
                        yield _observe(run, rest, CallResult(text, True, 0), shown)
                raise
            yield _observe(run, call, result, shown)
    finally:
        st.pending = again
        for call in pending:
            if call in again:
                continue
            content = shown.get(call.call_id)
            if content is None:
                content = run.prompts.call_interrupted.format(
                    tool=call.tool, reason=StopReason.CANCELLED.value
                )
            st.append({"role": "tool", "tool_call_id": call.call_id, "content": content})


async def _rejoin(run: RunContext, call: PendingCall) -> ChildOutcome:
    """A sub-agent call resumed: found again (never started twice), and awaited."""
    tool = run.tools.get(call.tool)
    if not isinstance(tool, AgentTool):  # the run's tools are fixed at creation
        return ChildOutcome("failed", "error", error=f"{call.tool} is no sub-agent of this run")
    task = str(call.arguments.get("task", ""))
    child = ChildCall(call.call_id, run.state.step, call.tool, task, run.deadline - run.clock())
    try:
        handle = await begin(run, tool, child)
    except ChildRefusedError as exc:
        return ChildOutcome("failed", "error", error=exc.message)
    return await wait_for(run, handle)


async def _settle(run: RunContext, call: PendingCall, decision: Decision | None) -> CallResult:
    if decision is None or not decision.approved:
        message = (decision.message if decision is not None else None) or NO_DECISION
        run.log.info("approval_rejected", tool=call.tool, call_id=call.call_id)
        return CallResult(
            run.prompts.approval_rejected.format(tool=call.tool, message=message), True, 0
        )
    if decision.result is not None:  # a client tool's call, answered by the client
        run.log.info("client_result_received", tool=call.tool, call_id=call.call_id)
        return CallResult(decision.result, False, 0)
    arguments = decision.arguments if decision.arguments is not None else call.arguments
    tool = run.tools.get(call.tool)
    if tool is None:  # the run's tools are fixed at creation: only a changed server
        text = run.prompts.unknown_tool.format(tool=call.tool, available=run.available_tools)
        return CallResult(text, True, 0)
    problem = tool.validate(arguments)
    if problem is not None:
        text = run.prompts.bad_arguments.format(tool=call.tool, error=problem)
        return CallResult(text, True, 0)
    run.log.info("approval_granted", tool=call.tool, call_id=call.call_id)
    prepared = PreparedCall(
        call=ToolCall(call.call_id, call.tool, ""), arguments=dict(arguments), tool=tool
    )
    tool_deadline = run.clock() + run.limits.tool_timeout_s
    try:
        with run.guard.scope(min(tool_deadline, run.deadline)):
            return await execute(prepared, run.tool_ctx, run.prompts)
    except DeadlineError:
        if tool_deadline >= run.deadline:
            raise
        return timed_out(prepared, run.limits.tool_timeout_s, run.prompts)


def _observe(
    run: RunContext, call: PendingCall, result: CallResult, shown: dict[str, str]
) -> Observation:
    seen = truncate(result.text, run.limits.max_tool_result_chars, run.prompts.truncation_note)
    shown[call.call_id] = seen.text
    run.log.info(
        "tool_returned",
        tool=call.tool,
        call_id=call.call_id,
        is_error=result.is_error,
        duration_ms=result.duration_ms,
        truncated=seen.truncated,
    )
    return Observation(
        step=run.state.step,
        call_id=call.call_id,
        tool=call.tool,
        content=result.text,
        is_error=result.is_error,
        truncated=seen.truncated,
        original_chars=seen.original_chars,
        shown_chars=seen.shown_chars,
        duration_ms=result.duration_ms,
        timed_out=result.timed_out,
        model_content=seen.text if seen.truncated else None,
    )

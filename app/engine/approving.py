"""Resuming a run that waited for a person (DESIGN §9): each pending call of its last step is
settled as decided, in call order, before the loop goes on. An approved call runs (with the
person's edited arguments, if any, checked against the tool's schema); a rejected or
undecided one gives the model an `is_error` observation carrying the person's message. A client
tool's call (DESIGN §16) is answered with the client's `result`, not run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

from app.engine.context import RunContext
from app.engine.guard import CancelRequestedError, DeadlineError
from app.engine.pending import Decision, PendingCall
from app.engine.policies import StopReason
from app.engine.ports import ToolCall
from app.engine.steps import Observation
from app.engine.toolcalls import CallResult, PreparedCall, execute, timed_out
from app.engine.truncate import truncate

NO_DECISION = "no decision was given"


async def settle_pending(
    run: RunContext, decisions: Mapping[str, Decision]
) -> AsyncIterator[Observation]:
    """Settle `run.state.pending`; every pending call gets its tool message, even when the
    run is cancelled or passes its deadline meanwhile (then the exception propagates)."""
    st = run.state
    pending, st.pending = st.pending, []
    shown: dict[str, str] = {}
    try:
        for call in pending:
            try:
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
        for call in pending:
            content = shown.get(call.call_id)
            if content is None:
                content = run.prompts.call_interrupted.format(
                    tool=call.tool, reason=StopReason.CANCELLED.value
                )
            st.append({"role": "tool", "tool_call_id": call.call_id, "content": content})


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

"""One tool call, from what the model wrote to what it sees back.

`prepare` decides, without running anything, whether a call is a model mistake (bad JSON,
unknown tool, arguments failing the schema) or a repetition, each answered with a message the
model can act on; `execute` runs the rest under the per-tool timeout.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.engine import jsontext
from app.engine.errors import ToolError
from app.engine.policies import Limits, repetition_due
from app.engine.ports import Tool, ToolCall, ToolContext
from app.engine.prompts import Prompts
from app.engine.state import RunState, canonical_call
from app.engine.truncate import truncate

REPEATED_RESULT_CHARS = 500


@dataclass(slots=True)
class PreparedCall:
    call: ToolCall
    arguments: Any
    """The parsed JSON object, or the raw text when it did not parse."""
    tool: Tool | None = None
    key: str | None = None
    reply: str | None = None
    """Set when the call must not run: the text the model gets instead."""
    is_error: bool = False
    repeated: bool = False

    @property
    def runnable(self) -> bool:
        return self.reply is None


def parse_arguments(raw: str) -> tuple[dict[str, Any] | None, Any, str | None]:
    """(object, shown arguments, error): the JSON object, what to log, why it is unusable."""
    text = raw.strip() or "{}"
    try:
        value = jsontext.loads(text)
    except ValueError as exc:  # not JSON, or nested too deep (jsontext)
        return None, raw, jsontext.problem(exc)
    if not isinstance(value, dict):
        return None, value, f"expected a JSON object, got {type(value).__name__}"
    return value, value, None


def prepare(
    call: ToolCall,
    tools: Mapping[str, Tool],
    state: RunState,
    limits: Limits,
    prompts: Prompts,
    available: str,
    forced: bool = False,
) -> PreparedCall:
    """The call checked: unknown tool, bad JSON, bad arguments and repetitions get the text
    the model sees instead of running. `forced`: a call the model was made to make (a
    planning call's `update_plan`): the same again is what was asked, never a repetition."""
    arguments, shown, error = parse_arguments(call.arguments)
    prepared = PreparedCall(call=call, arguments=shown)
    tool = tools.get(call.name)
    if tool is None:
        prepared.reply = prompts.unknown_tool.format(tool=call.name, available=available)
        prepared.is_error = True
        return prepared
    if arguments is None:
        prepared.reply = prompts.bad_json.format(tool=call.name, error=error)
        prepared.is_error = True
        return prepared
    problem = tool.validate(arguments)
    if problem is not None:
        prepared.reply = prompts.bad_arguments.format(tool=call.name, error=problem)
        prepared.is_error = True
        return prepared
    prepared.tool = tool
    prepared.key = key = canonical_call(call.name, arguments)
    if forced:
        return prepared
    count = state.call_counts.get(key, 0) + 1
    state.call_counts[key] = count
    if repetition_due(count, tool.idempotent, limits):
        earlier = truncate(state.earlier_results.get(key, ""), REPEATED_RESULT_CHARS, "…").text
        prepared.reply = prompts.repetition_hint.format(
            tool=call.name, count=count - 1, result=earlier
        )
        prepared.repeated = True
    return prepared


@dataclass(slots=True)
class CallResult:
    """What a call gave. Immutable by contract, not frozen: one per tool call (see
    `app.engine.steps`)."""

    text: str
    is_error: bool
    duration_ms: int
    timed_out: bool = False


async def execute(prepared: PreparedCall, ctx: ToolContext, prompts: Prompts) -> CallResult:
    """Run one validated call; a tool that raises is reported, not propagated. The timeout is
    the caller's: a guard scope, or `execute_within`."""
    assert prepared.tool is not None
    assert isinstance(prepared.arguments, dict)
    name = prepared.call.name
    started = time.perf_counter()
    try:
        # a tool breaking its protocol may return another type: shown to the model as JSON
        result: object = await prepared.tool.call(prepared.arguments, ctx)
        text = (
            result
            if isinstance(result, str)
            else json.dumps(result, ensure_ascii=False, default=str)
        )
        is_error = False
    except Exception as exc:  # the model sees the failure; the run goes on
        if isinstance(exc, ToolError):
            text = prompts.tool_failed.format(tool=name, error=exc)
        else:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            text = prompts.tool_failed.format(tool=name, error=error)
        is_error = True
    return CallResult(text, is_error, int((time.perf_counter() - started) * 1000))


def timed_out(prepared: PreparedCall, timeout_s: float, prompts: Prompts) -> CallResult:
    text = prompts.tool_timeout.format(tool=prepared.call.name, seconds=timeout_s)
    return CallResult(text, True, int(timeout_s * 1000), timed_out=True)


async def execute_within(
    prepared: PreparedCall, ctx: ToolContext, timeout_s: float, prompts: Prompts
) -> CallResult:
    """`execute` bounded by the per-tool timeout, for a call running in a task of its own."""
    try:
        async with asyncio.timeout(timeout_s):
            return await execute(prepared, ctx, prompts)
    except TimeoutError:
        return timed_out(prepared, timeout_s, prompts)

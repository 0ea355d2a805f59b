"""AG-UI events as the protocol's JSON objects, and their SSE frames (DESIGN §16).

Each builder returns the object ag-ui-protocol's model of that event serializes to: its wire
names (camelCase), its fields in the model's order, optional fields without a value left out.
`frame` writes them as the package's `EventEncoder` does (`data: <JSON>`, a blank line), with
the JSON from pydantic's own serializer (`pydantic_core.to_json`, what the models'
`model_dump_json` runs), so every byte is the package's: `tests/agui/test_wire.py` encodes every
event the mapping makes both ways and compares, and validates each with the package's models.

Why not the models themselves: a model checked on construction and serialized through the
package's base model (a Python wrap serializer per event, to leave out empty fields) cost more
than everything else an event costs on the native stream (bench/README.md, "AG-UI stream").
Every value here is finishline's own, already checked when its event was made.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ag_ui.core import PROTOCOL_VERSION, EventType
from pydantic_core import to_json

Wire = dict[str, Any]
"""One AG-UI event, as its JSON object."""

RUN_STARTED = EventType.RUN_STARTED.value
RUN_FINISHED = EventType.RUN_FINISHED.value
RUN_ERROR = EventType.RUN_ERROR.value
STEP_STARTED = EventType.STEP_STARTED.value
STEP_FINISHED = EventType.STEP_FINISHED.value
REASONING_START = EventType.REASONING_START.value
REASONING_MESSAGE_START = EventType.REASONING_MESSAGE_START.value
REASONING_MESSAGE_CONTENT = EventType.REASONING_MESSAGE_CONTENT.value
REASONING_MESSAGE_END = EventType.REASONING_MESSAGE_END.value
REASONING_END = EventType.REASONING_END.value
TOOL_CALL_START = EventType.TOOL_CALL_START.value
TOOL_CALL_ARGS = EventType.TOOL_CALL_ARGS.value
TOOL_CALL_END = EventType.TOOL_CALL_END.value
TOOL_CALL_RESULT = EventType.TOOL_CALL_RESULT.value
TEXT_MESSAGE_START = EventType.TEXT_MESSAGE_START.value
TEXT_MESSAGE_CONTENT = EventType.TEXT_MESSAGE_CONTENT.value
TEXT_MESSAGE_END = EventType.TEXT_MESSAGE_END.value
CUSTOM = EventType.CUSTOM.value
SUBAGENT_STARTED = EventType.SUBAGENT_STARTED.value
SUBAGENT_FINISHED = EventType.SUBAGENT_FINISHED.value
SUBAGENT_ERROR = EventType.SUBAGENT_ERROR.value


def frame(seq: int, events: Iterable[Wire]) -> bytes:
    """The SSE frames of `events`, each with the finishline seq they came from as `id`: the
    package encoder's `data: <JSON>\\n\\n` (pydantic writes NaN and infinities as null)."""
    head = b"id: %d\ndata: " % seq
    return b"".join([head + to_json(e, inf_nan_mode="null") + b"\n\n" for e in events])


def event(kind: str, ts: int | None) -> Wire:
    """An event's first fields: `type`, then `timestamp` when there is one."""
    return {"type": kind} if ts is None else {"type": kind, "timestamp": ts}


def message(kind: str, message_id: str, ts: int | None) -> Wire:
    """The events that carry only a message id (reasoning and text message starts and ends)."""
    if ts is None:
        return {"type": kind, "messageId": message_id}
    return {"type": kind, "timestamp": ts, "messageId": message_id}


def step(kind: str, name: str, ts: int | None) -> Wire:
    if ts is None:
        return {"type": kind, "stepName": name}
    return {"type": kind, "timestamp": ts, "stepName": name}


def run_started(thread_id: str, run_id: str, metadata: dict[str, Any]) -> Wire:
    return {
        "type": RUN_STARTED,
        "metadata": metadata,
        "threadId": thread_id,
        "runId": run_id,
        "protocolVersion": PROTOCOL_VERSION,
    }


def run_finished(
    thread_id: str,
    run_id: str,
    *,
    result: dict[str, Any],
    outcome: dict[str, Any],
    usage: list[Wire] | None = None,
    ts: int | None = None,
) -> Wire:
    out = event(RUN_FINISHED, ts)
    out.update(threadId=thread_id, runId=run_id, result=result, outcome=outcome)
    if usage is not None:
        out["usage"] = usage
    return out


def run_error(message: str, code: str | None, ts: int) -> Wire:
    out: Wire = {"type": RUN_ERROR, "timestamp": ts, "message": message}
    if code is not None:
        out["code"] = code
    return out


def reasoning_content(message_id: str, delta: str, ts: int) -> Wire:
    return {
        "type": REASONING_MESSAGE_CONTENT,
        "timestamp": ts,
        "messageId": message_id,
        "delta": delta,
    }


def reasoning_message_start(message_id: str, ts: int) -> Wire:
    return {
        "type": REASONING_MESSAGE_START,
        "timestamp": ts,
        "messageId": message_id,
        "role": "reasoning",
    }


def tool_call(call_id: str, name: str, parent_message_id: str, delta: str, ts: int) -> list[Wire]:
    """A whole tool call: its start, its arguments in one delta, its end."""
    return [
        {
            "type": TOOL_CALL_START,
            "timestamp": ts,
            "toolCallId": call_id,
            "toolCallName": name,
            "parentMessageId": parent_message_id,
        },
        {"type": TOOL_CALL_ARGS, "timestamp": ts, "toolCallId": call_id, "delta": delta},
        {"type": TOOL_CALL_END, "timestamp": ts, "toolCallId": call_id},
    ]


def tool_call_result(
    message_id: str, call_id: str, content: str, metadata: dict[str, Any], ts: int
) -> Wire:
    return {
        "type": TOOL_CALL_RESULT,
        "timestamp": ts,
        "metadata": metadata,
        "messageId": message_id,
        "toolCallId": call_id,
        "content": content,
        "role": "tool",
    }


def text_message(message_id: str, text: str, ts: int) -> list[Wire]:
    """A whole assistant text message: its start, its text in one delta, its end."""
    return [
        {
            "type": TEXT_MESSAGE_START,
            "timestamp": ts,
            "messageId": message_id,
            "role": "assistant",
        },
        {"type": TEXT_MESSAGE_CONTENT, "timestamp": ts, "messageId": message_id, "delta": text},
        {"type": TEXT_MESSAGE_END, "timestamp": ts, "messageId": message_id},
    ]


def custom(name: str, value: Any, ts: int) -> Wire:
    return {"type": CUSTOM, "timestamp": ts, "name": name, "value": value}


def subagent_started(child: str, name: str, parent_tool_call_id: str | None, ts: int) -> Wire:
    out: Wire = {"type": SUBAGENT_STARTED, "timestamp": ts, "subagentRunId": child, "name": name}
    if parent_tool_call_id is not None:
        out["parentToolCallId"] = parent_tool_call_id
    return out


def subagent_finished(child: str, result: dict[str, Any], ts: int) -> Wire:
    return {"type": SUBAGENT_FINISHED, "timestamp": ts, "subagentRunId": child, "result": result}


def subagent_error(child: str, message: str, code: str | None, ts: int) -> Wire:
    out: Wire = {
        "type": SUBAGENT_ERROR,
        "timestamp": ts,
        "subagentRunId": child,
        "message": message,
    }
    if code is not None:
        out["code"] = code
    return out


def token_usage(
    model: str | None, inputs: int | None, outputs: int | None, total: int | None
) -> Wire:
    """A `TokenUsage` (the fields without a value left out)."""
    out: Wire = {}
    for key, value in (
        ("model", model),
        ("inputTokens", inputs),
        ("outputTokens", outputs),
        ("totalTokens", total),
    ):
        if value is not None:
            out[key] = value
    return out


def interrupt(
    call_id: str,
    *,
    message: str,
    response_schema: dict[str, Any],
    expires_at: str,
    metadata: dict[str, Any],
) -> Wire:
    """An `Interrupt` of a tool call (reason `tool_call`, its id the call's)."""
    return {
        "id": call_id,
        "reason": "tool_call",
        "message": message,
        "toolCallId": call_id,
        "responseSchema": response_schema,
        "expiresAt": expires_at,
        "metadata": metadata,
    }

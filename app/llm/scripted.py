"""Deterministic models: `ScriptedModel` answers from a list, `FunctionModel` from a function.

Both record what they were sent (`calls`), for tests and for clients' own tests (DESIGN §6:
`"model": "scripted"` with a `model_script`). Neither can be forced to call a tool nor to
answer with JSON: a call's `force_tool` and `answer_schema` are recorded, and the reply is the
script's (or the function's) all the same.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.errors import ScriptExhaustedError
from app.engine.ports import FREE, DeltaSink, Message, Price, Reply, TokenUsage, ToolCall, ToolSpec


@dataclass(frozen=True, slots=True)
class ModelCall:
    """What one call to a test model was sent."""

    messages: list[Message]
    tools: list[str]
    force_tool: str | None = None
    """The tool the call asked the reply to call (a planning call's update_plan), if any."""
    answer_schema: Mapping[str, Any] | None = None
    """The JSON Schema the call asked an answer to match (a run's output_schema), if any."""


def reply_from_script(entry: Mapping[str, Any], index: int) -> Reply:
    """One `model_script` entry: {"content", "tool_calls": [{"name", "arguments", "id"?}],
    "usage"?}.

    `arguments` may be an object or a raw string (to script malformed JSON).
    """
    calls = []
    for n, call in enumerate(entry.get("tool_calls") or ()):
        arguments = call.get("arguments", {})
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        calls.append(ToolCall(call.get("id") or f"call_{index}_{n}", call["name"], raw))
    usage = entry.get("usage")
    return Reply(
        content=entry.get("content"),
        tool_calls=tuple(calls),
        usage=TokenUsage(usage["prompt_tokens"], usage["completion_tokens"]) if usage else None,
        finish_reason="tool_calls" if calls else "stop",
    )


def _stream(reply: Reply, on_delta: DeltaSink | None, size: int = 8) -> None:
    """Hand a reply's text to `on_delta` in small pieces, as a streaming model would."""
    if on_delta is not None and reply.content:
        text = reply.content
        for i in range(0, len(text), size):
            on_delta(text[i : i + size])


class ScriptedModel:
    """Answers each call with the next reply of its script; fails loudly when it runs out.

    A script entry may be a `Reply` or a `model_script` mapping, which may also hold
    `delay_s` (latency before answering, to script a slow model). It costs nothing unless
    given a `price`.

    Its place in the script is state of its own (`ResumableModel`): a run's checkpoint saves
    it, and a run resumed from that checkpoint (another process, another replica) goes on
    from the same reply, so a step redone after a takeover is answered as it was the first
    time. A call that was interrupted (a timeout, a cancel) used its reply all the same.
    """

    name = "scripted"

    def __init__(
        self,
        replies: Sequence[Reply | Mapping[str, Any]],
        start: int = 0,
        *,
        price: Price | None = FREE,
    ) -> None:
        self.price = price
        self._replies = list(replies)
        self._start = start
        """Replies a run already used before it resumed from a checkpoint."""
        self.calls: list[ModelCall] = []

    def saved_state(self) -> dict[str, Any]:
        return {"next_reply": self._start + len(self.calls)}

    def restore(self, saved: Mapping[str, Any]) -> None:
        self._start = int(saved["next_reply"]) - len(self.calls)

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        on_delta: DeltaSink | None = None,
        force_tool: str | None = None,
        answer_schema: Mapping[str, Any] | None = None,
    ) -> Reply:
        index = self._start + len(self.calls)
        self.calls.append(
            ModelCall(list(messages), [t.name for t in tools], force_tool, answer_schema)
        )
        if index >= len(self._replies):
            raise ScriptExhaustedError(
                f"the model script has {len(self._replies)} replies and call {index + 1} "
                "asked for another: add replies, or lower max_steps"
            )
        entry = self._replies[index]
        if isinstance(entry, Reply):
            reply = entry
        else:
            if entry.get("delay_s"):
                await asyncio.sleep(float(entry["delay_s"]))
            reply = reply_from_script(entry, index)
        _stream(reply, on_delta)
        return reply


ReplyFunction = Callable[[list[Message], list[ToolSpec]], Reply | Awaitable[Reply]]


class FunctionModel:
    """Answers each call with `fn(messages, tools)`, sync or async: for replies that depend
    on what the model was sent, or for a model that hangs or fails on cue."""

    def __init__(
        self, fn: ReplyFunction, *, name: str = "function", price: Price | None = FREE
    ) -> None:
        self._fn = fn
        self.name = name
        self.price = price
        self.calls: list[ModelCall] = []

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        on_delta: DeltaSink | None = None,
        force_tool: str | None = None,
        answer_schema: Mapping[str, Any] | None = None,
    ) -> Reply:
        self.calls.append(
            ModelCall(list(messages), [t.name for t in tools], force_tool, answer_schema)
        )
        result = self._fn(list(messages), list(tools))
        reply = await result if inspect.isawaitable(result) else result
        _stream(reply, on_delta)
        return reply

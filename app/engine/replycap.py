"""How much of what a model says enters a run: one reply's text and one tool call's
arguments, each at most `max_chars` characters (`FINISHLINE_MAX_REPLY_CHARS`; 0: no cap).
`CappedModel` wraps the run's model so, and stops the text it streams at the cap too.

A model can answer with megabytes (a runaway generation, arguments pasting a whole file).
Kept whole, that is one thought or action event, and a conversation sent back on every later
call, of that size. So, before anything else sees the reply:

- text over the cap is cut at a semantic boundary (`truncate`'s text rules) and ends with
  `Prompts.reply_cut_note`; the thought event, the conversation and a plain answer carry the
  cut text;
- a tool call whose arguments are over the cap keeps `{"_arguments_dropped_chars": N}` as
  its arguments in the conversation (valid JSON for every provider, and what the model sees
  of its call) and `oversize` set to N, their length: it does not run, and the model is told
  why (`Prompts.arguments_too_long`). A step redone from a checkpoint rebuilds its calls from
  the conversation (`acting.reply_of`): `restored_call` reads the marker back, so a dropped
  call never runs then either.

The work is linear in the cap, not in the reply: only the first `max_chars + 1` characters
are looked at. Without usage from the provider, the engine estimates a capped reply's tokens
from what was kept. What the endpoint may send at all is bounded before this, by the adapter
(`app.llm.bodycap`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from app.engine import jsontext
from app.engine.ports import (
    ChatModel,
    DeltaSink,
    Message,
    Reply,
    ToolCall,
    ToolSpec,
    resumable,
)
from app.engine.prompts import Prompts
from app.engine.truncate import truncate


def cap_text(text: str, max_chars: int, prompts: Prompts) -> str:
    """`text`, or its first part of at most `max_chars` characters and a note."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    kept = truncate(text[: max_chars + 1], max_chars, note="").kept
    return kept + prompts.reply_cut_note.format(shown=len(kept), total=len(text))


DROPPED = "_arguments_dropped_chars"
"""The key of the arguments a dropped call keeps in the conversation."""


def cap_call(call: ToolCall, max_chars: int) -> ToolCall:
    if max_chars <= 0 or len(call.arguments) <= max_chars:
        return call
    size = len(call.arguments)
    return replace(call, arguments=json.dumps({DROPPED: size}), oversize=size)


def restored_call(call: ToolCall) -> ToolCall:
    """`call` as rebuilt from the conversation, with `oversize` set again if it was dropped."""
    if not call.arguments.startswith('{"' + DROPPED):
        return call
    try:
        size = jsontext.loads(call.arguments)[DROPPED]
    except (ValueError, KeyError, TypeError):
        return call
    return replace(call, oversize=size) if isinstance(size, int) and size > 0 else call


def cap_reply(reply: Reply, max_chars: int, prompts: Prompts) -> Reply:
    """`reply` with its text and each call's arguments within `max_chars` (see above)."""
    if max_chars <= 0:
        return reply
    content = None if reply.content is None else cap_text(reply.content, max_chars, prompts)
    calls = tuple(cap_call(call, max_chars) for call in reply.tool_calls)
    unchanged = content is reply.content and all(
        a is b for a, b in zip(calls, reply.tool_calls, strict=True)
    )
    return reply if unchanged else replace(reply, content=content, tool_calls=calls)


class CappedModel:
    """`model`, its replies capped (`cap_reply`) and its streamed text stopped at the cap;
    resumable as `model` is (`ResumableModel`)."""

    def __init__(self, model: ChatModel, max_chars: int, prompts: Prompts) -> None:
        self.model = model
        self.name = model.name
        self.price = model.price
        self.max_chars = max_chars
        self.prompts = prompts
        self._resumable = resumable(model)

    def saved_state(self) -> dict[str, Any] | None:
        return self._resumable.saved_state() if self._resumable is not None else None

    def restore(self, saved: Mapping[str, Any]) -> None:
        if self._resumable is not None:
            self._resumable.restore(saved)

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        on_delta: DeltaSink | None = None,
        force_tool: str | None = None,
        answer_schema: Mapping[str, Any] | None = None,
    ) -> Reply:
        sink = on_delta
        if on_delta is not None and self.max_chars > 0:
            room = [self.max_chars]

            def sink(text: str) -> None:
                kept = text[: room[0]]
                if kept:
                    room[0] -= len(kept)
                    on_delta(kept)

        reply = await self.model.complete(
            messages, tools, on_delta=sink, force_tool=force_tool, answer_schema=answer_schema
        )
        return cap_reply(reply, self.max_chars, self.prompts)

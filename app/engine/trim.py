"""Keeping one LLM call's prompt under `max_context_tokens`: the oldest tool results elided."""

from __future__ import annotations

from app.engine.prompts import Prompts
from app.engine.state import RunState


def trim_context(state: RunState, budget: int, prompts: Prompts) -> int:
    """Elide the oldest tool results until the prompt fits `budget` tokens; how many were elided.

    The elided results stay whole in the event log; the model sees a one-line stub.
    """
    if state.prompt_estimate <= budget:
        return 0
    names: dict[str, str] = {}
    count = 0
    for index, message in enumerate(state.messages):
        if state.prompt_estimate <= budget:
            break
        for call in message.get("tool_calls") or ():
            names[call["id"]] = call["function"]["name"]
        if message["role"] != "tool" or index in state.elided:
            continue
        content = message.get("content") or ""
        tool = names.get(message.get("tool_call_id", ""), "a tool")
        stub = prompts.context_trim_stub.format(tool=tool, chars=len(content))
        state.replace(index, {**message, "content": stub})
        state.elided.add(index)
        count += 1
    return count


def trim_notice(state: RunState, limit: int, spec_tokens: int, prompts: Prompts) -> str | None:
    """Fit the prompt under `limit` tokens (the tool specs take `spec_tokens` of it): the
    notice for the model when tool results were elided, else None."""
    trimmed = trim_context(state, limit - spec_tokens, prompts)
    if not trimmed:
        return None
    return prompts.context_trim_notice.format(limit=limit, count=trimmed)

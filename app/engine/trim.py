"""Keeping one LLM call's prompt under `max_context_tokens` (DESIGN §2), oldest first:

1. the tool results a follow-up inherited from its previous runs are elided to a one-line
   stub;
2. when that is not enough (a long chain of follow-ups), the oldest inherited turns are
   dropped whole: a turn runs from a user message to the next, and a tool-call exchange (an
   assistant message with calls and their tool messages) is never split;
3. then the run's own oldest tool results are elided.

The system prompt and the run's own task and steps are never dropped. Everything elided or
dropped stays whole in the event log (the previous runs' own logs, for what was inherited);
the `context_trim` intervention says what was done.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.engine.ports import Message
from app.engine.prompts import Prompts
from app.engine.state import RunState


@dataclass(frozen=True, slots=True)
class Trimmed:
    """What one trim did: tool results elided, inherited turns (and their messages) dropped."""

    elided: int = 0
    turns: int = 0
    messages: int = 0


_NOTHING = Trimmed()


def trim_context(state: RunState, budget: int, prompts: Prompts) -> Trimmed:
    """Fit the prompt under `budget` tokens, as the module's doc says; what it took."""
    if state.prompt_estimate <= budget:
        return _NOTHING  # the usual case, at every step of a run with a cap
    first = 1 if state.messages[0]["role"] == "system" else 0
    elided = _elide(state, budget, prompts, first + state.inherited)
    turns = dropped = 0
    while state.inherited and state.prompt_estimate > budget:
        size = _turn_length(state.messages, first, first + state.inherited)
        state.drop_inherited(size)
        turns += 1
        dropped += size
        # what was elided and then dropped is told as dropped only
        elided = [i - size for i in elided if i >= first + size]
    more = _elide(state, budget, prompts, len(state.messages))
    return Trimmed(len(elided) + len(more), turns, dropped)


def _elide(state: RunState, budget: int, prompts: Prompts, stop: int) -> list[int]:
    """Elide the oldest tool results before index `stop` until the prompt fits `budget`
    tokens; the indexes of those elided. The model sees a one-line stub instead."""
    names: dict[str, str] = {}
    elided: list[int] = []
    for index, message in enumerate(state.messages[:stop]):
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
        elided.append(index)
    return elided


def _turn_length(messages: Sequence[Message], start: int, stop: int) -> int:
    """How many messages the turn at `start` holds: up to the next user message that no
    unanswered tool call precedes, or to `stop`."""
    open_calls: set[str] = set()
    for index in range(start, stop):
        message = messages[index]
        role = message["role"]
        if role == "user" and index > start and not open_calls:
            return index - start
        if role == "assistant":
            open_calls.update(call["id"] for call in message.get("tool_calls") or ())
        elif role == "tool":
            open_calls.discard(message.get("tool_call_id", ""))
    return stop - start


def trim_notice(state: RunState, limit: int, spec_tokens: int, prompts: Prompts) -> str | None:
    """Fit the prompt under `limit` tokens (the tool specs take `spec_tokens` of it): the
    notice saying what was elided and dropped, else None."""
    trimmed = trim_context(state, limit - spec_tokens, prompts)
    if trimmed is _NOTHING:
        return None
    said = []
    if trimmed.elided:
        said.append(prompts.context_trim_notice.format(limit=limit, count=trimmed.elided))
    if trimmed.turns:
        said.append(
            prompts.context_drop_notice.format(
                limit=limit, turns=trimmed.turns, messages=trimmed.messages
            )
        )
    return " ".join(said) or None

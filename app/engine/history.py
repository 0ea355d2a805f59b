"""Where a follow-up run starts: the previous run's conversation, made whole again.

A run's final conversation may end mid-exchange: its `task_finished` call has no tool result,
a cancel can leave calls unanswered, and a run that hit a limit may have no answer at all.
`follow_up_messages` turns it into a conversation any chat model accepts, ending with one
assistant message that says how the previous run ended; the new task follows it
(`open_conversation`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.engine.policies import Limits
from app.engine.ports import Message, OutputSchema
from app.engine.prompts import Prompts
from app.engine.state import RunState
from app.engine.typed import schema_prompt


@dataclass(frozen=True, slots=True)
class PreviousRun:
    """What a follow-up inherits: the previous run's final messages and how it ended."""

    messages: Sequence[Message]
    answer: str | None
    reason: str


def _answered_ids(messages: Sequence[Message]) -> set[str]:
    return {m["tool_call_id"] for m in messages if m.get("role") == "tool" and "tool_call_id" in m}


def follow_up_messages(previous: PreviousRun, prompts: Prompts) -> list[Message]:
    """The previous conversation without its system message, with every remaining tool call
    answered, ending with an assistant message: its answer, else its last assistant text,
    else a one-line note of how it ended."""
    answered = _answered_ids(previous.messages)
    kept_calls: set[str] = set()
    out: list[Message] = []
    for message in previous.messages:
        role = message.get("role")
        if role == "system":
            continue
        if role == "tool":
            if message.get("tool_call_id") in kept_calls:
                out.append(message)
            continue
        calls = message.get("tool_calls") if role == "assistant" else None
        if calls:
            calls = [c for c in calls if c.get("id") in answered]
            kept_calls.update(c["id"] for c in calls)
            if calls:
                out.append({**message, "tool_calls": calls})
            elif message.get("content"):
                out.append({"role": "assistant", "content": message["content"]})
            continue
        out.append(message)
    closing = previous.answer or _last_assistant_text(out)
    if closing is None:
        closing = prompts.previous_run_ended.format(reason=previous.reason)
    last = out[-1] if out else None
    already = (
        last is not None
        and last.get("role") == "assistant"
        and not last.get("tool_calls")
        and last.get("content") == closing
    )
    if not already:
        out.append({"role": "assistant", "content": closing})
    return out


def _last_assistant_text(messages: Sequence[Message]) -> str | None:
    for message in reversed(messages):
        if message.get("role") == "assistant" and message.get("content"):
            return str(message["content"])
    return None


def open_conversation(
    state: RunState,
    system_prompt: str | None,
    task: str,
    prompts: Prompts,
    limits: Limits,
    previous: PreviousRun | None,
    output: OutputSchema | None = None,
) -> None:
    """A fresh run's first messages, into `state`: the system prompt (with the stop-tool
    prompt when the stop tool is on; else, with an output schema, the prompt that gives it),
    a follow-up's inherited conversation (`state.inherited` counts it: the part whose oldest
    turns `trim` may drop whole), then the task."""
    system = system_prompt or ""
    if limits.stop_tool:
        system = f"{system}\n\n{prompts.stop_tool_prompt}".strip()
    elif output is not None:  # (with the stop tool, task_finished's answer shows it)
        system = f"{system}\n\n{schema_prompt(prompts, output)}".strip()
    if system:
        state.append({"role": "system", "content": system})
    if previous is not None:
        inherited = follow_up_messages(previous, prompts)
        for message in inherited:
            state.append(message)
        state.inherited = len(inherited)
    state.append({"role": "user", "content": task})

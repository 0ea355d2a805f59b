"""What the model is offered and what it said, as the chat API carries them: the tool specs
sent with each LLM call (the stop tool's among them, typed when the run has an output
schema, DESIGN §12) with their token estimate, and a reply as an assistant message and back.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from app.engine.ports import Message, OutputSchema, Reply, Tool, ToolCall, ToolSpec
from app.engine.prompts import TASK_FINISHED, Prompts
from app.engine.replycap import restored_call
from app.engine.tokens import estimate_tokens
from app.engine.typed import finish_spec


@functools.lru_cache(maxsize=32)  # prompt sets are made at start-up: a handful
def task_finished_spec(prompts: Prompts) -> ToolSpec:
    """The stop tool's spec in `prompts`' language: made once per prompt set, shared."""
    return ToolSpec(
        name=TASK_FINISHED,
        description=prompts.task_finished_description,
        parameters={
            "type": "object",
            "properties": {
                "answer": {"type": "string", "description": prompts.task_finished_answer}
            },
            "required": ["answer"],
            "additionalProperties": False,
        },
    )


@functools.lru_cache(maxsize=32)  # prompt sets are made at start-up: a handful
def _finish_spec_tokens(prompts: Prompts) -> int:
    return _estimate_specs([task_finished_spec(prompts)])


def _estimate_specs(specs: Sequence[ToolSpec]) -> int:
    return estimate_tokens([{"content": str(s.to_openai())} for s in specs])


def tool_specs(
    tools: Sequence[Tool],
    stop_tool: bool,
    prompts: Prompts,
    output: OutputSchema | None = None,
) -> tuple[list[ToolSpec], int]:
    """The specs sent with each LLM call (the tools', then task_finished's when the stop
    tool is on, its `answer` the output schema when the run has one) and their estimated
    tokens; the plain task_finished's estimate is made once."""
    specs = [ToolSpec(t.name, t.description, t.parameters) for t in tools]
    tokens = _estimate_specs(specs)
    if stop_tool and output is not None:
        finish, finish_tokens = _typed_finish(output.schema, prompts)
        specs.append(finish)
        tokens += finish_tokens
    elif stop_tool:
        specs.append(task_finished_spec(prompts))
        tokens += _finish_spec_tokens(prompts)
    return specs, tokens


_TYPED_FINISHES: dict[tuple[int, int], tuple[Any, Prompts, ToolSpec, int]] = {}
"""The typed stop tool's spec and its tokens, by the identity of the schema and prompt set
(kept in the entry, so that an id cannot be reused while it is here): a schema compiled once
(`app.output`, remembered by content) is one object, shared by the runs that give it."""
TYPED_FINISHES = 256


def _typed_finish(schema: Mapping[str, Any], prompts: Prompts) -> tuple[ToolSpec, int]:
    key = (id(schema), id(prompts))
    found = _TYPED_FINISHES.get(key)
    if found is not None and found[0] is schema and found[1] is prompts:
        return found[2], found[3]
    spec = finish_spec(schema, prompts)
    tokens = _estimate_specs([spec])
    if len(_TYPED_FINISHES) >= TYPED_FINISHES:
        del _TYPED_FINISHES[next(iter(_TYPED_FINISHES))]  # the oldest
    _TYPED_FINISHES[key] = (schema, prompts, spec, tokens)
    return spec, tokens


def only_finish(calls: tuple[ToolCall, ...]) -> bool:
    """Whether every call is of task_finished (`all(...)` without a generator: per step)."""
    for call in calls:  # noqa: SIM110 (a generator per step costs more than this loop)
        if call.name != TASK_FINISHED:
            return False
    return True


def assistant_message(reply: Reply) -> Message:
    return {
        "role": "assistant",
        "content": reply.content,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ],
    }


def reply_of(message: Message) -> Reply:
    """The reply an assistant message with tool calls came from (`assistant_message`'s
    inverse), for a step redone after an interruption."""
    calls = tuple(
        restored_call(ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"]))
        for c in message.get("tool_calls") or ()
    )
    return Reply(content=message.get("content"), tool_calls=calls)

"""Small real parts for engine tests: a function-backed tool, script builders, a collector."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from app.engine.ports import Reply, TokenUsage, ToolCall, ToolContext
from app.engine.steps import Finished, Step

ToolFn = Callable[[dict[str, Any], ToolContext], str | Awaitable[str]]


@dataclass
class FnTool:
    """A tool whose behaviour is a function; validates `required` string properties only."""

    name: str
    fn: ToolFn
    required: tuple[str, ...] = ()
    idempotent: bool = True
    description: str = "a test tool"
    calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def parameters(self) -> Mapping[str, Any]:
        return {
            "type": "object",
            "properties": {name: {"type": "string"} for name in self.required},
            "required": list(self.required),
        }

    def validate(self, arguments: Mapping[str, Any]) -> str | None:
        for name in self.required:
            if name not in arguments:
                return f"'{name}' is a required property"
            if not isinstance(arguments[name], str):
                return f"at '{name}': {arguments[name]!r} is not of type 'string'"
        return None

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        self.calls.append(arguments)
        result = self.fn(arguments, ctx)
        return await result if inspect.isawaitable(result) else result  # type: ignore[return-value]


def echo_tool(name: str = "echo", **kwargs: Any) -> FnTool:
    return FnTool(name, lambda args, ctx: f"echo: {args.get('text', '')}", **kwargs)


_ids = iter(range(1_000_000))


def call(
    name: str, arguments: Mapping[str, Any] | str | None = None, call_id: str | None = None
) -> ToolCall:
    import json

    raw = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return ToolCall(call_id or f"call_{next(_ids)}", name, raw)


def says(
    content: str | None = None, *calls: ToolCall, tokens: tuple[int, int] | None = None
) -> Reply:
    usage = TokenUsage(*tokens) if tokens else None
    return Reply(content=content, tool_calls=tuple(calls), usage=usage)


def finish(answer: str = "done", content: str | None = None) -> Reply:
    return says(content, call("task_finished", {"answer": answer}))


async def collect(steps: AsyncIterator[Step], *, within: float = 10.0) -> list[Step]:
    """Every step of a run; asserts it ends with exactly one Finished, as its last step."""
    out: list[Step] = []
    with anyio.fail_after(within):
        async for step in steps:
            out.append(step)
    finished = [s for s in out if isinstance(s, Finished)]
    assert len(finished) == 1, f"expected one Finished, got {len(finished)}"
    assert out[-1] is finished[0]
    return out


def of_type(steps: list[Step], kind: type) -> list[Any]:
    return [s for s in steps if isinstance(s, kind)]


def ending(steps: list[Step]) -> Finished:
    last = steps[-1]
    assert isinstance(last, Finished)
    return last

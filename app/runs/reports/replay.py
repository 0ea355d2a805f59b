"""Replay (DESIGN §20, `POST /runs/{id}/replay`): today's engine driven again over an ended
run's recorded model replies and tool results. No model or tool is called, no token spent,
nothing stored; the events it makes are compared with the recorded ones.

What is rebuilt from the log: each model reply (per `llm.call` event: the `thought` text and
the `action` calls after it in its step; the degraded final call's text is the run's answer;
token counts as recorded), and each tool result (per tool, in call order: the `observation`s'
content, an error result raised again as the tool's error). What is compared: every event
from the first `step.started` to the terminal one, `token`s excepted, without what moves with
time (`duration_ms`) and by type, step and data; the terminal event by reason, answer and
degraded. A run that ended on its deadline (`timeout`), waited for a person, or whose events
were capped (`content_capped`) cannot be replayed faithfully: its replay says how it
diverges like any other."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from app.engine.errors import ScriptExhaustedError, ToolError
from app.engine.events import TERMINAL_EVENT_TYPES, EventType
from app.engine.inputs import RunInputs
from app.engine.loop import react
from app.engine.ports import (
    DeltaSink,
    Message,
    Reply,
    TokenUsage,
    Tool,
    ToolCall,
    ToolContext,
    ToolSpec,
)
from app.engine.prompts import UPDATE_PLAN
from app.engine.steps import Checkpoint, Finished, Suspended
from app.runs.records import TERMINAL_EVENTS, Event, status_for

VOLATILE = frozenset({"duration_ms"})
"""Event fields that move with time: not compared."""
ECHOED = {EventType.STEP_STARTED.value: "max_steps"}
"""A setting an event repeats: not compared (a replay with another value of it would
otherwise differ at its first event, not where the run goes another way)."""


class ReplayModel:
    """Answers each call with the next recorded reply; raises `ScriptExhaustedError` (an
    `LLMError` that is not retried) past the last, where a replay goes beyond its run."""

    def __init__(self, name: str, price: Any, replies: Sequence[Reply]) -> None:
        self.name = name
        self.price = price
        self._replies = deque(replies)

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        on_delta: DeltaSink | None = None,
        force_tool: str | None = None,
        answer_schema: Mapping[str, Any] | None = None,
    ) -> Reply:
        if not self._replies:
            raise ScriptExhaustedError("the recorded run made no more model calls")
        return self._replies.popleft()


class ReplayTool:
    """A tool of the run that answers with its recorded results, in call order; arguments
    are checked as the real tool checks them."""

    def __init__(self, real: Tool, results: deque[tuple[str, bool]], failed: str) -> None:
        self.real = real
        self.name: str = real.name
        self.description: str = real.description
        self.parameters: Mapping[str, Any] = real.parameters
        self.idempotent: bool = real.idempotent
        self._results = results
        self._failed = failed.split("{error}")  # the template an error result was made with

    def validate(self, arguments: Mapping[str, Any]) -> str | None:
        return self.real.validate(arguments)

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        if not self._results:
            raise ToolError("the recorded run made no more calls of this tool")
        text, is_error = self._results.popleft()
        if is_error:  # raised again: the engine words it as it did
            head, _, tail = (self._failed[0].format(tool=self.name), None, self._failed[-1])
            inner = text.removeprefix(head)
            raise ToolError(inner[: len(inner) - len(tail)] if tail else inner)
        return text


def recorded_replies(events: Sequence[Event], answer: str | None) -> list[Reply]:
    """The model's replies, as the run's events recorded them."""
    replies: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for event in events:
        if event.type == EventType.LLM_CALL:
            data = event.data
            usage = None
            if not data.get("estimated"):
                usage = TokenUsage(
                    data["prompt_tokens"], data["completion_tokens"], False, data["cached_tokens"]
                )
            current = {"content": None, "calls": [], "usage": usage, "step": event.step}
            current["final"] = bool(data.get("final"))
            replies.append(current)
        elif current is not None and event.step == current["step"]:
            if event.type == EventType.THOUGHT:
                text = event.data.get("text", "")
                current["content"] = (current["content"] or "") + text
            elif event.type == EventType.ACTION:
                arguments = event.data.get("arguments")
                raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
                current["calls"].append(ToolCall(event.data["call_id"], event.data["tool"], raw))
    return [
        Reply(content=r["content"], tool_calls=tuple(r["calls"]), usage=r["usage"]) for r in replies
    ]


def recorded_results(events: Sequence[Event]) -> dict[str, deque[tuple[str, bool]]]:
    """Each tool's results in call order (calls the engine answered itself left out)."""
    results: dict[str, deque[tuple[str, bool]]] = {}
    for event in events:
        if event.type == EventType.OBSERVATION and not event.data.get("repeated"):
            queue = results.setdefault(event.data["tool"], deque())
            queue.append((event.data["content"], bool(event.data.get("is_error"))))
    return results


def comparable(type: str, step: int, data: Mapping[str, Any]) -> dict[str, Any]:
    """An event as a replay compares it."""
    if type in TERMINAL_EVENT_TYPES:
        result = data.get("result") or {}
        kept = {k: result.get(k) for k in ("reason", "answer", "degraded")}
        return {"type": type, "step": step, "result": kept}
    echoed = ECHOED.get(type)
    kept = {k: v for k, v in data.items() if k not in VOLATILE and k != echoed}
    return {"type": type, "step": step, "data": kept}


def shown(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The recorded events a replay remakes, as compared."""
    started = next((i for i, e in enumerate(events) if e.type == EventType.STEP_STARTED), None)
    if started is None:
        return []
    return [
        comparable(e.type, e.step, json.loads(json.dumps(e.data)))
        for e in events[started:]
        if e.type not in (EventType.TOKEN, EventType.RUN_RECOVERED, EventType.USER_MESSAGE)
    ]


async def replayed(inputs: RunInputs, run_id: str) -> list[dict[str, Any]]:
    """Drive the engine over `inputs` (its model and tools the recorded ones) to its end."""
    made: list[dict[str, Any]] = []
    async for step in react(inputs, run_id=run_id):
        if isinstance(step, Checkpoint | Suspended):
            continue
        if isinstance(step, Finished):
            result = {"reason": step.reason.value, "answer": step.answer, "degraded": step.degraded}
            terminal = TERMINAL_EVENTS[status_for(step.reason)]
            made.append({"type": terminal.value, "step": step.step, "result": result})
            break
        if step.type == EventType.TOKEN:
            continue
        data = json.loads(json.dumps(step.payload(), default=str))
        made.append(comparable(step.type.value, step.step, data))
    return made


def divergence(recorded: list[dict[str, Any]], replay: list[dict[str, Any]]) -> dict[str, Any]:
    """`{identical, events, first_divergence}` (its `seq`: the place in the compared events)."""
    for seq, (then, now) in enumerate(zip(recorded, replay, strict=False), start=1):
        if then != now:
            return _answer(replay, seq, then, now)
    if len(recorded) != len(replay):
        at = min(len(recorded), len(replay))
        was = recorded[at] if at < len(recorded) else None
        return _answer(replay, at + 1, was, replay[at] if at < len(replay) else None)
    return {"identical": True, "events": len(replay), "first_divergence": None}


def _answer(replay: list[dict[str, Any]], seq: int, was: Any, now: Any) -> dict[str, Any]:
    first = {"seq": seq, "recorded": was, "replayed": now}
    return {"identical": False, "events": len(replay), "first_divergence": first}


def on_record(inputs: RunInputs, events: Sequence[Event], answer: str | None) -> None:
    """Give `inputs` the recorded model and tools in place of the real ones."""
    real = inputs.model
    replies = recorded_replies(events, answer)
    inputs.model = ReplayModel(real.name, getattr(real, "price", None), replies)
    replay_tools(inputs, events)


def replay_tools(inputs: RunInputs, events: Sequence[Event]) -> None:
    """Give `inputs` the recorded tools in place of the real ones (`update_plan` stays: it
    only writes the run's plan)."""
    results = recorded_results(events)
    inputs.tools = [
        tool  # (a ReplayTool is a Tool: the protocol's members, typed alike)
        if tool.name == UPDATE_PLAN
        else ReplayTool(tool, results.get(tool.name, deque()), inputs.prompts.tool_failed)
        for tool in inputs.tools
    ]


SPENT = ("llm_calls", "tool_calls", "prompt_tokens", "completion_tokens", "cost_usd")


async def state_before(inputs: RunInputs, run_id: str, step: int) -> dict[str, Any]:
    """The engine's state as the run stood before `step` (2 or more): its checkpoint after
    step - 1, replayed. A fork spent none of it: its spending counters start at zero."""
    kept: dict[str, Any] | None = None
    steps = react(inputs, run_id=run_id)
    try:
        async for made in steps:
            if isinstance(made, Checkpoint) and made.step == step - 1:
                if not made.state.get("acting"):
                    kept = made.state
            elif made.step >= step or isinstance(made, Finished):
                break
    finally:
        await steps.aclose()  # type: ignore[attr-defined]
    if kept is None:
        raise ValueError(f"the run has no state after its step {step - 1}")
    fresh = {**kept, **dict.fromkeys(SPENT, 0)}
    fresh.update(unpriced_calls=0, last_call_cost_usd=0.0, elapsed_s=0.0, model=None)
    return fresh

"""Events one line each (`finishline events`), or as JSON lines (`--json`). Following a run,
a sub-agent's child run is followed too, its lines indented under the call that started it
(`nested`)."""

from __future__ import annotations

import contextlib
import json

from rich.console import Console
from rich.text import Text

from app.cli.client import Event
from app.cli.exits import reason_of
from app.cli.text import compact_arguments, local_time, one_line, usd
from app.engine.events import TERMINAL_EVENT_TYPES, EventType


def event_summary(event: Event) -> str:
    """The gist of an event on one line."""
    kind = event.get("type")
    if kind == EventType.RUN_QUEUED:
        tools = ",".join(event.get("tools") or []) or "none"
        return (
            f"model={event.get('model')} tools={tools} task={one_line(str(event.get('task')), 80)}"
        )
    if kind == EventType.STEP_STARTED:
        return f"step {event.get('step')}/{event.get('max_steps')}"
    if kind == EventType.THOUGHT:
        return one_line(str(event.get("text", "")))
    if kind == EventType.TOKEN:
        return json.dumps(event.get("delta", ""), ensure_ascii=False)
    if kind == EventType.ACTION:
        return f"{event.get('tool')}({compact_arguments(event.get('arguments'))})"
    if kind == EventType.OBSERVATION:
        flags = [
            name for name in ("is_error", "truncated", "repeated", "timed_out") if event.get(name)
        ]
        marks = f" [{' '.join(flags)}]" if flags else ""
        return f"{event.get('tool')}{marks} → {one_line(str(event.get('content', '')), 160)}"
    if kind == EventType.AGENT_STARTED:
        run = event.get("child_run_id") or "a remote agent"
        return f"{event.get('agent')} → {run}"
    if kind == EventType.AGENT_FINISHED:
        return f"{event.get('agent')} {event.get('status')} ({event.get('reason')})"
    if kind == EventType.INTERVENTION:
        return f"{event.get('kind')}: {one_line(str(event.get('message', '')), 160)}"
    if kind == EventType.LLM_CALL:
        final = " final" if event.get("final") else ""
        return (
            f"{event.get('model')} {event.get('duration_ms')} ms "
            f"{event.get('prompt_tokens')}+{event.get('completion_tokens')} tokens "
            f"{usd(event.get('cost_usd'))}{final}"
        )
    if kind == EventType.USER_MESSAGE:
        late = "" if event.get("delivered", True) else " [not delivered: the run had ended]"
        return f"{one_line(str(event.get('content', '')), 160)}{late}"
    if kind == EventType.LLM_RETRY:
        return f"attempt {event.get('attempt')}: {event.get('error')} (in {event.get('delay_s')} s)"
    if kind in TERMINAL_EVENT_TYPES:
        parts = [f"reason={reason_of(event)}"]
        result = event.get("result") or {}
        if result:
            if result.get("degraded"):
                parts.append("degraded")
            if result.get("answer") is not None:
                parts.append(
                    f"answer={json.dumps(one_line(result['answer'], 120), ensure_ascii=False)}"
                )
        if event.get("error"):
            parts.append(f"error={event['error'].get('type')}: {event['error'].get('message')}")
        usage = event.get("usage") or {}
        parts.append(f"steps={usage.get('steps', 0)} tokens={usage.get('total_tokens', 0)}")
        parts.append(f"cost={usd(usage.get('cost_usd', 0.0))}")
        return " ".join(parts)
    payload = {k: v for k, v in event.items() if k not in ("run_id", "seq", "type", "ts", "step")}
    return one_line(json.dumps(payload, ensure_ascii=False, default=str), 160) if payload else ""


class LineRenderer:
    """`seq time step type summary`, one line each, cut to the console's width; a child
    run's lines are indented by its depth in the tree."""

    def __init__(self, console: Console, depth: int = 0) -> None:
        self.console = console
        self.depth = depth

    def live(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def nested(self) -> LineRenderer:
        """The renderer of a child run: one level deeper."""
        return LineRenderer(self.console, self.depth + 1)

    def show(self, event: Event) -> None:
        style = "red" if event.get("is_error") or event.get("type") == EventType.RUN_FAILED else ""
        line = Text.assemble(
            ("│ " * self.depth, "magenta"),
            (f"{event.get('seq', ''):>4} ", "dim"),
            (f"{local_time(event.get('ts'), '%H:%M:%S')} ", "dim"),
            (f"s{event.get('step', 0):<3}", "dim"),
            (f"{event.get('type', '?'):<15} ", "bold"),
            (event_summary(event), style),
        )
        self.console.print(line, no_wrap=True, overflow="ellipsis")


class JsonRenderer:
    """Each event as one JSON object on its own line, as the service sent it."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def live(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def nested(self) -> JsonRenderer:
        """A child run's events are lines of their own too (each names its run_id)."""
        return self

    def show(self, event: Event) -> None:
        print_raw(self.console, json.dumps(event, ensure_ascii=False))


def print_raw(console: Console, text: str) -> None:
    """`text` as is: no markup, no highlighting, no wrapping."""
    console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)

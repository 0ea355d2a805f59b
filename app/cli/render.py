"""How the CLI shows runs and events. Every renderer writes to a rich `Console` it is given,
so tests read what a person would see from a `Console(file=StringIO(), ...)`.

    RunRenderer     a run as it happens: one block per thought, action, observation,
                    intervention and retry, a live status line (steps, time, tokens) on a
                    terminal, then the ending: answer, reason, degraded marker, usage

`app.cli.lines` prints events one line each (or as JSON lines), `app.cli.tables` lists runs
and shows one.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, Protocol

from rich.console import Console, Group, RenderableType
from rich.json import JSON
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from app.cli.client import Event
from app.cli.exits import reason_of
from app.cli.text import compact_arguments, head, local_time, one_line, usage_text, usd
from app.engine.events import TERMINAL_EVENT_TYPES, EventType

LABEL_WIDTH = 12

STATUS_STYLES = {
    "queued": "dim",
    "running": "cyan",
    "completed": "green",
    "incomplete": "yellow",
    "failed": "red",
    "cancelled": "magenta",
}


class Renderer(Protocol):
    """What following a run needs of a renderer."""

    def show(self, event: Event) -> None:
        """Print one event."""

    def live(self) -> contextlib.AbstractContextManager[None]:
        """Around the time events arrive (a live display may redraw meanwhile)."""


def _row(label: str, style: str, body: RenderableType) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=LABEL_WIDTH, no_wrap=True, style=style)
    grid.add_column(ratio=1)
    grid.add_row(label, body)
    return grid


def answer_panel(result: dict[str, Any]) -> RenderableType:
    """The answer; a typed one (a run with an output_schema) as its value, in indented JSON."""
    answer = result.get("answer")
    degraded = bool(result.get("degraded"))
    if answer is None:
        return Text("(no answer)", style="dim")
    typed = "output" in result and not result.get("output_errors")
    title = ("output" if typed else "answer") + (" (degraded)" if degraded else "")
    body: RenderableType = Text(answer)
    if typed:
        body = JSON(json.dumps(result["output"], ensure_ascii=False), indent=2)
    return Panel(
        body,
        title=title,
        title_align="left",
        border_style="yellow" if degraded else "green",
    )


def output_errors_text(errors: list[dict[str, Any]]) -> Text:
    """Why a typed answer failed its schema: a line per error, its JSON path first."""
    text = Text()
    for n, error in enumerate(errors):
        text.append(("\n" if n else "") + str(error.get("path")), style="bold")
        text.append(f"  {error.get('message')}")
    return text


def ending_rows(
    status: str | None,
    result: dict[str, Any] | None,
    error: dict[str, Any] | None,
    usage: dict[str, Any] | None,
) -> list[RenderableType]:
    """The end of a run: answer, reason and degraded marker, error, usage."""
    rows: list[RenderableType] = []
    if result is not None:
        rows.append(answer_panel(result))
        if result.get("output_errors"):
            errors = output_errors_text(result["output_errors"])
            rows.append(_row("not valid", "bold red", errors))
        reason = Text(str(result.get("reason")), style="bold")
        if result.get("degraded"):
            reason.append("  DEGRADED", style="bold yellow")
            reason.append(" (a best answer at a limit, not the model's own finish)", style="dim")
        rows.append(_row("reason", "bold", reason))
    if status is not None:
        rows.append(_row("status", "bold", Text(status, style=STATUS_STYLES.get(status, ""))))
    if error:
        message = f"{error.get('type')}: {error.get('message')}"
        rows.append(_row("error", "bold red", Text(message, style="red")))
    rows.append(_row("usage", "bold", Text(usage_text(usage))))
    return rows


# -- a run as it happens ----------------------------------------------------------------------

_TERMINAL_STATUS: dict[str, str] = {
    EventType.RUN_COMPLETED: "completed",
    EventType.RUN_INCOMPLETE: "incomplete",
    EventType.RUN_FAILED: "failed",
    EventType.RUN_CANCELLED: "cancelled",
}


class _Status:
    """The live line under the events: steps of max_steps, time of max_time_s, tokens, cost
    (unknown once a call had no price). Rendered afresh at each refresh, so the clock moves
    between events."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.step = 0
        self.max_steps: int | None = None
        self.max_time_s: float | None = None
        self.started_at: float | None = None  # epoch seconds, from run.started's ts
        self.ended_at: float | None = None
        self.tokens = 0
        self.cost_usd: float | None = 0.0

    def elapsed(self) -> float:
        if self.started_at is None:
            return 0.0
        return max(0.0, (self.ended_at or self.clock()) - self.started_at)

    def __rich__(self) -> RenderableType:
        grid = Table.grid(padding=(0, 1))
        steps_of = f"/{self.max_steps}" if self.max_steps else ""
        time_of = f"/{self.max_time_s:g}s" if self.max_time_s else "s"
        grid.add_row(
            Text(f"step {self.step}{steps_of}", style="bold"),
            ProgressBar(total=self.max_steps or None, completed=self.step, width=20),
            Text(f"time {self.elapsed():.1f}{time_of}", style="bold"),
            ProgressBar(total=self.max_time_s or None, completed=self.elapsed(), width=20),
            Text(f"tokens {self.tokens}", style="dim"),
            Text(f"cost {usd(self.cost_usd)}", style="dim"),
        )
        return grid


def _epoch(stamp: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(stamp)).timestamp()
    except ValueError:
        return None


class RunRenderer:
    """Shows one run's events as blocks, with a live status line when the console is a
    terminal. `live()` wraps the part of following that may redraw the status line; leave it
    before asking the user anything."""

    def __init__(self, console: Console, *, clock: Callable[[], float] = time.time) -> None:
        self.console = console
        self.status = _Status(clock)
        self._handlers: dict[str, Callable[[Event], None]] = {
            EventType.RUN_QUEUED: self._run_queued,
            EventType.RUN_STARTED: self._run_started,
            EventType.STEP_STARTED: self._step_started,
            EventType.THOUGHT: self._thought,
            EventType.TOKEN: self._token,
            EventType.LLM_CALL: self._llm_call,
            EventType.LLM_RETRY: self._llm_retry,
            EventType.ACTION: self._action,
            EventType.OBSERVATION: self._observation,
            EventType.INTERVENTION: self._intervention,
            EventType.OUTCOME_GRADED: self._graded,
            EventType.USER_MESSAGE: self._user_message,
            EventType.AGENT_STARTED: self._agent_started,
            EventType.AGENT_FINISHED: self._agent_finished,
            **dict.fromkeys(TERMINAL_EVENT_TYPES, self._terminal),
        }

    @contextlib.contextmanager
    def live(self) -> Iterator[None]:
        if not self.console.is_terminal or self.status.ended_at is not None:
            yield
            return
        with Live(
            self.status,
            console=self.console,
            transient=True,
            refresh_per_second=4,
            redirect_stdout=False,
        ):
            yield

    def show_run(self, run: dict[str, Any]) -> None:
        """Before its events: what the run is (from POST /runs)."""
        settings = run.get("settings") or {}
        self.status.max_steps = settings.get("max_steps")
        self.status.max_time_s = settings.get("max_time_s")
        tools = ", ".join(run.get("tools") or []) or "none"
        agent = f" · agent {run['agent']}" if run.get("agent") else ""
        self.console.print(
            Text.assemble(
                ("run ", "bold"),
                (str(run.get("id")), "bold cyan"),
                f"{agent} · model {run.get('model')} · tools {tools}",
            )
        )

    def show(self, event: Event) -> None:
        kind = str(event.get("type"))
        handler = self._handlers.get(kind)
        if handler is not None:
            handler(event)
            return
        # a type this CLI does not know yet (a newer service): shown, not dropped
        payload = {k: v for k, v in event.items() if k not in ("run_id", "seq", "type", "ts")}
        text = f"{kind} {one_line(json.dumps(payload, default=str))}"
        self._print(_row("event", "dim", Text(text)))

    def _print(self, renderable: RenderableType) -> None:
        self.console.print(renderable)

    # one method per event type --------------------------------------------------------------

    def _run_queued(self, event: Event) -> None:
        settings = event.get("settings") or {}
        self.status.max_steps = settings.get("max_steps", self.status.max_steps)
        self.status.max_time_s = settings.get("max_time_s", self.status.max_time_s)
        self._print(_row("queued", "dim", Text(one_line(str(event.get("task", ""))), style="dim")))

    def _run_started(self, event: Event) -> None:
        self.status.started_at = _epoch(event.get("ts"))
        self._print(_row("started", "dim", Text(local_time(event.get("ts"), "%H:%M:%S"), "dim")))

    def _step_started(self, event: Event) -> None:
        self.status.step = int(event.get("step") or 0)
        self.status.max_steps = event.get("max_steps", self.status.max_steps)
        of = f"/{self.status.max_steps}" if self.status.max_steps else ""
        self.console.rule(f"step {self.status.step}{of}", style="dim", align="left")

    def _thought(self, event: Event) -> None:
        self._print(_row("thought", "bold cyan", Text(str(event.get("text", "")))))

    def _token(self, event: Event) -> None:
        """Token deltas are not shown one by one: the thought they make up follows."""

    def _llm_call(self, event: Event) -> None:
        self.status.tokens += int(event.get("prompt_tokens") or 0)
        self.status.tokens += int(event.get("completion_tokens") or 0)
        cost, spent = event.get("cost_usd"), self.status.cost_usd
        if isinstance(cost, int | float) and spent is not None:
            self.status.cost_usd = spent + cost
        else:
            self.status.cost_usd = None

    def _llm_retry(self, event: Event) -> None:
        text = (
            f"attempt {event.get('attempt')} failed: {event.get('error')}; "
            f"retrying in {float(event.get('delay_s') or 0):g} s"
        )
        self._print(_row("llm retry", "bold red", Text(text, style="red")))

    def _action(self, event: Event) -> None:
        body = Text.assemble(
            (str(event.get("tool")), "bold"),
            ("(", ""),
            compact_arguments(event.get("arguments")),
            ")",
        )
        self._print(_row("action", "bold yellow", body))

    def _observation(self, event: Event) -> None:
        content = str(event.get("content", ""))
        is_error = bool(event.get("is_error"))
        shown = head(content)
        body = Text(shown, style="red" if is_error else "")
        notes = []
        if len(shown) < len(content):
            notes.append(f"showing {len(shown)} of {len(content)} chars")
        if event.get("truncated"):
            notes.append(
                f"the model saw {event.get('shown_chars')} of {event.get('original_chars')} chars"
            )
        if event.get("timed_out"):
            notes.append("timed out")
        if event.get("repeated"):
            notes.append("repeated call: not run again")
        notes.append(f"{event.get('tool')}, {event.get('duration_ms', 0)} ms")
        body.append("\n" + " · ".join(notes), style="dim")
        label, style = ("error", "bold red") if is_error else ("observation", "bold green")
        self._print(_row(label, style, body))

    def _agent_started(self, event: Event) -> None:
        child = event.get("child_run_id")
        where = f"child run {child}" if child else "a remote agent"
        body = Text.assemble((str(event.get("agent")), "bold"), f" started: {where}")
        if child:
            body.append(f"\nfollow it: finishline events {child} --follow", style="dim")
        self._print(_row("sub-agent", "bold magenta", body))

    def _agent_finished(self, event: Event) -> None:
        status = str(event.get("status"))
        body = Text.assemble(
            (str(event.get("agent")), "bold"),
            " ",
            (status, STATUS_STYLES.get(status, "")),
            f" ({event.get('reason')})",
        )
        self._print(_row("sub-agent", "bold magenta", body))

    def _intervention(self, event: Event) -> None:
        text = Text.assemble(
            (f"{event.get('kind')}: ", "bold"),
            head(str(event.get("message", "")), lines=4),
            style="yellow",
        )
        self._print(_row("intervention", "bold black on yellow", text))

    def _graded(self, event: Event) -> None:
        met = bool(event.get("satisfied"))
        text = Text.assemble(
            ("rubric met" if met else "rubric not met", "bold"),
            (" (the final answer at a limit)" if event.get("final") else "", "dim"),
            ": ",
            head(str(event.get("feedback", "")), lines=4),
            style="green" if met else "yellow",
        )
        self._print(_row("grader", "bold black on green" if met else "bold black on yellow", text))

    def _user_message(self, event: Event) -> None:
        body = Text(head(str(event.get("content", "")), lines=4), style="magenta")
        if not event.get("delivered", True):
            body.append("\nnot delivered: it came after the run's last model call", style="dim")
        self._print(_row("you said", "bold magenta", body))

    def _terminal(self, event: Event) -> None:
        self.status.ended_at = _epoch(event.get("ts")) or self.status.clock()
        self.console.print()
        # cancelled and failed runs report no result: their reason is their event's type
        result = event.get("result") or {"answer": None, "reason": reason_of(event)}
        rows = ending_rows(
            _TERMINAL_STATUS.get(str(event.get("type"))),
            result,
            event.get("error"),
            event.get("usage"),
        )
        self._print(Group(*rows))

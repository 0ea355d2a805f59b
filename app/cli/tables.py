"""Runs as a table (`finishline runs`) and one run in full (`finishline show`); threads as a
table (`finishline threads`) and one with its runs in order; the agents a service offers
(`finishline agents`), and one in full."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from app.cli.render import LABEL_WIDTH, STATUS_STYLES, ending_rows
from app.cli.text import local_time, usd


def _status(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status, ""))


def runs_table(runs: list[dict[str, Any]]) -> Table:
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    table.add_column("id", no_wrap=True, style="cyan")
    table.add_column("status", no_wrap=True)
    table.add_column("reason", no_wrap=True)
    table.add_column("model", overflow="ellipsis", no_wrap=True, min_width=6, max_width=24)
    table.add_column("steps", justify="right", no_wrap=True)
    table.add_column("cost", justify="right", no_wrap=True)
    table.add_column("created", no_wrap=True)
    for run in runs:
        result = run.get("result") or {}
        reason = str(result.get("reason") or "–")
        if result.get("degraded"):
            reason += " (degraded)"
        table.add_row(
            str(run.get("id")),
            _status(str(run.get("status"))),
            reason,
            str(run.get("model")),
            str((run.get("usage") or {}).get("steps", 0)),
            usd((run.get("usage") or {}).get("cost_usd")),
            local_time(run.get("created_at")),
        )
    return table


def threads_table(threads: list[dict[str, Any]]) -> Table:
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    table.add_column("thread", no_wrap=True, style="cyan")
    table.add_column("status", no_wrap=True)
    table.add_column("runs", justify="right", no_wrap=True)
    table.add_column("latest run", no_wrap=True)
    table.add_column("updated", no_wrap=True)
    for thread in threads:
        table.add_row(
            Text(str(thread.get("id"))),
            _status(str(thread.get("status"))),
            str(thread.get("runs", 0)),
            str(thread.get("latest_run_id") or "–"),
            local_time(thread.get("updated_at")),
        )
    return table


def print_thread(console: Console, thread: dict[str, Any]) -> None:
    """A thread: its facts, then each of its runs, oldest first, with its task and answer."""
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold", min_width=LABEL_WIDTH)
    facts.add_column()
    facts.add_row("thread", Text(str(thread["id"])))
    facts.add_row("status", _status(str(thread["status"])))
    facts.add_row("runs", str(thread["runs"]))
    facts.add_row("updated", local_time(thread.get("updated_at")))
    if thread.get("metadata"):
        facts.add_row("metadata", Text(json.dumps(thread["metadata"], ensure_ascii=False)))
    console.print(facts)
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    table.add_column("id", no_wrap=True, style="cyan")
    table.add_column("status", no_wrap=True)
    table.add_column("task", ratio=1)
    table.add_column("answer", ratio=1)
    for run in thread.get("runs_in_order", []):
        answer = (run.get("result") or {}).get("answer")
        table.add_row(
            str(run["id"]),
            _status(str(run["status"])),
            Text(str(run.get("task", ""))),
            Text(str(answer) if answer is not None else "–"),
        )
    print_whole(console, table)


def report_table(report: dict[str, Any]) -> Table:
    """A termination report's groups, one row each."""
    table = Table(box=None, show_edge=False, pad_edge=False)
    for name in ("group", "runs", "completed", "incomplete", "failed", "cancelled"):
        table.add_column(name, justify="left" if name == "group" else "right")
    for name in ("reasons", "degraded", "nudges/run", "retries/run", "p50 steps", "USD/run"):
        table.add_column(name, justify="left" if name == "reasons" else "right")
    for g in report["groups"]:
        reasons = sorted(((n, r) for r, n in g["by_reason"].items() if n), reverse=True)
        usd = g["usd"]["per_run"]
        table.add_row(
            g["group"] if g["group"] is not None else "(none)",
            str(g["runs"]),
            *(str(g["by_status"][s]) for s in ("completed", "incomplete", "failed", "cancelled")),
            ", ".join(f"{r} {n}" for n, r in reasons),
            str(g["degraded"]),
            f"{g['per_run']['nudges']:.2f}",
            f"{g['per_run']['retries']:.2f}",
            _value(g["steps"]["p50"]),
            f"{usd:.4f}" if usd is not None else "–",
        )
    return table


def agents_table(agents: list[dict[str, Any]]) -> Table:
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    table.add_column("agent", no_wrap=True, style="cyan")
    table.add_column("model", overflow="ellipsis", no_wrap=True, min_width=6, max_width=24)
    table.add_column("tools")
    table.add_column("description", ratio=1)
    for agent in agents:
        tools = ", ".join(t.get("name", "?") for t in agent.get("tools", [])) or "none"
        table.add_row(
            str(agent.get("name")), str(agent.get("model")), tools, Text(str(agent["description"]))
        )
    return table


def agent_detail(agent: dict[str, Any]) -> RenderableType:
    """One agent: what a run of it gets (`finishline agents NAME`)."""
    facts = Table.grid(padding=(0, 1))
    facts.add_column(style="bold", no_wrap=True, width=LABEL_WIDTH)
    facts.add_column(ratio=1)
    facts.add_row("agent", Text(str(agent.get("name")), style="bold cyan"))
    facts.add_row("about", Text(str(agent.get("description"))))
    facts.add_row("model", str(agent.get("model")))
    tools = [f"{t.get('name')} ({t.get('source')})" for t in agent.get("tools", [])]
    facts.add_row("tools", ", ".join(tools) or "none")
    if agent.get("approval_tools"):
        facts.add_row("approval", ", ".join(agent["approval_tools"]))
    if agent.get("output_schema") is not None:
        facts.add_row("output", Text(_value(agent["output_schema"])))
    if agent.get("outcome") is not None:
        facts.add_row("rubric", Text(str(agent["outcome"].get("rubric"))))
    settings = Table.grid(padding=(0, 2))
    settings.add_column(no_wrap=True)
    settings.add_column()
    for name, value in sorted((agent.get("settings") or {}).items()):
        settings.add_row(name, _value(value))
    return Group(facts, Text(), Text("settings", style="bold"), Padding(settings, (0, 0, 0, 2)))


def _duration(run: dict[str, Any]) -> str:
    try:
        start = datetime.fromisoformat(run["started_at"])
        end = datetime.fromisoformat(run["ended_at"])
    except (KeyError, TypeError, ValueError):
        return ""
    return f" ({(end - start).total_seconds():.1f} s)"


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def run_detail(run: dict[str, Any]) -> RenderableType:
    """Everything a person wants of a run: what it was asked, how it ended, what it spent,
    and the settings it ran with."""
    facts = Table.grid(padding=(0, 1))
    facts.add_column(style="bold", no_wrap=True, width=LABEL_WIDTH)
    facts.add_column(ratio=1)
    facts.add_row("run", Text(str(run.get("id")), style="bold cyan"))
    facts.add_row("status", _status(str(run.get("status"))))
    if run.get("agent"):
        facts.add_row("agent", str(run["agent"]))
    facts.add_row("model", str(run.get("model")))
    facts.add_row("task", Text(str(run.get("task"))))
    if run.get("system_prompt"):
        facts.add_row("system", Text(str(run["system_prompt"])))
    tools = [
        *run.get("tools", []),
        *(f"{name}__*" for name in run.get("mcp_servers", [])),
        *(t.get("name", "?") for t in run.get("http_tools", [])),
    ]
    facts.add_row("tools", ", ".join(tools) or "none")
    if run.get("output_schema") is not None:
        facts.add_row("schema", Text(_value(run["output_schema"])))
    if run.get("outcome") is not None:
        facts.add_row("rubric", Text(str(run["outcome"].get("rubric"))))
    facts.add_row("created", local_time(run.get("created_at")))
    facts.add_row("started", local_time(run.get("started_at")))
    facts.add_row("ended", local_time(run.get("ended_at")) + _duration(run))
    if run.get("metadata"):
        facts.add_row("metadata", Text(_value(run["metadata"])))
    if run.get("trace_id"):  # the server exports traces: where to look the run up
        facts.add_row("trace", str(run["trace_id"]))
    webhook = run.get("webhook")
    if webhook:
        state = "delivered" if webhook.get("delivered") else "not delivered"
        facts.add_row(
            "webhook",
            f"{webhook.get('url')} ({state}, {len(webhook.get('attempts', []))} attempts)",
        )

    parts: list[RenderableType] = [facts, Text()]
    terminal = run.get("status") not in ("queued", "running")
    parts += ending_rows(
        None, run.get("result") if terminal else None, run.get("error"), run.get("usage")
    )

    settings = Table.grid(padding=(0, 2))
    settings.add_column(no_wrap=True)
    settings.add_column()
    for name, value in sorted((run.get("settings") or {}).items()):
        settings.add_row(name, _value(value))
    parts += [Text(), Text("settings", style="bold"), Padding(settings, (0, 0, 0, 2))]
    return Group(*parts)


def print_whole(console: Console, table: Table) -> None:
    """On a terminal, fit the table to it; piped, print it whole rather than cut to the
    80-column default (ids cut short are no use to a script)."""
    if console.is_terminal:
        console.print(table)
        return
    width = console.width
    console.width = max(
        width, Measurement.get(console, console.options.update_width(10_000), table).maximum
    )
    try:
        console.print(table)
    finally:
        console.width = width


def print_run(console: Console, run: dict[str, Any]) -> None:
    console.print(run_detail(run))

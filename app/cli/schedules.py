"""`finishline schedules`: runs on a clock (DESIGN §21), through the HTTP API.

finishline schedules                          your schedules, with their next due time
finishline schedules ID                       one, with its last firings
finishline schedules create CRON TASK [--timezone TZ] [--model M] [--thread ID]
finishline schedules trigger|pause|resume|delete ID
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table
from rich.text import Text

from app.cli.client import Api
from app.cli.errors import UsageError
from app.cli.exits import ExitCode
from app.cli.lines import print_raw
from app.cli.schedule_args import ACTIONS
from app.cli.tables import print_whole
from app.cli.text import local_time


def _body(args: argparse.Namespace, words: list[str]) -> dict[str, Any]:
    if not words:
        raise UsageError("finishline schedules create CRON TASK (or --run JSON)")
    run: dict[str, Any] = json.loads(args.run) if args.run else {"task": " ".join(words[1:])}
    if args.model:
        run["model"] = args.model
    if args.thread:
        run["thread_id"] = args.thread
    body: dict[str, Any] = {"cron": words[0], "timezone": args.timezone, "run": run}
    if args.overlap:
        body["overlap"] = args.overlap
    return body


def call(api: Api, args: argparse.Namespace) -> dict[str, Any] | None:
    """What the words ask of the service; None for a delete (nothing to show)."""
    words = list(args.words)
    action = words.pop(0) if words and words[0] in ACTIONS else None
    if action == "create":
        return api.schedules("POST", "", json=_body(args, words))
    if action is not None and len(words) != 1:
        raise UsageError(f"finishline schedules {action} ID")
    if action == "trigger":
        return api.schedules("POST", f"/{words[0]}/trigger")
    if action in ("pause", "resume"):
        return api.schedules("PATCH", f"/{words[0]}", json={"enabled": action == "resume"})
    if action == "delete":
        api.schedules("DELETE", f"/{words[0]}")
        return None
    if words:
        shown = api.schedules("GET", f"/{words[0]}")
        shown["firings"] = api.schedules("GET", f"/{words[0]}/firings", params={"limit": 10})
        return shown
    return api.schedules("GET", "", params={"limit": args.limit})


def schedules_table(schedules: list[dict[str, Any]]) -> Table:
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    for column in ("schedule", "cron", "timezone", "next due", "task"):
        table.add_column(
            column, no_wrap=column != "task", style="cyan" if column == "schedule" else ""
        )
    for s in schedules:
        table.add_row(
            Text(str(s["id"])),
            Text(str(s["cron"])),
            str(s["timezone"]),
            local_time(s["next_due_at"]) if s.get("next_due_at") else "paused",
            Text(str(s["run"].get("task", ""))[:60]),
        )
    return table


def firings_table(firings: list[dict[str, Any]]) -> Table:
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    for column in ("due", "outcome", "run", "why"):
        table.add_column(column, no_wrap=column != "why")
    for f in firings:
        table.add_row(
            local_time(f["due_at"]),
            str(f["outcome"]),
            str(f.get("run_id") or "–"),
            Text(str(f.get("reason") or "")),
        )
    return table


def schedules(args: argparse.Namespace, context: Any) -> int:
    with context.api(args) as api:
        found = call(api, args)
    if found is None:
        context.err.print("deleted", highlight=False)
        return ExitCode.OK
    if args.json:
        print_raw(context.console, json.dumps(found, indent=2, ensure_ascii=False))
    elif "schedules" in found:
        if not found["schedules"]:
            context.console.print("no schedules")
        else:
            print_whole(context.console, schedules_table(found["schedules"]))
    elif "outcome" in found:  # a trigger's firing
        context.console.print(f"{found['outcome']} {found.get('run_id') or found.get('reason')}")
    else:
        print_whole(context.console, schedules_table([found]))
        if found.get("firings", {}).get("firings"):
            print_whole(context.console, firings_table(found["firings"]["firings"]))
    return ExitCode.OK

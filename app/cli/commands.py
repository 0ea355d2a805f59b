"""What each `finishline` command does, given its parsed arguments and a `Context`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from app.cli.client import DEFAULT_URL, Api
from app.cli.errors import CliError, ServiceError, UsageError
from app.cli.exits import ExitCode
from app.cli.follow import Confirm, ask_on, follow_run
from app.cli.lines import JsonRenderer, LineRenderer, print_raw
from app.cli.render import RunRenderer
from app.cli.schedules import schedules
from app.cli.tables import (
    agent_detail,
    agents_table,
    print_run,
    print_thread,
    print_whole,
    report_table,
    runs_table,
    threads_table,
)


@dataclass(frozen=True, slots=True)
class Context:
    """Where a command writes, what it asks with, and how it reaches the service."""

    console: Console
    err: Console
    environ: Mapping[str, str]
    confirm: Confirm
    interactive: bool = False
    """A person at a terminal can answer questions (approvals) as a run goes."""

    @classmethod
    def create(
        cls, console: Console | None, err: Console | None, environ: Mapping[str, str]
    ) -> Context:
        err = err or Console(stderr=True)
        interactive = sys.stdin.isatty() and err.is_terminal
        return cls(console or Console(), err, environ, ask_on(err), interactive)

    def api(self, args: argparse.Namespace) -> Api:
        url = args.url or self.environ.get("FINISHLINE_URL") or DEFAULT_URL
        return Api(url, self.bearer())

    def bearer(self) -> str | None:
        """FINISHLINE_TOKEN (an access token of the service's identity provider) when set,
        else FINISHLINE_API_KEY: either is sent as `Authorization: Bearer`."""
        return (
            self.environ.get("FINISHLINE_TOKEN") or self.environ.get("FINISHLINE_API_KEY") or None
        )


Command = Callable[[argparse.Namespace, Context], int]


def dispatch(args: argparse.Namespace, context: Context) -> int:
    try:
        return int(COMMANDS[args.command](args, context))
    except CliError as exc:
        report(context.err, exc)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        context.err.print("interrupted")
        return int(ExitCode.DETACHED)


def report(err: Console, exc: CliError) -> None:
    # the message may hold brackets (`model_script[0]`): Text, never markup
    err.print(Text.assemble(("error:", "bold red"), f" {exc}"), soft_wrap=True)
    if isinstance(exc, ServiceError) and exc.status == 401:
        err.print(
            "set FINISHLINE_API_KEY to one of the service's keys, or FINISHLINE_TOKEN to a "
            "current access token of its identity provider",
            highlight=False,
        )


# -- run --------------------------------------------------------------------------------------


def load_json(source: str, option: str) -> Any:
    """The JSON in a file, or in stdin for '-'; UsageError naming `option` when it is not."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{option}: cannot read {source}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{option}: {source} is not JSON: {exc}") from None


def load_script(source: str) -> list[Any]:
    """The scripted model's replies: a JSON list, from a file or '-' (stdin)."""
    script = load_json(source, "--script")
    if not isinstance(script, list):
        raise UsageError(f"--script: {source} must hold a JSON list of replies")
    return script


def run_body(args: argparse.Namespace) -> dict[str, Any]:
    """The POST /runs body the command line asks for."""
    body: dict[str, Any] = {"task": args.task}
    if args.system is not None:
        body["system_prompt"] = args.system
    if args.previous is not None:
        body["previous_run_id"] = args.previous
    if args.thread is not None:
        body["thread_id"] = args.thread
    if args.multitask is not None:
        body["multitask"] = args.multitask
    if args.agent is not None:
        body["agent"] = args.agent
    model = args.model or ("scripted" if args.script is not None else None)
    if model:
        body["model"] = model
    if args.tools:
        body["tools"] = args.tools
    if args.mcp_servers:
        body["mcp_servers"] = args.mcp_servers
    if args.settings:
        body["settings"] = dict(args.settings)
    if args.metadata:
        body["metadata"] = dict(args.metadata)
    if args.script is not None:
        body["model_script"] = load_script(args.script)
    if args.output_schema is not None:  # the service says what is wrong with it, if anything
        body["output_schema"] = load_json(args.output_schema, "--output-schema")
    if args.rubric is not None:
        body["outcome"] = {"rubric": args.rubric}
        if args.max_revisions is not None:
            body["outcome"]["max_revisions"] = args.max_revisions
    elif args.max_revisions is not None:  # the service would take it as settings.max_revisions
        body.setdefault("settings", {})["max_revisions"] = args.max_revisions
    return body


def run(args: argparse.Namespace, context: Context) -> int:
    body = run_body(args)
    with context.api(args) as api:
        created = api.create_run(body)
        if not args.follow:
            print_raw(context.console, json.dumps(created) if args.json else created["id"])
            return ExitCode.OK
        renderer: JsonRenderer | RunRenderer
        if args.json:
            renderer = JsonRenderer(context.console)
        else:
            renderer = RunRenderer(context.console)
            renderer.show_run(created)
        return follow_run(
            api,
            created["id"],
            renderer,
            err=context.err,
            confirm=context.confirm,
            decide=context.confirm if context.interactive else None,
        )


# -- the others -------------------------------------------------------------------------------


def list_runs(args: argparse.Namespace, context: Context) -> int:
    statuses = [s for value in args.status for s in value.split(",") if s.strip()]
    with context.api(args) as api:
        page = api.list_runs(statuses=statuses, limit=args.limit, cursor=args.cursor)
    if args.json:
        print_raw(context.console, json.dumps(page, indent=2))
        return ExitCode.OK
    if not page["runs"]:
        context.console.print("no runs")
    else:
        print_whole(context.console, runs_table(page["runs"]))
    if page.get("next_cursor"):
        context.err.print(f"more: finishline runs --cursor {page['next_cursor']}", highlight=False)
    return ExitCode.OK


def threads(args: argparse.Namespace, context: Context) -> int:
    """Your threads, most recently active first; with ID, that thread and its runs in order."""
    with context.api(args) as api:
        if args.thread_id is None:
            page = api.list_threads(limit=args.limit, cursor=args.cursor)
        else:
            page = api.get_thread(args.thread_id)
            runs: list[dict[str, Any]] = []
            cursor = None
            while True:  # every run of it, oldest first
                found = api.thread_runs(args.thread_id, cursor=cursor)
                runs += found["runs"]
                cursor = found.get("next_cursor")
                if not cursor:
                    break
            page["runs_in_order"] = runs
    if args.json:
        print_raw(context.console, json.dumps(page, indent=2, ensure_ascii=False))
        return ExitCode.OK
    if args.thread_id is not None:
        print_thread(context.console, page)
        return ExitCode.OK
    if not page["threads"]:
        context.console.print("no threads")
    else:
        print_whole(context.console, threads_table(page["threads"]))
    if page.get("next_cursor"):
        more = f"more: finishline threads --cursor {page['next_cursor']}"
        context.err.print(more, highlight=False, markup=False)
    return ExitCode.OK


def termination_report(args: argparse.Namespace, context: Context) -> int:
    """How runs ended, per group (GET /reports/termination)."""
    with context.api(args) as api:
        found = api.termination_report(
            group_by=args.group_by,
            since=args.since,
            until=args.until,
            model=args.model,
            agent=args.agent,
        )
    if args.json:
        print_raw(context.console, json.dumps(found, indent=2, ensure_ascii=False))
    elif not found["groups"]:
        context.console.print("no ended runs")
    else:
        print_whole(context.console, report_table(found))
    return ExitCode.OK


def agents(args: argparse.Namespace, context: Context) -> int:
    with context.api(args) as api:
        found = api.get_agent(args.name) if args.name else api.list_agents()
    if args.json:
        print_raw(context.console, json.dumps(found, indent=2, ensure_ascii=False))
    elif args.name:
        context.console.print(agent_detail(found))
    elif not found["agents"]:
        context.console.print("no agents: the service has no profiles (FINISHLINE_AGENTS)")
    else:
        print_whole(context.console, agents_table(found["agents"]))
    return ExitCode.OK


def show(args: argparse.Namespace, context: Context) -> int:
    with context.api(args) as api:
        found = api.get_run(args.run_id)
    if args.json:
        print_raw(context.console, json.dumps(found, indent=2, ensure_ascii=False))
    else:
        print_run(context.console, found)
    return ExitCode.OK


def events(args: argparse.Namespace, context: Context) -> int:
    renderer = JsonRenderer(context.console) if args.json else LineRenderer(context.console)
    with context.api(args) as api:
        if args.follow:
            return follow_run(
                api,
                args.run_id,
                renderer,
                err=context.err,
                confirm=context.confirm,
                after=args.after,
            )
        after = args.after
        while True:
            page = api.event_page(args.run_id, after=after)
            for event in page["events"]:
                renderer.show(event)
            if page["done"] or not page["events"]:
                return ExitCode.OK
            after = page["next_after"]


def say(args: argparse.Namespace, context: Context) -> int:
    with context.api(args) as api:
        run = api.send_message(args.run_id, args.message)
    if args.json:
        print_raw(context.console, json.dumps(run, indent=2, ensure_ascii=False))
    else:
        context.console.print(f"sent to {run['id']} ({run['status']})", highlight=False)
    return ExitCode.OK


def approve(args: argparse.Namespace, context: Context) -> int:
    with context.api(args) as api:
        if args.call_id is not None:
            call_ids = [args.call_id]
        else:
            run = api.get_run(args.run_id)
            call_ids = [p["call_id"] for p in run.get("pending_approvals", [])]
            if not call_ids:
                context.err.print(
                    f"{args.run_id} waits on no call ({run['status']})", highlight=False
                )
                return ExitCode.API_ERROR
        decisions: list[dict[str, Any]] = [
            {"call_id": call_id, "approve": not args.reject}
            | ({"message": args.message} if args.message is not None else {})
            for call_id in call_ids
        ]
        decided = api.decide(args.run_id, decisions)
    if args.json:
        print_raw(context.console, json.dumps(decided, indent=2, ensure_ascii=False))
    else:
        verb = "rejected" if args.reject else "approved"
        context.console.print(
            f"{verb} {', '.join(call_ids)}; {decided['id']} {decided['status']}", highlight=False
        )
    return ExitCode.OK


def cancel(args: argparse.Namespace, context: Context) -> int:
    with context.api(args) as api:
        cancelled = api.cancel_run(args.run_id)
    if args.json:
        print_raw(context.console, json.dumps(cancelled, indent=2, ensure_ascii=False))
    else:
        context.console.print(f"{cancelled['id']} {cancelled['status']}", highlight=False)
    return ExitCode.OK


def serve(args: argparse.Namespace, context: Context) -> int:
    import uvicorn

    from app.settings import Settings

    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        # app.api.protocols.PROTOCOL: a request's headers get FINISHLINE_HEADER_TIMEOUT_S
        http="app.api.protocols:HeaderTimeoutProtocol",
        # runs get the settings' grace to end on SIGTERM, then a little to be recorded
        timeout_graceful_shutdown=int(Settings().shutdown_grace_s + 5),
    )
    return ExitCode.OK


COMMANDS: dict[str, Command] = {
    "run": run,
    "runs": list_runs,
    "threads": threads,
    "schedules": schedules,
    "agents": agents,
    "report": termination_report,
    "show": show,
    "events": events,
    "say": say,
    "approve": approve,
    "cancel": cancel,
    "serve": serve,
}

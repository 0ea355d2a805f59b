"""`finishline`: start runs, watch them live, list, show, follow and cancel them, list the
agents a service offers, serve.

A client of the HTTP API (FINISHLINE_URL; FINISHLINE_API_KEY, or FINISHLINE_TOKEN for an
access token). This module only parses the command line, with the standard library, so
`finishline --help` imports neither httpx, rich nor the service; `app.cli.commands` does the
work.

    main(["run", "What is 6*7?", "--tool", "calculator"])   # -> exit code
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.cli.exits import EPILOG, ExitCode
from app.cli.schedule_args import add_parser as add_schedules_parser

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["build_parser", "main", "parse_pair", "parse_value"]

MISSING_EXTRA = (
    "finishline: the command line client needs rich, which the server does without: "
    "pip install 'finishline[cli]'"
)


def parse_value(text: str) -> Any:
    """A `--set`/`--metadata` value: true/false/null (any case), a number, or any JSON
    value ("quoted", [lists], {objects}); anything else is the string itself."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, float) and not math.isfinite(value):
        return text
    return value


def parse_pair(text: str) -> tuple[str, Any]:
    """`key=value` -> (key, parsed value); argparse reports a malformed one (exit 2)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), parse_value(value)


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="finishline",
        description="Run ReAct agents on a finishline service and watch them live.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--url", help="the service (default: $FINISHLINE_URL, else http://127.0.0.1:8000)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")

    run = commands.add_parser(
        "run",
        help="start a run and watch it live",
        description="Start a run (POST /runs) and, unless --no-follow, show it live: steps and "
        "time against their limits, each thought, action and observation, interventions and "
        "retries, then the answer, the reason and the usage. Exits with the code of how the "
        "run ended. Ctrl-C asks whether to cancel the run.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("task", help="what the agent should do")
    run.add_argument(
        "--set",
        dest="settings",
        action="append",
        type=parse_pair,
        default=[],
        metavar="KEY=VALUE",
        help="a per-run setting (repeatable): max_steps=5, stop_tool=false, max_total_tokens=null",
    )
    run.add_argument(
        "--agent",
        metavar="NAME",
        help="an agent profile of the service (finishline agents): its tools, model and "
        "settings are the run's defaults; --tool, --model, --set and --system go on top",
    )
    run.add_argument("--model", help="model name; 'demo' and 'scripted' are built in")
    run.add_argument(
        "--tool",
        dest="tools",
        action="append",
        default=[],
        metavar="NAME",
        help="a tool from GET /tools the agent may call, MCP ones as SERVER__TOOL (repeatable)",
    )
    run.add_argument(
        "--mcp-server",
        dest="mcp_servers",
        action="append",
        default=[],
        metavar="NAME",
        help="an MCP server whose every tool the agent may call (repeatable)",
    )
    run.add_argument("--system", metavar="PROMPT", help="system prompt")
    run.add_argument(
        "--continue",
        dest="previous",
        metavar="ID",
        help="a follow-up: start from that ended run's conversation (and its system prompt)",
    )
    run.add_argument(
        "--thread",
        metavar="ID",
        help="the thread (conversation) this run joins: its first run makes it, a later one "
        "continues from its latest run (finishline threads lists them)",
    )
    run.add_argument(
        "--multitask",
        choices=["reject", "enqueue", "interrupt"],
        help="with --thread, while its latest run has not ended: reject (the service's "
        "default: an error), enqueue (start when it ends) or interrupt (cancel it)",
    )
    run.add_argument(
        "--metadata",
        action="append",
        type=parse_pair,
        default=[],
        metavar="KEY=VALUE",
        help="your own data kept on the run (repeatable)",
    )
    run.add_argument(
        "--script",
        metavar="FILE",
        help="JSON list of replies for the scripted model ('-': stdin); implies --model scripted",
    )
    run.add_argument(
        "--output-schema",
        metavar="FILE",
        help="a JSON Schema file ('-': stdin) the answer must validate against: the run is "
        "done when it does, and its output is shown as JSON",
    )
    run.add_argument(
        "--rubric",
        metavar="TEXT",
        help="the run's outcome: its answer is graded against this rubric and revised until "
        "it meets it (exit code 13 when it never does)",
    )
    run.add_argument(
        "--max-revisions",
        type=int,
        metavar="N",
        help="with --rubric: answers after the first the grader may judge unmet",
    )
    run.add_argument(
        "--follow",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="watch the run to its end (default); --no-follow prints its id and returns",
    )
    run.add_argument("--json", action="store_true", help="events as JSON lines")

    runs = commands.add_parser("runs", help="list runs, newest first")
    runs.add_argument(
        "--status",
        action="append",
        default=[],
        help="queued, running, requires_action, completed, incomplete, failed or cancelled "
        "(repeatable)",
    )
    runs.add_argument("--limit", type=int, default=20, help="how many, 1 to 200 (default 20)")
    runs.add_argument("--cursor", help="the next_cursor of the previous page")
    runs.add_argument("--json", action="store_true", help="the raw JSON")

    threads = commands.add_parser(
        "threads",
        help="list your threads, or show one and its runs in order",
        description="Your threads (conversations), most recently active first: id, status, "
        "runs, latest run; with ID, that thread and each of its runs, oldest first. Continue "
        "one with finishline run --thread ID.",
    )
    threads.add_argument("thread_id", metavar="ID", nargs="?", help="one thread, with its runs")
    threads.add_argument("--limit", type=int, default=20, help="how many, 1 to 200 (default 20)")
    threads.add_argument("--cursor", help="the next_cursor of the previous page")
    threads.add_argument("--json", action="store_true", help="the raw JSON")

    add_schedules_parser(commands)

    report = commands.add_parser(
        "report",
        help="how runs ended, by model, agent, key or day",
        description="The termination report (GET /reports/termination): per group, runs by "
        "status and reason, degraded answers, nudges and retries per run, p50 steps, USD per "
        "run. --group-by key needs an admin key. See docs/guides/reports.md.",
    )
    report.add_argument(
        "--group-by", choices=["model", "agent", "key", "day"], default="model", help="groups"
    )
    report.add_argument("--since", help="only runs made at or after (ISO 8601; UTC)")
    report.add_argument("--until", help="only runs made before (ISO 8601; UTC)")
    report.add_argument("--model", help="only runs of this model")
    report.add_argument("--agent", help="only runs of this agent profile")
    report.add_argument("--json", action="store_true", help="the raw JSON")

    agents = commands.add_parser(
        "agents",
        help="list the agents the service offers, or show one",
        description="The agent profiles of the service (GET /agents): name, model, tools and "
        "description; with NAME, one in full, its settings too. Start a run of one with "
        "finishline run --agent NAME.",
    )
    agents.add_argument("name", metavar="NAME", nargs="?", help="one agent, in full")
    agents.add_argument("--json", action="store_true", help="the raw JSON")

    show = commands.add_parser("show", help="show one run: status, result, usage, settings")
    show.add_argument("run_id", metavar="ID")
    show.add_argument("--json", action="store_true", help="the raw JSON")

    events = commands.add_parser(
        "events",
        help="print a run's events, one line each",
        description="Print a run's stored events, one line each; with --follow, keep going "
        "live to the run's end and exit with the code of how it ended.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    events.add_argument("run_id", metavar="ID")
    events.add_argument(
        "--after", type=_non_negative, default=0, metavar="N", help="start after event N"
    )
    events.add_argument("--follow", action="store_true", help="follow live to the run's end")
    events.add_argument("--json", action="store_true", help="JSON lines")

    say = commands.add_parser(
        "say",
        help="send a live run a message",
        description="Send a queued or running run a message: it joins the conversation right "
        "before the run's next model call (POST /runs/{id}/messages).",
    )
    say.add_argument("run_id", metavar="ID")
    say.add_argument("message", help="what to tell the agent")
    say.add_argument("--json", action="store_true", help="the run as JSON")

    approve = commands.add_parser(
        "approve",
        help="approve (or --reject) tool calls a run waits on",
        description="Decide the tool calls a run in requires_action waits on: CALL_ID, or every "
        "pending call (POST /runs/{id}/approvals).",
    )
    approve.add_argument("run_id", metavar="ID")
    approve.add_argument(
        "call_id", metavar="CALL_ID", nargs="?", help="default: every pending call"
    )
    approve.add_argument("--reject", action="store_true", help="reject instead of approving")
    approve.add_argument("--message", metavar="TEXT", help="for the model: why, or a note")
    approve.add_argument("--json", action="store_true", help="the run as JSON")

    cancel = commands.add_parser("cancel", help="cancel a run")
    cancel.add_argument("run_id", metavar="ID")
    cancel.add_argument("--json", action="store_true", help="the run as JSON")

    store = commands.add_parser("store", help="manage stores: copy runs between them")
    store_commands = store.add_subparsers(dest="store_command", required=True, metavar="command")
    copy = store_commands.add_parser(
        "copy",
        help="copy every run (record, events, checkpoint, threads) from one store to another:"
        " resumable, verified, never overwriting a different run of the same id",
    )
    copy.add_argument("from_url", metavar="FROM_URL", help="e.g. sqlite:///data/finishline.db")
    copy.add_argument("to_url", metavar="TO_URL", help="e.g. postgresql://user:pw@host/db")

    serve = commands.add_parser("serve", help="run the service with uvicorn")
    serve.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1")
    serve.add_argument("--port", type=int, default=8000, help="default 8000")
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    console: Console | None = None,
    err_console: Console | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run one command; its exit code. Output goes to `console`, errors and prompts to
    `err_console` (default: stdout and stderr)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2

    if args.command == "store":  # the service's own code, no HTTP client: no rich needed
        from app.store_copy import run

        return run(args.from_url, args.to_url)

    try:
        import rich.console  # noqa: F401  (the cli extra: the server does without it)
    except ImportError:
        print(MISSING_EXTRA, file=sys.stderr)
        return ExitCode.USAGE

    from app.cli.commands import Context, dispatch

    context = Context.create(console, err_console, os.environ if environ is None else environ)
    return dispatch(args, context)

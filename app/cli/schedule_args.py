"""The arguments of `finishline schedules` (app/cli/schedules.py): apart, so `--help`
imports neither httpx nor rich."""

from __future__ import annotations

from typing import Any

ACTIONS = ("create", "trigger", "pause", "resume", "delete")


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "schedules",
        help="list, show, make, trigger, pause, resume or delete schedules",
        description="Runs on a clock: your schedules with their next due time; with ID, one "
        "and its last firings (each due time's run, or why none). `create CRON TASK` makes "
        "one (five cron fields, six with seconds first, or @daily…); `trigger ID` fires one "
        "now; `pause ID`/`resume ID` disable/enable it; `delete ID`.",
    )
    parser.add_argument("words", nargs="*", metavar="ARG", help="[ID] or ACTION ARGS")
    parser.add_argument("--timezone", default="UTC", help="create: IANA time zone (UTC)")
    parser.add_argument("--model", help="create: the model of its runs")
    parser.add_argument("--thread", help="create: continue this thread at each firing")
    parser.add_argument(
        "--run", help="create: the whole POST /runs body as JSON (in place of TASK)"
    )
    parser.add_argument("--overlap", choices=["skip", "allow"], help="create: skip (default)")
    parser.add_argument("--limit", type=int, default=20, help="how many, 1 to 200 (default 20)")
    parser.add_argument("--json", action="store_true", help="the raw JSON")

"""A termination report of a real model (issue #37, DESIGN §20): a fixed set of tasks run
through finishline against any OpenAI-compatible endpoint, then the report, as
`finishline report` prints it (`--json`: the JSON), after one line per task (how it
ended, in how many steps, and its answer or error).

    python -m bench.report_demo --base-url http://127.0.0.1:8080/v1 --model smollm2
    make report-demo BASE_URL=http://127.0.0.1:8080/v1 MODEL=smollm2 SETTINGS='{"stop_tool": false}'

finishline is served in this process (memory store, no auth); each task runs with the
calculator tool and the default settings (max_steps 10, the stop tool on) or those
`--settings` gives (a JSON object of per-run settings, as `POST /runs` takes them), one at a
time.
Not part of `make test`: a real model's answers are its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import httpx
from asgi_lifespan import LifespanManager
from rich.console import Console
from rich.table import Table

from app.cli.tables import report_table
from app.main import create_app
from app.settings import Settings

TASKS = (
    "What is 17 * 23? Use the calculator.",
    "What is (1234 + 4321) / 5? Use the calculator.",
    "Name the capital of France.",
    "Add 2.5 and 4.75, then multiply the sum by 3.",
    "Is 97 a prime number? Answer yes or no.",
    "Write one sentence about the sea.",
    "What is 2 to the power of 10?",
    "Count the letters in the word 'finishline'.",
)


async def demo(
    base_url: str, model: str, timeout_s: float, run_settings: dict[str, Any] | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run every task against the endpoint through finishline; each run as it ended, and
    the report."""
    settings = Settings(
        _env_file=None,
        store_url="memory://",
        llm_base_url=base_url,
        llm_model=model,
        log_level="WARNING",
    )
    app = create_app(settings)
    async with (
        LifespanManager(app) as served,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=served.app), base_url="http://finishline"
        ) as client,
    ):
        runs: list[dict[str, Any]] = []
        for task in TASKS:
            body = {"task": task, "tools": ["calculator"], "settings": run_settings or {}}
            made = await client.post("/runs", json=body)
            if made.status_code >= 400:
                raise SystemExit(f"POST /runs refused the task: {made.text}")
            run = made.json()
            wait = {"timeout_s": timeout_s}
            ended = await client.get(f"/runs/{run['id']}/wait", params=wait, timeout=timeout_s + 5)
            runs.append(ended.raise_for_status().json())
        report: dict[str, Any] = (
            (await client.get("/reports/termination")).raise_for_status().json()
        )
    return runs, report


def runs_table(runs: list[dict[str, Any]]) -> Table:
    """One row per task: how its run ended, its steps, and its answer (or error)."""
    table = Table(box=None, show_edge=False, pad_edge=False)
    for name in ("task", "status", "reason", "steps", "answer or error"):
        table.add_column(name, justify="right" if name == "steps" else "left")
    for run in runs:
        result = run.get("result") or {}
        error = run.get("error")
        reason = str(result.get("reason") or "–") + (
            " (degraded)" if result.get("degraded") else ""
        )
        said = result.get("answer")
        if said is None and error:
            said = f"{error['type']}: {error['message']}"
        table.add_row(
            run["task"],
            run["status"],
            reason,
            str((run.get("usage") or {}).get("steps", 0)),
            _short(str(said) if said is not None else "–"),
        )
    return table


def _settings(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--settings: a JSON object, e.g. '{\"max_steps\": 5}'")
    return value


def _short(text: str, limit: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="the endpoint, e.g. http://host/v1")
    parser.add_argument("--model", required=True, help="the model name it serves")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="per task (default 120)")
    parser.add_argument(
        "--settings", type=_settings, default={}, help="per-run settings, a JSON object"
    )
    parser.add_argument("--json", action="store_true", help="the report as JSON")
    args = parser.parse_args(argv)
    runs, report = asyncio.run(demo(args.base_url, args.model, args.timeout_s, args.settings))
    console = Console(width=160)
    if args.json:
        console.print_json(json.dumps(report))
    else:
        given = f", settings {json.dumps(args.settings)}" if args.settings else ""
        console.print(f"{len(TASKS)} tasks on {args.model} at {args.base_url}{given}")
        console.print(runs_table(runs))
        console.print()
        console.print(report_table(report))


if __name__ == "__main__":
    main()

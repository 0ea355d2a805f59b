"""What the CLI tests share: the CLI called in-process against a served app, and scripts.

    async with served_app(cli_settings()) as (server, client):
        result = await cli(server, "run", "a task", "--script", script(tmp_path, finish("42")))
        assert result.code == 0 and "42" in result.out

The CLI is blocking (httpx.Client), so it runs in a worker thread while uvicorn serves the
app in the test's event loop; its output goes to consoles over StringIO, 100 columns, no
colour. Nothing waits on time: a call ends when the CLI returns.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from rich.console import Console

from app.cli import main
from app.cli.exits import ExitCode
from app.settings import Settings
from tests.fakes.service import service_settings
from tests.fakes.serving import Served

T = TypeVar("T")


def cli_settings(**overrides: Any) -> Settings:
    """No shutdown grace: a run a test leaves hanging is cancelled when its app stops."""
    return service_settings(**{"shutdown_grace_s": 0, **overrides})


def console() -> Console:
    return Console(
        file=io.StringIO(), width=100, force_terminal=False, color_system=None, legacy_windows=False
    )


def text_of(console: Console) -> str:
    file = console.file
    assert isinstance(file, io.StringIO)
    return file.getvalue()


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


async def in_thread(fn: Callable[[], T], *, timeout_s: float = 15) -> T:
    """`fn()` in a worker thread, with the event loop (and the served app) free meanwhile."""
    with anyio.fail_after(timeout_s):
        return await anyio.to_thread.run_sync(fn)


async def cli(
    server: Served, *argv: str, env: Mapping[str, str] | None = None, timeout_s: float = 15
) -> Result:
    """`finishline ARGV` against `server`; its exit code and what it printed."""
    out, err = console(), console()
    environ = {"FINISHLINE_URL": server.url(), **(env or {})}
    code = await in_thread(
        partial(main, list(argv), console=out, err_console=err, environ=environ),
        timeout_s=timeout_s,
    )
    return Result(code, text_of(out), text_of(err))


# -- model scripts ----------------------------------------------------------------------------


def finish(answer: str = "done") -> dict[str, Any]:
    return {"tool_calls": [{"name": "task_finished", "arguments": {"answer": answer}}]}


def calc(expression: str = "6*7", content: str | None = None, **extra: Any) -> dict[str, Any]:
    reply: dict[str, Any] = {
        "tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}],
        **extra,
    }
    if content is not None:
        reply["content"] = content
    return reply


def hanging() -> list[dict[str, Any]]:
    """A script whose run thinks, calls a tool, then waits ten minutes for its model."""
    return [calc(content="thinking"), {"content": "still thinking", "delay_s": 600}]


def script(directory: Path, *replies: dict[str, Any]) -> str:
    """The replies in a JSON file, for `--script`."""
    path = directory / f"script_{len(list(directory.glob('script_*.json')))}.json"
    path.write_text(json.dumps(list(replies)), encoding="utf-8")
    return str(path)


async def start_run(server: Served, tmp_path: Path, *replies: dict[str, Any], **env: str) -> str:
    """A scripted run with the calculator, started with --no-follow; its id."""
    result = await cli(
        server,
        "run",
        "t",
        "--no-follow",
        "--tool",
        "calculator",
        "--script",
        script(tmp_path, *replies),
        env=env,
    )
    assert result.code == ExitCode.OK, result
    return result.out.strip()

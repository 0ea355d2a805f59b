"""Following a run: reconnecting after a dropped stream, and Ctrl-C (cancel, or detach).

Ctrl-C is simulated deterministically: the follow function's event hook raises
KeyboardInterrupt after a chosen event, and the prompt's answer is injected.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from app.cli.client import Api, Event, Reconnect, parse_sse
from app.cli.errors import UnreachableError
from app.cli.exits import ExitCode
from app.cli.follow import follow_run
from app.cli.lines import JsonRenderer
from app.cli.render import RunRenderer
from tests.cli.kit import (
    calc,
    cli,
    cli_settings,
    console,
    finish,
    hanging,
    in_thread,
    start_run,
    text_of,
)
from tests.fakes.service import served_app
from tests.fakes.serving import Served


class _Cut(httpx.SyncByteStream):
    """A response body that breaks off in the middle of its event number `keep + 1`."""

    def __init__(self, inner: httpx.SyncByteStream, keep: int) -> None:
        self.inner = inner
        self.keep = keep

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        for chunk in self.inner:
            start = 0
            while (found := chunk.find(b"data:", start)) >= 0:
                seen += 1
                if seen > self.keep:
                    yield chunk[: found + 12]
                    raise httpx.ReadError("the test dropped the connection")
                start = found + 5
            yield chunk

    def close(self) -> None:
        self.inner.close()


class DroppingTransport(httpx.BaseTransport):
    """Real HTTP, except for event streams: the first `drops` of them break off after `keep`
    events, and from the `refuse_from`-th on (1-based) they fail to connect. Records the
    Last-Event-ID each event stream was asked for with."""

    def __init__(self, *, keep: int = 3, drops: int = 1, refuse_from: int | None = None) -> None:
        self.inner = httpx.HTTPTransport()
        self.keep = keep
        self.drops = drops
        self.refuse_from = refuse_from
        self.last_event_ids: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        accept = request.headers.get("accept", "")
        if not (request.url.path.endswith("/events") and "event-stream" in accept):
            return self.inner.handle_request(request)
        self.last_event_ids.append(request.headers.get("last-event-id"))
        attempt = len(self.last_event_ids)
        if self.refuse_from is not None and attempt >= self.refuse_from:
            raise httpx.ConnectError("the test refused the connection", request=request)
        response = self.inner.handle_request(request)
        if attempt <= self.drops:
            assert isinstance(response.stream, httpx.SyncByteStream)
            response.stream = _Cut(response.stream, self.keep)
        return response

    def close(self) -> None:
        self.inner.close()


def _follow(
    server: Served,
    run_id: str,
    *,
    transport: httpx.BaseTransport | None = None,
    confirm: Callable[[str], bool] = lambda question: False,
    on_event: Callable[[Event], None] | None = None,
    reconnect: Reconnect | None = None,
    json_lines: bool = True,
) -> tuple[int, str, str]:
    out, err = console(), console()
    renderer = JsonRenderer(out) if json_lines else RunRenderer(out)
    with Api(server.url(), transport=transport) as api:
        code = follow_run(
            api,
            run_id,
            renderer,
            err=err,
            confirm=confirm,
            on_event=on_event,
            reconnect=reconnect or Reconnect(pause=lambda _: None),
        )
    return code, text_of(out), text_of(err)


def _seqs(out: str) -> list[int]:
    return [json.loads(line)["seq"] for line in out.splitlines() if line.strip()]


async def test_a_dropped_stream_is_resumed_with_last_event_id_and_no_event_twice(
    tmp_path: Path,
) -> None:
    transport = DroppingTransport(keep=3, drops=2)
    async with served_app(cli_settings()) as (server, _):
        run_id = await start_run(server, tmp_path, calc(content="first"), calc("1+1"), finish("42"))
        code, out, err = await in_thread(lambda: _follow(server, run_id, transport=transport))
    assert code == ExitCode.OK, err
    seqs = _seqs(out)
    assert seqs == list(range(1, len(seqs) + 1))
    assert transport.last_event_ids == [None, "3", "6"]
    assert out.splitlines()[-1].find('"run.completed"') > 0


async def test_following_gives_up_after_the_reconnect_attempts_with_exit_10(
    tmp_path: Path,
) -> None:
    delays: list[float] = []
    transport = DroppingTransport(keep=2, drops=1, refuse_from=2)
    policy = Reconnect(attempts=3, backoff_s=0.5, pause=delays.append)
    async with served_app(cli_settings()) as (server, _):
        run_id = await start_run(server, tmp_path, finish())
        with pytest.raises(UnreachableError) as raised:
            await in_thread(lambda: _follow(server, run_id, transport=transport, reconnect=policy))
    assert raised.value.exit_code == ExitCode.UNREACHABLE == 10
    assert "the test refused the connection" in str(raised.value)
    assert transport.last_event_ids == [None, "2", "2", "2"]
    assert delays == [0.5, 1.0, 2.0]


async def test_a_stream_that_cannot_connect_at_first_is_not_retried(tmp_path: Path) -> None:
    delays: list[float] = []
    transport = DroppingTransport(refuse_from=1)
    async with served_app(cli_settings()) as (server, _):
        run_id = await start_run(server, tmp_path, finish())
        with pytest.raises(UnreachableError):
            await in_thread(
                lambda: _follow(
                    server, run_id, transport=transport, reconnect=Reconnect(pause=delays.append)
                )
            )
    assert transport.last_event_ids == [None]
    assert delays == []


def _interrupt_at(event_type: str) -> Callable[[Event], None]:
    """An event hook that acts as one Ctrl-C, right after the first event of `event_type`."""
    fired: list[Event] = []

    def hook(event: Event) -> None:
        if event["type"] == event_type and not fired:
            fired.append(event)
            raise KeyboardInterrupt

    return hook


async def test_ctrl_c_then_yes_cancels_the_run_and_shows_its_end(tmp_path: Path) -> None:
    questions: list[str] = []

    def yes(question: str) -> bool:
        questions.append(question)
        return True

    async with served_app(cli_settings()) as (server, client):
        run_id = await start_run(server, tmp_path, *hanging())
        code, out, err = await in_thread(
            lambda: _follow(
                server, run_id, confirm=yes, on_event=_interrupt_at("thought"), json_lines=False
            )
        )
        run = (await client.get(f"/runs/{run_id}")).json()
    assert code == ExitCode.CANCELLED
    assert questions == [f"Cancel run {run_id}?"]
    assert run["status"] == "cancelled"
    assert f"Cancelling {run_id}" in err
    lines = out.splitlines()
    assert any(line.startswith("thought") and "thinking" in line for line in lines)
    assert any(line.startswith("reason") and "cancelled" in line for line in lines)
    assert any(line.startswith("status") and "cancelled" in line for line in lines)


async def test_ctrl_c_then_no_detaches_with_how_to_resume_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    async with served_app(cli_settings()) as (server, client):
        run_id = await start_run(server, tmp_path, *hanging())
        code, out, err = await in_thread(
            lambda: _follow(server, run_id, on_event=_interrupt_at("observation"))
        )
        running = (await client.get(f"/runs/{run_id}")).json()
    seen = _seqs(out)[-1]
    assert code == ExitCode.DETACHED == 130
    assert running["status"] == "running"
    assert f"Detached from {run_id} after event {seen}; the run goes on." in err
    assert f"finishline events {run_id} --after {seen} --follow" in err


async def test_resuming_after_detaching_shows_the_rest_and_the_end(tmp_path: Path) -> None:
    async with served_app(cli_settings()) as (server, _):
        run_id = await start_run(server, tmp_path, *hanging())
        code, out, _ = await in_thread(
            lambda: _follow(server, run_id, on_event=_interrupt_at("observation"))
        )
        seen = _seqs(out)[-1]
        results: dict[str, Any] = {}
        async with anyio.create_task_group() as tasks:

            async def resume() -> None:
                results["resumed"] = await cli(
                    server, "events", run_id, "--after", str(seen), "--json", "--follow"
                )

            tasks.start_soon(resume)
            assert (await cli(server, "cancel", run_id)).code == ExitCode.OK
    assert code == ExitCode.DETACHED
    resumed = results["resumed"]
    assert resumed.code == ExitCode.CANCELLED
    events = resumed.json_lines()
    assert events[0]["seq"] == seen + 1
    assert events[-1]["type"] == "run.cancelled"


async def test_ctrl_c_once_the_end_is_shown_asks_nothing(tmp_path: Path) -> None:
    questions: list[str] = []
    async with served_app(cli_settings()) as (server, _):
        run_id = await start_run(server, tmp_path, finish("42"))
        code, _, _ = await in_thread(
            lambda: _follow(
                server,
                run_id,
                confirm=lambda question: questions.append(question) or True,
                on_event=_interrupt_at("run.completed"),
            )
        )
    assert code == ExitCode.OK
    assert questions == []


def test_sse_parsing_joins_data_lines_skips_comments_and_drops_a_cut_event() -> None:
    lines = [
        ": ping",
        "id: 1",
        "event: thought",
        'data: {"seq": 1,',
        'data: "type": "thought"}',
        "",
        "",
        "id: 2",
        'data: {"type": "action"}',
        "",
        "id: 3",
        'data: {"seq": 3, "type": "observ',
    ]
    assert list(parse_sse(lines)) == [
        {"seq": 1, "type": "thought"},
        {"seq": 2, "type": "action"},
    ]


def _approval_body() -> dict[str, Any]:
    calls = [
        {"name": "calculator", "arguments": {"expression": "1+1"}, "id": "a"},
        {"name": "calculator", "arguments": {"expression": "2+2"}, "id": "b"},
    ]
    return {
        "task": "t",
        "model": "scripted",
        "tools": ["calculator"],
        "approval": {"tools": ["calculator"]},
        "model_script": [{"tool_calls": calls}, finish("done")],
    }


async def test_following_at_a_terminal_asks_about_each_call_the_run_waits_on() -> None:
    questions: list[str] = []

    def decide(question: str) -> bool:
        questions.append(question)
        return "(call a)" in question  # approve a, reject b

    async with served_app(cli_settings()) as (server, client):
        run_id = (await client.post("/runs", json=_approval_body())).json()["id"]

        def follow() -> tuple[int, str, str]:
            out, err = console(), console()
            with Api(server.url()) as api:
                code = follow_run(
                    api, run_id, JsonRenderer(out), err=err, confirm=lambda q: False, decide=decide
                )
            return code, text_of(out), text_of(err)

        code, out, err = await in_thread(follow)

    assert code == ExitCode.OK, err
    assert questions == [
        'Approve calculator {"expression": "1+1"} (call a)?',
        'Approve calculator {"expression": "2+2"} (call b)?',
    ]
    assert "a approved, b rejected" in err
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))  # none twice
    decided = [(e["call_id"], e["approved"]) for e in events if e["type"] == "approval.decided"]
    assert decided == [("a", True), ("b", False)]
    assert events[-1]["type"] == "run.completed"

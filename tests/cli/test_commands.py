"""`finishline runs`, `show`, `events`, `say`, `cancel`, `serve` and `run --continue`, and
the API key they send."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import anyio
import pytest

from app.cli import main
from app.cli.exits import ExitCode
from tests.cli.kit import (
    calc,
    cli,
    cli_settings,
    console,
    finish,
    hanging,
    script,
    start_run,
    text_of,
)
from tests.fakes.service import served_app


async def _ended(client: Any, run_id: str) -> dict[str, Any]:
    return (await client.get(f"/runs/{run_id}/wait", params={"timeout_s": 10})).json()


async def test_runs_lists_runs_newest_first_in_a_table(tmp_path: Path) -> None:
    async with served_app(cli_settings()) as (server, client):
        first = await start_run(server, tmp_path, finish("one"))
        second = await start_run(server, tmp_path, calc())  # fails: its script runs out
        await _ended(client, first)
        await _ended(client, second)
        table = await cli(server, "runs")
        failed = await cli(server, "runs", "--status", "failed")
        limited = await cli(server, "runs", "--limit", "1")
        raw = await cli(server, "runs", "--json")
    assert table.code == ExitCode.OK
    header = next(line for line in table.out.splitlines() if "id" in line)
    assert header.split() == ["id", "status", "reason", "model", "steps", "cost", "created"]
    rows = [line.split() for line in table.out.splitlines() if line.startswith("run_")]
    assert [row[0] for row in rows] == [second, first]
    assert rows[0][1:4] == ["failed", "error", "scripted"]
    assert rows[1][1:6] == ["completed", "finished", "scripted", "1", "$0"]  # scripted: free
    assert [line.split()[0] for line in failed.out.splitlines() if line.startswith("run_")] == [
        second
    ]
    assert [line.split()[0] for line in limited.out.splitlines() if line.startswith("run_")] == [
        second
    ]
    assert f"finishline runs --cursor {second}" in limited.err
    assert [run["id"] for run in json.loads(raw.out)["runs"]] == [second, first]


async def test_runs_with_an_unknown_status_prints_the_server_refusal() -> None:
    async with served_app(cli_settings()) as (server, _):
        result = await cli(server, "runs", "--status", "done")
    assert result.code == ExitCode.API_ERROR
    assert "422 validation_error: status: 'done' is not one of" in result.err


async def test_show_prints_status_result_usage_and_settings(tmp_path: Path) -> None:
    async with served_app(cli_settings()) as (server, client):
        run_id = await start_run(server, tmp_path, calc(), finish("forty-two"))
        await _ended(client, run_id)
        shown = await cli(server, "show", run_id)
        raw = await cli(server, "show", run_id, "--json")
    assert shown.code == ExitCode.OK
    lines = shown.out.splitlines()
    assert any(line.split()[:2] == ["run", run_id] for line in lines)
    assert any(line.split()[:2] == ["status", "completed"] for line in lines)
    assert any(line.split()[:2] == ["tools", "calculator"] for line in lines)
    assert "forty-two" in shown.out
    assert any(line.split()[:2] == ["reason", "finished"] for line in lines)
    assert any(
        line.startswith("usage") and "steps 2" in line and "tool calls 1" in line for line in lines
    )
    assert any(line.split() == ["max_steps", "10"] for line in lines)
    assert any(line.split() == ["stop_tool", "true"] for line in lines)
    run = json.loads(raw.out)
    assert run["id"] == run_id
    assert run["result"] == {"answer": "forty-two", "reason": "finished", "degraded": False}


async def test_show_prints_a_runs_rubric() -> None:
    verdict = {"name": "submit_verdict", "arguments": {"satisfied": True, "feedback": "ok"}}
    answer = {"tool_calls": [{"name": "task_finished", "arguments": {"answer": "red"}}]}
    body = {
        "task": "t",
        "model": "scripted",
        "model_script": [answer, {"tool_calls": [verdict]}],
        "outcome": {"rubric": "names a colour"},
    }
    async with served_app(cli_settings()) as (server, client):
        run_id = (await client.post("/runs", json=body)).json()["id"]
        await _ended(client, run_id)
        shown = await cli(server, "show", run_id)
    assert shown.code == ExitCode.OK
    lines = shown.out.splitlines()
    assert any(line.split()[:1] == ["rubric"] and "names a colour" in line for line in lines)


async def test_show_prints_a_typed_answer_as_its_output_in_json(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"total": {"type": "integer"}}}
    answer = {"tool_calls": [{"name": "task_finished", "arguments": {"answer": {"total": 42}}}]}
    body = {"task": "t", "model": "scripted", "model_script": [answer], "output_schema": schema}
    async with served_app(cli_settings()) as (server, client):
        run_id = (await client.post("/runs", json=body)).json()["id"]
        await _ended(client, run_id)
        shown = await cli(server, "show", run_id)
    assert shown.code == ExitCode.OK
    lines = shown.out.splitlines()
    assert any(line.split()[:1] == ["schema"] and '"total"' in line for line in lines)
    assert any("output" in line for line in lines)
    assert any(line.strip(" │") == '"total": 42' for line in lines), shown.out


async def test_show_of_an_unknown_run_prints_not_found() -> None:
    async with served_app(cli_settings()) as (server, _):
        result = await cli(server, "show", "run_01J00000000000000000000000")
    assert result.code == ExitCode.API_ERROR
    assert "404 not_found: no run 'run_01J00000000000000000000000'" in result.err


async def test_events_prints_one_line_each_or_json_lines_from_after(tmp_path: Path) -> None:
    async with served_app(cli_settings()) as (server, client):
        run_id = await start_run(server, tmp_path, calc(content="Let me compute."), finish("42"))
        await _ended(client, run_id)
        lines = await cli(server, "events", run_id)
        after = await cli(server, "events", run_id, "--after", "3", "--json")
        followed = await cli(server, "events", run_id, "--follow")
    assert lines.code == ExitCode.OK
    rows = lines.out.splitlines()
    assert [int(row.split()[0]) for row in rows] == list(range(1, len(rows) + 1))
    kinds = [row.split()[3] for row in rows]
    assert kinds[:3] == ["run.queued", "run.started", "step.started"]
    assert kinds[-1] == "run.completed"
    assert {"thought", "action", "observation", "llm.call"} <= set(kinds)
    assert any("thought" in row and "Let me compute." in row for row in rows)
    assert any("action" in row and 'calculator(expression="6*7")' in row for row in rows)
    assert any("observation" in row and "calculator → 42" in row for row in rows)
    assert any("run.completed" in row and 'reason=finished answer="42"' in row for row in rows)
    assert [e["seq"] for e in after.json_lines()] == list(range(4, len(rows) + 1))
    # following an ended run replays it to the end and exits with the code of its end
    assert followed.code == ExitCode.OK
    assert followed.out.splitlines() == rows


async def test_events_follow_exits_with_the_code_of_a_cancel(tmp_path: Path) -> None:
    async with served_app(cli_settings()) as (server, client):
        run_id = await start_run(server, tmp_path, *hanging())
        async with anyio.create_task_group() as tasks:
            results: dict[str, Any] = {}

            async def follow() -> None:
                results["follow"] = await cli(server, "events", run_id, "--follow")

            tasks.start_soon(follow)
            cancelled = await cli(server, "cancel", run_id)
        again = await cli(server, "cancel", run_id)
        run = await _ended(client, run_id)
    assert cancelled.code == ExitCode.OK
    assert cancelled.out.split() == [run_id, "cancelled"]
    assert run["status"] == "cancelled"
    assert results["follow"].code == ExitCode.CANCELLED
    assert results["follow"].out.splitlines()[-1].split()[3] == "run.cancelled"
    assert again.code == ExitCode.API_ERROR
    assert "409 run_already_ended" in again.err
    assert "has already ended (cancelled)" in again.err


async def test_the_api_key_is_sent_as_a_bearer_token(tmp_path: Path) -> None:
    async with served_app(cli_settings(api_keys=["k1", "k2"])) as (server, _):
        refused = await cli(server, "runs")
        run_id = await start_run(server, tmp_path, finish(), FINISHLINE_API_KEY="k1")
        listed = await cli(server, "runs", env={"FINISHLINE_API_KEY": "k1"})
        other = await cli(server, "show", run_id, env={"FINISHLINE_API_KEY": "k2"})
        wrong = await cli(server, "runs", env={"FINISHLINE_API_KEY": "nope"})
    assert refused.code == ExitCode.API_ERROR
    assert "401 unauthorized" in refused.err
    assert "set FINISHLINE_API_KEY" in refused.err
    assert listed.code == ExitCode.OK
    assert run_id in listed.out
    assert other.code == ExitCode.API_ERROR
    assert "404 not_found" in other.err
    assert wrong.code == ExitCode.API_ERROR
    assert "401 unauthorized" in wrong.err


def test_a_service_that_is_not_there_exits_10() -> None:
    with socket.socket() as sock:  # bound, not listening: connecting is refused
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        err = console()
        code = main(["runs"], console=console(), err_console=err, environ={"FINISHLINE_URL": url})
    assert code == ExitCode.UNREACHABLE == 10
    assert f"cannot connect to {url}" in text_of(err)


def test_the_url_option_wins_over_the_environment() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        err = console()
        code = main(
            ["--url", url, "runs"],
            console=console(),
            err_console=err,
            environ={"FINISHLINE_URL": "http://example.invalid"},
        )
    assert code == ExitCode.UNREACHABLE
    assert f"cannot connect to {url}" in text_of(err)


def test_serve_runs_uvicorn_with_the_app_factory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import uvicorn

    monkeypatch.chdir(tmp_path)  # no .env of the checkout is read
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: calls.append((args, kwargs)))
    monkeypatch.setenv("FINISHLINE_SHUTDOWN_GRACE_S", "3")
    code = main(
        ["serve", "--host", "0.0.0.0", "--port", "9001"], console=console(), err_console=console()
    )
    assert code == ExitCode.OK
    assert calls == [
        (
            ("app.main:create_app",),
            {
                "factory": True,
                "host": "0.0.0.0",
                "port": 9001,
                "http": "app.api.protocols:HeaderTimeoutProtocol",
                "timeout_graceful_shutdown": 8,
            },
        )
    ]


async def test_say_sends_a_live_run_a_message_that_its_events_then_show(tmp_path: Path) -> None:
    async with served_app(cli_settings()) as (server, _):
        run_id = await start_run(server, tmp_path, *hanging())
        said = await cli(server, "say", run_id, "use SI units")
        as_json = await cli(server, "say", run_id, "and be brief", "--json")
        await cli(server, "cancel", run_id)
        lines = await cli(server, "events", run_id)
        ended = await cli(server, "say", run_id, "too late")

    assert said.code == ExitCode.OK
    assert said.out.strip() in (f"sent to {run_id} (running)", f"sent to {run_id} (queued)")
    assert json.loads(as_json.out)["id"] == run_id
    messages = [line for line in lines.out.splitlines() if "user.message" in line]
    assert len(messages) == 2
    assert "use SI units" in messages[0]
    assert ended.code != ExitCode.OK
    assert "start a follow-up" in ended.err


async def test_run_continue_starts_a_follow_up_of_an_ended_run(tmp_path: Path) -> None:
    async with served_app(cli_settings()) as (server, client):
        first = await start_run(server, tmp_path, finish("one"))
        await _ended(client, first)
        followed = await cli(
            server,
            "run",
            "and then?",
            "--continue",
            first,
            "--script",
            script(tmp_path, finish("two")),
        )
        created = await cli(
            server,
            "run",
            "and after?",
            "--continue",
            first,
            "--no-follow",
            "--json",
            "--script",
            script(tmp_path, finish("three")),
        )
        follow_up = json.loads(created.out)
        ended = await _ended(client, follow_up["id"])

    assert followed.code == ExitCode.OK
    assert "two" in followed.out
    assert follow_up["previous_run_id"] == first
    assert ended["result"]["answer"] == "three"


async def _waiting(client: Any, run_id: str) -> dict[str, Any]:
    response = await client.get(f"/runs/{run_id}/wait", params={"timeout_s": 10})
    assert response.json()["status"] == "requires_action", response.text
    return response.json()


async def test_approve_decides_every_pending_call_or_the_one_named(tmp_path: Path) -> None:
    body = {
        "task": "t",
        "model": "scripted",
        "tools": ["calculator"],
        "approval": {"tools": ["calculator"]},
        "model_script": [
            {
                "tool_calls": [
                    {"name": "calculator", "arguments": {"expression": "1+1"}, "id": "a"},
                    {"name": "calculator", "arguments": {"expression": "2+2"}, "id": "b"},
                ]
            },
            finish("done"),
        ],
    }
    async with served_app(cli_settings()) as (server, client):
        run_id = (await client.post("/runs", json=body)).json()["id"]
        await _waiting(client, run_id)
        rejected = await cli(server, "approve", run_id, "b", "--reject", "--message", "no")
        approved = await cli(server, "approve", run_id)  # every call still pending: a
        done = await _ended(client, run_id)
        nothing = await cli(server, "approve", run_id)
        events = (
            await client.get(f"/runs/{run_id}/events", headers={"Accept": "application/json"})
        ).json()["events"]

    assert rejected.code == ExitCode.OK
    assert rejected.out.strip() == f"rejected b; {run_id} requires_action"
    assert approved.code == ExitCode.OK
    assert approved.out.startswith("approved a; ")
    assert done["status"] == "completed"
    assert nothing.code != ExitCode.OK
    assert "waits on no call" in nothing.err
    decided = [
        (e["call_id"], e["approved"], e["message"])
        for e in events
        if e["type"] == "approval.decided"
    ]
    assert decided == [("b", False, "no"), ("a", True, None)]


async def test_run_thread_continues_a_thread_and_threads_shows_it(tmp_path: Path) -> None:
    """`run --thread ID` makes, then continues, a thread; `threads` lists it, `threads ID`
    shows it with its runs in order; a busy thread's refusal is printed (exit 9)."""
    async with served_app(cli_settings()) as (server, client):
        one = await cli(
            server, "run", "first", "--script", script(tmp_path, finish("one")), "--thread", "t-1"
        )
        two = await cli(
            server,
            "run",
            "second",
            "--script",
            script(tmp_path, finish("two")),
            "--thread",
            "t-1",
            "--no-follow",
        )
        await _ended(client, two.out.strip())
        hang = await cli(
            server,
            "run",
            "third",
            "--script",
            script(tmp_path, *hanging()),
            "--thread",
            "t-1",
            "--no-follow",
        )
        busy = await cli(
            server,
            "run",
            "fourth",
            "--script",
            script(tmp_path, finish("4")),
            "--thread",
            "t-1",
            "--no-follow",
        )
        queued = await cli(
            server,
            "run",
            "fifth",
            "--script",
            script(tmp_path, finish("5")),
            "--thread",
            "t-1",
            "--multitask",
            "enqueue",
            "--no-follow",
            "--json",
        )
        listed = await cli(server, "threads")
        shown = await cli(server, "threads", "t-1")
        raw = await cli(server, "threads", "t-1", "--json")
        await client.post(f"/runs/{hang.out.strip()}/cancel")
        missing = await cli(server, "threads", "nope")

    assert one.code == ExitCode.OK
    assert "one" in one.out
    assert busy.code == ExitCode.API_ERROR
    assert "409 thread_busy" in busy.err
    fifth = json.loads(queued.out)
    assert (fifth["thread_id"], fifth["previous_run_id"]) == ("t-1", hang.out.strip())
    header = next(line for line in listed.out.splitlines() if "thread" in line)
    assert header.split() == ["thread", "status", "runs", "latest", "run", "updated"]
    row = next(line.split() for line in listed.out.splitlines() if line.startswith("t-1"))
    assert row[1:4] == ["busy", "4", fifth["id"]]
    ids = [line.split()[0] for line in shown.out.splitlines() if line.startswith("run_")]
    body = json.loads(raw.out)
    assert ids == [r["id"] for r in body["runs_in_order"]]
    assert ids[1:] == [two.out.strip(), hang.out.strip(), fifth["id"]]
    assert "two" in shown.out
    assert missing.code == ExitCode.API_ERROR
    assert "404 not_found" in missing.err

"""A run's events are queued to the SQLite writer and committed many at once (app.runs.recorder):
the action of a non-idempotent tool is committed before its tool is called, an idempotent
tool's call does not wait for it, and a write that fails fails the run with a clear error
instead of being lost in silence."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.engine.events import EventType
from app.runs.live import LiveRuns
from app.runs.stores.sqlite import SqliteRunStore
from tests.api.kit import create, finish, scripted, settings, wait_ended
from tests.fakes.service import api_client
from tests.fakes.serving import Served


def committed_actions(path: Path) -> list[str]:
    """The call ids of the (one) run's action events another connection sees: committed."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        sql = "SELECT data FROM events WHERE type = 'action' ORDER BY seq"
        rows = conn.execute(sql).fetchall()
    return [json.loads(data)["call_id"] for (data,) in rows]


async def test_each_action_of_a_non_idempotent_tool_is_committed_before_it_is_called(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    seen: list[tuple[str, list[str]]] = []

    async def tool(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append((body["n"], committed_actions(db)))
        return JSONResponse({"ok": True})

    async with Served(Starlette(routes=[Route("/t", tool, methods=["POST"])])) as server:
        http_tool = {
            "name": "record",
            "description": "Record a number.",
            "parameters": {"type": "object", "properties": {"n": {"type": "string"}}},
            "url": server.url("/t"),
            "idempotent": False,
        }
        calls = [
            {"tool_calls": [{"name": "record", "arguments": {"n": f"{i}"}, "id": f"c{i}"}]}
            for i in range(3)
        ]
        body = scripted(*calls, finish(), http_tools=[http_tool])
        config = settings(store_url=f"sqlite:///{db}", http_tool_allow_hosts=["127.0.0.1"])
        async with api_client(config) as client:
            run = await create(client, body)
            assert (await wait_ended(client, run["id"]))["status"] == "completed"
    assert seen == [
        ("0", ["c0"]),
        ("1", ["c0", "c1"]),
        ("2", ["c0", "c1", "c2"]),
    ]


async def test_an_idempotent_tool_is_called_while_its_action_is_still_being_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer is held inside the action's insert until the tool has been called: a run
    that waited for that commit first would never call it (the hold gives up after 10 s and
    the test fails)."""
    db = tmp_path / "runs.db"
    called = threading.Event()
    held: list[bool] = []
    insert = SqliteRunStore._event_insert

    def held_action(
        self: SqliteRunStore, run_id: str, type: EventType, step: int, data: dict[str, Any]
    ) -> Callable[[sqlite3.Connection], Any]:
        write = insert(self, run_id, type, step, data)
        if type != EventType.ACTION:
            return write

        def hold(conn: sqlite3.Connection) -> Any:
            held.append(called.wait(timeout=10))  # in the writer thread, mid-transaction
            return write(conn)

        return hold

    seen: list[list[str]] = []

    async def tool(request: Request) -> JSONResponse:
        seen.append(await asyncio.to_thread(committed_actions, db))
        called.set()
        return JSONResponse({"ok": True})

    monkeypatch.setattr(SqliteRunStore, "_event_insert", held_action)
    async with Served(Starlette(routes=[Route("/t", tool, methods=["POST"])])) as server:
        http_tool = {
            "name": "look",
            "description": "Look a number up.",
            "parameters": {"type": "object", "properties": {"n": {"type": "string"}}},
            "url": server.url("/t"),
        }
        call = {"tool_calls": [{"name": "look", "arguments": {"n": "1"}, "id": "c0"}]}
        body = scripted(call, finish(), http_tools=[http_tool])
        config = settings(store_url=f"sqlite:///{db}", http_tool_allow_hosts=["127.0.0.1"])
        async with api_client(config) as client:
            run = await create(client, body)
            assert (await wait_ended(client, run["id"]))["status"] == "completed"
    assert held == [True, True]  # the tool was called while its action's insert was held
    # (the second: task_finished's action, after it)
    assert seen == [[]]  # and the action was not committed yet when it ran
    assert committed_actions(db)[0] == "c0"  # then it was


async def test_a_queued_write_that_fails_fails_the_run_and_leaves_no_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    insert = SqliteRunStore._event_insert

    def failing_once(
        self: SqliteRunStore, run_id: str, type: EventType, step: int, data: dict[str, Any]
    ) -> Callable[[sqlite3.Connection], Any]:
        if type != EventType.OBSERVATION or failed:
            return insert(self, run_id, type, step, data)
        failed.append(type)

        def fail(conn: sqlite3.Connection) -> Any:
            raise sqlite3.OperationalError("disk I/O error")

        return fail

    failed: list[str] = []
    monkeypatch.setattr(SqliteRunStore, "_event_insert", failing_once)
    calc = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]}
    body = scripted(calc, finish(), tools=["calculator"])
    async with api_client(settings(store_url=f"sqlite:///{tmp_path / 'runs.db'}")) as client:
        run = await create(client, body)
        ended = await wait_ended(client, run["id"])
        page = await client.get(f"/runs/{run['id']}/events", headers={"Accept": "application/json"})
        events = page.json()["events"]
    assert failed == ["observation"]
    assert ended["status"] == "failed"
    assert ended["error"]["type"] == "internal"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert "observation" not in [e["type"] for e in events]
    assert events[-1]["type"] == "run.failed"


async def test_wait_answers_once_the_terminal_event_is_stored_not_when_the_record_is_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record is terminal before its terminal event is stored (DESIGN §5); GET /wait
    answers only once the event is: the terminal insert is held until /wait waits."""
    db = tmp_path / "runs.db"
    entered, release = threading.Event(), threading.Event()
    insert = SqliteRunStore._event_insert
    wait_for = LiveRuns.wait_for

    def held_end(
        self: SqliteRunStore, run_id: str, type: EventType, step: int, data: dict[str, Any]
    ) -> Callable[[sqlite3.Connection], Any]:
        write = insert(self, run_id, type, step, data)
        if type != EventType.RUN_COMPLETED:
            return write

        def hold(conn: sqlite3.Connection) -> Any:
            entered.set()
            release.wait(timeout=10)  # in the writer thread, mid-transaction
            return write(conn)

        return hold

    async def waiting(self: LiveRuns, run_ids: Any, timeout_s: float) -> None:
        release.set()  # /wait waits: the end may be stored now
        await wait_for(self, run_ids, timeout_s)

    monkeypatch.setattr(SqliteRunStore, "_event_insert", held_end)
    monkeypatch.setattr(LiveRuns, "wait_for", waiting)
    async with api_client(settings(store_url=f"sqlite:///{db}")) as client:
        run = await create(client, scripted(finish()))
        assert await asyncio.to_thread(entered.wait, 10)
        shown = (await client.get(f"/runs/{run['id']}")).json()
        assert shown["status"] == "completed"  # the record first
        ended = await wait_ended(client, run["id"])
        stored = await asyncio.to_thread(committed_types, db)
    assert ended["status"] == "completed"
    assert stored[-1] == "run.completed"


def committed_types(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return [t for (t,) in conn.execute("SELECT type FROM events ORDER BY seq")]

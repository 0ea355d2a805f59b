"""AG-UI's threads (and, through the same index, A2A's contexts) are threads of the runs layer
(DESIGN §19): a turn's run belongs to `ag-ui:THREAD`, listed by GET /threads with its runs in
order; a busy AG-UI thread keeps its own answer; and the heads a version before kept (SQLite
schema 7, Redis `thread:` keys) still resolve: the next turn continues from them."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.runs.records import RunRecord, RunStatus, new_run_id
from app.runs.stores.redis_store import RedisRunStore
from app.runs.stores.sqlite_schema import MIGRATIONS
from tests.agui.kit import agent_input, of_type, scripted, stream, user
from tests.api.kit import error_of, settings
from tests.fakes.service import api_client

FINISH = {"tool_calls": [{"name": "task_finished", "arguments": {"answer": "hi"}}]}
CALC = {"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "1+1"}}]}


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        return url
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


async def turn(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    response, events = await stream(client, body)
    assert response.status_code == 200, response.text
    (finished,) = of_type(events, "RUN_FINISHED")
    result: dict[str, Any] = finished["result"]
    return result


def old_record(owner: str | None) -> RunRecord:
    return RunRecord.model_validate(
        {
            "id": new_run_id(),
            "owner": owner,
            "status": RunStatus.COMPLETED,
            "request": {"task": "hello"},
            "model": "scripted",
            "settings": {},
        }
    )


async def test_an_agui_thread_is_a_thread_listed_with_its_runs(store_url: str) -> None:
    async with api_client(settings(store_url=store_url)) as client:
        first = await turn(client, agent_input(user("hello"), finishline=scripted(FINISH)))
        second = await turn(
            client, agent_input(user("more", id="u2"), run="r2", finishline=scripted(FINISH))
        )
        listed = (await client.get("/threads")).json()["threads"]
        seen = (await client.get("/threads/ag-ui:thread-1")).json()
        runs = (await client.get("/threads/ag-ui:thread-1/runs")).json()["runs"]
        refused = await client.post("/runs", json={"task": "x", "thread_id": "ag-ui:thread-1"})

    assert [t["id"] for t in listed] == ["ag-ui:thread-1"]
    assert (seen["runs"], seen["latest_run_id"], seen["status"]) == (2, second["run_id"], "idle")
    assert [r["id"] for r in runs] == [first["run_id"], second["run_id"]]
    assert [r["thread_id"] for r in runs] == ["ag-ui:thread-1"] * 2
    assert runs[1]["previous_run_id"] == first["run_id"]
    assert error_of(refused, 422, "validation_error")["details"]["field"] == "thread_id"


async def test_a_busy_agui_thread_keeps_its_own_answer(store_url: str) -> None:
    asking = scripted(CALC, FINISH, tools=["calculator"], approval={"tools": ["calculator"]})
    async with api_client(settings(store_url=store_url)) as client:
        await stream(client, agent_input(user("add"), finishline=asking))
        busy = await client.post(
            "/ag-ui", json=agent_input(user("more", id="u2"), run="r2", finishline=scripted())
        )
        thread = (await client.get("/threads/ag-ui:thread-1")).json()

    assert thread["status"] == "requires_action"
    assert error_of(busy, 409)["type"] in ("run_not_ended", "interrupts_pending")


async def test_an_agui_head_a_schema_7_sqlite_file_kept_is_continued(tmp_path: Path) -> None:
    """The file a version before issue #35 wrote: its thread head is the thread's latest run,
    and the thread's next turn continues from it."""
    path = tmp_path / "runs.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:7]:
        for statement in filter(str.strip, script.split(";")):
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 7")
    old = old_record(None)
    conn.execute(
        "INSERT INTO runs (id, owner, status, created_at, record) VALUES (?, ?, ?, ?, ?)",
        (old.id, None, "completed", old.created_at.isoformat(), old.model_dump_json()),
    )
    conn.execute("INSERT INTO threads VALUES ('', 'ag-ui:thread-1', ?)", (old.id,))
    conn.close()

    async with api_client(settings(store_url=f"sqlite:///{path}")) as client:
        seen = (await client.get("/threads/ag-ui:thread-1")).json()
        result = await turn(
            client, agent_input(user("again", id="u2"), run="r2", finishline=scripted(FINISH))
        )
        run = (await client.get(f"/runs/{result['run_id']}")).json()

    assert seen["latest_run_id"] == old.id
    assert run["previous_run_id"] == old.id
    assert run["task"] == "again"  # a known thread: only the new message is the task


async def test_an_agui_head_redis_kept_before_is_continued(redis_url: str) -> None:
    store = RedisRunStore(redis_url)
    old = old_record(None)
    await store.create(old)
    await store.redis.set(f"{store.prefix}thread:n:ag-ui:thread-1", old.id)  # the old layout
    await store.close()
    async with api_client(settings(store_url=redis_url)) as client:
        result = await turn(
            client, agent_input(user("again", id="u2"), run="r2", finishline=scripted(FINISH))
        )
        run = (await client.get(f"/runs/{result['run_id']}")).json()

    assert run["previous_run_id"] == old.id
    assert run["thread_id"] == "ag-ui:thread-1"


async def test_an_a2a_context_is_a_thread_listed_with_its_tasks() -> None:
    from tests.a2a.kit import a2a_service, send, text
    from tests.a2a.kit import finish as a2a_finish
    from tests.a2a.kit import scripted as a2a_scripted

    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        first = await send(
            client, text("one", context_id="ctx-9"), finishline=a2a_scripted(a2a_finish("1"))
        )
        second = await send(
            client, text("two", context_id="ctx-9"), finishline=a2a_scripted(a2a_finish("2"))
        )
        listed = (await service.http.get(service.url("/threads"))).json()["threads"]
        runs = (await service.http.get(service.url("/threads/a2a:calc:ctx-9/runs"))).json()

    assert [t["id"] for t in listed] == ["a2a:calc:ctx-9"]
    assert [r["id"] for r in runs["runs"]] == [first.id, second.id]
    assert runs["runs"][1]["previous_run_id"] == first.id

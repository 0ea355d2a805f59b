"""threadId is a conversation (DESIGN §16): a thread's next run continues from its last (as
`previous_run_id`), a thread the server has not seen brings its history in its messages, and
threads are per key. Kept by the store: the same on memory, SQLite and Redis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agui.kit import agent_input, of_type, scripted, stream, types, user
from tests.api.kit import error_of, finish, settings
from tests.e2e.kit import sqlite_url
from tests.fakes.service import api_client

KEYS = ["key-alice", "key-bob"]
ALICE = {"Authorization": "Bearer key-alice"}
BOB = {"Authorization": "Bearer key-bob"}


def answered(events: list[Any]) -> dict[str, Any]:
    (finished,) = of_type(events, "RUN_FINISHED")
    assert finished["outcome"] == {"type": "success"}, finished
    result: dict[str, Any] = finished["result"]
    return result


async def turn(
    client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str] | None = None
) -> dict[str, Any]:
    response, events = await stream(client, body, headers)
    assert response.status_code == 200, response.text
    assert types(events)[0] == "RUN_STARTED"
    return answered(events)


async def native(client: httpx.AsyncClient, run_id: str, **kw: Any) -> dict[str, Any]:
    response = await client.get(f"/runs/{run_id}", **kw)
    assert response.status_code == 200, response.text
    run: dict[str, Any] = response.json()
    return run


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        return url
    return "memory://" if request.param == "memory" else sqlite_url(tmp_path)


async def test_a_threads_next_run_continues_its_last_on_every_store(store_url: str) -> None:
    history = [user("hello", id="u1"), {"id": "a1", "role": "assistant", "content": "hi"}]
    async with api_client(settings(store_url=store_url)) as client:
        first = await turn(client, agent_input(user("hello"), finishline=scripted(finish("hi"))))
        second = await turn(
            client,
            agent_input(
                *history, user("and now?", id="u2"), run="r2", finishline=scripted(finish("ok"))
            ),
        )
        other = await turn(
            client,
            agent_input(user("hello"), thread="thread-2", run="r3", finishline=scripted(finish())),
        )

        assert (await native(client, second["run_id"]))["previous_run_id"] == first["run_id"]
        assert (await native(client, second["run_id"]))["task"] == "and now?"
        assert (await native(client, other["run_id"]))["previous_run_id"] is None


async def test_a_thread_the_server_has_not_seen_brings_its_history() -> None:
    messages = [
        user("My name is Ada.", id="u1"),
        {"id": "a1", "role": "assistant", "content": "Hello Ada."},
        user("What is my name?", id="u2"),
    ]
    async with api_client(settings()) as client:
        result = await turn(client, agent_input(*messages, finishline=scripted(finish("Ada"))))
        task = (await native(client, result["run_id"]))["task"]

    assert task.startswith("<earlier_conversation>\nuser: My name is Ada.\nassistant: Hello Ada.")
    assert task.endswith("</earlier_conversation>\n\nWhat is my name?")


async def test_the_context_entries_join_the_task() -> None:
    body = agent_input(user("Which plan?"), finishline=scripted(finish()))
    body["context"] = [{"description": "the user's plan", "value": "pro"}]
    async with api_client(settings()) as client:
        result = await turn(client, body)
        task = (await native(client, result["run_id"]))["task"]

    assert task == "Which plan?\n\n<context>\n- the user's plan: pro\n</context>"


async def test_threads_are_per_key() -> None:
    async with api_client(settings(api_keys=KEYS)) as client:
        alices = await turn(client, agent_input(finishline=scripted(finish())), ALICE)
        bobs = await turn(client, agent_input(run="r2", finishline=scripted(finish())), BOB)
        bobs_run = await native(client, bobs["run_id"], headers=BOB)
        hidden = await client.get(f"/runs/{alices['run_id']}", headers=BOB)

    assert bobs_run["previous_run_id"] is None  # the same threadId: a thread of Bob's own
    assert hidden.status_code == 404


async def test_every_turn_needs_the_key() -> None:
    async with api_client(settings(api_keys=KEYS)) as client:
        missing = await client.post("/ag-ui", json=agent_input())
        wrong = await client.post(
            "/ag-ui", json=agent_input(), headers={"Authorization": "Bearer nope"}
        )

    error_of(missing, 401)
    error_of(wrong, 401)


async def test_an_older_turn_again_re_attaches_to_its_own_run_after_last_event_id() -> None:
    first_turn = agent_input(user("hello"), run="r1", finishline=scripted(finish("hi")))
    async with api_client(settings()) as client:
        first = await turn(client, first_turn)
        await turn(client, agent_input(user("more"), run="r2", finishline=scripted(finish())))
        response, events = await stream(client, first_turn, {"Last-Event-ID": "3"})
        runs = (await client.get("/runs")).json()["runs"]

    assert response.status_code == 200
    assert events[0].data["metadata"]["finishline"]["run_id"] == first["run_id"]
    assert events[0].id == "3"
    assert [int(e.id or 0) > 3 for e in events[1:]] == [True] * (len(events) - 1)
    assert answered(events) == first
    assert len(runs) == 2  # never a second run for one turn


async def test_a_thread_whose_last_run_was_deleted_starts_again_from_its_messages(
    store_url: str,
) -> None:
    history = [user("hello", id="u1"), {"id": "a1", "role": "assistant", "content": "hi"}]
    async with api_client(settings(store_url=store_url)) as client:
        first = await turn(client, agent_input(user("hello"), finishline=scripted(finish("hi"))))
        deleted = await client.delete(f"/runs/{first['run_id']}")
        again = await turn(
            client,
            agent_input(*history, user("again", id="u2"), run="r2", finishline=scripted(finish())),
        )
        run = await native(client, again["run_id"])

    assert deleted.status_code == 204
    assert run["previous_run_id"] is None
    assert run["task"].startswith("<earlier_conversation>\nuser: hello\nassistant: hi")


async def test_an_older_turn_again_with_another_input_is_a_conflict() -> None:
    async with api_client(settings()) as client:
        await turn(client, agent_input(user("hello"), run="r1", finishline=scripted(finish("hi"))))
        await turn(client, agent_input(user("more"), run="r2", finishline=scripted(finish())))
        response = await client.post(
            "/ag-ui", json=agent_input(user("changed"), run="r1", finishline=scripted(finish()))
        )
        runs = (await client.get("/runs")).json()["runs"]

    error = error_of(response, 409, "idempotency_conflict")
    assert "runId 'r1'" in error["message"]
    assert len(runs) == 2


IMAGE = {
    "id": "u0",
    "role": "user",
    "content": [{"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}}],
}


async def test_only_a_history_the_server_uses_is_read() -> None:
    async with api_client(settings()) as client:
        unseen = await client.post(
            "/ag-ui", json=agent_input(IMAGE, user("what is it?"), finishline=scripted(finish()))
        )
        await turn(client, agent_input(user("hello"), run="r2", finishline=scripted(finish())))
        known = await turn(
            client,
            agent_input(
                IMAGE, user("and now?", id="u3"), run="r3", finishline=scripted(finish("ok"))
            ),
        )

    assert error_of(unseen, 422)["details"]["field"] == "messages[0].content[0]"
    assert known["answer"] == "ok"  # a known thread's history is the server's: not read

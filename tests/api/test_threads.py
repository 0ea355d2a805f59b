"""Threads, a conversation as a resource (DESIGN §19), on every store: POST /runs with
`thread_id` makes and continues a thread, a busy thread refuses, queues or interrupts per
`multitask`, exactly under concurrency; GET /threads, GET/PATCH/DELETE /threads/{id} and GET
/threads/{id}/runs, per API key."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.api.kit import (
    cancel,
    create,
    error_of,
    finish,
    hanging,
    json_events,
    scripted,
    settings,
    wait_ended,
    wait_for_status,
)
from tests.e2e.kit import LocalEndpoints, http_tool
from tests.fakes.service import api_client

K1 = {"Authorization": "Bearer first-key-4b1e"}
K2 = {"Authorization": "Bearer second-key-9c7d"}
CALC = {"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "6*7"}}]}


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        return url
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


def keyed(store_url: str, **overrides: Any) -> Any:
    keys = [K1["Authorization"][7:], K2["Authorization"][7:]]
    return settings(store_url=store_url, api_keys=keys, **overrides)


def said(answer: str, thread: str, **fields: Any) -> dict[str, Any]:
    return scripted(finish(answer), thread_id=thread, **fields)


def waiting(thread: str, **fields: Any) -> dict[str, Any]:
    """A thread's run that waits for approval of its calculator call, then finishes."""
    return scripted(
        CALC,
        finish("42"),
        tools=["calculator"],
        approval={"tools": ["calculator"]},
        thread_id=thread,
        **fields,
    )


async def thread(client: httpx.AsyncClient, thread_id: str, **kw: Any) -> dict[str, Any]:
    answer = await client.get(f"/threads/{thread_id}", **kw)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def runs_of(client: httpx.AsyncClient, thread_id: str, **kw: Any) -> list[str]:
    answer = await client.get(f"/threads/{thread_id}/runs", **kw)
    assert answer.status_code == 200, answer.text
    return [r["id"] for r in answer.json()["runs"]]


async def approve(client: httpx.AsyncClient, run_id: str) -> None:
    body = {"decisions": [{"call_id": "c1", "approve": True}]}
    answer = await client.post(f"/runs/{run_id}/approvals", json=body)
    assert answer.status_code == 202, answer.text


async def test_a_thread_is_made_by_its_first_run_and_continued_by_the_next(
    store_url: str,
) -> None:
    async with api_client(settings(store_url=store_url)) as client:
        first = await create(client, said("one", "chat-1"))
        await wait_ended(client, first["id"])
        second = await create(client, said("two", "chat-1", system_prompt=None))
        ended = await wait_ended(client, second["id"])
        seen = await thread(client, "chat-1")
        listed = (await client.get("/threads")).json()
        runs = await runs_of(client, "chat-1")
        queued = (await json_events(client, second["id"]))["events"][0]

    assert first["thread_id"] == second["thread_id"] == "chat-1"
    assert first["previous_run_id"] is None
    assert ended["previous_run_id"] == first["id"]  # the conversation goes on from the first
    assert ended["status"] == "completed"
    assert queued["type"] == "run.queued"
    assert (queued["thread_id"], queued["previous_run_id"]) == ("chat-1", first["id"])
    assert seen["id"] == "chat-1"
    assert (seen["status"], seen["runs"], seen["latest_run_id"]) == ("idle", 2, second["id"])
    assert seen["metadata"] == {}
    assert seen["created_at"] <= seen["updated_at"]
    assert seen["links"] == {"self": "/threads/chat-1", "runs": "/threads/chat-1/runs"}
    assert runs == [first["id"], second["id"]]  # oldest first
    assert [t["id"] for t in listed["threads"]] == ["chat-1"]
    assert listed["next_cursor"] is None


async def test_a_busy_thread_refuses_a_new_run_with_409_naming_its_latest(store_url: str) -> None:
    async with api_client(settings(store_url=store_url)) as client:
        asking = await create(client, waiting("t"))
        await wait_for_status(client, asking["id"], "requires_action")
        refused = await client.post("/runs", json=said("no", "t"))
        seen = await thread(client, "t")
        await cancel(client, asking["id"])
        later = await create(client, said("yes", "t"))
        await wait_ended(client, later["id"])

    error = error_of(refused, 409, "thread_busy")
    assert error["details"]["run_id"] == asking["id"]
    assert asking["id"] in error["message"]
    assert seen["status"] == "requires_action"
    assert later["previous_run_id"] == asking["id"]


async def test_two_simultaneous_posts_on_an_idle_thread_make_one_run(store_url: str) -> None:
    """One run, the other 409 (`reject`) or queued behind it (`enqueue`): the thread index's
    compare-and-set decides, whatever the interleaving."""
    async with api_client(settings(store_url=store_url, max_queued_runs=50)) as client:
        for n in range(4):
            answers = await asyncio.gather(  # runs that last: none ends before the others
                *(client.post("/runs", json=hanging(thread_id=f"r{n}")) for _ in range(4))
            )
            codes = sorted(a.status_code for a in answers)
            assert codes == [202, 409, 409, 409], [a.text for a in answers]
            made = next(a.json() for a in answers if a.status_code == 202)
            busy = next(a.json() for a in answers if a.status_code == 409)
            assert busy["error"]["details"]["run_id"] == made["id"]
            assert await runs_of(client, f"r{n}") == [made["id"]]
            await cancel(client, made["id"])
        answers = await asyncio.gather(
            *(client.post("/runs", json=said(str(n), "e", multitask="enqueue")) for n in range(3))
        )
        assert [a.status_code for a in answers] == [202, 202, 202], [a.text for a in answers]
        made = [a.json() for a in answers]
        for run in made:
            await wait_ended(client, run["id"])
        chain = await runs_of(client, "e")

    assert sorted(chain) == sorted(r["id"] for r in made)
    previous = {r["id"]: r["previous_run_id"] for r in made}
    assert [previous[run_id] for run_id in chain] == [None, *chain[:-1]]  # one line


async def test_an_enqueue_chain_of_three_runs_one_after_the_other(store_url: str) -> None:
    async with api_client(settings(store_url=store_url)) as client:
        first = await create(client, waiting("q"))
        await wait_for_status(client, first["id"], "requires_action")
        second = await create(client, said("two", "q", multitask="enqueue"))
        third = await create(client, said("three", "q", multitask="enqueue"))
        held = (await client.get(f"/runs/{second['id']}")).json()
        busy = await thread(client, "q")
        await approve(client, first["id"])
        ended = [await wait_ended(client, r["id"]) for r in (first, second, third)]
        chain = await runs_of(client, "q")

    assert (second["status"], held["status"], held["started_at"]) == ("queued", "queued", None)
    assert (busy["status"], busy["latest_run_id"]) == ("busy", third["id"])
    assert second["previous_run_id"] == first["id"]
    assert third["previous_run_id"] == second["id"]
    assert [r["status"] for r in ended] == ["completed"] * 3
    assert [r["result"]["answer"] for r in ended] == ["42", "two", "three"]
    assert ended[0]["ended_at"] <= ended[1]["started_at"]
    assert ended[1]["ended_at"] <= ended[2]["started_at"]
    assert chain == [first["id"], second["id"], third["id"]]


async def test_an_interrupt_while_a_tool_runs_cancels_it_then_starts_the_next(
    store_url: str,
) -> None:
    async with (
        LocalEndpoints() as endpoints,
        api_client(settings(store_url=store_url, http_tool_allow_hosts=["127.0.0.1"])) as client,
    ):
        body = scripted(
            {"tool_calls": [{"name": "slow_lookup", "arguments": {"key": "x"}}]},
            finish("never"),
            http_tools=[http_tool("slow_lookup", endpoints.url("/hang"))],
            settings={"tool_timeout_s": 60},
            thread_id="i",
        )
        first = await create(client, body)
        with anyio.fail_after(10):
            await endpoints.hang_arrived.wait()  # its tool call is in flight
        second = await create(client, said("instead", "i", multitask="interrupt"))
        interrupted = await wait_ended(client, first["id"])
        after = await wait_ended(client, second["id"])
        with anyio.fail_after(5):
            await endpoints.hang_left.wait()  # the tool's HTTP call was torn down

    assert second["previous_run_id"] == first["id"]
    assert interrupted["status"] == "cancelled"
    assert after["status"] == "completed"
    assert after["result"]["answer"] == "instead"
    assert interrupted["ended_at"] <= after["started_at"]


async def test_a_deleted_latest_run_is_read_past(store_url: str) -> None:
    async with api_client(settings(store_url=store_url)) as client:
        first = await create(client, said("one", "d"))
        await wait_ended(client, first["id"])
        second = await create(client, said("two", "d"))
        await wait_ended(client, second["id"])
        assert (await client.delete(f"/runs/{second['id']}")).status_code == 204
        seen = await thread(client, "d")
        third = await create(client, said("three", "d"))
        await wait_ended(client, third["id"])
        runs = await runs_of(client, "d")

    assert (seen["latest_run_id"], seen["runs"], seen["status"]) == (first["id"], 2, "idle")
    assert third["previous_run_id"] == first["id"]
    assert runs == [first["id"], third["id"]]


async def test_a_thread_takes_metadata_and_is_deleted_with_its_runs_once_idle(
    store_url: str,
) -> None:
    async with api_client(settings(store_url=store_url)) as client:
        asking = await create(client, waiting("m"))
        await wait_for_status(client, asking["id"], "requires_action")
        patched = await client.patch("/threads/m", json={"metadata": {"topic": "tax"}})
        bad = await client.patch("/threads/m", json={"metadata": [1]})
        unknown = await client.patch("/threads/m", json={"metadata": {}, "name": "x"})
        busy = await client.delete("/threads/m")
        await cancel(client, asking["id"])
        gone = await client.delete("/threads/m")
        after = await client.get("/threads/m")
        run_after = await client.get(f"/runs/{asking['id']}")
        again = await client.delete("/threads/m")
        fresh = await create(client, said("anew", "m"))

    assert patched.status_code == 200, patched.text
    assert patched.json()["metadata"] == {"topic": "tax"}
    assert patched.json()["updated_at"] >= patched.json()["created_at"]
    assert error_of(bad, 422, "validation_error")["details"]["errors"][0]["field"] == "metadata"
    error_of(unknown, 422, "validation_error")
    assert error_of(busy, 409, "thread_busy")["details"]["run_id"] == asking["id"]
    assert gone.status_code == 204
    error_of(after, 404, "not_found")
    error_of(run_after, 404, "not_found")  # its runs went with it
    error_of(again, 404, "not_found")
    assert fresh["previous_run_id"] is None  # the id names a new thread


async def test_threads_are_per_api_key(store_url: str) -> None:
    async with api_client(keyed(store_url)) as client:
        mine = await create(client, said("mine", "shared"), headers=K1)
        await wait_ended(client, mine["id"], headers=K1)
        theirs = await create(client, said("theirs", "shared"), headers=K2)
        await wait_ended(client, theirs["id"], headers=K2)
        k1_threads = (await client.get("/threads", headers=K1)).json()["threads"]
        k1_seen = await thread(client, "shared", headers=K1)
        k2_runs = await runs_of(client, "shared", headers=K2)
        k2_private = await client.get("/threads/only-k1", headers=K2)
        await create(client, said("x", "only-k1"), headers=K1)
        hidden = [
            await client.get("/threads/only-k1", headers=K2),
            await client.get("/threads/only-k1/runs", headers=K2),
            await client.patch("/threads/only-k1", json={"metadata": {}}, headers=K2),
            await client.delete("/threads/only-k1", headers=K2),
        ]

    assert theirs["previous_run_id"] is None  # the same id: a thread of its own
    assert [t["id"] for t in k1_threads] == ["shared"]
    assert k1_seen["latest_run_id"] == mine["id"]
    assert k2_runs == [theirs["id"]]
    error_of(k2_private, 404, "not_found")
    for answer in hidden:
        error_of(answer, 404, "not_found")


async def test_threads_list_most_recently_active_first_in_pages(store_url: str) -> None:
    async with api_client(settings(store_url=store_url)) as client:
        for name in ("a", "b", "c"):
            await wait_ended(client, (await create(client, said(name, name)))["id"])
        await wait_ended(client, (await create(client, said("a2", "a")))["id"])
        pages, cursor = [], None
        while True:
            params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            body = (await client.get("/threads", params=params)).json()
            pages.append([t["id"] for t in body["threads"]])
            cursor = body["next_cursor"]
            if cursor is None:
                break
        bad = await client.get("/threads", params={"cursor": "not-a-cursor"})
        bad_runs = await client.get("/threads/a/runs", params={"cursor": "x"})
        paged = (await client.get("/threads/a/runs", params={"limit": 1})).json()

    assert pages == [["a", "c"], ["b"]]
    assert error_of(bad, 422, "validation_error")["details"]["field"] == "cursor"
    error_of(bad_runs, 422, "validation_error")
    assert len(paged["runs"]) == 1
    assert paged["next_cursor"] == "1"


async def test_post_runs_refuses_what_a_thread_cannot_be(store_url: str) -> None:
    async with api_client(settings(store_url=store_url)) as client:
        done = await create(client, scripted(finish()))
        await wait_ended(client, done["id"])
        answers = {
            "thread_id": await client.post(
                "/runs", json=said("x", "t", previous_run_id=done["id"])
            ),
            "multitask": await client.post("/runs", json=scripted(finish(), multitask="enqueue")),
            "pattern": await client.post("/runs", json=said("x", "a b")),
            "face": await client.post("/runs", json=said("x", "ag-ui:abc")),
            "choice": await client.post("/runs", json=said("x", "t", multitask="later")),
        }
        missing = await client.get("/threads/nope")

    for field in ("thread_id", "multitask"):
        assert error_of(answers[field], 422, "validation_error")["details"]["field"] == field
    assert "previous_run_id" in answers["thread_id"].json()["error"]["message"]
    assert error_of(answers["face"], 422, "validation_error")["details"]["field"] == "thread_id"
    for name in ("pattern", "choice"):
        errors = error_of(answers[name], 422, "validation_error")["details"]["errors"]
        assert [e["field"] for e in errors] == [{"pattern": "thread_id"}.get(name, "multitask")]
    error_of(missing, 404, "not_found")


async def test_across_replicas_simultaneous_posts_on_an_idle_thread_make_one_run(
    redis_url: str,
) -> None:
    """Two replicas on one Redis: of POSTs sent to both at once, one makes the run; with
    `enqueue` every one is made, in one line, each started once the one before it ended."""
    async with (
        api_client(settings(store_url=redis_url)) as one,
        api_client(settings(store_url=redis_url)) as two,
    ):
        for n in range(3):
            answers = await asyncio.gather(
                *(c.post("/runs", json=hanging(thread_id=f"x{n}")) for c in (one, two, one, two))
            )
            codes = sorted(a.status_code for a in answers)
            assert codes == [202, 409, 409, 409], [a.text for a in answers]
            made = next(a.json() for a in answers if a.status_code == 202)
            assert await runs_of(two, f"x{n}") == [made["id"]]
            await cancel(one, made["id"])
        queued = await asyncio.gather(
            *(
                c.post("/runs", json=said((c is one and "one") or "two", "q", multitask="enqueue"))
                for c in (one, two, one, two)
            )
        )
        assert [a.status_code for a in queued] == [202] * 4, [a.text for a in queued]
        ended = [await wait_ended(one, a.json()["id"]) for a in queued]
        chain = await runs_of(two, "q")

    by_id = {r["id"]: r for r in ended}
    assert sorted(chain) == sorted(by_id)
    assert [by_id[i]["previous_run_id"] for i in chain] == [None, *chain[:-1]]
    for earlier, later in itertools.pairwise(chain):
        assert by_id[earlier]["ended_at"] <= by_id[later]["started_at"]

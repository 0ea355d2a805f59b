"""The service on the Redis store (a real redis-server): a scripted run to its end, streamed;
idempotent replays; listing; delete; /readyz; the start-up refusal without a shared token
secret; server-wide approval tools; steering a run still in the cluster's queue (its cap, and
a cancel logging what it held); a waiting run kept across a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.main import create_app
from tests.api.kit import (
    TERMINAL_EVENTS,
    cancel,
    create,
    error_of,
    finish,
    finishing,
    hanging,
    json_events,
    run_to_end,
    scripted,
    settings,
    sse,
    wait_ended,
    wait_for_status,
)
from tests.fakes.redis_server import RedisServer
from tests.fakes.service import api_client


async def test_a_scripted_run_goes_to_its_end_and_streams_on_the_redis_store(
    redis_url: str,
) -> None:
    body = scripted(
        {
            "content": "let me add",
            "tool_calls": [{"name": "calculator", "arguments": {"expression": "2+3"}}],
        },
        finish("5"),
        tools=["calculator"],
    )
    async with api_client(settings(store_url=redis_url)) as client:
        assert (await client.get("/readyz")).json() == {"status": "ready", "detail": None}
        run = await run_to_end(client, body)
        assert run["status"] == "completed"
        assert run["result"]["answer"] == "5"
        response, events = await sse(client, "GET", f"/runs/{run['id']}/events")
        assert response.status_code == 200
        assert [int(e.id or 0) for e in events] == list(range(1, len(events) + 1))
        types = [e.event for e in events]
        assert types[:2] == ["run.queued", "run.started"]
        assert "observation" in types
        assert types[-1] == "run.completed"
        assert sum(t in TERMINAL_EVENTS for t in types) == 1
        _, resumed = await sse(
            client, "GET", f"/runs/{run['id']}/events", headers={"Last-Event-ID": "3"}
        )
        assert [e.id for e in resumed] == [e.id for e in events[3:]]

        listed = (await client.get("/runs")).json()
        assert [r["id"] for r in listed["runs"]] == [run["id"]]
        assert (await client.delete(f"/runs/{run['id']}")).status_code == 204
        assert (await client.get(f"/runs/{run['id']}")).status_code == 404


async def test_an_idempotent_replay_names_the_same_run_on_the_redis_store(
    redis_url: str,
) -> None:
    headers = {"Idempotency-Key": "once"}
    async with api_client(settings(store_url=redis_url)) as client:
        first = await create(client, finishing("42"), headers)
        again = await client.post("/runs", json=finishing("42"), headers=headers)
        assert again.status_code in (200, 202), again.text
        assert again.json()["id"] == first["id"]


async def test_readyz_is_503_when_redis_stops(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as server:
        async with api_client(settings(store_url=server.url())) as client:
            assert (await client.get("/readyz")).status_code == 200
            server.stop()
            response = await client.get("/readyz")
            assert response.status_code == 503
            assert "Redis does not answer" in response.json()["detail"]


async def test_a_replica_outlives_a_redis_restart_that_lost_everything(tmp_path: Path) -> None:
    """Redis stops, then comes back empty (no persistence): the replica does not crash, its
    consumer groups are made again, and a new run goes to its end."""
    with RedisServer(tmp_path) as server:
        async with api_client(settings(store_url=server.url())) as client:
            assert (await run_to_end(client, finishing("before")))["status"] == "completed"
            server.stop()
            assert (await client.get("/readyz")).status_code == 503
            server.start_again()
            assert (await client.get("/readyz")).status_code == 200
            run = await run_to_end(client, finishing("after"))
            assert run["status"] == "completed"
            assert run["result"]["answer"] == "after"


def test_a_redis_backed_service_refuses_to_start_without_a_token_secret(redis_url: str) -> None:
    values = settings(store_url=redis_url).model_copy(update={"token_secret": None})
    with pytest.raises(ValueError, match="FINISHLINE_TOKEN_SECRET"):
        create_app(values)


async def test_server_wide_approval_tools_work_on_the_redis_store(redis_url: str) -> None:
    body = scripted(
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}, "id": "c1"}]},
        finish("42"),
        tools=["calculator"],
    )
    async with api_client(settings(store_url=redis_url, approval_tools=["calculator"])) as client:
        run = await create(client, body)
        waited = await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})
        assert waited.json()["status"] == "requires_action", waited.text
        decided = await client.post(
            f"/runs/{run['id']}/approvals", json={"decisions": [{"call_id": "c1", "approve": True}]}
        )
        assert decided.status_code == 202, decided.text
        assert (await wait_ended(client, run["id"]))["result"]["answer"] == "42"


async def test_a_message_to_a_run_still_in_the_cluster_queue_joins_when_it_starts(
    redis_url: str,
) -> None:
    async with api_client(settings(store_url=redis_url, max_concurrent_runs=1)) as client:
        running = await create(client, hanging())
        queued = await create(client, finishing("ok"))  # no free slot: nobody claimed it
        await wait_for_status(client, running["id"], "running")

        here = await client.post(f"/runs/{running['id']}/messages", json={"content": "hi"})
        early = await client.post(f"/runs/{queued['id']}/messages", json={"content": "first"})
        later = await client.post(f"/runs/{queued['id']}/messages", json={"content": "second"})

        assert here.status_code == 202, here.text
        assert (early.status_code, early.json()["status"]) == (202, "queued"), early.text
        assert later.status_code == 202, later.text
        await cancel(client, running["id"])
        assert (await wait_ended(client, queued["id"]))["status"] == "completed"
        events = (await json_events(client, queued["id"]))["events"]
        said = [(e["content"], e["delivered"]) for e in events if e["type"] == "user.message"]
        assert said == [("first", True), ("second", True)]
        kinds = [e["type"] for e in events]
        assert kinds.index("user.message") < kinds.index("llm.call")
        ended = await client.post(f"/runs/{queued['id']}/messages", json={"content": "late"})
        error_of(ended, 409, "run_already_ended")


async def test_past_the_pending_cap_a_message_is_429_and_a_cancel_logs_the_rest_undelivered(
    redis_url: str,
) -> None:
    values = settings(store_url=redis_url, max_concurrent_runs=1, max_pending_messages=1)
    async with api_client(values) as client:
        running = await create(client, hanging())
        queued = await create(client, hanging())
        await wait_for_status(client, running["id"], "running")

        kept = await client.post(f"/runs/{queued['id']}/messages", json={"content": "kept"})
        refused = await client.post(f"/runs/{queued['id']}/messages", json={"content": "more"})

        assert kept.status_code == 202, kept.text
        assert error_of(refused, 429, "too_many_messages")["details"]["cap"] == 1
        await cancel(client, queued["id"])
        events = (await json_events(client, queued["id"]))["events"]
        said = [(e["content"], e["delivered"]) for e in events if e["type"] == "user.message"]
        assert said == [("kept", False)]
        await cancel(client, running["id"])


async def test_a_waiting_run_stays_waiting_across_a_restart_and_resumes_on_a_decision(
    redis_url: str,
) -> None:
    body = scripted(
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}, "id": "c1"}]},
        finish("42"),
        tools=["calculator"],
        approval={"tools": ["calculator"]},
    )
    async with api_client(settings(store_url=redis_url)) as client:
        run = await create(client, body)
        waited = await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})
        assert waited.json()["status"] == "requires_action", waited.text
        said = await client.post(f"/runs/{run['id']}/messages", json={"content": "hurry"})
        assert said.status_code == 202, said.text

    async with api_client(settings(store_url=redis_url)) as client:  # a new replica
        again = (await client.get(f"/runs/{run['id']}")).json()
        assert again["status"] == "requires_action"
        assert [p["call_id"] for p in again["pending_approvals"]] == ["c1"]
        decided = await client.post(
            f"/runs/{run['id']}/approvals", json={"decisions": [{"call_id": "c1", "approve": True}]}
        )
        assert decided.status_code == 202, decided.text
        done = await wait_ended(client, run["id"])
        assert done["result"]["answer"] == "42"
        events = (await json_events(client, run["id"]))["events"]
        messages = [(e["content"], e["delivered"]) for e in events if e["type"] == "user.message"]
        assert messages == [("hurry", True)]

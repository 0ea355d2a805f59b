"""Human approval over the API (DESIGN §9): a run whose model calls a tool that needs approval
waits in `requires_action` with `pending_approvals`; POST /runs/{id}/approvals decides; the run
resumes from its checkpoint. On the memory, SQLite and Redis stores alike."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.api.kit import (
    TERMINAL_EVENTS,
    TERMINAL_STATUSES,
    create,
    error_of,
    finish,
    json_events,
    scripted,
    settings,
    sse,
)
from tests.fakes.service import api_client

UNKNOWN = "run_00000000000000000000000000"
K1 = {"Authorization": "Bearer first-key-6f1d2c9a8b7e"}
K2 = {"Authorization": "Bearer second-key-3a4b5c6d7e8f"}


def calc(expression: str, call_id: str) -> dict[str, Any]:
    return {"name": "calculator", "arguments": {"expression": expression}, "id": call_id}


def approving(*replies: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A run of the calculator tool whose calls wait for approval."""
    return scripted(*replies, tools=["calculator"], approval={"tools": ["calculator"]}, **fields)


ONE_CALL = ({"tool_calls": [calc("6*7", "c1")]}, finish("42"))
TWO_CALLS = ({"tool_calls": [calc("1+1", "c1"), calc("2+2", "c2")]}, finish("done"))


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each store (Redis: the session's real redis-server, flushed; one replica here, two
    in tests/e2e/test_replica_approvals.py)."""
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        return url
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


async def until_waiting(client: httpx.AsyncClient, run_id: str, **kw: Any) -> dict[str, Any]:
    """GET /wait answers once the run waits for a person."""
    response = await client.get(f"/runs/{run_id}/wait", params={"timeout_s": 10}, **kw)
    assert response.status_code == 200, response.text
    run = response.json()
    assert run["status"] == "requires_action", run
    return run


async def ended(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    """Follow the run's events to its terminal event (a follower stays connected while the
    run waits for a person), then read it."""
    with anyio.fail_after(10):
        response, events = await sse(client, "GET", f"/runs/{run_id}/events")
    assert response.status_code == 200, response.text
    assert events[-1].event in TERMINAL_EVENTS, events[-1]
    run = (await client.get(f"/runs/{run_id}")).json()
    assert run["status"] in TERMINAL_STATUSES, run
    return run


def types(events: dict[str, Any]) -> list[str]:
    return [e["type"] for e in events["events"]]


async def decide(
    client: httpx.AsyncClient, run_id: str, *decisions: dict[str, Any], **kw: Any
) -> httpx.Response:
    return await client.post(f"/runs/{run_id}/approvals", json={"decisions": list(decisions)}, **kw)


async def test_a_run_waits_then_an_approval_resumes_it_to_the_end(store_url: str) -> None:
    async with api_client(settings(store_url=store_url)) as client:
        run = await create(client, approving(*ONE_CALL))
        waiting = await until_waiting(client, run["id"])

        (pending,) = waiting["pending_approvals"]
        assert (pending["call_id"], pending["tool"], pending["arguments"]) == (
            "c1",
            "calculator",
            {"expression": "6*7"},
        )
        assert pending["requested_at"]
        listed = await client.get("/runs", params={"status": "requires_action"})
        assert [r["id"] for r in listed.json()["runs"]] == [run["id"]]

        response = await decide(client, run["id"], {"call_id": "c1", "approve": True})
        assert response.status_code == 202, response.text
        assert response.json()["pending_approvals"] == []
        done = await ended(client, run["id"])

        assert done["status"] == "completed"
        assert done["result"]["answer"] == "42"
        assert done["usage"]["llm_calls"] == 2
        events = await json_events(client, run["id"])
        seen = types(events)
        assert seen.count("run.started") == 2
        assert seen.index("approval.requested") < seen.index("approval.decided")
        (obs,) = [e for e in events["events"] if e["type"] == "observation"]
        assert (obs["call_id"], obs["content"], obs["is_error"]) == ("c1", "42", False)
        requested = next(e for e in events["events"] if e["type"] == "approval.requested")
        assert {k: requested[k] for k in ("call_id", "tool", "arguments")} == {
            "call_id": "c1",
            "tool": "calculator",
            "arguments": {"expression": "6*7"},
        }
        decided = next(e for e in events["events"] if e["type"] == "approval.decided")
        assert {k: decided[k] for k in ("call_id", "approved", "message")} == {
            "call_id": "c1",
            "approved": True,
            "message": None,
        }


async def test_a_rejection_reaches_the_model_as_an_error_with_the_message(store_url: str) -> None:
    async with api_client(settings(store_url=store_url)) as client:
        run = await create(client, approving(*ONE_CALL))
        await until_waiting(client, run["id"])

        response = await decide(
            client, run["id"], {"call_id": "c1", "approve": False, "message": "use 6*8"}
        )
        assert response.status_code == 202, response.text
        await ended(client, run["id"])

        events = await json_events(client, run["id"])
        (obs,) = [e for e in events["events"] if e["type"] == "observation"]
        assert obs["is_error"] is True
        assert "use 6*8" in obs["content"]


async def test_partial_decisions_keep_it_waiting_until_the_last() -> None:
    async with api_client(settings()) as client:
        run = await create(client, approving(*TWO_CALLS))
        waiting = await until_waiting(client, run["id"])
        assert [p["call_id"] for p in waiting["pending_approvals"]] == ["c1", "c2"]

        first = await decide(
            client,
            run["id"],
            {"call_id": "c2", "approve": True, "arguments": {"expression": "3+3"}},
        )
        assert first.status_code == 202, first.text
        assert first.json()["status"] == "requires_action"
        assert [p["call_id"] for p in first.json()["pending_approvals"]] == ["c1"]
        again = await decide(client, run["id"], {"call_id": "c2", "approve": True})
        error_of(again, 409, "run_not_waiting")

        await decide(client, run["id"], {"call_id": "c1", "approve": False})
        done = await ended(client, run["id"])

        assert done["status"] == "completed"
        events = await json_events(client, run["id"])
        observed = [
            (e["call_id"], e["is_error"], e["content"])
            for e in events["events"]
            if e["type"] == "observation"
        ]
        assert observed[0][:2] == ("c1", True)
        assert observed[1] == ("c2", False, "6")  # the person's edited arguments


async def test_refusals_of_post_approvals() -> None:
    async with api_client(
        settings(api_keys=[K1["Authorization"][7:], K2["Authorization"][7:]])
    ) as client:
        run = await create(client, approving(*ONE_CALL), headers=K1)
        await until_waiting(client, run["id"], headers=K1)
        url = run["id"]

        error_of(await decide(client, url, {"call_id": "c1", "approve": True}, headers=K2), 404)
        error_of(await decide(client, UNKNOWN, {"call_id": "c1", "approve": True}, headers=K1), 404)
        error_of(await decide(client, url, {"call_id": "nope", "approve": True}, headers=K1), 409)
        bad = await decide(
            client,
            url,
            {"call_id": "c1", "approve": True, "arguments": {"expression": 7}},
            headers=K1,
        )
        assert "decisions[0].arguments" in error_of(bad, 422)["message"]
        twice = await decide(
            client,
            url,
            {"call_id": "c1", "approve": True},
            {"call_id": "c1", "approve": False},
            headers=K1,
        )
        error_of(twice, 422)
        error_of(await decide(client, url, headers=K1), 422)  # no decision at all
        malformed = await client.post(
            f"/runs/{url}/approvals", json={"decisions": [{"call_id": "c1"}]}, headers=K1
        )
        error_of(malformed, 422)
        # none of the refusals decided anything
        still = (await client.get(f"/runs/{url}", headers=K1)).json()
        assert [p["call_id"] for p in still["pending_approvals"]] == ["c1"]


async def test_a_run_that_is_not_waiting_is_409() -> None:
    async with api_client(settings()) as client:
        run = await create(client, scripted(finish("ok")))
        await ended(client, run["id"])
        error_of(await decide(client, run["id"], {"call_id": "c1", "approve": True}), 409)


async def test_unknown_tool_names_in_approval_are_422() -> None:
    async with api_client(settings()) as client:
        response = await client.post(
            "/runs", json=scripted(finish(), tools=["calculator"], approval={"tools": ["rm_rf"]})
        )
        error = error_of(response, 422)
        assert error["details"]["field"] == "approval.tools"
        assert error["details"]["unknown"] == ["rm_rf"]


async def test_an_http_tool_may_require_approval() -> None:
    tool = {
        "name": "send_mail",
        "description": "Send a mail.",
        "parameters": {"type": "object", "properties": {"to": {"type": "string"}}},
        "url": "http://127.0.0.1:9/mail",
        "requires_approval": True,
    }
    body = scripted(
        {"tool_calls": [{"name": "send_mail", "arguments": {"to": "x"}, "id": "m1"}]},
        finish(),
        http_tools=[tool],
    )
    async with api_client(settings(http_tool_allow_hosts=["127.0.0.1"])) as client:
        run = await create(client, body)
        waiting = await until_waiting(client, run["id"])
        assert waiting["pending_approvals"][0]["tool"] == "send_mail"
        await decide(client, run["id"], {"call_id": "m1", "approve": False})
        assert (await ended(client, run["id"]))["status"] == "completed"


async def test_the_server_can_require_approval_for_a_registered_tool() -> None:
    body = scripted(*ONE_CALL, tools=["calculator"])
    async with api_client(settings(approval_tools=["calculator"])) as client:
        run = await create(client, body)
        await until_waiting(client, run["id"])


async def test_an_undecided_call_is_rejected_after_the_approval_timeout(store_url: str) -> None:
    body = approving(*ONE_CALL, settings={"approval_timeout_s": 0.2})
    async with api_client(settings(store_url=store_url)) as client:
        run = await create(client, body)
        await until_waiting(client, run["id"])

        done = await ended(client, run["id"])  # the timer requeues it; no person needed

        assert done["status"] == "completed"
        events = await json_events(client, run["id"])
        decided = next(e for e in events["events"] if e["type"] == "approval.decided")
        assert decided["approved"] is False
        assert decided["message"] == "no decision within 0.2 s"
        (obs,) = [e for e in events["events"] if e["type"] == "observation"]
        assert "no decision within 0.2 s" in obs["content"]


async def test_approval_timeout_is_capped_by_the_server() -> None:
    async with api_client(settings(approval_timeout_s=30, approval_timeout_limit_s=60)) as client:
        response = await client.post(
            "/runs", json=approving(*ONE_CALL, settings={"approval_timeout_s": 61})
        )
        assert error_of(response, 422)["details"]["field"] == "settings.approval_timeout_s"


async def test_cancel_and_delete_while_waiting(store_url: str) -> None:
    async with api_client(settings(store_url=store_url)) as client:
        run = await create(client, approving(*ONE_CALL))
        await until_waiting(client, run["id"])

        error_of(await client.delete(f"/runs/{run['id']}"), 409, "run_not_ended")
        response = await client.post(f"/runs/{run['id']}/cancel")
        assert response.status_code == 202, response.text
        assert response.json()["status"] == "cancelled"
        assert response.json()["pending_approvals"] == []
        error_of(await decide(client, run["id"], {"call_id": "c1", "approve": True}), 409)
        assert types(await json_events(client, run["id"]))[-1] == "run.cancelled"
        assert (await client.delete(f"/runs/{run['id']}")).status_code == 204


async def test_a_message_to_a_waiting_run_is_delivered_when_it_resumes(store_url: str) -> None:
    async with api_client(settings(store_url=store_url)) as client:
        run = await create(client, approving(*ONE_CALL))
        await until_waiting(client, run["id"])

        response = await client.post(f"/runs/{run['id']}/messages", json={"content": "hurry"})
        assert response.status_code == 202, response.text
        assert response.json()["status"] == "requires_action"  # a message decides nothing
        await decide(client, run["id"], {"call_id": "c1", "approve": True})
        await ended(client, run["id"])

        events = (await json_events(client, run["id"]))["events"]
        said = [e for e in events if e["type"] == "user.message"]
        assert [(e["content"], e["delivered"]) for e in said] == [("hurry", True)]
        kinds = [e["type"] for e in events]
        assert kinds.index("observation") < kinds.index("user.message")


async def test_a_follower_of_a_waiting_run_stays_connected_until_it_ends() -> None:
    async with api_client(settings()) as client:
        run = await create(client, approving(*ONE_CALL))
        await until_waiting(client, run["id"])
        seen: list[str] = []

        async def follow() -> None:
            async with client.stream("GET", f"/runs/{run['id']}/events") as response:
                async for line in response.aiter_lines():
                    if line.startswith("event: "):
                        seen.append(line[7:])

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await decide(client, run["id"], {"call_id": "c1", "approve": True})

        assert seen[-1] == "run.completed"
        assert "approval.decided" in seen


async def test_waiting_runs_hold_no_task_and_no_slot() -> None:
    count = 200
    async with api_client(settings(max_concurrent_runs=4, max_queued_runs=count)) as client:
        baseline = len(asyncio.all_tasks())
        ids = [(await create(client, approving(*ONE_CALL)))["id"] for _ in range(count)]
        for run_id in ids:
            await until_waiting(client, run_id)

        listed = await client.get("/runs", params={"status": "requires_action", "limit": 200})
        assert len(listed.json()["runs"]) == count
        assert len(asyncio.all_tasks()) <= baseline  # no task per waiting run
        # and no slot: a new run starts at once
        fresh = await create(client, scripted(finish("free")))
        assert (await ended(client, fresh["id"]))["result"]["answer"] == "free"

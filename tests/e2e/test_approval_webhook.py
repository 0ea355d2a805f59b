"""`webhook_events: ["requires_action"]`: the webhook is called when a run begins to wait
for a person (DESIGN §9), as well as (with "ended") once it ends; a run cancelled while it
waits is POSTed once, on every store."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.kit import LocalEndpoints, e2e_settings, start_run, wait_for_run
from tests.fakes.service import served_app

pytestmark = pytest.mark.e2e


def waiting_run(webhook: str, events: list[str]) -> dict[str, Any]:
    calc = {"name": "calculator", "arguments": {"expression": "6*7"}, "id": "c1"}
    finish = {"name": "task_finished", "arguments": {"answer": "42"}}
    return {
        "task": "6*7",
        "model": "scripted",
        "tools": ["calculator"],
        "approval": {"tools": ["calculator"]},
        "model_script": [{"tool_calls": [calc]}, {"tool_calls": [finish]}],
        "webhook": webhook,
        "webhook_events": events,
    }


async def test_the_webhook_hears_that_a_run_waits_and_then_that_it_ended() -> None:
    settings = e2e_settings(http_tool_allow_hosts=["127.0.0.1"], webhook_backoff_s=0.05)
    async with LocalEndpoints() as receiver, served_app(settings) as (_, client):
        url = receiver.url("/hook/both")
        run_id = await start_run(client, waiting_run(url, ["requires_action", "ended"]))
        await receiver.wait_for_hooks("both", 1)
        (waiting,) = receiver.hooks["both"]
        decided = await client.post(
            f"/runs/{run_id}/approvals", json={"decisions": [{"call_id": "c1", "approve": True}]}
        )
        assert decided.status_code == 202, decided.text
        await receiver.wait_for_hooks("both", 2)
        run = await wait_for_run(client, run_id, lambda r: bool(r["webhook"]["delivered"]))

    assert waiting["id"] == run_id
    assert waiting["status"] == "requires_action"
    assert [p["call_id"] for p in waiting["pending_approvals"]] == ["c1"]
    ended = receiver.hooks["both"][1]
    assert ended["status"] == "completed"
    assert len(run["webhook"]["attempts"]) == 1  # the end's; the wait's are only logged


async def test_requires_action_alone_is_not_called_at_the_end() -> None:
    settings = e2e_settings(http_tool_allow_hosts=["127.0.0.1"], webhook_backoff_s=0.05)
    async with LocalEndpoints() as receiver, served_app(settings) as (_, client):
        url = receiver.url("/hook/wait")
        run_id = await start_run(client, waiting_run(url, ["requires_action"]))
        await receiver.wait_for_hooks("wait", 1)
        await client.post(
            f"/runs/{run_id}/approvals", json={"decisions": [{"call_id": "c1", "approve": True}]}
        )
        run = await wait_for_run(client, run_id, lambda r: r["status"] == "completed")

    assert len(receiver.hooks["wait"]) == 1
    assert run["webhook"]["attempts"] == []


async def test_webhook_events_without_a_webhook_is_422() -> None:
    async with served_app(e2e_settings()) as (_, client):
        response = await client.post(
            "/runs", json={"task": "t", "webhook_events": ["requires_action"]}
        )
    assert response.status_code == 422
    assert response.json()["error"]["details"]["field"] == "webhook_events"


async def test_a_run_cancelled_while_it_waits_is_posted_to_its_webhook(store_url: str) -> None:
    settings = e2e_settings(
        store_url=store_url, http_tool_allow_hosts=["127.0.0.1"], webhook_backoff_s=0.05
    )
    async with LocalEndpoints() as receiver, served_app(settings) as (_, client):
        run_id = await start_run(client, waiting_run(receiver.url("/hook/cancel"), ["ended"]))
        await wait_for_run(client, run_id, lambda r: r["status"] == "requires_action")
        cancelled = await client.post(f"/runs/{run_id}/cancel")
        assert cancelled.json()["status"] == "cancelled", cancelled.text
        await receiver.wait_for_hooks("cancel", 1)
        run = await wait_for_run(client, run_id, lambda r: bool(r["webhook"]["delivered"]))

    ((hooked),) = receiver.hooks["cancel"]
    assert (hooked["id"], hooked["status"]) == (run_id, "cancelled")
    assert len(run["webhook"]["attempts"]) == 1

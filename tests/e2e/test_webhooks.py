"""A run's webhook: the run as JSON, POSTed to an allow-listed receiver once it ends, retried
with backoff, every attempt recorded on the run."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.kit import LocalEndpoints, e2e_settings, start_run, wait_for_run
from tests.fakes.service import served_app

pytestmark = pytest.mark.e2e


def scripted_run(answer: str, webhook: str) -> dict[str, Any]:
    finish = {"name": "task_finished", "arguments": {"answer": answer}}
    return {
        "task": f"say {answer}",
        "model": "scripted",
        "model_script": [{"tool_calls": [finish]}],
        "webhook": webhook,
        "metadata": {"ticket": answer},
    }


def delivered(run: dict[str, Any]) -> bool:
    return bool(run["webhook"]["delivered"])


async def test_the_webhook_receives_the_ended_run_once(store_url: str) -> None:
    settings = e2e_settings(
        store_url=store_url, http_tool_allow_hosts=["127.0.0.1"], webhook_backoff_s=0.05
    )
    async with LocalEndpoints() as receiver, served_app(settings) as (_, client):
        run_id = await start_run(client, scripted_run("42", receiver.url("/hook/ok")))
        await receiver.wait_for_hooks("ok", 1)
        run = await wait_for_run(client, run_id, delivered)

    (body,) = receiver.hooks["ok"]
    assert body["id"] == run_id
    assert body["status"] == "completed"
    assert body["result"] == {"answer": "42", "reason": "finished", "degraded": False}
    assert body["metadata"] == {"ticket": "42"}
    assert body["ended_at"] is not None
    (attempt,) = run["webhook"]["attempts"]
    assert attempt["status_code"] == 200
    assert attempt["error"] is None


async def test_a_failed_webhook_delivery_is_retried_and_both_attempts_are_on_the_run(
    store_url: str,
) -> None:
    settings = e2e_settings(
        store_url=store_url, http_tool_allow_hosts=["127.0.0.1"], webhook_backoff_s=0.05
    )
    async with LocalEndpoints() as receiver, served_app(settings) as (_, client):
        receiver.hook_statuses["flaky"] = [500]  # then 200
        run_id = await start_run(client, scripted_run("7", receiver.url("/hook/flaky")))
        await receiver.wait_for_hooks("flaky", 2)
        run = await wait_for_run(client, run_id, delivered)

    assert len(receiver.hooks["flaky"]) == 2
    assert all(body["id"] == run_id for body in receiver.hooks["flaky"])
    assert all(body["status"] == "completed" for body in receiver.hooks["flaky"])
    assert receiver.hook_ids["flaky"] == [f"{run_id}:ended"] * 2  # one dedupe key per webhook
    first, second = run["webhook"]["attempts"]
    assert first["status_code"] == 500
    assert "500" in first["error"]
    assert second["status_code"] == 200
    assert second["error"] is None
    assert run["webhook"]["delivered"] is True

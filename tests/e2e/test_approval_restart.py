"""A run waiting for a person survives its process (SQLite store): after a crash it is still
`requires_action` with its pending calls, an approval on the new process resumes it from its
checkpoint, and approval timeouts are watched again after a restart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from app.runs.backends import open_store
from app.runs.records import ApprovalDecision, RunStatus
from tests.e2e.kit import (
    assert_one_terminal_at_the_end,
    e2e_settings,
    follow,
    sqlite_url,
    start_run,
)
from tests.e2e.kit import stored_events as json_events
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeToolCall
from tests.fakes.process import AppProcess
from tests.fakes.service import served_app

pytestmark = pytest.mark.e2e

BODY = {
    "task": "6*7, with a person's approval",
    "tools": ["calculator"],
    "approval": {"tools": ["calculator"]},
}


def replies() -> list[FakeReply]:
    return [
        FakeReply(
            content="compute",
            tool_calls=[FakeToolCall("calculator", {"expression": "6*7"}, id="c1")],
        ),
        FakeReply.finish("42"),
    ]


async def waiting(client: httpx.AsyncClient, run_id: str) -> dict:
    response = await client.get(f"/runs/{run_id}/wait", params={"timeout_s": 10})
    run = response.json()
    assert run["status"] == "requires_action", run
    return run


async def test_a_waiting_run_survives_a_crash_and_resumes_on_approval(tmp_path: Path) -> None:
    async with FakeLLMServer(replies()) as llm:
        env = {
            "FINISHLINE_STORE_URL": sqlite_url(tmp_path),
            "FINISHLINE_LLM_BASE_URL": llm.base_url,
            "FINISHLINE_LOG_LEVEL": "INFO",
        }
        async with AppProcess(tmp_path, env) as first:
            async with httpx.AsyncClient(base_url=first.url(), timeout=10) as client:
                run_id = await start_run(client, BODY)
                before = await waiting(client, run_id)
            first.kill()
            assert await first.wait_exit(timeout_s=5) == -9

        async with (
            AppProcess(tmp_path, env) as second,
            httpx.AsyncClient(base_url=second.url(), timeout=10) as client,
        ):
            after = (await client.get(f"/runs/{run_id}")).json()
            listed = (await client.get("/runs?status=requires_action")).json()["runs"]
            decided = await client.post(
                f"/runs/{run_id}/approvals",
                json={"decisions": [{"call_id": "c1", "approve": True}]},
            )
            streamed = await follow(client, run_id)
            run = (await client.get(f"/runs/{run_id}")).json()
            events = await json_events(client, run_id)

    assert after["status"] == "requires_action"
    assert after["pending_approvals"] == before["pending_approvals"]
    assert [r["id"] for r in listed] == [run_id]
    assert decided.status_code == 202, decided.text
    assert run["status"] == "completed"
    assert run["result"]["answer"] == "42"
    assert len(llm.requests) == 2  # the first call is not repeated: it resumed from its checkpoint
    sent = llm.requests[1]["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": "c1", "content": "42"}
    types = [e["type"] for e in events]
    assert types.count("approval.requested") == types.count("approval.decided") == 1
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert_one_terminal_at_the_end(streamed, "run.completed")


async def test_approval_timeouts_are_watched_again_after_a_restart(tmp_path: Path) -> None:
    async with FakeLLMServer(replies()) as llm:
        settings = e2e_settings(llm, store_url=sqlite_url(tmp_path))
        async with served_app(settings) as (_, client):
            run_id = await start_run(client, BODY)
            await waiting(client, run_id)

        # while the service was down, the run's hour went by
        store = open_store(sqlite_url(tmp_path))
        await store.open()
        record = await store.get(run_id)
        assert record is not None
        assert record.approval is not None
        record.approval.waiting_since -= timedelta(hours=2)
        await store.save(record)
        await store.close()

        async with served_app(settings) as (_, client):
            streamed = await follow(client, run_id)  # no person decides: the timeout does
            run = (await client.get(f"/runs/{run_id}")).json()
            events = await json_events(client, run_id)

    assert run["status"] == "completed"
    decided = next(e for e in events if e["type"] == "approval.decided")
    assert (decided["approved"], decided["message"]) == (False, "no decision within 3600 s")
    observation = next(e for e in events if e["type"] == "observation")
    assert observation["is_error"] is True
    assert_one_terminal_at_the_end(streamed, "run.completed")


async def test_a_run_decided_but_not_yet_resumed_at_a_crash_resumes_after_restart(
    tmp_path: Path,
) -> None:
    async with FakeLLMServer(replies()) as llm:
        settings = e2e_settings(llm, store_url=sqlite_url(tmp_path))
        async with served_app(settings) as (_, client):
            run_id = await start_run(client, BODY)
            await waiting(client, run_id)

        # as a crash would leave it: every call decided, queued again, never started
        store = open_store(sqlite_url(tmp_path))
        await store.open()
        record = await store.get(run_id)
        assert record is not None
        assert record.approval is not None
        record.approval.decided.append(ApprovalDecision(call_id="c1", approved=True))
        record.status = RunStatus.QUEUED
        await store.save(record)
        await store.close()

        async with served_app(settings) as (_, client):
            streamed = await follow(client, run_id)
            run = (await client.get(f"/runs/{run_id}")).json()

    assert run["status"] == "completed"  # not failed "interrupted": it had nothing in flight
    assert run["result"]["answer"] == "42"
    assert_one_terminal_at_the_end(streamed, "run.completed")


async def test_time_queued_again_after_the_last_decision_counts_against_max_time(
    tmp_path: Path,
) -> None:
    async with FakeLLMServer(replies()) as llm:
        settings = e2e_settings(llm, store_url=sqlite_url(tmp_path))
        async with served_app(settings) as (_, client):
            run_id = await start_run(client, {**BODY, "settings": {"max_time_s": 60}})
            await waiting(client, run_id)

        # decided two hours ago, queued again, and the server stopped before it resumed
        store = open_store(sqlite_url(tmp_path))
        await store.open()
        record = await store.get(run_id)
        assert record is not None
        assert record.approval is not None
        record.approval.decided.append(ApprovalDecision(call_id="c1", approved=True))
        record.approval.requeued_at = datetime.now(UTC) - timedelta(hours=2)
        record.status = RunStatus.QUEUED
        await store.save(record)
        await store.close()

        async with served_app(settings) as (_, client):
            await follow(client, run_id)
            run = (await client.get(f"/runs/{run_id}")).json()

    assert run["status"] == "incomplete"
    assert run["result"]["reason"] == "timeout"

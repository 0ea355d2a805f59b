"""Runs and their events outlive the process that ran them (SQLite store): a clean restart
shows them unchanged, and a crash leaves no run "running" forever."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

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


async def test_a_restart_on_the_same_sqlite_file_keeps_runs_and_events(tmp_path: Path) -> None:
    replies = [
        FakeReply(
            content="compute", tool_calls=[FakeToolCall("calculator", {"expression": "6*7"})]
        ),
        FakeReply.finish("42"),
    ]
    async with FakeLLMServer(replies) as llm:
        settings = e2e_settings(llm, store_url=sqlite_url(tmp_path))
        async with served_app(settings) as (_, client):  # instance A
            run_id = await start_run(client, {"task": "6*7", "tools": ["calculator"]})
            streamed_a = await follow(client, run_id)
            run_a = (await client.get(f"/runs/{run_id}")).json()
            events_a = await json_events(client, run_id)
            listed_a = (await client.get("/runs")).json()

    async with served_app(settings) as (_, client):  # instance B, same file; the fake LLM is gone
        run_b = (await client.get(f"/runs/{run_id}")).json()
        events_b = await json_events(client, run_id)
        streamed_b = await follow(client, run_id)
        listed_b = (await client.get("/runs")).json()
        resumed = await follow(client, run_id, query="?after=3")

    assert run_a["status"] == "completed"
    assert run_b == run_a
    assert events_b == events_a
    assert [e.data for e in streamed_b] == [e.data for e in streamed_a] == events_a
    assert [e.id for e in streamed_b] == [str(n) for n in range(1, len(events_a) + 1)]
    assert listed_b == listed_a
    assert [e.data for e in resumed] == events_a[3:]
    assert_one_terminal_at_the_end(streamed_b, "run.completed")


def process_env(tmp_path: Path, llm: FakeLLMServer) -> dict[str, str]:
    return {
        "FINISHLINE_STORE_URL": sqlite_url(tmp_path),
        "FINISHLINE_LLM_BASE_URL": llm.base_url,
        "FINISHLINE_MAX_CONCURRENT_RUNS": "1",
        "FINISHLINE_LOG_LEVEL": "INFO",
    }


async def test_a_run_killed_with_its_process_is_failed_interrupted_after_restart(
    tmp_path: Path,
) -> None:
    async with FakeLLMServer([FakeReply.finish("never", hang=True)]) as llm:
        env = process_env(tmp_path, llm)
        async with AppProcess(tmp_path, env) as first:
            async with httpx.AsyncClient(base_url=first.url(), timeout=10) as client:
                run_id = await start_run(client, {"task": "hang"})
                await llm.wait_for_requests(1)  # running, in its LLM call
                running = (await client.get(f"/runs/{run_id}")).json()
                assert running["status"] == "running"
                queued = (await client.post("/runs", json={"task": "wait"})).json()
                assert queued["status"] == "queued"  # one run at a time on this server
            first.kill()
            assert await first.wait_exit(timeout_s=5) == -9

        async with (
            AppProcess(tmp_path, env) as second,
            httpx.AsyncClient(base_url=second.url(), timeout=10) as client,
        ):
            run = (await client.get(f"/runs/{run_id}")).json()
            events = await json_events(client, run_id)
            streamed = await follow(client, run_id)
            active = (await client.get("/runs?status=queued,running")).json()["runs"]
            queued_after = (await client.get(f"/runs/{queued['id']}")).json()
            queued_events = [e["type"] for e in await json_events(client, queued["id"])]
            interrupted = {
                e["run_id"] for e in second.log_events() if e["event"] == "run_interrupted"
            }

    assert run["status"] == "failed"
    assert run["error"]["type"] == "interrupted"
    assert run["result"]["reason"] == "error"
    assert run["ended_at"] is not None
    assert active == []
    assert interrupted == {run_id, queued["id"]}
    assert queued_after["status"] == "failed"
    assert queued_after["error"]["type"] == "interrupted"
    assert queued_events == ["run.queued", "run.failed"]
    types = [e["type"] for e in events]
    assert types[:3] == ["run.queued", "run.started", "step.started"]
    assert types[-1] == "run.failed"
    assert sum(t.startswith("run.") and t not in ("run.queued", "run.started") for t in types) == 1
    assert events[-1]["error"]["type"] == "interrupted"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e.data for e in streamed] == events

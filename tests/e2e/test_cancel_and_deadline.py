"""Cancelling and the deadline interrupt in-flight work at once (DESIGN §1), seen over HTTP:
a hanging tool call, a hanging LLM call, and a run whose model never answers."""

from __future__ import annotations

import time
from datetime import datetime

import anyio
import pytest

from tests.e2e.kit import (
    LocalEndpoints,
    assert_one_terminal_at_the_end,
    e2e_settings,
    follow,
    http_tool,
    start_run,
)
from tests.fakes.llm_server import FakeLLMServer, FakeReply
from tests.fakes.service import SSE, served_app

pytestmark = pytest.mark.e2e

PROMPT_S = 2.0
"""How long a cancel may take to answer with the run ended."""


async def test_cancel_interrupts_a_hanging_tool_call_at_once() -> None:
    reply = FakeReply.call("slow_lookup", {"key": "x"})
    async with (
        LocalEndpoints() as endpoints,
        FakeLLMServer([reply]) as llm,
        served_app(e2e_settings(llm, http_tool_allow_hosts=["127.0.0.1"])) as (_, client),
        anyio.create_task_group() as tg,
    ):
        body = {
            "task": "look x up",
            "http_tools": [http_tool("slow_lookup", endpoints.url("/hang"))],
            "settings": {"tool_timeout_s": 60},
        }
        run_id = await start_run(client, body)
        streamed: list[SSE] = []

        async def follow_stream() -> None:
            streamed.extend(await follow(client, run_id))

        tg.start_soon(follow_stream)
        with anyio.fail_after(5):
            await endpoints.hang_arrived.wait()  # the tool call is in flight

        started = time.perf_counter()
        response = await client.post(f"/runs/{run_id}/cancel")
        elapsed = time.perf_counter() - started

        assert response.status_code == 202, response.text
        assert elapsed < PROMPT_S
        assert response.json()["status"] == "cancelled"
        assert response.json()["result"]["reason"] == "cancelled"
        with anyio.fail_after(PROMPT_S):
            await endpoints.hang_left.wait()  # the HTTP call itself was torn down

    assert_one_terminal_at_the_end(streamed, "run.cancelled")
    (action,) = [e for e in streamed if e.event == "action"]
    (observation,) = [e for e in streamed if e.event == "observation"]
    assert observation.data["call_id"] == action.data["call_id"]
    assert observation.data["is_error"] is True
    assert "interrupted" in observation.data["content"]
    assert int(action.id or 0) < int(observation.id or 0) < int(streamed[-1].id or 0)


async def test_cancel_interrupts_a_hanging_llm_call_at_once() -> None:
    async with (
        FakeLLMServer([FakeReply.finish("never", hang=True)]) as llm,
        served_app(e2e_settings(llm)) as (_, client),
        anyio.create_task_group() as tg,
    ):
        run_id = await start_run(client, {"task": "wait for the model"})
        streamed: list[SSE] = []

        async def follow_stream() -> None:
            streamed.extend(await follow(client, run_id))

        tg.start_soon(follow_stream)
        await llm.wait_for_requests(1)  # the LLM call is in flight

        started = time.perf_counter()
        response = await client.post(f"/runs/{run_id}/cancel")
        elapsed = time.perf_counter() - started

        assert response.status_code == 202, response.text
        assert elapsed < PROMPT_S
        assert response.json()["status"] == "cancelled"
        again = await client.post(f"/runs/{run_id}/cancel")
        assert again.status_code == 409

    assert_one_terminal_at_the_end(streamed, "run.cancelled")
    assert "llm.call" not in [e.event for e in streamed]


async def test_the_deadline_ends_a_run_whose_model_hangs_within_its_wall_time() -> None:
    # max_time_s + final_answer_timeout_s = 2 s, both the step's call and the final call hang
    async with (
        FakeLLMServer(handler=lambda _: FakeReply(hang=True)) as llm,
        served_app(e2e_settings(llm)) as (_, client),
    ):
        started = time.perf_counter()
        body = {
            "task": "never answered",
            "settings": {"max_time_s": 1, "final_answer_timeout_s": 1},
        }
        run_id = await start_run(client, body)
        events = await follow(client, run_id)
        elapsed = time.perf_counter() - started
        run = (await client.get(f"/runs/{run_id}")).json()

    assert 1.0 <= elapsed < 2.0 + 1.0
    ran_for = datetime.fromisoformat(run["ended_at"]) - datetime.fromisoformat(run["started_at"])
    assert ran_for.total_seconds() < 2.0 + 0.5
    assert run["status"] == "incomplete"
    assert run["result"] == {"answer": None, "reason": "timeout", "degraded": False}
    assert_one_terminal_at_the_end(events, "run.incomplete")
    interventions = [e.data["kind"] for e in events if e.event == "intervention"]
    assert interventions == ["timeout"]
    # the step's call had the tools; the degraded final call had none
    assert len(llm.requests) == 2
    assert llm.requests[0].get("tools")
    assert not llm.requests[1].get("tools")


async def test_the_deadline_interrupts_a_hanging_tool_call_and_asks_for_a_best_answer() -> None:
    replies = [FakeReply.call("slow_lookup", {"key": "x"}), FakeReply(content="best guess: 42")]
    async with (
        LocalEndpoints() as endpoints,
        FakeLLMServer(replies) as llm,
        served_app(e2e_settings(llm, http_tool_allow_hosts=["127.0.0.1"])) as (_, client),
    ):
        started = time.perf_counter()
        body = {
            "task": "look x up",
            "http_tools": [http_tool("slow_lookup", endpoints.url("/hang"))],
            "settings": {"max_time_s": 1, "final_answer_timeout_s": 1, "tool_timeout_s": 30},
        }
        run_id = await start_run(client, body)
        events = await follow(client, run_id)
        elapsed = time.perf_counter() - started
        with anyio.fail_after(PROMPT_S):
            await endpoints.hang_left.wait()  # the tool's HTTP call was torn down

    assert 1.0 <= elapsed < 2.0 + 1.0
    assert_one_terminal_at_the_end(events, "run.incomplete")
    assert events[-1].data["result"] == {
        "answer": "best guess: 42",
        "reason": "timeout",
        "degraded": True,
    }
    (observation,) = [e for e in events if e.event == "observation"]
    assert observation.data["is_error"] is True
    assert "interrupted" in observation.data["content"]
    assert not llm.requests[1].get("tools")

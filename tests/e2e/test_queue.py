"""The concurrency cap and the bounded FIFO queue, over the real server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.e2e.kit import e2e_settings, follow, start_run, stored_events
from tests.fakes.llm_server import FakeLLMServer, FakeReply
from tests.fakes.service import served_app

pytestmark = pytest.mark.e2e


class Gates:
    """An LLM handler that holds each run's call until the test opens that run's gate; the
    run is told apart by its task (the user message)."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}

    def gate(self, task: str) -> asyncio.Event:
        return self.gates.setdefault(task, asyncio.Event())

    async def __call__(self, body: dict[str, Any]) -> FakeReply:
        task = task_of(body)
        await self.gate(task).wait()
        return FakeReply.finish(f"done: {task}")

    def open_all(self) -> None:
        for gate in self.gates.values():
            gate.set()


def task_of(request: dict[str, Any]) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "user")


async def test_runs_past_the_cap_queue_in_fifo_order_and_a_full_queue_answers_429() -> None:
    gates = Gates()
    async with (
        FakeLLMServer(handler=gates) as llm,
        served_app(e2e_settings(llm, max_concurrent_runs=2, max_queued_runs=2)) as (_, client),
    ):
        try:
            ids = {}
            for n in (1, 2):
                ids[n] = await start_run(client, {"task": f"task {n}"})
            await llm.wait_for_requests(2)  # both slots busy, each held in its LLM call

            for n in (3, 4):
                response = await client.post("/runs", json={"task": f"task {n}"})
                assert response.status_code == 202, response.text
                assert response.json()["status"] == "queued"
                ids[n] = response.json()["id"]
            for n in (3, 4):
                run = (await client.get(f"/runs/{ids[n]}")).json()
                assert run["status"] == "queued"
                assert run["started_at"] is None
                assert [e["type"] for e in await stored_events(client, ids[n])] == ["run.queued"]

            full = await client.post("/runs", json={"task": "task 5"})
            assert full.status_code == 429, full.text
            assert int(full.headers["Retry-After"]) > 0
            assert full.json()["error"]["type"] == "queue_full"
            listed = (await client.get("/runs")).json()["runs"]
            assert len(listed) == 4  # the refused run was not stored

            # one slot frees: the oldest queued run (3) starts, 4 keeps waiting
            gates.gate("task 1").set()
            assert (await follow(client, ids[1]))[-1].event == "run.completed"
            requests = await llm.wait_for_requests(3)
            assert task_of(requests[2]) == "task 3"
            assert (await client.get(f"/runs/{ids[4]}")).json()["status"] == "queued"

            gates.gate("task 2").set()
            requests = await llm.wait_for_requests(4)
            assert task_of(requests[3]) == "task 4"

            gates.gate("task 3").set()
            gates.gate("task 4").set()
            for n in (2, 3, 4):
                events = await follow(client, ids[n])
                assert events[-1].event == "run.completed"
                assert events[-1].data["result"]["answer"] == f"done: task {n}"
        finally:
            gates.open_all()  # nothing stays held in the fake server
    assert len(llm.requests) == 4

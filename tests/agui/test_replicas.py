"""AG-UI across replicas (DESIGN §16 with §8): two uvicorn processes on one real redis-server.
A thread started on one replica is continued and its interrupt resumed on the other: the
thread, the waiting run and its turns are in the store, not in a process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.agui.kit import agent_input, protocol_event, scripted, user
from tests.api.kit import finish
from tests.e2e.test_replicas import replicas
from tests.fakes.service import SSE, read_sse

pytestmark = pytest.mark.e2e

BOUND_S = 60  # a failure bound; a turn takes well under a second


async def whole(client: httpx.AsyncClient, body: dict[str, Any]) -> list[SSE]:
    with anyio.fail_after(BOUND_S):  # generous: two servers on a loaded 2-core machine
        async with client.stream("POST", "/ag-ui", json=body, timeout=BOUND_S) as response:
            assert response.status_code == 200, await response.aread()
            events = [event async for event in read_sse(response)]
    for event in events:
        protocol_event(event.data)
    return events


async def test_a_thread_moves_between_replicas(tmp_path: Path, redis_url: str) -> None:
    call = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}, "id": "c1"}]}
    props = scripted(call, finish("42"), tools=["calculator"], approval={"tools": ["calculator"]})
    async with replicas(tmp_path, redis_url) as [(_, first), (_, second)]:
        asked = await whole(first, agent_input(user("6 times 7?"), finishline=props))
        resumed = await whole(
            second,
            agent_input(
                user("6 times 7?"),
                run="r2",
                resume=[{"interruptId": "c1", "status": "resolved", "payload": {"approve": True}}],
            ),
        )
        again = await whole(
            first,
            agent_input(user("and again?", id="u2"), run="r3", finishline=scripted(finish("yes"))),
        )
        follow_up = (await second.get(f"/runs/{again[-1].data['result']['run_id']}")).json()

    assert asked[-1].data["outcome"]["type"] == "interrupt"
    run_id = asked[-1].data["result"]["run_id"]
    assert resumed[-1].data["result"] == {
        "run_id": run_id,
        "answer": "42",
        "output": None,
        "reason": "finished",
        "degraded": False,
        "status": "completed",
    }
    assert follow_up["previous_run_id"] == run_id

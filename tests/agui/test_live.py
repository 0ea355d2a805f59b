"""The stream over real HTTP (uvicorn on loopback; ASGITransport would buffer it): SSE ids are
finishline's seqs, the same key/threadId/runId re-attach to the run (never a second one) and
Last-Event-ID replays after a seq, a dropped stream leaves the run going unless
`on_disconnect: cancel`, keep-alives flow while nothing happens (DESIGN §16)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from app.main import create_app
from tests.agui.kit import agent_input, protocol_event, scripted, user
from tests.api.kit import error_of, finish, settings
from tests.fakes.service import SSE, read_sse
from tests.fakes.serving import Served

pytestmark = pytest.mark.e2e

BOUND_S = 20
SLOW = {"content": "thinking it over", "delay_s": 600}  # running until cancelled


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with (
        Served(create_app(settings(sse_ping_s=0.2)), lifespan="on") as served,
        httpx.AsyncClient(base_url=served.url(), timeout=BOUND_S) as http,
    ):
        yield http


async def frames_until(
    client: httpx.AsyncClient,
    body: dict[str, Any],
    stop: str | None = None,
    headers: dict[str, str] | None = None,
) -> list[SSE]:
    """The stream's events (each checked with the protocol's models) until one of type
    `stop` (then the connection is dropped) or the stream's end."""
    seen: list[SSE] = []
    with anyio.fail_after(BOUND_S):
        async with client.stream("POST", "/ag-ui", json=body, headers=headers) as response:
            assert response.status_code == 200, await response.aread()
            async for event in read_sse(response):
                protocol_event(event.data)
                seen.append(event)
                if stop is not None and stop in (event.data["type"], event.data.get("name")):
                    break
    return seen


async def status_of(client: httpx.AsyncClient, run_id: str) -> str:
    response = await client.get(f"/runs/{run_id}")
    assert response.status_code == 200, response.text
    status: str = response.json()["status"]
    return status


async def test_frames_carry_the_seq_of_the_event_they_came_from(client: httpx.AsyncClient) -> None:
    props = scripted(
        {
            "content": "adding",
            "tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}],
        },
        finish("2"),
        tools=["calculator"],
    )
    frames = await frames_until(client, agent_input(finishline=props))
    run_id = frames[0].data["metadata"]["finishline"]["run_id"]
    page = await client.get(f"/runs/{run_id}/events", headers={"Accept": "application/json"})

    ids = [int(f.id or "-1") for f in frames]
    assert ids == sorted(ids)
    assert ids[0] == 0  # RUN_STARTED: before the first event
    assert set(ids) - {0} == {e["seq"] for e in page.json()["events"]}  # each event is shown


async def test_the_same_turn_again_re_attaches_and_last_event_id_replays_after(
    client: httpx.AsyncClient,
) -> None:
    body = agent_input(finishline=scripted(SLOW))
    first = await frames_until(client, body, stop="finishline.run.started")
    run_id = first[0].data["metadata"]["finishline"]["run_id"]
    assert await status_of(client, run_id) == "running"  # the dropped stream left it going

    again = await frames_until(client, body, stop="finishline.run.started")
    later = await frames_until(client, body, stop="STEP_STARTED", headers={"Last-Event-ID": "2"})
    await client.post(f"/runs/{run_id}/cancel")
    ended = await frames_until(client, body, headers={"Last-Event-ID": "3"})
    runs = (await client.get("/runs")).json()["runs"]

    assert [r["id"] for r in runs] == [run_id]  # never a second run
    assert again[0].data["metadata"]["finishline"]["run_id"] == run_id
    assert [f.id for f in again] == [f.id for f in first]  # from the start again
    assert [f.data["type"] for f in again] == [f.data["type"] for f in first]
    assert later[0].id == "2"
    assert later[0].data["type"] == "RUN_STARTED"
    assert all(int(f.id or 0) > 2 for f in later[1:])
    assert [int(f.id or 0) > 3 for f in ended[1:]] == [True] * (len(ended) - 1)
    assert ended[-1].data["type"] == "RUN_FINISHED"
    assert ended[-1].data["outcome"] == {"type": "cancelled"}


async def test_run_started_is_sent_at_once_when_no_event_follows_yet(
    client: httpx.AsyncClient,
) -> None:
    """RUN_STARTED goes out with the events stored already when there are some, and alone,
    without waiting for the next event, when there are none (a quiet run re-attached at its
    last event)."""
    body = agent_input(finishline=scripted(SLOW))
    first = await frames_until(client, body, stop="STEP_STARTED")
    run_id = first[0].data["metadata"]["finishline"]["run_id"]
    assert await status_of(client, run_id) == "running"  # in its LLM call, for 600 s
    page = await client.get(f"/runs/{run_id}/events", headers={"Accept": "application/json"})
    last = str(page.json()["events"][-1]["seq"])
    started = await frames_until(client, body, stop="RUN_STARTED", headers={"Last-Event-ID": last})
    await client.post(f"/runs/{run_id}/cancel")

    assert [(f.id, f.data["type"]) for f in started] == [(last, "RUN_STARTED")]


async def test_a_dropped_stream_cancels_the_run_when_asked_to(client: httpx.AsyncClient) -> None:
    body = agent_input(finishline=scripted(SLOW, on_disconnect="cancel"))
    frames = await frames_until(client, body, stop="finishline.run.started")
    run_id = frames[0].data["metadata"]["finishline"]["run_id"]
    waited = await client.get(f"/runs/{run_id}/wait", params={"timeout_s": 10})

    assert waited.json()["status"] == "cancelled"


async def test_keep_alives_flow_while_the_run_is_quiet(client: httpx.AsyncClient) -> None:
    body = agent_input(finishline=scripted(SLOW))
    pings = 0
    with anyio.fail_after(BOUND_S):
        async with client.stream("POST", "/ag-ui", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith(":"):
                    pings += 1
                    if pings == 2:
                        break
    run_id = (await client.get("/runs")).json()["runs"][0]["id"]
    await client.post(f"/runs/{run_id}/cancel")

    assert pings == 2


async def test_a_thread_whose_run_is_still_going_takes_no_new_run(
    client: httpx.AsyncClient,
) -> None:
    await frames_until(
        client, agent_input(finishline=scripted(SLOW)), stop="finishline.run.started"
    )
    response = await client.post(
        "/ag-ui", json=agent_input(user("next"), run="r2", finishline=scripted(finish()))
    )
    run_id = (await client.get("/runs")).json()["runs"][0]["id"]
    await client.post(f"/runs/{run_id}/cancel")

    assert error_of(response, 409, "run_not_ended")["details"]["run_id"] == run_id


async def test_a_resumed_stream_dropped_cancels_the_run_when_that_turn_asks(
    client: httpx.AsyncClient,
) -> None:
    call = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}, "id": "c1"}]}
    props = scripted(call, SLOW, tools=["calculator"], approval={"tools": ["calculator"]})
    asked = await frames_until(client, agent_input(finishline=props))
    run_id = asked[-1].data["result"]["run_id"]
    answer = {"interruptId": "c1", "status": "resolved", "payload": {"approve": True}}
    body = agent_input(run="r2", resume=[answer], finishline={"on_disconnect": "cancel"})
    await frames_until(client, body, stop="TOOL_CALL_RESULT")
    waited = await client.get(f"/runs/{run_id}/wait", params={"timeout_s": 10})

    assert asked[-1].data["outcome"]["type"] == "interrupt"
    assert waited.json()["status"] == "cancelled"

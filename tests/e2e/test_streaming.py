"""A run's events over real SSE (uvicorn on loopback): live while the run goes on, resumable
after a dropped connection, kept alive through silence, tokens as they stream, and in order
while tool calls run in parallel."""

from __future__ import annotations

import anyio
import pytest

from tests.e2e.kit import (
    LocalEndpoints,
    assert_one_terminal_at_the_end,
    e2e_settings,
    follow,
    http_tool,
    seqs,
    start_run,
    stored_events,
)
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeToolCall
from tests.fakes.service import SSE, read_sse, served_app, sse_events

pytestmark = pytest.mark.e2e


def calculator_call(
    expression: str, content: str | None = None, *, hang: bool = False
) -> FakeReply:
    return FakeReply(
        content=content,
        tool_calls=[FakeToolCall("calculator", {"expression": expression})],
        hang=hang,
    )


async def test_sse_delivers_thought_action_and_observation_before_the_run_ends(
    store_url: str,
) -> None:
    # the 2nd LLM reply is held until the test has seen the 1st observation over SSE: a
    # stream that buffered until the end would never show it, and the test would time out
    replies = [calculator_call("2+3", "I will add them."), FakeReply.finish("5", hang=True)]
    async with (
        FakeLLMServer(replies) as llm,
        served_app(e2e_settings(llm, store_url=store_url)) as (_, client),
    ):
        run_id = await start_run(client, {"task": "add 2 and 3", "tools": ["calculator"]})
        seen: list[SSE] = []
        with anyio.fail_after(10):
            async for event in sse_events(client, f"/runs/{run_id}/events"):
                seen.append(event)
                if event.event == "observation":
                    run = (await client.get(f"/runs/{run_id}")).json()
                    assert run["status"] == "running"
                    await llm.wait_for_requests(2)
                    llm.release()
        # the server closed the stream after the terminal event (the loop ended by itself)

    types = [e.event for e in seen]
    live = types[: types.index("observation") + 1]
    assert live.index("thought") < live.index("action") < live.index("observation")
    assert seen[types.index("thought")].data["text"] == "I will add them."
    assert seen[types.index("observation")].data["content"] == "5"
    assert seqs(seen) == list(range(1, len(seen) + 1))
    assert [e.data["seq"] for e in seen] == seqs(seen)
    assert_one_terminal_at_the_end(seen, "run.completed")
    assert seen[-1].data["result"]["answer"] == "5"


async def test_reconnecting_with_last_event_id_mid_run_loses_and_repeats_nothing(
    store_url: str,
) -> None:
    # step 1 runs, the client drops; step 2 runs while it is away; it reconnects while the
    # run is held at step 3 (replay from the store, then live), and the run then finishes
    replies = [
        calculator_call("1+1", "first"),
        calculator_call("2*3", "second", hang=True),
        FakeReply.finish("done", hang=True),
    ]
    async with (
        FakeLLMServer(replies) as llm,
        served_app(e2e_settings(llm, store_url=store_url)) as (_, client),
    ):
        run_id = await start_run(client, {"task": "compute", "tools": ["calculator"]})
        first: list[SSE] = []
        with anyio.fail_after(10):
            async for event in sse_events(client, f"/runs/{run_id}/events"):
                first.append(event)
                if event.event == "observation":
                    break  # drop the connection mid-run
            await llm.wait_for_requests(2)
            llm.release()  # step 2 goes on with nobody listening
            await llm.wait_for_requests(3)  # and the run waits at step 3

        last_id = first[-1].id
        assert last_id is not None
        second: list[SSE] = []
        with anyio.fail_after(10):
            headers = {"Last-Event-ID": last_id}
            async for event in sse_events(client, f"/runs/{run_id}/events", headers=headers):
                second.append(event)
                if event.event == "observation":  # step 2's, replayed: now go live
                    llm.release()
        stored = await stored_events(client, run_id)

    both = first + second
    assert seqs(both) == list(range(1, len(stored) + 1))
    assert [e.data for e in both] == stored
    assert [e.data["content"] for e in both if e.event == "observation"] == ["2", "6"]
    assert_one_terminal_at_the_end(both, "run.completed")


async def test_a_silent_run_keeps_its_stream_alive_with_ping_comments() -> None:
    async with (
        FakeLLMServer([FakeReply.finish("late", hang=True)]) as llm,
        served_app(e2e_settings(llm, sse_ping_s=0.2)) as (_, client),
    ):
        run_id = await start_run(client, {"task": "think for a long time"})
        await llm.wait_for_requests(1)  # from here on the run emits nothing
        pings = 0
        async with client.stream("GET", f"/runs/{run_id}/events") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            with anyio.fail_after(5):
                async for line in response.aiter_lines():
                    if line.startswith(": ping"):
                        pings += 1
                        if pings == 2:
                            break
        llm.release()
        events = await follow(client, run_id)
    assert pings == 2
    assert_one_terminal_at_the_end(events, "run.completed")


async def test_token_events_stream_before_the_thought_and_add_up_to_it() -> None:
    deltas = ["The ", "sum ", "is ", "5."]
    reply = FakeReply(content=deltas, tool_calls=[FakeToolCall("task_finished", {"answer": "5"})])
    async with (
        FakeLLMServer([reply]) as llm,
        served_app(e2e_settings(llm)) as (_, client),
    ):
        run_id = await start_run(client, {"task": "add", "settings": {"stream_tokens": True}})
        events = await follow(client, run_id)

    assert llm.requests[0]["stream"] is True
    types = [e.event for e in events]
    thought = types.index("thought")
    tokens = [e for e in events if e.event == "token"]
    assert len(tokens) >= 2
    assert all(int(t.id or 0) < int(events[thought].id or 0) for t in tokens)
    assert "".join(t.data["delta"] for t in tokens) == events[thought].data["text"]
    assert events[thought].data["text"] == "The sum is 5."
    assert seqs(events) == list(range(1, len(events) + 1))
    assert_one_terminal_at_the_end(events, "run.completed")


async def test_parallel_tool_calls_are_logged_in_order_each_observation_after_its_action(
    store_url: str,
) -> None:
    # the endpoint answers only once all three calls are in at once: sequential calls would
    # time out instead (tool_timeout_s) and the observations would be errors
    calls = [FakeToolCall("lookup", {"key": key}, id=f"call_{key}") for key in "abc"]
    replies = [FakeReply(tool_calls=calls), FakeReply.finish("a, b and c")]
    async with LocalEndpoints(parties=3) as endpoints, FakeLLMServer(replies) as llm:
        settings = e2e_settings(llm, store_url=store_url, http_tool_allow_hosts=["127.0.0.1"])
        async with served_app(settings) as (_, client):
            body = {
                "task": "look up a, b and c",
                "http_tools": [http_tool("lookup", endpoints.url("/barrier"))],
                "settings": {"tool_timeout_s": 5},
            }
            run_id = await start_run(client, body)
            events = await follow(client, run_id)

    assert sorted(endpoints.barrier_calls) == ["a", "b", "c"]
    assert seqs(events) == list(range(1, len(events) + 1))
    actions = {e.data["call_id"]: int(e.id or 0) for e in events if e.event == "action"}
    observations = {e.data["call_id"]: e for e in events if e.event == "observation"}
    assert set(observations) == {"call_a", "call_b", "call_c"}
    for call_id, observation in observations.items():
        assert actions[call_id] < int(observation.id or 0)
        assert not observation.data["is_error"], observation.data
        assert observation.data["content"] == f"value of {call_id[-1]}"
    # the model gets the results in call order, whatever order they ended in
    tool_messages = [m for m in llm.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_a", "call_b", "call_c"]
    assert_one_terminal_at_the_end(events, "run.completed")


async def test_stream_post_answers_with_the_live_stream_itself() -> None:
    replies = [calculator_call("4*4"), FakeReply.finish("16", hang=True)]
    async with (
        FakeLLMServer(replies) as llm,
        served_app(e2e_settings(llm)) as (_, client),
    ):
        body = {"task": "square 4", "tools": ["calculator"], "stream": True}
        seen: list[SSE] = []
        with anyio.fail_after(10):
            async with client.stream("POST", "/runs", json=body) as response:
                assert response.status_code == 200
                async for event in read_sse(response):
                    seen.append(event)
                    if event.event == "observation":
                        await llm.wait_for_requests(2)
                        llm.release()
    assert seqs(seen) == list(range(1, len(seen) + 1))
    assert seen[0].event == "run.queued"
    assert_one_terminal_at_the_end(seen, "run.completed")


async def test_a_dropped_stream_post_cancels_its_run_when_on_disconnect_is_cancel() -> None:
    async with (
        FakeLLMServer([FakeReply.finish("never", hang=True)]) as llm,
        served_app(e2e_settings(llm)) as (_, client),
    ):
        body = {"task": "hang", "stream": True, "on_disconnect": "cancel"}
        with anyio.fail_after(10):
            async with client.stream("POST", "/runs", json=body) as response:
                run_path = response.headers["Content-Location"]
                await llm.wait_for_requests(1)  # running, in its LLM call
            # the connection is closed: the server cancels the run
            ended = (await client.get(f"{run_path}/wait", params={"timeout_s": 5})).json()
        events = await follow(client, ended["id"])

    assert ended["status"] == "cancelled"
    assert_one_terminal_at_the_end(events, "run.cancelled")


async def test_a_dropped_stream_post_leaves_its_run_going_by_default() -> None:
    async with (
        FakeLLMServer([FakeReply.finish("still here", hang=True)]) as llm,
        served_app(e2e_settings(llm)) as (_, client),
    ):
        with anyio.fail_after(10):
            async with client.stream("POST", "/runs", json={"task": "t", "stream": True}) as r:
                run_path = r.headers["Content-Location"]
                await llm.wait_for_requests(1)
            assert (await client.get(run_path)).json()["status"] == "running"
            llm.release()
            ended = (await client.get(f"{run_path}/wait", params={"timeout_s": 5})).json()

    assert ended["status"] == "completed"
    assert ended["result"]["answer"] == "still here"
